"""Scenario files (YAML, schema version 1): model + cluster + workload (+ layout, + measured results)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from twin.fileio import read_mapping, validated
from twin.layout.models import Layout
from twin.optimizations import RECIPE_OPTIMIZATIONS, OptimizationId

SCENARIO_SCHEMA = 1


class LengthDist(BaseModel):
    """A token-length distribution: fixed at the mean, lognormal with the given mean, or an empirical file."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    mean: float = Field(gt=0)
    max: int = Field(ge=1)
    dist: Literal["fixed", "lognormal", "empirical"] = "fixed"
    sigma: float = Field(default=0.5, gt=0)  # lognormal shape
    file: str | None = None  # empirical: a text file of lengths, one per line

    @model_validator(mode="after")
    def _consistent(self) -> LengthDist:
        if self.mean > self.max:
            raise ValueError(f"mean {self.mean} exceeds max {self.max}")
        if self.dist == "empirical" and not self.file:
            raise ValueError("dist 'empirical' needs 'file'")
        return self


class Workload(BaseModel):
    """One RL step's work: prompts, responses per prompt and their lengths."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    algorithm: Literal["grpo", "dapo"] = "grpo"
    global_batch: int = Field(default=512, ge=1)  # prompts per step
    n: int = Field(default=16, ge=1)  # responses per prompt
    prompt_len: LengthDist = LengthDist(mean=75, max=1024)
    response_len: LengthDist = LengthDist(mean=3039.8, max=3072)
    mini_batch: int | None = Field(default=None, ge=1)  # prompts per optimizer step; default: global_batch
    ppo_epochs: int = Field(default=1, ge=1)
    use_kl_loss: bool = True  # a reference model is evaluated
    # DAPO dynamic sampling: prompts per generation round [global_batch] and rounds per step [1]
    gen_batch: int | None = Field(default=None, ge=1)
    gen_rounds: float = Field(default=1.0, ge=1.0)  # a mean over steps may be fractional
    # forced_balanced: random-init recipe runs pin routing to spread tokens evenly (VLLM_ENABLE_FIX_ROUTE=1)
    expert_routing: Literal["learned", "forced_balanced"] = "learned"

    @property
    def generation_prompts(self) -> int:
        """Prompts generated per round."""
        return self.gen_batch or self.global_batch

    @property
    def responses(self) -> int:
        return self.global_batch * self.n

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


class Software(BaseModel):
    """Versions where behaviour depends on them (DESIGN 4.2); unset: what the profile was fitted on."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    verl: str | None = None
    vllm: str | None = None
    vllm_ascend: str | None = None
    mindspeed: str | None = None
    # behaviours the versions decide, stated where a scenario knows them
    sleep_frees_memory: bool | None = None  # vLLM sleep mode releases weights and KV cache; unset: the cluster kind's
    weight_sync: Literal["per_tensor", "checkpoint_engine"] | None = None  # verl trainer -> rollout sync
    rollout_poll: bool | None = None  # the trainer polls for finished generation (verl >= 0.6 fully async/V1)


class ClusterRef(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: str
    cards: int = Field(ge=1)
    host_memory_gb_per_node: float | None = Field(default=None, gt=0)  # overrides the kind's default


class Measured(BaseModel):
    """Published or logged results: seconds per stage and TPS per card.

    `use` keeps fitting and judging apart: `fit` cases may calibrate a profile, `judge` cases (the
    default) only measure its error, so a fit that memorises its inputs shows.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    use: Literal["fit", "judge"] = "judge"
    step_s: float | None = None
    stages_s: dict[str, float] = {}
    tps_per_card: float | None = None
    tps_per_device: float | None = None  # as logged per die on A3 (verl's perf/throughput)
    rollout_tps_per_card: float | None = None  # prompt + response tokens / rollout seconds / cards
    reshard_extra_gib_per_device: dict[str, float] = {}  # reshard method -> extra memory, GiB
    memory_peak_gb: float | None = None  # the published per-device peak (GB)
    # the values compare only with those of the named scenario: their ratio is the target, not the values
    relative_to: str | None = None
    # the values serve as the reference of other scenarios' ratios, not as targets themselves (they depend
    # on something the twin does not model)
    reference_only: bool = False
    source: str | None = None


class Scenario(BaseModel):
    """The complete description of one case the twin simulates or plans for."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    schema_version: int = Field(default=SCENARIO_SCHEMA, alias="schema")
    name: str
    description: str | None = None
    model: str
    cluster: ClusterRef
    workload: Workload = Workload()
    layout: Layout | None = None
    optimizations: tuple[OptimizationId, ...] = RECIPE_OPTIMIZATIONS
    measured: Measured | None = None
    software: Software = Software()
    profile: str | None = None  # a profile file; default: the cluster kind's embedded profile
    seed: int = 0

    @model_validator(mode="after")
    def _schema(self) -> Scenario:
        if self.schema_version != SCENARIO_SCHEMA:
            raise ValueError(f"scenario schema {self.schema_version} is not supported (this twin reads "
                             f"{SCENARIO_SCHEMA})")
        return self

    def has(self, opt: OptimizationId) -> bool:
        return opt in self.optimizations

    def dump_yaml(self) -> str:
        return yaml.safe_dump(self.model_dump(mode="json", by_alias=True, exclude_none=True), sort_keys=False)


def load_scenario(path: Path | str) -> Scenario:
    label = f"scenario {path}"
    return validated(Scenario, read_mapping(path, label, "yaml"), label)
