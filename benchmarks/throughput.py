"""Scheduling throughput: N kwok-style nodes, M pending pods, time until all are bound.

Full path (default): the embedded simulated API server runs in its own
process, the scheduler runs as `ai-scheduler run` in another, and this process
creates the objects and watches for bindings, as a user of the cluster would.

    python benchmarks/throughput.py --nodes 5000 --pods 10000

Any cluster: `--kubeconfig FILE --scheduler-name NAME` creates the nodes and
pods there and times whichever scheduler serves NAME (add `--start-scheduler`
to start ai-scheduler against it too). Objects are labelled and deleted after.

Real control plane (`--backend kube`): etcd, kube-apiserver, kube-controller-manager and kwok on
loopback (`ai_scheduler.sim.controlplane`, binaries from hack/kube/build.sh), N kwok nodes, then for
each scheduler in turn (kube-scheduler with client QPS 5000 / burst 10000, optionally kube-scheduler
with its defaults via `--kube-defaults`, then ai-scheduler with deploy/'s RBAC and the default config)
M pods of its own created while no scheduler runs, the scheduler started, and the time until the
last binding is seen; the pods are deleted before the next one. `--rate R` creates the pods at R
per second once the scheduler has bound a probe pod instead. Prints both and the ratio.

    python benchmarks/throughput.py --backend kube --nodes 1000 --pods 10000

Where ai-scheduler's time goes there: `--py-spy DIR` samples it from outside (py-spy's raw
stacks, no cost to the process), `--profile DIR` runs it under cProfile (which slows Python code
several times more than C code: shares, not times). The package is byte-compiled before any run,
as installing its wheel does in the image.

In-process (`--in-process`): the scheduling core alone (queue, filters,
scores, assume) with no API server, to measure the decision cost per pod;
`--percentage-of-nodes-to-score 100` scores every feasible node instead of the
adaptive share; `--resource-score NAME` puts another resource scorer in the
default profile's in place of NodeResourcesGPUAware (e.g.
NodeResourcesLeastAllocated, the default before issue 13), and `--tie-break
nodeOrder` sets scheduling.tieBreak.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import BENCH_LABEL, bench_pod, kwok_node, peak_rss_mib, percentiles

from ai_scheduler.api.kube import KubeClient, WatchBroken, WatchExpired

if TYPE_CHECKING:
    from ai_scheduler.sim.controlplane import ControlPlane

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

    def __init__(self, client: KubeClient, expected: set[str], selector: str = f"{BENCH_LABEL}=true") -> None:
        self.client = client
        self.expected = expected
        self.selector = selector
        self.bound_at: dict[str, float] = {}
        self.done = asyncio.Event()

    def _see(self, obj: dict[str, Any], now: float) -> None:
        name = obj["metadata"]["name"]
        if name in self.expected and obj["spec"].get("nodeName") and name not in self.bound_at:
            self.bound_at[name] = now
            if len(self.bound_at) == len(self.expected):
                self.done.set()

    async def run(self) -> None:
        selector = self.selector
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


def _byte_compile() -> None:
    """Byte-compile the ai_scheduler package once, as installing its wheel does in the image
    (deploy/Dockerfile: pip compiles at install): from an editable install with PYTHONDONTWRITEBYTECODE
    set, every start would compile all its sources again, which no deployed scheduler does."""
    import compileall

    import ai_scheduler

    compileall.compile_dir(str(Path(ai_scheduler.__file__).resolve().parent), quiet=1)


async def full_path(args: argparse.Namespace) -> dict[str, Any]:
    _byte_compile()
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


# ---------------------------------------------------------------------------------------------- real
# `--backend kube`: a real control plane (etcd, kube-apiserver, kube-controller-manager, kwok) on
# loopback, and kube-scheduler and ai-scheduler timed on it one after the other.

RUN_LABEL = "ai-scheduler.io/benchmark-run"
KUBE_TUNED = "kube-scheduler-tuned"
KUBE_DEFAULTS = "kube-scheduler-defaults"
AI_SCHEDULER = "ai-scheduler"
NOT_READY_TAINT = "node.kubernetes.io/not-ready"


def _versions(binaries: Path) -> dict[str, str]:
    import platform

    import numpy

    from ai_scheduler.sim.controlplane import kube_version

    kube_scheduler = subprocess.run(
        [str(binaries / "kube-scheduler"), "--version"], capture_output=True, text=True, check=False
    ).stdout.strip()
    return {
        "python": platform.python_version(),
        "numpy": numpy.__version__,
        "kubernetes": kube_version(),
        "kube_scheduler_binary": kube_scheduler,
        "binaries": binaries.name,
    }


def _kube_scheduler_command(binaries: Path, workdir: Path, kubeconfig: Path, tuned: bool) -> list[str]:
    """kube-scheduler as it ships (kubeconfig, no leader election) or with the client's QPS raised.

    `--secure-port=0` in both: no health/metrics server, so that nothing needs a port or a certificate.
    """
    binary = str(binaries / "kube-scheduler")
    if not tuned:
        return [binary, "--kubeconfig", str(kubeconfig), "--leader-elect=false", "--secure-port=0"]
    config = workdir / "kube-scheduler-tuned.yaml"
    config.write_text(
        "apiVersion: kubescheduler.config.k8s.io/v1\n"
        "kind: KubeSchedulerConfiguration\n"
        "clientConnection:\n"
        f"  kubeconfig: {kubeconfig}\n"
        "  qps: 5000\n"
        "  burst: 10000\n"
        "leaderElection:\n"
        "  leaderElect: false\n"
        "profiles:\n"
        "  - schedulerName: default-scheduler\n"
    )
    return [binary, "--config", str(config), "--secure-port=0"]


def _ai_scheduler_command(workdir: Path, kubeconfig: Path, profile: str | None = None) -> list[str]:
    """`ai-scheduler run` with the shipped default config, its server on a free loopback port; with
    `profile` (a folder), under cProfile, one file per run written there when it stops."""
    import yaml

    import ai_scheduler.config

    default = Path(ai_scheduler.config.__file__).resolve().parent / "default.yaml"
    config = yaml.safe_load(default.read_text())
    config["server"] = {"port": _free_port(), "bindAddress": "127.0.0.1"}
    path = workdir / "ai-scheduler.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    python = [sys.executable]
    if profile:
        Path(profile).mkdir(parents=True, exist_ok=True)
        python += ["-m", "cProfile", "-o", str(Path(profile).resolve() / "ai-scheduler-{repeat}.prof")]
    return [*python, "-m", "ai_scheduler", "run", "--config", str(path), "--kubeconfig", str(kubeconfig)]


def _install_ai_scheduler(plane: ControlPlane) -> str:
    """`kubectl apply -f deploy/` as an administrator would (as tests/backends.py does).

    Returns a token of the scheduler's ServiceAccount."""
    from ai_scheduler.sim.controlplane import REPO

    deploy = REPO / "deploy"
    plane.kubectl("apply", "-f", str(deploy / "crds"))
    plane.kubectl("wait", "--for=condition=Established", "crd/podgroups.scheduling.x-k8s.io", "--timeout=60s")
    plane.kubectl("apply", "-f", str(deploy))
    return plane.service_account_token("kube-system", "ai-scheduler")


