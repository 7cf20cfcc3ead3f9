"""`clockfabric bench transparent`: the elephant flows that load plane 0, and what it watches
of the job meanwhile (its crossing flows' exposure to plane 0, a trace of its busy connections)."""

from __future__ import annotations

import re
import statistics
import subprocess
import threading
import time

from clockfabric.lab import job
from clockfabric.lab.exec import command
from clockfabric.lab.state import Lab
from clockfabric.lab.traffic import iperf_server
from clockfabric.topology import Port, interfaces

ELEPHANT_PORT = 5400  # + pair index


def sh(lab: Lab, host: str, cmd: str) -> str:
    return subprocess.run(command(lab, host, ["sh", "-c", cmd]), capture_output=True, text=True,
                          check=False).stdout


def nic0(lab: Lab, host: str) -> str:
    topo = lab.topology
    return str(interfaces(topo)[Port(host, topo.hosts[host].nic_on(0).name)].address.ip)


class Elephants:
    """iperf3 flows pinned to plane 0 by their NIC addresses, started and stopped by pid."""

    def __init__(self, lab: Lab, pairs: list[tuple[str, str]], streams: int):
        self.lab, self.pairs, self.streams = lab, pairs, streams
        self.procs: list[subprocess.Popen] = []
        self.t0 = 0.0
        self.bytes0: dict[str, int] = {}

    def _tx(self) -> dict[str, int]:
        return {src: int(sh(self.lab, src, "cat /sys/class/net/eth0/statistics/tx_bytes") or 0)
                for src, _ in self.pairs}

    def start(self) -> None:
        for i, (_, dst) in enumerate(self.pairs):
            self.procs.append(iperf_server(self.lab, dst, nic0(self.lab, dst), ELEPHANT_PORT + i))
        for i, (src, dst) in enumerate(self.pairs):
            self.procs.append(subprocess.Popen(
                command(self.lab, src, ["iperf3", "-c", nic0(self.lab, dst), "-B", nic0(self.lab, src),
                                        "-p", str(ELEPHANT_PORT + i), "-P", str(self.streams), "-t", "3600"]),
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        self.t0, self.bytes0 = time.monotonic(), self._tx()

    def mbps(self) -> float:
        """Mean of the elephants' senders since start."""
        now = self._tx()
        dt = time.monotonic() - self.t0
        return round(statistics.mean((now[s] - self.bytes0[s]) * 8 / dt / 1e6 for s in now), 2) if dt > 0 else 0.0

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.wait()
        self.procs.clear()


def exposure(lab: Lab, j: job.Job, leaf_of: dict[str, str]) -> dict:
    """Per leaf-crossing job connection and direction: the plane its data goes on (origin
    for a steered flow). A rule of ours records the origin in its priority (19900 + plane)."""
    addr_host = {str(h.address): name for name, h in lab.topology.hosts.items()}
    planes = {}
    for host, conns in j.connections().items():
        rules = sh(lab, host, "ip rule show")
        for local, peer in conns:
            (lip, lport), (pip, pport) = (c.rsplit(":", 1) for c in (local, peer))
            other = addr_host.get(pip)
            if other is None or leaf_of[other] == leaf_of[host]:
                continue
            m = re.search(rf"^(\d+):.*sport {lport} dport {pport} ", rules, re.MULTILINE)
            if m and 19900 <= int(m.group(1)) < 19964:
                plane: int | None = int(m.group(1)) - 19900
            else:
                route = sh(lab, host, f"ip route get {pip} from {lip} ipproto tcp sport {lport} dport {pport}")
                dev = re.search(r" dev (\S+)", route)
                plane = next((n.plane for n in lab.topology.hosts[host].nics if dev and n.name == dev.group(1)), None)
            planes[f"{host}:{lport}->{other}:{pport}"] = plane
    return {"flows": planes, "on_plane0": sum(p == 0 for p in planes.values()), "of": len(planes)}


class Tracer:
    """Every `every_s`: each job host's busy connections (rate, RTT) and the plane each one's data
    leaves on (a steering rule's table, else a failover /32 route, else the route's own hash)."""

    def __init__(self, lab: Lab, hosts: list[str], every_s: float = 3.0):
        self.lab, self.hosts, self.every_s = lab, hosts, every_s
        self.addr_host = {str(h.address): name for name, h in lab.topology.hosts.items()}
        self.hashed: dict[str, int | None] = {}
        self.last: dict[str, tuple[float, ...]] = {}  # host or flow -> (when, its counters)
        self.samples: list[dict] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.t0 = time.time()

    def _plane(self, host: str, key: str, lip: str, lport: str, pip: str, pport: str, rules: str, pins: str):
        m = re.search(rf"sport {lport} dport {pport} lookup (\d+)", rules)
        if m:
            return int(m.group(1)) - 19900, "rule"
        m = re.search(rf"^{re.escape(pip)} .*dev (\S+)", pins, re.MULTILINE)
        if m:
            return int(m.group(1)[3:]), "failover"
        if key not in self.hashed:
            route = sh(self.lab, host, f"ip route get {pip} from {lip} ipproto tcp sport {lport} dport {pport}")
            dev = re.search(r" dev eth(\d+)", route)
            self.hashed[key] = int(dev.group(1)) if dev else None
        return self.hashed[key], "hash"

    def sample(self) -> None:
        now = time.time()
        row: dict = {"t": round(now - self.t0, 1), "flows": {}}
        for host in self.hosts:
            text = sh(self.lab, host, "ss -tinH state established; echo ===; ip rule show; echo ===; "
                                      "ip route show proto 199; echo ===; cat /sys/class/net/eth0/statistics/tx_bytes "
                                      "/sys/class/net/eth1/statistics/tx_bytes")
            conns, rules, pins, nics = (text.split("===\n") + ["", "", ""])[:4]
            tx = [int(x) for x in nics.split()]
            prev_tx = self.last.get(host)
            self.last[host] = (now, *tx)
            if prev_tx and len(tx) == 2 and now > prev_tx[0]:
                row.setdefault("nic_tx_mbps", {})[host] = [round((b - a) * 8 / (now - prev_tx[0]) / 1e6, 1)
                                                           for a, b in zip(prev_tx[1:], tx, strict=False)]
            for m in re.finditer(r"(\d+\.\d+\.\d+\.\d+):(\d+)\s+(\d+\.\d+\.\d+\.\d+):(\d+)(.*?)(?=\n\S|\Z)",
                                 conns, re.DOTALL):
                lip, lport, pip, pport, info = m.groups()
                other = self.addr_host.get(pip)
                if other is None or other not in self.hosts or lip != str(self.lab.topology.hosts[host].address):
                    continue
                key = f"{host}:{lport}->{other}:{pport}"
                acked = int((re.search(r"bytes_acked:(\d+)", info) or [0, 0])[1])
                received = int((re.search(r"bytes_received:(\d+)", info) or [0, 0])[1])
                rtt = re.search(r" rtt:([\d.]+)", info)
                prev = self.last.get(key)
                self.last[key] = (now, acked, received)
                if prev is None or now <= prev[0]:
                    continue
                out_mbps = (acked - prev[1]) * 8 / (now - prev[0]) / 1e6
                in_mbps = (received - prev[2]) * 8 / (now - prev[0]) / 1e6
                if max(out_mbps, in_mbps) < 0.5:
                    continue
                plane, why = self._plane(host, key, lip, lport, pip, pport, rules, pins)
                row["flows"][key] = {"out": round(out_mbps, 1), "in": round(in_mbps, 1), "plane": plane, "by": why,
                                     "rtt_ms": float(rtt.group(1)) if rtt else None}
        self.samples.append(row)

    def _run(self) -> None:
        while not self.stop.wait(self.every_s):
            self.sample()

    def start(self) -> None:
        self.thread.start()

    def finish(self) -> list[dict]:
        self.stop.set()
        self.thread.join(10)
        return self.samples
