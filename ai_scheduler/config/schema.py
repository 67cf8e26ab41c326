"""The config file's schema: immutable dataclasses and the one function that builds them.

Validation is strict on purpose: an unknown key, a wrong type or an out-of-range
value is refused with the key's full path (``profiles[0].scores[1].weight``), so
that a typo in a ConfigMap never turns silently into a default. A running
scheduler keeps its last good config when a reload fails, so refusing is cheap.

The result is deeply immutable (tuples and read-only mappings all the way down)
so that one Config object can be shared by every loop without copying.
"""

from __future__ import annotations

import difflib
import ipaddress
import math
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, NoReturn, TypeVar

from ai_scheduler.quantity import MILLI_RESOURCES, format_units, parse_quantity, to_units

DEFAULT_SCHEDULER_NAME = "ai-scheduler"

FILTER_PLUGINS: tuple[str, ...] = (
    "NodeUnschedulable",
    "NodeName",
    "TaintToleration",
    "NodeReady",
    "NodeAffinity",
    "NodePorts",
    "NodeResourcesFit",
    "GPU",
    "VolumeRestrictions",
    "NodeVolumeLimits",
    "VolumeBinding",
    "VolumeZone",
    "PodTopologySpread",
    "InterPodAffinity",
    "DynamicResources",
)
SCORE_PLUGINS: tuple[str, ...] = (
    "NodeResourcesLeastAllocated",
    "NodeResourcesMostAllocated",
    "NodeResourcesBalancedAllocation",
    "NodeResourcesGPUAware",
    "NodeAffinity",
    "TaintToleration",
    "GPUBinpack",
    "GPUSpread",
    "GPUAvoidance",
    "GPUFragmentation",
    "GPUFragmentationCoupled",
    "FGDScore",
    "PodTopologySpread",
    "InterPodAffinity",
    "DynamicResources",
)
RESOURCE_SCORERS: frozenset[str] = frozenset(
    {
        "NodeResourcesLeastAllocated",
        "NodeResourcesMostAllocated",
        "NodeResourcesBalancedAllocation",
        "NodeResourcesGPUAware",
    }
)
# How a cycle chooses among nodes of the best score (scheduling.tieBreak).
TIE_BREAKS: tuple[str, ...] = ("random", "nodeOrder")
# Whether a pod may pass one ahead of it in its queue that does not fit (queues[].queueingStrategy, Kueue's).
QUEUEING_STRATEGIES: tuple[str, ...] = ("BestEffortFIFO", "StrictFIFO")
# The factors a priority policy weighs; the scheduler computes each one per pending pod.
POLICY_FACTORS: tuple[str, ...] = (
    "userLevel",
    "groupLevel",
    "taskPriority",
    "waitingTime",
    "jobSize",
    "estimatedRuntime",
    "fairShare",
    "queueLevel",
)
DEFAULT_POLICY_NAME = "default"
# Managed GPU memory is counted in bytes, as memory is; quota maps name it with this resource.
_GPU_MEMORY_RESOURCE = "ai-scheduler.io/gpu-memory"
_MAX_QUANTITY = 2**63 - 1  # Kubernetes quantities are int64 underneath

