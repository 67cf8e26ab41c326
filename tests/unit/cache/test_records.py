"""Quantities and the pod/node records built from API JSON.

Every expected value below is worked out by hand from Kubernetes' rules
(resource.Quantity, resourcehelper.PodRequests, the scheduler's non-zero
request defaults), not read back from the code under test.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from builders import Node, Pod

from ai_scheduler.cache.records import (
    DEFAULT_SCORE_CPU_MILLI,
    DEFAULT_SCORE_MEMORY,
    NodeRecord,
    PodRecord,
    Taint,
    Toleration,
    pod_requests,
)
from ai_scheduler.quantity import MAX_UNITS, QuantityError, format_units, parse_quantity, to_units

Ki, Mi, Gi = 2**10, 2**20, 2**30


# --------------------------------------------------------------------------- quantities
@pytest.mark.parametrize(
    ("text", "millicores"),
    [
        ("100m", 100),
        ("1", 1000),
        ("2", 2000),
        ("1.5", 1500),
        ("0.25", 250),
        ("0.1m", 1),        # a fraction of a millicore rounds up, as MilliValue() does
        ("1.0001", 1001),   # 1000.1m -> 1001m
        ("2e3", 2_000_000),
        ("1e-3", 1),
        ("1E2", 100_000),
        ("+3", 3000),
        (".5", 500),
        ("1k", 1_000_000),
        (2, 2000),           # already-decoded JSON numbers
        (0.5, 500),
    ],
)
def test_cpu_quantities_in_millicores(text: str | int | float, millicores: int) -> None:
    assert to_units("cpu", text) == millicores


@pytest.mark.parametrize(
    ("text", "units"),
    [
        ("1Ki", Ki),
        ("1Mi", Mi),
        ("1Gi", Gi),
        ("1Ti", 2**40),
        ("1.5Gi", 3 * Gi // 2),
        ("1k", 1000),
        ("1M", 10**6),
        ("1G", 10**9),
        ("1T", 10**12),
        ("2E3", 2000),        # "E" followed by digits is an exponent, not exa
        ("8P", 8 * 10**15),   # a bare "P" is the peta suffix
        ("128974848", 128974848),
        ("129e6", 129_000_000),
        ("0.5", 1),           # fractions of a byte round up (Value() rounds up)
        ("100m", 1),
        ("1500m", 2),
        ("0", 0),
    ],
)
def test_other_quantities_in_whole_units(text: str, units: int) -> None:
    assert to_units("memory", text) == units
    assert to_units("nvidia.com/gpu", text) == units


@pytest.mark.parametrize("text", ["", "abc", "1K", "1KB", "1.2.3", "Mi", "1e", "--1", "1 Mi", "1mi", "0x10",
                                  "1Gi1", "."])
def test_invalid_quantities_raise(text: str) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(text)
    with pytest.raises(ValueError):  # QuantityError is a ValueError
        to_units("cpu", text)


def test_exa_suffix_is_exact_but_beyond_max_units() -> None:
    assert parse_quantity("1E") == 10**18  # a bare "E" is the exa suffix
    assert to_units("memory", "1E") == MAX_UNITS


@pytest.mark.parametrize(
    "text",
    ["12345678901234567890", "1e400", "1e1000000", "9" * 5000, "99999999999999999999Ei", 10**5000],
    ids=["20-digits", "1e400", "1e1000000", "5000-digits", "huge-Ei", "int-5001-digits"],
)
def test_huge_quantities_saturate_at_max_units(text: str | int) -> None:
    """The API server accepts quantities of any size; the cache's int64 columns must not overflow."""
    assert to_units("memory", text) == MAX_UNITS
    assert to_units("cpu", text) == MAX_UNITS
    negative = f"-{text}" if isinstance(text, str) else -text
    assert to_units("memory", negative) == -MAX_UNITS
    assert 1023 * MAX_UNITS <= 2**63 - 1  # a node's sum of 1,023 amounts at the bound fits int64


