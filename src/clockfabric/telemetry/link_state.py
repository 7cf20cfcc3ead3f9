"""Link state from netlink messages: parsing and the state machine, no sockets, no threads.

  parse_link(msg)   a netlink message (pyroute2's, or a plain dict of the same shape) -> LinkInfo
  LinkTracker       LinkInfo + time -> Transition or None; flap windows

A link's state is (admin up, carrier, operstate). Netlink sends RTM_NEWLINK for many
reasons that are not state (statistics, MTU, alias, promiscuity, addresses): those repeat
the state the tracker already holds and make no transition. "Up" is what a user means by
it: admin up, and operstate UP (or UNKNOWN with carrier, as loopback, dummy and tun report).
A transition that flips up-ness is a "down" or an "up"; one that changes state without
flipping it (DOWN -> LOWERLAYERDOWN, say) is a "change". Flaps count only downs and ups.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, TypeGuard

IFF_UP = 0x1
IFF_LOWER_UP = 0x10000
AF_UNSPEC = 0  # link notifications proper; AF_BRIDGE ones are bridge-port news, not link state
UP_OPERSTATES = {"UP"}
EVENTS_MAX = 10_000


# --------------------------------------------------------------------------- parsing


@dataclass(frozen=True)
class LinkState:
    """What a link's state is: the three things netlink says about it."""

    admin_up: bool  # IFF_UP: someone set it up
    carrier: bool | None  # IFLA_CARRIER, else IFF_LOWER_UP; None when neither was sent
    operstate: str  # IFLA_OPERSTATE (RFC 2863): UP, DOWN, LOWERLAYERDOWN, UNKNOWN, DORMANT, ...

    @property
    def up(self) -> bool:
        if not self.admin_up:
            return False
        return self.operstate in UP_OPERSTATES or (self.operstate == "UNKNOWN" and self.carrier is not False)

    def as_dict(self) -> dict[str, Any]:
        return {"admin_up": self.admin_up, "carrier": self.carrier, "operstate": self.operstate, "up": self.up}


@dataclass(frozen=True)
class LinkInfo:
    """One link message, reduced to what the tracker needs."""

    index: int
    name: str | None
    state: LinkState | None  # None: the link is gone (RTM_DELLINK)
    carrier_changes: int | None = None


def _attr(msg: Any, name: str) -> Any:
    """An attribute of a pyroute2 message, or of a plain dict {"attrs": [(name, value), ...]}."""
    get_attr = getattr(msg, "get_attr", None)
    if callable(get_attr):
        return get_attr(name)
    for item in msg.get("attrs", ()):
        if item[0] == name:
            return item[1]
    return None


def parse_link(msg: Any) -> LinkInfo | None:
    """A link's identity and state from one RTM_NEWLINK / RTM_DELLINK, or None if the
    message is something else (another event, a bridge-port message, an error)."""
    event = msg.get("event")
    if event not in ("RTM_NEWLINK", "RTM_DELLINK"):
        return None
    if msg.get("family", AF_UNSPEC) != AF_UNSPEC:
        return None
    header = msg.get("header") or {}
    if header.get("error") is not None:
        return None
    index = msg.get("index")
    if not index:
        return None
    name = _attr(msg, "IFLA_IFNAME")
    changes = _attr(msg, "IFLA_CARRIER_CHANGES")
    changes = int(changes) if changes is not None else None
    if event == "RTM_DELLINK":
        return LinkInfo(int(index), name, None, changes)
    flags = int(msg.get("flags") or 0)
    carrier = _attr(msg, "IFLA_CARRIER")
    carrier = bool(carrier) if carrier is not None else bool(flags & IFF_LOWER_UP)
    operstate = _attr(msg, "IFLA_OPERSTATE")
    operstate = str(operstate).upper() if operstate is not None else "UNKNOWN"
    return LinkInfo(int(index), name, LinkState(bool(flags & IFF_UP), carrier, operstate), changes)


# --------------------------------------------------------------------------- state machine


@dataclass(frozen=True)
class Transition:
    """One real change of one link's state."""

    seq: int  # 1, 2, 3, ... in the order the watcher saw them
    t_ns: int  # when the message was read (the kernel sends no timestamp)
    device: str
    index: int
    kind: str  # "down" (was up, now not), "up" (the reverse), or "change" (state moved, up-ness did not)
    from_state: LinkState | None  # None: the link had just appeared
    to_state: LinkState | None  # None: the link is gone
    carrier_changes: int | None = None  # IFLA_CARRIER_CHANGES, when the kernel sent it
    resync: bool = False  # True: found by a re-dump after lost messages; t_ns is the re-dump's time

    def as_dict(self) -> dict[str, Any]:
        return {
            "seq": self.seq, "t_ns": self.t_ns, "device": self.device, "index": self.index, "kind": self.kind,
            "from": self.from_state.as_dict() if self.from_state else None,
            "to": self.to_state.as_dict() if self.to_state else None,
            "carrier_changes": self.carrier_changes, "resync": self.resync,
        }


@dataclass
class _Device:
    """What the tracker remembers per device name."""

    transitions: int = 0
    last_change_ns: int | None = None
    # (t_ns, "down" | "up") of each flip in the window, and (down_ns, up_ns) of each finished
    # down period in it; bounded too, for a link that flaps thousands of times a window
    flips: deque = field(default_factory=lambda: deque(maxlen=EVENTS_MAX))
    downs: deque = field(default_factory=lambda: deque(maxlen=EVENTS_MAX))
    down_since_ns: int | None = None
    carrier_changes: int | None = None


