"""The config file: defaults, every kind of refusal with its exact key path, YAML errors, reload."""

from __future__ import annotations

import asyncio
import os
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from paths import ROOT

from ai_scheduler.config import (
    DEFAULT_POLICY,
    FILTER_PLUGINS,
    POLICY_FACTORS,
    RESOURCE_SCORERS,
    SCORE_PLUGINS,
    Config,
    ConfigError,
    ConfigWatcher,
    FrozenMap,
    GpuSettings,
    GroupSpec,
    NamespaceSpec,
    PolicySpec,
    Profile,
    QueueSpec,
    SchedulingSettings,
    ScoreSpec,
    ServerSettings,
    UserSpec,
    default_config,
    load_config,
    parse_config,
)
from ai_scheduler.config.loader import MAX_NESTING


def refusal(data: object) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        parse_config(data, source="test.yaml")
    return info.value


# --- defaults ----------------------------------------------------------------------------------------


def test_defaults_match_the_spec() -> None:
    config = parse_config({})
    assert config.scheduler_name == "ai-scheduler"
    assert config.profiles == (
        Profile(
            "ai-scheduler",
            FILTER_PLUGINS,
            (
                ScoreSpec("NodeResourcesGPUAware", 1, {"cpu": 1, "memory": 1, "nvidia.com/gpu": 1}),
                ScoreSpec("NodeAffinity", 2, {}),
                ScoreSpec("TaintToleration", 3, {}),
                ScoreSpec("FGDScoreCoupled", 10, {}),
                ScoreSpec("GPUAvoidance", 2, {}),
                ScoreSpec("PodTopologySpread", 2, {}),
                ScoreSpec("InterPodAffinity", 2, {}),
                ScoreSpec("DynamicResources", 2, {}),
            ),
        ),
    )
    assert config.scheduling == SchedulingSettings(
        bind_concurrency=64,
        assume_timeout_seconds=30,
        initial_backoff_seconds=1,
        max_backoff_seconds=10,
        unschedulable_flush_seconds=300,
        event_repeat_seconds=300,
        percentage_of_nodes_to_score=0,
        tie_break="nodeOrder",
        backfill=True,
        priority_refresh_seconds=5,
    )
    assert config.gpu == GpuSettings(staleness_seconds=120)
    assert config.server == ServerSettings(port=10251, bind_address="0.0.0.0")
    assert config.queues == ()
    assert config.groups == {} and config.users == {} and config.namespaces == {}
    assert config.policies == {"default": PolicySpec("default", {"taskPriority": 1},
                                                     max_wait_seconds=3600,
                                                     fair_share_half_life_seconds=3600)}
    assert config.active_policy == "default"
    assert config.policy is config.policies["default"]
    assert config.policy == DEFAULT_POLICY
    assert config.queue("default") is None


def test_policy_factor_names() -> None:
    assert POLICY_FACTORS == ("userLevel", "groupLevel", "taskPriority", "waitingTime", "jobSize",
                              "estimatedRuntime", "fairShare", "queueLevel")


def test_plugin_name_constants() -> None:
    assert FILTER_PLUGINS == ("NodeUnschedulable", "NodeName", "TaintToleration", "NodeReady",
                              "NodeAffinity", "NodePorts", "NodeResourcesFit", "GPU", "VolumeRestrictions",
                              "NodeVolumeLimits", "VolumeBinding", "VolumeZone", "PodTopologySpread",
                              "InterPodAffinity", "DynamicResources")
    assert SCORE_PLUGINS == ("NodeResourcesLeastAllocated", "NodeResourcesMostAllocated",
                             "NodeResourcesBalancedAllocation", "NodeResourcesGPUAware", "NodeAffinity",
                             "TaintToleration",
                             "GPUBinpack", "GPUSpread", "GPUAvoidance", "GPUFragmentation",
                             "GPUFragmentationCoupled", "FGDScore", "FGDScoreCoupled", "PodTopologySpread",
                             "InterPodAffinity",
                             "DynamicResources")
    assert frozenset({"NodeResourcesLeastAllocated", "NodeResourcesMostAllocated",
                      "NodeResourcesBalancedAllocation", "NodeResourcesGPUAware"}) == RESOURCE_SCORERS


def test_default_yaml_none_and_empty_mapping_agree() -> None:
    assert default_config() == parse_config({}) == parse_config(None)


def test_empty_file_gives_defaults(tmp_path: Path) -> None:
    (tmp_path / "empty.yaml").write_text("")
    (tmp_path / "comments.yaml").write_text("# nothing set\n")
    assert load_config(tmp_path / "empty.yaml") == default_config()
    assert load_config(str(tmp_path / "comments.yaml")) == default_config()


def test_null_sections_take_their_defaults() -> None:
    """A section whose children are all commented out is null in YAML, not an error."""
    data = dict.fromkeys(("profiles", "scheduling", "gpu", "server", "queues", "groups", "users",
                          "namespaces", "policies", "activePolicy"))
    assert parse_config(data) == default_config()
    assert parse_config({"profiles": [{"filters": None, "scores": None}]}) == default_config()


def test_config_is_immutable_hashable_and_picklable() -> None:
    data = {"groups": {"research": {"max": {"cpu": 4}}}, "users": {"ann": {"group": "research"}},
            "queues": [{"name": "q", "quota": {"memory": "1Gi"}}]}
    config = parse_config(data)
    assert config.groups["research"].max == {"cpu": 4000}
    with pytest.raises(TypeError):
        config.groups["x"] = 1  # type: ignore[index]
    with pytest.raises(TypeError):
        config.groups["research"].max["cpu"] = 1  # type: ignore[index]
    with pytest.raises(AttributeError):
        config.groups["research"].level = 1  # type: ignore[misc]
    with pytest.raises(AttributeError):
        config.scheduler_name = "other"  # type: ignore[misc]
    assert hash(config) == hash(parse_config(data))
    assert pickle.loads(pickle.dumps(config)) == config
    error = refusal({"schedulerName": 1})
    assert str(pickle.loads(pickle.dumps(error))) == str(error)


# --- a full, valid config ----------------------------------------------------------------------------


def test_full_config() -> None:
    config = parse_config({
        "schedulerName": "gpu-scheduler",
        "profiles": [
            {"filters": ["NodeResourcesFit", "NodeName"],
             "scores": [
                 {"name": "NodeResourcesMostAllocated", "weight": 5, "resources": {"nvidia.com/gpu": 10}},
                 {"name": "TaintToleration", "weight": 0},
             ]},
            {"schedulerName": "binpack.example.com", "filters": [], "scores": [{"name": "NodeAffinity"}]},
        ],
        "scheduling": {"bindConcurrency": 8, "assumeTimeoutSeconds": 2.5, "initialBackoffSeconds": 0.5,
                       "maxBackoffSeconds": 0.5, "unschedulableFlushSeconds": 60, "eventRepeatSeconds": 0,
                       "percentageOfNodesToScore": 50, "tieBreak": "nodeOrder"},
        "gpu": {"stalenessSeconds": 30},
        "server": {"port": 0, "bindAddress": "::1"},
        "queues": [{"name": "default"}],
        "groups": {"g": {}}, "users": {"u": {"group": "g"}}, "namespaces": {"n": {"user": "u"}},
        "policies": {"p": {"weights": {"fairShare": 1}}},
        "activePolicy": "p",
    })
    assert config.scheduler_name == "gpu-scheduler"
    first, second = config.profiles
    assert first == Profile("gpu-scheduler", ("NodeResourcesFit", "NodeName"),
                            (ScoreSpec("NodeResourcesMostAllocated", 5, {"nvidia.com/gpu": 10}),
                             ScoreSpec("TaintToleration", 0, {})))
    assert second == Profile("binpack.example.com", (), (ScoreSpec("NodeAffinity", 1, {}),))
    assert config.scheduler_names == frozenset({"gpu-scheduler", "binpack.example.com"})
    assert config.profile_for("binpack.example.com") is second
    assert config.profile_for("default-scheduler") is None
    assert config.scheduling == SchedulingSettings(8, 2.5, 0.5, 0.5, 60, 0, 50, "nodeOrder")
    assert isinstance(config.scheduling.assume_timeout_seconds, float)
    assert config.gpu.staleness_seconds == 30
    assert config.server == ServerSettings(0, "::1")
    assert config.queues == (QueueSpec("default"),)
    assert config.groups == {"g": GroupSpec("g")}
    assert config.users == {"u": UserSpec("u", "g")}
    assert config.namespaces == {"n": NamespaceSpec("n", "u")}
    assert config.policies == {"p": PolicySpec("p", {"fairShare": 1})}
    assert config.active_policy == "p"


