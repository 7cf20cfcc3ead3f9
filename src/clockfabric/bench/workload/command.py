"""`job why` scored against the truth: two concurrent jobs on a lab with traffic classes, fault
classes injected one at a time, over and over, and the controller's first verdict on job A
after each onset compared with the fault injected.

Job A sends three paced flows in the collective class (h0 -> h2 on spine1, h0 -> h3 and
h2 -> h1 on spine0), job B one (h1 -> h3 on spine0). Each injection starts at its onset and is
watched for up to `--watch` seconds: the first verdict other than "healthy" is the verdict (a
healthy injection's is "healthy" only if no poll said otherwise); it is right when its class, its
culprit and, for a fault on a link, the link it names are the injected ones. Time to name: from the onset to
the first poll whose verdict is right and, for a fault on a link, names that link; the onset is
when the fault begins to act (a culprit flow's first send, not its start-up). Then the
fault is undone and the fabric left to settle before the next. Targets: >= 95% right on the
first verdict; p90 time to name <= 10 s; no slow_flow alert opened during a healthy injection."""

from __future__ import annotations

import os
import random
import signal
import statistics
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import typer

from clockfabric.bench.harness import BENCHMARKS, RESULTS, Target, machine, record, targets_table
from clockfabric.bench.workload.jobs import COLLECTIVE, FABRIC_BPS
from clockfabric.bench.workload.stages import seen_ns, stages
from clockfabric.console import out, print_json
from clockfabric.lab.flows import PACED

HEALTHY = "healthy"
CLASSES = ("congestion_other_job", "congestion_non_job", "degraded_link", "flapping_link", "misconfigured_class",
           "straggler_host", HEALTHY)
DEGRADED_BPS = 2_000_000
LAB = "wlbench"


@dataclass
class Injection:
    """One fault on the lab: what it is, the links a right answer names, and how to undo it."""

    kind: str
    links: set[str] = field(default_factory=set)  # empty: no link to name
    culprit: str | None = None
    undo: Callable[[], None] = lambda: None
    # when the fault began to act (time.time_ns): a culprit flow's first send, not its start-up
    onset_ns: int = field(default_factory=time.time_ns)


@dataclass
class Outcome:
    kind: str
    verdict: str | None
    link: str | None
    culprit: str | None
    correct: bool
    named_s: float | None  # onset to the first right verdict (naming the link, where one is due)
    polls: int
    evidence: dict = field(default_factory=dict)  # what the first verdict read: its flows, and the link's load
    prepared_s: float = 0.0  # from the injection's start to its onset: a culprit's port search and start-up
    seen_s: float | None = None  # onset to the first agent sample that shows the fault (stages.py)


class Faults:
    """The fault classes on one lab with jobs A and B running; each call injects one, now."""

    def __init__(self, fleet, logs: Path):
        from clockfabric.lab.flows import links_between

        self.fleet, self.lab, self.logs = fleet, fleet.lab, logs
        self.port = 5600
        self.spine1 = links_between(self.lab, "leaf0", "spine1") | links_between(self.lab, "spine1", "leaf1")
        self.uplink = links_between(self.lab, "leaf0", "spine1")  # job A's h0 -> h2 leaves on it
        self.straggler_procs: list[subprocess.Popen] = []

    def _next_port(self) -> int:
        self.port += 1
        return self.port

    def _flow(self, kind: str, jobid: str | None, src: str, spine: str, dscp: int = COLLECTIVE,
              **kw) -> Injection:
        """A flow src -> h3 pinned on `spine`, started now: its onset is its first send."""
        from clockfabric.lab.flows import flow, sender_log, sending_since
        from clockfabric.lab.process import stop
        from clockfabric.probe.paths import spread

        port = self._next_port()
        procs = flow(self.lab, self.logs, jobid, src, "h3", port, spine=spine, spread=spread, dscp=dscp, **kw)
        try:
            onset = sending_since(sender_log(self.logs, jobid, src, "h3", port))
        except BaseException:
            stop(procs, grace_s=2.0)
            raise
        links, culprit = (set(), None) if kind == "misconfigured_class" else (self.spine1, jobid or "(no job)")
        return Injection(kind, links, culprit, lambda: stop(procs, grace_s=2.0), onset)

    def inject(self, kind: str) -> Injection:
        from clockfabric.lab import impair

        if kind == "congestion_other_job":
            # saturating, in the collective class: A's flow on spine1 queues behind it
            return self._flow(kind, "B", "h1", "spine1")
        if kind == "congestion_non_job":
            return self._flow(kind, None, "h1", "spine1")
        if kind == "misconfigured_class":  # a new rank of A marking best-effort
            return self._flow(kind, "A", "h0", "spine0", dscp=0, **PACED)
        link = impair.find_link(self.lab, "leaf0", "spine1")
        onset = time.time_ns()
        if kind == "degraded_link":
            impair.set_rate(self.lab, link, DEGRADED_BPS)
            return Injection(kind, self.uplink, undo=lambda: impair.set_rate(self.lab, link, FABRIC_BPS),
                             onset_ns=onset)
        if kind == "flapping_link":
            impair.flap(self.lab, link, down_s=1.0, up_s=1.0, count=2)
            return Injection(kind, self.uplink, onset_ns=onset)
        if kind == "straggler_host":  # rank on h2 stops sending: a busy or throttled host
            from clockfabric.lab.flows import senders

            pids = senders(self.straggler_procs)
            for pid in pids:
                os.kill(pid, signal.SIGSTOP)

            def resume() -> None:
                for pid in pids:
                    os.kill(pid, signal.SIGCONT)

            return Injection(kind, culprit="h2", undo=resume, onset_ns=onset)
        return Injection(HEALTHY)


