"""`ai-scheduler status`: the readable tables from fixed visibility API answers, the parsing of targets
and kubeconfigs, and the kubectl plugin being the same command. (Against clusters: test_e2e_status.py.)"""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path
from typing import Any

import pytest
from paths import ROOT

from ai_scheduler.cli import main
from ai_scheduler.log import parse_time
from ai_scheduler.status import tables
from ai_scheduler.status.actions import StatusError, Target, _release_ops
from ai_scheduler.status.command import add_arguments, context_namespace, plugin_main, run

NOW = parse_time("2026-11-25T12:00:00Z") or 0.0


def entry(name: str | None, position: int, **fields: Any) -> dict[str, Any]:
    meta = {"namespace": "team-a" if name else None, "name": name, "uid": f"uid-{name}" if name else None}
    return {"metadata": meta, "queue": "research", "user": "ana", "group": "vision", "level": 1,
            "position": position, "positionInQueue": position, "priority": 0.5, "factors": {},
            "promoted": False, "runTime": None, "attempts": 0, "reason": "", "expectedStart": None,
            "gang": None, **fields}


PENDING: dict[str, Any] = {
    "apiVersion": "visibility.ai-scheduler.io/v1alpha1", "kind": "PendingPodList", "metadata": {},
    "items": [
        entry("train-0", 1, gang="team-a/train", priority=0.81234567, promoted=True, attempts=3,
              factors={"waitingTime": 0.5, "fairShare": 0.31234567},
              runTime={"medianSeconds": 3600.0, "upperSeconds": 7500.0, "source": "model"},
              reason="0/12 nodes are available: 12 Insufficient nvidia.com/gpu. " + "x" * 80,
              expectedStart="2026-11-25T12:12:00Z"),
        entry(None, 2, queue="default", user=None, priority=0.4),
        entry("eval", 3, priority=0.125, expectedStart="2026-11-25T11:59:00Z"),
    ],
}


def test_the_queue_table_shows_position_priority_start_and_reason() -> None:
    text = tables.queue_table(PENDING, NOW, all_namespaces=False)
    reason = "0/12 nodes are available: 12 Insufficient nvidia.com/gpu. " + "x" * 11 + "..."
    assert text.splitlines() == [
        "POS  NAME      GANG    QUEUE     QPOS  USER    PRIORITY  ATTEMPTS  START   REASON",
        f"1    train-0   train   research  1     ana     0.812*    3         in 12m  {reason}",
        "2    <hidden>          default   2     <none>  0.4       0         <none>  <none>",
        "3    eval      <none>  research  3     ana     0.125     0         now     <none>",
        "",
        "(* promoted: waited past its queue's promoteAfterSeconds)",
    ]
    everywhere = tables.queue_table(PENDING, NOW, all_namespaces=True).splitlines()
    assert everywhere[0].split() == ["POS", "NAMESPACE", "NAME", "GANG", "QUEUE", "QPOS", "USER", "PRIORITY",
                                     "ATTEMPTS", "START", "REASON"]
    assert everywhere[2].split()[:3] == ["2", "<hidden>", "<hidden>"]
    assert tables.queue_table({"items": []}, NOW, all_namespaces=False) == "No pods are waiting."


def test_why_breaks_the_priority_down_by_factor_and_says_why_and_when() -> None:
    text = tables.why_text(PENDING["items"][:1], NOW)
    assert text.splitlines() == [
        "Pod team-a/train-0  (gang team-a/train)",
        "  Queue:          research (level 1): position 1 of all, 1 in its queue",
        "  User / group:   ana / vision",
        "  Priority:       0.812346  (promoted)",
        "  Run time:       median 1h00m, upper 2h05m (model)",
        "  Attempts:       3",
        "  Expected start: 2026-11-25T12:12:00Z (in 12m)",
        "  Reason:         " + PENDING["items"][0]["reason"],
        "  Factors:",
        "    FACTOR       VALUE",
        "    fairShare    0.312346",
        "    waitingTime  0.5",
    ]
    waiting = {**PENDING["items"][0], "gangStatus": {"minMember": 4, "pods": 3, "scheduled": 0, "running": 0,
                                                    "problem": "waiting for 1 more pod"},
               "reservation": {"holder": "team-a/train-0", "nodes": ["dgx-0", "dgx-1"],
                               "due": "2026-11-25T12:30:00Z"}}
    lines = tables.why_text([waiting], NOW).splitlines()
    assert lines[6:8] == [
        "  Gang:           3 pod(s) of 4 needed, 0 placed; waiting for 1 more pod",
        "  Reservation:    room held on dgx-0, dgx-1 for team-a/train-0, free in 30m",
    ]
    gang = tables.why_text(PENDING["items"][::2], NOW, gang="team-a/train").split("\n\n")
    assert gang[0] == "Gang team-a/train: 2 member(s) waiting"
    assert gang[2].splitlines()[0] == "Pod team-a/eval"
    assert "  Run time:       unknown" in gang[2].splitlines()
    assert "  Reason:         not tried yet" in gang[2].splitlines()


