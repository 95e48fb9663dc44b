"""Transformer model configurations and published presets.

A :class:`ModelConfig` holds the hyper-parameters that decide the cost of
training a decoder (or encoder) transformer: layer count, hidden size, heads
(with grouped-query attention through ``kv_heads``), MLP width, vocabulary,
sequence length, MLP activation (gated or not), norm type and the byte width of
the training dtype.  :func:`preset` returns the published configurations of
BERT, GPT-2, GPT-3, OPT and Llama 2.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import asdict, dataclass, replace
from typing import Any

from ._validate import MAX_DIM, shown_int
from .compressed_attention import CompressedAttention

__all__ = ["ModelConfig", "preset", "preset_names", "PRESETS", "from_hf_config", "HF_FAMILIES",
           "attention_pair_ratio", "yarn_attention_factor"]


def attention_pair_ratio(seq_len: int, window: int) -> float:
    """(query, key) pairs of causal attention within a sliding ``window`` over those of full causal
    attention, for ``seq_len`` tokens: query ``i`` meets ``min(i + 1, window)`` keys, so
    ``(window s - window (window - 1) / 2) / (s (s + 1) / 2)`` once ``s >= window`` (1 below)."""
    s, w = int(seq_len), int(window)
    if w >= s:
        return 1.0
    return (w * s - w * (w - 1) / 2.0) / (s * (s + 1) / 2.0)

def yarn_attention_factor(factor: float, mscale: float | None = None, mscale_all_dim: float | None = None) -> float:
    """YaRN's attention factor on RoPE's cos and sin for a context extension ``factor``:
    ``get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim)`` where both are given
    (DeepSeek's configs), else ``get_mscale(factor)``, with ``get_mscale(s, m) = 0.1 m ln s + 1``
    above 1 (1 at or below): Hugging Face's ``_compute_yarn_parameters`` and Megatron-Core's
    ``_yarn_get_concentration_factor`` alike."""
    def number(name: str, x) -> float:
        if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) or x < 0 or x > 1e6:
            raise ValueError(f"yarn_attention_factor: {name} must be a finite number in [0, 1e6], got {x!r}")
        return float(x)

    def get_mscale(s: float, m: float = 1.0) -> float:
        return 1.0 if s <= 1.0 else 0.1 * m * math.log(s) + 1.0
    factor = number("factor", factor)
    mscale = None if mscale is None else number("mscale", mscale)
    mscale_all_dim = None if mscale_all_dim is None else number("mscale_all_dim", mscale_all_dim)
    if mscale is not None and mscale_all_dim is not None:
        return get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim)
    return get_mscale(factor)


def chunked_pair_ratio(seq_len: int, chunk: int) -> float:
    """(query, key) pairs of causal attention within ``chunk``-token blocks (a query meets the
    keys of its own block up to itself) over those of full causal attention: ``q c (c + 1) / 2 +
    r (r + 1) / 2`` for ``s = q c + r``, over ``s (s + 1) / 2`` (1 once ``chunk >= s``)."""
    s, c = int(seq_len), int(chunk)
    if c >= s:
        return 1.0
    q, r = divmod(s, c)
    return (q * c * (c + 1) / 2.0 + r * (r + 1) / 2.0) / (s * (s + 1) / 2.0)


_ACTIVATIONS = ("gelu", "relu", "swiglu", "geglu")
_NORMS = ("layernorm", "rmsnorm")
_POSITIONS = ("learned", "rotary", "none")
#: Norms of the queries and keys before RoPE (:attr:`ModelConfig.qk_norm`).
QK_NORMS = ("none", "head", "full", "l2")


def _positive_int(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"ModelConfig.{name} must be a positive integer, got {value!r}")
    if value > MAX_DIM:
        raise ValueError(f"ModelConfig.{name} = {shown_int(value)} is larger than any model's ({MAX_DIM:,} at most): a typo or "
                         "a unit slip?")


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
    num_experts: routed experts of a mixture-of-experts MLP (0: a dense MLP).
    experts_per_token: experts each token is routed to (top-k).
    moe_ffn_hidden: width of one expert's MLP (None: ``ffn_hidden``).
    shared_experts: experts every token passes through besides the routed ones (DeepSeek,
        Qwen-MoE), each ``moe_ffn_hidden`` wide.
    dense_layers: leading layers with a dense ``ffn_hidden`` MLP instead of experts (DeepSeek-V3:
        3).  Counted exactly in the parameter counts; the cost model prices every layer as the
        mean of the model's dense and MoE layers (:func:`cosearch.plan.unit_costs`, as for
        ``moe_layer_step``): exact in total, and on a pipeline stage off by at most the dense
        layers' difference from MoE ones (for DeepSeek-V3 the two have equal FLOPs per token, 9 x
        2,048 = 18,432; a dense layer has no router, permutation or all-to-all).
    mla: multi-head latent attention's ``(q_lora_rank, kv_lora_rank, rope_head_dim)`` (a
        ``q_lora_rank`` of 0: the query projected directly from the hidden state, DeepSeek-V2-Lite's)
        (DeepSeek-V2/V3): Q and K/V come from low-rank latents, each head's query/key has
        ``head_dim + rope_head_dim`` dims and its value ``head_dim``.
    mtp_layers: multi-token prediction modules (DeepSeek-V3: 1): each a transformer layer like
        the others, a ``2h -> h`` projection and three norms (Megatron-Core's enorm, hnorm and
        final norm), sharing the embedding and output head;
        priced on the last pipeline stage (a layer, the head run again).  Counted in the sizes;
        model FLOPs (MFU) count the main model only.
    attention_chunk: the block, in tokens, of the layers with chunked attention (Llama 4:
        8,192, its config.json's ``attention_chunk_size``): a query attends causally within its own
        block only.
    chunked_layers: how many layers attend in chunks (Llama 4: the three of every four with RoPE;
        its NoPE layers attend to the whole sequence); priced as sliding windows are, by the mean
        (query, key) pair count (:func:`chunked_pair_ratio`).
    moe_layer_step: every ``moe_layer_step``-th layer is an MoE layer, the others dense with an
        ``ffn_hidden`` MLP (Llama 4 Maverick: 2, its config.json's ``interleave_moe_layer_step``;
        MaxText's ``interleave_moe_layer_step``).  The sizes count each kind exactly; the cost
        model prices a layer as the mean of the two kinds (one MoE layer in ``moe_layer_step``),
        exact wherever a pipeline stage holds whole groups of ``moe_layer_step`` layers.
    moe_capacity_factor: the expert capacity as a multiple of a balanced expert's load (0: token
        dropless, the default).  Megatron-Core's ``moe_expert_capacity_factor``: each expert
        takes at most ``ceil(tokens k / experts x factor)`` of a rank's routed copies
        (``moe_utils.get_capacity``); under balanced routing nothing is dropped at a factor >= 1,
        and a factor < 1 drops the excess.  MaxText's ``capacity_factor``: ``int(ceil(seq k /
        experts) x factor)`` slots per expert and sequence (``moe.py``, ``generate_masks``).
    moe_pad_to_capacity: every expert computes its full capacity, the empty slots padded
        (Megatron-Core's ``moe_pad_expert_input_to_capacity``; MaxText's dense dispatch always
        does), so the experts' GEMMs and the all-to-alls carry ``factor`` times the balanced load.
    moe_einsum_dispatch: tokens reach and leave the expert slots through one-hot matmuls, as
        MaxText's ``dense_matmul`` runs a token-dropping MoE (``sparse_matmul: False``,
        ``capacity_factor > 0``): ``BSM,BSEC -> EBCM`` and ``EBCM,BSEC -> BSM`` per sequence, each
        ``2 S E C h`` FLOPs (priced as activation matmuls), instead of a gather; needs a capacity
        factor, and implies padding.
    sliding_window: the window, in tokens, of the layers with local (sliding-window) causal
        attention: a query attends to itself and the ``sliding_window - 1`` tokens before it.
    sliding_layers: how many of the ``num_layers`` layers attend within ``sliding_window`` (GPT-OSS:
        every other layer, 18 of 36; Mistral-7B: all); the rest attend causally to the whole
        sequence.  A layer is priced at the mean over the layers (the plans assume identical
        layers): its fused attention's FLOPs are the full causal ones times
        ``1 - share + share * pairs(window) / pairs(full)``, counting the (query, key) pairs each
        computes (:func:`attention_pair_ratio`).
    compressed_attention: DeepSeek-V4's hybrid attention (:class:`cosearch.compressed_attention.
        CompressedAttention`: one shared key/value head of ``head_size``, a low-rank query, per-layer
        window / compressed-sparse / heavily-compressed keys, a grouped low-rank output); ``kv_heads``
        is its key/value heads (1).  Exclusive of ``mla``, ``sliding_window`` and ``attention_chunk``
        (it has its own window).
    hyper_connections: residual streams (DeepSeek-V4's manifold-constrained hyper-connections,
        ``hc_mult`` / MaxText's ``mhc_expansion_rate``: 4; 1 is a plain residual).  Each sublayer
        mixes the ``n`` streams of ``hidden`` into its input and back (``n x n`` Sinkhorn-normalised
        mixing, coefficients from an RMS-normed ``n hidden -> n^2 + 2n`` projection, MaxText's
        ``layers/mhc.py``), so the residual activations and the pipeline sends are ``n`` times wider.
    activation_clamp: the limit of a clamped gated activation (0: none): the gate half clamped from
        above and the linear half to ``[-limit, limit]`` before the activation (GPT-OSS: 7.0, its
        config.json's ``swiglu_limit``; Megatron-Core's ``activation_func_clamp_value``).  Priced
        where an engine runs the clamp as eager passes of its own
        (:attr:`cosearch.engine.Engine.expert_elementwise`); a fused activation clamps for free.
    attention_sinks: one learned logit per head and layer in each softmax's denominator (GPT-OSS's
        ``sinks``).  Inside a fused attention kernel (Transformer Engine's ``softmax_type
        learnable``) nothing is priced; where the framework rescales the kernel's output instead
        (torchtitan's ``apply_attention_sink_rescale``, :attr:`cosearch.engine.Engine.attention_sinks`)
        the pass over the attention output is.  Their ``heads x layers`` parameters are not counted.
    rope_attention_factor: YaRN's attention (concentration) factor, which multiplies RoPE's cos
        and sin (1: none).  GPT-OSS: ``0.1 ln 32 + 1`` = 1.347 (its ``rope_scaling`` is YaRN at factor
        32 with no ``attention_factor``, Hugging Face's ``get_mscale`` default); DeepSeek-V3 and
        Kimi-K2 scale by ``mscale / mscale_all_dim`` = 1.  No FLOPs change; an engine whose fused
        RoPE kernel takes no such factor runs it eagerly (:attr:`cosearch.engine.Engine.scaled_rope`).
    qk_norm: the norm of the queries and keys after their projection, before RoPE (:data:`QK_NORMS`):
        ``"none"``; ``"head"``, the model's ``norm`` over each head with ``head_dim`` weights for q
        and for k (Qwen3, Gemma 3: config.json's ``q_norm`` / ``k_norm``; Megatron-Core's
        ``--qk-layernorm``, a ``TENorm`` of the head width); ``"full"``, over the whole projected q
        and k (OLMo 2, OLMoE: ``(heads + kv_heads) head_dim`` weights; the sum of squares across tp
        ranks that a split q would need is not priced); ``"l2"``, a weightless L2 norm per head
        (Llama 4 Scout's ``use_qk_norm``, Megatron-Core's ``--qk-l2-norm``; Llama 4 skips it on its
        NoPE layers, one in four, which are priced with it).  ``True`` / ``False`` mean ``"head"`` /
        ``"none"``.  Priced as two norm passes over q and k a layer
        (:func:`cosearch.graph.build`'s ``q_norm`` and ``k_norm``), their inputs kept for the backward.
    post_norms: the attention's and the MLP's outputs normed before their residual adds too
        (Gemma 2 and 3's ``post_attention_layernorm`` and ``post_feedforward_layernorm``; MaxText's
        ``use_post_attn_norm`` / ``use_post_ffw_norm``): two more norm passes a layer, their weights
        and their inputs (kept for their backward).
    logit_softcap: the final logits soft-capped, ``cap tanh(logits / cap)`` (Gemma 2: 30;
        ``final_logit_softcapping``, MaxText's ``final_logits_soft_cap``; 0: none): priced as a
        vector pass over the logits before the loss.
    attention_softcap: the attention scores soft-capped the same way before the softmax (Gemma 2:
        50; ``attn_logit_softcapping``, MaxText's ``attn_logits_soft_cap``; 0: none): a vector pass
        over the scores of unfused attention; inside a fused kernel not priced (no kernel
        measurement with and without it; the readers say so).
    rotary_fraction: the share of each head's dimensions RoPE rotates (1: all; GPT-NeoX's
        ``rotary_pct`` 0.25, GPT-J's ``rotary_dim`` 64 of 256, GLM-4.5's and Phi's
        ``partial_rotary_factor``, Megatron's ``--rotary-percent``): the rotary op's elements.
        Multi-head latent attention rotates its own rope dimensions (leave 1).
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
    num_experts: int = 0
    experts_per_token: int = 0
    moe_ffn_hidden: int | None = None
    shared_experts: int = 0
    dense_layers: int = 0
    mla: tuple[int, int, int] | None = None
    sliding_window: int | None = None
    sliding_layers: int = 0
    mtp_layers: int = 0
    attention_chunk: int | None = None
    chunked_layers: int = 0
    moe_layer_step: int = 1
    moe_capacity_factor: float = 0.0
    moe_pad_to_capacity: bool = False
    moe_einsum_dispatch: bool = False
    compressed_attention: CompressedAttention | None = None
    hyper_connections: int = 1
    activation_clamp: float = 0.0
    rope_attention_factor: float = 1.0
    qk_norm: str = "none"
    rotary_fraction: float = 1.0
    attention_sinks: bool = False
    post_norms: bool = False
    logit_softcap: float = 0.0
    attention_softcap: float = 0.0

    def __post_init__(self) -> None:
        # numpy's integers (a sweep over np.arange) are integers: stored as Python ints, so the
        # checks below and the JSON a config is written to see one type
        for f in self.__dataclass_fields__:
            x = getattr(self, f)
            if isinstance(x, numbers.Integral) and not isinstance(x, (bool, int)):
                object.__setattr__(self, f, int(x))
        # the sizes first: every check below compares with them
        if self.kv_heads is None:
            object.__setattr__(self, "kv_heads", self.heads)
        for f in ("num_layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab", "seq_len",
                  "dtype_bytes"):
            _positive_int(f, getattr(self, f))
        if isinstance(self.extra_params, bool) or not isinstance(self.extra_params, int) or self.extra_params < 0:
            raise ValueError(f"ModelConfig.extra_params must be an integer >= 0, got {self.extra_params!r}")
        for f in ("num_experts", "experts_per_token", "shared_experts", "dense_layers", "mtp_layers"):
            x = getattr(self, f)
            if isinstance(x, bool) or not isinstance(x, int) or x < 0:
                raise ValueError(f"ModelConfig.{f} must be a non-negative integer, got {x!r}")
            if x:
                _positive_int(f, x)
        if self.num_experts:
            if self.num_experts < 2:
                raise ValueError(f"ModelConfig.num_experts={self.num_experts}: a mixture needs at least 2 experts "
                                 "(0 for a dense MLP)")
            if not 1 <= self.experts_per_token <= self.num_experts:
                raise ValueError(f"ModelConfig.experts_per_token={self.experts_per_token} must be in 1.."
                                 f"{self.num_experts} (num_experts)")
            if self.dense_layers >= self.num_layers:
                raise ValueError(f"ModelConfig.dense_layers={self.dense_layers} leaves no MoE layer of "
                                 f"{self.num_layers}")
        elif self.experts_per_token or self.shared_experts or self.dense_layers or self.moe_ffn_hidden:
            raise ValueError("ModelConfig: experts_per_token, shared_experts, dense_layers and moe_ffn_hidden "
                             "need num_experts >= 2")
        if self.moe_ffn_hidden is not None:
            _positive_int("moe_ffn_hidden", self.moe_ffn_hidden)
        if self.attention_chunk is not None:
            _positive_int("attention_chunk", self.attention_chunk)
        if isinstance(self.chunked_layers, bool) or not isinstance(self.chunked_layers, int) or \
                self.chunked_layers < 0 or (self.chunked_layers and
                                            self.chunked_layers > self.num_layers - self.sliding_layers):
            raise ValueError(f"ModelConfig.chunked_layers must be an integer in 0..{self.num_layers - self.sliding_layers} "
                             f"(the layers without a sliding window), got {self.chunked_layers!r}")
        if self.chunked_layers and self.attention_chunk is None:
            raise ValueError("ModelConfig.chunked_layers needs attention_chunk (the block in tokens)")
        step = self.moe_layer_step
        if isinstance(step, bool) or not isinstance(step, int) or step < 1:
            raise ValueError(f"ModelConfig.moe_layer_step must be a positive integer, got {step!r}")
        if step > 1 and (not self.num_experts or self.dense_layers or self.num_layers % step):
            raise ValueError(f"ModelConfig.moe_layer_step={step} needs an MoE model without dense_layers whose "
                             f"{self.num_layers} layers are whole groups of {step}")
        cf = self.moe_capacity_factor
        if isinstance(cf, bool) or not isinstance(cf, (int, float)) or not math.isfinite(cf) or not 0.0 <= cf <= 64.0:
            raise ValueError(f"ModelConfig.moe_capacity_factor must be a number in [0, 64] (0: dropless), got {cf!r}")
        object.__setattr__(self, "moe_capacity_factor", float(cf))
        for f in ("moe_pad_to_capacity", "moe_einsum_dispatch", "attention_sinks"):
            if not isinstance(getattr(self, f), bool):
                raise ValueError(f"ModelConfig.{f} must be True or False, got {getattr(self, f)!r}")
        if (cf or self.moe_pad_to_capacity or self.moe_einsum_dispatch) and not self.num_experts:
            raise ValueError("ModelConfig: moe_capacity_factor, moe_pad_to_capacity and moe_einsum_dispatch need "
                             "num_experts >= 2")
        if (self.moe_pad_to_capacity or self.moe_einsum_dispatch) and not cf:
            raise ValueError("ModelConfig: moe_pad_to_capacity and moe_einsum_dispatch need a moe_capacity_factor > 0 "
                             "(a dropless MoE has no capacity to pad to)")
        if self.moe_einsum_dispatch:
            object.__setattr__(self, "moe_pad_to_capacity", True)
        if self.mla is not None:
            if not isinstance(self.mla, (list, tuple)) or len(tuple(self.mla)) != 3:
                raise ValueError(f"ModelConfig.mla must be (q_lora_rank, kv_lora_rank, rope_head_dim), got {self.mla!r}")
            object.__setattr__(self, "mla", tuple(self.mla))
            qr = self.mla[0]
            if isinstance(qr, bool) or not isinstance(qr, int) or qr < 0:
                raise ValueError(f"ModelConfig.mla's q_lora_rank must be a whole number (0: the query projected "
                                 f"directly, as DeepSeek-V2-Lite), got {qr!r}")
            for x in self.mla[1:]:
                _positive_int("mla", x)
        clamp = self.activation_clamp
        if isinstance(clamp, bool) or not isinstance(clamp, (int, float)) or not math.isfinite(clamp) or clamp < 0.0:
            raise ValueError(f"ModelConfig.activation_clamp must be a finite number >= 0 (the clamped GLU's limit; 0: "
                             f"none), got {clamp!r}")
        object.__setattr__(self, "activation_clamp", float(clamp))
        for f in ("logit_softcap", "attention_softcap"):
            cap = getattr(self, f)
            if isinstance(cap, bool) or not isinstance(cap, (int, float)) or not math.isfinite(cap) or cap < 0.0:
                raise ValueError(f"ModelConfig.{f} must be a finite number >= 0 (the cap of cap * tanh(x / cap); 0: "
                                 f"none), got {cap!r}")
            object.__setattr__(self, f, float(cap))
        if not isinstance(self.post_norms, bool):
            raise ValueError(f"ModelConfig.post_norms must be true or false, got {self.post_norms!r}")
        rf = self.rope_attention_factor
        if isinstance(rf, bool) or not isinstance(rf, (int, float)) or not math.isfinite(rf) or not 0.0 < rf <= 64.0:
            raise ValueError(f"ModelConfig.rope_attention_factor must be a number in (0, 64] (YaRN's attention "
                             f"factor on RoPE's cos and sin; 1: none), got {rf!r}")
        object.__setattr__(self, "rope_attention_factor", float(rf))
        rf = self.rotary_fraction
        if isinstance(rf, bool) or not isinstance(rf, (int, float)) or not math.isfinite(rf) or not 0.0 < rf <= 1.0:
            raise ValueError(f"ModelConfig.rotary_fraction must be a number in (0, 1] (the share of a head's "
                             f"dimensions RoPE rotates), got {rf!r}")
        object.__setattr__(self, "rotary_fraction", float(rf))
        if rf != 1.0 and (self.mla is not None or self.compressed_attention is not None):
            raise ValueError("ModelConfig.rotary_fraction: multi-head latent and compressed attention rotate their "
                             "own rope dimensions; leave it 1")
        qn = self.qk_norm
        if isinstance(qn, bool):
            qn = "head" if qn else "none"
            object.__setattr__(self, "qk_norm", qn)
        if qn not in QK_NORMS:
            raise ValueError(f"ModelConfig.qk_norm={qn!r}; choose one of {QK_NORMS} (or True / False for 'head' / "
                             "'none')")
        if qn != "none" and (self.mla is not None or self.compressed_attention is not None):
            raise ValueError(f"ModelConfig.qk_norm={qn!r} norms projected queries and keys; multi-head latent and "
                             "DeepSeek-V4's compressed attention norm their latents instead (leave qk_norm 'none')")
        hc = self.hyper_connections
        if isinstance(hc, bool) or not isinstance(hc, int) or not 1 <= hc <= 64:
            raise ValueError(f"ModelConfig.hyper_connections must be an integer in 1..64 (residual streams; 1: a plain "
                             f"residual), got {hc!r}")
        ca = self.compressed_attention
        if ca is not None:
            if isinstance(ca, dict):
                try:
                    ca = CompressedAttention(**ca)
                except TypeError as exc:
                    raise ValueError(f"ModelConfig.compressed_attention: {exc}") from None
                object.__setattr__(self, "compressed_attention", ca)
            if not isinstance(ca, CompressedAttention):
                raise ValueError(f"ModelConfig.compressed_attention must be a CompressedAttention (or its dict), got {ca!r}")
            if self.mla is not None or self.sliding_window is not None or self.attention_chunk is not None:
                raise ValueError("ModelConfig.compressed_attention is DeepSeek-V4's own attention: leave mla, "
                                 "sliding_window and attention_chunk unset (its window is CompressedAttention.window)")
        if self.sliding_window is not None:
            _positive_int("sliding_window", self.sliding_window)
        if isinstance(self.sliding_layers, bool) or not isinstance(self.sliding_layers, int) or \
                not 0 <= self.sliding_layers <= self.num_layers:
            raise ValueError(f"ModelConfig.sliding_layers must be an integer in 0..{self.num_layers} (num_layers), "
                             f"got {self.sliding_layers!r}")
        if self.sliding_layers and self.sliding_window is None:
            raise ValueError("ModelConfig.sliding_layers needs sliding_window (the window in tokens)")
        if self.head_size is not None:
            _positive_int("head_size", self.head_size)
        elif self.hidden % self.heads:
            raise ValueError(
                f"ModelConfig.heads={self.heads} must divide hidden={self.hidden} (or give head_size)"
            )
        if self.norms_per_layer not in (1, 2):
            raise ValueError(f"ModelConfig.norms_per_layer must be 1 or 2, got {self.norms_per_layer!r}")
        if self.compressed_attention is not None:
            self.compressed_attention.check_model(self.num_layers, self.heads, self.head_dim)
        if self.heads % self.kv_heads:
            raise ValueError(
                f"ModelConfig.kv_heads={self.kv_heads} must divide heads={self.heads}"
            )
        if self.activation not in _ACTIVATIONS:
            raise ValueError(f"ModelConfig.activation={self.activation!r}; choose one of {_ACTIVATIONS}")
        if self.activation_clamp and self.activation not in ("swiglu", "geglu"):
            raise ValueError(f"ModelConfig.activation_clamp={self.activation_clamp:g} clamps a gated activation's two "
                             f"halves: it needs activation 'swiglu' or 'geglu', got {self.activation!r}")
        if self.norm not in _NORMS:
            raise ValueError(f"ModelConfig.norm={self.norm!r}; choose one of {_NORMS}")
        if self.position not in _POSITIONS:
            raise ValueError(f"ModelConfig.position={self.position!r}; choose one of {_POSITIONS}")
        if self.rotary_fraction != 1.0 and self.position != "rotary":
            raise ValueError(f"ModelConfig.rotary_fraction={self.rotary_fraction:g} needs position 'rotary' (got "
                             f"{self.position!r})")

    # ------------------------------------------------------------------ derived sizes
    @property
    def attention_flops_share(self) -> float:
        """A layer's mean fused-attention FLOPs over the full causal ones (1 without sliding
        windows or chunks; ``sliding_layers`` and :func:`attention_pair_ratio`, ``chunked_layers``
        and :func:`chunked_pair_ratio`)."""
        out = 1.0
        if self.sliding_layers:
            share = self.sliding_layers / self.num_layers
            out += share * (attention_pair_ratio(self.seq_len, int(self.sliding_window)) - 1.0)
        if self.chunked_layers:
            share = self.chunked_layers / self.num_layers
            out += share * (chunked_pair_ratio(self.seq_len, int(self.attention_chunk)) - 1.0)
        return out

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

    @property
    def moe(self) -> bool:
        return self.num_experts > 0

    @property
    def expert_ffn(self) -> int:
        """One expert's MLP width."""
        return self.moe_ffn_hidden or self.ffn_hidden

    def attention_params(self) -> float:
        """Q, K, V and output projections (MLA: the latent down/up projections and their norms;
        compressed attention: :meth:`CompressedAttention.params`, the mean over the layers)."""
        h, q = self.hidden, self.q_dim
        if self.compressed_attention is not None:
            return self.compressed_attention.params(h, self.heads, self.head_dim, self.kv_heads)
        if self.mla is not None:
            qr, kvr, rope = self.mla
            d, a = self.head_dim, self.heads
            q = h * a * (d + rope) if qr == 0 else h * qr + qr * a * (d + rope) + qr
            return q + h * (kvr + rope) + kvr * a * 2 * d + a * d * h + kvr
        return h * q + 2 * h * self.kv_dim + q * h + self.qk_norm_params()

    @property
    def qk_norm_kind(self) -> str:
        """The vector op the q/k norms run as (:attr:`qk_norm`): the model's norm, or for a
        weightless L2 norm RMSNorm's passes."""
        return self.norm if self.qk_norm in ("head", "full") else "rmsnorm"

    def qk_norm_params(self) -> int:
        """The q/k norms' weights (:attr:`qk_norm`): ``head_dim`` each per head, the whole q and k
        width for ``"full"``, none for L2; twice that with a LayerNorm's biases."""
        per = 2 if self.norm == "layernorm" else 1
        if self.qk_norm == "head":
            return per * 2 * self.head_dim
        if self.qk_norm == "full":
            return per * (self.heads + self.kv_heads) * self.head_dim
        return 0

    def _mlp_params(self, width: int) -> int:
        return (3 if self.gated else 2) * self.hidden * width

    def expert_layer_params(self) -> int:
        """Routed-expert parameters of one MoE layer (0 for a dense model)."""
        return self.num_experts * self._mlp_params(self.expert_ffn) if self.moe else 0

    def layer_params(self, active: bool = False) -> int:
        """Parameters of one transformer block (attention + MLP + its two norms); for an MoE
        layer, all experts, the shared ones and the router — or with ``active``, only what
        one token uses (its ``experts_per_token`` routed experts)."""
        h, f, kv, q = self.hidden, self.ffn_hidden, self.kv_dim, self.q_dim
        attn = self.attention_params()
        if self.moe:
            routed = self.experts_per_token if active else self.num_experts
            mlp = (routed + self.shared_experts) * self._mlp_params(self.expert_ffn) + h * self.num_experts
        else:
            mlp = self._mlp_params(f)
        params = attn + mlp
        if self.bias:
            params += q + 2 * kv + h  # q, k, v, out biases
            params += (2 * f if self.gated else f) + h
        params += (self.norms_per_layer + (2 if self.post_norms else 0)) * self.norm_params()
        return params + self.norms_per_layer * self.hyper_connection_params()

    def hyper_connection_params(self) -> int:
        """One sublayer's hyper-connection parameters (0 for a plain residual): the RMSNorm over
        the ``n`` streams (``n h``), the ``n h -> n^2 + 2n`` projection and its bias, three
        scales (MaxText's ``mhc.py``: ``mhc_norm``, the res/pre/post alphas, betas and alpha scales)."""
        n, h = self.hyper_connections, self.hidden
        if n == 1:
            return 0
        m = n * n + 2 * n
        return n * h + n * h * m + m + 3

    def attention_core_flops_per_token(self) -> float:
        """Forward FLOPs of one layer's attention core per token, the mean over layers: ``4 h s``
        (QK^T and PV over the whole causal sequence, the convention of model FLOPs: Megatron's
        and PaLM's MFU), or compressed attention's exact count
        (:meth:`CompressedAttention.core_flops_per_token`: its keys and indexer scores)."""
        if self.compressed_attention is not None:
            return self.compressed_attention.core_flops_per_token(self.seq_len, self.heads, self.head_dim)
        return 4.0 * self.hidden * self.seq_len

    def dense_counterpart(self) -> ModelConfig:
        """The model with a dense ``ffn_hidden`` MLP in every layer (an MoE model's dense layers)."""
        return self.with_(num_experts=0, experts_per_token=0, shared_experts=0, moe_ffn_hidden=None, dense_layers=0,
                          moe_layer_step=1, moe_capacity_factor=0.0, moe_pad_to_capacity=False,
                          moe_einsum_dispatch=False)

    @property
    def dense_layer_count(self) -> int:
        """Layers with a dense MLP in an MoE model (``dense_layers``, or all but every
        ``moe_layer_step``-th)."""
        if self.moe_layer_step > 1:
            return self.num_layers - self.num_layers // self.moe_layer_step
        return self.dense_layers

    def _dense_layer_params(self) -> int:
        return self.dense_counterpart().layer_params()

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

    def num_params(self, active: bool = False) -> int:
        """Total trainable parameters (``active``: those one token uses, for an MoE model)."""
        dense = self.dense_layer_count
        layers = (self.num_layers - dense) * self.layer_params(active) + dense * (
            self._dense_layer_params() if dense else 0)
        total = layers + self.mtp_params(active) + self.embedding_params() + self.extra_params
        return int(round(total))   # compressed attention prices a layer at the mean: exact in total

    def mtp_params(self, active: bool = False) -> int:
        """The multi-token prediction modules' own parameters (a layer, the ``2h -> h`` projection
        and three norms each; the embedding and head are shared)."""
        return self.mtp_layers * (self.layer_params(active) + 2 * self.hidden * self.hidden + 3 * self.norm_params())

    def flops_per_token(self) -> float:
        """Training FLOPs per token (forward + backward, no recompute), 6N + attention, N the
        parameters a token uses (all of a dense model, the active ones of an MoE model), of the main
        model (multi-token prediction modules left out, as MFU counts)."""
        attn = 3.0 * self.num_layers * self.attention_core_flops_per_token()  # fwd + bwd
        return 6.0 * (self.num_params(active=True) - self.extra_params - self.mtp_params(active=True)) + attn

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
               "gemma2", "gemma3", "gemma3_text", "phi", "bert", "mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v2", "deepseek_v3",
               "deepseek_v4", "llama4", "llama4_text")
