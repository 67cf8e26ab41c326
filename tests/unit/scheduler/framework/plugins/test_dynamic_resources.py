"""DynamicResources in a cycle: kube's reasons, allocated claims, assumptions, extended resources."""

from __future__ import annotations

import random
from typing import Any

from builders import Pod, make_device_class, make_gpu_slice, make_node, make_pod, pod_claim

from ai_scheduler.cache.cache import SchedulerCache
from ai_scheduler.cache.dra import Claim
from ai_scheduler.cache.records import NodeRecord, PodRecord
from ai_scheduler.scheduler.framework.plugins.dynamic_resources import DraPlan, DynamicResources
from ai_scheduler.scheduler.framework.plugins.resource_fit import NodeResourcesFit
from ai_scheduler.scheduler.framework.runtime import Decision, Framework

DRIVER = "gpu.nvidia.com"


def cluster(gpus: dict[str, int], extended: bool = False) -> SchedulerCache:
    cache = SchedulerCache()
    for name in ("n1", "n2", "n3"):
        cache.set_node(NodeRecord.from_api(make_node(name)))
    cache.dra.apply(
        "DeviceClass",
        "ADDED",
        make_device_class("gpu", driver=DRIVER, extended_resource="nvidia.com/gpu" if extended else None),
    )
    for node, count in gpus.items():
        cache.dra.apply("ResourceSlice", "ADDED", make_gpu_slice(node, gpus=count, driver=DRIVER))
    return cache


def add_claim(
    cache: SchedulerCache,
    name: str,
    selector: str = "",
    count: int = 1,
    status: dict[str, Any] | None = None,
    owner: str = "",
) -> None:
    exactly: dict[str, Any] = {"deviceClassName": "gpu", "count": count}
    if selector:
        exactly["selectors"] = [{"cel": {"expression": selector}}]
    meta: dict[str, Any] = {
        "namespace": "default",
        "name": name,
        "uid": f"uid-{name}",
        "resourceVersion": "1",
    }
    if owner:
        meta["ownerReferences"] = [{"kind": "Pod", "name": "p", "uid": owner, "controller": True}]
    cache.dra.apply(
        "ResourceClaim",
        "ADDED",
        {
            "metadata": meta,
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}},
            "status": status or {},
        },
    )


def allocated(
    pool: str,
    node_selector: dict[str, Any] | None = None,
    reserved_for: list[tuple[str, str]] | None = None,
) -> dict[str, Any]:
    """A claim's status: request `gpu` allocated the device gpu-0 of `pool`, reserved for the pods
    (name, uid) given."""
    allocation: dict[str, Any] = {
        "devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": pool, "device": "gpu-0"}]}
    }
    if node_selector is not None:
        allocation["nodeSelector"] = node_selector
    status: dict[str, Any] = {"allocation": allocation}
    if reserved_for:
        status["reservedFor"] = [{"resource": "pods", "name": name, "uid": uid} for name, uid in reserved_for]
    return status


def claim_pod(name: str = "p", claim: str = "c", template: str = "",
              statuses: list[dict[str, Any]] | None = None,
              gpus: int = 0) -> PodRecord:
    ref = pod_claim("gpu", template=template) if template else pod_claim("gpu", claim=claim)
    pod = Pod(name, resource_claims=[ref] if claim or template else None, gpus=gpus).uid()
    return (pod.status(resourceClaimStatuses=statuses) if statuses is not None else pod).record()


def framework(cache: SchedulerCache) -> Framework:
    return Framework(
        "ai-scheduler", [NodeResourcesFit(), DynamicResources()], [], cache, rng=random.Random(1)
    )


def place(fw: Framework, cache: SchedulerCache, record: PodRecord) -> Decision:
    decision = fw.schedule(record)
    if decision.node is not None:
        cache.assume(record, decision.node)
        if isinstance(decision.claims, DraPlan):
            DynamicResources.assume(decision.claims, cache)
    return decision


def test_pods_without_claims_are_untouched() -> None:
    cache = cluster({"n1": 1})
    decision = framework(cache).schedule(claim_pod(claim=""))
    assert decision.node is not None and decision.claims is None


def test_claim_lands_on_the_node_with_a_free_device_and_is_assumed() -> None:
    cache = cluster({"n2": 1})
    add_claim(cache, "c")
    fw = framework(cache)
    decision = place(fw, cache, claim_pod())
    assert decision.node == "n2"
    held = cache.dra.claim("default", "c")
    assert held is not None and held.allocation is not None
    assert [d.device for d in held.allocation.devices] == ["gpu-0"]
    assert held.reserved_for_pod("uid-p")
    add_claim(cache, "c2")
    second = fw.schedule(claim_pod("q", "c2"))
    assert second.node is None
    assert second.message == "0/3 nodes are available: 3 cannot allocate all claims."


