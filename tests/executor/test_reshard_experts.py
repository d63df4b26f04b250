"""Routed experts between the checkpoint's one-by-one tensors, the twin's fused tensors, and vLLM's FusedMoE.

Exact blocks, written by hand from the layouts: experts stacked along dimension 0, gate rows before up rows.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from executor.reshard.blocks import as_bytes
from executor.reshard.experts import fuse_shards, fuse_tensors, fused_place, split_shapes, split_tensors
from executor.reshard.vllm_blocks import BlockLoadError, load_blocks, module_blocks

P = "model.layers.0.mlp.experts"
E, INTER, HIDDEN = 4, 2, 3


def _fused() -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    return {f"{P}.gate_up_proj": torch.randn(E, 2 * INTER, HIDDEN, generator=gen).to(torch.bfloat16),
            f"{P}.down_proj": torch.randn(E, HIDDEN, INTER, generator=gen).to(torch.bfloat16),
            "model.norm.weight": torch.randn(HIDDEN, generator=gen)}


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and as_bytes(a.contiguous()).equal(as_bytes(b.contiguous()))


def test_split_and_fuse_are_inverse_bit_for_bit() -> None:
    fused = _fused()
    hf = split_tensors(fused)
    assert len(hf) == 3 * E + 1 and hf["model.norm.weight"] is fused["model.norm.weight"]
    assert _same(hf[f"{P}.2.up_proj.weight"], fused[f"{P}.gate_up_proj"][2, INTER:])
    assert _same(hf[f"{P}.3.down_proj.weight"], fused[f"{P}.down_proj"][3])
    back = fuse_tensors(hf)
    assert set(back) == set(fused) and all(_same(back[n], fused[n]) for n in fused)


def test_the_checkpoints_expert_shapes_follow_from_the_fused_shapes() -> None:
    fused = {n: tuple(x.shape) for n, x in _fused().items()}
    assert split_shapes(fused) == {n: tuple(x.shape) for n, x in split_tensors(_fused()).items() if "experts" in n}
    assert split_shapes(fused)[f"{P}.3.up_proj.weight"] == (INTER, HIDDEN)
    assert split_shapes(fused)[f"{P}.0.down_proj.weight"] == (HIDDEN, INTER)


def test_an_up_projection_sits_after_the_gate_rows() -> None:
    shapes = {n: tuple(x.shape) for n, x in split_tensors(_fused()).items()}
    assert fused_place(f"{P}.1.up_proj.weight", shapes) == (f"{P}.gate_up_proj", 1, INTER)
    assert fused_place(f"{P}.1.gate_proj.weight", shapes) == (f"{P}.gate_up_proj", 1, 0)
    assert fused_place(f"{P}.3.down_proj.weight", shapes) == (f"{P}.down_proj", 3, 0)
    assert fused_place("model.layers.0.mlp.gate.weight", shapes) is None


def _shards(experts: list[int], rows: tuple[int, int]) -> dict[str, dict]:
    """An engine's per-expert shards: rows `rows` of each expert's gate and up, and the matching columns of down."""
    hf = split_tensors(_fused())
    r0, r1 = rows
    out = {}
    for e in experts:
        for proj in ("gate_proj", "up_proj"):
            out[f"{P}.{e}.{proj}.weight"] = {((r0, r1), (0, HIDDEN)): hf[f"{P}.{e}.{proj}.weight"][r0:r1]}
        out[f"{P}.{e}.down_proj.weight"] = {((0, HIDDEN), (r0, r1)): hf[f"{P}.{e}.down_proj.weight"][:, r0:r1]}
    return out


def test_whole_consecutive_experts_become_one_fused_block() -> None:
    shapes = {n: tuple(x.shape) for n, x in split_tensors(_fused()).items()}
    fused = fuse_shards(_shards([2, 3], (0, INTER)), shapes)
    full = _fused()
    assert list(fused[f"{P}.gate_up_proj"]) == [((2, 4), (0, 4), (0, 3))]  # gate rows 0-1 and up rows 2-3 joined
    assert list(fused[f"{P}.down_proj"]) == [((2, 4), (0, 3), (0, 2))]
    assert _same(fused[f"{P}.gate_up_proj"][((2, 4), (0, 4), (0, 3))], full[f"{P}.gate_up_proj"][2:4])
    assert _same(fused[f"{P}.down_proj"][((2, 4), (0, 3), (0, 2))], full[f"{P}.down_proj"][2:4])


def test_expert_tp_halves_keep_gate_and_up_apart() -> None:
    # expert TP2, rank 1: row 1 of gate (fused row 1) and of up (fused row 3); down's column 1
    shapes = {n: tuple(x.shape) for n, x in split_tensors(_fused()).items()}
    fused = fuse_shards(_shards([0, 1], (1, 2)), shapes)
    assert sorted(fused[f"{P}.gate_up_proj"]) == [((0, 2), (1, 2), (0, 3)), ((0, 2), (3, 4), (0, 3))]
    assert list(fused[f"{P}.down_proj"]) == [((0, 2), (0, 3), (1, 2))]
    full = _fused()
    assert _same(fused[f"{P}.gate_up_proj"][((0, 2), (3, 4), (0, 3))], full[f"{P}.gate_up_proj"][0:2, 3:4])


def test_experts_that_are_not_consecutive_stay_separate_blocks() -> None:
    shapes = {n: tuple(x.shape) for n, x in split_tensors(_fused()).items()}
    fused = fuse_shards(_shards([0, 2], (0, INTER)), shapes)
    assert sorted(fused[f"{P}.down_proj"]) == [((0, 1), (0, 3), (0, 2)), ((2, 3), (0, 3), (0, 2))]


class RoutedExperts(torch.nn.Module):
    """What executor/reshard/vllm_blocks.py reads of vLLM's RoutedExperts (fused_moe/routed_experts.py)."""

    def __init__(self, expert_map: list[int] | None, local: int, tp_size: int = 1) -> None:
        super().__init__()
        self.w13_weight = torch.nn.Parameter(torch.zeros(local, 2 * INTER, HIDDEN, dtype=torch.bfloat16))
        self.w2_weight = torch.nn.Parameter(torch.zeros(local, HIDDEN, INTER, dtype=torch.bfloat16))
        self.intermediate_size_per_partition = INTER
        self.expert_map = None if expert_map is None else torch.tensor(expert_map, dtype=torch.int32)
        self.moe_config = SimpleNamespace(moe_parallel_config=SimpleNamespace(tp_size=tp_size))


