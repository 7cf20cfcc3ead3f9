"""A replaced rank's host is drained until `clockfabric audit` passes on it, then is a spare
again: cut off, it fails the audit (its links are down) and is no spare; its links back, it
passes, returns to the pool and takes the next lost rank's place, the job carrying on with no
step lost and the parameters bit-equal to a failure-free run. The next rank's host is cut off
as soon as the job has resumed from the first loss: both cut hosts fail their audit, no spare
is left, and the job waits (paused) until the mended one returns, however long that takes."""

import time

import pytest

from clockfabric.audit import expect
from clockfabric.errors import ClockfabricError
from clockfabric.lab import impair
from clockfabric.lab.training import lab_host_audit
from clockfabric.topology import multirail
from clockfabric.train import report
from tests.lab.test_spares import ARGS, STEPS, run


def wait_for(job, kind: str, host: str | None = None, timeout_s: float = 60) -> dict:
    deadline = time.monotonic() + timeout_s
    while not (found := [e for e in job.events if e["event"] == kind and e.get("host") == host]):
        assert time.monotonic() < deadline, (f"no {kind!r} event for {host}", job.events)
        time.sleep(0.05)
    return found[0]


def test_a_cut_off_host_returns_to_the_spares_only_once_its_audit_passes(make_lab, tmp_path, failure_free):
    lab = make_lab(multirail(4, 2, 2, 2))
    reference = failure_free(ARGS)
    seen = {}

    def cut(host: str, up: bool = False) -> None:
        for link in lab.topology.links:
            if host in (link.a.node, link.b.node):
                impair.set_link(lab, link, up)

    def cut_twice_then_mend_one(job):
        cut("h1")
        wait_for(job, "resumed")  # h3 holds rank 1
        seen["second failure at step"] = max(report.job_steps(report.records(job.folder)))
        cut("h2")  # no step completes without h2: the job pauses where it resumed
        wait_for(job, "paused")  # h1 and h2 are drained: no spare is left
        failed = wait_for(job, "audit failed", "h1")
        assert "backend.nic_active" in failed["failing"] and "link down" in failed["failing"]["backend.nic_active"]
        assert "h1" not in [m.host for m in job.spares] and job.ranks[1].host == "h3"
        with pytest.raises(ClockfabricError, match="h1 is drained"):
            job.add_spare("h1")
        wait_for(job, "audit failed", "h2")
        cut("h1", up=True)

    job, recs, _ = run(lab, tmp_path / "readmit", ["h3"], cut_twice_then_mend_one,
                       audit=lab_host_audit(lab, expect.defaults()), readmit_s=1.0)
    assert report.job_steps(recs) == list(range(STEPS)), "a completed step was lost"
    assert report.digests(recs) == reference  # bit-equal to the failure-free run
    assert [m.host for m in job.ranks] == ["h0", "h3", "h1"]  # the returned host took rank 2
    kinds = [(e["event"], e.get("host")) for e in job.events]
    assert kinds.index(("drained", "h1")) < kinds.index(("audit failed", "h1")) \
        < kinds.index(("audit passed", "h1")) < kinds.index(("returned to spare pool", "h1"))
    assert kinds.index(("paused", None)) < kinds.index(("returned to spare pool", "h1"))
    assert ("returned to spare pool", "h2") not in kinds  # still cut off
    passed = next(e for e in job.events if e["event"] == "audit passed")
    assert {"frontend.reach", "backend.nic_active", "backend.connectivity"} <= set(passed["checks"])
    chosen = [e for e in job.events if e["event"] == "spare chosen"]
    assert [(e["rank"], e["host"]) for e in chosen] == [(1, "h3"), (2, "h1")]
    assert seen["second failure at step"] < STEPS - 1, "the job ended before the second failure"
    print(f"second failure at step {seen['second failure at step']} of {STEPS}")
