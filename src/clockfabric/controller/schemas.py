"""What the controller takes at its door, declared: pushes, each event's detail by its kind, and
audit reports, checked before anything is stored.

Names (hosts, boots, devices, kinds, sample names, label keys) are held to a grammar of printable
ASCII without spaces, and free text (label values, reasons) to printable characters, so no newline
or other control character from the network ever reaches a log line or a terminal.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

MAX_EVENTS, MAX_SAMPLES, MAX_PATHS, MAX_BOOTS = 5_000, 50_000, 10_000, 1_000
# a topology's node names (DNS-like), a boot id, a device (eth0, swp1, 0000:3b:00.0, a peer's name)
HOST = r"^[A-Za-z0-9]([A-Za-z0-9_.-]{0,126}[A-Za-z0-9])?$"
TOKEN = r"^[A-Za-z0-9][A-Za-z0-9_.:@/+-]{0,127}$"
DEVICE = r"^([A-Za-z0-9][A-Za-z0-9_.:@/+-]{0,63})?$"
KIND = r"^[A-Za-z][A-Za-z0-9_.-]{0,63}$"
METRIC = r"^[A-Za-z_:][A-Za-z0-9_:]{0,127}$"  # Prometheus's metric and label name grammar
LABEL = r"^[A-Za-z_][A-Za-z0-9_]{0,63}$"
TEXT = r"^[^\x00-\x1f\x7f-\x9f\u2028\u2029]*$"  # printable: no control, no line or paragraph separator

HostName = Annotated[str, Field(pattern=HOST)]
Boot = Annotated[str, Field(pattern=TOKEN)]
Device = Annotated[str, Field(pattern=DEVICE)]
Kind = Annotated[str, Field(pattern=KIND)]
Text = Annotated[str, Field(max_length=1024, pattern=TEXT)]
LabelValue = Annotated[str, Field(max_length=256, pattern=TEXT)]
LabelKey = Annotated[str, Field(pattern=LABEL)]
Count = Annotated[int, Field(ge=0, lt=2**63)]
VerdictName = Literal["pass", "skip", "warn", "unknown", "fail"]
EXIT_CODES = {"pass": 0, "skip": 0, "warn": 1, "fail": 2, "unknown": 3}  # as audit.model.Report.exit_code


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class LinkDetail(Strict):
    carrier_changes: Count | None = None
    resync: bool = False


class AgentStartDetail(Strict):
    pid: Count | None = None


class FailoverDetail(Strict):
    planes: list[Annotated[int, Field(ge=0, le=255)]] = Field(max_length=256)
    reason: Text = ""
    flow: Text | None = None
    origin: Text | None = None


def detail_model(kind: str) -> type[BaseModel] | None:
    """The declared detail of a kind; None where any detail goes (keys checked only)."""
    if kind.startswith("link_"):
        return LinkDetail
    if kind.startswith("failover_"):
        return FailoverDetail
    return AgentStartDetail if kind == "agent_start" else None


class EventIn(BaseModel):
    seq: int = Field(ge=1, lt=2**63)
    boot: Boot | None = None  # the agent run that numbered it, where not the push's (held over a restart)
    t_ns: int = Field(ge=0, lt=2**63)
    kind: Kind
    device: Device = ""
    detail: dict[LabelKey, Any] = Field(default_factory=dict)
    synced: bool = True


class SampleIn(BaseModel):
    name: Annotated[str, Field(pattern=METRIC)]
    value: float
    labels: dict[LabelKey, LabelValue] = Field(default_factory=dict, max_length=32)
    t_ns: int | None = Field(default=None, ge=0, lt=2**63)


class BootEnd(BaseModel):
    """An agent run that ended, as its agent's event log tells it: how many of its events never arrived."""
    boot: Boot
    last_seq: Count
    delivered: Count
    undelivered: Count


class Push(BaseModel):
    host: HostName
    boot: Boot
    info: dict[LabelKey, Any] = Field(default_factory=dict)
    events: list[EventIn] = Field(default_factory=list, max_length=MAX_EVENTS)
    # samples go to the series gate (agent.series_write); an agent that has not been told where yet
    # still sends them here: checked, and not stored
    samples: list[SampleIn] = Field(default_factory=list, max_length=MAX_SAMPLES)
    dropped_events: Count = 0
    # the runs the agent's log knows; None from a client that keeps no log (no run's end judged)
    boots: list[Boot] | None = Field(default=None, max_length=MAX_BOOTS)
    ended: list[BootEnd] = Field(default_factory=list, max_length=MAX_BOOTS)
    # the host's path map: (peer, path label, plane, switch the path crosses at TTL 2, or null)
    paths: list[tuple[HostName, Boot, Annotated[int, Field(ge=0)], HostName | None]] | None = Field(
        default=None, max_length=MAX_PATHS)


def detail_errors(push: Push) -> list[dict]:
    """Each event's detail against its kind's model, as pydantic errors placed in the push."""
    errors = []
    for i, e in enumerate(push.events):
        model = detail_model(e.kind)
        if model is None:
            continue
        try:
            model.model_validate(e.detail)
        except ValidationError as err:
            errors += [{**x, "loc": ("events", i, "detail", *x["loc"])}
                       for x in err.errors(include_url=False, include_context=False, include_input=False)]
    return errors


class FindingIn(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)
    verdict: VerdictName
    message: Annotated[str, Field(max_length=65_536)]  # may be several lines: shown in a report, never logged
    host: Annotated[str, Field(pattern=r"^([A-Za-z0-9]([A-Za-z0-9_.-]{0,126}[A-Za-z0-9])?)?$")] = ""
    device: Device = ""
    evidence: dict = Field(default_factory=dict)


class CheckIn(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)
    id: Annotated[str, Field(pattern=KIND)]
    verdict: VerdictName
    findings: list[FindingIn]


class AuditIn(BaseModel):
    """What the controller reads of an audit report (audit.model.Report.as_dict()); it keeps all of it."""
    model_config = ConfigDict(extra="allow", strict=True)
    # "lab demo", a hosts file's path; no control characters (PostgreSQL's TEXT refuses NUL)
    fleet: Annotated[str, Field(min_length=1, max_length=1024, pattern=TEXT)]
    verdict: VerdictName
    exit_code: int = Field(ge=0, le=3)
    started_ns: int = Field(ge=0, lt=2**63)  # a BIGINT in both databases
    counts: dict[VerdictName, Annotated[int, Field(ge=0)]]
    checks: list[CheckIn]

    @model_validator(mode="after")
    def consistent(self) -> AuditIn:
        if EXIT_CODES[self.verdict] != self.exit_code:
            raise ValueError(f"exit_code {self.exit_code} does not go with verdict {self.verdict!r} "
                             f"(0 pass/skip, 1 warn, 2 fail, 3 unknown)")
        return self
