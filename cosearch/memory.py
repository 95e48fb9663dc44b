"""Training-memory model: parameters, gradients, optimizer state and activations.

Per chip, for the layers of one pipeline stage under tensor parallelism ``tp``:

* **static** = params/tp x (weight + gradient + optimizer bytes).  Mixed-precision
  Adam keeps bf16 weights (2) and gradients (2) plus fp32 master weights, momentum
  and variance (12): 16 bytes/param (:class:`MemoryConfig`; Rajbhandari et al., ZeRO,
  2020).  ZeRO-1 (Megatron's distributed optimizer) shards the optimizer state over
  the data-parallel ranks, ZeRO-2 also the gradients, ZeRO-3 also the weights
  (:func:`cosearch._kernels.formulas.static_bytes`, the one copy).
* **activations** (Korthikanti et al., "Reducing Activation Recomputation in Large
  Transformer Models", 2022, eq. 2 and Table 2), per layer and microbatch of ``b``
  sequences of length ``s``, hidden ``h``, ``a`` heads, for 2-byte activations with
  1-byte dropout masks::

      none:       s b h (10 + 24/t + 5 a s / (h t))     (sequence parallel: s b h (34 + 5 a s / h) / t)
      selective:  s b h (10 + 24/t)                     (sequence parallel: s b h 34 / t)
      full:       2 s b h per layer (/t with sequence parallelism), + one layer's full stash

  generalised to other MLP widths, gated MLPs, GQA's smaller K/V, other dtypes and
  no-dropout models (:func:`layer_activation_bytes`); an MoE layer keeps the MLP activations of
  each of a token's ``experts_per_token`` routed copies and of its shared experts, plus the
  dispatched copies of its input.  With flash attention the
  ``5 a s / h`` score terms are gone (only the fp32 softmax statistics, ``4 a s b``
  bytes, are kept).
* **in flight**: stage ``s`` of ``p`` keeps ``min(p - s, m)`` microbatches under 1F1B;
  interleaving is in :func:`cosearch._kernels.formulas.inflight`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ._kernels import formulas
from ._validate import flag
from .graph import ATTENTION_FORMAT_BYTES, OPERAND_BYTES
from .models import ModelConfig

__all__ = ["MemoryConfig", "layer_activation_bytes", "fp8_attention_saved_bytes", "MODULE_TERMS", "every_other_matmul_bytes", "every_other_matmul_exact", "maxtext_saved_bytes", "layer_input_bytes",
           "embedding_activation_bytes",
           "head_activation_bytes", "static_bytes", "in_flight", "moe_dispatch_buffer_bytes", "DEEPEP_CONFIGS"]


#: Most bytes per parameter a MemoryConfig field may give (a typo guard; fp64 weights, gradients
#: and two Adam moments are 32 in all).
MAX_BYTES_PER_PARAM = 64


@dataclass(frozen=True)
class MemoryConfig:
    """Bytes per parameter kept for training (weights, gradients, optimizer state)."""

    weight_bytes: float = 2.0
    grad_bytes: float = 2.0
    optimizer_bytes: float = 12.0

    def __post_init__(self) -> None:
        for f in ("weight_bytes", "grad_bytes", "optimizer_bytes"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise ValueError(f"MemoryConfig.{f} must be a finite number >= 0, got {v!r}")
            if v > MAX_BYTES_PER_PARAM:
                raise ValueError(f"MemoryConfig.{f} = {v:g} bytes per parameter is more than any training keeps "
                                 f"({MAX_BYTES_PER_PARAM} at most: fp64 weights, gradients and Adam moments are "
                                 "32): a typo or a unit slip?")

    @property
    def bytes_per_param(self) -> float:
        return self.weight_bytes + self.grad_bytes + self.optimizer_bytes

    @classmethod
    def totalling(cls, bytes_per_param: float) -> MemoryConfig:
        """The default's bf16 weights and gradients (the copies the layers compute with and the
        collectives move) and the rest of ``bytes_per_param`` as optimizer state: a framework's
        parameter state of that total (fp32 weights and gradients with Adam's moments, 16)."""
        d = cls()
        return cls(optimizer_bytes=float(bytes_per_param) - d.weight_bytes - d.grad_bytes)


def fp8_attention_saved_bytes(attention_format: str, scaling_recipe: str) -> tuple[float, float | None]:
    """Bytes an element of Q, K, V and of the output O that Transformer Engine's fused FP8
    attention keeps for its backward (``FusedAttnFunc.forward`` in
    ``transformer_engine/pytorch/attention/dot_product_attention/backends.py`` at d0067d0da, with
    its FP8 backward, ``NVTE_FP8_DPA_BWD=1`` by default): the quantized Q, K, V in place of the bf16
    ones, and O in FP8 under delayed scaling but in the activation dtype (None here) under current
    scaling (``NVTE_DPA_FP8CS_O_in_F16``, default 1) and MXFP8.  MXFP8's quantizer keeps a row-wise
    and a column-wise copy of Q, K and V (``get_attention_quantizers`` in ``utils.py``: the
    backward's transposed operands), each with its block scales: ``2 (1 + 1/32)`` bytes, a little
    more than bf16's 2.  ``attention_format``: ``"fp8"`` or ``"mxfp8"``
    (:func:`cosearch.plan.fp8_attention_format`); ``scaling_recipe``: the recipe in force
    (``"delayed"``, ``"tensorwise"`` or ``"mxfp8"``)."""
    if attention_format not in ATTENTION_FORMAT_BYTES:
        raise ValueError(f"attention_format {attention_format!r}: choose one of {', '.join(ATTENTION_FORMAT_BYTES)}")
    if attention_format == "mxfp8":
        return 2.0 * ATTENTION_FORMAT_BYTES["mxfp8"], None
    if scaling_recipe not in ("delayed", "tensorwise"):
        raise ValueError(f"per-tensor FP8 attention runs under the 'delayed' or 'tensorwise' recipe, not "
                         f"{scaling_recipe!r}")
    return ATTENTION_FORMAT_BYTES["fp8"], (ATTENTION_FORMAT_BYTES["fp8"] if scaling_recipe == "delayed" else None)


def _activation_terms(config: ModelConfig, tp: int, flash_attention: bool, precision: str,
                      sequence_parallel: bool, eager_clamp: bool = False,
                      experts_gathered: bool = False, proj_input_cast: bool = True,
                      attention_saved: tuple[float, float | None] | None = None,
                      experts_bf16: bool = False) -> dict[str, float]:
    """The activations one layer keeps with nothing recomputed, by tensor, in bytes per token and
    per ``hidden`` on one chip (Korthikanti et al.'s terms, module docstring).  ``eager_clamp``:
    a clamped activation's clamp runs as eager passes (:func:`cosearch.graph.expert_eager_bytes`),
    whose backward keeps the up projection's output while the activation keeps the clamped copy:
    a second ``moe_fc1``-sized tensor (``moe_clamped``).  ``experts_gathered``: the routed experts
    are split over the tp ranks and their input copies gathered over them (expert tensor
    parallelism = tp > 1 under sequence parallelism, :func:`cosearch.graph._moe_mlp_gathered`):
    every tp rank keeps all the copies its experts' up projection reads (``moe_dispatched``
    whole, not split by tp).  ``proj_input_cast`` False: the attention's output projection keeps
    no low-precision copy of its input, only the bf16 output the attention keeps anyway
    (:attr:`cosearch.engine.Engine.attn_proj_original_input`).  ``attention_saved``: FP8 attention's
    ``(Q/K/V, O)`` bytes an element (:func:`fp8_attention_saved_bytes`; None: bf16 attention):
    the attention keeps its quantized Q, K, V instead of the bf16 ones, and O in FP8 where the
    recipe keeps it so (the projection then keeps the bf16 O itself where it takes no cast).
    ``experts_bf16``: the routed experts' GEMMs run in bf16 in a low-precision layer (their inputs
    kept in bf16: the dispatched copies and the activation output)."""
    flag("flash_attention", flash_attention)
    flag("sequence_parallel", sequence_parallel)
    c = config
    s, h, a, t = c.seq_len, c.hidden, c.heads, tp
    e = c.dtype_bytes / 2.0  # the formula counts 2-byte activations
    mask = 1.0 if c.dropout else 0.0
    # K/V heads per rank over Q heads, times tp: with fewer K/V heads than tp ranks each rank holds
    # one (Megatron-Core replicates them; the layer graph's K/V projection likewise)
    kv_ratio = max(1, c.kv_heads // t) * t / c.heads
    lowp = OPERAND_BYTES.get(precision, 0.0)
    fp8 = lowp > 0.0
    act_out = lowp if fp8 else 2.0 * e
    # replicated (split by tp only with sequence parallelism): 2 norm inputs (4), residual
    # dropout masks (2), QKV and MLP inputs (the norm outputs: 4, or their FP8 casts)
    rep = {"norm_in": 4.0 * e, "masks": 2.0 * mask, "norm_out": 2.0 * lowp if fp8 else 4.0 * e}
    if c.post_norms:
        # Gemma's post norms: the attention's and the MLP's outputs, their inputs (2 each)
        rep["post_norm_in"] = 4.0 * e
    # split by tp: Q, K, V (K/V scaled for GQA) at their projected widths (heads x head_dim, which
    # is not hidden for Qwen3, GPT-OSS or Gemma; MLA's Q and K carry the rope dims too),
    # attention-projection input (2) and its FP8 cast, MLP: fc1 output(s) and activation output
    per_w = 2.0 * (2.0 if c.gated else 1.0) * e
    q_w = c.q_dim / h
    if c.mla is not None:
        qk_w = c.heads * (c.head_dim + c.mla[2]) / h
        qkv_w = 2.0 * qk_w + q_w
    else:
        qkv_w = q_w * (1.0 + 2.0 * kv_ratio)
    # the attention's Q, K, V and O (O also the output projection's input, whose backward keeps
    # its low-precision cast, or the bf16 O where it takes none)
    qkv_b, o_b = 2.0 * e, 2.0 * e
    if attention_saved is not None:
        qkv_b, o_saved = attention_saved
        o_b = 2.0 * e if o_saved is None else o_saved
    proj_keeps = lowp if flag("proj_input_cast", proj_input_cast) else (0.0 if o_b == 2.0 * e else 2.0 * e)
    split = {"qkv": qkv_b * qkv_w, "attn_proj_in": (o_b + proj_keeps) * q_w}
    if c.mla is not None:
        # the q and kv latents (as the graph prices them, replicated over the tp ranks, split with
        # sequence parallelism): each norm's input, and its output that the up projection reads
        # (Megatron-Core's LayerNormLinear keeps both; mla_up_proj's recompute, which reruns the
        # norm inside the up projection, keeps only the first)
        lat = (c.mla[0] + c.mla[1]) / h
        rep.update(mla_latent_in=2.0 * e * lat, mla_latent_normed=(lowp if fp8 else 2.0 * e) * lat)
    if c.qk_norm != "none":
        # the q/k norms' inputs (the projected q and k; their normed outputs are the RoPE'd Q and K
        # above), kept for the norms' backward
        split["qk_norm_in"] = 2.0 * q_w * (1.0 + kv_ratio) * e
    whole: dict[str, float] = {}      # kept whole on every tp rank, sequence parallel or not
    if c.hyper_connections > 1:
        # each sublayer keeps its n residual streams (the hyper-connection norm's and mixes'
        # input) besides the mixed input of its own norm
        rep["norm_in"] = 4.0 * e * (c.hyper_connections + 1)
    ca = c.compressed_attention
    if ca is not None:
        # DeepSeek-V4: the up-projected queries (what mla_up_proj recomputes), the attention
        # output and the grouped projection's output (each with its low-precision cast); kept
        # beside them (replicated over tp, as their GEMMs are): the query latent, the shared K/V
        # head, the compressors' projections, and the indexer's queries (their mean over layers)
        q_w, out_w = c.heads * c.head_dim / h, ca.o_groups * ca.o_lora_rank / h
        split = {"qkv": 2.0 * q_w * e, "attn_proj_in": (2.0 * e + lowp) * (q_w + out_w)}
        lat = (ca.q_lora_rank + c.kv_heads * c.head_dim + ca.compressor_width(c.head_dim)) / h
        split["attn_index"] = 2.0 * e * ca.csa_share * ca.index_heads * ca.index_head_dim / h
        whole["attn_latents"] = 2.0 * e * lat
    if c.moe:
        # every routed copy of a token (k of them) and the shared experts keep their MLP
        # activations, plus the dispatched (permuted) copies of the token's input
        # with a capacity factor, the slots each token's copies fill (padded: the whole capacity)
        from .graph import moe_expert_tokens
        per, copies = moe_expert_tokens(c, s, 1, 1)
        slots = copies / s
        routed = slots * c.expert_ffn / h
        shared = c.shared_experts * c.expert_ffn / h
        expert_act_out = 2.0 * e if experts_bf16 else act_out
        split.update(moe_fc1=routed * per_w, moe_act=routed * expert_act_out, shared_mlp=shared * (per_w + act_out))
        # the dispatched copies are what the experts' up projection keeps: their low-precision cast
        # under FP8 / FP4 (Transformer Engine's GroupedLinear saves the quantized input, as
        # Linear does the norms' outputs above; the permute and the dispatch keep none)
        dispatched = (lowp if fp8 and not experts_bf16 else 2.0 * e) * slots
        (whole if flag("experts_gathered", experts_gathered) else split)["moe_dispatched"] = dispatched
        if eager_clamp and c.activation_clamp:
            split["moe_clamped"] = routed * per_w
        if c.moe_einsum_dispatch:
            # the one-hot dispatch and combine masks (E C slots for every token: S x E x C a
            # sequence) the einsums' backward reads
            split["moe_masks"] = 2.0 * copies * 2.0 * e / h
    else:
        f_ratio = c.ffn_hidden / h
        split.update(mlp_fc1=f_ratio * per_w, mlp_act=f_ratio * act_out)
    if flash_attention:
        attn = 4.0 * a / h  # fp32 log-sum-exp per row and head
    else:  # softmax output (2), dropout mask (1), dropout output (2) per a s^2 b
        attn = (2.0 * e + mask * 1.0 + mask * 2.0 * e) * a * s / h
    out = {k: v / t if sequence_parallel else v for k, v in rep.items()}
    out.update({k: v / t for k, v in split.items()})
    out.update(whole)
    out["attn"] = attn / t
    return out


#: The activation terms (:func:`_activation_terms`) each Megatron-Core recompute module stops
#: keeping (:data:`cosearch.graph.RECOMPUTE_MODULES`): the module's own outputs, recomputed from
#: its kept input in the backward.  ``mla_up_proj``: the Q, K, V its up projections make and the
#: normed latents they read (the latents themselves are kept either way).
MODULE_TERMS = {"core_attn": ("attn",), "layernorm": ("norm_out",), "moe_act": ("moe_act", "moe_clamped"),
                "mla_up_proj": ("qkv", "mla_latent_normed"), "mlp": ("mlp_fc1", "mlp_act"),
                "moe": ("moe_fc1", "moe_act", "moe_clamped", "shared_mlp", "moe_dispatched", "moe_masks"),
                "shared_experts": ("shared_mlp",)}


def layer_activation_bytes(config: ModelConfig, tp: int, microbatch: int,
                           sequence_parallel: bool = False, recompute: str = "none",
                           flash_attention: bool = False, precision: str = "bf16",
                           modules: tuple[str, ...] = (), eager_clamp: bool = False,
                           experts_gathered: bool = False, proj_input_cast: bool = True,
                           attention_saved: tuple[float, float | None] | None = None,
                           experts_bf16: bool = False) -> float:
    """Activations one transformer layer keeps for its backward pass, per chip and
    microbatch, under ``recompute`` ``"none"`` / ``"selective"`` / ``"full"``
    (full: only the layer input).  Under ``precision="fp8"`` (``"fp4"``: NVFP4, 0.5625 bytes)
    the weight GEMMs keep the low-precision casts of their inputs for the weight gradient (Transformer Engine's ``Linear`` /
    ``LayerNormLinear`` save the cast input, 1 byte, instead of the bf16 one): the two norm
    outputs and the MLP's activation output shrink to 1 byte per element, while the
    attention output stays (flash attention's backward needs it) and its FP8 cast is added.
    ``"selective"`` drops the attention scores (Megatron's attention core; flash attention keeps
    none but its log-sum-exp); with ``modules`` (Megatron-Core's ``recompute_modules``) it drops
    the outputs of those modules instead (:data:`MODULE_TERMS`).  ``eager_clamp``: a clamped
    activation clamped by eager passes keeps one more copy of the experts' up projection;
    ``experts_gathered``: every tp rank keeps all the copies its tp-split experts read;
    ``proj_input_cast`` False: the attention's output projection keeps its bf16 input only;
    ``attention_saved``: FP8 attention's Q/K/V and O bytes (:func:`fp8_attention_saved_bytes`);
    ``experts_bf16``: the routed experts in bf16 in a low-precision layer (:func:`_activation_terms`)."""
    if recompute == "full":
        return layer_input_bytes(config, tp, microbatch, sequence_parallel)
    if recompute not in ("none", "selective"):
        raise ValueError(f"recompute={recompute!r}; choose 'none', 'selective' or 'full'")
    if attention_saved is not None and not flash_attention:
        raise ValueError("attention_saved: FP8 attention is a fused attention kernel; it needs flash_attention=True")
    terms = _activation_terms(config, tp, flash_attention, precision, sequence_parallel, flag("eager_clamp", eager_clamp),
                              experts_gathered, proj_input_cast, attention_saved, flag("experts_bf16", experts_bf16))
    dropped: set[str] = set()
    if recompute == "selective":
        if modules:
            for m in modules:
                if m not in MODULE_TERMS:
                    raise ValueError(f"recompute module {m!r}: choose from {', '.join(MODULE_TERMS)}")
                dropped.update(MODULE_TERMS[m])
        elif not flash_attention:
            dropped.add("attn")
    return config.seq_len * microbatch * config.hidden * sum(v for k, v in terms.items() if k not in dropped)


def maxtext_saved_bytes(config: ModelConfig, tp: int, microbatch: int, sequence_parallel: bool,
                        places: dict[str, str]) -> tuple[float, float]:
    """(bytes kept in HBM, bytes sent to host memory) per layer, chip and microbatch under
    MaxText's ``remat_policy: custom`` (``places``: :func:`cosearch.graph.maxtext_policy`; its
    ``minimal``: :func:`cosearch.graph.maxtext_minimal_places`): each named tensor its ``'device'``
    or ``'offload'`` place holds, in the activation dtype — the layer input (``h``), the Q, K and V
    projections (``q_dim``, ``kv_dim`` each; split by tp; MLA's query and key ``heads x (head_dim +
    rope)`` wide and its value ``heads x head_dim``, named ``query_proj``, ``key_proj``,
    ``value_proj`` after their up projections in MaxText's ``attention_mla.py``: its ``kv_proj`` and
    ``qkv_proj`` name nothing; its latents ``query_wa_proj`` (``q_lora_rank``), ``kv_wa_proj``
    (``kv_lora_rank + rope``) and their normed ``mla_q``, ``mla_kv``), the attention context
    (``heads x head_dim`` and the kernel's fp32 log-sum-exp a head), the attention's output
    before its projection (``attention_out``, ``heads x head_dim``), the attention output
    projection's (``out_proj``, ``h``), a dense MLP's (or the shared experts') input projections (not its output: it only
    enters the residual sum, whose backward reads nothing, so JAX keeps no residual for it), an MoE
    layer's routed expert projections at the slots each token fills, each under any of its names
    (:func:`cosearch.graph.maxtext_expert_names`: the gate's and the down projection's carry the
    dense MLP's names too, and the down projection's output is kept: the routing weights' gradient
    reads it), the grouped GEMMs' sorted input with its int32 index and routing weight a slot
    (``moe_x_sorted``; a per-layer vector of group sizes, a few hundred bytes, not counted); everything
    else is rematerialized.  The layer input stays in HBM under ``'remat'``
    too: it is the input of the checkpointed layer, which JAX keeps to rerun it (only ``'offload'``
    moves it).  The residuals of MaxText's own layer scan, compiled for a v5e slice, show each
    (``cosearch/data/maxtext_layer_residuals.csv``: dense, Mixtral- and DeepSeek-block layers under
    ``minimal``, named and custom policies, every name but ``moe_mlpwi``; ``tests/test_circular_pipeline.py``)."""
    from .graph import maxtext_expert_names, moe_expert_tokens
    c = config
    t = tp
    dt = c.dtype_bytes
    sp = t if sequence_parallel else 1
    rep = c.hidden / sp
    ffn = (c.shared_experts * c.expert_ffn if c.moe else c.ffn_hidden) / t
    slots = moe_expert_tokens(c, c.seq_len, 1, 1)[1] / c.seq_len if c.moe else 0.0
    moe_ffn = slots * c.expert_ffn / t
    w0, w1, wo = maxtext_expert_names(c) if c.moe else ((), (), ())
    if c.mla is not None:
        qr, kvr, rope = c.mla
        attention = ((c.heads * (c.head_dim + rope) / t, ("query_proj",)),
                     (c.heads * (c.head_dim + rope) / t, ("key_proj",)),
                     (c.heads * c.head_dim / t, ("value_proj",)),
                     # the latents (replicated over tp, as the down projections run)
                     (qr / sp, ("query_wa_proj",)), (qr / sp, ("mla_q",)),
                     ((kvr + rope) / sp, ("kv_wa_proj",)), (kvr / sp, ("mla_kv",)))
    else:
        attention = ((c.q_dim / t, ("query_proj", "qkv_proj")),
                     (c.kv_dim / t, ("key_proj", "kv_proj", "qkv_proj")),
                     (c.kv_dim / t, ("value_proj", "kv_proj", "qkv_proj")))
    # each saved tensor once, under whichever of its checkpoint names the policy keeps (a model has
    # either the separate projections or the fused ones, never both: MaxText's fused_qkv and
    # fused_mlp); a dense MLP's (or the shared experts') output is never a residual (above); widths
    # in activation values a token, plus fixed bytes (the attention's fp32 log-sum-exp a head;
    # the sorted tokens' int32 index and routing weight a slot)
    moe_sorted = slots * (c.hidden + 4.0 / dt + 1.0) if c.moe and not c.moe_einsum_dispatch else 0.0
    tensors = ((rep * c.hyper_connections, ("decoder_layer_input",)), *attention,
               ((c.heads * c.head_dim + c.heads * 4.0 / dt) / t, ("context",)),
               (c.heads * c.head_dim / t, ("attention_out",)), (rep, ("out_proj",)),
               # with post norms the MLP's output is a residual (its norm's backward reads it)
               (rep if c.post_norms else 0.0, ("mlpwo",)),
               (ffn, ("mlpwi_0", "mlpwi")), (ffn if c.gated else 0.0, ("mlpwi_1", "mlpwi")),
               (moe_ffn, w0), (moe_ffn if c.gated else 0.0, w1), (slots * c.hidden, wo),
               (moe_sorted, ("moe_x_sorted",)))
    if c.compressed_attention is not None:
        for n in ("query_proj", "key_proj", "value_proj", "kv_proj", "qkv_proj", "context", "attention_out",
                  "out_proj", "query_wa_proj", "kv_wa_proj", "mla_q", "mla_kv"):
            if places.get(n, "remat") != "remat":
                raise ValueError(f"MaxText remat tensor {n}: DeepSeek-V4's compressed attention's projections are "
                                 "not the named ones; leave it 'remat'")
    per_token = {"device": 0.0, "offload": 0.0}
    for width, names in tensors:
        where = next((w for w in (places.get(n, "remat") for n in names) if w != "remat"), "remat")
        if names == ("decoder_layer_input",) and where == "remat":
            where = "device"
        if where != "remat":
            per_token[where] += width * dt
    n = c.seq_len * microbatch
    return n * per_token["device"], n * per_token["offload"]


def every_other_matmul_exact(config: ModelConfig, tp: int) -> bool:
    """Whether :func:`every_other_matmul_bytes` gives what torchtitan's per-op selective
    checkpointing keeps for ``config``'s layer at tensor parallelism ``tp`` (else a plan takes
    Megatron's selective figure, an upper bound): dense multi-head or grouped-query layers, and
    MoE layers of such models without tensor parallelism, linear biases (GPT-OSS's run as
    ``aten.addmm``, kept uncounted) or a capacity factor; not MLA or DeepSeek-V4's attention, nor
    Gemma's post norms (their inputs, the odd matmuls' outputs or not, are not itemized)."""
    c = config
    if c.mla is not None or c.compressed_attention is not None or c.post_norms:
        return False
    return not c.moe or (tp == 1 and not c.bias and not c.moe_capacity_factor and not c.moe_einsum_dispatch)


def every_other_matmul_bytes(config: ModelConfig, tp: int, microbatch: int,
                             sequence_parallel: bool = False, fused_qkv: bool = False,
                             dispatched: bool = False) -> float:
    """Activations one layer keeps under torchtitan's per-op selective checkpointing
    (:attr:`cosearch.engine.Engine.selective_recompute` ``"every-other-matmul"``), per chip and
    microbatch: the checkpointed layer input, the outputs of the odd matmuls in execution order
    (wq, wv, and w1, plus w2 for a gated MLP: wq wk wv wo w1 w3 w2) and SDPA's output with its
    fp32 log-sum-exp; everything else is recomputed.  The row-parallel w2's saved matmul output
    is the local, not yet reduced one (a full ``s x h`` per rank).  ``fused_qkv`` (torchtitan
    0.3's ``FusedQKVLinear``, ``"every-other-matmul-fused-qkv"``): the one wqkv matmul is the
    first, its whole q, k, v output kept (wo, w1, w3, w2 follow with the same parity).

    An MoE layer (:func:`every_other_matmul_exact`; torchtitan 0.3's ``MoE.forward`` and
    ``distributed/activation_checkpoint.py``): the router's gate matmul is force-recomputed and
    not counted, its ``topk`` kept (the fp32 scores and the int64 expert ids of each token's k
    choices), the routed experts' ``_grouped_mm`` outputs recomputed (not in the save list), and
    with ``dispatched`` (expert parallelism > 1) the outputs of the dispatch's and the combine's
    ``all_to_all_single`` kept (each token's k routed copies of h, twice); the shared experts'
    matmuls come after the attention's in the count, as a dense MLP's do."""
    c = config
    s, b, h, t = c.seq_len, microbatch, c.hidden, tp
    db = c.dtype_bytes
    kv = max(1, c.kv_heads // t) * c.head_dim        # this rank's K/V width (a head at least)
    qkv = kv * (2.0 if flag("fused_qkv", fused_qkv) else 1.0)    # wv's, or wqkv's k and v
    layer_in = db * h / (t if sequence_parallel else 1)
    attention = db * (c.q_dim / t + qkv + c.q_dim / t) + 4.0 * c.heads / t
    if not c.moe:
        local = db * h if c.gated else 0.0               # w2's local output
        return s * b * (layer_in + attention + db * c.ffn_hidden / t + local)
    if not every_other_matmul_exact(c, t):
        raise ValueError(f"every_other_matmul_bytes: {c.name}'s MoE layer at tp={t} is not itemized "
                         "(every_other_matmul_exact); take Megatron's selective figure")
    from .graph import moe_expert_tokens
    k = c.experts_per_token
    router = 12.0 * k                                    # topk: fp32 scores and int64 ids, k each
    shared = c.shared_experts * c.expert_ffn
    shared_b = db * shared + (db * h if c.gated and shared else 0.0)
    copies = moe_expert_tokens(c, s, 1, 1)[1] / s        # routed copies a token sends (k, dropless)
    a2a = 2.0 * copies * db * h if flag("dispatched", dispatched) else 0.0
    return s * b * (layer_in + attention + router + shared_b + a2a)


def _hidden_bytes(config: ModelConfig, tp: int, microbatch: int, sequence_parallel: bool) -> float:
    flag("sequence_parallel", sequence_parallel)
    n = config.seq_len * microbatch * config.hidden * config.dtype_bytes
    return n / tp if sequence_parallel else float(n)


def layer_input_bytes(config: ModelConfig, tp: int, microbatch: int,
                      sequence_parallel: bool = False) -> float:
    """The layer input kept under full recomputation, per chip (its ``hyper_connections``
    residual streams)."""
    return config.hyper_connections * _hidden_bytes(config, tp, microbatch, sequence_parallel)


def embedding_activation_bytes(config: ModelConfig, tp: int, microbatch: int,
                               sequence_parallel: bool = False) -> float:
    """The embedding output (and its dropout mask) kept per microbatch."""
    x = _hidden_bytes(config, tp, microbatch, sequence_parallel)
    if config.dropout:
        x += x / config.dtype_bytes
    return x


def head_activation_bytes(config: ModelConfig, tp: int, microbatch: int,
                          sequence_parallel: bool = False, loss_chunks: int = 1) -> float:
    """Final-norm input and the fp32 logits of this rank's vocabulary shard.  ``loss_chunks`` > 1
    (torchtitan's ``ChunkedLossWrapper``, :attr:`cosearch.engine.Engine.loss_chunks`): one chunk's
    logits at a time, plus the chunks' bf16 copy of the final hidden states (``c.contiguous()``
    of each split) and the fp32 buffer their gradients accumulate in (``GradAccumulator``),
    both whole-sequence and replicated over the tp ranks (torchtitan's loss wrapper takes the
    hidden states replicated)."""
    c = config
    tokens = c.seq_len * microbatch
    out = _hidden_bytes(c, tp, microbatch, sequence_parallel) + tokens * math.ceil(c.vocab / tp) * 4.0 / loss_chunks
    if loss_chunks > 1:
        out += tokens * c.hidden * (c.dtype_bytes + 4.0)
    return out


def static_bytes(params_per_chip: float, dp: int, zero: int, mem: MemoryConfig) -> float:
    """Weights + gradients + optimizer state of ``params_per_chip`` parameters."""
    return float(formulas.static_bytes(float(params_per_chip), float(dp), int(zero), mem.weight_bytes,
                                       mem.grad_bytes, mem.optimizer_bytes))


def in_flight(stage: int, stages: int, microbatches: int, virtual_stages: int = 1) -> float:
    """Stage-equivalents of activations stage ``stage`` (0-based) holds."""
    return float(formulas.inflight(int(stage), int(stages), int(microbatches), int(virtual_stages)))


#: DeepEP's (v1, NVSHMEM) normal-kernel configs by expert-parallel group size, dispatch and
#: combine: (NVLink send, NVLink receive, RDMA send, RDMA receive) chunk tokens, as
#: ``Buffer.get_dispatch_config`` / ``get_combine_config`` list them (deepseek-ai/DeepEP
#: ``deep_ep/buffer.py`` at 567632d, 2026-02: the NVSHMEM-based ``Buffer`` API that Megatron-Core's
#: ``fused_a2a`` calls; DeepEP's later v2 is another API).
DEEPEP_CONFIGS = {
    2: ((24, 256, 6, 128), (10, 256, 6, 128)), 4: ((6, 256, 6, 128), (9, 256, 6, 128)),
    8: ((6, 256, 6, 128), (4, 256, 6, 128)), 16: ((36, 288, 20, 128), (4, 288, 12, 128)),
    24: ((32, 288, 8, 128), (1, 288, 8, 128)), 32: ((32, 288, 8, 128), (1, 288, 8, 128)),
    48: ((32, 288, 8, 128), (1, 288, 8, 128)), 64: ((32, 288, 8, 128), (1, 288, 8, 128)),
    96: ((20, 480, 12, 128), (1, 480, 8, 128)), 128: ((20, 560, 12, 128), (1, 560, 8, 128)),
    144: ((32, 720, 12, 128), (2, 720, 8, 128)), 160: ((28, 720, 12, 128), (2, 720, 8, 128)),
}
#: DeepEP's NVLink peers a node (``NUM_MAX_NVL_PEERS``, ``csrc/kernels/configs.cuh``).
DEEPEP_NVL_PEERS = 8


def _deepep_buffer_bytes(hidden: int, ranks: int, sms: int) -> float:
    """DeepEP's ``Buffer`` as Megatron-Core's ``fused_a2a.get_buffer`` sizes it: the larger of the
    dispatch and combine configs' ``get_nvl_buffer_size_hint`` plus the larger of their
    ``get_rdma_buffer_size_hint`` (``csrc/config.hpp``) for ``hidden * 2`` bytes a token
    (``get_hidden_bytes``: at least 2 bytes an element) over ``ranks``, ``sms / 2`` channels.
    Each received token slot carries its row, an 8-byte source meta, 128 int64 top-k indices, 128
    fp32 weights and 128 fp32 scales; an RDMA slot also a 16-byte ``int4``, twice (send and
    receive).  A group size DeepEP does not list (it asserts) takes the next listed one's config."""
    key = min((k for k in DEEPEP_CONFIGS if k >= ranks), default=max(DEEPEP_CONFIGS))
    hb = hidden * 2
    nvl_ranks = min(ranks, DEEPEP_NVL_PEERS)
    rdma_ranks = max(ranks // DEEPEP_NVL_PEERS, 1)
    ch = sms // 2
    slot = hb + 8 + 128 * 8 + 128 * 4 + 128 * 4
    nvl = rdma = 0
    for _nvl_send, nvl_recv, rdma_send, rdma_recv in DEEPEP_CONFIGS[key]:
        rdma_recv = -(-rdma_recv // rdma_send) * rdma_send                # aligned up to the send chunk
        n = ch * nvl_ranks * (2 * rdma_ranks + 3) * 4 + ch * nvl_ranks * nvl_recv * slot
        nvl = max(nvl, -(-n // 128) * 128)
        if ranks > DEEPEP_NVL_PEERS:
            r = ch * rdma_ranks * (DEEPEP_NVL_PEERS * 2 + 2) * 2 * 4 + ch * rdma_ranks * rdma_recv * (slot + 16) * 2
            rdma = max(rdma, -(-r // 128) * 128)
    return float(nvl + rdma)


def _hybridep_buffer_bytes(hidden: int, tokens: int, ranks: int, domain: int, local_experts: int) -> float:
    """HybridEP's buffers (deepseek-ai/DeepEP branch ``hybrid-ep`` at 94a9f8f, 2026-07), as
    Megatron-Core's ``init_hybrid_ep_buffer`` sizes them: ``tokens`` a rank at most (the
    dispatcher's input rows), the group's ``ranks`` in NVLink domains of ``domain`` ranks,
    ``local_experts`` a rank, bf16 tokens (no FP8 dispatch).  In a domain
    (``NVLCoordinator``, dispatch and combine sharing memory, ``use_shared_buffer`` True): room
    for every token of the group at once — ``tokens x ranks`` rows of ``hidden`` bf16 values, their
    fp32 probabilities over the domain's experts and their fp32 scales a 128-block.  Across
    domains (``RDMACoordinator``, more than one domain): the dispatch's staging of this rank's
    tokens (rows, probabilities over all the group's experts, scales) and of the other domains'
    (rows, probabilities over the domain's experts, scales), and the combine's reduction and
    group buffers (rows and probabilities, twice).  The flag words are left out (kilobytes)."""
    r = min(ranks, domain)
    nodes = max(ranks // r, 1)
    probs = local_experts * r * 4.0
    scales = (hidden // 128) * 4.0
    row = hidden * 2.0
    out = tokens * ranks * (row + probs + scales)
    if nodes > 1:
        out += tokens * (row + local_experts * r * nodes * 4.0 + scales)
        out += tokens * (nodes - 1) * (row + probs + scales)
        out += 2.0 * tokens * (nodes - 1) * (row + probs)
    return float(out)


def moe_dispatch_buffer_bytes(backend: str, hidden: int, tokens: int, ranks: int, domain: int,
                              local_experts: int, sms: int) -> float:
    """Bytes a rank allocates for Megatron-Core's flex dispatcher's communication buffers, once
    (every MoE layer shares them): ``backend`` ``"deepep"`` (:func:`_deepep_buffer_bytes`: fixed
    by the hidden size, the group's ``ranks`` and the kernels' ``sms``) or ``"hybridep"``
    (:func:`_hybridep_buffer_bytes`: room for all the group's ``tokens`` a rank, ``domain`` ranks
    a NVLink domain, ``local_experts`` a rank).  The NCCL all-to-all dispatcher allocates none
    beyond the activations."""
    from ._validate import choice, positive_int
    from .engine import FLEX_BACKENDS
    choice("backend", backend, FLEX_BACKENDS)
    for name, x in (("hidden", hidden), ("tokens", tokens), ("ranks", ranks), ("domain", domain),
                    ("local_experts", local_experts), ("sms", sms)):
        positive_int(name, x)
    if backend == "deepep":
        return _deepep_buffer_bytes(int(hidden), int(ranks), int(sms))
    return _hybridep_buffer_bytes(int(hidden), int(tokens), int(ranks), int(domain), int(local_experts))
