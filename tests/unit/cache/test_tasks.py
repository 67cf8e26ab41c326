"""A Task's spec, the pods of a run and its state machine (cache/tasks.py), without a cluster."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from builders import Task

from ai_scheduler.cache.gangs import GROUP_MIN_LABEL, GROUP_NAME_LABEL, gang_ref
from ai_scheduler.cache.records import ESTIMATE_ANNOTATION, PodRecord
from ai_scheduler.cache.tasks import (
    ROLE_LABEL,
    RUN_LABEL,
    TASK_LABEL,
    TaskPod,
    TaskSpec,
    gang_name,
    reconcile,
    task_pods,
)
from ai_scheduler.cache.tenancy import QUEUE_LABEL
from ai_scheduler.config import parse_config
from ai_scheduler.log import parse_time
from ai_scheduler.prediction import features_of_pod

NOW = 1_800_000_000.0


def mpi(**spec: Any) -> TaskSpec:
    """1 launcher and 4 workers (minimum 4): the acceptance's Task."""
    task = Task("mpi").role("launcher", 1, cpu="1").role("worker", 4, 4, cpu="2", gpus=1).spec(**spec)
    return TaskSpec.from_api(task.meta(uid="uid-mpi").obj())


def pods_of(task: TaskSpec, run: int = 0, **fields: Any) -> list[TaskPod]:
    made = []
    for pod in task_pods(task, run):
        pod["metadata"]["uid"] = "uid-" + pod["metadata"]["name"]
        made.append(TaskPod.from_api(pod))
    return [replace(p, **fields) for p in made if p is not None]


def step(task: TaskSpec, status: dict[str, Any], pods: list[TaskPod], now: float = NOW) -> dict[str, Any]:
    return reconcile(task, status, pods, now).status


def test_the_pods_of_a_run_are_one_gang_of_every_replica_with_the_roles_minimums_summed() -> None:
    task = mpi(queue="research", priorityClassName="high",
               attributes={"kind": "training", "domain": "NLP", "estimatedRunTime": "2h",
                           "modelParameters": 7_000_000_000})
    pods = task_pods(task, 0)
    assert [p["metadata"]["name"] for p in pods] == ["mpi-launcher-0"] + [f"mpi-worker-{i}" for i in range(4)]
    for pod in pods:
        labels, spec = pod["metadata"]["labels"], pod["spec"]
        assert labels[TASK_LABEL] == "mpi" and labels[RUN_LABEL] == "0" and labels[QUEUE_LABEL] == "research"
        assert labels[GROUP_NAME_LABEL] == "mpi" and labels[GROUP_MIN_LABEL] == "5"  # 1 + 4
        assert spec["schedulerName"] == "ai-scheduler" and spec["restartPolicy"] == "Never"
        assert spec["priorityClassName"] == "high"
        assert pod["metadata"]["annotations"][ESTIMATE_ANNOTATION] == "7200s"
        assert pod["metadata"]["ownerReferences"][0]["uid"] == "uid-mpi"
        ref = gang_ref(PodRecord.from_api(pod))  # the scheduler reads the gang the controller meant
        assert ref is not None and ref.name == "mpi" and ref.min_member == 5
    assert {p["metadata"]["labels"][ROLE_LABEL] for p in pods} == {"launcher", "worker"}
    later = task_pods(task, 2)  # a restart's pods: names and gang of their own
    assert later[0]["metadata"]["name"] == "mpi-launcher-0-r2"
    assert later[0]["metadata"]["labels"][GROUP_NAME_LABEL] == "mpi-r2"


def test_a_long_name_keeps_its_gang_names_label_values_and_apart_at_every_run() -> None:
    """The gang's name is a label value (63 characters at most) and carries the run from the second run
    on: a name of 63 characters still makes pods the API server takes, at run 0 and at run 1,000, and
    two names that differ only past the cut keep gangs of their own."""
    long = "t" * 60 + "abc"
    other = "t" * 60 + "abd"
    task = replace(mpi(), name=long)
    assert gang_name(task, 0) == long
    for run in (1, 9, 10, 1000):
        pods = task_pods(task, run)
        gang = pods[0]["metadata"]["labels"][GROUP_NAME_LABEL]
        assert len(gang) <= 63 and gang.endswith(f"-r{run}") and gang.startswith("t" * 40)
        assert {p["metadata"]["labels"][GROUP_NAME_LABEL] for p in pods} == {gang}
        assert gang != gang_name(replace(task, name=other), run)
    short = mpi()
    assert gang_name(short, 12) == "mpi-r12"  # a name that fits is left as it is
    ok = Task(long).role("w", 1, cpu="1").obj()
    assert TaskSpec.from_api(ok).error == ""
    too_long = Task(long + "x").role("w", 1, cpu="1").obj()
    assert "the Task's name may have at most 63 characters" in TaskSpec.from_api(too_long).error


