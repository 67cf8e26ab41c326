"""Run-time prediction (ai_scheduler/prediction, `ai-scheduler learn`).

The history the model is judged on is tests/data/trace_history.csv, a generic trace written by
`history_rows` below (regenerate it with `cd tests && python -m unit.prediction.test_prediction`; a test
checks that the file is what the generator writes). It is Helios-like in what matters here: each user runs
a few kinds of job, each kind with its typical run time and log-normal noise around it; some jobs are
gangs, some fail; and the users' estimates are often far off (rounded up to the hour or the day, or off
by the user's own factor), so neither baseline is good and the model has something to learn.
"""

from __future__ import annotations

import csv
import io
import json
import math
import random
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from builders import make_pod
from paths import DATA

from ai_scheduler.cache.records import PodRecord
from ai_scheduler.cli import main
from ai_scheduler.prediction import (
    REFERENCE_GPU_MEMORY,
    Features,
    ModelError,
    OnlineCorrections,
    Prediction,
    Report,
    RunTimeModel,
    RunTimePredictor,
    Sample,
    evaluate,
    features_of_pod,
    name_stem,
    report_table,
    split_by_time,
)
from ai_scheduler.prediction.evaluate import ESTIMATE, HISTORY, MODEL, MODEL_WITH_ESTIMATE
from ai_scheduler.trace import JobStatus, TraceJob, read_workload
from ai_scheduler.trace.pods import pod_of
from ai_scheduler.tracesim.learn import features_of_job, samples_of

HISTORY_FILE = DATA / "trace_history.csv"
COLUMNS = ("name", "submit_time", "duration", "cpu", "memory", "gpus", "gang", "gang_size", "user", "group",
           "namespace", "estimate", "task_type", "workload_class", "status")
STEMS = ("resnet50-train", "bert-ft", "gpt-pretrain", "vit-eval", "llama-serve", "yolo-train", "t5-ft",
         "diffusion-sample", "etl-batch", "whisper-asr", "sweep-lr", "ranker-train")
KINDS = (("training", "cv"), ("training", "nlp"), ("inference", "nlp"), ("batch", "tabular"),
         ("inference", "cv"))


