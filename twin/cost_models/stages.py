"""The one assembly of a step's worker-side stage times from the cost models, shared by the closed form
(twin.evaluate), the planner's screen (twin.planner) and, stage by stage, the simulation (twin.sim)."""

from __future__ import annotations

from twin.cost_models.host_pages import returned_page_seconds
from twin.cost_models.scheduling import Call, collect_seconds, dispatch_seconds, framework_seconds
from twin.cost_models.training import TrainCost
from twin.profile import Profile
from twin.scenario import Scenario


def train_stage_seconds(sc: Scenario, pf: Profile, tc: TrainCost) -> dict[str, float]:
    """old_log_prob, ref and update seconds (and PPO's values and update_critic, the critic's passes): each pass's
    pipeline time with the driver's dispatch before it and its collection after it, and verl's framework terms where
    the profile carries them (the update's call and per-response terms; bypass-mode old_log_prob is its copy alone)
    and the first touches of host-returned pages (twin.cost_models.host_pages), as the step simulation adds them."""
    lay, devices = tc.lay, tc.devices

    def driver(call: Call) -> float:
        return dispatch_seconds(sc, pf, lay, devices, call) + collect_seconds(sc, pf, call)

    log_prob = tc.log_prob_time()
    responses = sc.workload.responses
    bypass = framework_seconds(pf, "old_log_prob", responses)  # bypass mode: the rollout's log-probs copied
    pages = returned_page_seconds(sc, pf, tc.mem)
    # the update's framework terms (update_actor's call around its passes) stand for the critic's update too: verl's
    # update_critic takes the same path through its worker (a dispatched batch, the mini-batch loop, metrics)
    update_framework = framework_seconds(pf, "update", responses)
    out = {
        "old_log_prob": bypass if sc.has("skip_old_log_prob")
        else log_prob + driver("old_log_prob") + pages.get("old_log_prob", 0.0),
        "ref": log_prob + driver("ref") + pages.get("ref", 0.0) if sc.workload.use_kl_loss else 0.0,
        "update": tc.update_time() + driver("update") + update_framework + pages.get("update", 0.0),
    }
    critic = tc.value_model
    if critic is not None:
        out["values"] = critic.log_prob_time() + driver("values") + pages.get("values", 0.0)
        out["update_critic"] = (critic.update_time() + driver("update_critic") + update_framework
                                + pages.get("update_critic", 0.0))
    return out
