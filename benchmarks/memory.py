"""The scheduler's memory at scale and under churn, full path over HTTP.

    python benchmarks/memory.py --nodes 5000 --pods 50000 --bound 49000 --keep 10000 --rounds 5

On the embedded simulated API server (its own process, no kubelets, as in
throughput.py): N nodes and P pods, of which B are created already bound (spec.nodeName, as
if another scheduler had placed them) and the rest are pending for ai-scheduler. Then, with the
scheduler running (`ai-scheduler run` in its own process):

1. scale: until every pending pod is bound; the scheduler's resident memory (VmRSS) and peak (VmHWM);
2. shrink: all but K pods deleted; VmRSS once the scheduler's cache holds K pods;
3. churn: R rounds of creating (P - K) pending pods, waiting until all are bound, deleting them
   all and waiting until the cache is back at K; VmRSS after each round. The bound asked for:
   VmRSS after the last round within 10% of VmRSS after the first.

Memory is read from /proc/PID/status of the scheduler process.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import bench_pod, kwok_node
from throughput import (
    CREATE_CONCURRENCY,
    BindWatcher,
    _create_all,
    _free_port,
    _start_scheduler,
    _start_sim,
    _wait_ready,
)

from ai_scheduler.api.kube import KubeClient


def _memory_mib(pid: int) -> dict[str, float]:
    """VmRSS (now) and VmHWM (peak) of a process, MiB."""
    found: dict[str, float] = {}
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                found[key] = round(int(value.split()[0]) / 1024, 1)
    return {"rss_mib": found["VmRSS"], "peak_rss_mib": found["VmHWM"]}


async def _cached_pods(session: aiohttp.ClientSession, port: int) -> int:
    async with session.get(f"http://127.0.0.1:{port}/metrics") as response:
        text = await response.text()
    for line in text.splitlines():
        if line.startswith('scheduler_cache_size{type="pods"}'):
            return int(float(line.split()[-1]))
    return -1


async def _until_cached(port: int, count: int, timeout: float) -> float:
    started = time.monotonic()
    async with aiohttp.ClientSession() as session:
        while await _cached_pods(session, port) != count:
            if time.monotonic() - started > timeout:
                raise RuntimeError(f"the scheduler's cache did not reach {count} pods in {timeout:.0f} s")
            await asyncio.sleep(0.2)
    return time.monotonic() - started


async def _bind_all(client: KubeClient, pods: list[dict[str, Any]], timeout: float) -> float:
    """Create pending pods and wait until the scheduler has bound every one; seconds taken."""
    started = time.monotonic()
    watcher = BindWatcher(client, {p["metadata"]["name"] for p in pods})
    watch_task = asyncio.create_task(watcher.run())
    try:
        await _create_all(client, pods, client.create_pod)
        await asyncio.wait_for(watcher.done.wait(), timeout)
    finally:
        watch_task.cancel()
    return time.monotonic() - started


async def _delete(client: KubeClient, pods: list[dict[str, Any]]) -> None:
    async def delete(pod: dict[str, Any]) -> Any:
        meta = pod["metadata"]
        return await client.delete_pod(meta.get("namespace", "default"), meta["name"], grace_period_seconds=0)

    await _create_all(client, pods, delete)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="ai-scheduler-memory-bench-"))
    sim_proc, kubeconfig = _start_sim(workdir)
    client = await KubeClient.connect(str(kubeconfig), pool_size=CREATE_CONCURRENCY + 8)
    scheduler_proc = None
    try:
        nodes = [kwok_node(f"bench-node-{i}") for i in range(args.nodes)]
        await _create_all(client, nodes, client.create_node)
        bound = [bench_pod(f"bound-{i}", "another-scheduler") for i in range(args.bound)]
        for i, pod in enumerate(bound):
            pod["spec"]["nodeName"] = f"bench-node-{i % args.nodes}"
        await _create_all(client, bound, client.create_pod)
        port = _free_port()
        scheduler_proc = _start_scheduler(workdir, str(kubeconfig), "ai-scheduler", port, 64)
        await _wait_ready(port, scheduler_proc, timeout=args.timeout)
        pending = [bench_pod(f"pending-{i}", "ai-scheduler") for i in range(args.pods - args.bound)]
        bind_s = await _bind_all(client, pending, args.timeout)
        await _until_cached(port, args.pods, args.timeout)
        scale = _memory_mib(scheduler_proc.pid) | {"pods": args.pods, "bind_s": round(bind_s, 1)}
        if not args.json:
            print(f"scale: {json.dumps(scale)}", file=sys.stderr, flush=True)
        everything = bound + pending
        await _delete(client, everything[args.keep:])
        await _until_cached(port, args.keep, args.timeout)
        shrink = _memory_mib(scheduler_proc.pid) | {"pods": args.keep}
        if not args.json:
            print(f"shrink: {json.dumps(shrink)}", file=sys.stderr, flush=True)
        rounds = []
        for r in range(args.rounds):
            churn = [bench_pod(f"churn-{r}-{i}", "ai-scheduler") for i in range(args.pods - args.keep)]
            bind_s = await _bind_all(client, churn, args.timeout)
            at_peak = _memory_mib(scheduler_proc.pid)["rss_mib"]
            await _delete(client, churn)
            await _until_cached(port, args.keep, args.timeout)
            after = _memory_mib(scheduler_proc.pid)
            rounds.append(after | {"rss_mib_full": at_peak, "bind_s": round(bind_s, 1)})
            if not args.json:
                print(f"round {r + 1}: {json.dumps(rounds[-1])}", file=sys.stderr, flush=True)
        result: dict[str, Any] = {
            "mode": "memory (simulated API server)",
            "nodes": args.nodes,
            "scale": scale,
            "shrink": shrink,
            "churn_pods_per_round": args.pods - args.keep,
            "rounds": rounds,
        }
        if rounds:
            result["rss_last_over_first_round"] = round(rounds[-1]["rss_mib"] / rounds[0]["rss_mib"], 3)
        return result
    finally:
        if scheduler_proc is not None:
            scheduler_proc.terminate()
            scheduler_proc.wait(10)
        await client.close()
        sim_proc.terminate()
        sim_proc.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=50000, help="pods at the largest (default 50,000)")
    parser.add_argument("--bound", type=int, default=49000, help="of which created already bound")
    parser.add_argument("--keep", type=int, default=10000, help="pods left after the shrink")
    parser.add_argument("--rounds", type=int, default=5, help="churn rounds")
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--json", action="store_true", help="only the JSON result")
    args = parser.parse_args()
    if not args.bound < args.pods or not args.keep <= args.pods:
        parser.error("need --bound < --pods and --keep <= --pods")
    import uvloop

    print(json.dumps(uvloop.run(run(args)), indent=None if args.json else 2))


if __name__ == "__main__":
    main()
