"""How many agents the controller and its series path hold: simulated agents do what a real agent
does every 10 s, against a real `clockfabric controller` (SQLite, its embedded engine, gate,
vmalert and Alertmanager, as a bare controller starts them), stepping up towards 10,000 agents.

Each agent pushes its events, info and path map to the controller (one push in EVENT_EVERY
carries a link event, as scale_load's hosts do), and writes what a real agent writes (the same
190 series as `controller-scale`'s load, its job's processes and flows among them) through the
gate. A new agent is enrolled by its first push, as `--enroll-unknown` allows, and let into the
gate by it. After the steady load, the load runs on while the OWD heatmap is asked, then again
while `job why` is asked of a job of each size the fleet runs (scale_load.JOB_SIZES) in turn, up
to WHY_ASKS times each for WHY_ASK_S; each asking starts a cadence into its stretch, so that
every agent has written in it, as in a fleet whose load never paused.

The agents and their load are `fleet_load`'s. A step's new agents first push once (ENROL_S),
which enrols them and lets them into the gate; the step then runs one cadence, in which every one
of their series is new (the engine's costliest write), then
`--step-s` of steady updates, which are what a fleet costs from its first minute on. Per step:
samples sent, ingested (the engine's own count) and dropped, event pushes acknowledged and their
p50/p99, CPU per host-second for the controller, engine, gate, vmalert, Alertmanager and the
generator apart (steady; the first cadence's beside it), the controller's own reads of the
detectors' feed while steady (from its /metrics: how many fed the detectors each sample within a
cadence of its write), the OWD heatmap route as one open page asks it: the time to its first
heatmap, then once a second for HEATMAP_ASKS seconds, each answer's latency and the age of what it
showed; and `job why`'s latencies and verdicts. The baseline is the old
SQL store's, measured at 570e30a on this machine (docs/deploy.md): 4.6 + 1.5 ms of controller
and database CPU a push of 167 samples.

The engine's disk over the run is said (bytes a sample), not judged: a few minutes of samples
carry the index of every series made in them. `bench series-disk` judges what a sample costs
over a day.

    clockfabric bench fleet-scale [--hosts 1000,3000,10000] [--step-s 30] [--out PATH]
"""

from __future__ import annotations

import asyncio
import math
import os
import resource
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import httpx
import typer
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console
from rich.table import Table

from clockfabric.bench import harness
from clockfabric.bench.controller.fleet_asks import HEATMAP_ASKS, finite, heatmap_page, round_ms, why_asks
from clockfabric.bench.controller.fleet_load import CADENCE_S, Agent, load, write_request
from clockfabric.bench.controller.scale import TOKEN, Replicas
from clockfabric.bench.harness import BENCHMARKS, RESULTS, Target, disk_bytes, record
from clockfabric.controller.dashboard.data import HEATMAP_MAX_AGE_S
from clockfabric.controller.dashboard.fresh import SHARE
from clockfabric.lab import process

out = Console()
DEFAULT_JSON = RESULTS / "fleet-scale.json"
BASE_CPU_HOST_S = (4.6e-3 + 1.5e-3) / CADENCE_S  # the SQL store's CPU a host-second at this cadence
PUSH_P99_BAR_S = 0.250
ENROL_S = 5.0  # a step's new agents push their first within this
HEATMAP_BAR_S = 0.5
WHY_BAR_S = 0.5
WHY_ASK_S = 30.0  # `job why` is asked for this long (asks past it are not made)
ASKED_MAX_S = 600.0  # a stretch the fleet runs on while asked ends with its asking, or at this
FEED = "clockfabric_controller_feed_"
# the controller's children, by the name the kernel gives each (/proc/PID/comm, 15 characters)
PARTS = {"victoria-metric": "engine", "vmauth": "gate", "vmalert": "vmalert", "alertmanager": "alertmanager",
         "prometheus-aler": "alertmanager"}


