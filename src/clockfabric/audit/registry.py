"""The registry of checks: each has a stable id, a category, a title and a fix hint.

A check is a `Check`: given the audit context, `run` returns an Outcome, a one-line summary and
the findings that matter. Each is one function of the context in its own file in
`audit/checks/`, registered on import by `@check(...)` (so adding a check is adding a file),
which makes it a `FunctionCheck`. They live in `CHECKS`, the one registry shape
(clockfabric.registry): the id is the entry's name, the title its help, and the factory makes
the check.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from clockfabric.audit.model import Finding
from clockfabric.registry import Registry

if TYPE_CHECKING:
    from clockfabric.audit.context import Context

CATEGORIES = ("configuration", "frontend", "backend", "collective")


@dataclass
class Outcome:
    summary: str
    findings: list[Finding] = field(default_factory=list)


class Check(ABC):
    """One audit verdict, judged from the facts the hosts gathered."""

    id: str  # "<category>.<name>": stable, scripts and expectations refer to it
    category: str
    title: str
    fix: str
    active: bool  # sends traffic or runs jobs (slow): skipped by --passive
    lldp: bool  # judges LLDP neighbours: hosts wait for their switches only if a chosen check does

    @abstractmethod
    def run(self, ctx: Context) -> Outcome:
        """Judge the fleet in `ctx`: a one-line summary and the findings that matter."""


@dataclass(frozen=True)
class FunctionCheck(Check):
    """A check that is one function of the context, as each in audit/checks/ is."""

    id: str
    category: str
    title: str
    fix: str
    judge: Callable[[Context], Outcome]
    active: bool = False
    lldp: bool = False

    def run(self, ctx: Context) -> Outcome:
        return self.judge(ctx)


CHECKS: Registry[Callable[[], Check]] = Registry("check", load="clockfabric.audit.checks")


def check(id: str, title: str, fix: str, *, active: bool = False,
          lldp: bool = False) -> Callable[[Callable[[Context], Outcome]], Callable[[Context], Outcome]]:
    """Decorator: register the function as the check `id`."""
    category = id.split(".", 1)[0]
    if category not in CATEGORIES:
        raise ValueError(f"check {id}: category {category!r} is not one of {CATEGORIES}")

    def add(judge: Callable[[Context], Outcome]) -> Callable[[Context], Outcome]:
        def factory() -> Check:
            return FunctionCheck(id, category, title, fix, judge, active, lldp)
        factory.__module__ = judge.__module__  # the registry orders checks by the module that defines them
        CHECKS.register(id, help=title)(factory)
        return judge
    return add


def get_check(id: str) -> Check:
    return CHECKS.get(id).factory()


def all_checks() -> list[Check]:
    order = {c: i for i, c in enumerate(CATEGORIES)}  # within a category: the order checks/__init__ imports them
    return sorted((e.factory() for e in CHECKS.entries()), key=lambda c: order[c.category])


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
