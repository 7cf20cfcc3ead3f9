"""`clockfabric job run --name N -- CMD ...`: run a command as a named job.

The command gets CLOCKFABRIC_JOB=N and CLOCKFABRIC_JOB_RUN (this run's id) in its environment,
and so do its children: every agent then counts them as job N, whatever they are. Signals sent
to us are passed on to the command, and its exit status is ours (128 + the signal that ended
it, as a shell says).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import uuid

from clockfabric.errors import ClockfabricError
from clockfabric.workload.jobs import JOB_ENV, QOS_ENV, RUN_ENV

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@+-]{0,127}$")


def check_name(name: str) -> str:
    if not NAME.match(name):
        raise ClockfabricError(f"job name {name!r}: use 1 to 128 letters, digits and . _ : @ + -, "
                               "starting with a letter or digit")
    return name


def run(name: str, argv: list[str], run_id: str | None = None, qos: str = "") -> int:
    """Run argv as job `name` until it ends; returns its exit status. `qos`: the class (and weight)
    the job asks for, CLASS or CLASS:WEIGHT, checked by the caller (clockfabric.qos.policy)."""
    check_name(name)
    if not argv:
        raise ClockfabricError("no command given: clockfabric job run --name N -- CMD ...")
    env = {**os.environ, JOB_ENV: name, RUN_ENV: run_id or uuid.uuid4().hex[:12], **({QOS_ENV: qos} if qos else {})}
    started: list[subprocess.Popen] = []
    early: list[int] = []  # signals that came before the command started: it gets them once it has

    def forward(signum: int, _frame) -> None:
        if started:
            started[0].send_signal(signum)
        else:
            early.append(signum)

    before = {sig: signal.signal(sig, forward) for sig in FORWARDED}  # before the start: none is lost between
    try:
        try:
            started.append(subprocess.Popen(argv, env=env))
        except OSError as e:
            raise ClockfabricError(f"cannot run {argv[0]}: {e.strerror or e}") from None
        for signum in early:
            started[0].send_signal(signum)
        code = started[0].wait()
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
    return 128 - code if code < 0 else code
