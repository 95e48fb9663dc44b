"""A torchtitan run, read from its ``train.toml``, its saved config or a live ``Trainer.Config``.

Three forms of torchtitan's config are read, all through the same fields:

* ``train.toml`` (torchtitan until its Python config registries, #2386), with ``section.key=value``
  overrides (its ``--section.key value`` command line);
* the **saved config** of torchtitan 0.3.0 and later: a JSON of ``Trainer.Config.to_dict()``,
  which ``--debug.save_config_file NAME`` writes to the dump folder (and ``--debug.print_config``
  logs), turned into the TOML's table by :mod:`cosearch.runs.torchtitan_saved`: its sections keep
  the TOML's names; the model is its ``model_spec`` name and flavor, its tree checked against the
  preset, or, for a dense Llama 3 / Qwen 3 flavor without one, read from the tree; the attention
  kernel is the tree's;
  the activation-checkpointing policy is known by its fields; the MoE token dispatcher by its
  config's fields.  The saved form drops the model's Linear converters (Float8 / MXFP8 keep them in
  private fields), so a saved config needs the override ``model.converters=float8``, ``mx`` or
  ``none``;
* a live ``Trainer.Config`` (what a config registry function such as
  ``torchtitan.models.llama3.config_registry.llama3_8b()`` returns), read as its saved form plus
  the converters found on its layers' config classes.

Defaults are torchtitan's own (``torchtitan/config/job_config.py``, 0.3.0
``torchtitan/config/configs.py``): ``local_batch_size`` 8,
``seq_len`` 2048, every parallel degree 1 except ``data_parallel_shard_degree`` -1 (what the
chips leave), activation checkpointing ``selective`` with ``selective_ac_option = "2"``,
``compile.enable = false``, ``mixed_precision_param = "bfloat16"``, ``mixed_precision_reduce =
"float32"``.

The pipeline stages are split as torchtitan splits them (:func:`pipeline_stage_layers`, since
#1416 of July 2025): the embedding and the output count as ``pipeline_parallel_first_stage_less_layers``
and ``..._last_stage_less_layers`` layers (1 each by default), so Llama 3 8B on four ranks holds
8, 9, 8 and 7 layers, not 8 each (read as an even split until stop 71), or as
``module_fqns_per_model_part`` gives them.

=======================================  ======================================================
``[model] name, flavor``                 :data:`FLAVORS` are cosearch presets; other models need
                                         their ``config.json`` as well
``[model] converters``                   ``float8`` / ``mx``: FP8 layer GEMMs (``emulate`` refused;
                                         a ``recipe_name`` other than tensorwise said; a
                                         ``filter_fqns`` keeping layer GEMMs in bf16 refused, the
                                         output head, router gate and ``auto_filter_small_kn`` read;
                                         on an MoE model the grouped experts stay bf16, engine
                                         ``expert_precision`` bf16, unless ``moe_fqns_prototype``
                                         names them or 0.3's grouped-experts converters (their
                                         padded dispatcher) take them; those alone refused)
``[training] enable_cpu_offload``        true refused (FSDP's states in host memory)
``[optimizer] name``, ``implementation``, Adam / AdamW (two fp32 moments); 0.3's
``param_groups``                         ``fused_opt_states_bf16`` (bf16 moments); DistMuon or
                                         another optimizer refused
``[parallelism] disable_loss_parallel``  true under tp > 1 refused (the logits gathered)
``[training] local_batch_size``          sequences per data-parallel replica per step
``[training] global_batch_size``         the global batch (-1: local x dp)
``[training] seq_len``                   the sequence (must agree with the model)
``[parallelism] data_parallel_*``        dp = replicate x shard; shard > 1 shards weights,
                                         gradients and optimizer (FSDP2, ZeRO-3) over the shard
                                         group (HSDP when replicate > 1)
``[parallelism] tensor_parallel_degree`` tp, with sequence parallelism (torchtitan's TP plan
                                         shards the norms' activations over the sequence) unless
                                         ``enable_sequence_parallel`` is false
``pipeline_parallel_degree``,            pp; microbatch; schedules 1F1B / GPipe /
``pipeline_parallel_microbatch_size``,   Interleaved1F1B / LoopedBFS / InterleavedZeroBubble
``pipeline_parallel_schedule``,          (the last two priced as Interleaved1F1B); the stages'
``pipeline_parallel_layers_per_stage``,  layers as torchtitan splits them (above); ZBV and
``..._first/last_stage_less_layers``,    DualPipeV, and a schedule from a CSV, refused;
``module_fqns_per_model_part``           ``pipeline_parallel_split_points`` (before #1416) refused
``context_parallel_degree``              cp (``context_parallel_load_balancer`` null, which leaves
                                         the causal work unbalanced, refused)
``expert_parallel_degree``               ep
``expert_tensor_parallel_degree``        1 (torchtitan's default: under tp > 1 expert parallelism
                                         borrows all of TP, cosearch's etp 1) or tp (etp = tp)
``expert_parallel_comm_backend``         standard (PyTorch's all-to-alls, tokens gathered over tp
                                         before routing), deepep (the flex dispatcher, DeepEP) or
                                         hybridep (the flex dispatcher, HybridEP, 16 SMs; a saved
                                         config's non-blocking capacity factor under 1 refused);
                                         torchao's padded one as standard (its padding said);
                                         minimal_async_ep refused under ep > 1
``[activation_checkpoint] mode``         none / full / selective (``op``: Megatron's selective
                                         reading; an integer N other than 1 is refused)
``[compile] enable``                     off: engine ``fsdp-eager`` (norms, SwiGLU, RoPE op by
``components``, ``backend``              op); on, with ``model`` among the components and the
                                         Inductor backend: ``fsdp``
``[training] dtype``                     float32 (mixed precision); bfloat16 (no fp32 copies)
                                         refused
``[debug]``                              ``detect_anomaly`` / ``batch_invariant`` on refused;
                                         ``moe_force_load_balance`` said (cosearch prices balanced
                                         routing); the rest neutral
=======================================  ======================================================
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from .. import models
from ..engine import preset, with_moe_dispatch
from ..memory import MemoryConfig
from ._fields import Keys, flatten, load_toml, parse_overrides
from .config import RunConfig
from .torchtitan_saved import (
    ATTENTION_SAID,
    SAVED_NEUTRAL_SECTIONS,
    check_saved_model,
    dense_model_from_tree,
    fused_qkv,
    live_config_table,
    load_json,
    saved_attention,
    saved_config_table,
)

__all__ = ["read_torchtitan", "FLAVORS", "pipeline_stage_layers", "stage_layers_of_parts", "fsdp_zero_stage"]

#: torchtitan's ``[model] name, flavor`` -> cosearch preset (torchtitan/models/llama3/__init__.py:
#: the 8B, 70B and 405B flavors are Llama 3.1's published dimensions, vocab 128256;
#: models/qwen3/__init__.py: 30B-A3B and 235B-A22B, Qwen3-MoE's config.json sizes with its per-head
#: q/k RMSNorms; models/deepseek_v3: 671B, DeepSeek-V3's, and 16B / 236B, DeepSeek-V2-Lite's and
#: DeepSeek-V2's config.json sizes; models/gpt_oss: 20b and 120b, OpenAI's
#: config.json sizes, every even layer a 128-token sliding window, biased and clamped experts).
#: Llama 4's 17bx128e is not mapped: torchtitan builds it with an MoE in every layer
#: (interleave_moe_layer_step 1), unlike Maverick's every other.
FLAVORS = {("llama3", "8B"): "llama3-8b", ("llama3", "70B"): "llama3-70b", ("llama3", "405B"): "llama3-405b",
           ("qwen3", "30B-A3B"): "qwen3-30b-a3b", ("qwen3", "235B-A22B"): "qwen3-235b-a22b",
           ("deepseek_v3", "671B"): "deepseek-v3", ("deepseek_v3", "16B"): "deepseek-v2-lite",
           ("deepseek_v3", "236B"): "deepseek-v2", ("gpt_oss", "20b"): "gpt-oss-20b",
           ("gpt_oss", "120b"): "gpt-oss-120b"}

#: Sections that change neither step time nor memory in cosearch's model.
NEUTRAL_SECTIONS = ("job", "profiling", "metrics", "optimizer", "lr_scheduler", "checkpoint", "validation", "comm",
                    "memory_estimation", "fault_tolerance", "experimental", "debug", "ft")
NEUTRAL_KEYS = frozenset({
    "model.hf_assets_path", "model.tokenizer_path", "model.print_after_conversion",
    "training.steps", "training.max_norm", "training.dataset", "training.dataset_path", "training.warmup_steps",
    "training.gc_freq", "training.seed",
    "parallelism.enable_compiled_autograd",
    "parallelism.context_parallel_rotate_method", "parallelism.spmd_backend", "parallelism.context_parallel_ptrr_mask_key",
    "training.disable_cuda_graphs", "training.gc_debug",
    "activation_checkpoint.determinism_check", "activation_checkpoint.debug",
    "activation_checkpoint.per_op_sac_force_recompute_mm_shapes_by_fqns", "activation_checkpoint.preserve_rng_state",
    "float8.precompute_float8_dynamic_scale_for_fsdp", "float8.force_recompute_fp8_weight_in_bwd",
    "mx.mxfp8_dim1_cast_kernel_choice",
    "quantize.linear.fp8.precompute_float8_dynamic_scale_for_fsdp",
    "quantize.linear.mx.mxfp8_dim1_cast_kernel_choice",
    # the same switches under the section name torchtitan's converter carries ([quantize.linear.float8])
    "quantize.linear.float8.precompute_float8_dynamic_scale_for_fsdp",
})

#: The converters' sections (``[float8]``, ``[mx]``, ``[quantize.linear.*]``).
_CONVERTER_SECTIONS = ("float8", "quantize.linear.float8", "quantize.linear.fp8", "mx", "quantize.linear.mx")
#: ``filter_fqns`` entries that keep only what cosearch keeps in bf16 anyway: the output head
#: (``output`` in the TOML-era Llama, ``lm_head`` in 0.3), the MoE router's gate, and torchao's
#: filter of GEMMs too small to gain from FP8 (``auto_filter_small_kn``, said).
_BF16_ANYWAY = ("output", "lm_head", "router.gate", "gate", "auto_filter_small_kn")


#: torchtitan's pipeline schedules (``torch.distributed.pipelining``'s ``get_schedule_class``
#: names, matched without case): one model chunk a rank, or several looped over the ranks (rank r
#: holds stages r, r + pp, ...; ``stage_ids_this_rank``'s "loop" style).  The "v" schedules
#: (ZBVZeroBubble, DualPipeV) are not modelled.
_SINGLE_STAGE = ("1f1b", "gpipe")
_LOOPED = ("interleaved1f1b", "loopedbfs", "interleavedzerobubble")
#: torchtitan's 2024 ``[experimental]`` parallelism switches (config_manager.py at 9dec370), later
#: under ``[parallelism]``; the section's other fields (the schedule, split points, microbatches)
#: act only with pipeline stages, which the degree here switches on.
_EXPERIMENTAL_MOVED = ("experimental.pipeline_parallel_degree", "experimental.context_parallel_degree",
                       "experimental.enable_async_tensor_parallel")


def _off(value: Any) -> bool:
    """A 2024 ``[experimental]`` switch that changes nothing: unset, false or a degree of 1 (True
    is not 1 here)."""
    if value is None or value is False:
        return True
    return isinstance(value, int) and not isinstance(value, bool) and value == 1


#: The token-counted training fields of torchtitan after 0.3.0 (main's ``TrainingConfig``).
_TOKEN_COUNTED = ("training.num_tokens_per_microbatch_per_dp_rank", "training.num_tokens_per_train_step",
                  "training.max_context_length")
#: torchtitan's token dispatchers cosearch does not model (``make_token_dispatcher_config``).
_OTHER_BACKENDS = ("minimal_async_ep",)
#: The SMs torchtitan's HybridEP buffer gives its dispatch and its combine kernels
#: (``distributed/deepep/hybridep.py``: ``_NUM_SMS_DISPATCH = _NUM_SMS_COMBINE = 16``, passed as
#: ``num_sms_dispatch_api`` / ``num_sms_combine_api`` to ``HybridEPBuffer``).
HYBRIDEP_SMS = 16


def fsdp_zero_stage(reshard_after_forward: str, pp: int) -> int:
    """The ZeRO stage cosearch prices a torchtitan FSDP run at: its ``fsdp_reshard_after_forward``
    policy ("default" reshards after forward unless pipeline parallelism is on: ``not pp_enabled``,
    ``distributed/fsdp.py``, and ``parallelize_llama.py`` at 9dec370, 2024: "For PP, do not reshard
    after forward to avoid per-microbatch all-gathers"), and under pipeline parallelism torch's
    ``PipelineStage`` keeps FSDP from resharding and reducing until the last microbatch's
    backward (``set_reshard_after_backward`` / ``set_requires_gradient_sync``): weights gathered once
    and kept, gradients reduce-scattered once, ZeRO 2.  ``"never"`` is ZeRO 2 as well; ``"always"``
    (and ``"default"`` without stages) ZeRO 3, the weights gathered per layer and microbatch."""
    if reshard_after_forward not in ("default", "always", "never"):
        raise ValueError(f"fsdp_reshard_after_forward {reshard_after_forward!r}: torchtitan accepts default, "
                         "always, never")
    return 2 if reshard_after_forward == "never" or (reshard_after_forward == "default" and pp > 1) else 3


def _grouped_experts_converted(k: Keys, comm: str) -> bool:
    """Whether the routed experts' grouped GEMMs run in low precision: a live config's
    grouped-experts converters (``Float8GroupedExperts`` / ``MXFP8GroupedExperts`` config classes,
    ``model.grouped_converters``), a 2025 TOML's ``float8.moe_fqns_prototype`` (its Float8
    converter took the grouped GEMMs where that named them), or in a saved 0.3 config the padding
    token dispatcher those converters swap in (torchao's, or HybridEP with ``pad_multiple``)."""
    named = bool(k.names("model.grouped_converters", [])) or bool(k.names("float8.moe_fqns_prototype", []))
    return named or comm == "torchao" or (comm == "hybridep" and k.get("hybridep.pad_multiple") is not None)


def _hybridep_reading(k: Keys, name: str) -> str:
    """What torchtitan's HybridEP token dispatcher (``HybridEPTokenDispatcher``, torchtitan 0.3.0)
    runs, from the fields a saved config's dispatchers carry (``hybridep.*``): blocking (no
    ``non_blocking_capacity_factor``: it synchronizes the stream after each dispatch and sizes the
    permuted tokens on the host, no token dropped) or non-blocking at a capacity factor of 1 (sized
    for the worst case, no token dropped); under 1 its fused permute drops the tokens past the
    capacity ("silently dropped"), which is refused.  ``pad_multiple`` pads each expert's tokens."""
    cf = k.get("hybridep.non_blocking_capacity_factor")
    pad = k.get("hybridep.pad_multiple")
    for key, v in (("pad_multiple", pad), ("num_max_tokens_per_rank", k.get("hybridep.num_max_tokens_per_rank"))):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise ValueError(f"{name}: HybridEP {key} must be a positive number of tokens or null, got {v!r}")
    said = (f"expert_parallel_comm_backend hybridep: the flex dispatcher with HybridEP's kernels on {HYBRIDEP_SMS} "
            "SMs for dispatch and for combine (torchtitan's HybridEP buffer)")
    if cf is None:
        said += ("; blocking (it synchronizes the stream after each dispatch to size the permuted tokens on the "
                 "host, a wait not priced)")
    else:
        if isinstance(cf, bool) or not isinstance(cf, (int, float)) or not 0.0 < float(cf) <= 1.0:
            raise ValueError(f"{name}: HybridEP non_blocking_capacity_factor {cf!r} must be in (0, 1]")
        if float(cf) < 1.0:
            raise ValueError(f"{name}: HybridEP non_blocking_capacity_factor {cf}: its fused permute drops the "
                             "tokens past that capacity, which is not modelled (1.0 or none, blocking, drops none)")
        said += "; non-blocking at capacity factor 1.0 (sized for the worst case: no token dropped)"
    if pad is not None:
        said += f"; each expert's tokens padded to a multiple of {pad} (not priced)"
    return said


def _schedule_key(schedule: str) -> str:
    return str(schedule).lower()


def _check_schedule(schedule: str, source: str) -> bool:
    """True for a single-stage schedule, False for a looped one; any other is refused."""
    key = _schedule_key(schedule)
    if key in _SINGLE_STAGE:
        return True
    if key in _LOOPED:
        return False
    raise ValueError(f"{source}: pipeline schedule {schedule!r} is not modelled (1F1B, GPipe, Interleaved1F1B, "
                     "LoopedBFS, InterleavedZeroBubble)")


def _rank_layers(per_stage: list[int], pp: int, source: str) -> tuple[int, tuple[int, ...]]:
    """(model chunks a rank, transformer layers a rank) of virtual stages looped over ``pp`` ranks."""
    if len(per_stage) % pp:
        raise ValueError(f"{source}: {len(per_stage)} pipeline stages do not divide over {pp} ranks")
    vs = len(per_stage) // pp
    layers = tuple(sum(per_stage[r + i * pp] for i in range(vs)) for r in range(pp))
    if min(layers) < 1:
        raise ValueError(f"{source}: the pipeline split {per_stage} leaves a rank without transformer layers, which "
                         "is not modelled")
    return vs, layers


def pipeline_stage_layers(num_layers: int, pp: int, schedule: str = "1F1B", layers_per_stage: int | None = None,
                          first_stage_less_layers: int = 1, last_stage_less_layers: int = 1,
                          source: str = "torchtitan") -> tuple[int, tuple[int, ...]]:
    """(model chunks a rank, transformer layers each of the ``pp`` ranks holds) as torchtitan
    splits a decoder over its pipeline (torchtitan 0.3.0 ``distributed/pipeline_parallel.py``,
    ``_get_pipeline_metadata`` and ``_generate_llm_fqn_per_model_part``, the split since #1416 of
    July 2025): the embedding counts as ``first_stage_less_layers`` layers and the output as
    ``last_stage_less_layers``; the ``num_layers`` plus those are dealt over the stages as evenly
    as they go, the first ``remainder`` stages one more; the number of stages is
    ``ceil(effective layers / layers_per_stage)`` where that is given, else one a rank for a
    single-stage schedule and two for a looped one.  Looped schedules give rank r the stages
    r, r + pp, ....  Refused as torchtitan refuses (stages that do not divide over the ranks, a
    single-stage schedule with more than one a rank, a looped one with fewer than two, a weight
    above the layers a stage gets)."""
    from .._validate import positive_int
    L = positive_int(f"{source}: the model's layers", num_layers)
    pp = positive_int(f"{source}: pipeline_parallel_degree", pp)
    single = _check_schedule(schedule, source)
    iw, ow = (int(x) for x in (first_stage_less_layers, last_stage_less_layers))
    if iw < 0 or ow < 0:
        raise ValueError(f"{source}: pipeline_parallel_first/last_stage_less_layers must be >= 0, got {iw}, {ow}")
    if layers_per_stage is not None:
        per = positive_int(f"{source}: pipeline_parallel_layers_per_stage", layers_per_stage)
        stages = -(-(L + iw + ow) // per)
        if stages % pp:
            raise ValueError(f"{source}: {L} layers (+{iw} +{ow} for the embedding and output) at {per} a stage make "
                             f"{stages} stages, not a multiple of pipeline_parallel_degree {pp} (torchtitan refuses it)")
        if single and stages != pp:
            raise ValueError(f"{source}: schedule {schedule} runs one stage a rank, and {stages} stages over {pp} "
                             "ranks are more (torchtitan refuses it)")
        if not single and stages < 2 * pp:
            raise ValueError(f"{source}: schedule {schedule} needs at least two stages a rank, and {stages} stages "
                             f"over {pp} ranks are fewer (torchtitan refuses it)")
    else:
        stages = pp * (1 if single else 2)
    effective = L + iw + ow
    if stages == 1:
        return 1, (L,)
    base, extra = divmod(effective, stages)
    if base == 0 or iw > base or ow > base:
        raise ValueError(f"{source}: {stages} pipeline stages over {L} layers (+{iw} +{ow}) leave a stage "
                         "without layers, or a weight above a stage's layers (torchtitan refuses it)")
    # each stage's share less the embedding's / output's weight (torchtitan stops at the last layer,
    # which these shares, summing to the layers, reach exactly)
    per_stage = [base + (1 if s < extra else 0) - (iw if s == 0 else ow if s == stages - 1 else 0)
                 for s in range(stages)]
    return _rank_layers(per_stage, pp, source)


def stage_layers_of_parts(parts: Any, pp: int, schedule: str, num_layers: int | None,
                          source: str = "torchtitan") -> tuple[int, tuple[int, ...]]:
    """(model chunks a rank, transformer layers a rank) from torchtitan's
    ``module_fqns_per_model_part`` (a list of model chunks, each a list of module names; its
    ``layers.N`` entries are the transformer layers), looped over the ranks as the schedule runs
    them; every layer must appear once (the model's ``num_layers``, where known)."""
    single = _check_schedule(schedule, source)
    if not isinstance(parts, (list, tuple)) or not parts or not all(isinstance(p, (list, tuple)) for p in parts):
        raise ValueError(f"{source}: module_fqns_per_model_part must be a list of lists of module names, got "
                         f"{parts!r}")
    seen: list[int] = []
    per_stage = []
    for part in parts:
        ids = []
        for fqn in part:
            head, _, rest = str(fqn).partition(".")
            if head == "layers":
                if not rest.isdigit():
                    raise ValueError(f"{source}: module_fqns_per_model_part names {fqn!r}, not a layer 'layers.N'")
                ids.append(int(rest))
        seen.extend(ids)
        per_stage.append(len(ids))
    if len(set(seen)) != len(seen) or sorted(seen) != list(range(len(seen))) or (
            num_layers is not None and len(seen) != num_layers):
        raise ValueError(f"{source}: module_fqns_per_model_part must name every transformer layer once, from layers.0 "
                         f"in order ({len(seen)} named" + (f", the model has {num_layers})" if num_layers else ")"))
    if single and len(parts) != pp:
        raise ValueError(f"{source}: schedule {schedule} runs one model chunk a rank; module_fqns_per_model_part "
                         f"gives {len(parts)} for {pp} ranks")
    if not single and len(parts) < 2 * pp:
        raise ValueError(f"{source}: schedule {schedule} needs at least two model chunks a rank; "
                         f"module_fqns_per_model_part gives {len(parts)} for {pp} ranks")
    return _rank_layers(per_stage, pp, source)


def read_torchtitan(source: str | Path | dict[str, Any] | Any,
                    overrides: list[str] | tuple[str, ...] = ()) -> RunConfig:
    """A torchtitan run with optional ``section.key=value`` overrides (torchtitan's
    ``--section.key value`` command-line form, written with ``=``).  ``source``: a ``train.toml``
    (a path, or its parsed table), a saved config (a ``.json`` path, or its parsed dict: it has
    ``model_spec``; give ``model.converters=float8 / mx / none`` among the overrides, which the
    saved form does not record), or a live ``Trainer.Config`` (any object with ``to_dict()`` and
    ``model_spec``)."""
    assumed: list[str] = []
    saved = False
    tree = None                 # a saved config's model tree, checked against the preset
    if hasattr(source, "to_dict") and hasattr(source, "model_spec"):
        name = "torchtitan Trainer.Config"
        table, tree = live_config_table(source, name)
    else:
        if isinstance(source, (str, Path)) and str(source).lower().endswith(".json"):
            name, table, saved = f"torchtitan saved config {source}", load_json(source), True
        elif isinstance(source, dict):
            saved = "model_spec" in source
            name, table = ("torchtitan saved config" if saved else "torchtitan config"), source
        else:
            name, table = f"torchtitan TOML {source}", load_toml(source)
        if saved:
            d = table
            table = saved_config_table(d, name)          # refuses a dict without model_spec's name, flavor
            tree = d["model_spec"].get("model")
    flat = flatten(table)
    given = parse_overrides(overrides, name)
    if saved and "model.converters" not in given:
        raise ValueError(f"{name}: torchtitan's saved config does not record the model's Linear converters (the "
                         "Float8 / MXFP8 layer configs keep them in fields to_dict leaves out), so FP8 and bf16 runs "
                         "save the same file; say which with the override model.converters=float8, mx or none")
    if saved and str(given.get("model.converters")).lower() in ("none", "[]", ""):
        given["model.converters"] = []
    flat.update(given)
    newer = sorted(key for key in flat if key in _TOKEN_COUNTED)
    if newer:
        # torchtitan after 0.3.0 (its main branch) counts a step in tokens (configs.py
        # TrainingConfig: num_tokens_per_microbatch_per_dp_rank, num_tokens_per_train_step,
        # max_context_length) where 0.3.0 and the TOML era count sequences
        raise ValueError(f"{name}: {', '.join(newer)} count the step in tokens, torchtitan's layout after 0.3.0, "
                         "which cosearch does not read yet; it reads 0.3.0's saved config and the train.toml era "
                         "(local_batch_size, seq_len)")
    k = Keys(name, flat)
    moved = sorted(f"{key}={flat[key]!r}" for key in _EXPERIMENTAL_MOVED
                   if key in flat and not _off(flat[key]))
    if moved:
        # torchtitan of 2024 (config_manager.py at 9dec370) kept pipeline and context parallelism
        # and async TP under [experimental], where this reader's neutral section would drop them;
        # its stage split then was generate_split_points', not #1416's
        raise ValueError(f"{name}: {', '.join(moved)}: torchtitan's layout before 2025 kept these under "
                         "[experimental]; cosearch reads the later [parallelism] layout (its pipeline split is "
                         "#1416's): move them there")
    # the model
    seq = k.positive("training.seq_len", 2048)
    mname, flavor = str(k.get("model.name", "llama3")), str(k.get("model.flavor", "debugmodel"))
    model = None
    if (mname, flavor) in FLAVORS:
        model = models.preset(FLAVORS[mname, flavor]).with_(seq_len=seq)
        if tree is not None:
            if not isinstance(tree, dict):
                raise ValueError(f"{name}: model_spec.model must be the model's config tree, got {tree!r}")
            check_saved_model(tree, model, name)
            mtp = tree.get("mtp_layers")
            if isinstance(mtp, list) and len(mtp) != model.mtp_layers:
                # multi-token prediction is a training choice on the model (torchtitan's mtp_layers)
                model = model.with_(mtp_layers=len(mtp))
                assumed.append(f"{len(mtp)} multi-token-prediction layer(s), as the saved model's mtp_layers has them")
    elif isinstance(tree, dict) and (model := dense_model_from_tree(tree, mname, flavor, seq, name)) is not None:
        assumed.append(f"model {mname} flavor {flavor}: no cosearch preset; read from the saved model tree "
                       f"({model.num_params() / 1e9:.2f}B parameters)")
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
    for sec in _CONVERTER_SECTIONS:
        kept = k.names(f"{sec}.filter_fqns", [])
        other = [f for f in kept if f not in _BF16_ANYWAY]
        if other and converters:
            raise ValueError(f"{name}: {sec}.filter_fqns {other} keeps those modules in bf16 under the converter, a "
                             "mix cosearch does not price (it runs every layer GEMM in the low precision, the output "
                             "head in bf16)")
        if "auto_filter_small_kn" in kept and converters:
            assumed.append(f"{sec}.filter_fqns auto_filter_small_kn: torchao keeps GEMMs too small to gain in bf16; "
                           "priced with every layer GEMM in FP8")
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
    if k.bool("training.enable_cpu_offload", False):
        raise ValueError(f"{name}: training.enable_cpu_offload = true keeps FSDP's parameters, gradients and "
                         "optimizer states in host memory (the optimizer step on the CPU), which is not modelled")
    dtype = str(k.get("training.dtype", "float32"))
    if dtype != "float32":
        raise ValueError(f"{name}: training.dtype = {dtype!r} keeps the weights, gradients and optimizer states in "
                         f"{dtype} without fp32 copies, which is not modelled (float32, torchtitan's default, is)")
    for key, what in (("debug.detect_anomaly", "autograd's anomaly detection"),
                      ("debug.batch_invariant", "batch-invariant kernels")):
        if k.bool(key, False):
            raise ValueError(f"{name}: {key} = true runs {what}, which is not modelled")
    if k.bool("debug.moe_force_load_balance", False):
        assumed.append("debug.moe_force_load_balance: tokens routed evenly, as cosearch prices every MoE run")
    if k.bool("parallelism.enable_fsdp_symm_mem", False):
        assumed.append("enable_fsdp_symm_mem: FSDP's collectives priced as NCCL's (the symmetric-memory kernels "
                       "are not modelled)")
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
    if comm not in ("standard", "deepep", "hybridep", "torchao") and (ep > 1 or comm not in _OTHER_BACKENDS):
        raise ValueError(f"{name}: expert_parallel_comm_backend {comm!r} is not modelled (standard, deepep, hybridep "
                         f"and torchao's padded one are; torchtitan's others are {', '.join(_OTHER_BACKENDS)})")
    if shard is None or (shard < 1 and shard != -1):
        raise ValueError(f"{name}: data_parallel_shard_degree must be -1 or a positive integer, got {shard}")
    if k.bool("parallelism.disable_loss_parallel", False) and tp > 1:
        raise ValueError(f"{name}: parallelism.disable_loss_parallel = true gathers the output layer's logits over "
                         f"the {tp} tp ranks for the loss (every rank the whole vocabulary), which is not modelled")
    sp = k.bool("parallelism.enable_sequence_parallel", True) and tp > 1
    plan: dict[str, Any] = dict(tp=tp, pp=pp, context_parallel=cp, expert_parallel=ep, sequence_parallel=sp,
                                flash_attention=True, precision=precision)
    if sp:
        assumed.append("tensor parallelism with sequence parallelism (torchtitan's TP plan shards the norms over the "
                       "sequence)")
    k.get("parallelism.context_parallel_load_balancer")
    if cp > 1 and "parallelism.context_parallel_load_balancer" in k and \
            k.flat["parallelism.context_parallel_load_balancer"] is None:
        raise ValueError(f"{name}: context_parallel_load_balancer null leaves the causal attention's work unbalanced "
                         "over the cp ranks, which is not modelled (headtail or ptrr balance it)")
    if ep > 1 and tp > 1 and etp == 1:
        # torchtitan's expert_tensor_parallel_degree 1: "[partial dp + all tp -> ep]", each tp rank an
        # expert-parallel rank on its own share of the tokens
        plan["expert_tensor_parallel"] = 1
        assumed.append("expert_tensor_parallel_degree 1 under tp > 1: expert parallelism borrows all of TP "
                       "(each tp rank an expert-parallel rank, whole experts)")
    reshard = str(k.get("parallelism.fsdp_reshard_after_forward", "default"))
    try:
        stage = fsdp_zero_stage(reshard, pp)
    except ValueError as exc:
        raise ValueError(f"{name}: {exc}") from None
    sharded = shard == -1 or shard > 1
    if sharded:
        plan["zero"] = stage
        if reshard == "never":
            assumed.append("fsdp_reshard_after_forward = never: weights gathered once and kept (ZeRO-2 memory)")
        elif stage == 2:
            assumed.append("fsdp_reshard_after_forward default under pipeline parallelism: FSDP keeps the weights "
                           "gathered and reduces the gradients once, after the last microbatch (ZeRO 2)")
        if rep > 1:
            if shard == -1:
                raise ValueError(f"{name}: HSDP (replicate {rep}) needs an explicit data_parallel_shard_degree")
            plan["zero_group"] = shard
    else:
        plan["zero"] = 0
    dp = rep * shard if shard != -1 else None
    if dp is None:
        assumed.append("data_parallel_shard_degree -1: dp is what the chips leave, chips / (tp pp cp)")
    if isinstance(tree, dict):
        assumed.append(ATTENTION_SAID[saved_attention(tree, name)])
    elif mname == "deepseek_v3":
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
            raise ValueError(f"{name}: activation_checkpoint selective_ac_option {option!r} recomputes one layer in "
                             f"every {option}; recompute of part of the layers is not modelled (torchtitan's "
                             "default is '2': set mode and the option explicitly)")
    else:
        raise ValueError(f"{name}: activation_checkpoint.mode {mode!r}: torchtitan accepts none, selective, full")
    # batch and pipeline
    local = k.positive("training.local_batch_size", k.int("training.batch_size", 8))
    gbs = k.int("training.global_batch_size", -1)
    first_less = k.int("parallelism.pipeline_parallel_first_stage_less_layers", 1)
    last_less = k.int("parallelism.pipeline_parallel_last_stage_less_layers", 1)
    parts = k.get("parallelism.module_fqns_per_model_part")
    if "parallelism.pipeline_parallel_split_points" in k and k.get("parallelism.pipeline_parallel_split_points"):
        raise ValueError(f"{name}: pipeline_parallel_split_points is torchtitan's split before July 2025 (#1416), "
                         "which cosearch does not read; give module_fqns_per_model_part, its replacement")
    if pp > 1:
        plan["microbatch"] = k.positive("parallelism.pipeline_parallel_microbatch_size", 1)
        if local % plan["microbatch"]:
            raise ValueError(f"{name}: local_batch_size {local} is not a multiple of pipeline_parallel_microbatch_size "
                             f"{plan['microbatch']} (torchtitan requires it)")
        schedule = str(k.get("parallelism.pipeline_parallel_schedule", "1F1B"))
        csv = k.get("parallelism.pipeline_parallel_schedule_csv")
        if csv:
            raise ValueError(f"{name}: pipeline_parallel_schedule_csv {csv!r}: a schedule read from a file is not "
                             "modelled")
        per_stage = k.int("parallelism.pipeline_parallel_layers_per_stage")
        if parts is not None:
            vs, layers = stage_layers_of_parts(parts, pp, schedule, model.num_layers if model else None, name)
        elif model is None:
            raise ValueError(f"{name}: torchtitan splits the layers over the pipeline stages by the model's layer "
                             "count, which this file does not give (its flavor has no cosearch preset); give "
                             "module_fqns_per_model_part, or a flavor cosearch knows")
        else:
            vs, layers = pipeline_stage_layers(model.num_layers, pp, schedule, per_stage, first_less, last_less, name)
        plan["virtual_stages"], plan["stage_layers"] = vs, layers
        assumed.append(f"pipeline stages hold {list(layers)} transformer layers ({vs} model chunk(s) a rank), as "
                       "torchtitan splits them (the embedding and the output each counted as "
                       f"{first_less} and {last_less} layer(s))" if parts is None else
                       f"pipeline stages hold {list(layers)} transformer layers ({vs} model chunk(s) a rank), as "
                       "module_fqns_per_model_part gives them")
        if _schedule_key(schedule) in ("loopedbfs", "interleavedzerobubble"):
            assumed.append(f"schedule {schedule} priced as Interleaved1F1B")
        elif _schedule_key(schedule) == "gpipe":
            assumed.append("GPipe schedule priced as 1F1B (same bubble; GPipe keeps every microbatch's activations)")
    else:
        for key in ("pipeline_parallel_microbatch_size", "pipeline_parallel_schedule", "pipeline_parallel_schedule_csv",
                    "pipeline_parallel_layers_per_stage"):
            k.get(f"parallelism.{key}")
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
    if isinstance(tree, dict) and fused_qkv(tree):
        # torchtitan 0.3's FusedQKVLinear: one wqkv matmul, the first its per-op policy counts
        engine = dataclasses.replace(engine, selective_recompute="every-other-matmul-fused-qkv")
        if plan.get("recompute") == "selective":
            assumed.append("one fused wqkv matmul (FusedQKVLinear): per-op selective checkpointing keeps its q, k "
                           "and v output and reruns wo, w3")
    experts_lowp = _grouped_experts_converted(k, comm)
    may_be_moe = model is None or model.moe          # a model its config.json describes may be one
    if may_be_moe and experts_lowp and not converters:
        raise ValueError(f"{name}: the routed experts' grouped GEMMs run in low precision while the layers' "
                         "Linear modules stay bf16, a mix cosearch does not price (give the Linear converter too, "
                         "model.converters=float8 or mx)")
    if may_be_moe and converters and not experts_lowp:
        # the Float8 / MX converters swap nn.Linear modules: an MoE model's grouped GEMMs stay bf16
        engine = dataclasses.replace(engine, expert_precision="bf16",
                                     name=engine.name + ("-bf16-experts" if model is not None else ""))
        assumed.append("an MoE model's routed experts' grouped GEMMs in bf16: the Linear converter swaps nn.Linear "
                       "modules, and no grouped-experts converter (float8.moe_fqns_prototype before 0.3) converts them")
    elif model is not None and model.moe and converters:
        assumed.append("the routed experts' grouped GEMMs in low precision too (torchao's scaled grouped GEMMs, "
                       "rowwise / MXFP8, priced as the per-tensor FP8 rate)")
    if comm == "torchao":
        assumed.append("the padded token dispatcher (TorchAOTokenDispatcher: each expert's tokens padded for the "
                       "quantized grouped GEMMs) priced as the standard all-to-alls, the padding not priced")
    if may_be_moe:
        assumed.append("an MoE model's router gate GEMM in FP32 (TokenChoiceTopKRouter runs it under "
                       "torch.autocast(dtype=torch.float32); TF32 off, PyTorch's default): priced on the CUDA cores")
    if model is not None and model.moe and (model.bias or model.activation_clamp):
        # models/gpt_oss/moe.py: GptOssGroupedExperts adds its biases and clamps its SwiGLU op by op
        # unless Inductor fuses them; models/gpt_oss/model.py: the sinks rescale the attention output
        assumed.append("the experts' biases and clamped SwiGLU " + (
            "fused by torch.compile" if compiled else
            "priced as torchtitan's GptOssGroupedExperts runs them, op by op (no torch.compile)"))
        assumed.append("the attention sinks' rescale of each attention output (apply_attention_sink_rescale: out * "
                       "sigmoid(lse - sinks)) priced as a pass over it, " + (
                           "one fused kernel each way (torch.compile)" if compiled else "op by op (no torch.compile)"))
    chunks = k.positive("loss.num_chunks", 1)
    if chunks > 1:
        # ChunkedLossWrapper (torchtitan 0.3 components/loss.py): the output layer and the loss a
        # chunk of each rank's sequence at a time; it requires the local sequence to divide
        if (seq // cp) % chunks:
            raise ValueError(f"{name}: ChunkedLossWrapper's {chunks} chunks do not divide the local sequence "
                             f"{seq // cp} (torchtitan requires it)")
        engine = dataclasses.replace(engine, loss_chunks=chunks, name=f"{engine.name}-loss{chunks}")
        assumed.append(f"ChunkedLossWrapper: the output layer and the loss run {chunks} chunks of the sequence at a "
                       "time (one chunk's logits alive; the hidden states' bf16 copy and fp32 gradient buffer "
                       "kept), the output layer's gradient synced once")
    if comm == "deepep" and ep > 1:
        # DeepEP's kernels instead of PyTorch's all-to-alls (torchtitan's DeepEPExpertParallel)
        engine = with_moe_dispatch(engine, "flex", backend="deepep")
        assumed.append("expert_parallel_comm_backend deepep: the flex dispatcher with DeepEP's kernels")
    if comm == "hybridep" and ep > 1:
        engine = with_moe_dispatch(engine, "flex", sms=HYBRIDEP_SMS, backend="hybridep")
        assumed.append(_hybridep_reading(k, name))
    else:
        for f in ("non_blocking_capacity_factor", "pad_multiple", "num_max_tokens_per_rank"):
            k.get(f"hybridep.{f}")      # without expert parallelism the tokens stay local: neutral
    memory = _optimizer_state(k, name, assumed)
    if k.bool("training.deterministic", False):
        # torchtitan's set_determinism: torch.use_deterministic_algorithms(True), cuDNN deterministic,
        # cuBLAS's fixed workspace, each kernel's deterministic variant where it has one
        assumed.append("training.deterministic: PyTorch's deterministic algorithms (a slower variant where a kernel "
                       "has one, such as a deterministic attention backward) not priced")
    neutral = k.finish(NEUTRAL_SECTIONS + SAVED_NEUTRAL_SECTIONS, NEUTRAL_KEYS)
    return RunConfig(name, model=model, plan=plan, dp=dp,
                     global_batch=None if gbs in (None, -1) else gbs,
                     batch_per_replica=local if gbs in (None, -1) else None, engine=engine,
                     seq_len=seq, assumed=tuple(assumed), neutral=neutral, memory=memory)


def _optimizer_state(k: Keys, name: str, assumed: list[str]) -> MemoryConfig | None:
    """The bytes a parameter keeps under torchtitan's optimizer (``components/optimizer``:
    ``Adam`` / ``AdamW``, torch's, two moments in fp32 beside FSDP's fp32 weights and gradients,
    16 bytes, the memory model's default; 0.3's ``implementation = "fused_opt_states_bf16"`` keeps
    the moments in bf16, 12 bytes; ``DistMuon`` and any other optimizer refused).  The TOML names
    one optimizer (``[optimizer] name``), 0.3's saved config one per parameter group."""
    names = {str(k.get("optimizer.name", "AdamW"))}
    groups = k.get("optimizer.param_groups")
    if groups is not None:
        if not isinstance(groups, list) or not all(isinstance(g, dict) for g in groups):
            raise ValueError(f"{name}: optimizer.param_groups must be a list of parameter groups, got {groups!r:.80}")
        names = {str(g.get("optimizer_name")) for g in groups} or names
    other = sorted(n for n in names if n not in ("Adam", "AdamW"))
    if other:
        raise ValueError(f"{name}: optimizer {', '.join(other)} is not modelled (torch's Adam and AdamW are)")
    impl = str(k.get("optimizer.implementation", "fused"))
    if impl not in ("fused", "foreach", "for-loop", "fused_opt_states_bf16"):
        raise ValueError(f"{name}: optimizer.implementation {impl!r}: torchtitan accepts fused, foreach, for-loop "
                         "and fused_opt_states_bf16")
    if impl != "fused_opt_states_bf16":
        return None
    assumed.append("optimizer.implementation fused_opt_states_bf16: Adam's moments in bf16, 12 bytes a parameter")
    return MemoryConfig.totalling(12)
