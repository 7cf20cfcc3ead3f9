#!/usr/bin/env python3
"""Fleet monitoring: detection latency, link flap to event at the controller. Target: p99 <= 1 s on the lab.

Lab: leafspine(4, 2, 2, host_rate="200mbit"), the fleet started as `tests/lab/test_monitoring.py`
starts it (LabFleet(lab, peers=3): controller on h0, a switch agent on every switch, a pushing
agent on every host). The bench flaps links N times, taking turns over leaf0-spine1,
leaf1-spine0, h1's link and h2's link (each cable pull takes the link's far end down with
impair.set_link; the other end loses carrier). Each down and each up is 1.0-1.5 s after the
previous transition (random, fixed seed: so flap damping and ordering do not interfere, and the
transitions fall at every phase of the baseline's scrape); all links are left up.

t0 is time.time_ns() just before the set_link call (the lab's switches run on the machine's true
clock). For each transition:
  - arrival latency: when the controller's API first has an event of that kind from either end
    of that link, minus t0. An observer thread inside h0 polls GET /api/v1/events (cursor
    after_id) every 20 ms over one kept-alive connection; an event's arrival is the time the
    reply that first holds it came back. Per end too: the far end (the port set down) and the near
    end (carrier loss; a host NIC's events can only leave the host once its link is back up).
  - stamp error: the event's t_ns minus t0, in the timeline the event is stamped in: switch events
    (synced: false) in true time; host events in global time, i.e. the reference host's virtual
    clock at t0 (or the host's own clock if it was not synced yet). Positive: stamped after the call
    started, as it must be; negative would be a stamp before the cause.
  - missed: no event within 5 s (reported, never dropped from the count).

Baseline, in the same run on the same flaps: a scraper like Prometheus scraping link state (the
node_exporter's operstate/carrier and carrier_changes_total, or SNMP ifOperStatus polling) every
1 s. A thread reads every end of the four links in its node's namespace by netlink
(ipr.link("get")) and a transition counts as seen at the first read after t0 whose state differs
from the last read before t0, or whose carrier_changes grew (so a flap shorter than a scrape is
still seen: the best any scrape can do; no rule evaluation interval or `for:` is added). The 15 s
(Prometheus' default interval) line is derived from the same reads: every 15th read, over all 15
phases, transitions with no later read of that phase left out. Headline: baseline p99 / ours p99.

    sudo .venv/bin/python bench/monitor_latency.py [--flaps 40] [--json PATH]
"""

from __future__ import annotations

import json
import os
import platform
import random
import signal
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import httpx
import numpy as np
import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from clockfabric.controller.on_lab import LabFleet
from clockfabric.controller.token import read_token
from clockfabric.errors import ClockfabricError
from clockfabric.lab import build, impair, netns
from clockfabric.lab.state import Lab, lab_namespaces
from clockfabric.topology import Link, leafspine

LAB = "bench-mlat"
LINKS = (("leaf0", "spine1"), ("leaf1", "spine0"), ("h1", "leaf0"), ("h2", "leaf1"))
GAP_S = (1.0, 1.5)  # between transitions
POLL_S = 0.02  # the observer's poll of the controller's API
SCRAPE_S = 1.0  # the baseline scraper
SLOW_SCRAPE = 15  # the 15 s scraper: every 15th read of the 1 s one
MISSED_S = 5.0
TARGET_P99_S = 1.0
DEFAULT_JSON = Path(__file__).resolve().parent / "results" / "monitor_latency.json"

out = Console()
if not out.is_terminal:
    out = Console(width=160)  # a log or a pipe: keep the table's columns readable
err = Console(stderr=True)


class BenchError(Exception):
    pass