@pytest.mark.parametrize(
    "text",
    ["1e" + "9" * 19, "1e" + "9" * 5000, [1], {"a": 1}, None, float("nan")],
    ids=["exponent-19-digits", "exponent-5000-digits", "list", "mapping", "null", "nan"],
)
def test_malformed_quantities_raise_only_quantity_error(text: Any) -> None:
    with pytest.raises(QuantityError):
        to_units("memory", text)


def test_quantity_error_cuts_a_long_value() -> None:
    with pytest.raises(QuantityError) as raised:
        parse_quantity("x" * 5000)
    assert len(str(raised.value)) < 250 and "..." in str(raised.value)


def test_booleans_are_not_quantities() -> None:
    with pytest.raises(QuantityError):
        parse_quantity(True)


def test_parse_quantity_is_exact() -> None:
    assert parse_quantity("1.5Gi") == Decimal(3 * Gi) / 2
    assert parse_quantity("250m") == Decimal("0.25")


def test_format_units() -> None:
    assert format_units("cpu", 1500) == "1500m"
    assert format_units("cpu", 2000) == "2"
    assert format_units("memory", Gi) == "1Gi"
    assert format_units("memory", 3 * Mi) == "3Mi"
    assert format_units("memory", 1000) == "1000"


# --------------------------------------------------------------------------- pod requests
def ctr(requests: dict[str, str] | None = None, limits: dict[str, str] | None = None,
        restart_policy: str | None = None) -> dict[str, Any]:
    c: dict[str, Any] = {"name": "c", "image": "i"}
    resources: dict[str, Any] = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    if resources:
        c["resources"] = resources
    if restart_policy:
        c["restartPolicy"] = restart_policy
    return c


def test_containers_are_summed() -> None:
    spec = {"containers": [ctr({"cpu": "500m", "memory": "1Gi"}), ctr({"cpu": "250m", "memory": "512Mi"}),
                           ctr({"nvidia.com/gpu": "1"})]}
    assert pod_requests(spec) == {"cpu": 750, "memory": Gi + 512 * Mi, "nvidia.com/gpu": 1}


def test_init_container_larger_than_the_containers_sets_the_request() -> None:
    spec = {"initContainers": [ctr({"cpu": "2", "memory": "1Gi"})],
            "containers": [ctr({"cpu": "1", "memory": "2Gi"})]}
    # max per resource, not per container: cpu from the init container, memory from the app
    assert pod_requests(spec) == {"cpu": 2000, "memory": 2 * Gi}


def test_several_init_containers_take_the_maximum_not_the_sum() -> None:
    spec = {"initContainers": [ctr({"cpu": "3", "memory": "1Gi"}), ctr({"cpu": "1", "memory": "4Gi"})],
            "containers": [ctr({"cpu": "2", "memory": "2Gi"})]}
    assert pod_requests(spec) == {"cpu": 3000, "memory": 4 * Gi}


def test_init_container_smaller_than_the_containers_changes_nothing() -> None:
    spec = {"initContainers": [ctr({"cpu": "100m"})], "containers": [ctr({"cpu": "1"}), ctr({"cpu": "1"})]}
    assert pod_requests(spec) == {"cpu": 2000}


def test_sidecar_started_before_an_init_container_adds_to_its_peak() -> None:
    # KEP-753: sidecar (1 cpu, restartPolicy Always) then a regular init container of 2 cpu:
    # while the init container runs the sidecar runs too => 3; afterwards app + sidecar = 1 + 1 = 2.
    spec = {"initContainers": [ctr({"cpu": "1"}, restart_policy="Always"), ctr({"cpu": "2"})],
            "containers": [ctr({"cpu": "1"})]}
    assert pod_requests(spec) == {"cpu": 3000}


def test_sidecar_started_after_an_init_container_does_not_add_to_its_peak() -> None:
    spec = {"initContainers": [ctr({"cpu": "2"}), ctr({"cpu": "1"}, restart_policy="Always")],
            "containers": [ctr({"cpu": "1"})]}
    assert pod_requests(spec) == {"cpu": 2000}


