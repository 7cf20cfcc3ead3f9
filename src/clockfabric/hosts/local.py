"""This machine as a Host, and the local-subprocess pieces other hosts build on (a lab host
is a local command that enters a namespace; an ssh host is a local `ssh`)."""

from __future__ import annotations

import os
import signal as signals
import socket
import subprocess
from pathlib import Path

from clockfabric.errors import ClockfabricError
from clockfabric.hosts.base import Completed, Host, Proc


class PopenProc(Proc):
    """A local child started in a session of its own: its pid is its process group's id."""

    def __init__(self, popen: subprocess.Popen):
        self.popen, self.pid = popen, popen.pid
        self.stdin, self.stdout, self.stderr = popen.stdin, popen.stdout, popen.stderr

    def poll(self) -> int | None:
        return self.popen.poll()

    def wait(self, timeout_s: float | None = None) -> int | None:
        try:
            return self.popen.wait(timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def signal(self, sig: int) -> None:
        if self.popen.poll() is not None:
            return  # reaped: its pid may already be someone else's
        try:
            os.killpg(self.pid, sig)
        except ProcessLookupError:
            pass


def popen(argv: list[str], *, env: dict[str, str] | None = None, log: Path | None = None,
          pipes: bool = False, where: str = "this machine") -> subprocess.Popen:
    """Start argv here in a session of its own (so a group signal takes its children too)."""
    full = os.environ | env if env else None
    pipe = subprocess.PIPE if pipes else None
    try:
        if log is not None:
            log.parent.mkdir(parents=True, exist_ok=True)
            with open(log, "wb") as out:
                return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                        env=full, start_new_session=True)
        return subprocess.Popen(argv, stdin=pipe or subprocess.DEVNULL, stdout=pipe, stderr=pipe, env=full,
                                text=pipes, start_new_session=True)
    except OSError as e:
        raise ClockfabricError(f"{where}: cannot start {argv[0]}: {e.strerror}") from None


def run_argv(argv: list[str], *, input: bytes | None, timeout_s: float, where: str) -> Completed:
    """Run argv here to completion; on a timeout its whole group is killed."""
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    except OSError as e:
        raise ClockfabricError(f"{where}: cannot run {argv[0]}: {e.strerror}") from None
    try:
        out, err = proc.communicate(input, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signals.SIGKILL)
        except ProcessLookupError:
            pass
        proc.communicate()
        raise ClockfabricError(f"{where}: {argv[0]} gave no answer within {timeout_s:g} s; stopped it") from None
    return Completed(proc.returncode, out, err)


class LocalHost(Host):
    """The machine this runs on."""

    def __init__(self, name: str | None = None, address: str | None = None):
        self.name = name or socket.gethostname()
        self.address = address or self.name

    def spawn(self, argv: list[str], *, env: dict[str, str] | None = None, log: Path | None = None,
              pipes: bool = False) -> Proc:
        return PopenProc(popen(argv, env=env, log=log, pipes=pipes, where=self.name))

    def run(self, argv: list[str], *, input: bytes | None = None, timeout_s: float = 30.0) -> Completed:
        return run_argv(argv, input=input, timeout_s=timeout_s, where=self.name)

    def read_file(self, path: str) -> bytes:
        try:
            return Path(path).read_bytes()
        except OSError as e:
            raise ClockfabricError(f"{self.name}: cannot read {path}: {e.strerror}") from None
