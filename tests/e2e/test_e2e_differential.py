"""Differential test: ai-scheduler against kube-scheduler itself, on random cases (issue 13, point 2).

Real backend only: the reference is the kube-scheduler binary, which needs a real API server to
list, watch and bind through (it speaks protobuf and uses informers, leases and subresources that
the simulated server does not try to copy).

Rounds of cases in one cluster: `tests/differential.py` draws the cases (nodes with zones, disk labels,
taints, capacities and cordons; existing pods bound by name; incoming pods with tolerations, node
selector, node affinity, host ports, required pod affinity and anti-affinity, DoNotSchedule topology
spread, or PersistentVolumeClaims: bound to zonal volumes, unbound Immediate, ReadWriteOncePod,
WaitForFirstConsumer with local volumes, CSI volumes under CSINode attach limits; or GPUs through DRA
ResourceClaims) so that the outcome does not depend on tie-breaks. Every case gets two copies on nodes
of their own, one for each scheduler, and both schedulers run at the same time on a round of cases:
kube-scheduler with a profile named `diff-kube-scheduler` holding the plugins ai-scheduler has
(ImageLocality disabled: no pod here has images to prefer; DynamicResources on, for the DRA families:
ResourceSlices, DeviceClasses, claims, templates and extended resources mapped onto devices),
ai-scheduler with the same filters in kube-scheduler's order and its scores with kube-scheduler's
weights; percentageOfNodesToScore 100 in both; ai-scheduler's reservations (which kube-scheduler lacks)
off. A round (`AI_SCHEDULER_DIFF_BATCH`, default 100 cases) has its pods, volume objects, DRA objects,
nodes and events deleted before the next; a single batch of 200 cases (about 1,400 nodes) left both
schedulers' Unschedulable messages changing for minutes on a loaded 2-core machine.

Compared per case, once both have settled:
- how many pods each placed, and the count the case's own simulation gives (any valid placement
  reaches it);
- the Unschedulable messages of the pods left over: node total and reasons counted (without
  kube-scheduler's `preemption:` part), as multisets over the case's pods. All nodes of the batch are
  in the total; the other cases' nodes are refused for the same reasons in both copies;
- that every placement, by either scheduler, keeps every constraint (`differential.violations`).

`AI_SCHEDULER_DIFF_SEED` (default 13) picks the cases, `AI_SCHEDULER_DIFF_CASES` (default 200) how
many,
`AI_SCHEDULER_DIFF_ONLY=3,17` runs just those cases of the seed, `AI_SCHEDULER_DIFF_FAMILIES=dra` only
cases of the families whose names start so (other cases then). A failure prints each mismatching
case as YAML with both outcomes (for the first few, also ai-scheduler's decisions and the events of
the case's pods) and the command that runs it again.
"""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import time
from collections import Counter
from collections.abc import Awaitable, Iterable
from dataclasses import dataclass, field
from typing import Any

import pytest
from backends import KubeCluster
from conftest import RunningScheduler, StartScheduler
from differential import (
    CASE_LABEL,
    DEVICE_CLASSES,
    ROLE_LABEL,
    STORAGE_CLASSES,
    Case,
    DraObjects,
    VolumeObjects,
    dra_for,
    expected_bound,
    generate,
    nodes_for,
    pods_for,
    reasons,
    violations,
    volumes_for,
)

from ai_scheduler.api.kube import KubeClient
from ai_scheduler.config import Config, parse_config

KUBE_PROFILE = "diff-kube-scheduler"
COPIES = {"kube": KUBE_PROFILE, "ai": "ai-scheduler"}
NAMESPACES = {copy: f"diff-{copy}" for copy in COPIES}
CONCURRENCY = 64
SETTLE_TIMEOUT_S = 300
QUIET_POLLS = 3
DETAILED_FAILURES = 8

# kube-scheduler's plugins that ai-scheduler does not have, and that no pod here would need (no pod has
# images to prefer).
KUBE_DISABLED = ("ImageLocality",)
KUBE_CONFIG = """apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: {kubeconfig}
  qps: 5000
  burst: 10000
leaderElection:
  leaderElect: false
percentageOfNodesToScore: 100
podInitialBackoffSeconds: 1
podMaxBackoffSeconds: 2
profiles:
  - schedulerName: {profile}
    plugins:
      multiPoint:
        disabled:
{disabled}
"""


