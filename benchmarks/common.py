"""Shared pieces of the benchmarks: kwok-style objects, summaries, peak memory."""

from __future__ import annotations

import os
import resource
import statistics
from typing import Any

import numpy as np

BENCH_LABEL = "ai-scheduler.io/benchmark"


def kwok_node(
    name: str, *, cpu: str = "32", memory: str = "256Gi", pods: int = 110, gpus: int = 8
) -> dict[str, Any]:
    """A Node object with capacity and Ready status and no kubelet behind it (kwok-style)."""
    allocatable = {"cpu": cpu, "memory": memory, "pods": str(pods), "ephemeral-storage": "500Gi"}
    if gpus:
        allocatable["nvidia.com/gpu"] = str(gpus)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, BENCH_LABEL: "true", "type": "kwok"},
            "annotations": {"kwok.x-k8s.io/node": "fake"},
        },
        "spec": {},
        "status": {
            "capacity": allocatable,
            "allocatable": allocatable,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
        },
    }


def bench_pod(
    name: str, scheduler_name: str, *, namespace: str = "default", cpu: str = "100m", memory: str = "128Mi"
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {BENCH_LABEL: "true"}},
        "spec": {
            "schedulerName": scheduler_name,
            "containers": [
                {
                    "name": "main",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"requests": {"cpu": cpu, "memory": memory}},
                }
            ],
        },
    }


def percentiles(values_ms: list[float]) -> dict[str, float]:
    if not values_ms:
        return {"p50": float("nan"), "p99": float("nan")}
    arr = np.asarray(values_ms)
    return {
        "p50": float(np.percentile(arr, 50)),
        "p99": float(np.percentile(arr, 99)),
        "mean": float(statistics.fmean(values_ms)),
    }


def peak_rss_mib(pid: int | None = None) -> float:
    """Peak resident memory (VmHWM) of a process, or of this one."""
    if pid is None:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def cpu_count() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


# The default profile's scores before FGDScoreCoupled became its GPU packing (issue 21): GPUBinpack, with
# NodeResourcesGPUAware scoring every pod, and ties broken at random. The packing benchmarks place it
# beside today's default.
BINPACK_DEFAULT_SCORES: list[dict[str, Any]] = [
    {"name": "NodeResourcesGPUAware", "weight": 1},
    {"name": "NodeAffinity", "weight": 2},
    {"name": "TaintToleration", "weight": 3},
    {"name": "GPUBinpack", "weight": 3},
    {"name": "GPUAvoidance", "weight": 2},
    {"name": "PodTopologySpread", "weight": 2},
    {"name": "InterPodAffinity", "weight": 2},
    {"name": "DynamicResources", "weight": 2},
]
BINPACK_DEFAULT_TIE_BREAK = "random"
