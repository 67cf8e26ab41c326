"""PodTopologySpread against kube-scheduler's semantics: its filtering_test.go and scoring_test.go tables.

kube's cases are written here in their own notation: nodes by name with their
labels, existing pods by the node they run on and their labels, the incoming
pod's constraints as `SpreadConstraint(maxSkew, key, whenUnsatisfiable,
selector, minDomains, nodeAffinityPolicy, nodeTaintsPolicy, matchLabelKeys)`.
A filter case expects, per node, success, `Unschedulable` (the skew) or
`UnschedulableAndUnresolvable` (the missing label); a score case the
normalised score of each candidate node ("failed" nodes hold pods but are not
scored). Cases that kube runs with the NodeInclusionPolicy or MatchLabelKeys
features off are left out: v1.36 has them on.
"""

from __future__ import annotations

import dataclasses
import math
import random
from typing import Any

import numpy as np
import pytest
from builders import Node, Pod, owner_ref

from ai_scheduler.cache.cache import SchedulerCache
from ai_scheduler.cache.records import NodeRecord, PodRecord
from ai_scheduler.cache.selectors import LabelSelector, Requirement
from ai_scheduler.cache.spread import NO_SPREAD, SYSTEM_DEFAULT_CONSTRAINTS, SpreadConstraint
from ai_scheduler.cache.workloads import REPLICA_SETS, REPLICATION_CONTROLLERS, SERVICES, STATEFUL_SETS
from ai_scheduler.config import default_config
from ai_scheduler.scheduler.framework.plugins import build_filters, build_scores
from ai_scheduler.scheduler.framework.plugins.node_affinity import NodeAffinityFilter
from ai_scheduler.scheduler.framework.plugins.pod_topology_spread import (
    CONSTRAINTS_NOT_MATCH,
    MISSING_LABEL,
    PodTopologySpreadFilter,
    PodTopologySpreadScore,
)
from ai_scheduler.scheduler.framework.plugins.taint_toleration import TaintTolerationFilter
from ai_scheduler.scheduler.framework.runtime import Framework

