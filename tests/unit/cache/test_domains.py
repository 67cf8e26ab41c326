"""Logical domains: their nodes by selector or name (cache/domains.py), what they keep off
(scheduler/domains.py), and a Task's placement in one (cache/tasks.py)."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from builders import Node, Pod, Task

from ai_scheduler.cache.cache import SchedulerCache
from ai_scheduler.cache.domains import DOMAIN_LABEL, Domain, DomainTable
from ai_scheduler.cache.tasks import TaskSpec, reconcile
from ai_scheduler.log import JsonLogger
from ai_scheduler.scheduler.domains import KeptDomains
from ai_scheduler.scheduler.reservation import Reservation, Reserver
from ai_scheduler.scheduler.runtimes import AnnotatedRunTimes


def domain(name: str, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": spec}


def cluster() -> SchedulerCache:
    cache = SchedulerCache()
    for name, pool in (("big-0", "big"), ("big-1", "big"), ("small-0", "small")):
        cache.set_node(Node(name, gpus=8).labels({"pool": pool}).record())
    return cache


def names(cache: SchedulerCache, mask: np.ndarray | None) -> list[str]:
    assert mask is not None
    return sorted(cache.row_names[row] for row in np.flatnonzero(mask))


def test_a_domain_holds_the_nodes_its_selector_or_its_list_names_and_follows_their_labels() -> None:
    cache = cluster()
    table = DomainTable(cache)
    by_label = {"matchLabels": {"pool": "big"}}
    assert table.apply("ADDED", domain("big", nodeSelector=by_label, nodes=["small-0"]))
    assert names(cache, table.mask("big")) == ["big-0", "big-1", "small-0"]
    table.apply("MODIFIED", domain("big", nodeSelector={"matchExpressions": [
        {"key": "pool", "operator": "In", "values": ["big"]}]}))
    assert names(cache, table.mask("big")) == ["big-0", "big-1"]
    cache.set_node(Node("big-1", gpus=8).labels({"pool": "retired"}).record())  # relabelled: it leaves
    assert names(cache, table.mask("big")) == ["big-0"]
    assert table.mask("nowhere") is None
    broken = Domain.from_api(domain("odd", keptFor={"minGpus": "many"}))
    assert broken.error == ("a Domain names its nodes: spec.nodeSelector or spec.nodes; "
                            "spec.keptFor.minGpus must be a whole number, got 'many'")


def kept(cache: SchedulerCache, reserver: Reserver | None = None) -> KeptDomains:
    reserver = reserver or Reserver(cache, JsonLogger(stream=None), backfill=True, min_wait=0.0)
    domains = KeptDomains(cache, reserver, AnnotatedRunTimes)
    domains.table.apply("ADDED", domain("big", nodeSelector={"matchLabels": {"pool": "big"}},
                                        keptFor={"minGpus": 16}))
    return domains


def test_a_kept_domain_keeps_off_what_it_is_not_kept_for() -> None:
    cache = cluster()
    domains = kept(cache)
    small = Pod("small", gpus=1).uid().record()
    [(mask, reason)] = domains.kept_off(small)
    assert names(cache, mask) == ["big-0", "big-1"]
    assert reason == "node(s) kept for gangs of at least 16 GPUs (domain big)"
    assert domains.kept_off(Pod("member", gpus=8).uid().record(), members=2) == []  # a gang of 16
    assert domains.kept_off(Pod("member", gpus=8).uid().record(), members=1) != []
    required = Pod("r", gpus=1).uid().meta(labels={DOMAIN_LABEL: "big"}).record()
    reasons = [reason for _, reason in domains.kept_off(required)]
    assert reasons == ["node(s) outside domain big",
                       "node(s) kept for gangs of at least 16 GPUs (domain big)"]
    lost = Pod("l", gpus=1).uid().meta(labels={DOMAIN_LABEL: "nowhere"}).record()
    [(mask, reason)] = [k for k in domains.kept_off(lost) if "does not exist" in k[1]]
    assert mask.all() and reason == "domain nowhere (label ai-scheduler.io/domain) does not exist"
    # With no Domain at all, a required one is still not met: kept off everywhere, never placed anyway.
    none = KeptDomains(cache, Reserver(cache, JsonLogger(stream=None), backfill=True), AnnotatedRunTimes)
    [(mask, reason)] = none.kept_off(lost)
    assert mask.all() and "does not exist" in reason
    assert none.kept_off(small) == []


def test_others_backfill_a_kept_domain_only_before_the_waiting_units_reservation_is_due() -> None:
    cache = cluster()
    reserver = Reserver(cache, JsonLogger(stream=None), backfill=True, min_wait=0.0)
    domains = kept(cache, reserver)
    now = time.time()  # the reservations' clock
    big0 = cache.row_of("big-0")
    reserver.current = Reservation("gang default/llm", frozenset({"u"}), (), [big0], ["big-0"], now + 600)
    quick = Pod("quick", gpus=1).uid().annotations({"ai-scheduler.io/estimated-runtime": "5m"}).record()
    slow = Pod("slow", gpus=1).uid().annotations({"ai-scheduler.io/estimated-runtime": "20m"}).record()
    assert domains.kept_off(quick) == []
    assert [reason for _, reason in domains.kept_off(slow)] == [
        "node(s) kept for gangs of at least 16 GPUs (domain big)"]


def test_a_task_runs_in_its_domain_required_or_preferred() -> None:
    task = Task("t").role("w", 2, gpus=1).spec(placement={"domain": "big"})
    pods = reconcile(TaskSpec.from_api(task.obj()), {}, [], 0.0).create
    assert {p["metadata"]["labels"][DOMAIN_LABEL] for p in pods} == {"big"}
    preferred = Task("t").role("w", 1, gpus=1).spec(placement={"domain": "big", "domainPolicy": "Preferred"})
    terms = {"big": Domain.from_api(domain("big", nodeSelector={"matchLabels": {"pool": "big"}})).terms()}
    [pod] = reconcile(TaskSpec.from_api(preferred.obj()), {}, [], 0.0, (), terms).create
    assert DOMAIN_LABEL not in pod["metadata"]["labels"]
    assert pod["spec"]["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"] == [
        {"weight": 100, "preference": {"matchExpressions": [
            {"key": "pool", "operator": "In", "values": ["big"]}]}}]