@pytest.mark.parametrize(("spec", "error"), [
    ({"roles": []}, "spec.roles must list at least one role"),
    ({"roles": [{"name": "w", "replicas": 2, "minimum": 3, "template": {"spec": {"containers": [{}]}}}]},
     "spec.roles[0].minimum (3) is above its replicas (2)"),
    ({"roles": [{"name": "w", "template": {"spec": {}}}]}, "spec.roles[0].template.spec.containers"),
    ({"roles": [{"name": "w", "template": {"spec": {"containers": [{}]}}}], "runTimeLimit": "soon"},
     "spec.runTimeLimit must be a duration"),
    ({"roles": [{"name": "w", "template": {"spec": {"containers": [{}]}}}], "attributes": {"kind": "game"}},
     "spec.attributes.kind must be one of training"),
    ({"roles": [{"name": "w", "template": {"spec": {"containers": [{}]}}}],
      "successPolicy": {"roles": ["launcher"]}}, "spec.successPolicy.roles must name roles of the Task (w)"),
])
def test_a_spec_that_cannot_run_fails_at_once_with_its_reason_and_makes_no_pod(
    spec: dict[str, Any], error: str
) -> None:
    task = TaskSpec.from_api({"metadata": {"name": "bad", "namespace": "ns", "uid": "u"}, "spec": spec})
    assert error in task.error
    plan = reconcile(task, {}, [], NOW)
    assert plan.create == []
    assert plan.status["phase"] == "Failed" and plan.status["reason"] == "InvalidSpec"
    assert error in plan.status["message"]


def test_a_task_is_queued_admitted_when_placed_whole_then_running_then_succeeded() -> None:
    task = mpi(successPolicy={"roles": ["launcher"]})
    plan = reconcile(task, {}, [], NOW)
    assert len(plan.create) == 5 and plan.status["phase"] == "Queued" and plan.status["podsCreated"]
    status = plan.status
    pods = pods_of(task)
    assert step(task, status, pods)["phase"] == "Queued"  # nothing placed yet
    partly = [replace(p, node="n1") if p.role == "worker" else p for p in pods]  # 4 of a minimum of 5
    assert step(task, status, partly)["phase"] == "Queued"
    bound = [replace(p, node="n1") for p in pods]
    status = step(task, status, bound, NOW + 10)
    assert status["phase"] == "Admitted" and status["admittedAt"]
    running = [replace(p, phase="Running") for p in bound]
    status = step(task, status, running, NOW + 20)
    assert status["phase"] == "Running" and parse_time(status["startedAt"]) == NOW + 20
    assert status["gpus"] == 4 and status["nodes"] == [{"name": "n1", "gpus": 4}]
    assert status["waitSeconds"] == 20.0
    # The launcher succeeds: the Task succeeded; its workers, still running, are stopped.
    done = [replace(p, phase="Succeeded") if p.role == "launcher" else p for p in running]
    plan = reconcile(task, status, done, NOW + 320)
    assert plan.status["phase"] == "Succeeded" and plan.status["runSeconds"] == 300.0
    assert sorted(plan.delete) == [f"mpi-worker-{i}" for i in range(4)]
    assert plan.changes == [("Succeeded", "Succeeded", "every pod of launcher succeeded")]
    # Finished: it stays so, and keeps its finished pods (podsAfterFinish: Keep).
    assert reconcile(task, plan.status, [replace(p, phase="Succeeded") for p in done], NOW + 400).delete == []


