"""The rollout server: a Ray actor holding a transformers model that serves verl's token-in/token-out API.

One server per rollout replica. Requests run one at a time on the host (KV-cached sampling in a worker
thread, so the actor's event loop keeps answering control calls). The server has no device memory and
keeps no KV cache between requests, so verl's sleep / wake-up / KV-cache calls have nothing to free.
"""

from __future__ import annotations

import asyncio
from typing import Any

import torch
from verl.utils.config import omega_conf_to_dataclass
from verl.workers.config import HFModelConfig, RolloutConfig
from verl.workers.rollout.replica import TokenOutput

from executor.cpu.sampling import Generation, SamplingParams, generate

_DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16}


def _eos_token_ids(model_config: HFModelConfig) -> list[int]:
    """End-of-sequence ids from the generation config, else from the tokenizer."""
    eos = getattr(model_config.generation_config, "eos_token_id", None)
    if eos is None:
        eos = model_config.tokenizer.eos_token_id
    if eos is None:
        return []
    return [int(e) for e in eos] if isinstance(eos, (list, tuple)) else [int(eos)]


class TransformersServer:
    """Ray actor: `generate` plus the control methods verl's RolloutReplica calls on its servers."""

    def __init__(self, config: Any, model_config: Any, replica_rank: int) -> None:
        from transformers import AutoModelForCausalLM

        self.config: RolloutConfig = omega_conf_to_dataclass(config, dataclass_type=RolloutConfig)
        self.model_config: HFModelConfig = omega_conf_to_dataclass(model_config, dataclass_type=HFModelConfig)
        self.replica_rank = replica_rank
        if self.config.dtype not in _DTYPES:
            raise ValueError(f"rollout dtype {self.config.dtype!r} is not one of {sorted(_DTYPES)}")
        dtype = _DTYPES[self.config.dtype]
        hf_config = self.model_config.hf_config
        if self.config.load_format == "dummy":
            # random weights: the trainer's first weight sync (before step 1) replaces them
            self.model = AutoModelForCausalLM.from_config(hf_config, dtype=dtype)
        else:
            self.model = AutoModelForCausalLM.from_pretrained(
                self.model_config.local_path, config=hf_config, dtype=dtype
            )
        self.model.eval()
        self.max_model_len = self.config.max_model_len or (self.config.prompt_length + self.config.response_length)
        self.eos_token_ids = _eos_token_ids(self.model_config)
        self.generator = torch.Generator().manual_seed(self.config.seed + replica_rank)
        self.global_steps = 0
        self._lock = asyncio.Lock()
        self._inflight: set[str] = set()
        self._drained = asyncio.Event()
        self._drained.set()
        self._gate = asyncio.Event()
        self._gate.set()
        self._reject = False
        self._abort_epoch = 0
        self._aborted: set[str] = set()

    def sampling_params(self, prompt_len: int, sampling_params: dict[str, Any]) -> SamplingParams:
        """verl's sampling-params dict -> SamplingParams; unknown or unsupported keys are errors."""
        params = dict(sampling_params)
        room = self.max_model_len - prompt_len
        if room < 1:
            raise ValueError(f"prompt of {prompt_len} tokens leaves no room within max_model_len {self.max_model_len}")
        max_tokens = params.pop("max_tokens", None)
        max_new_tokens = params.pop("max_new_tokens", None)
        if max_tokens is None:
            max_tokens = max_new_tokens
        if max_tokens is None:
            max_tokens = min(
                self.config.response_length, self.config.prompt_length + self.config.response_length - prompt_len
            )
        repetition_penalty = params.pop("repetition_penalty", 1.0)
        if repetition_penalty != 1.0:
            raise ValueError(f"repetition_penalty={repetition_penalty} is not supported by the transformers rollout")
        known = {"temperature", "top_k", "top_p", "logprobs", "ignore_eos"}
        unknown = sorted(set(params) - known)
        if unknown:
            raise ValueError(f"unsupported sampling params for the transformers rollout: {unknown}")
        return SamplingParams(
            max_new_tokens=max(1, min(int(max_tokens), room)),
            temperature=float(params.get("temperature", 1.0)),
            top_k=int(params.get("top_k", -1)),
            top_p=float(params.get("top_p", 1.0)),
            logprobs=bool(params.get("logprobs", False)),
            ignore_eos=bool(params.get("ignore_eos", self.config.ignore_eos)),
        )

    async def generate(
        self,
        prompt_ids: list[int],
        sampling_params: dict[str, Any],
        request_id: str,
        image_data: Any = None,
        video_data: Any = None,
        audio_data: Any = None,
        mm_processor_kwargs: dict[str, Any] | None = None,
    ) -> TokenOutput:
        """Sample one response for `prompt_ids` (text only)."""
        if mm_processor_kwargs or any(data is not None for data in (image_data, video_data, audio_data)):
            raise ValueError("the transformers rollout serves text only")
        prompt = [int(t) for t in prompt_ids]
        params = self.sampling_params(len(prompt), sampling_params)
        if not self._gate.is_set():
            if self._reject:
                return self._output(Generation([], None, "aborted"))
            await self._gate.wait()
        self._inflight.add(request_id)
        self._drained.clear()
        epoch = self._abort_epoch
        try:
            async with self._lock:
                generation = await asyncio.to_thread(
                    generate,
                    self.model,
                    prompt,
                    params,
                    self.eos_token_ids,
                    self.generator,
                    lambda: self._abort_epoch != epoch or request_id in self._aborted,
                )
        finally:
            self._inflight.discard(request_id)
            self._aborted.discard(request_id)
            if not self._inflight:
                self._drained.set()
        return self._output(generation)

    def _output(self, generation: Generation) -> TokenOutput:
        stop_reason = "aborted" if generation.finish_reason == "aborted" else "completed"
        return TokenOutput(
            token_ids=generation.token_ids,
            log_probs=generation.log_probs,
            stop_reason=stop_reason,
            extra_fields={"global_steps": self.global_steps},
        )

    async def load_weights(self, named_tensors: dict[str, torch.Tensor]) -> None:
        """Replace every weight of the model (all names must match the model's state dict)."""
        async with self._lock:
            expected = set(self.model.state_dict())
            missing, unexpected = sorted(expected - set(named_tensors)), sorted(set(named_tensors) - expected)
            if missing or unexpected:
                raise ValueError(f"weight sync mismatch: missing {missing[:5]}, unexpected {unexpected[:5]}")
            self.model.load_state_dict(named_tensors, strict=True)

    async def set_global_steps(self, global_steps: int) -> None:
        self.global_steps = global_steps

    async def abort_all_requests(self, reject_request: bool = False) -> dict[str, Any]:
        """Stop every running or queued request (it returns what it has, marked aborted) and hold new ones
        until `resume_generation`, or fail them at once when `reject_request`."""
        self._gate.clear()
        self._reject = reject_request
        self._abort_epoch += 1
        return {"aborted_count": len(self._inflight), "request_ids": sorted(self._inflight)}

    async def abort_request(self, request_id: str) -> dict[str, Any]:
        """Stop one request if it is running or queued here."""
        if request_id not in self._inflight:
            return {"aborted_count": 0, "request_ids": []}
        self._aborted.add(request_id)
        return {"aborted_count": 1, "request_ids": [request_id]}

    async def resume_generation(self) -> None:
        self._reject = False
        self._gate.set()

    async def wait_for_requests_to_drain(self) -> None:
        await self._drained.wait()

    async def wake_up(self, tags: list[str] | None = None) -> None:
        """Nothing to restore: weights stay in host memory and no KV cache outlives a request."""

    async def sleep(self) -> None:
        """Nothing to free: see `wake_up`."""

    async def clear_kv_cache(self) -> None:
        """No KV cache is kept between requests."""

    async def release_kv_cache(self) -> None:
        """No KV cache is kept between requests."""

    async def resume_kv_cache(self) -> None:
        """No KV cache is kept between requests."""

    async def start_profile(self, **kwargs: Any) -> None:
        raise NotImplementedError("profiling is not supported by the transformers rollout")

    async def stop_profile(self) -> None:
        raise NotImplementedError("profiling is not supported by the transformers rollout")
