"""The class stream on a real lab with traffic classes: a flood marked with the collective DSCP
holds that class's queue full on a slowed leaf-to-spine link. The agents' probes in the collective
class read that queue on the paths across the link and not on the paths beside it, while the
clock's probes, in the priority class, pass it: the delays root cause needs, with the clock kept
out of them."""

from __future__ import annotations

import dataclasses
import statistics
import sys
import time

from clockfabric.clock.evaluate import read_states
from clockfabric.lab import impair, netns, process
from clockfabric.lab.agents import LabAgents
from clockfabric.lab.shaping import LEAVES
from clockfabric.topology import TrafficClasses, leafspine
from tests.waiting import wait_for

SLOW_BPS, COLLECTIVE = 10_000_000, 26
FLOOD = """
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, int(sys.argv[3]) << 2)
dst, gap, data, start, sent = (sys.argv[1], 5400), 1442 * 8 / float(sys.argv[2]), b"x" * 1400, time.monotonic(), 0
while True:
    owed = int((time.monotonic() - start) / gap) + 1
    for _ in range(owed - sent):
        try:
            s.sendto(data, dst)
        except OSError:
            pass
    sent = owed
    time.sleep(gap)
"""


def _excess_ms(state: dict, dst: str, rows: str) -> list[float]:
    """Each of the state's `rows` ("owd": the clock's, "class_owd") out to `dst`: its p50 above the
    path's floor, in ms."""
    floors = {r["path"]: r["floor_ns"] for r in state.get("owd", []) if r["src"] == state["host"] and r["dst"] == dst}
    return [(r["p50_ns"] - floors[r["path"]]) / 1e6 for r in state.get(rows, [])
            if r["src"] == state["host"] and r["dst"] == dst and r["path"] in floors]


def _newest_of_each_path(agents: LabAgents, seconds: float) -> dict | None:
    """h0's state with, for each of its delay rows, the newest reading of its path over `seconds`;
    None unless every peer has both kinds."""
    merged: dict = {}
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        state = read_states(agents.state_dir).get("h0") or {}
        merged["host"] = state.get("host", merged.get("host"))
        for rows in ("owd", "class_owd"):
            kept = merged.setdefault(rows, {})
            kept |= {(r["src"], r["dst"], r["path"]): r for r in state.get(rows, [])}
        time.sleep(0.5)
    state = {"host": merged.get("host"), **{rows: list(merged.get(rows, {}).values()) for rows in ("owd", "class_owd")}}
    return state if all(_excess_ms(state, dst, "class_owd") and _excess_ms(state, dst, "owd")
                        for dst in ("h1", "h2", "h3")) else None


def test_class_probes_read_the_collective_queue_the_clocks_pass(make_lab):
    lab = make_lab(dataclasses.replace(leafspine(4, 2, 1), classes=TrafficClasses()))
    link = impair.find_link(lab, "leaf0", "spine0")
    impair.set_rate(lab, link, SLOW_BPS)
    port = link.a if link.a.node == "leaf0" else link.b
    h3 = str(lab.topology.hosts["h3"].address)
    flood = lab.spawn("h1", [sys.executable, "-c", FLOOD, h3, str(SLOW_BPS * 1.05), str(COLLECTIVE)],
                      "collective-class flood h1 -> h3", log=lab.dir / "logs" / "flood.log")
    agents = LabAgents(lab, peers=3)
    agents.start()
    try:
        def measured() -> dict | None:
            assert not agents.failed(), agents.failed()
            state = read_states(agents.state_dir).get("h0")
            ok = state and all(_excess_ms(state, dst, "class_owd") and _excess_ms(state, dst, "owd")
                               for dst in ("h1", "h2", "h3"))
            return state if ok else None

        wait_for("h0's class and clock delays to every peer", measured, timeout_s=90, every_s=1.0)
        # a few seconds under the flood, each path's newest reading kept, as the engine keeps it: a
        # reading spans a window, and a path whose class probes the full queue dropped has none in one
        state = _newest_of_each_path(agents, seconds=6.0)
        with netns.ipr(lab.ns(port.node)) as ipr:
            index = ipr.link_lookup(ifname=port.iface)[0]
            fifo, = [q for q in ipr.get_qdiscs(index=index) if q["parent"] == LEAVES["collective"]]
            backlog = fifo.get_attr("TCA_STATS")["backlog"]
    finally:
        agents.stop()
        process.stop([flood])
    assert state is not None
    across = [x for dst in ("h2", "h3") for x in _excess_ms(state, dst, "class_owd")]
    beside = _excess_ms(state, "h1", "class_owd")
    clock = [x for dst in ("h2", "h3") for x in _excess_ms(state, dst, "owd")]
    print(f"\ncollective queue {backlog} B on {port.node}:{port.iface}; h0's delays over the floor (ms): "
          f"class stream across {[round(x, 2) for x in across]}, beside {[round(x, 2) for x in beside]}; "
          f"clock across {[round(x, 2) for x in clock]}")
    assert backlog > 10_000  # the flood held the collective class's queue
    assert {r["dscp"] for r in state["class_owd"]} == {COLLECTIVE}
    # a full collective queue at 10 Mbit/s is many ms; the clock's probes pass it in the priority class
    assert statistics.median(across) > 5.0 and max(clock) < 1.0
    assert max(beside) < 1.0
