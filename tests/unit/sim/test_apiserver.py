"""The simulated API server, driven over HTTP with the real kubernetes_asyncio client.

These pin the behaviour of a real kube-apiserver that the scheduler depends
on; where it matters the expected bodies are copied from a real server.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from builders import make_node, make_pod
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client import ApiClient, Configuration, CoreV1Api, CustomObjectsApi

from ai_scheduler.sim import SimApiServer, write_kubeconfig
from ai_scheduler.sim.store import DEFAULT_TYPES, Registry, ResourceType, Store

# The generated API is driven in raw mode (`_preload_content=False`: dicts in, aiohttp responses out),
# which kubernetes_asyncio's stubs do not describe (they type model objects in and out).
RawApi = Any

NOT_READY = "node.kubernetes.io/not-ready"
UNREACHABLE = "node.kubernetes.io/unreachable"


@pytest.fixture
async def sim() -> AsyncIterator[SimApiServer]:
    server = SimApiServer(bookmark_interval=0.1)
    await server.start()
    yield server
    await server.stop()


@pytest.fixture
async def bare() -> AsyncIterator[SimApiServer]:
    """kwok-style: no kubelets, no node controller."""
    server = SimApiServer(kubelets=False, node_controller=False, bookmark_interval=0.1)
    await server.start()
    yield server
    await server.stop()


async def _api(server: SimApiServer) -> ApiClient:
    return ApiClient(Configuration(host=server.url))


@pytest.fixture
async def v1(sim: SimApiServer) -> AsyncIterator[RawApi]:
    async with await _api(sim) as api:
        yield CoreV1Api(api)


@pytest.fixture
async def bare_v1(bare: SimApiServer) -> AsyncIterator[RawApi]:
    async with await _api(bare) as api:
        yield CoreV1Api(api)


async def body(resp: aiohttp.ClientResponse) -> Any:
    return orjson.loads(await resp.read())


async def eventually(check: Callable[[], Awaitable[bool]], timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.02)


async def read_events(
    resp: aiohttp.ClientResponse, count: int, timeout: float = 5.0, skip_bookmarks: bool = True
) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    while len(events) < count:
        line = await asyncio.wait_for(resp.content.readline(), timeout)
        if not line:
            break
        event = orjson.loads(line)
        if skip_bookmarks and event["type"] == "BOOKMARK":
            continue
        events.append(event)
    return events


async def get_pod(v1: RawApi, name: str, namespace: str = "default") -> dict[str, Any] | None:
    resp = await v1.read_namespaced_pod(name, namespace, _preload_content=False)
    return None if resp.status == 404 else await body(resp)


async def bind(v1: RawApi, name: str, node: str, uid: str | None = None) -> aiohttp.ClientResponse:
    meta: dict[str, Any] = {"name": name, "namespace": "default"}
    if uid:
        meta["uid"] = uid
    resp: aiohttp.ClientResponse = await v1.create_namespaced_pod_binding(
        name,
        "default",
        {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": meta,
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        },
        _preload_content=False,
    )
    return resp


# ---------------------------------------------------------------- basics


async def test_create_get_list_and_errors(v1: RawApi) -> None:
    resp = await v1.create_namespaced_pod("default", make_pod("a"), _preload_content=False)
    assert resp.status == 201
    created = await body(resp)
    meta = created["metadata"]
    assert created["kind"] == "Pod" and created["apiVersion"] == "v1"
    assert meta["uid"] and meta["generation"] == 1 and meta["creationTimestamp"].endswith("Z")
    assert created["spec"]["schedulerName"] == "ai-scheduler"
    assert created["status"]["phase"] == "Pending"

    got = await get_pod(v1, "a")
    assert got == created

    resp = await v1.create_namespaced_pod("default", make_pod("a"), _preload_content=False)
    assert resp.status == 409
    assert await body(resp) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'pods "a" already exists',
        "reason": "AlreadyExists",
        "details": {"name": "a", "kind": "pods"},
        "code": 409,
    }

    resp = await v1.read_namespaced_pod("missing", "default", _preload_content=False)
    assert resp.status == 404
    assert await body(resp) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'pods "missing" not found',
        "reason": "NotFound",
        "details": {"name": "missing", "kind": "pods"},
        "code": 404,
    }

    pod = make_pod("x")
    del pod["metadata"]["name"]
    pod["metadata"]["generateName"] = "job-"
    generated = await body(await v1.create_namespaced_pod("default", pod, _preload_content=False))
    name = generated["metadata"]["name"]
    assert name.startswith("job-") and len(name) == len("job-") + 5 and name[4:].isalnum()

    del pod["metadata"]["generateName"]
    resp = await v1.create_namespaced_pod("default", pod, _preload_content=False)
    assert resp.status == 422 and (await body(resp))["reason"] == "Invalid"

    await v1.create_namespaced_pod("other", make_pod("b", namespace="other"))
    listed = await body(await v1.list_pod_for_all_namespaces(_preload_content=False))
    assert listed["kind"] == "PodList" and listed["apiVersion"] == "v1"
    assert int(listed["metadata"]["resourceVersion"]) >= int(generated["metadata"]["resourceVersion"])
    assert sorted(p["metadata"]["name"] for p in listed["items"]) == sorted(["a", name, "b"])
    in_ns = await body(await v1.list_namespaced_pod("other", _preload_content=False))
    assert [p["metadata"]["name"] for p in in_ns["items"]] == ["b"]

    # Typed mode works too, and the server answers its version.
    typed = await v1.list_namespaced_pod("default")
    assert {p.metadata.name for p in typed.items} == {"a", name}
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{v1.api_client.configuration.host}/version") as resp:
            assert (await resp.json())["minor"] == "37"
        async with session.post(
            f"{v1.api_client.configuration.host}/api/v1/namespaces/default/pods",
            data=b"{not json",
            headers={"Content-Type": "application/json"},
        ) as resp:
            assert resp.status == 400 and (await resp.json())["reason"] == "BadRequest"
        async with session.patch(
            f"{v1.api_client.configuration.host}/api/v1/namespaces/default/pods/a",
            data=b"{}",
            headers={"Content-Type": "application/apply-patch+yaml"},
        ) as resp:
            assert resp.status == 415 and (await resp.json())["reason"] == "UnsupportedMediaType"


async def test_replace_is_optimistic(v1: RawApi) -> None:
    pod = await body(await v1.create_namespaced_pod("default", make_pod("a"), _preload_content=False))
    pod["metadata"]["labels"] = {"v": "1"}
    resp = await v1.replace_namespaced_pod("a", "default", pod, _preload_content=False)
    assert resp.status == 200
    updated = await body(resp)
    assert int(updated["metadata"]["resourceVersion"]) > int(pod["metadata"]["resourceVersion"])
    pod["metadata"]["labels"] = {"v": "2"}  # still carries the old resourceVersion
    resp = await v1.replace_namespaced_pod("a", "default", pod, _preload_content=False)
    assert resp.status == 409 and (await body(resp))["reason"] == "Conflict"
    resp = await v1.patch_namespaced_pod(
        "a",
        "default",
        {"metadata": {"resourceVersion": pod["metadata"]["resourceVersion"], "labels": {"v": "3"}}},
        _preload_content=False,
    )
    assert resp.status == 409
    assert (await get_pod(v1, "a"))["metadata"]["labels"] == {"v": "1"}  # type: ignore[index]


async def test_pagination(v1: RawApi) -> None:
    for i in range(5):
        await v1.create_namespaced_pod("default", make_pod(f"p{i}"))
    names: list[str] = []
    token = None
    while True:
        page = await body(
            await v1.list_namespaced_pod("default", limit=2, _continue=token, _preload_content=False)
        )
        names += [p["metadata"]["name"] for p in page["items"]]
        token = page["metadata"].get("continue")
        if not token:
            break
    assert names == [f"p{i}" for i in range(5)]


# ---------------------------------------------------------------- watch


async def test_watch_from_version_replays_later_events(v1: RawApi) -> None:
    await v1.create_namespaced_pod("default", make_pod("before"))
    listed = await body(await v1.list_namespaced_pod("default", _preload_content=False))
    rv = listed["metadata"]["resourceVersion"]
    await v1.create_namespaced_pod("default", make_pod("after"))
    await v1.patch_namespaced_pod("after", "default", {"metadata": {"labels": {"x": "y"}}})
    await v1.delete_namespaced_pod("after", "default")
    await v1.create_node(make_node("n-ignored"))  # another kind: not in this watch

    resp = await v1.list_namespaced_pod("default", watch=True, resource_version=rv, _preload_content=False)
    events = await read_events(resp, 3)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("ADDED", "after"),
        ("MODIFIED", "after"),
        ("DELETED", "after"),
    ]
    versions = [int(e["object"]["metadata"]["resourceVersion"]) for e in events]
    assert versions == sorted(versions) and versions[0] > int(rv)
    assert events[1]["object"]["metadata"]["labels"] == {"x": "y"}
    assert events[2]["object"]["kind"] == "Pod"

    # live events follow the replay on the same stream
    await v1.create_namespaced_pod("default", make_pod("live"))
    (live,) = await read_events(resp, 1)
    assert live["type"] == "ADDED" and live["object"]["metadata"]["name"] == "live"
    resp.close()

    # resourceVersion unset: synthetic ADDED for the current state, then live events
    resp = await v1.list_namespaced_pod("default", watch=True, _preload_content=False)
    initial = await read_events(resp, 2)
    assert sorted(e["object"]["metadata"]["name"] for e in initial) == ["before", "live"]
    assert {e["type"] for e in initial} == {"ADDED"}
    resp.close()


async def test_bookmarks_and_timeout(v1: RawApi) -> None:
    listed = await body(await v1.list_namespaced_pod("default", _preload_content=False))
    resp = await v1.list_namespaced_pod(
        "default",
        watch=True,
        allow_watch_bookmarks=True,
        timeout_seconds=1,
        resource_version=listed["metadata"]["resourceVersion"],
        _preload_content=False,
    )
    assert resp.headers["Content-Type"].startswith("application/json")
    (event,) = await read_events(resp, 1, skip_bookmarks=False)
    assert event == {
        "type": "BOOKMARK",
        "object": {
            "kind": "Pod",
            "apiVersion": "v1",
            "metadata": {"resourceVersion": listed["metadata"]["resourceVersion"]},
        },
    }
    # timeoutSeconds closes the stream cleanly
    rest = await asyncio.wait_for(resp.content.read(), 5)
    assert all(orjson.loads(line)["type"] == "BOOKMARK" for line in rest.splitlines())


async def test_compact_makes_old_versions_expire(sim: SimApiServer, v1: RawApi) -> None:
    await v1.create_namespaced_pod("default", make_pod("a"))
    old_rv = (await body(await v1.list_namespaced_pod("default", _preload_content=False)))["metadata"][
        "resourceVersion"
    ]
    async with aiohttp.ClientSession() as session, session.post(f"{sim.url}/sim/v1/compact") as resp:
        assert resp.status == 200
    resp = await v1.list_namespaced_pod(
        "default", watch=True, resource_version=old_rv, _preload_content=False
    )
    assert resp.status == 200
    (event,) = await read_events(resp, 1)
    assert event["type"] == "ERROR"
    status = event["object"]
    assert status["code"] == 410 and status["reason"] == "Expired" and status["kind"] == "Status"
    assert status["message"].startswith(f"too old resource version: {old_rv} (")
    assert await resp.content.read() == b""  # and the stream ends

    resp = await v1.list_namespaced_pod(
        "default", resource_version=old_rv, resource_version_match="Exact", _preload_content=False
    )
    assert resp.status == 410 and (await body(resp))["reason"] == "Expired"

    # a relist gives a version that can be watched from
    new_rv = (await body(await v1.list_namespaced_pod("default", _preload_content=False)))["metadata"][
        "resourceVersion"
    ]
    resp = await v1.list_namespaced_pod(
        "default", watch=True, resource_version=new_rv, _preload_content=False
    )
    await v1.create_namespaced_pod("default", make_pod("b"))
    (event,) = await read_events(resp, 1)
    assert event["type"] == "ADDED" and event["object"]["metadata"]["name"] == "b"
    resp.close()


async def test_history_limit_expires_old_versions() -> None:
    store = Store(history_limit=3)
    pods = store.registry.resolve("pods")
    for i in range(5):
        store.create(pods, {"metadata": {"name": f"p{i}", "namespace": "default"}})
    store.watch(pods, None, None, 2, False)  # events 3..5 are retained
    with pytest.raises(Exception, match="too old resource version: 1"):
        store.watch(pods, None, None, 1, False)


async def test_cut_watches(sim: SimApiServer, v1: RawApi) -> None:
    resp = await v1.list_namespaced_pod("default", watch=True, _preload_content=False)
    await eventually(lambda: _watches(sim, 1))
    async with aiohttp.ClientSession() as session, session.post(f"{sim.url}/sim/v1/cut-watches") as cut:
        assert (await cut.json()) == {"cut": 1}
    with pytest.raises((aiohttp.ClientPayloadError, aiohttp.ClientConnectionError, ConnectionError)):
        data = await asyncio.wait_for(resp.content.read(), 5)
        if not data:  # an early EOF is what some clients see instead
            raise ConnectionError("early EOF")
    await eventually(lambda: _watches(sim, 0))


async def _watches(sim: SimApiServer, count: int) -> bool:
    watches: int = sim.stats()["watches"]
    return watches == count


async def test_garble_watches(sim: SimApiServer, v1: RawApi) -> None:
    resp = await v1.list_namespaced_pod("default", watch=True, _preload_content=False)
    await eventually(lambda: _watches(sim, 1))
    assert sim.garble_watches() == 1
    line = await asyncio.wait_for(resp.content.readline(), 5)
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(line)
    resp.close()


async def test_stop_ends_open_watches() -> None:
    server = SimApiServer()
    await server.start()
    async with await _api(server) as api:
        raw_v1: RawApi = CoreV1Api(api)
        resp = await raw_v1.list_node(watch=True, _preload_content=False)
        await eventually(lambda: _watches(server, 1))
        await asyncio.wait_for(server.stop(), 5)
        with pytest.raises((aiohttp.ClientPayloadError, aiohttp.ClientConnectionError)):
            if await asyncio.wait_for(resp.content.read(), 5) == b"":
                raise aiohttp.ClientConnectionError("ended")


async def test_filtered_watch_sees_objects_enter_and_leave(v1: RawApi) -> None:
    await v1.create_namespaced_pod("default", make_pod("a", labels={"app": "web"}))
    resp = await v1.list_namespaced_pod(
        "default",
        watch=True,
        label_selector="app=web",
        field_selector="status.phase!=Succeeded",
        _preload_content=False,
    )
    (first,) = await read_events(resp, 1)
    assert first["type"] == "ADDED"
    await v1.create_namespaced_pod("default", make_pod("b", labels={"app": "db"}))  # filtered out
    await v1.patch_namespaced_pod("b", "default", {"metadata": {"labels": {"app": "web"}}})  # enters
    await v1.patch_namespaced_pod("a", "default", {"metadata": {"labels": {"app": "db"}}})  # leaves
    events = await read_events(resp, 2)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("ADDED", "b"),
        ("DELETED", "a"),
    ]
    resp.close()


# ---------------------------------------------------------------- selectors


async def test_label_and_field_selectors(bare_v1: RawApi) -> None:
    v1 = bare_v1
    await v1.create_node(make_node("n1"))
    await v1.create_namespaced_pod("default", make_pod("web-1", labels={"app": "web", "tier": "front"}))
    await v1.create_namespaced_pod("default", make_pod("web-2", labels={"app": "web"}))
    await v1.create_namespaced_pod("default", make_pod("db-1", labels={"app": "db"}))
    await v1.create_namespaced_pod("ops", make_pod("tool", namespace="ops"))
    assert (await bind(v1, "web-2", "n1")).status == 201

    async def names(**kwargs: Any) -> list[str]:
        listed = await body(await v1.list_pod_for_all_namespaces(_preload_content=False, **kwargs))
        return sorted(p["metadata"]["name"] for p in listed["items"])

    assert await names(label_selector="app=web") == ["web-1", "web-2"]
    assert await names(label_selector="app==web,tier") == ["web-1"]
    assert await names(label_selector="app!=web") == ["db-1", "tool"]
    assert await names(label_selector="!tier,app") == ["db-1", "web-2"]
    assert await names(label_selector="app in (db, web),!tier") == ["db-1", "web-2"]
    assert await names(field_selector="spec.nodeName=") == ["db-1", "tool", "web-1"]
    assert await names(field_selector="spec.nodeName=n1") == ["web-2"]
    assert await names(field_selector="metadata.namespace=ops") == ["tool"]
    assert await names(field_selector="metadata.name=db-1,status.phase=Pending") == ["db-1"]
    assert await names(field_selector="status.phase!=Pending") == []


# ---------------------------------------------------------------- bindings


async def test_binding_answers_status_and_conflicts(bare: SimApiServer, bare_v1: RawApi) -> None:
    v1 = bare_v1
    pod = await body(await v1.create_namespaced_pod("default", make_pod("p"), _preload_content=False))
    resp = await bind(v1, "p", "node-a", uid=pod["metadata"]["uid"])
    assert resp.status == 201
    assert await body(resp) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "code": 201,
    }
    bound = await get_pod(v1, "p")
    assert bound is not None and bound["spec"]["nodeName"] == "node-a"
    scheduled = [c for c in bound["status"]["conditions"] if c["type"] == "PodScheduled"]
    assert len(scheduled) == 1 and scheduled[0]["status"] == "True"
    assert bound["status"]["phase"] == "Pending"  # no kubelet

    resp = await bind(v1, "p", "node-b")
    assert resp.status == 409
    assert await body(resp) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'Operation cannot be fulfilled on pods/binding "p": '
        'pod p is already assigned to node "node-a"',
        "reason": "Conflict",
        "details": {"name": "p", "kind": "pods"},
        "code": 409,
    }

    await v1.create_namespaced_pod("default", make_pod("q"))
    assert (await bind(v1, "q", "node-a", uid="not-the-uid")).status == 409
    assert (await bind(v1, "missing", "node-a")).status == 404
    # the legacy collection endpoint
    resp = await v1.create_namespaced_binding(
        "default", {"metadata": {"name": "q"}, "target": {"name": "node-c"}}, _preload_content=False
    )
    assert resp.status == 201
    assert (await get_pod(v1, "q"))["spec"]["nodeName"] == "node-c"  # type: ignore[index]
    assert bare.stats()["bindings"] == {"ok": 2, "conflicts": 2}


async def test_bind_conflict_injection(bare: SimApiServer, bare_v1: RawApi) -> None:
    v1 = bare_v1
    await v1.create_namespaced_pod("default", make_pod("p"))
    rv = (await body(await v1.list_namespaced_pod("default", _preload_content=False)))["metadata"][
        "resourceVersion"
    ]
    watch = await v1.list_namespaced_pod("default", watch=True, resource_version=rv, _preload_content=False)
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"{bare.url}/sim/v1/bind-conflicts", json={"namespace": "default", "name": "p", "node": "rival"}
        ) as resp,
    ):
        assert resp.status == 201
    resp = await bind(v1, "p", "mine")
    assert resp.status == 409
    assert 'already assigned to node "rival"' in (await body(resp))["message"]
    (event,) = await read_events(watch, 1)
    assert event["type"] == "MODIFIED" and event["object"]["spec"]["nodeName"] == "rival"
    watch.close()
    # only the next binding was affected
    await v1.create_namespaced_pod("default", make_pod("r"))
    assert (await bind(v1, "r", "mine")).status == 201


async def test_typed_binding_fails_to_decode_like_against_a_real_server(bare_v1: RawApi) -> None:
    await bare_v1.create_namespaced_pod("default", make_pod("p"))
    target = client.V1ObjectReference(kind="Node", name="n1")
    with pytest.raises(ValueError):
        await bare_v1.create_namespaced_pod_binding(
            "p", "default", client.V1Binding(metadata=client.V1ObjectMeta(name="p"), target=target)
        )
    assert (await get_pod(bare_v1, "p"))["spec"]["nodeName"] == "n1"  # type: ignore[index]


# ---------------------------------------------------------------- status subresource and patches


async def test_node_status_only_through_subresource(bare_v1: RawApi) -> None:
    v1 = bare_v1
    await v1.create_node(make_node("n1", cpu="8"))
    resp = await v1.patch_node(
        "n1",
        {"status": {"allocatable": {"cpu": "99"}}, "metadata": {"labels": {"a": "b"}}},
        _preload_content=False,
    )
    assert resp.status == 200
    node = await body(resp)
    assert node["status"]["allocatable"]["cpu"] == "8"  # silently ignored, as the real server does
    assert node["metadata"]["labels"]["a"] == "b"

    node["status"]["allocatable"]["cpu"] = "99"
    node["spec"]["unschedulable"] = True
    replaced = await body(await v1.replace_node("n1", node, _preload_content=False))
    assert replaced["status"]["allocatable"]["cpu"] == "8" and replaced["spec"]["unschedulable"] is True

    resp = await v1.patch_node_status(
        "n1",
        {"status": {"allocatable": {"cpu": "16"}}, "spec": {"unschedulable": False}},
        _preload_content=False,
    )
    patched = await body(resp)
    assert patched["status"]["allocatable"]["cpu"] == "16"
    assert patched["spec"]["unschedulable"] is True  # spec untouched by /status
    status = await body(await v1.read_node_status("n1", _preload_content=False))
    assert status["status"]["allocatable"]["cpu"] == "16"


async def test_pod_status_subresource_and_patches(bare_v1: RawApi) -> None:
    v1 = bare_v1
    await v1.create_namespaced_pod("default", make_pod("p"))
    condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/3 nodes"}
    resp = await v1.patch_namespaced_pod_status(
        "p",
        "default",
        {"status": {"conditions": [condition]}, "spec": {"nodeName": "sneaky"}},
        _preload_content=False,
    )
    assert resp.status == 200
    pod = await body(resp)
    assert pod["status"]["conditions"] == [condition]
    assert "nodeName" not in pod["spec"]
    assert pod["status"]["phase"] == "Pending"

    # strategic merge: conditions merge by type
    ready = {"type": "Ready", "status": "False"}
    pod = await body(
        await v1.patch_namespaced_pod_status(
            "p", "default", {"status": {"conditions": [ready]}}, _preload_content=False
        )
    )
    assert [c["type"] for c in pod["status"]["conditions"]] == ["PodScheduled", "Ready"]
    # merge patch: the list is replaced
    pod = await body(
        await v1.patch_namespaced_pod_status(
            "p",
            "default",
            {"status": {"conditions": [ready]}},
            _content_type="application/merge-patch+json",
            _preload_content=False,
        )
    )
    assert pod["status"]["conditions"] == [ready]
    # $patch: delete removes the keyed item
    pod = await body(
        await v1.patch_namespaced_pod_status(
            "p",
            "default",
            {"status": {"conditions": [{"type": "Ready", "$patch": "delete"}]}},
            _preload_content=False,
        )
    )
    assert pod["status"]["conditions"] == []
    # a patch of status on the main resource is ignored; PUT /status keeps spec
    pod = await body(
        await v1.patch_namespaced_pod(
            "p", "default", {"status": {"phase": "Running"}}, _preload_content=False
        )
    )
    assert pod["status"]["phase"] == "Pending"
    pod["spec"]["schedulerName"] = "other"
    pod["status"]["phase"] = "Failed"
    pod = await body(await v1.replace_namespaced_pod_status("p", "default", pod, _preload_content=False))
    assert pod["status"]["phase"] == "Failed" and pod["spec"]["schedulerName"] == "ai-scheduler"
    # JSON patch is accepted too
    pod = await body(
        await v1.patch_namespaced_pod(
            "p",
            "default",
            [{"op": "add", "path": "/metadata/annotations", "value": {"k": "v"}}],
            _preload_content=False,
        )
    )
    assert pod["metadata"]["annotations"] == {"k": "v"}


async def test_podgroup_custom_resource(sim: SimApiServer) -> None:
    async with await _api(sim) as api:
        custom: RawApi = CustomObjectsApi(api)
        group = {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "kind": "PodGroup",
            "metadata": {"name": "g"},
            "spec": {"minMember": 3},
            "status": {"phase": "Bogus"},
        }
        created = await body(
            await custom.create_namespaced_custom_object(
                "scheduling.x-k8s.io", "v1alpha1", "default", "podgroups", group, _preload_content=False
            )
        )
        assert "status" not in created and created["spec"]["minMember"] == 3
        # kubernetes_asyncio sends a dict patch for a custom object as json-patch+json unless told
        # otherwise; a real server rejects that, and so does this one.
        args = (
            "scheduling.x-k8s.io",
            "v1alpha1",
            "default",
            "podgroups",
            "g",
            {"status": {"phase": "Scheduling"}},
        )
        resp = await custom.patch_namespaced_custom_object_status(*args, _preload_content=False)
        assert resp.status == 422
        resp = await custom.patch_namespaced_custom_object_status(
            *args, _content_type="application/strategic-merge-patch+json", _preload_content=False
        )
        assert resp.status == 415  # no strategic merge patch for custom resources
        patched = await body(
            await custom.patch_namespaced_custom_object_status(
                *args, _content_type="application/merge-patch+json", _preload_content=False
            )
        )
        assert patched["status"] == {"phase": "Scheduling"}
        listed = await body(
            await custom.list_cluster_custom_object(
                "scheduling.x-k8s.io", "v1alpha1", "podgroups", _preload_content=False
            )
        )
        assert listed["kind"] == "PodGroupList" and len(listed["items"]) == 1
        missing = await custom.get_namespaced_custom_object(
            "scheduling.x-k8s.io", "v1alpha1", "default", "podgroups", "nope", _preload_content=False
        )
        assert (await body(missing))["message"] == 'podgroups.scheduling.x-k8s.io "nope" not found'


async def test_events_create_and_aggregate(v1: RawApi) -> None:
    event = {
        "metadata": {"name": "p.1", "namespace": "default"},
        "reason": "Scheduled",
        "type": "Normal",
        "message": "Successfully assigned default/p to n1",
        "count": 1,
        "involvedObject": {"kind": "Pod", "name": "p", "namespace": "default"},
    }
    assert (await v1.create_namespaced_event("default", event, _preload_content=False)).status == 201
    resp = await v1.patch_namespaced_event(
        "p.1", "default", {"count": 2, "lastTimestamp": "2026-01-01T00:00:00Z"}, _preload_content=False
    )
    assert (await body(resp))["count"] == 2
    listed = await body(
        await v1.list_namespaced_event(
            "default", field_selector="involvedObject.name=p,reason=Scheduled", _preload_content=False
        )
    )
    assert len(listed["items"]) == 1


async def test_event_store_is_bounded() -> None:
    types = [t for t in DEFAULT_TYPES if t.plural != "events"] + [
        ResourceType("events", "Event", max_objects=3)
    ]
    store = Store(Registry(types))
    events = store.registry.resolve("events")
    for i in range(5):
        store.create(events, {"metadata": {"name": f"e{i}"}})
    assert [e["metadata"]["name"] for e in store.list("events")] == ["e2", "e3", "e4"]


# ---------------------------------------------------------------- deletion and kubelets


async def test_delete_without_kubelets(bare_v1: RawApi) -> None:
    v1 = bare_v1
    await v1.create_namespaced_pod("default", make_pod("unbound"))
    resp = await v1.delete_namespaced_pod("unbound", "default", _preload_content=False)
    assert resp.status == 200 and (await body(resp))["metadata"]["name"] == "unbound"
    assert await get_pod(v1, "unbound") is None

    await v1.create_namespaced_pod("default", make_pod("bound"))
    await bind(v1, "bound", "n1")
    deleted = await body(await v1.delete_namespaced_pod("bound", "default", _preload_content=False))
    assert (
        deleted["metadata"]["deletionTimestamp"] and deleted["metadata"]["deletionGracePeriodSeconds"] == 30
    )
    terminating = await get_pod(v1, "bound")
    assert terminating is not None and terminating["metadata"]["deletionTimestamp"]
    # a terminating pod cannot be bound again
    assert (await bind(v1, "bound", "n2")).status == 409

    resp = await v1.delete_namespaced_pod("bound", "default", grace_period_seconds=0, _preload_content=False)
    assert resp.status == 200
    assert await get_pod(v1, "bound") is None

    await v1.create_namespaced_pod("default", make_pod("body-opts"))
    await bind(v1, "body-opts", "n1")
    await v1.delete_namespaced_pod(
        "body-opts", "default", body=client.V1DeleteOptions(grace_period_seconds=0)
    )
    assert await get_pod(v1, "body-opts") is None


async def test_kubelet_runs_finishes_and_removes_pods(v1: RawApi) -> None:
    await v1.create_node(make_node("n1"))
    await v1.create_node(make_node("kwok", labels={"sim.ai-scheduler.io/kubelet": "false"}))
    await v1.create_namespaced_pod("default", make_pod("job", duration="0.3s"))
    await v1.create_namespaced_pod("default", make_pod("svc"))
    await v1.create_namespaced_pod("default", make_pod("idle"))
    for name, node in (("job", "n1"), ("svc", "n1"), ("idle", "kwok")):
        assert (await bind(v1, name, node)).status == 201

    async def phase(name: str, wanted: str) -> bool:
        pod = await get_pod(v1, name)
        return pod is not None and pod["status"]["phase"] == wanted

    await eventually(lambda: phase("job", "Running"))
    running = await get_pod(v1, "job")
    assert running is not None and running["status"]["startTime"] and running["status"]["podIP"]
    assert {c["type"]: c["status"] for c in running["status"]["conditions"]}["Ready"] == "True"
    await eventually(lambda: phase("job", "Succeeded"))
    done = await get_pod(v1, "job")
    assert done is not None
    assert {c["type"]: c["status"] for c in done["status"]["conditions"]}["Ready"] == "False"

    await eventually(lambda: phase("svc", "Running"))
    await v1.delete_namespaced_pod("svc", "default")

    async def gone() -> bool:
        return await get_pod(v1, "svc") is None

    await eventually(gone)
    assert (await get_pod(v1, "idle"))["status"]["phase"] == "Pending"  # type: ignore[index]
    # a finished pod is removed at once
    await v1.delete_namespaced_pod("job", "default")
    assert await get_pod(v1, "job") is None


async def test_node_taints_from_admission_and_controller(
    sim: SimApiServer, v1: RawApi, bare_v1: RawApi
) -> None:
    created = await body(await bare_v1.create_node(make_node("n1"), _preload_content=False))
    assert {"key": NOT_READY, "effect": "NoSchedule"} in created["spec"]["taints"]
    assert (await body(await bare_v1.read_node("n1", _preload_content=False)))["spec"]["taints"] == [
        {"key": NOT_READY, "effect": "NoSchedule"}
    ]  # no controller there

    async def taints(name: str) -> list[tuple[str, str]]:
        node = await body(await v1.read_node(name, _preload_content=False))
        return sorted((t["key"], t["effect"]) for t in node["spec"].get("taints") or [])

    await v1.create_node(make_node("n1", taints=[{"key": "gpu", "value": "x", "effect": "NoSchedule"}]))
    await v1.create_node(make_node("sick", ready=False))

    async def settled() -> bool:
        return await taints("n1") == [("gpu", "NoSchedule")] and await taints("sick") == [
            (NOT_READY, "NoSchedule")
        ]

    await eventually(settled)

    node = await body(await v1.read_node("n1", _preload_content=False))
    ready = node["status"]["conditions"][0]
    await v1.patch_node_status("n1", {"status": {"conditions": [{**ready, "status": "Unknown"}]}})

    async def unreachable() -> bool:
        return await taints("n1") == [("gpu", "NoSchedule"), (UNREACHABLE, "NoSchedule")]

    await eventually(unreachable)


async def test_priority_admission(bare_v1: RawApi, bare: SimApiServer) -> None:
    v1 = bare_v1
    async with await _api(bare) as api:
        scheduling: RawApi = client.SchedulingV1Api(api)
        await scheduling.create_priority_class({"metadata": {"name": "high"}, "value": 1000})
        pod = await body(
            await v1.create_namespaced_pod(
                "default", make_pod("a", priority_class="high"), _preload_content=False
            )
        )
        assert pod["spec"]["priority"] == 1000
        pod = await body(
            await v1.create_namespaced_pod(
                "default", make_pod("b", priority_class="system-node-critical"), _preload_content=False
            )
        )
        assert pod["spec"]["priority"] == 2000001000
        pod = await body(await v1.create_namespaced_pod("default", make_pod("c"), _preload_content=False))
        assert pod["spec"]["priority"] == 0
        # As the real Priority admission plugin: an integer priority must match the one computed.
        priced = make_pod("d")
        priced["spec"]["priority"] = 7
        resp = await v1.create_namespaced_pod("default", priced, _preload_content=False)
        assert resp.status == 403
        assert "the integer value of priority (7) must not be provided" in (await resp.json())["message"]
        resp = await v1.create_namespaced_pod(
            "default", make_pod("e", priority_class="nope"), _preload_content=False
        )
        assert resp.status == 403
        status = await body(resp)
        assert status["reason"] == "Forbidden"
        assert "no PriorityClass with name nope was found" in status["message"]
        await scheduling.create_priority_class(
            {"metadata": {"name": "base"}, "value": 50, "globalDefault": True}
        )
        pod = await body(await v1.create_namespaced_pod("default", make_pod("f"), _preload_content=False))
        assert pod["spec"]["priority"] == 50 and pod["spec"]["priorityClassName"] == "base"
    tolerations = {(t["key"], t["effect"], t.get("tolerationSeconds")) for t in pod["spec"]["tolerations"]}
    assert tolerations == {(NOT_READY, "NoExecute", 300), (UNREACHABLE, "NoExecute", 300)}
    assert pod["spec"]["schedulerName"] == "ai-scheduler"
    default = make_pod("g", gpus=2)
    del default["spec"]["schedulerName"]
    pod = await body(await v1.create_namespaced_pod("default", default, _preload_content=False))
    assert pod["spec"]["schedulerName"] == "default-scheduler"
    # API defaulting: a limit without a request requests the limit
    assert pod["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] == "2"


# ---------------------------------------------------------------- kubeconfig and the standalone process


async def test_kubeconfig_works_with_kubernetes_asyncio(sim: SimApiServer, tmp_path: Path) -> None:
    path = write_kubeconfig(sim.url, tmp_path / "kubeconfig")
    configuration = Configuration()
    await config.load_kube_config(config_file=str(path), client_configuration=configuration)
    async with ApiClient(configuration) as api:
        nodes = await CoreV1Api(api).list_node()
        assert nodes.items == []


async def test_standalone_process(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kc"
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "ai_scheduler.sim",
        "--no-kubelets",
        "--kubeconfig-out",
        str(kubeconfig),
        stdout=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 15)
        url = orjson.loads(line)["url"]
        assert kubeconfig.exists()
        async with aiohttp.ClientSession() as session, session.get(f"{url}/healthz") as resp:
            assert resp.status == 200
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 10) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
