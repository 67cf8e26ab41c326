"""A loopback TCP proxy that makes real network faults between a client and its API server.

It forwards bytes untouched (TLS passes through), so the faults it makes are the
ones a real network makes, against a real server:

- `cut()`: every open connection is reset at once (watch streams dropped mid-run);
- `blackhole()`: connections stay open but no byte moves either way, and new ones are
  accepted and then starved too: a dead peer, no FIN, no RST; with `forever=True` the
  connections opened until `forward()` stay dead after it (half-open for good, as after a
  peer's crash), and only new ones carry bytes again;
- `hold_requests()`: bytes from the client are held while the server's keep flowing, so
  open watches still deliver events but every request waits (a slow path to the server:
  another client's write can land first);
- `refuse()`: new connections are closed at once (the server is gone);
- `forward()`: back to normal for new connections (and, after a blackhole or a hold, for the
  starved ones, which is what a paused network does when it comes back).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum


class Mode(enum.Enum):
    FORWARD = "forward"
    BLACKHOLE = "blackhole"
    HOLD_REQUESTS = "hold-requests"
    REFUSE = "refuse"


class FaultProxy:
    def __init__(self, upstream_host: str, upstream_port: int, scheme: str = "https") -> None:
        self.upstream = (upstream_host, upstream_port)
        self.scheme = scheme
        self.mode = Mode.FORWARD
        self.port = 0
        self._server: asyncio.Server | None = None
        self._connections: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter | None]] = set()
        # Bytes move towards the server while `_to_server` is set, towards the client while `_to_client` is.
        self._to_server = asyncio.Event()
        self._to_client = asyncio.Event()
        self._to_server.set()
        self._to_client.set()
        self._forever = False  # a blackhole(forever=True) is in force: its connections never revive
        self._dead: list[asyncio.Event] = []  # the events of connections that died for good

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        self.cut()
        for event in self._dead:  # let their pipes see the connections are gone, and end
            event.set()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    # ------------------------------------------------------------------ faults
    def cut(self) -> int:
        """Reset every open connection; returns how many there were."""
        connections = list(self._connections)
        for downstream, upstream in connections:
            for writer in (downstream, upstream):
                if writer is not None:
                    writer.transport.abort()
        self._connections.clear()
        return len(connections)

    def blackhole(self, *, forever: bool = False) -> None:
        self.mode = Mode.BLACKHOLE
        self._to_server.clear()
        self._to_client.clear()
        self._forever = forever

    def hold_requests(self) -> None:
        self.mode = Mode.HOLD_REQUESTS
        self._to_server.clear()
        self._to_client.set()

    def refuse(self) -> None:
        self.mode = Mode.REFUSE

    def forward(self) -> None:
        self.mode = Mode.FORWARD
        if self._forever:
            # Each connection holds the events it was accepted with: the dead keep theirs, cleared.
            self._dead += (self._to_server, self._to_client)
            self._to_server, self._to_client = asyncio.Event(), asyncio.Event()
            self._forever = False
        self._to_server.set()
        self._to_client.set()

    @property
    def open_connections(self) -> int:
        return len(self._connections)

    # ------------------------------------------------------------------ plumbing
    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.mode is Mode.REFUSE:
            writer.transport.abort()
            return
        entry: tuple[asyncio.StreamWriter, asyncio.StreamWriter | None] = (writer, None)
        self._connections.add(entry)
        to_server, to_client = self._to_server, self._to_client  # this connection's, for good
        try:
            await to_server.wait()
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            self._connections.discard(entry)
            writer.transport.abort()
            return
        if entry not in self._connections:  # cut while connecting
            up_writer.transport.abort()
            return
        self._connections.discard(entry)
        entry = (writer, up_writer)
        self._connections.add(entry)
        try:
            await asyncio.gather(
                self._pipe(reader, up_writer, to_server), self._pipe(up_reader, writer, to_client)
            )
        finally:
            self._connections.discard(entry)
            for w in (writer, up_writer):
                w.transport.abort()

    async def _pipe(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, flowing: asyncio.Event
    ) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError, ConnectionError):
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                await flowing.wait()
                writer.write(data)
                await writer.drain()
            if writer.can_write_eof():
                writer.write_eof()
