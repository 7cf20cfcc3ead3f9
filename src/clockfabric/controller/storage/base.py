"""The storage interface and its records. Implementations: `sqlite.SqliteStorage` (one file,
WAL; the default) and `postgres.PostgresStorage`. The controller speaks only this interface.

Times are integer nanoseconds since the epoch, in global (synced) time where the agent had a
mapping, else its own clock (`Event.synced` says which). Every list query is paged by a cursor:
rows come in ascending `id`, and the next page starts after the last `id` seen. Time windows are
half-open, since_ns <= t < until_ns; for alerts, t is any time the alert was open; for audits, the
time the audit started.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from clockfabric.controller.storage.pending import PendingHost


class StorageError(Exception):
    """The database cannot take a write now (locked, disk full, server gone): retry later.

    `kind` names the fault for alerts and metrics: "busy" (another writer's lock), "readonly",
    "io", "full", "cantopen", "corrupt" (pages that do not read back), "deleted" or "replaced"
    (the database file under a running controller), "unreachable" (a database server gone),
    "unavailable" (anything else)."""

    def __init__(self, message: str, kind: str = "unavailable") -> None:
        super().__init__(message)
        self.kind = kind


class FenceLost(Exception):
    """A write made under a fence (`SqlStorage.fenced`) found its guard false: the replica that made it
    no longer holds the leader lease, so it must not act as leader; nothing was written."""


@dataclass(frozen=True)
class Event:
    host: str
    seq: int  # per host and agent run, increasing: (host, boot, seq) is unique, so a re-sent push stores once
    boot: str  # the agent run that numbered it
    t_ns: int
    kind: str  # "link_down", "link_up", "link_change", "agent_start", ...
    device: str = ""
    detail: dict = field(default_factory=dict)
    synced: bool = True
    id: int | None = None  # set by storage


@dataclass(frozen=True)
class Host:
    name: str
    enrolled_ns: int
    last_seen_ns: int | None = None  # the controller's clock, when the host last pushed
    info: dict = field(default_factory=dict)  # what the agent said of itself at its last push


@dataclass(frozen=True)
class Alert:
    key: str  # what it is about, stable: "flapping:leaf0-spine1" - one open alert per key
    kind: str  # "link_down", "flapping", "congestion", "topology_drift", "storage", ...
    severity: str  # "warning" | "critical"
    message: str
    opened_ns: int
    resolved_ns: int | None = None
    detail: dict = field(default_factory=dict)
    id: int | None = None


@dataclass(frozen=True)
class Audit:
    t_ns: int  # when the audit started (the report's started_ns), on the auditing machine's clock
    fleet: str  # what was audited: "lab demo", a hosts file
    verdict: str  # "pass" | "skip" | "warn" | "unknown" | "fail"
    exit_code: int  # 0 ok, 1 warn, 2 fail, 3 unknown
    counts: dict[str, int] = field(default_factory=dict)  # checks per verdict
    report: dict | None = None  # the whole report (audit.model.Report.as_dict()); None in lists
    id: int | None = None


class Storage(Protocol):
    def enroll(self, host: str, now_ns: int) -> None: ...
    def host(self, name: str) -> Host | None: ...
    def hosts(self) -> list[Host]: ...
    def seen(self, host: str, now_ns: int, info: dict) -> None: ...

    def add_events(self, events: list[Event]) -> int:
        """Store what is new; an event already stored (same host, boot, seq) is skipped. Returns how many were new."""

    def events(self, *, since_ns: int | None = None, until_ns: int | None = None, host: str | None = None,
               kind: str | None = None, after_id: int = 0, limit: int = 100) -> list[Event]: ...

    def add_push(self, host: str, now_ns: int, info: dict, events: list[Event]) -> int:
        """A host's push in one transaction: add_events and seen, all or nothing.
        Returns how many events were new."""

    def last_event_id(self) -> int:
        """The newest event's id (0 where none): where a reader that tails them starts."""

    def fenced(self, guard: tuple[str, tuple]) -> AbstractContextManager[None]:
        """This thread's writes, while inside, run `guard` first in their transaction; no row: FenceLost."""

    def open_alert(self, alert: Alert) -> Alert | None:
        """Store a new open alert; None if one with that key is open already (de-duplication)."""

    def resolve_alert(self, key: str, now_ns: int) -> Alert | None:
        """Close the open alert with that key; None if none was open."""

    def alerts(self, *, open_only: bool = False, since_ns: int | None = None, until_ns: int | None = None,
               after_id: int = 0, limit: int = 100) -> list[Alert]: ...

    def add_audit(self, audit: Audit) -> Audit:
        """Store an audit and its report; returns it with its id."""

    def audits(self, *, since_ns: int | None = None, until_ns: int | None = None, after_id: int = 0,
               limit: int = 100) -> list[Audit]:
        """Summaries: everything but the report (`report` is None)."""

    def audit(self, id_: int) -> Audit | None:
        """One audit with its report; None if there is none with that id."""

    def set_qos(self, jobid: str, qos_class: str, weight: int, override_dscp: bool, now_ns: int) -> None:
        """A job's QoS policy (storage.qos), replacing any it had."""

    def clear_qos(self, jobid: str) -> bool: ...

    def qos_policies(self) -> list[tuple[str, str, int, bool, int]]: ...

    def hold(self, host: str, now_ns: int, info: dict) -> str:
        """A host waiting for approval, recorded or refreshed (storage.pending): "pending", "rejected", "full"."""

    def held(self) -> list[PendingHost]: ...

    def held_host(self, host: str) -> PendingHost | None: ...

    def approve(self, host: str, now_ns: int) -> bool:
        """Enroll a held host and let go of it; False if it is not held."""

    def reject(self, host: str) -> bool: ...

    def epochs(self) -> dict[str, int]:
        """The epoch each revoked host's credential must carry (storage.revoked); others: 0."""

    def revoke(self, host: str) -> int:
        """Refuse the host's credential from now on; the epoch its new one carries."""

    def check(self, now_ns: int) -> None:
        """A real read and write (and, where the database has them, its own integrity checks);
        StorageError if any fails. The controller runs it every second."""

    def size_bytes(self) -> int | None:
        """What the database takes on disk; None where it cannot say."""

    def close(self) -> None: ...
