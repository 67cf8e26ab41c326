"""Budgets of work and memory that fail the suite when broken (beside benchmarks/)."""
