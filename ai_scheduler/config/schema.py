"""The config file's schema: every setting written once, as a field of an immutable dataclass.

Each field carries the setting's type (what the components read), its check
(which values the file may give it, and how a refusal is worded), its default,
its text and whether a running daemon applies a change at once or only after a
restart (`fields.Doc`); see ``fields.py`` for the vocabulary. Everything else is
derived from these declarations: the keys a section accepts, the walk that
validates a file (``validation.py``, loaded by the first `parse_config`), the
shipped ``default.yaml`` and the docs' table of settings (``generate.py``,
checked by a test), the keys a reload reports and those it cannot apply
(``keys.py``).

Validation is strict on purpose: an unknown key, a wrong type or an out-of-range
value is refused with the key's full path (``profiles[0].scores[1].weight``), so
that a typo in a ConfigMap never turns silently into a default. A running
scheduler keeps its last good config when a reload fails, so refusing is cheap.
Rules between settings (a backoff's maximum above its initial value, a user's
group defined, ...) are each section's `verify`.

The result is deeply immutable (tuples and read-only mappings all the way down)
so that one Config object can be shared by every loop without copying. A Config
built in code is taken as given: only the file is validated (`parse_config`).
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Annotated, Any, ClassVar, TypeVar

from ai_scheduler.config.fields import (
    DNS1123_LABEL,
    DNS_LABEL,
    DNS_SUBDOMAIN,
    GPU_MEMORY_RESOURCE,
    LEVEL,
    NOT_NEGATIVE,
    POSITIVE,
    BindAddress,
    Boolean,
    Choice,
    Doc,
    Entries,
    Factors,
    Integer,
    Invalid,
    LabelKeys,
    Name,
    Named,
    NodeLabels,
    Nullable,
    Plugin,
    Plugins,
    Quantities,
    ResourceWeights,
    Section,
    String,
    child,
    file_keys,
    naming,
    quantity_unit,
    show,
    whole,
)
from ai_scheduler.quantity import format_units

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
    "FGDScoreCoupled",
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
_GPU_MEMORY_RESOURCE = GPU_MEMORY_RESOURCE

# Spellings the rest of the package (and its tests) have used since before fields.py.
_child, _show, _whole = child, show, whole


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

    def __contains__(self, key: object) -> bool:  # the dict's own: Mapping's goes through __getitem__
        return key in self._data

    def get(self, key: str, default: Any = None) -> Any:
        return self._data.get(key, default)

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

_RESTART_SERVER = "the HTTP server stays where it was bound at start, where the probes look"
_RESTART_VISIBILITY = "the visibility API's listener and certificate are made once, at start"


# --- profiles ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ScoreSpec(Section):
    """One Score plugin of a profile; ``resources`` is empty for the non-resource scorers."""

    name: Annotated[str, Plugin(SCORE_PLUGINS, "score plugin"), Doc(
        "The plugin.", required=f"is required; one of {', '.join(SCORE_PLUGINS)}")]
    weight: Annotated[int, Integer(0, 100), Doc("Its weight in the node's score; 0 disables the plugin.")] = 1
    resources: Annotated[Mapping[str, int], ResourceWeights(), Doc(
        "Only for the four resource scorers: resource name -> integer weight (BalancedAllocation only "
        "reads which resources are named). Default: cpu, memory and nvidia.com/gpu 1 each; cpu and memory "
        "for BalancedAllocation.", default="see meaning")] = field(default_factory=FrozenMap)

    @classmethod
    def verify(cls, built: Any, data: Mapping[Any, Any]) -> Any:
        if built.name not in RESOURCE_SCORERS:
            if "resources" in data:
                raise Invalid(f"only {', '.join(sorted(RESOURCE_SCORERS))} take resources", ("resources",))
            return built
        if data.get("resources") is None:
            balanced = built.name == "NodeResourcesBalancedAllocation"
            resources = DEFAULT_BALANCED_RESOURCES if balanced else DEFAULT_SCORE_RESOURCES
            return dataclasses.replace(built, resources=resources)
        return built


DEFAULT_SCORES: tuple[ScoreSpec, ...] = (
    ScoreSpec("NodeResourcesGPUAware", 1, DEFAULT_SCORE_RESOURCES),
    ScoreSpec("NodeAffinity", 2),
    ScoreSpec("TaintToleration", 3),
    ScoreSpec("FGDScoreCoupled", 10),
    ScoreSpec("GPUAvoidance", 2),
    ScoreSpec("PodTopologySpread", 2),
    ScoreSpec("InterPodAffinity", 2),
    ScoreSpec("DynamicResources", 2),
)


@dataclass(frozen=True, slots=True)
class Profile(Section):
    """The plugins that handle pods whose ``spec.schedulerName`` is ``scheduler_name``."""

    scheduler_name: Annotated[str, DNS_SUBDOMAIN, Doc(
        "The spec.schedulerName of the pods this profile handles: the top-level schedulerName for the "
        "first profile unless it names itself; required and unique for the others.",
        default="the top-level schedulerName (first profile)",
        required="is required for every profile but the first")]
    filters: Annotated[tuple[str, ...], Plugins(FILTER_PLUGINS, "filter plugin"), Doc(
        "Filter plugins, run in this order; a node must pass all of them. NodePorts: host ports (hostIP, "
        "protocol, hostPort). GPU: managed GPUs (ai-scheduler.io/gpu-count, gpu-memory and gpu-fraction, "
        "on nodes labelled ai-scheduler.io/gpu-managed=true). PodTopologySpread: DoNotSchedule "
        "topologySpreadConstraints. InterPodAffinity: required pod affinity and anti-affinity, the pod's "
        "and the existing pods'. VolumeRestrictions: a ReadWriteOncePod claim already in use keeps the pod "
        "waiting; inline disks in use on a node keep it off that node. NodeVolumeLimits: CSI volumes per "
        "node within the CSINode's count. VolumeBinding: PersistentVolumeClaims (bound volumes' node "
        "affinity, WaitForFirstConsumer claims matched to a volume or provisioned on the chosen node). "
        "VolumeZone: bound volumes' zone and region labels against the node's. While a profile uses any of "
        "these four, the scheduler watches PersistentVolumes, claims, StorageClasses and CSINodes. "
        "DynamicResources (DRA): spec.resourceClaims allocated from ResourceSlices and reserved before "
        "binding, and extended resources a DeviceClass maps; while a profile uses it, the scheduler "
        "watches ResourceClaims, ResourceClaimTemplates, ResourceSlices and DeviceClasses.",
        default="all of them, in the order listed")] = FILTER_PLUGINS
    scores: Annotated[tuple[ScoreSpec, ...], Entries("score plugin"), Doc(
        "Score plugins; a node's score is the weighted sum of their normalised scores. "
        "NodeResourcesLeastAllocated spreads, NodeResourcesMostAllocated bin-packs; NodeResourcesGPUAware "
        "(the default) bin-packs on GPU nodes and spreads on the others, so that a GPU node's cpu and memory "
        "stay next to its free GPUs (a pod of 8 GPUs and 64 cores still finds them); in a profile that "
        "weighs a fragmentation score it leaves GPU pods to that score. FGDScoreCoupled (the default's GPU "
        "packing): FGD's fragmentation gradient over pod shapes learned online, with cpu and memory kept "
        "beside free GPUs and NVLink islands whole; GPUFragmentation, GPUFragmentationCoupled and FGDScore "
        "are its variants (docs/users/gpus.md). "
        "NodeResourcesBalancedAllocation prefers nodes whose resources stay evenly used (in "
        "kube-scheduler's default profile, not in ours: it costs about 0.08 ms per decision at 5,000 "
        "nodes). GPUBinpack: GPU pods fill partly used GPUs and nodes first, keeping whole nodes free for "
        "large jobs; GPUSpread the opposite; GPUAvoidance: pods without GPUs keep off GPU nodes when they "
        "can. PodTopologySpread: ScheduleAnyway topologySpreadConstraints (a pod with none that a Service, "
        "ReplicaSet, StatefulSet or ReplicationController selects is spread by kube-scheduler's system "
        "defaults: hostname maxSkew 3, zone maxSkew 5). InterPodAffinity: preferred pod affinity and "
        "anti-affinity, and the existing pods' terms that match the pod. DynamicResources: nodes that meet "
        "a claim's firstAvailable request with an earlier alternative (kube-scheduler's weight 2).",
        default="the list shown in default.yaml")] = DEFAULT_SCORES


# --- process-level settings ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SchedulingSettings(Section):
    """Process-level knobs of the scheduling loop and the binder."""

    bind_concurrency: Annotated[int, Integer(1, 1024), Doc(
        "Bindings in flight at once.",
        restart="it also sizes the API client's connection pool, made once, when the daemon connects")] = 64
    assume_timeout_seconds: Annotated[float, POSITIVE, Doc(
        "An assumed pod that the watch has not shown bound this long after its binding finished is "
        "forgotten, and its resources freed.")] = 30.0
    initial_backoff_seconds: Annotated[float, POSITIVE, Doc(
        "Retry backoff of a pod whose attempt failed: it doubles from this value up to "
        "maxBackoffSeconds.")] = 1.0
    max_backoff_seconds: Annotated[float, POSITIVE, Doc(
        "The most a failed pod's backoff grows to (>= initialBackoffSeconds).")] = 10.0
    unschedulable_flush_seconds: Annotated[float, POSITIVE, Doc(
        "Unschedulable pods are retried at least this often, even when no cluster event suggests they "
        "might fit now.")] = 300.0
    event_repeat_seconds: Annotated[float, NOT_NEGATIVE, Doc(
        "The same event for the same pod is not sent again within this window; it is aggregated instead "
        "(0 sends every one).")] = 300.0
    percentage_of_nodes_to_score: Annotated[int, Integer(0, 100), Doc(
        "How much of a large cluster each pod's search looks at, as in kube-scheduler: the search for "
        "feasible nodes stops once it has found this percentage of all nodes (at least 100), and only those "
        "are scored; the next pod's search starts where this one stopped, so every node gets its turn. 0 "
        "is adaptive, kube-scheduler's default: 50% minus 1 point per 125 nodes, at least 5% (500 of 5,000 "
        "nodes). 100 scores every feasible node. Clusters under 100 nodes are always searched whole. A pod "
        "nominated by preemption tries its nominated node first.", default="0 (adaptive)")] = 0
    tie_break: Annotated[str, Choice(TIE_BREAKS), Doc(
        "Among the nodes of the best score: random picks one at random (kube-scheduler's way, spreading "
        "the load of equal nodes); nodeOrder the first in the scheduler's node table, so that pods that tie "
        "keep landing on the same nodes (the default: with the default's fragmentation score, a fixed "
        "first-fit order among equally good nodes keeps the nodes late in the table whole for large "
        "pods).")] = "nodeOrder"
    gang_schedule_timeout_seconds: Annotated[float, POSITIVE, Doc(
        "A gang (pod group) that has not been placed whole within this many seconds of its first attempt "
        "times out: its reservations are released, an event says so, and it backs off for longer after "
        "each timeout (its members wait that out in the queue). A PodGroup's spec.scheduleTimeoutSeconds "
        "overrides it.")] = 60.0
    gang_topology_labels: Annotated[tuple[str, ...], LabelKeys(), Doc(
        "Node labels that define placement domains, narrowest first (e.g. a rack label, then "
        "topology.kubernetes.io/zone). A gang is placed inside one domain when one can hold it, and spread "
        "over several only when none can; a PodGroup annotated ai-scheduler.io/same-domain: \"required\" "
        "never is.")] = ("topology.kubernetes.io/zone",)
    backfill: Annotated[bool, Boolean(), Doc(
        "Backfill: lower-priority pods may still use the room a reservation needs when their own "
        "estimated run time ends before the reservation is due (never before an unknown due time).")] = True
    priority_refresh_seconds: Annotated[float, POSITIVE, Doc(
        "Pending pods' priorities (see policies) are computed again this often.")] = 5.0
    reservation: Annotated[bool, Boolean(), Doc(
        "Reservation against starvation: when the highest-priority waiting pod or gang does not fit, room "
        "is held for it where it will fit soonest (judged from the running pods' "
        "ai-scheduler.io/estimated-runtime): only the nodes it needs, and on them only the room it needs; "
        "pods fitting in the rest are never refused for it.")] = True
    reservation_min_wait_seconds: Annotated[float, NOT_NEGATIVE, Doc(
        "A running pod without an estimate is not assumed to end at any time: a reservation that waits for "
        "one is due at an unknown time and would keep room idle as long, so it is made only for a pod or "
        "gang that has waited this many seconds since its creation (0: at once).")] = 300.0
    queueing_hints: Annotated[bool, Boolean(), Doc(
        "Queueing hints: a pod that did not fit is retried when room is freed only if it may fit where the "
        "room was freed (a gang that fit nowhere: only if one of its members may), and a pod alike to one "
        "that just failed, with nothing freed since, repeats that "
        "failure without running the filters (equivalentTo in its decision line; those an event already put "
        "back in the active queue fail so at once, without a line of their own). The same decisions as "
        "retrying every pod, far fewer filter runs under a standing queue; no pod gets a hint while "
        "reservation is on.")] = False
    api_request_timeout_seconds: Annotated[float, POSITIVE, Doc(
        "Every request to the API server (a binding, a patch, an event, a page of a list, the opening of a "
        "watch) that is not answered within this many seconds is abandoned and retried: a dead peer (a "
        "half-open connection) never hangs the scheduler. A binding left without an answer is retried on "
        "the same node until one comes.")] = 10.0
    watch_idle_seconds: Annotated[float, POSITIVE, Doc(
        "A watch that brings neither an event nor a bookmark for this many seconds is taken for dead, and "
        "the informer lists again. Keep it above the API server's bookmark period (kube-apiserver: one a "
        "minute).")] = 90.0
    api_unreachable_restart_seconds: Annotated[float, POSITIVE, Doc(
        "/healthz fails (so that the liveness probe restarts the scheduler) once the API server has been "
        "unreachable, or an informer's list has failed, for this many seconds; /readyz fails from the "
        "start of an outage.")] = 120.0

    @classmethod
    def verify(cls, built: Any, data: Mapping[Any, Any]) -> Any:
        if built.max_backoff_seconds < built.initial_backoff_seconds:
            # Blame the key the operator wrote; when both are written, the maximum is the one to raise.
            d = SchedulingSettings()
            initial = show(data.get("initialBackoffSeconds", whole(d.initial_backoff_seconds)))
            maximum = show(data.get("maxBackoffSeconds", whole(d.max_backoff_seconds)))
            if "maxBackoffSeconds" in data:
                raise Invalid(lambda where: f"must be >= {where('initialBackoffSeconds')} ({initial}), "
                                            f"got {maximum}", ("maxBackoffSeconds",))
            raise Invalid(lambda where: f"must be <= {where('maxBackoffSeconds')} ({maximum}, the default), "
                                        f"got {initial}", ("initialBackoffSeconds",))
        return built


@dataclass(frozen=True, slots=True)
class PredictionSettings(Section):
    """Run-time prediction (ai_scheduler/prediction): ``model`` is a file `ai-scheduler learn` wrote
    (None: no model); with ``learn_online`` (on by default when there is a model) completions update
    per-user corrections, and without a model the users' own past run times predict their next ones.
    A pod's own ``ai-scheduler.io/estimated-runtime`` always comes first."""

    model: Annotated[str | None, Nullable(String()), Doc(
        "Run-time prediction for pods without ai-scheduler.io/estimated-runtime: a model file written by "
        "`ai-scheduler learn` (null: none). Its median feeds the estimatedRuntime factor, its upper "
        "quantile reservations and backfill. Loaded again on reload; a file that does not load is logged "
        "(prediction.model_invalid) and left out.", default="null (none)")] = None
    learn_online: Annotated[bool | None, Nullable(Boolean()), Doc(
        "Completions correct the predictions per user between refits; without a model, the user's own "
        "past run times predict the next (null: on with a model, off without).",
        default="null (on with a model, off without)")] = None
    forecast_seconds: Annotated[float, NOT_NEGATIVE, Doc(
        "How often (seconds) the daemon forecasts when each waiting pod will start, by simulating its own "
        "state forward (median run times; 0: never), for the visibility API (expectedStart).")] = 60.0

    @property
    def enabled(self) -> bool:
        return self.model is not None or bool(self.learn_online)


