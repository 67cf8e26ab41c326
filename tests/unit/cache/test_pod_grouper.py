"""Gangs inferred from the owner (cache/pod_grouper.py), native PodGroups and the precedence of the keys
(cache/gangs.py), and the PodGroupInitiallyScheduled condition (daemon/gang_status.py).

Pods are shaped as their controllers make them (labels, annotations, owner references, read from the
LeaderWorkerSet, JobSet, training-operator, KubeRay and Job controllers' sources)."""

from __future__ import annotations

from typing import Any

import pytest
from builders import NativePodGroup, Pod

from ai_scheduler.cache.gangs import GangRegistry, gang_ref, owner_key
from ai_scheduler.cache.pod_grouper import OwnerSpec, infer_gang, parse_owner
from ai_scheduler.cache.records import PodRecord
from ai_scheduler.daemon.gang_status import native_conditions

NS = "team"


def grouped_pod(name: str, *, labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None,
                owner: tuple[str, str, str] | None = None, group: str | None = None,
                uid: str | None = None) -> PodRecord:
    pod = (Pod.bare(name, NS).uid(uid).labels(labels or {}).annotations(annotations or {})
           .spec(schedulerName="ai-scheduler").container("main", "x").phase("Pending"))
    if owner is not None:
        pod.controlled_by(*owner)
    return (pod.scheduling_group(group) if group is not None else pod).record()


def obj(kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"kind": kind, "metadata": {"name": name, "namespace": NS}, "spec": spec}


def lookup(*objects: tuple[str, dict[str, Any]]) -> Any:
    specs = {(kind, NS, o["metadata"]["name"]): parse_owner(kind, o) for kind, o in objects}
    return lambda kind, ns, name: specs.get((kind, ns, name))


def none(kind: str, ns: str, name: str) -> OwnerSpec | None:
    return None


# --------------------------------------------------------------------------- LeaderWorkerSet
def lws_pod(lws: str, group: int, worker: int, size: int) -> PodRecord:
    """As the LWS controller makes them: the leader by the leader StatefulSet, workers by the group's."""
    labels = {
        "leaderworkerset.sigs.k8s.io/name": lws,
        "leaderworkerset.sigs.k8s.io/group-index": str(group),
        "leaderworkerset.sigs.k8s.io/worker-index": str(worker),
        "leaderworkerset.sigs.k8s.io/group-key": "5e1b0c",
        "leaderworkerset.sigs.k8s.io/template-revision-hash": "7c9",
    }
    annotations = {"leaderworkerset.sigs.k8s.io/size": str(size)}
    if worker:
        annotations["leaderworkerset.sigs.k8s.io/leader-name"] = f"{lws}-{group}"
        owner = ("apps/v1", "StatefulSet", f"{lws}-{group}")
        name = f"{lws}-{group}-{worker}"
    else:
        owner = ("apps/v1", "StatefulSet", lws)
        name = f"{lws}-{group}"
    return grouped_pod(name, labels=labels, annotations=annotations, owner=owner)


def test_a_leaderworkerset_group_is_its_leader_and_workers_from_the_pod_alone() -> None:
    leader, worker = lws_pod("llm", 1, 0, 4), lws_pod("llm", 1, 3, 4)
    for member in (leader, worker):
        group = infer_gang(member, none)
        assert group is not None
        assert (group.kind, group.name, group.minimum, group.problem) == ("LeaderWorkerSet", "llm-1", 4, "")
    other = infer_gang(lws_pod("llm", 2, 1, 4), none)
    assert other is not None and other.name == "llm-2", "each group of the set is its own gang"
    ref = gang_ref(leader, none)
    assert ref is not None and ref.key == f"{NS}/LeaderWorkerSet/llm-1"


def test_a_leaderworkerset_with_leader_ready_places_the_leader_then_its_workers() -> None:
    owners = lookup(("LeaderWorkerSet", obj("LeaderWorkerSet", "llm", {
        "startupPolicy": "LeaderReady", "leaderWorkerTemplate": {"size": 4}})))
    assert infer_gang(lws_pod("llm", 0, 0, 4), owners) is None, "the leader alone, as an ordinary pod"
    workers = infer_gang(lws_pod("llm", 0, 2, 4), owners)
    assert workers is not None and (workers.name, workers.minimum) == ("llm-0-workers", 3)


