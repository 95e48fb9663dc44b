"""Operator-graph IR for one transformer layer (and the embedding / LM head).

A :class:`LayerGraph` is a DAG of :class:`Op` in topological order.  Tensor ops
(GEMMs and batched matmuls, ``M x K @ K x N`` repeated ``batch`` times) run on
the systolic tensor cores; vector ops (norms, softmax, activations, residual
adds, dropout, rotary) run on the vector units; ``allreduce`` ops mark the
tensor-parallel synchronisation points (priced by :mod:`cosearch.comm`, not by
the chip).

:func:`build` is the analytic builder: Megatron-style tensor parallelism of
degree ``tp`` splits QKV/FC1 by columns and the output projection/FC2 by rows,
so every GEMM shrinks by ``tp`` and the layer gains two all-reduces forward
(after the attention output projection and after FC2) and two backward (after
the QKV and FC1 input-gradient GEMMs).  The backward graph holds, for every
GEMM, a grad-input GEMM on the critical path and a grad-weight GEMM off it.

:func:`from_module` traces a user's ``torch.nn.Module`` with ``torch.fx`` on
the meta device into the same IR.
"""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from ._validate import choice, flag
from .compressed_attention import CSA_RATIO
from .models import ModelConfig

__all__ = ["Op", "LayerGraph", "build", "build_pair", "build_model", "from_module", "OP_FIELDS",
           "KIND_TENSOR", "KIND_VECTOR", "KIND_NETWORK", "KIND_ATTENTION", "KIND_CAST", "NETWORK_KINDS",
           "ATTENTION_CORE", "ATTENTION_CASTS", "ATTENTION_FORMAT_BYTES", "check_attention_format",
           "fp8_window_backward_keys",
           "VECTOR_OPS_PER_ELEMENT", "VOCAB_PAD", "vocab_shard", "SELECTIVE_RECOMPUTE", "EVERY_OTHER_MATMUL",
           "RECOMPUTE_MODULES", "MOE_EXPERT_OPS", "MOE_DISPATCH_OPS", "recompute_modules", "check_selective_policy",
           "recompute_share", "SCALING_RECIPES", "CAST_PASSES", "ONE_COPY", "RECIPE_CAST_PASSES", "check_scaling_recipe",
           "grows_with_tokens", "expert_eager_bytes", "moe_eager_bytes", "moe_regroup_bytes", "MOE_DISPATCHERS",
           "REGROUPING_DISPATCHERS", "ROUTER_DTYPES", "UNFUSED_BIAS_ADD", "unfused_bias_add_bytes",
           "maxtext_expert_names", "maxtext_minimal_places", "maxtext_places"]

KIND_TENSOR, KIND_VECTOR, KIND_NETWORK, KIND_ATTENTION, KIND_CAST = 0, 1, 2, 3, 4
#: ``bmm`` (activation x activation: unfused attention's scores and context, MaxText's dispatch
#: einsums) are cuBLAS / XLA batched GEMMs, priced on the tensor path with the GEMM shape model
#: (cosearch's own H200 bmm rows are checked that way, tests/test_h200_kernels.py); only fused
#: attention kernels take the attention path and its per-128-row-block overhead, which charged
#: the backward's 128-row bmm (m = head dim) 3.4x its GEMM time.
_KIND_CODE = {"gemm": KIND_TENSOR, "bmm": KIND_TENSOR, "attention": KIND_ATTENTION,
              "vector": KIND_VECTOR, "allreduce": KIND_NETWORK, "allgather": KIND_NETWORK,
              "reducescatter": KIND_NETWORK, "alltoall": KIND_NETWORK,
              "cast": KIND_CAST}
#: Network op kinds (priced by cosearch.comm on the cluster, not by the chip).  ``alltoall``
#: (MoE token dispatch and combine) runs over the expert-parallel group, the others over
#: the tensor-parallel group.
NETWORK_KINDS = ("allreduce", "allgather", "reducescatter", "alltoall")
#: A fused attention backward's matmul FLOPs per forward FLOP (FlashAttention-2: five matmuls
#: for the forward's two, the scores recomputed).
ATTENTION_BWD_FACTOR = 2.5

#: Forward ops that selective recomputation runs again (the attention core).
ATTENTION_CORE = ("attn_scores", "softmax", "attn_dropout", "attn_context", "attn_core")
#: The name suffixes of a low-precision attention's casts around its fused kernel
#: (:meth:`_Builder.attention_cast`)
ATTENTION_CASTS = (".quant", ".dequant")
#: Bytes per Q, K, V (and dO) element of each low-precision attention format: FP8 with per-tensor
#: scales, MXFP8 with one E8M0 scale byte per 32 elements.
ATTENTION_FORMAT_BYTES = {"fp8": 1.0, "mxfp8": 1.0 + 1.0 / 32.0}

#: What ``"selective"`` recomputation runs again (:attr:`cosearch.engine.Engine.selective_recompute`):
#: these, or ``"modules:<names>"`` (:data:`RECOMPUTE_MODULES`).
SELECTIVE_RECOMPUTE = ("attention-core", "every-other-matmul", "every-other-matmul-fused-qkv", "dots-saved")
#: torchtitan's per-op policy: before 0.3 (separate wq, wk, wv; each model's own save list of
#: aten.mm and linear), and 0.3's over one fused wqkv (``FusedQKVLinear``, its Llama 3, Qwen 3 and
#: GPT-OSS default; the central save list of #2357, addmm among PyTorch's compute-intensive ops).
EVERY_OTHER_MATMUL = ("every-other-matmul", "every-other-matmul-fused-qkv")

#: Megatron-Core's ``--recompute-modules`` (``recompute_modules``, with granularity selective),
#: by the forward ops of cosearch's layer graph each one runs again (``megatron/core/
#: transformer/transformer_config.py``: core_attn, moe_act, layernorm, mla_up_proj, mlp, moe,
#: shared_experts).  ``mlp`` is a dense layer's MLP (an MoE layer's is ``moe``); ``moe`` reruns
#: the whole MoE block, its dispatch and combine all-to-alls included.  A GEMM's FP8 input cast
#: goes with it.
RECOMPUTE_MODULES = {
    "core_attn": ATTENTION_CORE,
    "layernorm": ("norm1", "norm2"),
    "moe_act": ("expert_clamp", "expert_act"),
    "mla_up_proj": ("q_latent_norm", "allgather_q_latent", "q_up", "kv_latent_norm", "allgather_kv_latent", "kv_up",
                    "mla_join"),
    "mlp": ("fc1", "act", "fc2"),
    "moe": ("router", "router_topk", "moe_permute", "moe_dispatch_einsum", "moe_dispatch", "moe_allgather", "moe_sort",
            "expert_fc1", "expert_fc1_bias", "expert_clamp", "expert_act", "expert_fc2", "expert_bias", "moe_unsort",
            "moe_reducescatter",
            "moe_combine", "shared_allgather", "shared_fc1", "shared_act", "shared_fc2", "shared_reducescatter", "moe_add",
            "moe_unpermute", "moe_combine_einsum"),
    "shared_experts": ("shared_allgather", "shared_fc1", "shared_act", "shared_fc2", "shared_reducescatter"),
}


#: The forward ops of an MoE layer that run between its dispatch and its combine on the
#: compute stream (the routed experts with the alltoall dispatcher's regrouping around them, and
#: the shared experts beside them): what Megatron-Core's combined 1F1B schedule calls the ``mlp``
#: node (``TransformerLayerSchedulePlan``; ``fine_grained_callables.submodule_moe_forward`` runs
#: ``dispatch_postprocess``, the experts and ``combine_preprocess``); every other op of the layer
#: is on the attention side (``pre_dispatch_computation``, or the combine's post-processing before
#: the next layer's).
MOE_EXPERT_OPS = ("moe_allgather", "moe_sort", "expert_fc1", "expert_fc1_bias", "expert_clamp", "expert_act",
                  "expert_fc2",
                  "expert_bias", "moe_unsort", "moe_reducescatter", "shared_allgather", "shared_fc1", "shared_act",
                  "shared_fc2", "shared_reducescatter", "moe_add")

#: An MoE layer's collectives that its token dispatcher runs itself (NCCL calls on the compute
#: stream, not inside a Transformer Engine linear): the all-to-alls and, where the experts are
#: split over the tensor-parallel ranks, the all-gather of the received copies and the
#: reduce-scatter of the experts' output (:func:`_moe_mlp_gathered`).
MOE_DISPATCH_OPS = ("moe_dispatch", "moe_allgather", "moe_reducescatter", "moe_combine")


#: MaxText's ``remat_policy: custom`` tensor names (``configs/base.yml``: each ``'remat'``,
#: ``'device'`` or ``'offload'``; ``decoder_layer_input`` is ``'device'`` by default and is never
#: rematerialized).  :func:`_maxtext_rerun` maps them onto cosearch's layer ops (query/key/value
#: onto the fused QKV GEMM's shares or MLA's up projections, ``context`` — the attention kernel's
#: output and its log-sum-exp — onto the attention core, ``out_proj`` onto the attention output,
#: ``mlpwi*``/``mlpwo`` onto the MLP's, ``moe_*`` onto the experts' (:func:`maxtext_expert_names`),
#: MLA's latents ``query_wa_proj``, ``kv_wa_proj`` and their normed ``mla_q``, ``mla_kv`` onto its
#: down projections and norms, ``moe_x_sorted`` — the dispatched tokens with their routing —
#: onto the dispatch), and :func:`cosearch.memory.maxtext_saved_bytes` sizes the tensors.
#: ``attention_out`` (the attention's output after the kernel) is kept but saves no rerun: the
#: kernel's backward needs its log-sum-exp, which only ``context`` keeps, so the kernel runs again
#: (``cosearch/data/maxtext_layer_residuals.csv`` rows 12-13: the dumped step calls splash
#: attention's forward kernel, ``splash_mha_fwd_segmented_residuals``, twice — the forward and its
#: rerun in the backward — with ``attention_out`` or nothing saved, once with ``context``).
MAXTEXT_TENSORS = ("decoder_layer_input", "query_proj", "key_proj", "value_proj", "kv_proj", "qkv_proj", "context",
                   "attention_out", "out_proj", "mlpwi", "mlpwi_0", "mlpwi_1", "mlpwo", "moe_mlpwi", "moe_mlpwi_0",
                   "moe_mlpwi_1", "moe_mlpwo", "query_wa_proj", "kv_wa_proj", "mla_q", "mla_kv", "moe_x_sorted")
MAXTEXT_PLACES = ("remat", "device", "offload")

#: The tensors ``remat_policy: minimal`` keeps: MaxText's ``Decoder.minimal_policy`` names (the
#: weight GEMMs' outputs, which ``checkpoint_dots_with_no_batch_dims`` kept before it: the
#: projections are the decoder's only dots without batch dimensions).
MAXTEXT_MINIMAL_TENSORS = ("query_proj", "value_proj", "key_proj", "qkv_proj", "out_proj", "mlpwi_0", "mlpwi_1", "mlpwi",
                           "mlpwo")


def maxtext_minimal_places(config: ModelConfig) -> dict[str, str] | None:
    """``remat_policy: minimal`` as a custom policy's places (:func:`maxtext_policy`: the
    :data:`MAXTEXT_MINIMAL_TENSORS` ``'device'``), which :func:`recompute_share` and
    :func:`cosearch.memory.maxtext_saved_bytes` price tensor by tensor — dense, MoE and MLA layers
    alike (``cosearch/data/maxtext_layer_residuals.csv``: what JAX keeps for each); None for
    DeepSeek-V4's compressed attention, whose projections carry other names (priced as
    ``"dots-saved"``: every weight GEMM's output kept, Megatron's selective figure for memory)."""
    if config.compressed_attention is not None:
        return None
    return maxtext_policy("maxtext:" + ",".join(f"{n}=device" for n in MAXTEXT_MINIMAL_TENSORS))


def maxtext_places(policy, config: ModelConfig) -> dict[str, str] | None:
    """The MaxText tensors' places a selective policy names: a ``"maxtext:..."`` policy's
    (:func:`maxtext_policy`), ``"dots-saved"``'s (MaxText's ``minimal``,
    :func:`maxtext_minimal_places`); None for the others (and ``"dots-saved"`` on DeepSeek-V4)."""
    return maxtext_policy(policy) if policy != "dots-saved" else maxtext_minimal_places(config)


def maxtext_policy(policy) -> dict[str, str] | None:
    """A ``"maxtext:name=where,..."`` selective policy (MaxText's ``remat_policy: custom``) as
    ``{name: where}`` over every :data:`MAXTEXT_TENSORS` name (unnamed ones ``'remat'``,
    ``decoder_layer_input`` ``'device'``, MaxText's defaults); None for other policies.
    ``decoder_layer_input=remat`` is taken as MaxText runs it: base.yml says the tensor "cannot be
    rematerialized", and a layer scan compiled with it keeps the layer input all the same (the
    checkpointed layer's input: ``cosearch/data/maxtext_layer_residuals.csv`` rows 4-5), so it
    stays in HBM (:func:`cosearch.memory.maxtext_saved_bytes`)."""
    if not isinstance(policy, str) or not policy.startswith("maxtext:"):
        return None
    out = dict.fromkeys(MAXTEXT_TENSORS, "remat")
    out["decoder_layer_input"] = "device"
    for item in (x.strip() for x in policy[len("maxtext:"):].split(",") if x.strip()):
        name, _, where = item.partition("=")
        name, where = name.strip(), where.strip()
        if name not in out:
            raise ValueError(f"MaxText remat tensor {name!r}: choose from {', '.join(MAXTEXT_TENSORS)}")
        if where not in MAXTEXT_PLACES:
            raise ValueError(f"MaxText remat tensor {name}={where!r}: choose from {', '.join(MAXTEXT_PLACES)}")
        out[name] = where
    return out


def _maxtext_saved(p: dict[str, str], *names: str) -> bool:
    return any(p[n] != "remat" for n in names)


def maxtext_expert_names(config: ModelConfig) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """The checkpoint names MaxText gives a routed expert's three projections, (gate ``w0``, up
    ``w1``, down ``wo``) — any one of them saved keeps the tensor (MaxText 0.2.5's ``layers/moe.py``):
    the gate's output is tagged ``mlpwi_0`` and ``moe_mlpwi_0`` and the down projection's
    ``mlpwo`` and ``moe_mlpwo`` on both paths, so a policy keeping the dense MLP's names (``minimal``
    among them) keeps the routed ones too; the up projection's ``moe_mlpwi_1`` alone in
    ``sparse_matmul``'s grouped GEMMs (``gmm_up``), ``mlpwi_1`` as well in ``dense_matmul``'s
    einsums (:attr:`cosearch.models.ModelConfig.moe_einsum_dispatch`).  ``moe_mlpwi`` (a fused gate
    and up projection's name) counts for both."""
    w1 = ("moe_mlpwi_1", "moe_mlpwi") + (("mlpwi_1",) if config.moe_einsum_dispatch else ())
    return ("moe_mlpwi_0", "mlpwi_0", "moe_mlpwi"), w1, ("moe_mlpwo", "mlpwo")


def _maxtext_rerun(op_name: str, c: ModelConfig, p: dict[str, str]) -> float:
    """The share of a forward op JAX reruns in the backward under a MaxText custom policy: every
    op whose output (or something computed from it) the backward needs and no saved name holds.
    A dense MLP's down projection and everything after it in the layer are never rerun (the
    layer's output is only the next layer's saved input) but where post norms norm its output
    (Gemma's: the norm's backward reads it, unless ``mlpwo`` holds it); an MoE layer's expert down
    projection is, unless saved (the router's gradient reads the expert outputs)."""
    if c.post_norms and op_name in ("fc2", "allreduce_mlp", "reducescatter_mlp"):
        # the MLP's normed output: its norm's backward reads the down projection's output (mlpwo)
        return 0.0 if _maxtext_saved(p, "mlpwo") else 1.0
    if op_name in ("fc2", "shared_fc2", "allreduce_mlp", "reducescatter_mlp", "shared_reducescatter", "dropout2", "residual2",
                   "moe_add", "moe_unpermute", "moe_combine_einsum", "post_mlp_norm"):
        return 0.0
    if op_name == "qkv":
        if _maxtext_saved(p, "qkv_proj"):
            return 0.0
        q = c.heads / (c.heads + 2.0 * c.kv_heads)
        kv = c.kv_heads / (c.heads + 2.0 * c.kv_heads)
        return ((0.0 if p["query_proj"] != "remat" else q)
                + (0.0 if _maxtext_saved(p, "key_proj", "kv_proj") else kv)
                + (0.0 if _maxtext_saved(p, "value_proj", "kv_proj") else kv))
    if op_name in ATTENTION_CORE:
        return 0.0 if p["context"] != "remat" else 1.0
    if op_name in ("attn_out", "allreduce_attn", "reducescatter_attn"):
        return 0.0 if p["out_proj"] != "remat" else 1.0
    if op_name in ("fc1", "shared_fc1"):
        if _maxtext_saved(p, "mlpwi"):
            return 0.0
        return 0.5 * ((p["mlpwi_0"] == "remat") + (p["mlpwi_1"] == "remat")) if c.gated else \
            float(p["mlpwi_0"] == "remat")
    if op_name == "expert_fc1":
        w0, w1, _ = maxtext_expert_names(c)
        w0_rerun = 0.0 if _maxtext_saved(p, *w0) else 1.0
        return 0.5 * (w0_rerun + (0.0 if _maxtext_saved(p, *w1) else 1.0)) if c.gated else w0_rerun
    if op_name in ("expert_fc2", "moe_unsort", "moe_reducescatter", "moe_combine"):
        return 0.0 if _maxtext_saved(p, *maxtext_expert_names(c)[2]) else 1.0
    if c.mla is not None and op_name in ("q_down", "kv_down"):
        # the latent's name (query_wa_proj: the query's, kv_wa_proj: the key-value one with the
        # key's RoPE part) holds it; its norm's output (mla_q, mla_kv) is what the up projection
        # reads, so with that saved the latent is still needed for the norm's own backward
        return 0.0 if _maxtext_saved(p, "query_wa_proj" if op_name == "q_down" else "kv_wa_proj") else 1.0
    if c.mla is not None and op_name in ("q_latent_norm", "kv_latent_norm"):
        return 0.0 if _maxtext_saved(p, "mla_q" if op_name == "q_latent_norm" else "mla_kv") else 1.0
    if op_name in ("moe_permute", "moe_dispatch", "moe_allgather", "moe_sort") and not c.moe_einsum_dispatch:
        # moe_x_sorted: the grouped GEMMs' sorted input and its routing (sparse_matmul only), so
        # the backward does not route, sort or dispatch again
        return 0.0 if _maxtext_saved(p, "moe_x_sorted") else 1.0
    if c.mla is not None and op_name in ("q_up", "q_proj"):
        # MLA's query (its RoPE applied) is named query_proj; its key (the up projection's no-RoPE
        # half with the shared RoPE key) key_proj and its value value_proj (attention_mla.py); the
        # down projections' latents carry names cosearch does not read, so they run again
        return 0.0 if _maxtext_saved(p, "query_proj") else 1.0
    if c.mla is not None and op_name == "kv_up":
        return 0.5 * ((p["key_proj"] == "remat") + (p["value_proj"] == "remat"))
    return 1.0


def recompute_modules(policy: str) -> tuple[str, ...] | None:
    """The module names of a ``"modules:a,b"`` selective-recompute policy (None for the named
    policies); refuses unknown names."""
    if not isinstance(policy, str) or not policy.startswith("modules:"):
        return None
    names = tuple(dict.fromkeys(n.strip() for n in policy[len("modules:"):].split(",") if n.strip()))
    bad = [n for n in names if n not in RECOMPUTE_MODULES]
    if bad or not names:
        raise ValueError(f"selective recompute modules {bad or policy!r}: choose from {', '.join(RECOMPUTE_MODULES)}")
    return names


