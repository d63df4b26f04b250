"""Scenario files (YAML, schema version 1): model + cluster + workload (+ layout, + measured results)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from twin.fileio import read_mapping, validated
from twin.layout.models import Layout
from twin.lognormal import clipped_moments, naive_mu
from twin.optimizations import RECIPE_OPTIMIZATIONS, OptimizationId

SCENARIO_SCHEMA = 1

# Domains of the numbers a user gives (issue 12): wide enough for every real run, narrow enough that the twin
# answers in bounded time and memory. Each refusal says the limit and this reason.
MAX_CARDS = 16384  # 8192 A3 cards = 16,384 dies, the largest cluster the planner is exercised on
MAX_TOKENS = 1 << 20  # 1,048,576 tokens per sequence: 8x the 128k context of the longest catalog model
MAX_PROMPTS = 1 << 20  # prompts per step; the recipes use 512 (C1)
MAX_N = 1024  # responses per prompt; GRPO recipes use 5 to 64
MAX_EPOCHS = 100  # PPO epochs per step; verl's default is 1, the PPO paper uses at most 10
MAX_SIGMA = 4.0  # a lognormal shape beyond this puts almost all mass in a few sequences
# the cap at max may move a lognormal's average at most 10 % (the twin then draws around a location that restores the
# declared mean): past that the cap, not the spread, would shape the lengths
MEAN_TOLERANCE = 0.10
MAX_SEED = 2**63 - 1  # numpy seeds are non-negative; 64-bit signed keeps them printable everywhere


Positive = Annotated[float, Field(gt=0, allow_inf_nan=False, description="a measured time or rate")]
NonNegative = Annotated[float, Field(ge=0, allow_inf_nan=False, description="a measured time or size")]


class LengthDist(BaseModel):
    """A token-length distribution: fixed at the mean, lognormal with the given mean, or an empirical file."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    mean: float = Field(gt=0, allow_inf_nan=False)
    max: int = Field(ge=1, le=MAX_TOKENS, description="at most 8x the longest context of the catalog models")
    dist: Literal["fixed", "lognormal", "empirical"] = "fixed"
    sigma: float = Field(default=0.5, gt=0, le=MAX_SIGMA, allow_inf_nan=False,
                         description="a wider lognormal puts almost all tokens in a few sequences")  # lognormal shape
    file: str | None = None  # empirical: a text file of lengths, one per line
    # responses (lognormal): the share of the log-length variance common to the n responses of one prompt (0: each
    # drawn alone; 1: a prompt's responses all as long). Seer (arXiv 2511.14617) reports that responses sharing a
    # prompt have similar lengths, without a figure the twin could take: a what-if until a source gives one
    prompt_share: float = Field(default=0.0, ge=0, le=1, allow_inf_nan=False)

    @model_validator(mode="after")
    def _consistent(self) -> LengthDist:
        if self.mean > self.max:
            raise ValueError(f"mean {self.mean} exceeds max {self.max}")
        if self.dist == "empirical" and not self.file:
            raise ValueError("dist 'empirical' needs 'file'")
        if self.prompt_share and self.dist != "lognormal":
            raise ValueError(f"prompt_share needs a lognormal distribution, not {self.dist!r}")
        if self.dist == "lognormal":
            clipped = clipped_moments(naive_mu(self.mean, self.sigma), self.sigma, self.max)[0]
            if abs(clipped - self.mean) > MEAN_TOLERANCE * self.mean:
                raise ValueError(f"lognormal sigma {self.sigma:g} is too wide for mean {self.mean:g} and max "
                                 f"{self.max}: clipped to [1, {self.max}], a lognormal of that mean averages "
                                 f"{clipped:.0f}, more than {MEAN_TOLERANCE:.0%} off, so the cap would shape the "
                                 "lengths; lower sigma or raise max")
        return self


