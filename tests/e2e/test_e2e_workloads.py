"""Gangs that workloads imply, with no label, end to end on both backends.

Each test submits a workload whose pods must start together to a cluster with
room for only part of it: no pod may bind, and every pod must bind once a node
joins. No test adds a gang label: the scheduler finds the group and its minimum
from the pods' owners (cache/pod_grouper.py). The pods come to exist as they
do on a cluster:

- RayCluster: on the real backend the real KubeRay operator (built from its
  Go module by `hack/kube/build.sh kuberay`, started by the first test that
  needs it) makes the head and worker pods from the RayCluster's templates; on
  the simulated one the test makes them as the operator does (`ray_pods`), and
  the real backend checks that the operator's pods carry what `ray_pods` gives
  them (labels, annotations, owner), so that the two stay the same.
- JobSet: the test makes the JobSet and its Jobs as the JobSet controller does
  (its labels and annotations on each Job and its pod template, the JobSet as
  the Jobs' controller); indexed Job: the test makes the Job. On the real
  backend kube-controller-manager's Job controller makes the pods of both; on
  the simulated one the test makes them as it does (`job_pods`), checked the
  same way against the real controller's pods.
- LeaderWorkerSet: the leader StatefulSet, the group's worker StatefulSet and
  the pods as the LeaderWorkerSet controller, the StatefulSet controller and
  LWS's pod webhook make them (no StatefulSet controller runs on either
  backend).
- PyTorchJob: the pods as the Kubeflow training-operator makes them.

The Go module proxy does not serve the JobSet, LeaderWorkerSet and Kubeflow
modules, so their controllers do not run here; on the real backend their CRDs
are installed from tests/data (the KubeRay operator installs its own).
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Callable
from typing import Any

import yaml
from backends import Cluster, KubeCluster
from builders import Node, owner_ref
from conftest import StartScheduler, create_all, wait_for
from kubernetes_asyncio import client
from paths import DATA

from ai_scheduler.api.kube import KubeClient
from ai_scheduler.sim.controlplane import KUBERAY_NAMESPACE
from e2e.test_e2e_scheduling import assert_not_overcommitted, pod_condition

GPU = "nvidia.com/gpu"
NS = "default"
WORKLOAD_CRDS = ("crd_jobsets.yaml", "crd_leaderworkersets.yaml", "crd_pytorchjobs.yaml")
KUBERAY_USER = f"system:serviceaccount:{KUBERAY_NAMESPACE}:kuberay-operator"
INFERENCE_OFF = {"ai-scheduler.io/gang-inference": "off"}
# A pod's wait for the real controllers (the Job controller creates pods in growing batches; the KubeRay
# operator starts once per session): a deadline, not a timing.
CONTROLLER_DEADLINE = 90.0


# --------------------------------------------------------------------------- cluster and objects
def gpu_node(name: str, gpus: int) -> dict[str, Any]:
    return Node(name, cpu="32", memory="128Gi", gpus=gpus).obj()


def container(name: str, gpus: int) -> dict[str, Any]:
    limits: dict[str, str] = {"cpu": "1", "memory": "1Gi"}
    if gpus:
        limits[GPU] = str(gpus)
    return {"name": name, "image": "busybox", "resources": {"requests": {"cpu": "1", "memory": "1Gi"},
                                                            "limits": limits}}


def pod_template(gpus: int, *, labels: dict[str, str] | None = None,
                 annotations: dict[str, str] | None = None, restart: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"schedulerName": "ai-scheduler", "containers": [container("main", gpus)]}
    if restart:
        spec["restartPolicy"] = restart
    return {"metadata": {"labels": dict(labels or {}), "annotations": dict(annotations or {})}, "spec": spec}


def controller_ref(owner: dict[str, Any]) -> dict[str, Any]:
    """The controller ownerReference a controller puts on what it makes (metav1.NewControllerRef)."""
    meta = owner["metadata"]
    return owner_ref(owner["apiVersion"], owner["kind"], meta["name"], meta["uid"], controller=True,
                     block_owner_deletion=True)


async def body(response: Any) -> dict[str, Any]:
    text = await response.text()
    assert response.status == 201, text
    created: dict[str, Any] = yaml.safe_load(text)
    return created


async def create_custom(api: KubeClient, obj: dict[str, Any], plural: str) -> dict[str, Any]:
    group, version = obj["apiVersion"].split("/")
    return await body(await api.custom.create_namespaced_custom_object(
        group, version, obj["metadata"].get("namespace", NS), plural, obj, _preload_content=False))


async def create_job(api: KubeClient, job: dict[str, Any]) -> dict[str, Any]:
    batch: Any = client.BatchV1Api(api.api_client)  # raw mode, as in ai_scheduler.api
    return await body(await batch.create_namespaced_job(NS, job, _preload_content=False))


async def create_stateful_set(api: KubeClient, stateful_set: dict[str, Any]) -> dict[str, Any]:
    apps: Any = client.AppsV1Api(api.api_client)
    return await body(await apps.create_namespaced_stateful_set(NS, stateful_set, _preload_content=False))


async def install_workload_crds(cluster: Cluster) -> None:
    """On the real backend, the JobSet, LeaderWorkerSet and PyTorchJob CRDs (tests/data), before the
    scheduler starts; the simulated server serves these kinds already."""
    if not isinstance(cluster, KubeCluster):
        return
    plane = cluster.plane

    def install() -> None:
        plane.kubectl("apply", *(arg for crd in WORKLOAD_CRDS for arg in ("-f", str(DATA / crd))))
        for crd in WORKLOAD_CRDS:
            plane.wait_crd_established(yaml.safe_load((DATA / crd).read_text())["metadata"]["name"])

    await asyncio.to_thread(install)


def pods_where(cluster: Cluster, selected: Callable[[dict[str, Any]], bool]) -> list[dict[str, Any]]:
    return [p for p in cluster.store.list("pods", NS) if selected(p)]


def labelled(key: str, value: str) -> Callable[[dict[str, Any]], bool]:
    return lambda pod: (pod["metadata"].get("labels") or {}).get(key) == value


async def all_or_nothing(
    cluster: Cluster, api: KubeClient, selected: Callable[[dict[str, Any]], bool], size: int, gang: str
) -> None:
    """The workload's `size` pods exist and none is bound while the cluster has room for only part of
    them: each says that its gang (`gang`, the key inference gives it) was tried whole and did not fit;
    once a node with room for the rest joins, all of them bind."""
    what = f"gang {gang}"
    await wait_for(lambda: len(pods_where(cluster, selected)) == size, timeout=CONTROLLER_DEADLINE,
                   what=f"the {size} pods of {what}")

    def messages() -> list[str]:
        return [pod_condition(cluster, p["metadata"]["name"]).get("message", "")
                for p in pods_where(cluster, selected)]

    def told() -> bool:
        # Not "has 3 of 4 required pods", which a member hears while the others are still being made.
        return all(what in message and "required pods" not in message for message in messages())

    try:
        await wait_for(told, timeout=30, what=f"every pod of {what} told that it does not fit whole")
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {messages()}") from None
    bound = [p["metadata"]["name"] for p in pods_where(cluster, selected) if p["spec"].get("nodeName")]
    assert not bound, f"{what}: {bound} bound while the cluster had room for only part of it"
    assert (await api.create_node(gpu_node("late-0", 8))).ok
    await wait_for(lambda: all(p["spec"].get("nodeName") for p in pods_where(cluster, selected)),
                   timeout=30, what=f"all of {what} bound once a node joins")
    assert len(pods_where(cluster, selected)) == size
    assert_not_overcommitted(cluster)


def same_shape(real: dict[str, Any], ours: dict[str, Any]) -> None:
    """A pod a real controller made and the one the simulated backend's test makes for it carry the same
    labels, annotations and controller owner."""
    for part in ("labels", "annotations"):
        got, want = real["metadata"].get(part) or {}, ours["metadata"].get(part) or {}
        assert set(got) == set(want), f"{part}: the controller set {sorted(got)}, the test {sorted(want)}"
        for key in got:
            assert got[key] == want[key], f"{part} {key}: the controller {got[key]!r}, the test {want[key]!r}"

    def owners(pod: dict[str, Any]) -> list[tuple[str, str, bool]]:
        refs = pod["metadata"].get("ownerReferences") or []
        return [(o["kind"], o["name"], o.get("controller")) for o in refs]

    assert owners(real) == owners(ours)


# --------------------------------------------------------------------------- the Job controller
def job_pods(job: dict[str, Any], indexes: range) -> list[dict[str, Any]]:
    """The pods kube-controller-manager's Job controller makes for an Indexed Job (pkg/controller/job):
    the template (with the labels API server defaulting adds to it: controller-uid and job-name, both
    spellings), the completion index as annotation, label, hostname and JOB_COMPLETION_INDEX, the Job as
    controller, the job-tracking finalizer, a generated name per index."""
    meta, spec = job["metadata"], job["spec"]
    name, uid = meta["name"], meta["uid"]
    template = spec["template"]
    pods = []
    for index in indexes:
        labels = {**(template["metadata"].get("labels") or {}), "batch.kubernetes.io/controller-uid": uid,
                  "batch.kubernetes.io/job-name": name, "controller-uid": uid, "job-name": name,
                  "batch.kubernetes.io/job-completion-index": str(index)}
        annotations = {**(template["metadata"].get("annotations") or {}),
                       "batch.kubernetes.io/job-completion-index": str(index)}
        pod_spec = yaml.safe_load(yaml.safe_dump(template["spec"]))
        pod_spec["hostname"] = f"{name}-{index}"
        env = {"name": "JOB_COMPLETION_INDEX", "valueFrom": {"fieldRef": {
            "fieldPath": "metadata.labels['batch.kubernetes.io/job-completion-index']"}}}
        for c in pod_spec["containers"]:
            c.setdefault("env", []).append(env)
        pods.append({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"generateName": f"{name}-{index}-", "namespace": NS, "labels": labels,
                         "annotations": annotations, "ownerReferences": [controller_ref(job)],
                         "finalizers": ["batch.kubernetes.io/job-tracking"]},
            "spec": pod_spec,
        })
    return pods


async def pods_of_jobs(
    cluster: Cluster, api: KubeClient, jobs: list[dict[str, Any]], selected: Callable[[dict[str, Any]], bool],
    size: int,
) -> None:
    """The Jobs' pods: made by the real Job controller on the real backend (and compared with what the
    simulated backend's test makes), made as it makes them on the simulated one."""
    ours = [pod for job in jobs for pod in job_pods(job, range(job_size(job)))]
    if isinstance(cluster, KubeCluster):
        await wait_for(lambda: len(pods_where(cluster, selected)) == size, timeout=CONTROLLER_DEADLINE,
                       what="the Job controller's pods")
        by_generate = {p["metadata"]["generateName"]: p for p in ours}
        for real in pods_where(cluster, selected):
            same_shape(real, by_generate[real["metadata"]["generateName"]])
        return
    await create_all(api, [], ours)


