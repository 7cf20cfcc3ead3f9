"""Real lldpd on the lab's switches, as a real fleet's switches run it (SONiC, Cumulus): each
switch's own daemon announces its ports (its system name the switch's, port IDs the interface
names, capabilities bridge and router) and keeps the table of what each port hears, which
`lldpcli` reads through the daemon's control socket. One daemon per switch namespace, each with a
control socket of its own in the lab's folder (`LLDPCLI` reads any of them, given the switch's
name); started here, stopped by their handles, and by `lab down` with everything in the lab."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from clockfabric.errors import ClockfabricError
from clockfabric.lab.state import Lab


def folder(lab: Lab) -> Path:
    return lab.dir / "lldpd"


def lldpcli(lab: Lab) -> str:
    """The command that reads a lab switch's table, `{name}` standing for the switch (as
    `clockfabric discover --lldpcli` takes it)."""
    return f"lldpcli -u {folder(lab)}/{{name}}.socket"


def start(lab: Lab, interval_s: int = 1) -> list[subprocess.Popen]:
    """lldpd on every switch of the lab, announcing every `interval_s` (lldpd's default is 30 s)."""
    if shutil.which("lldpd") is None or shutil.which("lldpcli") is None:
        raise ClockfabricError("lldpd is not installed: apt-get install lldpd (or make setup)")
    folder(lab).mkdir(exist_ok=True)
    procs: list[subprocess.Popen] = []
    try:
        for switch in sorted(lab.topology.switches):
            conf = folder(lab) / f"{switch}.conf"
            conf.write_text(f"configure system hostname {switch}\n"
                            "configure lldp portidsubtype ifname\n"
                            f"configure lldp tx-interval {interval_s}\n"
                            "configure system capabilities enabled bridge,router\n")
            argv = ["lldpd", "-d", "-u", str(folder(lab) / f"{switch}.socket"), "-O", str(conf)]
            procs.append(lab.spawn(switch, argv, f"lldpd on {switch}", log=lab.dir / "logs" / f"lldpd-{switch}.log"))
    except BaseException:
        stop(procs)
        raise
    return procs


def stop(procs: list[subprocess.Popen]) -> None:
    from clockfabric.lab import process

    process.stop(procs, grace_s=5.0)
