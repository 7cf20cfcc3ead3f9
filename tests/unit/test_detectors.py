"""Detectors on hand-made event and sample streams with known answers; config files in and out."""

import pytest

from clockfabric.agent import digest
from clockfabric.controller.config import MonitorConfig, load_config, parse_config
from clockfabric.controller.detectors import DetectorSet
from clockfabric.controller.detectors.base import LinkIndex
from clockfabric.controller.detectors.congestion import localize, orient
from clockfabric.controller.storage.base import Event
from clockfabric.controller.series.sample import Sample
from clockfabric.errors import ClockfabricError
from clockfabric.topology import leafspine

US = 1_000
MS = 1_000_000
S = 1_000_000_000
T0 = 1_790_000_000 * S


@pytest.fixture
def topo():
    # h0,h1 on leaf0; h2,h3 on leaf1; h4,h5 on leaf2; every leaf on spine0 and spine1
    return leafspine(6, 3, 2)


def ev(kind, t_s, host="h0", device="eth0", seq=None):
    t_ns = T0 + round(t_s * S)
    return Event(host=host, seq=seq if seq is not None else t_ns, boot="b1", t_ns=t_ns, kind=kind, device=device)


def owd(src, dst, path, t_s, **stats_us):
    """One report of one path: a sample per stat given, in µs."""
    labels = {"src": src, "dst": dst, "path": path}
    return [Sample(host=src, t_ns=T0 + round(t_s * S), name=f"owd_{stat}_ns", value=v * US, labels=labels)
            for stat, v in stats_us.items()]


def at(t_s):
    return T0 + round(t_s * S)


# ---- link down -------------------------------------------------------------------------------

def test_link_down_names_the_topology_link_and_resolves_on_up(topo):
    d = DetectorSet(MonitorConfig(), topo)
    d.on_events([ev("link_down", 1, host="h2")], at(1))
    active = d.active(at(2))
    f = active["link_down:h2:eth0--leaf1:swp1"]
    assert (f.kind, f.severity) == ("link_down", "critical")
    assert f.detail["link"] == "h2:eth0--leaf1:swp1"
    assert f.detail["ends_down"] == {"h2:eth0": at(1)}
    assert "h2:eth0--leaf1:swp1" in f.message
    d.on_events([ev("link_up", 3, host="h2")], at(3))
    assert d.active(at(4)) == {}


def test_link_down_both_ends_of_one_cable_make_one_alert(topo):
    d = DetectorSet(MonitorConfig(), topo)
    # the switch side reports under the switch's name (the lab, an exporter on the switch)
    d.on_events([ev("link_down", 1, host="leaf1", device="swp4"), ev("link_down", 1.001, host="spine1", device="swp2")],
                at(2))
    (f,) = d.active(at(2)).values()
    assert f.key == "link_down:leaf1:swp4--spine1:swp2"
    assert set(f.detail["ends_down"]) == {"leaf1:swp4", "spine1:swp2"}
    d.on_events([ev("link_up", 3, host="leaf1", device="swp4")], at(3))
    assert list(d.active(at(3))) == ["link_down:leaf1:swp4--spine1:swp2"]  # one end still says down
    d.on_events([ev("link_up", 3, host="spine1", device="swp2")], at(3))
    assert d.active(at(3)) == {}


def test_link_down_late_report_does_not_undo_a_newer_one(topo):
    d = DetectorSet(MonitorConfig(), topo)
    d.on_events([ev("link_up", 5)], at(5))
    d.on_events([ev("link_down", 4)], at(6))  # re-sent from an earlier push
    assert d.active(at(6)) == {}


def test_link_down_from_state_samples_keeps_the_first_down_time(topo):
    d = DetectorSet(MonitorConfig(), topo)  # a restarted controller: no event, only pushes' state
    for t in (1, 2, 3):
        d.on_samples([Sample(host="spine0", t_ns=at(t), name="link_up", value=0.0, labels={"device": "swp3"})], at(t))
    f = d.active(at(3))["link_down:leaf2:swp3--spine0:swp3"]
    assert f.detail["ends_down"] == {"spine0:swp3": at(1)}
    d.on_events([ev("link_up", 3.5, host="spine0", device="swp3")], at(3.5))
    d.on_samples([Sample(host="spine0", t_ns=at(3.2), name="link_up", value=0.0, labels={"device": "swp3"})], at(4))
    assert d.active(at(4)) == {}  # the sample was older than the event


