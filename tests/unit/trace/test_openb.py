"""The openb-shaped generator (ai_scheduler/trace/openb.py), read back through the project's trace readers."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from ai_scheduler.trace import GpuKind, TraceFormat, openb, read_cluster, read_workload, total_gpus


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return openb.write(tmp_path_factory.mktemp("openb"), seed=7)


def test_the_cluster_has_openb_nodes_gpus_and_cpu(files: tuple[Path, Path]) -> None:
    nodes = read_cluster(files[0])
    assert len(nodes) == openb.NODE_COUNT == 1213
    assert total_gpus(nodes) == openb.GPU_COUNT == 6212
    assert 100_000 <= sum(n.cpu for n in nodes) // 1000 <= 110_000
    models = Counter((n.gpu_model, n.gpus) for n in nodes)
    assert models[("G2", 8)] == 549 and models[("T4", 2)] == 387
    assert models[("P100", 2)] == 131 and models[("G3", 8)] == 39
    assert all(n.managed and n.gpu_memory > 0 and n.memory >= 128 * 2**30 for n in nodes)


def test_the_workload_has_openb_proportions(files: tuple[Path, Path]) -> None:
    workload = read_workload(files[1])
    assert workload.format is TraceFormat.ALIBABA and not workload.problems
    jobs = workload.jobs
    assert len(jobs) == openb.PODS == 8152
    kinds = Counter(j.gpu_kind for j in jobs)
    assert kinds[GpuKind.NONE] / len(jobs) == pytest.approx(0.13, abs=0.005)
    assert kinds[GpuKind.FRACTION] / len(jobs) == pytest.approx(0.38, abs=0.005)
    whole = Counter(j.gpus for j in jobs if j.gpu_kind is GpuKind.WHOLE)
    assert whole[1] / len(jobs) == pytest.approx(0.48, abs=0.005)
    assert {k: whole[k] for k in (2, 4, 8)} == openb.MULTI_GPU_PODS
    assert all(j.cpu >= 64_000 for j in jobs if j.gpus == 8)
    shares = Counter(j.gpu_milli() for j in jobs if j.gpu_kind is GpuKind.FRACTION)
    assert shares.most_common(2)[0][0] == 500 and all(0 < s < 1000 for s in shares)
    assert sorted(j.submit_time for j in jobs) == [j.submit_time for j in jobs]


def test_the_same_seed_writes_the_same_workload(tmp_path: Path) -> None:
    assert openb.workload_rows(3, 200) == openb.workload_rows(3, 200)
    assert openb.workload_rows(3, 200) != openb.workload_rows(4, 200)
    assert sum(openb.pod_counts(200).values()) == 200
