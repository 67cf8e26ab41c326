"""No pod without a reason (issue 12, point 2), on both backends.

A pending pod of ours always ends with a PodScheduled=False condition and a FailedScheduling event, or
bound: whatever it asks for (quantities larger than int64), whatever it is called (a gang named `90m`),
and whatever goes wrong in the scheduling cycle (an exception: reason SchedulerError, then a retry with
backoff, as kube-scheduler's handleSchedulingFailure does). Reasons that quote what the user wrote stay
short. Faults in the cycle are injected by wrapping the framework's `schedule` in the daemon under test,
which runs in the test's process on both backends.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from backends import Cluster
from builders import make_node, make_pod
from conftest import RunningScheduler, StartScheduler, create_all, stored_pod, wait_for

from ai_scheduler.api.kube import KubeClient
from ai_scheduler.cache.gangs import KOORDINATOR_MIN, KOORDINATOR_NAME, POD_GROUP_LABEL
from ai_scheduler.cache.records import PodRecord
from ai_scheduler.messages import MAX_MESSAGE
from ai_scheduler.queue import QueuedPod
from ai_scheduler.scheduler.decision_log import DecisionLog
from ai_scheduler.scheduler.framework.runtime import Decision, Framework
from ai_scheduler.scheduler.preemption import NO_VICTIMS
from e2e.test_e2e_gangs import podgroup
from e2e.test_e2e_scheduling import assert_not_overcommitted, events_for, pod_condition

HUGE = "12345678901234567890"  # a legal quantity, beyond int64 (the reproduction)


def requesting(pod: dict[str, Any], section: str, resource: str, quantity: str) -> dict[str, Any]:
    """The pod with its container asking for `quantity` of `resource` in `section` (requests or limits)."""
    pod["spec"]["containers"][0]["resources"].setdefault(section, {})[resource] = quantity
    return pod


def reason_of(cluster: Cluster, name: str) -> str:
    return str(pod_condition(cluster, name).get("reason", ""))


def bound_to(cluster: Cluster, name: str, node: str) -> Callable[[], bool]:
    return lambda: stored_pod(cluster, name)["spec"].get("nodeName") == node


def told(cluster: Cluster, name: str, reason: str) -> Callable[[], bool]:
    """The pod has a PodScheduled condition with this reason, and a FailedScheduling event."""
    return lambda: reason_of(cluster, name) == reason and bool(events_for(cluster, name, "FailedScheduling"))


def no_cycle_errors(running: RunningScheduler) -> None:
    assert running.log_lines("schedule.error") == []


class CycleFault:
    """Makes the daemon's cycle raise while it schedules the named pods, until `heal()`."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *names: str) -> None:
        self.names = set(names)
        self.active = True
        self.raised = 0
        original = Framework.schedule

        def schedule(framework: Framework, pod: PodRecord, *args: Any, **kwargs: Any) -> Decision:
            if self.active and pod.name in self.names:
                self.raised += 1
                raise RuntimeError(f"injected fault scheduling {pod.name}")
            return original(framework, pod, *args, **kwargs)

        monkeypatch.setattr(Framework, "schedule", schedule)

    def heal(self) -> None:
        self.active = False


@pytest.fixture
def cycle_fault(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., CycleFault]]:
    yield lambda *names: CycleFault(monkeypatch, *names)


