"""Continuous batching, KV-limited admission and lockstep instances in the rollout simulation."""

from collections import OrderedDict
from pathlib import Path

import numpy as np
import pytest

from twin.evaluate import Evaluation
from twin.scenario import LengthDist, load_scenario
from twin.sim import rollout as rollout_sim
from twin.sim.rollout import simulate_rollout
from twin.sim.trace import Trace

SCENARIOS = Path(__file__).resolve().parents[3] / "scenarios"


def _rollout(sc, kv_tokens=None):
    ev = Evaluation(sc)
    kv = ev.memory_report.kv_tokens if kv_tokens is None else kv_tokens
    return simulate_rollout(ev.rollout_cost, kv, sc, np.random.default_rng(0), Trace(), 0.0)


def test_fixed_lengths_take_waves_of_max_num_seqs():
    sc = load_scenario(SCENARIOS / "c1-dsr1-a3-128.yaml")  # 64 responses per DP replica, max_num_seqs 64
    one_wave = _rollout(sc)
    assert one_wave.steps >= 3040 and one_wave.steps < 3040 + 10  # decode steps + a few prefill chunks
    halved = sc.model_copy(update={"layout": sc.layout.model_copy(update={
        "rollout": sc.layout.rollout.model_copy(update={"max_num_seqs": 32})})})
    two_waves = _rollout(halved)
    assert 2 * 3040 <= two_waves.steps < 2 * 3040 + 20


def test_a_small_kv_cache_limits_concurrency():
    sc = load_scenario(SCENARIOS / "c1-dsr1-a3-128.yaml")  # 64 sequences of 75 + 3040 tokens per replica
    full = _rollout(sc)
    kv = 16 * (75 + 3040)  # room for 16 whole sequences
    tight = _rollout(sc, kv_tokens=kv)
    # a sequence holds its KV as it grows: 64 sequences hold 64 x (75 x 3040 + 3040^2 / 2) token-steps, which a
    # cache of `kv` tokens can hold in no fewer than that over kv steps (6,230), and no more than four waves of
    # 16 whole sequences take (admission reserving the whole length) plus what preemption recomputes
    held = 64 * (75 * 3040 + 3040 ** 2 / 2)
    assert held / kv < tight.steps < 4 * 3040
    assert tight.preemptions > 0 and tight.components_s["recompute"] > 0
    assert tight.seconds > 1.5 * full.seconds and full.preemptions == 0


def _drive(ranks, kv: int, max_seqs: int = 2, budget: int = 100) -> tuple[list[tuple[int, int]], int]:
    """Run one rank's rollout loop as the simulation does: its (window, decoding batch) pairs and the tokens it
    prefilled again."""
    windows, again = [], 0
    while not ranks.finished().all():
        k, batch, _, _, _, recomputed = ranks.advance(max_seqs, kv, budget)
        windows.append((k, int(batch[0])))
        again += int(recomputed[0])
    return windows, again


def test_a_full_kv_cache_preempts_the_latest_admitted_sequence_and_recomputes_it():
    """Two sequences of a 10-token prompt and 10 tokens to generate in a cache of 30 tokens, derived by hand:
    both admitted (20 tokens), prefilled in one step; they decode 5 steps until they hold 30; the next step
    does not fit, so the second is preempted (its 15 tokens given back); the first finishes in 5 steps; the
    second resumes, prefills its 15 tokens again beside its next token, and finishes 4 steps later."""
    ranks = rollout_sim._Ranks(np.array([[10, 10]]), np.array([[10, 10]]))
    assert _drive(ranks, kv=30) == ([(1, 0), (5, 2), (5, 1), (1, 1), (4, 1)], 15)
    assert int(ranks.preemptions[0]) == 1


def test_lockstep_instances_run_until_their_longest_response():
    sc = load_scenario(SCENARIOS / "own-qwen3-30b-a3b-a3-16dies.yaml")  # one EP16 instance of 8 DP ranks
    out = _rollout(sc)
    assert len(out.instance_seconds) == 1
    wl = sc.workload.model_copy(update={"response_len": LengthDist(mean=2048, max=8192)})
    fixed = _rollout(sc.model_copy(update={"workload": wl}))
    assert out.steps > fixed.steps  # the tail of the lognormal draws drags the whole instance


