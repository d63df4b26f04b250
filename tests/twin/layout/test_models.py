"""The layout models' own derivations."""

import pytest
from pydantic import ValidationError

from twin.layout import TrainLayout
from twin.layout.models import VERL_CRITIC_TOKENS, RolloutLayout


def test_a_critic_packs_by_tokens_at_the_layouts_budgets_else_at_verls_defaults():
    """verl 0.9.1's critic engine always packs micro-batches by tokens: at the layout's update and log-prob budgets
    where it has them, else at verl's critic defaults (32,768 a device)."""
    assert VERL_CRITIC_TOKENS == 32768
    fixed = TrainLayout(engine="fsdp", micro_batch=2).for_critic()
    assert (fixed.dynamic_batch_tokens, fixed.token_budget(forward_only=True)) == (32768, 32768)
    packed = TrainLayout(engine="fsdp", dynamic_batch_tokens=3072).for_critic()
    assert (packed.dynamic_batch_tokens, packed.token_budget(forward_only=True)) == (3072, 3072)
    split = TrainLayout(engine="fsdp", dynamic_batch_tokens=3072, log_prob_dynamic_batch_tokens=9216).for_critic()
    assert (split.dynamic_batch_tokens, split.token_budget(forward_only=True)) == (3072, 9216)
    assert split.model_copy(update={"dynamic_batch_tokens": None, "log_prob_dynamic_batch_tokens": None}) == \
        TrainLayout(engine="fsdp")  # nothing else changes


def test_a_single_captured_shape_needs_graph_mode() -> None:
    with pytest.raises(ValidationError, match="graph_shapes 'single' describes captured decode graphs"):
        RolloutLayout(graph_mode=False, graph_shapes="single")


def test_padding_is_megatrons_and_the_critic_packs():
    """verl's FSDP actor without use_remove_padding pads to the configured limits, which the twin does not model: one
    clear error; a critic packs whatever the actor does (its use_remove_padding is its own, verl's default on)."""
    with pytest.raises(ValidationError, match="padding 'micro_batch' is Megatron's"):
        TrainLayout(engine="fsdp", padding="micro_batch")
    assert TrainLayout(tp=2, padding="mini_batch").for_critic().padding == "none"
