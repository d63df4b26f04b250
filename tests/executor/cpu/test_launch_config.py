"""cpu_run_config: overrides that the installed verl composes and validates, and the run's environment."""

from __future__ import annotations

from pathlib import Path

import pytest

from executor.cpu.launch import METRICS_FILE, ROLLOUTS_DIR, MegatronSizes, cpu_run_config, reward_function_path
from executor.cpu.names import PLUGIN_MODULE


def _compose(overrides: list[str]):
    import verl.trainer
    from hydra import compose, initialize_config_dir

    config_dir = Path(verl.trainer.__file__).parent / "config"
    with initialize_config_dir(config_dir=str(config_dir), version_base=None):
        return compose(config_name="ppo_trainer", overrides=overrides)


def _config(tmp_path: Path, **kwargs):
    return cpu_run_config(
        tmp_path,
        model_dir=tmp_path / "model",
        train_files=tmp_path / "train.parquet",
        val_files=tmp_path / "test.parquet",
        steps=2,
        **kwargs,
    )


@pytest.mark.parametrize("world", [1, 2])
def test_overrides_compose_and_pass_verls_validation(tmp_path: Path, world: int) -> None:
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config

    overrides, _ = _config(tmp_path, world=world)
    cfg = _compose(overrides)
    validate_config(config=cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
    assert not need_reference_policy(cfg) and not need_critic(cfg)
    assert cfg.algorithm.rollout_correction.bypass_mode and cfg.actor_rollout_ref.rollout.calculate_log_probs
    assert cfg.actor_rollout_ref.rollout.name == "vllm" and cfg.trainer.device == "cpu"
    assert cfg.trainer.n_gpus_per_node == world and cfg.ray_kwargs.ray_init.num_gpus == world
    assert cfg.ray_kwargs.ray_init.include_dashboard is False
    assert cfg.data.train_batch_size * cfg.actor_rollout_ref.rollout.n % world == 0
    actor = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
    assert actor.policy_loss.loss_mode == "bypass_mode"
    assert cfg.reward.custom_reward_function.path == str(reward_function_path())
    assert cfg.trainer.rollout_data_dir == str(tmp_path.resolve() / ROLLOUTS_DIR)


def test_a_megatron_plan_trains_on_verls_megatron_engine_through_mbridge(tmp_path: Path) -> None:
    from verl.utils.config import omega_conf_to_dataclass

    overrides, _ = _config(tmp_path, world=2, rollout_tp=2, megatron=MegatronSizes(tp=2))
    cfg = _compose(overrides)
    actor = cfg.actor_rollout_ref.actor
    assert actor.strategy == "megatron" and actor.megatron.tensor_model_parallel_size == 2
    assert actor.megatron.pipeline_model_parallel_size == 1
    assert actor.megatron.use_mbridge and actor.megatron.vanilla_mbridge and actor.megatron.use_distributed_optimizer
    assert actor.megatron.override_transformer_config.sequence_parallel is False  # mbridge sets it for TP > 1
    engine = omega_conf_to_dataclass(actor.megatron)  # verl's own McoreEngineConfig accepts it (bf16)
    assert engine.dtype == "bfloat16" and not engine.use_remove_padding
    assert not any("fsdp_config" in o for o in overrides)


def test_a_megatron_moe_plan_splits_experts_and_runs_the_all_to_all_dispatcher_unfused(tmp_path: Path) -> None:
    overrides, _ = _config(tmp_path, world=2, megatron=MegatronSizes(tp=1, ep=2, moe=True), rollout_ep=2)
    cfg = _compose(overrides)
    megatron, rollout = cfg.actor_rollout_ref.actor.megatron, cfg.actor_rollout_ref.rollout
    assert megatron.expert_model_parallel_size == 2 and megatron.expert_tensor_parallel_size == 1
    tf = megatron.override_transformer_config
    assert tf.moe_grouped_gemm is False and "moe_token_dispatcher_type" not in tf  # verl's all-to-all default
    assert (rollout.expert_parallel_size, rollout.data_parallel_size, rollout.tensor_model_parallel_size) == (2, 2, 1)
    dense = _compose(_config(tmp_path, world=2, megatron=MegatronSizes(tp=2))[0])
    assert "moe_grouped_gemm" not in dense.actor_rollout_ref.actor.megatron.override_transformer_config
    assert "attention_backend" not in rollout.engine_kwargs.vllm


def test_an_mla_model_asks_vllm_for_its_reference_cpu_mla_backend(tmp_path: Path) -> None:
    overrides, _ = _config(tmp_path, world=2, megatron=MegatronSizes(tp=1, ep=2, moe=True), rollout_ep=2, mla=True)
    assert _compose(overrides).actor_rollout_ref.rollout.engine_kwargs.vllm.attention_backend == "CPU_MLA"


def test_environment_loads_the_plugin_and_places_the_metrics_file(tmp_path: Path) -> None:
    _, env = _config(tmp_path)
    assert env["VERL_USE_EXTERNAL_MODULES"] == PLUGIN_MODULE and env["VERL_PLATFORM"] == "cpu"
    assert env["OMP_NUM_THREADS"] == "1"
    assert env["VERL_FILE_LOGGER_PATH"] == str(tmp_path.resolve() / METRICS_FILE)
    _, env = _config(tmp_path, metrics_path=tmp_path / "m" / "x.jsonl")
    assert env["VERL_FILE_LOGGER_PATH"] == str((tmp_path / "m" / "x.jsonl").resolve())


def test_the_plans_micro_batches_run_and_without_them_each_ranks_share_is_one(tmp_path: Path) -> None:
    arr = _compose(_config(tmp_path, world=2, batch_prompts=128, n=4, micro_batch=64,
                           log_prob_micro_batch=32)[0]).actor_rollout_ref
    assert (arr.actor.ppo_micro_batch_size_per_gpu, arr.rollout.log_prob_micro_batch_size_per_gpu) == (64, 32)
    arr = _compose(_config(tmp_path, world=2, batch_prompts=128, n=4)[0]).actor_rollout_ref
    assert (arr.actor.ppo_micro_batch_size_per_gpu, arr.rollout.log_prob_micro_batch_size_per_gpu) == (256, 256)


def test_reward_function_path_defines_compute_score() -> None:
    assert "def compute_score(" in reward_function_path().read_text()


@pytest.mark.parametrize("kwargs", [{"n": 1}, {"world": 3}, {"batch_prompts": 0},
                                    {"world": 2, "megatron": MegatronSizes(tp=2, pp=2)},
                                    {"world": 2, "megatron": MegatronSizes(tp=1, ep=4)}, {"world": 2, "rollout_ep": 3},
                                    {"micro_batch": 0}, {"log_prob_micro_batch": -1}])
def test_impossible_shapes_are_rejected(tmp_path: Path, kwargs: dict) -> None:
    with pytest.raises(ValueError):
        _config(tmp_path, **kwargs)
