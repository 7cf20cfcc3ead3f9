"""The registry of checks: each has a stable id, a category, a title and a fix hint.

A check is a function of the audit context that returns an Outcome: a one-line summary and
the findings that matter. Checks register themselves on import (one file per check, in
`audit/checks/`), so adding a check is adding a file. They live in `CHECKS`, the one registry
shape (clockfabric.registry): the id is the entry's name, the title its help, and the category,
fix and active flag its meta.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from clockfabric.audit.model import Finding
from clockfabric.registry import Entry, Registry

if TYPE_CHECKING:
    from clockfabric.audit.context import Context

CATEGORIES = ("configuration", "frontend", "backend", "collective")


@dataclass
class Outcome:
    summary: str
    findings: list[Finding] = field(default_factory=list)


@dataclass(frozen=True)
class Check:
    id: str  # "<category>.<name>": stable, scripts and expectations refer to it
    category: str
    title: str
    fix: str
    run: Callable[[Context], Outcome]
    active: bool = False  # sends traffic or runs jobs (slow): skipped by --passive
    lldp: bool = False  # judges LLDP neighbours: hosts wait for their switches only if a chosen check does

    @classmethod
    def of(cls, entry: Entry) -> Check:
        return cls(entry.name, entry.meta["category"], entry.help, entry.meta["fix"], entry.factory,
                   entry.meta["active"], entry.meta["lldp"])


CHECKS: Registry = Registry("check", load="clockfabric.audit.checks")


def check(id: str, title: str, fix: str, *, active: bool = False, lldp: bool = False):
    category = id.split(".", 1)[0]
    if category not in CATEGORIES:
        raise ValueError(f"check {id}: category {category!r} is not one of {CATEGORIES}")
    return CHECKS.register(id, help=title, category=category, fix=fix, active=active, lldp=lldp)


def get_check(id: str) -> Check:
    return Check.of(CHECKS.get(id))


def all_checks() -> list[Check]:
    order = {c: i for i, c in enumerate(CATEGORIES)}  # within a category: the order checks/__init__ imports them
    return sorted(map(Check.of, CHECKS.entries()), key=lambda c: order[c.category])


def select(only: list[str], skip: list[str], *, passive: bool = False) -> list[Check]:
    """Checks chosen by category or id (or an id prefix such as `backend.nic`)."""
    checks = all_checks()
    known = {c.id for c in checks} | set(CATEGORIES)

    def matches(c: Check, pattern: str) -> bool:
        return pattern in (c.category, c.id) or c.id.startswith(pattern + "_") or c.id.startswith(pattern + ".")

    for pattern in [*only, *skip]:
        if not any(matches(c, pattern) for c in checks):
            raise ValueError(f"{pattern!r} names no check; categories are {', '.join(CATEGORIES)}, "
                             f"checks are {', '.join(sorted(known - set(CATEGORIES)))}")
    chosen = [c for c in checks if (not only or any(matches(c, p) for p in only))
              and not any(matches(c, p) for p in skip) and not (passive and c.active)]
    return chosen
