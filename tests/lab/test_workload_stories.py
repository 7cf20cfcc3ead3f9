"""The stories `job why` answers, on real labs with agents and a controller.

Story 1: two jobs; one flow of job A hashes onto the spine job B saturates: `job why A` names a
link of that spine and job B. Story 3: a job marks best-effort (DSCP 0) on a fabric whose
collective class is DSCP 26, while traffic of no job fills best-effort: the verdict is the
misconfigured class, and its flow's in-band delay against the probes' floor (the mismatch) is
flagged within 10 s of the bulk traffic's onset."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time

from clockfabric.bench.workload.jobs import why
from clockfabric.lab import impair
from clockfabric.lab.flows import PACED, flow, links_between, senders
from clockfabric.lab.monitoring import LabFleet
from clockfabric.lab.process import stop
from clockfabric.probe.paths import spread
from clockfabric.topology import TrafficClasses, leafspine
from tests.waiting import wait_for


def started(make_lab, topo, slow: tuple[str, str, int] | None = None):
    lab = make_lab(topo)
    if slow:
        impair.set_rate(lab, impair.find_link(lab, slow[0], slow[1]), slow[2])
    fleet = LabFleet(lab, peers=3)
    fleet.start()
    try:
        fleet.wait_pushing()
    except BaseException:
        fleet.stop()
        raise
    return fleet


def test_story_1_a_flow_on_another_jobs_spine_names_that_link_and_job(make_lab):
    fleet = started(make_lab, leafspine(4, 2, 2, host_rate="100mbit", fabric_rate="20mbit"))
    lab, logs, procs = fleet.lab, fleet.logs, []
    try:
        paced = {"chunk": 4096, "pause_s": 0.005}  # ~6 Mbit/s each, in small bursts: job A alone queues nowhere
        procs += flow(lab, logs, "A", "h0", "h2", 5401, spine="spine1", spread=spread, **paced)  # B's spine
        procs += flow(lab, logs, "A", "h0", "h3", 5402, spine="spine0", spread=spread, **paced)
        procs += flow(lab, logs, "A", "h2", "h1", 5403, spine="spine0", spread=spread, **paced)
        procs += flow(lab, logs, "B", "h1", "h3", 5404, spine="spine1", spread=spread)  # saturating
        seen: list[dict] = []

        def blamed() -> dict | None:
            if (w := why(fleet, "A", "30s")) is not None:
                seen.append(w)
            return w if w and w["verdict"] == "congestion_other_job" else None

        try:
            found = wait_for("job why A: congestion from job B", blamed, timeout_s=90, every_s=1.0)
        except AssertionError:
            print(json.dumps([{k: w[k] for k in ("verdict", "sentence", "flows")} for w in seen[-1:]], indent=1))
            subprocess.run(["cp", "-r", str(logs), "/tmp/story1-logs"])
            raise
        print(f"\n{found['sentence']}")
        cli = [sys.executable, "-m", "clockfabric.cli", "job", "why", "A", "--lab", lab.name, "--since", "30s",
               "--json"]
        shown = json.loads(subprocess.run(cli, capture_output=True, text=True, check=True).stdout)
        assert shown["verdict"] == "congestion_other_job" and shown["culprit"] == "B"
        assert shown["link"] in links_between(lab, "leaf0", "spine1") | links_between(lab, "spine1", "leaf1")
        (slow,) = shown["evidence"]["slow_flows"]  # the one on B's spine; its siblings at their floor
        assert slow["host"] == "h0" and slow["peer"] == "h2"  # the h0 -> h2 flow, B's spine
    finally:
        stop(procs, grace_s=3.0)
        fleet.stop()


def settled(fleet, jobid: str, flows: int) -> dict:
    """`job why` once every flow of the job has its in-band delay and the verdict is healthy."""
    def ready() -> dict | None:
        w = why(fleet, jobid, "20s")
        return w if w and w["verdict"] == "healthy" and len(w["flows"]) == flows and all(
            f["delay_source"] == "inband" for f in w["flows"]) else None

    return wait_for(f"job {jobid} healthy, every flow's in-band delay known", ready, timeout_s=90, every_s=1.0)


def around(series: dict, values: list, onset_ns: int) -> tuple[float, float]:
    """The median of a series' readings before the onset and from 5 s after it (its queue built)."""
    before = [v for t, v in zip(series["t_ns"], values, strict=True) if v is not None and t < onset_ns]
    after = [v for t, v in zip(series["t_ns"], values, strict=True) if v is not None and t >= onset_ns + 5 * 10**9]
    return statistics.median(before), statistics.median(after)