#: Context lengths up to this are taken as the training sequence length when none is given.
PLAUSIBLE_TRAINING_CONTEXT = 8192
_GEMMA = ("gemma", "gemma2", "gemma3_text")
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


#: Activation names transformers' ``activations.py`` maps (``ACT2FN`` / ``ACT2CLS``; ``gelu_pytorch_tanh``
#: Gemma's, ``relu2`` Nemotron's squared ReLU): :func:`from_hf_config` prices silu / swish as
#: gated, the ReLUs as relu and the rest as gelu, one elementwise pass each.
_HF_ACTIVATIONS = frozenset({"gelu", "gelu_10", "gelu_fast", "gelu_new", "gelu_python", "gelu_pytorch_tanh",
                             "gelu_accurate", "quick_gelu", "linear", "mish", "relu", "relu2", "relu6",
                             "leaky_relu", "laplace", "sigmoid", "silu", "swish", "tanh", "prelu", "xielu"})


def _hf_bool(config: dict, key: str, default: bool) -> bool:
    """A true/false field of an HF config (``default`` where absent or null); any other value is
    refused by name, not read by its truthiness (a string "false" is true)."""
    v = config.get(key)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise ValueError(f"from_hf_config: {key!r} must be true or false, got {v!r}")
    return v


#: The dropout probabilities of each family's config, as (hidden keys, attention keys, default: one
#: for every key, or a key's own), the default transformers' configuration classes give where a
#: config.json leaves a key out
#: (``models/<family>/configuration_<family>.py``, transformers 5.25): GPT-2's ``resid_pdrop``,
#: ``embd_pdrop`` and ``attn_pdrop`` 0.1; GPT-J's and Phi's 0.0 (Phi's attention key
#: ``attention_dropout``); GPT-NeoX's, BLOOM's and Falcon's ``hidden_dropout`` and
#: ``attention_dropout`` 0.0; OPT's ``dropout`` 0.1 (``attention_dropout`` 0.0); BERT's
#: ``hidden_dropout_prob`` and ``attention_probs_dropout_prob`` 0.1.  Every other family
#: (Llama, Mistral, Qwen, Gemma, the MoE families) has only ``attention_dropout``, 0.0.
_HF_DROPOUT = {"gpt2": (("resid_pdrop", "embd_pdrop"), ("attn_pdrop",), 0.1),
               "gptj": (("resid_pdrop", "embd_pdrop"), ("attn_pdrop",), 0.0),
               "phi": (("resid_pdrop", "embd_pdrop"), ("attention_dropout",), 0.0),
               "gpt_neox": (("hidden_dropout",), ("attention_dropout",), 0.0),
               "bloom": (("hidden_dropout",), ("attention_dropout",), 0.0),
               "falcon": (("hidden_dropout",), ("attention_dropout",), 0.0),
               "opt": (("dropout",), ("attention_dropout",), {"dropout": 0.1, "attention_dropout": 0.0}),
               "bert": (("hidden_dropout_prob",), ("attention_probs_dropout_prob",), 0.1)}
