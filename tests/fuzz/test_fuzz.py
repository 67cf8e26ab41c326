"""Fuzz: random and adversarial values for every annotation and label the scheduler reads, garbled watch
lines for the API layer's decoder, and random YAML for the config loader (issue 12, point 5).

What is right comes from an oracle written here from the contract (docs/), not from the
code: no exception escapes; a value the scheduler cannot use leaves the pod (or gang, or node's GPUs)
waiting with a reason that names the key; a pod with only valid values is placed.

Families:
- pod keys, one at a time and all valid together, through the in-process scheduling core (records,
  cache, gang registry, tenancy, priorities and the daemon's frameworks, as `daemon.Scheduler` wires them);
- pods already bound, with any values: the cache's accounting takes them without error;
- node keys (GPU management label, the agent's report and its time, topology labels) and PodGroups
  (spec fields and the same-domain annotation);
- pod keys through the real daemon against the embedded simulated API server: the reason must reach the
  pod's PodScheduled condition, and the daemon must log no error;
- raw watch lines through `api.kube._decode`: only WatchBroken / WatchExpired may escape;
- YAML through the config loader: random documents, mutations of default.yaml and deep nesting give a
  Config or a ConfigError that names the key, never another exception.

CI runs a fixed seed with a few hundred examples per test (`AI_SCHEDULER_FUZZ_EXAMPLES` scales it). Soak:

    AI_SCHEDULER_FUZZ_SECONDS=600 AI_SCHEDULER_FUZZ_SEED=123 python -m pytest -q tests/fuzz/test_fuzz.py

runs every test for that many seconds, in rounds of fresh examples (seeds 123, 124, ...). Each test prints
what it injected (per key: how many values, how many the oracle calls invalid, a few of them) and the seed
that reproduces it.
"""

from __future__ import annotations

import ast
import asyncio
import io
import json
import math
import os
import random
import re
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from decimal import MAX_EMAX, MIN_EMIN, ROUND_CEILING, Context, Decimal
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from builders import Node, Pod, PodGroup, gpu_report, make_node, make_pod
from hypothesis import HealthCheck, Phase, example, given, note, seed, settings
from hypothesis import strategies as st
from paths import ROOT

import ai_scheduler
from ai_scheduler.api.kube import KubeClient, WatchBroken, WatchExpired, _decode
from ai_scheduler.cache.cache import SchedulerCache
from ai_scheduler.cache.gangs import (
    GROUP_MIN_LABEL,
    GROUP_NAME_LABEL,
    KOORDINATOR_MIN,
    KOORDINATOR_NAME,
    LEGACY_POD_GROUP_LABEL,
    POD_GROUP_LABEL,
    PREEMPTION_POLICY_ANNOTATION,
    SAME_DOMAIN_ANNOTATION,
    VOLCANO_GROUP,
    GangRegistry,
)
from ai_scheduler.cache.gpus import (
    GPU_COUNT_ANNOTATION,
    GPU_FRACTION_ANNOTATION,
    GPU_IDS_ANNOTATION,
    GPU_MEMORY_ANNOTATION,
    GPU_UUIDS_ANNOTATION,
    GPUS_ANNOTATION,
    MANAGED_LABEL,
    UPDATED_ANNOTATION,
)
from ai_scheduler.cache.pod_grouper import (
    INFERENCE_ANNOTATION,
    JOB_COMPLETION_INDEX,
    JOBSET_NAME,
    JOBSET_REPLICATED_JOB,
    KUBEFLOW_JOB_NAME,
    KUBEFLOW_OPERATOR,
    LWS_GROUP_INDEX,
    LWS_NAME,
    LWS_SIZE,
    LWS_WORKER_INDEX,
    RAY_CLUSTER,
)
from ai_scheduler.cache.records import (
    HOLD_ANNOTATION,
    LAST_APPLIED,
    REQUEUE_ANNOTATION,
    NodeRecord,
    PodRecord,
)
from ai_scheduler.cache.tenancy import QUEUE_LABEL, USER_LABEL, Tenancy, quota_amounts
from ai_scheduler.config import POLICY_FACTORS, Config, ConfigError, load_config, parse_config
from ai_scheduler.config.schema import _GPU_MEMORY_RESOURCE
from ai_scheduler.daemon.app import Scheduler
from ai_scheduler.daemon.leader import ROLE_LABEL
from ai_scheduler.log import JsonLogger, rfc3339
from ai_scheduler.queue import QueuedPod
from ai_scheduler.scheduler.core import build_frameworks
from ai_scheduler.scheduler.framework.plugins.gpu import DEVICE_PLUGIN_GPU
from ai_scheduler.scheduler.priority import ESTIMATE_ANNOTATION, PriorityEngine
from ai_scheduler.sim import SimApiServer
from ai_scheduler.visibility.resources import API_VERSION
from ai_scheduler.visibility.server import GROUP as API_GROUP

