"""The installed command as a user runs it: help, config errors, the daemon, the demo."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
from builders import make_node, make_pod
from conftest import wait_for

from ai_scheduler.config.loader import MAX_NESTING
from ai_scheduler.sim import SimApiServer, write_kubeconfig

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


def test_deeply_nested_config_at_start_exits_2_with_one_clear_message(tmp_path: Path) -> None:
    """Issue 12: 2,000 levels of `profiles: [[[[...` crashed start-up with a RecursionError traceback."""
    config = tmp_path / "config.yaml"
    config.write_text("profiles: " + "[" * 2000 + "]" * 2000 + "\n")
    result = subprocess.run(
        [*COMMAND, "run", "--config", str(config), "--master", "http://127.0.0.1:9"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr == (
        f"ai-scheduler: invalid config: {config}: invalid YAML at line 1, column {10 + MAX_NESTING}: "
        f"collections nested more than {MAX_NESTING} levels deep\n"
    )
    [line] = [orjson.loads(line) for line in result.stdout.splitlines()]
    assert line["event"] == "config.invalid" and "nested more than" in line["error"]


def log_events(log: Path, event: str) -> list[dict[str, Any]]:
    lines = [orjson.loads(line) for line in log.read_bytes().splitlines() if line.strip()]
    return [line for line in lines if line["event"] == event]


async def test_sighup_reloads_the_config_and_the_daemon_goes_on(tmp_path: Path) -> None:
    """Issue 12: SIGHUP killed the daemon. It reloads the config file now, whether it changed or not (the
    periodic poll only reports changes), logs the outcome, and scheduling goes on."""
    async with SimApiServer() as sim:
        kubeconfig = write_kubeconfig(sim.url, tmp_path / "kubeconfig")
        config = tmp_path / "config.yaml"
        accounting = f"accounting:\n  database: sqlite:///{tmp_path / 'accounting.db'}\n"
        config.write_text("server:\n  port: 0\n  bindAddress: 127.0.0.1\n" + accounting)
        sim.create("nodes", make_node("n1", cpu="4", memory="8Gi"))
        log = tmp_path / "scheduler.log"
        with open(log, "wb") as out:
            proc = await asyncio.create_subprocess_exec(
                *COMMAND, "run", "--config", str(config), "--kubeconfig", str(kubeconfig),
                stdout=out, stderr=subprocess.STDOUT,
            )
            try:
                await wait_for(lambda: log_events(log, "scheduler.ready"), timeout=60, what="daemon ready")
                proc.send_signal(signal.SIGHUP)
                await wait_for(lambda: log_events(log, "config.reloaded"), what="unchanged config reloaded")
                assert log_events(log, "config.reload_requested")[0]["signal"] == "SIGHUP"
                config.write_text("server:\n  port: 0\n  bindAddress: 127.0.0.1\nschedulerName: Not_Valid\n"
                                  + accounting)
                await wait_for(lambda: log_events(log, "config.refused"), what="the poll refuses it")
                proc.send_signal(signal.SIGHUP)  # the poll reports a bad file once; SIGHUP asks again
                await wait_for(lambda: len(log_events(log, "config.refused")) == 2, what="SIGHUP refuses it")
                assert proc.returncode is None, "the daemon is still running"
                sim.create("pods", make_pod("after", cpu="500m"))
                await wait_for(
                    lambda: (sim.store.get("pods", "default", "after") or {})["spec"].get("nodeName") == "n1",
                    timeout=30,
                    what="scheduling goes on",
                )
            finally:
                proc.send_signal(signal.SIGTERM)
                code = await asyncio.wait_for(proc.wait(), 30)
        assert code == 0
        assert "schedulerName" in log_events(log, "config.refused")[1]["error"]
        assert log_events(log, "scheduler.stopped")


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
