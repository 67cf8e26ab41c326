"""Native gangs end to end: pods with `spec.schedulingGroup` naming a Kubernetes PodGroup
(`scheduling.k8s.io/v1beta1`, GenericWorkload), on both backends; on the real one also the PodGroup
that the built-in Job controller makes for a Job that asks for a gang (WorkloadWithJob)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from backends import Cluster
from builders import NativePodGroup, Pod, gpu_nodes, make_node, make_pod
from conftest import StartScheduler, create_all, wait_for
from kubernetes_asyncio import client

from ai_scheduler.api.kube import KubeClient
from e2e.test_e2e_gangs import bound_count
from e2e.test_e2e_scheduling import assert_not_overcommitted, pod_condition

REFUSED = "Unschedulable"
NATIVE = "podgroups.scheduling.k8s.io"  # the store's name for Kubernetes PodGroups (tests/backends.py)


async def create_podgroup(api: KubeClient, podgroup: dict[str, Any]) -> None:
    response = await api.custom.create_namespaced_custom_object(
        "scheduling.k8s.io", "v1beta1", podgroup["metadata"]["namespace"], "podgroups", podgroup,
        _preload_content=False,
    )
    assert response.status == 201, await response.text()


def native_member(group: str, i: int, *, gpus: int = 8) -> dict[str, Any]:
    return Pod(f"{group}-{i}", gpus=gpus, cpu="1", memory="1Gi").scheduling_group(group).obj()


def told(cluster: Cluster, group: str, count: int, prefix: str) -> bool:
    """Whether members 0..count-1 of `group` all have a PodScheduled message starting with `prefix`."""
    messages = [pod_condition(cluster, f"{group}-{i}").get("message", "") for i in range(count)]
    return all(message.startswith(prefix) for message in messages)


def initially_scheduled(cluster: Cluster, name: str) -> dict[str, Any]:
    podgroup = cluster.store.get(NATIVE, "default", name) or {}
    conditions = (podgroup.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == "PodGroupInitiallyScheduled"), {})


async def test_a_native_gang_of_four_on_three_free_slots_binds_nothing_then_all_when_a_node_joins(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    await start_scheduler()
    await create_podgroup(api, NativePodGroup("ranks", 4).obj())
    await create_all(api, gpu_nodes(3), [native_member("ranks", i) for i in range(4)])
    # kube-scheduler's words (measured on v1.37.2: "pod group is unschedulable, minCount (4) cannot be
    # satisfied: 3 scheduled, 0 remaining"), then why, in ours.
    kube = "minCount (4) cannot be satisfied: 3 scheduled, 0 remaining ("
    whole = f"pod group is unschedulable, {kube}"
    await wait_for(
        lambda: told(cluster, "ranks", 4, whole),
        what="every member told the whole gang does not fit",
    )
    message = pod_condition(cluster, "ranks-0")["message"]
    assert "gang default/PodGroup/ranks needs 4 pods placed together and they do not all fit: " in message
    assert "Insufficient nvidia.com/gpu" in message
    condition = await wait_for(
        lambda: initially_scheduled(cluster, "ranks").get("reason") == "Unschedulable"
        and initially_scheduled(cluster, "ranks"),
        what="the PodGroup's PodGroupInitiallyScheduled condition False, Unschedulable",
    )
    assert condition["status"] == "False" and condition["message"].startswith(kube), "as kube-scheduler's"
    await asyncio.sleep(0.3)
    assert bound_count(cluster, "ranks") == 0, "no member of a native gang that does not fit whole is bound"

    assert (await api.create_node(gpu_nodes(1, prefix="late")[0])).ok
    await wait_for(lambda: bound_count(cluster, "ranks") == 4, what="all four bound once a node joins")
    assert_not_overcommitted(cluster)
    condition = await wait_for(
        lambda: (condition := initially_scheduled(cluster, "ranks")).get("status") == "True" and condition,
        what="PodGroupInitiallyScheduled True",
    )
    assert condition["reason"] == "Scheduled"
    podgroup = cluster.store.get(NATIVE, "default", "ranks")
    assert podgroup is not None
    # 0 (a generation the API server does not keep for this kind) is left out, as omitempty does
    assert condition.get("observedGeneration", 0) == podgroup["metadata"].get("generation", 0)


async def test_b_basic_policy_pods_are_placed_one_by_one(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    await start_scheduler()
    await create_podgroup(api, NativePodGroup("serving", None).obj())
    await create_all(api, gpu_nodes(3), [native_member("serving", i) for i in range(4)])
    await wait_for(lambda: bound_count(cluster, "serving") == 3, what="three of four bound, one by one")
    unplaced = await wait_for(
        lambda: [i for i in range(4) if pod_condition(cluster, f"serving-{i}").get("reason") == REFUSED],
        what="the fourth told it does not fit",
    )
    assert len(unplaced) == 1
    message = pod_condition(cluster, f"serving-{unplaced[0]}")["message"]
    assert "gang" not in message and "Insufficient nvidia.com/gpu" in message
    await wait_for(
        lambda: initially_scheduled(cluster, "serving").get("status") == "True",
        what="a basic group is scheduled once a pod of it is",
    )


async def test_b2_a_basic_group_none_of_whose_pods_fits_says_why_on_its_podgroup(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    await start_scheduler()
    await create_podgroup(api, NativePodGroup("huge", None).obj())
    await create_all(api, gpu_nodes(1), [native_member("huge", i, gpus=16) for i in range(2)])
    condition = await wait_for(
        lambda: (condition := initially_scheduled(cluster, "huge")).get("reason") == REFUSED and condition,
        what="the basic group's condition False, Unschedulable",
    )
    assert condition["status"] == "False" and "Insufficient nvidia.com/gpu" in condition["message"]


async def test_c_a_pod_naming_a_missing_podgroup_waits_with_kubes_reason_until_it_appears(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    await start_scheduler()
    await create_all(api, gpu_nodes(2), [native_member("later", i) for i in range(2)])
    expected = 'waiting for pods\'s pod group "later" to appear in scheduling queue'
    await wait_for(
        lambda: told(cluster, "later", 2, expected),
        what="both pods told their PodGroup does not exist, in kube-scheduler's words",
    )
    assert all(pod_condition(cluster, f"later-{i}")["reason"] == "Unschedulable" for i in range(2))
    assert bound_count(cluster, "later") == 0
    await create_podgroup(api, NativePodGroup("later", 2).obj())
    await wait_for(lambda: bound_count(cluster, "later") == 2, what="both bound once the PodGroup exists")


async def test_d_a_gang_pod_short_of_its_quorum_waits_with_kubes_words(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    await start_scheduler()
    await create_podgroup(api, NativePodGroup("trio", 3).obj())
    await create_all(api, gpu_nodes(3), [native_member("trio", i) for i in range(2)])
    words = "waiting for minCount pods from a gang to appear in scheduling queue"
    await wait_for(
        lambda: told(cluster, "trio", 2, words),
        what="two of three told the gang is incomplete",
    )
    await wait_for(
        lambda: any("has 2 of 3" in pod_condition(cluster, f"trio-{i}")["message"] for i in range(2)),
        what="the latest attempt counted both members",
    )
    assert bound_count(cluster, "trio") == 0
    await create_all(api, [], [native_member("trio", 2)])
    await wait_for(lambda: bound_count(cluster, "trio") == 3, what="the third member completes the gang")


def indexed_gang_job(name: str, size: int) -> dict[str, Any]:
    """An indexed Job that asks the Job controller for a gang (spec.scheduling, WorkloadWithJob)."""
    pod = make_pod("unused", gpus=8, cpu="1", memory="1Gi")
    template = {"metadata": {}, "spec": {**pod["spec"], "restartPolicy": "Never"}}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "completionMode": "Indexed",
            "parallelism": size,
            "completions": size,
            "scheduling": {"schedulingPolicy": {"gang": {}}},
            "template": template,
        },
    }


@pytest.mark.backend("kube", reason="only the real control plane runs the built-in Job controller")
async def test_e_the_job_controllers_podgroup_makes_an_indexed_job_all_or_nothing(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    await start_scheduler()
    await create_all(api, gpu_nodes(3), [])
    batch: Any = client.BatchV1Api(api.api_client)  # raw mode, as in ai_scheduler.api
    job = indexed_gang_job("ranks", 4)
    response = await batch.create_namespaced_job("default", job, _preload_content=False)
    assert response.status == 201, await response.text()

    def job_pods() -> list[dict[str, Any]]:
        return [
            p for p in cluster.store.list("pods", "default")
            if p["metadata"].get("labels", {}).get("batch.kubernetes.io/job-name") == "ranks"
        ]

    await wait_for(lambda: len(job_pods()) == 4, timeout=60, what="the Job's four pods")
    pods = job_pods()
    groups = {(p["spec"].get("schedulingGroup") or {}).get("podGroupName") for p in pods}
    assert len(groups) == 1 and None not in groups, "the Job controller put every pod in one PodGroup"
    (group,) = groups
    assert isinstance(group, str)
    podgroup = cluster.store.get(NATIVE, "default", group)
    assert podgroup is not None
    policy = podgroup["spec"]["schedulingPolicy"]
    assert policy == {"gang": {"minCount": 4}}, "minCount defaults to parallelism"
    await wait_for(
        lambda: initially_scheduled(cluster, group).get("reason") == "Unschedulable",
        timeout=30, what="the gang reported unschedulable on its PodGroup",
    )
    assert not [p for p in job_pods() if p["spec"].get("nodeName")], "no pod of the Job bound while 3 fit"
    assert (await api.create_node(make_node("late-0", cpu="32", memory="128Gi", gpus=8))).ok
    await wait_for(
        lambda: sum(1 for p in job_pods() if p["spec"].get("nodeName")) == 4, timeout=30,
        what="all four bound once a node joins",
    )
    await wait_for(lambda: initially_scheduled(cluster, group).get("status") == "True", what="condition True")


@pytest.mark.backend("kube", reason="only the real control plane runs the built-in Job controller")
async def test_f_an_indexed_job_with_the_job_controllers_default_basic_podgroup_is_still_a_gang(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    """With WorkloadWithJob on, every Job gets a basic PodGroup unless it sets spec.scheduling: that default
    does not hide the gang the indexed Job implies (min(parallelism, completions), cache/pod_grouper.py)."""
    await start_scheduler()
    await create_all(api, gpu_nodes(3), [])
    job = indexed_gang_job("plain", 4)
    del job["spec"]["scheduling"]
    batch: Any = client.BatchV1Api(api.api_client)
    response = await batch.create_namespaced_job("default", job, _preload_content=False)
    assert response.status == 201, await response.text()

    def job_pods() -> list[dict[str, Any]]:
        return [
            p for p in cluster.store.list("pods", "default")
            if p["metadata"].get("labels", {}).get("batch.kubernetes.io/job-name") == "plain"
        ]

    await wait_for(lambda: len(job_pods()) == 4, timeout=60, what="the Job's four pods")
    group = (job_pods()[0]["spec"].get("schedulingGroup") or {}).get("podGroupName")
    assert group, "the Job controller gave the pods a PodGroup"
    podgroup = cluster.store.get(NATIVE, "default", group)
    assert podgroup is not None and podgroup["spec"]["schedulingPolicy"] == {"basic": {}}
    whole = "gang default/Job/plain needs 4 pods placed together and they do not all fit: "
    await wait_for(
        lambda: all(pod_condition(cluster, p["metadata"]["name"]).get("message", "").startswith(whole)
                    for p in job_pods()),
        timeout=30, what="every pod of the Job told the whole gang does not fit",
    )
    assert not [p for p in job_pods() if p["spec"].get("nodeName")], "no pod of the Job bound while 3 fit"
    assert (await api.create_node(make_node("late-0", cpu="32", memory="128Gi", gpus=8))).ok
    await wait_for(
        lambda: sum(1 for p in job_pods() if p["spec"].get("nodeName")) == 4, timeout=30,
        what="all four bound once a node joins",
    )