HOSTNAME = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
DNS, SA = "DoNotSchedule", "ScheduleAnyway"
OK, SKEW, UNRESOLVABLE = "", CONSTRAINTS_NOT_MATCH, MISSING_LABEL
FOO = {"matchExpressions": [{"key": "foo", "operator": "Exists"}]}
BAR = {"matchExpressions": [{"key": "bar", "operator": "Exists"}]}
UNSCHEDULABLE_TAINT = [{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]

NodeSpec = tuple[str, dict[str, str]] | tuple[str, dict[str, str], list[dict[str, Any]]]


def spread(
    max_skew: int,
    key: str,
    when: str,
    selector: dict[str, Any] | None,
    min_domains: int | None = None,
    affinity_policy: str | None = None,
    taints_policy: str | None = None,
    match_label_keys: list[str] | None = None,
) -> dict[str, Any]:
    """A TopologySpreadConstraint, in the order of kube's st.SpreadConstraint."""
    constraint: dict[str, Any] = {"maxSkew": max_skew, "topologyKey": key, "whenUnsatisfiable": when}
    optional = {
        "labelSelector": selector,
        "minDomains": min_domains,
        "nodeAffinityPolicy": affinity_policy,
        "nodeTaintsPolicy": taints_policy,
        "matchLabelKeys": match_label_keys,
    }
    constraint.update({k: v for k, v in optional.items() if v is not None})
    return constraint


def spread_node(name: str, labels: dict[str, str], taints: list[dict[str, Any]] | None = None) -> NodeRecord:
    """A node with exactly these labels (kube's test nodes carry no hostname label unless given one)."""
    return Node(name, taints=taints).labels(labels).record()


def spread_pod(name: str, labels: dict[str, str] | None = None, *, on: str | None = None,
               namespace: str = "default",
               constraints: list[dict[str, Any]] | None = None, terminating: bool = False,
               owner: tuple[str, str, str] | None = None, **kw: Any) -> PodRecord:
    pod = (Pod(name, namespace=namespace, labels=labels, node_name=on, topology_spread=constraints, **kw)
           .uid(f"uid-{namespace}-{name}").terminating(terminating))
    return (pod.owners(owner_ref(*owner, "u", controller=True)) if owner is not None else pod).record()


def existing(spec: str, labels: dict[str, str] | None = None, namespace: str = "default") -> PodRecord:
    """kube's `st.MakePod().Name("p-a1").Node("node-a")`: `spec` is "pod-name@node-name"."""
    name, _, on = spec.partition("@")
    return spread_pod(name, labels, on=on, namespace=namespace)


def foo_pods(*specs: str) -> list[PodRecord]:
    return [existing(s, {"foo": ""}) for s in specs]


def cluster(nodes: list[NodeRecord], pods: list[PodRecord]) -> tuple[SchedulerCache, Framework]:
    cache = SchedulerCache(initial_rows=8)  # small: grown as nodes come, as in a real cluster
    for node_record in nodes:
        cache.set_node(node_record)
    for pod_record in pods:
        cache.set_pod(pod_record)
    assert cache.check_consistency() == []
    return cache, Framework("ai-scheduler", [PodTopologySpreadFilter()], [], cache, rng=random.Random(1))


def filter_verdicts(incoming: PodRecord, nodes: list[NodeRecord], pods: list[PodRecord]) -> dict[str, str]:
    """Each node's reason from the filter alone ("" when it passes), as kube's Filter status per node."""
    cache, framework = cluster(nodes, pods)
    alive = cache.valid.copy()
    verdicts = dict.fromkeys((n.name for n in nodes), OK)
    for reason, mask in framework.filters[0].run(incoming, cache, alive, framework.static):
        for row in np.flatnonzero(mask & alive).tolist():
            verdicts[cache.row_names[row]] = reason
    return verdicts


# ---------------------------------------------------------------- kube's TestSingleConstraint

FOUR_IN_TWO_ZONES = [
    spread_node("node-a", {"zone": "zone1", "node": "node-a"}),
    spread_node("node-b", {"zone": "zone1", "node": "node-b"}),
    spread_node("node-x", {"zone": "zone2", "node": "node-x"}),
    spread_node("node-y", {"zone": "zone2", "node": "node-y"}),
]
SPREAD_2_1_0_3 = foo_pods(
    "p-a1@node-a", "p-a2@node-a", "p-b1@node-b", "p-y1@node-y", "p-y2@node-y", "p-y3@node-y"
)
NODE_AND_FOO = [
    spread_node("node-a", {"node": "node-a", "foo": ""}),
    spread_node("node-b", {"node": "node-b", "foo": ""}),
    spread_node("node-x", {"node": "node-x", "foo": ""}),
    spread_node("node-y", {"node": "node-y"}),
]
THREE_NODES = [spread_node(f"node-{x}", {"node": f"node-{x}"}) for x in "abc"]

SINGLE_CONSTRAINT_CASES: list[tuple[str, PodRecord, list[NodeRecord], list[PodRecord], list[str]]] = [
    ("no existing pods", spread_pod("p", {"foo": ""}, constraints=[spread(1, "zone", DNS, FOO)]),
     FOUR_IN_TWO_ZONES, [], [OK, OK, OK, OK]),
    ("no existing pods, incoming pod doesn't match itself",
     spread_pod("p", {"foo": ""}, constraints=[spread(1, "zone", DNS, BAR)]), FOUR_IN_TWO_ZONES, [],
     [OK, OK, OK, OK]),
    ("existing pods in a different namespace do not count",
     spread_pod("p", {"foo": ""}, constraints=[spread(1, "zone", DNS, FOO)]), FOUR_IN_TWO_ZONES,
     [existing("p-a1@node-a", {"foo": ""}, "ns1"), existing("p-b1@node-a", {"foo": ""}, "ns2"),
      *foo_pods("p-x1@node-x", "p-y1@node-y")], [OK, OK, SKEW, SKEW]),
    ("existing pods do not match null selector",
     spread_pod("p", {"foo": ""}, constraints=[spread(1, "zone", DNS, None)]), FOUR_IN_TWO_ZONES,
     foo_pods("p-x1@node-x", "p-y1@node-y"), [OK, OK, OK, OK]),
    ("pods spread across zones as 3/3, all nodes fit",
     spread_pod("p", {"foo": ""},
                constraints=[spread(1, "zone", DNS, FOO)]), FOUR_IN_TWO_ZONES, SPREAD_2_1_0_3,
     [OK, OK, OK, OK]),
    ("pods spread across zones as 1/2 due to absence of label 'zone' on node-b",
     spread_pod("p", {"foo": ""}, constraints=[spread(1, "zone", DNS, FOO)]),
     [FOUR_IN_TWO_ZONES[0], spread_node("node-b", {"zon": "zone1", "node": "node-b"}),
      *FOUR_IN_TWO_ZONES[2:]],
     foo_pods("p-a1@node-a", "p-b1@node-b", "p-x1@node-x", "p-y1@node-y"), [OK, UNRESOLVABLE, SKEW, SKEW]),
    ("pod cannot be scheduled as all nodes don't have label 'rack'",
     spread_pod("p", {"foo": ""}, constraints=[spread(1, "rack", DNS, FOO)]),
     [FOUR_IN_TWO_ZONES[0], FOUR_IN_TWO_ZONES[2]], [], [UNRESOLVABLE, UNRESOLVABLE]),
    ("pods spread across nodes as 2/1/0/3, only node-x fits",
     spread_pod("p", {"foo": ""},
                constraints=[spread(1, "node", DNS, FOO)]), FOUR_IN_TWO_ZONES, SPREAD_2_1_0_3,
     [SKEW, SKEW, OK, SKEW]),
    ("pods spread across nodes as 2/1/0/3, maxSkew is 2, node-b and node-x fit",
     spread_pod("p", {"foo": ""},
                constraints=[spread(2, "node", DNS, FOO)]), FOUR_IN_TWO_ZONES, SPREAD_2_1_0_3,
     [SKEW, OK, OK, SKEW]),
    ("pods spread across nodes as 2/1/0/3, but pod doesn't match itself",
     spread_pod("p", {"bar": ""},
                constraints=[spread(1, "node", DNS, FOO)]), FOUR_IN_TWO_ZONES, SPREAD_2_1_0_3,
     [SKEW, OK, OK, SKEW]),
    # Only node-a and node-y count as domains (2/~1~/~0~/3); NodeAffinity itself is not run here.
    ("incoming pod has nodeAffinity, pods spread as 2/~1~/~0~/3, hence node-a fits",
     spread_pod("p", {"foo": ""}, constraints=[spread(1, "node", DNS, FOO)], affinity={"nodeAffinity": {
         "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [
             {"key": "node", "operator": "In", "values": ["node-a", "node-y"]}]}]}}}),
     FOUR_IN_TWO_ZONES, SPREAD_2_1_0_3, [OK, OK, OK, SKEW]),
    ("terminating Pods should be excluded",
     spread_pod("p", {"foo": ""}, constraints=[spread(1, "node", DNS, FOO)]),
     [spread_node("node-a", {"node": "node-a"}), spread_node("node-b", {"node": "node-b"})],
     [spread_pod("p-a", {"foo": ""}, on="node-a", terminating=True), existing("p-b@node-b", {"foo": ""})],
     [OK, SKEW]),
    ("incoming pod has nodeAffinity, pods spread as 0/~2~/0/1, hence node-a fits",
     spread_pod("p", {"foo": ""}, constraints=[spread(1, "zone", DNS, FOO)], affinity={"nodeAffinity": {
         "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [
             {"key": "node", "operator": "NotIn", "values": ["node-b"]}]}]}}}),
     FOUR_IN_TWO_ZONES, foo_pods("p-b1@node-b", "p-b2@node-b", "p-y1@node-y"), [OK, OK, SKEW, SKEW]),
    ("pods spread across nodes as 2/2/1, maxSkew is 2, and the number of domains < minDomains",
     spread_pod("p", {"foo": ""}, constraints=[spread(2, "node", DNS, FOO, min_domains=4)]), THREE_NODES,
     foo_pods("p-a1@node-a", "p-a2@node-a", "p-b1@node-b", "p-b2@node-b", "p-c1@node-c"), [SKEW, SKEW, OK]),
    ("pods spread across nodes as 2/2/1, maxSkew is 2, and the number of domains > minDomains",
     spread_pod("p", {"foo": ""}, constraints=[spread(2, "node", DNS, FOO, min_domains=2)]), THREE_NODES,
     foo_pods("p-a1@node-a", "p-a2@node-a", "p-b1@node-b", "p-b2@node-b", "p-c1@node-c"), [OK, OK, OK]),
    ("pods spread across zone as 2/1, maxSkew is 2 and the number of domains < minDomains",
     spread_pod("p", {"foo": ""},
                constraints=[spread(2, "zone", DNS, FOO, min_domains=3)]), FOUR_IN_TWO_ZONES,
     foo_pods("p-b1@node-a", "p-b2@node-b", "p-y1@node-y"), [SKEW, SKEW, OK, OK]),
    ("pods spread across zone as 2/1, maxSkew is 2 and the number of domains > minDomains",
     spread_pod("p", {"foo": ""},
                constraints=[spread(2, "zone", DNS, FOO, min_domains=1)]), FOUR_IN_TWO_ZONES,
     foo_pods("p-b1@node-a", "p-b2@node-b", "p-y1@node-y"), [OK, OK, OK, OK]),
    ("NodeAffinityPolicy honored with labelSelectors",
     spread_pod("p", {"foo": ""}, constraints=[spread(1, "node", DNS, FOO)], node_selector={"foo": ""}),
     NODE_AND_FOO, foo_pods("p-b1@node-a", "p-b2@node-b", "p-y1@node-y"), [SKEW, SKEW, OK, OK]),
    ("NodeAffinityPolicy ignored with labelSelectors",
     spread_pod("p", {"foo": ""}, constraints=[spread(1, "node", DNS, FOO, affinity_policy="Ignore")],
                node_selector={"foo": ""}),
     NODE_AND_FOO, foo_pods("p-b1@node-a", "p-b2@node-b", "p-y1@node-y"), [SKEW, SKEW, OK, SKEW]),
    ("NodeAffinityPolicy honored with nodeAffinity",
     spread_pod("p", {"foo": ""}, constraints=[spread(1, "node", DNS, FOO)], affinity={"nodeAffinity": {
         "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [
             {"key": "foo", "operator": "In", "values": [""]}]}]}}}),
     NODE_AND_FOO, foo_pods("p-b1@node-a", "p-b2@node-b", "p-y1@node-y"), [SKEW, SKEW, OK, OK]),
    ("NodeAffinityPolicy ignored with nodeAffinity",
     spread_pod("p", {"foo": ""}, constraints=[spread(1, "node", DNS, FOO, affinity_policy="Ignore")],
                affinity={"nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "foo", "operator": "In", "values": [""]}]}]}}}),
     NODE_AND_FOO, foo_pods("p-b1@node-a", "p-b2@node-b", "p-y1@node-y"), [SKEW, SKEW, OK, SKEW]),
    ("NodeTaintsPolicy honored",
     spread_pod("p", {"foo": ""}, constraints=[spread(1, "node", DNS, FOO, taints_policy="Honor")]),
     [*NODE_AND_FOO[:3], spread_node("node-y", {"node": "node-y"}, UNSCHEDULABLE_TAINT)],
     foo_pods("p-b1@node-a", "p-b2@node-b", "p-y1@node-y"), [SKEW, SKEW, OK, OK]),
    ("NodeTaintsPolicy ignored", spread_pod("p", {"foo": ""}, constraints=[spread(1, "node", DNS, FOO)]),
     [*NODE_AND_FOO[:3], spread_node("node-y", {"node": "node-y"}, UNSCHEDULABLE_TAINT)],
     foo_pods("p-b1@node-a", "p-b2@node-b", "p-y1@node-y"), [SKEW, SKEW, OK, SKEW]),
]


@pytest.mark.parametrize(
    ("incoming", "nodes", "pods", "want"),
    [case[1:] for case in SINGLE_CONSTRAINT_CASES],
    ids=[case[0] for case in SINGLE_CONSTRAINT_CASES],
)
def test_kube_single_constraint(
    incoming: PodRecord, nodes: list[NodeRecord], pods: list[PodRecord], want: list[str]
) -> None:
    assert filter_verdicts(incoming, nodes, pods) == dict(zip((n.name for n in nodes), want, strict=True))


# ---------------------------------------------------------------- kube's TestMultipleConstraints

ZONE_AND_NODE = [spread(1, "zone", DNS, FOO), spread(1, "node", DNS, FOO)]
ZONE_FOO_NODE_BAR = [spread(1, "zone", DNS, FOO), spread(1, "node", DNS, BAR)]
ZONES_WITH_FOO = [
    spread_node("node-a", {"zone": "zone1", "node": "node-a", "foo": ""}),
    spread_node("node-b", {"zone": "zone1", "node": "node-b", "foo": ""}),
    spread_node("node-x", {"zone": "zone2", "node": "node-x", "foo": ""}),
]

MULTIPLE_CONSTRAINT_CASES: list[tuple[str, PodRecord, list[NodeRecord], list[PodRecord], list[str]]] = [
    ("two Constraints on zone and node, spreads = [3/3, 2/1/0/3]",
     spread_pod("p", {"foo": ""}, constraints=ZONE_AND_NODE), FOUR_IN_TWO_ZONES, SPREAD_2_1_0_3,
     [SKEW, SKEW, OK, SKEW]),
    ("two Constraints on zone and node, spreads = [3/4, 2/1/0/4]",
     spread_pod("p", {"foo": ""}, constraints=ZONE_AND_NODE), FOUR_IN_TWO_ZONES,
     [*SPREAD_2_1_0_3, *foo_pods("p-y4@node-y")], [SKEW, SKEW, SKEW, SKEW]),
    ("Constraints hold different labelSelectors, spreads = [1/0, 1/0/0/1]",
     spread_pod("p", {"foo": "", "bar": ""}, constraints=ZONE_FOO_NODE_BAR), FOUR_IN_TWO_ZONES,
     [existing("p-a1@node-a", {"foo": ""}), existing("p-y1@node-y", {"bar": ""})], [SKEW, SKEW, OK, SKEW]),
    ("Constraints hold different labelSelectors, spreads = [1/0, 0/0/1/1]",
     spread_pod("p", {"foo": "", "bar": ""}, constraints=ZONE_FOO_NODE_BAR), FOUR_IN_TWO_ZONES,
     [existing("p-a1@node-a", {"foo": ""}), existing("p-x1@node-x", {"bar": ""}),
      existing("p-y1@node-y", {"bar": ""})], [SKEW, SKEW, SKEW, SKEW]),
    ("Constraints hold different labelSelectors, spreads = [2/3, 1/0/0/1]",
     spread_pod("p", {"foo": "", "bar": ""}, constraints=ZONE_FOO_NODE_BAR), FOUR_IN_TWO_ZONES,
     [existing("p-a1@node-a", {"foo": ""}), existing("p-a2@node-a", {"foo": "", "bar": ""}),
      existing("p-y1@node-y", {"foo": ""}), existing("p-y2@node-y", {"foo": "", "bar": ""}),
      existing("p-y3@node-y", {"foo": ""})], [SKEW, OK, SKEW, SKEW]),
    ("Constraints hold different labelSelectors but pod doesn't match itself on 'zone' constraint",
     spread_pod("p", {"bar": ""}, constraints=ZONE_FOO_NODE_BAR), FOUR_IN_TWO_ZONES,
     [existing("p-a1@node-a", {"foo": ""}), existing("p-x1@node-x", {"bar": ""}),
      existing("p-y1@node-y", {"bar": ""})], [OK, OK, SKEW, SKEW]),
    ("two Constraints on zone and node, absence of label 'node' on node-x, spreads = [1/1, 1/0/0/1]",
     spread_pod("p", {"foo": ""}, constraints=ZONE_AND_NODE),
     [*FOUR_IN_TWO_ZONES[:2], spread_node("node-x", {"zone": "zone2"}), FOUR_IN_TWO_ZONES[3]],
     foo_pods("p-a1@node-a", "p-y3@node-y"), [SKEW, OK, UNRESOLVABLE, SKEW]),
    ("two node inclusion Constraints, zone: honor/ignore, node: ignore/ignore",
     spread_pod("p", {"foo": ""}, node_selector={"foo": ""},
                constraints=[spread(1, "zone", DNS, FOO),
                             spread(1, "node", DNS, FOO, affinity_policy="Ignore")]),
     [*ZONES_WITH_FOO, spread_node("node-y", {"zone": "zone2", "node": "node-y"})],
     foo_pods("p-a1@node-a", "p-b1@node-b", "p-y1@node-y"), [SKEW, SKEW, OK, SKEW]),
    ("two node inclusion Constraints, zone: honor/honor, node: honor/ignore",
     spread_pod("p", {"foo": ""}, constraints=[spread(1, "zone", DNS, FOO, taints_policy="Honor"),
                                               spread(1, "node", DNS, FOO)]),
     [*ZONES_WITH_FOO, spread_node("node-y", {"zone": "zone2", "node": "node-y"}, UNSCHEDULABLE_TAINT)],
     foo_pods("p-a1@node-a", "p-b1@node-b", "p-y1@node-y"), [SKEW, SKEW, OK, SKEW]),
    ("two node inclusion Constraints, zone: honor/ignore, node: honor/ignore",
     spread_pod("p", {"foo": ""}, node_selector={"foo": ""}, constraints=ZONE_AND_NODE),
     [spread_node("node-a", {"zone": "zone1", "node": "node-a", "foo": ""}),
      spread_node("node-b", {"zone": "zone1", "node": "node-b"}),
      spread_node("node-x", {"zone": "zone2", "node": "node-x", "foo": ""}),
      spread_node("node-y", {"zone": "zone2", "node": "node-y", "foo": ""}, UNSCHEDULABLE_TAINT)],
     foo_pods("p-a1@node-a", "p-b1@node-b", "p-y1@node-y"), [SKEW, OK, OK, SKEW]),
    ("two node inclusion Constraints, zone: honor/honor, node: ignore/ignore",
     spread_pod("p", {"foo": ""}, node_selector={"foo": ""},
                constraints=[spread(1, "zone", DNS, FOO, taints_policy="Honor"),
                             spread(1, "node", DNS, FOO, affinity_policy="Ignore")]),
     [spread_node("node-a", {"zone": "zone1", "node": "node-a", "foo": ""}),
      spread_node("node-b", {"zone": "zone1", "node": "node-b"}),
      spread_node("node-x", {"zone": "zone2", "node": "node-x", "foo": ""}),
      spread_node("node-y", {"zone": "zone2", "node": "node-y", "foo": ""}, UNSCHEDULABLE_TAINT)],
     foo_pods("p-a1@node-a", "p-b1@node-b", "p-y1@node-y"), [SKEW, SKEW, OK, SKEW]),
]


@pytest.mark.parametrize(
    ("incoming", "nodes", "pods", "want"),
    [case[1:] for case in MULTIPLE_CONSTRAINT_CASES],
    ids=[case[0] for case in MULTIPLE_CONSTRAINT_CASES],
)
def test_kube_multiple_constraints(
    incoming: PodRecord, nodes: list[NodeRecord], pods: list[PodRecord], want: list[str]
) -> None:
    assert filter_verdicts(incoming, nodes, pods) == dict(zip((n.name for n in nodes), want, strict=True))


# ---------------------------------------------------------------- kube's TestPodTopologySpreadScore

def host(name: str, **labels: str) -> NodeRecord:
    return spread_node(name, {HOSTNAME: name, **labels})


def scores(
    incoming: PodRecord,
    nodes: list[NodeRecord],
    pods: list[PodRecord],
    failed: list[NodeRecord] | None = None,
    workloads: list[tuple[str, dict[str, Any]]] | None = None,
) -> dict[str, int]:
    """The normalised score of each candidate node; `failed` nodes hold pods but are not candidates."""
    cache, framework = cluster([*nodes, *(failed or [])], pods)
    for resource, obj in workloads or []:
        cache.workloads.apply(resource, "ADDED", obj)
    rows = np.array([cache.row_of(n.name) for n in nodes], dtype=np.intp)
    values = PodTopologySpreadScore(2).score(incoming, cache, rows, framework.static)
    assert values is not None
    return dict(zip((n.name for n in nodes), values.tolist(), strict=True))


HOSTS_ABCD = [host(f"node-{x}") for x in "abcd"]
SPREAD_4_3_2_1 = foo_pods("p-a1@node-a", "p-a2@node-a", "p-a3@node-a", "p-a4@node-a", "p-b1@node-b",
                          "p-b2@node-b", "p-b3@node-b", "p-c1@node-c", "p-c2@node-c", "p-d1@node-d")
SPREAD_4_2_1_3 = foo_pods("p-a1@node-a", "p-a2@node-a", "p-a3@node-a", "p-a4@node-a", "p-b1@node-b",
                          "p-b2@node-b", "p-x1@node-x", "p-y1@node-y", "p-y2@node-y", "p-y3@node-y")
ZONED_HOSTS = {x: host(f"node-{x}", zone="zone1" if x in "ab" else "zone2") for x in "abxy"}
ZONED_ABCD = [host(f"node-{x}", zone="zone1" if x in "ab" else "zone2") for x in "abcd"]
FOO_BAR_PODS = [existing("p-a1@node-a", {"foo": ""}), existing("p-b1@node-b", {"foo": "", "bar": ""}),
                existing("p-y1@node-y", {"foo": ""}), existing("p-y2@node-y", {"bar": ""})]
NODE_LABELLED = [spread_node("node-a", {"node": "node-a", "foo": ""}),
                 spread_node("node-b", {"node": "node-b", "foo": ""}),
                 spread_node("node-c", {"node": "node-c"})]
PODS_2_1_1 = foo_pods("p-a1@node-a", "p-a2@node-a", "p-b1@node-b", "p-c1@node-c")
FOO_IN_EMPTY = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
    {"matchExpressions": [{"key": "foo", "operator": "In", "values": [""]}]}]}}}

