"""Forged and replayed datagrams on a real lab: keyed agents sync, and a lab host without the key
sends forged probe replies, forged clock maps (from the solver's own address, and from another
host's) and genuine packets it captured, sent again. No clock moves and every one is counted."""

from __future__ import annotations

import time

from clockfabric.agent.config import CONTROL_PORT
from clockfabric.bench.auth import forge
from clockfabric.clock.evaluate import Sampler, read_states
from clockfabric.lab.agents import LabAgents
from clockfabric.topology import leafspine
from tests.waiting import wait_for

SYNCED_NS = 50_000  # every host this close to the truth before and after (a forgery moves 0.5 s to 1000 s)
FIT_MOVE_NS = 1_000_000  # a pair fit's offset, carried along its drift, moves less than this
BASE, PORTS = 7300, 4  # the agents' probe ports: reflectors BASE.., probers BASE + PORTS..


def _rejected(states: dict, host: str, channel: str, reason: str) -> int:
    return states[host]["auth"]["rejected"].get(channel, {}).get(reason, 0)


def _fits(states: dict) -> dict[tuple[str, str], dict]:
    return {(h, p): pair["fit"] for h, s in states.items() for p, pair in s.get("pairs", {}).items() if pair["fit"]}


def _synced(sampler: Sampler, hosts: int) -> dict:
    errors = sampler.sample()
    good = [e for h, e in errors.items() if h != sampler.reference and e is not None and abs(e) <= SYNCED_NS]
    return errors if len(good) == hosts - 1 else {}


def test_forged_and_replayed_datagrams_move_no_clock_and_are_counted(make_lab):
    lab = make_lab(leafspine(4, 2, 2))
    address = {h: str(n.address) for h, n in lab.topology.hosts.items()}
    agents = LabAgents(lab, peers=3)
    sampler = Sampler(lab, agents.state_dir, agents.reference)
    agents.start()
    try:
        agents.wait_publishing()
        wait_for("every host synced", lambda: _synced(sampler, len(address)), timeout_s=60, every_s=0.5)
        before = read_states(agents.state_dir)
        probers = ",".join(str(BASE + PORTS + k) for k in range(PORTS))
        reflectors = ",".join(str(BASE + k) for k in range(PORTS))
        sent = {
            "reply": forge.on_host(lab, "h2", "reply", "--to", address["h1"], "--ports", probers, "--count", "50"),
            "map_as_solver": forge.on_host(lab, "h0", "map", "--to", address["h1"], "--victim", "h1",
                                           "--shift-ns=-1e12", "--count", "20"),
            "map_as_peer": forge.on_host(lab, "h2", "map", "--to", address["h1"], "--victim", "h1",
                                         "--shift-ns", "5e8", "--count", "20"),
            "replayed_report": forge.on_host(lab, "h1", "replay", "--ports", str(CONTROL_PORT), "--count", "5"),
            "replayed_probe": forge.on_host(lab, "h1", "replay", "--ports", reflectors, "--count", "5"),
        }
        assert sent == {"reply": 100, "map_as_solver": 20, "map_as_peer": 20, "replayed_report": 5,
                        "replayed_probe": 5}, sent
        time.sleep(3)  # several updates and solves after the forgeries
        assert not agents.failed(), agents.failed()
        errors = wait_for("every host still synced", lambda: _synced(sampler, len(address)), timeout_s=10)
        after = read_states(agents.state_dir)
    finally:
        agents.stop()
    print(f"\nsent {sent}; errors after (ns) {errors}")
    assert all(abs(e) <= SYNCED_NS for h, e in errors.items() if h != sampler.reference), errors
    fits_before, fits_after = _fits(before), _fits(after)
    for key, fit in fits_after.items():
        if (old := fits_before.get(key)) is not None:
            carried = old["offset_ns"] + old["drift"] * (fit["center_ns"] - old["center_ns"])
            assert abs(fit["offset_ns"] - carried) < FIT_MOVE_NS, (key, old, fit)
    grew = {(h, c, r): _rejected(after, h, c, r) - _rejected(before, h, c, r)
            for h in after for c in ("probe", "control") for r in ("bad_mac", "replay")}
    print(f"rejected, by host, channel and reason: {grew}")
    assert grew["h1", "probe", "bad_mac"] >= sent["reply"]
    assert grew["h1", "control", "bad_mac"] >= sent["map_as_solver"] + sent["map_as_peer"]
    assert grew["h0", "control", "replay"] >= sent["replayed_report"]  # h1's report went to the solver, h0
    assert sum(grew[h, "probe", "replay"] for h in after if h != "h1") >= sent["replayed_probe"]