def test_resource_scorer_without_resources_gets_the_default_weights() -> None:
    config = parse_config({"profiles": [{"scores": [{"name": "NodeResourcesMostAllocated", "weight": 1}]}]})
    assert config.profiles[0].scores[0].resources == {"cpu": 1, "memory": 1, "nvidia.com/gpu": 1}


def test_config_built_in_code_equals_the_parsed_one() -> None:
    assert Config("ai-scheduler", (Profile("ai-scheduler"),)) == default_config()


# --- tenancy, queues and policy ---------------------------------------------------------------------

TENANCY = {
    "queues": [
        {"name": "prod", "level": 0, "weight": 2, "quota": {"nvidia.com/gpu": 16, "cpu": "64"}},
        {"name": "batch", "level": 1, "weight": 0.5, "promoteAfterSeconds": 600,
         "queueingStrategy": "StrictFIFO"},
        {"name": "default"},
    ],
    "groups": {
        "vision": {"level": 2, "share": 1.5, "min": {"nvidia.com/gpu": 8}, "max": {"nvidia.com/gpu": 16}},
        "nlp": {"max": {"ai-scheduler.io/gpu-memory": "80Gi", "ai-scheduler.io/gpu-count": 4,
                        "memory": "512Gi", "cpu": 0.5}},
        "guests": None,
    },
    "users": {
        "alice": {"group": "vision", "level": 3, "max": {"nvidia.com/gpu": 8}},
        "bob": {"group": "vision", "max": {"nvidia.com/gpu": 8, "cpu": "1500m"}},
        "carol": {"group": "nlp", "max": {"ai-scheduler.io/gpu-memory": "40Gi"}},
        "dave": {"group": "guests"},
    },
    "namespaces": {
        "team-vision": {"user": "alice", "defaultQueue": "prod", "trustUserLabel": True},
        "nlp": {"user": "carol"},
    },
    "policies": {
        "fair": {"weights": {"fairShare": 2, "waitingTime": 0.5, "jobSize": -1},
                 "maxWaitSeconds": 600, "fairShareHalfLifeSeconds": 86400},
        "fifo": {"weights": {"waitingTime": 1}},
    },
    "activePolicy": "fifo",
    "scheduling": {"backfill": False, "priorityRefreshSeconds": 0.5},
}


def test_full_tenancy_config() -> None:
    config = parse_config(TENANCY)
    prod, batch, default = config.queues
    assert prod == QueueSpec("prod", 0, 2, {"nvidia.com/gpu": 16, "cpu": 64_000})
    assert batch == QueueSpec("batch", level=1, weight=0.5, quota={}, promote_after_seconds=600,
                              queueing_strategy="StrictFIFO")
    assert prod.queueing_strategy == default.queueing_strategy == "BestEffortFIFO"
    assert default == QueueSpec("default", 0, 1, {})
    assert prod.promote_after_seconds is None and default.promote_after_seconds is None  # never promoted
    assert isinstance(batch.promote_after_seconds, float)
    assert isinstance(prod.weight, float)
    assert config.queue("batch") is batch
    assert config.queue("nope") is None
    assert config.groups == {
        "vision": GroupSpec("vision", 2, 1.5, {"nvidia.com/gpu": 8}, {"nvidia.com/gpu": 16}),
        "nlp": GroupSpec("nlp", 0, 1, {}, {"ai-scheduler.io/gpu-memory": 80 * 2**30,
                                           "ai-scheduler.io/gpu-count": 4,
                                           "memory": 512 * 2**30, "cpu": 500}),
        "guests": GroupSpec("guests"),
    }
    assert config.users == {
        "alice": UserSpec("alice", "vision", 3, {"nvidia.com/gpu": 8}),
        "bob": UserSpec("bob", "vision", 0, {"nvidia.com/gpu": 8, "cpu": 1500}),
        "carol": UserSpec("carol", "nlp", 0, {"ai-scheduler.io/gpu-memory": 40 * 2**30}),
        "dave": UserSpec("dave", "guests", 0, {}),
    }
    assert config.namespaces == {
        "team-vision": NamespaceSpec("team-vision", "alice", "prod", True),
        "nlp": NamespaceSpec("nlp", "carol", None, False),
    }
    assert config.policies == {
        "fair": PolicySpec("fair", {"fairShare": 2, "waitingTime": 0.5, "jobSize": -1}, 600, 86400),
        "fifo": PolicySpec("fifo", {"waitingTime": 1}, 3600, 3600),
    }
    assert list(config.policies) == ["fair", "fifo"]
    assert config.active_policy == "fifo"
    assert config.policy is config.policies["fifo"]
    assert config.scheduling.backfill is False
    assert config.scheduling.priority_refresh_seconds == 0.5
    assert all(isinstance(v, int) for g in config.groups.values() for v in g.max.values())
    assert all(isinstance(w, float) for w in config.policies["fair"].weights.values())
    assert isinstance(config.groups["vision"].max, FrozenMap)
    assert hash(config) == hash(parse_config(TENANCY))


def test_tenancy_defaults() -> None:
    config = parse_config({"queues": [{"name": "q"}], "groups": {"g": {}}, "users": {"u": {"group": "g"}},
                           "namespaces": {"ns": {"user": "u"}},
                           "policies": {"p": {"weights": {"jobSize": 1}}}})
    assert config.queues == (QueueSpec("q", level=0, weight=1, quota={}),)
    assert config.groups["g"] == GroupSpec("g", level=0, share=1, min={}, max={})
    assert config.users["u"] == UserSpec("u", "g", level=0, max={})
    assert config.namespaces["ns"] == NamespaceSpec("ns", "u", default_queue=None, trust_user_label=False)
    assert config.policies["p"] == PolicySpec("p", {"jobSize": 1}, max_wait_seconds=3600,
                                              fair_share_half_life_seconds=3600)


def test_active_policy_defaults_to_the_first_policy() -> None:
    policies = {"b": {"weights": {"userLevel": 1}}, "a": {"weights": {"groupLevel": 1}}}
    assert parse_config({"policies": policies}).active_policy == "b"
    assert parse_config({"policies": policies, "activePolicy": None}).active_policy == "b"
    assert parse_config({"policies": policies, "activePolicy": "a"}).policy.weights == {"groupLevel": 1}


