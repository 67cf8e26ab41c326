"""Gang scheduling throughput: G PodGroups of S pods each on N kwok-style nodes, full path over HTTP.

    python benchmarks/gang.py --nodes 5000 --gangs 1000 --size 8
    python benchmarks/gang.py --backend kube --nodes 5000 --gangs 1000 --size 8

`--backend kube` runs it on a real control plane (throughput.py's `real_cluster`: etcd,
kube-apiserver, kube-controller-manager and kwok on loopback, deploy/ applied, ai-scheduler
under its own ServiceAccount); the default is the embedded simulated API server.
Reports gangs/s (from the scheduler being ready to the last member bound) and
the mean time per gang attempt, read from the scheduler's own
`ai_scheduler_gang_attempt_duration_seconds` histogram.

`--in-process` times the attempts alone (GangScheduler.schedule, no API server, bindings taken at
once): their thread CPU time (robust to other processes on the machine) and wall time, and the
filter and score plugin calls per attempt; `--per-member` there turns the gang fast path off
(a full cycle per member, scheduler/gang_shapes.py).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import bench_pod, kwok_node, peak_rss_mib
from throughput import (
    BindWatcher,
    _cpu_seconds,
    _create_all,
    _free_port,
    _start_scheduler,
    _start_sim,
    _wait_ready,
    real_cluster,
)

from ai_scheduler.api.kube import KubeClient

ZONE = "topology.kubernetes.io/zone"


def _podgroup(name: str, size: int) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"minMember": size},
    }


def _member(gang: str, i: int, scheduler_name: str) -> dict[str, Any]:
    pod = bench_pod(f"{gang}-{i}", scheduler_name, cpu="1", memory="2Gi")
    pod["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] = gang
    pod["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/gpu": "1"}
    return pod


async def _gang_attempts(port: int) -> tuple[float, float]:
    """(count, total seconds) of gang attempts, from the scheduler's metrics."""
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{port}/metrics") as response,
    ):
        text = await response.text()
    count = total = 0.0
    for line in text.splitlines():
        if line.startswith("ai_scheduler_gang_attempt_duration_seconds_count"):
            count += float(line.split()[-1])
        elif line.startswith("ai_scheduler_gang_attempt_duration_seconds_sum"):
            total += float(line.split()[-1])
    return count, total


@contextlib.asynccontextmanager
async def _cluster(
    args: argparse.Namespace, nodes: list[dict[str, Any]]
) -> AsyncIterator[tuple[KubeClient, str, Path, dict[str, Any]]]:
    """(admin client, the scheduler's kubeconfig, a work folder, facts about the setup) with the nodes."""
    if args.backend == "kube":
        async with real_cluster(nodes) as real:
            yield real.client, str(real.ai_kubeconfig), real.workdir, real.setup
        return
    workdir = Path(tempfile.mkdtemp(prefix="ai-scheduler-gang-bench-"))
    sim_proc, kubeconfig = _start_sim(workdir)
    client = await KubeClient.connect(str(kubeconfig), pool_size=72)
    try:
        await _create_all(client, nodes, client.create_node)
        yield client, str(kubeconfig), workdir, {"api_server": "the embedded simulated API server"}
    finally:
        await client.close()
        sim_proc.terminate()
        sim_proc.wait(10)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    nodes = []
    for i in range(args.nodes):
        node = kwok_node(f"bench-node-{i}")
        if args.zones:
            node["metadata"]["labels"][ZONE] = f"zone-{i % args.zones}"
        nodes.append(node)
    async with _cluster(args, nodes) as (client, kubeconfig, workdir, setup):
        scheduler_proc = None
        try:
            gangs = [f"gang-{g}" for g in range(args.gangs)]
            pods = [_member(g, i, args.scheduler_name) for g in gangs for i in range(args.size)]
            await _create_all(client, [_podgroup(g, args.size) for g in gangs], client.create_podgroup)
            await _create_all(client, pods, client.create_pod)
            watcher = BindWatcher(client, {p["metadata"]["name"] for p in pods})
            watch_task = asyncio.create_task(watcher.run())
            port = _free_port()
            t0 = time.monotonic()
            scheduler_proc = _start_scheduler(workdir, kubeconfig, args.scheduler_name, port, 64)
            ready = await _wait_ready(port, scheduler_proc)
            await asyncio.wait_for(watcher.done.wait(), args.timeout)
            last = max(watcher.bound_at.values())
            watch_task.cancel()
            count, total = await _gang_attempts(port)
            by_gang: dict[str, int] = {}
            for name in watcher.bound_at:
                gang = name.rsplit("-", 1)[0]
                by_gang[gang] = by_gang.get(gang, 0) + 1
            complete = sum(1 for g in gangs if by_gang.get(g) == args.size)
            return {
                "mode": f"gang full-path ({args.backend})",
                **setup,
                "nodes": args.nodes,
                "zones": args.zones,
                "gangs": args.gangs,
                "size": args.size,
                "gangs_complete": complete,
                "gangs_per_s_from_ready": round(args.gangs / (last - ready), 1),
                "pods_per_s_from_ready": round(len(pods) / (last - ready), 1),
                "start_to_ready_s": round(ready - t0, 2),
                "gang_attempts": int(count),
                "mean_ms_per_gang_attempt": round(total / count * 1000, 3) if count else None,
                "scheduler_peak_rss_mib": round(peak_rss_mib(scheduler_proc.pid), 1),
                "scheduler_cpu_ms_per_gang": round(_cpu_seconds(scheduler_proc.pid) * 1000 / args.gangs, 2),
            }
        finally:
            if scheduler_proc is not None:
                scheduler_proc.terminate()
                scheduler_proc.wait(10)


