"""One engine process (victoria-metrics, vmauth) on a loopback port, started, health-checked and
started again by a watchdog if it exits; stopped by its pid."""

from __future__ import annotations

import ctypes
import functools
import logging
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from clockfabric.errors import ClockfabricError

log = logging.getLogger(__name__)
START_TIMEOUT_S = 10.0
PORT_ATTEMPTS = 3  # starts on a port chosen here, each on a new one where another took it first


@functools.cache
def probe() -> httpx.Client:
    """One client for every probe of our own children, kept alive: a client made per probe costs
    more than the probe (its TLS context, about 10 ms), once a second per child. Their
    certificates are ours, not what a probe checks."""
    return httpx.Client(timeout=1.0, verify=False)


def free_port(address: str = "127.0.0.1") -> int:
    """A port nobody listens on now at `address` (the kernel's pick)."""
    with socket.socket() as s:
        s.bind((address, 0))
        return int(s.getsockname()[1])


def _die_with_parent() -> None:
    """In the child before exec: the kernel sends it SIGTERM when the controller dies, however it
    dies, so no engine outlives the controller that started it (Linux prctl PR_SET_PDEATHSIG)."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)


def binary(name: str, instead: str = "give --series-url of an engine already running") -> str:
    """`instead`: what an operator without the package may do."""
    path = shutil.which(name)
    if path is None:
        raise ClockfabricError(f"{name} is not installed: install Debian's victoria-metrics package "
                               f"(scripts/setup.sh), or {instead}")
    return path


class Child:
    def __init__(self, name: str, argv: Callable[[int], list[str]], log_path: Path, *, port: int = 0,
                 address: str = "127.0.0.1", scheme: str = "http", watch_s: float = 0.5) -> None:
        """`argv(port)`: the command line that listens on address:port; its output goes to `log_path`."""
        self.name = name
        self.address = address
        self.scheme = scheme
        self.argv = argv
        self.log_path = log_path
        self.port = port or free_port(address)
        self._port_ours = not port  # chosen here: another may take it before the child binds it
        self.watch_s = watch_s
        self.restarts = 0
        self.proc: subprocess.Popen | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._watchdog: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.address}:{self.port}"

    def start(self) -> None:
        for attempt in range(PORT_ATTEMPTS):
            try:
                self._spawn()
                break
            except ClockfabricError:
                # a free port is free only when it is looked at: another process may bind it before
                # the child does; where the port was ours to choose, choose again
                if not (self._port_ours and "address already in use" in self.log_tail().lower()) \
                        or attempt == PORT_ATTEMPTS - 1:
                    raise
                self.port = free_port(self.address)
        self._watchdog = threading.Thread(target=self._watch, name=f"{self.name}-watchdog", daemon=True)
        self._watchdog.start()

    def _spawn(self) -> None:
        with self._lock, open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(self.argv(self.port), stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            if self.healthy():
                return
            time.sleep(0.02)
        self.kill()
        raise ClockfabricError(f"{self.name} did not start on {self.url}: {self.log_tail()}; "
                               f"see {self.log_path}")

    def healthy(self) -> bool:
        try:
            # a liveness probe of our own child: its certificate is ours, not what is checked here
            return probe().get(self.url + "/health", timeout=1.0).status_code == 200
        except httpx.HTTPError:
            return False

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").strip().splitlines()
        except OSError:
            return "no log"
        return lines[-1][-300:] if lines else "no output"

    def _watch(self) -> None:
        while not self._stop.wait(self.watch_s):
            if self.alive():
                continue
            self.restarts += 1
            log.warning("%s exited (%s); starting it again", self.name, self.log_tail())
            try:
                self._spawn()
            except ClockfabricError as e:
                log.warning("%s", e)

    def kill(self) -> None:
        """This process, by its pid; the watchdog (if any) starts it again."""
        proc = self.proc
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(5.0)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def stop(self) -> None:
        self._stop.set()
        if self._watchdog is not None:
            self._watchdog.join(5.0)
        with self._lock:
            self.kill()