def test_sidecars_count_with_the_containers() -> None:
    spec = {"initContainers": [ctr({"cpu": "500m", "memory": "1Gi"}, restart_policy="Always"),
                               ctr({"cpu": "250m"}, restart_policy="Always")],
            "containers": [ctr({"cpu": "1", "memory": "1Gi"})]}
    assert pod_requests(spec) == {"cpu": 1750, "memory": 2 * Gi}


def test_restart_policy_other_than_always_is_an_ordinary_init_container() -> None:
    spec = {"initContainers": [ctr({"cpu": "1"}, restart_policy="Never")], "containers": [ctr({"cpu": "1"})]}
    assert pod_requests(spec) == {"cpu": 1000}


def test_overhead_is_added_after_the_init_maximum() -> None:
    spec = {"initContainers": [ctr({"cpu": "2"})], "containers": [ctr({"cpu": "1", "memory": "1Gi"})],
            "overhead": {"cpu": "250m", "memory": "120Mi"}}
    assert pod_requests(spec) == {"cpu": 2250, "memory": Gi + 120 * Mi}


def test_limits_stand_in_for_missing_requests_per_resource() -> None:
    spec = {"containers": [ctr(limits={"cpu": "2", "memory": "1Gi"}),
                           ctr({"cpu": "500m"}, limits={"cpu": "1", "memory": "256Mi"})]}
    # container 1: requests default to its limits; container 2: cpu request kept, memory from its limit
    assert pod_requests(spec) == {"cpu": 2500, "memory": Gi + 256 * Mi}


def test_pod_level_requests_replace_the_container_sum() -> None:
    spec = {"resources": {"requests": {"cpu": "4", "memory": "8Gi"}},
            "containers": [ctr({"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"}), ctr({"cpu": "1"})],
            "overhead": {"cpu": "100m"}}
    assert pod_requests(spec) == {"cpu": 4100, "memory": 8 * Gi, "nvidia.com/gpu": 1}


def test_pod_level_requests_only_cover_cpu_memory_and_hugepages() -> None:
    # resourcehelper.IsSupportedPodLevelResource: an extended resource at pod level is ignored.
    spec = {"resources": {"requests": {"memory": "2Gi", "nvidia.com/gpu": "4"}},
            "containers": [ctr({"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"})]}
    assert pod_requests(spec) == {"cpu": 1000, "memory": 2 * Gi, "nvidia.com/gpu": 1}


def test_zero_requests_are_dropped() -> None:
    assert pod_requests({"containers": [ctr({"cpu": "0", "memory": "0"})]}) == {}
    assert pod_requests({"containers": [ctr()]}) == {}
    assert pod_requests({}) == {}


# --------------------------------------------------------------------------- pod records
def pod_json(spec: dict[str, Any], **meta: Any) -> dict[str, Any]:
    return Pod.bare("p").uid("u1").rv("7").meta(**meta).spec(**spec).status().obj()


def test_invalid_quantity_becomes_spec_error_not_an_exception() -> None:
    rec = PodRecord.from_api(pod_json({"containers": [ctr({"cpu": "lots"})]}))
    assert rec.spec_error.startswith("invalid resource quantity")
    assert "lots" in rec.spec_error
    assert rec.requests == {}
    assert rec.pending  # still a pod waiting for a node, reported rather than lost


def test_a_pods_own_pods_request_is_not_a_request() -> None:
    """kube-scheduler reads it into AllowedPodNumber and looks at it nowhere: the pod takes one slot."""
    spec = {"containers": [ctr({"cpu": "1", "pods": "12345678901234567890"})], "overhead": {"pods": "3"}}
    rec = PodRecord.from_api(pod_json(spec))
    assert rec.spec_error == ""
    assert rec.requests == {"cpu": 1000}
    assert "pods" not in rec.score_requests()


