"""The replayable history (daemon/history.py) and its reader (tracesim/replay.py), without a cluster.

History is fed API objects as the informers would hand them, and its lines are read back by the
replay's reader: what is logged when (once per object, again on a change that matters, never for a
heartbeat or our own PreBind writes), and what the reader makes of rotated, compressed and collected
logs. The daemon-to-replay loop itself runs end to end in test_e2e_replay.py.
"""

from __future__ import annotations

import gzip
import io
from pathlib import Path
from typing import Any

import orjson
import pytest
from builders import Pod

from ai_scheduler.cache.gpus import GPU_IDS_ANNOTATION, UPDATED_ANNOTATION
from ai_scheduler.daemon.history import History, node_spec, pod_spec
from ai_scheduler.log import JsonLogger, parse_time, rfc3339
from ai_scheduler.trace import NodeSpec
from ai_scheduler.tracesim.replay import (
    ReplayError,
    compare_placements,
    explain,
    read_lines,
    read_log,
)

GIB = 2**30


def history() -> tuple[History, io.BytesIO]:
    stream = io.BytesIO()
    return History(JsonLogger(stream=stream)), stream


def events(stream: io.BytesIO) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in stream.getvalue().splitlines()]


def logged_pod(name: str, **kwargs: Any) -> dict[str, Any]:
    return Pod(name, cpu="1", memory="1Gi",
               **kwargs).uid().meta(creationTimestamp="2026-11-25T10:00:00Z").obj()


def managed_node(name: str, updated: float) -> dict[str, Any]:
    spec = NodeSpec(
        name, cpu=32000, memory=128 * GIB, gpus=2, gpu_model="T4", gpu_memory=16 * GIB, managed=True
    )
    return spec.to_node(updated=updated)


def test_a_node_is_logged_once_per_change_and_a_heartbeat_is_no_change() -> None:
    log, stream = history()
    log.node_event("ADDED", managed_node("a", 1000.0))
    log.node_event("MODIFIED", managed_node("a", 1060.0))  # the agent's heartbeat: only the date moved
    changed = managed_node("a", 1120.0)
    changed["metadata"]["labels"]["zone"] = "z1"
    log.node_event("MODIFIED", changed)
    log.node_seen(managed_node("b", 1000.0))
    log.nodes_listed({"a"})  # b is gone from a relist
    log.node_event("DELETED", {"metadata": {"name": "a"}})
    lines = events(stream)
    assert [(line["event"], line["node"]) for line in lines] == [
        ("node.spec", "a"),
        ("node.spec", "a"),
        ("node.spec", "b"),
        ("node.removed", "b"),
        ("node.removed", "a"),
    ]
    assert all(line["v"] == 1 for line in lines)
    assert lines[1]["object"]["metadata"]["labels"]["zone"] == "z1"
    assert UPDATED_ANNOTATION in lines[0]["object"]["metadata"]["annotations"]  # kept, just not compared


def test_a_pod_is_logged_at_first_sight_and_on_changes_while_it_waits_then_once_when_it_ends() -> None:
    log, stream = history()
    gated = logged_pod("p", annotations={"ai-scheduler.io/gpu-fraction": "0.5"})
    gated["spec"]["schedulingGates"] = [{"name": "example.com/quota"}]
    log.pod_event("ADDED", gated)
    ungated = logged_pod("p", annotations={"ai-scheduler.io/gpu-fraction": "0.5"})
    log.pod_event("MODIFIED", ungated)  # the gate went: logged again
    prebind = logged_pod("p", annotations={"ai-scheduler.io/gpu-fraction": "0.5", GPU_IDS_ANNOTATION: "1"})
    log.pod_event("MODIFIED", prebind)  # our own PreBind write: not a change of what it asks
    bound = logged_pod("p", node_name="a", annotations={GPU_IDS_ANNOTATION: "1"})
    bound["status"] = {"phase": "Running", "startTime": "2026-11-25T10:00:05Z"}
    log.pod_event("MODIFIED", bound)  # placed: nothing more until it ends
    done = logged_pod("p", node_name="a")
    done["status"] = {
        "phase": "Succeeded",
        "startTime": "2026-11-25T10:00:05Z",
        "containerStatuses": [
            {"state": {"terminated": {"reason": "Completed", "finishedAt": "2026-11-25T10:01:05Z"}}}
        ],
    }
    log.pod_event("MODIFIED", done)
    log.pod_event("DELETED", done)
    lines = events(stream)
    assert [line["event"] for line in lines] == ["pod.spec", "pod.spec", "pod.finished"]
    assert (
        "schedulingGates" in lines[0]["object"]["spec"]
        and "schedulingGates" not in lines[1]["object"]["spec"]
    )
    assert lines[2] | {"ts": None} == {
        "ts": None,
        "level": "info",
        "event": "pod.finished",
        "v": 1,
        "pod": "default/p",
        "uid": "uid-p",
        "phase": "Succeeded",
        "node": "a",
        "started": "2026-11-25T10:00:05Z",
        "ended": "2026-11-25T10:01:05Z",
        "runtime_s": 60.0,
        "reason": "Completed",
    }


