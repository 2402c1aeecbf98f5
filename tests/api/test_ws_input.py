"""Bad input on the two WebSockets: a clear message and a clean close, never a dropped socket (1006)
or a traceback; a bad frame on the feed is answered and the feed goes on."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
import websockets
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.api.fields import ID_MAX
from tests.conftest import RunningNode, spawn_jobdeck, until

SHELL = {"kind": "shell", "command": "true"}


def ws_url(running: RunningNode, path: str) -> str:
    return running.url.replace("http", "ws") + path


@pytest.mark.parametrize(
    ("query", "field"),
    [(f"since={ID_MAX + 1}", "since"), ("since=" + "9" * 5000, "since"), ("since=-1", "since"), ("since=abc", "since"),
     ("since=%D9%A1", "since"), (f"job_ids=1,{2**64}", "job_ids"), ("job_ids=x", "job_ids"),
     ("queues=a%00b", "queues"), ("frames=batch", "frames"), ("frames=%00", "frames")],
)  # fmt: skip
async def test_a_bad_query_is_refused_with_a_reason(running: RunningNode, query: str, field: str) -> None:
    async with asyncio.timeout(10), websockets.connect(ws_url(running, f"/v1/events?{query}")) as ws:
        msg = orjson.loads(await ws.recv())
        assert msg["type"] == "stream.error" and msg["status"] == 422 and msg["field"] == field, msg
        with pytest.raises(websockets.ConnectionClosed) as closed:
            await ws.recv()
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008, closed.value
    assert field in closed.value.rcvd.reason, closed.value.rcvd.reason


GARBAGE: list[Any] = [b"\xff\xfe", "not json", "[1, 2]", "null", '{"filter": {"job_ids": ["a"]}}',
                      '{"filter": {"job_ids": [' + str(2**64) + "]}}", '{"filter": {"queues": "q"}}',
                      '{"filter": {"nope": 1}}', '{"hello": 1}', "[" * 2000 + "]" * 2000]  # fmt: skip


async def test_garbage_frames_are_answered_and_the_feed_goes_on(running: RunningNode) -> None:
    async with asyncio.timeout(20), websockets.connect(ws_url(running, "/v1/events")) as ws:
        assert orjson.loads(await ws.recv())["type"] == "stream.caught_up"
        for frame in GARBAGE:
            await ws.send(frame)
            msg = orjson.loads(await ws.recv())
            assert msg["type"] == "stream.error" and msg["status"] == 422, (frame[:40], msg)
            assert "expected" in msg["message"], msg
        await ws.send(orjson.dumps({"filter": {"queues": ["ws-after"]}}).decode())
        job = await running.client.submit({"task": SHELL, "queue": "ws-after"})
        event = orjson.loads(await ws.recv())
        assert event["job_id"] == job["id"] and event["type"] == "job.created", event


@pytest.fixture(scope="module")
def feed_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One `jobdeck server` for every hypothesis example (a node per example would be slow)."""
    sp = spawn_jobdeck(tmp_path_factory.mktemp("ws") / "data", "server")
    try:
        yield sp.url.replace("http", "ws") + "/v1/events"
    finally:
        sp.proc.terminate()
        sp.proc.wait(15)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=5), c, max_size=3),
    max_leaves=10,
)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    frame=st.binary(max_size=200)
    | st.text(max_size=200)
    | json_values.map(lambda v: json.dumps({"filter": v}))  # json: integers past 64 bits too
)
def test_any_frame_gets_an_answer_or_becomes_the_filter(feed_url: str, frame: Any) -> None:
    asyncio.run(_one_frame(feed_url, frame))


async def _one_frame(url: str, frame: Any) -> None:
    async with asyncio.timeout(10), websockets.connect(url) as ws:
        assert orjson.loads(await ws.recv())["type"] == "stream.caught_up"
        await ws.send(frame)
        await ws.send('{"filter": {}}')  # a good one after it: the feed must still read frames
        await ws.send("?")
        replies = [orjson.loads(await ws.recv()) for _ in range(1 if _is_filter(frame) else 2)]
        assert all(r["type"] == "stream.error" for r in replies), (frame, replies)


def _is_filter(frame: Any) -> bool:
    from core.api.ws_messages import FeedFilterMessage

    try:
        FeedFilterMessage.model_validate_json(frame)
    except ValueError:
        return False
    return True


