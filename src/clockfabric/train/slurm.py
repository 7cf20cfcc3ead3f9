"""Slurm's side of a job's spares: a replaced rank's node drained, and resumed once it passes.

`clockfabric train coordinator --slurm` sets the coordinator's `on_drain` / `on_return` to
`Slurm.drain` / `Slurm.resume`: the node a rank was lost on gets
`scontrol update NodeName=N State=DRAIN Reason="clockfabric: WHY"`, so the scheduler gives it no
new job, and `State=RESUME` once the re-admission audit passes. Only nodes drained here are
resumed: one an administrator or the prolog's audit drained stays as they left it.

scontrol runs on a thread of its own, in the order asked: the coordinator's tick never waits
on slurmctld. A failure (no scontrol, slurmctld unreachable, a refused node) is one line in an
event, never an exception in the coordinator.
"""

from __future__ import annotations

import queue
import re
import subprocess
import threading
from collections.abc import Callable
from typing import Any

REASON_PREFIX = "clockfabric: "
REASON_CHARS = 200  # sinfo's reason column and slurmctld's log stay readable
TIMEOUT_S = 30.0
NODE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")  # a Slurm node name: never an option, never a second key

Runner = Callable[..., subprocess.CompletedProcess]


def node_of(member: str) -> str:
    """The Slurm node a member ran on: its name, less the /LOCAL_RANK of several tasks a node."""
    return member.split("/", 1)[0]


def reason(why: str) -> str:
    """One bounded line: newlines and control characters become spaces."""
    line = " ".join("".join(c if c.isprintable() else " " for c in why).split())
    return (REASON_PREFIX + line)[:REASON_CHARS]


class Slurm:
    """Drains and resumes a job's nodes through scontrol; events go to `on_event(kind, **fields)`."""

    def __init__(self, on_event: Callable[..., None], *, scontrol: str = "scontrol",
                 run: Runner = subprocess.run, timeout_s: float = TIMEOUT_S):
        self.on_event, self.scontrol, self.run, self.timeout_s = on_event, scontrol, run, timeout_s
        self.drained: set[str] = set()  # nodes this job drained: the only ones it resumes
        self.todo: queue.Queue[tuple[str, str, str] | None] = queue.Queue()
        self.worker = threading.Thread(target=self._work, name="train slurm", daemon=True)

    def start(self) -> Slurm:
        self.worker.start()
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        """What was asked is done first (a drain asked just before the job ended still happens)."""
        if self.worker.is_alive():
            self.todo.put(None)
            self.worker.join(timeout_s)

    def drain(self, member: str, why: str) -> None:
        self.todo.put(("drain", node_of(member), why))

    def resume(self, member: str) -> None:
        self.todo.put(("resume", node_of(member), ""))

    def _work(self) -> None:
        while (item := self.todo.get()) is not None:
            self.do(*item)

    def do(self, action: str, node: str, why: str) -> bool:
        """Run one drain or resume now (in the caller's thread); whether scontrol did it."""
        if not NODE.fullmatch(node):
            self._failed(action, node, f"{node!r} is not a Slurm node name")
            return False
        if action == "resume" and node not in self.drained:
            return False  # drained by someone else, or never: theirs to resume
        fields: dict[str, Any] = {"node": node}
        argv = [self.scontrol, "update", f"NodeName={node}"]
        if action == "drain":
            fields["reason"] = reason(why)
            argv += ["State=DRAIN", f"Reason={fields['reason']}"]
        else:
            argv += ["State=RESUME"]
        try:
            done = self.run(argv, capture_output=True, text=True, timeout=self.timeout_s)
        except FileNotFoundError:
            self._failed(action, node, f"{self.scontrol} not found: is Slurm's client installed here?")
            return False
        except (OSError, subprocess.SubprocessError) as e:
            self._failed(action, node, f"{type(e).__name__}: {e}")
            return False
        if done.returncode != 0:
            said = (done.stderr or done.stdout or "").strip().splitlines()
            self._failed(action, node, f"scontrol exited {done.returncode}: {said[0] if said else 'no message'}")
            return False
        if action == "drain":
            self.drained.add(node)
        else:
            self.drained.discard(node)
        self.on_event("slurm drained" if action == "drain" else "slurm resumed", **fields)
        return True

    def _failed(self, action: str, node: str, why: str) -> None:
        self.on_event("slurm failed", node=node, action=action, why=" ".join(why.split())[:300])
