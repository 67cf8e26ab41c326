"""Config reload tells the truth (issue 13, point 4).

Every key of the config file, changed on a running daemon, either shows its new
value in the component that uses it, read back from that component, or is named
under `restart_required_for` in the reload's `config.reloaded` line (and then
still runs with its old value). The cases are generated from the schema
(`config.keys.leaf_keys()`): a key added to the schema without a case here fails
`test_every_schema_key_has_a_reload_case`, so that whoever adds it must decide
whether the daemon applies it live or declares it in `RESTART_REQUIRED`.

One daemon against the embedded simulated API server serves every case: each
reload goes through the daemon's own reload routine (`reload.apply`, what the
file watcher and SIGHUP call), first back to the base config, then to the base
with one key changed.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import io
import os
import tempfile
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path as FilePath
from typing import Any

import orjson
import pytest
from builders import Pod, make_node, make_pod

from ai_scheduler.api.kube import KubeClient
from ai_scheduler.cache.cache import SchedulerCache
from ai_scheduler.cache.records import NodeRecord, PodRecord
from ai_scheduler.cache.tenancy import Tenant
from ai_scheduler.config import Config, parse_config
from ai_scheduler.config import schema as config_schema
from ai_scheduler.config.keys import ANY_INDEX, ANY_NAME, changed_keys, leaf_keys, within, yaml_key
from ai_scheduler.daemon.app import Scheduler
from ai_scheduler.daemon.config_reload import RESTART_REQUIRED
from ai_scheduler.log import JsonLogger
from ai_scheduler.prediction import Features, RunTimeModel
from ai_scheduler.queue import SchedulingQueue
from ai_scheduler.scheduler.framework.plugins.gpu import GpuFilter
from ai_scheduler.scheduler.runtimes import PredictedRunTimes
from ai_scheduler.sim import SimApiServer

Path = tuple[str | int, ...]
Live = Callable[[Scheduler, Path], Any]  # the value in force in one component of the running daemon
View = Callable[[Config, Path], Any]  # what that component should hold under a given config

ZONE, RACK = "topology.kubernetes.io/zone", "example.com/rack"

# A run-time model for the prediction.model case: a small one, fitted once per test process.
MODEL = str(FilePath(tempfile.gettempdir()) / f"ai-scheduler-reload-model-{os.getpid()}.npz")


@pytest.fixture(scope="module", autouse=True)
def model_file() -> Any:
    jobs = [Features(user=f"u{i % 3}", gpu_milli=1000 * (i % 4), cpu=1000) for i in range(40)]
    RunTimeModel.fit(jobs, [60.0 * (1 + i % 4) for i in range(40)], max_iter=20).save(MODEL)
    yield MODEL
    FilePath(MODEL).unlink(missing_ok=True)


def model_in_force(s: Scheduler, _: Path) -> str | None:
    runtimes = s.core.runtimes
    return runtimes.model_path if isinstance(runtimes, PredictedRunTimes) else None


def learning_online(s: Scheduler, _: Path) -> bool:
    runtimes = s.core.runtimes
    return isinstance(runtimes, PredictedRunTimes) and runtimes.learn_online

# Every section holds at least one entry, so that every key of the schema has a place to change.
BASE: dict[str, Any] = {
    "schedulerName": "ai-scheduler",
    "profiles": [
        {
            "scores": [
                {"name": "NodeResourcesLeastAllocated", "weight": 1, "resources": {"cpu": 1, "memory": 1}},
                {"name": "GPUBinpack", "weight": 3},
            ]
        },
        {"schedulerName": "second"},
    ],
    "scheduling": {
        "bindConcurrency": 16,
        "initialBackoffSeconds": 0.5,
        "maxBackoffSeconds": 4,
        "gangTopologyLabels": [ZONE],
    },
    "gpu": {"stalenessSeconds": 120},
    "prediction": {"learnOnline": False},
    "server": {"port": 0, "bindAddress": "127.0.0.1"},
    "leaderElection": {},
    "accounting": {"budgets": [{"name": "alice-daily", "subject": "alice", "gpuHours": 10}]},
    "queues": [
        {"name": "prod", "level": 0, "weight": 1, "quota": {"cpu": "64"}},
        {"name": "batch", "level": 1},
    ],
    "taskRules": [
        {"name": "large-nlp", "domain": "NLP", "minModelParameters": 10, "prefer": {"nvlink": "full"},
         "avoid": {"pool": "gangs"}},
    ],
    "groups": {
        "vision": {"level": 1, "share": 1, "min": {"cpu": "8"}, "max": {"cpu": "32"}},
        "nlp": {"level": 2},
    },
    "users": {"alice": {"group": "vision", "level": 1, "max": {"cpu": "16"}}, "bob": {"group": "nlp"}},
    "namespaces": {"team": {"user": "alice", "defaultQueue": "batch", "trustUserLabel": False}},
    "policies": {
        "balanced": {"weights": {"userLevel": 1, "waitingTime": 1}, "maxWaitSeconds": 3600},
        "fifo": {"weights": {"waitingTime": 1}},
    },
    "activePolicy": "balanced",
}


# --- paths and values -------------------------------------------------------------------------------


def instance(key: str) -> Path:
    """The place in BASE where a case changes `key`: the first entry of each list and of each mapping."""
    parts: list[str | int] = []
    node: Any = BASE
    tokens = key.split(".")
    for i, token in enumerate(tokens):
        indexed = token.endswith(ANY_INDEX)
        name: str = token.removesuffix(ANY_INDEX)
        if name == ANY_NAME:
            name = next(iter(node))
        parts.append(name)
        if i == len(tokens) - 1 and not indexed:
            break  # the leaf itself may be absent from BASE (it has its default there)
        node = node[name]
        if indexed:
            parts.append(0)
            node = node[0]
    return tuple(parts)


def dotted(path: Path) -> str:
    """The path as the reload's log line spells it (as ConfigError does)."""
    text = ""
    for part in path:
        text = f"{text}[{part}]" if isinstance(part, int) else config_schema._child(text, part)
    return text


