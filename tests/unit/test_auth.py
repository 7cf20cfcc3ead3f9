"""The fleet key: key files, sealing, replay windows, and the probe engine and heartbeats with it."""

from __future__ import annotations

import os
import time

import pytest

from clockfabric.auth import keys, seal
from clockfabric.auth.keys import Keyring, new_key_file, parse
from clockfabric.auth.seal import CONTROL, HEARTBEAT, PROBE, WINDOW, Rejected, ReplayWindow, Sealer
from clockfabric.errors import ClockfabricError
from clockfabric.probe import wire
from clockfabric.traffic.heartbeat import Liveness

A, B = "127.0.0.1", "127.0.0.2"
K1, K2 = "11" * 32, "22" * 32


def ring(text: str = f"1:{K1}") -> Keyring:
    return Keyring(parse(text))


def test_key_file_lines_comments_and_the_newest_signs():
    r = ring(f"# fleet keys\n1:{K1}\n\n7:{K2}\n")
    assert r.ids() == [1, 7]
    assert r.signer() == (7, bytes.fromhex(K2))


@pytest.mark.parametrize("text", ["", "1", f"0:{K1}", f"70000:{K1}", "1:abcd", "1:zz" * 16, f"x:{K1}",
                                  f"1:{K1}\n1:{K2}"])
def test_a_malformed_key_file_is_one_clear_line(text):
    with pytest.raises(ClockfabricError, match="key file|lists no key"):
        parse(text)


def test_new_key_file_is_private_and_loads(tmp_path):
    path = new_key_file(tmp_path / "k" / "fleet.key")
    assert os.stat(path).st_mode & 0o077 == 0
    assert Keyring.load(path).ids() == [1]


def test_a_changed_key_file_is_reloaded_and_a_broken_one_keeps_the_keys(tmp_path, monkeypatch):
    path = tmp_path / "fleet.key"
    path.write_text(f"1:{K1}\n")
    r = Keyring.load(path)
    monkeypatch.setattr(keys, "CHECK_EVERY_S", 0.0)
    path.write_text(f"1:{K1}\n2:{K2}\n")
    os.utime(path, (time.time() + 5, time.time() + 5))
    r.maybe_reload()
    assert r.signer()[0] == 2
    path.write_text("garbage\n")
    os.utime(path, (time.time() + 10, time.time() + 10))
    r.maybe_reload()
    assert r.ids() == [1, 2]


def test_a_sealed_datagram_opens_once_only_between_the_two_hosts_on_its_channel():
    k = ring()
    a, b = Sealer(CONTROL, A, k), Sealer(CONTROL, B, k)
    data, nonce = a.seal(b'{"t":"map"}', B, echo=42)
    opened = b.open(data, A)
    assert (opened.payload, opened.nonce, opened.echo) == (b'{"t":"map"}', nonce, 42)
    with pytest.raises(Rejected, match="replay"):
        b.open(data, A)
    with pytest.raises(Rejected, match="bad_mac"):  # claims another sender
        Sealer(CONTROL, B, k).open(data, "127.0.0.3")
    with pytest.raises(Rejected, match="bad_mac"):  # sent to another host
        Sealer(CONTROL, "127.0.0.3", k).open(data, A)
    with pytest.raises(Rejected, match="bad_mac"):  # another channel
        Sealer(PROBE, B, k).open(data, A)
    assert b.rejected == {"replay": 1}


def test_another_fleets_key_and_an_unknown_key_id_are_rejected():
    data, _ = Sealer(HEARTBEAT, A, ring(f"1:{K2}")).seal(b"x", B)
    with pytest.raises(Rejected, match="bad_mac"):
        Sealer(HEARTBEAT, B, ring()).open(data, A)
    data, _ = Sealer(HEARTBEAT, A, ring(f"3:{K1}")).seal(b"x", B)
    with pytest.raises(Rejected, match="unknown_key"):
        Sealer(HEARTBEAT, B, ring()).open(data, A)


