"""Tests of ai_scheduler/status/."""