def history_rows(seed: int = 7, jobs: int = 900) -> list[dict[str, str]]:
    """A generic trace of `jobs` jobs (gangs as one row per pod) by 10 users of 3 groups."""
    rng = random.Random(seed)
    users = []
    for u in range(10):
        kinds = []
        for _ in range(rng.randint(2, 4)):
            task_type, workload_class = rng.choice(KINDS)
            gpus = rng.choice((0, 1, 2, 4, 8, 16))
            typical = math.exp(rng.uniform(math.log(600), math.log(2 * 86400)))  # 10 min to 2 days
            kinds.append((rng.choice(STEMS), task_type, workload_class, gpus, typical))
        # How the user estimates: rounded up to the hour (a day past one), a factor of their own, or none.
        style = rng.choice(("round", "factor", "factor", "none"))
        users.append((f"u{u:02d}", f"g{u % 3}", kinds, style, rng.uniform(0.4, 4.0)))
    rows: list[dict[str, str]] = []
    now = 0.0
    for seq in range(jobs):
        now += rng.expovariate(1 / 900)
        user, group, kinds, style, factor = rng.choice(users)
        stem, task_type, workload_class, gpus, typical = rng.choice(kinds)
        duration = typical * rng.lognormvariate(0, 0.35)
        status = "succeeded"
        if rng.random() < 0.05:
            status, duration = "failed", duration * rng.uniform(0.01, 0.5)
        estimate = ""
        if style == "round" and rng.random() < 0.9:
            unit = 3600 if duration < 86400 else 86400
            estimate = f"{math.ceil(typical / unit) * unit // 3600}h"
        elif style == "factor" and rng.random() < 0.8:
            estimate = f"{max(round(typical * factor * rng.uniform(0.8, 1.25) / 60), 1)}m"
        pods = 2 if gpus == 16 else 1
        name = f"{stem}-{seq:04d}"
        for i in range(pods):
            rows.append({
                "name": f"{name}-{i}" if pods > 1 else name, "submit_time": f"{now:.0f}",
                "duration": f"{duration:.0f}", "cpu": str(max(gpus // pods, 1) * 6),
                "memory": f"{max(gpus // pods, 1) * 48}Gi", "gpus": str(gpus // pods) if gpus else "",
                "gang": name if pods > 1 else "", "gang_size": str(pods) if pods > 1 else "", "user": user,
                "group": group, "namespace": f"team-{group}", "estimate": estimate, "task_type": task_type,
                "workload_class": workload_class, "status": status,
            })
    return rows


def history_csv(rows: list[dict[str, str]]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    """scikit-learn's OpenMP threads only slow small fits down on a shared machine."""
    from threadpoolctl import threadpool_limits  # type: ignore[import-untyped]

    with threadpool_limits(limits=1, user_api="openmp"):
        yield


@pytest.fixture(scope="module")
def history() -> list[Sample]:
    samples, _ = samples_of(read_workload(HISTORY_FILE).jobs)
    return samples


@pytest.fixture(scope="module")
def fitted(history: list[Sample]) -> tuple[RunTimeModel, Report]:
    from threadpoolctl import threadpool_limits

    train, test = split_by_time(history, 0.2)
    with threadpool_limits(limits=1, user_api="openmp"):
        return evaluate(train, test, 0.9, seed=0)


# --- the synthetic history ---------------------------------------------------------------------------


def test_the_history_file_is_what_the_generator_writes() -> None:
    assert HISTORY_FILE.read_text() == history_csv(history_rows())


def test_the_history_reads_as_a_generic_trace_and_gangs_count_once() -> None:
    workload = read_workload(HISTORY_FILE)
    assert workload.problems == []
    assert workload.format.value == "generic"
    samples, left_out = samples_of(workload.jobs)
    gangs = {job.gang for job in workload.jobs if job.gang}
    assert gangs and len(workload.jobs) == 900 + len(gangs)  # 900 jobs, the gangs' second pods beside them
    failed = {job.gang or job.name for job in workload.jobs if job.status is JobStatus.FAILED}
    assert failed  # failed jobs held their GPUs too: they are learnt from, as every job that ended
    assert left_out == 0
    assert len(samples) == 900
    failed_jobs = [job for job in workload.jobs if job.status is JobStatus.FAILED]
    assert len(samples_of(failed_jobs)[0]) == len(failed)
    assert sum(s.features.estimate is not None for s in samples) > len(samples) // 3


# --- features ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "stem"), [
    ("resnet50-train-0042", "resnet50-train"),
    ("resnet50-train", "resnet50-train"),
    ("bert-ft-2024-01-31-7d9f8c6b5-x7k2p", "bert-ft"),
    ("sweep_lr.run3", "sweep_lr"),
    ("GPT-Pretrain-worker-3", "gpt-pretrain"),
    ("llama-serve-3f9a2c1b", "llama-serve"),
    ("eval-20240131t1200-17", "eval"),
    ("job-0d3e6f2a-9b1c-4e5f-8a7b-123456789abc", "job"),
    ("0042", "0042"),
    ("vit-b16", "vit-b16"),
    ("train-resnet50", "train-resnet50"),
    ("a--", "a"),
])
def test_name_stem(name: str, stem: str) -> None:
    assert name_stem(name) == stem


def test_features_of_a_pod() -> None:
    pod = make_pod(
        "resnet50-train-0042-1", namespace="team-cv", cpu="6", memory="48Gi",
        labels={"ai-scheduler.io/task-type": "training", "ai-scheduler.io/workload-class": "cv",
                "pod-group.scheduling.sigs.k8s.io/name": "resnet50-train-0042",
                "pod-group.scheduling.sigs.k8s.io/min-available": "2"},
        annotations={"ai-scheduler.io/estimated-runtime": "1h30m", "ai-scheduler.io/gpu-count": "2"},
    )
    features = features_of_pod(PodRecord.from_api(pod), "alice", "cv-lab")
    assert features == Features(user="alice", group="cv-lab", namespace="team-cv", task_type="training",
                                workload_class="cv", cpu=6000, memory=48 * 2**30, gpu_milli=2000, gang_size=2,
                                name_stem="resnet50-train", estimate=5400.0)
    # The gang size the caller knows (a PodGroup object's minMember) wins over the labels.
    assert features_of_pod(PodRecord.from_api(pod), "alice", "", gang_size=4).gang_size == 4


@pytest.mark.parametrize(("kwargs", "milli"), [
    ({"annotations": {"ai-scheduler.io/gpu-fraction": "0.25"}}, 250),
    ({"annotations": {"ai-scheduler.io/gpu-memory": "20Gi"}}, 250),  # of an 80 GiB reference device
    ({"annotations": {"ai-scheduler.io/gpu-memory": "200Gi"}}, 1000),
    ({"gpus": 4}, 4000),  # the device plugin's nvidia.com/gpu
    ({"annotations": {"ai-scheduler.io/gpu-count": "two"}}, 0),  # malformed: none (reported elsewhere)
    ({}, 0),
])
def test_gpu_requests_in_thousandths(kwargs: dict[str, object], milli: int) -> None:
    record = PodRecord.from_api(make_pod("p", **kwargs))  # type: ignore[arg-type]
    features = features_of_pod(record, "u", "g")
    assert features.gpu_milli == milli
    assert features.gang_size == 0 and features.estimate is None and features.task_type == ""
    assert REFERENCE_GPU_MEMORY == 80 * 2**30


def test_a_trace_job_and_the_pod_made_of_it_read_the_same(history: list[Sample],
                                                          fitted: tuple[RunTimeModel, Report]) -> None:
    """What `learn` fits on (trace jobs) is what the daemon predicts for (their pods)."""
    model, _ = fitted
    jobs = [job for job in read_workload(HISTORY_FILE).jobs if job.duration][:200]
    for job in jobs:
        record = PodRecord.from_api(pod_of(job, scheduler_name="ai-scheduler"))
        from_pod = features_of_pod(record, job.user, job.group)
        from_job = features_of_job(job)
        if job.estimate is not None:  # the pod's annotation holds whole seconds
            assert from_pod.estimate == pytest.approx(from_job.estimate, abs=0.5)
        # Equal, missing sizes (NaN) included: neither a trace job nor its pod declares them.
        assert np.array_equal(model.matrix([from_pod])[:, :-1], model.matrix([from_job])[:, :-1],
                              equal_nan=True), job.name
    fraction = TraceJob(name="f", submit_time=0, gpu_fraction=0.5, user="u")
    memory = TraceJob(name="m", submit_time=0, gpu_memory=40 * 2**30, user="u")
    assert features_of_job(fraction).gpu_milli == features_of_job(memory).gpu_milli == 500
    assert features_of_job(fraction).namespace == "u"  # as trace/pods.py names the pod's namespace


# --- the model -----------------------------------------------------------------------------------------


def test_predictions_are_ordered_and_batch_equals_one_by_one(history: list[Sample],
                                                             fitted: tuple[RunTimeModel, Report]) -> None:
    model, _ = fitted
    features = [s.features for s in history[-50:]]
    batch = model.predict_many(features)
    assert batch == [model.predict(f) for f in features]
    assert all(0 < p.median_s <= p.upper_s and math.isfinite(p.upper_s) for p in batch)
    assert model.predict_many([]) == []
    # Values never seen (a new user, a new job name, no estimate) still predict.
    stranger = Features(user="nobody", group="new", namespace="elsewhere", name_stem="brand-new",
                        gpu_milli=500)
    assert 0 < model.predict(stranger).median_s <= model.predict(stranger).upper_s


def test_the_exported_trees_predict_as_scikit_learn_does(history: list[Sample]) -> None:
    from sklearn.ensemble import HistGradientBoostingRegressor

    from ai_scheduler.prediction.forest import Forest

    model = RunTimeModel.fit([s.features for s in history[:300]], [s.duration for s in history[:300]],
                             max_iter=40)
    matrix = model.matrix([s.features for s in history])  # beyond the rows it was fitted on
    matrix[::7, :6] = math.nan  # unknown categories
    matrix[::5, -1] = math.nan  # no estimate
    target = [math.log(max(s.duration, 1)) for s in history[:300]]
    estimator = HistGradientBoostingRegressor(loss="quantile", quantile=0.5, max_iter=40, max_depth=8,
                                              min_samples_leaf=5, categorical_features=list(range(6)))
    train = model.matrix([s.features for s in history[:300]])
    train[:, np.isnan(train).all(axis=0)] = 0.0  # as RunTimeModel.fit: the sizes no job declares
    estimator.fit(train, target)
    forest = Forest.from_estimator(estimator, matrix)
    assert forest.predict_raw(matrix) == pytest.approx(estimator.predict(matrix), rel=1e-12, abs=1e-12)


def test_fit_refuses_what_it_cannot_use() -> None:
    one = Features(user="u")
    with pytest.raises(ModelError, match="at least 2 jobs"):
        RunTimeModel.fit([one], [10.0])
    with pytest.raises(ModelError, match="upper quantile"):
        RunTimeModel.fit([one, one], [10.0, 20.0], quantile=0.4)
    with pytest.raises(ModelError, match="finite"):
        RunTimeModel.fit([one, one], [10.0, math.inf])
    with pytest.raises(ModelError, match="feature rows"):
        RunTimeModel.fit([one, one], [10.0])


def test_save_and_load_round_trip(tmp_path: Path, history: list[Sample],
                                  fitted: tuple[RunTimeModel, Report]) -> None:
    model, _ = fitted
    path = tmp_path / "models" / "runtime.model"
    model.save(path)
    assert path.exists() and not list(path.parent.glob(".*tmp"))
    loaded = RunTimeModel.load(path)
    features = [s.features for s in history]
    assert loaded.predict_many(features) == model.predict_many(features)
    assert loaded.quantile == 0.9 and loaded.vocabulary == model.vocabulary
    assert loaded.info["jobs"] == len(split_by_time(history, 0.2)[0])


def test_a_damaged_or_foreign_file_is_refused_clearly(tmp_path: Path,
                                                     fitted: tuple[RunTimeModel, Report]) -> None:
    import numpy as np

    model, _ = fitted
    good = tmp_path / "good.model"
    model.save(good)
    data = good.read_bytes()
    cases = {
        "missing": (tmp_path / "missing.model", "no such model file"),
        "garbage": (tmp_path / "garbage.model", "not a run-time model file"),
        "truncated": (tmp_path / "truncated.model", "not a run-time model file"),
        "foreign": (tmp_path / "foreign.npz", "not a run-time model file"),
        "version": (tmp_path / "version.model", "format version 99"),
        "index": (tmp_path / "index.model", "damaged"),
    }
    cases["garbage"][0].write_bytes(b"\x00\x01 not a model at all" * 10)
    cases["truncated"][0].write_bytes(data[: len(data) // 2])
    np.savez(cases["foreign"][0], weights=np.zeros(3))
    with np.load(good) as arrays:
        contents = {name: arrays[name] for name in arrays.files}
    header = json.loads(contents["header"].tobytes())
    with cases["version"][0].open("wb") as out:
        np.savez(out, **{**contents, "header": np.frombuffer(json.dumps({**header, "version": 99}).encode(),
                                                               dtype=np.uint8)})
    children = contents["median_children"].copy()
    children[0, 0] = 10**9
    with cases["index"][0].open("wb") as out:
        np.savez(out, **{**contents, "median_children": children})
    for path, message in cases.values():
        with pytest.raises(ModelError, match=message) as error:
            RunTimeModel.load(path)
        assert str(path) in str(error.value)


def test_prediction_per_pod_is_fast_and_cached(fitted: tuple[RunTimeModel, Report],
                                               history: list[Sample]) -> None:
    model, _ = fitted
    features = [s.features for s in history[:200]]
    start = time.perf_counter()
    for f in features:
        model.predict_many([f])  # uncached
    per_pod = (time.perf_counter() - start) / len(features)
    assert per_pod < 0.005  # about 0.4 ms on a quiet core; generous for a shared test machine
    start = time.perf_counter()
    for f in features:
        model.predict(f)  # cached now: the pods of one job
    assert (time.perf_counter() - start) / len(features) < per_pod


# --- learning online -----------------------------------------------------------------------------------


def test_online_corrections_converge_on_a_users_bias_and_stay_bounded() -> None:
    corrections = OnlineCorrections(alpha=0.2, bound=8.0)
    for _ in range(40):
        corrections.observe("slow", 3000.0, model_median_s=1000.0)  # runs three times what the model says
        corrections.observe("fast", 250.0, model_median_s=1000.0)
        corrections.observe("wild", 10**7, model_median_s=1.0)
    assert corrections.factor("slow") == pytest.approx(3.0, rel=0.01)
    assert corrections.factor("fast") == pytest.approx(0.25, rel=0.01)
    assert corrections.factor("wild") == pytest.approx(8.0)
    assert corrections.factor("new") == 1.0
    corrected = corrections.correct("slow", Prediction(100.0, 200.0))
    assert (corrected.median_s, corrected.upper_s) == pytest.approx((300.0, 600.0), rel=0.01)
    # One freak job moves a settled user by alpha of it, not all the way.
    corrections.observe("slow", 300.0, model_median_s=1000.0)
    assert corrections.factor("slow") == pytest.approx(3.0 * (0.1 ** 0.2), rel=0.01)
    corrections.observe("slow", math.nan, model_median_s=1000.0)  # ignored
    assert corrections.completions("slow") == 41


def test_without_a_model_it_predicts_from_the_users_past_jobs() -> None:
    predictor = RunTimePredictor()
    alice = Features(user="alice")
    assert predictor.predict(alice) is None
    for seconds in (100.0, 200.0, 300.0, 400.0, 1000.0):
        predictor.observe(alice, seconds)
    prediction = predictor.predict(alice)
    assert prediction is not None
    assert prediction.median_s == pytest.approx(400.0)  # the mean
    assert prediction.upper_s == pytest.approx(760.0)  # the 0.9 quantile of the five
    assert predictor.predict_many([alice, Features(user="bob")]) == [prediction, None]


def test_the_predictor_corrects_the_model_from_completions(fitted: tuple[RunTimeModel, Report],
                                                           history: list[Sample]) -> None:
    model, _ = fitted
    predictor = RunTimePredictor(model)
    job = history[-1].features
    raw = model.predict(job)
    assert predictor.predict(job) == raw
    for _ in range(30):  # this user's jobs now run twice as long as the model says
        predictor.observe(job, 2 * raw.median_s)
    corrected = predictor.predict(job)
    assert corrected is not None
    assert corrected.median_s == pytest.approx(2 * raw.median_s, rel=0.01)
    other = next(s.features for s in history if s.features.user != job.user)
    assert predictor.predict_many([other]) == [model.predict(other)]
    predictor.set_model(model)  # a refit: the corrections start again
    assert predictor.predict(job) == raw


# --- the report ----------------------------------------------------------------------------------------


def test_split_is_by_submit_time(history: list[Sample]) -> None:
    train, test = split_by_time(list(reversed(history)), 0.2)
    assert len(test) == round(len(history) * 0.2) and len(train) + len(test) == len(history)
    assert max(s.submit_time for s in train) <= min(s.submit_time for s in test)
    with pytest.raises(ValueError, match="test fraction"):
        split_by_time(history, 1.0)


def test_the_model_beats_both_baselines_on_a_regular_history(fitted: tuple[RunTimeModel, Report]) -> None:
    _, report = fitted
    model, with_estimate = report.score(MODEL), report.score(MODEL_WITH_ESTIMATE)
    estimate, past = report.score(ESTIMATE), report.score(HISTORY)
    assert model.jobs == past.jobs == report.test_jobs == 180
    assert 0 < estimate.jobs == with_estimate.jobs < model.jobs
    assert model.median_abs_error_s is not None and past.median_abs_error_s is not None
    assert with_estimate.median_abs_error_s is not None and estimate.median_abs_error_s is not None
    assert model.median_abs_error_s < past.median_abs_error_s / 3
    assert with_estimate.median_abs_error_s < estimate.median_abs_error_s / 2
    assert model.exceed_share is not None and 0.03 <= model.exceed_share <= 0.2  # 1 - q = 0.1
    assert estimate.exceed_share is not None and estimate.exceed_share > 0.25  # estimates are no bound
    table = report_table(report)
    assert "user estimate" in table and "ran past q0.9 bound" in table and "180" in table


# --- the command ---------------------------------------------------------------------------------------


def test_learn_command(tmp_path: Path, capsys: pytest.CaptureFixture[str], history: list[Sample]) -> None:
    out, report = tmp_path / "model.npz", tmp_path / "out" / "report.json"
    code = main(["learn", "--trace", str(HISTORY_FILE), "--out", str(out), "--report", str(report),
                 "--seed", "3"])
    printed = capsys.readouterr().out
    assert code == 0
    assert "900 jobs" in printed and "0 left out" in printed and "user history" in printed
    figures = json.loads(report.read_text())
    assert figures["jobs"] == 900 and figures["test_jobs"] == 180 and figures["quantile"] == 0.9
    assert {s["method"] for s in figures["scores"]} == {MODEL, MODEL_WITH_ESTIMATE, ESTIMATE, HISTORY}
    model = RunTimeModel.load(out)
    assert model.info["jobs"] == 900 and model.info["format"] == "generic"  # fitted on all of it
    assert len(model.predict_many([s.features for s in history])) == len(history)


@pytest.mark.parametrize(("argv", "message"), [
    (["--quantile", "0.3"], "--quantile"),
    (["--test-fraction", "0"], "--test-fraction"),
    (["--format", "helios"], "needs the column"),
])
def test_learn_command_refuses_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                         argv: list[str], message: str) -> None:
    code = main(["learn", "--trace", str(HISTORY_FILE), "--out", str(tmp_path / "m"), *argv])
    assert code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "m").exists()


def test_learn_command_on_a_job_list_without_names_or_estimates(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """Helios' jobs have ids for names and no estimates: every stem is unknown, the estimate column empty."""
    rows = ["job_id,user,vc,gpu_num,node_num,state,submit_time,duration"]
    rng = random.Random(3)
    for i in range(60):
        user = f"u{i % 4}"
        rows.append(f"j{i:05x}q,{user},vc{i % 2},{2 ** (i % 4)},{1 + i % 2},COMPLETED,{1585670400 + 600 * i},"
                    f"{round(600 * (1 + i % 4) * rng.lognormvariate(0, 0.2))}")
    trace = tmp_path / "helios.csv"
    trace.write_text("\n".join(rows) + "\n")
    out = tmp_path / "model"
    assert main(["learn", "--trace", str(trace), "--out", str(out)]) == 0
    assert "60 jobs" in capsys.readouterr().out
    model = RunTimeModel.load(out)
    assert model.vocabulary["name_stem"] == {}
    prediction = model.predict(Features(user="u1", estimate=3600.0))  # an estimate it never saw: no matter
    assert prediction == model.predict(Features(user="u1"))


def test_learn_command_needs_enough_history(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "short.csv"
    trace.write_text(history_csv(history_rows(jobs=5)))
    assert main(["learn", "--trace", str(trace), "--out", str(tmp_path / "m")]) == 2
    assert "at least 10" in capsys.readouterr().err
    assert main(["learn", "--trace", str(tmp_path / "absent.csv"), "--out", str(tmp_path / "m")]) == 2


if __name__ == "__main__":
    HISTORY_FILE.write_text(history_csv(history_rows()))
    print(f"wrote {HISTORY_FILE}")