def check_selective_policy(policy) -> str:
    """A valid selective-recompute policy (:data:`SELECTIVE_RECOMPUTE` or ``"modules:..."``)."""
    if recompute_modules(policy) is None and maxtext_policy(policy) is None and policy not in SELECTIVE_RECOMPUTE:
        raise ValueError(f"selective recompute policy must be one of {SELECTIVE_RECOMPUTE}, 'modules:<names>' "
                         f"({', '.join(RECOMPUTE_MODULES)}) or 'maxtext:<tensor>=<remat|device|offload>,...', "
                         f"got {policy!r}")
    return policy


def recompute_share(op: Op, config: ModelConfig, policy: str = "attention-core") -> float:
    """The share of a layer's forward op that ``"selective"`` recomputation runs again.

    ``"attention-core"`` (Megatron): the attention core's ops, whole.  ``"every-other-matmul"``
    (torchtitan's per-op policy: odd matmuls and SDPA saved, even matmuls and every cheaper op
    recomputed, counted per layer in execution order wq, wk, wv, wo, then w1, w3, w2 for a gated
    MLP or w1, w2 for a plain one): of the fused QKV GEMM the wk share ``kv / (heads + 2 kv)``
    (none under ``"every-other-matmul-fused-qkv"``: torchtitan 0.3's one wqkv matmul, saved, then
    wo, the MLP's parity the same),
    the attention output GEMM, half of a gated MLP's fused gate+up GEMM (w3), a plain MLP's down
    GEMM (w2) — the shared experts' MLP alike; MLA's projections in torchtitan's order (wq_a,
    wq_b, wkv_a, wkv_b, wo: the second and fourth again, and the MLP's count then starts odd; or wq,
    wkv_a, wkv_b, wo without a query LoRA); the routed experts' grouped GEMMs and the router, whole
    (torchtitan saves no ``_grouped_mm`` and force-recomputes the router gate); a biased model's
    projections and router (``aten.addmm``, GPT-OSS's, never counted) none under 0.3's policy,
    which saves them, and whole under the lists before it; any other matmul half; every vector op;
    never the fused attention kernel or a collective.  ``"dots-saved"`` (MaxText's
    ``remat_policy: minimal``, ``save_only_these_names`` over the weight GEMMs' checkpoint names,
    :data:`MAXTEXT_MINIMAL_TENSORS`): what JAX reruns given those names saved, as under a custom
    policy (:func:`maxtext_minimal_places`; on an MoE layer the routed up projection, which
    ``sparse_matmul`` tags ``moe_mlpwi_1`` alone, and the dispatch that feeds it run again; on an
    MLA layer the down projections); with DeepSeek-V4's compressed attention every vector and cast
    op and the attention core, never a weight GEMM or a collective (the weight GEMMs' outputs
    saved, ``checkpoint_dots_with_no_batch_dims``).
    ``"modules:..."`` (Megatron-Core's ``recompute_modules``): every op of the named modules
    (:data:`RECOMPUTE_MODULES`), whole.  ``"maxtext:..."`` (MaxText's ``remat_policy: custom``,
    :func:`maxtext_policy`): what JAX reruns given the saved and offloaded names
    (:func:`_maxtext_rerun`)."""
    check_selective_policy(policy)
    mt = maxtext_places(policy, config)
    if mt is not None:
        if op.kind in NETWORK_KINDS and op.name not in ("moe_dispatch", "moe_combine", "allreduce_attn",
                                                        "reducescatter_attn", "allgather_attn", "allgather_mlp",
                                                        "moe_allgather", "moe_reducescatter", "shared_allgather"):
            return 0.0
        return _maxtext_rerun(_gemm_of(op.name), config, mt)
    mods = recompute_modules(policy)
    if mods is not None:
        base = _gemm_of(op.name)
        return 1.0 if any(base in RECOMPUTE_MODULES[m] for m in mods) else 0.0
    if policy == "attention-core":
        return 1.0 if _gemm_of(op.name) in ATTENTION_CORE else 0.0
    if policy == "dots-saved":
        return 1.0 if op.kind in ("vector", "cast", "bmm", "attention") or op.name in ATTENTION_CORE else 0.0
    if op.kind in ("vector", "cast"):
        return 1.0
    if op.kind != "gemm":
        return 0.0                      # the fused attention kernel is saved; collectives are not compute
    if config.bias and op.name in ("qkv", "attn_out", "fc1", "fc2", "shared_fc1", "shared_fc2", "router"):
        # a biased linear runs as aten.addmm, never counted as a matmul nor matched to the router's
        # forced shape: 0.3's policy saves it (its list takes PyTorch's compute-intensive ops,
        # addmm among them, #2357), the per-model lists before it (aten.mm and linear) rerun it
        return 0.0 if policy == "every-other-matmul-fused-qkv" else 1.0
    if op.name in ("expert_fc1", "expert_fc2", "router"):
        # torchtitan's policy saves aten.mm / linear outputs (and SDPA, topk, the all-to-alls), not
        # the experts' aten._grouped_mm, and force-recomputes the router gate's shape
        # (force_recompute_mm_shapes_by_fqns, default ["moe.router.gate"]), neither counted as
        # a matmul (distributed/activation_checkpoint.py, torchtitan 0.3.0; the same list before)
        return 1.0
    if op.name == "qkv" and config.mla is None:
        # separate wq, wk, wv: wk (the second matmul) again; one fused wqkv (the first): saved
        return 0.0 if policy == "every-other-matmul-fused-qkv" else config.kv_heads / (config.heads + 2.0 * config.kv_heads)
    # the attention's matmuls before the MLP: wq, wk, wv, wo (4), or MLA's wq (or wq_a, wq_b),
    # wkv_a, wkv_b, wo (4, or 5 with a query LoRA: the MLP's count starts odd)
    odd = config.mla is not None and config.mla[0] > 0
    mla_rerun = {"q_down": 0.0, "q_up": 1.0, "kv_down": 0.0, "kv_up": 1.0} if odd else {
        "q_proj": 0.0, "kv_down": 1.0, "kv_up": 0.0}
    if config.mla is not None and op.name in mla_rerun:
        return mla_rerun[op.name]
    if op.name == "attn_out":
        return 0.0 if odd else 1.0
    if op.name in ("fc1", "shared_fc1"):
        return 0.5 if config.gated else (1.0 if odd else 0.0)
    if op.name in ("fc2", "shared_fc2"):
        return (1.0 if odd else 0.0) if config.gated else (0.0 if odd else 1.0)
    return 0.5


def grows_with_tokens(op: Op) -> bool:
    """Whether a collective's bytes grow with the tokens it carries: every one but the
    tensor-parallel all-reduce of a low-precision cast's amax (``<...>.amax_allreduce``: one or
    two fp32 values, :meth:`_Builder.fp8_cast`), which the microbatch leaves as it is."""
    return not op.name.endswith("amax_allreduce")


def _gemm_of(name: str) -> str:
    """The op a cast or amax op serves (``fc2.cast``, ``fc2.amax`` -> ``fc2``; a low-precision
    attention's ``attn_core.quant`` / ``.dequant`` -> ``attn_core``), else ``name``."""
    for suffix in (".cast", ".amax", *ATTENTION_CASTS):
        if name.endswith(suffix):
            return name[:-len(suffix)]
    return name


#: Column order of the op arrays handed to the kernels.
OP_FIELDS = ("kind", "m", "n", "k", "batch", "elements", "ops_per_element",
             "bytes_read", "bytes_written", "dtype_bytes", "head_dim")

#: Arithmetic operations per element of each vector op (forward); backward uses 2x.
VECTOR_OPS_PER_ELEMENT = {
    "layernorm": 5.0, "rmsnorm": 4.0, "softmax": 5.0, "gelu": 8.0, "relu": 1.0,
    "silu": 4.0, "swiglu": 5.0, "geglu": 9.0, "add": 1.0, "mul": 1.0, "dropout": 2.0,
    "rotary": 3.0, "embedding": 1.0, "cross_entropy": 5.0, "fp8_cast": 3.0, "amax": 2.0,
    # soft-capping, cap tanh(x / cap): a scale, a tanh, a scale (the tanh as two, as gelu's counts it)
    "softcap": 4.0,
}


@dataclass(frozen=True)
class Op:
    """One operator.  ``kind`` is ``gemm`` (weight GEMM), ``bmm``/``attention`` (activation x
    activation matmuls of the attention core, or a fused flash-attention kernel whose HBM
    traffic is ``bytes_read + bytes_written``), ``vector``, or a collective
    (``allreduce``/``allgather``/``reducescatter`` of ``bytes_read`` bytes)."""

    name: str
    kind: str
    deps: tuple[int, ...] = ()
    m: int = 0
    n: int = 0
    k: int = 0
    batch: int = 1
    elements: float = 0.0
    ops_per_element: float = 0.0
    bytes_read: float = 0.0
    bytes_written: float = 0.0
    dtype_bytes: int = 2
    weight_bytes: float = 0.0
    #: a fused attention kernel's head dimension (0: not a fused attention op); its ``k`` is the
    #: head dim in a forward and 2.5 of them in a backward (``k > 1.5 head_dim`` marks it), the
    #: share of (query, key) pairs it computes scaling its ``n``
    head_dim: int = 0

    def __post_init__(self) -> None:
        if self.kind not in _KIND_CODE:
            raise ValueError(f"op {self.name!r}: unknown kind {self.kind!r}; choose one of {sorted(_KIND_CODE)}")
        if self.kind in ("gemm", "bmm", "attention"):
            for f in ("m", "n", "k", "batch"):
                if getattr(self, f) <= 0:
                    raise ValueError(f"op {self.name!r}: {f} must be positive, got {getattr(self, f)}")
        elif self.kind in ("vector", "cast") and (self.elements <= 0 or self.ops_per_element <= 0):
            raise ValueError(f"op {self.name!r}: vector op needs positive elements and ops_per_element")
        elif self.kind in NETWORK_KINDS and self.bytes_read <= 0:
            raise ValueError(f"op {self.name!r}: {self.kind} needs positive bytes")
        if isinstance(self.head_dim, bool) or int(self.head_dim) != self.head_dim or self.head_dim < 0:
            raise ValueError(f"op {self.name!r}: head_dim must be a non-negative integer, got {self.head_dim!r}")
        if self.head_dim and self.kind != "attention":
            raise ValueError(f"op {self.name!r}: only a fused attention op has a head_dim")

    @property
    def unit(self) -> str:
        return {KIND_TENSOR: "tensor", KIND_ATTENTION: "tensor", KIND_VECTOR: "vector", KIND_CAST: "vector",
                KIND_NETWORK: "network"}[_KIND_CODE[self.kind]]

    @property
    def flops(self) -> float:
        if self.kind in ("gemm", "bmm", "attention"):
            return 2.0 * self.m * self.n * self.k * self.batch
        if self.kind in ("vector", "cast"):
            return float(self.elements * self.ops_per_element)
        return 0.0

    def as_row(self) -> list[float]:
        return [float(_KIND_CODE[self.kind]), self.m, self.n, self.k, self.batch, self.elements,
                self.ops_per_element, self.bytes_read, self.bytes_written, self.dtype_bytes, float(self.head_dim)]


@dataclass(frozen=True)
class LayerGraph:
    """A DAG of ops in topological order (every dep index is smaller than the op's)."""

    name: str
    ops: tuple[Op, ...]
    phase: str = "fwd"
    tp: int = 1
    microbatch: int = 1
    meta: dict = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "ops", tuple(self.ops))
        for i, op in enumerate(self.ops):
            for d in op.deps:
                if not (0 <= d < len(self.ops)):
                    raise ValueError(f"op {op.name!r} depends on unknown op index {d}")
                if d >= i:
                    raise ValueError(f"op {op.name!r} depends on later op {self.ops[d].name!r}: "
                                     "the graph has a cycle or is not in topological order")

    def __len__(self) -> int:
        return len(self.ops)

    def arrays(self) -> np.ndarray:
        """(ops, len(OP_FIELDS)) float64 array for the kernels (built once, read-only)."""
        cached = self.__dict__.get("_arrays")
        if cached is None:
            cached = (np.zeros((0, len(OP_FIELDS))) if not self.ops else
                      np.array([op.as_row() for op in self.ops], dtype=np.float64))
            cached.setflags(write=False)
            self.__dict__["_arrays"] = cached
        return cached

    @property
    def total_flops(self) -> float:
        return float(sum(op.flops for op in self.ops))

    @property
    def tensor_flops(self) -> float:
        return float(sum(op.flops for op in self.ops if op.unit == "tensor"))

    @property
    def allreduce_bytes(self) -> list[float]:
        return [op.bytes_read for op in self.ops if op.kind == "allreduce"]

    @property
    def collectives(self) -> tuple[tuple[str, float, bool], ...]:
        """(kind, bytes, whether its bytes grow with the tokens) of every collective op, in order
        (found once: the plan search's cell layout reads it, :func:`cosearch.plan._cell_layout`); an amax all-reduce
        (:func:`grows_with_tokens`) moves the same bytes at every microbatch."""
        cached = self.__dict__.get("_collectives")
        if cached is None:
            cached = self.__dict__["_collectives"] = tuple((op.kind, op.bytes_read, grows_with_tokens(op))
                                                           for op in self.ops if op.kind in NETWORK_KINDS)
        return cached

    @property
    def edges(self) -> list[tuple[int, int]]:
        return [(d, i) for i, op in enumerate(self.ops) for d in op.deps]

    def signature(self) -> tuple:
        """Hashable identity of the graph's shapes (for caching schedules)."""
        return (self.phase, self.tp, self.microbatch, tuple(tuple(op.as_row()) + (op.deps,) for op in self.ops))

    def names(self) -> list[str]:
        return [op.name for op in self.ops]


class _Builder:
    """Ops appended one by one.  ``passes`` (:data:`CAST_PASSES`) and ``norm_fused`` (the casts
    of a norm's output inside the GEMM's own module): how the low-precision casts run
    (:meth:`fp8_cast`)."""

    def __init__(self, dt: int, passes: str = "single", norm_fused: frozenset = frozenset(),
                 tp_amax: frozenset = frozenset()) -> None:
        self.ops: list[Op] = []
        self.dt = dt
        # a cast writes the row-wise and the column-wise copy, or one serving both (ONE_COPY)
        self.copies = 1.0 if passes.endswith(ONE_COPY) else 2.0
        self.passes = passes.removesuffix(ONE_COPY)
        self.norm_fused = norm_fused
        self.tp_amax = tp_amax
        # bytes per element of fused attention's low-precision operands (0: the graph's dtype)
        self.attention_lowp = 0.0

    def _add(self, op: Op) -> int:
        self.ops.append(op)
        return len(self.ops) - 1

    def gemm(self, name: str, deps, m: int, n: int, k: int, batch: int = 1, weights: bool = True,
             operand_bytes: int | None = None) -> int:
        """A GEMM; ``operand_bytes`` (default the graph's dtype) sizes its inputs — 1 for an
        FP8 GEMM, whose output stays in the graph's dtype."""
        dt = self.dt
        ob = dt if operand_bytes is None else operand_bytes
        br = (m * k + k * n) * batch * ob
        return self._add(Op(name, "gemm" if weights else "bmm", tuple(d for d in deps if d is not None),
                            m=m, n=n, k=k, batch=batch, bytes_read=br, bytes_written=m * n * batch * dt,
                            dtype_bytes=ob, weight_bytes=k * n * ob if weights else 0.0))

    def vector(self, name: str, deps, elements: float, kind: str, inputs: int = 1, scale: float = 1.0) -> int:
        dt = self.dt
        return self._add(Op(name, "vector", tuple(d for d in deps if d is not None), elements=float(elements),
                            ops_per_element=VECTOR_OPS_PER_ELEMENT[kind] * scale,
                            bytes_read=float(inputs * elements * dt), bytes_written=float(elements * dt),
                            dtype_bytes=dt))

    def collective(self, name: str, deps, nbytes: float, kind: str = "allreduce") -> int:
        return self._add(Op(name, kind, tuple(d for d in deps if d is not None),
                            bytes_read=float(nbytes), bytes_written=float(nbytes), dtype_bytes=self.dt))

    def allreduce(self, name: str, deps, nbytes: float) -> int:
        return self.collective(name, deps, nbytes, "allreduce")

    def attention(self, name: str, deps, sq: int, sk: int, d: int, batch: int, flops_factor: float,
                  rows_read: float, rows_written: float, work: float = 1.0, operand_bytes: float | None = None) -> int:
        """A fused attention kernel of ``sq`` query rows against ``sk`` keys:
        ``flops_factor`` sq x sk x d matmuls per head (1: causal QK^T and PV), HBM traffic of
        whole (rows, d) tensors only (no sq x sk scores): ``rows_read`` / ``rows_written`` rows of
        d per head.  The factor scales the keys a query meets (``n``), so ``k`` is ``work`` head
        dims: 1 for a forward, :data:`ATTENTION_BWD_FACTOR` for a backward — how the kernels tell
        the two apart whatever the factor (a sliding window's, or 2 for non-causal attention).
        ``operand_bytes`` (default the graph's dtype): a kernel on FP8 (1) or MXFP8 (1 + 1/32, its
        block scales) operands (:data:`ATTENTION_FORMAT_BYTES`)."""
        dt = self.dt if operand_bytes is None else operand_bytes
        n = max(1, int(round(flops_factor * sk)))   # 2 m n k batch = flops_factor * 2 sq sk d batch * work
        k = int(round(work * d))
        return self._add(Op(name, "attention", tuple(x for x in deps if x is not None), m=sq, n=n, k=k,
                            batch=batch, bytes_read=rows_read * d * batch * dt,
                            bytes_written=rows_written * d * batch * dt, dtype_bytes=dt, head_dim=int(d)))

    def attention_cast(self, name: str, deps, elements: float, to_lowp: bool) -> int:
        """A low-precision attention's cast (kind ``cast``, one pass, one copy): its bf16 inputs
        to the attention format (``to_lowp``; ``<core>.quant``) or its output back to bf16
        (``<core>.dequant``), as Transformer Engine's FP8 ``DotProductAttention`` runs them around
        the fused kernel when only the attention is in FP8 (its ``fp8_dpa``: Q, K, V quantized
        before, O dequantized after; the backward mirrors both, :func:`_backward`)."""
        lo = self.attention_lowp
        read, written = (self.dt, lo) if to_lowp else (lo, self.dt)
        return self._add(Op(name, "cast", tuple(d for d in deps if d is not None), elements=float(elements),
                            ops_per_element=VECTOR_OPS_PER_ELEMENT["fp8_cast"], bytes_read=float(elements * read),
                            bytes_written=float(elements * written), dtype_bytes=self.dt))

    def fp8_cast(self, name: str, deps, elements: float, out_bytes: float = 1.0) -> int:
        """Cast a bf16 tensor to FP8 (or NVFP4) with its scales: reads the tensor once and writes
        ``out_bytes`` per element twice, the row-wise copy and the column-wise one (a Hopper FP8
        GEMM takes only the TN layout, so the weight gradient needs ``x^T`` and ``dy^T`` in FP8;
        block-scaled MXFP8/NVFP4 scale along K, which differs between the forward and the weight
        gradient: Transformer Engine's cast-transpose and torchao both write both), or once under a
        :data:`ONE_COPY` mode (per-tensor scaling on a chip whose FP8 GEMMs take every layout).  An op of
        kind ``cast``: priced as a memory-bound vector op at the chip's memory efficiency, or at
        ``KernelEfficiency.cast_memory`` where the engine's casts run slower
        (:attr:`cosearch.engine.Engine.fp8_cast_kernel`).

        The builder's ``passes`` (:data:`CAST_PASSES`) change that: under ``"norm-fused"`` the
        norm op producing a cast in ``norm_fused`` writes the low-precision copy itself and the
        cast only transposes it (reads and writes ``out_bytes`` an element); under
        ``"amax-all"``, and ``"amax-unfused"`` outside ``norm_fused``, a reduction reading the
        input once for its amax (a ``vector`` op, ``<gemm>.amax`` or ``<gemm>.grad_amax``) runs
        first, and a cast in ``tp_amax`` (a sequence-parallel shard) all-reduces that amax over the
        tensor-parallel ranks before it casts (:func:`_tp_amax_casts`)."""
        fed = name in self.norm_fused
        src = [d for d in deps if d is not None]
        if self.passes == "norm-fused" and fed and len(src) == 1 and self.ops[src[0]].kind == "vector" \
                and self.ops[src[0]].name.startswith("norm"):
            norm = self.ops[src[0]]
            self.ops[src[0]] = replace(norm, bytes_written=float(norm.elements * out_bytes))
            if self.copies == 1.0:
                return src[0]           # the norm's FP8 output serves both layouts: no transpose to make
            return self._add(Op(name, "cast", tuple(src), elements=float(elements),
                                ops_per_element=VECTOR_OPS_PER_ELEMENT["fp8_cast"],
                                bytes_read=float(elements * out_bytes), bytes_written=float(elements * out_bytes),
                                dtype_bytes=self.dt))
        head, _, last = name.rpartition(".")
        if self.passes == "amax-all" or (self.passes == "amax-unfused" and not fed):
            deps = [self._add(Op(f"{head}.{last.replace('cast', 'amax')}", "vector",
                                 tuple(d for d in deps if d is not None), elements=float(elements),
                                 ops_per_element=VECTOR_OPS_PER_ELEMENT["amax"],
                                 bytes_read=float(elements * self.dt), dtype_bytes=self.dt))]
        if self.passes in ("amax-unfused", "amax-all") and name in self.tp_amax:
            # one fp32 amax, NVFP4's row- and column-wise two (reduced together)
            nbytes = 4.0 * (2.0 if self.passes == "amax-all" else 1.0)
            deps = [self._add(Op(f"{head}.{last.replace('cast', 'amax')}_allreduce", "allreduce",
                                 tuple(d for d in deps if d is not None), bytes_read=nbytes, bytes_written=nbytes,
                                 dtype_bytes=4))]
        return self._add(Op(name, "cast", tuple(d for d in deps if d is not None), elements=float(elements),
                            ops_per_element=VECTOR_OPS_PER_ELEMENT["fp8_cast"],
                            bytes_read=float(elements * self.dt),
                            bytes_written=float(self.copies * elements * out_bytes), dtype_bytes=self.dt))

    def expert_gemm(self, name: str, deps, m: int, n: int, k: int, experts: int, lowp: float = 0.0) -> int:
        """``experts`` weight GEMMs of the same shape (grouped GEMM over an MoE layer's local
        experts), with a low-precision cast of the inputs when ``lowp`` (operand bytes) is set.
        A grouped kernel runs at about the rate of one GEMM of the per-expert shape: DeepGEMM's
        published grouped FP8 kernels on H800 (``deepseek-ai/DeepGEMM`` README at 327ec92: 4 x 8192
        and 8 x 4096 tokens per group at N 4096, K 7168, 1,346 TFLOP/s, against 1,410 for one dense
        4096 x 4096 x 7168) — so the op is priced as ``experts`` batched GEMMs of the per-expert
        shape; rows 43-52 of ``cosearch/data/public_kernels.csv`` check it within 10 %."""
        if lowp:
            deps = [self.fp8_cast(f"{name}.cast", deps, m * k * experts, lowp)]
        return self.gemm(name, deps, m, n, k, batch=experts, operand_bytes=lowp if lowp else None)

    def linear(self, name: str, deps, m: int, n: int, k: int, lowp: float = 0.0, cast: bool = True) -> int:
        """A weight GEMM; with ``lowp`` (operand bytes: 1 for FP8, 0.5625 for NVFP4) its input
        is cast first (unless ``cast`` is False: it arrives cast) and its operands are ``lowp``
        bytes (the weight's low-precision copy is made once per step and cached, as Transformer
        Engine does across microbatches, so it is not charged per microbatch)."""
        if not lowp:
            return self.gemm(name, deps, m, n, k)
        if cast:
            deps = [self.fp8_cast(f"{name}.cast", deps, m * k, lowp)]
        return self.gemm(name, deps, m, n, k, operand_bytes=lowp)

    def sp_allgather(self, name: str, dep, local_elements: float, elements: float, lowp: float = 0.0) -> int:
        """Sequence parallelism's all-gather of a normed input before its column-parallel GEMMs,
        ``elements`` gathered from ``local_elements`` a rank.  Under low precision the shard is
        cast first and the low-precision copy gathered (``lowp`` bytes an element): Transformer
        Engine's ``LayerNormLinear`` quantizes ``ln_out`` before ``gather_along_first_dim``, and
        torchao's ``PrepareFloat8ModuleInput`` casts "before the all-gather (i.e. Shard ->
        Replicate)", so the GEMMs after it cast nothing.  The op's ``elements`` size its
        gradient's reduce-scatter, in the graph's dtype."""
        if lowp:
            dep = self.fp8_cast(f"{name}.cast", [dep], local_elements, lowp)
        ob = lowp or self.dt
        return self._add(Op(name, "allgather", (dep,), elements=float(elements), bytes_read=float(elements * ob),
                            bytes_written=float(elements * ob), dtype_bytes=ob))


