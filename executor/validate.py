"""Validate a launch against the installed verl before anything starts.

Composes the overrides with verl's own `trainer/config` through Hydra's compose API, checks every key
exists (one error per unknown key), converts the sections verl turns into dataclasses (bad values), runs
verl's `validate_config`, then the constraints verl only asserts in its workers (executor/late_checks.py).
Runs on CPU in seconds: no Ray, no model.

`validate` (`executor run`) imports verl for the conversion and `validate_config`; `validate_source`
(`executor command-file`) runs the checks that need no verl import: the keys, the value types read from the
dataclasses' source (executor/typecheck.py source_hints) and the worker-time constraints.
"""

from __future__ import annotations

import contextlib
import io
import warnings
from pathlib import Path

from omegaconf import DictConfig, OmegaConf, open_dict

from executor.errors import ValidationFailed
from executor.late_checks import late_problems
from executor.source_lookup import module_spec
from executor.typecheck import imported_hints, source_hints, type_problems
from executor.versions import check_verl_version

CONFIG_NAME = "ppo_trainer"
GROUPS = ("model_engine",)
_ABSENT = object()


def verl_config_dir() -> Path:
    """verl's `trainer/config` directory, located without importing verl."""
    spec = module_spec("verl")
    if spec is None or not spec.submodule_search_locations:
        raise ValidationFailed(["verl is not installed"])
    return Path(next(iter(spec.submodule_search_locations))) / "trainer" / "config"


def compose(overrides: list[str]) -> DictConfig:
    """verl's `ppo_trainer` config with `overrides` applied (raises Hydra's errors)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(verl_config_dir()), version_base=None):
        return hydra_compose(config_name=CONFIG_NAME, overrides=overrides)


def _split(override: str) -> tuple[str, str, bool]:
    key, _, value = override.partition("=")
    return key.lstrip("+"), value, key.startswith("+")


def _has_key(cfg: DictConfig, key: str) -> bool:
    """Whether `key` (dotted) is in `cfg`, also when its value is mandatory-missing ('???')."""
    parent_key, _, last = key.rpartition(".")
    parent = OmegaConf.select(cfg, parent_key, default=_ABSENT) if parent_key else cfg
    # DictConfig's `in` is False for '???' values; its keys() lists them
    return isinstance(parent, DictConfig) and last in parent.keys()  # noqa: SIM118


def _groups(overrides: list[str]) -> list[str]:
    return [o for o in overrides if _split(o)[0] in GROUPS]


def _group_problems(overrides: list[str]) -> list[str]:
    """One message per config-group choice verl has no file for."""
    return [f"{key}={value}: verl has no such config group option"
            for key, value, _ in map(_split, _groups(overrides))
            if not (verl_config_dir() / key / f"{value}.yaml").is_file()]


def _key_problems(overrides: list[str], base: DictConfig) -> list[str]:
    """One message per override whose key verl's config (`base`: composed with the overrides' group choices
    only) does not have, or already has for `+key`."""
    problems = []
    for override in overrides:
        key, _, add = _split(override)
        if key in GROUPS:
            continue
        exists = _has_key(base, key)
        if add and exists:
            problems.append(f"+{key}: verl already has this key; set it without '+'")
        elif not add and not exists:
            problems.append(f"unknown key {key!r}: not in verl's {CONFIG_NAME}.yaml")
    return problems


def _first_line(exc: BaseException) -> str:
    """The innermost cause's first line (and its OmegaConf key) of a possibly wrapped exception."""
    while exc.__cause__ is not None:
        exc = exc.__cause__
    lines = [s.strip() for s in str(exc).splitlines() if s.strip()]
    full_key = next((s.split(":", 1)[1].strip() for s in lines if s.startswith("full_key:")), None)
    head = lines[0] if lines else type(exc).__name__
    return f"{head} (key {full_key})" if full_key else head


def _ref_as_workers_see_it(cfg: DictConfig) -> DictConfig:
    """The ref section after the renames ActorRolloutRefWorker.init_model applies before converting it."""
    arr = cfg.actor_rollout_ref
    ref = OmegaConf.create(OmegaConf.to_container(arr.ref, resolve=True))
    with open_dict(ref):
        ref.ppo_mini_batch_size = arr.actor.ppo_mini_batch_size
        ref.ppo_micro_batch_size = ref.pop("log_prob_micro_batch_size", None)
        ref.ppo_micro_batch_size_per_gpu = ref.pop("log_prob_micro_batch_size_per_gpu", None)
        ref.use_dynamic_bsz = ref.pop("log_prob_use_dynamic_bsz", False)
        ref.ppo_max_token_len_per_gpu = ref.pop("log_prob_max_token_len_per_gpu", None)
    return ref


def _needs_critic(cfg: DictConfig) -> bool:
    """verl's need_critic (GAE, or critic.enable), without the warning it gives a run that has none."""
    from verl.trainer.ppo.utils import need_critic

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return need_critic(cfg)


def _without_critic_model(cfg: DictConfig) -> DictConfig:
    """`cfg` with the critic's model section emptied: converting it reads the checkpoint's config.json (from the hub
    where the path names a model there), and the checkpoint is the actor's, which the launch itself loads."""
    checked = cfg.copy()
    with open_dict(checked):
        checked.critic.model = None
    return checked


