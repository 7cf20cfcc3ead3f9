"""Storage from a URL, as the controller's --storage option gives it."""

from __future__ import annotations

from pathlib import Path

from clockfabric.controller.storage.base import Storage, StorageError
from clockfabric.controller.storage.sqlite import SqliteStorage
from clockfabric.errors import ClockfabricError

HELP = "use a file path, sqlite:///relative.db, sqlite:////absolute/path.db or postgresql://user@host/dbname"


def open_storage(url: str) -> Storage:
    """A plain path or sqlite:/// URL (SQLAlchemy's spelling: three slashes, then the path, so an
    absolute path makes four) -> SqliteStorage; postgresql:// or postgres:// (libpq's URL) -> PostgresStorage."""
    scheme, sep, rest = url.partition("://")
    try:
        if scheme in ("postgresql", "postgres") and sep:
            # imported here: psycopg loads only when PostgreSQL is asked for
            from clockfabric.controller.storage.postgres import PostgresStorage

            return PostgresStorage(url)
        if scheme == "sqlite" and sep:
            if not rest.startswith("/") or rest == "/":
                raise ClockfabricError(f"storage URL {url!r}: a SQLite URL is sqlite:/// then the path; {HELP}")
            return SqliteStorage(_sqlite_path(rest[1:]))
        if sep:
            raise ClockfabricError(f"unknown storage URL {url!r}: {HELP}")
        return SqliteStorage(_sqlite_path(url))
    except StorageError as e:
        raise ClockfabricError(f"cannot open the storage: {e}") from e


def _sqlite_path(path: str) -> str:
    if not path:
        raise ClockfabricError(f"empty storage path: {HELP}")
    parent = Path(path).parent
    if not parent.is_dir():
        raise ClockfabricError(f"storage {path}: directory {parent} does not exist; create it or choose another path")
    return path