def test_link_down_without_topology_names_the_nic():
    d = DetectorSet(MonitorConfig())
    d.on_events([ev("link_down", 1, host="gpu7", device="ib3"), ev("link_change", 1.5, host="gpu7", device="ib3")],
                at(2))
    (f,) = d.active(at(2)).values()
    assert f.key == "link_down:gpu7:ib3"
    assert f.detail["link"] is None


# ---- flapping --------------------------------------------------------------------------------

def test_flapping_opens_at_count_and_resolves_after_a_quiet_window(topo):
    d = DetectorSet(parse_config({"flapping": {"count": 4, "window": "10s"}}), topo)
    d.on_events([ev("link_down", 0), ev("link_up", 1), ev("link_down", 2)], at(2))
    assert not any(k.startswith("flapping:") for k in d.active(at(2)))  # 3 < 4
    d.on_events([ev("link_up", 4.5)], at(4.5))
    f = d.active(at(5))["flapping:h0:eth0--leaf0:swp1"]
    assert f.detail["transitions"] == 4
    assert f.detail["times_ns"] == [[at(0), "down"], [at(1), "up"], [at(2), "down"], [at(4.5), "up"]]
    assert f.detail["down_durations_ns"] == [1 * S, 2500 * MS]
    assert f.detail["down_since_ns"] is None
    assert f.detail["link"] == "h0:eth0--leaf0:swp1"
    assert "flapping:h0:eth0--leaf0:swp1" in d.active(at(14.4))  # quiet 9.9 s: not yet
    assert d.active(at(14.5)) == {}  # quiet a whole window


def test_flapping_needs_the_transitions_within_one_window(topo):
    d = DetectorSet(parse_config({"flapping": {"count": 3, "window": "10s"}}), topo)
    for t in (0, 6, 12, 18, 24):  # a steady 6 s apart: any 3 span 12 s > 10 s
        d.on_events([ev("link_down" if t % 12 == 0 else "link_up", t)], at(t))
    assert not any(k.startswith("flapping:") for k in d.active(at(24)))


def test_flapping_counts_a_resent_event_once_and_takes_late_ones_in_order(topo):
    d = DetectorSet(parse_config({"flapping": {"count": 3, "window": "10s"}}), topo)
    d.on_events([ev("link_down", 0), ev("link_down", 0)], at(0))
    d.on_events([ev("link_down", 4), ev("link_up", 2)], at(4))  # late and out of order
    f = d.active(at(5))["flapping:h0:eth0--leaf0:swp1"]
    assert [k for _, k in f.detail["times_ns"]] == ["down", "up", "down"]
    assert f.detail["down_durations_ns"] == [2 * S]
    assert f.detail["down_since_ns"] == at(4)
    assert "link_down:h0:eth0--leaf0:swp1" in d.active(at(5))  # and it is down now


def test_flapping_episode_restarts_after_quiet(topo):
    d = DetectorSet(parse_config({"flapping": {"count": 3, "window": "10s"}}), topo)
    d.on_events([ev("link_down", 0), ev("link_up", 1)], at(1))
    d.on_events([ev("link_down", 30)], at(30))  # 2 old + 1 new, but the old episode ended
    assert not any(k.startswith("flapping:") for k in d.active(at(30)))


# ---- congestion ------------------------------------------------------------------------------

def links_of(topo, src, dst, spine):
    """The link names of the path src -> dst through `spine`, in order."""
    (path,) = [p for p in topo.paths(src, dst) if spine in p.nodes]
    return [topo.find_link(a, b).name for a, b in zip(path.nodes, path.nodes[1:])]


