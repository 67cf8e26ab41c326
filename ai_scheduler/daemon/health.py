"""HTTP endpoints and what they mean: /healthz and /livez, /readyz, /metrics (Prometheus).

- /readyz answers 200 once the informers' first full sync is done and for as long
  as the API server can be reached; it answers 503 with the reason before that,
  during an outage (a request went unanswered and a probe confirmed it), and while
  an informer's list keeps failing.
- /healthz (and /livez) answers 200 unless the scheduling loop has stopped, or the
  API server has been unreachable (or a required informer's list has failed) for
  `scheduling.apiUnreachableRestartSeconds` (default 120 s): then 503, so that the
  kubelet's liveness probe restarts a scheduler that is stuck. With the shipped
  probe (every 10 s, 3 failures) that is about 150 s into an outage; a shorter one
  heals without a restart, as the scheduler resumes by itself.

`ApiMonitor` keeps the outage state. It looks at the client's record of answered
and unanswered requests; when no request has been answered for a while (5 s, or
`apiRequestTimeoutSeconds` if shorter), or one went unanswered, it sends a probe
(a list of one node). A probe that gets no answer starts an outage; during one, a
probe is sent every second (each may wait for its own timeout, so they overlap)
and the first answer to any request ends it. At that moment what is still in
flight was sent over connections that may be dead (half-open: no FIN, no RST), so
the monitor has the client give it a second more at most and end open watches
(`KubeClient.abandon_requests`): the informers and the binder retry at once on
fresh connections, and scheduling resumes within a second or two of the API
server answering again.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Iterable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from ai_scheduler.api.kube import UNREACHABLE, KubeClient
from ai_scheduler.config import SettingsView
from ai_scheduler.daemon.informer import Informer
from ai_scheduler.log import JsonLogger

# A probe is sent when no request has been answered for this long (or apiRequestTimeoutSeconds if shorter).
PROBE_QUIET_SECONDS = 5.0
# During an outage, one probe is started this often, whether or not the previous ones have timed out.
PROBE_OUTAGE_SECONDS = 1.0
MAX_PROBES_IN_FLIGHT = 16
TICK_SECONDS = 0.25


class ApiMonitor:
    """Whether the API server can be reached, for /readyz and /healthz, and the recovery after an outage."""

    def __init__(
        self,
        client: KubeClient,
        logger: JsonLogger,
        informers: Callable[[], Iterable[Informer[object]]],
        *,
        settings: SettingsView,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.log = logger
        self.informers = informers
        self.settings = settings  # scheduling.apiUnreachableRestartSeconds, read when an outage lasts
        self._clock = clock
        self.outage_since: float | None = None  # a probe went unanswered: an outage, since the first failure
        self._last_probe = -math.inf
        self._probes: set[asyncio.Task[None]] = set()
        self._restart_logged = False

    async def run(self) -> None:
        try:
            while True:
                await asyncio.sleep(TICK_SECONDS)
                try:
                    self.check()
                except Exception as exc:  # health must never stop being reported
                    self.log.error("api.monitor_failed", error=f"{type(exc).__name__}: {exc}")
        finally:
            for task in self._probes:
                task.cancel()

    def restart_after(self) -> float:
        """Seconds of outage after which the daemon exits to be restarted (the setting in force)."""
        return self.settings.current.scheduling.api_unreachable_restart_seconds

    def check(self) -> None:
        """One look: end an outage that is over, send a probe when one is due."""
        now = self._clock()
        reach = self.client.reachability
        if self.outage_since is not None and reach.failing_since is None:
            self._recovered(now)
        if reach.failing_since is None and self.outage_since is None:
            every = min(PROBE_QUIET_SECONDS, self.client.request_timeout)
            due = now - max(reach.last_answer, self._last_probe) >= every
        elif self.outage_since is None:
            due = not self._probes  # something went unanswered: confirm, once
        else:
            due = now - self._last_probe >= PROBE_OUTAGE_SECONDS
        if due and len(self._probes) < MAX_PROBES_IN_FLIGHT:
            self._last_probe = now
            task = asyncio.create_task(self._probe(), name="api-probe")
            self._probes.add(task)
            task.add_done_callback(self._probes.discard)
        problem = self.live_problem()
        if problem and not self._restart_logged:
            self.log.error("api.unreachable_too_long", error=problem, detail="/healthz fails: restart wanted")
        self._restart_logged = bool(problem)

    async def _probe(self) -> None:
        epoch = self.client.epoch
        result = await self.client.probe()
        if result.status not in UNREACHABLE or epoch != self.client.epoch or self.outage_since is not None:
            return
        reach = self.client.reachability
        self.outage_since = reach.failing_since if reach.failing_since is not None else self._clock()
        self.log.warning(
            "api.unreachable",
            error=result.message,
            unanswered=reach.failures,
            detail="/readyz fails until it answers",
        )

    def _recovered(self, now: float) -> None:
        assert self.outage_since is not None
        seconds = now - self.outage_since
        self.outage_since = None
        abandoned = self.client.abandon_requests()
        self.log.info(
            "api.reachable",
            outage_seconds=round(seconds, 3),
            abandoned=abandoned,
            detail="what was still in flight gets a second more, then is retried on fresh connections",
        )

    def _in_outage(self) -> bool:
        """An outage is on, and nothing has answered since (the next check() ends it)."""
        return self.outage_since is not None and self.client.reachability.failing_since is not None

    def ready_problem(self) -> str:
        """Why the scheduler is not ready ("" when it is), after the first sync."""
        now = self._clock()
        if self.outage_since is not None and self._in_outage():
            return (
                f"API server unreachable for {now - self.outage_since:.1f} s: "
                f"{self.client.reachability.last_error}"
            )
        for informer in self.informers():
            if informer.failing_since is not None:
                return (
                    f"{informer.resource} informer cannot list for {now - informer.failing_since:.1f} s: "
                    f"{informer.last_error}"
                )
        return ""

    def live_problem(self) -> str:
        """Why the scheduler wants a restart ("" when it does not): the API server out of reach too long."""
        now = self._clock()
        limit = self.restart_after()
        starts = [(self.outage_since if self._in_outage() else None, "API server unreachable")] + [
            (informer.failing_since, f"{informer.resource} informer cannot list")
            for informer in self.informers()
            if not informer.optional
        ]
        for since, what in starts:
            if since is not None and now - since >= limit:
                return f"{what} for {now - since:.0f} s (scheduling.apiUnreachableRestartSeconds: {limit:g})"
        return ""


class HealthServer:
    """`live` and `ready` say what is wrong ("" when nothing is): 503 with that text, else 200 "ok"."""

    def __init__(
        self, *, live: Callable[[], str], ready: Callable[[], str], metrics: Callable[[], bytes]
    ) -> None:
        self._live = live
        self._ready = ready
        self._metrics = metrics
        self._runner: web.AppRunner | None = None
        self.port = 0

    async def start(self, host: str, port: int) -> int:
        app = web.Application()
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/livez", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/metrics", self._metrics_handler)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        addresses = self._runner.addresses  # the real port when 0 was asked for
        self.port = addresses[0][1] if addresses else port
        return self.port

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _healthz(self, _request: web.Request) -> web.Response:
        return _answer(self._live())

    async def _readyz(self, _request: web.Request) -> web.Response:
        return _answer(self._ready())

    async def _metrics_handler(self, _request: web.Request) -> web.Response:
        response = web.Response(body=self._metrics())
        response.content_type = CONTENT_TYPE_LATEST.split(";")[0]
        return response


def _answer(problem: str) -> web.Response:
    return web.Response(status=503, text=problem) if problem else web.Response(text="ok")
