"""Check the node agent against the real NVML of this machine: does `ai-scheduler.io/gpus` tell the truth?

What it does, end to end, with nothing mocked but the Kubernetes API server:

1. asks `nvidia-smi --query-gpu=index,uuid,name,memory.total,memory.used --format=csv,noheader,nounits`
   what the GPUs are (the independent reference);
2. starts the embedded simulated API server (`ai_scheduler.sim.SimApiServer`, as
   tests/unit/agent/test_agent.py does) on loopback and creates a Node labelled
   `ai-scheduler.io/gpu-managed: "true"`;
3. runs the node agent exactly as the DaemonSet does, `python -m ai_scheduler agent --master URL
   --node-name NODE --interval 0.5 --heartbeat 1`, with the real pynvml (nvidia-ml-py), for a few reading
   intervals, then stops it with SIGTERM;
4. reads the node's `ai-scheduler.io/gpus` / `gpus-updated` annotations back from the server and checks
   them against nvidia-smi: device count, indices, UUIDs, model names, total memory (within 1 MiB of
   rounding), and that NVLink peers and PCIe relations name only real devices;
5. feeds the node to the scheduler's own reader (`ai_scheduler.cache.gpus.parse_report` and
   `GpuTable.set_node`) and checks that it accepts the report and sees the same devices and memory;
6. prints raw NVML diagnostics (driver, memory info v1 and v2, NVLink link states, P2P, PCIe topology)
   that explain odd readings, one PASS/FAIL/WARN line per check, and the raw report.

Exit status: 0 when no check FAILed (WARN lines are things to look at, not failures), 1 otherwise.

Run it on a machine with an NVIDIA driver, from the repository root:

    python hack/gpu/nvml_check.py

Without a GPU, `python hack/gpu/nvml_check.py --fake` runs the same path with the agent's FakeNvml
(ai_scheduler/agent/fake_nvml.py) installed as `pynvml` in the agent's process, and the fake's own devices
as the reference instead of nvidia-smi. `--help` lists the other options.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # run as a script: make the checkout's ai_scheduler importable
    sys.path.insert(0, str(REPO))

from ai_scheduler.agent.fake_nvml import FakeNvml  # noqa: E402
from ai_scheduler.agent.nvml_reader import GPUS_ANNOTATION, UPDATED_ANNOTATION  # noqa: E402
from ai_scheduler.cache.gpus import MANAGED_LABEL, MIB, PCIE_RANK, GpuTable, parse_report  # noqa: E402
from ai_scheduler.cache.records import NodeRecord  # noqa: E402
from ai_scheduler.log import parse_time  # noqa: E402
from ai_scheduler.sim import make_node  # noqa: E402
from ai_scheduler.sim.apiserver import SimApiServer  # noqa: E402

NODE = "nvml-check-node"
SMI_QUERY = "index,uuid,name,memory.total,memory.used"
# Log events of the agent that mean it did not read the GPUs as it should.
BAD_EVENTS = ("nvml.unavailable", "gpu.unreadable", "agent.tick_failed", "gpus.patch_failed")
# The fake node of --fake: two H200s on one NVLink island (what the lent machine would report, and then some).
FAKE_COUNT = 2
FAKE_MODEL = "NVIDIA H200"
FAKE_MEMORY_MIB = 143771
FAKE_USED_MIB = (517, 40960)


# ---------------------------------------------------------------------------- results


@dataclass
class Results:
    """The checks' outcomes in order, and the text printed after them."""

    rows: list[tuple[str, str, str]] = field(default_factory=list)

    def add(self, status: str, name: str, detail: str = "") -> None:
        self.rows.append((status, name, detail))
        print(f"  [{status}] {name}" + (f": {detail}" if detail else ""), flush=True)

    def check(self, ok: bool, name: str, detail: str = "") -> bool:
        self.add("PASS" if ok else "FAIL", name, detail)
        return ok

    def failed(self) -> list[tuple[str, str, str]]:
        return [row for row in self.rows if row[0] == "FAIL"]

    def summary(self) -> str:
        counts = {status: sum(1 for row in self.rows if row[0] == status)
                  for status in ("PASS", "WARN", "FAIL")}
        lines = ["", "=" * 78, "SUMMARY"]
        lines += [f"  {status:4}  {name}" + (f"  ({detail})" if detail and status != "PASS" else "")
                  for status, name, detail in self.rows if status in ("PASS", "WARN", "FAIL")]
        verdict = "FAIL" if counts["FAIL"] else "PASS"
        lines.append(f"RESULT: {verdict}  ({counts['PASS']} passed, {counts['WARN']} warnings, "
                     f"{counts['FAIL']} failed)")
        return "\n".join(lines)