def written(d, t, samples, mapped=()):
    """What each host writes at t for the detectors of its paths' delays (agent.digest), as it is
    asked in the push's answer: its report, the paths past the margin, its mapped paths unmeasured."""
    asked = digest.Ask.heard(d.asks())
    mine = {host: [] for host in sorted({s.host for s in samples} | {k[0] for k in mapped})}
    for s in samples:
        mine[s.host].append({"name": s.name, "value": s.value, "labels": s.labels})
    return [Sample(host, at(t), x["name"], x["value"], x["labels"]) for host, own in mine.items()
            for x in digest.queueing(own, host, [k[1:] for k in mapped if k[0] == host], asked)]


def report(d, t, paths, congested, unmeasured=()):
    """Every host's write at t: each path's delays, the congested ones 200 µs above their floor."""
    samples = []
    for src, dst, label in paths:
        if (src, dst, label) not in unmeasured:
            p50 = 300 if (src, dst, label) in congested else 105
            samples += owd(src, dst, label, t, floor=100, min=100, p50=p50, p99=p50 + 50)
    d.on_samples(written(d, t, samples, paths), at(t))


def test_congestion_names_the_shared_link_the_quiet_paths_do_not_use(topo):
    x = "leaf1:swp4--spine1:swp2"  # spine1 -> leaf1
    congested = {("h0", "h2", "via-spine1"), ("h4", "h3", "via-spine1")}
    quiet = {("h0", "h4", "via-spine1"),  # leaf0 -> spine1 is fine
             ("h4", "h0", "via-spine1"),  # leaf2 -> spine1 is fine
             ("h2", "h0", "via-spine1"),  # X the other way, leaf1 -> spine1, is fine
             ("h0", "h2", "via-spine0")}  # h0 -> h2 and leaf1's host link h2 are fine
    mapping = {(s, dst, label): links_of(topo, s, dst, label.removeprefix("via-"))
               for s, dst, label in congested | quiet}
    d = DetectorSet(MonitorConfig(), topo)
    d.set_path_links(mapping)
    report(d, 1, mapping, congested)
    assert not any(k.startswith("congestion") for k in d.active(at(1)))  # 1 window of 2
    report(d, 2, mapping, congested)
    (f,) = [f for k, f in d.active(at(2)).items() if k.startswith("congestion")]
    assert f.key == f"congestion:{x}:spine1>leaf1"
    assert f.detail["links"] == [{"link": x, "direction": "spine1->leaf1"}]
    assert [(p["src"], p["dst"]) for p in f.detail["paths"]] == [("h0", "h2"), ("h4", "h3")]
    assert f.detail["paths"][0]["excess_ns"] == 200 * US
    assert x in f.message and "spine1 -> leaf1" in f.message
    for t in (3, 4):  # the queue drains: two good windows resolve it
        report(d, t, mapping, set())
    assert d.active(at(4)) == {}


def test_a_mapped_path_no_link_explains_waits_before_it_is_reported_by_pair(topo):
    # h0 -> h2 over spine1 is congested, but every hop it crosses also carries a quiet path: as
    # when a queue has just begun to build and its other paths have not yet opened
    congested = {("h0", "h2", "via-spine1")}
    quiet = {("h0", "h4", "via-spine1"), ("h4", "h2", "via-spine1"), ("h0", "h2", "via-spine0")}
    mapping = {(s, dst, label): links_of(topo, s, dst, label.removeprefix("via-")) for s, dst, label in congested | quiet}
    d = DetectorSet(parse_config({"congestion": {"windows": 1, "unexplained_after": "3s"}}), topo)
    d.set_path_links(mapping)
    report(d, 1, mapping, congested)
    assert d.active(at(1)) == {}
    for t in (2, 3):
        report(d, t, mapping, congested)
        assert d.active(at(t)) == {}
    report(d, 4, mapping, congested)
    (f,) = d.active(at(4)).values()  # unexplained for 3 s: now it is news
    assert f.key == "congestion:h0->h2" and "no link explains it" in f.message
    report(d, 5, mapping, set())
    assert d.active(at(5)) == {}
    report(d, 6, mapping, congested)  # a new episode waits again
    assert d.active(at(6)) == {}