def test_a_leaderworkerset_of_one_is_no_gang_and_a_bad_size_says_why() -> None:
    assert infer_gang(lws_pod("solo", 0, 0, 1), none) is None
    bad = lws_pod("llm", 0, 1, 4)
    bad.annotations["leaderworkerset.sigs.k8s.io/size"] = "four"
    group = infer_gang(bad, none)
    assert group is not None and group.minimum is None
    assert group.problem == (
        "annotation leaderworkerset.sigs.k8s.io/size must be a positive group size, got 'four'"
    )


# --------------------------------------------------------------------------- JobSet
def jobset_pod(jobset: str, rjob: str, job_index: int, completion: int) -> PodRecord:
    """As the Job controller makes a JobSet's pods: owned by the child Job, JobSet labels copied."""
    job = f"{jobset}-{rjob}-{job_index}"
    labels = {
        "jobset.sigs.k8s.io/jobset-name": jobset,
        "jobset.sigs.k8s.io/replicatedjob-name": rjob,
        "jobset.sigs.k8s.io/replicatedjob-replicas": "2",
        "jobset.sigs.k8s.io/job-index": str(job_index),
        "jobset.sigs.k8s.io/job-key": "a1b2",
        "jobset.sigs.k8s.io/restart-attempt": "0",
        "batch.kubernetes.io/job-name": job,
        "batch.kubernetes.io/job-completion-index": str(completion),
        "batch.kubernetes.io/controller-uid": f"uid-{job}",
    }
    annotations = {"batch.kubernetes.io/job-completion-index": str(completion),
                   "jobset.sigs.k8s.io/jobset-name": jobset}
    owner = ("batch/v1", "Job", job)
    return grouped_pod(f"{job}-{completion}-x", labels=labels, annotations=annotations, owner=owner)


TRAINER_JOBSET = obj("JobSet", "train", {"replicatedJobs": [
    {"name": "node", "replicas": 2, "template": {"spec": {"parallelism": 4, "completions": 4}}},
    {"name": "initializer", "replicas": 1, "template": {"spec": {}}},
]})


def test_a_jobset_is_one_gang_of_every_replicated_job() -> None:
    owners = lookup(("JobSet", TRAINER_JOBSET))
    group = infer_gang(jobset_pod("train", "node", 1, 3), owners)
    assert group is not None and (group.kind, group.name, group.minimum) == ("JobSet", "train", 2 * 4 + 1)
    other = infer_gang(jobset_pod("train", "initializer", 0, 0), owners)
    assert other is not None and other.name == "train", "the indexed Job rule does not split a JobSet"


def test_an_in_order_jobset_is_one_gang_per_replicated_job() -> None:
    spec = {**TRAINER_JOBSET["spec"], "startupPolicy": {"startupPolicyOrder": "InOrder"}}
    owners = lookup(("JobSet", obj("JobSet", "train", spec)))
    group = infer_gang(jobset_pod("train", "node", 0, 0), owners)
    assert group is not None and (group.name, group.minimum) == ("train-node", 8)
    assert infer_gang(jobset_pod("train", "initializer", 0, 0), owners) is None, "a part of one pod"


def test_a_jobset_not_seen_yet_or_malformed_waits_with_a_reason() -> None:
    unseen = infer_gang(jobset_pod("train", "node", 0, 0), none)
    assert unseen is not None and unseen.minimum is None
    assert unseen.problem == f"waiting for JobSet {NS}/train to be seen, to read its gang's minimum"
    bad = obj("JobSet", "train", {"replicatedJobs": [{"name": "node", "replicas": -2}]})
    group = infer_gang(jobset_pod("train", "node", 0, 0), lookup(("JobSet", bad)))
    assert group is not None and group.minimum is None
    assert "spec.replicatedJobs[0].replicas must be a non-negative integer, got -2" in group.problem


# --------------------------------------------------------------------------- Kubeflow training-operator
def kubeflow_pod(job: str, kind: str, api: str, operator: str, rtype: str, index: int) -> PodRecord:
    labels = {
        "training.kubeflow.org/job-name": job,
        "training.kubeflow.org/operator-name": operator,
        "training.kubeflow.org/replica-type": rtype,
        "training.kubeflow.org/replica-index": str(index),
    }
    if rtype in ("master", "launcher"):
        labels["training.kubeflow.org/job-role"] = rtype
    return grouped_pod(f"{job}-{rtype}-{index}", labels=labels, owner=(api, kind, job))


