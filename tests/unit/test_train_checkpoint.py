"""The disk checkpoint of last resort: whole files only, the last step every rank wrote, the
last two kept."""

import pytest

torch = pytest.importorskip("torch")

from clockfabric.errors import ClockfabricError  # noqa: E402
from clockfabric.train.checkpoint import Checkpoints  # noqa: E402


def test_latest_is_the_last_step_every_rank_wrote(tmp_path):
    saved = Checkpoints(tmp_path, every=5)
    assert saved.latest(3) is None
    for step in (5, 10):
        for rank in range(3):
            saved.write(step, rank, {"step": step, "rank": rank, "w": torch.full((2,), float(rank))})
    saved.write(15, 0, {"step": 15})  # a failure before ranks 1 and 2 wrote step 15
    assert saved.latest(3) == 10
    got = saved.read(10, 2)
    assert got["rank"] == 2 and torch.equal(got["w"], torch.full((2,), 2.0))
    assert not list(tmp_path.glob("*.tmp"))  # written aside, then renamed


def test_each_rank_keeps_its_last_two(tmp_path):
    saved = Checkpoints(tmp_path, every=1)
    for step in (1, 2, 3):
        saved.write(step, 0, {"step": step})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step00000002.rank0.pt", "step00000003.rank0.pt"]


def test_due_every_k_completed_steps_and_k_checked():
    saved = Checkpoints.__new__(Checkpoints)
    saved.every = 4
    assert [c for c in range(10) if saved.due(c)] == [4, 8]
    with pytest.raises(ClockfabricError, match="at least 1"):
        Checkpoints("/nonexistent", every=0)