@dataclass(frozen=True, slots=True)
class GpuSettings(Section):
    """How old a node agent's GPU report may be before its managed GPUs stop taking new pods."""

    staleness_seconds: Annotated[float, POSITIVE, Doc(
        "A node agent's GPU report older than this makes the node's managed GPUs unavailable for new "
        "placements.")] = 120.0


@dataclass(frozen=True, slots=True)
class ServerSettings(Section):
    """Where /healthz, /readyz and /metrics listen, and the visibility API (visibility/server.py):
    HTTPS on ``visibility_port`` when ``visibility_enabled``, behind the API server's aggregation layer,
    with the serving certificate from ``visibility_cert_file``/``visibility_key_file`` ("": self-signed,
    made at start)."""

    port: Annotated[int, Integer(0, 65535), Doc(
        "The HTTP port of /healthz, /readyz and /metrics (0 picks any free port).",
        restart=_RESTART_SERVER)] = 10251
    bind_address: Annotated[str, BindAddress(), Doc(
        "The address that HTTP server listens on.", restart=_RESTART_SERVER)] = "0.0.0.0"
    visibility_enabled: Annotated[bool, Boolean(), Doc(
        "The visibility API (visibility.ai-scheduler.io/v1alpha1): the queue, quotas and GPUs, read-only, "
        "served over HTTPS to the API server's aggregation layer, which passes each user's identity on; "
        "the daemon asks the API server (SubjectAccessReview) what that user may see. Register it with "
        "deploy/visibility/ (see docs/users/where-my-job-stands.md). Off unless true.",
        restart=_RESTART_VISIBILITY)] = False
    visibility_port: Annotated[int, Integer(0, 65535), Doc(
        "The visibility API's HTTPS port (0 picks any free port).", restart=_RESTART_VISIBILITY)] = 8443
    visibility_cert_file: Annotated[str, String(), Doc(
        "The visibility API's serving certificate (a PEM file); empty: a self-signed one is made at start "
        "(the APIService then says insecureSkipTLSVerify).", restart=_RESTART_VISIBILITY)] = ""
    visibility_key_file: Annotated[str, String(), Doc(
        "The key of that certificate (a PEM file); empty with the certificate.",
        restart=_RESTART_VISIBILITY)] = ""


