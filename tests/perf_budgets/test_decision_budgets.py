"""Work budgets of a scheduling attempt that do not depend on timing: they fail when the work grows.

The counts come from benchmarks/budgets.py (the guard's own figures): the scheduling core in-process
(the trace simulator's, placement mode) over the benchmarks' kwok-style nodes and pods, with counting
wrappers around the real plugin and tenancy functions (each calls through; nothing is replaced). A
budget is an upper bound at today's value: less work passes, more fails. Timings are not tested here;
benchmarks/guard.py compares those.
"""

from __future__ import annotations

import sys
from typing import Any

import pytest
from paths import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))

from budgets import decision_counts, gang_counts

from ai_scheduler.cache.tenancy import Tenancy
from ai_scheduler.config import default_config
from ai_scheduler.scheduler.framework.plugins import build_filters, build_scores
from ai_scheduler.scheduler.gang import GangScheduler


def _profile_sizes() -> tuple[int, int]:
    """How many Filter and (weighted) Score plugins the default profile runs."""
    config = default_config()
    profile = config.profiles[0]
    return len(build_filters(config, profile)), sum(1 for s in build_scores(profile) if s.weight > 0)


@pytest.fixture(scope="module")
def decision() -> dict[str, Any]:
    return decision_counts(nodes=1000, pods=200, seed=0)


@pytest.fixture(scope="module")
def gang() -> dict[str, Any]:
    return gang_counts(nodes=1000, gangs=20, size=8, zones=10, seed=0)


def test_the_counts_are_of_attempts_that_placed_every_pod(
    decision: dict[str, Any], gang: dict[str, Any]
) -> None:
    assert (decision["attempts"], decision["placed"]) == (200, 200)
    assert (gang["attempts"], gang["placed"]) == (20, 160)


def test_the_same_seed_gives_the_same_counts(decision: dict[str, Any]) -> None:
    assert decision_counts(nodes=1000, pods=200, seed=0) == decision


def test_a_pod_attempt_runs_each_plugin_once_over_one_window(decision: dict[str, Any]) -> None:
    """At 1,000 empty nodes a pod's search finds its 420 feasible nodes (kube-scheduler's adaptive
    share, 42%) in one window: each Filter (and PreFilter) runs once, each Score once, one Framework
    pass; the pod's tenant is resolved once between its arrival and its binding (the other look-ups
    are answered by the memo)."""
    filters, scores = _profile_sizes()
    per = decision["per_attempt"]
    assert per["framework_schedule"] == 1
    assert per["filter_runs"] <= filters  # 14 today
    assert per["prefilter_runs"] <= filters
    assert per["score_runs"] <= scores  # 7 today
    assert per.get("feasible_rows", 0) == 0  # no whole-cluster pass for a pod that fits
    assert per["tenant_resolve"] <= 1
    assert per["tenant_of"] <= 4
    assert decision["nodes_evaluated_per_attempt"] <= 420


def test_a_gang_attempt_of_identical_members_stays_within_its_budget(gang: dict[str, Any]) -> None:
    """An 8-pod gang of identical members (benchmarks/gang.py's) on 1,000 nodes in 10 zones: placed in
    the first zone tried (100 nodes), so every member's search looks at that zone's 100 nodes.

    Identical members are filtered and scored once per attempt (scheduler/gang_shapes.py): each member
    still runs the Framework's own search (one pass each, its PreFilters, the same windows and
    tie-breaks) but reads the shape's verdicts and scores; a placement re-filters and re-scores only the
    row it took. So the Filter runs stay within one profile's worth (12 today, against 112 when every
    member ran every filter) and the Score runs within about two per scorer (16 today, against 56)."""
    filters, scores = _profile_sizes()
    size = 8
    per = gang["per_attempt"]
    assert scores < 16 <= 3 * scores  # the score budget below: about two runs per scorer
    assert per["framework_schedule"] <= size  # the search itself, per member, over cached verdicts
    assert per["filter_runs"] <= filters  # 12 today
    assert per["prefilter_runs"] <= size * filters
    assert per["score_runs"] <= 16
    assert per.get("feasible_rows", 0) == 0
    assert per["tenant_resolve"] <= size  # one per member
    assert per["tenant_of"] <= 26
    assert gang["nodes_evaluated_per_attempt"] <= size * 100


def test_the_counters_see_work_that_is_added(monkeypatch: pytest.MonkeyPatch) -> None:
    """The budgets can fail: without the tenant memo every look-up resolves, and an extra whole-cluster
    filter pass in a gang attempt shows as one more `feasible_rows` and one more run of each filter."""
    monkeypatch.setattr(Tenancy, "tenant_of", lambda self, pod: self._resolve(pod))
    assert decision_counts(nodes=200, pods=20, seed=0)["per_attempt"]["tenant_resolve"] == 4
    monkeypatch.undo()
    real_try = GangScheduler._try

    def with_extra_pass(self: GangScheduler, gang: Any, members: Any, needed: int, framework: Any,
                        *rest: Any) -> Any:
        framework.feasible_rows(members[0].pod)
        return real_try(self, gang, members, needed, framework, *rest)

    before = gang_counts(nodes=200, gangs=4, size=8, zones=10, seed=0)["per_attempt"]
    monkeypatch.setattr(GangScheduler, "_try", with_extra_pass)
    filters, _ = _profile_sizes()
    per = gang_counts(nodes=200, gangs=4, size=8, zones=10, seed=0)["per_attempt"]
    assert per["feasible_rows"] == 1
    assert per["filter_runs"] == before["filter_runs"] + filters
