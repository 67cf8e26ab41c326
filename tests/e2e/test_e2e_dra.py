"""End to end: GPUs through Dynamic Resource Allocation (resource.k8s.io/v1), on both backends.

kwok nodes publish their GPUs only through ResourceSlices shaped like those of NVIDIA's DRA driver
(`gpu.nvidia.com`, devices `gpu-0..N` with productName, index, uuid, driverVersion and a memory
capacity); a DeviceClass `gpu.nvidia.com` selects that driver's devices, and another maps the plain
extended resource `nvidia.com/gpu` onto them (KEP-5004). On the real backend kube-controller-manager's
resource-claim controller makes claims from templates and cleans up after pods; on the simulated one
its stand-in does (ai_scheduler/sim/resourceclaims.py), and the simulated kubelet starts no pod whose
claims are not allocated on its node and reserved for it.

What is checked is what a user sees: where the pod went, the claim's `status.allocation` (driver,
pool, device, node selector) and `status.reservedFor`, the pod's conditions, and that no device is
ever given to two claims.
"""

from __future__ import annotations

from typing import Any

import pytest
from backends import Cluster, SimCluster
from builders import (
    NVIDIA_DRIVER,
    Pod,
    make_claim_template,
    make_device_class,
    make_gpu_slice,
    make_node,
    make_pod,
    make_resource_claim,
    pod_claim,
)
from conftest import StartScheduler, create_all, create_dra, stored_pod, wait_for

from ai_scheduler.api.kube import KubeClient
from ai_scheduler.config import parse_config
from ai_scheduler.config.schema import FILTER_PLUGINS
from ai_scheduler.status.tables import gpus_table
from ai_scheduler.visibility.resources import gpu_node_items
from e2e.test_e2e_scheduling import pod_condition

EXTENDED_CLASS = "gpu.nvidia.com-extended"
FINALIZER = "resource.kubernetes.io/delete-protection"


def gpu_pod(name: str, *claims: dict[str, str], **kwargs: Any) -> dict[str, Any]:
    """A pod whose GPUs are DRA claims (`pod_claim`)."""
    return Pod(name, resource_claims=list(claims), **kwargs).obj()


async def dra_nodes(api: KubeClient, *, dra: int = 2, plain: int = 1, gpus: int = 2,
                    extended: bool = False) -> None:
    """`dra` nodes whose GPUs are only in ResourceSlices, `plain` nodes without GPUs, and the classes."""
    nodes = [make_node(f"dra-{i}", cpu="32", memory="128Gi") for i in range(dra)]
    nodes += [make_node(f"cpu-{i}", cpu="32", memory="128Gi") for i in range(plain)]
    await create_all(api, nodes, [])
    classes = [make_device_class(NVIDIA_DRIVER)]
    if extended:
        classes.append(make_device_class(EXTENDED_CLASS, extended_resource="nvidia.com/gpu"))
    await create_dra(api, *classes, *(make_gpu_slice(f"dra-{i}", gpus=gpus) for i in range(dra)))


def claim_of(cluster: Cluster, name: str) -> dict[str, Any]:
    return cluster.store.get("resourceclaims", "default", name) or {}


def allocated(cluster: Cluster, name: str) -> dict[str, Any] | None:
    """The claim once allocated and reserved (both are written before the pod is bound)."""
    claim = claim_of(cluster, name)
    status = claim.get("status") or {}
    return claim if status.get("allocation") and status.get("reservedFor") else None


def devices(claim: dict[str, Any]) -> list[tuple[str, str, str]]:
    results = claim["status"]["allocation"]["devices"]["results"]
    return [(r["driver"], r["pool"], r["device"]) for r in results]


def node_of(cluster: Cluster, name: str) -> str:
    return str(((cluster.store.get("pods", "default", name) or {}).get("spec") or {}).get("nodeName") or "")


def is_running(cluster: Cluster, name: str) -> bool:
    return ((cluster.store.get("pods", "default", name) or {}).get("status") or {}).get("phase") == "Running"


def generated_claim(cluster: Cluster, pod: str, claim: str) -> str:
    statuses = (stored_pod(cluster, pod).get("status") or {}).get("resourceClaimStatuses") or []
    return next((s.get("resourceClaimName") or "" for s in statuses if s["name"] == claim), "")


