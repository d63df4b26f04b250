"""Why not this layout: place a layout in the planner's search, or name what rejects it.

Also the comparisons the plan records for every runner-up: the step-time quantile candidates are ranked
by (`--risk`), whether two predictions' uncertainty bands overlap (then the ranking between them is not
known), and the stage that decides the difference.
"""

from __future__ import annotations

import heapq
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from twin.cost_models.memory import RolloutMemory
from twin.errors import TwinError
from twin.layout.models import Layout, Offload, Recompute, RolloutLayout, TrainLayout
from twin.layout.rules import check_layout
from twin.plan import Explanation, Risk, RunnerUp, Versus
from twin.results import SimulationResult
from twin.uncertainty import P90_OF_MEAN_ABS

if TYPE_CHECKING:
    from twin.evaluate import Evaluation
    from twin.planner import Planner, PlanOutcome, ProgressFactory

# layouts evaluated in full to place an explained layout; beyond, a rank range that says so. C1's recipe layout on
# 128 A3 cards needs 235 (about 100 s with the simulation on a loaded 2-core host, benchmarks/plan_explain_speed.py)
MAX_EXPLAIN_EVALUATIONS = 400
_TRAIN_DEGREE = re.compile(r"(TP|PP|CP|SP)(\d+)$")
_EP = re.compile(r"EP(\d+)(x?)$")
_BLOCK = re.compile(r"rc-block(\d+)")
_ROLLOUT = re.compile(r"(TP|DP|EP|seqs)(\d+)$|util([0-9.]+)$")


# ---- bands and ranking ------------------------------------------------------------------------------
def step_band(r: SimulationResult) -> tuple[float, float] | None:
    """The step-time band of a prediction, None when it carries none (unknown)."""
    return tuple(r.uncertainty.step_s) if r.uncertainty is not None else None


def step_p90(r: SimulationResult) -> float | None:
    """The 90th percentile of the step time, None without a band. A band is a mean absolute error; read as a
    normal error's, the 90th percentile lies P90_OF_MEAN_ABS times the band's half-width above the prediction. The
    half-width is the step band's, or, where larger, the sum of the stages' (each stage's own leave-one-case-out
    error, their errors taken to go the same way: one mis-scaled curve moves every stage that uses it), so that a
    layout spending its step in a stage the twin predicts poorly ranks lower, and no p90 lies inside the step band
    printed beside it."""
    u = r.uncertainty
    if u is None:
        return None
    stages = sum(u.stages_s[s][1] - v for s, v in r.stages_s.items() if s in u.stages_s)
    return r.step_s + P90_OF_MEAN_ABS * max(u.step_s[1] - r.step_s, stages)


def risk_key(r: SimulationResult, risk: Risk) -> float:
    """What candidates are ranked by: p50 the prediction, p90 its 90th percentile (`step_p90`; the prediction
    itself when the band is unknown)."""
    p90 = step_p90(r) if risk == "p90" else None
    return r.step_s if p90 is None else p90


def bands_overlap(a: SimulationResult, b: SimulationResult) -> bool | None:
    """Whether the step-time bands overlap (the order of the two is then not known); None if one is unknown."""
    ba, bb = step_band(a), step_band(b)
    if ba is None or bb is None:
        return None
    return ba[0] <= bb[1] and bb[0] <= ba[1]


def headroom_fraction(r: SimulationResult) -> float:
    """The fraction of usable device memory the worst phase leaves free."""
    return 1 - r.memory_peak_gb_max / r.capacity_gb


def versus(r: SimulationResult, best: SimulationResult) -> Versus:
    stages = list(dict.fromkeys([*best.stages_s, *r.stages_s]))
    delta = {k: r.stages_s.get(k, 0.0) - best.stages_s.get(k, 0.0) for k in stages}
    worst = max(stages, key=lambda k: delta[k])
    return Versus(step_s=r.step_s, step_band=step_band(r), stages_s=r.stages_s, best_stages_s=best.stages_s,
                  deciding_stage=worst if delta[worst] > 0 else None, deciding_delta_s=max(delta[worst], 0.0),
                  band_overlap=bands_overlap(r, best), headroom_fraction=headroom_fraction(r))