def changed(path: Path, value: Any) -> dict[str, Any]:
    """BASE with one value replaced."""
    data = copy.deepcopy(BASE)
    node: Any = data
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    return data


def value_at(config: Config, path: Path) -> Any:
    """The parsed value at a file path, read through the schema's dataclasses (fields in camelCase)."""
    node: Any = config
    for part in path:
        if isinstance(part, int) or not hasattr(type(node), "__dataclass_fields__"):
            node = node[part]
        else:
            node = getattr(node, next(f for f in node.__dataclass_fields__ if yaml_key(f) == part))
    return node


# --- what the running daemon holds -------------------------------------------------------------------


def frameworks(s: Scheduler, _: Path) -> Any:
    """Each profile as its framework runs it: filters, and the scores with their weights and resources."""
    return {
        name: (
            tuple(f.name for f in fw.filters),
            tuple((p.name, p.weight, dict(getattr(p, "resources", {}))) for p in fw.scores),
        )
        for name, fw in s.frameworks.items()
    }


def profiles_view(c: Config, _: Path) -> Any:
    """Each profile as the config gives it; a score of weight 0 is off (its framework drops it)."""
    return {
        p.scheduler_name: (
            p.filters, tuple((x.name, x.weight, dict(x.resources)) for x in p.scores if x.weight)
        )
        for p in c.profiles
    }


def gpu_filter_staleness(s: Scheduler, _: Path) -> Any:
    return {f.staleness for fw in s.frameworks.values() for f in fw.filters if isinstance(f, GpuFilter)}


def tenant(s: Scheduler, labels: dict[str, str] | None = None) -> Any:
    pod = make_pod("probe", namespace="team", labels=labels)
    pod["metadata"].update(uid="probe-uid", resourceVersion="1")
    found = s.tenancy.tenant_of(PodRecord.from_api(pod))
    return (found.user, found.group, found.queue)


def tenant_view(c: Config, labelled: bool = False) -> Any:
    namespace = c.namespaces["team"]
    user = "bob" if labelled and namespace.trust_user_label else namespace.user
    return (user, c.users[user].group, namespace.default_queue)


