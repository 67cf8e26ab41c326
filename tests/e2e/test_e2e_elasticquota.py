"""ElasticQuota objects as group quotas, on both backends: the scheduler lists and watches them (an
optional CRD, shipped in deploy/crds/) and holds a namespace's pods to its quota's max, as it holds a
configured group's; a change of the quota takes effect without a restart."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from backends import Cluster, KubeCluster
from builders import make_node, make_pod
from conftest import StartScheduler, create_all, fast_config, wait_for

from ai_scheduler.api.kube import ELASTICQUOTAS, KubeClient
from e2e.test_e2e_scheduling import pod_condition

NAMESPACE = "eq-team"


def node_of(cluster: Cluster, name: str) -> str | None:
    found = cluster.store.get("pods", NAMESPACE, name)
    return None if found is None else found["spec"].get("nodeName")


@pytest.fixture
async def quota_api(cluster: Cluster, api: KubeClient) -> AsyncIterator[KubeClient]:
    """The admin's client, once the ElasticQuota CRD serves (real backend) and the namespace exists;
    the test's ElasticQuotas are deleted afterwards."""
    if isinstance(cluster, KubeCluster):
        await asyncio.to_thread(cluster.plane.wait_crd_established, "elasticquotas.scheduling.x-k8s.io")
    assert (await api.create_namespace(NAMESPACE)).status in (201, 409)
    yield api
    if isinstance(cluster, KubeCluster):
        path = f"/apis/{ELASTICQUOTAS[0]}/{ELASTICQUOTAS[1]}/namespaces/{NAMESPACE}/{ELASTICQUOTAS[2]}"
        await asyncio.to_thread(cluster.plane.request, "DELETE", path)


async def put_quota(api: KubeClient, gpus: int, *, replace: bool = False) -> None:
    body: dict[str, Any] = {
        "apiVersion": f"{ELASTICQUOTAS[0]}/{ELASTICQUOTAS[1]}", "kind": "ElasticQuota",
        "metadata": {"name": "quota", "namespace": NAMESPACE},
        "spec": {"min": {"nvidia.com/gpu": 2}, "max": {"nvidia.com/gpu": gpus}},
    }
    if replace:
        response = await api.custom.patch_namespaced_custom_object(
            ELASTICQUOTAS[0], ELASTICQUOTAS[1], NAMESPACE, ELASTICQUOTAS[2], "quota",
            {"spec": {"max": {"nvidia.com/gpu": gpus}}}, _preload_content=False,
            _content_type="application/merge-patch+json")
        assert response.status == 200, await response.text()
        return
    response = await api.custom.create_namespaced_custom_object(
        ELASTICQUOTAS[0], ELASTICQUOTAS[1], NAMESPACE, ELASTICQUOTAS[2], body, _preload_content=False)
    assert response.status == 201, await response.text()


async def test_an_elastic_quota_holds_its_namespace_to_its_max_and_follows_changes(
    cluster: Cluster, quota_api: KubeClient, start_scheduler: StartScheduler
) -> None:
    api = quota_api
    await put_quota(api, 8)
    running = await start_scheduler(fast_config())
    await wait_for(lambda: running.log_lines("elasticquotas.applied"), what="the quota read")
    # 16 GPUs on the node: only the quota holds the second pod back.
    await create_all(api, [make_node("dgx-0", gpus=16)],
                     [make_pod("first", namespace=NAMESPACE, gpus=6, cpu="1", memory=None)])
    await wait_for(lambda: node_of(cluster, "first"), what="the first pod bound")
    await create_all(api, [], [make_pod("second", namespace=NAMESPACE, gpus=4, cpu="1", memory=None)])
    reason = "exceeds quota of group eq-team/quota: nvidia.com/gpu 6/8"
    await wait_for(lambda: reason in pod_condition(cluster, "second", NAMESPACE).get("message", ""),
                   what="the second pod held back by the quota")
    assert node_of(cluster, "second") is None
    # A pod of another namespace is not held by eq-team's quota.
    await create_all(api, [], [make_pod("elsewhere", gpus=8, cpu="1", memory=None)])
    await wait_for(lambda: (cluster.store.get("pods", "default", "elsewhere") or {"spec": {}})["spec"]
                   .get("nodeName"), what="the other namespace's pod bound")
    # Room made on the node, and the quota raised to 12: the second pod fits.
    assert (await api.delete_pod("default", "elsewhere", grace_period_seconds=0)).ok
    await put_quota(api, 12, replace=True)
    await wait_for(lambda: node_of(cluster, "second"), what="the second pod bound once the quota grew")