SCORE_CASES: list[tuple[str, PodRecord, list[NodeRecord], list[NodeRecord], list[PodRecord], list[int]]] = [
    ("one constraint on node, no existing pods",
     spread_pod("p", {"foo": ""}, constraints=[spread(1, HOSTNAME, SA, FOO)]), HOSTS_ABCD[:2], [], [],
     [100, 100]),
    ("one constraint on node, only one node is candidate",
     spread_pod("p", {"foo": ""},
                constraints=[spread(1, HOSTNAME, SA, FOO)]), HOSTS_ABCD[:1], HOSTS_ABCD[1:2],
     foo_pods("p-a1@node-a", "p-a2@node-a", "p-b1@node-b"), [100]),
    ("one constraint on node, all nodes have the same number of matching pods",
     spread_pod("p", {"foo": ""}, constraints=[spread(1, HOSTNAME, SA, FOO)]), HOSTS_ABCD[:2], [],
     foo_pods("p-a1@node-a", "p-b1@node-b"), [100, 100]),
    ("one constraint on node, all 4 nodes are candidates",
     spread_pod("p", {"foo": ""}, constraints=[spread(1, HOSTNAME, SA, FOO)]), HOSTS_ABCD, [],
     foo_pods("p-a1@node-a", "p-a2@node-a", "p-b1@node-b", "p-d1@node-d", "p-d2@node-d", "p-d3@node-d"),
     [20, 60, 100, 0]),
    ("one constraint on node, null selector",
     spread_pod("p", {"foo": ""}, constraints=[spread(1, HOSTNAME, SA, None)]), HOSTS_ABCD, [],
     foo_pods("p-a1@node-a", "p-a2@node-a", "p-b1@node-b", "p-d1@node-d", "p-d2@node-d", "p-d3@node-d"),
     [100, 100, 100, 100]),
    ("one constraint on node, all 4 nodes are candidates, maxSkew=2",
     spread_pod("p", {"foo": ""}, constraints=[spread(2, HOSTNAME, SA, FOO)]), HOSTS_ABCD, [],
     foo_pods("p-a1@node-a", "p-a2@node-a", "p-b1@node-b", "p-d1@node-d", "p-d2@node-d", "p-d3@node-d"),
     [33, 66, 100, 16]),
    ("one constraint on node, all 4 nodes are candidates, maxSkew=3",
     spread_pod("p", {"foo": ""}, constraints=[spread(3, HOSTNAME, SA, FOO)]), HOSTS_ABCD, [], SPREAD_4_3_2_1,
     [44, 66, 77, 100]),
    ("one constraint on node, 3 out of 4 nodes are candidates",
     spread_pod("p", {"foo": ""}, constraints=[spread(1, HOSTNAME, SA, FOO)]),
     [host("node-a"), host("node-b"), host("node-x")], [host("node-y")], SPREAD_4_2_1_3, [33, 83, 100]),
    ("one constraint on node, 3 out of 4 nodes are candidates, one node doesn't match topology key",
     spread_pod("p", {"foo": ""}, constraints=[spread(1, HOSTNAME, SA, FOO)]),
     [host("node-a"), spread_node("node-b", {"n": "node-b"}),
      host("node-x")], [host("node-y")], SPREAD_4_2_1_3,
     [16, 0, 100]),
    ("one constraint on zone, 3 out of 4 nodes are candidates",
     spread_pod("p", {"foo": ""}, constraints=[spread(1, "zone", SA, FOO)]),
     [ZONED_HOSTS["a"], ZONED_HOSTS["b"], ZONED_HOSTS["x"]], [ZONED_HOSTS["y"]], SPREAD_4_2_1_3,
     [75, 75, 100]),
    ("two Constraints on zone and node, 2 out of 4 nodes are candidates",
     spread_pod("p", {"foo": ""}, constraints=[spread(1, "zone", SA, FOO), spread(1, HOSTNAME, SA, FOO)]),
     [ZONED_HOSTS["a"], ZONED_HOSTS["x"]], [ZONED_HOSTS["b"], ZONED_HOSTS["y"]],
     foo_pods("p-a1@node-a", "p-a2@node-a", "p-b1@node-b", "p-x1@node-x", "p-x2@node-x", "p-y1@node-y",
              "p-y2@node-y", "p-y3@node-y", "p-y4@node-y"), [100, 63]),
    ("two Constraints on zone and node, with different labelSelectors",
     spread_pod("p", {"foo": "", "bar": ""},
                constraints=[spread(1, "zone", SA, FOO), spread(1, HOSTNAME, SA, BAR)]),
     list(ZONED_HOSTS.values()), [], FOO_BAR_PODS, [60, 20, 100, 60]),
    ("two Constraints on zone and node, with different labelSelectors, some nodes have 0 pods",
     spread_pod("p", {"foo": "", "bar": ""},
                constraints=[spread(1, "zone", SA, FOO), spread(1, HOSTNAME, SA, BAR)]),
     list(ZONED_HOSTS.values()), [],
     [existing("p-b1@node-b", {"bar": ""}), existing("p-x1@node-x", {"foo": ""}),
      existing("p-y1@node-y", {"foo": "", "bar": ""})], [100, 60, 40, 0]),
    ("two Constraints on zone and node, with different labelSelectors, 3 out of 4 nodes are candidates",
     spread_pod("p", {"foo": "", "bar": ""},
                constraints=[spread(1, "zone", SA, FOO), spread(1, HOSTNAME, SA, BAR)]),
     [ZONED_HOSTS["a"], ZONED_HOSTS["b"], ZONED_HOSTS["x"]], [ZONED_HOSTS["y"]], FOO_BAR_PODS, [50, 25, 100]),
    ("existing pods in a different namespace do not count",
     spread_pod("p", {"foo": ""}, constraints=[spread(1, HOSTNAME, SA, FOO)]), HOSTS_ABCD[:2], [],
     [existing("p-a1@node-a", {"foo": ""}, "ns1"), *foo_pods("p-a2@node-a", "p-b1@node-b", "p-b2@node-b")],
     [100, 33]),
    ("terminating Pods should be excluded",
     spread_pod("p", {"foo": ""}, constraints=[spread(1, HOSTNAME, SA, FOO)]),
     HOSTS_ABCD[:2], [], [spread_pod("p-a", {"foo": ""}, on="node-a", terminating=True),
                          *foo_pods("p-b@node-b")],
     [100, 0]),
    ("NodeAffinityPolicy honoed with labelSelectors",
     spread_pod("p", {"foo": ""}, node_selector={"foo": ""}, constraints=[spread(1, "node", SA, FOO)]),
     NODE_LABELLED, [], PODS_2_1_1, [0, 33, 100]),
    ("NodeAffinityPolicy ignored with labelSelectors",
     spread_pod("p", {"foo": ""}, node_selector={"foo": ""},
                constraints=[spread(1, "node", SA, FOO, affinity_policy="Ignore")]),
     NODE_LABELLED, [], PODS_2_1_1, [66, 100, 100]),
    ("NodeAffinityPolicy honoed with nodeAffinity",
     spread_pod("p", {"foo": ""}, affinity=FOO_IN_EMPTY, constraints=[spread(1, "node", SA, FOO)]),
     NODE_LABELLED, [], PODS_2_1_1, [0, 33, 100]),
    ("NodeAffinityPolicy ignored with nodeAffinity",
     spread_pod("p", {"foo": ""}, affinity=FOO_IN_EMPTY,
                constraints=[spread(1, "node", SA, FOO, affinity_policy="Ignore")]),
     NODE_LABELLED, [], PODS_2_1_1, [66, 100, 100]),
    ("NodeTaintsPolicy honored",
     spread_pod("p", {"foo": ""}, constraints=[spread(1, "node", SA, FOO, taints_policy="Honor")]),
     [spread_node("node-a", {"node": "node-a"}), spread_node("node-b", {"node": "node-b"}),
      spread_node("node-c", {"node": "node-c"}, UNSCHEDULABLE_TAINT)], [], PODS_2_1_1, [0, 33, 100]),
    ("NodeTaintsPolicy ignored", spread_pod("p", {"foo": ""}, constraints=[spread(1, "node", SA, FOO)]),
     [spread_node("node-a", {"node": "node-a"}), spread_node("node-b", {"node": "node-b"}),
      spread_node("node-c", {"node": "node-c"}, UNSCHEDULABLE_TAINT)], [], PODS_2_1_1, [66, 100, 100]),
    ("matchLabelKeys ANDed with LabelSelector when LabelSelector is empty",
     spread_pod("p", {"foo": "", "bar": ""},
                constraints=[spread(1, "zone", SA, {}, match_label_keys=["foo"]),
                             spread(1, HOSTNAME, SA, {}, match_label_keys=["bar"])]),
     ZONED_ABCD, [], [existing("p-a1@node-a", {"foo": ""}), existing("p-b1@node-b", {"foo": "", "bar": ""}),
                      existing("p-y1@node-c", {"foo": ""}), existing("p-y2@node-c", {"bar": ""})],
     [60, 20, 60, 100]),
    ("matchLabelKeys ANDed with LabelSelector when LabelSelector isn't empty",
     spread_pod("p", {"foo": "", "bar": "", "baz": ""},
                constraints=[spread(1, "zone", SA, FOO),
                             spread(1, HOSTNAME, SA, BAR, match_label_keys=["baz"])]),
     ZONED_ABCD, [],
     [existing("p-a1@node-a", {"foo": ""}), existing("p-b1@node-b", {"foo": "", "bar": "", "baz": ""}),
      existing("p-c1@node-c", {"foo": ""}), existing("p-c2@node-c", {"bar": ""}),
      existing("p-d3@node-c", {"bar": "", "baz": ""})],
     [60, 20, 60, 100]),
]


