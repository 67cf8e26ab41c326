"""Scheduling throughput: N kwok-style nodes, M pending pods, time until all are bound.

Full path (default): the embedded simulated API server runs in its own
process, the scheduler runs as `ai-scheduler run` in another, and this process
creates the objects and watches for bindings, as a user of the cluster would.

    python benchmarks/throughput.py --nodes 5000 --pods 10000

Any cluster: `--kubeconfig FILE --scheduler-name NAME` creates the nodes and
pods there and times whichever scheduler serves NAME (add `--start-scheduler`
to start ai-scheduler against it too). Objects are labelled and deleted after.

In-process (`--in-process`): the scheduling core alone (queue, filters,
scores, assume) with no API server, to measure the decision cost per pod;
`--percentage-of-nodes-to-score 100` scores every feasible node instead of the
adaptive share.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import BENCH_LABEL, bench_pod, kwok_node, peak_rss_mib, percentiles

from ai_scheduler.api.kube import KubeClient, WatchBroken, WatchExpired

CREATE_CONCURRENCY = 64


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def _create_all(client: KubeClient, objects: list[dict[str, Any]], create: Any) -> None:
    semaphore = asyncio.Semaphore(CREATE_CONCURRENCY)

    async def one(obj: dict[str, Any]) -> None:
        async with semaphore:
            result = await create(obj)
            if not result.ok and result.status != 409:
                raise RuntimeError(f"create {obj['metadata']['name']}: {result.message}")

    await asyncio.gather(*(one(obj) for obj in objects))


def _cpu_seconds(pid: int) -> float:
    import psutil

    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


async def _create_at_rate(
    client: KubeClient, pods: list[dict[str, Any]], rate: float, sent_at: dict[str, float]
) -> None:
    """Create pods at a steady rate (in small batches), noting when each create was sent."""
    batch = max(1, int(rate // 50))
    begin = time.monotonic()
    tasks = []
    for start in range(0, len(pods), batch):
        due = begin + start / rate
        delay = due - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        for pod in pods[start : start + batch]:
            sent_at[pod["metadata"]["name"]] = time.monotonic()
            tasks.append(asyncio.create_task(client.create_pod(pod)))
    results = await asyncio.gather(*tasks)
    failed = [r.message for r in results if not r.ok]
    if failed:
        raise RuntimeError(f"{len(failed)} creates failed, e.g. {failed[0]}")


def _start_sim(workdir: Path) -> tuple[subprocess.Popen[bytes], Path]:
    kubeconfig = workdir / "kubeconfig"
    proc = subprocess.Popen(
        [sys.executable, "-m", "ai_scheduler.sim", "--no-kubelets", "--kubeconfig-out", str(kubeconfig)],
        stdout=subprocess.PIPE,
        stderr=(workdir / "sim.err").open("wb"),  # the child process owns it
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        raise RuntimeError(f"simulated API server failed to start: {(workdir / 'sim.err').read_text()}")
    return proc, kubeconfig


def _start_scheduler(
    workdir: Path, kubeconfig: str, scheduler_name: str, port: int, bind_concurrency: int
) -> subprocess.Popen[bytes]:
    config = workdir / "config.yaml"
    config.write_text(
        f"schedulerName: {scheduler_name}\nserver:\n  port: {port}\n  bindAddress: 127.0.0.1\n"
        f"scheduling:\n  bindConcurrency: {bind_concurrency}\n"
    )
    log = (workdir / "scheduler.log").open("wb")  # the child process owns it
    return subprocess.Popen(
        [sys.executable, "-m", "ai_scheduler", "run", "--config", str(config), "--kubeconfig", kubeconfig],
        stdout=log,
        stderr=subprocess.STDOUT,
    )


async def _wait_ready(port: int, proc: subprocess.Popen[bytes], timeout: float = 120) -> float:
    import aiohttp

    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError("scheduler exited before it was ready")
            try:
                async with session.get(f"http://127.0.0.1:{port}/readyz") as response:
                    if response.status == 200:
                        return time.monotonic()
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.05)
    raise RuntimeError("scheduler not ready in time")


class BindWatcher:
    """Notes the moment each benchmark pod is first seen bound, through a watch like any client's."""

    def __init__(self, client: KubeClient, expected: set[str]) -> None:
        self.client = client
        self.expected = expected
        self.bound_at: dict[str, float] = {}
        self.done = asyncio.Event()

    def _see(self, obj: dict[str, Any], now: float) -> None:
        name = obj["metadata"]["name"]
        if name in self.expected and obj["spec"].get("nodeName") and name not in self.bound_at:
            self.bound_at[name] = now
            if len(self.bound_at) == len(self.expected):
                self.done.set()

    async def run(self) -> None:
        selector = f"{BENCH_LABEL}=true"
        while not self.done.is_set():
            try:
                items, version = await self.client.list("pods", label_selector=selector)
                now = time.monotonic()
                for obj in items:
                    self._see(obj, now)
                async for event in self.client.watch(
                    "pods", version, timeout_seconds=3600, label_selector=selector
                ):
                    if event["type"] in ("ADDED", "MODIFIED"):
                        self._see(event["object"], time.monotonic())
                    if self.done.is_set():
                        return
            except (WatchBroken, WatchExpired):
                continue


