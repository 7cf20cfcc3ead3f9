"""The agent is a router of services: each concern of the host agent is one `Service`.

Words, as the agent's code uses them:
- service: one part of the host agent (clock, claims, lldp, failover, telemetry, workload,
  controller), a `Service` here, one module in clockfabric.agent.services. Nothing else is one:
  clock sync's algorithm is clock.sync, and the controller is a process the agents push to.
- collector: one source of telemetry (telemetry/), run by the telemetry service.
- detector: one kind of alert the controller finds (controller/detectors/).
- check: one audit verdict (audit/checks/).

A service is built from the agent's shared context (context.py) when its config wants it,
and then the agent drives it: `start()`; each control message of a type it declared in
`handles` goes to `on_message`; `poll()` when the time it asked for comes, after a message of
its own (unless on_message said it moves nothing sooner), and at each update (`Polls`: for
work that cannot wait for the update; another service's wake-ups do not poll it); `tick()`
once per update; its `report()` joins the published state (and so /metrics); its
`snapshot()` joins each push to the controller; `stop()` in the reverse order of the start.
One service's failure costs that call's work, not the agent (`Supervisor`): the host keeps
its clock, probes and failover while the failure is counted and shown. A service registers
itself with `@service(name)` in a module of clockfabric.agent.services: adding one is adding
a file.
Every service can be left out of an agent by name (`clockfabric agent --disable NAME`).
"""

from __future__ import annotations

import logging
import math
import sys
import time
from abc import ABC
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

if sys.version_info >= (3, 11):
    from typing import TypeVarTuple, Unpack
else:
    from typing_extensions import TypeVarTuple, Unpack

from clockfabric import wirejson
from clockfabric.registry import Entry, Registry

if TYPE_CHECKING:
    from clockfabric.agent.config import AgentConfig
    from clockfabric.agent.context import AgentContext

log = logging.getLogger(__name__)
T = TypeVar("T")
Ts = TypeVarTuple("Ts")


@dataclass
class Snapshot:
    """A service's part of one push to the controller."""

    events: list[dict] = field(default_factory=list)  # new since the last push: taken once
    samples: list[dict] = field(default_factory=list)  # the current values
    info: dict = field(default_factory=dict)  # fields of the push's agent info


class Service(ABC):  # noqa: B024 - every call is optional: a service overrides those it does
    """What the agent calls; a service overrides the parts it does (these do nothing)."""

    name: str = ""  # set by @service
    handles: frozenset[str] = frozenset()  # control message types ("t") it answers

    def start(self) -> None:  # noqa: B027 - optional
        """Start its threads and sockets; the constructor only builds."""

    def on_message(self, msg: dict, reply_to: tuple[str, int]) -> bool | None:
        """Take one message of a type it declared. False where it moves nothing the next poll
        would do sooner than that poll asked for: the loop then does not poll it at once."""
        raise NotImplementedError(f"service {self.name} declared {msg.get('t')!r} but does not handle it")

    def poll(self, now_s: float) -> float:
        """Quick work when the main loop polls it (`now_s`: time.monotonic()): at the time it last
        asked for, after a message of its own, and at each update (Polls). Returns when, on that
        clock, it wants the next poll at the latest (math.inf: the next update will do)."""
        return math.inf

    def tick(self, now_ns: int) -> None:  # noqa: B027 - optional
        """The periodic work of one update; `now_ns`: the host clock's reading."""

    def report(self) -> dict:
        """Its fields of the published state."""
        return {}

    def snapshot(self) -> Snapshot:
        """Its part of a push to the controller (called from the pusher's thread)."""
        return Snapshot()

    def stop(self) -> None:  # noqa: B027 - optional
        """Let go of its threads and sockets."""


# a service's factory: its class, built from the agent's shared context
SERVICES: Registry[Callable[[AgentContext], Service]] = Registry("service", load="clockfabric.agent.services")
S = TypeVar("S", bound=type[Service])


def service(name: str, *, help: str, wanted: Callable[[AgentConfig], bool] = lambda cfg: True) -> Callable[[S], S]:
    """Class decorator: register a Service under `name`; `wanted(cfg)` says whether an agent runs it."""
    def add(cls: S) -> S:
        cls.name = name
        SERVICES.register(name, help=help, wanted=wanted)(cls)
        return cls
    return add


