"""Architecture description parsed from a HuggingFace config.json.

One normalised pydantic model covers the dense families (Llama, Qwen2/2.5, Qwen3) and the MoE families
(Qwen3-MoE, DeepSeek-V3/R1 with MLA). Shapes are never computed here: the tensor inventory does that.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from twin.errors import TwinError

AttentionKind = Literal["gqa", "mla"]

DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "float8_e4m3fn": 1}


class MlaDims(BaseModel):
    """Multi-head latent attention (DeepSeek-V2/V3) projection ranks."""

    model_config = ConfigDict(frozen=True)

    q_lora_rank: int | None = Field(default=None, ge=1)
    kv_lora_rank: int = Field(ge=1)
    qk_nope_head_dim: int = Field(ge=1)
    qk_rope_head_dim: int = Field(ge=1)
    v_head_dim: int = Field(ge=1)

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim


class MoeDims(BaseModel):
    """Mixture-of-experts block: routed experts, optional shared experts, which layers are sparse."""

    model_config = ConfigDict(frozen=True)

    num_experts: int = Field(ge=1)
    experts_per_token: int = Field(ge=1)
    expert_intermediate_size: int = Field(ge=1)
    shared_experts: int = Field(default=0, ge=0)
    router_bias: bool = False  # DeepSeek's e_score_correction_bias
    dense_layers: tuple[int, ...] = ()  # layer indices that keep a dense MLP

    @model_validator(mode="after")
    def _top_k_fits(self) -> MoeDims:
        if self.experts_per_token > self.num_experts:
            raise ValueError(
                f"num_experts_per_tok={self.experts_per_token} exceeds the {self.num_experts} experts"
            )
        return self


class ModelConfig(BaseModel):
    """What the twin needs to know about a transformer decoder."""

    model_config = ConfigDict(frozen=True)

    name: str
    model_type: str
    hidden_size: int = Field(ge=1)
    num_layers: int = Field(ge=1)
    vocab_size: int = Field(ge=1)
    num_attention_heads: int = Field(ge=1)
    num_kv_heads: int = Field(ge=1)
    head_dim: int = Field(ge=1)
    intermediate_size: int = Field(ge=1)
    tie_word_embeddings: bool = False
    attention: AttentionKind = "gqa"
    qkv_bias: bool = False
    qk_norm: bool = False
    mla: MlaDims | None = None
    moe: MoeDims | None = None
    mtp_layers: int = Field(default=0, ge=0)
    max_position_embeddings: int = Field(default=4096, ge=1)
    dtype: str = "bfloat16"

    @model_validator(mode="after")
    def _consistent(self) -> ModelConfig:
        if self.num_attention_heads % self.num_kv_heads:
            raise ValueError(
                f"num_attention_heads={self.num_attention_heads} is not a multiple of "
                f"num_key_value_heads={self.num_kv_heads}"
            )
        if (self.attention == "mla") != (self.mla is not None):
            raise ValueError("MLA attention needs kv_lora_rank and the qk/v head dims")
        if self.dtype not in DTYPE_BYTES:
            raise ValueError(f"torch_dtype {self.dtype!r} is not one of {sorted(DTYPE_BYTES)}")
        return self

    @property
    def is_moe(self) -> bool:
        return self.moe is not None

    def is_moe_layer(self, layer: int) -> bool:
        """True when decoder layer `layer` (0-based; MTP layers follow the main ones) is sparse."""
        return self.moe is not None and layer not in self.moe.dense_layers

    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]


def _field(raw: dict[str, Any], key: str, *fallbacks: str) -> Any:
    for name in (key, *fallbacks):
        if name in raw and raw[name] is not None:
            return raw[name]
    raise TwinError(f"config.json: field '{key}' is missing (needed for model_type {raw.get('model_type')!r})")


def _dense_common(raw: dict[str, Any], name: str) -> dict[str, Any]:
    heads = _field(raw, "num_attention_heads")
    hidden = _field(raw, "hidden_size")
    kv_heads = raw.get("num_key_value_heads")
    kv_heads = heads if kv_heads is None else kv_heads  # absent: multi-head attention; 0 is refused, not replaced
    return {
        "name": name,
        "model_type": raw["model_type"],
        "hidden_size": hidden,
        "num_layers": _field(raw, "num_hidden_layers"),
        "vocab_size": _field(raw, "vocab_size"),
        "num_attention_heads": heads,
        "num_kv_heads": kv_heads,
        "head_dim": raw.get("head_dim") or hidden // heads,
        "intermediate_size": _field(raw, "intermediate_size"),
        "tie_word_embeddings": bool(raw.get("tie_word_embeddings", False)),
        "max_position_embeddings": raw.get("max_position_embeddings", 4096),
        "dtype": raw.get("torch_dtype") or raw.get("dtype") or "bfloat16",
    }


def _parse_llama(raw: dict[str, Any], name: str) -> dict[str, Any]:
    out = _dense_common(raw, name)
    out["qkv_bias"] = bool(raw.get("attention_bias", False))
    return out


def _parse_qwen2(raw: dict[str, Any], name: str) -> dict[str, Any]:
    out = _dense_common(raw, name)
    out["qkv_bias"] = True  # Qwen2/2.5 always carry q/k/v biases; the config has no field for it
    return out


def _parse_qwen3(raw: dict[str, Any], name: str) -> dict[str, Any]:
    out = _dense_common(raw, name)
    out["head_dim"] = _field(raw, "head_dim")
    out["qkv_bias"] = bool(raw.get("attention_bias", False))
    out["qk_norm"] = True
    return out


def _parse_qwen3_moe(raw: dict[str, Any], name: str) -> dict[str, Any]:
    out = _parse_qwen3(raw, name)
    layers = out["num_layers"]
    step = raw.get("decoder_sparse_step", 1) or 1
    mlp_only = set(raw.get("mlp_only_layers") or [])
    dense = tuple(i for i in range(layers) if i in mlp_only or (i + 1) % step != 0)
    out["moe"] = {
        # transformers 5 writes Qwen3-MoE's expert count as num_local_experts (its Qwen3MoeConfig attribute map)
        "num_experts": _field(raw, "num_experts", "num_local_experts"),
        "experts_per_token": _field(raw, "num_experts_per_tok"),
        "expert_intermediate_size": _field(raw, "moe_intermediate_size"),
        "dense_layers": dense,
    }
    return out


def _parse_deepseek(raw: dict[str, Any], name: str) -> dict[str, Any]:
    out = _dense_common(raw, name)
    mla = {
        "q_lora_rank": raw.get("q_lora_rank"),
        "kv_lora_rank": _field(raw, "kv_lora_rank"),
        "qk_nope_head_dim": _field(raw, "qk_nope_head_dim"),
        "qk_rope_head_dim": _field(raw, "qk_rope_head_dim"),
        "v_head_dim": _field(raw, "v_head_dim"),
    }
    out.update(
        attention="mla",
        mla=mla,
        num_kv_heads=out["num_attention_heads"],
        head_dim=mla["qk_nope_head_dim"] + mla["qk_rope_head_dim"],
    )
    layers = out["num_layers"]
    first_dense = raw.get("first_k_dense_replace", 0) or 0
    freq = raw.get("moe_layer_freq", 1) or 1
    dense = tuple(i for i in range(layers) if i < first_dense or i % freq != 0)
    out["moe"] = {
        "num_experts": _field(raw, "n_routed_experts"),
        "experts_per_token": _field(raw, "num_experts_per_tok"),
        "expert_intermediate_size": _field(raw, "moe_intermediate_size"),
        "shared_experts": raw.get("n_shared_experts") or 0,
        "router_bias": raw.get("topk_method", "noaux_tc") == "noaux_tc",
        "dense_layers": dense,
    }
    out["mtp_layers"] = raw.get("num_nextn_predict_layers", 0) or 0
    return out


_PARSERS = {
    "llama": _parse_llama,
    "mistral": _parse_llama,
    "qwen2": _parse_qwen2,
    "qwen3": _parse_qwen3,
    "qwen3_moe": _parse_qwen3_moe,
    "deepseek_v3": _parse_deepseek,
}

SUPPORTED_MODEL_TYPES = tuple(sorted(_PARSERS))


# Integer fields of config.json: (least, most). The most is far beyond every published model (largest known:
# 126 layers, hidden 16384, intermediate 53248 (Llama-3.1-405B); 256 routed experts, vocab 129280
# (DeepSeek-V3); 128 heads) and keeps every shape product inside a C long; zero is a count only where
# "none" has a meaning (shared experts, dense first layers, MTP layers).
INT_DOMAINS = {
    "hidden_size": (1, 1 << 20), "num_hidden_layers": (1, 4096), "vocab_size": (1, 1 << 24),
    "num_attention_heads": (1, 4096), "num_key_value_heads": (1, 4096), "head_dim": (1, 1 << 14),
    "intermediate_size": (1, 1 << 22), "moe_intermediate_size": (1, 1 << 22), "num_experts": (1, 1 << 16),
    "num_local_experts": (1, 1 << 16),
    "n_routed_experts": (1, 1 << 16), "num_experts_per_tok": (1, 1 << 16), "n_shared_experts": (0, 1 << 10),
    "kv_lora_rank": (1, 1 << 16), "q_lora_rank": (1, 1 << 16), "qk_nope_head_dim": (1, 1 << 14),
    "qk_rope_head_dim": (1, 1 << 14), "v_head_dim": (1, 1 << 14), "first_k_dense_replace": (0, 4096),
    "moe_layer_freq": (1, 4096), "decoder_sparse_step": (1, 4096), "num_nextn_predict_layers": (0, 64),
    "max_position_embeddings": (1, 1 << 24),
}


def _check_numbers(raw: dict[str, Any], name: str) -> None:
    """Refuse an integer field that is not an integer or lies outside its domain (before any arithmetic)."""
    for key, (lo, hi) in INT_DOMAINS.items():
        value = raw.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            raise TwinError(f"config.json of {name}: field '{key}' is {value!r}; expected an integer")
        if not lo <= value <= hi:
            raise TwinError(f"config.json of {name}: field '{key}' = {value} is outside {lo}..{hi:,} (no "
                            "transformer the twin can describe has such a value)")


def parse_config(raw: Any, name: str) -> ModelConfig:
    """Normalise a HuggingFace config.json dict; raises TwinError naming the field and the reason."""
    if not isinstance(raw, dict):
        raise TwinError(f"config.json of {name}: expected a JSON object, got {type(raw).__name__}")
    model_type = raw.get("model_type")
    if not isinstance(model_type, str) or model_type not in _PARSERS:
        raise TwinError(
            f"config.json of {name}: model_type {model_type!r} is not supported "
            f"(supported: {', '.join(SUPPORTED_MODEL_TYPES)})"
        )
    _check_numbers(raw, name)
    fields = _PARSERS[model_type](raw, name)
    try:
        return ModelConfig.model_validate(fields)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "config"
        raise TwinError(f"config.json of {name}: field '{where}': {err['msg']}") from None
