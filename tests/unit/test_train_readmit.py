"""Drained hosts: audited alone with a backoff, told once per change, returned to the spare pool
on a pass; the coordinator drains every replaced rank's host and refuses it as a spare."""

from types import SimpleNamespace

import pytest

from clockfabric.errors import ClockfabricError
from clockfabric.train.launch import TrainJob
from clockfabric.train.readmit import AuditResult, Readmission
from tests.fakes.train_job import kinds, lose

HOSTS = ["h0", "h1", "h2", "h3", "h4"]
DOWN = {"backend.nic_active": "h1:eth0: link down (operstate lowerlayerdown, carrier False)"}


class Fixture:
    """A Readmission over a scripted audit and a clock the test moves."""

    def __init__(self, results):
        self.now, self.results, self.audited, self.returned, self.events = 100.0, list(results), [], [], []
        self.readmission = Readmission(self.audit, self.returned.append, self.event, lambda: ["h0", "h1", "h2"],
                                       interval_s=5.0, max_interval_s=15.0, clock=lambda: self.now)

    def audit(self, host, peers):
        self.audited.append((host, peers, self.now))
        result = self.results.pop(0)
        if isinstance(result, Exception):
            raise result
        return result

    def event(self, kind, **fields):
        self.events.append({"event": kind, **fields})


def failing(found=None):
    return AuditResult(["frontend.reach", "backend.nic_active"], dict(DOWN if found is None else found))


def test_a_drained_host_is_audited_at_once_then_with_a_doubling_wait_and_told_once_per_change():
    f = Fixture([failing(), failing(), failing(), failing({"frontend.reach": "no answer"})])
    f.readmission.drain("h1", "its process exited with status -9")
    assert f.readmission.why("h1") == "its process exited with status -9"
    f.readmission.step()
    assert f.audited == [("h1", ["h0", "h2"], 100.0)]  # alone, against the peers that are not itself
    assert f.events == [{"event": "audit failed", "host": "h1", "failing": DOWN,
                         "checks": ["frontend.reach", "backend.nic_active"], "next_s": 5.0}]
    f.now += 4.9
    f.readmission.step()
    assert len(f.audited) == 1  # not due yet
    for wait in (0.1, 10.0, 15.0):  # 5 s, then 10 s, then at most 15 s
        f.now += wait
        f.readmission.step()
    assert [t for _, _, t in f.audited] == [100.0, 105.0, 115.0, 130.0]
    assert [e["event"] for e in f.events] == ["audit failed", "audit failed"]  # the same failure is told once
    assert f.events[1]["failing"] == {"frontend.reach": "no answer"}
    assert f.readmission.why("h1") and not f.returned


def test_a_pass_returns_the_host_and_says_which_checks_ran():
    f = Fixture([failing(), AuditResult(["frontend.reach", "backend.nic_active"])])
    f.readmission.drain("h1", "cut off")
    f.readmission.step()
    f.now += 5
    f.readmission.step()
    assert f.returned == ["h1"] and f.readmission.why("h1") is None
    assert f.events[-1] == {"event": "audit passed", "host": "h1", "checks": ["frontend.reach", "backend.nic_active"]}
    f.now += 60
    f.readmission.step()
    assert len(f.audited) == 2  # returned: no longer audited


def test_an_audit_that_cannot_run_is_a_failure_tried_again():
    f = Fixture([OSError("no such namespace"), AuditResult(["frontend.reach"])])
    f.readmission.drain("h1", "frozen")
    f.readmission.step()
    assert f.events[0]["event"] == "audit failed" and "no such namespace" in f.events[0]["failing"]["audit"]
    f.now += 5
    f.readmission.step()
    assert f.returned == ["h1"]


def test_without_an_audit_a_drained_host_stays_drained():
    readmission = Readmission(None, pytest.fail, pytest.fail, list)
    readmission.drain("h1", "cut off")
    readmission.step()
    assert readmission.why("h1") == "cut off"


def test_a_bad_interval_is_refused():
    with pytest.raises(ValueError, match="interval"):
        Readmission(None, print, print, list, interval_s=0)


# ---- the coordinator -------------------------------------------------------------------------
@pytest.fixture
def job(make_coordinator):
    """Its audit answers what `verdicts` holds."""
    verdicts: list[AuditResult] = []
    j = make_coordinator(HOSTS, HOSTS[:3], ["h3"], audit=lambda host, peers: verdicts.pop(0))
    j.verdicts = verdicts
    return j


