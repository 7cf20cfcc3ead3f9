"""In-band one-way delays: packet selection (in Python and as the kernel's BPF filter), frame
parsing, matching the two ends' records, per-window stats, the RTT/2 fallback, and the exchange
between two hosts' agents; on a recorded loopback trace and on small built ones."""

from __future__ import annotations

import json
import random
import struct
from pathlib import Path

import pytest

from clockfabric.traffic.steer_decide import FlowKey
from clockfabric.workload import exchange
from clockfabric.workload.flows import FlowRates, SocketReading
from clockfabric.workload.inband import Packet, bpf_program, parse_frame, run_bpf, selected
from clockfabric.workload.monitor import JobFlow, WorkloadView
from clockfabric.workload.owd import FALLBACK, INBAND, RX, TX, Matcher, OwdStats, Record, flow_owd
from clockfabric.workload.owd_monitor import InbandOwd

TRACE = json.loads((Path(__file__).parent / "fixtures" / "inband_lo_trace.json").read_text())["frames"]
A, B = "10.0.0.1", "10.0.0.2"


def frame(seq, payload=100, ip_id=7, proto=6, frag=0, tos=0, ttl=64, src=A, dst=B, sport=40000, dport=5201):
    """An Ethernet + IPv4 + TCP frame (20-byte headers) with `payload` bytes after them."""
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, tos, 40 + payload, ip_id, frag, ttl, proto, 0xBEEF,
                     bytes(map(int, src.split("."))), bytes(map(int, dst.split("."))))
    tcp = struct.pack("!HHIIBBHHH", sport, dport, seq, 0, 5 << 4, 0x18, 1000, 0, 0)
    return b"\0" * 12 + b"\x08\x00" + ip + tcp + b"x" * min(payload, 64)


def selected_seq(start=0, n=1):
    """The first n sequence numbers from `start` that are sampled."""
    out, seq = [], start
    while len(out) < n:
        if selected(seq):
            out.append(seq)
        seq += 1
    return out


def test_about_one_packet_in_sixteen_is_selected_whatever_the_flows_initial_sequence_number():
    rng = random.Random(1)
    for _ in range(5):  # 1448-byte segments from random ISNs: low bits alone would keep 1/8 of flows, or none
        isn = rng.randrange(2**32)
        kept = sum(selected((isn + 1448 * i) % 2**32) for i in range(16000))
        assert 700 < kept < 1300


def test_a_frame_keeps_its_name_through_the_fields_a_hop_changes():
    seq = selected_seq()[0]
    first = parse_frame(frame(seq))
    assert first == Packet(A, 40000, B, 5201, seq, 7)
    assert parse_frame(frame(seq, tos=0xB8, ttl=3)) == first  # DSCP/ECN, TTL (and checksum) differ on the way
    assert parse_frame(frame(seq, ip_id=8)) != first  # a retransmission is another packet


@pytest.mark.parametrize("why,kwargs", [("pure ACK", {"payload": 0}), ("UDP", {"proto": 17}),
                                        ("fragment", {"frag": 5})])
def test_what_is_never_sampled(why, kwargs):
    assert parse_frame(frame(selected_seq()[0], **kwargs)) is None, why


def test_the_kernel_filter_keeps_exactly_what_parse_frame_keeps():
    program = bpf_program()
    rng = random.Random(2)
    frames = [frame(rng.randrange(2**32), payload=rng.choice([0, 1, 1448]), proto=rng.choice([6, 6, 17]),
                    frag=rng.choice([0, 0, 0x4000, 3])) for _ in range(3000)]
    frames += [bytes.fromhex(f["frame"]) for f in TRACE]
    kept = [run_bpf(program, f) > 0 for f in frames]
    assert kept == [parse_frame(f) is not None for f in frames]
    assert 50 < sum(kept) < 400  # some kept, most not: the test is not vacuous
    assert all(0 <= jt < len(program) and 0 <= jf < len(program) for _, jt, jf, _ in program)


def trace_records(offset_ns=0):
    """The recorded trace's sampled packets as records; rx times shifted by offset_ns."""
    out = []
    for f in TRACE:
        if (p := parse_frame(bytes.fromhex(f["frame"]))) is not None:
            out.append(Record(p, f["side"], f["t_ns"] + (offset_ns if f["side"] == RX else 0), True))
    return out


