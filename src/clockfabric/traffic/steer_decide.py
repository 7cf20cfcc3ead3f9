"""Transparent mode's decisions, from numbers alone: no sockets, no kernel, so every rule of
it can be tested with recorded readings.

  FlowKey, Flow          a connection, and what the steerer knows of it
  FlowSample, FlowRates  sock_diag readings in, per-flow rates out
  PathDelay, DelayBook   one-way delays in, standing queue per path out
  Steerer                congestion readings and flows in, moves out

What "congested" means: the one-way delay of a plane's heartbeats above that path's floor, in
the direction we send. The receiver keeps the *standing* queue of each path (the least delay
over the last second above the path's floor, as CoDel judges a queue) and tells the sender in
its own heartbeats. No clock sync is needed: a floor taken on the same pair of clocks cancels
their offset.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

UNKNOWN = 0xFFFF  # a queue report with no reading
QUEUE_UNIT_S = 1e-4  # queue reports travel in units of 100 us


# ---- flows ---------------------------------------------------------------------------------------
@dataclass(frozen=True, order=True)
class FlowKey:
    local: str
    lport: int
    remote: str
    rport: int

    def __str__(self) -> str:
        return f"{self.local}:{self.lport}->{self.remote}:{self.rport}"


@dataclass(frozen=True)
class Flow:
    """One established connection of this host to a peer, as the steerer sees it."""

    key: FlowKey
    peer: str  # the peer's name
    rate_bps: float = 0.0  # sent and acknowledged, or received (whichever is more), over the last readings
    backlog_bytes: int = 0  # written by the application, not yet acknowledged
    plane: int | None = None  # where it goes now, when already known


@dataclass(frozen=True)
class FlowSample:
    """One reading of a connection's TCP counters (steer_kernel.FlowReader takes them)."""

    key: FlowKey
    cookie: int  # the socket's identity: a reused 5-tuple is another connection
    bytes_acked: int
    backlog_bytes: int
    rtt_us: int
    bytes_received: int = 0


@dataclass
class FlowRates:
    """Rates from successive readings of bytes acknowledged and received, per connection: the
    larger of the two directions."""

    window_s: float = 2.0
    seen: dict[FlowKey, tuple[int, deque]] = field(default_factory=dict)  # key -> (cookie, (t, acked))

    def update(self, t: float, samples: Iterable[FlowSample]) -> dict[FlowKey, float]:
        rates, keep = {}, set()
        for s in samples:
            keep.add(s.key)
            cookie, hist = self.seen.get(s.key, (None, None))
            if cookie != s.cookie or hist is None:
                hist = deque()
                self.seen[s.key] = (s.cookie, hist)
            hist.append((t, s.bytes_acked, s.bytes_received))
            while len(hist) > 2 and hist[1][0] <= t - self.window_s:
                hist.popleft()
            t0, sent0, received0 = hist[0]
            moved = max(s.bytes_acked - sent0, s.bytes_received - received0)
            rates[s.key] = 8 * moved / (t - t0) if t > t0 else 0.0
        for gone in set(self.seen) - keep:
            del self.seen[gone]
        return rates


# ---- congestion: one-way delay above the floor, per path -----------------------------------------
class PathDelay:
    """One path's delay samples (seconds; any constant clock offset included): its standing
    queue is the least delay of the last `window_s` above its floor, the least delay of the
    last `floor_s` (kept as per-bucket minima, so an old floor ages out)."""

    def __init__(self, window_s: float = 1.0, floor_s: float = 60.0, bucket_s: float = 5.0):
        self.window_s, self.floor_s, self.bucket_s = window_s, floor_s, bucket_s
        self.recent: deque[tuple[float, float]] = deque()
        self.buckets: deque[tuple[float, float]] = deque()  # (bucket start, least delay in it)

    def add(self, t: float, delay_s: float) -> None:
        self.recent.append((t, delay_s))
        start = math.floor(t / self.bucket_s) * self.bucket_s
        if self.buckets and self.buckets[-1][0] == start:
            self.buckets[-1] = (start, min(self.buckets[-1][1], delay_s))
        else:
            self.buckets.append((start, delay_s))
        self._expire(t)

    def _expire(self, t: float) -> None:
        while self.recent and self.recent[0][0] <= t - self.window_s:
            self.recent.popleft()
        while self.buckets and self.buckets[0][0] + self.bucket_s <= t - self.floor_s:
            self.buckets.popleft()

    def standing(self, t: float) -> float | None:
        self._expire(t)
        return min((d for _, d in self.recent), default=None)

    def floor(self, t: float) -> float | None:
        self._expire(t)
        return min((d for _, d in self.buckets), default=None)


