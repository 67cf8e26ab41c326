"""The node agent: what it reports about the GPUs, when it writes, and how it survives NVML and API errors.

NVML is the fake (no GPU here); the API server is the real embedded simulated
one, reached over HTTP by our own KubeClient, and the node is read back from its store.
"""

from __future__ import annotations

import asyncio
import io
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
import pynvml
import pytest
from builders import make_node
from conftest import wait_for

from ai_scheduler.agent import (
    GPUS_ANNOTATION,
    UPDATED_ANNOTATION,
    FakeNvml,
    NodeAgent,
    encode_report,
    read_gpus,
    report_change,
)
from ai_scheduler.api.kube import KubeClient
from ai_scheduler.log import JsonLogger, rfc3339
from ai_scheduler.sim import SimApiServer

COMMAND = [sys.executable, "-m", "ai_scheduler"]
NODE = "gpu-node"
ISLANDS = [[0, 1, 2, 3], [4, 5, 6, 7]]
START = 1_800_000_000.0  # 2027-01-15T08:00:00Z

DEVICE_0 = (
    '{"index":0,"uuid":"GPU-2ab5f676-c205-5e3f-8787-89c72e4d1e81","model":"NVIDIA H100 80GB HBM3",'
    '"memoryTotalMiB":81559,"memoryUsedMiB":512,"utilizationPct":3,"nvlinkPeers":[1,2,3],'
    '"pcie":{"1":"PIX","2":"PXB","3":"PXB","4":"SYS","5":"SYS","6":"SYS","7":"SYS"}}'
)


class Clock:
    """A wall clock that moves only when the test says so."""

    def __init__(self, now: float = START) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class Harness:
    """One agent for one node of the simulated cluster, with a fake NVML, a fake clock and a captured log."""

    def __init__(self, sim: SimApiServer, client: KubeClient, nvml: FakeNvml, **options: Any) -> None:
        self.sim = sim
        self.nvml = nvml
        self.clock = Clock()
        self.log = io.BytesIO()
        self.agent = NodeAgent(client, options.pop("node_name", NODE), nvml=nvml, clock=self.clock,
                               logger=JsonLogger(stream=self.log, level="debug"), **options)

    def annotations(self, node: str = NODE) -> dict[str, str]:
        stored = self.sim.store.get("nodes", None, node)
        assert stored is not None
        return stored["metadata"].get("annotations") or {}

    def report(self) -> list[dict[str, Any]]:
        gpus: list[dict[str, Any]] = orjson.loads(self.annotations()[GPUS_ANNOTATION])
        return gpus

    def patches(self) -> int:
        count: int = self.sim.stats()["requests"].get("nodes", {}).get("patch", 0)
        return count

    def lines(self, event: str | None = None) -> list[dict[str, Any]]:
        lines = [orjson.loads(line) for line in self.log.getvalue().splitlines()]
        return [line for line in lines if event is None or line["event"] == event]


def dgx() -> FakeNvml:
    fake = FakeNvml.dgx(count=8, memory_mib=81559, islands=ISLANDS, seed=NODE)
    fake.set_memory_used(0, 512)
    fake.set_utilization(0, 3)
    return fake


@pytest.fixture
async def client(sim: SimApiServer) -> AsyncIterator[KubeClient]:
    sim.create("nodes", make_node(NODE, labels={"ai-scheduler.io/gpu-managed": "true"},
                                  annotations={"other.io/keep": "me"}))
    api = await KubeClient.connect(host=sim.url)
    yield api
    await api.close()


@pytest.fixture
def harness(sim: SimApiServer, client: KubeClient) -> Callable[..., Harness]:
    def make(nvml: FakeNvml | None = None, **options: Any) -> Harness:
        return Harness(sim, client, nvml if nvml is not None else dgx(), **options)

    return make


# ---------------------------------------------------------------------------- what is reported


