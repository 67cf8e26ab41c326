"""Managed GPUs end to end: simulated node agents (the real NodeAgent on a fake NVML) report devices over
HTTP, the real scheduler places shares and whole GPUs, and writes the chosen devices onto each pod."""

from __future__ import annotations

import asyncio
import math
import random
from collections import defaultdict
from collections.abc import AsyncIterator
from typing import Any

import pytest
from backends import Cluster, SimCluster
from builders import make_node, make_pod
from conftest import RunningScheduler, StartScheduler, create_all, wait_for

from ai_scheduler.agent import FakeNvml, NodeAgent
from ai_scheduler.api.kube import KubeClient
from ai_scheduler.cache.gpus import (
    GPU_COUNT_ANNOTATION,
    GPU_FRACTION_ANNOTATION,
    GPU_IDS_ANNOTATION,
    GPU_MEMORY_ANNOTATION,
    GPU_UUIDS_ANNOTATION,
    GPUS_ANNOTATION,
    MANAGED_LABEL,
    UPDATED_ANNOTATION,
)
from ai_scheduler.config import parse_config
from ai_scheduler.quantity import to_units
from e2e.test_e2e_scheduling import pod_condition

GI = 2**30
DEVICE = 80 * GI


class Agents:
    """One NodeAgent per managed node, each on its own fake DGX; a paused agent is replaced by a new one,
    as a restarted agent pod would be."""

    def __init__(self, clients: dict[str, KubeClient], nvml: dict[str, FakeNvml] | None = None) -> None:
        self.clients = clients
        nodes = list(clients)
        self.nvml = nvml or {
            node: FakeNvml.dgx(count=8, memory_mib=81920, seed=node, islands=[[0, 1, 2, 3], [4, 5, 6, 7]])
            for node in nodes
        }
        self.agents = {node: self._agent(node) for node in nodes}
        self.tasks: dict[str, asyncio.Task[None]] = {}

    def _agent(self, node: str) -> NodeAgent:
        return NodeAgent(
            self.clients[node], node, nvml=self.nvml[node], interval=0.1, heartbeat=0.3, threaded=False
        )

    def start(self, node: str) -> None:
        if node not in self.agents:
            self.agents[node] = self._agent(node)
        self.tasks[node] = asyncio.create_task(self.agents[node].run())

    async def pause(self, node: str) -> None:
        self.agents.pop(node).stop()
        await self.tasks.pop(node)

    async def stop_all(self) -> None:
        for node in list(self.tasks):
            await self.pause(node)
        for client in self.clients.values():
            await client.close()


@pytest.fixture
async def gpu_cluster(cluster: Cluster, api: KubeClient) -> AsyncIterator[Agents]:
    names = [f"dgx-{i}" for i in range(4)]
    await create_all(
        api, [make_node(name, cpu="64", memory="512Gi", labels={MANAGED_LABEL: "true"}) for name in names], []
    )
    agents = Agents({name: await cluster.agent_client(name) for name in names})
    for name in names:
        await agents.agents[name].tick()  # the first report, before the scheduler starts
        agents.start(name)
    yield agents
    await agents.stop_all()


def gpu_config(**gpu: Any) -> Any:
    return parse_config(
        {
            "server": {"port": 0, "bindAddress": "127.0.0.1"},
            "gpu": gpu or None,
            "scheduling": {"initialBackoffSeconds": 0.05, "maxBackoffSeconds": 0.2},
        }
    )


def share(name: str, memory: str) -> dict[str, Any]:
    return make_pod(name, cpu="500m", memory="1Gi", annotations={GPU_MEMORY_ANNOTATION: memory})


def whole(name: str, count: int) -> dict[str, Any]:
    return make_pod(name, cpu="1", memory="1Gi", annotations={GPU_COUNT_ANNOTATION: str(count)})


