"""The planner's screen and full evaluation: what each step skips must be what it would have rejected anyway."""

from dataclasses import replace
from itertools import pairwise
from pathlib import Path

import tomllib

from twin.cost_models.memory import TrainMemory, optimizer_step_part, train_parts, update_parts
from twin.cost_models.transition import reshard_lower_bound
from twin.evaluate import reshard_method
from twin.layout.models import Layout, Offload, Recompute, TrainLayout
from twin.planner import (
    Planner,
    TrainSide,
    _pareto,
    cannot_improve,
    default_scenario,
    evaluate,
    layout_group,
    parallel_structure,
    search,
    train_structure,
    train_variants,
)
from twin.scenario import LAUNCHED_VERL

SC = default_scenario("deepseek-r1", "a3", 128)


def test_the_optimizer_step_part_is_update_parts_step_and_bounds_the_update_peak():
    planner = Planner(SC)
    lay = next(iter(planner.train_structures()))
    for variant in train_variants(lay, planner.kind):
        tm = TrainMemory(planner.inv, variant, planner.devices, SC, planner.profile)
        for stage in range(tm.n_stages):
            assert optimizer_step_part(tm, stage) == update_parts(tm, stage)[1]
            assert optimizer_step_part(tm, stage, allocated=True) == update_parts(tm, stage, allocated=True)[1]
            # what the planner screens with never exceeds the update peak it would otherwise have compared
            assert optimizer_step_part(tm, stage).total <= train_parts(tm, stage)["update"].total


def test_a_variant_whose_optimizer_step_exceeds_the_limit_is_rejected_before_its_activations(monkeypatch):
    planner = Planner(SC)
    lay = next(lay for lay in planner.train_structures() if lay.engine == "megatron")
    bare = lay.model_copy(update={"recompute": Recompute(granularity="none"), "offload": Offload()})
    tm = TrainMemory(planner.inv, bare, planner.devices, SC, planner.profile)
    assert max(optimizer_step_part(tm, s).total for s in range(tm.n_stages)) > planner.limit_gb  # 671B unsharded Adam
    def no_activations(*_args, **_kw):
        raise AssertionError("the activation model ran for a variant its optimizer step rules out")

    monkeypatch.setattr(TrainMemory, "update_activation_bytes", no_activations)
    assert planner._train_side(bare) is None
    assert planner.rejected == {"training: update_actor exceeds usable memory less headroom": 1}


def test_the_screens_reshard_bound_is_computed_once_per_parallel_structure():
    planner = Planner(SC)
    trains, _ = planner.train_sides(planner.train_structures())
    rollouts, _ = planner.rollout_sides()
    method = reshard_method(SC)
    structures = set()
    for t in trains:
        for r in rollouts[:6]:
            structures.add(parallel_structure(t.layout, r.layout, planner.cfg.num_layers))
            assert planner.reshard_bound(t, r) == reshard_lower_bound(t.memory, r.memory, method, planner.cluster,
                                                                      planner.profile, SC)
    assert 0 < len(planner.reshard_bounds) == len(structures)
    # a memory knob's variant of a layout pairs with its structure's bound
    t, r = trains[0], rollouts[0]
    variant = replace(t, layout=t.layout.model_copy(update={"recompute": Recompute(granularity="selective")}))
    known = len(planner.reshard_bounds)
    assert planner.reshard_bound(variant, r) == planner.reshard_bound(t, r) and len(planner.reshard_bounds) == known


def test_a_layout_over_the_limit_with_its_exact_reshard_buffers_is_not_simulated():
    planner = Planner(SC, headroom=0.0)
    layout = Layout(train=next(iter(planner.train_structures())), rollout=planner.rollout_sides()[0][0].layout)
    calls = []

    def finalize(ev):
        calls.append(ev)
        return ev.analytical(alternatives=False)

    planner.limit_gb = 1.0  # nothing fits in 1 GB
    result, ev, unfit = evaluate(planner, layout, finalize)
    assert result is None and calls == []
    mem = ev.memory_report
    assert unfit.startswith(f"{mem.peak_phase} needs {mem.peak_gb_max:.1f} GB, over the 1.0 GB limit")
    planner.limit_gb = 1e6
    result, _, unfit = evaluate(planner, layout, finalize)
    assert unfit is None and len(calls) == 1 and result.memory_peak_gb_max == ev.memory_report.peak_gb_max


def test_a_utilization_step_bounded_at_or_above_its_layouts_best_key_cannot_improve_it():
    planner = Planner(default_scenario("tiny", "cpu", 2))
    outcome = search(planner, top=2)
    assert outcome.summary.candidates == outcome.summary.simulated + len(outcome.pending)  # none lost
    best = outcome.distinct()[0]
    assert cannot_improve(outcome, replace(best.candidate, bound_s=best.key))  # another step of the same layout
    assert not cannot_improve(outcome, replace(best.candidate, bound_s=best.key - 1e-6))
    other = next(c for c in outcome.pending if layout_group(Layout(train=c.train.layout, rollout=c.rollout.layout))
                 not in outcome.best)
    assert not cannot_improve(outcome, other)


