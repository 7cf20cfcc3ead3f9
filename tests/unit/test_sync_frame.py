"""`clockfabric sync` shows global time's frame (clock.evaluate.Sampler.frame_report, frame_line):
the ensemble's members, since when, and each change of membership, from the frames the agents
publish."""

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


def test_the_ensemble_its_since_and_each_change_of_members_are_reported(tmp_path):
    sampler = make_sampler(tmp_path)
    first = Frame(EPOCH, (("h0", 0.5, 0.0, 0.0), ("h1", 0.5, 10.0, 0.0)))
    publish(tmp_path, {"h0": first, "h1": first, "h2": None})
    sampler.sample()
    sampler.sample()
    report = sampler.frame_report()
    assert report is not None and report["members"] == {"h0": 0.5, "h1": 0.5} and report["changes"] == []
    assert report["since_s"] == sampler.frames[0][0]
    assert frame_line(report).startswith("global time: ensemble of 2 (h0 50%, h1 50%), since ")
    assert frame_line(report).endswith("; no member change")

    later = Frame(EPOCH + 10**9, (("h0", 0.5, 1.0, 0.0), ("h1", 0.5, 11.0, 0.0)))  # a new solve, same members
    publish(tmp_path, {"h0": first, "h1": later, "h2": later})  # h0 has not heard it yet: the newest wins
    sampler.sample()
    assert sampler.frame_report()["t0_ns"] == EPOCH + 10**9 and sampler.frame_report()["changes"] == []

    moved = Frame(EPOCH + 2 * 10**9, (("h1", 0.6, 12.0, 0.0), ("h2", 0.4, -250.0, 3e-8)), utc_ns=-1_234.0)
    publish(tmp_path, {"h0": first, "h1": moved, "h2": moved})  # h0 lost, h2 joined
    sampler.sample()
    report = sampler.frame_report()
    assert report is not None and report["members"] == {"h1": 0.6, "h2": 0.4} and report["anchor"] == "h1"
    (change,) = report["changes"]
    assert (change["joined"], change["left"]) == (["h2"], ["h0"]) and change["at_s"] == report["since_s"]
    line = frame_line(report)
    assert "ensemble of 2 (h1 60%, h2 40%)" in line and "-1,234 ns from UTC" in line
    assert f"changes: +h2 -h0 at {change['at_s']:.1f} s" in line
    json.dumps(report)  # it goes in `sync --json` as it is