def placements(cluster: Cluster) -> dict[tuple[str, int], list[dict[str, Any]]]:
    """(node, device) -> pods holding it, from what the scheduler wrote on the pods."""
    held: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for pod in cluster.store.list("pods"):
        ids = pod["metadata"].get("annotations", {}).get(GPU_IDS_ANNOTATION)
        if ids and pod["spec"].get("nodeName"):
            for i in ids.split(","):
                held[(pod["spec"]["nodeName"], int(i))].append(pod)
    return held


def assert_devices_not_overcommitted(cluster: Cluster) -> None:
    for (node, index), pods in placements(cluster).items():
        wholes = [p for p in pods if GPU_COUNT_ANNOTATION in p["metadata"]["annotations"]]
        shared = sum(
            to_units("memory", p["metadata"]["annotations"][GPU_MEMORY_ANNOTATION])
            for p in pods
            if GPU_MEMORY_ANNOTATION in p["metadata"]["annotations"]
        )
        assert not (wholes and (len(wholes) > 1 or shared)), f"{node}/{index} held whole and shared"
        assert shared <= DEVICE, f"{node}/{index} over-committed: {shared / GI} GiB"


def bound(cluster: Cluster, prefix: str) -> list[dict[str, Any]]:
    return [
        p
        for p in cluster.store.list("pods")
        if p["metadata"]["name"].startswith(prefix) and p["spec"].get("nodeName")
    ]


async def test_forty_shared_pods_best_fit_without_overcommit(
    cluster: Cluster, api: KubeClient, gpu_cluster: Agents, start_scheduler: StartScheduler
) -> None:
    running = await start_scheduler(gpu_config())
    rng = random.Random(11)
    sizes = [rng.choice(["5Gi", "10Gi", "20Gi", "40Gi", "60Gi"]) for _ in range(40)]
    await create_all(api, [], [share(f"infer-{i}", size) for i, size in enumerate(sizes)])
    await wait_for(lambda: len(bound(cluster, "infer-")) == 40, what="all 40 shared pods bound")
    assert_devices_not_overcommitted(cluster)
    devices_used = len(placements(cluster))
    lower_bound = math.ceil(sum(to_units("memory", s) for s in sizes) / DEVICE)
    assert devices_used <= lower_bound + 2, (
        f"best fit packs: {devices_used} devices for a minimum of {lower_bound}"
    )
    nodes_used = {node for node, _ in placements(cluster)}
    assert len(nodes_used) < 4, "binpack leaves whole nodes free"
    for pod in bound(cluster, "infer-"):
        annotations = pod["metadata"]["annotations"]
        uuids = annotations[GPU_UUIDS_ANNOTATION].split(",")
        assert len(uuids) == 1 and uuids[0].startswith("GPU-")
    decisions = [d for d in running.log_lines("decision") if d["result"] == "scheduled"]
    assert all("gpus" in d and len(d["gpus"]["ids"]) == 1 for d in decisions)
    metrics = running.scheduler.metrics.render().decode()
    shared = sum(to_units("memory", size) for size in sizes)
    values = {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line and not line.startswith("#")
    }
    assert values['ai_scheduler_gpu_cluster{measure="shared_bytes"}'] == shared
    assert 'ai_scheduler_gpu_devices{node="dgx-0"} 8.0' in metrics
    assert "ai_scheduler_gpu_fragmentation_ratio " in metrics


async def test_whole_gpus_stay_in_nvlink_islands_and_shares_never_touch_them(
    cluster: Cluster, api: KubeClient, gpu_cluster: Agents, start_scheduler: StartScheduler
) -> None:
    await start_scheduler(gpu_config())
    await create_all(api, [], [whole("train-a", 4), whole("train-b", 2)])
    await wait_for(lambda: len(bound(cluster, "train-")) == 2, what="whole-GPU pods bound")
    ids = {
        p["metadata"]["name"]: sorted(
            int(i) for i in p["metadata"]["annotations"][GPU_IDS_ANNOTATION].split(",")
        )
        for p in bound(cluster, "train-")
    }
    islands = ({0, 1, 2, 3}, {4, 5, 6, 7})
    assert any(set(ids["train-a"]) == island for island in islands)
    assert any(set(ids["train-b"]) <= island for island in islands)
    await create_all(api, [], [share(f"s-{i}", "70Gi") for i in range(3)])
    await wait_for(lambda: len(bound(cluster, "s-")) == 3, what="shares bound")
    assert_devices_not_overcommitted(cluster)


