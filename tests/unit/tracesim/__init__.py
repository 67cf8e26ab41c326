"""Tests of ai_scheduler/tracesim/."""
