"""The audit's core: blame, verdicts and exit codes, expectations, the registry, running a check
under a timeout, the JUnit and tree renderers, and gathering host reports (for real, through
`python -m clockfabric.audit.host` on this machine)."""

from __future__ import annotations

import json
import sys
import threading
import time
import xml.etree.ElementTree as ET
from itertools import permutations

import pytest
from rich.console import Console

from clockfabric.audit import expect
from clockfabric.audit.blame import blame
from clockfabric.audit.context import Context
from clockfabric.audit.gather import gather, specs, template_transport
from clockfabric.audit.model import CheckResult, Finding, Report, Verdict, worst
from clockfabric.audit.registry import CATEGORIES, CHECKS, FunctionCheck, Outcome, all_checks, check, select
from clockfabric.audit.render import SHOWN, junit, tree
from clockfabric.audit.run import audit, run_check
from clockfabric.errors import ClockfabricError
from clockfabric.topology import leafspine
from clockfabric.topology.load import parse as parse_topology

P, S, W, U, F = Verdict.PASS, Verdict.SKIP, Verdict.WARN, Verdict.UNKNOWN, Verdict.FAIL


# ---- blame ------------------------------------------------------------------------------------

def nic(i: int) -> tuple[str, str]:
    return (f"h{i}", "eth0")


def mesh(n: int, bad) -> dict:
    """Every ordered pair of n NICs (as the ping mesh tries them), bad where bad(a, b)."""
    return {(nic(a), nic(b)): bool(bad(a, b)) for a, b in permutations(range(n), 2)}


def test_blame_dead_endpoint_explains_all_its_pairs():
    blamed, left = blame(mesh(5, lambda a, b: 2 in (a, b)))
    assert list(blamed) == [nic(2)]
    assert sorted(set(blamed[nic(2)])) == [nic(0), nic(1), nic(3), nic(4)]
    assert left == []


def test_blame_two_dead_endpoints():
    blamed, left = blame(mesh(6, lambda a, b: a in (1, 4) or b in (1, 4)))
    assert list(blamed) == [nic(1), nic(4)]
    assert left == []
    # the pairs between the two are explained by the first one blamed, not counted twice
    assert nic(4) in blamed[nic(1)] and nic(1) not in blamed[nic(4)]


def test_blame_lone_bad_pair_is_left_as_a_pair():
    results = mesh(5, lambda a, b: (a, b) == (0, 3))
    blamed, left = blame(results)
    assert blamed == {}
    assert left == [(nic(0), nic(3))]


def test_blame_a_path_bad_both_ways_on_a_big_mesh_is_two_pairs():
    blamed, left = blame(mesh(8, lambda a, b: {a, b} == {0, 3}))
    assert blamed == {}
    assert left == [(nic(0), nic(3)), (nic(3), nic(0))]


def test_blame_nothing_bad():
    assert blame(mesh(4, lambda a, b: False)) == ({}, [])
    assert blame({}) == ({}, [])


def test_blame_share_quarter_is_the_line():
    """An endpoint in exactly a quarter of the pairs it was tried in (and at least two) is blamed."""
    e = ("x", "eth0")
    eight = {(e, nic(i)): i < 2 for i in range(8)}  # bad in 2 of 8
    blamed, left = blame(eight)
    assert blamed == {e: [nic(0), nic(1)]} and left == []
    nine = {(e, nic(i)): i < 2 for i in range(9)}  # bad in 2 of 9: under a quarter
    blamed, left = blame(nine)
    assert blamed == {} and left == [(e, nic(0)), (e, nic(1))]
    blamed, _ = blame(nine, share=0.2)
    assert list(blamed) == [e]


def test_blame_lossy_endpoint_among_clean_ones():
    results = mesh(8, lambda a, b: 5 in (a, b))
    results[(nic(0), nic(1))] = True  # and one unrelated bad pair
    blamed, left = blame(results)
    assert list(blamed) == [nic(5)]
    assert left == [(nic(0), nic(1))]


