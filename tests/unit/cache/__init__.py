"""Tests of ai_scheduler/cache/."""
