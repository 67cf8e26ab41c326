"""DRA GPU pod decisions, in-process: p50/p95 of one cycle (filter, score, Reserve's allocation) per pod.

`python benchmarks/dra.py --nodes 1000 --devices 8 --pods 2000`: nodes whose GPUs are published only
in ResourceSlices shaped like NVIDIA's DRA driver's (gpu.nvidia.com, productName, index, memory),
one DeviceClass, one claim per pod asking for one GPU; each placed pod's allocation is assumed, as
Reserve does, so the next decision sees the device taken.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from typing import Any

from ai_scheduler.cache.cache import SchedulerCache
from ai_scheduler.cache.records import NodeRecord, PodRecord
from ai_scheduler.scheduler.framework.plugins.dynamic_resources import DraPlan, DynamicResources
from ai_scheduler.scheduler.framework.plugins.resource_fit import NodeResourcesFit
from ai_scheduler.scheduler.framework.runtime import Framework
from ai_scheduler.sim import make_node, make_pod
from ai_scheduler.sim.objects import make_device_class, make_gpu_slice

DRIVER = "gpu.nvidia.com"


def slice_for(node: str, count: int) -> dict[str, Any]:
    """The benchmark's devices (productName, index, uuid, memory: what RESULTS.md measured) in a slice."""
    devices = [
        {
            "name": f"gpu-{i}",
            "attributes": {
                "index": {"int": i},
                "productName": {"string": "NVIDIA H100"},
                "uuid": {"string": f"GPU-{node}-{i}"},
            },
            "capacity": {"memory": {"value": "80Gi"}},
        }
        for i in range(count)
    ]
    return make_gpu_slice(node, driver=DRIVER, devices=devices)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--pods", type=int, default=2000)
    args = parser.parse_args()
    cache = SchedulerCache()
    for i in range(args.nodes):
        cache.set_node(NodeRecord.from_api(make_node(f"node-{i}")))
        cache.dra.apply("ResourceSlice", "ADDED", slice_for(f"node-{i}", args.devices))
    cache.dra.apply("DeviceClass", "ADDED", make_device_class("gpu.nvidia.com", driver=DRIVER))
    framework = Framework(
        "ai-scheduler", [NodeResourcesFit(), DynamicResources()], [], cache, rng=random.Random(1)
    )
    times = []
    placed = 0
    for i in range(args.pods):
        cache.dra.apply(
            "ResourceClaim",
            "ADDED",
            {
                "metadata": {
                    "namespace": "default",
                    "name": f"c{i}",
                    "uid": f"cu{i}",
                    "resourceVersion": "1",
                },
                "spec": {
                    "devices": {
                        "requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]
                    }
                },
            },
        )
        obj = make_pod(f"p{i}", resource_claims=[{"name": "gpu", "resourceClaimName": f"c{i}"}])
        obj["metadata"]["uid"] = f"u{i}"
        pod = PodRecord.from_api(obj)
        started = time.perf_counter()
        decision = framework.schedule(pod)
        if decision.node is not None:
            cache.assume(pod, decision.node)
            if isinstance(decision.claims, DraPlan):
                DynamicResources.assume(decision.claims, cache)
            placed += 1
        times.append(time.perf_counter() - started)
    warm = sorted(times[10:]) or sorted(times)
    print(f"nodes={args.nodes} devices/node={args.devices} pods={args.pods} placed={placed}")
    print(f"first decision {times[0] * 1000:.1f} ms (every node's verdict computed once)")
    print(f"p50 {statistics.median(warm) * 1000:.3f} ms  p95 {warm[int(len(warm) * 0.95)] * 1000:.3f} ms")


if __name__ == "__main__":
    main()
