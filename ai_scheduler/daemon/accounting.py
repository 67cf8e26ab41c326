"""Accounting in the daemon: each pod's use into the database, and fair share that survives restarts.

Every replica follows the pods the informer sees (`pod_event`, `pods_listed`, from watches.py beside
the replayable history) and keeps, per pod that started on a node, the row the database should hold
(accounting/store.py's `PodUsage`): its user, group and queue as the tenancy resolves them, its Task,
node and GPU model (the node label `nvidia.com/gpu.product`), what it requested (GPUs: devices, a
fraction, or a memory share as its part of an 80 GiB device, as the run-time model counts; cpu, memory),
when it started (`status.startTime`) and ended (its containers' last `finishedAt`, else when it was seen
to finish or go). Only the leader writes (`run`): every `accounting.checkpointSeconds` the rows that
changed, as upserts by uid, so a row written twice, or by a new leader again, changes nothing. A
standby keeps its rows ready: when it leads, it writes them all once.

Fair share (scheduler/priority.py) orders groups and queues by their decayed usage. The leader writes
that usage with each checkpoint, and when a replica starts to lead it reads the last one back, decayed
by the fair-share half-life over the time since it was taken, before its first scheduling cycle
(`restore`): a daemon killed and started again, or a new leader after a failover, keeps the order.

Budgets (accounting/budgets.py): with each checkpoint the leader reads each budget's use in its period
from the database, and when one is spent (or a new period restores it) the daemon applies its action
over the tenancy at once (`budget.spent`, `budget.restored` in the log).

The database is opened once, at start, on a thread (`open`); one that cannot be opened is logged
(`accounting.unavailable`, with the cause) and the scheduler runs without accounting. A write that fails
is logged and retried with the next checkpoint (the rows stay dirty).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable
from typing import Any

from ai_scheduler.accounting.budgets import BudgetState, budget_states, period_bounds
from ai_scheduler.accounting.store import AccountingError, PodUsage, Store, open_store, usage, usage_series
from ai_scheduler.cache.gpus import FRACTION_UNITS, gpu_request
from ai_scheduler.cache.records import TERMINAL_PHASES, PodRecord
from ai_scheduler.cache.tasks import TASK_LABEL
from ai_scheduler.config import AccountingSettings
from ai_scheduler.log import JsonLogger, parse_time, rfc3339
from ai_scheduler.prediction import gpu_milli_of
from ai_scheduler.scheduler.core import SchedulerCore
from ai_scheduler.scheduler.framework.plugins.gpu import DEVICE_PLUGIN_GPU

GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"


class Accounting:
    def __init__(self, settings: AccountingSettings, core: SchedulerCore, logger: JsonLogger) -> None:
        self.settings = settings
        self.core = core
        self.log = logger
        self.store: Store | None = None
        self.rows: dict[str, PodUsage] = {}  # uid -> its row, for pods that started and are not written ended
        self.dirty: set[str] = set()
        self.leading = False
        self.unavailable = False  # the database could not be opened
        self.budgets: list[BudgetState] = []  # each budget's use in its period, as of the last checkpoint
        self.budgets_changed: Callable[[], None] | None = None  # a budget was spent or restored

    async def open(self) -> None:
        if not self.settings.database:
            return
        try:
            self.store = await asyncio.to_thread(open_store, self.settings.database)
        except AccountingError as exc:
            self.unavailable = True  # nothing is followed from now on: nowhere to write it
            self.log.error("accounting.unavailable", error=str(exc),
                           detail="the scheduler runs without accounting; fair share starts from no usage")
            return
        self.log.info("accounting.opened", database=self.store.where)

    # ------------------------------------------------------------------ what the informer sees
    def pod_event(self, kind: str, obj: dict[str, Any]) -> None:
        if not self.settings.database or self.unavailable:
            return  # accounting off, or nowhere to write: nothing to follow
        spec, meta = obj.get("spec") or {}, obj.get("metadata") or {}
        uid = str(meta.get("uid") or "")
        known = self.rows.get(uid)
        if known is None and (not spec.get("nodeName") or spec.get("schedulerName") not in
                              self.core.config.scheduler_names):
            return
        status = obj.get("status") or {}
        started = parse_time(status.get("startTime"))
        if known is None and started is None:
            return  # bound, not started yet: nothing used
        ended = known.ended if known is not None else None
        if ended is None and (kind == "DELETED" or status.get("phase") in TERMINAL_PHASES):
            ended = _finished_at(status) or time.time()
        row = self._row(obj, started if started is not None else known.started if known else time.time(),
                        ended)
        if row != known:
            self.rows[uid] = row
            self.dirty.add(uid)

    def pods_listed(self, uids: set[str]) -> None:
        """A relist: the pods it no longer has ended (when seen to go, as with a missed DELETED)."""
        if not self.rows:
            return
        now = time.time()
        for uid, row in list(self.rows.items()):
            if uid not in uids and row.ended is None:
                self.rows[uid] = dataclasses.replace(row, ended=now)
                self.dirty.add(uid)

    def _row(self, obj: dict[str, Any], started: float, ended: float | None) -> PodUsage:
        pod = PodRecord.from_api(obj)
        tenant = self.core.tenancy.tenant_of(pod)
        request, _ = gpu_request(pod)
        if request is not None:  # a memory share as its part of a reference device, as the model counts it
            gpus = gpu_milli_of(request.count, request.fraction / FRACTION_UNITS, request.memory) / 1000
        else:
            gpus = float(max(pod.requests.get(DEVICE_PLUGIN_GPU, 0), 0))
        record = self.core.cache.node_record(pod.node_name) if pod.node_name else None
        return PodUsage(
            uid=pod.uid, namespace=pod.namespace, pod=pod.name, user_name=tenant.user,
            group_name=tenant.group, queue=tenant.queue, task=pod.labels.get(TASK_LABEL, ""),
            node=pod.node_name, gpus=float(gpus),
            gpu_model=record.labels.get(GPU_PRODUCT_LABEL, "") if record is not None else "",
            cpu_cores=max(pod.requests.get("cpu", 0), 0) / 1000,
            memory_bytes=float(max(pod.requests.get("memory", 0), 0)),
            started=started, ended=ended,
        )

    # ------------------------------------------------------------------ the leader
    def restore(self) -> None:
        """Fair share's usage from the last checkpoint, decayed to now (called as the replica leads)."""
        store = self.store
        if store is None:
            return
        try:
            usage, taken = store.load_fair_share()
        except AccountingError as exc:
            self.log.error("accounting.restore_failed", error=str(exc))
            return
        if taken is None:
            return
        half_life = self.core.config.policy.fair_share_half_life_seconds
        decay = 0.5 ** (max(time.time() - taken, 0.0) / half_life)
        self.core.priorities.restore_usage({key: value * decay for key, value in usage.items()})
        self.core.refresh_priorities()
        self.log.info("accounting.restored", taken_seconds_ago=round(time.time() - taken, 1),
                      usage={f"{k}/{n}": round(v * decay, 3) for (k, n), v in sorted(usage.items())})

    async def run(self) -> None:
        """The leader's checkpoints: every row to the database once, then what changed."""
        if self.store is None:
            return
        self.leading = True
        self.dirty.update(self.rows)
        await self.look_at_budgets()  # a budget spent before a restart holds from the first cycles on
        while True:
            await asyncio.sleep(self.settings.checkpoint_seconds)
            await self.checkpoint()

    async def checkpoint(self) -> None:
        store = self.store
        if store is None:
            return
        dirty, self.dirty = self.dirty, set()
        rows = [self.rows[uid] for uid in dirty if uid in self.rows]
        usage, taken = self.core.priorities.usage_snapshot(), time.time()
        try:
            written = await asyncio.to_thread(_write, store, rows, usage, taken)
        except AccountingError as exc:
            self.dirty |= dirty
            self.log.error("accounting.write_failed", error=str(exc), rows=len(rows))
            return
        for row in rows:  # ended and written: no longer followed
            if row.ended is not None and self.rows.get(row.uid) == row:
                del self.rows[row.uid]
        if written and self.log.enabled("debug"):
            self.log.debug("accounting.checkpoint", rows=written, fair_share=len(usage))
        await self.look_at_budgets()

    async def look_at_budgets(self) -> None:
        """Each budget's use in its period, from the database; tell the daemon when one was spent or
        restored (a new period), which applies the budgets' actions at once."""
        store, budgets = self.store, self.settings.budgets
        if store is None or not budgets:
            if self.budgets:
                self.budgets = []
                if self.budgets_changed is not None:
                    self.budgets_changed()
            return
        now = time.time()
        since = min(period_bounds(spec.period, now)[0] for spec in budgets)
        try:
            rows = await asyncio.to_thread(store.rows, since, now)
        except AccountingError as exc:
            self.log.error("accounting.budgets_failed", error=str(exc))
            return
        states = budget_states(budgets, rows, now)
        before = {s.spec.name for s in self.budgets if s.spent}
        after = {s.spec.name for s in states if s.spent}
        self.budgets = states
        for state in states:
            if (state.spec.name in after) != (state.spec.name in before):
                self.log.info("budget.spent" if state.spent else "budget.restored", budget=state.spec.name,
                              subject=state.subject, used_gpu_hours=round(state.used_hours, 3),
                              gpu_hours=state.spec.gpu_hours, action=state.spec.action,
                              period_ends=rfc3339(state.end, millis=False))
        if before != after and self.budgets_changed is not None:
            self.budgets_changed()

    async def close(self) -> None:
        """The last checkpoint (the leader's), then the connection."""
        if self.store is None:
            return
        if self.leading:
            await self.checkpoint()
        await asyncio.to_thread(self.store.close)
        self.store = None