def test_blame_is_greedy_most_bad_pairs_first():
    """h0 fails with everyone and is taken first; h1 also fails towards h2 and h3 (those are tried one way
    only), and with h0's pairs explained that is 2 of the 6 pairs h1 was tried in: blamed as well."""
    results = mesh(5, lambda a, b: 0 in (a, b) or {a, b} in ({1, 2}, {1, 3}))
    results = {p: bad for p, bad in results.items() if not (p[0] == nic(2) and p[1] == nic(1))
               and not (p[0] == nic(3) and p[1] == nic(1))}
    blamed, left = blame(results)
    assert list(blamed) == [nic(0), nic(1)]
    assert sorted(blamed[nic(1)]) == [nic(2), nic(3)]
    assert left == []


def test_blame_ties_are_broken_the_same_way_every_time():
    results = {(nic(0), nic(1)): True, (nic(1), nic(0)): True}
    assert blame(results) == blame(dict(reversed(list(results.items()))))
    assert list(blame(results)[0]) == [nic(0)]


# ---- verdicts and exit codes --------------------------------------------------------------------

@pytest.mark.parametrize("verdicts, want", [
    ([], P), ([P], P), ([S], S), ([S, S], S), ([P, S], P), ([P, W], W), ([W, S], W),
    ([W, U], U), ([U, W, P], U), ([U, F], F), ([F, U, W, S, P], F),
])
def test_worst(verdicts, want):
    assert worst(verdicts) is want
    assert worst(iter(verdicts)) is want  # a generator is fine


def test_worst_does_not_depend_on_order():
    assert worst([S, P]) is P


def result(cid: str, verdict: Verdict, findings: list[Finding] | None = None, summary: str = "", seconds=0.25):
    return CheckResult(cid, cid.split(".")[0], f"title of {cid}", verdict, summary or f"summary of {cid}",
                       findings or [], fix=f"fix {cid}", seconds=seconds)


def report(*results: CheckResult) -> Report:
    return Report("lab demo", ["h0", "h1"], list(results), started_ns=1, seconds=1.5)


@pytest.mark.parametrize("verdicts, code", [
    ([], 0), ([P], 0), ([S], 0), ([P, S], 0), ([P, W], 1), ([W, W], 1), ([F], 2), ([W, F], 2),
    ([U], 3), ([W, U], 3), ([U, F], 2), ([P, U, W, F, S], 2),
])
def test_exit_code(verdicts, code):
    r = report(*(result(f"backend.c{i}", v) for i, v in enumerate(verdicts)))
    assert r.exit_code == code
    assert r.as_dict()["exit_code"] == code


def test_report_counts_and_json():
    r = report(result("configuration.a", P), result("frontend.b", F, [Finding(F, "bad", "h1", "eth0")]),
               result("backend.c", S), result("backend.d", F))
    assert r.counts() == {"pass": 1, "skip": 1, "warn": 0, "unknown": 0, "fail": 2}
    d = json.loads(json.dumps(r.as_dict()))
    assert d["verdict"] == "fail" and d["exit_code"] == 2
    assert d["checks"][1]["findings"] == [{"verdict": "fail", "message": "bad", "host": "h1", "device": "eth0",
                                           "evidence": {}}]
    assert d["checks"][0]["fix"] == "" and d["checks"][1]["fix"] == "fix frontend.b"  # fix only when not ok


def test_finding_where():
    assert Finding(F, "x", "h1", "eth0").where == "h1:eth0"
    assert Finding(F, "x", "h1").where == "h1"
    assert Finding(F, "x").where == "fleet"


# ---- expectations -----------------------------------------------------------------------------

def test_parse_nothing_gives_the_defaults():
    d = expect.parse(None)
    assert d == expect.defaults()
    assert d["memory"]["tolerance"] == 0.03 and d["network"]["rdma"] == "optional"
    assert d["latency"] == {"max_us": None, "margin_us": 1000.0, "samples": 5}
    assert d["timeouts"] == {"host_s": 20.0, "check_s": 300.0, "lldp_s": 1.5}
    d["collective"]["subflows"].append(16)  # each call its own copy
    assert expect.defaults()["collective"]["subflows"] == [1, 2, 4, 8]