_RESTART_ACCOUNTING = "the accounting database is opened once, at start, before the replica campaigns to lead"
BUDGET_PERIODS = ("day", "week", "month")  # calendar periods in UTC; a week starts on Monday
BUDGET_ACTIONS = ("lowerLevel", "limitGpus")
BUDGET_SCOPES = ("user", "group")


@dataclass(frozen=True, slots=True)
class BudgetSpec(Section):
    """A user's or a group's GPU-hour budget per period (accounting/budgets.py): once the period's use
    reaches ``gpu_hours``, ``lowerLevel`` serves the user or group at level 0 until the period ends, or
    ``limitGpus`` caps its GPUs (``nvidia.com/gpu``) at ``limit_gpus``; the next period restores it."""

    name: Annotated[str, DNS_LABEL, Doc(
        "The budget's name, unique.", required="is required: the budget's name, a DNS-1123 label")]
    gpu_hours: Annotated[float, POSITIVE, Doc("GPU-hours a period allows.",
                                              required="is required: the GPU-hours a period allows")]
    subject: Annotated[str, String(), Doc("The user (or, with scope group, the group) it holds.",
                                          required="is required: the user or group it holds")]
    scope: Annotated[str, Choice(BUDGET_SCOPES), Doc("Whether subject names a user or a group.")] = "user"
    period: Annotated[str, Choice(BUDGET_PERIODS), Doc(
        "The period (UTC calendar; a week starts on Monday).")] = "month"
    action: Annotated[str, Choice(BUDGET_ACTIONS), Doc(
        "What a spent budget does until the period ends: serve at level 0, or cap the GPUs.")] = "lowerLevel"
    limit_gpus: Annotated[int, Integer(0, 10**6), Doc(
        "With limitGpus: the GPUs (nvidia.com/gpu) the user or group may hold at once.")] = 0



