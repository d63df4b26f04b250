"""The prediction for one scenario: the `twin simulate --json` object (DESIGN section 4.3)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, model_validator

PHASES = ("update", "log_prob", "rollout", "transition")
# in the order a step runs them; PPO's critic passes (verl's timing_s/values and timing_s/update_critic) only where the
# scenario trains a critic
STAGES = ("rollout", "reward", "old_log_prob", "ref", "values", "advantage", "update_critic", "update", "reshard",
          "offload")
CRITIC_STAGES = ("values", "update_critic")


class MemoryBreakdown(BaseModel):
    """GB (1e9 bytes) of one device in one phase."""

    model_config = ConfigDict(extra="forbid")

    weights: float = 0.0
    grads: float = 0.0
    optimizer: float = 0.0
    activations: float = 0.0
    kv_cache: float = 0.0
    reshard_buffer: float = 0.0
    overhead: float = 0.0

    @property
    def total(self) -> float:
        return (self.weights + self.grads + self.optimizer + self.activations + self.kv_cache
                + self.reshard_buffer + self.overhead)


class ReshardFigures(BaseModel):
    model_config = ConfigDict(extra="forbid")

    bytes_total: int
    bytes_per_device_max: int
    extra_memory_gb_per_device_max: float
    bytes_per_tier: dict[str, int] = {}


class ReshardResult(ReshardFigures):
    method: str
    alternatives: dict[str, ReshardFigures] = {}


class Uncertainty(BaseModel):
    """The band a user should expect around a prediction (DESIGN 4.3), from the profile's cross-validated error."""

    model_config = ConfigDict(extra="forbid")

    step_s: tuple[float, float]
    stages_s: dict[str, tuple[float, float]] = {}
    memory_peak_gb_max: tuple[float, float] | None = None
    basis: str  # what the band is based on: the profile id, its leave-one-case-out error and the cases
    in_domain: bool
    outside: list[str] = []  # dimensions the scenario leaves: model family, sequence length, scale, ...


class SimulationResult(BaseModel):
    """Predictions for one scenario and layout."""

    model_config = ConfigDict(extra="forbid")

    scenario: str
    model_kind: Literal["analytical", "simulation"]
    cards: int
    devices: int
    step_s: float
    tps_per_card: float
    tps_per_device: float
    stages_s: dict[str, float]
    memory_peak_gb: dict[str, float]
    memory_peak_gb_max: float
    peak_phase: str
    hbm_gb: float  # the device's HBM
    capacity_gb: float  # what the framework's allocator can fill of it: `fits` compares the peak with this
    fits: bool
    memory_gb: dict[str, MemoryBreakdown]
    host_memory_gb_per_node: float
    host_memory_capacity_gb_per_node: float
    host_fits: bool
    kv_cache_bytes_per_token_per_device: int
    kv_cache_tokens_per_device: int
    reshard: ReshardResult
    profile: str
    twin_version: str
    notes: list[str] = []
    represented_ranks: dict[str, list[int]] = {}  # simulated rank -> the ranks it stands for
    uncertainty: Uncertainty | None = None

    @model_validator(mode="before")
    @classmethod
    def _capacity_of_older_results(cls, data: object) -> object:
        """A result written before `capacity_gb` (twin of 2026-12-06; a plan.json's predictions) checked its
        memory against `hbm_gb`: read that as its capacity, so the plan still loads."""
        if isinstance(data, dict) and "capacity_gb" not in data and "hbm_gb" in data:
            return {**data, "capacity_gb": data["hbm_gb"]}
        return data
