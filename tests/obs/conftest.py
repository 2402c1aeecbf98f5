"""PostgreSQL fixtures of the store suite, for the tests of several nodes on one store."""

from tests.store.conftest import pg_database, pg_url

__all__ = ["pg_database", "pg_url"]
