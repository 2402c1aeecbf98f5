"""Who is calling and what they may do: tokens, OIDC (JWKS), roles, the audit log."""
