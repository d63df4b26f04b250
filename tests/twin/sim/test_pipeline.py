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
