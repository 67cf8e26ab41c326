"""Accounting end to end, on both backends and with both databases (a SQLite file, a real PostgreSQL):
`ai-scheduler usage` against the pods' own lifetimes, and fair share that survives a restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest
from backends import Cluster
from builders import make_node, make_pod
from conftest import StartScheduler, create_all, stored_pod, wait_for

from ai_scheduler.accounting import open_store
from ai_scheduler.api.kube import KubeClient
from ai_scheduler.cli import main
from ai_scheduler.config import AccountingSettings, parse_config
from ai_scheduler.log import parse_time
from e2e.test_e2e_failover import LEASE, NAMESPACE, SHORT, LeaderProcess, config_data, processes
from e2e.test_e2e_scheduling import pod_condition

__all__ = ["processes"]  # the fixture: the leader processes, killed at the end

GPU = "nvidia.com/gpu"
H100 = "NVIDIA-H100-80GB-HBM3"
TENANCY: dict[str, Any] = {
    "server": {"port": 0, "bindAddress": "127.0.0.1"},
    "scheduling": {"initialBackoffSeconds": 0.05, "maxBackoffSeconds": 0.2, "priorityRefreshSeconds": 0.2},
    "groups": {"vision": {}, "nlp": {}},
    "users": {"alice": {"group": "vision"}, "bob": {"group": "nlp"}},
    "namespaces": {"team-a": {"user": "alice"}, "team-b": {"user": "bob"}},
    "policies": {"fair": {"weights": {"fairShare": 1}, "fairShareHalfLifeSeconds": 3600}},
}


async def namespaces(api: KubeClient) -> None:
    for namespace in ("team-a", "team-b"):
        assert (await api.create_namespace(namespace)).status in (201, 409)


def lifetime(pod: dict[str, Any]) -> float:
    """From the kubelet's start to its container's end, as the pod says."""
    status = pod["status"]
    ends = [parse_time(c["state"]["terminated"]["finishedAt"]) for c in status["containerStatuses"]]
    started = parse_time(status["startTime"])
    assert started is not None and None not in ends
    return max(e for e in ends if e is not None) - started


def ended(database: str, pod: str) -> bool:
    store = open_store(database)
    try:
        return any(row.pod == pod and row.ended is not None for row in store.rows(0, 4e9))
    finally:
        store.close()


async def usage_report(*argv: str) -> dict[str, Any]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = await asyncio.to_thread(main, ["usage", *argv, "-o", "json"])
    assert code == 0
    return dict(json.loads(out.getvalue()))


def saved_usage(database: str, group: str) -> float:
    """The group's decayed usage in the database's last fair-share checkpoint."""
    store = open_store(database)
    try:
        return store.load_fair_share()[0].get(("group", group), 0.0)
    finally:
        store.close()


async def warm_up(cluster: Cluster, api: KubeClient, database: str) -> None:
    """vision (alice) uses two GPUs for two seconds, nlp (bob) nothing; until that is checkpointed."""
    await create_all(api, [], [make_pod("a-warm", namespace="team-a", cpu="1", gpus=2, duration=2.0)])
    await wait_for(lambda: (stored_pod(cluster, "a-warm", "team-a").get("status") or {}).get("phase")
                   == "Succeeded", timeout=30, what="the warm-up ran")
    await wait_for(lambda: saved_usage(database, "vision") > 2.0, what="vision's usage checkpointed")


async def bob_goes_first(cluster: Cluster, api: KubeClient, scheduler: Any) -> None:
    """alice's pod comes first, bob's after; one GPU appears: bob's is placed, his group having used less
    (without the usage kept, the tie would go to alice's, the older)."""
    assert (await api.delete_node("warm")).ok
    await create_all(api, [], [make_pod("a-next", namespace="team-a", cpu="1", gpus=1, duration=600)])
    await asyncio.sleep(0.3)
    await create_all(api, [], [make_pod("b-next", namespace="team-b", cpu="1", gpus=1, duration=600)])
    await wait_for(lambda: {line["pod"] for line in scheduler.log_lines("decision")} >= {"team-a/a-next",
                                                                                         "team-b/b-next"},
                   what="both tried and waiting")
    await asyncio.sleep(0.5)  # past both backoffs: room that appears now is given in the queue's order
    await create_all(api, [make_node("one", cpu="32", memory="128Gi", gpus=1)], [])
    await wait_for(lambda: stored_pod(cluster, "b-next", "team-b")["spec"].get("nodeName") == "one",
                   what="bob's pod placed first: his group used less")
    await asyncio.sleep(0.5)
    assert not stored_pod(cluster, "a-next", "team-a")["spec"].get("nodeName")


async def test_usage_totals_match_the_pods_lifetimes(
    cluster: Cluster, api: KubeClient, database: str, start_scheduler: StartScheduler
) -> None:
    await namespaces(api)
    settings = AccountingSettings(database, checkpoint_seconds=0.3)
    await start_scheduler(parse_config(TENANCY), accounting=settings)
    pods = [make_pod("a-0", namespace="team-a", cpu="1", gpus=1, duration=1.0),
            make_pod("a-1", namespace="team-a", cpu="2", gpus=2, duration=2.0),
            make_pod("b-0", namespace="team-b", cpu="1", gpus=3, duration=2.5)]
    await create_all(api, [make_node("h100", cpu="32", memory="128Gi", gpus=8,
                                     labels={"nvidia.com/gpu.product": H100})], pods)
    names = [("a-0", "team-a", 1), ("a-1", "team-a", 2), ("b-0", "team-b", 3)]
    await wait_for(lambda: all((stored_pod(cluster, n, ns).get("status") or {}).get("phase") == "Succeeded"
                               for n, ns, _ in names), timeout=30, what="every pod finished")

    def written() -> bool:
        store = open_store(database)
        try:
            return len([row for row in store.rows(0, 4e9) if row.ended is not None]) == 3
        finally:
            store.close()

    await wait_for(lambda: written(), timeout=15, what="their ends written")
    expected: dict[str, float] = {}
    for name, namespace, gpus in names:
        user = "alice" if namespace == "team-a" else "bob"
        expected[user] = expected.get(user, 0.0) + gpus * lifetime(stored_pod(cluster, name, namespace))
    report = await usage_report("--database", database, "--since", "1h", "--by", "user")
    got = {item["key"]: item["gpuHours"] * 3600 for item in report["items"]}
    assert set(got) == {"alice", "bob"}
    # Within a second per pod (times its GPUs): timestamps of whole seconds on both sides.
    assert abs(got["alice"] - expected["alice"]) <= 1 * 1 + 2 * 1, (got, expected)
    assert abs(got["bob"] - expected["bob"]) <= 3 * 1, (got, expected)
    by_model = await usage_report("--database", database, "--since", "1h", "--by", "gpu_model")
    assert [item["key"] for item in by_model["items"]] == [H100]
    assert [item["pods"] for item in by_model["items"]] == [3]


async def test_a_restarted_daemon_keeps_the_fair_share_order_it_had(
    cluster: Cluster, api: KubeClient, database: str, start_scheduler: StartScheduler
) -> None:
    await namespaces(api)
    settings = AccountingSettings(database, checkpoint_seconds=0.3)
    first = await start_scheduler(parse_config(TENANCY), accounting=settings)
    await create_all(api, [make_node("warm", cpu="32", memory="128Gi", gpus=2)], [])
    await warm_up(cluster, api, database)
    await first.stop()  # the first daemon is gone; a new one starts from the database
    second = await start_scheduler(parse_config(TENANCY), accounting=settings)
    assert second.log_lines("accounting.restored")
    await bob_goes_first(cluster, api, second)


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)
async def test_a_database_that_cannot_be_opened_is_said_and_scheduling_goes_on(
    cluster: Cluster, api: KubeClient, database: str, start_scheduler: StartScheduler
) -> None:
    running = await start_scheduler(parse_config(TENANCY),
                                    accounting=AccountingSettings("sqlite:////proc/no/such/accounting.db"))
    [line] = running.log_lines("accounting.unavailable")
    assert "cannot open the SQLite database /proc/no/such/accounting.db" in line["error"]
    await create_all(api, [make_node("n", cpu="4", memory="8Gi")], [make_pod("p", cpu="1")])
    await wait_for(lambda: stored_pod(cluster, "p")["spec"].get("nodeName") == "n",
                   what="scheduled all the same")


