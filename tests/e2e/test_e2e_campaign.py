"""A seeded fault campaign: a few hundred pods, gangs and GPU shares while every kind of fault strikes.

The workload arrives in waves; between waves the campaign injects faults at random moments, each kind
at least once: watch streams cut, a dead peer (no byte moves, then only new connections work), requests
held while events still flow, connections refused, the watch history compacted away (410 Gone), the API
server stopped and started, a binding made by someone else while ours is on its way, garbled watch lines
(the simulated server only: a real one cannot be made to send them), and the daemon killed mid-cycle (its
task cancelled: no drain, no goodbye) and started afresh with an empty cache. Then the invariants:

- no pod bound twice (each binding answered 201 at most once) and none moved (a bound pod's node never
  changes);
- no resource of any node and no GPU device over-committed;
- no gang with fewer than its minimum bound;
- every pending pod carries a reason (PodScheduled=False with a message);
- no pending pod that fits: once the faults stop, whatever has room is placed.

`AI_SCHEDULER_CAMPAIGN_SEED` picks the seed (printed, with what was injected, in the test's output);
`AI_SCHEDULER_CAMPAIGN_SECONDS` turns it into a soak: waves and faults go on for that long.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from backends import Cluster, SimCluster
from builders import make_node, make_pod
from conftest import RunningScheduler, StartScheduler, create_all, stored_pod, wait_for

from ai_scheduler.api.kube import KubeClient
from ai_scheduler.cache.gangs import POD_GROUP_LABEL
from ai_scheduler.cache.gpus import GPU_COUNT_ANNOTATION, GPU_MEMORY_ANNOTATION
from ai_scheduler.quantity import to_units
from e2e.test_e2e_gangs import podgroup
from e2e.test_e2e_gpus import (  # noqa: F401  (gpu_cluster: a fixture, used by name)
    DEVICE,
    assert_devices_not_overcommitted,
    gpu_cluster,
    gpu_config,
    placements,
    share,
    whole,
)
from e2e.test_e2e_scheduling import assert_not_overcommitted

SEED = int(os.environ.get("AI_SCHEDULER_CAMPAIGN_SEED", "20261123"))
SOAK_SECONDS = float(os.environ.get("AI_SCHEDULER_CAMPAIGN_SECONDS", "0"))
CPU_NODES = [f"cpu-{i}" for i in range(6)]
GANG_SIZE = 3
ISLANDS = ([0, 1, 2, 3], [4, 5, 6, 7])  # the fake DGX's NVLink islands (test_e2e_gpus)


class Campaign:
    """The daemon under test, the faults, and a record of what was injected."""

    def __init__(self, cluster: Cluster, api: KubeClient, start: StartScheduler, rng: random.Random) -> None:
        self.cluster = cluster
        self.api = api
        self.start = start
        self.rng = rng
        self.running: RunningScheduler | None = None
        self.injected: list[str] = []
        self.began = time.monotonic()
        self.first_node: dict[str, str] = {}  # pod uid -> the node it was first seen bound to
        self.moved: list[str] = []

    async def start_daemon(self) -> None:
        self.running = await self.start(gpu_config(), wait_ready=False)

    def note(self, what: str) -> None:
        self.injected.append(f"{time.monotonic() - self.began:5.1f}s {what}")

    def watch_nodes(self) -> None:
        """Called often: a bound pod's node must never change."""
        for pod in self.cluster.store.list("pods"):
            node = pod["spec"].get("nodeName")
            uid = pod["metadata"]["uid"]
            if node and self.first_node.setdefault(uid, node) != node:
                self.moved.append(f"{pod['metadata']['name']}: {self.first_node[uid]} -> {node}")

    # ------------------------------------------------------------------ faults
    async def cut(self) -> None:
        self.note(f"cut {self.cluster.cut_watches()} connections")

    async def dead_peer(self) -> None:
        seconds = self.rng.uniform(1.0, 2.5)
        self.note(f"dead peer for {seconds:.1f}s")
        self.cluster.proxy.blackhole(forever=True)
        await asyncio.sleep(seconds)
        self.cluster.proxy.forward()

    async def hold(self) -> None:
        seconds = self.rng.uniform(0.3, 1.5)
        self.note(f"requests held for {seconds:.1f}s")
        self.cluster.proxy.hold_requests()
        await asyncio.sleep(seconds)
        self.cluster.proxy.forward()

    async def refuse(self) -> None:
        seconds = self.rng.uniform(0.5, 2.0)
        self.note(f"connections refused for {seconds:.1f}s")
        self.cluster.proxy.refuse()
        self.cluster.proxy.cut()
        await asyncio.sleep(seconds)
        self.cluster.proxy.forward()

    async def expire(self) -> None:
        self.note("watch history compacted (410 Gone)")
        await self.cluster.expire_watches()

    async def outage(self) -> None:
        seconds = self.rng.uniform(1.0, 3.0)
        self.note(f"API server stopped for {seconds:.1f}s")
        await self.cluster.outage(seconds)

    async def garble(self) -> None:
        assert isinstance(self.cluster, SimCluster)
        self.note(f"garbled {self.cluster.sim.garble_watches()} watch streams")

    async def bind_first(self) -> None:
        """Someone else binds a pod the daemon has just chosen, while the daemon's own binding is held."""
        assert self.running is not None
        name = f"bind-first-{len(self.injected)}"
        self.cluster.proxy.hold_requests()
        try:
            await create_all(self.api, [], [make_pod(name, cpu="100m", memory="128Mi")])
            deadline = time.monotonic() + 3
            while time.monotonic() < deadline:
                chosen = [d["node"] for d in self.running.log_lines("decision")
                          if d["pod"] == f"default/{name}" and d.get("node")]
                if chosen:
                    uid = stored_pod(self.cluster, name)["metadata"]["uid"]
                    result = await self.api.bind("default", name, uid, chosen[0])
                    self.note(f"bound {name} to {chosen[0]} before the daemon did: HTTP {result.status}")
                    return
                await asyncio.sleep(0.05)
            self.note(f"bind-first: no decision for {name} while held")
        finally:
            self.cluster.proxy.forward()

    async def kill(self) -> None:
        """The daemon dies mid-cycle (no drain) and a new one starts with nothing but the API server."""
        assert self.running is not None
        self.note("daemon killed and restarted")
        self.running.task.cancel()
        await asyncio.gather(self.running.task, return_exceptions=True)
        await self.running.client.close()
        await self.start_daemon()

    def kinds(self) -> dict[str, Callable[[], Awaitable[None]]]:
        kinds: dict[str, Callable[[], Awaitable[None]]] = {
            "cut": self.cut, "dead-peer": self.dead_peer, "hold": self.hold, "refuse": self.refuse,
            "expire": self.expire, "outage": self.outage, "bind-first": self.bind_first, "kill": self.kill,
        }
        if isinstance(self.cluster, SimCluster):
            kinds["garble"] = self.garble
        return kinds


