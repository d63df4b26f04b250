"""The captured decode graph sizes and the rows a step runs (twin/cost_models/graph_shapes.py), by hand."""

import numpy as np
import pytest

from twin.cost_models.graph_shapes import capture_sizes, graph_rows
from twin.layout.models import RolloutLayout


def test_the_recipes_torchair_gears_below_max_num_seqs():
    # RolloutRebalanceConfig's 4, 8, 16, 32, 48, 64, 128 below max_num_seqs 256, then 256 itself
    sizes = capture_sizes(RolloutLayout(max_num_seqs=256), "vllm-ascend")
    assert list(sizes) == [4, 8, 16, 32, 48, 64, 128, 256]
    assert list(graph_rows(sizes, np.array([1.0, 4.0, 5.0, 33.0, 49.0, 129.0, 256.0]))) == [4, 4, 8, 48, 64, 256, 256]
    assert list(capture_sizes(RolloutLayout(max_num_seqs=40), "vllm-ascend")) == [4, 8, 16, 32, 40]


def test_vllms_default_capture_list():
    # 1, 2, 4, multiples of 8 below 256, multiples of 16 from 256, up to twice max_num_seqs (at most 512)
    small = capture_sizes(RolloutLayout(max_num_seqs=20), "vllm")
    assert list(small) == [1, 2, 4, 8, 16, 24, 32, 40]
    large = capture_sizes(RolloutLayout(max_num_seqs=400), "vllm")
    assert (len(large), large[-1], list(large[33:36])) == (3 + 31 + 17, 512, [248, 256, 272])
    assert float(graph_rows(small, 5.0)) == 8.0 and float(graph_rows(large, 257.0)) == 272.0
    assert float(graph_rows(large, 600.0)) == 600.0  # beyond the largest captured size: uncaptured, unpadded


@pytest.mark.parametrize("engine", ["vllm", "vllm-ascend"])
def test_one_shape_pads_to_max_num_seqs_and_eager_mode_pads_nothing(engine: str):
    single = capture_sizes(RolloutLayout(max_num_seqs=64, graph_shapes="single"), engine)
    assert list(single) == [64] and float(graph_rows(single, 3.0)) == 64.0
    eager = capture_sizes(RolloutLayout(graph_mode=False), engine)
    assert eager.size == 0 and float(graph_rows(eager, 3.0)) == 3.0