#: A family outside :data:`_HF_DROPOUT` and :data:`HF_FAMILIES` (read by its usual field names):
#: the dropout keys decoder configs use (StarCoder2's ``residual_dropout`` and
#: ``embedding_dropout``, MPT's ``emb_pdrop``, ...), 0.0 where absent.
_HF_OTHER_DROPOUT = (("hidden_dropout", "hidden_dropout_prob", "resid_pdrop", "residual_dropout", "embd_pdrop",
                      "emb_pdrop", "embedding_dropout", "dropout"),
                     ("attention_dropout", "attn_pdrop", "attention_probs_dropout_prob"), 0.0)


def hf_dropout(config: dict, model_type: str) -> tuple[float, float]:
    """(hidden, attention) dropout probability of an HF config of family ``model_type``: the
    largest of the family's keys (:data:`_HF_DROPOUT`; the other families of :data:`HF_FAMILIES`
    only ``attention_dropout``; any other family the usual keys, :data:`_HF_OTHER_DROPOUT`), its
    transformers default where absent.
    A probability outside [0, 1) is refused by name."""
    if model_type in _HF_DROPOUT:
        hidden_keys, attn_keys, default = _HF_DROPOUT[model_type]
    elif model_type in HF_FAMILIES:
        hidden_keys, attn_keys, default = (), ("attention_dropout",), 0.0
    else:
        hidden_keys, attn_keys, default = _HF_OTHER_DROPOUT

    def prob(key: str) -> float:
        v = config.get(key)
        if v is None:
            return default[key] if isinstance(default, dict) else default
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 <= v < 1.0:
            raise ValueError(f"from_hf_config: {key!r} must be a dropout probability in [0, 1), got {v!r}")
        return float(v)

    return max((prob(k) for k in hidden_keys), default=0.0), max((prob(k) for k in attn_keys), default=0.0)