async def test_stale_report_stops_gpu_pods_until_fresh_again(
    cluster: Cluster, api: KubeClient, gpu_cluster: Agents, start_scheduler: StartScheduler
) -> None:
    # A bound well above the agents' 0.3 s heartbeat, so that a busy API server makes no fresh report stale.
    running = await start_scheduler(gpu_config(stalenessSeconds=3))
    # Binpack sends the first pods to one node, which then attracts the rest while its report is fresh.
    await create_all(api, [], [share("first", "10Gi")])
    await wait_for(lambda: bound(cluster, "first"), what="first share bound")
    favourite = bound(cluster, "first")[0]["spec"]["nodeName"]
    await gpu_cluster.pause(favourite)
    await asyncio.sleep(3.5)
    await create_all(api, [], [share("while-stale", "10Gi")])
    await wait_for(lambda: bound(cluster, "while-stale"), what="pod placed elsewhere")
    assert bound(cluster, "while-stale")[0]["spec"]["nodeName"] != favourite
    decision = next(d for d in running.log_lines("decision") if d["pod"] == "default/while-stale")
    assert decision["filtered"] == {"node(s) had stale GPU report": 1}
    # Fill the fresh nodes (the 7-GPU pod joins the 10Gi share, whose device keeps 70Gi free): a 75Gi share
    # then fits only on the stale node, so it waits and says why.
    await create_all(api, [], [whole("fill-0", 8), whole("fill-1", 8), whole("fill-2", 7)])
    await wait_for(lambda: len(bound(cluster, "fill-")) == 3, what="the fresh nodes filled")
    await create_all(api, [], [share("needs-favourite", "75Gi")])
    await wait_for(
        lambda: (
            "1 node(s) had stale GPU report" in pod_condition(cluster, "needs-favourite").get("message", "")
        ),
        what="stale report named in the message",
    )
    gpu_cluster.start(favourite)
    await wait_for(lambda: bound(cluster, "needs-favourite"), what="placed once the report is fresh")
    assert bound(cluster, "needs-favourite")[0]["spec"]["nodeName"] == favourite
    assert_devices_not_overcommitted(cluster)


async def test_written_gpu_ids_match_the_cache_after_a_restart(
    cluster: Cluster, api: KubeClient, gpu_cluster: Agents, start_scheduler: StartScheduler
) -> None:
    first = await start_scheduler(gpu_config())
    await create_all(
        api, [], [whole("w-0", 4), whole("w-1", 2), *(share(f"m-{i}", "30Gi") for i in range(5))]
    )
    await wait_for(lambda: len(bound(cluster, "w-")) + len(bound(cluster, "m-")) == 7, what="pods bound")
    await first.stop()
    second: RunningScheduler = await start_scheduler(gpu_config())
    table = second.scheduler.cache.gpus
    for pod in bound(cluster, "w-") + bound(cluster, "m-"):
        written = tuple(int(i) for i in pod["metadata"]["annotations"][GPU_IDS_ANNOTATION].split(","))
        assignment = table.assignments[pod["metadata"]["uid"]]
        assert assignment.indices == written
        assert second.scheduler.cache.row_names[assignment.row] == pod["spec"]["nodeName"]
    # The restarted scheduler respects what is taken: more pods never land on held devices.
    await create_all(api, [], [share(f"after-{i}", "40Gi") for i in range(6)])
    await wait_for(lambda: len(bound(cluster, "after-")) == 6, what="more pods bound after the restart")
    assert_devices_not_overcommitted(cluster)