async def full_path(args: argparse.Namespace) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="ai-scheduler-bench-"))
    sim_proc = None
    kubeconfig = args.kubeconfig
    if kubeconfig is None:
        sim_proc, path = _start_sim(workdir)
        kubeconfig = str(path)
    client = await KubeClient.connect(kubeconfig, pool_size=CREATE_CONCURRENCY + 8)
    scheduler_proc = None
    try:
        nodes = [kwok_node(f"bench-node-{i}") for i in range(args.nodes)]
        pods = [bench_pod(f"bench-pod-{i}", args.scheduler_name) for i in range(args.pods)]
        started = time.monotonic()
        await _create_all(client, nodes, client.create_node)
        if not args.rate:
            await _create_all(client, pods, client.create_pod)
        created = time.monotonic()
        watcher = BindWatcher(client, {p["metadata"]["name"] for p in pods})
        watch_task = asyncio.create_task(watcher.run())
        start_ours = args.kubeconfig is None or args.start_scheduler
        t0 = time.monotonic()
        ready = t0
        if start_ours:
            port = _free_port()
            scheduler_proc = _start_scheduler(
                workdir, kubeconfig, args.scheduler_name, port, args.bind_concurrency
            )
            ready = await _wait_ready(port, scheduler_proc)
        sent_at: dict[str, float] = {}
        if args.rate:
            await _create_at_rate(client, pods, args.rate, sent_at)
        await asyncio.wait_for(watcher.done.wait(), args.timeout)
        last = max(watcher.bound_at.values())
        watch_task.cancel()
        if args.rate:
            # Pods arrive while the scheduler runs: latency is from the create request to the binding seen.
            first = min(sent_at.values())
            latencies = [(at - sent_at[name]) * 1000 for name, at in watcher.bound_at.items()]
            rates = {
                "pods_per_s_offered": args.rate,
                "pods_per_s_bound": round(args.pods / (last - first), 1),
            }
            latency_key = "latency_ms_create_to_bound"
        else:
            # All pods wait from the start: latency is mostly the pod's place in the queue.
            latencies = [(at - ready) * 1000 for at in watcher.bound_at.values()]
            rates = {
                "pods_per_s_from_start": round(args.pods / (last - t0), 1),
                "pods_per_s_from_ready": round(args.pods / (last - ready), 1),
            }
            latency_key = "latency_ms_from_ready"
        result = {
            "mode": "full-path" + (" (paced)" if args.rate else ""),
            "nodes": args.nodes,
            "pods": args.pods,
            "scheduler": args.scheduler_name,
            "api_server": "embedded simulated (own process)" if sim_proc else "given kubeconfig",
            "setup_s": round(created - started, 2),
            "start_to_ready_s": round(ready - t0, 3),
            **rates,
            latency_key: {k: round(v, 1) for k, v in percentiles(latencies).items()},
            "scheduler_peak_rss_mib": round(peak_rss_mib(scheduler_proc.pid), 1) if scheduler_proc else None,
            "scheduler_cpu_ms_per_pod": round(_cpu_seconds(scheduler_proc.pid) * 1000 / args.pods, 3)
            if scheduler_proc
            else None,
        }
        if sim_proc is None:
            for pod in pods:
                await client.delete_pod("default", pod["metadata"]["name"], grace_period_seconds=0)
            for node in nodes:
                await client.delete_node(node["metadata"]["name"])
        return result
    finally:
        if scheduler_proc is not None:
            scheduler_proc.terminate()
            scheduler_proc.wait(10)
        await client.close()
        if sim_proc is not None:
            sim_proc.terminate()
            sim_proc.wait(10)


