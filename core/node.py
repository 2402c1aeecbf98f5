"""One JobDeck node: store + bus + engine + the HTTP server, started and stopped together."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import gc
import logging
import signal
import socket
import ssl
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import uvicorn

from core.api import create_app
from core.api.kafka_submit import KafkaSubmissions
from core.api.ws_protocol import WebSocketProtocol
from core.bus import Bus, LocalBus
from core.bus.redis import CHANNEL, RedisBus
from core.config import Settings
from core.engine import Engine
from core.errors import InvalidInput
from core.model import Policy
from core.obs.metrics import NodeMetrics, NoMetrics
from core.obs.tracing import Tracing, tracing_for
from core.relay import Relay
from core.retention import Retention
from core.store.base import Event
from core.store.postgres import PostgresStore
from core.store.sqlite import SQLiteStore

log = logging.getLogger("jobdeck.node")


def open_store(settings: Settings, bus: Bus, metrics: NodeMetrics | None = None) -> SQLiteStore | PostgresStore:
    """The store named by the settings: the embedded SQLite file unless `database_url` names
    PostgreSQL (postgresql://user:password@host:port/database), which several nodes can share.
    With `metrics`, its commits are timed and the events it commits counted."""
    url = settings.database_url
    policy = Policy(settings.aging_seconds_per_priority, settings.lease_seconds)
    on_commit = bus.publish
    if metrics is not None and metrics.enabled:
        count, publish = metrics.committed, bus.publish

        def on_commit(events: list[Event]) -> None:
            count(events)
            publish(events)

    store = _open_store(url, policy, settings, on_commit)
    store.record_pickup = settings.pickup_history
    if metrics is not None and metrics.enabled:
        store.observe_commits(metrics.store_commit)
    return store


def _open_store(url: str, policy: Policy, settings: Settings, on_commit: Any) -> SQLiteStore | PostgresStore:
    if url.startswith(("postgresql://", "postgres://")):
        return PostgresStore(url, policy, on_commit=on_commit)
    if url and not url.startswith("sqlite:///"):
        raise InvalidInput(
            f"unsupported database URL {url.split('@')[-1]!r}: use postgresql://user@host:5432/database "
            "or sqlite:///path/to/file.db",
            field="database_url",
        )
    return SQLiteStore(settings.sqlite_path, policy, on_commit=on_commit)


def server_tls(settings: Settings) -> ssl.SSLContext:
    """The node's TLS: its certificate and key, TLS 1.2 at least (1.3 when the client has it, which
    OpenSSL picks by itself), the server's cipher order."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    try:
        ctx.load_cert_chain(settings.tls_cert_file, settings.tls_key_file)
    except (OSError, ssl.SSLError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise InvalidInput(
            f"cannot load the TLS certificate {settings.tls_cert_file} with key {settings.tls_key_file}: {reason} "
            "(both PEM files; the key must match the certificate)",
            field="tls_cert_file",
        ) from None
    return ctx


class _Server(uvicorn.Server):
    """uvicorn re-raises SIGTERM / SIGINT once it stops serving, which would kill the process
    before the node drains its agents and closes its store; we shut down ourselves instead."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        with super().capture_signals():
            try:
                yield
            finally:
                self._captured_signals.clear()


class Node:
    """Everything one `jobdeck server` / `jobdeck up` process runs."""

    def __init__(self, settings: Settings, tracing: Tracing | None = None) -> None:
        self.settings = settings
        # With Redis, events committed on any node reach the subscribers of every node.
        # The channel is named after the store, so clusters that share a Redis do not hear each other.
        channel = f"{CHANNEL}:{settings.cluster_key}"
        self.bus: LocalBus | RedisBus = RedisBus(settings.redis_url, channel) if settings.redis_url else LocalBus()
        self.tls = server_tls(settings) if settings.tls else None  # a bad certificate stops the node first
        self.metrics = NodeMetrics() if settings.metrics else NoMetrics()
        self.store = open_store(settings, self.bus, self.metrics)
        self.tracing = (
            tracing if tracing is not None else tracing_for(settings.tracing, sample_ratio=settings.trace_sample_ratio)
        )
        self.engine = Engine(self.store, self.bus, settings, metrics=self.metrics, tracing=self.tracing)
        self.retention = Retention(self.store, settings, self.metrics, pickup_behind=self.engine.pickup_behind)
        self.app = create_app(self.engine)
        self.app.state.archive = self.retention.archive
        self.relays: list[Relay] = []
        # Notifications ride on the same outbox relay as Kafka: a "notify" cursor and lease of their own.
        self.notifier = self.app.state.notifier
        self.relays.append(Relay(self.store, self.bus, self.notifier.sink, lease_seconds=settings.relay_lease_seconds))
        self.kafka_submissions: KafkaSubmissions | None = None
        if settings.kafka_bootstrap:
            from core.relay.kafka import KafkaSink

            sink = KafkaSink(settings)
            self.relays.append(Relay(self.store, self.bus, sink, lease_seconds=settings.relay_lease_seconds))
            if sink.topics.audit:  # per-family topics: the audit log too, from a cursor of its own
                from core.relay.kafka import AuditReader, KafkaAuditSink

                self.relays.append(Relay(self.store, self.bus, KafkaAuditSink(settings), reader=AuditReader(self.store),
                                         lease_seconds=settings.relay_lease_seconds))  # fmt: skip
            if settings.kafka_submit_topic:
                self.kafka_submissions = KafkaSubmissions(self.engine, settings)
        self.server: uvicorn.Server | None = None
        self._background: list[asyncio.Future[None]] = []
        self._on_stop: list[Callable[[], Awaitable[None]]] = []
        self._hurry: list[Callable[[], None]] = []

    async def start(self) -> None:
        await self.app.state.auth.start()  # reach the IdP first: a wrong issuer stops the node at once
        await self.store.open()
        if isinstance(self.bus, RedisBus):
            await self.bus.start(self.store)
        await self.engine.start()
        self.retention.start()
        if self.settings.notify_send:
            if self.settings.log_level.lower() != "debug":
                # httpx logs every request at INFO: a line per notification sent, a thousand a second
                # under load, which cost more CPU than the sends; the delivery log has each attempt.
                logging.getLogger("httpx").setLevel(logging.WARNING)
            self.notifier.start()
        for relay in self.relays:
            relay.start()
        if self.kafka_submissions is not None:
            self.kafka_submissions.start()
        if self.settings.kafka_bootstrap:
            s = self.settings
            submit = f"; jobs from {s.kafka_submit_topic}" if s.kafka_submit_topic else ""
            log.info("Kafka at %s: events to %s%s%s", s.kafka_bootstrap, s.kafka_topic,
                     " (a topic per family)" if s.kafka_topics == "per-family" else "", submit)  # fmt: skip
        # A node allocates many short-lived objects per job; with the default thresholds the
        # cyclic GC walked the whole heap so often that it cost more than the SQLite inserts
        # of a 10,000-job batch (measured: 135 ms of 190 ms). Collect less often, and leave
        # the objects alive at start-up out of every collection.
        gc.set_threshold(50_000, 20, 100)
        gc.freeze()

    def spawn(self, coro: Awaitable[None], name: str) -> None:
        """Run a companion (a local agent) for the node's life."""
        self._background.append(asyncio.ensure_future(coro))

    def on_stop(self, hook: Callable[[], Awaitable[None]], hurry: Callable[[], None] | None = None) -> None:
        """Run `hook` first when the node stops, while the store is still open (agents drain here).
        `hurry`, if given, is called on a second SIGINT / SIGTERM during the stop."""
        self._on_stop.append(hook)
        if hurry is not None:
            self._hurry.append(hurry)

    def _bind(self) -> socket.socket:
        host, port = self.settings.host, self.settings.port
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            sock.close()
            hint = " (is another JobDeck running? choose another --port)" if exc.errno == errno.EADDRINUSE else ""
            raise OSError(f"cannot listen on {host}:{port}: {exc.strerror}{hint}") from None
        sock.listen(2048)
        sock.setblocking(False)
        return sock

    async def serve(self, on_ready: Callable[[str], None] | None = None) -> None:
        """Serve the API until SIGINT / SIGTERM, then shut down in order (agents drain, the store closes)."""
        try:
            sock = self._bind()
        except OSError:
            await self.stop()
            raise
        self.settings.port = sock.getsockname()[1]
        tls = self.tls
        config = uvicorn.Config(
            self.app,
            log_level="warning",
            # uvicorn's access log is off: at "warning" it never printed a line, yet every answer still
            # formatted its client and path for it. The node logs its requests itself (core/api/observe.py).
            access_log=False,
            lifespan="off",
            ws=WebSocketProtocol,  # uvicorn's websockets-sansio, answering every handshake it refuses
            ws_max_size=2**24,
            timeout_graceful_shutdown=5,
            # uvicorn believes X-Forwarded-For from 127.0.0.1 by default; only trusted_proxies may say who
            # the client is (core/api/proxy.py), so a local process cannot pick the IP it is audited under.
            proxy_headers=False,
            ssl_context_factory=None if tls is None else (lambda _config, _default: tls),
        )
        self.server = _Server(config)
        waiter = asyncio.ensure_future(self._announce(on_ready, self.settings.api_url))
        try:
            await self.server.serve(sockets=[sock])
        finally:
            waiter.cancel()
            await self.stop()

    async def _announce(self, on_ready: Callable[[str], None] | None, url: str) -> None:
        assert self.server is not None
        while not self.server.started:
            await asyncio.sleep(0.01)
        if on_ready is not None:
            on_ready(url)

    async def stop(self) -> None:
        """Drain local agents (a second signal hurries them), let companions finish, close the store."""
        loop = asyncio.get_running_loop()
        watched = []
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(ValueError, RuntimeError, NotImplementedError):  # not the main thread
                loop.add_signal_handler(sig, self._hurry_all)
                watched.append(sig)
        try:
            for hook in self._on_stop:
                try:
                    await hook()
                except Exception:
                    log.exception("a shutdown step failed")
            self._on_stop = []
            # Companions (the local agent's session) end once their channel closes: let them
            # record the last results before the store closes.
            if self._background:
                await asyncio.wait(self._background, timeout=5)
            for t in self._background:
                t.cancel()
            for t in self._background:
                with contextlib.suppress(BaseException):
                    await t
            if self.kafka_submissions is not None:
                await self.kafka_submissions.stop()
            for relay in self.relays:
                await relay.stop()
            await self.retention.stop()
            await self.notifier.stop()
            await self.engine.stop()
            await self.app.state.rate_limits.close()
            if isinstance(self.bus, RedisBus):
                await self.bus.close()
            await self.store.close()
            self.tracing.shutdown()
        finally:
            for sig in watched:
                loop.remove_signal_handler(sig)

    def _hurry_all(self) -> None:
        log.warning("interrupted again: stopping running jobs now")
        for hurry in self._hurry:
            hurry()