def test_the_recorded_trace_matches_every_sampled_packet_with_a_small_positive_delay():
    records = trace_records()
    m = Matcher()
    assert m.add(records, 0) == len(records) // 2 > 3
    window = m.close_window()
    assert len(window) == 2  # both directions of the one connection
    for stats in window.values():
        assert stats.source == INBAND and 0 <= stats.min_ns <= stats.p50_ns <= stats.p99_ns < 1_000_000
    assert m.close_window() == {}  # a new window starts empty


def test_a_record_waits_for_its_other_half_then_is_forgotten():
    p = Packet(A, 1, B, 2, 100, 1)
    m = Matcher(hold_ns=1000)
    m.add([Record(p, TX, 5_000, True)], now_ns=0)
    m.expire(now_ns=999)
    assert m.add([Record(p, RX, 9_000, True)], now_ns=999) == 1
    m.add([Record(p, TX, 5_000, True)], now_ns=0)
    m.expire(now_ns=1000)
    assert m.add([Record(p, RX, 9_000, True)], now_ns=1000) == 0
    assert m.close_window()[p.tuple4].samples == 1


def test_an_unsynced_end_makes_no_delay_and_the_flow_falls_back_to_rtt_half():
    p = Packet(A, 1, B, 2, 100, 1)
    m = Matcher()
    m.add([Record(p, TX, 5_000, True), Record(p, RX, 1_000, False)], 0)  # a local clock: a false -4 us
    assert m.unsynced == 1
    window = m.close_window()
    assert window == {}
    owd = flow_owd((A, 1, B, 2), window, rtt_us=300)
    assert owd["out"] == OwdStats(150_000, 150_000, 150_000, 0, FALLBACK) and owd["in"].source == FALLBACK
    assert flow_owd((A, 1, B, 2), window, rtt_us=None) == {"out": None, "in": None}


def test_a_reused_port_never_matches_the_old_connections_records():
    old, new = Packet(A, 1, B, 2, 100, 1), Packet(A, 1, B, 2, 9_000_000, 1)  # a new ISN
    m = Matcher()
    m.add([Record(old, TX, 0, True)], 0)
    assert m.add([Record(new, RX, 50_000, True)], 1) == 0


def test_window_percentiles_are_measured_values():
    stats = OwdStats.of(list(range(100, 0, -1)))
    assert (stats.min_ns, stats.p50_ns, stats.p99_ns, stats.samples) == (1, 50, 99, 100)
    assert OwdStats.of([7]).as_dict() == {"min_ns": 7, "p50_ns": 7, "p99_ns": 7, "samples": 1, "source": INBAND}


def view(jobid, local, lport, remote, rport, rtt_us=200):
    reading = SocketReading(FlowKey(local, lport, remote, rport), 1, 1, 0, 0, 0, rtt_us, 10, 0.0)
    return WorkloadView(flows=[JobFlow(jobid, 1, FlowRates(reading, None, None, 0))])


def test_two_hosts_exchange_records_and_each_reports_both_directions():
    hosts = {A: "ha", B: "hb"}
    # host b's clock is 1 ms ahead in real time; its mapping takes it back to global time
    ends = {"ha": InbandOwd("ha", hosts, lambda t: (t, True), window_ns=10),
            "hb": InbandOwd("hb", hosts, lambda t: (t - 1_000_000, True), window_ns=10)}
    views = {"ha": view("J", A, 40000, B, 5201), "hb": view("J", B, 5201, A, 40000)}
    for name, end in ends.items():
        end.flows_changed(views[name])
        end.tick(views[name], 0)  # opens the window
    seqs = selected_seq(n=20)
    for i, seq in enumerate(seqs):  # a->b: 30 us + i us; b->a: 10 us
        ends["ha"].captured([(Packet(A, 40000, B, 5201, seq, i), TX, 1000 * i)], 0)
        ends["hb"].captured([(Packet(A, 40000, B, 5201, seq, i), RX, 1000 * i + 1_030_000 + 1000 * i)], 0)
        ends["hb"].captured([(Packet(B, 5201, A, 40000, seq, i), TX, 1_000_000 + 5000 * i)], 0)
        ends["ha"].captured([(Packet(B, 5201, A, 40000, seq, i), RX, 5000 * i + 10_000)], 0)
    ends["ha"].captured([(Packet("10.9.9.9", 1, A, 2, seqs[0], 0), RX, 0)], 0)  # no job flow: not sent
    sent = {name: end.messages() for name, end in ends.items()}
    assert set(sent["ha"]) == {"hb"} and set(sent["hb"]) == {"ha"}
    assert sum(len(m["r"]) for m in sent["ha"]["hb"]) == 40
    for name, other in (("ha", "hb"), ("hb", "ha")):
        for msg in sent[other][name]:
            ends[name].received(other, exchange.decode(json.loads(json.dumps(msg))), 0)
    for name, end in ends.items():
        end.tick(views[name], 20)
    a_side = ends["ha"].owd[f"{A}:40000->{B}:5201"]
    b_side = ends["hb"].owd[f"{B}:5201->{A}:40000"]
    assert a_side["out"] == b_side["in"] and a_side["in"] == b_side["out"]
    assert (a_side["out"].min_ns, a_side["out"].p99_ns, a_side["out"].samples) == (30_000, 49_000, 20)
    assert (a_side["in"].min_ns, a_side["in"].p50_ns) == (10_000, 10_000)


