"""The batch a captured decode graph runs: the smallest captured size that holds the step's sequences.

An engine in graph mode replays the graph captured for the smallest batch size at least as large as the step's
sequences, its empty slots padded; with data parallelism every DP rank of an engine runs the size of the rank with
the most sequences (its dispatch and combine need one shape on all ranks). Sources:
- vLLM-Ascend TorchAir (vllm_ascend/torchair/torchair_model_runner.py: `_generate_extra_builder_kwargs` takes the
  largest token count over the DP ranks, `_select_torchair_padded_batch_size` the smallest captured size that holds
  it, else max_num_seqs). The Ascend RL recipes capture either one size, max_num_seqs (cann-recipes-train
  docs/deepseek/deepseek_rl_train_optimization.md, the additional_config it passes: "graph_batch_sizes":
  [max_num_seqs]; MindSpeed-RL vllm_engine.py alike), or with their multi-shape compilation max_num_seqs and every
  size of RolloutRebalanceConfig.graph_batch_sizes below it (cann-recipes-train llm_rl/qwen3/verl-mindspeed/patches/
  verl/features/rollout_optimize/config.py: 128, 64, 48, 32, 16, 8, 4).
- vLLM on CUDA (vllm/config/vllm.py `_set_cudagraph_sizes`, 0.32: the default capture list 1, 2, 4, every multiple
  of 8 below 256, then every multiple of 16, up to twice max_num_seqs and at most 512; a larger batch runs
  uncaptured, unpadded).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from twin.hardware.specs import RolloutEngine
from twin.layout.models import RolloutLayout

RECIPE_GEARS = (4, 8, 16, 32, 48, 64, 128)  # rollout_optimize/config.py graph_batch_sizes, below max_num_seqs
VLLM_SMALL_SIZES = (1, 2, 4)
VLLM_FINE_STRIDE, VLLM_COARSE_FROM, VLLM_COARSE_STRIDE = 8, 256, 16  # multiples of 8 below 256, of 16 from it
VLLM_MAX_CAPTURE = 512


def capture_sizes(ro: RolloutLayout, engine: RolloutEngine) -> np.ndarray:
    """The batch sizes the engine captured decode graphs for, ascending (empty in eager mode)."""
    if not ro.graph_mode:
        return np.zeros(0)
    if ro.graph_shapes == "single":
        return np.array([float(ro.max_num_seqs)])
    if engine == "vllm-ascend":
        return np.array([float(g) for g in RECIPE_GEARS if g < ro.max_num_seqs] + [float(ro.max_num_seqs)])
    top = min(2 * ro.max_num_seqs, VLLM_MAX_CAPTURE)
    fine = range(VLLM_FINE_STRIDE, min(top + 1, VLLM_COARSE_FROM), VLLM_FINE_STRIDE)
    coarse = range(VLLM_COARSE_FROM, top + 1, VLLM_COARSE_STRIDE)
    return np.array([s for s in VLLM_SMALL_SIZES if s <= top] + [*fine, *coarse], dtype=float)


def graph_rows(sizes: np.ndarray, batch: ArrayLike) -> ArrayLike:
    """Rows a decode step of `batch` sequences (the most on any DP rank of the engine) runs through the captured
    graphs of `sizes`: the smallest size that holds them; the batch itself where none does (uncaptured) or in eager
    mode (no sizes)."""
    batch = np.asarray(batch, dtype=float)
    if sizes.size == 0:
        return batch
    index = np.searchsorted(sizes, batch, side="left")
    padded = sizes[np.minimum(index, sizes.size - 1)]
    return np.where(index < sizes.size, padded, batch)
