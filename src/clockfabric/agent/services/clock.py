"""Clock sync: the pair fits of this host's probe exchanges, its reports to the solving host,
the mapping to global time it gets back; on the solving host also the network solve.

The reference solves; if its agent falls silent (no map for HANDOVER_UPDATES updates), each
host moves on to the next host of the succession (AgentConfig.succession), which carries on
global time from the last frame it heard (Solver.resume): no step, whoever solves. A host
takes maps only from the host it reports to or one before it in the succession, and from one
before it only if they carry on the time it holds. A host after the reference solves only
while more than half the fleet names it its solver. It also reports to the reference and the
host before its solver, so a solver whose maps were only lost is taken back. A solving host
that no live peer names as its solver (it was cut off, or restarted while another took over)
moves on like the rest, so the fleet keeps one solver.

Exchanges are taken as they complete (each poll), so a clock step is seen in a fraction of a
second; a step is reported (and told to the neighbours, if ours) at once.

A hurried agent probes at START_RATE times the full rate, reports every START_REPORT_S, and
publishes each map it gets; the solver answers a hurried host's report within START_SOLVE_S (a
map to it alone) instead of at its next update. An agent is hurried for its first START_WINDOWS
windows, and for as long again after any of its pairs broke its band (a clock that stepped or
changed rate, ours or a peer's): either way pairs hold few points and their first fits move a
lot, and each one reaching the host at once, rather than a report, a solve and a publish an
update apart each, is what makes a host's mapping good a second or two after its agent starts
or its clock jumps. The rest of the time the cadence is the update's.
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque

from clockfabric.agent.context import AgentContext
from clockfabric.agent.fanout import Fanout
from clockfabric.agent.service import Service, Snapshot, service
from clockfabric.clock.delays import stated
from clockfabric.clock.network import solver_installed
from clockfabric.clock.solver import YOUNG_WINDOWS, Solver
from clockfabric.clock.sync import HostSync
from clockfabric.errors import ClockfabricError
from clockfabric.wirejson import SharedParts

log = logging.getLogger(__name__)

# after a host reports a clock step, the solver waits this long for its neighbours' reports
URGENT_SOLVE_S = 0.05
UTC_SPAN_S = 30.0  # a UTC host's rate against UTC, over this long
# the hurry (module docstring): how long, how often a hurried host reports, how soon the
# solver answers it (long enough to take several hurried hosts' reports in one solve), and
# how much faster it probes (its budgets are judged over the run, not its first seconds)
START_WINDOWS, START_REPORT_S, START_SOLVE_S, START_RATE = 2, 0.25, 0.1, 2.0
MAPPING_FIELDS = ("t0_ns", "offset_ns", "drift")
# a change in how far our clock was set (HostClock.set_ns) of at least this is a step of it: a
# read is off by 1 us at most (vclock.SET_READ_NS), and a fit absorbs a smaller step
SET_SEEN_NS = 5_000
# updates without a map from the solver after which it is taken for dead: three, as the solver
# takes a host whose reports stopped for stale (Solver.stale_s)
HANDOVER_UPDATES = 3
# how long the probe engine's exchanges wait for the pairs (a broken band, a step, is seen when
# they take them): on a settled clock and a quiet fabric, where a pair exchanges every second or
# two and the loop's wake-ups for them are most of an idle agent's polls, longer
TAKE_S, TAKE_QUIET_S = 0.2, 0.5
# a solve's maps leave one after another over this share of the update (agent.fanout), not as
# one burst that a busy link's queue cannot hold
MAP_SPREAD = 0.25


def _number(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _finite(*values: object) -> bool:
    return all(_number(v) and math.isfinite(v) for v in values)  # type: ignore[arg-type]


def _bound(v: object) -> bool:
    """A clock bound: a number at least 0; infinite where the host cannot be synced."""
    return _number(v) and v >= 0  # type: ignore[operator]


def valid_map(msg: dict, hosts: dict) -> bool:
    """Every mapping of a known host, its numbers finite but its bounds (infinite while unsynced)."""
    maps = msg.get("hosts")
    return isinstance(maps, dict) and all(
        h in hosts and isinstance(m, dict) and _finite(*(m.get(f) for f in MAPPING_FIELDS))
        and _bound(m.get("uncertainty_ns")) and _bound(m.get("drift_bound")) and abs(m["t0_ns"]) < 2**63
        and _bound(m.get("limit_ns", 0.0)) and _bound(m.get("drift_limit", 0.0))
        for h, m in maps.items()) \
        and _finite(msg.get("parts", 1))


def valid_report(msg: dict, sender: str, hosts: dict) -> bool:
    """A report from the host it is about: edges [peer, offset, drift, center, weight, bound,
    drift bound] to known hosts, and perhaps utc [offset, rate, at], every number finite."""
    edges, utc = msg.get("edges", []), msg.get("utc", [0, 0, 0])
    return msg.get("host") == sender and isinstance(edges, list) and all(
        isinstance(e, list) and len(e) == 7 and e[0] in hosts and _finite(*e[1:]) for e in edges) \
        and isinstance(utc, list) and len(utc) == 3 and _finite(*utc)


@service("clock", help="Clock sync: pair fits, reports to the solving host and its maps; the solver there")
class ClockSync(Service):
    handles = frozenset({"report", "map", "stepped"})

    def __init__(self, ctx: AgentContext):
        cfg = ctx.cfg
        self.ctx = ctx
        # an update longer than the window reads every exchange since the last (the series stay dense)
        self.sync = HostSync(cfg.host, cfg.probed, window_ns=int(cfg.window_s * 1e9),
                             report_ns=int(cfg.update_s * 1e9))
        ctx.time_source = self.sync
        self.succession = cfg.succession
        self.elected = 0  # the succession's host this one reports to and takes maps from
        self.handover_s = HANDOVER_UPDATES * cfg.update_s
        # monotonic seconds: the last map from the elected host (None until the first from any:
        # a starting fleet waits for its solver as long as it takes); the last report from
        # another host that names this one its solver, and the last probe exchange (a solver
        # that no live peer takes for its solver moves on)
        self._heard: float | None = None
        self._namers: dict[str, float] = {}  # host -> its last report naming this host its solver
        self._exchanged = -math.inf
        self._solving_since = time.monotonic()
        self.solver = self._new_solver() if cfg.host == cfg.reference else None
        # a solve's maps share its frame and mappings: each is encoded once for all of them
        self._map_parts = SharedParts()
        self.maps = Fanout(lambda host, msg: ctx.send(host, self._map_parts.dumps(msg)), len(cfg.topology.hosts) - 1,
                           MAP_SPREAD * cfg.update_s)
        self._installed: bool | None = None  # the solver extra is here (None: not asked yet)
        self._solve_due = math.inf
        self._utc_seen: deque[tuple[int, int]] = deque()  # (our clock, our clock minus UTC)
        self._urgent = False  # a report said a clock stepped: the next solve's maps are published at once
        # seconds between exchanges with a peer, at the full rate (until the clock has settled)
        # and the quiet one; worked out once: it walks the topology's links
        self._intervals = {False: ctx.engine.interval_s, True: cfg.probe_interval_s(quiet=True)}
        self.quiet = False  # probing at the quiet rate now
        self._hurry_until = 0.0  # monotonic seconds: the hurry's end (start(), a broken band)
        self._next_start_report = 0.0
        self._answer: set[str] = set()  # hurried hosts whose reports the next early solve answers
        self._set_ns = ctx.clock.set_ns()  # how far our clock was set by the last look (HostClock.set_ns)

    def start(self) -> None:
        self._hurry()

    def _hurry(self) -> None:
        self._hurry_until = time.monotonic() + START_WINDOWS * self.ctx.cfg.window_s
        self._pace(quiet=False)

    @property
    def hurried(self) -> bool:
        return time.monotonic() < self._hurry_until

    @property
    def solving(self) -> bool:
        """This host is the one its own view of the succession elects, and can solve: the
        reference always; a host after it only with a quorum, more than half the fleet's hosts
        naming it in their fresh reports (a host cut off by its own congested link moves down
        the succession alone, and must not solve for itself and whoever follows it)."""
        if self.solver is None or self.succession[self.elected] != self.ctx.cfg.host:
            return False
        return self.elected == 0 or 2 * len(self._fresh_namers(time.monotonic())) > len(self.ctx.cfg.topology.hosts)

    def _fresh_namers(self, now_s: float) -> list[str]:
        return [h for h, at in self._namers.items() if now_s - at <= self.handover_s]

    def _new_solver(self) -> Solver:
        cfg = self.ctx.cfg
        return Solver(list(cfg.topology.hosts), cfg.reference, stale_s=3 * cfg.update_s,
                      young_s=YOUNG_WINDOWS * cfg.window_s)

    def _elect(self, now_s: float) -> None:
        """Move on to the next host of the succession where the elected one is silent: no map
        for handover_s; or, where this host solves, no report from another host that takes it
        for its solver for as long while its peers answer probes (it serves no one: cut off,
        or restarted while another took over)."""
        if self.solving:
            served = max((at for h, at in self._namers.items() if h != self.ctx.cfg.host), default=-math.inf)
            if now_s - max(served, self._solving_since) <= self.handover_s or now_s - self._exchanged > self.handover_s:
                return
            why = f"no host has taken it for its solver for {self.handover_s:.0f} s"
        elif self._heard is not None and now_s - self._heard > self.handover_s:
            why = f"no map from {self.succession[self.elected]} for {self.handover_s:.0f} s"
        else:
            return
        for _ in range(len(self.succession)):
            self.elected = (self.elected + 1) % len(self.succession)
            if self.succession[self.elected] != self.ctx.cfg.host or self._take_over(now_s):
                break
        self._heard = now_s
        log.warning("clock: %s; the solve moves to %s", why, self.succession[self.elected])
        self._report(self.ctx.clock.now_ns())

    def _can_solve(self) -> bool:
        """A solver here, made at the first need where this host is in the succession and has
        the solver extra (asked once)."""
        if self.solver is None and self._installed is None:
            try:
                solver_installed(self.ctx.cfg.host)
                self._installed = self.ctx.cfg.host in self.succession
            except ClockfabricError as e:
                log.warning("clock: this host cannot take over the solve: %s", e)
                self._installed = False
            if self._installed:
                self.solver = self._new_solver()
        return self.solver is not None

    def _take_over(self, now_s: float) -> bool:
        """This host is now the elected solver: carry on global time from the last frame heard.
        False where it cannot solve (no solver extra): the succession passes it over."""
        if not self._can_solve():
            return False
        assert self.solver is not None
        if self.sync.frame is not None:
            self.solver.resume(self.sync.frame)
        self._solving_since = now_s
        self._solve_due = min(self._solve_due, now_s + START_SOLVE_S)
        return True

    def on_message(self, msg: dict, reply_to: tuple[str, int]) -> bool:
        """Polled at once only after a message that moves its next poll sooner: a report asking
        for a solve soon (a starting host's, a stepped clock's) and a neighbour's step. Each
        host's report at the solver and each map change nothing its poll would do sooner."""
        hosts, sender = self.ctx.cfg.topology.hosts, self.ctx.engine.names[reply_to[0]]
        rank = self.succession.index(sender) if sender in self.succession else len(self.succession)
        if msg["t"] == "map" and rank > self.elected:
            self.ctx.rejected("not_solver")  # only the solver this host elected, or one before it, moves our clock
            return False
        if msg["t"] == "map" and sender == self.ctx.cfg.host and not self.solving:
            return False  # our own, sent before the solve moved on
        if not (valid_map(msg, hosts) if msg["t"] == "map" else valid_report(msg, sender, hosts)
                if msg["t"] == "report" else _finite(msg.get("delta_ns"))):
            self.ctx.rejected("invalid")
            return False
        if msg["t"] == "map" and rank < self.elected and not self.sync.frame_continues(msg):
            self.ctx.rejected("not_solver")  # an earlier solver started afresh (restarted): the fleet solves on
            return False
        if msg["t"] == "report":
            if msg.get("solver", self.ctx.cfg.host) == self.ctx.cfg.host:
                self._namers[sender] = time.monotonic()  # a host that takes us for its solver
            if self._can_solve():  # kept even while another host solves: a takeover starts with them
                assert self.solver is not None
                self.solver.on_report(msg)
                if msg.get("urgent"):  # a clock stepped: solve soon, once its neighbours also said so
                    self._urgent = True
                    self._solve_due = min(self._solve_due, time.monotonic() + URGENT_SOLVE_S)
                    return True
                if msg.get("start"):
                    self._answer.add(sender)
                    self._solve_due = min(self._solve_due, time.monotonic() + START_SOLVE_S)
                    return True
            return False
        if msg["t"] == "map":
            if rank < self.elected and sender != self.ctx.cfg.host:  # one before ours solves for us again
                log.warning("clock: %s solves again; its maps are taken", sender)
            self.elected, self._heard = rank, time.monotonic()
            self.sync.on_map(msg)
            if msg.get("urgent") or self.hurried:
                self.ctx.publish()
            return False
        self.sync.on_stepped(sender, float(msg["delta_ns"]))  # "stepped": its pairs may want exchanges soon
        return True

    def poll(self, now_s: float) -> float:
        self._take_exchanges()
        self._elect(now_s)
        # due only on the solving host; another keeps it for a takeover, and must not ask to be
        # polled at a time long past (its loop would never sleep)
        solve_due = self._solve_due if self.solver and self.solving else math.inf
        if now_s >= solve_due:
            assert self.solver is not None
            self._solve(self.solver, urgent=self._urgent, only=None if self._urgent else self._answer)
            solve_due = self._solve_due
        maps_due = self.maps.flush(now_s)
        if not self.hurried:
            return min(solve_due, maps_due, now_s + (TAKE_QUIET_S if self.quiet else TAKE_S))
        if now_s >= self._next_start_report:  # a hurried host's reports take the exchanges as often
            self._report(self.ctx.clock.now_ns())
        return min(solve_due, self._next_start_report, maps_due)

    def tick(self, now_ns: int) -> None:
        self._report(now_ns)
        self._pace(quiet=self.sync.settled(now_ns) and not self.sync.unsure())
        if self.solver and self.solving:
            self._solve(self.solver)

    def _report(self, now_ns: int) -> None:
        msg = {**self.sync.report(now_ns), "solver": self.succession[self.elected]}
        if self.ctx.cfg.utc_system:
            msg["utc"] = self._utc(now_ns)
        if self.hurried:
            msg["start"] = True  # the wire's name for it: answer soon
            self._next_start_report = time.monotonic() + START_REPORT_S
        for host in self.report_to():
            self.ctx.send(host, msg)

    def report_to(self) -> list[str]:
        """The elected solver, and the reference and the host before it in the succession: a
        solver taken for dead whose maps were only lost on the way still has this host's
        reports, answers them, and so is taken back."""
        ranks = sorted({0, max(self.elected - 1, 0), self.elected})
        return [self.succession[r] for r in ranks]

    def _utc(self, now_ns: int) -> list:
        """[our clock minus UTC, its rate, at our clock]: UTC is the system clock; the rate over
        the last UTC_SPAN_S, once there is that much."""
        offset = now_ns - time.time_ns()
        self._utc_seen.append((now_ns, offset))
        while len(self._utc_seen) > 2 and now_ns - self._utc_seen[1][0] >= UTC_SPAN_S * 1e9:
            self._utc_seen.popleft()
        (t, o) = self._utc_seen[0]
        rate = (offset - o) / (now_ns - t) if now_ns - t >= 1e9 else 0.0
        return [float(offset), rate, now_ns]

    def report(self) -> dict:
        state = {"probe_interval_s": self.ctx.engine.interval_s, "probe_quiet": self.quiet,
                 "solver_host": self.succession[self.elected], **self.sync.state()}
        if self.solver and self.solving and self.solver.last is not None:
            state["solver"] = {"dropped_edges": int((~self.solver.last.kept).sum()),
                               "edges": len(self.solver.last.kept), "reports": len(self.solver.reports)}
        return state

    def snapshot(self) -> Snapshot:
        """The latest one-way delays of this host's probe paths, and whether it is synced. Each
        delay is stated to its clocks' bound (clock.delays.stated): what the engine stores is what is known."""
        samples = []
        state = self.ctx.latest or {}
        # the probes' own direction only: a reply travels another 5-tuple (another path, maybe
        # another spine) under the same path label, and the controller would mix the two
        for row in (r for r in state.get("owd", []) if r["src"] == self.ctx.cfg.host):
            labels = {"src": row["src"], "dst": row["dst"], "path": row["path"]}
            samples += [{"name": f"owd_{stat}_ns", "value": stated(row[f"{stat}_ns"], row["bound_ns"]),
                         "labels": labels} for stat in ("min", "p50", "p99", "floor")]
        # the class stream's (probe.engine.Marking.class_dscp): the jobs' queues, beside the floor above
        samples += [{"name": "class_owd_p50_ns", "value": stated(row["p50_ns"], row["bound_ns"]),
                     "labels": {"src": row["src"], "dst": row["dst"], "path": row["path"], "dscp": str(row["dscp"])}}
                    for row in state.get("class_owd", [])]
        # how far back those reach: a reading from just after a queue began is mostly of before it
        samples += [{"name": f"{kind}_span_ns", "value": float(span), "labels": {}}
                    for kind, span in self.sync.spans().items()]
        mapping = self.sync.mapping
        return Snapshot(samples=samples, info={"synced": bool(mapping and mapping.synced)})

    def _take_exchanges(self) -> None:
        engine = self.ctx.engine
        exchanges = []
        while engine.exchanges:
            exchanges.append(engine.exchanges.popleft())
        if exchanges:
            self._exchanged = time.monotonic()
        served = self.sync.mapping
        self.sync.add(exchanges)
        self._clock_set()
        if self.sync.mapping is not served:  # widened: our clock moved (HostSync.doubt); say so now
            self.ctx.publish()
        while self.sync.told:
            delta = self.sync.told.pop()
            for host in sorted(set(self.sync.peer_maps) | set(self.sync.pairs)):
                self.ctx.send(host, {"t": "stepped", "host": self.ctx.cfg.host, "delta_ns": delta})
        if self.sync.urgent or self.sync.unsure():
            self._hurry()
        if self.sync.urgent:
            self._report(self.ctx.clock.now_ns())

    def _clock_set(self) -> None:
        """Our clock says it was set (HostClock.set_ns): the mapping is served widened by the
        step from now, and the first pair to break by it moves them all (HostSync.clock_set)."""
        now = self.ctx.clock.set_ns()
        delta, self._set_ns = now - self._set_ns, now
        if abs(delta) >= SET_SEEN_NS:
            self.sync.clock_set(delta, self.ctx.clock.now_ns())
            self._hurry()  # the pairs find it in their next points

    def _pace(self, *, quiet: bool) -> None:
        """Probe at the quiet rate only while the clock needs no more: an agent's CPU follows
        its exchanges, and on a settled clock and an idle fabric half of them add little."""
        self.quiet = quiet
        self.ctx.engine.interval_s = self._intervals[quiet] / (START_RATE if self.hurried else 1.0)

    def _solve(self, solver: Solver, *, urgent: bool = False, only: set[str] | None = None) -> None:
        """Solve and send the maps (spread out: self.maps): to every reporting host, or `only`
        to these."""
        self._map_parts.clear()  # the maps still waiting are encoded afresh
        for host, msg in solver.solve(self.ctx.clock.now_ns()).items():
            if only is None or host in only:  # one replacing an urgent map still unsent is urgent too
                hurry = urgent or (self.maps.waiting(host) or {}).get("urgent")
                self.maps.put(host, {**msg, "urgent": True} if hurry else msg)
        self.maps.flush(time.monotonic())
        self._solve_due, self._urgent, self._answer = math.inf, False, set()
