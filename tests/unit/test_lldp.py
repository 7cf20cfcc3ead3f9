"""LLDP frames (clockfabric.lldp): build, parse, and, as root, a real round trip over a veth pair."""

import struct
import textwrap

import pytest

from clockfabric import lldp
from tests.netns import run_in_netns

MAC = bytes.fromhex("02aabbccddee")


def tlv(kind: int, value: bytes) -> bytes:
    """Built by hand, not with lldp._tlv, so a mistake there cannot hide in both sides."""
    return struct.pack("!H", (kind << 9) | len(value)) + value


def ether(body: bytes, ethertype: int = 0x88CC) -> bytes:
    return lldp.MULTICAST + MAC + struct.pack("!H", ethertype) + body


def test_frame_parse_round_trip():
    data = lldp.frame(MAC, "p0-leaf1", "swp7", system="p0-leaf1.dc", description="h3:eth0 uplink", ttl=90)
    assert data[:6] == bytes.fromhex("0180c200000e")  # nearest-bridge multicast
    assert data[6:12] == MAC
    assert data[12:14] == b"\x88\xcc"
    assert data[-2:] == b"\x00\x00"  # End of LLDPDU
    assert lldp.parse(data) == {"chassis": "p0-leaf1", "port": "swp7", "ttl": 90,
                                "port_description": "h3:eth0 uplink", "system": "p0-leaf1.dc"}


def test_frame_without_optional_tlvs():
    assert lldp.parse(lldp.frame(MAC, "leaf0", "swp1")) == {"chassis": "leaf0", "port": "swp1", "ttl": 120}


def test_frame_tlv_layout_matches_the_standard():
    """Chassis id (type 1) with subtype 7 'locally assigned', port id (type 2) with subtype 5 'interface name'."""
    data = lldp.frame(MAC, "leaf0", "swp12")
    body = data[14:]
    assert body.startswith(tlv(1, b"\x07leaf0") + tlv(2, b"\x05swp12") + tlv(3, struct.pack("!H", 120)))


def test_parse_non_ascii_names():
    data = lldp.frame(MAC, "blatt-ü", "port-ß", system="schalter")
    assert lldp.parse(data)["chassis"] == "blatt-ü"
    assert lldp.parse(data)["port"] == "port-ß"


def test_parse_mac_address_chassis_id():
    """What most real switches send: chassis id subtype 4 (MAC address), port id subtype 5 (name)."""
    body = (tlv(1, b"\x04" + bytes.fromhex("0c42a1b2c3d4")) + tlv(2, b"\x05Ethernet12")
            + tlv(3, struct.pack("!H", 120)) + tlv(5, b"leaf07") + tlv(0, b""))
    got = lldp.parse(ether(body))
    assert got == {"chassis": "0c:42:a1:b2:c3:d4", "port": "Ethernet12", "ttl": 120, "system": "leaf07"}


def test_parse_mac_address_port_id():
    body = tlv(1, b"\x07leaf0") + tlv(2, b"\x03" + bytes.fromhex("020000000007")) + tlv(0, b"")
    assert lldp.parse(ether(body))["port"] == "02:00:00:00:00:07"


def test_a_mac_port_id_is_named_by_its_description():
    """lldpd on a Linux machine announces its MAC as port id and the interface name as description:
    the neighbour is named by the name, as a switch's LLDP table names it (topology/switch_table.py)."""
    body = (tlv(1, b"\x04" + bytes.fromhex("0c42a1b2c3d4")) + tlv(2, b"\x03" + bytes.fromhex("020000000007"))
            + tlv(4, b"eth0") + tlv(5, b"gpu-3") + tlv(0, b""))
    assert lldp.neighbour_name(lldp.parse(ether(body))) == "gpu-3:eth0"
    assert lldp.neighbour_name({"chassis": "leaf0", "port": "02:00:00:00:00:07"}) == "leaf0:02:00:00:00:00:07"
    assert lldp.neighbour_name({"chassis": "leaf0", "port": "swp1", "port_description": "to h1"}) == "leaf0:swp1"


def test_parse_skips_unknown_tlvs():
    """Organisationally specific (127) and management address (8) TLVs are stepped over."""
    body = (tlv(1, b"\x07leaf0") + tlv(2, b"\x05swp1") + tlv(3, b"\x00\x78")
            + tlv(127, b"\x00\x80\xc2\x01\x00\x01") + tlv(8, b"\x05\x01\x0a\x00\x00\x01\x02\x00\x00\x00\x01\x00")
            + tlv(5, b"leaf0") + tlv(0, b""))
    assert lldp.parse(ether(body)) == {"chassis": "leaf0", "port": "swp1", "ttl": 120, "system": "leaf0"}


def test_parse_stops_at_end_tlv():
    body = tlv(1, b"\x07leaf0") + tlv(2, b"\x05swp1") + tlv(0, b"") + tlv(5, b"after-the-end")
    assert "system" not in lldp.parse(ether(body))


@pytest.mark.parametrize("data", [
    b"",
    b"\x01\x80\xc2",
    bytes(13),
    bytes(64),  # ethertype 0
    ether(tlv(1, b"\x07leaf0") + tlv(2, b"\x05swp1"), ethertype=0x0800),  # LLDP TLVs, but an IPv4 frame
    ether(tlv(1, b"\x07leaf0") + tlv(2, b"\x05swp1"), ethertype=0x8100),  # VLAN tag in front
    bytes(range(256)) * 4,
])
def test_garbage_and_other_ethertypes_are_not_lldp(data):
    assert lldp.parse(data) is None