def admitted(s: Scheduler, path: Path) -> int:
    """The most of the path's resource that its one limit (a user's or a group's max, a queue's quota)
    lets a tenant place, asked of the running tenancy's admission check."""
    section, entry, resource = path[0], path[1], str(path[-1])
    if section == "queues":
        tenant = Tenant("", "", BASE["queues"][entry]["name"])
    else:
        tenant = Tenant(str(entry), "", "") if section == "users" else Tenant("", str(entry), "")
    low, high = 0, 2**62
    while low < high:
        middle = (low + high + 1) // 2
        if s.tenancy.quota_refusal(tenant, {resource: middle}):
            high = middle - 1
        else:
            low = middle
    return low


def in_tenancy(s: Scheduler, path: Path) -> Any:
    return value_at(s.tenancy.config, path)


def in_priorities(s: Scheduler, path: Path) -> Any:
    return value_at(s.priorities.config, path)


def in_accounting(s: Scheduler, path: Path) -> Any:
    """What the accounting applies from its next checkpoint on (daemon/accounting.py): its settings."""
    return value_at(dataclasses.replace(s.config, accounting=s.accounting.settings), path)


def in_task_controller(s: Scheduler, path: Path) -> Any:
    """What the Task controller applies to the Tasks it makes pods for from now on (daemon/tasks.py)."""
    return value_at(s.task_controller.config(), path)


def in_strict_fifo(s: Scheduler, path: Path) -> Any:
    strict = s.core.cycle.strict
    assert strict is not None
    return value_at(strict.settings.current, path)


def _gangs(s: Scheduler) -> Any:
    assert s.gang_scheduler is not None
    return s.gang_scheduler


def _feedback(s: Scheduler) -> Any:
    assert s.feedback is not None
    return s.feedback


def _monitor(s: Scheduler) -> Any:
    assert s.monitor is not None
    return s.monitor


def watch_idle(resource: str) -> Live:
    return lambda s, _: s.informers[resource].watch_idle


def _binder(s: Scheduler) -> Any:
    assert s.binder is not None
    return s.binder


@dataclass(frozen=True)
class Case:
    """A valid new value for a key, and where the running daemon uses it: (live value, expected under a
    config) pairs, the expectation being the parsed value at the path unless given. A key of
    RESTART_REQUIRED keeps its old value in these places."""

    new: Any
    uses: tuple[tuple[Live, View | None], ...] = ()


def scalar(*lives: Live) -> tuple[tuple[Live, View | None], ...]:
    return tuple((live, None) for live in lives)


TENANCY = scalar(in_tenancy, in_priorities)
PROFILES: tuple[tuple[Live, View | None], ...] = ((frameworks, profiles_view),)

