"""The simulated cluster's Dynamic Resource Allocation: the resource.k8s.io/v1 kinds, the stand-in for
kube-controller-manager's resource-claim controller, and a kubelet that refuses to start a pod whose
claims are not allocated on its node and reserved for it (as the real one does)."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
from builders import make_claim_template, make_gpu_slice, make_node, make_pod, make_resource_claim, pod_claim
from conftest import wait_for

from ai_scheduler.sim import SimApiServer
from ai_scheduler.sim.resourceclaims import (
    DELETE_PROTECTION_FINALIZER,
    POD_CLAIM_ANNOTATION,
    generate_name,
)


def claims(sim: SimApiServer) -> list[dict[str, Any]]:
    return sim.store.list("resourceclaims", "default")


def allocate(sim: SimApiServer, name: str, node: str, device: str, pod: dict[str, Any] | None) -> None:
    """Write a claim's allocation (and reservation for `pod`) as a scheduler's PreBind does."""
    rt = sim.registry.resolve("resourceclaims")
    entry = sim.store.entry(rt, "default", name)
    assert entry is not None
    claim = entry.copy()
    claim["metadata"]["finalizers"] = [DELETE_PROTECTION_FINALIZER]
    claim["status"] = {"allocation": {
        "devices": {"results": [{"request": "gpu", "driver": "gpu.nvidia.com", "pool": node,
                                 "device": device}]},
        "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": [node]}]}]}}}
    if pod is not None:
        claim["status"]["reservedFor"] = [{"resource": "pods", "name": pod["metadata"]["name"],
                                           "uid": pod["metadata"]["uid"]}]
    sim.store.update(rt, claim, entry)


def test_generate_name_is_cut_in_proportion() -> None:
    assert generate_name("train-0", "gpu") == "train-0-gpu-"
    long = generate_name("p" * 60, "c" * 30)
    assert long == "p" * 37 + "-" + "c" * 18  # kube's arithmetic: no hyphen after a cut name


async def test_kinds_are_served_with_status_and_scopes(sim: SimApiServer) -> None:
    async with aiohttp.ClientSession() as http:
        base = f"{sim.url}/apis/resource.k8s.io/v1"
        async with http.get(base) as resp:
            names = {r["name"]: r["namespaced"] for r in (await resp.json())["resources"]}
        assert names == {"resourceclaims": True, "resourceclaims/status": True,
                         "resourceclaimtemplates": True, "resourceslices": False, "deviceclasses": False}
        body = {**make_resource_claim("c"), "status": {"reservedFor": [{"name": "x"}]}}
        async with http.post(f"{base}/namespaces/default/resourceclaims", json=body) as resp:
            assert resp.status == 201
            created = await resp.json()
        assert "status" not in created  # status is written through the subresource only
        patch: dict[str, Any] = {"status": {"allocation": {"devices": {"results": []}}}}
        async with http.patch(f"{base}/namespaces/default/resourceclaims/c/status", json=patch,
                              headers={"Content-Type": "application/merge-patch+json"}) as resp:
            assert resp.status == 200
            assert (await resp.json())["status"] == patch["status"]
        async with http.post(f"{base}/resourceslices", json=make_gpu_slice("n1", gpus=2)) as resp:
            assert resp.status == 201
            assert "namespace" not in (await resp.json())["metadata"]


async def test_claim_from_template_is_made_owned_and_named_in_the_pod_status(sim: SimApiServer) -> None:
    sim.create("resourceclaimtemplates", make_claim_template("one-gpu", labels={"team": "a"}))
    pod = sim.create("pods", make_pod("train-0", resource_claims=[pod_claim("gpu", template="one-gpu")]))
    made = await wait_for(lambda: claims(sim))
    assert len(made) == 1
    claim = made[0]
    assert claim["metadata"]["name"].startswith("train-0-gpu-") and len(claim["metadata"]["name"]) == 17
    assert claim["metadata"]["annotations"] == {POD_CLAIM_ANNOTATION: "gpu"}
    assert claim["metadata"]["labels"] == {"team": "a"}
    assert claim["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Pod", "name": "train-0", "uid": pod["metadata"]["uid"],
         "controller": True}]
    assert claim["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] == "gpu.nvidia.com"
    status = await wait_for(lambda: (sim.store.get("pods", "default", "train-0") or {})["status"].get(
        "resourceClaimStatuses"))
    assert status == [{"name": "gpu", "resourceClaimName": claim["metadata"]["name"]}]
    await asyncio.sleep(0.1)
    assert len(claims(sim)) == 1  # made once


async def test_pod_waits_for_its_template(sim: SimApiServer) -> None:
    sim.create("pods", make_pod("p", resource_claims=[pod_claim("gpu", template="later")]))
    await asyncio.sleep(0.1)
    assert claims(sim) == []
    sim.create("resourceclaimtemplates", make_claim_template("later"))
    await wait_for(lambda: claims(sim))


async def test_kubelet_starts_a_pod_only_with_its_claims_allocated_and_reserved(sim: SimApiServer) -> None:
    for node in ("n1", "n2"):
        sim.create("nodes", make_node(node))
        sim.create("resourceslices", make_gpu_slice(node, gpus=2))
    sim.create("resourceclaims", make_resource_claim("c"))
    pod = sim.create("pods", make_pod("p", resource_claims=[pod_claim("gpu", claim="c")]))
    sim.bind("default", "p", "n1")
    assert sim.kubelets is not None
    why = await wait_for(lambda: sim.kubelets.waiting_on_claims.get(("default", "p")))  # type: ignore[union-attr]
    assert why == 'resourceclaim "c" is not allocated'
    allocate(sim, "c", "n2", "gpu-0", pod)  # a device of another node: a wrong placement
    await wait_for(lambda: "is on node n2" in sim.kubelets.waiting_on_claims.get(("default", "p"), ""))  # type: ignore[union-attr]
    assert sim.store.get("pods", "default", "p")["status"]["phase"] == "Pending"  # type: ignore[index]
    # Allocated on the right node but not reserved: the controller reserves an allocated claim for the
    # bound pod that uses it, then the pod starts.
    allocate(sim, "c", "n1", "gpu-1", None)
    await wait_for(lambda: (sim.store.get("pods", "default", "p") or {})["status"]["phase"] == "Running")
    claim = sim.store.get("resourceclaims", "default", "c") or {}
    assert claim["status"]["reservedFor"] == [
        {"resource": "pods", "name": "p", "uid": pod["metadata"]["uid"]}]


async def test_deleting_the_pod_frees_and_removes_its_generated_claim(sim: SimApiServer) -> None:
    sim.create("nodes", make_node("n1"))
    sim.create("resourceslices", make_gpu_slice("n1", gpus=1))
    sim.create("resourceclaimtemplates", make_claim_template("one-gpu"))
    sim.create("resourceclaims", make_resource_claim("shared"))
    pod = sim.create("pods", make_pod("p", resource_claims=[pod_claim("gpu", template="one-gpu"),
                                                             pod_claim("extra", claim="shared")]))
    generated = (await wait_for(lambda: claims(sim) if len(claims(sim)) == 2 else None))
    name = next(c["metadata"]["name"] for c in generated if c["metadata"]["name"] != "shared")
    await wait_for(
        lambda: (sim.store.get("pods", "default", "p") or {})["status"].get("resourceClaimStatuses")
    )
    allocate(sim, name, "n1", "gpu-0", pod)
    allocate(sim, "shared", "n1", "gpu-0", pod)
    url = f"{sim.url}/api/v1/namespaces/default/pods/p?gracePeriodSeconds=0"
    async with aiohttp.ClientSession() as http, http.delete(url) as resp:
        assert resp.status == 200
    await wait_for(lambda: sim.store.get("resourceclaims", "default", name) is None)
    def deallocated() -> dict[str, Any] | None:
        shared = sim.store.get("resourceclaims", "default", "shared")
        return shared if shared and not shared.get("status") else None

    shared = await wait_for(deallocated)
    assert "finalizers" not in shared["metadata"]  # deallocated: the scheduler's finalizer is gone too


async def test_a_claim_with_finalizers_is_only_marked_until_they_go(sim: SimApiServer) -> None:
    claim = make_resource_claim("c")
    claim["metadata"]["finalizers"] = ["example.com/keep"]
    sim.create("resourceclaims", claim)
    url = f"{sim.url}/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/c"
    async with aiohttp.ClientSession() as http:
        async with http.delete(url) as resp:
            assert resp.status == 200
        held = sim.store.get("resourceclaims", "default", "c")
        assert held is not None and held["metadata"]["deletionTimestamp"]
        async with http.patch(url, json={"metadata": {"finalizers": None}},
                              headers={"Content-Type": "application/merge-patch+json"}) as resp:
            assert resp.status == 200
    assert sim.store.get("resourceclaims", "default", "c") is None