def test_parse_overlays_what_is_written():
    d = expect.parse({"memory": {"total_gib": 512}, "network": {"rdma": "required", "mtu": 9000},
                      "latency": {"max_us": 250.5}, "software": {"packages": {"torch": "2.3.1"}}})
    assert d["memory"] == {"total_gib": 512, "tolerance": 0.03, "dimms": None}
    assert (d["network"]["rdma"], d["network"]["mtu"]) == ("required", 9000)
    assert d["latency"]["max_us"] == 250.5
    assert d["software"]["packages"] == {"torch": "2.3.1"}


@pytest.mark.parametrize("doc, says", [
    ([1, 2], "expected a mapping of sections"),
    ({"memroy": {}}, "unknown section 'memroy'; sections are software, memory, pcie"),
    ({"memory": 512}, "memory must be a mapping of keys"),
    ({"memory": {"total": 512}}, "unknown key memory.total; memory has total_gib, tolerance, dimms"),
    ({"memory": {"total_gib": "512G"}}, "memory.total_gib must be a number (got '512G')"),
    ({"memory": {"dimms": 15.5}}, "memory.dimms must be a int (got 15.5)"),
    ({"gpu": {"count": True}}, "gpu.count must be a int (got True)"),
    ({"gpu": {"ecc": "yes"}}, "gpu.ecc must be a bool (got 'yes')"),
    ({"software": {"nccl": 2.21}}, "software.nccl must be a str (got 2.21)"),
    ({"pcie": {"ignore": "0000:3b:00.0"}}, "pcie.ignore must be a list"),
    ({"network": {"rdma": "yes"}}, "network.rdma must be one of optional, required"),
    ({"collective": {"algorithms": ["ring", "tree"]}}, "collective.algorithms: 'tree' is not ring or hier"),
    ({"collective": {"subflows": [1, 0]}}, "collective.subflows: 0 is not a positive whole number"),
])
def test_parse_errors_are_one_clear_line(doc, says):
    with pytest.raises(ClockfabricError) as e:
        expect.parse(doc, "fleet.yaml")
    msg = str(e.value)
    assert msg.startswith("fleet.yaml: ")
    assert says in msg
    assert "\n" not in msg


def test_parse_accepts_int_for_number():
    assert expect.parse({"memory": {"tolerance": 0}})["memory"]["tolerance"] == 0


def test_parse_rejects_bool_for_number():
    with pytest.raises(ClockfabricError, match="memory.tolerance must be a number"):
        expect.parse({"memory": {"tolerance": True}})


def test_parse_null_list_is_a_clear_error_or_the_default():
    try:
        d = expect.parse({"collective": {"algorithms": None}})
    except ClockfabricError:
        return
    assert d["collective"]["algorithms"] == ["ring", "hier"]


def test_parse_null_number_is_a_clear_error_or_the_default():
    try:
        d = expect.parse({"timeouts": {"host_s": None}, "memory": {"tolerance": None}})
    except ClockfabricError:
        return
    assert d["timeouts"]["host_s"] == 20.0 and d["memory"]["tolerance"] == 0.03


def test_parse_package_versions_must_be_strings():
    with pytest.raises(ClockfabricError, match="software.packages"):
        expect.parse({"software": {"packages": {"numpy": 1.20}}})


def test_load_from_yaml(tmp_path):
    path = tmp_path / "fleet.yaml"
    path.write_text("network:\n  mtu: 9000\n  rdma: required\nlatency:\n  margin_us: 200\n")
    d = expect.load(path)
    assert (d["network"]["mtu"], d["network"]["rdma"], d["latency"]["margin_us"]) == (9000, "required", 200)
    assert expect.load(None) == expect.defaults()
    path.write_text("memory:\n  dimm: 16\n")
    with pytest.raises(ClockfabricError, match=f"^{path}: unknown key memory.dimm; "):
        expect.load(path)
    with pytest.raises(ClockfabricError, match="cannot read audit expectations"):
        expect.load(tmp_path / "nope.yaml")