async def test_a_pod_requesting_pods_12345678901234567890_is_placed_by_sim_and_refused_by_kube(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    """The issue's reproduction. kube-scheduler reads a pod's own `pods` request into AllowedPodNumber and
    ignores it (the pod takes one slot); the real API server refuses it in a container outright."""
    running = await start_scheduler()
    await create_all(api, [make_node("n1", cpu="4", memory="8Gi", pods=2)], [])
    result = await api.create_pod(requesting(make_pod("slots"), "requests", "pods", HUGE))
    if cluster.backend == "kube":
        assert result.status == 422, result.message
        assert "must be a standard resource for containers" in result.message
        return
    assert result.ok, result.message
    await wait_for(lambda: stored_pod(cluster, "slots")["spec"].get("nodeName") == "n1", what="placed")
    await wait_for(lambda: events_for(cluster, "slots", "Scheduled"), what="its Scheduled event")
    # It took one of the node's two slots, not 12345678901234567890: one more pod fits, a third does not.
    await create_all(api, [], [make_pod("second"), make_pod("third")])

    def placed_and_refused() -> tuple[str, str] | None:
        names = ("second", "third")
        placed = [n for n in names if stored_pod(cluster, n)["spec"].get("nodeName") == "n1"]
        refused = [n for n in names if reason_of(cluster, n) == "Unschedulable"]
        return (placed[0], refused[0]) if len(placed) == 1 and len(refused) == 1 else None

    _, refused = await wait_for(placed_and_refused, what="one more pod placed, the last one told why")
    assert pod_condition(cluster, refused)["message"] == (
        f"0/1 nodes are available: 1 Too many pods. preemption: 0/1 nodes are available: 1 {NO_VICTIMS}."
    )
    no_cycle_errors(running)
    assert running.scheduler.cache.check_consistency() == []


async def test_quantities_beyond_int64_saturate_and_scheduling_goes_on(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    """Quantities the API server accepts at any size, in every place they enter the cache's int64 columns:
    a node's allocatable, a bound pod of another scheduler, and pods of ours. (An extended resource beyond
    int64 is refused by the real API server: "must be an integer".)"""
    running = await start_scheduler()
    nodes = [
        make_node("vast", cpu="8", memory="16Gi", ephemeral_storage=HUGE),
        make_node("taken", cpu="8", memory="16Gi"),
    ]
    foreign = make_pod("foreign", cpu=HUGE, scheduler_name="default-scheduler")
    await create_all(api, nodes, [foreign])
    uid = stored_pod(cluster, "foreign")["metadata"]["uid"]
    assert (await api.bind("default", "foreign", uid, "taken")).ok
    ours = [
        make_pod("huge-memory", memory=HUGE),
        requesting(make_pod("storage"), "requests", "ephemeral-storage", "1Pi"),
        make_pod("plain", cpu="1"),
    ]
    await create_all(api, [], ours)
    await wait_for(lambda: reason_of(cluster, "huge-memory") == "Unschedulable", what="huge request told why")
    message = pod_condition(cluster, "huge-memory")["message"]
    assert message.startswith("0/2 nodes are available: ") and "2 Insufficient memory" in message, message
    await wait_for(lambda: events_for(cluster, "huge-memory", "FailedScheduling"), what="FailedScheduling")
    # The foreign pod fills node "taken" (its cpu counts, saturated): ours go to "vast".
    for name in ("storage", "plain"):
        await wait_for(bound_to(cluster, name, "vast"), what=f"{name} placed")
    cache = running.scheduler.cache
    assert cache.node_usage("taken")["cpu"] > 8000
    assert int(np.max(cache.requested)) < 2**62 and int(np.max(cache.allocatable)) < 2**62
    assert cache.check_consistency() == []
    no_cycle_errors(running)


async def test_a_cycle_that_raises_tells_the_pod_and_retries_it_with_backoff(
    cluster: Cluster,
    api: KubeClient,
    start_scheduler: StartScheduler,
    cycle_fault: Callable[..., CycleFault],
) -> None:
    running = await start_scheduler()
    fault = cycle_fault("unlucky")
    await create_all(api, [make_node("n1", cpu="4", memory="8Gi")], [make_pod("unlucky"), make_pod("lucky")])
    await wait_for(lambda: stored_pod(cluster, "lucky")["spec"].get("nodeName"), what="the other pod placed")
    await wait_for(lambda: reason_of(cluster, "unlucky") == "SchedulerError", what="SchedulerError condition")
    condition = pod_condition(cluster, "unlucky")
    assert condition["status"] == "False"
    assert "RuntimeError: injected fault scheduling unlucky" in condition["message"]
    await wait_for(lambda: events_for(cluster, "unlucky", "FailedScheduling"), what="FailedScheduling event")
    assert "injected fault" in events_for(cluster, "unlucky", "FailedScheduling")[0]["message"]
    await wait_for(lambda: fault.raised >= 3, what="retries with backoff")
    error = running.log_lines("schedule.error")[0]
    assert error["level"] == "error" and error["pod"] == "default/unlucky"
    assert error["retried"] == ["default/unlucky"] and "injected fault" in error["traceback"]
    fault.heal()
    await wait_for(lambda: stored_pod(cluster, "unlucky")["spec"].get("nodeName"), what="placed once healed")
    await wait_for(lambda: events_for(cluster, "unlucky", "Scheduled"), what="Scheduled event")
    assert running.scheduler.cache.check_consistency() == []


async def test_a_cycle_that_raises_after_handing_over_a_binding_leaves_that_pod_to_the_binder(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Recovery must not put back (nor release the room of) a pod whose binding is already on its way."""
    original = DecisionLog.log

    def log_decision(decisions: DecisionLog, qp: QueuedPod, pod: PodRecord, *args: Any) -> None:
        if pod.name == "handed":
            raise RuntimeError("injected fault after the binding was handed over")
        original(decisions, qp, pod, *args)

    monkeypatch.setattr(DecisionLog, "log", log_decision)
    running = await start_scheduler()
    await create_all(api, [make_node("n1", cpu="4", memory="8Gi")], [make_pod("handed", cpu="3")])
    await wait_for(bound_to(cluster, "handed", "n1"), what="bound all the same")
    await wait_for(lambda: events_for(cluster, "handed", "Scheduled"), what="its Scheduled event")
    [error] = running.log_lines("schedule.error")
    assert error["retried"] == [] and error["released"] == []
    assert pod_condition(cluster, "handed")["status"] == "True"
    assert not events_for(cluster, "handed", "FailedScheduling")
    assert cluster.pods_bound_twice() == []
    assert running.scheduler.cache.check_consistency() == []


async def test_a_gang_named_90m_whose_cycle_raises_tells_every_member_and_holds_nothing(
    cluster: Cluster,
    api: KubeClient,
    start_scheduler: StartScheduler,
    cycle_fault: Callable[..., CycleFault],
) -> None:
    """The campaign's two silent members of gang `90m`: nothing reads the name as a quantity or a duration;
    an exception in the gang's cycle (there, the OverflowError of a huge request) left the popped member
    without a reason and its sibling, taken along, in flight for good, and an assumption made before the
    exception held its node. Both members are created before the scheduler starts, so that one cycle
    takes them together, as it did there."""
    members = [make_pod(f"90m-{i}", cpu="1", labels={POD_GROUP_LABEL: "90m"}) for i in range(2)]
    assert (await api.create_podgroup(podgroup("90m", 2))).ok
    await create_all(api, [make_node("n1", cpu="4", memory="8Gi")], members)
    fault = cycle_fault("90m-1")  # raises after 90m-0 was placed and assumed in the same cycle
    running = await start_scheduler()
    for name in ("90m-0", "90m-1"):
        await wait_for(told(cluster, name, "SchedulerError"), what=f"{name} told why")
    cache = running.scheduler.cache
    assert cache.assumed_count == 0 and cache.node_usage("n1") == {}, "nothing stays reserved"
    released = [line for line in running.log_lines("schedule.error") if line["released"]]
    assert released and released[0]["released"] == ["default/90m-0"]
    assert sorted(released[0]["retried"]) == ["default/90m-0", "default/90m-1"]
    fault.heal()
    for name in ("90m-0", "90m-1"):
        await wait_for(bound_to(cluster, name, "n1"), what=f"{name} bound with its gang")
    assert cache.check_consistency() == []
    assert_not_overcommitted(cluster)


async def test_reasons_quote_user_values_cut_short(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    """Annotations may hold 256 KiB (labels only 63 characters on a real API server): a value quoted in a
    reason is cut, and a whole message is capped at 1 KiB as kube-scheduler caps its event messages."""
    running = await start_scheduler()
    long_minimum = make_pod("long-minimum", annotations={KOORDINATOR_NAME: "g", KOORDINATOR_MIN: "7" * 5000})
    long_name = make_pod("long-name", annotations={KOORDINATOR_NAME: "n" * 5000, KOORDINATOR_MIN: "2"})
    await create_all(api, [make_node("n1")], [long_minimum, long_name])
    for name in ("long-minimum", "long-name"):
        await wait_for(told(cluster, name, "Unschedulable"), what=f"{name} told why")
    quoted = pod_condition(cluster, "long-minimum")["message"]
    assert KOORDINATOR_MIN in quoted and "..." in quoted and len(quoted) < 300, quoted
    capped = pod_condition(cluster, "long-name")["message"]
    assert len(capped) == MAX_MESSAGE and capped.endswith(" ..."), len(capped)
    for name in ("long-minimum", "long-name"):
        assert len(events_for(cluster, name, "FailedScheduling")[0]["message"]) <= MAX_MESSAGE
    no_cycle_errors(running)
