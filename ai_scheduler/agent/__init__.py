"""The node agent (`ai-scheduler agent`): reports the node's GPUs, read with NVML, in node annotations.

`NodeAgent` is the loop, `read_gpus` the NVML reading, and `FakeNvml` a
pynvml stand-in for tests and the simulated cluster.
"""

from ai_scheduler.agent.agent import NodeAgent, report_change, run_agent
from ai_scheduler.agent.fake_nvml import FakeGpu, FakeHandle, FakeNvml
from ai_scheduler.agent.nvml_reader import (
    GPUS_ANNOTATION,
    UPDATED_ANNOTATION,
    encode_report,
    nvlink_peers,
    pcie_names,
    pcie_relations,
    read_gpus,
)

__all__ = [
    "GPUS_ANNOTATION",
    "UPDATED_ANNOTATION",
    "FakeGpu",
    "FakeHandle",
    "FakeNvml",
    "NodeAgent",
    "encode_report",
    "nvlink_peers",
    "pcie_names",
    "pcie_relations",
    "read_gpus",
    "report_change",
    "run_agent",
]
