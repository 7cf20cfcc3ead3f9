"""Run commands on lab nodes: `ip netns exec` also mounts the namespace's own /sys, so
sysfs counters (carrier_changes, statistics) read as on a real host."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # state imports this module: Lab.spawn runs commands on nodes
    from clockfabric.lab.state import Lab


def command(lab: Lab, node: str, argv: list[str]) -> list[str]:
    env = [f"{k}={v}" for k, v in lab.host_env(node).items()]
    return ["ip", "netns", "exec", lab.ns(node), "env", *env, *argv]


def exec_on(lab: Lab, node: str, argv: list[str]) -> None:
    """Replace this process with argv running on the node (exit code passes through)."""
    cmd = command(lab, node, argv)
    os.execvp(cmd[0], cmd)
