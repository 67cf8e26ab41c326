"""Shared fixtures: the clusters (simulated and real) and the real scheduler daemon against them.

Every end-to-end test (a module of tests/e2e/, marker `e2e`) runs once per backend: `sim`, the embedded
simulated API server, and `kube`, the real control plane (etcd, kube-apiserver,
kube-controller-manager, kwok) built by hack/kube/build.sh. `--backend sim` or `--backend kube`
picks one. A test that needs a fault only one backend can make is marked
`@pytest.mark.backend("sim", reason=...)`, and is skipped with that reason on the other.
"""

from __future__ import annotations

import asyncio
import io
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import orjson
import pytest
from backends import Cluster, KubeCluster, SimCluster, install_scheduler
from kubernetes_asyncio import client

from ai_scheduler.api.kube import KubeClient
from ai_scheduler.config import Config, parse_config
from ai_scheduler.daemon.app import Scheduler
from ai_scheduler.log import JsonLogger
from ai_scheduler.sim import SimApiServer, priority_classes_for
from ai_scheduler.sim.controlplane import ControlPlane, ControlPlaneError, build_binaries
from ai_scheduler.sim.faultproxy import FaultProxy

# The accounting databases (tests/databases.py): the `database` fixture, SQLite and PostgreSQL.
pytest_plugins = ["databases"]