def why(v: Versus, best: SimulationResult, risk: Risk) -> str:
    """One line: how much slower, which stage decides, and whether the difference is known."""
    diff = (v.step_s - best.step_s) / best.step_s * 100
    if diff >= 0:
        text = f"step {diff:.1f} % slower ({v.step_s:.0f} s vs {best.step_s:.0f} s)"
    else:
        text = f"step {-diff:.1f} % faster at p50 ({v.step_s:.0f} s vs {best.step_s:.0f} s) but higher at {risk}"
    if v.deciding_stage:
        text += f"; decided by {v.deciding_stage} (+{v.deciding_delta_s:.1f} s)"
        stages = dict.fromkeys([*v.stages_s, *v.best_stages_s])
        gains = {k: v.stages_s.get(k, 0.0) - v.best_stages_s.get(k, 0.0) for k in stages}
        gain = min(gains, key=gains.get)
        if gains[gain] < -0.1 * v.deciding_delta_s:  # a stage that wins back a tenth of it or more is named too
            text += f", partly won back in {gain} ({gains[gain]:+.1f} s)"
    if v.band_overlap:
        text += "; the bands overlap: the difference is within the model's error, not known"
    elif v.band_overlap is None:
        text += "; band unknown"
    return text


def runner_up(rank: int, layout: Layout, r: SimulationResult, best: SimulationResult, cards: int,
              risk: Risk = "p50") -> RunnerUp:
    v = versus(r, best)
    return RunnerUp(rank=rank, layout=layout, step_s=r.step_s, tps_per_card=r.tps_per_card,
                    memory_peak_gb_max=r.memory_peak_gb_max, reshard_bytes_total=r.reshard.bytes_total,
                    why_lost=why(v, best, risk), cards=cards, versus=v)


# ---- the layout a user asks about -------------------------------------------------------------------
def short(layout: Layout) -> str:
    """A layout as the plan table prints it, and as --explain reads it back."""
    ro = layout.rollout
    return f"{layout.train.short()} | {ro.short()} util{ro.gpu_memory_utilization:g}"


def parse_train(text: str) -> TrainLayout:
    """`TP2 PP2 EP64x rc-full off:p+g+swap` (or `rc-block4`: block recompute of 4 layers; or `FSDP SP4 off:p+g+o`)
    as the table prints it."""
    fields: dict[str, object] = {}
    for tok in text.split():
        m, ep = _TRAIN_DEGREE.match(tok), _EP.match(tok)
        if tok == "FSDP":
            fields["engine"] = "fsdp"
        elif m:
            fields["cp" if m[1] in ("CP", "SP") else m[1].lower()] = int(m[2])
        elif ep:
            fields["ep"], fields["moe_tp_extend_ep"] = int(ep[1]), bool(ep[2])
        elif tok in ("rc-sel", "rc-full"):
            fields["recompute"] = (Recompute(granularity="selective") if tok == "rc-sel"
                                   else Recompute(granularity="full", method="uniform", layers=1))
        elif block := _BLOCK.fullmatch(tok):
            fields["recompute"] = Recompute(granularity="full", method="block", layers=int(block[1]))
        elif tok.startswith("off:"):
            tags = tok[4:].split("+")
            optimizer = next((name for tag, name in (("swap", "swap"), ("cpu", "cpu"), ("o", "offload"))
                              if tag in tags), "none")
            fields["offload"] = Offload(param="p" in tags, grad="g" in tags, optimizer=optimizer)
        else:
            raise TwinError(f"--explain: training token {tok!r} is not one of TPn PPn EPn[x] CPn FSDP SPn "
                            "rc-sel rc-full rc-blockN off:p+g+o|swap|cpu")
    return TrainLayout(**fields)


def parse_rollout(text: str, knobs: dict[str, object]) -> tuple[RolloutLayout, bool]:
    """`TP2 DP128 EP128 seqs64 util0.9`; the second value says whether the utilization was given."""
    fields: dict[str, object] = dict(knobs)
    for tok in text.split():
        m = _ROLLOUT.match(tok)
        if not m:
            raise TwinError(f"--explain: rollout token {tok!r} is not one of TPn DPn EPn seqsN utilF")
        if m[3] is not None:
            fields["gpu_memory_utilization"] = float(m[3])
        else:
            fields["max_num_seqs" if m[1] == "seqs" else m[1].lower()] = int(m[2])
    return RolloutLayout(**fields), "gpu_memory_utilization" in fields