@pytest.mark.parametrize(
    ("incoming", "nodes", "failed", "pods", "want"),
    [case[1:] for case in SCORE_CASES],
    ids=[case[0] for case in SCORE_CASES],
)
def test_kube_score(
    incoming: PodRecord,
    nodes: list[NodeRecord],
    failed: list[NodeRecord],
    pods: list[PodRecord],
    want: list[int],
) -> None:
    assert scores(incoming, nodes, pods, failed) == dict(zip((n.name for n in nodes), want, strict=True))


# ---------------------------------------------------------------- system default constraints

def test_system_defaults_spread_pods_a_service_selects_as_one_hostname_constraint_would() -> None:
    """kube's "system defaulting, nodes don't have zone, pods match service": the zone constraint is
    left out of nodes without a zone, the hostname one (maxSkew 3) scores as a constraint of its own."""
    service = {"metadata": {"namespace": "default", "name": "web"}, "spec": {"selector": {"foo": ""}}}
    got = scores(spread_pod("p", {"foo": ""}), HOSTS_ABCD, SPREAD_4_3_2_1, workloads=[(SERVICES, service)])
    assert got == {"node-a": 44, "node-b": 66, "node-c": 77, "node-d": 100}


def replica_set(name: str, selector: dict[str, Any] | None) -> dict[str, Any]:
    return {"metadata": {"namespace": "default", "name": name}, "spec": {"selector": selector}}


