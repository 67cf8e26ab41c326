"""Stateful property tests: the cache against an independent model of the API server and the watch.

The model keeps three things apart:

- the *server truth* (nodes and pods as the API server has them);
- what the *watch delivered* to the cache so far (events may lag: a server
  change becomes visible only when a deliver rule or a relist runs);
- our *assumptions* (pods we placed with Framework.schedule + cache.assume,
  and whether their binding call finished, with its deadline).

From the delivered state and the assumptions the model computes, by its own
rules, which pods count on which node; after every step the cache must agree
exactly (requested and scoring columns, host ports in use, tracked pods,
assumptions), must pass check_consistency(), and must not have lost any pod
we popped. In the variant where only our scheduler places pods, the server's
nodes are never overcommitted, and no host port is taken twice on a node.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from ai_scheduler.cache.cache import SchedulerCache
from ai_scheduler.cache.records import DEFAULT_SCORE_CPU_MILLI, DEFAULT_SCORE_MEMORY, NodeRecord, PodRecord
from ai_scheduler.config import default_config
from ai_scheduler.scheduler.framework.plugins import build_filters
from ai_scheduler.scheduler.framework.plugins.resource_allocation import LeastAllocated
from ai_scheduler.scheduler.framework.runtime import Framework

Mi = 2**20
GPU = "nvidia.com/gpu"
TIMEOUT = 30.0
NODE_NAMES = ("n0", "n1", "n2", "n3", "n4")
ZONES = ("a", "b")
RESOURCES = ("cpu", "memory", GPU, "pods")


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass(frozen=True)
class Alloc:
    cpu: int     # millicores
    memory: int  # MiB
    gpu: int
    pods: int

    def at_least(self, other: Alloc) -> Alloc:
        return Alloc(max(self.cpu, other.cpu), max(self.memory, other.memory), max(self.gpu, other.gpu),
                     max(self.pods, other.pods))

    def as_units(self) -> dict[str, int]:
        return {"cpu": self.cpu, "memory": self.memory * Mi, GPU: self.gpu, "pods": self.pods}


@dataclass(frozen=True)
class ServerNode:
    name: str
    alloc: Alloc
    zone: str = "a"
    ready: bool = True
    unschedulable: bool = False
    rv: int = 0

    def record(self) -> NodeRecord:
        allocatable = {"cpu": f"{self.alloc.cpu}m", "memory": f"{self.alloc.memory}Mi",
                       "pods": str(self.alloc.pods)}
        if self.alloc.gpu:
            allocatable[GPU] = str(self.alloc.gpu)
        return NodeRecord.from_api({
            "metadata": {"name": self.name, "resourceVersion": str(self.rv), "labels": {"zone": self.zone}},
            "spec": {"unschedulable": self.unschedulable},
            "status": {"allocatable": allocatable,
                       "conditions": [{"type": "Ready", "status": "True" if self.ready else "False"}]},
        })


@dataclass(frozen=True)
class Container:
    cpu: int = 0     # millicores; 0 = not requested
    memory: int = 0  # MiB
    gpu: int = 0
    host_port: int = 0  # TCP on every address (hostIP 0.0.0.0); 0 = none


@dataclass(frozen=True)
class ServerPod:
    uid: str
    containers: tuple[Container, ...]
    zone: str | None = None
    node_name: str = ""
    phase: str = "Pending"
    deleting: bool = False
    ours: bool = True
    rv: int = 0

    @property
    def terminal(self) -> bool:
        return self.phase in ("Succeeded", "Failed")

    @property
    def alive_unbound(self) -> bool:
        return not self.node_name and not self.deleting and not self.terminal

    def requests(self) -> dict[str, int]:
        """Real requests in cache units, summed by hand."""
        return {"cpu": sum(c.cpu for c in self.containers),
                "memory": sum(c.memory for c in self.containers) * Mi,
                GPU: sum(c.gpu for c in self.containers), "pods": 1}

    def score_requests(self) -> dict[str, int]:
        """kube-scheduler's non-zero requests: each container without cpu/memory counts the defaults."""
        return {"cpu": sum(c.cpu or DEFAULT_SCORE_CPU_MILLI for c in self.containers),
                "memory": sum(c.memory * Mi or DEFAULT_SCORE_MEMORY for c in self.containers),
                GPU: sum(c.gpu for c in self.containers)}

    def host_ports(self) -> set[int]:
        return {c.host_port for c in self.containers if c.host_port}

    def record(self) -> PodRecord:
        containers = []
        for i, c in enumerate(self.containers):
            amounts = (("cpu", c.cpu, f"{c.cpu}m"), ("memory", c.memory, f"{c.memory}Mi"),
                       (GPU, c.gpu, str(c.gpu)))
            requests = {name: text for name, amount, text in amounts if amount}
            container: dict[str, Any] = {"name": f"c{i}", "image": "img"}
            if requests:
                container["resources"] = {"requests": requests}
            if c.host_port:
                container["ports"] = [{"containerPort": c.host_port, "hostPort": c.host_port}]
            containers.append(container)
        meta: dict[str, Any] = {"name": self.uid, "namespace": "ns", "uid": self.uid,
                                "resourceVersion": str(self.rv)}
        if self.deleting:
            meta["deletionTimestamp"] = "2024-01-01T00:00:00Z"
        spec: dict[str, Any] = {"containers": containers,
                                "schedulerName": "default-scheduler" if self.ours else "other-scheduler"}
        if self.node_name:
            spec["nodeName"] = self.node_name
        if self.zone:
            spec["nodeSelector"] = {"zone": self.zone}
        return PodRecord.from_api({"metadata": meta, "spec": spec, "status": {"phase": self.phase}})