def test_the_quota_table_lists_every_resource_of_each_bound() -> None:
    body = {"kind": "QuotaList", "items": [
        {"kind": "group", "name": "vision", "min": {"nvidia.com/gpu": "4"},
         "max": {"nvidia.com/gpu": "8", "cpu": "32"}, "used": {"nvidia.com/gpu": "2", "cpu": "2500m"}},
        {"kind": "user", "name": "ana", "min": {}, "max": {"cpu": "16"}, "used": {}},
    ]}
    assert tables.quota_table(body).splitlines() == [
        "KIND   NAME    RESOURCE        USED   MIN     MAX",
        "group  vision  cpu             2500m  <none>  32",
        "group  vision  nvidia.com/gpu  2      4       8",
        "user   ana     cpu             0      <none>  16",
    ]
    assert tables.quota_table({"items": []}) == "No quotas apply."


def test_the_gpu_table_shows_each_device_and_its_holders() -> None:
    node = {"metadata": {"name": "dgx-0"}, "devices": [
        {"index": 0, "uuid": "GPU-0", "model": "H100", "memoryMiB": 81559, "freeMemoryMiB": 61079,
         "island": 0,
         "holders": [{"namespace": "team-a", "name": "infer", "memoryMiB": 10240},
                     {"namespace": "team-b", "name": "tune", "fraction": 0.125}]},
        {"index": 1, "uuid": "GPU-1", "model": "H100", "memoryMiB": 81559, "freeMemoryMiB": 0, "island": 0,
         "holders": [{"namespace": None, "name": None}]},
        {"index": 2, "uuid": "GPU-2", "model": "H100", "memoryMiB": 81559, "freeMemoryMiB": 81559,
         "island": None, "holders": []},
    ]}
    expected = [
        "NODE   GPU  MODEL  MEMORY     FREE       ISLAND  HOLDERS",
        "dgx-0  0    H100   81559 MiB  61079 MiB  0       team-a/infer (10240 MiB), team-b/tune (0.125)",
        "dgx-0  1    H100   81559 MiB  0 MiB      0       <hidden> (whole)",
        "dgx-0  2    H100   81559 MiB  81559 MiB  <none>  <none>",
    ]
    assert tables.gpus_table({"kind": "GpuNodeList", "items": [node]}).splitlines() == expected
    assert tables.gpus_table(node).splitlines() == expected, "one node's answer: the object itself"
    assert tables.gpus_table({"items": []}) == "No GPUs managed by ai-scheduler."


def test_durations_and_numbers_read_as_kubectl_writes_them() -> None:
    assert [tables.duration(s) for s in (0, 59.4, 60, 3599, 3600, 3660, 47 * 3600, 49 * 3600)] == [
        "0s", "59s", "1m", "59m", "1h00m", "1h01m", "47h00m", "2d1h"]
    assert [tables.number(v) for v in (None, 0, 1.0, 0.12345, -0.0001, "x")] == [
        "<none>", "0", "1", "0.123", "0", "x"]


def test_targets_name_a_pod_a_gang_or_a_task() -> None:
    assert Target.parse("train-0") == Target("pod", "train-0")
    assert Target.parse("pod/train-0") == Target("pod", "train-0")
    assert Target.parse("gang/train") == Target("gang", "train")
    assert Target.parse("podgroup/train") == Target("gang", "train")
    assert Target.parse("task/train") == Target("task", "train")
    for bad in ("job/x", "gang/", "task/", "a/b/c"):
        with pytest.raises(StatusError, match="give NAME, pod/NAME, gang/NAME or task/NAME"):
            Target.parse(bad)