def test_a_failed_pod_restarts_the_run_while_retries_last_then_fails_the_task() -> None:
    task = mpi(retryPolicy={"maxRestarts": 1})
    status = reconcile(task, {}, [], NOW).status
    running = pods_of(task, node="n1", phase="Running")
    failed = [replace(running[1], phase="Failed", exit="Error (exit code 3)"), *running[:1], *running[2:]]
    plan = reconcile(task, status, failed, NOW + 5)
    assert plan.status["phase"] == "Queued" and plan.status["reason"] == "Restarted"
    assert plan.status["run"] == 1 and plan.status["restarts"] == 1 and plan.status["failedRuns"] == 1
    assert "pod mpi-worker-0 failed: Error (exit code 3)" in plan.status["message"]
    assert sorted(plan.delete) == sorted(p.name for p in running if p.name != "mpi-worker-0")
    assert plan.create == []  # the next run's pods come once the status saying run 1 is written
    plan = reconcile(task, plan.status, failed, NOW + 6)
    assert next(p["metadata"]["name"] for p in plan.create) == "mpi-launcher-0-r1"
    second = pods_of(task, 1, node="n1", phase="Running")
    second[0] = replace(second[0], phase="Failed", exit="OOMKilled (exit code 137)")
    plan = reconcile(task, plan.status, second + failed, NOW + 7)
    assert plan.status["phase"] == "Failed" and plan.status["reason"] == "PodFailed"
    assert plan.status["exitReason"] == "pod mpi-launcher-0-r1 failed: OOMKilled (exit code 137)"


def test_a_preempted_or_lost_pod_queues_the_task_again_without_spending_a_retry() -> None:
    task = mpi()  # no retries
    status = reconcile(task, {}, [], NOW).status
    running = pods_of(task, node="n1", phase="Running")
    preempted = [replace(running[0], phase="Failed", disrupted="PreemptionByScheduler"), *running[1:]]
    plan = reconcile(task, status, preempted, NOW + 1)
    assert (plan.status["phase"], plan.status["reason"]) == ("Queued", "Preempted")
    assert plan.status["failedRuns"] == 0
    lost = reconcile(task, status, running[1:], NOW + 1)  # a pod deleted under it
    assert (lost.status["reason"], lost.status["run"]) == ("PodLost", 1)


def test_hold_removes_the_pods_and_release_makes_them_again() -> None:
    task = mpi()
    status = reconcile(task, {}, [], NOW).status
    pods = pods_of(task, node="n1", phase="Running")
    held = mpi(suspend=True)
    plan = reconcile(held, status, pods, NOW + 1)
    assert plan.status["phase"] == "Held" and sorted(plan.delete) == sorted(p.name for p in pods)
    assert plan.status["run"] == 1 and not plan.status["podsCreated"]
    status = plan.status
    assert reconcile(held, status, [], NOW + 2).create == []  # held: nothing made
    plan = reconcile(task, status, [], NOW + 3)  # released
    assert plan.status["phase"] == "Queued" and len(plan.create) == 5
    assert parse_time(plan.status["queuedAt"]) == NOW + 3


def test_cancel_deletes_the_pods_and_ends_the_task_and_requeue_starts_a_new_run() -> None:
    task = mpi()
    status = reconcile(task, {}, [], NOW).status
    pods = pods_of(task, node="n1")
    plan = reconcile(mpi(requeueAt="2027-01-01T00:00:00.000Z"), status, pods, NOW + 1)
    assert (plan.status["reason"], plan.status["run"], plan.status["restarts"]) == ("Requeued", 1, 1)
    assert sorted(plan.delete) == sorted(p.name for p in pods)
    plan = reconcile(mpi(cancel=True), status, pods, NOW + 2)
    assert (plan.status["phase"], plan.status["reason"]) == ("Cancelled", "Cancelled")
    assert sorted(plan.delete) == sorted(p.name for p in pods) and plan.status["finishedAt"]


def test_a_run_over_its_run_time_limit_is_stopped_with_its_reason() -> None:
    task = mpi(runTimeLimit="10m")
    status = reconcile(task, {}, [], NOW).status
    running = pods_of(task, node="n1", phase="Running")
    status = step(task, status, running, NOW + 60)
    assert status["phase"] == "Running"
    assert step(task, status, running, NOW + 60 + 599)["phase"] == "Running"
    plan = reconcile(task, status, running, NOW + 60 + 601)
    assert (plan.status["phase"], plan.status["reason"]) == ("Failed", "RunTimeLimitExceeded")
    assert "over its run-time limit of 600 s" in plan.status["exitReason"]
    assert sorted(plan.delete) == sorted(p.name for p in running)


def test_pods_after_finish_delete_removes_the_finished_pods_too() -> None:
    task = mpi(podsAfterFinish="Delete")
    status = reconcile(task, {}, [], NOW).status
    done = pods_of(task, node="n1", phase="Succeeded")
    plan = reconcile(task, status, done, NOW + 1)
    assert plan.status["phase"] == "Succeeded" and sorted(plan.delete) == sorted(p.name for p in done)