@dataclass(frozen=True, slots=True)
class AccountingSettings(Section):
    """Accounting (ai_scheduler/accounting, daemon/accounting.py): what each pod used, written by the leader
    into ``database``, and the fair-share usage checkpointed there every ``checkpoint_seconds`` so that a
    restart or a new leader keeps the fair-share order. ``database`` "" turns accounting off."""

    database: Annotated[str, String(), Doc(
        "Where: sqlite:///PATH (a file on a volume; a relative PATH, or sqlite:////ABSOLUTE) or "
        "postgresql://USER:PASSWORD@HOST/DB (both replicas of the HA pair use it; a new leader continues "
        "where the old one stopped); \"\": off. A database that cannot be opened is logged "
        "(accounting.unavailable) and the scheduler runs without accounting.",
        restart=_RESTART_ACCOUNTING)] = "sqlite:////var/lib/ai-scheduler/accounting.db"
    checkpoint_seconds: Annotated[float, POSITIVE, Doc(
        "How often (seconds) the leader writes the pods' usage and the fair-share usage, and looks at the "
        "budgets.")] = 10.0
    budgets: Annotated[tuple[BudgetSpec, ...], Entries("budget"), Doc(
        "GPU-hour budgets of users or groups, per period, read from the accounting database: a spent "
        "budget lowers the level or caps the GPUs until the next period.", example=[
            {"name": "alice-monthly", "subject": "alice", "gpuHours": 2000, "period": "month",
             "action": "lowerLevel"},
            {"name": "nlp-weekly", "subject": "nlp", "scope": "group", "gpuHours": 5000, "period": "week",
             "action": "limitGpus", "limitGpus": 8}])] = ()


