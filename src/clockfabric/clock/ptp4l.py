"""Baseline: a real linuxptp ptp4l between a fleet's hosts, software timestamps, never steering.

Unicast UDPv4 (the lab routes and forwards no multicast): the master grants unicast
service, each slave asks the master's stable host address for it. `free_running 1` means
ptp4l measures but never adjusts the system clock, which all namespaces share; so the
offset a slave measures to its master is exactly its measurement error (true offset 0).

Free-running ptp4l logs "master offset" only once per freq_est_interval (1 s at the
fastest), not once per Sync. So the per-Sync offsets are read from each slave's
management socket instead: TIME_STATUS_NP holds the last offset and that Sync's ingress
time, polled a few times per Sync interval and kept once per Sync.

Its packets carry the DSCP clockfabric's probes carry (`dscp_event`, `dscp_general`), so on a
lab with traffic classes both baselines ride the priority class: a fair comparison.

Run at its best: a software transmit timestamp is taken as the packet leaves the host's
qdisc, so an event message behind a burst in the rate-capped priority class (the agents'
maps share it: 5% of a 25 Mbit/s link in the benchmark's scenario P), or sent by a
CPU-starved host, gets its timestamp late. At ptp4l's usual 1-10 ms `tx_timestamp_timeout`
the master gives up on it, its port goes FAULTY and by default stays so 16 s
(`fault_reset_interval 4`), while every slave loses it. The queue ahead of the timestamp
costs ptp4l no accuracy, so it waits up to 100 ms for it, and a port that faults anyway is
reset at once (`ASAP`). A master's reset forgets the unicast grants it gave; a slave holding
an hour's grant (`unicast_req_duration`'s default) had not found it again 14 s later, so the
slaves ask for 10 s at a time, the least ptp4l takes.
"""

from __future__ import annotations

import re
import shutil
import socket
import struct
import sys
import threading
import time
from pathlib import Path

if sys.version_info >= (3, 11):
    from typing import Self
else:
    from typing_extensions import Self

from clockfabric.errors import ClockfabricError
from clockfabric.hosts import Fleet, Proc, stop
from clockfabric.topology.classes import PRIORITY_DSCP

# tx_timestamp_timeout: ms, longer than an event message waits behind a burst in the capped
# priority class (module docstring)
COMMON = """[global]
time_stamping software
network_transport UDPv4
free_running 1
logAnnounceInterval -2
logSyncInterval {sync}
logMinDelayReqInterval {sync}
freq_est_interval 0
summary_interval {sync}
dscp_event {dscp}
dscp_general {dscp}
tx_timestamp_timeout 100
fault_reset_interval ASAP
uds_address {uds}
verbose 1
use_syslog 0
"""
MASTER = """unicast_listen 1
inhibit_multicast_service 1
[{iface}]
"""
SLAVE = """slaveOnly 1
unicast_req_duration 10
[unicast_master_table]
table_id 1
logQueryInterval -2
UDPv4 {master}
[{iface}]
unicast_master_table 1
"""

OFFSET_LINE = re.compile(r"\[(\d+(?:\.\d+)?)\]: .*?master offset\s+(-?\d+) s\d")
TIME_STATUS_NP = 0xC000


def parse_offsets(text: str) -> list[tuple[float, int]]:
    """(log time in s, offset in ns) from ptp4l's "master offset" lines; other lines skipped.

    The log time is ptp4l's own stamp, CLOCK_MONOTONIC seconds."""
    return [(float(m[1]), int(m[2])) for m in map(OFFSET_LINE.search, text.splitlines()) if m]


def _request(seq: int) -> bytes:
    """A management GET of TIME_STATUS_NP, as `pmc -u -b 0` sends it (never forwarded)."""
    header = struct.pack("!BBHBBHq4s10sHBB", 0x0D, 0x02, 54, 0, 0, 0, 0, bytes(4), bytes(10), seq, 0x04, 0x7F)
    return header + b"\xff" * 10 + bytes([0, 0, 0, 0]) + struct.pack("!HHH", 0x0001, 2, TIME_STATUS_NP)


def _time_status(reply: bytes) -> tuple[int, int, bool] | None:
    """(ingress time ns, master offset ns, grandmaster present) from a RESPONSE, else None."""
    if len(reply) < 96 or reply[0] & 0x0F != 0x0D or reply[46] & 0x0F != 2:
        return None
    if struct.unpack_from("!HHH", reply, 48)[::2] != (0x0001, TIME_STATUS_NP):
        return None
    offset, ingress = struct.unpack_from("!qq", reply, 54)
    (gm_present,) = struct.unpack_from("!i", reply, 92)
    return ingress, offset, bool(gm_present)