# ---- the observer: our events as the controller's API has them --------------------------------------
class Observer(threading.Thread):
    """Polls GET /api/v1/events from inside the controller's host; keeps (arrival ns, event)."""

    def __init__(self, fleet: LabFleet):
        super().__init__(name="observer", daemon=True)
        self.fleet = fleet
        self.arrived: list[tuple[int, dict]] = []
        self.polls: list[int] = []  # each poll's round trip, ns
        self.errors = 0
        self.stopping = threading.Event()
        self.after_id = 0

    def skip_existing(self, client: httpx.Client) -> None:
        while True:
            page = client.get("/api/v1/events", params={"after_id": self.after_id, "limit": 1000}).json()
            if not page["items"]:
                return
            self.after_id = page["items"][-1]["id"]

    def run(self) -> None:
        token = read_token(self.fleet.token_file)
        with netns.entered(self.fleet.lab.ns(self.fleet.host)), \
                httpx.Client(base_url=self.fleet.url, headers={"Authorization": f"Bearer {token}"},
                             timeout=2.0) as client:
            self.skip_existing(client)
            while not self.stopping.is_set():
                t = time.time_ns()
                try:
                    while True:
                        r = client.get("/api/v1/events", params={"after_id": self.after_id, "limit": 1000})
                        r.raise_for_status()
                        page, now = r.json(), time.time_ns()
                        for e in page["items"]:
                            self.arrived.append((now, e))
                            self.after_id = e["id"]
                        if page.get("next") is None:
                            break
                    self.polls.append(time.time_ns() - t)
                except (httpx.HTTPError, ValueError):
                    self.errors += 1
                self.stopping.wait(max(0.0, POLL_S - (time.time_ns() - t) / 1e9))


# ---- the baseline: a 1 s scrape of link state ---------------------------------------------------------
class Scraper(threading.Thread):
    """Every SCRAPE_S, each watched end's (operstate, carrier, carrier_changes) by netlink."""

    def __init__(self, lab: Lab, links: list[Link]):
        super().__init__(name="scraper", daemon=True)
        self.lab, self.links = lab, links
        self.reads: list[tuple[int, dict[str, tuple]]] = []  # (t_ns after the read, link name -> state)
        self.stopping = threading.Event()
        self.failures = 0

    def run(self) -> None:
        nodes = sorted({p.node for ln in self.links for p in (ln.a, ln.b)})
        socks = {n: netns.ipr(self.lab.ns(n)) for n in nodes}
        try:
            next_t = time.monotonic()
            while not self.stopping.is_set():
                read = {}
                for ln in self.links:
                    ends = []
                    for p in (ln.a, ln.b):
                        try:
                            msg = socks[p.node].link("get", ifname=p.iface)[0]
                            ends.append((msg.get_attr("IFLA_OPERSTATE"), msg.get_attr("IFLA_CARRIER"),
                                         msg.get_attr("IFLA_CARRIER_CHANGES")))
                        except Exception:  # noqa: BLE001 - a failed scrape is a gap, as in Prometheus
                            self.failures += 1
                            ends.append((None, None, None))
                    read[ln.name] = tuple(ends)
                self.reads.append((time.time_ns(), read))
                next_t += SCRAPE_S
                self.stopping.wait(max(0.0, next_t - time.monotonic()))
        finally:
            for s in socks.values():
                s.close()


def link_view(ends: tuple) -> tuple[bool | None, int | None]:
    """(up: every end's operstate UP, sum of carrier_changes) of one read of one link."""
    if any(op is None for op, _, _ in ends):
        return None, None
    return all(op == "UP" for op, _, _ in ends), sum(cc or 0 for _, _, cc in ends)


def scrape_detect(reads: list[tuple[int, dict]], link: str, t0: int, horizon_ns: int | None) -> int | None:
    """Arrival ns of the first read after t0 that shows a change since the last read before t0."""
    before = [r for r in reads if r[0] <= t0]
    if not before:
        return None
    base_up, base_cc = link_view(before[-1][1][link])
    for t, read in reads[len(before):]:
        if horizon_ns is not None and t - t0 > horizon_ns:
            return None
        up, cc = link_view(read[link])
        if up is None:
            continue
        if up != base_up or (cc is not None and base_cc is not None and cc > base_cc):
            return t
    return None