class DelayBook:
    """Every path's delays from every peer. A path's floor is also capped by the best floor
    among the same peer's paths plus `spread_s`: on one pair of clocks the offset is the same
    on every path, so a path that was loaded from the start (and never showed its floor) is
    still judged against its siblings."""

    def __init__(self, window_s: float = 1.0, floor_s: float = 60.0, spread_s: float = 0.001):
        self.window_s, self.floor_s, self.spread_s = window_s, floor_s, spread_s
        self.paths: dict[str, dict[tuple[int, int], PathDelay]] = {}

    def add(self, peer: str, path: tuple[int, int], t: float, delay_s: float) -> None:
        paths = self.paths.setdefault(peer, {})
        if path not in paths:
            paths[path] = PathDelay(self.window_s, self.floor_s)
        paths[path].add(t, delay_s)

    def forget(self, peer: str) -> None:
        """The peer restarted (a new clock offset, maybe): its floors start again."""
        self.paths.pop(peer, None)

    def queues(self, peer: str, t: float) -> dict[tuple[int, int], float | None]:
        """Each path's standing queue above its floor (None: nothing heard within the window)."""
        paths = self.paths.get(peer, {})
        floors = {path: pd.floor(t) for path, pd in paths.items()}
        best = min((f for f in floors.values() if f is not None), default=None)
        out: dict[tuple[int, int], float | None] = {}
        for path, pd in paths.items():
            standing, floor = pd.standing(t), floors[path]
            if standing is None or floor is None or best is None:  # best is None only when every floor is
                out[path] = None
                continue
            out[path] = max(0.0, standing - min(floor, best + self.spread_s))
        return out


def encode_queue(q: float | None) -> int:
    return UNKNOWN if q is None else min(UNKNOWN - 1, round(q / QUEUE_UNIT_S))


def decode_queue(v: int) -> float | None:
    return None if v == UNKNOWN else v * QUEUE_UNIT_S


# ---- the decision: pure ----------------------------------------------------------------------------
@dataclass(frozen=True)
class SteerPolicy:
    high_s: float = 0.005  # a standing queue from here (one way, above the floor) is congestion
    low_s: float = 0.0015  # ...and at or below this the plane is quiet
    sustain_s: float = 1.0  # a plane must read congested (or quiet) this long before it counts
    hold_s: float = 10.0  # a moved flow stays at least this long; it goes back only after its
    #                       plane of origin has been quiet this long. Doubled for each earlier move of
    #                       the flow within damp_window_s: a plane that was quiet only because the flow
    #                       had left it is tried again ever more rarely
    settle_s: float = 2.0  # between moves toward one peer: see the last one's effect first
    min_rate_bps: float = 1e6  # flows sending (or receiving) less than this...
    min_backlog_bytes: int = 64 * 1024  # ...and with less than this waiting are not worth a rule
    moves_per_peer: int = 1  # flows moved toward a peer at a time
    damp_moves: int = 4  # a flow moved this often within damp_window_s stays where it is
    damp_window_s: float = 120.0
    interval_s: float = 0.5  # how often flows are read and moves considered


@dataclass(frozen=True)
class Move:
    t: float
    kind: str  # steered | unsteered | released | adopted
    peer: str
    flow: FlowKey
    plane: int | None  # where the flow goes now (None: back to the host's own route)
    origin: int | None  # the plane it hashed onto
    reason: str = ""


