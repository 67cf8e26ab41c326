"""HTTP endpoints: /healthz (the loops run), /readyz (first full sync done), /metrics (Prometheus)."""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST


class HealthServer:
    def __init__(
        self, *, live: Callable[[], bool], ready: Callable[[], bool], metrics: Callable[[], bytes]
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
        return (
            web.Response(text="ok")
            if self._live()
            else web.Response(status=503, text="scheduling loop stopped")
        )

    async def _readyz(self, _request: web.Request) -> web.Response:
        return (
            web.Response(text="ok")
            if self._ready()
            else web.Response(status=503, text="informers not synced")
        )

    async def _metrics_handler(self, _request: web.Request) -> web.Response:
        response = web.Response(body=self._metrics())
        response.content_type = CONTENT_TYPE_LATEST.split(";")[0]
        return response