def test_the_summary_records_how_far_a_screen_bound_exceeded_its_simulated_step():
    from twin.sim.step import simulated

    outcome = search(Planner(default_scenario("tiny", "cpu", 2)), top=1, finalize=simulated)
    over = [(e.candidate.bound_s - e.result.step_s) / e.result.step_s for e in outcome.evaluated]
    assert outcome.summary.screen_overshoot == max(0.0, *over)
    assert outcome.summary.screen_overshoot > 0  # the closed form's rollout is polled one 2 s poll later here
    analytical = search(Planner(default_scenario("tiny", "cpu", 2)), top=1)
    assert analytical.summary.screen_overshoot == 0.0  # against the closed form itself the bound holds


def test_a_default_plan_is_predicted_for_the_verl_the_executor_launches():
    pyproject = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    pins = [d for group in pyproject["project"]["optional-dependencies"].values() for d in group
            if d.startswith("verl==")]
    assert pins == [f"verl=={LAUNCHED_VERL}"]
    assert SC.software.verl == LAUNCHED_VERL and SC.software.rollout_poll
    assert SC.software.syncs_through_server and SC.software.puts_inputs_once
    assert not SC.software.keeps_weights_for_sync


def test_the_optimizer_kept_on_the_host_is_the_one_the_kinds_megatron_has():
    lay = next(iter(Planner(SC).train_structures()))
    host = {v.offload.optimizer for v in train_variants(lay, Planner(SC).kind)} - {"none", "offload"}
    assert host == {"swap"}  # MindSpeed on A3
    gpu = Planner(default_scenario("qwen3-30b-a3b", "h20", 16))
    assert {v.offload.optimizer for v in train_variants(lay, gpu.kind)} - {"none", "offload"} == {"cpu"}


def test_a_training_side_is_dropped_only_for_one_of_its_own_parallel_structure_that_beats_it_everywhere():
    def side(seconds: float, offload_s: float, gb: float, **layout) -> TrainSide:
        lay = TrainLayout(tp=2, pp=4, ep=8, **layout)
        return TrainSide(lay, None, {"update": gb, "log_prob": gb, "rollout": gb, "transition": gb}, seconds, offload_s,
                         train_structure(lay, 61))

    best = side(100.0, 10.0, 40.0)
    slower = side(105.0, 10.0, 41.0, recompute=Recompute(granularity="full"))  # same structure, worse everywhere
    # faster passes, but 115 s with its offload against 110: dropped
    more_offload = side(95.0, 20.0, 40.0, recompute=Recompute(granularity="selective"))
    less_memory = side(95.0, 20.0, 39.0, recompute=Recompute(granularity="selective"))  # slower, smaller: kept
    other_cp = side(120.0, 10.0, 50.0, cp=2)  # pairs otherwise (reshard, rules): kept
    other_experts = side(120.0, 10.0, 50.0, etp=1)
    kept = _pareto([best, slower, more_offload, less_memory, other_cp, other_experts])
    assert kept == [best, less_memory, other_cp, other_experts]


def test_block_recompute_is_the_fewest_layers_per_chunk_that_fit_and_beats_full_recompute_on_time():
    planner = Planner(SC)
    structure = next(lay for lay in planner.train_structures()
                     if (lay.engine, lay.tp, lay.pp, lay.ep, lay.cp, lay.vpp) == ("megatron", 1, 8, 16, 4, None))
    full = next(v for v in train_variants(structure, planner.kind)
                if v.recompute.granularity == "full" and v.offload.optimizer == "swap")
    chunk = max(full.stage_layers(planner.cfg.num_layers))  # 8 layers a stage
    block = planner._block_side(full)
    assert block is not None and planner.rejected == {}  # the bisection's probes are not rejections
    k = block.layout.recompute.layers
    assert block.layout.recompute.method == "block" and 1 <= k < chunk
    assert block.layout.short().split()[-2] == f"rc-block{k}"

    def recompute(layers: int) -> TrainLayout:
        return full.model_copy(update={"recompute": Recompute(granularity="full", method="block", layers=layers)})

    # one layer fewer does not fit; every count from k up does, each slower and smaller than the one before
    assert k == 1 or planner._fitting_memory(recompute(k - 1), count=False) is None
    sides = [planner._train_side(recompute(n)) for n in range(k, chunk)] + [planner._train_side(full)]
    assert all(s is not None for s in sides)
    assert all(a.seconds < b.seconds and a.parts["update"] > b.parts["update"] for a, b in pairwise(sides))
    assert sides[-1].seconds > block.seconds == sides[0].seconds


def test_each_search_stage_advances_its_progress_bar_no_further_than_its_total():
    """The pairs' bar advances once a training side, by its rollout sides: screened to the end, it reaches its total."""
    stages: dict[str, list[int]] = {}

    def progress(label: str, total: int):
        stages[label] = [total, 0]

        def tick(steps: int = 1) -> None:
            stages[label][1] += steps

        return tick

    outcome = search(Planner(default_scenario("tiny", "cpu", 2)), top=1, progress=progress)
    assert stages["layout pairs"] == [outcome.summary.pairs_evaluated] * 2
    assert all(done <= total for total, done in stages.values())
