"""CPU seconds by stage: what each part of the workload service costs the host, counted as it
runs (time.thread_time around each stage, a few hundred nanoseconds a call, a few dozen calls a
second), so a live agent's own state says where its CPU goes."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager

# the stages, in the order a sampled packet meets them
CAPTURE = "capture"  # reading sampled packets from the kernel
MATCH = "match"  # records of both ends matched into delays
SEND = "send"  # this host's records encoded and sent to the flows' far ends
RECEIVE = "receive"  # peers' records decoded
FLOWS = "flows"  # jobs and flows read from /proc and sock_diag
WINDOW = "window"  # windows closed into stats, old records forgotten
PATHS = "paths"  # flows' paths traced (on the tracer's thread)
QUEUES = "queues"  # the NICs' own egress queues, read at random instants (qos.backlog)


class StageCpu:
    """CPU seconds by stage (of the thread that ran each)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        start = time.thread_time()
        try:
            yield
        finally:
            self.seconds[name] += time.thread_time() - start

    def add(self, name: str, seconds: float) -> None:
        self.seconds[name] += seconds

    def total(self) -> float:
        return sum(self.seconds.values())

    def as_dict(self) -> dict[str, float]:
        return dict(self.seconds)
