"""Fit a profile to the calibration jobs' micro-benchmarks (the `cpu` kind's profile comes only from them).

The scales of the device's efficiency curves are read off the measurements: each point's measured fraction
of peak divided by the curve's value at the point's operation size (the GEMM job's 2mnk FLOPs, the attention
job's prefill sequence length, the copy job's bytes), the median over the points; the copy job also gives the
host link efficiency. No job measures grouped expert GEMMs, so that scale keeps its base value. The rest
are fitted by least squares through the twin's own cost models: the collectives job through
`collective_time` on the cluster (tier efficiency, per-step latency, all-to-all latencies), the decode
job through the rollout's decode-step model (the per-step host cost of the mode it ran in, and from its TP2 points
what vLLM's TP all-reduces between its worker processes cost beyond the collective curves) and prefill model (from
its request points, vLLM's host time per request beyond the prefill: non-negative least squares over the batch
sizes at each TP size), the train job
through the training pass and optimizer-step models (per-pass and per-step overheads, the forward-only
pass's efficiency). The overhead job's verl points give verl's framework time per call and per response
(twin.cost_models.scheduling FRAMEWORK_TERMS): the agent-loop path's seconds per response (through the
origin), each driver stage's call and per-response seconds (non-negative least squares over the batch sizes),
and update_actor's the same over what its measured time leaves beyond the twin's passes and optimizer step. The
page_touch job gives the extra cost of first-touching a page the host has taken back (twin.cost_models.host_pages).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path

import numpy as np

from calibration.jobs.decode import REQUEST_TOKEN_BUDGET, model_spec
from calibration.jobs.overhead import GROUP
from calibration.lsq import ParameterSpace
from calibration.measurements import JobMeasurement
from twin.catalog.config import parse_config
from twin.catalog.inventory import Inventory, build_inventory
from twin.cost_models.comm import collective_time
from twin.cost_models.efficiency import SCALE, Curve, efficiency, peak_flops
from twin.cost_models.host_pages import RETURNED_PAGE_TERM
from twin.cost_models.memory import GB, RolloutMemory, TrainMemory
from twin.cost_models.rollout import RolloutCost
from twin.cost_models.scheduling import FRAMEWORK_TERMS
from twin.cost_models.static import tensor_table
from twin.cost_models.training import TrainCost
from twin.cost_models.transition import handover_entries_s, load_entries_s
from twin.layout.models import Layout, RolloutLayout, TrainLayout
from twin.profile import Profile
from twin.scenario import ClusterRef, LengthDist, Scenario, Workload
from twin.topology.clusters import cluster_kind
from twin.topology.routing import Cluster

AGENT_WORKERS = 1  # the CPU target's agent-loop workers (executor/cpu/launch.py agent.num_workers)
DRIVER_STAGES = {"old_log_prob_bypass": "old_log_prob", "advantage": "advantage"}  # overhead job op -> stage
COLLECTIVE_OPS = {"all_reduce": "all_reduce", "all_gather": "all_gather", "reduce_scatter": "reduce_scatter",
                  "all_to_all_single": "all_to_all", "broadcast": "broadcast"}


@dataclass
class JobFitOutcome:
    profile: Profile
    errors: dict[str, list[float]]  # job -> relative error of each fitted point after the fit
    notes: list[str] = field(default_factory=list)


def _median(records: list[JobMeasurement], figure: str) -> list[float]:
    return [r.derived[figure] for r in records if figure in r.derived]


def call_and_slope(x: list[float], y: list[float]) -> tuple[float, float]:
    """(intercept, slope) of y over x by least squares with both kept non-negative (a call cannot take less
    than nothing, nor a response)."""
    from scipy.optimize import nnls

    solution, _ = nnls(np.column_stack([np.ones(len(x)), np.asarray(x, dtype=float)]), np.asarray(y, dtype=float))
    return float(solution[0]), float(solution[1])


def decode_graph_mode(r: JobMeasurement) -> bool:
    """Whether a decode job point timed graph mode: its `graph` flag; points written before the flag came from
    compiled vLLM (graph) or transformers (eager)."""
    return bool(r.params.get("graph", r.params.get("engine") == "vllm"))


def decode_tp(r: JobMeasurement) -> int:
    """The TP size of a decode job point (points written before the job ran TP2 ran at TP1)."""
    return int(r.params.get("tp", 1))


def _engine(inv: Inventory, sc: Scenario, cluster: Cluster, profile: Profile, lay: RolloutLayout) -> RolloutCost:
    """The twin's rollout cost model of one decode job engine."""
    memory = RolloutMemory(inv, lay, profile, cluster.kind.device_spec.capacity_gb)
    return RolloutCost(inv, sc, cluster, profile, memory)


