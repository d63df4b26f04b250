"""The rollout phase, step by step: continuous batching per DP replica, chunked prefill, sampled lengths.

Every vLLM engine instance advances decode step by step on its own clock. Inside an instance with expert parallelism
all DP ranks step in lockstep (the EP dispatch/combine and the end-of-sequence sync join them): the instance's step
takes as long as its slowest rank's, and a rank that has finished still runs dummy steps until the whole instance is
done. The KV cache is allocated as vLLM allocates it, in whole blocks as sequences grow: each step every running
sequence needs room for one more token; where they do not all fit, the latest admitted running sequence is preempted
(its KV given back; it waits at the head of the queue and, resumed, prefills its prompt and what it had generated
again: vLLM's recompute preemption), and a rank admits nothing in a step in which it preempted. Otherwise a rank
resumes preempted sequences first, then admits queued ones while it has fewer than max_num_seqs running and KV room
for their prompts. Prompts and recomputed tokens are prefilled first come first served in chunks of the step's token
budget (max_num_batched_tokens minus one token per decoding sequence). The phase ends when the last instance ends.
Events are admissions, prefill chunks, finishing sequences and a full KV cache (a sequence taking a block there is
none for); between two events only decoding happens, and that window of steps is evaluated at once (contexts grow by
one token per step). In graph mode a step in which any rank of an instance prefills runs the eager model on all of
them (RolloutCost.eager_fallback_s).

When every length is fixed, all ranks are identical and one rank stands for all of them (exact).

Once the KV cache holds max_num_seqs sequences of the longest length (in whole blocks) it never binds, so the
rollout is simulated with the KV cache capped there (exact). A rollout with the same inputs (the planner's
gpu_memory_utilization steps of one layout) is simulated once and replayed: its outcome, its spans and the random
generator's state after it.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field, replace

import numpy as np
from numpy.typing import ArrayLike

from twin.cost_models.rollout import RolloutCost
from twin.layout.models import RolloutLayout
from twin.scenario import Scenario
from twin.sim.trace import Span, Trace
from twin.workload import MAX_SEQUENCES, sample_batch, sampled_note

SPAN_STEPS = 256  # at least this many engine steps aggregated into one trace span
# Queued sequences per rank simulated at most: every event scans a rank's queue, so the work grows with its
# square; 4096 is 4x the deepest queue of the shipped scenarios (1024 per rank) and 16x max_num_seqs 256.
MAX_PER_RANK = 4096
ROLLOUTS_KEPT = 64  # simulated rollouts kept for replay
# key -> (outcome, spans from time 0, generator state after, the objects the key names by id: kept alive so that
# no other object takes their id while the entry exists)
_SIMULATED: OrderedDict[tuple, tuple[RolloutOutcome, list[Span], dict, tuple]] = OrderedDict()


@dataclass
class RolloutOutcome:
    seconds: float  # prefill + decode of the slowest instance, plus the fixed RL scheduling
    steps: int  # engine steps of the slowest instance
    components_s: dict[str, float]  # where the slowest instance's time went
    represented: dict[str, list[int]] = field(default_factory=dict)
    instance_seconds: list[float] = field(default_factory=list)
    note: str | None = None  # set when fewer sequences were simulated than the step has
    preemptions: int = 0  # sequences preempted for KV room, all ranks (scaled like the steps)


def whole_blocks(tokens: ArrayLike, block: int) -> ArrayLike:
    """The KV tokens `tokens` tokens take in whole blocks of `block` tokens."""
    return -(-tokens // block) * block


class _Ranks:
    """Queue-ordered sequences of every simulated DP rank (rows) and their progress."""

    def __init__(self, prompts: np.ndarray, targets: np.ndarray, block: int = 1) -> None:
        self.block = block  # tokens of one KV-cache block: a sequence holds its tokens in whole blocks
        self.prompt = prompts.astype(np.int64)
        self.target = targets.astype(np.int64)
        rows, per = prompts.shape
        self.cum_prompt = np.concatenate([np.zeros((rows, 1), dtype=np.int64), np.cumsum(self.prompt, axis=1)], axis=1)
        self.admitted = np.zeros(rows, dtype=np.int64)
        self.prefilled = np.zeros(rows, dtype=np.int64)  # prompt tokens processed, in queue order
        self.generated = np.zeros((rows, per), dtype=np.int64)
        self.preempted = np.zeros((rows, per), dtype=bool)  # KV given back, waiting at the head of the queue
        self.recompute = np.zeros(rows, dtype=np.int64)  # tokens of resumed sequences still to prefill again
        self.preemptions = np.zeros(rows, dtype=np.int64)
        self.index = np.arange(per)[None, :]

    def _running(self) -> np.ndarray:
        """Sequences holding KV: admitted, not preempted, not finished."""
        return (self.index < self.admitted[:, None]) & ~self.preempted & (self.generated < self.target)

    def _decoding(self, running: np.ndarray) -> np.ndarray:
        """Running sequences whose prompts are prefilled."""
        return running & (self.cum_prompt[:, 1:] <= self.prefilled[:, None])

    def _blocks(self, tokens: ArrayLike) -> ArrayLike:
        return whole_blocks(tokens, self.block)

    def _held(self, running: np.ndarray, ahead: np.ndarray | int = 0) -> np.ndarray:
        """KV tokens each rank's running sequences hold in whole blocks, `ahead` more tokens each (the next step's
        token of the decoding ones)."""
        return (self._blocks(self.prompt + self.generated + ahead) * running).sum(axis=1)

    def preempt(self, kv_tokens: int) -> np.ndarray:
        """Where the next step's tokens do not fit, preempt the latest admitted running sequences until they do
        (one sequence always keeps running, as vLLM lets a sequence alone use the whole cache); which ranks
        preempted. Latest in queue order: a resumed sequence keeps its place, where vLLM puts it at the end of its
        running queue."""
        running = self._running()
        ahead = self._decoding(running).astype(np.int64)
        over = self._held(running, ahead) - kv_tokens
        hit = np.zeros(len(over), dtype=bool)
        for r in np.nonzero(over > 0)[0]:
            for i in np.nonzero(running[r])[0][:0:-1]:
                self.preempted[r, i] = True
                self.preemptions[r] += 1
                over[r] -= self._blocks(self.prompt[r, i] + self.generated[r, i] + ahead[r, i])
                if over[r] <= 0:
                    break
            hit[r] = True
        return hit

    def admit(self, max_seqs: int, kv_tokens: int, preempted_now: np.ndarray) -> None:
        """Resume preempted sequences, then admit queued ones, while slots and KV room last (not on a rank that has
        just preempted)."""
        running = self._running()
        free = max_seqs - running.sum(axis=1)
        room = kv_tokens - self._held(running, self._decoding(running).astype(np.int64))
        open_ranks = (free > 0) & ~preempted_now & ((self.admitted < self.prompt.shape[1]) | self.preempted.any(axis=1))
        for r in np.nonzero(open_ranks)[0]:
            waiting = np.nonzero(self.preempted[r])[0]
            sizes = self.prompt[r, waiting] + self.generated[r, waiting]
            fits = (np.cumsum(self._blocks(sizes + 1)) <= room[r]) & (np.arange(1, len(waiting) + 1) <= free[r])
            resumed = int(np.argmin(fits)) if not fits.all() else len(fits)
            if resumed == 0 and len(waiting) and not running[r].any():
                resumed = 1  # a sequence longer than the cache still runs alone
            self.preempted[r, waiting[:resumed]] = False
            self.recompute[r] += int(sizes[:resumed].sum())
            if resumed < len(waiting):
                continue  # the head of the queue waits for room: nothing behind it is admitted
            free_r = free[r] - resumed
            room_r = room[r] - int(self._blocks(sizes + 1).sum())
            start = self.admitted[r]
            fits = np.cumsum(self._blocks(self.prompt[r, start:start + max(free_r, 0)])) <= room_r
            take = int(np.argmin(fits)) if not fits.all() else len(fits)
            if take == 0 and free_r > 0 and not running[r].any() and resumed == 0:
                take = 1  # a prompt longer than the cache still runs alone
            self.admitted[r] += take

    def window(self, kv_tokens: int) -> int:
        """Engine steps until the next event, right after `preempt` and `admit`: a prefill to run, a sequence to
        finish or the KV cache full. `admit` has just taken every queued sequence that fits; one still waiting
        waits for a slot or for KV room, and slots and room only come free when a sequence finishes (decoding
        only fills the cache), so no admission can come before the next finish."""
        pending = self.cum_prompt[np.arange(len(self.admitted)), self.admitted] - self.prefilled
        if (pending > 0).any() or (self.recompute > 0).any():
            return 1
        running = self._running()
        decoding = self._decoding(running)
        left = np.where(decoding, self.target - self.generated, np.iinfo(np.int64).max)
        return int(max(1, min(left.min(), self._steps_until_full(running, decoding, kv_tokens))))

    def _steps_until_full(self, running: np.ndarray, decoding: np.ndarray, kv_tokens: int) -> int:
        """Decode steps the cache holds, every rank's decoding sequences growing one token a step (a rank with
        one sequence runs on whatever it holds). A sequence of L tokens takes a new block at the step j >= 2 at
        which L + j - 1 is a multiple of the block, then every `block` steps; the rank's free blocks last until
        one more block than they hold is asked for."""
        b, never = self.block, np.iinfo(np.int64).max
        count = decoding.sum(axis=1)
        shared = count > 1
        if not shared.any():
            return never
        free = (kv_tokens - self._held(running, decoding.astype(np.int64))) // b
        # each decoding sequence's first new block, in ascending order (the others last)
        first = np.sort(np.where(decoding, 2 + (-1 - self.prompt - self.generated) % b, never), axis=1)
        n = np.maximum(count, 1)
        period, nth = free // n, free % n
        steps = np.take_along_axis(first, nth[:, None], axis=1)[:, 0] + period * b - 1
        return int(steps[shared].min())

    def step(self, budget: int, steps: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Advance `steps` engine steps (more than one only when nothing but decoding happens):
        (decoding batch, mean decode context at the first step, prompt tokens prefilled, their context,
        recomputed tokens prefilled)."""
        decoding = self._decoding(self._running())
        batch = decoding.sum(axis=1)
        context = np.where(batch > 0, ((self.prompt + self.generated) * decoding).sum(axis=1) / np.maximum(batch, 1),
                           0.0)
        pending = self.cum_prompt[np.arange(len(batch)), self.admitted] - self.prefilled
        room = np.maximum(budget - batch, 0)
        again = np.minimum(self.recompute, room)
        tokens = np.minimum(pending, room - again)
        prompt_ctx = self.prompt.mean(axis=1) / 2
        self.generated += decoding * steps
        self.prefilled += tokens
        self.recompute -= again
        return batch, context, tokens, prompt_ctx, again

    def advance(self, max_seqs: int, kv_tokens: int, budget: int
                ) -> tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """One window of the engine loop: preempt, admit, and advance to the next event; (its steps, then what
        `step` returns)."""
        self.admit(max_seqs, kv_tokens, self.preempt(kv_tokens))
        k = self.window(kv_tokens)
        return k, *self.step(budget, k)

    def finished(self) -> np.ndarray:
        return (self.generated >= self.target).all(axis=1)


