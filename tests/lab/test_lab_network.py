"""The lab is a real network: addresses, ECMP routing, every plane and every path."""

import json
import subprocess
import time

from clockfabric.lab import check, inspect, netns
from clockfabric.topology import Port, interfaces, leafspine, multirail


def ping(lab, src: str, address: str) -> bool:
    proc = subprocess.run(["ip", "netns", "exec", lab.ns(src), "ping", "-c", "1", "-W", "2", address],
                          capture_output=True)
    return proc.returncode == 0


def wait_for_oper(lab, node: str, iface: str, wanted: tuple[str, ...], timeout: float = 3.0) -> dict:
    """The kernel's linkwatch reports carrier changes within about a second."""
    deadline = time.monotonic() + timeout
    while True:
        state = inspect.port_states(lab)[(node, iface)]
        if state["oper"] in wanted or time.monotonic() > deadline:
            return state
        time.sleep(0.05)


def test_leafspine_every_pair_and_every_spine_path(make_lab):
    lab = make_lab(leafspine(6, 2, 3))
    results = check.check(lab)
    assert all(r.ok for r in results), [r.as_dict() for r in results if not r.ok]
    cross = [r for r in results if r.src == "h0" and r.dst == "h5"][0]
    assert len(cross.seen) == 3  # one path through each spine, each seen hop by hop
    assert {p[1] for p in cross.seen} == {"spine0", "spine1", "spine2"}
    assert ping(lab, "h0", "10.0.0.6")


def test_multirail_each_plane_reaches_every_host(make_lab, cli):
    lab = make_lab(multirail(4, 2, 2, 2))
    report = json.loads(cli("lab", "check", "--lab", lab.name, "--json").stdout)
    assert report["ok"] and report["pairs"] == 4 * 3 * 2
    assert {r["plane"] for r in report["results"]} == {0, 1}
    # each plane's own addresses are reached out of that plane's NIC, both ways on that plane
    ifaces = interfaces(lab.topology)
    for nic in ("eth0", "eth1"):
        peer = str(ifaces[Port("h3", nic)].address.ip)
        proc = subprocess.run(["ip", "netns", "exec", lab.ns("h0"), "ping", "-c", "1", "-W", "2", "-I", nic, peer],
                              capture_output=True)
        assert proc.returncode == 0, proc.stdout


def test_lab_touches_only_its_own_namespaces(make_lab):
    lab = make_lab(multirail(2, 2, 1, 0))
    assert netns.listed(f"cf.{lab.name}.") == sorted(lab.ns(n) for n in lab.topology.nodes())
    ports = inspect.port_states(lab)
    assert len(ports) == 2 * len(lab.topology.links)  # both ends of every cable, nothing else


def test_link_down_fails_exactly_the_paths_that_use_it(make_lab, cli):
    lab = make_lab(multirail(4, 2, 2, 2))
    cli("lab", "link", "down", "p0-leaf0", "p0-spine1", "--lab", lab.name)
    proc = cli("lab", "check", "--lab", lab.name, "--json", check=False)
    assert proc.returncode == 1
    bad = [r for r in json.loads(proc.stdout)["results"] if not r["ok"]]
    # only plane-0 pairs across leaves lose a path, and only the one through spine1
    assert bad and all(r["plane"] == 0 for r in bad)
    assert all(r["missing"] and all("p0-spine1" in p for p in r["missing"]) for r in bad)
    assert all(r["delivered"] for r in bad)  # ECMP moved their traffic to spine0
    # the fabric converged like BGP would: no flow from leaf1 is sent into the dead spine1 path
    routes = subprocess.run(["ip", "netns", "exec", lab.ns("p0-leaf1"), "ip", "route", "show", "10.0.0.1"],
                            capture_output=True, text=True).stdout
    via = {s: lab.topology.find_link("p0-leaf1", s).port("p0-leaf1").iface for s in ("p0-spine0", "p0-spine1")}
    assert f"dev {via['p0-spine0']} " in routes and f"dev {via['p0-spine1']} " not in routes, routes
    assert ping(lab, "h3", "10.0.0.1") and ping(lab, "h0", "10.0.0.4")
    cli("lab", "link", "up", "p0-leaf0", "p0-spine1", "--lab", lab.name)
    assert json.loads(cli("lab", "check", "--lab", lab.name, "--json").stdout)["ok"]


def test_host_link_down_is_carrier_loss_on_the_host(make_lab, cli):
    lab = make_lab(multirail(4, 2, 2, 2))
    before = inspect.port_states(lab)[("h0", "eth0")]
    cli("lab", "link", "down", "h0", "p0-leaf0", "--lab", lab.name)
    during = wait_for_oper(lab, "h0", "eth0", ("down", "lowerlayerdown"))
    assert during["admin_up"], "the host's own configuration must stay untouched"
    assert during["carrier_changes"] > before["carrier_changes"]
    report = json.loads(cli("lab", "check", "--lab", lab.name, "--json", check=False).stdout)
    plane0_from_h0 = [r for r in report["results"] if r["src"] == "h0" and r["plane"] == 0]
    plane1_from_h0 = [r for r in report["results"] if r["src"] == "h0" and r["plane"] == 1]
    assert not any(r["delivered"] for r in plane0_from_h0)
    assert all(r["ok"] for r in plane1_from_h0)  # the other plane still carries h0
    # (replies that h3 hashes onto plane 0 are lost: steering them off is the agent's job)
    cli("lab", "link", "up", "h0", "p0-leaf0", "--lab", lab.name)
    assert wait_for_oper(lab, "h0", "eth0", ("up",))["oper"] == "up"
    assert json.loads(cli("lab", "check", "--lab", lab.name, "--json").stdout)["ok"]


def test_jumbo_frames_cross_the_fabric_and_buffers_hold_bytes(make_lab):
    lab = make_lab(leafspine(4, 2, 1, mtu=9000, buffer=10))

    def df_ping(size: int) -> bool:  # don't fragment: the packet crosses whole or not at all
        return subprocess.run(["ip", "netns", "exec", lab.ns("h0"), "ping", "-c", "1", "-W", "2", "-M", "do",
                               "-s", str(size), "10.0.0.4"], capture_output=True).returncode == 0

    assert df_ping(9000 - 28)  # h0 -> leaf0 -> spine0 -> leaf1 -> h3, IP and ICMP headers included
    assert not df_ping(9000 - 27)
    for node, iface in (("h0", "eth0"), ("leaf0", "swp3")):
        qdiscs = json.loads(subprocess.run(["tc", "-j", "-n", lab.ns(node), "qdisc", "show", "dev", iface],
                                           capture_output=True, text=True, check=True).stdout)
        fifo = next(q for q in qdiscs if q.get("parent") == "1:1")
        assert (fifo["kind"], fifo["options"]["limit"]) == ("bfifo", 10 * 9014)