def first_verdict(fleet, injection: Injection, onset: float, watch_s: float) -> Outcome:
    """Poll `job why A` from the onset: the first verdict other than healthy and provisional (or
    the last provisional one, or healthy)."""
    from clockfabric.bench.workload.jobs import why
    from clockfabric.controller.rootcause_verdict import PROVISIONAL

    verdict = link = culprit = None
    evidence: dict = {}
    named_s: float | None = None
    pending: dict | None = None
    polls = 0
    while (elapsed := time.monotonic() - onset) < watch_s:
        w = why(fleet, "A", f"{max(3, int(elapsed) + 2)}s")
        polls += 1
        if w is not None and w["verdict"] in PROVISIONAL and verdict is None:
            pending = w  # "not yet": the verdict only if no other comes
        elif w is not None and w["verdict"] not in ("no_flows", HEALTHY) and verdict is None:
            verdict, link, culprit = w["verdict"], w.get("link"), w.get("culprit")
            evidence = read_evidence(w)
        if w is not None and named_s is None and w["verdict"] == injection.kind and (
                not injection.links or w.get("link") in injection.links):
            named_s = time.monotonic() - onset
        if injection.kind != HEALTHY and verdict is not None and (named_s is not None or verdict != injection.kind):
            break
        time.sleep(max(0.0, 1.0 - (time.monotonic() - onset - elapsed)))
    if verdict is None and pending is not None:
        verdict, link, culprit, evidence = pending["verdict"], pending.get("link"), None, read_evidence(pending)
    verdict = verdict or HEALTHY
    correct = (verdict == injection.kind and (injection.culprit is None or culprit == injection.culprit)
               and (not injection.links or link in injection.links))
    return Outcome(injection.kind, verdict, link, culprit, correct, named_s if correct else None, polls, evidence)


def read_evidence(w: dict) -> dict:
    """A verdict's evidence, short: each flow judged (links, delay, floor, what it failed) and the link's load."""
    flows = [{k: f.get(k) for k in ("host", "flow", "links", "delay_us", "delay_source", "probe_floor_us", "rate_bps",
                                    "network_slow", "starved", "why")} for f in w.get("flows", [])]
    return {"flows": flows, **{k: v for k, v in w.get("evidence", {}).items() if k in ("load_bps", "direction")}}


def schedule(faults: int, seed: int) -> list[str]:
    """`faults` injections, every class in turn, each round in a seeded random order."""
    rng, order = random.Random(seed), list[str]()
    while len(order) < faults:
        round_ = list(CLASSES)
        rng.shuffle(round_)
        order += round_
    return order[:faults]