def test_release_removes_our_annotation_and_our_gate_only_each_guarded_by_a_test() -> None:
    pod = {"metadata": {"annotations": {"ai-scheduler.io/hold": "true", "other": "x"}},
           "spec": {"schedulingGates": [{"name": "ai-scheduler.io/hold"}, {"name": "example.com/quota"},
                                        {"name": "ai-scheduler.io/hold"}]}}
    assert _release_ops(pod) == [
        {"op": "test", "path": "/metadata/annotations/ai-scheduler.io~1hold", "value": "true"},
        {"op": "remove", "path": "/metadata/annotations/ai-scheduler.io~1hold"},
        {"op": "test", "path": "/spec/schedulingGates/2/name", "value": "ai-scheduler.io/hold"},
        {"op": "remove", "path": "/spec/schedulingGates/2"},
        {"op": "test", "path": "/spec/schedulingGates/0/name", "value": "ai-scheduler.io/hold"},
        {"op": "remove", "path": "/spec/schedulingGates/0"},
    ]
    assert _release_ops({"metadata": {}, "spec": {"schedulingGates": [{"name": "example.com/quota"}]}}) == []


def _kubeconfig(path: Path, current: str | None, contexts: dict[str, str | None]) -> Path:
    document: dict[str, Any] = {"apiVersion": "v1", "kind": "Config", "contexts": [
        {"name": name, "context": {"cluster": "c", "user": "u", **({"namespace": ns} if ns else {})}}
        for name, ns in contexts.items()]}
    if current:
        document["current-context"] = current
    path.write_text(json.dumps(document))
    return path


def test_the_namespace_defaults_to_the_current_contexts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    one = _kubeconfig(tmp_path / "one", "a", {"a": "team-a", "b": "team-b"})
    assert context_namespace(str(one)) == "team-a"
    assert context_namespace(str(_kubeconfig(tmp_path / "two", "b", {"b": None}))) == "default"
    # $KUBECONFIG: a list of files, the first that names a current context wins; contexts from any.
    first = _kubeconfig(tmp_path / "first", None, {})
    second = _kubeconfig(tmp_path / "second", "b", {})
    monkeypatch.setenv("KUBECONFIG", f"{first}:{tmp_path / 'missing'}:{second}:{one}")
    assert context_namespace(None) == "team-b"
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBECONFIG")
    assert context_namespace(None) == "default"


def test_the_kubectl_plugin_is_ai_scheduler_status(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["--help"], ["hold", "--help"], ["queue", "--help"], ["why", "--help"]):
        with pytest.raises(SystemExit):
            plugin_main(argv)
        plugin = capsys.readouterr().out
        with pytest.raises(SystemExit):
            main(["status", *argv])
        status = capsys.readouterr().out
        # The same text but for the program's name (and so where argparse wraps lines).
        assert " ".join(plugin.replace("kubectl ai-scheduler", "ai-scheduler status").split()) == " ".join(
            status.split()), argv
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'kubectl-ai_scheduler = "ai_scheduler.status.command:plugin_main"' in pyproject


def test_every_subcommand_describes_its_flags(capsys: pytest.CaptureFixture[str]) -> None:
    for command in ("queue", "why", "quota", "gpus", "hold", "release", "requeue", "cancel"):
        with pytest.raises(SystemExit) as exited:
            main(["status", command, "--help"])
        assert exited.value.code == 0
        text = capsys.readouterr().out
        for flag in ("--kubeconfig", "--namespace", "--output {table,json}"):
            assert flag in text, (command, flag)
    with pytest.raises(SystemExit) as exited:
        main(["status", "queue", "-o", "yaml"])
    assert exited.value.code == 2


def test_a_missing_kubeconfig_is_one_clear_error(tmp_path: Path) -> None:


    parser = argparse.ArgumentParser()
    add_arguments(parser)
    out, err = io.StringIO(), io.StringIO()
    code = run(parser.parse_args(["queue", "--kubeconfig", str(tmp_path / "none")]), out, err)
    assert (code, out.getvalue()) == (1, "")
    assert err.getvalue().startswith("error: cannot load the kubeconfig:")
