"""Bring-up and tear-down: clear errors, nothing half-built, idempotent, crash-proof."""

import json
import shutil
import signal
import subprocess
import sys
import time

import pytest

from clockfabric.errors import USAGE_EXIT, ClockfabricError
from clockfabric.lab import build, netns, shaping
from clockfabric.lab.state import Lab, run_dir
from clockfabric.topology import dumps, leafspine, multirail
from tests.lab.conftest import PREFIX


def test_invalid_topology_creates_nothing(tmp_path, cli):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: broken\nhosts: [{name: h0}, {name: h1}]\nswitches: [{name: leaf0}]\n"
                   "links: [{a: h0, b: leaf0, rate: fast}, {a: h9, b: leaf0}]\n")
    proc = cli("lab", "up", str(bad), "--name", "tbad", check=False)
    assert proc.returncode == USAGE_EXIT
    lines = proc.stderr.strip().splitlines()
    assert any("rate 'fast' does not parse" in line for line in lines)
    assert any("unknown node 'h9'" in line for line in lines)
    assert "Traceback" not in proc.stderr
    assert not netns.listed("cf.tbad.") and not (run_dir() / "tbad").exists()


def test_name_clash_refused_and_existing_lab_untouched(make_lab, tmp_path, cli):
    lab = make_lab(leafspine(2, 1, 0))
    path = tmp_path / "t.yaml"
    path.write_text(dumps(leafspine(4, 1, 0)))
    proc = cli("lab", "up", str(path), "--name", lab.name, check=False)
    assert proc.returncode == USAGE_EXIT and "already" in proc.stderr
    assert len(netns.listed(f"cf.{lab.name}.")) == 3
    assert json.loads(cli("lab", "check", "--lab", lab.name, "--json").stdout)["ok"]


def test_failure_half_way_removes_everything(monkeypatch):
    calls = {"n": 0}
    real = shaping.shape

    def refuse_on_fifth(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 5:
            raise OSError(22, "Invalid argument")  # what a kernel refusal looks like
        real(*args, **kwargs)

    monkeypatch.setattr(shaping, "shape", refuse_on_fifth)
    with pytest.raises(ClockfabricError, match="everything it made was removed"):
        build.up(multirail(4, 2, 2, 2), "thalf")
    assert calls["n"] == 5
    assert not netns.listed("cf.thalf.") and not (run_dir() / "thalf").exists()


# `lab up` with the fifth link's shaping held until the test signals it: a whole lab builds in
# under a second, so a signal sent when the first namespace appears can land after the build
PAUSED_LAB_UP = """
import pathlib, sys, time
from clockfabric.cli.main import main
from clockfabric.lab import shaping
real, calls, marker = shaping.shape, [0], pathlib.Path(sys.argv.pop(1))
def held_on_fifth(*args):
    calls[0] += 1
    if calls[0] == 5:
        marker.touch()
        time.sleep(60)
    real(*args)
shaping.shape = held_on_fifth
main()
"""


def test_terminated_lab_up_removes_everything(tmp_path):
    """`kill` (SIGTERM) mid-build does what Ctrl-C does: everything made so far is removed, one line says so."""
    path, name, paused = tmp_path / "big.yaml", f"{PREFIX}term", tmp_path / "paused"
    path.write_text(dumps(multirail(32, 2, 2, 2)))
    proc = subprocess.Popen([sys.executable, "-c", PAUSED_LAB_UP, str(paused), "lab", "up", str(path), "--name", name],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not paused.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert paused.exists() and netns.listed(f"cf.{name}."), "lab up never reached its fifth link"
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == USAGE_EXIT, f"exited {proc.returncode}:\n{out}\n{err}"
        assert err.strip().splitlines() == [f"error: lab up {name} interrupted; everything it made was removed"]
        assert not netns.listed(f"cf.{name}.") and not (run_dir() / name).exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        build.down(name)


def test_terminated_bench_stops_its_workers(make_lab):
    """SIGTERM to a command running a job on a lab: its workers are stopped, and it says it was interrupted."""
    lab = make_lab(leafspine(2, 1, 0))
    proc = subprocess.Popen([sys.executable, "-m", "clockfabric.cli", "bench", "allreduce", "--lab", lab.name,
                             "--sizes", "64M", "--iters", "50"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not netns.pids(lab.ns("h1")) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert netns.pids(lab.ns("h1")), "no worker started on h1"
        time.sleep(1.0)  # the ranks connect and begin their iterations
        assert proc.poll() is None, "the bench ended before it could be stopped"
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:  # it ignored the signal: the test fails, but leaves nothing running
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, f"exited {proc.returncode}:\n{out}\n{err}"
    assert err.strip().splitlines()[-1] == "interrupted" and "Traceback" not in err
    assert not netns.pids(lab.ns("h0")) and not netns.pids(lab.ns("h1"))


def test_down_is_idempotent_and_cleans_crashed_labs(make_lab, cli):
    assert "nothing left" in cli("lab", "down", "tnever").stderr
    lab = make_lab(multirail(4, 2, 2, 2))
    # a crash: the record is gone and some namespaces were already removed by hand
    shutil.rmtree(lab.dir)
    for ns in netns.listed(f"cf.{lab.name}.")[:5]:
        netns.remove(ns)
    assert lab.name in cli("lab", "status", "--json").stdout  # found by its namespaces alone
    proc = cli("lab", "down", lab.name)
    assert "removed" in proc.stderr
    assert not netns.listed(f"cf.{lab.name}.")
    cli("lab", "down", lab.name)  # and once more: still fine


def test_status_and_unknown_names(make_lab, cli):
    lab = make_lab(leafspine(4, 2, 2))
    status = json.loads(cli("lab", "status", lab.name, "--json").stdout)
    assert status["state"] == "up" and status["links_down"] == 0 and len(status["links"]) == 8
    proc = cli("lab", "link", "down", "h0", "h9", "--lab", lab.name, check=False)
    assert proc.returncode == USAGE_EXIT and "no host or switch 'h9'" in proc.stderr
    proc = cli("lab", "link", "down", "h0", "h1", "--lab", lab.name, check=False)
    assert proc.returncode == USAGE_EXIT and "no link between h0 and h1" in proc.stderr
    proc = cli("lab", "rate", "h0", "leaf0", "fast", "--lab", lab.name, check=False)
    assert proc.returncode == USAGE_EXIT and "does not parse" in proc.stderr
    proc = cli("lab", "check", "--lab", "tnosuchlab", check=False)
    assert proc.returncode == USAGE_EXIT and "no lab named 'tnosuchlab'" in proc.stderr


def test_agents_read_their_own_virtual_clock(make_lab, cli):
    lab = make_lab(leafspine(2, 1, 0))
    code = ("import time; from clockfabric.clock.vclock import host_clock; "
            "c = host_clock(); t = time.time_ns(); print(c.host, c.local_ns(t), t)")
    proc = cli("lab", "exec", "h1", "--lab", lab.name, "--", sys.executable, "-c", code)
    host, local, real = proc.stdout.split()
    truth = Lab.open(lab.name).clocks()["h1"]
    assert host == "h1"
    assert int(local) == truth.local_ns(int(real))
    assert truth.offset_ns != 0 and int(local) != int(real)


def test_exec_passes_the_exit_code_through(make_lab, cli):
    lab = make_lab(leafspine(2, 1, 0))
    assert cli("lab", "exec", "h0", "--lab", lab.name, "--", "sh", "-c", "exit 3", check=False).returncode == 3
