"""Tests of ai_scheduler/sim/."""
