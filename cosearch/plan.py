"""One training plan: :class:`PlanSpec` in, :class:`Plan` (time, memory, breakdown) out.

:func:`evaluate` prices a fixed plan — data/tensor/pipeline degrees, microbatch,
recompute per stage, interleaved virtual stages, sequence parallelism, ZeRO stage,
flash attention and the layer split — for a model on a chip in a cluster.  Layer
times come from the op graphs (:mod:`cosearch.graph`) priced by the cost model
(:mod:`cosearch.cost`: roofline x kernel efficiency); collectives from the cluster
hierarchy; the stage and step formulas from :mod:`cosearch._kernels.formulas`, the
same njit functions the exact plan search (:mod:`cosearch.placement`) calls.

Megatron's stage convention: the embedding sits with the first stage's layers and the
LM head with the last; every stage holds at least one transformer layer.  The default
split (``stage_layers=None``) is as even as possible; when the layers do not divide, the
extra layers go to the middle stages first (first and last stages carry the embedding
and head), as BLOOM's and Llama 3's pipelines did.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, NamedTuple

import numpy as np

from . import _validate as v
from . import graph, memory
from ._kernels import formulas as F
from ._kernels import roofline
from .cluster import Cluster, as_cluster
from .engine import (
    NCCL_COLLECTIVE_CTAS,
    Engine,
    check_features,
    expert_graph_option,
    graph_elementwise,
    moe_comm_sms,
    uneven_sequence_split,
)
from .engine import preset as engine_preset
from .hardware import DESIGN_FIELDS, Accelerator, design_array
from .models import ModelConfig

__all__ = ["PlanSpec", "Plan", "evaluate", "unit_costs", "hw_row", "collective_sm_share", "even_split", "check_spec",
           "check_precision", "cast_passes"]

_MODES = F.RECOMPUTE_MODES


_SHORT = {"none": "none", "selective": "sel", "full": "full"}


def recompute_runs(modes: Sequence[str]) -> str:
    """Per-stage recompute modes as runs: ``("selective",) * 19 + ("none",) * 2`` ->
    ``"sel×19/none×2"`` (a run of one stage has no count)."""
    out: list[str] = []
    i = 0
    while i < len(modes):
        j = i
        while j < len(modes) and modes[j] == modes[i]:
            j += 1
        out.append(_SHORT.get(modes[i], modes[i]) + (f"×{j - i}" if j - i > 1 else ""))
        i = j
    return "/".join(out)


@dataclass(frozen=True)
class PlanSpec:
    """A training plan.  ``recompute``: ``"none"``, ``"selective"`` (what the engine's
    :attr:`~cosearch.engine.Engine.selective_recompute` says: Megatron's attention core, or
    torchtitan's every-other-matmul policy on the ``fsdp`` engine), ``"full"``, or one of those
    per pipeline stage; ``stage_layers``: transformer layers
    per stage (None: even split); ``zero``: 0 (none), 1 (optimizer state sharded, Megatron's
    distributed optimizer), 2 (+ gradients), 3 (+ weights).  ``expert_parallel`` (ep, MoE models):
    each expert lives on one of ep ranks carved from the ``dp * cp`` data-parallel ranks.
    ``offload_layers``: per pipeline stage, layers whose saved activations go to host memory
    over the chip's host link (Megatron-Core's activation CPU offload), each transfer overlapped
    with its layer's compute (not searched; 0 by default).

    ``context_parallel`` (cp): the sequence split over cp ranks (K/V exchanged around a ring,
    overlapped with attention; needs ``flash_attention``); ``chips = dp * tp * pp * cp`` and the
    ranks holding the same weights are ``dp * cp``.  ``zero_group``: the ZeRO sharding group
    inside those ``dp * cp`` ranks (None: all of them; HSDP / MaxText's FSDP over a slice: a
    divisor, replicated across the others).  ``precision``: ``"bf16"``, ``"fp8"`` or ``"fp4"``
    (the layers' weight GEMMs on FP8 or NVFP4 tensor cores; low-precision weight copies kept in
    memory).  ``scaling_recipe`` (:data:`cosearch.graph.SCALING_RECIPES`, Megatron-Core's
    ``--fp8-recipe`` names; None: the engine's default, Megatron's ``delayed`` under Transformer
    Engine and torchao's ``tensorwise`` under ``torch.compile``): how the low-precision casts
    find their scales, and so how the casts run (:data:`cosearch.graph.RECIPE_CAST_PASSES`):
    per-tensor current scaling (``tensorwise``) and NVFP4 read a tensor once more for its amax;
    under delayed scaling the norms fused into their GEMMs' modules write FP8 themselves.
    ``bf16_layers`` (first, last): under a low precision, that many transformer layers at the
    model's start and end run in bf16 (Megatron's ``--first-last-layers-bf16`` with
    ``--num-layers-at-start-in-bf16`` / ``--num-layers-at-end-in-bf16``, Megatron-Bridge's
    ``first_last_layers_bf16``); they sit in the first model chunk of the first stage and the
    last chunk of the last one, which must hold them (:func:`evaluate` prices them there; the
    plan search does not search plans with them).  ``fp8_attention``: the fused attention kernel
    runs on FP8 operands too (Megatron-Core's ``--fp8-dot-product-attention``, Transformer Engine's
    ``fp8_dpa``; :attr:`attention_format`: MXFP8 under the ``mxfp8`` recipe, per-tensor FP8
    under ``delayed`` and ``tensorwise``), priced at the chip's measured FP8 attention speeds
    (:meth:`cosearch.hardware.KernelEfficiency.with_fp8_attention`), with its casts
    (:meth:`cosearch.graph._Builder.attention_cast`) and, under context parallelism, its
    quantized K and V on the ring (:func:`cp_ring_bytes`); it needs precision ``fp8`` and
    ``flash_attention``.  The attention then keeps for its backward what Transformer Engine keeps
    (:func:`cosearch.memory.fp8_attention_saved_bytes`): FP8 Q, K, V (and O under delayed
    scaling); MXFP8's row- and column-wise Q, K, V, a little more than bf16's.
    ``pipeline_microbatches``: under an engine whose pipeline is MaxText's circular schedule
    (:attr:`cosearch.engine.Engine.pipeline_schedule`), the microbatches of one pass of the
    pipeline (``num_pipeline_microbatches``; a multiple of pp dividing the step's microbatches;
    None: all of them, one pass): each pass pays the bubble once and holds its own microbatches'
    activations (:func:`check_pipeline_schedule`); a 1F1B engine refuses it."""

    dp: int
    tp: int
    pp: int
    microbatch: int
    recompute: str | tuple[str, ...] = "none"
    virtual_stages: int = 1
    sequence_parallel: bool = False
    zero: int = 0
    stage_layers: tuple[int, ...] | None = None
    flash_attention: bool = False
    context_parallel: int = 1
    precision: str = "bf16"
    zero_group: int | None = None
    expert_parallel: int = 1
    offload_layers: int = 0
    expert_tensor_parallel: int | None = None
    scaling_recipe: str | None = None
    bf16_layers: tuple[int, int] = (0, 0)
    fp8_attention: bool = False
    pipeline_microbatches: int | None = None

    def __post_init__(self) -> None:
        if isinstance(self.offload_layers, bool) or not isinstance(self.offload_layers, (int, np.integer)) \
                or self.offload_layers < 0:
            raise ValueError(f"PlanSpec.offload_layers must be a whole number >= 0, got {self.offload_layers!r}")
        for f in ("dp", "tp", "pp", "microbatch", "virtual_stages", "context_parallel", "expert_parallel"):
            object.__setattr__(self, f, v.positive_int(f"PlanSpec.{f}", getattr(self, f), v.MAX_CHIPS
                                                       if f != "microbatch" else v.MAX_BATCH))
        rc = self.recompute
        if isinstance(rc, str):
            v.choice("PlanSpec.recompute", rc, _MODES)
        else:
            try:
                rc = tuple(rc)
            except TypeError:
                raise ValueError(f"PlanSpec.recompute={rc!r}; give one of {_MODES} or one per stage") from None
            for x in rc:
                v.choice("PlanSpec.recompute", x, _MODES)
            if len(rc) != self.pp:
                raise ValueError(f"PlanSpec.recompute has {len(rc)} entries for pp={self.pp} stages")
            object.__setattr__(self, "recompute", rc)
        if isinstance(self.zero, bool) or self.zero not in (0, 1, 2, 3):
            raise ValueError(f"PlanSpec.zero={self.zero!r}; choose 0, 1, 2 or 3")
        for f in ("sequence_parallel", "flash_attention", "fp8_attention"):
            object.__setattr__(self, f, v.flag(f"PlanSpec.{f}", getattr(self, f)))
        if self.stage_layers is not None:
            if not isinstance(self.stage_layers, (list, tuple, np.ndarray)):
                raise ValueError(f"PlanSpec.stage_layers must be a list of layers per stage, got {self.stage_layers!r}")
            sl = tuple(v.positive_int("PlanSpec.stage_layers", x) for x in self.stage_layers)
            if len(sl) != self.pp:
                raise ValueError(f"PlanSpec.stage_layers has {len(sl)} entries for pp={self.pp} stages")
            object.__setattr__(self, "stage_layers", sl)
        if self.virtual_stages > 1 and self.pp == 1:
            raise ValueError(f"PlanSpec.virtual_stages={self.virtual_stages} needs pipeline parallelism (pp > 1)")
        if self.pipeline_microbatches is not None:
            pm = v.positive_int("PlanSpec.pipeline_microbatches", self.pipeline_microbatches, v.MAX_BATCH)
            if self.pp == 1:
                raise ValueError(f"PlanSpec.pipeline_microbatches={pm} needs pipeline parallelism (pp > 1)")
            if pm % self.pp:
                raise ValueError(f"PlanSpec.pipeline_microbatches={pm} must be a multiple of pp={self.pp} (MaxText's "
                                 "circular pipeline needs num_pipeline_microbatches divisible by the stages)")
            object.__setattr__(self, "pipeline_microbatches", pm)
        v.choice("PlanSpec.precision", self.precision, graph.PRECISIONS)
        if self.scaling_recipe is not None:
            graph.check_scaling_recipe(self.precision, self.scaling_recipe, "PlanSpec.scaling_recipe")
        try:
            ends = tuple(self.bf16_layers)
        except TypeError:
            raise ValueError(f"PlanSpec.bf16_layers={self.bf16_layers!r}; give (first, last) layer counts") from None
        if len(ends) != 2:
            raise ValueError(f"PlanSpec.bf16_layers={self.bf16_layers!r}; give (first, last) layer counts")
        ends = tuple(v.nonneg_int("PlanSpec.bf16_layers", x, v.MAX_CHIPS) for x in ends)
        if any(ends) and self.precision == "bf16":
            raise ValueError(f"PlanSpec.bf16_layers={ends}: the plan's precision is bf16 already; give a low "
                             "precision (fp8, fp4) or (0, 0)")
        object.__setattr__(self, "bf16_layers", ends)
        if self.fp8_attention:
            check_fp8_attention(self.precision, self.scaling_recipe, self.flash_attention, "PlanSpec")
        if self.zero_group is not None:
            zg = v.positive_int("PlanSpec.zero_group", self.zero_group, v.MAX_CHIPS)
            if self.weight_replicas % zg:
                raise ValueError(f"PlanSpec.zero_group={zg} must divide dp * context_parallel = "
                                 f"{self.dp} * {self.context_parallel} = {self.weight_replicas}")
            object.__setattr__(self, "zero_group", zg)
        etp = self.tp if self.expert_tensor_parallel is None else v.positive_int(
            "PlanSpec.expert_tensor_parallel", self.expert_tensor_parallel, v.MAX_CHIPS)
        if etp not in (1, self.tp):
            raise ValueError(f"PlanSpec.expert_tensor_parallel={etp} with tp={self.tp}: cosearch prices etp = tp "
                             "(Megatron's default) or etp = 1")
        object.__setattr__(self, "expert_tensor_parallel", None if etp == self.tp else etp)
        if (self.weight_replicas * self.tp // etp) % self.expert_parallel:
            raise ValueError(f"PlanSpec.expert_parallel={self.expert_parallel} must divide dp * context_parallel"
                             f"{' * tp / etp' if etp != self.tp else ''} = {self.weight_replicas * self.tp // etp} "
                             "(the expert-parallel group lives inside the data-parallel ranks"
                             f"{', and the tensor-parallel ones when etp < tp' if etp != self.tp else ''})")

    @property
    def chips(self) -> int:
        return self.dp * self.tp * self.pp * self.context_parallel

    @property
    def weight_replicas(self) -> int:
        """Ranks holding the same weights: ``dp * context_parallel``."""
        return self.dp * self.context_parallel

    @property
    def shard_group(self) -> int:
        """The ZeRO sharding group (``zero_group``, or all ``dp * cp`` ranks)."""
        return self.weight_replicas if self.zero_group is None else self.zero_group

    @property
    def attention_format(self) -> str | None:
        """The fused attention's operand format (:data:`cosearch.graph.ATTENTION_FORMAT_BYTES`):
        ``"mxfp8"`` or ``"fp8"`` under :attr:`fp8_attention`, else None (bf16)."""
        return fp8_attention_format(self.scaling_recipe) if self.fp8_attention else None

    def recompute_per_stage(self) -> tuple[str, ...]:
        return (self.recompute,) * self.pp if isinstance(self.recompute, str) else tuple(self.recompute)

    def with_(self, **changes: Any) -> PlanSpec:
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["recompute"] = self.recompute if isinstance(self.recompute, str) else list(self.recompute)
        d["stage_layers"] = None if self.stage_layers is None else list(self.stage_layers)
        d["bf16_layers"] = list(self.bf16_layers)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PlanSpec:
        d = dict(d)
        if isinstance(d.get("recompute"), list):
            d["recompute"] = tuple(d["recompute"])
        if d.get("stage_layers") is not None:
            d["stage_layers"] = tuple(d["stage_layers"])
        return cls(**d)

    def describe(self) -> str:
        """One line; per-stage recompute as runs (``sel×19/none×2``)."""
        rc = self.recompute if isinstance(self.recompute, str) else recompute_runs(self.recompute)
        extra = []
        if self.virtual_stages > 1:
            extra.append(f"v{self.virtual_stages}")
        if self.sequence_parallel:
            extra.append("sp")
        if self.zero:
            extra.append(f"zero{self.zero}")
        if self.zero_group is not None and self.zero_group != self.weight_replicas:
            extra.append(f"zg{self.zero_group}")
        if self.flash_attention:
            extra.append("flash")
        if self.precision != "bf16":
            extra.append(self.precision if self.scaling_recipe is None else f"{self.precision}:{self.scaling_recipe}")
        if self.fp8_attention:
            extra.append(f"{self.attention_format}-attention")
        if any(self.bf16_layers):
            extra.append(f"bf16-ends {self.bf16_layers[0]}/{self.bf16_layers[1]}")
        if self.offload_layers:
            extra.append(f"offload{self.offload_layers}")
        if self.pipeline_microbatches is not None:
            extra.append(f"pass{self.pipeline_microbatches}")
        cp = f" cp{self.context_parallel}" if self.context_parallel > 1 else ""
        cp += f" ep{self.expert_parallel}" if self.expert_parallel > 1 else ""
        cp += f" etp{self.expert_tensor_parallel}" if self.expert_tensor_parallel is not None else ""
        return " ".join([f"dp{self.dp} tp{self.tp} pp{self.pp}{cp} mb{self.microbatch}", f"rc:{rc}", *extra])


@dataclass(frozen=True)
class Plan:
    """A plan's predicted performance.  ``feasible=False`` plans carry ``reason`` (memory
    needed vs available) and zero throughput.  ``mfu``: model FLOPs (6N + attention per
    token) over all chips of the cluster at peak; ``hfu`` adds the recomputed FLOPs.
    ``breakdown``: seconds per step on the critical stage (they sum to ``step_time_s``)."""

    spec: PlanSpec
    feasible: bool
    reason: str
    step_time_s: float
    tokens_per_s: float
    samples_per_s: float
    mfu: float
    hfu: float
    chips_used: int
    num_chips: int
    num_microbatches: int
    memory_per_chip_bytes: tuple[float, ...]
    hbm_bytes: float
    breakdown: dict[str, float] = field(default_factory=dict)
    critical_stage: int = 0
    time_model: str = "sum"

    # convenient views of the spec
    @property
    def dp(self) -> int:
        return self.spec.dp

    @property
    def tp(self) -> int:
        return self.spec.tp

    @property
    def pp(self) -> int:
        return self.spec.pp

    @property
    def microbatch(self) -> int:
        return self.spec.microbatch

    @property
    def idle_chips(self) -> int:
        return self.num_chips - self.chips_used

    @property
    def mfu_fp8_peak(self) -> float | None:
        """MFU against the dense FP8 peak (:data:`FP8_PEAK_OVER_BF16` times the bf16 peak ``mfu``
        is counted against) for an FP8 plan; None otherwise."""
        return self.mfu / FP8_PEAK_OVER_BF16 if self.spec.precision == "fp8" else None

    def describe(self) -> str:
        if not self.feasible:
            return f"{self.spec.describe()}: infeasible ({self.reason})"
        mfu = f"MFU {self.mfu:.1%} (HFU {self.hfu:.1%})"
        if self.spec.precision == "fp8":
            mfu = (f"MFU {self.mfu:.1%} of the bf16 peak, {self.mfu_fp8_peak:.1%} of the FP8 peak "
                   f"(HFU {self.hfu:.1%} of bf16)")
        elif self.spec.precision != "bf16":
            mfu = f"MFU {self.mfu:.1%} of the bf16 peak (HFU {self.hfu:.1%})"
        return (f"{self.spec.describe()} layers {list(self.spec.stage_layers or [])}: step {self.step_time_s:.3f} s, "
                f"{self.tokens_per_s:,.0f} tok/s, {mfu} over {self.num_chips} chips ({self.chips_used} used)")

    def to_dict(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in ("feasible", "reason", "tokens_per_s", "samples_per_s", "mfu", "hfu",
                                            "chips_used", "num_chips", "num_microbatches", "hbm_bytes",
                                            "critical_stage", "time_model")}
        d["spec"] = self.spec.to_dict()
        d["step_time_s"] = self.step_time_s if math.isfinite(self.step_time_s) else None
        d["memory_per_chip_bytes"] = list(self.memory_per_chip_bytes)
        d["breakdown"] = dict(self.breakdown)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Plan:
        d = dict(d)
        d["spec"] = PlanSpec.from_dict(d["spec"])
        mem, bd = d["memory_per_chip_bytes"], d.get("breakdown", {})
        if not isinstance(mem, list) or not isinstance(bd, dict):
            raise ValueError("a plan's memory_per_chip_bytes must be a list and its breakdown an object")
        d["memory_per_chip_bytes"] = tuple(v.nonneg_float("memory_per_chip_bytes", x) for x in mem)
        d["breakdown"] = {str(k): v.nonneg_float(f"breakdown.{k}", x) for k, x in bd.items()}
        for f in ("chips_used", "num_chips", "num_microbatches"):
            d[f] = v.positive_int(f"plan.{f}", d[f], v.MAX_BATCH)
        cs = d.get("critical_stage", 0)
        if isinstance(cs, bool) or not isinstance(cs, int) or cs < 0:
            raise ValueError(f"plan.critical_stage must be a whole number, got {cs!r}")
        for f in ("tokens_per_s", "samples_per_s", "mfu", "hfu", "hbm_bytes"):
            d[f] = v.nonneg_float(f"plan.{f}", d[f])
        if not isinstance(d["feasible"], bool) or not isinstance(d["reason"], str) \
                or not isinstance(d.get("time_model", "sum"), str):
            raise ValueError("plan.feasible must be true or false, and plan.reason and plan.time_model strings")
        d["step_time_s"] = math.inf if d.get("step_time_s") is None else float(d["step_time_s"])
        return cls(**d)


# ---------------------------------------------------------------------- unit costs
@functools.lru_cache(maxsize=1024)
def _graph_rows(model: ModelConfig, tp: int, mb: int, sp: bool, flash: bool, cp: int = 1, precision: str = "bf16",
                ep: int = 1, cross_entropy: str = "fused", elementwise: str = "fused", etp: int | None = None,
                embedding: str = "gather", passes: str = "single", experts: str = "fused",
                dispatcher: str = "alltoall", attention_format: str | None = None, router: str = "bf16",
                expert_precision: str | None = None, sinks: str = "kernel"):
    """The six graphs of (embedding, layer, head) x (fwd, bwd), cached: planning the same model
    again (another design, another ``evaluate``) reuses them (callers must not change the dict).
    The embedding and head do not depend on expert parallelism: they are shared across its
    degrees (:func:`_part_graphs`).  ``dispatcher``: the MoE layer's (graph ``moe_dispatcher``);
    ``attention_format``: the layer's fused attention operands (graph ``attention_format``);
    ``router``: its router GEMM's operands (graph ``router_dtype``); ``expert_precision``: its routed
    experts' (graph ``expert_precision``)."""
    graph.check_expert_parallel(model, ep)
    graph.check_expert_tensor_parallel(model, etp, tp, bool(sp))
    out = {}
    for part in ("embedding", "layer", "head"):
        moe = part == "layer"
        f, b = _part_graphs(model, part, tp, mb, sp, flash, cp, precision, ep if moe else 1, cross_entropy,
                            elementwise, etp if moe else None, embedding if part == "embedding" else "gather",
                            passes if moe else "single", experts if moe else "fused",
                            dispatcher if moe else "alltoall", attention_format if moe else None,
                            router if moe else "bf16", expert_precision if moe else None,
                            sinks if moe else "kernel")
        out[part, "fwd"], out[part, "bwd"] = f, b
    return out