def _c8_128_fixed(response: int):
    sc = load_scenario(SCENARIOS / "c8-dapo-qwen25-math-7b-h20-128.yaml")
    wl = sc.workload.model_copy(update={"prompt_len": LengthDist(mean=150, max=2048),
                                        "response_len": LengthDist(mean=response, max=28672)})
    return sc.model_copy(update={"workload": wl})


def _with(sc, **values):
    ev = Evaluation(sc)
    ev = ev.with_profile(ev.profile.with_values(values, "test"))
    return simulate_rollout(ev.rollout_cost, ev.memory_report.kv_tokens, sc, np.random.default_rng(0), Trace(), 0.0)


def test_per_sequence_host_time_adds_up_to_the_tokens_a_replica_decodes():
    """Every decode step generates one token per running sequence, so the per-sequence host time of a replica sums
    to its cost x the tokens it decodes: C8 at 128 GPUs, 512 x 16 responses over 32 replicas = 256 each (one wave at
    max_num_seqs 256), 1000 tokens each: 256,000 tokens x 18 us = 4.608 s, whatever the per-step part does."""
    sc = _c8_128_fixed(1000)
    none = _with(sc, vllm_host_us_per_seq=0.0, decode_host_ms_graph=0.5)
    some = _with(sc, vllm_host_us_per_seq=18.0, decode_host_ms_graph=0.5)
    assert some.steps == none.steps
    assert none.components_s["host"] == pytest.approx(none.steps * 0.5e-3, rel=1e-9)
    assert some.components_s["host"] - none.components_s["host"] == pytest.approx(256_000 * 18e-6, rel=1e-9)


def test_per_sequence_scheduler_time_adds_up_to_the_tokens_a_replica_decodes():
    """The scheduler's per-sequence part sums the same way, into its own component: the same 256,000 tokens x 6 us
    = 1.536 s on top of 0.1 ms a step, and the host's component does not move."""
    sc = _c8_128_fixed(1000)
    base = {"vllm_host_us_per_seq": 18.0, "decode_host_ms_graph": 0.5, "vllm_schedule_ms": 0.1}
    none = _with(sc, vllm_schedule_us_per_seq=0.0, **base)
    some = _with(sc, vllm_schedule_us_per_seq=6.0, **base)
    assert some.steps == none.steps
    assert none.components_s["schedule"] == pytest.approx(none.steps * 0.1e-3, rel=1e-9)
    assert some.components_s["schedule"] - none.components_s["schedule"] == pytest.approx(256_000 * 6e-6, rel=1e-9)
    assert some.components_s["host"] == pytest.approx(none.components_s["host"], rel=1e-12)


def test_the_long_tail_runs_at_a_small_batch():
    """C8 at 128 GPUs with lognormal lengths (mean 2500): the slowest replica decodes about 256 x 2500 tokens over
    the steps of its longest response, so its mean batch over time is about 256 x 2500 / steps, a tenth of
    max_num_seqs; read back from its per-sequence host time (tokens = (host - steps x per-step part) / 18 us),
    its tokens per sequence are the distribution's mean within the sampling spread of 256 draws (CV 0.95 / 16 =
    6 %, +-20 % here for the longest draw it holds)."""
    sc = load_scenario(SCENARIOS / "c8-dapo-qwen25-math-7b-h20-128.yaml")
    out = _with(sc, vllm_host_us_per_seq=18.0, decode_host_ms_graph=0.5)
    tokens = (out.components_s["host"] - out.steps * 0.5e-3) / 18e-6
    assert out.steps > 10_000  # the longest of 256 draws: far past the mean of 2500
    assert tokens / 256 == pytest.approx(2500, rel=0.2)
    assert tokens / out.steps < 256 / 8


def _traced(ev, kv, seed, t0):
    rng, trace = np.random.default_rng(seed), Trace()
    out = simulate_rollout(ev.rollout_cost, kv, ev.sc, rng, trace, t0)
    return out, trace.spans, rng.bit_generator.state


