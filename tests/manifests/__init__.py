"""Tests of deploy/: the manifests, the dashboard and the alerting rules."""