def in_process(args: argparse.Namespace) -> dict[str, Any]:
    import random

    from ai_scheduler.cache.cache import SchedulerCache
    from ai_scheduler.cache.records import NodeRecord, PodRecord
    from ai_scheduler.config import default_config, parse_config
    from ai_scheduler.queue import SchedulingQueue
    from ai_scheduler.scheduler.daemon import build_frameworks

    config = default_config()
    if args.percentage_of_nodes_to_score is not None:
        config = parse_config({"scheduling": {"percentageOfNodesToScore": args.percentage_of_nodes_to_score}})
    cache = SchedulerCache()
    for i in range(args.nodes):
        cache.set_node(NodeRecord.from_api(kwok_node(f"bench-node-{i}")))
    framework = build_frameworks(config, cache, random.Random(1))[config.scheduler_name]
    queue = SchedulingQueue()
    for i in range(args.pods):
        obj = bench_pod(f"bench-pod-{i}", config.scheduler_name)
        obj["metadata"]["uid"] = f"uid-{i}"
        queue.add(PodRecord.from_api(obj))
    durations = []
    started = time.perf_counter()
    while (qp := queue.pop_nowait()) is not None:
        t = time.perf_counter()
        decision = framework.schedule(qp.pod)
        assert decision.node is not None, decision.message
        cache.assume(qp.pod, decision.node)
        queue.done(qp.pod.uid)
        durations.append((time.perf_counter() - t) * 1000)
    total = time.perf_counter() - started
    assert not cache.check_consistency()
    return {
        "mode": "in-process",
        "nodes": args.nodes,
        "pods": args.pods,
        "percentage_of_nodes_to_score": config.scheduling.percentage_of_nodes_to_score,
        "pods_per_s": round(args.pods / total, 1),
        "decision_ms": {k: round(v, 4) for k, v in percentiles(durations).items()},
        "peak_rss_mib": round(peak_rss_mib(), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=10000)
    parser.add_argument("--kubeconfig", help="time a real cluster instead of the embedded simulated one")
    parser.add_argument("--scheduler-name", default="ai-scheduler")
    parser.add_argument(
        "--start-scheduler",
        action="store_true",
        help="with --kubeconfig: also start ai-scheduler against that cluster",
    )
    parser.add_argument("--bind-concurrency", type=int, default=64)
    parser.add_argument(
        "--rate",
        type=float,
        default=0,
        help="create the pods at this many per second after the scheduler is ready "
        "(default: all before it starts)",
    )
    parser.add_argument("--in-process", action="store_true", help="the scheduling core alone, no API server")
    parser.add_argument(
        "--percentage-of-nodes-to-score",
        type=int,
        help="with --in-process: scheduling.percentageOfNodesToScore (default: the config's, 0 = adaptive)",
    )
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--json", action="store_true", help="print only the JSON result")
    args = parser.parse_args()
    if args.in_process:
        result = in_process(args)
    else:
        import uvloop

        result = uvloop.run(full_path(args))
    print(json.dumps(result) if args.json else json.dumps(result, indent=2))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
