"""CollectiveOptions: every knob of a collective run, checked once as it is made, and carried
to the workers as JSON."""

import json
from dataclasses import FrozenInstanceError, replace

import pytest

from clockfabric.collective.options import CollectiveOptions
from clockfabric.errors import ClockfabricError


def test_defaults_follow_the_collective_and_the_scheduler():
    assert CollectiveOptions().algorithm == "ring"
    assert CollectiveOptions(collective="alltoall").algorithm == "pairwise"
    assert CollectiveOptions().placement == "hashed"
    assert CollectiveOptions(scheduler="owd").placement == "learned"  # owd's own placement
    assert CollectiveOptions(scheduler="owd", placement="hashed").placement == "hashed"


def test_values_are_normalised_once():
    o = CollectiveOptions(planes=[1, 0, 1], rcvbuf=0, rcvbuf_budget=0)
    assert o.planes == (1, 0) and o.rcvbuf is None and o.rcvbuf_budget is None
    # no spine to stand by on with hashed ports: standby is off, not an error
    assert CollectiveOptions(standby=True).standby is False
    assert CollectiveOptions(scheduler="owd", standby=True).standby is True
    with pytest.raises(FrozenInstanceError):
        CollectiveOptions().subflows = 2


@pytest.mark.parametrize("knobs, message", [
    ({"collective": "allgather"}, "--collective 'allgather' is unknown; use allreduce or alltoall"),
    ({"algorithm": "pairwise"}, "--algorithm 'pairwise' is not an all-reduce algorithm; use ring or hier"),
    ({"collective": "alltoall", "algorithm": "ring"},
     "--algorithm 'ring' is not an all-to-all algorithm; use pairwise or oneshot"),
    ({"subflows": 0}, "--subflows must be 1 to 64; got 0"),
    ({"subflows": 65}, "--subflows must be 1 to 64; got 65"),
    ({"planes": []}, "--planes is empty; give at least one plane, like 0,1"),
    ({"scheduler": "fastest"}, "no scheduler named 'fastest'; schedulers are ecmp, least-outstanding, owd"),
    ({"placement": "random"}, "--placement 'random' is unknown; use hashed or learned"),
    ({"rcvbuf": 1024}, "--rcvbuf must be 0 (the kernel's autotuning) or at least 8192 bytes; got 1024"),
    ({"rcvbuf_budget": 8191}, "--rcvbuf-budget must be 0 (none) or at least 8192 bytes; got 8191"),
    ({"iters": 0}, "--iters must be at least 1 and --warmup at least 0; got 0 and 1"),
    ({"warmup": -1}, "--iters must be at least 1 and --warmup at least 0; got 5 and -1"),
    ({"timeout_s": 0}, "--timeout must be above 0 seconds; got 0"),
    ({"port_base": 70000}, "--port-base must be a port, 1 to 65535; got 70000"),
])
def test_a_bad_knob_is_one_line_naming_it(knobs, message):
    with pytest.raises(ClockfabricError) as e:
        CollectiveOptions(**knobs)
    assert str(e.value) == message


def test_json_round_trip_keeps_every_field():
    o = CollectiveOptions(collective="alltoall", algorithm="oneshot", subflows=4, planes=(0, 1), scheduler="owd",
                          rcvbuf=32 << 10, rcvbuf_budget=192 << 10, standby=True, iters=3, warmup=2, timeout_s=7.5,
                          port_base=21000)
    text = o.to_json()
    assert json.loads(text)["planes"] == [0, 1]
    back = CollectiveOptions.from_json(text)
    assert back == o and back.planes == (0, 1)
    assert CollectiveOptions.from_json(CollectiveOptions().to_json()) == CollectiveOptions()
    assert replace(o, port_base=22000) == CollectiveOptions.from_json(replace(o, port_base=22000).to_json())


@pytest.mark.parametrize("text, message", [
    ("{subflows", "collective options are not JSON"),
    ("[1, 2]", "collective options must be a JSON object"),
    ('{"subflow": 2}', "collective options have no 'subflow'; they are algorithm, collective,"),
    ('{"subflows": "two"}', "collective options do not parse"),
    ('{"rcvbuf": 100}', "--rcvbuf must be 0"),  # checked as any options are
])
def test_bad_json_is_one_line(text, message):
    with pytest.raises(ClockfabricError, match=message.replace("(", r"\(").replace(")", r"\)")):
        CollectiveOptions.from_json(text)