allocs = st.builds(Alloc, cpu=st.sampled_from([1000, 2000, 4000]), memory=st.sampled_from([1024, 2048, 4096]),
                   gpu=st.sampled_from([0, 0, 2, 4]), pods=st.sampled_from([1, 2, 3, 5]))
containers = st.builds(Container, cpu=st.sampled_from([0, 250, 500, 1000, 1500]),
                       memory=st.sampled_from([0, 256, 512, 1024]), gpu=st.sampled_from([0, 0, 0, 1, 2]),
                       host_port=st.sampled_from([0, 0, 0, 0, 0, 80, 81]))
container_lists = st.lists(containers, min_size=1, max_size=2).map(tuple)
zones = st.sampled_from([None, None, *ZONES])
delays = st.sampled_from([1.0, 10.0, TIMEOUT - 1, TIMEOUT, TIMEOUT + 1, 100.0])
deliveries = st.sampled_from([True, True, True, False])  # a watch event usually arrives at once


@dataclass
class Assumption:
    node: str
    deadline: float | None = None  # set when the binding call finished


@dataclass
class Model:
    server_nodes: dict[str, ServerNode] = field(default_factory=dict)
    server_pods: dict[str, ServerPod] = field(default_factory=dict)
    seen_nodes: dict[str, ServerNode] = field(default_factory=dict)   # as last delivered by the watch
    seen_pods: dict[str, ServerPod] = field(default_factory=dict)
    assumed: dict[str, Assumption] = field(default_factory=dict)
    popped: set[str] = field(default_factory=set)                   # pods we ever scheduled
    floor: dict[str, Alloc] = field(default_factory=dict)           # largest allocatable a name ever had


