"""The structured allocator against cases of kube's allocator test table (allocatortesting)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from builders import make_device_class, make_gpu_slice

from ai_scheduler.cache.dra import ClaimSpec, DraState
from ai_scheduler.cache.dra_allocator import AllocationError, Allocator, node_selector_matches
from ai_scheduler.cache.dra_cel import SelectorCache

DRIVER = "gpu.nvidia.com"


def gpu(i: int, memory: str = "80Gi", root: str = "a", **extra: Any) -> dict[str, Any]:
    return {
        "name": f"gpu-{i}",
        "attributes": {
            "productName": {"string": "H100"},
            "index": {"int": i},
            "resource.kubernetes.io/pcieRoot": {"string": root},
        },
        "capacity": {"memory": {"value": memory}},
        **extra,
    }


def state(devices: list[dict[str, Any]], node: str = "n1", **spec: Any) -> DraState:
    dra = DraState()
    dra.apply("DeviceClass", "ADDED", make_device_class("gpu", driver=DRIVER))
    published = make_gpu_slice(node, driver=DRIVER, devices=devices, name=f"{node}-slice")
    published["spec"].update(spec)
    dra.apply("ResourceSlice", "ADDED", published)
    return dra


def claim(*requests: dict[str, Any], constraints: list[dict[str, Any]] | None = None) -> ClaimSpec:
    return ClaimSpec.parse({"devices": {"requests": list(requests), "constraints": constraints or []}})


def exactly(name: str = "req", count: int = 1, selector: str = "", **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"deviceClassName": "gpu", "count": count, **extra}
    if selector:
        body["selectors"] = [{"cel": {"expression": selector}}]
    return {"name": name, "exactly": body}


def allocate(
    dra: DraState, *specs: ClaimSpec, node: str = "n1", pack: bool = False
) -> list[list[str]] | None:
    result = Allocator(dra, SelectorCache(), pack=pack).allocate(
        node, {}, [(f"ns/c{i}", s) for i, s in enumerate(specs)]
    )
    return None if result is None else [[d.device for d in r.devices] for r in result]


def test_exact_count_takes_the_first_devices_and_restricts_to_the_node() -> None:
    dra = state([gpu(0), gpu(1), gpu(2)])
    assert allocate(dra, claim(exactly(count=2))) == [["gpu-0", "gpu-1"]]
    result = Allocator(dra, SelectorCache()).allocate("n1", {}, [("ns/c", claim(exactly()))])
    assert result is not None and result[0].node_selector == {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]
    }


def test_too_many_devices_and_other_nodes_fail() -> None:
    dra = state([gpu(0), gpu(1)])
    assert allocate(dra, claim(exactly(count=3))) is None
    assert allocate(dra, claim(exactly()), node="n2") is None


def test_all_mode_takes_every_matching_device() -> None:
    dra = state([gpu(0), gpu(1, "40Gi"), gpu(2)])
    spec = claim(
        {
            "name": "all",
            "exactly": {
                "deviceClassName": "gpu",
                "allocationMode": "All",
                "selectors": [
                    {
                        "cel": {
                            "expression": f'device.capacity["{DRIVER}"].memory'
                            '.compareTo(quantity("80Gi")) == 0'
                        }
                    }
                ],
            },
        }
    )
    assert allocate(dra, spec) == [["gpu-0", "gpu-2"]]


def test_selector_on_attributes_and_unmet_selector() -> None:
    dra = state([gpu(0), gpu(1)])
    assert allocate(dra, claim(exactly(selector=f'device.attributes["{DRIVER}"].index == 1'))) == [["gpu-1"]]
    assert (
        allocate(dra, claim(exactly(selector=f'device.attributes["{DRIVER}"].productName == "B200"'))) is None
    )


def test_missing_domain_reads_as_empty_and_missing_key_is_a_runtime_error() -> None:
    dra = state([gpu(0)])
    assert allocate(dra, claim(exactly(selector='"x" in device.attributes["other.example.com"]'))) is None
    with pytest.raises(AllocationError, match="CEL runtime error"):
        allocate(dra, claim(exactly(selector=f'device.attributes["{DRIVER}"].nothing == 1')))


def test_compile_error_names_the_claim() -> None:
    dra = state([gpu(0)])
    with pytest.raises(AllocationError, match=r"claim ns/c0: selector #0: CEL compile error"):
        allocate(dra, claim(exactly(selector="device.driver ==")))


def test_first_available_falls_back_to_the_next_sub_request() -> None:
    dra = state([gpu(0), gpu(1)])
    spec = claim(
        {
            "name": "req",
            "firstAvailable": [
                {"name": "big", "deviceClassName": "gpu", "count": 4},
                {"name": "small", "deviceClassName": "gpu", "count": 2},
            ],
        }
    )
    result = Allocator(dra, SelectorCache()).allocate("n1", {}, [("ns/c", spec)])
    assert result is not None
    assert [(d.request, d.device) for d in result[0].devices] == [
        ("req/small", "gpu-0"),
        ("req/small", "gpu-1"),
    ]


def test_match_attribute_constraint() -> None:
    dra = state([gpu(0, root="a"), gpu(1, root="b"), gpu(2, root="b")])
    spec = claim(exactly(count=2), constraints=[{"matchAttribute": "resource.kubernetes.io/pcieRoot"}])
    assert allocate(dra, spec) == [["gpu-1", "gpu-2"]]
    spec3 = claim(exactly(count=3), constraints=[{"matchAttribute": "resource.kubernetes.io/pcieRoot"}])
    assert allocate(dra, spec3) is None


def test_devices_in_use_by_other_claims_are_skipped_and_admin_access_shares_them() -> None:
    dra = state([gpu(0), gpu(1)])
    dra.apply(
        "ResourceClaim",
        "ADDED",
        {
            "metadata": {"namespace": "ns", "name": "held", "uid": "u1"},
            "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "gpu"}}]}},
            "status": {
                "allocation": {
                    "devices": {
                        "results": [{"request": "r", "driver": DRIVER, "pool": "n1", "device": "gpu-0"}]
                    }
                }
            },
        },
    )
    assert allocate(dra, claim(exactly(count=1))) == [["gpu-1"]]
    assert allocate(dra, claim(exactly(count=2))) is None
    assert allocate(dra, claim(exactly(count=2, adminAccess=True))) == [["gpu-0", "gpu-1"]]


def test_two_claims_of_one_pod_do_not_share_a_device() -> None:
    dra = state([gpu(0), gpu(1)])
    assert allocate(dra, claim(exactly()), claim(exactly())) == [["gpu-0"], ["gpu-1"]]
    assert allocate(dra, claim(exactly()), claim(exactly()), claim(exactly())) is None


def test_partitionable_devices_consume_shared_counters() -> None:
    parts = [
        {
            "name": f"mig-{i}",
            "consumesCounters": [{"counterSet": "gpu-0", "counters": {"memory": {"value": "40Gi"}}}],
        }
        for i in range(3)
    ]
    # As in v1.37, counter sets live in their own slice of the pool.
    dra = state(parts, pool={"name": "n1", "generation": 1, "resourceSliceCount": 2})
    dra.apply(
        "ResourceSlice",
        "ADDED",
        {
            "metadata": {"name": "n1-counters"},
            "spec": {
                "driver": DRIVER,
                "nodeName": "n1",
                "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 2},
                "sharedCounters": [{"name": "gpu-0", "counters": {"memory": {"value": "80Gi"}}}],
            },
        },
    )
    assert allocate(dra, claim(exactly(count=2))) == [["mig-0", "mig-1"]]
    assert allocate(dra, claim(exactly(count=3))) is None


def test_consumable_capacity_shares_a_device() -> None:
    shared = gpu(0, allowMultipleAllocations=True)
    shared["capacity"]["memory"]["requestPolicy"] = {
        "default": "10Gi",
        "validRange": {"min": "10Gi", "step": "10Gi"},
    }
    dra = state([shared])
    spec = claim(exactly(capacity={"requests": {"memory": "35Gi"}}))
    result = Allocator(dra, SelectorCache()).allocate("n1", {}, [("ns/a", spec), ("ns/b", spec)])
    assert result is not None
    assert [d.consumed for r in result for d in r.devices] == [
        (("memory", Decimal(40 * 2**30)),),
        (("memory", Decimal(40 * 2**30)),),
    ]
    assert allocate(dra, spec, spec, spec) is None  # 3 x 40Gi > 80Gi


def test_incomplete_pool_refuses_all_mode() -> None:
    dra = state([gpu(0)], pool={"name": "n1", "generation": 1, "resourceSliceCount": 2})
    with pytest.raises(AllocationError, match="is currently being updated"):
        allocate(dra, claim({"name": "all", "exactly": {"deviceClassName": "gpu", "allocationMode": "All"}}))
    assert allocate(dra, claim(exactly())) is None


def test_tainted_device_needs_a_toleration() -> None:
    dra = state([gpu(0, taints=[{"key": "broken", "effect": "NoSchedule"}])])
    assert allocate(dra, claim(exactly())) is None
    tolerant = exactly(tolerations=[{"key": "broken", "operator": "Exists"}])
    assert allocate(dra, claim(tolerant)) == [["gpu-0"]]


def test_packing_prefers_best_fit_on_memory_then_partly_used_islands() -> None:
    dra = state([gpu(0, "80Gi", "a"), gpu(1, "40Gi", "a"), gpu(2, "80Gi", "b"), gpu(3, "80Gi", "b")])
    assert allocate(dra, claim(exactly()), pack=True) == [["gpu-1"]]
    big = f'device.capacity["{DRIVER}"].memory.compareTo(quantity("80Gi")) >= 0'
    # gpu-0's island has one other free device (a 40Gi one), b has two: taking gpu-0 keeps b whole.
    assert allocate(dra, claim(exactly(selector=big)), pack=True) == [["gpu-0"]]


@pytest.mark.parametrize(
    ("operator", "value", "matches"),
    [("Gt", "8", True), ("Gt", "4", False), ("Lt", "4", True), ("Gt", "1_000", False), ("Gt", " 8", False)],
)
def test_node_selector_gt_lt_read_integers_as_kube_does(operator: str, value: str, matches: bool) -> None:
    """A slice's or an allocation's node selector uses node affinity's rules: Gt/Lt compare labels parsed
    as Go's ParseInt does, so "1_000" or " 8" (which Python's int() would take) match nothing."""
    selector = {"nodeSelectorTerms": [{"matchExpressions": [{"key": "gpus", "operator": operator,
                                                              "values": ["5"]}]}]}
    assert node_selector_matches(selector, "n1", {"gpus": value}) is matches


def test_malformed_objects_are_kept_with_a_reason() -> None:
    dra = state([gpu(0)])
    dra.apply(
        "ResourceClaim",
        "ADDED",
        {
            "metadata": {"namespace": "ns", "name": "bad"},
            "spec": {"devices": {"requests": [{"name": "r", "exactly": {"count": 1}}]}},
        },
    )
    dra.apply("ResourceSlice", "ADDED", {"metadata": {"name": "broken"}, "spec": {"devices": "nope"}})
    dra.apply("DeviceClass", "ADDED", {"metadata": "garbage"})
    assert "deviceClassName: required" in dra.claims[("ns", "bad")].error
    assert dra.slices["broken"].error