def reserved_uids(claim: dict[str, Any]) -> set[str]:
    return {ref["uid"] for ref in (claim.get("status") or {}).get("reservedFor") or []}


def all_allocated_devices(cluster: Cluster) -> list[tuple[str, str, str]]:
    return [d for c in cluster.store.list("resourceclaims")
            if (c.get("status") or {}).get("allocation") for d in devices(c)]


async def test_a_dra_gpu_pod_lands_where_a_slice_has_a_free_device(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    running = await start_scheduler()
    await dra_nodes(api, dra=1, plain=2)
    await create_dra(api, make_resource_claim("train-gpu"))
    await create_all(api, [], [gpu_pod("train", pod_claim("gpu", claim="train-gpu"))])
    claim = await wait_for(lambda: allocated(cluster, "train-gpu"), what="the claim allocated and reserved")
    await wait_for(lambda: node_of(cluster, "train"), what="the pod bound")
    assert node_of(cluster, "train") == "dra-0"
    [(driver, pool, device)] = devices(claim)
    assert (driver, pool) == (NVIDIA_DRIVER, "dra-0") and device in ("gpu-0", "gpu-1")
    assert claim["status"]["reservedFor"] == [
        {"resource": "pods", "name": "train", "uid": stored_pod(cluster, "train")["metadata"]["uid"]}]
    terms = claim["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"]
    assert terms == [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["dra-0"]}]}]
    assert FINALIZER in claim["metadata"]["finalizers"]
    # The kubelet (kwok on the real backend) starts it: on the simulated backend this also proves the
    # claim was allocated on the pod's node and reserved for it before the pod was bound.
    await wait_for(lambda: is_running(cluster, "train"), what="the pod running")
    # The replayable log: the decision names the devices it allocated, and the objects it chose from
    # (the slice, the class, the claim, then the claim as allocated) are logged as dra.object lines.
    [decision] = [d for d in running.log_lines("decision") if d["pod"] == "default/train"]
    assert str(claim["metadata"]["name"]) in str(decision["claims"]) and device in str(decision["claims"])
    logged = {(line["kind"], line["name"]) for line in running.log_lines("dra.object")}
    assert {("ResourceSlice", "dra-0-gpu-nvidia-com"), ("DeviceClass", NVIDIA_DRIVER),
            ("ResourceClaim", "train-gpu")} <= logged
    await wait_for(lambda: any(line["name"] == "train-gpu" and (line["object"].get("status") or {}).get(
        "allocation") for line in running.log_lines("dra.object")), what="the allocation logged")