#: How the loss is computed (:attr:`cosearch.engine.Engine.cross_entropy`): ``"fused"``, a
#: fused kernel that reads the bf16 logits and writes their bf16 gradient (the vector-op
#: default); ``"fp32"``, Megatron's ``vocab_parallel_cross_entropy`` (and PyTorch's
#: ``F.cross_entropy`` on ``logits.float()``), whose passes over the logits are itemized in
#: :data:`CROSS_ENTROPY_FP32_BYTES` (Megatron-Core's ``--cross-entropy-loss-fusion`` with its
#: ``native`` implementation, ``fused_vocab_parallel_cross_entropy``, runs the same passes
#: jit-fused and measures the same, :data:`CROSS_ENTROPY_FP32_BYTES`); ``"te"``, Transformer
#: Engine's Triton ``parallel_cross_entropy`` (``--cross-entropy-fusion-impl te``),
#: :data:`CROSS_ENTROPY_TE_BYTES`.
CROSS_ENTROPY = ("fused", "fp32", "te")

#: Bytes per logit of the fp32 cross-entropy (forward read, forward written, backward read,
#: backward written), pass by pass as Megatron-Core's ``VocabParallelCrossEntropy`` runs them
#: (``megatron/core/tensor_parallel/cross_entropy.py``): the forward upcasts the logits (2 read,
#: 4 written), takes their max (4 read), subtracts it in place (4 + 4), exponentiates in place
#: (4 + 4), sums (4 read) and normalises the softmax in place for the backward (4 + 4); the
#: backward scales the saved softmax by the incoming gradient in place (4 + 4) and the upcast's
#: gradient casts it back to bf16 (4 + 2).  52 bytes a logit at the memory efficiency price the
#: forward+backward of Megatron's fused CE on an H100 at 8192 tokens 5-8 % under its measured
#: time and PyTorch's within 8 %, from 4k to 131k logits a token (Liger-Kernel's
#: ``benchmark/data/all_benchmark_data_megatron.csv``, 2026-06-10: 0.606-20.02 ms and
#: 0.554-19.93 ms; ``tests/test_kernel_model.py``).
CROSS_ENTROPY_FP32_BYTES = (22.0, 16.0, 8.0, 6.0)

#: Liger-Kernel's fused Triton cross-entropy on an H100 SXM, forward + backward at 8192 tokens of
#: bf16 logits with a mean loss, (logits, seconds) at 16k and 131k logits a token
#: (``benchmark/data/all_benchmark_data_megatron.csv``, 2026-06-10,
#: ``cosearch/data/public_cross_entropy.csv``).  Its backward is a no-op there (the mean loss's
#: incoming gradient is 1, which ``element_mul_kernel`` skips), so the time is its forward: one
#: program a row reading the row twice (the online softmax's max and sum, then the gradient)
#: and writing the gradient in place.
_LIGER_CE_ROWS = ((8192 * 16384, 0.9797760248184204e-3), (8192 * 131072, 6.783936023712158e-3))


def _te_cross_entropy_bytes(rows, stream_Bps: float, launch_s: float) -> tuple[float, float, float, float]:
    """Transformer Engine's parallel cross-entropy as bytes per logit (forward read, forward
    written, backward read, backward written).  TE's Triton kernels (NVIDIA/TransformerEngine
    ``pytorch/triton/cross_entropy.py``, pull request #1456, 2025-02, to #3193, 2026-07) make the
    passes Liger's kernel makes: ``online_softmax_kernel`` reads the bf16 logits for each row's max
    and sum, ``cross_entropy_kernel`` reads them again and writes their gradient in place, and the
    backward's ``element_mul_kernel`` (the same kernel as Liger's) scales it in place by the
    per-token gradient Megatron-Core's unreduced loss brings.  The forward is priced at Liger's
    measured time (``rows``, less one launch: its 6 itemized bytes a logit take about 3.4 times
    their streaming time), split 4 : 2 between reads and writes; the backward's 2 + 2 bytes at
    the same factor.  From #3193 (2026-07) TE holds the gradient in fp32: not priced, as no run
    records its Transformer Engine version."""
    fwd = sum((t - launch_s) / n for n, t in rows) / len(rows) * stream_Bps
    per_byte = fwd / 6.0
    return 4.0 * per_byte, 2.0 * per_byte, 2.0 * per_byte, 2.0 * per_byte


#: Transformer Engine's parallel cross-entropy, bytes per logit (:func:`_te_cross_entropy_bytes`;
#: 0.90 x 3.35 TB/s, the H100 SXM's memory efficiency, and its 4 us launch).
CROSS_ENTROPY_TE_BYTES = _te_cross_entropy_bytes(_LIGER_CE_ROWS, 0.90 * 3.35e12, 4e-6)

#: How a framework runs a layer's norms, activation and rotary embedding
#: (:attr:`cosearch.engine.Engine.elementwise`): ``"fused"`` (one kernel each, streaming their
#: inputs and output: Megatron-Core's and Transformer Engine's fused kernels, ``torch.compile``)
#: or ``"eager"`` (PyTorch eager mode running a model's Python code op by op: torchtitan without
#: ``torch.compile``, llm-foundry), priced per :data:`EAGER_ELEMENTWISE_BYTES`; ``"rope-eager"``:
#: the norms and activation fused, the rotary embedding eager (Megatron-Core's unfused RoPE, which
#: it runs where the cos and sin carry YaRN's attention factor,
#: :attr:`cosearch.engine.Engine.scaled_rope`, or with RoPE fusion off,
#: :attr:`cosearch.engine.Engine.rope_fusion`); ``"act-eager"``: the MLP's activation (the dense
#: one, and the routed and shared experts') eager, the rest fused (Megatron-Core's unfused
#: activation, :attr:`cosearch.engine.Engine.activation_fusion`); ``"act-rope-eager"``: both.
ELEMENTWISE = ("fused", "eager", "rope-eager", "act-eager", "act-rope-eager")

#: Where a model's attention sinks run (:attr:`cosearch.engine.Engine.attention_sinks`): inside
#: the fused attention kernel, or as torchtitan rescales the kernel's output
#: (``apply_attention_sink_rescale``), compiled or eager.
ATTENTION_SINKS = ("kernel", "compiled", "eager")
#: Bytes per element of the attention output (forward read, forward written, backward read,
#: backward written) of torchtitan's sinks rescale, ``out * sigmoid(lse - sinks).to(out.dtype)``
#: (``models/gpt_oss/model.py``, torchtitan 0.3.0; the ``[tokens, heads]`` logits, sigmoid and cast
#: are a head's width smaller and left out): eager, the product reads ``out`` and writes it (2, 2),
#: and its backward reads the gradient for ``grad x scale`` (2 read, 2 written) and the gradient and
#: ``out`` for ``grad x out`` (4, 2) summed over the head's width (2 read); compiled, one fused kernel
#: each way (2, 2; the gradient and ``out`` read, the input gradient written: 4, 2).
ATTENTION_SINK_BYTES = {"eager": (2.0, 2.0, 8.0, 4.0), "compiled": (2.0, 2.0, 4.0, 2.0)}


def eager_activation(elementwise: str) -> bool:
    """Whether the :data:`ELEMENTWISE` mode runs the MLP's activation eagerly."""
    return elementwise in ("eager", "act-eager", "act-rope-eager")


def eager_rope(elementwise: str) -> bool:
    """Whether the :data:`ELEMENTWISE` mode runs the rotary embedding eagerly."""
    return elementwise in ("eager", "rope-eager", "act-rope-eager")

#: How the input embedding looks tokens up (:attr:`cosearch.engine.Engine.embedding`):
#: ``"gather"``, a lookup writing each token's row; ``"one-hot"``, MaxText's ``use_iota_embed``:
#: the one-hot matrix of the tokens (generated from an iota inside the dot's operand fusion, as
#: XLA fuses an elementwise producer into its consumer) times this rank's share of the table, a
#: GEMM whose backward is the table's gradient only (the one-hot has none).
EMBEDDINGS = ("gather", "one-hot")


def _eager_bytes(rows, stream_Bps: float, launch_s: float = 0.0) -> tuple[float, float]:
    """Forward and backward time of an eager kernel as bytes per element at the memory stream
    ``stream_Bps`` of the chip it ran on: the per-element mean of its measured rows
    ``(elements, forward s, backward s)``, each less ``launch_s``."""
    fwd = sum((f - launch_s) / n for n, f, _ in rows) / len(rows) * stream_Bps
    bwd = sum((b - launch_s) / n for n, _, b in rows) / len(rows) * stream_Bps
    return fwd, bwd


#: An eager Python RMSNorm (``x.float()``, ``pow(2)``, ``mean``, ``rsqrt``, multiply, cast back,
#: multiply by the weight: torchtitan's ``norm_type = "rmsnorm"`` and Hugging Face's
#: ``LlamaRMSNorm`` alike), (elements, forward s, backward s), measured on an H100 NVL (3.94
#: TB/s) by Liger-Kernel's benchmark (``benchmark/data/h100_all_benchmark_data.csv``, provider
#: ``huggingface``, 2048 tokens, bf16, 2025-01-25): at hidden 16384 and 32768 the forward takes
#: 0.6095 and 1.2193 ms and the backward 1.5802 and 3.0291 ms
#: (``cosearch/data/public_vector_kernels.csv``).  Priced as bytes per element at that chip's
#: memory efficiency (0.90 x 3.94 TB/s), no launch subtracted.  Itemized, the forward moves 36
#: bytes an element, so its kernels stream at about half the memory efficiency.
_EAGER_RMSNORM_ROWS = ((2048 * 16384, 0.6094719767570496 * 1e-3, 1.580191969871521 * 1e-3),
                       (2048 * 32768, 1.219264030456543 * 1e-3, 3.0290560722351074 * 1e-3))
_RMS_FWD, _RMS_BWD = _eager_bytes(_EAGER_RMSNORM_ROWS, 0.90 * 3.94e12)

#: PyTorch's own LayerNorm and GELU kernels (``F.layer_norm``, ``F.gelu``), eager and bf16, on an
#: H200 (cosearch/data/h200_vector_passes.csv, 700 W, 1980 MHz): (elements, forward s, backward s).
#: Priced as bytes per element at that chip's memory efficiency (0.90 x 4.8 TB/s), each row less
#: the preset's 4 us launch (which the roofline adds back per op).  LayerNorm: 7.2 and 9.6 bytes
#: against the 4 and 6 it moves (the kernel streams at about half the memory efficiency, in
#: either pass); GELU: 4.7 and 6.4 against 4 and 6.
_EAGER_TORCH_ROWS = {
    "layernorm": ((8192 * 4096, 5.67812e-05, 7.16187e-05), (8192 * 12288, 0.000181714, 0.000247547)),
    "gelu": ((8192 * 16384, 0.000149146, 0.000203384), (8192 * 49152, 0.000441589, 0.00059291)),
}
_LN_FWD, _LN_BWD = _eager_bytes(_EAGER_TORCH_ROWS["layernorm"], 0.90 * 4.8e12, 4e-6)
_GELU_FWD, _GELU_BWD = _eager_bytes(_EAGER_TORCH_ROWS["gelu"], 0.90 * 4.8e12, 4e-6)

#: Eager-mode bytes per element, (forward read, forward written, backward read, backward
#: written), by op name: the RMSNorms (measured, :data:`_EAGER_RMSNORM_ROWS`: written bytes
#: itemized, the rest of the measured time charged as reads); SwiGLU's ``F.silu(g) * u`` (two
#: kernels: silu reads g and writes s, the product reads s and u; the backward's three products
#: read six tensors and write three; matches cosearch's own eager H200 rows, h200_vector_passes.csv,
#: within 5 %); torchtitan's complex rotary embedding of q and k (``x.float()``, the complex
#: product with the frequencies, ``type_as``; the same passes back); PyTorch's own LayerNorm and
#: GELU kernels (measured, :data:`_EAGER_TORCH_ROWS`: the output or input gradient written, the
#: rest of the measured time charged as reads).
EAGER_ELEMENTWISE_BYTES = {
    "rmsnorm": (_RMS_FWD - 16.0, 16.0, _RMS_BWD - 12.0, 12.0),
    "swiglu": (6.0, 4.0, 12.0, 6.0),
    "rotary": (10.0, 10.0, 10.0, 10.0),
    "layernorm": (_LN_FWD - 2.0, 2.0, _LN_BWD - 2.0, 2.0),
    "gelu": (_GELU_FWD - 2.0, 2.0, _GELU_BWD - 2.0, 2.0),
}

#: The :data:`ELEMENTWISE` modes whose eager activation is Megatron-Core's unfused one, which adds
#: the first MLP GEMM's bias in a pass of its own (``MLP.forward`` without
#: ``bias_activation_fusion``: ``intermediate_parallel + bias_parallel``, the linear layer returning
#: its bias unapplied); a fully eager model (``"eager"``: PyTorch's ``nn.Linear``) adds it inside the
#: GEMM (``addmm``).
UNFUSED_BIAS_ADD = ("act-eager", "act-rope-eager")


def unfused_bias_add_bytes(config: ModelConfig) -> tuple[float, float, float, float]:
    """Bytes per activation-output element (forward read, forward written, backward read, backward
    written) of Megatron-Core's separate bias add before an unfused activation
    (:data:`UNFUSED_BIAS_ADD`), in the model's dtype ``dt``: the add reads the first GEMM's output
    and writes it biased (``dt`` each per element of its input, the bias row read once); its
    backward passes the gradient through and reduces it over the tokens for the bias gradient
    (``dt`` read, nothing per element written).  A gated activation's input is twice its output
    (both halves biased), so 2 ``dt`` each.  Priced inside the ``act`` op (its own kernel's launch,
    a few microseconds, is not added)."""
    dt = float(config.dtype_bytes)
    width = 2.0 if config.gated else 1.0
    return (width * dt, width * dt, width * dt, 0.0)


#: How the routed experts' bias and activation clamp run (:attr:`cosearch.engine.Engine.expert_elementwise`):
#: ``"fused"`` (inside the experts' kernels: Transformer Engine's op fuser, or a model without
#: them) or as Megatron-Core's ``TEGroupedMLP`` runs them without the op fuser (every release
#: from core 0.15 to 0.19, ``megatron/core/transformer/moe/experts.py`` and
#: ``fusions/fused_bias_geglu.py``): ``"eager"`` with the router's probabilities in the model's
#: dtype, ``"eager-fp32-probs"`` with fp32 ones (the flex dispatcher's DeepEP and HybridEP
#: backends cast them to fp32, ``token_dispatcher.py``), or as torchtitan's GPT-OSS experts run
#: them without ``torch.compile`` (``"torchtitan"``: ``models/gpt_oss/moe.py``,
#: ``GptOssGroupedExperts.forward`` and ``swiglu``, torchtitan 0.3.0).  :func:`expert_eager_bytes`
#: itemizes the passes.
EXPERT_ELEMENTWISE = ("fused", "eager", "eager-fp32-probs", "torchtitan")