def ai_config() -> Config:
    """kube-scheduler's filters in its order, its default scores and weights (less ImageLocality)."""
    resources = {"cpu": 1, "memory": 1}
    return parse_config({
        "server": {"port": 0, "bindAddress": "127.0.0.1"},
        "profiles": [{
            "filters": ["NodeUnschedulable", "NodeName", "TaintToleration", "NodeAffinity", "NodePorts",
                        "NodeResourcesFit", "VolumeRestrictions", "NodeVolumeLimits", "VolumeBinding",
                        "VolumeZone", "PodTopologySpread", "InterPodAffinity", "DynamicResources"],
            "scores": [
                {"name": "TaintToleration", "weight": 3},
                {"name": "NodeAffinity", "weight": 2},
                {"name": "NodeResourcesLeastAllocated", "weight": 1, "resources": resources},
                {"name": "NodeResourcesBalancedAllocation", "weight": 1, "resources": resources},
                {"name": "PodTopologySpread", "weight": 2},
                {"name": "InterPodAffinity", "weight": 2},
            ],
        }],
        "scheduling": {
            "percentageOfNodesToScore": 100,
            "reservation": False,
            "initialBackoffSeconds": 0.2,
            "maxBackoffSeconds": 2,
            "unschedulableFlushSeconds": 10,
        },
    })


@dataclass
class Outcome:
    """What one scheduler did with one copy of a case."""

    bound: dict[str, str] = field(default_factory=dict)  # pod -> node
    messages: dict[str, str] = field(default_factory=dict)  # pod -> Unschedulable message

    def reason_counts(self) -> list[str]:
        counted = []
        for message in self.messages.values():
            total, counts = reasons(message)
            counted.append(f"{total}: " + ", ".join(f"{n} {r}" for r, n in sorted(counts.items())))
        return sorted(counted)


async def _bounded(jobs: Iterable[Awaitable[object]]) -> None:
    gate = asyncio.Semaphore(CONCURRENCY)

    async def run(job: Awaitable[object]) -> None:
        async with gate:
            await job

    await asyncio.gather(*(run(job) for job in jobs))


async def _create_pod(api: KubeClient, pod: dict[str, Any]) -> None:
    result = await api.create_pod(pod)
    assert result.ok, f"{pod['metadata']['name']}: {result.message}"


async def _create_node(api: KubeClient, node: dict[str, Any]) -> None:
    result = await api.create_node(node)
    assert result.ok, f"{node['metadata']['name']}: {result.message}"


async def _set_taints(api: KubeClient, node: dict[str, Any]) -> None:
    """The node's own taints only: off goes the not-ready taint that admission adds to every new node
    (the node controller, at its default client QPS, would take minutes over a thousand nodes)."""
    taints = node["spec"].get("taints")
    result = await api.patch_node(node["metadata"]["name"], {"spec": {"taints": taints}})
    assert result.ok, result.message


async def _untainted(api: KubeClient, nodes: dict[str, dict[str, Any]]) -> None:
    deadline = time.monotonic() + 60
    while True:
        listed, _ = await api.list("nodes", label_selector=CASE_LABEL)
        stale = [n for n in listed if n["metadata"]["name"] in nodes and any(
            t["key"].startswith("node.kubernetes.io/not-ready") for t in n["spec"].get("taints") or [])]
        if not stale:
            return
        assert time.monotonic() < deadline, f"{len(stale)} nodes keep the not-ready taint"
        await _bounded(_set_taints(api, nodes[n["metadata"]["name"]]) for n in stale)
        await asyncio.sleep(0.5)


def _snapshot(pods: list[dict[str, Any]]) -> dict[tuple[str, str], tuple[str, str]]:
    """(namespace, pod) -> (node, Unschedulable message); both empty while the pod is still open."""
    state = {}
    for pod in pods:
        meta = pod["metadata"]
        message = ""
        for condition in pod.get("status", {}).get("conditions") or []:
            if condition["type"] == "PodScheduled" and condition.get("reason") == "Unschedulable":
                message = condition.get("message", "")
        state[meta["namespace"], meta["name"]] = (pod["spec"].get("nodeName") or "", message)
    return state


