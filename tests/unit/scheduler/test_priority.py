"""Priority factors, their normalisation, formula evaluation, identity and quota arithmetic."""

from __future__ import annotations

from typing import Any

import pytest
from builders import Pod

from ai_scheduler.cache.cache import SchedulerCache
from ai_scheduler.cache.records import PodRecord
from ai_scheduler.cache.tenancy import Tenancy, quota_amounts
from ai_scheduler.config import parse_config
from ai_scheduler.queue import QueuedPod, SchedulingQueue
from ai_scheduler.scheduler.priority import PriorityEngine, parse_duration

TENANCY = {
    "queues": [
        {"name": "prod", "level": 0},
        {"name": "batch", "level": 2, "weight": 1},
        {"name": "research", "level": 2, "weight": 3},
    ],
    "groups": {
        "vision": {"level": 2, "share": 1, "min": {"nvidia.com/gpu": 4}, "max": {"nvidia.com/gpu": 16}},
        "nlp": {"level": 1, "share": 3, "max": {"nvidia.com/gpu": 8}},
    },
    "users": {
        "alice": {"group": "vision", "level": 4, "max": {"nvidia.com/gpu": 8}},
        "bob": {"group": "vision", "level": 1},
        "carol": {"group": "nlp", "level": 2},
    },
    "namespaces": {
        "team-a": {"user": "alice", "defaultQueue": "batch"},
        "team-b": {"user": "bob", "trustUserLabel": True},
        "team-c": {"user": "carol", "defaultQueue": "research"},
    },
}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def config(weights: dict[str, float], **extra: Any) -> Any:
    return parse_config(
        {
            **TENANCY,
            "policies": {"p": {"weights": weights, "maxWaitSeconds": 100, "fairShareHalfLifeSeconds": 100}},
            **extra,
        }
    )


def tenant_pod(name: str, namespace: str = "team-a", *, priority: int = 0, gpus: int = 0, cpu: str = "1",
               labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None,
               node: str = "") -> PodRecord:
    gpu = {"nvidia.com/gpu": str(gpus)} if gpus else {}
    return (Pod.bare(name, namespace).uid().labels(labels or {}).annotations(annotations or {})
            .spec(priority=priority).container("c", requests={"cpu": cpu}, limits=gpu).on(node)
            .phase("Running" if node else "Pending").record())


def engine(
    weights: dict[str, float], clock: Clock | None = None, members: dict[str, int] | None = None
) -> tuple[PriorityEngine, Tenancy, SchedulerCache]:
    cfg = config(weights)
    tenancy = Tenancy(cfg)
    cache = SchedulerCache()
    cache.tenancy = tenancy
    clock = clock or Clock()
    return (
        PriorityEngine(cfg, tenancy, cache, lambda p: (members or {}).get(p.name, 1), clock),
        tenancy,
        cache,
    )


def queued(p: PodRecord, initial: float = 1000.0) -> QueuedPod:
    return QueuedPod(p, initial_attempt=initial)


# ----------------------------------------------------------------------------------------- identity
def test_identity_comes_from_the_namespace_and_a_trusted_label() -> None:
    tenancy = Tenancy(config({"taskPriority": 1}))
    assert tenancy.tenant_of(tenant_pod("a")) == tenancy.tenant_of(
        tenant_pod("b", labels={"ai-scheduler.io/user": "carol"})
    )
    assert tenancy.tenant_of(tenant_pod("a")).user == "alice", "team-a does not trust the user label"
    trusted = tenancy.tenant_of(tenant_pod("c", "team-b", labels={"ai-scheduler.io/user": "alice"}))
    assert (trusted.user, trusted.group) == ("alice", "vision")
    assert tenancy.tenant_of(tenant_pod("d", "team-b",
                                        labels={"ai-scheduler.io/user": "nobody"})).user == "bob"
    assert tenancy.tenant_of(tenant_pod("e", "team-a")).queue == "batch"
    assert tenancy.tenant_of(tenant_pod("f", "team-b")).queue == "default"
    assert tenancy.tenant_of(tenant_pod("g", "team-a",
                                        labels={"ai-scheduler.io/queue": "prod"})).queue == "prod"
    bad = tenancy.tenant_of(tenant_pod("h", labels={"ai-scheduler.io/queue": "nope"}))
    assert bad.error == "queue 'nope' named by label ai-scheduler.io/queue is not configured"
    stranger = tenancy.tenant_of(tenant_pod("i", "elsewhere"))
    assert (stranger.user, stranger.group, stranger.queue) == ("", "", "default")