# ----------------------------------------------------------------------------------------- the keys
POD_LABELS = (
    POD_GROUP_LABEL, LEGACY_POD_GROUP_LABEL, GROUP_NAME_LABEL, GROUP_MIN_LABEL, USER_LABEL, QUEUE_LABEL,
    # Gangs inferred from the owner (cache/pod_grouper.py).
    LWS_NAME, LWS_GROUP_INDEX, LWS_WORKER_INDEX, JOBSET_NAME, JOBSET_REPLICATED_JOB, KUBEFLOW_JOB_NAME,
    KUBEFLOW_OPERATOR, RAY_CLUSTER,
)
POD_ANNOTATIONS = (
    KOORDINATOR_NAME,
    KOORDINATOR_MIN,
    VOLCANO_GROUP,
    INFERENCE_ANNOTATION,
    LWS_SIZE,
    JOB_COMPLETION_INDEX,
    GPU_COUNT_ANNOTATION,
    GPU_MEMORY_ANNOTATION,
    GPU_FRACTION_ANNOTATION,
    GPU_IDS_ANNOTATION,
    ESTIMATE_ANNOTATION,
    PREEMPTION_POLICY_ANNOTATION,
)
POD_KEYS = POD_LABELS + POD_ANNOTATIONS
NODE_KEYS = (MANAGED_LABEL, GPUS_ANNOTATION, UPDATED_ANNOTATION)
PODGROUP_KEYS = (SAME_DOMAIN_ANNOTATION,)
FUZZED_KEYS = frozenset(POD_KEYS + NODE_KEYS + PODGROUP_KEYS)
# Constants that look like keys but that the scheduler never reads from an object it is given.
NOT_READ = {
    GPU_UUIDS_ANNOTATION: "written on the pod before binding, never read",
    LAST_APPLIED: "dropped unread from every pod record",
    _GPU_MEMORY_RESOURCE: "a resource name in config quotas (the config fuzz covers it)",
    DEVICE_PLUGIN_GPU: "a resource name, read from resources and allocatable",
    API_VERSION: "the visibility API's group and version, served, not read",
    API_GROUP: "the visibility API's group, served, not read",
    ROLE_LABEL: "written on the daemon's own pod for the visibility Service's selector, never read",
    "ai-scheduler.io/group": "a namespace label the admission policy reads (deploy/quota-delegation.yaml)",
}
# Keys read as the run-time model's features (prediction/features.py): a task type or workload class is a
# category (any value, normalised), a declared size a whole number (anything else is no size); they move a
# prediction, never a placement (tests/unit/prediction/test_prediction.py, tests/unit/cache/test_tasks.py).
READ_AS_FEATURES = {
    "ai-scheduler.io/task-type": "a category of the run-time model",
    "ai-scheduler.io/workload-class": "a category of the run-time model",
    "ai-scheduler.io/model-parameters": "a declared size: a whole number, or none",
    "ai-scheduler.io/dataset-bytes": "a declared size: a whole number, or none",
}
# Keys whose value names an object: the pod is kept off every node while no such object exists, with the
# reason (tests/unit/cache/test_domains.py); the Task controller's keys on its own pods, which it reads back
# from them only (a run label that is not a number: not one of its pods; tests/unit/cache/test_tasks.py).
READ_BY_NAME = {
    "ai-scheduler.io/domain": "a Domain's name: none of that name keeps the pod off every node, said",
    "ai-scheduler.io/task": "the Task controller's, on its own pods: the Task's name",
    "ai-scheduler.io/task-role": "the Task controller's, on its own pods: the role",
    "ai-scheduler.io/task-run": "the Task controller's, on its own pods: the run, a number",
}
# Keys of users' commands on their own pods (`ai-scheduler status hold|requeue`): a value gates a pod or
# retries it, nothing else; tests/unit/scheduler/test_hold_requeue.py covers any value (only "true" holds;
# any new requeue value retries).
USER_COMMANDS = {
    HOLD_ANNOTATION: "`hold`: only the value \"true\" holds the pod (test_hold_requeue.py)",
    REQUEUE_ANNOTATION: "`requeue`: any new value retries the pod now (test_hold_requeue.py)",
}
# Well-known Kubernetes keys read from other objects than pods (nodes, volumes, claims), whose values are
# used as they are (a topology domain, a node name) or only tested for presence; their plugins' unit tests
# cover them with kube-scheduler's cases.
READ_FROM_OTHER_OBJECTS = {
    "kubernetes.io/hostname": "node label: the default spread constraints' topology key",
    "topology.kubernetes.io/zone": "node and volume label: VolumeZone (its test_volume_zone.py)",
    "topology.kubernetes.io/region": "node and volume label: VolumeZone (its test_volume_zone.py)",
    "failure-domain.beta.kubernetes.io/zone": "legacy node and volume label: VolumeZone",
    "failure-domain.beta.kubernetes.io/region": "legacy node and volume label: VolumeZone",
    "volume.kubernetes.io/selected-node": "claim annotation written in PreBind (test_volume_binding.py)",
    "gpu.nvidia.com": "ResourceSlices' driver whose devices the views count as GPUs (test_e2e_dra.py)",
    "pv.kubernetes.io/bind-completed": "claim annotation set by the PV controller when a claim binds",
    "pv.kubernetes.io/bound-by-controller": "claim and volume annotation set by the PV controller",
    "volume.beta.kubernetes.io/storage-class": "legacy claim and volume annotation naming the class",
    "kubernetes.io/no-provisioner": "a StorageClass provisioner name: local volumes, never provisioned",
    "resource.kubernetes.io/extended-resource-claim": "written on the claim DynamicResources makes for "
    "DRA-backed extended resources (test_dynamic_resources.py)",
    "resource.kubernetes.io/delete-protection": "the finalizer DynamicResources' PreBind puts on claims",
    "nvidia.com/gpu.product": "node label: the GPU model accounting records, used as it is",
}
# Keys the contract names that the code does not read yet, each with the issue that will make it read them.
CONTRACT_NOT_READ_YET: dict[str, str] = {}
# Keys of the contract, as docs/reference/contract.md lists them (checked below).
CONTRACT_KEYS = frozenset({
    POD_GROUP_LABEL, LEGACY_POD_GROUP_LABEL, GROUP_NAME_LABEL, GROUP_MIN_LABEL, KOORDINATOR_NAME,
    KOORDINATOR_MIN, MANAGED_LABEL, GPU_COUNT_ANNOTATION, GPU_MEMORY_ANNOTATION, GPU_FRACTION_ANNOTATION,
    GPU_IDS_ANNOTATION, GPU_UUIDS_ANNOTATION, GPUS_ANNOTATION, UPDATED_ANNOTATION, USER_LABEL, QUEUE_LABEL,
    ESTIMATE_ANNOTATION, "ai-scheduler.io/task-type", "ai-scheduler.io/workload-class",
    "ai-scheduler.io/hold", "ai-scheduler.io/requeue-at", "ai-scheduler.io/role",
})
# Packages that read objects of the cluster (agent/ and sim/ write theirs; demo and cli only drive).
READING_PACKAGES = ("api", "cache", "config", "queue", "scheduler", "daemon", "visibility")
_KEY_LIKE = re.compile(r"(?:[a-z0-9](?:[-a-z0-9]*[a-z0-9])?\.)+[a-z]{2,}(?:/[-A-Za-z0-9_.]+)?")

# ----------------------------------------------------------------------------------------- budget
SOAK_SECONDS = float(os.environ.get("AI_SCHEDULER_FUZZ_SECONDS") or 0)
BASE_SEED = int(os.environ.get("AI_SCHEDULER_FUZZ_SEED") or 20261123)
SCALE = float(os.environ.get("AI_SCHEDULER_FUZZ_EXAMPLES") or 1)
SOAK_ROUND_EXAMPLES = 100  # the duration is checked between rounds
CI_PHASES = (Phase.explicit, Phase.generate, Phase.shrink)
SOAK_PHASES = (Phase.generate, Phase.shrink)  # the explicit examples run in CI


def _settings(examples: int) -> settings:
    return settings(
        max_examples=max(1, int(examples * SCALE)) if not SOAK_SECONDS else SOAK_ROUND_EXAMPLES,
        deadline=None,
        database=None,  # the seed alone decides what runs: the printed seed reproduces it
        print_blob=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
        # Soak rounds skip the explicit examples, which the CI run tries.
        phases=SOAK_PHASES if SOAK_SECONDS else CI_PHASES,
    )


class Ledger:
    """What one test injected, per key: printed after the test so that the CI log shows it."""

    def __init__(self, title: str) -> None:
        self.title = title
        self.counts: Counter[str] = Counter()
        self.judged: Counter[str] = Counter()  # values the oracle (or the outcome) classified
        self.bad: Counter[str] = Counter()
        self.samples: dict[str, list[str]] = defaultdict(list)
        self.rounds: list[int] = []
        self.examples = 0

    def record(self, key: str, value: object, verdict: str = "") -> None:
        self.counts[key] += 1
        if verdict:
            self.judged[key] += 1
            self.bad[key] += verdict != "valid"
        shown = _short(value)
        samples = self.samples[key]
        if len(samples) < 4 and shown not in samples and (verdict != "valid" or not samples):
            samples.append(shown)
        note(f"injected {key} = {shown} ({verdict or 'no oracle'})")

    def summary(self) -> str:
        first, last = (self.rounds[0], self.rounds[-1]) if self.rounds else (BASE_SEED, BASE_SEED)
        seeds = f"seed {first}" if first == last else f"seeds {first}..{last}"
        lines = [
            f"fuzz {self.title}: {self.examples} examples, {seeds} "
            f"(AI_SCHEDULER_FUZZ_SEED={first} reproduces)"
        ]
        for key in sorted(self.counts):
            judged = f", {self.bad[key]} not valid" if self.judged[key] else ""
            lines.append(f"  {key}: {self.counts[key]} values{judged}, e.g. {', '.join(self.samples[key])}")
        return "\n".join(lines)


def _short(value: object, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 12]}...<{len(text)} chars>"


@pytest.fixture
def ledger(request: pytest.FixtureRequest, capsys: pytest.CaptureFixture[str]) -> Iterator[Ledger]:
    book = Ledger(request.node.name)
    yield book
    with capsys.disabled():
        print("\n" + book.summary())


def run_fuzz(book: Ledger, examples: int, strategy: st.SearchStrategy[Any], body: Callable[[Any], None],
             explicit: tuple[Any, ...] = ()) -> None:
    """Run `body` on examples of `strategy`: with the CI budget, or in soak rounds until the time is up."""
    started = time.monotonic()
    round_seed = BASE_SEED

    def counted(value: Any) -> None:
        book.examples += 1
        body(value)

    while True:
        test = given(strategy)(counted)
        for value in explicit:
            test = example(value)(test)
        book.rounds.append(round_seed)
        seed(round_seed)(_settings(examples)(test))()
        round_seed += 1
        if not SOAK_SECONDS or time.monotonic() - started >= SOAK_SECONDS:
            return