def simulate_rollout(rc: RolloutCost, kv_tokens: int, sc: Scenario, rng: np.random.Generator, trace: Trace,
                     t0: float) -> RolloutOutcome:
    """Run the rollout of one step and record its spans from time `t0` (replayed where the same rollout was
    simulated before: the module docstring)."""
    kv = min(kv_tokens, rc.ro.max_num_seqs * whole_blocks(sc.workload.max_seq_len, rc.kv_block))
    named = (rc.inv, rc.sc, rc.pf, rc.cluster.kind, sc)
    layout = rc.ro.model_copy(update={"gpu_memory_utilization": 0.0}).model_dump_json()
    key = (*map(id, named), rc.cluster.devices, layout, kv, repr(rng.bit_generator.state))
    hit = _SIMULATED.get(key)
    if hit is None:
        local = Trace()
        outcome = _simulate(rc, kv, sc, rng, local)
        hit = _SIMULATED[key] = (outcome, local.spans, rng.bit_generator.state, named)
        if len(_SIMULATED) > ROLLOUTS_KEPT:
            _SIMULATED.popitem(last=False)
    else:
        _SIMULATED.move_to_end(key)
        rng.bit_generator.state = hit[2]
    outcome, spans, _, _ = hit
    for sp in spans:
        trace.span(sp.lane, sp.track, sp.name, t0 + sp.start_s, sp.dur_s, **sp.args)
    return replace(outcome, components_s=dict(outcome.components_s),
                   represented={k: list(v) for k, v in outcome.represented.items()},
                   instance_seconds=list(outcome.instance_seconds))