@pytest.mark.parametrize("values, want", [
    ([], (None, False)),
    ([None, None], (None, False)),
    (["a"], ("a", True)),
    (["a", "a", "b"], ("a", True)),
    (["b", "a", "a"], ("a", True)),
    (["a", "b"], ("a", False)),
    (["a", "a", "b", "b"], ("a", False)),
    (["a", "a", "b", "c"], ("a", False)),  # the most common, but not more than half
    (["a", "a", "a", "b", "c"], ("a", True)),
    (["a", None, None, "a", "b"], ("a", True)),  # hosts that have no value do not vote
    ([9000, 9000, 1500], (9000, True)),
])
def test_majority(values, want):
    assert expect.majority(values) == want
    assert expect.majority(iter(values)) == want


def test_median():
    assert expect.median([]) is None
    assert expect.median([None]) is None
    assert expect.median([3, None, 1, 2]) == 2
    assert expect.median([16, 15]) == 15.5
    assert expect.median(v for v in (4.0, 8.0, 6.0)) == 6.0


def test_context_expected_written_or_from_the_fleet():
    ctx = Context(leafspine(3, 1, 0), ["h0", "h1", "h2"], {}, {}, expect=expect.parse({"network": {"mtu": 1500}}))
    assert ctx.expected("network", "mtu", {"a": 9000, "b": 9000}) == (1500, True)
    assert "network.mtu" not in ctx.derived
    assert ctx.expected("network", "gid_index", {"a": 3, "b": 3, "c": 1}) == (3, True)
    assert ctx.derived["network.gid_index"] == 3
    assert ctx.expected("memory", "dimms", {"a": 16, "b": 15, "c": 16}, how="median") == (16, True)
    assert ctx.expected("network", "gid_index", {"a": 3, "b": 1}) == (3, False)


def test_context_facts_hides_a_failed_reader():
    ctx = Context(leafspine(2, 1, 0), ["h0", "h1", "h9"], {"h0": {"memory": {"error": "x"}, "pcie": []},
                                                            "h1": {"memory": {"total_bytes": 1, "error": None}}}, {})
    assert ctx.facts("h0", "memory") is None
    assert ctx.facts("h0", "pcie") == []
    assert ctx.facts("h1", "memory") == {"total_bytes": 1, "error": None}
    assert ctx.facts("h9", "memory") is None
    assert ctx.reporting() == ["h0", "h1"]
    ctx.mark_broken("h0", "eth0", "backend.nic_init")
    ctx.mark_broken("h0", "eth0", "backend.cabling")  # the first check to find it keeps it
    assert ctx.broken == {("h0", "eth0"): "backend.nic_init"}


# ---- registry -------------------------------------------------------------------------------------

def ids(checks) -> list[str]:
    return [c.id for c in checks]


def test_all_checks_in_category_order():
    got = all_checks()
    cats = [c.category for c in got]
    assert cats == sorted(cats, key=CATEGORIES.index)
    assert len(set(ids(got))) == len(got) == 14
    for c in got:
        assert c.id.startswith(c.category + ".") and c.title and c.fix


def test_select_everything_by_default():
    assert ids(select([], [])) == ids(all_checks())


def test_select_by_category():
    got = select(["backend"], [])
    assert ids(got) == ["backend.nic_init", "backend.nic_active", "backend.cabling", "backend.gid",
                        "backend.connectivity", "backend.latency"]


def test_select_by_id_and_prefix():
    assert ids(select(["frontend.mtu"], [])) == ["frontend.mtu"]
    assert ids(select(["backend.nic"], [])) == ["backend.nic_init", "backend.nic_active"]
    assert ids(select(["configuration.gpu", "frontend"], [])) == ["configuration.gpu", "frontend.reach",
                                                                  "frontend.mtu", "frontend.names"]


def test_select_skip():
    got = ids(select([], ["frontend", "backend.latency"]))
    assert not [i for i in got if i.startswith("frontend.")]
    assert "backend.latency" not in got and "backend.connectivity" in got
    assert ids(select(["backend"], ["backend.nic"])) == ["backend.cabling", "backend.gid", "backend.connectivity",
                                                         "backend.latency"]


def test_select_passive_drops_active_checks():
    got = select([], [], passive=True)
    assert not [c for c in got if c.active]
    dropped = set(ids(all_checks())) - set(ids(got))
    assert dropped == {"backend.connectivity", "backend.latency", "collective.allreduce"}


