"""Detectors and alerts behind the controller: what the fleet pushes goes in, alerts come out.

Pushes arrive on server threads and call `observe` with their events; the controller's ticker
calls `tick` once a second, which feeds the detectors the samples written since (read from the
series engine, series.feed; a read that is not cheap only once per half of the fleet's cadence)
and syncs the alerts (the detectors' lock is not held while storage writes them; their posts to
Alertmanager only queue). At start, recent history is replayed into
the detectors, so a restarted controller neither forgets a flapping link nor resolves its alert
by mistake.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence

from clockfabric.controller.alertmanager import AlertmanagerClient
from clockfabric.controller.alerts import AlertManager
from clockfabric.controller.config import MonitorConfig, parse_config
from clockfabric.controller.detectors import DetectorSet, Finding
from clockfabric.controller.series.feed import SampleFeed
from clockfabric.controller.series.read import Series, SeriesError
from clockfabric.controller.series.sample import Sample
from clockfabric.controller.storage.base import Event, Storage, StorageError
from clockfabric.topology import Topology

log = logging.getLogger(__name__)
REPLAY_NS = 300 * 10**9  # history fed to the detectors at start
REPLAY_MAX = 50_000
# after a read of the feed the engine refused, the next waits this long, doubling with each refusal
# in a row up to the most: an engine asked again at once by reads it cannot answer spends on them
# what its writers need, and answers none of them sooner
FEED_PAUSE_S, FEED_PAUSE_MAX_S = 1.0, 30.0


class Monitor:
    def __init__(self, detectors: DetectorSet, alerts: AlertManager, topology: Topology | None = None,
                 feed: SampleFeed | None = None):
        """`feed`: the detectors' samples from the series engine, read at each tick."""
        self.detectors = detectors
        self.feed = feed
        # told of each tick's read of the feed, if set: seconds, samples (None: failed), and how far
        # behind the fleet the detectors were (the oldest sample fed's age at the read's end; None: none fed)
        self.fed: Callable[[float, int | None, float | None], None] | None = None
        self._feed_error = ""
        self._feed_refused = 0  # reads refused in a row
        self._feed_after = 0.0  # monotonic: no read before
        self.alerts = alerts
        self.topology = topology
        self.lock = threading.Lock()
        self._path_maps: dict[str, tuple[int, list[tuple]]] = {}  # host -> (when it changed, its path map)
        self._links_through = functools.lru_cache(maxsize=100_000)(self._links)

    @classmethod
    def create(cls, storage: Storage, *, topology: Topology | None = None, config: MonitorConfig | None = None,
               alertmanagers: Sequence[str] = (), generator_url: str = "http://localhost/",
               series: Series | None = None) -> Monitor:
        """`alertmanagers`: the URLs every alert is posted to (none: storage and the log only);
        `generator_url`: the page an alert links back to (the controller's dashboard); `series`:
        where the detectors read their samples."""
        cfg = config or parse_config({})
        client = AlertmanagerClient(list(alertmanagers), generator_url=generator_url) if alertmanagers else None
        detectors = DetectorSet(cfg, topology)
        monitor = cls(detectors, AlertManager(storage, alertmanager=client), topology,
                      SampleFeed(series, detectors.reads()) if series is not None else None)
        monitor.replay(storage)
        return monitor

    def replay(self, storage: Storage) -> None:
        now = self.alerts.clock()
        events: list[Event] = []
        after = 0
        while len(events) < REPLAY_MAX:
            page = storage.events(since_ns=now - REPLAY_NS, after_id=after, limit=1000)
            events += page
            if len(page) < 1000:
                break
            last = page[-1].id
            assert last is not None  # stored rows have ids
            after = last
        with self.lock:
            self.detectors.on_events(events, now)
        if events:
            log.info("replayed %d events of the last %d s into the detectors", len(events), REPLAY_NS // 10**9)

    def observe(self, events: list[Event], samples: list[Sample], now_ns: int) -> None:
        with self.lock:
            self.detectors.on_events(events, now_ns)
            self.detectors.on_samples(samples, now_ns)

    def observe_paths(self, host: str, rows: list[tuple], now_ns: int) -> None:
        """A host's path map, (peer, path label, plane, switch at TTL 2 or None) per probe path:
        each path's links go to the detectors, so congestion names a link, not a pair."""
        rows = [tuple(r) for r in rows]
        if self.topology is None or self._path_maps.get(host, (0, None))[1] == rows:
            return
        mapping = {(host, peer, label): self._links_through(host, peer, plane, via)
                   for peer, label, plane, via in rows}
        with self.lock:
            self._path_maps[host] = (now_ns, rows)
            self.detectors.set_path_links(mapping, src=host)

    def path_map(self, host: str | None = None) -> list[dict]:
        """Each probe path's switch and links, as its host last learned them."""
        with self.lock:
            maps = sorted((h, m) for h, m in self._path_maps.items() if host in (None, h))
        return [{"src": src, "dst": peer, "path": label, "plane": plane, "via": via, "t_ns": t_ns,
                 "links": self._links_through(src, peer, plane, via)}
                for src, (t_ns, rows) in maps for peer, label, plane, via in rows]

    def _links(self, host: str, peer: str, plane: int, via: str | None) -> list[str]:
        if self.topology is None:
            return []
        hosts = self.topology.hosts
        if host not in hosts or peer not in hosts or (via is not None and via not in self.topology.switches):
            return []  # a host or switch this topology does not know: no links to name
        return self.topology.links_through(host, peer, plane, via)

    def storage_failed(self, error: StorageError, now_ns: int) -> None:
        self.alerts.raise_storage_alert(error, now_ns)

    def storage_wrote(self, now_ns: int) -> None:
        self.alerts.storage_wrote(now_ns)

    def tick(self, now_ns: int, *, stale: Iterable[str] = (), series_down: str | None = None,
             rules_down: str | None = None) -> None:
        """`series_down`, `rules_down`: why the series engine, vmalert do not answer (None while they do)."""
        if self.feed is not None and not series_down and time.monotonic() >= self._feed_after:
            started = time.perf_counter()
            try:
                samples = self.feed.new(now_ns)
            except SeriesError as e:  # the engine's own alert says so; a later tick reads the window again
                if str(e) != self._feed_error:
                    log.warning("detectors' samples not read: %s", e)
                self._feed_error = str(e)
                self._feed_refused += 1
                pause = min(FEED_PAUSE_MAX_S, FEED_PAUSE_S * 2 ** (self._feed_refused - 1))
                self._feed_after = time.monotonic() + pause
                if self.fed is not None:
                    self.fed(time.perf_counter() - started, None, None)
            else:
                took = time.perf_counter() - started
                self._feed_error, self._feed_refused = "", 0
                self._feed_after = time.monotonic() - took + self.feed.spacing_s(took)  # from its start
                if self.fed is not None:
                    behind = (now_ns + took * 1e9 - samples[0].t_ns) / 1e9 if samples else None
                    self.fed(took, len(samples), behind)
                self.observe([], samples, now_ns)
        with self.lock:
            findings = self.detectors.active(now_ns)
        for host in stale:
            findings[f"stale:{host}"] = Finding(f"stale:{host}", "host_stale", "warning",
                                                f"{host} has stopped pushing to the controller", {"host": host})
        client = self.alerts.alertmanager
        for url, why in (client.away() if client else {}).items():  # sent by the other of a pair, or once back
            findings[f"alertmanager:{url}"] = Finding(
                f"alertmanager:{url}", "alertmanager_unreachable", "critical",
                f"Alertmanager {url} does not take alerts ({why}); they are sent when it does", {"url": url})
        if series_down:
            findings["series_engine"] = Finding("series_engine", "series_engine", "critical",
                                                f"the series engine fails: {series_down}; samples are not "
                                                "stored or read until it recovers")
        if rules_down:
            findings["rules"] = Finding("rules", "rules_down", "critical",
                                        f"the rules are not evaluated: {rules_down}; no rule's alert "
                                        "(latency SLA, clock sync) is raised until it answers")
        self.alerts.sync(findings, now_ns)