class Workload(BaseModel):
    """One RL step's work: prompts, responses per prompt and their lengths."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    # ppo: GAE advantages from a critic (the actor's checkpoint with a value head, twin.catalog.inventory.value_model,
    # trained beside it in the training layout as verl gives it one: TrainLayout.for_critic, TrainMemory.value_model)
    algorithm: Literal["grpo", "dapo", "ppo"] = "grpo"
    global_batch: int = Field(default=512, ge=1, le=MAX_PROMPTS, description="prompts per step")  # prompts per step
    n: int = Field(default=16, ge=1, le=MAX_N, description="GRPO recipes use 5 to 64")  # responses per prompt
    prompt_len: LengthDist = LengthDist(mean=75, max=1024)
    response_len: LengthDist = LengthDist(mean=3039.8, max=3072)
    mini_batch: int | None = Field(default=None, ge=1)  # prompts per optimizer step; default: global_batch
    ppo_epochs: int = Field(default=1, ge=1, le=MAX_EPOCHS, description="verl's default is 1")
    use_kl_loss: bool = True  # a reference model is evaluated
    # DAPO dynamic sampling: prompts per generation round [global_batch] and rounds per step [1]
    gen_batch: int | None = Field(default=None, ge=1)
    # a mean over steps may be fractional; at most 100, a sanity bound (verl's DAPO samples until the batch fills or
    # max_num_gen_batches rounds, 0 = no cap, in its default config)
    gen_rounds: float = Field(default=1.0, ge=1.0, le=100.0)
    # forced_balanced: random-init recipe runs pin routing to spread tokens evenly (VLLM_ENABLE_FIX_ROUTE=1)
    expert_routing: Literal["learned", "forced_balanced"] = "learned"

    @property
    def generation_prompts(self) -> int:
        """Prompts generated per round."""
        return self.gen_batch or self.global_batch

    @property
    def generated_responses(self) -> float:
        """Responses generated (and scored: DAPO's filter reads their rewards) over all rounds of a step."""
        return self.gen_rounds * self.generation_prompts * self.n

    @model_validator(mode="after")
    def _mini_batch(self) -> Workload:
        if self.mini_batch is not None and self.mini_batch > self.global_batch:
            raise ValueError(f"mini_batch {self.mini_batch} exceeds global_batch {self.global_batch}: an optimizer "
                             "step cannot take more prompts than the step has")
        if self.prompt_len.prompt_share:
            raise ValueError("prompt_len.prompt_share: a prompt has one length; the share is the responses' "
                             "(response_len.prompt_share)")
        return self

    @property
    def responses(self) -> int:
        return self.global_batch * self.n

    @property
    def has_critic(self) -> bool:
        """PPO trains a critic (verl's need_critic: GAE advantages)."""
        return self.algorithm == "ppo"

    @property
    def optimizer_steps(self) -> int:
        return -(-self.global_batch // (self.mini_batch or self.global_batch)) * self.ppo_epochs

    @property
    def max_seq_len(self) -> int:
        return self.prompt_len.max + self.response_len.max

    @property
    def tokens_per_step(self) -> float:
        """Prompt plus response tokens of one step (the TPS numerator)."""
        return self.responses * (self.prompt_len.mean + self.response_len.mean)


LAUNCHED_VERL = "0.9.1"  # the verl `executor run` launches (pyproject.toml pins it): a default plan's software
VERL_SYNCS_THROUGH_SERVER = (0, 8)  # Software.syncs_through_server
VERL_PUTS_INPUTS_ONCE = (0, 6)  # Software.puts_inputs_once
VERL_RECIPE_CHECKPOINT_ENGINE = (0, 7)  # Software.checkpoint_engine: the recipe's, to 0.8
VERL_CORE_CHECKPOINT_ENGINE = (0, 8)
VERL_ORDERS_FOR_PIPELINE = (0, 6, 1)  # Software.orders_for_pipeline
RECIPE_ENGINE, CORE_ENGINE = "verl 0.7 recipe", "verl >= 0.8 core"


class Software(BaseModel):
    """Versions where behaviour depends on them (DESIGN 4.2); unset: what the profile was fitted on."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    # the RL framework that ran it: verl (what the executor launches) or MindSpeed-RL, whose published runs are
    # calibration and judge cases; its data and weight paths differ from verl's (`parallel_pull`, evaluate's
    # `reshard_method`)
    framework: Literal["verl", "mindspeed_rl"] = "verl"
    verl: str | None = Field(default=None, pattern=r"^\d+\.\d+(\.[0-9A-Za-z.+-]+)?$")
    vllm: str | None = None
    vllm_ascend: str | None = None
    mindspeed: str | None = None
    # behaviours the versions decide, stated where a scenario knows them
    sleep_frees_memory: bool | None = None  # vLLM sleep mode releases weights and KV cache; unset: the cluster kind's
    weight_sync: Literal["per_tensor", "checkpoint_engine"] | None = None  # verl trainer -> rollout sync
    rollout_poll: bool | None = None  # the trainer polls for finished generation (verl >= 0.6 fully async/V1)
    # the rollout returns its tokens' log-probs (verl rollout.calculate_log_probs): the driver keeps them in the batch
    # and compares them with the trainer's after the old-policy pass (twin.cost_models.scheduling collect_seconds)
    rollout_log_probs: bool = False
    # the actor's offloaded weights stay on the device from update_actor to the weight sync: cann-recipes-train's
    # DeepSeek patch of verl 0.4 (llm_rl/deepseek/verl_patches/workers/megatron_workers.py: update_actor offloads
    # the gradients only, "generate sequences needs to use weight") and MindSpeed-RL (its sharding manager's
    # exit_train_mode offloads optimizer and gradients, enter_infer_mode reshards, then offloads the weights); verl
    # itself offloads them with the rest after the update and loads them again for the sync (0.4 to 0.9:
    # megatron_workers.update_actor, then engine_workers BaseEngineCtx and update_weights); unset: the framework's
    weights_kept_for_sync: bool | None = None

    @model_validator(mode="after")
    def _one_framework(self) -> Software:
        if self.framework == "mindspeed_rl" and self.verl is not None:
            raise ValueError(f"framework mindspeed_rl runs without verl: drop verl {self.verl}")
        if self.weight_sync == "checkpoint_engine" and self.checkpoint_engine is None:
            raise ValueError(f"verl {self.verl} has no checkpoint engine (from 0.7): weight_sync per_tensor")
        return self

    def stated(self) -> str:
        """What the scenario states of its software, as compact JSON ({} where it states nothing)."""
        return self.model_dump_json(exclude_defaults=True)

    @property
    def keeps_weights_for_sync(self) -> bool:
        """The actor's weights wait on the device between the update and the weight sync (`weights_kept_for_sync`;
        unset: MindSpeed-RL keeps them, verl offloads them)."""
        if self.weights_kept_for_sync is not None:
            return self.weights_kept_for_sync
        return self.framework == "mindspeed_rl"

    @property
    def parallel_pull(self) -> bool:
        """MindSpeed-RL's workers pull their inputs from its TransferDock store each for itself, at once
        (docs/features/data_module_design.md, MindSpeed-RL eb89512); verl's driver hands every worker its share
        through Ray one after another."""
        return self.framework == "mindspeed_rl"

    @property
    def syncs_through_server(self) -> bool:
        """verl >= 0.8 syncs a colocated rollout through Ray calls to its vLLM server actor (ServerAdapter, verl
        ef6eaa05d, 0.8.0.dev, 2026-01-27), timed by the driver's update_weights timer; earlier verl (and a scenario
        that names none: the published cases the profiles were fitted on) syncs inside the trainer's processes."""
        return self._verl_at_least(VERL_SYNCS_THROUGH_SERVER)

    @property
    def timed_by_verl(self) -> bool:
        """The stage times are the named verl's own timers (its `timing_s/*` metrics), which hold every transition
        inside the call that makes it (twin.cost_models.timers); a scenario that names no verl, or MindSpeed-RL,
        keeps the twin's split, the offloads and the sync as stages of their own (the recipes' published breakdowns,
        C1-C3: "offload and other", "reshard")."""
        return self.framework == "verl" and self.verl is not None

    @property
    def puts_inputs_once(self) -> bool:
        """verl >= 0.6 puts each data-parallel chunk of a worker-group call's inputs into Ray's object store once,
        on threads (decorator.py dispatch_nd_compute: #2893, 3e2bceb1a, every trainer on it; parallel_put: #3495,
        04726dbf1), and each worker's task carries a reference; earlier verl (and a scenario that names none)
        passes every worker its share as the task's argument, serialised one task after another."""
        return self._verl_at_least(VERL_PUTS_INPUTS_ONCE)

    @property
    def checkpoint_engine(self) -> str | None:
        """The checkpoint engine verl syncs a disaggregated rollout through: none before 0.7 (tensor by tensor only);
        in 0.7 the fully async recipe's own (RECIPE_ENGINE: recipe/fully_async_policy/checkpoint_engine.py, cdd7d874f,
        2025-12-18, to v0.7.0); from 0.8, and for a scenario that names no verl (0.9.1, what the profiles were fitted
        on), verl's core one (CORE_ENGINE: verl/checkpoint_engine, 6f33c553b, after v0.7.0)."""
        if self.verl is None or self._verl_at_least(VERL_CORE_CHECKPOINT_ENGINE):
            return CORE_ENGINE
        return RECIPE_ENGINE if self._verl_at_least(VERL_RECIPE_CHECKPOINT_ENGINE) else None

    @property
    def orders_for_pipeline(self) -> bool:
        """verl >= 0.6.1's balance_batch orders each DP share by workload, short-long-short, so that neighbouring
        micro-batches are alike and the pipeline's warm-up and cool-down run the short ones (ray_trainer._balance_batch,
        62221fa13, 2025-10-23, first in v0.6.1); earlier verl (and a scenario that names none) keeps each share in
        its batch order (seqlen_balancing.get_seqlen_balanced_partitions sorts a partition's indices)."""
        return self._verl_at_least(VERL_ORDERS_FOR_PIPELINE)

    def _verl_at_least(self, version: tuple[int, ...]) -> bool:
        """The named verl is `version` (major, minor[, patch]) or later; a part that is not a number counts 0."""
        if self.verl is None:
            return False
        parts = [int(p) if p.isdigit() else 0 for p in self.verl.split(".")[:len(version)]]
        return tuple(parts) >= version