async def _settle(api: KubeClient, expected: int, kube: subprocess.Popen[bytes],
                  settled_at: dict[str, float]) -> dict[tuple[str, str], tuple[str, str]]:
    """Poll until every incoming pod is bound or Unschedulable and nothing changed for a few polls;
    `settled_at` gets the time each copy first had every pod bound or Unschedulable."""
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    last: dict[tuple[str, str], tuple[str, str]] = {}
    quiet = 0
    while True:
        assert kube.poll() is None, f"kube-scheduler exited with {kube.returncode}"
        pods, _ = await api.list("pods", label_selector=f"{ROLE_LABEL}=incoming")
        state = _snapshot([p for p in pods if p["metadata"]["namespace"] in NAMESPACES.values()])
        settled = len(state) == expected and all(node or message for node, message in state.values())
        for copy, namespace in NAMESPACES.items():
            if copy not in settled_at and len(state) == expected and all(
                    node or message for (ns, _), (node, message) in state.items() if ns == namespace):
                settled_at[copy] = time.monotonic()
        quiet = quiet + 1 if settled and state == last else 0
        if quiet >= QUIET_POLLS:
            return state
        if time.monotonic() > deadline:
            open_pods = sorted(f"{ns}/{name}" for (ns, name), (n, m) in state.items() if not (n or m))
            moving = [f"{ns}/{name}: {last.get((ns, name))} -> {now}" for (ns, name), now in state.items()
                      if last.get((ns, name)) != now]
            raise AssertionError(f"not settled after {SETTLE_TIMEOUT_S} s: {len(open_pods)} pods neither "
                                 f"bound nor Unschedulable, e.g. {open_pods[:10]}; still changing: "
                                 + "\n".join(moving[:10]))
        last = state
        await asyncio.sleep(1)


async def _clean_up(api: KubeClient, nodes: dict[str, dict[str, Any]], volumes: list[VolumeObjects],
                   dra: list[DraObjects]) -> None:
    """Delete a round's pods (pending ones first, so that nothing is left to schedule while the rest go),
    its nodes and its events, many at a time: the fixture's collection deletes go one object at a
    time on the server, and would take longer than a request may over thousands of objects."""
    for role, bound in (("incoming", False), ("incoming", True), ("existing", True)):
        pods, _ = await api.list("pods", label_selector=f"{ROLE_LABEL}={role}")
        ours = [p["metadata"] for p in pods if p["metadata"]["namespace"] in NAMESPACES.values()
                and bool(p["spec"].get("nodeName")) == bound]
        await _bounded(api.delete_pod(m["namespace"], m["name"], grace_period_seconds=0) for m in ours)
    await _delete_volumes(api, volumes)
    await _delete_dra(api, dra)
    await _bounded(api.delete_node(name) for name in nodes)
    for namespace in NAMESPACES.values():
        events = await _events(api, namespace)
        await _bounded(_delete(api.core.delete_namespaced_event(e["metadata"]["name"], namespace,
                                                                  _preload_content=False)) for e in events)


async def _create_volumes(api: KubeClient, objects: list[VolumeObjects]) -> None:
    """PVs, CSINodes, then claims; then wait until the PV controller has bound the claims meant to be
    bound (a pod that came first would wait for them, and settle later than the test looks)."""
    await _bounded(_created(api.create_persistent_volume(v)) for o in objects for v in o.volumes)
    await _bounded(_created(api.create_csi_node(n)) for o in objects for n in o.csi_nodes)
    await _bounded(_created(api.create_persistent_volume_claim(c)) for o in objects for c in o.claims)
    wanted = {(c["metadata"]["namespace"], c["metadata"]["name"]) for o in objects for c in o.claims
              if c["metadata"]["name"] in o.bound}
    deadline = time.monotonic() + 120
    while wanted:
        claims, _ = await api.list("persistentvolumeclaims")
        wanted -= {(c["metadata"]["namespace"], c["metadata"]["name"]) for c in claims
                   if (c.get("status") or {}).get("phase") == "Bound"}
        assert time.monotonic() < deadline, f"{len(wanted)} claims not bound, e.g. {sorted(wanted)[:5]}"
        await asyncio.sleep(0.5)


async def _create_dra(api: KubeClient, objects: list[DraObjects]) -> None:
    """Slices, templates and claims; the blockers' allocations written as a scheduler would write them."""
    await _bounded(_created(api.create_resource_slice(s)) for o in objects for s in o.slices)
    await _bounded(_created(api.create_resource_claim_template(t)) for o in objects for t in o.templates)
    await _bounded(_created(api.create_resource_claim(c)) for o in objects for c in o.claims)
    await _bounded(_block(api, claim, status) for o in objects for claim, status in o.blockers)


