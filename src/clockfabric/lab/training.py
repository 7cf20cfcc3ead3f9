"""Elastic training jobs on a lab: the coordinator's hosts are the lab's, each member a Python
whose hostname is its host's stable address (gloo binds to the address its hostname resolves
to, so every connection survives a NIC going down), and a drained host audited as the lab's
hosts are."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from clockfabric.lab.hosts import lab_audit, lab_hosts
from clockfabric.lab.state import Lab
from clockfabric.train.launch import TrainJob
from clockfabric.train.readmit import HostAudit
from clockfabric.train.readmit_audit import host_audit


def runner(lab: Lab) -> Callable[[str], list[str]]:
    """host -> the argv prefix that runs a Python script there (lab.job sets the hostname)."""
    return lambda host: [sys.executable, "-m", "clockfabric.lab.job", "--lab", lab.name, "--hostname",
                         str(lab.topology.hosts[host].address), "--"]


def train_job(lab: Lab, ranks: list[str], spares: list[str], argv: list[str], folder: Path | str,
              **options: Any) -> TrainJob:
    return TrainJob(lab_hosts(lab), ranks, spares, argv, folder, runner=runner(lab), **options)


def lab_host_audit(lab: Lab, expectations: dict) -> HostAudit:
    return host_audit(lab.topology, lambda: lab_audit(lab), expectations, f"lab {lab.name}")