async def test_after_a_failover_the_new_leader_keeps_the_fair_share_order(
    cluster: Cluster, api: KubeClient, database: str, start_scheduler: StartScheduler, tmp_path: Path,
    processes: list[LeaderProcess],
) -> None:
    """The leader, `ai-scheduler run` in its own process, is killed (SIGKILL: no last checkpoint); the
    standby, which shares its database, leads on with the usage the leader last wrote."""
    await namespaces(api)
    assert (await api.delete_lease(NAMESPACE, LEASE)).status in (200, 404)
    raw = {**config_data(SHORT[cluster.backend]), **{k: TENANCY[k] for k in
                                                      ("groups", "users", "namespaces", "policies")}}
    raw["scheduling"] = {**raw["scheduling"], "priorityRefreshSeconds": 0.2}
    raw["accounting"] = {"database": database, "checkpointSeconds": 0.3}
    await create_all(api, [make_node("warm", cpu="32", memory="128Gi", gpus=2)], [])
    leader = await LeaderProcess.start(cluster, tmp_path, raw, "leader-0")
    processes.append(leader)
    await wait_for(lambda: leader.events("leader.acquired"), timeout=60, what="the leader process leading")
    config = parse_config(raw)
    standby = await start_scheduler(config, leader_election=config.leader_election,
                                    accounting=config.accounting)
    await wait_for(lambda: standby.log_lines("leader.observed"), what="the standby seeing the leader")
    await warm_up(cluster, api, database)
    leader.process.kill()
    await leader.process.wait()
    await wait_for(lambda: standby.log_lines("leader.acquired"), timeout=30, what="the standby leading")
    [restored] = standby.log_lines("accounting.restored")
    assert restored["usage"]["group/vision"] > 2.0
    await bob_goes_first(cluster, api, standby)
    # The pods the old leader saw run are counted once, whoever wrote them last.
    store = open_store(database)
    try:
        rows = [row for row in store.rows(0, 4e9) if row.pod == "a-warm"]
    finally:
        store.close()
    assert len(rows) == 1 and rows[0].ended is not None