def decode_step_seconds(inv: Inventory, sc: Scenario, cluster: Cluster, profile: Profile, batch: int, ctx: int,
                        graph: bool, tp: int = 1) -> float:
    """The twin's decode step of the decode job's point: one engine of `tp` ranks running `batch` sequences at
    `ctx`."""
    lay = RolloutLayout(tp=tp, dp=1, max_num_seqs=batch, max_num_batched_tokens=max(batch, 8192), graph_mode=graph)
    return float(_engine(inv, sc, cluster, profile, lay).decode_step(batch, ctx).total)


def prefill_call_seconds(inv: Inventory, sc: Scenario, cluster: Cluster, profile: Profile, batch: int, ctx: int,
                         tp: int) -> float:
    """The twin's prefill of a decode job request point: `batch` prompts of `ctx` tokens on one engine of `tp`
    ranks (what its one-token generate costs besides vLLM's host time per request)."""
    lay = RolloutLayout(tp=tp, dp=1, max_num_seqs=batch, max_num_batched_tokens=REQUEST_TOKEN_BUDGET,
                        graph_mode=False)
    return _engine(inv, sc, cluster, profile, lay).prefill_time(float(batch * ctx))


def per_sample(r: JobMeasurement, figure: str) -> float:
    """An amount per response of an overhead-job record (its rate times its median, over its responses)."""
    return r.derived[figure] * r.stats.median_s / float(r.params["responses"])