def test_unmet_selector_is_unschedulable_with_kubes_message() -> None:
    cache = cluster({"n1": 2, "n2": 2})
    add_claim(cache, "c", selector=f'device.attributes["{DRIVER}"].productName == "B200"')
    decision = framework(cache).schedule(claim_pod())
    assert decision.node is None
    assert decision.message == "0/3 nodes are available: 3 cannot allocate all claims."


def test_missing_claim_and_template_claim_not_created_yet_wait() -> None:
    cache = cluster({"n1": 1})
    fw = framework(cache)
    missing = '0/3 nodes are available: could not find ResourceClaim "default/c".'
    assert fw.schedule(claim_pod()).message == missing
    waiting = fw.schedule(claim_pod(claim="", template="t"))
    assert waiting.message == '0/3 nodes are available: pod "default/p": ResourceClaim not created yet.'
    add_claim(cache, "p-gpu-x", owner="someone-else")
    record = claim_pod(claim="", template="t", statuses=[{"name": "gpu", "resourceClaimName": "p-gpu-x"}])
    assert "(Pod is not owner)" in fw.schedule(record).message
    add_claim(cache, "p-gpu-y", owner="uid-p")
    record = claim_pod(claim="", template="t", statuses=[{"name": "gpu", "resourceClaimName": "p-gpu-y"}])
    assert fw.schedule(record).node == "n1"


def test_missing_device_class_is_named() -> None:
    cache = cluster({"n1": 1})
    cache.dra.apply("DeviceClass", "DELETED", {"metadata": {"name": "gpu"}})
    add_claim(cache, "c")
    assert framework(cache).schedule(claim_pod()).message == (
        "0/3 nodes are available: request gpu: device class gpu does not exist."
    )


def test_allocated_claim_keeps_the_pod_on_its_node_and_is_shared() -> None:
    cache = cluster({"n1": 1, "n3": 1})
    selector = {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n3"]}]}]
    }
    add_claim(
        cache,
        "shared",
        status=allocated("n3", node_selector=selector, reserved_for=[("other", "uid-other")]),
    )
    decision = framework(cache).schedule(claim_pod(claim="shared"))
    assert decision.node == "n3"
    assert isinstance(decision.claims, DraPlan)
    assert [(w.allocate, w.claim.reserved_for[-1].uid) for w in decision.claims.writes] == [(False, "uid-p")]
    record = claim_pod(claim="shared")
    fw = framework(cache)
    assert fw.feasible_rows(record)[1] == {"resourceclaim not available on the node": 2}


def test_reserved_for_limit() -> None:
    cache = cluster({"n1": 1})
    add_claim(
        cache,
        "full",
        status=allocated("n1", reserved_for=[(f"p{i}", f"u{i}") for i in range(256)]),
    )
    assert (
        framework(cache).schedule(claim_pod(claim="full")).message
        == "0/3 nodes are available: resourceclaim in use."
    )


def test_unreserve_frees_the_devices() -> None:
    cache = cluster({"n1": 1})
    add_claim(cache, "c")
    add_claim(cache, "d")
    fw = framework(cache)
    decision = place(fw, cache, claim_pod())
    assert fw.schedule(claim_pod("q", "d")).node is None
    assert isinstance(decision.claims, DraPlan)
    DynamicResources.release(decision.claims, cache)
    assert cache.dra.claim("default", "c") is not None
    assert cache.dra.claim("default", "c").allocation is None  # type: ignore[union-attr]
    assert fw.schedule(claim_pod("q", "d")).node == "n1"


def test_the_assumption_outlives_the_watch_until_prebind_lets_go() -> None:
    cache = cluster({"n1": 2})
    add_claim(cache, "c")
    decision = place(framework(cache), cache, claim_pod())
    assert isinstance(decision.claims, DraPlan)
    write = decision.claims.writes[0].claim
    assert write.allocation is not None
    # PreBind's first step (the finalizer) shows in the watch before its second (the status): the
    # claim is newer than the one assumed over, still without the allocation; the assumption stays.
    finalized = {**write.raw, "metadata": {**write.raw["metadata"], "resourceVersion": "2",
                                            "finalizers": ["resource.kubernetes.io/delete-protection"]}}
    cache.dra.apply("ResourceClaim", "MODIFIED", finalized)
    assert cache.dra.in_flight(write.key)
    assert list(cache.dra.allocated) == [(DRIVER, "n1", "gpu-0")]
    written = {**finalized, "metadata": {**finalized["metadata"], "resourceVersion": "3"},
               "status": {"allocation": dict(write.allocation.raw),
                          "reservedFor": [{"resource": "pods", "name": "p", "uid": "uid-p"}]}}
    cache.dra.set_claim(Claim.from_api(written))  # the status write's answer
    DynamicResources.release(decision.claims, cache)  # PreBind done
    assert not cache.dra.assumed
    assert list(cache.dra.allocated) == [(DRIVER, "n1", "gpu-0")]
    cache.dra.apply("ResourceClaim", "MODIFIED", finalized)  # a late, older event changes nothing
    assert list(cache.dra.allocated) == [(DRIVER, "n1", "gpu-0")]
    cache.dra.apply("ResourceClaim", "DELETED", written)
    assert not cache.dra.allocated