# ---- running --------------------------------------------------------------------------------------------
def flap_all(lab: Lab, links: list[Link], flaps: int, bar: Progress, task) -> list[dict]:
    rng = random.Random(7)
    transitions = []
    next_t = time.monotonic() + 1.0
    for i in range(flaps):
        link = links[i % len(links)]
        for up in (False, True):
            time.sleep(max(0.0, next_t - time.monotonic()))
            t0 = time.time_ns()
            impair.set_link(lab, link, up=up)
            t1 = time.time_ns()
            transitions.append({"flap": i, "link": link.name, "kind": "up" if up else "down", "t0_ns": t0,
                                "set_link_s": (t1 - t0) / 1e9})
            next_t = time.monotonic() + rng.uniform(*GAP_S) - (t1 - t0) / 1e9
        bar.advance(task)
        if not err.is_terminal and (i + 1) % 10 == 0:
            err.print(f"flaps: {i + 1}/{flaps}")
    return transitions


def expected_stamp(e: dict, t0: int, clocks: dict, reference: str, switches: set[str]) -> int:
    """Where t0 lies in the timeline the event was stamped in."""
    if e["host"] in switches or e["host"] not in clocks:
        return t0
    return clocks[reference if e.get("synced") else e["host"]].local_ns(t0)


def match(transitions: list[dict], arrived: list[tuple[int, dict]], links: dict[str, Link], far: dict[str, str],
          clocks: dict, reference: str, switches: set[str]) -> tuple[list[dict], list[dict]]:
    """Give each transition its first event per end, within MISSED_S; returns (transitions, unmatched)."""
    used = set()
    miss_ns = int(MISSED_S * 1e9)
    for tr in transitions:
        link, t0 = links[tr["link"]], tr["t0_ns"]
        tr["ends"] = {}
        for port in (link.a, link.b):
            cands = [(at, e) for at, e in arrived if e["id"] not in used and e["host"] == port.node
                     and e["device"] == port.iface and e["kind"] == f"link_{tr['kind']}" and t0 <= at <= t0 + miss_ns
                     and e["t_ns"] - expected_stamp(e, t0, clocks, reference, switches) > -500_000_000]
            role = "far" if str(port) == far[link.name] else "near"
            if not cands:
                tr["ends"][role] = {"port": str(port), "missed": True, "switch": port.node in switches}
                continue
            at, e = min(cands, key=lambda c: (c[0], c[1]["id"]))
            used.add(e["id"])
            tr["ends"][role] = {"port": str(port), "missed": False, "arrival_s": (at - t0) / 1e9,
                                "stamp_error_s": (e["t_ns"] - expected_stamp(e, t0, clocks, reference, switches)) / 1e9,
                                "synced": e.get("synced"), "switch": port.node in switches, "event_id": e["id"]}
        got = [(role, x) for role, x in tr["ends"].items() if not x["missed"]]
        if got:
            role, first = min(got, key=lambda rx: rx[1]["arrival_s"])
            tr["ours"] = {"missed": False, "arrival_s": first["arrival_s"], "stamp_error_s": first["stamp_error_s"],
                          "first_end": role, "first_port": first["port"]}
        else:
            tr["ours"] = {"missed": True}
    link_ports = {(p.node, p.iface) for ln in links.values() for p in (ln.a, ln.b)}
    unmatched = [dict(e, arrival_ns=at) for at, e in arrived if e["id"] not in used
                 and e["kind"] in ("link_down", "link_up") and (e["host"], e["device"]) in link_ports]
    return transitions, unmatched


def baseline(transitions: list[dict], reads: list) -> None:
    for tr in transitions:
        at = scrape_detect(reads, tr["link"], tr["t0_ns"], int(MISSED_S * 1e9))
        tr["scrape_1s"] = {"missed": at is None, "arrival_s": None if at is None else (at - tr["t0_ns"]) / 1e9}
        slow = []
        for phase in range(SLOW_SCRAPE):
            sub = reads[phase::SLOW_SCRAPE]
            if not sub or sub[-1][0] <= tr["t0_ns"] or sub[0][0] > tr["t0_ns"]:
                continue  # no read of this phase before or after: censored, not missed
            at = scrape_detect(sub, tr["link"], tr["t0_ns"], None)
            slow.append(None if at is None else (at - tr["t0_ns"]) / 1e9)
        tr["scrape_15s"] = slow