class JobFit:
    """Derives the profile parameters the jobs can see; everything else keeps its base value."""

    def __init__(self, base: Profile, records: list[JobMeasurement], dtype: str, model_config: Path | None = None
                 ) -> None:
        self.base = base
        self.kind = cluster_kind(base.cluster_kind)
        self.dtype = dtype
        self.by_job: dict[str, list[JobMeasurement]] = {}
        for r in records:
            self.by_job.setdefault(r.job, []).append(r)
        self.model_label, self.model_config = model_spec(model_config)
        self.values: dict[str, float] = {}
        self.sources: dict[str, str] = {}
        self.errors: dict[str, list[float]] = {}
        self.notes: list[str] = []

    # ---- read off directly ---------------------------------------------------------------------------
    def _set(self, name: str, value: float, source: str) -> None:
        lo, hi = self.base.params[name].bounds or (value, value)
        clamped = min(max(value, lo), hi)
        if clamped != value:
            self.notes.append(f"{name}: measured {value:.4g} is outside its bounds [{lo}, {hi}], kept at {clamped}")
        self.values[name] = clamped
        self.sources[name] = source

    def _scale(self, name: str, curve: Curve, points: list[tuple[float, float]], what: str) -> None:
        """A curve's scale from (operation size, measured fraction of peak) points: the median over the points
        of measured / (peak x curve value at that size), so the twin's cost at each size matches the job's."""
        ratios = [frac / float(efficiency(self.kind, self.base, curve, x)) * self.base[SCALE[curve]]
                  for x, frac in points]
        sizes = [x for x, _ in points]
        self._set(name, statistics.median(ratios),
                  f"calibration {what}: median over {len(ratios)} points of measured / (peak x the device's {curve} "
                  f"curve at the point's size {min(sizes):.3g}-{max(sizes):.3g}); ratios "
                  f"{min(ratios):.3g}-{max(ratios):.3g}")

    def direct(self) -> None:
        spec = self.kind.device_spec
        peak = peak_flops(self.kind)  # the bf16 peak every cost model divides by
        gemm = [r for r in self.by_job.get("gemm", []) if r.dtype == self.dtype and r.flops and "tflops" in r.derived]
        if gemm:
            points = [(float(r.flops), r.derived["tflops"] * 1e12 / peak) for r in gemm]
            self._scale("gemm_efficiency_scale", "gemm", points, f"gemm job ({self.dtype}, x = 2mnk FLOPs)")
        attention = [r for r in self.by_job.get("attention", []) if r.op.endswith("prefill")
                     and r.dtype == self.dtype and "tflops" in r.derived]
        if attention:
            points = [(float(r.params["seq"]), r.derived["tflops"] * 1e12 / peak) for r in attention]
            self._scale("attention_efficiency_scale", "attention", points,
                        f"attention job ({self.dtype} prefill, x = sequence length)")
        copy = [r for r in self.by_job.get("copy", []) if r.bytes and "gbps" in r.derived]
        if copy:
            g = [r.derived["gbps"] for r in copy]
            host = self.kind.tier("host").bandwidth_gbs.value
            self._set("host_efficiency_scale", statistics.median(g) / host,
                      f"calibration copy job, median of {len(g)} points, {statistics.median(g):.3g} GB/s over {host:g}")
            points = [(float(r.bytes), r.derived["gbps"] / spec.hbm_bandwidth_gbs.value) for r in copy]
            self._scale("memory_efficiency_scale", "memory", points, "copy job (x = bytes copied)")

    def overhead(self) -> None:
        """Framework time per call from the overhead job: verl worker-group calls and the rollout poll."""
        records = self.by_job.get("overhead", [])
        calls = [r for r in records if r.op == "worker_call"]
        counts = sorted({int(r.params["workers"]) for r in calls})
        if len(counts) >= 2:
            # a no-op call with its inputs handed over outside it: the call's own framework time (worker_call_s,
            # in every worker-group call the twin books) plus Ray's task to each worker
            call, per_worker = call_and_slope([float(r.params["workers"]) for r in calls],
                                              [r.stats.median_s for r in calls])
            what = f"calibration overhead job: verl worker-group no-op calls on {counts} workers"
            self._set("worker_call_s", call, f"{what}, intercept (non-negative least squares)")
            self._set("dispatch_ray_s_per_worker", per_worker, f"{what}, seconds per worker (slope)")
        elif calls:
            self.notes.append("overhead job: worker calls on one group size only; the per-call terms keep their base "
                              "values")
        data = [r for r in records if r.op == "worker_call_data" and r.bytes]
        if len({r.bytes for r in data}) >= 2:
            gb = np.array([r.bytes / float(r.params["workers"]) / GB for r in data])
            slope = float(np.polyfit(gb, [r.stats.median_s for r in data], 1)[0])
            self._set("dispatch_ray_s_per_gb", slope,
                      f"calibration overhead job: {len(data)} verl worker-group calls carrying "
                      f"{min(gb):.3g}-{max(gb):.3g} GB per worker through Ray, slope")
        poll = [r for r in records if r.op == "rollout_poll"]
        if poll:
            self._set("rollout_poll_s", poll[0].stats.median_s, f"calibration overhead job, {poll[0].note}")

    # ---- fitted through the cost models --------------------------------------------------------------
    def _least_squares(self, job: str, names: list[str], records: list[JobMeasurement],
                       predict_one: Callable[[Profile, JobMeasurement], float]) -> None:
        if not records:
            return
        space = ParameterSpace(self.base.with_values(self.values, self.base.id), names)
        goals = np.array([r.stats.median_s for r in records])

        def predict(profile: Profile) -> np.ndarray:
            return np.array([predict_one(profile, r) for r in records])

        z = space.fit(predict, goals)
        fitted = space.values(z)
        pred = predict(space.profile(z))
        self.errors[job] = [float(e) for e in (pred - goals) / goals]
        mape = float(np.mean(np.abs(pred - goals) / goals)) * 100
        for name, value in fitted.items():
            self.values[name] = value
            self.sources[name] = f"least squares on {len(records)} calibration {job} job points (MAPE {mape:.1f} %)"
            lo, hi = self.base.params[name].bounds
            if min(value - lo, hi - value) <= 1e-6 * (hi - lo):
                side = "upper" if hi - value < value - lo else "lower"
                self.notes.append(f"{name}: the {job} fit ends on its {side} bound {value:.4g}, a model error "
                                  f"(MAPE {mape:.1f} %)")

    def collectives(self) -> None:
        records = [r for r in self.by_job.get("collectives", []) if r.op in COLLECTIVE_OPS and r.group and r.bytes]
        if not records:
            return
        world = max(r.group.world_size for r in records)
        cluster = Cluster(self.kind, max(world, 1) // self.kind.devices_per_card or 1)
        tiers = sorted({u.tier for r in records for u in cluster.tiers(r.group.ranks)})
        names = [f"{t}_efficiency_scale" for t in tiers] + ["collective_step_latency_us", "a2a_base_latency_us",
                                                             "a2a_per_peer_latency_us"]

        def one(profile: Profile, r: JobMeasurement) -> float:
            return collective_time(cluster, profile, r.group.ranks, COLLECTIVE_OPS[r.op], float(r.bytes))

        self._least_squares("collectives", names, records, one)

    def _scenario(self) -> Scenario:
        return Scenario(name="calibration-jobs", model="tiny", cluster=ClusterRef(kind=self.kind.name, cards=1))

    def decode(self) -> None:
        ours = [r for r in self.by_job.get("decode", [])
                if r.params.get("model") == self.model_label and r.dtype == self.dtype]
        records = [r for r in ours if r.op == "decode_step"]
        if not records:
            self.notes.append(f"decode job: no {self.dtype} points of model {self.model_label}; not fitted")
            return
        inv = build_inventory(parse_config(self.model_config, self.model_label))
        sc = self._scenario()
        cluster = Cluster(self.kind, max(map(decode_tp, ours)))
        # each mode's points set its own per-step host term (a file may hold both: the job appends); points at TP2
        # set what the engine's TP all-reduces cost beyond the collective curves beside it. One model's steps cannot
        # tell a per-step host cost from a per-kernel launch cost (its kernel count is fixed), so the eager launch
        # keeps its sourced value
        for graph in sorted({decode_graph_mode(r) for r in records}):
            def one(profile: Profile, r: JobMeasurement, graph: bool = graph) -> float:
                return decode_step_seconds(inv, sc, cluster, profile, int(r.params["batch"]), int(r.params["ctx"]),
                                           graph, decode_tp(r))

            mode = [r for r in records if decode_graph_mode(r) == graph]
            names = ["decode_host_ms_graph" if graph else "decode_host_ms_eager"]
            if {decode_tp(r) for r in mode} - {1} and 1 in {decode_tp(r) for r in mode}:
                names.append("vllm_tp_collective_ms")
            self._least_squares(f"{'graph' if graph else 'eager'} decode", names, mode, one)
        self._requests(inv, sc, cluster, [r for r in ours if r.op == "request"])
        self._handover(inv, [r for r in ours if r.op == "handover"])

    def _handover(self, inv: Inventory, records: list[JobMeasurement]) -> None:
        """verl's hand-over's fixed cost per sync from the whole hand-overs the decode job timed into its engine
        (the collective RPC that starts the workers' receive, the hand-over, vLLM's load of the entries): least
        squares over the points, the per-entry terms keeping their benchmarked values (one model's sizes differ
        by one layer's entries, too few to tell a per-entry cost from the timing noise)."""
        if not records:
            return
        total, scanned = tensor_table(inv).rollout_load_work

        def one(profile: Profile, r: JobMeasurement) -> float:
            entries = round(r.derived["entries"] * r.stats.median_s)  # recorded as a rate per call
            return (profile["vllm_collective_rpc_ms"] * 1e-3 + handover_entries_s(entries, profile)
                    + load_entries_s(entries, round(scanned * entries / total), profile))

        self._least_squares("handover", ["weight_handover_sync_ms"], records, one)

    def _requests(self, inv: Inventory, sc: Scenario, cluster: Cluster, records: list[JobMeasurement]) -> None:
        """vLLM's host time per request: at each TP size, the growth per request of a one-token generate beyond
        the twin's prefill of it (with the step terms just fitted), by least squares with the call's own fixed
        cost as intercept; the mean over the TP sizes."""
        profile = self.base.with_values(self.values, self.base.id)
        slopes, calls = [], []
        for tp in sorted({decode_tp(r) for r in records}):
            points = [r for r in records if decode_tp(r) == tp]
            if len({int(r.params["batch"]) for r in points}) < 2:
                continue
            rest = [r.stats.median_s - prefill_call_seconds(inv, sc, cluster, profile, int(r.params["batch"]),
                                                            int(r.params["ctx"]), tp) for r in points]
            call, slope = call_and_slope([float(r.params["batch"]) for r in points], rest)
            slopes.append(slope)
            calls.append(f"TP{tp} {slope * 1e3:.2f} ms a request, {call * 1e3:.1f} ms a call")
        if not slopes:
            if records:
                self.notes.append("decode job: request points at one batch size only; vllm_request_host_ms keeps "
                                  "its base value")
            return
        batches = sorted({int(r.params["batch"]) for r in records})
        self._set("vllm_request_host_ms", float(np.mean(slopes)) * 1e3,
                  f"calibration decode job: one-token generates of {batches} requests, growth per request beyond the "
                  f"twin's prefill (non-negative least squares; {'; '.join(calls)}; the call's fixed cost is the "
                  "offline LLM's own), mean over the TP sizes")

    def train(self) -> None:
        records = [r for r in self.by_job.get("train", [])
                   if r.params.get("model") == self.model_label and r.dtype == self.dtype]
        if not records:
            self.notes.append(f"train job: no {self.dtype} points of model {self.model_label}; not fitted")
            return
        inv = build_inventory(parse_config(self.model_config, self.model_label))
        cluster, sc = Cluster(self.kind, 1), self._scenario()

        def one(profile: Profile, r: JobMeasurement) -> float:
            batch, seq = int(r.params["batch"]), int(r.params["seq"])
            tc = TrainCost(inv, sc, cluster, profile, TrainMemory(inv, TrainLayout(engine="fsdp"), 1, sc, profile))
            tokens, sq = batch * seq, batch * seq * seq
            if r.op == "forward":
                return float(tc.microbatch_time(0, tokens, sq, "log_prob").total)
            passes = tc.microbatch_time(0, tokens, sq, "forward").total + tc.microbatch_time(0, tokens, sq,
                                                                                              "backward").total
            return float(passes) + tc.optimizer_time()

        self._least_squares("train", ["microbatch_overhead_ms", "optimizer_overhead_ms"],
                            records, one)

    # ---- verl's framework time per call and per response (overhead job, verl points) -----------------
    def _sizes(self, records: list[JobMeasurement], what: str) -> bool:
        if len({int(r.params["responses"]) for r in records}) >= 2:
            return True
        if records:
            self.notes.append(f"overhead job: {what} at one batch size only; its terms keep their base values")
        return False

    def _call_terms(self, stage: str, records: list[JobMeasurement], seconds: list[float], what: str) -> None:
        n = [float(r.params["responses"]) for r in records]
        call, slope = call_and_slope(n, seconds)
        call_name, slope_name = FRAMEWORK_TERMS[stage]
        sizes = f"{int(min(n))}-{int(max(n))} responses"
        self._set(call_name, call, f"calibration overhead job: {what} at {sizes}, intercept (non-negative least "
                                   f"squares over {len(records)} points)")
        self._set(slope_name, slope, f"calibration overhead job: {what} at {sizes}, seconds per response (slope)")

    def verl_calls(self) -> None:
        records = self.by_job.get("overhead", [])
        agent = [r for r in records if r.op == "agent_loop" and int(r.params["agent_workers"]) == AGENT_WORKERS]
        if agent:
            n = np.array([float(r.params["responses"]) for r in agent])
            t = np.array([r.stats.median_s for r in agent])
            self._set(FRAMEWORK_TERMS["rollout"][1], float(n @ t / (n @ n)),
                      f"calibration overhead job: verl's agent-loop path (AgentLoopManagerTQ on {AGENT_WORKERS} "
                      f"worker, reward loop, TransferQueue; engine answering at once) at {sorted({int(x) for x in n})} "
                      "responses, seconds per response (least squares through the origin)")
            self._host_sharing(agent)
        for op, stage in DRIVER_STAGES.items():
            points = [r for r in records if r.op == op]
            if self._sizes(points, op):
                self._call_terms(stage, points, [r.stats.median_s for r in points], f"verl's {op} stage method")
        update = [r for r in records if r.op == "update_actor"]
        if self._sizes(update, "update_actor"):
            # the harness's update faults pages the guest holds (benchmarks/verl_update_cpu.py: under 3 us a fault)
            zeroed = dict.fromkeys((*FRAMEWORK_TERMS["update"], *self._returned_page_terms()), 0.0)
            profile = self.base.with_values({**self.values, **zeroed}, self.base.id)
            rest = [r.stats.median_s - self._twin_update(profile, r) for r in update]
            self._call_terms("update", update, rest, "verl's update_actor on its FSDP2 workers, less the twin's "
                                                     "passes, optimizer step and dispatch")

    def _returned_page_terms(self) -> tuple[str, ...]:
        return (RETURNED_PAGE_TERM,) if RETURNED_PAGE_TERM in self.base.params else ()

    def _host_sharing(self, agent: list[JobMeasurement]) -> None:
        """The cores the agent-loop path keeps busy alone (host CPU seconds over wall seconds of its points), the share
        of its time before its last hand-over to the engine and the host's cores: what the twin's rollout shares with
        the engine on this host (twin.cost_models.host_sharing)."""
        busy = sorted(r.derived["host_cpu_s"] for r in agent if "host_cpu_s" in r.derived)
        if not busy:
            return
        self._set("agent_loop_busy_cores", statistics.median(busy),
                  f"calibration overhead job: the host's busy CPU seconds over the wall seconds of verl's agent-loop "
                  f"path (engine answering at once), median of {len(busy)} points ({busy[0]:.2f}-{busy[-1]:.2f})")
        shares = sorted(r.derived["handed_s"] for r in agent if "handed_s" in r.derived)
        if shares:
            self._set("agent_loop_arrival_share", min(1.0, statistics.median(shares)),
                      f"calibration overhead job: when verl's agent-loop path handed its last request to the engine "
                      f"(answering at once) over the path's wall seconds, median of {len(shares)} points "
                      f"({shares[0]:.2f}-{shares[-1]:.2f})")
        self._set("host_cores", float(agent[0].host.cores),
                  f"the cores the calibration jobs could run on, on host {agent[0].host.hostname} "
                  f"({agent[0].host.cpu_model})")

    def page_touch(self) -> None:
        """The extra seconds of first-touching a page after an idle gap (reported to the host) over one touched again
        at once (the guest's own), from the page_touch job's medians per page; for profiles that carry the term."""
        records = self.by_job.get("page_touch", [])
        if RETURNED_PAGE_TERM not in self.base.params or not records:
            return
        per_page: dict[float, list[float]] = {}
        for r in records:  # the record's "pages" figure is pages per second at the median time
            per_page.setdefault(float(r.params["idle_s"]), []).append(1.0 / r.derived["pages"])
        if len(per_page) < 2 or 0.0 not in per_page:
            self.notes.append("page_touch job: no pair of idle and back-to-back points; host_returned_page_us keeps "
                              "its base value")
            return
        idle = max(per_page)
        held, returned = statistics.median(per_page[0.0]), statistics.median(per_page[idle])
        self._set(RETURNED_PAGE_TERM, max(0.0, returned - held) * 1e6,
                  f"calibration page_touch job: a fresh buffer first-touched {idle:g} s after the last was freed, "
                  f"{returned * 1e6:.2f} us a page, against {held * 1e6:.2f} us at once (the difference)")

    def _twin_update(self, profile: Profile, r: JobMeasurement) -> float:
        """The twin's update stage for an update_actor point: its batch on its ranks in its micro-batches."""
        from twin.evaluate import Evaluation
        from twin.sim.step import StepSimulation

        n, world, micro = int(r.params["responses"]), int(r.params["workers"]), int(r.params["micro_per_rank"])
        prompt, response = per_sample(r, "prompt_tokens"), per_sample(r, "response_tokens")
        sc = Scenario(
            name="calibration-overhead-update", model="tiny",
            cluster=ClusterRef(kind=self.kind.name, cards=max(1, world // self.kind.devices_per_card)),
            workload=Workload(global_batch=n // GROUP, n=GROUP, use_kl_loss=False,
                              prompt_len=LengthDist(mean=prompt, max=int(np.ceil(prompt))),
                              response_len=LengthDist(mean=response, max=int(np.ceil(response)))),
            layout=Layout(train=TrainLayout(engine="fsdp", micro_batch=micro, log_prob_micro_batch=micro),
                          rollout=RolloutLayout(tp=world, graph_mode=False, enable_chunked_prefill=False)),
            optimizations=("skip_old_log_prob", "d2d_tensor_cache"))
        return StepSimulation(Evaluation(sc, profile)).run(1)[0].stages_s["update"]

    def run(self, new_id: str, inputs: list[str]) -> JobFitOutcome:
        self.direct()
        self.overhead()
        self.collectives()
        self.decode()
        self.train()
        self.page_touch()
        self.verl_calls()
        if not self.values:
            raise ValueError("no job measurement matched this profile's device and dtype")
        fitted = self.base.with_values(self.values, new_id, sources=self.sources)
        provenance = fitted.provenance.model_copy(update={
            "inputs": inputs, "fitted_on": date.today(),
            "residuals": {f"{job} MAPE": round(float(np.mean(np.abs(e))), 5) for job, e in self.errors.items()},
            "notes": "; ".join([f"fitted to calibration jobs ({', '.join(sorted(self.by_job))}), dtype {self.dtype}",
                                *self.notes]),
        })
        description = f"{self.base.id} fitted to the calibration jobs of {self.kind.name} ({self.dtype})"
        profile = fitted.model_copy(update={"provenance": provenance, "description": description})
        return JobFitOutcome(profile, self.errors, self.notes)