# ----------------------------------------------------------------------------------------- quotas
def test_two_level_quota_arithmetic() -> None:
    tenancy = Tenancy(config({"taskPriority": 1}))
    alice = tenancy.tenant_of(tenant_pod("x"))
    bob = tenancy.tenant_of(tenant_pod("y", "team-b"))
    assert tenancy.quota_refusal(alice, {"nvidia.com/gpu": 8}) == ""
    assert (
        tenancy.quota_refusal(alice, {"nvidia.com/gpu": 9})
        == "exceeds quota of user alice: nvidia.com/gpu 0/8"
    )
    for i in range(6):
        tenancy.charge(tenant_pod(f"a{i}", gpus=1, node="n"))
    for i in range(8):
        tenancy.charge(tenant_pod(f"b{i}", "team-b", gpus=1, node="n"))
    assert tenancy.used("group", "vision")["nvidia.com/gpu"] == 14
    assert tenancy.quota_refusal(alice, {"nvidia.com/gpu": 2}) == ""
    assert (
        tenancy.quota_refusal(alice, {"nvidia.com/gpu": 3})
        == "exceeds quota of user alice: nvidia.com/gpu 6/8"
    )
    # bob has no user max, but the group does: 14 + 3 > 16.
    assert (
        tenancy.quota_refusal(bob, {"nvidia.com/gpu": 3})
        == "exceeds quota of group vision: nvidia.com/gpu 14/16"
    )
    tenancy.release("uid-b0")
    tenancy.release("uid-b0")  # releasing twice is harmless
    assert tenancy.used("group", "vision")["nvidia.com/gpu"] == 13
    assert tenancy.quota_refusal(bob, {"nvidia.com/gpu": 3}) == ""
    # Borrowing: a group above its min but under its max is admitted (nlp has no min at all).
    carol = tenancy.tenant_of(tenant_pod("z", "team-c"))
    assert tenancy.quota_refusal(carol, {"nvidia.com/gpu": 8}) == ""


def test_quota_counts_managed_gpus() -> None:
    shared = PodRecord.from_api(
        {"metadata": {"name": "s", "annotations": {"ai-scheduler.io/gpu-memory": "10Gi"}}, "spec": {}}
    )
    whole = PodRecord.from_api(
        {"metadata": {"name": "w", "annotations": {"ai-scheduler.io/gpu-count": "2"}}, "spec": {}}
    )
    assert quota_amounts(shared)["ai-scheduler.io/gpu-memory"] == 10 * 2**30
    assert quota_amounts(whole)["ai-scheduler.io/gpu-count"] == 2


def test_cache_charges_and_releases_usage_as_pods_count_and_stop() -> None:
    _engine, tenancy, cache = engine({"taskPriority": 1})
    running = tenant_pod("r", gpus=2, node="n1")
    cache.set_pod(running)
    assert tenancy.used("user", "alice") == {"cpu": 1000, "nvidia.com/gpu": 2}
    pending = tenant_pod("p", gpus=1)
    cache.assume(pending, "n1")
    assert tenancy.used("group", "vision")["nvidia.com/gpu"] == 3
    cache.forget(pending.uid)
    finished = tenant_pod("r", gpus=2, node="n1")
    finished.phase = "Succeeded"
    cache.set_pod(finished)
    assert tenancy.used("group", "vision").get("nvidia.com/gpu", 0) == 0


# ----------------------------------------------------------------------------------------- factors
@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90m", 5400),
        ("1h30m", 5400),
        ("2h", 7200),
        ("45s", 45),
        ("1.5h", 5400),
        ("bad", None),
        ("", None),
        (None, None),
        ("2562047h", 2562047 * 3600),  # just within Go's time.Duration
        ("2562048h", None),  # beyond it: refused, as Go's ParseDuration refuses it
        ("9" * 400 + "h", None),  # would be an infinite float, and the factors NaN
    ],
)
def test_durations(text: str | None, seconds: float | None) -> None:
    assert parse_duration(text) == seconds