def test_built_in_default_policy() -> None:
    """No policies (absent, null or empty) means the built-in "default", which activePolicy may name."""
    cases: list[dict[str, Any]] = [
        {}, {"policies": None}, {"policies": {}}, {"policies": {}, "activePolicy": "default"}
    ]
    for data in cases:
        config = parse_config(data)
        assert config.policies == {"default": DEFAULT_POLICY}
        assert config.policy == PolicySpec("default", {"taskPriority": 1}, 3600, 3600)
    # Given policies replace the built-in one.
    assert "default" not in parse_config({"policies": {"p": {"weights": {"jobSize": 1}}}}).policies


def test_every_policy_factor_is_accepted() -> None:
    weights = {factor: i - 3 for i, factor in enumerate(POLICY_FACTORS)}
    assert parse_config({"policies": {"all": {"weights": weights}}}).policy.weights == weights


def test_group_min_may_equal_max_and_users_may_fill_the_group() -> None:
    config = parse_config({
        "groups": {"g": {"min": {"cpu": "2", "memory": "1Gi"}, "max": {"cpu": 2000e-3, "nvidia.com/gpu": 2}}},
        "users": {"a": {"group": "g", "max": {"nvidia.com/gpu": 1, "memory": "8Gi"}},
                  "b": {"group": "g", "max": {"nvidia.com/gpu": 1}},
                  "c": {"group": "g"}},
    })
    assert config.groups["g"].min == {"cpu": 2000, "memory": 2**30}
    assert config.groups["g"].max == {"cpu": 2000, "nvidia.com/gpu": 2}


def test_group_without_max_puts_no_bound_on_its_users() -> None:
    config = parse_config({"groups": {"g": {"min": {"nvidia.com/gpu": 1}}},
                           "users": {"a": {"group": "g", "max": {"nvidia.com/gpu": 100}}}})
    assert config.users["a"].max == {"nvidia.com/gpu": 100}


def test_users_max_sum_message_reads_as_specified() -> None:
    error = refusal({"groups": {"vision": {"max": {"nvidia.com/gpu": 16}}},
                     "users": {"alice": {"group": "vision", "max": {"nvidia.com/gpu": 8}},
                               "bob": {"group": "vision", "max": {"nvidia.com/gpu": 16}}}})
    assert str(error) == ("test.yaml: users: the users of group vision may use up to nvidia.com/gpu 24, "
                          "above the group's max 16 (alice 8, bob 16)")


def test_group_min_above_max_message_reads_as_specified() -> None:
    error = refusal({"groups": {"vision": {"min": {"nvidia.com/gpu": 20}, "max": {"nvidia.com/gpu": 16}}}})
    assert str(error) == "test.yaml: groups.vision.min['nvidia.com/gpu']: 20 is above groups.vision.max (16)"


def test_unknown_factor_message_reads_as_specified() -> None:
    error = refusal({"policies": {"default": {"weights": {"speed": 1}}}})
    assert str(error) == ("test.yaml: policies.default.weights.speed: unknown factor 'speed'; known: "
                          "userLevel, groupLevel, taskPriority, waitingTime, jobSize, estimatedRuntime, "
                          "fairShare, queueLevel")


def test_the_examples_in_default_yaml_comments_are_valid() -> None:
    """default.yaml documents queues, task rules, groups, users and namespaces with commented examples: they
    must work."""
    examples: dict[str, Any] = {}
    lines: list[str] = []
    text = (ROOT / "ai_scheduler" / "config" / "default.yaml").read_text()
    for line in text.splitlines(keepends=True):
        if line.startswith("#   "):
            lines.append(line[2:])
        elif lines and not line.startswith("#"):
            examples[line.split(":")[0]] = yaml.safe_load("".join(lines))
            lines = []
    assert set(examples) == {"queues", "taskRules", "groups", "users", "namespaces"}
    config = parse_config(examples)
    first = config.task_rules[0]
    assert (first.name, first.domain, first.min_model_parameters, dict(first.prefer), first.weight) == (
        "large-nlp-on-nvlink", "NLP", 10_000_000_000, {"ai-scheduler.io/nvlink": "full"}, 80)
    assert (config.task_rules[1].kind, dict(config.task_rules[1].avoid)) == (
        "notebook", {"ai-scheduler.io/pool": "large-gangs"})
    assert config.queues == (QueueSpec("prod", 0, 1, {"nvidia.com/gpu": 16, "cpu": 64_000}, 3600.0),)
    assert config.groups == {"vision": GroupSpec("vision", 2, 1, {"nvidia.com/gpu": 8},
                                                 {"nvidia.com/gpu": 16})}
    assert config.users == {"alice": UserSpec("alice", "vision", 3, {"nvidia.com/gpu": 8})}
    assert config.namespaces == {"team-vision": NamespaceSpec("team-vision", "alice", "prod", False)}


# --- refusals: exact key path and reason -------------------------------------------------------------