@pytest.mark.parametrize("only, skip", [(["backend.nicc"], []), (["config"], []), ([], ["frontend.dns"]),
                                        (["backend.ni"], [])])
def test_select_unknown_name(only, skip):
    with pytest.raises(ValueError) as e:
        select(only, skip)
    msg = str(e.value)
    bad = (only or skip)[0]
    assert msg.startswith(f"{bad!r} names no check")
    assert "categories are configuration, frontend, backend, collective" in msg
    assert "backend.nic_init" in msg and "frontend.mtu" in msg


def test_register_rejects_unknown_category_and_duplicates():
    before = CHECKS.names()
    with pytest.raises(ValueError, match="category 'bogus'"):
        check("bogus.thing", "t", "f")
    with pytest.raises(ValueError, match="registered twice"):
        check("frontend.mtu", "t", "f")(lambda ctx: Outcome("x"))
    assert CHECKS.names() == before


# ---- run_check --------------------------------------------------------------------------------------

@pytest.fixture
def ctx():
    topo = leafspine(2, 1, 0)
    return Context(topo, ["h0", "h1"], {"h0": {}, "h1": {}}, {})


def test_run_check_result(ctx):
    c = FunctionCheck("backend.demo", "backend", "Demo", "do the thing",
              lambda ctx: Outcome("2 looked at", [Finding(P, "ok", "h0"), Finding(W, "meh", "h1", "eth0")]))
    r = run_check(ctx, c, 5)
    assert (r.id, r.category, r.title, r.verdict, r.summary, r.fix) == ("backend.demo", "backend", "Demo", W,
                                                                        "2 looked at", "do the thing")
    assert len(r.findings) == 2 and 0 <= r.seconds < 5
    empty = FunctionCheck("backend.e", "backend", "E", "", lambda ctx: Outcome("nothing wrong"))
    assert run_check(ctx, empty, 5).verdict is P


def test_run_check_that_raises_is_unknown(ctx):
    def boom(ctx):
        raise KeyError("rtt_us")
    r = run_check(ctx, FunctionCheck("backend.boom", "backend", "Boom", "fix", boom), 5)
    assert r.verdict is U
    assert r.summary == "the check failed to run"
    assert [(f.verdict, f.message) for f in r.findings] == [(U, "KeyError: 'rtt_us'")]


def test_run_check_that_hangs_is_unknown_within_the_timeout(ctx):
    release = threading.Event()
    c = FunctionCheck("backend.hang", "backend", "Hang", "fix", lambda ctx: release.wait(30) and Outcome("late"))
    try:
        t0 = time.monotonic()
        r = run_check(ctx, c, 0.3)
        took = time.monotonic() - t0
    finally:
        release.set()
    assert 0.3 <= took < 1.5
    assert r.verdict is U
    assert r.summary == "timed out after 0.3 s"
    assert r.findings[0].message == "no verdict within 0.3 s"


# ---- renderers -----------------------------------------------------------------------------------

def sample_report() -> Report:
    return report(
        result("configuration.software", P, [Finding(P, "fine", "h0")], "3 versions compared"),
        result("configuration.memory", F, [Finding(F, "15 DIMMs; the fleet expects 16", "h1")], "2 hosts"),
        result("frontend.names", S, [Finding(S, "no names to resolve")], "nothing"),
        result("backend.cabling", F, [Finding(F, "cabled to leaf1:swp2; the topology has leaf0:swp1", "h0", "eth0"),
                                      Finding(F, "cabled to leaf0:swp1; the topology has leaf1:swp2", "h3", "eth0")],
               "2 of 4 NICs"),
        result("backend.latency", W, [Finding(W, "a bit slow", "h2", "eth1")], "median 40 µs"),
        result("backend.gid", U, [Finding(U, "KeyError: 'gids'")], "the check failed to run", seconds=1.0),
    )