RS1 = ("apps/v1", "ReplicaSet", "rs1")


def test_system_defaults_take_the_replica_sets_selector_and_nodes_without_a_zone_are_one_domain() -> None:
    """kube's "system default constraints and a replicaset": hostname weight log(4 + 2), zone weight
    log(2 + 2) (zone "mars" and the nodes without a zone)."""
    mars = {ZONE: "mars"}
    nodes = [host("node-a", **mars), host("node-b", **mars), host("node-c"), host("node-d")]
    incoming = spread_pod("p", {"foo": "tar", "baz": "sup"}, owner=RS1)
    pods = foo_pods("p-a1@node-a", "p-a2@node-a", "p-c1@node-c")
    got = scores(incoming, nodes, pods, workloads=[(REPLICA_SETS, replica_set("rs1", FOO))])
    # hostname: 2/0/1/0 pods * log(6) + 2; zone (nodes a and b only): 2 pods * log(4) + 4. Rounded:
    # 12, 9, 4 and 2, then 100 * (12 + 2 - score) // 12.
    assert got == {"node-a": 16, "node-b": 41, "node-c": 83, "node-d": 100}


def test_no_defaults_for_a_pod_nothing_selects_or_a_pod_with_constraints_of_its_own() -> None:
    cache, framework = cluster(HOSTS_ABCD, SPREAD_4_3_2_1)
    rows = np.array([cache.row_of(n.name) for n in HOSTS_ABCD], dtype=np.intp)
    plugin = PodTopologySpreadScore(2)
    assert plugin.score(spread_pod("lone", {"foo": ""}), cache, rows, framework.static) is None
    # kube's "default constraints and a replicaset that doesn't match": the pod's owner is another one.
    cache.workloads.apply(REPLICA_SETS, "ADDED", replica_set("rs1", {"matchLabels": {"tar": "x"}}))
    assert plugin.score(spread_pod("p", {"foo": ""}, owner=("apps/v1", "ReplicaSet", "rs2")), cache, rows,
                        framework.static) is None
    # A pod with only DoNotSchedule constraints gets no defaults in the score (kube: Skip).
    hard_only = spread_pod("h", {"foo": ""}, owner=RS1, constraints=[spread(1, "zone", DNS, FOO)])
    assert plugin.score(hard_only, cache, rows, framework.static) is None
    # The defaults apply only with system defaulting.
    assert PodTopologySpreadScore(2, system_defaults=False).score(
        spread_pod("q", {"tar": "x"}, owner=RS1), cache, rows, framework.static) is None
    assert plugin.score(spread_pod("q", {"tar": "x"}, owner=RS1), cache, rows, framework.static) is not None


