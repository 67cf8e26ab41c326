"""Tests of ai_scheduler/trace/."""
