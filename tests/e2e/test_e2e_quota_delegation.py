"""Quotas group administrators delegate, end to end (config/delegated.py, daemon/quotas.py,
deploy/quota-delegation.yaml).

A cluster administrator makes the GroupQuotas and labels each namespace with its group; a group's
administrator (on the real backend a ServiceAccount with its own token, the ClusterRole
`ai-scheduler-group-admin` bound in the group's namespace) sets the users' UserQuotas there; a user reads
their own. The scheduler applies every change at once, without a restart. On the real backend the
admission policy refuses a user's max above what the group has left, RBAC refuses the group admin
another group's namespace, and the user may read but not change their quota. The simulated API server
has no authorization and no admission policies: there the group admin's client is the admin's.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from backends import Cluster, KubeCluster
from builders import make_node, make_pod
from conftest import StartScheduler, create_all, wait_for

from ai_scheduler.api.kube import MERGE_PATCH, KubeClient
from ai_scheduler.config import parse_config
from ai_scheduler.config.delegated import GROUP_LABEL
from ai_scheduler.sim.controlplane import ControlPlane
from e2e.test_e2e_scheduling import pod_condition

GPU = "nvidia.com/gpu"
API = "/apis/ai-scheduler.io/v1alpha1"
CONFIG = {"server": {"port": 0, "bindAddress": "127.0.0.1"},
          "scheduling": {"initialBackoffSeconds": 0.05, "maxBackoffSeconds": 0.2}}


def user_quota(name: str, group: str, gpus: int) -> dict[str, Any]:
    return {"apiVersion": "ai-scheduler.io/v1alpha1", "kind": "UserQuota", "metadata": {"name": name},
            "spec": {"group": group, "max": {GPU: gpus}}}


def group_quota(name: str, gpus: int) -> dict[str, Any]:
    return {"apiVersion": "ai-scheduler.io/v1alpha1", "kind": "GroupQuota", "metadata": {"name": name},
            "spec": {"max": {GPU: gpus}}}


def _grant(plane: ControlPlane) -> tuple[str, str]:
    """The group admin of vision (bound in team-a) and a user of team-a (a reader there): their tokens. Names
    of their own: the real control plane outlives the test, and test_e2e_status.py binds its `alice`."""
    for namespace, account, role in (("team-a", "vision-admin", "ai-scheduler-group-admin"),
                                     ("team-a", "vision-member", "ai-scheduler-quota-reader")):
        status, answer = plane.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts", {
            "apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": account}})
        assert status in (201, 409), answer
        status, answer = plane.request(
            "POST", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings", {
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                "metadata": {"name": f"quota-{account}"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
                "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}]})
        assert status in (201, 409), answer
    return (plane.service_account_token("team-a", "vision-admin"),
            plane.service_account_token("team-a", "vision-member"))


class People:
    """The group admin's and the user's clients (the admin's on the simulated backend)."""

    def __init__(self, group_admin: KubeClient, user: KubeClient) -> None:
        self.group_admin = group_admin
        self.user = user


@pytest.fixture
async def people(cluster: Cluster, api: KubeClient, tmp_path: Path) -> AsyncIterator[People]:
    """Namespaces team-a (group vision) and team-b (group nlp), their GroupQuotas, and the people."""
    for namespace, group in (("team-a", "vision"), ("team-b", "nlp")):
        assert (await api.create_namespace(namespace)).status in (201, 409)
        labels = {"metadata": {"labels": {GROUP_LABEL: group}}}
        labelled = await api.request("PATCH", f"/api/v1/namespaces/{namespace}", body=labels,
                                     content_type=MERGE_PATCH)
        assert labelled.ok, labelled.message
    for name, gpus in (("vision", 8), ("nlp", 4)):
        created = await api.request("POST", f"{API}/groupquotas", body=group_quota(name, gpus))
        assert created.ok, created.message
    if not isinstance(cluster, KubeCluster):
        yield People(api, api)
        return
    admin_token, user_token = await asyncio.to_thread(_grant, cluster.plane)
    clients = []
    for name, token in (("group-admin", admin_token), ("user", user_token)):
        path = cluster.plane.write_kubeconfig(tmp_path / f"{name}.kubeconfig", token)
        clients.append(await KubeClient.connect(str(path)))
    yield People(*clients)
    for client in clients:
        await client.close()


def status_of(cluster: Cluster, resource: str, name: str, namespace: str | None = None) -> dict[str, Any]:
    return dict((cluster.store.get(resource, namespace, name) or {}).get("status") or {})


def bound(cluster: Cluster, prefix: str) -> int:
    return sum(1 for p in cluster.store.list("pods", "team-a")
               if p["metadata"]["name"].startswith(prefix) and p["spec"].get("nodeName"))


async def test_a_group_admin_raises_a_users_limit_and_the_scheduler_applies_it_without_a_restart(
    cluster: Cluster, api: KubeClient, people: People, start_scheduler: StartScheduler
) -> None:
    running = await start_scheduler(parse_config(CONFIG))
    made = await people.group_admin.request("POST", f"{API}/namespaces/team-a/userquotas",
                                            body=user_quota("alice", "vision", 2))
    assert made.ok, made.message
    await wait_for(lambda: status_of(cluster, "userquotas", "alice", "team-a").get("applied") is True
                   and status_of(cluster, "groupquotas", "vision").get("allocated") == {GPU: "2"},
                   what="the quota applied and the group's allocation written")
    pods = [make_pod(f"a-{i}", namespace="team-a", cpu="1", gpus=1, duration=600) for i in range(4)]
    await create_all(api, [make_node("gpu-0", cpu="32", memory="128Gi", gpus=8)], pods)
    await wait_for(lambda: bound(cluster, "a-") == 2, what="alice's two GPUs used")
    await wait_for(lambda: any(pod_condition(cluster, f"a-{i}", "team-a").get("message", "").startswith(
        "exceeds quota of user alice") for i in range(4)), what="the others refused by alice's quota")
    await asyncio.sleep(0.5)
    assert bound(cluster, "a-") == 2

    raised = await people.group_admin.request("PATCH", f"{API}/namespaces/team-a/userquotas/alice",
                                              body={"spec": {"max": {GPU: 4}}}, content_type=MERGE_PATCH)
    assert raised.ok, raised.message
    await wait_for(lambda: bound(cluster, "a-") == 4, what="the raised limit applied live")
    await wait_for(lambda: status_of(cluster, "groupquotas", "vision").get("allocated") == {GPU: "4"}
                   and status_of(cluster, "userquotas", "alice", "team-a").get("effectiveMax") == {GPU: "4"},
                   what="the statuses follow")
    assert running.log_lines("quotas.applied") and not running.task.done()
    assert len(running.log_lines("scheduler.starting")) == 1  # no restart


@pytest.mark.backend("kube", reason="RBAC and admission policies exist only on a real API server")
async def test_a_group_admin_is_refused_above_the_group_and_for_another_group_and_a_user_only_reads(
    cluster: Cluster, api: KubeClient, people: People, start_scheduler: StartScheduler
) -> None:
    await start_scheduler(parse_config(CONFIG))
    admin = people.group_admin
    assert (await admin.request("POST", f"{API}/namespaces/team-a/userquotas",
                                body=user_quota("alice", "vision", 6))).ok
    await wait_for(lambda: status_of(cluster, "groupquotas", "vision").get("allocated") == {GPU: "6"},
                   what="the group's allocation written")
    # Above what the group has left (8 - 6, her own 6 given back: 8 at most).
    over = await admin.request("PATCH", f"{API}/namespaces/team-a/userquotas/alice",
                               body={"spec": {"max": {GPU: 9}}}, content_type=MERGE_PATCH)
    # The admission policy's refusal (reason Forbidden: 403), with what the group has.
    assert over.status == 403 and "ValidatingAdmissionPolicy 'ai-scheduler-user-quotas'" in over.message
    assert over.message.endswith("denied request: spec.max is above what group vision has left: "
                                 "nvidia.com/gpu 9 asked, the group has 8 of which 6 allocated"), over.message
    within = await admin.request("PATCH", f"{API}/namespaces/team-a/userquotas/alice",
                                 body={"spec": {"max": {GPU: 8}}}, content_type=MERGE_PATCH)
    assert within.ok, within.message
    await wait_for(lambda: status_of(cluster, "groupquotas", "vision").get("allocated") == {GPU: "8"},
                   what="the group's allocation written again")
    # A second user of the group: nothing left.
    quotas = f"{API}/namespaces/team-a/userquotas"
    bob = await admin.request("POST", quotas, body=user_quota("bob", "vision", 1))
    assert bob.status == 403 and "has left: nvidia.com/gpu 1 asked" in bob.message, bob.message
    # Another group: its namespace is not theirs (RBAC), and a quota in their namespace cannot name it.
    elsewhere = await admin.request("POST", f"{API}/namespaces/team-b/userquotas",
                                    body=user_quota("eve", "nlp", 1))
    assert elsewhere.status == 403 and "cannot create resource" in elsewhere.message, elsewhere.message
    renamed = await admin.request("PATCH", f"{API}/namespaces/team-a/userquotas/alice",
                                  body={"spec": {"group": "nlp", "max": {GPU: 1}}}, content_type=MERGE_PATCH)
    assert renamed.status == 403, renamed.message
    assert "spec.group nlp is not the group of namespace team-a" in renamed.message
    groups = await admin.request("PATCH", f"{API}/groupquotas/vision", body={"spec": {"max": {GPU: 80}}},
                                 content_type=MERGE_PATCH)
    assert groups.status == 403 and "cannot patch resource" in groups.message, groups.message
    # The user reads their own quota, and cannot change it.
    mine = await people.user.request("GET", f"{API}/namespaces/team-a/userquotas/alice")
    assert mine.ok and mine.body["spec"]["max"] == {GPU: 8}
    changed = await people.user.request("PATCH", f"{API}/namespaces/team-a/userquotas/alice",
                                        body={"spec": {"max": {GPU: 1}}}, content_type=MERGE_PATCH)
    assert changed.status == 403 and "cannot patch resource" in changed.message, changed.message
    # Nothing refused reached the scheduler: alice still has 8, the group 8 allocated.
    await asyncio.sleep(1.0)
    assert status_of(cluster, "groupquotas", "vision")["allocated"] == {GPU: "8"}
    assert status_of(cluster, "userquotas", "alice", "team-a")["effectiveMax"] == {GPU: "8"}