class LinkTracker:
    """Link states, transitions and flap windows, fed with LinkInfo; no sockets, no threads."""

    def __init__(self, devices: Iterable[str] | None = None, *, flap_window_s: float = 60.0,
                 max_events: int = EVENTS_MAX):
        self.only = set(devices) if devices is not None else None
        self.window_ns = int(flap_window_s * 1e9)
        self.flap_window_s = flap_window_s
        self.events: deque[Transition] = deque(maxlen=max_events)
        self.dropped = 0  # transitions pushed out of the full deque (oldest first)
        self.seq = 0
        self.states: dict[int, tuple[str, LinkState]] = {}  # ifindex -> (name, state)
        self.devices: dict[str, _Device] = {}

    def wanted(self, name: str | None) -> TypeGuard[str]:
        if name is None:
            return False
        return name in self.only if self.only is not None else name != "lo"

    # -- feeding

    def seed(self, infos: Iterable[LinkInfo]) -> None:
        """Set the states from a dump, with no transitions (the start)."""
        self.states = {}
        for info in infos:
            if info.state is not None and self.wanted(info.name):
                self.states[info.index] = (info.name, info.state)
                self.devices.setdefault(info.name, _Device()).carrier_changes = info.carrier_changes

    def resync(self, infos: Iterable[LinkInfo], t_ns: int) -> list[Transition]:
        """A fresh dump after lost messages: whatever differs becomes a transition (resync=True)."""
        infos = [i for i in infos if i.state is not None]
        seen = {i.index for i in infos}
        out = [tr for i in infos if (tr := self.apply(i, t_ns, resync=True))]
        for index, (name, _) in list(self.states.items()):
            if index not in seen and (tr := self.apply(LinkInfo(index, name, None), t_ns, resync=True)):
                out.append(tr)
        return out

    def apply(self, info: LinkInfo, t_ns: int, *, resync: bool = False) -> Transition | None:
        """One message in; a Transition out if the link's state really changed."""
        old_name, old = self.states.get(info.index, (None, None))
        name = info.name or old_name
        if not self.wanted(name):
            self.states.pop(info.index, None)  # e.g. renamed away from what we watch
            return None
        if old_name is not None and old_name != name:
            old = None  # renamed: to the new name, the link has just appeared
        if info.state is None:
            self.states.pop(info.index, None)
        else:
            self.states[info.index] = (name, info.state)
        dev = self.devices.setdefault(name, _Device())
        if info.carrier_changes is not None:
            dev.carrier_changes = info.carrier_changes
        if old == info.state:
            return None  # a repeat: statistics, MTU, alias, ... or a duplicate
        was_up = old.up if old is not None else False
        now_up = info.state.up if info.state is not None else False
        kind = "down" if was_up and not now_up else "up" if now_up and not was_up else "change"
        self.seq += 1
        tr = Transition(self.seq, t_ns, name, info.index, kind, old, info.state,
                        info.carrier_changes if info.carrier_changes is not None else dev.carrier_changes, resync)
        if len(self.events) == self.events.maxlen:
            self.dropped += 1
        self.events.append(tr)
        dev.transitions += 1
        dev.last_change_ns = t_ns
        if kind != "change":
            dev.flips.append((t_ns, kind))
            if kind == "down":
                dev.down_since_ns = t_ns
            elif dev.down_since_ns is not None:
                dev.downs.append((dev.down_since_ns, t_ns))
                dev.down_since_ns = None
        self._trim(dev, t_ns)
        return tr

    # -- reading

    def _trim(self, dev: _Device, now_ns: int) -> None:
        start = now_ns - self.window_ns
        while dev.flips and dev.flips[0][0] < start:
            dev.flips.popleft()
        while dev.downs and dev.downs[0][1] < start:
            dev.downs.popleft()

    def since(self, since_ns: int | None = None, after_seq: int | None = None) -> list[Transition]:
        return [t for t in self.events
                if (since_ns is None or t.t_ns >= since_ns) and (after_seq is None or t.seq > after_seq)]

    def state(self, device: str) -> LinkState | None:
        for name, st in self.states.values():
            if name == device:
                return st
        return None

    def flaps(self, device: str, now_ns: int) -> dict[str, Any]:
        """Downs and ups of `device` in the last flap_window_s, and how long each down lasted."""
        dev = self.devices.get(device) or _Device()
        self._trim(dev, now_ns)
        return {
            "device": device,
            "window_s": self.flap_window_s,
            "count": len(dev.flips),  # downs and ups in the window
            "downs": sum(1 for _, kind in dev.flips if kind == "down"),
            "ups": sum(1 for _, kind in dev.flips if kind == "up"),
            # finished down periods (a down, then its up) whose up is in the window, oldest first
            "down_durations_s": [(b - a) / 1e9 for a, b in dev.downs],
            "down_since_ns": dev.down_since_ns,  # down now, since then (None: up, or down since before the start)
            "transitions": dev.transitions,  # since the watcher started, all kinds
            "last_change_ns": dev.last_change_ns,
        }
