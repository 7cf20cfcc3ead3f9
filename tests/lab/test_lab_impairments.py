"""Impairments are real: flaps drop carrier, rate limits limit, traffic is real iperf3."""

import json
import threading
import time

import pytest

from clockfabric.lab import impair, inspect, netns, traffic
from clockfabric.topology import leafspine, multirail
from tests.lab.test_lab_network import wait_for_oper


def test_flap_goes_down_and_comes_back(make_lab):
    lab = make_lab(multirail(2, 2, 1, 0))
    link = impair.find_link(lab, "h0", "p0-leaf0")
    before = inspect.port_states(lab)[("h0", "eth0")]["carrier_changes"]
    seen = []
    flapper = threading.Thread(target=impair.flap, args=(lab, link),
                               kwargs={"down_s": 1.5, "up_s": 1.5, "count": 2,
                                       "on_change": lambda i, up: seen.append(up)})
    flapper.start()
    assert wait_for_oper(lab, "h0", "eth0", ("down", "lowerlayerdown"))["oper"] != "up"
    flapper.join()
    assert seen == [False, True, False, True]
    after = wait_for_oper(lab, "h0", "eth0", ("up",))
    assert after["oper"] == "up"
    assert after["carrier_changes"] - before == 4  # two outages: down and up, twice


@pytest.mark.parametrize("rate_mbit", [50, 20])
def test_rate_limit_limits(make_lab, rate_mbit):
    lab = make_lab(leafspine(2, 1, 0, host_rate="100mbit"))
    for host in ("h0", "h1"):  # a new speed for the whole path, as a slower fabric would have
        impair.set_rate(lab, impair.find_link(lab, host, "leaf0"), rate_mbit * 1_000_000)
    # TCP goodput is about 95% of the line rate (headers), less the 4 s flow's ramp and BBR's
    # probing dips: never above the set rate, not far below. A flow on this shared VM read 0.849
    # and 0.81 of the rate in CI on slow days, so a reading under the floor is taken once more;
    # a shaper set wrong reads wrong both times
    goodputs = []
    for _ in range(2):
        result = traffic.run(lab, "h0", "h1", seconds=4)
        goodputs.append(result["received_bps"] / 1e6)
        assert goodputs[-1] <= 1.0 * rate_mbit, result
        if goodputs[-1] >= 0.85 * rate_mbit:
            break
    assert max(goodputs) >= 0.85 * rate_mbit, goodputs


def test_udp_loss_when_offered_above_rate(make_lab):
    lab = make_lab(leafspine(3, 1, 0, host_rate="50mbit"))
    # two senders at 40 Mbit/s each into one 50 Mbit/s port: the leaf's queue must drop
    results = {}
    threads = [threading.Thread(target=lambda s=s: results.__setitem__(s, traffic.run(
        lab, s, "h2", seconds=3, rate_bps=40_000_000, udp=True))) for s in ("h0", "h1")]
    [t.start() for t in threads]
    [t.join() for t in threads]
    received = sum(r["received_bps"] for r in results.values()) / 1e6
    assert received <= 51  # the port rate, plus slack for two iperf3 intervals that do not align exactly
    assert any(r["lost_percent"] > 5 for r in results.values()), results


def test_background_traffic_is_stopped_by_down(make_lab, cli):
    lab = make_lab(leafspine(2, 1, 0))
    cli("lab", "traffic", "h0", "h1", "--seconds", "60", "--background", "--lab", lab.name)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not netns.pids(lab.ns("h0")):
        time.sleep(0.1)
    assert netns.pids(lab.ns("h0")), "iperf3 client should be running in h0"
    runner = lab.processes()
    assert len(runner) == 1 and "traffic" in runner[0]["what"]
    cli("lab", "down", lab.name)
    assert not netns.listed(f"cf.{lab.name}.")
    from clockfabric.lab.state import is_ours
    assert not is_ours(runner[0]["pid"], lab.name)


def test_traffic_json_from_cli(make_lab, cli):
    lab = make_lab(leafspine(2, 1, 0, host_rate="100mbit"))
    result = json.loads(cli("lab", "traffic", "h0", "h1", "--seconds", "2", "--json", "--lab", lab.name).stdout)
    # the JSON, with a rate of the right order: how close to the set rate is test_rate_limit_limits's
    # question (a 2 s flow at 100 Mbit/s read 71 Mbit/s in a CI run on a slow day)
    assert result["protocol"] == "tcp" and 50e6 < result["received_bps"] <= 100e6
