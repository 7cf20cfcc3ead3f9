"""Traffic classes: which DSCP values every port serves first, which the jobs share, and the rest.

An AI fabric's switch QoS maps DSCP to egress queues: a strict-priority queue with a small rate
cap for control and time traffic (PTP, congestion notifications, failure detection), a queue
for the jobs' collective traffic with most of the link guaranteed, and best-effort for every
other DSCP. A topology's `classes:` section asks the lab for the same on every port; without it
each port is one FIFO.

    classes:
      priority: {dscp: [46, 48], cap: 5%}    # strict priority, never above 5% of the link
      collective: {dscp: [26], share: 70%}   # guaranteed 70%, may borrow the whole link
      # best-effort: every other DSCP, guaranteed the rest (here 25%), may borrow the whole link
"""

from __future__ import annotations

from dataclasses import dataclass

EF, CS6, AF31 = 46, 48, 26  # expedited forwarding; network control; RoCEv2's usual data DSCP
PRIORITY_DSCP = EF  # what clock probes and the ptp4l baseline mark by default: PTP's customary DSCP
MIN_BEST_EFFORT = 5.0  # percent of the link best-effort keeps: a starved class hides its own failures


@dataclass(frozen=True)
class TrafficClass:
    name: str
    dscp: tuple[int, ...]
    percent: float  # of the link: the priority class's cap (rate = ceil); the others' guaranteed rate
    prio: int  # htb's priority: 0 is served first


@dataclass(frozen=True)
class TrafficClasses:
    priority_dscp: tuple[int, ...] = (EF, CS6)
    priority_cap: float = 5.0
    collective_dscp: tuple[int, ...] = (AF31,)
    collective_share: float = 70.0

    def classes(self) -> tuple[TrafficClass, TrafficClass, TrafficClass]:
        """Priority, collective, best-effort: in the order the lab builds them."""
        rest = 100.0 - self.priority_cap - self.collective_share
        return (TrafficClass("priority", self.priority_dscp, self.priority_cap, 0),
                TrafficClass("collective", self.collective_dscp, self.collective_share, 1),
                TrafficClass("best-effort", (), rest, 2))

    def class_of(self, dscp: int) -> str:
        return next((c.name for c in self.classes() if dscp in c.dscp), "best-effort")

    def dumps(self) -> str:
        """One YAML flow line that `parse` reads back unchanged."""
        return (f"{{priority: {{dscp: {list(self.priority_dscp)}, cap: {self.priority_cap:g}%}}, "
                f"collective: {{dscp: {list(self.collective_dscp)}, share: {self.collective_share:g}%}}}}")


EXAMPLE = "classes: {priority: {dscp: [46, 48], cap: 5%}, collective: {dscp: [26], share: 70%}}"


def parse(raw: object, problems: list[str]) -> TrafficClasses:
    """The `classes:` section (empty: every default); each problem one line in `problems`."""
    if raw is None:
        return TrafficClasses()
    if not isinstance(raw, dict):
        problems.append(f"'classes' must be a mapping, like {EXAMPLE}")
        return TrafficClasses()
    default = TrafficClasses()
    sections = {}  # unknown classes and keys are the topology schema's to report
    for name in ("priority", "collective"):
        section = raw.get(name) or {}
        if not isinstance(section, dict):
            problems.append(f"classes.{name} must be a mapping, like {EXAMPLE}")
            section = {}
        sections[name] = section
    pri, col = sections["priority"], sections["collective"]
    classes = TrafficClasses(
        _dscp_list(pri.get("dscp", list(default.priority_dscp)), "classes.priority", problems),
        _percent(pri.get("cap", default.priority_cap), "classes.priority: cap", 0.1, 50.0, problems),
        _dscp_list(col.get("dscp", list(default.collective_dscp)), "classes.collective", problems),
        _percent(col.get("share", default.collective_share), "classes.collective: share", 1.0, 95.0, problems))
    if shared := set(classes.priority_dscp) & set(classes.collective_dscp):
        problems.append(f"classes: DSCP {', '.join(map(str, sorted(shared)))} is in both priority and collective; "
                        "give each DSCP one class")
    if classes.priority_cap + classes.collective_share > 100.0 - MIN_BEST_EFFORT:
        problems.append(f"classes: priority cap {classes.priority_cap:g}% + collective share "
                        f"{classes.collective_share:g}% leave best-effort under {MIN_BEST_EFFORT:g}% of the link; "
                        "lower one")
    return classes


def _dscp_list(value: object, label: str, problems: list[str]) -> tuple[int, ...]:
    values = value if isinstance(value, list) else [value]
    if not values or not all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 63 for v in values):
        problems.append(f"{label}: dscp {value!r} must be a DSCP (0..63) or a list of them, like [46, 48]")
        return ()
    if len(set(values)) != len(values):
        problems.append(f"{label}: dscp {value!r} names a DSCP twice")
    return tuple(values)


def _percent(value: object, label: str, low: float, high: float, problems: list[str]) -> float:
    """'5%' or 5, as a percent of the link."""
    text = str(value).strip()
    try:
        if isinstance(value, bool):
            raise ValueError
        number = float(text[:-1] if text.endswith("%") else text)
    except ValueError:
        number = -1.0
    if not low <= number <= high:
        problems.append(f"{label} {value!r} must be a percent of the link from {low:g}% to {high:g}%, like 5%")
        return low
    return number
