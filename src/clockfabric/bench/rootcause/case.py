"""One drawn case run on its own lab: the fabric built, agents and a controller on it, the jobs'
flows started and judged healthy, the fault injected, `job why A` polled every second from its
onset for `watch_s`, and everything removed.

The verdict is the first one other than healthy and provisional (a queue not explained as yet);
else the last provisional one, else healthy. It is right when its class is the fault's and it
names the fault's link (a fault on a link), host (a straggler) or the rogue rank's host among
its flows (misconfigured). Named: from the onset to the first poll that is right."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable

from clockfabric.bench.rootcause.draw import HEALTHY, STYLES, Case, link_name, twins
from clockfabric.bench.rootcause.report import QUEUED
from clockfabric.errors import ClockfabricError

PORT = 5401
# what every case's record holds (the report reads them): the drawn case (to replay), the truth,
# the verdict and what it named, each judged, the time to name and the cost
RECORD_FIELDS = ("case", "kind", "tier", "truth", "verdict", "link", "links", "culprit", "class_right", "named_right",
                 "named_among", "right", "named_s", "cost_s")


def run_case(case: Case, lab_name: str, watch_s: float, say: Callable[[str], None] = lambda _: None) -> dict:
    """The case's record (see `judge`), with its cost: wall time from bring-up to removal."""
    from clockfabric.bench.harness import labs_removed
    from clockfabric.bench.rootcause.inject import inject, start_flow
    from clockfabric.lab import build
    from clockfabric.lab.monitoring import LabFleet
    from clockfabric.lab.process import stop

    started = time.monotonic()
    row: dict = {"case": case.row(), "kind": case.fault.kind, "tier": case.fault.tier}
    with labs_removed(lab_name):
        build.down(lab_name)
        lab = build.up(case.topology(), lab_name)
        fleet = LabFleet(lab)  # the default mesh, 10 peers a host: most flows' pairs have a probe floor
        fleet.start()
        procs: list[subprocess.Popen] = []
        senders_of_a: dict[str, list[subprocess.Popen]] = {}
        try:
            say(f"  {lab.topology.name}: {len(lab.topology.hosts)} hosts, {len(lab.topology.switches)} switches up")
            fleet.wait_pushing()
            port = PORT
            for job in case.jobs:
                for f in job.flows:
                    pair = start_flow(lab, fleet.logs, job.jobid, f, port, STYLES[job.style])
                    procs += pair
                    if job.jobid == "A":
                        senders_of_a.setdefault(f.src, []).append(pair[-1])
                    port += 1
            ready(fleet, len(case.jobs[0].flows))
            row["ready_s"] = round(time.monotonic() - started, 1)
            injection = inject(lab, fleet.logs, case, senders_of_a, port)
            onset = time.monotonic() - (time.time_ns() - injection.onset_ns) / 1e9
            try:
                row |= watch(fleet, case, onset, watch_s)
            finally:
                injection.undo()
        except ClockfabricError as e:
            row |= {"verdict": None, "error": str(e)}
        except Exception as e:  # noqa: BLE001 - one case's failure is its record; the next case runs
            row |= {"verdict": None, "error": f"{type(e).__name__}: {e}"}
        finally:
            stop(procs, grace_s=2.0)
            fleet.stop()
    row["cost_s"] = round(time.monotonic() - started, 1)
    return judge(case, row)


def ready(fleet, flows: int, timeout_s: float = 90.0) -> None:
    """Until the controller judges A's `flows` flows healthy, each measured in-band. Unlike
    `bench workload`, a flow's traced path is not awaited: where A sends both ways between two
    hosts, a host's group for that pair holds its sender and the reverse flow's receiver, traced
    through two spines, and keeps only the links both paths share (the rest stay in reach)."""
    from clockfabric.bench.workload.jobs import why

    deadline = time.monotonic() + timeout_s
    w: dict = {}
    while time.monotonic() < deadline:
        w = why(fleet, "A", "10s") or {}
        rows = w.get("flows", [])
        if w.get("verdict") == HEALTHY and len(rows) == flows and all(r.get("delay_source") == "inband"
                                                                       for r in rows):
            return
        time.sleep(1.0)
    raise ClockfabricError(f"job A's {flows} flows were not all judged healthy and measured in-band in "
                           f"{timeout_s:.0f} s; last verdict: {w.get('verdict')}, flows: {judged(w)}")