def test_default_selector_merges_services_and_the_controllers_selector_as_kube_does() -> None:
    cache = SchedulerCache()
    workloads = cache.workloads
    workloads.apply(SERVICES, "ADDED", {"metadata": {"namespace": "default", "name": "a"},
                                        "spec": {"selector": {"app": "web"}}})
    workloads.apply(SERVICES, "ADDED", {"metadata": {"namespace": "default", "name": "b"},
                                        "spec": {"selector": {"tier": "front"}}})
    workloads.apply(SERVICES, "ADDED", {"metadata": {"namespace": "default", "name": "other"},
                                        "spec": {"selector": {"app": "db"}}})
    workloads.apply(SERVICES, "ADDED", {"metadata": {"namespace": "default", "name": "headless"}, "spec": {}})
    workloads.apply(SERVICES, "ADDED", {"metadata": {"namespace": "elsewhere", "name": "c"},
                                        "spec": {"selector": {"app": "web"}}})
    labels = {"app": "web", "tier": "front", "hash": "1"}
    selector = workloads.default_selector(spread_pod("p", labels))
    assert selector is not None
    assert {(r.key, r.operator, tuple(r.values)) for r in selector.requirements} == {
        ("app", "In", ("web",)), ("tier", "In", ("front",))}
    workloads.apply(STATEFUL_SETS, "ADDED", {"metadata": {"namespace": "default", "name": "db"}, "spec": {
        "selector": {"matchExpressions": [{"key": "hash", "operator": "Exists"}]}}})
    selector = workloads.default_selector(spread_pod("p", labels, owner=("apps/v1", "StatefulSet", "db")))
    assert selector is not None and len(selector.requirements) == 3
    workloads.apply(REPLICATION_CONTROLLERS, "ADDED", {"metadata": {"namespace": "elsewhere", "name": "rc"},
                                                       "spec": {"selector": {"rc": "yes"}}})
    lone = workloads.default_selector(spread_pod("q", {"rc": "yes"}, namespace="elsewhere",
                                                 owner=("v1", "ReplicationController", "rc")))
    assert lone is not None and [(r.key, tuple(r.values)) for r in lone.requirements] == [("rc", ("yes",))]
    workloads.apply(SERVICES, "DELETED", {"metadata": {"namespace": "default", "name": "a"}})
    workloads.apply(SERVICES, "DELETED", {"metadata": {"namespace": "default", "name": "b"}})
    assert workloads.default_selector(spread_pod("p", labels)) is None
    workloads.replace(SERVICES, [])
    assert len(workloads) == 2
    # Only a controlling owner of a kind kube reads counts (a Job's pods get no defaults).
    assert spread_pod("j", owner=("batch/v1", "Job", "j")).controller is None
    assert spread_pod("r", owner=RS1).controller == ("ReplicaSet", "rs1")


# ---------------------------------------------------------------- parsing and validation

@pytest.mark.parametrize(
    ("constraint", "reason"),
    [
        (spread(0, "zone", DNS, FOO), "maxSkew must be an integer greater than zero, got 0"),
        ({"maxSkew": 1, "topologyKey": "zone"}, "whenUnsatisfiable must be DoNotSchedule or ScheduleAnyway"),
        (spread(1, "zone", "Sometimes", FOO), "got 'Sometimes'"),
        (spread(1, "", DNS, FOO), "topologyKey must be a non-empty label key"),
        (spread(1, "zone", DNS, FOO, min_domains=0), "minDomains must be an integer greater than zero"),
        (spread(1, "zone", SA, FOO, min_domains=2), "minDomains can only be used with whenUnsatisfiable"),
        (spread(1, "zone", DNS, FOO, affinity_policy="Maybe"), "nodeAffinityPolicy must be Honor or Ignore"),
        (spread(1, "zone", DNS, FOO, taints_policy="honor"), "nodeTaintsPolicy must be Honor or Ignore"),
        (spread(1, "zone", DNS, {"matchExpressions": [{"key": "a", "operator": "In"}]}), "must be non-empty"),
    ],
)
def test_an_invalid_constraint_is_the_pods_reason_not_an_exception(
    constraint: dict[str, Any], reason: str
) -> None:
    record = spread_pod("bad", {"foo": ""}, constraints=[constraint])
    prefix = "invalid topology spread constraint: spec.topologySpreadConstraints[0]."
    assert record.spec_error.startswith(prefix)
    assert reason in record.spec_error
    assert record.spread is NO_SPREAD


def test_a_topology_key_twice_with_the_same_action_is_refused_but_once_per_action_is_not() -> None:
    twice = spread_pod("twice", constraints=[spread(1, "zone", DNS, FOO), spread(2, "zone", DNS, FOO)])
    assert "spec.topologySpreadConstraints[1] repeats topologyKey 'zone'" in twice.spec_error
    both = spread_pod("both", constraints=[spread(1, "zone", DNS, FOO), spread(2, "zone", SA, FOO)])
    assert both.spec_error == ""
    assert [c.max_skew for c in both.spread.hard] == [1] and [c.max_skew for c in both.spread.soft] == [2]


def test_constraints_are_parsed_once_per_template_and_match_label_keys_take_the_pods_value() -> None:
    template = [spread(1, "zone", DNS, FOO, match_label_keys=["pod-template-hash"])]
    first = spread_pod("r1", {"foo": "", "pod-template-hash": "abc", "idx": "1"}, constraints=template)
    second = spread_pod("r2", {"foo": "", "pod-template-hash": "abc", "idx": "2"}, constraints=template)
    other = spread_pod("r3", {"foo": "", "pod-template-hash": "def"}, constraints=template)
    assert first.spread is second.spread  # other labels do not matter
    assert first.spread is not other.spread
    (constraint,) = first.spread.hard
    assert constraint.selector.matches({"foo": "", "pod-template-hash": "abc"})
    assert not constraint.selector.matches({"foo": "", "pod-template-hash": "def"})
    assert constraint.min_domains == 1
    assert (constraint.honor_node_affinity, constraint.honor_node_taints) == (True, False)
    # A key the pod lacks adds nothing; a null selector stays one that matches no pod.
    null_selector = [spread(1, "zone", DNS, None, match_label_keys=["x"])]
    (null,) = spread_pod("n", {"foo": ""}, constraints=null_selector).spread.hard
    assert null.selector.nothing


# ---------------------------------------------------------------- in the framework and the cache

