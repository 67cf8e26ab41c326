"""The gang fast path (scheduler/gang_shapes.py) decides exactly as a cycle per member does.

Random clusters (sizes, GPUs, zones, taints, cordoned and not-ready nodes, pods already running) and
random gangs (identical members mostly; some with one member that differs, host ports, tolerations,
node selectors, soft topology spread), scheduled twice from the same seed: once with the fast path,
once with a full cycle per member. Every placement (node and devices), every Unschedulable message,
the nodes each search looked at and the reasons it counted on the way, the tie-break draws and the
search's start row must come out the same.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from builders import make_node, make_pod

from ai_scheduler.cache.gangs import GROUP_MIN_LABEL, GROUP_NAME_LABEL
from ai_scheduler.cache.records import PodRecord
from ai_scheduler.config import default_config, parse_config
from ai_scheduler.log import JsonLogger, NullStream
from ai_scheduler.queue import QueuedPod
from ai_scheduler.scheduler.core import SchedulerCore
from ai_scheduler.scheduler.framework.runtime import Decision
from ai_scheduler.scheduler.gang_shapes import MemberShape
from ai_scheduler.scheduler.metrics import Metrics
from ai_scheduler.scheduler.outbox import Outbox
from ai_scheduler.scheduler.victims import Plan

ZONE = "topology.kubernetes.io/zone"


class Recorded:
    """The outbox: bindings reserved in the cache and recorded; reasons and evictions recorded."""

    def __init__(self, core: SchedulerCore) -> None:
        self.core = core
        self.handed: set[str] = set()
        self.on_success: Any = None
        self.on_failure: Any = None
        self.placed: dict[str, tuple[str, tuple[int, ...], int, int, tuple[tuple[str, int], ...]]] = {}
        self.reasons: list[tuple[str, str]] = []
        self.evicted: list[str] = []

    @property
    def in_flight(self) -> int:
        return 0

    async def wait_for_room(self) -> None:
        return None

    def reserve(self, pod: PodRecord, decision: Decision) -> None:
        self.core.cache.assume(pod, decision.node or "", decision.gpu_ids)

    def unreserve(self, pod: PodRecord) -> None:
        self.core.cache.forget(pod.uid)

    def submit(self, qp: QueuedPod, pod: PodRecord, decision: Decision) -> None:
        self.handed.add(pod.uid)
        self.placed[pod.name] = (
            decision.node or "", decision.gpu_ids, decision.feasible, decision.evaluated,
            tuple(sorted(decision.reasons.items())),
        )

    # Reports
    def scheduled(self, pod: PodRecord, node: str) -> None:
        return None

    def unschedulable(self, pod: PodRecord, message: str) -> None:
        self.reasons.append((pod.name, message))

    def error(self, pod: PodRecord, message: str) -> None:
        self.reasons.append((pod.name, message))

    def event(
        self, involved: dict[str, Any], kind: str, reason: str, message: str, *, component: str = ""
    ) -> None:
        return None

    def forget(self, uid: str) -> None:
        return None

    # Evictions
    def evict(self, pod: PodRecord, plan: Plan) -> None:
        self.evicted.append(pod.name)

    async def drain(self, timeout: float) -> None:
        return None


def _cluster(rng: random.Random) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    nodes = []
    for i in range(rng.randint(120, 320)):
        labels = {"pool": rng.choice(["a", "b"])}
        if rng.random() < 0.9:
            labels[ZONE] = f"zone-{rng.randint(0, 4)}"
        taints = [{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}] if rng.random() < 0.1 else None
        nodes.append(make_node(
            f"node-{i}", cpu=str(rng.choice([8, 16, 32])), memory=f"{rng.choice([32, 64, 128])}Gi",
            gpus=rng.choice([0, 4, 8, 8]), labels=labels, taints=taints,
            ready=rng.random() > 0.03, unschedulable=rng.random() < 0.03,
        ))
    running = []
    for i in range(len(nodes) * 2):
        node = rng.choice(nodes)
        running.append(make_pod(
            f"running-{i}", cpu=f"{rng.choice([500, 1000, 4000])}m", memory=f"{rng.choice([1, 4, 8])}Gi",
            node_name=node["metadata"]["name"],
        ))
    return nodes, running


def _gangs(rng: random.Random, count: int) -> list[dict[str, Any]]:
    pods = []
    for g in range(count):
        size = rng.randint(2, 8)
        minimum = size if rng.random() < 0.7 else rng.randint(1, size)
        template: dict[str, Any] = {
            "cpu": f"{rng.choice([500, 1000, 2000, 4000, 8000])}m",
            "memory": f"{rng.choice([1, 4, 16, 48])}Gi",
            "gpus": rng.choice([0, 1, 1, 2, 4, 8]),
        }
        if rng.random() < 0.2:
            template["tolerations"] = [{"key": "dedicated", "operator": "Equal", "value": "ml",
                                        "effect": "NoSchedule"}]
        if rng.random() < 0.2:
            template["node_selector"] = {"pool": rng.choice(["a", "b"])}
        if rng.random() < 0.1:
            template["ports"] = [{"containerPort": 8080, "hostPort": 8080}]
        if rng.random() < 0.1:
            selector = {"matchLabels": {GROUP_NAME_LABEL: f"gang-{g}"}}
            template["topology_spread"] = [{"maxSkew": 1, "topologyKey": ZONE,
                                            "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": selector}]
        odd = rng.randrange(size) if rng.random() < 0.2 else -1
        for i in range(size):
            spec = dict(template)
            if i == odd:
                spec["cpu"] = "3000m"
            labels = {GROUP_NAME_LABEL: f"gang-{g}", GROUP_MIN_LABEL: str(minimum)}
            pods.append(make_pod(f"gang-{g}-{i}", labels=labels, **spec))
    return pods


def _run(seed: int, shapes: bool, learned: bool = False) -> tuple[Recorded, Any, int, int]:
    """(the outbox, the tie-break's random state, the search's next start row, gangs with one shape);
    `learned`: the default scores, with FGDScoreCoupled, a score that learns pod shapes as it scores;
    else the default's scores with GPUBinpack in its place (scores that learn nothing)."""
    rng = random.Random(seed)
    nodes, running = _cluster(rng)
    gangs = _gangs(rng, len(nodes) // 2)
    scores = [{"name": s.name, "weight": s.weight,
               **({"resources": dict(s.resources)} if s.resources else {})}
              for s in default_config().profiles[0].scores]
    assert any(s["name"] == "FGDScoreCoupled" for s in scores)
    if not learned:
        binpack = {"name": "GPUBinpack", "weight": 3}
        scores = [binpack if s["name"] == "FGDScoreCoupled" else s for s in scores]
    config = parse_config({
        "profiles": [{"scores": scores}],
        "scheduling": {
            "percentageOfNodesToScore": rng.choice([0, 20, 50, 100]),
            "tieBreak": rng.choice(["random", "nodeOrder"]),
            "reservation": rng.random() < 0.5,
        },
    })
    recorded: list[Recorded] = []

    def outbox(core: SchedulerCore) -> Outbox:
        recorded.append(Recorded(core))
        return Outbox(recorded[0], recorded[0], recorded[0])

    core = SchedulerCore(config, JsonLogger(stream=NullStream()), Metrics(), outbox, clock=lambda: 1000.0,
                         seed=seed)
    core.gang_scheduler.shapes = shapes
    for number, obj in enumerate([*nodes, *running, *gangs]):
        meta = obj["metadata"]
        meta.update(uid=f"uid-{meta['name']}", resourceVersion="1",
                    creationTimestamp=f"2026-11-26T00:{number // 60 % 60:02d}:{number % 60:02d}Z")
        if obj["kind"] == "Node":
            core.handlers.on_node_event("ADDED", obj)
        else:
            obj["status"] = {"phase": "Running" if obj["spec"].get("nodeName") else "Pending"}
            core.handlers.on_pod_event("ADDED", obj)
    core.ready.set()
    framework = core.frameworks[config.scheduler_name]
    shaped = 0
    for gang in core.gangs.gangs.values():
        keys = {MemberShape.key(framework, core.cache.pods[uid].record) for uid in gang.members}
        shaped += len(keys) == 1 and None not in keys
    guard = core.cycle.guard
    assert guard is not None
    while (qp := core.queue.pop_nowait()) is not None:
        guard.run(qp, core.cycle.schedule_one)
    return recorded[0], framework.rng.getstate(), framework.next_start, shaped


@pytest.mark.parametrize("learned", [False, True], ids=["default", "learned-shapes"])
@pytest.mark.parametrize("seed", range(12))
def test_the_fast_path_places_as_a_cycle_per_member_does(seed: int, learned: bool) -> None:
    """Learned shapes too: FGDScoreCoupled counts every member it sees and takes no new snapshot of what
    it learned within a gang's attempt (Framework.learning_held), so that the fast path, which scores a
    shape once, and the per-member path, which scores each member, score alike."""
    fast, fast_rng, fast_start, shaped = _run(seed, shapes=True, learned=learned)
    slow, slow_rng, slow_start, _ = _run(seed, shapes=False, learned=learned)
    assert fast.placed == slow.placed
    assert fast.reasons == slow.reasons
    assert fast.evicted == slow.evicted
    assert (fast_rng, fast_start) == (slow_rng, slow_start)
    assert slow.placed, "some gangs fit"
    assert any("do not all fit" in message for _, message in slow.reasons), "some gangs do not"
    assert shaped >= 20, "most gangs take the fast path"


def test_identical_members_share_a_shape_and_others_do_not() -> None:
    config = parse_config({})
    core = SchedulerCore(config, JsonLogger(stream=NullStream()), Metrics(),
                         lambda c: Outbox(Recorded(c), Recorded(c), Recorded(c)), clock=lambda: 1000.0)
    core.handlers.on_node_event("ADDED", {**make_node("n", gpus=8), "metadata": {"name": "n", "uid": "n"}})
    framework = core.frameworks[config.scheduler_name]

    def record(name: str, **spec: Any) -> PodRecord:
        obj = make_pod(name, labels={"index": name}, **spec)
        obj["metadata"].update(uid=name, resourceVersion="1")
        return PodRecord.from_api(obj)

    same = [record(f"p{i}", cpu="1", gpus=1) for i in range(3)]
    assert MemberShape.key(framework, same[0]) is not None
    assert MemberShape.of(framework, same) is not None
    assert MemberShape.of(framework, [*same, record("other", cpu="2", gpus=1)]) is None
    spread = [{"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule",
               "labelSelector": {"matchLabels": {"index": "p0"}}}]
    assert MemberShape.key(framework, record("spread", topology_spread=spread)) is None
    anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"index": "p0"}}}]}}
    assert MemberShape.key(framework, record("anti", affinity=anti)) is None
    claim = [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]
    assert MemberShape.key(framework, record("claim", volumes=claim)) is None
