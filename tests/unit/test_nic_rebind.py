"""The probe engine's and the failover heartbeats' sockets follow their NIC to a new device of the
same name (netdev.bind_to_rail; ProbeEngine.rebind, Failover.wake): SO_BINDTODEVICE keeps the old
device's index."""

import textwrap

import pytest

from tests.netns import run_in_netns

# each opens sockets bound to eth0 (`socks`) and says how a link change reaches them (`rebind`)
SUBJECTS = {
    "probe-engine": """
        from clockfabric.probe.engine import ProbeEngine
        engine = ProbeEngine("10.9.0.1", {"h0": "10.9.0.1", "h1": "10.9.0.2"}, ["h1"], rails=["eth0"], ports=2)
        socks = [p.sock for p in engine._paths + engine._reflectors]
        rebind = engine.rebind
    """,
    "failover-heartbeats": """
        from clockfabric.traffic.failover import Failover, Heartbeats
        failover = Failover("10.9.0.1", {"h1": "10.9.0.2"}, {0: "eth0"}, nic_up=lambda nic: None,
                            heartbeats=Heartbeats(interval_s=0.05))
        failover.start()
        socks = list(failover.live.senders.values())

        def rebind():  # as the agent's link watcher does; the failover thread binds them again
            failover.wake()
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                try:
                    if bound() == [socket.if_nametoindex("eth0")]:
                        return
                except OSError:  # no eth0 here now: nothing to wait for
                    pass
                time.sleep(0.05)
    """,
}

SETUP = """
    import json, os, socket, subprocess, time
    from clockfabric.netdev import bound_index

    def ip(*args, ns=None):
        pre = ["nsenter", f"--net=/proc/{ns}/ns/net"] if ns else []
        subprocess.run([*pre, "ip", *args], check=True)

    def plug():
        ip("addr", "add", "10.9.0.1/24", "dev", "eth0")
        ip("link", "set", "eth0", "up")

    bound = lambda: sorted({bound_index(s) for s in socks})
    ip("link", "add", "eth0", "type", "veth", "peer", "name", "sw0")
    ip("link", "set", "sw0", "up")
    plug()
"""

MOVED = """
    out = {"before": bound(), "eth0_before": socket.if_nametoindex("eth0")}
    rebind()
    out["unchanged"] = bound()
    # another host's namespace, whose own device holds eth0's index there: eth0 gets a new one
    other = subprocess.Popen(["unshare", "--net", "sh", "-c",
                              "ip link add d0 type veth peer name d1 && exec sleep 30"])
    deadline = time.monotonic() + 10
    while subprocess.run(["nsenter", f"--net=/proc/{other.pid}/ns/net", "ip", "link", "show", "d1"],
                         capture_output=True).returncode and time.monotonic() < deadline:
        time.sleep(0.05)
    ip("link", "set", "eth0", "netns", str(other.pid))  # the cable moved away ...
    rebind()  # nothing named eth0 here now: nothing to bind to
    ip("link", "set", "eth0", "netns", str(os.getpid()), ns=other.pid)  # ... and back
    other.kill()
    plug()
    out["eth0_after"] = socket.if_nametoindex("eth0")
    out["stale"] = bound()
    rebind()
    out["after"] = bound()
    print(json.dumps(out))
    os._exit(0)  # the sockets and any thread go with the namespace
"""


@pytest.mark.parametrize("subject", sorted(SUBJECTS))
def test_sockets_follow_a_nic_that_came_back_with_another_index(subject):
    script = "".join(textwrap.dedent(part) for part in (SETUP, SUBJECTS[subject], MOVED))
    out = run_in_netns(script, tools=("ip", "nsenter"), timeout_s=60)
    assert out["before"] == out["unchanged"] == [out["eth0_before"]], out
    assert out["eth0_after"] != out["eth0_before"], out  # the premise: the NIC is back under another index
    assert out["stale"] == [out["eth0_before"]], out  # the kernel kept the old index ...
    assert out["after"] == [out["eth0_after"]], out  # ... until bound again