# ----------------------------------------------------------------------------------------- adversarial values
HUGE = "12345678901234567890"
ADVERSARIAL = (
    "", " ", "\t", "\n", "0", "1", "2", "3", "-1", "+1", "+3", " 3", "3 ", "3\n", "3.0", "1.5", "0.5", "1e3",
    "1E", "2e-3", "NaN", "nan", "inf", "-inf", "Infinity", HUGE, "-" + HUGE, "9" * 400, "1e999999",
    "1e9999999", "1e" + "9" * 5000, "0x10", "1_000", "\u0663", "\u00b2", "\uff11", "1" * 5000 + "h",
    "90m", "1h30m", "2h", "-5m", "1.5h", "0s", "1d", "300ms", "10Gi", "10gi", "10 Gi", "1.5Gi", "100Ei",
    "1Ki", "1m", "20Gi", "80Gi", "81Gi", "true", "True", "false", "required", "Required", "null", "[]",
    "{}", '{"a": 1}', '[{"index": 0}]', "x" * 5000, "\u00fcn\u00efc\u00f6d\u00e9", "\U0001f680", "\x00",
    "a/b", "../..", "default", "prod", "batch", "alice", "nobody", "pg", "a.b-c", "0,1", "1,0,1", "0,,1",
    "-1,0", "99", ".5", "1.0", "5e-1", "0.0", "1.0000001", "0.999", "1e-30",
)
DURATION_LIKE = st.from_regex(r"\A(?:[0-9]{1,4}(?:\.[0-9]{1,2})?(?:ms|s|m|h|d|us|ns)){1,3}\Z")
QUANTITY_LIKE = st.from_regex(
    r"\A[+-]?[0-9]{0,4}(?:\.[0-9]{0,3})?(?:[eE][+-]?[0-9]{1,3}|Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?\Z"
)


def values() -> st.SearchStrategy[str]:
    return st.one_of(
        st.sampled_from(ADVERSARIAL),
        st.text(max_size=30),
        st.integers().map(str),
        st.floats().map(str),
        DURATION_LIKE,
        QUANTITY_LIKE,
        st.text(alphabet="0123456789+-.eEKMGTPimnuhsd ", max_size=12),
    )


# ----------------------------------------------------------------------------------------- the oracle
GO_INT64 = 2**63
GO_MAX_DURATION_SECONDS = (2**63 - 1) / 1e9  # time.Duration is int64 nanoseconds
DEVICE_MIB = 80 * 1024
DEVICE_BYTES = DEVICE_MIB * 2**20
DEVICES = 2  # managed GPUs on node gpu-0
_BIG = Context(prec=60, Emax=MAX_EMAX, Emin=MIN_EMIN)
_GO_INT = re.compile(r"[+-]?[0-9]+")
_QUANTITY = re.compile(
    r"([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(?:[eE]([+-]?[0-9]+)|(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]))?"
)
_SUFFIX = {"": 0, "n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
# A gpu-fraction: a plain decimal number, as both Go's ParseFloat and a suffix-less quantity read it (KAI).
_FRACTION = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]{1,18})?")
_DURATION = re.compile(r"(?:[0-9]+(?:\.[0-9]+)?(?:ms|s|m|h|d))+")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
STALENESS = 10 * 365 * 86400  # gpu.stalenessSeconds: soak outlasts the default, and gpu-0's report is fixed
VALID_QUEUES = ("", "default", "prod", "batch")
PODGROUPS = ("pg", "90m", "a.b-c")  # existing PodGroups of minMember 1 in namespace NAMESPACE
NAMESPACE = "fuzz"
FUZZ_GANG = "fuzz-gang"


def go_atoi(text: str) -> int | None:
    """Go's strconv.Atoi (64-bit): ASCII digits with an optional sign, within int64."""
    if len(text) > 25 or not _GO_INT.fullmatch(text):
        return None
    value = int(text)
    return value if -GO_INT64 <= value < GO_INT64 else None


def quantity_units(text: str) -> Decimal | None:
    """A Kubernetes quantity in base units, rounded up to a whole unit; None if it is not one."""
    match = _QUANTITY.fullmatch(text.strip())
    if not match:
        return None
    number, exponent, suffix = match.groups()
    value = Decimal(number)
    if exponent:
        digits = exponent.lstrip("+-")
        power = int(digits) if len(digits) <= 9 else 10**9
        value = _BIG.scaleb(value, -power if exponent.startswith("-") else power)
    elif suffix and suffix.endswith("i"):
        value = _BIG.multiply(value, Decimal(2) ** (10 * "KMGTPE".index(suffix[0]) + 10))
    else:
        value = _BIG.scaleb(value, _SUFFIX[suffix or ""])
    return value.to_integral_value(rounding=ROUND_CEILING, context=_BIG)


def fraction_value(text: str) -> Decimal | None:
    """The documented gpu-fraction grammar (docs/users/gpus.md): a decimal number, optionally with a
    decimal exponent."""
    if not _FRACTION.fullmatch(text):
        return None
    try:
        return Decimal(text)
    except ArithmeticError:
        return None


def duration_seconds(text: str) -> float | None:
    """The documented estimated-runtime grammar (docs/administrators/queues-policies-quotas.md: "90m",
    "2h", "1h30m"; units ms, s, m, h, d)."""
    if not _DURATION.fullmatch(text):
        return None
    parts = re.findall(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h|d)", text)
    total = sum(float(number) * _UNIT_SECONDS[unit] for number, unit in parts)
    return total if total <= GO_MAX_DURATION_SECONDS else None


@dataclass(frozen=True)
class Expect:
    """What a pod carrying one fuzzed value must get. `verdict`: valid, invalid or unsatisfiable."""

    verdict: str
    names_key: bool = False  # its reason must name the key

    @property
    def places(self) -> bool:
        return self.verdict == "valid"


VALID = Expect("valid")
INVALID = Expect("invalid", names_key=True)
WAITS = Expect("unsatisfiable")


def _minimum(value: str) -> Expect:
    number = go_atoi(value)
    if number is None or number < 1:
        return INVALID
    return VALID if number == 1 else WAITS


def expect(key: str, value: str) -> Expect:
    """The contract's answer for a pod that carries `key: value` and is otherwise valid (see `pod_for`)."""
    if key in (POD_GROUP_LABEL, LEGACY_POD_GROUP_LABEL, VOLCANO_GROUP):
        return VALID if value == "" or value in PODGROUPS else INVALID  # a PodGroup that does not exist
    if key == INFERENCE_ANNOTATION:
        return VALID if value in ("on", "off") else INVALID
    if key == LWS_GROUP_INDEX:  # with a set name and size 1: any group index makes a group of one
        return VALID if go_atoi(value) is not None else INVALID
    if key == LWS_SIZE:  # the size of the group a pod of a LeaderWorkerSet says it is in
        return _minimum(value)
    if key == JOBSET_NAME:  # the JobSet gives the minimum: none is ever seen here
        return VALID if value == "" else WAITS
    if key in (LWS_NAME, LWS_WORKER_INDEX, JOBSET_REPLICATED_JOB, KUBEFLOW_JOB_NAME, KUBEFLOW_OPERATOR,
               RAY_CLUSTER, JOB_COMPLETION_INDEX):
        # With a group of one (LWS_NAME, LWS_WORKER_INDEX), or without the owner that a rule also needs.
        return VALID
    if key in (GROUP_NAME_LABEL, KOORDINATOR_NAME):
        return VALID  # with min-available 1: any name makes a gang of one (or none, when empty)
    if key in (GROUP_MIN_LABEL, KOORDINATOR_MIN):
        return _minimum(value)
    if key == USER_LABEL:
        # Honoured only when it names a configured user of a trusting namespace (docs/administrators/).
        return VALID
    if key == QUEUE_LABEL:
        return VALID if value in VALID_QUEUES else INVALID
    if key == GPU_COUNT_ANNOTATION:
        number = go_atoi(value)
        if number is None or number < 1:
            return INVALID
        return VALID if number <= DEVICES else WAITS
    if key == GPU_MEMORY_ANNOTATION:
        units = quantity_units(value)
        if units is None or units < 1:
            return INVALID
        # More than any GPU has is refused at once, naming the annotation.
        return VALID if units <= DEVICE_BYTES else Expect("unsatisfiable", names_key=True)
    if key == GPU_FRACTION_ANNOTATION:
        fraction = fraction_value(value)
        # Above 0 and at most 1 of one GPU: gpu-0's devices are free, so any such share fits one.
        return VALID if fraction is not None and 0 < fraction <= 1 else INVALID
    if key == GPU_IDS_ANNOTATION:
        return VALID  # on a pending pod: ours to write before binding
    if key == ESTIMATE_ANNOTATION:
        return VALID if duration_seconds(value) is not None else INVALID
    if key == PREEMPTION_POLICY_ANNOTATION:
        # Read only when the pod's gang fits nowhere and would preempt: a bad value is then the reason
        # it does not (tests/unit/scheduler/test_gang_preemption.py); a pod that fits is placed whatever it
        # says.
        return VALID
    raise AssertionError(f"no oracle for {key}")