def _hf_text(config: dict, *keys: str) -> str | None:
    """The first of ``keys`` an HF config sets to a non-empty string (None where none is set);
    a number, list or empty string there is refused by name."""
    for k in keys:
        v = config.get(k)
        if v is None:
            continue
        if not isinstance(v, str) or not v.strip():
            raise ValueError(f"from_hf_config: {k!r} must be a name (a non-empty string), got {v!r}")
        return v
    return None


def _hf_moe(config: dict, mt: str) -> dict[str, Any]:
    """Mixture-of-experts fields of an HF config: Mixtral (``num_local_experts``), Qwen2-MoE /
    Qwen3-MoE (``num_experts``, ``moe_intermediate_size``, one shared expert of
    ``shared_expert_intermediate_size``), DeepSeek-V2/V3 (``n_routed_experts``,
    ``n_shared_experts``, ``first_k_dense_replace``, MLA ranks).  {} for a dense model."""
    experts = _hf_int(config, "num_local_experts", "n_routed_experts", "num_experts", "moe_num_experts",
                      default=None)
    if experts is None or experts <= 1:
        if "moe" in mt:
            raise ValueError(f"from_hf_config: {mt} names a mixture of experts but gives no expert count "
                             "(num_local_experts / num_experts / n_routed_experts)")
        return {}
    k = _hf_int(config, "num_experts_per_tok", "moe_top_k", required=True)
    out: dict[str, Any] = {"num_experts": experts, "experts_per_token": k}
    width = _hf_int(config, "moe_intermediate_size", default=None)
    if width is not None:
        out["moe_ffn_hidden"] = width
    shared = _hf_int(config, "n_shared_experts", default=0)
    shared_width = _hf_int(config, "shared_expert_intermediate_size", default=None)
    if shared_width:
        # Qwen-MoE: one shared expert of its own width, expressed in expert widths
        w = width or _hf_int(config, "intermediate_size", required=True)
        if shared_width % w:
            raise ValueError(f"from_hf_config: shared_expert_intermediate_size {shared_width} is not a whole number "
                             f"of expert widths ({w})")
        shared = shared_width // w
    out["shared_experts"] = shared
    dense = _hf_int(config, "first_k_dense_replace", default=0)
    # Qwen2/3-MoE: ``mlp_only_layers`` (dense layers by index) and ``decoder_sparse_step`` (an MoE
    # layer every k-th); priced where the dense layers are the first ones, or one in k
    only = config.get("mlp_only_layers") or []
    if not isinstance(only, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in only):
        raise ValueError(f"from_hf_config: mlp_only_layers must be a list of layer indices, got {only!r}")
    if only:
        if sorted(only) != list(range(len(only))):
            raise ValueError(f"from_hf_config: mlp_only_layers {only} are not the first layers: cosearch prices dense "
                             "layers first (first_k_dense_replace) or one MoE layer in k (decoder_sparse_step)")
        dense = max(dense, len(only))
    if dense:
        out["dense_layers"] = dense
    step = _hf_int(config, "decoder_sparse_step", default=1)
    if step > 1:
        if dense:
            raise ValueError("from_hf_config: decoder_sparse_step with dense first layers is not modelled")
        out["moe_layer_step"] = step
    if config.get("kv_lora_rank"):
        # q_lora_rank null (DeepSeek-V2-Lite, Moonlight): the query projected directly
        out["mla"] = (_hf_int(config, "q_lora_rank", default=0), _hf_int(config, "kv_lora_rank"),
                      _hf_int(config, "qk_rope_head_dim", required=True))
    return out


