"""What the controller's detectors read of this host, worked out here from a push's samples.

The controller's detectors run once a second over the whole fleet. Reading every probe path's
delays for them (four series a path, tens of paths a host) is most of what the engine exports
and the controller parses, and nearly all of it says "nothing queues". So the host sends them
the few series that carry news, beside the delays it writes anyway (dashboards, `job why`):

  owd_report                this host's report: written with every push, the number of its probe
                            paths measured. Its time is a window of every path of this host: a
                            path not named below in the same write was quiet in it
  owd_queueing_ns           a path's delay above its floor (labels dst, path), only while that is
                            past the congestion detector's margin (the push's answer names the
                            margin and the statistic, p50 or min)
  owd_unmeasured            1 for a probe path of the map with no trusted delay in this report (its
                            probes lost, or the clocks not trusted): not quiet, whatever it did before
  job_flow_probe_floor_ns   beside each job flow group's in-band delay (labels jobid, flow): the
  job_flow_probe_ns         lowest floor of the probe paths to the flow's far host, and the most
                            any of them sees now (its p50, or its floor): what the flow is judged by

Pure functions of one push: nothing is remembered between pushes, so a push lost or re-sent
changes nothing, and the detector counts windows as the writes come.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from clockfabric.workload.flowgroups import parse_pair

REPORT, QUEUEING, UNMEASURED = "owd_report", "owd_queueing_ns", "owd_unmeasured"
PROBE_FLOOR, PROBE_LEVEL = "job_flow_probe_floor_ns", "job_flow_probe_ns"
INBAND = "job_flow_owd_out_p50_ns"
STATS = ("p50", "min")


@dataclass(frozen=True)
class Ask:
    """What the congestion detector asks hosts for: a path's `stat` this far above its floor queues."""

    margin_ns: float
    stat: str = "p50"

    @classmethod
    def heard(cls, answer: Mapping) -> Ask | None:
        """The ask in a push's answer (`congestion`); None where it carries none or a malformed one
        (a controller with the detector off, or an older one): then no path series are sent."""
        asked = answer.get("congestion")
        if not isinstance(asked, Mapping):
            return None
        margin, stat = asked.get("margin_ns"), asked.get("stat")
        if isinstance(margin, bool) or not isinstance(margin, int | float) or margin < 0 or stat not in STATS:
            return None
        return cls(float(margin), stat)


def _paths(samples: Iterable[dict], host: str) -> dict[str, dict[tuple[str, str], float]]:
    """This host's own probe paths' delays, by stat name, then (dst, path)."""
    out: dict[str, dict[tuple[str, str], float]] = {}
    for s in samples:
        labels = s.get("labels") or {}
        if s["name"].startswith("owd_") and labels.get("src", host) == host and "dst" in labels and "path" in labels:
            out.setdefault(s["name"], {})[labels["dst"], labels["path"]] = s["value"]
    return out


def queueing(samples: list[dict], host: str, mapped: Iterable[tuple[str, str]], ask: Ask) -> list[dict]:
    """The report, each path past the margin, and each mapped (peer, path) not measured."""
    delays = _paths(samples, host)
    floors, stats = delays.get("owd_floor_ns", {}), delays.get(f"owd_{ask.stat}_ns", {})
    out = [{"name": REPORT, "value": float(len(floors)), "labels": {}}]
    for (dst, path), floor in sorted(floors.items()):
        excess = stats.get((dst, path), floor) - floor
        if excess > ask.margin_ns:
            out.append({"name": QUEUEING, "value": float(excess), "labels": {"dst": dst, "path": path}})
    out += [{"name": UNMEASURED, "value": 1.0, "labels": {"dst": dst, "path": path}}
            for dst, path in sorted(set(mapped) - floors.keys())]
    return out


def flow_probes(samples: list[dict], host: str, host_of: Mapping[str, str]) -> list[dict]:
    """Beside each job flow group's in-band delay, its far host's probe floor and level."""
    delays = _paths(samples, host)
    floors, p50s = delays.get("owd_floor_ns", {}), delays.get("owd_p50_ns", {})
    by_peer: dict[str, tuple[float, float]] = {}
    for (dst, path), floor in floors.items():
        low, level = by_peer.get(dst, (floor, floor))
        by_peer[dst] = (min(low, floor), max(level, floor, p50s.get((dst, path), floor)))
    out = []
    for s in samples:
        labels = s.get("labels") or {}
        if s["name"] != INBAND or not (ends := parse_pair(labels.get("flow", ""))):
            continue
        if (peer := host_of.get(ends[1])) in by_peer:
            floor, level = by_peer[peer]
            out += [{"name": PROBE_FLOOR, "value": floor, "labels": labels},
                    {"name": PROBE_LEVEL, "value": level, "labels": labels}]
    return out