def pod_for(key: str, value: str) -> tuple[dict[str, str], dict[str, str]]:
    """Labels and annotations of a pod that carries `key: value`, with the partner key a gang needs."""
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    holder = labels if key in POD_LABELS else annotations
    holder[key] = value
    if key == GROUP_NAME_LABEL:
        labels[GROUP_MIN_LABEL] = "1"
    elif key == GROUP_MIN_LABEL:
        labels[GROUP_NAME_LABEL] = FUZZ_GANG
    elif key == KOORDINATOR_NAME:
        annotations[KOORDINATOR_MIN] = "1"
    elif key == KOORDINATOR_MIN:
        annotations[KOORDINATOR_NAME] = FUZZ_GANG
    elif key in (LWS_NAME, LWS_GROUP_INDEX, LWS_WORKER_INDEX, LWS_SIZE):
        labels.setdefault(LWS_NAME, FUZZ_GANG)
        labels.setdefault(LWS_GROUP_INDEX, "0")
        annotations.setdefault(LWS_SIZE, "1")
    return labels, annotations


# ----------------------------------------------------------------------------------------- the cluster
def fuzz_config_data() -> dict[str, Any]:
    return {
        "server": {"port": 0, "bindAddress": "127.0.0.1"},
        "scheduling": {
            "initialBackoffSeconds": 0.05, "maxBackoffSeconds": 0.2, "unschedulableFlushSeconds": 5,
        },
        # Soak runs for longer than the default bound: the fixed report of gpu-0 must not go stale.
        "gpu": {"stalenessSeconds": STALENESS},
        "queues": [{"name": "prod", "level": 0}, {"name": "batch", "level": 1}],
        "groups": {"vision": {"level": 2}, "nlp": {"level": 1}},
        "users": {"alice": {"group": "vision", "level": 3}, "bob": {"group": "nlp", "level": 1}},
        "namespaces": {NAMESPACE: {"user": "alice", "trustUserLabel": True}},
        "policies": {"everything": {"weights": dict.fromkeys(POLICY_FACTORS, 1)}},
    }


CONFIG = parse_config(fuzz_config_data())
ZONE = CONFIG.scheduling.gang_topology_labels[0]


def base_nodes() -> list[dict[str, Any]]:
    """A CPU node, a managed GPU node (DEVICES NVLinked devices of 80 GiB) and a device-plugin GPU node,
    in two zones."""
    return [
        Node("cpu-0", labels={ZONE: "a"}).obj(),
        Node("gpu-0", labels={ZONE: "b"}).managed_gpus(json.dumps(gpu_report(DEVICES))).obj(),
        Node("dp-0", gpus=4, labels={ZONE: "b"}).obj(),
    ]


def podgroup(name: str, spec: dict[str, Any] | None = None, annotations: dict[str, Any] | None = None,
             ) -> dict[str, Any]:
    fields = {"minMember": 1} if spec is None else spec
    group = PodGroup(name, None, namespace=NAMESPACE).uid(f"pg-{name}").spec(**fields)
    return (group if annotations is None else group.annotations(annotations)).obj()


_names = iter(range(10**9))


def fuzz_pod(labels: dict[str, str], annotations: dict[str, str], node: str = "") -> dict[str, Any]:
    name = f"fuzz-{next(_names)}"
    pod = Pod(name, namespace=NAMESPACE, labels=labels, annotations=annotations, node_name=node or None)
    return pod.uid().phase("Running" if node else "Pending").obj()


@dataclass
class Outcome:
    result: str  # scheduled, waiting (gang), refused (admission), unschedulable (no node)
    message: str = ""
    node: str = ""
    details: dict[str, Any] = field(default_factory=dict)


class Core:
    """The in-process scheduling core, wired as `daemon.Scheduler` wires it, without an API server.

    `attempt` takes one pod through the daemon's decision order: its gang (declaration problems, members
    missing), then admission (tenant and quota), then the framework's cycle; then the pod goes away again.
    """

    def __init__(self, config: Config = CONFIG) -> None:
        self.config = config
        self.cache = SchedulerCache()
        self.cache.gpus.staleness = config.gpu.staleness_seconds
        self.tenancy = Tenancy(config)
        self.cache.tenancy = self.tenancy
        self.gangs = GangRegistry()
        self.clock = 1000.0
        self.priorities = PriorityEngine(
            config, self.tenancy, self.cache, self._members, clock=lambda: self.clock
        )
        self.framework = build_frameworks(config, self.cache, random.Random(1))[config.scheduler_name]
        for node in base_nodes():
            self.cache.set_node(NodeRecord.from_api(node))
        for name in PODGROUPS:
            self.gangs.set_podgroup(podgroup(name))

    def _members(self, pod: PodRecord) -> int:
        gang = self.gangs.gang_of(pod)
        return gang.min_member if gang is not None else 1

    def add(self, obj: dict[str, Any]) -> PodRecord:
        pod = PodRecord.from_api(obj)
        self.cache.set_pod(pod)
        self.gangs.observe_pod(pod)
        return pod

    def remove(self, pod: PodRecord) -> None:
        self.cache.remove_pod(pod.uid)
        self.gangs.forget_pod(pod.uid)
        self.tenancy.release(pod.uid)
        assert not self.cache.check_consistency()

    def priority(self, pod: PodRecord) -> None:
        """The policy's score over all factors: finite, each factor in [0, 1] (a NaN unsorts the queue)."""
        qp = QueuedPod(pod, initial_attempt=self.clock - 30)
        self.clock += 1
        self.priorities.refresh([qp])
        key = self.priorities.sort_key(qp)
        explained = self.priorities.explain(pod.uid)
        assert explained is not None
        assert all(math.isfinite(v) for v in key if isinstance(v, float)), key
        for name, value in explained.factors.items():
            assert 0.0 <= value <= 1.0, f"factor {name} = {value}"

    def attempt(self, obj: dict[str, Any]) -> Outcome:
        pod = self.add(obj)
        try:
            self.priority(pod)
            gang = self.gangs.gang_of(pod)
            if gang is not None:
                if gang.problem:
                    return Outcome("waiting", gang.problem)
                if gang.min_member > 1:
                    return Outcome("waiting", f"gang {gang.key} has 1 of {gang.min_member} required pods")
            tenant = self.tenancy.tenant_of(pod)
            refusal = tenant.error or self.tenancy.quota_refusal(tenant, quota_amounts(pod))
            if refusal:
                return Outcome("refused", refusal)
            decision = self.framework.schedule(pod)
            if decision.node is None:
                return Outcome("unschedulable", decision.message)
            self.cache.assume(pod, decision.node, decision.gpu_ids)
            return Outcome("scheduled", node=decision.node, details={"gpus": decision.gpu_ids})
        finally:
            self.remove(pod)


def check(outcome: Outcome, key: str, value: str, want: Expect) -> None:
    note(f"outcome: {outcome.result} {outcome.message[:300]!r}")
    if want.places:
        assert outcome.result == "scheduled", f"{key}={_short(value)} is valid, but: {outcome.message[:500]}"
        return
    assert outcome.result != "scheduled", f"{key}={_short(value)} ({want.verdict}) placed on {outcome.node}"
    assert outcome.message.strip(), f"{key}={_short(value)}: no reason"
    if want.names_key:
        assert key in outcome.message, f"{key}={_short(value)}: a reason without the key: {outcome.message!r}"


@pytest.fixture(scope="module")
def core() -> Core:
    return Core()


