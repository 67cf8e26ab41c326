"""The node agent loop: read the GPUs, patch the node's report when it moved or is due a heartbeat.

Writing only on a real change (or once per heartbeat) keeps thousands of nodes
from flooding the API server every few seconds; the heartbeat still lets the
scheduler tell a live report from the stale one of a dead agent.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any

from ai_scheduler.agent.nvml_reader import (
    GPUS_ANNOTATION,
    UPDATED_ANNOTATION,
    NvmlModule,
    encode_report,
    read_gpus,
)
from ai_scheduler.api.kube import ApiResult, KubeClient
from ai_scheduler.log import JsonLogger, rfc3339

# Fields compared exactly: any difference is a change worth reporting at once.
_EXACT_FIELDS = ("uuid", "model", "memoryTotalMiB", "error", "nvlinkPeers", "pcie")
MEMORY_MOVE_FRACTION = 0.05
MEMORY_MOVE_MIN_MIB = 1024
UTILIZATION_MOVE_PCT = 20


def report_change(previous: list[dict[str, Any]] | None, current: list[dict[str, Any]]) -> str:
    """Why `current` must be written although `previous` is on the node ("" if it need not be).

    Used memory and utilization move all the time; only a move past the
    threshold counts, measured from the last report written, so slow drift
    adds up and is reported once it gets large.
    """
    if previous is None:
        return "first report"
    if [gpu["index"] for gpu in previous] != [gpu["index"] for gpu in current]:
        return "device set changed"
    for old, new in zip(previous, current, strict=True):
        device = f"GPU {new['index']}"
        for key in _EXACT_FIELDS:
            if old.get(key) != new.get(key):
                return f"{device}: {key} changed"
        if "error" in new:
            continue
        moved = abs(new["memoryUsedMiB"] - old["memoryUsedMiB"])
        if moved > max(new["memoryTotalMiB"] * MEMORY_MOVE_FRACTION, MEMORY_MOVE_MIN_MIB):
            return f"{device}: memory used moved by {moved} MiB"
        before, after = old.get("utilizationPct"), new.get("utilizationPct")
        if (before is None) != (after is None):
            return f"{device}: utilization became {'unreadable' if after is None else 'readable'}"
        if before is not None and after is not None and abs(after - before) > UTILIZATION_MOVE_PCT:
            return f"{device}: utilization moved by {abs(after - before)} points"
    return ""


class NodeAgent:
    """Reports one node's GPUs into its annotations; drive `tick()` in tests, `run()` in the DaemonSet."""

    def __init__(
        self,
        client: KubeClient,
        node_name: str,
        *,
        nvml: NvmlModule | None = None,
        clock: Callable[[], float] = time.time,
        interval: float = 10.0,
        heartbeat: float = 60.0,
        init_retry: float = 300.0,
        logger: JsonLogger | None = None,
        threaded: bool = True,
    ) -> None:
        """`nvml`: the pynvml module by default. `init_retry`: seconds between nvmlInit attempts without a
        driver. `threaded`: read NVML in a worker thread, so a slow driver call does not stall the loop
        (the simulated cluster, with a fake per node, turns it off)."""
        if nvml is None:
            import pynvml

            nvml = pynvml
        self.client = client
        self.node_name = node_name
        self.nvml = nvml
        self.clock = clock
        self.interval = interval
        self.heartbeat = heartbeat
        self.init_retry = init_retry
        self.logger = logger or JsonLogger()
        self.threaded = threaded
        self.written: list[dict[str, Any]] | None = None  # the report on the node, as last written
        self.written_at: float | None = None
        self._initialized = False
        self._next_init = float("-inf")
        self._unavailable_logged = False
        self._device_errors: dict[int, str] = {}
        self._stop = asyncio.Event()

    # ------------------------------------------------------------------ reading
    async def _call(self, function: Callable[[], Any]) -> Any:
        return await asyncio.to_thread(function) if self.threaded else function()

    async def _ensure_nvml(self, now: float) -> bool:
        """Initialize NVML if it is not; without a driver, say so once and retry every `init_retry`."""
        if self._initialized:
            return True
        if now < self._next_init:
            return False
        try:
            await self._call(self.nvml.nvmlInit)
        except self.nvml.NVMLError as exc:
            self._next_init = now + self.init_retry
            self._nvml_failed("nvmlInit", exc)
            return False
        self._initialized = True
        if self._unavailable_logged:
            self.logger.info("nvml.available", node=self.node_name)
            self._unavailable_logged = False
        return True

    def _nvml_failed(self, call: str, exc: Exception) -> None:
        if self._unavailable_logged:
            self.logger.debug("nvml.retry_failed", node=self.node_name, call=call, error=str(exc))
            return
        self._unavailable_logged = True
        self.logger.error(
            "nvml.unavailable", node=self.node_name, call=call, error=str(exc),
            errorType=type(exc).__name__,
            consequence=f"reporting zero GPUs; retrying NVML every {self.init_retry:g}s",
        )

    async def read(self) -> list[dict[str, Any]]:
        """The devices as the annotation lists them; [] while NVML is unavailable."""
        now = self.clock()
        if not await self._ensure_nvml(now):
            return []
        try:
            gpus: list[dict[str, Any]] = await self._call(lambda: read_gpus(self.nvml))
        except self.nvml.NVMLError as exc:  # not even the device count: the driver went away
            self._initialized = False
            self._next_init = now + self.init_retry
            with contextlib.suppress(self.nvml.NVMLError):
                await self._call(self.nvml.nvmlShutdown)
            self._nvml_failed("nvmlDeviceGetCount", exc)
            return []
        self._log_device_errors(gpus)
        return gpus

    def _log_device_errors(self, gpus: list[dict[str, Any]]) -> None:
        """One line when a device becomes unreadable or readable again, not one per tick."""
        errors = {gpu["index"]: gpu["error"] for gpu in gpus if "error" in gpu}
        for index, error in errors.items():
            if self._device_errors.get(index) != error:
                self.logger.warning("gpu.unreadable", node=self.node_name, gpu=index, error=error,
                                    consequence="reported with its error; the scheduler will not use it")
        for index in self._device_errors.keys() - errors.keys():
            self.logger.info("gpu.readable", node=self.node_name, gpu=index)
        self._device_errors = errors

    # ------------------------------------------------------------------ reporting
    async def tick(self) -> bool:
        """Read, decide, and patch if the report changed enough or a heartbeat is due; True if patched."""
        gpus = await self.read()
        now = self.clock()
        reason = report_change(self.written, gpus)
        if not reason and self.written_at is not None and now - self.written_at >= self.heartbeat:
            reason = "heartbeat"
        if not reason:
            return False
        result = await self.patch(gpus, now)
        if not result.ok:
            self.logger.warning("gpus.patch_failed", node=self.node_name, status=result.status,
                                message=result.message, reason=reason, consequence="retrying next tick")
            return False
        self.written, self.written_at = gpus, now
        level = "debug" if reason == "heartbeat" else "info"
        self.logger.log(level, "gpus.reported", node=self.node_name, reason=reason, gpus=len(gpus),
                        unreadable=sorted(self._device_errors))
        return True

    async def patch(self, gpus: list[dict[str, Any]], now: float) -> ApiResult:
        """One strategic merge patch of both annotations, so the report and its time never disagree."""
        annotations = {GPUS_ANNOTATION: encode_report(gpus), UPDATED_ANNOTATION: rfc3339(now, millis=False)}
        return await self.client.patch_node(self.node_name, {"metadata": {"annotations": annotations}})

    async def run(self) -> None:
        """Tick every `interval` seconds until `stop()`; nothing that goes wrong in a tick ends the loop."""
        self.logger.info("agent.started", node=self.node_name, interval=self.interval,
                         heartbeat=self.heartbeat)
        try:
            while not self._stop.is_set():
                try:
                    await self.tick()
                except Exception as exc:  # never crash the DaemonSet pod over one bad tick
                    self.logger.error("agent.tick_failed", node=self.node_name,
                                      error=f"{type(exc).__name__}: {exc}")
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), self.interval)
        finally:
            await self.close()
            self.logger.info("agent.stopped", node=self.node_name)

    def stop(self) -> None:
        self._stop.set()

    async def close(self) -> None:
        """Release NVML (the client belongs to the caller)."""
        if self._initialized:
            self._initialized = False
            with contextlib.suppress(self.nvml.NVMLError):
                await self._call(self.nvml.nvmlShutdown)


async def run_agent(
    node_name: str,
    *,
    kubeconfig: str | None,
    master: str | None,
    interval: float,
    heartbeat: float,
    logger: JsonLogger,
) -> None:
    """Connect, report until SIGTERM/SIGINT, and close cleanly (the `agent` sub-command)."""
    import signal

    client = await KubeClient.connect(kubeconfig, host=master, pool_size=4)
    agent = NodeAgent(client, node_name, interval=interval, heartbeat=heartbeat, logger=logger)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, agent.stop)
    try:
        await agent.run()
    finally:
        await client.close()