def test_a_pod_is_read_with_its_exit_reason_and_disruption() -> None:
    pod = task_pods(mpi(), 0)[1]
    pod["metadata"]["uid"] = "u1"
    pod["spec"]["nodeName"] = "n1"
    pod["status"] = {"phase": "Failed", "startTime": "2026-12-07T10:00:00Z",
                     "conditions": [{"type": "DisruptionTarget", "status": "True",
                                     "reason": "PreemptionByScheduler"}],
                     "containerStatuses": [{"state": {"terminated": {"reason": "Error", "exitCode": 2,
                                                                     "finishedAt": "2026-12-07T10:05:00Z"}}}]}
    read = TaskPod.from_api(pod)
    assert read is not None
    assert (read.role, read.run, read.node, read.gpus) == ("worker", 0, "n1", 1)
    assert read.exit == "Error (exit code 2)" and read.disrupted == "PreemptionByScheduler"
    assert read.finished is not None and read.started is not None and read.finished - read.started == 300


def test_the_declared_attributes_reach_the_run_time_model_through_the_pods() -> None:
    task = mpi(attributes={"kind": "training", "domain": "NLP", "modelParameters": 70_000_000_000,
                           "datasetSize": "2Ti", "estimatedRunTime": "90m"})
    features = features_of_pod(PodRecord.from_api(task_pods(task, 0)[1]), "alice", "vision")
    assert (features.task_type, features.workload_class, features.estimate) == ("training", "NLP", 5400.0)
    assert (features.model_parameters, features.dataset_bytes) == (70_000_000_000, 2 * 2**40)
    assert features.gang_size == 5


RULES = parse_config({"taskRules": [
    {"name": "large-nlp", "domain": "NLP", "minModelParameters": 10_000_000_000,
     "prefer": {"ai-scheduler.io/nvlink": "full"}, "weight": 80},
    {"name": "notebooks-away", "kind": "notebook", "avoid": {"pool": "large-gangs"}},
    {"name": "big-gangs-on-ib", "minGpus": 4, "prefer": {"network": "infiniband"}, "required": True},
]}).task_rules


def test_task_rules_turn_declared_attributes_into_node_affinity_shown_on_the_status() -> None:
    large = mpi(attributes={"domain": "NLP", "modelParameters": 70_000_000_000})
    plan = reconcile(large, {}, [], NOW, RULES)
    assert [a["rule"] for a in plan.status["systemAffinity"]] == ["large-nlp", "big-gangs-on-ib"]
    worker = plan.create[1]["spec"]["affinity"]["nodeAffinity"]
    assert worker["preferredDuringSchedulingIgnoredDuringExecution"] == [{"weight": 80, "preference": {
        "matchExpressions": [{"key": "ai-scheduler.io/nvlink", "operator": "In", "values": ["full"]}]}}]
    assert worker["requiredDuringSchedulingIgnoredDuringExecution"] == {"nodeSelectorTerms": [{
        "matchExpressions": [{"key": "network", "operator": "In", "values": ["infiniband"]}]}]}
    # A small NLP model, one GPU: no rule. A notebook: kept off the large gangs' nodes.
    small = TaskSpec.from_api(Task("nb").role("main", 1, gpus=1).attributes(kind="notebook").obj())
    plan = reconcile(small, {}, [], NOW, RULES)
    assert [a["rule"] for a in plan.status["systemAffinity"]] == ["notebooks-away"]
    node = plan.create[0]["spec"]["affinity"]["nodeAffinity"]
    term = node["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term[0]["preference"]["matchExpressions"] == [{"key": "pool", "operator": "NotIn",
                                                          "values": ["large-gangs"]}]
    assert reconcile(mpi(), {}, [], NOW, RULES[:2]).status["systemAffinity"] == []


def test_a_required_rule_is_added_to_every_term_the_template_requires() -> None:
    zones = {"nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": [z]}]}
                                   for z in ("a", "b")]}
    task = TaskSpec.from_api(Task("t").role("w", 4, gpus=1, affinity={
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": zones}}).obj())
    pod = reconcile(task, {}, [], NOW, RULES).create[0]
    terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert [[e["key"] for e in t["matchExpressions"]] for t in terms["nodeSelectorTerms"]] == [
        ["zone", "network"], ["zone", "network"]]
    assert zones["nodeSelectorTerms"][0]["matchExpressions"][-1]["key"] == "zone", "the template unchanged"