def blamed_link_at(topo, unmeasured=(), silent=(), t_end=2):
    """h0 -> h2 over spine1 congested; h0 -> h4 over spine1 and h0 -> h2 over spine0 quiet clear
    every hop of it but spine1 -> leaf1, and h4 -> h2 over spine1 would clear that one too: the
    link named at t_end, if any. `silent`: hosts that report once, at the start, and no more."""
    congested = {("h0", "h2", "via-spine1")}
    paths = congested | {("h0", "h4", "via-spine1"), ("h0", "h2", "via-spine0"), ("h4", "h2", "via-spine1")}
    mapping = {(s, dst, label): links_of(topo, s, dst, label.removeprefix("via-")) for s, dst, label in paths}
    d = DetectorSet(parse_config({"congestion": {"unexplained_after": "1h"}}), topo)
    d.set_path_links(mapping)
    report(d, 0, mapping, set(), unmeasured)
    for t in range(1, t_end + 1):
        report(d, t, [k for k in mapping if k[0] not in silent], congested, unmeasured)
    return [f.detail["links"] for k, f in d.active(at(t_end)).items() if k.startswith("congestion")]


def test_a_path_that_is_not_measured_clears_no_link(topo):
    x = [{"link": "leaf1:swp4--spine1:swp2", "direction": "spine1->leaf1"}]
    assert blamed_link_at(topo) == []  # h4 -> h2's quiet clears it: no link explains h0 -> h2 yet
    # its probes lost (as on a link so full it drops them) or its clocks not trusted: not quiet
    assert blamed_link_at(topo, unmeasured={("h4", "h2", "via-spine1")}) == [x]


def test_a_congested_path_whose_probes_are_then_all_lost_stays_congested():
    d = DetectorSet(parse_config({"congestion": {"windows": 2}}))
    path = ("h0", "h2", "eth0:7000")
    for t in (1, 2):
        report(d, t, [path], {path})
    assert list(d.active(at(2))) == ["congestion:h0->h2"]
    for t in (3, 4, 5):  # the queue drops every probe: no window, good or bad
        report(d, t, [path], set(), unmeasured={path})
    assert list(d.active(at(5))) == ["congestion:h0->h2"]
    for t in (6, 7):  # measured again, and quiet
        report(d, t, [path], set())
    assert d.active(at(7)) == {}


def test_the_paths_of_a_host_that_stopped_reporting_are_not_quiet(topo):
    x = [{"link": "leaf1:swp4--spine1:swp2", "direction": "spine1->leaf1"}]
    assert blamed_link_at(topo, silent={"h4"}, t_end=30) == []  # within stale_after: still taken as quiet
    assert blamed_link_at(topo, silent={"h4"}, t_end=61) == [x]


def test_congestion_without_a_path_map_names_the_pair():
    d = DetectorSet(parse_config({"congestion": {"margin": "50us", "windows": 1}}))
    paths = [("h0", "h2", "eth0:7000"), ("h0", "h2", "eth0:7001"), ("h0", "h3", "eth0:7000")]
    report(d, 1, paths, set(paths[:2]))
    (f,) = d.active(at(1)).values()
    assert f.key == "congestion:h0->h2"
    assert [p["path"] for p in f.detail["paths"]] == ["eth0:7000", "eth0:7001"]
    assert "no path map" in f.message


def test_congestion_on_min_and_a_floor_sent_after_the_stat():
    d = DetectorSet(parse_config({"congestion": {"stat": "min", "windows": 1}}))
    # a standing queue: min itself is up; the floor arrives later in the same batch
    samples = owd("h0", "h2", "p", 1, min=400, p50=420) + owd("h0", "h2", "p", 1, floor=100)
    d.on_samples(written(d, 1, samples), at(1))
    assert list(d.active(at(1))) == ["congestion:h0->h2"]


