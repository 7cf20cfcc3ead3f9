"""`clockfabric qos set JOB --class C [--weight W]`, `qos clear JOB`, `qos show`: jobs' QoS
policies at the controller, and what each host does about them now."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from clockfabric.cli.job_cmds import ControllerOpt, JsonOpt, LabOpt, TokenOpt, _controller
from clockfabric.console import out, print_json
from clockfabric.controller.client import api
from clockfabric.qos import policy

app = typer.Typer(help="Jobs' QoS: a class and weight per job, enforced from the hosts.", no_args_is_help=True)


@app.command("set")
def set_policy(jobid: str = typer.Argument(..., help="The job's id, as `clockfabric jobs` lists it (it may "
                                                     "not run yet: the policy waits for it); or a Slurm group: "
                                                     "slurm-qos:NAME, slurm-partition:NAME."),
               qos_class: str = typer.Option(..., "--class", help=f"One of {', '.join(policy.CLASSES)}."),
               weight: int = typer.Option(None, "--weight", help=f"{policy.MIN_WEIGHT}..{policy.MAX_WEIGHT}: "
                                                                  "its share of a host link among busy classes "
                                                                  "(default: the class's)."),
               override_dscp: bool = typer.Option(False, "--override-dscp",
                                                  help="Re-mark packets the job marks itself (default: keep "
                                                       "the job's own DSCP)."),
               lab_name: str = LabOpt, controller_url: str = ControllerOpt, token_file: Path = TokenOpt,
               as_json: bool = JsonOpt) -> None:
    """Set a job's class and weight."""
    p = policy.make(jobid, qos_class, weight, override_dscp)  # a mistake is one line, before any request
    stored = api(_controller(lab_name, controller_url, token_file), "/api/v1/qos", body=p.as_dict())
    if as_json:
        print_json(stored)
        return
    out.print(f"job {stored['jobid']}: class {stored['class']}, weight {stored['weight']}")


@app.command()
def clear(jobid: str = typer.Argument(..., help="The job's id."),
          lab_name: str = LabOpt, controller_url: str = ControllerOpt, token_file: Path = TokenOpt) -> None:
    """Forget a job's policy: its packets go unmarked and unshaped again."""
    policy.check_jobid(jobid)
    api(_controller(lab_name, controller_url, token_file), "/api/v1/qos/clear", body={"jobid": jobid})
    out.print(f"job {jobid}: no QoS policy")


def _on_hosts(hosts: dict) -> str:
    return "; ".join(f"{h}: {j['sockets']} sockets, {j['marked_packets']} packets marked"
                     for h, j in sorted(hosts.items())) or "-"


@app.command()
def show(lab_name: str = LabOpt, controller_url: str = ControllerOpt, token_file: Path = TokenOpt,
         as_json: bool = JsonOpt) -> None:
    """Each job's class and weight, and what enforcing it does now on each host."""
    found = api(_controller(lab_name, controller_url, token_file), "/api/v1/qos")
    if as_json:
        print_json(found)
        return
    t = Table(title=f"{len(found['items'])} QoS policies")
    for col in ("job", "class", "weight", "DSCP", "state", "on hosts"):
        t.add_column(col)
    for p in found["items"]:
        known = policy.CLASSES.get(p["class"])
        t.add_row(p["jobid"], str(p["class"]), str(p["weight"]), str(known.dscp) if known else "?", p["state"],
                  _on_hosts(p["hosts"]))
    out.print(t)
    for host, q in sorted(found["hosts"].items()):
        if q.get("refused"):
            out.print(f"[red]{host}: the kernel refused the policies[/] ({q['refused']}); the host keeps what it had")
        if q.get("problem"):
            out.print(f"[yellow]{host}: policies not taken[/] ({q['problem']})")
        for nic, how in sorted((q.get("links") or {}).items()):
            out.print(f"{host}:{nic} {how}")