def test_each_factor_is_normalised_to_unit_range() -> None:
    clock = Clock()
    prio, _tenancy, _cache = engine(
        {
            "userLevel": 1,
            "groupLevel": 1,
            "taskPriority": 1,
            "waitingTime": 1,
            "jobSize": 1,
            "estimatedRuntime": 1,
            "fairShare": 1,
            "queueLevel": 1,
        },
        clock,
        members={"big": 4},
    )
    small = queued(
        tenant_pod("small", priority=10, gpus=1, annotations={"ai-scheduler.io/estimated-runtime": "30m"}),
        initial=950,
    )
    big = queued(
        tenant_pod("big", "team-c", priority=110, gpus=2,
                   annotations={"ai-scheduler.io/estimated-runtime": "2h"})
    )
    unknown = queued(tenant_pod("none", "team-b", priority=60, cpu="4"))
    prio.refresh([small, big, unknown])
    f_small, f_big, f_none = (prio.evaluate(q).factors for q in (small, big, unknown))
    assert f_small["userLevel"] == 1.0 and f_none["userLevel"] == 0.25  # levels 4 and 1 of max 4
    assert f_small["groupLevel"] == 1.0 and f_big["groupLevel"] == 0.5  # vision 2, nlp 1 of max 2
    assert (f_small["taskPriority"], f_none["taskPriority"], f_big["taskPriority"]) == (0.0, 0.5, 1.0)
    assert f_small["waitingTime"] == 0.5 and f_big["waitingTime"] == 0.0  # 50 s of maxWait 100 s
    assert f_big["jobSize"] == 1.0 and f_small["jobSize"] == 0.125  # gang of 4 x 2 GPUs = 8; 1 of 8
    assert f_none["jobSize"] == 1.0  # the only cpu job is the largest cpu job
    assert f_small["estimatedRuntime"] == 0.25 and f_big["estimatedRuntime"] == 1.0
    assert f_none["estimatedRuntime"] == 1.0, "no estimate counts as the longest"
    assert f_small["queueLevel"] == 0.0 and f_none["queueLevel"] == 1.0  # batch level 2 of 2; default level 0
    assert all(0.0 <= v <= 1.0 for f in (f_small, f_big, f_none) for v in f.values())
    clock.now += 1000
    assert prio.evaluate(big).factors["waitingTime"] == 1.0, "capped at maxWaitSeconds"


def test_formula_is_the_weighted_sum_and_negative_weights_prefer_small() -> None:
    prio, _, _ = engine({"jobSize": -1, "taskPriority": 0.5})
    small = queued(tenant_pod("s", priority=0, gpus=1))
    large = queued(tenant_pod("l", priority=100, gpus=4))
    prio.refresh([small, large])
    assert prio.evaluate(small).score == pytest.approx(-0.25)
    assert prio.evaluate(large).score == pytest.approx(-1.0 + 0.5)
    assert prio.sort_key(small) < prio.sort_key(large), "small first despite the lower spec.priority"


def test_fair_share_decays_usage_and_favours_the_group_that_used_less() -> None:
    clock = Clock()
    prio, _tenancy, cache = engine({"fairShare": 1}, clock)
    cache.set_pod(tenant_pod("v-running", gpus=4, node="n1"))  # vision uses 4 GPUs; nlp nothing
    prio.refresh([])
    clock.now += 100
    prio.refresh([])
    vision = queued(tenant_pod("v", gpus=1))
    nlp = queued(tenant_pod("n", "team-c", gpus=1))
    assert prio.evaluate(nlp).factors["fairShare"] == 1.0
    assert prio.evaluate(vision).factors["fairShare"] == pytest.approx(2 ** (-1 / 0.25))  # U=1, S=1/4
    cache.remove_pod("uid-v-running")
    cache.set_pod(tenant_pod("n-running", "team-c", gpus=4, node="n1"))
    for _ in range(20):  # ten half-lives later, vision's old usage has all but gone
        clock.now += 50
        prio.refresh([])
    assert prio.evaluate(vision).factors["fairShare"] > prio.evaluate(nlp).factors["fairShare"]


