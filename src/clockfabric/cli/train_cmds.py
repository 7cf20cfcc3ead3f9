"""Elastic training: each lost rank is replaced by a spare and the job carries on.

- `clockfabric train run --hosts h0,..,hN --spares K -- SCRIPT ARGS`: the coordinator starts the
  ranks and spares itself, on a lab's hosts or on real ones over ssh (`--fleet fleet.yaml`),
  the last K hosts the spares.
- `clockfabric train coordinator --ranks N`: the coordinator alone, for members a launcher
  starts (torchrun, srun): it serves the job's board, which torchrun's rendezvous may share.
  --slurm drains a replaced rank's node in Slurm; --fleet audits it over ssh, and a node that
  passes is resumed (train/slurm.py).

The coordinator also watches the GPUs through NVML: a lab's hosts share the machine, so GPU i
stands for the i-th host named (ranks, then spares), and a critical XID on it moves that
host's rank to a spare before the rank crashes. A machine without NVML (or a GPU) runs the
job without the watch, and says so.

A replaced rank's host is drained; with --readmit (the default) it is audited alone, every
--readmit-every seconds and less often while it fails, and rejoins the spares once it passes
(train/readmit_audit.py says what is checked).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer

from clockfabric.console import out
from clockfabric.errors import ClockfabricError

app = typer.Typer(help="Elastic training: spares take a lost rank's place, its state from peers' memory.",
                  no_args_is_help=True)


def _show(event: dict[str, Any]) -> None:
    detail = ", ".join(f"{k} {v}" for k, v in event.items() if k not in ("event", "time"))
    out.print(f"{time.strftime('%H:%M:%S', time.localtime(event['time']))} [bold]{event['event']}[/] {detail}")


def gpu_watch(hosts: list[str], nvml: Any = None) -> tuple[Callable[[str], str | None] | None, str]:
    """(host -> its GPU's critical XID since the last call, or None; what is watched). nvml: a
    stand-in with pynvml's names (None: pynvml). No watch where NVML or a GPU is missing."""
    from clockfabric.audit.checks.config_gpu import CRITICAL_XIDS
    from clockfabric.telemetry.nvidia_gpu import NvidiaGpuCollector

    gpus = NvidiaGpuCollector(nvml)
    if why := gpus.absent():
        return None, f"GPUs not watched: {why}"
    pending: dict[str, str] = {}

    def fault(host: str) -> str | None:
        # one drain for every host: the coordinator asks host by host, the XIDs come all at once
        for index, xid in gpus.new_xids():
            if xid in CRITICAL_XIDS and index < len(hosts):
                pending.setdefault(hosts[index], f"XID {xid} ({CRITICAL_XIDS[xid]}) on GPU {index}")
        return pending.pop(host, None)

    return fault, f"watching GPUs 0-{len(hosts) - 1} for critical XIDs (GPU i: the i-th host)"


@app.command(context_settings={"ignore_unknown_options": True})
def run(hosts: str = typer.Option(..., "--hosts", help="Lab hosts, comma-separated: ranks first, then spares."),
        spares: int = typer.Option(0, "--spares", min=0, help="How many of the hosts, from the end, are spares."),
        lab_name: str = typer.Option(None, "--lab", "-l", help="Lab name (default: the only lab that is up)."),
        fleet: Path = typer.Option(None, "--fleet", help="Real hosts, reached over ssh: a fleet file (topology "
                                                         "YAML with addresses and an ssh: section)."),
        serve_on: str = typer.Option(None, "--serve-on", help="With --fleet: this machine's address the hosts "
                                                              "reach the job's board at (default: the one "
                                                              "that routes to the first host)."),
        folder: Path = typer.Option(None, "--dir", help="Logs, heartbeats and events (default: a new folder "
                                                        "under /tmp)."),
        detect_s: float = typer.Option(2.0, "--detect", min=0.2, help="Seconds without a heartbeat that "
                                                                      "make a rank lost."),
        timeout_s: float = typer.Option(3600.0, "--timeout", min=1, help="Give up after this many seconds."),
        controller: str = typer.Option(None, "--controller", help="Also send the job's events to this "
                                                                  "controller (http(s)://HOST:PORT)."),
        token_file: Path = typer.Option(None, "--token-file", help="With --controller: the fleet token."),
        min_ranks: int = typer.Option(None, "--min-ranks", min=1, help="With no spare left, go on with the "
                                                                       "survivors if at least this many remain "
                                                                       "(default: pause until a spare is added)."),
        watch_gpus: bool = typer.Option(True, help="Move a rank whose GPU reports a critical XID (NVML) to a "
                                                   "spare before it crashes."),
        readmit: bool = typer.Option(True, help="Audit each drained host (a replaced rank's) and return it to "
                                                "the spares once the audit passes; else it stays drained."),
        readmit_s: float = typer.Option(5.0, "--readmit-every", min=0.5, max=60.0,
                                        help="Seconds between a drained host's audits (doubling while it "
                                             "fails, up to 60)."),
        command: list[str] = typer.Argument(..., help="The training script and its arguments, after --.")) -> None:
    """Run SCRIPT as an elastic job: rank i on the i-th host, spares waiting with torch loaded."""
    from clockfabric.audit import expect
    from clockfabric.cli.train_reach import fleet_reach, lab_reach
    from clockfabric.controller.token import read_token
    from clockfabric.train.launch import TrainJob
    from clockfabric.train.readmit_audit import host_audit
    from clockfabric.train.to_controller import ControllerEvents

    names = [h.strip() for h in hosts.split(",") if h.strip()]
    if spares >= len(names):
        raise ClockfabricError(f"--spares {spares} leaves no rank among {len(names)} hosts")
    argv = command[1:] if Path(command[0]).name.startswith("python") else command  # ranks run this Python
    if bool(controller) != bool(token_file):
        raise ClockfabricError("give --controller URL and --token-file FILE together: where to send the events")
    sender = ControllerEvents(controller, read_token(token_file), names[0]) if controller else None
    where = folder or Path(f"/tmp/clockfabric-train-{time.strftime('%Y%m%d-%H%M%S')}")

    def on_event(event: dict[str, Any]) -> None:
        _show(event)
        if sender:
            sender(event)

    gpu_fault, watched = gpu_watch(names) if watch_gpus else (None, "GPUs not watched: --no-watch-gpus")
    reach = fleet_reach(fleet, serve_on, names) if fleet else lab_reach(lab_name)
    audit = host_audit(reach.topology, reach.audit, expect.defaults(), reach.fleet) if readmit else None
    job = TrainJob(reach.hosts, names[:len(names) - spares], names[len(names) - spares:], argv, where,
                   serve_on=reach.serve_on, runner=reach.runner, local=reach.local,
                   detect_s=detect_s, on_event=on_event, gpu_fault=gpu_fault,
                   min_ranks=min_ranks, audit=audit, readmit_s=readmit_s)
    out.print(f"logs in {where}; {watched}")
    if sender:
        sender.start()
    job.start()
    try:
        completed = job.wait(timeout_s)
    finally:
        job.stop()
        if sender:
            sender.close()
    if not completed:
        sys.exit(f"the job did not complete within {timeout_s:.0f} s; see {where}")


@app.command()
def coordinator(ranks: int = typer.Option(..., "--ranks", min=2, help="The job's ranks (its world size)."),
                listen: str = typer.Option("0.0.0.0:29500", "--listen",
                                           help="ADDRESS:PORT to serve the job's board on; torchrun's rendezvous "
                                                "may share it (--rdzv-backend c10d --rdzv-endpoint HOST:PORT)."),
                folder: Path = typer.Option(None, "--dir", help="Events (default: a new folder under /tmp)."),
                detect_s: float = typer.Option(2.0, "--detect", min=0.2, help="Seconds without a heartbeat "
                                                                              "that make a rank lost."),
                min_ranks: int = typer.Option(None, "--min-ranks", min=1, help="With no spare left, go on with "
                                                                               "at least this many survivors."),
                start_s: float = typer.Option(300.0, "--start-timeout", min=1, help="Give up if the ranks have "
                                                                                    "not all arrived by then."),
                slurm: bool = typer.Option(False, "--slurm", help="Drain a replaced rank's Slurm node (scontrol, "
                                                                  "with the reason) and resume it once its audit "
                                                                  "passes (--fleet)."),
                fleet: Path = typer.Option(None, "--fleet", help="Audit each drained host over ssh (a fleet "
                                                                 "file) and return it to the spares once it "
                                                                 "passes. Without it there is no audit: a "
                                                                 "drained host, and its Slurm node, stay drained."),
                timeout_s: float = typer.Option(86400.0, "--timeout", min=1, help="Give up after this many "
                                                                                 "seconds.")) -> None:
    """Serve the board of a job whose members a launcher starts (torchrun, srun, a script).

    Each rank runs with CLOCKFABRIC_TRAIN_STORE=tcp://THIS_HOST:PORT (its first rank from RANK or
    SLURM_PROCID); each spare also with CLOCKFABRIC_TRAIN_SPARE=1, or, under srun, each task whose
    SLURM_PROCID is past CLOCKFABRIC_TRAIN_RANKS. A lost rank's place goes to a spare; the
    survivors and the job go on."""
    from clockfabric.audit import expect
    from clockfabric.cli.train_reach import fleet_reach
    from clockfabric.train import control
    from clockfabric.train.coordinator import Coordinator
    from clockfabric.train.presence import KEY, Presence
    from clockfabric.train.readmit_audit import host_audit
    from clockfabric.train.slurm import Slurm

    address, _, port = listen.rpartition(":")
    if not address or not port.isdigit():
        raise ClockfabricError(f"--listen {listen!r}: give ADDRESS:PORT, like 0.0.0.0:29500")
    audit = None
    if fleet:  # read before serving anything: a bad file is one line, not a half-started job
        reach = fleet_reach(fleet, None)
        audit = host_audit(reach.topology, reach.audit, expect.defaults(), reach.fleet)
    board = control.Board.open(f"tcp://{address}:{port}", serve=True)
    presence = Presence(address)
    presence.start()
    board.write_text(KEY, f"{_reachable(address)}:{presence.address.rsplit(':', 1)[1]}")
    where = folder or Path(f"/tmp/clockfabric-train-{time.strftime('%Y%m%d-%H%M%S')}")
    job = Coordinator(board, ranks, where, detect_s=detect_s, on_event=_show, min_ranks=min_ranks,
                      presence=presence, audit=audit)
    nodes = Slurm(job.event).start() if slurm else None
    if nodes:
        job.on_drain, job.on_return = nodes.drain, nodes.resume
    out.print(f"serving the job's board on {board.url}: run each rank with "
              f"{control.STORE_ENV}=tcp://{_reachable(address)}:{board.port}, each spare also with "
              f"{control.SPARE_ENV}=1; events in {where}")
    job.start()
    try:
        deadline = time.monotonic() + start_s
        while job.gen is None:
            if time.monotonic() > deadline:
                sys.exit(f"only {len(job.first)} of {ranks} ranks arrived within {start_s:.0f} s: is each started "
                         f"with {control.STORE_ENV} set, and does the script use clockfabric.train.elastic?")
            time.sleep(0.1)
        completed = job.wait(timeout_s)
    finally:
        job.stop()
        if nodes:
            nodes.stop()
    if not completed:
        sys.exit(f"the job did not complete: {job.stopped or f'not within {timeout_s:.0f} s'}; see {where}")


def _reachable(address: str) -> str:
    """What members connect to: the address itself, or this host's name where it listens on all."""
    import socket

    return socket.gethostname() if address in ("0.0.0.0", "") else address