def workload(wave: int, rng: random.Random) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """PodGroups and pods of one wave: plain pods (some finish), gangs, GPU shares and whole GPUs."""
    groups, pods = [], []
    for i in range(24):
        duration = rng.choice([None, None, rng.uniform(1, 4)])
        cpu = rng.choice(["500m", "1", "1500m", "2"])
        pods.append(make_pod(f"w{wave}-plain-{i}", cpu=cpu, memory="1Gi", duration=duration))
    for g in range(2):
        name = f"w{wave}-gang-{g}"
        groups.append(podgroup(name, GANG_SIZE))
        pods += [make_pod(f"{name}-{i}", cpu="2", memory="1Gi", labels={POD_GROUP_LABEL: name})
                 for i in range(GANG_SIZE)]
    for i in range(6):
        pods.append(share(f"w{wave}-share-{i}", rng.choice(["10Gi", "20Gi", "40Gi", "70Gi"])))
    for i in range(2):
        pods.append(whole(f"w{wave}-whole-{i}", rng.choice([1, 2])))
    pods.append(make_pod(f"w{wave}-too-big", cpu="100", memory="1Gi"))  # fits nowhere: waits with a reason
    return groups, pods


# ---------------------------------------------------------------------------------------- invariants
def ours_pending(cluster: Cluster) -> list[dict[str, Any]]:
    return [
        p for p in cluster.store.list("pods")
        if p["spec"].get("schedulerName") == "ai-scheduler" and not p["spec"].get("nodeName")
        and not p["metadata"].get("deletionTimestamp")
    ]