@pytest.mark.parametrize("quantity", ["1e1000000", "9" * 5000, "12345678901234567890"])
def test_huge_quantities_never_raise_out_of_a_record(quantity: str) -> None:
    rec = PodRecord.from_api(pod_json({"containers": [ctr({"memory": quantity, "cpu": quantity})]}))
    assert rec.spec_error == "" and rec.requests == {"memory": MAX_UNITS, "cpu": MAX_UNITS}
    node = NodeRecord.from_api(node_json(allocatable={"memory": quantity, "pods": "110"}))
    assert node.spec_error == "" and node.allocatable == {"memory": MAX_UNITS, "pods": 110}


def test_an_invalid_value_is_quoted_cut_short() -> None:
    rec = PodRecord.from_api(pod_json({"containers": [ctr({"cpu": "x" * 5000})]}))
    assert rec.spec_error.startswith("invalid resource quantity: invalid quantity 'xxx")
    assert len(rec.spec_error) < 300 and "..." in rec.spec_error
    rec = PodRecord.from_api(pod_json({"containers": [ctr({"cpu": "1"})], "priority": "y" * 5000}))
    assert rec.spec_error.startswith("invalid spec.priority 'yyy")
    assert len(rec.spec_error) < 300 and "..." in rec.spec_error


def test_valid_pod_has_no_spec_error() -> None:
    rec = PodRecord.from_api(pod_json({"containers": [ctr({"cpu": "1"})]}))
    assert rec.spec_error == ""
    assert rec.requests == {"cpu": 1000}


def test_pod_record_fields() -> None:
    obj = {
        "metadata": {"name": "train", "namespace": "ml", "uid": "abc", "resourceVersion": "42",
                     "labels": {"app": "x"}, "creationTimestamp": "2024-01-01T00:00:00Z"},
        "spec": {"containers": [ctr({"cpu": "1"})], "priority": 7, "schedulerName": "ai",
                 "nodeSelector": {"gpu": "a100"},
                 "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule"},
                                 {"key": "j", "value": "v"}],
                 "schedulingGates": [{"name": "g"}]},
        "status": {"phase": "Pending",
                   "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                   "message": "0/1 nodes are available"}]},
    }
    rec = PodRecord.from_api(obj)
    assert (rec.uid, rec.key, rec.resource_version, rec.priority) == ("abc", "ml/train", "42", 7)
    assert rec.scheduler_name == "ai"
    assert rec.node_selector == {"gpu": "a100"}
    assert rec.gated
    assert rec.scheduled_condition == ("False", "Unschedulable", "0/1 nodes are available")
    assert [t.identity() for t in rec.tolerations] == [("k", "Exists", "", "NoSchedule"),
                                                       ("j", "Equal", "v", "")]


def test_pod_record_defaults() -> None:
    rec = PodRecord.from_api({"metadata": {"name": "p", "namespace": "ns"}, "spec": {"containers": [ctr()]}})
    assert rec.uid == "ns/p"
    assert rec.scheduler_name == "default-scheduler"
    assert rec.phase == "Pending"
    assert rec.pending and not rec.terminal and not rec.deleting and not rec.gated


@pytest.mark.parametrize(
    ("node_name", "phase", "deleting", "pending", "terminal"),
    [
        ("", "Pending", False, True, False),
        ("n1", "Running", False, False, False),
        ("", "Pending", True, False, False),
        ("", "Failed", False, False, True),
        ("n1", "Succeeded", False, False, True),
    ],
)
def test_pending_and_terminal(node_name: str, phase: str, deleting: bool, pending: bool,
                              terminal: bool) -> None:
    meta: dict[str, Any] = {"name": "p", "namespace": "ns", "uid": "u"}
    if deleting:
        meta["deletionTimestamp"] = "2024-01-01T00:00:00Z"
    spec: dict[str, Any] = {"containers": [ctr()]}
    if node_name:
        spec["nodeName"] = node_name
    rec = PodRecord.from_api({"metadata": meta, "spec": spec, "status": {"phase": phase}})
    assert (rec.pending, rec.terminal, rec.deleting) == (pending, terminal, deleting)