async def test_a_spent_budget_caps_the_users_gpus_until_the_period_ends(
    cluster: Cluster, api: KubeClient, database: str, start_scheduler: StartScheduler, tmp_path: Path,
) -> None:
    await namespaces(api)
    raw = {**TENANCY, "accounting": {"database": database, "checkpointSeconds": 0.3, "budgets": [
        {"name": "alice-daily", "subject": "alice", "gpuHours": 0.001, "period": "day", "action": "limitGpus",
         "limitGpus": 0}]}}
    config = parse_config(raw)
    running = await start_scheduler(config, accounting=config.accounting)
    # alice's warm-up uses 2 GPUs for 3 s: 6 GPU-seconds, past her 3.6.
    await create_all(api, [make_node("gpus", cpu="32", memory="128Gi", gpus=4)],
                     [make_pod("a-warm", namespace="team-a", cpu="1", gpus=2, duration=3.0)])
    await wait_for(lambda: running.log_lines("budget.spent"), timeout=30, what="alice's budget spent")
    [spent] = running.log_lines("budget.spent")
    assert spent["subject"] == "user alice" and spent["used_gpu_hours"] >= 0.001
    await wait_for(lambda: (stored_pod(cluster, "a-warm", "team-a").get("status") or {}).get("phase")
                   == "Succeeded", what="the warm-up done")
    await create_all(api, [], [make_pod("a-more", namespace="team-a", cpu="1", gpus=1, duration=600),
                               make_pod("b-more", namespace="team-b", cpu="1", gpus=1, duration=600)])
    await wait_for(lambda: stored_pod(cluster, "b-more", "team-b")["spec"].get("nodeName"), what="bob placed")
    await wait_for(lambda: pod_condition(cluster, "a-more", "team-a").get("message", "").startswith(
        "exceeds quota of user alice"), what="alice held to her spent budget")
    assert not stored_pod(cluster, "a-more", "team-a")["spec"].get("nodeName")
    # What is left of it, as `ai-scheduler usage --budgets` shows it, once the warm-up's end is written.
    await wait_for(lambda: ended(database, "a-warm"), what="the warm-up's end written")
    path = tmp_path / "config.yaml"
    path.write_text(json.dumps(raw))
    report = await usage_report("--config", str(path), "--budgets")
    [budget] = report["items"]
    assert (budget["name"], budget["spent"], budget["leftGpuHours"]) == ("alice-daily", True, 0)
    # Within a second of the pod's own lifetime, times its 2 GPUs.
    used = 2 * lifetime(stored_pod(cluster, "a-warm", "team-a"))
    assert budget["usedGpuHours"] * 3600 == pytest.approx(used, abs=2.0)
