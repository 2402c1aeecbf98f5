"""A lean webhook receiver in its own process, for the notify benchmark: `python -m bench.webhook_receiver`.

It prints its port on stdout, then serves HTTP/1.1 keep-alive on loopback:
  POST /ok/{n}   answers 200 at once and notes the lag of the delivery: its arrival time minus the
                 event's commit time (`data.event.ts`, or `data.sent` from the benchmark's baseline);
  POST /hang     never answers (a receiver that times out);
  GET /lags      the lags noted so far (ms, JSON list), and forgets them.
In its own process (asyncio + httptools, no framework) so that the receiver's own cost and the load
generator's do not land in the figure: in the benchmark's process, a Starlette receiver taking
1,000 requests a second made its own baseline's p99 3.7 s at a load of 5.
"""

from __future__ import annotations

import asyncio
import sys
import time
from datetime import datetime

import httptools
import orjson

LAGS: list[float] = []  # ms, since the last GET /lags
OK = b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 2\r\n\r\nok"


def _epoch(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


class _Conn(asyncio.Protocol):
    def __init__(self) -> None:
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.url = b""
        self.body: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            assert self.transport is not None
            self.transport.close()

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        now = time.time()
        url, body = self.url, b"".join(self.body)
        self.url, self.body = b"", []
        assert self.transport is not None
        if url.startswith(b"/ok/"):
            data = orjson.loads(body).get("data") or {}
            sent = (data.get("event") or {}).get("ts") or data.get("sent")
            if isinstance(sent, str):
                LAGS.append((now - _epoch(sent)) * 1000)
            elif isinstance(sent, float):
                LAGS.append((now - sent) * 1000)
            self.transport.write(OK)
        elif url.startswith(b"/lags"):
            out = orjson.dumps(LAGS)
            LAGS.clear()
            head = f"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {len(out)}\r\n\r\n"
            self.transport.write(head.encode() + out)
        # /hang: no answer; the sender's timeout ends it


async def main() -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(_Conn, "127.0.0.1", 0, backlog=1024)
    print(server.sockets[0].getsockname()[1], flush=True)
    await asyncio.to_thread(sys.stdin.read)  # until the benchmark closes our stdin
    server.close()


if __name__ == "__main__":
    asyncio.run(main())
