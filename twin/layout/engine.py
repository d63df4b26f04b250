"""What the rollout engine decides by itself about a layout: where it keeps an MoE's shared experts.

vLLM runs an MoE layer sequence-parallel when expert parallelism spans several data-parallel engines of TP > 1
(vllm 0.32 vllm/config/parallel.py ParallelConfig.use_sequence_parallel_moe: EP on, TP > 1, DP > 1 and an
all-to-all backend among them, the default allgather_reducescatter included); each rank then runs the shared
experts on its own tokens and builds them with `disable_tp`, whole (model_executor/models/deepseek_v2.py
DeepseekV2MoE; qwen2_moe.py Qwen2MoeMLP likewise). In a twin rollout layout EP spans `ep` devices, `ep / tp`
engines, so that is EP > TP > 1.

vLLM-Ascend switches the sequence-parallel MoE off: its platform sets the all-to-all backend to
flashinfer_all2allv unless the SP compilation pass is on (vllm_ascend/platform.py check_and_update_config,
v0.11.0 to v0.25.1rc1), and its 0.9.x DeepSeek model splits the shared experts over TP unless TorchAir's
multistream MoE or the eager prefill optimisations are on (v0.9.1rc2 vllm_ascend/models/deepseek_v2.py
CustomDeepseekV2MoE). The executor sets neither, nor `enable_shared_expert_dp` (v0.10.1rc1+), which would keep
them whole too: on vLLM-Ascend they are split over TP.
"""

from __future__ import annotations

from twin.catalog.config import ModelConfig
from twin.hardware.specs import RolloutEngine
from twin.layout.models import Layout, RolloutLayout


def shared_experts_whole(lay: RolloutLayout, cfg: ModelConfig, engine: RolloutEngine) -> bool:
    """Whether `engine` keeps the model's shared experts whole on every rank of this rollout layout."""
    if cfg.moe is None or not cfg.moe.shared_experts:
        return False
    return engine == "vllm" and lay.ep > lay.tp > 1


def rollout_as_engine_builds(ro: RolloutLayout, cfg: ModelConfig, engine: RolloutEngine) -> RolloutLayout:
    """`ro` with what the rollout engine decides set as it decides it."""
    whole = shared_experts_whole(ro, cfg, engine)
    return ro if whole == ro.shared_experts_whole else ro.model_copy(update={"shared_experts_whole": whole})


def as_engine_builds(lay: Layout, cfg: ModelConfig, engine: RolloutEngine) -> Layout:
    """`lay` with its rollout as the rollout engine builds it."""
    rollout = rollout_as_engine_builds(lay.rollout, cfg, engine)
    return lay if rollout is lay.rollout else lay.model_copy(update={"rollout": rollout})