def test_junit_suites_cases_and_counts():
    root = ET.fromstring(junit(sample_report()))
    assert root.tag == "testsuites"
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("6", "2", "1")
    suites = {s.get("name"): s for s in root.findall("testsuite")}
    assert list(suites) == ["configuration", "frontend", "backend"]  # no collective checks: no suite
    counts = {n: (s.get("tests"), s.get("failures"), s.get("errors"), s.get("skipped")) for n, s in suites.items()}
    assert counts == {"configuration": ("2", "1", "0", "0"), "frontend": ("1", "0", "0", "1"),
                      "backend": ("3", "1", "1", "0")}
    assert suites["backend"].get("time") == "1.500"
    cases = {c.get("name"): c for s in suites.values() for c in s.findall("testcase")}
    assert cases["backend.cabling"].get("classname") == "audit.backend"
    failure = cases["backend.cabling"].find("failure")
    assert failure.get("message") == "2 of 4 NICs"
    assert "fail h0:eth0: cabled to leaf1:swp2" in failure.text and "fail h3:eth0:" in failure.text
    assert failure.text.rstrip().endswith("fix: fix backend.cabling")
    assert cases["frontend.names"].find("skipped").get("message") == "skip fleet: no names to resolve"
    assert cases["backend.gid"].find("error").get("type") == "unknown"
    assert "warning: median 40 µs" in cases["backend.latency"].find("system-out").text
    ok = cases["configuration.software"]
    assert list(ok) == []  # a pass is an empty test case
    assert sum(1 for c in cases.values() if c.find("failure") is not None) == 2


def test_junit_escapes_what_it_quotes():
    r = report(result("frontend.names", F, [Finding(F, 'cannot resolve <h1> & "h2"', "h0")], "a < b"))
    case = ET.fromstring(junit(r)).find("testsuite/testcase")
    assert case.find("failure").get("message") == "a < b"
    assert 'cannot resolve <h1> & "h2"' in case.find("failure").text


def render(r: Report) -> str:
    console = Console(record=True, width=200, color_system=None)
    console.print(tree(r))
    return console.export_text()


def test_tree_shows_what_is_wrong_where():
    text = render(sample_report())
    lines = text.splitlines()
    assert lines[0].startswith("audit of lab demo: 2 hosts, 6 checks in 1.5 s — ✘ fail")
    assert "(1 pass, 1 skip, 1 warn, 1 unknown, 2 fail)" in lines[0]
    assert any("h0:eth0: cabled to leaf1:swp2; the topology has leaf0:swp1" in ln for ln in lines)
    assert any("h3:eth0: cabled to leaf0:swp1" in ln for ln in lines)
    assert any("h1: 15 DIMMs; the fleet expects 16" in ln for ln in lines)
    assert any("fix: fix backend.cabling" in ln for ln in lines)
    assert not any("fix: fix configuration.software" in ln for ln in lines)  # passed: no fix
    assert "fine" not in text  # passing findings stay out of the tree
    order = [text.index(c) for c in ("configuration", "frontend", "backend")]
    assert order == sorted(order)


def test_tree_cuts_long_lists():
    many = [Finding(F, f"dead {i}", f"h{i}", "eth0") for i in range(SHOWN + 5)]
    text = render(report(result("backend.connectivity", F, many)))
    assert f"h{SHOWN - 1}:eth0: dead {SHOWN - 1}" in text
    assert f"h{SHOWN}:eth0" not in text
    assert "... 5 more (see --json)" in text


# ---- gather: the real host side on this machine -----------------------------------------------------

def absent_nic_topology(hosts: int = 2):
    """NIC names this machine does not have: the host side then neither listens nor pings for real."""
    return parse_topology({
        "name": "gather-test",
        "hosts": [{"name": f"h{i}", "nics": [{"name": "cfgather0", "plane": 0}]} for i in range(hosts)],
        "switches": [{"name": "leaf0", "role": "leaf", "plane": 0}],
        "links": [{"a": f"h{i}:cfgather0", "b": "leaf0"} for i in range(hosts)]})


def quick_specs(topo) -> dict:
    asked = specs(topo, list(topo.hosts), pings=1, lldp_wait_s=0.1)
    for s in asked.values():
        s["names"] = {"localhost": "127.0.0.1"}  # resolve nothing that could wait on DNS
    return asked


