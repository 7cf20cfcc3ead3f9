"""lab.process: start, stop by handle (SIGTERM, then SIGKILL), stop by recorded pid only
while still ours, and liveness that a zombie does not fool."""

import signal
import sys
import time
from pathlib import Path

from clockfabric.lab import process

IGNORES_SIGTERM = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                   "print('ready', flush=True); time.sleep(60)")


def wait_until(condition, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_a_started_process_stops_on_sigterm():
    proc = process.spawn(["sleep", "60"])
    assert process.alive(proc.pid)
    started = time.monotonic()
    process.stop([proc], grace_s=5.0)
    assert proc.returncode == -signal.SIGTERM
    assert time.monotonic() - started < 2.0  # no grace period waited out
    assert not process.alive(proc.pid)


def test_output_goes_to_the_log(tmp_path: Path):
    log = tmp_path / "logs" / "echo.log"
    proc = process.spawn([sys.executable, "-c", "import sys; print('out'); print('err', file=sys.stderr)"], log=log)
    proc.wait(10)
    assert sorted(log.read_text().split()) == ["err", "out"]


def test_a_process_ignoring_sigterm_is_killed_after_the_grace_period(tmp_path: Path):
    log = tmp_path / "stubborn.log"
    proc = process.spawn([sys.executable, "-c", IGNORES_SIGTERM], log=log)
    wait_until(lambda: "ready" in log.read_text())
    started = time.monotonic()
    process.stop([proc], grace_s=0.3)
    assert proc.returncode == -signal.SIGKILL
    assert time.monotonic() - started >= 0.3


def test_stop_pids_leaves_a_pid_that_is_not_ours():
    proc = process.spawn(["sleep", "60"])
    try:
        process.stop_pids([proc.pid], ours=lambda pid: False, grace_s=0.1)
        assert proc.poll() is None
        asked = []
        process.stop_pids([proc.pid], ours=lambda pid: asked.append(pid) or True, grace_s=2.0)
        assert asked and set(asked) == {proc.pid}
        assert not process.alive(proc.pid)
    finally:
        process.stop([proc])


def test_stop_pids_kills_a_pid_that_ignores_sigterm(tmp_path: Path):
    log = tmp_path / "stubborn.log"
    proc = process.spawn([sys.executable, "-c", IGNORES_SIGTERM], log=log)
    try:
        wait_until(lambda: "ready" in log.read_text())
        process.stop_pids([proc.pid], ours=lambda pid: True, grace_s=0.3)
        assert not process.alive(proc.pid)
    finally:
        process.stop([proc])


def test_an_exited_child_is_not_alive_reaped_or_not():
    proc = process.spawn(["true"])
    wait_until(lambda: not Path(f"/proc/{proc.pid}/stat").exists()
               or Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z")
    assert not process.alive(proc.pid)  # a zombie of ours: reaped on the way
    proc.wait()
    assert not process.alive(proc.pid)


def test_someone_elses_zombie_is_not_alive():
    """`sleep` inherits the exited `true` as its child and never reaps it."""
    proc = process.spawn(["sh", "-c", "true & exec sleep 60"])
    try:
        def zombie() -> list[int]:
            return [k for k in process.children(proc.pid)
                    if Path(f"/proc/{k}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"]

        wait_until(lambda: bool(zombie()))
        (pid,) = zombie()
        assert not process.alive(pid)
        assert process.alive(proc.pid)
    finally:
        process.stop([proc])
