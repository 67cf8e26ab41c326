"""InterPodAffinity against kube-scheduler's semantics (its filtering_test.go and scoring_test.go cases).

Each case builds a small cluster (nodes with hostname, zone and region
labels), places existing pods, and asks the filter or the score about an
incoming pod, as kube-scheduler's tables do; the expected outcomes are the
ones kube-scheduler's tests state for the same situations.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest
from builders import Pod, make_node

from ai_scheduler.cache.cache import SchedulerCache
from ai_scheduler.cache.records import NodeRecord, PodRecord
from ai_scheduler.cache.selectors import SelectorError, parse_selector, pod_affinity_terms
from ai_scheduler.scheduler.framework.interface import StaticResults
from ai_scheduler.scheduler.framework.plugins.inter_pod_affinity import (
    AFFINITY_RULES,
    ANTI_AFFINITY_RULES,
    EXISTING_ANTI_AFFINITY_RULES,
    InterPodAffinityFilter,
    InterPodAffinityScore,
    normalize_min_max,
)
from ai_scheduler.scheduler.framework.runtime import Framework

HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
REGION = "region"

# node name -> (zone, region); kube's tests use region r1/r2 and zones z11, z12, z21
NODES = {"m1": ("z11", "r1"), "m2": ("z12", "r1"), "m3": ("z21", "r2")}


def term(
    topology_key: str,
    *,
    labels: dict[str, str] | None = None,
    expressions: Any = None,
    namespaces: list[str] | None = None,
    namespace_selector: Any = "absent",
    match_label_keys: list[str] | None = None,
) -> dict[str, Any]:
    selector: dict[str, Any] = {}
    if labels is not None:
        selector["matchLabels"] = labels
    if expressions is not None:
        selector["matchExpressions"] = expressions
    result: dict[str, Any] = {"topologyKey": topology_key, "labelSelector": selector}
    if namespaces is not None:
        result["namespaces"] = namespaces
    if namespace_selector != "absent":
        result["namespaceSelector"] = namespace_selector
    if match_label_keys is not None:
        result["matchLabelKeys"] = match_label_keys
    return result


def affinity(
    *,
    required: list[Any] | None = None,
    anti: list[Any] | None = None,
    preferred: list[tuple[int, Any]] | None = None,
    preferred_anti: list[tuple[int, Any]] | None = None,
) -> dict[str, Any]:
    req = "requiredDuringSchedulingIgnoredDuringExecution"
    pref = "preferredDuringSchedulingIgnoredDuringExecution"
    result: dict[str, Any] = {}
    if required or preferred:
        result["podAffinity"] = {}
        if required:
            result["podAffinity"][req] = required
        if preferred:
            result["podAffinity"][pref] = [{"weight": w, "podAffinityTerm": t} for w, t in preferred]
    if anti or preferred_anti:
        result["podAntiAffinity"] = {}
        if anti:
            result["podAntiAffinity"][req] = anti
        if preferred_anti:
            result["podAntiAffinity"][pref] = [{"weight": w, "podAffinityTerm": t} for w, t in preferred_anti]
    return result


def affine_pod(name: str, labels: dict[str, str] | None = None, node: str | None = None,
               namespace: str = "default",
               **affinity_spec: Any) -> PodRecord:
    chosen = affinity(**affinity_spec) if affinity_spec else None
    return Pod(name, namespace=namespace, labels=labels, node_name=node,
               affinity=chosen).uid(f"uid-{namespace}-{name}").record()


def cluster(*existing: PodRecord, nodes: dict[str, tuple[str, str]] | None = None) -> SchedulerCache:
    cache = SchedulerCache()
    for name, (zone, region) in (nodes or NODES).items():
        labels = {ZONE: zone, REGION: region} if zone else {}
        cache.set_node(NodeRecord.from_api(make_node(name, labels=labels)))
    for record in existing:
        cache.set_pod(record)
    assert cache.check_consistency() == []
    return cache


def filter_reasons(cache: SchedulerCache, incoming: PodRecord) -> dict[str, str | None]:
    """Node name -> the filter's reason (None: passes)."""
    plugin = InterPodAffinityFilter()
    alive = cache.valid.copy()
    result: dict[str, str | None] = {cache.row_names[row]: None for row in np.flatnonzero(alive).tolist()}
    for reason, mask in plugin.run(incoming, cache, alive, StaticResults(cache)):
        for row in np.flatnonzero(mask & alive).tolist():
            assert result[cache.row_names[row]] is None, "a node is charged one reason"
            result[cache.row_names[row]] = reason
    return result