async def _register(ws: Any, **fields: Any) -> dict[str, Any]:
    hello = {"type": "register", "protocol": 2, "name": "ws-test", "instance": "i", "slots": 1, "queues": ["wsq"]}
    await ws.send(orjson.dumps({**hello, **fields}))
    return dict(orjson.loads(await ws.recv()))


@pytest.mark.parametrize(
    "first",
    [b"not json", b"[]", b'{"no": "type"}', b'{"type": "register", "protocol": 2, "name": "x", "slots": "5"}',
     b'{"type": "register", "protocol": 2, "name": "x\\u0000", "slots": 1}',
     b'{"type": "register", "protocol": 2, "name": "x", "slots": 1, "running": [["a", 1]]}'],
)  # fmt: skip
async def test_an_agent_that_sends_garbage_is_told_and_closed(running: RunningNode, first: bytes) -> None:
    async with asyncio.timeout(10), websockets.connect(ws_url(running, "/v1/agents")) as ws:
        await ws.send(first)
        msg = orjson.loads(await ws.recv())
        assert msg["type"] == "error" and msg["message"], msg
        with pytest.raises(websockets.ConnectionClosed) as closed:
            await ws.recv()
    assert closed.value.rcvd is not None and closed.value.rcvd.code in (1000, 1007), closed.value
    assert (await running.client.health())["status"] == "ok"


@pytest.mark.parametrize(
    "later",
    [b"{]", b'{"type": "result", "results": [{"job_id": "1", "attempt": 1, "outcome": "succeeded"}]}',
     b'{"type": "heartbeat", "running": [[1]]}', b'{"type": "output", "chunks": [[1, 1]]}',
     b'{"type": "hand_back", "jobs": "all"}', b'{"type": "result"}'],
)  # fmt: skip
async def test_a_registered_agent_that_sends_garbage_is_dropped_cleanly(running: RunningNode, later: bytes) -> None:
    async with asyncio.timeout(10), websockets.connect(ws_url(running, "/v1/agents")) as ws:
        assert (await _register(ws))["type"] == "welcome"
        await ws.send(later)
        msg = orjson.loads(await ws.recv())
        assert msg["type"] == "error", msg
        with pytest.raises(websockets.ConnectionClosed) as closed:
            await ws.recv()
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1007, closed.value
    await until(lambda: "ws-test" not in running.engine.hub.sessions, what="the agent's session to end")
    assert (await running.client.health())["status"] == "ok"


@pytest.mark.parametrize(
    ("extra", "status"),
    [(b"?types=" + b"x" * 9000, b"414"), (b"?since=1", b"431")],  # a request line over 8 KiB; 200 headers
)
@pytest.mark.parametrize("path", [b"/v1/events", b"/v1/agents"])
async def test_a_handshake_too_large_to_read_is_answered_and_closed(
    running: RunningNode, path: bytes, extra: bytes, status: bytes
) -> None:
    """websockets refuses it with a 414 / 431; uvicorn never sent that answer nor closed, so the
    client waited for ever on a connection that stayed open."""
    host, port = running.url.removeprefix("http://").split(":")
    headers = b"".join(b"x-h%d: v\r\n" % i for i in range(200)) if status == b"431" else b""
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(b"GET " + path + extra + b" HTTP/1.1\r\nhost: x\r\nupgrade: websocket\r\nconnection: upgrade\r\n"
                 b"sec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\nsec-websocket-version: 13\r\n" + headers + b"\r\n")  # fmt: skip
    async with asyncio.timeout(10):
        answer = await reader.read()  # to the end: the node closes the connection
    writer.close()
    assert answer.split(b" ")[1] == status, answer[:200]
    assert (await running.client.health())["status"] == "ok"


@pytest.mark.parametrize("path", ["/v1/events", "/v1/agents"])
async def test_a_text_message_that_is_not_utf8_closes_with_1007_and_no_traceback(
    running: RunningNode, path: str, caplog: pytest.LogCaptureFixture
) -> None:
    async with asyncio.timeout(10), websockets.connect(ws_url(running, path)) as ws:
        if path == "/v1/events":
            assert orjson.loads(await ws.recv())["type"] == "stream.caught_up"
        await ws.send(b"\xff\xfe", text=True)
        with pytest.raises(websockets.ConnectionClosed) as closed:
            await ws.recv()
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1007, closed.value
    tracebacks = [r.getMessage() for r in caplog.records if r.exc_info]
    assert not tracebacks, f"expected no traceback in the node's log, got {tracebacks}"
    assert any("not UTF-8" in r.getMessage() and r.levelno == logging.WARNING for r in caplog.records), caplog.text
