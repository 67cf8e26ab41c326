# The part of pynvml (nvidia-ml-py, which ships no type information) that ai_scheduler names directly.
# The agent reads NVML through a duck-typed module (agent.nvml_reader.NvmlModule), so only the error
# classes and constants used by name are declared here; every other name reads as Any.
from typing import Any, Self

class NVMLError(Exception):
    value: int
    def __new__(cls, value: int) -> Self: ...

class NVMLError_Uninitialized(NVMLError): ...
class NVMLError_InvalidArgument(NVMLError): ...
class NVMLError_NotSupported(NVMLError): ...
class NVMLError_DriverNotLoaded(NVMLError): ...
class NVMLError_LibraryNotFound(NVMLError): ...
class NVMLError_GpuIsLost(NVMLError): ...

NVML_FEATURE_DISABLED: int
NVML_FEATURE_ENABLED: int

NVML_ERROR_UNINITIALIZED: int
NVML_ERROR_INVALID_ARGUMENT: int
NVML_ERROR_NOT_SUPPORTED: int
NVML_ERROR_DRIVER_NOT_LOADED: int
NVML_ERROR_LIBRARY_NOT_FOUND: int
NVML_ERROR_GPU_IS_LOST: int
NVML_ERROR_UNKNOWN: int

NVML_TOPOLOGY_INTERNAL: int
NVML_TOPOLOGY_SINGLE: int
NVML_TOPOLOGY_MULTIPLE: int
NVML_TOPOLOGY_HOSTBRIDGE: int
NVML_TOPOLOGY_NODE: int
NVML_TOPOLOGY_SYSTEM: int

NVML_P2P_CAPS_INDEX_NVLINK: int
NVML_P2P_STATUS_OK: int
NVML_P2P_STATUS_NOT_SUPPORTED: int

def __getattr__(name: str) -> Any: ...
