"""Agent -> controller: events and summaries over HTTP, buffered while the controller is away.

One thread. It pushes on a beat, once per `interval_s` at instants fixed on the wall clock (a
phase drawn from the host's name spreads a fleet's pushes over the interval), and at once when
woken (a link went down: the controller should know within a second). A beat's samples carry the
beat's own time: their series' timestamps are then evenly spaced, which the series engine stores
in next to nothing, where the time a push happened to finish costs it a byte or so a sample.
Events wait in a bounded buffer until the controller has taken them; if the buffer fills while
the controller is away, the oldest go first and the next push says how many were dropped.
Samples are only the latest summary: a summary the controller missed is replaced by a newer
one, not replayed.

Several controller replicas may be given (URLs, comma-separated): each agent starts on the one
its host name hashes to, so a fleet spreads over them, and stays there until a push fails.

A controller that holds this host for an operator's approval (`--enroll pending`) answers 202:
the events stay here, and the push goes again after the wait it asks for (Retry-After), not as a
failure; the first push it stores after the approval carries them.

What the controller cannot take for now (5xx, a timeout, 401, 408, 429) is sent again: to the
next replica at once, and after a failure on every one, after an exponential backoff with full
jitter (a random wait up to interval * 2^rounds, capped at MAX_BACKOFF_S: a fleet that lost its
controller together does not come back in step) and no sooner than the longest Retry-After the
round was given (seconds or an HTTP date). What it refuses as invalid (any other 4xx) would
be refused for ever: those events are quarantined (counted, logged, dropped), the ones the
refusal names if it names any, else the push's, and the stream goes on with the events after them.
"""

from __future__ import annotations

import logging
import math
import random
import ssl
import threading
import time
import uuid
import zlib
from collections import deque
from collections.abc import Callable, Sequence
from datetime import timezone
from email.utils import parsedate_to_datetime
from itertools import islice

from clockfabric import wirejson
from clockfabric.agent.eventlog import EventLog
from clockfabric.agent.http_post import Poster, PostFailed, Reply, encode
from clockfabric.agent.series_write import SeriesWriter, gate_url
from clockfabric.errors import ClockfabricError

log = logging.getLogger(__name__)
BUFFER_EVENTS = 10_000
PUSH_EVENTS = 2_000  # per request; more go in the next one, at once
MAX_BACKOFF_S = 10.0
MAX_RETRY_AFTER_S = 60.0
# past the controller's wait for a busy SQLite file (5 s): a locked database is answered 503, not timed out
PUSH_TIMEOUT_S = 10.0
RETRIED = frozenset({401, 408, 429})  # 4xx that pass: a token being rotated, a slow client, a throttle


