"""What a user asks of the controller while `bench fleet-scale`'s fleet runs: the OWD heatmap as
an open page asks it, and `job why` of a job of each size the fleet runs."""

from __future__ import annotations

import math
import time

import httpx

from clockfabric.bench.controller.scale import TOKEN
from clockfabric.bench.controller.scale_load import job_of

HEATMAP_ASKS = 30  # an open page's asks, one a second, after its first heatmap
HEATMAP_FIRST_GIVE_UP_S = 120.0
WHY_ASKS = 5  # a job of each size, asked this many times


def heatmap_page(url: str) -> dict:
    """The heatmap route as one open page asks it: the time to its first heatmap read since the
    page opened (a heatmap read before, at the last step, may be served at once, and the page asks
    again every 0.5 s until the controller has read a new one), then once a second for
    HEATMAP_ASKS s: each answer's latency, the age of what it showed and how long its reading took."""
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"},
                      timeout=HEATMAP_FIRST_GIVE_UP_S) as client:
        def ask() -> tuple[float, httpx.Response]:
            t0 = time.perf_counter()
            r = client.get("/api/v1/dashboard/owd", params={"stat": "p50"})
            return time.perf_counter() - t0, r

        t0 = time.perf_counter()
        while time.perf_counter() - t0 < HEATMAP_FIRST_GIVE_UP_S:
            r = ask()[1]
            if r.status_code not in (200, 202) or (r.status_code == 200
                                                    and r.json()["age_s"] <= time.perf_counter() - t0):
                break
            time.sleep(0.5)
        if r.status_code != 200:
            return {"heatmap_first_s": None, "heatmap_p95_s": None, "heatmap_age_max_s": None,
                    "heatmap_read_s": None, "heatmap_pairs": 0, "heatmap_refused": r.text[:200]}
        first = time.perf_counter() - t0
        lat, ages, reads = [], [], [r.json()["read_s"]]
        for _ in range(HEATMAP_ASKS):
            took, r = ask()
            lat.append(took if r.status_code == 200 else math.inf)
            ages.append(r.json()["age_s"] if r.status_code == 200 else math.inf)
            reads.append(r.json()["read_s"] if r.status_code == 200 else math.inf)
            time.sleep(max(0.0, 1.0 - took))
    lat.sort()
    return {"heatmap_first_s": round(first, 3), "heatmap_p95_s": round_ms(finite(lat[math.ceil(0.95 * len(lat)) - 1])),
            "heatmap_age_max_s": finite(max(ages)), "heatmap_read_s": finite(max(reads)),
            "heatmap_pairs": r.json().get("pairs", 0)}


def why_asks(url: str, hosts: int, seconds: float) -> dict:
    """`job why` as a user asks it, for the first job of each size the fleet runs (scale_load's
    JOB_SIZES) in turn, WHY_ASKS times each, one after another, none started after `seconds`:
    the latencies, and what the verdicts said."""
    jobs: dict[int, str] = {}
    for n in range(hosts):
        jobid, first, size = job_of(n)
        jobs.setdefault(min(size, hosts - first), jobid)
    lat: dict[str, list[float]] = {}
    verdicts: dict[str, str] = {}
    end = time.monotonic() + seconds
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60) as client:
        for size, jobid in [job for _ in range(WHY_ASKS) for job in sorted(jobs.items())]:  # sizes in turn
            if time.monotonic() >= end:
                break
            t0 = time.perf_counter()
            r = client.get(f"/api/v1/jobs/{jobid}/why", params={"since": "5m"})
            lat.setdefault(f"{size} hosts", []).append(time.perf_counter() - t0 if r.status_code == 200 else math.inf)
            verdicts[f"{size} hosts"] = r.json().get("verdict", r.text[:120]) if r.status_code == 200 \
                else f"HTTP {r.status_code}: {r.text[:120]}"
    every = sorted(x for xs in lat.values() for x in xs)
    return {"why_p95_s": round_ms(finite(every[math.ceil(0.95 * len(every)) - 1])) if every else None,
            "why_max_s": {k: round_ms(finite(max(v))) for k, v in lat.items()}, "why_verdicts": verdicts,
            "why_asks": len(every)}


def finite(x: float) -> float | None:
    """None for a read refused past its budget (JSON has no infinity)."""
    return x if math.isfinite(x) else None


def round_ms(x: float | None) -> float | None:
    """Seconds to the millisecond."""
    return None if x is None else round(x, 3)
