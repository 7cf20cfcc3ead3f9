"""Heartbeats between two real sockets sets on loopback: wire format, dead paths counted
in rounds (so a stalled sender makes nothing look dead), reports of what the peer hears,
and the TCP flow listing."""

import socket
import struct

import pytest

from clockfabric.auth import seal
from clockfabric.traffic import flows
from clockfabric.traffic.heartbeat import Heartbeat, Liveness

A, B = "127.0.0.1", "127.0.0.2"


def test_wire_round_trip_and_rejects():
    hb = Heartbeat(plane=1, port=3, session=7, seq=2**32 - 1, dead_in=0b1010, nics_down=0b10)
    assert Heartbeat.unpack(hb.pack()) == hb
    assert Heartbeat.unpack(b"nonsense") is None
    assert Heartbeat.unpack(b"XXXX" + hb.pack()[4:]) is None


@pytest.fixture
def pair():
    """Two hosts' heartbeats on loopback: plane 0 only, 2 ports; each 'NIC' is lo."""
    try:
        a = Liveness(A, {"b": B}, {0: "lo"}, ports=2, base_port=47290, session=1)
    except PermissionError:
        pytest.skip("SO_BINDTODEVICE needs CAP_NET_RAW on this kernel")
    b = Liveness(B, {"a": A}, {0: "lo"}, ports=2, base_port=47290, session=2)
    yield a, b
    a.close()
    b.close()


def rounds(sender, receiver, n, *, t0=0.0):
    for i in range(n):
        sender.send(t0 + i, nics_down=0, up={0})
        receiver.tick(t0 + i)


def test_a_quiet_path_is_dead_after_three_rounds_the_others_carried(pair):
    a, b = pair
    rounds(a, b, 3)
    assert b.dead_in("a") == []
    sock = a.socks.pop((0, 1))  # port 1's heartbeats stop
    sock.close()
    for i in range(3):
        a.send(10.0 + i, nics_down=0, up={0})
        b.tick(10.0 + i)
        assert b.dead_in("a") == ([] if i < 2 else [(0, 1)])
    # b tells a: its heartbeats say which of a's paths it hears nothing on
    b.send(20.0, nics_down=0, up={0})
    a.tick(20.0)
    assert a.reports["b"].dead_in == Liveness.bit(0, 1, 2)


def test_a_stalled_sender_makes_nothing_dead_but_turns_silent(pair):
    a, b = pair
    rounds(a, b, 3)
    for t in (5.0, 6.0, 7.0):  # a sends nothing: stalled, or gone
        b.tick(t)
    assert b.dead_in("a") == []
    assert b.silent("a", 7.0) and not b.silent("a", 2.5)  # last heard at 2.0, silent after 1 s
    rounds(a, b, 1, t0=8.0)  # it resumes: all paths fine at once
    assert b.dead_in("a") == [] and not b.silent("a", 8.0)


def test_a_restarted_peer_starts_a_new_session(pair):
    a, b = pair
    rounds(a, b, 2)
    a.session, a.seq = 99, 0  # a new agent run numbers rounds from scratch
    rounds(a, b, 1, t0=5.0)
    assert b.reports["a"].session == 99 and b.dead_in("a") == []


def test_peer_nic_state_travels_in_heartbeats(pair):
    a, b = pair
    a.send(0.0, nics_down=0b1, up={0})
    b.tick(0.0)
    assert b.reports["a"].nics_down == 1


def test_strangers_and_garbage_are_counted_not_trusted(pair):
    _, b = pair
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.3", 0))
        s.sendto(Heartbeat(0, 0, 5, 1, 0, 0).pack(), (B, 47290))  # not a peer
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind((A, 0))
        s.sendto(b"junk", (B, 47290))
    b.tick(0.0)
    assert b.counters["bad_heartbeats"] == 1 and b.reports == {}  # the stranger
    assert b.sealer.rejected == {"short": 1}  # the junk: not even a seal's trailer


def test_flows_parse_proc_net_tcp():
    def hexaddr(ip, port):
        return f"{struct.unpack('<I', socket.inet_aton(ip))[0]:08X}:{port:04X}"

    text = ("  sl  local_address rem_address   st tx_queue rx_queue\n"
            f"   0: {hexaddr('10.0.0.1', 40000)} {hexaddr('10.0.0.5', 7270)} 01 00000000:00000000\n"
            f"   1: {hexaddr('10.0.0.1', 7270)} {hexaddr('0.0.0.0', 0)} 0A 00000000:00000000\n"
            f"   2: {hexaddr('10.0.0.1', 40001)} {hexaddr('10.0.0.6', 7270)} 01 00000000:00000000\n")
    assert flows.parse(text) == [("10.0.0.1", 40000, "10.0.0.5", 7270), ("10.0.0.1", 40001, "10.0.0.6", 7270)]


def test_place_puts_each_path_on_a_spine_of_its_own():
    """Traced spines per source port in, a sender per path out, and heartbeats really leave from it."""
    try:
        a = Liveness(A, {"b": B}, {0: "lo"}, ports=2, base_port=47290, session=1, senders=3)
    except PermissionError:
        pytest.skip("SO_BINDTODEVICE needs CAP_NET_RAW on this kernel")
    b1 = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    b1.bind((B, 47291))  # where b hears path 1
    b1.settimeout(2)
    try:
        assert a.candidates(0) == [47290, 47291, 47292, 47293, 47294]
        # as chance had it, both paths' own ports hash onto s0
        hops = {0: {47290: "s0", 47291: "s0", 47292: "s1", 47293: None, 47294: "s1"},
                1: {47290: "s0", 47291: "s0", 47292: "s0", 47293: "s1", 47294: "s0"}}
        assert a.place("b", 0, hops) == {0: "s0", 1: "s1"}
        assert a.via == {("b", 0, 0): 0, ("b", 0, 1): 3}  # path 0 keeps its own socket
        a.send(0.0, nics_down=0, up={0})
        data, (_, sport) = b1.recvfrom(512)
        assert sport == 47293 and Heartbeat.unpack(data[:-seal.OVERHEAD]).port == 1
        # nothing answered (a peer under our own leaf): every path stays on its own socket
        assert a.place("b", 0, {0: {47290: None}, 1: {}}) == {0: None, 1: None}
        assert a.via == {("b", 0, 0): 0, ("b", 0, 1): 1}
    finally:
        a.close()
        b1.close()