class Pusher(threading.Thread):
    def __init__(self, url: str, token: str, host: str, *, snapshot: Callable[[], tuple[list[dict], list[dict], dict]],
                 interval_s: float = 1.0, buffer_events: int = BUFFER_EVENTS,
                 verify: str | bool | ssl.SSLContext = True,
                 paths: Callable[[], list] | None = None, rng: random.Random | None = None,
                 log: EventLog | None = None, on_reply: Callable[[dict], None] | None = None):
        """`url`: the controller's URL, or its replicas' URLs comma-separated.
        `snapshot()` returns (new events, current samples, agent info); events are taken from
        the caller's sources exactly once, so they must be kept here until the controller has them.
        `paths()`: the host's path map (agent.pathmap rows), sent whole with every push.
        `rng`: the backoff's jitter (tests give a seeded one). `log`: where events are held until
        the controller has them (agent.eventlog; None: in memory, `buffer_events` at most).
        `on_reply`: given the controller's answer to each push it took (the QoS policies ride on it)."""
        super().__init__(name="controller-push", daemon=True)
        self.urls = [u.strip().rstrip("/") + "/api/v1/push" for u in url.split(",") if u.strip()]
        if not self.urls:
            raise ClockfabricError("no controller URL given: give http(s)://HOST:PORT, several comma-separated")
        self._at = zlib.crc32(host.encode()) % len(self.urls)  # stable across runs, unlike hash()
        self._failed_in_row = 0
        self.host = host
        self.snapshot = snapshot
        self.on_reply = on_reply
        self.paths = paths
        self.interval_s = interval_s
        self.boot = uuid.uuid4().hex[:12]  # this agent run: (host, boot, seq) names an event for good
        self.log = log if log is not None else EventLog(None, buffer_events)
        self.log.start_boot(self.boot)
        self.counters = {"pushes": 0, "push_failures": 0, "events_sent": 0, "events_dropped": 0,
                         "quarantined": 0}
        self._unreported_drops = 0
        self._retry_after_s = 0.0  # the last push's Retry-After
        self.held = False  # the controller holds this host for an operator's approval (its last answer: 202)
        self._rng = rng or random.Random()
        self._last_refusal = ""
        self._wake = threading.Event()
        self._stopping = threading.Event()
        # the log and the snapshot's cursors, between the pusher's thread and hold()'s (a link watcher's)
        self._lock = threading.RLock()
        if isinstance(verify, str):  # a private CA's file
            try:
                verify = ssl.create_default_context(cafile=verify)
            except (OSError, ssl.SSLError) as e:
                raise ClockfabricError(f"cannot read the CA file {verify}: {e.strerror or e}; "
                                       "give the PEM file of the CA that signed the controller's certificate") from None
        self._client = Poster({"Authorization": f"Bearer {token}"}, PUSH_TIMEOUT_S, verify)
        self.series = SeriesWriter(self._client)
        self.series_port: int | None = None  # the gate's, as the controller last named it

    @property
    def url(self) -> str:
        """Where pushes go now."""
        return self.urls[self._at]

    def wake(self) -> None:
        self._wake.set()

    def hold(self) -> None:
        """Take the services' new events and put them on disk now, from the caller's thread: a link
        that changed is held even while a push hangs on the network it took down."""
        with self._lock:
            events, _samples, _info = self.snapshot()
            self.add_events(events)
            self.log.commit()

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()

    @property
    def pending(self) -> deque[dict]:
        """Events held until the controller has them, oldest first (earlier boots' too)."""
        return self.log.pending

    @property
    def seq(self) -> int:
        """The last seq this boot numbered."""
        return self.log.current.last_seq

    def add_events(self, events: list[dict]) -> None:
        with self._lock:
            dropped = self.log.add(events)
        self.counters["events_dropped"] += dropped
        self._unreported_drops += dropped

    def run(self) -> None:
        wait: float | None = None  # None: until the next beat
        rounds = 0  # rounds in a row in which every replica failed
        asked_s = 0.0  # the longest Retry-After of this round
        try:
            while not self._stopping.is_set():
                beat_ms = None
                if wait is None:
                    now_ms = time.time_ns() // 1_000_000
                    beat_ms = next_beat_ms(now_ms, self.interval_s, self.host)
                    wait = (beat_ms - now_ms) / 1000
                woken = self._wake.wait(wait)
                self._wake.clear()
                if self.push_once(None if woken else beat_ms):
                    wait, rounds, asked_s = None, 0, 0.0
                    if self.held and self._retry_after_s > self.interval_s:  # as often as the controller asks, no more
                        wait = self._retry_after_s
                    self._failed_in_row = 0
                    continue
                self._failed_in_row += 1
                self._at = (self._at + 1) % len(self.urls)
                asked_s = max(asked_s, self._retry_after_s)
                if self._failed_in_row % len(self.urls):
                    wait = 0.0  # a replica not tried since the last success: at once
                else:
                    rounds += 1
                    wait = max(backoff_s(rounds, self.interval_s, self._rng), asked_s)
                    asked_s = 0.0
            self.push_once()  # a last one: what happened just before we stopped
        finally:
            self._client.close()
            self.log.close()

    def push_once(self, beat_ms: int | None = None) -> bool:
        """One push; `beat_ms`: the beat it is made for, the time its samples carry (None: now)."""
        with self._lock:
            events, samples, info = self.snapshot()
            self.add_events(events)
            self.log.commit()  # on disk before the controller can have them
            batch = list(islice(self.pending, PUSH_EVENTS))
            ended = self.log.ended(final=self._stopping.is_set())
            boots = list(self.log.boots)
        # a summary without a number to give (NaN, inf) is left out: the controller refuses them
        samples = [x for x in samples if math.isfinite(x["value"])]
        # samples go to the series gate once the controller has named it; until then, in the push
        body = {"host": self.host, "boot": self.boot, "info": info, "events": batch,
                "samples": samples if self.series_port is None else [],
                "dropped_events": self._unreported_drops, "boots": boots, "ended": ended}
        if self.paths:
            body["paths"] = self.paths()
        self._retry_after_s = 0.0
        try:
            r = self._client.post(self.url, encode(body))
        except PostFailed as e:
            return self._failed(str(e))
        if r.status_code == 202:
            self._held_for_approval(r)
            return True
        if self.held:
            self.held = False
            log.info("controller %s admits host %s now", self.url, self.host)
        if 400 <= r.status_code < 500 and r.status_code not in RETRIED:
            self._quarantine(batch, r)
            return True
        if r.status_code != 200:
            self._retry_after_s = retry_after_s(r.headers.get("retry-after"))
            return self._failed(f"HTTP {r.status_code}: {self._client.scrub(r.text)[:200]}")
        with self._lock:
            self._taken(batch, delivered=True)
            self.log.reported(b["boot"] for b in ended)
        try:
            answer = r.json()
        except ValueError:  # not JSON: a controller too old to answer with anything to act on
            answer = None
        self._write_series(answer.get("series_port") if isinstance(answer, dict) else None, samples, beat_ms)
        self._unreported_drops = 0
        self.counters["pushes"] += 1
        self.counters["events_sent"] += len(batch)
        if self.on_reply is not None and isinstance(answer, dict):
            self.on_reply(answer)
        return True

    def _held_for_approval(self, r: Reply) -> None:
        """202: nothing taken; the events wait here, and the next push comes when the controller asks."""
        self._retry_after_s = retry_after_s(r.headers.get("retry-after"))
        if not self.held:
            self.held = True
            log.warning("controller %s holds host %s until an operator approves it (`clockfabric hosts approve "
                        "%s`); its events wait here meanwhile", self.url, self.host, self.host)

    def _write_series(self, port: object, samples: list[dict], beat_ms: int | None) -> None:
        """The samples to the series gate the controller's answer names."""
        self.series_port = port if isinstance(port, int) else None
        if self.series_port is not None:
            self.series.write(gate_url(self.url, self.series_port), samples,
                              None if beat_ms is None else beat_ms * 1_000_000)

    def _taken(self, batch: list[dict], keep: Sequence[dict] = (), *, delivered: bool) -> None:
        """The batch leaves the log (new events may have been added behind it), but for `keep`."""
        self.log.taken(batch, keep, delivered=delivered)
        if self.pending:
            self._wake.set()

    def _quarantine(self, batch: list[dict], r: Reply) -> None:
        """The controller refused the push as invalid: drop the events it names (all of the
        batch if it names none), keep the others for the next push."""
        named = _event_indexes(r)
        bad = [e for i, e in enumerate(batch) if i in named] if named else batch
        with self._lock:
            self._taken(batch, [e for i, e in enumerate(batch) if i not in named] if named else [], delivered=False)
        self.counters["quarantined"] += len(bad)
        reason = f"HTTP {r.status_code}: {self._client.scrub(r.text)[:300]}"
        if reason != self._last_refusal:  # once per reason, not once per push
            self._last_refusal = reason
            log.warning("controller %s refused %d event(s) (seq %s), dropped so that the events after them go "
                        "on: %s", self.url, len(bad), ", ".join(str(e["seq"]) for e in bad[:10]) or "none", reason)

    def _failed(self, why: str) -> bool:
        self.counters["push_failures"] += 1
        if self.counters["push_failures"] in (1, 10) or self.counters["push_failures"] % 100 == 0:
            log.warning("push to %s failed (%d so far, %d events held): %s", self.url,
                        self.counters["push_failures"], len(self.pending), why)
        return False


