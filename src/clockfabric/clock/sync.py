"""Clock sync's host role: HostSync runs on every host. It fits each probed pair over the
window (the expensive part, spread over the fleet), reports one line per pair to the solver
(clock/solver.py), and reads the one-way delays of its paths through the mappings it gets back.
"""

from __future__ import annotations

from collections import defaultdict, deque
from dataclasses import replace
from functools import partial

from clockfabric.clock.delays import OWD_TRUST_NS, DelayReadings
from clockfabric.clock.fit import MAX_SLOPE
from clockfabric.clock.health import hold_over
from clockfabric.clock.mapping import Mapping
from clockfabric.clock.pairs import PairWindow, Step
from clockfabric.clock.timescale import Frame
from clockfabric.probe.engine import Exchange

MAX_WEIGHT = 20  # more pure points than this per side adds little to a pair's accuracy
# settled (HostSync.settled): this share of probe packets pure each way, i.e. an idle fabric, and no
# step for this many windows
QUIET_PURE = 0.7
QUIET_AFTER_STEP_WINDOWS = 5
# ... the share judged over at least this many exchanges a pair: at the quiet rate an update
# sees a few, and one queued pair among them would read as a busy fabric
QUIET_SAMPLE_PER_PAIR = 2
# a map from an earlier solver of the succession is taken back only if it reads our clock
# within this (and the two bounds) of the mapping we hold: otherwise it restarted afresh
CONTINUE_NS = 10_000.0
# pairs that broke their bands at once say our own clock moved, not each its peer's (HostSync.doubt)
DOUBT_PAIRS = 2
# our clock said it was set: a pair breaking by that much is found within this many windows,
# or the step was too small to break one (a fit absorbs it)
SET_FOUND_WINDOWS = 2
MAX_CLASSED = 1024  # class exchanges held per peer at most, whatever the rate