async def _block(api: KubeClient, claim: dict[str, Any], status: dict[str, Any]) -> None:
    made = await api.create_resource_claim(claim)
    assert made.ok, made.message
    meta = made.body["metadata"]
    result = await api.replace_resource_claim_status(meta["namespace"], meta["name"],
                                                     {**made.body, "status": status})
    assert result.ok, result.message


async def _delete_dra(api: KubeClient, objects: list[DraObjects]) -> None:
    """Claims (finalizers off: their pods are gone), templates, slices; generated claims go with their
    pods (the garbage collector)."""
    names = [(c["metadata"]["namespace"], c["metadata"]["name"]) for o in objects
             for c in o.claims + [claim for claim, _ in o.blockers]]
    await _bounded(_unprotected(api, ns, name) for ns, name in names)
    await _bounded(_delete(api.resource.delete_namespaced_resource_claim(name, ns, _preload_content=False))
                   for ns, name in names)
    await _bounded(_delete(api.resource.delete_namespaced_resource_claim_template(
        t["metadata"]["name"], t["metadata"]["namespace"], _preload_content=False))
        for o in objects for t in o.templates)
    await _bounded(_delete(api.resource.delete_resource_slice(s["metadata"]["name"], _preload_content=False))
                   for o in objects for s in o.slices)


async def _unprotected(api: KubeClient, namespace: str, name: str) -> None:
    await _delete(api.resource.patch_namespaced_resource_claim(
        name, namespace, {"metadata": {"finalizers": None}}, _preload_content=False,
        _content_type="application/merge-patch+json"))


async def _created(call: Awaitable[Any]) -> None:
    result = await call
    assert result.ok, result.message


async def _delete_volumes(api: KubeClient, objects: list[VolumeObjects]) -> None:
    """Claims (their pods are gone), then volumes and CSINodes; the protection controllers let go of
    the claims and volumes once nothing uses them."""
    await _bounded(_delete(api.core.delete_namespaced_persistent_volume_claim(
        c["metadata"]["name"], c["metadata"]["namespace"], _preload_content=False))
        for o in objects for c in o.claims)
    await _bounded(_delete(api.core.delete_persistent_volume(v["metadata"]["name"], _preload_content=False))
                   for o in objects for v in o.volumes)
    await _bounded(_delete(api.storage.delete_csi_node(n["metadata"]["name"], _preload_content=False))
                   for o in objects for n in o.csi_nodes)


async def _events(api: KubeClient, namespace: str) -> list[dict[str, Any]]:
    response = await api.core.list_namespaced_event(namespace, _preload_content=False)
    async with response:
        body: dict[str, Any] = await response.json()
    assert response.status == 200, body
    return list(body.get("items") or [])


async def _delete(call: Awaitable[Any]) -> None:
    response = await call
    async with response:
        await response.read()


