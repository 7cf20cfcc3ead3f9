"""Spine claims (collective/claims.py): the ledger's choices, and the ask/answer over real UDP on loopback."""

import json
import socket
import threading

from clockfabric.collective import claims
from clockfabric.collective.claims import Ledger
from clockfabric.collective.placement import by_hops, paths_for_turn
from clockfabric.probe.paths import Path


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_a_second_job_takes_the_spines_the_first_left_light():
    clock = Clock()
    ledger = Ledger(ttl_s=60, clock=clock)
    assert ledger.place("a/0", [(2, ["s0", "s1"]), (1, ["s0", "s1"])]) == [["s0", "s1"], ["s0"]]
    assert (ledger.load("s0"), ledger.load("s1")) == (2, 1)
    # job b: one subflow goes where a is lighter; three spread, lightest first
    assert ledger.place("b/0", [(1, ["s0", "s1"])]) == [["s1"]]
    assert ledger.place("c/0", [(3, ["s0", "s1", "s2"])]) == [["s2", "s2", "s0"]]
    ledger.release("a/0")
    assert (ledger.load("s0"), ledger.load("s1"), ledger.load("s2")) == (1, 1, 2)
    clock.now += 61  # unreleased claims expire (a job that died never says so)
    assert ledger.load("s2") == 0 and ledger.shared() == []


def test_claims_heard_from_the_leaf_count_and_fade():
    clock = Clock()
    ledger = Ledger(clock=clock)
    ledger.hear("h1", [["x/1", "s0", 4]])
    assert ledger.place("y/0", [(1, ["s0", "s1"])]) == [["s1"]]
    assert ledger.shared() == [["y/0", "s1", 1]]  # only our own claims are told on
    ledger.hear("h1", [])  # h1's job ended
    assert ledger.load("s0") == 0
    ledger.hear("h1", [["x/1", "s0", 4]])
    clock.now += claims.HEARD_TTL_S + 0.1  # h1 went quiet: its word stands only so long
    assert ledger.load("s0") == 0


def test_ask_gets_the_agents_answer_and_falls_back_without_one():
    agent = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    agent.bind(("127.0.0.1", 0))
    seen = []

    def answer():
        data, src = agent.recvfrom(65_000)
        msg = json.loads(data)
        seen.append(msg)
        agent.sendto(json.dumps({"t": "placed", "job": msg["job"], "hops": [["10.9.0.1"]]}).encode(), src)

    t = threading.Thread(target=answer)
    t.start()
    where = agent.getsockname()
    got = claims.ask(where, "7/1", [(1, ["10.9.0.0", "10.9.0.1"])], source="127.0.0.1")
    t.join(5)
    agent.close()
    assert got == [["10.9.0.1"]] and seen[0] == {"t": "place", "job": "7/1", "want": [[1, ["10.9.0.0", "10.9.0.1"]]]}
    # no agent on that port: refused at once, so the rank places on its own
    assert claims.ask(where, "7/1", [(1, ["a", "b"])], source="127.0.0.1", timeout_s=5) is None


def test_by_hops_uses_each_port_once():
    paths = [Path("s0", 61000), Path("s1", 61001), Path("s0", 61002)]
    assert by_hops(paths, ["s0", "s0", "s1"]) == [Path("s0", 61000), Path("s0", 61002), Path("s1", 61001)]
    assert by_hops(paths, ["s1", "s1"]) == [Path("s1", 61001), Path("s0", 61000)]  # out of s1 ports: any left


def test_ranks_under_one_leaf_take_disjoint_spines_while_there_are_enough():
    four = [Path(f"s{i}", 61000 + i) for i in range(4)]
    hops = [[p.hop for p in paths_for_turn(four, turn, 2)] for turn in range(3)]
    assert hops == [["s0", "s1"], ["s2", "s3"], ["s0", "s1"]]  # a third rank shares evenly
    two = four[:2]
    assert [[p.hop for p in paths_for_turn(two, turn, 2)] for turn in range(2)] == [["s0", "s1"], ["s0", "s1"]]
    assert [[p.hop for p in paths_for_turn(two, turn, 1)] for turn in range(2)] == [["s0"], ["s1"]]


def test_loads_gets_the_agents_counts_and_none_without_a_fitting_answer():
    agent = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    agent.bind(("127.0.0.1", 0))
    seen = []
    replies = [{"t": "loads", "job": "7/1", "loads": [4, 2]}, {"t": "loads", "job": "7/1", "loads": [4]}]

    def answer():
        for reply in replies:
            data, src = agent.recvfrom(65_000)
            seen.append(json.loads(data))
            agent.sendto(json.dumps(reply).encode(), src)

    t = threading.Thread(target=answer)
    t.start()
    where = agent.getsockname()
    got = claims.loads(where, "7/1", ["10.9.0.0", "10.9.0.1"], source="127.0.0.1")
    short = claims.loads(where, "7/1", ["10.9.0.0", "10.9.0.1"], source="127.0.0.1")  # a count short: unusable
    t.join(5)
    agent.close()
    assert got == [4, 2] and short is None
    assert seen[0] == {"t": "loads", "job": "7/1", "hops": ["10.9.0.0", "10.9.0.1"]}
    assert claims.loads(where, "7/1", ["a"], source="127.0.0.1", timeout_s=5) is None  # no agent: refused at once


def test_a_port_budget_is_shared_among_the_subflows_on_it():
    assert claims.share(128 << 10, 2, 4096) == 64 << 10  # a job alone: wide windows
    assert claims.share(128 << 10, 8, 4096) == 16 << 10  # two all-to-alls crowd the uplink: narrow ones
    assert claims.share(128 << 10, 0, 4096) == 128 << 10  # nothing counted yet: ours is the only one
    assert claims.share(16 << 10, 100, 4096) == 4096  # never under the floor