CASES: dict[str, Case] = {
    "schedulerName": Case(
        "renamed",
        (
            (lambda s, _: sorted(s.frameworks), lambda c, _: sorted(p.scheduler_name for p in c.profiles)),
            (lambda s, _: _feedback(s).component, None),
        ),
    ),
    "profiles[*].schedulerName": Case("first", PROFILES),
    "profiles[*].filters": Case(["NodeUnschedulable", "NodeResourcesFit", "GPU"], PROFILES),
    "profiles[*].scores[*].name": Case("NodeResourcesMostAllocated", PROFILES),
    "profiles[*].scores[*].weight": Case(7, PROFILES),
    "profiles[*].scores[*].resources.*": Case(5, PROFILES),
    "scheduling.bindConcurrency": Case(8, scalar(lambda s, _: _binder(s).concurrency)),
    "scheduling.assumeTimeoutSeconds": Case(45, scalar(lambda s, _: s.cache.assume_timeout)),
    "scheduling.initialBackoffSeconds": Case(
        0.25,
        scalar(
            lambda s, _: s.queue.backoff_duration(1),
            lambda s, _: _gangs(s).settings.initial_backoff_seconds,
        ),
    ),
    "scheduling.maxBackoffSeconds": Case(6, scalar(lambda s, _: s.queue.backoff_duration(64))),
    "scheduling.unschedulableFlushSeconds": Case(77, scalar(lambda s, _: s.queue.unschedulable_flush)),
    "scheduling.eventRepeatSeconds": Case(12, scalar(lambda s, _: _feedback(s).repeat_window)),
    "scheduling.percentageOfNodesToScore": Case(
        40,
        ((lambda s, _: {f.percentage for f in s.frameworks.values()}, lambda c, p: {value_at(c, p)}),),
    ),
    "scheduling.tieBreak": Case(
        "random",
        (
            (
                lambda s, _: {f.stable_ties for f in s.frameworks.values()},
                lambda c, p: {value_at(c, p) == "nodeOrder"},
            ),
        ),
    ),
    "scheduling.gangScheduleTimeoutSeconds": Case(
        33, scalar(lambda s, _: _gangs(s).settings.gang_schedule_timeout_seconds)
    ),
    "scheduling.gangTopologyLabels": Case(
        [RACK, ZONE],
        # The placement domains a gang is tried in, built from the nodes' labels (both labels are on them).
        ((lambda s, _: tuple(_gangs(s)._domain_masks()), None),),
    ),
    "scheduling.backfill": Case(False, scalar(lambda s, _: s.reserver.backfill)),
    "scheduling.priorityRefreshSeconds": Case(2.5, scalar(lambda s, _: s.priority_interval)),
    "scheduling.reservation": Case(False, scalar(lambda s, _: _gangs(s).reserving())),
    "scheduling.reservationMinWaitSeconds": Case(42, scalar(lambda s, _: s.reserver.min_wait)),
    "scheduling.queueingHints": Case(True, scalar(lambda s, _: s.core.cycle.hint_of is not None)),
    "scheduling.apiRequestTimeoutSeconds": Case(4, scalar(lambda s, _: s.client.request_timeout)),
    "scheduling.watchIdleSeconds": Case(45, scalar(watch_idle("nodes"), watch_idle("pods"))),
    "scheduling.apiUnreachableRestartSeconds": Case(99, scalar(lambda s, _: _monitor(s).restart_after())),
    "gpu.stalenessSeconds": Case(
        30,
        (
            (lambda s, _: s.cache.gpus.staleness, None),
            (gpu_filter_staleness, lambda c, p: {value_at(c, p)}),
        ),
    ),
    "prediction.model": Case(MODEL, scalar(model_in_force)),
    "prediction.learnOnline": Case(True, scalar(learning_online)),
    "prediction.forecastSeconds": Case(15, scalar(lambda s, _: s.forecast_interval)),
    "server.port": Case(10999),  # the daemon under test serves no HTTP: nothing to read back
    "server.bindAddress": Case("127.0.0.2"),
    "server.visibilityEnabled": Case(True),  # restart-required, as the three below
    "server.visibilityPort": Case(18443),
    "server.visibilityCertFile": Case("/etc/ai-scheduler/tls/tls.crt"),
    "server.visibilityKeyFile": Case("/etc/ai-scheduler/tls/tls.key"),
    # Restart-required (config_reload.RESTART_REQUIRED): the elector is made once, at start.
    "accounting.database": Case("sqlite:///elsewhere.db"),
    "accounting.checkpointSeconds": Case(2.5, scalar(lambda s, _: s.accounting.settings.checkpoint_seconds)),
    "accounting.budgets[*].name": Case("renamed", scalar(in_accounting)),
    "accounting.budgets[*].gpuHours": Case(20, scalar(in_accounting)),
    "accounting.budgets[*].subject": Case("bob", scalar(in_accounting)),
    "accounting.budgets[*].scope": Case("group", scalar(in_accounting)),
    "accounting.budgets[*].period": Case("week", scalar(in_accounting)),
    "accounting.budgets[*].action": Case("limitGpus", scalar(in_accounting)),
    "accounting.budgets[*].limitGpus": Case(4, scalar(in_accounting)),
    "leaderElection.enabled": Case(False),
    "leaderElection.leaseName": Case("other-lease"),
    "leaderElection.leaseNamespace": Case("ai-system"),
    "leaderElection.leaseDurationSeconds": Case(30),
    "leaderElection.renewDeadlineSeconds": Case(10),
    "leaderElection.retryPeriodSeconds": Case(3),
    "queues[*].name": Case("production", TENANCY),
    "queues[*].level": Case(3, TENANCY),
    "queues[*].weight": Case(2.5, TENANCY),
    "queues[*].quota.*": Case("32", ((admitted, None), *TENANCY)),
    # The engine orders by the value it holds (prod is at the top level: nothing to promote it to);
    # test_a_new_promotion_bound_reorders_the_pods_already_waiting shows a batch pod promoted by a reload.
    "queues[*].promoteAfterSeconds": Case(45, TENANCY),
    # The StrictFIFO check reads the queue's strategy from the config it is handed, at every attempt.
    "queues[*].queueingStrategy": Case("StrictFIFO", scalar(in_strict_fifo)),
    "taskRules[*].name": Case("renamed", scalar(in_task_controller)),
    "taskRules[*].kind": Case("notebook", scalar(in_task_controller)),
    "taskRules[*].domain": Case("CV", scalar(in_task_controller)),
    "taskRules[*].minModelParameters": Case(99, scalar(in_task_controller)),
    "taskRules[*].minGpus": Case(4, scalar(in_task_controller)),
    "taskRules[*].prefer.*": Case("half", scalar(in_task_controller)),
    "taskRules[*].avoid.*": Case("big", scalar(in_task_controller)),
    "taskRules[*].weight": Case(90, scalar(in_task_controller)),
    "taskRules[*].required": Case(True, scalar(in_task_controller)),
    "groups.*.level": Case(4, TENANCY),
    "groups.*.share": Case(3, TENANCY),
    "groups.*.min.*": Case("4", TENANCY),
    "groups.*.max.*": Case("40", ((admitted, None), *TENANCY)),
    "users.*.group": Case("nlp", ((lambda s, _: tenant(s), lambda c, _: tenant_view(c)), *TENANCY)),
    "users.*.level": Case(5, TENANCY),
    "users.*.max.*": Case("8", ((admitted, None), *TENANCY)),
    "namespaces.*.user": Case("bob", ((lambda s, _: tenant(s), lambda c, _: tenant_view(c)), *TENANCY)),
    "namespaces.*.defaultQueue": Case(
        "prod", ((lambda s, _: tenant(s), lambda c, _: tenant_view(c)), *TENANCY)
    ),
    "namespaces.*.trustUserLabel": Case(
        True,
        (
            (
                lambda s, _: tenant(s, {"ai-scheduler.io/user": "bob"}),
                lambda c, _: tenant_view(c, labelled=True),
            ),
            *TENANCY,
        ),
    ),
    "policies.*.weights.*": Case(2.5, TENANCY),
    "policies.*.maxWaitSeconds": Case(600, TENANCY),
    "policies.*.fairShareHalfLifeSeconds": Case(900, TENANCY),
    "activePolicy": Case(
        "fifo", ((lambda s, _: s.priorities.config.policy.name, lambda c, _: c.policy.name),)
    ),
}


