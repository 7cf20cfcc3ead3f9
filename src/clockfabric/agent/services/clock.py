"""Clock sync: the pair fits of this host's probe exchanges, its reports to the reference host,
the mapping to global time it gets back; on the reference host also the network solve.

Exchanges are taken as they complete (each poll), so a clock step is seen in a fraction of a
second; a step is reported (and told to the neighbours, if ours) at once.

A starting agent (its first START_WINDOWS windows) probes at START_RATE times the full rate,
reports every START_REPORT_S, and publishes each map it gets; the solver answers a starting
host's report within START_SOLVE_S (a map to it alone) instead of at its next update. A fresh
pair has few points and its first fits move a lot: each one reaching the host at once, rather
than a report, a solve and a publish an update apart each, is what makes a host's mapping good
a second or two after its agent starts. The rest of the time the cadence is the update's.
"""

from __future__ import annotations

import math
import time
from collections import deque

from clockfabric.agent.context import AgentContext
from clockfabric.agent.service import Service, Snapshot, service
from clockfabric.clock.sync import YOUNG_WINDOWS, HostSync, Solver

# after a host reports a clock step, the solver waits this long for its neighbours' reports
URGENT_SOLVE_S = 0.05
UTC_SPAN_S = 30.0  # a UTC host's rate against UTC, over this long
# the fast start (module docstring): how long, how often a starting host reports, how soon the
# solver answers it (long enough to take several starting hosts' reports in one solve), and
# how much faster it probes (its budgets are judged over the run, not its first seconds)
START_WINDOWS, START_REPORT_S, START_SOLVE_S, START_RATE = 2, 0.25, 0.1, 2.0
MAPPING_FIELDS = ("t0_ns", "offset_ns", "drift")


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
        for h, m in maps.items()) \
        and _finite(msg.get("parts", 1))


def valid_report(msg: dict, sender: str, hosts: dict) -> bool:
    """A report from the host it is about: edges [peer, offset, drift, center, weight, bound,
    drift bound] to known hosts, and perhaps utc [offset, rate, at], every number finite."""
    edges, utc = msg.get("edges", []), msg.get("utc", [0, 0, 0])
    return msg.get("host") == sender and isinstance(edges, list) and all(
        isinstance(e, list) and len(e) == 7 and e[0] in hosts and _finite(*e[1:]) for e in edges) \
        and isinstance(utc, list) and len(utc) == 3 and _finite(*utc)