@pytest.mark.backend(
    "sim",
    reason="chosen requests must fail with 500: only the simulated server injects that (TLS hides them)",
)
async def test_failed_prebind_binds_nothing_and_retries(
    cluster: Cluster, api: KubeClient, gpu_cluster: Agents, start_scheduler: StartScheduler
) -> None:
    running = await start_scheduler(gpu_config())
    assert isinstance(cluster, SimCluster)
    cluster.sim.inject_failures("pods", "patch", "default", "fragile", 2)
    await create_all(api, [], [share("fragile", "10Gi")])
    await wait_for(lambda: len(running.log_lines("prebind.failed")) == 2, what="two failed PreBinds")
    await wait_for(lambda: bound(cluster, "fragile"), what="bound on the third try")
    assert cluster.bindings()["ok"] == 1, "no binding was sent while the annotations could not be written"
    assert running.scheduler.cache.check_consistency() == []
    assert len(placements(cluster)) == 1


async def test_bad_gpu_requests_are_reported_on_the_pod(
    cluster: Cluster, api: KubeClient, gpu_cluster: Agents, start_scheduler: StartScheduler
) -> None:
    await start_scheduler(gpu_config())
    await create_all(api, [], [share("too-big", "100Gi"), share("garbled", "lots")])
    await wait_for(
        lambda: (
            "is more than any GPU has (largest 80Gi)" in pod_condition(cluster, "too-big").get("message", "")
        ),
        what="too-big reported",
    )
    await wait_for(
        lambda: "must be a positive quantity" in pod_condition(cluster, "garbled").get("message", ""),
        what="garbled reported",
    )
    assert not bound(cluster, "too-big") and not bound(cluster, "garbled")


