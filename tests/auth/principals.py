"""Static tokens for the auth tests: one per role, and a node that accepts them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from core.auth.tokens import token_hash
from tests.conftest import node_settings

TOKENS = {
    "admin": ("jd_admin_token_for_tests_0000000000000000000", "admin", []),
    "operator": ("jd_operator_token_for_tests_00000000000000000", "operator", ["payments"]),
    "viewer": ("jd_viewer_token_for_tests_0000000000000000000", "viewer", ["payments"]),
    "outsider": ("jd_outsider_token_for_tests_00000000000000000", "operator", ["ml"]),
    "agent": ("jd_agent_token_for_tests_00000000000000000000", "agent", ["payments"]),
}
TEAM_QUEUES = {"payments": ["payments", "payments-*"], "ml": ["ml"]}


def auth_settings(tmp_path: Path, **overrides: Any) -> Any:
    """A node with sign-in by static tokens (the ones above)."""
    tokens = [{"name": name, "sha256": token_hash(tok), "role": role, "teams": teams}
              for name, (tok, role, teams) in TOKENS.items()]  # fmt: skip
    return node_settings(tmp_path, auth="token", tokens=tokens, team_queues=TEAM_QUEUES, **overrides)


@dataclass
class Deck:
    url: str
    node: Any

    def http(self, who: str | None) -> httpx.AsyncClient:
        headers = {"authorization": f"Bearer {TOKENS[who][0]}"} if who else {}
        return httpx.AsyncClient(base_url=self.url, headers=headers, timeout=10)
