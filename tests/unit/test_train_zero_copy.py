"""A ZeRO-1 shard as it is sent to a mirror when a group forms: flattened to one byte tensor and
back bit-equal, not following the live state."""

import pytest

torch = pytest.importorskip("torch")

from clockfabric.train import zero  # noqa: E402  (after the skip: it imports torch)


def adam_state() -> dict:
    module = torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.Linear(4, 3))
    opt = torch.optim.Adam(module.parameters(), lr=0.01)
    for _ in range(2):
        for p in module.parameters():
            p.grad = torch.randn_like(p)
        opt.step()
    return opt.state_dict()


def test_flatten_round_trips_every_tensor_bit_equal_with_its_dtype_and_shape():
    original = adam_state()
    original["state"][0]["extra"] = torch.arange(3, dtype=torch.int16).reshape(3, 1)
    skeleton_len, flat = zero.flatten(original)
    assert flat.dtype == torch.uint8
    restored = zero.unflatten(skeleton_len, flat.clone())
    assert restored["param_groups"] == original["param_groups"]
    for index, entries in original["state"].items():
        for key, tensor in entries.items():
            got = restored["state"][index][key]
            assert got.dtype == tensor.dtype and got.shape == tensor.shape  # Adam's step is 0-dim
            assert got.numpy().tobytes() == tensor.numpy().tobytes()


def test_a_flat_copy_does_not_follow_the_live_state():
    original = adam_state()
    skeleton_len, flat = zero.flatten(original)
    original["state"][0]["exp_avg"].add_(1.0)  # the next optimizer step changes the live tensors in place
    restored = zero.unflatten(skeleton_len, flat)
    assert not torch.equal(restored["state"][0]["exp_avg"], original["state"][0]["exp_avg"])

