"""`ai-scheduler tune` at scale (tracesim/tune.py): on the daemon's replayable log, with trials in parallel
processes through Optuna's shared storage (an SQLite file, a real PostgreSQL), resumed by a later run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import yaml
from paths import DATA

from ai_scheduler.cli import main
from ai_scheduler.config import load_config
from ai_scheduler.daemon.history import node_spec, pod_spec
from ai_scheduler.log import rfc3339
from ai_scheduler.trace import read_cluster, read_workload
from ai_scheduler.trace.pods import pod_of
from ai_scheduler.tracesim.objective import parse_objective
from ai_scheduler.tracesim.replay import read_log
from ai_scheduler.tracesim.tune import tune

CLUSTER, TRACE, CONFIG = DATA / "cluster_tune.csv", DATA / "trace_tune.csv", DATA / "config_tune.yaml"
OBJECTIVE = "minimize levels[1].wait_mean subject to gpu_alloc_mean >= 0.98 * fifo.gpu_alloc_mean"
T0 = 1_800_000_000.0


def line(at: float, event: str, **fields: Any) -> bytes:
    return orjson.dumps({"ts": rfc3339(at), "level": "info", "event": event, "v": 1, **fields})


def history_of_the_sample(path: Path) -> Path:
    """The replayable log a daemon would have written running the tune sample: its config, nodes, every
    pod as it arrived, placed at once, and its end after its run time."""
    config = yaml.safe_load(CONFIG.read_text())
    lines = [line(T0, "config.active", path=str(CONFIG), config=config)]
    lines += [line(T0, "node.spec", node=node.name, object=node_spec(node.to_node()))
              for node in read_cluster(CLUSTER)]
    lines.append(line(T0 + 0.001, "scheduler.ready"))
    for index, job in enumerate(read_workload(TRACE).jobs):
        uid = f"uid-{index}"
        pod = pod_of(job, scheduler_name="ai-scheduler", uid=uid)
        key = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
        arrival = T0 + 1 + job.submit_time
        lines.append(line(arrival, "pod.spec", pod=key, uid=uid, object=pod_spec(pod)))
        lines.append(line(arrival + 0.01, "decision", pod=key, uid=uid, result="scheduled", node="n0"))
        lines.append(line(arrival + 0.01 + (job.duration or 0.0), "pod.finished", uid=uid, phase="Succeeded"))
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def test_tune_reads_the_cluster_and_workload_from_the_daemons_log(tmp_path: Path) -> None:
    log = history_of_the_sample(tmp_path / "scheduler.log")
    replay = read_log([log])
    assert len(replay.jobs) == len(read_workload(TRACE).jobs)
    assert len(replay.nodes) == len(read_cluster(CLUSTER))
    result = tune(load_config(CONFIG), replay.nodes, replay.jobs, parse_objective(OBJECTIVE), trials=6)
    assert result.trials == 6 and result.tuned is not None
    assert result.fifo.figures["pods"] == len(replay.jobs)
    # The command, with the logged config.
    out = tmp_path / "tuned.yaml"
    code = main(["tune", "--log", str(log), "--objective", OBJECTIVE, "--trials", "4", "--out", str(out)])
    assert code == 0 and yaml.safe_load(out.read_text())["activePolicy"] == "tuned"


def test_trials_run_in_parallel_processes_through_shared_storage_and_a_later_run_resumes(
    database: str, tmp_path: Path
) -> None:
    storage = database if database.startswith("postgresql") else f"sqlite:///{tmp_path / 'optuna.db'}"
    config, nodes, jobs = load_config(CONFIG), read_cluster(CLUSTER), read_workload(TRACE).jobs
    objective = parse_objective(OBJECTIVE)
    first = tune(config, nodes, jobs, objective, trials=6, storage=storage, study_name="nightly", workers=2)
    assert first.trials == 6 and first.tuned is not None
    # A later run (another process, another machine: the same storage) goes on to 10, not 10 more.
    later = tune(config, nodes, jobs, objective, trials=10, storage=storage, study_name="nightly")
    assert later.trials == 10 and later.history[:6] == first.history
    assert later.tuned is not None and later.tuned.value is not None and first.tuned.value is not None
    assert not objective.better(first.tuned.value, later.tuned.value)  # never worse with more trials
    import optuna

    study = optuna.load_study(study_name="nightly", storage=storage.replace("postgresql://",
                                                                            "postgresql+psycopg://"))
    starts = [t for t in study.trials if t.number == 0]
    assert len(study.trials) == 10 and starts and set(starts[0].params) >= set(config.policy.weights)