def chosen(cfg: AgentConfig) -> list[Entry[Callable[[AgentContext], Service]]]:
    """The services an agent with `cfg` runs, in their start order: those not disabled
    (`clockfabric agent --disable NAME`) that its configuration wants."""
    return [entry for entry in SERVICES.enabled(disable=cfg.disabled) if entry.meta["wanted"](cfg)]


class Router:
    """Control messages to the service that declared their type; what fits none is counted."""

    def __init__(self, services: Iterable[Service]):
        self.routes: dict[str, Service] = {}
        for s in services:
            for kind in sorted(s.handles):
                if kind in self.routes:
                    raise ValueError(f"control message {kind!r} is claimed by both the {self.routes[kind].name} "
                                     f"and the {s.name} service")
                self.routes[kind] = s
        self.bad_messages = 0
        self._delivered: set[Service] = set()  # the services handed a message since taken() was last asked

    def deliver(self, data: bytes, reply_to: tuple[str, int], kinds: frozenset[str] | None = None) -> bool:
        """Hand one message to its service; False (and counted) if it was not one we take.
        `kinds`: the only types taken from this sender (None: any). Total: whatever `data` holds,
        nothing raises out of here, so no message can stop the agent's loop."""
        try:
            msg = wirejson.loads(data)
            to = self.routes.get(msg["t"]) if isinstance(msg, dict) and isinstance(msg.get("t"), str) else None
            if to is None or (kinds is not None and msg["t"] not in kinds):
                self.bad_messages += 1
                return False
            if to.on_message(msg, reply_to) is not False:
                self._delivered.add(to)
            return True
        except (ValueError, KeyError, TypeError, IndexError, AttributeError, OverflowError):
            # not JSON (or nested too deep), a field missing or of the wrong kind or size
            self.bad_messages += 1
        except Exception:  # a handler's bug: logged, and the loop goes on
            self.bad_messages += 1
            log.exception("control message from %s", reply_to[0])
        return False


    def taken(self) -> set[Service]:
        """The services handed a message since the last call that wants them polled at once."""
        out, self._delivered = self._delivered, set()
        return out


class Polls:
    """When the agent's loop polls each service: when the time the service asked for comes and
    after a message of its own that wants it (the update polls them all besides). One service's
    wake-ups cost the others nothing: a loop that woke every service five times a second,
    whatever it asked, spent a tenth of an idle agent's CPU on those wake-ups."""

    def __init__(self, services: Iterable[Service]):
        self._at = {s: -math.inf for s in services}  # each service's next poll, at the latest

    def next_s(self) -> float:
        """When the loop must wake next for a poll."""
        return min(self._at.values(), default=math.inf)

    def due(self, now_s: float, delivered: set[Service]) -> list[Service]:
        """The services to poll now, in their order."""
        return [s for s, at in self._at.items() if at <= now_s or s in delivered]

    def asked(self, service: Service, when_s: float) -> None:
        """`service` was polled and asked for its next poll at `when_s`."""
        self._at[service] = when_s


@dataclass
class Failures:
    count: int = 0
    last: str = ""  # the last failure: which call, what was raised
    logged_at: float = -math.inf  # monotonic time of the last traceback logged


class Supervisor:
    """Calls the services' work so that an exception in one (a NIC gone under a socket, a bug)
    ends that call, not the agent's loop. Every failure is counted by service and the last one
    said, in the published state, /metrics and each push; its traceback is logged at most once
    a LOG_EVERY_S per service, so a failing tick neither hides nor floods."""

    LOG_EVERY_S = 60.0

    def __init__(self) -> None:
        self.failures: dict[str, Failures] = {}

    def call(self, s: Service, method: Callable[[Unpack[Ts]], T], *args: Unpack[Ts], default: T) -> T:
        """`method` (one of `s`'s) with `args`; `default` if it raises."""
        try:
            return method(*args)
        except Exception as e:  # noqa: BLE001 - any of a service's bugs: counted and logged below
            f = self.failures.setdefault(s.name, Failures())
            f.count += 1
            f.last = f"{method.__name__}: {type(e).__name__}: {e}"[:300]
            now = time.monotonic()
            if now - f.logged_at >= self.LOG_EVERY_S:
                f.logged_at = now
                log.exception("the %s service's %s failed (%d so far): the agent goes on without it",
                              s.name, method.__name__, f.count)
            return default

    def report(self) -> dict:
        failures = dict(self.failures)  # one copy: the pusher's thread reads while the loop adds
        return {"service_failures": {name: {"count": f.count, "last": f.last} for name, f in failures.items()}}