def test_pods_without_constraints_cost_nothing() -> None:
    cache, framework = cluster(HOSTS_ABCD, SPREAD_4_3_2_1)
    plain = spread_pod("plain", {"foo": ""})
    assert framework.filters[0].run(plain, cache, cache.valid.copy(), framework.static) == []
    rows = np.array([cache.row_of(n.name) for n in HOSTS_ABCD], dtype=np.intp)
    assert PodTopologySpreadScore(2).score(plain, cache, rows, framework.static) is None


def test_the_filter_gives_the_same_verdicts_window_by_window_and_follows_the_cache() -> None:
    nodes = [host(f"n{i:02d}", zone=f"z{i % 3}") for i in range(40)]
    pods = [existing(f"p{i}@n{i % 40:02d}", {"foo": ""}) for i in range(7)]
    cache, framework = cluster(nodes, pods)
    plugin = framework.filters[0]
    incoming = spread_pod("p", {"foo": ""}, constraints=[spread(1, "zone", DNS, FOO)])
    alive = cache.valid.copy()
    whole = {reason: mask.copy() for reason, mask in plugin.run(incoming, cache, alive, framework.static)}
    limit = cache.row_limit
    for start in range(0, limit, 7):
        window = slice(start, min(start + 7, limit))
        for reason, mask in plugin.run(incoming, cache, alive[window], framework.static, window):
            assert (mask == whole[reason][window]).all()
    wrapped = np.array([limit - 2, limit - 1, 0, 1])
    for reason, mask in plugin.run(incoming, cache, alive[wrapped], framework.static, wrapped):
        assert (mask == whole[reason][wrapped]).all()
    # Zones hold 3/2/2 matching pods: only z1 and z2 may take one more; a pod placed in z1 changes that.
    rows, reasons = framework.feasible_rows(incoming)
    assert {cache.row_names[r] for r in rows.tolist()} == {n.name for n in nodes if n.labels["zone"] != "z0"}
    assert reasons == {CONSTRAINTS_NOT_MATCH: 14}
    cache.set_pod(existing("late@n01", {"foo": ""}))
    rows, reasons = framework.feasible_rows(incoming)
    assert {cache.row_names[r] for r in rows.tolist()} == {n.name for n in nodes if n.labels["zone"] == "z2"}
    assert reasons == {CONSTRAINTS_NOT_MATCH: 27}


def test_the_unschedulable_message_is_kube_schedulers() -> None:
    nodes = [host("a", zone="z1"), host("b", zone="z2"), host("c")]
    cache, framework = cluster(nodes, foo_pods("p1@a", "p2@a"))
    decision = framework.schedule(spread_pod("p", {"foo": ""}, constraints=[spread(1, "zone", DNS, FOO)]))
    assert decision.node == "b"
    assert decision.reasons == {CONSTRAINTS_NOT_MATCH: 1, MISSING_LABEL: 1}
    # Only node a counts as a domain for a pod that may only go there (z1 holds the minimum, 2): a passes,
    # and so does b, whose domain is not counted (NodeAffinity, not in this framework, refuses it).
    pinned = spread_pod("q", {"foo": ""}, constraints=[spread(1, "zone", DNS, FOO)],
                        node_selector={HOSTNAME: "a"})
    rows, _ = framework.feasible_rows(pinned)
    assert sorted(cache.row_names[r] for r in rows.tolist()) == ["a", "b"]
    # Fewer domains than minDomains: the minimum is 0, and both zones are over the skew.
    cache.set_pod(existing("p3@b", {"foo": ""}))
    decision = framework.schedule(spread_pod("r", {"foo": ""}, constraints=[spread(1, "zone", DNS, FOO, 3)]))
    assert decision.node is None
    # kube sorts the "count reason" strings: "1 node(s) ... (missing required label)" before "2 node(s) ...".
    assert decision.message == f"0/3 nodes are available: 1 {MISSING_LABEL}, 2 {CONSTRAINTS_NOT_MATCH}."


def test_the_default_profile_runs_the_plugin_with_kubes_weight_and_reads_the_static_filters() -> None:
    config = default_config()
    profile = config.profiles[0]
    assert "PodTopologySpread" in profile.filters
    assert profile.filters.index("PodTopologySpread") < profile.filters.index("InterPodAffinity")
    assert [(s.name, s.weight) for s in profile.scores if s.name == "PodTopologySpread"] == [
        ("PodTopologySpread", 2)]
    assert any(isinstance(f, PodTopologySpreadFilter) for f in build_filters(config, profile))
    assert any(isinstance(s, PodTopologySpreadScore) for s in build_scores(profile))
    # Honor policies read the NodeAffinity and TaintToleration filters' cached results: their entries are
    # the ones the profile's own filters use.
    nodes = [spread_node("a", {"zone": "z1", "foo": ""}),
             spread_node("b", {"zone": "z2"}, UNSCHEDULABLE_TAINT)]
    cache = SchedulerCache()
    for record in nodes:
        cache.set_node(record)
    filters = [NodeAffinityFilter(), TaintTolerationFilter(), PodTopologySpreadFilter()]
    framework = Framework("ai-scheduler", filters, [], cache)
    incoming = spread_pod("p", {"foo": ""}, node_selector={"foo": ""},
                          constraints=[spread(1, "zone", DNS, FOO, taints_policy="Honor")])
    framework.schedule(incoming)
    entries = len(framework.static._entries)
    framework.feasible_rows(incoming)
    assert len(framework.static._entries) == entries == 2


def test_terminating_pods_are_kept_apart_and_the_cache_stays_consistent() -> None:
    cache, _ = cluster(HOSTS_ABCD, [])
    running = existing("web@node-a", {"foo": ""})
    cache.set_pod(running)
    assert len(cache.terminating) == 0
    leaving = spread_pod("web", {"foo": ""}, on="node-a", terminating=True)
    cache.set_pod(leaving)
    assert len(cache.terminating) == 1
    assert cache.check_consistency() == []
    cache.remove_node("node-a")
    assert len(cache.terminating) == 0
    cache.set_node(HOSTS_ABCD[0])
    assert len(cache.terminating) == 1
    cache.remove_pod(leaving.uid)
    assert len(cache.terminating) == 0 and len(cache.assigned) == 0
    assert cache.check_consistency() == []


# ---------------------------------------------------------------- against kube's code, case by case

def _kube_count(pods: list[PodRecord], selector: LabelSelector, namespace: str) -> int:
    """countPodsMatchSelector: an empty selector counts nothing; deleted pods and other namespaces neither."""
    if selector.everything:
        return 0
    return sum(1 for p in pods if not p.deleting and p.namespace == namespace and selector.matches(p.labels))


def _kube_included(constraint: SpreadConstraint, incoming: PodRecord, record: NodeRecord) -> bool:
    """matchNodeInclusionPolicies."""
    if constraint.honor_node_affinity and NodeAffinityFilter().check(incoming, record) is not None:
        return False
    return not (constraint.honor_node_taints and TaintTolerationFilter().check(incoming, record) is not None)


def kube_filter(incoming: PodRecord, nodes: list[NodeRecord], pods: list[PodRecord]) -> dict[str, str]:
    """filtering.go's calPreFilterState and Filter, node by node, as kube-scheduler runs them."""
    constraints = incoming.spread.hard
    on = {n.name: [p for p in pods if p.node_name == n.name] for n in nodes}
    matched: list[dict[str, int]] = [{} for _ in constraints]
    for record in nodes:
        if not all(c.topology_key in record.labels for c in constraints):
            continue
        for i, c in enumerate(constraints):
            if _kube_included(c, incoming, record):
                value = record.labels[c.topology_key]
                matched[i][value] = matched[i].get(value, 0) + _kube_count(on[record.name], c.selector,
                                                                             incoming.namespace)
    verdicts = {}
    for record in nodes:
        verdicts[record.name] = OK
        for i, c in enumerate(constraints):
            if c.topology_key not in record.labels:
                verdicts[record.name] = UNRESOLVABLE
                break
            minimum = min(matched[i].values()) if len(matched[i]) >= c.min_domains else 0
            own = 1 if c.selector.matches(incoming.labels) else 0
            if matched[i].get(record.labels[c.topology_key], 0) + own - minimum > c.max_skew:
                verdicts[record.name] = SKEW
                break
    return verdicts