@dataclass
class PlaneLoad:
    """One (peer, plane): congested or quiet, each only after it has lasted `sustain_s`."""

    congested: bool = False
    queue_s: float | None = None
    above_since: float | None = None  # q >= high continuously since
    below_since: float | None = None  # q <= low continuously since

    def observe(self, t: float, q: float | None, policy: SteerPolicy) -> None:
        self.queue_s = q
        if q is None:  # no reading: neither evidence of congestion nor of quiet
            self.above_since = self.below_since = None
            self.congested = False
            return
        self.above_since = (t if self.above_since is None else self.above_since) if q >= policy.high_s else None
        self.below_since = (t if self.below_since is None else self.below_since) if q <= policy.low_s else None
        if not self.congested and self.above_since is not None and t - self.above_since >= policy.sustain_s:
            self.congested = True
        elif self.congested and self.below_since is not None and t - self.below_since >= policy.sustain_s:
            self.congested = False

    def quiet(self, t: float, for_s: float) -> bool:
        return not self.congested and self.below_since is not None and t - self.below_since >= for_s


@dataclass
class Steered:
    peer: str
    plane: int  # sent on now
    origin: int | None  # hashed onto (None: unknown, e.g. adopted from an old rule without it)
    since: float


@dataclass
class Steerer:
    """Which flows to move where, from per-(peer, plane) queue readings and the flows' rates.

    A flow moves when the plane it is on has been congested for `sustain_s` toward its peer and
    another plane has been quiet as long: the busiest flows first, `moves_per_peer` at a time,
    then `settle_s` to see the effect. Nothing moves when every plane is congested or none is.
    A moved flow stays at least its hold; it goes back (its rule removed) once its plane of
    origin has been quiet for its hold, or (after `hold_s`) when its new plane turns congested
    while the origin is quiet; it moves on if its new plane turns congested while a third is quiet. The
    hold is `hold_s`, doubled for every earlier move of the flow in `damp_window_s` (a plane
    quiet only because the flow left it is tried again ever more rarely), and a flow moved
    `damp_moves` times in `damp_window_s` stays where it is. A flow whose new plane fails
    (failover says so) goes back at once, hold or not.
    """

    planes: tuple[int, ...]
    policy: SteerPolicy = field(default_factory=SteerPolicy)
    loads: dict[tuple[str, int], PlaneLoad] = field(default_factory=dict)
    steered: dict[FlowKey, Steered] = field(default_factory=dict)
    history: dict[FlowKey, deque] = field(default_factory=dict)  # per flow: (time, steered?) of its moves
    last_move: dict[str, float] = field(default_factory=dict)  # per peer
    counters: dict[str, int] = field(default_factory=lambda: {"moves": 0, "no_quiet_plane": 0, "damped": 0})

    def load(self, peer: str, plane: int) -> PlaneLoad:
        key = (peer, plane)
        if key not in self.loads:
            self.loads[key] = PlaneLoad()
        return self.loads[key]

    def observe_queues(self, t: float, queues: dict[str, dict[int, float | None]]) -> None:
        for peer, per_plane in queues.items():
            for plane in self.planes:
                self.load(peer, plane).observe(t, per_plane.get(plane), self.policy)

    def adopt(self, t: float, key: FlowKey, peer: str, plane: int, origin: int | None) -> Move:
        self.steered[key] = Steered(peer, plane, origin, t)
        return Move(t, "adopted", peer, key, plane, origin, "rule left by a previous run")

    def failed(self, t: float, usable: dict[str, tuple[int, ...]]) -> list[Move]:
        """Flows sent on a plane failover no longer uses toward their peer go back at once."""
        out = []
        for key, st in list(self.steered.items()):
            if st.plane not in usable.get(st.peer, self.planes):
                out.append(self._back(t, key, st, "unsteered", f"plane {st.plane} not in use toward {st.peer}"))
        return out

    def observe(self, t: float, queues: dict[str, dict[int, float | None]], flows: Iterable[Flow] | None,
                usable: dict[str, tuple[int, ...]], plane_of: Callable[[Flow], int | None] | None = None
                ) -> list[Move]:
        """One round. `queues`: peer -> plane -> standing queue toward it (None: unknown);
        `flows`: this host's flows to peers (None: could not be read, so nothing about flows is
        decided); `usable`: peer -> planes failover sends on; `plane_of(flow)`: the plane the
        host's route sends an unsteered flow on (asked only about candidates)."""
        p = self.policy
        self.observe_queues(t, queues)
        out = self.failed(t, usable)
        if flows is None:
            return out
        flows = list(flows)
        present = {f.key for f in flows}
        for key, st in list(self.steered.items()):
            if key not in present:
                out.append(self._back(t, key, st, "released", "connection closed"))
        for key, st in list(self.steered.items()):  # back home, or on to a third plane
            hold = self.hold(t, key)
            if t - st.since < p.hold_s or self._damped(t, key):
                continue
            planes = usable.get(st.peer, self.planes)
            if (t - st.since >= hold and st.origin is not None and st.origin in planes
                    and self.load(st.peer, st.origin).quiet(t, hold)):
                out.append(self._back(t, key, st, "unsteered", f"plane {st.origin} quiet for {hold:g} s"))
            elif self.load(st.peer, st.plane).congested:
                target = self._quietest(t, st.peer, [q for q in planes if q != st.plane])
                if target is not None and target == st.origin:
                    out.append(self._back(t, key, st, "unsteered", f"plane {st.plane} congested, "
                                                                     f"plane {target} quiet"))
                elif target is not None:
                    out.append(self._steer(t, key, st.peer, st.plane, target, st.origin))
        by_peer: dict[str, list[Flow]] = {}
        for f in flows:
            if f.key not in self.steered and f.peer in usable:
                by_peer.setdefault(f.peer, []).append(f)
        for peer, candidates in sorted(by_peer.items()):
            if t - self.last_move.get(peer, -math.inf) < p.settle_s:
                continue
            planes = usable[peer]
            congested = [q for q in planes if self.load(peer, q).congested]
            if not congested:
                continue
            quiet = [q for q in planes if q not in congested]
            target = self._quietest(t, peer, quiet)
            if target is None:
                self.counters["no_quiet_plane"] += 1
                continue
            busy = [f for f in candidates if f.rate_bps >= p.min_rate_bps or f.backlog_bytes >= p.min_backlog_bytes]
            busy.sort(key=lambda f: (-f.rate_bps, -f.backlog_bytes, f.key))
            moved = 0
            for f in busy:
                if moved >= p.moves_per_peer:
                    break
                on = f.plane if f.plane is not None else (plane_of(f) if plane_of else None)
                if on not in congested:
                    continue
                if self._damped(t, f.key):
                    self.counters["damped"] += 1
                    continue
                q = self.load(peer, on).queue_s
                assert q is not None  # a congested plane has a reading
                why = f"plane {on} queue {q * 1e3:.1f} ms, plane {target} quiet, flow at {f.rate_bps / 1e6:.1f} Mbit/s"
                out.append(self._steer(t, f.key, peer, on, target, on, why))
                moved += 1
        return out

    def _quietest(self, t: float, peer: str, planes: Iterable[int]) -> int | None:
        quiet = [q for q in planes if self.load(peer, q).quiet(t, self.policy.sustain_s)]
        return min(quiet, key=lambda q: (self.load(peer, q).queue_s or 0.0, q), default=None)

    def hold(self, t: float, key: FlowKey) -> float:
        """How long the flow stays moved: hold_s, doubled for every earlier move in the window."""
        self._damped(t, key)  # expires old moves
        earlier = max(0, sum(steer for _, steer in self.history.get(key, ())) - 1)
        return min(self.policy.hold_s * 2 ** earlier, self.policy.damp_window_s)

    def _damped(self, t: float, key: FlowKey) -> bool:
        times = self.history.get(key)
        if not times:
            return False
        while times and times[0][0] <= t - self.policy.damp_window_s:
            times.popleft()
        return len(times) >= self.policy.damp_moves

    def _note(self, t: float, key: FlowKey, peer: str, steer: bool) -> None:
        self.history.setdefault(key, deque()).append((t, steer))
        self.last_move[peer] = t
        self.counters["moves"] += 1

    def _steer(self, t: float, key: FlowKey, peer: str, on: int, to: int, origin: int | None,
               reason: str = "") -> Move:
        self.steered[key] = Steered(peer, to, origin, t)
        self._note(t, key, peer, True)
        return Move(t, "steered", peer, key, to, origin, reason or f"plane {on} congested, plane {to} quiet")

    def _back(self, t: float, key: FlowKey, st: Steered, kind: str, reason: str) -> Move:
        del self.steered[key]
        if kind != "released":
            self._note(t, key, st.peer, False)
        else:
            self.history.pop(key, None)
        return Move(t, kind, st.peer, key, None, st.origin, reason)
