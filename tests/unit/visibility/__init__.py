"""Tests of ai_scheduler/visibility/."""
