"""The stage that a run's own timers report each transition in.

verl's trainer has no offload timer: each worker call moves its own state on entering and leaving it (the Megatron
and FSDP workers load and offload around compute_log_prob, compute_ref_log_prob and update_actor; 0.9.1's
workers/engine/base.py BaseEngineCtx), so those seconds are in that call's timer. The rollout's sleep is in `gen`
(v0.6.0 experimental/agent_loop/agent_loop.py AgentLoopManager.generate_sequences; 0.9.1
trainer/ppo/v1/trainer_colocate_async.py on_sample_end). The weight sync and the offloads around it are in `gen`
before 0.8, the wake-up that opens generate_sequences (the same v0.6.0 method; the rollout sharding manager's entry
before it), and in `update_weights` from 0.8 (`Software.syncs_through_server`, which times it on its own). A run
that `Software.timed_by_verl` does not cover keeps the twin's split: offloads and the sync as stages of their own.
"""

from __future__ import annotations

from collections.abc import Mapping

from twin.scenario import Software

SYNC = "the weight sync's timer"
# the offload moments (twin.cost_models.transition.OFFLOAD_MOMENTS) each trainer call makes: (on entering, on leaving)
CALL_MOMENTS = {
    "old_log_prob": ("log_prob_onload", "log_prob_offload"),
    "ref": ("ref_onload", "ref_offload"),
    "values": ("values_onload", "values_offload"),
    "update_critic": ("before_update_critic", "after_update_critic"),
    "update": ("before_update", "after_update"),
}
# every offload moment by the verl timer that holds it
MOMENT_TIMERS = {"after_rollout": "rollout", "before_reshard": SYNC, "after_reshard": SYNC,
                 **{moment: call for call, moments in CALL_MOMENTS.items() for moment in moments}}
# the verl timer of each stage a moment can move into
VERL_TIMERS = {"rollout": "gen", "reshard": "update_weights"}


def sync_timer(software: Software) -> str:
    """The stage whose timer holds the weight sync where verl times the run: `reshard` (update_weights) from 0.8,
    `rollout` (gen) before."""
    return "reshard" if software.syncs_through_server else "rollout"


def as_timed(stages: Mapping[str, float], moments: Mapping[str, float], software: Software) -> dict[str, float]:
    """`stages` (the twin's split: `offload` the sum of `moments`, the offload moments the step made, and `reshard`
    the sync) as the run's timers report them: unchanged unless verl times the run, else each moment's seconds in
    its call's timer, none left in `offload`, and the sync in `sync_timer`'s."""
    out = dict(stages)
    if not software.timed_by_verl:
        return out
    sync = sync_timer(software)
    for moment, seconds in moments.items():
        if seconds:
            timer = MOMENT_TIMERS[moment]
            out[sync if timer == SYNC else timer] += seconds
    out["offload"] = 0.0  # verl has no offload timer: every moment is in the timer of the call that made it
    if sync != "reshard":
        out[sync] += out["reshard"]
        out["reshard"] = 0.0
    return out


def timed_note(stages: Mapping[str, float], timed: Mapping[str, float], software: Software) -> str | None:
    """One line naming what verl's timers hold beyond the twin's split, or None where nothing moved."""
    moved = {k: timed[k] - stages[k] for k in timed if k not in ("offload", "reshard") and timed[k] - stages[k] > 1e-9}
    if not moved:
        return None
    held = ", ".join(f"{k} +{v:.2f} s" for k, v in moved.items())
    return (f"stages as verl {software.verl}'s timers report them: each call's offloads in its own timer, the weight "
            f"sync ({stages['reshard']:.2f} s) and its offloads in {VERL_TIMERS[sync_timer(software)]} ({held})")