async def test_two_island_node_is_reported_exactly(harness: Callable[..., Harness]) -> None:
    h = harness()
    assert await h.agent.tick()
    annotations = h.annotations()
    assert annotations[GPUS_ANNOTATION].startswith("[" + DEVICE_0 + ",")
    assert annotations[UPDATED_ANNOTATION] == "2027-01-15T08:00:00Z" == rfc3339(START, millis=False)
    assert annotations["other.io/keep"] == "me"  # a merge, not a replacement
    report = h.report()
    assert [gpu["index"] for gpu in report] == list(range(8))
    assert len({gpu["uuid"] for gpu in report}) == 8
    for gpu in report:
        island = ISLANDS[gpu["index"] // 4]
        assert gpu["nvlinkPeers"] == [peer for peer in island if peer != gpu["index"]]
        pair = gpu["index"] // 2
        assert gpu["pcie"] == {
            str(peer): "PIX" if peer // 2 == pair else "PXB" if peer in island else "SYS"
            for peer in range(8) if peer != gpu["index"]
        }
        assert gpu["memoryTotalMiB"] == 81559 and gpu["model"] == "NVIDIA H100 80GB HBM3"
    assert report[5]["memoryUsedMiB"] == 0 and report[5]["utilizationPct"] == 0


def test_nvlink_peers_without_remote_pci_info_and_behind_nvswitches() -> None:
    """Two ways NVML cannot name the remote GPU of a link; the NVLink P2P capability answers instead."""
    expected = read_gpus(_initialized(dgx()))
    fake = _initialized(dgx())
    fake.remote_pci_supported = False
    assert read_gpus(fake) == expected
    # HGX boards: every link ends at an NVSwitch, whose bus id is no GPU's; all 8 GPUs are NVLinked.
    fake = _initialized(FakeNvml.dgx(count=8, islands=[list(range(8))], seed=NODE))
    for gpu in fake.gpus:
        gpu.links = ["00000000:F0:00.0"] * 18
    fake.p2p_nvlink = {(a, b) for a in range(8) for b in range(a + 1, 8)}
    assert [gpu["nvlinkPeers"] for gpu in read_gpus(fake)] == [
        [peer for peer in range(8) if peer != index] for index in range(8)]


def test_names_and_uuids_as_bytes_read_the_same() -> None:
    """Older nvidia-ml-py returns bytes from nvmlDeviceGetName / nvmlDeviceGetUUID / busId."""
    expected = read_gpus(_initialized(dgx()))
    fake = _initialized(dgx())
    fake.bytes_strings = True
    assert read_gpus(fake) == expected


def test_the_scheduler_reads_the_report() -> None:
    from ai_scheduler.cache.gpus import parse_report

    devices, problem = parse_report(encode_report(read_gpus(_initialized(dgx()))))
    assert problem == ""
    assert devices[0].total == 81559 * 2**20 and devices[0].used == 512 * 2**20
    assert devices[0].nvlink == frozenset({1, 2, 3}) and devices[0].pcie[4] == "SYS"


def _initialized(fake: FakeNvml) -> FakeNvml:
    fake.nvmlInit()
    return fake


# ---------------------------------------------------------------------------- when it writes


async def test_patches_only_on_a_real_change(harness: Callable[..., Harness]) -> None:
    h = harness()
    assert await h.agent.tick()
    assert h.patches() == 1
    written = h.annotations()[GPUS_ANNOTATION]

    h.clock.advance(10)
    assert not await h.agent.tick()  # nothing moved
    h.nvml.set_memory_used(1, 4000)  # +4000 MiB: under 5% of 81559 MiB (4077)
    h.nvml.set_utilization(1, 20)  # +20 points: not more than 20
    h.clock.advance(10)
    assert not await h.agent.tick()
    assert h.patches() == 1 and h.annotations()[GPUS_ANNOTATION] == written

    h.nvml.set_memory_used(1, 4100)  # drift adds up from the last written report: now past the threshold
    h.clock.advance(10)
    assert await h.agent.tick()
    assert h.patches() == 2
    assert h.report()[1]["memoryUsedMiB"] == 4100 and h.report()[1]["utilizationPct"] == 20
    assert h.annotations()[UPDATED_ANNOTATION] == rfc3339(START + 30, millis=False)

    h.nvml.set_utilization(6, 21)
    h.clock.advance(10)
    assert await h.agent.tick()
    assert h.report()[6]["utilizationPct"] == 21
    reasons = [line["reason"] for line in h.lines("gpus.reported")]
    assert reasons == ["first report", "GPU 1: memory used moved by 4100 MiB",
                       "GPU 6: utilization moved by 21 points"]


async def test_heartbeat_rewrites_an_unchanged_report(harness: Callable[..., Harness]) -> None:
    h = harness(heartbeat=60)
    assert await h.agent.tick()
    h.clock.advance(59.9)
    assert not await h.agent.tick()
    h.clock.advance(0.1)
    assert await h.agent.tick()
    assert h.patches() == 2
    assert h.annotations()[UPDATED_ANNOTATION] == rfc3339(START + 60, millis=False)
    assert h.lines("gpus.reported")[-1]["reason"] == "heartbeat"


@pytest.mark.parametrize(("before", "after", "why"), [
    pytest.param({}, {"memoryUsedMiB": 5100}, "memory used moved by 5100 MiB", id="5% of 80 GiB"),
    pytest.param({}, {"memoryUsedMiB": 4077}, "", id="just under 5%"),
    pytest.param({"memoryTotalMiB": 16384}, {"memoryTotalMiB": 16384, "memoryUsedMiB": 1024}, "",
                 id="1 GiB floor on a small GPU"),
    pytest.param({"memoryTotalMiB": 16384}, {"memoryTotalMiB": 16384, "memoryUsedMiB": 1025},
                 "memory used moved by 1025 MiB", id="past the 1 GiB floor"),
    pytest.param({}, {"utilizationPct": 79}, "", id="utilization within 20 points"),
    pytest.param({"utilizationPct": 50}, {"utilizationPct": None}, "utilization became unreadable",
                 id="utilization lost"),
    pytest.param({}, {"uuid": "GPU-other"}, "uuid changed", id="another device"),
    pytest.param({}, {"pcie": {}}, "pcie changed", id="topology"),
    pytest.param({}, {"error": "GPU is lost"}, "error changed", id="error"),
])
def test_change_thresholds(before: dict[str, Any], after: dict[str, Any], why: str) -> None:
    base = {"index": 0, "uuid": "GPU-a", "model": "m", "memoryTotalMiB": 81559, "memoryUsedMiB": 0,
            "utilizationPct": 59, "nvlinkPeers": [], "pcie": {"1": "SYS"}}
    old = {**base, **before}
    new = {key: value for key, value in {**old, **after}.items() if value is not None}
    assert report_change([old], [new]) == (f"GPU 0: {why}" if why else "")
    assert report_change([old], [old, {**old, "index": 1}]) == "device set changed"
    assert report_change(None, []) == "first report"


# ---------------------------------------------------------------------------- NVML errors


async def test_an_unreadable_device_does_not_hide_the_others(harness: Callable[..., Harness]) -> None:
    fake = dgx()
    fake.fail(3, "nvmlDeviceGetMemoryInfo")  # GPU is lost
    fake.fail(1, "nvmlDeviceGetUtilizationRates", pynvml.NVML_ERROR_NOT_SUPPORTED)
    fake.fail(6, "nvmlDeviceGetTopologyCommonAncestor", pynvml.NVML_ERROR_UNKNOWN)
    h = harness(fake)
    assert await h.agent.tick()
    report = h.report()
    assert report[3] == {"index": 3, "error": "GPU is lost"}
    assert "utilizationPct" not in report[1] and report[1]["memoryTotalMiB"] == 81559
    assert report[1]["nvlinkPeers"] == [0, 2]  # the lost device is nobody's peer
    assert report[6]["pcie"] == {} and report[6]["nvlinkPeers"] == [4, 5, 7]
    assert report[4]["pcie"] == {"0": "SYS", "1": "SYS", "2": "SYS", "5": "PIX", "7": "PXB"}
    assert [gpu["index"] for gpu in report if "uuid" in gpu] == [0, 1, 2, 4, 5, 6, 7]

    h.clock.advance(10)
    assert not await h.agent.tick()  # the same error again is no change, and is not logged again
    (line,) = h.lines("gpu.unreadable")
    assert line["gpu"] == 3 and line["error"] == "GPU is lost" and line["level"] == "warning"

    fake.clear_failures()
    h.clock.advance(10)
    assert await h.agent.tick()
    assert h.report()[3]["uuid"].startswith("GPU-") and h.report()[1]["utilizationPct"] == 0
    assert [line["gpu"] for line in h.lines("gpu.readable")] == [3]


async def test_without_a_driver_reports_zero_gpus_and_keeps_going(harness: Callable[..., Harness]) -> None:
    fake = FakeNvml.no_driver()
    h = harness(fake, heartbeat=60, init_retry=300)
    assert await h.agent.tick()
    assert h.annotations()[GPUS_ANNOTATION] == "[]"
    (line,) = h.lines("nvml.unavailable")
    assert line["level"] == "error" and line["error"] == "NVML Shared Library Not Found"
    assert line["errorType"] == "NVMLError_LibraryNotFound" and "reporting zero GPUs" in line["consequence"]

    for _ in range(6):  # 60 s of ticks: one heartbeat, no retry of nvmlInit yet, no second error line
        h.clock.advance(10)
        await h.agent.tick()
    assert h.patches() == 2 and fake.calls["nvmlInit"] == 1
    h.clock.advance(240)
    await h.agent.tick()
    assert fake.calls["nvmlInit"] == 2 and len(h.lines("nvml.unavailable")) == 1
    assert h.annotations()[UPDATED_ANNOTATION] == rfc3339(START + 300, millis=False)

    fake.fail_init(None)  # the driver is installed: found at the next retry
    fake.gpus = dgx().gpus
    fake.topology = dgx().topology
    h.clock.advance(300)
    assert await h.agent.tick()
    assert len(h.report()) == 8 and h.lines("nvml.available")


async def test_driver_lost_while_running(harness: Callable[..., Harness]) -> None:
    fake = dgx()
    h = harness(fake)
    assert await h.agent.tick()
    fake.fail(None, "nvmlDeviceGetCount", pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
    h.clock.advance(10)
    assert await h.agent.tick()
    assert h.report() == []
    assert h.lines("nvml.unavailable")[0]["error"] == "Driver Not Loaded"
    assert fake.calls["nvmlShutdown"] == 1


# ---------------------------------------------------------------------------- API errors and the loop


async def test_a_failed_patch_is_logged_and_retried(
        sim: SimApiServer, harness: Callable[..., Harness]) -> None:
    h = harness(node_name="late-node")  # its Node object does not exist yet: the patch gets 404
    assert not await h.agent.tick()
    (line,) = h.lines("gpus.patch_failed")
    assert line["status"] == 404 and line["reason"] == "first report" and "late-node" in line["message"]

    sim.create("nodes", make_node("late-node"))
    h.clock.advance(10)
    assert await h.agent.tick()
    assert len(orjson.loads(h.annotations("late-node")[GPUS_ANNOTATION])) == 8


async def test_unreachable_api_server_never_crashes_the_loop() -> None:
    client = await KubeClient.connect(host="http://127.0.0.1:9")  # nothing listens on the discard port
    log = io.BytesIO()
    agent = NodeAgent(client, NODE, nvml=dgx(), interval=0.01, logger=JsonLogger(stream=log))
    try:
        assert not await agent.tick()
        task = asyncio.create_task(agent.run())
        await wait_for(lambda: log.getvalue().count(b"gpus.patch_failed") >= 3, what="retries")
        agent.stop()
        await asyncio.wait_for(task, 5)
    finally:
        await client.close()
    failed = [orjson.loads(line) for line in log.getvalue().splitlines() if b"patch_failed" in line]
    assert failed[0]["status"] == 0


async def test_run_reports_until_stopped_and_releases_nvml(harness: Callable[..., Harness]) -> None:
    h = harness(interval=0.01)
    h.agent.clock = time.time
    task = asyncio.create_task(h.agent.run())
    await wait_for(lambda: GPUS_ANNOTATION in h.annotations(), what="first report")
    h.nvml.set_memory_used(2, 60000)
    await wait_for(lambda: h.report()[2]["memoryUsedMiB"] == 60000, what="changed report")
    h.agent.stop()
    await asyncio.wait_for(task, 5)
    assert h.nvml.calls["nvmlInit"] == 1 and h.nvml.calls["nvmlShutdown"] == 1
    assert [line["event"] for line in h.lines()][-1] == "agent.stopped"


# ---------------------------------------------------------------------------- the command


def test_agent_help_describes_every_flag() -> None:
    result = subprocess.run([*COMMAND, "agent", "--help"], capture_output=True, text=True, check=True)
    for flag in ("--node-name", "--kubeconfig", "--master", "--interval", "--heartbeat", "--log-level"):
        assert flag in result.stdout
    assert "NODE_NAME" in result.stdout


async def test_agent_command_without_a_driver_reports_zero_gpus_and_stops_on_sigterm(
        sim: SimApiServer, client: KubeClient) -> None:
    """The real pynvml on this GPU-less machine: nvmlInit fails, the node still gets an empty report."""
    process = await asyncio.create_subprocess_exec(
        *COMMAND, "agent", "--master", sim.url, "--interval", "0.2",
        env={**os.environ, "NODE_NAME": NODE}, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    def stored() -> dict[str, Any]:
        return sim.store.get("nodes", None, NODE) or {}

    try:
        await wait_for(lambda: GPUS_ANNOTATION in stored()["metadata"].get("annotations", {}),
                       what="the agent's report")
    finally:
        process.send_signal(signal.SIGTERM)
        stdout, stderr = await asyncio.wait_for(process.communicate(), 15)
    assert process.returncode == 0, stderr.decode()
    assert stored()["metadata"]["annotations"][GPUS_ANNOTATION] == "[]"
    events = [orjson.loads(line)["event"] for line in stdout.splitlines()]
    assert events.count("nvml.unavailable") == 1 and events[-1] == "agent.stopped"


def test_agent_command_needs_a_node_name() -> None:
    result = subprocess.run([*COMMAND, "agent", "--master", "http://127.0.0.1:9"], capture_output=True,
                            text=True, timeout=60,
                            env={key: value for key, value in os.environ.items() if key != "NODE_NAME"})
    assert result.returncode == 2 and "NODE_NAME" in result.stderr
