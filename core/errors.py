"""The one error hierarchy of JobDeck, mapped once to HTTP statuses and CLI messages."""

from __future__ import annotations

from typing import Any


class JobDeckError(Exception):
    """Base error: a machine-readable code, a message for people, optionally the bad field."""

    status = 400
    code = "bad_request"

    def __init__(self, message: str, *, field: str | None = None, **extra: Any) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        self.extra = extra

    def to_dict(self) -> dict[str, Any]:
        """The JSON body every API error has: `{"error", "message", "field"}`."""
        body: dict[str, Any] = {"error": self.code, "message": self.message, "field": self.field}
        body.update(self.extra)
        return body


class InvalidInput(JobDeckError):
    """A field of a request is invalid (422)."""

    status = 422
    code = "invalid"


class InvalidSchedule(InvalidInput):
    """A cron expression, interval, time or time zone cannot be used."""

    code = "invalid_schedule"


class NotFound(JobDeckError):
    """No job, queue, schedule or agent with that id."""

    status = 404
    code = "not_found"


class Conflict(JobDeckError):
    """The action is not legal in the object's current state (e.g. pausing a succeeded job)."""

    status = 409
    code = "conflict"


class Unauthorized(JobDeckError):
    """No credentials, or credentials that failed a check (401); the message names the check."""

    status = 401
    code = "unauthorized"


class Forbidden(JobDeckError):
    """Signed in, but the role or teams do not allow this action (403)."""

    status = 403
    code = "forbidden"


class RateLimited(JobDeckError):
    """Too many requests from one principal (429); `retry_after` says when to try again."""

    status = 429
    code = "rate_limited"


class PayloadTooLarge(JobDeckError):
    """The request body is over the size limit."""

    status = 413
    code = "payload_too_large"


class Unavailable(JobDeckError):
    """The server cannot be reached or is shutting down."""

    status = 503
    code = "unavailable"


class TLSUntrusted(Unavailable):
    """The client could not verify the server's TLS certificate (signed by a CA it does not trust,
    or for another host name): a setting to fix, not a blip to retry."""

    code = "tls_untrusted"


_BY_CODE: dict[str, type[JobDeckError]] = {
    cls.code: cls
    for cls in (
        JobDeckError,
        InvalidInput,
        InvalidSchedule,
        NotFound,
        Conflict,
        Unauthorized,
        Forbidden,
        RateLimited,
        PayloadTooLarge,
        Unavailable,
    )
}


def error_from_dict(status: int, body: dict[str, Any]) -> JobDeckError:
    """Rebuild the error a server sent (used by the client)."""
    cls = _BY_CODE.get(str(body.get("error")), JobDeckError)
    extra = {k: v for k, v in body.items() if k not in ("error", "message", "field")}
    err = cls(str(body.get("message") or f"HTTP {status}"), field=body.get("field"), **extra)
    err.status = status
    return err