def scores(cache: SchedulerCache, incoming: PodRecord) -> dict[str, int] | None:
    rows = np.flatnonzero(cache.valid)
    values = InterPodAffinityScore(2).score(incoming, cache, rows, StaticResults(cache))
    if values is None:
        return None
    return {cache.row_names[int(row)]: int(v) for row, v in zip(rows, values, strict=True)}


SECURITY = {"service": "securityscan"}


# ---------------------------------------------------------------- filter: the incoming pod's affinity
def test_a_pod_without_affinity_passes_everywhere_when_no_existing_pod_has_anti_affinity() -> None:
    cache = cluster(affine_pod("p1", SECURITY, node="m1"))
    assert filter_reasons(cache, affine_pod("incoming")) == {"m1": None, "m2": None, "m3": None}


def test_required_affinity_in_the_same_region_as_a_matching_pod() -> None:
    cache = cluster(affine_pod("p1", SECURITY, node="m1"))
    incoming = affine_pod(
        "incoming",
        required=[
            term(
                REGION,
                expressions=[{"key": "service", "operator": "In", "values": ["securityscan", "value2"]}],
            )
        ],
    )
    assert filter_reasons(cache, incoming) == {"m1": None, "m2": None, "m3": AFFINITY_RULES}


def test_required_affinity_not_in_and_exists_operators() -> None:
    cache = cluster(affine_pod("p1", SECURITY, node="m1"))
    not_in = affine_pod(
        "a",
        required=[
            term(
                HOST,
                expressions=[{"key": "service", "operator": "NotIn", "values": ["securityscan3", "value3"]}],
            )
        ],
    )
    assert filter_reasons(cache, not_in)["m1"] is None
    exists = affine_pod("b", required=[term(HOST, expressions=[{"key": "service", "operator": "Exists"}])])
    assert filter_reasons(cache, exists) == {"m1": None, "m2": AFFINITY_RULES, "m3": AFFINITY_RULES}
    wrong = affine_pod(
        "c",
        required=[
            term(
                HOST,
                expressions=[{"key": "service", "operator": "In", "values": ["antivirusscan", "value2"]}],
            )
        ],
    )
    assert set(filter_reasons(cache, wrong).values()) == {AFFINITY_RULES}


def test_an_existing_pod_must_match_all_the_affinity_terms() -> None:
    cache = cluster(affine_pod("p1", SECURITY, node="m1"), affine_pod("p2", {"wrongkey": "v"}, node="m1"))
    both = affine_pod(
        "incoming",
        required=[
            term(HOST, expressions=[{"key": "service", "operator": "Exists"}]),
            term(HOST, expressions=[{"key": "wrongkey", "operator": "DoesNotExist"}]),
        ],
    )
    assert filter_reasons(cache, both)["m1"] is None  # p1 matches both
    impossible = affine_pod(
        "incoming2",
        required=[
            term(HOST, expressions=[{"key": "service", "operator": "Exists"}]),
            term(HOST, expressions=[{"key": "wrongkey", "operator": "Exists"}]),
        ],
    )
    assert filter_reasons(cache, impossible)["m1"] == AFFINITY_RULES  # no single pod matches both


def test_the_first_pod_of_a_self_affine_group_passes_on_nodes_with_the_key() -> None:
    nodes = {"m1": ("z11", "r1"), "bare": ("", "")}
    cache = cluster(nodes=nodes)
    incoming = affine_pod("first", SECURITY, required=[term(REGION, labels=SECURITY)])
    assert filter_reasons(cache, incoming) == {"m1": None, "bare": AFFINITY_RULES}
    not_self = affine_pod("first", {"service": "other"}, required=[term(REGION, labels=SECURITY)])
    assert filter_reasons(cache, not_self) == {"m1": AFFINITY_RULES, "bare": AFFINITY_RULES}


def test_once_a_matching_pod_exists_self_affinity_follows_it() -> None:
    cache = cluster(affine_pod("p1", SECURITY, node="m3"))
    incoming = affine_pod("second", SECURITY, required=[term(REGION, labels=SECURITY)])
    assert filter_reasons(cache, incoming) == {"m1": AFFINITY_RULES, "m2": AFFINITY_RULES, "m3": None}