def in_process(args: argparse.Namespace) -> dict[str, Any]:
    """The same gangs and nodes against the scheduling core alone (see the module)."""
    import statistics
    from collections import Counter

    from ai_scheduler.cache.records import PodRecord
    from ai_scheduler.config import default_config
    from ai_scheduler.log import JsonLogger, NullStream
    from ai_scheduler.queue import QueuedPod
    from ai_scheduler.scheduler.core import SchedulerCore
    from ai_scheduler.scheduler.framework.runtime import Decision
    from ai_scheduler.scheduler.gang import GangScheduler
    from ai_scheduler.scheduler.metrics import Metrics
    from ai_scheduler.scheduler.outbox import Outbox

    class Immediate:
        """Bindings reserved in the cache and counted; reasons and evictions dropped."""

        def __init__(self, core: SchedulerCore) -> None:
            self.core, self.handed, self.bound = core, set[str](), 0
            self.on_success: Any = None
            self.on_failure: Any = None

        in_flight = 0

        async def wait_for_room(self) -> None:
            return None

        def reserve(self, pod: PodRecord, decision: Decision) -> None:
            self.core.cache.assume(pod, decision.node or "", decision.gpu_ids)

        def unreserve(self, pod: PodRecord) -> None:
            self.core.cache.forget(pod.uid)

        def submit(self, qp: QueuedPod, pod: PodRecord, decision: Decision) -> None:
            self.bound += 1

        def __getattr__(self, name: str) -> Any:  # Reports and Evictions: nothing to do
            return lambda *args, **kwargs: None

    bindings: list[Immediate] = []

    def outbox(core: SchedulerCore) -> Outbox:
        bindings.append(Immediate(core))
        return Outbox(bindings[0], bindings[0], bindings[0])

    core = SchedulerCore(default_config(), JsonLogger(stream=NullStream()), Metrics(), outbox, seed=0)
    core.gang_scheduler.shapes = not args.per_member
    for i in range(args.nodes):
        node = kwok_node(f"bench-node-{i}")
        if args.zones:
            node["metadata"]["labels"][ZONE] = f"zone-{i % args.zones}"
        core.handlers.on_node_event("ADDED", node)
    for g in range(args.gangs):
        group = _podgroup(f"gang-{g}", args.size)
        group["metadata"]["uid"] = f"podgroup-{g}"
        core.handlers.on_podgroup_event("ADDED", group)
        for i in range(args.size):
            pod = _member(f"gang-{g}", i, args.scheduler_name)
            pod["metadata"].update(uid=f"pod-{g}-{i}", resourceVersion="1",
                                   creationTimestamp="2026-11-26T00:00:00Z")
            pod["status"] = {"phase": "Pending"}
            core.handlers.on_pod_event("ADDED", pod)
    calls: Counter[str] = Counter()
    framework = core.frameworks[args.scheduler_name]
    def counting(call: Any, kind: str) -> Any:
        def counted(*a: Any, **k: Any) -> Any:
            calls[kind] += 1
            return call(*a, **k)

        return counted

    for plugin in framework.filters:
        plugin.run = counting(plugin.run, "filter")  # type: ignore[method-assign]
    for scorer in framework.scores:
        scorer.score = counting(scorer.score, "score")  # type: ignore[method-assign]
    cpu: list[float] = []
    wall: list[float] = []
    attempt = GangScheduler.schedule

    def timed(self: GangScheduler, *a: Any) -> int:
        c, w = time.thread_time(), time.perf_counter()
        placed = attempt(self, *a)
        cpu.append(time.thread_time() - c)
        wall.append(time.perf_counter() - w)
        return placed

    GangScheduler.schedule = timed  # type: ignore[method-assign,assignment]
    core.ready.set()
    guard = core.cycle.guard
    assert guard is not None
    while (qp := core.queue.pop_nowait()) is not None:
        guard.run(qp, core.cycle.schedule_one)
    GangScheduler.schedule = attempt  # type: ignore[method-assign]
    return {
        "mode": "gang in-process" + (" (a cycle per member)" if args.per_member else ""),
        "nodes": args.nodes,
        "zones": args.zones,
        "gangs": args.gangs,
        "size": args.size,
        "pods_bound": bindings[0].bound,
        "gang_attempts": len(cpu),
        "cpu_ms_per_gang_attempt": round(statistics.fmean(cpu) * 1000, 3),
        "cpu_ms_median": round(statistics.median(cpu) * 1000, 3),
        "wall_ms_per_gang_attempt": round(statistics.fmean(wall) * 1000, 3),
        "filter_calls_per_attempt": round(calls["filter"] / len(cpu), 1),
        "score_calls_per_attempt": round(calls["score"] / len(cpu), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--gangs", type=int, default=1000)
    parser.add_argument("--size", type=int, default=8)
    parser.add_argument("--zones", type=int, default=10, help="zone labels on the nodes (0: none)")
    parser.add_argument("--scheduler-name", default="ai-scheduler")
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument(
        "--backend", choices=["sim", "kube"], default="sim", help="kube: a real control plane on loopback"
    )
    parser.add_argument("--in-process", action="store_true", help="time the attempts alone (see above)")
    parser.add_argument("--per-member", action="store_true", help="with --in-process: no gang fast path")
    args = parser.parse_args()
    if args.in_process:
        print(json.dumps(in_process(args)))
        return
    import uvloop

    print(json.dumps(uvloop.run(run(args))))


if __name__ == "__main__":
    main()
