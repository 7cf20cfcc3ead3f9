"""vmauth in front of the engine: the only way a host's samples reach it.

One user per host, whose bearer token is the host's push credential (auth.credential: the same
token it pushes events with) and whose one route, the import path, carries
`extra_label=host=NAME`: the engine sets that label on every line, over any `host` the body or
the query string gives (vmauth 1.79 keeps url_prefix's query args and the engine applies them
last). No other path is routed, so a host can neither read nor delete series through it.
Hosts enrolled later are added by rewriting the file and sending vmauth SIGHUP: from a thread of
its own, at once but at most once per COALESCE_S, so a fleet that enrols together (10,000 agents in their first
push) costs a few rewrites, not one per host. vmauth reloads on its own time, so a host is `live`
(told where to write) only once an empty write with its credential is taken: a host told earlier
would be refused, and vmauth's refusal quotes the token it was given.
"""

from __future__ import annotations

import json
import logging
import math
import os
import secrets
import signal
import threading
import time
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path
from urllib.parse import quote

import httpx

from clockfabric.auth.credential import host_token
from clockfabric.controller.series.child import Child, binary, probe

log = logging.getLogger(__name__)
IMPORT_PATH = "/api/v1/import/prometheus"
COALESCE_S = 0.2  # enrolments that come within this ride one rewrite
REFUSED = (400, 401, 403)  # vmauth's answers to a credential it does not hold (400 for a bearer token)
CONFIRM_S = 5.0  # vmauth has this long to take a rewritten file before it is written again

_credential = lru_cache(maxsize=200_000)(host_token)


def config(engine_url: str, fleet_token: str, hosts: Iterable[str], epochs: dict[str, int] | None = None) -> str:
    """vmauth's -auth.config for these hosts, each with its credential of its epoch (0 if not named)."""
    epochs = epochs or {}
    users = [{"bearer_token": _credential(fleet_token, h, epochs.get(h, 0)),
              "url_map": [{"src_paths": [IMPORT_PATH],
                           "url_prefix": f"{engine_url.rstrip('/')}/?extra_label={quote(f'host={h}', safe='=')}"}]}
             for h in sorted(set(hosts))]
    # vmauth refuses a file with no users: one nobody holds keeps an empty fleet's gate up
    users.append({"bearer_token": secrets.token_hex(32), "url_prefix": f"{engine_url.rstrip('/')}/health"})
    # JSON is YAML, and written ten times faster than PyYAML writes it
    return json.dumps({"users": users}, indent=0)


class Gate:
    def __init__(self, engine_url: str, fleet_token: str, work_dir: Path, *, address: str = "127.0.0.1",
                 port: int = 0, tls: tuple[Path, Path] | None = None) -> None:
        """Listens on address:port (0: any free one): where the hosts reach it; over TLS with
        `tls` (certificate, key): the controller's own, so hosts trust it as they trust the controller."""
        work_dir.mkdir(parents=True, exist_ok=True)
        self.engine_url = engine_url
        self.fleet_token = fleet_token
        self.path = work_dir / "vmauth.yml"
        self.hosts: set[str] = set()
        self.live: frozenset[str] = frozenset()  # the hosts vmauth is known to take: see can_write
        self.epochs: dict[str, int] = {}
        self._lock = threading.Lock()  # hosts and epochs against the rewriting thread
        self._due = threading.Event()  # a change waits to be written
        self._stop = threading.Event()
        self._reloader: threading.Thread | None = None
        self.rewrites = 0  # the file written, each time: what enrolment cost
        self._write()
        exe = binary("vmauth")
        tls_args = ["-tls", f"-tlsCertFile={tls[0]}", f"-tlsKeyFile={tls[1]}"] if tls else []

        def argv(p: int) -> list[str]:
            return [exe, f"-auth.config={self.path}", f"-httpListenAddr={address}:{p}", "-loggerLevel=ERROR", *tls_args]

        self.child = Child("vmauth", argv, work_dir / "vmauth.log", port=port, address=address,
                           scheme="https" if tls else "http")

    @property
    def url(self) -> str:
        return self.child.url

    def can_write(self, host: str) -> bool:
        """Does vmauth take this host's writes now?"""
        return host in self.live

    def _write(self) -> set[str]:
        """The file, with every host let so far; those hosts."""
        with self._lock:
            hosts = set(self.hosts)
            text = config(self.engine_url, self.fleet_token, hosts, self.epochs)
        tmp = self.path.with_suffix(".tmp")
        tmp.unlink(missing_ok=True)
        # every host's credential is in it: its owner's alone, whatever the umask
        with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
            f.write(text)
        tmp.replace(self.path)  # vmauth never reads half a file
        self.rewrites += 1
        return hosts

    def allow(self, hosts: Iterable[str]) -> None:
        """Let these hosts write too (a no-op for those already let), within about COALESCE_S."""
        with self._lock:
            new = set(hosts) - self.hosts
            self.hosts |= new
        if new:
            self._changed()

    def set_epochs(self, epochs: dict[str, int]) -> None:
        """Take each revoked host's credential of its epoch only (storage.revoked), within about COALESCE_S."""
        with self._lock:
            changed = epochs != self.epochs
            self.epochs = dict(epochs)
        if changed:
            self._changed()

    def _changed(self) -> None:
        if self._reloader is None:  # not started: vmauth reads the file when it starts
            self._write()
        else:
            self._due.set()

    def _reload_loop(self) -> None:
        last = -math.inf
        while self._due.wait() and not self._stop.is_set():
            self._stop.wait(last + COALESCE_S - time.monotonic())  # at once, unless it just rewrote
            self._due.clear()
            last = time.monotonic()
            written = self._write()
            proc = self.child.proc
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGHUP)
            if not self._confirm(written):
                log.warning("vmauth took no rewritten credentials within %.0f s: writing them again", CONFIRM_S)
                self._due.set()

    def _confirm(self, written: set[str]) -> bool:
        """Wait until vmauth takes the file just written: an empty write with the credential of one
        host new in it is no longer refused. Then every host in it is live."""
        new = sorted(written - self.live)
        if not new:
            return True
        with self._lock:
            headers = {"Authorization": f"Bearer {_credential(self.fleet_token, new[0], self.epochs.get(new[0], 0))}"}
        deadline = time.monotonic() + CONFIRM_S
        while not self._stop.is_set() and time.monotonic() < deadline:
            try:
                r = probe().post(self.url + IMPORT_PATH, content=b"", headers=headers, timeout=1.0)
                if r.status_code not in REFUSED:  # taken (204), or the engine behind it down (5xx)
                    self.live = frozenset(written)
                    return True
            except httpx.HTTPError:
                pass  # vmauth restarting: its watchdog's work; it reads the file as it starts
            self._stop.wait(0.01)
        return self._stop.is_set()

    def start(self) -> None:
        written = self._write()
        self.child.start()
        self.live = frozenset(written)  # read as it started
        self._stop.clear()
        self._reloader = threading.Thread(target=self._reload_loop, name="gate-reload", daemon=True)
        self._reloader.start()

    def stop(self) -> None:
        if self._reloader is not None:
            self._stop.set()
            self._due.set()
            self._reloader.join(timeout=5)
            self._reloader = None
        self.child.stop()
