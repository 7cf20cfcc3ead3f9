"""`bench qos`'s figures (bench/qos/command.py): the reaction, from the bulk job's onset to the end of
the DDP steps it slowed, from the one running at the onset up to the first that is not; the bulk
job's share of what the rest of h0's traffic left of its link, and of what it left inside and
outside the DDP job's steps; the agents' CPU by thread."""

from __future__ import annotations

import os

import pytest

from clockfabric.bench.qos.command import bulk_share_of_left, cpu_note, main_thread_cpu_s, onset_target, reaction_s
from clockfabric.bench.qos.split import split, split_note
from clockfabric.bench.workload.cost_ddp import cpu_s

ALONE = 0.7


def steps(durations: list[float], t0: float = 100.0) -> list[tuple[float, float]]:
    out, t = [], t0
    for d in durations:
        out.append((t, d))
        t += d
    return out


def test_the_slowed_steps_after_the_onset_set_the_reaction():
    run = steps([ALONE] * 8 + [1.2, 0.9, ALONE, ALONE, ALONE])
    onset = 100.0 + 8 * ALONE + 0.1  # in step 8
    took, slowed = reaction_s(run, onset, ALONE)
    assert (slowed, took) == (2, pytest.approx(1.2 + 0.9 - 0.1))


def test_no_slowed_step_is_no_wait_and_steps_before_the_onset_do_not_count():
    run = steps([2.0] + [ALONE] * 10)  # a slow first step, long before the onset
    assert reaction_s(run, 100.0 + 2.0 + 3 * ALONE, ALONE) == (0.0, 0)


def test_a_slow_step_after_the_job_is_back_is_its_own_spread():
    run = steps([ALONE] * 4 + [1.1, ALONE, 0.76, ALONE, 1.5])
    onset = 100.0 + 4 * ALONE + 0.2
    assert reaction_s(run, onset, ALONE) == (pytest.approx(1.1 - 0.2), 1)


def test_the_target_is_only_for_a_fabric_with_an_onset_run():
    paced = {"h0": {"pacing": {"joined_between_updates": 5}}, "h1": {"pacing": None}, "h3": {}}
    runs = {"alone": {"median_step_s": ALONE},
            "onset": {"steps": steps([ALONE, 1.0, ALONE]), "onset_at": 100.8, "qos_state": paced}}
    (target,) = onset_target("fifo", runs)
    assert target.value == pytest.approx(100.0 + ALONE + 1.0 - 100.8, abs=0.01) and target.bar == 1.0
    assert "5 of its sockets paced before a workload update listed them" in target.note
    assert onset_target("classes", {"alone": runs["alone"]}) == []


def test_the_bulk_share_is_of_what_the_rest_of_the_same_run_left():
    # 10 s at 8 Mbit/s: 10 MB of capacity; the rest of h0's traffic sent 4 MB, the bulk job 5 MB
    run = {"seconds": 10.0, "h0_tx_bytes": 9_000_000, "h0_bulk_bytes": 5_000_000}
    share, note = bulk_share_of_left({"h0_tx_bytes": 3_000_000}, run, 8_000_000)
    assert share == pytest.approx(5 / 6)
    assert "5 of 9 MB over 10 s" in note and "alone run instead, 0.857" in note  # (9 - 3) / (10 - 3)


def test_no_capacity_left_is_no_share():
    run = {"seconds": 1.0, "h0_tx_bytes": 1_200_000, "h0_bulk_bytes": 100_000}
    assert bulk_share_of_left({"h0_tx_bytes": 900_000}, run, 8_000_000)[0] is None


def test_the_cpu_note_splits_the_difference_by_thread():
    with_qos = {"agent_cpu_share": 0.045, "agent_main_cpu_share": 0.030}
    without = {"agent_cpu_share": 0.028, "agent_main_cpu_share": 0.018}
    note = cpu_note(with_qos, without)
    assert "with QoS each agent 4.50% of a core, without 2.80%" in note
    assert "main thread (the services, QoS's own work among them) +1.20%" in note
    assert "threads that run no QoS code +0.50%" in note


def test_the_main_threads_cpu_is_part_of_the_processs():
    main, whole = main_thread_cpu_s(os.getpid()), cpu_s(os.getpid())
    assert 0 < main <= whole


def test_the_link_is_split_inside_and_outside_the_steps():
    # 1 MB/s link (8 Mbit/s), 10 s read each second; the DDP job steps from 2 s to 8 s sending
    # 0.9 MB/s, the bulk job 0.05 MB/s inside its steps and 0.8 MB/s outside them
    rate, samples, tx, bulk = 8_000_000, [], 0.0, 0.0
    for t in range(11):
        samples.append((1000.0 + t, round(tx), round(bulk)))
        inside = 2 <= t < 8
        tx += (0.9e6 + 0.05e6) if inside else 0.8e6
        bulk += 0.05e6 if inside else 0.8e6
    parts = split(samples, [(1002.0 + k, 1.0) for k in range(6)], rate)
    assert parts["inside"] == {"seconds": 6.0, "left": pytest.approx(0.1), "bulk_share": pytest.approx(0.5)}
    assert parts["outside"] == {"seconds": 4.0, "left": pytest.approx(1.0), "bulk_share": pytest.approx(0.8)}
    assert ("inside the DDP job's steps (6 s) the rest of h0's traffic left 10% of the link and the bulk job "
            "took 50% of that; outside them") in split_note(parts)
    # a cut between two readings is interpolated; steps the readings do not cover are not split
    half = split(samples, [(1002.5, 5.0)], rate)
    assert half["inside"]["seconds"] == 5.0 and half["inside"]["bulk_share"] == pytest.approx(0.5)
    assert split(samples, [(999.0, 3.0)], rate) is None and split_note(None) == ""


def test_the_onset_is_the_first_data_connection_up():
    import socket
    import threading
    import time

    from clockfabric.bench.qos.command import _first_data_at
    from clockfabric.errors import ClockfabricError

    server = socket.create_server(("127.0.0.1", 0))
    port, held = server.getsockname()[1], []
    threading.Thread(target=lambda: [held.append(server.accept()[0]) for _ in range(2)], daemon=True).start()
    control = socket.create_connection(("127.0.0.1", port))  # a control connection alone is no onset
    try:
        with pytest.raises(ClockfabricError, match="no data connection"):
            _first_data_at([(os.getpid(), port)], timeout_s=0.2)
        data = socket.create_connection(("127.0.0.1", port))
        before = time.time()
        assert before <= _first_data_at([(os.getpid(), port)], timeout_s=2.0) <= time.time()
        data.close()
    finally:
        control.close()
        server.close()
        for s in held:
            s.close()