_LEASE_NAMESPACE = Name(DNS1123_LABEL, 63, "empty (the daemon's own namespace) or a DNS-1123 label",
                        "empty or a DNS-1123 label", empty=True)


@dataclass(frozen=True, slots=True)
class LeaderElectionSettings(Section):
    """Leader election between replicas on a coordination.k8s.io Lease (daemon/leader.py), with
    kube-scheduler's timings. ``lease_namespace`` "" is the namespace the daemon runs in (POD_NAMESPACE,
    from the downward API), else kube-system. Only `ai-scheduler run` elects; a Scheduler built without
    these settings (tests, the demo) leads at once."""

    enabled: Annotated[bool, Boolean(), Doc(
        "false: this process schedules at once, whoever else runs (one replica).")] = True
    lease_name: Annotated[str, DNS_SUBDOMAIN, Doc("The coordination.k8s.io Lease.")] = "ai-scheduler"
    lease_namespace: Annotated[str, _LEASE_NAMESPACE, Doc(
        "The Lease's namespace; \"\" is the namespace the scheduler runs in (POD_NAMESPACE, else "
        "kube-system).")] = ""
    lease_duration_seconds: Annotated[float, POSITIVE, Doc(
        "A standby takes the Lease once its holder has not renewed it for this long (> "
        "renewDeadlineSeconds). Shorter than kube-scheduler's 15, so that a crashed leader is replaced "
        "within 15 s.")] = 12.0
    renew_deadline_seconds: Annotated[float, POSITIVE, Doc(
        "The leader gives up leading, and exits, when it could not renew for this long (> "
        "retryPeriodSeconds x 1.2).")] = 8.0
    retry_period_seconds: Annotated[float, POSITIVE, Doc(
        "How often the leader renews and a standby tries to acquire.")] = 2.0

    @classmethod
    def verify(cls, built: Any, data: Mapping[Any, Any]) -> Any:
        # client-go's checks: a leader gives up (renew deadline) before its lease runs out for the others,
        # and tries to renew more than once within the deadline.
        lease, deadline = whole(built.lease_duration_seconds), whole(built.renew_deadline_seconds)
        retry = whole(built.retry_period_seconds)
        if built.renew_deadline_seconds >= built.lease_duration_seconds:
            raise Invalid(lambda where: f"must be < {where('leaseDurationSeconds')} ({show(lease)}), "
                                        f"got {show(deadline)}", ("renewDeadlineSeconds",))
        if built.retry_period_seconds * 1.2 >= built.renew_deadline_seconds:
            raise Invalid(lambda where: f"must be < {where('renewDeadlineSeconds')} / 1.2 "
                                        f"({show(deadline)} / 1.2), got {show(retry)}",
                          ("retryPeriodSeconds",))
        return built


# --- tenancy and policy ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class QueueSpec(Section):
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

    name: Annotated[str, DNS_LABEL, Doc(
        "The queue's name, unique.", required="is required: the queue's name, a DNS-1123 label")]
    level: Annotated[int, LEVEL, Doc("A lower level is always served first.")] = 0
    weight: Annotated[float, POSITIVE, Doc("Fair share between the queues of one level.")] = 1.0
    quota: Annotated[Mapping[str, int], Quantities(), Doc(
        "The most all placed pods of the queue request together (none: no limit).")] = field(
        default_factory=FrozenMap)
    promote_after_seconds: Annotated[float | None, POSITIVE, Doc(
        "A pod waiting this long is served as if its queue had the top level (no starvation); absent: "
        "never.", default="absent (never)")] = None
    queueing_strategy: Annotated[str, Choice(QUEUEING_STRATEGIES), Doc(
        "BestEffortFIFO lets a pod behind one that does not fit start if it fits; with StrictFIFO no pod "
        "of the queue starts while one ahead of it waits (Kueue's).")] = "BestEffortFIFO"


TASK_KINDS = ("training", "inference", "notebook", "batch")  # a Task's spec.attributes.kind (cache/tasks.py)
TASK_DOMAINS = ("CV", "NLP", "speech", "RL", "other")


