"""NodePorts against kube-scheduler's semantics: its node_ports_test.go tables, and our cache's bookkeeping.

kube-scheduler's cases (TestNodePorts, TestFits) are written here as
`PROTOCOL/hostIP/hostPort` strings, as its test writes them; the pod under
test and the pods already on the node are built from the same strings.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from builders import Pod, make_node, make_pod

from ai_scheduler.cache.cache import SchedulerCache
from ai_scheduler.cache.records import NodeRecord, PodRecord, pod_host_ports
from ai_scheduler.scheduler.framework.interface import StaticResults
from ai_scheduler.scheduler.framework.plugins.node_ports import NO_FREE_PORTS, NodePorts
from ai_scheduler.scheduler.framework.plugins.resource_fit import NodeResourcesFit
from ai_scheduler.scheduler.framework.runtime import Framework


def ports(*infos: str) -> list[dict[str, Any]]:
    """ContainerPorts from kube-scheduler's test notation `PROTOCOL/hostIP/hostPort`."""
    result = []
    for info in infos:
        protocol, host_ip, port = info.split("/")
        result.append({"containerPort": int(port), "hostPort": int(port), "hostIP": host_ip,
                       "protocol": protocol})
    return result


def port_pod(name: str, *infos: str, node: str | None = None, **kw: Any) -> PodRecord:
    return Pod(name, node_name=node, ports=ports(*infos) or None, **kw).uid().record()


def cluster(*names: str, initial_rows: int = 64) -> SchedulerCache:
    cache = SchedulerCache(initial_rows=initial_rows)
    for name in names:
        cache.set_node(NodeRecord.from_api(make_node(name, cpu="64", memory="256Gi", pods=110)))
    return cache


def framework(cache: SchedulerCache) -> Framework:
    return Framework("ai-scheduler", [NodePorts(), NodeResourcesFit()], [], cache, rng=random.Random(1))


def fits(wanted: Sequence[str], existing: Sequence[str]) -> bool:
    """Whether a pod with `wanted` ports fits a node that holds one pod with `existing` ports."""
    cache = cluster("m1")
    cache.set_pod(port_pod("existing", *existing, node="m1"))
    assert cache.check_consistency() == []
    decision = framework(cache).schedule(port_pod("incoming", *wanted))
    assert decision.node in ("m1", None)
    if decision.node is None:
        assert decision.reasons == {NO_FREE_PORTS: 1}
        assert decision.message == f"0/1 nodes are available: 1 {NO_FREE_PORTS}."
    return decision.node == "m1"


# kube-scheduler's TestNodePorts (the Filter cases) and TestFits: (name, wanted, existing, fits)
KUBE_CASES = [
    ("other port", ["UDP/127.0.0.1/8080"], ["UDP/127.0.0.1/9090"], True),
    ("same udp port", ["UDP/127.0.0.1/8080"], ["UDP/127.0.0.1/8080"], False),
    ("same tcp port", ["TCP/127.0.0.1/8080"], ["TCP/127.0.0.1/8080"], False),
    ("different host ip", ["TCP/127.0.0.1/8080"], ["TCP/127.0.0.2/8080"], True),
    ("different protocol", ["UDP/127.0.0.1/8080"], ["TCP/127.0.0.1/8080"], True),
    ("second udp port conflict", ["UDP/127.0.0.1/8000", "UDP/127.0.0.1/8080"], ["UDP/127.0.0.1/8080"], False),
    ("first tcp port conflict", ["TCP/127.0.0.1/8001", "UDP/127.0.0.1/8080"],
     ["TCP/127.0.0.1/8001", "UDP/127.0.0.1/8081"], False),
    ("first tcp port conflict due to 0.0.0.0 hostIP", ["TCP/0.0.0.0/8001"], ["TCP/127.0.0.1/8001"], False),
    ("TCP hostPort conflict due to 0.0.0.0 hostIP", ["TCP/10.0.10.10/8001", "TCP/0.0.0.0/8001"],
     ["TCP/127.0.0.1/8001"], False),
    ("second tcp port conflict to 0.0.0.0 hostIP", ["TCP/127.0.0.1/8001"], ["TCP/0.0.0.0/8001"], False),
    ("second different protocol", ["UDP/127.0.0.1/8001"], ["TCP/0.0.0.0/8001"], True),
    ("UDP hostPort conflict due to 0.0.0.0 hostIP", ["UDP/127.0.0.1/8001"],
     ["TCP/0.0.0.0/8001", "UDP/0.0.0.0/8001"], False),
    # TestFits
    ("non-conflicting ports", ["TCP/127.0.0.1/80"], ["TCP/127.0.0.1/9090"], True),
    ("multiple non-conflicting ports", ["TCP/127.0.0.1/80", "TCP/127.0.1.1/80", "TCP/127.0.1.1/90",
                                        "TCP/127.0.1.1/100"],
     ["TCP/127.0.0.1/9090", "TCP/127.0.0.1/9191", "TCP/127.0.1.1/8080"], True),
    ("same ports on different protocols", ["TCP/127.0.0.1/80"], ["UDP/127.0.0.1/80"], True),
    ("conflicting ports", ["TCP/127.0.0.1/80"], ["TCP/127.0.0.1/80"], False),
    ("multiple ports, some conflicting", ["TCP/127.0.0.1/80", "TCP/127.0.1.1/80", "TCP/127.0.1.1/90",
                                          "TCP/127.0.1.1/100"],
     ["TCP/127.0.0.1/9090", "TCP/127.0.1.1/90", "TCP/127.0.1.1/8080"], False),
    # HostPortInfo.CheckConflict (framework types_test.go): two specific addresses never clash,
    # and SCTP is a protocol of its own.
    ("two different specific addresses", ["TCP/10.0.0.1/80"], ["TCP/10.0.0.2/80", "UDP/10.0.0.1/80"], True),
    ("sctp against sctp", ["SCTP/0.0.0.0/80"], ["SCTP/127.0.0.1/80"], False),
    ("sctp against tcp", ["SCTP/0.0.0.0/80"], ["TCP/0.0.0.0/80", "UDP/0.0.0.0/80"], True),
]


