"""The differential test's case generator and checks (tests/differential.py), without a cluster.

The end-to-end test trusts three things of the generator: a seed and an index give the same case, a
case's count of placed pods is the same whatever valid choices are made, and `violations` tells a
valid placement from an invalid one. These are checked here, on many cases, in a fraction of a second.
"""

from __future__ import annotations

import random
from collections import Counter

from differential import (
    CASE_LABEL,
    FAMILIES,
    KUBE_UNTOLERATED_TAINT,
    Case,
    ExistingPod,
    NodeSpec,
    allowed,
    expected_bound,
    generate,
    node_name,
    nodes_for,
    pods_for,
    reasons,
    violations,
)


def test_a_seed_and_an_index_give_the_same_case_and_every_family_comes_up() -> None:
    cases = [generate(13, i) for i in range(200)]
    assert [c.yaml() for c in cases[:20]] == [generate(13, i).yaml() for i in range(20)]
    assert {c.family for c in cases} == set(FAMILIES)


def test_placements_the_simulation_makes_keep_every_constraint_and_reach_the_expected_count() -> None:
    for index in range(150):
        case = generate(5, index)
        rng = random.Random(index)
        expected = expected_bound(case, rng)
        assert expected is not None
        for _ in range(3):
            placed: Counter[int] = Counter()
            for _ in range(case.incoming):
                options = [n for n in range(len(case.nodes)) if allowed(case, n, placed)]
                if not options:
                    break
                placed[rng.choice(options)] += 1
            assert sum(placed.values()) == expected
            bound = {f"p{i}": node_name(case, "ai", n)
                     for i, n in enumerate(n for n, count in placed.items() for _ in range(count))}
            problems, checks = violations(case, "ai", bound)
            assert problems == [], (case.yaml(), bound)
            assert checks >= len(bound)


def _two_nodes(family: str, **fields: object) -> Case:
    nodes = [NodeSpec(zone=0, cpu=4, memory_gi=64), NodeSpec(zone=0, cpu=4, memory_gi=64)]
    case = Case(index=0, family=family, nodes=nodes, existing=[], incoming=2)
    for key, value in fields.items():
        setattr(case, key, value)
    return case


def test_violations_are_found() -> None:
    on = {"p0": "c0-ai-n0", "p1": "c0-ai-n0"}
    assert violations(_two_nodes("anti-host"), "ai", on)[0]
    assert violations(_two_nodes("hostport"), "ai", on)[0]
    assert violations(_two_nodes("anti-zone"), "ai", {"p0": "c0-ai-n0", "p1": "c0-ai-n1"})[0]
    assert violations(_two_nodes("affinity-zone"), "ai", {"p0": "c0-ai-n0"})[0]
    assert violations(_two_nodes("fit", incoming=5), "ai", {f"p{i}": "c0-ai-n1" for i in range(5)})[0]
    assert violations(_two_nodes("fit"), "ai", {"p0": "c1-ai-n0"})[0]  # another case's node
    tainted = _two_nodes("fit")
    tainted.nodes[0].tainted = True
    assert violations(tainted, "ai", {"p0": "c0-ai-n0"})[0]
    spread = _two_nodes("spread-host", existing=[ExistingPod(node=0, kind="peer")])
    assert violations(spread, "ai", {"p0": "c0-ai-n0"})[0]
    assert not violations(spread, "ai", {"p0": "c0-ai-n1"})[0]


def test_objects_carry_the_cases_prefix_and_pin_pods_to_their_nodes() -> None:
    case = generate(13, 3)
    nodes = nodes_for(case, "kube")
    existing, incoming = pods_for(case, "kube", "diff-kube", "diff-kube-scheduler")
    assert all(n["metadata"]["name"].startswith("c3-kube-") for n in nodes)
    assert len(incoming) == case.incoming and len(existing) == len(case.existing)
    for pod in incoming:
        terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert terms["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == ["c3-kube"]
        labels = pod["metadata"]["labels"]
        assert labels["app"].startswith("c3-kube-") and labels[CASE_LABEL] == "c3-kube"


def test_messages_are_read_as_reasons_counted() -> None:
    message = ("0/9 nodes are available: 2 Insufficient cpu, 3 node(s) had untolerated taint {a: b}, "
               "1 node(s) had untolerated taint {c: d}, 3 node(s) were unschedulable. preemption: 0/9 nodes "
               "are available: 9 Preemption is not helpful for scheduling.")
    total, counted = reasons(message)
    assert total == "0/9"
    assert counted == Counter(
        {"Insufficient cpu": 2, KUBE_UNTOLERATED_TAINT: 4, "node(s) were unschedulable": 3})
