"""Filter and score plugins, directly and through Framework.schedule, against kube-scheduler's semantics.

Expected answers are worked out by hand from kube-scheduler's plugins
(nodename, nodeunschedulable, tainttoleration, nodeaffinity, noderesources
fit.go / least_allocated.go / most_allocated.go) and the v1 helpers they use.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pytest
from builders import Node, Pod

from ai_scheduler.cache.cache import SchedulerCache
from ai_scheduler.cache.records import NodeRecord, PodRecord
from ai_scheduler.cache.selectors import requirement_matches
from ai_scheduler.config import default_config
from ai_scheduler.scheduler.framework.interface import ScorePlugin, default_normalize, position_in_window
from ai_scheduler.scheduler.framework.plugins import build_filters
from ai_scheduler.scheduler.framework.plugins.node_affinity import (
    NodeAffinityFilter,
    NodeAffinityScore,
    term_matches,
)
from ai_scheduler.scheduler.framework.plugins.node_name import NodeName
from ai_scheduler.scheduler.framework.plugins.node_ready import NodeReady
from ai_scheduler.scheduler.framework.plugins.node_unschedulable import NodeUnschedulable
from ai_scheduler.scheduler.framework.plugins.resource_allocation import LeastAllocated, MostAllocated
from ai_scheduler.scheduler.framework.plugins.resource_fit import NodeResourcesFit
from ai_scheduler.scheduler.framework.plugins.taint_toleration import (
    TaintTolerationFilter,
    TaintTolerationScore,
)
from ai_scheduler.scheduler.framework.runtime import (
    Framework,
    fit_error_message,
    num_feasible_nodes_to_find,
    top_scores,
)

Gi, Mi = 2**30, 2**20
GPU = "nvidia.com/gpu"
AFFINITY_REASON = "node(s) didn't match Pod's node affinity/selector"
RESOURCES = {"cpu": 1, "memory": 1, GPU: 1}


# --------------------------------------------------------------------------- builders
def table_node_json(name: str, *, cpu: str = "4", memory: str = "8Gi", pods: str = "110",
                    gpu: str | None = None,
                    labels: dict[str, str] | None = None, taints: Sequence[tuple[str, str, str]] = (),
                    unschedulable: bool = False, ready: str | None = "True", rv: str = "1") -> dict[str, Any]:
    gpus = {GPU: gpu} if gpu is not None else {}
    return (Node.bare(name).labels(labels or {}).rv(rv)
            .spec(taints=[{"key": k, "value": v, "effect": e} for k, v, e in taints],
                  unschedulable=unschedulable)
            .status(allocatable={"cpu": cpu, "memory": memory, "pods": pods, **gpus},
                    conditions=[] if ready is None else [{"type": "Ready", "status": ready}]).obj())


def table_node(name: str, **kw: Any) -> NodeRecord:
    return NodeRecord.from_api(table_node_json(name, **kw))


def table_pod(name: str = "p", *, cpu: str | None = None, memory: str | None = None, gpu: str | None = None,
              tolerations: Iterable[dict[str, str]] = (), node_selector: dict[str, str] | None = None,
              affinity: dict[str, Any] | None = None, node_name: str = "", containers: int = 1,
              **spec_extra: Any) -> PodRecord:
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory), (GPU, gpu)) if v is not None}
    pod = Pod.bare(name).uid().rv("1").container("c0", "i", requests=requests or None)
    for i in range(1, containers):
        pod.container(f"c{i}", "i")
    chosen = {k: v for k, v in (("nodeSelector", node_selector), ("affinity", affinity)) if v}
    return (pod.spec(tolerations=list(tolerations), **spec_extra).spec(**chosen).on(node_name)
            .phase("Running" if node_name else "Pending").record())


def record(cache: SchedulerCache, name: str) -> NodeRecord:
    rec = cache.node_record(name)
    assert rec is not None, f"no node {name}"
    return rec


def cluster(*nodes: NodeRecord, initial_rows: int = 64) -> SchedulerCache:
    cache = SchedulerCache(initial_rows=initial_rows)
    for rec in nodes:
        cache.set_node(rec)
    return cache


def framework(cache: SchedulerCache, scores: Sequence[ScorePlugin] = (), seed: int = 1,
              filters: Sequence[Any] | None = None, percentage: int = 0) -> Framework:
    config = default_config()
    chosen = list(filters) if filters is not None else build_filters(config, config.profiles[0])
    return Framework("default-scheduler", chosen, scores, cache, rng=random.Random(seed),
                     percentage_of_nodes_to_score=percentage)


def large_cluster(count: int, **kw: Any) -> SchedulerCache:
    """`count` alike nodes n0, n1, ... in rows 0, 1, ... (the search order)."""
    cache = cluster(*(table_node(f"n{i}", **kw) for i in range(count)), initial_rows=count)
    assert [cache.row_of(f"n{i}") for i in (0, count - 1)] == [0, count - 1]
    return cache


class RowsScored(ScorePlugin):
    """A score plugin with no opinion that notes which rows each cycle scored."""

    name = "RowsScored"

    def __init__(self) -> None:
        super().__init__(1)
        self.seen: list[list[int]] = []

    def score(self, pod: PodRecord, cache: SchedulerCache, rows: np.ndarray, static: Any) -> None:
        self.seen.append(rows.tolist())
        return None


def feasible_names(fw: Framework, p: PodRecord) -> set[str]:
    rows, _ = fw.feasible_rows(p)
    return {fw.cache.row_names[int(r)] for r in rows}


def rows_of(cache: SchedulerCache, names: Sequence[str]) -> np.ndarray:
    return np.array([cache.row_of(n) for n in names], dtype=np.int64)


def scores_of(plugin: ScorePlugin, fw: Framework, p: PodRecord, names: Sequence[str]) -> list[int] | None:
    values = plugin.score(p, fw.cache, rows_of(fw.cache, names), fw.static)
    return None if values is None else [int(v) for v in values]


def bind(cache: SchedulerCache, name: str, node_name: str, **kw: Any) -> None:
    cache.set_pod(table_pod(name, node_name=node_name, **kw))


def tol(key: str = "", operator: str = "Equal", value: str = "", effect: str = "") -> dict[str, str]:
    return {"key": key, "operator": operator, "value": value, "effect": effect}


# --------------------------------------------------------------------------- NodeName
def test_node_name_only_the_named_node() -> None:
    fw = framework(cluster(table_node("a"), table_node("b"), table_node("c")))
    p = table_pod(node_name="b")
    decision = fw.schedule(p)
    assert decision.node == "b" and decision.feasible == 1
    assert decision.reasons == {"node(s) didn't match the requested node name": 2}


def test_node_name_missing_node() -> None:
    decision = framework(cluster(table_node("a"), table_node("b"))).schedule(table_pod(node_name="zz"))
    assert decision.node is None
    assert decision.message == "0/2 nodes are available: 2 node(s) didn't match the requested node name."


def test_node_name_direct() -> None:
    plugin = NodeName()
    assert plugin.signature(table_pod()) is None
    assert plugin.check(table_pod(node_name="a"), table_node("a")) is None
    assert plugin.check(table_pod(node_name="a"),
                        table_node("b")) == "node(s) didn't match the requested node name"


# --------------------------------------------------------------------------- NodeUnschedulable
@pytest.mark.parametrize(
    ("tolerations", "fits"),
    [
        ([], False),
        ([tol("node.kubernetes.io/unschedulable", "Exists", effect="NoSchedule")], True),
        ([tol("node.kubernetes.io/unschedulable", "Exists")], True),                   # empty effect: all
        ([tol("node.kubernetes.io/unschedulable", "Equal", "", "NoSchedule")], True),  # taint value is ""
        ([tol("node.kubernetes.io/unschedulable", "Equal", "x", "NoSchedule")], False),
        ([tol("node.kubernetes.io/unschedulable", "Exists", effect="NoExecute")], False),
        ([tol("", "Exists")], True),  # tolerates everything
        ([tol("other", "Exists", effect="NoSchedule")], False),
    ],
)
def test_node_unschedulable(tolerations: list[dict[str, str]], fits: bool) -> None:
    fw = framework(cluster(table_node("cordoned", unschedulable=True), table_node("open", cpu="1")),
                   filters=[NodeUnschedulable()])
    p = table_pod(tolerations=tolerations)
    assert feasible_names(fw, p) == ({"cordoned", "open"} if fits else {"open"})
    assert NodeUnschedulable().check(p, table_node("x", unschedulable=False)) is None
    if not fits:
        assert fw.schedule(p).reasons == {"node(s) were unschedulable": 1}


# --------------------------------------------------------------------------- NodeReady
@pytest.mark.parametrize(
    ("ready", "tolerations", "fits"),
    [
        ("True", [], True),
        ("False", [], False),
        ("Unknown", [], False),
        (None, [], False),  # no Ready condition at all: Unknown
        ("False", [tol("node.kubernetes.io/not-ready", "Exists", effect="NoSchedule")], True),
        ("False", [tol("node.kubernetes.io/not-ready", "Exists")], True),
        # the default NoExecute toleration (tolerationSeconds) does not cover NoSchedule
        ("False", [tol("node.kubernetes.io/not-ready", "Exists", effect="NoExecute")], False),
        ("False", [tol("node.kubernetes.io/unreachable", "Exists", effect="NoSchedule")], False),
        ("Unknown", [tol("node.kubernetes.io/unreachable", "Exists", effect="NoSchedule")], True),
        (None, [tol("node.kubernetes.io/unreachable", "Exists")], True),
        ("Unknown", [tol("node.kubernetes.io/not-ready", "Exists", effect="NoSchedule")], False),
        ("Unknown", [tol("", "Exists")], True),
    ],
)
def test_node_ready(ready: str | None, tolerations: list[dict[str, str]], fits: bool) -> None:
    fw = framework(cluster(table_node("n", ready=ready), table_node("ok")), filters=[NodeReady()])
    p = table_pod(tolerations=tolerations)
    assert feasible_names(fw, p) == ({"n", "ok"} if fits else {"ok"})
    assert (NodeReady().check(p, table_node("n", ready=ready)) is None) is fits
    if not fits:
        assert fw.feasible_rows(p)[1] == {"node(s) were not ready": 1}


# --------------------------------------------------------------------------- TaintToleration filter
def test_hard_taints_must_be_tolerated_soft_ones_never_filter() -> None:
    fw = framework(cluster(table_node("ns", taints=[("k", "v", "NoSchedule")]),
                           table_node("ne", taints=[("k", "v", "NoExecute")]),
                           table_node("soft", taints=[("k", "v", "PreferNoSchedule")]),
                           table_node("plain")))
    decision = fw.schedule(table_pod())
    assert decision.feasible == 2
    assert decision.reasons == {"node(s) had untolerated taint {k: v}": 2}
    assert feasible_names(fw, table_pod()) == {"soft", "plain"}
    no_schedule = [tol("k", "Equal", "v", "NoSchedule")]
    assert feasible_names(fw, table_pod(tolerations=no_schedule)) == {"ns", "soft", "plain"}
    every = {"ns", "ne", "soft", "plain"}
    assert feasible_names(fw, table_pod(tolerations=[tol("k", "Equal", "v")])) == every
    assert feasible_names(fw, table_pod(tolerations=[tol("k", "Equal", "w")])) == {"soft", "plain"}
    assert feasible_names(fw, table_pod(tolerations=[tol("k", "Exists")])) == {"ns", "ne", "soft", "plain"}
    assert feasible_names(fw, table_pod(tolerations=[tol("", "Exists")])) == {"ns", "ne", "soft", "plain"}
    every_no_execute = [tol("", "Exists", effect="NoExecute")]
    assert feasible_names(fw, table_pod(tolerations=every_no_execute)) == {"ne", "soft", "plain"}


def test_untolerated_taint_message_names_the_first_untolerated_taint() -> None:
    n = table_node("n", taints=[("a", "1", "NoSchedule"), ("b", "2", "NoExecute"), ("c", "3", "NoSchedule")])
    plugin = TaintTolerationFilter()
    assert plugin.check(table_pod(), n) == "node(s) had untolerated taint {a: 1}"
    assert plugin.check(table_pod(tolerations=[tol("a", "Exists")]),
                        n) == "node(s) had untolerated taint {b: 2}"
    assert plugin.check(table_pod(tolerations=[tol("a", "Exists"), tol("b", "Equal", "2")]), n) == (
        "node(s) had untolerated taint {c: 3}")
    assert plugin.check(table_pod(tolerations=[tol("", "Exists")]), n) is None

    fw = framework(cluster(n, table_node("dedicated", taints=[("dedicated", "gpu", "NoSchedule")])))
    assert fw.schedule(table_pod(tolerations=[tol("a", "Exists")])).message == (
        "0/2 nodes are available: 1 node(s) had untolerated taint {b: 2}, "
        "1 node(s) had untolerated taint {dedicated: gpu}.")


# --------------------------------------------------------------------------- TaintToleration score
def test_prefer_no_schedule_lowers_the_score() -> None:
    fw = framework(cluster(table_node("clean"), table_node("one", taints=[("a", "", "PreferNoSchedule")]),
                           table_node("two",
                                      taints=[("a", "", "PreferNoSchedule"), ("b", "x", "PreferNoSchedule"),
                                               ("c", "y", "NoSchedule")])))
    plugin = TaintTolerationScore(1)
    names = ["clean", "one", "two"]
    # untolerated PreferNoSchedule counts 0, 1, 2 -> reverse-normalised by the max: 100, 50, 0
    assert scores_of(plugin, fw, table_pod(), names) == [100, 50, 0]
    # a toleration with empty effect or PreferNoSchedule counts; NoSchedule-only does not
    assert scores_of(plugin, fw, table_pod(tolerations=[tol("a", "Exists")]), names) == [100, 100, 0]
    assert scores_of(plugin, fw, table_pod(tolerations=[tol("a", "Exists", effect="PreferNoSchedule")]),
                     names) == [100, 100, 0]
    assert scores_of(plugin, fw, table_pod(tolerations=[tol("a", "Exists", effect="NoSchedule")]),
                     names) == [100, 50, 0]
    assert scores_of(plugin, fw, table_pod(tolerations=[tol("", "Exists")]), names) == [100, 100, 100]
    # normalisation is over the scored rows only
    assert scores_of(plugin, fw, table_pod(), ["one", "two"]) == [50, 0]
    assert scores_of(plugin, fw, table_pod(), ["clean", "one"]) == [100, 0]


def test_prefer_no_schedule_steers_the_pod() -> None:
    fw = framework(cluster(table_node("tainted", taints=[("spot", "true", "PreferNoSchedule")]),
                           table_node("clean")),
                   scores=[TaintTolerationScore(1)])
    for i in range(5):
        decision = fw.schedule(table_pod(f"p{i}"))
        assert decision.node == "clean" and decision.feasible == 2


def test_default_normalize() -> None:
    assert default_normalize(np.array([0, 3, 6]), False).tolist() == [0, 50, 100]
    assert default_normalize(np.array([0, 3, 6]), True).tolist() == [100, 50, 0]
    assert default_normalize(np.array([1, 2, 3]), False).tolist() == [33, 66, 100]
    assert default_normalize(np.array([0, 0]), False).tolist() == [0, 0]
    assert default_normalize(np.array([0, 0]), True).tolist() == [100, 100]


# --------------------------------------------------------------------------- NodeAffinity
def req(key: str, operator: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": operator, "values": list(values)}


def required(*terms: dict[str, Any]) -> dict[str, Any]:
    selector = {"nodeSelectorTerms": list(terms)}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": selector}}


def preferred(*items: tuple[int, dict[str, Any]]) -> dict[str, Any]:
    return {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": w, "preference": term} for w, term in items]}}


@pytest.mark.parametrize(
    ("requirement", "labels", "matches"),
    [
        (req("zone", "In", "a", "b"), {"zone": "b"}, True),
        (req("zone", "In", "a", "b"), {"zone": "c"}, False),
        (req("zone", "In", "a"), {}, False),
        (req("zone", "NotIn", "a"), {"zone": "b"}, True),
        (req("zone", "NotIn", "a"), {"zone": "a"}, False),
        (req("zone", "NotIn", "a"), {}, True),           # NotIn matches an absent key
        (req("zone", "Exists"), {"zone": ""}, True),
        (req("zone", "Exists"), {}, False),
        (req("zone", "DoesNotExist"), {}, True),
        (req("zone", "DoesNotExist"), {"zone": "a"}, False),
        (req("gen", "Gt", "5"), {"gen": "10"}, True),     # numeric, not lexicographic ("10" < "5" as text)
        (req("gen", "Gt", "5"), {"gen": "5"}, False),
        (req("gen", "Gt", "5"), {}, False),
        (req("gen", "Gt", "5"), {"gen": "abc"}, False),   # non-integer label: no match
        (req("gen", "Gt", "5"), {"gen": "1_0"}, False),   # Go's ParseInt rejects underscores
        (req("gen", "Gt", "5"), {"gen": "99999999999999999999"}, False),  # beyond int64
        (req("gen", "Gt", "-1"), {"gen": "0"}, True),
        (req("gen", "Lt", "5"), {"gen": "4"}, True),
        (req("gen", "Lt", "5"), {"gen": "10"}, False),
        (req("gen", "Lt", "5"), {"gen": "4.5"}, False),
        (req("gen", "Lt", "x"), {"gen": "4"}, False),     # non-integer bound
        (req("zone", "Bogus", "a"), {"zone": "a"}, False),
    ],
)
def test_requirement_operators(requirement: dict[str, Any], labels: dict[str, str], matches: bool) -> None:
    assert requirement_matches(requirement, labels) is matches
    # and through the filter, as the only term of a required affinity
    n = table_node("n", labels=labels)
    reason = NodeAffinityFilter().check(table_pod(affinity=required({"matchExpressions": [requirement]})), n)
    assert (reason is None) is matches


def test_node_selector_requires_every_pair() -> None:
    fw = framework(cluster(table_node("both", labels={"gpu": "a100", "zone": "x"}),
                           table_node("gpu-only", labels={"gpu": "a100"}),
                           table_node("wrong", labels={"gpu": "v100", "zone": "x"})))
    p = table_pod(node_selector={"gpu": "a100", "zone": "x"})
    decision = fw.schedule(p)
    assert decision.node == "both"
    assert decision.reasons == {AFFINITY_REASON: 2}
    assert feasible_names(fw, table_pod(node_selector={"gpu": "a100"})) == {"both", "gpu-only"}
    # an empty selector value requires the key to be present with an empty value
    assert feasible_names(fw, table_pod(node_selector={"zone": ""})) == set()


def test_required_terms_are_ored_and_expressions_anded() -> None:
    fw = framework(cluster(table_node("a", labels={"zone": "a"}),
                           table_node("a-gpu", labels={"zone": "a", "gpu": "1"}),
                           table_node("b", labels={"zone": "b"}),
                           table_node("c", labels={"zone": "c", "gpu": "1"})))
    ored = required({"matchExpressions": [req("zone", "In", "a")]},
                    {"matchExpressions": [req("zone", "In", "b")]})
    assert feasible_names(fw, table_pod(affinity=ored)) == {"a", "a-gpu", "b"}
    anded = required({"matchExpressions": [req("zone", "In", "a", "c"), req("gpu", "Exists")]})
    assert feasible_names(fw, table_pod(affinity=anded)) == {"a-gpu", "c"}
    mixed = required({"matchExpressions": [req("zone", "In", "a"), req("gpu", "DoesNotExist")]},
                     {"matchExpressions": [req("zone", "NotIn", "a", "b")]})
    assert feasible_names(fw, table_pod(affinity=mixed)) == {"a", "c"}


def test_node_selector_and_required_affinity_must_both_match() -> None:
    fw = framework(cluster(table_node("a", labels={"zone": "a", "disk": "ssd"}),
                           table_node("b", labels={"zone": "b", "disk": "ssd"}),
                           table_node("a-hdd", labels={"zone": "a", "disk": "hdd"})))
    p = table_pod(node_selector={"disk": "ssd"},
                  affinity=required({"matchExpressions": [req("zone", "In", "a")]}))
    assert feasible_names(fw, p) == {"a"}


def test_match_fields_metadata_name() -> None:
    fw = framework(cluster(table_node("a"), table_node("b"), table_node("c")))
    by_name = required({"matchFields": [req("metadata.name", "In", "b")]})
    assert feasible_names(fw, table_pod(affinity=by_name)) == {"b"}
    not_name = required({"matchFields": [req("metadata.name", "NotIn", "b")]})
    assert feasible_names(fw, table_pod(affinity=not_name)) == {"a", "c"}
    # fields and labels in one term are ANDed
    fw2 = framework(cluster(table_node("a", labels={"zone": "x"}), table_node("b", labels={"zone": "y"})))
    both = required({"matchFields": [req("metadata.name", "In", "a")],
                     "matchExpressions": [req("zone", "In", "y")]})
    assert feasible_names(fw2, table_pod(affinity=both)) == set()


def test_empty_term_matches_nothing() -> None:
    fw = framework(cluster(table_node("a", labels={"zone": "a"}), table_node("b", labels={"zone": "b"})))
    assert feasible_names(fw, table_pod(affinity=required({}))) == set()
    assert feasible_names(fw, table_pod(affinity=required({"matchExpressions": []}))) == set()
    one_valid = required({}, {"matchExpressions": [req("zone", "In", "b")]})
    assert feasible_names(fw, table_pod(affinity=one_valid)) == {"b"}
    assert not term_matches({}, table_node("a"))
    decision = fw.schedule(table_pod(affinity=required({})))
    assert decision.message == f"0/2 nodes are available: 2 {AFFINITY_REASON}."


def test_preferred_weights_summed_and_normalised_by_the_best_node() -> None:
    fw = framework(cluster(table_node("a-gpu", labels={"zone": "a", "gpu": "1"}),
                           table_node("a", labels={"zone": "a"}),
                           table_node("b-gpu", labels={"zone": "b", "gpu": "1"}),
                           table_node("c", labels={"zone": "c"})))
    p = table_pod(affinity=preferred((20, {"matchExpressions": [req("zone", "In", "a")]}),
                               (60, {"matchExpressions": [req("gpu", "Exists")]}),
                               (0, {"matchExpressions": [req("zone", "In", "c")]}),   # weight 0: ignored
                               (50, {})))                                            # empty term: no match
    names = ["a-gpu", "a", "b-gpu", "c"]
    plugin = NodeAffinityScore(1)
    assert [plugin.raw_score(p, record(fw.cache, n)) for n in names] == [80, 20, 60, 0]
    assert scores_of(plugin, fw, p, names) == [100, 25, 75, 0]
    assert scores_of(plugin, fw, p, ["a", "c"]) == [100, 0]
    assert scores_of(plugin, fw, table_pod(), names) is None  # no preferences: no opinion

    fw_scored = framework(fw.cache, scores=[NodeAffinityScore(1)])
    assert fw_scored.schedule(p).node == "a-gpu"


def test_preferred_affinity_does_not_filter() -> None:
    fw = framework(cluster(table_node("a", labels={"zone": "a"}), table_node("b")))
    p = table_pod(affinity=preferred((10, {"matchExpressions": [req("zone", "In", "zz")]})))
    assert feasible_names(fw, p) == {"a", "b"}


# --------------------------------------------------------------------------- NodeResourcesFit
def test_each_insufficient_resource_is_counted_on_the_same_node() -> None:
    fw = framework(cluster(table_node("small", cpu="2", memory="4Gi"),
                           table_node("mid", cpu="4", memory="4Gi")))
    decision = fw.schedule(table_pod(cpu="3", memory="8Gi"))
    assert decision.node is None
    assert decision.reasons == {"Insufficient cpu": 1, "Insufficient memory": 2}
    assert decision.message == "0/2 nodes are available: 1 Insufficient cpu, 2 Insufficient memory."


def test_usage_of_bound_pods_is_subtracted_and_the_boundary_fits() -> None:
    cache = cluster(table_node("n", cpu="4", memory="8Gi"))
    bind(cache, "old", "n", cpu="3", memory="6Gi")
    fw = framework(cache)
    assert fw.schedule(table_pod("fits", cpu="1", memory="2Gi")).node == "n"  # exactly the free amount
    d = fw.schedule(table_pod("big", cpu="1001m", memory="2Gi"))
    assert d.node is None and d.reasons == {"Insufficient cpu": 1}
    d = fw.schedule(table_pod("mem", cpu="1", memory="2049Mi"))
    assert d.reasons == {"Insufficient memory": 1}


def test_extended_resource_missing_on_node_is_insufficient() -> None:
    fw = framework(cluster(table_node("cpu1"), table_node("cpu2")))
    decision = fw.schedule(table_pod(gpu="1"))
    assert decision.node is None
    assert decision.message == f"0/2 nodes are available: 2 Insufficient {GPU}."

    fw = framework(cluster(table_node("cpu1"), table_node("gpu", gpu="2"), table_node("cpu2")))
    decision = fw.schedule(table_pod(gpu="1"))
    assert decision.node == "gpu"
    assert decision.reasons == {f"Insufficient {GPU}": 2}
    assert fw.schedule(table_pod(gpu="3")).reasons == {f"Insufficient {GPU}": 3}


def test_too_many_pods() -> None:
    cache = cluster(table_node("full", pods="2"), table_node("free", pods="3"))
    bind(cache, "a", "full")
    bind(cache, "b", "full")
    bind(cache, "c", "free")
    fw = framework(cache)
    decision = fw.schedule(table_pod("x"))
    assert decision.node == "free"
    assert decision.reasons == {"Too many pods": 1}
    bind(cache, "d", "free")
    bind(cache, "e", "free")
    decision = fw.schedule(table_pod("y", cpu="100"))
    assert decision.message == "0/2 nodes are available: 2 Insufficient cpu, 2 Too many pods."


def test_pod_without_requests_fits_a_full_node_with_a_free_slot() -> None:
    cache = cluster(table_node("n", cpu="1", memory="1Gi", pods="2"))
    bind(cache, "hog", "n", cpu="1", memory="1Gi")
    fw = framework(cache)
    decision = fw.schedule(table_pod("empty"))
    assert decision.node == "n" and decision.reasons == {}
    assert fw.schedule(table_pod("small", cpu="1m")).reasons == {"Insufficient cpu": 1}


def test_init_containers_and_overhead_are_counted() -> None:
    fw = framework(cluster(table_node("n", cpu="2", memory="8Gi")))
    init_container = {"name": "i", "image": "i", "resources": {"requests": {"cpu": "3"}}}
    init = table_pod("init", cpu="1", initContainers=[init_container])
    assert init.requests["cpu"] == 3000
    assert fw.schedule(init).reasons == {"Insufficient cpu": 1}
    overhead = table_pod("oh", cpu="2", overhead={"cpu": "100m"})
    assert fw.schedule(overhead).reasons == {"Insufficient cpu": 1}
    assert fw.schedule(table_pod("ok", cpu="1900m", overhead={"cpu": "100m"})).node == "n"


def test_resource_fit_direct() -> None:
    cache = cluster(table_node("a", cpu="1"), table_node("b", cpu="2"))
    fw = framework(cache)
    reasons = dict(NodeResourcesFit().run(table_pod(cpu="1500m"), cache, cache.valid.copy(), fw.static))
    rows = rows_of(cache, ["a", "b"])
    assert reasons["Insufficient cpu"][rows].tolist() == [True, False]
    assert reasons["Too many pods"][rows].tolist() == [False, False]


# --------------------------------------------------------------------------- Least/MostAllocated
def busy_and_empty() -> SchedulerCache:
    cache = cluster(table_node("busy", cpu="4", memory="8Gi"), table_node("empty", cpu="4", memory="8Gi"))
    bind(cache, "old", "busy", cpu="3", memory="6Gi")
    return cache


def test_least_and_most_allocated_scores_by_hand() -> None:
    fw = framework(busy_and_empty())
    p = table_pod(cpu="1", memory="1Gi")
    # busy: cpu (4000-4000)*100/4000 = 0, memory (8-7)*100/8 = 12 -> (0+12)/2 = 6
    # empty: cpu 3000*100/4000 = 75, memory 7*100/8 = 87 -> (75+87)/2 = 81
    assert scores_of(LeastAllocated(1, RESOURCES), fw, p, ["busy", "empty"]) == [6, 81]
    # busy: cpu 100, memory 87 -> 93; empty: cpu 25, memory 12 -> 18
    assert scores_of(MostAllocated(1, RESOURCES), fw, p, ["busy", "empty"]) == [93, 18]
    # resource weights: cpu counted three times as much as memory
    assert scores_of(LeastAllocated(1, {"cpu": 3, "memory": 1}), fw, p, ["busy", "empty"]) == [3, 78]


def test_least_allocated_spreads_most_allocated_packs() -> None:
    cache = busy_and_empty()
    least = framework(cache, scores=[LeastAllocated(1, RESOURCES)])
    most = framework(cache, scores=[MostAllocated(1, RESOURCES)])
    for i in range(5):
        assert least.schedule(table_pod(f"l{i}", cpu="500m", memory="512Mi")).node == "empty"
        assert most.schedule(table_pod(f"m{i}", cpu="500m", memory="512Mi")).node == "busy"


def test_pods_without_requests_are_scored_with_the_non_zero_defaults() -> None:
    fw = framework(cluster(table_node("n", cpu="1", memory="1Gi")))
    # 100m of 1000m -> 90; 200Mi of 1024Mi -> 824*100/1024 = 80 -> 85
    assert scores_of(LeastAllocated(1, RESOURCES), fw, table_pod(), ["n"]) == [85]
    # two request-less containers: 200m -> 80, 400Mi -> 624*100/1024 = 60 -> 70
    assert scores_of(LeastAllocated(1, RESOURCES), fw, table_pod(containers=2), ["n"]) == [70]


def test_bound_pods_without_requests_count_their_defaults_in_scoring() -> None:
    cache = cluster(table_node("n", cpu="1", memory="1Gi"))
    bind(cache, "old", "n")  # no requests: scored as 100m / 200Mi on the node
    fw = framework(cache)
    assert scores_of(LeastAllocated(1, RESOURCES), fw, table_pod(), ["n"]) == [70]
    assert cache.node_usage("n") == {"pods": 1}  # but it takes no real capacity


def test_cpu_only_pod_is_not_scored_on_gpus() -> None:
    cache = cluster(table_node("gpu", cpu="8", memory="16Gi", gpu="4"),
                    table_node("cpu", cpu="8", memory="16Gi"))
    fw = framework(cache)
    p = table_pod(cpu="2", memory="4Gi")
    # cpu 6/8 -> 75, memory 12/16 -> 75 on both; the idle GPUs must not add 100 to "gpu"
    assert scores_of(LeastAllocated(1, RESOURCES), fw, p, ["gpu", "cpu"]) == [75, 75]
    assert scores_of(MostAllocated(1, RESOURCES), fw, p, ["gpu", "cpu"]) == [25, 25]


def test_gpu_pod_is_scored_on_gpus() -> None:
    cache = cluster(table_node("g1", cpu="8", memory="16Gi", gpu="4"),
                    table_node("g2", cpu="8", memory="16Gi", gpu="4"))
    bind(cache, "old", "g1", gpu="3")
    fw = framework(cache)
    p = table_pod(cpu="2", memory="4Gi", gpu="1")
    # g1: cpu 75, mem 75, gpu 0 -> 50; g2: cpu 75, mem 75, gpu 75 -> 75
    # (the bound request-less pod adds 100m / 200Mi to g1: cpu (8000-2100)*100/8000 = 73,
    #  memory (16384-4296)*100/16384 = 73 in MiB -> (73+73+0)/3 = 48)
    assert scores_of(LeastAllocated(1, RESOURCES), fw, p, ["g1", "g2"]) == [48, 75]
    assert framework(cache, scores=[MostAllocated(1, RESOURCES)]).schedule(p).node == "g1"
    assert framework(cache, scores=[LeastAllocated(1, RESOURCES)]).schedule(p).node == "g2"


def test_ties_are_broken_at_random() -> None:
    fw = framework(cluster(table_node("a"), table_node("b"), table_node("c", cpu="1")),
                   scores=[LeastAllocated(1, RESOURCES)],
                   seed=12345)
    chosen = Counter(fw.schedule(table_pod(f"p{i}", cpu="500m", memory="1Gi")).node for i in range(40))
    assert set(chosen) == {"a", "b"}  # c scores lower; a and b tie and both get picked
    assert min(chosen.values()) >= 5


def test_weights_combine_scores() -> None:
    # "spot" is emptier (LeastAllocated prefers it) but has a PreferNoSchedule taint
    cache = cluster(table_node("spot", taints=[("spot", "", "PreferNoSchedule")]), table_node("busy"))
    bind(cache, "old", "busy", cpu="2", memory="4Gi")
    p = table_pod(cpu="1", memory="1Gi")
    # LeastAllocated: spot (75+87)/2 = 81, busy (25+37)/2 = 31; taint score: spot 0, busy 100
    equal = framework(cache, scores=[LeastAllocated(1, RESOURCES), TaintTolerationScore(1)])
    spread_first = framework(cache, scores=[LeastAllocated(3, RESOURCES), TaintTolerationScore(1)])
    assert equal.schedule(p).node == "busy"
    assert spread_first.schedule(p).node == "spot"
    decision = equal.schedule(p)
    assert decision.top == [("busy", 131), ("spot", 81)]


# --------------------------------------------------------------------------- filter order and messages
def test_a_node_is_charged_only_to_the_first_failing_filter() -> None:
    fw = framework(cluster(
        table_node("everything", unschedulable=True, taints=[("k", "v", "NoSchedule")], cpu="1", labels={}),
        table_node("taint-and-cpu", taints=[("k", "v", "NoSchedule")], cpu="1"),
        table_node("selector-and-cpu", cpu="1"),
        table_node("not-ready-and-selector", ready="False"),
        table_node("cpu", cpu="1", labels={"pool": "x"}),
    ))
    decision = fw.schedule(table_pod(cpu="2", node_selector={"pool": "x"}))
    assert decision.reasons == {
        "node(s) were unschedulable": 1,
        "node(s) had untolerated taint {k: v}": 1,
        AFFINITY_REASON: 1,
        "node(s) were not ready": 1,
        "Insufficient cpu": 1,
    }
    assert sum(decision.reasons.values()) == 5


def test_full_message_for_a_mixed_cluster() -> None:
    cache = cluster(
        table_node("small1", cpu="2"), table_node("small2", cpu="2"),
        table_node("small3", cpu="2", memory="1Gi"),
        table_node("tainted", taints=[("k", "v", "NoSchedule")]),
        table_node("cordoned", unschedulable=True),
        table_node("elsewhere", labels={"pool": "other"}),
    )
    p = table_pod(cpu="3", memory="2Gi",
                  affinity=required({"matchExpressions": [req("pool", "NotIn", "other")]}))
    decision = framework(cache).schedule(p)
    assert decision.node is None and decision.total_nodes == 6 and decision.feasible == 0
    assert decision.message == (
        "0/6 nodes are available: 1 Insufficient memory, "
        "1 node(s) didn't match Pod's node affinity/selector, 1 node(s) had untolerated taint {k: v}, "
        "1 node(s) were unschedulable, 3 Insufficient cpu.")


def test_fit_error_message_sorts_the_count_reason_strings_as_kube_scheduler_does() -> None:
    # FitError.Error() sorts "count reason" strings (sort.Strings), so "10 ..." comes before "2 ...".
    assert fit_error_message(12, {"b": 1, "a": 1, "Insufficient cpu": 10, "z": 2}) == (
        "0/12 nodes are available: 1 a, 1 b, 10 Insufficient cpu, 2 z.")


def test_empty_cluster_and_invalid_pod() -> None:
    decision = framework(cluster()).schedule(table_pod())
    assert decision.node is None and decision.total_nodes == 0 and decision.reasons == {}

    container = {"name": "c", "resources": {"requests": {"cpu": "1x"}}}
    bad = PodRecord.from_api({"metadata": {"name": "bad", "namespace": "ns", "uid": "bad"},
                              "spec": {"containers": [container]}})
    decision = framework(cluster(table_node("a"))).schedule(bad)
    assert decision.node is None and decision.error.startswith("invalid resource quantity")
    assert decision.message.startswith("0/1 nodes are available: invalid resource quantity")


# --------------------------------------------------------------------------- static result caching
def test_cached_selector_result_follows_label_changes() -> None:
    cache = cluster(table_node("a", labels={"gpu": "yes"}), table_node("b"))
    fw = framework(cache)
    assert fw.schedule(table_pod("p1", node_selector={"gpu": "yes"})).node == "a"
    cache.set_node(table_node("a", rv="2"))
    cache.set_node(table_node("b", labels={"gpu": "yes"}, rv="2"))
    decision = fw.schedule(table_pod("p2", node_selector={"gpu": "yes"}))
    assert decision.node == "b" and decision.reasons == {AFFINITY_REASON: 1}
    cache.set_node(table_node("b", rv="3"))
    assert fw.schedule(table_pod("p3", node_selector={"gpu": "yes"})).reasons == {AFFINITY_REASON: 2}


def test_cached_taint_result_follows_taint_changes() -> None:
    cache = cluster(table_node("a"), table_node("b"))
    fw = framework(cache)
    assert feasible_names(fw, table_pod("p1")) == {"a", "b"}
    cache.set_node(table_node("a", taints=[("k", "v", "NoSchedule")], rv="2"))
    assert feasible_names(fw, table_pod("p2")) == {"b"}
    assert fw.schedule(table_pod("p3")).node == "b"
    cache.set_node(table_node("b", taints=[("k", "v", "NoExecute")], rv="2"))
    assert fw.schedule(table_pod("p4")).message == (
        "0/2 nodes are available: 2 node(s) had untolerated taint {k: v}.")
    cache.set_node(table_node("a", rv="3"))
    assert fw.schedule(table_pod("p5")).node == "a"


def test_cached_scores_follow_taint_changes() -> None:
    cache = cluster(table_node("a"), table_node("b", taints=[("s", "", "PreferNoSchedule")]))
    fw = framework(cache, scores=[TaintTolerationScore(1)])
    assert fw.schedule(table_pod("p1")).node == "a"
    cache.set_node(table_node("a", taints=[("s", "", "PreferNoSchedule")], rv="2"))
    cache.set_node(table_node("b", rv="2"))
    assert fw.schedule(table_pod("p2")).node == "b"


def test_cached_results_follow_cordon_and_readiness() -> None:
    cache = cluster(table_node("a"), table_node("b"))
    fw = framework(cache)
    assert feasible_names(fw, table_pod("p1")) == {"a", "b"}
    cache.set_node(table_node("a", unschedulable=True, rv="2"))
    cache.set_node(table_node("b", ready="False", rv="2"))
    assert fw.schedule(table_pod("p2")).reasons == {"node(s) were unschedulable": 1,
                                                    "node(s) were not ready": 1}
    cache.set_node(table_node("a", rv="3"))
    cache.set_node(table_node("b", rv="3"))
    assert feasible_names(fw, table_pod("p3")) == {"a", "b"}


def test_cached_results_after_node_delete_and_readd() -> None:
    cache = cluster(table_node("a", labels={"gpu": "yes"}), table_node("b"))
    fw = framework(cache)
    sel = {"gpu": "yes"}
    assert fw.schedule(table_pod("p1", node_selector=sel)).node == "a"
    cache.remove_node("a")
    decision = fw.schedule(table_pod("p2", node_selector=sel))
    assert decision.node is None and decision.total_nodes == 1 and decision.reasons == {AFFINITY_REASON: 1}
    # a different node takes over the freed row: it must be evaluated afresh
    cache.set_node(table_node("c"))
    assert fw.schedule(table_pod("p3", node_selector=sel)).reasons == {AFFINITY_REASON: 2}
    cache.set_node(table_node("a"))  # back, without the label now
    assert fw.schedule(table_pod("p4", node_selector=sel)).reasons == {AFFINITY_REASON: 3}
    cache.set_node(table_node("c", labels={"gpu": "yes"}, rv="2"))
    assert fw.schedule(table_pod("p5", node_selector=sel)).node == "c"
    cache.remove_node("c")
    cache.set_node(table_node("d", labels={"gpu": "yes"}))
    assert fw.schedule(table_pod("p6", node_selector=sel)).node == "d"


def test_cached_results_survive_row_growth() -> None:
    cache = cluster(table_node("n0", labels={"gpu": "yes"}), initial_rows=2)
    fw = framework(cache)
    sel = {"gpu": "yes"}
    assert fw.schedule(table_pod("p0", node_selector=sel)).node == "n0"
    for i in range(1, 9):
        cache.set_node(table_node(f"n{i}", labels={"gpu": "yes"} if i == 7 else {}))
    assert cache.rows >= 9
    assert feasible_names(fw, table_pod("p1", node_selector=sel)) == {"n0", "n7"}
    assert fw.schedule(table_pod("p2", node_selector=sel)).reasons == {AFFINITY_REASON: 7}


def test_pods_with_the_same_signature_share_fresh_results() -> None:
    cache = cluster(table_node("a", labels={"zone": "a"}), table_node("b", labels={"zone": "b"}))
    fw = framework(cache)
    aff = required({"matchExpressions": [req("zone", "In", "a")]})
    assert feasible_names(fw, table_pod("first", affinity=aff)) == {"a"}
    cache.set_node(table_node("b", labels={"zone": "a"}, rv="2"))
    assert feasible_names(fw, table_pod("second", affinity=aff)) == {"a", "b"}
    # a different signature is computed on its own
    other = required({"matchExpressions": [req("zone", "In", "b")]})
    assert feasible_names(fw, table_pod("third", affinity=other)) == set()


# --------------------------------------------------------------------------- search that stops early
@pytest.mark.parametrize(("percentage", "total", "expected"), [
    (0, 0, 0),
    (0, 99, 99),  # under 100 nodes: all of them
    (0, 100, 100),  # 50% of 100 is 50, but at least 100 are searched for
    (0, 250, 120),  # 50 - 250/125 = 48%
    (0, 1000, 420),  # 42%
    (0, 5000, 500),  # 10%
    (0, 5625, 281),  # 50 - 45 = 5%
    (0, 6000, 300),  # 50 - 48 = 2%, floored at 5%
    (0, 20000, 1000),
    (100, 5000, 5000),  # explicit 100: every node
    (10, 500, 100),  # 50, raised to 100
    (30, 5000, 1500),
    (50, 99, 99),
])
def test_number_of_feasible_nodes_to_find_follows_kube_scheduler(percentage: int, total: int,
                                                                  expected: int) -> None:
    assert num_feasible_nodes_to_find(percentage, total) == expected


def test_a_pod_finds_the_three_nodes_that_fit_among_5000() -> None:
    fits = {"n17", "n2600", "n4999"}
    cache = cluster(*(table_node(f"n{i}", cpu="8" if f"n{i}" in fits else "2") for i in range(5000)),
                    initial_rows=8192)
    fw = framework(cache, scores=[LeastAllocated(1, RESOURCES)])
    fw.next_start = 4000  # the search starts late in the table and wraps round to find n17
    placed = set()
    for i in range(3):
        decision = fw.schedule(table_pod(f"p{i}", cpu="5"))
        assert decision.node in fits and decision.feasible == 3 - i
        assert decision.evaluated == decision.total_nodes == 5000, "not enough found: every node looked at"
        assert decision.reasons == {"Insufficient cpu": 4997 + i}
        cache.assume(table_pod(f"p{i}", cpu="5"), decision.node)
        placed.add(decision.node)
    assert placed == fits
    decision = fw.schedule(table_pod("p3", cpu="5"))
    assert decision.node is None
    assert decision.message == "0/5000 nodes are available: 5000 Insufficient cpu."


def test_the_search_stops_at_enough_nodes_and_its_start_rotates_over_all_of_them() -> None:
    cache = large_cluster(1000)
    seen = RowsScored()
    fw = framework(cache, scores=[seen, LeastAllocated(1, RESOURCES)])
    starts = []
    for i in range(3):
        starts.append(fw.next_start)
        decision = fw.schedule(table_pod(f"p{i}", cpu="100m"))
        assert decision.feasible == decision.evaluated == 420 and decision.reasons == {}
        assert decision.node is not None
        assert (cache.row_of(decision.node) - starts[-1]) % 1000 < 420, "chosen among the nodes looked at"
    assert starts == [0, 420, 840] and fw.next_start == 260
    assert seen.seen[0] == list(range(420))
    assert seen.seen[2] == [*range(840, 1000), *range(260)]  # wrapped round the end of the table
    assert set().union(*seen.seen) == set(range(1000)), "every node had its turn"


def test_nodes_past_the_last_one_kept_are_searched_again_next_time() -> None:
    # Only odd rows fit: the first window of 420 rows yields 210, the next one the rest.
    cache = cluster(*(table_node(f"n{i}", cpu="4" if i % 2 else "1") for i in range(1000)), initial_rows=1000)
    seen = RowsScored()
    fw = framework(cache, scores=[seen])
    decision = fw.schedule(table_pod("p", cpu="2"))
    assert decision.feasible == 420 and seen.seen[0] == list(range(1, 840, 2))
    assert decision.evaluated == 1000 and decision.reasons == {"Insufficient cpu": 500}
    assert fw.next_start == 840
    fw.schedule(table_pod("q", cpu="2"))
    assert seen.seen[1][:3] == [841, 843, 845] and len(seen.seen[1]) == 420


def test_percentage_100_scores_every_feasible_node() -> None:
    cache = large_cluster(1000)
    seen = RowsScored()
    fw = framework(cache, scores=[seen], percentage=100)
    decision = fw.schedule(table_pod("p", cpu="1"))
    assert decision.feasible == decision.evaluated == 1000
    assert seen.seen == [list(range(1000))] and fw.next_start == 0


def test_a_search_inside_a_domain_counts_the_domain_only() -> None:
    cache = cluster(*(table_node(f"n{i}", labels={"zone": "a" if i % 10 == 3 else "b"}) for i in range(2000)),
                    initial_rows=2048)
    fw = framework(cache)
    zone_a = np.array([rec is not None and rec.labels.get("zone") == "a" for rec in cache.row_records])
    decision = fw.schedule(table_pod("member", cpu="1"), zone_a)
    assert decision.total_nodes == 200 and decision.feasible == 100  # 200 nodes: 100 is the floor
    assert decision.node is not None
    record = cache.node_record(decision.node)
    assert record is not None and record.labels["zone"] == "a"


def test_a_nominated_pod_tries_its_nominated_node_first() -> None:
    cache = large_cluster(500)
    bind(cache, "old", "n321", cpu="3")  # the least attractive node for a spreading score
    fw = framework(cache, scores=[LeastAllocated(1, RESOURCES)])
    preemptor = table_pod("preemptor", cpu="1")
    cache.nominate(preemptor, "n321")
    decision = fw.schedule(preemptor)
    assert decision.node == "n321" and decision.evaluated == decision.feasible == 1
    # Once its nominated node no longer fits it, the search goes on as usual.
    bind(cache, "intruder", "n321", cpu="1")
    decision = fw.schedule(preemptor)
    assert decision.node not in (None, "n321") and decision.feasible == 230


def test_static_results_follow_nodes_that_start_failing_after_all_passed() -> None:
    cache = cluster(table_node("a"), table_node("b"))
    fw = framework(cache, scores=[TaintTolerationScore(1)])
    assert feasible_names(fw, table_pod("p1")) == {"a", "b"}
    assert sorted(score for _, score in fw.schedule(table_pod("p1")).top) == [100, 100]
    cache.set_node(table_node("b", taints=[("k", "v", "NoSchedule")], rv="2"))
    assert feasible_names(fw, table_pod("p2")) == {"a"}
    cache.set_node(table_node("b", taints=[("k", "v", "PreferNoSchedule")], rv="3"))
    assert feasible_names(fw, table_pod("p3")) == {"a", "b"}
    assert fw.schedule(table_pod("p3")).node == "a", "b's PreferNoSchedule taint now scores"
    cache.set_node(table_node("b", rv="4"))
    assert sorted(score for _, score in fw.schedule(table_pod("p4")).top) == [100, 100]


@pytest.mark.parametrize(("scores", "pick", "expected"), [
    ([5, 9, 9, 7, 9, 3], 4, [4, 1, 2]),  # the chosen one first, then other ties
    ([5, 9, 7, 7, 3], 1, [1, 2, 3]),  # then the next score down
    ([5, 9, 7, 2, 3], 1, [1, 2, 0]),
    ([4, 4], 1, [1, 0]),
    ([8], 0, [0]),
])
def test_top_scores_for_the_log(scores: list[int], pick: int, expected: list[int]) -> None:
    values = np.array(scores, dtype=np.int64)
    assert top_scores(values, pick, np.flatnonzero(values == values.max())) == expected


def test_top_scores_of_many_equal_values() -> None:
    values = np.full(5000, 300, dtype=np.int64)
    values[[10, 20]] = 290
    values[4000] = 310
    assert top_scores(values, 4000, np.array([4000])) == [4000, 0, 1]
    values[:] = 7
    assert top_scores(values, 2500, np.flatnonzero(values == 7)) == [2500, 0, 1]


@pytest.mark.parametrize(("window", "row", "expected"), [
    (slice(None), 7, 7),
    (slice(10, 20), 15, 5),
    (slice(10, 20), 20, -1),
    (slice(10, 20), 9, -1),
    (np.array([998, 999, 0, 1]), 0, 2),  # a window wrapping round the end of the table
    (np.array([998, 999, 0, 1]), 5, -1),
])
def test_position_in_window(window: Any, row: int, expected: int) -> None:
    assert position_in_window(window, row) == expected


def test_room_held_for_a_nominated_pod_in_a_window_that_wraps_round() -> None:
    cache = cluster(table_node("a", cpu="2"), table_node("b", cpu="2"), table_node("c", cpu="2"))
    fw = framework(cache)
    preemptor = table_pod("preemptor", cpu="2")
    cache.nominate(preemptor, "a")
    window = np.array([cache.row_of("c"), cache.row_of("a")])  # c, then round the end to a
    alive = np.ones(2, dtype=bool)
    own = dict(NodeResourcesFit().run(preemptor, cache, alive, fw.static, window))
    other = dict(NodeResourcesFit().run(table_pod("other", cpu="2"), cache, alive, fw.static, window))
    assert own["Insufficient cpu"].tolist() == [False, False], "its own held room is free to it"
    assert other["Insufficient cpu"].tolist() == [False, True], "and taken for anyone else"
