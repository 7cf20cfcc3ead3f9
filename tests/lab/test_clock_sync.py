"""Clock sync on a real lab: agents in namespaces, virtual clocks tens of ms apart, judged
against the truth the lab keeps."""

import json
import socket
import time

from clockfabric.errors import USAGE_EXIT
from clockfabric.lab import netns
from clockfabric.topology import leafspine


def _sync(cli, lab, seconds: int, *extra: str) -> dict:
    proc = cli("sync", "--lab", lab.name, "--seconds", str(seconds), "--no-ptp4l", "--json", *extra)
    return json.loads(proc.stdout)


def _wait(read, good, timeout_s: float = 15.0):
    """Poll read() until good(value) or the timeout; the last value either way."""
    deadline = time.monotonic() + timeout_s
    value = None
    while time.monotonic() < deadline:
        try:
            value = read()
        except (OSError, ValueError):
            value = None
        if value is not None and good(value):
            break
        time.sleep(0.2)
    return value


def test_four_hosts_converge_and_measure_one_way_delays(make_lab, cli):
    lab = make_lab(leafspine(4, 2, 2, host_rate="200mbit"))
    truth = lab.clocks()
    spread = max(c.offset_ns for c in truth.values()) - min(c.offset_ns for c in truth.values())
    assert spread > 1_000_000  # the clocks really start milliseconds apart: no sync, no pass

    report = _sync(cli, lab, 20, "--keep")

    # the 10 s target is the benchmark's; here only "it converges", with room for a busy machine
    assert report["converged_s"] is not None and report["converged_s"] < 20, report["timeline"]
    ours = report["methods"]["clockfabric"]
    assert ours["samples"] > 20
    assert ours["p99_ns"] < 2_000, report["methods"]
    assert set(report["hosts"]) == {"h1", "h2", "h3"}  # every host but the reference was judged
    # global time's frame: an ensemble of the idle hosts, every one a member by the end
    frame = report["frame"]
    assert frame["kind"] == "ensemble" and set(frame["members"]) == {"h0", "h1", "h2", "h3"}, frame
    assert 0 < report["frame"]["since_s"] < 20

    owd = json.loads(cli("owd", "--lab", lab.name, "--json").stdout)
    pairs = {(r["src"], r["dst"]) for r in owd["paths"]}
    assert len(pairs) == 12  # 4 hosts probing 3 peers: every ordered pair, both directions
    for r in owd["paths"]:
        # one-way delays through software switches: microseconds, never negative once synced
        assert 0 < r["floor_ns"] <= r["min_ns"] <= r["p50_ns"] <= r["p99_ns"] < 5_000_000, r


def test_agent_survives_garbage_and_strangers(make_lab, cli):
    lab = make_lab(leafspine(3, 1, 1, host_rate="200mbit"))
    topo = lab.topology
    cli("sync", "--lab", lab.name, "--seconds", "4", "--no-ptp4l", "--json", "--keep")
    state_file = lab.dir / "agents" / "h1.json"
    _wait(lambda: json.loads(state_file.read_text())["counters"], lambda c: c)  # it is listening
    target = (str(topo.hosts["h1"].address), 7300)
    with netns.entered(lab.ns("h2")):  # a lab host, so the packets stay inside the lab
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    with s:
        for payload in (b"", b"x", b"CF\x01\x03" + b"\0" * 7, b"CF\x09\x01" + b"\0" * 8, bytes(range(200))):
            s.sendto(payload, target)
    with netns.entered(lab.ns("leaf0")):  # a switch is not a peer: its packets are foreign
        stranger = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    with stranger:
        stranger.sendto(b"CF\x01\x01" + b"\0" * 8, target)
    # the agent publishes its state once a second: every one of them refused by the seal check
    # (garbage, and a stranger without the fleet key), none parsed; the empty datagram is not
    # even a packet to refuse
    rejected = _wait(lambda: json.loads(state_file.read_text())["auth"]["rejected"]["probe"],
                     lambda r: sum(r.values()) >= 5)
    assert sum(rejected.values()) >= 5 and rejected.get("unknown_key", 0) >= 1, rejected
    report = _sync(cli, lab, 12)  # and sync still works afterwards
    assert report["methods"]["clockfabric"]["samples"] > 0


def test_agent_bad_input_is_one_line(cli, tmp_path):
    topo = tmp_path / "t.yaml"
    cli("topology", "generate", "leafspine", "--hosts", "2", "--leaves", "1", "--spines", "0", "-o", str(topo))
    proc = cli("agent", "--topology", str(topo), "--host", "nope", check=False)
    assert proc.returncode == USAGE_EXIT
    assert proc.stderr.strip().count("\n") == 0 and "nope" in proc.stderr
