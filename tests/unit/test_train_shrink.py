"""The coordinator with no spare left and a job that may shrink (min_ranks): a generation of
the survivors, renumbered in rank order; below min_ranks it pauses as before."""

import subprocess
import sys
import time
from types import SimpleNamespace

import pytest

from clockfabric.errors import ClockfabricError
from clockfabric.train import control
from clockfabric.train.launch import Member, TrainJob

HOSTS = ["h0", "h1", "h2", "h3"]


def coordinator(tmp_path, ranks: list[str], min_ranks: int | None) -> TrainJob:
    """A coordinator over sleeping processes standing in for ranks (no lab, no torch, no spare)."""
    script = tmp_path / "train.py"
    script.write_text("")
    lab = SimpleNamespace(name="t", topology=SimpleNamespace(hosts={h: None for h in HOSTS}))
    j = TrainJob(lab, ranks, [], [str(script)], tmp_path / "job", min_ranks=min_ranks)  # type: ignore[arg-type]
    (j.folder / "beat").mkdir(parents=True)
    for rank, host in enumerate(ranks):
        proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
        j.ranks.append(Member(host, f"10.0.0.{rank + 1}:9", proc, j.folder / f"{host}.jsonl"))
        control.write_json(control.beat_path(j.folder, host),
                           {"name": host, "time": time.time(), "rank": rank, "done": False, "heard": {}})
    j.gen = control.Generation(0, control.RUNNING, list(ranks), [m.beat for m in j.ranks], "store.0")
    control.write_generation(j.folder, j.gen)
    return j


@pytest.fixture
def make(tmp_path):
    made = []

    def build(ranks, min_ranks):
        made.append(coordinator(tmp_path, ranks, min_ranks))
        return made[-1]

    yield build
    for j in made:
        for m in j.members():
            m.proc.kill()
            m.proc.wait()


def lose(m):
    m.proc.kill()
    m.proc.wait()


def test_a_lost_rank_with_no_spare_shrinks_the_world_and_renumbers_the_survivors(make):
    job = make(HOSTS, 2)
    lose(job.ranks[1])
    job.tick()
    gen = control.read_generation(job.folder)
    assert gen is not None and gen.number == 1 and gen.state == control.RUNNING
    assert gen.hosts == ["h0", "h2", "h3"] and gen.world == 3  # h2 is rank 1 now, h3 rank 2
    assert gen.store.endswith("store.1") and gen.lost == ["10.0.0.2:9"]
    assert [m.host for m in job.ranks] == gen.hosts and not job.vacant
    assert [e["event"] for e in job.events] == ["detected", "drained", "shrunk", "generation"]
    shrunk = job.events[2]
    assert shrunk["ranks"] == [1] and shrunk["world"] == 3

    lose(job.ranks[0])  # a second loss, judged on the renumbered ranks
    job.tick()
    gen = control.read_generation(job.folder)
    assert gen is not None and gen.hosts == ["h2", "h3"] and gen.number == 2
    assert job.events[-4]["rank"] == 0 and job.events[-4]["host"] == "h0"


def test_below_min_ranks_the_job_pauses_instead(make):
    job = make(HOSTS[:3], 3)
    lose(job.ranks[2])
    job.tick()
    gen = control.read_generation(job.folder)
    assert gen is not None and gen.state == control.PAUSED and gen.hosts == HOSTS[:3]
    assert "shrunk" not in [e["event"] for e in job.events] and job.vacant == [2]


def test_two_lost_at_once_shrink_together_when_enough_survive(make):
    job = make(HOSTS, 2)
    lose(job.ranks[0])
    lose(job.ranks[3])
    job.tick()
    gen = control.read_generation(job.folder)
    assert gen is not None and gen.hosts == ["h1", "h2"] and gen.state == control.RUNNING


@pytest.mark.parametrize("min_ranks", [0, 4])
def test_min_ranks_outside_the_job_is_one_clear_line(tmp_path, min_ranks):
    with pytest.raises(ClockfabricError, match="--min-ranks"):
        coordinator(tmp_path, HOSTS[:3], min_ranks)
