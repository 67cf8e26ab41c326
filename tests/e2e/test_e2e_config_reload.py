"""A config change is applied live; a broken one is refused and the last good config stays."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from backends import Cluster
from builders import make_node, make_pod
from conftest import StartScheduler, create_all, replace_atomically, wait_for

from ai_scheduler.api.kube import KubeClient
from ai_scheduler.config import load_config

SPREAD = """
server: {port: 0, bindAddress: 127.0.0.1}
scheduling: {initialBackoffSeconds: 0.05, maxBackoffSeconds: 0.2}
"""
BINPACK = (
    SPREAD
    + """
profiles:
  - scores:
      - {name: NodeResourcesMostAllocated, weight: 1, resources: {cpu: 1, memory: 1}}
"""
)


async def _place(cluster: Cluster, api: KubeClient, prefix: str, count: int) -> Counter[str]:
    for i in range(count):
        assert (await api.create_pod(make_pod(f"{prefix}-{i}", cpu="1", memory="1Gi"))).ok

    def placed() -> Counter[str] | None:
        pods = [p for p in cluster.store.list("pods") if p["metadata"]["name"].startswith(prefix)]
        if len(pods) == count and all(p["spec"].get("nodeName") for p in pods):
            return Counter(p["spec"]["nodeName"] for p in pods)
        return None

    return await wait_for(placed, what=f"{prefix} pods placed")


async def test_reload_switches_scoring_and_refuses_a_broken_file(
    tmp_path: Path, cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    path = tmp_path / "config.yaml"
    replace_atomically(path, SPREAD)
    running = await start_scheduler(load_config(path), config_path=str(path), config_poll_seconds=0.05)
    # Schedulable before the first pod comes (a real API server's new node carries the not-ready taint
    # until the node controller removes it): otherwise least-allocated sees fewer than four nodes.
    await create_all(api, [make_node(f"n{i}", cpu="16", memory="64Gi") for i in range(4)], [])

    spread = await _place(cluster, api, "spread", 4)
    assert len(spread) == 4, "least-allocated puts one pod on each empty node"

    replace_atomically(path, "profiles:\n  - scores: [{name: NoSuchPlugin, weight: 1}]\n")
    await wait_for(lambda: running.log_lines("config.refused"), what="broken config refused")
    assert "profiles[0].scores[0].name" in running.log_lines("config.refused")[0]["error"]

    replace_atomically(path, BINPACK)
    await wait_for(lambda: running.log_lines("config.reloaded"), what="new config applied")
    reloaded = running.log_lines("config.reloaded")[0]
    assert "profiles[0].scores[0].name" in reloaded["applied"] and reloaded["restart_required_for"] == []
    packed = await _place(cluster, api, "packed", 6)
    assert len(packed) == 1, f"most-allocated packs the new pods onto one node: {packed}"

    # A key a running daemon cannot change is named, and keeps running with the value it started with.
    replace_atomically(path, BINPACK.replace("0.2}", "0.2, bindConcurrency: 8}"))
    await wait_for(lambda: len(running.log_lines("config.reloaded")) == 2, what="restart-only change")
    reloaded = running.log_lines("config.reloaded")[1]
    assert reloaded["restart_required_for"] == ["scheduling.bindConcurrency"] and reloaded["applied"] == []
    assert running.scheduler.binder is not None and running.scheduler.binder.concurrency == 64