# ------------------------------------------------------------------------------------- code, contract, docs
def keys_in_code() -> dict[str, str]:
    """Every module-level string constant of the reading packages that looks like a label or annotation."""
    root = Path(ai_scheduler.__file__).parent
    found: dict[str, str] = {}
    for package in READING_PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            for node in ast.parse(path.read_text()).body:
                value = node.value if isinstance(node, ast.Assign | ast.AnnAssign) else None
                text = value.value if isinstance(value, ast.Constant) else None
                if isinstance(text, str) and _KEY_LIKE.fullmatch(text):
                    found[text] = str(path.relative_to(root.parent))
    return found


def test_every_key_the_code_reads_is_fuzzed_and_documented() -> None:
    """A key added to the code must be added here (to FUZZED_KEYS with an oracle, to NOT_READ, to
    READ_AS_FEATURES or READ_BY_NAME, or to READ_FROM_OTHER_OBJECTS for well-known keys of nodes and
    volumes)."""
    in_code = keys_in_code()
    known = (FUZZED_KEYS | NOT_READ.keys() | READ_FROM_OTHER_OBJECTS.keys() | USER_COMMANDS.keys()
             | READ_AS_FEATURES.keys() | READ_BY_NAME.keys())
    unknown = {k: where for k, where in in_code.items() if k not in known}
    assert not unknown, f"keys in the code that the fuzz does not cover: {unknown}"
    gone = known - in_code.keys()
    assert not gone, f"keys the fuzz covers that the code no longer defines: {sorted(gone)}"
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    readme = "\n".join(path.read_text() for path in pages)
    contract = (ROOT / "docs" / "reference" / "contract.md").read_text()
    unwritten = sorted(k for k in CONTRACT_KEYS if k not in contract)
    assert not unwritten, f"contract keys the contract page does not name: {unwritten}"
    undocumented = sorted(k for k in FUZZED_KEYS if k not in readme)
    assert not undocumented, f"keys the scheduler reads that the docs do not name: {undocumented}"
    uncovered = (CONTRACT_KEYS - FUZZED_KEYS - NOT_READ.keys() - USER_COMMANDS.keys()
                 - CONTRACT_NOT_READ_YET.keys() - READ_AS_FEATURES.keys() - READ_BY_NAME.keys())
    assert not uncovered, f"contract keys neither read nor known to be missing: {sorted(uncovered)}"
    for key in CONTRACT_NOT_READ_YET:
        assert key not in in_code, f"{key} is read now: fuzz it (FUZZED_KEYS, `expect`) and drop it here"


# ----------------------------------------------------------------------------------------- pods, in process
@pytest.mark.parametrize("key", POD_KEYS)
def test_pod_key_takes_any_value(core: Core, ledger: Ledger, key: str) -> None:
    """One key with a random or adversarial value, the rest of the pod valid."""

    def body(value: str) -> None:
        want = expect(key, value)
        ledger.record(key, value, want.verdict)
        labels, annotations = pod_for(key, value)
        check(core.attempt(fuzz_pod(labels, annotations)), key, value, want)

    run_fuzz(ledger, 60, values(), body, explicit=(HUGE, "90m", "x" * 5000, "", " 3", "1_0", "\u0663"))


def valid_values() -> st.SearchStrategy[tuple[dict[str, str], dict[str, str]]]:
    """Labels and annotations using every key with valid values, one gang declaration at most."""
    gang = st.sampled_from([
        ({}, {}),
        ({POD_GROUP_LABEL: PODGROUPS[0]}, {}),
        ({LEGACY_POD_GROUP_LABEL: PODGROUPS[1]}, {}),
        ({GROUP_NAME_LABEL: FUZZ_GANG, GROUP_MIN_LABEL: "1"}, {}),
        ({}, {KOORDINATOR_NAME: "90m", KOORDINATOR_MIN: "+1"}),
    ])
    gpus: st.SearchStrategy[dict[str, str]] = st.one_of(
        st.just({}),
        st.integers(1, DEVICES).map(lambda n: {GPU_COUNT_ANNOTATION: str(n)}),
        st.sampled_from(["1", "512Mi", "1Gi", "20Gi", "80Gi", "1.5Gi", "1e9", "81920Mi"]).map(
            lambda q: {GPU_MEMORY_ANNOTATION: q}),
        st.sampled_from(["0.5", "1", "0.25", ".1", "1e-3", "5E-1", "+0.75", "1.", "0.333333"]).map(
            lambda f: {GPU_FRACTION_ANNOTATION: f}),
    )
    optional = st.fixed_dictionaries({}, optional={
        USER_LABEL: st.sampled_from(["alice", "bob", "nobody", ""]),
        QUEUE_LABEL: st.sampled_from(VALID_QUEUES),
        ESTIMATE_ANNOTATION: st.sampled_from(["90m", "2h", "1h30m", "45s", "0s", "1.5h", "3d", "100ms"]),
        GPU_IDS_ANNOTATION: st.sampled_from(["0", "0,1", "", "junk"]),
    })

    def merge(parts: tuple[tuple[dict[str, str], dict[str, str]], dict[str, str], dict[str, str]],
              ) -> tuple[dict[str, str], dict[str, str]]:
        (gang_labels, gang_annotations), gpu, extra = parts
        labels = {**gang_labels, **{k: v for k, v in extra.items() if k in POD_LABELS}}
        annotations = {**gang_annotations, **gpu, **{k: v for k, v in extra.items() if k in POD_ANNOTATIONS}}
        return labels, annotations

    return st.tuples(gang, gpus, optional).map(merge)


def test_pod_with_only_valid_values_is_placed(core: Core, ledger: Ledger) -> None:
    def body(meta: tuple[dict[str, str], dict[str, str]]) -> None:
        labels, annotations = meta
        for key, value in {**labels, **annotations}.items():
            ledger.record(key, value, "valid")
        outcome = core.attempt(fuzz_pod(labels, annotations))
        assert outcome.result == "scheduled", outcome.message
        if {GPU_COUNT_ANNOTATION, GPU_MEMORY_ANNOTATION, GPU_FRACTION_ANNOTATION} & annotations.keys():
            assert outcome.node == "gpu-0" and outcome.details["gpus"], outcome

    run_fuzz(ledger, 100, valid_values(), body)


def test_pod_with_many_random_values_gets_a_decision(core: Core, ledger: Ledger) -> None:
    """Every key at once, random values: a placement, or a reason; never an exception."""
    keys = st.dictionaries(st.sampled_from(POD_KEYS), values(), min_size=1, max_size=len(POD_KEYS))

    def body(chosen: dict[str, str]) -> None:
        for key, value in chosen.items():
            ledger.record(key, value)
        labels = {k: v for k, v in chosen.items() if k in POD_LABELS}
        annotations = {k: v for k, v in chosen.items() if k in POD_ANNOTATIONS}
        outcome = core.attempt(fuzz_pod(labels, annotations))
        assert outcome.result == "scheduled" or outcome.message.strip()
        if outcome.result != "scheduled":
            invalid = [k for k, v in chosen.items() if expect(k, v) == INVALID]
            note(f"invalid by the oracle: {invalid}")

    run_fuzz(ledger, 100, keys, body)


def test_bound_pods_with_any_values_are_accounted(core: Core, ledger: Ledger) -> None:
    """Pods bound by someone (or before a restart) carry whatever they carry: the cache, tenancy and
    priorities take them without error, and a valid GPU pod still finds room next to them."""
    keys = st.dictionaries(st.sampled_from(POD_KEYS), values(), max_size=4)

    def body(args: tuple[str, dict[str, str]]) -> None:
        node, chosen = args
        for key, value in chosen.items():
            ledger.record(key, value)
        labels = {k: v for k, v in chosen.items() if k in POD_LABELS}
        annotations = {k: v for k, v in chosen.items() if k in POD_ANNOTATIONS}
        bound = core.add(fuzz_pod(labels, annotations, node=node))
        try:
            core.priorities.refresh([])
            core.cache.gpus.allocation(core.cache.row_of("gpu-0"))
            probe = core.attempt(fuzz_pod({}, {GPU_MEMORY_ANNOTATION: "1Gi"}))
            note(f"probe: {probe}")
            assert probe.result in ("scheduled", "unschedulable"), probe
            assert probe.result == "scheduled" or probe.message.strip()
        finally:
            core.remove(bound)

    run_fuzz(ledger, 60, st.tuples(st.sampled_from(["cpu-0", "gpu-0", "dp-0"]), keys), body)


