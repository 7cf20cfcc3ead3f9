"""The controller's whole series path: the engine (embedded, or one given by URL), the gate the
hosts write through, the reader, and a watch on the engine that /readyz and an alert read."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from pathlib import Path

import httpx

from clockfabric.controller.series.child import Child, probe
from clockfabric.controller.series.engine import RETENTION, engine
from clockfabric.controller.series.gate import Gate
from clockfabric.controller.series.read import BUDGET_S, Series
from clockfabric.controller.series.vmalert import RuleOptions, vmalert

log = logging.getLogger(__name__)
READ_ONLY = re.compile(r"^vm_storage_is_read_only(\{[^}]*\})? 1$", re.MULTILINE)


class SeriesPath:
    def __init__(self, *, data_dir: Path, fleet_token: str, url: str | None = None,
                 gate_address: str = "127.0.0.1", gate_port: int = 0, tls: tuple[Path, Path] | None = None,
                 retention: str = RETENTION, engine_flags: tuple[str, ...] = (), budget_s: float = BUDGET_S,
                 rules: RuleOptions | None = None) -> None:
        """`url`: an engine already running (its own scale-out behind it); None: start one with its
        data under `data_dir`. The gate listens on gate_address:gate_port, where the hosts reach it.
        `rules`: start vmalert on the engine (None: rules are evaluated elsewhere, or not at all)."""
        self.engine: Child | None = None if url else engine(data_dir / "engine", retention=retention,
                                                               flags=engine_flags)
        self._url = url.rstrip("/") if url else None
        self.data_dir = data_dir
        self.fleet_token = fleet_token
        self.epochs: dict[str, int] = {}  # revoked hosts: the credential epoch they write with
        self.gate_address, self.gate_port, self.tls = gate_address, gate_port, tls
        self.budget_s = budget_s
        self.gate: Gate | None = None
        self.series: Series | None = None
        self.down: str | None = "not checked yet"  # why the engine does not answer; None while it does
        self.rule_options = rules
        self.rules: Child | None = None
        self.rules_down: str | None = None  # why vmalert does not answer; None while it does

    @property
    def url(self) -> str:
        """The engine's query and import URL (the controller's side)."""
        if self._url is not None:
            return self._url
        assert self.engine is not None
        return self.engine.url

    @property
    def write_port(self) -> int:
        """The gate's port: a host reaches it at the address it reaches the controller at."""
        assert self.gate is not None, "start() first"
        return self.gate.child.port

    @property
    def write_url(self) -> str:
        """Where the hosts send their samples: the gate."""
        assert self.gate is not None, "start() first"
        return self.gate.url

    def start(self, hosts: Iterable[str] = ()) -> None:
        if self.engine is not None:
            self.engine.start()
        self.gate = Gate(self.url, self.fleet_token, self.data_dir / "gate", address=self.gate_address,
                         port=self.gate_port, tls=self.tls)
        self.gate.set_epochs(self.epochs)
        self.gate.allow(hosts)
        self.gate.start()
        self.series = Series(self.url, budget_s=self.budget_s, flushes=self.engine is not None)
        if self.rule_options is not None:
            self.rules = vmalert(self.data_dir / "vmalert", self.url, self.rule_options)
            self.rules.start()
        self.check()

    def allow(self, hosts: Iterable[str]) -> None:
        if self.gate is not None:
            self.gate.allow(hosts)

    def can_write(self, host: str) -> bool:
        """Does the gate take this host's samples now (Gate.can_write)?"""
        return self.gate is not None and self.gate.can_write(host)

    def set_epochs(self, epochs: dict[str, int]) -> None:
        """The credential epoch each revoked host writes with (storage.revoked)."""
        self.epochs = dict(epochs)
        if self.gate is not None:
            self.gate.set_epochs(self.epochs)

    def check(self) -> None:
        """Does the engine answer, and the gate? Never raises: `down` says why not."""
        why = None
        for part, url in (("engine", self.url), ("gate", self.gate.url if self.gate else None)):
            if url is None:
                continue
            try:
                r = probe().get(url + "/health", timeout=min(1.0, self.budget_s))
                if r.status_code != 200:
                    why = f"{part} {url} answers HTTP {r.status_code}"
            except httpx.HTTPError as e:
                why = f"{part} {url} does not answer ({type(e).__name__})"
            if why:
                break
        why = why or self._read_only()
        if why and not self.down:
            log.error("series %s", why)
        elif not why and self.down and self.down != "not checked yet":
            log.warning("series engine answers again")
        self.down = why
        self._check_rules()

    def _check_rules(self) -> None:
        if self.rules is None:
            return
        why = None if self.rules.healthy() else f"vmalert {self.rules.url} does not answer: {self.rules.log_tail()}"
        if why and not self.rules_down:
            log.error("rules: %s", why)
        elif not why and self.rules_down:
            log.warning("vmalert answers again")
        self.rules_down = why

    def _read_only(self) -> str | None:
        """Why the engine takes no writes though it answers: its disk is full (below its
        -storage.minFreeDiskSpaceBytes it turns read-only and refuses every import with 503)."""
        try:
            r = probe().get(self.url + "/metrics", timeout=min(1.0, self.budget_s))
        except httpx.HTTPError:
            return None  # an engine that answers /health but not /metrics (a cluster's vmselect): no word
        if READ_ONLY.search(r.text):
            return (f"engine {self.url} is read-only: its disk is full; samples are refused until space is "
                    "freed (or its -storage.minFreeDiskSpaceBytes lowered)")
        return None

    def stop(self) -> None:
        if self.rules is not None:
            self.rules.stop()
        if self.series is not None:
            self.series.close()
        if self.gate is not None:
            self.gate.stop()
        if self.engine is not None:
            self.engine.stop()
