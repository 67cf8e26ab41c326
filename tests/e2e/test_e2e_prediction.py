"""Learned run times end to end: `ai-scheduler learn` writes a model, the daemon loads it from its config
(`prediction.model`) and a pod without an estimate is ordered and logged with a predicted run time.

The model is fitted on tests/data/trace_history.csv (users u00..u09 of groups g0..g2, in namespaces
team-g0..team-g2, whose jobs are regular per user and kind). The pods are made as the simulator makes
a trace job's pod (trace/pods.py), so that the daemon reads the features the model learnt from.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from backends import Cluster
from builders import make_node
from conftest import StartScheduler, create_all, wait_for
from paths import DATA

from ai_scheduler.api.kube import KubeClient
from ai_scheduler.cli import main
from ai_scheduler.config import load_config
from ai_scheduler.trace import TraceJob
from ai_scheduler.trace.pods import pod_of

pytestmark = pytest.mark.e2e

HISTORY = DATA / "trace_history.csv"
GIB = 2**30


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("model") / "runtime.npz"
    assert main(["learn", "--trace", str(HISTORY), "--out", str(out)]) == 0
    return out


async def test_a_pod_without_an_estimate_gets_a_predicted_run_time(
    tmp_path: Path, model: Path, cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    path = tmp_path / "config.yaml"
    config: dict[str, Any] = {
        "server": {"port": 0, "bindAddress": "127.0.0.1"},
        "scheduling": {"initialBackoffSeconds": 0.05, "maxBackoffSeconds": 0.2},
        "prediction": {"model": str(model)},
        "policies": {"short-first": {"weights": {"estimatedRuntime": -1}}},
    }
    path.write_text(yaml.safe_dump(config))
    # A one-slot node: a blocker runs, then the two waiting pods in the policy's order.
    blocker = pod_of(TraceJob("blocker", 0.0, cpu=1000, memory=GIB, estimate=3600.0),
                     scheduler_name="ai-scheduler")
    long_job = pod_of(TraceJob("declared-long", 0.0, cpu=1000, memory=GIB, user="u03", group="g1",
                               namespace="team-g1", estimate=100 * 3600.0), scheduler_name="ai-scheduler")
    guess = pod_of(TraceJob("resnet50-train-9999", 0.0, cpu=6000, memory=48 * GIB, user="u09", group="g0",
                            namespace="team-g0", task_type="inference", workload_class="cv"),
                   scheduler_name="ai-scheduler")
    await create_all(api, [make_node("slot", cpu="64", memory="512Gi", pods=1)], [blocker])
    running = await start_scheduler(load_config(path), config_path=str(path))
    assert running.log_lines("prediction.ready")[0]["model"] == str(model)
    await wait_for(lambda: [d for d in running.log_lines("decision") if d["result"] == "scheduled"],
                   what="the blocker placed")
    # The declared pod first: its 100 h is then the longest the policy has seen when the other comes.
    await create_all(api, [], [long_job])
    await wait_for(lambda: [d for d in running.log_lines("decision") if d["pod"] == "team-g1/declared-long"],
                   what="the declared pod tried")
    await create_all(api, [], [guess])

    def tried() -> dict[str, dict[str, Any]]:
        lines = {d["pod"].split("/")[1]: d for d in running.log_lines("decision")}
        return lines if {"declared-long", "resnet50-train-9999"} <= lines.keys() else {}

    lines = await wait_for(tried, what="both pods tried")
    predicted, declared = lines["resnet50-train-9999"], lines["declared-long"]
    assert predicted["runtime"]["source"] == "prediction"
    assert 0 < predicted["runtime"]["median_s"] <= predicted["runtime"]["upper_s"] < 24 * 3600
    assert declared["runtime"] == {"median_s": 360000.0, "upper_s": 360000.0, "source": "annotation"}
    # The policy read the prediction: shorter than the declared 100 h, so a factor below it (a pod with
    # no run time at all would count as the longest, 1.0).
    assert predicted["factors"]["estimatedRuntime"] < declared["factors"]["estimatedRuntime"] == 1.0
    assert predicted["priority"] > declared["priority"]
