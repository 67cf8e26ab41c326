"""The installed command as a user runs it: help, config errors, the daemon, the demo."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from pathlib import Path

import orjson
from conftest import wait_for

from ai_scheduler.sim import SimApiServer, make_node, make_pod, write_kubeconfig

COMMAND = [sys.executable, "-m", "ai_scheduler"]


def test_help_describes_every_subcommand() -> None:
    top = subprocess.run([*COMMAND, "--help"], capture_output=True, text=True, check=True).stdout
    assert "run" in top and "demo" in top
    run = subprocess.run([*COMMAND, "run", "--help"], capture_output=True, text=True, check=True).stdout
    for flag in ("--config", "--kubeconfig", "--master", "--log-level"):
        assert flag in run
    demo = subprocess.run([*COMMAND, "demo", "--help"], capture_output=True, text=True, check=True).stdout
    assert "--nodes" in demo and "--pods" in demo


def test_invalid_config_at_start_exits_nonzero_naming_the_key(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("scheduling:\n  bindConcurrency: lots\n")
    result = subprocess.run(
        [*COMMAND, "run", "--config", str(config), "--master", "http://127.0.0.1:9"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "scheduling.bindConcurrency" in result.stderr
    line = orjson.loads(result.stdout.splitlines()[0])
    assert line["event"] == "config.invalid" and line["level"] == "error"
    assert "scheduling.bindConcurrency" in line["error"]


async def test_run_command_schedules_through_a_kubeconfig_and_stops_on_sigterm(tmp_path: Path) -> None:
    async with SimApiServer() as sim:
        kubeconfig = write_kubeconfig(sim.url, tmp_path / "kubeconfig")
        config = tmp_path / "config.yaml"
        config.write_text("server:\n  port: 0\n  bindAddress: 127.0.0.1\n")
        sim.create("nodes", make_node("n1", cpu="4", memory="8Gi"))
        for i in range(5):
            sim.create("pods", make_pod(f"p{i}", cpu="500m"))
        log = tmp_path / "scheduler.log"
        with open(log, "wb") as out:
            proc = await asyncio.create_subprocess_exec(
                *COMMAND,
                "run",
                "--config",
                str(config),
                "--kubeconfig",
                str(kubeconfig),
                stdout=out,
                stderr=subprocess.STDOUT,
            )
            try:
                await wait_for(
                    lambda: all(p["spec"].get("nodeName") == "n1" for p in sim.store.list("pods")),
                    timeout=60,
                    what="pods bound by the run command",
                )
            finally:
                proc.send_signal(signal.SIGTERM)
                code = await asyncio.wait_for(proc.wait(), 30)
        assert code == 0
        events = [orjson.loads(line)["event"] for line in log.read_bytes().splitlines()]
        assert "scheduler.ready" in events and "decision" in events and events[-1] == "scheduler.stopped"


def test_demo_runs_and_prints_a_summary() -> None:
    result = subprocess.run(
        [*COMMAND, "demo", "--nodes", "3", "--pods", "12"], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "Pods by kind" in out
    assert "impossible: Unschedulable: 0/4 nodes are available:" in out
    assert "other-scheduler -> node cpu-1" in out