def expert_eager_bytes(mode: str, dt: int, clamped: bool = True) -> dict[str, tuple[float, float, float, float]]:
    """Bytes per element (forward read, forward written, backward read, backward written) of the
    routed experts' eager passes under :data:`EXPERT_ELEMENTWISE` ``mode`` (none when fused),
    each PyTorch kernel counted from the code (``dt``: the activations' bytes; a boolean mask 1):

    * ``expert_clamp``, per element of the up projection's ``[n, 2F]`` output, when the model
      clamps its gated activation (:attr:`cosearch.models.ModelConfig.activation_clamp`):
      ``weighted_bias_quick_geglu_impl`` splits it with ``chunk``, clamps each half
      (``x_glu.clamp(max=c)``, ``x_linear.clamp(-c, c)``: read and write a half each) and
      concatenates them (``torch.cat``: read and write the whole) before the fused activation: 2 dt read and 2
      dt written.  Backward: ``clamp_backward`` is ``where(mask, grad, 0)`` on a comparison mask
      (one comparison for the gate half; two and a ``logical_and_`` for the linear half), then
      ``chunk``'s backward concatenates the two gradients: (7 dt + 4) / 2 read, 2 dt + 2 written.
    * ``expert_bias``, per element of the down projection's ``[n, H]`` output, when the experts
      carry biases: ``_apply_bias`` runs ``t + b * p`` per local expert (``b`` the expert's bias,
      ``p`` each token's routing probability, the product in the promoted dtype of ``r`` bytes),
      concatenates the pieces (``torch.cat``) and casts back to the activations' dtype (a no-op when ``r`` is
      dt): dt + 2r (+ r) read, 3r (+ dt) written.  Backward: ``mul``'s two gradients (``grad * p``
      summed over tokens for the bias, ``grad * b`` summed over the hidden dimension for the
      probabilities: 4r read, 2r written), ``split``'s backward concatenating the pieces' gradients
      (dt read and written), and where the dtype was promoted the two casts of the gradient.

    ``"torchtitan"`` (torchtitan 0.3.0's ``GptOssGroupedExperts`` without ``torch.compile``: each
    PyTorch kernel of its forward and of autograd's backward, as a profile of the same ops lists
    them under torch 2.13; a stride-2 half of a row moves the row's whole memory sectors, so a
    kernel reading one half is counted reading the row; a comparison mask is 1 byte an element):

    * ``expert_fc1_bias``, per element of the up projection's ``[n, 2F]`` output, when the experts
      carry biases: ``repeat_interleave`` (an ``index_select`` of each token's expert's bias row:
      dt written) and ``h + b`` (2 dt read, dt written).  Backward: the gradient passes through the
      add; ``index_select``'s backward sums it per expert (``index_add_``: dt read, a table written).
    * ``expert_clamp``, per element of ``[n, 2F]``, when the model clamps its gated activation:
      ``swiglu`` clamps the even half (``clamp(max=c)``) and the odd half (``clamp(-c, c)``), each
      reading the row and writing its half: 2 dt read, dt written.  Backward: the one-sided clamp's
      ``le`` mask and ``where``, the two-sided one's ``ge`` and ``le`` masks, ``logical_and_`` and
      ``where`` (each comparison reads the row: 3 dt + 2 read with the masks and the halves'
      gradients, 2 + dt written), each half's ``slice_backward`` writing a zero row and copying the
      half's gradient into it (dt read, 4 dt written for both), and the in-place sum of the two rows
      (2 dt read, dt written): 7 dt + 2 read, 6 dt + 2 written.
    * ``expert_act``, per element of the activation's ``[n, F]`` output, when clamped (the
      unclamped ``F.silu(a) * b`` of torchtitan's other experts is :data:`EAGER_ELEMENTWISE_BYTES`'
      SwiGLU): ``alpha * g`` (dt read, dt written), ``sigmoid`` (dt, dt), ``g * s`` (2 dt, dt),
      ``addcmul(o, o, l)`` (its two tensors: 2 dt, dt): 6 dt read, 4 dt written.  Backward:
      ``addcmul``'s two gradients, each a scaling by its ``value`` and a product (6 dt read, 4 dt
      written), and the sum of ``o``'s two gradients (2, 1); the product's two gradients (4, 2);
      ``sigmoid_backward`` (2, 1); the scaling by alpha (1, 1) and the in-place sum of ``g``'s two
      gradients (2, 1): 17 dt read, 10 dt written.
    * ``expert_bias``, per element of the down projection's ``[n, H]`` output: ``repeat_interleave``
      (dt written) and the add (2 dt read, dt written; ``ScaleBiasForward``'s division by the tp
      degree, under tp > 1 only, not counted).  Backward: ``index_add_``'s sum (dt read)."""
    choice("expert_elementwise", mode, EXPERT_ELEMENTWISE)
    if isinstance(dt, bool) or dt not in (1, 2, 4):
        raise ValueError(f"expert_eager_bytes: dt must be an activation's bytes (1, 2 or 4), got {dt!r}")
    if mode == "fused":
        return {}
    if mode == "torchtitan":
        d = float(dt)
        out = {"expert_fc1_bias": (2.0 * d, 2.0 * d, d, 0.0),
               "expert_clamp": (2.0 * d, d, 7.0 * d + 2.0, 6.0 * d + 2.0),
               "expert_bias": (2.0 * d, 2.0 * d, d, 0.0)}
        if clamped:
            out["expert_act"] = (6.0 * d, 4.0 * d, 17.0 * d, 10.0 * d)
        return out
    r = float(max(dt, 4 if mode == "eager-fp32-probs" else dt))
    cast = r != dt
    clamp = (2.0 * dt, 2.0 * dt, (7.0 * dt + 4.0) / 2.0, 2.0 * dt + 2.0)
    bias = (dt + 2.0 * r + (r if cast else 0.0), 3.0 * r + (dt if cast else 0.0),
            4.0 * r + dt + ((dt + r) if cast else 0.0), 2.0 * r + dt + ((r + dt) if cast else 0.0))
    return {"expert_clamp": clamp, "expert_bias": bias}


#: The MoE token dispatchers cosearch prices (:attr:`cosearch.engine.Engine.moe_dispatcher`):
#: Megatron-Core's (``moe_token_dispatcher_type``) NCCL all-to-alls of every routed copy
#: (``"alltoall"``) or ``flex`` dispatcher (DeepEP / HybridEP kernels), and the one of frameworks
#: that gather the tokens over the tensor-parallel ranks before routing them
#: (``"gather-tokens"``): MaxText's ``sparse_matmul`` ("We all gather the input activations over
#: tensor parallelism"; ``ragged_all_to_all`` and ``local_permute`` across experts) and
#: torchtitan's MoE plan (``PrepareModuleInputOutput``: "all-gather for input, reduce-scatter for
#: output"; ``all_to_all_single`` and ``_permute`` across experts).
MOE_DISPATCHERS = ("alltoall", "flex", "gather-tokens")
#: The dispatchers whose ranks receive copies ordered by source rank and regroup them by local
#: expert (:func:`moe_regroup_bytes`).
REGROUPING_DISPATCHERS = ("alltoall", "gather-tokens")


def _check_dispatcher(name) -> None:
    choice("moe_dispatcher", name, MOE_DISPATCHERS)


def moe_regroup_bytes(dt: int) -> dict[str, tuple[float, float, float, float]]:
    """Bytes per element (forward read, forward written, backward read, backward written) of the
    two passes by which an all-to-all dispatch regroups a rank's received tokens
    (:func:`build`'s ``moe_dispatcher`` ``"alltoall"`` or ``"gather-tokens"``, copies received from
    more than one rank — ep > 1, or gathered over the tp ranks that split the experts — and more
    than one local expert; Megatron-Core also sorts an identity order at ep 1 and tp 1, not priced):
    the copies arrive from each source rank in expert order, ``[source rank, local expert]``, and
    the grouped GEMMs want them by local expert, ``[local expert, source rank]``.  Megatron-Core's
    ``MoEAlltoAllTokenDispatcher`` sorts them in ``dispatch_postprocess`` ("Permutation 2: Sort
    tokens by local expert", ``sort_chunks_by_idxs``, when ``num_local_experts > 1``) and restores
    the order in ``combine_preprocess`` ("Unpermutation 2"), every release from core 0.15 to 0.19;
    torchtitan's expert-parallel ``_token_dispatch`` gathers them by ``generate_permute_indices``
    and its ``_token_combine`` scatters them back.  Each is a permutation of whole rows:
    ``moe_sort`` and ``moe_unsort`` read and write every element once (dt each), and so do their
    backwards (the inverse permutation of the gradient).  The routing probabilities Megatron
    sorts beside the rows (one per row: under 0.2 % of the bytes at a hidden size of 2,048) are
    not counted.  The flex dispatcher's DeepEP and HybridEP deliver each token once per rank and
    permute it to its experts there (``moe_permute``): no regrouping.  MaxText's expert-parallel
    ``sparse_matmul`` sorts what ``ragged_all_to_all`` delivers with ``local_permute`` and
    restores it with ``_sort_activations``, torchtitan's with ``_permute`` and ``_unpermute``
    (dispatcher ``"gather-tokens"``)."""
    if isinstance(dt, bool) or dt not in (1, 2, 4):
        raise ValueError(f"moe_regroup_bytes: dt must be an activation's bytes (1, 2 or 4), got {dt!r}")
    row = (float(dt),) * 4
    return {"moe_sort": row, "moe_unsort": row}


#: Training precisions a graph can be built for.
PRECISIONS = ("bf16", "fp8", "fp4")
#: Bytes per GEMM operand element of each precision: NVFP4 packs 2 values per byte plus an
#: FP8 scale per 16-element block (0.5 + 1/16).
OPERAND_BYTES = {"bf16": 0.0, "fp8": 1.0, "fp4": 0.5625}

#: Each precision's scaling recipes, by Megatron-Core's names (``--fp8-recipe``,
#: ``--fp4-recipe``); the first is the default, as Megatron-LM's ``--fp8-recipe`` defaults to
#: ``delayed`` (``megatron/training/arguments.py``).  ``delayed``: per-tensor scales from the
#: amax history; ``tensorwise``: per-tensor current scaling, from the tensor's own amax;
#: ``blockwise``: 1x128 / 128x128 block scales; ``mxfp8``: 1x32 block scales; ``nvfp4``: 1x16
#: block scales under a per-tensor scale from the tensor's own amax.
SCALING_RECIPES = {"bf16": (), "fp8": ("delayed", "tensorwise", "blockwise", "mxfp8"), "fp4": ("nvfp4",)}

#: How a layer's casts run, as Transformer Engine's quantizers and norm kernels run them
#: (``transformer_engine/pytorch/csrc/quantizer.cpp``, ``extensions/normalization.cpp``):
#: ``"single"`` (one pass each, reading the bf16 input and writing both low-precision copies: the
#: scale is known before the cast, or block scales the cast kernel computes:
#: ``Float8BlockQuantizer`` and ``MXFP8Quantizer`` call ``nvte_quantize_v2`` alone, and their norm
#: outputs are cast after the norm, ``UNFUSED``); ``"norm-fused"`` (delayed scaling: as single,
#: but a norm fused into the GEMM's module writes its FP8 output itself, ``FULLY_FUSED`` for
#: ``Float8Quantizer``, so no bf16 copy is written and read again and the cast left is the
#: column-wise transpose); ``"amax-unfused"`` (``Float8CurrentScalingQuantizer::quantize_impl`` runs
#: ``nvte_compute_amax_with_config`` and then ``nvte_quantize_v2``, except where the producer
#: wrote the amax: TE's norm kernels do (``FUSED_NORM_AMAX_FP8`` in ``extensions/normalization.cpp``)
#: inside ``LayerNormLinear``, which Megatron-Core runs for a dense layer's QKV and first MLP GEMM
#: and MLA's q/kv up projections (``TELayerNormColumnParallelLinear``); its activation (Megatron's
#: own ``bias_swiglu``), attention output, MoE inputs behind a separate ``TENorm`` and every
#: gradient are plain bf16 tensors); ``"amax-all"`` (NVFP4 with its default random Hadamard transform
#: takes the amax after the transform, ``nvte_hadamard_transform_amax``, in the quantizer for every
#: tensor, the norms' fusion off: ``with_rht && with_post_rht_amax`` selects ``UNFUSED``).
#: The modes ending in :data:`ONE_COPY` run the same passes on a chip whose FP8 GEMMs take every
#: layout (:attr:`cosearch.hardware.Accelerator.fp8_any_layout`) under per-tensor scaling: a cast
#: writes one FP8 copy and no transpose, and a norm-fused cast has nothing left to do.
CAST_PASSES = ("single", "norm-fused", "amax-unfused", "amax-all", "single-one-copy", "norm-fused-one-copy",
               "amax-unfused-one-copy")
#: The suffix of a :data:`CAST_PASSES` mode whose casts write one low-precision copy
ONE_COPY = "-one-copy"
RECIPE_CAST_PASSES = {"delayed": "norm-fused", "blockwise": "single", "mxfp8": "single", "tensorwise": "amax-unfused",
                      "nvfp4": "amax-all"}


def check_attention_format(config: ModelConfig, fmt: str | None, flash_attention: bool) -> float:
    """The bytes per operand element of fused attention in ``fmt`` (:data:`ATTENTION_FORMAT_BYTES`;
    None: 0, the graph's dtype), refused where it cannot run: low-precision attention is a fused
    kernel (Transformer Engine's FP8 ``DotProductAttention``), so it needs ``flash_attention``, and
    DeepSeek-V4's compressed attention runs kernels of its own."""
    if fmt is None:
        return 0.0
    choice("attention_format", fmt, tuple(ATTENTION_FORMAT_BYTES))
    if not flash_attention:
        raise ValueError(f"attention_format={fmt!r} runs a fused FP8 attention kernel: it needs flash_attention=True")
    if config.compressed_attention is not None:
        raise ValueError(f"attention_format={fmt!r}: {config.name}'s compressed attention runs kernels of its own, "
                         "which cosearch prices in bf16: run its attention in bf16 (fp8_attention=False)")
    if config.chunked_layers and config.attention_chunk < config.seq_len:
        raise ValueError(f"attention_format={fmt!r}: {config.name} has chunked attention layers, for which no FP8 "
                         "attention kernel is measured: run its attention in bf16 (fp8_attention=False)")
    return ATTENTION_FORMAT_BYTES[fmt]


def fp8_window_backward_keys(config: ModelConfig) -> int:
    """The keys a low-precision (FP8 / MXFP8) fused attention backward meets per query row, in
    causal-attention units, where ``config`` has sliding-window layers (0 without: the forward's
    keys, its window share).  cuDNN's FP8 and MXFP8 backward under a sliding window does not skip
    the tiles outside the window: it meets every key of the causal mask.  cuDNN's own SDPA training
    benchmark shows it at GPT-OSS's window (128 keys, head dim 64) on GB200 and GB300, with cuDNN
    9.22, 9.26 and 9.27 alike (``cosearch/data/cudnn_sdpa_window.csv``): from 2k to 32k tokens the
    FP8 backward's time grows 3.1-3.9x per doubling of the sequence, as causal attention's work does,
    where the bf16 backward's and every forward's grow 2x (the window's), so at 32k it runs 25-35x
    slower than the bf16 one.  Transformer Engine sends FP8 sliding-window attention to this kernel on
    sm100 from cuDNN 9.21 (``get_attention_backend``).  So every layer's backward is priced as full
    causal attention, ``seq_len`` keys; at the chips' multi-head FP8 backward speeds (measured at head
    dims 192 and 128) cuDNN takes 1.25-1.47x that price at head dim 64, the same at every length to
    6 % (``tests/test_fp8_attention.py``) (chunked layers in FP8 are refused by
    :func:`check_attention_format`, context parallelism with windows by
    :func:`check_context_parallel`)."""
    if not config.sliding_layers:
        return 0
    return int(config.seq_len)


def check_scaling_recipe(precision: str, recipe: str | None, name: str = "scaling_recipe") -> str | None:
    """``recipe`` for ``precision`` (:data:`SCALING_RECIPES`; None: the precision's default,
    None under bf16), refused naming ``name`` where the precision has no such recipe."""
    choice("precision", precision, PRECISIONS)
    options = SCALING_RECIPES[precision]
    if recipe is None:
        return options[0] if options else None
    if recipe not in options:
        have = (f"choose one of {options}" if options else
                "bf16 has no scaling recipe; drop it, or give the precision fp8 or fp4")
        raise ValueError(f"{name}={recipe!r} with precision {precision!r}: {have}")
    return recipe


def _tp_amax_casts(c: ModelConfig) -> tuple[frozenset, frozenset]:
    """(forward, backward) casts of a sequence-parallel shard whose amax Transformer Engine
    all-reduces over the tensor-parallel group before casting (``set_quantizer_amax_reduction_group``
    in ``module/linear.py`` and ``layernorm_linear.py``: a column-parallel linear's input, a
    row-parallel linear's output gradient, under sequence parallelism): a dense layer's QKV and
    fc1 inputs, cast before their all-gathers, and the attention output's and fc2's incoming
    gradients; per-tensor current scaling and NVFP4 only (the other recipes need no amax).  An
    MoE layer's shared experts are such linears too (their input gathered on its own,
    :func:`_moe_mlp_gathered`)."""
    fwd, bwd = set(), {"attn_out.grad_cast"}
    if c.mla is None and c.compressed_attention is None:
        fwd.add("allgather_attn.cast")
    elif c.mla is not None:
        # MLA's up projections' inputs: the normed latents, gathered under sequence parallelism
        fwd |= {"allgather_q_latent.cast", "allgather_kv_latent.cast"}
    if not c.moe:
        fwd.add("allgather_mlp.cast")
        bwd.add("fc2.grad_cast")
    elif c.shared_experts:
        fwd.add("shared_allgather.cast")
        bwd.add("shared_fc2.grad_cast")
    return frozenset(fwd), frozenset(bwd)


def _norm_fused_casts(c: ModelConfig) -> frozenset:
    """The casts whose input comes from a norm that Megatron-Core fuses into the GEMM's module
    (``TELayerNormColumnParallelLinear``, Megatron-Core's ``gpt_layer_specs.py``): a dense
    layer's QKV and first MLP GEMM (with their sequence-parallel gathers' casts), MLA's q and kv up
    projections; MLA's input norm and an MoE layer's ``pre_mlp_layernorm`` are separate ``TENorm``s."""
    names = set()
    if c.mla is None and c.compressed_attention is None:
        names |= {"qkv.cast", "allgather_attn.cast"}
    elif c.mla is not None:
        names |= {"q_up.cast", "kv_up.cast", "allgather_q_latent.cast", "allgather_kv_latent.cast"}
    if not c.moe:
        names |= {"fc1.cast", "allgather_mlp.cast"}
    return frozenset(names)


def check_context_parallel(config: ModelConfig, cp, flash_attention: bool) -> int:
    """Validate a context-parallel degree for a model; returns it as an int.  The sequence
    must split into ``2 cp`` equal chunks (the load-balanced causal split Megatron-Core and
    torchtitan use), and CP needs fused attention (both run it only through flash/fused
    attention kernels)."""
    if isinstance(cp, bool) or not isinstance(cp, (int, np.integer)) or cp < 1:
        raise ValueError(f"context_parallel must be a positive integer, got {cp!r}")
    cp = int(cp)
    if cp > 1:
        if config.seq_len % (2 * cp):
            raise ValueError(f"context_parallel={cp}: the sequence length {config.seq_len} must split into "
                             f"2 x cp = {2 * cp} equal chunks (load-balanced causal attention)")
        if not flash_attention:
            raise ValueError(f"context_parallel={cp} needs flash attention (Megatron-Core and torchtitan run "
                             "context parallelism only with fused attention kernels); set flash_attention=True")
        if config.sliding_layers or (config.chunked_layers and config.attention_chunk < config.seq_len):
            kind = "sliding-window" if config.sliding_layers else "chunked"
            raise ValueError(f"context_parallel={cp} with {kind} attention is not modelled (the ring's chunks would "
                             "meet only the keys within the window); use context_parallel=1")
    return cp