def test_required_anti_affinity_keeps_the_pod_out_of_a_matching_pods_domain() -> None:
    cache = cluster(affine_pod("p1", SECURITY, node="m1"))
    by_host = affine_pod("incoming", anti=[term(HOST, labels=SECURITY)])
    assert filter_reasons(cache, by_host) == {"m1": ANTI_AFFINITY_RULES, "m2": None, "m3": None}
    by_zone = affine_pod("incoming", anti=[term(REGION, labels=SECURITY)])
    assert filter_reasons(cache, by_zone) == {
        "m1": ANTI_AFFINITY_RULES,
        "m2": ANTI_AFFINITY_RULES,
        "m3": None,
    }


def test_anti_affinity_on_a_key_the_node_lacks_does_not_filter_it() -> None:
    cache = cluster(affine_pod("p1", SECURITY, node="bare"), nodes={"bare": ("", ""), "m1": ("z11", "r1")})
    incoming = affine_pod("incoming", anti=[term(REGION, labels=SECURITY)])
    assert filter_reasons(cache, incoming) == {"bare": None, "m1": None}


def test_existing_pods_anti_affinity_keeps_a_matching_pod_away() -> None:
    cache = cluster(affine_pod("p1", {"app": "db"}, node="m1", anti=[term(ZONE, labels=SECURITY)]))
    assert filter_reasons(cache, affine_pod("incoming", SECURITY)) == {
        "m1": EXISTING_ANTI_AFFINITY_RULES,
        "m2": None,
        "m3": None,
    }
    other = affine_pod("other", {"service": "x"})
    assert filter_reasons(cache, other) == {"m1": None, "m2": None, "m3": None}


def test_affinity_fails_first_then_anti_affinity_then_existing_anti_affinity() -> None:
    cache = cluster(
        affine_pod("p1", SECURITY, node="m1", anti=[term(HOST, labels={"app": "web"})]),
        affine_pod("p2", {"app": "cache"}, node="m2"),
    )
    incoming = affine_pod(
        "incoming",
        {"app": "web"},
        required=[term(REGION, labels=SECURITY)],
        anti=[term(HOST, labels={"app": "cache"})],
    )
    # m1: affinity met (p1 in r1), existing p1's anti-affinity matches us; m2: affinity met, our anti-affinity
    # hits p2; m3: no securityscan pod in r2.
    assert filter_reasons(cache, incoming) == {
        "m1": EXISTING_ANTI_AFFINITY_RULES,
        "m2": ANTI_AFFINITY_RULES,
        "m3": AFFINITY_RULES,
    }


# ---------------------------------------------------------------- namespaces
def test_terms_apply_to_the_pods_own_namespace_unless_they_name_others() -> None:
    cache = cluster(affine_pod("p1", SECURITY, node="m1", namespace="other"))
    own = affine_pod("incoming", anti=[term(HOST, labels=SECURITY)])
    assert filter_reasons(cache, own)["m1"] is None
    listed = affine_pod("incoming", anti=[term(HOST, labels=SECURITY, namespaces=["other"])])
    assert filter_reasons(cache, listed)["m1"] == ANTI_AFFINITY_RULES
    everywhere = affine_pod("incoming", anti=[term(HOST, labels=SECURITY, namespace_selector={})])
    assert filter_reasons(cache, everywhere)["m1"] == ANTI_AFFINITY_RULES


def test_namespace_selector_reads_the_namespaces_labels() -> None:
    cache = cluster(affine_pod("p1", SECURITY, node="m1", namespace="team-a"))
    incoming = affine_pod(
        "incoming", anti=[term(HOST, labels=SECURITY, namespace_selector={"matchLabels": {"team": "a"}})]
    )
    assert filter_reasons(cache, incoming)["m1"] is None  # namespace labels not known yet
    cache.set_namespace("team-a", {"team": "a"})
    assert filter_reasons(cache, incoming)["m1"] == ANTI_AFFINITY_RULES
    cache.set_namespace("team-a", {"team": "b"})
    assert filter_reasons(cache, incoming)["m1"] is None


