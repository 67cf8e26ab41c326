"""Expected start times end to end: the daemon forecasts the waiting pods' starts by simulating its own
state (tracesim/forecast.py) and keeps them for its queue view (visibility.queue_view: what the
visibility API serves to users, tests/e2e/test_e2e_visibility.py), in queue order with their reasons."""

from __future__ import annotations

import time
from typing import Any

import pytest
from backends import Cluster
from builders import Pod, make_node
from conftest import StartScheduler, create_all, wait_for

from ai_scheduler.api.kube import KubeClient
from ai_scheduler.config import parse_config
from ai_scheduler.log import parse_time
from ai_scheduler.tracesim.forecast import forecaster
from ai_scheduler.visibility.resources import queue_view

pytestmark = pytest.mark.e2e

ESTIMATE = "ai-scheduler.io/estimated-runtime"
HOUR = 3600.0


def estimated_pod(name: str, gpus: int, estimate: str) -> dict[str, Any]:
    return Pod(name, gpus=gpus, cpu="1", memory="1Gi", annotations={ESTIMATE: estimate}).obj()


async def test_waiting_pods_are_served_in_order_with_reasons_and_expected_starts(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    config = parse_config({
        "server": {"port": 0, "bindAddress": "127.0.0.1"},
        "scheduling": {"initialBackoffSeconds": 0.05, "maxBackoffSeconds": 0.2},
        "prediction": {"forecastSeconds": 0.5},
    })
    await create_all(api, [make_node("gpu8", cpu="64", memory="512Gi", gpus=8)],
                     [estimated_pod("trainer", 8, "1h")])
    running = await start_scheduler(config, forecaster=forecaster)
    await wait_for(lambda: [d for d in running.log_lines("decision") if d["result"] == "scheduled"],
                   what="the trainer placed")
    placed_at = time.time()
    await create_all(api, [], [estimated_pod("next", 4, "30m")])
    await wait_for(lambda: [d for d in running.log_lines("decision") if d["pod"] == "default/next"],
                   what="next tried")
    await create_all(api, [], [estimated_pod("later", 8, "2h")])
    scheduler = running.scheduler

    def forecast_made() -> dict[str, Any] | None:
        view = queue_view(scheduler.core, scheduler.expected)
        pods = view["pods"]
        return view if len(pods) == 2 and all(p["expectedStart"] and p["reason"] for p in pods) else None

    view = await wait_for(forecast_made, timeout=30, interval=0.1, what="both pods forecast, with reasons")
    pods = {p["name"]: p for p in view["pods"]}
    assert set(pods) == {"next", "later"}, view
    assert (pods["next"]["position"], pods["later"]["position"]) == (1, 2)
    assert pods["next"]["positionInQueue"] == 1 and pods["next"]["queue"] == pods["later"]["queue"]
    assert "Insufficient nvidia.com/gpu" in pods["next"]["reason"]
    assert pods["next"]["runTime"] == {
        "medianSeconds": 1800.0, "upperSeconds": 1800.0, "source": "annotation"
    }
    # The trainer ends an hour after it started; next (4 GPUs) starts then, later (8) once next has ended.
    starts = {name: parse_time(pods[name]["expectedStart"]) for name in pods}
    assert abs((starts["next"] or 0) - (placed_at + HOUR)) < 60, view
    assert abs((starts["later"] or 0) - (placed_at + 1.5 * HOUR)) < 60, view
    assert view["forecastAt"] is not None and view["pending"] == 2