async def test_half_gpu_fractions_share_one_device_on_big_and_small_gpus(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    """`gpu-fraction: "0.5"` is half of whichever device the pod gets: two such pods share one GPU, on a node
    of 80 GiB GPUs as on a node of 16 GiB ones."""
    sizes = {"h100": 81920, "t4": 16384}  # MiB per device
    nodes = [make_node(name, cpu="64", memory="512Gi", labels={MANAGED_LABEL: "true"}) for name in sizes]
    await create_all(api, nodes, [])
    nvml = {
        name: FakeNvml.dgx(count=2, memory_mib=mib, seed=name, islands=[[0, 1]])
        for name, mib in sizes.items()
    }
    agents = Agents({name: await cluster.agent_client(name) for name in sizes}, nvml)
    try:
        for name in sizes:
            await agents.agents[name].tick()  # the first report, before the scheduler starts
            agents.start(name)
        running = await start_scheduler(gpu_config())
        pods = [
            make_pod(
                f"half-{name}-{i}",
                cpu="500m",
                memory="1Gi",
                annotations={GPU_FRACTION_ANNOTATION: "0.5"},
                node_selector={"kubernetes.io/hostname": name},
            )
            for name in sizes
            for i in range(2)
        ]
        await create_all(api, [], pods)
        await wait_for(lambda: len(bound(cluster, "half-")) == 4, what="the four halves bound")
        table = running.scheduler.cache.gpus
        for name, mib in sizes.items():
            pair = bound(cluster, f"half-{name}-")
            assert {p["spec"]["nodeName"] for p in pair} == {name}
            ids = {p["metadata"]["annotations"][GPU_IDS_ANNOTATION] for p in pair}
            assert len(ids) == 1, f"the two halves on {name} got devices {ids}"
            device = int(ids.pop())
            row = running.scheduler.cache.row_of(name)
            assert table.share_free[row, device] == 0, "two halves fill the device"
            assert table.nodes[row].shares[device] == mib * 2**20, "each half holds half of its memory"
            assert table.whole_free[row, 1 - device], "the other device stays whole"
    finally:
        await agents.stop_all()


@pytest.mark.backend("kube", reason="admission policies and RBAC exist only on a real API server")
async def test_the_agent_may_write_only_its_own_nodes_gpu_report(
    cluster: Cluster, api: KubeClient, gpu_cluster: Agents
) -> None:
    """deploy/agent-policy.yaml, enforced by the API server: the agent's token names its node, and it may
    change the two GPU annotations of that node and nothing else."""
    own = gpu_cluster.clients["dgx-0"]
    report = {"metadata": {"annotations": {"ai-scheduler.io/gpus-updated": "2026-01-01T00:00:00Z"}}}
    assert (await own.patch_node("dgx-0", report)).ok
    other = await own.patch_node("dgx-1", report)
    assert other.status == 403 and "only the node its own pod runs on" in other.message
    label = await own.patch_node("dgx-0", {"metadata": {"labels": {MANAGED_LABEL: "false"}}})
    assert label.status == 403 and "may not change node labels" in label.message
    taint = await own.patch_node("dgx-0", {"spec": {"unschedulable": True}})
    assert taint.status == 403 and "spec" in taint.message
    assert (await own.delete_node("dgx-0")).status == 403, "RBAC grants the agent get and patch only"
    node = cluster.store.get("nodes", None, "dgx-0")
    assert node is not None and node["metadata"]["labels"][MANAGED_LABEL] == "true"


async def test_a_malformed_gpu_report_is_logged_once_per_change(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    """The node's GPU report is bad input too: its pods see `malformed GPU report`, the log says what is
    wrong with which node, once (not on every heartbeat), and again only when the problem changes."""
    running = await start_scheduler(gpu_config())
    garbled = {GPUS_ANNOTATION: "[{not json", UPDATED_ANNOTATION: "2026-01-01T00:00:00Z"}
    await create_all(api, [make_node("broken", labels={MANAGED_LABEL: "true"}, annotations=garbled)], [])

    def logged() -> list[dict[str, Any]]:
        return [line for line in running.log_lines("node.gpu_report_invalid") if line["node"] == "broken"]

    await wait_for(logged, what="the bad report logged")
    for beat in range(3):  # heartbeats with the same bad report
        stamp = {"metadata": {"annotations": {UPDATED_ANNOTATION: f"2026-01-01T00:00:0{beat + 1}Z"}}}
        assert (await api.patch_node("broken", stamp)).ok

    def last_beat_seen() -> bool:
        record = running.scheduler.cache.node_record("broken")
        return record is not None and record.annotations.get(UPDATED_ANNOTATION) == "2026-01-01T00:00:03Z"

    await wait_for(last_beat_seen, what="the scheduler saw every heartbeat")
    assert running.scheduler.cache.gpu_problem("broken")
    assert len(logged()) == 1 and GPUS_ANNOTATION in logged()[0]["error"]


async def test_a_pod_asking_for_managed_gpus_preempts_a_lower_priority_holder(
    cluster: Cluster, api: KubeClient, gpu_cluster: Agents, start_scheduler: StartScheduler
) -> None:
    running = await start_scheduler(gpu_config())

    def eight(name: str, priority: int) -> dict[str, Any]:
        annotations = {GPU_COUNT_ANNOTATION: "8"}
        return make_pod(name, cpu="1", memory="1Gi", priority=priority, annotations=annotations)

    await create_all(api, [], [eight(f"low-{i}", 0) for i in range(4)])
    await wait_for(lambda: len(bound(cluster, "low")) == 4, what="every managed GPU held")
    await create_all(api, [], [eight("high", 100)])
    await wait_for(lambda: bound(cluster, "high"), what="the preemptor placed on the GPUs a victim held")
    line = running.log_lines("preemption")[0]
    assert line["preemptor"] == "default/high" and len(line["victims"]) == 1, line
    assert line["node"] == bound(cluster, "high")[0]["spec"]["nodeName"]
    assert len(bound(cluster, "low")) == 3
    assert_devices_not_overcommitted(cluster)