def _simulate(rc: RolloutCost, kv_tokens: int, sc: Scenario, rng: np.random.Generator, trace: Trace
              ) -> RolloutOutcome:
    """The rollout of one step from time 0."""
    t0 = 0.0
    ro, wl, pf = rc.ro, sc.workload, rc.pf
    per_inst = rc.dp_per_instance
    ranks_total = ro.dp
    responses = rc.responses_per_round
    per_rank = -(-responses // ranks_total)
    fixed = wl.prompt_len.dist == "fixed" and wl.response_len.dist == "fixed" and responses % ranks_total == 0
    instances = 1 if fixed else ro.instances
    rows = 1 if fixed else ranks_total
    full_rank, note = per_rank, None
    if rows * per_rank > MAX_SEQUENCES or per_rank > MAX_PER_RANK:  # each queue cut to a representative part
        per_rank = max(1, min(MAX_SEQUENCES // rows, MAX_PER_RANK))
        note = sampled_note("rollout (simulated ranks)", rows * full_rank, rows * per_rank)
    scale = full_rank / per_rank
    # each rank a consecutive run of the batch (verl's chunks of it)
    prompts, targets = (lengths.reshape(rows, per_rank) for lengths in sample_batch(wl, rows * per_rank, rng))
    if not fixed and responses % ranks_total and note is None:  # the last ranks get one sequence fewer
        short = ranks_total * per_rank - responses
        targets[-short:, -1] = 0
        prompts[-short:, -1] = 0
    state = _Ranks(prompts, targets, rc.kv_block)
    group = per_inst if not fixed else 1
    clocks = np.zeros(instances)
    parts = {k: np.zeros(instances) for k in ("forward", "comm", "launch", "host", "schedule", "sync", "prefill",
                                                "recompute", "eager_fallback")}
    steps = np.zeros(instances, dtype=np.int64)
    span_start = np.zeros(instances)
    span_batch = np.zeros(instances)
    lanes = _lanes(ro, fixed, instances)
    n = flushed = 0
    while True:
        done_rank = state.finished()
        done_inst = done_rank.reshape(instances, group).all(axis=1)
        if done_inst.all():
            break
        k, batch, context, tokens, prompt_ctx, again = state.advance(ro.max_num_seqs, kv_tokens,
                                                                     ro.max_num_batched_tokens)
        # contexts grow by one token per step inside the window: evaluate every step of it at once
        ctx = context[:, None] + np.arange(k)[None, :]
        # every DP rank of an engine runs the captured graph of its busiest rank's batch
        step = rc.decode_step(batch[:, None], ctx, _engine_wide(batch, group)[:, None])
        # most windows prefill nothing: skip the cost model there (it would return exact zeros); a resumed
        # sequence's tokens are prefilled again at about half the running sequences' mean context
        prefill = rc.prefill_compute_s(tokens, prompt_ctx)[:, None] if tokens.any() else np.zeros((len(tokens), 1))
        recompute = (rc.prefill_compute_s(again, context / 2)[:, None] if again.any()
                     else np.zeros((len(again), 1)))
        # a step in which a rank of the engine prefills runs the eager model on all of them (graph mode)
        fallback = np.zeros((len(batch), 1))
        if rc.eager_fallback_s and (tokens.any() or again.any()):
            fallback = _engine_wide((tokens > 0) | (again > 0), group)[:, None] * rc.eager_fallback_s
        rank_time = np.broadcast_to(step.total + prefill + recompute + fallback, (len(batch), k))
        per_step = rank_time.reshape(instances, group, k)
        inst_time = per_step.max(axis=1).sum(axis=1) * ~done_inst
        slowest = per_step.sum(axis=2).argmax(axis=1) + np.arange(instances) * group
        for name, value in (("forward", step.forward_s), ("comm", step.comm_s), ("host", step.host_s),
                            ("schedule", step.schedule_s), ("prefill", prefill), ("recompute", recompute),
                            ("eager_fallback", fallback)):
            parts[name] += np.broadcast_to(value, rank_time.shape)[slowest].sum(axis=1) * ~done_inst
        for name, value in (("launch", step.launch_s), ("sync", step.sync_s)):
            parts[name] += value * k * ~done_inst
        clocks += inst_time
        steps += k * ~done_inst
        span_batch += batch.reshape(instances, group).mean(axis=1) * k * ~done_inst
        n += k
        if n - flushed >= SPAN_STEPS:
            _flush(trace, lanes, t0, span_start, clocks, span_batch, n, n - flushed)
            flushed = n
    if n > flushed:
        _flush(trace, lanes, t0, span_start, clocks, span_batch, n, n - flushed)
    clocks = clocks * scale + rc.request_host_s  # each instance's requests through vLLM's front end
    steps = np.rint(steps * scale).astype(np.int64)
    parts = {k: v * scale for k, v in parts.items()}
    parts["requests"] = np.full(instances, rc.request_host_s)
    worst = int(np.argmax(clocks))
    fixed_s = pf["rollout_fixed_s"]
    trace.span("driver", "rl scheduling", "rollout scheduling and offload", t0 + clocks[worst], fixed_s)
    components = {k: float(v[worst]) for k, v in parts.items()}
    components["rl_scheduling"] = fixed_s
    represented = {lane: members for lane, members in lanes}
    polled = rc.polled(float(clocks[worst]))
    components["poll_wait"] = polled - float(clocks[worst])
    return RolloutOutcome(seconds=polled + fixed_s, steps=int(steps[worst]),
                          components_s=components, preemptions=round(float(state.preemptions.sum()) * scale),
                          represented=represented, instance_seconds=[float(c) for c in clocks], note=note)


def _engine_wide(per_rank: np.ndarray, group: int) -> np.ndarray:
    """Each rank's value replaced by the largest over the `group` consecutive ranks of its engine."""
    return np.repeat(per_rank.reshape(-1, group).max(axis=1), group)


def _lanes(ro: RolloutLayout, fixed: bool, instances: int) -> list[tuple[str, list[int]]]:
    size = ro.instance_size
    if fixed:
        return [(f"rollout: every DP replica alike (ranks 0-{ro.devices - 1})", list(range(ro.devices)))]
    return [(f"rollout instance {i} (ranks {i * size}-{(i + 1) * size - 1})", list(range(i * size, (i + 1) * size)))
            for i in range(instances)]


def _flush(trace: Trace, lanes: list[tuple[str, list[int]]], t0: float, start: np.ndarray, clocks: np.ndarray,
           batch: np.ndarray, n: int, count: int) -> None:
    """One aggregated decode span per instance since the last flush."""
    for i, (lane, _) in enumerate(lanes[:32]):
        dur = clocks[i] - start[i]
        if dur > 0:
            trace.span(lane, "decode", f"engine steps {n - count}-{n - 1}", t0 + start[i], dur,
                       mean_batch=round(float(batch[i]) / count, 1), steps=count)
    start[:] = clocks
    batch[:] = 0.0
