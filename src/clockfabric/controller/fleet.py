"""The controller's core, apart from HTTP: take pushes, store them, keep hosts' liveness,
run the detectors and the alerts.

A host is stale when it has not pushed for `stale_s`; it is fresh again at its next push,
and since the agent kept its events while the controller could not hear it, nothing is
lost in between (the push says if its buffer overflowed).

Who may push (`enroll`): the hosts enrolled (the fleet topology's, and those approved) and no
other ("topology"); those, and others held for an operator's approval ("pending": `hold`
records what an unknown host says of itself and hears, `approve` enrolls it); or anyone with a
valid credential ("any", `--enroll-unknown`).
"""

from __future__ import annotations

import ipaddress
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from clockfabric.controller.series.read import Series, SeriesError
from clockfabric.controller.storage.base import Event, Storage, StorageError

log = logging.getLogger(__name__)
ENROLL_MODES = ("topology", "pending", "any")
MAX_HELD_NEIGHBOURS = 64  # the LLDP neighbours kept of a host waiting for approval: its NICs, and then some
HOLD_REFRESH_NS = 30 * 10**9  # a held host that says the same again is written at most this often
EPOCHS_READ_S = 2.0  # revocations another replica made are read this often
MAX_HELD_CACHE = 10_000  # held hosts remembered here, to write one that says the same again only now and then


class UnknownHost(Exception):
    pass


def held_info(info: dict, neighbours: dict[str, str]) -> dict:
    """What is kept of a host waiting for approval, from its push (already checked at the door):
    its address if it is one, whether it says it is a switch, and its first MAX_HELD_NEIGHBOURS
    interfaces' LLDP neighbours. Nothing else it sent is kept."""
    out: dict = {}
    address = info.get("address")
    if isinstance(address, str) and len(address) <= 64:
        try:
            out["address"] = str(ipaddress.ip_address(address))
        except ValueError:
            pass
    if info.get("role") == "switch":
        out["role"] = "switch"
    out["neighbours"] = {d: neighbours[d] for d in sorted(neighbours)[:MAX_HELD_NEIGHBOURS]}
    return out


def boot_ends(host: str, boot: str, last: str | None, ended: list[dict], boots: list[str] | None,
              now: int) -> list[Event]:
    """A `boot_ended` event for each agent run that ended: as its agent states it (how many of its
    events never arrived), or, for the run this controller last heard from when the agent knows
    nothing of it (its event log lost, or kept in memory), with those counts unknown (null). One
    per run: (host, "<boot>:ended", 0) is stored once, so the first word on it stands."""
    out = []
    for b in ended:
        if b["undelivered"]:
            log.warning("host %s: agent run %s ended with %d event(s) never delivered (of %d)", host, b["boot"],
                        b["undelivered"], b["last_seq"], extra={"host": host, "reason": "events_undelivered"})
        out.append(Event(host=host, seq=0, boot=f"{b['boot']}:ended", t_ns=now, kind="boot_ended",
                         detail=dict(b), synced=False))
    if boots is not None and last is not None and last != boot and last not in boots:
        log.warning("host %s: agent run %s ended and its agent keeps no record of it: events it held may be "
                    "lost", host, last, extra={"host": host, "reason": "event_log_lost"})
        out.append(Event(host=host, seq=0, boot=f"{last}:ended", t_ns=now, kind="boot_ended", synced=False,
                         detail={"boot": last, "last_seq": None, "delivered": None, "undelivered": None,
                                 "why": "the agent keeps no record of this run: its event log was lost or not kept"}))
    return out


