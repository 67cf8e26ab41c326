"""`ai-scheduler status` (= `kubectl ai-scheduler`) end to end, as a user with their own credentials.

The commands run in-process through the CLI's `main(argv)` (on a thread: each runs its own event loop)
with a kubeconfig of the user's. On the real backend the user is a ServiceAccount of team-a (its token
from the TokenRequest API) with a Role that lets it read, patch and delete pods and PodGroups in team-a,
and only read pods in team-b: every write there is refused by RBAC, and the command says so with the API
server's message and exit status 1. The simulated API server has no authorization at all, so on it the
commands run with its open kubeconfig, and the refusals are checked on the real backend only.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from backends import Cluster, KubeCluster, SimCluster
from builders import PodGroup, make_node, make_pod
from conftest import StartScheduler, create_all, stored_pod, wait_for

from ai_scheduler.api.kube import KubeClient
from ai_scheduler.cache.gangs import GROUP_MIN_LABEL, GROUP_NAME_LABEL, POD_GROUP_LABEL
from ai_scheduler.cache.records import HOLD_ANNOTATION, HOLD_GATE, REQUEUE_ANNOTATION
from ai_scheduler.cli import main
from ai_scheduler.config import parse_config
from ai_scheduler.sim.controlplane import ControlPlane
from ai_scheduler.sim.objects import write_kubeconfig
from e2e.test_e2e_gpus import gpu_cluster
from e2e.test_e2e_visibility import Gateway, KubeGateway, gateway, visibility_config, waiting

__all__ = ["gateway", "gpu_cluster", "waiting"]  # fixtures, shared with test_e2e_visibility
USER = "system:serviceaccount:team-a:alice"
# What a team's member is given (real backend): pods, PodGroups and Tasks of their own namespace, the
# queue's view of it; in team-b only a look at the pods.
OWN_RULES = [
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "patch", "delete"]},
    {"apiGroups": ["scheduling.x-k8s.io"], "resources": ["podgroups"], "verbs": ["get", "list", "delete"]},
    {"apiGroups": ["visibility.ai-scheduler.io"], "resources": ["pendingpods"], "verbs": ["get", "list"]},
    {"apiGroups": ["ai-scheduler.io"], "resources": ["tasks"], "verbs": ["get", "list", "create", "patch"]},
]
READ_RULES = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]


@dataclass
class User:
    kubeconfig: Path

    async def run(self, capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
        """`ai-scheduler status ARGV` as this user: (exit status, stdout, stderr)."""
        capsys.readouterr()
        code = await asyncio.to_thread(main, ["status", *argv, "--kubeconfig", str(self.kubeconfig)])
        out = capsys.readouterr()
        return code, out.out, out.err


def _ensure(plane: ControlPlane, path: str, body: dict[str, Any]) -> None:
    status, answer = plane.request("POST", path, body)
    assert status in (201, 409), answer


def _grant(plane: ControlPlane) -> None:
    """alice: a ServiceAccount of team-a; a Role and its binding in team-a (own) and team-b (read)."""
    _ensure(plane, "/api/v1/namespaces/team-a/serviceaccounts",
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "alice"}})
    for namespace, rules in (("team-a", OWN_RULES), ("team-b", READ_RULES)):
        base = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}"
        _ensure(plane, f"{base}/roles", {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                                         "metadata": {"name": "alice"}, "rules": rules})
        _ensure(plane, f"{base}/rolebindings", {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": "alice"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "alice"},
            "subjects": [{"kind": "ServiceAccount", "name": "alice", "namespace": "team-a"}],
        })


@pytest.fixture
async def user(cluster: Cluster, api: KubeClient, tmp_path: Path) -> User:
    """The namespaces team-a and team-b, and a user's kubeconfig (see the module's docstring)."""
    for namespace in ("team-a", "team-b"):
        assert (await api.create_namespace(namespace)).status in (201, 409)
    path = tmp_path / "user.kubeconfig"
    if isinstance(cluster, SimCluster):
        write_kubeconfig(cluster.sim.url, path)
        return User(path)
    assert isinstance(cluster, KubeCluster)
    plane = cluster.plane
    await asyncio.to_thread(_grant, plane)
    token = await asyncio.to_thread(plane.service_account_token, "team-a", "alice")
    plane.write_kubeconfig(path, token)
    return User(path)


def decisions(running: Any, pod: str) -> list[dict[str, Any]]:
    return [line for line in running.log_lines("decision") if line["pod"] == pod]


def annotations_of(cluster: Cluster, name: str, namespace: str = "team-a") -> dict[str, str]:
    return dict(stored_pod(cluster, name, namespace)["metadata"].get("annotations") or {})


async def test_hold_release_and_requeue_as_a_user(
    cluster: Cluster, api: KubeClient, user: User, start_scheduler: StartScheduler,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Long backoffs and no periodic flush: a retry within the test's deadlines comes from a requeue.
    settings = {"initialBackoffSeconds": 60, "maxBackoffSeconds": 120, "unschedulableFlushSeconds": 300}
    running = await start_scheduler(
        parse_config({"server": {"port": 0, "bindAddress": "127.0.0.1"}, "scheduling": settings}))
    gated = make_pod("gated", namespace="team-a", cpu="1")
    gated["spec"]["schedulingGates"] = [{"name": HOLD_GATE}]  # held from its creation
    await create_all(api, [make_node("small", cpu="4", memory="16Gi")],
                     [gated, make_pod("big", namespace="team-a", cpu="8")])
    await wait_for(lambda: decisions(running, "team-a/big"), what="big tried (and found no room)")

    code, out, err = await user.run(capsys, "hold", "big", "pod/gated", "-n", "team-a")
    assert (code, out.splitlines(), err) == (0, ["pod/big held", "pod/gated held"], "")
    await cluster.synced()  # the real backend's mirror: past our write
    assert annotations_of(cluster, "big")[HOLD_ANNOTATION] == "true"
    await wait_for(lambda: {line["pod"] for line in running.log_lines("pod.held")} >= {"team-a/big"},
                   what="the scheduler honours the hold")
    assert running.scheduler.core.queue.pending_counts()["gated"] == 2
    code, _, err = await user.run(capsys, "requeue", "big", "-n", "team-a")
    assert code == 1 and "pod team-a/big is held: release it" in err

    # Room for big appears while it is held: it stays pending; a pod that came after it is placed.
    await create_all(api, [make_node("large", cpu="16", memory="64Gi")],
                     [make_pod("after", namespace="team-a", cpu="10")])
    await wait_for(lambda: stored_pod(cluster, "after", "team-a")["spec"].get("nodeName") == "large",
                   what="a later pod placed on the new node")
    assert not stored_pod(cluster, "big", "team-a")["spec"].get("nodeName")
    assert len(decisions(running, "team-a/big")) == 1, "held: never tried again"

    code, out, err = await user.run(capsys, "release", "big", "gated", "-n", "team-a")
    assert (code, out.splitlines(), err) == (0, ["pod/big released", "pod/gated released"], "")
    await wait_for(lambda: stored_pod(cluster, "gated", "team-a")["spec"].get("nodeName") == "small",
                   what="the pod created gated placed once released")
    assert not stored_pod(cluster, "gated", "team-a")["spec"].get("schedulingGates")
    assert HOLD_ANNOTATION not in annotations_of(cluster, "gated")
    await wait_for(lambda: running.log_lines("pod.ungated"), what="the release seen")
    # big waits for room again (after took it), unheld: a bound pod can be neither held nor requeued.
    code, _, err = await user.run(capsys, "hold", "after", "-n", "team-a")
    assert code == 1 and "pod team-a/after is already bound to node large" in err
    code, _, err = await user.run(capsys, "requeue", "after", "-n", "team-a")
    assert code == 1 and "already bound" in err

    # big is unschedulable now and would wait for a cluster change (or a minute's backoff): requeue it.
    await wait_for(lambda: len(decisions(running, "team-a/big")) == 2, what="big tried after its release")
    code, out, err = await user.run(capsys, "requeue", "big", "-n", "team-a", "-o", "json")
    assert code == 0, err
    assert json.loads(out)["items"] == [{"kind": "pod", "namespace": "team-a", "name": "big", "ok": True,
                                         "message": "requeued"}]
    await cluster.synced()  # the real backend's mirror: past our write
    assert REQUEUE_ANNOTATION in annotations_of(cluster, "big")
    await wait_for(lambda: len(decisions(running, "team-a/big")) == 3, timeout=15,
                   what="big tried again at once, not after its backoff")
    assert [line["pod"] for line in running.log_lines("pod.requeued")] == ["team-a/big"]


async def test_cancel_deletes_a_pod_and_whole_gangs_as_a_user(
    cluster: Cluster, api: KubeClient, user: User, capsys: pytest.CaptureFixture[str],
) -> None:
    labels = {GROUP_NAME_LABEL: "pair", GROUP_MIN_LABEL: "2"}
    pods = [
        make_pod("solo", namespace="team-a"),
        *(make_pod(f"pair-{i}", namespace="team-a", labels=labels) for i in range(2)),
        *(make_pod(f"trio-{i}", namespace="team-a", labels={POD_GROUP_LABEL: "trio"}) for i in range(3)),
        make_pod("bystander", namespace="team-a"),
    ]
    assert (await api.create_podgroup(PodGroup("trio", 3, namespace="team-a").obj())).ok
    await create_all(api, [], pods)

    # The other write commands take a gang too: every member at once.
    for command, done in (("hold", "held"), ("release", "released"), ("requeue", "requeued")):
        code, out, err = await user.run(capsys, command, "gang/pair", "-n", "team-a")
        assert (code, out.splitlines(), err) == (0, [f"pod/pair-{i} {done}" for i in range(2)], ""), command
    await cluster.synced()
    for i in range(2):
        assert HOLD_ANNOTATION not in annotations_of(cluster, f"pair-{i}")
        assert REQUEUE_ANNOTATION in annotations_of(cluster, f"pair-{i}")

    code, out, err = await user.run(capsys, "cancel", "solo", "gang/pair", "gang/trio", "-n", "team-a")
    assert (code, err) == (0, "")
    assert out.splitlines() == ["pod/solo deleted", "pod/pair-0 deleted", "pod/pair-1 deleted",
                                "podgroup/trio deleted", "pod/trio-0 deleted", "pod/trio-1 deleted",
                                "pod/trio-2 deleted"]

    def left() -> list[str]:
        return sorted(p["metadata"]["name"] for p in cluster.store.list("pods", "team-a")
                      if not p["metadata"].get("deletionTimestamp"))

    await cluster.synced()
    await wait_for(lambda: left() == ["bystander"], what="only the bystander left")
    assert cluster.store.get("podgroups", "team-a", "trio") is None

    code, out, err = await user.run(capsys, "cancel", "gang/nobody", "-n", "team-a")
    assert (code, out) == (1, "") and "no gang nobody in namespace team-a" in err
    code, _, err = await user.run(capsys, "cancel", "ghost", "-n", "team-a")
    assert code == 1 and 'Error from server (NotFound): pods "ghost" not found' in err


async def test_the_read_commands_say_when_the_visibility_api_is_not_served(
    cluster: Cluster, user: User, capsys: pytest.CaptureFixture[str],
) -> None:
    """No daemon serves the visibility API here: the commands say so instead of failing obscurely."""
    expected = "error: the visibility API is not served: is ai-scheduler running with it?"
    for argv in (["queue"], ["queue", "-A"], ["why", "solo"], ["why", "gang/pair"], ["quota"], ["gpus"]):
        code, out, err = await user.run(capsys, *argv, "-n", "team-a")
        assert (code, out) == (1, ""), argv
        assert err.strip() == expected, argv


@pytest.mark.backend("kube", reason="RBAC exists only on a real API server")
async def test_what_rbac_forbids_is_refused_with_the_api_servers_message(
    cluster: Cluster, api: KubeClient, user: User, capsys: pytest.CaptureFixture[str],
) -> None:
    labels = {GROUP_NAME_LABEL: "theirs", GROUP_MIN_LABEL: "2"}
    held = make_pod("held", namespace="team-b", annotations={HOLD_ANNOTATION: "true"})
    theirs = [make_pod(f"theirs-{i}", namespace="team-b", labels=labels) for i in range(2)]
    await create_all(api, [], [make_pod("job", namespace="team-b"), held, *theirs])
    def forbidden(kind: str, name: str, verb: str, group: str = "") -> str:
        plural = kind.partition(".")[0]
        return (f'Error from server (Forbidden): {kind} "{name}" is forbidden: User "{USER}" cannot {verb} '
                f'resource "{plural}" in API group "{group}" in the namespace "team-b"')

    for argv, message in (
        (["hold", "job"], forbidden("pods", "job", "patch")),
        (["requeue", "job"], forbidden("pods", "job", "patch")),
        (["release", "held"], forbidden("pods", "held", "patch")),
        (["cancel", "job"], forbidden("pods", "job", "delete")),
        # A gang's PodGroup goes first: refused, nothing of the gang is deleted.
        (["cancel", "gang/theirs"],
         forbidden("podgroups.scheduling.x-k8s.io", "theirs", "delete", "scheduling.x-k8s.io")),
    ):
        code, out, err = await user.run(capsys, *argv, "-n", "team-b")
        assert (code, out, err.strip()) == (1, "", message), argv
    code, _, err = await user.run(capsys, "hold", "job", "-n", "kube-system")
    assert code == 1 and f'User "{USER}" cannot get resource "pods"' in err
    # Nothing changed: no annotation written, the hold kept, every pod still there.
    await cluster.synced()
    assert HOLD_ANNOTATION not in annotations_of(cluster, "job", "team-b")
    assert REQUEUE_ANNOTATION not in annotations_of(cluster, "job", "team-b")
    assert annotations_of(cluster, "held", "team-b")[HOLD_ANNOTATION] == "true"
    assert sorted(p["metadata"]["name"] for p in cluster.store.list("pods", "team-b")) == [
        "held", "job", "theirs-0", "theirs-1"]


@pytest.mark.backend("kube", reason="the rule is the real API server's validation")
async def test_a_real_api_server_refuses_a_scheduling_gate_added_after_creation(
    cluster: Cluster, api: KubeClient,
) -> None:
    """Why `hold` is an annotation: spec.schedulingGates may only shrink once a pod exists."""
    await create_all(api, [], [make_pod("late-gate", namespace="team-a")])
    result = await api.patch_pod("team-a", "late-gate", {"spec": {"schedulingGates": [{"name": HOLD_GATE}]}})
    assert result.status == 422, result.body
    assert "schedulingGates" in result.message


def gateway_user(gateway: Gateway, user: str, folder: Path) -> User:
    """A user of test_e2e_visibility's gateway (alice: team-a's pods; carol: the viewer), by kubeconfig."""
    path = folder / f"{user}.kubeconfig"
    if isinstance(gateway, KubeGateway):
        return User(gateway.plane.write_kubeconfig(path, gateway.plane.user_tokens[user]))
    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": "sim",
        "clusters": [{"name": "sim", "cluster": {"server": gateway.sim.url}}],
        "users": [{"name": user, "user": {"token": gateway.tokens[user]}}],
        "contexts": [{"name": "sim", "context": {"cluster": "sim", "user": user}}],
    }
    path.write_text(json.dumps(config))
    return User(path)


async def test_the_read_commands_show_the_queue_quotas_and_gpus_as_rbac_allows(
    gateway: Gateway, waiting: None, start_scheduler: StartScheduler, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The daemon serves the visibility API behind the aggregation layer (test_e2e_visibility's setup, on
    either backend): alice may see team-a's waiting pods; carol is an operator with the viewer role."""
    running = await start_scheduler(visibility_config(gateway.address))
    server = running.scheduler.visibility
    assert server is not None and server.port
    await gateway.route(server.port)
    await wait_for(lambda: len(decisions(running, "team-a/a-0")) and len(decisions(running, "team-a/a-1"))
                   and len(decisions(running, "team-b/b-0")), what="the three pods tried")
    alice, carol = gateway_user(gateway, "alice", tmp_path), gateway_user(gateway, "carol", tmp_path)
    code, out, err = await alice.run(capsys, "queue", "-n", "team-a")
    assert (code, err) == (0, ""), err
    header, *rows = out.splitlines()
    assert header.split()[:4] == ["POS", "NAME", "GANG", "QUEUE"]
    assert sorted(row.split()[1] for row in rows) == ["a-0", "a-1"]
    assert all("Insufficient cpu" in row for row in rows), rows
    code, out, _ = await alice.run(capsys, "queue", "-A")
    assert code == 0
    names = sorted(row.split()[2] for row in out.splitlines()[1:])
    assert names == ["<hidden>", "a-0", "a-1"], out  # bob's pod: where it stands, not what it is
    code, out, _ = await alice.run(capsys, "queue", "-n", "team-a", "-o", "json")
    assert code == 0 and json.loads(out)["kind"] == "PendingPodList"

    code, out, err = await alice.run(capsys, "why", "a-0", "-n", "team-a")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0] == "Pod team-a/a-0"
    assert any(line.startswith("  Reason:") and "Insufficient cpu" in line for line in lines), out
    assert any(line.startswith("  User / group:   alice / research") for line in lines), out
    code, _, err = await alice.run(capsys, "why", "b-0", "-n", "team-b")
    assert code == 1 and err.startswith("Error from server (Forbidden):")
    assert 'cannot get resource "pendingpods"' in err
    code, _, err = await alice.run(capsys, "why", "not-waiting", "-n", "team-a")
    assert code == 1 and "pod team-a/not-waiting is not waiting in ai-scheduler's queue" in err

    # Quotas and GPUs: the viewer's; refused to alice by the API server's RBAC, with its message.
    for argv in (["quota"], ["gpus"]):
        code, _, err = await alice.run(capsys, *argv)
        assert code == 1 and err.startswith("Error from server (Forbidden):"), argv
    code, out, err = await carol.run(capsys, "quota")
    assert (code, err) == (0, "")
    cells = [line.split() for line in out.splitlines()]
    assert cells[0] == ["KIND", "NAME", "RESOURCE", "USED", "MIN", "MAX"]
    assert ["group", "research", "cpu", "0", "8", "400"] in cells
    assert ["user", "alice", "cpu", "0", "<none>", "300"] in cells
    code, out, err = await carol.run(capsys, "gpus")
    assert (code, err) == (0, "")
    held = [line for line in out.splitlines() if "default/slice (10240 MiB)" in line]
    assert len(held) == 1, out
    node = held[0].split()[0]
    code, out, _ = await carol.run(capsys, "gpus", node, "-o", "json")
    assert code == 0 and json.loads(out)["kind"] == "GpuNode"

    # The same through kubectl, which runs the console script kubectl-ai_scheduler found on PATH.
    search = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    kubectl, plugin = shutil.which("kubectl", path=search), shutil.which("kubectl-ai_scheduler", path=search)
    if kubectl and plugin:  # the plugin is there once the package is installed
        env = {**os.environ, "PATH": search}
        result = await asyncio.to_thread(
            subprocess.run, [kubectl, "ai-scheduler", "queue", "-n", "team-a", "--kubeconfig",
                             str(alice.kubeconfig)], capture_output=True, text=True, env=env, check=False)
        assert result.returncode == 0, result.stderr
        assert sorted(line.split()[1] for line in result.stdout.splitlines()[1:]) == ["a-0", "a-1"]
