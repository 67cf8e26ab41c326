"""Workload inflation for placement mode, as the FGD paper (Weng et al., ATC'23) does it.

To see how a packing policy behaves once the cluster is full, FGD appends clones of the trace's pods,
drawn uniformly at random with replacement, until the pods' GPU requests add up to a target multiple of
the cluster's GPU capacity (130% in the paper), then offers every pod once, in order.

Requests are counted in thousandths of a GPU (`TraceJob.gpu_milli`): 1000 per whole GPU, a fraction's
thousandths, a memory share as its part of a device of `device_memory` bytes, 0 for a CPU-only pod. The
count starts from the whole input. Inflation stops at the first clone that makes the total reach or pass
`target` x capacity; that clone is included, so the result's request is never below the target and the
result less its last clone is. A workload already at or past the target is returned as it is (a new
list, no clone). A workload that asks no GPU cannot reach any target: that is a ValueError, not an
endless loop.

Clones keep every field of their source but their name (`<source>-inflate-<k>`, k counting from 1,
skipping names already taken), `clone_of` (the source's name) and the gang: a clone is a pod on its own,
since a copy of one member of a gang would otherwise join a gang already complete. The draws come from a
numpy Generator seeded with `seed`: the same input and seed give the same clones.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from decimal import Decimal

import numpy as np

from ai_scheduler.trace.records import MILLI, TraceJob

_DRAWS = 1024  # draws taken from the generator at a time


def inflate(jobs: Sequence[TraceJob], capacity_gpus: int, target: float = 1.3, seed: int = 0, *,
            device_memory: int | None = None) -> list[TraceJob]:
    """`jobs` followed by random clones of them until their GPU request reaches `target` x `capacity_gpus`.

    `device_memory` (bytes) is needed only to count pods that ask a GPU memory share."""
    if capacity_gpus <= 0:
        raise ValueError(f"capacity_gpus must be above 0, got {capacity_gpus}")
    if not (math.isfinite(target) and target > 0):
        raise ValueError(f"target must be a number above 0, got {target}")
    # Decimal(str()) so that 1.3 x 10 GPUs is 13000 thousandths, not the float 13000.000000000002.
    goal = math.ceil(Decimal(str(target)) * capacity_gpus * MILLI)
    requests = [job.gpu_milli(device_memory) for job in jobs]
    total = sum(requests)
    result = list(jobs)
    if total >= goal:
        return result
    if not any(requests):
        raise ValueError("no job asks for a GPU: clones cannot bring the GPU request to the target")
    taken = {job.name for job in jobs}
    generator = np.random.default_rng(seed)
    number = 0
    while total < goal:
        for index in generator.integers(len(jobs), size=_DRAWS).tolist():
            source = jobs[index]
            number += 1
            while f"{source.name}-inflate-{number}" in taken:
                number += 1
            name = f"{source.name}-inflate-{number}"
            taken.add(name)
            result.append(replace(source, name=name, gang="", gang_size=0, clone_of=source.name))
            total += requests[index]
            if total >= goal:
                break
    return result
