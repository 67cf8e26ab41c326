"""Tests of ai_scheduler/config/."""
