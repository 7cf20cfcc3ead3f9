"""`clockfabric sync` shows global time's frame (clock.evaluate.Sampler.frame_report, frame_line):
the anchor host, since when, and the handovers, from the frames the agents publish."""

from __future__ import annotations

import json
from types import SimpleNamespace

from clockfabric.clock.evaluate import Sampler, frame_line
from clockfabric.clock.mapping import Mapping
from clockfabric.clock.timescale import Frame
from clockfabric.clock.vclock import VirtualClock

EPOCH = 1_700_000_000 * 10**9


def publish(state_dir, frames: dict[str, Frame | None]) -> None:
    for host, frame in frames.items():
        state = {"mapping": Mapping(EPOCH, 0.0, 0.0, 10.0).as_dict(), "frame": frame.as_dict() if frame else None}
        (state_dir / f"{host}.json").write_text(json.dumps(state))


def make_sampler(tmp_path) -> Sampler:
    clocks = {h: VirtualClock(h, EPOCH, 0, 0.0) for h in ("h0", "h1", "h2")}
    return Sampler(SimpleNamespace(clocks=lambda: clocks), tmp_path, "h0")


def test_no_frame_is_said_until_a_solve_names_one(tmp_path):
    sampler = make_sampler(tmp_path)
    publish(tmp_path, {"h0": None, "h1": None})
    sampler.sample()
    assert sampler.frame_report() is None
    assert frame_line(None) == "global time: no frame yet (no solve reached the agents)"


def test_the_frame_its_since_and_each_handover_are_reported(tmp_path):
    sampler = make_sampler(tmp_path)
    first = Frame("h0", EPOCH)
    publish(tmp_path, {"h0": first, "h1": first, "h2": None})
    sampler.sample()
    sampler.sample()  # the same frame again: no change
    report = sampler.frame_report()
    assert report is not None and report["anchor"] == "h0" and report["handovers"] == []
    assert report["since_s"] == sampler.frames[0][0]
    assert frame_line(report).startswith("global time: h0's clock, since ") and frame_line(report).endswith(
        "; no handover")

    carried = Frame("h2", EPOCH + 10**9, -250.0, 3e-8)  # the reference lost: h2 takes over, carrying its mapping
    publish(tmp_path, {"h0": first, "h1": carried, "h2": carried})  # h0 has not heard it yet: the newest wins
    sampler.sample()
    report = sampler.frame_report()
    assert report is not None
    assert (report["anchor"], report["t0_ns"], report["offset_ns"], report["drift"]) == ("h2", EPOCH + 10**9,
                                                                                          -250.0, 3e-8)
    (handover,) = report["handovers"]
    assert (handover["from"], handover["to"]) == ("h0", "h2") and handover["at_s"] == report["since_s"]
    assert report["since_s"] >= sampler.frames[0][0]
    line = frame_line(report)
    assert "h2's clock read through offset -250 ns, drift +30.0 ppb" in line
    assert f"handovers: h0 -> h2 at {handover['at_s']:.1f} s" in line
    json.dumps(report)  # it goes in `sync --json` as it is