def test_queue_levels_come_first_and_reprioritize_moves_only_changed_pods() -> None:
    clock = Clock()
    prio, _, _ = engine({"waitingTime": 1}, clock)
    queue = SchedulingQueue(clock=clock, sort_key=prio.sort_key)
    queue.add(tenant_pod("batch-old", "team-a"))  # batch, level 2
    clock.now += 50
    queue.add(tenant_pod("prod-new", "team-a", labels={"ai-scheduler.io/queue": "prod"}))  # level 0
    queue.add(tenant_pod("batch-new", "team-a"))
    clock.now += 10
    prio.refresh(queue.pending())
    assert queue.reprioritize() >= 1
    order = []
    while (qp := queue.pop_nowait()) is not None:
        order.append(qp.pod.name)
    assert order == ["prod-new", "batch-old", "batch-new"]


def test_default_policy_keeps_kube_schedulers_order() -> None:
    cfg = parse_config({})
    tenancy = Tenancy(cfg)
    prio = PriorityEngine(cfg, tenancy, SchedulerCache(), lambda p: 1, Clock())
    queue = SchedulingQueue(clock=Clock(), sort_key=prio.sort_key)
    for name, priority in (("low-1", 0), ("high", 1000), ("low-2", 0), ("mid", 5)):
        queue.add(tenant_pod(name, "anywhere", priority=priority))
    prio.refresh(queue.pending())
    queue.reprioritize()
    order = []
    while (qp := queue.pop_nowait()) is not None:
        order.append(qp.pod.name)
    assert order == ["high", "mid", "low-1", "low-2"]


# ----------------------------------------------------------------------------------------- promotion
def promoting_engine(weights: dict[str, float], clock: Clock) -> tuple[PriorityEngine, SchedulerCache]:
    """TENANCY with batch (level 2) promoted after 30 s; research, of the same level, never."""
    queues: list[dict[str, Any]] = [
        {"name": "prod", "level": 0},
        {"name": "batch", "level": 2, "weight": 1, "promoteAfterSeconds": 30},
        {"name": "research", "level": 2, "weight": 3},
    ]
    cfg = config(weights, queues=queues)
    tenancy = Tenancy(cfg)
    cache = SchedulerCache()
    cache.tenancy = tenancy
    return PriorityEngine(cfg, tenancy, cache, lambda p: 1, clock), cache


def drain(queue: SchedulingQueue) -> list[str]:
    order = []
    while (qp := queue.pop_nowait()) is not None:
        order.append(qp.pod.name)
    return order


def test_a_pod_waiting_past_promote_after_is_ordered_at_the_top_level_from_the_next_refresh() -> None:
    clock = Clock()
    prio, _ = promoting_engine({"taskPriority": 1}, clock)  # one spec priority: scores tie, seq decides
    queue = SchedulingQueue(clock=clock, sort_key=prio.sort_key)
    queue.add(tenant_pod("batch-old", "team-a"))  # batch, level 2, at 1000
    queue.add(tenant_pod("research-old", "team-c"))  # research, level 2, never promoted
    clock.now += 10
    queue.add(tenant_pod("prod-1", "team-a", labels={"ai-scheduler.io/queue": "prod"}))
    queue.add(tenant_pod("prod-2", "team-a", labels={"ai-scheduler.io/queue": "prod"}))
    clock.now = 1029.0  # waited 29 s of 30
    prio.refresh(queue.pending())
    assert queue.reprioritize() == 0
    explained = prio.explain("uid-batch-old")
    assert explained is not None and (explained.queue_level, explained.promoted) == (2, False)

    clock.now = 1030.0  # the bound: batch-old alone moves, at this refresh
    prio.refresh(queue.pending())
    assert queue.reprioritize() == 1
    explained = prio.explain("uid-batch-old")
    assert explained is not None and (explained.queue_level, explained.promoted) == (0, True)
    research = prio.explain("uid-research-old")
    assert research is not None and (research.queue_level, research.promoted) == (2, False)
    # At level 0 now, and queued before the prod pods: first. research waited as long but stays behind.
    assert drain(queue) == ["batch-old", "prod-1", "prod-2", "research-old"]


