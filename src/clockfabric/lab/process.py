"""Processes, once: start one, stop some by their own handles or recorded pids.

Every process the project starts on a lab goes through `spawn` (argv already wrapped for a
node by `lab.exec.command`, or a plain local one) and ends through `stop` (handles we hold)
or `stop_pids` (pids read back from a record, each checked to still be ours right before
every signal: a pid reused by some other program is never touched).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterable
from pathlib import Path


def spawn(argv: list[str], *, log: Path | None = None, env: dict[str, str] | None = None,
          new_session: bool = False, **popen) -> subprocess.Popen:
    """Start argv; with `log`, its stdout and stderr go to that file (never to a pipe no one
    drains). `new_session` puts it in its own process group, so a group kill takes its children."""
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "wb") as out:
            return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env,
                                    start_new_session=new_session, **popen)
    return subprocess.Popen(argv, env=env, start_new_session=new_session, **popen)


def stop(procs: Iterable[subprocess.Popen], grace_s: float = 2.0) -> None:
    """SIGTERM each still running, SIGKILL what outlives the grace period, then reap all."""
    procs = list(procs)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        running = [p for p in procs if p.poll() is None]
        if not running:
            break
        for p in running:
            try:
                p.send_signal(sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace_s
        while any(p.poll() is None for p in running) and time.monotonic() < deadline:
            time.sleep(0.02)
    for p in procs:
        p.wait()


def stop_pids(pids: Iterable[int], ours: Callable[[int], bool], grace_s: float = 2.0) -> None:
    """SIGTERM, then SIGKILL, the pids for which `ours(pid)` still holds at each signal."""
    pending = list(pids)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        signalled = []
        for pid in pending:
            if not (alive(pid) and ours(pid)):
                continue
            try:
                os.kill(pid, sig)
                signalled.append(pid)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace_s
        while signalled and time.monotonic() < deadline:
            signalled = [p for p in signalled if alive(p)]
            time.sleep(0.02)
        pending = signalled
        if not pending:
            return


def alive(pid: int) -> bool:
    """Running and not a zombie (our own children are reaped on the way)."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # alive, someone else's
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def children(pid: int) -> list[int]:
    """The direct children of pid (from /proc), for a wrapper whose children hold the work."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    kids: list[int] = []
    for t in tasks:
        try:
            kids += [int(k) for k in Path(f"/proc/{pid}/task/{t}/children").read_text().split()]
        except OSError:
            pass
    return kids