@pytest.mark.parametrize(("data", "key", "reason"), [
    # unknown keys, at every level we define
    ({"shedulerName": "x"}, "", "unknown key 'shedulerName' (did you mean 'schedulerName'?); expected one of "
                                "schedulerName, profiles, scheduling, gpu, prediction, server, accounting, "
                                "leaderElection, queues, taskRules, groups, users, namespaces, policies, "
                                "activePolicy"),
    ({"profiles": [{"filter": []}]}, "profiles[0]", "unknown key 'filter' (did you mean 'filters'?)"),
    ({"profiles": [{"scores": [{"name": "NodeAffinity", "wieght": 1}]}]}, "profiles[0].scores[0]",
     "unknown key 'wieght' (did you mean 'weight'?)"),
    ({"scheduling": {"bindConcurency": 1}}, "scheduling", "unknown key 'bindConcurency'"),
    ({"gpu": {"sharing": True}}, "gpu", "unknown key 'sharing'; expected one of stalenessSeconds"),
    ({"server": {"host": "x"}}, "server", "unknown key 'host'"),
    ({"leaderElection": {"leaseDuration": 15}}, "leaderElection",
     "unknown key 'leaseDuration' (did you mean 'leaseDurationSeconds'?)"),
    ({"leaderElection": {"enabled": "yes"}}, "leaderElection.enabled", "must be true or false, got 'yes'"),
    ({"leaderElection": {"leaseNamespace": "Kube_System"}}, "leaderElection.leaseNamespace",
     "must be empty (the daemon's own namespace) or a DNS-1123 label, got 'Kube_System'"),
    ({"leaderElection": {"renewDeadlineSeconds": 12}}, "leaderElection.renewDeadlineSeconds",
     "must be < leaderElection.leaseDurationSeconds (12), got 12"),
    ({"leaderElection": {"retryPeriodSeconds": 7}}, "leaderElection.retryPeriodSeconds",
     "must be < leaderElection.renewDeadlineSeconds / 1.2 (8 / 1.2), got 7"),
    ({1: 2}, "", "unknown key 1;"),
    # the document and sections
    (["a"], "", "must be a mapping, got a list"),
    ("text", "", "must be a mapping, got 'text'"),
    ({"scheduling": 5}, "scheduling", "must be a mapping, got 5"),
    ({"gpu": []}, "gpu", "must be a mapping, got a list"),
    ({"server": "x"}, "server", "must be a mapping, got 'x'"),
    # schedulerName
    ({"schedulerName": "AI_Scheduler"}, "schedulerName", "must be a DNS-1123 subdomain"),
    ({"schedulerName": "-x"}, "schedulerName", "got '-x'"),
    ({"schedulerName": "a" * 254}, "schedulerName", "at most 253 characters"),
    ({"schedulerName": 5}, "schedulerName", "must be a string, got 5"),
    ({"schedulerName": None}, "schedulerName", "must be a string, got null"),
    # profiles
    ({"profiles": []}, "profiles", "must list at least one profile"),
    ({"profiles": {"a": 1}}, "profiles", "must be a list, got a mapping"),
    ({"profiles": ["x"]}, "profiles[0]", "must be a mapping, got 'x'"),
    ({"profiles": [{}, {}]}, "profiles[1].schedulerName", "is required for every profile but the first"),
    ({"profiles": [{}, {"schedulerName": "ai-scheduler"}]}, "profiles[1].schedulerName",
     "duplicate scheduler name 'ai-scheduler' (also profiles[0])"),
    ({"profiles": [{"schedulerName": "Bad Name"}]}, "profiles[0].schedulerName",
     "must be a DNS-1123 subdomain"),
    # filters
    ({"profiles": [{"filters": ["NodeName", "NodeReady", "NodeReadyy"]}]}, "profiles[0].filters[2]",
     "unknown filter plugin 'NodeReadyy'; known: NodeUnschedulable, NodeName, TaintToleration, NodeReady, "
     "NodeAffinity, NodePorts, NodeResourcesFit, GPU"),
    ({"profiles": [{"filters": ["NodeName", "NodeName"]}]}, "profiles[0].filters[1]",
     "duplicate filter plugin 'NodeName' (also profiles[0].filters[0])"),
    ({"profiles": [{"filters": "NodeName"}]}, "profiles[0].filters", "must be a list, got 'NodeName'"),
    ({"profiles": [{"filters": [{"name": "NodeName"}]}]}, "profiles[0].filters[0]",
     "must be a string, got a mapping"),
    # scores
    ({"profiles": [{"scores": [{"name": "NodeAffinity"}, {"name": "TaintToleration", "weight": "heavy"}]}]},
     "profiles[0].scores[1].weight", "must be an integer between 0 and 100, got 'heavy'"),
    ({"profiles": [{"scores": [{"name": "NodeAffinity", "weight": 101}]}]}, "profiles[0].scores[0].weight",
     "must be an integer between 0 and 100, got 101"),
    ({"profiles": [{"scores": [{"name": "NodeAffinity", "weight": -1}]}]}, "profiles[0].scores[0].weight",
     "got -1"),
    ({"profiles": [{"scores": [{"name": "NodeAffinity", "weight": 1.5}]}]}, "profiles[0].scores[0].weight",
     "got 1.5"),
    ({"profiles": [{"scores": [{"name": "NodeAffinity", "weight": True}]}]}, "profiles[0].scores[0].weight",
     "got true"),
    ({"profiles": [{"scores": [{"name": "NodeAffinity", "weight": None}]}]}, "profiles[0].scores[0].weight",
     "got null"),
    ({"profiles": [{"scores": [{"weight": 1}]}]}, "profiles[0].scores[0].name", "is required"),
    ({"profiles": [{"scores": [{"name": "NodeResourcesFit"}]}]}, "profiles[0].scores[0].name",
     "unknown score plugin 'NodeResourcesFit'; known: NodeResourcesLeastAllocated, "
     "NodeResourcesMostAllocated, NodeResourcesBalancedAllocation, NodeResourcesGPUAware, NodeAffinity, "
     "TaintToleration, GPUBinpack, GPUSpread, GPUAvoidance"),
    ({"profiles": [{"scores": [{"name": "NodeAffinity"}, {"name": "NodeAffinity"}]}]},
     "profiles[0].scores[1].name", "duplicate score plugin 'NodeAffinity' (also profiles[0].scores[0])"),
    ({"profiles": [{"scores": ["NodeAffinity"]}]}, "profiles[0].scores[0]", "must be a mapping"),
    ({"profiles": [{"scores": [{"name": "NodeAffinity", "resources": {"cpu": 1}}]}]},
     "profiles[0].scores[0].resources",
     "only NodeResourcesBalancedAllocation, NodeResourcesGPUAware, NodeResourcesLeastAllocated, "
     "NodeResourcesMostAllocated take resources"),
    ({"profiles": [{"scores": [{"name": "NodeResourcesLeastAllocated",
                                 "resources": {"nvidia.com/gpu": 0}}]}]},
     "profiles[0].scores[0].resources['nvidia.com/gpu']", "must be an integer between 1 and 100, got 0"),
    ({"profiles": [{"scores": [{"name": "NodeResourcesLeastAllocated", "resources": {"cpu": "1"}}]}]},
     "profiles[0].scores[0].resources.cpu", "must be an integer between 1 and 100, got '1'"),
    ({"profiles": [{"scores": [{"name": "NodeResourcesLeastAllocated", "resources": {}}]}]},
     "profiles[0].scores[0].resources", "must name at least one resource"),
    ({"profiles": [{"scores": [{"name": "NodeResourcesLeastAllocated", "resources": {"nvidia gpu": 1}}]}]},
     "profiles[0].scores[0].resources", "got 'nvidia gpu'"),
    ({"profiles": [{"scores": [{"name": "NodeResourcesLeastAllocated", "resources": ["cpu"]}]}]},
     "profiles[0].scores[0].resources", "must be a mapping, got a list"),
    # scheduling
    ({"scheduling": {"bindConcurrency": 0}}, "scheduling.bindConcurrency",
     "must be an integer between 1 and 1024, got 0"),
    ({"scheduling": {"bindConcurrency": 1025}}, "scheduling.bindConcurrency", "got 1025"),
    ({"scheduling": {"assumeTimeoutSeconds": 0}}, "scheduling.assumeTimeoutSeconds", "must be > 0, got 0"),
    ({"scheduling": {"assumeTimeoutSeconds": "30s"}}, "scheduling.assumeTimeoutSeconds",
     "must be a number, got '30s'"),
    ({"scheduling": {"assumeTimeoutSeconds": True}}, "scheduling.assumeTimeoutSeconds",
     "must be a number, got true"),
    ({"scheduling": {"assumeTimeoutSeconds": float("inf")}}, "scheduling.assumeTimeoutSeconds",
     "must be a number, got inf"),
    ({"scheduling": {"initialBackoffSeconds": -1}}, "scheduling.initialBackoffSeconds",
     "must be > 0, got -1"),
    ({"scheduling": {"maxBackoffSeconds": 0.5}}, "scheduling.maxBackoffSeconds",
     "must be >= scheduling.initialBackoffSeconds (1), got 0.5"),
    ({"scheduling": {"initialBackoffSeconds": 2, "maxBackoffSeconds": 1}}, "scheduling.maxBackoffSeconds",
     "must be >= scheduling.initialBackoffSeconds (2), got 1"),
    ({"scheduling": {"initialBackoffSeconds": 20}}, "scheduling.initialBackoffSeconds",
     "must be <= scheduling.maxBackoffSeconds (10, the default), got 20"),
    ({"scheduling": {"unschedulableFlushSeconds": 0}}, "scheduling.unschedulableFlushSeconds", "must be > 0"),
    ({"scheduling": {"eventRepeatSeconds": -0.1}}, "scheduling.eventRepeatSeconds", "must be >= 0, got -0.1"),
    ({"scheduling": {"percentageOfNodesToScore": 101}}, "scheduling.percentageOfNodesToScore",
     "must be an integer between 0 and 100, got 101"),
    ({"scheduling": {"percentageOfNodesToScore": -1}}, "scheduling.percentageOfNodesToScore",
     "must be an integer between 0 and 100, got -1"),
    ({"scheduling": {"percentageOfNodesToScore": 50.0}}, "scheduling.percentageOfNodesToScore", "got 50.0"),
    ({"scheduling": {"tieBreak": "first"}}, "scheduling.tieBreak",
     "must be one of random, nodeOrder, got 'first'"),
    ({"scheduling": {"tieBreak": 1}}, "scheduling.tieBreak", "must be a string, got 1"),
    # gpu and server
    ({"gpu": {"stalenessSeconds": 0}}, "gpu.stalenessSeconds", "must be > 0, got 0"),
    ({"server": {"port": 65536}}, "server.port", "must be an integer between 0 and 65535, got 65536"),
    ({"server": {"port": "10251"}}, "server.port", "got '10251'"),
    ({"server": {"bindAddress": 0}}, "server.bindAddress", "must be a string, got 0"),
    ({"server": {"bindAddress": "0.0.0.0:80"}}, "server.bindAddress",
     "must be an IP address or a host name, got '0.0.0.0:80'"),
    # tenancy and policy sections: their types
    ({"queues": {"default": {}}}, "queues", "must be a list, got a mapping"),
    ({"queues": [{"name": "a"}, "b"]}, "queues[1]", "must be a mapping, got 'b'"),
    ({"groups": []}, "groups", "must be a mapping, got a list"),
    ({"users": "alice"}, "users", "must be a mapping, got 'alice'"),
    ({"namespaces": 1}, "namespaces", "must be a mapping, got 1"),
    ({"policies": [1]}, "policies", "must be a mapping, got a list"),
    ({"activePolicy": 1}, "activePolicy", "must be a string, got 1"),
    # scheduling: backfill and priority refresh
    ({"scheduling": {"backfill": "yes"}}, "scheduling.backfill", "must be true or false, got 'yes'"),
    ({"scheduling": {"backfill": 1}}, "scheduling.backfill", "must be true or false, got 1"),
    ({"scheduling": {"backfill": None}}, "scheduling.backfill", "must be true or false, got null"),
    ({"scheduling": {"queueingHints": "on"}}, "scheduling.queueingHints", "must be true or false, got 'on'"),
    ({"scheduling": {"reservationMinWaitSeconds": -1}}, "scheduling.reservationMinWaitSeconds",
     "must be >= 0, got -1"),
    ({"scheduling": {"priorityRefreshSeconds": 0}}, "scheduling.priorityRefreshSeconds",
     "must be > 0, got 0"),
    ({"scheduling": {"priorityRefreshSeconds": True}}, "scheduling.priorityRefreshSeconds",
     "must be a number, got true"),
    # queues
    ({"queues": [{"level": 1}]}, "queues[0].name", "is required"),
    ({"queues": [{"name": None}]}, "queues[0].name", "is required"),
    ({"queues": [{"name": 5}]}, "queues[0].name", "must be a string, got 5"),
    ({"queues": [{"name": "Prod"}]}, "queues[0].name", "must be a DNS-1123 label"),
    ({"queues": [{"name": "a.b"}]}, "queues[0].name", "got 'a.b'"),
    ({"queues": [{"name": "a" * 64}]}, "queues[0].name", "at most 63 characters"),
    ({"queues": [{"name": "prod"}, {"name": "batch"}, {"name": "prod"}]}, "queues[2].name",
     "duplicate queue 'prod' (also queues[0])"),
    ({"queues": [{"name": "q", "priority": 1}]}, "queues[0]",
     "unknown key 'priority'; expected one of name, level, weight, quota, promoteAfterSeconds, "
     "queueingStrategy"),
    ({"queues": [{"name": "q", "queueingStrategy": "Strict"}]}, "queues[0].queueingStrategy",
     "must be one of BestEffortFIFO, StrictFIFO, got 'Strict'"),
    ({"queues": [{"name": "q", "promoteAfter": 5}]}, "queues[0]",
     "unknown key 'promoteAfter' (did you mean 'promoteAfterSeconds'?)"),
    ({"queues": [{"name": "q", "promoteAfterSeconds": 0}]}, "queues[0].promoteAfterSeconds",
     "must be > 0, got 0"),
    ({"queues": [{"name": "q", "promoteAfterSeconds": -30}]}, "queues[0].promoteAfterSeconds",
     "must be > 0, got -30"),
    ({"queues": [{"name": "q", "promoteAfterSeconds": "10m"}]}, "queues[0].promoteAfterSeconds",
     "must be a number, got '10m'"),
    ({"queues": [{"name": "q", "promoteAfterSeconds": None}]}, "queues[0].promoteAfterSeconds",
     "must be a number, got null"),
    ({"queues": [{"name": "q", "promoteAfterSeconds": True}]}, "queues[0].promoteAfterSeconds",
     "must be a number, got true"),
    ({"queues": [{"name": "q", "promoteAfterSeconds": float("inf")}]}, "queues[0].promoteAfterSeconds",
     "must be a number, got inf"),
    ({"queues": [{"name": "q", "level": 101}]}, "queues[0].level",
     "must be an integer between 0 and 100, got 101"),
    ({"queues": [{"name": "q", "level": -1}]}, "queues[0].level", "got -1"),
    ({"queues": [{"name": "q", "level": True}]}, "queues[0].level", "got true"),
    ({"queues": [{"name": "q", "level": 1.5}]}, "queues[0].level", "got 1.5"),
    ({"queues": [{"name": "q", "weight": 0}]}, "queues[0].weight", "must be > 0, got 0"),
    ({"queues": [{"name": "q", "weight": "1"}]}, "queues[0].weight", "must be a number, got '1'"),
    ({"queues": [{"name": "q", "weight": False}]}, "queues[0].weight", "must be a number, got false"),
    ({"queues": [{"name": "q", "quota": 16}]}, "queues[0].quota", "must be a mapping, got 16"),
    ({"queues": [{"name": "q", "quota": {"nvidia.com/gpu": "many"}}]}, "queues[0].quota['nvidia.com/gpu']",
     "invalid quantity 'many'"),
    # resource maps (quota, min, max)
    ({"groups": {"vision": {"max": {"cpu": "lots"}}}}, "groups.vision.max.cpu", "invalid quantity 'lots'"),
    ({"groups": {"vision": {"max": {"cpu": "1x"}}}}, "groups.vision.max.cpu", "invalid quantity '1x'"),
    ({"groups": {"vision": {"max": {"cpu": True}}}}, "groups.vision.max.cpu",
     "must be a Kubernetes quantity such as 8, '500m' or '80Gi', got true"),
    ({"groups": {"vision": {"max": {"cpu": None}}}}, "groups.vision.max.cpu", "got null"),
    ({"groups": {"vision": {"max": {"cpu": ["1"]}}}}, "groups.vision.max.cpu", "got a list"),
    ({"groups": {"vision": {"max": {"cpu": float("inf")}}}}, "groups.vision.max.cpu", "invalid quantity inf"),
    ({"groups": {"vision": {"max": {"cpu": float("nan")}}}}, "groups.vision.max.cpu", "invalid quantity nan"),
    ({"groups": {"vision": {"max": {"cpu": "1e999999999"}}}}, "groups.vision.max.cpu", "invalid quantity"),
    ({"groups": {"vision": {"max": {"memory": "10E"}}}}, "groups.vision.max.memory", "too large, got '10E'"),
    ({"groups": {"vision": {"max": {"cpu": "10P"}}}}, "groups.vision.max.cpu", "is too large, got '10P'"),
    ({"groups": {"vision": {"max": {"memory": "-1Gi"}}}}, "groups.vision.max.memory",
     "must not be negative, got '-1Gi'"),
    ({"groups": {"vision": {"min": {"nvidia gpu": 1}}}}, "groups.vision.min",
     "resource names must be Kubernetes resource names such as 'cpu' or 'nvidia.com/gpu', got 'nvidia gpu'"),
    ({"groups": {"vision": {"min": {1: 1}}}}, "groups.vision.min", "got 1"),
    ({"users": {"alice": {"group": "g", "max": ["cpu"]}}}, "users.alice.max",
     "must be a mapping, got a list"),
    # groups
    ({"groups": {"vision": 5}}, "groups.vision", "must be a mapping, got 5"),
    ({"groups": {"": {}}}, "groups", "group names must be non-empty strings, got ''"),
    ({"groups": {1: {}}}, "groups", "group names must be non-empty strings, got 1"),
    ({"groups": {"vision": {"quota": {}}}}, "groups.vision", "unknown key 'quota'; expected one of "
                                                              "level, share, min, max"),
    ({"groups": {"vision": {"level": 101}}}, "groups.vision.level", "must be an integer between 0 and 100"),
    ({"groups": {"vision": {"share": 0}}}, "groups.vision.share", "must be > 0, got 0"),
    ({"groups": {"vision": {"share": -1}}}, "groups.vision.share", "must be > 0, got -1"),
    ({"groups": {"vision": {"share": True}}}, "groups.vision.share", "must be a number, got true"),
    ({"groups": {"vision": {"min": {"nvidia.com/gpu": 20}, "max": {"nvidia.com/gpu": 16}}}},
     "groups.vision.min['nvidia.com/gpu']", "20 is above groups.vision.max (16)"),
    ({"groups": {"v": {"min": {"cpu": "2500m", "memory": "1Gi"}, "max": {"cpu": 2}}}}, "groups.v.min.cpu",
     "2500m is above groups.v.max (2)"),
    ({"groups": {"v": {"min": {"ai-scheduler.io/gpu-memory": "80Gi"},
                       "max": {"ai-scheduler.io/gpu-memory": "40Gi"}}}},
     "groups.v.min['ai-scheduler.io/gpu-memory']", "80Gi is above groups.v.max (40Gi)"),
    # users
    ({"users": {"alice": {}}}, "users.alice.group", "is required"),
    ({"users": {"alice": None}}, "users.alice.group", "is required"),
    ({"users": {"alice": "vision"}}, "users.alice", "must be a mapping, got 'vision'"),
    ({"users": {"alice": {"group": ["vision"]}}}, "users.alice.group", "must be a string, got a list"),
    ({"groups": {"vision": {}}, "users": {"alice": {"group": "visoin"}}}, "users.alice.group",
     "unknown group 'visoin' (did you mean 'vision'?); known: vision"),
    ({"users": {"alice": {"group": "vision"}}}, "users.alice.group",
     "unknown group 'vision'; no group is configured"),
    ({"users": {"alice@example.com": {"group": "g"}}}, "users['alice@example.com'].group",
     "unknown group 'g'"),
    ({"users": {"alice": {"group": "g", "share": 1}}}, "users.alice", "unknown key 'share'; expected one of "
                                                                      "group, level, max"),
    ({"users": {"alice": {"group": "g", "level": "3"}}}, "users.alice.level", "got '3'"),
    ({"groups": {"vision": {"max": {"nvidia.com/gpu": 16, "cpu": 100}}},
      "users": {"alice": {"group": "vision", "max": {"nvidia.com/gpu": 8, "cpu": 100}},
                "bob": {"group": "vision", "max": {"nvidia.com/gpu": 16}}}},
     "users", "the users of group vision may use up to nvidia.com/gpu 24, above the group's max 16"),
    ({"groups": {"v": {"max": {"cpu": "1"}}},
      "users": {"a": {"group": "v", "max": {"cpu": "600m"}}, "b": {"group": "v", "max": {"cpu": "500m"}}}},
     "users", "the users of group v may use up to cpu 1100m, above the group's max 1 (a 600m, b 500m)"),
    # namespaces
    ({"namespaces": {"team-vision": {}}}, "namespaces['team-vision'].user", "is required"),
    ({"namespaces": {"team-vision": 1}}, "namespaces['team-vision']", "must be a mapping, got 1"),
    ({"namespaces": {"Team": {"user": "a"}}}, "namespaces", "namespace names must be DNS-1123 labels, "
                                                            "got 'Team'"),
    ({"namespaces": {"a.b": {"user": "a"}}}, "namespaces", "got 'a.b'"),
    ({"namespaces": {"ns": {"user": "a", "queue": "q"}}}, "namespaces.ns",
     "unknown key 'queue'; expected one of user, defaultQueue, trustUserLabel"),
    ({"namespaces": {"ns": {"user": 1}}}, "namespaces.ns.user", "must be a string, got 1"),
    ({"namespaces": {"ns": {"user": "a", "defaultQueue": 1}}}, "namespaces.ns.defaultQueue",
     "must be a string, got 1"),
    ({"namespaces": {"ns": {"user": "a", "trustUserLabel": "false"}}}, "namespaces.ns.trustUserLabel",
     "must be true or false, got 'false'"),
    ({"namespaces": {"ns": {"user": "a", "trustUserLabel": 0}}}, "namespaces.ns.trustUserLabel",
     "must be true or false, got 0"),
    ({"groups": {"g": {}}, "users": {"alice": {"group": "g"}}, "namespaces": {"ns": {"user": "alcie"}}},
     "namespaces.ns.user", "unknown user 'alcie' (did you mean 'alice'?); known: alice"),
    ({"namespaces": {"ns": {"user": "alice"}}}, "namespaces.ns.user", "unknown user 'alice'; no user is "
                                                                      "configured"),
    ({"groups": {"g": {}}, "users": {"a": {"group": "g"}}, "queues": [{"name": "prod"}],
      "namespaces": {"ns": {"user": "a", "defaultQueue": "batch"}}},
     "namespaces.ns.defaultQueue", "unknown queue 'batch'; known: prod"),
    ({"groups": {"g": {}}, "users": {"a": {"group": "g"}},
      "namespaces": {"ns": {"user": "a", "defaultQueue": "default"}}},
     "namespaces.ns.defaultQueue", "unknown queue 'default'; no queue is configured"),
    # policies
    ({"policies": {"fifo": {}}}, "policies.fifo.weights", "must name at least one factor"),
    ({"policies": {"fifo": None}}, "policies.fifo.weights", "must name at least one factor"),
    ({"policies": {"fifo": {"weights": {}}}}, "policies.fifo.weights", "must name at least one factor"),
    ({"policies": {"fifo": {"weights": None}}}, "policies.fifo.weights", "must name at least one factor"),
    ({"policies": {"fifo": {"weights": ["waitingTime"]}}}, "policies.fifo.weights",
     "must be a mapping, got a list"),
    ({"policies": {"fifo": []}}, "policies.fifo", "must be a mapping, got a list"),
    ({"policies": {"default": {"weights": {"waitingTime": 1, "speed": 1}}}}, "policies.default.weights.speed",
     "unknown factor 'speed'; known: userLevel, groupLevel, taskPriority, waitingTime, jobSize, "
     "estimatedRuntime, fairShare, queueLevel"),
    ({"policies": {"default": {"weights": {"user level": 1}}}}, "policies.default.weights['user level']",
     "unknown factor 'user level'"),
    ({"policies": {"default": {"weights": {1: 1}}}}, "policies.default.weights", "unknown factor 1;"),
    ({"policies": {"default": {"weights": {"waitingTime": "high"}}}}, "policies.default.weights.waitingTime",
     "must be a number, got 'high'"),
    ({"policies": {"default": {"weights": {"waitingTime": True}}}}, "policies.default.weights.waitingTime",
     "must be a number, got true"),
    ({"policies": {"default": {"weights": {"waitingTime": None}}}}, "policies.default.weights.waitingTime",
     "must be a number, got null"),
    ({"policies": {"default": {"weights": {"waitingTime": float("nan")}}}},
     "policies.default.weights.waitingTime", "must be a number, got nan"),
    ({"policies": {"p": {"weights": {"jobSize": 1}, "maxWait": 1}}}, "policies.p",
     "unknown key 'maxWait' (did you mean 'maxWaitSeconds'?)"),
    ({"policies": {"p": {"weights": {"jobSize": 1}, "maxWaitSeconds": 0}}}, "policies.p.maxWaitSeconds",
     "must be > 0, got 0"),
    ({"policies": {"p": {"weights": {"jobSize": 1}, "fairShareHalfLifeSeconds": -5}}},
     "policies.p.fairShareHalfLifeSeconds", "must be > 0, got -5"),
    ({"policies": {"p": {"weights": {"jobSize": 1}, "fairShareHalfLifeSeconds": "1h"}}},
     "policies.p.fairShareHalfLifeSeconds", "must be a number, got '1h'"),
    ({"policies": {"": {"weights": {"jobSize": 1}}}}, "policies", "policy names must be non-empty strings"),
    # activePolicy
    ({"activePolicy": "fifo"}, "activePolicy", "unknown policy 'fifo'; known: default"),
    ({"policies": {"fifo": {"weights": {"waitingTime": 1}}}, "activePolicy": "default"}, "activePolicy",
     "unknown policy 'default'; known: fifo"),
    ({"policies": {"fifo": {"weights": {"waitingTime": 1}}}, "activePolicy": "fif"}, "activePolicy",
     "unknown policy 'fif' (did you mean 'fifo'?); known: fifo"),
])
def test_refusal_names_the_key_and_the_reason(data: object, key: str, reason: str) -> None:
    error = refusal(data)
    assert error.key == key
    assert reason in error.reason
    assert error.source == "test.yaml"
    assert str(error) == (f"test.yaml: {key}: {error.reason}" if key else f"test.yaml: {error.reason}")


