"""A MaxText config (a YAML of ``base.yml`` keys, a model YAML, and ``key=value`` overrides as
``train.py`` takes them) as a run.

Defaults are MaxText's ``MaxText/configs/base.yml``: ``per_device_batch_size`` 12,
``gradient_accumulation_steps`` 1, ``max_target_length`` 2048, ``remat_policy`` full,
``attention`` autoselected, ``quantization`` none, ``ici_fsdp_parallelism`` -1 (what the chips
leave) and every other ``ici_*`` / ``dcn_*`` degree 1 (``dcn_data_parallelism`` -1: one slice
unless ``num_slices`` says otherwise).

=====================================  =========================================================
``model_name``                          :data:`MODEL_NAMES`' presets (Llama 2 / 3, Mixtral, DeepSeek
                                        V2 / V3, Kimi-K2, Llama 4, Qwen3 MoE, GPT-OSS, GPT-3 175B);
                                        Gemma 2 / 3 from their ymls (:data:`GEMMA_MODELS`, their
                                        keys overridable); ``default``: the ``base_*`` dimensions
``base_emb_dim``, ``base_num_query_heads``, ``base_num_kv_heads``, ``base_mlp_dim``,
``base_num_decoder_layers``, ``head_dim``, ``vocab_size``, ``mlp_activations``   the model
``dropout_rate``, ``enable_dropout``    dropout where enabled (its default the model's own yml's,
                                        :data:`MODEL_DEFAULTS`: off for the named models but
                                        llama2-70b) and the rate above 0
``decoder_block``                       the model's own (:data:`DECODER_BLOCKS`; llama2 for the
                                        ``base_*`` dimensions); another block refused
``global_parameter_scale``              the base dimensions scaled as MaxText scales them
                                        (:func:`parameter_scales`; ``default`` model only)
``max_target_length``                   the sequence
``per_device_batch_size``               sequences per chip: global batch = this x chips; one
                                        data-parallel replica (tp x pp x cp chips) runs
                                        ``tp pp cp x this`` sequences
``gradient_accumulation_steps``         microbatch = replica batch / this
``ici_/dcn_data_parallelism``           data parallelism (replicated weights)
``ici_/dcn_fsdp_parallelism``           data parallelism with weights, gradients and optimizer
                                        sharded (ZeRO-3) over the fsdp axis
``ici_tensor_parallelism``              tp, with the activations' hidden dimension sharded
                                        (``activation_embed`` on ``tensor``): sequence parallelism
``ici_/dcn_pipeline_parallelism``       pp, run as MaxText's SPMD circular pipeline (the maxtext
                                        engine's ``pipeline_schedule``), read by
                                        :func:`_circular_pipeline`
``ici_context_parallelism``             cp
``ici_expert_parallelism``              ep
``sparse_matmul``, ``megablox``,         dropless grouped GEMMs (sparse_matmul True), or the
``capacity_factor``                      token-dropping dense dispatch (False, with a factor)
``remat_policy``                        full; minimal (its weight GEMMs' checkpoint names saved, the rest rerun);
                                        MaxText's named policies (:data:`NAMED_REMAT_POLICIES`) and
                                        custom (each tensor's own key: remat, device or offload)
``quantization``                        ``fp8`` / ``nanoo_fp8`` / ``fp8_full`` (Qwix's, for
                                        TPU7x: forward and backward): FP8 GEMMs
``weight_dtype``, ``grad_dtype``,        the bytes a parameter keeps: weights (float32 by default),
``mu_dtype``, ``opt_type``              gradients and Adam's first moment (each the weights' dtype
                                        unless set), second moment (the weights'); ``opt_type``
                                        adamw / adam_pax (Adam's moments) or sgd (none); muon refused
``use_iota_embed``                      true: the embedding as a one-hot GEMM (engine ``embedding``)
``attention``                           dot_product: unfused; flash / cudnn_flash_te /
                                        autoselected (flash for training sequences of 128+,
                                        MaxText/layers/attentions.py): flash
=====================================  =========================================================

**Devices, not chips.**  MaxText counts JAX devices: ``per_device_batch_size`` and the ``ici_*``
degrees are per device.  On a chip exposing several (``devices_per_chip``: TPU7x's two
TensorCores, :attr:`cosearch.hardware.Accelerator.devices_per_chip`) the reader prices chips: a
chip's devices are taken to share its place on the fsdp axis (on the data axis where fsdp is 1),
so a chip runs ``devices_per_chip`` times the per-device batch and that axis counts chips (its
degree divided by ``devices_per_chip``; refused where it does not divide); the tensor, context,
pipeline and expert axes count chips as they count devices.  cosearch then prices one weight
gather per chip, as if the chip's devices shared it.

Kernel tuning (:data:`KERNEL_TUNING_KEYS`: splash attention's blocks and layouts, the tokamax and
Megablox grouped-GEMM tiles, ...) is read and said: cosearch prices MaxText's flash attention and
grouped GEMMs at their kernel models whatever the tiling.
"""

from __future__ import annotations

import math
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

from .. import models
from ..engine import MAXTEXT, MAXTEXT_MINIMAL_REMAT
from ..graph import MAXTEXT_MINIMAL_TENSORS, MAXTEXT_TENSORS, check_selective_policy
from ..memory import MemoryConfig
from ..models import ModelConfig
from ._fields import Keys, flatten, load_yaml, parse_overrides
from .config import RunConfig

__all__ = ["read_maxtext", "MODEL_NAMES", "NAMED_REMAT_POLICIES", "remat_places_policy"]

_QKV = ("query_proj", "value_proj", "key_proj", "qkv_proj")
_MINIMAL = MAXTEXT_MINIMAL_TENSORS

#: base.yml's pipeline settings (``num_layers_per_pipeline_stage`` ... ``scan_layers_per_stage``),
#: which act only with pipeline stages.
PIPELINE_KEYS = frozenset({"num_layers_per_pipeline_stage", "num_pipeline_repeats", "pipeline_parallel_layers",
                           "num_pipeline_microbatches", "pipeline_delay_activation_forwarding",
                           "pipeline_fsdp_ag_once", "pipeline_fsdp_ag_per_repeat", "scan_pipeline_iterations",
                           "scan_pipeline_repeats", "scan_layers_per_stage"})

