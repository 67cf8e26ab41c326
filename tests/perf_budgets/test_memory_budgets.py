"""Memory budgets that fail the suite when broken: bytes per cached pod and per node, and no second copy
of the cluster held by the daemon's process for a forecast.

Measured with tracemalloc (what the interpreter allocates, not the process's resident memory, which
depends on the allocator and on timing), on a few thousand records of the shape the benchmarks use
(benchmarks/memory.py: one label, a toleration, cpu and memory requests), built from the API's JSON
as the informers do, so that the strings a record keeps (uid, name, resourceVersion) count. The budgets
sit a little above what the records take now, so that a regression (a new per-pod dict, a derived cache
never freed, a copy of the JSON kept beside the record) fails here rather than only in a benchmark.
Deterministic: no timing, the same objects every run.
"""

from __future__ import annotations

import gc
import inspect
import subprocess
import sys
import tracemalloc
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from builders import Pod, make_node

from ai_scheduler.cache import records
from ai_scheduler.config import default_config
from ai_scheduler.scheduler.core import SchedulerCore
from ai_scheduler.scheduler.heap import trimmer
from ai_scheduler.tracesim import forecast as forecasting
from ai_scheduler.tracesim.engine import Simulation

CREATED = "2026-11-26T12:00:00Z"
NODES = 200
PODS = 3000

# Bytes, as tracemalloc counts them on CPython 3.11 (64-bit).
POD_BOUND_BUDGET = 900  # a pod bound to a node: its record, the cache's state, the tenancy's charge (876 with
# the slots DRA and native gangs added to PodRecord: claims, claim statuses, scheduling group)
POD_PENDING_BUDGET = 1550  # a pod waiting: its record, the cache's state and its place in the queue
NODE_BUDGET = 1950  # a node: its record, its row in the columns, its topology domains
# What a forecast may leave behind or hold in the daemon's process: the expected starts, a few objects
# (the forked forecast), against a forecast whose simulation allocates about 2 MiB.
FORECAST_LEFT_BEHIND = 64 * 1024
FORKED_FORECAST_PEAK = 256 * 1024


Measure = Callable[[Callable[[], object]], int]


def _intern_line() -> int:
    """The line of records.py that interns a record's strings (`sys.intern`, in `_shared`)."""
    lines, first = inspect.getsourcelines(records._shared)
    return first + next(i for i, line in enumerate(lines) if "sys.intern(" in line)


def _uid(index: int) -> str:
    return f"00000000-0000-4000-8000-{index:012d}"


def bench_pod(index: int, node: str | None, *, estimate: str | None = None) -> dict[str, Any]:
    """A pod as the API serves it, of the benchmarks' shape."""
    pod = Pod(
        f"pod-{index:06d}", labels={"app": "bench"}, node_name=node,
        scheduler_name="ai-scheduler" if node is None else "another-scheduler",
        annotations={"ai-scheduler.io/estimated-runtime": estimate} if estimate else None,
        tolerations=[{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
                      "tolerationSeconds": 300}],
    )
    pod.meta(uid=_uid(index), resourceVersion=str(100_000 + index), creationTimestamp=CREATED)
    return (pod.status(phase="Running", startTime=CREATED) if node else pod.phase("Pending")).obj()


def _core(nodes: int = NODES) -> SchedulerCore:
    core = Simulation(default_config(), [], []).core
    for index in range(nodes):
        core.handlers.on_node_event("ADDED", make_node(f"node-{index:04d}", cpu="64", memory="512Gi"))
    core.start()
    return core


@pytest.fixture
def traced() -> Iterator[Measure]:
    """Bytes that `work` leaves allocated (after a full collection), less the growth of the interpreter's
    table of interned strings: a resize of it (about 2 MiB once it holds the strings of the tests run
    before) falls inside whichever measurement crosses its threshold, so that a budget would depend on
    the order the tests run in; the interned strings themselves are counted."""
    interning = [tracemalloc.Filter(False, records.__file__, _intern_line()),
                 tracemalloc.Filter(False, tracemalloc.__file__)]  # the snapshots' own objects

    def measure(work: Callable[[], object]) -> int:
        gc.collect()
        before = tracemalloc.take_snapshot().filter_traces(interning)
        work()
        gc.collect()
        after = tracemalloc.take_snapshot().filter_traces(interning)
        return sum(stat.size_diff for stat in after.compare_to(before, "filename"))

    tracemalloc.start()
    try:
        yield measure
    finally:
        tracemalloc.stop()


def _add_pods(core: SchedulerCore, first: int, count: int, bound: bool) -> None:
    for index in range(first, first + count):
        node = f"node-{index % NODES:04d}" if bound else None
        core.handlers.on_pod_event("ADDED", bench_pod(index, node))


def test_a_bound_pod_in_the_cache_takes_at_most_its_budget(traced: Measure) -> None:
    core = _core()
    _add_pods(core, 0, 500, bound=True)  # the one-time structures (interned strings, shared tuples)
    used = traced(lambda: _add_pods(core, 500, PODS, bound=True))
    assert len(core.cache.pods) == 500 + PODS
    assert used / PODS <= POD_BOUND_BUDGET, f"{used / PODS:.0f} bytes per bound pod"


