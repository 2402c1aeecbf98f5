-- Incoming hooks (POST /v1/hooks/{name}): each submits a job from its template. `secrets` holds the
-- signing secret (auth = 'hmac', Standard Webhooks) or the bearer token's SHA-256 (auth = 'bearer').
CREATE TABLE notify_hooks (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    name        TEXT NOT NULL UNIQUE,
    auth        TEXT NOT NULL,
    secrets     TEXT NOT NULL,
    template    TEXT NOT NULL,
    tolerance   REAL NOT NULL,
    enabled     INTEGER NOT NULL DEFAULT 1,
    created_at  REAL NOT NULL,
    updated_at  REAL NOT NULL
)