# --- the schema's keys -------------------------------------------------------------------------------


def test_every_schema_key_has_a_reload_case() -> None:
    keys = set(leaf_keys())
    assert keys - set(CASES) == set(), "new config keys: decide whether reload applies them, add a case"
    assert set(CASES) - keys == set(), "cases for keys the schema no longer has"
    assert keys >= RESTART_REQUIRED, "RESTART_REQUIRED names keys the schema does not have"
    for key, case in CASES.items():
        assert case.uses or key in RESTART_REQUIRED, f"{key} is claimed live but nothing reads it back"


def test_leaf_keys_are_the_keys_the_parser_accepts() -> None:
    """The keys derived from the dataclasses are exactly those the parser knows, section by section."""
    children: dict[str, set[str]] = {}
    for key in leaf_keys():
        tokens = key.split(".")
        for i, token in enumerate(tokens):
            if token != ANY_NAME:  # names (of groups, of resources...) are the operator's, not the schema's
                children.setdefault(".".join(tokens[:i]), set()).add(token.removesuffix(ANY_INDEX))
    s = config_schema
    assert children == {
        "": set(s._TOP_LEVEL_KEYS),
        "profiles[*]": set(s._PROFILE_KEYS),
        "profiles[*].scores[*]": set(s._SCORE_KEYS),
        "scheduling": set(s._SCHEDULING_KEYS),
        "gpu": {"stalenessSeconds"},
        "prediction": set(s._PREDICTION_KEYS),
        "server": set(s._SERVER_KEYS),
        "accounting": set(s._ACCOUNTING_KEYS),
        "accounting.budgets[*]": set(s._BUDGET_KEYS),
        "leaderElection": set(s._LEADER_ELECTION_KEYS),
        "queues[*]": set(s._QUEUE_KEYS),
        "taskRules[*]": set(s._TASK_RULE_KEYS),
        "groups.*": set(s._GROUP_KEYS),
        "users.*": set(s._USER_KEYS),
        "namespaces.*": set(s._NAMESPACE_KEYS),
        "policies.*": set(s._POLICY_KEYS),
    }


