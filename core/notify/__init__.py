"""Notifications: channels (signed webhooks, email), alert rules with suppression, the delivery log.

The outbox relay's "notify" sink (core/notify/service.py) turns committed events into deliveries
through the rules (core/notify/rules.py); the dispatcher (core/notify/dispatcher.py) sends them with
retries, a circuit breaker per channel and auto-disable; core/store/notifications.py keeps it all.
"""

from core.notify.service import Notifier, NotifySink

__all__ = ["Notifier", "NotifySink"]
