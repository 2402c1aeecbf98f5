"""Standard Webhooks signatures: ours against the reference library (standardwebhooks), both ways."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest
from standardwebhooks.webhooks import Webhook

from core.errors import InvalidInput
from core.notify import signing
from core.notify.dispatcher import Breaker, retry_delay


def test_our_signature_is_the_reference_librarys_and_we_accept_what_it_signs() -> None:
    secret = signing.new_secret()
    key = signing.secret_key(secret)
    body = b'{"type":"jobdeck.test","data":{"title":"h\xc3\xa9"}}'
    now = int(time.time())
    ours = signing.headers(key, "msg_1", now, body)
    Webhook(secret).verify(body, ours)  # raises if it disagrees
    theirs = Webhook(secret).sign("msg_2", datetime.fromtimestamp(now, UTC), body.decode())
    assert signing.verify(key, "msg_2", str(now), theirs, body, now) is None
    assert signing.verify(key, "msg_2", str(now), f"v1,bm9wZQ== {theirs}", body, now) is None, "one of several"


@pytest.mark.parametrize(
    ("msg_id", "ts", "sig", "body", "why"),
    [
        ("msg", "{now}", "{good}", b"tampered", "does not match"),
        ("msg", "{old}", "{good_old}", b"{}", "away from now"),
        ("msg", "soon", "{good}", b"{}", "whole Unix seconds"),
        ("", "{now}", "{good}", b"{}", "required"),
    ],
)
def test_a_tampered_stale_or_incomplete_message_is_refused(
    msg_id: str, ts: str, sig: str, body: bytes, why: str
) -> None:
    key = signing.secret_key(signing.new_secret())
    now = int(time.time())
    fill = {"now": str(now), "old": str(now - 301), "good": signing.sign(key, "msg", now, b"{}"),
            "good_old": signing.sign(key, "msg", now - 301, b"{}")}  # fmt: skip
    reason = signing.verify(key, msg_id, ts.format(**fill), sig.format(**fill), body, now)
    assert reason is not None and why in reason, reason


def test_a_secret_must_be_whsec_and_enough_random_bytes() -> None:
    for bad in ("hunter2", "whsec_", "whsec_c2hvcnQ=", "whsec_!!!!"):
        with pytest.raises(InvalidInput, match="whsec_"):
            signing.secret_key(bad)


def test_retries_double_from_one_second_to_a_minute_with_jitter() -> None:
    lo = [retry_delay(n, lambda: 0.0) for n in range(1, 10)]
    hi = [retry_delay(n, lambda: 1.0) for n in range(1, 10)]
    assert lo == [0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 48.0, 48.0, 48.0]
    assert [round(x, 6) for x in hi[:6]] == [1.2, 2.4, 4.8, 9.6, 19.2, 38.4] and max(hi) == 60.0


def test_the_breaker_opens_after_five_failures_probes_once_and_closes_on_success() -> None:
    b = Breaker()
    counted = [b.failed(100.0) for _ in range(5)]
    assert counted == [True] * 5 and b.is_open(100.5) and not b.allows(100.5)
    assert not b.failed(100.5), "an attempt already in flight when it opened does not count toward disabling"
    assert b.allows(101.0) and not b.allows(101.0), "one probe after the cool-down"
    assert b.failed(101.1), "a failed probe counts"
    assert b.is_open(102.5) and b.allows(103.2), "then a doubled cool-down (2 s)"
    assert b.succeeded() and not b.is_open(103.3) and b.allows(103.3)