def test_a_pending_pod_takes_at_most_its_budget(traced: Measure) -> None:
    core = _core()
    _add_pods(core, 0, 500, bound=False)
    used = traced(lambda: _add_pods(core, 500, PODS, bound=False))
    assert len(core.queue) == 500 + PODS
    assert used / PODS <= POD_PENDING_BUDGET, f"{used / PODS:.0f} bytes per pending pod"


def test_a_node_takes_at_most_its_budget(traced: Measure) -> None:
    core = _core(nodes=64)  # the columns' first growth is behind us; later ones are counted, as at scale

    def add() -> None:
        for index in range(64, 64 + 2000):
            core.handlers.on_node_event("ADDED", make_node(f"node-{index:04d}", cpu="64", memory="512Gi"))

    used = traced(add)
    assert used / 2000 <= NODE_BUDGET, f"{used / 2000:.0f} bytes per node"


def _forecast_core() -> SchedulerCore:
    """Pods that end (an estimate) on every node, and pods waiting for their room."""
    core = _core(nodes=20)
    for index in range(400):
        core.handlers.on_pod_event("ADDED", bench_pod(index, f"node-{index % 20:04d}", estimate="1h"))
    for index in range(400, 400 + 60):
        obj = bench_pod(index, None, estimate="30m")
        obj["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "40"
        core.handlers.on_pod_event("ADDED", obj)
    return core


def test_a_forecast_in_this_process_leaves_no_copy_of_the_cluster_behind(
    traced: Measure,
) -> None:
    core = _forecast_core()
    forecasting.forecast(core)  # the one-time structures (the simulation's imports and caches)
    starts: list[int] = []
    used = traced(lambda: starts.append(len(forecasting.forecast(core).starts)))
    assert starts == [60]
    assert used <= FORECAST_LEFT_BEHIND, f"{used} bytes left behind"


@pytest.mark.skipif(not forecasting.FORK, reason="the daemon forecasts in its own process without fork")
def test_the_daemons_forecast_holds_no_copy_of_the_cluster_and_forecasts_the_same(
    traced: Measure,
) -> None:
    core = _forecast_core()
    expected = dict(forecasting.forecast(core).starts)
    assert len(expected) == 60
    results: list[dict[str, float]] = []
    gc.collect()  # the simulation above leaves cycles behind until a collection
    tracemalloc.reset_peak()
    used = traced(lambda: results.append(dict(forecasting.forecaster(core, forecasting.DEFAULT_HORIZON_S)())))
    peak = tracemalloc.get_traced_memory()[1]
    assert results == [expected]  # the forked child simulates the same state as this process would
    assert used <= FORECAST_LEFT_BEHIND, f"{used} bytes left behind"
    base = tracemalloc.get_traced_memory()[0]
    assert peak - base <= FORKED_FORECAST_PEAK, f"{peak - base} bytes at the peak"


@pytest.mark.skipif(not forecasting.FORK, reason="only a forked forecast has a child to fail")
def test_a_forecast_whose_child_fails_raises_with_the_childs_error() -> None:
    work = forecasting.forecaster(None, 60.0)  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="forecast process: AttributeError"):
        work()


# In a fresh interpreter, as the daemon starts: its client, then a node created and listed back.
CLIENT_PROGRAM = """
import asyncio, sys
from ai_scheduler.api.kube import KubeClient
from ai_scheduler.cache.records import NodeRecord
from ai_scheduler.sim import make_node

async def main():
    client = await KubeClient.connect(sys.argv[1])
    try:
        await client.create_node(make_node("lazy-0"))
        nodes, _ = await client.list_as("nodes", NodeRecord.from_api)
    finally:
        await client.close()
    models = sum(name.startswith("kubernetes_asyncio.client.models.") for name in sys.modules)
    print(",".join(node.name for node in nodes), models)

asyncio.run(main())
"""


def test_the_daemons_client_loads_no_kubernetes_model_and_talks_to_the_api_server(tmp_path: Any) -> None:
    """kubernetes_asyncio's thousand model modules (api/lazy_client.py) stay unloaded; the API works."""
    kubeconfig = tmp_path / "kubeconfig"
    sim = subprocess.Popen(
        [sys.executable, "-m", "ai_scheduler.sim", "--no-kubelets", "--kubeconfig-out", str(kubeconfig)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
    )
    try:
        assert sim.stdout is not None and sim.stdout.readline(), "the simulated API server did not start"
        run = subprocess.run([sys.executable, "-c", CLIENT_PROGRAM, str(kubeconfig)],
                             capture_output=True, text=True, timeout=120, check=False)
    finally:
        sim.terminate()
        sim.wait(10)
    assert run.returncode == 0, run.stderr
    names, models = run.stdout.split()
    assert names == "lazy-0"
    assert int(models) < 10, f"{models} model modules imported"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim is Linux's")
def test_the_daemon_can_hand_free_heap_pages_back() -> None:
    trim = trimmer()
    assert trim is not None
    assert trim() in (0, 1)