@dataclass(frozen=True, slots=True)
class TaskRuleSpec(Section):
    """An administrator's rule that turns what a Task declares into placement (cache/tasks.py): a Task
    that matches every condition given (``kind``, ``domain``, at least ``min_model_parameters``, at least
    ``min_gpus`` in all) has its pods prefer nodes with the ``prefer`` labels and avoid those with the
    ``avoid`` labels (node affinity terms of ``weight``; with ``required``, terms its pods must meet).
    The Task's status lists the rules applied (``systemAffinity``)."""

    name: Annotated[str, DNS_LABEL, Doc(
        "The rule's name, unique.", required="is required: the rule's name, a DNS-1123 label")]
    kind: Annotated[str | None, Nullable(Choice(TASK_KINDS)), Doc(
        "Tasks of this kind only (absent: any).", default="absent (any)")] = None
    domain: Annotated[str | None, Nullable(Choice(TASK_DOMAINS)), Doc(
        "Tasks of this domain only (absent: any).", default="absent (any)")] = None
    min_model_parameters: Annotated[int, Integer(0, 10**18), Doc(
        "Tasks that declare a model at least this large (parameters; 0: any).")] = 0
    min_gpus: Annotated[int, Integer(0, 10**6), Doc(
        "Tasks whose pods ask at least this many GPUs in all (0: any).")] = 0
    prefer: Annotated[Mapping[str, str], NodeLabels(), Doc(
        "Node labels the Task's pods prefer (each an `In` term).")] = field(default_factory=FrozenMap)
    avoid: Annotated[Mapping[str, str], NodeLabels(), Doc(
        "Node labels the Task's pods avoid (each a `NotIn` term).")] = field(default_factory=FrozenMap)
    weight: Annotated[int, Integer(1, 100), Doc(
        "The weight of the preferred term (1-100, as node affinity's).")] = 50
    required: Annotated[bool, Boolean(), Doc(
        "The terms are required of the pods instead of preferred.")] = False


@dataclass(frozen=True, slots=True)
class GroupSpec(Section):
    """A group of users: a higher ``level`` is more important; ``share`` is its fair-share weight.

    ``min`` is what the group is guaranteed, ``max`` what it may use at most (resource -> units).
    """

    named: ClassVar[bool] = True

    name: str
    level: Annotated[int, LEVEL, Doc("Higher is more important.")] = 0
    share: Annotated[float, POSITIVE, Doc("Fair-share weight.")] = 1.0
    min: Annotated[Mapping[str, int], Quantities(), Doc("Guaranteed to the group.")] = field(
        default_factory=FrozenMap)
    max: Annotated[Mapping[str, int], Quantities(), Doc(
        "The most the group's pods request together: >= min, and >= the sum of its users' max.")] = field(
        default_factory=FrozenMap)

    @classmethod
    def verify(cls, built: Any, data: Mapping[Any, Any]) -> Any:
        for resource, guaranteed in built.min.items():
            limit = built.max.get(resource)
            if limit is not None and guaranteed > limit:
                above, most = _amount(resource, guaranteed), _amount(resource, limit)
                raise Invalid(naming(f"{above} is above ", ("max",), f" ({most})"), ("min", resource))
        return built


@dataclass(frozen=True, slots=True)
class UserSpec(Section):
    """A user, member of exactly one group; ``max`` caps what the user's placed pods request."""

    named: ClassVar[bool] = True

    name: str
    group: Annotated[str, String(), Doc(
        "The user's group, one of groups.", required="is required: the name of the user's group")]
    level: Annotated[int, LEVEL, Doc("Higher is more important.")] = 0
    max: Annotated[Mapping[str, int], Quantities(), Doc(
        "The most the user's pods request together.")] = field(default_factory=FrozenMap)


@dataclass(frozen=True, slots=True)
class NamespaceSpec(Section):
    """Who owns the pods of a namespace, and the queue of those without a queue label.

    With ``trust_user_label`` the pod label ``ai-scheduler.io/user`` names the user instead.
    """

    named: ClassVar[bool] = True

    name: str
    user: Annotated[str, String(), Doc(
        "The user who owns the namespace's pods, one of users.",
        required="is required: the user who owns the namespace's pods")]
    default_queue: Annotated[str | None, Nullable(String()), Doc(
        "The queue (one of queues) of the namespace's pods without a queue label; null: the queue "
        "\"default\".", default="null")] = None
    trust_user_label: Annotated[bool, Boolean(), Doc(
        "true: a pod label ai-scheduler.io/user naming a user overrides user.")] = False


@dataclass(frozen=True, slots=True)
class PolicySpec(Section):
    """A priority formula: the weighted sum of named factors (``POLICY_FACTORS``).

    A negative weight prefers the smaller value. Waiting time counts up to
    ``max_wait_seconds``; past usage decays with ``fair_share_half_life_seconds``.
    """

    named: ClassVar[bool] = True

    name: str
    weights: Annotated[Mapping[str, float], Factors(POLICY_FACTORS), Doc(
        "Factor -> weight; a negative weight prefers the smaller value. taskPriority is spec.priority, "
        "estimatedRuntime the annotation ai-scheduler.io/estimated-runtime.",
        required=f"must name at least one factor; known: {', '.join(POLICY_FACTORS)}")]
    max_wait_seconds: Annotated[float, POSITIVE, Doc("Waiting time counts up to this many seconds.")] = 3600.0
    fair_share_half_life_seconds: Annotated[float, POSITIVE, Doc(
        "Half-life of past usage in the fairShare factor, in seconds.")] = 3600.0


# spec.priority alone: with ties broken by priority and then arrival, this is kube-scheduler's order.
DEFAULT_POLICY = PolicySpec(DEFAULT_POLICY_NAME, FrozenMap({"taskPriority": 1.0}))
DEFAULT_POLICIES: Mapping[str, PolicySpec] = FrozenMap({DEFAULT_POLICY_NAME: DEFAULT_POLICY})

