"""`clockfabric doctor` on a lab host, against the lab's controller, before its agent starts:
every check passes (or has nothing to look at), so a real host set up the same way would too."""

from __future__ import annotations

import json
import subprocess
import time

from clockfabric.auth.credential import host_token
from clockfabric.controller.token import read_token
from clockfabric.lab.exec import command
from clockfabric.lab.monitoring import PY, LabFleet
from clockfabric.topology import multirail


def test_doctor_on_a_lab_host_passes_against_the_labs_controller(make_lab, tmp_path):
    t0 = time.monotonic()
    lab = make_lab(multirail(2, 2, 1, 1))  # two planes: a route, a NIC and timestamps checked on each
    fleet = LabFleet(lab, peers=1)
    credential = tmp_path / "h1.token"
    credential.write_text(host_token(read_token(fleet.token_file, create=True), "h1") + "\n")
    fleet.procs.append(fleet.restart_controller())  # no agent: its ports stay free for doctor to find so
    try:
        done = subprocess.run(command(lab, "h1", [*PY, "doctor", "--controller", fleet.url, "--token-file",
                                                  str(credential), "--json"]),
                              capture_output=True, text=True, timeout=60)
    finally:
        fleet.stop()
    assert done.returncode == 0, done.stdout + done.stderr
    checks = json.loads(done.stdout)["checks"]
    verdicts = {(c["check"], c["verdict"]) for c in checks}
    assert all(c["verdict"] in ("pass", "skip", "warn") for c in checks), checks
    assert {("key", "pass"), ("credential", "pass"), ("ports", "pass"), ("controller", "pass")} <= verdicts, checks
    assert [c["check"] for c in checks if c["verdict"] == "pass"].count("routes") == 2, checks
    print(f"lab up, controller, doctor: {time.monotonic() - t0:.1f} s")