def test_story_2_a_throughput_drops_as_a_flow_queues_behind_another_job(make_lab):
    fleet = started(make_lab, leafspine(4, 2, 2, host_rate="100mbit", fabric_rate="20mbit"))
    lab, logs, procs = fleet.lab, fleet.logs, []
    try:
        # most of A's bytes ride spine1 (~14 Mbit/s in small bursts: under the link's 20 alone)
        procs += flow(lab, logs, "A", "h0", "h2", 5421, spine="spine1", spread=spread, chunk=4096, pause_s=0.002)
        procs += flow(lab, logs, "A", "h0", "h3", 5422, spine="spine0", spread=spread, **PACED)
        procs += flow(lab, logs, "A", "h2", "h1", 5423, spine="spine0", spread=spread, **PACED)
        settled(fleet, "A", 3)
        onset_ns = time.time_ns()
        for port in (5424, 5425):  # the other tenant: two saturating flows on spine1
            procs += flow(lab, logs, "B", "h1", "h3", port, spine="spine1", spread=spread)
        found = wait_for("job why A: congestion from job B", lambda: (w := why(fleet, "A", "20s")) and w[
            "verdict"] == "congestion_other_job" and w, timeout_s=60, every_s=1.0)
        named_s = (time.time_ns() - onset_ns) / 1e9
        time.sleep(max(0.0, 12 - named_s))  # readings well past the queue's build-up for the timeline
        series = fleet.api("/api/v1/dashboard/job-series", jobid="A", since="2m")
        to_h2 = {f["flow"] for f in found["flows"] if f["host"] == "h0" and f["peer"] == "h2"}  # the spine1 flow's group
        (slow,) = [f for f in series["flows"] if f["host"] == "h0" and f["flow"] in to_h2]
        rate = around(series, series["throughput_bps"], onset_ns)
        delay = around(series, slow["delay_us"], onset_ns)
        print(f"\n{found['sentence']}\nnamed {named_s:.1f} s after the onset; job A's throughput "
              f"{rate[0] / 1e6:.1f} -> {rate[1] / 1e6:.1f} Mbit/s while its spine1 flow's delay "
              f"({slow['delay_source']}) went {delay[0]:.0f} -> {delay[1]:.0f} us")
        assert found["culprit"] == "B"
        assert found["link"] in links_between(lab, "leaf0", "spine1") | links_between(lab, "spine1", "leaf1")
        (named,) = found["evidence"]["slow_flows"]
        assert named["host"] == "h0" and named["peer"] == "h2" and named["delay_source"] == "inband"
        assert rate[1] < 0.85 * rate[0]  # the drop ...
        assert delay[1] > 5 * delay[0]  # ... as the flow queues
        others = [f for f in series["flows"] if f is not slow]
        assert all(around(series, f["delay_us"], onset_ns)[1] < delay[1] / 5 for f in others)  # siblings unmoved
    finally:
        stop(procs, grace_s=3.0)
        fleet.stop()