async def report(
    store: Store | None, since: float, until: float, by: str, step: float
) -> dict[str, Any] | None:
    """The visibility API's `usage` body: totals by `by` over [since, until) and GPU-hours per interval of
    `step` seconds; None without a database."""
    if store is None:
        return None
    rows = await asyncio.to_thread(store.rows, since, until)
    totals = usage(rows, since, until, by)
    series = usage_series(rows, since, until, step, by)
    return {
        "since": rfc3339(since, millis=False), "until": rfc3339(until, millis=False), "by": by,
        "stepSeconds": step,
        "items": [{"key": u.key, "gpuHours": round(u.gpu_hours, 6), "cpuHours": round(u.cpu_hours, 6),
                   "memoryGiBHours": round(u.memory_gib_hours, 6), "pods": u.pods,
                   "series": [round(v, 6) for v in series.get(u.key, [])]} for u in totals],
    }


def _write(store: Store, rows: list[PodUsage], usage: dict[tuple[str, str], float], taken: float) -> int:
    written = store.upsert(rows)
    store.save_fair_share(usage, taken)
    return written


def _finished_at(status: dict[str, Any]) -> float | None:
    ends = [parse_time(((c.get("state") or {}).get("terminated") or {}).get("finishedAt"))
            for c in status.get("containerStatuses") or ()]
    known = [end for end in ends if end is not None]
    return max(known) if known else None
