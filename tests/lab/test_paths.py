"""Path discovery on a real ECMP lab: the ports learned by probing are the ports real TCP flows hash onto.

leafspine(4, 2, 2): h0, h1 under leaf0; h2, h3 under leaf1; leaf0 and leaf1 both cabled to spine0 and spine1.
"""

import json
import socket
import threading

import pytest

from clockfabric.errors import USAGE_EXIT
from clockfabric.lab import netns
from clockfabric.probe.paths import learn, spread
from clockfabric.topology import interfaces, leafspine, multirail
from tests.conftest import lab_capable

reason = lab_capable()
pytestmark = [pytest.mark.lab, pytest.mark.skipif(reason is not None, reason=reason or "")]

DPORT = 20100
SIZE = 2 << 20


def tx_bytes(lab, node: str, iface: str) -> int:
    with netns.ipr(lab.ns(node)) as ipr:
        link = ipr.link("get", ifname=iface)[0]
    return link.get("IFLA_STATS64")["tx_bytes"]


def send_through(lab, src: str, sport: int, dst: str) -> int:
    """A real TCP connection src:sport -> dst:DPORT carrying SIZE bytes; the bytes the far end got."""
    topo = lab.topology
    a, b = str(topo.hosts[src].address), str(topo.hosts[dst].address)
    with netns.entered(lab.ns(dst)):
        listener = socket.create_server((b, DPORT))
    with netns.entered(lab.ns(src)):
        client = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    got = []

    def receive():
        try:
            conn, _ = listener.accept()
        except OSError:  # closed: the client never connected
            return
        with conn:
            n = 0
            while chunk := conn.recv(1 << 16):
                n += len(chunk)
            got.append(n)

    server = threading.Thread(target=receive)
    server.start()
    try:
        client.bind((a, sport))
        client.settimeout(30)
        client.connect((b, DPORT))
        client.sendall(b"x" * SIZE)
        client.shutdown(socket.SHUT_WR)
        server.join(30)
    finally:
        client.close()
        listener.close()
    return got[0]


def test_learned_port_carries_the_flow_over_its_spine(make_lab):
    lab = make_lab(leafspine(4, 2, 2, host_rate="50mbit"))
    topo = lab.topology
    owner = {str(i.address.ip): i.port.node for i in interfaces(topo).values()}
    h0, h2 = str(topo.hosts["h0"].address), str(topo.hosts["h2"].address)
    with netns.entered(lab.ns("h0")):
        found = learn(h0, h2, DPORT, sports=range(61000, 61016))
        chosen = spread(h0, h2, DPORT, want=8, seed=1)
    assert {owner.get(hop) for hop in found.values()} == {"spine0", "spine1"}, found
    assert {owner[p.hop] for p in chosen} == {"spine0", "spine1"} and len({p.sport for p in chosen}) == 8

    # the data of h0 -> h2 leaves a spine on its cable to leaf1 (the ACKs come back on the other cable)
    down = {s: topo.find_link(s, "leaf1").port(s).iface for s in ("spine0", "spine1")}
    for spine, sport in [(owner[p.hop], p.sport) for p in chosen]:  # 4 ports for each spine
        before = {s: tx_bytes(lab, s, down[s]) for s in down}
        assert send_through(lab, "h0", sport, "h2") == SIZE
        carried = {s: tx_bytes(lab, s, down[s]) - before[s] for s in down}
        other = "spine1" if spine == "spine0" else "spine0"
        print(f"port {sport} learned for {spine}: bytes out of each spine toward leaf1 {carried}")
        # a random port lands on either spine: 8 connections would pass by chance one time in 256
        assert carried[spine] > SIZE and carried[other] < SIZE // 50, carried


def test_same_leaf_is_one_path(make_lab):
    lab = make_lab(leafspine(4, 2, 2, host_rate="50mbit"))
    topo = lab.topology
    h0, h1 = str(topo.hosts["h0"].address), str(topo.hosts["h1"].address)
    with netns.entered(lab.ns("h0")):
        found = learn(h0, h1, DPORT, sports=range(61000, 61008))  # TTL 2 reaches h1 itself: it answers, no switch
        chosen = spread(h0, h1, DPORT, want=3)
    assert set(found.values()) == {None}
    assert [p.hop for p in chosen] == [None] * 3


def test_paths_command_on_each_plane(make_lab, cli):
    lab = make_lab(multirail(4, 2, 2, 2, host_rate="50mbit"))
    for args, plane in ((["--plane", "1"], 1), (["--nic", "eth0"], 0)):
        report = json.loads(cli("paths", "--lab", lab.name, "--from", "h0", "--to", "h3", *args,
                                "--ports", "4", "--json").stdout)
        assert report["plane"] == plane
        assert sorted(r["switch"] for r in report["paths"]) == [f"p{plane}-spine0", f"p{plane}-spine1"]
        assert sorted(len(r["sports"]) for r in report["paths"]) == [2, 2]
    table = cli("paths", "--lab", lab.name, "--from", "h0", "--to", "h1").stdout
    assert "1 distinct path" in table
    bad = cli("paths", "--lab", lab.name, "--from", "h0", "--to", "h9", check=False)
    assert bad.returncode == USAGE_EXIT and "no host 'h9'" in bad.stderr and "Traceback" not in bad.stderr