def job_size(job: dict[str, Any]) -> int:
    spec = job["spec"]
    return int(min(spec.get("parallelism", 1), spec.get("completions", spec.get("parallelism", 1))))


# --------------------------------------------------------------------------- tests
async def test_a_raycluster_made_by_the_kuberay_operator_is_all_or_nothing(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    """Head + a worker group of minReplicas 3 (1 GPU each) on a node with 2 GPUs: nothing binds (the head
    and two workers would fit); all four once a node joins."""
    if isinstance(cluster, KubeCluster):
        await asyncio.to_thread(cluster.plane.start_kuberay)
    await start_scheduler()
    await create_all(api, [gpu_node("gpu-0", 2)], [])
    ray = await create_custom(api, raycluster("rc", workers=3), "rayclusters")
    selected = labelled("ray.io/cluster", "rc")
    if isinstance(cluster, KubeCluster):
        await wait_for(lambda: len(pods_where(cluster, selected)) == 4, timeout=CONTROLLER_DEADLINE,
                       what="the operator's head and three workers")
        real = pods_where(cluster, selected)
        for kind in ("head", "worker"):
            made = next(p for p in real if p["metadata"]["labels"]["ray.io/node-type"] == kind)
            ours = next(p for p in ray_pods(ray) if p["metadata"]["labels"]["ray.io/node-type"] == kind)
            same_shape(made, ours)
            assert made["spec"]["schedulerName"] == "ai-scheduler", "the operator keeps the template's"
        # The audit log names no pod made from a generateName: count the operator's own creations.
        made_by_operator = [e for e in cluster.audit_events(KUBERAY_USER)
                            if e["verb"] == "create" and e["objectRef"].get("resource") == "pods"
                            and (e.get("responseStatus") or {}).get("code") == 201]
        assert len(made_by_operator) == 4, "the operator made the four pods, as its own ServiceAccount"
    else:
        await create_all(api, [], ray_pods(ray))
    await all_or_nothing(cluster, api, selected, 4, f"{NS}/RayCluster/rc")


async def test_b_a_jobset_of_two_replicated_jobs_is_all_or_nothing(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    """A JobSet (as Kubeflow Trainer's TrainJob makes them) of a driver Job (1 pod) and a workers Job (3
    pods), 1 GPU each, on a node with 3 GPUs: nothing binds; all four once a node joins."""
    await install_workload_crds(cluster)
    await start_scheduler()
    await create_all(api, [gpu_node("gpu-0", 3)], [])
    jobset = await create_custom(api, {
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": "train", "namespace": NS},
        "spec": {"replicatedJobs": [
            {"name": "driver", "replicas": 1, "template": {"spec": indexed_job_spec(1, pod_template(1))}},
            {"name": "workers", "replicas": 1, "template": {"spec": indexed_job_spec(3, pod_template(1))}},
        ]},
    }, "jobsets")
    jobs = [await create_job(api, jobset_job(jobset, rjob, 0)) for rjob in jobset["spec"]["replicatedJobs"]]
    selected = labelled("jobset.sigs.k8s.io/jobset-name", "train")
    await pods_of_jobs(cluster, api, jobs, selected, 4)
    await all_or_nothing(cluster, api, selected, 4, f"{NS}/JobSet/train")


async def test_c_a_leaderworkerset_group_is_all_or_nothing(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    """One LeaderWorkerSet group, a leader and 3 workers (size 4), 1 GPU each, on a node with 3 GPUs:
    nothing binds; all four once a node joins."""
    await install_workload_crds(cluster)
    await start_scheduler()
    await create_all(api, [gpu_node("gpu-0", 3)], [])
    lws = await create_custom(api, {
        "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
        "metadata": {"name": "llm", "namespace": NS},
        "spec": {"replicas": 1, "leaderWorkerTemplate": {
            "size": 4, "workerTemplate": pod_template(1)}},
    }, "leaderworkersets")
    await create_leaderworkerset_group(api, lws, 0)
    await all_or_nothing(cluster, api, labelled("leaderworkerset.sigs.k8s.io/name", "llm"), 4,
                         f"{NS}/LeaderWorkerSet/llm-0")


async def test_d_a_pytorchjob_master_and_workers_are_all_or_nothing(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    """A PyTorchJob of a master and 3 workers, 1 GPU each, on a node with 3 GPUs: nothing binds; all four
    once a node joins."""
    await install_workload_crds(cluster)
    await start_scheduler()
    await create_all(api, [gpu_node("gpu-0", 3)], [])
    job = await create_custom(api, pytorchjob("ddp", workers=3), "pytorchjobs")
    await create_all(api, [], pytorchjob_pods(job))
    selected = labelled("training.kubeflow.org/job-name", "ddp")
    await all_or_nothing(cluster, api, selected, 4, f"{NS}/PyTorchJob/ddp")


async def test_e_an_indexed_job_is_all_or_nothing(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    """An Indexed Job of parallelism 4, 1 GPU per pod, on a node with 3 GPUs: nothing binds; all four once
    a node joins. (On the real backend the Job controller also gives the Job a basic PodGroup, as v1.37
    does for every Job that asks for no gang: it does not hide the gang the Job implies.)"""
    await start_scheduler()
    await create_all(api, [gpu_node("gpu-0", 3)], [])
    job = await create_job(api, {"apiVersion": "batch/v1", "kind": "Job",
                                 "metadata": {"name": "shards", "namespace": NS},
                                 "spec": indexed_job_spec(4, pod_template(1))})
    selected = labelled("batch.kubernetes.io/job-name", "shards")
    await pods_of_jobs(cluster, api, [job], selected, 4)
    await all_or_nothing(cluster, api, selected, 4, f"{NS}/Job/shards")


async def test_f_a_workload_with_inference_off_is_placed_pod_by_pod(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    """The same PyTorchJob with `ai-scheduler.io/gang-inference: "off"` in its pod templates: its pods are
    placed alone, three of four on the node with 3 GPUs, the fourth told it does not fit."""
    await install_workload_crds(cluster)
    await start_scheduler()
    await create_all(api, [gpu_node("gpu-0", 3)], [])
    job = await create_custom(api, pytorchjob("solo", workers=3, annotations=INFERENCE_OFF), "pytorchjobs")
    await create_all(api, [], pytorchjob_pods(job))
    selected = labelled("training.kubeflow.org/job-name", "solo")
    await wait_for(lambda: sum(1 for p in pods_where(cluster, selected) if p["spec"].get("nodeName")) == 3,
                   what="three pods placed one by one")
    (left,) = [p["metadata"]["name"] for p in pods_where(cluster, selected) if not p["spec"].get("nodeName")]
    await wait_for(lambda: pod_condition(cluster, left).get("reason") == "Unschedulable", what="4th told")
    assert f"Insufficient {GPU}" in pod_condition(cluster, left)["message"]
    assert_not_overcommitted(cluster)


# --------------------------------------------------------------------------- KubeRay
def raycluster(name: str, *, workers: int) -> dict[str, Any]:
    """A RayCluster: a head without GPUs and one worker group of `workers` (minReplicas too), 1 GPU each."""
    def template(role: str, gpus: int) -> dict[str, Any]:
        return {"spec": {"schedulerName": "ai-scheduler", "containers": [container(f"ray-{role}", gpus)]}}

    return {
        "apiVersion": "ray.io/v1", "kind": "RayCluster",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "rayVersion": "2.46.0",
            "headGroupSpec": {"rayStartParams": {}, "template": template("head", 0)},
            "workerGroupSpecs": [{
                "groupName": "gpu", "replicas": workers, "minReplicas": workers, "maxReplicas": workers,
                "rayStartParams": {}, "template": template("worker", 1),
            }],
        },
    }


def ray_pods(ray: dict[str, Any]) -> list[dict[str, Any]]:
    """The pods the KubeRay operator (v1.5, controllers/ray/common/pod.go) makes for a RayCluster: the
    templates with its labels (labelPod), the head's annotation, the RayCluster as controller, a generated
    name per group; workers also get the init container that waits for the head (GCS)."""
    name = ray["metadata"]["name"]
    spec = ray["spec"]

    def ray_pod(node_type: str, group: str, template: dict[str, Any], prefix: str) -> dict[str, Any]:
        labels = {**((template.get("metadata") or {}).get("labels") or {}),
                  "ray.io/is-ray-node": "yes", "ray.io/cluster": name, "ray.io/node-type": node_type,
                  "ray.io/group": group, "ray.io/identifier": f"{name}-{node_type}",
                  "app.kubernetes.io/name": "kuberay", "app.kubernetes.io/created-by": "kuberay-operator"}
        annotations = dict((template.get("metadata") or {}).get("annotations") or {})
        pod_spec = yaml.safe_load(yaml.safe_dump(template["spec"]))
        if node_type == "head":
            annotations["ray.io/ft-enabled"] = "false"
        else:
            wait = container("wait-gcs-ready", 0)
            wait["resources"] = {part: {"cpu": "200m", "memory": "256Mi"} for part in ("requests", "limits")}
            pod_spec["initContainers"] = [*pod_spec.get("initContainers", []), wait]
        meta: dict[str, Any] = {"generateName": prefix, "namespace": NS, "labels": labels,
                                "ownerReferences": [controller_ref(ray)]}
        if annotations:
            meta["annotations"] = annotations
        return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": pod_spec}

    pods = [ray_pod("head", "headgroup", spec["headGroupSpec"]["template"], f"{name}-head-")]
    for group in spec["workerGroupSpecs"]:
        count = group.get("replicas", 0) * group.get("numOfHosts", 1)
        gname = group["groupName"]
        pods += [ray_pod("worker", gname, group["template"], f"{name}-{gname}-worker-") for _ in range(count)]
    return pods


# --------------------------------------------------------------------------- JobSet
def indexed_job_spec(size: int, template: dict[str, Any]) -> dict[str, Any]:
    template = yaml.safe_load(yaml.safe_dump(template))
    template["spec"]["restartPolicy"] = "Never"
    return {"completionMode": "Indexed", "parallelism": size, "completions": size, "backoffLimit": 0,
            "template": template}


def jobset_job(jobset: dict[str, Any], rjob: dict[str, Any], index: int) -> dict[str, Any]:
    """A Job of a replicated job as the JobSet controller makes it (pkg/controllers/jobset_controller.go,
    constructJob and labelAndAnnotateObject): named JOBSET-RJOB-INDEX, the JobSet's labels and the same
    annotations on the Job and on its pod template, the JobSet as controller."""
    name = jobset["metadata"]["name"]
    job_name = f"{name}-{rjob['name']}-{index}"
    replicas = sum(r.get("replicas", 1) for r in jobset["spec"]["replicatedJobs"])
    offset = 0
    for other in jobset["spec"]["replicatedJobs"]:
        if other["name"] == rjob["name"]:
            break
        offset += other.get("replicas", 1)
    keys = {
        "jobset.sigs.k8s.io/jobset-name": name,
        "jobset.sigs.k8s.io/jobset-uid": jobset["metadata"]["uid"],
        "jobset.sigs.k8s.io/replicatedjob-name": rjob["name"],
        "jobset.sigs.k8s.io/restart-attempt": "0",
        "jobset.sigs.k8s.io/replicatedjob-replicas": str(rjob.get("replicas", 1)),
        "jobset.sigs.k8s.io/global-replicas": str(replicas),
        "jobset.sigs.k8s.io/job-index": str(index),
        "jobset.sigs.k8s.io/job-key": secrets.token_hex(20),  # sha1 of NAMESPACE/JOB
        "jobset.sigs.k8s.io/job-global-index": str(offset + index),
    }
    spec = yaml.safe_load(yaml.safe_dump(rjob["template"]["spec"]))
    template = spec["template"]
    template.setdefault("metadata", {})
    template["metadata"]["labels"] = {**(template["metadata"].get("labels") or {}), **keys}
    template["metadata"]["annotations"] = {**(template["metadata"].get("annotations") or {}), **keys}
    spec["suspend"] = False
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": job_name, "namespace": NS, "labels": dict(keys), "annotations": dict(keys),
                         "ownerReferences": [controller_ref(jobset)]},
            "spec": spec}


# --------------------------------------------------------------------------- LeaderWorkerSet
async def create_leaderworkerset_group(api: KubeClient, lws: dict[str, Any], group: int) -> None:
    """One group of a LeaderWorkerSet as its controllers make it (sigs.k8s.io/lws): the leader StatefulSet
    NAME (owned by the LeaderWorkerSet) whose pod NAME-GROUP is the leader, then, once the leader exists,
    the worker StatefulSet NAME-GROUP (owned by the leader pod) with pods NAME-GROUP-1.. ; the labels and
    annotations the controllers put on the templates and LWS's pod webhook adds (group index, worker
    index, group key)."""
    name = lws["metadata"]["name"]
    size = lws["spec"]["leaderWorkerTemplate"]["size"]
    worker_template = lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]
    revision = secrets.token_hex(5)
    group_key = secrets.token_hex(20)  # sha1 of NAMESPACE/LEADER
    common = {"leaderworkerset.sigs.k8s.io/name": name,
              "leaderworkerset.sigs.k8s.io/template-revision-hash": revision}
    size_annotation = {"leaderworkerset.sigs.k8s.io/size": str(size)}

    def stateful_set(set_name: str, replicas: int, owner: dict[str, Any], labels: dict[str, str],
                     annotations: dict[str, str]) -> dict[str, Any]:
        template = yaml.safe_load(yaml.safe_dump(worker_template))
        template["metadata"] = {"labels": labels, "annotations": annotations}
        return {"apiVersion": "apps/v1", "kind": "StatefulSet",
                "metadata": {"name": set_name, "namespace": NS, "labels": dict(common),
                             "ownerReferences": [controller_ref(owner)]},
                "spec": {"replicas": replicas, "serviceName": name, "podManagementPolicy": "Parallel",
                         "selector": {"matchLabels": dict(labels)}, "template": template}}

    def lws_pod(
        owner: dict[str, Any], pod_name: str, template: dict[str, Any], extra: dict[str, str]
    ) -> dict[str, Any]:
        meta = template["metadata"]
        return {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": pod_name, "namespace": NS, "labels": {**meta["labels"], **extra},
                             "annotations": dict(meta["annotations"]),
                             "ownerReferences": [controller_ref(owner)]},
                "spec": {**template["spec"], "hostname": pod_name, "subdomain": name}}

    leader_labels = {**common, "leaderworkerset.sigs.k8s.io/worker-index": "0"}
    leaders = await create_stateful_set(api, stateful_set(name, 1, lws, leader_labels, size_annotation))
    leader_name = f"{name}-{group}"
    group_labels = {"leaderworkerset.sigs.k8s.io/group-index": str(group),
                    "leaderworkerset.sigs.k8s.io/group-key": group_key}
    leader = lws_pod(leaders, leader_name, leaders["spec"]["template"], group_labels)
    leader_result = await api.create_pod(leader)
    assert leader_result.ok, leader_result.message
    workers = await create_stateful_set(api, stateful_set(
        leader_name, size - 1, leader_result.body, {**common, **group_labels},
        {**size_annotation, "leaderworkerset.sigs.k8s.io/leader-name": leader_name}))
    await create_all(api, [], [
        lws_pod(workers, f"{leader_name}-{i}", workers["spec"]["template"],
            {"leaderworkerset.sigs.k8s.io/worker-index": str(i)})
        for i in range(1, size)
    ])


# --------------------------------------------------------------------------- Kubeflow training-operator
def pytorchjob(name: str, *, workers: int, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    def replica(replicas: int) -> dict[str, Any]:
        template = pod_template(1, annotations=annotations)
        template["spec"]["containers"][0]["name"] = "pytorch"  # the container the operator configures
        return {"replicas": replicas, "restartPolicy": "OnFailure", "template": template}

    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"pytorchReplicaSpecs": {"Master": replica(1), "Worker": replica(workers)}}}


