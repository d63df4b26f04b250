"""skip_old_log_prob: on-policy GRPO reuses the rollout's log-probs instead of a second actor forward.

verl 0.9 removed `actor.recompute_old_log_prob`; the same effect is `algorithm.rollout_correction.bypass_mode`
(the trainer copies `rollout_log_probs` into `old_log_probs`, trainer/ppo/v1/trainer_base.py
PPOTrainer._compute_old_log_prob) with the rollout returning its log-probs (`rollout.calculate_log_probs`).
"""

from __future__ import annotations

from executor.npu_opt.base import ApplyContext, Availability, Optimization
from executor.npu_opt.host import HostEnv, class_fields, method_source


class SkipOldLogProb(Optimization):
    id = "skip_old_log_prob"
    mechanism = "native"

    def detect(self, host: HostEnv) -> Availability:
        algo = host.verl_source("trainer/config/algorithm.py")
        rollout = host.verl_source("workers/config/rollout.py")
        trainer = host.verl_source("trainer/ppo/v1/trainer_base.py")
        if algo is None or rollout is None or trainer is None:
            return self.availability(False, "verl's algorithm/rollout config or V1 trainer source not found")
        if "bypass_mode" not in class_fields(algo, "RolloutCorrectionConfig"):
            return self.availability(False, "installed verl has no algorithm.rollout_correction.bypass_mode")
        if "calculate_log_probs" not in class_fields(rollout, "RolloutConfig"):
            return self.availability(False, "installed verl has no rollout.calculate_log_probs")
        body = method_source(trainer, "PPOTrainer", "_compute_old_log_prob") or ""
        if "bypass_mode" not in body:
            return self.availability(False, "installed verl's trainer does not read bypass_mode")
        return self.availability(True, "verl reuses rollout log-probs when rollout_correction.bypass_mode=True")

    def apply_config(self, ctx: ApplyContext) -> str:
        ctx.overrides.set("algorithm.rollout_correction.bypass_mode", True)
        ctx.overrides.set("actor_rollout_ref.rollout.calculate_log_probs", True)
        return "bypass_mode=True, rollout.calculate_log_probs=True"


OPTIMIZATION = SkipOldLogProb()
