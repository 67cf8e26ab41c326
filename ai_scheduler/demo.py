"""`ai-scheduler demo`: the real scheduler, over HTTP, against the embedded simulated cluster.

A small GPU cluster, a mixed workload (training gangs-to-be, inference,
cpu batch, a pod of another scheduler, pods that fit nowhere), live progress,
and a summary of where everything went and why.
"""

from __future__ import annotations

import asyncio
import random
import sys
import time
from collections import Counter
from typing import Any

from ai_scheduler.api.kube import KubeClient
from ai_scheduler.config import default_config
from ai_scheduler.daemon.app import Scheduler
from ai_scheduler.log import JsonLogger, NullStream
from ai_scheduler.quantity import to_units
from ai_scheduler.sim import SimApiServer, make_node, make_pod, priority_classes_for

GPU = "nvidia.com/gpu"
LATE_NODE_AT = 4.0  # seconds: a large node joins, so the waiting 16-GPU pod gets placed
# The large node is dedicated to large jobs, so the small ones do not take it first.
LARGE_TAINT = {"key": "ai-scheduler.io/dedicated", "value": "large", "effect": "NoSchedule"}
DEADLINE = 40.0


def _cluster(nodes: int) -> list[dict[str, Any]]:
    result = [make_node("cpu-1", cpu="16", memory="64Gi", labels={"topology.kubernetes.io/zone": "a"})]
    for i in range(1, max(nodes, 2)):
        zone = "a" if i % 2 else "b"
        result.append(
            make_node(
                f"gpu-{i}",
                cpu="32",
                memory="256Gi",
                gpus=8,
                labels={"topology.kubernetes.io/zone": zone, "nvidia.com/gpu.product": "H100"},
                taints=[{"key": GPU, "value": "present", "effect": "NoSchedule"}],
            )
        )
    return result


def _workload(count: int, rng: random.Random) -> list[dict[str, Any]]:
    gpu_toleration = [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}]
    pods = []
    for i in range(count):
        kind = rng.choices(["training", "inference", "batch"], weights=[2, 3, 4])[0]
        labels = {"ai-scheduler.io/task-type": kind}
        if kind == "training":
            pods.append(
                make_pod(
                    f"train-{i}",
                    gpus=rng.choice([2, 4]),
                    cpu="4",
                    memory="32Gi",
                    labels=labels,
                    tolerations=gpu_toleration,
                    duration=rng.uniform(3, 6),
                    priority=100,
                )
            )
        elif kind == "inference":
            pods.append(
                make_pod(
                    f"infer-{i}",
                    gpus=1,
                    cpu="2",
                    memory="8Gi",
                    labels=labels,
                    tolerations=gpu_toleration,
                    duration=rng.uniform(1, 4),
                    priority=50,
                )
            )
        else:
            pods.append(
                make_pod(
                    f"batch-{i}",
                    cpu=rng.choice(["500m", "1", "2"]),
                    memory="2Gi",
                    labels=labels,
                    duration=rng.uniform(1, 3),
                )
            )
    large_toleration = [*gpu_toleration, {**LARGE_TAINT, "operator": "Equal"}]
    pods.append(
        make_pod(
            "big-train",
            gpus=16,
            cpu="8",
            memory="64Gi",
            tolerations=large_toleration,
            labels={"ai-scheduler.io/task-type": "training"},
            duration=2,
            priority=100,
        )
    )
    pods.append(
        make_pod("impossible", cpu="1000", memory="1Gi", labels={"ai-scheduler.io/task-type": "batch"})
    )
    pods.append(make_pod("other-scheduler", scheduler_name="default-scheduler", cpu="1", memory="1Gi"))
    return pods


class _Progress:
    def __init__(self, server: SimApiServer) -> None:
        self.server = server
        self.tty = sys.stdout.isatty()
        self.last_line = ""

    def phases(self) -> Counter[str]:
        counts: Counter[str] = Counter()
        for pod in self.server.store.list("pods"):
            if pod["spec"].get("schedulerName") != "ai-scheduler":
                continue
            phase = pod.get("status", {}).get("phase", "Pending")
            if phase == "Pending":
                phase = "bound" if pod["spec"].get("nodeName") else "waiting"
            counts[phase] += 1
        return counts

    def show(self, elapsed: float) -> Counter[str]:
        counts = self.phases()
        line = (
            f"t={elapsed:5.1f}s  waiting {counts['waiting']:3d}  bound {counts['bound']:3d}  "
            f"running {counts['Running']:3d}  succeeded {counts['Succeeded']:3d}"
        )
        if self.tty:
            print("\r" + line, end="", flush=True)
        elif line != self.last_line:
            print(line, flush=True)
        self.last_line = line
        return counts