@pytest.mark.parametrize(("wanted", "existing", "expected"), [c[1:] for c in KUBE_CASES],
                         ids=[c[0] for c in KUBE_CASES])
def test_kube_scheduler_cases(wanted: list[str], existing: list[str], expected: bool) -> None:
    assert fits(wanted, existing) is expected


def test_pod_without_host_ports_is_not_looked_at() -> None:
    """kube-scheduler's "skip filter": PreFilter returns Skip; here the filter returns no masks at all."""
    cache = cluster("m1")
    cache.set_pod(port_pod("existing", "TCP/0.0.0.0/8080", node="m1"))
    plain = port_pod("plain")
    assert plain.host_ports == ()
    assert NodePorts().run(plain, cache, np.ones(cache.rows, dtype=bool), StaticResults(cache)) == []
    assert framework(cache).schedule(plain).node == "m1"


def test_container_port_without_host_port_takes_nothing() -> None:
    spec = {"containers": [{"name": "c", "ports": [{"containerPort": 80},
                                                   {"containerPort": 81, "hostPort": 0}]}]}
    assert pod_host_ports(spec) == ()


def test_host_network_ports_are_host_ports() -> None:
    """The API server defaults hostPort to containerPort for hostNetwork pods; the simulated one does not."""
    exporter = make_pod("exporter", ports=[{"containerPort": 9100},
                                           {"containerPort": 9101, "hostPort": 9101}])
    exporter["spec"]["hostNetwork"] = True
    assert PodRecord.from_api(exporter).host_ports == (("0.0.0.0", "TCP", 9100), ("0.0.0.0", "TCP", 9101))
    cache = cluster("m1")
    cache.set_pod(port_pod("existing", "TCP/0.0.0.0/9100", node="m1"))
    assert framework(cache).schedule(PodRecord.from_api(exporter)).reasons == {NO_FREE_PORTS: 1}
    exporter["spec"]["containers"][0]["ports"] = [{"containerPort": "9100"}]
    assert PodRecord.from_api(exporter).spec_error == (
        "invalid container port: spec.containers[0].ports[0].containerPort must be an integer "
        "from 0 to 65535, got '9100'"
    )


def test_empty_host_ip_and_protocol_are_every_address_and_tcp() -> None:
    spec = {"containers": [{"name": "c", "ports": [{"containerPort": 80, "hostPort": 80},
                                                   {"containerPort": 53, "hostPort": 53, "hostIP": "",
                                                    "protocol": "UDP"}]}]}
    assert pod_host_ports(spec) == (("0.0.0.0", "TCP", 80), ("0.0.0.0", "UDP", 53))
    cache = cluster("m1")
    cache.set_pod(PodRecord.from_api({"metadata": {"name": "e", "namespace": "d", "uid": "e"},
                                      "spec": {**spec, "nodeName": "m1"}}))
    assert framework(cache).schedule(port_pod("incoming", "TCP/127.0.0.1/80")).node is None
    assert framework(cache).schedule(port_pod("incoming", "UDP/127.0.0.1/80")).node == "m1"


