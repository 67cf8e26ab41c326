"""Gang preemption's decision cost, in process: the PostFilter of a gang that fits nowhere.

    python benchmarks/gang_preemption.py --nodes 1000
    python benchmarks/gang_preemption.py --nodes 5000
    python benchmarks/gang_preemption.py --nodes 5000 --size 32 --by-placement

A full cluster of N kwok-style nodes with 8 GPUs each; every node holds two lower-priority gangs of 4
one-GPU pods (priorities 0..9, so 8 pods and 2 gangs per node: 40,000 pods and 10,000 gangs at
5,000 nodes). A gang of `--size` one-GPU pods at priority 100 fits nowhere; what is timed is
GangPreemptor.post_filter for it: the candidates (every placed pod of lower priority, gangs whole),
the budgets, the victims chosen over the node arrays, and the check that places the quorum for
real with the victims off (the what-if leaves the cache as it was, so every repeat sees the same
cluster). `--by-placement` times kube's order instead (every candidate off, the quorum placed,
units given back), the path taken for managed GPUs, host ports, anti-affinity or a required domain;
`--single-pod` times the single-pod PostFilter (preemption.py) for one 1-GPU pod on the same cluster.
Prints medians and p90 (ms) as JSON. Nothing is evicted: `execute` costs one outbox intent per member.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import kwok_node

from ai_scheduler.cache.cache import SchedulerCache
from ai_scheduler.cache.disruption import DisruptionBudgets
from ai_scheduler.cache.gangs import GROUP_MIN_LABEL, GROUP_NAME_LABEL, GangRegistry
from ai_scheduler.cache.records import NodeRecord, PodRecord
from ai_scheduler.cache.tenancy import Tenancy
from ai_scheduler.config import default_config
from ai_scheduler.log import JsonLogger, NullStream
from ai_scheduler.scheduler.core import build_frameworks
from ai_scheduler.scheduler.gang_preemption import GangPreemptor
from ai_scheduler.scheduler.metrics import Metrics
from ai_scheduler.scheduler.outbox import Evictions
from ai_scheduler.scheduler.preemption import Preemptor
from ai_scheduler.scheduler.victims import Plan


class NoEvictions:
    def evict(self, pod: PodRecord, plan: Plan) -> None:
        return None

    async def drain(self, timeout: float) -> None:
        return None


def gang_pod(name: str, group: str, size: int, priority: int, node: str = "") -> PodRecord:
    spec: dict[str, Any] = {
        "schedulerName": "ai-scheduler",
        "priority": priority,
        "containers": [{
            "name": "main",
            "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"nvidia.com/gpu": "1"}},
        }],
    }
    if node:
        spec["nodeName"] = node
    return PodRecord.from_api({
        "metadata": {
            "name": name, "namespace": "default", "uid": f"uid-{name}", "resourceVersion": "1",
            "labels": {GROUP_NAME_LABEL: group, GROUP_MIN_LABEL: str(size)} if group else {},
            "creationTimestamp": "2026-11-26T00:00:00Z",
        },
        "spec": spec,
        "status": {"phase": "Running" if node else "Pending",
                   **({"startTime": "2026-11-26T00:00:00Z"} if node else {})},
    })


def run(args: argparse.Namespace) -> dict[str, Any]:
    rng = random.Random(1)
    config = default_config()
    cache = SchedulerCache()
    tenancy = Tenancy(config)
    cache.tenancy = tenancy
    gangs = GangRegistry()
    for i in range(args.nodes):
        cache.set_node(NodeRecord.from_api(kwok_node(f"node-{i}", gpus=8)))
    built = time.perf_counter()
    for i in range(args.nodes):
        for half in range(2):
            group, priority = f"low-{i}-{half}", rng.randrange(10)
            for j in range(4):
                pod = gang_pod(f"{group}-{j}", group, 4, priority, f"node-{i}")
                cache.set_pod(pod)
                gangs.observe_pod(pod)
    build_s = time.perf_counter() - built
    framework = build_frameworks(config, cache, random.Random(1))[config.scheduler_name]
    logger = JsonLogger(stream=NullStream(), level="error")
    noop: Evictions = NoEvictions()
    preemptor = Preemptor(cache, tenancy, gangs, noop, logger, Metrics(), DisruptionBudgets())
    gang_preemptor = GangPreemptor(preemptor)
    members = [gang_pod(f"big-{j}", "big", args.size, 100) for j in range(args.size)]
    for pod in members:
        cache.set_pod(pod)
        gangs.observe_pod(pod)
    gang = gangs.gang_of(members[0])
    assert gang is not None
    assert framework.schedule(members[0]).node is None, "the cluster must be full"
    if args.single_pod:  # for comparison: kube's DefaultPreemption for one pod of the gang (preemption.py)
        alone = gang_pod("alone", "", 1, 100)
        cache.set_pod(alone)
        failed = framework.schedule(alone)

        def decide() -> Any:
            verdict = preemptor.post_filter(alone, framework, failed)
            assert verdict.plan is not None, verdict.message
            return verdict
    elif args.by_placement:
        def decide() -> Any:
            units = gang_preemptor._candidates(gang, members[0])
            units.sort(key=lambda u: u.importance())
            return gang_preemptor._by_placement(members, units, framework, [None])
    else:
        def decide() -> Any:
            return gang_preemptor.post_filter(gang, members, args.size, framework)
    durations = []
    victims = 0
    for _ in range(args.repeat):
        started = time.perf_counter()
        verdict = decide()
        durations.append((time.perf_counter() - started) * 1000)
        if args.single_pod:
            victims = len(verdict.plan.victims)
            continue
        victims = sum(len(unit.pods) for unit in verdict.victims)
        assert len(verdict.nominations) == args.size, verdict.message
    assert not cache.check_consistency()
    durations.sort()
    return {
        "benchmark": "gang preemption decision (in process)",
        "path": "single pod (preemption.py)" if args.single_pod else
        "by placement (kube's order)" if args.by_placement else "arithmetic, checked by placement",
        "nodes": args.nodes,
        "bound_pods": args.nodes * 8,
        "bound_gangs": args.nodes * 2,
        "gang_size": args.size,
        "victims": victims,
        "repeats": args.repeat,
        "p50_ms": round(statistics.median(durations), 2),
        "p90_ms": round(durations[int(0.9 * (len(durations) - 1))], 2),
        "min_ms": round(durations[0], 2),
        "cluster_build_s": round(build_s, 1),
    }


def main() -> None:
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=formatter)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--size", type=int, default=8, help="members of the preempting gang (1 GPU each)")
    parser.add_argument("--repeat", type=int, default=21)
    parser.add_argument("--by-placement", action="store_true", help="time kube's order (the fallback path)")
    parser.add_argument("--single-pod", action="store_true",
                        help="for comparison: the single-pod PostFilter for one such pod on the same cluster")
    print(json.dumps(run(parser.parse_args()), indent=2))


if __name__ == "__main__":
    main()