def resolve_query(planner: Planner, query: str) -> tuple[Layout, bool | None]:
    """The layout of a scenario or plan file (second value None: nothing left to choose), else of a
    `TRAINING | ROLLOUT` string (second value: whether the utilization was left open for the planner)."""
    path = Path(query)
    if path.suffix in (".yaml", ".yml", ".json") and path.is_file():
        from twin.plan import load_plan
        from twin.scenario import load_scenario

        layout = load_plan(path).layout if path.suffix == ".json" else load_scenario(path).layout
        if layout is None:
            raise TwinError(f"--explain: scenario {query} has no layout")
        return layout, None
    if "|" not in query:
        raise TwinError("--explain: give a scenario file or 'TRAINING | ROLLOUT' as the table prints them, e.g. "
                        "'TP2 PP2 EP64x rc-full off:p+g+swap | TP2 DP128 EP128 seqs64 util0.9'")
    train_text, rollout_text = query.split("|", 1)
    try:
        rollout, util_given = parse_rollout(rollout_text, planner.rollout_knobs())
        train = parse_train(train_text)
    except ValueError as exc:  # pydantic's own checks of a layout
        raise TwinError(f"--explain: {' '.join(str(exc).split())}") from None
    return Layout(train=train, rollout=rollout), not util_given


def choose_knobs(planner: Planner, layout: Layout, util_open: bool) -> tuple[list[Layout], str | None]:
    """The knobs a layout string leaves to the planner, chosen as the search does: the largest log-prob
    micro-batch that keeps the headroom, and (when open) every gpu_memory_utilization step the search screens
    (`Planner.utilizations`; the layout is placed with the best of them); the second value says why no step is
    left for vLLM."""
    from twin.planner import LOG_PROB_MICRO_BATCHES

    for micro in LOG_PROB_MICRO_BATCHES:
        train = layout.train.model_copy(update={"log_prob_micro_batch": micro})
        _, parts = planner.train_parts(train)
        if max(parts.values()) <= planner.limit_gb:
            break
    if not util_open:
        return [Layout(train=train, rollout=layout.rollout)], None
    rm = RolloutMemory(planner.inv, layout.rollout, planner.profile, planner.capacity_gb)
    utils = planner.utilizations(parts["rollout"], rm)
    if not utils:
        return [layout], (f"memory: training keeps {parts['rollout']:.1f} GB on a device during rollout; no "
                          f"gpu_memory_utilization step under the {planner.limit_gb:.1f} GB limit leaves vLLM a KV "
                          f"cache of one full sequence ({planner.sc.workload.max_seq_len:,} tokens)")
    return [Layout(train=train, rollout=layout.rollout.model_copy(update={"gpu_memory_utilization": u}))
            for u in utils], None


def place(planner: Planner, outcome: PlanOutcome, layout: Layout, key: float,
          finalize: Callable[[Evaluation], SimulationResult], progress: ProgressFactory | None,
          cap: int, deadline: float | None) -> tuple[int, int, int, str]:
    """The exact rank of a layout whose full evaluation ranks at `key`: every other layout whose screen bound is
    below `key` is evaluated in full unless one of its utilization steps already beats `key` (it is known to rank
    above, whatever its other steps give), lowest bound first, at most `cap` of them and not past `deadline` (a
    time.perf_counter() value). Returns the layouts known to rank above, those left undecided, the evaluations
    made, and what stopped them."""
    from twin.planner import evaluate_candidate, layout_group

    own = layout_group(layout)

    def above(group: str) -> bool:
        done = outcome.best.get(group)
        return done is not None and done.key < key

    todo = [(c, g) for c in sorted(c for c in outcome.pending if c.bound_s < key)
            if (g := layout_group(Layout(train=c.train.layout, rollout=c.rollout.layout))) != own]
    tick = progress("placing the layout", len(todo)) if progress else None
    n, undecided, stop = 0, set(), ""
    for cand, group in todo:
        if tick:
            tick()
        if above(group):
            continue
        if not stop and n >= cap:
            stop = f"the cap of {cap} evaluations to place a layout"
        if not stop and deadline is not None and time.perf_counter() > deadline:
            stop = "the time limit"
        if stop:
            undecided.add(group)
            continue
        outcome.pending.remove(cand)
        evaluate_candidate(planner, outcome, cand, finalize)
        n += 1
    heapq.heapify(outcome.pending)
    better = sum(1 for g in outcome.best if g != own and above(g))
    return better, len({g for g in undecided if not above(g)}), n, stop