def test_a_pytorchjob_is_one_gang_of_master_and_workers() -> None:
    spec = {"pytorchReplicaSpecs": {"Master": {"replicas": 1}, "Worker": {"replicas": 3}}}
    owners = lookup(("PyTorchJob", obj("PyTorchJob", "bert", spec)))
    for rtype, index in (("master", 0), ("worker", 2)):
        group = infer_gang(kubeflow_pod("bert", "PyTorchJob", "kubeflow.org/v1", "pytorchjob-controller",
                                        rtype, index), owners)
        assert group is not None and (group.kind, group.name, group.minimum) == ("PyTorchJob", "bert", 4)
    declared = {**spec, "runPolicy": {"schedulingPolicy": {"minAvailable": 2}}}
    owners = lookup(("PyTorchJob", obj("PyTorchJob", "bert", declared)))
    group = infer_gang(kubeflow_pod("bert", "PyTorchJob", "kubeflow.org/v1", "pytorchjob-controller",
                                    "worker", 0), owners)
    assert group is not None and group.minimum == 2, "runPolicy.schedulingPolicy.minAvailable wins"


def test_an_mpijob_launcher_made_after_its_workers_is_not_in_the_quorum() -> None:
    spec = {"launcherCreationPolicy": "WaitForWorkersReady",
            "mpiReplicaSpecs": {"Launcher": {"replicas": 1}, "Worker": {"replicas": 4}}}
    owners = lookup(("MPIJob", obj("MPIJob", "hpc", spec)))
    worker = kubeflow_pod("hpc", "MPIJob", "kubeflow.org/v2beta1", "mpi-operator", "worker", 0)
    group = infer_gang(worker, owners)
    assert group is not None and (group.name, group.minimum) == ("hpc", 4)
    # The launcher pod's owner is its Job (mpi-operator v2): the operator label names the kind.
    launcher = kubeflow_pod("hpc", "Job", "batch/v1", "mpi-operator", "launcher", 0)
    group = infer_gang(launcher, owners)
    assert group is not None and (group.kind, group.name) == ("MPIJob", "hpc")


# --------------------------------------------------------------------------- KubeRay
def ray_pod(cluster: str, node_type: str, group: str, i: int) -> PodRecord:
    labels = {
        "ray.io/cluster": cluster,
        "ray.io/node-type": node_type,
        "ray.io/group": group,
        "ray.io/identifier": f"{cluster}-{node_type}",
        "ray.io/is-ray-node": "yes",
        "app.kubernetes.io/name": "kuberay",
        "app.kubernetes.io/created-by": "kuberay-operator",
    }
    return grouped_pod(f"{cluster}-{group}-{i}", labels=labels, owner=("ray.io/v1", "RayCluster", cluster))


def test_a_raycluster_is_its_head_and_its_worker_groups_minimum() -> None:
    spec = {"headGroupSpec": {}, "workerGroupSpecs": [
        {"groupName": "gpu", "replicas": 4, "minReplicas": 2, "maxReplicas": 8, "numOfHosts": 2},
        {"groupName": "cpu", "replicas": 3, "minReplicas": 0},
        {"groupName": "off", "replicas": 5, "minReplicas": 5, "suspended": True},
    ]}
    owners = lookup(("RayCluster", obj("RayCluster", "rc", spec)))
    for member in (ray_pod("rc", "head", "headgroup", 0), ray_pod("rc", "worker", "gpu", 1)):
        group = infer_gang(member, owners)
        # head 1 + gpu 2 x 2 hosts + cpu 3 (no autoscaling, minReplicas 0: its replicas) + suspended 0
        assert group is not None and (group.kind, group.name, group.minimum) == ("RayCluster", "rc", 8)
    autoscaled = lookup(("RayCluster", obj("RayCluster", "rc", {**spec, "enableInTreeAutoscaling": True})))
    group = infer_gang(ray_pod("rc", "head", "headgroup", 0), autoscaled)
    assert group is not None and group.minimum == 1 + 4 + 0