#: MaxText's named ``remat_policy`` values as the tensors each keeps (``'device'``) or moves to
#: host memory (``'offload'``), every other tensor rematerialized: ``Decoder.get_remat_policy``
#: in MaxText's ``layers/decoders.py`` (``jax.checkpoint_policies.save_only_these_names`` /
#: ``save_and_offload_only_these_names`` over these checkpoint names).  The decoder layer's input
#: is always kept: it is the scan's carry, where the rematerialization starts.
NAMED_REMAT_POLICIES = {name: {"decoder_layer_input": "device", **dict.fromkeys(kept, where)} for name, kept, where in (
    ("minimal_with_context", (*_MINIMAL, "context"), "device"),
    ("minimal_flash", (*_MINIMAL, "context"), "device"),            # MaxText: deprecated name of the above
    ("save_dot_with_context_except_mlp", (*_QKV, "context", "out_proj"), "device"),
    ("save_dot_except_mlpwi", (*_QKV, "out_proj", "mlpwo"), "device"),
    ("save_dot_except_mlp", (*_QKV, "out_proj"), "device"),
    ("save_qkv_proj", _QKV, "device"),
    ("save_out_proj", ("out_proj",), "device"),
    ("qkv_proj_offloaded", ("query_proj", "value_proj", "key_proj"), "offload"),
    ("minimal_offloaded", _MINIMAL, "offload"),
)}

#: MaxText ``model_name`` -> cosearch preset (MaxText/configs/models/<name>.yml carry the
#: published dimensions of each).
MODEL_NAMES = {"llama2-7b": "llama2-7b", "llama2-13b": "llama2-13b", "llama2-70b": "llama2-70b",
               "llama3-8b": "llama3-8b", "llama3-70b": "llama3-70b", "llama3.1-8b": "llama3-8b",
               "llama3.1-70b": "llama3-70b", "llama3.1-405b": "llama3-405b", "mixtral-8x7b": "mixtral-8x7b",
               # MaxText's MoE model configs (src/MaxText/configs/models/<name>.yml), each the same model
               # as cosearch's preset of its published config
               "mixtral-8x22b": "mixtral-8x22b", "deepseek3-671b": "deepseek-v3", "kimi-k2-1t": "kimi-k2",
               # the same model with MaxText's 2D-FSDP logical axis rules (configs/models/deepseek3-671b-2dfsdp.yml,
               # the tpu-recipes' Ironwood recipe on 256 chips): its sharding is read from the ici_* keys
               "deepseek3-671b-2dfsdp": "deepseek-v3",
               "llama4-17b-16e": "llama4-scout", "llama4-17b-128e": "llama4-maverick",
               "qwen3-30b-a3b": "qwen3-30b-a3b", "qwen3-235b-a22b": "qwen3-235b-a22b", "gpt-oss-120b": "gpt-oss-120b",
               # configs/models/gpt3-175b.yml: GPT-3 175B's dimensions (MLPerf's), its vocabulary padded
               # to 50304, no dropout, a 16384-row learned position table (_gpt3_model)
               "gpt3-175b": "gpt3-175b",
               # DeepSeek-V2-Lite's and V2's, and GPT-OSS-20B's config.json sizes
               "deepseek2-16b": "deepseek-v2-lite", "deepseek2-236b": "deepseek-v2", "gpt-oss-20b": "gpt-oss-20b"}

#: MaxText's Gemma 2 and 3 models (``configs/models/<name>.yml`` at e591f30, the same in MaxText
#: 0.2.5): (emb, query heads, kv heads, MLP, layers — Gemma 2's real count, twice the yml's
#: ``base_num_decoder_layers``, which counts [local, global] pairs — head dim, vocabulary,
#: ``sliding_window_size``, ``final_logits_soft_cap``, ``attn_logits_soft_cap``).  Every one has
#: ``mlp_activations: ["gelu","linear"]``, ``logits_via_embedding: true`` and both post norms.
GEMMA_MODELS = {
    "gemma2-2b": ("gemma2", 2304, 8, 4, 9216, 26, 256, 256128, 4096, 30.0, 50.0),
    "gemma2-9b": ("gemma2", 3584, 16, 8, 14336, 42, 256, 256128, 4096, 30.0, 50.0),
    "gemma2-27b": ("gemma2", 4608, 32, 16, 36864, 46, 128, 256128, 4096, 30.0, 50.0),
    "gemma3-4b": ("gemma3", 2560, 8, 4, 10240, 34, 256, 262144, 1024, 0.0, 0.0),
    "gemma3-12b": ("gemma3", 3840, 16, 8, 15360, 48, 256, 262144, 1024, 0.0, 0.0),
    "gemma3-27b": ("gemma3", 5376, 32, 16, 21504, 62, 128, 262144, 1024, 0.0, 0.0),
}
#: Layers of a Gemma block's attention pattern, the unit MaxText's layer scan checkpoints:
#: Gemma 2's [local, global] pair (``models/gemma2.py``), Gemma 3's five local and one global
#: (``GEMMA3_ATTENTION_PATTERN``, ``_init_scanned_gemma3``; the layers left over one more block).
GEMMA_PATTERN = {"gemma2": 2, "gemma3": 6}


#: A ``model_name``'s own settings in its configs/models/<name>.yml (at e591f30) that change what
#: cosearch prices, the defaults a command line may override (MaxText loads the model's yml over
#: base.yml): ``enable_dropout: false`` in every one of them but llama2-70b's (base.yml's is true),
#: and GPT-3's ``use_iota_embed: true``.
MODEL_DEFAULTS = {**{m: {"enable_dropout": False} for m in MODEL_NAMES if m != "llama2-70b"},
                  "gpt3-175b": {"enable_dropout": False, "use_iota_embed": True}}