def explain_layout(planner: Planner, outcome: PlanOutcome, query: str,
                   finalize: Callable[[Evaluation], SimulationResult],
                   progress: ProgressFactory | None = None,
                   cap: int = MAX_EXPLAIN_EVALUATIONS, deadline: float | None = None) -> Explanation:
    """Place the queried layout in the search: its exact rank among the fitting layouts (each at its best
    utilization step) and its stages beside the best plan's, or the rule or memory limit that rejects it."""
    from twin.planner import evaluate

    layout, util_open = resolve_query(planner, query)
    errs = check_layout(layout, planner.cfg, planner.devices, planner.kind, planner.sc.has("directed_reshard"))
    if errs:
        rule = "; ".join(str(e) for e in errs)
        return Explanation(query=query, layout=layout, rejected_by=f"rule {rule}", summary=f"invalid: {rule}")
    steps, reason = [layout], None
    if util_open is not None:
        steps, reason = choose_knobs(planner, layout, util_open)
    fitting, first_unfit = [], None
    for step in steps if reason is None else []:
        result, _, unfit = evaluate(planner, step, finalize)
        need = planner.sc.workload.max_seq_len
        if not unfit and result.kv_cache_tokens_per_device < need:
            unfit = (f"the KV cache holds {result.kv_cache_tokens_per_device:,} tokens per device, less than one "
                     f"full sequence ({need:,})")
        if unfit:
            first_unfit = first_unfit or f"memory: {unfit}"
        else:
            fitting.append((risk_key(result, planner.risk), step, result))
    if not fitting:
        reason = reason or first_unfit
        return Explanation(query=query, layout=steps[0], rejected_by=reason, summary=f"rejected by {reason}")
    key, layout, result = min(fitting, key=lambda f: f[0])
    better, unknown, n, stop = place(planner, outcome, layout, key, finalize, progress, cap, deadline)
    best = outcome.evaluated[0].result if outcome.evaluated else result
    v = versus(result, best)
    rank = better + 1
    where = f"rank {rank}" if not unknown else f"rank {rank} to {rank + unknown}"
    text = f"{where} of {outcome.summary.pairs_fitting:,} fitting layouts"
    if rank > 1:
        text += f": {why(v, best, planner.risk)}"
    if unknown:
        text += f" ({unknown} layouts bounded below this one's step were not evaluated in full: {stop})"
    return Explanation(query=query, layout=layout, rank=rank, rank_upper=rank + unknown if unknown else None,
                       evaluated=n + len(steps), versus=v, summary=text)


def print_explanation(console: Console, ex: Explanation, best_layout: Layout | None) -> None:
    """One screen: the verdict, and the stages beside the best plan's with the deciding stage marked."""
    console.print(f"[bold]--explain[/] {ex.query}")
    if ex.layout is not None:
        plan = f"   (plan: {short(best_layout)})" if best_layout else ""
        console.print(f"  as searched: {short(ex.layout)}{plan}")
    style = "red" if ex.rejected_by else ("green" if ex.rank == 1 else "yellow")
    console.print(f"  [{style}]{ex.summary}[/]")
    v = ex.versus
    if v is None:
        return
    table = Table(title="Predicted stages, s")
    for col in ("stage", "plan", "this layout", "difference"):
        table.add_column(col, justify="left" if col == "stage" else "right")
    for stage in dict.fromkeys([*v.best_stages_s, *v.stages_s]):
        b, t = v.best_stages_s.get(stage, 0.0), v.stages_s.get(stage, 0.0)
        mark = "bold yellow" if stage == v.deciding_stage else ""
        row = (stage, f"{b:.1f}", f"{t:.1f}", f"{t - b:+.1f}")
        table.add_row(*(f"[{mark}]{c}[/]" if mark else c for c in row))
    table.add_row("[bold]step[/]", f"{sum(v.best_stages_s.values()):.1f}", f"{v.step_s:.1f}",
                  f"{v.step_s - sum(v.best_stages_s.values()):+.1f}")
    console.print(table)
    band = f"band {v.step_band[0]:.0f}-{v.step_band[1]:.0f} s" if v.step_band else "band unknown"
    console.print(f"  this layout: {band}, {v.headroom_fraction:.1%} of usable memory free in its worst phase")
