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

Memory is read from /proc/PID/status of the scheduler process. Forecasts are on
(`prediction.forecastSeconds`, 60 s by default, as in the default config): the daemon forecasts while
pods wait, in a forked child (tracesim/forecast.py), which a sampler watches every quarter second: how
many forecasts it saw, and the most memory one held of its own (private pages: what the copy-on-write
child added to the machine, its pages shared with the scheduler not counted; "forecast" in the
result). Leader election is off: a replica alone, on a machine busy creating tens of thousands of
pods, measures memory, not the Lease's renew deadline.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import subprocess
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


def _start_scheduler(
    workdir: Path, kubeconfig: str, port: int, forecast_seconds: float
) -> subprocess.Popen[bytes]:
    config = workdir / "config.yaml"
    config.write_text(
        f"schedulerName: ai-scheduler\nserver:\n  port: {port}\n  bindAddress: 127.0.0.1\n"
        "scheduling:\n  bindConcurrency: 64\nleaderElection:\n  enabled: false\n"
        f"prediction:\n  forecastSeconds: {forecast_seconds}\n"
    )
    log = (workdir / "scheduler.log").open("wb")  # the child process owns it
    return subprocess.Popen(
        [sys.executable, "-m", "ai_scheduler", "run", "--config", str(config), "--kubeconfig", kubeconfig],
        stdout=log,
        stderr=subprocess.STDOUT,
    )


def _private_mib(pid: int) -> float:
    """The pages of a process that no other process shares (smaps_rollup), MiB; 0 once it is gone."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as rollup:
            private = ("Private_Clean", "Private_Dirty")
            kib = sum(int(line.split()[1]) for line in rollup if line.startswith(private))
    except (OSError, ValueError, IndexError):
        return 0.0
    return round(kib / 1024, 1)


class ForecastWatch:
    """The scheduler's forecast children (see the module): how many, and the largest private memory."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self.seen: set[int] = set()
        self.private_mib = 0.0

    async def run(self) -> None:
        children = f"/proc/{self.proc.pid}/task/{self.proc.pid}/children"
        while True:
            with contextlib.suppress(OSError, ValueError), open(children) as listed:
                for pid in map(int, listed.read().split()):
                    self.seen.add(pid)
                    self.private_mib = max(self.private_mib, _private_mib(pid))
            if self.proc.poll() is not None:
                raise RuntimeError(f"the scheduler exited (status {self.proc.returncode})")
            await asyncio.sleep(0.25)

    def summary(self) -> dict[str, Any]:
        return {"forecasts_seen": len(self.seen), "child_private_peak_mib": self.private_mib}


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


async def _bind_all(
    client: KubeClient, pods: list[dict[str, Any]], timeout: float, alive: asyncio.Task[None]
) -> float:
    """Create pending pods and wait until the scheduler has bound every one; seconds taken. `alive`
    (ForecastWatch.run) ends only when the scheduler has exited: then this raises."""
    started = time.monotonic()
    watcher = BindWatcher(client, {p["metadata"]["name"] for p in pods})
    watch_task = asyncio.create_task(watcher.run())
    done = asyncio.create_task(watcher.done.wait())
    try:
        await _create_all(client, pods, client.create_pod)
        await asyncio.wait([done, alive], timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        if alive.done():
            alive.result()  # the scheduler's exit, raised
        if not done.done():
            raise RuntimeError(f"not every pod was bound within {timeout:.0f} s")
    finally:
        watch_task.cancel()
        done.cancel()
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
        scheduler_proc = _start_scheduler(workdir, str(kubeconfig), port, args.forecast_seconds)
        await _wait_ready(port, scheduler_proc, timeout=args.timeout)
        forecasts = ForecastWatch(scheduler_proc)
        watch = asyncio.create_task(forecasts.run())
        pending = [bench_pod(f"pending-{i}", "ai-scheduler") for i in range(args.pods - args.bound)]
        bind_s = await _bind_all(client, pending, args.timeout, watch)
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
            bind_s = await _bind_all(client, churn, args.timeout, watch)
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
            "forecast": {"every_s": args.forecast_seconds} | forecasts.summary(),
        }
        watch.cancel()
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
    parser.add_argument("--forecast-seconds", type=float, default=60.0,
                        help="the scheduler's prediction.forecastSeconds (0: no forecasts)")
    parser.add_argument("--json", action="store_true", help="only the JSON result")
    args = parser.parse_args()
    if not args.bound < args.pods or not args.keep <= args.pods:
        parser.error("need --bound < --pods and --keep <= --pods")
    import uvloop

    print(json.dumps(uvloop.run(run(args)), indent=None if args.json else 2))


if __name__ == "__main__":
    main()
