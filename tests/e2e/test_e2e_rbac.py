"""The shipped ClusterRole against what the scheduler really calls, on a real API server.

The scheduler runs with a token of its own ServiceAccount (deploy/), through one workload that takes every
path that writes: binding, Scheduled and FailedScheduling events (created, then aggregated by a patch),
the PodScheduled condition, a gang's PodGroup status (scheduler-plugins' and a Kubernetes PodGroup's),
the GPU annotations written before binding, a preemption (the victim's DisruptionTarget condition, its
deletion, the preemptor's nomination), a Task's pods and status, the statuses of a GroupQuota, a
UserQuota and a Domain, VolumeBinding's PreBind (a volume's
claimRef, a claim's selected-node annotation), and DynamicResources' PreBind (a ResourceClaim's
finalizer, allocation and reservation; the claim of an extended resource). The kinds that give inferred
gangs their minimum are all served (a minimal CRD where no test installed one), so that each is listed
and watched. The API
server's audit log then lists every verb the scheduler used: each must be granted and none refused, and
each granted verb must have been used, so that the role stays the least the scheduler needs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from backends import Cluster, KubeCluster
from builders import (
    NVIDIA_DRIVER,
    NativePodGroup,
    Task,
    make_claim_template,
    make_device_class,
    make_gpu_slice,
    make_node,
    make_pod,
    make_pv,
    make_pvc,
    make_storage_class,
    pod_claim,
)
from conftest import StartScheduler, create_all, create_dra, wait_for
from paths import ROOT

from ai_scheduler.api.kube import KubeClient
from ai_scheduler.cache.pod_grouper import OWNER_RESOURCES
from ai_scheduler.config import parse_config
from e2e.test_e2e_gangs import bound_count, member, podgroup, podgroup_status
from e2e.test_e2e_gpus import Agents, gpu_cluster, share
from e2e.test_e2e_kube_parity import claimant, on_node, play_provisioner
from e2e.test_e2e_native_gangs import create_podgroup, initially_scheduled, native_member
from e2e.test_e2e_preemption import node_of
from e2e.test_e2e_scheduling import events_for

__all__ = ["gpu_cluster"]  # the fixture, shared with the GPU tests
RBAC = ROOT / "deploy" / "rbac.yaml"


# Granted, and not seen in the audit log of this workload:
# - `resourceclaims/binding` is no endpoint: the API server checks it when a status update changes a claim's
#   allocation or reservedFor (DRAResourceClaimGranularStatusAuthorization), as it does above;
# - DynamicResources' PreBind reads a claim again after a conflict (get), takes the pod's reservation off
#   (status patch) and deletes the extended-resource claim it created when a later step fails: paths a
#   healthy run does not take (tests/unit/scheduler/framework/plugins/test_dynamic_resources.py drives them).
UNSEEN = {
    ("resource.k8s.io", "resourceclaims/binding", "update"),
    ("resource.k8s.io", "resourceclaims/binding", "patch"),
    ("resource.k8s.io", "resourceclaims", "get"),
    ("resource.k8s.io", "resourceclaims", "delete"),
    ("resource.k8s.io", "resourceclaims/status", "patch"),
}


def granted() -> set[tuple[str, str, str]]:
    """(API group, resource[/subresource], verb) that the shipped ClusterRole grants."""
    role = next(d for d in yaml.safe_load_all(RBAC.read_text()) if d and d["kind"] == "ClusterRole")
    return {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def used(entries: list[dict[str, Any]]) -> Iterator[tuple[tuple[str, str, str], int]]:
    for entry in entries:
        ref = entry.get("objectRef") or {}
        resource = ref.get("resource", "") + (f"/{ref['subresource']}" if ref.get("subresource") else "")
        yield (
            (ref.get("apiGroup", ""), resource, entry["verb"]),
            (entry.get("responseStatus") or {}).get("code", 0),
        )


def serve_owner_kinds(cluster: KubeCluster, folder: Path) -> None:
    """The kinds whose objects give inferred gangs their minimum (pod_grouper.OWNER_RESOURCES) served, so
    that the scheduler lists and watches each: a minimal CRD for any the API server does not serve yet (the
    operators' own CRDs, where a test installed them, are kept)."""
    for group, version, plural, kind in OWNER_RESOURCES:
        status, _ = cluster.plane.request("GET", f"/apis/{group}/{version}/{plural}?limit=1")
        if status == 200:
            continue
        crd = {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.{group}",
                         "annotations": {"api-approved.kubernetes.io": "unapproved, test only"}},
            "spec": {
                "group": group,
                "scope": "Namespaced",
                "names": {"plural": plural, "singular": kind.lower(), "kind": kind,
                          "listKind": f"{kind}List"},
                "versions": [{
                    "name": version, "served": True, "storage": True, "subresources": {"status": {}},
                    "schema": {"openAPIV3Schema": {
                        "type": "object", "x-kubernetes-preserve-unknown-fields": True}},
                }],
            },
        }
        path = folder / f"{plural}.{group}.yaml"
        path.write_text(yaml.safe_dump(crd))
        cluster.plane.kubectl("apply", "-f", str(path))
        cluster.plane.wait_crd_established(f"{plural}.{group}")


