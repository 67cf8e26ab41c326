"""Fuzz tests of everything the scheduler reads from the cluster and its config."""
