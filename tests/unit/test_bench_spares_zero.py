"""bench spares-zero's figures: ratios within each pair, and the plain-DDP bar called out of
reach when ZeRO-1 itself, with no wrapper, is over it."""

from clockfabric.bench.spares.zero import Measured


def measured(ours, bare, ddp) -> Measured:
    return Measured(step_s={"ours": ours, "bare": bare, "ddp": ddp}, buddy_share=[0.004, 0.006],
                    buddy_bytes=1_048_864)


def test_the_ratios_are_taken_within_each_pair():
    got = measured([1.0, 2.2], [1.0, 2.0], [0.5, 1.0])
    assert got.ratios("bare") == [1.0, 1.1] and got.ratios("ddp") == [2.0, 2.2]
    against_bare, against_ddp = got.targets()
    assert against_bare.value == 1.05 and against_bare.bar == 1.02 and not against_bare.met
    assert "holds 1049 kB per rank" in against_bare.note and "0.5%" in against_bare.note
    assert against_ddp.baseline == 2.0 and not against_ddp.possible  # ZeRO-1 alone is twice plain DDP here


def test_within_the_bar_against_zero_without_the_wrapper():
    bare_target, ddp_target = measured([1.01, 0.99, 1.0], [1.0, 1.0, 1.0], [1.0, 1.0, 1.0]).targets()
    assert bare_target.met and bare_target.interval is not None
    assert ddp_target.possible and ddp_target.met
    assert measured([1.0], [1.0], [1.0]).result()["ratio_bare"] == [1.0]
