"""`GET /api/v1/jobs/{jobid}/why` on pushed samples, and the stored samples turned into flows with
their planes and links."""

from __future__ import annotations

from clockfabric.controller import rootcause_inputs
from clockfabric.controller.rootcause_inputs import Places, flows_from, link_events
from clockfabric.controller.series.sample import Sample
from clockfabric.controller.storage.base import Event
from clockfabric.topology.generators import leafspine
from tests.unit.test_jobs_api import AUTH, env, flow, get, process, push  # noqa: F401 - env is a fixture

S = 10**9


def test_why_names_the_slow_flow_against_its_siblings(env):  # noqa: F811
    client, clock = env
    push(client, "h3", "10.0.0.3", [])
    for second in range(12):
        clock.now += S
        push(client, "h1", "10.0.0.1", [process("J", 100, 0),
                                         *flow("J", "10.0.0.1->10.0.0.2", tx_bps=4e8, rtt_us=60),
                                         *flow("J", "10.0.0.1->10.0.0.3", tx_bps=4e8,
                                               rtt_us=60 if second < 4 else 3000)])
        push(client, "h2", "10.0.0.2", [process("J", 200, 1),
                                         *flow("J", "10.0.0.2->10.0.0.3", tx_bps=4e8, rtt_us=70)])
    r = client.get("/api/v1/jobs/J/why", headers=AUTH, params={"since": "30s"})
    assert r.status_code == 200, r.text
    found = r.json()
    assert found["verdict"] == "slow_unlocated"  # no topology here: no link to name
    slow = [f for f in found["flows"] if f["network_slow"]]
    assert [(f["host"], f["flow"], f["peer"]) for f in slow] == [("h1", "10.0.0.1->10.0.0.3", "h3")]
    assert slow[0]["delay_source"] == "rtt/2"


def test_why_of_an_unknown_job_and_a_bad_window(env):  # noqa: F811
    client, _ = env
    assert client.get("/api/v1/jobs/nope/why", headers=AUTH).status_code == 404
    push(client, "h1", "10.0.0.1", [process("J", 100, 0)])
    r = client.get("/api/v1/jobs/J/why", headers=AUTH, params={"since": "soon"})
    assert r.status_code == 422 and "since" in r.text
    assert get(client, "/api/v1/jobs/J/why")["verdict"] == "no_flows"
    assert client.get("/api/v1/jobs/J", headers=AUTH).json()["jobid"] == "J"  # the job's own route still answers


def test_stored_samples_become_flows_with_plane_and_links():
    topo = leafspine(4, 2, 2)
    places = Places(topo, {})
    label = "10.64.0.0->10.64.0.4"  # h0's NIC to h2's
    samples = [Sample("h0", t * S, f"job_flow_{stat}", v, {"jobid": "A", "flow": label})
               for t in (1, 2) for stat, v in (("tx_bps", 5e8), ("rtt_us", 80.0), ("retransmits_total", 7.0 * t))]
    samples.append(Sample("h0", 2 * S, "job_flow_path", 1.0, {"jobid": "A", "flow": label, "via": "spine1",
                                                              "dscp": "26"}))
    samples.append(Sample("h1", 2 * S, "other_flow_tx_bps", 9e8, {"flow": "10.0.0.2->10.0.0.4"}))
    by_host = {f.host: f for f in flows_from(samples, places)}
    a, other = by_host["h0"], by_host["h1"]
    assert (a.jobid, a.peer, a.plane, a.dscp, len(a.points)) == ("A", "h2", 0, 26, 2)
    assert [p.retransmits for p in a.points] == [7.0, 14.0]
    assert [h for h, _ in a.hops][1] == "leaf0:swp4--spine1:swp1" and a.hops[1][1] == "leaf0>spine1"
    assert (other.jobid, other.peer, other.plane) == (None, "h3", 0)  # the host's own address, its one plane
    assert len(other.hops) == 2  # no trace: only the links every path shares


def test_link_events_are_named_after_their_link():
    topo = leafspine(4, 2, 2)
    events = [Event("h0", 1, "b", 5, "link_down", "eth0"), Event("h0", 2, "b", 6, "agent_start"),
              Event("h0", 3, "b", 7, "failover_plane_down", "h2")]
    assert [(e.link, e.kind) for e in link_events(events, Places(topo, {}))] == [
        ("h0:eth0--leaf0:swp1", "link_down"), ("", "failover_plane_down")]


def test_the_cli_page_shows_the_sentence_and_each_flow_judged():
    from clockfabric.cli.job_why_view import show_why
    from clockfabric.console import out
    from clockfabric.controller.rootcause_verdict import why
    from tests.unit.rootcause_timelines import NOW, fabric, flow, ring

    found = why("A", ring("A", h1=(80, 2000)) + [flow("h0", "h3", "spine1", "B", 700, 60)], fabric(), NOW, 60 * S)
    with out.capture() as page:
        show_why(found)
    text = page.get()
    assert "congestion from job B on link leaf0--spine1" in text
    assert "slow (network)" in text and text.count(" ok") == 3
    assert "late:" not in text
    found["late"] = [{"host": "h2", "readings": 3, "spacing_s": 4.0, "usual_spacing_s": 1.0, "newest_age_s": 4.2}]
    with out.capture() as page:
        show_why(found)
    assert "late: h2's readings come 4 s apart (the job's other hosts' 1 s), the newest 4.2 s old" in page.get()


