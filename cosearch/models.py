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

__all__ = ["ModelConfig", "preset", "preset_names", "PRESETS", "from_hf_config", "HF_FAMILIES"]

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
    head_size: per-head width when it is not ``hidden / heads`` (Gemma-7B: 16 heads of 256
        on a 3,072-wide model); None = ``hidden / heads``.  Activation memory is still
        estimated from ``hidden`` (Korthikanti et al.'s formulas).
    norms_per_layer: 2 (pre-norm attention and MLP) or 1 (parallel attention/MLP blocks:
        GPT-J, Falcon-7B, Phi).
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
    head_size: int | None = None
    norms_per_layer: int = 2

    def __post_init__(self) -> None:
        if self.kv_heads is None:
            object.__setattr__(self, "kv_heads", self.heads)
        for f in ("num_layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab", "seq_len",
                  "dtype_bytes"):
            _positive_int(f, getattr(self, f))
        if self.extra_params < 0:
            raise ValueError(f"ModelConfig.extra_params must be >= 0, got {self.extra_params!r}")
        if self.head_size is not None:
            _positive_int("head_size", self.head_size)
        elif self.hidden % self.heads:
            raise ValueError(
                f"ModelConfig.heads={self.heads} must divide hidden={self.hidden} (or give head_size)"
            )
        if self.norms_per_layer not in (1, 2):
            raise ValueError(f"ModelConfig.norms_per_layer must be 1 or 2, got {self.norms_per_layer!r}")
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
        return self.head_size if self.head_size is not None else self.hidden // self.heads

    @property
    def q_dim(self) -> int:
        """Width of the Q projection output (and the attention output's input): ``heads * head_dim``."""
        return self.heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        """Width of the K (or V) projection output: ``kv_heads * head_dim``."""
        return self.kv_heads * self.head_dim

    @property
    def gated(self) -> bool:
        return self.activation in ("swiglu", "geglu")

    def layer_params(self) -> int:
        """Parameters of one transformer block (attention + MLP + its two norms)."""
        h, f, kv, q = self.hidden, self.ffn_hidden, self.kv_dim, self.q_dim
        attn = h * q + 2 * h * kv + q * h
        mlp = (3 if self.gated else 2) * h * f
        params = attn + mlp
        if self.bias:
            params += q + 2 * kv + h  # q, k, v, out biases
            params += (2 * f if self.gated else f) + h
        params += self.norms_per_layer * self.norm_params()
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
        """Build a config from a Hugging Face ``config.json`` dictionary (see
        :func:`from_hf_config`)."""
        return from_hf_config(config, name, seq_len, dtype_bytes)


#: Families :func:`from_hf_config` understands (``model_type``).
HF_FAMILIES = ("gpt2", "gptj", "gpt_neox", "opt", "bloom", "llama", "mistral", "qwen2", "falcon", "gemma",
               "phi", "bert")
#: Context lengths up to this are taken as the training sequence length when none is given.
PLAUSIBLE_TRAINING_CONTEXT = 8192
_MOE_KEYS = ("num_local_experts", "num_experts", "moe_num_experts", "n_routed_experts", "num_experts_per_tok")
_ENC_DEC = ("t5", "mt5", "bart", "mbart", "pegasus", "marian", "led", "longt5", "umt5", "whisper", "switch_transformers")


def _hf_int(config: dict, *keys: str, default: Any = None, required: bool = False) -> Any:
    for k in keys:
        if k in config and config[k] is not None:
            v = config[k]
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise ValueError(f"from_hf_config: {k!r} must be a positive integer, got {v!r}")
            return v
    if required:
        raise ValueError(f"from_hf_config: config is missing {keys[0]!r}"
                         + (f" (or {', '.join(map(repr, keys[1:]))})" if len(keys) > 1 else ""))
    return default


def from_hf_config(config: dict[str, Any], name: str | None = None, seq_len: int | None = None,
                   dtype_bytes: int = 2) -> ModelConfig:
    """A :class:`ModelConfig` from a Hugging Face ``config.json`` dictionary.

    Families (``model_type``): GPT-2, GPT-J, GPT-NeoX, OPT, BLOOM (ALiBi, embedding norm),
    Llama 2/3 (GQA), Mistral, Qwen2 (q/k/v biases), Falcon (multi-query or GQA, parallel
    attention), Gemma (``head_dim``, tied embeddings), Phi, BERT; other decoder configs with
    the usual field names are read the same way.  Mixture-of-experts configs (Mixtral,
    Qwen-MoE, ...) and encoder-decoder configs (T5, BART, ...) are refused with a message that
    says so.  Sizes must be integers.

    ``seq_len``: the training sequence length.  When None, the config's context length is
    used if it is at most :data:`PLAUSIBLE_TRAINING_CONTEXT` tokens (a warning says so);
    a longer context (Llama-3.1, Qwen2: 131,072) must be given explicitly.
    """
    import warnings

    if not isinstance(config, dict):
        raise ValueError(f"from_hf_config expects a dict (parsed config.json), got {type(config).__name__}")
    mt = str(config.get("model_type", "")).lower().replace("-", "_")
    if config.get("is_encoder_decoder") or mt in _ENC_DEC:
        raise ValueError(f"from_hf_config: {mt or 'this'} is an encoder-decoder model; cosearch models "
                         "decoder-only and encoder-only transformers")
    moe = [k for k in _MOE_KEYS if isinstance(config.get(k), int) and config[k] > 1]
    if moe or "moe" in mt:
        raise ValueError(f"from_hf_config: {mt or 'this model'} is a mixture-of-experts model ({', '.join(moe)}); "
                         "cosearch's cost model is dense and would mis-size it, so it is refused")
    layers = _hf_int(config, "num_hidden_layers", "n_layer", "num_layers", required=True)
    hidden = _hf_int(config, "hidden_size", "n_embd", "d_model", required=True)
    heads = _hf_int(config, "num_attention_heads", "n_head", "num_heads", required=True)
    vocab = _hf_int(config, "vocab_size", required=True)
    ffn = _hf_int(config, "intermediate_size", "ffn_dim", "n_inner", "ffn_hidden_size", default=4 * hidden)
    head_size = _hf_int(config, "head_dim", default=None)
    if head_size is not None and head_size * heads == hidden:
        head_size = None
    if mt == "falcon":
        if config.get("new_decoder_architecture"):
            kv = _hf_int(config, "num_kv_heads", "num_key_value_heads", default=heads)
        else:
            kv = 1 if config.get("multi_query", True) else heads
    else:
        kv = _hf_int(config, "num_key_value_heads", "num_kv_heads", default=None)
        if kv is None:
            kv = 1 if config.get("multi_query") else heads
    ctx = _hf_int(config, "max_position_embeddings", "n_positions", "n_ctx", "seq_length", default=None)
    if seq_len is None:
        if ctx is None:
            raise ValueError("from_hf_config: the config gives no context length; pass seq_len=")
        if ctx > PLAUSIBLE_TRAINING_CONTEXT:
            raise ValueError(f"from_hf_config: the config's context is {ctx:,} tokens, longer than a plausible "
                             f"training length (> {PLAUSIBLE_TRAINING_CONTEXT:,}); pass seq_len= (CLI --seq-len)")
        warnings.warn(f"from_hf_config: training sequence length not given; using the config's context "
                      f"length {ctx}", UserWarning, stacklevel=3)
        seq_len = ctx
    act = str(config.get("hidden_act") or config.get("activation_function") or config.get("hidden_activation")
              or "gelu").lower()
    gated = mt in ("llama", "mistral", "qwen2", "gemma") or act in ("silu", "swish")
    activation = ("geglu" if mt == "gemma" else "swiglu") if gated else ("relu" if act == "relu" else "gelu")
    rms = mt in ("llama", "mistral", "qwen2", "gemma") or "rms_norm_eps" in config
    if mt == "bloom" or config.get("alibi"):
        position = "none"
    elif mt in ("llama", "mistral", "qwen2", "gemma", "gpt_neox", "gptj", "falcon", "phi") or "rope_theta" in config:
        position = "rotary"
    else:
        position = "learned"
    if mt in ("llama", "mistral", "gemma"):
        bias = bool(config.get("attention_bias", False))
    elif mt == "falcon":
        bias = bool(config.get("bias", False))
    elif mt == "qwen2":
        bias = False            # only q/k/v carry biases: a few thousand parameters, left out
    else:
        bias = bool(config.get("bias", config.get("use_bias", True)))
    tie_default = mt in ("gpt2", "opt", "bloom", "bert", "gemma", "falcon") or not gated
    if mt in ("gptj", "gpt_neox", "phi"):
        tie_default = False
    tie = config.get("tie_word_embeddings", tie_default)
    if not isinstance(tie, bool):
        raise ValueError(f"from_hf_config: 'tie_word_embeddings' must be true or false, got {tie!r}")
    parallel = mt in ("gptj", "phi") or (mt == "falcon" and config.get("parallel_attn", True)
                                         and not config.get("new_decoder_architecture"))
    extra = 0
    if mt == "bert":
        extra = _hf_int(config, "type_vocab_size", default=2) * hidden + hidden * hidden + hidden
    if mt == "bloom":
        extra = 2 * hidden            # the layer norm on the word embeddings
    if mt == "opt" and position == "learned":
        extra = 2 * hidden            # OPT's learned positions carry a 2-row offset
    if mt in ("gptj", "phi") and not tie:
        extra += vocab                # lm_head bias
    learned_rows = ctx if (position == "learned" and ctx) else seq_len
    cfg = ModelConfig(
        name=name or str(config.get("_name_or_path") or mt or "hf-model"),
        num_layers=layers, hidden=hidden, heads=heads, kv_heads=kv, ffn_hidden=ffn, vocab=vocab,
        seq_len=int(seq_len), activation=activation, norm="rmsnorm" if rms else "layernorm",
        position=position, bias=bias, tie_embeddings=tie, dropout=not gated, dtype_bytes=dtype_bytes,
        extra_params=int(extra), head_size=head_size, norms_per_layer=1 if parallel else 2)
    if position == "learned" and learned_rows != seq_len:
        # the position table holds the config's context, whatever length is trained on
        cfg = cfg.with_(extra_params=cfg.extra_params + (learned_rows - seq_len) * hidden) \
            if learned_rows > seq_len else cfg
    return cfg


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
    # Shoeybi et al. 2019 (Megatron-LM), Table 2 / PHAZE's model: 72 layers, 3072 hidden, 24
    # heads, context 1024, vocab padded to 51,200: 8.3B parameters.
    "megatron-gpt2-8.3b": ModelConfig("megatron-gpt2-8.3b", 72, 3072, 24, 4 * 3072, 51200, 1024),
    "gpt3-1.3b": _gpt3("gpt3-1.3b", 24, 2048, 16),
    "gpt3-2.7b": _gpt3("gpt3-2.7b", 32, 2560, 32),
    "gpt3-6.7b": _gpt3("gpt3-6.7b", 32, 4096, 32),
    "gpt3-13b": _gpt3("gpt3-13b", 40, 5120, 40),
    "gpt3-175b": _gpt3("gpt3-175b", 96, 12288, 96),
    # OPT-350m (PHAZE's model): 24 x 1024, 16 heads.  Its real embedding is 512 wide with
    # 1024<->512 project-in/out layers (331.2M parameters); modelled 1024 wide (355.9M, +7%).
    "opt-350m": _opt("opt-350m", 24, 1024, 16),
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