# --------------------------------------------------------------------------- scoring requests
def score_of(spec: dict[str, Any]) -> dict[str, int]:
    return PodRecord.from_api(pod_json(spec)).score_requests()


def test_score_requests_default_missing_cpu_and_memory() -> None:
    defaults = {"cpu": DEFAULT_SCORE_CPU_MILLI, "memory": DEFAULT_SCORE_MEMORY}
    assert score_of({"containers": [ctr()]}) == defaults
    assert score_of({"containers": [ctr({"cpu": "2"})]}) == {"cpu": 2000, "memory": 200 * Mi}


def test_score_request_defaults_apply_per_container() -> None:
    # kube-scheduler fills NonMissingContainerRequests container by container:
    # two request-less containers count 2 x 100m and 2 x 200Mi.
    assert score_of({"containers": [ctr(), ctr()]}) == {"cpu": 200, "memory": 400 * Mi}
    assert score_of({"containers": [ctr({"cpu": "1"}), ctr({"memory": "1Gi"})]}) == {
        "cpu": 1100, "memory": Gi + 200 * Mi}


def test_explicit_zero_request_is_not_defaulted_for_scoring() -> None:
    # applyNonMissing only fills names that are absent; an explicit 0 stays 0.
    assert score_of({"containers": [ctr({"cpu": "0"})]}) == {"memory": 200 * Mi}


def test_score_requests_with_init_containers_and_overhead() -> None:
    spec = {"initContainers": [ctr()], "containers": [ctr({"cpu": "50m"})], "overhead": {"cpu": "10m"}}
    # init: 100m / 200Mi (defaulted); app: 50m / 200Mi (memory defaulted) -> max, plus overhead
    assert score_of(spec) == {"cpu": 110, "memory": 200 * Mi}


def test_score_requests_with_pod_level_resources() -> None:
    # pod-level cpu set: cpu is not defaulted; memory, absent everywhere, is defaulted per container
    spec = {"resources": {"requests": {"cpu": "2"}}, "containers": [ctr(), ctr()]}
    assert score_of(spec) == {"cpu": 2000, "memory": 400 * Mi}
    assert PodRecord.from_api(pod_json(spec)).requests == {"cpu": 2000}


def test_score_requests_of_a_hand_made_record() -> None:
    rec = PodRecord()
    rec.requests = {"cpu": 300}
    assert rec.score_requests() == {"cpu": 300, "memory": DEFAULT_SCORE_MEMORY}


# --------------------------------------------------------------------------- tolerations
@pytest.mark.parametrize(
    ("toleration", "taint", "tolerated"),
    [
        (("k", "Equal", "v", "NoSchedule"), ("k", "v", "NoSchedule"), True),
        (("k", "Equal", "w", "NoSchedule"), ("k", "v", "NoSchedule"), False),   # value mismatch
        (("k", "", "v", "NoSchedule"), ("k", "v", "NoSchedule"), True),         # empty operator = Equal
        (("k", "Exists", "", "NoSchedule"), ("k", "anything", "NoSchedule"), True),
        (("j", "Exists", "", "NoSchedule"), ("k", "v", "NoSchedule"), False),   # key mismatch
        (("k", "Exists", "", "NoExecute"), ("k", "v", "NoSchedule"), False),    # effect mismatch
        (("k", "Exists", "", ""), ("k", "v", "NoExecute"), True),               # empty effect: all effects
        (("k", "Equal", "v", ""), ("k", "v", "PreferNoSchedule"), True),
        (("", "Exists", "", ""), ("any", "thing", "NoExecute"), True),          # tolerates everything
        (("", "Exists", "", "NoSchedule"), ("any", "thing", "NoExecute"), False),
        (("k", "Equal", "", "NoSchedule"), ("k", "", "NoSchedule"), True),
        (("k", "Lt", "5", "NoSchedule"), ("k", "5", "NoSchedule"), False),      # unknown operator
    ],
)
def test_toleration_tolerates(toleration: tuple[str, str, str, str], taint: tuple[str, str, str],
                              tolerated: bool) -> None:
    assert Toleration(*toleration).tolerates(Taint(*taint)) is tolerated