def test_existing_pods_terms_with_a_namespace_selector_match_the_incoming_pods_namespace() -> None:
    cache = cluster(
        affine_pod(
            "p1",
            {"app": "db"},
            node="m1",
            namespace="infra",
            anti=[term(HOST, labels=SECURITY, namespace_selector={"matchLabels": {"env": "prod"}})],
        )
    )
    cache.set_namespace("shop", {"env": "prod"})
    assert (
        filter_reasons(cache, affine_pod("incoming", SECURITY, namespace="shop"))["m1"]
        == EXISTING_ANTI_AFFINITY_RULES
    )
    assert filter_reasons(cache, affine_pod("incoming", SECURITY, namespace="dev"))["m1"] is None


def test_match_label_keys_add_the_pods_own_values_to_the_selector() -> None:
    cache = cluster(
        affine_pod("old", {"app": "train", "rev": "1"}, node="m1"),
        affine_pod("new", {"app": "train", "rev": "2"}, node="m2"),
    )
    incoming = affine_pod(
        "incoming",
        {"app": "train", "rev": "2"},
        anti=[term(HOST, labels={"app": "train"}, match_label_keys=["rev"])],
    )
    assert filter_reasons(cache, incoming) == {"m1": None, "m2": ANTI_AFFINITY_RULES, "m3": None}


# ---------------------------------------------------------------- the cache keeps up
def test_results_follow_pods_and_node_labels_as_they_change() -> None:
    cache = cluster()
    incoming = affine_pod("incoming", anti=[term(ZONE, labels=SECURITY)])
    assert set(filter_reasons(cache, incoming).values()) == {None}
    cache.set_pod(affine_pod("p1", SECURITY, node="m1"))
    assert filter_reasons(cache, incoming)["m1"] == ANTI_AFFINITY_RULES
    # m2 moves into m1's zone: it now shares the domain.
    cache.set_node(NodeRecord.from_api(make_node("m2", labels={ZONE: "z11", REGION: "r1"})))
    assert filter_reasons(cache, incoming)["m2"] == ANTI_AFFINITY_RULES
    cache.remove_pod("uid-default-p1")
    assert set(filter_reasons(cache, incoming).values()) == {None}
    assert cache.check_consistency() == []


def test_a_removed_node_takes_its_pods_out_of_the_groups() -> None:
    cache = cluster(affine_pod("p1", SECURITY, node="m1"))
    cache.remove_node("m1")
    assert cache.check_consistency() == []
    incoming = affine_pod("incoming", required=[term(REGION, labels=SECURITY)])
    assert filter_reasons(cache, incoming) == {"m2": AFFINITY_RULES, "m3": AFFINITY_RULES}


def test_a_cycle_places_anti_affine_replicas_one_per_node() -> None:
    cache = cluster()
    framework = Framework(
        "ai-scheduler", [InterPodAffinityFilter()], [InterPodAffinityScore(2)], cache, rng=random.Random(3)
    )
    placed = []
    for i in range(4):
        replica = affine_pod(f"r{i}", {"app": "web"}, anti=[term(HOST, labels={"app": "web"})])
        decision = framework.schedule(replica)
        if decision.node is None:
            assert i == 3
            assert decision.message == f"0/3 nodes are available: 3 {ANTI_AFFINITY_RULES}."
            break
        placed.append(decision.node)
        cache.set_pod(
            affine_pod(f"r{i}", {"app": "web"}, node=decision.node, anti=[term(HOST, labels={"app": "web"})])
        )
    assert sorted(placed) == ["m1", "m2", "m3"]


# ---------------------------------------------------------------- score
def test_preferred_affinity_scores_the_matching_pods_domain_highest() -> None:
    cache = cluster(affine_pod("p1", SECURITY, node="m1"))
    incoming = affine_pod("incoming", preferred=[(5, term(REGION, labels=SECURITY))])
    assert scores(cache, incoming) == {"m1": 100, "m2": 100, "m3": 0}


def test_preferred_anti_affinity_scores_the_matching_pods_domain_lowest() -> None:
    cache = cluster(affine_pod("p1", SECURITY, node="m1"))
    incoming = affine_pod("incoming", preferred_anti=[(5, term(ZONE, labels=SECURITY))])
    assert scores(cache, incoming) == {"m1": 0, "m2": 100, "m3": 100}