def test_during_a_rotation_both_keys_are_accepted():
    old, both = ring(f"1:{K1}"), ring(f"1:{K1}\n2:{K2}")
    receiver = Sealer(PROBE, B, both)
    for sender in (Sealer(PROBE, A, old), Sealer(PROBE, A, both)):
        receiver.open(sender.seal(b"p", B)[0], A)
    assert not receiver.rejected


def test_insecure_sealers_add_the_trailer_and_check_nothing():
    a, b = Sealer(PROBE, A, None), Sealer(PROBE, B, None)
    data, _ = a.seal(b"p", B)
    assert len(data) == 1 + seal.OVERHEAD
    assert b.open(data, A).payload == b"p" and b.open(data, A).payload == b"p"
    with pytest.raises(Rejected, match="short"):
        b.open(b"p", A)


def test_the_replay_window_takes_reordered_nonces_once_and_refuses_the_too_old():
    w = ReplayWindow()
    for n in (100, 103, 101, 102, 100 + WINDOW):
        assert w.fresh(n)
        w.mark(n)
    assert not any(w.fresh(n) for n in (100 + WINDOW, 103, 101))
    assert not w.fresh(100)  # now older than the window
    assert w.fresh(99 + WINDOW) and w.fresh(5000)  # never seen, inside the window; newer


def test_nonces_grow_across_a_restart():
    first, _ = Sealer(PROBE, A, ring()).seal(b"p", B)
    receiver = Sealer(PROBE, B, ring())
    receiver.open(first, A)
    again, _ = Sealer(PROBE, A, ring()).seal(b"p", B)  # a new run of the sender
    receiver.open(again, A)
    assert not receiver.rejected


def test_senders_and_destinations_remembered_are_bounded(monkeypatch):
    monkeypatch.setattr(seal, "MAX_PEERS", 8)
    a, b = Sealer(PROBE, A, ring()), Sealer(PROBE, B, ring())
    for i in range(20):
        src = f"10.0.0.{i}"
        b.open(Sealer(PROBE, src, ring()).seal(b"p", B)[0], src)
        a.seal(b"p", src)
    assert len(b._windows) == 8 and len(a._counters) == 8


def heartbeat_pair(key_a: Keyring | None, key_b: Keyring | None):
    a = Liveness(A, {"b": B}, {0: "lo"}, ports=2, base_port=47490, session=1, sealer=Sealer(HEARTBEAT, A, key_a))
    try:
        b = Liveness(B, {"a": A}, {0: "lo"}, ports=2, base_port=47490, session=2,
                     sealer=Sealer(HEARTBEAT, B, key_b))
    except OSError:
        a.close()
        raise
    return a, b


@pytest.mark.parametrize("forger", [None, f"1:{K2}"])
def test_heartbeats_from_a_host_without_the_key_are_not_heard(forger):
    a, b = heartbeat_pair(ring(forger) if forger else None, ring())
    try:
        for _ in range(3):
            a.send(time.monotonic(), 0, {0})
        time.sleep(0.05)
        b.tick(time.monotonic())
        assert "a" not in b.reports and b.counters["heartbeats_received"] == 0
        assert sum(b.sealer.rejected.values()) == 6  # three rounds, two paths
    finally:
        a.close()
        b.close()


def test_keyed_heartbeats_are_heard():
    a, b = heartbeat_pair(ring(), ring())
    try:
        a.send(time.monotonic(), 0, {0})
        time.sleep(0.05)
        b.tick(time.monotonic())
        assert b.counters["heartbeats_received"] == 2 and not b.sealer.rejected
    finally:
        a.close()
        b.close()


def test_the_wire_budget_counts_the_seals():
    assert wire.exchange_wire_bytes() == 6 * (wire.IP_UDP_ETH_OVERHEAD + seal.OVERHEAD) + 5 * wire.HEADER_SIZE \
        + wire.REPLY0_SIZE
