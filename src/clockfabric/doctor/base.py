"""What doctor's checks are given (the agent's configuration, and where its files are) and what
each says: one outcome per thing looked at, in the audit's verdicts."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from clockfabric.agent.config import AgentConfig
from clockfabric.audit.model import Verdict
from clockfabric.registry import Registry


@dataclass(frozen=True)
class Outcome:
    check: str  # the check's name, e.g. "key", "ports"
    verdict: Verdict
    message: str  # what was looked at and found
    fix: str = ""  # what to do, on a warn or a fail

    def line(self) -> str:
        fix = f"; fix: {self.fix}" if self.fix and self.verdict.rank else ""
        return f"{self.verdict.value:<4}  {self.check:<11} {self.message}{fix}"

    def as_dict(self) -> dict:
        return {"check": self.check, "verdict": self.verdict.value, "message": self.message,
                "fix": self.fix if self.verdict.rank else ""}


@dataclass(frozen=True)
class Setup:
    """The agent's configuration, as `clockfabric agent` would build it, and what only doctor asks."""

    config: AgentConfig
    token_file: Path | None = None
    user: str | None = None  # the agent's service user; None: whoever runs doctor
    unit: Path | None = None  # a systemd unit whose ExecStart to look at


Check = Callable[[Setup], list[Outcome]]
CHECKS: Registry[Check] = Registry("doctor check", load="clockfabric.doctor.checks")


def run(setup: Setup) -> list[Outcome]:
    """Every check's outcomes, in the registry's order."""
    return [o for entry in CHECKS.entries() for o in entry.factory(setup)]


def failed(outcomes: list[Outcome]) -> bool:
    return any(o.verdict is Verdict.FAIL for o in outcomes)
