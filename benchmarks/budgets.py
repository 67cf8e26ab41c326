"""Deterministic work counts of a scheduling attempt: what the guard and the test suite budget.

Time moves with the machine; how much work an attempt does does not. This module drives the
scheduling core in-process (the trace simulator's core, `tracesim.engine.Simulation`, so the daemon's
own cycle, gang scheduler, queue and tenancy) over kwok-style nodes and pods built from a seed, and
counts, per attempt, the calls into the code that costs: Filter and PreFilter plugin runs, Score
plugin runs, Framework.schedule (one member's filter-and-score pass), the whole-cluster filter pass
(`feasible_rows`), tenant lookups and actual tenant resolutions, and the nodes the filters looked at.

The counters wrap the real functions (a counting wrapper that calls through, installed on the
instance or the class and removed after); nothing is replaced, so every count is of code that ran.
The same inputs give the same counts on every machine: the pods, the nodes and the core's random
source come from the seed, and nothing here reads a clock.

    python benchmarks/budgets.py            # the counts as JSON
"""

from __future__ import annotations

import contextlib
import functools
import json
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import bench_pod, kwok_node

from ai_scheduler.cache.gangs import GROUP_MIN_LABEL, GROUP_NAME_LABEL
from ai_scheduler.cache.tenancy import Tenancy
from ai_scheduler.config import default_config
from ai_scheduler.scheduler.framework.runtime import Decision, Framework
from ai_scheduler.scheduler.gang import GangScheduler
from ai_scheduler.scheduler.schedule_one import SchedulingCycle
from ai_scheduler.trace.cluster import NodeSpec
from ai_scheduler.trace.records import TraceJob
from ai_scheduler.tracesim.engine import Simulation
from ai_scheduler.tracesim.records import Mode

ZONE = "topology.kubernetes.io/zone"


@contextlib.contextmanager
def counting(target: Any, name: str, counts: Counter[str], key: str) -> Iterator[None]:
    """Count the calls of `target.name` under `key` while the block runs; the real function runs."""
    real = getattr(target, name)
    own = name in vars(target)  # an attribute of the object itself (else inherited, or a bound method)

    @functools.wraps(real)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        counts[key] += 1
        return real(*args, **kwargs)

    setattr(target, name, wrapper)
    try:
        yield
    finally:
        if own:
            setattr(target, name, real)
        else:
            delattr(target, name)


@dataclass
class Counted:
    """What one run counted: the calls by name, and per Framework.schedule the nodes its filters looked at."""

    counts: Counter[str]
    evaluated: list[int]
    placed: int


Pods = list[tuple[dict[str, Any], str, int]]  # (Pod, gang name or '', gang size)


def placement(nodes: list[dict[str, Any]], pods: Pods, seed: int) -> Simulation:
    """The trace simulator in placement mode over these objects (see `counted_run`), not yet run."""
    specs = [NodeSpec.from_node(node) for node in nodes]
    jobs = []
    for index, (obj, gang, size) in enumerate(pods):
        obj["metadata"].setdefault("resourceVersion", "1")
        jobs.append(TraceJob(obj["metadata"]["name"], float(index), gang=gang, gang_size=size, manifest=obj))
    return Simulation(default_config(), specs, jobs, Mode.PLACEMENT, seed=seed)


def counted_run(nodes: list[dict[str, Any]], pods: Pods, seed: int) -> Counted:
    """Run the scheduling core over `nodes` and `pods` ((Pod, gang name or '', gang size)), with
    counting wrappers on every plugin of the default profile and on the attempt's entry points.

    The trace simulator in placement mode (the default config, tie-breaks from `seed`): the pods arrive
    in order, each (a gang: its members together) is tried exactly once, through the daemon's
    scheduling cycle, and a binding takes effect at once. The objects are the ones given, as the
    informers would hand them over (each pod with a resourceVersion)."""
    simulation = placement(nodes, pods, seed)
    counts: Counter[str] = Counter()
    evaluated: list[int] = []
    framework = simulation.core.frameworks[simulation.core.config.scheduler_name]
    real_schedule = Framework.schedule

    def schedule(self: Framework, *args: Any, **kwargs: Any) -> Decision:
        counts["framework_schedule"] += 1
        decision = real_schedule(self, *args, **kwargs)
        evaluated.append(decision.evaluated)
        return decision

    with contextlib.ExitStack() as stack:
        for plugin in framework.filters:
            stack.enter_context(counting(plugin, "run", counts, "filter_runs"))
            stack.enter_context(counting(plugin, "prefilter", counts, "prefilter_runs"))
        for scorer in framework.scores:
            stack.enter_context(counting(scorer, "score", counts, "score_runs"))
        Framework.schedule = schedule  # type: ignore[method-assign]  # counts, and notes `evaluated`
        stack.callback(setattr, Framework, "schedule", real_schedule)
        stack.enter_context(counting(Framework, "feasible_rows", counts, "feasible_rows"))
        stack.enter_context(counting(Tenancy, "tenant_of", counts, "tenant_of"))
        stack.enter_context(counting(Tenancy, "_resolve", counts, "tenant_resolve"))
        stack.enter_context(counting(SchedulingCycle, "schedule_one", counts, "cycles"))
        stack.enter_context(counting(GangScheduler, "schedule", counts, "gang_attempts"))
        result = simulation.run()
    placed = sum(1 for outcome in result.pods if outcome.node)
    return Counted(counts, evaluated, placed)