def check_expert_tensor_parallel(config: ModelConfig, etp, tp: int, sequence_parallel: bool) -> int:
    """Validate an expert-tensor-parallel degree (None: tp, Megatron's default); returns it.
    cosearch prices etp = tp and etp = 1 (each tp rank an expert-parallel rank of its own), the
    latter with sequence parallelism (Megatron requires it for MoE under tp); shared experts stay
    tensor-parallel on the dense group, on gathered tokens (:func:`_shared_experts_sp`)."""
    if etp is None:
        return int(tp)
    if isinstance(etp, bool) or not isinstance(etp, (int, np.integer)) or etp < 1:
        raise ValueError(f"expert_tensor_parallel must be a positive integer, got {etp!r}")
    etp = int(etp)
    if etp == tp:
        return etp
    if etp != 1:
        raise ValueError(f"expert_tensor_parallel={etp} with tp={tp}: cosearch prices etp = tp or etp = 1")
    if not config.moe:
        raise ValueError("expert_tensor_parallel applies to mixture-of-experts models")
    if not sequence_parallel:
        raise ValueError(f"expert_tensor_parallel=1 under tp={tp} needs sequence parallelism (Megatron requires it "
                         "for MoE with tensor parallelism)")
    return 1


def check_expert_parallel(config: ModelConfig, ep) -> int:
    """Validate an expert-parallel degree for a model; returns it as an int."""
    if isinstance(ep, bool) or not isinstance(ep, (int, np.integer)) or ep < 1:
        raise ValueError(f"expert_parallel must be a positive integer, got {ep!r}")
    ep = int(ep)
    if ep > 1 and not config.moe:
        raise ValueError(f"expert_parallel={ep} needs a mixture-of-experts model; {config.name} is dense")
    if config.moe and config.num_experts % ep:
        raise ValueError(f"expert_parallel={ep} must divide the {config.num_experts} experts")
    return ep


def _check_parallel(config: ModelConfig, tp: int, microbatch: int) -> None:
    if isinstance(tp, bool) or int(tp) != tp or tp <= 0:
        raise ValueError(f"tp must be a positive integer, got {tp!r}")
    if isinstance(microbatch, bool) or int(microbatch) != microbatch or microbatch <= 0:
        raise ValueError(f"microbatch must be a positive integer, got {microbatch!r}")
    if config.heads % tp or config.kv_heads % tp and config.kv_heads >= tp:
        raise ValueError(f"tp={tp} must divide heads={config.heads} (and kv_heads={config.kv_heads})")
    if config.ffn_hidden % tp:
        raise ValueError(f"tp={tp} must divide ffn_hidden={config.ffn_hidden}")
    ca = config.compressed_attention
    if ca is not None and (ca.o_groups % tp or ca.index_heads % tp):
        raise ValueError(f"tp={tp} must divide compressed attention's o_groups={ca.o_groups} and "
                         f"index_heads={ca.index_heads} (each rank holds whole output groups and indexer heads)")


def moe_expert_tokens(c: ModelConfig, T: int, ep: int, seqs: int = 1) -> tuple[int, int]:
    """(tokens each of a rank's local experts computes, routed copies a rank dispatches) for ``T``
    tokens a rank in ``seqs`` sequences, balanced routing over the ``ep``-rank group.  Dropless:
    every local expert gets ``ceil(T k ep / E)`` and a rank sends its ``T k`` copies.  With a
    capacity factor an expert keeps at most its capacity, per rank ``ceil(T k / E x factor)``
    (Megatron-Core's ``get_capacity``) or per sequence ``int(ceil(S k / E) x factor)`` slots
    (MaxText's ``generate_masks``, under ``moe_einsum_dispatch``); padded (``moe_pad_to_capacity``)
    it computes and moves its whole capacity."""
    k, E = c.experts_per_token, c.num_experts
    load = max(1, math.ceil(T * k * ep / E))
    cf = c.moe_capacity_factor
    if not cf:
        return load, T * k
    if c.moe_einsum_dispatch:
        S = T // max(1, seqs)
        cap_rank = seqs * int(max(math.ceil(S * k / E) * cf, cf))        # slots per expert on one rank
    else:
        cap_rank = math.ceil(T * k / E * cf)
    cap = cap_rank * ep
    per = cap if c.moe_pad_to_capacity else min(load, cap)
    return per, per * E // ep


def _expert_ops(g: _Builder, c: ModelConfig, disp: int | None, per: int, local: int, fe: int, lowp: float,
                mode: str = "fused", regroup: bool = False) -> int:
    """The routed experts' ops (``local`` experts of ``per`` tokens each): the up projection as one
    grouped GEMM, the activation, the down projection; returns the last op's index.  ``mode``
    (:data:`EXPERT_ELEMENTWISE`) other than ``"fused"``: the clamp of a clamped activation and the
    experts' biases as passes of their own, torchtitan's up-projection bias too
    (:func:`expert_eager_bytes` prices them, :func:`_with_own_bytes`).  ``regroup``: the received
    tokens sorted by local expert before the experts and restored after them, where a rank holds
    more than one (:func:`moe_regroup_bytes`)."""
    width = 2 * fe if c.gated else fe
    regroup = regroup and local > 1
    if regroup:
        disp = g.vector("moe_sort", [disp], per * local * c.hidden, "mul")
    eager = mode != "fused"
    fc1 = g.expert_gemm("expert_fc1", [disp], per, width, c.hidden, local, lowp)
    if mode == "torchtitan" and c.bias:
        fc1 = g.vector("expert_fc1_bias", [fc1], per * local * width, "add", inputs=2)
    if eager and c.activation_clamp:
        fc1 = g.vector("expert_clamp", [fc1], per * local * width, "add")
    act = g.vector("expert_act", [fc1], per * local * fe, c.activation, inputs=2 if c.gated else 1)
    fc2 = g.expert_gemm("expert_fc2", [act], per, c.hidden, fe, local, lowp)
    if eager and c.bias:
        fc2 = g.vector("expert_bias", [fc2], per * local * c.hidden, "add", inputs=2)
    if regroup:
        fc2 = g.vector("moe_unsort", [fc2], per * local * c.hidden, "mul")
    return fc2


#: The operands of an MoE router's GEMM (:attr:`cosearch.engine.Engine.router_dtype`): the
#: model's dtype (``"bf16"``: Megatron-Core's router, whose ``--moe-router-dtype fp32`` keeps bf16
#: operands and writes fp32 logits, and MaxText's) or FP32 (``"fp32"``: torchtitan's
#: ``TokenChoiceTopKRouter`` computes ``gate(x)`` under ``torch.autocast(dtype=torch.float32)``,
#: "to help stability of expert load balancing", torchtitan 0.3.0 ``models/common/moe.py``; its
#: backward is FP32 too), priced on the vector lanes (:func:`cosearch._kernels.formulas.fp32_gemm_cycles`).
ROUTER_DTYPES = ("bf16", "fp32")


def _with_fp32_router(ops) -> list:
    """``ops`` with the MoE router's GEMM on FP32 operands (4 bytes each, its logits written in
    FP32; the parameter it gathers stays the model's)."""
    return [replace(o, dtype_bytes=4.0, bytes_read=(o.m * o.k + o.k * o.n) * o.batch * 4.0,
                    bytes_written=o.m * o.n * o.batch * 4.0) if o.name == "router" and o.kind == "gemm" else o
            for o in ops]


def _with_own_bytes(ops, own: dict) -> list:
    """``ops`` with each vector op named in ``own`` moving its own forward bytes per element
    (``own[name][:2]``)."""
    return [replace(o, bytes_read=o.elements * own[o.name][0], bytes_written=o.elements * own[o.name][1])
            if o.name in own and o.kind == "vector" else o for o in ops]


def moe_eager_bytes(config: ModelConfig, elementwise: str, expert_elementwise: str) -> dict:
    """An MoE layer's expert ops that move bytes of their own (op name -> bytes per element:
    forward read, forward written, backward read, backward written): under eager elementwise ops
    (:func:`eager_activation`: torchtitan's ``GroupedExperts`` and shared ``FeedForward`` run
    ``F.silu(a) * b`` op by op, as Megatron-Core's unfused activation does) the routed and shared
    experts' activation as
    :data:`EAGER_ELEMENTWISE_BYTES` prices the dense one, then the passes of ``expert_elementwise``
    (:func:`expert_eager_bytes`)."""
    c = config
    own: dict = {}
    if eager_activation(elementwise) and c.moe and c.activation in ("swiglu", "gelu"):
        own = {n: EAGER_ELEMENTWISE_BYTES[c.activation] for n in ("expert_act", "shared_act")}
    own.update(expert_eager_bytes(expert_elementwise, c.dtype_bytes, bool(c.activation_clamp)))
    return own