def test_weights_add_up_and_are_scaled_between_lowest_and_highest() -> None:
    cache = cluster(affine_pod("p1", SECURITY, node="m1"), affine_pod("p2", {"app": "db"}, node="m3"))
    incoming = affine_pod(
        "incoming",
        preferred=[(8, term(HOST, labels=SECURITY)), (2, term(REGION, labels={"app": "db"}))],
        preferred_anti=[(4, term(REGION, labels=SECURITY))],
    )
    # m1: +8 -4 = 4; m2: -4; m3: +2.  Scaled over [-4, 4]: 100, 0, 75.
    assert scores(cache, incoming) == {"m1": 100, "m2": 0, "m3": 75}


def test_existing_pods_required_and_preferred_terms_that_match_the_incoming_pod_count() -> None:
    cache = cluster(
        affine_pod(
            "p1", {"app": "db"}, node="m1", required=[term(HOST, labels=SECURITY)]
        ),  # hardPodAffinityWeight 1
        affine_pod("p2", {"app": "db"}, node="m2", preferred=[(3, term(HOST, labels=SECURITY))]),
        affine_pod("p3", {"app": "db"}, node="m3", preferred_anti=[(5, term(HOST, labels=SECURITY))]),
    )
    # m1: 1, m2: 3, m3: -5.  Scaled over [-5, 3]: 75, 100, 0.
    assert scores(cache, affine_pod("incoming", SECURITY)) == {"m1": 75, "m2": 100, "m3": 0}


def test_no_terms_anywhere_means_no_opinion() -> None:
    cache = cluster(affine_pod("p1", SECURITY, node="m1"))
    assert scores(cache, affine_pod("incoming")) is None


def test_normalisation_truncates_as_kube_does() -> None:
    assert normalize_min_max(np.array([0, 1, 3], dtype=np.int64)).tolist() == [0, 33, 100]
    assert normalize_min_max(np.array([7, 7], dtype=np.int64)).tolist() == [0, 0]


# ---------------------------------------------------------------- parsing
def test_invalid_terms_become_the_pods_reason() -> None:
    bad = affine_pod("bad", anti=[{"labelSelector": {"matchLabels": {"a": "b"}}}])
    assert bad.spec_error.startswith("invalid pod affinity: spec.affinity.podAntiAffinity.")
    assert "topologyKey must be a non-empty label key" in bad.spec_error
    with pytest.raises(SelectorError, match="operator must be one of"):
        parse_selector({"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]}, "s")
    with pytest.raises(SelectorError, match="must be non-empty for operator In"):
        parse_selector({"matchExpressions": [{"key": "a", "operator": "In"}]}, "s")
    weightless = affine_pod("w", preferred=[(0, term(HOST, labels=SECURITY))])
    assert "weight must be an integer from 1 to 100" in weightless.spec_error


def test_a_null_selector_matches_nothing_and_an_empty_one_everything() -> None:
    assert not parse_selector(None, "s").matches({"a": "b"})
    assert parse_selector({}, "s").matches({"a": "b"})


def test_replicas_of_one_template_share_their_parsed_terms() -> None:
    spec = affinity(anti=[term(HOST, labels={"app": "web"})])
    a = pod_affinity_terms(spec, "default", {"app": "web", "pod-template-hash": "1"})
    b = pod_affinity_terms(spec, "default", {"app": "web", "pod-template-hash": "2"})
    assert a is b
    assert pod_affinity_terms(spec, "other", {"app": "web"}) is not a


def test_large_groups_keep_their_counts_when_they_switch_to_a_dense_column() -> None:
    """A label group on many nodes keeps a dense per-row column: it must hold every replica."""
    nodes = {f"n{i}": (f"z{i % 4}", "r1") for i in range(100)}
    replicas = [affine_pod(f"r{i}", {"app": "web"}, node=f"n{i}") for i in range(80)]
    cache = cluster(*replicas, nodes=nodes)
    incoming = affine_pod("incoming", anti=[term(HOST, labels={"app": "web"})])
    free = {name for name, reason in filter_reasons(cache, incoming).items() if reason is None}
    assert free == {f"n{i}" for i in range(80, 100)}
    for i in range(0, 80, 2):
        cache.remove_pod(f"uid-default-r{i}")
    free = {name for name, reason in filter_reasons(cache, incoming).items() if reason is None}
    assert free == {f"n{i}" for i in range(0, 80, 2)} | {f"n{i}" for i in range(80, 100)}
    assert cache.check_consistency() == []