def _cpu_s(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _own_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


class Controller:
    """A bare `clockfabric controller` and the processes it starts, each found by its name."""

    def __init__(self, workdir: Path) -> None:
        # a host is stale past three missed updates, as the agents' own cadence would set it
        self.replicas = Replicas(str(workdir / "fleet.db"), 1, workdir, ("--stale", str(3 * CADENCE_S)))
        self.pid = self.replicas.pids[0]
        self.port = int(self.replicas.urls[0].rsplit(":", 1)[1])
        self.gate_port = self.port + 1  # --series-port's default: one port up
        self.data = workdir / "fleet.db.series"
        self.comms: dict[int, str] = {}  # each part's pid -> its name, as the kernel has it
        self.parts = self._parts()
        engine = Path(f"/proc/{self.parts['engine']}/cmdline").read_text().split("\0")
        listen = next(a for a in engine if a.startswith("-httpListenAddr="))
        self.engine_url = "http://" + listen.split("=", 1)[1]

    def _parts(self, timeout_s: float = 30.0) -> dict[str, int]:
        deadline = time.monotonic() + timeout_s
        while True:
            found = {}
            for pid in process.children(self.pid):
                if (comm := _comm(pid)) in PARTS:
                    found[PARTS[comm]] = pid
                    self.comms[pid] = comm
            if {"engine", "gate"} <= found.keys() or time.monotonic() > deadline:
                return {"controller": self.pid, **found}
            time.sleep(0.2)

    def cpu(self) -> dict[str, float]:
        return {part: _cpu_s(pid) for part, pid in self.parts.items()}

    def feed(self) -> dict[str, float]:
        """The controller's reads of the detectors' feed so far (its /metrics): reads, their seconds,
        samples fed, reads failed, and of the reads that fed samples, how many were at most
        `behind<=S` seconds behind the fleet at their end (one count a bucket)."""
        text = httpx.get(self.replicas.urls[0] + "/metrics", headers={"Authorization": f"Bearer {TOKEN}"},
                         timeout=30).text
        got = {}
        names = {"duration_seconds_count": "reads", "duration_seconds_sum": "seconds", "samples_total": "samples",
                 "failures_total": "failed", "behind_seconds_count": "fed_reads"}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                name = s.name.removeprefix(FEED)
                if name in names:
                    got[names[name]] = s.value
                elif name == "behind_seconds_bucket":
                    got[f"behind<={float(s.labels['le']):g}"] = s.value
        return got

    def stop(self) -> None:
        """The controller stops what it started; what outlives it (the controller killed past its
        grace while the engine flushed) is stopped here, by pid and name, before its data goes."""
        self.replicas.stop()
        process.stop_pids(self.comms, ours=lambda pid: _comm(pid) == self.comms[pid], grace_s=10.0)


def _comm(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return None


def _rows(url: str) -> int:
    text = httpx.get(url + "/metrics", timeout=10).text
    return sum(int(float(line.rsplit(" ", 1)[1])) for line in text.splitlines()
               if line.startswith('vm_rows_inserted_total{type="prometheus"}'))



def _run(ctl: Controller, agents: list[Agent], writes: list[bytes], seconds: float,
         until: threading.Event | None = None) -> dict:
    """One stretch of load: what the generator saw, the CPU each part used a host-second, and the
    controller's own reads of the detectors' feed meanwhile (its ticks, from its /metrics)."""
    cpu0, own0, feed0, t0 = ctl.cpu(), _own_cpu_s(), ctl.feed(), time.monotonic()
    pushed, written = asyncio.run(load((ctl.port, ctl.gate_port), agents, writes, seconds, until=until))
    wall = time.monotonic() - t0
    host_s = len(agents) * wall
    cpu = {part: (s - cpu0.get(part, 0.0)) / host_s * 1e6 for part, s in ctl.cpu().items()}
    cpu["generator"] = (_own_cpu_s() - own0) / host_s * 1e6
    feed = {k: v - feed0.get(k, 0.0) for k, v in ctl.feed().items()}
    return {"wall": wall, "pushed": pushed, "written": written, "cpu_us_host_s": cpu, "feed": feed}


def _asked(ctl: Controller, agents: list[Agent], writes: list[bytes], ask: Callable[[], dict]) -> tuple[dict, dict]:
    """What `ask()` found, asked while the fleet runs on from a cadence into the stretch (every
    agent has written in it by then, as in a fleet that never paused), and the stretch's load,
    which runs until the asking ends."""
    found: dict = {}
    done = threading.Event()

    def asker() -> None:
        try:
            time.sleep(CADENCE_S)
            found.update(ask())
        finally:
            done.set()

    thread = threading.Thread(target=asker, name="asker")
    thread.start()
    stretch = _run(ctl, agents, writes, ASKED_MAX_S, until=done)
    thread.join()
    return found, stretch


def step(ctl: Controller, agents: list[Agent], seconds: float) -> dict:
    hosts = len(agents)
    writes = [write_request(a.name, hosts, ctl.gate_port) for a in agents]
    per_request = writes[0].split(b"\r\n\r\n", 1)[1].count(b"\n")
    # the new agents' first pushes enrol them and let them into the gate, as an agent's first push
    # does; their samples follow from the next update on, every series new
    new = [a for a in agents if a.pushes == 0]
    enrolled, _ = asyncio.run(load((ctl.port, ctl.gate_port), new, None, ENROL_S, ENROL_S))
    time.sleep(1.0)  # the gate's rewrite (COALESCE_S) and vmauth's reload
    rows0 = _rows(ctl.engine_url)
    first = _run(ctl, agents, writes, CADENCE_S)
    steady = _run(ctl, agents, writes, seconds)
    time.sleep(3.0)  # the engine's insert buffers
    ingested = _rows(ctl.engine_url) - rows0
    # the heatmap and `job why` asked while the fleet runs on, each in a stretch of its own: what
    # each costs the pushes is its own figure, not the steady load's
    url = ctl.replicas.urls[0]
    page, page_load = _asked(ctl, agents, writes, lambda: heatmap_page(url))
    page["heatmap_pushes_failed"] = page_load["pushed"].sent - page_load["pushed"].ok
    why, why_load = _asked(ctl, agents, writes, lambda: why_asks(url, hosts, WHY_ASK_S))
    why["why_pushes_failed"] = why_load["pushed"].sent - why_load["pushed"].ok
    # the baseline: a stretch as long as the heatmap's, with nothing asked
    quiet = _run(ctl, agents, writes, page_load["wall"])
    sent = (first["written"].sent + steady["written"].sent) * per_request
    # the gate's 204: the engine took them; a write refused in the first cadence is an agent's
    # whose enrolling push was not answered in time (counted apart: its next update gets through)
    acked = (first["written"].ok + steady["written"].ok) * per_request
    pushed = steady["pushed"]
    feed = steady["feed"]
    reads = feed.get("reads", 0.0)
    push_lat = sorted(pushed.latencies_s) or [math.inf]
    return {"hosts": hosts, "seconds": round(steady["wall"], 1), "samples_sent": sent, "samples_acked": acked,
            # not in the engine: sent and not refused at enrolment, so refused or failed while
            # steady, or taken and lost; a write the generator gave up on that the engine still
            # took counts as held (ingested may pass acked)
            "samples_ingested": ingested,
            "samples_dropped": max(0, sent - first["written"].refused * per_request - ingested),
            "enrolled": enrolled.ok, "enrol_pushes": enrolled.sent,
            "first_writes_refused": first["written"].refused, "writes_refused": steady["written"].refused,
            "writes_failed": first["written"].failed + steady["written"].failed,
            "pushes_sent": pushed.sent, "pushes_ok": pushed.ok, "pushes_refused": pushed.refused,
            "pushes_failed": pushed.failed, "late": pushed.late + first["pushed"].late,
            "push_p50_s": finite(push_lat[len(push_lat) // 2]),
            "push_p99_s": finite(push_lat[min(len(push_lat) - 1, math.ceil(0.99 * len(push_lat)) - 1)]),
            "cpu_us_host_s": steady["cpu_us_host_s"], "first_cadence_cpu_us_host_s": first["cpu_us_host_s"],
            **page, **why,
            "heatmap_cpu_us_host_s": page_load["cpu_us_host_s"], "why_cpu_us_host_s": why_load["cpu_us_host_s"],
            "quiet_s": round(quiet["wall"], 1), "quiet_pushes_failed": quiet["pushed"].sent - quiet["pushed"].ok,
            "quiet_cpu_us_host_s": quiet["cpu_us_host_s"],
            "feed_reads": int(reads), "feed_mean_s": feed.get("seconds", 0.0) / reads if reads else None,
            "feed_samples": int(feed.get("samples", 0)), "feed_failed": int(feed.get("failed", 0)),
            **feed_behind(feed)}


def feed_behind(feed: dict[str, float]) -> dict:
    """Of the steady stretch's reads that fed the detectors, or failed: the share whose every sample
    came within a cadence of its write, and the most any read was behind (a bucket's edge)."""
    judged = feed.get("fed_reads", 0.0) + feed.get("failed", 0.0)
    edges = sorted((float(k.removeprefix("behind<=")), v) for k, v in feed.items() if k.startswith("behind<="))
    worst = next((edge for edge, n in edges if n >= feed.get("fed_reads", 0.0)), None)
    return {"feed_within_cadence": feed.get(f"behind<={CADENCE_S:g}", 0.0) / judged if judged else None,
            "feed_behind_max_s": worst if feed.get("fed_reads") else None}


def _stretches_cpu(row: dict) -> str:
    """Each server part's CPU in the steady stretch and in each asking's, side by side."""
    stretches = [row[f"{k}cpu_us_host_s"] for k in ("", "quiet_", "heatmap_", "why_")]
    return ", ".join(f"{part} " + " / ".join(f"{s.get(part, 0.0):.0f}" for s in stretches)
                     for part in ("controller", "engine", "gate", "generator"))


def _server_cpu(r: dict) -> float:
    """The controller side's CPU a host-second (us): the controller and every process it started."""
    return sum(v for part, v in r.items() if part != "generator")


@BENCHMARKS.register("fleet-scale")
def main(hosts: Annotated[str, typer.Option(help="The steps: agents, comma-separated.")] = "1000,3000,10000",
         step_s: Annotated[float, typer.Option(min=CADENCE_S, help="Steady seconds a step, after its first cadence.")]
         = 30.0,
         json_path: Annotated[Path, typer.Option("--out", help="Where the record goes.")] = DEFAULT_JSON) -> None:
    """Simulated agents against a controller and its series path, stepping up to --hosts."""
    try:
        steps = sorted(int(h) for h in hosts.split(","))
    except ValueError:
        raise typer.BadParameter(f"--hosts {hosts!r}: give agent counts, comma-separated (1000,3000)") from None
    if not steps or steps[0] < 1:
        raise typer.BadParameter("--hosts: every step needs at least one agent")
    facts = harness.machine()
    rows = []
    with tempfile.TemporaryDirectory(prefix="cf-fleet-scale-") as tmp:
        ctl = Controller(Path(tmp))
        try:
            agents: list[Agent] = []
            for n in steps:  # each step keeps the last one's agents, and adds new ones
                agents += [Agent(f"sim{i:05d}", n, ctl.port) for i in range(len(agents), n)]
                out.print(f"[bold]{n} agents[/]: enrolment, one cadence of new series, then {step_s:g} s steady")
                rows.append(step(ctl, agents, step_s))
                out.print(rows[-1])
            httpx.get(ctl.engine_url + "/internal/force_flush", timeout=60)
            time.sleep(2.0)
            total = _rows(ctl.engine_url)
            disk = disk_bytes(ctl.data / "engine")
        finally:
            ctl.stop()
    top = rows[-1]
    bytes_a_sample = disk / max(total, 1)
    # CPU a host-second means something only where all the work was done: the largest step whose
    # every push and write was taken and whose detectors were fed (where reads are refused at their
    # budget, or pushes fail, the servers did less and their CPU a host-second falls)
    done = [r for r in rows if r["pushes_ok"] == r["pushes_sent"] and r["writes_failed"] == 0
            and r["feed_reads"] and not r["feed_failed"]]
    basis = done[-1] if done else top
    server_us = _server_cpu(basis["cpu_us_host_s"])
    first_us = _server_cpu(basis["first_cadence_cpu_us_host_s"])
    parts = ", ".join(f"{part} {v:.0f}" for part, v in basis["cpu_us_host_s"].items() if part != "generator")
    held = [r for r in rows if r["samples_dropped"] <= 0 and r["writes_refused"] == 0 and r["writes_failed"] == 0
            and r["pushes_ok"] == r["pushes_sent"]
            and r["push_p99_s"] is not None and r["push_p99_s"] <= PUSH_P99_BAR_S]
    targets = [
        Target("controller + engine CPU a host-second, below the SQL store's",
               round(BASE_CPU_HOST_S / server_us * 1e6, 1), 10.0, "x", baseline=1.0,
               note=(f"steady, at {basis['hosts']} agents, the largest step whose every push was taken and "
                     "whose detectors were fed: "
                     f"{server_us:.0f} us a host-second ({parts}); "
                     f"the first cadence, every series new: {first_us:.0f} us; the SQL store's: "
                     "(4.6 + 1.5 ms of controller and database a push) / 10 s, at 570e30a")),
        Target(f"samples dropped at {top['hosts']} agents", float(top["samples_dropped"]), 0.0, "", "lower",
               note=(f"sent and not in the engine, of {top['samples_sent']} sent ({top['samples_acked']} answered "
                     "as taken by the gate); writes refused while steady: "
                     f"{top['writes_refused']}, failed: {top['writes_failed']}; in the first cadence, refused: "
                     f"{top['first_writes_refused']}; new agents enrolled: {top['enrolled']} of "
                     f"{top['enrol_pushes']}")),
        Target(f"event pushes' p99 at {top['hosts']} agents", round_ms(top["push_p99_s"]), PUSH_P99_BAR_S, "s", "lower",
               note=(f"{top['pushes_ok']} of {top['pushes_sent']} pushes taken, p50 {round_ms(top['push_p50_s'])} s; "
                     f"held (nothing dropped, every push taken, p99 within the bar) up to "
                     f"{max((r['hosts'] for r in held), default=0)} agents")),
        Target(f"OWD heatmap route p95 at {top['hosts']} agents, an open page asking once a second",
               top["heatmap_p95_s"], HEATMAP_BAR_S, "s", "lower",
               note=(f"{HEATMAP_ASKS} asks after its first heatmap while the fleet runs on (pushes failed "
                     f"meanwhile: {top.get('heatmap_pushes_failed')}), of {top['heatmap_pairs']} pairs, which took "
                     f"{top['heatmap_first_s']} s to come; a reading of the fleet's newest delays took up to "
                     f"{top['heatmap_read_s']} s, and the oldest shown was read {top['heatmap_age_max_s']} s "
                     f"before: a reading over {SHARE * HEATMAP_MAX_AGE_S:g} s is served while the next is read, "
                     f"spaced by {1 / SHARE:g} times its length"
                     + (f"; refused: {top['heatmap_refused']}" if "heatmap_refused" in top else ""))),
        Target(f"`job why` p95 at {top['hosts']} agents, a job of each size the fleet runs",
               top["why_p95_s"], WHY_BAR_S, "s", "lower",
               note=(f"{top['why_asks']} asks of the first job of each size in turn, one after another, while "
                     f"the fleet runs on (asked for {WHY_ASK_S:g} s from a cadence in; pushes failed meanwhile: "
                     f"{top['why_pushes_failed']}); "
                     "the slowest of each: " + ", ".join(f"{k} {v} s" if v is not None else f"{k} refused past the "
                                                          "reader's budget" for k, v in top["why_max_s"].items())
                     + "; the verdicts: " + "; ".join(f"{k}: {v}" for k, v in top["why_verdicts"].items()))),
    ]
    asked_failed = [r["heatmap_pushes_failed"] + r["why_pushes_failed"] for r in rows]
    asked_held = max((r["hosts"] for r, n in zip(rows, asked_failed, strict=True) if n == 0), default=0)
    targets.append(Target(f"pushes failed at {top['hosts']} agents while a heatmap page is open or `job why` asked",
                          float(asked_failed[-1]), 0.0, "", "lower", baseline=float(top["quiet_pushes_failed"]),
                          note=(f"baseline: a stretch as long as the heatmap's ({top['quiet_s']:g} s) with nothing "
                                f"asked; the heatmap's stretch {top['heatmap_pushes_failed']}, `job why`'s "
                                f"{top['why_pushes_failed']}, each of the pushes sent from a cadence before the "
                                "first ask to the last answer; none failed up to "
                                f"{asked_held} agents; CPU a host-second (us), steady / nothing asked / the "
                                f"heatmap's stretch / `job why`'s: {_stretches_cpu(top)}")))
    kept = [r for r in rows if r["feed_within_cadence"] is not None and r["feed_within_cadence"] >= 0.99]
    targets.append(Target(f"the detectors' feed at {top['hosts']} agents: reads that fed them each sample within "
                          f"a cadence ({CADENCE_S:g} s) of its write",
                          None if top["feed_within_cadence"] is None else round(100 * top["feed_within_cadence"], 1),
                          99.0, "%", "higher",
                          note=(f"{top['feed_reads']} reads while steady, mean {round_ms(top['feed_mean_s'])} s, "
                                f"{top['feed_failed']} failed, {top['feed_samples']} samples fed, the most behind "
                                f"within {top['feed_behind_max_s']} s (a bucket's edge); the controller's own "
                                "reads (its /metrics), one a tick, each held to the reader's budget; "
                                f"held up to {max((r['hosts'] for r in kept), default=0)} agents")))
    record("fleet-scale", targets, facts, {"steps": rows, "disk_bytes": disk, "rows": total},
           {"agents": top["hosts"], "bytes_a_sample": round(bytes_a_sample, 2)}, json_path)
    table = Table(title="fleet-scale (CPU: us a host-second, steady)")
    for col in ("agents", "samples sent", "dropped", "pushes ok", "push p99", "controller", "engine", "gate",
                "vmalert", "alertmanager", "generator", "heatmap first", "heatmap p95", "oldest shown",
                "feed mean", "feed within cadence"):
        table.add_column(col)
    for r in rows:
        cpu = r["cpu_us_host_s"]
        table.add_row(str(r["hosts"]), str(r["samples_sent"]), str(r["samples_dropped"]),
                      f"{r['pushes_ok']}/{r['pushes_sent']}",
                      "-" if r["push_p99_s"] is None else f"{r['push_p99_s'] * 1e3:.0f} ms",
                      *[f"{cpu.get(p, 0.0):.1f}" for p in ("controller", "engine", "gate", "vmalert", "alertmanager",
                                                            "generator")],
                      *["-" if r[k] is None else f"{r[k] * 1e3:.0f} ms" for k in ("heatmap_first_s", "heatmap_p95_s")],
                      "-" if r["heatmap_age_max_s"] is None else f"{r['heatmap_age_max_s']:.0f} s",
                      "-" if r["feed_mean_s"] is None else f"{r['feed_mean_s'] * 1e3:.0f} ms",
                      "-" if r["feed_within_cadence"] is None else f"{100 * r['feed_within_cadence']:.0f}%")
    out.print(table)
    out.print(harness.targets_table("fleet-scale", targets))