def test_dra_backed_extended_resource_on_a_node_without_it_in_allocatable() -> None:
    cache = cluster({"n2": 2}, extended=True)
    decision = framework(cache).schedule(claim_pod(claim="", gpus=2))
    assert decision.node == "n2"
    assert isinstance(decision.claims, DraPlan) and decision.claims.extended is not None
    spec, result, mappings = decision.claims.extended
    assert [g.name for g in spec.requests] == ["container-0-request-2"]
    assert [d.device for d in result.devices] == ["gpu-0", "gpu-1"]
    assert mappings == [
        {"containerName": "main", "resourceName": "nvidia.com/gpu", "requestName": "container-0-request-2"}
    ]
    too_many = framework(cache).schedule(claim_pod(claim="", gpus=3))
    assert too_many.node is None
    assert "Insufficient nvidia.com/gpu" not in too_many.message


def test_claims_changed_elsewhere_are_recomputed_only_there() -> None:
    cache = cluster({"n1": 1, "n2": 1})
    add_claim(cache, "c")
    plugin = DynamicResources()
    fw = Framework("ai-scheduler", [plugin], [], cache, rng=random.Random(1))
    assert fw.feasible_rows(claim_pod())[0].size == 2
    evaluations = plugin.selectors.evaluations
    add_claim(
        cache,
        "held",
        status=allocated("n1"),
    )
    rows, reasons = fw.feasible_rows(claim_pod())
    assert [cache.row_names[int(r)] for r in rows] == ["n2"] and reasons == {"cannot allocate all claims": 2}
    assert plugin.selectors.evaluations == evaluations  # verdicts per device were cached


def test_claim_record_round_trip() -> None:
    claim = Claim.from_api({"metadata": {"namespace": "a", "name": "b"}, "spec": "garbage"})
    assert claim.error == "spec: must be an object"


def test_a_shared_claim_allocated_in_flight_makes_the_second_pod_wait() -> None:
    cache = cluster({"n1": 1})
    add_claim(cache, "shared")
    fw = framework(cache)
    first = place(fw, cache, claim_pod("a", "shared"))
    assert first.node == "n1"
    second = fw.schedule(claim_pod("b", "shared"))
    assert second.message == (
        "0/3 nodes are available: resource claim default/shared is in the process of being allocated."
    )
    assert isinstance(first.claims, DraPlan)
    written = dict(first.claims.writes[0].claim.raw)
    written["metadata"] = {**written["metadata"], "resourceVersion": "2"}
    written["status"] = {
        "allocation": dict(first.claims.writes[0].claim.allocation.raw),  # type: ignore[union-attr]
        "reservedFor": [{"resource": "pods", "name": "a", "uid": "uid-a"}],
    }
    cache.dra.apply("ResourceClaim", "MODIFIED", written)
    shared = fw.schedule(claim_pod("b", "shared"))
    assert shared.node == "n1"
    assert isinstance(shared.claims, DraPlan) and [w.allocate for w in shared.claims.writes] == [False]


def test_extended_resource_requests_follow_kubes_container_rules() -> None:
    from ai_scheduler.scheduler.framework.plugins.dynamic_resources import extended_spec

    cache = cluster({"n1": 8}, extended=True)
    gpu = {"requests": {"nvidia.com/gpu": "2"}}
    obj = make_pod("p", gpus=1, init_containers=[
        {"name": "init-a", "image": "x", "resources": {"requests": {"nvidia.com/gpu": "4"}}},
        {"name": "side", "image": "x", "restartPolicy": "Always", "resources": gpu},
        {"name": "init-b", "image": "x", "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": "3"}}},
    ])
    record = PodRecord.from_api(obj)
    spec, mappings = extended_spec(record, cache.dra, {"nvidia.com/gpu"})
    # kube: the sidecar (index 1) and the app container (index 3) get requests; init-a reuses both (2 + 1)
    # and asks for 1 more, init-b reuses the app container's 1 and asks for 2 more: the bigger rest wins.
    assert [(g.name, g.alternatives[0].count) for g in spec.requests] == [
        ("container-1-request-0", 2), ("container-2-request-1", 2), ("container-3-request-2", 1)]
    assert {(m["containerName"], m["requestName"]) for m in mappings} == {
        ("side", "container-1-request-0"), ("main", "container-3-request-2"),
        ("init-a", "container-1-request-0"), ("init-a", "container-3-request-2"),
        ("init-a", "container-2-request-1"), ("init-b", "container-3-request-2"),
        ("init-b", "container-2-request-1")}