def _model_default(k: Keys, key: str, fallback: bool) -> bool:
    """``key`` as the config gives it, else as the model's own yml sets it (:data:`MODEL_DEFAULTS`),
    else base.yml's ``fallback``."""
    return k.bool(key, MODEL_DEFAULTS.get(str(k.get("model_name", "default")), {}).get(key, fallback))

#: Each ``model_name``'s ``decoder_block`` (its configs/models/<name>.yml at MaxText e591f30):
#: a config naming another block for that model runs another architecture.
DECODER_BLOCKS = {"llama2-7b": "llama2", "llama2-13b": "llama2", "llama2-70b": "llama2", "llama3-8b": "llama2",
                  "llama3-70b": "llama2", "llama3.1-8b": "llama2", "llama3.1-70b": "llama2", "llama3.1-405b": "llama2",
                  "mixtral-8x7b": "mixtral", "mixtral-8x22b": "mixtral", "deepseek3-671b": "deepseek",
                  "deepseek3-671b-2dfsdp": "deepseek", "kimi-k2-1t": "deepseek", "llama4-17b-16e": "llama4",
                  "llama4-17b-128e": "llama4", "qwen3-30b-a3b": "qwen3_moe", "qwen3-235b-a22b": "qwen3_moe",
                  "gpt-oss-120b": "gpt_oss", "gpt3-175b": "gpt3", "deepseek2-16b": "deepseek",
                  "deepseek2-236b": "deepseek", "gpt-oss-20b": "gpt_oss",
                  **{m: v[0] for m, v in GEMMA_MODELS.items()}}

NEUTRAL_KEYS = frozenset({
    "run_name", "base_output_directory", "hardware", "steps", "log_period", "learning_rate",
    "learning_rate_schedule_steps", "warmup_steps_fraction", "cosine_learning_rate_final_fraction", "adam_b1",
    "adam_b2", "adam_eps", "adam_eps_root", "adam_weight_decay", "gradient_clipping_threshold",
    "dataset_type", "dataset_path", "dataset_name", "eval_dataset_name", "eval_interval", "eval_steps",
    "tokenizer_path", "tokenizer_type", "enable_checkpointing", "async_checkpointing", "checkpoint_period",
    "load_parameters_path", "load_full_state_path", "enable_data_shuffling", "data_shuffle_seed", "init_weights_seed",
    "profiler", "profiler_steps", "skip_first_n_steps_for_profiler", "upload_all_profiler_results", "metrics_file",
    "gcs_metrics", "save_config_to_gcs", "enable_goodput_recording", "monitor_goodput", "grain_worker_count",
    "packing", "add_bos", "add_eos", "normalization_layer_epsilon", "rope_max_timescale", "rope_min_timescale",
    "max_prefill_predict_length", "reuse_example_batch",
    "jax_cache_dir", "compile_topology", "compile_topology_num_slices",
    # process and logging switches (tpu-recipes' Ironwood recipes)
    "skip_jax_distributed_system", "profile_periodically_period", "output_dir", "allow_split_physical_axes",
    # one fused QKV / gate-and-up einsum or separate ones: the same FLOPs and bytes in cosearch's layer
    # graph (MaxText's own configs/tpu scripts set both)
    "fused_qkv", "fused_mlp",
})

#: MaxText keys that tune a kernel's tiling or implementation, read and said (module docstring):
#: splash attention (``sa_*``, ``use_tokamax_splash``, ``use_max_logit_estimate``,
#: ``use_splash_scheduler``, ``dq_reduction_steps``), the grouped GEMMs' tiles and kernels
#: (``wi_tile_*``, ``wo_tile_*``, ``use_tokamax_gmm``, ``use_custom_sort_vjp``), the XLA cost
#: hints (``cost_estimate_flops_*``), and ``float32_weight_sum`` (the routing weights' sum in fp32).
KERNEL_TUNING_KEYS = re.compile(r"^(sa_\w+|wi_tile_\w+|wo_tile_\w+|use_tokamax_splash|use_tokamax_gmm|use_custom_sort_vjp|"
                                r"use_max_logit_estimate|use_splash_scheduler|dq_reduction_steps|cost_estimate_flops_\w+|"
                                r"float32_weight_sum)$")

#: MaxText's dtypes a parameter's state can take, in bytes.
_DTYPE_BYTES = {"float32": 4, "bfloat16": 2}


def remat_places_policy(places: dict[str, str]) -> str:
    """The engine's selective policy (``"maxtext:tensor=place,..."``,
    :func:`cosearch.graph.maxtext_policy`) of MaxText tensors' places: a named policy's
    (:data:`NAMED_REMAT_POLICIES`) or a custom one's."""
    return "maxtext:" + ",".join(f"{t}={w}" for t, w in sorted(places.items()))


def _moe_dispatch(k: Keys, name: str, model: ModelConfig, assumed: list[str]) -> ModelConfig:
    """MaxText's MoE switches (``base.yml``: ``sparse_matmul`` True, ``megablox`` True,
    ``capacity_factor`` -1): dropless grouped GEMMs through ``sparse_matmul`` (Megablox's ``gmm``,
    or ``jax.lax.ragged_dot`` with ``megablox`` False), or with ``sparse_matmul`` False and a
    capacity factor the token-dropping dense dispatch (``dense_matmul``: one-hot einsums into padded
    expert slots, :attr:`cosearch.models.ModelConfig.moe_einsum_dispatch`).  ``num_experts`` and
    ``num_experts_per_tok`` must agree with the model; a dense model ignores them all."""
    sparse = k.bool("sparse_matmul", True)
    megablox = k.bool("megablox", True)
    raw = k.get("capacity_factor", -1.0)
    try:
        factor = float(raw)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: capacity_factor must be a number (-1: dropless), got {raw!r}") from None
    if isinstance(raw, bool) or not math.isfinite(factor):
        raise ValueError(f"{name}: capacity_factor must be a finite number (-1: dropless), got {raw!r}")
    experts, top_k = k.int("num_experts"), k.int("num_experts_per_tok")
    if not model.moe:
        if (experts or 1) > 1:
            raise ValueError(f"{name}: num_experts {experts} on {model.name}, a dense model: give an MoE model_name")
        return model
    for key, got, want in (("num_experts", experts, model.num_experts), ("num_experts_per_tok", top_k,
                                                                          model.experts_per_token)):
        if got is not None and got != want:
            raise ValueError(f"{name}: {key} {got} contradicts {model.name}'s {want}")
    if sparse:
        if factor > 0:
            raise ValueError(f"{name}: token dropping (capacity_factor {factor:g}) with sparse_matmul is not modelled; "
                             "MaxText's dropping path is sparse_matmul False")
        if not megablox:
            assumed.append("megablox False: the grouped GEMMs through jax.lax.ragged_dot, priced as Megablox's")
        return model
    if factor <= 0:
        raise ValueError(f"{name}: sparse_matmul False without a capacity factor computes every expert on every "
                         "token (dense_matmul), which is not modelled: give capacity_factor > 0 or sparse_matmul True")
    assumed.append(f"token dropping at capacity factor {factor:g} through MaxText's dense dispatch (one-hot einsums "
                   "into padded expert slots: sparse_matmul False)")
    return model.with_(moe_capacity_factor=factor, moe_einsum_dispatch=True)


