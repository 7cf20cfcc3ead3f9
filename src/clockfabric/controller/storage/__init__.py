"""Where the controller keeps the fleet: one interface, SQLite by default, PostgreSQL at scale."""

from clockfabric.controller.storage.base import (
    Alert,
    Event,
    Host,
    Storage,
    StorageError,
)
from clockfabric.controller.storage.open import open_storage

__all__ = ["Alert", "Event", "Host", "Storage", "StorageError", "open_storage"]