def test_first_available_prefers_nodes_meeting_an_earlier_alternative() -> None:
    from ai_scheduler.scheduler.framework.plugins.dynamic_resources import DynamicResourcesScore

    cache = cluster({"n1": 1, "n2": 2})
    cache.dra.apply("ResourceClaim", "ADDED", {
        "metadata": {"namespace": "default", "name": "c", "uid": "uid-c", "resourceVersion": "1"},
        "spec": {"devices": {"requests": [{"name": "gpus", "firstAvailable": [
            {"name": "two", "deviceClassName": "gpu", "count": 2},
            {"name": "one", "deviceClassName": "gpu", "count": 1},
        ]}]}}})
    score = DynamicResourcesScore(2)
    fw = Framework("ai-scheduler", [DynamicResources()], [score], cache, rng=random.Random(1))
    assert score.filter is fw.dra
    decision = fw.schedule(claim_pod())
    assert decision.node == "n2"  # 8 points there (the first alternative), 7 on n1
    assert dict(decision.top) == {"n2": 200, "n1": 174}
    assert isinstance(decision.claims, DraPlan)
    assert [d.request for d in decision.claims.writes[0].claim.allocation.devices] == [  # type: ignore[union-attr]
        "gpus/two", "gpus/two"]


def test_preemption_what_if_frees_the_devices_of_claims_reserved_for_the_victims_alone() -> None:
    cache = cluster({"n1": 1})
    add_claim(cache, "low-gpu", status=allocated("n1", reserved_for=[("low", "uid-low")]))
    add_claim(cache, "c")
    plugin = DynamicResources()
    fw = Framework("ai-scheduler", [plugin], [], cache, rng=random.Random(1))
    assert fw.feasible_rows(claim_pod())[0].size == 0
    victim = claim_pod("low", "low-gpu")
    with cache.dra.without_pods({victim.uid}):
        assert [cache.row_names[int(r)] for r in fw.feasible_rows(claim_pod())[0]] == ["n1"]
    assert fw.feasible_rows(claim_pod())[0].size == 0
    with cache.dra.without_pods({"someone-else"}):
        assert fw.feasible_rows(claim_pod())[0].size == 0


def test_a_deallocated_claim_wakes_every_pod_waiting_for_devices() -> None:
    cache = cluster({"n1": 1})
    obj: dict[str, Any] = {
        "metadata": {"namespace": "default", "name": "other", "uid": "u-o", "resourceVersion": "1"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}},
        "status": allocated("n1"),
    }
    cache.dra.apply("ResourceClaim", "ADDED", obj)
    waiting = claim_pod("w", "c")
    assert not cache.dra.pods_affected("ResourceClaim", obj)(waiting)
    meta = {**obj["metadata"], "resourceVersion": "2"}
    cache.dra.apply("ResourceClaim", "MODIFIED", {**obj, "metadata": meta, "status": {}})
    assert cache.dra.pods_affected("ResourceClaim", obj)(waiting)
    assert not cache.dra.pods_affected("ResourceClaim", obj)(claim_pod("plain", claim=""))


def test_a_profile_without_dynamic_resources_never_binds_a_pod_with_claims() -> None:
    cache = cluster({"n1": 1})
    add_claim(cache, "c")
    fw = Framework("ai-scheduler", [NodeResourcesFit()], [], cache, rng=random.Random(1))
    decision = fw.schedule(claim_pod())
    assert decision.node is None
    assert decision.message == (
        "0/3 nodes are available: profile ai-scheduler does not run DynamicResources, "
        "which pods with spec.resourceClaims need."
    )
    assert fw.schedule(claim_pod("plain", claim="")).node is not None


def test_a_selector_erring_at_run_time_fails_the_attempt_in_kubes_words() -> None:
    cache = cluster({"n1": 1})
    add_claim(cache, "c", selector=f'device.attributes["{DRIVER}"].nothing == 1')
    decision = framework(cache).schedule(claim_pod())
    assert decision.node is None
    assert decision.failure == decision.message == (
        'running "DynamicResources" filter plugin: claim default/c: selector #0 on device '
        f"{DRIVER}/n1/gpu-0: CEL runtime error: no such key: nothing"
    )
    assert framework(cache).schedule(claim_pod("plain", claim="")).failure == ""
