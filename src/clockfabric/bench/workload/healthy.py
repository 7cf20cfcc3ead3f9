"""Workload monitoring's false alarms: two healthy jobs and background traffic for minutes on
end, and every alarm the controller raised about them.

The lab, jobs A and B, as `bench workload` runs them (`jobs.two_jobs`), plus traffic of
no job in the best-effort class: one saturating flow h1 -> h3 on spine1 (across the link of A's
spine1 flow) and one paced flow h2 -> h0 on spine0. Nothing is injected. For `--minutes`, every
`--poll` seconds, `job why` on each job over the last 30 s: a verdict other than healthy is a
false verdict, and a flow whose in-band delay stands far above its path's probe floor is a
mismatch (what `job why` reports as the in-band vs probe disagreement). Afterwards the
controller's slow_flow and owd_mismatch alerts opened in the run. Targets: zero of each."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import typer

from clockfabric.bench.harness import BENCHMARKS, RESULTS, Target, machine, record, targets_table
from clockfabric.console import out, print_json

LAB = "wlhealthy"
JOBS = ("A", "B")
WINDOW = "30s"
MISMATCH = "probe floor"  # the judgement `job why` gives a flow whose in-band delay is far above its floor


def mismatches(w: dict) -> list[str]:
    """The flows of a verdict judged far above their path's probe floor, in-band."""
    return [f"{f['host']} {f['flow']}" for f in w.get("flows", [])
            if f.get("delay_source") == "inband" and any(MISMATCH in r for r in f.get("why", []))]


def watch(fleet, minutes: float, poll_s: float, progress: Callable[[str], None]) -> dict:
    """Poll `job why` on each job for `minutes`: verdicts by job, the false ones, the mismatches."""
    from clockfabric.bench.workload.jobs import why

    verdicts: dict[str, Counter] = {j: Counter() for j in JOBS}
    false: list[dict] = []
    mismatched: list[dict] = []
    start = time.monotonic()
    polls = 0
    while (elapsed := time.monotonic() - start) < minutes * 60:
        for jobid in JOBS:
            w = why(fleet, jobid, WINDOW)
            verdict = w["verdict"] if w else "unknown"
            verdicts[jobid][verdict] += 1
            if verdict not in ("healthy", "no_flows", "unknown"):
                false.append({"t_s": round(elapsed, 1), "jobid": jobid, "verdict": verdict,
                              "sentence": w["sentence"] if w else None})
            if w and (flows := mismatches(w)):
                mismatched.append({"t_s": round(elapsed, 1), "jobid": jobid, "flows": flows})
        polls += 1
        if polls % max(1, round(60 / poll_s)) == 0:
            progress(f"{elapsed / 60:.0f} min: {dict(verdicts['A'])} / {dict(verdicts['B'])}, "
                     f"{len(false)} false verdicts, {len(mismatched)} mismatches")
        time.sleep(max(0.0, poll_s - (time.monotonic() - start - elapsed)))
    return {"polls": polls, "verdicts": {j: dict(c) for j, c in verdicts.items()}, "false_verdicts": false,
            "mismatches": mismatched}


def sent_bytes(lab, host: str, port: int) -> int:
    """Bytes acknowledged so far on `host`'s TCP connections to remote port `port` (sock_diag, in its namespace)."""
    from clockfabric.lab import netns
    from clockfabric.traffic.steer_kernel import FlowReader

    with netns.entered(lab.ns(host)):
        reader = FlowReader()
    try:
        return sum(f.bytes_acked for f in reader.read() if f.key.rport == port)
    finally:
        reader.close()


def run(minutes: float, poll_s: float, settle_s: float, progress: Callable[[str], None]) -> dict:
    from clockfabric.bench.workload.jobs import alerts, two_jobs
    from clockfabric.lab.flows import PACED, flow
    from clockfabric.lab.process import stop
    from clockfabric.probe.paths import spread

    background = {("h1", 5501): {"spine": "spine1"}, ("h2", 5502): {"spine": "spine0", **PACED}}
    with two_jobs(LAB, settle_s) as running:
        fleet, procs = running.fleet, []
        try:
            for (src, port), how in background.items():
                dst = "h3" if src == "h1" else "h0"
                procs += flow(fleet.lab, fleet.logs, None, src, dst, port, spread=spread, dscp=0, **how)
            time.sleep(settle_s)
            start_ns, sent = time.time_ns(), {key: sent_bytes(fleet.lab, *key) for key in background}
            report = watch(fleet, minutes, poll_s, progress)
            end_ns = time.time_ns()
            rates = {f"{src}:{port}": (sent_bytes(fleet.lab, src, port) - sent[src, port]) * 8e9 / (end_ns - start_ns)
                     for src, port in background}
            raised = {kind: [a for a in alerts(fleet, kind, start_ns) if a.get("opened_ns", 0) <= end_ns]
                      for kind in ("slow_flow", "owd_mismatch")}
        finally:
            stop(procs, grace_s=2.0)
    return {**report, "minutes": (end_ns - start_ns) / 60e9, "background_bps": rates,
            **{f"{kind}_alerts": len(found) for kind, found in raised.items()},
            **{f"{kind}_alert_messages": [a.get("message") for a in found] for kind, found in raised.items()}}


@BENCHMARKS.register("workload-healthy")
def main(minutes: float = typer.Option(10.0, "--minutes", min=0.5, help="Minutes the healthy jobs are watched."),
         poll_s: float = typer.Option(5.0, "--poll", min=1.0, help="Seconds between `job why` polls of each job."),
         settle_s: float = typer.Option(12.0, "--settle", min=0.0, help="Seconds for the traffic to settle first."),
         out_file: Path = typer.Option(RESULTS / "workload-healthy.json", "--out", help="Where the record goes."),
         as_json: bool = typer.Option(False, "--json", help="Print the record's report as JSON.")) -> None:
    facts = machine()
    report = run(minutes, poll_s, settle_s, lambda line: None if as_json else out.print(line))
    span = f"{report['minutes']:.1f} min of two healthy jobs with background traffic"
    verdicts = sum(sum(c.values()) for c in report["verdicts"].values())
    targets = [Target(f"slow_flow alerts in {span}", report["slow_flow_alerts"], 0, better="lower"),
               Target(f"owd_mismatch alerts in {span}", report["owd_mismatch_alerts"], 0, better="lower"),
               Target(f"in-band vs probe mismatches, {verdicts} `job why` verdicts", len(report["mismatches"]), 0,
                      better="lower"),
               Target(f"`job why` verdicts other than healthy, of {verdicts}", len(report["false_verdicts"]), 0,
                      better="lower")]
    record("workload-healthy", targets, facts, report,
           figures={"minutes": round(report["minutes"], 2), "polls": report["polls"], "verdicts": verdicts,
                    "background_mbps": round(sum(report["background_bps"].values()) / 1e6, 1)},
           path=out_file)
    if as_json:
        print_json(report)
        return
    out.print(targets_table("workload monitoring, healthy run", targets))
    out.print(f"verdicts by job: {report['verdicts']}; background traffic of no job (Mbit/s, by sender and "
              f"port): { {k: round(v / 1e6, 1) for k, v in report['background_bps'].items()} }")