@pytest.mark.parametrize("stray", ["junk", "1"])
def test_a_pending_pods_own_gpu_ids_do_not_replace_the_devices_chosen_for_it(stray: str) -> None:
    """A pod created with a gpu-ids annotation of its own (a copied manifest): between our choice and the
    watch showing the ids we wrote, the cache accounts the stray ids, so another pod gets the same device."""
    core = Core()
    first = core.add(fuzz_pod({}, {GPU_COUNT_ANNOTATION: "1", GPU_IDS_ANNOTATION: stray}))
    decision = core.framework.schedule(first)
    assert decision.node == "gpu-0"
    core.cache.assume(first, decision.node, decision.gpu_ids)
    second = core.add(fuzz_pod({}, {GPU_COUNT_ANNOTATION: "1"}))
    other = core.framework.schedule(second)
    assert not set(other.gpu_ids) & set(decision.gpu_ids), f"both pods got device {decision.gpu_ids}"


# ------------------------------------------------------------------------------------- nodes and PodGroups
JSON_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70), st.floats(allow_nan=False),
    st.text(max_size=10), st.sampled_from(["0", "1", "-1", "NaN", "x" * 100]),
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)
MAX_DEVICE_MIB = 2**24  # no GPU has 16 TiB
REPORT_FIELDS = ("index", "uuid", "model", "memoryTotalMiB", "memoryUsedMiB", "nvlinkPeers", "pcie", "error")
MAX_DEVICE_INDEX = 64


def report_is_valid(items: object) -> bool:
    """The agent's report as the contract describes it: a list of devices with index, uuid, model, memory in
    MiB and topology; or a device with an error. Numbers are JSON integers in their range."""

    def whole(value: object, low: int, high: int) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high

    if not isinstance(items, list):
        return False
    seen = set()
    for item in items:
        if not isinstance(item, dict) or not whole(item.get("index"), 0, MAX_DEVICE_INDEX - 1):
            return False
        if item["index"] in seen:
            return False
        seen.add(item["index"])
        if item.get("error"):
            continue
        if not isinstance(item.get("uuid"), str) or not isinstance(item.get("model", ""), str):
            return False
        memory = (item.get("memoryTotalMiB"), item.get("memoryUsedMiB", 0))
        if not all(whole(mib, 0, MAX_DEVICE_MIB) for mib in memory):
            return False
        peers = item.get("nvlinkPeers") or []
        if not isinstance(peers, list) or not all(whole(p, 0, MAX_DEVICE_INDEX - 1) for p in peers):
            return False
        pcie = item.get("pcie") or {}
        if not isinstance(pcie, dict) or not all(
            go_atoi(k) in range(MAX_DEVICE_INDEX) and isinstance(v, str) for k, v in pcie.items()
        ):
            return False
    return True


@st.composite
def gpu_reports(draw: st.DrawFn) -> str:
    """Valid reports, reports with one field of one device replaced by any JSON value, and garbage."""
    kind = draw(st.sampled_from(["valid", "mutated", "mutated", "dropped", "json", "text"]))
    if kind == "json":
        return json.dumps(draw(JSON_VALUES))
    if kind == "text":
        return draw(values())
    report = gpu_report(draw(st.integers(1, 4)))
    if kind != "valid":
        device = draw(st.sampled_from(report))
        name = draw(st.sampled_from(REPORT_FIELDS))
        if kind == "dropped":
            device.pop(name, None)
        else:
            device[name] = draw(JSON_VALUES)
    return json.dumps(report)


@st.composite
def report_times(draw: st.DrawFn) -> tuple[str, str]:
    now = time.time()
    kind = draw(st.sampled_from(["fresh", "fresh", "millis", "old", "future", "garbage", "shifted"]))
    if kind == "fresh":
        return kind, rfc3339(now - draw(st.integers(0, 60)), millis=False)
    if kind == "millis":
        return kind, rfc3339(now)
    if kind == "old":
        return kind, "2001-01-01T00:00:00Z"
    if kind == "future":
        ahead = draw(st.sampled_from([STALENESS + 86400, 200 * 365 * 86400]))
        return kind, rfc3339(now + ahead, millis=False)
    if kind == "shifted":
        return kind, rfc3339(now, millis=False).replace("Z", draw(st.sampled_from(["+02:00", "", "ZZ", "z"])))
    return kind, draw(values())


def test_node_keys_take_any_value(core: Core, ledger: Ledger) -> None:
    """A node with a random management label, GPU report, report time and topology label: the node's GPUs
    are usable exactly when all is valid, a problem names the annotation, and GPU pods still get placed."""
    managed_values = st.sampled_from(["true", "true", "true", "false", "True", "yes", "", "1"])
    cases = st.tuples(managed_values, gpu_reports(), report_times(), values())

    def body(case: tuple[str, str, tuple[str, str], str]) -> None:
        managed, report, (time_kind, updated), zone = case
        report_valid = _report_valid_text(report)
        ledger.record(MANAGED_LABEL, managed, "valid" if managed in ("true", "false") else "invalid")
        ledger.record(GPUS_ANNOTATION, report, "valid" if report_valid else "invalid")
        ledger.record(UPDATED_ANNOTATION, updated, "valid" if time_kind in ("fresh", "millis") else time_kind)
        ledger.record(ZONE, zone)
        node = make_node("fuzz-node", labels={MANAGED_LABEL: managed, ZONE: zone},
                         annotations={GPUS_ANNOTATION: report, UPDATED_ANNOTATION: updated})
        cache = core.cache
        cache.set_node(NodeRecord.from_api(node))
        try:
            row = cache.row_of("fuzz-node")
            state = cache.gpus.nodes.get(row)
            if managed != "true":
                assert state is None
            else:
                assert state is not None
                note(f"problem: {state.problem!r}")
                if not report_valid:
                    assert state.problem, "a malformed report was taken"
                    assert GPUS_ANNOTATION in state.problem, state.problem
                elif time_kind in ("fresh", "millis"):
                    assert not state.problem, state.problem
                elif state.problem:
                    assert UPDATED_ANNOTATION in state.problem, state.problem
                else:  # a time it took must be a sane one: not in the future past the staleness bound
                    assert state.updated is not None and state.updated <= time.time() + STALENESS, updated
            asks = ({GPU_COUNT_ANNOTATION: "1"}, {GPU_MEMORY_ANNOTATION: "1Gi"},
                    {GPU_FRACTION_ANNOTATION: "0.5"})
            for annotations in (*asks, {}):
                outcome = core.attempt(fuzz_pod({}, annotations))
                assert outcome.result == "scheduled", outcome.message
                if outcome.node == "fuzz-node" and annotations:
                    assert state is not None and not state.problem
                    assert set(outcome.details["gpus"]) <= {d.index for d in state.devices if not d.error}
        finally:
            cache.remove_node("fuzz-node")

    run_fuzz(ledger, 150, cases, body)


def _report_valid_text(text: str) -> bool:
    try:
        items = json.loads(text, parse_constant=_no_constants)
    except ValueError:
        return False
    return report_is_valid(items)


def _no_constants(name: str) -> None:
    raise ValueError(f"not JSON: {name}")


@st.composite
def podgroup_specs(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, Any] | None]:
    spec: dict[str, Any] = {"minMember": 1}
    for name in ("minMember", "scheduleTimeoutSeconds", "minResources"):
        kind = draw(st.sampled_from(["keep", "valid", "any", "drop"]))
        if kind == "drop":
            spec.pop(name, None)
        elif kind == "any":
            odd = st.sampled_from([math.nan, math.inf, -math.inf, 2**31, -5, 0, 1.5, True])
            spec[name] = draw(JSON_VALUES | odd)
        elif kind == "valid":
            spec[name] = {
                "minMember": draw(st.integers(1, 1)),
                "scheduleTimeoutSeconds": draw(st.integers(1, 3600)),
                "minResources": {"cpu": draw(st.sampled_from(["100m", "1", 2])), "memory": "1Gi"},
            }[name]
    same_domain = st.fixed_dictionaries({SAME_DOMAIN_ANNOTATION: values() | st.just("required")})
    annotations = draw(st.none() | same_domain)
    return spec, annotations


