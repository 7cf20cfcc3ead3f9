"""Slurm's side of a job's spares, against a stand-in scontrol on PATH that records its argv."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from clockfabric.train import slurm
from clockfabric.train.slurm import Slurm


@pytest.fixture
def scontrol(tmp_path, monkeypatch):
    """A stand-in scontrol: each call's argv, one argument a line, then a blank line; it exits
    with the code in `exit` (0 if absent), and a line on stderr when not 0."""
    calls = tmp_path / "calls"
    fake = tmp_path / "bin" / "scontrol"
    fake.parent.mkdir()
    fake.write_text(f"#!/bin/sh\nfor a in \"$@\"; do printf '%s\\n' \"$a\" >> {calls}; done\necho >> {calls}\n"
                    f"code=$(cat {tmp_path}/exit 2>/dev/null || echo 0)\n"
                    "[ \"$code\" = 0 ] || echo 'slurm_update error: Invalid node name specified' >&2\nexit $code\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:{os.environ['PATH']}")

    def recorded() -> list[list[str]]:
        text = calls.read_text() if calls.exists() else ""
        return [block.split("\n") for block in text.split("\n\n") if block]

    recorded.exit = tmp_path / "exit"  # type: ignore[attr-defined]
    return recorded


def events() -> tuple[list[dict], object]:
    seen: list[dict] = []
    return seen, lambda kind, **fields: seen.append({"event": kind, **fields})


def test_a_replaced_node_is_drained_with_its_reason_and_resumed(scontrol):
    seen, tell = events()
    nodes = Slurm(tell)
    assert nodes.do("drain", "h1", "its process exited (connection to the coordinator closed)")
    assert nodes.do("resume", "h1", "")
    assert scontrol() == [
        ["update", "NodeName=h1", "State=DRAIN",
         "Reason=clockfabric: its process exited (connection to the coordinator closed)"],
        ["update", "NodeName=h1", "State=RESUME"]]
    assert [e["event"] for e in seen] == ["slurm drained", "slurm resumed"]


def test_the_reason_is_one_bounded_line_and_the_argv_takes_no_shell(scontrol, tmp_path):
    seen, tell = events()
    why = "frozen\n; touch " + str(tmp_path / "pwned") + " $(id) `id` \x07" + "x" * 500
    assert Slurm(tell).do("drain", "h2", why)
    (call,) = scontrol()
    assert call[:3] == ["update", "NodeName=h2", "State=DRAIN"] and len(call) == 4
    assert call[3].startswith("Reason=clockfabric: frozen ; touch ") and "\n" not in call[3]
    assert len(call[3]) == len("Reason=") + slurm.REASON_CHARS and "\x07" not in call[3]
    assert not (tmp_path / "pwned").exists()
    assert seen[0]["reason"] == call[3].removeprefix("Reason=")


def test_a_name_that_is_not_a_node_is_refused_without_running_scontrol(scontrol):
    seen, tell = events()
    nodes = Slurm(tell)
    for bad in ("-h", "h1 State=RESUME", "h1=x", ""):
        assert not nodes.do("drain", bad, "lost")
    assert scontrol() == [] and {e["event"] for e in seen} == {"slurm failed"}
    assert "is not a Slurm node name" in seen[0]["why"]


def test_a_member_of_several_tasks_a_node_drains_the_node(scontrol):
    seen, tell = events()
    nodes = Slurm(tell).start()
    nodes.drain("h3/1", "lost")
    nodes.resume("h3/1")
    nodes.stop()
    assert [c[1] for c in scontrol()] == ["NodeName=h3", "NodeName=h3"]


def test_only_a_node_drained_here_is_resumed(scontrol):
    seen, tell = events()
    nodes = Slurm(tell)
    assert not nodes.do("resume", "h1", "")  # drained by the prolog's audit, or an administrator
    scontrol.exit.write_text("1")
    assert not nodes.do("drain", "h2", "lost")
    assert not nodes.do("resume", "h2", "")  # its drain failed: nothing of ours to resume
    assert len(scontrol()) == 1


def test_errors_are_one_line_events_never_exceptions(scontrol, tmp_path):
    seen, tell = events()
    scontrol.exit.write_text("1")
    assert not Slurm(tell).do("drain", "h1", "lost")
    assert seen[-1] == {"event": "slurm failed", "node": "h1", "action": "drain",
                        "why": "scontrol exited 1: slurm_update error: Invalid node name specified"}
    assert not Slurm(tell, scontrol=str(tmp_path / "none")).do("drain", "h1", "lost")
    assert "not found: is Slurm's client installed here?" in seen[-1]["why"]
    slow = tmp_path / "slow"
    slow.write_text("#!/bin/sh\nsleep 5\n")
    slow.chmod(0o755)
    assert not Slurm(tell, scontrol=str(slow), timeout_s=0.2).do("drain", "h1", "lost")
    assert seen[-1]["why"].startswith("TimeoutExpired") and "\n" not in seen[-1]["why"]


def test_the_coordinators_tick_never_waits_on_scontrol(tmp_path):
    slow = tmp_path / "scontrol"
    slow.write_text(f"#!/bin/sh\nsleep 1\necho \"$@\" >> {tmp_path}/calls\n")
    slow.chmod(0o755)
    seen, tell = events()
    nodes = Slurm(tell, scontrol=str(slow)).start()
    started = time.monotonic()
    nodes.drain("h1", "lost")
    assert time.monotonic() - started < 0.1
    nodes.stop()  # what was asked is done before it stops
    assert (tmp_path / "calls").read_text() == "update NodeName=h1 State=DRAIN Reason=clockfabric: lost\n"


def test_the_coordinator_command_names_its_slurm_and_fleet_options():
    done = subprocess.run([sys.executable, "-m", "clockfabric.cli", "train", "coordinator", "--help"],
                          capture_output=True, text=True, env={**os.environ, "COLUMNS": "200",
                                                               "PYTHONPATH": str(Path(slurm.__file__).parents[2])})
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())
    assert "--slurm" in text and "--fleet" in text and "stay drained" in text