@functools.lru_cache(maxsize=256)
def _per_sequence_bytes(cl: ModelConfig, t: int, sp: bool, policy: str, flash_attention: bool,
                        precision: str, eager_clamp: bool = False,
                        experts_gathered: bool = False, proj_input_cast: bool = True,
                        attention_saved: tuple[float, float | None] | None = None, loss_chunks: int = 1,
                        experts_bf16: bool = False, dispatched: bool = False) -> tuple[tuple[float, ...], float]:
    """One sequence's activation bytes on a rank of ``cl`` (this rank's tokens) at tp ``t``: (the
    layer's without recompute, under ``policy``'s selective recompute, the layer input, the
    embedding's, the head's), and the bytes a MaxText policy offloads to the host; cached (none
    depends on the expert-parallel degree but whether it exceeds 1, ``dispatched``).
    ``eager_clamp``: the experts' clamp runs eagerly; ``experts_gathered``: the experts split over
    the tp ranks gather their input copies; ``proj_input_cast`` False: the attention's output
    projection keeps no low-precision copy; ``attention_saved``: FP8 attention's saved bytes
    (:func:`cosearch.memory.layer_activation_bytes`); ``loss_chunks``: the head's loss run in that
    many sequence chunks (:attr:`cosearch.engine.Engine.loss_chunks`); ``experts_bf16``: the routed
    experts in bf16 in a low-precision layer; ``dispatched``: an MoE layer's tokens cross an
    expert-parallel group (ep > 1), whose all-to-all outputs torchtitan's per-op policy keeps."""
    # MaxText's minimal: its checkpoint names' tensors (DeepSeek-V4's attention: Megatron's figure)
    mt = graph.maxtext_places(policy, cl)
    host = 0.0
    if mt is not None:
        sel, host = memory.maxtext_saved_bytes(cl, t, 1, sp, mt)
    else:
        sel = (memory.every_other_matmul_bytes(cl, t, 1, sp, policy == "every-other-matmul-fused-qkv", dispatched)
               if policy in graph.EVERY_OTHER_MATMUL and flash_attention and memory.every_other_matmul_exact(cl, t) else
               memory.layer_activation_bytes(cl, t, 1, sp, "selective", flash_attention, precision,
                                             graph.recompute_modules(policy) or (), eager_clamp, experts_gathered,
                                             proj_input_cast, attention_saved, experts_bf16))
    return ((memory.layer_activation_bytes(cl, t, 1, sp, "none", flash_attention, precision,
                                           eager_clamp=eager_clamp, experts_gathered=experts_gathered,
                                           proj_input_cast=proj_input_cast, attention_saved=attention_saved,
                                           experts_bf16=experts_bf16), sel,
             memory.layer_input_bytes(cl, t, 1, sp), memory.embedding_activation_bytes(cl, t, 1, sp),
             memory.head_activation_bytes(cl, t, 1, sp, loss_chunks)), host)


def clear_graph_cache() -> None:
    """Forget every cached op graph (:func:`_graph_rows`, :func:`_part_graphs`, the experts' ops
    of :func:`cosearch.graph.with_expert_parallel`) and activation size: benchmarks that time
    graph building start from here."""
    _graph_rows.cache_clear()
    _part_graphs.cache_clear()
    _per_sequence_bytes.cache_clear()
    graph._expert_pair.cache_clear()
    _SHARES.clear()
    _LAYOUTS.clear()
    _STACKS.clear()
    _chip_rows.cache_clear()