def test_localize_unexplained_and_tied_hops():
    a, b, c = ("L1", ""), ("L2", ""), ("L3", "")
    p, q, r = ("h0", "h1", "x"), ("h2", "h3", "x"), ("h4", "h5", "x")
    # p and q share L1 and L2 (no quiet path tells them apart); r's only link also carries a quiet path
    blamed, unexplained = localize({p: [a, b], q: [a, b], r: [c]}, quiet={c})
    assert blamed == [([a, b], [p, q])]
    assert unexplained == [r]


def test_orient_follows_the_links_from_the_source_in_any_order(topo):
    names = links_of(topo, "h0", "h2", "spine1")
    hops = orient(LinkIndex(topo), "h0", list(reversed(names)))
    assert [way for _, way in hops] == ["h0>leaf0", "leaf0>spine1", "spine1>leaf1", "leaf1>h2"]
    assert orient(LinkIndex(topo), "h0", ["no-such-link"]) == [("no-such-link", "")]


# ---- topology drift --------------------------------------------------------------------------

def test_drift_flags_an_unexpected_neighbour_and_clears_when_fixed(topo):
    d = DetectorSet(MonitorConfig(), topo)
    d.on_neighbours("h0", "eth0", "leaf0", at(1))  # as expected (node only)
    d.on_neighbours("h1", "eth0", "leaf0:swp2", at(1))  # as expected (node:iface)
    d.on_neighbours("h2", "eth0", "leaf0:swp9", at(1))  # cabled to the wrong leaf
    d.on_neighbours("h3", "eth0", "leaf1:swp1", at(1))  # right leaf, wrong port
    d.on_neighbours("h3", "eth0", "leaf1:swp1", at(2))  # seen again: keeps its start
    active = d.active(at(2))
    assert sorted(active) == ["topology_drift:h2:eth0", "topology_drift:h3:eth0"]
    f = active["topology_drift:h2:eth0"]
    assert (f.detail["seen"], f.detail["expected"]) == ("leaf0:swp9", "leaf1:swp1")
    assert active["topology_drift:h3:eth0"].detail["since_ns"] == at(1)
    d.on_neighbours("h2", "eth0", "leaf1:swp1", at(3))
    assert list(d.active(at(3))) == ["topology_drift:h3:eth0"]


def test_drift_from_the_lldp_samples_agents_push(topo):
    d = DetectorSet(MonitorConfig(), topo)
    port = topo.find_link("leaf0", "h1").port("leaf0")

    def heard(node, device, neighbour, t):
        return Sample(host=node, t_ns=at(t), name="lldp_neighbour", value=float(bool(neighbour)),
                      labels={"device": device, "neighbour": neighbour})

    d.on_samples([heard("leaf0", port.iface, "h3:eth0", 1), heard("h0", "eth0", "leaf0:swp1", 1)], at(1))
    (f,) = d.active(at(1)).values()
    assert f.key == f"topology_drift:{port}" and (f.detail["seen"], f.detail["expected"]) == ("h3:eth0", "h1:eth0")
    d.on_samples([heard("leaf0", port.iface, "", 2)], at(2))  # nothing heard now: withdrawn
    assert d.active(at(2)) == {}


def test_drift_nic_not_in_topology_and_no_topology(topo):
    d = DetectorSet(MonitorConfig(), topo)
    d.on_neighbours("h0", "eth9", "leaf2", at(1))
    (f,) = d.active(at(1)).values()
    assert f.detail["expected"] is None and "no link" in f.message
    blind = DetectorSet(MonitorConfig())
    blind.on_neighbours("h0", "eth0", "anything", at(1))
    assert blind.active(at(1)) == {}


def test_disabled_detectors_stay_silent(topo):
    d = DetectorSet(parse_config({"link_down": {"enabled": False}, "topology_drift": {"enabled": False}}), topo)
    d.on_events([ev("link_down", 1)], at(1))
    d.on_neighbours("h0", "eth0", "spine0", at(1))
    assert d.active(at(1)) == {}


# ---- config ----------------------------------------------------------------------------------

