"""Workload monitoring on a real lab: a job started with `clockfabric job run` on two hosts, a TCP
transfer between its ranks, and the controller lists the job with both hosts and a flow between
them at a nonzero rate (read by each host's agent from /proc and sock_diag)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from clockfabric.lab.monitoring import LabFleet
from clockfabric.lab.process import stop
from clockfabric.topology import leafspine
from tests.waiting import wait_for

PORT = 5301
RECEIVER = f"""
import socket
srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("0.0.0.0", {PORT})); srv.listen()
conn, _ = srv.accept()
while conn.recv(1 << 16):
    pass
"""
SENDER = """
import socket, sys, time
for _ in range(100):
    try:
        s = socket.socket()
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, b"cubic")  # as the jobs' tests assume
        s.settimeout(2)
        s.connect((sys.argv[1], {port})); s.settimeout(None); break
    except OSError:
        time.sleep(0.2)
chunk = b"x" * 65536
while True:
    s.sendall(chunk)
""".replace("{port}", str(PORT))


def get(fleet, path, **params):
    return fleet.api(path, **params)


@pytest.fixture
def fleet(make_lab):
    lab = make_lab(leafspine(2, 2, 1, host_rate="50mbit"))
    fleet = LabFleet(lab, peers=1)
    fleet.start()
    try:
        fleet.wait_pushing()
        yield fleet
    finally:
        fleet.stop()


def test_a_job_on_two_hosts_and_its_flow_reach_the_controller(fleet):
    lab = fleet.lab
    receiver_host, sender_host = sorted(lab.topology.hosts)
    receiver_address = str(lab.topology.hosts[receiver_host].address)
    job = [sys.executable, "-m", "clockfabric.cli", "job", "run", "--name", "J", "--", sys.executable, "-c"]
    procs = [lab.spawn(receiver_host, [*job, RECEIVER], "job J receiver", log=fleet.logs / "job-receiver.log"),
             lab.spawn(sender_host, [*job, SENDER, receiver_address], "job J sender",
                       log=fleet.logs / "job-sender.log")]
    try:
        def flowing():
            jobs = {j["jobid"]: j for j in get(fleet, "/api/v1/jobs")["items"]}
            if jobs.get("J", {}).get("hosts") != [receiver_host, sender_host]:
                return None
            shown = get(fleet, "/api/v1/jobs/J")
            sent = [f for f in shown["flows"] if f["host"] == sender_host and f["peer"] == receiver_host
                    and (f["tx_bps"] or 0) > 1e6]
            received = [f for f in shown["flows"] if f["host"] == receiver_host and f["peer"] == sender_host
                        and (f["rx_bps"] or 0) > 1e6]
            return (shown, sent[0], received[0]) if sent and received else None

        shown, sent, received = wait_for("job J with a flow between its hosts", flowing, timeout_s=45, every_s=1.0)
        print(f"\n{sent['local']} -> {sent['remote']}: sent {sent['tx_bps'] / 1e6:.1f} Mbit/s, "
              f"rtt {sent['rtt_us']:.0f} us, cwnd {sent['cwnd']:.0f}; received {received['rx_bps'] / 1e6:.1f} Mbit/s")
        assert shown["active"] and shown["source"] == "clockfabric"
        # a flow group's series carry its addresses; its connections' 5-tuples come from the push
        assert sent["remote"] == receiver_address and received["local"] == receiver_address
        assert any(c["flow"].endswith(f":{PORT}") for c in sent["connections"])
        assert any(c["flow"].partition("->")[0].endswith(f":{PORT}") for c in received["connections"])
        assert sent["tx_bps"] < 60e6  # within the 50 Mbit/s link, so it is the rate and not a counter
        cli = [sys.executable, "-m", "clockfabric.cli"]
        listed = json.loads(subprocess.run([*cli, "jobs", "--lab", lab.name, "--json"], capture_output=True,
                                           text=True, check=True).stdout)
        assert [j["hosts"] for j in listed if j["jobid"] == "J"] == [[receiver_host, sender_host]]
        table = subprocess.run([*cli, "job", "show", "J", "--lab", lab.name], capture_output=True, text=True,
                               check=True).stdout
        assert sent["local"] in table and "Mbit/s" in table
    finally:
        stop(procs, grace_s=5.0)
