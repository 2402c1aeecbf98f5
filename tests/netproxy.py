"""A TCP proxy for tests that need a network that loses what it was given: it relays both ways
until told to swallow (a partition: bytes either way are read, the client's counted, and
dropped, as on a link whose far end died after the kernel took the data; a client that goes
away meanwhile is not passed on, so the server still sees a live, silent connection). When
the server side closes, the client side is closed too.

    proxy = await TcpProxy.start(target_port)
    proxy.url                 # http://127.0.0.1:PORT
    proxy.swallow = True      # nothing passes from now on
    proxy.swallowed           # how many bytes of the client vanished
"""

from __future__ import annotations

import asyncio
import contextlib

from tests.throwaway import free_port


class TcpProxy:
    """127.0.0.1:port -> 127.0.0.1:target."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.port = free_port()
        self.swallow = False
        self.swallowed = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    @classmethod
    async def start(cls, target: int) -> TcpProxy:
        proxy = cls(target)
        proxy._server = await asyncio.start_server(proxy._serve, "127.0.0.1", proxy.port)
        return proxy

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target)
        except OSError:
            writer.close()
            return
        self._writers |= {writer, up_writer}
        up = asyncio.create_task(self._pipe(reader, up_writer, upstream=True))
        down = asyncio.create_task(self._pipe(up_reader, writer, upstream=False))
        done, _ = await asyncio.wait({up, down}, return_when=asyncio.FIRST_COMPLETED)
        if up in done and self.swallow:  # the client left during a partition: the server must not know
            await down
        for t in (up, down):
            t.cancel()
        for w in (writer, up_writer):
            w.close()
            self._writers.discard(w)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, upstream: bool) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while data := await reader.read(65536):
                if self.swallow:
                    self.swallowed += len(data) if upstream else 0
                    continue
                writer.write(data)
                await writer.drain()

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for w in list(self._writers):
            w.close()
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)
