"""The config file: defaults, every kind of refusal with its exact key path, YAML errors, reload."""

from __future__ import annotations

import asyncio
import os
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ai_scheduler.config import (
    FILTER_PLUGINS,
    RESOURCE_SCORERS,
    SCORE_PLUGINS,
    Config,
    ConfigError,
    ConfigWatcher,
    GpuSettings,
    Profile,
    SchedulingSettings,
    ScoreSpec,
    ServerSettings,
    default_config,
    load_config,
    parse_config,
)


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
                ScoreSpec("NodeResourcesLeastAllocated", 1, {"cpu": 1, "memory": 1, "nvidia.com/gpu": 1}),
                ScoreSpec("NodeAffinity", 2, {}),
                ScoreSpec("TaintToleration", 3, {}),
                ScoreSpec("GPUBinpack", 3, {}),
                ScoreSpec("GPUAvoidance", 2, {}),
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
        percentage_of_nodes_to_score=100,
    )
    assert config.gpu == GpuSettings(staleness_seconds=120)
    assert config.server == ServerSettings(port=10251, bind_address="0.0.0.0")
    assert config.queues == ()
    assert config.groups == config.users == config.namespaces == config.policies == {}
    assert config.active_policy is None


def test_plugin_name_constants() -> None:
    assert FILTER_PLUGINS == ("NodeUnschedulable", "NodeName", "TaintToleration", "NodeReady",
                              "NodeAffinity", "NodeResourcesFit", "GPU")
    assert SCORE_PLUGINS == ("NodeResourcesLeastAllocated", "NodeResourcesMostAllocated",
                             "NodeAffinity", "TaintToleration", "GPUBinpack", "GPUSpread",
                             "GPUAvoidance")
    assert frozenset({"NodeResourcesLeastAllocated", "NodeResourcesMostAllocated"}) == RESOURCE_SCORERS


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
    config = parse_config({"groups": {"research": {"members": ["a", "b"]}}, "queues": [{"name": "q"}]})
    assert config.groups["research"]["members"] == ("a", "b")
    with pytest.raises(TypeError):
        config.groups["x"] = 1  # type: ignore[index]
    with pytest.raises(AttributeError):
        config.scheduler_name = "other"  # type: ignore[misc]
    assert hash(config) == hash(parse_config({"groups": {"research": {"members": ["a", "b"]}},
                                              "queues": [{"name": "q"}]}))
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
                       "percentageOfNodesToScore": 50},
        "gpu": {"stalenessSeconds": 30},
        "server": {"port": 0, "bindAddress": "::1"},
        "queues": [{"name": "default"}],
        "groups": {"g": {}}, "users": {"u": {}}, "namespaces": {"n": {}}, "policies": {"p": {}},
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
    assert config.scheduling == SchedulingSettings(8, 2.5, 0.5, 0.5, 60, 0, 50)
    assert isinstance(config.scheduling.assume_timeout_seconds, float)
    assert config.gpu.staleness_seconds == 30
    assert config.server == ServerSettings(0, "::1")
    assert config.queues == ({"name": "default"},)
    assert config.active_policy == "p"


def test_resource_scorer_without_resources_gets_the_default_weights() -> None:
    config = parse_config({"profiles": [{"scores": [{"name": "NodeResourcesMostAllocated", "weight": 1}]}]})
    assert config.profiles[0].scores[0].resources == {"cpu": 1, "memory": 1, "nvidia.com/gpu": 1}


def test_config_built_in_code_equals_the_parsed_one() -> None:
    assert Config("ai-scheduler", (Profile("ai-scheduler"),)) == default_config()


# --- refusals: exact key path and reason -------------------------------------------------------------


@pytest.mark.parametrize(("data", "key", "reason"), [
    # unknown keys, at every level we define
    ({"shedulerName": "x"}, "", "unknown key 'shedulerName' (did you mean 'schedulerName'?); expected one of "
                                "schedulerName, profiles, scheduling, gpu, server, queues, groups, users, "
                                "namespaces, policies, activePolicy"),
    ({"profiles": [{"filter": []}]}, "profiles[0]", "unknown key 'filter' (did you mean 'filters'?)"),
    ({"profiles": [{"scores": [{"name": "NodeAffinity", "wieght": 1}]}]}, "profiles[0].scores[0]",
     "unknown key 'wieght' (did you mean 'weight'?)"),
    ({"scheduling": {"bindConcurency": 1}}, "scheduling", "unknown key 'bindConcurency'"),
    ({"gpu": {"sharing": True}}, "gpu", "unknown key 'sharing'; expected one of stalenessSeconds"),
    ({"server": {"host": "x"}}, "server", "unknown key 'host'"),
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
     "NodeAffinity, NodeResourcesFit, GPU"),
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
     "NodeResourcesMostAllocated, NodeAffinity, TaintToleration, GPUBinpack, GPUSpread, GPUAvoidance"),
    ({"profiles": [{"scores": [{"name": "NodeAffinity"}, {"name": "NodeAffinity"}]}]},
     "profiles[0].scores[1].name", "duplicate score plugin 'NodeAffinity' (also profiles[0].scores[0])"),
    ({"profiles": [{"scores": ["NodeAffinity"]}]}, "profiles[0].scores[0]", "must be a mapping"),
    ({"profiles": [{"scores": [{"name": "NodeAffinity", "resources": {"cpu": 1}}]}]},
     "profiles[0].scores[0].resources",
     "only NodeResourcesLeastAllocated and NodeResourcesMostAllocated take resources"),
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
    ({"scheduling": {"percentageOfNodesToScore": 0}}, "scheduling.percentageOfNodesToScore",
     "must be an integer between 1 and 100, got 0"),
    ({"scheduling": {"percentageOfNodesToScore": 50.0}}, "scheduling.percentageOfNodesToScore", "got 50.0"),
    # gpu and server
    ({"gpu": {"stalenessSeconds": 0}}, "gpu.stalenessSeconds", "must be > 0, got 0"),
    ({"server": {"port": 65536}}, "server.port", "must be an integer between 0 and 65535, got 65536"),
    ({"server": {"port": "10251"}}, "server.port", "got '10251'"),
    ({"server": {"bindAddress": 0}}, "server.bindAddress", "must be a string, got 0"),
    ({"server": {"bindAddress": "0.0.0.0:80"}}, "server.bindAddress",
     "must be an IP address or a host name, got '0.0.0.0:80'"),
    # sections that later issues define: types only
    ({"queues": {"default": {}}}, "queues", "must be a list, got a mapping"),
    ({"queues": [{"name": "a"}, "b"]}, "queues[1]", "must be a mapping, got 'b'"),
    ({"groups": []}, "groups", "must be a mapping, got a list"),
    ({"users": "alice"}, "users", "must be a mapping, got 'alice'"),
    ({"namespaces": 1}, "namespaces", "must be a mapping, got 1"),
    ({"policies": [1]}, "policies", "must be a mapping, got a list"),
    ({"activePolicy": 1}, "activePolicy", "must be a string, got 1"),
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
    path.write_text("groups:\n  base: &b {quota: 1, level: 2}\n  research:\n    <<: *b\n    quota: 3\n")
    assert load_config(path).groups["research"] == {"quota": 3, "level": 2}


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


def test_watcher_refuses_a_non_positive_interval(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="interval"):
        ConfigWatcher(tmp_path / "c.yaml", lambda c: None, lambda e: None, interval=0)
