"""Tests of ai_scheduler/scheduler/framework/plugins/."""
