"""The cluster a trace runs on: node shapes from a CSV or YAML file, and the Node objects they make.

A CSV file has one node shape per row; a YAML file is a list of mappings with the same keys, either at
the top level or under `nodes:`. Keys (CSV columns in any case and order):

| key            | meaning                                                              | default        |
|----------------|----------------------------------------------------------------------|----------------|
| name           | the node's name; with a count above 1, the prefix of numbered names  | required       |
| count          | how many nodes of this shape: `name-0` .. `name-<count-1>`           | 1 (the name)   |
| cpu            | allocatable cpu, a Kubernetes quantity (`64`, `95500m`)              | required       |
| memory         | allocatable memory, a quantity (`512Gi`)                             | required       |
| gpus           | GPU devices                                                          | 0              |
| gpu_model      | their model, as the label `nvidia.com/gpu.product` (`A100-80GB`)     | ""             |
| gpu_memory     | memory of one device, a quantity (`80Gi`)                            | 0              |
| managed        | GPUs the scheduler assigns itself (true) or the device plugin's      | see below      |
| nvlink_island  | devices per NVLink island (0: no NVLink)                             | 0              |
| pods           | allocatable pods                                                     | 110            |
| zone           | the label `topology.kubernetes.io/zone`                              | none           |
| region         | the label `topology.kubernetes.io/region`                            | none           |
| labels         | more labels: `key=value;key=value` in CSV, a mapping in YAML         | none           |

GPUs are managed by default when the node has GPUs and their memory is known: only managed GPUs take
shares (`gpu-fraction`, `gpu-memory`), which is what trace workloads ask. A managed node gets the label
`ai-scheduler.io/gpu-managed: "true"` and the report the node agent would write
(`ai-scheduler.io/gpus`, docs/users/gpus.md): one device per GPU with its model and memory, none of it used,
NVLink between the devices of an island and PCIe `PXB` within an island, `SYS` across. A node of
device-plugin GPUs gets `nvidia.com/gpu` in its allocatable instead. Both get the labels the NVIDIA GPU
feature discovery writes (`nvidia.com/gpu.product`, `.count`, `.memory` in MiB), so that pods can ask
for a model by node affinity.

Alibaba's GPU node lists (`openb_node_list_gpu_node.csv` of cluster-trace-gpu-v2023, the FGD paper's
cluster) read too: a CSV file whose header is `sn,cpu_milli,memory_mib,gpu,model` is taken as one node
per row, `sn` the name, `cpu_milli` millicores, `memory_mib` MiB, `gpu` devices of the `model`, managed,
each device of the model's memory (`ALIBABA_GPU_MEMORY`; 16 GiB for a model it does not know: only a
request for a share of GPU memory reads it, and the trace's pods ask shares in thousandths of a GPU).

The Node itself comes from `ai_scheduler.sim.make_node`, the builder the demo, tests and benchmarks use,
so a simulated cluster and a trace cluster are the same objects. Anything wrong in the file (an unknown
key, a bad quantity, an invalid label, a name repeated) is a TraceError naming each entry and reason:
a cluster file is small and hand-written, and a simulation on half of it would mislead.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import orjson
import yaml

from ai_scheduler.cache.gpus import GPUS_ANNOTATION, MANAGED_LABEL, MIB, UPDATED_ANNOTATION
from ai_scheduler.log import rfc3339
from ai_scheduler.messages import echo
from ai_scheduler.quantity import QuantityError, format_units, to_units
from ai_scheduler.sim.objects import make_node
from ai_scheduler.trace.records import TraceError
from ai_scheduler.trace.table import load_table

ZONE_LABEL = "topology.kubernetes.io/zone"
REGION_LABEL = "topology.kubernetes.io/region"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
GPU_COUNT_LABEL = "nvidia.com/gpu.count"
GPU_MEMORY_LABEL = "nvidia.com/gpu.memory"
KEYS = ("name", "count", "cpu", "memory", "gpus", "gpu_model", "gpu_memory", "managed", "nvlink_island",
        "pods", "zone", "region", "labels")
DEFAULT_PODS = 110
# Alibaba's node-list columns and the memory of each GPU model it names, in GiB.
ALIBABA_NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
ALIBABA_GPU_MEMORY = {"P100": 16, "T4": 16, "V100M16": 16, "V100M32": 32, "A10": 24, "G1": 16, "G2": 32,
                      "G3": 32}
ALIBABA_DEFAULT_GPU_MEMORY = 16

# Kubernetes' rules for names and labels (apimachinery validation): a node name is a DNS subdomain; a label
# key an optional DNS-subdomain prefix and a name; a label value empty or a name.
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_LABEL_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_TRUE = frozenset({"true", "yes", "1"})
_FALSE = frozenset({"false", "no", "0"})


@dataclass(slots=True)
class NodeSpec:
    """One node: allocatable cpu in millicores, memory in bytes, `gpus` devices of `gpu_memory` bytes."""

    name: str
    cpu: int
    memory: int
    gpus: int = 0
    gpu_model: str = ""
    gpu_memory: int = 0
    managed: bool = False
    nvlink_island: int = 0
    pods: int = DEFAULT_PODS
    labels: dict[str, str] = field(default_factory=dict)
    # The Node itself, as a replayable log recorded it (`from_node`): `to_node` gives it back.
    manifest: dict[str, Any] | None = field(default=None, compare=False, repr=False)

    @classmethod
    def from_node(cls, obj: Mapping[str, Any]) -> NodeSpec:
        """A node from its API object (a replay's): capacity from allocatable, GPUs from the agent's
        report (managed) or `nvidia.com/gpu`; the object kept as is for `to_node`."""
        meta = obj.get("metadata") or {}
        allocatable = (obj.get("status") or {}).get("allocatable") or {}
        labels = dict(meta.get("labels") or {})
        managed = labels.get(MANAGED_LABEL) == "true"

        def amount(resource: str) -> int:
            try:
                return to_units(resource, str(allocatable.get(resource, "0")))
            except QuantityError:
                return 0

        gpus, model, memory = amount("nvidia.com/gpu"), labels.get(GPU_PRODUCT_LABEL, ""), 0
        if managed:
            try:
                report = orjson.loads((meta.get("annotations") or {}).get(GPUS_ANNOTATION) or "[]")
            except orjson.JSONDecodeError:
                report = []
            devices = [d for d in report if isinstance(d, dict) and not d.get("error")]
            gpus = len(devices)
            memory = max((int(d.get("memoryTotalMiB") or 0) * MIB for d in devices), default=0)
            model = model or next((str(d.get("model") or "") for d in devices), "")
        return cls(meta.get("name", ""), cpu=amount("cpu"), memory=amount("memory"), gpus=gpus,
                   gpu_model=model, gpu_memory=memory, managed=managed, pods=amount("pods") or DEFAULT_PODS,
                   labels=labels, manifest=copy.deepcopy(dict(obj)))

    @property
    def zone(self) -> str:
        return self.labels.get(ZONE_LABEL, "")

    def gpu_report(self) -> list[dict[str, Any]]:
        """The devices as the node agent reports them (the `ai-scheduler.io/gpus` annotation)."""
        island = self.nvlink_island or self.gpus
        devices: list[dict[str, Any]] = []
        for index in range(self.gpus):
            mine = index // island
            devices.append({
                "index": index,
                "uuid": f"GPU-{self.name}-{index}",
                "model": self.gpu_model,
                "memoryTotalMiB": self.gpu_memory // MIB,
                "memoryUsedMiB": 0,
                "utilizationPct": 0,
                "nvlinkPeers": [peer for peer in range(self.gpus)
                                if self.nvlink_island and peer != index and peer // island == mine],
                "pcie": {str(peer): "PXB" if peer // island == mine else "SYS"
                         for peer in range(self.gpus) if peer != index},
            })
        return devices

    def to_node(self, *, updated: float | None = None) -> dict[str, Any]:
        """The Node as the API server would hold it; a managed node's GPU report is dated `updated`
        (epoch seconds, now by default), as the scheduler drops reports older than its staleness bound.
        A node from a log is its logged object, the report's date moved to `updated` likewise."""
        if self.manifest is not None:
            node = copy.deepcopy(self.manifest)
            reported = (node.get("metadata") or {}).get("annotations") or {}
            if UPDATED_ANNOTATION in reported:
                reported[UPDATED_ANNOTATION] = rfc3339(updated, millis=False)
            return node
        labels: dict[str, str] = {}
        annotations: dict[str, str] = {}
        if self.gpus:
            labels[GPU_COUNT_LABEL] = str(self.gpus)
            if self.gpu_model:
                labels[GPU_PRODUCT_LABEL] = self.gpu_model
            if self.gpu_memory:
                labels[GPU_MEMORY_LABEL] = str(self.gpu_memory // MIB)
        if self.managed:
            labels[MANAGED_LABEL] = "true"
            annotations[GPUS_ANNOTATION] = orjson.dumps(self.gpu_report()).decode()
            annotations[UPDATED_ANNOTATION] = rfc3339(updated, millis=False)
        labels.update(self.labels)
        return make_node(self.name, cpu=format_units("cpu", self.cpu),
                         memory=format_units("memory", self.memory), pods=self.pods,
                         gpus=0 if self.managed else self.gpus, labels=labels,
                         annotations=annotations)


def total_gpus(nodes: Iterable[NodeSpec]) -> int:
    """GPU devices of all the nodes: the capacity `inflate` measures a workload against."""
    return sum(node.gpus for node in nodes)


def read_cluster(path: str | Path) -> list[NodeSpec]:
    """The nodes of a cluster file (`.csv`, or `.yaml`/`.yml`), each shape repeated `count` times."""
    source = Path(path)
    entries: list[tuple[str, Mapping[str, Any]]]
    if source.suffix.lower() in (".yaml", ".yml"):
        entries = _yaml_entries(source)
    else:
        table = load_table(source)
        entries = [(f"row {line}", dict(zip(table.columns, fields, strict=False)))
                   for line, fields in table.records]
        if set(ALIBABA_NODE_COLUMNS) <= set(table.columns):
            entries = [(where, _alibaba_entry(entry)) for where, entry in entries]
        wrong = [f"{where}: expected {len(table.columns)} fields as in the header, found {len(fields)}"
                 for (where, _), (_, fields) in zip(entries, table.records, strict=True)
                 if len(fields) != len(table.columns)]
        if wrong:
            raise TraceError(f"{source}: " + "; ".join(wrong))
    nodes: list[NodeSpec] = []
    errors: list[str] = []
    first: dict[str, str] = {}
    for where, entry in entries:
        try:
            made = _shape(entry)
        except ValueError as exc:
            errors.append(f"{where}: {exc}")
            continue
        for node in made:
            if node.name in first:
                errors.append(f"{where}: node {node.name!r} is also made by {first[node.name]}")
                break
            first[node.name] = where
        nodes.extend(made)
    if errors:
        raise TraceError(f"{source}: " + "; ".join(errors))
    return nodes


def _alibaba_entry(row: Mapping[str, Any]) -> dict[str, Any]:
    """A row of Alibaba's node list as this reader's keys (its other columns ignored)."""
    entry: dict[str, Any] = {"name": str(row.get("sn", "")).strip().lower()}
    cpu, memory = str(row.get("cpu_milli", "")).strip(), str(row.get("memory_mib", "")).strip()
    entry["cpu"] = f"{cpu}m" if cpu else ""
    entry["memory"] = f"{memory}Mi" if memory else ""
    gpus = str(row.get("gpu", "")).strip() or "0"
    entry["gpus"] = gpus
    model = str(row.get("model", "")).strip()
    if gpus != "0":
        entry["gpu_model"] = model
        gib = ALIBABA_GPU_MEMORY.get(model, ALIBABA_DEFAULT_GPU_MEMORY)
        entry["gpu_memory"] = f"{gib}Gi"
    return entry


def _yaml_entries(source: Path) -> list[tuple[str, Mapping[str, Any]]]:
    try:
        document = yaml.safe_load(source.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise TraceError(f"{source}: cannot read: {exc}") from exc
    if isinstance(document, dict) and set(document) == {"nodes"}:
        document = document["nodes"]
    if not isinstance(document, list) or not all(isinstance(entry, dict) for entry in document):
        raise TraceError(f"{source}: expected a list of nodes (mappings), at the top or under `nodes:`")
    return [(f"node {number}", entry) for number, entry in enumerate(document, start=1)]


def _shape(entry: Mapping[str, Any]) -> list[NodeSpec]:
    """The nodes one entry makes; ValueError naming the key at fault."""
    values = {str(key).strip().lower(): value for key, value in entry.items()}
    unknown = [key for key in values if key not in KEYS]
    if unknown:
        raise ValueError(f"unknown key(s) {', '.join(map(repr, unknown))}; the keys are {', '.join(KEYS)}")
    given = {key: value for key, value in values.items() if value is not None and str(value).strip() != ""}
    name = str(given.get("name", "")).strip()
    if not name:
        raise ValueError("name is missing")
    for key in ("cpu", "memory"):
        if key not in given:
            raise ValueError(f"{key} is missing")
    gpus = _whole(given, "gpus", 0)
    gpu_memory = _quantity(given, "gpu_memory")
    gpu_model = str(given.get("gpu_model", "")).strip()
    managed = _flag(given, "managed", default=bool(gpus and gpu_memory))
    if managed and not (gpus and gpu_memory):
        raise ValueError("managed GPUs need gpus and gpu_memory")
    if not gpus and (gpu_model or gpu_memory):
        raise ValueError("gpu_model and gpu_memory need gpus")
    labels = _labels(given.get("labels"))
    for key, label in (("zone", ZONE_LABEL), ("region", REGION_LABEL)):
        if key in given:
            labels[label] = str(given[key]).strip()
    if gpu_model:
        _check_label(GPU_PRODUCT_LABEL, gpu_model)
    for key, value in labels.items():
        _check_label(key, value)
    count = _whole(given, "count", 1)
    names = [name] if count == 1 else [f"{name}-{i}" for i in range(count)]
    for node_name in names[:1] + names[-1:]:
        if len(node_name) > 253 or not _SUBDOMAIN.fullmatch(node_name):
            raise ValueError(f"{node_name!r} is not a valid node name (lowercase letters, digits, '-', '.')")
    pods = _whole(given, "pods", DEFAULT_PODS)
    if pods < 1:
        raise ValueError("pods must be at least 1")
    template = NodeSpec(name=name, cpu=_quantity(given, "cpu"), memory=_quantity(given, "memory"), gpus=gpus,
                        gpu_model=gpu_model, gpu_memory=gpu_memory, managed=managed,
                        nvlink_island=_whole(given, "nvlink_island", 0), pods=pods, labels=labels)
    return [replace(template, name=node_name, labels=dict(labels)) for node_name in names]


def _whole(given: Mapping[str, Any], key: str, default: int) -> int:
    value = given.get(key, default)
    if isinstance(value, str):
        text = value.strip()
        value = int(text) if text.isascii() and text.isdigit() else None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{key} must be a whole number, at least 0, got {echo(given.get(key))}")
    return value


def _quantity(given: Mapping[str, Any], key: str) -> int:
    value = given.get(key, 0)
    resource = "cpu" if key == "cpu" else "memory"
    try:
        amount = to_units(resource, value if isinstance(value, int | float) and not isinstance(value, bool)
                          else str(value))
    except QuantityError:
        amount = -1
    if amount < 0:
        example = "64" if key == "cpu" else "80Gi"
        raise ValueError(f"{key} must be a quantity such as {example}, got {echo(value)}")
    return amount


def _flag(given: Mapping[str, Any], key: str, *, default: bool) -> bool:
    value = given.get(key)
    if value is None or isinstance(value, bool):
        return default if value is None else value
    text = str(value).strip().lower()
    if text in _TRUE or text in _FALSE:
        return text in _TRUE
    raise ValueError(f"{key} must be true or false, got {echo(value)}")


def _labels(value: object) -> dict[str, str]:
    """Labels from a YAML mapping or from `key=value;key=value`."""
    if value is None:
        return {}
    if isinstance(value, dict):
        return {str(key).strip(): "" if item is None else str(item).strip() for key, item in value.items()}
    labels: dict[str, str] = {}
    for part in str(value).split(";"):
        if not part.strip():
            continue
        key, equals, item = part.partition("=")
        if not equals:
            raise ValueError(f"labels must be key=value pairs separated by ';', got {echo(part.strip())}")
        labels[key.strip()] = item.strip()
    return labels


def _check_label(key: str, value: str) -> None:
    prefix, slash, name = key.rpartition("/")
    if (slash and (not prefix or len(prefix) > 253 or not _SUBDOMAIN.fullmatch(prefix))) or len(name) > 63 \
            or not _LABEL_NAME.fullmatch(name):
        raise ValueError(f"{key!r} is not a valid label key")
    if len(value) > 63 or (value and not _LABEL_NAME.fullmatch(value)):
        raise ValueError(f"label {key}: {value!r} is not a valid label value "
                         "(at most 63 letters, digits, '-', '_', '.')")
