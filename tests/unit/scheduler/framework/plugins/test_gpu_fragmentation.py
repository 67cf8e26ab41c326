"""FGD as its artifact computes it: typical pods, the truncated sigmoid score and the device it picks,
checked against a per-node transcription of FGD's rule (pkg/utils/frag.go, fgd_score.go); and Alibaba's
node list read by the cluster reader."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from ai_scheduler.cache.fragmentation import PodShape, Shapes, placement, typical_shapes
from ai_scheduler.scheduler.framework.plugins.gpu_fragmentation import sigmoid_scores
from ai_scheduler.trace import read_cluster

SHAPES = Shapes(cpu=np.array([3152, 11300, 12500, 8000, 4000]), memory=np.zeros(5, dtype=np.int64),
                gpu=np.array([810, 1000, 0, 2000, 320]), prob=np.array([0.3, 0.3, 0.1, 0.2, 0.1]))


def node_fragment(free: list[int], cpu: int) -> float:
    """FGD's expected fragment of one node, written per shape as its Go code does."""
    out = 0.0
    for shape_cpu, shape_gpu, p in zip(SHAPES.cpu, SHAPES.gpu, SHAPES.prob, strict=True):
        milli, num = (int(shape_gpu), 1) if shape_gpu < 1000 else (1000, int(shape_gpu) // 1000)
        fits = shape_gpu > 0 and sum(x >= milli for x in free) >= num and cpu >= shape_cpu
        out += p * (sum(x for x in free if x < milli) if fits else sum(free))
    return out


def node_score(free: list[int], cpu: int, pod_cpu: int, pod_gpu: int) -> tuple[int, int | None]:
    before = node_fragment(free, cpu)

    def score(after: list[int]) -> int:
        return int(100 / (1 + math.exp(-(before - node_fragment(after, cpu - pod_cpu)) / 1000)))

    if 0 < pod_gpu < 1000:
        best, device = 0, None
        for i, x in enumerate(free):
            if x >= pod_gpu:
                s = score([v - pod_gpu if j == i else v for j, v in enumerate(free)])
                if device is None or s > best:
                    best, device = s, i
        return best, device
    after, need = list(free), pod_gpu // 1000
    for i in sorted(range(len(free)), key=lambda i: free[i]):
        if need and after[i] >= 1000:
            after[i] -= 1000
            need -= 1
    return score(after), None


@pytest.mark.parametrize("pod", [(6000, 470), (12000, 1000), (8000, 0), (16000, 2000), (3000, 810)])
def test_scores_and_devices_match_fgds_rule(pod: tuple[int, int]) -> None:
    rng = np.random.default_rng(1)
    rows, width = 120, 8
    free = np.full((rows, width), -1)
    for r, n in enumerate(rng.choice([1, 2, 4, 8], size=rows).tolist()):
        free[r, :n] = rng.choice([1000, 1000, 530, 190, 0, 350, 810], size=n)
    cpu = rng.integers(0, 40000, size=rows)
    pod_cpu, pod_gpu = pod
    result = placement(free, cpu, np.full(rows, 10**12), SHAPES, PodShape(pod_cpu, 0, pod_gpu))
    scores = sigmoid_scores(result.before, result.after)
    device = result.device
    if result.per_device is not None:
        per_device = sigmoid_scores(result.before[:, None], result.per_device)
        device = np.where(device >= 0, np.argmax(per_device, axis=1), -1)
    for r in range(rows):
        devices = [int(x) for x in free[r] if x >= 0]
        fits = cpu[r] >= pod_cpu and (
            any(x >= pod_gpu for x in devices) if 0 < pod_gpu < 1000
            else sum(x >= 1000 for x in devices) >= pod_gpu // 1000)
        if not fits:
            continue
        expected, expected_device = node_score(devices, int(cpu[r]), pod_cpu, pod_gpu)
        assert scores[r] == expected
        if expected_device is not None:
            assert device[r] == expected_device


def test_typical_shapes_cover_95_percent_most_popular_first() -> None:
    pods = [PodShape(1000, 5, 500)] * 60 + [PodShape(2000, 7, 1000)] * 30 + [PodShape(0, 0, 0)] * 6 \
        + [PodShape(3000, 0, 2000)] * 4
    shapes = typical_shapes(pods)
    assert shapes.gpu.tolist() == [500, 1000, 0]  # 96 of 100 pods: the first three reach 95
    assert shapes.memory.tolist() == [0, 0, 0]
    assert shapes.prob.tolist() == pytest.approx([60 / 96, 30 / 96, 6 / 96])


def test_alibaba_node_list(tmp_path: Path) -> None:
    path = tmp_path / "nodes.csv"
    path.write_text("sn,cpu_milli,memory_mib,gpu,model\nopenb-node-0001,96000,393216,8,G2\n"
                    "openb-node-0002,64000,262144,2,XYZ\n")
    first, second = read_cluster(path)
    assert (first.name, first.cpu, first.memory, first.gpus, first.gpu_model) == (
        "openb-node-0001", 96000, 393216 * 2**20, 8, "G2")
    assert first.managed and first.gpu_memory == 32 * 2**30
    assert second.gpu_memory == 16 * 2**30
