"""The clock's bound on a fabric with one FIFO per port: four cubic TCP streams fill one host's
link, and every host's published bound must still cover its true error, while the hosts whose
own paths are quiet stay within 2 us."""

import time

from clockfabric.clock.evaluate import Sampler, coverage, summary
from clockfabric.lab import process
from clockfabric.lab.agents import LabAgents
from clockfabric.lab.traffic import iperf_server
from clockfabric.topology import leafspine

LOADED, SINK = "h2", "h3"  # bulk TCP h2 -> h3 (both under leaf1); h0 (reference) and h1 are quiet
QUIET = ("h1",)
QUIET_BOUND_NS = 2_000
RUN_S, SETTLE_S = 40.0, 15.0


def test_bound_covers_the_error_on_a_saturated_fifo_fabric(make_lab):
    lab = make_lab(leafspine(4, 2, 1))
    topo = lab.topology
    address = str(topo.hosts[SINK].address)
    server = iperf_server(lab, SINK, address, 5201)
    client = lab.spawn(LOADED, ["iperf3", "-c", address, "-B", str(topo.hosts[LOADED].address), "-p", "5201",
                                "-P", "4", "-C", "cubic", "-t", str(int(RUN_S + 20))],
                       f"bulk tcp {LOADED} -> {SINK}", log=lab.dir / "logs" / "iperf3-client.log")
    agents = LabAgents(lab, peers=3)
    sampler = Sampler(lab, agents.state_dir, agents.reference)
    agents.start()
    try:
        while time.monotonic() - sampler.start < RUN_S:
            time.sleep(0.25)
            assert not agents.failed(), agents.failed()
            sampler.sample()
    finally:
        agents.stop()
        process.stop([client, server])
    judged = [j for j in sampler.judged if j[0] >= SETTLE_S]
    per_host = {h: coverage([j for j in judged if j[1] == h]) for h in sorted({j[1] for j in judged})}
    errors = {h: summary([e for _, g, e, _ in judged if g == h]) for h in per_host}
    print(f"\nsaturated {LOADED}: coverage {per_host}; |error| {errors}; named {sampler.named}")

    assert judged, "no host was synced after settling"
    for h, c in per_host.items():
        assert c["coverage"] >= 0.99, (h, c, errors[h])
    for h in QUIET:
        assert errors[h]["samples"] > 50, errors[h]
        assert errors[h]["max_ns"] <= QUIET_BOUND_NS, errors[h]
