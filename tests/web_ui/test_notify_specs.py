"""What the Notifications page's forms send, for every channel kind and every condition; each body
is also checked by the API's own models, so a form that sends what the core refuses fails here."""

from __future__ import annotations

import pytest
from pydantic import TypeAdapter

from core.api.notify_models import ChannelCreate, RuleCreate
from core.errors import InvalidInput
from web_ui.pages.notify_specs import CONDITIONS, channel_spec, rule_spec

FORM = {"name": "r", "events": "job.dead", "queue": "pay", "channels": "ops, mail", "window": "60", "times": "3",
        "above": "100", "minutes": "5", "for_seconds": "120", "below": "0.9", "min_jobs": "10"}  # fmt: skip


def test_an_email_channel_from_the_form_is_one_the_api_takes() -> None:
    form = {"name": "oncall", "host": "smtp.example.com", "port": "465", "security": "tls", "username": " bot ",
            "password": " p w ", "sender": "jobdeck@example.com", "to": "a@example.com, b@example.com,"}  # fmt: skip
    spec = channel_spec("email", form)
    assert spec["to"] == ["a@example.com", "b@example.com"] and spec["port"] == 465 and spec["password"] == " p w "
    assert spec["username"] == "bot"
    TypeAdapter(ChannelCreate).validate_python(spec)
    assert "username" not in channel_spec("email", {**form, "username": "", "password": ""})
    with pytest.raises(InvalidInput, match="port: a whole number, not 'smtp'"):
        channel_spec("email", {**form, "port": "smtp"})


@pytest.mark.parametrize("kind", list(CONDITIONS))
def test_every_condition_from_the_form_is_a_rule_the_api_takes(kind: str) -> None:
    spec = rule_spec({**FORM, "condition": kind}, {"ops": 1, "mail": 2})
    RuleCreate.model_validate(spec)
    assert spec["condition"]["kind"] == kind and spec["channels"] == [1, 2] and spec["filters"] == {"queue": "pay"}
    assert ("events" in spec) == (kind in ("every", "count")), "the other conditions imply their events"


def test_a_bad_number_or_channel_is_named_before_anything_is_sent() -> None:
    with pytest.raises(InvalidInput, match=r"condition.times: a whole number, not '2.5'") as bad:
        rule_spec({**FORM, "condition": "failed_times", "times": "2.5"}, {"ops": 1, "mail": 2})
    assert bad.value.field == "condition.times"
    with pytest.raises(InvalidInput, match="channels: name one or more of ops"):
        rule_spec({**FORM, "channels": "pager"}, {"ops": 1})
