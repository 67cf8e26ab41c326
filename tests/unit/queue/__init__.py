"""Tests of ai_scheduler/queue/."""