def from_hf_config(config: dict[str, Any], name: str | None = None, seq_len: int | None = None,
                   dtype_bytes: int = 2) -> ModelConfig:
    """A :class:`ModelConfig` from a Hugging Face ``config.json`` dictionary.

    Families (``model_type``): GPT-2, GPT-J, GPT-NeoX, OPT, BLOOM (ALiBi, embedding norm),
    Llama 2/3 (GQA), Mistral, Qwen2 (q/k/v biases), Falcon (multi-query or GQA, parallel
    attention), Gemma 1/2/3 (``head_dim``, tied embeddings, GeGLU, Gemma 2/3's post-norms and
    Gemma 3's q/k norms; their sliding-window layers from ``layer_types`` or the family's pattern), Phi, BERT;
    OPT-350m's narrow embedding with project_in/out is refused; other decoder configs with
    the usual field names are read the same way.  Mixture-of-experts configs: Mixtral,
    Qwen2/3-MoE, DeepSeek-V2/V3 (MLA read from its ranks; see :class:`ModelConfig`), DeepSeek-V4
    (compressed attention and hyper-connections, :func:`_hf_deepseek_v4`) and Llama 4
    (interleaved MoE layers and chunked attention, :func:`_hf_llama4`).
    Encoder-decoder configs (T5, BART, ...) are refused with a message that says so, as are
    layers that mix tokens by something other than softmax attention (linear attention, state
    spaces, DeepSeek-V3.2's sparse indexer: Qwen3-Next, MiniMax, Nemotron-H, Jamba;
    :data:`_HF_OTHER_MIXERS`).  Sizes must be integers.  Dropout ops are priced where the
    family's hidden dropout probability is above 0 (:func:`hf_dropout`: BLOOM, Falcon, GPT-J and
    GPT-NeoX configs set 0.0; GPT-2, OPT and BERT default to 0.1).

    ``seq_len``: the training sequence length.  When None, the config's context length is
    used if it is at most :data:`PLAUSIBLE_TRAINING_CONTEXT` tokens (a warning says so);
    a longer context (Llama-3.1, Qwen2: 131,072) must be given explicitly.
    """
    import warnings

    if not isinstance(config, dict):
        raise ValueError(f"from_hf_config expects a dict (parsed config.json), got {type(config).__name__}")
    mt = (_hf_text(config, "model_type") or "").lower().replace("-", "_")
    if mt == "gemma3" and isinstance(config.get("text_config"), dict):
        # the multimodal Gemma 3 config nests its language model
        config = {**config["text_config"], "model_type": "gemma3_text"}
        mt = "gemma3_text"
    if mt == "llama4" and isinstance(config.get("text_config"), dict):
        # Llama 4's multimodal config nests its language model (transformers' Llama4Config)
        config = {**config["text_config"], "model_type": "llama4_text"}
        mt = "llama4_text"
    gemma = mt in _GEMMA
    if config.get("is_encoder_decoder") or mt in _ENC_DEC:
        raise ValueError(f"from_hf_config: {mt or 'this'} is an encoder-decoder model; cosearch models "
                         "decoder-only and encoder-only transformers")
    _hf_refuse_other_mixers(config, mt)
    moe_kw = _hf_moe(config, mt)
    layers = _hf_int(config, "num_hidden_layers", "n_layer", "num_layers", required=True)
    if mt == "llama4_text":
        moe_kw.update(_hf_llama4(config, layers))
    if mt == "deepseek_v4":
        moe_kw.update(_hf_deepseek_v4(config, layers))
    hidden = _hf_int(config, "hidden_size", "n_embd", "d_model", required=True)
    heads = _hf_int(config, "num_attention_heads", "n_head", "num_heads", required=True)
    vocab = _hf_int(config, "vocab_size", required=True)
    ffn = _hf_int(config, "intermediate_size_mlp" if mt == "llama4_text" else "intermediate_size", "intermediate_size",
                  "ffn_dim", "n_inner", "ffn_hidden_size",
                  default=moe_kw["moe_ffn_hidden"] if mt == "deepseek_v4" else 4 * hidden)
    head_size = _hf_int(config, "head_dim", default=None)
    if head_size is not None and head_size * heads == hidden:
        head_size = None
    if mt == "falcon":
        if _hf_bool(config, "new_decoder_architecture", False):
            kv = _hf_int(config, "num_kv_heads", "num_key_value_heads", default=heads)
        else:
            kv = 1 if _hf_bool(config, "multi_query", True) else heads
    else:
        kv = _hf_int(config, "num_key_value_heads", "num_kv_heads", default=None)
        if kv is None:
            kv = 1 if _hf_bool(config, "multi_query", False) else heads
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
    act = (_hf_text(config, "hidden_act", "activation_function", "hidden_activation") or "gelu").lower()
    if act not in _HF_ACTIVATIONS:
        # priced by kind (gated, relu, else gelu): a name transformers does not define is a typo or
        # a remote-code activation, not silently the default gelu
        raise ValueError(f"from_hf_config: activation {act!r} is not one transformers defines "
                         f"({', '.join(sorted(_HF_ACTIVATIONS))}); set the nearest in the config")
    gated = mt in ("llama", "mistral", "qwen2") or gemma or act in ("silu", "swish") or bool(moe_kw)
    activation = ("geglu" if gemma else "swiglu") if gated else ("relu" if act == "relu" else "gelu")
    rms = mt in ("llama", "mistral", "qwen2") or gemma or "rms_norm_eps" in config
    # DeepSeek-V4's sliding window is its compressed attention's own
    window_kw = {} if mt == "deepseek_v4" else _hf_sliding_window(config, mt, gemma, layers, int(seq_len))
    proj = _hf_int(config, "word_embed_proj_dim", default=None)
    if proj is not None and proj != hidden:
        raise ValueError(f"from_hf_config: the {proj}-wide token embedding with project_in/out to the {hidden}-wide "
                         "model (OPT-350m) is not modelled; cosearch would size it as a full-width embedding")
    if moe_kw.get("mla"):
        head_size = _hf_int(config, "qk_nope_head_dim", required=True)
        if _hf_int(config, "v_head_dim", default=head_size) != head_size:
            raise ValueError("from_hf_config: MLA with v_head_dim != qk_nope_head_dim is not modelled")
    if config.get("rope_scaling") is not None and not isinstance(config["rope_scaling"], dict):
        raise ValueError(f"from_hf_config: 'rope_scaling' must be an object (or null), got {config['rope_scaling']!r}")
    if mt == "bloom" or _hf_bool(config, "alibi", False):
        position = "none"
    elif (mt in ("llama", "mistral", "qwen2", "gpt_neox", "gptj", "falcon", "phi") or gemma or "rope_theta" in config
          or moe_kw.get("mla") or "rope_scaling" in config):           # MLA's decoupled keys are RoPE'd
        position = "rotary"
    else:
        position = "learned"
    if mt in ("llama", "mistral") or gemma or moe_kw:
        bias = _hf_bool(config, "attention_bias", False)
    elif mt == "falcon":
        bias = _hf_bool(config, "bias", False)
    elif mt == "qwen2":
        bias = False            # only q/k/v carry biases: a few thousand parameters, left out
    else:
        # Qwen3, OLMo 2 and their kin name only attention_bias (their MLPs have none either)
        bias = next((_hf_bool(config, k, True) for k in ("bias", "use_bias", "attention_bias")
                     if config.get(k) is not None), True)
    tie_default = mt in ("gpt2", "opt", "bloom", "bert", "falcon") or gemma or not gated
    if mt in ("gptj", "gpt_neox", "phi"):
        tie_default = False
    tie = config.get("tie_word_embeddings", tie_default)
    if not isinstance(tie, bool):
        raise ValueError(f"from_hf_config: 'tie_word_embeddings' must be true or false, got {tie!r}")
    parallel = mt in ("gptj", "phi") or (mt == "falcon" and _hf_bool(config, "parallel_attn", True)
                                         and not _hf_bool(config, "new_decoder_architecture", False))
    extra = 0
    if mt == "bert":
        extra = _hf_int(config, "type_vocab_size", default=2) * hidden + hidden * hidden + hidden
    if mt == "bloom":
        extra = 2 * hidden            # the layer norm on the word embeddings
    if mt == "opt" and position == "learned":
        extra = 2 * hidden            # OPT's learned positions carry a 2-row offset
    if mt in ("gptj", "phi") and not tie:
        extra += vocab                # lm_head bias
    qk_norm = _hf_qk_norm(config, mt)
    # GPT-OSS's clamped gated activation (modeling_gpt_oss.py: gate.clamp(max=limit),
    # up.clamp(-limit, limit))
    limit = config.get("swiglu_limit") if gated else None
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, (int, float))
                              or not math.isfinite(limit) or limit < 0):
        raise ValueError(f"from_hf_config: 'swiglu_limit' must be a non-negative number, got {limit!r}")
    # the dropout ops (after the embedding, the attention and the MLP) where the config's hidden
    # dropout is on; an attention-only dropout runs inside the attention kernel (said by
    # cosearch.runs.hf_config_notes)
    hidden_dropout, _ = hf_dropout(config, mt)
    rope_factor = _hf_yarn_attention_factor(config.get("rope_scaling")) if position == "rotary" else 1.0
    rotary_fraction = _hf_rotary_fraction(config, head_size or hidden // heads) if position == "rotary" and \
        not moe_kw.get("mla") and mt != "deepseek_v4" else 1.0
    learned_rows = ctx if (position == "learned" and ctx) else seq_len
    cfg = ModelConfig(
        name=name or str(config.get("_name_or_path") or mt or "hf-model"),
        num_layers=layers, hidden=hidden, heads=heads, kv_heads=kv, ffn_hidden=ffn, vocab=vocab,
        seq_len=int(seq_len), activation=activation, norm="rmsnorm" if rms else "layernorm",
        position=position, bias=bias, tie_embeddings=tie, dropout=hidden_dropout > 0, dtype_bytes=dtype_bytes,
        extra_params=int(extra), head_size=head_size, norms_per_layer=1 if parallel else 2, **moe_kw,
        **window_kw, activation_clamp=float(limit or 0.0), rope_attention_factor=rope_factor, qk_norm=qk_norm,
        rotary_fraction=rotary_fraction, attention_sinks=mt == "gpt_oss",
        # Gemma 2/3 norm the attention and MLP outputs too; Gemma 2 soft-caps its logits
        post_norms=mt in _GEMMA[1:], logit_softcap=_hf_cap(config, "final_logit_softcapping"),
        attention_softcap=_hf_cap(config, "attn_logit_softcapping"))
    if position == "learned" and learned_rows != seq_len:
        # the position table holds the config's context, whatever length is trained on
        cfg = cfg.with_(extra_params=cfg.extra_params + (learned_rows - seq_len) * hidden) \
            if learned_rows > seq_len else cfg
    return cfg


def _hf_deepseek_v4(config: dict, layers: int) -> dict[str, Any]:
    """DeepSeek-V4's config (``model_type: deepseek_v4``): its compressed attention
    (``compress_ratios`` — the first ``num_hidden_layers`` entries; the rest are the multi-token
    prediction layers' — ``sliding_window``, ``q_lora_rank``, ``o_groups``, ``o_lora_rank``,
    ``index_n_heads``, ``index_head_dim``, ``index_topk``, ``qk_rope_head_dim``), its
    hyper-connection streams (``hc_mult``) and its ``head_dim``, the key names vLLM's and
    SGLang's DeepSeek-V4 loaders read; MaxText's ``deepseek4-284b.yml`` holds the same values."""
    ratios = config.get("compress_ratios")
    if not isinstance(ratios, list) or len(ratios) < layers:
        raise ValueError(f"from_hf_config: deepseek_v4 needs compress_ratios with one ratio per layer ({layers}), "
                         f"got {ratios!r}")
    ca = CompressedAttention(
        ratios=tuple(ratios[:layers]), window=_hf_int(config, "sliding_window", required=True),
        q_lora_rank=_hf_int(config, "q_lora_rank", required=True), o_groups=_hf_int(config, "o_groups", required=True),
        o_lora_rank=_hf_int(config, "o_lora_rank", required=True),
        index_heads=_hf_int(config, "index_n_heads", required=True),
        index_head_dim=_hf_int(config, "index_head_dim", required=True),
        index_topk=_hf_int(config, "index_topk", required=True),
        rope_head_dim=_hf_int(config, "qk_rope_head_dim", required=True))
    return {"compressed_attention": ca, "hyper_connections": _hf_int(config, "hc_mult", default=1)}


#: Config keys of token mixers other than softmax attention, and what they are: a config naming
#: any is refused, since pricing those layers as attention would be silently wrong.
_HF_OTHER_MIXERS = {
    "full_attention_interval": "hybrid linear attention (Qwen3-Next's Gated DeltaNet layers)",
    "linear_conv_kernel_dim": "hybrid linear attention (Gated DeltaNet layers)",
    "attn_type_list": "MiniMax's lightning (linear) attention layers",
    "hybrid_override_pattern": "Nemotron-H's Mamba-2 layers",
    "attn_layer_period": "Jamba's Mamba layers",
    "layers_block_type": "state-space (Mamba) layers",
    "mamba_d_state": "state-space (Mamba) layers",
    "ssm_state_size": "state-space (Mamba) layers",
    "index_topk": "DeepSeek Sparse Attention (a lightning indexer scoring every key, attention over its top k)",
}
#: ``layer_types`` entries :func:`from_hf_config` prices (full, sliding-window and chunked attention).
_HF_LAYER_TYPES = ("full_attention", "sliding_attention", "chunked_attention")


def _hf_refuse_other_mixers(config: dict, mt: str) -> None:
    """Refuse a config whose layers mix tokens by something other than softmax attention
    (:data:`_HF_OTHER_MIXERS`, or a ``layer_types`` entry outside :data:`_HF_LAYER_TYPES`), naming
    it; DeepSeek-V4's compressed attention reads its own indexer (:func:`_hf_deepseek_v4`)."""
    for key, what in _HF_OTHER_MIXERS.items():
        value = config.get(key)
        if key == "attn_type_list" and isinstance(value, list) and all(v == 1 for v in value):
            continue                # every layer softmax attention (MiniMax's 1; 0 is lightning)
        if value is not None and not (mt == "deepseek_v4" and key == "index_topk"):
            raise ValueError(f"from_hf_config: {mt or 'this model'} has {what} ({key!r}), which cosearch does not "
                             "model; its layers would be priced as attention")
    types = config.get("layer_types")
    if types is not None and not isinstance(types, list):
        raise ValueError(f"from_hf_config: 'layer_types' must be a list of layer kinds, got {types!r}")
    if types:
        other = sorted({str(t) for t in types} - set(_HF_LAYER_TYPES))
        if other:
            raise ValueError(f"from_hf_config: layer_types {other} are not modelled (cosearch prices "
                             f"{', '.join(_HF_LAYER_TYPES)}); its layers would be priced as attention")


#: Model types whose every layer norms its queries and keys per head (``q_norm`` / ``k_norm``
#: of the head width: transformers' Qwen3, Qwen3-MoE, Gemma 3 modeling code) or over the whole
#: projected q and k (OLMo 2, OLMoE: ``q_norm`` of ``heads x head_dim``).
_HF_QK_NORM = {"qwen3": "head", "qwen3_moe": "head", "gemma3": "head", "gemma3_text": "head",
               "olmo2": "full", "olmoe": "full"}


def _hf_rotary_fraction(config: dict, head_dim: int) -> float:
    """The share of a head's dimensions RoPE rotates: ``partial_rotary_factor`` (Phi, GLM,
    StableLM), ``rotary_pct`` (GPT-NeoX) or ``rotary_dim`` over the head width (GPT-J); 1 when
    none is given."""
    for key in ("partial_rotary_factor", "rotary_pct"):
        v = config.get(key)
        if v is not None:
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 < v <= 1.0:
                raise ValueError(f"from_hf_config: {key!r} must be a number in (0, 1], got {v!r}")
            return float(v)
    dim = _hf_int(config, "rotary_dim", default=None)
    if dim is not None:
        if dim > head_dim:
            raise ValueError(f"from_hf_config: rotary_dim {dim} exceeds the head width {head_dim}")
        return dim / head_dim
    return 1.0


def _hf_qk_norm(config: dict, mt: str) -> str:
    """:attr:`ModelConfig.qk_norm` from a config: the family's (:data:`_HF_QK_NORM`), or a
    ``use_qk_norm`` / ``qk_layernorm`` switch (Llama 4's is a weightless L2 norm,
    ``Llama4TextL2Norm``; Cohere's and others' a per-head norm)."""
    for key in ("use_qk_norm", "qk_layernorm"):
        if key in config:
            on = config[key]
            if not isinstance(on, bool):
                raise ValueError(f"from_hf_config: {key!r} must be true or false, got {on!r}")
            if not on:
                return "none"
            return "l2" if mt == "llama4_text" else _HF_QK_NORM.get(mt, "head")
    return _HF_QK_NORM.get(mt, "none")


def _hf_llama4(config: dict, layers: int) -> dict[str, Any]:
    """Llama 4's text config (transformers' ``Llama4TextConfig``): routed experts of
    ``intermediate_size`` with one shared expert of the same width, an MoE layer every
    ``interleave_moe_layer_step`` layers (the others dense of ``intermediate_size_mlp``), chunked
    attention (``attention_chunk_size``) on the layers ``no_rope_layers`` marks as using RoPE
    (default: all but every 4th, ``no_rope_layer_interval``)."""
    out: dict[str, Any] = {"moe_ffn_hidden": _hf_int(config, "intermediate_size", required=True), "shared_experts": 1}
    step = _hf_int(config, "interleave_moe_layer_step", default=1)
    moe_layers = config.get("moe_layers")
    if moe_layers is not None and list(moe_layers) != list(range(step - 1, layers, step)):
        raise ValueError("from_hf_config: Llama 4 moe_layers other than every interleave_moe_layer_step-th layer "
                         f"are not modelled, got {moe_layers!r}")
    if step > 1:
        out["moe_layer_step"] = step
    chunk = _hf_int(config, "attention_chunk_size", default=None)
    if chunk is not None:
        rope = config.get("no_rope_layers")
        if rope is None:
            interval = _hf_int(config, "no_rope_layer_interval", default=4)
            rope = [int((i + 1) % interval != 0) for i in range(layers)]
        if len(rope) != layers or any(x not in (0, 1) for x in rope):
            raise ValueError(f"from_hf_config: no_rope_layers must give 0 or 1 for each of the {layers} layers")
        out["attention_chunk"] = chunk
        out["chunked_layers"] = int(sum(rope))
    return out


def _hf_yarn_attention_factor(rope_scaling) -> float:
    """YaRN's attention factor from a config's ``rope_scaling`` (:func:`yarn_attention_factor`;
    its own ``attention_factor`` where it gives one); 1 for any other RoPE scaling or none."""
    if not isinstance(rope_scaling, dict) or (rope_scaling.get("rope_type") or rope_scaling.get("type")) != "yarn":
        return 1.0

    def number(key: str, required: bool = False):
        x = rope_scaling.get(key)
        if x is None and not required:
            return None
        if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) or x <= 0:
            raise ValueError(f"from_hf_config: rope_scaling's {key!r} must be a positive number, got {x!r}")
        return float(x)
    given = number("attention_factor")
    if given is not None:
        return given
    return yarn_attention_factor(number("factor", required=True), number("mscale"), number("mscale_all_dim"))


