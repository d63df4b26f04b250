"""Plan -> Hydra overrides for verl 0.9's ppo_trainer.yaml."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from executor.errors import ExecutorError
from executor.verl_config.overrides import hydra_value

A = "actor_rollout_ref.actor"
M = f"{A}.megatron"
TF = f"{M}.override_transformer_config"
R = "actor_rollout_ref.rollout"
ENV = "+ray_kwargs.ray_init.runtime_env.env_vars"
SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"
PPO_NIGHTLY = SCENARIOS / "c6-ppo-qwen3-8b-a2-8-fsdp.yaml"


def test_c1_training_layout(make_plan, build, as_dict, tmp_path: Path) -> None:
    o = as_dict(build(make_plan(), tmp_path).overrides)
    assert o["model_engine"] == "megatron"
    for role in (A, "actor_rollout_ref.ref"):
        assert o[f"{role}.megatron.tensor_model_parallel_size"] == "4"
        assert o[f"{role}.megatron.pipeline_model_parallel_size"] == "8"
        assert o[f"{role}.megatron.expert_model_parallel_size"] == "8"
        assert o[f"{role}.megatron.expert_tensor_parallel_size"] == "1"  # tp-extend-ep: experts not TP-split
        assert o[f"{role}.megatron.context_parallel_size"] == "1"
        assert o[f"{role}.megatron.sequence_parallel"] == "true"
        assert o[f"{role}.megatron.param_offload"] == "true"
    assert o[f"+{TF}.moe_tp_extend_ep"] == "true"
    assert o[f"+{TF}.num_layer_list"] == "'7,7,8,8,8,8,8,7'"
    assert o[f"+{TF}.swap_optimizer"] == "true"
    assert o[f"{M}.optimizer_offload"] == "false"  # the swap optimizer replaces verl's optimizer offload
    assert (o[f"{TF}.recompute_granularity"], o[f"{TF}.recompute_method"], o[f"{TF}.recompute_num_layers"]) == (
        "full", "uniform", "1")
    for role in (A, "actor_rollout_ref.ref"):  # the recipe pads each micro-batch to its longest (use_packed_seq False)
        assert (o[f"{role}.megatron.use_remove_padding"], o[f"{role}.megatron.pad_bshd_to_minibatch_max"]) == (
            "false", "false")


def test_grouped_gemm_experts_are_asked_of_mindspeed(make_plan, build, as_dict, tmp_path: Path) -> None:
    o = as_dict(build(make_plan(SCENARIOS / "c10-grpo-qwen3-235b-a3-128dies-32k.yaml"), tmp_path).overrides)
    assert o[f"+{TF}.moe_grouped_gemm"] == "true" and f"+{TF}.moe_tp_extend_ep" not in o
    assert o[f"+{TF}.moe_zero_memory"] == "level1"
    # MindSpeed asks for its all-to-all overlap with zero memory, on the all-to-all dispatcher (the recipe sets both)
    assert (o[f"+{TF}.moe_alltoall_overlap_comm"], o[f"+{TF}.moe_token_dispatcher_type"]) == ("true", "alltoall")


def test_zero_memory_with_tp_extend_ep_is_refused_before_launch(make_plan, build, tmp_path: Path) -> None:
    # C1's layout (tp-extend-ep) with zero memory: MindSpeed releases disagree on the dispatcher it needs
    scenario = yaml.safe_load((SCENARIOS / "c1-dsr1-a3-128.yaml").read_text())
    scenario["layout"]["train"]["moe_zero_memory"] = "level1"
    path = tmp_path / "c1-zero-memory.yaml"
    path.write_text(yaml.safe_dump(scenario))
    with pytest.raises(ExecutorError, match="moe_zero_memory with moe_tp_extend_ep"):
        build(make_plan(path), tmp_path)


def test_c1_rollout_batches_and_trainer(make_plan, build, as_dict, tmp_path: Path) -> None:
    o = as_dict(build(make_plan(), tmp_path).overrides)
    # plan: TP2 x DP128 over 256 dies, EP256 = one vLLM instance of 128 DP ranks
    assert (o[f"{R}.name"], o[f"{R}.tensor_model_parallel_size"], o[f"{R}.data_parallel_size"],
            o[f"{R}.expert_parallel_size"]) == ("vllm", "2", "128", "256")
    assert (o[f"{R}.max_num_seqs"], o[f"{R}.max_num_batched_tokens"], o[f"{R}.enable_chunked_prefill"]) == (
        "64", "1024", "true")
    assert (o[f"{R}.gpu_memory_utilization"], o[f"{R}.enforce_eager"], o[f"{R}.max_model_len"]) == (
        "0.8", "false", "4096")
    assert (o["data.train_batch_size"], o[f"{R}.n"], o[f"{A}.ppo_mini_batch_size"]) == ("512", "16", "512")
    assert (o[f"{A}.ppo_micro_batch_size_per_gpu"], o[f"{R}.log_prob_micro_batch_size_per_gpu"],
            o["actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu"]) == ("1", "8", "8")
    assert (o["data.max_prompt_length"], o["data.max_response_length"]) == ("1024", "3072")
    assert (o["trainer.nnodes"], o["trainer.n_gpus_per_node"], o["trainer.device"]) == ("16", "16", "npu")
    assert o["trainer.logger"] == "[console,file]"
    assert o[f"{ENV}.VERL_FILE_LOGGER_PATH"] == str(tmp_path / "metrics.jsonl")
    assert o["algorithm.adv_estimator"] == "grpo"


def test_c1_environment(make_plan, build, as_dict, tmp_path: Path) -> None:
    spec = build(make_plan(), tmp_path)
    env = spec.env
    expected = {"HCCL_OP_EXPANSION_MODE": "AIV", "TASK_QUEUE_ENABLE": "2", "HCCL_BUFFSIZE": "300",
                "HCCL_CONNECT_TIMEOUT": "600", "HCCL_EXEC_TIMEOUT": "600", "VLLM_USE_V1": "1",
                "VLLM_ENABLE_GRAPH_MODE": "1", "VLLM_ENABLE_MC2": "1", "CUDA_DEVICE_MAX_CONNECTIONS": "1",
                "PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True",
                "VERL_USE_EXTERNAL_MODULES": "executor.npu_opt.worker_hook"}
    assert {k: env[k] for k in expected} == expected
    rendered = as_dict(spec.overrides)
    for key, value in env.items():  # every variable also reaches Ray workers of an existing cluster
        assert rendered[f"{ENV}.{key}"] == hydra_value(value)


def _scenario(tmp_path: Path, kind: str, cards: int, train: dict, rollout: dict, model: str = "qwen2.5-7b") -> Path:
    body = {"schema": 1, "name": f"test-{kind}", "model": model, "cluster": {"kind": kind, "cards": cards},
            "workload": {"global_batch": 32, "n": 8, "prompt_len": {"mean": 512, "max": 1024},
                         "response_len": {"mean": 900, "max": 1024}},
            "layout": {"train": train, "rollout": rollout}, "optimizations": ["skip_old_log_prob"]}
    path = tmp_path / f"{kind}.yaml"
    path.write_text(yaml.safe_dump(body))
    return path


def test_fsdp_layout(make_plan, build, as_dict, tmp_path: Path) -> None:
    scenario = _scenario(tmp_path, "a2", 16, {"engine": "fsdp", "cp": 2, "micro_batch": 2,
                                              "recompute": {"granularity": "full"},
                                              "offload": {"param": True, "optimizer": "offload"}},
                         {"tp": 2, "dp": 8, "max_num_seqs": 128})
    o = as_dict(build(make_plan(scenario), tmp_path).overrides)
    assert o["model_engine"] == "dp"
    assert (o[f"{A}.fsdp_config.param_offload"], o[f"{A}.fsdp_config.optimizer_offload"]) == ("true", "true")
    assert o[f"{A}.fsdp_config.ulysses_sequence_parallel_size"] == "2"
    assert o["actor_rollout_ref.model.enable_gradient_checkpointing"] == "true"
    assert (o[f"{R}.tensor_model_parallel_size"], o[f"{R}.data_parallel_size"], o[f"{R}.expert_parallel_size"]) == (
        "2", "1", "1")  # no EP: each TP group is its own replica
    assert (o["trainer.nnodes"], o["trainer.n_gpus_per_node"]) == ("2", "8")
    assert not any(k.startswith(M) for k in o)


def test_dynamic_batching_budgets_reach_the_actor_and_the_log_prob_passes(make_plan, build, as_dict,
                                                                         tmp_path: Path) -> None:
    train = {"engine": "fsdp", "dynamic_batch_tokens": 3072}
    o = as_dict(build(make_plan(_scenario(tmp_path, "a2", 16, train, {"tp": 2, "dp": 8})), tmp_path).overrides)
    assert (o[f"{A}.use_dynamic_bsz"], o[f"{A}.ppo_max_token_len_per_gpu"]) == ("true", "3072")
    assert f"{R}.log_prob_max_token_len_per_gpu" not in o  # verl reads the actor's through oc.select
    train = {**train, "log_prob_dynamic_batch_tokens": 9216}  # the Moonlight nightly's 3 x (prompt + response)
    o = as_dict(build(make_plan(_scenario(tmp_path, "a2", 16, train, {"tp": 2, "dp": 8})), tmp_path).overrides)
    assert (o[f"{R}.log_prob_max_token_len_per_gpu"], o["actor_rollout_ref.ref.log_prob_max_token_len_per_gpu"],
            o[f"{A}.ppo_max_token_len_per_gpu"]) == ("9216", "9216", "3072")


def test_balance_batch_reaches_the_trainer_where_the_layout_states_it(make_plan, build, as_dict,
                                                                      tmp_path: Path) -> None:
    train = {"engine": "fsdp"}
    o = as_dict(build(make_plan(_scenario(tmp_path, "a2", 16, train, {"tp": 2, "dp": 8})), tmp_path).overrides)
    assert "trainer.balance_batch" not in o  # verl's default
    train = {**train, "balance_batch": False}  # as the Ascend recipes run
    o = as_dict(build(make_plan(_scenario(tmp_path, "a2", 16, train, {"tp": 2, "dp": 8})), tmp_path).overrides)
    assert o["trainer.balance_batch"] == "false"


@pytest.mark.parametrize(("padding", "expected"), [("none", None), ("micro_batch", ("false", "false")),
                                                  ("mini_batch", ("false", "true"))])
def test_padding_reaches_the_actor_and_reference_engines(make_plan, build, as_dict, tmp_path: Path, padding: str,
                                                         expected: tuple[str, str] | None) -> None:
    train = {"tp": 2, "padding": padding}
    o = as_dict(build(make_plan(_scenario(tmp_path, "a2", 16, train, {"tp": 2, "dp": 8})), tmp_path).overrides)
    for role in (A, "actor_rollout_ref.ref"):
        keys = (f"{role}.megatron.use_remove_padding", f"{role}.megatron.pad_bshd_to_minibatch_max")
        assert (None if keys[0] not in o else (o[keys[0]], o[keys[1]])) == expected  # none: verl's default, packed


def test_gpu_kind_uses_megatron_core_pipeline_fields(make_plan, build, as_dict, tmp_path: Path) -> None:
    train = {"tp": 2, "pp": 4, "pp_layers": [6, 7, 7, 8]}
    o = as_dict(build(make_plan(_scenario(tmp_path, "h100", 16, train, {"tp": 2, "dp": 8})), tmp_path).overrides)
    assert (o[f"+{TF}.num_layers_in_first_pipeline_stage"], o[f"+{TF}.num_layers_in_last_pipeline_stage"]) == (
        "6", "8")
    assert o["trainer.device"] == "cuda"


def test_cpu_optimizer_is_megatron_cores_hybrid_optimizer(make_plan, build, as_dict, tmp_path: Path) -> None:
    train = {"tp": 2, "pp": 2, "offload": {"param": True, "grad": True, "optimizer": "cpu"}}
    o = as_dict(build(make_plan(_scenario(tmp_path, "h100", 8, train, {"tp": 2, "dp": 4})), tmp_path).overrides)
    opt = f"+{A}.optim.override_optimizer_config"
    assert (o[f"{opt}.optimizer_cpu_offload"], o[f"{opt}.optimizer_offload_fraction"],
            o[f"{opt}.overlap_cpu_optimizer_d2h_h2d"], o[f"{opt}.use_precision_aware_optimizer"]) == (
        "true", "1.0", "true", "true")
    assert o[f"{M}.optimizer_offload"] == "false"  # the state never comes back to the device to be offloaded


def test_cpu_optimizer_is_refused_under_mindspeed(make_plan, build, tmp_path: Path) -> None:
    train = {"tp": 2, "pp": 2, "offload": {"param": True, "grad": True, "optimizer": "cpu"}}
    with pytest.raises(ExecutorError, match="on Ascend use the swap optimizer"):
        build(make_plan(_scenario(tmp_path, "a2", 8, train, {"tp": 2, "dp": 4})), tmp_path)


@pytest.mark.parametrize(("train", "message"), [
    ({"tp": 2, "pp": 4, "pp_layers": [6, 8, 6, 8]}, "Megatron core sets only the first and last"),
    ({"tp": 2, "offload": {"optimizer": "swap"}}, "the swap optimizer is a MindSpeed feature"),
    ({"engine": "fsdp", "offload": {"optimizer": "cpu"}}, "verl's FSDP engine offers optimizer offload"),
    ({"tp": 2, "offload": {"grad": True}}, "offload.grad without offload.param"),
])
def test_untranslatable_layouts_refused(make_plan, build, tmp_path: Path, train: dict, message: str) -> None:
    plan = make_plan(_scenario(tmp_path, "h100", 16, train, {"tp": 2, "dp": 8}))
    with pytest.raises(ExecutorError, match=message):
        build(plan, tmp_path)


@pytest.mark.parametrize(("value", "spelled"), [
    (True, "true"), (None, "null"), (3, "3"), (0.8, "0.8"), ("AIV", "AIV"), ("300", "'300'"),
    ("expandable_segments:True", "'expandable_segments:True'"), ("7,7,8", "'7,7,8'"), (["console", "file"],
                                                                                     "[console,file]"),
    ("/a b/c", "'/a b/c'"), ("it's", "'it\\'s'"), ("/w=1", "'/w=1'"), ("a\\b", "'a\\b'"), ("end\\", "'end\\\\'"),
    ("line\n", "'line\n'"),
])
def test_hydra_spelling(value, spelled: str) -> None:
    assert hydra_value(value) == spelled


@pytest.mark.parametrize("text", ["/runs/w=1", "/a b/c", "it's", "back\\slash", "end\\", "q\\'x", "a\\\\'b", "$x",
                                  "a,b", "[x]", "{x}", '"dq"', "nl\nx", "tab\tx", "é", "null", "1e5", "trailing\n",
                                  "#x", "%x"])
def test_hydra_values_read_back_unchanged_after_verl_resolves_its_config(text: str) -> None:
    from omegaconf import OmegaConf

    from executor.validate import apply_overrides

    cfg = apply_overrides(OmegaConf.create({"k": None}), [f"k={hydra_value(text)}"])
    OmegaConf.resolve(cfg)  # as verl's main_ppo does before its workers read the config
    assert OmegaConf.to_container(cfg, resolve=True)["k"] == text


def test_an_interpolation_cannot_be_passed_to_verl() -> None:
    with pytest.raises(ExecutorError, match=r"holds '\$\{', which verl's config would read as an interpolation"):
        hydra_value("/runs/${oc.env:HOME}")


def test_unknown_cluster_kind_has_no_target() -> None:
    from executor.targets import target_for

    with pytest.raises(ExecutorError, match="cluster kind 'tpu' has no launch target"):
        target_for("tpu")


@pytest.mark.parametrize(("optimizations", "software", "expected"), [
    ([], {}, "false"),  # the twin counts no rollout log-probs: the run returns none (verl 0.9.1 would)
    ([], {"rollout_log_probs": True}, "true"),
    (["skip_old_log_prob"], {}, "true"),  # bypass mode reuses them (set by that optimization)
])
def test_the_rollout_returns_log_probs_as_the_scenario_says(make_plan, build, as_dict, tmp_path: Path,
                                                            optimizations, software, expected) -> None:
    path = _scenario(tmp_path, "a2", 16, {"engine": "fsdp"}, {"tp": 2, "dp": 8})
    body = yaml.safe_load(path.read_text())
    body.update(optimizations=optimizations, software=software)
    path.write_text(yaml.safe_dump(body))
    o = as_dict(build(make_plan(path), tmp_path).overrides)
    assert o[f"{R}.calculate_log_probs"] == expected



def test_ppo_trains_a_critic_in_the_actors_fsdp_layout(make_plan, build, as_dict, tmp_path: Path) -> None:
    """C6's PPO nightly: GAE advantages, and the critic (from the actor's checkpoint) with the actor's FSDP sharding,
    Ulysses SP, offload and gradient checkpointing, and the actor's 16,384-token budget for its update and values."""
    o = as_dict(build(make_plan(PPO_NIGHTLY), tmp_path).overrides)
    assert (o["algorithm.adv_estimator"], o["critic.enable"]) == ("gae", "true")
    assert o["critic.model.path"] == o["actor_rollout_ref.model.path"] == "qwen3-8b"
    assert (o["critic.fsdp.param_offload"], o["critic.fsdp.optimizer_offload"],
            o["critic.fsdp.ulysses_sequence_parallel_size"], o["critic.model.enable_gradient_checkpointing"]) == (
        "true", "true", "2", "true")
    assert (o["critic.use_dynamic_bsz"], o["critic.ppo_max_token_len_per_gpu"],
            o["+critic.ppo_infer_max_token_len_per_gpu"]) == ("true", "16384", "16384")