async def test_a_claim_from_a_template_is_made_by_the_controller_and_allocated(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    await start_scheduler()
    await dra_nodes(api, dra=1, plain=1)
    await create_dra(api, make_claim_template("two-gpus", count=2))
    await create_all(api, [], [gpu_pod("worker", pod_claim("gpus", template="two-gpus"))])
    name = await wait_for(lambda: generated_claim(cluster, "worker", "gpus"), what="the claim named")
    assert name.startswith("worker-gpus-")
    claim = await wait_for(lambda: allocated(cluster, name), what="the generated claim allocated")
    assert claim["metadata"]["ownerReferences"][0]["name"] == "worker"
    assert sorted(devices(claim)) == [(NVIDIA_DRIVER, "dra-0", "gpu-0"), (NVIDIA_DRIVER, "dra-0", "gpu-1")]
    await wait_for(lambda: node_of(cluster, "worker") == "dra-0", what="the pod bound to the DRA node")
    await wait_for(lambda: is_running(cluster, "worker"), what="the pod running")


async def test_a_claim_shared_by_two_pods_puts_both_on_its_node(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    await start_scheduler()
    await dra_nodes(api, dra=2, plain=0)
    await create_dra(api, make_resource_claim("shared"))
    await create_all(api, [], [gpu_pod("reader-a", pod_claim("gpu", claim="shared"))])
    await wait_for(lambda: node_of(cluster, "reader-a"), what="the first pod bound")
    await create_all(api, [], [gpu_pod("reader-b", pod_claim("gpu", claim="shared"))])
    await wait_for(lambda: node_of(cluster, "reader-b"), what="the second pod bound")
    assert node_of(cluster, "reader-a") == node_of(cluster, "reader-b")
    await wait_for(lambda: len(reserved_uids(claim_of(cluster, "shared"))) == 2, what="reserved for both")
    claim = claim_of(cluster, "shared")
    uids = {stored_pod(cluster, p)["metadata"]["uid"] for p in ("reader-a", "reader-b")}
    assert reserved_uids(claim) == uids
    assert len(devices(claim)) == 1
    assert devices(claim)[0][1] == node_of(cluster, "reader-a")


async def test_two_pods_wanting_more_than_one_node_has_go_to_two_nodes_never_the_same_device(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    await start_scheduler()
    await dra_nodes(api, dra=2, plain=1, gpus=3)
    await create_dra(api, make_claim_template("two-gpus", count=2))
    pods = [gpu_pod(f"w{i}", pod_claim("gpus", template="two-gpus")) for i in range(2)]
    await create_all(api, [], pods)
    await wait_for(lambda: node_of(cluster, "w0") and node_of(cluster, "w1"), what="both pods bound")
    assert {node_of(cluster, "w0"), node_of(cluster, "w1")} == {"dra-0", "dra-1"}
    used = all_allocated_devices(cluster)
    assert len(used) == 4 and len(set(used)) == 4
    for pod in ("w0", "w1"):
        claim = claim_of(cluster, generated_claim(cluster, pod, "gpus"))
        assert {pool for _, pool, _ in devices(claim)} == {node_of(cluster, pod)}


async def test_a_claim_no_device_meets_leaves_the_pod_unschedulable_with_kubes_message(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    await start_scheduler()
    await dra_nodes(api, dra=2, plain=1)
    selector = f'device.attributes["{NVIDIA_DRIVER}"].productName == "NVIDIA B200"'
    await create_dra(api, make_resource_claim("b200", selectors=[selector]))
    await create_all(api, [], [gpu_pod("wants-b200", pod_claim("gpu", claim="b200"))])
    condition = await wait_for(lambda: pod_condition(cluster, "wants-b200").get("reason") == "Unschedulable"
                               and pod_condition(cluster, "wants-b200"), what="the pod Unschedulable")
    message = condition["message"]
    assert message.startswith("0/3 nodes are available: 3 cannot allocate all claims."), message
    assert not node_of(cluster, "wants-b200")
    assert not (claim_of(cluster, "b200").get("status") or {}).get("allocation")


async def test_a_plain_gpu_request_lands_on_a_dra_only_node_through_the_extended_resource_mapping(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    await start_scheduler()
    await dra_nodes(api, dra=1, plain=2, extended=True)
    await create_all(api, [], [make_pod("classic", gpus=1)])
    await wait_for(lambda: node_of(cluster, "classic"), what="the nvidia.com/gpu pod bound")
    assert node_of(cluster, "classic") == "dra-0"
    status = stored_pod(cluster, "classic")["status"].get("extendedResourceClaimStatus") or {}
    name = status.get("resourceClaimName")
    assert name, stored_pod(cluster, "classic")["status"]
    claim = await wait_for(lambda: allocated(cluster, name), what="the extended-resource claim allocated")
    [(driver, pool, _)] = devices(claim)
    assert (driver, pool) == (NVIDIA_DRIVER, "dra-0")
    await wait_for(lambda: is_running(cluster, "classic"), what="the pod running")


async def test_deleting_the_pod_frees_its_device_for_the_next_pod(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    await start_scheduler()
    await dra_nodes(api, dra=1, plain=0, gpus=1)
    await create_dra(api, make_claim_template("one-gpu"))
    await create_all(api, [], [gpu_pod("first", pod_claim("gpu", template="one-gpu"))])
    await wait_for(lambda: node_of(cluster, "first"), what="the first pod bound")
    first_claim = generated_claim(cluster, "first", "gpu")
    await create_all(api, [], [gpu_pod("second", pod_claim("gpu", template="one-gpu"))])
    await wait_for(lambda: pod_condition(cluster, "second").get("reason") == "Unschedulable",
                   what="the second pod waiting for the device")
    assert (await api.delete_pod("default", "first", grace_period_seconds=0)).ok
    # On the real backend kube-controller-manager's resource-claim controller frees the first claim and
    # deletes it. After the differential test's hundreds of DRA objects it is still working through
    # their deletions at its client's default 20 QPS: 44 s measured, so the deadlines are generous.
    await wait_for(lambda: node_of(cluster, "second") == "dra-0", what="the second pod bound", timeout=120)
    claim = claim_of(cluster, generated_claim(cluster, "second", "gpu"))
    assert devices(claim) == [(NVIDIA_DRIVER, "dra-0", "gpu-0")]
    await wait_for(lambda: not claim_of(cluster, first_claim), what="the first pod's claim removed",
                   timeout=120)


async def test_dra_gpus_count_in_quotas_and_in_the_gpu_views(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    running = await start_scheduler(parse_config({
        "server": {"port": 0, "bindAddress": "127.0.0.1"},
        "scheduling": {"initialBackoffSeconds": 0.05, "maxBackoffSeconds": 0.2},
        "groups": {"vision": {"max": {"nvidia.com/gpu": 2}}},
        "users": {"alice": {"group": "vision"}},
        "namespaces": {"default": {"user": "alice"}},
    }))
    await dra_nodes(api, dra=1, plain=0, gpus=4)
    await create_dra(api, make_claim_template("two-gpus", count=2), make_claim_template("one-gpu"))
    await create_all(api, [], [gpu_pod("a", pod_claim("gpus", template="two-gpus"))])
    await wait_for(lambda: node_of(cluster, "a"), what="a bound")
    tenancy = running.scheduler.core.tenancy
    assert tenancy.used("group", "vision").get("nvidia.com/gpu") == 2
    # The group's GPUs are all held through the claim: one more, on a node with two free, waits.
    await create_all(api, [], [gpu_pod("b", pod_claim("gpu", template="one-gpu"))])
    condition = await wait_for(lambda: pod_condition(cluster, "b").get("reason") == "Unschedulable"
                               and pod_condition(cluster, "b"), what="b refused by the quota")
    assert "exceeds quota of group vision: nvidia.com/gpu 2/2" in condition["message"], condition
    # The GPU map (visibility API `gpus`, `kubectl ai-scheduler gpus`, the web page) shows the devices
    # of the slice and who holds them.
    [node] = [n for n in gpu_node_items(running.scheduler.core) if n["metadata"]["name"] == "dra-0"]
    held = {d["index"]: [(h["namespace"], h["name"]) for h in d["holders"]] for d in node["devices"]}
    assert sorted(held) == [0, 1, 2, 3] and all(d["source"] == "dra" for d in node["devices"])
    assert sorted(i for i, h in held.items() if h == [("default", "a")]) == sorted(
        int(device[-1][-1]) for device in devices(claim_of(cluster, generated_claim(cluster, "a", "gpus"))))
    assert node["devices"][0]["model"] == "NVIDIA H100 80GB HBM3" and node["devices"][0]["memoryMiB"] == 81920
    rows = [line.split() for line in gpus_table({"items": [node]}).splitlines()[1:]]  # the CLI's table
    holding = sorted(str(i) for i, h in held.items() if h)
    assert sorted(row[1] for row in rows if "default/a" in row) == holding
    assert (await api.delete_pod("default", "a", grace_period_seconds=0)).ok
    await wait_for(lambda: node_of(cluster, "b") == "dra-0", what="b bound once a is gone", timeout=40)
    await wait_for(lambda: tenancy.used("group", "vision").get("nvidia.com/gpu") == 1, what="usage 1 GPU")


@pytest.mark.backend(
    "sim",
    reason="chosen requests must fail with 500: only the simulated server injects that (TLS hides them)",
)
async def test_a_binding_that_fails_after_prebind_undoes_the_reservation_and_the_extended_claim(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    running = await start_scheduler()
    await dra_nodes(api, dra=1, plain=0, gpus=2, extended=True)
    await create_dra(api, make_resource_claim("kept"))
    assert isinstance(cluster, SimCluster)
    for name in ("claimant", "classic"):
        cluster.sim.inject_failures("pods/binding", "create", "default", name, 1)
    await create_all(api, [], [gpu_pod("claimant", pod_claim("gpu", claim="kept")),
                               make_pod("classic", gpus=1)])
    await wait_for(lambda: node_of(cluster, "claimant") and node_of(cluster, "classic"),
                   what="both bound on a retry")
    assert [line["code"] for line in running.log_lines("bind.failed")] == [500, 500]
    # The first attempt's reservation was taken off again (a strategic-merge patch of the status) and
    # its extended-resource claim deleted; the retry made a new one. Never two devices for one pod.
    counts = cluster.request_counts()
    claims = "resourceclaims.resource.k8s.io"
    assert counts[f"{claims}/status"]["patch"] >= 1 and counts[claims]["delete"] >= 1, counts
    claim = claim_of(cluster, "kept")
    assert reserved_uids(claim) == {stored_pod(cluster, "claimant")["metadata"]["uid"]}
    extended = [c for c in cluster.store.list("resourceclaims") if c["metadata"]["name"] != "kept"]
    assert len(extended) == 1
    assert extended[0]["metadata"]["name"] == stored_pod(cluster, "classic")["status"][
        "extendedResourceClaimStatus"]["resourceClaimName"]
    used = all_allocated_devices(cluster)
    assert sorted(used) == [(NVIDIA_DRIVER, "dra-0", "gpu-0"), (NVIDIA_DRIVER, "dra-0", "gpu-1")]


async def test_a_higher_priority_dra_pod_preempts_the_pod_holding_the_only_device(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    running = await start_scheduler()
    await dra_nodes(api, dra=1, plain=1, gpus=1)
    await create_dra(api, make_claim_template("one-gpu"))
    await create_all(api, [], [gpu_pod("low", pod_claim("gpu", template="one-gpu"), priority=0)])
    await wait_for(lambda: node_of(cluster, "low") == "dra-0", what="low bound")
    low_claim = generated_claim(cluster, "low", "gpu")
    await create_all(api, [], [gpu_pod("high", pod_claim("gpu", template="one-gpu"), priority=1000)])
    # The victim's claim frees the device: the preemptor takes it, never beside it on the same device.
    await wait_for(lambda: running.log_lines("preemption"), what="a preemption")
    await wait_for(lambda: node_of(cluster, "high") == "dra-0", what="high bound", timeout=60)
    assert devices(claim_of(cluster, generated_claim(cluster, "high", "gpu"))) == [
        (NVIDIA_DRIVER, "dra-0", "gpu-0")]
    await wait_for(lambda: not claim_of(cluster, low_claim), what="the victim's claim gone")
    assert len(set(all_allocated_devices(cluster))) == len(all_allocated_devices(cluster))


async def test_dra_kinds_are_watched_only_while_a_profile_filters_with_dynamic_resources(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    kinds = ("resourceclaims", "resourceclaimtemplates", "resourceslices", "deviceclasses")

    def dra_requests() -> set[str]:
        return {resource.split(".")[0] for resource, verbs in cluster.request_counts().items()
                if resource.split(".")[0].split("/")[0] in kinds and verbs.get("list")}

    without = [name for name in FILTER_PLUGINS if name != "DynamicResources"]
    running = await start_scheduler(parse_config({
        "server": {"port": 0, "bindAddress": "127.0.0.1"}, "profiles": [{"filters": without}]}))
    await create_all(api, [make_node("plain-0")], [make_pod("plain")])
    await wait_for(lambda: node_of(cluster, "plain"), what="a pod bound")
    assert dra_requests() == set()
    await running.stop()
    await start_scheduler()  # the default profile filters with DynamicResources
    await wait_for(lambda: dra_requests() == set(kinds), what="the four DRA kinds listed")


@pytest.mark.backend("sim", reason="a cluster without resource.k8s.io/v1 is made by unregistering it")
async def test_a_cluster_that_does_not_serve_dra_still_schedules_with_the_default_profile(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    assert isinstance(cluster, SimCluster)
    registry = cluster.sim.registry
    for rt in [rt for rt in registry if rt.group == "resource.k8s.io"]:
        del registry._by_gvr[(rt.group, rt.version, rt.plural)]
    running = await start_scheduler()  # the default profile filters with DynamicResources
    await create_all(api, [make_node("old-0")], [make_pod("plain")])
    await wait_for(lambda: node_of(cluster, "plain"), what="a pod bound on a cluster without DRA")
    missing = {line["resource"] for line in running.log_lines("informer.resource_missing")}
    assert {"resourceclaims", "resourceslices", "deviceclasses", "resourceclaimtemplates"} <= missing
