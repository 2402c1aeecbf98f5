"""The one settings object: defaults, then an optional TOML file, then `JOBDECK_*` variables."""

from __future__ import annotations

import dataclasses
import hashlib
import ipaddress
import json
import os
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from core.errors import InvalidInput

DEFAULT_PORT = 8640


@dataclass
class Settings:
    """Everything a node can be told. Field `x` is read from `JOBDECK_X` or `x` in the TOML file."""

    data_dir: Path = field(default_factory=lambda: Path("data"))
    database_url: str = ""  # empty: sqlite file in data_dir; postgresql://... for several nodes
    redis_url: str = ""  # redis://host:6379/0: the event bus between nodes (empty: this node only)
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    # Agents and leases
    local_slots: int = 32
    lease_seconds: float = 30.0
    heartbeat_seconds: float = 5.0
    kill_grace_seconds: float = 5.0
    shutdown_grace_seconds: float = 10.0  # on SIGTERM, running local jobs get this long to finish
    secrets_dir: str = ""  # the local agent's secrets: one file per secret (besides JOBDECK_SECRET_* variables)
    # Scheduling policy
    aging_seconds_per_priority: float = 60.0
    claim_batch: int = 512
    # While every agent is busy and has under half a claim free, freed slots add up this long
    # before a claim (core/engine.py _gather_free_slots); 0: claim at every freed slot
    claim_coalesce_ms: float = 2.0
    reap_interval_seconds: float = 1.0
    # Schedules (core/engine.py _fire_due_schedules): due schedules fired per transaction, and how
    # long before a fire time its schedules are planned (0: planned when due)
    schedule_fire_batch: int = 500
    schedule_prepare_seconds: float = 3.0
    # Runs of fire times this close are written ahead, claimable at their fire time with no write
    # then (core/engine.py _write_ahead); 0: every run is written when its fire time comes
    schedule_lead_seconds: float = 10.0
    # Events
    event_retention_hours: float = 24.0
    # Limits
    max_body_bytes: int = 1024 * 1024
    max_batch: int = 10_000
    output_tail_bytes: int = 64 * 1024
    log_level: str = "info"
    log_format: str = "auto"  # json | text | auto (JSON unless stderr is a terminal): docs/observability.md
    tracing: str = "off"  # off | otlp (OTEL_EXPORTER_OTLP_* say where) | console: core/obs/tracing.py
    # Share of the traces a node starts itself (a submit without a sampled caller, a schedule's firing)
    # that are recorded; OTEL_TRACES_SAMPLER, when set, decides instead (docs/observability.md)
    trace_sample_ratio: float = 1.0
    trace_url_template: str = ""  # a job's trace in your trace UI, e.g. https://jaeger.example/trace/{trace_id}
    metrics: bool = True  # /metrics and /metrics/cluster (Prometheus); false: the hooks cost nothing
    # The claims keep the pick-up latency history (held vs waiting for a slot) that the Overview and
    # GET /v1/stats/history show: one upsert per claim batch (core/store/pickup.py); false: not kept
    pickup_history: bool = True
    # Sign-in (docs/auth.md): "none" (loopback only), "token" (static tokens), "oidc" (+ static tokens)
    auth: str = "none"
    tokens: list[dict[str, Any]] = field(default_factory=list)  # [[tokens]]: name, sha256, role, teams, queues
    team_queues: dict[str, list[str]] = field(default_factory=dict)  # team -> queue patterns it owns
    oidc_issuer: str = ""
    oidc_audience: str = "jobdeck-api"
    oidc_client_id: str = ""  # the web sign-in's client (code + PKCE)
    oidc_client_secret: str = ""
    oidc_cli_client_id: str = ""  # the public client `jobdeck login` uses (device grant / loopback)
    oidc_roles_claim: str = "roles"  # dotted path into the claims, e.g. realm_access.roles
    oidc_teams_claim: str = "teams"
    oidc_algorithms: str = "RS256,ES256,PS256,EdDSA"
    oidc_scopes: str = "openid profile email offline_access"
    session_secret: str = ""  # signs session cookies; give every node the same one (empty: random per start)
    session_hours: float = 8.0
    public_url: str = ""  # how browsers reach this node (default: http://host:port)
    web_origins: list[str] = field(default_factory=list)  # where /auth/login may send people back to
    rate_limit_per_second: float = 100.0  # per principal, or per IP for callers without sign-in (0: no limit)
    rate_limit_burst: int = 200  # with redis_url the buckets are shared by every node of the cluster
    # Network: proxies whose X-Forwarded-For / X-Forwarded-Proto are believed (IPs or CIDRs; empty: none)
    trusted_proxies: list[str] = field(default_factory=list)
    tls_cert_file: str = ""  # PEM certificate (chain) and key: the node serves https:// and wss://
    tls_key_file: str = ""
    ca_file: str = ""  # PEM CA bundle clients started beside this node trust (the web dashboard of `up`)
    audit_retention_days: float = 365.0
    # Retention (core/retention.py, docs/observability.md): finished jobs older than this go to the archive
    job_retention_days: float = 30.0  # 0: keep every job
    queue_retention_days: dict[str, float] = field(default_factory=dict)  # queue -> days (0: keep its jobs)
    archive_dir: str = ""  # the cold tier: a folder of jobs-YYYY-MM-DD.jsonl.gz (default DATA_DIR/archive)
    archive_node: str = ""  # this node's name in the store's list of archive files (default: its host name)
    retention_batch: int = 500  # jobs per archive-and-purge transaction
    retention_pause_seconds: float = 0.05  # between batches: the writer serves the others
    retention_interval_seconds: float = 60.0  # between rounds
    # Kafka (docs/kafka.md): every committed event out through the outbox relay, submissions in
    kafka_bootstrap: str = ""  # host:port[,host:port...]; empty: no Kafka
    kafka_topic: str = "jobdeck.events"
    kafka_topics: str = "single"  # single: every event to kafka_topic; per-family: kafka_topic.jobs, .schedules ...
    kafka_dead_topic: str = "jobdeck.dead"  # a dead job's summary and last error ("" for none)
    kafka_submit_topic: str = ""  # e.g. jobdeck.submit: take jobs from it (bad messages go to <topic>.dlq)
    kafka_submit_group: str = "jobdeck"
    kafka_submit_idempotency: str = "offset"  # offset: one job per topic/partition/offset; key: per message key
    kafka_options: dict[str, Any] = field(default_factory=dict)  # aiokafka options: security_protocol, sasl_*...
    relay_lease_seconds: float = 5.0  # a dead relaying node's lease lapses after this; another node takes over
    notify_send: bool = True  # this node sends notifications (off: it writes them; nodes with it on send them)

    @property
    def sqlite_path(self) -> Path:
        """The embedded store's file."""
        if self.database_url.startswith("sqlite:///"):
            return Path(self.database_url.removeprefix("sqlite:///"))
        return self.data_dir / "jobdeck.db"

    @property
    def store_label(self) -> str:
        """Where the store is, fit to print: the SQLite file, or the database URL without its password."""
        if self.database_url.startswith(("postgresql://", "postgres://")):
            return masked_url(self.database_url)
        return str(self.sqlite_path)

    @property
    def tls(self) -> bool:
        """Whether the node serves TLS (https:// and wss://)."""
        return bool(self.tls_cert_file)

    @property
    def api_url(self) -> str:
        """The URL clients use to reach this node."""
        host = {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "[::1]"}.get(self.host, self.host)
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"
        return f"{'https' if self.tls else 'http'}://{host}:{self.port}"

    @property
    def cluster_key(self) -> str:
        """A short name of the cluster (a hash of its store), so clusters sharing one Redis keep apart."""
        return hashlib.sha1(self.store_label.encode()).hexdigest()[:12]

    def replace(self, **changes: Any) -> Settings:
        """A copy with some fields changed (None values are ignored)."""
        return dataclasses.replace(self, **{k: v for k, v in changes.items() if v is not None})


Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def parse_networks(entries: Iterable[str], field: str = "trusted_proxies") -> tuple[Network, ...]:
    """IPs and CIDRs ("10.0.0.0/8", "::1") as networks, or InvalidInput naming the bad one."""
    out = []
    for entry in entries:
        try:
            out.append(ipaddress.ip_network(str(entry).strip(), strict=False))
        except ValueError:
            raise InvalidInput(
                f"{field}: {entry!r} is not an IP address or CIDR network (e.g. 10.0.0.0/8 or 127.0.0.1)", field=field
            ) from None
    return tuple(out)


