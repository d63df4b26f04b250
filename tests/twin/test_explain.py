"""`twin plan --explain`: a layout placed in the search (rank, stages beside the plan's, the deciding stage),
or the rule or memory limit that rejects it."""

from pathlib import Path

import pytest

from twin.errors import TwinError
from twin.evaluate import Evaluation
from twin.explain import explain_layout, parse_rollout, parse_train, resolve_query, short
from twin.layout.models import Layout
from twin.planner import Planner, default_scenario, layout_group, search
from twin.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[2]


def analytical(ev):
    return ev.analytical(alternatives=False)


@pytest.fixture
def planned():
    planner = Planner(default_scenario("qwen2.5-7b", "a3", 8))  # 16 dies: plans in about a second
    return planner, search(planner, 3)


def test_table_strings_read_back_to_the_same_layout(planned):
    planner, outcome = planned
    for e in outcome.evaluated:
        layout, util_open = resolve_query(planner, short(e.layout))
        assert util_open is False
        assert layout.rollout == e.layout.rollout
        assert layout.train == e.layout.train.model_copy(update={"log_prob_micro_batch": 1})


def test_a_runner_up_gets_its_rank_and_the_stage_that_decides(planned):
    planner, outcome = planned
    best = outcome.evaluated[0]
    # the runner-up is the best of another layout (the plan's own layout at other utilizations ranks with it)
    second = next(e for e in outcome.evaluated if layout_group(e.layout) != layout_group(best.layout))
    ex = explain_layout(planner, outcome, short(second.layout), analytical)
    assert ex.rejected_by is None and ex.layout == second.layout
    assert (ex.rank, ex.rank_upper) == (2, None)
    delta = {k: second.result.stages_s[k] - best.result.stages_s[k] for k in best.result.stages_s}
    stage = max(delta, key=delta.get)
    assert ex.versus.deciding_stage == stage and ex.versus.deciding_delta_s == pytest.approx(delta[stage])
    assert ex.versus.stages_s == second.result.stages_s and ex.versus.best_stages_s == best.result.stages_s
    assert ex.summary.startswith("rank 2 of") and f"decided by {stage} (+{delta[stage]:.1f} s)" in ex.summary
    gain = min(delta, key=delta.get)
    assert (f"partly won back in {gain} ({delta[gain]:+.1f} s)" in ex.summary) is (delta[gain] < -0.1 * delta[stage])
    lo_2, _ = second.result.uncertainty.step_s  # the embedded a3 profile carries its cross-validated band
    _, hi_1 = best.result.uncertainty.step_s
    assert ex.versus.band_overlap is (lo_2 <= hi_1)
    assert ("the bands overlap" in ex.summary) is (lo_2 <= hi_1)


def test_the_plan_itself_is_rank_one(planned):
    planner, outcome = planned
    ex = explain_layout(planner, outcome, short(outcome.plan.layout), analytical)
    assert ex.rank == 1 and ex.versus.deciding_stage is None and ex.versus.deciding_delta_s == 0


def test_open_utilization_is_chosen_as_the_search_does(planned):
    planner, outcome = planned
    lay = outcome.plan.layout
    ex = explain_layout(planner, outcome, f"{lay.train.short()} | {lay.rollout.short()}", analytical)
    assert ex.layout == lay and ex.rank == 1
    steps = [e for e in outcome.evaluated if layout_group(e.layout) == layout_group(lay)]
    assert ex.versus.step_s == min(e.result.step_s for e in steps)  # the best of its utilization steps


def test_an_invalid_layout_names_the_rule(planned):
    planner, outcome = planned
    ex = explain_layout(planner, outcome, "TP8 PP1 | TP2 DP8 seqs64", analytical)
    assert ex.rank is None and ex.rejected_by == ("rule attention heads divisible by TP: 28 heads % TP8 != 0; KV heads "
                                                  "divisible by TP (Megatron num_query_groups): 4 KV heads % TP8 != 0")
    ex = explain_layout(planner, outcome, "TP3 PP1 | TP2 DP8 seqs64", analytical)
    assert "devices = TP x PP x CP x DP: 16 devices are not divisible by TP3 x PP1 x CP1 = 3" in ex.rejected_by


def test_a_layout_over_the_memory_limit_names_the_phase_and_the_limit(planned):
    planner, outcome = planned
    ex = explain_layout(planner, outcome, "FSDP SP4 off:p+g+o | TP1 DP16 seqs256 util0.95", analytical)
    assert ex.rank is None
    assert ex.rejected_by.startswith("memory: rollout needs")
    usable = planner.capacity_gb  # an A3 die: 65.79 GB of 64 GiB of HBM (torch_npu's total capacity)
    assert usable == 65.79
    assert ex.rejected_by.endswith(f"over the {usable * (1 - 0.074):.1f} GB limit ({usable:g} GB usable less 7.4% "
                                   "headroom), more than the device holds")


