"""Workload -> batch sizes in verl's units, lengths and the algorithm's settings (GRPO, DAPO, or PPO with its critic).

verl counts `data.train_batch_size` and `actor.ppo_mini_batch_size` in prompts (the trainer multiplies by
`rollout.n`, trainer/ppo/v1/trainer_base.py `_update_actor`) and micro-batches in sequences per device.
"""

from __future__ import annotations

from executor.verl_config.overrides import OverrideSet
from twin.layout.models import TrainLayout
from twin.scenario import Scenario

ARR = "actor_rollout_ref"
CRITIC = "critic"


def workload_overrides(o: OverrideSet, scenario: Scenario) -> None:
    w = scenario.workload
    train = scenario.layout.train if scenario.layout else None
    micro = train.micro_batch if train else 1
    log_prob_micro = train.log_prob_micro_batch if train else 1
    # PPO: GAE advantages, which make verl train a critic (trainer/ppo/utils.py need_critic)
    o.set("algorithm.adv_estimator", "gae" if w.has_critic else "grpo")
    o.set("data.train_batch_size", w.global_batch)
    o.set("data.max_prompt_length", w.prompt_len.max)
    o.set("data.max_response_length", w.response_len.max)
    o.set(f"{ARR}.rollout.n", w.n)
    o.set(f"{ARR}.actor.ppo_mini_batch_size", w.mini_batch or w.global_batch)
    o.set(f"{ARR}.actor.ppo_epochs", w.ppo_epochs)
    # verl use_dynamic_bsz where the layout packs micro-batches by tokens (the budget: verl_config.train)
    o.set(f"{ARR}.actor.use_dynamic_bsz", bool(train and train.dynamic_batch_tokens is not None))
    o.set(f"{ARR}.actor.ppo_micro_batch_size_per_gpu", micro)
    o.set(f"{ARR}.rollout.log_prob_micro_batch_size_per_gpu", log_prob_micro)
    o.set(f"{ARR}.ref.log_prob_micro_batch_size_per_gpu", log_prob_micro)
    o.set(f"{ARR}.actor.use_kl_loss", w.use_kl_loss)
    if not scenario.has("skip_old_log_prob"):  # that optimization needs them (npu_opt/skip_old_log_prob.py)
        # whether the rollout returns its log-probs, as the twin counts the driver's comparison of them (verl 0.9.1
        # defaults to returning them)
        o.set(f"{ARR}.rollout.calculate_log_probs", scenario.software.rollout_log_probs)
    if w.algorithm == "dapo":
        # DAPO: dynamic sampling (group filtering) and clip-higher, token-level loss
        o.set("algorithm.filter_groups.enable", True)
        o.set(f"{ARR}.actor.clip_ratio_high", 0.28)
        o.set(f"{ARR}.actor.loss_agg_mode", "token-mean")
    if w.has_critic and train is not None:
        o.set(f"{CRITIC}.enable", True)
        _critic_batches(o, train)


def _critic_batches(o: OverrideSet, train: TrainLayout) -> None:
    """PPO's critic's micro-batches as the twin costs them (TrainLayout.for_critic): verl 0.9.1's critic engine packs
    them by tokens whatever `use_dynamic_bsz` says, at these budgets (its values pass at the CriticConfig field
    ppo_infer_max_token_len_per_gpu, which verl's yaml does not list)."""
    critic = train.for_critic()
    o.set(f"{CRITIC}.use_dynamic_bsz", True)
    o.set(f"{CRITIC}.ppo_max_token_len_per_gpu", critic.dynamic_batch_tokens)
    o.set(f"{CRITIC}.ppo_infer_max_token_len_per_gpu", critic.token_budget(forward_only=True), add=True)