def masked_url(url: str) -> str:
    """A URL with its password replaced by ***, fit for messages and logs."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if parts.password is not None:
        user, _, host = netloc.rpartition("@")
        netloc = f"{user.split(':', 1)[0]}:***@{host}"
    query = "&".join("password=***" if q.startswith("password=") else q for q in parts.query.split("&") if q)
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


_BOOLS = {"1": True, "true": True, "yes": True, "on": True, "0": False, "false": False, "no": False, "off": False}


def _coerce(name: str, kind: Any, raw: Any) -> Any:
    try:
        if kind in (bool, "bool"):
            word = str(raw).strip().lower()
            if isinstance(raw, bool) or word in _BOOLS:
                return raw if isinstance(raw, bool) else _BOOLS[word]
            raise ValueError(raw)
        if kind in (int, "int"):
            return int(raw)
        if kind in (float, "float"):
            return float(raw)
        if kind in (bool, "bool"):
            if isinstance(raw, bool):
                return raw
            word = str(raw).strip().lower()
            if word in ("1", "true", "yes", "on"):
                return True
            if word in ("0", "false", "no", "off", ""):
                return False
            raise ValueError(raw)
        if kind in (Path, "Path"):
            return Path(str(raw)).expanduser()
        if kind == "list[str]" and isinstance(raw, str) and not raw.lstrip().startswith("["):
            return [part.strip() for part in raw.split(",") if part.strip()]  # "10.0.0.0/8, 127.0.0.1"
        if str(kind).startswith(("list", "dict")):  # TOML gives them as they are; the environment as JSON
            value = json.loads(raw) if isinstance(raw, str) else raw
            if not isinstance(value, list if str(kind).startswith("list") else dict):
                raise ValueError(raw)
            return value
        return str(raw)
    except (TypeError, ValueError):
        raise InvalidInput(f"setting {name}={raw!r} is not a valid {kind}", field=name) from None


def load_settings(environ: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
    """Build settings from `JOBDECK_CONFIG` (a TOML file), the environment and explicit overrides."""
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    config_file = env.get("JOBDECK_CONFIG")
    if config_file:
        try:
            values.update(tomllib.loads(Path(config_file).read_text()))
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise InvalidInput(f"cannot read config file {config_file}: {exc}", field="JOBDECK_CONFIG") from None
    for f in fields(Settings):
        key = f"JOBDECK_{f.name.upper()}"
        if key in env:
            values[f.name] = env[key]
    values.update({k: v for k, v in overrides.items() if v is not None})
    known = {f.name: f.type for f in fields(Settings)}
    unknown = set(values) - set(known)
    if unknown:
        raise InvalidInput(f"unknown setting(s): {', '.join(sorted(unknown))}", field=sorted(unknown)[0])
    settings = Settings(**{k: _coerce(k, known[k], v) for k, v in values.items()})
    if settings.lease_seconds < 2 * settings.heartbeat_seconds:
        raise InvalidInput(
            f"lease_seconds ({settings.lease_seconds}) must be at least twice heartbeat_seconds "
            f"({settings.heartbeat_seconds}), or healthy agents would lose their jobs",
            field="lease_seconds",
        )
    if settings.auth not in ("none", "token", "oidc"):
        raise InvalidInput(f"auth {settings.auth!r} is not one of none, token, oidc", field="auth")
    if settings.auth == "oidc" and not settings.oidc_issuer:
        raise InvalidInput(
            "auth is oidc but oidc_issuer is empty: set it to your IdP's issuer URL", field="oidc_issuer"
        )
    if settings.kafka_topics not in ("single", "per-family"):
        raise InvalidInput(
            f"kafka_topics {settings.kafka_topics!r} is not one of single, per-family", field="kafka_topics"
        )
    if settings.kafka_submit_idempotency not in ("offset", "key"):
        raise InvalidInput(
            f"kafka_submit_idempotency {settings.kafka_submit_idempotency!r} is not one of offset, key",
            field="kafka_submit_idempotency",
        )
    if settings.tracing not in ("off", "otlp", "console"):
        raise InvalidInput(f"tracing {settings.tracing!r} is not one of off, otlp, console", field="tracing")
    if settings.trace_url_template and "{trace_id}" not in settings.trace_url_template:
        raise InvalidInput("trace_url_template must contain {trace_id}, e.g. https://jaeger.example/trace/{trace_id}",
                           field="trace_url_template")  # fmt: skip
    if not 0.0 <= settings.trace_sample_ratio <= 1.0:
        raise InvalidInput(f"trace_sample_ratio {settings.trace_sample_ratio} is not between 0 and 1 (1: every "
                           "job, the default; 0.1: one trace in ten)", field="trace_sample_ratio")  # fmt: skip
    if settings.log_format not in ("auto", "json", "text"):
        raise InvalidInput(f"log_format {settings.log_format!r} is not one of json, text, auto", field="log_format")
    if not 1 <= settings.retention_batch <= 10_000:
        raise InvalidInput("retention_batch must be 1..10000 jobs", field="retention_batch")
    for queue, days in settings.queue_retention_days.items():
        if not isinstance(days, (int, float)) or isinstance(days, bool) or days < 0:
            raise InvalidInput(f"queue_retention_days: {queue} = {days!r} is not a number of days >= 0 "
                               "(0 keeps the queue's jobs)", field="queue_retention_days")  # fmt: skip
    if settings.relay_lease_seconds < 1:
        raise InvalidInput("relay_lease_seconds must be at least 1", field="relay_lease_seconds")
    parse_networks(settings.trusted_proxies)  # here, so a typo stops the node at its start
    if bool(settings.tls_cert_file) != bool(settings.tls_key_file):
        raise InvalidInput(
            "TLS needs both tls_cert_file and tls_key_file (--tls-cert and --tls-key): one of them is missing",
            field="tls_key_file" if settings.tls_cert_file else "tls_cert_file",
        )
    if not 0 <= settings.port <= 65535:
        raise InvalidInput(f"port {settings.port} is not a TCP port (0-65535)", field="port")
    return settings