def test_a_raycluster_whose_minimum_is_above_its_replicas_waits_with_the_reason() -> None:
    spec = {"workerGroupSpecs": [{"groupName": "gpu", "replicas": 1, "minReplicas": 3}]}
    owners = lookup(("RayCluster", obj("RayCluster", "rc", spec)))
    group = infer_gang(ray_pod("rc", "worker", "gpu", 0), owners)
    assert group is not None and group.minimum is None
    assert group.problem == (
        f"RayCluster {NS}/rc: spec.workerGroupSpecs[0].minReplicas (3) is above its replicas (1)"
    )


# --------------------------------------------------------------------------- indexed Job
def job_pod(job: str, index: int | None) -> PodRecord:
    labels = {"batch.kubernetes.io/job-name": job, "job-name": job, "batch.kubernetes.io/controller-uid": "u"}
    annotations = {}
    if index is not None:
        labels["batch.kubernetes.io/job-completion-index"] = str(index)
        annotations["batch.kubernetes.io/job-completion-index"] = str(index)
    return grouped_pod(f"{job}-{index}-x", labels=labels, annotations=annotations,
                       owner=("batch/v1", "Job", job))


def test_an_indexed_job_is_a_gang_of_its_parallelism() -> None:
    job = obj("Job", "ranks", {"completionMode": "Indexed", "parallelism": 4, "completions": 8})
    group = infer_gang(job_pod("ranks", 2), lookup(("Job", job)))
    assert group is not None and (group.kind, group.name, group.minimum) == ("Job", "ranks", 4)
    few = obj("Job", "ranks", {"completionMode": "Indexed", "parallelism": 4, "completions": 2})
    group = infer_gang(job_pod("ranks", 0), lookup(("Job", few)))
    assert group is not None and group.minimum == 2
    assert infer_gang(job_pod("ranks", None), lookup(("Job", job))) is None, "a non-indexed Job is no gang"
    single = obj("Job", "one", {"completionMode": "Indexed", "completions": 3})
    assert infer_gang(job_pod("one", 0), lookup(("Job", single))) is None, "parallelism 1 is no gang"


# --------------------------------------------------------------------------- precedence, aliases, off
def test_precedence_schedulinggroup_then_explicit_keys_then_inference() -> None:
    member = lws_pod("llm", 0, 1, 4)
    member.labels = {**member.labels, "scheduling.x-k8s.io/pod-group": "explicit"}  # records share labels
    ref = gang_ref(member, none)
    assert ref is not None and ref.key == f"{NS}/explicit"
    native = grouped_pod("n", labels={"scheduling.x-k8s.io/pod-group": "explicit"}, group="ranks")
    ref = gang_ref(native, none)
    assert ref is not None and (ref.key, ref.declared_by) == (f"{NS}/PodGroup/ranks", "spec.schedulingGroup")


@pytest.mark.parametrize("key", ["scheduling.k8s.io/group-name", "pod-group-name"])
def test_volcano_and_kai_pod_group_annotations_are_aliases(key: str) -> None:
    ref = gang_ref(grouped_pod("p", annotations={key: "pg-train"}), none)
    assert ref is not None and ref.key == f"{NS}/pg-train" and ref.declared_by == f"annotation {key}"
    registry = GangRegistry()
    gang = registry.observe_pod(grouped_pod("p", annotations={key: "pg-train"}))
    assert gang is not None and gang.problem == f"annotation {key}: pod group {NS}/pg-train not found"


def test_inference_off_and_a_bad_value_of_the_annotation() -> None:
    member = lws_pod("llm", 0, 1, 4)
    member.annotations["ai-scheduler.io/gang-inference"] = "off"
    assert gang_ref(member, none) is None
    member.annotations["ai-scheduler.io/gang-inference"] = "no"
    ref = gang_ref(member, none)
    assert ref is not None
    assert ref.error == 'annotation ai-scheduler.io/gang-inference must be "on" or "off", got \'no\''


# --------------------------------------------------------------------------- registry
def test_an_owner_seen_after_its_pods_regroups_them() -> None:
    registry = GangRegistry()
    members = [jobset_pod("train", "node", j, c) for j in range(2) for c in range(4)]
    for member in members:
        registry.observe_pod(member)
    gang = registry.gang_of(members[0])
    assert gang is not None and gang.problem.startswith(f"waiting for JobSet {NS}/train to be seen")
    uids = registry.set_owner("JobSet", TRAINER_JOBSET, owner_key("JobSet", TRAINER_JOBSET))
    assert sorted(uids) == sorted(m.uid for m in members)
    for member in members:
        registry.observe_pod(member)
    gang = registry.gang_of(members[0])
    assert gang is not None and gang.problem == "" and gang.min_member == 9
    again = registry.set_owner("JobSet", TRAINER_JOBSET, owner_key("JobSet", TRAINER_JOBSET))
    assert again == [], "no change, nothing to read again"