def test_config_defaults_and_a_full_file(tmp_path):
    assert load_config(write(tmp_path, "")) == MonitorConfig()
    cfg = load_config(write(tmp_path, """
stale_after: 2m
link_down: {severity: warning}
flapping: {count: 5, window: 30s}
congestion: {margin: 20us, windows: 3, stat: min, severity: critical}
topology_drift: {enabled: false}
"""))
    assert cfg.stale_after_ns == 120 * S
    link_down, flapping, congestion, drift = (cfg.detectors[name] for name in (
        "link_down", "flapping", "congestion", "topology_drift"))
    assert link_down.severity == "warning"
    assert (flapping.count, flapping.window_ns) == (5, 30 * S)
    assert (congestion.margin_ns, congestion.windows, congestion.stat) == (20 * US, 3, "min")
    assert not drift.enabled


@pytest.mark.parametrize("text, says", [
    ("flapping: {count: 0}", "monitor.yaml: flapping.count must be a positive integer"),
    ("flapping: {count: yes}", "monitor.yaml: flapping.count must be a positive integer"),
    ("flapping: {window: soon}", "monitor.yaml: flapping.window: duration 'soon' does not parse"),
    ("flaping: {count: 3}", "monitor.yaml: top level: unknown key 'flaping'"),
    ("congestion: {stat: p99}", "monitor.yaml: congestion.stat must be one of p50, min"),
    ("link_down: {enabled: maybe}", "monitor.yaml: link_down.enabled must be true or false"),
    ("latency_sla: {p99: 1ms}", "monitor.yaml: latency_sla: the latency SLA is the rule ClockfabricLatencySLABreach"),
    ("- just a list", "monitor.yaml: must be a mapping"),
    ("flapping: [1", "monitor.yaml: not valid YAML at line 1"),
])
def test_config_errors_are_one_clear_line(tmp_path, monkeypatch, text, says):
    monkeypatch.chdir(tmp_path)
    write(tmp_path, text)
    with pytest.raises(ClockfabricError) as e:
        load_config("monitor.yaml")
    assert str(e.value).startswith(says)
    assert "\n" not in str(e.value)


def write(tmp_path, text):
    path = tmp_path / "monitor.yaml"
    path.write_text(text)
    return path


# ---- which detectors run ---------------------------------------------------------------------

def test_every_detector_runs_by_default_and_drift_only_with_a_topology(topo):
    assert list(DetectorSet(MonitorConfig(), topo).detectors) == [
        "link_down", "flapping", "congestion", "topology_drift", "slow_flow", "owd_mismatch"]
    without = DetectorSet(MonitorConfig()).detectors
    assert "topology_drift" not in without and "owd_mismatch" in without  # the hosts name a flow's far host


def test_a_detector_disabled_in_the_config_is_not_built_and_finds_nothing(topo):
    cfg = parse_config({"link_down": {"enabled": False}})
    d = DetectorSet(cfg, topo)
    assert "link_down" not in d.detectors and "flapping" in d.detectors
    d.on_events([ev("link_down", 1, host="h2")], at(1))
    assert d.active(at(2)) == {}
    on = DetectorSet(MonitorConfig(), topo)
    on.on_events([ev("link_down", 1, host="h2")], at(1))
    assert list(on.active(at(2))) == ["link_down:h2:eth0--leaf1:swp1"]


def test_with_every_detector_disabled_each_call_is_a_no_op(topo):
    sections = ("link_down", "flapping", "congestion", "topology_drift", "slow_flow", "owd_mismatch")
    d = DetectorSet(parse_config({s: {"enabled": False} for s in sections}), topo)
    assert d.detectors == {}
    d.on_events([ev("link_down", 1)], at(1))
    d.on_samples(owd("h0", "h2", "eth0:7300", 1, p99=9000, floor=10, p50=9000), at(1))
    d.on_neighbours("h0", "eth0", "spine0:swp9", at(1))
    d.set_path_links({("h0", "h2", "eth0:7300"): ["h0:eth0--leaf0:swp1"]})
    assert d.active(at(2)) == {}