def podgroup_problem(spec: dict[str, Any], annotations: dict[str, Any] | None) -> tuple[str, int]:
    """The oracle for a PodGroup: the first field the CRD (deploy/crds) and the docs refuse, and the
    effective minMember."""

    def whole(value: object) -> bool:
        return isinstance(value, int) and not isinstance(value, bool)

    minimum = spec.get("minMember")
    if minimum is not None and not (whole(minimum) and -(2**31) <= minimum < 2**31):
        return "minMember", 1
    timeout = spec.get("scheduleTimeoutSeconds")
    if timeout is not None and not (
        (whole(timeout) or isinstance(timeout, float)) and not isinstance(timeout, bool)
        and math.isfinite(timeout) and 0 <= timeout < 2**31  # 0: the default, as when not set
    ):
        return "scheduleTimeoutSeconds", 1
    resources = spec.get("minResources")
    if resources is not None and not (
        isinstance(resources, dict)
        and all(
            (isinstance(v, str) and quantity_units(v) is not None) or (whole(v)) or
            (isinstance(v, float) and math.isfinite(v))
            for v in resources.values()
        )
    ):
        return "minResources", 1
    same = (annotations or {}).get(SAME_DOMAIN_ANNOTATION)
    if same is not None and same != "required":
        return SAME_DOMAIN_ANNOTATION, 1
    return "", max(1, minimum if isinstance(minimum, int) else 1)


def test_podgroup_takes_any_spec_and_annotation(core: Core, ledger: Ledger) -> None:
    def body(case: tuple[dict[str, Any], dict[str, Any] | None]) -> None:
        spec, annotations = case
        bad, minimum = podgroup_problem(spec, annotations)
        for name, value in spec.items():
            ledger.record(f"spec.{name}", value, "invalid" if name == bad else "valid")
        if annotations is not None:
            ledger.record(SAME_DOMAIN_ANNOTATION, annotations[SAME_DOMAIN_ANNOTATION],
                          "invalid" if bad == SAME_DOMAIN_ANNOTATION else "valid")
        core.gangs.set_podgroup(podgroup("fuzz-pg", spec, annotations))
        try:
            outcome = core.attempt(fuzz_pod({POD_GROUP_LABEL: "fuzz-pg"}, {}))
            note(f"oracle: bad={bad!r} minMember={minimum}; outcome {outcome}")
            if bad:
                assert outcome.result != "scheduled", f"{bad} is invalid, yet the gang was placed"
                assert bad in outcome.message, outcome.message
            elif minimum > 1:
                assert outcome.result == "waiting" and outcome.message
            else:
                assert outcome.result == "scheduled" or (
                    "minResources" in spec and outcome.message.strip()
                ), outcome.message
        finally:
            core.gangs.remove_podgroup(podgroup("fuzz-pg"))

    run_fuzz(ledger, 150, podgroup_specs(), body)


# ----------------------------------------------------------------------------------------- the real daemon
class LiveDaemon:
    """The daemon (`daemon.Scheduler`) against the embedded simulated API server, on an event loop of its
    own, so that examples of a synchronous hypothesis test can drive it one after another."""

    def __init__(self) -> None:
        self.runner = asyncio.Runner()
        self.log = io.BytesIO()
        self.read = 0
        self.runner.run(self._start())

    async def _start(self) -> None:
        self.sim = SimApiServer(kubelets=False, node_controller=False, bookmark_interval=0.2)
        url = await self.sim.start()
        store, registry = self.sim.store, self.sim.registry
        for node in base_nodes():
            store.create(registry.resolve("nodes"), node)
        for name in PODGROUPS:
            store.create(registry.resolve("podgroups"), podgroup(name))
        self.client = await KubeClient.connect(host=url)
        self.scheduler = Scheduler(CONFIG, self.client, JsonLogger(stream=self.log), serve_http=False, seed=1)
        self.task = asyncio.create_task(self.scheduler.run())
        await self._until(self.scheduler.ready.is_set, 20, "the scheduler ready")

    async def _until(self, predicate: Callable[[], Any], timeout: float, what: str) -> Any:
        deadline = time.monotonic() + timeout
        while not (value := predicate()):
            self.raise_errors()
            assert not self.task.done(), f"the daemon stopped: {self.task}"
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            await asyncio.sleep(0.002)
        return value

    def raise_errors(self) -> None:
        """Any error the daemon logged (an exception it caught, a handler that failed) fails the example."""
        lines = self.log.getvalue().splitlines()[self.read :]
        self.read += len(lines)
        errors = [line for line in (orjson.loads(raw) for raw in lines) if line.get("level") == "error"]
        assert not errors, f"the daemon logged errors: {errors[:3]}"

    def attempt(self, obj: dict[str, Any]) -> Outcome:
        return self.runner.run(self._attempt(obj))

    async def _attempt(self, obj: dict[str, Any]) -> Outcome:
        rt = self.sim.registry.resolve("pods")
        meta = obj["metadata"]
        meta.pop("uid")
        created = self.sim.create("pods", obj)
        uid = created["metadata"]["uid"]
        try:
            pod = await self._until(lambda: self._decided(meta["name"]), 10, f"a decision on {meta['name']}")
        finally:
            entry = self.sim.store.entry(rt, NAMESPACE, meta["name"])
            if entry is not None:
                self.sim.store.delete(rt, entry)
            await self._until(lambda: self.scheduler.cache.pod_state(uid) is None, 10, "the pod gone")
        if pod["spec"].get("nodeName"):
            return Outcome("scheduled", node=pod["spec"]["nodeName"])
        condition = next(c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled")
        return Outcome("unschedulable", condition.get("message") or "")

    def _decided(self, name: str) -> dict[str, Any] | None:
        pod = self.sim.store.get("pods", NAMESPACE, name)
        assert pod is not None
        if pod["spec"].get("nodeName"):
            return pod
        for condition in (pod.get("status") or {}).get("conditions") or ():
            if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
                return pod
        return None

    def close(self) -> None:
        async def stop() -> None:
            self.scheduler.stop()
            await asyncio.wait_for(self.task, 15)
            await self.client.close()
            await self.sim.stop()

        try:
            self.runner.run(stop())
        finally:
            self.runner.close()


@pytest.fixture(scope="module")
def daemon() -> Iterator[LiveDaemon]:
    live = LiveDaemon()
    yield live
    live.close()


def test_daemon_gives_every_bad_value_a_reason_naming_the_key(daemon: LiveDaemon, ledger: Ledger) -> None:
    """End to end: the reason reaches the pod's PodScheduled condition, and the daemon logs no error."""
    cases = st.tuples(st.sampled_from(POD_KEYS), values())

    def body(case: tuple[str, str]) -> None:
        key, value = case
        want = expect(key, value)
        ledger.record(key, value, want.verdict)
        labels, annotations = pod_for(key, value)
        check(daemon.attempt(fuzz_pod(labels, annotations)), key, value, want)
        daemon.raise_errors()

    explicit = tuple((key, value) for key in POD_KEYS for value in ("x" * 5000, HUGE, "90m"))
    run_fuzz(ledger, 100, cases, body, explicit=explicit)


def test_daemon_places_pods_with_only_valid_values(daemon: LiveDaemon, ledger: Ledger) -> None:
    def body(meta: tuple[dict[str, str], dict[str, str]]) -> None:
        labels, annotations = meta
        for key, value in {**labels, **annotations}.items():
            ledger.record(key, value, "valid")
        outcome = daemon.attempt(fuzz_pod(labels, annotations))
        assert outcome.result == "scheduled", outcome.message
        daemon.raise_errors()

    run_fuzz(ledger, 40, valid_values(), body)


# ----------------------------------------------------------------------------------------- watch lines
def watch_event(kind: str = "ADDED") -> dict[str, Any]:
    """A pod event as the API server sends it (the same bytes every time: strategies draw from its length)."""
    pod = make_pod("watched", namespace=NAMESPACE, labels={QUEUE_LABEL: "prod"},
                   annotations={GPU_COUNT_ANNOTATION: "1"})
    pod["metadata"]["uid"] = "uid-watched"
    return {"type": kind, "object": pod}


@st.composite
def watch_lines(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["bytes", "json", "mutated", "truncated", "error", "nested", "numbers"]))
    if kind == "bytes":
        return draw(st.binary(max_size=200))
    if kind == "json":
        return orjson.dumps(draw(JSON_VALUES.filter(lambda v: not _has_big_int(v))))
    event_type = draw(st.sampled_from(["ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR", ""]))
    line = orjson.dumps(watch_event(event_type))
    if kind == "mutated":
        position = draw(st.integers(0, len(line) - 1))
        return line[:position] + draw(st.binary(min_size=1, max_size=4)) + line[position + 1 :]
    if kind == "truncated":
        return line[: draw(st.integers(0, len(line) - 1))]
    if kind == "error":
        scalar = JSON_SCALARS.filter(lambda v: not _has_big_int(v))
        status = draw(st.fixed_dictionaries({}, optional={"code": scalar, "message": scalar}))
        return orjson.dumps({"type": "ERROR", "object": status})
    if kind == "nested":
        depth = draw(st.integers(1, 3000))
        return b'{"type": "ADDED", "object": ' + b"[" * depth + b"]" * depth + b"}"
    return line.replace(b'"ADDED"', draw(st.sampled_from([b"1e999", b"NaN", b"18446744073709551616", b"-0"])))