def _sections(cfg: DictConfig) -> dict[str, DictConfig]:
    """The sections verl's workers convert to dataclasses (the ref's, derived from the actor's, aside)."""
    arr = cfg.actor_rollout_ref
    return {"actor_rollout_ref.actor": arr.actor, "actor_rollout_ref.rollout": arr.rollout,
            "algorithm": cfg.algorithm, "actor_rollout_ref.rollout.checkpoint_engine": arr.rollout.checkpoint_engine}


def _dataclass_problems(cfg: DictConfig) -> list[str]:
    """Convert the sections verl's workers convert, one message per section (or wrongly typed value)."""
    from verl.trainer.ppo.utils import need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass

    sections = _sections(cfg)
    if need_reference_policy(cfg):
        sections["actor_rollout_ref.ref"] = _ref_as_workers_see_it(cfg)
    if _needs_critic(cfg):  # PPO: the critic's section, converted as the trainer converts it
        sections["critic"] = cfg.critic
    problems = []
    for name, section in sections.items():
        derived = name == "actor_rollout_ref.ref"  # copies the actor's values: report those once, for the actor
        wrong = [] if derived else type_problems(OmegaConf.to_container(section, resolve=True), name, imported_hints)
        if wrong:
            problems += wrong
            continue
        try:
            with warnings.catch_warnings():  # verl warns when it adjusts a value (e.g. SP off at TP1): not a problem
                warnings.simplefilter("ignore")
                omega_conf_to_dataclass(section)
        except Exception as exc:  # verl raises ValueError, AssertionError and OmegaConf errors
            problems.append(f"{name}: {_first_line(exc)}")
    return problems


def _verl_checks(cfg: DictConfig) -> list[str]:
    from verl.trainer.ppo.utils import need_reference_policy
    from verl.utils.config import validate_config

    try:
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            validate_config(cfg, use_reference_policy=need_reference_policy(cfg), use_critic=_needs_critic(cfg))
    except Exception as exc:
        return [f"verl validate_config: {_first_line(exc)}"]
    return []


def apply_overrides(base: DictConfig, overrides: list[str]) -> DictConfig:
    """`compose(overrides)` from `base`, the composition of their group choices: the other overrides parsed and
    applied by Hydra's own code, as its compose applies them after merging the defaults (one YAML pass, not two)."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra.core.override_parser.overrides_parser import OverridesParser

    rest = [o for o in overrides if _split(o)[0] not in GROUPS]
    ConfigLoaderImpl._apply_overrides_to_config(OverridesParser.create().parse_overrides(rest), base)
    return base


def _composed(overrides: list[str], once: bool = False) -> DictConfig:
    """The supported verl's config with `overrides`, every key known (else ValidationFailed); `once`: composed
    from the group choices' composition (`apply_overrides`) rather than by Hydra's compose again."""
    check_verl_version()
    problems = _group_problems(overrides)
    if problems:
        raise ValidationFailed(problems)
    base = _group_composition(tuple(_groups(overrides))) if once else compose(_groups(overrides))
    problems = _key_problems(overrides, base)
    if problems:
        raise ValidationFailed(problems)
    from hydra.errors import HydraException

    try:
        return apply_overrides(base, overrides) if once else compose(overrides)
    except HydraException as exc:
        raise ValidationFailed([_first_line(exc)]) from None


_PREPARED: dict[tuple[str, ...], DictConfig] = {}  # compositions made before the overrides were known, used once


def _group_composition(groups: tuple[str, ...]) -> DictConfig:
    """verl's config composed with these group choices: the one `prepare_validation` made, else composed now."""
    prepared = _PREPARED.pop(groups, None)
    return prepared if prepared is not None else compose(list(groups))


PREPARED_GROUPS = ("model_engine=megatron",)  # the plans' usual engine (executor/verl_config/train.py)


def prepare_validation() -> None:
    """Compose verl's config for the usual group choice and read its dataclasses' source, before the overrides are
    known (`executor command-file --when-told`); what `validate_source` then finds already done."""
    cfg = compose(list(PREPARED_GROUPS))
    for name, section in _sections(cfg).items():
        type_problems(OmegaConf.to_container(section, resolve=True), name, source_hints)
    _PREPARED[PREPARED_GROUPS] = cfg


def validate_source(overrides: list[str]) -> DictConfig:
    """`validate` without importing verl: keys, value types from the dataclasses' source, worker-time
    constraints (not verl's dataclass conversion or `validate_config`, which `executor run` adds)."""
    cfg = _composed(overrides, once=True)
    problems = [p for name, section in _sections(cfg).items()
                for p in type_problems(OmegaConf.to_container(section, resolve=True), name, source_hints)]
    if problems:
        raise ValidationFailed(problems)
    problems = late_problems(cfg)
    if problems:
        raise ValidationFailed(problems)
    return cfg


def validate(overrides: list[str]) -> DictConfig:
    """Return the composed config, or raise ValidationFailed with one message per problem."""
    cfg = _composed(overrides)
    checked = _without_critic_model(cfg) if _needs_critic(cfg) else cfg  # what verl's conversions may read offline
    problems = _dataclass_problems(checked)
    if problems:
        raise ValidationFailed(problems)
    problems = _verl_checks(checked) + late_problems(cfg)
    if problems:
        raise ValidationFailed(problems)
    return cfg
