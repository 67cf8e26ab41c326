import sys

from ai_scheduler.cli import main

sys.exit(main())