def _event_indexes(r: Reply) -> set[int]:
    """The batch's events a 422 names (its detail's places: ["body", "events", i, ...])."""
    try:
        errors = wirejson.loads(r.content).get("detail")
    except ValueError:
        return set()
    if not isinstance(errors, list):
        return set()
    return {e["loc"][2] for e in errors if isinstance(e, dict) and isinstance(e.get("loc"), list)
            and e["loc"][:2] == ["body", "events"] and len(e["loc"]) > 2 and isinstance(e["loc"][2], int)}


def next_beat_ms(now_ms: int, interval_s: float, host: str) -> int:
    """The first of the host's beats after `now_ms`: the instants k * interval + phase (ms since
    the epoch), the phase the host name's hash within the interval, stable across runs."""
    interval_ms = max(1, round(interval_s * 1000))
    phase_ms = zlib.crc32(host.encode()) % interval_ms
    return now_ms - (now_ms - phase_ms) % interval_ms + interval_ms


def backoff_s(rounds: int, base_s: float, rng: random.Random) -> float:
    """The wait after `rounds` failed rounds in a row: full jitter, uniform in
    [0, min(MAX_BACKOFF_S, base_s * 2^rounds)]."""
    return rng.uniform(0.0, min(MAX_BACKOFF_S, base_s * 2.0 ** min(rounds, 32)))


