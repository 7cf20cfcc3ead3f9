"""Host clocks: the system clock, and virtual ones. A virtual clock has a known offset,
drift, random-walk wander and steps (each lab host runs on one), so clock sync has a ground
truth to be judged against.

An agent in host h reads only its own model (the file named by $CLOCKFABRIC_CLOCK) and
turns real kernel timestamps into h's local time; evaluation tools read every model.
All arithmetic is in integer nanoseconds where it matters: float64 cannot hold an epoch
timestamp to the nanosecond.
"""

from __future__ import annotations

import json
import os
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Protocol

CLOCK_ENV = "CLOCKFABRIC_CLOCK"
_BLOCK = 256  # wander knots (one per second) generated per random block
SET_READ_NS = 2_000  # a real-time read bracketed by monotonic ones no wider than this tells a step


class ClockSource(Protocol):
    """A host's clock as software there reads it: the system clock, or a lab host's model."""
    @property
    def host(self) -> str: ...

    def local_ns(self, real_ns: int) -> int:
        """The host's reading at true time real_ns."""
        ...

    def now_ns(self) -> int: ...

    def set_ns(self) -> int:
        """How far the clock has been set (stepped, by hand or by a daemon) since the host
        started: a change in it is a step of the clock, by that much, known at once."""
        ...


@dataclass(frozen=True)
class VirtualClock:
    host: str
    epoch_ns: int  # real time at which the model starts; drift and wander count from here
    offset_ns: int
    drift_ppm: float
    wander_ns: float = 0.0  # random walk: standard deviation of the change over one second
    seed: int = 0
    steps: tuple[tuple[int, int], ...] = ()  # (real time of the step, size), both ns
    rates: tuple[tuple[int, float], ...] = ()  # (real ns from which, drift in ppm from then): no step
    _walk: dict = field(default_factory=dict, compare=False, repr=False)

    def local_ns(self, real_ns: int) -> int:
        """This host's reading of its clock at true time real_ns."""
        elapsed = real_ns - self.epoch_ns
        value = real_ns + self.offset_ns + self._drifted(real_ns)
        if self.wander_ns and elapsed > 0:
            value += round(self._wander(elapsed / 1e9))
        return value + sum(size for at, size in self.steps if at <= real_ns)

    def _drifted(self, real_ns: int) -> int:
        """What the drift has added by real_ns: drift_ppm from the epoch, each rate from its time on."""
        total, since, ppm = 0, self.epoch_ns, self.drift_ppm
        for at, new in self.rates:
            if at > real_ns:
                break
            total += round((at - since) * ppm * 1e-6)
            since, ppm = at, new
        return total + round((real_ns - since) * ppm * 1e-6)

    def now_ns(self) -> int:
        return self.local_ns(time.time_ns())

    def set_ns(self) -> int:
        """The steps taken so far (a rate change is not one)."""
        now = time.time_ns()
        return sum(size for at, size in self.steps if at <= now)

    def with_step(self, at_real_ns: int, size_ns: int) -> VirtualClock:
        return VirtualClock(self.host, self.epoch_ns, self.offset_ns, self.drift_ppm, self.wander_ns,
                            self.seed, (*self.steps, (at_real_ns, size_ns)), self.rates)

    def with_rate(self, at_real_ns: int, drift_ppm: float) -> VirtualClock:
        """From at_real_ns on the clock runs at drift_ppm, without a step (a failing oscillator)."""
        if self.rates and at_real_ns < self.rates[-1][0]:
            raise ValueError("a rate change must come after the clock's last one")
        return VirtualClock(self.host, self.epoch_ns, self.offset_ns, self.drift_ppm, self.wander_ns,
                            self.seed, self.steps, (*self.rates, (at_real_ns, drift_ppm)))

    @property
    def drift_now_ppm(self) -> float:
        return self.rates[-1][1] if self.rates else self.drift_ppm

    # ---- the random walk, piecewise linear between one-second knots ------------------------
    def _wander(self, seconds: float) -> float:
        k = int(seconds)
        a, b = self._knot(k), self._knot(k + 1)
        return a + (seconds - k) * (b - a)

    def _knot(self, k: int) -> float:
        block, i = divmod(k, _BLOCK)
        return self._block(block)[i]

    def _block(self, block: int) -> list[float]:
        if block not in self._walk:
            start = 0.0 if block == 0 else self._block(block - 1)[-1]
            rng = random.Random(f"{self.seed}/{self.host}/{block}")
            values, v = [], start
            for _ in range(_BLOCK):
                values.append(v)
                v += rng.gauss(0.0, self.wander_ns)
            values.append(v)  # the first knot of the next block, so blocks join
            self._walk[block] = values
        return self._walk[block]

    # ---- files ------------------------------------------------------------------------------
    def to_json(self) -> str:
        d = asdict(self)
        d.pop("_walk")
        d["steps"] = [list(s) for s in self.steps]
        d["rates"] = [list(r) for r in self.rates]
        return json.dumps(d, indent=1)

    @classmethod
    def from_json(cls, text: str) -> VirtualClock:
        d = json.loads(text)
        d["steps"] = tuple(tuple(s) for s in d.get("steps", ()))
        d["rates"] = tuple((int(at), float(ppm)) for at, ppm in d.get("rates", ()))
        return cls(**d)

    @classmethod
    def load(cls, path: str | Path) -> VirtualClock:
        return cls.from_json(Path(path).read_text())


class SystemClock:
    """The host's own clock, for agents on real machines."""

    host = os.uname().nodename
    _set: int | None = None

    def local_ns(self, real_ns: int) -> int:
        return real_ns

    def now_ns(self) -> int:
        return time.time_ns()

    def set_ns(self) -> int:
        """The real-time clock less the monotonic one: the kernel moves it only when the clock is
        set (settimeofday, clock_settime, a leap second), never when it is slewed, which changes
        both alike. Of three reads, the one whose monotonic bracket is shortest (a preemption
        between the reads would add its length)."""
        reads = []
        for _ in range(3):
            a = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
            real = time.clock_gettime_ns(time.CLOCK_REALTIME)
            b = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
            reads.append((b - a, real - (a + b) // 2))
        bracket, value = min(reads)
        if bracket <= SET_READ_NS or self._set is None:
            self._set = value
        return self._set  # all three preempted: the last good read stands


def host_clock() -> VirtualClock | SystemClock:
    """The clock an agent should use: the model $CLOCKFABRIC_CLOCK names (a lab host's), or the real one."""
    path = os.environ.get(CLOCK_ENV)
    return VirtualClock.load(path) if path else SystemClock()


def random_clocks(hosts: list[str], *, max_offset_ns: int, max_drift_ppm: float, wander_ns: float,
                  seed: int, epoch_ns: int) -> dict[str, VirtualClock]:
    """Offsets and drifts drawn uniformly within the bounds, reproducibly from the seed."""
    rng = random.Random(seed)
    clocks = {}
    for h in hosts:
        offset = rng.randint(-max_offset_ns, max_offset_ns) if max_offset_ns else 0
        drift = round(rng.uniform(-max_drift_ppm, max_drift_ppm), 3) if max_drift_ppm else 0.0
        clocks[h] = VirtualClock(h, epoch_ns, offset, drift, wander_ns, seed)
    return clocks