_TENANCY = """--- Tenancy, queues and policy -------------------------------------------
Who a pod belongs to comes from its namespace (see namespaces), so that RBAC decides it. All of these \
sections are empty unless you fill them in.

Resource maps (a queue's quota, a group's min and max, a user's max) map resource names to Kubernetes \
quantities: cpu ("64", "500m"), memory ("512Gi"), nvidia.com/gpu, any extended resource, and \
ai-scheduler's own ai-scheduler.io/gpu-count (managed whole GPUs), ai-scheduler.io/gpu-memory (managed \
GPU memory, e.g. "40Gi") and ai-scheduler.io/gpu-fraction (managed GPU fractions, in GPUs: "1.5" allows \
fractions that add up to 1.5). A resource a map does not name is not limited by it."""


def _is_namespace(name: str) -> bool:
    return len(name) <= 63 and DNS1123_LABEL.match(name) is not None


@dataclass(frozen=True)
class Config(Section):
    """The whole config file, validated; build it with ``parse_config``.

    ``parse_config`` checks that the tenancy sections refer to each other
    consistently (a user's group exists, and so on); a Config built by hand is
    taken as given.
    """

    scheduler_name: Annotated[str, DNS_SUBDOMAIN, Doc(
        "Pods whose spec.schedulerName equals this name are scheduled by us (the first profile's name, "
        "unless that profile names itself).", default=f"`{DEFAULT_SCHEDULER_NAME}`")]
    profiles: Annotated[tuple[Profile, ...], Entries("scheduler name", unique="scheduler_name",
                                                     empty="must list at least one profile"), Doc(
        "One profile per scheduler name. A pod is handled by the profile whose schedulerName equals its "
        "spec.schedulerName; other pods are never bound, but what they use on nodes is counted.",
        default="one profile, as shown in default.yaml")]
    scheduling: Annotated[SchedulingSettings, Doc(
        "Process-level knobs of the scheduling loop and the binder.")] = SchedulingSettings()
    gpu: Annotated[GpuSettings, Doc("Managed GPUs, as the node agents report them.")] = GpuSettings()
    prediction: Annotated[PredictionSettings, Doc("Run-time prediction.")] = PredictionSettings()
    server: Annotated[ServerSettings, Doc(
        "The daemon's HTTP endpoints: health, metrics and the visibility API.")] = ServerSettings()
    accounting: Annotated[AccountingSettings, Doc(
        "Accounting of use in a database, and fair share that survives restarts (`ai-scheduler run` "
        "only).")] = AccountingSettings()
    leader_election: Annotated[LeaderElectionSettings, Doc(
        "Leader election between the Deployment's replicas (`ai-scheduler run` only): one leads and "
        "schedules; the others keep their caches warm and take over when its Lease runs out. "
        "kube-scheduler's timings.",
        restart="the elector is made once, at start, with its identity, Lease and timings: replicas that "
                "changed them one by one would disagree on the Lease they contend for")] = (
        LeaderElectionSettings())
    queues: Annotated[tuple[QueueSpec, ...], Entries("queue"), Doc(
        "Queues; a pod joins one with the label ai-scheduler.io/queue: <name>, else its namespace's "
        "defaultQueue, else the queue \"default\".", preface=_TENANCY, example=[
            {"name": "prod", "level": 0, "weight": 1, "promoteAfterSeconds": 3600,
             "queueingStrategy": "BestEffortFIFO", "quota": {"nvidia.com/gpu": 16, "cpu": "64"}}])] = ()
    task_rules: Annotated[tuple[TaskRuleSpec, ...], Entries("task rule"), Doc(
        "Rules that turn a Task's declared attributes into node affinity for its pods "
        "(docs/users/tasks.md), applied in order when the Task's pods are made.", example=[
            {"name": "large-nlp-on-nvlink", "domain": "NLP", "minModelParameters": 10_000_000_000,
             "prefer": {"ai-scheduler.io/nvlink": "full"}, "weight": 80},
            {"name": "notebooks-off-gang-nodes", "kind": "notebook",
             "avoid": {"ai-scheduler.io/pool": "large-gangs"}}])] = ()
    groups: Annotated[Mapping[str, GroupSpec], Named("group"), Doc(
        "Groups of users, by name.", example={
            "vision": {"level": 2, "share": 1, "min": {"nvidia.com/gpu": 8}, "max": {"nvidia.com/gpu": 16}}},
    )] = field(default_factory=FrozenMap)
    users: Annotated[Mapping[str, UserSpec], Named("user"), Doc(
        "Users, by name.", example={"alice": {"group": "vision", "level": 3, "max": {"nvidia.com/gpu": 8}}},
    )] = field(default_factory=FrozenMap)
    namespaces: Annotated[Mapping[str, NamespaceSpec], Named(
        "namespace", _is_namespace, "namespace names must be DNS-1123 labels"), Doc(
        "Namespaces, by name: who owns their pods. Pods of a namespace not listed here belong to no user "
        "and no group.", example={
            "team-vision": {"user": "alice", "defaultQueue": "prod", "trustUserLabel": False}},
    )] = field(default_factory=FrozenMap)
    policies: Annotated[Mapping[str, PolicySpec], Named("policy"), Doc(
        "Priority policies, by name. A pending pod's priority is the weighted sum of factors. Each policy "
        "must weigh at least one factor. When no policy is given, the one shown here is built in: "
        "spec.priority, ties broken by priority and then arrival, which is kube-scheduler's order.",
        default="default: {weights: {taskPriority: 1}}")] = DEFAULT_POLICIES
    active_policy: Annotated[str, Nullable(String()), Doc(
        "The policy in force: a name under policies (absent or null: the first one).",
        default="the first policy")] = DEFAULT_POLICY_NAME

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

    @classmethod
    def prepare(cls, data: dict[Any, Any]) -> dict[Any, Any]:
        """What the file leaves to be derived: the scheduler's name, and the first profile named after it;
        the active policy decided once the policies are known."""
        data = {"schedulerName": DEFAULT_SCHEDULER_NAME, "activePolicy": None, **data}
        profiles = data.get("profiles", [{}])
        first = profiles[0] if isinstance(profiles, list) and profiles else None
        if isinstance(first, Mapping) and first.get("schedulerName") is None:
            profiles = [{**first, "schedulerName": data["schedulerName"]}, *profiles[1:]]
        data["profiles"] = profiles
        return data

    @classmethod
    def verify(cls, built: Any, data: Mapping[Any, Any]) -> Any:
        _check_references(built)
        policies = built.policies or DEFAULT_POLICIES
        active = built.active_policy
        if active is None:  # absent or null: the first policy, the built-in "default" without any
            active = next(iter(policies))
        elif active not in policies:
            raise Invalid(_unknown("policy", active, policies), ("activePolicy",))
        return dataclasses.replace(built, policies=policies, active_policy=active)