@service("clock", help="Clock sync: pair fits, reports to the reference and its maps; the solver there")
class ClockSync(Service):
    handles = frozenset({"report", "map", "stepped"})

    def __init__(self, ctx: AgentContext):
        cfg = ctx.cfg
        self.ctx = ctx
        self.sync = HostSync(cfg.host, cfg.probed, window_ns=int(cfg.window_s * 1e9))
        ctx.time_source = self.sync
        self.solver = Solver(list(cfg.topology.hosts), cfg.reference, stale_s=3 * cfg.update_s,
                             young_s=YOUNG_WINDOWS * cfg.window_s) if cfg.host == cfg.reference else None
        self._solve_due = math.inf
        self._utc_seen: deque[tuple[int, int]] = deque()  # (our clock, our clock minus UTC)
        self._urgent = False  # a report said a clock stepped: the next solve's maps are published at once
        # seconds between exchanges with a peer, at the full rate (until the clock has settled)
        # and the quiet one; worked out once: it walks the topology's links
        self._intervals = {False: ctx.engine.interval_s, True: cfg.probe_interval_s(quiet=True)}
        self.quiet = False  # probing at the quiet rate now
        self._start_until = 0.0  # monotonic seconds: the fast start's end, set by start()
        self._next_start_report = 0.0
        self._answer: set[str] = set()  # starting hosts whose reports the next early solve answers

    def start(self) -> None:
        self._start_until = time.monotonic() + START_WINDOWS * self.ctx.cfg.window_s
        self._pace(quiet=False)

    @property
    def starting(self) -> bool:
        return time.monotonic() < self._start_until

    def on_message(self, msg: dict, reply_to: tuple[str, int]) -> None:
        hosts, sender = self.ctx.cfg.topology.hosts, self.ctx.engine.names[reply_to[0]]
        if msg["t"] == "map" and sender != self.ctx.cfg.reference:
            self.ctx.rejected("not_solver")  # only the solver the fleet elected may move our clock
            return
        if not (valid_map(msg, hosts) if msg["t"] == "map" else valid_report(msg, sender, hosts)
                if msg["t"] == "report" else _finite(msg.get("delta_ns"))):
            self.ctx.rejected("invalid")
            return
        if msg["t"] == "report":
            if self.solver:
                self.solver.on_report(msg)
                if msg.get("urgent"):  # a clock stepped: solve soon, once its neighbours also said so
                    self._urgent = True
                    self._solve_due = min(self._solve_due, time.monotonic() + URGENT_SOLVE_S)
                elif msg.get("start"):
                    self._answer.add(sender)
                    self._solve_due = min(self._solve_due, time.monotonic() + START_SOLVE_S)
        elif msg["t"] == "map":
            self.sync.on_map(msg)
            if msg.get("urgent") or self.starting:
                self.ctx.publish()
        else:  # "stepped"
            self.sync.on_stepped(sender, float(msg["delta_ns"]))

    def poll(self, now_s: float) -> float:
        self._take_exchanges()
        if self.solver and now_s >= self._solve_due:  # due only on the reference, which solves
            self._solve(self.solver, urgent=self._urgent, only=None if self._urgent else self._answer)
        if not self.starting:
            return self._solve_due
        if now_s >= self._next_start_report:
            self._report(self.ctx.clock.now_ns())
        return min(self._solve_due, self._next_start_report)

    def tick(self, now_ns: int) -> None:
        self._report(now_ns)
        self._pace(quiet=self.sync.settled(now_ns))
        if self.solver:
            self._solve(self.solver)

    def _report(self, now_ns: int) -> None:
        msg = self.sync.report(now_ns)
        if self.ctx.cfg.utc_system:
            msg["utc"] = self._utc(now_ns)
        if self.starting:
            msg["start"] = True
            self._next_start_report = time.monotonic() + START_REPORT_S
        self.ctx.send(self.ctx.cfg.reference, msg)

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
        state = {"probe_interval_s": self.ctx.engine.interval_s, "probe_quiet": self.quiet, **self.sync.state()}
        if self.solver and self.solver.last is not None:
            state["solver"] = {"dropped_edges": int((~self.solver.last.kept).sum()),
                               "edges": len(self.solver.last.kept), "reports": len(self.solver.reports)}
        return state

    def snapshot(self) -> Snapshot:
        """The latest one-way delays of this host's probe paths, and whether it is synced."""
        samples = []
        state = self.ctx.latest or {}
        # the probes' own direction only: a reply travels another 5-tuple (another path, maybe
        # another spine) under the same path label, and the controller would mix the two
        for row in (r for r in state.get("owd", []) if r["src"] == self.ctx.cfg.host):
            labels = {"src": row["src"], "dst": row["dst"], "path": row["path"]}
            samples += [{"name": f"owd_{stat}_ns", "value": row[f"{stat}_ns"], "labels": labels}
                        for stat in ("min", "p50", "p99", "floor")]
        mapping = self.sync.mapping
        return Snapshot(samples=samples, info={"synced": bool(mapping and mapping.synced)})

    def _take_exchanges(self) -> None:
        engine = self.ctx.engine
        exchanges = []
        while engine.exchanges:
            exchanges.append(engine.exchanges.popleft())
        self.sync.add(exchanges)
        while self.sync.told:
            delta = self.sync.told.pop()
            for host in sorted(set(self.sync.peer_maps) | set(self.sync.pairs)):
                self.ctx.send(host, {"t": "stepped", "host": self.ctx.cfg.host, "delta_ns": delta})
        if self.sync.urgent:
            self._pace(quiet=False)
            self._report(self.ctx.clock.now_ns())

    def _pace(self, *, quiet: bool) -> None:
        """Probe at the quiet rate only while the clock needs no more: an agent's CPU follows
        its exchanges, and on a settled clock and an idle fabric half of them add little."""
        self.quiet = quiet
        self.ctx.engine.interval_s = self._intervals[quiet] / (START_RATE if self.starting else 1.0)

    def _solve(self, solver: Solver, *, urgent: bool = False, only: set[str] | None = None) -> None:
        """Solve and send the maps: to every reporting host, or `only` to these."""
        for host, msg in solver.solve(self.ctx.clock.now_ns()).items():
            if only is None or host in only:
                self.ctx.send(host, {**msg, "urgent": True} if urgent else msg)
        self._solve_due, self._urgent, self._answer = math.inf, False, set()
