"""The host agent's configuration: what `clockfabric agent` is told, checked once."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from clockfabric.agent.service import SERVICES
from clockfabric.clock.graph import probe_peers
from clockfabric.clock.network import solver_installed
from clockfabric.collective.claims import AGENT_PORT
from clockfabric.errors import ClockfabricError
from clockfabric.probe import wire
from clockfabric.probe.engine import Marking
from clockfabric.telemetry.base import COLLECTORS
from clockfabric.topology import Topology
from clockfabric.topology.classes import PRIORITY_DSCP

CLASS_PROBE_SHARE = 0.5  # the class stream's exchanges per clock exchange at the full rate

CONTROL_PORT = AGENT_PORT  # clock reports and maps, and collective ranks' spine claims
METRICS_PORT = 9470


@dataclass
class AgentConfig:
    host: str
    topology: Topology
    state_dir: Path
    peers: int = 10
    reference: str = ""  # the host whose clock is global time; default ("" or None) the first by name
    # the hosts that take over the solve, in this order, once the solving agent falls silent;
    # default every other host by name (one without the solver extra is passed over)
    solvers: tuple[str, ...] = ()
    window_s: float = 2.0
    update_s: float = 1.0
    probe_rate: float = 20.0  # exchanges per second this host starts, over all its peers: what its CPU pays for
    quiet_rate: float = 10.0  # the same while the clock is settled and the fabric quiet (HostSync.settled)
    probe_budget: float = 0.0005  # of the host's slowest link, for its probes and replies: a cap on slow links
    ports: int = 4  # UDP ports per rail: paths through ECMP
    base_port: int = 7300
    probe_dscp: int = PRIORITY_DSCP  # on probes and control messages: the fabric's priority class (EF)
    # the system's real-time clock is UTC (disciplined by GPS, NTP or PTP) while the agent's clock is
    # another: the agent reports the difference, and the solver steers global time to it
    utc_system: bool = False
    metrics_port: int = METRICS_PORT  # Prometheus /metrics on the host's address; 0: none
    controller: str | None = None  # the controller URL (http(s)://host:port), or its replicas' comma-separated
    token: str = ""  # the fleet token the controller wants
    ca_file: str | None = None  # to verify an https controller with a private CA
    event_log: Path | None = None  # events held until the controller has them; default state_dir/HOST.events
    failover: bool | None = None  # move traffic off failed planes; None: on when the host has two or more
    failover_interval_s: float = 0.1  # heartbeats per path; a path is dead after three missed
    hold_down_s: float = 5.0  # a recovered plane carries traffic again after this long healthy
    steer: bool = False  # transparent mode: move single TCP flows off a plane congested toward their peer
    lldp_interval_s: float = 5.0  # announce "host, NIC" by LLDP this often (lldpd's 30 s); 0: only listen
    collectors: tuple[str, ...] = ()  # telemetry collectors to run besides the default ones
    no_collectors: tuple[str, ...] = ()  # default collectors not to run
    disabled: tuple[str, ...] = ()  # agent services not to run (agent/services/), e.g. to measure one's cost
    key_file: Path | None = None  # the fleet keys (auth/keys.py) that seal probes, heartbeats, control messages
    insecure: bool = False  # run without a key: any host on the fabric can then move this host's clock
    qos_file: Path | None = None  # QoS policies (qos.policy) from this JSON file, not from the controller
    seed: int = 0
    probed: list[str] = field(init=False)
    succession: tuple[str, ...] = field(init=False)  # the reference, then the solvers

    def __post_init__(self):
        hosts = list(self.topology.hosts)
        if self.key_file is not None and self.insecure:
            raise ClockfabricError("--key-file and --insecure contradict each other: give one")
        if self.host not in self.topology.hosts:
            raise ClockfabricError(f"host {self.host!r} is not in the topology; hosts are {', '.join(hosts[:5])}...")
        if not 0 <= self.probe_dscp <= 63:
            raise ClockfabricError(f"probe DSCP {self.probe_dscp} must be 0..63 (46 is EF, PTP's usual class)")
        self.reference = self.reference or min(hosts)
        self.event_log = self.event_log or Path(self.state_dir) / f"{self.host}.events"
        if self.reference not in self.topology.hosts:
            raise ClockfabricError(f"reference {self.reference!r} is not a host of the topology")
        if unknown := [h for h in self.solvers if h not in self.topology.hosts]:
            raise ClockfabricError(f"--solvers: {unknown[0]!r} is not a host of the topology")
        others = [h for h in self.solvers or sorted(hosts) if h != self.reference]
        self.succession = (self.reference, *dict.fromkeys(others))
        self.probed = probe_peers(hosts, self.peers, self.seed)[self.host]
        SERVICES.enabled(disable=self.disabled)  # an unknown name: one line naming the known
        if self.host == self.reference and "clock" not in self.disabled:
            solver_installed(self.host)
        if self.failover and "failover" in self.disabled:
            raise ClockfabricError("--failover and --disable failover contradict each other: give one")
        if self.failover is None:
            self.failover = len(self.topology.hosts[self.host].nics) > 1 and "failover" not in self.disabled
        if self.steer and not self.failover:
            raise ClockfabricError("--steer needs failover's heartbeats (they measure each plane's queueing): "
                                   "drop --no-failover or --disable failover; the host needs two or more NICs")
        for url in (self.controller or "").split(","):
            if self.controller is not None and not url.strip().startswith(("http://", "https://")):
                raise ClockfabricError(f"--controller {self.controller!r}: give http(s)://HOST:PORT, or several "
                                       "comma-separated (the controller's replicas)")
        COLLECTORS.enabled(self.collectors, self.no_collectors)  # an unknown name: one line naming the known

    def probe_interval_s(self, *, quiet: bool = False) -> float:
        """Seconds between exchanges with each peer: the probe rate, slowed to stay in the budget,
        but each peer at least once a second. Quiet, the same share slower again (probe_rate /
        quiet_rate), whatever the budget left of the full rate: where the budget already holds
        the full rate near one a second (sealed exchanges on a slow link), a quiet rate taken
        on its own would save nothing. A settled pair still sees its peer once a window: its
        fit widens its span while short of points (clock/pairs.py)."""
        rate = min(link.rate_bps for link in self.topology.links_of(self.host))
        k = max(1, len(self.probed))
        bytes_per_round = k * wire.exchange_wire_bytes()  # each host probes k and answers ~k
        full = min(1.0, max(k / self.probe_rate, bytes_per_round / (self.probe_budget * rate / 8)))
        if not quiet:
            return full
        slower = self.probe_rate / min(self.quiet_rate, self.probe_rate)
        return max(full, min(self.window_s, full * slower))

    def probe_marking(self) -> Marking:
        """What the probes mark: probe_dscp; and on a fabric with traffic classes a class stream,
        probes in the jobs' class at CLASS_PROBE_SHARE of the full rate (the clock's own stay in
        the priority class and see none of the jobs' queues)."""
        classes = self.topology.classes
        if classes is None or not classes.collective_dscp:
            return Marking(self.probe_dscp)
        return Marking(self.probe_dscp, classes.collective_dscp[0], self.probe_interval_s() / CLASS_PROBE_SHARE)