@functools.lru_cache(maxsize=512)
def _expert_pair(c: ModelConfig, per: int, local: int, tp: int, lowp: float,
                 passes: str = "single", expert_elementwise: str = "fused",
                 regroup: bool = False, elementwise: str = "fused") -> tuple[dict, dict]:
    """The routed experts' forward ops (:func:`_expert_ops`: ``local`` experts of ``per`` tokens
    each) and their backward, by name; cached, as many (tp, sequence-parallel, microbatch, ep)
    layers share them (callers must not change the dicts)."""
    g = _Builder(c.dtype_bytes, passes)
    _expert_ops(g, c, None, per, local, c.expert_ffn // tp, lowp, expert_elementwise, regroup)
    own = moe_eager_bytes(c, elementwise, expert_elementwise)     # (its shared_act names no op here)
    if regroup:
        own.update(moe_regroup_bytes(c.dtype_bytes))
    ops = _with_own_bytes(g.ops, own)
    return {o.name: o for o in ops}, {o.name: o for o in _backward(ops, tp, c.dtype_bytes, (),
                                                                    {k: v[2:] for k, v in own.items()},
                                                                    passes=passes)}


def with_expert_parallel(fwd: LayerGraph, bwd: LayerGraph, config: ModelConfig, tp: int, microbatch: int, ep: int,
                         context_parallel: int = 1, precision: str = "bf16",
                         cast_passes: str = "single", expert_elementwise: str = "fused",
                         moe_dispatcher: str = "alltoall", elementwise: str = "fused",
                         expert_precision: str | None = None) -> tuple[LayerGraph, LayerGraph]:
    """A dropless MoE layer's (forward, backward) graphs at expert parallelism ``ep`` >= 2, from
    the same layer's graphs at another ep >= 2: only the routed experts' ops differ (their token
    count and how many experts a rank holds; the all-to-alls move the same ``T k`` copies at every
    ep), so those ops are built again, with their backward, and put in place by name.  Equal to
    :func:`build` at ``ep`` (``tests/test_graph.py`` checks it op by op).  Under the ``alltoall``
    dispatcher both graphs must hold more than one expert a rank, or both one (the regrouping
    passes, :func:`moe_regroup_bytes`, run only with several)."""
    c = config
    if not c.moe or ep < 2 or c.moe_capacity_factor or c.moe_einsum_dispatch:
        raise ValueError("with_expert_parallel: a dropless MoE layer at ep >= 2")
    check_expert_parallel(c, ep)
    _check_dispatcher(moe_dispatcher)
    T = microbatch * (c.seq_len // context_parallel)
    per, _ = moe_expert_tokens(c, T, ep, microbatch)
    choice("cast_passes", cast_passes, CAST_PASSES)
    choice("expert_elementwise", expert_elementwise, EXPERT_ELEMENTWISE)
    regroup = moe_dispatcher in REGROUPING_DISPATCHERS
    had = any(o.name == "moe_sort" for o in fwd.ops)
    if had != (regroup and c.num_experts // ep > 1):
        raise ValueError(f"with_expert_parallel: the source graphs {'sort' if had else 'do not sort'} the received "
                         f"tokens by local expert, the {moe_dispatcher} dispatcher at ep {ep} "
                         f"({c.num_experts // ep} expert(s) a rank) {'does not' if had else 'does'}: build the "
                         "graphs at this ep (graph.build)")
    new_f, new_b = _expert_pair(c, per, c.num_experts // ep, tp,
                                0.0 if expert_precision == "bf16" else OPERAND_BYTES[precision], cast_passes,
                                expert_elementwise, regroup, elementwise)

    def moved(op: Op, deps: tuple[int, ...]) -> Op:
        # the rebuilt op at the original's place (its fields were validated when built)
        out = object.__new__(Op)
        out.__dict__.update(op.__dict__)
        out.__dict__["deps"] = deps
        return out

    def swap(graph: LayerGraph, new: dict) -> LayerGraph:
        # where the expert ops sit, found once per source graph (every ep derived from it reuses it)
        found = graph.__dict__.setdefault("_expert_at", {})
        names = tuple(sorted(new))
        at = found.get(names)
        if at is None:
            at = found[names] = [i for i, o in enumerate(graph.ops) if o.name in new]
        if len(at) != len(new):
            raise ValueError("with_expert_parallel: the graph's expert ops do not match")
        ops = list(graph.ops)
        for i in at:
            ops[i] = moved(new[ops[i].name], ops[i].deps)
        # each op keeps its place and its deps, so the validated source graph's order holds
        out = object.__new__(LayerGraph)
        out.__dict__.update(name=graph.name, ops=tuple(ops), phase=graph.phase, tp=graph.tp,
                            microbatch=graph.microbatch, meta={})
        rows = graph.arrays().copy()             # the other rows are the same ops'
        rows[at] = [ops[i].as_row() for i in at]
        rows.setflags(write=False)
        out.__dict__["_arrays"] = rows
        return out
    return swap(fwd, new_f), swap(bwd, new_b)


def _moe_mlp(g: _Builder, c: ModelConfig, x2: int, T: int, tp: int, ep: int, lowp: float, seqs: int = 1,
             eager: str = "fused", regroup: bool = False, shared: bool = True, *, expert_lowp: float) -> int:
    """An MoE MLP on this rank's T tokens (``seqs`` sequences): the router, token dispatch over
    the ``ep``-rank expert-parallel group (all-to-all of every routed copy of a token's hidden
    state, each tp rank sending its 1/tp share), the rank's ``E / ep`` experts as one batched GEMM
    per projection — expert load assumed balanced, each local expert's tokens from
    :func:`moe_expert_tokens` — the combine all-to-all back, and the shared experts as a dense
    MLP beside them.  Under ``moe_einsum_dispatch`` (MaxText's dense dispatch) the copies reach
    their ``(expert, slot)`` places and come back through one-hot matmuls per sequence instead of
    the permute gathers.  ``regroup``: the all-to-all dispatch's received tokens sorted by local
    expert and back (:func:`moe_regroup_bytes`), at ep > 1.  ``shared`` False: the shared experts
    are the caller's (:func:`_shared_experts_sp`).  ``expert_lowp``: the routed experts' operand
    bytes (``lowp``, or 0: bf16 experts in a low-precision layer)."""
    h, E = c.hidden, c.num_experts
    fe = c.expert_ffn // tp
    dt = c.dtype_bytes
    per, copies = moe_expert_tokens(c, T, ep, seqs)
    router = g.gemm("router", [x2], T, E, h)
    gate = g.vector("router_topk", [router], T * E, "softmax")
    moved = copies * h * dt / tp
    if c.moe_einsum_dispatch:
        # BSM,BSEC -> EBCM: per sequence an (E C) x h product over its S tokens
        S = T // max(1, seqs)
        slots = copies // max(1, seqs)
        perm = g.gemm("moe_dispatch_einsum", [x2, gate], slots, h, S, batch=seqs, weights=False)
    else:
        # the tokens copied into expert order, one row per routed copy (Megatron-Core's
        # moe_permute: a gather reading each copy's source row and writing it), before the
        # dispatch (the alltoall dispatcher) or after it (flex): the same rows either way
        perm = g.vector("moe_permute", [gate], copies * h, "mul")
    disp = g.collective("moe_dispatch", [perm], moved, "alltoall") if ep > 1 else perm
    fc2 = _expert_ops(g, c, disp, per, E // ep, fe, expert_lowp, eager, regroup and ep > 1 and not c.moe_einsum_dispatch)
    out = g.collective("moe_combine", [fc2], moved, "alltoall") if ep > 1 else fc2
    if c.shared_experts and shared:
        fs = c.shared_experts * fe
        s1 = g.linear("shared_fc1", [x2], T, 2 * fs if c.gated else fs, h, lowp)
        sa = g.vector("shared_act", [s1], T * fs, c.activation, inputs=2 if c.gated else 1)
        s2 = g.linear("shared_fc2", [sa], T, h, fs, lowp)
        out = g.vector("moe_add", [out, s2], T * h, "add", inputs=2)
    if c.moe_einsum_dispatch:
        # EBCM,BSEC -> BSM: each token's weighted sum over its slots
        S = T // max(1, seqs)
        return g.gemm("moe_combine_einsum", [out], S, h, copies // max(1, seqs), batch=seqs, weights=False)
    return g.vector("moe_unpermute", [out], copies * h, "mul")


def _moe_mlp_gathered(g: _Builder, c: ModelConfig, x: int, Tv: float, T: int, tp: int, ep: int, lowp: float,
                      seqs: int, eager: str, dispatcher: str, expert_lowp: float) -> int:
    """An MoE MLP whose experts are split over ``tp > 1`` ranks (expert tensor parallelism = tp, the
    default) under sequence parallelism, as Megatron-Core's dispatchers run it on this rank's own
    ``Tv`` tokens (``MoELayer`` takes the sequence-parallel shard: the router, the permutation and
    the dispatch see ``Tv``, not ``T``).  Every tp rank then computes its slice of each local
    expert on all ``T k`` copies its tp group received:

    * ``"alltoall"`` (``MoEAlltoAllTokenDispatcher``): the own ``Tv k`` copies permuted and sent over
      the ep group, the received copies all-gathered over tp (``dispatch_postprocess``: "AG(TP)",
      ``moe_allgather``, ``T k h`` gathered) and sorted by local expert (:func:`moe_regroup_bytes`;
      their sources are the ep x tp ranks), and after the experts restored, reduce-scattered over
      tp (``combine_preprocess``: "RS(TP)", ``moe_reducescatter``), sent back and unpermuted;
    * ``"flex"`` (``MoEFlexTokenDispatcher``: one DeepEP / HybridEP group over the tp x ep ranks,
      the routing map "replicated across TP group since each TP ranks in a TP group should receive
      the same tokens", ``_initialize_metadata``): the dispatch kernel delivers each token to every
      tp rank of each ep rank holding one of its experts
      (:func:`cosearch._kernels.formulas.flex_alltoall_s` with the ep ranks ``tp`` apart) and the
      combine sums the tp slices' outputs; the permutation to the local experts is of the
      received ``T k`` copies.

    Shared experts (``SharedExpertMLP``, a tensor-parallel MLP on the layer's input) gather the
    ``T`` tokens for their column-parallel GEMM (``shared_allgather``, in the low precision where the
    GEMM runs in it) and reduce-scatter their row-parallel output (``shared_reducescatter``)."""
    h, E, dt = c.hidden, c.num_experts, c.dtype_bytes
    fe = c.expert_ffn // tp
    per, copies = moe_expert_tokens(c, T, ep, seqs)
    own = copies / tp
    flex = dispatcher == "flex"
    router = g.gemm("router", [x], Tv, E, h)
    gate = g.vector("router_topk", [router], Tv * E, "softmax")
    perm = g.vector("moe_permute", [gate], (copies if flex else own) * h, "mul")
    moved = own * h * dt
    exchange = ep > 1 or flex
    disp = g.collective("moe_dispatch", [perm], moved, "alltoall") if exchange else perm
    if not flex:
        disp = g.collective("moe_allgather", [disp], copies * h * dt, "allgather")
    out = _expert_ops(g, c, disp, per, E // ep, fe, expert_lowp, eager, not flex)
    if not flex:
        out = g.collective("moe_reducescatter", [out], copies * h * dt, "reducescatter")
    if exchange:
        out = g.collective("moe_combine", [out], moved, "alltoall")
    out = g.vector("moe_unpermute", [out], (copies if flex else own) * h, "mul")
    return _shared_experts_sp(g, c, x, out, Tv, T, tp, lowp)


def _shared_experts_sp(g: _Builder, c: ModelConfig, x: int, routed: int, Tv: float, T: int, tp: int,
                       lowp: float) -> int:
    """An MoE layer's shared experts under sequence parallelism (Megatron-Core's
    ``SharedExpertMLP``: an MLP on the dense tensor-parallel group, ``pg_collection.tp``, whatever
    the experts' tensor parallelism): the ``T`` tokens gathered from the ranks' ``Tv`` for the
    column-parallel GEMM (``gather_from_sequence_parallel_region``: ``shared_allgather``, in the low
    precision where the GEMM runs in it), each rank's ``1 / tp`` of their width, the row-parallel
    output reduce-scattered back (``shared_reducescatter``) and added to the routed experts'
    output ``routed``; ``routed`` itself without shared experts."""
    if not c.shared_experts:
        return routed
    h, dt = c.hidden, c.dtype_bytes
    fs = c.shared_experts * (c.expert_ffn // tp)
    xs = g.sp_allgather("shared_allgather", x, Tv * h, T * h, lowp)
    s1 = g.linear("shared_fc1", [xs], T, 2 * fs if c.gated else fs, h, lowp, not lowp)
    sa = g.vector("shared_act", [s1], T * fs, c.activation, inputs=2 if c.gated else 1)
    s2 = g.linear("shared_fc2", [sa], T, h, fs, lowp)
    s2 = g.collective("shared_reducescatter", [s2], T * h * dt, "reducescatter")
    return g.vector("moe_add", [routed, s2], Tv * h, "add", inputs=2)


def _forward_layer(config: ModelConfig, tp: int, b: int, sp: bool = False, flash: bool = False,
                   cp: int = 1, lowp: float = 0.0, ep: int = 1, experts_local: bool = False,
                   passes: str = "single", tp_amax: frozenset = frozenset(), expert_eager: str = "fused",
                   dispatcher: str = "alltoall", attention_lowp: float = 0.0,
                   experts_lowp: float | None = None, sinks: bool = False) -> list[Op]:
    c = config
    s, h = c.seq_len, c.hidden
    sl = s // cp  # this rank's share of the sequence under context parallelism
    a = c.heads // tp
    kv = max(1, c.kv_heads // tp)  # GQA with kv_heads < tp replicates KV heads
    f = c.ffn_hidden // tp
    T = b * sl
    Tv = T // tp if sp and T % tp == 0 else (T / tp if sp else T)  # rows of the replicated region
    act_bytes = T * h * c.dtype_bytes
    g = _Builder(c.dtype_bytes, passes, _norm_fused_casts(c), tp_amax if sp and tp > 1 else frozenset())
    g.attention_lowp = attention_lowp
    norm = c.norm
    nh = c.hyper_connections
    x_pre = _hyper_pre(g, "attn", [], Tv, h, nh)
    n1 = g.vector("norm1", [x_pre], Tv * h, norm)
    gathered = sp and tp > 1
    ca = c.compressed_attention
    # multi-head latent attention under sequence parallelism projects its own rows down and
    # gathers the normed latents, not the layer input (Megatron-Core's MLA: "[s / TP, b,
    # q_lora_rank]" from the duplicated down projections, the gather in the up projections)
    latent_rows = Tv if gathered and c.mla is not None and c.mla[0] > 0 and ca is None else None
    cast_in = not (gathered and lowp) or latent_rows is not None   # a low-precision SP gather delivers the cast
    x_in = g.sp_allgather("allgather_attn", n1, Tv * h, T * h, lowp) if gathered and latent_rows is None else n1
    if ca is not None:
        out = _compressed_attention(g, c, ca, x_in, T, sl, b, a, tp, lowp, cast_in)
    else:
        ctx = _attention(g, c, x_in, T, sl, b, a, kv, flash, lowp, cast_in, latent_rows)
        if sinks:
            # torchtitan's apply_attention_sink_rescale: out * sigmoid(lse - sinks) (ATTENTION_SINK_BYTES)
            ctx = g.vector("attn_sinks", [ctx], T * a * c.head_dim, "mul")
        out = g.linear("attn_out", [ctx], T, h, a * c.head_dim, lowp)
    if tp > 1:
        out = (g.collective("reducescatter_attn", [out], act_bytes, "reducescatter") if sp
               else g.allreduce("allreduce_attn", [out], act_bytes))
    if c.post_norms:
        out = g.vector("post_attn_norm", [out], Tv * h, norm)
    if c.dropout:
        out = g.vector("dropout1", [out], Tv * h, "dropout")
    r1 = g.vector("residual1", [out], Tv * h * nh, "add", inputs=2)
    n2 = g.vector("norm2", [_hyper_pre(g, "mlp", [r1], Tv, h, nh)], Tv * h, norm)
    # an MoE layer's router and token dispatch take the gathered tokens in the graph's dtype
    mlp_lowp = 0.0 if c.moe else lowp
    local = c.moe and experts_local       # expert tensor parallelism 1 under tp > 1
    elowp = lowp if experts_lowp is None else experts_lowp      # the routed experts' operand bytes
    regroup = dispatcher in REGROUPING_DISPATCHERS and ep > 1
    if local:
        # this rank's own Tv tokens to the router and the dispatch, whole experts: no tp collective;
        # the shared experts stay on the dense tp group, on gathered tokens
        fc2 = _moe_mlp(g, c, n2, Tv, 1, ep, lowp, b, expert_eager, regroup, shared=False, expert_lowp=elowp)
        fc2 = _shared_experts_sp(g, c, n2, fc2, Tv, T, tp, lowp)
    elif c.moe and gathered and dispatcher != "gather-tokens" and not c.moe_einsum_dispatch:
        # the experts split over the tp ranks under sequence parallelism: Megatron-Core's dispatchers
        # gather the routed copies over tp after the dispatch (and the shared experts their tokens)
        fc2 = _moe_mlp_gathered(g, c, n2, Tv, T, tp, ep, lowp, b, expert_eager, dispatcher, elowp)
        local = True                      # (its collectives are its own: no reduce-scatter after it)
    else:
        x2 = g.sp_allgather("allgather_mlp", n2, Tv * h, T * h, mlp_lowp) if gathered else n2
        if c.moe:
            fc2 = _moe_mlp(g, c, x2, T, tp, ep, lowp, b, expert_eager, regroup, expert_lowp=elowp)
        else:
            # Megatron fuses a gated MLP's gate and up projections into one column-parallel GEMM
            fc1 = g.linear("fc1", [x2], T, 2 * f if c.gated else f, h, lowp, cast_in)
            act = g.vector("act", [fc1], T * f, c.activation, inputs=2 if c.gated else 1)
            fc2 = g.linear("fc2", [act], T, h, f, lowp)
    y = fc2
    if tp > 1 and not local:
        y = (g.collective("reducescatter_mlp", [fc2], act_bytes, "reducescatter") if sp
             else g.allreduce("allreduce_mlp", [fc2], act_bytes))
    if c.post_norms:
        y = g.vector("post_mlp_norm", [y], Tv * h, norm)
    if c.dropout:
        y = g.vector("dropout2", [y], Tv * h, "dropout")
    g.vector("residual2", [y, r1], Tv * h * nh, "add", inputs=2)
    return g.ops


def _attention(g: _Builder, c: ModelConfig, x_in: int, T: int, sl: int, b: int, a: int, kv: int, flash: bool,
               lowp: float, cast_in: bool, latent_rows: float | None = None) -> int:
    """Multi-head (GQA) or multi-head latent attention on this rank's ``T`` tokens and ``a``
    heads (``kv`` K/V heads): the projections, RoPE and the core; returns the core.
    ``latent_rows``: MLA under sequence parallelism, whose down projections and latent norms run
    on the rank's own rows (``x_in`` not gathered) and whose normed latents (with the key's rope
    part) are gathered over the tp ranks before the up projections."""
    s, h, d = c.seq_len, c.hidden, c.head_dim
    if c.mla is not None:
        # multi-head latent attention: Q and K/V from low-rank latents (the down projections
        # replicated over the tp ranks, the up projections split by head); the attention core
        # is priced with head width d + rope / 2 (QK^T over d + rope, PV over d)
        # the latents are normed before their up projections (DeepSeek's q_a_layernorm and
        # kv_a_layernorm; Megatron-Core's --qk-layernorm, fused into the up projections'
        # LayerNormLinear)
        qr, kvr, rope = c.mla
        rows = T if latent_rows is None else latent_rows      # the down projections' rows
        m_rows = int(math.ceil(rows))
        gather = latent_rows is not None and qr > 0
        if qr:
            qd = g.linear("q_down", [x_in], m_rows, qr, h, lowp, cast_in)
            qd = g.vector("q_latent_norm", [qd], rows * qr, c.norm)
            if gather:       # gathered low-precision where the up projection's input is (its cast)
                qd = g.sp_allgather("allgather_q_latent", qd, rows * qr, T * qr, lowp)
            qkv = g.linear("q_up", [qd], T, a * (d + rope), qr, lowp, not gather)
        else:                   # no query latent: Megatron-Core's linear_q_proj
            qkv = g.linear("q_proj", [x_in], T, a * (d + rope), h, lowp, cast_in)
        kvd = g.linear("kv_down", [x_in], m_rows, kvr + rope, h, lowp, cast_in)
        kvn = g.vector("kv_latent_norm", [kvd], rows * kvr, c.norm)
        if gather:           # the kv latent with the key's rope part
            kvn = g.sp_allgather("allgather_kv_latent", kvn, rows * (kvr + rope), T * (kvr + rope), lowp)
        kvu = g.linear("kv_up", [kvn], T, a * 2 * d, kvr, lowp, not gather)
        qkv = g.vector("mla_join", [qkv, kvu], T * a * (3 * d + rope), "add", inputs=1)
        qkv_width, out_width = a * (3 * d + rope), a * d
        d = d + rope // 2
    else:
        qkv = g.linear("qkv", [x_in], T, (a + 2 * kv) * d, h, lowp, cast_in)
        qkv_width, out_width = (a + 2 * kv) * d, a * d
    x = qkv
    qk = [qkv]
    if c.qk_norm != "none":
        # q and k normed after their projection, before RoPE (priced as the model's norm: a
        # weightless L2 norm makes RMSNorm's passes)
        kind = c.qk_norm_kind
        qk = [g.vector("q_norm", [qkv], T * a * d, kind), g.vector("k_norm", [qkv], T * kv * d, kind)]
        x = qk[0]
    if c.position == "rotary":
        x = g.vector("rotary", qk, T * (a + kv) * d * c.rotary_fraction, "rotary")
    elif len(qk) == 2:
        qkv = qk[1]
    if flash:
        # FlashAttention: QK^T and PV fused (2 s^2 d per head each, half of the blocks
        # skipped under the causal mask), reads Q, K, V, writes O.  Under context
        # parallelism a rank's sl queries meet all s keys (the K/V ring) and load-balanced
        # causal chunks give every rank 1/cp of the causal work: 2 sl s d per head each
        # sliding-window layers (the mean over the layers): fewer (query, key) pairs
        src, lo = [x, qkv], g.attention_lowp
        if lo:      # FP8 / MXFP8 attention: Q, K, V cast before the kernel, O cast back after it
            src = [g.attention_cast("attn_core.quant", src, T * qkv_width, True)]
        ctx = g.attention("attn_core", src, sl, s, d, b * a, c.attention_flops_share, sl + 2.0 * s, float(sl),
                          operand_bytes=lo or None)
        if lo:
            ctx = g.attention_cast("attn_core.dequant", [ctx], T * out_width, False)
    else:
        sc = g.gemm("attn_scores", [x], s, s, d, batch=b * a, weights=False)
        if c.attention_softcap:
            sc = g.vector("attn_softcap", [sc], b * a * s * s, "softcap")
        sm = g.vector("softmax", [sc], b * a * s * s, "softmax")
        if c.dropout:
            sm = g.vector("attn_dropout", [sm], b * a * s * s, "dropout")
        ctx = g.gemm("attn_context", [sm, qkv], s, d, s, batch=b * a, weights=False)
    return ctx


def _hyper_pre(g: _Builder, where: str, deps, rows: float, h: int, n: int) -> int | None:
    """Hyper-connections before a sublayer (``n`` residual streams, none when ``n`` is 1): the
    RMSNorm over the ``n h`` streams, the ``n h -> n^2 + 2n`` coefficient projection (its 20
    Sinkhorn iterations on ``n x n`` per token are left out: ``20 n^2`` operations against the
    projection's ``2 n h (n^2 + 2n)``) and the weighted sum of the streams into the sublayer's
    input (MaxText's ``layers/mhc.py``).  The mix back (``H_res x + H_post y``) is the sublayer's
    residual op, ``n`` streams wide."""
    if n == 1:
        return deps[0] if deps else None
    rn = g.vector(f"hc_norm_{where}", deps, rows * n * h, "rmsnorm")
    coef = g.gemm(f"hc_coef_{where}", [rn], int(math.ceil(rows)), n * n + 2 * n, n * h)
    return g.vector(f"hc_pre_{where}", [coef, rn], rows * n * h, "mul", inputs=2)


def _compressed_attention(g: _Builder, c: ModelConfig, ca, x_in: int, T: int, sl: int, b: int, a: int, tp: int,
                          lowp: float, cast_in: bool) -> int:
    """DeepSeek-V4's attention (:mod:`cosearch.compressed_attention`) on this rank's ``T`` tokens
    and ``a`` heads, priced at the mean over the layers' kinds: the low-rank query (the down
    projection replicated over the tp ranks, as MLA's), the one shared K/V head (replicated), the
    compressors' projections and gated pooling (their mean width), the CSA indexer's query, key
    and weight projections and its scores of every visible entry (its ``index_heads`` split by tp;
    a fused kernel writing one fp32 logit per entry and query, then a top-k pass over them) — all
    scaled by the share of layers with an indexer — and the fused attention core over the mean keys
    a query meets (:meth:`CompressedAttention.mean_keys`), and the grouped output projection;
    returns the output projection (row parallel: the caller reduces it over tp)."""
    s, h, d = c.seq_len, c.hidden, c.head_dim
    rope = ca.rope_head_dim
    qr = ca.q_lora_rank
    ql = g.linear("q_down", [x_in], T, qr, h, lowp, cast_in)
    qn = g.vector("q_norm", [ql], T * qr, "rmsnorm")
    q = g.linear("q_up", [qn], T, a * d, qr, lowp)
    q = g.vector("q_head_norm", [q], T * a * d, "rmsnorm")
    kv = g.linear("kv_proj", [x_in], T, c.kv_heads * d, h, lowp, cast_in)
    kv = g.vector("kv_norm", [kv], T * c.kv_heads * d, "rmsnorm")
    deps = [q, kv]
    width = int(round(ca.compressor_width(d)))
    if width:
        comp = g.linear("compress_proj", [x_in], T, width, h, lowp, cast_in)
        deps.append(g.vector("compress_pool", [comp], T * width / 2.0, "softmax", inputs=2))
    if ca.csa_layers:
        share = ca.csa_share
        ih, idd = ca.index_heads // tp, ca.index_head_dim
        iq = g.linear("index_q", [qn], T, max(1, int(round(share * ih * idd))), qr, lowp)
        ik = g.linear("index_compress_proj", [x_in], T, max(1, int(round(share * 4 * idd))), h, lowp, cast_in)
        ik = g.vector("index_pool", [ik], T * share * 2.0 * idd, "softmax", inputs=2)
        iw = g.linear("index_weights", [x_in], T, max(1, int(round(share * ih))), h, lowp, cast_in)
        seen = ca.mean_index_keys(s)              # entries a query scores, the mean over layers
        logits = T * seen * 4.0                   # one fp32 logit per scored entry
        sc = g.attention("index_scores", [iq, ik, iw], sl, s, idd, b * ih, seen / s,
                         sl + share * s / CSA_RATIO, logits / (idd * b * ih * g.dt))
        deps.append(g.vector("index_topk", [sc], T * seen, "softmax"))
    if c.position == "rotary" and rope:
        deps.append(g.vector("rotary", deps[:2], T * (a + c.kv_heads) * rope, "rotary"))
    # QK^T and PV over the mean keys: 4 mean_keys d per head and query, as 2 sl s d x factor
    factor = 2.0 * ca.mean_keys(s) / s
    ctx = g.attention("attn_core", deps, sl, s, d, b * a, factor, sl + 2.0 * s, float(sl))
    if c.position == "rotary" and rope:
        ctx = g.vector("rotary_out", [ctx], T * a * rope, "rotary")
    # the grouped low-rank output: each of this rank's o_groups / tp groups of heads to
    # o_lora_rank (one grouped GEMM), then all of them to the hidden size (row parallel)
    groups = ca.o_groups // tp
    oa = g.expert_gemm("o_group_proj", [ctx], T, ca.o_lora_rank, a * d // groups, groups, lowp)
    return g.linear("attn_out", [oa], T, h, groups * ca.o_lora_rank, lowp)


_CONJUGATE = {"allgather": "reducescatter", "reducescatter": "allgather", "alltoall": "alltoall"}


def _backward(fwd: list[Op], tp: int, dt: int, allreduce_after: Sequence[str],
              own_bwd: dict[str, tuple[float, float]] | None = None, passes: str = "single",
              tp_amax: frozenset = frozenset(), lowp_attention_bwd_keys: int = 0) -> list[Op]:
    """Reverse-mode graph of a forward op list.  A forward all-reduce (Megatron's ``g``)
    is the identity backward; an all-gather becomes a reduce-scatter and vice versa
    (sequence parallelism); input-gradient all-reduces (Megatron's ``f``) are inserted
    after the GEMMs named in ``allreduce_after`` when the forward has no all-gather.
    ``own_bwd``: by op name, the backward's bytes (read, written) per element of vector ops
    that have their own (the fp32 loss, eager elementwise ops); else the vector-op rule.
    ``passes`` (:data:`CAST_PASSES`): under ``"amax-unfused"`` or ``"amax-all"`` every incoming
    gradient's cast takes its amax pass (a gradient is a plain bf16 tensor: no norm writes it);
    ``tp_amax``: the gradient casts whose amax is all-reduced over the tensor-parallel ranks
    under sequence parallelism (:func:`_tp_amax_casts`).  ``lowp_attention_bwd_keys`` (0: the
    forward's): the keys a low-precision fused attention's backward meets, in causal-attention
    units (:func:`fp8_window_backward_keys`)."""
    consumers: dict[int, list[int]] = {i: [] for i in range(len(fwd))}
    for i, op in enumerate(fwd):
        for dep in op.deps:
            consumers[dep].append(i)
    sequence_parallel = any(op.kind == "allgather" for op in fwd)
    g = _Builder(dt, passes, tp_amax=tp_amax if sequence_parallel else frozenset())
    grad_of: dict[int, list[int]] = {}  # fwd op -> bwd ops producing the gradient of its inputs

    def upstream(i: int) -> list[int]:
        deps: list[int] = []
        for cons in consumers[i]:
            deps.extend(grad_of[cons])
        return deps

    for i in reversed(range(len(fwd))):
        op = fwd[i]
        deps = upstream(i)
        if op.kind == "allreduce":
            grad_of[i] = deps  # gradient flows through unchanged
            continue
        if op.kind in _CONJUGATE:
            # a gather sized by its elements (sp_allgather) returns its gradient in the graph's dtype
            nbytes = op.elements * dt if op.elements else op.bytes_read
            grad_of[i] = [g.collective(f"{op.name}.grad", deps, nbytes, _CONJUGATE[op.kind])]
            continue
        if op.kind == "cast" and op.name.endswith(ATTENTION_CASTS):
            # a low-precision attention's casts mirror: the forward's dequantized O is the
            # backward's quantized dO, its quantized Q, K, V the dequantized dQ, dK, dV
            grad_of[i] = [g._add(replace(op, name=f"{op.name}.grad", deps=tuple(deps), bytes_read=op.bytes_written,
                                         bytes_written=op.bytes_read))]
            continue
        if op.kind == "cast" or (op.kind == "vector" and op.name.endswith(".amax")):
            # the cast's gradient passes through (the dgrad GEMM writes bf16); an amax has none
            grad_of[i] = deps
            continue
        if op.kind == "gemm":
            # an FP8 GEMM's gradients are FP8 GEMMs too, on the incoming gradient cast first
            # (its row-wise copy for the data gradient, its column-wise one for the weight's)
            ob = op.dtype_bytes
            if ob < dt:
                deps = [g.fp8_cast(f"{op.name}.grad_cast", deps, op.m * op.n * op.batch, ob)]
            if op.name == ONE_HOT_EMBEDDING:        # the one-hot tokens have no gradient: the table's only
                g.gemm(f"{op.name}.wgrad", deps, op.k, op.n, op.m, batch=op.batch, operand_bytes=ob)
                grad_of[i] = []
                continue
            dg = g.gemm(f"{op.name}.dgrad", deps, op.m, op.k, op.n, batch=op.batch, operand_bytes=ob)
            g.gemm(f"{op.name}.wgrad", deps, op.k, op.n, op.m, batch=op.batch, operand_bytes=ob)
            if tp > 1 and op.name in allreduce_after and not sequence_parallel:
                dg = g.allreduce(f"{op.name}.allreduce", [dg], op.m * op.k * dt)
            grad_of[i] = [dg]
        elif op.kind == "bmm":
            ga = g.gemm(f"{op.name}.grad_a", deps, op.m, op.k, op.n, batch=op.batch, weights=False)
            gb = g.gemm(f"{op.name}.grad_b", deps, op.k, op.n, op.m, batch=op.batch, weights=False)
            grad_of[i] = [ga, gb]
        elif op.kind == "attention":
            # FlashAttention-2 backward: 5 matmuls for the forward's 2 (the scores are
            # recomputed), reads Q, K, V, O, dO and writes dQ, dK, dV
            # (Q, O, dO and dQ have the query rows, K, V, dK and dV the key rows)
            sq, d_ = op.m, op.head_dim or op.k        # the forward's n holds its keys times its factor
            kv_rows = op.bytes_read / (d_ * op.batch * op.dtype_bytes) - sq   # the forward's K and V rows
            lowp = op.dtype_bytes < dt
            keys = lowp_attention_bwd_keys if lowp and lowp_attention_bwd_keys else op.n
            grad_of[i] = [g.attention(f"{op.name}.grad", deps, sq, keys, d_, op.batch, 1.0,
                                      3.0 * sq + kv_rows, sq + kv_rows, work=ATTENTION_BWD_FACTOR,
                                      operand_bytes=op.dtype_bytes if lowp else None)]
        else:
            name = f"{op.name}.grad"
            # reads its inputs and the output's gradient (elements in the graph's dtype, whatever the
            # forward wrote: a norm fused with its FP8 cast writes FP8), writes the inputs' gradients
            rd, wr = op.bytes_read + op.elements * op.dtype_bytes, op.bytes_read
            if own_bwd and op.name in own_bwd:
                rd, wr = op.elements * own_bwd[op.name][0], op.elements * own_bwd[op.name][1]
            bw = Op(name, "vector", tuple(deps), elements=op.elements,
                    ops_per_element=2 * op.ops_per_element, bytes_read=rd, bytes_written=wr,
                    dtype_bytes=op.dtype_bytes)
            grad_of[i] = [g._add(bw)]
    return g.ops


def _forward_embedding(config: ModelConfig, tp: int, b: int, sp: bool = False,
                       flash: bool = False, cp: int = 1, lowp: float = 0.0, ep: int = 1,
                       one_hot: bool = False) -> list[Op]:
    c = config
    T = b * (c.seq_len // cp)
    Tv = T / tp if sp else T
    g = _Builder(c.dtype_bytes)
    if one_hot:        # MaxText's use_iota_embed: one-hot(tokens) x this rank's rows of the table
        e = g.gemm(ONE_HOT_EMBEDDING, [], T, c.hidden, vocab_shard(c.vocab, tp))
    else:
        e = g.vector("embedding", [], T * c.hidden, "embedding")
    if tp > 1:  # vocab-parallel embedding: partial lookups summed across ranks
        e = (g.collective("reducescatter_embedding", [e], T * c.hidden * c.dtype_bytes, "reducescatter")
             if sp else g.allreduce("allreduce_embedding", [e], T * c.hidden * c.dtype_bytes))
    if c.position == "learned":
        e = g.vector("position_add", [e], Tv * c.hidden, "add", inputs=2)
    if c.dropout:
        g.vector("embedding_dropout", [e], Tv * c.hidden, "dropout")
    return g.ops


def _forward_head(config: ModelConfig, tp: int, b: int, sp: bool = False, flash: bool = False,
                  cp: int = 1, lowp: float = 0.0, ep: int = 1) -> list[Op]:
    """Final norm, LM head and loss; the LM head stays in bf16 under FP8 training (Transformer
    Engine and torchao leave the output layer in high precision)."""
    c = config
    T = b * (c.seq_len // cp)
    g = _Builder(c.dtype_bytes)
    n = g.vector("final_norm", [], (T / tp if sp else T) * c.hidden, c.norm)
    if sp and tp > 1:
        n = g.collective("allgather_head", [n], T * c.hidden * c.dtype_bytes, "allgather")
    shard = vocab_shard(c.vocab, tp)
    logits = g.gemm("lm_head", [n], T, shard, c.hidden)
    if c.logit_softcap:
        logits = g.vector("logit_softcap", [logits], T * shard, "softcap")
    g.vector("cross_entropy", [logits], T * shard, "cross_entropy")
    return g.ops


#: The one-hot embedding's GEMM (:data:`EMBEDDINGS`): its backward has no data gradient.
ONE_HOT_EMBEDDING = "embedding_onehot"

#: Frameworks pad the vocabulary so each tensor-parallel rank's share of the LM head is a
#: multiple of this (Megatron-LM's ``--make-vocab-size-divisible-by 128``, per rank).
VOCAB_PAD = 128


def vocab_shard(vocab: int, tp: int) -> int:
    """Columns of the LM head on one of ``tp`` ranks: the vocabulary padded up to a multiple of
    ``VOCAB_PAD * tp``, split evenly (GPT-2's 50,257 at tp 8 -> 6,400 of 51,200), so the head's
    GEMMs are the aligned ones a framework runs (unaligned GEMMs run slow kernels: a 4,095-deep
    K runs 4.7x below the aligned rate on an H200, cosearch/data/h200_kernels.csv)."""
    return math.ceil(vocab / (VOCAB_PAD * tp)) * VOCAB_PAD


_PARTS = {"layer": (_forward_layer, ("qkv", "fc1")),
          "embedding": (_forward_embedding, ()),
          "head": (_forward_head, ("lm_head",))}


def build(config: ModelConfig, tp: int = 1, microbatch: int = 1, phase: str = "fwd",
          part: str = "layer", sequence_parallel: bool = False, flash_attention: bool = False,
          context_parallel: int = 1, precision: str = "bf16", expert_parallel: int = 1,
          cross_entropy: str = "fused", elementwise: str = "fused",
          expert_tensor_parallel: int | None = None, both: bool = False,
          embedding: str = "gather", cast_passes: str = "single", expert_elementwise: str = "fused",
          moe_dispatcher: str = "alltoall", attention_format: str | None = None,
          router_dtype: str = "bf16", expert_precision: str | None = None,
          attention_sinks: str = "kernel") -> LayerGraph:
    """Analytic op graph of one transformer layer (``part="layer"``), the input
    embedding (``"embedding"``) or the final norm + LM head + loss (``"head"``),
    for ``phase`` ``"fwd"`` or ``"bwd"``, tensor-parallel degree ``tp`` and
    ``microbatch`` sequences.  ``sequence_parallel`` replaces each TP all-reduce by a
    reduce-scatter + all-gather and shards the norms/dropouts/residuals by ``tp``;
    ``flash_attention`` fuses the attention core into one kernel without s x s traffic.
    ``context_parallel`` (cp) gives this rank ``seq_len / cp`` tokens of every sequence; its
    attention meets all keys through the K/V ring (the ring's transfers are priced by
    :func:`cosearch.plan.unit_costs`, not as graph ops).  ``precision="fp8"`` (or ``"fp4"``, NVFP4) runs the
    layer's weight GEMMs (QKV, attention output, MLP) on FP8 operands, each input cast
    first; attention and the LM head stay bf16.  ``expert_parallel`` (ep): an MoE layer's
    experts are spread over ep ranks (``num_experts / ep`` each), tokens dispatched to them and
    combined back by all-to-alls over that group.  ``expert_tensor_parallel`` (etp; None: tp,
    Megatron's default) 1 under tp > 1: each tensor-parallel rank is an expert-parallel rank of
    its own — its sequence-parallel share of the tokens goes to the router and the dispatch
    without the tp all-gather, whole experts (not split over tp) compute, and no reduce-scatter
    follows.  ``cross_entropy`` (:data:`CROSS_ENTROPY`):
    how the head's loss runs, a fused kernel or Megatron's fp32 passes.  ``elementwise``
    (:data:`ELEMENTWISE`): ``"eager"`` prices the norms (RMSNorm or LayerNorm), the activation
    (SwiGLU or GELU) and the rotary embedding as PyTorch's eager mode runs them
    (:data:`EAGER_ELEMENTWISE_BYTES`), ``"rope-eager"`` the rotary embedding alone,
    ``"act-eager"`` the activation alone, ``"act-rope-eager"`` the two.  ``embedding`` (:data:`EMBEDDINGS`): the input
    embedding's lookup, a gather or MaxText's one-hot GEMM.  ``cast_passes`` (:data:`CAST_PASSES`,
    :data:`RECIPE_CAST_PASSES` of a scaling recipe): how a low-precision layer's casts run — one
    pass each, delayed scaling's norms writing their FP8 output (not with eager elementwise ops:
    PyTorch's norms write bf16), or an amax read first (``<gemm>.amax`` ops).
    ``expert_elementwise`` (:data:`EXPERT_ELEMENTWISE`): an MoE layer's expert bias and activation
    clamp inside the experts' kernels (``"fused"``) or as Megatron-Core's eager passes
    (``expert_clamp`` and ``expert_bias`` ops, :func:`expert_eager_bytes`) or as torchtitan's GPT-OSS
    experts run them without ``torch.compile`` (``"torchtitan"``, an ``expert_fc1_bias`` op too); under
    an eager activation (:func:`eager_activation`) the experts' runs eager as well (:func:`moe_eager_bytes`).
    ``moe_dispatcher``
    (:data:`MOE_DISPATCHERS`, :attr:`cosearch.engine.Engine.moe_dispatcher`): with ``"alltoall"``
    or ``"gather-tokens"`` an MoE layer at ep > 1 whose ranks hold several experts each sorts the tokens it
    receives by local expert and restores their order before the combine (``moe_sort`` and
    ``moe_unsort``, :func:`moe_regroup_bytes`); ``"flex"`` permutes them once (``moe_permute``).
    Under sequence parallelism with the experts split over tp > 1 ranks, ``"alltoall"`` and
    ``"flex"`` route each rank's own tokens and gather the copies over tp as Megatron-Core does
    (:func:`_moe_mlp_gathered`); ``"gather-tokens"`` gathers the tokens before routing them.
    ``attention_format`` (None: the graph's dtype; ``"fp8"`` or ``"mxfp8"``,
    :data:`ATTENTION_FORMAT_BYTES`): the fused attention kernel on low-precision operands, as
    Megatron-Core's ``--fp8-dot-product-attention`` runs it (Transformer Engine's ``fp8_dpa``): Q, K
    and V cast before it and O cast back after it (``attn_core.quant`` / ``.dequant``, mirrored in
    the backward); price such a graph with the speeds of
    :meth:`cosearch.hardware.KernelEfficiency.with_fp8_attention`, as :func:`cosearch.plan.unit_costs` does.
    ``router_dtype`` (:data:`ROUTER_DTYPES`): an MoE router's GEMM on the model's operands or on
    FP32 ones (torchtitan's), priced on the vector lanes.  ``expert_precision`` (None: ``precision``;
    ``"bf16"``): the routed experts' grouped GEMMs in bf16 in a low-precision layer (torchtitan's
    Float8 converter swaps ``nn.Linear`` modules, so the grouped GEMMs stay bf16 unless
    ``moe_fqns_prototype`` names them).
    ``both``: return the (forward, backward) pair (:func:`build_pair`)."""
    if not isinstance(config, ModelConfig):
        raise ValueError(f"build expects a ModelConfig, got {type(config).__name__}")
    for name, value in (("sequence_parallel", sequence_parallel), ("flash_attention", flash_attention),
                        ("both", both)):
        flag(name, value)
    _check_parallel(config, tp, microbatch)
    tp, microbatch = int(tp), int(microbatch)
    if part not in _PARTS:
        raise ValueError(f"unknown part {part!r}; choose one of {sorted(_PARTS)}")
    if phase not in ("fwd", "bwd"):
        raise ValueError(f"phase must be 'fwd' or 'bwd', got {phase!r}")
    fwd_fn, ar_after = _PARTS[part]
    cp = check_context_parallel(config, context_parallel, flash_attention)
    if precision not in PRECISIONS:
        raise ValueError(f"precision={precision!r}; choose one of {PRECISIONS}")
    ep = check_expert_parallel(config, expert_parallel)
    if config.moe_einsum_dispatch and (tp > 1 or cp > 1) and part == "layer":
        raise ValueError("moe_einsum_dispatch (MaxText's dense dispatch) is modelled without tensor or context "
                         f"parallelism; got tp={tp}, cp={cp}")
    choice("cross_entropy", cross_entropy, CROSS_ENTROPY)
    choice("elementwise", elementwise, ELEMENTWISE)
    choice("embedding", embedding, EMBEDDINGS)
    choice("cast_passes", cast_passes, CAST_PASSES)
    choice("expert_elementwise", expert_elementwise, EXPERT_ELEMENTWISE)
    choice("attention_sinks", attention_sinks, ATTENTION_SINKS)
    _check_dispatcher(moe_dispatcher)
    attention_lowp = check_attention_format(config, attention_format, flash_attention)
    passes = cast_passes if precision != "bf16" and part == "layer" else "single"
    if passes.startswith("norm-fused") and elementwise == "eager":
        passes = passes.replace("norm-fused", "single")
    local = check_expert_tensor_parallel(config, expert_tensor_parallel, tp, bool(sequence_parallel)) == 1 and tp > 1
    extra = {"experts_local": True} if local and part == "layer" else {}
    if part == "embedding" and embedding == "one-hot":
        extra["one_hot"] = True
    if part == "layer" and attention_lowp:
        extra["attention_lowp"] = attention_lowp
    sinks = part == "layer" and config.attention_sinks and attention_sinks != "kernel" \
        and config.compressed_attention is None
    if sinks:
        extra["sinks"] = True
    tp_amax = _tp_amax_casts(config) if part == "layer" else (frozenset(), frozenset())
    if passes != "single":
        extra["passes"] = passes
        extra["tp_amax"] = tp_amax[0]
    if expert_precision not in (None, "bf16"):
        raise ValueError(f"expert_precision must be None (the layer's precision) or 'bf16', got {expert_precision!r}")
    if part == "layer" and config.moe and expert_precision == "bf16":
        extra["experts_lowp"] = 0.0
    eager_experts = part == "layer" and config.moe and expert_elementwise != "fused"
    if eager_experts:
        extra["expert_eager"] = expert_elementwise
    moe_layer = part == "layer" and config.moe
    if moe_layer and moe_dispatcher != "alltoall":
        extra["dispatcher"] = moe_dispatcher
    # the alltoall dispatcher regroups the copies a rank receives from several ranks (ep > 1, or
    # gathered over the tp ranks that split the experts)
    gathered_experts = (moe_layer and tp > 1 and bool(sequence_parallel) and not local
                        and moe_dispatcher != "gather-tokens" and not config.moe_einsum_dispatch)
    regroup = moe_layer and moe_dispatcher in REGROUPING_DISPATCHERS and (ep > 1 or gathered_experts)
    ops = fwd_fn(config, tp, microbatch, bool(sequence_parallel), bool(flash_attention), cp, OPERAND_BYTES[precision],
                 ep, **extra)
    own = {}        # op name -> its (forward read, forward written, backward read, backward written) per element
    if cross_entropy in ("fp32", "te"):
        own["cross_entropy"] = CROSS_ENTROPY_FP32_BYTES if cross_entropy == "fp32" else CROSS_ENTROPY_TE_BYTES
    if elementwise == "eager":
        if config.norm in ("rmsnorm", "layernorm"):
            own.update({n: EAGER_ELEMENTWISE_BYTES[config.norm] for n in ("norm1", "norm2", "final_norm")})
            if config.qk_norm != "none":
                own.update({n: EAGER_ELEMENTWISE_BYTES[config.qk_norm_kind] for n in ("q_norm", "k_norm")})
            if config.mla is not None:
                own.update({n: EAGER_ELEMENTWISE_BYTES[config.norm] for n in ("q_latent_norm", "kv_latent_norm")})
    if eager_activation(elementwise) and config.activation in ("swiglu", "gelu"):
        own["act"] = EAGER_ELEMENTWISE_BYTES[config.activation]
        if config.bias and elementwise in UNFUSED_BIAS_ADD:
            own["act"] = tuple(a + b for a, b in zip(own["act"], unfused_bias_add_bytes(config)))
    if eager_rope(elementwise):
        own["rotary"] = EAGER_ELEMENTWISE_BYTES["rotary"]
    if sinks:
        own["attn_sinks"] = ATTENTION_SINK_BYTES[attention_sinks]
    if moe_layer:
        own.update(moe_eager_bytes(config, elementwise, expert_elementwise))
    if regroup:
        own.update(moe_regroup_bytes(config.dtype_bytes))
    ops = _with_own_bytes(ops, own)
    if moe_layer and choice("router_dtype", router_dtype, ROUTER_DTYPES) == "fp32":
        ops = _with_fp32_router(ops)
    fwd = LayerGraph(f"{config.name}.{part}.fwd", tuple(ops), phase="fwd", tp=tp, microbatch=microbatch)
    if phase == "fwd" and not both:
        return fwd
    bwd = LayerGraph(f"{config.name}.{part}.bwd",
                     tuple(_backward(ops, tp, config.dtype_bytes, ar_after, {k: v[2:] for k, v in own.items()},
                                     passes, tp_amax[1],
                                     fp8_window_backward_keys(config) if attention_lowp else 0)),
                     phase="bwd", tp=tp, microbatch=microbatch)
    return (fwd, bwd) if both else bwd


def build_pair(config: ModelConfig, tp: int = 1, microbatch: int = 1, part: str = "layer",
               **options) -> tuple[LayerGraph, LayerGraph]:
    """:func:`build`'s forward and backward graphs of one part at once (the forward ops built
    once); ``options``: :func:`build`'s keyword options."""
    return build(config, tp, microbatch, "fwd", part, both=True, **options)


def build_model(config: ModelConfig, tp: int = 1, microbatch: int = 1) -> dict[str, LayerGraph]:
    """All six graphs of a model: ``{part}.{phase}`` for part in embedding/layer/head."""
    return {f"{p}.{ph}": build(config, tp, microbatch, ph, p)
            for p in ("embedding", "layer", "head") for ph in ("fwd", "bwd")}


# ---------------------------------------------------------------------- torch.fx tracing
def _numel(shape) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n


def _expand_mha(b: _Builder, name: str, deps, mod, x, batch_first: bool, _unused) -> int:
    """nn.MultiheadAttention on input ``x`` (self-attention): packed in-projection, QK^T,
    softmax, dropout, PV, out-projection."""
    if batch_first:
        n_, length = x[0], x[1]
    else:
        length, n_ = x[0], x[1]
    e, h = mod.embed_dim, mod.num_heads
    d = e // h
    kdim, vdim = mod.kdim, mod.vdim
    rows = n_ * length
    qi = b.gemm(f"{name}.q_proj", deps, rows, e, e)
    ki = b.gemm(f"{name}.k_proj", deps, rows, e, kdim)
    vi = b.gemm(f"{name}.v_proj", deps, rows, e, vdim)
    sc = b.gemm(f"{name}.scores", [qi, ki], length, length, d, batch=n_ * h, weights=False)
    sm = b.vector(f"{name}.softmax", [sc], n_ * h * length * length, "softmax")
    if mod.dropout > 0:
        sm = b.vector(f"{name}.attn_dropout", [sm], n_ * h * length * length, "dropout")
    ctx = b.gemm(f"{name}.context", [sm, vi], length, d, length, batch=n_ * h, weights=False)
    return b.gemm(f"{name}.out_proj", [ctx], rows, e, e)


def _expand_encoder_layer(b: _Builder, name: str, deps, mod, x) -> int:
    """nn.TransformerEncoderLayer: self-attention block and MLP block, each with dropout,
    residual add and LayerNorm (before or after, per ``norm_first``)."""
    bf = bool(mod.self_attn.batch_first)
    rows = x[0] * x[1]
    e = mod.self_attn.embed_dim
    f = mod.linear1.out_features
    act = "relu" if getattr(mod, "activation_relu_or_gelu", 1) == 1 else "gelu"
    h = deps
    if mod.norm_first:
        h = [b.vector(f"{name}.norm1", h, rows * e, "layernorm")]
    a = _expand_mha(b, f"{name}.self_attn", h, mod.self_attn, x, bf, None)
    a = b.vector(f"{name}.dropout1", [a], rows * e, "dropout")
    r = b.vector(f"{name}.residual1", [a, *deps], rows * e, "add", inputs=2)
    if not mod.norm_first:
        r = b.vector(f"{name}.norm1", [r], rows * e, "layernorm")
    m = b.vector(f"{name}.norm2", [r], rows * e, "layernorm") if mod.norm_first else r
    m = b.gemm(f"{name}.linear1", [m], rows, f, e)
    m = b.vector(f"{name}.activation", [m], rows * f, act)
    m = b.vector(f"{name}.dropout", [m], rows * f, "dropout")
    m = b.gemm(f"{name}.linear2", [m], rows, e, f)
    m = b.vector(f"{name}.dropout2", [m], rows * e, "dropout")
    out = b.vector(f"{name}.residual2", [m, r], rows * e, "add", inputs=2)
    if not mod.norm_first:
        out = b.vector(f"{name}.norm2", [out], rows * e, "layernorm")
    return out


def from_module(module, example_inputs, name: str | None = None, dtype_bytes: int = 2) -> LayerGraph:
    """Trace ``module(*example_inputs)`` with ``torch.fx`` on the meta device into a forward
    :class:`LayerGraph`.

    ``nn.Linear`` and ``F.linear`` become GEMMs, ``matmul``/``bmm``/``@`` batched
    matmuls; norms, softmax, activations, dropout and elementwise add/mul become
    vector ops; view/reshape/transpose/split are free.  A scalar multiply or
    divide whose only consumer is a softmax is fused into it (as Megatron's
    fused scale-softmax does).  ``F.scaled_dot_product_attention`` becomes a fused
    attention op (half the blocks under ``is_causal``).  ``nn.MultiheadAttention`` and
    ``nn.TransformerEncoderLayer`` / ``nn.TransformerDecoderLayer``-free encoder stacks are
    kept as leaves and expanded into their GEMMs, batched matmuls and vector ops from their
    shapes (their control flow cannot be traced).  A module the symbolic tracer cannot follow
    (sizes used as slice bounds as in nanoGPT's attention, dtype casts as in HF's RMSNorm,
    ``nn.TransformerEncoder``'s fast paths) or with an op it does not know is captured again
    with ``torch.export`` (ATen ops at the example's shapes: ``linear``, ``matmul``, ``sdpa``,
    norms, elementwise ops, ``repeat_interleave``, top-k / sort / max reductions over their input,
    ...).  An op neither path knows raises ``ValueError`` naming it, an op with several outputs
    included (a recurrent cell): only views (split, chunk, unbind) are free.
    """
    import copy

    import torch
    import torch.fx
    import torch.nn as nn
    from torch.fx.passes.shape_prop import ShapeProp

    if not isinstance(module, nn.Module):
        raise ValueError(f"from_module expects a torch.nn.Module, got {type(module).__name__}")
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    leaves = (nn.MultiheadAttention, nn.TransformerEncoderLayer)

    class _Tracer(torch.fx.Tracer):
        def is_leaf_module(self, m, qualname):
            return isinstance(m, leaves) or super().is_leaf_module(m, qualname)

    root = copy.deepcopy(module).to("meta")
    if isinstance(root, leaves):      # the root itself is never a leaf: wrap it

        class _Wrap1(nn.Module):
            def __init__(self, inner):
                super().__init__()
                self.inner = inner

            def forward(self, x):
                return self.inner(x)

        class _Wrap3(_Wrap1):
            def forward(self, q, k, v):
                return self.inner(q, k, v)
        if len(example_inputs) not in (1, 3):
            raise ValueError(f"from_module: give 1 input (or query, key, value) for {type(root).__name__}")
        root = (_Wrap1 if len(example_inputs) == 1 else _Wrap3)(root)
    try:
        graph_ = _Tracer().trace(root)
    except Exception as exc:   # torch.fx cannot follow data-dependent control flow
        why = (f"torch.fx could not trace {type(module).__name__}: "
               f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
        return _from_exported(module, example_inputs, name, dtype_bytes, why)
    gm = torch.fx.GraphModule(root, graph_)
    meta_inputs = [x.to("meta") if isinstance(x, torch.Tensor) else x for x in example_inputs]
    try:
        ShapeProp(gm).propagate(*meta_inputs)
    except Exception as exc:
        return _from_exported(module, example_inputs, name, dtype_bytes,
                              f"shapes could not be propagated through {type(module).__name__}: {exc}")
    modules = dict(gm.named_modules())

    def shape(n):
        tm = n.meta.get("tensor_meta") if hasattr(n, "meta") else None
        return tuple(tm.shape) if tm is not None and hasattr(tm, "shape") else None

    try:
        return _convert_fx(gm, modules, shape, leaves, name or type(module).__name__, dtype_bytes)
    except _Unsupported as exc:
        return _from_exported(module, example_inputs, name, dtype_bytes, str(exc))


class _Unsupported(ValueError):
    """An op the torch.fx path does not know (the torch.export path is tried next)."""


#: ATen ops of an exported graph that move no data or only view it (free), elementwise and
#: reduction ops priced as vector ops (their kind), and the rest handled one by one in
#: :func:`_from_exported`.
_ATEN_FREE = {
    "view", "_unsafe_view", "reshape", "transpose", "permute", "t", "expand", "slice", "select", "unsqueeze",
    "squeeze", "unflatten", "flatten", "split", "split_with_sizes", "chunk", "contiguous", "alias", "detach",
    "_assert_tensor_metadata", "lift_fresh_copy", "cat", "stack", "arange", "zeros", "ones", "full", "empty",
    "scalar_tensor", "sym_size", "eq", "ne", "lt", "le", "gt", "ge", "tril", "triu", "zeros_like", "ones_like",
    "clone", "_to_copy", "to", "type_as", "expand_as", "view_as", "dim", "size",
}
_ATEN_VECTOR = {
    "softmax": "softmax", "_softmax": "softmax", "log_softmax": "softmax", "layer_norm": "layernorm",
    "native_layer_norm": "layernorm", "rms_norm": "rmsnorm", "gelu": "gelu", "relu": "relu", "silu": "silu",
    "tanh": "gelu", "sigmoid": "silu", "dropout": "dropout", "native_dropout": "dropout", "add": "add",
    "sub": "add", "rsub": "add", "mul": "mul", "div": "mul", "neg": "mul", "pow": "mul", "rsqrt": "mul",
    "sqrt": "mul", "exp": "mul", "cos": "mul", "sin": "mul", "masked_fill": "add", "where": "add",
    "mean": "add", "sum": "add", "repeat_interleave": "add", "repeat": "add", "embedding": "embedding",
    # reductions and selections over the last dim (a router's top-k): one pass over the input
    "topk": "softmax", "sort": "softmax", "max": "add", "min": "add", "amax": "add", "amin": "add",
    "argmax": "add", "argmin": "add", "cumsum": "add",
}
#: Vector ops priced over their input's elements, not their (smaller) output's.
_ATEN_OVER_INPUT = {"mean", "sum", "topk", "sort", "max", "min", "amax", "amin", "argmax", "argmin"}
#: Ops whose several outputs are views of their input (free on either path).
_TUPLE_VIEWS = {"split", "split_with_sizes", "chunk", "unbind", "tensor_split", "getitem", "getattr"}


def _from_exported(module, example_inputs, name, dtype_bytes, why: str) -> LayerGraph:
    """:func:`from_module` through ``torch.export`` (ATen ops with concrete shapes), for modules
    the symbolic tracer cannot follow (sizes used as slice bounds, dtype casts, fast paths).
    ``why``: what stopped the torch.fx path, reported if this path fails too."""
    import copy

    import torch

    ep = None
    errors = []
    for device in ("meta", None):       # meta first (no memory for weights), then as given
        try:
            if device == "meta":
                mod = copy.deepcopy(module).to("meta")
                inputs = [x.to("meta") if isinstance(x, torch.Tensor) else x for x in example_inputs]
            else:
                mod, inputs = module, list(example_inputs)
            ep = torch.export.export(mod, tuple(inputs))
            break
        except Exception as exc:        # noqa: PERF203 - two attempts
            errors.append(f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
    if ep is None:
        raise ValueError(f"from_module: {why}; torch.export failed too ({errors[-1]})")
    g = ep.graph
    params = set(ep.graph_signature.inputs_to_parameters)

    def shape(n):
        v = n.meta.get("val") if hasattr(n, "meta") else None
        return tuple(int(x) for x in v.shape) if hasattr(v, "shape") else None

    b = _Builder(dtype_bytes)
    last: dict = {}
    weight: dict = {}          # node -> True when it is a parameter or a view of one
    for n in g.nodes:
        if n.op == "placeholder":
            last[n] = ()
            weight[n] = n.name in params
            continue
        if n.op != "call_function":
            continue
        deps = tuple(sorted({i for a in n.all_input_nodes for i in last.get(a, ())}))
        target = n.target
        op = getattr(getattr(target, "overloadpacket", None), "__name__", None) or getattr(target, "__name__", "")
        op = op.split(".")[-1]
        out = shape(n)
        val = n.meta.get("val") if hasattr(n, "meta") else None
        if out is None and isinstance(val, (tuple, list)) and op not in _ATEN_FREE and op not in _TUPLE_VIEWS:
            shapes = [tuple(int(x) for x in v.shape) for v in val if hasattr(v, "shape")]
            if shapes and op in _ATEN_VECTOR:
                out = shapes[0]        # native_layer_norm, native_dropout, topk, sort, max: the main output
            elif shapes:
                # several outputs of an op this path does not know (a recurrent cell, ...): named,
                # not priced as free
                raise ValueError(f"from_module: {why}; through torch.export the op aten.{op} is not supported")
        if op in _ATEN_FREE or op == "getitem" or out is None:
            last[n] = deps
            weight[n] = any(weight.get(a, False) for a in n.all_input_nodes)
            continue
        args = list(n.args)
        if op == "linear":
            x, w = shape(args[0]), shape(args[1])
            last[n] = (b.gemm(n.name, deps, _numel(x[:-1]), w[0], w[1]),)
        elif op in ("mm", "addmm", "matmul", "bmm", "baddbmm"):
            a0, a1 = (args[1], args[2]) if op in ("addmm", "baddbmm") else (args[0], args[1])
            x, y = shape(a0), shape(a1)
            has_w = weight.get(a0, False) or weight.get(a1, False)
            batch = _numel(out[:-2]) if len(out) > 2 else 1
            if has_w and len(y) == 2:
                last[n] = (b.gemm(n.name, deps, _numel(x[:-1]), y[-1], x[-1]),)
            else:
                last[n] = (b.gemm(n.name, deps, x[-2] if len(x) > 1 else 1, y[-1], x[-1], batch=batch,
                                  weights=False),)
        elif op in ("scaled_dot_product_attention", "_scaled_dot_product_flash_attention",
                    "_scaled_dot_product_efficient_attention"):
            q, k = shape(args[0]), shape(args[1])
            masked = len(args) > 3 and args[3] is not None
            causal = bool(args[5]) if len(args) > 5 else bool(n.kwargs.get("is_causal", False))
            frac = 0.5 if (causal and not masked) else 1.0
            factor = 2.0 * frac * k[-2] / q[-2]
            last[n] = (b.attention(n.name, deps, q[-2], q[-2], q[-1], _numel(q[:-2]), factor, 3.0 * q[-2],
                                   1.0 * q[-2]),)
        elif op in _ATEN_VECTOR:
            kind = _ATEN_VECTOR[op]
            # reductions and selections read their whole input (a top-k of 2 over 6 scores reads 6)
            elems = _numel(shape(args[0]) or out) if op in _ATEN_OVER_INPUT else _numel(out)
            ntensors = sum(1 for a in n.all_input_nodes if shape(a) is not None)
            last[n] = (b.vector(n.name, deps, elems, kind, inputs=max(1, ntensors)),)
        else:
            raise ValueError(f"from_module: {why}; through torch.export the op aten.{op} is not supported")
        weight[n] = False
    return LayerGraph(name or type(module).__name__, tuple(b.ops), phase="fwd")


def _convert_fx(gm, modules, shape, leaves, name, dtype_bytes) -> LayerGraph:
    """The symbolically traced graph as ops (see :func:`from_module`)."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    vec_funcs = {
        F.softmax: "softmax", torch.softmax: "softmax", F.gelu: "gelu", F.relu: "relu",
        torch.relu: "relu", F.silu: "silu", F.layer_norm: "layernorm", F.dropout: "dropout",
        operator.add: "add", torch.add: "add", operator.mul: "mul", torch.mul: "mul",
        operator.truediv: "mul", torch.div: "mul", operator.sub: "add", torch.tanh: "gelu",
    }
    vec_methods = {"softmax": "softmax", "add": "add", "mul": "mul", "div": "mul", "relu": "relu"}
    free_methods = {"view", "reshape", "transpose", "permute", "contiguous", "split", "chunk",
                    "size", "unsqueeze", "squeeze", "flatten", "expand", "t"}
    vec_modules = {nn.LayerNorm: "layernorm", nn.GELU: "gelu", nn.ReLU: "relu", nn.SiLU: "silu",
                   nn.Dropout: "dropout", nn.Softmax: "softmax", nn.Tanh: "gelu"}
    if hasattr(nn, "RMSNorm"):
        vec_modules[nn.RMSNorm] = "rmsnorm"
    b = _Builder(dtype_bytes)
    last: dict = {}  # fx node -> tuple of op indices it depends on (its producing ops)
    nodes = list(gm.graph.nodes)
    users = {n: list(n.users) for n in nodes}

    def deps_of(n) -> tuple[int, ...]:
        out: list[int] = []
        for a in n.all_input_nodes:
            out.extend(last.get(a, ()))
        return tuple(sorted(set(out)))

    def tensor_args(n) -> int:
        return sum(1 for a in n.args if isinstance(a, torch.fx.Node) and shape(a) is not None)

    fused_scale: set = set()
    for n in nodes:
        if n.op in ("placeholder", "get_attr"):
            last[n] = ()
            continue
        if n.op == "output":
            continue
        out_shape = shape(n)
        deps = deps_of(n)
        kind = None
        if out_shape is None and n.op != "call_module":
            tm = n.meta.get("tensor_meta") if hasattr(n, "meta") else None
            name_ = getattr(n.target, "__name__", n.target if isinstance(n.target, str) else "")
            if isinstance(tm, (tuple, list)) and any(hasattr(t, "shape") for t in tm) and \
                    name_ not in _TUPLE_VIEWS:
                # an op returning several tensors (topk, sort, a recurrent cell, ...) does work:
                # not free; the torch.export path prices it or names it
                raise _Unsupported(f"from_module: unsupported {n.op.replace('call_', '')} {name_!r} (several outputs)")
            last[n] = deps  # python scalars, shape arithmetic, views of tuples
            continue
        if n.op == "call_module" and isinstance(modules[n.target], leaves):
            mod = modules[n.target]
            x = shape(n.args[0])
            if isinstance(mod, nn.MultiheadAttention):
                last[n] = (_expand_mha(b, n.name, deps, mod, x, bool(mod.batch_first), None),)
            else:
                last[n] = (_expand_encoder_layer(b, n.name, deps, mod, x),)
            continue
        if n.op == "call_function" and n.target is F.scaled_dot_product_attention:
            q = shape(n.args[0])
            kv = shape(n.args[1])
            causal = bool(n.kwargs.get("is_causal", False))
            batch = _numel(q[:-2])
            # QK^T and PV: 2 x (2 L S E) per head; half the blocks under a causal mask
            frac = 0.5 if causal else 1.0
            factor = 2.0 * frac * kv[-2] / q[-2]
            last[n] = (b.attention(n.name, deps, q[-2], q[-2], q[-1], batch, factor, 3.0 * q[-2], 1.0 * q[-2]),)
            continue
        if n.op == "call_module":
            mod = modules[n.target]
            if isinstance(mod, nn.Linear):
                x = shape(n.args[0])
                idx = b.gemm(n.name, deps, _numel(x[:-1]), mod.out_features, mod.in_features)
                last[n] = (idx,)
                continue
            for cls, kname in vec_modules.items():
                if isinstance(mod, cls):
                    kind = kname
                    break
            if kind is None:
                if isinstance(mod, nn.Identity):
                    last[n] = deps
                    continue
                raise _Unsupported(f"from_module: unsupported module {type(mod).__name__} at {n.target!r}")
        elif n.op == "call_function":
            if n.target is F.linear:
                x, w = shape(n.args[0]), shape(n.args[1])
                last[n] = (b.gemm(n.name, deps, _numel(x[:-1]), w[0], w[1]),)
                continue
            if n.target in (operator.matmul, torch.matmul, torch.bmm):
                x, y = shape(n.args[0]), shape(n.args[1])
                batch = _numel(out_shape[:-2]) if len(out_shape) > 2 else 1
                last[n] = (b.gemm(n.name, deps, x[-2], y[-1], x[-1], batch=batch, weights=False),)
                continue
            if n.target in vec_funcs:
                kind = vec_funcs[n.target]
            elif n.target in (operator.getitem, getattr) or getattr(n.target, "__name__", "") in (
                    "getattr", "getitem", "transpose", "reshape", "split", "chunk", "flatten", "cat"):
                last[n] = deps
                continue
            else:
                raise _Unsupported(f"from_module: unsupported function {getattr(n.target, '__name__', n.target)!r}")
        elif n.op == "call_method":
            if n.target in free_methods:
                last[n] = deps
                continue
            if n.target in vec_methods:
                kind = vec_methods[n.target]
            else:
                raise _Unsupported(f"from_module: unsupported tensor method {n.target!r}")
        if out_shape is None:
            last[n] = deps
            continue
        ntensors = tensor_args(n)
        if kind in ("mul", "add") and ntensors <= 1:
            u = users[n]
            if kind == "mul" and len(u) == 1 and (
                    u[0].target in (F.softmax, torch.softmax, "softmax")
                    or (u[0].op == "call_module" and isinstance(modules.get(u[0].target), nn.Softmax))):
                fused_scale.add(n)
                last[n] = deps
                continue
        last[n] = (b.vector(n.name, deps, _numel(out_shape), kind, inputs=max(1, ntensors)),)
    return LayerGraph(name, tuple(b.ops), phase="fwd")
