"""Calibration profiles: every efficiency, overhead and bandwidth factor the cost models use.

A profile is a versioned YAML file. Each parameter carries its value, unit, source and fitting bounds;
fitted profiles add provenance (inputs, date, residuals) and name their parent. No constant of the cost
models lives anywhere else: the cost models ask the profile by name and fail loudly for a missing one.
"""

from __future__ import annotations

from datetime import date
from functools import lru_cache
from importlib import resources
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from twin.errors import TwinError
from twin.fileio import parse_mapping, read_mapping, refuse_overwrite, validated, write_atomic

PROFILE_SCHEMA = 1


class Param(BaseModel):
    """One calibrated quantity."""

    model_config = ConfigDict(extra="forbid")

    value: float = Field(allow_inf_nan=False)
    unit: str
    source: str  # where the value comes from: datasheet, measurement job, published profile, fit
    bounds: tuple[float, float] | None = None  # limits a fit may move it within (never widened to let a fit land)
    bounds_source: str | None = None  # where the bounds come from (every shipped bounded parameter has one)
    fitted: bool = False

    @model_validator(mode="after")
    def _in_bounds(self) -> Param:
        # every quantity of a profile is a time, a size, a rate or a fraction: none is negative, and a fraction
        # of peak (or of a pass, or hidden) is at most 1 ("fraction of nominal" on CPU may exceed it)
        if self.value < 0:
            raise ValueError(f"value {self.value} is negative; a profile holds times, sizes, rates and fractions")
        most = 100.0 if "nominal" in self.unit else 1.0  # the cpu profile's nominal figures are bounded at 20x
        if self.unit.startswith("fraction") and self.value > most:
            raise ValueError(f"value {self.value} exceeds {most:g}, but its unit is a {self.unit}")
        if self.bounds is not None:
            lo, hi = self.bounds
            if not lo <= self.value <= hi:
                raise ValueError(f"value {self.value} is outside its bounds [{lo}, {hi}]")
        return self


class FitRecord(BaseModel):
    """What a case fit could identify (DESIGN section 7), kept so a shipped profile can be checked."""

    model_config = ConfigDict(extra="forbid")

    freed: list[str]  # the parameters the fit moved
    distinct_targets: int  # distinct measured numbers fitted
    moved: dict[str, int] = {}  # freed parameter -> distinct numbers it moves
    singular_values: list[float]  # of the freed parameters' log-log Jacobian at the start point
    relative_threshold: float  # a direction is identified at or above this fraction of the largest
    identifiable: int  # singular values at or above the threshold
    bound_hits_accepted: list[str] = []  # freed parameters that ended on a bound (a model error), accepted


class Provenance(BaseModel):
    model_config = ConfigDict(extra="forbid")

    inputs: list[str] = []
    fitted_on: date | None = None
    cases: list[str] = []  # scenario names used for the fit (never used to judge it)
    residuals: dict[str, float] = {}
    fit: FitRecord | None = None
    notes: str = ""


class CrossValidation(BaseModel):
    """Leave-one-case-out error of a fitted profile (DESIGN section 7): refit without each case, predict it.

    Relative errors are mean absolute fractions (0.08 = 8 %); they set the uncertainty band of every
    prediction made from the profile. `domain` records what the fitting cases covered.
    """

    model_config = ConfigDict(extra="forbid")

    cases: list[str]
    step_rel_error: float = Field(ge=0)
    stages_rel_error: dict[str, float] = {}
    memory_rel_error: float | None = Field(default=None, ge=0)
    case_errors: dict[str, dict[str, float]] = {}  # held-out case -> quantity -> signed relative error
    domain: dict[str, list[str | float]] = {}  # e.g. model_family: [deepseek, qwen3], seq_len: [lo, hi]