def without_reason(cluster: Cluster) -> list[str]:
    missing = []
    for pod in ours_pending(cluster):
        conditions = pod.get("status", {}).get("conditions", [])
        scheduled: dict[str, Any] = next((c for c in conditions if c["type"] == "PodScheduled"), {})
        if scheduled.get("status") != "False" or not scheduled.get("message"):
            missing.append(pod["metadata"]["name"])
    return missing


def free_room(cluster: Cluster) -> dict[str, dict[str, int]]:
    """Per node: what is left of cpu, memory and pod slots after the pods that count there."""
    resources = ("cpu", "memory", "pods")
    room = {
        n["metadata"]["name"]: {r: to_units(r, n["status"]["allocatable"][r]) for r in resources}
        for n in cluster.store.list("nodes")
    }
    for pod in cluster.store.list("pods"):
        node = pod["spec"].get("nodeName")
        if not node or node not in room or pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
            continue
        room[node]["pods"] -= 1
        for resource, value in pod["spec"]["containers"][0]["resources"].get("requests", {}).items():
            if resource in ("cpu", "memory"):
                room[node][resource] -= to_units(resource, value)
    return room


def fitting_but_pending(cluster: Cluster, reserved: tuple[set[str], frozenset[str]]) -> list[str]:
    """Pending non-gang pods that some node has room for now (cpu, memory, slots, and GPU devices).

    `reserved`: the nodes held against starvation and the pods they are held for; no other pod may use
    them (backfill is off by default), so they do not count as room for others."""
    reserved_nodes, reserved_for = reserved
    room = free_room(cluster)
    # Managed node -> free bytes per device (test_e2e_gpus's fake DGX: 8 devices of 80 GiB).
    devices = {node: [DEVICE] * 8 for node in room if node.startswith("dgx-")}
    for (node, index), holders in placements(cluster).items():
        for pod in holders:
            annotations = pod["metadata"]["annotations"]
            if GPU_COUNT_ANNOTATION in annotations:
                devices[node][index] = 0
            elif GPU_MEMORY_ANNOTATION in annotations:
                devices[node][index] -= to_units("memory", annotations[GPU_MEMORY_ANNOTATION])
    fits = []
    for pod in ours_pending(cluster):
        if POD_GROUP_LABEL in pod["metadata"].get("labels", {}):
            continue  # a gang's members fit together or not at all: the gang invariant covers them
        requests = pod["spec"]["containers"][0]["resources"].get("requests", {})
        want = {r: to_units(r, requests.get(r, "0")) for r in ("cpu", "memory")}
        annotations = pod["metadata"].get("annotations", {})
        for node, left in room.items():
            if left["pods"] < 1 or any(left[r] < want[r] for r in want):
                continue
            if node in reserved_nodes and pod["metadata"]["uid"] not in reserved_for:
                continue
            if GPU_MEMORY_ANNOTATION in annotations:
                need = to_units("memory", annotations[GPU_MEMORY_ANNOTATION])
                if node not in devices or max(devices[node]) < need:
                    continue
            if GPU_COUNT_ANNOTATION in annotations:
                count = int(annotations[GPU_COUNT_ANNOTATION])
                free = devices.get(node, [])
                if not free or not any(sum(free[i] == DEVICE for i in island) >= count for island in ISLANDS):
                    continue
            conditions = pod.get("status", {}).get("conditions", [])
            said = next((c.get("message") for c in conditions if c["type"] == "PodScheduled"), None)
            fits.append(f"{pod['metadata']['name']} fits on {node} ({left}, devices {devices.get(node)}), "
                        f"was told {said!r}")
            break
    return fits


