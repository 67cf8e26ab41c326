"""Tests of ai_scheduler/daemon/."""