# ---- report ---------------------------------------------------------------------------------------------
def stats(xs: list[float]) -> dict:
    if not xs:
        return {"n": 0, "p50_s": None, "p99_s": None, "max_s": None, "min_s": None}
    a = np.array(xs)
    return {"n": len(xs), "p50_s": float(np.percentile(a, 50)), "p99_s": float(np.percentile(a, 99)),
            "max_s": float(a.max()), "min_s": float(a.min())}


def ms(x: float | None) -> str:
    return "-" if x is None else f"{x * 1e3:.0f}" if abs(x) >= 0.0995 else f"{x * 1e3:.1f}"


def summarize(transitions: list[dict]) -> dict:
    s: dict = {}
    for kind in ("down", "up", "all"):
        trs = [t for t in transitions if kind == "all" or t["kind"] == kind]
        row = {"transitions": len(trs)}
        row["ours"] = stats([t["ours"]["arrival_s"] for t in trs if not t["ours"]["missed"]])
        row["ours"]["missed"] = sum(t["ours"]["missed"] for t in trs)
        for role in ("far", "near"):
            for who in ("switch", "host"):
                xs = [t["ends"][role] for t in trs if t["ends"][role]["switch"] == (who == "switch")]
                if not xs:
                    continue
                got = [x for x in xs if not x["missed"]]
                row[f"{role}_{who}"] = stats([x["arrival_s"] for x in got]) | {
                    "missed": len(xs) - len(got), "stamp_error": stats([x["stamp_error_s"] for x in got])}
        row["ours_stamp_error"] = stats([t["ours"]["stamp_error_s"] for t in trs if not t["ours"]["missed"]])
        row["stamped_before_call"] = sum(1 for t in trs for x in t["ends"].values()
                                         if not x["missed"] and x["stamp_error_s"] < 0)
        row["scrape_1s"] = stats([t["scrape_1s"]["arrival_s"] for t in trs if not t["scrape_1s"]["missed"]])
        row["scrape_1s"]["missed"] = sum(t["scrape_1s"]["missed"] for t in trs)
        slow = [x for t in trs for x in t["scrape_15s"]]
        row["scrape_15s"] = stats([x for x in slow if x is not None]) | {
            "missed": sum(x is None for x in slow), "samples": len(slow)}
        s[kind] = row
    return s


def report(summary: dict, notes: list[str]) -> dict:
    table = Table(title="Link flap -> event at the controller: arrival latency, ms (t0 = just before set_link)")
    for col in ("what", "transitions", "p50", "p99", "max", "missed", "stamp err p50 / max", "target / ratio"):
        table.add_column(col, justify="left" if col == "what" else "right")
    targets, ratios = {}, {}
    for kind in ("down", "up", "all"):
        row = summary[kind]
        o, b1, b15 = row["ours"], row["scrape_1s"], row["scrape_15s"]
        met = o["p99_s"] is not None and o["p99_s"] <= TARGET_P99_S and o["missed"] == 0
        targets[kind] = {"p99_s": o["p99_s"], "target_s": TARGET_P99_S, "missed": o["missed"], "met": met}
        r1 = b1["p99_s"] / o["p99_s"] if o["p99_s"] and b1["p99_s"] else None
        r15 = b15["p99_s"] / o["p99_s"] if o["p99_s"] and b15["p99_s"] else None
        ratios[kind] = {"scrape_1s_p99_over_ours_p99": r1, "scrape_15s_p99_over_ours_p99": r15}
        se = row["ours_stamp_error"]
        table.add_row(f"[bold]{kind}: ours (first event, either end)", str(row["transitions"]), ms(o["p50_s"]),
                      ms(o["p99_s"]), ms(o["max_s"]), str(o["missed"]), f"{ms(se['p50_s'])} / {ms(se['max_s'])}",
                      f"p99<={TARGET_P99_S:.0f}s {'[green]met' if met else '[red]MISSED'}[/]")
        for key, label in (("far_switch", "far end, switch port set down"),
                           ("near_switch", "near end, switch port (carrier loss)"),
                           ("near_host", "near end, host NIC (carrier loss)")):
            if key in row:
                x = row[key]
                table.add_row(f"  {kind}: {label}", str(x["n"] + x["missed"]), ms(x["p50_s"]), ms(x["p99_s"]),
                              ms(x["max_s"]), str(x["missed"]),
                              f"{ms(x['stamp_error']['p50_s'])} / {ms(x['stamp_error']['max_s'])}", "")
        table.add_row(f"  {kind}: baseline, 1 s scrape", str(row["transitions"]), ms(b1["p50_s"]), ms(b1["p99_s"]),
                      ms(b1["max_s"]), str(b1["missed"]), "", "-" if r1 is None else f"{r1:.1f}× ours", end_section=False)
        table.add_row(f"  {kind}: baseline, 15 s scrape (derived)", f"{b15['samples']} (x phases)", ms(b15["p50_s"]),
                      ms(b15["p99_s"]), ms(b15["max_s"]), str(b15["missed"]), "",
                      "-" if r15 is None else f"{r15:.1f}× ours", end_section=kind != "all")
    out.print(table)
    r = ratios["all"]["scrape_1s_p99_over_ours_p99"]
    out.print(f"headline: p99 arrival, ours {ms(summary['all']['ours']['p99_s'])} ms vs a 1 s scrape "
              f"{ms(summary['all']['scrape_1s']['p99_s'])} ms: " + ("-" if r is None else f"{r:.1f}× better"))
    for note in notes:
        out.print(f"note: {note}")
    return {"targets": targets, "ratios": ratios}