def _decoder_block(k: Keys) -> tuple[str, str]:
    """(The config's ``decoder_block``, its ``model_name``'s own block: :data:`DECODER_BLOCKS`,
    llama2 for the ``default`` model's base dimensions)."""
    own = DECODER_BLOCKS.get(str(k.get("model_name", "default")), "llama2")
    return str(k.get("decoder_block", own)), own


def _model(k: Keys, name: str, seq: int, assumed: list[str]) -> ModelConfig:
    mname = str(k.get("model_name", "default"))
    block, own = _decoder_block(k)
    if block != own:
        raise ValueError(f"{name}: decoder_block {block!r} builds another architecture than the one cosearch reads "
                         + (f"{mname} as (its own block, {own!r})" if mname in DECODER_BLOCKS else
                            "base_* dimensions as (MaxText's llama2 block: RMSNorm, RoPE, no biases)")
                         + "; not modelled")
    if mname in GEMMA_MODELS:
        return _gemma_model(k, name, mname, seq, assumed)
    if mname in MODEL_NAMES:
        if k.positive("global_parameter_scale", 1) != 1:
            raise ValueError(f"{name}: global_parameter_scale scales {mname}'s base dimensions; give them as "
                             "model_name default with its base_* keys")
        model = models.preset(MODEL_NAMES[mname]).with_(seq_len=seq)
        return _gpt3_model(k, name, model, seq, assumed) if block == "gpt3" else model
    if mname != "default":
        raise ValueError(f"{name}: model_name {mname!r} has no cosearch preset (known: "
                         f"{', '.join([*MODEL_NAMES, *GEMMA_MODELS])}); "
                         "use model_name default with its base_* dimensions, or its config.json")
    acts = k.names("mlp_activations", ["silu", "linear"])
    act = {("silu", "linear"): "swiglu", ("gelu", "linear"): "geglu", ("gelu",): "gelu", ("relu",): "relu"}.get(tuple(acts))
    if act is None:
        raise ValueError(f"{name}: mlp_activations {acts} are not modelled")
    emb_s, head_s, mlp_s, layer_s = parameter_scales(k.positive("global_parameter_scale", 1), name)
    h, heads = k.positive("base_emb_dim", 2048) << emb_s, k.positive("base_num_query_heads", 16) << head_s
    head = k.positive("head_dim", 128)
    layers = k.positive("base_num_decoder_layers", 16) << layer_s
    assumed.append("decoder block llama2-style: RMSNorm, RoPE, no biases, untied logits")
    return ModelConfig(f"maxtext-{layers}x{h}", layers, h, heads, k.positive("base_mlp_dim", 7168) << mlp_s,
                       k.positive("vocab_size", 32000), seq,
                       kv_heads=k.positive("base_num_kv_heads", 16) << head_s, activation=act, norm="rmsnorm",
                       position="rotary", bias=False, tie_embeddings=k.bool("logits_via_embedding", False), dropout=False,
                       head_size=None if head * heads == h else head)