def test_only_sidecar_init_containers_hold_host_ports() -> None:
    """kube-scheduler's "non-sidecar initContainer using hostPort" and "... from sidecar initContainer"."""
    init = {"name": "init", "image": "i", "ports": ports("TCP/0.0.0.0/8001")}
    cache = cluster("m1")
    cache.set_pod(port_pod("existing", "TCP/0.0.0.0/8001", node="m1"))
    ordinary = port_pod("ordinary", init_containers=[init])
    assert ordinary.host_ports == ()
    assert framework(cache).schedule(ordinary).node == "m1"
    sidecar = port_pod("sidecar", init_containers=[{**init, "restartPolicy": "Always"}])
    assert sidecar.host_ports == (("0.0.0.0", "TCP", 8001),)
    assert framework(cache).schedule(sidecar).reasons == {NO_FREE_PORTS: 1}


def test_a_sidecars_port_is_held_on_its_node() -> None:
    sidecar = {"name": "proxy", "image": "i", "restartPolicy": "Always", "ports": ports("TCP/0.0.0.0/15001")}
    cache = cluster("m1")
    cache.set_pod(port_pod("existing", node="m1", init_containers=[sidecar]))
    assert framework(cache).schedule(port_pod("incoming", "TCP/10.1.1.1/15001")).node is None


@pytest.mark.parametrize(("port", "field", "got"), [
    ({"containerPort": 80, "hostPort": "80"}, "spec.containers[0].ports[0].hostPort", "'80'"),
    ({"containerPort": 80, "hostPort": 65536}, "spec.containers[0].ports[0].hostPort", "65536"),
    ({"containerPort": 80, "hostPort": -1}, "spec.containers[0].ports[0].hostPort", "-1"),
    ({"containerPort": 80, "hostPort": 8.5}, "spec.containers[0].ports[0].hostPort", "8.5"),
    ({"containerPort": 80, "hostPort": True}, "spec.containers[0].ports[0].hostPort", "True"),
    ({"containerPort": 80, "hostPort": 80, "hostIP": 1}, "spec.containers[0].ports[0].hostIP", "1"),
    ({"containerPort": 80, "hostPort": 80, "protocol": ["TCP"]}, "spec.containers[0].ports[0].protocol",
     "['TCP']"),
])
def test_malformed_host_port_leaves_the_pod_waiting_with_the_field_named(
    port: dict[str, Any], field: str, got: str
) -> None:
    obj = make_pod("bad", ports=[{"containerPort": 1}, port])
    rec = PodRecord.from_api(obj)
    field = field.replace("ports[0]", "ports[1]")
    assert field in rec.spec_error and got in rec.spec_error, rec.spec_error
    decision = framework(cluster("m1")).schedule(rec)
    assert decision.node is None
    assert decision.message.startswith(f"0/1 nodes are available: invalid container port: {field} ")


def test_malformed_port_entry_in_a_sidecar_is_named() -> None:
    sidecar = {"name": "s", "restartPolicy": "Always", "ports": ["8080"]}
    rec = PodRecord.from_api(make_pod("bad", init_containers=[sidecar]))
    assert rec.spec_error == (
        "invalid container port: spec.initContainers[0].ports[0] must be an object, got '8080'"
    )


def test_three_pods_with_one_host_port_take_three_nodes_and_the_fourth_waits() -> None:
    cache = cluster("a", "b", "c")
    fw = framework(cache)
    placed = []
    for i in range(4):
        p = port_pod(f"web-{i}", "TCP/0.0.0.0/8080")
        decision = fw.schedule(p)
        if decision.node is not None:
            cache.assume(p, decision.node)
            placed.append(decision.node)
        else:
            assert decision.message == f"0/3 nodes are available: 3 {NO_FREE_PORTS}."
    assert sorted(placed) == ["a", "b", "c"]
    assert cache.check_consistency() == []


