"""The core's run-time hook with a predictor (scheduler/runtimes.py `PredictedRunTimes`, the config's
`prediction` section): the pod's own estimate first, a prediction kept per pod, and online learning from
completions, in the daemon's event handlers and in the simulator that drives the same core."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from builders import Pod, make_pod

from ai_scheduler.cache.records import PodRecord
from ai_scheduler.cache.tenancy import Tenancy
from ai_scheduler.config import parse_config
from ai_scheduler.prediction import Features, RunTimeModel, RunTimePredictor
from ai_scheduler.scheduler.runtimes import AnnotatedRunTimes, PredictedRunTimes, RunTime
from ai_scheduler.trace import NodeSpec, TraceJob
from ai_scheduler.tracesim.engine import Simulation
from ai_scheduler.tracesim.records import Mode

GIB = 2**30
CONFIG = parse_config({"groups": {"lab": {}}, "users": {"alice": {"group": "lab"}},
                       "namespaces": {"team": {"user": "alice"}}})


def estimated_pod(name: str, estimate: str | None = None) -> PodRecord:
    annotations = {"ai-scheduler.io/estimated-runtime": estimate} if estimate else {}
    return Pod(name, namespace="team", cpu="1", memory="1Gi", annotations=annotations).uid().record()


def test_without_a_model_a_users_own_completions_predict_the_next_job() -> None:
    runtimes = PredictedRunTimes(RunTimePredictor(), Tenancy(CONFIG))
    assert runtimes.estimate(estimated_pod("first")) is None  # alice has finished nothing yet
    for seconds in (100.0, 200.0, 300.0):
        runtimes.completed(estimated_pod("done"), seconds)
    predicted = runtimes.estimate(estimated_pod("next"))
    assert predicted is not None and predicted.source == "prediction"
    assert predicted.median == pytest.approx(200.0) and 200.0 <= predicted.upper <= 300.0
    # The pod's own estimate always comes first.
    assert runtimes.estimate(estimated_pod("declared", "90m")) == RunTime(5400.0, 5400.0, "annotation")
    # Without online learning, completions teach nothing.
    frozen = PredictedRunTimes(RunTimePredictor(), Tenancy(CONFIG), learn_online=False)
    frozen.completed(estimated_pod("done"), 100.0)
    assert frozen.estimate(estimated_pod("next")) is None


def test_a_prediction_is_made_once_per_pod_and_dropped_when_it_completes(tmp_path: Path) -> None:
    jobs = [Features(user="alice", cpu=1000 * (1 + i % 2)) for i in range(30)]
    model = RunTimeModel.fit(jobs, [60.0 * (1 + i % 2) for i in range(30)], max_iter=20)
    predictor = RunTimePredictor(model)
    runtimes = PredictedRunTimes(predictor, Tenancy(CONFIG))
    first = runtimes.estimate(estimated_pod("p"))
    assert first is not None and first.source == "prediction"
    for _ in range(20):  # alice's jobs now run ten times longer than the model says
        runtimes.completed(estimated_pod("other"), first.median * 10)
    assert runtimes.estimate(estimated_pod("p")) == first  # predicted at enqueue: kept while it waits
    fresh = runtimes.estimate(estimated_pod("q"))
    assert fresh is not None and fresh.median > 3 * first.median  # corrected for the next pod


def test_the_simulator_learns_run_times_online_from_its_own_completions() -> None:
    config = parse_config({"prediction": {"learnOnline": True}})
    nodes = [NodeSpec("n", cpu=4000, memory=16 * GIB)]
    jobs = [TraceJob(f"j{i}", float(i * 10), duration=120.0, cpu=4000, memory=GIB, user="alice")
            for i in range(4)]
    simulation = Simulation(config, nodes, jobs, Mode.TIMED)
    simulation.run()
    runtimes = simulation.core.runtimes
    assert isinstance(runtimes, PredictedRunTimes)
    assert runtimes.predictor.corrections.completions("alice") == 4
    history = runtimes.predictor.corrections.history("alice")
    assert history is not None and history.median_s == pytest.approx(120.0)
    # The default config asks for no prediction: the pods' own estimates only.
    plain = Simulation(parse_config({}), nodes, jobs, Mode.TIMED)
    assert isinstance(plain.core.runtimes, AnnotatedRunTimes)


def test_a_model_file_that_does_not_load_is_logged_and_left_out(tmp_path: Path) -> None:
    broken = tmp_path / "model.npz"
    broken.write_bytes(b"not a model")
    config = parse_config({"prediction": {"model": str(broken)}})
    simulation = Simulation(config, [NodeSpec("n", cpu=1000, memory=GIB)], [], Mode.TIMED)
    assert isinstance(simulation.core.runtimes, AnnotatedRunTimes)


@pytest.mark.parametrize(("phase", "kind", "learnt"), [
    ("Succeeded", "MODIFIED", True),
    ("Failed", "MODIFIED", True),  # a failed pod held its node as long as it ran: that is what is predicted
    ("Running", "DELETED", False),  # deleted or evicted before its end: cut short, nothing to learn
])
def test_the_daemon_learns_from_pods_that_ran_to_their_end(phase: str, kind: str, learnt: bool) -> None:
    """The event handlers hand a placed pod's end to the core, which learns its run time from its start."""
    from builders import make_node

    from ai_scheduler.log import JsonLogger, NullStream
    from ai_scheduler.scheduler.core import SchedulerCore
    from ai_scheduler.scheduler.metrics import Metrics
    from ai_scheduler.scheduler.outbox import Outbox

    config = parse_config({"prediction": {"learnOnline": True}, "groups": {"lab": {}},
                           "users": {"alice": {"group": "lab"}}, "namespaces": {"team": {"user": "alice"}}})

    def no_outbox(core: SchedulerCore) -> Outbox:
        unused: Any = SimpleNamespace(forget=lambda uid: None)  # nothing is scheduled, reported or evicted
        return Outbox(unused, unused, unused)

    now = 1_800_000_000.0  # 2027-01-15T08:00:00Z
    core = SchedulerCore(config, JsonLogger(stream=NullStream()), Metrics(), no_outbox, clock=lambda: now)
    node = make_node("n1", cpu="8", memory="32Gi")
    node["metadata"].update(uid="uid-n1", resourceVersion="1")
    core.handlers.on_node_event("ADDED", node)
    obj = make_pod("job", namespace="team", cpu="1", memory="1Gi")
    obj["metadata"].update(uid="uid-job", resourceVersion="1")
    obj["spec"]["nodeName"] = "n1"
    obj["status"] = {"phase": "Running", "startTime": "2027-01-15T07:00:00Z"}  # an hour before `now`
    core.handlers.on_pod_event("ADDED", obj)
    ended = {**obj, "metadata": {**obj["metadata"], "resourceVersion": "2"},
             "status": {**obj["status"], "phase": phase}}
    core.handlers.on_pod_event(kind, ended)
    runtimes = core.runtimes
    assert isinstance(runtimes, PredictedRunTimes)
    history = runtimes.predictor.corrections.history("alice")
    if learnt:
        assert runtimes.predictor.corrections.completions("alice") == 1
        assert history is not None and history.median_s == pytest.approx(3600.0)
    else:
        assert runtimes.predictor.corrections.completions("alice") == 0 and history is None