def run(faults: int, watch_s: float, settle_s: float, seed: int, progress: Callable[[str], None]) -> dict:
    import dataclasses

    from clockfabric.bench.workload.jobs import alerts, two_jobs

    with two_jobs(LAB, settle_s) as running:
        fleet = running.fleet
        fabric = Faults(fleet, fleet.logs)
        fabric.straggler_procs = running.straggler[1:]
        outcomes, healthy_spans = [], []
        for i, kind in enumerate(schedule(faults, seed)):
            started_ns = time.time_ns()
            injection = fabric.inject(kind)
            onset = time.monotonic() - (time.time_ns() - injection.onset_ns) / 1e9
            try:
                outcome = first_verdict(fleet, injection, onset, watch_s)
            finally:
                injection.undo()
            if kind == HEALTHY:
                healthy_spans.append((injection.onset_ns, time.time_ns()))
            else:
                outcome.prepared_s = (injection.onset_ns - started_ns) / 1e9
                seen = seen_ns(fleet, kind, outcome.evidence.get("flows", []), injection.onset_ns, COLLECTIVE)
                outcome.seen_s = None if seen is None else (seen - injection.onset_ns) / 1e9
            outcomes.append(outcome)
            progress(f"{i + 1}/{faults} {kind}: {outcome.verdict} "
                     f"{'right' if outcome.correct else 'WRONG'}"
                     + (f", named in {outcome.named_s:.1f} s" if outcome.named_s and kind != HEALTHY else "")
                     + (f" (seen {outcome.seen_s:.1f} s, prepared {outcome.prepared_s:.1f} s)"
                        if outcome.seen_s is not None else ""))
            time.sleep(settle_s)
        slow = alerts(fleet, "slow_flow", healthy_spans[0][0]) if healthy_spans else []
        false_alarms = [a for a in slow if any(s <= a.get("opened_ns", 0) <= e for s, e in healthy_spans)]
    return {"outcomes": [dataclasses.asdict(o) for o in outcomes], "healthy_slow_flow_alerts": len(false_alarms),
            "healthy_s": sum(e - s for s, e in healthy_spans) / 1e9}


def summary(report: dict) -> dict:
    """Share right, time to name (p50, p90), the confusion matrix (truth -> verdict -> count)."""
    rows = report["outcomes"]
    named = sorted(r["named_s"] for r in rows if r["named_s"] is not None and r["kind"] != HEALTHY)
    matrix: dict[str, dict[str, int]] = {}
    for r in rows:
        by = matrix.setdefault(r["kind"], {})
        by[r["verdict"]] = by.get(r["verdict"], 0) + 1
    p90 = named[min(len(named) - 1, int(0.9 * len(named)))] if named else None
    return {"faults": len(rows), "classes": len({r["kind"] for r in rows}),
            "correct": sum(r["correct"] for r in rows), "correct_share": sum(r["correct"] for r in rows) / len(rows),
            "named_p50_s": statistics.median(named) if named else None, "named_p90_s": p90, "confusion": matrix,
            "stages": stages([r for r in rows if r["kind"] != HEALTHY])}


@BENCHMARKS.register("workload")
def main(faults: int = typer.Option(28, "--faults", min=1, help="Injections, every class in turn."),
         watch_s: float = typer.Option(20.0, "--watch", min=5.0, help="Seconds each injection is watched."),
         settle_s: float = typer.Option(12.0, "--settle", min=0.0, help="Seconds after undoing each fault."),
         seed: int = typer.Option(1, help="Seed of the injection order."),
         out_file: Path = typer.Option(RESULTS / "workload.json", "--out", help="Where the record goes."),
         as_json: bool = typer.Option(False, "--json", help="Print the record's report as JSON.")) -> None:
    facts = machine()
    report = run(faults, watch_s, settle_s, seed, lambda line: None if as_json else out.print(line))
    report["summary"] = found = summary(report)
    targets = [Target(f"root cause right on the first verdict, {found['faults']} faults over {found['classes']} "
                      "classes", round(100 * found["correct_share"], 1), 95.0, "%"),
               Target("slow flow and link named after the onset, p90", found["named_p90_s"], 10.0, "s",
                      better="lower"),
               Target(f"slow_flow alerts in {report['healthy_s']:.0f} s of healthy injections",
                      report["healthy_slow_flow_alerts"], 0, better="lower")]
    record("workload", targets, facts, report,
           figures={k: v for k, v in found.items() if k not in ("confusion", "stages")},
           path=out_file)
    if as_json:
        print_json(report)
        return
    out.print(targets_table("workload root cause", targets))
    out.print(f"confusion (truth: verdict x count): {found['confusion']}")
    out.print(f"stages (median s per class): {found['stages']}")