def test_ports_are_freed_when_the_pod_goes_and_by_a_forgotten_assumption() -> None:
    cache = cluster("m1")
    fw = framework(cache)
    first = port_pod("first", "TCP/0.0.0.0/8080")
    cache.assume(first, "m1")
    assert fw.schedule(port_pod("second", "TCP/0.0.0.0/8080")).node is None
    cache.forget(first.uid)
    assert fw.schedule(port_pod("second", "TCP/0.0.0.0/8080")).node == "m1"
    cache.set_pod(port_pod("bound", "TCP/0.0.0.0/8080", node="m1"))
    assert fw.schedule(port_pod("second", "TCP/0.0.0.0/8080")).node is None
    cache.remove_pod("uid-bound")
    assert fw.schedule(port_pod("second", "TCP/0.0.0.0/8080")).node == "m1"
    assert len(cache.host_ports) == 0, "no column is kept for a port nobody uses"
    assert cache.check_consistency() == []


def test_a_finished_pod_frees_its_port() -> None:
    cache = cluster("m1")
    running = port_pod("job", "UDP/0.0.0.0/4789", node="m1")
    cache.set_pod(running)
    assert framework(cache).schedule(port_pod("next", "UDP/0.0.0.0/4789")).node is None
    finished = make_pod("job", node_name="m1", ports=ports("UDP/0.0.0.0/4789"))
    finished["metadata"]["uid"] = "uid-job"
    finished["status"] = {"phase": "Succeeded"}
    done = PodRecord.from_api(finished)
    cache.set_pod(done)
    assert framework(cache).schedule(port_pod("next", "UDP/0.0.0.0/4789")).node == "m1"


def test_two_pods_on_one_port_free_it_only_when_both_are_gone() -> None:
    """Pods bound by name are not checked by any scheduler: the port stays taken while either runs."""
    cache = cluster("m1")
    cache.set_pod(port_pod("one", "TCP/0.0.0.0/80", node="m1"))
    cache.set_pod(port_pod("two", "TCP/0.0.0.0/80", node="m1"))
    fw = framework(cache)
    cache.remove_pod("uid-one")
    assert fw.schedule(port_pod("incoming", "TCP/0.0.0.0/80")).node is None
    cache.remove_pod("uid-two")
    assert fw.schedule(port_pod("incoming", "TCP/0.0.0.0/80")).node == "m1"


def test_a_node_that_leaves_and_comes_back_keeps_its_pods_ports() -> None:
    cache = cluster("m1", "m2", "m3")
    cache.set_pod(port_pod("on-m1", "TCP/0.0.0.0/80", node="m1"))
    cache.set_pod(port_pod("on-m2", "TCP/0.0.0.0/80", node="m2"))
    cache.remove_node("m1")
    assert cache.check_consistency() == []
    assert framework(cache).schedule(port_pod("incoming", "TCP/0.0.0.0/80")).node == "m3"
    cache.set_node(NodeRecord.from_api(make_node("m1", cpu="64", memory="256Gi")))
    assert cache.check_consistency() == []
    decision = framework(cache).schedule(port_pod("incoming", "TCP/0.0.0.0/80"))
    assert decision.node == "m3" and decision.reasons == {NO_FREE_PORTS: 2}


def test_ports_survive_the_node_table_growing_and_windows_that_wrap() -> None:
    names = [f"n{i}" for i in range(300)]
    cache = cluster(*names, initial_rows=4)
    for i in range(0, 300, 2):
        cache.set_pod(port_pod(f"p{i}", "TCP/0.0.0.0/9000", node=f"n{i}"))
    assert cache.check_consistency() == []
    fw = Framework("ai-scheduler", [NodePorts()], [], cache, rng=random.Random(1),
                   percentage_of_nodes_to_score=5)
    fw.next_start = 290  # the search wraps round the end of the table
    decision = fw.schedule(port_pod("incoming", "TCP/10.0.0.1/9000"))
    assert decision.node is not None and int(decision.node[1:]) % 2 == 1
    rows, reasons = fw.feasible_rows(port_pod("incoming", "TCP/10.0.0.1/9000"))
    assert {cache.row_names[int(r)] for r in rows} == {f"n{i}" for i in range(1, 300, 2)}
    assert reasons == {NO_FREE_PORTS: 150}
    window = np.arange(296, 304) % 300
    taken = cache.host_ports.conflicts(port_pod("w", "TCP/0.0.0.0/9000").host_ports, window)
    assert taken is not None
    names = [cache.row_names[int(r)] for r in window]
    assert [cache.row_names[int(r)] for r in window[taken]] == [n for n in names if int(n[1:]) % 2 == 0]