async def _until(
    condition: Callable[[], bool], what: str, timeout: float, proc: subprocess.Popen[bytes] | None = None
) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"the scheduler exited with {proc.returncode} while waiting for {what}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}")
        await asyncio.sleep(0.02)


async def _wait_nodes_schedulable(client: KubeClient, count: int, timeout: float = 300) -> float:
    """Until all nodes are listed without the not-ready taint (the node controller removes it)."""
    started = time.monotonic()
    while True:
        items, _ = await client.list("nodes", label_selector=f"{BENCH_LABEL}=true")
        tainted = sum(
            1 for n in items if any(t.get("key") == NOT_READY_TAINT for t in n["spec"].get("taints") or [])
        )
        if len(items) == count and not tainted:
            return time.monotonic() - started
        if time.monotonic() - started > timeout:
            raise RuntimeError(f"{tainted} of {len(items)} nodes still carry {NOT_READY_TAINT}")
        await asyncio.sleep(0.5)


async def _namespace_ready(client: KubeClient, plane: ControlPlane, namespace: str) -> None:
    """A namespace whose default ServiceAccount exists (pod admission requires it)."""
    result = await client.create_namespace(namespace)
    if not result.ok and result.status != 409:
        raise RuntimeError(f"create namespace {namespace}: {result.message}")

    def has_account() -> bool:
        status, _ = plane.request("GET", f"/api/v1/namespaces/{namespace}/serviceaccounts/default")
        return bool(status == 200)

    deadline = time.monotonic() + 60
    while not await asyncio.to_thread(has_account):
        if time.monotonic() > deadline:
            raise RuntimeError(f"no default ServiceAccount in {namespace}")
        await asyncio.sleep(0.1)


