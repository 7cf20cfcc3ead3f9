"""Revoked host credentials. A host's credential carries an epoch (auth.credential): revoking the
host raises the epoch the controller takes from it, so its old credential is refused from then on
and a new one is made for the new epoch, while every other host's keeps working. A host never
revoked is at epoch 0. The same SQL for SQLite and PostgreSQL; a row per host ever revoked."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

SCHEMA = """
CREATE TABLE IF NOT EXISTS host_epochs (name TEXT PRIMARY KEY, epoch INTEGER NOT NULL);
"""


class HostEpochs:
    """SqlStorage's credential epochs (a mixin: it brings _write, _fetch and _q)."""

    if TYPE_CHECKING:
        _write: Callable[[], AbstractContextManager[Any]]
        _fetch: Callable[..., list[tuple]]
        _q: Callable[[str], str]

    def epochs(self) -> dict[str, int]:
        """The epoch each revoked host's credential must carry; hosts not named are at 0."""
        return {str(name): int(epoch) for name, epoch in self._fetch("SELECT name, epoch FROM host_epochs")}

    def revoke(self, host: str) -> int:
        """Refuse the host's credential from now on; the epoch its new one carries."""
        with self._write() as cur:
            cur.execute(self._q("INSERT INTO host_epochs (name, epoch) VALUES (?, 1) "
                                "ON CONFLICT (name) DO UPDATE SET epoch = host_epochs.epoch + 1"), (host,))
            cur.execute(self._q("SELECT epoch FROM host_epochs WHERE name = ?"), (host,))
            return int(cur.fetchone()[0])
