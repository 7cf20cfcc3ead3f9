"""`clockfabric bench chaos`: a lab fleet (controller, switch agents, keyed clock agents) for N
minutes while faults are injected at random, one after another (bench/monitoring/chaos_faults.py):
controller kill -9 and restart, agent kill -9 while it holds events (with the controller up and
down), a database lock held past the controller's busy wait, the database file removed and put
back, the database's disk filled (a small tmpfs of its own), link flaps, garbage and forged
datagrams, bad pushes, a host pushing as another. Faults come in rounds: each kind once, in a
random order, the agent kills twice. At the end it checks: no acknowledged event lost (a witness pushes
numbered events all along; every one the controller answered 200 must be served), no agent or
controller loop dead (every agent runs, /readyz answers 200), every clock within its published
bound, and every fault seen (alerted, evented, counted or refused)."""

from __future__ import annotations

import contextlib
import random
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer

from clockfabric.bench.harness import BENCHMARKS, Target, labs_removed, machine, record
from clockfabric.bench.monitoring.chaos_agents import AllFaults
from clockfabric.bench.monitoring.chaos_faults import ALERT_LATE, WITNESS_KIND, Faults
from clockfabric.clock.evaluate import ours_bounds, ours_errors, read_states
from clockfabric.console import err, out, print_json, require_root
from clockfabric.lab import build
from clockfabric.lab.monitoring import LabFleet
from clockfabric.lab.state import Lab
from clockfabric.topology import leafspine

GAP_S = (0.5, 2.0)  # quiet time between two faults
CLOCK_SETTLE_S = 60.0  # after the last fault, for every clock to be back within its bound
DISK = "64m"  # the controller's database gets a tmpfs of this size, for the disk-full fault


@contextlib.contextmanager
def small_disk(path: Path, size: str = DISK) -> Iterator[Path]:
    """A tmpfs of `size` mounted on path (made if need be) while the block runs, then unmounted."""
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "chaos-disk", str(path)],
                   check=True, capture_output=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "--lazy", str(path)], check=False, capture_output=True)


def served_witness(faults: Faults) -> set[int]:
    """The witness events the controller serves now, every page."""
    seqs: set[int] = set()
    after = 0
    while True:
        r = faults.http("GET", "/api/v1/events", params={"host": faults.witness_host, "kind": WITNESS_KIND,
                                                         "after_id": after, "limit": 1000})
        if r is None or r.status_code != 200:
            raise RuntimeError(f"the controller did not list events: {r.status_code if r is not None else 'away'}")
        page = r.json()
        seqs.update(e["detail"]["n"] for e in page["items"])
        if page["next"] is None:
            return seqs
        after = page["next"]


def clocks_within_bound(lab: Lab, fleet: LabFleet) -> dict[str, Any]:
    """Every host's |error| against its published bound, once all are within it (or time ran out)."""
    reference = fleet.agents.reference
    deadline = time.monotonic() + CLOCK_SETTLE_S
    while True:
        states, clocks, real = read_states(fleet.agents.state_dir), lab.clocks(), time.time_ns()
        errors, bounds = ours_errors(states, clocks, reference, real), ours_bounds(states, clocks, real)
        judged = {h: (e, bounds.get(h)) for h, e in errors.items() if h != reference}
        ok = bool(judged) and all(e is not None and b is not None and abs(e) <= b for e, b in judged.values())
        if ok or time.monotonic() > deadline:
            return {"ok": ok, "errors_ns": {h: e for h, (e, _) in judged.items()},
                    "bounds_ns": {h: b for h, (_, b) in judged.items()}}
        time.sleep(0.5)


def rounds(faults: AllFaults, rng: random.Random) -> Iterator[str]:
    """Fault kinds, round after round: each round every kind the fleet can take, shuffled."""
    while True:
        one = list(faults.kinds())
        rng.shuffle(one)
        yield from one