def _decision_cycles_ms(log: Path) -> list[float]:
    cycles = []
    with log.open("rb") as lines:
        for line in lines:
            if b'"event":"decision"' in line:
                with contextlib.suppress(ValueError, KeyError):
                    cycles.append(float(json.loads(line)["cycle_ms"]))
    return cycles


async def _delete_pods(client: KubeClient, pods: list[dict[str, Any]], selector: str) -> None:
    async def delete(pod: dict[str, Any]) -> Any:
        meta = pod["metadata"]
        return await client.delete_pod(meta["namespace"], meta["name"], grace_period_seconds=0)

    await _create_all(client, pods, delete)
    deadline = time.monotonic() + 120
    while (await client.list("pods", label_selector=selector, limit=1))[0]:
        if time.monotonic() > deadline:
            raise RuntimeError(f"pods {selector} not gone after 120 s")
        await asyncio.sleep(0.5)


async def _kube_run(
    client: KubeClient, plane: ControlPlane, args: argparse.Namespace, run: str, scheduler_name: str,
    command: list[str], workdir: Path, repeat: int = 0,
) -> dict[str, Any]:
    """Pods for one scheduler in a namespace of their own, then that scheduler started and timed.

    Pod names carry the repeat: kwok deletes terminating pods by name, and under load its deletes of
    one repeat's pods can still be queued when the next repeat creates its own; with the same names,
    those late deletes would remove the new pods."""
    namespace = f"bench-{run}"
    await _namespace_ready(client, plane, namespace)
    selector = f"{RUN_LABEL}={run}"
    pods = [bench_pod(f"{run}-r{repeat}-{i}", scheduler_name, namespace=namespace) for i in range(args.pods)]
    for pod in pods:
        pod["metadata"]["labels"][RUN_LABEL] = run
    # Paced: one probe pod first; once the scheduler has bound it, it is running and synced.
    probe = bench_pod(f"{run}-r{repeat}-probe", scheduler_name, namespace=namespace)
    probe["metadata"]["labels"][RUN_LABEL] = run
    created = time.monotonic()
    if args.rate:
        await _create_all(client, [probe], client.create_pod)
    else:
        await _create_all(client, pods, client.create_pod)
    setup_s = time.monotonic() - created
    names = {p["metadata"]["name"] for p in pods}
    probe_name = probe["metadata"]["name"]
    watcher = BindWatcher(client, names | {probe_name} if args.rate else names, selector)
    watch_task = asyncio.create_task(watcher.run())
    log = (workdir / f"{run}-r{repeat}.log").open("wb")  # the child process owns it
    t0 = time.monotonic()
    command = [part.replace("{repeat}", str(repeat)) for part in command]
    proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    log.close()
    sampler = None
    if args.py_spy and scheduler_name == AI_SCHEDULER:  # sampled from outside: no cost to the process
        Path(args.py_spy).mkdir(parents=True, exist_ok=True)
        sampler = subprocess.Popen(
            ["py-spy", "record", "--pid", str(proc.pid), "--rate", "250", "--nonblocking", "--format", "raw",
             "-o", str(Path(args.py_spy).resolve() / f"ai-scheduler-{repeat}.txt")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
    sent_at: dict[str, float] = {}
    try:
        if args.rate:
            await _until(lambda: probe_name in watcher.bound_at, "the probe pod's binding", 120, proc)
            ready = watcher.bound_at[probe_name]
            cpu_at_ready = _cpu_seconds(proc.pid)
            await _create_at_rate(client, pods, args.rate, sent_at)
        await _until(watcher.done.is_set, f"all {args.pods} pods bound", args.timeout, proc)
        cpu_s = _cpu_seconds(proc.pid)
        rss = peak_rss_mib(proc.pid)
    finally:
        watch_task.cancel()
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        if sampler is not None:
            sampler.wait(30)
    bound = {name: at for name, at in watcher.bound_at.items() if name != probe_name}
    last = max(bound.values())
    result: dict[str, Any] = {
        "scheduler": run,
        "scheduler_name": scheduler_name,
        "command": command,
        "pods_setup_s": round(setup_s, 2),
    }
    if args.rate:
        first = min(sent_at.values())
        latencies = [(at - sent_at[name]) * 1000 for name, at in bound.items()]
        result |= {
            "start_to_probe_bound_s": round(ready - t0, 3),
            "pods_per_s_offered": args.rate,
            "pods_per_s_bound": round(args.pods / (last - first), 1),
            "latency_ms_create_to_bound": {k: round(v, 1) for k, v in percentiles(latencies).items()},
            "cpu_s_per_1000_pods": round((cpu_s - cpu_at_ready) * 1000 / args.pods, 3),
            "cpu_s_total": round(cpu_s, 2),
        }
    else:
        first_bind = min(bound.values())
        latencies = [(at - t0) * 1000 for at in bound.values()]
        result |= {
            "start_to_first_bind_s": round(first_bind - t0, 3),
            "pods_per_s_from_start": round(args.pods / (last - t0), 1),
            "pods_per_s_from_first_bind": round((args.pods - 1) / max(last - first_bind, 1e-9), 1),
            "latency_ms_from_start": {k: round(v, 1) for k, v in percentiles(latencies).items()},
            "cpu_s_per_1000_pods": round(cpu_s * 1000 / args.pods, 3),
            "cpu_s_total": round(cpu_s, 2),
        }
    result["peak_rss_mib"] = round(rss, 1)
    cycles = _decision_cycles_ms(workdir / f"{run}-r{repeat}.log")
    if cycles:  # ai-scheduler's own figure for each decision (`cycle_ms` in its log), on this control plane
        result["decision_ms"] = {k: round(v, 3) for k, v in percentiles(cycles).items()}
    await _delete_pods(client, [*pods, probe] if args.rate else pods, selector)
    return result


@dataclass
class RealCluster:
    """A real control plane with N kwok nodes, deploy/ applied, and a kubeconfig for ai-scheduler."""

    plane: ControlPlane
    client: KubeClient
    binaries: Path
    workdir: Path
    ai_kubeconfig: Path
    setup: dict[str, Any]


@contextlib.asynccontextmanager
async def real_cluster(nodes: list[dict[str, Any]], keep_workdir: bool = False) -> AsyncIterator[RealCluster]:
    import shutil

    from ai_scheduler.sim.controlplane import ControlPlane, build_binaries

    binaries = build_binaries()
    workdir = Path(tempfile.mkdtemp(prefix="ai-scheduler-bench-kube-"))
    # No audit log: kube-scheduler (as the admin) would not be audited, ai-scheduler (its own account) would.
    # Controller manager at QPS 1000: at its default 20, untainting 5,000 new nodes takes minutes.
    # Node leases of 5 minutes (renewed about every 75 s), grace 15 minutes: kwok keeps 5,000 nodes Ready
    # without most of the machine's CPU going to lease writes.
    plane = ControlPlane(workdir / "plane", binaries, audit=False, controller_qps=1000,
                         node_lease_seconds=300, node_monitor_grace_seconds=900)
    started = time.monotonic()
    await asyncio.to_thread(plane.start)
    plane_s = time.monotonic() - started
    client = await KubeClient.connect(str(plane.admin_kubeconfig), pool_size=CREATE_CONCURRENCY + 8)
    ok = False
    try:
        token = await asyncio.to_thread(_install_ai_scheduler, plane)
        ai_kubeconfig = plane.write_kubeconfig(workdir / "ai-scheduler.kubeconfig", token)
        started = time.monotonic()
        await _create_all(client, nodes, client.create_node)
        nodes_s = time.monotonic() - started
        untainted_s = await _wait_nodes_schedulable(client, len(nodes))
        setup = {
            "api_server": "kube-apiserver + etcd + kube-controller-manager + kwok on loopback (no audit log)",
            "versions": _versions(binaries),
            "control_plane_start_s": round(plane_s, 1),
            "nodes_create_s": round(nodes_s, 1),
            "nodes_untainted_after_s": round(untainted_s, 1),
        }
        yield RealCluster(plane, client, binaries, workdir, ai_kubeconfig, setup)
        ok = True
    finally:
        await client.close()
        await asyncio.to_thread(plane.stop)
        if ok and not keep_workdir:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            print(f"work folder (logs): {workdir}", file=sys.stderr)


# The figures reported as medians over the repeats, by mode.
MEDIAN_KEYS = {
    False: ("pods_per_s_from_start", "start_to_first_bind_s", "pods_per_s_from_first_bind",
            "cpu_s_per_1000_pods", "peak_rss_mib"),
    True: ("pods_per_s_bound", "start_to_probe_bound_s", "p50_ms", "p99_ms", "cpu_s_per_1000_pods",
           "peak_rss_mib"),
}


def _median_of(runs: list[dict[str, Any]], paced: bool) -> dict[str, float]:
    import statistics

    def value(run: dict[str, Any], key: str) -> float:
        if key in ("p50_ms", "p99_ms"):
            return float(run["latency_ms_create_to_bound"][key[:3]])
        return float(run[key])

    medians = {key: round(statistics.median(value(r, key) for r in runs), 3) for key in MEDIAN_KEYS[paced]}
    if all("decision_ms" in r for r in runs):
        for key in ("p50", "p99"):
            medians[f"decision_{key}_ms"] = round(statistics.median(r["decision_ms"][key] for r in runs), 3)
    return medians


async def kube_backend(args: argparse.Namespace) -> dict[str, Any]:
    _byte_compile()
    nodes = [kwok_node(f"bench-node-{i}") for i in range(args.nodes)]
    async with real_cluster(nodes, args.keep_workdir) as real:
        def kube(tuned: bool) -> tuple[str, list[str]]:
            command = _kube_scheduler_command(real.binaries, real.workdir, real.plane.admin_kubeconfig, tuned)
            return "default-scheduler", command

        candidates = {
            KUBE_TUNED: kube(True),
            KUBE_DEFAULTS: kube(False),
            AI_SCHEDULER: (
                "ai-scheduler", _ai_scheduler_command(real.workdir, real.ai_kubeconfig, args.profile)
            ),
        }
        chosen = args.only or [KUBE_TUNED, *([KUBE_DEFAULTS] if args.kube_defaults else []), AI_SCHEDULER]
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in chosen}
        # Interleaved (A, B, A, B, ...), so that a slow spell of the shared machine hits both schedulers.
        for repeat in range(args.repeat):
            for name in chosen:
                if not args.json:
                    print(f"# {name} ({repeat + 1}/{args.repeat}): {args.pods} pods, {args.nodes} nodes",
                          file=sys.stderr, flush=True)
                scheduler_name, command = candidates[name]
                result = await _kube_run(real.client, real.plane, args, name, scheduler_name, command,
                                         real.workdir, repeat)
                runs[name].append(result)
                if not args.json:
                    print(json.dumps({k: v for k, v in result.items() if k != "command"}), file=sys.stderr)
        paced = bool(args.rate)
        report: dict[str, Any] = {
            "mode": "kube" + (" (paced)" if paced else ""),
            "nodes": args.nodes,
            "pods": args.pods,
            "repeats": args.repeat,
            **real.setup,
            "median": {name: _median_of(results, paced) for name, results in runs.items()},
            "runs": runs,
        }
        key = "pods_per_s_bound" if paced else "pods_per_s_from_start"
        if KUBE_TUNED in runs and AI_SCHEDULER in runs:
            ratio = report["median"][AI_SCHEDULER][key] / report["median"][KUBE_TUNED][key]
            report[f"ratio_ai_over_tuned_kube_median_{key}"] = round(ratio, 2)
        return report


def _kube_summary(result: dict[str, Any]) -> str:
    paced = "(paced)" in result["mode"]
    lines = [
        f"{result['nodes']} nodes, {result['pods']} pods, medians of {result['repeats']}; " + ", ".join(
            f"{k} {v}" for k, v in result["versions"].items() if k != "binaries"
        ),
    ]
    keys = MEDIAN_KEYS[paced]
    lines.append(f"{'scheduler':<26}" + "".join(f"{k:>{max(len(k), 8) + 2}}" for k in keys))
    for run, median in result["median"].items():
        lines.append(f"{run:<26}" + "".join(f"{median[k]:>{max(len(k), 8) + 2}}" for k in keys))
    for run, median in result["median"].items():
        if "decision_p50_ms" in median:
            lines.append(f"{run} decision (its log's cycle_ms): p50 {median['decision_p50_ms']} ms, "
                         f"p99 {median['decision_p99_ms']} ms")
    lines += [f"{k}: {v}" for k, v in result.items() if k.startswith("ratio_")]
    return "\n".join(lines)


def in_process(args: argparse.Namespace) -> dict[str, Any]:
    import random

    from ai_scheduler.cache.cache import SchedulerCache
    from ai_scheduler.cache.records import NodeRecord, PodRecord
    from ai_scheduler.config import default_config, parse_config
    from ai_scheduler.queue import SchedulingQueue
    from ai_scheduler.scheduler.core import build_frameworks

    config = default_config()
    scheduling: dict[str, Any] = {"tieBreak": args.tie_break or config.scheduling.tie_break}
    if args.percentage_of_nodes_to_score is not None:
        scheduling["percentageOfNodesToScore"] = args.percentage_of_nodes_to_score
    scores = [
        {
            "name": args.resource_score if spec.name == "NodeResourcesGPUAware" else spec.name,
            "weight": spec.weight,
            **({"resources": dict(spec.resources)} if spec.resources else {}),
        }
        for spec in config.profiles[0].scores
    ]
    config = parse_config({"profiles": [{"scores": scores}], "scheduling": scheduling})
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
        "resource_score": args.resource_score,
        "tie_break": config.scheduling.tie_break,
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
        "--backend",
        choices=["sim", "kube"],
        default="sim",
        help="kube: a real control plane on loopback; times tuned kube-scheduler, then ai-scheduler",
    )
    parser.add_argument(
        "--kube-defaults",
        action="store_true",
        help="with --backend kube: also time kube-scheduler with its defaults (client QPS 50: slow)",
    )
    parser.add_argument(
        "--only",
        action="append",
        choices=[KUBE_TUNED, KUBE_DEFAULTS, AI_SCHEDULER],
        help="with --backend kube: time only these schedulers (repeatable; default: tuned kube-scheduler "
        "and ai-scheduler)",
    )
    parser.add_argument(
        "--repeat", type=int, default=1, help="with --backend kube: runs per scheduler, interleaved; medians"
    )
    parser.add_argument(
        "--profile", metavar="DIR",
        help="with --backend kube: run ai-scheduler under cProfile, a .prof file per run in DIR",
    )
    parser.add_argument(
        "--py-spy", metavar="DIR",
        help="with --backend kube: sample ai-scheduler with py-spy (raw stacks, a file per run in DIR)",
    )
    parser.add_argument(
        "--keep-workdir", action="store_true", help="with --backend kube: keep the logs and etcd data"
    )
    parser.add_argument(
        "--percentage-of-nodes-to-score",
        type=int,
        help="with --in-process: scheduling.percentageOfNodesToScore (default: the config's, 0 = adaptive)",
    )
    parser.add_argument(
        "--resource-score",
        default="NodeResourcesGPUAware",
        choices=("NodeResourcesGPUAware", "NodeResourcesLeastAllocated", "NodeResourcesMostAllocated"),
        help="with --in-process: the default profile's resource scorer (default: the default's)",
    )
    parser.add_argument(
        "--tie-break", choices=("random", "nodeOrder"),
        help="with --in-process: scheduling.tieBreak (default: the config's)",
    )
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--json", action="store_true", help="print only the JSON result")
    args = parser.parse_args()
    if args.backend == "kube":
        if args.in_process or args.kubeconfig:
            parser.error("--backend kube starts its own cluster: no --in-process or --kubeconfig")
        import uvloop

        result = uvloop.run(kube_backend(args))
        if not args.json:
            print(_kube_summary(result), end="\n\n")
    elif args.in_process:
        result = in_process(args)
    else:
        import uvloop

        result = uvloop.run(full_path(args))
    print(json.dumps(result) if args.json else json.dumps(result, indent=2))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