def test_a_replaced_host_is_drained_refused_as_a_spare_and_returned_once_it_passes(job):
    lost = job.ranks[1]
    lose(lost)
    job.tick()
    drained = next(e for e in job.events if e["event"] == "drained")
    assert drained["host"] == "h1" and drained["why"].startswith("its process exited")
    assert kinds(job).index("detected") < kinds(job).index("drained") < kinds(job).index("spare chosen")
    with pytest.raises(ClockfabricError, match="h1 is drained .*`clockfabric audit` passes"):
        TrainJob.add_spare(job, "h1")  # the launcher's: the stand-in coordinator spawns no host itself
    assert "h1" not in [m.host for m in job.spares]

    job.verdicts += [failing(), AuditResult(["frontend.reach", "backend.nic_active"])]
    job.readmission.step()
    assert kinds(job)[-1] == "audit failed" and job.events[-1]["failing"] == DOWN
    assert job.readmission.why("h1") and not job.spares  # h3 took rank 1; h1 is no spare yet
    job.readmission.hosts["h1"].due = 0  # due now
    job.board.write_report("h1", {})  # the lost process's last report
    job.readmission.step()
    assert kinds(job)[-2:] == ["audit passed", "returned to spare pool"]
    job.tick()  # the spare started there registers, and is admitted
    assert [m.host for m in job.spares] == ["h1"] and job.readmission.why("h1") is None
    assert "10.0.0.2:9" not in job.gen.lost  # it may join again

    second = job.ranks[2]
    lose(second)
    job.tick()  # the returned host takes the next lost rank's place
    gen = job.board.generation()
    assert gen.hosts == ["h0", "h3", "h1"] and gen.lost == ["10.0.0.3:9"]
    assert job.readmission.why("h2") is not None


def test_a_host_returning_while_the_job_stops_starts_nothing(job):
    job.stopping.set()
    job._return("h4")
    assert "returned to spare pool" not in kinds(job) and [m.host for m in job.spares] == ["h3"]


# ---- the audit the command line builds ----------------------------------------------------------
def test_only_what_is_found_on_the_drained_host_fails_it():
    from clockfabric.audit.model import CheckResult, Finding, Report, Verdict
    from clockfabric.train.readmit_audit import failing_on

    def result(check_id, *findings):
        return CheckResult(check_id, check_id.split(".")[0], check_id, Verdict.FAIL, "", list(findings))

    report = Report("lab t", ["h1", "h0"], [
        result("backend.nic_active", Finding(Verdict.FAIL, "link down", host="h1", device="eth0"),
               Finding(Verdict.PASS, "up", host="h1", device="eth1")),
        result("frontend.mtu", Finding(Verdict.FAIL, "MTU 9000", host="h0", device="eth0")),  # the peer's own
        result("backend.connectivity", Finding(Verdict.FAIL, "cannot reach h1:eth1", host="h0", device="eth1",
                                               evidence={"peer": "h1:eth1"})),
        result("configuration.software", Finding(Verdict.WARN, "kernel differs", host="h1")),
        result("configuration.gpu", Finding(Verdict.UNKNOWN, "timed out after 300 s")),
    ], 0, 1.0)
    assert failing_on(report, "h1") == {
        "backend.nic_active": "h1:eth0: link down",
        "backend.connectivity": "h0:eth1: cannot reach h1:eth1",
        "configuration.gpu": "fleet: timed out after 300 s",
    }


def test_train_run_gives_the_coordinator_an_audit_unless_told_not_to(monkeypatch, tmp_path):
    from typer.testing import CliRunner

    from clockfabric.cli import train_cmds

    reach = SimpleNamespace(hosts={}, topology=SimpleNamespace(), audit={}, fleet="lab t", runner=None,
                            serve_on=None, local=True)
    monkeypatch.setattr("clockfabric.cli.train_reach.lab_reach", lambda name: reach)
    given = {}

    class Job:
        def __init__(self, hosts, ranks, spares, argv, folder, **options):
            given.update(options)

        def start(self):
            return self

        def wait(self, timeout_s):
            return True

        def stop(self):
            pass

    monkeypatch.setattr("clockfabric.train.launch.TrainJob", Job)
    script = tmp_path / "train.py"
    script.write_text("")
    base = ["run", "--hosts", "h0,h1,h2", "--spares", "1", "--no-watch-gpus", "--dir", str(tmp_path / "job")]
    result = CliRunner().invoke(train_cmds.app, [*base, "--readmit-every", "2", "--", str(script)])
    assert result.exit_code == 0, result.output
    assert callable(given["audit"]) and given["readmit_s"] == 2.0
    result = CliRunner().invoke(train_cmds.app, [*base, "--no-readmit", "--", str(script)])
    assert result.exit_code == 0, result.output
    assert given["audit"] is None