class ClusterRef(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    kind: str
    cards: int = Field(ge=1, le=MAX_CARDS, description="1 to 16,384: 8192 A3 cards is the largest "
                                                       "cluster the planner is exercised on")
    host_memory_gb_per_node: float | None = Field(default=None, gt=0, allow_inf_nan=False)  # overrides the kind's


class Measured(BaseModel):
    """Published or logged results: seconds per stage and TPS per card.

    `use` keeps fitting and judging apart: `fit` cases may calibrate a profile, `judge` cases (the
    default) only measure its error, so a fit that memorises its inputs shows.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    use: Literal["fit", "judge"] = "judge"
    # where the workload's mean prompt and response lengths come from: published with the measurement, derived from
    # its figures (tokens per sequence from a throughput), or assumed where the source is silent; unset: not stated.
    # A throughput or a rollout follows the lengths, so `calibration report` also gives the held-out error of the
    # cases whose lengths are known (published or derived) apart.
    lengths: Literal["published", "derived", "assumed"] | None = None
    step_s: Positive | None = None
    stages_s: dict[str, NonNegative] = {}
    tps_per_card: Positive | None = None
    tps_per_device: Positive | None = None  # as logged per die on A3 (verl's perf/throughput)
    # what the TPS figures count (MindSpeed-RL mindspeed_rl/utils/utils.py compute_tps and its callers):
    # mean: the step's responses at the mean lengths (verl; MindSpeed-RL's GRPO with log_max_throughput false,
    # its DAPO without dynamic sampling); max: every response at the step's longest prompt and response
    # (MindSpeed-RL's GRPO with log_max_throughput, its default since eb89512, 2025-07-10); generated: every
    # response of every generation round at the mean lengths (MindSpeed-RL's DAPO with dynamic sampling)
    tps_tokens: Literal["mean", "max", "generated"] = "mean"
    rollout_tps_per_card: Positive | None = None  # prompt + response tokens / rollout seconds / cards
    reshard_extra_gib_per_device: dict[str, NonNegative] = {}  # reshard method -> extra memory, GiB
    memory_peak_gb: Positive | None = None  # the published per-device peak (GB)
    # the values compare only with those of the named scenario: their ratio is the target, not the values
    relative_to: str | None = None
    # the values serve as the reference of other scenarios' ratios, not as targets themselves (they depend
    # on something the twin does not model)
    reference_only: bool = False
    source: str | None = None

    @property
    def lengths_known(self) -> bool:
        """The workload's mean lengths are published or derived, not assumed nor left unstated."""
        return self.lengths in ("published", "derived")


class Scenario(BaseModel):
    """The complete description of one case the twin simulates or plans for."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True, allow_inf_nan=False)

    schema_version: int = Field(default=SCENARIO_SCHEMA, alias="schema")
    name: str = Field(min_length=1, max_length=200)
    description: str | None = None
    model: str = Field(min_length=1)
    cluster: ClusterRef
    workload: Workload = Workload()
    layout: Layout | None = None
    optimizations: tuple[OptimizationId, ...] = RECIPE_OPTIMIZATIONS
    measured: Measured | None = None
    software: Software = Software()
    profile: str | None = None  # a profile file; default: the cluster kind's embedded profile
    seed: int = Field(default=0, ge=0, le=MAX_SEED, description="numpy seeds are non-negative 64-bit numbers")

    @model_validator(mode="after")
    def _schema(self) -> Scenario:
        if self.schema_version != SCENARIO_SCHEMA:
            raise ValueError(f"scenario schema {self.schema_version} is not supported (this twin reads "
                             f"{SCENARIO_SCHEMA})")
        return self

    @model_validator(mode="after")
    def _name_and_optimizations(self) -> Scenario:
        if not self.name.strip() or self.name in (".", "..") or any(c in self.name for c in "/\\\0"):
            raise ValueError(f"name {self.name!r} must be a plain name (no '/', '\\', NUL, '.' or '..'): it names "
                             "run directories")
        repeated = sorted({o for o in self.optimizations if self.optimizations.count(o) > 1})
        if repeated:
            raise ValueError(f"optimizations {', '.join(repeated)} listed more than once")
        return self

    @model_validator(mode="after")
    def _balance_batch_is_verls(self) -> Scenario:
        train = None if self.layout is None else self.layout.train
        if train is not None and train.balance_batch is not None and self.software.framework != "verl":
            raise ValueError("layout.train.balance_batch is verl's trainer option; framework "
                             f"{self.software.framework} has none: drop it")
        return self

    @model_validator(mode="after")
    def _measured_stages_are_predicted(self) -> Scenario:
        """A disaggregated run measures its weight sync only; a colocated one, stages the twin predicts."""
        m = self.measured
        if m is None:
            return self
        if self.layout is None or self.layout.placement != "separate":
            from twin.results import STAGES

            unknown = [k for k in m.stages_s if k not in STAGES]
            if unknown:
                raise ValueError(f"measured.stages_s: {unknown[0]!r} is not a stage the twin predicts (stages: "
                                 f"{', '.join(STAGES)})")
            return self
        others = [k for k, v in m.model_dump(exclude={"use", "source", "stages_s", "tps_tokens"}).items() if v]
        others += [f"stages_s.{k}" for k in m.stages_s if k != "weight_sync"]
        if others:
            raise ValueError(f"a separate placement measures its weight sync only (measured.stages_s.weight_sync), "
                             f"not {', '.join(others)}: the twin does not model a disaggregated run's step")
        return self

    def has(self, opt: OptimizationId) -> bool:
        return opt in self.optimizations

    @property
    def balances_batch(self) -> bool:
        """verl's trainer.balance_batch as the run has it: the layout's, else verl's default (on); MindSpeed-RL's
        data path has no such rearrangement."""
        stated = None if self.layout is None else self.layout.train.balance_batch
        return stated if stated is not None else self.software.framework == "verl"

    def dump_yaml(self) -> str:
        return yaml.safe_dump(self.model_dump(mode="json", by_alias=True, exclude_none=True), sort_keys=False)


def load_scenario(path: Path | str) -> Scenario:
    label = f"scenario {path}"
    return validated(Scenario, read_mapping(path, label, "yaml"), label)
