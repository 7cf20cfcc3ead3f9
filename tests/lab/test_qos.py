"""QoS on a real lab host: a job's packets leave with its class's DSCP, read off the wire on the
receiving host; the lab's own root qdisc on the host link is left alone (reported unshaped); and
after the agent is killed with SIGKILL and started again without the policy, its marks are gone."""

from __future__ import annotations

import json
import os
import signal
import sys
import time

from clockfabric.clock.evaluate import read_states
from clockfabric.lab import netns, process
from clockfabric.lab.agents import LabAgents
from clockfabric.qos import tc
from clockfabric.topology import leafspine
from tests.waiting import wait_for

PORT = 5331
# the receiver counts the DSCP of every TCP packet to PORT reaching its NIC, into a file
RECEIVER = f"""
import json, os, socket, sys, threading, time
srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("0.0.0.0", {PORT})); srv.listen()
def drain():
    conn, _ = srv.accept()
    while conn.recv(1 << 16):
        pass
threading.Thread(target=drain, daemon=True).start()
raw = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0800)); raw.bind(("eth0", 0))
seen, last = {{}}, 0.0
while True:
    frame = raw.recv(64)
    ihl = (frame[14] & 15) * 4
    if frame[23] == 6 and int.from_bytes(frame[14 + ihl + 2:14 + ihl + 4], "big") == {PORT}:
        seen[frame[15] >> 2] = seen.get(frame[15] >> 2, 0) + 1
    if time.monotonic() - last > 0.1:
        open(sys.argv[1] + ".tmp", "w").write(json.dumps(seen))
        os.replace(sys.argv[1] + ".tmp", sys.argv[1])
        last = time.monotonic()
"""
SENDER = f"""
import socket, sys, time
for _ in range(100):
    try:
        s = socket.create_connection((sys.argv[1], {PORT}), timeout=2); s.settimeout(None); break
    except OSError:
        time.sleep(0.2)
while True:
    s.sendall(b"x" * 65536)
"""


def test_a_jobs_packets_carry_its_class_and_a_killed_agents_marks_go(make_lab):
    lab = make_lab(leafspine(2, 1, 1))
    seen_file, policy_file = lab.dir / "dscp.json", lab.dir / "qos.json"
    policy_file.write_text(json.dumps([{"jobid": "bulk", "class": "critical"}]))
    address = str(lab.topology.hosts["h1"].address)
    receiver = lab.spawn("h1", [sys.executable, "-c", RECEIVER, str(seen_file)], "dscp counter")
    sender = lab.spawn("h0", [sys.executable, "-m", "clockfabric.cli", "job", "run", "--name", "bulk", "--",
                              sys.executable, "-c", SENDER, address], "bulk job")
    agents = LabAgents(lab, peers=1, extra=["--qos-file", str(policy_file)])
    started = time.monotonic()
    agents.start()

    def seen() -> dict[int, int]:
        return {int(k): n for k, n in json.loads(seen_file.read_text()).items()} if seen_file.exists() else {}

    def qos_of(host: str) -> dict:
        return read_states(agents.state_dir).get(host, {}).get("qos", {})

    def marks_on_h0() -> bool:
        with netns.ipr(lab.ns("h0")) as ipr:
            return tc.has_marks(ipr, ipr.link_lookup(ifname="eth0")[0])

    try:
        wait_for("h0's agent marking job bulk",
                 lambda: qos_of("h0").get("jobs", {}).get("bulk", {}).get("marked_packets", 0) > 0, 15)
        before = seen()
        wait_for("critical packets (DSCP 26) at h1", lambda: seen().get(26, 0) > before.get(26, 0) + 100, 5)
        assert qos_of("h0")["links"] == {"eth0": "not shaped: a root qdisc htb 1: that clockfabric did not make"}
        assert 0 < qos_of("h0")["cpu_seconds"] < time.monotonic() - started  # its own cost, timed in the service
        h1 = wait_for("h1's agent publishing", lambda: qos_of("h1"), 10)
        assert h1["jobs"] == {}  # the job's sockets are not on h1: nothing of it marked there

        killed = agents.procs[0]
        os.kill(killed.pid, signal.SIGKILL)
        killed.wait()
        assert marks_on_h0()  # a killed agent cannot clean up: its marks stay until the next one starts
        policy_file.write_text("[]")
        restarted = time.monotonic()
        agents.procs[0] = lab.spawn("h0", agents.argv("h0"), "clock agent on h0", log=agents.log("h0"))
        wait_for("the restarted agent removing the marks",
                 lambda: qos_of("h0").get("cleaned_at_start") == ["eth0"] and not marks_on_h0(), 10)
        print(f"\nmarks gone {time.monotonic() - restarted:.1f} s after the restart")
        after = seen()
        wait_for("unmarked packets at h1 again", lambda: seen().get(0, 0) > after.get(0, 0) + 100, 5)
        assert seen().get(26, 0) - after.get(26, 0) < 50  # what was in flight, at most
    finally:
        agents.stop()
        process.stop([sender, receiver])
