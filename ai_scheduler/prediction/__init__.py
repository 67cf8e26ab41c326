"""Run-time prediction: how long a job will run, learnt from the cluster's history (issue 10, point 3).

Offline, `ai-scheduler learn` (tracesim/learn.py) reads a trace, turns each completed job into
`Features` and its run time, fits a `RunTimeModel` (scikit-learn's histogram gradient boosting with the
quantile loss: a median and an upper quantile, on the logarithm of the run time) and writes it to one
file, with a report of its error on a time-ordered held-out split against two baselines, the users' own
estimates and the mean of each user's past jobs (`evaluate`).

Online, the daemon loads the file (`RunTimeModel.load`), reads a pending pod's features
(`features_of_pod`) and asks a `RunTimePredictor` at enqueue; each completion goes back to it
(`observe`), which keeps per-user corrections (`OnlineCorrections`) between refits, and predicts from
the users' own past jobs where there is no model file at all.

Layering: this package reads pod records (cache/) and quantities; it never imports the scheduler, the
trace readers or the simulators, so the daemon and the offline command share it. The trace side
(`features_of_job`) lives in tracesim/learn.py.
"""

from ai_scheduler.cache.records import TASK_TYPE_LABEL, WORKLOAD_CLASS_LABEL
from ai_scheduler.prediction.evaluate import Report, Sample, Score, evaluate, report_table, split_by_time
from ai_scheduler.prediction.features import (
    REFERENCE_GPU_MEMORY,
    Features,
    features_of_pod,
    gpu_milli_of,
    name_stem,
)
from ai_scheduler.prediction.model import FORMAT_VERSION, ModelError, Prediction, RunTimeModel
from ai_scheduler.prediction.online import OnlineCorrections, RunTimePredictor

__all__ = [
    "FORMAT_VERSION",
    "REFERENCE_GPU_MEMORY",
    "TASK_TYPE_LABEL",
    "WORKLOAD_CLASS_LABEL",
    "Features",
    "ModelError",
    "OnlineCorrections",
    "Prediction",
    "Report",
    "RunTimeModel",
    "RunTimePredictor",
    "Sample",
    "Score",
    "evaluate",
    "features_of_pod",
    "gpu_milli_of",
    "name_stem",
    "report_table",
    "split_by_time",
]