def native_podgroup(name: str, policy: dict[str, Any], generation: int = 1) -> dict[str, Any]:
    return NativePodGroup.bare(name, NS).uid().meta(generation=generation).policy(policy).obj()


def test_native_gang_basic_and_missing_podgroups() -> None:
    registry = GangRegistry()
    member = grouped_pod("m-0", group="ranks")
    gang = registry.observe_pod(member)
    assert gang is not None
    assert gang.problem == 'waiting for pods\'s pod group "ranks" to appear in scheduling queue'
    registry.set_native_podgroup(native_podgroup("ranks", {"gang": {"minCount": 4}}))
    assert gang.problem == "" and gang.min_member == 4 and registry.gang_of(member) is gang
    registry.observe_pod(grouped_pod("b-0", group="serve"))
    registry.set_native_podgroup(native_podgroup("serve", {"basic": {}}))
    assert registry.gang_of(grouped_pod("b-0", group="serve")) is None, "basic: an ordinary pod"
    bad = registry.set_native_podgroup(native_podgroup("bad", {"gang": {"minCount": 0}}))
    assert bad.problem == (
        f"pod group {NS}/PodGroup/bad: spec.schedulingPolicy.gang.minCount must be a positive integer, got 0"
    )


def test_the_initially_scheduled_condition_as_kube_scheduler_writes_it() -> None:
    registry = GangRegistry()
    registry.set_native_podgroup(native_podgroup("ranks", {"gang": {"minCount": 2}}, generation=3))
    members = [grouped_pod(f"m-{i}", group="ranks") for i in range(2)]
    for member in members:
        gang = registry.observe_pod(member)
    assert gang is not None
    assert native_conditions(gang) is None, "nothing to say before an attempt"
    gang.last_reason = "gang team/PodGroup/ranks needs 2 pods placed together and they do not all fit: x"
    (condition,) = native_conditions(gang, now=0) or []
    assert condition == {"type": "PodGroupInitiallyScheduled", "status": "False", "observedGeneration": 3,
                         "lastTransitionTime": "1970-01-01T00:00:00Z", "reason": "Unschedulable",
                         "message": gang.last_reason}
    assert gang.native is not None
    gang.native.status = {"conditions": [condition]}
    assert native_conditions(gang, now=5) is None, "unchanged: no write"
    for i, member in enumerate(members):
        member.node_name = f"node-{i}"
        registry.observe_pod(member)
    (done,) = native_conditions(gang, now=9) or []
    assert (done["status"], done["reason"], done["message"]) == ("True", "Scheduled", "")
    gang.native.status = {"conditions": [done]}
    gang.last_reason = "later trouble"
    members[0].node_name = ""
    registry.observe_pod(members[0])
    assert native_conditions(gang, now=12) is None, "True is terminal"


def test_the_job_controllers_default_basic_podgroup_does_not_hide_an_indexed_job() -> None:
    """v1.37's Job controller (WorkloadWithJob) gives every Job a basic PodGroup unless the Job sets
    spec.scheduling: the default does not hide the indexed Job's gang; a Job's own choice does."""
    registry = GangRegistry()
    registry.set_native_podgroup(native_podgroup("ranks-pg", {"basic": {}}))
    member = job_pod("ranks", 0)
    member.scheduling_group = "ranks-pg"
    job = obj("Job", "ranks", {"completionMode": "Indexed", "parallelism": 4, "completions": 4})
    registry.set_owner("Job", job, owner_key("Job", job))
    gang = registry.observe_pod(member)
    assert gang is not None and gang.key == f"{NS}/Job/ranks" and gang.min_member == 4
    chosen = obj("Job", "ranks", {**job["spec"], "scheduling": {"schedulingPolicy": {"basic": {}}}})
    uids = registry.set_owner("Job", chosen, owner_key("Job", chosen))
    assert uids == [member.uid]
    gang = registry.observe_pod(member)
    assert gang is not None and gang.key == f"{NS}/PodGroup/ranks-pg" and registry.gang_of(member) is None
