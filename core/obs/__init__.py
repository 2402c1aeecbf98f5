"""Observability of a node: Prometheus metrics (metrics.py), structured logs (logs.py)."""
