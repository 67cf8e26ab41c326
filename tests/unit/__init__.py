"""Unit tests in folders that mirror the packages of ai_scheduler/ (its top-level modules: here)."""