def _hf_cap(config: dict, key: str) -> float:
    """A soft-capping value of a Hugging Face config (``final_logit_softcapping``,
    ``attn_logit_softcapping``): a positive number, or null / absent for none."""
    cap = config.get(key)
    if cap is None:
        return 0.0
    if isinstance(cap, bool) or not isinstance(cap, (int, float)) or not math.isfinite(cap) or cap < 0:
        raise ValueError(f"from_hf_config: {key!r} must be a non-negative number (or null), got {cap!r}")
    return float(cap)


def _hf_sliding_window(config: dict, mt: str, gemma: bool, layers: int, seq_len: int) -> dict:
    """``sliding_window`` and ``sliding_layers`` of a Hugging Face config: the layers its
    ``layer_types`` mark ``sliding_attention``; else Gemma 2's every other layer (the even ones),
    Gemma 3's all but every ``sliding_window_pattern``-th (default 6), Mistral's every layer when
    ``use_sliding_window`` (default on for ``mistral``).  Empty when no layer's window is shorter
    than the sequence."""
    window = config.get("sliding_window")
    types = config.get("layer_types")      # a list, or None (_hf_refuse_other_mixers checked it)
    if window is None:
        return {}
    if isinstance(window, bool) or not isinstance(window, int) or window <= 0:
        # a window cosearch cannot read would be dropped: the layers priced as full attention
        raise ValueError(f"from_hf_config: 'sliding_window' must be a positive integer (or null), got {window!r}")
    if window >= seq_len:
        return {}
    if isinstance(types, list) and types:
        n = sum(1 for t in types if str(t) == "sliding_attention")
        if len(types) != layers:
            raise ValueError(f"from_hf_config: layer_types lists {len(types)} layers for {layers}")
    elif mt == "gemma2":
        n = (layers + 1) // 2
    elif mt in ("gemma3", "gemma3_text"):
        pattern = config.get("sliding_window_pattern", 6)
        if isinstance(pattern, bool) or not isinstance(pattern, int) or pattern < 1:
            raise ValueError(f"from_hf_config: sliding_window_pattern must be a positive integer, got {pattern!r}")
        n = layers - layers // pattern
    elif _hf_bool(config, "use_sliding_window", mt == "mistral"):
        n = layers
    else:
        return {}
    return {"sliding_window": int(window), "sliding_layers": int(n)} if n else {}


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
    # Llama 3.1 (Grattafiori et al. 2024, Table 3, and the released config.json files): vocab
    # 128256, SwiGLU, RMSNorm, RoPE, GQA with 8 KV heads, no biases, untied; trained at 8,192.
    "llama3-8b": _llama2("llama3-8b", 32, 4096, 32, 8, 14336).with_(vocab=128256, seq_len=8192),
    "llama3-70b": _llama2("llama3-70b", 80, 8192, 64, 8, 28672).with_(vocab=128256, seq_len=8192),
    "llama3-405b": _llama2("llama3-405b", 126, 16384, 128, 8, 53248).with_(vocab=128256, seq_len=8192),
    # Jiang et al. 2024 (Mixtral of Experts) and its config.json: 32 x 4096, 32 heads, 8 KV
    # heads, 8 experts of 14,336 (SwiGLU), top-2, vocab 32000, untied: 46.7B total, 12.9B active.
    "mixtral-8x7b": ModelConfig("mixtral-8x7b", 32, 4096, 32, 14336, 32000, 4096, kv_heads=8, activation="swiglu",
                                norm="rmsnorm", position="rotary", bias=False, tie_embeddings=False, dropout=False,
                                num_experts=8, experts_per_token=2),
    # Mistral AI's Mixtral-8x22B-v0.1 config.json: 56 x 6144, 48 heads, 8 KV heads, 8 experts of
    # 16,384 (SwiGLU), top-2, vocab 32768, untied: 141B total, 39B active (Mistral's announcement).
    "mixtral-8x22b": ModelConfig("mixtral-8x22b", 56, 6144, 48, 16384, 32768, 4096, kv_heads=8, activation="swiglu",
                                 norm="rmsnorm", position="rotary", bias=False, tie_embeddings=False, dropout=False,
                                 num_experts=8, experts_per_token=2),
    # Qwen/Qwen3-30B-A3B config.json: 48 x 2048, 32 heads of 128 (head_dim 128), 4 KV heads, 128
    # experts of 768 (moe_intermediate_size; intermediate_size 6144 unused, every layer MoE), top-8, no
    # shared expert, vocab 151936, untied: 30.5B total, 3.3B active (its
    # model card); per-head q/k RMSNorms (q_norm, k_norm: 128 weights each).
    "qwen3-30b-a3b": ModelConfig("qwen3-30b-a3b", 48, 2048, 32, 6144, 151936, 4096, kv_heads=4, head_size=128,
                                 activation="swiglu", norm="rmsnorm", position="rotary", bias=False,
                                 tie_embeddings=False, dropout=False, num_experts=128, experts_per_token=8,
                                 moe_ffn_hidden=768, qk_norm="head"),
    # Qwen/Qwen3-235B-A22B config.json: 94 x 4096, 64 heads of 128, 4 KV heads, 128 experts of 1,536,
    # top-8, vocab 151936, untied: 235B total, 22B active (its model card); per-head q/k RMSNorms.
    "qwen3-235b-a22b": ModelConfig("qwen3-235b-a22b", 94, 4096, 64, 12288, 151936, 4096, kv_heads=4,
                                   head_size=128, activation="swiglu", norm="rmsnorm", position="rotary", bias=False,
                                   tie_embeddings=False, dropout=False, num_experts=128, experts_per_token=8,
                                   moe_ffn_hidden=1536, qk_norm="head"),
    # moonshotai/Kimi-K2 config.json (DeepSeek-V3's architecture): 61 x 7168, 64 heads, MLA (q rank
    # 1536, kv rank 512, rope 64, head 128), 384 routed experts of 2,048 (top-8) + 1 shared, the
    # first layer dense (18,432), vocab 163840, untied: 1.04T total, 32B active (its model card).
    "kimi-k2": ModelConfig("kimi-k2", 61, 7168, 64, 18432, 163840, 4096, head_size=128, activation="swiglu",
                           norm="rmsnorm", position="rotary", bias=False, tie_embeddings=False, dropout=False,
                           num_experts=384, experts_per_token=8, moe_ffn_hidden=2048, shared_experts=1,
                           dense_layers=1, mla=(1536, 512, 64)),
    # xAI grok-1 release (model.py): 64 x 6144, 48 heads of 128, 8 KV heads, 8 experts of
    # 32,768 (gated), top-2, vocab 131072: 314B parameters.
    "grok-1": ModelConfig("grok-1", 64, 6144, 48, 32768, 131072, 8192, kv_heads=8, activation="geglu",
                          norm="rmsnorm", position="rotary", bias=False, tie_embeddings=True, dropout=False,
                          num_experts=8, experts_per_token=2),
    # openai/gpt-oss-120b config.json: 36 x 2880, 64 heads of 64, 8 KV heads, 128 experts of 2,880
    # (SwiGLU), top-4, vocab 201088, untied, every other layer a 128-token sliding window
    # (layer_types); attention and expert biases; 116.8B total, 5.1B active (its model card); the
    # gated activation clamped at swiglu_limit 7.0; YaRN RoPE at factor 32 (rope_scaling, no
    # attention_factor: 0.1 ln 32 + 1 on cos and sin); its attention sinks (one learned logit per
    # head and layer).
    "gpt-oss-120b": ModelConfig("gpt-oss-120b", 36, 2880, 64, 2880, 201088, 4096, kv_heads=8, head_size=64,
                                activation="swiglu", norm="rmsnorm", position="rotary", bias=True,
                                tie_embeddings=False, dropout=False, num_experts=128, experts_per_token=4,
                                moe_ffn_hidden=2880, sliding_window=128, sliding_layers=18, activation_clamp=7.0,
                                rope_attention_factor=yarn_attention_factor(32.0), attention_sinks=True),
    # openai/gpt-oss-20b config.json: gpt-oss-120b's layers, 24 of them, with 32 experts
    # (num_local_experts 32, num_experts_per_tok 4, layer_types alternating from a sliding
    # one): 20.9B total, 3.6B active (its model card: 21B / 3.6B).
    "gpt-oss-20b": ModelConfig("gpt-oss-20b", 24, 2880, 64, 2880, 201088, 4096, kv_heads=8, head_size=64,
                               activation="swiglu", norm="rmsnorm", position="rotary", bias=True,
                               tie_embeddings=False, dropout=False, num_experts=32, experts_per_token=4,
                               moe_ffn_hidden=2880, sliding_window=128, sliding_layers=12, activation_clamp=7.0,
                               rope_attention_factor=yarn_attention_factor(32.0), attention_sinks=True),
    # meta-llama/Llama-4-Scout-17B-16E config.json (text_config): 48 x 5120, 40 heads of 128, 8 KV
    # heads, 16 routed experts of 8,192 (SwiGLU, top-1) + 1 shared in every layer, vocab 202048,
    # untied; chunked attention (attention_chunk_size 8192) on the RoPE layers, every 4th layer
    # NoPE with global attention: 109B total, 17B active (its model card); a weightless L2 norm of q
    # and k per head on the RoPE layers (use_qk_norm).
    "llama4-scout": ModelConfig("llama4-scout", 48, 5120, 40, 16384, 202048, 8192, kv_heads=8,
                                activation="swiglu", norm="rmsnorm", position="rotary", bias=False,
                                tie_embeddings=False, dropout=False, num_experts=16, experts_per_token=1,
                                moe_ffn_hidden=8192, shared_experts=1, attention_chunk=8192, chunked_layers=36,
                                qk_norm="l2"),
    # meta-llama/Llama-4-Maverick-17B-128E config.json: Scout's layers with 128 routed experts in
    # every other layer (interleave_moe_layer_step 2), the rest dense of 16,384
    # (intermediate_size_mlp): 400B total, 17B active (its model card).
    "llama4-maverick": ModelConfig("llama4-maverick", 48, 5120, 40, 16384, 202048, 8192, kv_heads=8,
                                   activation="swiglu", norm="rmsnorm", position="rotary", bias=False,
                                   tie_embeddings=False, dropout=False, num_experts=128, experts_per_token=1,
                                   moe_ffn_hidden=8192, shared_experts=1, moe_layer_step=2, attention_chunk=8192,
                                   chunked_layers=36),
    # DeepSeek-V3 technical report and config.json: 61 x 7168, 128 heads, MLA (q rank 1536, kv rank
    # 512, rope 64, head 128), 256 routed experts of 2,048 (top-8) + 1 shared, first 3 layers dense
    # (18,432), vocab 129280, untied: 671B total, 37B active (the MTP module left out).
    "deepseek-v3": ModelConfig("deepseek-v3", 61, 7168, 128, 18432, 129280, 4096, head_size=128,
                               activation="swiglu", norm="rmsnorm", position="rotary", bias=False,
                               tie_embeddings=False, dropout=False, num_experts=256, experts_per_token=8,
                               moe_ffn_hidden=2048, shared_experts=1, dense_layers=3, mla=(1536, 512, 64)),
    # deepseek-ai/DeepSeek-V2 config.json: 60 x 5120, 128 heads, MLA (q rank 1536, kv rank 512, rope
    # 64, head 128), 160 routed experts of 1,536 (top-6) + 2 shared, the first layer dense (12,288),
    # vocab 102400, untied: 236B total, 21B active (its model card).
    "deepseek-v2": ModelConfig("deepseek-v2", 60, 5120, 128, 12288, 102400, 4096, head_size=128,
                               activation="swiglu", norm="rmsnorm", position="rotary", bias=False,
                               tie_embeddings=False, dropout=False, num_experts=160, experts_per_token=6,
                               moe_ffn_hidden=1536, shared_experts=2, dense_layers=1, mla=(1536, 512, 64)),
    # deepseek-ai/DeepSeek-V2-Lite config.json: 27 x 2048, 16 heads, MLA without a query LoRA (kv rank
    # 512, rope 64, head 128), 64 routed experts of 1,408 (top-6) + 2 shared, the first layer dense
    # (10,944), vocab 102400, untied: 15.7B total, 2.4B active (its model card).
    "deepseek-v2-lite": ModelConfig("deepseek-v2-lite", 27, 2048, 16, 10944, 102400, 4096, head_size=128,
                                    activation="swiglu", norm="rmsnorm", position="rotary", bias=False,
                                    tie_embeddings=False, dropout=False, num_experts=64, experts_per_token=6,
                                    moe_ffn_hidden=1408, shared_experts=2, dense_layers=1, mla=(0, 512, 64)),
    # DeepSeek-V4-Flash (AI-Hypercomputer/maxtext configs/models/deepseek4-284b.yml at e591f30, which
    # mirrors its HF config.json): 43 x 4096, 64 query heads of 512 on one shared K/V head (64 rotary
    # dims), compressed attention (ratios 0, 0, then 4 and 128 alternating; window 128; q and output
    # ranks 1024 in 8 output groups; an indexer of 64 heads of 128 keeping 512), 4 hyper-connection
    # streams, 256 routed experts of 2,048 (SwiGLU, top-6) + 1 shared in every layer (the first 3
    # hash-routed), vocab 129280, untied: 284B (the MTP layer left out).
    "deepseek-v4-flash": ModelConfig(
        "deepseek-v4-flash", 43, 4096, 64, 2048, 129280, 4096, kv_heads=1, head_size=512, activation="swiglu",
        norm="rmsnorm", position="rotary", bias=False, tie_embeddings=False, dropout=False, num_experts=256,
        experts_per_token=6, moe_ffn_hidden=2048, shared_experts=1, hyper_connections=4,
        compressed_attention=CompressedAttention(ratios=(0, 0) + (4, 128) * 20 + (4,), window=128, q_lora_rank=1024,
                                                 o_groups=8, o_lora_rank=1024, index_heads=64, index_head_dim=128,
                                                 index_topk=512, rope_head_dim=64)),
}


def preset_names() -> list[str]:
    """Names accepted by :func:`preset`."""
    return sorted(PRESETS)


def model_arg(model: ModelConfig | str, where: str) -> ModelConfig:
    """A function's ``model`` argument: a :class:`ModelConfig`, or a preset's name (:func:`preset`);
    anything else refused naming ``where`` (before an AttributeError from deep inside)."""
    if isinstance(model, ModelConfig):
        return model
    if isinstance(model, str):
        return preset(model)
    raise ValueError(f"{where}: model must be a ModelConfig or a model preset's name, got {type(model).__name__}")


def preset(name: str | ModelConfig) -> ModelConfig:
    """Return a published model configuration by name (case-insensitive)."""
    if isinstance(name, ModelConfig):
        return name
    key = str(name).lower().replace("_", "-")
    if key not in PRESETS:
        raise ValueError(f"unknown model preset {name!r}; known presets: {', '.join(preset_names())}")
    return PRESETS[key]
