"""Informer path: list, then watch from the list's resourceVersion; relist whenever events may be lost.

A clean end of a watch (the server's timeout) resumes from the last seen
resourceVersion. A 410 Gone, a dropped connection or an unparsable line means
events may be missing, so the informer lists again and hands the full set to
`on_replace`, which reconciles the cache with what changed.

A list is read in pages and each page goes through `convert` (the cache's record
constructor) before the next is read: the set handed to `on_replace` is records,
and the parsed JSON of a large cluster is never held all at once.

A watch that brings neither an event nor a bookmark for `watch_idle` seconds
(config `scheduling.watchIdleSeconds`) is taken for dead, as a half-open
connection never ends by itself, and the informer lists again (reason `idle`).
While lists fail, `failing_since` and `last_error` say so (for /readyz and
/healthz), and the informer retries with a backoff of at most
`RELIST_BACKOFF_MAX_SECONDS`, cut short when the API server answers again after
an outage (`KubeClient.retry_pause`).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from ai_scheduler.api.kube import KubeClient, ResourceMissing, WatchBroken, WatchExpired, WatchIdle
from ai_scheduler.log import JsonLogger

ABSENT_RECHECK_SECONDS = 30.0
# Above the real API server's bookmark period (one a minute on an idle watch); config: watchIdleSeconds.
DEFAULT_WATCH_IDLE_SECONDS = 90.0
# A list that keeps failing is retried at least this often, so that scheduling resumes soon after an outage.
RELIST_BACKOFF_MAX_SECONDS = 2.0

Handler = Callable[[str, dict[str, Any]], None]
T = TypeVar("T")


def _unchanged(obj: dict[str, Any]) -> dict[str, Any]:
    return obj


class Informer(Generic[T]):
    def __init__(
        self,
        client: KubeClient,
        resource: str,
        on_event: Handler,
        on_replace: Callable[[list[T]], None],
        logger: JsonLogger,
        *,
        convert: Callable[[dict[str, Any]], T] = _unchanged,  # type: ignore[assignment]
        watch_timeout: tuple[int, int] = (300, 600),
        on_relist: Callable[[str, str], None] | None = None,
        optional: bool = False,
        params: dict[str, Any] | None = None,
    ) -> None:
        """`params`: the list's and the watch's query (`{"label_selector": KEY}`: some objects only)."""
        self.client = client
        self.params = params or {}
        self.resource = resource
        self.on_event = on_event
        self.on_replace = on_replace
        self.convert = convert
        self.on_relist = on_relist
        self.optional = optional  # a resource that may not be served (a CRD): absent means empty
        self._absences = 0  # consecutive lists that found the optional resource not served
        self.log = logger
        self.watch_timeout = watch_timeout
        self.watch_idle = DEFAULT_WATCH_IDLE_SECONDS
        self.synced = asyncio.Event()
        self.resource_version = ""
        # time.monotonic() of the first failed list since the last one that succeeded
        self.failing_since: float | None = None
        self.last_error = ""

    async def run(self) -> None:
        failures = 0
        reason = "start"
        while True:
            epoch = self.client.epoch
            try:
                await self._list(reason)
                failures = 0
                await self._watch_until_broken()
            except (WatchExpired, WatchBroken) as exc:
                if self.optional and isinstance(exc, ResourceMissing):
                    self.failing_since = None
                    await self._absent(str(exc))
                    reason = "appeared"
                    continue
                reason = (
                    "expired"
                    if isinstance(exc, WatchExpired)
                    else "idle" if isinstance(exc, WatchIdle) else "broken"
                )
                self.log.warning(
                    "informer.relist",
                    resource=self.resource,
                    reason=reason,
                    error=str(exc),
                    resource_version=self.resource_version,
                )
                failures += 1
            # A failed list also lands here; back off so that a down API server is not hammered.
            if failures > 1:
                delay = min(RELIST_BACKOFF_MAX_SECONDS, 0.2 * 2 ** (failures - 2)) * random.uniform(0.8, 1.2)
                await self.client.retry_pause(delay, epoch)

    async def _absent(self, error: str) -> None:
        """An optional resource is not served: treat it as empty and look again later: soon at first, as
        an API server answers 404 for a moment while it rebuilds a CRD's storage, then every
        ABSENT_RECHECK_SECONDS."""
        self._absences += 1
        if self.synced.is_set() and self._absences == 1:
            self.log.info("informer.resource_gone", resource=self.resource, error=error)
        if not self.synced.is_set():
            self.log.warning(
                "informer.resource_missing",
                resource=self.resource,
                error=error,
                detail=f"treated as empty; checking again every {ABSENT_RECHECK_SECONDS:.0f} s",
            )
            self.on_replace([])
            self.synced.set()
        await asyncio.sleep(min(ABSENT_RECHECK_SECONDS, 0.25 * 2 ** (self._absences - 1)))

    async def _list(self, reason: str) -> None:
        try:
            items, version = await self.client.list_as(self.resource, self.convert, **self.params)
        except WatchBroken as exc:
            if not isinstance(exc, ResourceMissing) or not self.optional:
                self.failing_since = self.failing_since or time.monotonic()
                self.last_error = str(exc)
            raise
        self.failing_since = None
        self._absences = 0
        if self.synced.is_set() and self.on_relist:
            self.on_relist(self.resource, reason)
        self.on_replace(items)
        self.resource_version = version
        self.log.info(
            "informer.listed",
            resource=self.resource,
            items=len(items),
            resource_version=version,
            reason=reason,
        )
        self.synced.set()

    async def _watch_until_broken(self) -> None:
        while True:
            timeout = random.randint(*self.watch_timeout)
            async for event in self.client.watch(
                self.resource, self.resource_version, timeout_seconds=timeout, idle_timeout=self.watch_idle,
                **self.params,
            ):
                kind: str = event.get("type") or ""
                obj = event["object"]
                version = (obj.get("metadata") or {}).get("resourceVersion")
                if kind != "BOOKMARK":
                    try:
                        self.on_event(kind, obj)
                    except Exception as exc:  # one bad object must not stop the informer
                        self.log.error(
                            "informer.handler_failed",
                            resource=self.resource,
                            type=kind,
                            object=_name_of(obj),
                            error=f"{type(exc).__name__}: {exc}",
                        )
                if version:
                    self.resource_version = version
            # Clean close after the server's timeout: resume from where we are, no relist needed.


def _name_of(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}".lstrip("/")
