"""Spares off the lab: lab hosts reached only as real hosts are (a real sshd in each, a fleet
file with addresses), the job launched by torchrun and by `clockfabric train run --fleet`.
Nothing on the product's side is handed a lab: the coordinator runs on a login node (h4's
namespace) and reaches the others over ssh; a killed rank's place goes to a spare, no
completed step lost, the parameters bit-equal to a failure-free run."""

from __future__ import annotations

import pytest

from clockfabric.bench.spares.launchers import SCRIPT, check, events, fleet_run, phases, torchrun_run
from clockfabric.lab import sshd
from clockfabric.topology import multirail

pytest.importorskip("torch", reason="torch is not installed (make setup installs the job extra)")

STEPS = 60  # enough that a spare still importing torch on a loaded machine is ready in time
ARGS = ["--steps", str(STEPS), "--timeout", "30", "--width", "256"]
RANKS, SPARES, LOGIN = ["h0", "h1", "h2"], ["h3"], "h4"


@pytest.fixture(scope="module")
def fleet(make_module_lab, tmp_path_factory, failure_free):
    lab = make_module_lab(multirail(5, 1, 1, 0))
    folder = tmp_path_factory.mktemp("fleet")
    digests = failure_free([str(SCRIPT.resolve()), *ARGS])
    sl = sshd.start(lab, folder / "ssh", client_host=LOGIN)
    try:
        yield sl, digests
    finally:
        sl.stop()


def carried_on(folder, digests, killed_at) -> dict[str, float]:
    check(folder, STEPS, digests)  # no completed step lost, parameters bit-equal
    kinds = [e["event"] for e in events(folder)]
    assert kinds.index("detected") < kinds.index("spare chosen") < kinds.index("resumed") < kinds.index("completed")
    assert next(e for e in events(folder) if e["event"] == "spare chosen")["rank"] == 1
    figures = phases(folder, killed_at)
    assert figures["next_step_s"] < 10, figures
    return figures


def test_torchrun_ranks_and_a_waiting_spare_over_ssh(fleet, tmp_path):
    sl, digests = fleet
    killed_at = torchrun_run(sl, RANKS, SPARES, ARGS, tmp_path)
    figures = carried_on(tmp_path, digests, killed_at)
    detected = next(e for e in events(tmp_path) if e["event"] == "detected")
    assert "connection to the coordinator closed" in detected["why"]  # presence: known at once
    assert figures["detect_s"] < 1.0, figures
    print(f"torchrun: {figures}")


def test_train_run_over_ssh_from_a_fleet_file(fleet, tmp_path):
    sl, digests = fleet
    killed_at = fleet_run(sl, RANKS, SPARES, ARGS, tmp_path)
    figures = carried_on(tmp_path, digests, killed_at)
    assert next(e for e in events(tmp_path) if e["event"] == "detected")["why"].startswith("its process exited")
    print(f"ssh: {figures}")
