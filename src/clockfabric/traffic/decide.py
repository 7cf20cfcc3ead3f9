"""When to move traffic off a plane and when to bring it back: pure logic, no sockets.

One `PlaneState` per (peer, plane) is fed the plane's observed health at every tick. A
plane that turns unhealthy is left at once: a job cannot wait. A plane that recovers is
used again only after it has stayed healthy for `hold_down_s`, and a plane that keeps
failing is *damped*, as BGP damps flapping routes (RFC 2439): every failure adds a penalty
that decays with a half-life; above `suppress` the plane stays unused, whatever it looks
like, until the penalty has decayed below `reuse`. A noisy signal therefore costs at most
one move per failure and never a move back and forth.

`Decider` turns the planes' states into the set of planes each peer's traffic may use,
and into the decisions worth telling: detected, restored, damped, moved, unreachable.
When no plane works (the peer or this host is cut off) nothing is moved: routes stay as
they are rather than thrash between dead planes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Policy:
    hold_down_s: float = 5.0  # healthy this long before traffic comes back
    penalty: float = 1.0  # added per failure
    half_life_s: float = 30.0
    suppress: float = 3.0  # damped from here: the third failure in quick succession
    reuse: float = 1.0  # ...until the penalty decays below this


@dataclass(frozen=True)
class Decision:
    t: float  # the tick's monotonic time, seconds
    kind: str  # detected | restored | damped | moved | unreachable | reachable
    peer: str
    planes: tuple[int, ...] = ()  # the planes concerned; for "moved", the planes now in use
    reason: str = ""


@dataclass
class PlaneState:
    policy: Policy
    in_use: bool = True
    healthy: bool = True  # as last observed
    healthy_since: float | None = 0.0
    penalty_value: float = 0.0
    penalty_t: float = 0.0
    damped: bool = False

    def penalty(self, t: float) -> float:
        return self.penalty_value * math.pow(0.5, (t - self.penalty_t) / self.policy.half_life_s)

    def observe(self, t: float, healthy: bool) -> list[str]:
        """Feed one observation; returns what changed: 'detected', 'damped', 'restored'."""
        changes = []
        if self.healthy and not healthy:
            self.penalty_value, self.penalty_t = self.penalty(t) + self.policy.penalty, t
            self.healthy_since = None
            if self.in_use:
                self.in_use = False
                changes.append("detected")
            if not self.damped and self.penalty_value >= self.policy.suppress:
                self.damped = True
                changes.append("damped")
        elif healthy and not self.healthy:
            self.healthy_since = t
        self.healthy = healthy
        if self.damped and self.penalty(t) < self.policy.reuse:
            self.damped = False
        if (not self.in_use and healthy and not self.damped and self.healthy_since is not None
                and t - self.healthy_since >= self.policy.hold_down_s):
            self.in_use = True
            changes.append("restored")
        return changes


@dataclass
class Decider:
    planes: tuple[int, ...]
    policy: Policy = field(default_factory=Policy)
    states: dict[tuple[str, int], PlaneState] = field(default_factory=dict)
    routed: dict[str, tuple[int, ...]] = field(default_factory=dict)  # planes each peer's traffic uses
    unreachable: set[str] = field(default_factory=set)

    def state(self, peer: str, plane: int) -> PlaneState:
        key = (peer, plane)
        if key not in self.states:
            self.states[key] = PlaneState(self.policy)
        return self.states[key]

    def adopt(self, peer: str, planes: tuple[int, ...], t: float) -> None:
        """Start from routes found in the kernel (an agent restarted): planes not in use stay
        unused until they have proved healthy for the hold-down."""
        self.routed[peer] = tuple(sorted(planes))
        for plane in self.planes:
            if plane not in planes:
                st = self.state(peer, plane)
                st.in_use, st.healthy, st.healthy_since = False, False, None

    def observe(self, t: float, peer: str, health: dict[int, bool], reason: str = "") -> list[Decision]:
        """One tick's health of each of the peer's planes (False: do not send on it)."""
        out = []
        for plane in self.planes:
            for change in self.state(peer, plane).observe(t, health.get(plane, False)):
                out.append(Decision(t, change, peer, (plane,), reason if change != "restored" else ""))
        usable = tuple(p for p in self.planes if self.state(peer, p).in_use)
        if not usable:
            if peer not in self.unreachable:
                self.unreachable.add(peer)
                out.append(Decision(t, "unreachable", peer, (), "no plane works; routes left as they are"))
            return out
        if peer in self.unreachable:
            self.unreachable.discard(peer)
            out.append(Decision(t, "reachable", peer, usable))
        if usable != self.routed.get(peer, self.planes):
            self.routed[peer] = usable
            out.append(Decision(t, "moved", peer, usable))
        return out

    def pinned(self) -> dict[str, tuple[int, ...]]:
        """Peers whose traffic avoids some plane, and the planes it uses."""
        return {p: planes for p, planes in self.routed.items() if planes != self.planes}
