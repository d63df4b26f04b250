"""The 1F1B schedule as simpy runs it."""

import numpy as np
import pytest
import simpy

from twin.sim.pipeline import one_f_one_b, run_pipeline
from twin.sim.trace import Trace


def test_one_f_one_b_order():
    assert one_f_one_b(0, 4, 6)[:4] == [("F", 0), ("F", 1), ("F", 2), ("F", 3)]
    assert one_f_one_b(3, 4, 6)[:4] == [("F", 0), ("B", 0), ("F", 1), ("B", 1)]
    for s in range(4):
        order = one_f_one_b(s, 4, 6)
        assert sorted(order) == sorted([(k, m) for k in "FB" for m in range(6)])


def _run(fwd, bwd, p2p=0.0):
    env = simpy.Environment()
    proc = env.process(run_pipeline(env, fwd, bwd, p2p, Trace(), [f"s{i}" for i in range(fwd.shape[0])], "t"))
    env.run()
    return proc.value


@pytest.mark.parametrize(("stages", "micro"), [(4, 8), (8, 32), (2, 1)])
def test_uniform_stages_give_the_textbook_bubble(stages, micro):
    run = _run(np.ones((stages, micro)), 2 * np.ones((stages, micro)))
    assert run.seconds == pytest.approx(3 * (micro + stages - 1))
    assert run.bubble_fraction == pytest.approx((stages - 1) / (micro + stages - 1))


def test_forward_only_streams_and_the_slowest_stage_sets_the_pace():
    fwd = np.ones((3, 10))
    fwd[1] *= 2
    run = _run(fwd, None, p2p=0.5)
    assert run.seconds == pytest.approx(1 + 0.5 + 10 * 2 + 0.5 + 1)


def test_a_repeated_pass_is_replayed_at_its_own_time_with_the_same_run_and_spans():
    rng = np.random.default_rng(7)
    fwd, bwd = rng.uniform(1, 2, (4, 9)), rng.uniform(2, 4, (4, 9))
    env, first, second = simpy.Environment(), Trace(), Trace()
    lanes = [f"s{i}" for i in range(4)]

    def twice():
        a = yield env.process(run_pipeline(env, fwd, bwd, 0.1, first, lanes, "t"))
        yield env.timeout(5.0)
        b = yield env.process(run_pipeline(env, fwd, bwd, 0.1, second, lanes, "t"))
        return a, b

    proc = env.process(twice())
    env.run()
    a, b = proc.value
    assert a == b and env.now == pytest.approx(2 * a.seconds + 5.0)
    assert [(s.lane, s.name, s.dur_s) for s in first.spans] == [(s.lane, s.name, s.dur_s) for s in second.spans]
    assert [s.start_s + a.seconds + 5.0 for s in first.spans] == pytest.approx([s.start_s for s in second.spans])
    assert _run(fwd, 2 * bwd, 0.1).seconds > a.seconds  # other inputs are simulated, not replayed


def test_uneven_micro_batches_streamed_cost_the_longest_once_per_extra_stage():
    """Forward-only, each micro-batch as long on every stage (a sequence through the pipeline): a proportionate flow
    shop, whose makespan is the sum of the times plus (stages - 1) x the longest: 1 + 3 + 2 + 2 x 3 = 12."""
    fwd = np.tile([1.0, 3.0, 2.0], (3, 1))
    assert _run(fwd, None).seconds == pytest.approx(12.0)


def test_uneven_micro_batches_stall_the_one_f_one_b_schedule():
    """Two stages, forwards of 1 and 3 s, backwards twice those. By hand: stage 0 F0 0-1, F1 1-4; stage 1 F0 1-2,
    B0 2-4, F1 4-7, B1 7-13; stage 0 B0 4-6, B1 13-19: 19 s, where the same work in even micro-batches (forwards of
    2 s) takes the textbook 3 x 2 x (2 + 1) = 18 s. The stall is the schedule's: the long micro-batch's backward
    waits on the last stage while the first stage has nothing left to run."""
    fwd = np.tile([1.0, 3.0], (2, 1))
    assert _run(fwd, 2 * fwd).seconds == pytest.approx(19.0)
    even = np.full((2, 2), 2.0)
    assert _run(even, 2 * even).seconds == pytest.approx(18.0)
