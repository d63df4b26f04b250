"""Validation of the built overrides against the installed verl's configs and worker-time constraints."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from executor.errors import ValidationFailed
from executor.validate import apply_overrides, compose, prepare_validation, validate, validate_source

R = "actor_rollout_ref.rollout"
A = "actor_rollout_ref.actor"


def _problems(overrides: list[str]) -> list[str]:
    with pytest.raises(ValidationFailed) as info:
        validate(overrides)
    return info.value.problems


def test_c1_plan_is_valid(make_plan, build, tmp_path: Path) -> None:
    cfg = validate(build(make_plan(), tmp_path).overrides)
    assert cfg.actor_rollout_ref.actor.strategy == "megatron"
    assert cfg.actor_rollout_ref.rollout.expert_parallel_size == 256


SOURCE_CASES = [  # found without importing verl (validate_source, executor command-file) and by validate
    ([f"{A}.not_a_key=1"], f"unknown key '{A}.not_a_key'"),
    ([f"+{A}.ppo_epochs=2"], f"+{A}.ppo_epochs: verl already has this key"),
    (["model_engine=nope"], "model_engine=nope: verl has no such config group option"),
    ([f"{A}.ppo_mini_batch_size=abc"], f"{A}.ppo_mini_batch_size='abc': expected int"),
    ([f"{R}.gpu_memory_utilization=high"], f"{R}.gpu_memory_utilization='high': expected float"),
    ([f"{R}.log_prob_use_dynamic_bsz=true"],
     "actor.use_dynamic_bsz=False differs from rollout.log_prob_use_dynamic_bsz"),
    ([f"{A}.ppo_mini_batch_size=1", f"{R}.n=4"], "is not divisible by the actor's data-parallel size 8"),
    ([f"{R}.max_num_seqs=2048"], "max_num_batched_tokens 1024 < max_num_seqs 2048"),
    ([f"{R}.enable_chunked_prefill=false"], "without chunked prefill max_num_batched_tokens 1024 must be >="),
    ([f"{R}.calculate_log_probs=false"], "bypass_mode needs rollout.calculate_log_probs=True"),
    ([f"{R}.tensor_model_parallel_size=3", f"{R}.data_parallel_size=1", f"{R}.expert_parallel_size=3"],
     "devices are not divisible by the rollout replica size"),
    ([f"{A}.megatron.expert_model_parallel_size=3"], "256 devices are not divisible by EP x ETP x PP = 24"),
]
IMPORT_CASES = [  # verl's dataclass conversion and validate_config: executor run only
    ([f"{R}.expert_parallel_size=128"], "expert_parallel_size must be equal to tensor_model_parallel_size"),
    ([f"{A}.ppo_mini_batch_size=1024"], "verl validate_config: train_batch_size (512) must be >="),
]


@pytest.mark.parametrize(("extra", "expected"), SOURCE_CASES + IMPORT_CASES)
def test_each_problem_is_one_clear_error(make_plan, build, tmp_path: Path, extra: list[str], expected: str) -> None:
    problems = _problems(build(make_plan(), tmp_path).overrides + extra)
    assert len(problems) == 1, problems
    assert expected in problems[0]


def test_several_unknown_keys_each_reported(make_plan, build, tmp_path: Path) -> None:
    problems = _problems([*build(make_plan(), tmp_path).overrides, "trainer.a=1", "data.b=2"])
    assert problems == ["unknown key 'trainer.a': not in verl's ppo_trainer.yaml",
                        "unknown key 'data.b': not in verl's ppo_trainer.yaml"]


@pytest.mark.parametrize(("extra", "expected"), SOURCE_CASES)
def test_command_file_checks_find_the_same_problems(make_plan, build, tmp_path: Path, extra: list[str],
                                                    expected: str) -> None:
    with pytest.raises(ValidationFailed) as info:
        validate_source(build(make_plan(), tmp_path).overrides + extra)
    assert len(info.value.problems) == 1 and expected in info.value.problems[0], info.value.problems


def test_overrides_applied_to_the_group_composition_equal_hydra_compose(make_plan, build, tmp_path: Path) -> None:
    """validate_source composes once (the group choices) and applies the rest with Hydra's code: the same config
    as Hydra's compose of every override, also for added keys, nulls, lists and dicts."""
    overrides = [*build(make_plan(), tmp_path).overrides, f"+{A}.megatron.override_transformer_config.extra=[1,2]",
                 "trainer.project_name=null", "+data.added={a: 1}"]
    base = compose([o for o in overrides if o.startswith("model_engine=")])
    assert OmegaConf.to_container(apply_overrides(base, overrides)) == OmegaConf.to_container(compose(overrides))


def test_the_prepared_composition_gives_the_same_config_and_problems(make_plan, build, tmp_path: Path) -> None:
    """`executor command-file --when-told` composes before the overrides are known: the same config as Hydra's
    compose, and the same problem reported, as without preparing."""
    overrides = build(make_plan(), tmp_path).overrides
    prepare_validation()
    assert OmegaConf.to_container(validate_source(overrides)) == OmegaConf.to_container(compose(overrides))
    prepare_validation()
    with pytest.raises(ValidationFailed) as info:
        validate_source([*overrides, f"{A}.not_a_key=1"])
    assert info.value.problems == [f"unknown key '{A}.not_a_key': not in verl's ppo_trainer.yaml"]


@pytest.mark.parametrize("layout", ["fsdp", "megatron"])
def test_a_ppo_plan_is_valid_with_its_critic_converted(make_plan, build, tmp_path: Path, layout: str) -> None:
    """verl converts and validates the critic's section where GAE needs one; its model section (a hub download for
    a catalog name) is left to the launch."""
    scenario = Path(__file__).resolve().parents[2] / "scenarios" / "c6-ppo-qwen3-8b-a2-8-fsdp.yaml"
    plan = make_plan(scenario)
    overrides = build(plan, tmp_path).overrides
    if layout == "megatron":
        overrides = [o for o in overrides if not o.startswith(("critic.fsdp", "actor_rollout_ref.actor.fsdp_config",
                                                               "actor_rollout_ref.ref.fsdp_config", "model_engine"))]
        overrides.append("model_engine=megatron")
    cfg = validate(overrides)
    assert cfg.critic.strategy == ("fsdp" if layout == "fsdp" else "megatron")
    assert cfg.critic.ppo_max_token_len_per_gpu == 16384
    problems = _problems([*overrides, "critic.use_dynamic_bsz=false"])  # fixed micro-batches of no size
    assert problems == ["critic: [critic] Please set at least one of 'critic.micro_batch_size' or "
                        "'critic.micro_batch_size_per_gpu'."]