def _start_kube_scheduler(cluster: KubeCluster) -> tuple[subprocess.Popen[bytes], Any]:
    plane = cluster.plane
    config = plane.workdir / "diff-kube-scheduler.yaml"
    config.write_text(KUBE_CONFIG.format(
        kubeconfig=plane.admin_kubeconfig, profile=KUBE_PROFILE,
        disabled="\n".join(f"          - name: {name}" for name in KUBE_DISABLED)))
    log = (plane.workdir / "diff-kube-scheduler.log").open("ab")
    process = subprocess.Popen(
        [str(plane.binaries / "kube-scheduler"), "--config", str(config), "--secure-port=0"],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    return process, log


def _changed_nodes(created: dict[str, dict[str, Any]], listed: list[dict[str, Any]]) -> dict[str, str]:
    """Nodes whose labels, taints or cordon are not what the test made (or that are gone): name -> how.
    The taint the node controller puts on a cordoned node is expected."""
    found = {n["metadata"]["name"]: n for n in listed}
    changed = {}
    for name, node in created.items():
        now = found.get(name)
        if now is None:
            changed[name] = "gone"
            continue
        made = node["metadata"]["labels"]
        labels = {k: v for k, v in now["metadata"].get("labels", {}).items() if k in made}
        taints = sorted(t["key"] for t in now["spec"].get("taints") or []
                        if t["key"] != "node.kubernetes.io/unschedulable")
        cordoned = bool(now["spec"].get("unschedulable"))
        if (labels, taints, cordoned) != (made, sorted(t["key"] for t in node["spec"].get("taints") or []),
                                          bool(node["spec"].get("unschedulable"))):
            changed[name] = f"labels {labels}, taints {taints}, unschedulable {cordoned}"
    return changed


def _details(cluster: KubeCluster, case: Case, decisions: list[dict[str, Any]],
             changed_nodes: dict[str, str]) -> str:
    """For a mismatch: ai-scheduler's last decisions on the case's pods, kube-scheduler's events for
    them, and any of the case's nodes that changed under the test."""
    lines = []
    ai_prefix = f"{NAMESPACES['ai']}/c{case.index}-ai-"
    for line in decisions:
        if line["pod"].startswith(ai_prefix):
            lines.append(f"ai decision {line['ts']} {line['pod']} attempt {line['attempt']} {line['result']} "
                         f"{line.get('node') or line.get('message', '')[:300]}")
    for copy in COPIES:
        status, body = cluster.plane.request("GET", f"/api/v1/namespaces/{NAMESPACES[copy]}/events")
        for event in body.get("items", []) if status == 200 else []:
            name = event["involvedObject"].get("name", "")
            if name.startswith(f"c{case.index}-{copy}-p"):
                lines.append(f"{copy} event {event.get('lastTimestamp') or event.get('eventTime')} {name} "
                             f"{event['reason']} x{event.get('count', 1)}: {event['message'][:300]}")
    lines += [f"node {name} changed: {how}" for name, how in changed_nodes.items()
              if name.startswith(f"c{case.index}-")]
    return "\n".join(lines)


def _compare(case: Case, seed: int, outcomes: dict[str, Outcome]) -> tuple[list[str], int]:
    """The case's mismatches and how many comparisons were made."""
    problems = []
    comparisons = 0
    expected = expected_bound(case, random.Random(seed))
    counts = {copy: len(outcome.bound) for copy, outcome in outcomes.items()}
    for copy, count in counts.items():
        comparisons += 1
        if count != expected:
            problems.append(f"{copy}: {count} pods bound, the case's simulation places {expected}")
    comparisons += 1
    if counts["kube"] != counts["ai"]:
        problems.append(f"bound: kube-scheduler {counts['kube']}, ai-scheduler {counts['ai']}")
    comparisons += 1
    if outcomes["kube"].reason_counts() != outcomes["ai"].reason_counts():
        problems.append("Unschedulable reasons differ")
    for copy, outcome in outcomes.items():
        found, checks = violations(case, copy, outcome.bound)
        comparisons += checks
        problems += [f"{copy} placement: {v}" for v in found]
    return problems, comparisons


def _report(case: Case, seed: int, problems: list[str], outcomes: dict[str, Outcome]) -> str:
    lines = [f"--- case {case.index} (seed {seed}, family {case.family}): " + "; ".join(problems),
             case.yaml().rstrip()]
    for copy, outcome in outcomes.items():
        lines.append(f"{copy}: bound {dict(sorted(outcome.bound.items()))}")
        lines += [f"{copy}: unschedulable: {line}" for line in outcome.reason_counts()]
    lines.append(f"again: AI_SCHEDULER_DIFF_SEED={seed} AI_SCHEDULER_DIFF_ONLY={case.index} "
                 "python -m pytest -q --backend kube tests/e2e/test_e2e_differential.py -s")
    return "\n".join(lines)


@dataclass
class Tally:
    cases: int = 0
    pods: int = 0
    comparisons: int = 0
    bound: Counter[str] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)