class Fleet:
    def __init__(self, storage: Storage, *, hosts: list[str], stale_s: float = 5.0, enroll_unknown: bool = False,
                 enroll: str | None = None, monitor: Any = None, replica: Any = None, series: Any = None,
                 asks: dict | None = None, clock: Callable[[], int] = time.time_ns):
        """`enroll`: who may push (ENROLL_MODES; `enroll_unknown` says "any"; default "topology").
        `monitor`: detectors and alerts (controller.monitor.Monitor), or None for storage only.
        `replica`: one of several replicas on one database (controller.replica.Replica): its leader's
        monitor, fed from the database, takes the place of `monitor`. `series`: the series path
        (controller.series.path.SeriesPath, started) the hosts write their samples through. `asks`:
        what every push's answer asks hosts to work out for the detectors (DetectorSet.asks; by
        default `monitor`'s): every replica answers so, not only the one whose detectors run."""
        self.storage = storage
        self.stale_ns = int(stale_s * 1e9)
        self.enroll = enroll or ("any" if enroll_unknown else "topology")
        if self.enroll not in ENROLL_MODES:
            raise ValueError(f"enroll {self.enroll!r}: one of {', '.join(ENROLL_MODES)}")
        self.replica = replica
        self._monitor = monitor
        self.asks = asks if asks is not None else monitor.detectors.asks() if monitor is not None else {}
        self.series = series
        self._let_write: set[str] = set()  # hosts the series gate lets in
        self.clock = clock
        self.lock = threading.Lock()  # pushes and ticks come from several server threads
        now = clock()
        for h in hosts:
            storage.enroll(h, now)
        self.stale: set[str] = set()
        self._known: set[str] = set()  # hosts found in storage, for pushes without --enroll-unknown
        self._refused: set[str] = set()  # hosts whose pushes were refused, logged once each
        self._boots: dict[str, str | None] = {}  # each host's agent run at its last push
        self._held: dict[str, tuple[dict, int, str]] = {}  # held host -> (what was written, when, its state)
        # why the last push that met storage failing was refused; None once a push is stored again
        self.write_refused: StorageError | None = None
        # each revoked host's credential epoch (storage.revoked), read again every EPOCHS_READ_S:
        # a revocation made through another replica reaches this one within that
        self._epochs: dict[str, int] = storage.epochs()
        self._epochs_read = time.monotonic()
        if series is not None:
            series.set_epochs(self._epochs)

    def epoch(self, host: str) -> int:
        """The epoch a push credential for `host` must carry (0 for a host never revoked)."""
        if time.monotonic() - self._epochs_read > EPOCHS_READ_S:
            self._epochs_read = time.monotonic()
            epochs = self.storage.epochs()
            if epochs != self._epochs:
                self._set_epochs(epochs)
        return self._epochs.get(host, 0)

    def revoke(self, host: str) -> int:
        """Refuse `host`'s credential from now on, here and at the series gate; the new one's epoch."""
        epoch = self.storage.revoke(host)
        self._set_epochs({**self._epochs, host: epoch})
        log.warning("host %s's credential revoked: its new one is of epoch %d (clockfabric token host %s --epoch %d)",
                    host, epoch, host, epoch, extra={"host": host, "reason": "revoked"})
        return epoch

    def _set_epochs(self, epochs: dict[str, int]) -> None:
        self._epochs = epochs
        if self.series is not None:
            self.series.set_epochs(epochs)

    @property
    def enroll_unknown(self) -> bool:
        return self.enroll == "any"

    @property
    def samples(self) -> Series:
        """The one reader of samples: the series engine's query API."""
        reader = self.series.series if self.series is not None else None
        if reader is None:
            raise SeriesError("this controller runs without a series engine: start it with one "
                              "(the default) or give --series-url")
        return reader

    @property
    def monitor(self) -> Any:
        return self.replica.monitor if self.replica is not None else self._monitor

    def push(self, host: str, boot: str, info: dict, events: list[dict], dropped_events: int,
             paths: list | None = None, *, ended: list[dict] | None = None, boots: list[str] | None = None) -> dict:
        """`paths`: the host's path map (agent.pathmap rows), when its agent sends one. `ended`: the
        agent runs that ended, with what they delivered; `boots`: the runs the agent's log knows
        (None: an agent that does not say). Stored outside the fleet's lock: pushes that arrive
        together share one transaction (storage.batch)."""
        now = self.clock()
        try:
            return self._push(now, host, boot, info, events, dropped_events, paths, ended, boots)
        except StorageError as e:
            self.write_refused = e
            raise

    def _push(self, now: int, host: str, boot: str, info: dict, events: list[dict], dropped_events: int,
              paths: list | None, ended: list[dict] | None, boots: list[str] | None) -> dict:
        stored = None
        if host not in self._boots:
            stored = self.storage.host(host)
            self._boots[host] = stored.info.get("boot") if stored is not None else None
        if not self.enroll_unknown and host not in self._known:
            if stored is None and self.storage.host(host) is None:
                self._refuse(host)
            self._known.add(host)  # hosts are never removed: one look per host suffices
        evs = [Event(host=host, seq=e["seq"], boot=e.get("boot") or boot, t_ns=e["t_ns"], kind=e["kind"],
                     device=e.get("device", ""), detail=e.get("detail", {}), synced=e.get("synced", True))
               for e in events]
        if dropped_events:
            evs.append(Event(host=host, seq=0, boot=f"{boot}:drop:{now}", t_ns=now, kind="events_dropped",
                             detail={"count": dropped_events}, synced=False))
        evs += boot_ends(host, boot, self._boots[host], ended or [], boots, now)
        new = self.storage.add_push(host, now, {**info, "boot": boot}, evs)
        reply: dict[str, Any] = {}
        if self.series is not None:
            if host not in self._let_write:  # a host the controller took a push from may write its samples
                self.series.allow([host])
                self._let_write.add(host)
            if self.series.can_write(host):  # until then, the agent's samples ride its push, not stored
                reply["series_port"] = self.series.write_port
        self._boots[host] = boot
        self.write_refused = None
        with self.lock:
            self.stale.discard(host)
            monitor = self.monitor
            if monitor is not None:
                monitor.storage_wrote(now)
                if paths is not None:
                    monitor.observe_paths(host, paths, now)
                if self.replica is None:  # a replica's leader reads every replica's pushes from the database
                    monitor.observe(evs, [], now)
        return {"events_new": new, "events": len(evs), **self.asks, **reply}

    def _refuse(self, host: str) -> None:
        """A host not in the fleet file pushes: refused (the API answers 403 naming the fix), and
        logged once per host, so the operator sees an agent running where the fleet file has no node.
        Where unknown hosts are held for approval, `hold` takes it from here."""
        if host not in self._refused and self.enroll != "pending":
            self._refused.add(host)
            log.warning("refused pushes from host %s: not in the fleet topology (add it, or run the controller "
                        "with --enroll-unknown)", host, extra={"host": host, "reason": "not_enrolled"})
        raise UnknownHost(host)

    def hold(self, host: str, info: dict, neighbours: dict[str, str]) -> str:
        """An unknown host's push, under `enroll="pending"`: what it says of itself and hears is
        kept (held_info) until an operator approves or rejects it. Its state: "pending",
        "rejected", or "full" (too many held). The same again is written at most every
        HOLD_REFRESH_NS: a held host pushes every few seconds."""
        kept = held_info(info, neighbours)
        now = self.clock()
        last = self._held.get(host)
        if last is not None and last[0] == kept and now - last[1] < HOLD_REFRESH_NS:
            return last[2]
        state = self.storage.hold(host, now, kept)
        if state == "full":
            if host not in self._refused:
                self._refused.add(host)
                log.warning("refused host %s: too many hosts wait for approval; approve or reject them "
                            "(clockfabric hosts pending)", host, extra={"host": host, "reason": "pending_full"})
            return state
        if last is None and state == "pending":
            log.warning("host %s waits for approval (not in the fleet topology): `clockfabric hosts approve %s` "
                        "admits it", host, host, extra={"host": host, "reason": "pending"})
        if len(self._held) >= MAX_HELD_CACHE and host not in self._held:
            self._held.pop(next(iter(self._held)))
        self._held[host] = (kept, now, state)
        return state

    def approve(self, host: str) -> bool:
        """Enroll a held host: its next push is stored. False if it is not held."""
        if not self.storage.approve(host, self.clock()):
            return False
        self._held.pop(host, None)
        self._refused.discard(host)
        log.info("host %s approved: enrolled", host, extra={"host": host})
        return True

    def reject(self, host: str) -> bool:
        """Refuse a held host's pushes from now on. False if it is not held."""
        if not self.storage.reject(host):
            return False
        self._held.pop(host, None)
        log.info("host %s rejected: its pushes are refused", host, extra={"host": host})
        return True

    def tick(self) -> None:
        """Once a second: hosts that went quiet, and the alerts."""
        now = self.clock()
        with self.lock:
            try:
                hosts = self.storage.hosts()
            except StorageError as e:
                if self.monitor is not None:
                    self.monitor.storage_failed(e, now)
                return
            quiet = {h.name for h in hosts if h.last_seen_ns is not None and now - h.last_seen_ns > self.stale_ns}
            for h in quiet - self.stale:
                log.warning("host %s is stale: no push for %.1f s", h, self.stale_ns / 1e9)
            self.stale = quiet
        series_down = self.series.down if self.series is not None else None
        rules_down = self.series.rules_down if self.series is not None else None
        if self.replica is not None:  # outside the lock: alerts may wait on storage
            self.replica.tick(now, quiet, series_down, rules_down)
        elif self.monitor is not None:
            self.monitor.tick(now, stale=quiet, series_down=series_down, rules_down=rules_down)

    def host_rows(self) -> list[dict]:
        now = self.clock()
        rows = []
        for h in self.storage.hosts():
            # from storage, not from `stale`: another replica may have had the host's last push
            state = "never seen" if h.last_seen_ns is None else ("stale" if now - h.last_seen_ns > self.stale_ns
                                                                 else "ok")
            rows.append({"host": h.name, "state": state, "last_seen_ns": h.last_seen_ns,
                         "age_s": None if h.last_seen_ns is None else (now - h.last_seen_ns) / 1e9, "info": h.info})
        return rows
