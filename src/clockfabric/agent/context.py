"""What the agent's services share: the host, its clock, its probe engine and control socket,
its link watcher, and a few hooks by which one service's news reaches the others."""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from clockfabric.agent.config import CONTROL_PORT
from clockfabric.auth.seal import CONTROL, Sealer
from clockfabric.clock.delays import OWD_TRUST_NS
from clockfabric.probe import wire
from clockfabric.wirejson import COMPACT

if TYPE_CHECKING:
    from clockfabric.agent.config import AgentConfig
    from clockfabric.clock.sync import HostSync
    from clockfabric.lldp import Neighbours
    from clockfabric.probe.engine import ProbeEngine
    from clockfabric.qos.policy import Ask
    from clockfabric.telemetry.link_watcher import LinkWatcher

log = logging.getLogger(__name__)


class HostClock(Protocol):
    def local_ns(self, real_ns: int) -> int: ...

    def now_ns(self) -> int: ...

    def set_ns(self) -> int: ...


@dataclass
class AgentContext:
    cfg: AgentConfig
    address: str  # this host's
    addresses: dict[str, str]  # every host's, by name
    rails: list[str]  # this host's NICs
    clock: HostClock
    engine: ProbeEngine
    control: socket.socket  # the agent's control port: clock reports and maps, claims
    links: LinkWatcher
    publish: Callable[[], None]  # write the state file now
    push_snapshot: Callable[[], tuple[list[dict], list[dict], dict]]  # what a push to the controller carries
    sealers: dict[str, Sealer]  # by channel (auth.seal): probes, heartbeats, control messages
    latest: dict | None = None  # the last published state, whole: what /metrics reads
    neighbours: Neighbours | None = None  # the LLDP service's listener, where it runs
    time_source: HostSync | None = None  # the clock service's: the mapping to global time
    on_link_change: list[Callable[[], None]] = field(default_factory=list)  # a link of this host changed
    on_news: list[Callable[[], None]] = field(default_factory=list)  # something the controller should hear now
    on_reply: list[Callable[[dict], None]] = field(default_factory=list)  # the controller's answer to a push
    job_sockets: Callable[[], list[tuple[str, int]]] | None = None  # (jobid, socket cookie): the workload's
    job_qos: Callable[[], dict[str, Ask]] | None = None  # jobid -> what may give it a QoS class
    job_flows: Callable[[], tuple[list, dict]] | None = None  # the workload's flows and their last OWD window
    # these jobs' sockets since the workload's last update: (jobid, pid, inode, fd), read now
    job_sockets_opened: Callable[[Collection[str]], list[tuple[str, int, int, int]]] | None = None

    def link_changed(self) -> None:
        for wake in self.on_link_change:
            wake()

    def news(self) -> None:
        for wake in self.on_news:
            wake()

    def send(self, host: str, msg: dict | str) -> None:
        """A control message to another host's agent (a str: its JSON already), sealed, counted in
        the probe engine's bytes."""
        address = self.addresses[host]
        text = msg if isinstance(msg, str) else json.dumps(msg, separators=COMPACT)
        data, _ = self.sealers[CONTROL].seal(text.encode(), address)
        try:
            self.control.sendto(data, (address, CONTROL_PORT))
            self.engine.counters["control_bytes_sent"] += len(data) + wire.IP_UDP_ETH_OVERHEAD
        except OSError as e:
            log.debug("control message to %s: %s", host, e)

    def reply(self, msg: dict, reply_to: tuple[str, int]) -> None:
        """An answer to a collective rank on this host (agent.RANK_MESSAGES): unsealed, as it asked."""
        try:
            self.control.sendto(json.dumps(msg).encode(), reply_to)
        except OSError as e:  # the rank gave up and closed its socket
            log.debug("answer to %s: %s", reply_to, e)

    def rejected(self, reason: str) -> None:
        """A sealed control message from a fleet host that its role does not allow (e.g. a map
        not from the solver): counted with the forged ones."""
        self.sealers[CONTROL].rejected[reason] += 1

    def to_time(self, real_ns: int) -> tuple[int, bool]:
        """A real-clock time as reported to the controller: global, and marked so, only while
        this host is synced and its bound there is within half the budget a one-way delay may
        carry (both ends' bounds add up in one); else the host's own clock, marked unsynced.
        A held-over mapping stays `synced` while its bound grows: the bound is the judge."""
        local = self.clock.local_ns(real_ns)
        mapping = self.time_source.mapping if self.time_source else None
        if mapping is None or not mapping.synced or mapping.bound_at(local) > OWD_TRUST_NS / 2:
            return local, False
        return mapping.global_ns(local), True
