"""Event buses: how committed events reach subscribers (local: in-process)."""

from core.bus.local import Bus, LocalBus, Subscription

__all__ = ["Bus", "LocalBus", "Subscription"]