def machine() -> dict:
    cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")), "unknown")
    try:
        import pyroute2
        pr2 = pyroute2.__version__
    except Exception:  # noqa: BLE001 - informational only
        pr2 = "unknown"
    return {"nproc": len(os.sched_getaffinity(0)), "cpu": cpu, "kernel": platform.release(),
            "python": platform.python_version(), "pyroute2": pr2, "httpx": httpx.__version__,
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "loadavg_start": Path("/proc/loadavg").read_text().split()[:3]}


def leftovers() -> list[str]:
    return lab_namespaces(LAB)


def main(flaps: Annotated[int, typer.Option(min=1, help="Down-up cycles, taking turns over the 4 links.")] = 40,
         json_path: Annotated[Path, typer.Option("--json", help="Where to write the results.")] = DEFAULT_JSON,
         ) -> None:
    if os.geteuid() != 0:
        err.print("monitor_latency needs root (it creates network namespaces); run it with sudo")
        raise typer.Exit(2)
    json_path.parent.mkdir(parents=True, exist_ok=True)

    def on_term(*_):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, on_term)

    if leftovers():
        err.print(f"removing lab {LAB} left by an earlier run of this benchmark")
        build.down(LAB)
    info = machine()
    notes = [(f"observer polls the controller's API every {POLL_S * 1e3:.0f} ms from h0 (arrival is quantized by "
             "the poll and includes its round trip)"),
             "baseline reads state and carrier_changes of both ends of each link; no rule evaluation delay added",
             (f"15 s scrape derived from every {SLOW_SCRAPE}th 1 s read, pooled over all phases; a flap that "
             "comes and goes between two reads is seen by carrier_changes")]
    status, code = "ok", 0
    transitions: list[dict] = []
    unmatched: list[dict] = []
    obs = scraper = None
    started = time.monotonic()
    try:
        err.print(f"lab up {LAB}: leafspine(4, 2, 2, host_rate=200mbit)")
        lab = build.up(leafspine(4, 2, 2, host_rate="200mbit"), LAB)
        links = [lab.topology.find_link(a, b) for a, b in LINKS]
        fleet = LabFleet(lab, peers=3)
        fleet.start()
        try:
            fleet.wait_pushing()
            nodes = len(lab.topology.hosts) + len(lab.topology.switches)
            obs, scraper = Observer(fleet), Scraper(lab, links)
            obs.start()
            scraper.start()
            time.sleep(2 * SCRAPE_S)  # reads before the first flap
            info["fleet_start_s"] = round(time.monotonic() - started, 1)
            err.print(f"fleet pushing ({nodes} nodes) after {info['fleet_start_s']} s; flapping")
            with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                          TimeElapsedColumn(), console=err, transient=True) as bar:
                task = bar.add_task("flaps", total=flaps)
                try:
                    transitions = flap_all(lab, links, flaps, bar, task)
                finally:
                    for ln in links:  # leave every link up, also after an error
                        if lab.topology.links.index(ln) in lab.failed_links():
                            impair.set_link(lab, ln, up=True)
                task2 = bar.add_task("late events", total=int(MISSED_S * 10))
                for _ in range(int(MISSED_S * 10)):
                    time.sleep(0.1)
                    bar.advance(task2)
            obs.stopping.set()
            scraper.stopping.set()
            obs.join(5)
            scraper.join(5)
            clocks = lab.clocks()
            far = {ln.name: str(impair.far_end(lab, ln)) for ln in links}
            transitions, unmatched = match(transitions, obs.arrived, {ln.name: ln for ln in links}, far, clocks,
                                           fleet.agents.reference, set(lab.topology.switches))
            baseline(transitions, scraper.reads)
            info["observer"] = {"polls": len(obs.polls), "poll_errors": obs.errors,
                                "poll_rtt_p50_ms": float(np.percentile(obs.polls, 50)) / 1e6 if obs.polls else None,
                                "poll_rtt_p99_ms": float(np.percentile(obs.polls, 99)) / 1e6 if obs.polls else None}
            info["scraper"] = {"reads": len(scraper.reads), "read_failures": scraper.failures}
            info["agents_alive"] = sum(p.poll() is None for p in fleet.procs + fleet.agents.procs)
        finally:
            if obs:
                obs.stopping.set()
            if scraper:
                scraper.stopping.set()
            fleet.stop()
    except KeyboardInterrupt:
        status, code = "interrupted", 130
        err.print("interrupted; cleaning up")
    except (BenchError, ClockfabricError, httpx.HTTPError) as e:
        status, code = f"failed: {e}", 1
        err.print(f"[red]benchmark failed:[/] {e}")
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not stop the cleanup
        try:
            build.down(LAB)
        except Exception as e:  # noqa: BLE001 - report, keep going
            err.print(f"[red]clockfabric lab down {LAB}: {e}")
        signal.signal(signal.SIGINT, signal.default_int_handler)
        if leftovers():
            err.print(f"[red]lab {LAB} left namespaces: {', '.join(leftovers())}; try: clockfabric lab down {LAB}")
            code = code or 1
    info["loadavg_end"] = Path("/proc/loadavg").read_text().split()[:3]
    info["wall_s"] = round(time.monotonic() - started, 1)
    done = [t for t in transitions if "ours" in t]
    summary = summarize(done) if done else {}
    if unmatched:
        notes.append(f"{len(unmatched)} link events on the flapped links matched no transition "
                     "(duplicates, or later than 5 s): listed under `unmatched_events`")
    early = summary.get("all", {}).get("stamped_before_call", 0)
    if early:
        notes.append(f"{early} events were stamped before t0 (the time just before set_link)")
    result = report(summary, notes) if summary else {}
    data = {"benchmark": "monitor_latency", "status": status, "machine": info,
            "params": {"flaps": flaps, "topology": "leafspine(4, 2, 2, host_rate=200mbit)", "peers": 3,
                       "links": [f"{a}-{b}" for a, b in LINKS], "gap_s": GAP_S, "poll_s": POLL_S,
                       "scrape_s": SCRAPE_S, "slow_scrape_s": SLOW_SCRAPE * SCRAPE_S, "missed_after_s": MISSED_S,
                       "target_p99_s": TARGET_P99_S},
            "summary": summary, **result, "transitions": done, "unmatched_events": unmatched, "notes": notes}
    json_path.write_text(json.dumps(data, indent=2, default=str) + "\n")
    err.print(f"results written to {json_path}")
    if code == 0 and result and not result["targets"]["all"]["met"]:
        code = 1
    raise typer.Exit(code)


if __name__ == "__main__":
    typer.run(main)
