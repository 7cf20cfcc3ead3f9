"""`clockfabric job run`: the command runs with the job's name and a run id in its environment,
its exit status and the signals sent to us pass through, bad input is one line."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from clockfabric.errors import ClockfabricError
from clockfabric.workload.run import run

CLI = [sys.executable, "-m", "clockfabric.cli", "job", "run"]


def test_the_command_sees_its_job_and_run_and_its_exit_status_is_ours(tmp_path):
    seen = tmp_path / "env"
    code = run("J1", ["sh", "-c", f'echo "$CLOCKFABRIC_JOB $CLOCKFABRIC_JOB_RUN" > {seen}; exit 7'], run_id="r42")
    assert code == 7 and seen.read_text().split() == ["J1", "r42"]


@pytest.mark.parametrize("name", ["", "has space", "-dash", "x" * 129])
def test_a_bad_name_is_one_clear_error(name):
    with pytest.raises(ClockfabricError, match="job name"):
        run(name, ["true"])


def test_a_missing_command_is_one_clear_error():
    with pytest.raises(ClockfabricError, match="cannot run"):
        run("J", ["/no/such/program"])
    with pytest.raises(ClockfabricError, match="no command"):
        run("J", [])


def test_a_signal_to_the_wrapper_reaches_the_command(tmp_path):
    marker = tmp_path / "got"
    script = (f"import signal,sys,time\n"
              f"signal.signal(signal.SIGTERM, lambda *a: (open({str(marker)!r}, 'w').write('term'), sys.exit(5)))\n"
              f"open({str(marker)!r} + '.ready', 'w').close()\ntime.sleep(30)\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    wrapper = subprocess.Popen([*CLI, "--name", "J", "--", sys.executable, "-c", script], env=env)
    deadline = time.monotonic() + 20
    while not (tmp_path / "got.ready").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    wrapper.send_signal(signal.SIGTERM)
    assert wrapper.wait(10) == 5  # the command handled it and chose its status: ours too
    assert marker.read_text() == "term"