class CacheMachine(RuleBasedStateMachine):
    """Pods bound by another scheduler included: no overcommit claim, everything else checked."""

    OTHERS = True

    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock()
        self.cache = SchedulerCache(assume_timeout=TIMEOUT, clock=self.clock, initial_rows=2)
        config = default_config()
        self.fw = Framework("default-scheduler", build_filters(config, config.profiles[0]),
                            [LeastAllocated(1, {"cpu": 1, "memory": 1, GPU: 1})], self.cache,
                            rng=random.Random(0))
        self.m = Model()
        self.rv = 0
        self.next_pod = 0

    # ------------------------------------------------------------------ helpers
    def _rv(self) -> int:
        self.rv += 1
        return self.rv

    def deliver_node_now(self, name: str) -> None:
        server = self.m.server_nodes.get(name)
        if server is None:
            self.cache.remove_node(name)
            self.m.seen_nodes.pop(name, None)
        else:
            self.cache.set_node(server.record())
            self.m.seen_nodes[name] = server

    def _see_pod(self, uid: str, state: ServerPod | None) -> None:
        """The model's rule for what a delivered pod state does to our assumption."""
        if state is None:
            self.m.seen_pods.pop(uid, None)
            self.m.assumed.pop(uid, None)
            return
        self.m.seen_pods[uid] = state
        if not state.alive_unbound:  # bound (confirmed or elsewhere), finished or deleting
            self.m.assumed.pop(uid, None)

    def deliver_pod_now(self, uid: str) -> None:
        server = self.m.server_pods.get(uid)
        if server is None:
            self.cache.remove_pod(uid)
        else:
            self.cache.set_pod(server.record())
        self._see_pod(uid, server)

    def set_server_pod(self, pod: ServerPod, deliver: bool) -> None:
        self.m.server_pods[pod.uid] = replace(pod, rv=self._rv())
        if deliver:
            self.deliver_pod_now(pod.uid)

    def set_server_node(self, node: ServerNode, deliver: bool) -> None:
        node = replace(node, rv=self._rv())
        self.m.server_nodes[node.name] = node
        self.m.floor[node.name] = node.alloc.at_least(self.m.floor.get(node.name, node.alloc))
        if deliver:
            self.deliver_node_now(node.name)

    def expected_usage(self) -> tuple[dict[str, dict[str, int]], dict[str, dict[str, int]]]:
        """Requests and scoring requests per node name, from delivered states and assumptions."""
        real: dict[str, dict[str, int]] = {}
        score: dict[str, dict[str, int]] = {}

        def add(node: str, pod: ServerPod) -> None:
            r = real.setdefault(node, dict.fromkeys(RESOURCES, 0))
            for k, v in pod.requests().items():
                r[k] += v
            s = score.setdefault(node, dict.fromkeys(RESOURCES, 0))
            for k, v in pod.score_requests().items():
                s[k] += v

        for uid, pod in self.m.seen_pods.items():
            if uid not in self.m.assumed and pod.node_name and not pod.terminal:
                add(pod.node_name, pod)
        for uid, a in self.m.assumed.items():
            add(a.node, self.m.seen_pods[uid])
        return real, score

    def expected_ports(self) -> dict[str, Counter[int]]:
        """Host ports in use per node name (how many pods use each), by the same rules as usage."""
        ports: dict[str, Counter[int]] = {}
        counted = [(p.node_name, p) for u, p in self.m.seen_pods.items()
                   if u not in self.m.assumed and p.node_name and not p.terminal]
        counted += [(a.node, self.m.seen_pods[u]) for u, a in self.m.assumed.items()]
        for node, pod in counted:
            ports.setdefault(node, Counter()).update(pod.host_ports())
        return ports

    def tracked(self) -> set[str]:
        """Pods the cache must keep: counting somewhere, pending, or assumed."""
        keep = {uid for uid, p in self.m.seen_pods.items()
                if (p.node_name and not p.terminal) or p.alive_unbound}
        return keep | set(self.m.assumed)

    def pending_in_cache(self) -> list[str]:
        return sorted(uid for uid, p in self.m.seen_pods.items()
                      if p.alive_unbound and uid not in self.m.assumed)

    def pick_pod(self, data: st.DataObject, uids: list[str]) -> str:
        """One of `uids`, favouring pods we placed: their transitions are the interesting ones."""
        ours = [u for u in uids if u in self.m.popped]
        prefer_ours = bool(ours) and data.draw(st.booleans())
        return data.draw(st.sampled_from(ours if prefer_ours else uids))

    def fits(self, pod: ServerPod, node: ServerNode, used: dict[str, int], ports: Counter[int]) -> bool:
        if not node.ready or node.unschedulable or (pod.zone and node.zone != pod.zone):
            return False
        if any(ports[p] for p in pod.host_ports()):
            return False
        free = node.alloc.as_units()
        return all(v == 0 or used.get(k, 0) + v <= free[k] for k, v in pod.requests().items())

    # ------------------------------------------------------------------ setup
    @initialize(a=allocs, b=allocs)
    def two_nodes(self, a: Alloc, b: Alloc) -> None:
        self.set_server_node(ServerNode("n0", a), deliver=True)
        self.set_server_node(ServerNode("n1", b, zone="b"), deliver=True)

    # ------------------------------------------------------------------ nodes (server side)
    @rule(data=st.data(), kind=st.sampled_from(["add", "add", "update", "update", "remove"]),
          alloc=allocs, zone=st.sampled_from(ZONES), deliver=deliveries)
    def node_event(self, data: st.DataObject, kind: str, alloc: Alloc, zone: str, deliver: bool) -> None:
        absent = [n for n in NODE_NAMES if n not in self.m.server_nodes]
        present = sorted(self.m.server_nodes)
        if kind == "add" and absent:
            name = data.draw(st.sampled_from(absent))
            if not self.OTHERS and name in self.m.floor:
                alloc = alloc.at_least(self.m.floor[name])  # never shrink under our own placements
            self.set_server_node(ServerNode(name, alloc, zone=zone), deliver)
        elif kind == "update" and present:
            old = self.m.server_nodes[data.draw(st.sampled_from(present))]
            if data.draw(st.booleans()):
                alloc = old.alloc
            if not self.OTHERS:
                alloc = alloc.at_least(self.m.floor[old.name])
            ready = data.draw(st.sampled_from([True, True, False]))
            unschedulable = data.draw(st.sampled_from([False, False, True]))
            new = replace(old, alloc=alloc, zone=zone, ready=ready, unschedulable=unschedulable)
            self.set_server_node(new, deliver)
        elif kind == "remove" and present:
            name = data.draw(st.sampled_from(present))
            del self.m.server_nodes[name]
            if deliver:
                self.deliver_node_now(name)

    # ------------------------------------------------------------------ pods (server side)
    @rule(data=st.data(), kind=st.sampled_from(["create", "create", "create", "create_failed", "other",
                                                "other", "finish", "terminate", "delete"]),
          cs=container_lists, zone=zones, deliver=deliveries)
    def pod_event(self, data: st.DataObject, kind: str, cs: tuple[Container, ...], zone: str | None,
                  deliver: bool) -> None:
        pods = self.m.server_pods
        if kind in ("create", "create_failed"):
            self.next_pod += 1
            phase = "Failed" if kind == "create_failed" else "Pending"
            pod = ServerPod(f"p{self.next_pod}", cs, zone=zone, phase=phase)
            self.set_server_pod(pod, deliver)
        elif kind == "other" and self.OTHERS:
            # bound by another scheduler, maybe to a node the cache does not know yet
            self.next_pod += 1
            node = data.draw(st.sampled_from(NODE_NAMES))
            phase = data.draw(st.sampled_from(["Running", "Running", "Succeeded"]))
            pod = ServerPod(f"p{self.next_pod}", cs, node_name=node, phase=phase, ours=False)
            self.set_server_pod(pod, deliver)
        elif kind == "finish" and (running := sorted(u for u, p in pods.items()
                                                     if p.node_name and not p.terminal)):
            uid = self.pick_pod(data, running)
            self.set_server_pod(replace(pods[uid], phase=data.draw(st.sampled_from(["Succeeded", "Failed"]))),
                                deliver)
        elif kind == "terminate" and (alive := sorted(u for u, p in pods.items() if not p.deleting)):
            uid = self.pick_pod(data, alive)
            self.set_server_pod(replace(pods[uid], deleting=True), deliver)
        elif kind == "delete" and pods:
            uid = self.pick_pod(data, sorted(pods))
            del pods[uid]
            if deliver:
                self.deliver_pod_now(uid)

    # ------------------------------------------------------------------ the watch
    def _stale_pods(self) -> list[str]:
        uids = set(self.m.server_pods) | set(self.m.seen_pods)
        return sorted(u for u in uids if self.m.server_pods.get(u) != self.m.seen_pods.get(u))

    def _stale_nodes(self) -> list[str]:
        names = set(self.m.server_nodes) | set(self.m.seen_nodes)
        return sorted(n for n in names if self.m.server_nodes.get(n) != self.m.seen_nodes.get(n))

    @precondition(lambda self: self._stale_pods() or self._stale_nodes())
    @rule(data=st.data())
    def watch_delivers(self, data: st.DataObject) -> None:
        """One lagging watch event arrives (the object's latest state)."""
        stale = [("pod", u) for u in self._stale_pods()] + [("node", n) for n in self._stale_nodes()]
        kind, key = data.draw(st.sampled_from(stale))
        if kind == "pod":
            self.deliver_pod_now(key)
        else:
            self.deliver_node_now(key)

    @rule(what=st.sampled_from(["nodes", "pods", "both"]))
    def relist(self, what: str) -> None:
        if what in ("nodes", "both"):
            self.relist_nodes()
        if what in ("pods", "both"):
            self.relist_pods()

    def relist_pods(self) -> None:
        before = set(self.cache.pods)
        changed, removed = self.cache.replace_pods([p.record() for p in self.m.server_pods.values()])
        assert {r.uid for r in removed} == before - set(self.m.server_pods)
        # everything whose delivered state differs from the server's was re-applied
        stale = {u for u in self._stale_pods() if u in self.m.server_pods}
        assert stale <= {r.uid for r in changed}
        for uid in set(self.m.seen_pods) | set(self.m.server_pods):
            self._see_pod(uid, self.m.server_pods.get(uid))

    def relist_nodes(self) -> None:
        changed, removed = self.cache.replace_nodes([n.record() for n in self.m.server_nodes.values()])
        assert set(removed) == set(self.m.seen_nodes) - set(self.m.server_nodes)
        assert {r.name for r in changed} == {n for n in self.m.server_nodes
                                             if self.m.seen_nodes.get(n) != self.m.server_nodes[n]}
        self.m.seen_nodes = dict(self.m.server_nodes)

    # ------------------------------------------------------------------ our scheduler
    @precondition(lambda self: self.pending_in_cache())
    @rule(data=st.data(), count=st.integers(1, 3))
    def schedule(self, data: st.DataObject, count: int) -> None:
        """The scheduling loop pops up to `count` pending pods: Framework.schedule, then assume."""
        for _ in range(count):
            pending = self.pending_in_cache()
            if not pending:
                return
            self.schedule_one(data.draw(st.sampled_from(pending)))

    def schedule_one(self, uid: str) -> None:
        state = self.cache.pod_state(uid)
        assert state is not None and not state.assumed and not state.node
        decision = self.fw.schedule(state.record)

        pod = self.m.seen_pods[uid]
        real, _ = self.expected_usage()
        ports = self.expected_ports()
        feasible = {n for n, node in self.m.seen_nodes.items()
                    if self.fits(pod, node, real.get(n, {}), ports.get(n, Counter()))}
        assert decision.feasible == len(feasible), (decision, feasible)
        if decision.node is None:
            assert not feasible, decision.message
            return
        assert decision.node in feasible
        self.cache.assume(state.record, decision.node)
        self.m.assumed[uid] = Assumption(decision.node)
        self.m.popped.add(uid)

    def _in_flight(self) -> list[str]:
        return sorted(u for u, a in self.m.assumed.items() if a.deadline is None)

    @precondition(lambda self: self._in_flight())
    @rule(data=st.data(), outcome=st.sampled_from(["returns", "returns", "returns", "fails", "lost"]),
          deliver=deliveries)
    def binder(self, data: st.DataObject, outcome: str, deliver: bool) -> None:
        """The binder's call for one assumed pod.

        returns: the API server accepts the binding if the pod is still unbound and alive and the
        node exists, and the binder calls binding_finished; otherwise the call fails and it forgets.
        fails: the call fails (conflict, transport error): forget.
        lost: the binder saw success but the server never applied it: only expiry releases the node.
        """
        uid = data.draw(st.sampled_from(self._in_flight()))
        node = self.m.assumed[uid].node
        server = self.m.server_pods.get(uid)
        accepted = server is not None and server.alive_unbound and node in self.m.server_nodes
        if outcome == "returns" and accepted:
            assert server is not None
            self.set_server_pod(replace(server, node_name=node), deliver)
            if uid in self.m.assumed:  # not already confirmed by an immediate watch event
                self.cache.binding_finished(uid)
                self.m.assumed[uid].deadline = self.clock.now + TIMEOUT
        elif outcome == "lost":
            self.cache.binding_finished(uid)
            self.m.assumed[uid].deadline = self.clock.now + TIMEOUT
        else:
            assert self.cache.forget(uid)
            del self.m.assumed[uid]

    @rule(dt=delays)
    def time_passes(self, dt: float) -> None:
        now = self.clock.now + dt
        if not self.OTHERS:
            # the watch confirms real bindings within the timeout; only lost ones may expire
            for uid, a in list(self.m.assumed.items()):
                server = self.m.server_pods.get(uid)
                if a.deadline is not None and a.deadline <= now and server is not None and server.node_name:
                    self.deliver_pod_now(uid)
        self.clock.now = now
        overdue = {u for u, a in self.m.assumed.items() if a.deadline is not None and a.deadline < now}
        due = {u for u, a in self.m.assumed.items() if a.deadline is not None and a.deadline <= now}
        expired = {r.uid for r in self.cache.expire_assumed()}
        assert overdue <= expired <= due  # exactly at the deadline either way is fine
        for uid in expired:
            del self.m.assumed[uid]

    # ------------------------------------------------------------------ invariants
    @invariant()
    def consistent(self) -> None:
        assert self.cache.check_consistency() == []

    @invariant()
    def usage_matches_the_model(self) -> None:
        real, score = self.expected_usage()
        cache = self.cache
        assert cache.node_count == len(self.m.seen_nodes)
        for name, node in self.m.seen_nodes.items():
            row = cache.row_of(name)
            assert row >= 0 and cache.row_names[row] == name
            for res in RESOURCES:
                col = cache.column(res)
                want = real.get(name, {}).get(res, 0)
                assert (int(cache.requested[row, col]) if col >= 0 else 0) == want, (name, res)
                alloc = node.alloc.as_units()[res]
                assert (int(cache.allocatable[row, col]) if col >= 0 else 0) == alloc, (name, res)
            for res in ("cpu", "memory", GPU):
                col = cache.column(res)
                want = score.get(name, {}).get(res, 0)
                assert (int(cache.score_requested[row, col]) if col >= 0 else 0) == want, (name, res)
        for name in set(NODE_NAMES) - set(self.m.seen_nodes):
            assert cache.row_of(name) == -1

    @invariant()
    def host_ports_match_the_model(self) -> None:
        expected = self.expected_ports()
        for name in self.m.seen_nodes:
            kept = self.cache.host_ports.counts_on(self.cache.row_of(name))
            assert kept == {("0.0.0.0", "TCP", p): n for p, n in expected.get(name, Counter()).items()}, name

    @invariant()
    def pods_and_assumptions_match_the_model(self) -> None:
        assert set(self.cache.pods) == self.tracked()
        assert self.cache.assumed_count == len(self.m.assumed)
        for uid, a in self.m.assumed.items():
            state = self.cache.pod_state(uid)
            assert state is not None and state.assumed and state.node == a.node

    @invariant()
    def no_popped_pod_is_lost(self) -> None:
        for uid in self.m.popped:
            server = self.m.server_pods.get(uid)
            if server is None or server.deleting or server.terminal:
                continue
            state = self.cache.pod_state(uid)
            assert state is not None, uid
            if server.node_name:
                if self.m.seen_pods.get(uid) == server:  # the watch has shown the binding
                    assert state.node == server.node_name and not state.assumed
                elif not self.OTHERS:  # still our reservation, on the node we bound it to
                    assert state.assumed and state.node == server.node_name
                else:  # or pending again after an expiry, waiting for the watch
                    assert state.assumed or state.record.pending
            else:
                assert state.assumed or (state.record.pending and not state.node)

    @invariant()
    def no_overcommit_when_only_we_place_pods(self) -> None:
        if self.OTHERS:
            return
        for name, node in self.m.server_nodes.items():
            used = dict.fromkeys(RESOURCES, 0)
            for pod in self.m.server_pods.values():
                if pod.node_name == name and not pod.terminal:
                    for k, v in pod.requests().items():
                        used[k] += v
            for uid, a in self.m.assumed.items():
                assumed_pod = self.m.server_pods.get(uid)
                if a.node == name and assumed_pod is not None and not assumed_pod.node_name:
                    for k, v in assumed_pod.requests().items():
                        used[k] += v
            alloc = node.alloc.as_units()
            assert all(used[k] <= alloc[k] for k in RESOURCES), (name, used, alloc)
        for name, ports in self.expected_ports().items():
            assert all(n == 1 for n in ports.values()), (name, ports)  # no host port taken twice


class OnlyOurSchedulerMachine(CacheMachine):
    """No other scheduler, allocatable never shrinks: our placements never overcommit a node."""

    OTHERS = False


SETTINGS = settings(max_examples=120, stateful_step_count=50, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])

TestCacheWithOtherSchedulers = CacheMachine.TestCase
TestCacheWithOtherSchedulers.settings = SETTINGS
TestCacheOnlyOurScheduler = OnlyOurSchedulerMachine.TestCase
TestCacheOnlyOurScheduler.settings = SETTINGS