BACKENDS = ("sim", "kube")
E2E = Path(__file__).resolve().parent / "e2e"  # the end-to-end tests' folder


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--backend",
        choices=[*BACKENDS, "all"],
        default="all",
        help="which cluster the end-to-end tests run against (default: both)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "e2e: an end-to-end test, run against each backend")
    config.addinivalue_line(
        "markers", "backend(name, reason): runs on that backend only, for the reason given"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.parent == E2E:
            item.add_marker(pytest.mark.e2e)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "cluster" not in metafunc.fixturenames:
        return
    chosen = metafunc.config.getoption("backend")
    backends = BACKENDS if chosen == "all" else (chosen,)
    only = metafunc.definition.get_closest_marker("backend")
    params = []
    for name in backends:
        marks = []
        if only is not None and only.args[0] != name:
            marks.append(pytest.mark.skip(reason=f"{only.args[0]} backend only: {only.kwargs['reason']}"))
        params.append(pytest.param(name, marks=marks, id=name))
    metafunc.parametrize("cluster", params, indirect=True)

T = TypeVar("T")


def replace_atomically(path: Path, text: str) -> None:
    """Swap a file's content in one step, as a ConfigMap volume does (a plain write can be seen half done)."""
    staging = path.with_name(path.name + ".new")
    staging.write_text(text)
    os.replace(staging, path)


async def create_all(api: KubeClient, nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> None:
    """Create nodes, then pods, with what a real API server needs first: their namespaces and the
    PriorityClasses that `make_pod(priority=N)` names (both already there is fine)."""
    for namespace in {p["metadata"].get("namespace", "default") for p in pods} - {"default"}:
        assert (await api.create_namespace(namespace)).status in (201, 409)
    for priority_class in priority_classes_for(pods):
        assert (await api.create_priority_class(priority_class)).status in (201, 409)
    for node in nodes:
        assert (await api.create_node(node)).ok
    if nodes:
        await _untainted(api, {n["metadata"]["name"] for n in nodes if _ready(n)})
    pending = list(pods)
    for _ in range(50):
        results = await asyncio.gather(*(api.create_pod(pod) for pod in pending))
        failed = [(pod, r) for pod, r in zip(pending, results, strict=True) if not r.ok]
        # The real Priority admission plugin reads PriorityClasses from an informer: a class created a
        # moment ago may not be there yet. Anything else is an error of the test.
        errors = [r.message for _, r in failed]
        assert all("no PriorityClass with name" in message for message in errors), errors
        pending = [pod for pod, _ in failed]
        if not pending:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"PriorityClasses never admitted: {[p['metadata']['name'] for p in pending]}")


async def create_dra(api: KubeClient, *objects: dict[str, Any]) -> None:
    """Create Dynamic Resource Allocation objects (DeviceClasses, ResourceSlices, ResourceClaims,
    ResourceClaimTemplates, as `ai_scheduler.sim.objects` builds them), each by its kind."""
    create = {
        "DeviceClass": api.create_device_class,
        "ResourceSlice": api.create_resource_slice,
        "ResourceClaim": api.create_resource_claim,
        "ResourceClaimTemplate": api.create_resource_claim_template,
    }
    for obj in objects:
        result = await create[obj["kind"]](obj)
        assert result.ok, f"{obj['kind']} {obj['metadata']['name']}: {result.message}"


def _ready(node: dict[str, Any]) -> bool:
    conditions = node.get("status", {}).get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


async def _untainted(api: KubeClient, names: set[str]) -> None:
    """Wait until the node controller has taken the not-ready taint that admission puts on every new
    node off these Ready nodes, as a cluster's nodes are before anyone submits work to them."""
    deadline = asyncio.get_running_loop().time() + 30
    while True:
        nodes, _ = await api.list("nodes")
        tainted = {
            n["metadata"]["name"]
            for n in nodes
            if any(t["key"] == "node.kubernetes.io/not-ready" for t in n["spec"].get("taints") or [])
        }
        if not names & tainted:
            return
        assert asyncio.get_running_loop().time() < deadline, f"nodes still not-ready: {names & tainted}"
        await asyncio.sleep(0.05)


async def owner_job(api: KubeClient, name: str, namespace: str = "default") -> dict[str, Any]:
    """A Job that really exists (the garbage collector removes pods whose owner does not), as the
    controller ownerReference of the pods a test makes for it. It is suspended, so that the Job controller
    (which the real backend runs) makes no pods of its own for it."""
    template = {"spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]}}
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
           "spec": {"template": template, "suspend": True}}
    batch: Any = client.BatchV1Api(api.api_client)  # raw mode, as in ai_scheduler.api
    response = await batch.create_namespaced_job(namespace, job, _preload_content=False)
    assert response.status == 201, await response.text()
    uid = (await response.json())["metadata"]["uid"]
    return {"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": uid, "controller": True}


def stored_pod(cluster: Cluster, name: str, namespace: str = "default") -> dict[str, Any]:
    """A copy of a pod the test knows to exist in the cluster."""
    pod = cluster.store.get("pods", namespace, name)
    assert pod is not None, f"pod {namespace}/{name} not found"
    return pod


async def wait_for(
    predicate: Callable[[], T | None], timeout: float = 20.0, interval: float = 0.02, what: str = "condition"
) -> T:
    """Poll until predicate() is truthy (a deadline, not a timing assertion); its value."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(interval)


class RunningScheduler:
    """A daemon running in this event loop, with its JSON log captured for assertions."""

    def __init__(
        self, scheduler: Scheduler, client: KubeClient, log: io.BytesIO, task: asyncio.Task[None]
    ) -> None:
        self.scheduler = scheduler
        self.client = client
        self._log = log
        self.task = task

    def log_lines(self, event: str | None = None) -> list[dict[str, Any]]:
        lines = [orjson.loads(line) for line in self._log.getvalue().splitlines() if line.strip()]
        return [line for line in lines if event is None or line["event"] == event]

    async def stop(self) -> None:
        self.scheduler.stop()
        await asyncio.wait_for(self.task, 15)
        await self.client.close()


@pytest.fixture
async def sim() -> AsyncIterator[SimApiServer]:
    server = SimApiServer(bookmark_interval=0.2)
    await server.start()
    yield server
    await server.stop()


class ControlPlaneFailure:
    """Why the session's real control plane could not be had; told in full once, then in one line."""

    def __init__(self, cause: str) -> None:
        self.cause = cause
        self.told = False

    def fail(self) -> None:
        if self.told:
            pytest.fail(f"the real control plane could not be started (its cause is printed in full with "
                        f"the first real-backend test of this session): {self.cause.splitlines()[0]}",
                        pytrace=False)
        self.told = True
        pytest.fail(self.cause, pytrace=False)


@pytest.fixture(scope="session")
def control_plane(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[ControlPlane, str] | ControlPlaneFailure]:
    """The real control plane, started once per session, with deploy/ applied: (plane, scheduler token).

    A start that fails is tried once more on a fresh work folder (a cold machine's first start can be slow
    where a second is not), and its cause (the failing command's stderr and the components' log tails) is
    reported in full once; every later real-backend test then fails with one line that points to it, not
    with the same traceback again (pytest would re-raise a session fixture's error in every test)."""
    try:
        binaries = build_binaries()
    except ControlPlaneError as exc:
        yield ControlPlaneFailure(f"the real backend cannot be built: {exc} (or run with --backend sim)")
        return
    errors: list[str] = []
    for attempt in (1, 2):
        plane = ControlPlane(tmp_path_factory.mktemp(f"kube-{attempt}"), binaries)
        try:
            plane.start()
            token = install_scheduler(plane)
        except Exception as exc:  # whatever it is, said in full once and tried again
            plane.stop()
            errors.append(f"attempt {attempt}: {exc}")
            print(f"\nreal control plane, attempt {attempt} failed:\n{exc}", file=sys.stderr, flush=True)
            continue
        try:
            yield plane, token
        finally:
            plane.stop()
        return
    yield ControlPlaneFailure("the real control plane could not be started, twice:\n" + "\n\n".join(errors))


@pytest.fixture
async def cluster(request: pytest.FixtureRequest) -> AsyncIterator[Cluster]:
    if request.param == "sim":
        server = SimApiServer(bookmark_interval=0.2)
        url = await server.start()
        sim_proxy = FaultProxy("127.0.0.1", int(url.rsplit(":", 1)[1]), scheme="http")
        await sim_proxy.start()
        yield SimCluster(server, sim_proxy)
        await sim_proxy.stop()
        await server.stop()
        return
    started = request.getfixturevalue("control_plane")
    if isinstance(started, ControlPlaneFailure):
        started.fail()
        return
    plane, token = started
    proxy = FaultProxy("127.0.0.1", plane.apiserver_port)
    await proxy.start()
    real = KubeCluster(plane, proxy, token)
    await real.mirror.start()
    try:
        yield real
    finally:
        await proxy.stop()
        await real.close()


@pytest.fixture
async def api(cluster: Cluster) -> AsyncIterator[KubeClient]:
    """A client of the test's own, to create and change objects as a user would."""
    client = await cluster.client()
    yield client
    await client.close()


def fast_config(**scheduling: Any) -> Config:
    """Defaults with fast retries, so that tests converge quickly."""
    settings = {
        "initialBackoffSeconds": 0.05,
        "maxBackoffSeconds": 0.2,
        "unschedulableFlushSeconds": 5,
        **scheduling,
    }
    return parse_config({"server": {"port": 0, "bindAddress": "127.0.0.1"}, "scheduling": settings})


StartScheduler = Callable[..., Awaitable[RunningScheduler]]


@pytest.fixture
async def start_scheduler(cluster: Cluster) -> AsyncIterator[StartScheduler]:
    running: list[RunningScheduler] = []

    async def start(
        config: Config | None = None, *, wait_ready: bool = True, **kwargs: Any
    ) -> RunningScheduler:
        client = await cluster.scheduler_client()
        log = io.BytesIO()
        scheduler = Scheduler(config or fast_config(), client, JsonLogger(stream=log), seed=1, **kwargs)
        task = asyncio.create_task(scheduler.run())
        handle = RunningScheduler(scheduler, client, log, task)
        running.append(handle)
        if wait_ready:
            await wait_for(scheduler.ready.is_set, what="scheduler ready")
        return handle

    yield start
    for handle in running:
        if not handle.task.done():
            await handle.stop()
        # Shown by pytest only when the test fails: the first things the scheduler found worth a warning.
        warnings = [line for line in handle.log_lines() if line.get("level") in ("warning", "error")]
        for line in warnings[:20]:
            print(orjson.dumps(line).decode()[:400])
        if len(warnings) > 20:
            print(f"... and {len(warnings) - 20} more warnings")
