"""Where the tests find the project's files, whatever folder a test module sits in."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent
DATA = TESTS / "data"  # sample traces, clusters and CRDs
ROOT = TESTS.parent  # the repository: deploy/, benchmarks/, pyproject.toml