class Profile(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    schema_version: int = Field(default=PROFILE_SCHEMA, alias="schema")
    id: str
    cluster_kind: str
    description: str = ""
    parent: str | None = None
    params: dict[str, Param]
    provenance: Provenance = Provenance()
    cross_validation: CrossValidation | None = None

    @model_validator(mode="after")
    def _efficiencies_positive(self) -> Profile:
        zero = sorted(k for k, p in self.params.items() if "efficiency" in k and p.value <= 0)
        if zero:
            raise ValueError(f"{', '.join(zero)} must be above 0: the cost models divide by efficiencies")
        return self

    @model_validator(mode="after")
    def _schema(self) -> Profile:
        if self.schema_version != PROFILE_SCHEMA:
            raise ValueError(f"profile schema {self.schema_version} is not supported (reads {PROFILE_SCHEMA})")
        return self

    def __getitem__(self, name: str) -> float:
        try:
            return self.params[name].value
        except KeyError:
            raise TwinError(f"profile {self.id} has no parameter {name!r}") from None

    def with_values(self, values: dict[str, float], new_id: str, sources: dict[str, str] | None = None) -> Profile:
        """A child profile with some parameters replaced; those whose value changed are marked fitted, and
        every value given a source takes it."""
        params = dict(self.params)
        for name, v in values.items():
            update: dict[str, object] = {} if float(v) == params[name].value else {"value": float(v), "fitted": True}
            if sources and name in sources:
                update["source"] = sources[name]  # a measurement that confirms a value still becomes its source
            if update:
                params[name] = params[name].model_copy(update=update)
        return self.model_copy(update={"id": new_id, "parent": self.id, "params": params,
                                       "provenance": Provenance()})

    def dump_yaml(self) -> str:
        data = self.model_dump(mode="json", by_alias=True, exclude_none=True)
        return yaml.safe_dump(data, sort_keys=False, width=120)


def _parse(text: str, label: str) -> Profile:
    label = f"profile {label}"
    return validated(Profile, parse_mapping(text, label, "yaml"), label)


EMBEDDED = {"a2": "a2.yaml", "a3": "a3.yaml", "cpu": "cpu.yaml", "a100": "gpu.yaml", "h100": "gpu.yaml",
            "h200": "gpu.yaml", "h20": "gpu.yaml"}


def serves_kind(profile: Profile, kind: str) -> bool:
    """Whether the profile is meant for clusters of `kind`: its own kind, or one of the kinds its shipped file
    serves (the `gpu` profile serves a100, h100, h200 and h20)."""
    return kind == profile.cluster_kind or EMBEDDED.get(kind, "").removesuffix(".yaml") == profile.cluster_kind


def profile_for_kind(given: Profile | None, ref: str | None, kind: str, base_dir: Path | None = None) -> Profile:
    """The profile an evaluation of a `kind` cluster runs on: `given`, else the scenario's `ref` (resolve_profile);
    refused in one line if it is not meant for clusters of `kind` (its parameters are another hardware's)."""
    profile = given or resolve_profile(ref, kind, base_dir)
    if not serves_kind(profile, kind):
        raise TwinError(f"profile {profile.id} is for cluster kind {profile.cluster_kind}, not {kind}: give a profile "
                        f"for {kind} or none (the kind's embedded one; a cluster file names the shipped kind whose "
                        "profile it uses: `profile: a2`)")
    return profile


@lru_cache(maxsize=16)
def embedded_profile(kind: str) -> Profile:
    """The default profile shipped for a cluster kind."""
    if kind not in EMBEDDED:
        raise TwinError(f"no embedded profile for cluster kind {kind!r}; pass one with --profile (a cluster file names "
                        "the shipped kind whose profile it uses: `profile: a2`)")
    text = resources.files("twin").joinpath("profiles", EMBEDDED[kind]).read_text()
    return _parse(text, EMBEDDED[kind])


def reference_profile(kind: str) -> Profile:
    """The sourced values before any fit: `<kind>-reference.yaml` where a fitted default exists, else the
    embedded profile itself."""
    name = EMBEDDED.get(kind)
    if name is None:
        raise TwinError(f"no embedded profile for cluster kind {kind!r}")
    ref = resources.files("twin").joinpath("profiles", name.replace(".yaml", "-reference.yaml"))
    if ref.is_file():
        return _parse(ref.read_text(), ref.name)
    return embedded_profile(kind)


def load_profile(path: Path | str) -> Profile:
    label = f"profile {path}"
    return validated(Profile, read_mapping(path, label, "yaml"), label)


def resolve_profile(ref: str | None, kind: str, base_dir: Path | None = None) -> Profile:
    """A profile path (relative to `base_dir` if given), else the kind's embedded one."""
    if ref is None:
        return embedded_profile(kind)
    path = Path(ref)
    if not path.is_absolute() and base_dir is not None and (base_dir / path).exists():
        path = base_dir / path
    return load_profile(path)


def save_profile(profile: Profile, path: Path | str) -> None:
    """Write a new profile; an existing file is never overwritten."""
    refuse_overwrite(path, "a calibration profile")
    write_atomic(path, profile.dump_yaml())
