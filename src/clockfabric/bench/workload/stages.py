"""Where `bench workload`'s time to name goes: from a fault's onset to the first agent sample
that shows it, then to the verdict that names it (the push, storage and the judgement).

What shows a fault, read back from the controller after its verdict: for a flow the verdict
judged slow in the network, its first delay reading (in-band, else RTT/2) far above its own
before the onset; for a starved flow, its first rate under half its own before; for a flapping
link, its first down; for a misconfigured class, the first path reading of a flow of the job
marking a DSCP outside the collective class.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterator

from clockfabric.controller.rootcause import Thresholds, far_above
from clockfabric.lab.monitoring import LabFleet

BEFORE_NS = 10 * 10**9  # readings before the onset that make a flow's own usual level
S = 1e9


def stored(fleet: LabFleet, route: str, **query) -> Iterator[dict]:
    """Every item of a paged controller list (`/api/v1/samples`, `/api/v1/events`)."""
    after = 0
    while True:
        found = fleet.api(route, after_id=after, limit=1000, **query)
        yield from found.get("items", [])
        if found.get("next") is None:
            return
        after = found["next"]


def readings(fleet: LabFleet, name: str, host: str, flow: str, since_ns: int) -> list[tuple[int, float]]:
    """One flow's readings of `name` since `since_ns`, in time order."""
    return sorted((s["t_ns"], s["value"]) for s in stored(fleet, "/api/v1/samples", name=name, host=host,
                                                          since_ns=since_ns)
                  if s.get("labels", {}).get("flow") == flow)


def first_change(series: list[tuple[int, float]], onset_ns: int, changed) -> int | None:
    """The time of the first reading from the onset on that `changed(value, usual)` says moved
    off `usual`, the median of the readings before the onset."""
    before = [v for t, v in series if t < onset_ns]
    if not before:
        return None
    usual = statistics.median(before)
    return next((t for t, v in series if t >= onset_ns and changed(v, usual)), None)


def delay_seen(fleet: LabFleet, host: str, flow: str, onset_ns: int) -> int | None:
    """When the flow's delay first stood far above its own before the onset: in-band where it
    is measured, else RTT/2, judged as the root cause judges a delay."""
    since, limits = onset_ns - BEFORE_NS, Thresholds()
    stand_in = {t for t, v in readings(fleet, "job_flow_owd_out_fallback", host, flow, since) if v}
    inband = [(t, v / 1e3) for t, v in readings(fleet, "job_flow_owd_out_p50_ns", host, flow, since)
              if t not in stand_in]
    if inband:
        return first_change(inband, onset_ns, lambda v, usual: far_above(v, usual, limits.inband_margin_us, limits))
    rtt = [(t, v / 2) for t, v in readings(fleet, "job_flow_rtt_us", host, flow, since)]
    return first_change(rtt, onset_ns, lambda v, usual: far_above(v, usual, limits.rtt_margin_us, limits))


def rate_seen(fleet: LabFleet, host: str, flow: str, onset_ns: int) -> int | None:
    """When the flow's sent rate first fell under half its own before the onset."""
    series = readings(fleet, "job_flow_tx_bps", host, flow, onset_ns - BEFORE_NS)
    return first_change(series, onset_ns, lambda v, usual: v < usual * Thresholds().rate_ratio)


def seen_ns(fleet: LabFleet, kind: str, flows: list[dict], onset_ns: int, collective: int) -> int | None:
    """When the first agent sample (or event) showing fault `kind` was taken; `flows`: the
    verdict's flows (host, flow, network_slow, starved)."""
    if kind == "flapping_link":
        downs = [e["t_ns"] for e in stored(fleet, "/api/v1/events", kind="link_down", since_ns=onset_ns)]
        return min(downs, default=None)
    if kind == "misconfigured_class":
        marked = [s["t_ns"] for s in stored(fleet, "/api/v1/samples", name="job_flow_path", since_ns=onset_ns)
                  if s.get("labels", {}).get("dscp", "") not in ("", str(collective))]
        return min(marked, default=None)
    times = [delay_seen(fleet, f["host"], f["flow"], onset_ns) for f in flows if f.get("network_slow")]
    times += [rate_seen(fleet, f["host"], f["flow"], onset_ns) for f in flows if f.get("starved")]
    return min((t for t in times if t is not None), default=None)


def stages(outcomes: list[dict]) -> dict[str, dict[str, float | None]]:
    """Per fault class, the median of each stage in seconds: prepared (injection start to onset,
    not in the time to name), seen (onset to the first sample showing it), named (onset to the
    right verdict) and their difference, pushed and judged (seen to named)."""
    out: dict[str, dict[str, float | None]] = {}
    for kind in dict.fromkeys(r["kind"] for r in outcomes):
        rows = [r for r in outcomes if r["kind"] == kind]

        def mid(values: list[float | None]) -> float | None:
            found = [v for v in values if v is not None]
            return round(statistics.median(found), 2) if found else None

        out[kind] = {"prepared_s": mid([r.get("prepared_s") for r in rows]),
                     "seen_s": mid([r.get("seen_s") for r in rows]),
                     "named_s": mid([r.get("named_s") for r in rows]),
                     "judged_s": mid([r["named_s"] - r["seen_s"] for r in rows
                                      if r.get("named_s") is not None and r.get("seen_s") is not None])}
    return out