async def _round(api: KubeClient, cluster: KubeCluster, kube: subprocess.Popen[bytes],
                 ours: RunningScheduler, cases: list[Case], seed: int, tally: Tally) -> None:
    """One batch of cases, side by side: set up, let both schedulers settle, compare, clean up."""
    started = time.monotonic()
    nodes = {n["metadata"]["name"]: n for case in cases for copy in COPIES for n in nodes_for(case, copy)}
    volumes = [volumes_for(case, copy, NAMESPACES[copy]) for case in cases for copy in COPIES]
    dra = [dra_for(case, copy, NAMESPACES[copy]) for case in cases for copy in COPIES]
    try:
        await _bounded(_create_node(api, n) for n in nodes.values())
        await _bounded(_set_taints(api, n) for n in nodes.values())
        await _untainted(api, nodes)
        await _create_volumes(api, volumes)
        await _create_dra(api, dra)
        workloads = {(case.index, copy): pods_for(case, copy, NAMESPACES[copy], scheduler)
                     for case in cases for copy, scheduler in COPIES.items()}
        await _bounded(_create_pod(api, pod) for existing, _ in workloads.values() for pod in existing)
        setup_s = time.monotonic() - started
        # All at once: the pods of a case are alike, so the order they arrive in changes nothing.
        await _bounded(_create_pod(api, pod) for _, incoming in workloads.values() for pod in incoming)
        created_s = time.monotonic() - started
        expected = sum(len(incoming) for _, incoming in workloads.values())
        settled_at: dict[str, float] = {}
        state = await _settle(api, expected, kube, settled_at)
        listed, _ = await api.list("nodes", label_selector=CASE_LABEL)
        changed_nodes = _changed_nodes(nodes, listed)

        outcomes = {case.index: {copy: Outcome() for copy in COPIES} for case in cases}
        by_prefix = {f"c{case.index}-{copy}": (case.index, copy) for case in cases for copy in COPIES}
        for (_, name), (node, message) in state.items():
            index, copy = by_prefix[name.rsplit("-", 1)[0]]
            if node:
                outcomes[index][copy].bound[name] = node
            else:
                outcomes[index][copy].messages[name] = message
        decisions = ours.log_lines("decision")
        for case in cases:
            problems, made = _compare(case, seed, outcomes[case.index])
            tally.comparisons += made
            if problems:
                report = _report(case, seed, problems, outcomes[case.index])
                if len(tally.failures) < DETAILED_FAILURES:
                    details = await asyncio.to_thread(_details, cluster, case, decisions, changed_nodes)
                    report += "\n" + details
                tally.failures.append(report)
            for copy in COPIES:
                tally.bound[copy] += len(outcomes[case.index][copy].bound)
        tally.cases += len(cases)
        tally.pods += expected // 2
        print(f"differential: round of {len(cases)} cases, {len(nodes)} nodes, {expected} pods: set up in "
              f"{setup_s:.0f} s, pods created by {created_s:.0f} s, settled by "
              + ", ".join(f"{COPIES[copy]} {at - started:.0f} s" for copy, at in sorted(settled_at.items()))
              + f"; {time.monotonic() - started:.0f} s")
    finally:
        await _clean_up(api, nodes, volumes, dra)


@pytest.mark.backend("kube", reason="the reference, kube-scheduler, needs a real API server")
async def test_placements_and_reasons_agree_with_kube_scheduler(
    cluster: KubeCluster, start_scheduler: StartScheduler
) -> None:
    seed = int(os.environ.get("AI_SCHEDULER_DIFF_SEED", "13"))
    only = os.environ.get("AI_SCHEDULER_DIFF_ONLY")
    count = int(os.environ.get("AI_SCHEDULER_DIFF_CASES", "200"))
    batch = int(os.environ.get("AI_SCHEDULER_DIFF_BATCH", "100"))
    indices = [int(i) for i in only.split(",")] if only else list(range(count))
    cases = [generate(seed, i) for i in indices]
    families = Counter(case.family for case in cases)
    mix = ", ".join(f"{family} {n}" for family, n in sorted(families.items()))
    print(f"\ndifferential: seed {seed}, {len(cases)} cases ({mix}), rounds of {batch}")
    started = time.monotonic()

    ours = await start_scheduler(ai_config())
    kube, kube_log = _start_kube_scheduler(cluster)
    api = await KubeClient.connect(str(cluster.plane.admin_kubeconfig), pool_size=CONCURRENCY + 8)
    tally = Tally()
    try:
        for namespace in NAMESPACES.values():
            assert (await api.create_namespace(namespace)).status in (201, 409)
        for storage_class in STORAGE_CLASSES:
            assert (await api.create_storage_class(storage_class)).status in (201, 409)
        for device_class in DEVICE_CLASSES:
            assert (await api.create_device_class(device_class)).status in (201, 409)
        for first in range(0, len(cases), batch):
            await _round(api, cluster, kube, ours, cases[first:first + batch], seed, tally)
    finally:
        kube.terminate()
        try:
            kube.wait(15)
        except subprocess.TimeoutExpired:
            kube.kill()
            kube.wait(5)
        kube_log.close()
        await api.close()

    print(f"differential: seed {seed}, {tally.cases} cases, {tally.pods} pods per scheduler (bound: "
          f"kube-scheduler {tally.bound['kube']}, ai-scheduler {tally.bound['ai']}), {tally.comparisons} "
          f"comparisons, {len(tally.failures)} mismatching cases; {time.monotonic() - started:.0f} s")
    summary = f"{len(tally.failures)} of {len(cases)} cases differ (seed {seed}):\n"
    assert not tally.failures, summary + "\n".join(tally.failures)
