"""Tests of ai_scheduler/api/."""