@dataclass(frozen=True)
class Reference:
    """One GPU as the reference (nvidia-smi, or the fake's description) sees it."""

    index: int
    uuid: str
    name: str
    memory_total_mib: int
    memory_used_mib: int


def section(title: str) -> None:
    print(f"\n--- {title} " + "-" * max(0, 73 - len(title)), flush=True)


# ---------------------------------------------------------------------------- the reference


def fake_nvml() -> FakeNvml:
    """The fake node of --fake; deterministic, so the agent's process and this one build the same."""
    fake = FakeNvml.dgx(count=FAKE_COUNT, memory_mib=FAKE_MEMORY_MIB, model=FAKE_MODEL, seed=NODE)
    for index, used in enumerate(FAKE_USED_MIB[:FAKE_COUNT]):
        fake.set_memory_used(index, used)
        fake.set_utilization(index, 7 * index)
    return fake


def fake_reference() -> list[Reference]:
    return [Reference(gpu.index, gpu.uuid, gpu.name, gpu.memory_total_mib, gpu.memory_used_mib)
            for gpu in fake_nvml().gpus]


def smi_reference(results: Results) -> list[Reference] | None:
    """The GPUs as nvidia-smi lists them, or None (with a FAIL) when it cannot say."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        results.check(False, "nvidia-smi found", "not on PATH: no reference to compare the agent with")
        return None
    command = [smi, f"--query-gpu={SMI_QUERY}", "--format=csv,noheader,nounits"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        results.check(False, "nvidia-smi ran", f"{type(exc).__name__}: {exc}")
        return None
    print(f"$ {' '.join(command)}\n{done.stdout}{done.stderr}", end="", flush=True)
    if done.returncode != 0:
        results.check(False, "nvidia-smi ran", f"exit status {done.returncode}: {done.stderr.strip()}")
        return None
    gpus = []
    for line in done.stdout.splitlines():
        if not line.strip():
            continue
        fields = [part.strip() for part in line.split(",")]
        try:
            index, uuid, name, total, used = fields
            # memory.used is "[N/A]" on some MIG setups: -1 then (only a WARN compares it).
            used_mib = int(float(used)) if used.replace(".", "", 1).isdigit() else -1
            gpus.append(Reference(int(index), uuid, name, int(float(total)), used_mib))
        except ValueError:
            results.check(False, "nvidia-smi output read", f"unexpected line {line!r}")
            return None
    results.check(bool(gpus), "nvidia-smi ran", f"{len(gpus)} GPU(s)")
    # For the reader: the PCIe/NVLink matrix, and the memory nvidia-smi counts as reserved.
    for extra in (["topo", "-m"], ["-q", "-d", "MEMORY"]):
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            shown = subprocess.run([smi, *extra], capture_output=True, text=True, timeout=60, check=False)
            print(f"$ nvidia-smi {' '.join(extra)}\n{shown.stdout}{shown.stderr}", end="", flush=True)
    return sorted(gpus, key=lambda gpu: gpu.index)


# ---------------------------------------------------------------------------- NVML diagnostics


def _call(function: Any, *args: Any) -> Any:
    """A pynvml call's value, or its error as text (diagnostics never fail the check)."""
    try:
        value = function(*args)
    except Exception as exc:
        return f"<{type(exc).__name__}: {exc}>"
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def nvml_diagnostics(nvml: Any) -> None:
    """What NVML itself answers for the calls the agent makes, and a few it does not (raw, for humans)."""
    init = _call(nvml.nvmlInit)
    if isinstance(init, str):
        print(f"nvmlInit: {init}")
        return
    try:
        for label, name in (("driver", "nvmlSystemGetDriverVersion"), ("NVML", "nvmlSystemGetNVMLVersion"),
                            ("CUDA driver", "nvmlSystemGetCudaDriverVersion")):
            if hasattr(nvml, name):
                print(f"{label} version: {_call(getattr(nvml, name))}")
        count = _call(nvml.nvmlDeviceGetCount)
        print(f"nvmlDeviceGetCount: {count}")
        if not isinstance(count, int):
            return
        handles = {index: nvml.nvmlDeviceGetHandleByIndex(index) for index in range(count)}
        max_links = int(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 0))
        for index, handle in handles.items():
            name, uuid = _call(nvml.nvmlDeviceGetName, handle), _call(nvml.nvmlDeviceGetUUID, handle)
            print(f"GPU {index}: {name}  {uuid}")
            pci = _call(nvml.nvmlDeviceGetPciInfo, handle)
            bus = pci if isinstance(pci, str) else getattr(pci, "busId", pci)
            print(f"  PCI bus id: {bus.decode() if isinstance(bus, bytes) else bus}")
            memory = _call(nvml.nvmlDeviceGetMemoryInfo, handle)
            if not isinstance(memory, str):
                print(f"  memory v1: total {memory.total / MIB:.1f} MiB, used {memory.used / MIB:.1f} MiB, "
                      f"free {memory.free / MIB:.1f} MiB")
            version = getattr(nvml, "nvmlMemory_v2", None)
            if version is not None:
                memory2 = _call(nvml.nvmlDeviceGetMemoryInfo, handle, version)
                if isinstance(memory2, str):
                    print(f"  memory v2: {memory2}")
                else:
                    print(f"  memory v2: total {memory2.total / MIB:.1f} MiB, used {memory2.used / MIB:.1f} "
                          f"MiB, reserved {memory2.reserved / MIB:.1f} MiB, "
                          f"free {memory2.free / MIB:.1f} MiB")
            rates = _call(nvml.nvmlDeviceGetUtilizationRates, handle)
            shown = rates if isinstance(rates, str) else f"gpu {rates.gpu}% mem {rates.memory}%"
            print(f"  utilization: {shown}")
            if hasattr(nvml, "nvmlDeviceGetMigMode"):
                print(f"  MIG mode (current, pending): {_call(nvml.nvmlDeviceGetMigMode, handle)}")
            states: dict[str, list[int]] = {}
            for link in range(max_links):
                state = _call(nvml.nvmlDeviceGetNvLinkState, handle, link)
                key = ("enabled" if state == nvml.NVML_FEATURE_ENABLED else "disabled"
                       if state == nvml.NVML_FEATURE_DISABLED else str(state))
                states.setdefault(key, []).append(link)
            print(f"  NVLink states over {max_links} links: "
                  + ("; ".join(f"{key}: links {links}" for key, links in states.items()) or "none"))
            for link in states.get("enabled", [])[:4]:
                remote = _call(nvml.nvmlDeviceGetNvLinkRemotePciInfo, handle, link)
                remote_bus = remote if isinstance(remote, str) else getattr(remote, "busId", remote)
                print(f"    link {link} remote PCI: {remote_bus}")
            for other, other_handle in handles.items():
                if other != index:
                    p2p = _call(nvml.nvmlDeviceGetP2PStatus, handle, other_handle,
                                nvml.NVML_P2P_CAPS_INDEX_NVLINK)
                    level = _call(nvml.nvmlDeviceGetTopologyCommonAncestor, handle, other_handle)
                    print(f"  to GPU {other}: NVLink P2P status {p2p}, PCIe common ancestor {level}")
    finally:
        _call(nvml.nvmlShutdown)


