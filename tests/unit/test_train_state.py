"""A rank's training state: captured, carried as bytes and restored bit-equal."""

import random

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from clockfabric.train import state  # noqa: E402


def model_and_optimizer(seed: int):
    torch.manual_seed(seed)
    module = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.BatchNorm1d(16), torch.nn.Linear(16, 3))
    opt = torch.optim.Adam(module.parameters(), lr=0.01)
    return module, opt


def train_steps(module, opt, steps: int) -> None:
    for _ in range(steps):
        x = torch.randn(4, 8)
        opt.zero_grad()
        module(x).square().mean().backward()
        opt.step()


def test_state_round_trips_bit_equal_and_the_next_step_matches():
    a, opt_a = model_and_optimizer(0)
    train_steps(a, opt_a, 3)  # optimizer moments and BatchNorm running stats are non-trivial now
    random.seed(7)
    np.random.seed(7)
    blob = state.to_bytes(state.capture(a, opt_a, step=3, position=3))

    b, opt_b = model_and_optimizer(1)  # different weights, no optimizer state yet
    assert state.digest(b) != state.digest(a)
    torch.manual_seed(99)
    random.seed(1)
    step, position = state.restore(state.from_bytes(blob), b, opt_b)
    assert (step, position) == (3, 3)
    assert state.digest(b) == state.digest(a)
    assert random.random() == (random.seed(7), random.random())[1]  # Python's generator came along

    # the RNG came along too: the same next step on both gives the same bits
    rng = torch.get_rng_state()
    train_steps(b, opt_b, 1)
    torch.set_rng_state(rng)
    train_steps(a, opt_a, 1)
    assert state.digest(b) == state.digest(a)


def test_snapshot_is_a_private_copy():
    module, opt = model_and_optimizer(0)
    train_steps(module, opt, 1)
    before = state.digest(module)
    undo = state.snapshot(module, opt, step=1, position=1)
    train_steps(module, opt, 1)
    assert state.digest(module) != before
    assert state.restore(undo, module, opt) == (1, 1)
    assert state.digest(module) == before
