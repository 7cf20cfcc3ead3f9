"""A ZeRO-1 shard's copy: flattened to one byte tensor and back bit-equal, and a buddy whose
copy is a step behind hands over nothing rather than a stale shard."""

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
    back = zero.Copy.from_bytes(zero.Copy(7, skeleton_len, flat).to_bytes())
    assert back.completed == 7
    restored = back.state_dict()
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


def test_a_copy_a_step_behind_is_not_handed_over(monkeypatch):
    monkeypatch.setattr(zero.dist, "get_rank", lambda: 2)
    monkeypatch.setattr(zero.dist, "get_world_size", lambda: 3)
    sent = []

    def broadcast(data, source):
        sent.append((data, source))
        return data or b""

    monkeypatch.setattr(zero.group, "broadcast_bytes", broadcast)
    buddy = zero.Buddy()
    buddy.held = zero.Copy(4, *zero.flatten(adam_state()))  # rank 1's shard after 4 steps; the survivors did 5
    with pytest.raises(zero.ShardLost, match="not from step 5"):
        buddy.hand_over([5, -1, 5], None)
    assert sent == [(b"", 2)]  # every member learns it from the buddy's empty broadcast, none hangs
    buddy.held = zero.Copy(5, buddy.held.skeleton_len, buddy.held.flat)
    assert buddy.hand_over([5, -1, 5], None) > 0
