"""Constraints that verl (or vLLM / Megatron inside verl's workers) only asserts once workers start.

Each check reads the composed config and returns one message per violation, naming where it would fail.
"""

from __future__ import annotations

from collections.abc import Callable

from omegaconf import DictConfig

Check = Callable[[DictConfig], list[str]]

_WORKERS = "verl/workers/engine_workers.py"


def _n_gpus(cfg: DictConfig) -> int:
    return cfg.trainer.n_gpus_per_node * cfg.trainer.nnodes


def _actor_dp(cfg: DictConfig) -> int:
    actor = cfg.actor_rollout_ref.actor
    if actor.strategy == "megatron":
        m = actor.megatron
        return _n_gpus(cfg) // (m.tensor_model_parallel_size * m.pipeline_model_parallel_size
                                * m.context_parallel_size)
    return _n_gpus(cfg) // actor.fsdp_config.ulysses_sequence_parallel_size


def dynamic_bsz_agrees(cfg: DictConfig) -> list[str]:
    actor, rollout = cfg.actor_rollout_ref.actor, cfg.actor_rollout_ref.rollout
    if actor.use_dynamic_bsz != rollout.log_prob_use_dynamic_bsz:
        return [f"actor.use_dynamic_bsz={actor.use_dynamic_bsz} differs from rollout.log_prob_use_dynamic_bsz="
                f"{rollout.log_prob_use_dynamic_bsz} (asserted in {_WORKERS} ActorRolloutRefWorker.init_model)"]
    return []


def micro_batches_set(cfg: DictConfig) -> list[str]:
    arr = cfg.actor_rollout_ref
    if arr.actor.use_dynamic_bsz:
        return []
    keys = {"actor.ppo_micro_batch_size_per_gpu": arr.actor.ppo_micro_batch_size_per_gpu,
            "rollout.log_prob_micro_batch_size_per_gpu": arr.rollout.log_prob_micro_batch_size_per_gpu}
    return [f"{k} must be set without dynamic batch sizes (asserted in {_WORKERS} init_model)"
            for k, v in keys.items() if v is None]


def mini_batch_divides_dp(cfg: DictConfig) -> list[str]:
    arr = cfg.actor_rollout_ref
    sequences = arr.actor.ppo_mini_batch_size * arr.rollout.n
    dp = _actor_dp(cfg)
    if dp and sequences % dp:
        return [f"ppo_mini_batch_size x rollout.n = {sequences} sequences is not divisible by the actor's data-"
                f"parallel size {dp} (asserted in {_WORKERS} TrainingWorker.train_mini_batch)"]
    return []


def megatron_groups_divide(cfg: DictConfig) -> list[str]:
    actor = cfg.actor_rollout_ref.actor
    if actor.strategy != "megatron":
        return []
    m, n = actor.megatron, _n_gpus(cfg)
    etp = m.expert_tensor_parallel_size or m.tensor_model_parallel_size
    problems = []
    dense = m.tensor_model_parallel_size * m.pipeline_model_parallel_size * m.context_parallel_size
    if n % dense:
        problems.append(f"{n} devices are not divisible by TP x PP x CP = {dense} (Megatron "
                        "initialize_model_parallel)")
    expert = m.expert_model_parallel_size * etp * m.pipeline_model_parallel_size
    if n % expert:
        problems.append(f"{n} devices are not divisible by EP x ETP x PP = {expert} (Megatron "
                        "initialize_model_parallel)")
    return problems


def pipeline_split(cfg: DictConfig) -> list[str]:
    actor = cfg.actor_rollout_ref.actor
    if actor.strategy != "megatron":
        return []
    m = actor.megatron
    layer_list = m.override_transformer_config.get("num_layer_list")
    if layer_list is None:
        return []
    stages = str(layer_list).split(",")
    problems = []
    if len(stages) != m.pipeline_model_parallel_size:
        problems.append(f"num_layer_list has {len(stages)} stages for PP={m.pipeline_model_parallel_size} (MindSpeed)")
    if m.virtual_pipeline_model_parallel_size:
        problems.append("MindSpeed's num_layer_list cannot be combined with a virtual pipeline (VPP)")
    return problems


def rollout_world_divides(cfg: DictConfig) -> list[str]:
    r, n = cfg.actor_rollout_ref.rollout, _n_gpus(cfg)
    replica = r.tensor_model_parallel_size * r.data_parallel_size * r.pipeline_model_parallel_size
    problems = []
    if n % replica:
        problems.append(f"{n} devices are not divisible by the rollout replica size TP x DP x PP = {replica} "
                        f"(asserted in {_WORKERS} init_model)")
    per_node = cfg.trainer.n_gpus_per_node
    if replica % min(per_node, replica):
        problems.append(f"rollout replica size {replica} is not a multiple of {per_node} devices per node "
                        "(asserted in verl/workers/rollout/replica.py RolloutReplica.__init__)")
    if r.data_parallel_size > 1:
        if per_node % r.tensor_model_parallel_size:
            problems.append(f"rollout TP{r.tensor_model_parallel_size} does not divide {per_node} devices per node "
                            "(asserted in vllm_async_server.py vLLMHttpServer.launch_server for DP > 1)")
        if replica < per_node:
            problems.append(f"a rollout replica with DP > 1 must span whole nodes: {replica} < {per_node} devices "
                            "(asserted in vllm_async_server.py vLLMHttpServer.launch_server)")
    return problems


def vllm_scheduler(cfg: DictConfig) -> list[str]:
    r = cfg.actor_rollout_ref.rollout
    problems = []
    if r.max_num_batched_tokens < r.max_num_seqs:
        problems.append(f"max_num_batched_tokens {r.max_num_batched_tokens} < max_num_seqs {r.max_num_seqs} "
                        "(vLLM SchedulerConfig rejects it)")
    if r.max_model_len is not None:
        if not r.enable_chunked_prefill and r.max_num_batched_tokens < r.max_model_len:
            problems.append(f"without chunked prefill max_num_batched_tokens {r.max_num_batched_tokens} must be "
                            f">= max_model_len {r.max_model_len} (vLLM SchedulerConfig rejects it)")
        needed = cfg.data.max_prompt_length + cfg.data.max_response_length
        if r.max_model_len < needed:
            problems.append(f"rollout.max_model_len {r.max_model_len} < max prompt + response {needed}: long "
                            "responses are cut short (vllm_async_server.py vLLMHttpServer.generate caps max_tokens)")
    return problems


def bypass_needs_rollout_log_probs(cfg: DictConfig) -> list[str]:
    corr = cfg.algorithm.get("rollout_correction")
    if corr is not None and corr.get("bypass_mode") and not cfg.actor_rollout_ref.rollout.calculate_log_probs:
        return ["algorithm.rollout_correction.bypass_mode needs rollout.calculate_log_probs=True (verl/trainer/"
                "ppo/rollout_corr_helper.py apply_bypass_mode requires rollout_log_probs)"]
    return []


CHECKS: tuple[Check, ...] = (dynamic_bsz_agrees, micro_batches_set, mini_batch_divides_dp, megatron_groups_divide,
                             pipeline_split, rollout_world_divides, vllm_scheduler, bypass_needs_rollout_log_probs)


def late_problems(cfg: DictConfig) -> list[str]:
    return [problem for check in CHECKS for problem in check(cfg)]
