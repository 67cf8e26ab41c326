"""kube-scheduler's own performance workloads, run on a real control plane against kube-scheduler and us.

kube-scheduler's performance suite (`test/integration/scheduler_perf/` in the kubernetes repository,
`affinity/performance-config.yaml` and the pod and node templates it names) defines the workloads
below. This runner rebuilds them with the same node and pod shapes and, at `--scale 1`, the counts of
their `5000Nodes_*` variants labelled `performance` (upstream's CI benchmark set), and runs them on
the real backend of `benchmarks/throughput.py --backend kube` (etcd, kube-apiserver,
kube-controller-manager and kwok on loopback, N kwok nodes; `throughput.real_cluster`), once with
kube-scheduler (v1.36 binary, client QPS 5000 / burst 10000, as `throughput.py` starts it) and once
with ai-scheduler (`python -m ai_scheduler run` from the working tree, shipped default config, its own
ServiceAccount after `kubectl apply -f deploy/`), one after the other in one invocation:

    python benchmarks/scheduler_perf.py                      # the default set at 5,000 nodes
    python benchmarks/scheduler_perf.py --nodes 500 --scale 0.1 --workload SchedulingPodAffinity

Each run of one workload with one scheduler: the scheduler process is started (ai-scheduler's
`/readyz` awaited, so that a daemon that cannot sync fails the run early); the workload's init
pods are created (pods of the templates upstream creates before measuring; the scheduler under test
places them, as upstream's in-process scheduler does); once all are bound, the measured pods are
created (64 requests in flight, the scheduler running, as upstream's `createPods` with
`collectMetrics`) and timed from the first create request to the last binding seen by our own watch.
pods/s is measured pods / that time: the average throughput over the measured pods, which is what
upstream's `SchedulingThroughput` Average reports (upstream averages one-second samples of it). The
rate at which our client got the measured pods created is printed beside it: where pods/s is close
to it, creation (the API server on a busy machine), not the scheduler, set the pace. Then the
scheduler is stopped, every placement is checked (below), and all the run's pods are deleted before
the next run. For each workload the runs alternate (kube, ai, kube, ai, ... with `--repeat`) and the
medians are printed.

`--create-first` (not upstream's method): the measured pods are created while no scheduler runs, then
the scheduler is started again and timed from its start (pods/s, which then includes its start-up and
initial lists) and from its first binding; for a machine so busy that creating pods is slower than
scheduling them, where the default method measures the API server rather than the scheduler.

Constraint check after each run, over every pod of the run (init and measured) as the API server has
them: every pod bound to an existing node; per node, the pods' cpu, memory and pod count within
allocatable; required node affinity satisfied; no pod's required anti-affinity term matched by another
pod in its topology domain (this covers the existing pods' anti-affinity towards new pods too: the
check is symmetric over the final placement); every required affinity term matched by another pod in
the pod's domain, except for at most one pod per term that matches the term itself (kube-scheduler
lets the first pod of a group go anywhere the topology key exists; pods are only added during a run,
so only that first pod can end up alone). A violation fails the run (and the exit status). Preferred
terms are not constraints: how often they were honoured is printed as a figure of quality.

Workload shapes (from upstream's templates):
- nodes: `node-default.yaml`: capacity 4 cpu, 32Gi memory, 110 pods, Ready; the workloads whose
  `createNodes` has `labelNodePrepareStrategy` get `topology.kubernetes.io/zone=zone1` on every
  node (the label is added or removed between workloads, with no scheduler running).
- pods: 100m cpu / 500Mi requests and limits, `containerPort: 80`; labels `color: green|blue|red|
  yellow` and the (anti-)affinity terms of `pod-with-pod-anti-affinity.yaml` (required, hostname),
  `pod-with-pod-affinity.yaml` (required, zone), `pod-with-preferred-pod-affinity.yaml` and
  `pod-with-preferred-pod-anti-affinity.yaml` (weight 1, hostname), `pod-with-node-affinity.yaml`
  (zone In [zone1, zone2]), `pod-default.yaml`; terms name the namespaces `sched-1` and `sched-0`,
  which upstream's `createNamespaces` (prefix `sched`) creates and this runner creates too (older
  versions of the suite called them `sched-test` and `sched-setup`). Pods whose `createPods` names
  no namespace go to `namespace-<op index>`, as upstream does.

Differences from upstream: the nodes are kwok nodes (the `kwok.x-k8s.io/node` annotation, the
benchmark's labels, 500Gi ephemeral storage, allocatable written out equal to capacity) named
`perf-node-<i>`, each with its own `kubernetes.io/hostname` label as upstream's node preparer adds;
pods carry the benchmark's run label; the API server, etcd, kwok, our client and the scheduler share
the machine's cores, where upstream runs the scheduler in-process against an in-process API server,
so its thresholds (kept in the JSON for reference) are not comparable with these figures. The
namespace-selector variants are not included.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import BENCH_LABEL, kwok_node, peak_rss_mib, percentiles
from throughput import (
    AI_SCHEDULER,
    KUBE_TUNED,
    RUN_LABEL,
    BindWatcher,
    RealCluster,
    _ai_scheduler_command,
    _cpu_seconds,
    _create_all,
    _decision_cycles_ms,
    _delete_pods,
    _kube_scheduler_command,
    _namespace_ready,
    _until,
    _wait_ready,
    real_cluster,
)

from ai_scheduler.api.kube import KubeClient
from ai_scheduler.quantity import parse_quantity

HOSTNAME = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
TERM_NAMESPACES = ["sched-1", "sched-0"]
PAUSE_IMAGE = "registry.k8s.io/pause:3.10.1"

# ------------------------------------------------------------------------------------------- shapes


def _term(color: str, topology_key: str) -> dict[str, Any]:
    return {
        "labelSelector": {"matchLabels": {"color": color}},
        "topologyKey": topology_key,
        "namespaces": list(TERM_NAMESPACES),
    }


# Upstream's pod templates: the labels and affinity each adds to the common pause container.
TEMPLATES: dict[str, tuple[dict[str, str], dict[str, Any] | None]] = {
    "pod-default": ({}, None),
    "pod-with-pod-anti-affinity": (
        {"color": "green"},
        {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [_term("green", HOSTNAME)]}},
    ),
    "pod-with-pod-anti-affinity-label": ({"color": "green"}, None),
    "pod-with-pod-affinity": (
        {"color": "blue"},
        {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [_term("blue", ZONE)]}},
    ),
    "pod-with-preferred-pod-affinity": (
        {"color": "red"},
        {"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"podAffinityTerm": _term("red", HOSTNAME), "weight": 1}
        ]}},
    ),
    "pod-with-preferred-pod-anti-affinity": (
        {"color": "yellow"},
        {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"podAffinityTerm": _term("yellow", HOSTNAME), "weight": 1}
        ]}},
    ),
    "pod-with-node-affinity": (
        {},
        {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["zone1", "zone2"]}]}
        ]}}},
    ),
}


def perf_pod(template: str, name: str, namespace: str, scheduler_name: str, run: str) -> dict[str, Any]:
    labels, affinity = TEMPLATES[template]
    resources = {"cpu": "100m", "memory": "500Mi"}
    spec: dict[str, Any] = {
        "schedulerName": scheduler_name,
        "containers": [{
            "name": "pause",
            "image": PAUSE_IMAGE,
            "ports": [{"containerPort": 80}],
            "resources": {"limits": dict(resources), "requests": dict(resources)},
        }],
    }
    if affinity is not None:
        spec["affinity"] = json.loads(json.dumps(affinity))  # a copy of its own
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {**labels, BENCH_LABEL: "true", RUN_LABEL: run},
        },
        "spec": spec,
    }


def perf_node(index: int) -> dict[str, Any]:
    """node-default.yaml (4 cpu, 32Gi, 110 pods, Ready) as a kwok node with a unique hostname."""
    return kwok_node(f"perf-node-{index}", cpu="4", memory="32Gi", pods=110, gpus=0)


@dataclass(frozen=True)
class Phase:
    """One `createPods` op: a template, its count at scale 1, its namespace."""

    template: str
    count: int
    namespace: str


@dataclass(frozen=True)
class Workload:
    name: str
    upstream_variant: str  # the workload of affinity/performance-config.yaml whose counts these are
    upstream_threshold: int  # its pods/s threshold there (in-process API server; for reference only)
    zone1: bool  # labelNodePrepareStrategy: topology.kubernetes.io/zone=zone1 on every node
    init: tuple[Phase, ...]
    measured: Phase

    def namespaces(self) -> list[str]:
        return sorted({p.namespace for p in (*self.init, self.measured)})

    def phases(self) -> tuple[Phase, ...]:
        return (*self.init, self.measured)


WORKLOADS: dict[str, Workload] = {w.name: w for w in (
    Workload("SchedulingPodAntiAffinity", "5000Nodes_2000Pods", 60, False,
             (Phase("pod-with-pod-anti-affinity", 1000, "sched-0"),),
             Phase("pod-with-pod-anti-affinity", 2000, "sched-1")),
    Workload("SchedulingPodMatchingAntiAffinity", "5000Nodes_5000Pods", 595, False,
             (Phase("pod-with-pod-anti-affinity", 1000, "sched-0"),),
             Phase("pod-with-pod-anti-affinity-label", 5000, "sched-1")),
    Workload("SchedulingPodAffinity", "5000Nodes_5000Pods", 35, True,
             (Phase("pod-with-pod-affinity", 5000, "sched-0"),),
             Phase("pod-with-pod-affinity", 5000, "sched-1")),
    Workload("SchedulingPreferredPodAffinity", "5000Nodes_5000Pods", 90, False,
             (Phase("pod-with-preferred-pod-affinity", 5000, "sched-0"),),
             Phase("pod-with-preferred-pod-affinity", 5000, "sched-1")),
    Workload("SchedulingPreferredPodAntiAffinity", "5000Nodes_5000Pods", 90, False,
             (Phase("pod-with-preferred-pod-anti-affinity", 5000, "sched-0"),),
             Phase("pod-with-preferred-pod-anti-affinity", 5000, "sched-1")),
    Workload("SchedulingNodeAffinity", "5000Nodes_10000Pods", 220, True,
             (Phase("pod-with-node-affinity", 5000, "namespace-1"),),
             Phase("pod-with-node-affinity", 10000, "namespace-2")),
    Workload("MixedSchedulingBasePod", "5000Nodes_5000Pods", 140, True,
             (Phase("pod-default", 2000, "sched-0"),
              Phase("pod-with-pod-affinity", 2000, "sched-0"),
              Phase("pod-with-pod-anti-affinity", 2000, "sched-0"),
              Phase("pod-with-preferred-pod-affinity", 2000, "sched-0"),
              Phase("pod-with-preferred-pod-anti-affinity", 2000, "sched-0")),
             Phase("pod-default", 5000, "namespace-7")),
)}
DEFAULT_WORKLOADS = [
    "SchedulingPodAntiAffinity", "SchedulingPodAffinity", "SchedulingPreferredPodAffinity",
    "SchedulingPreferredPodAntiAffinity", "SchedulingNodeAffinity", "MixedSchedulingBasePod",
]


def scaled(count: int, scale: float) -> int:
    return max(1, round(count * scale))


# -------------------------------------------------------------------------------------------- check


def _selector_matches(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    """A metav1.LabelSelector; a missing selector matches nothing (as in pod affinity terms)."""
    if selector is None:
        return False
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        present = key in labels
        if op == "In" and not (present and labels[key] in values):
            return False
        if op == "NotIn" and present and labels[key] in values:
            return False
        if op == "Exists" and not present:
            return False
        if op == "DoesNotExist" and present:
            return False
    return True


def _node_term_matches(term: dict[str, Any], node: dict[str, Any]) -> bool:
    labels = node["metadata"].get("labels") or {}
    for expr in term.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        present = key in labels
        ok = {
            "In": present and labels.get(key) in values,
            "NotIn": not present or labels.get(key) not in values,
            "Exists": present,
            "DoesNotExist": not present,
            "Gt": present and labels[key].isdigit() and int(labels[key]) > int(values[0]),
            "Lt": present and labels[key].isdigit() and int(labels[key]) < int(values[0]),
        }.get(op, False)
        if not ok:
            return False
    for expr in term.get("matchFields") or []:
        name = node["metadata"]["name"]
        if (expr["operator"] == "In") != (name in (expr.get("values") or [])):
            return False
    return bool(term.get("matchExpressions") or term.get("matchFields"))


def _terms(pod: dict[str, Any], kind: str, required: bool) -> list[dict[str, Any]]:
    block = ((pod["spec"].get("affinity") or {}).get(kind) or {})
    if required:
        return list(block.get("requiredDuringSchedulingIgnoredDuringExecution") or [])
    return [t["podAffinityTerm"] for t in block.get("preferredDuringSchedulingIgnoredDuringExecution") or []]


@dataclass
class CheckResult:
    violations: list[str]
    quality: dict[str, str]

    @property
    def ok(self) -> bool:
        return not self.violations


def check_constraints(pods: list[dict[str, Any]], nodes: list[dict[str, Any]]) -> CheckResult:
    """Every placement against every hard constraint of the pods; preferred terms counted, not enforced.

    Inter-pod terms are counted per distinct (selector, namespaces, topology key): the pods matching
    it, tallied by topology value, so the check is linear in pods times distinct terms."""
    violations: list[str] = []
    by_name = {n["metadata"]["name"]: n for n in nodes}
    used: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])

    def topology(pod: dict[str, Any], key: str) -> str | None:
        labels: dict[str, str] = by_name[pod["spec"]["nodeName"]]["metadata"].get("labels") or {}
        return labels.get(key)

    placed = []
    for pod in pods:
        meta, spec = pod["metadata"], pod["spec"]
        where = f"{meta['namespace']}/{meta['name']}"
        node_name = spec.get("nodeName")
        if not node_name:
            violations.append(f"{where}: not bound")
            continue
        node = by_name.get(node_name)
        if node is None:
            violations.append(f"{where}: bound to unknown node {node_name}")
            continue
        placed.append(pod)
        totals = used[node_name]
        for container in spec.get("containers") or []:
            requests = (container.get("resources") or {}).get("requests") or {}
            totals[0] += float(parse_quantity(requests.get("cpu", 0)))
            totals[1] += float(parse_quantity(requests.get("memory", 0)))
        totals[2] += 1
        required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution")
        if required and not any(_node_term_matches(t, node) for t in required.get("nodeSelectorTerms") or []):
            violations.append(f"{where}: on {node_name}, outside its required node affinity")
    for node_name, (cpu, memory, count) in used.items():
        allocatable = by_name[node_name]["status"].get("allocatable") or {}
        for resource, total in (("cpu", cpu), ("memory", memory), ("pods", count)):
            if total > float(parse_quantity(allocatable.get(resource, 0))) + 1e-9:
                violations.append(f"node {node_name}: {resource} requests {total:g} over allocatable")

    # Distinct terms -> (matching pods' names, matching pods per topology value).
    tallies: dict[str, tuple[set[str], Counter[str]]] = {}

    def tally(pod: dict[str, Any], term: dict[str, Any]) -> tuple[set[str], Counter[str], str]:
        namespaces = term.get("namespaces") or [pod["metadata"]["namespace"]]
        key = json.dumps([term.get("labelSelector"), sorted(namespaces), term["topologyKey"]], sort_keys=True)
        if key not in tallies:
            names: set[str] = set()
            counts: Counter[str] = Counter()
            for other in placed:
                meta = other["metadata"]
                if meta["namespace"] in namespaces and _selector_matches(
                    term.get("labelSelector"), meta.get("labels") or {}
                ):
                    names.add(f"{meta['namespace']}/{meta['name']}")
                    value = topology(other, term["topologyKey"])
                    if value is not None:
                        counts[value] += 1
            tallies[key] = (names, counts)
        names, counts = tallies[key]
        return names, counts, key

    soft: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    alone: dict[str, list[tuple[str, bool, str]]] = defaultdict(list)  # term -> (pod, matches it, domain)
    for pod in placed:
        meta = pod["metadata"]
        where = f"{meta['namespace']}/{meta['name']}"
        for term in _terms(pod, "podAntiAffinity", required=True):
            names, counts, _ = tally(pod, term)
            value = topology(pod, term["topologyKey"])
            if value is not None and counts[value] - (where in names) > 0:
                violations.append(f"{where}: shares {term['topologyKey']}={value} with a pod its required "
                                  "anti-affinity excludes")
        for term in _terms(pod, "podAffinity", required=True):
            names, counts, key = tally(pod, term)
            value = topology(pod, term["topologyKey"])
            if value is None:
                violations.append(f"{where}: its node has no {term['topologyKey']} label (required affinity)")
            elif counts[value] - (where in names) <= 0:
                alone[key].append((where, where in names, f"{term['topologyKey']}={value}"))
        for kind, label in (("podAffinity", "preferred affinity honoured"),
                            ("podAntiAffinity", "preferred anti-affinity honoured")):
            for term in _terms(pod, kind, required=False):
                names, counts, _ = tally(pod, term)
                value = topology(pod, term["topologyKey"])
                together = value is not None and counts[value] - (where in names) > 0
                soft[label][0] += together if kind == "podAffinity" else not together
                soft[label][1] += 1
    # A pod alone with its required affinity term is right only as the first pod of its group: no pod
    # matched the term when it was placed, and it matches the term itself. Pods are only added during a
    # run, so in the final placement at most one pod per term can be such a first pod.
    for lonely in alone.values():
        if len(lonely) == 1 and lonely[0][1]:
            continue
        violations += [f"{where}: no other pod matching its required affinity in {domain}"
                       f"{' (one of these may be the first of its group)' if len(lonely) > 1 else ''}"
                       for where, _, domain in lonely]
    quality = {label: f"{done}/{total} pods" for label, (done, total) in soft.items()}
    return CheckResult(violations, quality)


# ---------------------------------------------------------------------------------------------- run


@dataclass(frozen=True)
class Candidate:
    run: str  # KUBE_TUNED or AI_SCHEDULER
    short: str  # in pod names
    scheduler_name: str
    command: Callable[[], list[str]]


async def _set_zone(client: KubeClient, nodes: list[dict[str, Any]], zone: str | None) -> None:
    """Add (or, with None, remove) topology.kubernetes.io/zone on every node."""
    patch = {"metadata": {"labels": {ZONE: zone}}}
    await _create_all(client, nodes, lambda node: client.patch_node(node["metadata"]["name"], patch))


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


async def run_workload(
    real: RealCluster, workload: Workload, candidate: Candidate, args: argparse.Namespace, repeat: int
) -> dict[str, Any]:
    """One workload with one scheduler: start it, init pods bound, measured pods timed, check, clean up."""
    client = real.client
    run = f"perf-{candidate.short}"
    selector = f"{RUN_LABEL}={run}"
    prefix = f"{candidate.short}-r{repeat}"
    init_pods = [
        perf_pod(phase.template, f"{prefix}-i{p}-{i}", phase.namespace, candidate.scheduler_name, run)
        for p, phase in enumerate(workload.init)
        for i in range(scaled(phase.count, args.scale))
    ]
    phase = workload.measured
    measured = [
        perf_pod(phase.template, f"{prefix}-m-{i}", phase.namespace, candidate.scheduler_name, run)
        for i in range(scaled(phase.count, args.scale))
    ]
    result: dict[str, Any] = {
        "workload": workload.name, "scheduler": candidate.run, "repeat": repeat,
        "init_pods": len(init_pods), "measured_pods": len(measured),
    }
    logs: list[Path] = []

    def start(phase: str) -> subprocess.Popen[bytes]:
        logs.append(real.workdir / f"{workload.name}-{candidate.run}-r{repeat}-{phase}.log")
        log = logs[-1].open("wb")  # the child process owns it
        proc = subprocess.Popen(
            candidate.command(), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
        log.close()
        return proc

    proc = start("init")
    try:
        started = time.monotonic()
        if candidate.run == AI_SCHEDULER:  # its /readyz: a daemon that cannot sync fails here, not at timeout
            config = yaml.safe_load((real.workdir / "ai-scheduler.yaml").read_text())
            await _wait_ready(int(config["server"]["port"]), proc, timeout=min(args.timeout, 300))
        init_watch = BindWatcher(client, {p["metadata"]["name"] for p in init_pods}, selector)
        init_task = asyncio.create_task(init_watch.run())
        try:
            await _create_all(client, init_pods, client.create_pod)
            await _until(init_watch.done.is_set, f"{len(init_pods)} init pods bound", args.timeout, proc)
        finally:
            init_task.cancel()
        result["init_s"] = round(time.monotonic() - started, 2)
        if args.create_first:  # measured pods created with no scheduler running, then a fresh one started
            _stop(proc)
            t0 = time.monotonic()
            await _create_all(client, measured, client.create_pod)
            created = time.monotonic()
        cpu_before = 0.0 if args.create_first else _cpu_seconds(proc.pid)
        watcher = BindWatcher(client, {p["metadata"]["name"] for p in measured}, selector)
        watch_task = asyncio.create_task(watcher.run())
        try:
            if args.create_first:
                t0 = time.monotonic()
                proc = start("measured")
            else:
                t0 = time.monotonic()
                await _create_all(client, measured, client.create_pod)
                created = time.monotonic()
            await _until(watcher.done.is_set, f"{len(measured)} measured pods bound", args.timeout, proc)
        finally:
            watch_task.cancel()
        last = max(watcher.bound_at.values())
        result |= {
            "create_s": round(created - t0, 2) if not args.create_first else None,
            "measured_s": round(last - t0, 3),
            "pods_per_s": round(len(measured) / max(last - t0, 1e-9), 1),
            "created_per_s": None if args.create_first else round(len(measured) / max(created - t0, 1e-9), 1),
            "cpu_s_per_1000_pods": round((_cpu_seconds(proc.pid) - cpu_before) * 1000 / len(measured), 3),
            "peak_rss_mib": round(peak_rss_mib(proc.pid), 1),
        }
        if args.create_first:
            first = min(watcher.bound_at.values())
            result |= {
                "start_to_first_bind_s": round(first - t0, 3),
                "pods_per_s_from_first_bind": round((len(measured) - 1) / max(last - first, 1e-9), 1),
            }
    except RuntimeError as exc:
        result["error"] = str(exc)
    finally:
        _stop(proc)
    cycles = [c for log in logs for c in _decision_cycles_ms(log)]
    if cycles:  # ai-scheduler's own figure per decision (its log's cycle_ms), init and measured pods
        result["decision_ms"] = {k: round(v, 3) for k, v in percentiles(cycles).items()}
    pods, _ = await client.list("pods", label_selector=selector)
    nodes, _ = await client.list("nodes", label_selector=f"{BENCH_LABEL}=true")
    check = check_constraints(pods, nodes)
    result["constraints"] = "ok" if check.ok else f"{len(check.violations)} violations"
    if check.violations:
        result["violations_first"] = check.violations[:10]
    result["quality"] = check.quality
    await _delete_pods(client, pods, selector)  # those that exist (a failed run may not have created all)
    return result


def _candidates(real: RealCluster, which: str) -> list[Candidate]:
    kube = Candidate(KUBE_TUNED, "kube", "default-scheduler", lambda: _kube_scheduler_command(
        real.binaries, real.workdir, real.plane.admin_kubeconfig, tuned=True))
    ai = Candidate(AI_SCHEDULER, "ai", "ai-scheduler", lambda: _ai_scheduler_command(
        real.workdir, real.ai_kubeconfig))
    return {"kube": [kube], "ai": [ai], "both": [kube, ai]}[which]


async def benchmark(args: argparse.Namespace) -> dict[str, Any]:
    workloads = [WORKLOADS[name] for name in args.workload or DEFAULT_WORKLOADS]
    for workload in workloads:
        anti = sum(scaled(p.count, args.scale) for p in workload.phases()
                   if p.template == "pod-with-pod-anti-affinity")
        if anti > args.nodes:
            raise SystemExit(f"{workload.name}: {anti} pods with required hostname anti-affinity need as "
                             f"many nodes; --nodes is {args.nodes}")
    nodes = [perf_node(i) for i in range(args.nodes)]
    async with real_cluster(nodes, args.keep_workdir) as real:
        candidates = _candidates(real, args.scheduler)
        zone: str | None = None
        runs: list[dict[str, Any]] = []
        for workload in workloads:
            wanted = "zone1" if workload.zone1 else None
            if wanted != zone:
                await _set_zone(real.client, nodes, wanted)
                zone = wanted
            for namespace in workload.namespaces():
                await _namespace_ready(real.client, real.plane, namespace)
            # Interleaved (kube, ai, kube, ai, ...): a slow spell of the shared machine hits both.
            for repeat in range(args.repeat):
                for candidate in candidates:
                    if not args.json:
                        print(f"# {workload.name} / {candidate.run} ({repeat + 1}/{args.repeat})",
                              file=sys.stderr, flush=True)
                    result = await run_workload(real, workload, candidate, args, repeat)
                    runs.append(result)
                    if not args.json:
                        print(json.dumps(result), file=sys.stderr, flush=True)
        return {
            "nodes": args.nodes,
            "scale": args.scale,
            "repeats": args.repeat,
            "create_first": args.create_first,
            **real.setup,
            "summary": summarize(runs),
            "runs": runs,
        }


def summarize(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per workload and scheduler: median pods/s over the repeats, the ratio ai/kube, the check."""
    grouped: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for run in runs:
        grouped[(run["workload"], run["scheduler"])].append(run)
    rows: list[dict[str, Any]] = []
    for (workload, scheduler), results in grouped.items():
        rates = [r["pods_per_s"] for r in results if "pods_per_s" in r]
        created = [r["created_per_s"] for r in results if r.get("created_per_s") is not None]
        from_first = [r["pods_per_s_from_first_bind"] for r in results if "pods_per_s_from_first_bind" in r]
        errors = [r["error"] for r in results if "error" in r]
        failed = [r["constraints"] for r in results if r["constraints"] != "ok"]
        rows.append({
            "workload": workload,
            "scheduler": scheduler,
            "pods": f"{results[0]['init_pods']}+{results[0]['measured_pods']}",
            "upstream_threshold_pods_per_s": WORKLOADS[workload].upstream_threshold,
            "pods_per_s": round(statistics.median(rates), 1) if rates else None,
            "created_per_s": round(statistics.median(created), 1) if created else None,
            "pods_per_s_from_first_bind": round(statistics.median(from_first), 1) if from_first else None,
            "runs_pods_per_s": rates,
            "constraints": "ok" if not failed and not errors else "; ".join(failed + errors),
        })
    for row in rows:
        if row["scheduler"] != AI_SCHEDULER or row["pods_per_s"] is None:
            continue
        kube = next(
            (r for r in rows if r["workload"] == row["workload"] and r["scheduler"] == KUBE_TUNED), None
        )
        if kube is not None and kube["pods_per_s"]:
            row["ratio_ai_over_kube"] = round(row["pods_per_s"] / kube["pods_per_s"], 2)
    return rows


