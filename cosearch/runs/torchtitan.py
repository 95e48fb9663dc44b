"""A torchtitan ``train.toml`` as a run.

Defaults are torchtitan's own (``torchtitan/config/job_config.py``): ``local_batch_size`` 8,
``seq_len`` 2048, every parallel degree 1 except ``data_parallel_shard_degree`` -1 (what the
chips leave), activation checkpointing ``selective`` with ``selective_ac_option = "2"``,
``compile.enable = false``, ``mixed_precision_param = "bfloat16"``, ``mixed_precision_reduce =
"float32"``.

=======================================  ======================================================
``[model] name, flavor``                 Llama 3 8B/70B/405B (``llama3``) are cosearch presets;
                                         other models need their ``config.json`` as well
``[model] converters``                   ``float8`` / ``mx``: FP8 layer GEMMs (``emulate`` refused;
                                         a ``recipe_name`` other than tensorwise said)
``[training] local_batch_size``          sequences per data-parallel replica per step
``[training] global_batch_size``         the global batch (-1: local x dp)
``[training] seq_len``                   the sequence (must agree with the model)
``[parallelism] data_parallel_*``        dp = replicate x shard; shard > 1 shards weights,
                                         gradients and optimizer (FSDP2, ZeRO-3) over the shard
                                         group (HSDP when replicate > 1)
``[parallelism] tensor_parallel_degree`` tp, with sequence parallelism (torchtitan's TP plan
                                         shards the norms' activations over the sequence)
``pipeline_parallel_degree``,            pp; microbatch; schedules 1F1B / GPipe /
``pipeline_parallel_microbatch_size``,   Interleaved1F1B (virtual stages from
``pipeline_parallel_schedule``           ``pipeline_parallel_layers_per_stage``)
``context_parallel_degree``              cp
``expert_parallel_degree``               ep
``expert_tensor_parallel_degree``        1 (torchtitan's default: under tp > 1 expert parallelism
                                         borrows all of TP, cosearch's etp 1) or tp (etp = tp)
``expert_parallel_comm_backend``         standard (PyTorch's all-to-alls, tokens gathered over tp
                                         before routing) or deepep (the flex dispatcher, DeepEP)
``[activation_checkpoint] mode``         none / full / selective (``op``: Megatron's selective
                                         reading; an integer N other than 1 is refused)
``[compile] enable``                     off: engine ``fsdp-eager`` (norms, SwiGLU, RoPE op by
``components``, ``backend``              op); on, with ``model`` among the components and the
                                         Inductor backend: ``fsdp``
=======================================  ======================================================
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .. import models
from ..engine import preset, with_moe_dispatch
from ._fields import Keys, flatten, load_toml, parse_overrides
from .config import RunConfig

__all__ = ["read_torchtitan", "FLAVORS"]

#: torchtitan's ``[model] name, flavor`` -> cosearch preset (torchtitan/models/llama3/__init__.py:
#: the 8B, 70B and 405B flavors are Llama 3.1's published dimensions, vocab 128256;
#: models/qwen3/__init__.py: 30B-A3B and 235B-A22B, Qwen3-MoE's config.json sizes with its per-head
#: q/k RMSNorms; models/deepseek_v3: 671B, DeepSeek-V3's).  Llama 4's 17bx128e is not mapped: torchtitan
#: builds it with an MoE in every layer (interleave_moe_layer_step 1), unlike Maverick's every other.
FLAVORS = {("llama3", "8B"): "llama3-8b", ("llama3", "70B"): "llama3-70b", ("llama3", "405B"): "llama3-405b",
           ("qwen3", "30B-A3B"): "qwen3-30b-a3b", ("qwen3", "235B-A22B"): "qwen3-235b-a22b",
           ("deepseek_v3", "671B"): "deepseek-v3"}

#: Sections that change neither step time nor memory in cosearch's model.
NEUTRAL_SECTIONS = ("job", "profiling", "metrics", "optimizer", "lr_scheduler", "checkpoint", "validation", "comm",
                    "memory_estimation", "fault_tolerance", "experimental", "debug", "ft")
NEUTRAL_KEYS = frozenset({
    "model.hf_assets_path", "model.tokenizer_path", "model.print_after_conversion",
    "training.steps", "training.max_norm", "training.dataset", "training.dataset_path", "training.warmup_steps",
    "training.gc_freq", "training.seed", "training.deterministic", "training.enable_cpu_offload",
    "parallelism.disable_loss_parallel", "parallelism.enable_compiled_autograd",
    "parallelism.pipeline_parallel_split_points", "parallelism.context_parallel_rotate_method",
    "parallelism.module_fqns_per_model_part",
    "activation_checkpoint.per_op_sac_force_recompute_mm_shapes_by_fqns", "activation_checkpoint.preserve_rng_state",
    "float8.filter_fqns", "float8.precompute_float8_dynamic_scale_for_fsdp", "float8.force_recompute_fp8_weight_in_bwd",
    "float8.moe_fqns_prototype",
    "mx.mxfp8_dim1_cast_kernel_choice", "mx.filter_fqns",
    "quantize.linear.fp8.filter_fqns", "quantize.linear.fp8.precompute_float8_dynamic_scale_for_fsdp",
    "quantize.linear.mx.filter_fqns", "quantize.linear.mx.mxfp8_dim1_cast_kernel_choice",
    # the same switches under the section name torchtitan's converter carries ([quantize.linear.float8])
    "quantize.linear.float8.filter_fqns", "quantize.linear.float8.precompute_float8_dynamic_scale_for_fsdp",
})


def read_torchtitan(source: str | Path | dict[str, Any], overrides: list[str] | tuple[str, ...] = ()) -> RunConfig:
    """A torchtitan TOML (a path, or its parsed table) with optional ``section.key=value``
    overrides (torchtitan's ``--section.key value`` command-line form, written with ``=``)."""
    name = f"torchtitan TOML {source}" if not isinstance(source, dict) else "torchtitan config"
    table = load_toml(source) if not isinstance(source, dict) else source
    flat = flatten(table)
    flat.update(parse_overrides(overrides, name))
    k = Keys(name, flat)
    assumed: list[str] = []
    # the model
    seq = k.positive("training.seq_len", 2048)
    mname, flavor = str(k.get("model.name", "llama3")), str(k.get("model.flavor", "debugmodel"))
    model = None
    if (mname, flavor) in FLAVORS:
        model = models.preset(FLAVORS[mname, flavor]).with_(seq_len=seq)
    else:
        assumed.append(f"model {mname} flavor {flavor}: no cosearch preset; its config.json must describe the model")
    converters = k.names("model.converters", [])
    unknown_conv = [c for c in converters if c not in ("float8", "mx", "quantize.linear.float8", "quantize.linear.mx")]
    if unknown_conv:
        raise ValueError(f"{name}: model.converters {unknown_conv} are not modelled (float8 and mx are)")
    precision = "fp8" if converters else "bf16"
    if any("mx" in c for c in converters):
        assumed.append("mx converter: MXFP8 priced as per-tensor FP8 operands")
    if converters:
        assumed.append("FP8 on every layer GEMM (the output head stays bf16, torchtitan's filter_fqns default)")
    for sec in ("float8", "quantize.linear.float8", "quantize.linear.fp8", "mx", "quantize.linear.mx"):
        if f"{sec}.emulate" in k and k.bool(f"{sec}.emulate", False) and converters:
            # torchao's emulation runs the low-precision GEMMs in high precision (for hardware without
            # FP8): not the FP8 tensor cores cosearch would price
            raise ValueError(f"{name}: {sec}.emulate = true emulates FP8 in high precision, which is not "
                             "modelled (drop the converter to price the run in bf16)")
        recipe = k.get(f"{sec}.recipe_name")
        if recipe is not None and converters and str(recipe) not in ("tensorwise", "mxfp8", "mxfp8_cublas"):
            assumed.append(f"{sec}.recipe_name {recipe!r}: priced with per-tensor FP8 scaling (the recipe's own "
                           "scales and GEMM are not modelled)")
    for key in ("float8.enable_fsdp_float8_all_gather", "quantize.linear.fp8.enable_fsdp_float8_all_gather",
                "quantize.linear.float8.enable_fsdp_float8_all_gather"):
        if k.bool(key, False):
            assumed.append(f"{key}: the FSDP weight all-gathers priced in bf16 (FP8 all-gather not modelled)")
    pparam = str(k.get("training.mixed_precision_param", "bfloat16"))
    if pparam != "bfloat16":
        raise ValueError(f"{name}: training.mixed_precision_param = {pparam!r} is not modelled (bfloat16 is)")
    preduce = str(k.get("training.mixed_precision_reduce", "float32"))
    if preduce != "float32":
        raise ValueError(f"{name}: training.mixed_precision_reduce = {preduce!r} is not modelled (FSDP2 reduces "
                         "gradients in float32, as engine fsdp prices)")
    # the plan
    rep = k.positive("parallelism.data_parallel_replicate_degree", 1)
    shard = k.int("parallelism.data_parallel_shard_degree", -1)
    tp = k.positive("parallelism.tensor_parallel_degree", 1)
    pp = k.positive("parallelism.pipeline_parallel_degree", 1)
    cp = k.positive("parallelism.context_parallel_degree", 1)
    ep = k.positive("parallelism.expert_parallel_degree", 1)
    etp = k.positive("parallelism.expert_tensor_parallel_degree", 1)
    if etp not in (1, tp):
        raise ValueError(f"{name}: expert_tensor_parallel_degree {etp}: torchtitan runs 1 (EP borrows all of TP) "
                         f"or tensor_parallel_degree ({tp})")
    comm = str(k.get("parallelism.expert_parallel_comm_backend", "standard"))
    if comm not in ("standard", "deepep"):
        raise ValueError(f"{name}: expert_parallel_comm_backend {comm!r}: torchtitan accepts standard or deepep")
    if shard is None or (shard < 1 and shard != -1):
        raise ValueError(f"{name}: data_parallel_shard_degree must be -1 or a positive integer, got {shard}")
    plan: dict[str, Any] = dict(tp=tp, pp=pp, context_parallel=cp, expert_parallel=ep, sequence_parallel=tp > 1,
                                flash_attention=True, precision=precision)
    if tp > 1:
        assumed.append("tensor parallelism with sequence parallelism (torchtitan's TP plan shards the norms over the "
                       "sequence)")
    if ep > 1 and tp > 1 and etp == 1:
        # torchtitan's expert_tensor_parallel_degree 1: "[partial dp + all tp -> ep]", each tp rank an
        # expert-parallel rank on its own share of the tokens
        plan["expert_tensor_parallel"] = 1
        assumed.append("expert_tensor_parallel_degree 1 under tp > 1: expert parallelism borrows all of TP "
                       "(each tp rank an expert-parallel rank, whole experts)")
    reshard = str(k.get("parallelism.fsdp_reshard_after_forward", "default"))
    if reshard not in ("default", "always", "never"):
        raise ValueError(f"{name}: fsdp_reshard_after_forward {reshard!r}: torchtitan accepts default, always, never")
    sharded = shard == -1 or shard > 1
    if sharded:
        plan["zero"] = 2 if reshard == "never" else 3
        if reshard == "never":
            assumed.append("fsdp_reshard_after_forward = never: weights gathered once and kept (ZeRO-2 memory)")
        if rep > 1:
            if shard == -1:
                raise ValueError(f"{name}: HSDP (replicate {rep}) needs an explicit data_parallel_shard_degree")
            plan["zero_group"] = shard
    else:
        plan["zero"] = 0
    dp = rep * shard if shard != -1 else None
    if dp is None:
        assumed.append("data_parallel_shard_degree -1: dp is what the chips leave, chips / (tp pp cp)")
    if mname == "deepseek_v3":
        # models/deepseek_v3: inner_attention=FlexAttention.Config(), mask_type "block_causal"
        assumed.append("torchtitan runs DeepSeek-V3's attention with FlexAttention (block-causal mask): priced as "
                       "the flash kernel, which no public FlexAttention measurement at MLA's head widths corrects")
    else:
        assumed.append("flash attention (torchtitan runs scaled_dot_product_attention's flash kernel)")
    # recompute
    mode = str(k.get("activation_checkpoint.mode", "selective"))
    option = str(k.get("activation_checkpoint.selective_ac_option", "2"))
    if mode == "none":
        plan["recompute"] = "none"
    elif mode == "full":
        plan["recompute"] = "full"
    elif mode == "selective":
        if option == "op":
            plan["recompute"] = "selective"
            assumed.append("selective_ac_option op: priced as Megatron's selective recompute (attention core)")
        elif option.isdigit() and int(option) == 1:
            plan["recompute"] = "full"
        else:
            raise ValueError(f"{name}: activation_checkpoint selective_ac_option {option!r} recomputes every "
                             f"{option}th layer; recompute of part of the layers is not modelled (torchtitan's "
                             "default is '2': set mode and the option explicitly)")
    else:
        raise ValueError(f"{name}: activation_checkpoint.mode {mode!r}: torchtitan accepts none, selective, full")
    # batch and pipeline
    local = k.positive("training.local_batch_size", k.int("training.batch_size", 8))
    gbs = k.int("training.global_batch_size", -1)
    if pp > 1:
        plan["microbatch"] = k.positive("parallelism.pipeline_parallel_microbatch_size", 1)
        schedule = str(k.get("parallelism.pipeline_parallel_schedule", "1F1B"))
        per_stage = k.int("parallelism.pipeline_parallel_layers_per_stage")
        if schedule in ("Interleaved1F1B", "InterleavedZeroBubble", "LoopedBFS"):
            if model is None or per_stage is None:
                raise ValueError(f"{name}: schedule {schedule} needs pipeline_parallel_layers_per_stage (and a model) "
                                 "to count the virtual stages")
            if model.num_layers % (pp * per_stage):
                raise ValueError(f"{name}: {model.num_layers} layers are not pp x layers_per_stage = {pp} x {per_stage}"
                                 " per model chunk")
            plan["virtual_stages"] = model.num_layers // (pp * per_stage)
            if schedule != "Interleaved1F1B":
                assumed.append(f"schedule {schedule} priced as Interleaved1F1B")
        elif schedule not in ("1F1B", "GPipe"):
            raise ValueError(f"{name}: pipeline schedule {schedule!r} is not modelled (1F1B, GPipe, Interleaved1F1B)")
        elif schedule == "GPipe":
            assumed.append("GPipe schedule priced as 1F1B (same bubble; GPipe keeps every microbatch's activations)")
    else:
        k.get("parallelism.pipeline_parallel_microbatch_size")
        k.get("parallelism.pipeline_parallel_schedule")
        k.get("parallelism.pipeline_parallel_layers_per_stage")
        plan["microbatch"] = local      # one forward/backward per local batch; more with global_batch_size
    compiled = k.bool("compile.enable", False)
    if "compile.components" in k:
        parts = k.names("compile.components")
        unknown = [c for c in parts if c not in ("model", "loss")]
        if unknown:
            raise ValueError(f"{name}: compile.components {unknown} are not torchtitan's (model, loss)")
        if compiled and "model" not in parts:
            # torchtitan compiles only the listed parts: the model's layers run eager
            compiled = False
            assumed.append("compile.components without model: the layers priced eager (engine fsdp-eager)")
    backend = k.get("compile.backend")
    if compiled and backend is not None and str(backend) != "inductor":
        # another backend (aot_eager, eager, ...) fuses nothing: the layers run as eager kernels
        compiled = False
        assumed.append(f"compile.backend {backend!r}: no Inductor fusion, the layers priced eager")
    if k.bool("parallelism.enable_async_tensor_parallel", False):
        assumed.append("async TP priced with the TP collectives exposed: cosearch does not price partial "
                       "micro-pipelined overlap yet")
    engine = preset("fsdp" if compiled else "fsdp-eager")
    if comm == "deepep" and ep > 1:
        # DeepEP's kernels instead of PyTorch's all-to-alls (torchtitan's DeepEPExpertParallel)
        engine = with_moe_dispatch(engine, "flex", backend="deepep")
        assumed.append("expert_parallel_comm_backend deepep: the flex dispatcher with DeepEP's kernels")
    neutral = k.finish(NEUTRAL_SECTIONS, NEUTRAL_KEYS)
    return RunConfig(name, model=model, plan=plan, dp=dp,
                     global_batch=None if gbs in (None, -1) else gbs,
                     batch_per_replica=local if gbs in (None, -1) else None, engine=engine,
                     seq_len=seq, assumed=tuple(assumed), neutral=neutral)
