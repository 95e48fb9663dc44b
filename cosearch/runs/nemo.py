"""NeMo 1 launcher YAML and NeMo 2 / Megatron-Bridge config (a YAML dump of the config
container, and ``section.key=value`` overrides) as runs.

Both frameworks run Megatron-Core, and their keys are Megatron's arguments under other names.
Each reader therefore **translates** the config into the Megatron argument line it stands for
and reads that line with :func:`cosearch.runs.megatron.read_megatron_args`: one set of rules,
one set of defaults (Megatron's), for all three.  The translation is the tables below; a
refusal names the config key and the Megatron flag it became.

NeMo 1 (``model.*`` unless a section is named; NeMo's defaults from
``examples/nlp/language_modeling/conf/megatron_gpt_config.yaml``)
==========================================  ===================================================
``trainer.num_nodes`` x ``trainer.devices``  the chips
``trainer.precision``                        ``bf16``/``bf16-mixed`` (``16`` is refused, as --fp16)
``micro_batch_size``, ``global_batch_size``  --micro-batch-size, --global-batch-size
``*_model_parallel_size``                    --*-model-parallel-size
``virtual_pipeline_model_parallel_size``     --num-virtual-stages-per-pipeline-rank
``encoder_seq_length``                       --seq-length
``activation`` swiglu / fast-swiglu          --swiglu
``bias: false``                              --disable-bias-linear
``share_embeddings_and_output_weights: false``  --untie-embeddings-and-output-weights
``activations_checkpoint_*``                 --recompute-granularity/-method/-num-layers
``fp8`` (+ ``fp8_hybrid``), ``fp8_params``   --fp8-format hybrid|e4m3, --fp8-param-gather
``ub_tp_comm_overlap``                       --tp-comm-overlap (off without sequence parallelism, as
                                             NeMo turns it off, said)
``overlap_p2p_comm``                         --overlap-p2p-communication, or when false or unset
                                             --no-overlap-p2p-communication (NeMo 1's default:
                                             ``cfg.get('overlap_p2p_comm', False)``)
``optim.name: distributed_fused_adam``       --use-distributed-optimizer, with
                                             ``optim.overlap_grad_sync`` (default true) and
                                             ``optim.overlap_param_sync`` as --overlap-grad-reduce /
                                             --overlap-param-gather; ``optim.dtype``,
                                             ``store_params``, ``store_param_remainders``: the
                                             optimizer state's bytes (:func:`apex_adam_memory`)
``transformer_engine``                       --attention-backend auto (TE's fused attention, in
                                             Megatron-Core's TE spec or NeMo's legacy TE layer);
                                             without it (and without ``use_flash_attention``): unfused
``tokenizer.type: GPT2BPETokenizer``         --vocab-size 50257 (GPT-2's vocabulary)
``activation: squared-relu``                 --squared-relu (Nemotron-4; priced as ReLU, said)
``megatron_amp_O2``                          must be true (false, NeMo's default, keeps fp32 weights
                                             under autocast: refused)
``apply_rope_fusion``                        false or unset (NeMo's default): --no-rope-fusion
``bias_activation_fusion: false``            --no-bias-swiglu-fusion (SwiGLU) or --no-bias-gelu-fusion
``gradient_accumulation_fusion``             false or unset (NeMo's default), or turned off as NeMo
                                             does (pp 1, dp > 1, optimizer not distributed):
                                             --no-gradient-accumulation-fusion
==========================================  ===================================================

Megatron-Bridge: ``model.*`` fields are Megatron-Core's ``TransformerConfig`` names (the
argument names with underscores), ``train.micro_batch_size`` / ``global_batch_size``,
``ddp.*`` (``overlap_grad_reduce``, ``overlap_param_gather``, ``use_distributed_optimizer``; the
data-parallel overlap as a comm-overlap config's setup writes it over them: :func:`_bridge_dp_overlap`;
the model's overlap switches likewise: :func:`_bridge_model_overlap`),
``mixed_precision`` (a recipe name such as ``bf16_with_fp8_current_scaling_mixed`` or its
fields; its switches read as Bridge sets them up, over the model's: :func:`_bridge_precision_switches`), ``comm_overlap.tp_comm_overlap``, ``comm_overlap.overlap_p2p_comm`` (unset: on with virtual
stages, as Bridge's ``CommOverlapConfig`` and Megatron default it).  A full dump lists every switch: a field the reader
does not know is neutral when it is off (false, null, 0) and refused by name otherwise.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from ..memory import MemoryConfig
from ..models import ModelConfig
from ._fields import Keys, flatten, load_yaml, parse_overrides, resolve_interpolations
from .config import RunConfig
from .megatron import activation_fusion_off_flag, read_megatron_args

__all__ = ["read_nemo1", "read_megatron_bridge", "TOKENIZER_VOCAB"]

#: Vocabulary sizes of the tokenizers NeMo configs name (the tokenizers' own files): GPT-2 BPE
#: (vocab.json, 50,257 tokens), Llama 2 / Mistral SentencePiece (32,000), Llama 3 tiktoken (128,256).
TOKENIZER_VOCAB = {"GPT2BPETokenizer": 50257, "meta-llama/Llama-2-7b-hf": 32000, "meta-llama/Meta-Llama-3-8B": 128256,
                   "meta-llama/Meta-Llama-3-70B": 128256, "meta-llama/Llama-3.1-8B": 128256,
                   "meta-llama/Llama-3.1-70B": 128256, "meta-llama/Llama-3.1-405B": 128256,
                   "mistralai/Mistral-7B-v0.1": 32000}

#: NeMo 1 keys read as the Megatron flag with a value.
_NEMO1_VALUED = {"micro_batch_size": "--micro-batch-size", "global_batch_size": "--global-batch-size",
                 "tensor_model_parallel_size": "--tensor-model-parallel-size",
                 "pipeline_model_parallel_size": "--pipeline-model-parallel-size",
                 "context_parallel_size": "--context-parallel-size",
                 "expert_model_parallel_size": "--expert-model-parallel-size",
                 "virtual_pipeline_model_parallel_size": "--num-virtual-stages-per-pipeline-rank",
                 "encoder_seq_length": "--seq-length", "num_layers": "--num-layers", "hidden_size": "--hidden-size",
                 "ffn_hidden_size": "--ffn-hidden-size", "num_attention_heads": "--num-attention-heads",
                 "kv_channels": "--kv-channels", "hidden_dropout": "--hidden-dropout",
                 "attention_dropout": "--attention-dropout", "position_embedding_type": "--position-embedding-type",
                 "activations_checkpoint_granularity": "--recompute-granularity",
                 "activations_checkpoint_method": "--recompute-method",
                 "activations_checkpoint_num_layers": "--recompute-num-layers",
                 "num_moe_experts": "--num-experts", "moe_router_topk": "--moe-router-topk"}

#: NeMo 1 ``model.*`` keys that change neither step time nor memory in cosearch's model.
_NEMO1_NEUTRAL = frozenset({
    "rampup_batch_size", "resume_from_checkpoint", "max_position_embeddings", "init_method_std",
    "apply_query_key_layer_scaling", "layernorm_epsilon", "make_vocab_size_divisible_by", "pre_process", "post_process",
    "persist_layer_norm", "gradient_as_bucket_view", "grad_div_ar_fusion",
    "bias_dropout_add_fusion", "batch_p2p_comm",
    "native_amp_init_scale", "native_amp_growth_interval", "hysteresis",
    "fp16_lm_cross_entropy", "grad_allreduce_chunk_size_mb", "mcore_gpt", "fp8_e4m3",
    "fp8_margin", "fp8_interval", "fp8_amax_history_len", "fp8_amax_compute_algo", "seed",
    "sync_batch_comm", "use_cpu_initialization", "onnx_safe", "apex_transformer_log_level", "nsys_profile",
    "fsdp_sharding_strategy", "fsdp_grad_reduce_dtype", "fsdp_sharded_checkpoint", "rotary_percentage",
    "rotary_base", "seq_len_interpolation_factor", "normalize_attention_scores", "transformer_block_type",
    "openai_gelu", "headscale", "deterministic_mode",
    "gc_interval", "get_attention_mask_from_fusion", "defer_embedding_wgrad_compute",
    "wgrad_deferral_limit", "use_te_rng_tracker", "ub_tp_comm_overlap_cfg",
    "tp_comm_overlap_ag", "tp_comm_overlap_rs", "tp_comm_overlap_rs_dgrad", "tp_comm_bulk_wgrad",
    "tp_comm_bulk_dgrad", "tp_comm_split_ag", "tp_comm_split_rs", "tp_comm_atomic_ag", "tp_comm_atomic_rs",
    "optim.bucket_cap_mb", "optim.contiguous_grad_buffer", "optim.contiguous_param_buffer", "optim.lr",
    "optim.weight_decay", "optim.ddp_bucket_size",
    # initialisation only, and LayerNorm1P's weight stored as gamma - 1 (the same kernel's work)
    "use_scaled_init_method", "layernorm_zero_centered_gamma",
    # FP8 delayed scaling's amax all-reduce (Transformer Engine's DelayedScaling reduce_amax, on by
    # default): one small tensor a step
    "reduce_amax",
})
_NEMO1_NEUTRAL_SECTIONS = ("tokenizer", "data", "optim.sched", "nsys_profile", "optim.betas",
                           # checkpoint format and timer logging (NeMo's megatron_gpt_config.yaml)
                           "dist_ckpt_format", "dist_ckpt_load_on_device", "dist_ckpt_parallel_dist_opt",
                           "dist_ckpt_parallel_save", "dist_ckpt_torch_dist_multiproc", "dist_ckpt_load_strictness",
                           "dist_ckpt_parallel_save_within_dp", "dist_ckpt_parallel_load", "megatron_timer_kwargs")
_NEMO1_TOP_NEUTRAL = ("hydra", "run", "exp_manager", "name", "restore_from_path", "defaults", "base_results_dir",
                      "data_dir", "launcher_scripts_path", "cluster", "env_vars", "s3_checkpointing")
_TRAINER_NEUTRAL = frozenset({"accelerator", "logger", "enable_checkpointing", "use_distributed_sampler", "max_epochs",
                              "max_steps", "max_time", "log_every_n_steps", "val_check_interval", "limit_val_batches",
                              "limit_test_batches", "gradient_clip_val", "replace_sampler_ddp", "benchmark",
                              "enable_model_summary", "num_sanity_val_steps"})


def _switch_words(k: Keys, switches) -> list[str]:
    """The bare Megatron flags a config's true/false switches stand for: each switch is
    ``(keys, when, flag)``; ``flag`` is added when any of ``keys`` is ``when`` (unset keys take
    ``not when``, Megatron's default).  Every key is read, so none is later taken as unknown."""
    out = []
    for keys, when, flag in switches:
        values = [k.bool(key, not when) for key in keys]
        if when in values:
            out.append(flag)
    return out


#: Megatron-Bridge's mixed-precision switches that stand for Megatron flags: (field and its
#: aliases, ``MixedPrecisionConfig``'s default, the value that adds the flag, the flag).
#: ``fp8_param`` and ``fp8_param_gather`` are kept in sync by the config's ``__setattr__``.
_BRIDGE_PRECISION_SWITCHES = ((("fp8_wgrad",), True, False, "--no-fp8-wgrad"),
                              (("fp16",), False, True, "--fp16"),
                              (("fp8_param_gather", "fp8_param"), False, True, "--fp8-param-gather"),
                              (("fp8_dot_product_attention",), False, True, "--fp8-dot-product-attention"))
#: The switches a Megatron-Bridge mixed-precision recipe sets away from the defaults
#: (``megatron/bridge/training/mixed_precision.py`` at 067f987df, 2026-08-22: the FP8 delayed,
#: current-scaling and MXFP8 recipes gather their parameters in FP8; the blockwise and NVFP4 ones
#: do not).
BRIDGE_PRECISION_SWITCHES = {name: {"fp8_param_gather": True} for name in (
    "bf16_with_fp8_delayed_scaling_mixed", "bf16_with_mxfp8_mixed", "bf16_with_fp8_current_scaling_mixed",
    "nemotron_h_bf16_with_fp8_current_scaling_mixed", "nanov2_bf16_with_fp8_current_scaling_mixed")}


def _say_overwritten(assumed: list[str], key: str, given: Any, owner: str, field: str, value: bool,
                     why: str = "") -> None:
    """Say that Megatron-Bridge's setup of its ``owner`` config (``"mixed-precision"``,
    ``"comm-overlap"``) writes its ``field`` (``value``) over a config's ``key`` = ``given``."""
    cls = {"mixed-precision": "MixedPrecisionConfig", "comm-overlap": "CommOverlapConfig"}[owner]
    assumed.append(f"{key}={str(given).lower()} is overwritten by the {owner} config's {field} "
                   f"({str(value).lower()}{why}; Megatron-Bridge's {cls}.setup)")


def _has_comm_overlap(k: Keys) -> bool:
    """Whether a Megatron-Bridge config has a ``CommOverlapConfig`` (any ``comm_overlap`` field)."""
    return any(key.startswith("comm_overlap.") for key in k.flat) or k.get("comm_overlap") not in (None, "", False)


#: The model's communication-overlap switches a Megatron-Bridge ``CommOverlapConfig`` sets up (its
#: ``_get_model_comm_overlap_cfgs``: each off unless the comm-overlap config turns it on), with
#: their Megatron flags.
_BRIDGE_MODEL_OVERLAP = (("tp_comm_overlap", "--tp-comm-overlap"),
                         ("overlap_moe_expert_parallel_comm", "--overlap-moe-expert-parallel-comm"),
                         ("delay_wgrad_compute", "--delay-wgrad-compute"))


def _bridge_model_overlap(k: Keys, assumed: list[str]) -> list[str]:
    """The flags of :data:`_BRIDGE_MODEL_OVERLAP` as Megatron-Bridge sets them up: with a
    ``CommOverlapConfig``, its ``setup`` writes each switch into the model config - the
    comm-overlap config's value, off where it sets none (``_get_model_comm_overlap_cfgs``,
    ``training/comm_overlap.py``) - so a differing ``model.*`` value is said to be overwritten;
    without one the model's values stand.  The TP overlap is off under tp < 2 or without sequence
    parallelism either way (the setup's rule, with a warning; the userbuffers overlap needs both),
    said."""
    has_co = _has_comm_overlap(k)
    out = []
    for field, flag in _BRIDGE_MODEL_OVERLAP:
        model = k.get(f"model.{field}")
        if has_co:
            on = k.bool(f"comm_overlap.{field}", False)
            if model is not None and k.bool(f"model.{field}") != on:
                _say_overwritten(assumed, f"model.{field}", model, "comm-overlap", field, on)
        else:
            on = k.bool(f"model.{field}", False)
        if on and field == "tp_comm_overlap" and (k.int("model.tensor_model_parallel_size", 1) < 2
                                                 or not k.bool("model.sequence_parallel", False)):
            # CommOverlapConfig.setup's rule (with a warning); the userbuffers overlap needs both
            on = False
            assumed.append("tp_comm_overlap=true turned off, as Megatron-Bridge's CommOverlapConfig.setup does under "
                           "tensor parallelism < 2 or without sequence parallelism")
        if on:
            out.append(flag)
    return out


def _bridge_dp_overlap(k: Keys, distributed_optimizer: bool, assumed: list[str]) -> list[str]:
    """``--overlap-grad-reduce`` / ``--overlap-param-gather`` as Megatron-Bridge sets them up: with a
    ``CommOverlapConfig`` (any ``comm_overlap.*`` field) and the distributed optimizer,
    ``CommOverlapConfig.setup`` writes its data-parallel overlap into the DDP config - on when more
    than one data-parallel rank, unless the comm-overlap config sets it (``_get_optimizer_overlap_cfgs``
    with ``_override_user_cfgs``, ``training/comm_overlap.py``; with one rank there is nothing to
    overlap either way) - so a differing ``ddp.*`` value is said to be overwritten; otherwise the
    DDP config's value (or the comm-overlap config's) stands, off by default.  The optimizer's
    ``overlap_param_gather`` is the same switch: Bridge's validation turns the DDP config's and the
    optimizer's both on where either is (``training/config.py``)."""
    has_co = _has_comm_overlap(k)
    out = []
    for field, flag in (("overlap_grad_reduce", "--overlap-grad-reduce"),
                        ("overlap_param_gather", "--overlap-param-gather")):
        co, ddp = k.get(f"comm_overlap.{field}"), k.get(f"ddp.{field}")
        if has_co and distributed_optimizer:
            on = True if co is None else k.bool(f"comm_overlap.{field}")
            if ddp is not None and k.bool(f"ddp.{field}") != on:
                _say_overwritten(assumed, f"ddp.{field}", ddp, "comm-overlap", field, on,
                                 "" if co is not None else ", its setup default with the distributed optimizer")
        else:
            on = any(k.bool(key, False) for key in (f"ddp.{field}", f"comm_overlap.{field}"))
        if field == "overlap_param_gather" and k.bool("optimizer.overlap_param_gather", False):
            # the validation after setup turns both on where either is (_validate_overlap_param_gather)
            on = True
        if on and field == "overlap_param_gather" and "--overlap-grad-reduce" not in out:
            # Bridge runs it (Megatron-LM's own argument check refuses it); cosearch prices the two
            # overlaps as one term, the gradient reduction's
            assumed.append("overlap_param_gather without overlap_grad_reduce: priced with the gradient reduction's "
                           "overlap (off), cosearch's one data-parallel overlap term")
            on = False
        if on:
            out.append(flag)
    return out


def _bridge_precision_switches(k: Keys, name: str, assumed: list[str]) -> list[str]:
    """The Megatron flags of :data:`_BRIDGE_PRECISION_SWITCHES` as Megatron-Bridge runs them:
    ``MixedPrecisionConfig.setup`` writes the mixed-precision config's fields over the model's
    (``update_config_with_precision_overrides``), so where the config has one (a recipe name or
    its fields) its value decides - the field as given, else the recipe's
    (:data:`BRIDGE_PRECISION_SWITCHES`), else the config's default - and a ``model.*`` value
    beside it that differs is overwritten (said); without one the model's value stands."""
    mp = k.get("mixed_precision")
    has_mp = mp is not None or any(key.startswith("mixed_precision.") for key in k.flat)
    preset = BRIDGE_PRECISION_SWITCHES.get(mp, {}) if isinstance(mp, str) else {}
    out = []
    for fields, default, when, flag in _BRIDGE_PRECISION_SWITCHES:
        given = {f"{sec}.{f}": k.bool(f"{sec}.{f}", default) for sec in ("mixed_precision", "model") for f in fields
                 if k.get(f"{sec}.{f}") is not None}
        own = {key: v for key, v in given.items() if key.startswith("mixed_precision.")}
        model = {key: v for key, v in given.items() if key.startswith("model.")}
        for part in (own, model):
            if len(set(part.values())) > 1:
                raise ValueError(f"{name}: {' and '.join(f'{a}={b}' for a, b in part.items())} contradict each other")
        if has_mp:
            value = next(iter(own.values())) if own else preset.get(fields[0], default)
            for key, v in model.items():
                if v != value:
                    _say_overwritten(assumed, key, v, "mixed-precision", fields[0], value)
        else:
            value = next(iter(model.values())) if model else default
        if value == when:
            out.append(flag)
    return out


def _bridge_activation_fusion(k: Keys, assumed: list[str]) -> list[str]:
    """``model.bias_activation_fusion`` as the Megatron flag of the MLP's activation: false,
    ``--no-bias-swiglu-fusion`` for a gated MLP (``gated_linear_unit``), ``--no-bias-gelu-fusion``
    otherwise; unset, Megatron-LM's default (on), said (Megatron-Core's ``TransformerConfig``
    defaults it off, and Bridge's model providers and performance configs set it)."""
    if k.get("model.bias_activation_fusion") is None:
        assumed.append("model.bias_activation_fusion not given: the MLP's activation fused, Megatron-LM's default "
                       "(Megatron-Core's TransformerConfig defaults it off; Bridge's model providers and performance "
                       "configs set it)")
        return []
    if k.bool("model.bias_activation_fusion"):
        return []
    return [activation_fusion_off_flag(k.bool("model.gated_linear_unit", False))]


def _one_value(k: Keys, name: str, *keys: str):
    """The value of whichever of ``keys`` the config sets (None: none); two that differ are refused."""
    values = {key: k.get(key) for key in keys}
    set_ = {key: v for key, v in values.items() if v not in (None, "", False)}
    if len(set(map(str, set_.values()))) > 1:
        raise ValueError(f"{name}: {' and '.join(f'{a}={b!r}' for a, b in set_.items())} contradict each other")
    return next(iter(set_.values()), None)


#: NeMo 1 switches read as bare Megatron flags (``(keys, when, flag)``, :func:`_switch_words`).
_NEMO1_SWITCHES = ((("model.bias",), False, "--disable-bias-linear"),
                   (("model.cross_entropy_loss_fusion",), True, "--cross-entropy-loss-fusion"),
                   (("model.fp8_wgrad",), False, "--no-fp8-wgrad"),
                   (("model.share_embeddings_and_output_weights",), False, "--untie-embeddings-and-output-weights"),
                   (("model.sequence_parallel",), True, "--sequence-parallel"),
                   (("model.fp8_params",), True, "--fp8-param-gather"),
                   (("model.enable_cuda_graph",), True, "--enable-cuda-graph"),
                   (("model.masked_softmax_fusion",), False, "--no-masked-softmax-fusion"))
#: Megatron-Bridge switches (a field may sit in the model provider or in its own section).
_BRIDGE_SWITCHES = ((("model.add_bias_linear",), False, "--disable-bias-linear"),
                    (("model.share_embeddings_and_output_weights",), False, "--untie-embeddings-and-output-weights"),
                    (("model.sequence_parallel",), True, "--sequence-parallel"),
                    (("ddp.use_distributed_optimizer", "optimizer.use_distributed_optimizer"), True,
                     "--use-distributed-optimizer"),
                    (("model.moe_enable_deepep",), True, "--moe-enable-deepep"),
                    (("model.moe_pad_expert_input_to_capacity",), True, "--moe-pad-expert-input-to-capacity"),
                    (("model.enable_cuda_graph",), True, "--enable-cuda-graph"),
                    (("model.external_cuda_graph",), True, "--external-cuda-graph"),
                    (("model.moe_paged_stash",), True, "--moe-paged-stash"),
                    (("model.use_transformer_engine_op_fuser",), True, "--use-transformer-engine-op-fuser"),
                    (("model.moe_router_force_load_balancing",), True, "--moe-router-force-load-balancing"),
                    (("model.moe_permute_fusion",), True, "--moe-permute-fusion"),
                    (("model.moe_shared_expert_overlap",), True, "--moe-shared-expert-overlap"),
                    (("model.multi_latent_attention",), True, "--multi-latent-attention"),
                    (("model.qk_layernorm",), True, "--qk-layernorm"),
                    (("model.qk_l2_norm",), True, "--qk-l2-norm"),
                    (("model.moe_router_enable_expert_bias",), True, "--moe-router-enable-expert-bias"),
                    (("model.moe_router_pre_softmax",), True, "--moe-router-pre-softmax"),
                    (("model.moe_apply_probs_on_input",), True, "--moe-apply-probs-on-input"),
                    (("model.moe_per_layer_logging",), True, "--moe-per-layer-logging"),
                    (("model.moe_router_fusion",), True, "--moe-router-fusion"),
                    (("model.moe_grouped_gemm",), True, "--moe-grouped-gemm"),
                    (("model.masked_softmax_fusion",), False, "--no-masked-softmax-fusion"),
                    (("model.moe_router_padding_for_quantization",), True, "--moe-router-padding-for-quantization"),
                    (("model.moe_router_padding_for_fp8",), True, "--moe-router-padding-for-fp8"),
                    (("model.account_for_embedding_in_pipeline_split",), True,
                     "--account-for-embedding-in-pipeline-split"),
                    (("model.account_for_loss_in_pipeline_split",), True, "--account-for-loss-in-pipeline-split"),
                    (("optimizer.use_precision_aware_optimizer",), True, "--use-precision-aware-optimizer"),
                    # GPTModelProvider's default: on where Transformer Engine imports
                    # (fusions.can_enable_gradient_accumulation_fusion)
                    (("model.gradient_accumulation_fusion",), False, "--no-gradient-accumulation-fusion"),
                    # Megatron-LM's default (on) where unset: Bridge's model providers differ
                    # (:func:`read_megatron_bridge` says so)
                    (("model.apply_rope_fusion",), False, "--no-rope-fusion"))
#: Megatron-Bridge's optimizer state dtypes (OptimizerConfig, torch dtypes in a dump) as Megatron's flags.
_BRIDGE_OPTIMIZER_DTYPES = {"optimizer.main_params_dtype": "--main-params-dtype",
                            "optimizer.exp_avg_dtype": "--exp-avg-dtype",
                            "optimizer.exp_avg_sq_dtype": "--exp-avg-sq-dtype",
                            "optimizer.main_grads_dtype": "--main-grads-dtype"}


def _dtype_word(name: str, value: Any) -> str:
    """A torch dtype as a dump writes it (``torch.bfloat16``, ``bfloat16``, ``bf16``, ...) in
    Megatron's flag spelling (fp32, fp16, bf16, fp8)."""
    v = str(value).split(".")[-1].lower()
    for word, spellings in (("fp32", ("float32", "fp32", "float")), ("bf16", ("bfloat16", "bf16")),
                            ("fp16", ("float16", "fp16", "half")), ("fp8", ("uint8", "fp8", "float8_e4m3fn"))):
        if v in spellings:
            return word
    raise ValueError(f"{name}: the dtype {value!r} is none of fp32, bf16, fp16 or fp8")


#: Megatron-Bridge fields with no Megatron flag of their own, read and said in ``assumed`` when on.
_BRIDGE_NOTED = {
    "model.high_priority_a2a_comm_stream": "the EP all-to-alls on a high-priority stream: not priced (the EP overlap "
                                           "prices its streams as sharing the SMs)",
    "model.moe_hybridep_num_sms_preprocessing": "SMs for HybridEP's preprocessing kernel: not priced",
}


def _line(words: list[str]) -> str:
    return " ".join(shlex.quote(w) for w in words)


def _read_line(name: str, words: list[str], model: ModelConfig | None, neutral: tuple[str, ...],
               assumed: list[str], num_chips: int | None, memory: MemoryConfig | None = None) -> RunConfig:
    try:
        rc = read_megatron_args(_line(words), model, source=name)
    except ValueError as e:
        raise ValueError(f"{name}: {e} (the config read as the Megatron arguments: {_line(words)})") from None
    from dataclasses import replace
    return replace(rc, num_chips=num_chips, assumed=tuple(assumed) + rc.assumed,
                   neutral=neutral + tuple(w for w in rc.neutral if w.startswith("--")),
                   memory=memory if memory is not None else rc.memory)


#: Bytes of one element of each optimizer-state dtype NeMo 1's ``distributed_fused_adam`` takes
#: (Apex ``DistributedFusedAdam``: float32, float16, bfloat16).
APEX_ADAM_DTYPE_BYTES = {"fp32": 4.0, "32": 4.0, "float32": 4.0, "fp16": 2.0, "16": 2.0, "float16": 2.0,
                         "bf16": 2.0, "bfloat16": 2.0}


def apex_adam_memory(dtype: Any = "fp32", store_params: bool = True, store_param_remainders: bool = False,
                     name: str = "optim") -> MemoryConfig | None:
    """The optimizer state NeMo 1's ``distributed_fused_adam`` keeps a parameter (sharded over the
    data-parallel ranks as the distributed optimizer's): Apex ``DistributedFusedAdam``'s
    ``StateBucket`` holds the two moments (``exp_avg_shard``, ``exp_avg_sq_shard``) in ``dtype``,
    with ``store_params`` (its default) a copy of the parameters in ``dtype`` too, and with
    ``store_param_remainders`` (BF16 parameters, FP32 state; ``store_params`` off) the 16 low bits
    of their FP32 values (``int16``) instead (NVIDIA/apex ``apex/contrib/optimizers/
    distributed_fused_adam.py``).  None where that is the memory model's default (12 bytes: FP32
    state and parameter copy)."""
    b = APEX_ADAM_DTYPE_BYTES.get(str(dtype).lower().removeprefix("torch."))
    if b is None:
        raise ValueError(f"{name}: optimizer state dtype {dtype!r} is not one Apex's DistributedFusedAdam takes "
                         f"(fp32, fp16, bf16)")
    if store_param_remainders and (store_params or b != 4.0):
        raise ValueError(f"{name}: store_param_remainders needs store_params false and an fp32 optimizer state "
                         "(DistributedFusedAdam refuses it otherwise)")
    total = 2.0 * b + (b if store_params else 0.0) + (2.0 if store_param_remainders else 0.0)
    return None if total == 12.0 else MemoryConfig(optimizer_bytes=total)


def _vocab(k: Keys, prefix: str, name: str, words: list[str], assumed: list[str]) -> None:
    tok = k.get(f"{prefix}tokenizer.type") or k.get(f"{prefix}tokenizer.tokenizer_model")
    k.get(f"{prefix}tokenizer.library")
    if tok is None:
        return
    size = TOKENIZER_VOCAB.get(str(tok))
    if size is None:
        raise ValueError(f"{name}: tokenizer {tok!r}: its vocabulary size is not known to cosearch (known: "
                         f"{', '.join(TOKENIZER_VOCAB)}); give the model's config.json")
    words += ["--vocab-size", str(size)]
    assumed.append(f"vocabulary {size} from tokenizer {tok} (unpadded)")


def _nemo1_grad_accum(k: Keys, name: str, chips: int, optimizer: str, assumed: list[str]) -> list[str]:
    """NeMo 1's O2 mixed precision and its gradient accumulation fusion as NeMo runs them
    (``MegatronBaseModel``, ``nemo/collections/nlp/models/language_modeling/megatron_base_model.py``):
    ``megatron_amp_O2`` false (the default of ``megatron_gpt_config.yaml``) keeps fp32 weights and
    runs the forward under autocast (``params_dtype`` fp32, ``enable_autocast``), which is refused;
    ``gradient_accumulation_fusion`` (default false) is turned off by NeMo without pipeline
    parallelism over more than one data-parallel rank unless the optimizer is distributed, and
    off it is ``--no-gradient-accumulation-fusion``
    (:func:`~cosearch.runs.megatron.unfused_grad_accum_bytes`)."""
    if not k.bool("model.megatron_amp_O2", False):
        raise ValueError(f"{name}: model.megatron_amp_O2 is false (NeMo's default): O1 mixed precision keeps fp32 "
                         "weights and casts them to bf16 under autocast in every forward, which is not modelled; set "
                         "model.megatron_amp_O2: true (bf16 weights with fp32 main copies, as NeMo's launcher configs do)")
    if not k.bool("model.gradient_accumulation_fusion", False):
        return ["--no-gradient-accumulation-fusion"]
    ranks = (k.positive("model.tensor_model_parallel_size", 1) * k.positive("model.pipeline_model_parallel_size", 1)
             * k.positive("model.context_parallel_size", 1))
    if (k.positive("model.pipeline_model_parallel_size", 1) == 1 and chips // ranks > 1
            and optimizer not in ("distributed_fused_adam", "mcore_distributed_optim")):
        assumed.append("model.gradient_accumulation_fusion=true turned off, as NeMo does without pipeline parallelism "
                       f"over more than one data-parallel rank unless the optimizer is distributed ({optimizer})")
        return ["--no-gradient-accumulation-fusion"]
    return []


def read_nemo1(source: str | Path | dict[str, Any], overrides: list[str] | tuple[str, ...] = (),
               model: ModelConfig | str | None = None) -> RunConfig:
    """A NeMo 1 launcher training YAML (or NeMo's ``megatron_gpt_config.yaml``), with optional
    Hydra ``key=value`` overrides; ``model``: the model when the YAML's tokenizer leaves the
    vocabulary unknown (its dimensions must agree; a preset's name or a ModelConfig)."""
    from .config import given_model
    model = given_model(model, "read_nemo1")
    name = f"NeMo 1 YAML {source}" if not isinstance(source, dict) else "NeMo 1 config"
    d = load_yaml(source) if not isinstance(source, dict) else source
    d = resolve_interpolations(d)
    flat = flatten(d)
    flat.update(parse_overrides(overrides, name))
    k = Keys(name, flat)
    words: list[str] = []
    assumed: list[str] = []
    nodes, devices = k.positive("trainer.num_nodes", 1), k.positive("trainer.devices", 1)
    prec = str(k.get("trainer.precision", "bf16"))
    if prec in ("bf16", "bf16-mixed"):
        words.append("--bf16")
    elif prec in ("16", "16-mixed"):
        words.append("--fp16")
    else:
        raise ValueError(f"{name}: trainer.precision {prec!r} is not modelled (bf16 is)")
    if k.get("trainer.accumulate_grad_batches", 1) != 1:
        raise ValueError(f"{name}: trainer.accumulate_grad_batches must be 1 (NeMo derives accumulation from the batch)")
    for key, flag in _NEMO1_VALUED.items():
        v = k.get(f"model.{key}")
        if v is not None:
            words += [flag, str(v)]
    seq = k.get("model.data.seq_length")
    if seq is not None and k.get("model.encoder_seq_length") not in (None, seq):
        raise ValueError(f"{name}: model.data.seq_length {seq} contradicts model.encoder_seq_length")
    groups = k.get("model.num_query_groups")
    if groups is not None:
        words += ["--group-query-attention", "--num-query-groups", str(groups)]
    act = str(k.get("model.activation", "gelu"))
    if act in ("swiglu", "fast-swiglu"):
        words.append("--swiglu")
    elif act == "squared-relu":
        words.append("--squared-relu")
    elif act != "gelu":
        raise ValueError(f"{name}: model.activation {act!r} is not modelled (gelu, swiglu, fast-swiglu, squared-relu)")
    attention = str(k.get("model.attention_type", "multihead"))
    if attention != "multihead":
        raise ValueError(f"{name}: model.attention_type {attention!r} is not modelled (multihead)")
    norm = str(k.get("model.normalization", "layernorm"))
    if norm not in ("layernorm", "layernorm1p", "rmsnorm"):
        raise ValueError(f"{name}: model.normalization {norm!r} is not modelled")
    words += ["--normalization", "RMSNorm" if norm == "rmsnorm" else "LayerNorm"]
    words += _switch_words(k, _NEMO1_SWITCHES)
    if k.bool("model.ub_tp_comm_overlap", False):
        # NeMo turns the userbuffers overlap off without sequence parallelism (megatron_base_model.py:
        # "Pipelined tensor-parallel communication overlap is available with sequence-parallelism.
        # Setting `ub_tp_comm_overlap` to False."); at tp 1 there is no tensor-parallel traffic
        if "--sequence-parallel" not in words:
            assumed.append("model.ub_tp_comm_overlap=true turned off, as NeMo does without sequence parallelism")
        elif k.int("model.tensor_model_parallel_size", 1) > 1:
            words.append("--tp-comm-overlap")
    if k.bool("model.sharp", False):
        # NCCL's SHARP offloads the data-parallel reductions to the InfiniBand switches
        assumed.append("model.sharp: SHARP in-network reductions of the data-parallel collectives are not "
                       "priced (the ring's time is)")
    words.append("--overlap-p2p-communication" if k.bool("model.overlap_p2p_comm", False)
                 else "--no-overlap-p2p-communication")
    hybrid = k.bool("model.fp8_hybrid", True)
    if k.bool("model.fp8", False):
        if not k.bool("model.transformer_engine", False):
            raise ValueError(f"{name}: model.fp8 needs model.transformer_engine (NeMo's FP8 runs in TE)")
        words += ["--fp8-format", "hybrid" if hybrid else "e4m3"]
    if k.bool("model.fsdp", False):
        raise ValueError(f"{name}: model.fsdp (NeMo's torch FSDP path) is not read; use engine fsdp with ZeRO-3")
    te = k.bool("model.transformer_engine", False)
    if k.bool("model.use_flash_attention", False):
        words.append("--use-flash-attn")
    elif te:
        # Transformer Engine's layers pick their fused attention: Megatron-Core's te_gpt spec under
        # mcore_gpt (megatron_gpt_model.get_specs), TE's own TransformerLayer in NeMo's legacy
        # model (transformer.py AutocastTransformerLayer); until stop 71 the legacy one read unfused
        words += ["--attention-backend", "auto"]
    else:
        # without TE: Megatron-Core's local spec (mcore_gpt) or NeMo's legacy CoreAttention, both
        # unfused without use_flash_attention (stated: a Megatron line without an attention flag
        # reads as Megatron's TE default)
        words += ["--attention-backend", "unfused"]
    # NeMo 1's Megatron-Core DDP: grad_reduce_in_fp32=(optim.grad_sync_dtype, default 'fp32', == 'fp32')
    # (MegatronBaseModel.setup_mcore_distributed_parallel)
    sync = str(k.get("model.optim.grad_sync_dtype", "fp32"))
    if sync not in ("fp32", "bf16"):
        raise ValueError(f"{name}: model.optim.grad_sync_dtype {sync!r} is not modelled (fp32, bf16)")
    if sync == "bf16":
        words.append("--grad-reduce-in-bf16")
    opt = str(k.get("model.optim.name", "fused_adam"))
    memory = None
    if opt == "distributed_fused_adam":
        # Apex's DistributedFusedAdam keeps its state in optim.dtype (fp32 by default)
        dtype = k.get("model.optim.dtype", "fp32")
        memory = apex_adam_memory(dtype, k.bool("model.optim.store_params", True),
                                  k.bool("model.optim.store_param_remainders", False), name)
        if memory is not None:
            assumed.append(f"optimizer state {dtype} (Apex DistributedFusedAdam's optim.dtype): "
                           f"{memory.optimizer_bytes:g} bytes a parameter")
    if opt in ("distributed_fused_adam", "mcore_distributed_optim"):
        words.append("--use-distributed-optimizer")
        if k.bool("model.optim.overlap_grad_sync", True):
            words.append("--overlap-grad-reduce")
            if k.bool("model.optim.overlap_param_sync", True):
                words.append("--overlap-param-gather")
    elif opt not in ("fused_adam", "adam", "adamw"):
        raise ValueError(f"{name}: model.optim.name {opt!r} is not modelled")
    else:
        assumed.append(f"optimizer {opt}: Megatron's DDP, gradient reduction after the backward")
    words += _nemo1_grad_accum(k, name, nodes * devices, opt, assumed)
    if not k.bool("model.bias_activation_fusion", True):
        # NeMo 1's default on (megatron_gpt_config.yaml; MegatronBaseModel: cfg.get('bias_activation_fusion', True))
        words.append(activation_fusion_off_flag(act in ("swiglu", "fast-swiglu")))
    if not k.bool("model.apply_rope_fusion", False) and str(k.get("model.position_embedding_type",
                                                                     "learned_absolute")) in ("rope", "yarn"):
        # NeMo 1's default off (megatron_gpt_config.yaml; MegatronBaseModel: cfg.get('apply_rope_fusion', False));
        # only rotary positions have a RoPE to fuse
        words.append("--no-rope-fusion")
    _vocab(k, "model.", name, words, assumed)
    sections = _NEMO1_TOP_NEUTRAL + tuple(f"model.{s}" for s in _NEMO1_NEUTRAL_SECTIONS)
    if k.bool("model.fp32_residual_connection", False):
        raise ValueError(f"{name}: model.fp32_residual_connection keeps the residual stream in fp32 (its adds, the "
                         "norms' inputs and the pipeline's sends at 4 bytes an element), which is not modelled")
    for key in ("num_micro_batches_with_partial_activation_checkpoints", "activations_checkpoint_layers_per_pipeline"):
        if k.get(f"model.{key}") not in (None, 0):
            raise ValueError(f"{name}: model.{key} recomputes only some microbatches' or stages' layers "
                             "(NeMo's partial activation checkpointing), which is not modelled")
    if k.bool("model.cpu_offloading", False):
        raise ValueError(f"{name}: model.cpu_offloading (Transformer Engine's offload of activations and weights to "
                         "the host) is not read from NeMo 1 configs")
    # what and how much to offload, read by NeMo only with cpu_offloading on
    sections += ("model.cpu_offloading_activations", "model.cpu_offloading_weights", "model.cpu_offloading_num_layers")
    neutral = k.finish(sections, frozenset(f"model.{x}" for x in _NEMO1_NEUTRAL) | {f"trainer.{x}" for x in _TRAINER_NEUTRAL},
                       off_is_neutral_under=("model",))
    return _read_line(name, words, model, neutral, assumed, nodes * devices, memory)


#: Megatron-Bridge ``model.*`` fields read as a Megatron flag with a value (TransformerConfig names).
_BRIDGE_VALUED = {f: "--" + f.replace("_", "-") for f in (
    "tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size",
    "expert_model_parallel_size", "num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads",
    "kv_channels", "hidden_dropout", "attention_dropout", "recompute_granularity", "recompute_method",
    "recompute_num_layers", "moe_router_topk", "moe_ffn_hidden_size", "vocab_size", "seq_length",
    "position_embedding_type", "normalization", "expert_tensor_parallel_size", "mtp_num_layers",
    "moe_token_dispatcher_type", "moe_flex_dispatcher_backend", "moe_expert_capacity_factor", "moe_layer_freq",
    "moe_hybridep_num_sms", "moe_deepep_num_sms", "moe_flex_dispatcher_num_sms", "cuda_graph_impl", "moe_expert_rank_capacity_factor",
    "moe_paged_stash_buffer_size_factor_cuda", "moe_paged_stash_buffer_size_factor_cpu",
    "moe_router_dtype", "moe_router_num_groups", "moe_router_group_topk", "moe_router_topk_scaling_factor",
    "moe_router_score_function", "moe_router_bias_update_rate", "moe_token_drop_policy",
    "q_lora_rank", "kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim", "rotary_percent",
    "moe_shared_expert_intermediate_size", "moe_router_topk_limited_devices",
    # GPT-OSS's attention and activation (TransformerConfig's fields, Megatron's flags)
    "window_size", "window_attn_skip_freq", "softmax_type", "activation_func_clamp_value", "glu_linear_offset")}
_BRIDGE_VALUED.update({"num_layers_in_first_pipeline_stage": "--decoder-first-pipeline-num-layers",
                       "num_layers_in_last_pipeline_stage": "--decoder-last-pipeline-num-layers"})
_BRIDGE_VALUED.update({"virtual_pipeline_model_parallel_size": "--num-virtual-stages-per-pipeline-rank",
                       "num_moe_experts": "--num-experts"})
_BRIDGE_NEUTRAL_SECTIONS = ("rng", "scheduler", "dataset", "logger", "tokenizer", "checkpoint", "profiling",
                            "inprocess_restart", "ft", "straggler", "nvrx_straggler", "rerun_state_machine",
                            "optimizer.lr", "optimizer.min_lr", "optimizer.weight_decay", "optimizer.adam_beta1",
                            "optimizer.adam_beta2", "optimizer.adam_eps", "optimizer.clip_grad",
                            "train.train_iters", "train.eval_iters", "train.eval_interval", "train.exit_signal",
                            "train.exit_signal_handler", "train.manual_gc", "train.manual_gc_interval")
_BRIDGE_NEUTRAL = frozenset({
    "model.init_method_std", "model.layernorm_epsilon", "model.rotary_base",
    "model.seq_len_interpolation_factor", "model.make_vocab_size_divisible_by", "model.bf16", "model.params_dtype",
    "model.pipeline_dtype", "model.autocast_dtype",
    "model.bias_dropout_fusion", "model.persist_layer_norm",
    "model.deallocate_pipeline_outputs", "model.async_tensor_model_parallel_allreduce", "model.barrier_with_L1_time",
    "model.max_position_embeddings", "model.activation_func", "model.transformer_layer_spec",
    "model.attention_softmax_in_fp32", "model.apply_query_key_layer_scaling", "model.timers",
    "model.moe_router_load_balancing_type", "model.moe_aux_loss_coeff",
    "model.moe_z_loss_coeff",
    "model.bias_dropout_add_fusion",
    "model.scatter_embedding_sequence_parallel", "model.tp_comm_overlap_cfg", "model.use_te_rng_tracker",
    "ddp.average_in_collective", "ddp.check_for_nan_in_grad", "ddp.bucket_size",

    "mixed_precision.bf16", "mixed_precision.params_dtype", "mixed_precision.pipeline_dtype",
    "mixed_precision.autocast_dtype", "mixed_precision.fp8_amax_history_len", "mixed_precision.fp8_amax_compute_algo",
    "mixed_precision.fp8_margin",
    "optimizer.bf16", "optimizer.params_dtype", "dist.distributed_backend",
    "dist.distributed_timeout_minutes", "dist.align_grad_reduce", "dist.use_gloo_process_groups",
    "comm_overlap.tp_comm_overlap_cfg", "comm_overlap.tp_comm_bootstrap_backend", "comm_overlap.bucket_size",
    "comm_overlap.defer_embedding_wgrad_compute", "comm_overlap.wgrad_deferral_limit", "comm_overlap.batch_p2p_comm",
    # a weight layout the fused grouped MLP reads; graph warm-up steps; inference-only padding; page size
    "model.moe_mlp_glu_interleave_size", "model.cuda_graph_warmup_steps", "model.moe_pad_experts_for_cuda_graph_inference",
    "model.moe_paged_stash_page_size",
    # the kernels cosearch prices are Transformer Engine's, and its elementwise ops single fused passes
    # already (as apply_rope_fusion above); the loss's normalisation, RoPE
    # scaling constants, initialisation, bucket sizing and vocabulary padding (as
    # make_vocab_size_divisible_by) change no time or memory in cosearch's model
    "model.transformer_impl", "model.fused_single_qkv_rope", "model.moe_permute_fusion_into_hybridep",
    "model.use_fused_weighted_squared_relu", "model.calculate_per_token_loss", "model.rotary_scaling_factor",
    "model.yarn_original_max_position_embeddings", "model.csa_compress_rotary_base", "model.init_model_with_meta_device",
    "model.mtp_loss_scaling_factor", "model.should_pad_vocab", "ddp.num_buckets", "ddp.suggested_communication_unit_size",
    "dist.enable_megatron_core_experimental", "train.exit_duration_in_mins",
})

#: Megatron-Bridge mixed-precision recipe names (megatron/bridge/training/mixed_precision.py) -> flags.
BRIDGE_PRECISION = {"bf16_mixed": [], "bf16_with_fp8_delayed_scaling_mixed": ["--fp8-format", "hybrid", "--fp8-recipe",
                                                                           "delayed"],
                    "bf16_with_fp8_current_scaling_mixed": ["--fp8-format", "hybrid", "--fp8-recipe", "tensorwise"],
                    "bf16_with_fp8_subchannel_scaling_mixed": ["--fp8-format", "hybrid", "--fp8-recipe", "blockwise"],
                    "bf16_with_mxfp8_mixed": ["--fp8-format", "e4m3", "--fp8-recipe", "mxfp8"],
                    "bf16_with_nvfp4_mixed": ["--fp4-format", "e2m1", "--fp4-recipe", "nvfp4"],
                    "nemotron_h_bf16_with_fp8_current_scaling_mixed": ["--fp8-format", "hybrid", "--fp8-recipe",
                                                                       "tensorwise"],
                    "nanov2_bf16_with_fp8_current_scaling_mixed": ["--fp8-format", "hybrid", "--fp8-recipe",
                                                                   "blockwise"],
                    "nemotron_3_super_bf16_with_nvfp4_mixed": ["--fp4-format", "e2m1", "--fp4-recipe", "nvfp4"]}

#: The (first, last) layers a Megatron-Bridge mixed-precision recipe keeps in bf16
#: (``first_last_layers_bf16`` with ``num_layers_at_start_in_bf16`` / ``num_layers_at_end_in_bf16``,
#: ``megatron/bridge/training/mixed_precision.py``); the others keep none.
BRIDGE_BF16_LAYERS = {"bf16_with_fp8_current_scaling_mixed": (1, 1),
                      "nemotron_h_bf16_with_fp8_current_scaling_mixed": (2, 2),
                      "nanov2_bf16_with_fp8_current_scaling_mixed": (2, 2),
                      "nemotron_3_super_bf16_with_nvfp4_mixed": (0, 14)}


def read_megatron_bridge(source: str | Path | dict[str, Any] | None = None,
                         overrides: list[str] | tuple[str, ...] = (), model: ModelConfig | str | None = None,
                         num_chips: int | None = None) -> RunConfig:
    """A Megatron-Bridge / NeMo 2 config container dumped as YAML (a path or its parsed mapping;
    None: overrides only), with ``section.key=value`` overrides.  ``model``: the model the run
    trains when the config leaves it out (the recipe's model provider); the dump's model fields
    must agree with it (a preset's name or a ModelConfig)."""
    from .config import given_model
    model = given_model(model, "read_megatron_bridge")
    name = f"Megatron-Bridge config {source}" if isinstance(source, (str, Path)) else "Megatron-Bridge config"
    d = {} if source is None else (load_yaml(source) if not isinstance(source, dict) else source)
    flat = flatten(resolve_interpolations(d))
    flat.update(parse_overrides(overrides, name))
    if flat.get("peft") not in (None, "", False):
        raise ValueError(f"{name}: peft (parameter-efficient fine-tuning) is not modelled")
    flat.pop("peft", None)
    k = Keys(name, flat)
    words: list[str] = []
    assumed: list[str] = []
    for key, flag in _BRIDGE_VALUED.items():
        v = k.get(f"model.{key}")
        if v is not None:
            words += [flag, str(v).split(".")[-1] if key in ("normalization", "recompute_granularity") else str(v)]
    # YaRN (GPTModelProvider's yarn_* fields, what the Megatron line's --rotary-scaling-factor,
    # --mscale and --mscale-all-dim set): used only under position_embedding_type yarn; where
    # either mscale is null Megatron-Core's _yarn_get_concentration_factor takes the factor alone,
    # as the line's defaults (1, 0) do
    yarn = [k.get(f"model.yarn_{f}") for f in ("rotary_scaling_factor", "mscale", "mscale_all_dim")]
    if str(k.get("model.position_embedding_type") or "").split(".")[-1] == "yarn":
        if yarn[0] is not None:
            words += ["--rotary-scaling-factor", str(yarn[0])]
        if yarn[1] is not None and yarn[2] is not None:
            words += ["--mscale", str(yarn[1]), "--mscale-all-dim", str(yarn[2])]
    for key, flag in _BRIDGE_OPTIMIZER_DTYPES.items():
        v = k.get(key)
        if v is not None:
            words += [flag, _dtype_word(f"{name}: {key}", v)]
    # list fields: a list of names or one comma-separated string (a scope may be dumped as its enum)
    for key in ("cp_comm_type", "cuda_graph_scope", "cuda_graph_modules"):
        names = k.names(f"model.{key}")
        if names:
            words += ["--" + key.replace("_", "-"), *(x.split(".")[-1] for x in names)]
    for key, note in _BRIDGE_NOTED.items():
        v = k.get(key)
        if v not in (None, False, 0, ""):
            assumed.append(f"{key.split('.', 1)[1]}={v}: {note}")
    mods = k.get("model.recompute_modules")
    if mods not in (None, [], ""):
        if not isinstance(mods, (list, tuple)) or not all(isinstance(m, str) for m in mods):
            raise ValueError(f"{name}: model.recompute_modules must be a list of module names, got {mods!r}")
        words += ["--recompute-modules", *mods]
    for key in ("micro_batch_size", "global_batch_size"):
        v = k.get(f"train.{key}")
        if v is not None:
            words += ["--" + key.replace("_", "-"), str(v)]
    groups = k.get("model.num_query_groups")
    heads = k.get("model.num_attention_heads")
    if groups is not None and groups != heads:
        words += ["--group-query-attention", "--num-query-groups", str(groups)]
    if k.bool("model.gated_linear_unit", False):
        act = str(k.get("model.activation_func", "silu"))
        if "quick_gelu" in act:
            words.append("--quick-geglu")           # GPT-OSS's (GPTOSSProvider: activation_func quick_gelu)
        elif "silu" in act:
            words.append("--swiglu")
        else:
            raise ValueError(f"{name}: a gated MLP with activation_func {act!r} is not modelled (silu, quick_gelu)")
    opt = k.get("optimizer.optimizer")
    if opt is not None:
        # OptimizerConfig.optimizer, Megatron's --optimizer: the line's rule reads it
        words += ["--optimizer", str(opt)]
    if "model.apply_rope_fusion" not in k and "--no-position-embedding" not in words:
        assumed.append("model.apply_rope_fusion not given: fused RoPE, Megatron-LM's default (Megatron-Core's "
                       "TransformerConfig defaults it off, and Bridge's model providers and performance scripts set it)")
    words += _switch_words(k, _BRIDGE_SWITCHES)
    words += _bridge_activation_fusion(k, assumed)
    words += _bridge_precision_switches(k, name, assumed)
    words += _bridge_model_overlap(k, assumed)
    words += _bridge_dp_overlap(k, "--use-distributed-optimizer" in words, assumed)
    # Megatron-FSDP (DistributedDataParallelConfig.use_megatron_fsdp, formerly use_custom_fsdp) and
    # its sharding strategy (default no_shard, read only with it)
    fsdp = k.bool("ddp.use_megatron_fsdp", False) | k.bool("ddp.use_custom_fsdp", False)
    strategy = k.get("ddp.data_parallel_sharding_strategy")
    if fsdp:
        words.append("--use-megatron-fsdp")
        if strategy is not None:
            words += ["--data-parallel-sharding-strategy", str(strategy)]
    # the loss: Megatron-Bridge's GPTModelProvider turns cross_entropy_loss_fusion on by default
    # (gpt_provider.py), with Megatron-Core's native implementation unless the config names one
    if k.bool("model.cross_entropy_loss_fusion", True):
        impl = k.get("model.cross_entropy_fusion_impl")
        words += ["--cross-entropy-loss-fusion", "--cross-entropy-fusion-impl", str(impl or "native")]
        if impl is None and k.get("model.cross_entropy_loss_fusion") is None:
            assumed.append("model.cross_entropy_loss_fusion not given: Megatron-Bridge's default, on (native)")
    elif k.get("model.cross_entropy_fusion_impl") is not None:
        k.get("model.cross_entropy_fusion_impl")      # read: Megatron-Core ignores it without the fusion
    # unset: Megatron's default, on with virtual stages, as Megatron-Bridge's CommOverlapConfig
    # sets it (pp > 1 and virtual stages: overlap_p2p_comm True, batch_p2p_comm False)
    p2p = {key: k.bool(key, False) for key in ("comm_overlap.overlap_p2p_comm", "model.overlap_p2p_comm")
           if k.get(key) is not None}
    if len(set(p2p.values())) > 1:
        raise ValueError(f"{name}: {' and '.join(f'{a}={b}' for a, b in p2p.items())} contradict each other")
    if p2p:
        words.append("--overlap-p2p-communication" if any(p2p.values()) else "--no-overlap-p2p-communication")
    mp = k.get("mixed_precision")
    if isinstance(mp, str):
        if mp not in BRIDGE_PRECISION:
            raise ValueError(f"{name}: mixed_precision {mp!r} is not a recipe cosearch knows ({', '.join(BRIDGE_PRECISION)})")
        words += BRIDGE_PRECISION[mp]
        ends = BRIDGE_BF16_LAYERS.get(mp, (0, 0))
    else:
        fp8 = _one_value(k, name, "mixed_precision.fp8", "model.fp8")
        recipe = _one_value(k, name, "mixed_precision.fp8_recipe", "model.fp8_recipe")
        if fp8:
            words += ["--fp8-format", str(fp8)]
            if not recipe and k.get("mixed_precision.fp8") is not None:
                # Megatron-Bridge's MixedPrecisionConfig.fp8_recipe defaults to tensorwise (since
                # 2025-09, commit 15bf28dea), Megatron-Core's TransformerConfig to delayed
                recipe = "tensorwise"
                assumed.append("mixed_precision.fp8_recipe not given: Megatron-Bridge's default tensorwise "
                               "(per-tensor current scaling)")
            if recipe:
                words += ["--fp8-recipe", str(recipe)]
        fp4 = _one_value(k, name, "mixed_precision.fp4", "model.fp4")
        if fp4:
            words += ["--fp4-format", str(fp4)]
        ends = (0, 0)
    # the recipe's bf16 layers unless the config says otherwise (MixedPrecisionConfig defaults:
    # first_last_layers_bf16 False, 0 and 0 layers)
    on = k.get("mixed_precision.first_last_layers_bf16")
    on = any(ends) if on is None else k.bool("mixed_precision.first_last_layers_bf16", False)
    start = k.int("mixed_precision.num_layers_at_start_in_bf16")
    end = k.int("mixed_precision.num_layers_at_end_in_bf16")
    start = ends[0] if start is None else start
    end = ends[1] if end is None else end
    if on:
        words += ["--first-last-layers-bf16", "--num-layers-at-start-in-bf16", str(start),
                  "--num-layers-at-end-in-bf16", str(end)]
    # the gradients' reduction dtype: MixedPrecisionConfig's grad_reduce_in_fp32 (True by default and
    # in every recipe) overrides the DDP config's when Bridge sets precision up
    # (update_config_with_precision_overrides); without a mixed-precision config, the DDP config's
    mp_fp32 = k.get("mixed_precision.grad_reduce_in_fp32")
    ddp_fp32 = k.get("ddp.grad_reduce_in_fp32")
    if mp_fp32 is not None:
        fp32 = k.bool("mixed_precision.grad_reduce_in_fp32")
        if ddp_fp32 is not None and k.bool("ddp.grad_reduce_in_fp32") != fp32:
            assumed.append(f"ddp.grad_reduce_in_fp32={ddp_fp32} overridden by mixed_precision.grad_reduce_in_fp32="
                           f"{mp_fp32}, as Megatron-Bridge's precision setup does")
    elif mp is not None:
        fp32 = True
        if ddp_fp32 is not None and not k.bool("ddp.grad_reduce_in_fp32"):
            assumed.append("ddp.grad_reduce_in_fp32=False overridden by the mixed-precision config's default True, "
                           "as Megatron-Bridge's precision setup does")
    else:
        fp32 = k.bool("ddp.grad_reduce_in_fp32", False)
    words.append("--accumulate-allreduce-grads-in-fp32" if fp32 else "--grad-reduce-in-bf16")
    backend = k.get("model.attention_backend")
    if backend is not None:
        words += ["--attention-backend", str(backend).split(".")[-1]]
    else:
        words += ["--attention-backend", "auto"]
        assumed.append("attention_backend not given: Megatron-Core's default auto (TE's fused attention)")
    neutral = k.finish(_BRIDGE_NEUTRAL_SECTIONS, _BRIDGE_NEUTRAL,
                       off_is_neutral_under=("model", "train", "ddp", "optimizer", "dist", "comm_overlap",
                                             "mixed_precision"))
    return _read_line(name, words, model, neutral, assumed, num_chips)
