"""Secrets that a job's `env` names (`{"secret": "db-password"}`), resolved on the agent at run time.

The job carries only the name. The agent looks in its secrets folder first (`--secrets-dir`: one file
per secret, as Kubernetes, Docker and Vault agents mount them) and then in its own environment
(`JOBDECK_SECRET_DB_PASSWORD` for `db-password`). Variables of that form are never passed on to tasks.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

ENV_PREFIX = "JOBDECK_SECRET_"
NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,252}$")  # a file name: no '/', no leading '.'


class SecretNotFound(LookupError):
    """The job names a secret this agent does not have (or a name no secret can have)."""


def env_name(secret: str) -> str:
    """The agent's environment variable that holds `secret`: db-password -> JOBDECK_SECRET_DB_PASSWORD."""
    return ENV_PREFIX + re.sub(r"[^A-Za-z0-9]", "_", secret).upper()


#: The agent's (and, in `jobdeck up`, the node's) own credentials: a task must not be able to act as
#: the agent or reach the store behind the API's back, so these never reach a task's environment.
CREDENTIALS = frozenset({
    "JOBDECK_TOKEN", "JOBDECK_TOKENS", "JOBDECK_SESSION_SECRET", "JOBDECK_OIDC_CLIENT_SECRET",
    "JOBDECK_DATABASE_URL", "JOBDECK_REDIS_URL", "JOBDECK_KAFKA_OPTIONS",
})  # fmt: skip


def task_environ(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The agent's environment as its tasks get it: without the secrets it holds for them and without
    its own credentials (a job that needs a token names it as a secret)."""
    env = os.environ if environ is None else environ
    return {k: v for k, v in env.items() if not k.startswith(ENV_PREFIX) and k not in CREDENTIALS}


def is_reference(value: Any) -> bool:
    """True for an env value of the form {"secret": "name"}."""
    return isinstance(value, dict) and set(value) == {"secret"}


class SecretStore:
    """Where this agent finds secrets: a folder of files (optional), then its environment."""

    def __init__(self, directory: str | Path | None = None, environ: Mapping[str, str] | None = None) -> None:
        self.directory = Path(directory) if directory else None
        self._environ = os.environ if environ is None else environ

    def get(self, name: str) -> str:
        """The secret's value (a file's text without its trailing newline), or SecretNotFound."""
        if not isinstance(name, str) or not NAME.match(name):
            raise SecretNotFound(f"{name!r} is not a secret name (letters, digits, '_', '.', '-'; no '/')")
        if self.directory is not None:
            try:
                return (self.directory / name).read_text().rstrip("\r\n")
            except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
                pass
            except OSError as exc:
                raise SecretNotFound(f"secret {name!r}: cannot read {self.directory / name}: {exc.strerror}") from None
        value = self._environ.get(env_name(name))
        if value is not None:
            return value
        where = f"no file {self.directory / name} and " if self.directory is not None else ""
        hint = "" if self.directory is not None else " (an agent started with --secrets-dir DIR also reads DIR/NAME)"
        raise SecretNotFound(
            f"secret {name!r} not found on this agent: {where}no {env_name(name)} in its environment{hint}"
        )