class HostSync(DelayReadings):
    def __init__(self, host: str, probed: list[str], *, window_ns: int = 2_000_000_000, epsilon_ns: int = 1_000,
                 owd_trust_ns: float = OWD_TRUST_NS, report_ns: int = 0):
        """`report_ns`: how often the one-way delays are read (`owd`), where that is longer than
        the window: each reading then spans it, so no exchange between two readings goes unread."""
        self.host = host
        self.owd_trust_ns = owd_trust_ns
        self.window_ns = window_ns
        self.report_ns = max(window_ns, report_ns)
        self.pairs = {p: PairWindow(p, window_ns=window_ns, epsilon_ns=epsilon_ns, report_ns=report_ns)
                      for p in probed}
        self.mapping: Mapping | None = None
        self.peer_maps: dict[str, Mapping] = {}
        self.frame: Frame | None = None  # what global time is: the solver's anchor and its mapping
        self.parts = 0
        # (peer, path, direction) -> the fastest packet of each recent report, as its (sent,
        # received) local timestamps: a floor that forgets, so a rerouted path's old floor ages
        # out; read again with every report's mappings, so a mapping that moves (converging, or
        # one bad solve) moves the floor with the delays instead of voiding it
        self.floors: dict[tuple[str, str, str], deque[tuple[int, int]]] = {}
        # our own clock may have stepped: the offset change and the pairs that broke by it
        self._candidate: tuple[float, set[str]] | None = None
        self.own_steps = 0
        self.told: list[float] = []  # our steps, for the neighbours (they shift their pairs with us)
        self.urgent = False  # a pair stepped since the last report: the solver wants it now
        self._stepped = False  # since the last `settled`
        self._calm_since: int | None = None  # our clock: since when no step and mostly pure probes
        self._counted = (0, 0, 0)  # (exchanges, pure forward, pure back) when the last purity sample began
        self._quiet = False  # the last purity sample's verdict: most probe packets pure
        # the class stream's exchanges by peer, oldest first: read for their delays, never fitted
        self.classed: dict[str, deque[Exchange]] = defaultdict(partial(deque, maxlen=MAX_CLASSED))
        # our clock in doubt (`doubt`): the largest break seen (ns), the mapping the solver gave
        # (served widened meanwhile), and from when (our clock) the pairs were sure again
        self._doubt_ns = 0.0
        self._doubt_since = 0  # our clock: the first break of this doubt
        self._solved: Mapping | None = None
        self._sure_at: int | None = None
        # our clock said it was set (clock_set): the pairs' offsets' change, and until when (our
        # clock) the doubt waits for a pair to break by it
        self._set: tuple[float, int] | None = None

    def add(self, exchanges: list[Exchange]) -> None:
        for ex in exchanges:
            if ex.dscp is not None:
                self.classed[ex.peer].append(ex)
                continue
            if pair := self.pairs.get(ex.peer):
                steps, provisional = pair.steps, pair.provisional
                for forward, delta in pair.add(ex):
                    self._own_step_evidence(ex.peer, forward, delta)
                if pair.steps != steps:  # a clock stepped: old floors mean nothing now
                    self._forget_floors(ex.peer)
                elif provisional and not pair.provisional:
                    self.urgent = True  # a fit of its own can replace the moved one: report it now
        if exchanges:
            self.doubt(exchanges[-1].rx[1])

    def _own_step_evidence(self, peer: str, forward: bool, delta: float | None) -> None:
        """Two peers' pairs breaking the band by the same amount is our clock, not theirs: a
        step of ours moves every pair's offset alike (down on the forward side for a step
        forward), so one pair's point inside the band on that side rules it out."""
        if delta is not None and self._set_found(peer, delta):
            return
        cand = self._candidate
        if delta is None:
            if cand is not None and (cand[0] < 0) == forward:
                self._candidate = None
            return
        if cand is None or abs(cand[0] - delta) > self.pairs[peer].step_tolerance_ns:
            self._candidate = (delta, {peer})
            return
        cand[1].add(peer)
        if len(cand[1]) < 2:
            return
        size = max((b.delta_ns for p in cand[1] if (b := self.pairs[p].suspect(cand[0]))),
                   key=abs, default=cand[0])
        self._shift_own(size, cand[0])

    def _set_found(self, peer: str, delta: float) -> bool:
        """A pair broke by the step our clock said it took (clock_set): one is enough, and the
        size is the clock's own."""
        size = self._set[0] if self._set is not None else None
        if size is None or abs(size - delta) > self.pairs[peer].step_tolerance_ns:
            return False
        self._set = None
        self._shift_own(size, delta)
        return True

    def clock_set(self, delta_ns: float, now_ns: int) -> None:
        """Our clock was set (stepped) by `delta_ns`, as the clock itself says (HostClock.set_ns).
        The mapping served is widened by it at once (`doubt`), and the first pair that breaks by
        it moves every pair with it. Which exchanges came after the step only the pairs can tell:
        an exchange completes a round after it began, so cutting at the next one would keep
        points from before it."""
        size = -delta_ns
        self._set = (size, now_ns + SET_FOUND_WINDOWS * self.window_ns)
        if self.mapping is None:
            return
        if self._solved is None:
            self._solved, self._doubt_ns, self._doubt_since = self.mapping, abs(size), now_ns
        self._doubt_ns = max(self._doubt_ns, abs(size))
        self._sure_at = None
        self._widen()

    def _shift_own(self, size: float, seen: float) -> None:
        """Our clock stepped: each pair's offset (peer minus ours) moves by `size`, from its first
        break near `seen`."""
        for pair in self.pairs.values():
            first = pair.suspect(seen)
            cut = pair.last_step
            if first is None and cut is not None and _last_tx(pair) - cut.at_ns <= self.window_ns:
                # it cut itself since the change began: its points follow it already (a clock
                # whose rate changed breaks each pair by more, so the sizes need not agree)
                continue
            pair.shift(Step(first.seq if first else pair.seen + 1, first.at_ns if first else _last_tx(pair), size))
        self.floors.clear()
        self.classed.clear()
        self._candidate = None
        self._stepped = True
        self.own_steps += 1
        self.told.append(size)
        self.urgent = True

    def on_stepped(self, peer: str, delta_ns: float) -> None:
        """A peer says its clock stepped (by `delta_ns`, its view of us minus it): our pair
        with it moves the other way at once, instead of waiting for two points to break."""
        if pair := self.pairs.get(peer):
            steps = pair.steps
            pair.shift(Step(pair.seen + 1, _last_tx(pair), -delta_ns))
            if pair.steps != steps:
                self._forget_floors(peer)

    def _forget_floors(self, peer: str) -> None:
        self.floors = {k: v for k, v in self.floors.items() if k[0] != peer}
        self.classed.pop(peer, None)
        self.urgent = self._stepped = True

    def doubt(self, now_ns: int) -> None:
        """Our own clock moved: DOUBT_PAIRS pairs (or every pair, where fewer) broke their bands
        or are fitting anew since a cut. A peer's step or rate change breaks one pair; ours breaks
        them all. Until a map solved after the pairs are sure again, the mapping served is the
        solver's widened by the largest break and by MAX_SLOPE a second: a clock whose rate
        changed runs away at a rate no point has shown yet, and a bound that did not grow with
        it would claim nanoseconds for a clock microseconds off."""
        if self._set is not None:  # our clock said it was set: in doubt until the pairs find it
            if now_ns < self._set[1]:
                return
            self._set = None

        def recent_cut(p: PairWindow) -> list[Step]:
            cut = p.last_step
            return [cut] if p.unsure and cut is not None and abs(now_ns - cut.at_ns) <= 2 * self.window_ns else []

        seen_by = {peer: p.breaks() + recent_cut(p) for peer, p in self.pairs.items()}
        broken = [s for s in seen_by.values() if s]
        if broken and len(broken) >= min(DOUBT_PAIRS, len(self.pairs)):
            seen = [s for steps in broken for s in steps]
            size = max((abs(s.delta_ns) for s in seen), default=0.0)
            self._sure_at = None
            if self._solved is None and self.mapping is not None:
                self._solved, self._doubt_ns = self.mapping, size
                self._doubt_since = min((s.at_ns for s in seen), default=now_ns)
                self._widen()
            elif size > self._doubt_ns:
                self._doubt_ns = size
                self._widen()
        elif self._solved is not None and self._sure_at is None:
            self._sure_at = now_ns

    def _widen(self) -> None:
        """Serve the solver's mapping with the doubt added: the largest break, and MAX_SLOPE a
        second since the first (bound_at counts from t0, which a map solved since moves on)."""
        base = self._solved
        if base is not None:
            since_break = MAX_SLOPE * max(0, base.t0_ns - self._doubt_since)
            self.mapping = replace(base, uncertainty_ns=base.uncertainty_ns + self._doubt_ns + since_break,
                                   drift_bound=base.drift_bound + MAX_SLOPE)

    @property
    def doubted(self) -> bool:
        """The mapping served is widened: our clock moved and no map since has caught up."""
        return self._solved is not None

    def unsure(self) -> bool:
        """Whether some pair wants exchanges soon (PairWindow.unsure): a clock that broke a band,
        stepping or changing rate, is found and fitted anew in as many exchanges, not seconds."""
        return any(p.unsure for p in self.pairs.values())

    def settled(self, now_ns: int) -> bool:
        """Whether fewer probes would do: mapped onto the reference, no step for a few windows,
        no break pending, and most probe packets since the last call pure each way (an idle
        fabric; under load pure points are scarce and every exchange counts). Each way on its
        own: a queue is one-way, and a host sending into a filled link has its forward packets
        queued while its replies come back pure; counted together they would read as quiet,
        and the paths that show the queue would be probed at the slow rate. The share is judged
        once enough exchanges came (QUIET_SAMPLE_PER_PAIR), whatever the probe rate; until then
        the last verdict holds."""
        seen = sum(p.seen for p in self.pairs.values())
        fwd = sum(p.pure_fwd for p in self.pairs.values())
        rev = sum(p.pure_rev for p in self.pairs.values())
        seen0, fwd0, rev0 = self._counted
        if seen - seen0 >= QUIET_SAMPLE_PER_PAIR * max(1, len(self.pairs)):
            self._quiet = min(fwd - fwd0, rev - rev0) >= QUIET_PURE * (seen - seen0)
            self._counted = (seen, fwd, rev)
        calm = (self._quiet and not self._stepped and self._candidate is None and self.mapping is not None
                and self.mapping.synced)
        self._stepped = False
        if not calm:
            self._calm_since = None
            return False
        if self._calm_since is None:
            self._calm_since = now_ns
        return now_ns - self._calm_since >= QUIET_AFTER_STEP_WINDOWS * self.window_ns

    def report(self, now_ns: int) -> dict:
        """Refit every pair and say what the solver needs: one row per pair with a fit;
        `urgent` once after a step, so the solver need not wait for its next round."""
        edges = []
        for peer, pair in self.pairs.items():
            fit = pair.refit(now_ns)
            if fit is not None and not pair.doubtful:
                weight = min(fit.n_fwd, fit.n_rev, MAX_WEIGHT)
                edges.append([peer, fit.offset_ns, fit.drift, fit.center_ns, weight, fit.bound_ns(), fit.drift_bound])
        msg: dict[str, object] = {"t": "report", "host": self.host, "edges": edges}
        if self.urgent:
            msg["urgent"] = True
            self.urgent = False
        return msg

    def frame_continues(self, msg: dict) -> bool:
        """A map from another solver carries on the global time this host holds: its mapping
        for us reads our clock within the two bounds and CONTINUE_NS of the one we hold (a
        solver restarted afresh starts global time on the reference's raw clock: a step)."""
        new = msg.get("hosts", {}).get(self.host)
        if self.mapping is None or not self.mapping.synced or new is None:
            return True
        theirs = Mapping.from_dict(new)
        if not theirs.synced:
            return True
        at = theirs.t0_ns  # our clock's reading near the solve
        gap = abs(theirs.global_ns(at) - self.mapping.global_ns(at))
        return gap <= CONTINUE_NS + theirs.bound_at(at) + self.mapping.bound_at(at)

    def on_map(self, msg: dict) -> None:
        maps = {h: Mapping.from_dict(m) for h, m in msg["hosts"].items()}
        new = maps.pop(self.host, None)
        # not synced this round (queued on every path, or no pure pair): hold over the last good one
        if self._solved is None:
            self.mapping = hold_over(self.mapping, new, new.t0_ns) if new is not None else self.mapping
        elif new is not None:
            self._solved = hold_over(self._solved, new, new.t0_ns)
            if self._sure_at is not None and new.t0_ns >= self._sure_at:  # solved from sure pairs
                self.mapping, self._solved, self._doubt_ns = self._solved, None, 0.0
            else:
                self._widen()
        # a peer left out of one round (no fresh fit for the pair on either side, as under a
        # standing queue) keeps its last map: its delays stay readable
        self.peer_maps |= maps
        self.parts = msg.get("parts", 1)
        self.frame = Frame.from_dict(msg.get("frame")) or self.frame

    def state(self) -> dict:
        pairs = {}
        for peer, pair in self.pairs.items():
            ntp = pair.ntp()
            fit = pair.fit
            pairs[peer] = {
                "exchanges": pair.seen, "pure_out": pair.pure_fwd, "pure_back": pair.pure_rev, "steps": pair.steps,
                "fit": None if fit is None else {"offset_ns": fit.offset_ns, "drift": fit.drift,
                                                 "center_ns": fit.center_ns, "margin_ns": fit.margin_ns,
                                                 "bound_ns": fit.bound_ns(), "drift_bound": fit.drift_bound,
                                                 "points_out": fit.n_fwd, "points_back": fit.n_rev},
                "ntp": None if ntp is None else {"offset_ns": ntp.offset_ns, "at_ns": ntp.at_ns, "rtt_ns": ntp.rtt_ns},
            }
        owd = self.owd()
        return {"mapping": self.mapping.as_dict() if self.mapping else None, "parts": self.parts,
                "frame": self.frame.as_dict() if self.frame else None,
                "pairs": pairs, "owd": [r for r in owd if r["trusted"]],
                "owd_untrusted": [r for r in owd if not r["trusted"]], "class_owd": self.class_owd()}


def _last_tx(pair: PairWindow) -> int:
    return pair.exchanges[-1].tx[0] if pair.exchanges else 0