def test_a_pod_deleted_while_waiting_or_gone_from_a_relist_ends_as_deleted() -> None:
    log, stream = history()
    log.pod_event("ADDED", logged_pod("gone"))
    log.pod_event("ADDED", logged_pod("relisted"))
    log.pod_event("DELETED", logged_pod("gone"))
    log.pods_listed(set())
    finished = [line for line in events(stream) if line["event"] == "pod.finished"]
    assert [(line["uid"], line["phase"]) for line in finished] == [
        ("uid-gone", "Deleted"),
        ("uid-relisted", "Deleted"),
    ]


def test_pruned_objects_keep_what_a_scheduler_reads_and_drop_the_rest() -> None:
    obj = logged_pod(
        "w",
        ports=[{"containerPort": 80}, {"containerPort": 8080, "hostPort": 8080}],
        volumes=[
            {"name": "cfg", "configMap": {"name": "c"}},
            {"name": "data", "persistentVolumeClaim": {"claimName": "d"}},
        ],
    )
    obj["metadata"]["managedFields"] = [{"manager": "kubectl"}]
    pruned = pod_spec(obj)
    assert "managedFields" not in pruned["metadata"]
    assert pruned["spec"]["containers"][0]["ports"] == [{"containerPort": 8080, "hostPort": 8080}]
    assert pruned["spec"]["volumes"] == [{"name": "data", "persistentVolumeClaim": {"claimName": "d"}}]
    node = managed_node("n", 0.0)
    node["status"]["images"] = [{"names": ["busybox"]}]
    assert set(node_spec(node)["status"]) == {"allocatable", "conditions"}


def logged(lines: list[tuple[float, str, dict[str, Any]]]) -> list[bytes]:
    return [
        orjson.dumps({"ts": rfc3339(t), "level": "info", "event": event, **fields})
        for t, event, fields in lines
    ]


def small_log(t0: float = 1_800_000_000.0) -> list[bytes]:
    """Two nodes, three pods of ours (one placed and finished, one placed, one waiting), one of another
    scheduler and one placed before the log began."""
    node = NodeSpec("n0", cpu=8000, memory=32 * GIB).to_node()
    other = logged_pod("o", scheduler_name="default-scheduler")
    before = logged_pod("b", node_name="n0")
    return logged(
        [
            (
                t0,
                "config.active",
                {"v": 1, "path": None, "config": {"scheduling": {"tieBreak": "nodeOrder"}}},
            ),
            (t0, "node.spec", {"v": 1, "node": "n0", "object": node_spec(node)}),
            (
                t0,
                "node.spec",
                {"v": 1, "node": "n1", "object": node_spec(NodeSpec("n1", 8000, 32 * GIB).to_node())},
            ),
            *(
                (
                    t0 + 0.001,
                    "pod.spec",
                    {
                        "v": 1,
                        "pod": f"default/{p['metadata']['name']}",
                        "uid": p["metadata"]["uid"],
                        "object": pod_spec(p),
                    },
                )
                for p in (logged_pod("x"), logged_pod("y"), other, before)
            ),
            (t0 + 0.01, "scheduler.ready", {}),
            (
                t0 + 0.02,
                "decision",
                {"v": 1, "pod": "default/x", "uid": "uid-x", "result": "scheduled", "node": "n0"},
            ),
            (
                t0 + 0.03,
                "decision",
                {"v": 1, "pod": "default/y", "uid": "uid-y", "result": "scheduled", "node": "n1"},
            ),
            (
                t0 + 5.0,
                "pod.spec",
                {"v": 1, "pod": "default/z", "uid": "uid-z", "object": pod_spec(logged_pod("z"))},
            ),
            (t0 + 7.52, "pod.finished", {"v": 1, "uid": "uid-x", "phase": "Succeeded"}),
        ]
    )