def test_lldp_without_chassis_or_port_is_no_neighbour():
    assert lldp.parse(ether(tlv(1, b"\x07leaf0") + tlv(3, b"\x00\x78") + tlv(0, b""))) is None
    assert lldp.parse(ether(tlv(2, b"\x05swp1") + tlv(0, b""))) is None
    assert lldp.parse(ether(tlv(1, b"") + tlv(2, b"") + tlv(0, b""))) is None  # empty ids


def test_every_truncation_of_a_frame_parses_without_raising():
    full = lldp.frame(MAC, "p1-leaf0", "swp3", system="p1-leaf0", description="cable 17", ttl=60)
    seen_partial = False
    for n in range(len(full) + 1):
        got = lldp.parse(full[:n])
        assert got is None or {"chassis", "port"} <= set(got)
        if got is not None and got != lldp.parse(full):
            seen_partial = True
            assert got["chassis"] == "p1-leaf0" and got["port"] == "swp3"
    assert seen_partial  # cut inside the optional TLVs: what came before still counts


def test_tlv_claiming_more_than_the_frame_holds():
    body = tlv(1, b"\x07leaf0") + tlv(2, b"\x05swp1") + struct.pack("!H", (5 << 9) | 300) + b"short"
    assert lldp.parse(ether(body)) == {"chassis": "leaf0", "port": "swp1"}
    body = tlv(1, b"\x07leaf0") + struct.pack("!H", (2 << 9) | 40) + b"\x05sw"
    assert lldp.parse(ether(body)) is None


def test_ttl_of_wrong_length_is_ignored():
    body = tlv(1, b"\x07leaf0") + tlv(2, b"\x05swp1") + tlv(3, b"\x00") + tlv(0, b"")
    assert lldp.parse(ether(body)) == {"chassis": "leaf0", "port": "swp1"}


def test_long_system_name_is_cut_to_255_bytes():
    data = lldp.frame(MAC, "leaf0", "swp1", system="s" * 600, description="d" * 600)
    got = lldp.parse(data)
    assert got["system"] == "s" * 255 and got["port_description"] == "d" * 255
    assert len(data) <= lldp.MAX_FRAME


def test_listen_on_missing_interfaces_hears_nothing_quickly():
    import time

    t0 = time.monotonic()
    assert lldp.listen(["cf-no-such0", "cf-no-such1"], 5.0) == {"cf-no-such0": None, "cf-no-such1": None}
    assert time.monotonic() - t0 < 1.0  # no socket to wait on: no wait


# ---- a real round trip (root only): a veth pair in a throwaway network namespace ----------------

ROUND_TRIP = textwrap.dedent("""
    import json, socket, subprocess, threading, time
    from clockfabric import lldp

    subprocess.run(["ip", "link", "add", "cfl-a", "type", "veth", "peer", "name", "cfl-b"], check=True)
    for dev in ("cfl-a", "cfl-b"):
        subprocess.run(["ip", "link", "set", dev, "up"], check=True)
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
    s.bind(("cfl-a", 0))
    frame = lldp.frame(s.getsockname()[4], "p0-leaf3", "swp9", system="p0-leaf3", description="to h5:eth0")
    done = threading.Event()

    def speak():
        while not done.is_set():
            try:
                s.send(frame)
            except OSError:
                pass
            done.wait(0.05)

    t = threading.Thread(target=speak, daemon=True)
    t.start()
    heard = lldp.listen(["cfl-b", "cfl-missing"], 5.0)
    done.set()
    t.join()
    print(json.dumps(heard))
""")


def test_listen_hears_a_frame_over_a_veth_pair():
    heard = run_in_netns(ROUND_TRIP, timeout_s=20)
    assert heard["cfl-b"] == {"chassis": "p0-leaf3", "port": "swp9", "ttl": 120, "port_description": "to h5:eth0",
                              "system": "p0-leaf3"}
    assert heard["cfl-missing"] is None


RECABLE = textwrap.dedent("""
    import json, subprocess, time
    from clockfabric import lldp

    def pair():
        subprocess.run(["ip", "link", "add", "cfl-a", "type", "veth", "peer", "name", "cfl-b"], check=True)
        for dev in ("cfl-a", "cfl-b"):
            subprocess.run(["ip", "link", "set", dev, "up"], check=True)

    def heard_within(neighbours, seconds):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if seen := neighbours.poll()["cfl-b"]:
                return seen
            time.sleep(0.05)
        return None

    pair()
    announcer = lldp.Announcer(0.1, reopen=True)
    announcer.add("cfl-a", "leaf0", "swp1", system="leaf0")
    announcer.start()
    neighbours = lldp.Neighbours(["cfl-b"])
    out = {"first": heard_within(neighbours, 5)}
    subprocess.run(["ip", "link", "del", "cfl-a"], check=True)  # both ends go: a cable pulled ...
    out["gone"] = neighbours.poll()["cfl-b"]
    pair()  # ... and new NICs of the same names: both sides must open them again
    out["again"] = heard_within(neighbours, 5)
    announcer.stop()
    neighbours.close()
    print(json.dumps(out))
""")


def test_announcer_and_neighbours_follow_a_nic_that_was_replaced():
    assert run_in_netns(RECABLE) == {"first": "leaf0:swp1", "gone": None, "again": "leaf0:swp1"}