# ---------------------------------------------------------------------------- the agent


# The agent's process under --fake: the fake installed as `pynvml` before the command imports it.
FAKE_SHIM = (
    "import sys\n"
    "sys.path.insert(0, {here!r})\n"
    "import nvml_check\n"
    "sys.modules['pynvml'] = nvml_check.fake_nvml()\n"
    "from ai_scheduler.cli import main\n"
    "sys.exit(main())\n"
)


def agent_command(url: str, args: argparse.Namespace) -> list[str]:
    options = ["agent", "--master", url, "--node-name", NODE, "--interval", str(args.interval),
               "--heartbeat", str(args.heartbeat), "--log-level", "debug"]
    if args.fake:
        return [sys.executable, "-c", FAKE_SHIM.format(here=str(Path(__file__).resolve().parent)), *options]
    return [sys.executable, "-m", "ai_scheduler", *options]


def node_annotations(sim: SimApiServer) -> dict[str, str]:
    stored = sim.store.get("nodes", None, NODE) or {}
    annotations: dict[str, str] = stored.get("metadata", {}).get("annotations") or {}
    return annotations


async def run_agent(sim: SimApiServer, args: argparse.Namespace, results: Results) -> list[dict[str, Any]]:
    """Run the agent command for `args.ticks` intervals past its first report; its JSON log lines."""
    command = agent_command(sim.url, args)
    shown = command if not args.fake else [*command[:2], "<fake shim>", *command[3:]]
    print("$ " + " ".join(shown), flush=True)
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path, "PYTHONUNBUFFERED": "1"}
    env.pop("NODE_NAME", None)
    started = time.monotonic()
    process = await asyncio.create_subprocess_exec(
        *command, env=env, cwd=str(REPO), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    first_report: float | None = None
    try:
        while time.monotonic() - started < args.timeout:
            if first_report is None and GPUS_ANNOTATION in node_annotations(sim):
                first_report = time.monotonic()
                print(f"first report after {first_report - started:.2f} s", flush=True)
            if first_report is not None and time.monotonic() - first_report >= args.ticks * args.interval:
                break
            if process.returncode is not None:
                break
            await asyncio.sleep(0.05)
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
        try:
            stdout, stderr = await asyncio.wait_for(process.communicate(), 20)
        except TimeoutError:
            process.kill()
            stdout, stderr = await process.communicate()
    ran = time.monotonic() - started
    lines: list[dict[str, Any]] = []
    for raw in stdout.decode("utf-8", "replace").splitlines():
        try:
            lines.append(json.loads(raw))
        except ValueError:
            lines.append({"event": "<not JSON>", "text": raw})
    section(f"agent log ({len(lines)} lines, {ran:.1f} s)")
    for line in lines:
        print(json.dumps(line, separators=(",", ":")))
    if stderr.strip():
        print("agent stderr:\n" + stderr.decode("utf-8", "replace"))
    section("agent checks")
    results.check(first_report is not None, "agent wrote a report",
                  f"within {args.timeout:g} s" if first_report is None else
                  f"first after {first_report - started:.2f} s")
    results.check(process.returncode == 0, "agent stopped cleanly on SIGTERM",
                  f"exit status {process.returncode}")
    events = [str(line.get("event")) for line in lines]
    bad = [line for line in lines if line.get("event") in BAD_EVENTS or line.get("level") == "error"]
    results.check(not bad, "agent logged no NVML or API errors",
                  "; ".join(f"{line.get('event')}: {line.get('error') or line.get('message')}"
                            for line in bad))
    results.check(bool(events) and events[-1] == "agent.stopped", "agent logged agent.stopped last",
                  f"last event {events[-1] if events else None!r}")
    patches = int(sim.stats()["requests"].get("nodes", {}).get("patch", 0))
    reasons = [str(line.get("reason")) for line in lines if line.get("event") == "gpus.reported"]
    results.check(patches >= 2, "agent kept reporting (first report and heartbeats)",
                  f"{patches} patches; reasons {reasons}")
    return lines


# ---------------------------------------------------------------------------- the report


def check_report(report: list[dict[str, Any]], reference: list[Reference] | None, annotations: dict[str, str],
                 results: Results) -> None:
    updated = parse_time(annotations.get(UPDATED_ANNOTATION))
    results.check(updated is not None and abs(time.time() - updated) < 120, "gpus-updated is a current time",
                  repr(annotations.get(UPDATED_ANNOTATION)))
    results.check(bool(report), "report lists at least one GPU", f"{len(report)} device(s)")
    errors = [gpu for gpu in report if "error" in gpu]
    results.check(not errors, "no device reported with an error", "; ".join(
        f"GPU {gpu.get('index')}: {gpu['error']}" for gpu in errors))
    indices = [gpu.get("index") for gpu in report]
    results.check(indices == list(range(len(report))), "indices are 0..n-1 in order", str(indices))
    count = len(report)
    for gpu in report:
        index = gpu.get("index")
        peers = gpu.get("nvlinkPeers", [])
        results.check(isinstance(peers, list) and all(isinstance(p, int) and 0 <= p < count and p != index
                                                       for p in peers),
                      f"GPU {index}: nvlinkPeers name other reported devices", str(peers))
        pcie = gpu.get("pcie", {})
        valid = isinstance(pcie, dict) and all(
            key.isdigit() and int(key) != index and int(key) < count and value in PCIE_RANK
            for key, value in pcie.items())
        results.check(valid, f"GPU {index}: pcie names other devices with known relations", str(pcie))
        if valid and len(pcie) != count - 1:
            results.add("WARN", f"GPU {index}: pcie relation missing for some devices",
                        f"{len(pcie)} of {count - 1}")
        if "utilizationPct" not in gpu:
            results.add("WARN", f"GPU {index}: no utilizationPct", "NVML could not read it (MIG?)")
        elif not 0 <= gpu["utilizationPct"] <= 100:
            results.check(False, f"GPU {index}: utilizationPct within 0..100", str(gpu["utilizationPct"]))
    if reference is None:
        results.check(False, "report compared with the reference", "no reference")
        return
    results.check(count == len(reference), "device count matches",
                  f"agent {count}, reference {len(reference)}")
    by_index = {gpu.get("index"): gpu for gpu in report}
    results.check({gpu.get("uuid") for gpu in report} == {ref.uuid for ref in reference}, "UUID sets match",
                  f"agent {sorted(str(gpu.get('uuid')) for gpu in report)}, "
                  f"reference {sorted(ref.uuid for ref in reference)}")
    for ref in reference:
        entry = by_index.get(ref.index)
        if entry is None:
            results.check(False, f"GPU {ref.index}: reported", "missing from the report")
            continue
        results.check(entry.get("uuid") == ref.uuid, f"GPU {ref.index}: UUID matches",
                      f"agent {entry.get('uuid')!r}, reference {ref.uuid!r}")
        results.check(entry.get("model") == ref.name, f"GPU {ref.index}: model matches",
                      f"agent {entry.get('model')!r}, reference {ref.name!r}")
        total = entry.get("memoryTotalMiB")
        results.check(isinstance(total, int) and abs(total - ref.memory_total_mib) <= 1,
                      f"GPU {ref.index}: memory total matches (within 1 MiB)",
                      f"agent {total} MiB, reference {ref.memory_total_mib} MiB")
        used = entry.get("memoryUsedMiB")
        # Used memory moves, and NVML's v1 memory info counts the driver's reserved memory as used while
        # nvidia-smi does not: a difference is told, not failed.
        moved = abs(used - ref.memory_used_mib) if isinstance(used, int) else None
        results.add("PASS" if moved is not None and moved <= 64 else "WARN",
                    f"GPU {ref.index}: memory used close to the reference (within 64 MiB)",
                    f"agent {used} MiB, reference {ref.memory_used_mib} MiB")


def check_scheduler(node: dict[str, Any], report: list[dict[str, Any]], reference: list[Reference] | None,
                    results: Results) -> None:
    """The scheduler's reading of the node (cache/gpus.py), as its cache does on a node event."""
    devices, problem = parse_report(node["metadata"]["annotations"].get(GPUS_ANNOTATION))
    results.check(problem == "", "scheduler's parse_report accepts the report", problem)
    results.check(len(devices) == len(report), "scheduler sees every reported device",
                  f"{len(devices)} of {len(report)}")
    for device in devices:
        agent_total = next((gpu.get("memoryTotalMiB") for gpu in report if gpu.get("index") == device.index),
                           None)
        detail = f"scheduler {device.total} B, agent {agent_total} MiB"
        if reference is not None:
            ref = next((r for r in reference if r.index == device.index), None)
            ok = ref is not None and abs(device.total // MIB - ref.memory_total_mib) <= 1
            detail += f", reference {ref.memory_total_mib if ref else None} MiB"
        else:
            ok = True
        ok = ok and agent_total is not None and device.total == agent_total * MIB and not device.error
        results.check(ok, f"scheduler: GPU {device.index} memory total", detail)
    table = GpuTable(rows=1)
    table.set_node(0, NodeRecord.from_api(node))
    state = table.nodes.get(0)
    results.check(bool(table.managed[0]) and bool(table.healthy[0]),
                  "scheduler's GpuTable: node managed and healthy", state.problem if state else "no state")
    width = len(devices)
    free = [bool(value) for value in table.whole_free[0, :width]]
    shares = [int(value) // MIB for value in table.share_free[0, :width]]
    results.check(all(free) and all(s > 0 for s in shares), "scheduler's GpuTable: every device usable",
                  f"whole free {free}, free for shares {shares} MiB, "
                  f"islands {table.island[0, :width].tolist()}")


# ---------------------------------------------------------------------------- main


async def check(args: argparse.Namespace) -> int:
    results = Results()
    section("reference")
    if args.fake:
        reference: list[Reference] | None = fake_reference()
        print(f"--fake: the {FAKE_COUNT} GPUs of ai_scheduler/agent/fake_nvml.py stand in for nvidia-smi")
    else:
        reference = smi_reference(results)
    for ref in reference or []:
        print(f"  {ref}")

    section("NVML diagnostics (raw, in this process)")
    nvml: Any = fake_nvml() if args.fake else importlib.import_module("pynvml")
    print(f"pynvml from {getattr(importlib.import_module('pynvml'), '__file__', '?')}")
    nvml_diagnostics(nvml)

    section("simulated API server")
    sim = SimApiServer(kubelets=False, node_controller=False, claim_controller=False, bookmark_interval=0.5)
    await sim.start()
    try:
        print(f"listening on {sim.url}")
        sim.create("nodes", make_node(NODE, labels={MANAGED_LABEL: "true"}))
        section("agent")
        await run_agent(sim, args, results)
        node = sim.store.get("nodes", None, NODE)
    finally:
        await sim.stop()

    annotations: dict[str, str] = ((node or {}).get("metadata") or {}).get("annotations") or {}
    raw = annotations.get(GPUS_ANNOTATION)
    section("raw report")
    print(f"{GPUS_ANNOTATION}: {raw}")
    print(f"{UPDATED_ANNOTATION}: {annotations.get(UPDATED_ANNOTATION)}")
    report: list[dict[str, Any]] = []
    if raw is not None:
        try:
            loaded = json.loads(raw)
            report = loaded if isinstance(loaded, list) else []
            print(json.dumps(loaded, indent=2))
        except ValueError as exc:
            results.check(False, "report is JSON", str(exc))

    section("report checks")
    if node is not None and raw is not None:
        check_report(report, reference, annotations, results)
        section("scheduler checks")
        check_scheduler(node, report, reference, results)
    else:
        results.check(False, "report on the node", "no annotation to check")
    print(results.summary(), flush=True)
    return 1 if results.failed() else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--fake", action="store_true",
                        help="use the agent's FakeNvml (no GPU needed) and skip nvidia-smi")
    parser.add_argument("--interval", type=float, default=0.5, help="the agent's --interval (default 0.5 s)")
    parser.add_argument("--heartbeat", type=float, default=1.0, help="the agent's --heartbeat (default 1 s)")
    parser.add_argument("--ticks", type=int, default=4,
                        help="reading intervals to run past the first report (default 4)")
    parser.add_argument("--timeout", type=float, default=90.0,
                        help="seconds to wait for the agent's first report (default 90)")
    args = parser.parse_args()
    return asyncio.run(check(args))


if __name__ == "__main__":
    sys.exit(main())