def retry_after_s(value: str | None, now_s: float | None = None) -> float:
    """Seconds a Retry-After header asks for, in delta-seconds or as an HTTP date (RFC 9110
    10.2.3): 0 if none or unreadable, at most MAX_RETRY_AFTER_S."""
    if not value:
        return 0.0
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return 0.0
        if when.tzinfo is None:  # "-0000": an HTTP date is always UTC
            when = when.replace(tzinfo=timezone.utc)
        seconds = when.timestamp() - (time.time() if now_s is None else now_s)
    if not math.isfinite(seconds):
        return 0.0
    return min(MAX_RETRY_AFTER_S, max(0.0, seconds))


def link_payload(watcher, after_seq: int,
                 to_time: Callable[[int], tuple[int, bool]]) -> tuple[list[dict], list[dict], int]:
    """A LinkWatcher's news for the controller: transitions after `after_seq` as events (their
    time through `to_time`: real ns -> (ns to report, synced?)), every link's state as samples,
    and the last seq taken."""
    events = []
    for tr in watcher.events(after_seq=after_seq):
        after_seq = tr.seq
        t_ns, synced = to_time(tr.t_ns)
        events.append({"t_ns": t_ns, "synced": synced, "kind": f"link_{tr.kind}", "device": tr.device,
                       "detail": {"carrier_changes": tr.carrier_changes, "resync": tr.resync}})
    samples = []
    for device, d in watcher.snapshot()["devices"].items():
        if d["state"] is not None:
            samples.append({"name": "link_up", "value": float(d["state"]["up"]), "labels": {"device": device}})
        samples.append({"name": "link_transitions_total", "value": float(d["transitions"]),
                        "labels": {"device": device}})
    return events, samples, after_seq


def neighbour_samples(heard: dict[str, str | None]) -> list[dict]:
    """Each interface's LLDP neighbour ("" where none is heard: that withdraws an earlier one)."""
    return [{"name": "lldp_neighbour", "value": float(bool(seen)),
             "labels": {"device": device, "neighbour": seen or ""}}
            for device, seen in heard.items()]
