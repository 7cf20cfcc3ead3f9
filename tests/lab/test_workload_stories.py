"""The stories `job why` answers, on real labs with agents and a controller.

Story 1: two jobs; one flow of job A hashes onto the spine job B saturates: `job why A` names a
link of that spine and job B. Story 3: a job marks best-effort (DSCP 0) on a fabric whose
collective class is DSCP 26, while traffic of no job fills best-effort: the verdict is the
misconfigured class, and its flow's in-band delay against the probes' floor (the mismatch) is
flagged within 10 s of the bulk traffic's onset."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import time

import pytest

from clockfabric.bench.workload_lab import flow, links_between, why
from clockfabric.controller.on_lab import LabFleet
from clockfabric.lab import impair
from clockfabric.lab.process import stop
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
        procs += flow(lab, logs, "A", "h0", "h2", 5401, spine="spine1", **paced)  # B's spine
        procs += flow(lab, logs, "A", "h0", "h3", 5402, spine="spine0", **paced)
        procs += flow(lab, logs, "A", "h2", "h1", 5403, spine="spine0", **paced)
        procs += flow(lab, logs, "B", "h1", "h3", 5404, spine="spine1")  # saturating
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
        assert slow["host"] == "h0" and slow["flow"].endswith(":5401")
    finally:
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
        assert not mismatch(why(fleet, "C", "30s"))  # alone, it rides at the floor
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
