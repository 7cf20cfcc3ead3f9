"""bench workload's scoring: the injection order and the summary, on recorded outcomes; the healthy run's mismatches."""

from clockfabric.bench.workload.command import CLASSES, HEALTHY, schedule, summary


def test_schedule_takes_every_class_in_turn_in_a_seeded_order():
    order = schedule(len(CLASSES) * 2 + 3, seed=4)
    assert sorted(order[:len(CLASSES)]) == sorted(CLASSES) == sorted(order[len(CLASSES):2 * len(CLASSES)])
    assert len(order) == len(CLASSES) * 2 + 3
    assert order == schedule(len(CLASSES) * 2 + 3, seed=4) and order != schedule(len(CLASSES) * 2 + 3, seed=5)


def row(kind, verdict, named_s=None):
    return {"kind": kind, "verdict": verdict, "correct": kind == verdict, "named_s": named_s}


def test_summary_scores_first_verdicts_and_times_to_name_without_the_healthy_ones():
    rows = [row("degraded_link", "degraded_link", 4.0), row("degraded_link", "congestion_own"),
            *(row("congestion_non_job", "congestion_non_job", float(s)) for s in range(1, 10)),
            row(HEALTHY, HEALTHY, 0.5)]
    found = summary({"outcomes": rows})
    assert found["faults"] == 12 and found["classes"] == 3 and found["correct"] == 11
    assert found["confusion"]["degraded_link"] == {"degraded_link": 1, "congestion_own": 1}
    assert found["named_p50_s"] == 4.5 and found["named_p90_s"] == 9.0  # 1..9 and 4; not the healthy 0.5


def test_a_healthy_run_counts_as_mismatches_only_in_band_delays_far_above_their_probe_floor():
    from clockfabric.bench.workload.healthy import mismatches

    def judged(flow, source, why):
        return {"host": "h0", "flow": flow, "delay_source": source, "why": why}

    verdict = {"flows": [judged("a", "inband", ["delay 900 us (inband) vs its path's probe floor 5 us"]),
                         judged("b", "rtt/2", ["delay 900 us (rtt/2) vs its path's probe floor 5 us"]),
                         judged("c", "inband", ["delay 900 us (inband) vs its siblings' 5 us"]),
                         judged("d", "inband", [])]}
    assert mismatches(verdict) == ["h0 a"]
    assert mismatches({"flows": []}) == [] == mismatches({})


def test_a_fault_is_seen_at_the_first_reading_off_the_flows_own_level_before_the_onset():
    from clockfabric.bench.workload.stages import first_change

    def far(v, usual):
        return v > 3 * usual

    series = [(1, 10.0), (2, 11.0), (3, 9.0), (5, 12.0), (6, 40.0), (7, 50.0)]
    assert first_change(series, 4, far) == 6
    assert first_change(series, 7, far) == 7  # a reading at the onset counts
    assert first_change([(5, 40.0)], 4, far) is None  # nothing before the onset: no level to leave
    assert first_change(series[:4], 4, far) is None


def test_stages_give_each_class_its_median_share_of_the_time_to_name():
    from clockfabric.bench.workload.stages import stages

    rows = [{"kind": "degraded_link", "prepared_s": 0.0, "seen_s": 2.0, "named_s": 5.0},
            {"kind": "degraded_link", "prepared_s": 0.0, "seen_s": 3.0, "named_s": 7.0},
            {"kind": "congestion_other_job", "prepared_s": 2.5, "seen_s": None, "named_s": 6.0}]
    found = stages(rows)
    assert found["degraded_link"] == {"prepared_s": 0.0, "seen_s": 2.5, "named_s": 6.0, "judged_s": 3.5}
    assert found["congestion_other_job"] == {"prepared_s": 2.5, "seen_s": None, "named_s": 6.0, "judged_s": None}