class Ptp4lMesh:
    """One ptp4l master and one slave per host, free-running; a context manager.

    work_dir holds each host's config, log and management socket, which this process polls:
    a folder the hosts share with it (as a lab's namespaces do)."""

    def __init__(self, fleet: Fleet, master: str, slaves: list[str], *, work_dir: Path,
                 log_sync_interval: int = -4, iface: str = "eth0", dscp: int = PRIORITY_DSCP):
        if shutil.which("ptp4l") is None:
            raise ClockfabricError("ptp4l not found; install linuxptp: apt-get install linuxptp, or run make setup")
        for h in (master, *slaves):
            if h not in fleet.topology.hosts:
                raise ClockfabricError(f"{h!r} is not a host of {fleet.name}; ptp4l runs on hosts")
        if master in slaves or len(set(slaves)) != len(slaves):
            raise ClockfabricError("ptp4l: the master and each slave must be different hosts")
        self.fleet, self.master, self.slaves = fleet, master, list(slaves)
        self.dir = work_dir
        self.sync_s = 2.0 ** log_sync_interval
        self._sync, self._iface, self._dscp = log_sync_interval, iface, dscp
        self._procs: dict[str, Proc] = {}
        self._samples: dict[str, list[tuple[float, int]]] = {h: [] for h in slaves}
        self._stop = threading.Event()
        self._poller: threading.Thread | None = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def log(self, host: str) -> Path:
        return self.dir / f"{host}.log"

    def start(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        self._stop.clear()
        address = self.fleet.host(self.master).address
        try:
            self._launch(self.master, MASTER.format(iface=self._iface))
            for h in self.slaves:
                self._launch(h, SLAVE.format(iface=self._iface, master=address))
            time.sleep(0.3)  # a bad config or a missing interface ends ptp4l at once
            for h, p in self._procs.items():
                if p.poll() is not None:
                    said = "; ".join(self.log(h).read_text().strip().splitlines()[-3:]) or "no output"
                    raise ClockfabricError(f"ptp4l on {h} exited ({p.poll()}): {said}")
        except BaseException:
            self.stop()
            raise
        self._poller = threading.Thread(target=self._poll, name="ptp4l-poll", daemon=True)
        self._poller.start()

    def _launch(self, host: str, role: str) -> None:
        conf = self.dir / f"{host}.conf"
        conf.write_text(COMMON.format(sync=self._sync, dscp=self._dscp, uds=self.dir / f"{host}.sock") + role)
        # the fleet's name as an argument marks the process as started for it
        argv = ["ptp4l", "-f", str(conf), "--userDescription", self.fleet.name]
        self._procs[host] = self.fleet.host(host).spawn(argv, log=self.log(host))

    def _poll(self) -> None:
        """Ask each slave for its last offset a few times per Sync; keep each Sync once."""
        socks = {}
        for h in self.slaves:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            client = self.dir / f"{h}.pmc"
            client.unlink(missing_ok=True)
            s.bind(str(client))
            s.settimeout(0.05)
            socks[h] = s
        last = dict.fromkeys(self.slaves, 0)
        seq = 0
        try:
            while not self._stop.wait(max(self.sync_s / 4, 0.005)):
                for h, s in socks.items():
                    seq = (seq + 1) & 0xFFFF
                    try:
                        s.sendto(_request(seq), str(self.dir / f"{h}.sock"))
                        status = _time_status(s.recv(512))
                    except OSError:  # not listening yet, or a slow answer
                        continue
                    if status is None:
                        continue
                    ingress, offset, gm_present = status
                    # before a master is chosen and its first delay measured there is no offset
                    if gm_present and ingress > last[h] and (offset or self._samples[h]):
                        self._samples[h].append((ingress / 1e9, offset))
                        last[h] = ingress
        finally:
            for h, s in socks.items():
                s.close()
                (self.dir / f"{h}.pmc").unlink(missing_ok=True)

    def samples(self) -> dict[str, list[tuple[float, int]]]:
        """Per slave host: (Sync ingress time, CLOCK_REALTIME s; offset to the master, ns)."""
        return {h: list(v) for h, v in self._samples.items()}

    def stop(self) -> None:
        """Stop the poller, then exactly the ptp4l processes this mesh started."""
        self._stop.set()
        if self._poller is not None:
            self._poller.join()
            self._poller = None
        stop(self._procs.values(), grace_s=2.0)
        self._procs.clear()