@pytest.mark.backend("kube", reason="RBAC exists only on a real API server")
async def test_the_cluster_role_grants_exactly_the_verbs_the_scheduler_uses(
    cluster: Cluster, api: KubeClient, gpu_cluster: Agents, start_scheduler: StartScheduler, tmp_path: Path
) -> None:
    assert isinstance(cluster, KubeCluster)
    await asyncio.to_thread(serve_owner_kinds, cluster, tmp_path)
    settings = {"initialBackoffSeconds": 0.05, "maxBackoffSeconds": 0.2, "eventRepeatSeconds": 0.5}
    running = await start_scheduler(
        parse_config({"server": {"port": 0, "bindAddress": "127.0.0.1"}, "scheduling": settings})
    )
    # A gang on the managed GPU nodes, and a GPU share: PodGroup status, the GPU annotations, bindings.
    assert (await api.create_podgroup(podgroup("pair", 2))).ok
    await create_all(api, [], [member("pair", i, gpus=0) for i in range(2)] + [share("slice", "10Gi")])
    await wait_for(lambda: bound_count(cluster, "pair") == 2, what="the gang bound")
    await wait_for(lambda: podgroup_status(cluster, "pair").get("phase"), what="the PodGroup's status")
    # A native gang: a Kubernetes PodGroup's condition.
    await create_podgroup(api, NativePodGroup("duo", 2).obj())
    native = [native_member("duo", i, gpus=0) for i in range(2)]
    for pod in native:
        pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "100m"
    await create_all(api, [], native)
    await wait_for(lambda: initially_scheduled(cluster, "duo").get("status") == "True",
                   what="the Kubernetes PodGroup's condition written")
    # A pod that fits nowhere, retried after node changes: condition, event, and the event's aggregation.
    await create_all(api, [], [make_pod("huge", cpu="1000")])
    await wait_for(lambda: events_for(cluster, "huge", "FailedScheduling"), what="FailedScheduling")
    for round_ in range(4):
        await asyncio.sleep(0.6)
        assert (await api.patch_node("dgx-0", {"metadata": {"labels": {"round": str(round_)}}})).ok
    await wait_for(
        lambda: any((e.get("count") or 1) > 1 for e in events_for(cluster, "huge", "FailedScheduling")),
        what="the repeated event aggregated",
    )
    # A preemption: a low-priority pod holds a node that a high-priority one needs.
    on_dgx3 = {"kubernetes.io/hostname": "dgx-3"}
    await create_all(api, [], [make_pod("low", cpu="60", priority=0, node_selector=on_dgx3)])
    await wait_for(lambda: node_of(cluster, "low"), what="low bound")
    await create_all(api, [], [make_pod("vip", cpu="60", priority=1000, node_selector=on_dgx3)])
    await wait_for(lambda: running.log_lines("preemption"), what="a preemption")
    await wait_for(lambda: node_of(cluster, "vip"), what="the preemptor bound")

    # Volumes: a claim matched to a local volume (the volume's claimRef), and one left to a provisioner
    # (the claim's selected-node annotation); the test plays the provisioner.
    local = make_storage_class("rbac-local", provisioner="kubernetes.io/no-provisioner")
    dynamic = make_storage_class("rbac-dynamic", provisioner="example.com/csi")
    volume = make_pv("rbac-local-0", storage_class="rbac-local", node_affinity=on_node("dgx-0"))
    assert (await api.create_storage_class(local)).ok and (await api.create_storage_class(dynamic)).ok
    assert (await api.create_persistent_volume(volume)).ok
    for claim, storage_class in (("rbac-static", "rbac-local"), ("rbac-provisioned", "rbac-dynamic")):
        assert (await api.create_persistent_volume_claim(make_pvc(claim, storage_class=storage_class))).ok
    readers = [claimant("static-reader", "rbac-static"), claimant("writer", "rbac-provisioned")]
    await create_all(api, [], readers)
    await play_provisioner(api, cluster, "rbac-provisioned", "rbac-dynamic")
    await wait_for(lambda: node_of(cluster, "static-reader") and node_of(cluster, "writer"),
                   what="the pods with claims bound")

    # Dynamic Resource Allocation on a node whose GPUs are only in a ResourceSlice: a claim from a template
    # (the finalizer, allocation and reservation written before the binding) and a plain nvidia.com/gpu
    # request mapped onto the slice's devices (the claim the scheduler creates, the pod's status).
    on_dra = {"kubernetes.io/hostname": "rbac-dra"}
    await create_all(api, [make_node("rbac-dra")], [])
    await create_dra(api, make_device_class(NVIDIA_DRIVER),
                     make_device_class("rbac-gpu-extended", extended_resource="nvidia.com/gpu"),
                     make_gpu_slice("rbac-dra", gpus=2), make_claim_template("rbac-one-gpu"))
    await create_all(api, [], [
        make_pod("rbac-claimant", node_selector=on_dra,
                 resource_claims=[pod_claim("gpu", template="rbac-one-gpu")]),
        make_pod("rbac-extended", gpus=1, node_selector=on_dra)])
    await wait_for(lambda: node_of(cluster, "rbac-claimant") and node_of(cluster, "rbac-extended"),
                   what="the DRA pods bound")

    assert (await api.create_namespace("rbac-quotas")).status in (201, 409)
    # A Task: its pods made by the scheduler, its status written.
    assert (await api.create_task(Task("rbac-task").role("main", 1, cpu="100m").obj())).ok
    await wait_for(lambda: ((cluster.store.get("tasks", "default", "rbac-task") or {}).get("status") or {})
                   .get("phase") == "Running", what="the Task running")

    # Delegated quotas: a group's and a user's, their statuses written.
    api_path = "/apis/ai-scheduler.io/v1alpha1"
    assert (await api.request("PATCH", "/api/v1/namespaces/rbac-quotas", body={
        "metadata": {"labels": {"ai-scheduler.io/group": "rbac-group"}}},
        content_type="application/merge-patch+json")).ok
    assert (await api.request("POST", f"{api_path}/groupquotas", body={
        "apiVersion": "ai-scheduler.io/v1alpha1", "kind": "GroupQuota", "metadata": {"name": "rbac-group"},
        "spec": {"max": {"nvidia.com/gpu": 2}}})).ok
    assert (await api.request("POST", f"{api_path}/namespaces/rbac-quotas/userquotas", body={
        "apiVersion": "ai-scheduler.io/v1alpha1", "kind": "UserQuota", "metadata": {"name": "rbac-user"},
        "spec": {"group": "rbac-group", "max": {"nvidia.com/gpu": 1}}})).ok
    await wait_for(lambda: ((cluster.store.get("userquotas", "rbac-quotas", "rbac-user") or {}).get("status")
                            or {}).get("applied") is True, what="the UserQuota's status written")

    # A logical domain: its status written.
    assert (await api.request("POST", f"{api_path}/domains", body={
        "apiVersion": "ai-scheduler.io/v1alpha1", "kind": "Domain", "metadata": {"name": "rbac-domain"},
        "spec": {"nodes": ["rbac-dra"]}})).ok
    await wait_for(lambda: ((cluster.store.get("domains", None, "rbac-domain") or {}).get("status") or {})
                   .get("nodes") == ["rbac-dra"], what="the Domain's status written")

    calls = list(used(cluster.audit_events()))
    assert sorted({call for call, code in calls if code == 403}) == [], "refused: the ClusterRole lacks these"
    assert {call for call, _ in calls} - granted() == set(), "used but not granted"
    assert granted() - {call for call, _ in calls} - UNSEEN == set(), (
        "granted, never used: drop it"
    )
    assert granted() >= UNSEEN
