"""The workload service's packet capture follows its NICs (agent.capture.NicCapture): a NIC set
down, or moved out of the namespace and back (a cable swapped), costs samples, not the agent."""

import errno
import textwrap
from types import SimpleNamespace

import pytest

from clockfabric.agent.capture import NicCapture
from tests.netns import run_in_netns


class FakeSocket:
    def __init__(self, nic: str):
        self.nic = nic

    def getsockname(self):
        return (self.nic, 3, 0, 1, b"\x02\x00\x00\x00\x00\x01")


class FakeCapture:
    """Rings bound to `nics`; `fail` raises from the next drain (once)."""

    made: list["FakeCapture"] = []

    def __init__(self, nics):
        self.rings = [SimpleNamespace(sock=FakeSocket(n)) for n in nics]
        self.kept, self.closed, self.fail, self.ports = 0, False, None, None
        FakeCapture.made.append(self)

    def only(self, ports):
        self.ports = ports

    def dropped(self):
        return 0

    def drain(self):
        if self.fail:
            e, self.fail = self.fail, None
            raise e
        self.kept += 1
        return [("packet", "rx", 1)]

    def close(self):
        self.closed = True


@pytest.fixture(autouse=True)
def fresh():
    FakeCapture.made.clear()


def test_a_failed_read_is_lost_samples_and_the_capture_is_opened_again():
    cap = NicCapture(["eth0", "eth1"], opener=FakeCapture)
    assert cap.drain() == [("packet", "rx", 1)]
    cap.capture.fail = OSError(errno.ENETDOWN, "Network is down")  # a NIC set down
    assert cap.drain() == []
    assert cap.drain() == [("packet", "rx", 1)]
    first, second = FakeCapture.made
    assert first.closed and not second.closed and cap.reopened == 1
    assert cap.kept == 2  # counted over both


def test_a_socket_left_unbound_by_a_nic_that_moved_away_is_opened_again_before_reading():
    cap = NicCapture(["eth0", "eth1"], opener=FakeCapture)
    cap.capture.rings[1].sock.nic = ""  # what the kernel says of a packet socket whose NIC left the namespace
    assert cap.drain() == [("packet", "rx", 1)]
    assert len(FakeCapture.made) == 2 and FakeCapture.made[0].closed and FakeCapture.made[0].kept == 0


def test_a_reopened_capture_keeps_the_filter_asked_for():
    cap = NicCapture(["eth0"], opener=FakeCapture)
    cap.only({(5000, 41000): 6})
    cap.capture.rings[0].sock.nic = ""
    cap.drain()
    assert cap.reopened == 1 and FakeCapture.made[1].ports == {(5000, 41000): 6}


def test_a_nic_not_back_yet_is_tried_at_each_read_and_the_old_capture_kept_till_then():
    state = {"there": True}

    def opener(nics):
        if not state["there"]:
            raise OSError(errno.ENODEV, "No such device")
        return FakeCapture(nics)

    cap = NicCapture(["eth0"], opener=opener)
    cap.capture.rings[0].sock.nic = ""
    state["there"] = False
    assert cap.drain() == [("packet", "rx", 1)] and cap.reopened == 0  # the old one, still read
    assert cap.drain() and cap.reopened == 0
    state["there"] = True
    cap.drain()
    assert cap.reopened == 1 and cap.capture is FakeCapture.made[1] and cap.kept == 3


def test_no_raw_sockets_is_said_at_once():
    def opener(nics):
        raise PermissionError(errno.EPERM, "Operation not permitted")

    with pytest.raises(PermissionError):
        NicCapture(["eth0"], opener=opener)


# the workload service itself, on a real NIC (a veth end named eth0) in a network namespace of its own
SWAP = textwrap.dedent("""
    import json, os, subprocess, time
    from types import SimpleNamespace
    from clockfabric import lldp
    from clockfabric.agent.config import AgentConfig
    from clockfabric.agent.services.workload import Workload
    from clockfabric.topology import leafspine

    def ip(*args, ns=None):
        pre = ["nsenter", f"--net=/proc/{ns}/ns/net"] if ns else []
        subprocess.run([*pre, "ip", *args], check=True)

    ip("link", "add", "eth0", "type", "veth", "peer", "name", "sw0")
    for dev in ("eth0", "sw0"):
        ip("link", "set", dev, "up")
    ctx = SimpleNamespace(cfg=AgentConfig("h0", leafspine(2, 1, 0), "/nonexistent"), rails=["eth0"],
                          addresses={"h0": "10.0.0.1", "h1": "10.0.0.2"}, to_time=lambda ns: (ns, False),
                          on_link_change=[], send=lambda host, msg: None)
    service = Workload(ctx)
    out = {}
    try:
        ip("link", "set", "eth0", "down")
        service.tick(0)  # no failed read ends the service
        ip("link", "set", "eth0", "up")
        service.tick(0)
        out["after_down"] = lldp.bound(service.capture.capture.rings[0].sock, "eth0")
        other = subprocess.Popen(["unshare", "--net", "sleep", "30"])  # another host's namespace
        while os.readlink(f"/proc/{other.pid}/ns/net") == os.readlink("/proc/self/ns/net"):
            time.sleep(0.05)  # until unshare has made it
        ip("link", "set", "eth0", "netns", str(other.pid))  # the cable swapped ...
        service.tick(0)
        ip("link", "set", "eth0", "netns", str(os.getpid()), ns=other.pid)  # ... and put back
        ip("link", "set", "eth0", "up")
        other.kill()
        service.tick(0)
        out["after_move"] = lldp.bound(service.capture.capture.rings[0].sock, "eth0")
        out["reopened"] = service.capture.reopened
    finally:
        service.stop()
    print(json.dumps(out))
""")


def test_the_workload_service_survives_its_nic_set_down_and_follows_it_moved_away_and_back():
    out = run_in_netns(SWAP, tools=("ip", "nsenter"))
    assert out["after_down"] and out["after_move"], out
    assert out["reopened"] >= 1, out  # when the NIC came back: its old ring's socket was left bound to nothing