def test_unknown_key_message_reads_as_specified() -> None:
    assert str(refusal({"shedulerName": "x"})).startswith(
        "test.yaml: unknown key 'shedulerName' (did you mean 'schedulerName'?); "
        "expected one of schedulerName,")


def test_max_backoff_message_reads_as_specified() -> None:
    assert str(refusal({"scheduling": {"maxBackoffSeconds": 0.5}})) == (
        "test.yaml: scheduling.maxBackoffSeconds: must be >= scheduling.initialBackoffSeconds (1), got 0.5")


def test_config_error_is_a_value_error() -> None:
    assert isinstance(refusal({"gpu": 1}), ValueError)
    assert str(ConfigError("", "file not found", "/etc/x.yaml")) == "/etc/x.yaml: file not found"


# --- files ------------------------------------------------------------------------------------------


def test_load_config_reads_yaml(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("schedulerName: gpu\nscheduling:\n  bindConcurrency: 4\n")
    config = load_config(path)
    assert config.scheduler_name == "gpu"
    assert config.profiles[0].scheduler_name == "gpu"
    assert config.scheduling.bind_concurrency == 4


def test_load_config_names_the_file_in_errors(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("server:\n  port: http\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.source == str(path)
    assert str(info.value) == f"{path}: server.port: must be an integer between 0 and 65535, got 'http'"


def test_yaml_syntax_error_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("schedulerName: ai-scheduler\nscheduling:\n  bindConcurrency: 4\n   percentage: [1\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.key == ""
    assert info.value.reason.startswith("invalid YAML at line 4")
    assert str(path) in str(info.value)


def test_duplicate_yaml_keys_are_refused(tmp_path: Path) -> None:
    """PyYAML keeps the last of two equal keys; an operator who wrote both meant one of them."""
    path = tmp_path / "config.yaml"
    path.write_text("scheduling:\n  bindConcurrency: 4\n  bindConcurrency: 8\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.reason == "invalid YAML at line 3, column 3: found duplicate key 'bindConcurrency'"


def test_yaml_merge_keys_still_work(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("groups:\n  base: &b {share: 2, level: 2}\n  research:\n    <<: *b\n    level: 3\n")
    assert load_config(path).groups["research"] == GroupSpec("research", level=3, share=2)


def test_multiple_documents_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("schedulerName: a\n---\nschedulerName: b\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.reason == ("invalid YAML at line 2, column 1: "
                                 "expected a single document in the stream, but found another document")


def test_control_character_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text('schedulerName: a\nactivePolicy: "\x01"\n')
    with pytest.raises(ConfigError, match="invalid YAML at line 2: unacceptable character #x0001"):
        load_config(path)


def test_python_tags_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("activePolicy: !!python/object/apply:os.getcwd []\n")
    with pytest.raises(ConfigError, match="could not determine a constructor"):
        load_config(path)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path / "absent.yaml")
    assert str(info.value) == f"{tmp_path / 'absent.yaml'}: file not found"


def test_non_utf8_file(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_bytes(b"schedulerName: \xff\n")
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_config(path)


@pytest.mark.parametrize(
    ("text", "column"),
    [
        ("profiles: " + "[" * 2000 + "]" * 2000 + "\n", 11 + MAX_NESTING - 1),  # issue 12: RecursionError
        ("[" * 5000, MAX_NESTING + 1),  # and unclosed: the watcher died of it
        ("profiles:\n" + "".join("  " * i + "- \n" for i in range(1, 200)), None),  # block style
    ],
    ids=["flow-2000", "unclosed-5000", "block-200"],
)
def test_deep_nesting_is_refused_not_a_recursion_error(tmp_path: Path, text: str, column: int | None) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.key == ""
    assert info.value.reason.startswith("invalid YAML at line")
    assert info.value.reason.endswith(f"collections nested more than {MAX_NESTING} levels deep")
    if column is not None:
        assert f"line 1, column {column}:" in info.value.reason


def test_nesting_up_to_the_bound_is_read(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("x: " + "[" * (MAX_NESTING - 1) + "]" * (MAX_NESTING - 1) + "\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.reason.startswith("unknown key 'x'")  # read as YAML, refused by the schema


def test_an_alias_that_contains_itself_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("profiles: &a [*a]\n")
    with pytest.raises(ConfigError, match="profiles\\[0\\]: must be a mapping"):
        load_config(path)


# --- reload ------------------------------------------------------------------------------------------


class Recorder:
    """Collects what a watcher reports and lets a test wait for it without timing assumptions."""

    def __init__(self) -> None:
        self.changes: list[Config] = []
        self.errors: list[ConfigError] = []
        self._event = asyncio.Event()

    def on_change(self, config: Config) -> None:
        self.changes.append(config)
        self._event.set()

    def on_error(self, error: ConfigError) -> None:
        self.errors.append(error)
        self._event.set()

    async def wait_for(self, condition: Callable[[], bool], deadline: float = 10.0) -> None:
        async with asyncio.timeout(deadline):
            while not condition():
                self._event.clear()
                await self._event.wait()


async def watching(path: Path, recorder: Recorder) -> asyncio.Task[Any]:
    watcher = ConfigWatcher(path, recorder.on_change, recorder.on_error, interval=0.01)
    return asyncio.create_task(watcher.run())


async def stop(task: asyncio.Task[Any]) -> None:
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def swap(path: Path, text: str) -> None:
    """Replace the file atomically, as the kubelet does with a ConfigMap volume."""
    staged = path.with_suffix(".staged")
    staged.write_text(text)
    os.replace(staged, path)


async def test_watcher_reports_a_valid_change(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("schedulerName: first\n")
    recorder = Recorder()
    task = await watching(path, recorder)
    swap(path, "schedulerName: second\n")
    await recorder.wait_for(lambda: bool(recorder.changes))
    await stop(task)
    assert [c.scheduler_name for c in recorder.changes] == ["second"]
    assert recorder.errors == []


async def test_watcher_reports_an_invalid_change_once_and_nothing_else(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("schedulerName: first\n")
    recorder = Recorder()
    task = await watching(path, recorder)
    swap(path, "schedulerName: Not_Valid\n")
    await recorder.wait_for(lambda: bool(recorder.errors))
    # The same bad content again is no news; a later good change still comes through.
    swap(path, "schedulerName: Not_Valid\n")
    swap(path, "schedulerName: third\n")
    await recorder.wait_for(lambda: bool(recorder.changes))
    await stop(task)
    assert [e.key for e in recorder.errors] == ["schedulerName"]
    assert recorder.errors[0].source == str(path)
    assert [c.scheduler_name for c in recorder.changes] == ["third"]


async def test_watcher_check_reports_each_change_once(tmp_path: Path) -> None:
    """One look at a time, so that every step of the sequence is seen."""
    path = tmp_path / "config.yaml"
    path.write_text("schedulerName: first\n")
    recorder = Recorder()
    watcher = ConfigWatcher(path, recorder.on_change, recorder.on_error)

    async def step(text: str | None) -> tuple[list[str], list[str]]:
        if text is None:
            path.unlink(missing_ok=True)
        else:
            swap(path, text)
        recorder.changes.clear()
        recorder.errors.clear()
        await watcher.check()
        return [c.scheduler_name for c in recorder.changes], [e.reason for e in recorder.errors]

    assert await step("schedulerName: first\n") == ([], [])  # unchanged
    assert await step("schedulerName: [\n") == ([], ["invalid YAML at line 2, column 1: "
                                                       "expected the node content, but found '<stream end>'"])
    assert await step("schedulerName: [\n") == ([], [])  # the same bad content is no news
    assert await step("schedulerName: first\n") == ([], [])  # back to what the caller still runs
    assert await step("schedulerName: second\n") == (["second"], [])
    assert await step(None) == ([], ["file not found"])
    assert await step(None) == ([], [])  # reported once, not at every look
    assert await step("schedulerName: second\n") == ([], [])  # back, and the caller runs it
    assert await step("") == (["ai-scheduler"], [])  # an emptied file means the defaults


async def test_watcher_reports_a_missing_file_once(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("schedulerName: first\n")
    recorder = Recorder()
    task = await watching(path, recorder)
    path.unlink()
    await recorder.wait_for(lambda: bool(recorder.errors))
    swap(path, "schedulerName: back\n")
    await recorder.wait_for(lambda: bool(recorder.changes))
    await stop(task)
    assert [e.reason for e in recorder.errors] == ["file not found"]
    assert [c.scheduler_name for c in recorder.changes] == ["back"]


async def test_watcher_follows_a_configmap_style_symlink_swap(tmp_path: Path) -> None:
    """The kubelet points ..data at a new directory; the file's own path never changes."""
    for version, name in (("v1", "first"), ("v2", "second")):
        (tmp_path / version).mkdir()
        (tmp_path / version / "config.yaml").write_text(f"schedulerName: {name}\n")
    (tmp_path / "..data").symlink_to("v1")
    (tmp_path / "config.yaml").symlink_to("..data/config.yaml")
    recorder = Recorder()
    task = await watching(tmp_path / "config.yaml", recorder)
    (tmp_path / "..data_tmp").symlink_to("v2")
    os.replace(tmp_path / "..data_tmp", tmp_path / "..data")
    await recorder.wait_for(lambda: bool(recorder.changes))
    await stop(task)
    assert [c.scheduler_name for c in recorder.changes] == ["second"]


async def test_watcher_refuses_5000_brackets_and_keeps_watching(tmp_path: Path) -> None:
    """Issue 12: a file of 5,000 `[` stopped the watcher for good, and nothing was logged."""
    path = tmp_path / "config.yaml"
    path.write_text("schedulerName: first\n")
    recorder = Recorder()
    task = await watching(path, recorder)
    swap(path, "[" * 5000)
    await recorder.wait_for(lambda: bool(recorder.errors))
    swap(path, "schedulerName: second\n")
    await recorder.wait_for(lambda: bool(recorder.changes))
    assert not task.done()
    await stop(task)
    nested = f"collections nested more than {MAX_NESTING} levels deep"
    where = f"line 1, column {MAX_NESTING + 1}"
    assert [e.reason for e in recorder.errors] == [f"invalid YAML at {where}: {nested}"]
    assert [c.scheduler_name for c in recorder.changes] == ["second"]


async def test_watcher_survives_whatever_a_poll_raises(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Anything unexpected while reading, decoding or applying is reported, and polling goes on."""
    path = tmp_path / "config.yaml"
    path.write_text("schedulerName: first\n")
    recorder = Recorder()
    applied: list[str] = []

    def apply(config: Config) -> None:
        if config.scheduler_name == "explosive":
            raise KeyError("boom")
        applied.append(config.scheduler_name)
        recorder.on_change(config)

    watcher = ConfigWatcher(path, apply, recorder.on_error, interval=0.01)
    task = asyncio.create_task(watcher.run())
    swap(path, "schedulerName: explosive\n")
    await recorder.wait_for(lambda: len(recorder.errors) == 1)
    assert recorder.errors[0].reason == "could not be applied: KeyError: 'boom'"

    def broken_parse(data: object, source: str = "") -> Config:
        raise MemoryError("out of memory")

    monkeypatch.setattr("ai_scheduler.config.loader.parse_config", broken_parse)
    swap(path, "schedulerName: second\n")
    await recorder.wait_for(lambda: len(recorder.errors) == 2)
    assert recorder.errors[1].reason == "unexpected MemoryError: out of memory"
    monkeypatch.undo()
    swap(path, "schedulerName: third\n")
    await recorder.wait_for(lambda: bool(applied))
    await stop(task)
    assert applied == ["third"]


async def test_watcher_reload_reports_the_file_even_unchanged(tmp_path: Path) -> None:
    """SIGHUP: read the file now, and apply it whether it changed or not; an invalid one is refused again."""
    path = tmp_path / "config.yaml"
    path.write_text("schedulerName: first\n")
    recorder = Recorder()
    watcher = ConfigWatcher(path, recorder.on_change, recorder.on_error, interval=3600)
    task = asyncio.create_task(watcher.run())
    await asyncio.sleep(0.05)  # the first look, at start: nothing changed
    assert recorder.changes == [] and recorder.errors == []
    watcher.reload()
    await recorder.wait_for(lambda: bool(recorder.changes))  # at once, not after the hour's interval
    assert [c.scheduler_name for c in recorder.changes] == ["first"]
    swap(path, "schedulerName: Not_Valid\n")
    watcher.reload()
    await recorder.wait_for(lambda: len(recorder.errors) == 1)
    watcher.reload()
    await recorder.wait_for(lambda: len(recorder.errors) == 2)
    await stop(task)
    assert [e.key for e in recorder.errors] == ["schedulerName", "schedulerName"]


def test_watcher_refuses_a_non_positive_interval(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="interval"):
        ConfigWatcher(tmp_path / "c.yaml", lambda c: None, lambda e: None, interval=0)