def _amount(resource: str, units: int) -> str:
    """An amount of a resource as an operator writes it: 64, 500m, 80Gi."""
    return format_units(quantity_unit(resource), units)


def _unknown(kind: str, name: str, known: Iterable[str]) -> str:
    """``unknown group 'visoin' (did you mean 'vision'?); known: research, vision``."""
    names = list(known)
    if not names:
        return f"unknown {kind} {name!r}; no {kind} is configured"
    hint = difflib.get_close_matches(name, names, n=1)
    suggestion = f" (did you mean {hint[0]!r}?)" if hint else ""
    return f"unknown {kind} {name!r}{suggestion}; known: {', '.join(names)}"


def _check_references(config: Config) -> None:
    """What the tenancy sections say about each other: every name they use is defined, and fits."""
    groups, users = config.groups, config.users
    for user in users.values():
        if user.group not in groups:
            raise Invalid(_unknown("group", user.group, groups), ("users", user.name, "group"))
    queue_names = tuple(q.name for q in config.queues)
    queues = frozenset(queue_names)
    for namespace in config.namespaces.values():
        if namespace.user not in users:
            raise Invalid(_unknown("user", namespace.user, users), ("namespaces", namespace.name, "user"))
        if namespace.default_queue is not None and namespace.default_queue not in queues:
            raise Invalid(_unknown("queue", namespace.default_queue, queue_names),
                          ("namespaces", namespace.name, "defaultQueue"))
    # Each group's users, in the file's order, in one pass (not one pass over the users per group).
    members: dict[str, list[UserSpec]] = {name: [] for name in groups}
    for user in users.values():
        members[user.group].append(user)  # every user's group exists: checked above
    for group in groups.values():
        for resource, limit in group.max.items():
            limited = [u for u in members[group.name] if resource in u.max]
            total = sum(u.max[resource] for u in limited)
            if total > limit:
                each = ", ".join(f"{u.name} {_amount(resource, u.max[resource])}" for u in limited)
                raise Invalid(f"the users of group {group.name} may use up to {resource} "
                              f"{_amount(resource, total)}, above the group's max "
                              f"{_amount(resource, limit)} ({each})", ("users",))


# The keys each section accepts, derived from the fields (tests compare them with config.keys').
_SCORE_KEYS = file_keys(ScoreSpec)
_PROFILE_KEYS = file_keys(Profile)
_SCHEDULING_KEYS = file_keys(SchedulingSettings)
_PREDICTION_KEYS = file_keys(PredictionSettings)
_SERVER_KEYS = file_keys(ServerSettings)
_LEADER_ELECTION_KEYS = file_keys(LeaderElectionSettings)
_QUEUE_KEYS = file_keys(QueueSpec)
_ACCOUNTING_KEYS = file_keys(AccountingSettings)
_BUDGET_KEYS = file_keys(BudgetSpec)
_TASK_RULE_KEYS = file_keys(TaskRuleSpec)
_GROUP_KEYS = file_keys(GroupSpec)
_USER_KEYS = file_keys(UserSpec)
_NAMESPACE_KEYS = file_keys(NamespaceSpec)
_POLICY_KEYS = file_keys(PolicySpec)
_TOP_LEVEL_KEYS = file_keys(Config)


def parse_config(data: object, source: str = "<config>") -> Config:
    """Validate the decoded YAML of a config file; None (an empty file) gives the defaults.

    Raises ConfigError naming ``source``, the first offending key and the reason. The walk that checks it
    (validation.py) is imported here, at the first file: importing the schema does not load it.
    """
    from ai_scheduler.config.validation import Refused, validate

    try:
        return validate(Config, {} if data is None else data)
    except Refused as exc:
        raise ConfigError(exc.key, exc.reason, source) from None

