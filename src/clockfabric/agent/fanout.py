"""One message to each of many hosts, spread out in time instead of sent as one burst.

The solver answers every host after each solve: at 32 hosts that is ~150 KB leaving one NIC at
once, at 100,000 hosts ~500 MB. Where the solver's own link is busy (a training job's traffic
fills its FIFO, as TCP does), a burst that size overflows the queue and the messages at its
tail are lost, and the same hosts are at the tail of every burst: their maps stop for seconds,
and they take the solver for dead. Sent one after another `spread_s / hosts` apart, each map
meets the queue TCP leaves, not one of its own making.

A newer message to a host replaces one still waiting (a map superseded by the next solve's is
never sent), so what waits is at most one message a host, whatever the solves' pace.

Each wake that sends costs the caller's loop a poll, so messages due within WAKE_S of a send
wait for one wake and leave together, each late by less than WAKE_S, none early: at 32 hosts
over a quarter of a second, 13 wakes instead of 32, each sending 20 ms of the spread.
"""

from __future__ import annotations

import math
from collections.abc import Callable

WAKE_S = 0.02  # the least time between two wakes that send


class Fanout:
    def __init__(self, send: Callable[[str, dict], None], hosts: int, spread_s: float):
        """`spread_s`: how long a message to each of `hosts` takes to leave, in all."""
        self._send = send
        self.gap_s = spread_s / max(1, hosts)
        self._waiting: dict[str, dict] = {}  # host -> its newest message, oldest host first
        self._next_s = -math.inf  # when the next message may leave
        self._sent_s = -math.inf  # when the last wake that sent was
        self._spell = False  # a message was put while none waited
        self.replaced = 0  # messages superseded before they left

    def put(self, host: str, msg: dict) -> None:
        if host in self._waiting:
            self.replaced += 1
        elif not self._waiting:
            self._spell = True  # the first after an idle spell: it leaves now, no sooner
        self._waiting[host] = msg

    def waiting(self, host: str) -> dict | None:
        """The message to `host` not yet sent, if any."""
        return self._waiting.get(host)

    def flush(self, now_s: float) -> float:
        """Send what is due by now; when the next message is due (inf: none waits)."""
        if self._spell:  # no credit saved up while idle; a late wake within a spell catches up
            self._next_s, self._spell = max(self._next_s, now_s), False
        if self._waiting and self._next_s <= now_s:
            self._sent_s = now_s
        while self._waiting and self._next_s <= now_s:
            host = next(iter(self._waiting))
            self._send(host, self._waiting.pop(host))
            self._next_s += self.gap_s
        return max(self._next_s, self._sent_s + WAKE_S) if self._waiting else math.inf

    def __len__(self) -> int:
        return len(self._waiting)
