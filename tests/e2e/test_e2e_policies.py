"""Policies and quotas end to end: simulated kubelets run pods for their declared durations."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import yaml
from backends import Cluster
from builders import Pod, make_node, make_pod
from conftest import StartScheduler, create_all, replace_atomically, wait_for

from ai_scheduler.api.kube import KubeClient
from ai_scheduler.config import load_config, parse_config
from e2e.test_e2e_scheduling import pod_condition

BASE: dict[str, Any] = {
    "server": {"port": 0, "bindAddress": "127.0.0.1"},
    "scheduling": {"initialBackoffSeconds": 0.01, "maxBackoffSeconds": 0.05, "priorityRefreshSeconds": 0.2},
    "groups": {"vision": {"max": {"nvidia.com/gpu": 6}}},
    "users": {"alice": {"group": "vision", "max": {"nvidia.com/gpu": 4}}, "bob": {"group": "vision"}},
    "namespaces": {"team-a": {"user": "alice"}, "team-b": {"user": "bob"}},
    "policies": {
        "small-first": {"weights": {"jobSize": -1}},
        "by-priority": {"weights": {"taskPriority": 1}},
    },
}


def write_config(path: Path, active: str) -> None:
    replace_atomically(path, yaml.safe_dump({**BASE, "activePolicy": active}))


def job(name: str, cpu: int, priority: int, duration: float = 0.15) -> dict[str, Any]:
    return Pod(name, cpu=str(cpu), memory="1Gi", priority=priority, duration=duration).obj()


def bind_order(running: Any, names: set[str]) -> list[str]:
    return [
        d["pod"].split("/")[1]
        for d in running.log_lines("decision")
        if d["result"] == "scheduled" and d["pod"].split("/")[1] in names
    ]


async def test_a_policies_give_different_orders_and_a_reload_switches_live(
    tmp_path: Path, cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    path = tmp_path / "config.yaml"
    write_config(path, "small-first")
    # One pod slot: the queue's order is the order in which pods run. The x jobs share one priority
    # class value, so that none preempts another for the slot (x3 would evict x1 otherwise, on whichever
    # backend keeps x1 running long enough to be a victim).
    await create_all(
        api,
        [make_node("slot", cpu="16", memory="64Gi", pods=1)],
        [job("x1", 1, 1), job("x2", 2, 1), job("x3", 3, 1)],
    )
    running = await start_scheduler(load_config(path), config_path=str(path), config_poll_seconds=0.05)
    await wait_for(lambda: len(bind_order(running, {"x1", "x2", "x3"})) == 3, what="x jobs run")
    assert bind_order(running, {"x1", "x2", "x3"}) == ["x1", "x2", "x3"], "small first"
    decision = next(d for d in running.log_lines("decision") if d["pod"] == "default/x2")
    assert decision["policy"] == "small-first" and set(decision["factors"]) == {"jobSize"}

    write_config(path, "by-priority")
    await wait_for(lambda: running.log_lines("config.reloaded"), what="the new policy applied")
    # The blocker holds the slot until all three y jobs are waiting (creating them can take a second on a
    # loaded real API server); then they run in the new policy's order. It outranks them, so that none of
    # them preempts it for the node's one pod slot.
    await create_all(api, [], [job("blocker", 1, 10, duration=2.0)])
    await wait_for(lambda: bind_order(running, {"blocker"}), what="blocker running")
    await create_all(api, [], [job("y1", 1, 1), job("y2", 2, 2), job("y3", 3, 3)])
    await wait_for(lambda: len(bind_order(running, {"y1", "y2", "y3"})) == 3, what="y jobs run")
    assert bind_order(running, {"y1", "y2", "y3"}) == ["y3", "y2", "y1"], "highest priority first"


async def test_b_user_and_group_max_are_never_exceeded(
    tmp_path: Path, cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    path = tmp_path / "config.yaml"
    write_config(path, "by-priority")
    running = await start_scheduler(load_config(path))
    nodes = [make_node(f"gpu-{i}", cpu="32", memory="128Gi", gpus=8) for i in range(2)]
    # Each pod runs long enough (1 s) that six are bound at once even on a loaded API server, so that the
    # group's max is reached and the check below is tight.
    pods = [
        make_pod(f"a-{i}", namespace="team-a", gpus=1, cpu="1", memory="1Gi", duration=1.0) for i in range(10)
    ]
    pods += [
        make_pod(f"b-{i}", namespace="team-b", gpus=1, cpu="1", memory="1Gi", duration=1.0) for i in range(10)
    ]
    await create_all(api, nodes, pods)

    def in_use(prefix: str) -> int:
        return sum(
            1
            for p in cluster.store.list("pods", "team-a" if prefix == "a-" else "team-b")
            if p["spec"].get("nodeName") and p.get("status", {}).get("phase") != "Succeeded"
        )

    peaks = {"alice": 0, "group": 0}
    refused = set()
    while True:
        alice, bob = in_use("a-"), in_use("b-")
        peaks["alice"] = max(peaks["alice"], alice)
        peaks["group"] = max(peaks["group"], alice + bob)
        for p in cluster.store.list("pods", "team-a") + cluster.store.list("pods", "team-b"):
            message = pod_condition(cluster, p["metadata"]["name"], p["metadata"]["namespace"]).get(
                "message", ""
            )
            if message.startswith("exceeds quota"):
                refused.add(message.split(":")[0])
        done = [
            p
            for p in cluster.store.list("pods", "team-a") + cluster.store.list("pods", "team-b")
            if p.get("status", {}).get("phase") == "Succeeded"
        ]
        if len(done) == 20:
            break
        await asyncio.sleep(0.01)
    assert peaks["alice"] <= 4 and peaks["group"] <= 6, peaks
    assert peaks["group"] == 6, "the group's max was reached, so the check was tight"
    assert refused >= {"exceeds quota of group vision"}
    lines = running.log_lines("admission.refused")
    assert lines and all(line["group"] == "vision" for line in lines)


async def test_c_a_starved_higher_level_is_promoted_past_a_continuous_stream(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    """A one-slot node kept busy by level-0 (prod) pods that arrive faster than they run: the level-1
    (batch) pod would wait for as long as the stream lasts, but its queue's promoteAfterSeconds orders
    it at level 0 after half a second, and it takes the slot while prod pods it overtook still wait."""
    config = parse_config(
        {
            **BASE,
            "queues": [
                {"name": "prod", "level": 0},
                {"name": "batch", "level": 1, "promoteAfterSeconds": 0.5},
            ],
            "activePolicy": "by-priority",
        }
    )

    def queued(name: str, queue: str) -> dict[str, Any]:
        # One priority for all: a pod of another priority could preempt for the slot instead of waiting.
        return make_pod(name, cpu="1", memory="1Gi", priority=1, duration=0.3,
                        labels={"ai-scheduler.io/queue": queue})

    await create_all(api, [make_node("slot", cpu="16", memory="64Gi", pods=1)], [queued("prod-0", "prod")])
    running = await start_scheduler(config)
    await wait_for(lambda: bind_order(running, {"prod-0"}), what="the stream running")

    async def stream() -> None:
        # Three arrivals per run time: the backlog only grows. ~10 s at most; ended once batch is placed.
        for i in range(1, 100):
            await create_all(api, [], [queued(f"prod-{i}", "prod")])
            await asyncio.sleep(0.1)

    feeding = asyncio.create_task(stream())
    try:
        await asyncio.sleep(0.5)  # a backlog of prod pods is waiting before the batch pod comes
        await create_all(api, [], [queued("batch", "batch")])
        await wait_for(lambda: bind_order(running, {"batch"}), timeout=10, what="the batch pod placed")
    finally:
        feeding.cancel()
    decisions = running.log_lines("decision")
    placed = next(
        i for i, d in enumerate(decisions) if d["pod"] == "default/batch" and d["result"] == "scheduled"
    )
    assert decisions[placed]["promoted"] is True and decisions[placed]["queueLevel"] == 0
    assert decisions[placed]["wait_ms"] >= 500, "not before it had waited promoteAfterSeconds"
    earlier = [d for d in decisions[:placed] if d["pod"] == "default/batch"]
    assert earlier and all("promoted" not in d for d in earlier), "tried, and refused the slot, before"
    # Prod pods that were already waiting (tried and found no room) when the batch pod took the slot.
    waiting = {d["pod"] for d in decisions[:placed] if d["pod"].startswith("default/prod-")} - {
        d["pod"] for d in decisions[:placed] if d["result"] == "scheduled"
    }
    assert waiting, "the stream was not exhausted: level 0 still had work"


async def test_d_a_strict_fifo_queue_starts_nothing_behind_its_waiting_head(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    """A 4-core node, 2 cores held by `hold` for 3 s: `big` (4 cores) waits for them. `small` (1 core)
    would fit beside `hold`, but its queue is StrictFIFO: it is parked behind `big`, says so on its
    PodScheduled condition, and starts only after `big` started (and, with no room beside it, ended)."""
    config = parse_config({**BASE, "queues": [{"name": "default", "queueingStrategy": "StrictFIFO"}],
                           "activePolicy": "by-priority"})  # one priority for all: arrival orders them

    def queued(name: str, cpu: int, duration: float) -> dict[str, Any]:
        return make_pod(name, cpu=str(cpu), memory="1Gi", priority=1, duration=duration)

    await create_all(api, [make_node("n", cpu="4", memory="64Gi")], [queued("hold", 2, 3.0)])
    running = await start_scheduler(config)
    await wait_for(lambda: bind_order(running, {"hold"}), what="hold running")
    await create_all(api, [], [queued("big", 4, 0.5)])
    await wait_for(lambda: any(d["pod"] == "default/big" and d["result"] == "unschedulable"
                               for d in running.log_lines("decision")), what="big waiting")
    await create_all(api, [], [queued("small", 1, 0.2)])
    reason = "waiting behind default/big in StrictFIFO queue default"
    await wait_for(lambda: pod_condition(cluster, "small").get("message") == reason, what="small parked")
    assert not bind_order(running, {"small"}), "small did not pass big"
    parked = [d for d in running.log_lines("decision") if d["pod"] == "default/small"]
    assert parked and all(d["result"] == "parked" for d in parked)
    assert {d["strictFifo"]["head"] for d in parked} == {"default/big"}
    await wait_for(lambda: len(bind_order(running, {"big", "small"})) == 2, timeout=15, what="both run")
    assert bind_order(running, {"hold", "big", "small"}) == ["hold", "big", "small"]
