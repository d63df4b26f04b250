"""One colocated GRPO, DAPO or PPO step (or k of them) as a simpy simulation, driven by the scenario and the profile.

In order: rollout (twin.sim.rollout), rollout weights offloaded and the KV cache released, reward, the
old-policy log-prob pass unless skipped, the reference pass (weights on and off the device around it), PPO's
critic values pass (its weights likewise), the advantage, PPO's update_critic, update_actor (each: state onloaded,
task dispatch, then per mini-batch the 1F1B pipeline and the optimizer step, state offloaded), and
the transition back: rollout weights onloaded, the reshard on the topology's ports, the actor offloaded.
Task dispatch before each worker call costs the skew of handing inputs to the workers (Ray one worker at a
time, or device to device). Response and prompt lengths are drawn from the workload (seeded).

verl's framework time per call and per response (twin.cost_models.scheduling, where the profile carries the
overhead job's terms): the agent-loop path hands the requests to the engine one by one, and where the engine
computes on the host's cores the two share them (twin.cost_models.host_sharing) until the last hand-over; the round
ends when the last request has left the engine and the path has finished, seen at the trainer's next poll;
bypass-mode old_log_prob is its TransferQueue copy; update_actor adds its call and per-response terms to the passes
and the optimizer step.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import simpy

from twin.cost_models.host_pages import returned_page_seconds
from twin.cost_models.scheduling import driver_seconds, framework_seconds
from twin.cost_models.timers import CALL_MOMENTS, as_timed, timed_note
from twin.cost_models.training import TrainCost
from twin.cost_models.transition import offload_moments, reshard_time
from twin.evaluate import Evaluation
from twin.results import CRITIC_STAGES, STAGES, SimulationResult
from twin.sim.pipeline import PipelineRun, run_pipeline
from twin.sim.rollout import RolloutOutcome, simulate_rollout
from twin.sim.trace import Trace
from twin.workload import represented, sample_batch, sampled_note

MAX_DP_REPLICAS_SIMULATED = 8  # with random lengths, the DP replicas whose pipelines are simulated
MAX_LOCKSTEP_REPLICAS = 64  # replicas in lockstep simulated together, at most (their slowest bounds each micro-batch)


@dataclass
class StepRecord:
    stages_s: dict[str, float]  # as the run's timers report them (twin.cost_models.timers)
    split: dict[str, float]  # the same seconds in the twin's split: offloads and the sync as stages of their own
    rollout: RolloutOutcome
    pipelines: dict[str, PipelineRun] = field(default_factory=dict)


# the trace labels of the weights each forward-only pass loads before it and offloads after it (its offload moments:
# twin.cost_models.timers CALL_MOMENTS)
PASS_LABELS = {
    "old_log_prob": ("actor weights onload", "actor weights offload"),
    "ref": ("ref weights onload", "ref weights offload"),
    "values": ("critic weights onload", "critic weights offload"),
}
# each update's state moves before and after it: the trace labels
UPDATE_LABELS = {
    "update_critic": ("critic state onload", "critic state offload"),
    "update": ("actor state onload", "actor state offload"),
}


class StepSimulation:
    """Simulates `steps` GRPO steps of one evaluated scenario."""

    def __init__(self, ev: Evaluation, seed: int | None = None) -> None:
        self.ev = ev
        self.sc = ev.sc
        self.rng = np.random.default_rng(ev.sc.seed if seed is None else seed)
        self.trace = Trace()
        self.env = simpy.Environment()
        self.records: list[StepRecord] = []
        self.represented: dict[str, list[int]] = {}
        self.drawn, self.weight = represented(ev.sc.workload.responses)  # training passes: sequences drawn

    # ---- training passes ----------------------------------------------------------------------------
    def _replicas(self, prompts: np.ndarray, responses: np.ndarray, micro: int, forward_only: bool, tc: TrainCost
                  ) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per simulated DP replica, (tokens, squared lengths) the model `tc` costs computes for each of its
        micro-batches, as its layout pads them (`micro_batch_work`). Dynamic micro-batches pack at the pass's budget
        (a forward-only pass at the log-prob one), every replica into as many as the replica that needs most
        (verl's rearrange_micro_batches takes the maximum over the ranks, same_micro_num_in_dp). Replicas in
        lockstep (`TrainCost.lockstep_replicas`) are simulated a whole group at a time, at least one group of at
        most MAX_LOCKSTEP_REPLICAS."""
        dp = self.ev.train_memory.dp
        per = max(1, len(responses) // dp)  # a replica given less than one sequence still runs one
        micro = min(micro, per)  # a micro-batch never holds more sequences than its replica has
        fixed = self.sc.workload.prompt_len.dist == "fixed" and self.sc.workload.response_len.dist == "fixed"
        group = min(tc.lockstep_replicas, MAX_LOCKSTEP_REPLICAS)
        wanted = max(group, MAX_DP_REPLICAS_SIMULATED // group * group)
        count = 1 if fixed else min(dp, wanted, len(responses) // per)
        shares = [(prompts + responses)[r * per:(r + 1) * per].astype(float) for r in range(count)]
        padding = tc.lay.padding
        if tc.lay.dynamic_batch_tokens is not None:  # the model's own layout: a critic's always packs by tokens
            m = max(tc.micro_batches_of(lengths, forward_only) for lengths in shares)
            return [micro_batch_work(lengths, _packed(lengths, m), m, padding) for lengths in shares]
        m = max(1, per // micro)
        bins = np.arange(m * micro) // micro
        return [micro_batch_work(lengths[: m * micro], bins, m, padding) for lengths in shares]

    def _arranged(self, prompts: np.ndarray, responses: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The step's sequences in the order the trainer's DP ranks take them: verl dispatches consecutive equal runs
        of the batch, one to each rank. With verl's balance_batch the driver first rearranges the batch into shares of
        equal workload, each ordered short-long-short where the verl does so (`Software.orders_for_pipeline`);
        without it (or under MindSpeed-RL) the batch keeps its order."""
        dp = self.ev.train_memory.dp
        if not self.sc.balances_batch or dp == 1 or len(responses) % dp:
            return prompts, responses
        ordered = self.sc.software.orders_for_pipeline
        work = verl_workload((prompts + responses).astype(float), ordered)
        order = np.concatenate([short_long_short(share, work, ordered) for share in balanced_shares(work, dp)])
        return prompts[order], responses[order]

    def _pass(self, label: str, micro: int, kind: str, prompts: np.ndarray, responses: np.ndarray, tc: TrainCost
              ) -> Generator[simpy.Event, object, PipelineRun]:
        """The DP replicas' pipeline passes of the model `tc` costs run side by side (forward-only, or 1F1B forward +
        backward), those in lockstep as one pipeline whose every micro-batch waits for the group's slowest
        (`TrainCost.lockstep_times`); the pass ends with the slowest group. Only the first group's spans go to the
        trace."""
        replicas = self._replicas(prompts, responses, micro, kind == "log_prob", tc)
        group = min(tc.lockstep_replicas, len(replicas))
        runs = []
        for i in range(0, len(replicas), group):
            tokens = np.stack([t for t, _ in replicas[i:i + group]])
            squares = np.stack([q for _, q in replicas[i:i + group]])
            if kind == "log_prob":
                fwd, bwd = tc.lockstep_times(tokens, squares, "log_prob"), None
            else:
                fwd, bwd = tc.lockstep_times(tokens, squares, "forward"), tc.lockstep_times(tokens, squares, "backward")
            trace = self.trace if i == 0 else Trace()
            runs.append(self.env.process(run_pipeline(self.env, fwd, bwd, tc.p2p_s(float(tokens.mean())), trace,
                                                      self._stage_lanes, label)))
        yield self.env.all_of(runs)
        run = max((r.value for r in runs), key=lambda run: run.seconds)
        if self.weight > 1:  # each drawn sequence stands for `weight`: the pass takes that much longer
            yield self.env.timeout(run.seconds * (self.weight - 1))
            run = PipelineRun(run.seconds * self.weight, [b * self.weight for b in run.busy_s], run.bubble_fraction)
        return run

    @cached_property
    def _stage_lanes(self) -> list[str]:
        lay, devices = self.ev.layout.train, self.ev.devices
        if lay.engine == "fsdp":
            lane = f"training: FSDP, every rank alike (ranks 0-{devices - 1})"
            self.represented[lane] = list(range(devices))
            return [lane]
        lanes = []
        for s in range(lay.pp):
            ranks = list(range(s * devices // lay.pp, (s + 1) * devices // lay.pp))
            lane = f"pipeline stage {s} (ranks {ranks[0]}-{ranks[-1]}; TP/DP/EP peers alike)"
            self.represented[lane] = ranks
            lanes.append(lane)
        return lanes

    # ---- the step ------------------------------------------------------------------------------------
    def _timed(self, lane: str, track: str, name: str, seconds: float) -> Generator[simpy.Event, object, float]:
        start = self.env.now
        self.trace.span(lane, track, name, start, seconds)
        yield self.env.timeout(seconds)
        return seconds

    def _transition(self, label: str, moment: str, moments: dict[str, float], charged: dict[str, float]
                    ) -> Generator[simpy.Event, object, None]:
        """One offload moment of the step on the driver's lane, recorded in `charged` (the offload stage is their sum;
        twin.cost_models.timers puts each in the stage whose timer holds it)."""
        charged[moment] = yield from self._timed("driver", "transition", label, moments[moment])

    def _returned_pages(self, name: str, pages: dict[str, float]) -> Generator[simpy.Event, object, float]:
        """The trainer ranks first-touching host-returned pages before pass `name` (twin.cost_models.host_pages)."""
        seconds = pages.get(name, 0.0)
        if seconds:
            for lane in self._stage_lanes:
                self.trace.span(lane, "compute", f"{name}: first touch of host-returned pages", self.env.now, seconds)
            yield self.env.timeout(seconds)
        return seconds

    def _step(self, k: int) -> Generator[simpy.Event, object, None]:
        ev, sc, pf, env = self.ev, self.sc, self.ev.profile, self.env
        wl = sc.workload
        prompts, responses = sample_batch(wl, self.drawn, self.rng)
        critic = ev.train_cost.value_model
        stages = dict.fromkeys((s for s in STAGES if critic is not None or s not in CRITIC_STAGES), 0.0)
        moments = offload_moments(ev.train_memory, ev.rollout_memory, sc, ev.cluster, pf)
        charged: dict[str, float] = {}  # the moments this step made, by moment
        mem = ev.memory_report.phases
        driver = driver_seconds(sc, pf)
        pages = returned_page_seconds(sc, pf, ev.train_memory)
        drv = "driver"
        self.trace.span(drv, "step", f"step {k}", env.now, 0.0)
        t_step = env.now

        self.trace.mark_memory(env.now, "rollout", mem["rollout"])
        outcome = simulate_rollout(ev.rollout_cost, ev.memory_report.kv_tokens, sc, self.rng, self.trace, env.now)
        self.represented.update(outcome.represented)
        rollout_s = self._with_agent_loop(outcome) * wl.gen_rounds  # DAPO: further rounds of the same kind
        yield env.timeout(rollout_s)
        stages["rollout"] = rollout_s
        yield from self._transition("offload rollout weights, free KV cache", "after_rollout",
                                                         moments, charged)
        stages["reward"] = yield from self._timed(drv, "reward", "reward (math_verify)", driver["reward"])
        pipelines: dict[str, PipelineRun] = {}
        prompts, responses = self._arranged(prompts, responses)
        self.trace.mark_memory(env.now, "log_prob", mem["log_prob"])
        bypass = framework_seconds(pf, "old_log_prob", wl.responses) if sc.has("skip_old_log_prob") else 0.0
        if bypass:  # bypass mode: the rollout's log-probs copied through TransferQueue
            stages["old_log_prob"] = yield from self._timed(drv, "driver", "old_log_prob (bypass copy)", bypass)
        # each forward pass with the model it runs, None where the step skips it
        forward_passes = (("old_log_prob", None if sc.has("skip_old_log_prob") else ev.train_cost),
                          ("ref", ev.train_cost if wl.use_kl_loss else None), ("values", critic))
        for name, tc in forward_passes:
            if tc is None:
                continue
            (onload, offload), (onload_key, offload_key) = PASS_LABELS[name], CALL_MOMENTS[name]
            if moments[onload_key]:
                yield from self._transition(onload, onload_key, moments, charged)
            skew = ev.dispatch_s(name)
            yield from self._timed(drv, "dispatch", f"{name} task dispatch", skew)
            touch = yield from self._returned_pages(name, pages)
            run = yield from self._pass(name, ev.layout.train.log_prob_micro_batch, "log_prob", prompts, responses, tc)
            pipelines[name] = run
            collect = ev.collect_s(name)
            if collect:
                yield from self._timed(drv, "driver", f"{name} outputs collected", collect)
            stages[name] = skew + touch + run.seconds + collect
            if moments[offload_key]:
                yield from self._transition(offload, offload_key, moments, charged)
        stages["advantage"] = yield from self._timed(drv, "advantage", "advantage", driver["advantage"])
        self.trace.mark_memory(env.now, "update", mem["update"])
        updates = (("update_critic", critic), ("update", ev.train_cost))
        for name, tc in updates:
            if tc is None:
                continue
            (onload, offload), (onload_key, offload_key) = UPDATE_LABELS[name], CALL_MOMENTS[name]
            yield from self._transition(onload, onload_key, moments, charged)
            stages[name] = yield from self._update(name, tc, prompts, responses, pages, pipelines)
            yield from self._transition(offload, offload_key, moments, charged)
        self.trace.mark_memory(env.now, "transition", mem["transition"])
        yield from self._transition("rollout weights onload", "before_reshard", moments, charged)
        reshard = reshard_time(ev.reshard(), ev.cluster, pf, ev.rollout_memory, ev.train_memory, sc)
        stages["reshard"] = yield from self._timed("reshard", "comm", f"reshard ({ev.method})", reshard)
        yield from self._transition("actor weights offload", "after_reshard", moments, charged)
        self.trace.span(drv, "step", f"step {k}", t_step, env.now - t_step)
        stages["offload"] = sum(charged.values())  # the twin's split: every moment this step made
        self.records.append(StepRecord(as_timed(stages, charged, sc.software), stages, outcome, pipelines))

    def _update(self, name: str, tc: TrainCost, prompts: np.ndarray, responses: np.ndarray, pages: dict[str, float],
                pipelines: dict[str, PipelineRun]) -> Generator[simpy.Event, object, float]:
        """One update call (update_actor, or PPO's update_critic) of the model `tc` costs: task dispatch, verl's
        framework time around the passes, then per mini-batch the 1F1B pipeline and the optimizer step."""
        ev, wl, drv = self.ev, self.sc.workload, "driver"
        call = "update_actor" if name == "update" else name
        skew = ev.dispatch_s(name)
        yield from self._timed(drv, "dispatch", f"{call} task dispatch", skew)
        seconds = skew
        # update_actor's framework terms stand for update_critic's call too (twin.cost_models.stages)
        if framework := framework_seconds(ev.profile, "update", wl.responses):
            seconds += yield from self._timed(drv, "dispatch", f"{call} framework time", framework)
        seconds += yield from self._returned_pages(name, pages)
        opt_step = tc.optimizer_time() / wl.optimizer_steps
        mini_batches = wl.optimizer_steps // wl.ppo_epochs
        for epoch in range(wl.ppo_epochs):
            for i in range(mini_batches):
                part = mini_batch_indices(i, mini_batches, len(responses), ev.train_memory.dp)
                run = yield from self._pass(f"{name} {epoch}.{i}", ev.layout.train.micro_batch, "train",
                                            prompts[part], responses[part], tc)
                pipelines[f"{name} {epoch}.{i}"] = run
                seconds += run.seconds
                seconds += yield from self._timed(drv, "optimizer", f"{call}: grad sync + optimizer step", opt_step)
        return seconds

    def _with_agent_loop(self, outcome: RolloutOutcome) -> float:
        """One round's rollout with verl's agent-loop path handing every request to the engine, where the profile
        carries the path (RolloutCost.agent_loop_round; the outcome's poll wait replaced): the outcome's
        components, engine steps and note become the round's."""
        rc = self.ev.rollout_cost
        fixed = outcome.components_s["rl_scheduling"]
        at_once = outcome.seconds - outcome.components_s["poll_wait"] - fixed
        agent = rc.agent_loop_round(at_once, outcome.steps)
        if agent is None:
            return outcome.seconds
        polled = rc.polled(agent.busy_s)
        outcome.steps = agent.steps
        outcome.components_s = {**agent.components_s, "rl_scheduling": fixed, "poll_wait": polled - agent.busy_s}
        outcome.note = "; ".join(n for n in (outcome.note, agent.note) if n)
        outcome.seconds = polled + fixed
        return outcome.seconds

    def run(self, steps: int = 1) -> list[StepRecord]:
        def all_steps() -> Generator[simpy.Event, object, None]:
            for k in range(steps):
                yield from self._step(k)

        self.env.process(all_steps())
        self.env.run()
        return self.records

    def result(self, alternatives: bool = True) -> SimulationResult:
        """The DESIGN 4.3 object: mean stage times over the simulated steps (with the other reshard methods'
        figures unless `alternatives` is False)."""
        n = len(self.records)
        stages = {k: sum(r.stages_s[k] for r in self.records) / n for k in self.records[0].stages_s}
        steps_s = [sum(r.stages_s.values()) for r in self.records]
        last = self.records[-1]
        notes = [f"simulated {n} step(s): step time min {min(steps_s):.2f} s, max {max(steps_s):.2f} s",
                 f"rollout: {last.rollout.steps} engine steps on the slowest instance; "
                 + ", ".join(f"{k} {v:.1f} s" for k, v in last.rollout.components_s.items())
                 + (f"; {last.rollout.preemptions} sequences preempted for KV room (recomputed)"
                    if last.rollout.preemptions else "")]
        for name, run in last.pipelines.items():
            if name.split()[0] not in UPDATE_LABELS or name.endswith(" 0.0"):  # an update's first mini-batch
                notes.append(f"{name}: pipeline bubble {run.bubble_fraction * 100:.1f} %")
        notes += [last.rollout.note] if last.rollout.note else []
        if timed := timed_note(last.split, last.stages_s, self.sc.software):
            notes.append(timed)
        if self.weight > 1:
            notes.append(sampled_note("training passes", self.sc.workload.responses, self.drawn))
        return self.ev.result(stages, "simulation", notes=notes, alternatives=alternatives,
                              represented=self.represented)


def mini_batch_indices(i: int, mini_batches: int, sequences: int, dp: int) -> np.ndarray | slice:
    """The sequences of mini-batch `i` of `mini_batches`: verl hands each of `dp` ranks a consecutive run of the batch
    and each rank splits its run into the mini-batches in order, so the mini-batch is the i-th part of every rank's
    run (runs of equal size; else the batch's i-th consecutive part)."""
    per = sequences // dp
    size = per // mini_batches
    if dp * per != sequences or size * mini_batches != per:
        part = sequences // mini_batches
        return slice(i * part, (i + 1) * part)
    return (np.arange(dp)[:, None] * per + i * size + np.arange(size)).ravel()


def verl_workload(lengths: np.ndarray, quadratic: bool) -> np.ndarray:
    """What verl's balance_batch balances a sequence by: its length, or from 0.6.1 (`quadratic`) its attention-aware
    workload 24576 x length + length^2 (verl/utils/seqlen_balancing.calculate_workload)."""
    return 24576.0 * lengths + lengths**2 if quadratic else lengths


def balanced_shares(work: np.ndarray, shares: int) -> list[np.ndarray]:
    """Indices of sequences of workloads `work` (a multiple of `shares` of them) dealt into `shares` shares of equal
    size and near-equal workload: heaviest first, in rounds of one sequence a share, the round's heaviest to the
    lightest share so far (verl partitions with Karmarkar-Karp differencing; both leave the shares within about one
    sequence's workload of each other). Each share in batch order."""
    rounds = np.argsort(-work, kind="stable").reshape(-1, shares)
    load = np.zeros(shares)
    owner = np.empty(len(work), dtype=int)
    for members in rounds:
        lightest_first = np.argsort(load, kind="stable")
        owner[members] = lightest_first
        load[lightest_first] += work[members]
    return [np.flatnonzero(owner == s) for s in range(shares)]


def short_long_short(share: np.ndarray, work: np.ndarray, ordered: bool) -> np.ndarray:
    """A share's indices in its micro-batches' order: with `ordered` (verl >= 0.6.1), sorted by workload, every other
    one from the front and the rest reversed behind them (ray_trainer._balance_batch: `partition[::2] +
    partition[1::2][::-1]`), so neighbours are alike and the short ones run first and last; else as given."""
    if not ordered:
        return share
    rising = share[np.argsort(work[share], kind="stable")]
    return np.concatenate([rising[::2], rising[1::2][::-1]])


def _packed(lengths: np.ndarray, m: int) -> np.ndarray:
    """The micro-batch of each sequence when `m` micro-batches are balanced by tokens, longest sequence first into the
    lightest micro-batch (verl balances its dynamic micro-batches by workload the same way)."""
    tokens = np.zeros(m)
    bins = np.empty(len(lengths), dtype=np.int64)
    for i in np.argsort(lengths, kind="stable")[::-1]:
        bins[i] = int(np.argmin(tokens))
        tokens[bins[i]] += lengths[i]
    return bins


def micro_batch_work(lengths: np.ndarray, bins: np.ndarray, m: int, padding: str) -> tuple[np.ndarray, np.ndarray]:
    """(tokens, squared lengths) the model computes for each of `m` micro-batches, sequence i of `lengths` in
    micro-batch bins[i]: the sequences' own, packed, or every sequence padded to its micro-batch's longest or to the
    longest of them all, the rank's pass (`TrainLayout.padding`: a padded position runs every operator and, in a
    row of that length, the attention's square)."""
    if padding == "none":
        return np.bincount(bins, lengths, m), np.bincount(bins, lengths**2, m)
    if padding == "mini_batch":
        longest = np.full(m, lengths.max())
    else:
        longest = np.zeros(m)
        np.maximum.at(longest, bins, lengths)
    rows = np.bincount(bins, minlength=m)
    return rows * longest, rows * longest**2


def simulated(ev: Evaluation) -> SimulationResult:
    """The discrete-event prediction of one step (the planner's full evaluation of a candidate; the planner adds
    the other reshard methods' figures to the winner only: at 16,384 devices each costs seconds)."""
    sim = StepSimulation(ev)
    sim.run(1)
    return sim.result(alternatives=False)


def simulate(ev: Evaluation, steps: int = 1, seed: int | None = None) -> tuple[SimulationResult, StepSimulation]:
    sim = StepSimulation(ev, seed)
    sim.run(steps)
    return sim.result(), sim