def _per(counts: Counter[str], attempts: int) -> dict[str, float]:
    return {key: round(value / attempts, 3) for key, value in sorted(counts.items())}


def kwok_nodes(count: int, zones: int = 0) -> list[dict[str, Any]]:
    """The benchmarks' kwok-style nodes (32 cpu, 256Gi, 8 nvidia.com/gpu), `zones` zone labels round-robin."""
    nodes = []
    for i in range(count):
        node = kwok_node(f"bench-node-{i}")
        if zones:
            node["metadata"]["labels"][ZONE] = f"zone-{i % zones}"
        nodes.append(node)
    return nodes


def decision_counts(nodes: int = 1000, pods: int = 200, *, seed: int = 0) -> dict[str, Any]:
    """throughput.py's pods (100m cpu / 128Mi) placed one after another: calls per attempt.

    Every pod fits, so each pod is one attempt; the counts include its arrival (the queue's look-up of
    its tenant) and its binding."""
    objects = [(bench_pod(f"pod-{i}", "ai-scheduler"), "", 0) for i in range(pods)]
    run = counted_run(kwok_nodes(nodes), objects, seed)
    counts = Counter(run.counts)
    attempts = counts.pop("cycles")
    counts.pop("gang_attempts", None)
    return {
        "nodes": nodes,
        "pods": pods,
        "attempts": attempts,
        "placed": run.placed,
        "per_attempt": _per(counts, attempts),
        "nodes_evaluated_per_attempt": round(sum(run.evaluated) / attempts, 3),
    }


def gang_member(gang: str, i: int, size: int) -> dict[str, Any]:
    """A member of gang.py's gangs (1 cpu, 2Gi, one nvidia.com/gpu), declared by the CRD-free labels."""
    pod = bench_pod(f"{gang}-{i}", "ai-scheduler", cpu="1", memory="2Gi")
    pod["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/gpu": "1"}
    pod["metadata"]["labels"] |= {GROUP_NAME_LABEL: gang, GROUP_MIN_LABEL: str(size)}
    return pod


def gang_pods(gangs: int, size: int) -> Pods:
    return [(gang_member(f"gang-{g}", i, size), f"gang-{g}", size) for g in range(gangs) for i in range(size)]


def gang_counts(
    nodes: int = 1000, gangs: int = 20, size: int = 8, *, zones: int = 10, seed: int = 0
) -> dict[str, Any]:
    """Gangs of `size` identical members (gang.py's, on nodes with zone labels as there): calls per
    gang attempt (one per gang: every gang fits in its first zone)."""
    run = counted_run(kwok_nodes(nodes, zones), gang_pods(gangs, size), seed)
    counts = Counter(run.counts)
    attempts = counts.pop("gang_attempts")
    counts.pop("cycles")
    return {
        "nodes": nodes,
        "zones": zones,
        "gangs": gangs,
        "size": size,
        "attempts": attempts,
        "placed": run.placed,
        "per_attempt": _per(counts, attempts),
        "nodes_evaluated_per_attempt": round(sum(run.evaluated) / attempts, 3),
    }


def all_counts(seed: int = 0) -> dict[str, dict[str, Any]]:
    return {"decision": decision_counts(seed=seed), "gang": gang_counts(seed=seed)}


if __name__ == "__main__":
    print(json.dumps(all_counts(), indent=2))