def test_an_untraced_flow_reaches_every_spine_and_a_traced_switch_outlives_a_later_untraced_reading():
    topo = leafspine(4, 2, 2)
    places = Places(topo, {})
    label = "10.64.0.0->10.64.0.4"  # h0's NIC to h2's
    rate = [Sample("h0", 1 * S, "job_flow_tx_bps", 5e8, {"jobid": "A", "flow": label})]

    def path(t: int, via: str) -> Sample:
        return Sample("h0", t * S, "job_flow_path", 1.0, {"jobid": "A", "flow": label, "via": via, "dscp": "26"})

    (untraced,) = flows_from([*rate, path(1, "")], places)
    assert len(untraced.hops) == 2 and untraced.may_cross()[0] == untraced.hops[0]
    spines = {way.split(">")[1] for _, way in untraced.may_cross() if way.startswith("leaf0>")}
    assert spines == {"spine0", "spine1"} and untraced.may_cross()[-1] == untraced.hops[-1]
    (traced,) = flows_from([*rate, path(1, "spine1"), path(2, "")], places)
    assert traced.may_cross() == traced.hops and any("spine1" in name for name, _ in traced.hops)


def test_a_flow_traced_through_two_switches_in_the_window_may_cross_both_paths():
    topo = leafspine(4, 2, 2)
    places = Places(topo, {})
    label = "10.64.0.0->10.64.0.4"  # h0's NIC to h2's
    rate = [Sample("h0", 1 * S, "job_flow_tx_bps", 5e8, {"jobid": "A", "flow": label})]

    def path(t: int, via: str) -> Sample:
        return Sample("h0", t * S, "job_flow_path", 1.0, {"jobid": "A", "flow": label, "via": via, "dscp": "26"})

    # on spine1, moved to spine0 while a link was down, traced once with no answer, back on spine1
    (moved,) = flows_from([*rate, path(1, "spine1"), path(2, "spine0"), path(3, ""), path(4, "spine1")], places)
    assert len(moved.hops) == 2 and moved.dscp == 26  # surely only the host links both paths share
    crossed = {way for _, way in moved.may_cross()}
    assert {"leaf0>spine0", "leaf0>spine1", "spine0>leaf1", "spine1>leaf1"} <= crossed
    assert moved.may_cross()[0] == moved.hops[0] and moved.may_cross()[-1] == moved.hops[-1]
    (once,) = flows_from([*rate, path(1, "spine1"), path(4, "spine1")], places)
    assert once.may_cross() == once.hops and not any("spine0" in way for _, way in once.hops)


def test_the_mesh_read_for_a_job_is_every_host_on_its_hosts_leaves():
    topo = leafspine(6, 3, 2)  # two hosts a leaf
    places = Places(topo, {})
    assert places.near(["h0", "h4"]) == ["h0", "h1", "h4", "h5"]  # h1 probes across leaf0's links, h5 leaf2's
    assert places.near(["h2"]) == ["h2", "h3"]
    assert Places(None, {}).near(["h2", "h0"]) == ["h0", "h2"]  # no topology: the job's own hosts


def test_the_other_flows_read_for_a_job_are_those_with_an_end_near_it(env, monkeypatch):  # noqa: F811
    """What a job's verdict reads of the rest of the fleet grows with the job, not with the fleet:
    the flows that start or end on its hosts' neighbourhood, however many queries their
    addresses take."""
    client, clock = env
    for second in range(3):
        clock.now += S
        push(client, "h1", "10.0.0.1", [process("J", 100, 0), *flow("J", "10.0.0.1->10.0.0.2", tx_bps=4e8)])
        push(client, "h2", "10.0.0.2", [process("J", 200, 1)])
        push(client, "h3", "10.0.0.3", [
            {"name": "other_flow_tx_bps", "value": 9e8, "labels": {"flow": "10.0.0.3->10.0.0.2"}},  # into the job
            {"name": "other_flow_tx_bps", "value": 9e8, "labels": {"flow": "10.0.0.3->10.0.0.9"}},  # far from it
            *flow("K", "10.0.0.3->10.0.0.1", tx_bps=2e8)])  # another job's, into it
    fleet = client.app.state.operations.fleet
    for one_address_a_query in (False, True):
        if one_address_a_query:
            monkeypatch.setattr(rootcause_inputs, "SLICE_NAMES_BYTES", 2 * len(r"10\.0\.0\.1") + 2)
        flows, _ = rootcause_inputs.gather(fleet, rootcause_inputs.PlacesCache(), "J", clock.now, clock.now - 30 * S)
        assert sorted((f.host, f.flow, f.jobid, f.peer) for f in flows) == [
            ("h1", "10.0.0.1->10.0.0.2", "J", "h2"), ("h3", "10.0.0.3->10.0.0.1", "K", "h1"),
            ("h3", "10.0.0.3->10.0.0.2", None, "h2")]