def test_template_transport_fills_in_host_and_address():
    topo = absent_nic_topology()
    argv = template_transport(topo, "ssh -o BatchMode=yes root@{address} env CF_HOST={host}", python="python3.11")
    assert argv("h1") == ["ssh", "-o", "BatchMode=yes", "root@10.0.0.2", "env", "CF_HOST=h1", "python3.11", "-m",
                          "clockfabric.audit.host"]


def test_specs_ask_each_nic_for_its_rail_peers():
    topo = leafspine(3, 1, 0)
    s = specs(topo, ["h0", "h2"], pings=3, lldp_wait_s=0.5)
    assert set(s) == {"h0", "h2"}
    assert s["h0"]["reach"] == {"eth0": ["10.64.0.4"]}  # h2 only: h1 is not audited
    assert s["h0"]["sources"] == {"eth0": "10.64.0.0"}
    assert s["h2"]["names"] == {"h0": "10.0.0.1", "h1": "10.0.0.2", "h2": "10.0.0.3"}
    assert (s["h2"]["pings"], s["h2"]["lldp_wait_s"]) == (3, 0.5)


def test_gather_real_host_reports():
    topo = absent_nic_topology()
    seen = []
    reports, missing = gather(quick_specs(topo), template_transport(topo, "env CF_HOST={host}", python=sys.executable),
                              timeout_s=60, progress=lambda *a: seen.append(a))
    assert missing == {}
    assert set(reports) == {"h0", "h1"}
    for h, r in reports.items():
        assert r["host"] == h
        assert r["nics"] == {"cfgather0": {"present": False}}
        assert r["lldp"] == {"cfgather0": None}
        assert r["reach"]["cfgather0"]["error"].startswith("cannot ping from cfgather0")
        assert r["memory"]["total_bytes"] > 0 and r["software"]["python"]
        assert "127.0.0.1" in r["names"]["localhost"]["addresses"]
    assert sorted(seen) == [("hosts reporting", 1, 2), ("hosts reporting", 2, 2)]


@pytest.fixture
def sleeper(tmp_path):
    """A stand-in for a host that never answers: it takes the spec and sleeps."""
    path = tmp_path / "hung_host.py"
    path.write_text("import sys, time\nsys.stdin.read()\ntime.sleep(60)\n")
    return path


def test_gather_hung_host_is_missing_and_holds_up_no_one(sleeper):
    topo = absent_nic_topology()
    real = template_transport(topo, "env CF_HOST={host}", python=sys.executable)
    t0 = time.monotonic()
    reports, missing = gather(quick_specs(topo), lambda h: real(h) if h == "h0" else [sys.executable, str(sleeper)],
                              timeout_s=6)  # the real one answers in about a second here
    took = time.monotonic() - t0
    assert list(reports) == ["h0"] and reports["h0"]["host"] == "h0"
    assert missing == {"h1": "no answer within 6 s"}
    assert 6 <= took < 10


def test_gather_timeout_also_ends_a_wrapper_that_forked(tmp_path):
    wrapper = tmp_path / "wrapper.sh"
    wrapper.write_text("#!/bin/sh\nsleep 3\n")  # not exec: sleep is the shell's child and holds its stdout
    wrapper.chmod(0o755)
    t0 = time.monotonic()
    _, missing = gather({"h0": {"host": "h0"}}, lambda h: [str(wrapper)], timeout_s=0.5)
    assert missing == {"h0": "no answer within 0.5 s"}
    assert time.monotonic() - t0 < 2


@pytest.mark.parametrize("argv, says", [
    ([sys.executable, "-c", "import sys; sys.stderr.write('warning: x\\nssh: connect to host h0 port 22: "
                            "Connection refused\\n'); sys.exit(255)"],
     "its report failed: ssh: connect to host h0 port 22: Connection refused"),
    ([sys.executable, "-c", "import sys; sys.exit(3)"], "its report failed: exit 3"),
    ([sys.executable, "-c", "print('Welcome to the host!')"], "its report was not JSON"),
    (["/nonexistent/clockfabric-ssh"], "cannot start /nonexistent/clockfabric-ssh: No such file or directory"),
])
def test_gather_failures_say_why(argv, says):
    reports, missing = gather({"h0": {"host": "h0"}}, lambda h: argv, timeout_s=20)
    assert reports == {} and missing == {"h0": says}


