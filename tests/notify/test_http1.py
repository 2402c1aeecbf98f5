"""The webhook sender's HTTP/1.1 client against a real TCP server that answers the ways receivers
do: kept alive with a length, chunked, ended by closing, closing an idle kept-alive connection,
never answering, answering too much, not speaking HTTP."""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import AsyncIterator, Callable

import pytest

from core.notify.http1 import MAX_ANSWER, AnswerError, Http1Client, proxied, target_of, tls_context
from tests.certs import ThrowawayCA

Answer = Callable[[bytes], bytes | None]  # the request's bytes -> what to write (None: never answer)


class RawServer:
    """Reads one request at a time (head + Content-Length body), answers with `answer`, then closes
    the connection if `close_after` says so."""

    def __init__(self, answer: Answer, close_after: bool = False) -> None:
        self.answer, self.close_after = answer, close_after
        self.requests: list[bytes] = []
        self.connections = 0
        self.port = 0

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length"))  # fmt: skip
                request = head + await reader.readexactly(length)
                self.requests.append(request)
                out = self.answer(request)
                if out is None:
                    await asyncio.sleep(3600)
                writer.write(out or b"")
                await writer.drain()
                if self.close_after or out == b"":  # b"": hang up without an answer
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@pytest.fixture
async def serve() -> AsyncIterator[Callable[..., RawServer]]:
    servers: list[asyncio.Server] = []

    async def start(answer: Answer, close_after: bool = False) -> RawServer:
        raw = RawServer(answer, close_after)
        server = await asyncio.start_server(raw._serve, "127.0.0.1", 0)
        raw.port = server.sockets[0].getsockname()[1]
        servers.append(server)
        return raw

    yield start  # type: ignore[misc]
    for s in servers:
        s.close()


def ok(body: bytes = b"thanks") -> Answer:
    return lambda _req: b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)


async def test_a_kept_alive_connection_carries_the_next_posts_and_the_request_is_what_was_asked(serve) -> None:  # type: ignore[no-untyped-def]
    raw = await serve(ok())
    http = Http1Client()
    url = f"http://127.0.0.1:{raw.port}/hook?team=ops"
    for i in range(3):
        assert await http.post(url, {"content-type": "application/json", "x-n": str(i)}, b'{"a":1}', 5) == (
            200, b"thanks")  # fmt: skip
    assert raw.connections == 1, "one connection for three posts"
    head, _, body = raw.requests[0].partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"POST /hook?team=ops HTTP/1.1" and f"Host: 127.0.0.1:{raw.port}".encode() in lines
    assert b"Content-Length: 7" in lines and b"x-n: 0" in lines and body == b'{"a":1}'
    await http.aclose()


async def test_chunked_and_close_delimited_answers_are_read_whole(serve) -> None:  # type: ignore[no-untyped-def]
    chunked = await serve(
        lambda _r: b"HTTP/1.1 202 Accepted\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
    )
    assert await Http1Client().post(f"http://127.0.0.1:{chunked.port}/", {}, b"x", 5) == (202, b"abcde")
    closing = await serve(lambda _r: b"HTTP/1.0 503 Busy\r\n\r\nlater", close_after=True)
    assert await Http1Client().post(f"http://127.0.0.1:{closing.port}/", {}, b"x", 5) == (503, b"later")


async def test_an_idle_connection_the_receiver_closed_is_replaced_without_a_failed_attempt(serve) -> None:  # type: ignore[no-untyped-def]
    raw = await serve(ok(), close_after=True)  # keep-alive answers, but the server closes each connection
    http = Http1Client()
    url = f"http://127.0.0.1:{raw.port}/"
    assert (await http.post(url, {}, b"1", 5))[0] == 200
    await asyncio.sleep(0.05)  # the close reaches us
    assert (await http.post(url, {}, b"2", 5))[0] == 200
    assert raw.connections == 2 and len(raw.requests) == 2, "each request sent once, on a new connection"