def soak(lab: Lab, fleet: LabFleet, minutes: float, seed: int, log=None) -> dict[str, Any]:
    """Inject faults for `minutes`, and at least one round, into a started fleet, then judge it."""
    rng = random.Random(seed)
    faults = AllFaults(fleet, rng)
    injected: list[dict[str, Any]] = []
    t0 = time.monotonic()
    kinds = rounds(faults, rng)
    while time.monotonic() - t0 < minutes * 60 or len(injected) < len(faults.kinds()):
        kind = next(kinds)
        started = time.monotonic()
        try:
            seen, detail = getattr(faults, kind)()
        except Exception as e:  # noqa: BLE001 - a fault that could not be injected is reported, not fatal
            seen, detail = False, f"injection failed: {type(e).__name__}: {e}"
        injected.append({"at_s": round(started - t0, 1), "kind": kind, "seen": seen, "detail": detail,
                         "took_s": round(time.monotonic() - started, 1)})
        if log:
            log(f"{injected[-1]['at_s']:7.1f} s  {kind:16s} {'seen' if seen else 'NOT SEEN'}  {detail}")
        faults.sleep(rng.uniform(*GAP_S))
    faults.wait(lambda: not faults.pending and faults.ready(), 30.0)  # the witness's last events stored
    served = served_witness(faults)
    lost = sorted(faults.acked - served)
    clocks = clocks_within_bound(lab, fleet)
    dead_agents = fleet.agents.failed()
    tracebacks = {log.name: n for log in sorted(fleet.logs.glob("*.log"))
                  if (n := log.read_text(errors="replace").count("Traceback (most recent call last)"))}
    by_kind = Counter(f["kind"] for f in injected)
    unseen = [f for f in injected if not f["seen"]]
    return {"minutes": round((time.monotonic() - t0) / 60, 2), "faults": len(injected), "by_kind": dict(by_kind),
            "unseen": unseen, "storage_alert_late": sum(ALERT_LATE in f["detail"] for f in injected),
            "acknowledged": len(faults.acked), "served": len(served), "lost": lost,
            "dead_agents": dead_agents, "controller_ready": faults.ready(), "clocks": clocks,
            "tracebacks": tracebacks,
            "injected": injected}


def verdict(report: dict[str, Any]) -> list[str]:
    """What failed, one line each (empty: the fleet held)."""
    problems = []
    if report["lost"]:
        problems.append(f"{len(report['lost'])} acknowledged events lost: {report['lost'][:10]}")
    if report["dead_agents"]:
        problems.append(f"agents dead: {report['dead_agents']}")
    if not report["controller_ready"]:
        problems.append("the controller is not ready (storage failing or a loop not running)")
    if not report["clocks"]["ok"]:
        problems.append(f"clocks outside their bound: {report['clocks']}")
    if report["storage_alert_late"]:
        problems.append(f"{report['storage_alert_late']} storage faults not alerted in the API within 10 s")
    if report["tracebacks"]:
        problems.append(f"tracebacks in the fleet's logs: {report['tracebacks']}")
    if report["unseen"]:
        problems.append(f"{len(report['unseen'])} faults not seen: {report['unseen'][:5]}")
    return problems


def run_on_new_lab(name: str, minutes: float, seed: int, log=None) -> dict[str, Any]:
    lab = build.up(leafspine(4, 2, 2, host_rate="200mbit"), name)
    with small_disk(lab.dir / "db") as disk:
        fleet = LabFleet(lab, peers=3, db=disk / "controller.db")
        fleet.start()
        try:
            fleet.wait_pushing()
            return soak(lab, fleet, minutes, seed, log)
        finally:
            fleet.stop()


@BENCHMARKS.register("chaos")
def main(minutes: Annotated[float, typer.Option(min=0.1, help="How long to inject faults.")] = 30.0,
         seed: Annotated[int, typer.Option(help="Seeds the choice of faults and their timing.")] = 0,
         json_out: Annotated[bool, typer.Option("--json", help="The report as JSON.")] = False,
         json_path: Annotated[Path | None, typer.Option("--out", help="Where the record goes.")] = None) -> None:
    """Inject faults into a lab fleet for MINUTES, then check what it kept (docs/monitoring.md, Chaos)."""
    require_root()
    facts = machine()
    name = f"chaos{seed % 1000}"
    with labs_removed(name):
        report = run_on_new_lab(name, minutes, seed, log=None if json_out else err.print)
    problems = verdict(report)
    judged = [Target("injected faults", report["faults"], 200, "faults"),
              Target("acknowledged events lost", len(report["lost"]), 0, "events", better="lower"),
              Target("faults not seen", len(report["unseen"]), 0, "faults", better="lower"),
              Target("tracebacks in the fleet's logs", sum(report["tracebacks"].values()), 0, "tracebacks",
                     better="lower"),
              Target("storage faults not alerted within 10 s", report["storage_alert_late"], 0, "faults",
                     better="lower")]
    path = record("chaos", judged, facts, {k: v for k, v in report.items()},
                  figures={"minutes": report["minutes"], "by_kind": report["by_kind"],
                           "acknowledged": report["acknowledged"]}, path=json_path)
    if json_out:
        print_json(report)
        return
    summary = {k: report[k] for k in ("minutes", "faults", "by_kind", "acknowledged", "served")}
    out.print(f"{summary}\nlost {len(report['lost'])}, dead agents {len(report['dead_agents'])}, "
              f"controller ready {report['controller_ready']}, clocks within bound {report['clocks']['ok']}, "
              f"faults not seen {len(report['unseen'])}, "
              f"tracebacks {sum(report['tracebacks'].values())}, "
              f"storage faults the API's alert did not show within 10 s "
              f"{report['storage_alert_late']}\nraw: {path}")
    for p in problems:
        err.print(f"[red]{p}[/red]")
    if problems:
        raise typer.Exit(1)
