"""The embedded Alertmanager: with no `--alertmanager URL`, the controller starts one
prometheus-alertmanager on loopback (cluster mode off, its data beside the controller's
database), restarts it if it exits, and stops it by pid when the controller stops.

Its config (`config_yaml`) groups alerts by name and link, and inhibits what another alert
already explains: a flapping link's downs, congestion on a link that is down, the controller's
not-ready while its storage alert fires. It has one receiver with no integration: alerts are
seen in its UI and API; an operator who wants pages runs their own Alertmanager with their
routes (docs/alerts.md) and gives its URL.
"""

from __future__ import annotations

import ctypes
import logging
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import httpx

from clockfabric.errors import ClockfabricError

log = logging.getLogger(__name__)
BINARIES = ("prometheus-alertmanager", "alertmanager")  # Debian's name, upstream's
PR_SET_PDEATHSIG = 1

CONFIG = """\
# written by clockfabric controller at each start; give --alertmanager URL to use your own
global:
  resolve_timeout: 5m
route:
  receiver: clockfabric
  group_by: [alertname, link]
  group_wait: 10s
  group_interval: 1m
  repeat_interval: 4h
receivers:
  - name: clockfabric
inhibit_rules:
  # a flapping link goes down and up: its flap is the page, not each down
  - source_matchers: [alertname="ClockfabricLinkFlapping"]
    target_matchers: [alertname="ClockfabricLinkDown"]
    equal: [link]
  # a link that is down explains queueing named on it
  - source_matchers: [alertname="ClockfabricLinkDown"]
    target_matchers: [alertname="ClockfabricCongestion"]
    equal: [link]
  # the controller's storage alert says why it is not ready
  - source_matchers: [alertname="ClockfabricStorage"]
    target_matchers: [alertname="ClockfabricControllerNotReady"]
"""


def config_yaml() -> str:
    return CONFIG


def data_dir(db: str) -> Path:
    """Beside a SQLite file (`<file>.alertmanager`); for PostgreSQL or an in-memory database, a
    fresh temporary folder."""
    path = db.removeprefix("sqlite:///") if db.startswith("sqlite:///") else db
    if "://" in path or path in ("", ":memory:"):
        return Path(tempfile.mkdtemp(prefix="clockfabric-alertmanager-"))
    return Path(path).with_name(Path(path).name + ".alertmanager")


def _binary() -> str:
    for name in BINARIES:
        found = shutil.which(name) or (f"/usr/bin/{name}" if Path(f"/usr/bin/{name}").exists() else None)
        if found:
            return found
    raise ClockfabricError("prometheus-alertmanager is not installed: `apt-get install prometheus-alertmanager` "
                           "(scripts/setup.sh does), or give --alertmanager URL of one you run")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:
    """In the child: SIGTERM when the controller dies, however it dies, so none is left behind."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


class EmbeddedAlertmanager:
    def __init__(self, data: Path, *, port: int | None = None, start_timeout_s: float = 15.0,
                 watch_s: float = 0.5):
        self.data = data
        self.binary = _binary()
        self.port = port or _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.start_timeout_s = start_timeout_s
        self.watch_s = watch_s
        self.restarts = 0
        self.proc: subprocess.Popen | None = None
        self._stop = threading.Event()
        self._watch: threading.Thread | None = None

    @property
    def log_path(self) -> Path:
        return self.data / "alertmanager.log"

    def start(self) -> EmbeddedAlertmanager:
        self.data.mkdir(mode=0o700, parents=True, exist_ok=True)
        (self.data / "alertmanager.yml").write_text(config_yaml())
        self._spawn()
        self._wait_ready()
        self._watch = threading.Thread(target=self._supervise, name="alertmanager-watch", daemon=True)
        self._watch.start()
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        if self._watch:
            self._watch.join(timeout_s)
        proc = self.proc
        if proc and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout_s)

    def _spawn(self) -> None:
        argv = [self.binary, f"--config.file={self.data / 'alertmanager.yml'}",
                f"--storage.path={self.data / 'data'}", f"--web.listen-address=127.0.0.1:{self.port}",
                "--cluster.listen-address=", f"--web.external-url={self.url}"]
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                         preexec_fn=_die_with_parent)  # noqa: PLW1509 - prctl only, no threads touched

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self.proc is None or self.proc.poll() is not None:
                lines = self.log_path.read_text(errors="replace").strip().splitlines()
                raise ClockfabricError(f"the embedded Alertmanager exited: {lines[-1] if lines else 'no output'} "
                                       f"(log: {self.log_path})")
            try:
                if httpx.get(f"{self.url}/-/ready", timeout=1.0).is_success:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise ClockfabricError(f"the embedded Alertmanager did not answer on {self.url} within "
                               f"{self.start_timeout_s:.0f} s (log: {self.log_path})")

    def _supervise(self) -> None:
        while not self._stop.wait(self.watch_s):
            proc = self.proc
            if proc is None or proc.poll() is None:
                continue
            self.restarts += 1
            log.error("embedded alertmanager exited (%s); restarting it (%d restarts)", proc.returncode,
                      self.restarts)
            self._spawn()