def test_a_promoted_pod_counts_as_a_peer_of_the_top_level_queues() -> None:
    clock = Clock()
    prio, cache = promoting_engine({"queueLevel": 1}, clock)
    cache.set_pod(tenant_pod("prod-running", "team-a", gpus=4, node="n1",
                             labels={"ai-scheduler.io/queue": "prod"}))
    prio.refresh([])
    clock.now += 100
    prio.refresh([])
    waiting = queued(tenant_pod("batch", "team-a"), initial=clock.now - 10)
    before = prio.evaluate(waiting)
    assert (before.queue_level, before.promoted, before.factors["queueLevel"]) == (2, False, 0.0)
    assert before.queue_fairness == 1.0  # alone with research at level 2, neither has used anything
    clock.now += 20
    after = prio.evaluate(waiting)
    assert (after.queue_level, after.promoted, after.factors["queueLevel"]) == (0, True, 1.0)
    # Its fair share is taken among the top level's queues and itself: prod holds all that usage.
    assert after.queue_fairness == 1.0
    prod = queued(tenant_pod("p", "team-a", labels={"ai-scheduler.io/queue": "prod"}), clock.now)
    assert prio.evaluate(prod).queue_fairness == pytest.approx(0.5)  # prod alone at level 0: U=1, S=1
    assert prio.sort_key(waiting) < prio.sort_key(prod), "the starved queue comes first at the top level"


def test_queues_at_the_top_level_and_queues_without_the_key_are_never_promoted() -> None:
    clock = Clock()
    queues = [{"name": "prod", "level": 0, "promoteAfterSeconds": 1}, {"name": "batch", "level": 2},
              {"name": "research", "level": 2}]
    cfg = config({"taskPriority": 1}, queues=queues)
    prio = PriorityEngine(cfg, Tenancy(cfg), SchedulerCache(), lambda p: 1, clock)
    ancient = 1000.0 - 10**6
    for name, namespace, labels in (("p", "team-a", {"ai-scheduler.io/queue": "prod"}),
                                    ("b", "team-a", None), ("r", "team-c", None)):
        result = prio.evaluate(queued(tenant_pod(name, namespace, labels=labels), ancient))
        assert not result.promoted
        assert result.queue_level == (0 if name == "p" else 2)


def test_a_refresh_rekeys_the_queue_only_when_some_key_may_have_moved() -> None:
    """The default policy (taskPriority) reads only the lowest and highest waiting priority: its keys move
    when those do, or on a reload; a policy that reads the clock moves them at every refresh."""
    cfg = parse_config({})
    prio = PriorityEngine(cfg, Tenancy(cfg), SchedulerCache(), lambda p: 1, Clock())
    queue = SchedulingQueue(clock=Clock(), sort_key=prio.sort_key)
    for name, priority in (("a", 0), ("b", 10), ("c", 5)):
        queue.add(tenant_pod(name, "anywhere", priority=priority))
    prio.refresh(queue.pending())
    assert prio.keys_may_move(), "never re-keyed yet"
    queue.reprioritize()
    prio.rekeyed()
    prio.refresh(queue.pending())
    assert not prio.keys_may_move(), "same pods, same normalisers: every key is what a re-key would give"
    queue.add(tenant_pod("d", "anywhere", priority=5))
    prio.refresh(queue.pending())
    assert not prio.keys_may_move(), "a pod inside the range moves nobody else"
    queue.add(tenant_pod("e", "anywhere", priority=100))
    assert prio.keys_may_move(), "a pod above the highest widened the normalisers of every key"
    queue.reprioritize()
    prio.rekeyed()
    queue.delete("uid-e")
    prio.refresh(queue.pending())
    assert prio.keys_may_move(), "the highest left: the normalisers narrowed"
    queue.reprioritize()
    prio.rekeyed()
    prio.reconfigure(cfg)
    assert prio.keys_may_move(), "a reload re-keys"
    assert drain(queue) == ["b", "c", "d", "a"]

    fresh = PriorityEngine(cfg, Tenancy(cfg), SchedulerCache(), lambda p: 1, Clock())
    queue = SchedulingQueue(clock=Clock(), sort_key=fresh.sort_key)
    for index in range(3):
        queue.add(tenant_pod(f"same-{index}", "anywhere", priority=0))
    fresh.refresh(queue.pending())
    assert not fresh.keys_may_move(), "equal priorities from the start: every key was current when made"

    clock = Clock()
    waiting, _, _ = engine({"waitingTime": 1}, clock)
    queue = SchedulingQueue(clock=clock, sort_key=waiting.sort_key)
    queue.add(tenant_pod("x", "team-a"))
    waiting.refresh(queue.pending())
    queue.reprioritize()
    waiting.rekeyed()
    clock.now += 10
    waiting.refresh(queue.pending())
    assert waiting.keys_may_move(), "waitingTime moves with the clock"