_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# A Kubernetes resource name: an optional DNS subdomain prefix and a qualified name ("nvidia.com/gpu").
_RESOURCE_NAME = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
_HOSTNAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?(\.[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?)*$")
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class ConfigError(ValueError):
    """A config that cannot be used, with the key path and the reason, for the operator to fix."""

    def __init__(self, key: str, reason: str, source: str = "<config>") -> None:
        super().__init__(key, reason, source)  # keeps the error picklable
        self.key = key
        self.reason = reason
        self.source = source

    def __str__(self) -> str:
        return f"{self.source}: {self.key}: {self.reason}" if self.key else f"{self.source}: {self.reason}"


_V_co = TypeVar("_V_co", covariant=True)


class FrozenMap(Mapping[str, _V_co]):
    """A read-only, hashable mapping, so that frozen dataclasses holding one stay hashable."""

    __slots__ = ("_data", "_hash")

    def __init__(self, data: Mapping[str, _V_co] | None = None) -> None:
        self._data: dict[str, _V_co] = dict(data or {})
        self._hash: int | None = None

    def __getitem__(self, key: str) -> _V_co:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(frozenset(self._data.items()))
        return self._hash

    def __repr__(self) -> str:
        return f"FrozenMap({self._data!r})"


DEFAULT_SCORE_RESOURCES = FrozenMap({"cpu": 1, "memory": 1, "nvidia.com/gpu": 1})
# NodeResourcesBalancedAllocationArgs' default in kube-scheduler: cpu and memory.
DEFAULT_BALANCED_RESOURCES = FrozenMap({"cpu": 1, "memory": 1})


@dataclass(frozen=True, slots=True)
class ScoreSpec:
    """One Score plugin of a profile; ``resources`` is empty for the non-resource scorers."""

    name: str
    weight: int = 1
    resources: Mapping[str, int] = field(default_factory=FrozenMap)


DEFAULT_SCORES: tuple[ScoreSpec, ...] = (
    ScoreSpec("NodeResourcesGPUAware", 1, DEFAULT_SCORE_RESOURCES),
    ScoreSpec("NodeAffinity", 2),
    ScoreSpec("TaintToleration", 3),
    ScoreSpec("GPUBinpack", 3),
    ScoreSpec("GPUAvoidance", 2),
    ScoreSpec("PodTopologySpread", 2),
    ScoreSpec("InterPodAffinity", 2),
    ScoreSpec("DynamicResources", 2),
)


@dataclass(frozen=True, slots=True)
class Profile:
    """The plugins that handle pods whose ``spec.schedulerName`` is ``scheduler_name``."""

    scheduler_name: str
    filters: tuple[str, ...] = FILTER_PLUGINS
    scores: tuple[ScoreSpec, ...] = DEFAULT_SCORES


@dataclass(frozen=True, slots=True)
class SchedulingSettings:
    """Process-level knobs of the scheduling loop and the binder."""

    bind_concurrency: int = 64
    assume_timeout_seconds: float = 30.0
    initial_backoff_seconds: float = 1.0
    max_backoff_seconds: float = 10.0
    unschedulable_flush_seconds: float = 300.0
    event_repeat_seconds: float = 300.0
    percentage_of_nodes_to_score: int = 0  # 0: adaptive, as kube-scheduler's default
    tie_break: str = "random"  # among nodes of the best score: "random" or "nodeOrder"
    gang_schedule_timeout_seconds: float = 60.0
    gang_topology_labels: tuple[str, ...] = ("topology.kubernetes.io/zone",)
    backfill: bool = True
    priority_refresh_seconds: float = 5.0
    reservation: bool = True
    # A reservation whose due time is unknown (it waits for pods with no known run time) is made only for
    # a unit that has waited this long.
    reservation_min_wait_seconds: float = 300.0
    # Queueing hints and the equivalence of identical pods (scheduler/core.py): a pod that did not fit is
    # retried when room is freed only if it may fit where it was freed, and a pod alike to one that just
    # failed, with nothing freed since, repeats its failure without the filters. The same decisions as
    # retrying every pod; no pod gets a hint while reservations are on.
    queueing_hints: bool = False
    api_request_timeout_seconds: float = 10.0
    watch_idle_seconds: float = 90.0
    api_unreachable_restart_seconds: float = 120.0


@dataclass(frozen=True, slots=True)
class PredictionSettings:
    """Run-time prediction (ai_scheduler/prediction): ``model`` is a file `ai-scheduler learn` wrote
    (None: no model); with ``learn_online`` (on by default when there is a model) completions update
    per-user corrections, and without a model the users' own past run times predict their next ones.
    A pod's own ``ai-scheduler.io/estimated-runtime`` always comes first."""

    model: str | None = None
    learn_online: bool | None = None  # None: on with a model, off without
    forecast_seconds: float = 60.0  # how often the daemon forecasts the waiting pods' starts; 0: never

    @property
    def enabled(self) -> bool:
        return self.model is not None or bool(self.learn_online)


@dataclass(frozen=True, slots=True)
class GpuSettings:
    """How old a node agent's GPU report may be before its managed GPUs stop taking new pods."""

    staleness_seconds: float = 120.0


@dataclass(frozen=True, slots=True)
class ServerSettings:
    """Where /healthz, /readyz and /metrics listen, and the visibility API (visibility/server.py):
    HTTPS on ``visibility_port`` when ``visibility_enabled``, behind the API server's aggregation layer,
    with the serving certificate from ``visibility_cert_file``/``visibility_key_file`` ("": self-signed,
    made at start)."""

    port: int = 10251
    bind_address: str = "0.0.0.0"
    visibility_enabled: bool = False
    visibility_port: int = 8443
    visibility_cert_file: str = ""
    visibility_key_file: str = ""


@dataclass(frozen=True, slots=True)
class LeaderElectionSettings:
    """Leader election between replicas on a coordination.k8s.io Lease (daemon/leader.py), with
    kube-scheduler's timings. ``lease_namespace`` "" is the namespace the daemon runs in (POD_NAMESPACE,
    from the downward API), else kube-system. Only `ai-scheduler run` elects; a Scheduler built without
    these settings (tests, the demo) leads at once."""

    enabled: bool = True
    lease_name: str = "ai-scheduler"
    lease_namespace: str = ""
    lease_duration_seconds: float = 12.0
    renew_deadline_seconds: float = 8.0
    retry_period_seconds: float = 2.0


@dataclass(frozen=True, slots=True)
class QueueSpec:
    """A queue pods join with the label ``ai-scheduler.io/queue``.

    A lower ``level`` is always served first; queues of one level share by ``weight``.
    ``quota`` caps what all placed pods of the queue request together (resource -> units).
    ``promote_after_seconds`` bounds starvation across levels: a pod of this queue that has waited
    that long (since it entered the queue, the clock of the ``waitingTime`` factor) is ordered as if
    its queue had the top level of all queues; None (the default) never promotes.
    ``queueing_strategy`` is Kueue's: BestEffortFIFO (the default) lets a pod behind one that does
    not fit start if it fits, as kube-scheduler does; StrictFIFO lets no pod of the queue start
    while one ahead of it in the queue's order waits (the papers' FIFO, no overtaking).
    """

    name: str
    level: int = 0
    weight: float = 1.0
    quota: Mapping[str, int] = field(default_factory=FrozenMap)
    promote_after_seconds: float | None = None
    queueing_strategy: str = "BestEffortFIFO"


@dataclass(frozen=True, slots=True)
class GroupSpec:
    """A group of users: a higher ``level`` is more important; ``share`` is its fair-share weight.

    ``min`` is what the group is guaranteed, ``max`` what it may use at most (resource -> units).
    """

    name: str
    level: int = 0
    share: float = 1.0
    min: Mapping[str, int] = field(default_factory=FrozenMap)
    max: Mapping[str, int] = field(default_factory=FrozenMap)


@dataclass(frozen=True, slots=True)
class UserSpec:
    """A user, member of exactly one group; ``max`` caps what the user's placed pods request."""

    name: str
    group: str
    level: int = 0
    max: Mapping[str, int] = field(default_factory=FrozenMap)


@dataclass(frozen=True, slots=True)
class NamespaceSpec:
    """Who owns the pods of a namespace, and the queue of those without a queue label.

    With ``trust_user_label`` the pod label ``ai-scheduler.io/user`` names the user instead.
    """

    name: str
    user: str
    default_queue: str | None = None
    trust_user_label: bool = False


@dataclass(frozen=True, slots=True)
class PolicySpec:
    """A priority formula: the weighted sum of named factors (``POLICY_FACTORS``).

    A negative weight prefers the smaller value. Waiting time counts up to
    ``max_wait_seconds``; past usage decays with ``fair_share_half_life_seconds``.
    """

    name: str
    weights: Mapping[str, float]
    max_wait_seconds: float = 3600.0
    fair_share_half_life_seconds: float = 3600.0


# spec.priority alone: with ties broken by priority and then arrival, this is kube-scheduler's order.
DEFAULT_POLICY = PolicySpec(DEFAULT_POLICY_NAME, FrozenMap({"taskPriority": 1.0}))
DEFAULT_POLICIES: Mapping[str, PolicySpec] = FrozenMap({DEFAULT_POLICY_NAME: DEFAULT_POLICY})


@dataclass(frozen=True)
class Config:
    """The whole config file, validated; build it with ``parse_config``.

    ``parse_config`` checks that the tenancy sections refer to each other
    consistently (a user's group exists, and so on); a Config built by hand is
    taken as given.
    """

    scheduler_name: str
    profiles: tuple[Profile, ...]
    scheduling: SchedulingSettings = SchedulingSettings()
    gpu: GpuSettings = GpuSettings()
    prediction: PredictionSettings = PredictionSettings()
    server: ServerSettings = ServerSettings()
    leader_election: LeaderElectionSettings = LeaderElectionSettings()
    queues: tuple[QueueSpec, ...] = ()
    groups: Mapping[str, GroupSpec] = field(default_factory=FrozenMap)
    users: Mapping[str, UserSpec] = field(default_factory=FrozenMap)
    namespaces: Mapping[str, NamespaceSpec] = field(default_factory=FrozenMap)
    policies: Mapping[str, PolicySpec] = DEFAULT_POLICIES
    active_policy: str = DEFAULT_POLICY_NAME

    @property
    def policy(self) -> PolicySpec:
        """The active priority policy."""
        return self.policies[self.active_policy]

    def queue(self, name: str) -> QueueSpec | None:
        """The queue of that name; None when no such queue is configured."""
        return self._queues_by_name.get(name)

    @cached_property
    def _queues_by_name(self) -> Mapping[str, QueueSpec]:
        return FrozenMap({q.name: q for q in self.queues})

    def profile_for(self, scheduler_name: str) -> Profile | None:
        """The profile for a pod's ``spec.schedulerName``; None means the pod is not ours."""
        return self._profiles_by_name.get(scheduler_name)

    @cached_property
    def scheduler_names(self) -> frozenset[str]:
        """Every ``spec.schedulerName`` this scheduler binds; the informers filter pods by it."""
        return frozenset(self._profiles_by_name)

    @cached_property
    def _profiles_by_name(self) -> Mapping[str, Profile]:
        return FrozenMap({p.scheduler_name: p for p in self.profiles})


# --- parsing ---------------------------------------------------------------------------------------


class _Invalid(Exception):
    """Raised inside the parser; parse_config adds the source and turns it into a ConfigError."""

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(key, reason)
        self.key = key
        self.reason = reason


def _fail(key: str, reason: str) -> NoReturn:
    raise _Invalid(key, reason)


def _child(path: str, key: str) -> str:
    if not _IDENTIFIER.match(key):
        return f"{path}[{key!r}]"
    return f"{path}.{key}" if path else key


def _show(value: object) -> str:
    """A value as the operator wrote it in YAML, for 'got ...' in messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    return repr(value)


def _whole(value: float) -> float | int:
    """A default as default.yaml spells it: 10, not 10.0."""
    return int(value) if value.is_integer() else value


def _mapping(value: object, path: str) -> Mapping[Any, Any]:
    if not isinstance(value, Mapping):
        _fail(path, f"must be a mapping, got {_show(value)}")
    return value


def _list(value: object, path: str) -> list[Any]:
    if not isinstance(value, list):
        _fail(path, f"must be a list, got {_show(value)}")
    return value


def _check_keys(data: Mapping[Any, Any], allowed: tuple[str, ...], path: str) -> None:
    for key in data:
        if key not in allowed:
            hint = difflib.get_close_matches(str(key), allowed, n=1)
            suggestion = f" (did you mean {hint[0]!r}?)" if hint else ""
            _fail(path, f"unknown key {key!r}{suggestion}; expected one of {', '.join(allowed)}")


def _string(value: object, path: str) -> str:
    if not isinstance(value, str):
        _fail(path, f"must be a string, got {_show(value)}")
    return value


def _dns_subdomain(value: object, path: str) -> str:
    text = _string(value, path)
    if len(text) > 253 or not _DNS1123_SUBDOMAIN.match(text):
        _fail(path, "must be a DNS-1123 subdomain (lowercase letters, digits, '-' and '.', starting and "
                    f"ending with a letter or digit, at most 253 characters), got {text!r}")
    return text


def _integer(value: object, path: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        _fail(path, f"must be an integer between {low} and {high}, got {_show(value)}")
    return value


def _real(value: object, path: str) -> float:
    """A finite int or float, of any sign; booleans are not numbers."""
    if not isinstance(value, bool) and isinstance(value, int | float):
        try:
            number = float(value)
        except OverflowError:  # an int beyond any float
            number = math.inf
        if math.isfinite(number):
            return number
    _fail(path, f"must be a number, got {_show(value)}")


def _number(value: object, path: str, *, minimum: float, inclusive: bool) -> float:
    """A finite int or float above ``minimum`` (or equal to it when ``inclusive``)."""
    number = _real(value, path)
    if number < minimum or (number == minimum and not inclusive):
        _fail(path, f"must be {'>=' if inclusive else '>'} {_show(minimum)}, got {_show(value)}")
    return number


def _positive(value: object, path: str) -> float:
    return _number(value, path, minimum=0, inclusive=False)


def _level(value: object, path: str) -> int:
    return _integer(value, path, 0, 100)


def _boolean(value: object, path: str) -> bool:
    if not isinstance(value, bool):
        _fail(path, f"must be true or false, got {_show(value)}")
    return value


_Parse = Callable[[Any, str], Any]


def _section(data: Mapping[Any, Any], key: str, parse: _Parse, default: Any, path: str = "") -> Any:
    """Sections absent or null take their default: a section whose children are all commented out is null."""
    value = data.get(key)
    return default if value is None else parse(value, _child(path, key))


def _scalar(data: Mapping[Any, Any], key: str, default: Any, parse: _Parse, path: str) -> Any:
    """Scalars may be absent, but not null: ``port:`` with no value is an unfinished edit, not a default."""
    return parse(data[key], _child(path, key)) if key in data else default


_SCORE_KEYS = ("name", "weight", "resources")
_PROFILE_KEYS = ("schedulerName", "filters", "scores")
_SCHEDULING_KEYS = (
    "bindConcurrency",
    "assumeTimeoutSeconds",
    "initialBackoffSeconds",
    "maxBackoffSeconds",
    "unschedulableFlushSeconds",
    "eventRepeatSeconds",
    "percentageOfNodesToScore",
    "tieBreak",
    "gangScheduleTimeoutSeconds",
    "gangTopologyLabels",
    "backfill",
    "priorityRefreshSeconds",
    "reservation",
    "reservationMinWaitSeconds",
    "queueingHints",
    "apiRequestTimeoutSeconds",
    "watchIdleSeconds",
    "apiUnreachableRestartSeconds",
)
_PREDICTION_KEYS = ("model", "learnOnline", "forecastSeconds")
_LEADER_ELECTION_KEYS = (
    "enabled",
    "leaseName",
    "leaseNamespace",
    "leaseDurationSeconds",
    "renewDeadlineSeconds",
    "retryPeriodSeconds",
)
_QUEUE_KEYS = ("name", "level", "weight", "quota", "promoteAfterSeconds", "queueingStrategy")
_GROUP_KEYS = ("level", "share", "min", "max")
_USER_KEYS = ("group", "level", "max")
_NAMESPACE_KEYS = ("user", "defaultQueue", "trustUserLabel")
_POLICY_KEYS = ("weights", "maxWaitSeconds", "fairShareHalfLifeSeconds")
_TOP_LEVEL_KEYS = (
    "schedulerName",
    "profiles",
    "scheduling",
    "gpu",
    "prediction",
    "server",
    "leaderElection",
    "queues",
    "groups",
    "users",
    "namespaces",
    "policies",
    "activePolicy",
)


def _parse_resources(value: object, path: str) -> FrozenMap[int]:
    data = _mapping(value, path)
    if not data:
        _fail(path, "must name at least one resource")
    result = {}
    for name, weight in data.items():
        if not isinstance(name, str) or not _RESOURCE_NAME.match(name):
            _fail(path, "resource names must be Kubernetes resource names such as 'cpu' or "
                        f"'nvidia.com/gpu', got {_show(name)}")
        result[name] = _integer(weight, _child(path, name), 1, 100)
    return FrozenMap(result)


def _parse_score(value: object, path: str) -> ScoreSpec:
    data = _mapping(value, path)
    _check_keys(data, _SCORE_KEYS, path)
    if data.get("name") is None:
        _fail(_child(path, "name"), f"is required; one of {', '.join(SCORE_PLUGINS)}")
    name = _string(data["name"], _child(path, "name"))
    if name not in SCORE_PLUGINS:
        _fail(_child(path, "name"), f"unknown score plugin {name!r}; known: {', '.join(SCORE_PLUGINS)}")
    weight = _scalar(data, "weight", 1, lambda v, p: _integer(v, p, 0, 100), path)
    if name in RESOURCE_SCORERS:
        balanced = name == "NodeResourcesBalancedAllocation"
        default = DEFAULT_BALANCED_RESOURCES if balanced else DEFAULT_SCORE_RESOURCES
        resources = _section(data, "resources", _parse_resources, default, path)
    elif "resources" in data:
        _fail(_child(path, "resources"), f"only {', '.join(sorted(RESOURCE_SCORERS))} take resources")
    else:
        resources = FrozenMap()
    return ScoreSpec(name, weight, resources)


def _parse_filters(value: object, path: str) -> tuple[str, ...]:
    filters: list[str] = []
    for i, item in enumerate(_list(value, path)):
        item_path = f"{path}[{i}]"
        name = _string(item, item_path)
        if name not in FILTER_PLUGINS:
            _fail(item_path, f"unknown filter plugin {name!r}; known: {', '.join(FILTER_PLUGINS)}")
        if name in filters:
            _fail(item_path, f"duplicate filter plugin {name!r} (also {path}[{filters.index(name)}])")
        filters.append(name)
    return tuple(filters)


def _named_list(value: object, path: str, parse: _Parse, noun: str) -> tuple[Any, ...]:
    """A list of items parsed by `parse`, whose `name`s must be unique."""
    items: list[Any] = []
    for i, raw in enumerate(_list(value, path)):
        item = parse(raw, f"{path}[{i}]")
        earlier = [j for j, other in enumerate(items) if other.name == item.name]
        if earlier:
            _fail(f"{path}[{i}].name", f"duplicate {noun} {item.name!r} (also {path}[{earlier[0]}])")
        items.append(item)
    return tuple(items)


def _parse_scores(value: object, path: str) -> tuple[ScoreSpec, ...]:
    return _named_list(value, path, _parse_score, "score plugin")


def _parse_profile(value: object, path: str, default_name: str | None) -> Profile:
    data = _mapping(value, path)
    _check_keys(data, _PROFILE_KEYS, path)
    if "schedulerName" in data:
        name = _dns_subdomain(data["schedulerName"], _child(path, "schedulerName"))
    elif default_name is not None:
        name = default_name
    else:
        _fail(_child(path, "schedulerName"), "is required for every profile but the first")
    filters = _section(data, "filters", _parse_filters, FILTER_PLUGINS, path)
    scores = _section(data, "scores", _parse_scores, DEFAULT_SCORES, path)
    return Profile(name, filters, scores)


def _parse_profiles(value: object, path: str, scheduler_name: str) -> tuple[Profile, ...]:
    items = _list(value, path)
    if not items:
        _fail(path, "must list at least one profile")
    profiles: list[Profile] = []
    for i, item in enumerate(items):
        profile = _parse_profile(item, f"{path}[{i}]", scheduler_name if i == 0 else None)
        earlier = [j for j, p in enumerate(profiles) if p.scheduler_name == profile.scheduler_name]
        if earlier:
            _fail(f"{path}[{i}].schedulerName",
                  f"duplicate scheduler name {profile.scheduler_name!r} (also {path}[{earlier[0]}])")
        profiles.append(profile)
    return tuple(profiles)


def _parse_scheduling(value: object, path: str) -> SchedulingSettings:
    data = _mapping(value, path)
    _check_keys(data, _SCHEDULING_KEYS, path)
    d = SchedulingSettings()

    def get(key: str, default: Any, parse: _Parse) -> Any:
        return _scalar(data, key, default, parse, path)

    settings = SchedulingSettings(
        bind_concurrency=get("bindConcurrency", d.bind_concurrency, lambda v, p: _integer(v, p, 1, 1024)),
        assume_timeout_seconds=get("assumeTimeoutSeconds", d.assume_timeout_seconds, _positive),
        initial_backoff_seconds=get("initialBackoffSeconds", d.initial_backoff_seconds, _positive),
        max_backoff_seconds=get("maxBackoffSeconds", d.max_backoff_seconds, _positive),
        unschedulable_flush_seconds=get("unschedulableFlushSeconds", d.unschedulable_flush_seconds,
                                        _positive),
        event_repeat_seconds=get("eventRepeatSeconds", d.event_repeat_seconds,
                                 lambda v, p: _number(v, p, minimum=0, inclusive=True)),
        percentage_of_nodes_to_score=get("percentageOfNodesToScore", d.percentage_of_nodes_to_score,
                                         lambda v, p: _integer(v, p, 0, 100)),
        tie_break=get("tieBreak", d.tie_break, _tie_break),
        gang_schedule_timeout_seconds=get("gangScheduleTimeoutSeconds", d.gang_schedule_timeout_seconds,
                                          _positive),
        gang_topology_labels=get("gangTopologyLabels", d.gang_topology_labels, _label_keys),
        backfill=get("backfill", d.backfill, _boolean),
        priority_refresh_seconds=get("priorityRefreshSeconds", d.priority_refresh_seconds, _positive),
        reservation=get("reservation", d.reservation, _boolean),
        reservation_min_wait_seconds=get("reservationMinWaitSeconds", d.reservation_min_wait_seconds,
                                         lambda v, p: _number(v, p, minimum=0, inclusive=True)),
        queueing_hints=get("queueingHints", d.queueing_hints, _boolean),
        api_request_timeout_seconds=get("apiRequestTimeoutSeconds", d.api_request_timeout_seconds, _positive),
        watch_idle_seconds=get("watchIdleSeconds", d.watch_idle_seconds, _positive),
        api_unreachable_restart_seconds=get("apiUnreachableRestartSeconds", d.api_unreachable_restart_seconds,
                                            _positive),
    )
    if settings.max_backoff_seconds < settings.initial_backoff_seconds:
        # Blame the key the operator wrote; when both are written, the maximum is the one to raise.
        initial = _show(data.get("initialBackoffSeconds", _whole(d.initial_backoff_seconds)))
        maximum = _show(data.get("maxBackoffSeconds", _whole(d.max_backoff_seconds)))
        initial_key, maximum_key = _child(path, "initialBackoffSeconds"), _child(path, "maxBackoffSeconds")
        if "maxBackoffSeconds" in data:
            _fail(maximum_key, f"must be >= {initial_key} ({initial}), got {maximum}")
        _fail(initial_key, f"must be <= {maximum_key} ({maximum}, the default), got {initial}")
    return settings


def _tie_break(value: object, path: str) -> str:
    return _choice(value, path, TIE_BREAKS)


def _queueing_strategy(value: object, path: str) -> str:
    return _choice(value, path, QUEUEING_STRATEGIES)


def _choice(value: object, path: str, choices: tuple[str, ...]) -> str:
    text = _string(value, path)
    if text not in choices:
        _fail(path, f"must be one of {', '.join(choices)}, got {text!r}")
    return text


def _label_keys(value: object, path: str) -> tuple[str, ...]:
    """A list of node label keys, narrowest placement domain first (e.g. rack, then zone)."""
    keys = []
    for i, item in enumerate(_list(value, path)):
        key = _string(item, f"{path}[{i}]")
        if not _LABEL_KEY.match(key):
            _fail(f"{path}[{i}]", f"must be a label key like topology.kubernetes.io/zone, got {_show(item)}")
        if key in keys:
            _fail(f"{path}[{i}]", f"duplicate label key {key!r}")
        keys.append(key)
    return tuple(keys)


_LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


def _parse_gpu(value: object, path: str) -> GpuSettings:
    data = _mapping(value, path)
    _check_keys(data, ("stalenessSeconds",), path)
    return GpuSettings(_scalar(data, "stalenessSeconds", GpuSettings().staleness_seconds,
                               lambda v, p: _number(v, p, minimum=0, inclusive=False), path))


def _parse_prediction(value: object, path: str) -> PredictionSettings:
    data = _mapping(value, path)
    _check_keys(data, _PREDICTION_KEYS, path)
    # Both may be null: no model; online learning as the model's presence says.
    return PredictionSettings(
        model=_scalar(data, "model", None, _nullable(_string), path),
        learn_online=_scalar(data, "learnOnline", None, _nullable(_boolean), path),
        forecast_seconds=_scalar(data, "forecastSeconds", PredictionSettings().forecast_seconds,
                                 lambda v, p: _number(v, p, minimum=0, inclusive=True), path),
    )


def _nullable(parse: _Parse) -> _Parse:
    return lambda value, path: None if value is None else parse(value, path)


def _bind_address(value: object, path: str) -> str:
    text = _string(value, path)
    try:
        ipaddress.ip_address(text)
    except ValueError:
        if len(text) > 253 or not _HOSTNAME.match(text):
            _fail(path, f"must be an IP address or a host name, got {text!r}")
    return text


_SERVER_KEYS = ("port", "bindAddress", "visibilityEnabled", "visibilityPort", "visibilityCertFile",
                "visibilityKeyFile")


def _parse_server(value: object, path: str) -> ServerSettings:
    data = _mapping(value, path)
    _check_keys(data, _SERVER_KEYS, path)
    d = ServerSettings()
    return ServerSettings(
        port=_scalar(data, "port", d.port, lambda v, p: _integer(v, p, 0, 65535), path),
        bind_address=_scalar(data, "bindAddress", d.bind_address, _bind_address, path),
        visibility_enabled=_scalar(data, "visibilityEnabled", d.visibility_enabled, _boolean, path),
        visibility_port=_scalar(data, "visibilityPort", d.visibility_port,
                                lambda v, p: _integer(v, p, 0, 65535), path),
        visibility_cert_file=_scalar(data, "visibilityCertFile", d.visibility_cert_file, _string, path),
        visibility_key_file=_scalar(data, "visibilityKeyFile", d.visibility_key_file, _string, path),
    )


def _lease_namespace(value: object, path: str) -> str:
    text = _string(value, path)
    if text and (len(text) > 63 or not _DNS1123_LABEL.match(text)):
        _fail(path, f"must be empty (the daemon's own namespace) or a DNS-1123 label, got {text!r}")
    return text


def _parse_leader_election(value: object, path: str) -> LeaderElectionSettings:
    data = _mapping(value, path)
    _check_keys(data, _LEADER_ELECTION_KEYS, path)
    d = LeaderElectionSettings()

    def get(key: str, default: Any, parse: _Parse) -> Any:
        return _scalar(data, key, default, parse, path)

    settings = LeaderElectionSettings(
        enabled=get("enabled", d.enabled, _boolean),
        lease_name=get("leaseName", d.lease_name, _dns_subdomain),
        lease_namespace=get("leaseNamespace", d.lease_namespace, _lease_namespace),
        lease_duration_seconds=get("leaseDurationSeconds", d.lease_duration_seconds, _positive),
        renew_deadline_seconds=get("renewDeadlineSeconds", d.renew_deadline_seconds, _positive),
        retry_period_seconds=get("retryPeriodSeconds", d.retry_period_seconds, _positive),
    )
    # client-go's checks: a leader gives up (renew deadline) before its lease runs out for the others,
    # and tries to renew more than once within the deadline.
    if settings.renew_deadline_seconds >= settings.lease_duration_seconds:
        _fail(_child(path, "renewDeadlineSeconds"),
              f"must be < {_child(path, 'leaseDurationSeconds')} "
              f"({_show(_whole(settings.lease_duration_seconds))}), "
              f"got {_show(_whole(settings.renew_deadline_seconds))}")
    if settings.retry_period_seconds * 1.2 >= settings.renew_deadline_seconds:
        _fail(_child(path, "retryPeriodSeconds"),
              f"must be < {_child(path, 'renewDeadlineSeconds')} / 1.2 "
              f"({_show(_whole(settings.renew_deadline_seconds))} / 1.2), "
              f"got {_show(_whole(settings.retry_period_seconds))}")
    return settings


# --- tenancy and policy ----------------------------------------------------------------------------


def _quantity(resource: str, value: object, path: str) -> int:
    """A Kubernetes quantity in the integer units quotas are kept in (thousandths: cpu, GPU fractions)."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        _fail(path, f"must be a Kubernetes quantity such as 8, '500m' or '80Gi', got {_show(value)}")
    try:
        amount = parse_quantity(value)
        finite = amount.is_finite()
    except (ValueError, ArithmeticError):  # QuantityError, a runaway exponent
        finite = False
    if not finite:
        _fail(path, f"invalid quantity {_show(value)}")
    if amount < 0:
        _fail(path, f"must not be negative, got {_show(value)}")
    unit = _unit(resource)
    if amount * (1000 if unit in MILLI_RESOURCES else 1) > _MAX_QUANTITY:
        _fail(path, f"is too large, got {_show(value)}")
    return to_units(unit, value)


def _unit(resource: str) -> str:
    """The resource whose units an amount is counted in: managed GPU memory in bytes, as memory."""
    return "memory" if resource == _GPU_MEMORY_RESOURCE else resource


def _amount(resource: str, units: int) -> str:
    """An amount of a resource as an operator writes it: 64, 500m, 80Gi."""
    return format_units(_unit(resource), units)


def _parse_quantities(value: object, path: str) -> FrozenMap[int]:
    """Resource name -> quantity (a quota, a guarantee or a limit); empty means no resource is named."""
    data = _mapping(value, path)
    result = {}
    for name, quantity in data.items():
        if not isinstance(name, str) or not _RESOURCE_NAME.match(name):
            _fail(path, "resource names must be Kubernetes resource names such as 'cpu' or "
                        f"'nvidia.com/gpu', got {_show(name)}")
        result[name] = _quantity(name, quantity, _child(path, name))
    return FrozenMap(result)


def _named_entries(value: object, path: str, kind: str) -> Iterator[tuple[str, Mapping[Any, Any], str]]:
    """(name, body, body's path) of a mapping of named entries; a null body is an empty one."""
    for name, body in _mapping(value, path).items():
        if not isinstance(name, str) or not name:
            _fail(path, f"{kind} names must be non-empty strings, got {_show(name)}")
        entry_path = _child(path, name)
        yield name, ({} if body is None else _mapping(body, entry_path)), entry_path


def _unknown(kind: str, name: str, known: Iterable[str]) -> str:
    """``unknown group 'visoin' (did you mean 'vision'?); known: research, vision``."""
    names = list(known)
    if not names:
        return f"unknown {kind} {name!r}; no {kind} is configured"
    hint = difflib.get_close_matches(name, names, n=1)
    suggestion = f" (did you mean {hint[0]!r}?)" if hint else ""
    return f"unknown {kind} {name!r}{suggestion}; known: {', '.join(names)}"


def _required(data: Mapping[Any, Any], key: str, path: str, what: str) -> Any:
    if data.get(key) is None:
        _fail(_child(path, key), f"is required: {what}")
    return data[key]


def _parse_queue(value: object, path: str) -> QueueSpec:
    data = _mapping(value, path)
    _check_keys(data, _QUEUE_KEYS, path)
    name_path = _child(path, "name")
    name = _string(_required(data, "name", path, "the queue's name, a DNS-1123 label"), name_path)
    if len(name) > 63 or not _DNS1123_LABEL.match(name):
        _fail(name_path, "must be a DNS-1123 label (lowercase letters, digits and '-', starting and ending "
                         f"with a letter or digit, at most 63 characters), got {name!r}")
    return QueueSpec(
        name=name,
        level=_scalar(data, "level", 0, _level, path),
        weight=_scalar(data, "weight", 1.0, _positive, path),
        quota=_section(data, "quota", _parse_quantities, FrozenMap(), path),
        promote_after_seconds=_scalar(data, "promoteAfterSeconds", None, _positive, path),
        queueing_strategy=_scalar(data, "queueingStrategy", "BestEffortFIFO", _queueing_strategy, path),
    )


def _parse_queues(value: object, path: str) -> tuple[QueueSpec, ...]:
    return _named_list(value, path, _parse_queue, "queue")


def _parse_groups(value: object, path: str) -> FrozenMap[GroupSpec]:
    groups = {}
    for name, data, entry in _named_entries(value, path, "group"):
        _check_keys(data, _GROUP_KEYS, entry)
        group = GroupSpec(
            name=name,
            level=_scalar(data, "level", 0, _level, entry),
            share=_scalar(data, "share", 1.0, _positive, entry),
            min=_section(data, "min", _parse_quantities, FrozenMap(), entry),
            max=_section(data, "max", _parse_quantities, FrozenMap(), entry),
        )
        for resource, guaranteed in group.min.items():
            limit = group.max.get(resource)
            if limit is not None and guaranteed > limit:
                _fail(_child(_child(entry, "min"), resource),
                      f"{_amount(resource, guaranteed)} is above {_child(entry, 'max')} "
                      f"({_amount(resource, limit)})")
        groups[name] = group
    return FrozenMap(groups)


def _parse_users(value: object, path: str) -> FrozenMap[UserSpec]:
    users = {}
    for name, data, entry in _named_entries(value, path, "user"):
        _check_keys(data, _USER_KEYS, entry)
        group = _string(_required(data, "group", entry, "the name of the user's group"),
                        _child(entry, "group"))
        users[name] = UserSpec(
            name=name,
            group=group,
            level=_scalar(data, "level", 0, _level, entry),
            max=_section(data, "max", _parse_quantities, FrozenMap(), entry),
        )
    return FrozenMap(users)


def _parse_namespaces(value: object, path: str) -> FrozenMap[NamespaceSpec]:
    namespaces = {}
    for name, data, entry in _named_entries(value, path, "namespace"):
        if len(name) > 63 or not _DNS1123_LABEL.match(name):
            _fail(path, f"namespace names must be DNS-1123 labels, got {name!r}")
        _check_keys(data, _NAMESPACE_KEYS, entry)
        namespaces[name] = NamespaceSpec(
            name=name,
            user=_string(_required(data, "user", entry, "the user who owns the namespace's pods"),
                         _child(entry, "user")),
            default_queue=_section(data, "defaultQueue", _string, None, entry),
            trust_user_label=_scalar(data, "trustUserLabel", False, _boolean, entry),
        )
    return FrozenMap(namespaces)


def _parse_weights(value: object, path: str) -> FrozenMap[float]:
    weights = {}
    for factor, weight in _mapping(value, path).items():
        if factor not in POLICY_FACTORS:
            where = _child(path, factor) if isinstance(factor, str) else path
            _fail(where, f"unknown factor {factor!r}; known: {', '.join(POLICY_FACTORS)}")
        weights[factor] = _real(weight, _child(path, factor))
    if not weights:
        _fail(path, "must name at least one factor")
    return FrozenMap(weights)


def _parse_policies(value: object, path: str) -> Mapping[str, PolicySpec]:
    policies = {}
    for name, data, entry in _named_entries(value, path, "policy"):
        _check_keys(data, _POLICY_KEYS, entry)
        weights_path = _child(entry, "weights")
        if data.get("weights") is None:
            _fail(weights_path, f"must name at least one factor; known: {', '.join(POLICY_FACTORS)}")
        policies[name] = PolicySpec(
            name=name,
            weights=_parse_weights(data["weights"], weights_path),
            max_wait_seconds=_scalar(data, "maxWaitSeconds", 3600.0, _positive, entry),
            fair_share_half_life_seconds=_scalar(data, "fairShareHalfLifeSeconds", 3600.0, _positive, entry),
        )
    return FrozenMap(policies) if policies else DEFAULT_POLICIES


def _active_policy(value: object, path: str) -> str | None:
    return None if value is None else _string(value, path)


def _check_references(queues: tuple[QueueSpec, ...], groups: Mapping[str, GroupSpec],
                      users: Mapping[str, UserSpec], namespaces: Mapping[str, NamespaceSpec]) -> None:
    """What the tenancy sections say about each other: every name they use is defined, and fits."""
    for user in users.values():
        if user.group not in groups:
            _fail(_child(_child("users", user.name), "group"), _unknown("group", user.group, groups))
    queue_names = tuple(q.name for q in queues)
    for namespace in namespaces.values():
        entry = _child("namespaces", namespace.name)
        if namespace.user not in users:
            _fail(_child(entry, "user"), _unknown("user", namespace.user, users))
        if namespace.default_queue is not None and namespace.default_queue not in queue_names:
            _fail(_child(entry, "defaultQueue"), _unknown("queue", namespace.default_queue, queue_names))
    for group in groups.values():
        members = [u for u in users.values() if u.group == group.name]
        for resource, limit in group.max.items():
            limited = [u for u in members if resource in u.max]
            total = sum(u.max[resource] for u in limited)
            if total > limit:
                each = ", ".join(f"{u.name} {_amount(resource, u.max[resource])}" for u in limited)
                _fail("users", f"the users of group {group.name} may use up to {resource} "
                               f"{_amount(resource, total)}, above the group's max "
                               f"{_amount(resource, limit)} ({each})")


def _parse(data: object) -> Config:
    if data is None:
        data = {}
    top = _mapping(data, "")
    _check_keys(top, _TOP_LEVEL_KEYS, "")
    scheduler_name = _scalar(top, "schedulerName", DEFAULT_SCHEDULER_NAME, _dns_subdomain, "")
    profiles = _section(top, "profiles", lambda v, p: _parse_profiles(v, p, scheduler_name),
                        (Profile(scheduler_name),))
    scheduling = _section(top, "scheduling", _parse_scheduling, SchedulingSettings())
    gpu = _section(top, "gpu", _parse_gpu, GpuSettings())
    prediction = _section(top, "prediction", _parse_prediction, PredictionSettings())
    server = _section(top, "server", _parse_server, ServerSettings())
    leader_election = _section(top, "leaderElection", _parse_leader_election, LeaderElectionSettings())
    queues = _section(top, "queues", _parse_queues, ())
    groups = _section(top, "groups", _parse_groups, FrozenMap())
    users = _section(top, "users", _parse_users, FrozenMap())
    namespaces = _section(top, "namespaces", _parse_namespaces, FrozenMap())
    policies = _section(top, "policies", _parse_policies, DEFAULT_POLICIES)
    active_policy = _scalar(top, "activePolicy", None, _active_policy, "")
    _check_references(queues, groups, users, namespaces)
    if active_policy is None:  # absent or null: the first policy, the built-in "default" without any
        active_policy = next(iter(policies))
    elif active_policy not in policies:
        _fail("activePolicy", _unknown("policy", active_policy, policies))
    return Config(
        scheduler_name=scheduler_name,
        profiles=profiles,
        scheduling=scheduling,
        gpu=gpu,
        prediction=prediction,
        server=server,
        leader_election=leader_election,
        queues=queues,
        groups=groups,
        users=users,
        namespaces=namespaces,
        policies=policies,
        active_policy=active_policy,
    )


def parse_config(data: object, source: str = "<config>") -> Config:
    """Validate the decoded YAML of a config file; None (an empty file) gives the defaults.

    Raises ConfigError naming ``source``, the first offending key and the reason.
    """
    try:
        return _parse(data)
    except _Invalid as exc:
        raise ConfigError(exc.key, exc.reason, source) from None