def test_taint_description() -> None:
    assert Taint("dedicated", "gpu", "NoSchedule").describe() == "{dedicated: gpu}"
    assert Taint("k", "", "NoSchedule").describe() == "{k: }"


# --------------------------------------------------------------------------- node records
def node_json(**status: Any) -> dict[str, Any]:
    taints = [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"},
              {"key": "spot", "effect": "PreferNoSchedule"}]
    return (Node.bare("n1").rv("3").labels({"zone": "a"}).spec(taints=taints, unschedulable=True)
            .status(**status).obj())


def test_node_record_fields() -> None:
    rec = NodeRecord.from_api(node_json(
        allocatable={"cpu": "3500m", "memory": "7Gi", "pods": "110", "nvidia.com/gpu": "4"},
        capacity={"cpu": "4", "memory": "8Gi", "pods": "110", "nvidia.com/gpu": "4"},
        conditions=[{"type": "MemoryPressure", "status": "False"}, {"type": "Ready", "status": "True"}]))
    assert rec.name == "n1" and rec.resource_version == "3"
    assert rec.allocatable == {"cpu": 3500, "memory": 7 * Gi, "pods": 110, "nvidia.com/gpu": 4}
    assert rec.ready == "True"
    assert rec.unschedulable
    assert [t.identity() for t in rec.taints] == [("dedicated", "gpu", "NoSchedule"),
                                                  ("spot", "", "PreferNoSchedule")]
    assert rec.labels == {"zone": "a"}


def test_node_without_allocatable_uses_capacity() -> None:
    # the API server defaults status.allocatable to status.capacity
    rec = NodeRecord.from_api(node_json(capacity={"cpu": "4", "pods": "10"}))
    assert rec.allocatable == {"cpu": 4000, "pods": 10}


@pytest.mark.parametrize(
    ("conditions", "ready"),
    [
        ([], "Unknown"),
        ([{"type": "Ready", "status": "False"}], "False"),
        ([{"type": "Ready", "status": "Unknown"}], "Unknown"),
        ([{"type": "Ready", "status": "True"}], "True"),
        ([{"type": "DiskPressure", "status": "True"}], "Unknown"),
    ],
)
def test_node_readiness(conditions: list[dict[str, str]], ready: str) -> None:
    assert NodeRecord.from_api(node_json(conditions=conditions)).ready == ready


def test_node_invalid_allocatable_is_a_spec_error() -> None:
    rec = NodeRecord.from_api(node_json(allocatable={"cpu": "four"}))
    assert rec.allocatable == {}
    assert "four" in rec.spec_error


def test_static_identity_tracks_labels_taints_cordon_and_readiness_only() -> None:
    base = node_json(allocatable={"cpu": "4"}, conditions=[{"type": "Ready", "status": "True"}])
    ident = NodeRecord.from_api(base).static_identity()

    more_cpu = node_json(allocatable={"cpu": "8"}, conditions=[{"type": "Ready", "status": "True"}])
    assert NodeRecord.from_api(more_cpu).static_identity() == ident

    relabelled = node_json(allocatable={"cpu": "4"}, conditions=[{"type": "Ready", "status": "True"}])
    relabelled["metadata"]["labels"] = {"zone": "b"}
    assert NodeRecord.from_api(relabelled).static_identity() != ident

    untainted = node_json(allocatable={"cpu": "4"}, conditions=[{"type": "Ready", "status": "True"}])
    untainted["spec"]["taints"] = []
    assert NodeRecord.from_api(untainted).static_identity() != ident

    uncordoned = node_json(allocatable={"cpu": "4"}, conditions=[{"type": "Ready", "status": "True"}])
    uncordoned["spec"]["unschedulable"] = False
    assert NodeRecord.from_api(uncordoned).static_identity() != ident

    not_ready = node_json(allocatable={"cpu": "4"}, conditions=[{"type": "Ready", "status": "False"}])
    assert NodeRecord.from_api(not_ready).static_identity() != ident