def test_a_critic_under_fixed_micro_batches_keeps_verls_token_budgets(make_plan, build, as_dict,
                                                                       tmp_path: Path) -> None:
    """verl 0.9.1's critic engine packs by tokens whatever use_dynamic_bsz says: where the actor runs fixed
    micro-batches the critic runs at verl's 32,768-token defaults, which the executor writes as the twin costs them;
    under Megatron the critic takes the actor's parallel sizes and recompute, and no reference model shares them."""
    train = {"tp": 2, "pp": 2, "recompute": {"granularity": "full"}, "offload": {"param": True, "grad": True}}
    scenario = _scenario(tmp_path, "a2", 16, train, {"tp": 2, "dp": 8})
    o = as_dict(build(make_plan(scenario, algorithm="ppo"), tmp_path).overrides)
    assert (o["critic.use_dynamic_bsz"], o["critic.ppo_max_token_len_per_gpu"],
            o["+critic.ppo_infer_max_token_len_per_gpu"]) == ("true", "32768", "32768")
    assert o[f"{A}.use_dynamic_bsz"] == "false"
    assert (o["critic.megatron.tensor_model_parallel_size"], o["critic.megatron.pipeline_model_parallel_size"],
            o["critic.megatron.param_offload"]) == ("2", "2", "true")
    assert o["critic.megatron.override_transformer_config.recompute_granularity"] == "full"
    assert not any(k.startswith("critic.megatron") and "ref" in k for k in o)


@pytest.mark.parametrize("algorithm", ["grpo", "dapo"])
def test_grpo_and_dapo_launch_no_critic(make_plan, build, as_dict, tmp_path: Path, algorithm: str) -> None:
    o = as_dict(build(make_plan(algorithm=algorithm), tmp_path).overrides)
    assert o["algorithm.adv_estimator"] == "grpo"
    assert not any(k.lstrip("+").startswith("critic.") for k in o)


@pytest.mark.parametrize("algorithm", ["dapo", "ppo"])
def test_the_cpu_kind_refuses_what_its_launcher_does_not_run(make_plan, build, tmp_path: Path, algorithm: str) -> None:
    """executor/cpu/launch.py configures GRPO: a DAPO or PPO plan is refused before launch, not run as GRPO."""
    plan = make_plan(SCENARIOS / "cpu-tiny-grpo.yaml", algorithm=algorithm)
    with pytest.raises(ExecutorError, match=f"cluster kind cpu launches GRPO only .*not {algorithm.upper()}"):
        build(plan, tmp_path)