def test_a_flow_that_ends_mid_window_reports_what_it_had_then_is_gone():
    end = InbandOwd("ha", {B: "hb"}, lambda t: (t, True), window_ns=100)
    live = view("J", A, 40000, B, 5201)
    end.flows_changed(live)
    end.tick(live, 0)
    seq = selected_seq()[0]
    end.received("hb", [Record(Packet(A, 40000, B, 5201, seq, 1), RX, 70_000, True)], 0)
    end.captured([(Packet(A, 40000, B, 5201, seq, 1), TX, 20_000)], 0)
    end.tick(live, 100)  # the window closes with the flow still listed: its one sample counts
    assert end.owd[f"{A}:40000->{B}:5201"]["out"].p50_ns == 50_000
    ended = WorkloadView()
    end.flows_changed(ended)
    end.tick(ended, 200)
    assert end.owd == {}
    end.captured([(Packet(A, 40000, B, 5201, seq, 2), TX, 20_000)], 0)  # its packets are no job's now
    assert end.messages() == {}


def test_a_far_end_on_a_nic_address_is_learnt_from_its_records():
    end = InbandOwd("ha", {B: "hb"}, lambda t: (t, True), window_ns=100)
    nic = "10.1.0.2"  # the peer's NIC address: no host's address
    end.flows_changed(view("J", A, 40000, nic, 5201))
    assert end.peers == {}
    end.received("hb", [Record(Packet(A, 40000, nic, 5201, 1, 1), RX, 0, True)], 0)
    end.flows_changed(view("J", A, 40000, nic, 5201))
    assert set(end.peers.values()) == {"hb"}


@pytest.mark.parametrize("msg", [{"t": "inband", "from": "h", "r": [[A, 1, B, 2, 3, 4, "sideways", 5, 1]]},
                                 {"t": "inband", "from": "h", "r": [[A, 1, B]]}, {"t": "inband", "from": "h"}])
def test_a_malformed_message_is_an_error_the_router_counts(msg):
    with pytest.raises((ValueError, KeyError, TypeError)):
        exchange.decode(msg)


def test_messages_are_chunked_to_fit_a_datagram():
    records = [Record(Packet(A, 1, B, 2, i, i), TX, i, True) for i in range(exchange.CHUNK * 2 + 1)]
    msgs = exchange.encode("ha", records)
    assert [len(m["r"]) for m in msgs] == [exchange.CHUNK, exchange.CHUNK, 1]
    assert max(len(json.dumps(m)) for m in msgs) < 30_000
    assert [r for m in msgs for r in exchange.decode(m)] == records


def test_flows_between_two_nics_have_peers_from_the_address_plan():
    """Ranks bound to their rails name each other by NIC address at both ends: neither end has a
    record to learn the other from, so each agent knows every host's NIC addresses up front."""
    from clockfabric.topology import host_of_address, interfaces, multirail

    topo = multirail(4, 2, 2, 2)
    nic = {(p.node, p.iface): str(i.address.ip) for p, i in interfaces(topo).items() if p.node in topo.hosts}
    known = host_of_address(topo)
    assert known[str(topo.hosts["h2"].address)] == "h2" and known[nic[("h2", "eth1")]] == "h2"
    assert len(known) == 4 * 3  # a stable address and two NICs a host
    end = InbandOwd("h0", known, lambda t: (t, True), window_ns=100)
    end.flows_changed(view("J", nic[("h0", "eth1")], 40000, nic[("h2", "eth1")], 5201))
    assert set(end.peers.values()) == {"h2"}
