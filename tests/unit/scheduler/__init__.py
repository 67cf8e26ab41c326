"""Tests of ai_scheduler/scheduler/."""
