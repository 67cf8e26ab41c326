"""The trace simulator's input: workload readers of every format, the cluster reader, and inflation.

Expected values are worked out by hand from the sample files in tests/data/ (see its README.md) and
from the formats' definitions, not read back from the code under test.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from paths import DATA

from ai_scheduler.cache.gpus import GPUS_ANNOTATION, MANAGED_LABEL, UPDATED_ANNOTATION, parse_report
from ai_scheduler.cache.records import NodeRecord
from ai_scheduler.trace import (
    GpuKind,
    JobStatus,
    NodeSpec,
    Problem,
    TraceError,
    TraceFormat,
    TraceJob,
    Workload,
    detect_format,
    inflate,
    parse_status,
    read_alibaba,
    read_cluster,
    read_generic,
    read_helios,
    read_philly,
    read_workload,
    total_gpus,
)

Mi, Gi = 2**20, 2**30


def jobs_by_name(workload: Workload) -> dict[str, TraceJob]:
    return {job.name: job for job in workload.jobs}


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


# --------------------------------------------------------------------------- generic
def test_generic_sample_reads_every_column() -> None:
    workload = read_generic(DATA / "trace_generic.csv")
    assert workload.format is TraceFormat.GENERIC
    assert workload.problems == []
    assert len(workload.jobs) == 30
    jobs = jobs_by_name(workload)
    bert = jobs["bert-0"]
    assert (bert.submit_time, bert.duration, bert.cpu, bert.memory) == (0.0, 6800.0, 8000, 64 * Gi)
    assert bert.gpus == 2
    assert (bert.gpu_models, bert.gang, bert.gang_size) == (("A100-80GB",), "bert", 4)
    assert (bert.user, bert.group, bert.namespace, bert.queue, bert.priority) == (
        "alice", "nlp-lab", "team-nlp", "research", 100)
    assert (bert.estimate, bert.task_type, bert.workload_class, bert.status, bert.row) == (
        7200.0, "training", "nlp", JobStatus.SUCCEEDED, 2)
    assert bert.gpu_kind is GpuKind.WHOLE and bert.gpu_milli() == 2000
    # A fraction of one GPU, a memory share, and a fraction of a whole device.
    assert jobs["infer-chat-1"].gpu_kind is GpuKind.FRACTION
    assert (jobs["infer-chat-1"].gpu_fraction, jobs["infer-chat-1"].submit_time) == (0.5, 12.5)
    assert jobs["infer-vision-1"].gpu_kind is GpuKind.MEMORY and jobs["infer-vision-1"].gpu_memory == 10 * Gi
    assert jobs["infer-vision-1"].gpu_milli(device_memory=80 * Gi) == 125
    assert jobs["asr-serve"].gpu_fraction == 1.0 and jobs["asr-serve"].gpu_milli() == 1000
    assert jobs["rec-infer"].gpu_milli() == 125 and jobs["rec-infer"].status is JobStatus.PENDING
    # Model lists, Kubernetes quantities, Go durations, negative priorities, unknown durations.
    assert jobs["resnet-a"].gpu_models == ("V100M32", "A100-80GB")
    assert (jobs["etl-1"].cpu, jobs["etl-1"].memory, jobs["etl-1"].estimate) == (500, 2 * Gi, 900.0)
    assert jobs["etl-3"].cpu == 1500 and jobs["etl-3"].status is JobStatus.FAILED
    assert jobs["backfill-1"].priority == -10
    assert jobs["resnet-b"].duration is None and jobs["resnet-b"].estimate is None
    assert jobs["resnet-b"].status is JobStatus.KILLED and jobs["llama-0"].status is JobStatus.TIMEOUT
    # A gang without gang_size takes the number of its rows; pods of no gang have size 0.
    assert {jobs[f"tune-{i}"].gang_size for i in range(3)} == {3}
    assert jobs["llama-1"].gang_size == 2 and jobs["etl-1"].gang == "" and jobs["etl-1"].gang_size == 0
    assert len({job.user for job in workload.jobs}) == 8
    assert {job.queue for job in workload.jobs} == {"research", "serving", "batch", "interactive"}


def test_generic_malformed_rows_are_reported_with_their_row_and_the_rest_read(tmp_path: Path) -> None:
    path = write(tmp_path, "bad.csv", "\n".join([
        "Name, Submit_Time ,cpu,gpus,gpu_fraction,gpu_memory,gang,gang_size,duration",  # any case, blanks
        "ok-1,0,1,1,,,,,10",
        "bad-cpu,1,lots,,,,,,",  # row 3
        "bad-submit,-5,1,,,,,,",  # row 4
        "bad-fraction,2,1,,1.5,,,,",  # row 5
        "two-forms,3,1,1,0.5,,,,",  # row 6
        "short-row,4,1",  # row 7
        "ok-1,5,1,,,,,,",  # row 8: a repeated name
        ",6,1,,,,,,",  # row 9: no name
        "g-1,7,1,,,,g,2,",
        "g-2,7,1,,,,g,3,",  # row 11: the gang's size differs
        "lonely,8,1,,,,,2,",  # row 12: a size without a gang
        "bad-duration,9,1,,,,,,soon",  # row 13
        "bad-memory,10,1,,,lots,,,",  # row 14
        "",
        "ok-2,11,250m,,,20Gi,,,90m",
    ]) + "\n")
    workload = read_workload(path)
    assert workload.format is TraceFormat.GENERIC
    assert [job.name for job in workload.jobs] == ["ok-1", "g-1", "ok-2"]
    assert workload.jobs[2].row == 16 and workload.jobs[2].duration == 5400.0
    assert workload.jobs[1].gang_size == 2
    rows = {problem.row: problem.message for problem in workload.problems}
    assert sorted(rows) == [3, 4, 5, 6, 7, 8, 9, 11, 12, 13, 14]
    assert "cpu must be a quantity" in rows[3] and "'lots'" in rows[3]
    assert "submit_time" in rows[4]
    assert "gpu_fraction" in rows[5]
    assert "only one of gpus, gpu_fraction and gpu_memory" in rows[6]
    assert "expected 9 fields" in rows[7]
    assert "repeats row 2" in rows[8]
    assert "name is missing" in rows[9]
    assert "gang_size 2 on an earlier row, 3 here" in rows[11]
    assert "gang_size given without a gang" in rows[12]
    assert "duration" in rows[13] and "gpu_memory" in rows[14]
    assert str(workload.problems[0]).startswith("row 3: ")


def test_generic_unknown_column_is_an_error_naming_it(tmp_path: Path) -> None:
    path = write(tmp_path, "typo.csv", "name,submit_time,gpu_fracton\na,0,0.5\n")
    with pytest.raises(TraceError, match=r"unknown column.*'gpu_fracton'.*gpu_fraction"):
        read_generic(path)


# --------------------------------------------------------------------------- Alibaba v2023
def test_alibaba_sample_decodes_whole_gpus_fractions_and_cpu_only_pods() -> None:
    workload = read_workload(DATA / "trace_alibaba_v2023.csv")
    assert workload.format is TraceFormat.ALIBABA
    assert workload.problems == []
    assert len(workload.jobs) == 40
    kinds = [job.gpu_kind for job in workload.jobs]
    assert [kinds.count(kind) for kind in (GpuKind.NONE, GpuKind.FRACTION, GpuKind.WHOLE)] == [7, 19, 14]
    jobs = jobs_by_name(workload)
    big = jobs["openb-pod-0017"]  # num_gpu 8, gpu_milli 1000: eight whole GPUs
    assert (big.gpus, big.gpu_fraction, big.cpu, big.memory) == (8, 0.0, 88000, 327680 * Mi)
    assert (big.submit_time, big.duration, big.trace_wait) == (9437497.0, 10769854.0 - 9437497.0, 0.0)
    assert (big.queue, big.priority, big.status) == ("burstable", 1, JobStatus.SUCCEEDED)
    share = jobs["openb-pod-0022"]  # num_gpu 1, gpu_milli 220: 0.22 of one GPU
    assert (share.gpus, share.gpu_fraction, share.gpu_milli()) == (0, 0.22, 220)
    assert (share.queue, share.priority, share.status) == ("be", 0, JobStatus.RUNNING)
    whole = jobs["openb-pod-0035"]  # num_gpu 1, gpu_milli 1000: one whole GPU, of either model
    assert (whole.gpus, whole.gpu_fraction, whole.gpu_models) == (1, 0.0, ("V100M16", "V100M32"))
    assert (whole.priority, whole.trace_wait, whole.duration) == (3, 5.0, 9968575.0 - 9967063.0)
    assert jobs["openb-pod-0048"].gpu_kind is GpuKind.NONE and jobs["openb-pod-0048"].gpu_milli() == 0
    assert jobs["openb-pod-0115"].gpus == 0  # gpu_milli empty with num_gpu 0
    assert jobs["openb-pod-0083"].queue == "guaranteed" and jobs["openb-pod-0083"].priority == 2
    assert jobs["openb-pod-0091"].duration is None  # no deletion time: still running at the trace's end
    pending = jobs["openb-pod-0185"]
    assert (pending.status, pending.duration, pending.trace_wait) == (JobStatus.PENDING, None, None)
    assert jobs["openb-pod-0120"].gpu_models == ("G3",) and jobs["openb-pod-0120"].gpu_milli() == 8000
    # 44 whole GPUs (6 x 1, 3 x 2, 2 x 4, 3 x 8) and 19 shares adding up to 5.8 GPUs.
    assert sum(job.gpu_milli() for job in workload.jobs) == 49800


def test_alibaba_malformed_rows_are_reported(tmp_path: Path) -> None:
    header = ("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
              "creation_time,deletion_time,scheduled_time")
    path = write(tmp_path, "openb.csv", "\n".join([
        header,
        "p-ok,4000,1024,1,500,,LS,Running,10,,",
        "p-multi-share,4000,1024,2,500,,LS,Running,11,,",  # row 3
        "p-cpu-share,4000,1024,0,300,,LS,Running,12,,",  # row 4
        "p-no-create,4000,1024,1,500,,LS,Running,,,",  # row 5
        "p-backwards,4000,1024,1,500,,LS,Succeeded,13,14,20",  # row 6
        "p-over,4000,1024,1,1200,,LS,Running,14,,",  # row 7
        "p-cpu,abc,1024,0,0,,BE,Running,15,,",  # row 8
        "p-zero-share,4000,1024,1,0,,BE,Running,16,,",  # row 9
        "p-half-gpu,4000,1024,1.5,,,BE,Running,17,,",  # row 10
        "p-odd-qos,1000,512.5,0,,nan,Mystery,Unheard,18,30,20",
    ]) + "\n")
    workload = read_alibaba(path)
    assert [job.name for job in workload.jobs] == ["p-ok", "p-odd-qos"]
    odd = workload.jobs[1]
    assert (odd.queue, odd.priority, odd.status, odd.gpu_models) == ("mystery", 0, JobStatus.UNKNOWN, ())
    assert (odd.memory, odd.duration, odd.trace_wait) == (round(512.5 * Mi), 10.0, 2.0)
    rows = {problem.row: problem.message for problem in workload.problems}
    assert sorted(rows) == [3, 4, 5, 6, 7, 8, 9, 10]
    assert "num_gpu is 2" in rows[3]
    assert "num_gpu is 0" in rows[4]
    assert "creation_time is missing" in rows[5]
    assert "deletion_time 14 is before scheduled_time 20" in rows[6]
    assert "1 to 1000" in rows[7]
    assert "cpu_milli" in rows[8] and "1 to 1000" in rows[9] and "num_gpu" in rows[10]


# --------------------------------------------------------------------------- Philly and Helios
def test_philly_sample_relative_times_groups_status_and_gangs() -> None:
    workload = read_workload(DATA / "trace_philly.csv")
    assert workload.format is TraceFormat.PHILLY
    assert workload.problems == []
    assert len(workload.jobs) == 25  # 20 jobs, the 16-, 12- and 32-GPU ones split into 2 + 2 + 4 pods
    jobs = jobs_by_name(workload)
    first = jobs["application_1506638472019_10238"]
    assert (first.submit_time, first.gpus, first.duration, first.user, first.group, first.row) == (
        0.0, 1, 3571.0, "6214e9", "b436b2", 2)
    assert jobs["application_1506638472019_10239"].submit_time == 211.0  # 04:15:31 - 04:12:00
    assert jobs["application_1506638472019_10257"].submit_time == 11880.0  # 07:30:00 - 04:12:00
    assert jobs["application_1506638472019_10240"].status is JobStatus.KILLED
    assert jobs["application_1506638472019_10243"].status is JobStatus.FAILED
    assert first.status is JobStatus.SUCCEEDED
    assert jobs["application_1506638472019_10244"].duration is None
    sixteen = [jobs[f"application_1506638472019_10242-{i}"] for i in range(2)]
    assert [(pod.gpus, pod.gang, pod.gang_size, pod.row) for pod in sixteen] == [
        (8, "application_1506638472019_10242", 2, 6)] * 2
    assert [jobs[f"application_1506638472019_10246-{i}"].gpus for i in range(2)] == [6, 6]
    assert [jobs[f"application_1506638472019_10255-{i}"].gpus for i in range(4)] == [8, 8, 8, 8]
    assert sum(job.gpus for job in workload.jobs) == 104  # the gpu_num column's sum: splitting keeps it


def test_philly_bound_on_gpus_per_pod_is_a_parameter() -> None:
    workload = read_philly(DATA / "trace_philly.csv", max_gpus_per_pod=4)
    jobs = jobs_by_name(workload)
    assert [jobs[f"application_1506638472019_10246-{i}"].gpus for i in range(3)] == [4, 4, 4]
    assert jobs["application_1506638472019_10240"].gang == ""  # 4 GPUs: one pod
    assert sum(job.gpus for job in workload.jobs) == 104  # the gpu_num column's sum: splitting keeps it


def test_helios_sample_splits_multi_node_jobs_and_maps_states() -> None:
    workload = read_workload(DATA / "trace_helios.csv")
    assert workload.format is TraceFormat.HELIOS
    assert workload.problems == []
    assert len(workload.jobs) == 27  # 20 jobs; 4, 2, 3 and 2 nodes add 7 pods
    jobs = jobs_by_name(workload)
    first = jobs["jKGf3Xk2"]
    assert (first.submit_time, first.gpus, first.cpu, first.memory) == (0.0, 8, 48000, 0)
    assert (first.duration, first.user, first.group, first.trace_wait) == (28800.0, "u0412", "vc6YE", 10.0)
    assert first.status is JobStatus.SUCCEEDED
    pods = [jobs[f"jKGf3Xk3-{i}"] for i in range(4)]
    assert {(pod.gpus, pod.cpu, pod.gang, pod.gang_size, pod.submit_time) for pod in pods} == {
        (8, 48000, "jKGf3Xk3", 4, 60.0)}
    assert jobs["jKGf3Xk7"].status is JobStatus.KILLED  # CANCELLED
    assert jobs["jKGf3Xk8-0"].status is JobStatus.TIMEOUT
    assert jobs["jKGf3XkA"].status is JobStatus.FAILED  # NODE_FAIL
    assert jobs["jKGf3Xk6"].gpus == 0 and jobs["jKGf3Xk6"].cpu == 16000
    assert jobs["jKGf3XkL"].submit_time == 1585683000.0 - 1585670400.0


def test_job_lists_take_iso_and_epoch_times_and_report_bad_rows(tmp_path: Path) -> None:
    path = write(tmp_path, "jobs.csv", "\n".join([
        "job_id,user,vc,submit_time,gpu_num,duration,status,start_time,end_time",
        "j1,u1,vcA,2020-04-01 00:10:00,2,,Pass,2020-04-01 00:12:00,2020-04-01 01:12:00",
        "j2,u2,vcB,1585699200,1,100,Killed,,",  # 2020-04-01 00:00:00 UTC, as epoch seconds
        "j3,u2,vcB,yesterday,1,100,Pass,,",  # row 4
        "j4,u2,vcB,1585699300,-1,100,Pass,,",  # row 5
        "j5,u2,vcB,1585699300,1,-3,Pass,,",  # row 6
        "j6,u3,vcC,2020-04-01T00:05:00+02:00,1,100,Pass,,",  # 2020-03-31 22:05 UTC: the earliest
    ]) + "\n")
    workload = read_philly(path)
    jobs = jobs_by_name(workload)
    assert sorted(jobs) == ["j1", "j2", "j6"]
    assert jobs["j6"].submit_time == 0.0
    assert jobs["j2"].submit_time == 115 * 60.0
    assert jobs["j1"].submit_time == 125 * 60.0
    assert (jobs["j1"].duration, jobs["j1"].trace_wait) == (3600.0, 120.0)
    rows = {problem.row: problem.message for problem in workload.problems}
    assert sorted(rows) == [4, 5, 6]
    assert "submit_time must be epoch seconds or a date and time" in rows[4]
    assert "gpu_num" in rows[5] and "duration" in rows[6]


# --------------------------------------------------------------------------- detection and file errors
@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("trace_generic.csv", TraceFormat.GENERIC),
        ("trace_alibaba_v2023.csv", TraceFormat.ALIBABA),
        ("trace_philly.csv", TraceFormat.PHILLY),
        ("trace_helios.csv", TraceFormat.HELIOS),
    ],
)
def test_format_is_detected_from_the_header_and_the_readers_agree(name: str, expected: TraceFormat) -> None:
    detected = read_workload(DATA / name)
    assert detected.format is expected
    explicit = read_workload(DATA / name, format=expected.value)
    readers = {TraceFormat.GENERIC: read_generic, TraceFormat.ALIBABA: read_alibaba,
               TraceFormat.PHILLY: read_philly, TraceFormat.HELIOS: read_helios}
    assert detected.jobs == explicit.jobs == readers[expected](DATA / name).jobs


def test_detect_format_on_headers() -> None:
    assert detect_format(["job_id", "submit_time", "gpu_num"]) is TraceFormat.PHILLY
    assert detect_format(["job_id", "submit_time", "gpu_num", "state"]) is TraceFormat.HELIOS
    assert detect_format(["name", "submit_time"]) is TraceFormat.GENERIC
    assert detect_format(["name", "num_gpu", "creation_time", "submit_time"]) is TraceFormat.ALIBABA


def test_unknown_header_names_every_format_and_its_required_columns(tmp_path: Path) -> None:
    path = write(tmp_path, "mystery.csv", "pod,when,gpus\na,0,1\n")
    with pytest.raises(TraceError) as caught:
        read_workload(path)
    message = str(caught.value)
    assert "mystery.csv" in message and "pod, when, gpus" in message
    for expected in ("alibaba (name, num_gpu, creation_time)", "helios (job_id, submit_time, gpu_num, state)",
                     "philly (job_id, submit_time, gpu_num)", "generic (name, submit_time)"):
        assert expected in message


def test_file_level_errors(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="empty file"):
        read_workload(write(tmp_path, "empty.csv", ""))
    with pytest.raises(TraceError, match="more than once"):
        read_workload(write(tmp_path, "twice.csv", "name,submit_time,Name\n"))
    with pytest.raises(TraceError, match="cannot read"):
        read_workload(tmp_path / "absent.csv")
    with pytest.raises(TraceError, match="unknown trace format 'borg'"):
        read_workload(DATA / "trace_generic.csv", format="borg")
    with pytest.raises(TraceError, match="philly trace needs the column"):
        read_workload(DATA / "trace_alibaba_v2023.csv", format=TraceFormat.PHILLY)
    # A header alone is a workload of no jobs.
    assert read_workload(write(tmp_path, "none.csv", "name,submit_time\n")).jobs == []


@pytest.mark.parametrize(
    ("word", "status"),
    [("Pass", JobStatus.SUCCEEDED), ("Killed", JobStatus.KILLED), ("Failed", JobStatus.FAILED),
     ("COMPLETED", JobStatus.SUCCEEDED), ("CANCELLED", JobStatus.KILLED), ("NODE_FAIL", JobStatus.FAILED),
     ("TIMEOUT", JobStatus.TIMEOUT), ("Pending", JobStatus.PENDING), ("Running", JobStatus.RUNNING),
     ("Succeeded", JobStatus.SUCCEEDED), ("", JobStatus.UNKNOWN), ("Zombie", JobStatus.UNKNOWN)],
)
def test_status_words(word: str, status: JobStatus) -> None:
    assert parse_status(word) is status


def test_trace_job_refuses_impossible_requests() -> None:
    with pytest.raises(ValueError, match="only one of"):
        TraceJob("a", 0.0, gpus=1, gpu_memory=Gi)
    with pytest.raises(ValueError, match="gpu_fraction"):
        TraceJob("a", 0.0, gpu_fraction=float("nan"))
    with pytest.raises(ValueError, match="device memory"):
        TraceJob("a", 0.0, gpu_memory=Gi).gpu_milli()
    assert TraceJob("a", 0.0, gpu_memory=100 * Gi).gpu_milli(device_memory=16 * Gi) == 1000


# --------------------------------------------------------------------------- cluster
def test_cluster_csv_and_yaml_read_alike_with_counts_and_labels() -> None:
    nodes = read_cluster(DATA / "cluster_small.csv")
    assert read_cluster(DATA / "cluster_small.yaml") == nodes
    assert [node.name for node in nodes] == [
        "a100-0", "a100-1", "v100-0", "v100-1", "t4-0", "t4-1", "t4-2", "t4-3", "cpu-0", "cpu-1", "cpu-2",
        "login"]
    assert total_gpus(nodes) == 40
    a100 = nodes[0]
    assert (a100.cpu, a100.memory, a100.gpus) == (128000, 2**40, 8)
    assert (a100.gpu_model, a100.gpu_memory) == ("A100-80GB", 80 * Gi)
    assert (a100.managed, a100.nvlink_island, a100.zone) == (True, 8, "zone-a")
    assert a100.labels["network.example.com/domain"] == "ib-1" and a100.labels["ai-scheduler.io/rack"] == "r1"
    t4 = nodes[4]
    assert (t4.gpus, t4.gpu_model, t4.gpu_memory) == (2, "T4", 16 * Gi)
    assert (t4.nvlink_island, t4.zone) == (0, "zone-b")
    cpu = nodes[8]
    assert (cpu.gpus, cpu.managed, cpu.zone) == (0, False, "zone-b")
    assert nodes[-1].labels == {"node-role.example.com/login": "", "topology.kubernetes.io/zone": "zone-a"}


def test_managed_gpu_node_is_a_node_the_scheduler_reads() -> None:
    v100 = read_cluster(DATA / "cluster_small.csv")[2]
    node = v100.to_node(updated=1_700_000_000)
    assert (node["apiVersion"], node["kind"], node["metadata"]["name"]) == ("v1", "Node", "v100-0")
    labels, annotations = node["metadata"]["labels"], node["metadata"]["annotations"]
    assert labels[MANAGED_LABEL] == "true" and labels["topology.kubernetes.io/zone"] == "zone-a"
    gfd = ("nvidia.com/gpu.product", "nvidia.com/gpu.count", "nvidia.com/gpu.memory")
    assert [labels[key] for key in gfd] == ["V100M32", "8", "32768"]
    assert annotations[UPDATED_ANNOTATION] == "2023-11-14T22:13:20Z"
    allocatable = node["status"]["allocatable"]
    assert allocatable == {"cpu": "96", "memory": "768Gi", "pods": "110", "ephemeral-storage": "100Gi"}
    devices, error = parse_report(annotations[GPUS_ANNOTATION])
    assert error == ""
    assert [(d.index, d.model, d.total) for d in devices] == [(i, "V100M32", 32 * Gi) for i in range(8)]
    assert devices[0].nvlink == {1, 2, 3} and devices[5].nvlink == {4, 6, 7}
    assert devices[0].pcie[3] == "PXB" and devices[0].pcie[4] == "SYS"
    record = NodeRecord.from_api(node)
    assert record.name == "v100-0" and record.labels[MANAGED_LABEL] == "true"


def test_device_plugin_gpu_node_has_gpus_in_allocatable(tmp_path: Path) -> None:
    path = write(tmp_path, "plain.csv", "NAME,cpu,memory,gpus,gpu_model,gpu_memory,managed,pods\n"
                                        "g,16,64Gi,2,T4,16Gi,false,30\n")
    [spec] = read_cluster(path)
    node = spec.to_node()
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "2"
    assert node["status"]["allocatable"]["pods"] == "30"
    assert MANAGED_LABEL not in node["metadata"]["labels"]
    assert GPUS_ANNOTATION not in node["metadata"]["annotations"]
    assert node["metadata"]["labels"]["nvidia.com/gpu.product"] == "T4"
    assert NodeSpec("c", cpu=500, memory=Gi).to_node()["status"]["allocatable"]["cpu"] == "500m"


def test_bad_cluster_files_name_each_entry_and_reason(tmp_path: Path) -> None:
    path = write(tmp_path, "bad.csv", "\n".join([
        "name,count,cpu,memory,gpus,gpu_memory,labels",
        "ok,2,8,32Gi,,,",
        "ok-1,1,8,32Gi,,,",  # row 3: ok with a count of 2 made ok-1 already
        "mem,1,8,lots,,,",  # row 4
        "lab,1,8,32Gi,,,bad key=x",  # row 5
        "gpu,1,8,32Gi,2,,",  # row 6: fine, device-plugin GPUs
        "Upper,1,8,32Gi,,,",  # row 7
        "neg,-1,8,32Gi,,,",  # row 8
        "nocpu,1,,32Gi,,,",  # row 9
    ]) + "\n")
    with pytest.raises(TraceError) as caught:
        read_cluster(path)
    message = str(caught.value)
    for expected in ("row 3: node 'ok-1' is also made by row 2", "row 4: memory must be a quantity",
                     "row 5: 'bad key' is not a valid label key", "row 7: 'Upper' is not a valid node name",
                     "row 8: count must be a whole number", "row 9: cpu is missing"):
        assert expected in message
    assert "row 6" not in message
    yaml_path = write(tmp_path, "bad.yaml", "- {name: a, cpu: 8, memory: 8Gi, gpus: 1, managed: true}\n"
                                            "- {name: b, cpu: 8, memory: 8Gi, colour: red}\n")
    with pytest.raises(TraceError, match=r"node 1: managed GPUs need gpus and gpu_memory.*node 2: unknown"):
        read_cluster(yaml_path)
    with pytest.raises(TraceError, match="expected a list of nodes"):
        read_cluster(write(tmp_path, "scalar.yaml", "just text\n"))


# --------------------------------------------------------------------------- inflate
def alibaba_jobs() -> list[TraceJob]:
    return read_alibaba(DATA / "trace_alibaba_v2023.csv").jobs


def test_inflate_reaches_the_target_and_stops_at_the_clone_that_crosses_it() -> None:
    jobs = alibaba_jobs()  # 49.8 GPUs asked
    capacity = 100
    inflated = inflate(jobs, capacity, target=1.3, seed=7)
    assert inflated[:40] == jobs
    total = sum(job.gpu_milli() for job in inflated)
    assert total >= 130_000
    assert total - inflated[-1].gpu_milli() < 130_000
    clones = inflated[40:]
    assert clones
    assert all(clone.clone_of and clone.name.startswith(f"{clone.clone_of}-inflate-") for clone in clones)
    assert len({job.name for job in inflated}) == len(inflated)
    source = jobs_by_name(read_alibaba(DATA / "trace_alibaba_v2023.csv"))[clones[0].clone_of]
    assert clones[0].gpu_milli() == source.gpu_milli() and clones[0].cpu == source.cpu


def test_inflate_is_reproducible_by_seed() -> None:
    jobs = alibaba_jobs()
    first = inflate(jobs, 100, 1.3, seed=3)
    assert inflate(jobs, 100, 1.3, seed=3) == first
    assert [job.clone_of for job in inflate(jobs, 100, 1.3, seed=4)] != [job.clone_of for job in first]


def test_inflate_counts_exact_targets_and_leaves_full_workloads_alone() -> None:
    one = [TraceJob("g", 0.0, gpus=1)]
    assert len(inflate(one, 10, target=1.3, seed=0)) == 13  # 1.3 x 10 GPUs is 13, not a hair more
    full = [TraceJob(f"g{i}", 0.0, gpus=4) for i in range(4)]
    same = inflate(full, 10, target=1.3, seed=0)
    assert same == full and same is not full


def test_inflate_clones_leave_their_gang_and_memory_shares_need_the_device_size() -> None:
    jobs = read_generic(DATA / "trace_generic.csv").jobs
    with pytest.raises(ValueError, match="device memory"):
        inflate(jobs, 40, seed=1)
    inflated = inflate(jobs, 40, seed=1, device_memory=80 * Gi)
    assert sum(job.gpu_milli(80 * Gi) for job in inflated) >= 52_000
    assert all(job.gang == "" and job.gang_size == 0 for job in inflated[len(jobs):])


def test_inflate_refuses_workloads_that_cannot_reach_the_target() -> None:
    cpu_only = [TraceJob(f"c{i}", 0.0, cpu=1000) for i in range(5)]
    with pytest.raises(ValueError, match="no job asks for a GPU"):
        inflate(cpu_only, 8, seed=0)
    with pytest.raises(ValueError, match="no job asks for a GPU"):
        inflate([], 8, seed=0)
    with pytest.raises(ValueError, match="capacity_gpus"):
        inflate(alibaba_jobs(), 0)
    with pytest.raises(ValueError, match="target"):
        inflate(alibaba_jobs(), 8, target=float("inf"))


@settings(max_examples=60, deadline=None)
@given(
    milli=st.lists(st.sampled_from([0, 0, 50, 250, 500, 1000, 2000, 8000]), min_size=1, max_size=12)
    .filter(any),
    capacity=st.integers(1, 64),
    target=st.sampled_from([0.5, 1.0, 1.3, 2.0]),
    seed=st.integers(0, 2**32 - 1),
)
def test_inflate_property_total_reaches_target_and_only_the_last_clone_crosses(
    milli: list[int], capacity: int, target: float, seed: int
) -> None:
    jobs = [TraceJob(f"j{i}", 0.0, gpus=m // 1000) if m >= 1000
            else TraceJob(f"j{i}", 0.0, gpu_fraction=m / 1000) for i, m in enumerate(milli)]
    goal = round(target * capacity * 1000)
    inflated = inflate(jobs, capacity, target, seed)
    total = sum(job.gpu_milli() for job in inflated)
    assert total >= goal
    if len(inflated) > len(jobs):
        assert total - inflated[-1].gpu_milli() < goal
    assert len({job.name for job in inflated}) == len(inflated)


def test_problem_text() -> None:
    assert str(Problem(7, "cpu is wrong")) == "row 7: cpu is wrong"