def test_a_kv_cache_beyond_max_num_seqs_longest_sequences_changes_nothing():
    """Why the replay may cap the KV cache: the simulation itself (not the capping wrapper) gives the same."""
    ev = Evaluation(load_scenario(SCENARIOS / "own-qwen3-30b-a3b-a3-16dies.yaml"))
    cap = ev.rollout_cost.ro.max_num_seqs * ev.sc.workload.max_seq_len

    def simulated(kv):
        rng, trace = np.random.default_rng(3), Trace()
        out = rollout_sim._simulate(ev.rollout_cost, kv, ev.sc, rng, trace)
        return (out.seconds, out.steps, out.components_s), trace.spans, rng.bit_generator.state

    at_cap = simulated(cap)
    assert simulated(cap + 1) == at_cap and simulated(10 * cap) == at_cap
    # well below the cap the cache binds: sequences are preempted and the engine takes more steps (a quarter of
    # the cap still holds these lengths as they grow)
    assert simulated(cap // 4)[0] == at_cap[0] and simulated(cap // 16)[0][1] > at_cap[0][1]


def test_a_rollout_simulated_again_is_replayed_exactly(monkeypatch):
    monkeypatch.setattr(rollout_sim, "_SIMULATED", OrderedDict())
    ev = Evaluation(load_scenario(SCENARIOS / "own-qwen3-30b-a3b-a3-16dies.yaml"))
    kv = ev.memory_report.kv_tokens
    first, spans, state = _traced(ev, kv, 5, 0.0)
    assert len(rollout_sim._SIMULATED) == 1
    first.components_s["forward"] = -1.0  # a caller's change stays its own
    again, shifted, after = _traced(ev, kv, 5, 100.0)
    assert len(rollout_sim._SIMULATED) == 1  # replayed, not simulated
    assert again.components_s["forward"] > 0 and after == state
    assert [(s.lane, s.name, s.start_s, s.dur_s) for s in shifted] == [
        (s.lane, s.name, s.start_s + 100.0, s.dur_s) for s in spans]
    other = _traced(ev, kv, 6, 0.0)[0]  # other draws: simulated anew
    assert len(rollout_sim._SIMULATED) == 2 and other.seconds != again.seconds


def test_sequences_hold_whole_kv_blocks():
    """The two sequences of the hand-derived case above in blocks of 8 tokens and a cache of 4 blocks (32 tokens):
    10-token prompts take 2 blocks each (all 4), prefilled in one step; the next token of each fits the 16 tokens
    they hold (6 steps to 16 tokens), and the 17th needs a block there is none for: the window is 6 steps, then the
    second is preempted (its 2 blocks given back), the first runs alone to its 20 tokens, and
    the second, resumed with 16 tokens to prefill again, finishes its last 4 tokens."""
    ranks = rollout_sim._Ranks(np.array([[10, 10]]), np.array([[10, 10]]), block=8)
    assert _drive(ranks, kv=32) == ([(1, 0), (6, 2), (4, 1), (1, 1), (3, 1)], 16)
    assert int(ranks.preemptions[0]) == 1


def test_the_one_prefill_step_of_a_rollout_that_admits_everything_at_once_runs_eagerly():
    """C10's TP4 ablation: 32 sequences a DP rank, max_num_seqs 32, their prompts inside one step's token budget:
    one step prefills, on every rank at once, and that step alone runs the eager model."""
    sc = load_scenario(SCENARIOS / "c10-rollout-qwen3-235b-a3-128dies-tp4.yaml")
    out = _rollout(sc)
    rc = Evaluation(sc).rollout_cost
    assert rc.eager_fallback_s > 0.1
    assert out.components_s["eager_fallback"] == pytest.approx(rc.eager_fallback_s, rel=1e-9)
    # with a slot fewer than its sequences, every rank admits its last sequence when its first finishes: a second
    # eager step (the ranks' first finishes fall on different steps: more than one more)
    fewer = sc.model_copy(update={"layout": sc.layout.model_copy(update={
        "rollout": sc.layout.rollout.model_copy(update={"max_num_seqs": 31})})})
    assert _rollout(fewer).components_s["eager_fallback"] >= 2 * rc.eager_fallback_s