def _has_big_int(value: object) -> bool:
    if isinstance(value, int) and not isinstance(value, bool):
        return not -(2**63) <= value < 2**64
    if isinstance(value, list):
        return any(_has_big_int(v) for v in value)
    if isinstance(value, dict):
        return any(_has_big_int(v) for v in value.values())
    return False


def test_watch_decoder_raises_only_watch_errors(ledger: Ledger) -> None:
    def body(line: bytes) -> None:
        try:
            event = _decode(line, "pods")
        except (WatchBroken, WatchExpired) as exc:
            ledger.record("watch line", line, "refused")
            assert "pods" in str(exc)
            return
        ledger.record("watch line", line, "valid")
        assert isinstance(event, dict) and isinstance(event.get("object"), dict)
        if event.get("type") in ("ADDED", "MODIFIED", "DELETED") and line == orjson.dumps(event):
            PodRecord.from_api(event["object"])

    run_fuzz(ledger, 200, watch_lines(), body)


# ----------------------------------------------------------------------------------------- the config file
DEFAULT_YAML = Path(ai_scheduler.__file__).parent / "config" / "default.yaml"
YAML_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**80), max_value=2**80), st.floats(),
    st.text(max_size=12), st.sampled_from(["", "10Gi", "1e999", "ai-scheduler", "NodeName", "x" * 300]),
)
YAML_VALUES = st.recursive(
    YAML_SCALARS,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(
            st.one_of(st.text(max_size=10), st.integers(), st.booleans(), st.none()), children, max_size=4
        ),
    ),
    max_leaves=20,
)


def _child(path: str, key: object) -> str:
    """A key path as the loader's messages spell it: `profiles[0].scores[1].weight`, `a['nvidia.com/gpu']`."""
    if isinstance(key, int) and not isinstance(key, bool):
        return f"{path}[{key}]"
    if isinstance(key, str) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
        return f"{path}.{key}" if path else key
    return f"{path}[{key!r}]"


def _paths(data: Any, path: str = "") -> Iterator[tuple[str, tuple[Any, ...]]]:
    yield path, ()
    items = data.items() if isinstance(data, dict) else enumerate(data) if isinstance(data, list) else ()
    for key, value in items:
        for sub, steps in _paths(value, _child(path, key)):
            yield sub, (key, *steps)


@st.composite
def default_mutations(draw: st.DrawFn) -> tuple[str, Any, str]:
    """default.yaml with the value at one key path replaced by a random value of any type."""
    data = yaml.safe_load(DEFAULT_YAML.read_text())
    paths = [(p, s) for p, s in _paths(data) if s]
    path, steps = draw(st.sampled_from(paths))
    target = data
    for step in steps[:-1]:
        target = target[step]
    replacement = draw(YAML_VALUES)
    target[steps[-1]] = replacement
    return path, replacement, yaml.safe_dump(data, allow_unicode=True)


def load(tmp: Path, text: str | bytes) -> Config | ConfigError:
    target = tmp / "config.yaml"
    if isinstance(text, str):
        target.write_text(text, encoding="utf-8")
    else:
        target.write_bytes(text)
    try:
        return load_config(target)
    except ConfigError as exc:
        assert str(exc).strip() and "\n" not in exc.reason, f"a message of several lines: {exc}"
        return exc


def test_config_loader_takes_random_documents(tmp_path: Path, ledger: Ledger) -> None:
    def body(doc: Any) -> None:
        text = yaml.safe_dump(doc, allow_unicode=True)
        result = load(tmp_path, text)
        verdict = "valid" if isinstance(result, Config) else "refused"
        ledger.record(f"document ({type(doc).__name__})", doc, verdict)
        try:
            direct: Config | ConfigError = parse_config(doc)
        except ConfigError as exc:
            direct = exc
        assert type(direct) is type(result)

    run_fuzz(ledger, 150, st.one_of(YAML_VALUES, st.dictionaries(st.sampled_from([
        "schedulerName", "profiles", "scheduling", "gpu", "server", "queues", "groups", "users", "namespaces",
        "policies", "activePolicy"]), YAML_VALUES, max_size=4)), body)


def test_config_loader_names_the_key_of_a_bad_value(tmp_path: Path, ledger: Ledger) -> None:
    def body(case: tuple[str, Any, str]) -> None:
        path, replacement, text = case
        result = load(tmp_path, text)
        ledger.record(path, replacement, "valid" if isinstance(result, Config) else "invalid")
        if isinstance(result, ConfigError):
            key = result.key
            note(f"error: {result}")
            related = key == path or key.startswith((path + ".", path + "[")) or path.startswith(key)
            assert key and related, f"changed {path}, the error names {key!r}: {result}"

    run_fuzz(ledger, 200, default_mutations(), body)


@st.composite
def raw_documents(draw: st.DrawFn) -> bytes:
    """Text that is mostly not a config: mutated default.yaml, deep nesting, random text and bytes."""
    kind = draw(st.sampled_from(["mutated", "nested", "text", "bytes", "anchors"]))
    if kind == "mutated":
        text = DEFAULT_YAML.read_text()
        for _ in range(draw(st.integers(1, 5))):
            position = draw(st.integers(0, len(text)))
            noise = draw(st.text(alphabet=":-[]{}&*!|>'\"#%@`\t\n ,?", max_size=3))
            text = text[:position] + noise + text[position + 1 :]
        return text.encode()
    if kind == "nested":
        depth = draw(st.integers(1, 3000))
        opener = draw(st.sampled_from(["[", "{a: ", "- "]))
        if opener == "- ":
            return "".join(" " * i + "- \n" for i in range(min(depth, 400))).encode()
        closer = "]" if opener == "[" else "}"
        return ("profiles: " + opener * depth + closer * depth).encode()
    if kind == "anchors":
        return b"a: &a [1, 2]\nb: &b [*a, *a, *a]\nc: [*b, *b, *b]\nschedulerName: *a\n"
    if kind == "text":
        return draw(st.text(max_size=200)).encode("utf-8", "surrogatepass")
    return draw(st.binary(max_size=200))


def test_config_loader_takes_any_bytes(tmp_path: Path, ledger: Ledger) -> None:
    def body(raw: bytes) -> None:
        result = load(tmp_path, raw)
        ledger.record("config file", raw, "valid" if isinstance(result, Config) else "refused")

    # Issue 12, point 3: a file nested 2,000 levels deep crashed start-up with a RecursionError, and one of
    # 5,000 "[" stopped the config watcher. Both must be refused like any other invalid file.
    deep = ("profiles: " + "[" * 2000 + "]" * 2000).encode()
    run_fuzz(ledger, 150, raw_documents(), body, explicit=(deep, b"[" * 5000))