def test_story_2_b_not_the_network_a_throttled_rank_is_a_straggler_host(make_lab):
    fleet = started(make_lab, leafspine(4, 2, 2, host_rate="100mbit", fabric_rate="20mbit"))
    lab, logs, procs = fleet.lab, fleet.logs, []
    running = threading.Event()
    throttler: threading.Thread | None = None
    try:
        procs += flow(lab, logs, "A", "h0", "h2", 5431, spine="spine1", spread=spread, **PACED)
        procs += flow(lab, logs, "A", "h0", "h3", 5432, spine="spine0", spread=spread, **PACED)
        rank = flow(lab, logs, "A", "h2", "h1", 5433, spine="spine0", spread=spread, **PACED)
        procs += rank
        settled(fleet, "A", 3)
        pids = senders(rank[1:])
        running.set()

        def throttle() -> None:  # the rank's host gives it 10% of each 100 ms: stopped the rest
            while running.is_set():
                for sig, pause_s in ((signal.SIGSTOP, 0.09), (signal.SIGCONT, 0.01)):
                    for pid in pids:
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(pid, sig)
                    time.sleep(pause_s)

        throttler = threading.Thread(target=throttle, daemon=True)
        throttler.start()
        onset = time.monotonic()
        found = wait_for("job why A: straggler host h2", lambda: (w := why(fleet, "A", "20s")) and w[
            "verdict"] not in ("healthy", "no_flows") and w, timeout_s=60, every_s=1.0)
        print(f"\n{found['sentence']}\nnamed {time.monotonic() - onset:.1f} s after the throttling began; "
              f"{[(f['host'], f['rate_bps'], f['delay_us'], f['why']) for f in found['flows']]}")
        assert found["verdict"] == "straggler_host" and found["culprit"] == "h2"
        assert not any(f["network_slow"] for f in found["flows"])  # every flow at its floor
        (late,) = [f for f in found["flows"] if f["starved"]]
        assert late["host"] == "h2" and late["peer"] == "h1"
    finally:
        running.clear()
        if throttler is not None:
            throttler.join()
        for pid in senders(procs):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        stop(procs, grace_s=3.0)
        fleet.stop()


def test_story_3_a_job_marking_best_effort_is_misconfigured_and_its_mismatch_flagged(make_lab):
    topo = dataclasses.replace(leafspine(4, 2, 1, host_rate="100mbit", buffer=30), classes=TrafficClasses())
    fleet = started(make_lab, topo, slow=("leaf0", "spine0", 10_000_000))
    lab, logs, procs = fleet.lab, fleet.logs, []
    try:
        procs += flow(lab, logs, "C", "h0", "h2", 5411, chunk=4096, pause_s=0.01, dscp=0)  # ~3 Mbit/s, wrong class

        def mismatch(w: dict | None) -> bool:
            return bool(w) and any("probe floor" in r for f in w["flows"] if f["delay_source"] == "inband"
                                   for r in f["why"])

        wait_for("job C's class judged", lambda: (w := why(fleet, "C", "30s")) and w["flows"] and w, timeout_s=90,
                 every_s=1.0)
        for _ in range(5):  # alone, it rides at the floor: its own paced bursts are no queue, read at any moment
            assert not mismatch(w := why(fleet, "C", "30s")), [f["why"] for f in w["flows"]]
            time.sleep(1.0)
        procs += flow(lab, logs, None, "h1", "h3", 5412, dscp=0)  # bulk, best-effort, across the slow link
        onset = time.monotonic()
        found = wait_for("the in-band vs probe mismatch", lambda: (w := why(fleet, "C", "30s")) and mismatch(w) and w,
                         timeout_s=30, every_s=0.5)
        flagged_s = time.monotonic() - onset
        print(f"\n{found['sentence']}\nmismatch flagged {flagged_s:.1f} s after the bulk traffic's onset; "
              f"{[r for f in found['flows'] for r in f['why']]}")
        assert found["verdict"] == "misconfigured_class" and found["evidence"]["dscp"] == [0]
        assert found["evidence"]["collective_dscp"] == [26]
        assert flagged_s <= 10.0
    finally:
        stop(procs, grace_s=3.0)
        fleet.stop()
