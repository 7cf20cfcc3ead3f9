"""Hosts held for an operator's approval: a host not in the fleet that pushes with a valid credential
while the controller runs with `--enroll pending` is recorded here (what it said of itself and the
LLDP neighbours it hears), neither refused nor admitted, until an operator approves it (it is
enrolled: its next push is stored) or rejects it (its pushes are refused, and it is not held again
until approved). The same SQL for SQLite and PostgreSQL; the table is bounded (MAX_HELD rows)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from clockfabric.controller.storage import rows

SCHEMA = """
CREATE TABLE IF NOT EXISTS pending_hosts (
    name TEXT PRIMARY KEY, state TEXT NOT NULL, first_seen_ns BIGINT NOT NULL, last_seen_ns BIGINT NOT NULL,
    info TEXT NOT NULL);
"""
COLS = "name, state, first_seen_ns, last_seen_ns, info"
MAX_HELD = 10_000  # hosts held (pending or rejected) at once; past it a new one is refused


@dataclass(frozen=True)
class PendingHost:
    name: str
    state: str  # "pending" | "rejected"
    first_seen_ns: int
    last_seen_ns: int
    info: dict = field(default_factory=dict)  # its address, its LLDP neighbours by device


class PendingHosts:
    """SqlStorage's held hosts (a mixin: it brings _write, _fetch and _q)."""

    if TYPE_CHECKING:
        _write: Callable[[], AbstractContextManager[Any]]
        _fetch: Callable[..., list[tuple]]
        _q: Callable[[str], str]

    def hold(self, host: str, now_ns: int, info: dict) -> str:
        """Record (or refresh) a host waiting for approval; its state then: "pending", "rejected"
        (its info is kept as it was), or "full" (a new host while MAX_HELD are held: not recorded)."""
        with self._write() as cur:
            cur.execute(self._q("SELECT state FROM pending_hosts WHERE name = ?"), (host,))
            found = cur.fetchone()
            if found is not None and found[0] == "rejected":
                cur.execute(self._q("UPDATE pending_hosts SET last_seen_ns = ? WHERE name = ?"),
                            (now_ns, host))
                return "rejected"
            if found is not None:
                cur.execute(self._q("UPDATE pending_hosts SET last_seen_ns = ?, info = ? WHERE name = ?"),
                            (now_ns, rows.dumps(info), host))
                return "pending"
            cur.execute("SELECT COUNT(*) FROM pending_hosts")
            if cur.fetchone()[0] >= MAX_HELD:
                return "full"
            cur.execute(self._q(f"INSERT INTO pending_hosts ({COLS}) VALUES (?, 'pending', ?, ?, ?) "
                                "ON CONFLICT (name) DO NOTHING"),
                        (host, now_ns, now_ns, rows.dumps(info)))
            return "pending"

    def held(self) -> list[PendingHost]:
        """Every host held, pending or rejected, by name."""
        found = self._fetch(f"SELECT {COLS} FROM pending_hosts")
        return sorted((PendingHost(str(n), str(s), int(f), int(last), rows.loads(i)) for n, s, f, last, i in found),
                      key=lambda h: h.name)

    def held_host(self, host: str) -> PendingHost | None:
        """One host held, or None."""
        found = self._fetch(f"SELECT {COLS} FROM pending_hosts WHERE name = ?", (host,))
        return next((PendingHost(str(n), str(s), int(f), int(last), rows.loads(i)) for n, s, f, last, i in found), None)

    def approve(self, host: str, now_ns: int) -> bool:
        """Enroll a held host (pending or rejected) and let go of it, in one transaction; False if it
        is not held."""
        with self._write() as cur:
            cur.execute(self._q("DELETE FROM pending_hosts WHERE name = ?"), (host,))
            if cur.rowcount == 0:
                return False
            cur.execute(self._q(f"INSERT INTO hosts ({rows.HOST_COLS}) VALUES (?, ?, NULL, ?) "
                                "ON CONFLICT (name) DO NOTHING"), (host, now_ns, "{}"))
            return True

    def reject(self, host: str) -> bool:
        """Refuse a held host's pushes from now on; False if it is not held."""
        with self._write() as cur:
            cur.execute(self._q("UPDATE pending_hosts SET state = 'rejected' WHERE name = ?"), (host,))
            return cur.rowcount > 0