def test_changed_keys_names_leaves_and_whole_entries() -> None:
    old = parse_config(BASE)
    data = changed(("groups", "vision", "max", "nvidia.com/gpu"), 8)
    data["groups"]["extra"] = {"level": 1}
    data["queues"].append({"name": "more"})
    data["scheduling"]["bindConcurrency"] = 4
    found = [(c.path, c.key) for c in changed_keys(old, parse_config(data))]
    assert found == [
        ("scheduling.bindConcurrency", "scheduling.bindConcurrency"),
        ("queues[2]", "queues[*]"),
        ("groups.vision.max['nvidia.com/gpu']", "groups.*.max.*"),
        ("groups.extra", "groups.*"),
    ]
    assert changed_keys(old, parse_config(copy.deepcopy(BASE))) == []
    assert within("profiles[*].scores[*].weight", "profiles[*]")
    assert within("server.port", "server.port") and not within("server.port", "server.bindAddress")


# --- the running daemon ------------------------------------------------------------------------------


@dataclass
class Running:
    scheduler: Scheduler
    log: io.BytesIO

    def reload(self, data: dict[str, Any]) -> dict[str, Any]:
        """Apply a config as the watcher and SIGHUP do; the reload's log line."""
        before = len(self.lines())
        self.scheduler.reload.apply(parse_config(data))
        [line] = [line for line in self.lines()[before:] if line["event"] == "config.reloaded"]
        return line

    def lines(self) -> list[dict[str, Any]]:
        return [orjson.loads(line) for line in self.log.getvalue().splitlines() if line.strip()]


@pytest.fixture
async def running() -> AsyncIterator[Running]:
    async with SimApiServer() as sim:
        for i in range(4):
            sim.create("nodes", make_node(f"n{i}", labels={ZONE: f"z{i % 2}", RACK: f"r{i}"}))
        client = await KubeClient.connect(host=sim.url)
        log = io.BytesIO()
        scheduler = Scheduler(parse_config(BASE), client, JsonLogger(stream=log), serve_http=False, seed=1)
        task = asyncio.create_task(scheduler.run())
        try:
            for _ in range(1000):
                if scheduler.ready.is_set() and scheduler.cache.node_count == 4:
                    break
                await asyncio.sleep(0.01)
            assert scheduler.ready.is_set(), "the daemon did not get ready"
            yield Running(scheduler, log)
        finally:
            scheduler.stop()
            await asyncio.wait_for(task, 15)
            await client.close()


def _mismatches(s: Scheduler, case: Case, config: Config, path: Path) -> list[str]:
    found = []
    for i, (live, view) in enumerate(case.uses):
        held, expected = live(s, path), (view or value_at)(config, path)
        if held != expected:
            found.append(f"use {i}: running {held!r}, config says {expected!r}")
    return found


