"""A real PyTorch DDP job (gloo, CPU) on four lab hosts of a dual-plane fabric."""

import ipaddress
import json
import time
from pathlib import Path

import pytest

from clockfabric.errors import ClockfabricError
from clockfabric.lab import job
from clockfabric.topology import multirail

pytest.importorskip("torch", reason="torch is not installed (make setup installs the job extra)")

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "ddp_train.py"
STEPS = 20


def address(endpoint: str) -> str:
    """'10.0.0.1:45795' or '[::ffff:10.0.0.1]:24507' -> '10.0.0.1'."""
    host = endpoint.rsplit(":", 1)[0].strip("[]")
    ip = ipaddress.ip_address(host)
    return str(ip.ipv4_mapped or ip) if ip.version == 6 else str(ip)


def test_ddp_job_runs_over_stable_addresses(make_lab, tmp_path):
    lab = make_lab(multirail(4, 2, 2, 2))
    hosts = ["h0", "h1", "h2", "h3"]
    stable = {str(lab.topology.hosts[h].address): h for h in hosts}

    with pytest.raises(ClockfabricError, match="not a host"):
        job.start(lab, ["h0", "p0-leaf0"], [str(SCRIPT)], tmp_path)

    j = job.start(lab, hosts, [str(SCRIPT), "--steps", str(STEPS), "--timeout", "30"], tmp_path)
    try:
        assert {p["pid"] for p in lab.processes()} >= set(j.pids)  # `lab down` would stop them
        deadline = time.monotonic() + 40
        while not all(p.exists() and '"step"' in p.read_text() for p in j.logs):  # every rank is training
            assert j.running() and time.monotonic() < deadline, "the job never took a step"
            time.sleep(0.2)
        conns = j.connections()  # gloo's pairs and the rendezvous store, seen by ss while it runs
        result = j.wait(60, stall_s=30)
    finally:
        j.stop()

    for host, pairs in conns.items():
        me = str(lab.topology.hosts[host].address)
        assert pairs, f"{host}: no connections seen"
        for local, peer in pairs:
            assert address(local) == me, f"{host}: bound to {local}, not its stable address {me}"
            assert address(peer) in stable, f"{host}: peer {peer} is not a stable host address"
        peers = {stable[address(peer)] for _, peer in pairs} - {host}
        assert peers == set(hosts) - {host}, f"{host}: gloo reaches only {peers}"

    assert result.outcome == "completed", (result, [p.read_text()[-2000:] for p in j.outputs])
    assert result.steps == STEPS and result.missing == {} and len(result.step_s) == STEPS
    for rank, log in enumerate(j.logs):
        recs = [json.loads(line) for line in log.read_text().splitlines()]
        assert [r["step"] for r in recs if "step" in r] == list(range(STEPS)), f"rank {rank} missed steps"
        ready = next(r for r in recs if r.get("event") == "ready")
        assert ready["address"] == str(lab.topology.hosts[hosts[rank]].address)
    assert 0 < result.median_step_s < 5 and result.startup_s > 0 and result.total_s > result.startup_s
    codes = [p.returncode for p in j.procs]
    assert codes == [0] * len(hosts), (codes, j.killed, [p.read_text()[-2000:] for p in j.outputs])
