"""An llm-foundry training YAML as a run.

The model (``model.name: mpt_causal_lm``) is built with MPT's own defaults
(``llmfoundry/models/mpt/configuration_mpt.py``): ``expansion_ratio`` 4, ``vocab_size`` 50368,
learned positions, GeLU MLP (``ffn_type: mptmlp``; ``mptglu`` is gated), LayerNorm, biases
unless ``no_bias``, tied embeddings, no dropout unless a ``*_pdrop`` is set.  ``hf_causal_lm``
models need their ``config.json`` as well.

==========================================  ===================================================
``global_train_batch_size``                  the global batch
``device_train_microbatch_size``             microbatch (``auto`` is refused: it is chosen at
                                             run time)
``precision``                                ``amp_bf16`` (bf16), ``amp_fp8`` (FP8)
``fsdp_config.sharding_strategy``            FULL_SHARD: ZeRO-3; SHARD_GRAD_OP: ZeRO-2;
                                             NO_SHARD: ZeRO-0; HYBRID_SHARD: ZeRO-3 within a
                                             node of 8 GPUs (torch FSDP shards inside the node)
``fsdp_config.mixed_precision``              DEFAULT (fp32 gradient reduction) or PURE (bf16:
                                             engine ``llm-foundry-pure``); FULL is refused
``optimizer.name``                           decoupled_adamw (Adam's two fp32 moments), the Lion
                                             variants (one), no_op (none); another refused
``fsdp_config.activation_checkpointing``     full recompute of every block
``model.attn_config.attn_impl``              flash / triton: flash attention (triton: FA1
                                             kernel); torch: unfused attention
``model.attn_config.attn_uses_sequence_id``  False (the default) only: packed sequences masked
                                             apart are not modelled
``model.use_flash_attention_2``,             ``hf_causal_lm``'s attention as llm-foundry's
``model.attn_implementation``                ``hf_base.py`` sets it: ``flash_attention_2``
                                             where ``use_flash_attention_2``, else the named
                                             implementation, else ``eager`` (unfused);
                                             ``sdpa`` (PyTorch's fused kernel) as flash
``model.config_overrides``                   ``hf_causal_lm``: applied to the ``config.json``
                                             read with the YAML (``read_configs``) as
                                             ``set_config_overrides`` applies them; a run
                                             whose model never met them is refused
``model.loss_fn``                            ``fused_crossentropy`` (one kernel) or
                                             ``torch_crossentropy`` (fp32 passes); an
                                             ``hf_causal_lm`` model's own loss: fp32
``expandable_segments``, ``icl_seq_len``,    said, not priced: the CUDA allocator's setting,
``icl_max_seq_len``, ``model.use_auth_token``  the in-context evaluation's, Hub access'
``model.attn_config.qk_ln`` / ``qk_gn``     q/k norms of the whole projected width (``full``)
                                             or of each head (``head``), the model's norm type
``model.attn_config.clip_qkv``              refused when set (a clamp pass over q, k and v)
``model.attn_config.rope_impl``             dail (flash-attn's rotary kernel, priced as the eager
                                             passes, said) or hf (eager)
==========================================  ===================================================
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..engine import llm_foundry
from ..models import ModelConfig
from ._fields import Keys, flatten, load_yaml, parse_overrides, resolve_interpolations
from .config import RunConfig

__all__ = ["read_foundry"]

NEUTRAL_SECTIONS = ("data_local", "data_remote", "run_name", "tokenizer", "train_loader", "eval_loader", "dataset",
                    "scheduler",
                    "optimizer", "algorithms", "callbacks", "loggers", "icl_tasks", "eval_gauntlet", "variables",
                    "global_seed", "seed", "max_duration", "eval_interval", "eval_first", "eval_subset_num_batches",
                    "device_eval_batch_size", "progress_bar", "log_to_console", "console_log_interval",
                    "save_interval", "save_num_checkpoints_to_keep", "save_folder", "load_path", "autoresume",
                    "dist_timeout", "python_log_level", "log_config", "save_overwrite", "load_weights_only")
NEUTRAL_KEYS = frozenset({
    "model.init_device", "model.init_config", "model.attn_config.attn_type", "model.attn_config.softmax_scale",
    "model.attn_config.alibi_bias_max", "model.attn_config.rope_theta",
    "model.attn_config.rope_dail_config", "model.attn_config.rope_hf_config",
    "model.logit_scale", "model.embedding_fraction", "model.use_cache", "model.verbose", "model.fc_type",
    "fsdp_config.activation_checkpointing_reentrant", "fsdp_config.limit_all_gathers", "fsdp_config.verbose",
    "fsdp_config.forward_prefetch", "fsdp_config.backward_prefetch", "fsdp_config.sync_module_states",
    "fsdp_config.use_orig_params", "fsdp_config.state_dict_type", "fsdp_config.load_monolith_rank0_only",
})


#: ``hf_causal_lm``'s attention implementations (Hugging Face ``attn_implementation``) as
#: llm-foundry's ``attn_impl`` words: FlashAttention-2, PyTorch's fused SDPA (its flash kernel on
#: these GPUs), the unfused eager attention.
HF_ATTENTION = {"flash_attention_2": "flash", "sdpa": "flash", "eager": "torch"}


def _hf_attention(k: Keys, name: str, assumed: list[str]) -> str:
    """``hf_causal_lm``'s attention as llm-foundry's ``hf_base.py`` chooses it:
    ``flash_attention_2`` where ``use_flash_attention_2`` is set, else ``attn_implementation``,
    else ``eager``."""
    impl = k.get("model.attn_implementation")
    if k.bool("model.use_flash_attention_2", False):
        if impl is not None and impl != "flash_attention_2":
            assumed.append(f"use_flash_attention_2 overrides attn_implementation {impl!r} (llm-foundry's hf_base)")
        impl = "flash_attention_2"
    impl = "eager" if impl is None else str(impl)
    if impl not in HF_ATTENTION:
        raise ValueError(f"{name}: attn_implementation {impl!r} is not modelled ({', '.join(HF_ATTENTION)})")
    if impl == "eager":
        assumed.append("hf_causal_lm attention eager (llm-foundry's default without use_flash_attention_2): unfused")
    return HF_ATTENTION[impl]


def _hf_model(k: Keys, name: str, assumed: list[str]) -> dict[str, Any]:
    """``hf_causal_lm``: the model comes from its ``config.json``; the YAML's ``config_overrides``
    (returned, nested as written) apply to it."""
    path = k.get("model.pretrained_model_name_or_path")
    if isinstance(path, str) and path.startswith("mosaicml/mpt"):
        raise ValueError(f"{name}: hf_causal_lm with {path}: llm-foundry (0.18 on) no longer loads the Hub's MPT "
                         "models (hf_base.py); describe it as mpt_causal_lm")
    k.get("model.pretrained")
    k.get("model.use_auth_token")
    overrides = {key[len("model.config_overrides."):]: k.get(key) for key in list(k.flat)
                 if key.startswith("model.config_overrides.")}
    if "model.config_overrides" in k.flat:
        k.get("model.config_overrides")          # an empty mapping: nothing to apply
    assumed.append("hf_causal_lm: the model comes from its config.json"
                   + (f", with config_overrides {', '.join(f'{a}={b!r}' for a, b in overrides.items())}"
                      if overrides else ""))
    nested: dict[str, Any] = {}
    for key, value in overrides.items():
        node = nested
        *head, last = key.split(".")
        for part in head:
            node = node.setdefault(part, {})
        node[last] = value
    return nested


def _model(k: Keys, name: str, seq: int, assumed: list[str]) -> ModelConfig | None:
    kind = str(k.get("model.name", "mpt_causal_lm"))
    if kind == "hf_causal_lm":
        return None
    if kind != "mpt_causal_lm":
        raise ValueError(f"{name}: model.name {kind!r} is not read (mpt_causal_lm, hf_causal_lm are)")
    d = k.positive("model.d_model", 2048)
    heads = k.positive("model.n_heads", 16)
    layers = k.positive("model.n_layers", 24)
    ratio = k.number("model.expansion_ratio", 4, positive=True)
    ffn_type = str(k.get("model.ffn_config.ffn_type", "mptmlp"))
    if ffn_type not in ("mptmlp", "mptglu"):
        raise ValueError(f"{name}: ffn_type {ffn_type!r} is not modelled (mptmlp, mptglu)")
    ffn = k.positive("model.ffn_config.ffn_hidden_size", int(round(ratio * d)))
    act = str(k.get("model.ffn_config.ffn_act_fn.name", "gelu"))
    if act not in ("gelu", "silu"):
        raise ValueError(f"{name}: ffn_act_fn {act!r} is not modelled (gelu, silu)")
    activation = ("swiglu" if act == "silu" else "geglu") if ffn_type == "mptglu" else "gelu"
    attn_type = str(k.get("model.attn_config.attn_type", "multihead_attention"))
    kv = heads if attn_type == "multihead_attention" else (
        1 if attn_type == "multiquery_attention" else k.positive("model.attn_config.kv_n_heads", 1))
    norm = str(k.get("model.norm_type", "low_precision_layernorm"))
    if norm not in ("low_precision_layernorm", "layernorm", "rmsnorm", "low_precision_rmsnorm", "triton_rmsnorm"):
        raise ValueError(f"{name}: norm_type {norm!r} is not modelled")
    rope = k.bool("model.attn_config.rope", False)
    if k.get("model.attn_config.clip_qkv") is not None:
        # layers/attention.py: qkv.clamp(min=-clip_qkv, max=clip_qkv), a pass over the projected q, k and v
        raise ValueError(f"{name}: attn_config.clip_qkv clamps the projected q, k and v in a pass of its own, which "
                         "is not modelled")
    rope_impl = str(k.get("model.attn_config.rope_impl", "dail"))
    if rope_impl not in ("dail", "hf"):
        raise ValueError(f"{name}: attn_config.rope_impl {rope_impl!r} is not MPT's (dail, hf)")
    if rope and rope_impl == "dail":
        assumed.append("attn_config.rope_impl dail (MPT's default): flash-attn's rotary kernel, priced as the eager "
                       "rotary embedding's passes (an upper bound; the kernel reads and writes q and k once)")
    alibi = k.bool("model.attn_config.alibi", False)
    learned = k.bool("model.learned_pos_emb", True)
    position = "rotary" if rope else ("learned" if learned and not alibi else "none")   # ALiBi: no parameters
    # llm-foundry's attention (layers/attention.py): qk_ln norms the whole projected q (d_model) and
    # k (kv_n_heads x head_dim) with the model's norm_type, qk_gn each head's head_dim
    qk_ln, qk_gn = k.bool("model.attn_config.qk_ln", False), k.bool("model.attn_config.qk_gn", False)
    if qk_ln and qk_gn:
        raise ValueError(f"{name}: attn_config.qk_ln and qk_gn together (q normed per head, k whole) are not "
                         "modelled; set one")
    qk_norm = "full" if qk_ln else ("head" if qk_gn else "none")
    drop = any(k.number(f, 0.0) > 0 for f in ("model.resid_pdrop", "model.emb_pdrop", "model.attn_config.attn_pdrop"))
    mseq = k.positive("model.max_seq_len", seq)
    if mseq != seq:
        raise ValueError(f"{name}: model.max_seq_len {mseq} contradicts max_seq_len {seq}")
    return ModelConfig(k.get("run_name") or f"mpt-{layers}x{d}", layers, d, heads, ffn,
                       k.positive("model.vocab_size", 50368), seq, kv_heads=kv, activation=activation,
                       norm="rmsnorm" if "rms" in norm else "layernorm", position=position,
                       bias=not k.bool("model.no_bias", False), tie_embeddings=k.bool("model.tie_word_embeddings", True),
                       dropout=drop, qk_norm=qk_norm)


def read_foundry(source: str | Path | dict[str, Any], overrides: list[str] | tuple[str, ...] = ()) -> RunConfig:
    """An llm-foundry YAML (a path or its parsed mapping), with optional ``key=value`` overrides."""
    name = f"llm-foundry YAML {source}" if not isinstance(source, dict) else "llm-foundry config"
    d = load_yaml(source) if not isinstance(source, dict) else source
    flat = flatten(resolve_interpolations(d))
    flat.update(parse_overrides(overrides, name))
    k = Keys(name, flat)
    assumed: list[str] = []
    seq = k.positive("max_seq_len", 2048)
    model = _model(k, name, seq, assumed)
    hf = model is None
    hf_overrides = _hf_model(k, name, assumed) if hf else {}
    for key in ("expandable_segments", "icl_seq_len", "icl_max_seq_len"):
        if key in k.flat:
            k.get(key)
            assumed.append(f"{key}: " + ("the CUDA caching allocator's setting, not priced" if key == "expandable_segments"
                                         else "the in-context evaluation's, not the training step's"))
    gbs = k.positive("global_train_batch_size")
    mb = k.get("device_train_microbatch_size")
    if mb == "auto":
        raise ValueError(f"{name}: device_train_microbatch_size auto is chosen at run time; give the number it chose")
    mb = k.positive("device_train_microbatch_size")
    prec = str(k.get("precision", "amp_bf16"))
    precision = {"amp_bf16": "bf16", "amp_fp8": "fp8"}.get(prec)
    if precision is None:
        raise ValueError(f"{name}: precision {prec!r} is not modelled (amp_bf16, amp_fp8)")
    strategy = str(k.get("fsdp_config.sharding_strategy", "FULL_SHARD"))
    zero = {"FULL_SHARD": 3, "SHARD_GRAD_OP": 2, "NO_SHARD": 0, "HYBRID_SHARD": 3, "_HYBRID_SHARD_ZERO2": 2}.get(strategy)
    if zero is None:
        raise ValueError(f"{name}: sharding_strategy {strategy!r} is not known")
    plan: dict[str, Any] = dict(tp=1, pp=1, zero=zero, precision=precision)
    if mb is not None:
        plan["microbatch"] = mb
    if "HYBRID" in strategy:
        plan["zero_group"] = 8
        assumed.append(f"{strategy}: sharded over the 8 GPUs of a node (torch FSDP's intra-node group)")
    mixed = str(k.get("fsdp_config.mixed_precision", "DEFAULT"))
    if mixed not in ("DEFAULT", "PURE"):
        raise ValueError(f"{name}: fsdp_config.mixed_precision {mixed!r} is not modelled (DEFAULT, PURE)")
    plan["recompute"] = "full" if k.bool("fsdp_config.activation_checkpointing", False) else "none"
    if k.get("fsdp_config.activation_checkpointing_target"):
        raise ValueError(f"{name}: activation_checkpointing_target (recompute of chosen modules) is not modelled")
    if k.bool("fsdp_config.activation_cpu_offload", False):
        raise ValueError(f"{name}: activation_cpu_offload is not read from llm-foundry configs")
    if k.bool("fsdp_config.cpu_offload", False):
        # Composer's FSDP: CPUOffload(offload_params=True), the parameters (and their gradients)
        # kept in host memory, which the memory model and the step time do not cover
        raise ValueError(f"{name}: fsdp_config.cpu_offload = true keeps FSDP's parameters and gradients in host "
                         "memory, which is not modelled")
    if hf:
        impl = _hf_attention(k, name, assumed)
    else:
        impl = str(k.get("model.attn_config.attn_impl", "flash"))
        if impl not in ("flash", "triton", "torch"):
            raise ValueError(f"{name}: attn_impl {impl!r} is not modelled (flash, triton, torch)")
        if k.bool("model.attn_config.attn_uses_sequence_id", False):
            raise ValueError(f"{name}: attn_uses_sequence_id (packed sequences masked apart) is not modelled; "
                             "cosearch prices every sequence attending to its whole length")
    plan["flash_attention"] = impl != "torch"
    # the loss: MPT's loss_fn (modeling_mpt.py: fused_crossentropy by default); a Hugging Face
    # model computes its own (transformers' ForCausalLMLoss upcasts the logits to fp32)
    loss = "fp32"
    if not hf:
        loss_fn = str(k.get("model.loss_fn", "fused_crossentropy"))
        loss = {"fused_crossentropy": "fused", "torch_crossentropy": "fp32"}.get(loss_fn)
        if loss is None:
            raise ValueError(f"{name}: loss_fn {loss_fn!r} is not modelled (fused_crossentropy, torch_crossentropy)")
    else:
        assumed.append("hf_causal_lm: the Hugging Face model's own loss, its logits upcast to fp32")
    for key in ("tp_config", "fsdp_config.device_mesh", "fsdp_config.data_parallel_shard_degree"):
        if any(x == key or x.startswith(key + ".") for x in flat):
            raise ValueError(f"{name}: {key} is not read from llm-foundry configs (FSDP over all GPUs is)")
    # the optimizer's state (llmfoundry/optim: DecoupledAdamW keeps Adam's two fp32 moments, the
    # Lion variants one, no_op none), on FSDP's fp32 parameters and gradients: 16, 12 or 8 bytes a
    # parameter, as a MemoryConfig of that total
    opt = str(k.get("optimizer.name", "decoupled_adamw"))
    moments = {"decoupled_adamw": 2, "decoupled_lionw": 1, "adalr_lion": 1, "clip_lion": 1, "no_op": 0}.get(opt)
    if moments is None:
        raise ValueError(f"{name}: optimizer.name {opt!r} is not modelled (decoupled_adamw, decoupled_lionw, "
                         "adalr_lion, clip_lion, no_op)")
    memory = None
    if moments != 2:
        from ..memory import MemoryConfig
        memory = MemoryConfig.totalling(8 + 4 * moments)
        assumed.append(f"optimizer {opt}: {moments} fp32 moment(s), {8 + 4 * moments} bytes a parameter with FSDP's "
                       "fp32 weights and gradients")
    neutral = k.finish(NEUTRAL_SECTIONS, NEUTRAL_KEYS)
    return RunConfig(name, model=model, plan=plan, global_batch=gbs, engine=llm_foundry(mixed, impl, loss),
                     seq_len=seq, assumed=tuple(assumed), neutral=neutral, hf_config_overrides=hf_overrides,
                     memory=memory)