def test_read_log_rebuilds_the_cluster_the_workload_and_the_config(tmp_path: Path) -> None:
    path = tmp_path / "scheduler.log"
    path.write_bytes(b"\n".join(small_log()) + b"\nnot json\n")
    replay = read_log([path])
    assert [n.name for n in replay.nodes] == ["n0", "n1"] and replay.nodes[0].cpu == 8000
    assert replay.config.scheduling.tie_break == "nodeOrder"
    jobs = {job.name: job for job in replay.jobs}
    assert list(jobs) == ["default/x", "default/y", "default/z"]
    assert jobs["default/x"].submit_time == 0.0 and jobs["default/x"].duration == pytest.approx(
        7.5, abs=0.002
    )
    assert jobs["default/y"].duration is None and jobs["default/z"].submit_time == pytest.approx(
        4.99, abs=0.002
    )
    assert jobs["default/x"].cpu == 1000 and jobs["default/x"].manifest is not None
    assert replay.placements == [("default/x", "n0", ()), ("default/y", "n1", ())]
    assert replay.skipped == 1
    assert replay.notes == {
        "pods of other schedulers (not replayed)": 1,
        "pods placed before the log began or by another scheduler (not replayed)": 1,
    }


def test_rotated_compressed_and_collected_logs_read_in_time_order(tmp_path: Path) -> None:
    lines = small_log()
    directory = tmp_path / "logs"
    directory.mkdir()
    # Rotated: the newest lines in the file that sorts first; the older half compressed.
    (directory / "a-current.log").write_bytes(b"\n".join(lines[5:]) + b"\n")
    with gzip.open(directory / "b-rotated.log.gz", "wb") as stream:
        stream.write(b"\n".join(lines[:5]) + b"\n")
    read, skipped = read_lines([directory])
    assert [line["event"] for line in read] == [orjson.loads(line)["event"] for line in lines] and not skipped
    # Collected: each line wrapped by the collector, as a string (Docker's "log") or as an object.
    wrapped = tmp_path / "collected.log"
    wrapped.write_bytes(
        b"\n".join(
            orjson.dumps(
                {
                    "kubernetes": {"pod": "ai-scheduler-0"},
                    "log": line.decode() if i % 2 else orjson.loads(line),
                }
            )
            for i, line in enumerate(lines)
        )
        + b"\n"
        + orjson.dumps({"log": "a plain text line"})
        + b"\n"
    )
    read, skipped = read_lines([wrapped], "log")
    assert len(read) == len(lines) and skipped == 1
    assert read_log([wrapped], "log").placements == read_log([directory]).placements
    with pytest.raises(ReplayError, match="no replayable lines"):
        read_log([wrapped])  # without --field, nothing of ours is found


def test_placements_compare_pod_by_pod_and_each_difference_is_explained() -> None:
    logged_ = [("d/a", "n0", (0,)), ("d/b", "n1", ()), ("d/c", "n0", ()), ("d/e", "n2", (1,))]
    replayed = [
        ("d/a", "n0", (0,)),
        ("d/c", "n0", ()),
        ("d/b", "n2", ()),
        ("d/e", "n2", (0,)),
        ("d/f", "n1", ()),
    ]
    comparison = compare_placements(logged_, replayed)
    assert (comparison.logged, comparison.identical, comparison.same_order) == (4, 2, False)
    assert [explain(d) for d in comparison.differences] == [
        "d/b: n1 by the daemon, n2 in the replay",
        "d/e: same node n2, other GPUs",
        "d/f: placed on n1 in the replay, not by the daemon",
    ]
    assert parse_time("2026-01-01T00:00:01.250Z") == 1_767_225_601.25