def kube_score(
    incoming: PodRecord,
    candidates: list[NodeRecord],
    nodes: list[NodeRecord],
    pods: list[PodRecord],
    constraints: tuple[SpreadConstraint, ...],
    require_all: bool,
) -> dict[str, int]:
    """scoring.go's PreScore, Score and NormalizeScore, node by node."""
    on = {n.name: [p for p in pods if p.node_name == n.name] for n in nodes}

    def has_all(record: NodeRecord) -> bool:
        return all(c.topology_key in record.labels for c in constraints)

    ignored = {n.name for n in candidates if require_all and not has_all(n)}
    counts: list[dict[str, int]] = [{} for _ in constraints]
    for record in candidates:
        if record.name not in ignored:
            for i, c in enumerate(constraints):
                if c.topology_key != HOSTNAME:
                    counts[i].setdefault(record.labels.get(c.topology_key, ""), 0)
    weights = [
        math.log(len(candidates) - len(ignored) + 2 if c.topology_key == HOSTNAME else len(counts[i]) + 2)
        for i, c in enumerate(constraints)
    ]
    for record in nodes:
        if require_all and not has_all(record):
            continue
        for i, c in enumerate(constraints):
            value = record.labels.get(c.topology_key, "")
            if _kube_included(c, incoming, record) and value in counts[i]:
                counts[i][value] += _kube_count(on[record.name], c.selector, incoming.namespace)
    raw: dict[str, int] = {}
    for record in candidates:
        if record.name in ignored:
            continue
        total = 0.0
        for i, c in enumerate(constraints):
            if c.topology_key in record.labels:
                if c.topology_key == HOSTNAME:
                    count = _kube_count(on[record.name], c.selector, incoming.namespace)
                else:
                    count = counts[i][record.labels[c.topology_key]]
                total += count * weights[i] + float(c.max_skew - 1)
        raw[record.name] = math.floor(total + 0.5)
    low, high = min(raw.values(), default=0), max(raw.values(), default=0)
    return {
        n.name: 0 if n.name not in raw else 100 if high == 0 else 100 * (high + low - raw[n.name]) // high
        for n in candidates
    }


SELECTORS: list[dict[str, Any] | None] = [
    {"matchLabels": {"app": "a"}}, {"matchExpressions": [{"key": "tier", "operator": "Exists"}]},
    {"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["b"]}]}, {}, None,
]
TOPOLOGY_KEYS = ["zone", HOSTNAME, "rack"]


def random_case(rng: random.Random) -> tuple[list[NodeRecord], list[PodRecord], PodRecord]:
    nodes = []
    for i in range(rng.randint(1, 24)):
        labels = {"kubernetes.io/os": "linux"}
        if rng.random() < 0.9:
            labels[HOSTNAME] = f"n{i}"
        if rng.random() < 0.85:
            labels["zone"] = f"z{rng.randint(0, 3)}"
        if rng.random() < 0.6:
            labels["rack"] = f"r{rng.randint(0, 5)}"
        if rng.random() < 0.5:
            labels["foo"] = ""
        taints = [{"key": "t", "effect": "NoSchedule"}] if rng.random() < 0.2 else None
        nodes.append(spread_node(f"n{i}", labels, taints))

    def labels_of() -> dict[str, str]:
        chosen = {"app": rng.choice("ab")}
        if rng.random() < 0.6:
            chosen["tier"] = rng.choice("xy")
        return chosen

    pods = [
        spread_pod(f"e{i}", labels_of(), on=rng.choice(nodes).name,
                   namespace=rng.choice(["default", "default", "other"]), terminating=rng.random() < 0.1)
        for i in range(rng.randint(0, 40))
    ]
    constraints = []
    for key, when in rng.sample([(k, w) for k in TOPOLOGY_KEYS for w in (DNS, SA)], rng.randint(1, 3)):
        min_domains = rng.choice([None, None, 1, 2, 3, 5]) if when == DNS else None
        constraints.append(spread(
            rng.randint(1, 3), key, when, rng.choice(SELECTORS), min_domains,
            rng.choice([None, "Honor", "Ignore"]), rng.choice([None, "Honor", "Ignore"]),
            rng.choice([None, ["tier"]]),
        ))
    incoming = spread_pod("incoming", labels_of(), constraints=constraints,
                          node_selector={"foo": ""} if rng.random() < 0.3 else None,
                          tolerations=[{"key": "t", "operator": "Exists"}] if rng.random() < 0.3 else None)
    assert incoming.spec_error == ""
    return nodes, pods, incoming


@pytest.mark.parametrize("seed", range(300))
def test_filter_and_score_agree_with_kubes_code_node_by_node(seed: int) -> None:
    rng = random.Random(seed)
    nodes, pods, incoming = random_case(rng)
    assert filter_verdicts(incoming, nodes, pods) == kube_filter(incoming, nodes, pods)
    candidates = rng.sample(nodes, rng.randint(1, len(nodes)))
    if incoming.spread.soft:
        want = kube_score(incoming, candidates, nodes, pods, incoming.spread.soft, require_all=True)
        assert scores(incoming, candidates, pods, [n for n in nodes if n not in candidates]) == want
    # The same pod without constraints of its own, in a ReplicaSet that selects app=a: the system defaults.
    owned = spread_pod("owned", incoming.labels, owner=RS1)
    workloads = [(REPLICA_SETS, replica_set("rs1", {"matchLabels": {"app": "a"}}))]
    selector = LabelSelector((Requirement("app", "In", frozenset({"a"})),))
    defaults = tuple(dataclasses.replace(c, selector=selector) for c in SYSTEM_DEFAULT_CONSTRAINTS)
    # kube's default keys: give some nodes a zone under the well-known key.
    zoned = [spread_node(n.name, {**n.labels, ZONE: n.labels["zone"]} if "zone" in n.labels else n.labels)
             for n in nodes]
    chosen = [z for z in zoned if z.name in {c.name for c in candidates}]
    want = kube_score(owned, chosen, zoned, pods, defaults, require_all=False)
    assert scores(owned, chosen, pods, [z for z in zoned if z not in chosen], workloads) == want


def test_a_large_replica_set_stays_within_its_skew_while_the_search_looks_at_windows_of_nodes() -> None:
    """Hundreds of replicas (their group of alike pods on many rows) over 300 nodes in 7 zones of
    unequal size: the cycle looks at windows of nodes, and every placement keeps the skew."""
    nodes = [host(f"n{i:03d}", zone=f"z{i % 7 if i % 5 else 0}") for i in range(300)]
    cache, framework = cluster(nodes, [])
    zone_of = {n.name: n.labels["zone"] for n in nodes}
    placed = {f"z{z}": 0 for z in range(7)}
    looked_at = []
    web = [spread(1, "zone", DNS, {"matchLabels": {"app": "web"}})]
    for i in range(350):
        replica = spread_pod(f"r{i}", {"app": "web"}, constraints=web)
        decision = framework.schedule(replica)
        assert decision.node is not None
        looked_at.append(decision.evaluated)
        cache.assume(replica, decision.node)
        placed[zone_of[decision.node]] += 1
        assert max(placed.values()) - min(placed.values()) <= 1, placed
    assert min(looked_at) < 300  # some searches stopped before the end of the node table
    assert cache.check_consistency() == []
