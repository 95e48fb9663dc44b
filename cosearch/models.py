"""Transformer model configurations and published presets.

A :class:`ModelConfig` holds the hyper-parameters that decide the cost of
training a decoder (or encoder) transformer: layer count, hidden size, heads
(with grouped-query attention through ``kv_heads``), MLP width, vocabulary,
sequence length, MLP activation (gated or not), norm type and the byte width of
the training dtype.  :func:`preset` returns the published configurations of
BERT, GPT-2, GPT-3, OPT and Llama 2.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

__all__ = ["ModelConfig", "preset", "preset_names", "PRESETS"]

_ACTIVATIONS = ("gelu", "relu", "swiglu", "geglu")
_NORMS = ("layernorm", "rmsnorm")
_POSITIONS = ("learned", "rotary", "none")


def _positive_int(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"ModelConfig.{name} must be a positive integer, got {value!r}")


@dataclass(frozen=True)
class ModelConfig:
    """Hyper-parameters of a transformer language model.

    Attributes
    ----------
    name: label used in reports.
    num_layers: number of transformer blocks.
    hidden: model width ``d_model``.
    heads: attention (query) heads; must divide ``hidden``.
    kv_heads: key/value heads (``heads`` for multi-head attention, fewer for GQA).
    ffn_hidden: inner width of the MLP.
    vocab: vocabulary size.
    seq_len: training sequence length in tokens.
    activation: ``gelu``/``relu`` (2-matrix MLP) or ``swiglu``/``geglu`` (gated, 3 matrices).
    norm: ``layernorm`` (scale+bias) or ``rmsnorm`` (scale only).
    position: ``learned`` absolute embeddings, ``rotary`` (RoPE) or ``none``.
    bias: whether linear layers carry biases.
    tie_embeddings: whether the LM head reuses the token-embedding matrix.
    dropout: whether the training graph contains dropout ops.
    dtype_bytes: bytes per element of activations/weights in the compute dtype.
    extra_params: parameters outside the blocks and embeddings (e.g. BERT's pooler,
        token-type embeddings); counted in :meth:`num_params`.
    """

    name: str
    num_layers: int
    hidden: int
    heads: int
    ffn_hidden: int
    vocab: int
    seq_len: int
    kv_heads: int | None = None
    activation: str = "gelu"
    norm: str = "layernorm"
    position: str = "learned"
    bias: bool = True
    tie_embeddings: bool = True
    dropout: bool = True
    dtype_bytes: int = 2
    extra_params: int = 0

    def __post_init__(self) -> None:
        if self.kv_heads is None:
            object.__setattr__(self, "kv_heads", self.heads)
        for f in ("num_layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab", "seq_len",
                  "dtype_bytes"):
            _positive_int(f, getattr(self, f))
        if self.extra_params < 0:
            raise ValueError(f"ModelConfig.extra_params must be >= 0, got {self.extra_params!r}")
        if self.hidden % self.heads:
            raise ValueError(
                f"ModelConfig.heads={self.heads} must divide hidden={self.hidden}"
            )
        if self.heads % self.kv_heads:
            raise ValueError(
                f"ModelConfig.kv_heads={self.kv_heads} must divide heads={self.heads}"
            )
        if self.activation not in _ACTIVATIONS:
            raise ValueError(f"ModelConfig.activation={self.activation!r}; choose one of {_ACTIVATIONS}")
        if self.norm not in _NORMS:
            raise ValueError(f"ModelConfig.norm={self.norm!r}; choose one of {_NORMS}")
        if self.position not in _POSITIONS:
            raise ValueError(f"ModelConfig.position={self.position!r}; choose one of {_POSITIONS}")

    # ------------------------------------------------------------------ derived sizes
    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def kv_dim(self) -> int:
        """Width of the K (or V) projection output: ``kv_heads * head_dim``."""
        return self.kv_heads * self.head_dim

    @property
    def gated(self) -> bool:
        return self.activation in ("swiglu", "geglu")

    def layer_params(self) -> int:
        """Parameters of one transformer block (attention + MLP + its two norms)."""
        h, f, kv = self.hidden, self.ffn_hidden, self.kv_dim
        attn = h * h + 2 * h * kv + h * h
        mlp = (3 if self.gated else 2) * h * f
        params = attn + mlp
        if self.bias:
            params += h + 2 * kv + h  # q, k, v, out biases
            params += (2 * f if self.gated else f) + h
        params += 2 * self.norm_params()
        return params

    def norm_params(self) -> int:
        return 2 * self.hidden if self.norm == "layernorm" else self.hidden

    def embedding_params(self) -> int:
        """Token (+ learned position) embeddings, the final norm and an untied LM head."""
        p = self.vocab * self.hidden
        if self.position == "learned":
            p += self.seq_len * self.hidden
        p += self.norm_params()
        if not self.tie_embeddings:
            p += self.vocab * self.hidden
        return p

    def num_params(self) -> int:
        """Total trainable parameters."""
        return self.num_layers * self.layer_params() + self.embedding_params() + self.extra_params

    def flops_per_token(self) -> float:
        """Training FLOPs per token (forward + backward, no recompute), 6N + attention."""
        attn = 12 * self.num_layers * self.hidden * self.seq_len  # 2*2*L*s*h fwd, x3 for fwd+bwd
        return 6.0 * (self.num_params() - self.extra_params) + attn

    def with_(self, **changes: Any) -> ModelConfig:
        """A copy with some fields replaced (validated again)."""
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    # ------------------------------------------------------------------ Hugging Face
    @classmethod
    def from_hf_config(cls, config: dict[str, Any], name: str | None = None,
                       seq_len: int | None = None, dtype_bytes: int = 2) -> ModelConfig:
        """Build a config from a Hugging Face ``config.json`` dictionary.

        Understands the field names of GPT-2 (``n_layer``, ``n_embd``, ``n_head``),
        BERT/OPT/Llama-style configs (``num_hidden_layers``, ``hidden_size``,
        ``num_attention_heads``, ``intermediate_size``/``ffn_dim``,
        ``num_key_value_heads``, ``max_position_embeddings``, ``hidden_act``).
        """
        if not isinstance(config, dict):
            raise ValueError(f"from_hf_config expects a dict (parsed config.json), got {type(config).__name__}")

        def pick(*keys: str, default: Any = None) -> Any:
            for k in keys:
                if k in config and config[k] is not None:
                    return config[k]
            return default

        layers = pick("num_hidden_layers", "n_layer", "num_layers")
        hidden = pick("hidden_size", "n_embd", "d_model")
        heads = pick("num_attention_heads", "n_head")
        missing = [k for k, v in (("num_hidden_layers", layers), ("hidden_size", hidden),
                                  ("num_attention_heads", heads)) if v is None]
        if missing:
            raise ValueError(f"from_hf_config: config is missing {missing}")
        ffn = pick("intermediate_size", "ffn_dim", "n_inner", default=None) or 4 * hidden
        vocab = pick("vocab_size")
        if vocab is None:
            raise ValueError("from_hf_config: config is missing 'vocab_size'")
        max_pos = pick("max_position_embeddings", "n_positions", "n_ctx", default=2048)
        model_type = str(pick("model_type", default="")).lower()
        act = str(pick("hidden_act", "activation_function", default="gelu")).lower()
        gated = model_type in ("llama", "mistral", "qwen2", "gemma") or act in ("silu", "swish")
        activation = "swiglu" if gated else ("relu" if act == "relu" else "gelu")
        rms = model_type in ("llama", "mistral", "qwen2", "gemma") or "rms_norm_eps" in config
        rotary = model_type in ("llama", "mistral", "qwen2", "gemma", "gpt_neox") or "rope_theta" in config
        extra = 0
        if model_type == "bert":
            extra = pick("type_vocab_size", default=2) * hidden + hidden * hidden + hidden
        tie = bool(pick("tie_word_embeddings", default=not gated))
        return cls(
            name=name or pick("_name_or_path", default=model_type or "hf-model"),
            num_layers=int(layers), hidden=int(hidden), heads=int(heads),
            kv_heads=int(pick("num_key_value_heads", default=heads)),
            ffn_hidden=int(ffn), vocab=int(vocab), seq_len=int(seq_len or max_pos),
            activation=activation, norm="rmsnorm" if rms else "layernorm",
            position="rotary" if rotary else "learned",
            bias=not gated and bool(pick("bias", "attention_bias", default=True)),
            tie_embeddings=tie, dropout=not gated, dtype_bytes=dtype_bytes,
            extra_params=int(extra),
        )


def _gpt3(name: str, layers: int, hidden: int, heads: int) -> ModelConfig:
    # Brown et al. 2020, Table 2.1; vocab 50257, context 2048, 4x MLP, learned positions.
    return ModelConfig(name, layers, hidden, heads, 4 * hidden, 50257, 2048)


def _opt(name: str, layers: int, hidden: int, heads: int) -> ModelConfig:
    # Zhang et al. 2022, Table 1; vocab 50272, context 2048 (+2 offset positions), ReLU MLP.
    return ModelConfig(name, layers, hidden, heads, 4 * hidden, 50272, 2048, activation="relu")


def _llama2(name: str, layers: int, hidden: int, heads: int, kv: int, ffn: int) -> ModelConfig:
    # Touvron et al. 2023 and the released config.json files: vocab 32000, context 4096,
    # SwiGLU, RMSNorm, RoPE, no biases, untied LM head, no dropout.
    return ModelConfig(name, layers, hidden, heads, ffn, 32000, 4096, kv_heads=kv,
                       activation="swiglu", norm="rmsnorm", position="rotary", bias=False,
                       tie_embeddings=False, dropout=False)


PRESETS: dict[str, ModelConfig] = {
    # Devlin et al. 2019: 24 layers, 1024 hidden, 16 heads; token-type embeddings + pooler.
    "bert-large": ModelConfig("bert-large", 24, 1024, 16, 4096, 30522, 512,
                              extra_params=2 * 1024 + 1024 * 1024 + 1024),
    # Radford et al. 2019: 48 layers, 1600 hidden, 25 heads, context 1024.
    "gpt2-xl": ModelConfig("gpt2-xl", 48, 1600, 25, 6400, 50257, 1024),
    "gpt3-1.3b": _gpt3("gpt3-1.3b", 24, 2048, 16),
    "gpt3-2.7b": _gpt3("gpt3-2.7b", 32, 2560, 32),
    "gpt3-6.7b": _gpt3("gpt3-6.7b", 32, 4096, 32),
    "gpt3-13b": _gpt3("gpt3-13b", 40, 5120, 40),
    "gpt3-175b": _gpt3("gpt3-175b", 96, 12288, 96),
    "opt-1.3b": _opt("opt-1.3b", 24, 2048, 32),
    "opt-6.7b": _opt("opt-6.7b", 32, 4096, 32),
    "opt-13b": _opt("opt-13b", 40, 5120, 40),
    "opt-30b": _opt("opt-30b", 48, 7168, 56),
    "opt-66b": _opt("opt-66b", 64, 9216, 72),
    "opt-175b": _opt("opt-175b", 96, 12288, 96),
    "llama2-7b": _llama2("llama2-7b", 32, 4096, 32, 32, 11008),
    "llama2-13b": _llama2("llama2-13b", 40, 5120, 40, 40, 13824),
    "llama2-70b": _llama2("llama2-70b", 80, 8192, 64, 8, 28672),
}


def preset_names() -> list[str]:
    """Names accepted by :func:`preset`."""
    return sorted(PRESETS)


def preset(name: str | ModelConfig) -> ModelConfig:
    """Return a published model configuration by name (case-insensitive)."""
    if isinstance(name, ModelConfig):
        return name
    key = str(name).lower().replace("_", "-")
    if key not in PRESETS:
        raise ValueError(f"unknown model preset {name!r}; known presets: {', '.join(preset_names())}")
    return PRESETS[key]
