"""Policy comparison: one synthetic GPU workload under FIFO, the built-in default and a balanced policy.

The real scheduler runs against the embedded simulated cluster with kubelets
that run each job for its declared duration. Reports, per policy: mean and p95
wait per user level, the longest wait of any job, GPU utilisation over the run,
and Jain's fairness index across groups: GPU-seconds each group received while
jobs were still arriving (the contended window), over its share.

    python benchmarks/policies.py --jobs 160 --seed 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import time
from typing import Any

import numpy as np

from ai_scheduler.api.kube import KubeClient
from ai_scheduler.config import parse_config
from ai_scheduler.daemon.app import Scheduler
from ai_scheduler.log import JsonLogger, NullStream
from ai_scheduler.sim import SimApiServer, make_node, make_pod, priority_classes_for

NODES, GPUS_PER_NODE = 4, 8
USERS = {  # user -> (group, level, namespace)
    "ada": ("research", 3, "team-ada"),
    "bo": ("research", 1, "team-bo"),
    "cy": ("product", 2, "team-cy"),
    "di": ("product", 1, "team-di"),
}
GROUPS = {"research": {"share": 1, "level": 1}, "product": {"share": 1, "level": 2}}
POLICIES = {
    "fifo": {"waitingTime": 1},
    "default": {"taskPriority": 1},
    "balanced": {"userLevel": 1, "groupLevel": 0.5, "waitingTime": 1, "fairShare": 1, "jobSize": -0.3},
}


def workload(count: int, rng: random.Random) -> list[tuple[float, dict[str, Any], str]]:
    """(arrival offset, pod, user): 1-8 GPU jobs of 0.3-2 s, arriving faster than they can run."""
    jobs = []
    for i in range(count):
        user = rng.choice(list(USERS))
        gpus = rng.choice([1, 1, 1, 2, 2, 4, 8])
        duration = round(rng.uniform(0.3, 2.0), 2)
        pod = make_pod(
            f"job-{i}",
            namespace=USERS[user][2],
            gpus=gpus,
            cpu="1",
            memory="1Gi",
            duration=duration,
            priority=USERS[user][1] * 10,
            preemption_policy="Never",  # compare ordering alone: nobody is evicted
            annotations={"ai-scheduler.io/estimated-runtime": f"{duration * 1.5:.2f}s"},
        )
        jobs.append((i * 0.04, pod, user))
    return jobs


def jain(values: list[float]) -> float:
    return sum(values) ** 2 / (len(values) * sum(v * v for v in values)) if any(values) else 1.0


async def run(policy: str, jobs: list[tuple[float, dict[str, Any], str]]) -> dict[str, Any]:
    config = parse_config(
        {
            "server": {"port": 0, "bindAddress": "127.0.0.1"},
            "scheduling": {
                "initialBackoffSeconds": 0.05,
                "maxBackoffSeconds": 0.5,
                "priorityRefreshSeconds": 0.5,
            },
            "groups": GROUPS,
            "users": {u: {"group": g, "level": lvl} for u, (g, lvl, _ns) in USERS.items()},
            "namespaces": {ns: {"user": u} for u, (_g, _lvl, ns) in USERS.items()},
            "policies": {
                policy: {"weights": POLICIES[policy], "maxWaitSeconds": 20, "fairShareHalfLifeSeconds": 10}
            },
        }
    )
    async with SimApiServer() as sim:
        for i in range(NODES):
            sim.create("nodes", make_node(f"dgx-{i}", cpu="64", memory="256Gi", gpus=GPUS_PER_NODE))
        client = await KubeClient.connect(host=sim.url)
        scheduler = Scheduler(config, client, JsonLogger(stream=NullStream()), serve_http=False)
        task = asyncio.create_task(scheduler.run())
        await scheduler.ready.wait()
        start = time.monotonic()
        created: dict[str, float] = {}
        bound: dict[str, float] = {}
        contended: dict[str, float] = dict.fromkeys(GROUPS, 0.0)
        arrivals_end = start + jobs[-1][0]
        group_of = {pod["metadata"]["name"]: USERS[user][0] for _offset, pod, user in jobs}
        sampled = {"busy": 0.0, "last": start}

        async def sample() -> None:
            """Every 20 ms: who got bound, and how many GPUs each group is running."""
            while time.monotonic() - start < 120:
                await asyncio.sleep(0.02)
                now = time.monotonic()
                pods = sim.store.list("pods")
                running = 0
                for p in pods:
                    name = p["metadata"]["name"]
                    if p["spec"].get("nodeName") and name not in bound:
                        bound[name] = now
                    if p["spec"].get("nodeName") and p.get("status", {}).get("phase") != "Succeeded":
                        gpus = int(p["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"])
                        running += gpus
                        if now <= arrivals_end:
                            contended[group_of[name]] += gpus * (now - sampled["last"])
                sampled["busy"] += running * (now - sampled["last"])
                sampled["last"] = now
                if len(bound) == len(jobs) and all(
                    p.get("status", {}).get("phase") == "Succeeded" for p in pods
                ):
                    return

        sampler = asyncio.create_task(sample())
        for priority_class in priority_classes_for([pod for _, pod, _ in jobs]):
            sim.create("priorityclasses", priority_class)
        for offset, pod, _user in jobs:
            await asyncio.sleep(max(0.0, start + offset - time.monotonic()))
            created[pod["metadata"]["name"]] = time.monotonic()
            sim.create("pods", pod)
        await sampler
        last, busy_gpu_seconds = sampled["last"], sampled["busy"]
        makespan = last - start
        scheduler.stop()
        await task
        await client.close()
    waits: dict[int, list[float]] = {}
    for _offset, pod, user in jobs:
        name = pod["metadata"]["name"]
        waits.setdefault(USERS[user][1], []).append(bound.get(name, last) - created[name])
    all_waits = [w for ws in waits.values() for w in ws]
    return {
        "policy": policy,
        "wait_by_user_level": {
            level: {"mean_s": round(statistics.fmean(ws), 2), "p95_s": round(float(np.percentile(ws, 95)), 2)}
            for level, ws in sorted(waits.items())
        },
        "longest_wait_s": round(max(all_waits), 2),
        "gpu_utilisation_pct": round(100 * busy_gpu_seconds / (NODES * GPUS_PER_NODE * makespan), 1),
        "jain_across_groups": round(jain([contended[g] / GROUPS[g]["share"] for g in GROUPS]), 3),
        "contended_gpu_seconds": {g: round(v, 1) for g, v in contended.items()},
        "makespan_s": round(makespan, 1),
    }


async def main_async(args: argparse.Namespace) -> list[dict[str, Any]]:
    jobs = workload(args.jobs, random.Random(args.seed))
    return [await run(policy, jobs) for policy in POLICIES]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=160)
    parser.add_argument("--seed", type=int, default=3)
    args = parser.parse_args()
    import uvloop

    for result in uvloop.run(main_async(args)):
        print(json.dumps(result))


if __name__ == "__main__":
    main()
