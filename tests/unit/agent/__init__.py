"""Tests of ai_scheduler/agent/."""