def pytorchjob_pods(job: dict[str, Any]) -> list[dict[str, Any]]:
    """The pods the training-operator makes for a PyTorchJob (pkg/controller.v1/common/pod.go,
    createNewPod and CreatePod): NAME-TYPE-INDEX with the template's labels and its own (operator and
    job name, replica type and index, `job-role: master` on the master), the replica's restart policy,
    the job as controller. Gang scheduling of the operator itself (its PodGroups) is off, as by default."""
    name = job["metadata"]["name"]
    pods = []
    for rtype, spec in job["spec"]["pytorchReplicaSpecs"].items():
        for index in range(spec.get("replicas", 1)):
            template = yaml.safe_load(yaml.safe_dump(spec["template"]))
            labels = {**(template["metadata"].get("labels") or {}),
                      "training.kubeflow.org/operator-name": "pytorchjob-controller",
                      "training.kubeflow.org/job-name": name,
                      "training.kubeflow.org/replica-type": rtype.lower(),
                      "training.kubeflow.org/replica-index": str(index)}
            if rtype == "Master":
                labels["training.kubeflow.org/job-role"] = "master"
            template["spec"]["restartPolicy"] = spec.get("restartPolicy", "Never")
            meta = {"name": f"{name}-{rtype.lower()}-{index}", "namespace": NS, "labels": labels,
                    "annotations": template["metadata"].get("annotations") or {},
                    "ownerReferences": [controller_ref(job)]}
            pods.append({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": template["spec"]})
    return pods