async def _settled(s: Scheduler, case: Case, config: Config, path: Path) -> list[str]:
    """What differs once the daemon's loops have had a moment (the priority loop re-reads its period when
    the reload wakes it): 'at once' means within a few turns of the event loop."""
    for _ in range(50):
        problems = _mismatches(s, case, config, path)
        if not problems:
            return []
        await asyncio.sleep(0.01)
    return problems


async def test_every_key_changed_on_a_running_daemon_takes_effect_or_is_named(running: Running) -> None:
    base = parse_config(BASE)
    failures: list[str] = []
    for key in leaf_keys():
        case = CASES[key]
        path = instance(key)
        where = dotted(path)
        running.reload(BASE)
        new = parse_config(changed(path, case.new))
        # Usually just `where`; a top-level schedulerName also renames the first profile, which has none.
        expected = sorted(c.path for c in changed_keys(base, new))
        assert where in expected, f"{key}: the case must change {where}"
        for problem in await _settled(running.scheduler, case, base, path):
            failures.append(f"{key}: before the change, {problem}")
        line = running.reload(changed(path, case.new))
        if key in RESTART_REQUIRED:
            if line["restart_required_for"] != expected or line["applied"] != []:
                failures.append(f"{key}: restart required, but the log line says {line}")
            # Not in effect, truly: the components still hold the value they started with.
            for problem in _mismatches(running.scheduler, case, base, path):
                failures.append(f"{key}: should still run with its old value, but {problem}")
        else:
            if line["applied"] != expected or line["restart_required_for"] != []:
                failures.append(f"{key}: applied live, but the log line says {line}")
            for problem in await _settled(running.scheduler, case, new, path):
                failures.append(f"{key}: {problem}")
    assert not failures, "\n".join(failures)


async def test_restart_required_keys_stay_named_until_the_file_is_back(running: Running) -> None:
    port = changed(("server", "port"), 10999)
    assert running.reload(port)["restart_required_for"] == ["server.port"]
    again = copy.deepcopy(port)
    again["scheduling"]["eventRepeatSeconds"] = 9
    line = running.reload(again)
    # Still not in effect after a reload that changed something else, and said so.
    assert line["restart_required_for"] == ["server.port"]
    assert line["applied"] == ["scheduling.eventRepeatSeconds"]
    line = running.reload(BASE)  # back to the port it runs with
    assert line["restart_required_for"] == []
    assert line["applied"] == ["scheduling.eventRepeatSeconds"]
    assert "profiles" in line and "path" in line  # the fields the line had before


async def test_a_profile_added_by_reload_takes_the_pods_already_waiting_for_it(running: Running) -> None:
    s = running.scheduler
    client = s.client
    pod = make_pod("late", scheduler_name="later", cpu="100m")
    assert (await client.create_pod(pod)).ok
    for _ in range(100):
        if any(st.record.name == "late" for st in s.cache.pods.values()):
            break
        await asyncio.sleep(0.01)
    assert not any(qp.pod.name == "late" for qp in s.queue.pending()), "no profile is named 'later' yet"
    data = copy.deepcopy(BASE)
    data["profiles"].append({"schedulerName": "later"})
    line = running.reload(data)
    assert line["applied"] == ["profiles[2]"] and "later" in line["profiles"]
    for _ in range(500):
        state = next((st for st in s.cache.pods.values() if st.record.name == "late"), None)
        if state is not None and state.node:
            break
        await asyncio.sleep(0.01)
    else:
        raise AssertionError("the waiting pod of the new profile was never placed")
    running.reload(BASE)
    assert "later" not in s.frameworks


async def _until(predicate: Callable[[], object], what: str) -> None:
    for _ in range(500):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