def test_vllms_local_experts_are_the_blocks_its_expert_map_names() -> None:
    held = module_blocks(f"{P}.routed_experts", RoutedExperts([-1, -1, 0, 1], 2), {})
    assert {n: b for n, (b, _) in held.items()} == {f"{P}.gate_up_proj": [[2, 4], [0, 4], [0, 3]],
                                                   f"{P}.down_proj": [[2, 4], [0, 3], [0, 2]]}
    everything = module_blocks(f"{P}.routed_experts", RoutedExperts(None, E), {})
    assert everything[f"{P}.down_proj"][0] == [[0, 4], [0, 3], [0, 2]]


@pytest.mark.parametrize(("expert_map", "tp_size"), [([0, -1, 1, -1], 1), ([-1, -1, 1, 0], 1), ([0, 1, -1, -1], 2)])
def test_experts_vllm_holds_out_of_order_or_tp_split_are_not_claimed(expert_map: list[int], tp_size: int) -> None:
    assert module_blocks(f"{P}.routed_experts", RoutedExperts(expert_map, 2, tp_size), {}) == {}


def test_received_expert_blocks_load_into_vllms_w13_and_w2() -> None:
    model = torch.nn.Module()
    model.experts = torch.nn.Module()  # the MoE runner, which holds no parameter itself
    model.experts.routed_experts = local = RoutedExperts([-1, -1, 0, 1], 2)
    full = _fused()
    blocks = [("experts.gate_up_proj", ((2, 4), (0, 4), (0, 3)), full[f"{P}.gate_up_proj"][2:4].contiguous()),
              ("experts.down_proj", ((2, 4), (0, 3), (0, 2)), full[f"{P}.down_proj"][2:4].contiguous())]
    assert load_blocks(model, {}, blocks) == 2
    assert _same(local.w13_weight.detach(), full[f"{P}.gate_up_proj"][2:4])
    assert _same(local.w2_weight.detach(), full[f"{P}.down_proj"][2:4])
    with pytest.raises(BlockLoadError, match=r"experts.down_proj block \(\(0, 2\)"):  # experts rank 0 holds
        load_blocks(model, {}, [("experts.down_proj", ((0, 2), (0, 3), (0, 2)), full[f"{P}.down_proj"][0:2])])