def test_gather_passes_the_spec_on_stdin(tmp_path):
    echo = [sys.executable, "-c", "import json, sys; s = json.load(sys.stdin); print(json.dumps({'got': s}))"]
    reports, missing = gather({"h0": {"host": "h0", "x": [1]}, "h1": {"host": "h1"}}, lambda h: echo, timeout_s=20)
    assert missing == {}
    assert reports == {"h0": {"got": {"host": "h0", "x": [1]}}, "h1": {"got": {"host": "h1"}}}


def test_host_main_rejects_a_bad_spec():
    import subprocess

    proc = subprocess.run([sys.executable, "-m", "clockfabric.audit.host"], input='{"nics": []}', text=True,
                          capture_output=True, timeout=60)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip() == ("clockfabric.audit.host: bad spec on stdin: "
                                   "the spec must be a JSON object with a host")


# ---- audit(): gather, checks and the report, end to end with canned host reports ---------------------

def test_audit_end_to_end_with_canned_reports(tmp_path):
    from tests.unit.test_audit_checks import Fleet

    fleet = Fleet(leafspine(4, 1, 0))
    fleet.reports["h1"]["memory"]["dimms"] = 15
    for h, r in fleet.reports.items():
        (tmp_path / f"{h}.json").write_text(json.dumps(r))
    script = "import sys; sys.stdin.read(); sys.stdout.write(open(sys.argv[1]).read())"

    def transport(h):
        if h == "h3":
            return [sys.executable, "-c", "import sys; sys.exit(1)"]
        return [sys.executable, "-c", script, str(tmp_path / f"{h}.json")]

    calls = []
    rep = audit(fleet.topo, ["h0", "h1", "h2", "h3"], select([], [], passive=True), transport=transport,
                expect=expect.defaults(), fleet="canned", progress=lambda *a: calls.append(a))
    by_id = {r.id: r for r in rep.results}
    assert by_id["frontend.reach"].verdict is F
    assert [(f.host, f.message) for f in by_id["frontend.reach"].findings] == [("h3", "its report failed: exit 1")]
    mem = by_id["configuration.memory"]
    assert mem.verdict is F and [f.host for f in mem.findings] == ["h1"]
    assert mem.findings[0].evidence == {"dimms": 15, "expected": 16}
    assert rep.exit_code == 2
    assert rep.hosts == ["h0", "h1", "h2", "h3"] and rep.fleet == "canned"
    assert all(r.verdict is P for r in rep.results if r.id not in ("frontend.reach", "configuration.memory"))
    assert rep.expectations["memory.dimms"] == 16
    assert ("checks", len(rep.results), len(rep.results)) in calls
    assert "backend.connectivity" not in by_id  # passive


def test_passive_audits_ask_no_host_to_ping():
    from clockfabric.audit.gather import specs
    from clockfabric.topology import multirail

    topo = multirail(4, 2, 2, 1)
    active = specs(topo, sorted(topo.hosts), pings=5, lldp_wait_s=1.0)
    passive = specs(topo, sorted(topo.hosts), pings=0, lldp_wait_s=1.0)
    assert len(active["h0"]["reach"]["eth1"]) == 3  # every rail peer
    assert all(s["reach"] == {} for s in passive.values())



@pytest.mark.parametrize("skip, wait_s", [([], 1.5), (["backend.cabling"], 0.0)])
def test_hosts_wait_for_lldp_only_when_a_chosen_check_judges_it(tmp_path, skip, wait_s):
    topo = leafspine(2, 1, 0)
    keep = "import sys; open(sys.argv[1], 'w').write(sys.stdin.read()); print('{}')"
    rep = audit(topo, sorted(topo.hosts), select([], skip, passive=True), expect=expect.defaults(), fleet="asked",
                transport=lambda h: [sys.executable, "-c", keep, str(tmp_path / h)])
    assert ("backend.cabling" in {r.id for r in rep.results}) == (not skip)
    assert expect.defaults()["timeouts"]["lldp_s"] == 1.5
    assert {json.loads((tmp_path / h).read_text())["lldp_wait_s"] for h in topo.hosts} == {wait_s}
