"""The rollout server without Ray: generate, log-probs, weight sync, abort, sampling-param checks."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import torch


@pytest.fixture(scope="module")
def configs(tiny_model: Path):
    from verl.workers.config import HFModelConfig, RolloutConfig

    model_config = HFModelConfig(path=str(tiny_model), override_config={"attn_implementation": "sdpa"})
    rollout_config = RolloutConfig(
        name="transformers",
        dtype="float32",
        prompt_length=64,
        response_length=16,
        tensor_model_parallel_size=1,
        load_format="dummy",
        seed=7,
    )
    return rollout_config, model_config


@pytest.fixture
def server(configs):
    from executor.cpu.rollout_server import TransformersServer

    return TransformersServer(configs[0], configs[1], replica_rank=0)


def _trained_weights(tiny_model: Path) -> dict[str, torch.Tensor]:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_model).state_dict()


def _full_forward_log_probs(model, prompt: list[int], tokens: list[int]) -> list[float]:
    with torch.no_grad():
        logits = model(torch.tensor([prompt + tokens])).logits[0].float()
    full = torch.log_softmax(logits, dim=-1)
    return [float(full[len(prompt) - 1 + i, t]) for i, t in enumerate(tokens)]


def test_generate_returns_verl_token_output_with_matching_log_probs(server, tiny_model: Path) -> None:
    from transformers import AutoModelForCausalLM

    asyncio.run(server.load_weights(_trained_weights(tiny_model)))
    asyncio.run(server.set_global_steps(3))
    prompt = [1, 20, 30, 40, 2, 201]
    out = asyncio.run(
        server.generate(
            prompt, {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": True}, "r1"
        )
    )
    assert 1 <= len(out.token_ids) <= 16 and len(out.log_probs) == len(out.token_ids)
    assert out.stop_reason == "completed" and out.extra_fields["global_steps"] == 3
    reference = AutoModelForCausalLM.from_pretrained(tiny_model, attn_implementation="sdpa").eval()
    expected = _full_forward_log_probs(reference, prompt, out.token_ids)
    assert max(abs(a - b) for a, b in zip(out.log_probs, expected, strict=True)) < 1e-5


def test_dummy_weights_differ_until_synced(server, tiny_model: Path) -> None:
    trained = _trained_weights(tiny_model)
    name = "model.embed_tokens.weight"
    assert not torch.equal(server.model.state_dict()[name], trained[name])
    asyncio.run(server.load_weights(trained))
    assert torch.equal(server.model.state_dict()[name], trained[name])


def test_weight_sync_rejects_missing_or_unknown_names(server, tiny_model: Path) -> None:
    weights = _trained_weights(tiny_model)
    weights.pop("lm_head.weight")
    with pytest.raises(ValueError, match="missing"):
        asyncio.run(server.load_weights(weights))
    with pytest.raises(ValueError, match="unexpected"):
        asyncio.run(server.load_weights({**_trained_weights(tiny_model), "extra.weight": torch.zeros(1)}))


def test_max_tokens_defaults_to_the_response_length_and_respects_the_context(server) -> None:
    assert server.sampling_params(10, {}).max_new_tokens == 16
    assert server.sampling_params(10, {"max_tokens": 4}).max_new_tokens == 4
    assert server.sampling_params(75, {"max_new_tokens": 50}).max_new_tokens == 5  # 80-token context


@pytest.mark.parametrize("params", [{"repetition_penalty": 1.2}, {"beam_width": 2}])
def test_unsupported_sampling_params_are_errors(server, params) -> None:
    with pytest.raises(ValueError):
        server.sampling_params(4, params)


def test_multimodal_input_is_an_error(server) -> None:
    with pytest.raises(ValueError, match="text only"):
        asyncio.run(server.generate([1, 2], {}, "r", image_data=[object()]))


def test_abort_all_requests_rejects_or_holds_new_requests(server) -> None:
    async def scenario():
        await server.abort_all_requests(reject_request=True)
        rejected = await server.generate([1, 2, 3], {"logprobs": True}, "r-rejected")
        await server.abort_all_requests(reject_request=False)
        held = asyncio.create_task(server.generate([1, 2, 3], {"max_tokens": 2}, "r-held"))
        await asyncio.sleep(0.05)
        assert not held.done()
        await server.resume_generation()
        released = await held
        await server.wait_for_requests_to_drain()
        return rejected, released

    rejected, released = asyncio.run(scenario())
    assert rejected.stop_reason == "aborted" and rejected.token_ids == []
    assert released.stop_reason == "completed" and len(released.token_ids) == 2