def test_a_scenario_file_is_explained_with_its_exact_rank():
    path = ROOT / "scenarios" / "c5-qwen25-7b-a3-16dies.yaml"
    sc = load_scenario(path)
    planner = Planner(sc.model_copy(update={"layout": None}))
    outcome = search(planner, 2)
    ex = explain_layout(planner, outcome, str(path), analytical, cap=1000)
    own = Evaluation(sc).analytical(alternatives=False)
    best = outcome.evaluated[0].result
    assert ex.layout == sc.layout and ex.versus.step_s == own.step_s
    group = layout_group(sc.layout)
    above = {g for g, e in outcome.best.items() if g != group and e.key < own.step_s}
    assert ex.rank == len(above) + 1 > 1 and ex.rank_upper is None
    for c in outcome.pending:  # exact: no other layout left unevaluated could still rank above it
        g = layout_group(Layout(train=c.train.layout, rollout=c.rollout.layout))
        assert c.bound_s >= own.step_s or g in above or g == group
    delta = {k: own.stages_s[k] - best.stages_s[k] for k in own.stages_s}
    assert ex.versus.deciding_stage == max(delta, key=delta.get)


def test_past_the_cap_the_rank_is_a_range_saying_why():
    path = ROOT / "scenarios" / "c5-qwen25-7b-a3-16dies.yaml"
    planner = Planner(load_scenario(path).model_copy(update={"layout": None}))
    outcome = search(planner, 2)
    before = outcome.summary.simulated
    ex = explain_layout(planner, outcome, str(path), analytical, cap=3)
    assert outcome.summary.simulated - before == 3 and ex.evaluated == 3 + 1  # three others and the layout itself
    assert ex.rank_upper > ex.rank
    assert ex.summary.startswith(f"rank {ex.rank} to {ex.rank_upper} of")
    assert f"({ex.rank_upper - ex.rank} layouts bounded below this one's step were not evaluated in full: the cap " \
           "of 3 evaluations to place a layout)" in ex.summary


def test_past_the_time_limit_the_rank_is_a_range_saying_so():
    path = ROOT / "scenarios" / "c5-qwen25-7b-a3-16dies.yaml"
    planner = Planner(load_scenario(path).model_copy(update={"layout": None}))
    outcome = search(planner, 2)
    before = outcome.summary.simulated
    ex = explain_layout(planner, outcome, str(path), analytical, deadline=0.0)  # the limit is long past
    assert outcome.summary.simulated - before == 0 and ex.evaluated == 1  # the layout itself only
    assert ex.rank_upper > ex.rank and ex.summary.endswith("were not evaluated in full: the time limit)")


@pytest.mark.parametrize("text, fragment", [
    ("TP2 XX3 | TP2 DP8", "training token 'XX3'"),
    ("TP2 PP1 | TP2 DP8 util", "rollout token 'util'"),
    ("TP2 PP1", "give a scenario file or 'TRAINING | ROLLOUT'"),
    ("TP2 PP1 | TP2 DP8 util1.5", "gpu_memory_utilization"),
])
def test_bad_queries_are_one_clear_error(text, fragment):
    planner = Planner(default_scenario("qwen2.5-7b", "a3", 8))
    with pytest.raises(TwinError, match=fragment.replace("|", r"\|")):
        resolve_query(planner, text)


def test_parse_tokens():
    t = parse_train("TP4 PP8 EP8x CP2 rc-full off:p+g+swap")
    assert (t.tp, t.pp, t.ep, t.cp, t.moe_tp_extend_ep) == (4, 8, 8, 2, True)
    assert t.recompute.granularity == "full" and t.recompute.layers == 1
    assert (t.offload.param, t.offload.grad, t.offload.optimizer) == (True, True, "swap")
    f = parse_train("FSDP SP4 off:p+g+o")
    assert (f.engine, f.cp, f.offload.optimizer) == ("fsdp", 4, "offload")
    cpu = parse_train("TP8 PP12 EP8 off:p+g+cpu")  # Megatron's CPU optimizer: the table prints it back the same
    assert cpu.offload.optimizer == "cpu" and cpu.short() == "TP8 PP12 EP8 off:p+g+cpu"
    r, given = parse_rollout("TP2 DP128 EP256 seqs64 util0.8", {"graph_mode": True})
    assert (r.tp, r.dp, r.ep, r.max_num_seqs, r.gpu_memory_utilization, given) == (2, 128, 256, 64, 0.8, True)
