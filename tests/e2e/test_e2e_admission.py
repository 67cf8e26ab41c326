"""Quota at submission: the ValidatingAdmissionPolicy that `ai-scheduler admission-policy` generates, on
a real API server.

The policy (ai_scheduler/cache/admission_policy.py) is applied with kubectl as an administrator would, for a
config whose group `vision` may use at most 8 GPUs, 4 cores and 8Gi. A pod of that group asking 16 GPUs
is refused at creation with the quota named; a pod within the max is admitted and scheduled; a pod of
another scheduler, or of a namespace the config does not map, is admitted whatever it asks. A table of
dry-run creations then checks the rest of what the policy computes, as the scheduler's quota code does:
several containers, init containers beside sidecars, pod-level requests, gangs by their min-available,
users named by a trusted label, queues, managed GPUs.

Real backend only: the simulated API server does not evaluate ValidatingAdmissionPolicies (it would
need a CEL evaluator with Kubernetes' quantity, optional and list libraries), and the check is the API
server's own, not the scheduler's.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from backends import Cluster, KubeCluster
from builders import Pod, make_node
from conftest import StartScheduler, create_all, wait_for

from ai_scheduler.api.kube import KubeClient
from ai_scheduler.cache.admission_policy import POLICY_NAME, admission_policy, render
from ai_scheduler.config import Config, parse_config
from ai_scheduler.sim.controlplane import ControlPlane

pytestmark = pytest.mark.backend(
    "kube",
    reason="the simulated API server does not evaluate ValidatingAdmissionPolicies (CEL); "
    "refusing at creation is the real API server's own check",
)

NAMESPACE = "quota-vision"
OTHER = "quota-elsewhere"
ELASTIC = "quota-elastic"  # mapped by no config: its ElasticQuota holds its pods
QUOTAS = "/apis/scheduling.x-k8s.io/v1alpha1"
REFUSED = "exceeds quota of group vision: nvidia.com/gpu 16/8 (requested/max): it can never be scheduled"


def quota_config() -> Config:
    return parse_config({
        "server": {"port": 0, "bindAddress": "127.0.0.1"},
        "scheduling": {"initialBackoffSeconds": 0.05, "maxBackoffSeconds": 0.2},
        "queues": [{"name": "small", "quota": {"nvidia.com/gpu": 2}}],
        "groups": {
            "vision": {"max": {"nvidia.com/gpu": 8, "cpu": "4", "memory": "8Gi",
                               "ai-scheduler.io/gpu-count": 2, "ai-scheduler.io/gpu-fraction": "0.5"}},
            "nlp": {},
        },
        "users": {"alice": {"group": "vision"}, "carol": {"group": "nlp", "max": {"cpu": "1"}}},
        "namespaces": {NAMESPACE: {"user": "alice", "trustUserLabel": True}},
    })


def quota_pod(name: str, *, namespace: str = NAMESPACE, gpus: int = 0, cpu: str | None = None,
              memory: str | None = None, **extra: Any) -> dict[str, Any]:
    return Pod(name, namespace=namespace, gpus=gpus, cpu=cpu, memory=memory, **extra).obj()


def dry_run(plane: ControlPlane, body: dict[str, Any]) -> tuple[int, str]:
    """Create a pod in dry-run: (HTTP status, message); nothing is stored."""
    namespace = body["metadata"]["namespace"]
    status, answer = plane.request("POST", f"/api/v1/namespaces/{namespace}/pods?dryRun=All", body)
    return status, str(answer.get("message", ""))


@pytest.fixture
async def policy(cluster: Cluster, tmp_path: Path) -> AsyncIterator[ControlPlane]:
    """The generated policy, applied with kubectl and in force (type checking and the policy's informer
    are asynchronous: a probe pod is created in dry-run until it is refused); removed afterwards."""
    assert isinstance(cluster, KubeCluster)
    plane = cluster.plane
    for namespace in (NAMESPACE, OTHER, ELASTIC):
        body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
        status, answer = await asyncio.to_thread(plane.request, "POST", "/api/v1/namespaces", body)
        assert status in (201, 409), answer
    # The second policy's params are ElasticQuotas: their CRD serves first.
    await asyncio.to_thread(plane.wait_crd_established, "elasticquotas.scheduling.x-k8s.io")
    manifest = tmp_path / "admission-policy.yaml"
    documents = admission_policy(quota_config())
    manifest.write_text(render(documents, "the test's config"))
    await asyncio.to_thread(plane.kubectl, "apply", "-f", str(manifest))
    try:
        probe = quota_pod("probe", gpus=16)
        for _ in range(300):
            status, _ = await asyncio.to_thread(dry_run, plane, probe)
            if status == 403:
                break
            assert status == 201, status
            await asyncio.sleep(0.1)
        else:
            raise AssertionError("the admission policy never came into force")
        yield plane
    finally:
        for doc in reversed(documents):
            await asyncio.to_thread(plane.kubectl, "delete", doc["kind"].lower(), doc["metadata"]["name"],
                                    "--ignore-not-found")
        for namespace in (NAMESPACE, ELASTIC):
            await asyncio.to_thread(plane.request, "DELETE", f"{QUOTAS}/namespaces/{namespace}/elasticquotas")


async def test_a_pod_that_can_never_fit_its_quota_is_refused_at_creation_with_the_reason(
    cluster: Cluster, api: KubeClient, policy: ControlPlane, start_scheduler: StartScheduler
) -> None:
    # A node where 16 GPUs would fit: only the quota stands in the way.
    running = await start_scheduler(quota_config())
    await create_all(api, [make_node("dgx-0", gpus=16)], [])
    refused = await api.create_pod(quota_pod("sixteen", gpus=16))
    assert refused.status == 403, refused.body
    assert REFUSED in refused.message, refused.message
    assert f"ValidatingAdmissionPolicy '{POLICY_NAME}'" in refused.message
    # Within the max: admitted, and scheduled. Another scheduler's pod, or a pod of a namespace the config
    # maps to no one, is admitted whatever it asks.
    assert (await api.create_pod(quota_pod("eight", gpus=8))).status == 201
    assert (await api.create_pod(quota_pod("theirs", gpus=16,
                                           scheduler_name="default-scheduler"))).status == 201
    assert (await api.create_pod(quota_pod("unmapped", namespace=OTHER, gpus=16))).status == 201
    await wait_for(lambda: node_of(cluster, "eight"), what="the admitted pod bound")
    await cluster.synced()
    assert cluster.store.get("pods", NAMESPACE, "sixteen") is None
    assert running.scheduler is not None


def node_of(cluster: Cluster, name: str) -> str | None:
    found = cluster.store.get("pods", NAMESPACE, name)
    return None if found is None else found["spec"].get("nodeName")


def gang(size: int) -> dict[str, str]:
    return {"pod-group.scheduling.sigs.k8s.io/name": "job", "pod-group.scheduling.sigs.k8s.io/min-available":
            str(size)}


def init(name: str, cpu: str, sidecar: bool = False) -> dict[str, Any]:
    container: dict[str, Any] = {"name": name, "image": "busybox", "resources": {"requests": {"cpu": cpu}}}
    if sidecar:
        container["restartPolicy"] = "Always"
    return container


def two_containers(first: int, second: int) -> dict[str, Any]:
    body = quota_pod("two", gpus=first)
    extra = {"name": "second", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": str(second)}}}
    body["spec"]["containers"].append(extra)
    return body


def pod_level(cpu: str) -> dict[str, Any]:
    body = quota_pod("pod-level", cpu="1")
    body["spec"]["resources"] = {"requests": {"cpu": cpu}}
    return body


# (what, pod, the reason it is refused for, or None: admitted)
CASES: list[tuple[str, dict[str, Any], str | None]] = [
    ("two containers add up", two_containers(5, 4), "nvidia.com/gpu 9/8 (requested/max)"),
    ("two containers within", two_containers(4, 4), None),
    ("cpu", quota_pod("cpu", cpu="4500m"), "cpu 4.5/4 (requested/max)"),
    ("cpu at the max", quota_pod("cpu", cpu="4"), None),
    ("memory in Gi", quota_pod("memory", memory="9Gi"), "memory 9Gi/8Gi (requested/max)"),
    ("an init container above the containers",
     quota_pod("init", cpu="1", init_containers=[init("setup", "5")]), "cpu 5/4 (requested/max)"),
    ("an init container beside an earlier sidecar",
     quota_pod("init", cpu="1", init_containers=[init("proxy", "1", True), init("setup", "3500m")]),
     "cpu 4.5/4 (requested/max)"),
    ("an init container before the sidecar: not beside it",
     quota_pod("init", cpu="1", init_containers=[init("setup", "3500m"), init("proxy", "1", True)]), None),
    ("pod-level requests replace the containers'", pod_level("5"), "cpu 5/4 (requested/max)"),
    ("a gang of 3 by its labels", quota_pod("member", gpus=4, labels=gang(3)),
     "nvidia.com/gpu 12/8 (gang of 3 pods, requested/max)"),
    ("a gang of 2 fits", quota_pod("member", gpus=4, labels=gang(2)), None),
    ("a Koordinator gang", quota_pod("member", gpus=4, annotations={
        "gang.scheduling.koordinator.sh/name": "job", "gang.scheduling.koordinator.sh/min-available": "3"}),
     "nvidia.com/gpu 12/8 (gang of 3 pods, requested/max)"),
    ("a PodGroup's member: its minMember is not known", quota_pod("member", gpus=4, labels={
        "scheduling.x-k8s.io/pod-group": "job"}), None),
    ("the queue's quota", quota_pod("queued", gpus=3, labels={"ai-scheduler.io/queue": "small"}),
     "exceeds quota of queue small: nvidia.com/gpu 3/2 (requested/max)"),
    ("a trusted user label: carol's own max",
     quota_pod("carol", cpu="2", labels={"ai-scheduler.io/user": "carol"}),
     "exceeds quota of user carol: cpu 2/1 (requested/max)"),
    ("a user label naming no user: the namespace's user",
     quota_pod("nobody", cpu="2", labels={"ai-scheduler.io/user": "nobody"}), None),
    ("managed GPUs by count", quota_pod("managed", annotations={"ai-scheduler.io/gpu-count": "3"}),
     "ai-scheduler.io/gpu-count 3/2 (requested/max)"),
    ("a GPU fraction", quota_pod("share", annotations={"ai-scheduler.io/gpu-fraction": "0.75"}),
     "ai-scheduler.io/gpu-fraction 0.75/0.5 (requested/max)"),
    ("a GPU fraction the scheduler rounds to the max",
     quota_pod("share", annotations={"ai-scheduler.io/gpu-fraction": "0.501"}), None),
    ("two managed-GPU annotations: the scheduler reports the error",
     quota_pod("both",
               annotations={"ai-scheduler.io/gpu-count": "3", "ai-scheduler.io/gpu-fraction": "0.75"}),
     None),
]


async def test_the_policy_counts_a_pod_as_the_scheduler_does(cluster: Cluster, policy: ControlPlane) -> None:
    wrong = []
    for what, body, reason in CASES:
        status, message = await asyncio.to_thread(dry_run, policy, body)
        if reason is None and status != 201:
            wrong.append(f"{what}: refused ({status}): {message}")
        elif reason is not None and (status != 403 or reason not in message):
            wrong.append(f"{what}: expected {reason!r}, got {status}: {message}")
    assert not wrong, "\n".join(wrong)


def elastic_quota(namespace: str, gpus: int) -> dict[str, Any]:
    return {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "ElasticQuota",
            "metadata": {"name": "quota", "namespace": namespace},
            "spec": {"max": {"nvidia.com/gpu": gpus, "memory": "8Gi"}}}


async def test_an_elastic_quota_refuses_the_pods_of_its_namespace_the_config_does_not_map(
    cluster: Cluster, policy: ControlPlane
) -> None:
    # quota-vision's first: once quota-elastic's is in force, so is it (one informer, in order).
    for namespace, gpus in ((NAMESPACE, 1), (ELASTIC, 8)):
        path = f"{QUOTAS}/namespaces/{namespace}/elasticquotas"
        status, body = await asyncio.to_thread(policy.request, "POST", path, elastic_quota(namespace, gpus))
        assert status == 201, body
    # The policy reads its params from an informer: poll until the quota is in force.
    reason = "exceeds quota of group quota-elastic/quota: nvidia.com/gpu 12/8 (requested/max)"
    status, message = 0, ""
    for _ in range(300):
        status, message = await asyncio.to_thread(dry_run, policy,
                                                  quota_pod("twelve", namespace=ELASTIC, gpus=12))
        if status != 201:
            break
        await asyncio.sleep(0.1)
    assert status == 403 and reason in message, (status, message)
    # Memory shown as the quota writes it; a gang by its size; within the max, admitted.
    status, message = await asyncio.to_thread(dry_run, policy,
                                              quota_pod("big", namespace=ELASTIC, memory="9Gi"))
    assert status == 403 and "memory 9Gi/8Gi (requested/max)" in message, message
    member = quota_pod("member", namespace=ELASTIC, gpus=4, labels=gang(3))
    status, message = await asyncio.to_thread(dry_run, policy, member)
    assert status == 403 and "nvidia.com/gpu 12/8 (gang of 3 pods, requested/max)" in message, message
    assert (await asyncio.to_thread(dry_run, policy, quota_pod("eight", namespace=ELASTIC, gpus=8)))[0] == 201
    # The config maps quota-vision: its own max (8) counts there, not the namespace's ElasticQuota (1).
    assert (await asyncio.to_thread(dry_run, policy, quota_pod("eight", gpus=8)))[0] == 201