async def test_a_kept_alive_connection_that_hangs_up_without_an_answer_is_retried_once_on_a_new_one(serve) -> None:  # type: ignore[no-untyped-def]
    answers = iter([ok()(b""), b"", ok()(b"")])  # the 2nd request finds the receiver closing that connection
    raw = await serve(lambda _r: next(answers))
    http = Http1Client()
    url = f"http://127.0.0.1:{raw.port}/"
    assert (await http.post(url, {}, b"1", 5))[0] == 200
    assert await http.post(url, {}, b"2", 5) == (200, b"thanks")
    assert raw.connections == 2 and [r[-1:] for r in raw.requests] == [b"1", b"2", b"2"]


async def test_a_receiver_that_never_answers_times_out_and_a_long_answer_is_cut(serve) -> None:  # type: ignore[no-untyped-def]
    hang = await serve(lambda _r: None)
    t = time.monotonic()
    with pytest.raises(TimeoutError):
        await Http1Client().post(f"http://127.0.0.1:{hang.port}/", {}, b"x", 0.3)
    assert time.monotonic() - t < 2
    big = await serve(ok(b"z" * (MAX_ANSWER * 3)))
    status, body = await Http1Client().post(f"http://127.0.0.1:{big.port}/", {}, b"x", 5)
    assert status == 200 and len(body) == MAX_ANSWER


async def test_an_answer_that_is_not_http_or_stops_halfway_is_an_answer_error(serve) -> None:  # type: ignore[no-untyped-def]
    junk = await serve(lambda _r: b"SSH-2.0-OpenSSH_9.6\r\n", close_after=True)
    with pytest.raises(AnswerError, match="not an HTTP"):
        await Http1Client().post(f"http://127.0.0.1:{junk.port}/", {}, b"x", 5)
    half = await serve(lambda _r: b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", close_after=True)
    with pytest.raises(AnswerError, match="middle of the answer"):
        await Http1Client().post(f"http://127.0.0.1:{half.port}/", {}, b"x", 5)
    silent = await serve(lambda _r: b"", close_after=True)
    with pytest.raises(AnswerError, match="before an answer"):
        await Http1Client().post(f"http://127.0.0.1:{silent.port}/", {}, b"x", 5)
    with pytest.raises(ConnectionRefusedError):
        await Http1Client().post("http://127.0.0.1:1/", {}, b"x", 5)


def test_urls_become_origins_paths_and_host_headers() -> None:
    t = target_of("https://[::1]:8443/a/b?c=d")
    assert (t.https, t.host, t.port, t.path, t.host_header) == (True, "::1", 8443, "/a/b?c=d", "[::1]:8443")
    assert target_of("http://example.com").host_header == "example.com" and target_of("http://example.com").path == "/"


def test_a_url_an_environment_proxy_applies_to_goes_through_httpx(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "all_proxy",
                 "no_proxy"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    assert not proxied("https://hooks.example.com/x")
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.internal:3128")
    monkeypatch.setenv("NO_PROXY", "localhost,.corp.example")
    assert proxied("https://hooks.example.com/x") and not proxied("http://hooks.example.com/x")
    assert not proxied("https://ci.corp.example/x"), "NO_PROXY names it"


async def test_an_https_receiver_is_checked_against_ssl_cert_file_or_certifi(
    monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    ca = ThrowawayCA(tmp_path)
    cert, key = ca.issue("127.0.0.1")
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_tls.load_cert_chain(cert, key)
    raw = RawServer(ok(b"secure"))
    server = await asyncio.start_server(raw._serve, "127.0.0.1", 0, ssl=server_tls)
    url = f"https://127.0.0.1:{server.sockets[0].getsockname()[1]}/hook"
    try:
        monkeypatch.setenv("SSL_CERT_FILE", str(ca.cert))
        tls_context.cache_clear()
        assert await Http1Client().post(url, {}, b"x", 5) == (200, b"secure")
        monkeypatch.delenv("SSL_CERT_FILE")
        tls_context.cache_clear()
        with pytest.raises(ssl.SSLCertVerificationError):  # a private CA is not in certifi's bundle
            await Http1Client().post(url, {}, b"x", 5)
    finally:
        tls_context.cache_clear()
        server.close()