def _summary(server: SimApiServer, placed_at: dict[str, float]) -> None:
    pods = [p for p in server.store.list("pods")]
    nodes = sorted(server.store.list("nodes"), key=lambda n: n["metadata"]["name"])
    print("\n\nNodes: requests of the pods still on each node, and how many pods were placed there in all")
    print(f"{'node':<10} {'zone':<5} {'cpu':>12} {'gpu':>8} {'pods placed':>12}")
    placed = Counter(p["spec"].get("nodeName") for p in pods if p["spec"].get("nodeName"))
    for node in nodes:
        name = node["metadata"]["name"]
        alloc = node["status"]["allocatable"]
        active = [
            p
            for p in pods
            if p["spec"].get("nodeName") == name
            and p.get("status", {}).get("phase") not in ("Succeeded", "Failed")
        ]
        cpu = sum(
            to_units("cpu", c["resources"]["requests"].get("cpu", "0"))
            for p in active
            for c in p["spec"]["containers"]
        )
        gpu = sum(
            int(c["resources"].get("limits", {}).get(GPU, 0)) for p in active for c in p["spec"]["containers"]
        )
        print(
            f"{name:<10} {node['metadata']['labels'].get('topology.kubernetes.io/zone', '-'):<5} "
            f"{cpu / 1000:>5.1f}/{to_units('cpu', alloc['cpu']) / 1000:<6.0f} "
            f"{gpu:>3}/{alloc.get(GPU, '0'):<4} {placed[name]:>12}"
        )
    print("\nPods by kind")
    print(f"{'kind':<11} {'total':>6} {'placed':>7} {'succeeded':>10}")
    kinds: dict[str, Counter[str]] = {}
    for pod in pods:
        if pod["spec"].get("schedulerName") != "ai-scheduler":
            continue
        kind = pod["metadata"].get("labels", {}).get("ai-scheduler.io/task-type", "-")
        tally = kinds.setdefault(kind, Counter())
        tally["total"] += 1
        tally["placed"] += bool(pod["spec"].get("nodeName"))
        tally["succeeded"] += pod.get("status", {}).get("phase") == "Succeeded"
    for kind, tally in sorted(kinds.items()):
        print(f"{kind:<11} {tally['total']:>6} {tally['placed']:>7} {tally['succeeded']:>10}")
    other = next((p for p in pods if p["metadata"]["name"] == "other-scheduler"), None)
    if other is not None:
        other_node = other["spec"].get("nodeName") or "(none)"
        print(f"\nPod of another scheduler: other-scheduler -> node {other_node} "
              "(ai-scheduler never binds it, only counts what it uses)")
    big = placed_at.get("big-train")
    if big is not None:
        print(f"big-train (16 GPUs) waited until gpu-large joined at t={LATE_NODE_AT:.0f}s, "
              f"placed at t={big:.1f}s")
    print("\nStill unschedulable, with what the pod's PodScheduled condition says:")
    for pod in pods:
        if pod["spec"].get("nodeName") or pod["spec"].get("schedulerName") != "ai-scheduler":
            continue
        conditions = {c["type"]: c for c in pod.get("status", {}).get("conditions", [])}
        cond = conditions.get("PodScheduled", {})
        message = cond.get("message", "(no condition yet)")
        print(f"  {pod['metadata']['name']}: {cond.get('reason', '?')}: {message}")
    events = Counter(e.get("reason") for e in server.store.list("events"))
    print(f"\nEvents written: {dict(events)}")


async def run_demo(*, nodes: int = 6, pods: int = 60, seed: int = 7, log_file: str | None = None) -> int:
    rng = random.Random(seed)
    server = SimApiServer()
    url = await server.start()
    log_stream = open(log_file, "ab") if log_file else None  # noqa: SIM115 - closed below
    print(f"Simulated cluster: API server at {url}; {max(nodes, 2)} nodes; {pods + 3} pods")
    client = await KubeClient.connect(host=url)
    logger = JsonLogger(stream=log_stream or NullStream())
    scheduler = Scheduler(default_config(), client, logger, serve_http=False, seed=seed)
    task = asyncio.create_task(scheduler.run())
    try:
        for node in _cluster(nodes):
            server.create("nodes", node)
        workload = _workload(pods, rng)
        for priority_class in priority_classes_for(workload):
            server.create("priorityclasses", priority_class)
        for pod in workload:
            server.create("pods", pod)
        # The pod of another scheduler: bound by "someone else"; ai-scheduler must only count it.
        other = server.store.get("pods", "default", "other-scheduler")
        assert other is not None  # one of the workload's pods, created above
        await client.bind("default", "other-scheduler", other["metadata"]["uid"], "cpu-1")
        progress = _Progress(server)
        started = time.monotonic()
        placed_at: dict[str, float] = {}
        late_node_added = False
        while True:
            elapsed = time.monotonic() - started
            if not late_node_added and elapsed >= LATE_NODE_AT:
                server.create(
                    "nodes",
                    make_node(
                        "gpu-large",
                        cpu="64",
                        memory="512Gi",
                        gpus=16,
                        labels={"topology.kubernetes.io/zone": "b"},
                        taints=[LARGE_TAINT],
                    ),
                )
                late_node_added = True
            counts = progress.show(elapsed)
            big = server.store.get("pods", "default", "big-train")
            if big and big["spec"].get("nodeName") and "big-train" not in placed_at:
                placed_at["big-train"] = elapsed
            if late_node_added and counts["waiting"] + counts["bound"] + counts["Running"] <= 1:
                break
            if elapsed > DEADLINE:
                print("\n(stopping at the demo's time limit)")
                break
            await asyncio.sleep(0.5)
        _summary(server, placed_at)
        return 0
    finally:
        scheduler.stop()
        await task
        await client.close()
        await server.stop()
        if log_stream is not None:
            log_stream.close()
