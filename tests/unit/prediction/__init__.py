"""Tests of ai_scheduler/prediction/."""
