"""What an audit says: verdicts, findings, one result per check, and the report's exit code.

A check looks at the whole fleet and returns findings, each about one host (and one device
on it: a NIC, a GPU, a PCIe slot) or about the fleet; its verdict is its worst finding's.
Exit codes follow Nagios and node-problem-detector: 0 ok, 1 warn, 2 fail, 3 unknown.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum


class Verdict(str, Enum):  # noqa: UP042 - a StrEnum would print "pass" where this prints "Verdict.PASS"
    PASS = "pass"
    SKIP = "skip"  # nothing to judge here (no GPU, no RDMA), with the reason
    WARN = "warn"
    UNKNOWN = "unknown"  # the check could not decide: it timed out, crashed, or had no facts
    FAIL = "fail"

    @property
    def rank(self) -> int:
        return _RANK[self]


_RANK = {Verdict.PASS: 0, Verdict.SKIP: 0, Verdict.WARN: 1, Verdict.UNKNOWN: 2, Verdict.FAIL: 3}


def worst(verdicts) -> Verdict:
    verdicts = list(verdicts)
    if not verdicts:
        return Verdict.PASS
    if all(v is Verdict.SKIP for v in verdicts):
        return Verdict.SKIP
    top = max(v.rank for v in verdicts)
    return Verdict.PASS if top == 0 else next(v for v in verdicts if v.rank == top)


@dataclass(frozen=True)
class Finding:
    verdict: Verdict
    message: str
    host: str = ""  # "" for the fleet as a whole
    device: str = ""  # eth0, gpu3, 0000:3b:00.0, ...
    evidence: dict = field(default_factory=dict)

    @property
    def where(self) -> str:
        return ":".join(p for p in (self.host, self.device) if p) or "fleet"

    def as_dict(self) -> dict:
        return {**asdict(self), "verdict": self.verdict.value}


@dataclass(frozen=True)
class CheckResult:
    id: str
    category: str
    title: str
    verdict: Verdict
    summary: str  # one line: what was checked and what was found
    findings: list[Finding]  # the ones that are not a pass, plus per-host passes where they carry evidence
    fix: str = ""  # what to do when it fails
    seconds: float = 0.0

    def as_dict(self) -> dict:
        return {"id": self.id, "category": self.category, "title": self.title, "verdict": self.verdict.value,
                "summary": self.summary, "fix": self.fix if self.verdict.rank else "",
                "seconds": round(self.seconds, 3),
                "findings": [f.as_dict() for f in self.findings]}


@dataclass
class Report:
    fleet: str  # the lab or hosts file audited
    hosts: list[str]
    results: list[CheckResult]
    started_ns: int
    seconds: float
    expectations: dict = field(default_factory=dict)  # what was expected, after fleet defaults

    @property
    def verdict(self) -> Verdict:
        return worst(r.verdict for r in self.results)

    @property
    def exit_code(self) -> int:
        """0 ok, 1 warn, 2 fail, 3 unknown: a fail outranks not knowing, not knowing outranks a warning."""
        return {Verdict.PASS: 0, Verdict.SKIP: 0, Verdict.WARN: 1, Verdict.FAIL: 2, Verdict.UNKNOWN: 3}[self.verdict]

    def counts(self) -> dict[str, int]:
        out = {v.value: 0 for v in Verdict}
        for r in self.results:
            out[r.verdict.value] += 1
        return out

    def as_dict(self) -> dict:
        return {"fleet": self.fleet, "hosts": self.hosts, "verdict": self.verdict.value, "exit_code": self.exit_code,
                "started_ns": self.started_ns, "seconds": round(self.seconds, 3), "counts": self.counts(),
                "expectations": self.expectations, "checks": [r.as_dict() for r in self.results]}
