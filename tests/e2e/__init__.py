"""End-to-end tests: the real daemon against each backend (conftest.py's `--backend`)."""