def table(report: dict[str, Any]) -> str:
    versions = report["versions"]
    lines = [
        f"{report['nodes']} nodes, scale {report['scale']}, medians of {report['repeats']}; python "
        f"{versions['python']}, numpy {versions['numpy']}, kubernetes {versions['kubernetes']} "
        f"({versions['kube_scheduler_binary']})",
        f"{'workload':<36}{'scheduler':<22}{'init+measured':>14}{'pods/s':>9}{'ai/kube':>9}"
        f"{'1st bind/s' if report['create_first'] else 'created/s':>12}  constraints",
    ]
    beside = "pods_per_s_from_first_bind" if report["create_first"] else "created_per_s"
    for row in report["summary"]:
        rate = "-" if row["pods_per_s"] is None else f"{row['pods_per_s']:.1f}"
        created = "-" if row[beside] is None else f"{row[beside]:.1f}"
        ratio = f"{row['ratio_ai_over_kube']:.2f}" if "ratio_ai_over_kube" in row else ""
        lines.append(f"{row['workload']:<36}{row['scheduler']:<22}{row['pods']:>14}{rate:>9}{ratio:>9}"
                     f"{created:>12}  {row['constraints']}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workload", action="append", choices=sorted(WORKLOADS),
                        help=f"repeatable; default: {', '.join(DEFAULT_WORKLOADS)}")
    parser.add_argument("--nodes", type=int, default=5000, help="kwok nodes (default 5000, as upstream)")
    parser.add_argument("--scale", type=float, default=1.0,
                        help="fraction of upstream's pod counts at 5,000 nodes (e.g. 0.1 for a quick run)")
    parser.add_argument("--repeat", type=int, default=1, help="runs per workload and scheduler; medians")
    parser.add_argument("--scheduler", choices=["kube", "ai", "both"], default="both")
    parser.add_argument(
        "--create-first", action="store_true",
        help="not as upstream: create the measured pods while no scheduler runs, then start the scheduler "
        "and time from its start (and from its first binding); for a machine where creating pods is "
        "slower than scheduling them",
    )
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per phase (init, measured)")
    parser.add_argument("--keep-workdir", action="store_true", help="keep the logs and etcd data")
    parser.add_argument("--json", action="store_true", help="print only the JSON result")
    args = parser.parse_args()
    if args.scale <= 0 or args.nodes <= 0 or args.repeat <= 0:
        parser.error("--scale, --nodes and --repeat must be positive")
    import uvloop

    report = uvloop.run(benchmark(args))
    if args.json:
        print(json.dumps(report))
    else:
        print(json.dumps(report, indent=2))
        print()
        print(table(report))
    failed = [row for row in report["summary"] if row["constraints"] != "ok"]
    return 1 if failed else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
