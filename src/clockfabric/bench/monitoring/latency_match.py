"""`clockfabric bench monitor-latency`: what it watches (the controller's events, polled; the
baseline scraper's link reads), and each flap matched with the first event and the first
scrape that saw it, summarized."""

from __future__ import annotations

import threading
import time

import httpx
import numpy as np

from clockfabric.controller.token import read_token
from clockfabric.lab import netns
from clockfabric.lab.monitoring import LabFleet
from clockfabric.lab.state import Lab
from clockfabric.topology import Link

POLL_S = 0.02  # the observer's poll of the controller's API


SCRAPE_S = 1.0  # the baseline scraper


SLOW_SCRAPE = 15  # the 15 s scraper: every 15th read of the 1 s one


MISSED_S = 5.0


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


def summarize(transitions: list[dict]) -> dict:
    s: dict = {}
    for kind in ("down", "up", "all"):
        trs = [t for t in transitions if kind == "all" or t["kind"] == kind]
        row: dict = {"transitions": len(trs)}
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
