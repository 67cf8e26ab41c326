"""Logical domains end to end: a domain kept for gangs of at least 16 GPUs starts such a gang at once and
without preemption while small jobs run around it, and backfill into it only before the next such gang
is due; its status shows its nodes, capacity, use and waiting demand."""

from __future__ import annotations

from typing import Any

from backends import Cluster
from builders import make_node, make_pod
from conftest import StartScheduler, create_all, stored_pod, wait_for

from ai_scheduler.api.kube import KubeClient
from ai_scheduler.cache.gangs import GROUP_MIN_LABEL, GROUP_NAME_LABEL
from ai_scheduler.cache.records import ESTIMATE_ANNOTATION
from ai_scheduler.config import parse_config
from e2e.test_e2e_scheduling import pod_condition

CONFIG = {"server": {"port": 0, "bindAddress": "127.0.0.1"},
          "scheduling": {"initialBackoffSeconds": 0.05, "maxBackoffSeconds": 0.2, "reservation": True,
                         "backfill": True}}
KEPT = "node(s) kept for gangs of at least 16 GPUs (domain big)"


def small(name: str, estimate: str) -> dict[str, Any]:
    return make_pod(name, cpu="1", gpus=1, duration=600, annotations={ESTIMATE_ANNOTATION: estimate})


def member(gang: str, index: int) -> dict[str, Any]:
    # Ahead of the small jobs in the queue (so the reservation is theirs), never preempting.
    return make_pod(f"{gang}-{index}", cpu="1", gpus=8, duration=600, priority=100, preemption_policy="Never",
                    labels={GROUP_NAME_LABEL: gang, GROUP_MIN_LABEL: "2"},
                    annotations={ESTIMATE_ANNOTATION: "10m"})


def node_of(cluster: Cluster, name: str) -> str:
    return str(stored_pod(cluster, name)["spec"].get("nodeName") or "")


async def test_a_domain_kept_for_large_gangs_starts_one_without_preemption_while_small_jobs_backfill(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    running = await start_scheduler(parse_config(CONFIG))
    nodes = [make_node(f"big-{i}", cpu="64", memory="512Gi", gpus=8, labels={"pool": "big"})
             for i in range(3)]
    nodes += [make_node(f"small-{i}", cpu="64", memory="512Gi", gpus=8) for i in range(2)]
    await create_all(api, nodes, [])
    made = await api.request("POST", "/apis/ai-scheduler.io/v1alpha1/domains", body={
        "apiVersion": "ai-scheduler.io/v1alpha1", "kind": "Domain", "metadata": {"name": "big"},
        "spec": {"nodeSelector": {"matchLabels": {"pool": "big"}}, "keptFor": {"minGpus": 16}}})
    assert made.ok, made.message
    await wait_for(lambda: running.log_lines("domains.applied"), what="the domain in force")

    # Small jobs fill the other nodes; those left over wait, kept off the domain.
    await create_all(api, [], [small(f"s-{i:02d}", "20m") for i in range(20)])
    await wait_for(lambda: sum(1 for i in range(20) if node_of(cluster, f"s-{i:02d}")) == 16,
                   what="the small nodes full")
    assert not any(node_of(cluster, f"s-{i:02d}").startswith("big-") for i in range(20))
    waiting = [f"s-{i:02d}" for i in range(20) if not node_of(cluster, f"s-{i:02d}")]
    await wait_for(lambda: all(KEPT in pod_condition(cluster, name).get("message", "") for name in waiting),
                   what="the small jobs left over told why")

    # A gang of 16 GPUs starts at once in the domain, without preempting anyone.
    await create_all(api, [], [member("llm-a", i) for i in range(2)])
    await wait_for(lambda: all(node_of(cluster, f"llm-a-{i}").startswith("big-") for i in range(2)),
                   what="the large gang placed in its domain")
    [admitted] = [line for line in running.log_lines("gang.admitted") if line["gang"] == "default/llm-a"]
    assert admitted["placed"] == 2
    assert running.log_lines("preemption") == [] and running.log_lines("gang.preemption") == []

    # A second one must wait for the first (a reservation due when it ends); a small job that ends before
    # then backfills into the domain's free room, the long ones still may not.
    await create_all(api, [], [member("llm-b", i) for i in range(2)])
    await wait_for(lambda: any(line["holder"] == "gang default/llm-b"
                               for line in running.log_lines("reservation")),
                   what="the second gang's reservation")
    await create_all(api, [], [small("quick", "2m")])
    await wait_for(lambda: node_of(cluster, "quick").startswith("big-"), what="the quick job backfilled")
    assert not any(node_of(cluster, name) for name in waiting)
    assert not any(node_of(cluster, f"llm-b-{i}") for i in range(2))

    def status() -> dict[str, Any]:
        return dict((cluster.store.get("domains", None, "big") or {}).get("status") or {})

    await wait_for(lambda: status().get("used", {}).get("nvidia.com/gpu") == "17", what="the domain's status")
    shown = status()
    assert shown["nodes"] == ["big-0", "big-1", "big-2"]
    assert shown["capacity"]["nvidia.com/gpu"] == "24" and shown["keptFor"] == "gangs of at least 16 GPUs"
    assert shown["waiting"] == {"pods": 2, "nvidia.com/gpu": 16}  # the second gang's members