def _gemma_model(k: Keys, name: str, mname: str, seq: int, assumed: list[str]) -> ModelConfig:
    """MaxText's Gemma 2 / 3 (:data:`GEMMA_MODELS`, each yml key overridable as MaxText loads the
    model's yml over base.yml): GeGLU, RMSNorm, RoPE, logits through the embedding, the post norms
    (``use_post_attn_norm``, ``use_post_ffw_norm``: both or neither), the logits' and scores' soft
    caps, and the sliding window on Gemma 2's every other layer (its pairs' first) and on five of
    Gemma 3's every six, Gemma 3's per-head q and k norms; the scan checkpoints a block of the
    attention pattern (:data:`GEMMA_PATTERN`; the engine's ``recompute_layers``, set by
    :func:`read_maxtext`).  Said: the embedding's scale by the square root of its width and the
    scores' soft cap inside splash attention, not priced."""
    block, emb, heads, kv, mlp, layers, head, vocab, window, logit_cap, attn_cap = GEMMA_MODELS[mname]
    unit = GEMMA_PATTERN[block]
    if k.positive("global_parameter_scale", 1) != 1:
        raise ValueError(f"{name}: global_parameter_scale scales {mname}'s base dimensions; give them as "
                         "model_name default with its base_* keys")
    acts = tuple(k.names("mlp_activations", ["gelu", "linear"]))
    if acts != ("gelu", "linear"):
        raise ValueError(f"{name}: mlp_activations {list(acts)} on {mname} are not modelled (its own: gelu, linear)")
    pairs = 2 if block == "gemma2" else 1            # gemma2's yml counts [local, global] pairs
    n = k.positive("base_num_decoder_layers", layers // pairs) * pairs
    post = (k.bool("use_post_attn_norm", True), k.bool("use_post_ffw_norm", True))
    if post[0] != post[1]:
        raise ValueError(f"{name}: use_post_attn_norm {post[0]} with use_post_ffw_norm {post[1]}: one post norm "
                         "without the other is not modelled")
    w = k.positive("sliding_window_size", window)
    local = n - n // unit                            # one global layer a block of the pattern
    model = ModelConfig(mname, n, k.positive("base_emb_dim", emb), k.positive("base_num_query_heads", heads),
                        k.positive("base_mlp_dim", mlp), k.positive("vocab_size", vocab), seq,
                        kv_heads=k.positive("base_num_kv_heads", kv), head_size=k.positive("head_dim", head),
                        activation="geglu", norm="rmsnorm", position="rotary", bias=False,
                        tie_embeddings=k.bool("logits_via_embedding", True), dropout=False,
                        sliding_window=w if w < seq else None, sliding_layers=local if w < seq else 0,
                        qk_norm="head" if block == "gemma3" else "none", post_norms=post[0],
                        logit_softcap=k.number("final_logits_soft_cap", logit_cap),
                        attention_softcap=k.number("attn_logits_soft_cap", attn_cap))
    assumed.append(f"{mname}: MaxText's layer scan checkpoints each block of {unit} layers (its attention "
                   "pattern) at its input (Engine.recompute_layers); the residual sums inside a block, rerun from "
                   "it, not priced")
    assumed.append(f"{mname}: the embedding scaled by the square root of its width (one pass over the embedding's "
                   "output) not priced" + (f"; the scores' soft cap {model.attention_softcap:g} inside splash "
                                           "attention not priced" if model.attention_softcap else ""))
    return model


def _gpt3_model(k: Keys, name: str, model: ModelConfig, seq: int, assumed: list[str]) -> ModelConfig:
    """MaxText's GPT-3 (``decoder_block: gpt3``, ``models/gpt3.py`` at e591f30): the preset's layers
    (LayerNorm and projections with biases, GELU, learned positions, tied logits) with
    ``configs/models/gpt3-175b.yml``'s vocabulary (50304), no dropout (``enable_dropout: false``)
    and its learned position table of ``trainable_position_size`` rows (16384), not one row per
    position of the sequence (the rows beyond the sequence as ``extra_params``)."""
    vocab = k.positive("vocab_size", 50304)
    rows = k.positive("trainable_position_size", 16384)
    if rows < seq:
        raise ValueError(f"{name}: trainable_position_size {rows} is shorter than the sequence {seq}")
    if k.bool("enable_dropout", False):
        raise ValueError(f"{name}: enable_dropout true: MaxText's GPT-3 dropout is not modelled (its recipes run "
                         "without)")
    assumed.append(f"GPT-3 with vocabulary {vocab} and a {rows}-row learned position table")
    return model.with_(vocab=vocab, dropout=False, extra_params=(rows - seq) * model.hidden)


def parameter_scales(scale: int, name: str = "MaxText config") -> tuple[int, int, int, int]:
    """MaxText's ``global_parameter_scale`` as the powers of two its dimensions scale by
    (``get_individual_scales`` in ``src/maxtext/configs/types.py`` at e591f30): (embedding, heads,
    MLP, layers), rotating through doubling the heads and MLP, then the embedding, then the
    layers; a scale that is not a power of two is refused, as MaxText refuses it."""
    if scale & (scale - 1):
        raise ValueError(f"{name}: global_parameter_scale {scale} is not a power of two (MaxText refuses it)")
    base, rem = divmod(scale.bit_length() - 1, 3)
    heads = base + int(rem > 0)
    return base + int(rem > 1), heads, heads, base


def read_maxtext(source: str | Path | dict[str, Any] | None = None, overrides: list[str] | tuple[str, ...] = (),
                 devices_per_chip: int = 1) -> RunConfig:
    """A MaxText YAML (a path or its parsed mapping; None: ``base.yml``'s defaults) with
    ``key=value`` overrides applied after it, as ``train.py base.yml key=value ...`` does.
    ``devices_per_chip``: the JAX devices each chip exposes (the chip's
    :attr:`~cosearch.hardware.Accelerator.devices_per_chip`; module docstring)."""
    from .._validate import positive_int
    devices_per_chip = positive_int("devices_per_chip", devices_per_chip, 8)
    name = f"MaxText config {source}" if isinstance(source, (str, Path)) else "MaxText config"
    d = {} if source is None else (load_yaml(source) if not isinstance(source, dict) else source)
    flat = flatten(d)
    flat.update(parse_overrides(overrides, name))
    k = Keys(name, flat)
    assumed: list[str] = []
    seq = k.positive("max_target_length", 2048)
    model = _moe_dispatch(k, name, _model(k, name, seq, assumed), assumed)
    rate = k.number("dropout_rate", 0.0)
    if _model_default(k, "enable_dropout", True) and rate > 0:
        # MaxText's decoders drop out the embedding and each layer's attention and MLP outputs at
        # dropout_rate (base.yml 0.0): cosearch's dropout ops and their masks
        model = model.with_(dropout=True)
        assumed.append(f"dropout_rate {rate}: dropout after the embedding and each layer's attention and MLP "
                       "(their masks kept for the backward)")
    if str(k.get("dtype", "bfloat16")) != "bfloat16":
        raise ValueError(f"{name}: dtype {k.get('dtype')!r} is not modelled (bfloat16 is)")

    def axis(ax: str, ici_default: int = 1, dcn_default: int = 1) -> tuple[int, int]:
        vals = []
        for pre, dflt in (("ici", ici_default), ("dcn", dcn_default)):
            v = k.int(f"{pre}_{ax}_parallelism", dflt)
            if v == 0 or v < -1:
                raise ValueError(f"{name}: {pre}_{ax}_parallelism must be -1 or positive, got {v}")
            vals.append(v)
        return vals[0], vals[1]

    slices = k.int("num_slices", -1)
    data = axis("data", 1, -1)
    fsdp = axis("fsdp", -1, 1)
    fsdp_t = axis("fsdp_transpose")
    tensor, pipe, ctx, expert = axis("tensor"), axis("pipeline"), axis("context"), axis("expert")
    for ax in ("sequence", "tensor_sequence", "tensor_transpose", "autoregressive"):
        if max(axis(ax)) > 1:
            raise ValueError(f"{name}: {ax} parallelism is not modelled")
    if any(x[1] == -1 for x in (fsdp, fsdp_t, tensor, pipe, ctx, expert)):
        raise ValueError(f"{name}: only dcn_data_parallelism may be -1 among the dcn axes")
    if slices in (-1, 1):
        if data[1] not in (-1, 1):
            raise ValueError(f"{name}: dcn_data_parallelism {data[1]} needs num_slices")
        dcn_data = 1
        if slices == -1:
            assumed.append("one slice (num_slices not given): every dcn_* degree 1")
    else:
        other = fsdp[1] * fsdp_t[1] * tensor[1] * pipe[1] * ctx[1] * expert[1]
        dcn_data = slices // other if data[1] == -1 else data[1]
        if dcn_data * other != slices:
            raise ValueError(f"{name}: the dcn degrees do not multiply to num_slices {slices}")
    for ax, v in (("tensor", tensor), ("pipeline", pipe), ("context", ctx), ("expert", expert),
                  ("fsdp_transpose", fsdp_t)):
        if v[0] == -1:
            raise ValueError(f"{name}: ici_{ax}_parallelism -1 is not read (only fsdp may fill the slice)")
    tp, pp, cp, ep = tensor[0] * tensor[1], pipe[0] * pipe[1], ctx[0] * ctx[1], expert[0] * expert[1]
    ici_data = data[0]
    if ici_data == -1:
        raise ValueError(f"{name}: ici_data_parallelism -1 is not read (give the degree)")
    data_deg = ici_data * dcn_data
    fsdp_deg = None if fsdp[0] == -1 else fsdp[0] * fsdp[1] * fsdp_t[0] * fsdp_t[1]
    if devices_per_chip > 1:
        # a chip's devices share its place on the fsdp axis (the data axis where fsdp is 1)
        n = devices_per_chip
        if fsdp_deg is not None and fsdp_deg > 1:
            if fsdp_deg % n:
                raise ValueError(f"{name}: the fsdp degree {fsdp_deg} (in devices) does not split into chips of "
                                 f"{n} devices")
            fsdp_deg //= n
        elif fsdp_deg == 1:
            if data_deg % n:
                raise ValueError(f"{name}: the data-parallel degree {data_deg} (in devices) does not split into "
                                 f"chips of {n} devices")
            data_deg //= n
        assumed.append(f"{n} devices a chip: MaxText's per-device batch and fsdp degree priced per chip (the chip's "
                       "devices sharing its place on the fsdp axis, one weight gather a chip)")
    plan: dict[str, Any] = dict(tp=tp, pp=pp, context_parallel=cp, expert_parallel=ep, sequence_parallel=tp > 1)
    if tp > 1:
        assumed.append("tensor parallelism with the activations' hidden dimension sharded (activation_embed on "
                       "'tensor'): priced as TP with sequence parallelism")
    if fsdp_deg is None or fsdp_deg > 1:
        plan["zero"] = 3
        if data_deg > 1:
            if fsdp_deg is None:
                raise ValueError(f"{name}: with data parallelism {data_deg}, give ici_fsdp_parallelism explicitly")
            plan["zero_group"] = fsdp_deg
    else:
        plan["zero"] = 0
    dp = None if fsdp_deg is None else data_deg * fsdp_deg
    # batch: per chip; a replica is tp pp cp chips
    pdbs = k.number("per_device_batch_size", 12, positive=True)
    per_replica = pdbs * tp * pp * cp * devices_per_chip
    if per_replica <= 0 or not per_replica.is_integer():
        raise ValueError(f"{name}: per_device_batch_size {pdbs} x tp pp cp {tp * pp * cp}"
                         + (f" x {devices_per_chip} devices a chip" if devices_per_chip > 1 else "")
                         + f" = {per_replica} sequences per data-parallel replica is not a whole number")
    ga = k.positive("gradient_accumulation_steps", 1)
    if int(per_replica) % ga:
        raise ValueError(f"{name}: {int(per_replica)} sequences per replica do not split into "
                         f"gradient_accumulation_steps {ga}")
    delay = 1
    if pp > 1:
        fields, delay = _circular_pipeline(k, name, model, pp, int(per_replica), ga, assumed)
        plan.update(fields)
    else:
        plan["microbatch"] = int(per_replica) // ga
    # recompute, precision, attention
    remat = str(k.get("remat_policy", "full"))
    engine = MAXTEXT
    tensors = {t: k.get(t) for t in MAXTEXT_TENSORS if t in k}     # base.yml's per-tensor places
    if remat == "full":
        plan["recompute"] = "full"
    elif remat == "minimal":
        # MaxText's decoder: remat_policy "minimal" saves the weight GEMMs' checkpoint names
        # (Decoder.minimal_policy; checkpoint_dots_with_no_batch_dims before it)
        plan["recompute"] = "selective"
        engine = MAXTEXT_MINIMAL_REMAT
    elif remat in NAMED_REMAT_POLICIES or remat == "custom":
        if remat == "custom":
            # remat_policy custom: each tensor 'remat', 'device' or 'offload' as its own key says
            # (base.yml's defaults: decoder_layer_input 'device', every other 'remat')
            places = {t: str(v) for t, v in tensors.items()}
        else:
            places = NAMED_REMAT_POLICIES[remat]
        policy = remat_places_policy(places)
        try:
            check_selective_policy(policy)
        except ValueError as exc:
            raise ValueError(f"{name}: remat_policy {remat}: {exc}") from None
        plan["recompute"] = "selective"
        engine = replace(MAXTEXT, name=f"maxtext-remat-{remat.replace('_', '-')}", selective_recompute=policy,
                         software=MAXTEXT.software + f", remat_policy {remat}")
    else:
        raise ValueError(f"{name}: remat_policy {remat!r} is not modelled (full, minimal, custom, "
                         f"{', '.join(NAMED_REMAT_POLICIES)})")
    if remat != "custom":
        for t, v in tensors.items():
            if str(v) != ("device" if t == "decoder_layer_input" else "remat"):
                assumed.append(f"{t}: {v!r} applies under remat_policy custom only; {remat} decides")
    quant = str(k.get("quantization", "") or "")
    if quant not in ("", "fp8", "nanoo_fp8", "fp8_full"):
        raise ValueError(f"{name}: quantization {quant!r} is not modelled (none, fp8, nanoo_fp8, fp8_full)")
    qwix = k.bool("use_qwix_quantization", False)
    if quant == "fp8_full" and not qwix:
        raise ValueError(f"{name}: quantization fp8_full is Qwix's recipe: it needs use_qwix_quantization true")
    plan["precision"] = "fp8" if quant else "bf16"
    calib = {c: str(k.get(c)) for c in ("weight_quantization_calibration_method", "act_quantization_calibration_method",
                                        "bwd_quantization_calibration_method") if c in k}
    if calib:
        if not quant:
            raise ValueError(f"{name}: {', '.join(sorted(calib))} without a quantization recipe")
        assumed.append("quantization calibration " + ", ".join(f"{c.split('_quantization')[0]} {v}" for c, v in
                                                                sorted(calib.items()))
                       + ": the FP8 casts priced as the maxtext engine prices them (fixed scales need no amax pass)")
    att = str(k.get("attention", "autoselected"))
    if att not in ("autoselected", "dot_product", "flash", "cudnn_flash_te"):
        raise ValueError(f"{name}: attention {att!r} is not modelled")
    plan["flash_attention"] = att != "dot_product" and not (att == "autoselected" and seq < 128)
    if fsdp_deg is None:
        assumed.append("ici_fsdp_parallelism -1: the fsdp axis is what the chips leave")
    memory = _state_bytes(k, name, assumed)
    if k.bool("logits_dot_in_fp32", False):
        # the output head's matmul in float32 takes several bf16 MXU passes on a TPU
        assumed.append("logits_dot_in_fp32: the output head's matmul priced in bf16 (float32 is slower)")
    if delay > 1:
        engine = replace(engine, name=engine.name + "-delayed-forwarding", pipeline_forwarding_delay=delay)
    gemma = GEMMA_MODELS.get(str(k.get("model_name", "default")))
    if gemma is not None:
        # the scan's unit: a block of the attention pattern, checkpointed at its input
        unit = GEMMA_PATTERN[gemma[0]]
        engine = replace(engine, name=engine.name + f"-blocks-of-{unit}", recompute_layers=unit)
    if _model_default(k, "use_iota_embed", False):
        # layers/embeddings.py: one-hot(tokens) from an iota, times the table, instead of a gather
        engine = replace(engine, name=engine.name + "-iota-embed", embedding="one-hot")
    _said(k, model, assumed)
    # without pipeline stages MaxText's pipeline settings do nothing (with them, read above)
    neutral = k.finish((), NEUTRAL_KEYS | (PIPELINE_KEYS if pp == 1 else frozenset())
                       | (set(tensors) if remat != "custom" else set()), off_is_neutral_under=("",))
    return RunConfig(name, model=model, plan=plan, dp=dp, batch_per_replica=int(per_replica), engine=engine,
                     seq_len=seq, assumed=tuple(assumed), neutral=neutral, memory=memory)


def _circular_pipeline(k: Keys, name: str, model: ModelConfig, pp: int, per_replica: int, ga: int,
                       assumed: list[str]) -> tuple[dict[str, Any], int]:
    """(The plan fields, the forwarding delay) of MaxText's SPMD circular pipeline over ``pp``
    stages (``layers/pipeline.py``, ``configs/types.py``; the maxtext engine's
    ``pipeline_schedule``): ``num_pipeline_repeats`` (default layers / (stages x
    ``num_layers_per_pipeline_stage``)) as the plan's virtual stages, ``num_pipeline_microbatches``
    (default the stages, twice them under ``pipeline_delay_activation_forwarding``, whose delay 2 is
    returned) as its microbatches a pass (each gradient-accumulation step one pass), each a
    ``1 / num_pipeline_microbatches`` share of a replica's sequences of the step.  Refused by name:
    pipelining a subset of the layers (``pipeline_parallel_layers``; DeepSeek's default pipelines
    its MoE layers only), the FSDP gathers once or per repeat, and the remat policy off the
    iterations or on the layers of a stage (each changes the schedule or what is kept)."""
    L = model.num_layers
    lps = k.positive("num_layers_per_pipeline_stage", 1)
    pipelined = k.int("pipeline_parallel_layers", -1)
    if pipelined == -1:
        pipelined = L - model.dense_layers if _decoder_block(k)[0] == "deepseek" else L
    if pipelined != L:
        raise ValueError(f"{name}: pipeline_parallel_layers {pipelined} of the {L} layers (the others run with the "
                         "stage axis as data parallelism) is not modelled; pipeline every layer")
    repeats = k.int("num_pipeline_repeats", -1)
    if repeats == -1:
        repeats, rem = divmod(L, pp * lps)
        if rem or not repeats:
            raise ValueError(f"{name}: num_layers_per_pipeline_stage {lps} x {pp} stages does not divide the {L} "
                             "layers (MaxText refuses it)")
    if repeats <= 0 or pp * repeats * lps != L:
        raise ValueError(f"{name}: {pp} stages x num_pipeline_repeats {repeats} x num_layers_per_pipeline_stage "
                         f"{lps} must be the {L} layers (MaxText asserts it)")
    for key, why in (("pipeline_fsdp_ag_once", "every stage's weights gathered once and held"),
                     ("pipeline_fsdp_ag_per_repeat", "the weights prefetched per repeat")):
        if k.bool(key, False):
            raise ValueError(f"{name}: {key} true ({why}) is not modelled")
    for key, want in (("set_remat_policy_on_pipeline_iterations", True), ("set_remat_policy_on_layers_per_stage", False),
                      ("scan_layers_per_stage", False)):
        if k.bool(key, want) != want:
            raise ValueError(f"{name}: {key} {not want} changes what the pipeline keeps for its backward; cosearch "
                             f"prices MaxText's default ({str(want).lower()})")
    if k.bool("scan_pipeline_repeats", True) is False:
        assumed.append("scan_pipeline_repeats false: the repeats unrolled, priced as scanned (the same tensors kept)")
    if not k.bool("scan_pipeline_iterations", True):
        assumed.append("scan_pipeline_iterations false: the iterations unrolled, priced as scanned (the same "
                       "tensors kept)")
    delay = 2 if k.bool("pipeline_delay_activation_forwarding", False) else 1
    micro = k.int("num_pipeline_microbatches", -1)
    if micro == -1:
        micro = delay * pp
    if micro <= 0 or micro % pp or micro < delay * pp:
        raise ValueError(f"{name}: num_pipeline_microbatches {micro} must be a positive multiple of the {pp} stages"
                         + (f", at least {delay * pp} with the delayed forwarding" if delay > 1 else "")
                         + " (MaxText asserts it)")
    share, rem = divmod(per_replica, ga * micro)
    if rem or not share:
        raise ValueError(f"{name}: {per_replica} sequences per data-parallel replica do not split into "
                         f"gradient_accumulation_steps {ga} x num_pipeline_microbatches {micro}")
    bubble = delay * (pp - 1)
    assumed.append(f"MaxText's circular pipeline: {pp} stages x {repeats} repeats of {lps} layer"
                   f"{'s' if lps > 1 else ''}, {micro} microbatches of {share} sequence{'s' if share > 1 else ''} a "
                   f"replica per pass ({micro * repeats + bubble} iterations, {bubble} of them bubble"
                   + (", the forwarding delayed one iteration" if delay > 1 else "") + f"), "
                   f"{ga} pass{'es' if ga > 1 else ''} a step")
    return dict(microbatch=share, virtual_stages=repeats, pipeline_microbatches=micro), delay


def _state_bytes(k: Keys, name: str, assumed: list[str]) -> MemoryConfig | None:
    """The bytes a parameter keeps under MaxText's dtypes (base.yml: ``weight_dtype`` float32;
    gradients and optax's Adam moments in the weights' dtype unless ``grad_dtype`` / ``mu_dtype``
    set theirs; the second moment in the weights'), as a :class:`~cosearch.memory.MemoryConfig` of
    the same total (cosearch's 2 + 2 + 12 bytes is MaxText's all-float32 16): None at the defaults."""
    dtypes = {}
    for key in ("weight_dtype", "grad_dtype", "mu_dtype"):
        v = k.get(key)
        if v in (None, ""):
            continue
        if str(v) not in _DTYPE_BYTES:
            raise ValueError(f"{name}: {key} {v!r} is not modelled ({', '.join(_DTYPE_BYTES)})")
        dtypes[key] = _DTYPE_BYTES[str(v)]
    w = dtypes.get("weight_dtype", 4)
    # the optimizer (optimizers.py get_optimizer): adamw and adam_pax keep Adam's two moments,
    # optax.sgd (no momentum) none; muon's Newton-Schulz iterations are compute cosearch does not price
    opt = str(k.get("opt_type", "adamw"))
    if opt not in ("adamw", "adam_pax", "sgd"):
        raise ValueError(f"{name}: opt_type {opt!r} is not modelled (adamw, adam_pax and sgd are)")
    moments = dtypes.get("mu_dtype", w) + w if opt != "sgd" else 0
    total = w + dtypes.get("grad_dtype", w) + moments
    if total == 16:
        return None
    assumed.append(f"parameter state {total} bytes a parameter (weights {w}, gradients {dtypes.get('grad_dtype', w)}, "
                   + (f"Adam moments {dtypes.get('mu_dtype', w)} + {w}" if opt != "sgd" else "opt_type sgd: no moments")
                   + "; MaxText's default 16)")
    return MemoryConfig.totalling(total)


#: switches for how weights (the experts among them) shard over the fsdp axis, said by :func:`_said`
FSDP_SHARDING_KEYS = ("shard_exp_on_fsdp", "fsdp_shard_on_exp", "use_2d_fsdp_sharding",
                      "moe_fsdp_use_two_stage_all_gather")


def _said(k: Keys, model: ModelConfig, assumed: list[str]) -> None:
    """Keys read and said, not priced: kernel tuning (:data:`KERNEL_TUNING_KEYS`), random routing
    (balanced in expectation, as cosearch routes), the output head's vocabulary tiling, a logits
    soft cap (inside the attention kernel) and how MoE weights shard over the fsdp axis."""
    tuning = sorted(key for key in k.flat if KERNEL_TUNING_KEYS.match(key))
    for key in tuning:
        k.get(key)
    if tuning:
        assumed.append(f"kernel tuning ({len(tuning)} keys: {', '.join(tuning[:3])}{', ...' if len(tuning) > 3 else ''}) "
                       "not priced: flash attention and grouped GEMMs at cosearch's kernel models")
    if k.bool("use_random_routing", False):
        assumed.append("use_random_routing: tokens routed at random, balanced in expectation as cosearch routes them")
    tiles = k.positive("num_vocab_tiling", 1)
    if tiles > 1:
        assumed.append(f"num_vocab_tiling {tiles}: the output head's logits in {tiles} tiles; priced whole")
    cap = k.number("attn_logits_soft_cap", 0.0)
    if cap > 0:
        assumed.append(f"attn_logits_soft_cap {cap:g}: inside the attention kernel, not priced")
    shard = [key for key in FSDP_SHARDING_KEYS if k.bool(key, False)]
    if shard:
        if not model.moe and any(s != "use_2d_fsdp_sharding" for s in shard):
            raise ValueError(f"{k.source}: {', '.join(shard)} shard experts, but {model.name} has none")
        assumed.append(f"{', '.join(shard)}: the weights' sharding over the fsdp axis priced as ZeRO-3's gathers "
                       "(the experts gathered with the rest)")
