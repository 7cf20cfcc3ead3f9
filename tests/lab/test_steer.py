"""Transparent mode on a real dual-plane lab: the agent moves one TCP flow off a congested plane.

Lab: 3 hosts under one leaf per plane, 25 Mbit/s links. A TCP stream h0 -> h1 between the hosts'
stable addresses, with a source port the host's multipath route hashes onto plane 0; then
elephants h2 -> h1 pinned to plane 0 (bound to the plane-0 NIC addresses) share h1's plane-0
port with it. The agents (--steer) see the queue on plane 0 toward h1 from the heartbeats, and
h0's agent moves the stream alone to plane 1 with a per-flow rule: the connection carries on,
and its bytes leave by h0's plane-1 NIC. The rule outlives the agent (fail-static), and the
flow stays on plane 1 with no agent running.
"""

from __future__ import annotations

import json
import subprocess
import time

from clockfabric.clock.evaluate import read_states
from clockfabric.lab.agents import LabAgents
from clockfabric.lab.exec import command
from clockfabric.lab.traffic import iperf_server
from clockfabric.topology import Port, interfaces, multirail
from tests.waiting import wait_for

STREAM_S = 24
PORT, ELEPHANT_PORT = 5201, 5202


def sh(lab, host, cmd: str) -> str:
    return subprocess.run(command(lab, host, ["sh", "-c", cmd]), capture_output=True, text=True, check=False).stdout


def tx_bytes(lab, host) -> dict[str, int]:
    return {nic: int(sh(lab, host, f"cat /sys/class/net/{nic}/statistics/tx_bytes")) for nic in ("eth0", "eth1")}


def test_a_flow_on_a_congested_plane_is_moved_to_the_quiet_one_without_breaking(make_lab):
    lab = make_lab(multirail(3, 2, 1, 0, host_rate="25mbit"))
    topo = lab.topology
    a, b = str(topo.hosts["h0"].address), str(topo.hosts["h1"].address)

    def nic(host, plane):
        return str(interfaces(topo)[Port(host, f"eth{plane}")].address.ip)

    cport = next(p for p in range(41000, 41200)
                 if "dev eth0" in sh(lab, "h0", f"ip route get {b} from {a} ipproto tcp sport {p} dport {PORT}"))
    agents = LabAgents(lab, peers=2, extra=["--metrics-port", "0", "--steer"])
    procs: list[subprocess.Popen] = []
    try:
        agents.start()
        agents.wait_heartbeats(timeout_s=60)
        for address, port in ((b, PORT), (nic("h1", 0), ELEPHANT_PORT)):
            procs.append(iperf_server(lab, "h1", address, port))
        stream = subprocess.Popen(command(lab, "h0", ["iperf3", "-c", b, "-B", a, "-p", str(PORT), "--cport",
                                                      str(cport), "-t", str(STREAM_S), "-J"]),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        procs.append(stream)
        time.sleep(3)
        assert tx_bytes(lab, "h0")["eth0"] > 4_000_000, "the stream is not on plane 0"
        procs.append(subprocess.Popen(command(lab, "h2", ["iperf3", "-c", nic("h1", 0), "-B", nic("h2", 0), "-p",
                                                          str(ELEPHANT_PORT), "-P", "2", "-t", str(STREAM_S - 6)]),
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))

        rule = wait_for("h0's agent to steer the stream",
                        lambda: next((ln for ln in sh(lab, "h0", "ip rule show").splitlines()
                                      if f"sport {cport} " in ln), None), timeout_s=15, every_s=0.2)
        assert "lookup 19901" in rule and "proto 199" in rule and f"to {b}" in rule, rule
        time.sleep(1.0)  # the stream's queued segments leave
        before = tx_bytes(lab, "h0")
        time.sleep(3.0)
        after = tx_bytes(lab, "h0")
        moved = after["eth1"] - before["eth1"]
        stayed = after["eth0"] - before["eth0"]
        assert moved > 4_000_000 and stayed < moved / 10, (moved, stayed)

        agents.stop()  # fail-static: the rule outlives the agent, and the flow stays on plane 1
        time.sleep(0.5)
        assert f"sport {cport} " in sh(lab, "h0", "ip rule show")
        before = tx_bytes(lab, "h0")
        time.sleep(2.0)
        assert tx_bytes(lab, "h0")["eth1"] - before["eth1"] > 2_000_000

        out, _ = stream.communicate(timeout=STREAM_S + 30)
        result = json.loads(out)
        assert "error" not in result, result["error"]
        per_second = [i["sum"]["bytes"] for i in result["intervals"]]
        assert len(per_second) >= STREAM_S - 1 and min(per_second) > 0, per_second  # it never stopped

        decisions = read_states(agents.state_dir)["h0"]["failover"]["decisions"]
        steered = [d for d in decisions if d["kind"] == "steered"]
        assert steered and steered[0]["flow"] == f"{a}:{cport}->{b}:{PORT}" and steered[0]["planes"] == [1]
        assert steered[0]["origin"] == 0
    finally:
        agents.stop()
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