def watch(fleet, case: Case, onset: float, watch_s: float) -> dict:
    """Poll `job why A` from the onset: the first verdict other than healthy and provisional
    (trimmed to what it named and why; else the last provisional one), and when a right one first
    came."""
    from clockfabric.bench.workload.jobs import why
    from clockfabric.controller.rootcause_verdict import PROVISIONAL

    first: dict | None = None
    pending: dict | None = None
    named_s: float | None = None
    polls, last = 0, None
    while (elapsed := time.monotonic() - onset) < watch_s:
        w = why(fleet, "A", f"{max(3, int(elapsed) + 2)}s")
        polls += 1
        last = w or last
        if w is not None and w["verdict"] in PROVISIONAL:
            pending = trimmed(w)  # "not yet": the verdict only if no other comes
        elif w is not None and w["verdict"] not in ("no_flows", HEALTHY):
            first = first or trimmed(w)
            if named_s is None and right(case, trimmed(w))[0]:
                named_s = round(time.monotonic() - onset, 2)
        if case.fault.kind != HEALTHY and first is not None and (named_s is not None
                                                                 or first["verdict"] != case.fault.kind):
            break
        time.sleep(max(0.0, 1.0 - (time.monotonic() - onset - elapsed)))
    healthy = {"verdict": HEALTHY, "link": None, "links": [], "culprit": None, "judged": judged(last)}  # as last judged
    return {**(first or pending or healthy), "named_s": named_s, "polls": polls}


def judged(w: dict | None) -> list[dict]:
    """Each flow of A as a verdict judged it: what the record needs to tell why it was wrong."""
    keys = ("host", "peer", "links", "dscps", "rate_bps", "delay_us", "delay_source", "probe_floor_us",
            "send_queue_bytes", "resent", "network_slow", "starved", "why")
    return [{k: f.get(k) for k in keys} for f in (w or {}).get("flows", [])]


def trimmed(w: dict) -> dict:
    """What a verdict named, its sentence, and its evidence: flows judged, hosts heard late, load,
    localization."""
    ev = w.get("evidence", {})
    return {"verdict": w["verdict"], "link": w.get("link"), "links": w.get("links", []), "culprit": w.get("culprit"),
            "sentence": w.get("sentence"),
            "judged": judged(w), "late": w.get("late", []),
            "evidence": {"flows": ev.get("flows"), "load_bps": ev.get("load_bps"), "direction": ev.get("direction"),
                         "localization": ev.get("localization"),
                         "slow_flows": [{k: f.get(k) for k in ("host", "peer", "links", "delay_us", "probe_floor_us",
                                                               "why")} for f in ev.get("slow_flows", [])]}}


def right(case: Case, found: dict) -> tuple[bool, bool]:
    """(its class right, what it names right) for a verdict: the link of a fault on a link (of a
    queue, with its twins, the links no path's delay tells from it: all of them and no other), the
    host of a straggler, the rogue rank's host among a misconfigured verdict's flows."""
    fault = case.fault
    kind = found.get("verdict") == fault.kind
    if fault.link and fault.direction and fault.kind in QUEUED:
        a, b = fault.direction.split(">", 1)
        topo = case.topology()
        want = {link_name(topo, *h) for h in twins(case, (a, b))}
        return kind, set(found.get("links") or [found.get("link")]) == want
    if fault.link:
        return kind, found.get("link") == fault.link
    if fault.kind == "straggler_host":
        return kind, found.get("culprit") == fault.host
    if fault.kind.startswith("misconfigured"):
        flows = (found.get("evidence") or {}).get("flows") or []
        return kind, any(str(f).startswith(f"{fault.host} ") for f in flows)
    return kind, kind  # healthy: nothing to name


def judge(case: Case, row: dict) -> dict:
    """The record's verdict judged: class right, link or host right, both. A verdict naming several
    links it cannot tell apart names none right, unless no path could (`twins`); `named_among`
    says whether the fault's was among those of a verdict not right."""
    kind, named = right(case, row) if row.get("verdict") else (False, False)
    truth = case.fault.link or case.fault.host
    among = len(row.get("links") or []) > 1 and case.fault.link in row["links"] and not named
    return {**row, "truth": truth, "class_right": kind, "named_right": named, "named_among": among,
            "right": kind and named}