async def test_a_new_watch_idle_bound_reopens_the_watches_without_a_relist(running: Running) -> None:
    """The idle bound is fixed when a watch opens: a reload that changes it reopens the watches at once,
    from where they were."""
    s = running.scheduler
    await _until(lambda: len(s.client._watches) >= 2, "the nodes and pods watches open")
    before = set(s.client._watches)
    listed = len([line for line in running.lines() if line["event"].startswith("informer.")])
    running.reload(changed(("scheduling", "watchIdleSeconds"), 45))
    await _until(
        lambda: len(s.client._watches) == len(before) and not set(s.client._watches) & before,
        "every watch reopened",
    )
    assert len([line for line in running.lines() if line["event"].startswith("informer.")]) == listed, (
        "resumed from their resourceVersion: no relist"
    )
    assert (await s.client.create_node(make_node("n-after"))).ok
    await _until(lambda: s.cache.node_record("n-after") is not None, "the reopened watch delivers events")
    reopened = set(s.client._watches)
    running.reload(changed(("scheduling", "watchIdleSeconds"), 45) | {"activePolicy": "fifo"})
    await asyncio.sleep(0.1)
    assert set(s.client._watches) == reopened, "a reload that keeps the idle bound keeps the watches"


async def test_a_new_promotion_bound_reorders_the_pods_already_waiting(running: Running) -> None:
    """promoteAfterSeconds set by a reload counts the wait of pods already queued (since they entered
    the queue, not since the reload): a batch pod (level 1) that waits for a GPU no node has is tried
    again at the reload, ordered at prod's level 0, and its decision line says it was promoted."""
    s = running.scheduler
    assert (await s.client.create_pod(make_pod("starved", namespace="team", gpus=1))).ok

    def decisions() -> list[dict[str, Any]]:
        return [d for d in running.lines() if d["event"] == "decision" and d["pod"] == "team/starved"]

    await _until(decisions, "a first attempt")
    assert all("promoted" not in d for d in decisions()) and decisions()[0]["queue"] == "batch"
    await asyncio.sleep(0.2)
    data = copy.deepcopy(BASE)
    data["queues"][1]["promoteAfterSeconds"] = 0.1
    before = len(decisions())
    line = running.reload(data)
    assert line["applied"] == ["queues[1].promoteAfterSeconds"] and line["restart_required_for"] == []
    await _until(lambda: len(decisions()) > before, "an attempt after the reload")
    latest = decisions()[-1]
    assert latest["promoted"] is True and latest["queueLevel"] == 0 and latest["queue"] == "batch"
    running.reload(BASE)
    count = len(decisions())
    await _until(lambda: len(decisions()) > count, "an attempt after the key went away")
    assert "promoted" not in decisions()[-1], "removing the key ends the promotion"


# --- components that take new settings while they hold work -------------------------------------------


def queued_pod(name: str) -> PodRecord:
    return Pod(name).uid(name).rv("1").record()


async def test_queue_reconfigure_moves_running_backoffs_and_the_flush() -> None:
    now = [100.0]
    queue = SchedulingQueue(
        initial_backoff=10, max_backoff=100, unschedulable_flush=300, clock=lambda: now[0]
    )
    record = queued_pod("a")
    queue.add(record)
    qp = queue.pop_nowait()
    assert qp is not None
    queue.requeue(qp, unschedulable=False)
    assert queue.counts()["backoff"] == 1  # until 110
    now[0] = 102.0
    queue.reconfigure(initial_backoff=1, max_backoff=100, unschedulable_flush=300)
    assert queue.counts()["active"] == 1, "the shorter backoff ended at 101"
    qp = queue.pop_nowait()
    assert qp is not None
    queue.requeue(qp, unschedulable=True)
    now[0] = 150.0
    queue.reconfigure(initial_backoff=1, max_backoff=100, unschedulable_flush=30)
    assert queue.counts()["active"] == 1, "unschedulable since 102: past the new 30 s flush"
    assert queue.unschedulable_flush == 30 and queue.backoff_duration(1) == 1
    queue.close()


def test_a_new_assume_timeout_moves_the_deadlines_already_running() -> None:
    now = [0.0]
    cache = SchedulerCache(assume_timeout=30, clock=lambda: now[0])
    cache.set_node(NodeRecord.from_api(make_node("n1")))
    record = queued_pod("a")
    cache.assume(record, "n1")
    cache.binding_finished("a")
    cache.set_assume_timeout(5)
    now[0] = 6.0
    assert [p.uid for p in cache.expire_assumed()] == ["a"], "expired 5 s after its binding, not 30"