@functools.lru_cache(maxsize=2048)
def _part_graphs(model: ModelConfig, part: str, tp: int, mb: int, sp: bool, flash: bool, cp: int, precision: str,
                 ep: int, cross_entropy: str, elementwise: str, etp: int | None, embedding: str = "gather",
                 passes: str = "single", experts: str = "fused", dispatcher: str = "alltoall",
                 attention_format: str | None = None, router: str = "bf16", expert_precision: str | None = None,
                 sinks: str = "kernel"):
    """One part's (forward, backward) graphs, cached (:func:`cosearch.graph.build_pair`;
    ``experts``: its ``expert_elementwise``, ``dispatcher`` its ``moe_dispatcher``,
    ``attention_format`` its ``attention_format``, ``router`` its ``router_dtype``, ``expert_precision``
    its ``expert_precision``).  A
    dropless MoE layer at ep > 2 is the ep-2 graph with its experts' ops rebuilt
    (:func:`cosearch.graph.with_expert_parallel`): the rest of the layer is the same at every ep
    (the alltoall dispatcher's regrouping passes too, where ranks hold several experts at both)."""
    if (part == "layer" and model.moe and ep > 2 and etp is None and not model.moe_capacity_factor
            and model.num_experts % 2 == 0
            and (dispatcher not in graph.REGROUPING_DISPATCHERS or model.num_experts // ep > 1)):
        f2, b2 = _part_graphs(model, part, tp, mb, sp, flash, cp, precision, 2, cross_entropy, elementwise, etp,
                              "gather", passes, experts, dispatcher, attention_format, router, expert_precision, sinks)
        return graph.with_expert_parallel(f2, b2, model, tp, mb, ep, cp, precision, passes, experts, dispatcher,
                                          elementwise, expert_precision)
    return graph.build_pair(model, tp, mb, part, sequence_parallel=sp, flash_attention=flash, context_parallel=cp,
                            precision=precision, expert_parallel=ep, cross_entropy=cross_entropy,
                            elementwise=elementwise, expert_tensor_parallel=etp, embedding=embedding,
                            cast_passes=passes, expert_elementwise=experts, moe_dispatcher=dispatcher, router_dtype=router,
                            expert_precision=expert_precision,
                            attention_format=attention_format, attention_sinks=sinks)


_SHARES: dict = {}


def _recompute_shares(model: ModelConfig, policy: str, ops) -> np.ndarray:
    """Each forward layer op's selective-recompute share (:func:`cosearch.graph.recompute_share`,
    which reads an op's name and kind only); cached by the ops' names and kinds across the graphs
    of one model (every ep and microbatch size has the same ones)."""
    key = (model, policy, tuple((o.name, o.kind) for o in ops))
    out = _SHARES.get(key)
    if out is None:
        if len(_SHARES) > 512:
            _SHARES.clear()
        out = _SHARES[key] = np.array([graph.recompute_share(o, model, policy) for o in ops])
    return out


def _graph_stack(gs: dict) -> np.ndarray:
    """The six graphs' op rows one after another, in ``gs``'s key order."""
    return np.concatenate([gs[k].arrays() for k in gs])


def _price_sizes(lay: _CellLayout, base: np.ndarray, per_seq: np.ndarray, extra: np.ndarray, d: np.ndarray,
                 eff_row: np.ndarray, again: tuple[np.ndarray, np.ndarray]) -> tuple:
    """Price in one kernel call (:func:`cosearch._kernels.roofline.price_cell`) a cell's six graphs
    (``lay``: their :func:`_cell_layout`) at several microbatch sizes: size ``j``'s rows (stacked as
    :func:`_graph_stack` stacks them) are ``base + extra[j] * per_seq``.  Returns per (design, size,
    graph) the summed seconds, per (design, size) the seconds ``"selective"`` recomputation runs
    again (``again``: the layer-forward ops recomputed, as rows of the stack, and their shares,
    :func:`cosearch.graph.recompute_share`), the attention core's backward seconds, and the layer
    forward's and backward's seconds op by op (``d``: a checked design array, ``eff_row``: the
    efficiency row)."""
    nd, sizes = len(d), len(extra)
    ops_s = np.empty((nd, sizes, lay.n_ops))
    graph_s = np.empty((nd, sizes, len(lay.starts)))
    again_s, core_s = np.empty((nd, sizes)), np.empty((nd, sizes))
    kernel = roofline.price_cell if nd >= roofline.PARALLEL_MIN_DESIGNS else roofline.price_cell_serial
    kernel(base, per_seq, extra, d, eff_row, lay.starts, again[0], again[1], lay.core_b, ops_s, graph_s, again_s,
           core_s)
    return graph_s, again_s, core_s, ops_s[:, :, lay.lf:lay.lf + lay.nf], ops_s[:, :, lay.lb:lay.lb + lay.nb]


def cp_ring_bytes(model: ModelConfig, tp: int, mb: int, cp: int, kv_bytes: float | None = None) -> float:
    """Bytes one rank sends per forward ring step of context parallelism: the K and V of its
    ``seq_len / cp`` tokens for its ``kv_heads / tp`` heads, ``kv_bytes`` an element (None: the
    model's dtype; FP8 attention sends its quantized K and V, Transformer Engine's
    ``AttnFuncWithCPAndKVP2P`` ringing ``k_fp8._data`` and ``v_fp8._data``,
    ``attention/dot_product_attention/context_parallel.py`` at v2.12).  The backward sends K/V
    again and their gradients (in the model's dtype)."""
    kv = max(1, model.kv_heads // tp)
    b = model.dtype_bytes if kv_bytes is None else kv_bytes
    return 2.0 * mb * (model.seq_len // cp) * kv * model.head_dim * b


#: :data:`cosearch.graph.NETWORK_KINDS` as the kernels' codes (``COLL_*``)
_KIND_CODE = {"allreduce": F.COLL_ALLREDUCE, "allgather": F.COLL_ALLGATHER, "reducescatter": F.COLL_ALLGATHER,
              "alltoall": F.COLL_ALLTOALL}


def _collective_s(kind: str, nbytes: float, tp: int, net: np.ndarray, ep: int = 1, ep_stride: int | None = None,
                  route: tuple | None = None) -> float:
    """One collective of ``nbytes``: a tensor-parallel one over the tp adjacent ranks, an MoE
    all-to-all over the ep expert-parallel ranks ``ep_stride`` apart (tp; 1 under expert tensor
    parallelism 1, where every tp rank is an expert-parallel rank) — by NCCL, or with ``route``
    = (top-k, experts[, NVLink share]) by the ``flex`` dispatcher
    (:func:`cosearch._kernels.formulas.collective_s`; the share: :func:`flex_route`)."""
    k, experts, share = _route_parts(route)
    return F.collective_s(_KIND_CODE[kind], float(nbytes), float(tp), net, float(ep),
                          float(tp if ep_stride is None else ep_stride), float(k), float(experts), share)


def _route_parts(route: tuple | None) -> tuple[float, float, float]:
    if route is None:
        return 0.0, 0.0, F.FLEX_NVLINK_SHARE
    return float(route[0]), float(route[1]), float(route[2]) if len(route) > 2 else F.FLEX_NVLINK_SHARE


def flex_route(model: ModelConfig, engine: Engine) -> tuple | None:
    """How an MoE model's all-to-alls are priced under ``engine``: None (NCCL's) or the flex
    dispatcher's (top-k, experts, NVLink share of its backend: HybridEP's
    :data:`~cosearch._kernels.formulas.FLEX_NVLINK_SHARE` or DeepEP's
    :data:`~cosearch._kernels.formulas.FLEX_DEEPEP_NVLINK_SHARE`)."""
    if not model.moe or engine.moe_dispatcher != "flex":
        return None
    share = F.FLEX_DEEPEP_NVLINK_SHARE if engine.moe_flex_backend == "deepep" else F.FLEX_NVLINK_SHARE
    return (model.experts_per_token, model.num_experts, share)


def _op_bytes(op: graph.Op, scale: float) -> float:
    """A collective op's bytes at ``scale`` times the tokens its graph was built for (an amax
    all-reduce's do not grow with them: :func:`cosearch.graph.grows_with_tokens`)."""
    return op.bytes_read * scale if graph.grows_with_tokens(op) else op.bytes_read


class _CellLayout(NamedTuple):
    """Where things sit in a cell's six graphs ``gs`` (:func:`_graph_rows`), found once per
    (cached) dict: each graph's first row in :func:`_graph_stack`'s stacking, the layer forward's
    and backward's rows, the attention core's backward rows, and the collectives (every graph's,
    in ``gs``'s order) as :func:`cosearch._kernels.formulas.collectives_grid` reads them, with a
    (collectives, 6) matrix summing them into the six graphs' columns of :func:`_comm_rows`; the
    backward's collectives that ride beside a weight-gradient GEMM (:func:`_riding_beside_wgrad`,
    ``beside[False]``), then with the forward's all-gathers gathered again (:func:`_regathers`,
    ``beside[True]``), as (collective indices, the backward rows of the GEMMs they run beside);
    and per recompute policy, the layer-forward ops selective recompute runs again (rows of the
    stack) and their shares, filled as they are read."""
    starts: np.ndarray
    n_ops: int
    lf: int
    nf: int
    lb: int
    nb: int
    core_b: np.ndarray
    kinds: np.ndarray
    nbytes: np.ndarray
    grows: np.ndarray
    columns: np.ndarray
    beside: dict
    shares: dict


#: the graph columns of :func:`_comm_rows`, in order
_COMM_GRAPHS = (("layer", "fwd"), ("layer", "bwd"), ("embedding", "fwd"), ("embedding", "bwd"),
                ("head", "fwd"), ("head", "bwd"))
_LAYOUTS: dict = {}
_STACKS: dict = {}
#: the unit fields :func:`_comm_rows` fills, in its columns' order
_COMM_FIELDS = np.array([F.U_LTPF, F.U_LTPB, F.U_ETPF, F.U_ETPB, F.U_HTPF, F.U_HTPB, F.U_P2P_BYTES, F.U_P2P_GATHER])
#: the activation fields, linear in the microbatch: :func:`_per_sequence_bytes`'s five, then the host's
_ACT_FIELDS = np.array([F.U_ACT_NONE, F.U_ACT_SEL, F.U_ACT_IN, F.U_EACT, F.U_HACT, F.U_ACT_HOST])
#: the token scales a cell's collectives are priced at: one and two sequences (affine rows,
#: extrapolated to every microbatch size), or the graph's own microbatch
_SCALES = {True: np.array([1.0, 2.0]), False: np.array([1.0])}


def _cell_layout(gs: dict) -> _CellLayout:
    """:class:`_CellLayout` of ``gs``, memoised by identity (the dict kept: its id cannot be reused)."""
    hit = _LAYOUTS.get(id(gs))
    if hit is not None and hit[0] is gs:
        return hit[1]
    keys = list(gs)
    lens = [len(gs[k].ops) for k in keys]
    starts = np.concatenate([[0], np.cumsum(lens)[:-1]]).astype(np.int64)
    lf, lb = int(starts[keys.index(("layer", "fwd"))]), int(starts[keys.index(("layer", "bwd"))])
    bwd = gs["layer", "bwd"].ops
    core_b = np.array([lb + i for i, op in enumerate(bwd) if op.name.removesuffix(".grad") in graph.ATTENTION_CORE],
                      dtype=np.int64)
    kinds, nbytes, grows, col, where = [], [], [], [], {}
    for k in keys:
        g = gs[k]
        at = (i for i, op in enumerate(g.ops) if op.kind in graph.NETWORK_KINDS)   # g.collectives' ops, in order
        for i, (kind, b, grown) in zip(at, g.collectives):
            where[k, i] = len(kinds)
            kinds.append(_KIND_CODE[kind])
            nbytes.append(b)
            grows.append(grown)
            col.append(_COMM_GRAPHS.index(k))
    columns = np.zeros((len(kinds), len(_COMM_GRAPHS)))
    columns[np.arange(len(kinds)), col] = 1.0
    fg, bg = gs["layer", "fwd"], gs["layer", "bwd"]
    at = {id(op): i for i, op in enumerate(fg.ops)}
    riding = [(where[("layer", "bwd"), k], k - 1) for k in _riding_beside_wgrad(bg)]
    regathers = [(where[("layer", "fwd"), at[id(op)]], kd) for op, kd in _regathers(fg, bg)]
    beside = {with_regathers: tuple(np.array([x[i] for x in pairs], dtype=np.int64) for i in (0, 1))
              for with_regathers, pairs in ((False, riding), (True, riding + regathers))}
    lay = _CellLayout(starts, int(sum(lens)), lf, lens[keys.index(("layer", "fwd"))], lb, len(bwd), core_b,
                      np.array(kinds, dtype=np.int64), np.array(nbytes, dtype=np.float64), np.array(grows, dtype=np.bool_),
                      columns, beside, {})
    if len(_LAYOUTS) > 2048:
        _LAYOUTS.clear()
    _LAYOUTS[id(gs)] = (gs, lay)
    return lay


def _stacked_rows(g1: dict, g2: dict) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_graph_stack` of ``g1`` (one sequence) and the rows' change per sequence
    (``g2`` less ``g1``), memoised by the two dicts' identity."""
    key = (id(g1), id(g2))
    hit = _STACKS.get(key)
    if hit is not None and hit[0] is g1 and hit[1] is g2:
        return hit[2], hit[3]
    a1 = _graph_stack(g1)
    da = _graph_stack(g2) - a1
    if len(_STACKS) > 2048:
        _STACKS.clear()
    _STACKS[key] = (g1, g2, a1, da)
    return a1, da


def _cell_collectives(lay: _CellLayout, scales: np.ndarray, t: int, nets: np.ndarray, ep: int,
                      ep_stride: int | None, route: tuple | None) -> np.ndarray:
    """Every collective of a cell's graphs in seconds, (networks, ``scales``, collectives):
    :func:`_collective_s` of each at each token scale in one kernel call."""
    k, experts, share = _route_parts(route)
    out = np.empty((len(nets), len(scales), len(lay.kinds)))
    return F.collectives_grid(lay.kinds, lay.nbytes, lay.grows, scales, float(t), nets, float(ep),
                              float(t if ep_stride is None else ep_stride), float(k), float(experts), out, share)


def _comm_rows(graph_s: np.ndarray, t: int, sp: bool, nets, act_b: np.ndarray, scatter_gather: bool) -> np.ndarray:
    """Per token scale and distinct network, (scales, networks, 8): the six graphs' collective
    seconds (``graph_s``, (networks, scales, 6) in :data:`_COMM_GRAPHS`'s order), the pipeline
    send's bytes and its all-gather seconds after receipt (``act_b``: the activation's bytes at
    each scale)."""
    comm = np.zeros((len(act_b), len(nets), 8))
    comm[:, :, :6] = graph_s.transpose(1, 0, 2)
    # pipeline sends: Megatron scatters the activation over the tp ranks (each sends 1/tp)
    # and all-gathers it inside the node after receipt; without scatter/gather every tp
    # rank sends the whole activation
    comm[:, :, 6] = (act_b / t if (scatter_gather or sp) else act_b)[:, None]
    if not (sp or t == 1 or not scatter_gather):
        for j, b in enumerate(act_b):
            for ni, net in enumerate(nets):
                comm[j, ni, 7] = F.allgather_s(float(b), float(t), 1.0, net)
    return comm


def _dispatch_buffers(c: ModelConfig, eng: Engine, t: int, sp: bool, cp: int, ep: int, tp_split: bool,
                      mbs: np.ndarray, nets: np.ndarray) -> np.ndarray:
    """(networks, microbatch sizes): the bytes each rank allocates for the flex dispatcher's
    buffers (:func:`cosearch.memory.moe_dispatch_buffer_bytes`): its group is the tp x ep ranks
    where the experts are split over tp (``tp_split``; Megatron-Core's ``tp_ep_group``), else the
    ep ranks, in NVLink domains of the network's ranks a node; the dispatcher's input is this rank's
    tokens of a microbatch (its sequence-parallel share under tp)."""
    ranks = ep * (t if tp_split else 1)
    out = np.zeros((len(nets), len(mbs)))
    if ranks <= 1:
        return out
    local = max(1, c.num_experts // ep)
    share = t if sp and t > 1 else 1
    for i, net in enumerate(nets):
        cpn = int(net[F.N_CPN]) if net[F.N_CPN] > 0 else ranks
        _, q = F.group_layout(float(ep), float(t if tp_split else 1), net)
        sms = moe_comm_sms(eng, q > 1.0)
        for j, mb in enumerate(mbs):
            tokens = max(1, int(round(float(mb) * (c.seq_len // cp) / share)))
            out[i, j] = memory.moe_dispatch_buffer_bytes(eng.moe_flex_backend, c.hidden, tokens, ranks,
                                                         min(ranks, cpn), local, sms)
    return out


def _ep_overlap_parts(fwd: graph.LayerGraph, bwd: graph.LayerGraph, fwd_s: np.ndarray, bwd_s: np.ndarray,
                      a2a) -> np.ndarray:
    """The nine times :func:`cosearch._kernels.formulas.ep_overlap_pair_s` takes, from a MoE
    layer's forward and backward graphs priced op by op (``fwd_s``, ``bwd_s``: seconds per op,
    collectives 0) and ``a2a(op)``, an all-to-all op's seconds: (attention side forward,
    dispatch, experts, combine forward; combine backward, experts' data and weight gradients,
    dispatch backward, attention side backward).  Ops are split by name
    (:data:`cosearch.graph.MOE_EXPERT_OPS`): the dispatcher's tensor-parallel all-gather and
    reduce-scatter around the experts (``moe_allgather``, ``moe_reducescatter``: ``a2a(op)``
    prices them too) run in the experts' node; the layer's other collectives are added to its
    attention side by the caller (:func:`_expert_side_collectives_s` says what to leave out)."""
    out = np.zeros(9)
    for op, t in zip(fwd.ops, fwd_s):
        base = op.name.split(".")[0]
        if op.kind == "alltoall":
            out[1 if op.name == "moe_dispatch" else 3] += a2a(op)
        elif base in graph.MOE_EXPERT_OPS:
            out[2] += a2a(op) if op.kind in graph.NETWORK_KINDS else t
        else:
            out[0] += t
    for op, t in zip(bwd.ops, bwd_s):
        base = op.name.split(".")[0]
        if op.kind == "alltoall":
            out[7 if op.name.startswith("moe_dispatch") else 4] += a2a(op)
        elif base in graph.MOE_EXPERT_OPS:
            out[6 if op.name.endswith(".wgrad") else 5] += a2a(op) if op.kind in graph.NETWORK_KINDS else t
        else:
            out[8] += t
    return out


def _expert_side_collectives_s(fwd: graph.LayerGraph, bwd: graph.LayerGraph, coll) -> tuple[float, float]:
    """(forward, backward) seconds of the collectives :func:`_ep_overlap_parts` puts on the
    experts' side (``coll(op)``: a collective's seconds)."""
    return tuple(sum(coll(op) for op in g.ops if op.kind in graph.NETWORK_KINDS and op.kind != "alltoall"
                     and op.name.split(".")[0] in graph.MOE_EXPERT_OPS) for g in (fwd, bwd))


def _ep_overlap_save(parts: np.ndarray, tp_rest_f: float, tp_rest_b: float, sm_share: float) -> float:
    """Seconds one layer's paired forward and backward save under the EP all-to-all overlap:
    the nine :func:`_ep_overlap_parts` (the attention sides with the layer's other collectives,
    which run on the compute stream) one after another, less their two-stream schedule."""
    p = parts.copy()
    p[0] += tp_rest_f
    p[8] += tp_rest_b
    pair = F.ep_overlap_pair_s(*(float(x) for x in p), float(sm_share))
    return max(0.0, float(p.sum()) - pair)


def _async_tp_extra(tp_s: np.ndarray, hidden_by_s: np.ndarray, compute_s: np.ndarray) -> np.ndarray:
    """What asynchronous collectives without a collective matmul (``Engine.tp_overlap_kernel``
    ``"async"``) expose beyond the whole-layer rule of :func:`cosearch._kernels.formulas.layer_tp_seconds`
    (``max(0, TP - compute)``): the collectives ``tp_s`` hide only behind ``hidden_by_s`` of
    independent compute (the backward's weight-gradient GEMMs; none in the forward), so they
    show ``max(0, TP - hidden)``, at least what the whole-layer rule shows."""
    return np.maximum(tp_s - hidden_by_s, 0.0) - np.maximum(tp_s - compute_s, 0.0)


def _riding_beside_wgrad(g: graph.LayerGraph) -> tuple[int, ...]:
    """The ops of a backward layer graph that :func:`_rides_beside_wgrad`, found once per (cached) graph."""
    found = g.__dict__.get("_riding")
    if found is None:
        found = g.__dict__["_riding"] = tuple(k for k in range(len(g.ops)) if _rides_beside_wgrad(g, k))
    return found


def _rides_beside_wgrad(g: graph.LayerGraph, k: int) -> bool:
    """Whether op ``k`` of a backward layer graph is a data gradient's reduce-scatter or all-reduce
    that runs beside the weight-gradient GEMM just before it (a column-parallel linear's, which
    Megatron and Transformer Engine reduce asynchronously: ``Engine.async_dgrad_comm``)."""
    return (g.ops[k].kind in ("reducescatter", "allreduce") and k > 0
            and g.ops[k - 1].name.endswith(".wgrad") and not _dispatcher_collective(g.ops[k]))


def _dispatcher_collective(op: graph.Op) -> bool:
    """Whether a collective is an MoE dispatcher's own (:data:`cosearch.graph.MOE_DISPATCH_OPS`):
    NCCL calls on the compute stream inside the dispatcher (Megatron-Core's
    ``gather_from_sequence_parallel_region`` and its reduce-scatter, the all-to-alls), outside
    Transformer Engine's linears, so neither userbuffers nor the asynchronous data-gradient
    reduction overlaps them."""
    return op.name.split(".")[0] in graph.MOE_DISPATCH_OPS


#: A dense layer's sequence-parallel all-gathers and the column-parallel GEMM each feeds, whose
#: input Transformer Engine (``LayerNormLinear``, ``LayerNormMLP``) and Megatron's
#: ``ColumnParallelLinear`` keep sharded and gather again in the backward for the weight
#: gradient, beside the GEMM's data gradient ("Overlap input AG with dgrad"; under userbuffers
#: ``ub_bulk_dgrad``).  MoE blocks (the dispatcher keeps its permuted tokens) and MLA's down
#: projections (duplicated, on the rank's own rows) are not listed; MLA's up projections
#: (``LayerNormLinear`` on the gathered latents) are.
REGATHERED = {"allgather_attn": "qkv", "allgather_mlp": "fc1", "allgather_q_latent": "q_up",
              "allgather_kv_latent": "kv_up"}


def _regathers(fwd: graph.LayerGraph, bwd: graph.LayerGraph) -> list[tuple[graph.Op, int]]:
    """The forward all-gathers a backward gathers again (:data:`REGATHERED`), each with the index in
    ``bwd`` of the data-gradient GEMM it runs beside; found once per pair of (cached) graphs."""
    memo = fwd.__dict__.setdefault("_regathers", {})
    hit = memo.get(id(bwd))
    if hit is not None and hit[0] is bwd:      # the graph itself kept: its id cannot be reused
        return hit[1]
    out = _find_regathers(fwd, bwd)
    memo[id(bwd)] = (bwd, out)
    return out


def _find_regathers(fwd: graph.LayerGraph, bwd: graph.LayerGraph) -> list[tuple[graph.Op, int]]:
    names = [op.name for op in bwd.ops]
    out = []
    for k, op in enumerate(fwd.ops):
        gemm = REGATHERED.get(op.name)
        if op.kind != "allgather" or gemm is None:
            continue
        nxt = next((o for o in fwd.ops[k + 1:] if o.kind == "gemm"), None)
        if nxt is not None and nxt.name == gemm and gemm + ".dgrad" in names:
            out.append((op, names.index(gemm + ".dgrad")))
    return out


def _dgrad_beside_wgrad_shown(all_s: np.ndarray, riding_s: np.ndarray, beside_s: np.ndarray,
                              window_s: np.ndarray | None, share: float) -> np.ndarray:
    """Seconds a backward layer's collectives show under asynchronous data-gradient communication
    (``Engine.async_dgrad_comm``): ``all_s``, every collective second, less those that ride beside
    their weight-gradient GEMMs (:func:`_rides_beside_wgrad`; ``riding_s``, (designs, sizes,
    riding)), plus what :func:`cosearch._kernels.formulas.overlapped_exposed_s` leaves of each
    collective run beside a GEMM (``beside_s``: the riding ones, then any gathered again beside a
    data-gradient GEMM, :func:`_regathers`) beside that GEMM (``window_s``, the same shape; the
    kernels holding ``share`` of the SMs), or nothing where ``window_s`` is None (the least they
    can show: the lower-bound time models)."""
    out = all_s - riding_s.sum(axis=2)
    if window_s is not None:
        out = out + _overlapped_exposed(beside_s, window_s, share).sum(axis=2)
    return out


def _overlapped_exposed(comm_s: np.ndarray, window_s: np.ndarray, share: float) -> np.ndarray:
    """:func:`cosearch._kernels.formulas.overlapped_exposed_s` element by element over two
    equal-shaped arrays (one kernel call)."""
    c = np.ascontiguousarray(comm_s, dtype=np.float64)
    w = np.ascontiguousarray(window_s, dtype=np.float64)
    if c.size == 0:
        return np.zeros(c.shape)
    flat = c.reshape(-1, c.shape[-1])
    out = F.overlapped_exposed_grid(flat, w.reshape(flat.shape), float(share), np.empty(flat.shape))
    return out.reshape(c.shape)


def _userbuffers_exposed(g: graph.LayerGraph, op_s: np.ndarray, coll_s, tp: int, sms: float, phase: str) -> float:
    """Seconds a layer graph's collectives expose under Transformer Engine's userbuffers overlap
    (:func:`cosearch._kernels.formulas.userbuffers_exposed_s`): an all-gather rides on the next
    GEMM (ring exchange), a reduce-scatter on the previous one (pipelined in the forward; in the
    backward, beside the weight-gradient GEMM: bulk); an all-reduce or all-to-all is not
    overlapped.  ``op_s``: the ops' seconds (collectives 0); ``coll_s(op)``: a collective's."""
    ops = g.ops
    gemms = [i for i, op in enumerate(ops) if op.kind == "gemm"]
    out = 0.0
    for i, op in enumerate(ops):
        if op.kind not in graph.NETWORK_KINDS:
            continue
        c = coll_s(op)
        if _dispatcher_collective(op):
            j = None
        elif op.kind == "allgather":
            j = next((k for k in gemms if k > i), None)
            method = F.UB_RING
        elif op.kind == "reducescatter":
            j = next((k for k in reversed(gemms) if k < i), None)
            method = F.UB_PIPELINE if phase == "fwd" else F.UB_BULK
        else:
            j = None
        if j is None:
            out += c
        else:
            out += F.userbuffers_exposed_s(method, float(op_s[j]), c, float(tp), float(sms))
    return out


def _moe_rows_affine(c: ModelConfig, tp: int, sp: bool, cp: int, ep: int, local: bool) -> bool:
    """Whether an MoE layer graph's rows are affine in the microbatch: its experts' token count
    ``ceil(T k ep / E)`` (:func:`cosearch.graph.build`; ``T`` the tokens of one sequence on the
    rank's group: ``seq_len / cp``, and over tp as well when the experts are local) is a whole
    number at one sequence, so at every size."""
    T = c.seq_len // cp
    if local:
        if not sp or T % tp:
            return False
        T //= tp
    if (T * c.experts_per_token * ep) % c.num_experts:
        return False
    if c.moe_capacity_factor and not c.moe_einsum_dispatch:
        # a rank's capacity ceil(T k / E x factor) is linear in the sequences only when whole at one
        # (MaxText's per-sequence slots always are)
        from fractions import Fraction
        cap = Fraction(T * c.experts_per_token, c.num_experts) * Fraction(c.moe_capacity_factor).limit_denominator(10 ** 6)
        return cap.denominator == 1
    return True


#: The unit fields of one transformer layer (what a stage multiplies by its layer count): an
#: interleaved MoE model's layer unit is the mean of its MoE and dense layers' in these.
_LAYER_UNIT_FIELDS = (F.U_LF, F.U_LB, F.U_LATT, F.U_LTPF, F.U_LTPB, F.U_ACT_NONE, F.U_ACT_SEL, F.U_ACT_IN,
                      F.U_PL, F.U_PL_FULL, F.U_LCPF, F.U_LCPB, F.U_PLX, F.U_EPO, F.U_TPXF, F.U_TPXB, F.U_ACT_HOST)


def unit_costs(model: ModelConfig, designs, cluster: Cluster, tps: Sequence[int], microbatches: Sequence[int],
               sequence_parallel: Sequence[bool] = (False,), flash_attention: bool = False,
               efficiency=None, time_model: str = "sum", engine=None, context_parallel: int = 1,
               precision: str = "bf16", expert_parallel: int = 1,
               expert_tensor_parallel: int | None = None, scaling_recipe: str | None = None,
               fp8_attention: bool = False) -> np.ndarray:
    """(designs, tps, microbatches, sp options, :data:`~cosearch._kernels.formulas.UNIT_FIELDS`)
    array of per-unit seconds, bytes and parameters.

    ``designs``: an Accelerator (its own kernel efficiency) or a design array (``efficiency``,
    default ideal).  ``time_model``: ``"sum"`` (ops one after another, as a GPU runs them),
    ``"ilp"``/``"list"`` (per-layer schedule on the chip's units, :mod:`cosearch.schedule`) or
    ``"bound"`` (a valid lower bound on the ILP's layer times, vectorised over designs:
    :func:`cosearch.schedule.layer_bounds`) or ``"work-bound"`` (a weaker, far cheaper
    valid bound: :func:`cosearch.schedule.work_bounds`).  ``engine`` (:mod:`cosearch.engine`, default
    Megatron-LM) decides the pipeline sends: split over the tp ranks and all-gathered after
    receipt (both frameworks), or whole activations from every tp rank.
    ``context_parallel`` (cp): every unit is priced for this rank's ``seq_len / cp`` tokens, and
    the K/V ring's exposed time per layer (:func:`cosearch._kernels.formulas.ring_exposed_s`,
    overlapped with the layer's attention kernel) fills ``layer_cp_fwd_s``/``layer_cp_bwd_s``.
    ``precision``: ``"bf16"`` or ``"fp8"`` (the layer GEMMs on FP8 operands, :func:`graph.build`).
    ``expert_parallel`` (ep): an MoE model's experts over ep ranks (all-to-alls priced over them,
    ``layer_expert_params`` the experts' share of ``layer_params``).  ``expert_tensor_parallel``
    (None: each tp; 1: every tp rank an expert-parallel rank of its own, whole experts,
    :func:`cosearch.graph.build`): the experts' weights split over ep x etp ranks and their
    gradients reduced over the dp x cp x tp / (ep x etp) ranks holding the same ones.  With etp 1,
    a (tp > 1, no sequence parallelism) cell among cells with it is no plan (Megatron requires
    sequence parallelism there): every field of it is ``inf``.  ``scaling_recipe`` (None: the
    engine's default): the low-precision recipe, whose casts are priced as Transformer Engine
    runs them (:func:`cast_passes`).  ``fp8_attention`` (:attr:`PlanSpec.fp8_attention`): the
    fused attention on FP8 / MXFP8 operands, at the efficiency's speeds for the model's attention
    family (:meth:`cosearch.hardware.KernelEfficiency.with_fp8_attention`).
    """
    from .hardware import IDEAL
    if model.moe and model.dense_layer_count:
        # dense and MoE layers (interleaved, one MoE in moe_layer_step, or the first dense_layers
        # dense): a layer unit is their mean; the dense layers run without expert parallelism (ep
        # ranks are data-parallel there)
        args = (designs, cluster, tps, microbatches, sequence_parallel, flash_attention, efficiency, time_model,
                engine, context_parallel, precision)
        moe = unit_costs(model.with_(moe_layer_step=1, dense_layers=0), *args, expert_parallel,
                         expert_tensor_parallel, scaling_recipe, fp8_attention)
        dense = unit_costs(model.dense_counterpart(), *args, 1, None, scaling_recipe, fp8_attention)
        share = 1.0 - model.dense_layer_count / model.num_layers
        out = moe.copy()
        for f in _LAYER_UNIT_FIELDS:
            out[..., f] = share * moe[..., f] + (1.0 - share) * dense[..., f]
        # of the mean layer, not the mean of the two layers' (min is concave: theirs is smaller)
        return _tp_overlap_save(out, engine)
    single = isinstance(designs, Accelerator)
    eff = designs.efficiency if single and efficiency is None else (efficiency or IDEAL)
    eng = engine_preset(engine)
    passes = cast_passes(eng, precision, scaling_recipe, designs if single else None)
    expert_mode = expert_graph_option(eng)
    # the routed experts' GEMMs in bf16 under a low-precision plan (torchtitan's Float8 converter)
    expert_prec = "bf16" if eng.expert_precision == "bf16" and precision != "bf16" else None
    elementwise = graph_elementwise(eng, model)
    # Megatron-Core's attention projection keeps the attention's bf16 output, not its own cast,
    # under every recipe but delayed scaling (Engine.attn_proj_original_input)
    proj_cast = not (eng.attn_proj_original_input and precision in ("fp8", "fp4")
                     and graph.check_scaling_recipe(precision, scaling_recipe) != "delayed")
    # the framework's kernels, and the scaling recipe's GEMMs
    eff = eff.with_attention_kernel(eng.attention_kernel).with_cast_kernel(eng.fp8_cast_kernel).with_scaling_recipe(
        scaling_recipe if precision == "fp8" else None)
    attention_format = kv_bytes = attention_saved = None     # kv_bytes: the CP ring's K and V, an element
    if fp8_attention:
        check_fp8_attention(precision, scaling_recipe, flash_attention, "unit_costs")
        attention_format = fp8_attention_format(scaling_recipe)
        kv_bytes = graph.ATTENTION_FORMAT_BYTES[attention_format]     # FP8 attention rings its quantized K, V
        # and keeps its quantized Q, K, V (and under delayed scaling O) for the backward
        attention_saved = memory.fp8_attention_saved_bytes(
            attention_format, graph.check_scaling_recipe(precision, scaling_recipe))
        try:
            eff = eff.with_fp8_attention(attention_format, model.kv_heads < model.heads)
        except ValueError as e:
            raise ValueError(f"chip {designs.name}: {e}" if single else str(e)) from None
    if single:
        if designs.efficiency != eff:
            designs = designs.with_(efficiency=eff)
        d, nets = (a.copy() for a in _chip_rows(designs, cluster))   # (the cached rows kept intact)
        net_of = np.zeros(1, dtype=np.int64)
    else:
        d = design_array(designs)
        nets, net_of = _design_networks(d, eff, cluster)
    eff_row = eff.as_array()
    if time_model not in ("sum", "ilp", "list", "bound", "work-bound"):
        raise ValueError(f"unknown time_model {time_model!r}; choose 'sum', 'ilp', 'list', 'bound' or "
                         f"'work-bound'")
    scatter_gather = engine_preset(engine).pipeline_scatter_gather
    policy = engine_preset(engine).selective_recompute
    chips = None
    cp = graph.check_context_parallel(model, context_parallel, flash_attention)
    ep = graph.check_expert_parallel(model, expert_parallel)
    c = model
    cl = replace(model, seq_len=model.seq_len // cp) if cp > 1 else model  # this rank's tokens
    out = np.zeros((len(d), len(tps), len(microbatches), len(sequence_parallel), F.NU))
    norms = 2 * c.norm_params()
    # Under the "sum" model only the op rows matter, and every field of a dense model's graphs
    # is affine in the microbatch (token counts, bytes, batch of heads; weights constant), so the
    # graphs are built at microbatch 1 and 2 and the rows of any other size extrapolated
    # exactly (tests/test_modern_plans.py checks it against graphs built at that size).  MoE
    # graphs round tokens per expert up: they are affine too when one sequence already gives every
    # local expert a whole number of tokens (then every size does), else built at every size.
    affine_sum = time_model == "sum"
    experts, layer_all, norm1 = c.expert_layer_params(), c.layer_params(), c.norm_params()
    route = flex_route(c, eng)
    overlap = c.moe and ep > 1 and eng.overlap_moe_a2a
    mb_all = np.asarray(list(microbatches), dtype=np.float64)
    nb = len(mb_all)
    for ti, t in enumerate(tps):
        priced_sp: dict[bool, int] = {}
        for si, sp in enumerate(sequence_parallel):
            sp = bool(sp) and t > 1
            if sp in priced_sp:
                # the same cell as one already priced (sequence parallelism is off at tp 1)
                out[:, ti, :, si] = out[:, ti, :, priced_sp[sp]]
                continue
            priced_sp[sp] = si
            if (expert_tensor_parallel == 1 and t > 1 and not sp and any(sequence_parallel)) or \
                    uneven_sequence_split(eng, cl.seq_len, t, sp):
                # Megatron runs etp 1 under tp > 1 with sequence parallelism only, and splits a
                # sequence over the tp ranks only evenly: this cell is no plan (every field
                # infinite; the plan search's tables never read it)
                out[:, ti, :, si] = np.inf
                out[:, ti, :, si, F.U_EPO] = 0.0          # (what the work bound subtracts: kept infinite)
                continue
            # expert tensor parallelism: None (= tp) or 1; the all-to-alls' ranks are then adjacent
            etp_n = t if expert_tensor_parallel is None else graph.check_expert_tensor_parallel(
                c, expert_tensor_parallel, t, sp)
            etp_t = None if etp_n == t else etp_n
            ep_stride = None if etp_n == t else 1
            affine = affine_sum and (not c.moe or _moe_rows_affine(c, t, sp, cp, ep, etp_t is not None))
            # activation bytes are linear in the microbatch: priced for one sequence
            per_seq, host = _per_sequence_bytes(cl, t, sp, policy, bool(flash_attention), precision,
                                                expert_mode != "fused",
                                                c.moe and t > 1 and bool(sp) and etp_t is None
                                                and eng.moe_dispatcher != "gather-tokens" and not c.moe_einsum_dispatch,
                                                proj_cast, attention_saved, eng.loss_chunks, expert_prec == "bf16",
                                                c.moe and ep > 1)
            # affine: every microbatch size at once; otherwise one size at a time
            for bis in ([slice(None)] if affine else [slice(bi, bi + 1) for bi in range(nb)]):
                mbs = mb_all[bis]
                if affine:
                    g1 = _graph_rows(c, t, 1, sp, flash_attention, cp, precision, ep, eng.cross_entropy, elementwise,
                                     etp_t, eng.embedding, passes, expert_mode, eng.moe_dispatcher, attention_format,
                                     eng.router_dtype, expert_prec, eng.attention_sinks)
                    g2 = _graph_rows(c, t, 2, sp, flash_attention, cp, precision, ep, eng.cross_entropy, elementwise,
                                     etp_t, eng.embedding, passes, expert_mode, eng.moe_dispatcher, attention_format,
                                     eng.router_dtype, expert_prec, eng.attention_sinks)
                    # every microbatch size's rows of the six graphs, priced in one call: the rows at
                    # one sequence plus (size - 1) times their change per sequence
                    base, per_seq_rows = _stacked_rows(g1, g2)
                    extra = mbs - 1.0
                    gs = g1
                else:
                    gs = _graph_rows(c, t, int(mbs[0]), sp, flash_attention, cp, precision, ep, eng.cross_entropy,
                                     elementwise, etp_t, eng.embedding, passes, expert_mode, eng.moe_dispatcher,
                                     attention_format, eng.router_dtype, expert_prec, eng.attention_sinks)
                    base = _graph_stack(gs)
                    per_seq_rows, extra = np.zeros_like(base), np.zeros(1)
                lay = _cell_layout(gs)
                priced = None
                if time_model != "work-bound":
                    again = lay.shares.get(policy)
                    if again is None:
                        share = _recompute_shares(c, policy, gs["layer", "fwd"].ops)
                        pos = np.flatnonzero(share > 0)
                        again = lay.shares[policy] = (lay.lf + pos, share[pos].astype(np.float64))
                    priced = _price_sizes(lay, base, per_seq_rows, extra, d, eff_row, again)
                if priced is None:
                    attn = np.zeros((len(d), len(mbs)))   # selective recompute's time: at least nothing
                    attn_b = None                         # and the CP ring's exposed time too
                else:
                    sums, attn, attn_b, lf_ops, lb_ops = priced     # (designs, sizes[, graphs[, ops]])
                if time_model == "sum":
                    chip_s = {k: sums[:, :, i] for i, k in enumerate(gs)}
                elif time_model == "bound":
                    from . import schedule
                    chip_s = {k: schedule.layer_bounds(g, d, eff)[:, None] for k, g in gs.items()}
                elif time_model == "work-bound":
                    from . import schedule
                    chip_s = {k: schedule.work_bounds(g, d, eff)[:, None] for k, g in gs.items()}
                else:
                    from . import schedule
                    if chips is None:
                        chips = [designs] if single else [Accelerator.from_array(r, efficiency=eff) for r in d]
                    chip_s = {k: np.array([schedule.layer_time(g, ch, method=time_model).latency_s
                                           for ch in chips])[:, None] for k, g in gs.items()}
                u = out[:, ti, bis, si]                   # a view: (designs, sizes, fields)
                u[:, :, F.U_LF], u[:, :, F.U_LB] = chip_s["layer", "fwd"], chip_s["layer", "bwd"]
                u[:, :, F.U_LATT] = attn
                u[:, :, F.U_EF], u[:, :, F.U_EB] = chip_s["embedding", "fwd"], chip_s["embedding", "bwd"]
                u[:, :, F.U_HF], u[:, :, F.U_HB] = chip_s["head", "fwd"], chip_s["head", "bwd"]
                # a collective's time is affine in its bytes (latency + bytes / bandwidth; every
                # message here is non-empty), and the bytes are linear in the microbatch: priced at
                # one and two sequences and extrapolated, as the graphs are
                ab1 = cl.seq_len * c.hidden * c.dtype_bytes * c.hyper_connections   # one sequence's activation
                coll = _cell_collectives(lay, _SCALES[affine], t, nets, ep, ep_stride, route)   # (nets, scales, ops)
                graph_s = coll @ lay.columns
                if affine:
                    c1, c2 = _comm_rows(graph_s, t, sp, nets, _SCALES[True] * ab1, scatter_gather)
                    comm = c1[None] + (mbs - 1.0)[:, None, None] * (c2 - c1)[None]
                    # each collective's seconds per (design, size), extrapolated alike
                    coll_ds = (coll[:, :1] + (mbs - 1.0)[None, :, None] * (coll[:, 1:] - coll[:, :1]))[net_of]
                else:
                    comm = _comm_rows(graph_s, t, sp, nets, mbs[:1] * ab1, scatter_gather)
                    coll_ds = coll[net_of]                   # a non-affine graph holds its microbatch
                u[:, :, _COMM_FIELDS] = comm[:, net_of].transpose(1, 0, 2)
                # Three overlap rules expose more than the whole-layer rule of formulas.stage_terms:
                # Transformer Engine's userbuffers (each collective beside its own GEMM; no SP: none
                # hidden), asynchronous collectives without a collective matmul ("async": the
                # forward's whole, the backward's beyond the layer's weight-gradient GEMMs) and
                # Megatron's asynchronous data-gradient collectives ("dgrad-wgrad": each beside its
                # own weight-gradient GEMM, every other collective whole).  The lower-bound time
                # models keep the whole-layer rule, which exposes less, and for "dgrad-wgrad" what it
                # exposes at the least (every collective but the data-gradient ones)
                rule = eng.tp_overlap_rule
                exact = time_model not in ("bound", "work-bound") and priced is not None
                userbuffers = exact and rule == "userbuffers" and t > 1
                dgrad_wgrad = rule == "dgrad-wgrad"
                if (exact and rule == "async") or dgrad_wgrad:
                    # both rules expose the forward's collectives whole: nothing in a layer's
                    # forward runs beside them
                    u[:, :, F.U_TPXF] = _async_tp_extra(u[:, :, F.U_LTPF], 0.0, u[:, :, F.U_LF])
                if exact and rule == "async":
                    wgrad = [k for k, op in enumerate(gs["layer", "bwd"].ops) if op.name.endswith(".wgrad")]
                    w_b = lb_ops[:, :, wgrad].sum(axis=2)         # (designs, sizes)
                    u[:, :, F.U_TPXB] = _async_tp_extra(u[:, :, F.U_LTPB], w_b, u[:, :, F.U_LB])
                if dgrad_wgrad:
                    # the forward's collectives whole; the backward's data-gradient ones beside their
                    # weight-gradient GEMMs, except where the EP all-to-all overlap's paired schedule
                    # already runs the layer's other collectives on the compute stream (_ep_overlap_save)
                    slots = eff.tile_slots if single else 0
                    share_tp = min(1.0, NCCL_COLLECTIVE_CTAS / slots) if slots else 0.0
                    shown = u[:, :, F.U_LTPB]
                    if not (exact and overlap):
                        # (the column-parallel inputs gathered again beside their data-gradient GEMMs
                        # too, under sequence parallelism)
                        beside_c, beside_w = lay.beside[exact and sp]
                        shown = _dgrad_beside_wgrad_shown(shown, coll_ds[:, :, lay.beside[False][0]],
                                                          coll_ds[:, :, beside_c],
                                                          lb_ops[:, :, beside_w] if exact else None, share_tp)
                    u[:, :, F.U_TPXB] = np.maximum(shown - np.maximum(u[:, :, F.U_LTPB] - u[:, :, F.U_LB], 0.0), 0.0)
                if userbuffers or overlap:
                    fg, bg = gs["layer", "fwd"], gs["layer", "bwd"]
                    slots = eff.tile_slots if single else 0
                    # ub_bulk_dgrad: the column-parallel inputs gathered again in bulk beside their
                    # data-gradient GEMMs (found once for the cell's graphs)
                    regathers = _regathers(fg, bg) if userbuffers and sp and eng.async_dgrad_comm else []
                    for i in range(len(d)):
                        net = nets[net_of[i]]
                        if overlap:
                            _, q = F.group_layout(float(ep), float(t if ep_stride is None else ep_stride), net)
                            share = moe_comm_sms(eng, q > 1.0) / slots if slots else 0.0
                            if share >= 1.0:
                                raise ValueError(f"engine {eng.name!r}: its MoE communication kernels hold "
                                                 f"{moe_comm_sms(eng, q > 1.0)} SMs, the chip has {slots}")
                        for j, mb in enumerate(mbs):
                            scale = float(mb) if affine else 1.0      # gs holds one sequence when affine

                            def coll(op, net=net, scale=scale, t=t, stride=ep_stride):
                                return _collective_s(op.kind, _op_bytes(op, scale), t, net, ep, stride, route)
                            if userbuffers:
                                for f_x, f_c, f_t, g_, ops_s, ph in ((F.U_TPXF, F.U_LTPF, F.U_LF, fg, lf_ops, "fwd"),
                                                                     (F.U_TPXB, F.U_LTPB, F.U_LB, bg, lb_ops, "bwd")):
                                    whole = max(0.0, u[i, j, f_c] - u[i, j, f_t])
                                    new = (_userbuffers_exposed(g_, ops_s[i, j], coll, t, slots, ph) if sp
                                           else u[i, j, f_c])
                                    if ph == "bwd":
                                        new += sum(F.userbuffers_exposed_s(F.UB_BULK, float(ops_s[i, j, kd]), coll(op),
                                                                           float(t), float(slots))
                                                   for op, kd in regathers)
                                    u[i, j, f_x] = max(0.0, new - whole)
                            if overlap:
                                # EP all-to-all overlap (Engine.overlap_moe_a2a): what a paired forward
                                # and backward of a layer save (the ILP time models take it from the
                                # ops' serial prices); under the lower-bound time models, every
                                # all-to-all second (the most any overlap can hide), keeping the bound valid
                                a2a_all = sum(coll(op) for g in (fg, bg) for op in g.ops if op.kind == "alltoall")
                                if time_model in ("bound", "work-bound") or priced is None:
                                    u[i, j, F.U_EPO] = a2a_all
                                    continue
                                parts = _ep_overlap_parts(fg, bg, lf_ops[i, j], lb_ops[i, j], coll)
                                side_f, side_b = _expert_side_collectives_s(fg, bg, coll)
                                rest_f = u[i, j, F.U_LTPF] - parts[1] - parts[3] - side_f
                                rest_b = u[i, j, F.U_LTPB] - parts[4] - parts[7] - side_b
                                u[i, j, F.U_EPO] = min(a2a_all, _ep_overlap_save(parts, rest_f, rest_b, share))
                if cp > 1 and attn_b is not None:
                    ring = cp_ring_bytes(c, t, 1, cp, kv_bytes) * mbs     # linear in the microbatch
                    ring_b = ring + cp_ring_bytes(c, t, 1, cp) * mbs            # K/V again, and their gradients
                    idx = np.ascontiguousarray(net_of, dtype=np.int64)
                    grid = np.empty((len(d), len(mbs)))
                    u[:, :, F.U_LCPF] = F.ring_exposed_grid(ring, float(cp), float(t), np.ascontiguousarray(
                        attn, dtype=np.float64), nets, idx, grid)
                    u[:, :, F.U_LCPB] = F.ring_exposed_grid(ring_b, float(cp), float(t), np.ascontiguousarray(
                        attn_b, dtype=np.float64), nets, idx, grid)
                u[:, :, _ACT_FIELDS] = mbs[None, :, None] * np.array(per_seq + (host,))[None, None, :]
                if c.moe and eng.moe_dispatcher == "flex":
                    u[:, :, F.U_BUF] = _dispatch_buffers(c, eng, t, bool(sp), cp, ep, etp_t is None, mbs,
                                                         nets)[net_of]
                # the experts split over ep x etp ranks; formulas.stage_terms reduces their gradients
                # over the dp / U_EP ranks holding the same ones: U_EP = ep etp / tp
                u[:, :, F.U_PL] = (layer_all - experts - norms) / t + norms + experts / (etp_n * ep)
                u[:, :, F.U_PLX] = experts / (etp_n * ep)
                u[:, :, F.U_EP] = ep * etp_n / t
                u[:, :, F.U_PL_FULL] = u[:, :, F.U_PL]
                u[:, :, F.U_PE] = c.vocab * c.hidden / t + (c.seq_len * c.hidden if c.position == "learned" else 0)
                u[:, :, F.U_PH] = (norm1 + (0 if c.tie_embeddings else c.vocab * c.hidden / t) + c.extra_params)
                u[:, :, F.U_PTIED] = c.vocab * c.hidden / t if c.tie_embeddings else 0.0
                # multi-token prediction modules on the last stage (formulas.stage_terms): a layer
                # each, the output head again, plus the 2h -> h projection (2h / V of the head's
                # GEMM) and its three norms (Megatron-Core's enorm, hnorm, final_layernorm)
                u[:, :, F.U_MTP] = c.mtp_layers
                u[:, :, F.U_MTPT] = c.mtp_layers * (1.0 + 2.0 * c.hidden / c.vocab)
                u[:, :, F.U_MTPA] = c.mtp_layers
                u[:, :, F.U_PMTP] = c.mtp_layers * (2.0 * c.hidden * c.hidden / t + 3 * c.norm_params())
    return _tp_overlap_save(out, eng)


def _design_networks(d: np.ndarray, eff, cluster: Cluster) -> tuple[np.ndarray, np.ndarray]:
    """A checked design array's distinct networks' rows and each design's network: the network
    terms depend on a design only through its link bandwidth, so they are priced once per
    distinct link (a space with one link speed has one)."""
    links, first, net_of = np.unique(d[:, DESIGN_FIELDS.index("link_bandwidth_Bps")], return_index=True,
                                     return_inverse=True)
    nets = np.array([cluster.net_array(Accelerator.from_array(d[i], efficiency=eff)) for i in first])
    return nets.reshape(len(links), -1), np.asarray(net_of).reshape(-1)


@functools.lru_cache(maxsize=256)
def _chip_rows(chip: Accelerator, cluster: Cluster) -> tuple[np.ndarray, np.ndarray]:
    """One chip's checked design row and its network row, cached: the plan search prices the
    same chip once per option combination (callers copy the arrays)."""
    return design_array(chip.as_array()), cluster.net_array(chip).reshape(1, -1)


def _tp_overlap_save(units: np.ndarray, engine) -> np.ndarray:
    """``units`` with ``layer_tp_overlap_save_s`` set: the seconds of a layer's tensor-parallel
    collectives that an engine overlapping them (``overlap_tp_comm``) does not charge, forward
    plus backward — :func:`cosearch._kernels.formulas.stage_terms` charges
    :func:`~cosearch._kernels.formulas.layer_tp_seconds` (``max(0, TP - compute) + extra``)
    instead of ``TP`` (0 for other engines and in cells that are no plan).  :func:`cosearch._kernels.formulas.unit_work`
    subtracts it, which keeps every spread bound a lower bound under such engines.  At least 0:
    where a rule charges more than the layer's own collectives (the backward's re-gathers of
    :data:`REGATHERED`, counted in its extra term only), the bound keeps every collective second
    and no more, still below what the stage charges."""
    u = units
    save = np.zeros(u.shape[:-1])
    if engine_preset(engine).tp_overlap_rule:
        hw = np.zeros(F.NH)
        hw[F.H_TP_OVERLAP] = 1.0
        rows = np.moveaxis(u, -1, 0)
        with np.errstate(invalid="ignore"):
            tpf, tpb = F.layer_tp_seconds.py_func(rows, hw)
            save = np.maximum(rows[F.U_LTPF] + rows[F.U_LTPB] - tpf - tpb, 0.0)
        save[~np.isfinite(save)] = 0.0
    u[..., F.U_TPOS] = save
    return u


#: Low-precision training keeps, on top of the bf16 weights, Transformer Engine's copy of each
#: weight in the GEMM format and of its transpose (Hopper's FP8 GEMMs need both layouts;
#: MXFP8/NVFP4 keep row- and column-wise copies): 2 x the operand bytes per parameter.


def collective_sm_share(chip: Accelerator) -> float:
    """The share of ``chip``'s SMs an NCCL all-gather or reduce-scatter holds while it runs beside
    compute (:data:`cosearch.engine.NCCL_COLLECTIVE_CTAS` over the SMs, ``efficiency.tile_slots``);
    0 for a chip without an SM model (TPUs move data with their own DMA engines)."""
    slots = chip.efficiency.tile_slots
    if slots and slots <= NCCL_COLLECTIVE_CTAS:
        raise ValueError(f"chip {chip.name!r} has {slots} SMs (efficiency.tile_slots); NCCL's collectives hold "
                         f"{NCCL_COLLECTIVE_CTAS} while they run, which leaves none for the compute beside them")
    return NCCL_COLLECTIVE_CTAS / slots if slots else 0.0


def hw_row(chip_hbm_bytes: float, chip_mem_Bps: float, mem: memory.MemoryConfig, overlap_dp: bool,
           engine=None, precision: str = "bf16", offload_layers: int = 0, host_Bps: float = 32e9,
           comm_sm_share: float = 0.0, lowp_copies: int = 2, pipeline_microbatches: int = 0) -> np.ndarray:
    """The :data:`~cosearch._kernels.formulas.HW_FIELDS` row; the data-parallel reduction is
    overlapped when ``overlap_dp`` and the engine (:mod:`cosearch.engine`) both allow it;
    ``offload_layers`` of each stage send their activations to host memory at ``host_Bps``;
    ``comm_sm_share``: the share of the SMs overlapped data-parallel and FSDP collectives hold
    (:func:`collective_sm_share`; 0: no contention); ``lowp_copies``: the low-precision copies a
    cached weight keeps (:func:`low_precision_copies`); ``pipeline_microbatches``: the microbatches of
    one pass of a circular pipeline (:attr:`PlanSpec.pipeline_microbatches`; 0: all of a step's)."""
    e = engine_preset(engine)
    if lowp_copies not in (1, 2):
        raise ValueError(f"lowp_copies={lowp_copies!r}: a low-precision weight is kept as 1 or 2 copies")
    share = v.nonneg_float("comm_sm_share", comm_sm_share)
    if share >= 1.0:
        raise ValueError(f"comm_sm_share={comm_sm_share!r}: the collectives' share of the SMs must be below 1 "
                         "(the compute beside them needs some)")
    gred = mem.grad_bytes if e.grad_reduce_bytes is None else e.grad_reduce_bytes
    ob = graph.OPERAND_BYTES[precision]
    w, w8 = mem.weight_bytes, lowp_copies * ob
    if e.fp8_param_gather and precision == "fp8":
        # the FP8 row-wise copy is the parameter (gathered, written by the optimizer), the
        # column-wise one the extra copy (none where one copy serves both); no bf16 weight
        w, w8 = ob, (lowp_copies - 1) * ob
    return np.array([chip_hbm_bytes, w, mem.grad_bytes, mem.optimizer_bytes, chip_mem_Bps,
                     1.0 if (overlap_dp and e.overlap_grad_reduce) else 0.0, e.grad_accum_bytes, gred,
                     1.0 if e.blocking_p2p else 0.0, 1.0 if e.zero3_per_layer else 0.0,
                     1.0 if e.overlap_param_gather else 0.0,
                     w8, float(offload_layers), float(host_Bps),
                     1.0 if e.tp_overlap_rule else 0.0, 1.0 if e.full_grad_allreduce else 0.0,
                     1.0 if e.overlap_p2p_comm else 0.0, share,
                     float(e.pipeline_forwarding_delay) if e.pipeline_schedule == "circular" else 0.0,
                     float(pipeline_microbatches), float(e.recompute_layers)],
                    dtype=np.float64)


#: The scaling recipes whose FP8 tensors are scaled per tensor (Transformer Engine's
#: ``Float8Tensor``): on a chip whose FP8 GEMMs take every layout they are kept as one copy
#: (:attr:`cosearch.hardware.Accelerator.fp8_any_layout`)
PER_TENSOR_RECIPES = ("delayed", "tensorwise")


#: The scaling recipes Transformer Engine runs FP8 attention under: per-tensor scales (its
#: ``DotProductAttention`` "only supports DS and CS", ``attention/dot_product_attention/
#: dot_product_attention.py`` at v2.12) and MXFP8 (from v2.16, "Add MXFP8 attention",
#: NVIDIA/TransformerEngine#2719); blockwise FP8 and NVFP4 assert there.
FP8_ATTENTION_RECIPES = ("delayed", "tensorwise", "mxfp8")


def fp8_attention_format(scaling_recipe: str | None) -> str:
    """The format FP8 attention runs in under ``scaling_recipe`` (None: the engine's default, a
    per-tensor recipe): ``"mxfp8"`` under MXFP8, else ``"fp8"`` (per-tensor scales)."""
    return "mxfp8" if scaling_recipe == "mxfp8" else "fp8"


def check_fp8_attention(precision: str, scaling_recipe: str | None, flash_attention: bool, who: str) -> None:
    """Refuse FP8 attention where it does not run: it needs the FP8 precision under a recipe of
    :data:`FP8_ATTENTION_RECIPES` and the fused attention kernel (``flash_attention``)."""
    if precision != "fp8":
        raise ValueError(f"{who}: fp8_attention runs attention in FP8 under an FP8 recipe; the precision is "
                         f"{precision!r} (give precision 'fp8', or fp8_attention=False)")
    if scaling_recipe is not None and scaling_recipe not in FP8_ATTENTION_RECIPES:
        raise ValueError(f"{who}: fp8_attention under scaling_recipe {scaling_recipe!r}: Transformer Engine runs FP8 "
                         f"attention under {FP8_ATTENTION_RECIPES} only")
    if not flash_attention:
        raise ValueError(f"{who}: fp8_attention is a fused attention kernel: it needs flash_attention=True")


def low_precision_copies(chip, engine, precision: str, scaling_recipe: str | None = None) -> int:
    """How many low-precision copies of a tensor a cast writes and a cached FP8 weight keeps:
    one where Transformer Engine's per-tensor scaling (:data:`PER_TENSOR_RECIPES`) runs on a chip
    whose FP8 GEMMs take every layout (``chip.fp8_any_layout``: one copy serves the forward and
    the weight gradient), else two (the row-wise and the column-wise one).  ``chip``: an
    :class:`~cosearch.hardware.Accelerator`, or None (a searched design: two)."""
    eng = engine_preset(engine)
    if precision != "fp8" or eng.fp8_cast_kernel != "fused" or not getattr(chip, "fp8_any_layout", False):
        return 2
    return 1 if graph.check_scaling_recipe(precision, scaling_recipe) in PER_TENSOR_RECIPES else 2


def cast_passes(engine, precision: str, scaling_recipe: str | None = None, chip=None) -> str:
    """How a layer's low-precision casts run (:data:`cosearch.graph.CAST_PASSES`: one pass,
    delayed scaling's norm fusion, or an amax pass first) for ``precision`` under
    ``scaling_recipe`` (None: the engine's default) and the engine's cast kernels.  Under
    Transformer Engine's kernels (``fp8_cast_kernel="fused"``) the recipe decides
    (:data:`cosearch.graph.RECIPE_CAST_PASSES`; default ``delayed``, Megatron-LM's).  torchao's
    casts compiled by ``torch.compile`` (``"inductor"``) are per-tensor current scaling
    (``tensorwise``, the default there), whose amax reduction the engine's cast efficiency
    already prices (:meth:`cosearch.hardware.KernelEfficiency.with_cast_kernel`); another recipe
    is refused.  On ``chip`` (None: a searched design) its casts write the copies
    :func:`low_precision_copies` gives (one: the mode with :data:`cosearch.graph.ONE_COPY`)."""
    eng = engine_preset(engine)
    if eng.fp8_cast_kernel == "inductor":
        if precision == "fp4" or scaling_recipe not in (None, "tensorwise"):
            raise ValueError(f"engine {eng.name!r} prices torchao's Float8 casts (per-tensor current scaling, "
                             f"'tensorwise'); precision {precision!r} with scaling_recipe {scaling_recipe!r} is "
                             "not what it runs: use scaling_recipe='tensorwise' (or None) and precision 'fp8'")
        return "single"
    recipe = graph.check_scaling_recipe(precision, scaling_recipe)
    if recipe is None:
        return "single"
    one = low_precision_copies(chip, eng, precision, recipe) == 1
    return graph.RECIPE_CAST_PASSES[recipe] + (graph.ONE_COPY if one else "")


# ---------------------------------------------------------------------- validation
def check_precision(chip: Accelerator, precision: str, scaling_recipe: str | None = None) -> None:
    """Refuse FP8 on a chip without FP8 tensor cores, FP4 on one without FP4 ones, and MXFP8 on
    one without block-scaled tensor cores: Blackwell's fifth-generation tensor cores brought
    block-scaled MMA for MXFP8 and NVFP4 together (Transformer Engine requires compute capability
    10.0 for MXFP8), so a chip's FP4 tensor cores are taken as the mark."""
    v.choice("precision", precision, graph.PRECISIONS)
    if precision == "fp8" and scaling_recipe == "mxfp8" and chip.supports_fp8 and not chip.supports_fp4:
        raise ValueError(f"scaling_recipe='mxfp8': chip {chip.name} has no block-scaled tensor cores (MXFP8 needs "
                         "Blackwell's, as NVFP4 does: Transformer Engine requires compute capability 10.0); use a "
                         "per-tensor recipe ('delayed', 'tensorwise') or 'blockwise' on Hopper")
    if precision == "fp8" and not chip.supports_fp8:
        raise ValueError(f"precision='fp8': chip {chip.name} has no FP8 tensor cores (its kernel model has no "
                         "FP8 rate, its tensor unit no fp8_macs); use precision='bf16' or a chip with FP8 (H100, "
                         "H200, B200, GB200, GB300)")
    if precision == "fp4" and not chip.supports_fp4:
        raise ValueError(f"precision='fp4': chip {chip.name} has no NVFP4 tensor cores (its kernel model has no "
                         "FP4 rate, its tensor unit no fp4_macs); use a Blackwell chip (B200, GB200, GB300)")


def even_split(layers: int, pp: int, virtual_stages: int = 1) -> tuple[int, ...]:
    """Layers per stage, as even as possible in multiples of ``virtual_stages``; extra
    layers go to the middle stages first, then the last, then the first."""
    chunks = layers // virtual_stages
    base, extra = divmod(chunks, pp)
    counts = [base] * pp
    order = list(range(1, pp - 1)) + ([pp - 1] if pp > 1 else []) + [0]
    for s in order[:extra]:
        counts[s] += 1
    return tuple(x * virtual_stages for x in counts)


def check_spec(model: ModelConfig, cluster: Cluster, spec: PlanSpec, global_batch: int) -> PlanSpec:
    """Validate a spec against the model, cluster and batch; return it with ``stage_layers``
    filled in.  Raises ``ValueError`` naming the field and value."""
    if not isinstance(spec, PlanSpec):
        raise ValueError(f"spec must be a PlanSpec, got {type(spec).__name__}")
    B = v.positive_int("global_batch", global_batch, v.MAX_BATCH)
    L = model.num_layers
    if spec.chips > cluster.num_chips:
        raise ValueError(f"PlanSpec dp*tp*pp*cp = {spec.dp}*{spec.tp}*{spec.pp}*{spec.context_parallel} = "
                         f"{spec.chips} exceeds the cluster's {cluster.num_chips} chips")
    graph.check_context_parallel(model, spec.context_parallel, spec.flash_attention)
    graph.check_expert_parallel(model, spec.expert_parallel)
    if B % (spec.dp * spec.microbatch):
        raise ValueError(f"global_batch={B} is not divisible by dp*microbatch = {spec.dp}*{spec.microbatch}")
    if spec.pp > L:
        raise ValueError(f"PlanSpec.pp={spec.pp} exceeds the model's {L} layers")
    if model.heads % spec.tp or model.ffn_hidden % spec.tp or (model.kv_heads % spec.tp and model.kv_heads >= spec.tp):
        raise ValueError(f"PlanSpec.tp={spec.tp} must divide heads={model.heads} (and ffn_hidden="
                         f"{model.ffn_hidden}, kv_heads={model.kv_heads})")
    m = B // (spec.dp * spec.microbatch)
    vs = spec.virtual_stages
    if vs > 1 and m % spec.pp:
        raise ValueError(f"PlanSpec.virtual_stages={vs}: the interleaved schedule needs the {m} microbatches "
                         f"to be a multiple of pp={spec.pp}")
    sl = spec.stage_layers
    if sl is None:
        if L % vs or L // vs < spec.pp:
            raise ValueError(f"PlanSpec.virtual_stages={vs} does not divide the layers per stage "
                             f"({L} layers over pp={spec.pp})")
        sl = even_split(L, spec.pp, vs)
        if vs > 1 and (L // vs) % spec.pp:
            import warnings
            warnings.warn(f"{L} layers over pp={spec.pp} x virtual_stages={vs} do not split evenly: priced on the "
                          f"uneven split {list(sl)} (the slowest stage sets the step; Megatron needs the layers to be "
                          f"a multiple of pp x virtual stages)", stacklevel=3)
    else:
        if sum(sl) != L:
            raise ValueError(f"PlanSpec.stage_layers={list(sl)} sums to {sum(sl)}, not the model's {L} layers")
        # a given split may leave a stage's model chunks uneven by a layer — Megatron-Core's
        # account_for_embedding/loss_in_pipeline_split counts the embedding and the loss as
        # layers (Llama 3.1 405B: 126 layers + 2 over pp 8 x v 4 chunks of 4); each chunk
        # still needs a layer, less the one the embedding or loss stands in for
        bad = [x for s, x in enumerate(sl) if x < vs - (1 if s in (0, len(sl) - 1) else 0)]
        if bad:
            raise ValueError(f"PlanSpec.stage_layers={list(sl)}: with virtual_stages={vs} every stage needs at "
                             f"least {vs} layers (one per model chunk; the first and last stages one fewer)")
    step = model.moe_layer_step if model.moe else 1
    if step > 1 and spec.pp > 1 and any(x % (step * vs) for x in sl):
        import warnings
        warnings.warn(f"{model.name}: one layer in {step} is an MoE layer, and the stages {list(sl)} (x {vs} model "
                      f"chunks) do not all hold whole groups of {step}: each stage is priced with the mean layer, "
                      "off by at most one layer's MoE-dense difference", stacklevel=3)
    ca = model.compressed_attention
    if ca is not None and spec.pp > 1:
        per = ca.layer_core_flops(model.seq_len, model.heads, model.head_dim)
        mean = sum(per) / len(per)
        starts = np.cumsum((0,) + tuple(sl))
        off = max(abs(sum(per[a:b]) / (b - a) / mean - 1.0) for a, b in zip(starts[:-1], starts[1:]))
        import warnings
        warnings.warn(f"{model.name}: its layers' attention differs by kind (window, compressed sparse, heavily "
                      f"compressed) and every stage is priced with the mean layer; a stage's own attention cores "
                      f"differ from it by up to {off:.0%} (contiguous stages)", stacklevel=3)
    k0, k1 = spec.bf16_layers
    if k0 or k1:
        first, last = sl[0] // vs, sl[-1] // vs        # the layers of the first and the last model chunk
        if (spec.pp == 1 and k0 + k1 > L) or (spec.pp > 1 and (k0 > first or k1 > last)):
            raise ValueError(f"PlanSpec.bf16_layers={(k0, k1)}: the bf16 layers must lie in the first model chunk of "
                             f"the first stage and the last chunk of the last one, which hold {first} and {last} "
                             f"layers (stage_layers {list(sl)}, virtual_stages {vs}); give those stages more layers")
    return spec.with_(stage_layers=tuple(sl))


#: Dense FP8 peak over dense BF16 peak on every FP8 chip cosearch has: H100 SXM 1,979 / 989.5
#: TFLOP/s (NVIDIA H100 Tensor Core GPU datasheet), H200 the same, B200 4.5 / 2.25 PFLOP/s
#: (DGX B200 datasheet: 72 / 36 PFLOP/s for 8 GPUs), GB300 5 / 2.5 PFLOP/s (Blackwell Ultra).
#: ``Plan.mfu`` counts against the bf16 peak, as Megatron-Bridge's and NeMo's published MFUs do.
FP8_PEAK_OVER_BF16 = 2.0


# ---------------------------------------------------------------------- evaluate
def _model_flops(model: ModelConfig, tokens: float) -> float:
    return model.flops_per_token() * tokens


def recompute_flops(model: ModelConfig, spec: PlanSpec, tokens: float, engine: Engine | str | None = None) -> float:
    """FLOPs of the recomputed forward work per step (full: whole layers; selective: the
    attention scores and context, or under an engine whose selective recompute is
    ``"every-other-matmul"`` or ``"modules:..."`` the matmuls and attention it runs again,
    :func:`cosearch.graph.recompute_share`)."""
    c = model
    core = c.attention_core_flops_per_token()
    per_layer_full = 2.0 * (c.layer_params(active=True) - 2 * c.norm_params()) + core
    per_layer_sel = core
    policy = engine_preset(engine).selective_recompute
    if policy != "attention-core" and "selective" in spec.recompute_per_stage():
        g = graph.build(c, tp=1, microbatch=1, phase="fwd", part="layer", flash_attention=spec.flash_attention)
        per_layer_sel = sum(op.flops * graph.recompute_share(op, c, policy) for op in g.ops
                            if op.kind in ("gemm", "attention")) / c.seq_len
    out = 0.0
    for n, mode in zip(spec.stage_layers, spec.recompute_per_stage()):
        if mode == "full":
            out += n * per_layer_full
        elif mode == "selective":
            out += n * per_layer_sel
    return out * tokens


def _with_bf16_layers(u: np.ndarray, u_bf16: np.ndarray, hw: np.ndarray, spec: PlanSpec, s: int,
                      mode: str) -> np.ndarray:
    """Stage ``s``'s unit row with the bf16 layers it holds (:attr:`PlanSpec.bf16_layers`: the
    first stage the first ones, the last stage the last ones): what each takes beyond a layer in
    the plan's precision (``u_bf16``: the unit row of the same plan in bf16) — forward, backward,
    the recomputed forward under full recompute (counted in the backward) and the tensor-parallel
    seconds they expose (:func:`cosearch._kernels.formulas.layer_tp_seconds`) — added to the
    embedding's fields on the first stage and the head's on the last, which only those stages
    carry.  Their weights and saved activations are counted as the other layers'."""
    k0, k1 = spec.bf16_layers
    k = (k0 if s == 0 else 0) + (k1 if s == spec.pp - 1 else 0)
    if not k:
        return u
    df, db = u_bf16[F.U_LF] - u[F.U_LF], u_bf16[F.U_LB] - u[F.U_LB]
    tf16, tb16 = F.layer_tp_seconds(u_bf16, hw)
    tf, tb = F.layer_tp_seconds(u, hw)
    dtf, dtb = tf16 - tf, tb16 - tb
    extra_b = db + (df + dtf if mode == "full" else 0.0)
    out = u.copy()
    if s == 0:                     # the first stage (the only one, with pp 1) carries the embedding
        out[F.U_EF] += k * df
        out[F.U_EB] += k * extra_b
        out[F.U_ETPF] += k * dtf
        out[F.U_ETPB] += k * dtb
    else:                          # the last carries the head: its time counts 1 + U_MTPT times, its TP 1 + U_MTPA
        t, a = 1.0 + u[F.U_MTPT], 1.0 + u[F.U_MTPA]
        out[F.U_HF] += k * df / t
        out[F.U_HB] += k * extra_b / t
        out[F.U_HTPF] += k * dtf / a
        out[F.U_HTPB] += k * dtb / a
    return out


def plan_from_stages(model: ModelConfig, chip: Accelerator, cluster: Cluster, spec: PlanSpec, global_batch: int,
                     u: np.ndarray, net: np.ndarray, hw: np.ndarray, time_model: str = "sum",
                     engine: Engine | str | None = None, u_bf16: np.ndarray | None = None) -> Plan:
    """Price every stage of a validated spec with the shared njit stage formula (``u_bf16``: the
    same plan's unit row in bf16, for :attr:`PlanSpec.bf16_layers`)."""
    if any(spec.bf16_layers) and u_bf16 is None:
        raise ValueError("plan_from_stages: a spec with bf16_layers needs u_bf16, its unit row in bf16")
    m = global_batch // (spec.dp * spec.microbatch)
    out = np.zeros(F.NB)
    costs, mems, rows = [], [], []
    for s, (n, mode) in enumerate(zip(spec.stage_layers, spec.recompute_per_stage())):
        us = u if u_bf16 is None else _with_bf16_layers(u, u_bf16, hw, spec, s, mode)
        cst, mm = F.stage_terms(us, net, hw, float(n), s == 0, s == spec.pp - 1, s, spec.pp, spec.virtual_stages,
                                m, float(spec.weight_replicas), float(spec.tp), spec.zero, float(spec.shard_group),
                                _MODES.index(mode), out)
        costs.append(float(cst))
        mems.append(float(mm))
        rows.append(out.copy())
    crit = int(np.argmax(costs))
    step = costs[crit]
    tokens = global_batch * model.seq_len
    over = [s for s, mm in enumerate(mems) if mm > chip.hbm_bytes]
    peak = chip.peak_flops * cluster.num_chips
    common = dict(spec=spec, chips_used=spec.chips, num_chips=cluster.num_chips, num_microbatches=m,
                  memory_per_chip_bytes=tuple(mems), hbm_bytes=float(chip.hbm_bytes), critical_stage=crit,
                  time_model=time_model,
                  breakdown={k: float(rows[crit][i]) for i, k in enumerate(F.BREAKDOWN_FIELDS)})
    if over:
        worst = max(over, key=lambda s: mems[s])
        reason = (f"stage {worst} needs {mems[worst] / 2**30:.2f} GiB per chip but the chip has "
                  f"{chip.hbm_bytes / 2**30:.2f} GiB of HBM" + (f" ({len(over)} of {spec.pp} stages over)"
                                                              if len(over) > 1 else ""))
        return Plan(feasible=False, reason=reason, step_time_s=math.inf, tokens_per_s=0.0, samples_per_s=0.0,
                    mfu=0.0, hfu=0.0, **common)
    mflops = _model_flops(model, tokens)
    return Plan(feasible=True, reason="", step_time_s=step, tokens_per_s=tokens / step,
                samples_per_s=global_batch / step, mfu=mflops / (step * peak),
                hfu=(mflops + recompute_flops(model, spec, tokens, engine)) / (step * peak), **common)


def evaluate(model: ModelConfig | str, chip: Accelerator | str, cluster: Cluster | int, spec: PlanSpec,
             global_batch: int, *, mem: memory.MemoryConfig | None = None, overlap_dp: bool = True,
             time_model: str = "sum", engine: Engine | str | None = None) -> Plan:
    """Predicted step time, throughput, MFU, memory per stage and time breakdown of one plan.

    A plan that does not fit HBM returns ``feasible=False`` with the memory needed vs
    available; a spec that cannot run at all (more chips than the cluster has, a batch
    that does not divide, tp not dividing the heads, ...) raises ``ValueError``.
    ``engine``: the training framework's way of running the plan (an
    :class:`cosearch.engine.Engine` or its name; default Megatron-LM).
    """
    from .hardware import preset as chip_preset
    from .models import preset as model_preset
    model = model_preset(model)
    chip = chip_preset(chip)
    cluster = as_cluster(cluster)
    v.instances(mem=(mem, memory.MemoryConfig))
    v.flag("overlap_dp", overlap_dp)
    mem = mem or memory.MemoryConfig()
    spec = check_spec(model, cluster, spec, global_batch)
    engine = engine_preset(engine)
    check_features(engine, spec.virtual_stages, spec.context_parallel, spec.pp,
                   spec.expert_parallel if model.moe else 1, spec.recompute_per_stage())
    check_pipeline_schedule(engine, model, spec, global_batch)
    local_seq = model.seq_len // spec.context_parallel
    if uneven_sequence_split(engine, local_seq, spec.tp, spec.sequence_parallel):
        what = "each context-parallel rank's share of a sequence" if spec.context_parallel > 1 else "each sequence"
        raise ValueError(f"sequence parallelism splits {what} ({local_seq} tokens) over tp {spec.tp} ranks, which "
                         f"engine {engine.name!r} does only evenly (Megatron's _split_along_first_dim); choose a tp "
                         "that divides it, or no sequence parallelism")
    check_precision(chip, spec.precision, spec.scaling_recipe)

    def units(precision: str, recipe: str | None, fp8_attention: bool) -> np.ndarray:
        return unit_costs(model, chip, cluster, (spec.tp,), (spec.microbatch,), (spec.sequence_parallel,),
                          spec.flash_attention, time_model=time_model, engine=engine,
                          context_parallel=spec.context_parallel, precision=precision,
                          expert_parallel=spec.expert_parallel,
                          expert_tensor_parallel=spec.expert_tensor_parallel, scaling_recipe=recipe,
                          fp8_attention=fp8_attention)[0, 0, 0, 0]
    u = units(spec.precision, spec.scaling_recipe, spec.fp8_attention)
    u_bf16 = units("bf16", None, False) if any(spec.bf16_layers) else None     # the plan's bf16 layers
    hw = hw_row(chip.hbm_bytes, chip.hbm_bandwidth_Bps * chip.efficiency.memory, mem, overlap_dp, engine,
                spec.precision, spec.offload_layers, chip.host_link_Bps, collective_sm_share(chip),
                low_precision_copies(chip, engine, spec.precision, spec.scaling_recipe),
                spec.pipeline_microbatches or 0)
    return plan_from_stages(model, chip, cluster, spec, int(global_batch), u, cluster.net_array(chip), hw,
                            time_model, engine, u_bf16)


def circular_pipeline_conditions(num_layers, mtp_layers, pp, virtual_stages, microbatches, delay) -> dict:
    """The conditions MaxText's circular pipeline puts on a plan of ``pp`` stages, each holding
    ``virtual_stages`` chunks, with ``microbatches`` a pass and forwarding ``delay`` (1 or 2),
    each true where it holds: ``"chunks"`` (stages x repeats divide the layers), ``"multiple"``
    (the microbatches a multiple of the stages), ``"delay"`` (at least 2 x stages of them under the
    delayed forwarding), ``"mtp"`` (no multi-token-prediction module).  Scalars or NumPy arrays
    alike: :func:`check_pipeline_schedule` refuses a plan by the first that fails,
    :func:`cosearch.placement.circular_configurations` keeps the search's rows where all hold."""
    return {"chunks": num_layers % (pp * virtual_stages) == 0, "multiple": microbatches % pp == 0,
            "delay": (microbatches >= 2 * pp) | (delay < 2), "mtp": mtp_layers == 0}


def check_pipeline_schedule(engine: Engine | str | None, model: ModelConfig, spec: PlanSpec, global_batch: int) -> None:
    """Refuse a plan its engine's pipeline schedule (:attr:`cosearch.engine.Engine.pipeline_schedule`)
    cannot run.  1F1B runs a step's microbatches in one pass (no ``pipeline_microbatches``).
    MaxText's circular pipeline: every stage holds the same number of layers, ``virtual_stages``
    (its repeats) chunks of them (``num_layers_per_pipeline_stage`` each: stages x repeats x that =
    the layers); a pass's microbatches (``pipeline_microbatches``, default all of the step's)
    divide the step's and are a multiple of pp; no multi-token-prediction module (it would sit
    outside the loop, not modelled)."""
    e = engine_preset(engine)
    if e.pipeline_schedule != "circular":
        if spec.pipeline_microbatches is not None:
            raise ValueError(f"PlanSpec.pipeline_microbatches={spec.pipeline_microbatches}: engine {e.name!r} runs a "
                             "1F1B pipeline, one pass of every microbatch a step; passes are MaxText's circular "
                             "schedule's (an engine with pipeline_schedule='circular')")
        return
    if spec.pp == 1:
        return
    m = int(global_batch) // (spec.dp * spec.microbatch)
    mp = spec.pipeline_microbatches or m
    if m % mp:
        raise ValueError(f"PlanSpec.pipeline_microbatches={mp} does not divide the step's {m} microbatches")
    L, vs = model.num_layers, spec.virtual_stages
    ok = circular_pipeline_conditions(L, model.mtp_layers, spec.pp, vs, mp, e.pipeline_forwarding_delay)
    if not ok["multiple"]:
        raise ValueError(f"engine {e.name!r} runs MaxText's circular pipeline, whose {mp} microbatches a pass must be "
                         f"a multiple of pp={spec.pp} (num_pipeline_microbatches divisible by the stages)")
    if not ok["delay"]:
        raise ValueError(f"engine {e.name!r} delays the pipeline's forwarding, which needs at least 2 x pp = "
                         f"{2 * spec.pp} microbatches a pass (MaxText asserts it), got {mp}")
    if not ok["chunks"] or (spec.stage_layers is not None and len(set(spec.stage_layers)) > 1):
        raise ValueError(f"engine {e.name!r} runs MaxText's circular pipeline: every one of the pp={spec.pp} stages "
                         f"holds virtual_stages={vs} equal chunks, so pp x virtual_stages must divide the {L} layers "
                         "and stage_layers be even")
    if not ok["mtp"]:
        raise ValueError(f"engine {e.name!r}: a circular pipeline with {model.name}'s multi-token prediction module "
                         "is not modelled")
