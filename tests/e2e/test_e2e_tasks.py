"""Tasks (`tasks.ai-scheduler.io`) end to end: the controller in the daemon runs them through their life.

The acceptance's Task: a launcher and 4 workers (minimum 4), queued behind its user's quota, admitted
and placed whole once the quota has room, followed to Succeeded when its launcher succeeds, with the
task view on its status. Then the user's actions through `kubectl ai-scheduler` (hold, release, requeue,
cancel; on the real backend as a ServiceAccount of team-a with its own token) and a Task stopped at its
run-time limit. Simulated kubelets (kwok's stages on the real backend) run each pod for the duration
its annotation says.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from backends import Cluster, KubeCluster
from builders import Task, make_node, make_pod
from conftest import StartScheduler, create_all, stored_pod, wait_for

from ai_scheduler.api.kube import KubeClient
from ai_scheduler.cache.records import ESTIMATE_ANNOTATION
from ai_scheduler.cache.tasks import TASK_LABEL
from ai_scheduler.config import parse_config
from ai_scheduler.log import parse_time
from ai_scheduler.tracesim.forecast import forecaster
from ai_scheduler.tracesim.replay import read_log
from e2e.test_e2e_status import User, user

__all__ = ["user"]  # the fixture: team-a's user and their kubeconfig

QUOTA: dict[str, Any] = {
    "server": {"port": 0, "bindAddress": "127.0.0.1"},
    "scheduling": {"initialBackoffSeconds": 0.05, "maxBackoffSeconds": 0.2},
    "groups": {"vision": {"max": {"nvidia.com/gpu": 8}}},
    "users": {"alice": {"group": "vision", "max": {"nvidia.com/gpu": 4}}},
    "namespaces": {"team-a": {"user": "alice"}},
    "prediction": {"forecastSeconds": 0.5},
}


def task_of(cluster: Cluster, name: str, namespace: str = "team-a") -> dict[str, Any]:
    return cluster.store.get("tasks", namespace, name) or {}


def status_of(cluster: Cluster, name: str, namespace: str = "team-a") -> dict[str, Any]:
    return dict(task_of(cluster, name, namespace).get("status") or {})


def pods_of(cluster: Cluster, name: str, namespace: str = "team-a") -> list[dict[str, Any]]:
    return [p for p in cluster.store.list("pods", namespace)
            if (p["metadata"].get("labels") or {}).get(TASK_LABEL) == name]


def live(pods: list[dict[str, Any]]) -> list[str]:
    """The pods neither finished nor being deleted."""
    return sorted(p["metadata"]["name"] for p in pods if not p["metadata"].get("deletionTimestamp")
                  and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed"))


async def create_task(api: KubeClient, task: Task) -> None:
    result = await api.create_task(task.obj())
    assert result.ok, result.message


async def test_a_task_queued_behind_its_quota_is_admitted_whole_and_followed_to_success(
    cluster: Cluster, api: KubeClient, user: User, start_scheduler: StartScheduler, tmp_path: Path
) -> None:
    running = await start_scheduler(parse_config(QUOTA), forecaster=forecaster)
    # alice may hold 4 GPUs: 2 of them are held for a few seconds by a pod she started before.
    blocker = make_pod("blocker", namespace="team-a", gpus=2, cpu="1", duration=4,
                       annotations={ESTIMATE_ANNOTATION: "4s"})
    nodes = [make_node(f"gpu-{i}", cpu="32", memory="128Gi", gpus=8) for i in range(2)]
    await create_all(api, nodes, [blocker])
    await wait_for(lambda: stored_pod(cluster, "blocker", "team-a")["spec"].get("nodeName"),
                   what="the blocker bound")
    task = (Task("mpi", "team-a")
            .role("launcher", 1, cpu="1", duration=1.5)
            .role("worker", 4, 4, cpu="1", gpus=1, duration=600)
            .spec(successPolicy={"roles": ["launcher"]})
            .attributes(kind="training", domain="NLP", framework="pytorch", modelParameters=7_000_000_000,
                        datasetSize="2Ti", estimatedRunTime="30m"))
    await create_task(api, task)

    def queued_with_its_facts() -> dict[str, Any] | None:
        status = status_of(cluster, "mpi")
        ready = (status.get("phase") == "Queued" and status.get("queuePosition") == 1
                 and status.get("predictedStart") and "quota" in str(status.get("message")))
        return status if ready else None

    queued = await wait_for(queued_with_its_facts, timeout=30, what="queued, with its place, reason, start")
    assert not [p for p in pods_of(cluster, "mpi") if p["spec"].get("nodeName")], "no pod placed yet"
    assert len(pods_of(cluster, "mpi")) == 5 and queued["podsCreated"] and queued["run"] == 0
    assert queued["predictedRunTime"] == {"medianSeconds": 1800.0, "upperSeconds": 1800.0,
                                          "source": "annotation"}
    assert queued["priority"]["factors"] is not None and queued["queue"]
    assert "exceeds quota of user alice" in queued["message"]
    assert parse_time(queued["predictedStart"]) is not None
    assert [p["labels"]["ai-scheduler.io/workload-class"] for p in
            (q["metadata"] for q in pods_of(cluster, "mpi"))] == ["NLP"] * 5

    done = await wait_for(lambda: (s := status_of(cluster, "mpi")).get("phase") == "Succeeded" and s,
                          timeout=60, what="the Task succeeded")
    # Placed whole: one gang attempt placed all five, after the blocker had finished.
    admitted = [line for line in running.log_lines("gang.admitted") if line["gang"] == "team-a/mpi"]
    assert [line["placed"] for line in admitted] == [5]
    assert done["reason"] == "Succeeded" and done["message"] == "every pod of launcher succeeded"
    assert done["exitReason"] == "every pod of launcher succeeded" and done["systemAffinity"] == []
    fields = ("queuedAt", "admittedAt", "startedAt", "finishedAt")
    times = [parse_time(done[field]) or 0.0 for field in fields]
    assert 0.0 not in times and times == sorted(times), times
    assert done["waitSeconds"] > 1.0 and done["runSeconds"] > 1.0  # it waited for the blocker, then ran
    assert done["gpus"] == 4 and sum(n["gpus"] for n in done["nodes"]) == 4
    assert (done["restarts"], done["failedRuns"]) == (0, 0)
    conditions = {c["type"]: (c["status"], c["reason"]) for c in done["conditions"]}
    assert conditions["Finished"] == ("True", "Succeeded") and conditions["Running"][0] == "False"
    # The workers, still running when the launcher ended, are stopped; the launcher's record is kept.
    await wait_for(lambda: live(pods_of(cluster, "mpi")) == [], what="the workers stopped")
    launcher = next(p for p in pods_of(cluster, "mpi") if p["metadata"]["name"] == "mpi-launcher-0")
    assert launcher["status"]["phase"] == "Succeeded"
    # The replayable log: its spec, each phase, and its end with what it held.
    spec = [line for line in running.log_lines("task.spec") if line["task"] == "team-a/mpi"]
    assert spec and spec[0]["domain"] == "NLP" and spec[0]["model_parameters"] == 7_000_000_000
    phases = [line["phase"] for line in running.log_lines("task.phase") if line["task"] == "team-a/mpi"]
    assert phases[0] == "Queued" and phases[-1] == "Succeeded" and "Running" in phases
    finished = [line for line in running.log_lines("task.finished") if line["task"] == "team-a/mpi"]
    assert len(finished) == 1 and finished[0]["gpus"] == 4 and finished[0]["gpu_seconds"] > 4.0
    # A replay of that log sees the Task, and its pods with the attributes it declared.
    log = tmp_path / "scheduler.log"
    log.write_bytes(b"\n".join(orjson.dumps(line) for line in running.log_lines()))
    replay = read_log([log])
    seen = replay.tasks["team-a/mpi"]
    assert seen["spec"]["model_parameters"] == 7_000_000_000 and seen["phases"][-1] == "Succeeded"
    assert seen["finished"]["gpu_seconds"] == finished[0]["gpu_seconds"]
    workers = [job for job in replay.jobs if job.name.startswith("team-a/mpi-worker-")]
    assert len(workers) == 4 and {job.workload_class for job in workers} == {"NLP"}


async def test_hold_release_requeue_and_cancel_a_task_with_kubectl_ai_scheduler(
    cluster: Cluster, api: KubeClient, user: User, start_scheduler: StartScheduler,
    capsys: pytest.CaptureFixture[str],
) -> None:
    await start_scheduler(parse_config(QUOTA))
    await create_all(api, [make_node("gpu-0", cpu="32", memory="128Gi", gpus=8)], [])
    await create_task(api, Task("sweep", "team-a").role("trial", 2, cpu="1", gpus=1, duration=600))

    def phase(name: str, wanted: str, run: int | None = None) -> bool:
        status = status_of(cluster, name)
        return status.get("phase") == wanted and (run is None or status.get("run") == run)

    await wait_for(lambda: phase("sweep", "Running", 0), what="sweep running")
    code, out, err = await user.run(capsys, "hold", "task/sweep", "-n", "team-a")
    assert (code, out.strip(), err) == (0, "task/sweep held", "")
    await wait_for(lambda: phase("sweep", "Held") and live(pods_of(cluster, "sweep")) == [],
                   what="held: its pods removed")
    assert status_of(cluster, "sweep")["reason"] == "Held"

    code, out, _ = await user.run(capsys, "release", "task/sweep", "-n", "team-a")
    assert (code, out.strip()) == (0, "task/sweep released")
    await wait_for(lambda: phase("sweep", "Running", 1), what="released: running again as run 1")
    assert live(pods_of(cluster, "sweep")) == ["sweep-trial-0-r1", "sweep-trial-1-r1"]

    code, out, _ = await user.run(capsys, "requeue", "task/sweep", "-n", "team-a")
    assert (code, out.strip()) == (0, "task/sweep requeued")
    await wait_for(lambda: phase("sweep", "Running", 2), what="requeued: a new run")
    assert status_of(cluster, "sweep")["restarts"] == 1
    assert live(pods_of(cluster, "sweep")) == ["sweep-trial-0-r2", "sweep-trial-1-r2"]

    code, out, _ = await user.run(capsys, "cancel", "task/sweep", "-n", "team-a")
    assert (code, out.strip()) == (0, "task/sweep cancelled")
    await wait_for(lambda: phase("sweep", "Cancelled") and live(pods_of(cluster, "sweep")) == [],
                   what="cancelled: its pods removed")
    status = status_of(cluster, "sweep")
    assert status["reason"] == "Cancelled" and parse_time(status["finishedAt"]) is not None
    code, _, err = await user.run(capsys, "hold", "task/sweep", "-n", "team-a")
    assert code == 1 and "task team-a/sweep is already finished (Cancelled)" in err
    # A Task deleted takes its pods with it (the controller; on a real cluster the garbage collector too).
    deleted = await api.request("DELETE", "/apis/ai-scheduler.io/v1alpha1/namespaces/team-a/tasks/sweep")
    assert deleted.ok, deleted.message
    await wait_for(lambda: pods_of(cluster, "sweep") == [], what="its pods gone")


async def test_a_task_over_its_run_time_limit_is_stopped_with_a_reason(
    cluster: Cluster, api: KubeClient, user: User, start_scheduler: StartScheduler
) -> None:
    running = await start_scheduler(parse_config(QUOTA))
    await create_all(api, [make_node("gpu-0", cpu="32", memory="128Gi", gpus=8)], [])
    await create_task(api, Task("capped", "team-a").role("main", 1, cpu="1", gpus=1, duration=600)
                      .spec(runTimeLimit="2s").attributes(estimatedRunTime="1s"))
    await wait_for(lambda: status_of(cluster, "capped").get("phase") == "Failed", timeout=30,
                   what="stopped at its limit")
    status = status_of(cluster, "capped")
    assert status["reason"] == "RunTimeLimitExceeded"
    assert "over its run-time limit of 2 s (spec.runTimeLimit)" in status["exitReason"]
    assert 2.0 < status["runSeconds"] < 10.0
    await wait_for(lambda: live(pods_of(cluster, "capped")) == [], what="its pod stopped")
    assert any(line["reason"] == "RunTimeLimitExceeded" for line in running.log_lines("task.phase"))


async def test_a_task_whose_spec_cannot_run_fails_with_the_reason_and_makes_no_pod(
    cluster: Cluster, api: KubeClient, user: User, start_scheduler: StartScheduler
) -> None:
    await start_scheduler(parse_config(QUOTA))
    # A minimum above the replicas passes the CRD's schema, not the controller's reading.
    await create_task(api, Task("odd", "team-a").role("worker", 2, 3, cpu="1"))
    await wait_for(lambda: status_of(cluster, "odd").get("phase") == "Failed", what="refused")
    status = status_of(cluster, "odd")
    assert status["reason"] == "InvalidSpec"
    assert status["message"] == "spec.roles[0].minimum (3) is above its replicas (2)"
    assert pods_of(cluster, "odd") == []


async def test_task_rules_place_a_large_nlp_model_on_nvlink_nodes_and_keep_notebooks_off_gang_nodes(
    cluster: Cluster, api: KubeClient, user: User, start_scheduler: StartScheduler
) -> None:
    rules = [{"name": "large-nlp-on-nvlink", "domain": "NLP", "minModelParameters": 10_000_000_000,
              "prefer": {"ai-scheduler.io/nvlink": "full"}, "weight": 100},
             {"name": "notebooks-off-gang-nodes", "kind": "notebook", "avoid": {"pool": "large-gangs"},
              "weight": 100}]
    await start_scheduler(parse_config({**QUOTA, "taskRules": rules}))
    nodes = [make_node("plain", cpu="32", memory="128Gi", gpus=8),
             make_node("nvlink", cpu="32", memory="128Gi", gpus=8, labels={"ai-scheduler.io/nvlink": "full",
                                                                           "pool": "large-gangs"})]
    await create_all(api, nodes, [])
    await create_task(api, Task("llm", "team-a").role("worker", 2, cpu="1", gpus=1, duration=600)
                      .attributes(kind="training", domain="NLP", modelParameters=70_000_000_000))
    await create_task(api, Task("nb", "team-a").role("main", 1, cpu="1", gpus=1, duration=600)
                      .attributes(kind="notebook", domain="NLP", modelParameters=1_000_000))
    await wait_for(lambda: all(status_of(cluster, name).get("phase") == "Running" for name in ("llm", "nb")),
                   what="both running")
    assert {p["spec"]["nodeName"] for p in pods_of(cluster, "llm")} == {"nvlink"}
    assert {p["spec"]["nodeName"] for p in pods_of(cluster, "nb")} == {"plain"}
    assert [a["rule"] for a in status_of(cluster, "llm")["systemAffinity"]] == ["large-nlp-on-nvlink"]
    assert status_of(cluster, "nb")["systemAffinity"] == [{
        "rule": "notebooks-off-gang-nodes", "prefer": {}, "avoid": {"pool": "large-gangs"}, "weight": 100,
        "required": False}]


@pytest.mark.backend("kube", reason="kubectl's printer columns come from the CRD on a real API server")
async def test_kubectl_get_tasks_shows_phase_position_start_and_gpus(
    cluster: Cluster, api: KubeClient, user: User, start_scheduler: StartScheduler
) -> None:
    assert isinstance(cluster, KubeCluster)
    await start_scheduler(parse_config(QUOTA))
    await create_all(api, [make_node("gpu-0", cpu="32", memory="128Gi", gpus=8)], [])
    await create_task(api, Task("shown", "team-a").role("worker", 2, cpu="1", gpus=1, duration=600))
    await wait_for(lambda: status_of(cluster, "shown").get("phase") == "Running", what="running")
    header, row = cluster.plane.kubectl("get", "tasks", "-n", "team-a", "-o", "wide").stdout.splitlines()[:2]
    names = ["NAME", "PHASE", "POSITION", "PREDICTED START", "GPUS", "REASON", "AGE"]
    starts = [header.index(name) for name in names]
    ends: list[int | None] = [*starts[1:], None]
    cells = {name: row[start:end].strip() for name, start, end in zip(names, starts, ends, strict=True)}
    # Running: no place in the queue and no predicted start any more (empty cells), 2 GPUs held.
    assert cells == {"NAME": "shown", "PHASE": "Running", "POSITION": "", "PREDICTED START": "", "GPUS": "2",
                     "REASON": "Running", "AGE": cells["AGE"]}