def gangs_below_minimum(cluster: Cluster) -> list[str]:
    bound: dict[str, int] = defaultdict(int)
    for pod in cluster.store.list("pods"):
        gang = pod["metadata"].get("labels", {}).get(POD_GROUP_LABEL)
        if gang and pod["spec"].get("nodeName"):
            bound[gang] += 1
    return [f"{gang}: {count} of {GANG_SIZE}" for gang, count in bound.items() if 0 < count < GANG_SIZE]


# ---------------------------------------------------------------------------------------------- the test
@pytest.mark.usefixtures("gpu_cluster")  # four DGX nodes whose agents report their GPUs
async def test_fault_campaign_keeps_every_invariant(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler, capsys: pytest.CaptureFixture[str]
) -> None:
    rng = random.Random(f"{SEED}-{type(cluster).__name__}")
    await create_all(api, [make_node(name, cpu="4", memory="16Gi") for name in CPU_NODES], [])
    campaign = Campaign(cluster, api, start_scheduler, rng)
    await campaign.start_daemon()
    kinds = campaign.kinds()
    # Every kind once, a few more of the cheap ones, in a seeded order; soak mode keeps drawing.
    plan = list(kinds) + rng.choices(["cut", "hold", "refuse", "bind-first", "kill", "dead-peer"], k=4)
    rng.shuffle(plan)
    waves = 6
    deadline = time.monotonic() + SOAK_SECONDS
    wave = 0
    while plan or wave < waves or time.monotonic() < deadline:
        if wave < waves or time.monotonic() < deadline:
            groups, pods = workload(wave, rng)
            for group in groups:
                assert (await api.create_podgroup(group)).ok
            await create_all(api, [], pods)
            wave += 1
        for _ in range(rng.randint(1, 3)):
            if not plan and time.monotonic() < deadline:
                plan.append(rng.choice(list(kinds)))
            if plan:
                await asyncio.sleep(rng.uniform(0.0, 1.0))
                campaign.watch_nodes()
                await kinds[plan.pop()]()
                campaign.watch_nodes()
    with capsys.disabled():
        print(f"\ncampaign seed {SEED} on {type(cluster).__name__}, {wave} waves, injected:")
        for line in campaign.injected:
            print(f"  {line}")

    # Settled: the last daemon places whatever has room and gives the rest a reason.
    def reserved() -> tuple[set[str], frozenset[str]]:
        assert campaign.running is not None
        held = campaign.running.scheduler.reserver.current
        return (set(held.nodes), held.uids) if held is not None else (set(), frozenset())

    async def settled() -> bool:
        campaign.watch_nodes()
        return not fitting_but_pending(cluster, reserved()) and not without_reason(cluster)

    deadline_s = 60
    end = time.monotonic() + deadline_s
    while not await settled():
        fits, silent = fitting_but_pending(cluster, reserved()), without_reason(cluster)
        assert time.monotonic() < end, (
            f"not settled after {deadline_s} s: fits but pending {fits[:5]}, no reason {silent[:5]}"
        )
        await asyncio.sleep(0.2)
    await cluster.synced()
    campaign.watch_nodes()
    assert campaign.moved == []
    assert cluster.pods_bound_twice() == []
    assert_not_overcommitted(cluster)
    assert_devices_not_overcommitted(cluster)
    assert gangs_below_minimum(cluster) == []
    bound = sum(1 for p in cluster.store.list("pods") if p["spec"].get("nodeName"))
    assert bound > 100, f"only {bound} pods bound: the campaign barely ran"
    last = campaign.running
    assert last is not None
    await wait_for(lambda: last.scheduler.cache.assumed_count == 0, what="every assumption confirmed")
    assert last.scheduler.cache.check_consistency() == []
