"""The exact plan search: the best training plans of a model on a chip in a cluster.

:func:`search_plans` enumerates every configuration of the option space — tensor
parallelism, microbatch, sequence parallelism, data parallelism, pipeline stages,
interleaved virtual stages and ZeRO stage, with ``dp * tp * pp <= chips`` and
``dp * microbatch`` dividing the global batch — and, for each, finds the best layer
split and per-stage recompute mode exactly (:mod:`cosearch._kernels.dp`).  Every cost
comes from the njit stage formula that :func:`cosearch.plan.evaluate` uses, and the
returned :class:`~cosearch.plan.Plan` objects are built by that same code, so the best
plan's step time equals ``evaluate`` of its spec.
"""

from __future__ import annotations

import functools
import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import _validate as v
from . import memory
from ._kernels import formulas as F
from .cluster import Cluster, as_cluster
from .engine import Engine, check_features, check_interleaving
from .engine import preset as engine_preset
from .hardware import DESIGN_FIELDS, Accelerator
from .models import ModelConfig
from .plan import (
    Plan,
    PlanSpec,
    collective_sm_share,
    hw_row,
    low_precision_copies,
    plan_from_stages,
    unit_costs,
)

__all__ = ["search_plans", "PlacementResult", "default_tps", "divisors", "DEFAULT_VIRTUAL"]

divisors = v.divisors

#: Interleaving degrees tried by default (those dividing the layer count).
DEFAULT_VIRTUAL = (1, 2, 3, 4, 6, 8)


def default_tps(model: ModelConfig, chips: int, candidates: Sequence[int] = (1, 2, 4, 8, 16, 32)) -> list[int]:
    """Tensor-parallel degrees that divide the heads and MLP width and fit in ``chips``."""
    from .models import model_arg
    model = model_arg(model, "default_tps")
    chips = v.positive_int("chips", chips)
    if isinstance(candidates, (str, bytes)) or not isinstance(candidates, (list, tuple, range)):
        raise ValueError(f"default_tps: candidates must be a sequence of tensor-parallel degrees, got {candidates!r:.60}")
    candidates = [v.positive_int("candidates", t) for t in candidates]
    out = [t for t in candidates if t <= chips and model.heads % t == 0 and model.ffn_hidden % t == 0
           and (model.kv_heads % t == 0 or model.kv_heads < t)]
    return out or [1]


@dataclass(frozen=True)
class PlacementResult:
    """Best plans (best first).  When nothing fits, ``plans`` is empty, ``reason`` says
    why and ``min_memory_needed_bytes`` is a lower bound on the per-chip memory of any
    plan in the option space."""

    plans: tuple[Plan, ...]
    reason: str = ""
    min_memory_needed_bytes: float = 0.0
    configurations: int = 0
    evaluated: int = 0
    cut_off: bool = False

    @property
    def feasible(self) -> bool:
        return bool(self.plans)

    @property
    def best(self) -> Plan:
        if not self.plans:
            raise ValueError(f"no feasible plan: {self.reason}")
        return self.plans[0]

    def to_dict(self) -> dict[str, Any]:
        return {"plans": [p.to_dict() for p in self.plans], "reason": self.reason,
                "min_memory_needed_bytes": self.min_memory_needed_bytes,
                "configurations": self.configurations, "evaluated": self.evaluated}


def _bools(name: str, x, default) -> tuple[bool, ...]:
    if x is None:
        return default
    vals = v.values_of(name, x, (bool, np.bool_))
    if not vals or any(not isinstance(b, (bool, np.bool_)) for b in vals):
        raise ValueError(f"{name} must be True, False or a list of them, got {x!r}")
    return tuple(sorted({bool(b) for b in vals}))


def _virtuals_and_zeros(virtual_stages, zero, engine=None) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The virtual-stage counts and ZeRO stages a plan option names (None: all the engine runs)."""
    engine = engine_preset(engine)
    if virtual_stages is None:
        virt = (1,) if engine.blocking_p2p else DEFAULT_VIRTUAL
    else:
        virt = v.int_list("virtual_stages", virtual_stages)
        check_interleaving(engine, max(virt))
    if zero is None:
        return virt, engine.zero_stages
    zeros = v.values_of("zero", zero, (int, np.integer))
    for z in zeros:
        if isinstance(z, bool) or z not in (0, 1, 2, 3):
            raise ValueError(f"zero must be 0, 1, 2 or 3 (or a list of them), got {zero!r}")
    return virt, zeros


def _modes(recompute) -> np.ndarray:
    if recompute is None:
        rc = F.RECOMPUTE_MODES
    else:
        rc = v.values_of("recompute", recompute, (str,))
    if not rc:
        raise ValueError("recompute must name at least one mode")
    for r in rc:
        v.choice("recompute", r, F.RECOMPUTE_MODES)
    return np.array([m in rc for m in F.RECOMPUTE_MODES], dtype=np.bool_)


def configurations(model: ModelConfig, chips: int, global_batch: int, tps, mbs, sps, virtuals, zeros,
                   cp: int = 1, zero_groups=(None,), ep: int = 1, ep_mode: int = 0) -> np.ndarray:
    """The configuration table (rows of :data:`cosearch._kernels.dp.CFG_FIELDS`) for one
    context-parallel degree ``cp``; the same for every chip, so cached (a read-only array).
    ``zero_groups``: ZeRO sharding groups to try (None: all ``dp * cp`` ranks; a group that
    does not divide ``dp * cp`` is skipped for that dp; ZeRO-0 ignores them).  ``ep``: the
    expert-parallel degree, which must divide ``dp * cp`` — or ``dp * cp * tp`` with expert
    tensor parallelism 1 (``ep_mode``, :data:`cosearch._kernels.dp.EP_IN_DP` ...)."""
    return _configurations(model.num_layers, int(chips), int(global_batch), tuple(tps), tuple(mbs),
                           tuple(bool(x) for x in sps), tuple(virtuals), tuple(zeros), int(cp), tuple(zero_groups),
                           int(ep), int(ep_mode))


def table_lower_bound(units: np.ndarray, model: ModelConfig, chips: int, global_batch: int, tps, mbs, sps,
                      virtuals, cp: int = 1, ep: int = 1, ep_mode: int = 0) -> float:
    """A lower bound on the step time of every row of :func:`configurations` (any ZeRO stages and
    groups) priced on ``units`` (:func:`cosearch._kernels.dp.table_lower_bound`)."""
    from ._kernels import dp as kernel
    return float(kernel.table_lower_bound(
        units, int(model.num_layers), int(chips), int(global_batch), np.array(tps, dtype=np.int64),
        np.array(mbs, dtype=np.int64), np.array([bool(x) for x in sps], dtype=np.bool_),
        np.array(divisors(global_batch), dtype=np.int64), np.array(virtuals, dtype=np.int64), int(cp), int(ep),
        int(ep_mode)))


def count_configurations(model: ModelConfig, chips: int, global_batch: int, tps, mbs, sps, virtuals, zeros,
                         cp: int = 1, zero_groups=(None,), ep: int = 1, ep_mode: int = 0) -> int:
    """The number of rows :func:`configurations` has, without building the table."""
    return _count_configurations(model.num_layers, int(chips), int(global_batch), tuple(tps), tuple(mbs),
                                 tuple(bool(x) for x in sps), tuple(virtuals), tuple(zeros), int(cp),
                                 tuple(zero_groups), int(ep), int(ep_mode))


@functools.lru_cache(maxsize=256)
def _count_configurations(L, chips, global_batch, tps, mbs, sps, virtuals, zeros, cp=1, zero_groups=(None,),
                          ep=1, ep_mode=0) -> int:
    from ._kernels import dp as kernel
    args = _config_args(L, chips, global_batch, tps, mbs, sps, virtuals, zeros, cp, zero_groups, ep, ep_mode)
    return int(kernel._config_rows(*args, np.zeros((len(tps), len(mbs), len(sps))), np.inf,
                                   np.zeros((0, 11), dtype=np.int64)))


@functools.lru_cache(maxsize=64)
def _configurations(L: int, chips: int, global_batch: int, tps, mbs, sps, virtuals, zeros, cp=1,
                    zero_groups=(None,), ep=1, ep_mode=0) -> np.ndarray:
    out = _build_configurations(L, chips, global_batch, tps, mbs, sps, virtuals, zeros, cp, zero_groups, ep,
                                ep_mode=ep_mode)
    out.setflags(write=False)
    return out


def _groups(zero: int, replicas: int, zero_groups) -> list[int]:
    if zero == 0:
        return [replicas]
    out = sorted({replicas if g is None else int(g) for g in zero_groups
                  if g is None or (int(g) <= replicas and replicas % int(g) == 0)})
    return out


def _build_configurations(L, chips, global_batch, tps, mbs, sps, virtuals, zeros, cp=1,
                          zero_groups=(None,), ep=1, work=None, kth=math.inf, ep_mode=0) -> np.ndarray:
    from ._kernels import dp as kernel
    args = _config_args(L, chips, global_batch, tps, mbs, sps, virtuals, zeros, cp, zero_groups, ep, ep_mode)
    args += (np.zeros((len(tps), len(mbs), len(sps))) if work is None else work, float(kth))
    n = kernel._config_rows(*args, np.zeros((0, 11), dtype=np.int64))
    out = np.empty((n, 11), dtype=np.int64)
    kernel._config_rows(*args, out)
    return out


def admissible_configurations(model: ModelConfig, chips: int, global_batch: int, tps, mbs, sps, virtuals, zeros,
                              cp: int, zero_groups, ep: int, units: np.ndarray, kth: float,
                              ep_mode: int = 0) -> np.ndarray:
    """The rows of :func:`configurations` whose spread bound (:func:`cosearch._kernels.dp.lower_bound`
    on ``units``, (tps, mbs, sps, fields)) is at most ``kth``, in the table's order, built
    without the others (not cached: it depends on the units)."""
    work = np.ascontiguousarray(_unit_work(units, model), dtype=np.float64)
    return _build_configurations(model.num_layers, int(chips), int(global_batch), tuple(tps), tuple(mbs),
                                 tuple(bool(x) for x in sps), tuple(virtuals), tuple(zeros), int(cp),
                                 tuple(zero_groups), int(ep), work, kth, int(ep_mode))


def _config_args(L, chips, global_batch, tps, mbs, sps, virtuals, zeros, cp, zero_groups, ep, ep_mode=0) -> tuple:
    """The arguments of :func:`cosearch._kernels.dp._config_rows` but its output."""
    dps = np.array(divisors(global_batch), dtype=np.int64)
    zz_z, zz_g, start = [], [], [0]
    for dp in dps:
        for z in zeros:
            for zg in _groups(z, int(dp) * cp, zero_groups):
                zz_z.append(z)
                zz_g.append(zg)
        start.append(len(zz_z))
    return (int(L), int(chips), int(global_batch), np.array(tps, dtype=np.int64), np.array(mbs, dtype=np.int64),
            np.array(sps, dtype=np.bool_), dps, np.array(virtuals, dtype=np.int64), np.array(zz_z, dtype=np.int64),
            np.array(zz_g, dtype=np.int64), np.array(start, dtype=np.int64), int(cp), int(ep), int(ep_mode))


def _option_list(name: str, x, default: tuple, check) -> tuple:
    if x is None:
        return default
    vals = v.values_of(name, x)
    if not vals:
        raise ValueError(f"{name} must name at least one value")
    return tuple(dict.fromkeys(check(name, val) for val in vals))


def _check_group(name: str, g):
    return None if g is None else v.positive_int(name, g, v.MAX_CHIPS)


def ep_mode_of(etp: int | None, with_default: bool = False) -> int:
    """Where the expert-parallel group of expert tensor parallelism ``etp`` lives in the
    configuration table (:data:`cosearch._kernels.dp.EP_IN_DP` ...): inside the data-parallel
    ranks (None: etp = tp), or spanning the tp ranks too (etp 1) — then without tp 1 when the
    default's table is searched beside it (``with_default``: tp 1 gives the same plans)."""
    from ._kernels import dp as kernel
    if etp is None:
        return kernel.EP_IN_DP
    return kernel.EP_OVER_TP_ONLY if with_default else kernel.EP_OVER_TP


@dataclass(frozen=True)
class _Options:
    """The validated option space of one :func:`search_plans` call (what its phases share)."""

    model: ModelConfig
    chip: Accelerator
    cluster: Cluster
    global_batch: int
    top_k: int
    mem: memory.MemoryConfig
    engine: Engine
    flash_attention: bool
    tps: tuple
    mbs: tuple
    sps: tuple
    virt: tuple
    zeros: tuple
    modes: np.ndarray
    cps: tuple
    precs: tuple
    groups: tuple
    eps: tuple
    etps: tuple = (None,)
    scaling_recipe: str | None = None
    fp8_attention: bool = False

    def recipe(self, precision: str) -> str | None:
        """The scaling recipe of this search's plans in ``precision`` (None under bf16)."""
        return None if precision == "bf16" else self.scaling_recipe

    def fp8_attention_in(self, precision: str) -> bool:
        """Whether this search's plans in ``precision`` run FP8 attention (its FP8 plans only)."""
        return self.fp8_attention and precision == "fp8"

    def ep_mode(self, etp: int | None) -> int:
        """:func:`ep_mode_of` ``etp`` among this search's expert-tensor-parallel degrees."""
        return ep_mode_of(etp, None in self.etps)

    def combinations(self) -> list[tuple[int, str, int, int | None, int]]:
        """(cp, precision, ep, etp, configurations in its table) of every option combination
        with a configuration."""
        out = []
        for c in self.cps:
            for e in self.eps:
                for et in self.etps:
                    n_cfg = (len(self.table(c, e, et)) if self.engine.pipeline_schedule == "circular" else
                             count_configurations(self.model, self.cluster.num_chips, self.global_batch, self.tps,
                                                  self.mbs, self.sps, self.virt, self.zeros, c, self.groups, e,
                                                  self.ep_mode(et)))
                    out += [(c, p, e, et, n_cfg) for p in self.precs if n_cfg]
        return out

    def table(self, c: int, e: int, etp: int | None = None) -> np.ndarray:
        cfg = configurations(self.model, self.cluster.num_chips, self.global_batch, self.tps, self.mbs, self.sps,
                             self.virt, self.zeros, c, self.groups, e, self.ep_mode(etp))
        return (circular_configurations(cfg, self.model, self.engine.pipeline_forwarding_delay)
                if self.engine.pipeline_schedule == "circular" else cfg)


def circular_configurations(cfg: np.ndarray, model: ModelConfig, delay: int = 1) -> np.ndarray:
    """The rows of a configuration table (:func:`configurations`) MaxText's circular pipeline can
    run, one pass of every microbatch: without a pipeline, or where every one of
    :func:`cosearch.plan.circular_pipeline_conditions` holds (the conditions
    :func:`cosearch.plan.check_pipeline_schedule` refuses a plan by) — ``pp x virtual_stages``
    dividing the layers (every stage the same chunks; the plan search's split is then the even
    one, every stage's cost the same function of its layers), the microbatches a multiple of pp,
    at least 2 x pp of them under the forwarding ``delay`` 2, no multi-token-prediction module."""
    from ._kernels import dp as kernel
    from .plan import circular_pipeline_conditions
    pp, vs, m = cfg[:, kernel.C_PP], cfg[:, kernel.C_V], cfg[:, kernel.C_M]
    keep = pp == 1
    holds = np.ones(len(cfg), dtype=bool)
    for ok in circular_pipeline_conditions(model.num_layers, model.mtp_layers, pp, vs, m, delay).values():
        holds &= ok
    return cfg[keep | holds]


def _validated_options(model, chip, cluster, global_batch, tps, microbatches, recompute, virtual_stages,
                       sequence_parallel, zero, flash_attention, top_k, mem, engine, context_parallel, precision,
                       zero_group, expert_parallel, expert_tensor_parallel=None, scaling_recipe=None,
                       fp8_attention=False) -> _Options:
    """Phase 1: every option checked and expanded to the values to try."""
    from .graph import (
        PRECISIONS,
        check_attention_format,
        check_context_parallel,
        check_expert_parallel,
        check_scaling_recipe,
    )
    from .hardware import preset as chip_preset
    from .models import preset as model_preset
    from .plan import cast_passes, check_fp8_attention, check_precision, fp8_attention_format
    model = model_preset(model)
    chip = chip_preset(chip)
    cluster = as_cluster(cluster)
    B = v.positive_int("global_batch", global_batch, v.MAX_BATCH)
    top_k = v.positive_int("top_k", top_k, 10_000)
    chips = cluster.num_chips
    tps = v.int_list("tps", tps) if tps is not None else tuple(default_tps(model, chips))
    for t in tps:
        if model.heads % t or model.ffn_hidden % t or (model.kv_heads % t and model.kv_heads >= t):
            raise ValueError(f"tps: tp={t} must divide heads={model.heads} (and ffn_hidden={model.ffn_hidden})")
    mbs = v.int_list("microbatches", microbatches, v.MAX_BATCH) if microbatches is not None else tuple(divisors(B))
    bad = [b for b in mbs if B % b]
    if bad:
        raise ValueError(f"microbatches {bad} do not divide global_batch={B}")
    sps = _bools("sequence_parallel", sequence_parallel, (False, True))
    engine = engine_preset(engine)
    if engine.overlap_moe_a2a:
        raise ValueError(f"engine {engine.name!r} overlaps the MoE all-to-alls, which Megatron-Core runs only with "
                         "expert parallelism, virtual stages under pipeline parallelism and no full recompute; the "
                         "plan search does not restrict its space to those plans: search with the engine without "
                         "the overlap (engine.with_moe_dispatch(e, e.moe_dispatcher)) and evaluate() the plans found")
    virt, zeros = _virtuals_and_zeros(virtual_stages, zero, engine)
    cps = v.int_list("context_parallel", context_parallel) if context_parallel is not None else (1,)
    for c in cps:
        check_context_parallel(model, c, flash_attention)
        check_features(engine, 1, c)
    precs = _option_list("precision", precision, ("bf16",), lambda n, p: v.choice(n, p, PRECISIONS))
    for p in precs:
        check_precision(chip, p)
    if scaling_recipe is not None:
        low = [p for p in precs if p != "bf16"]
        if not low:
            raise ValueError(f"scaling_recipe={scaling_recipe!r}: the search's precisions {list(precs)} have no "
                             "low-precision casts to scale")
        for p in low:
            check_scaling_recipe(p, scaling_recipe)
            check_precision(chip, p, scaling_recipe)
        cast_passes(engine, low[0], scaling_recipe)            # the engine runs it (torchao: tensorwise only)
    if v.flag("fp8_attention", fp8_attention):
        if "fp8" not in precs:
            raise ValueError(f"fp8_attention: the search's precisions {list(precs)} have no FP8 plans to run it "
                             "(add 'fp8')")
        check_fp8_attention("fp8", scaling_recipe, bool(flash_attention), "fp8_attention")
        check_attention_format(model, fp8_attention_format(scaling_recipe), True)   # before any pricing
    groups = _option_list("zero_group", zero_group, (None,), _check_group)
    eps = v.int_list("expert_parallel", expert_parallel) if expert_parallel is not None else (1,)
    for e in eps:
        check_expert_parallel(model, e)
    etps = expert_tensor_parallel_values(model, expert_tensor_parallel, tps, sps)
    return _Options(model, chip, cluster, B, top_k, mem or memory.MemoryConfig(), engine, bool(flash_attention),
                    tuple(tps), tuple(mbs), tuple(sps), tuple(virt), tuple(zeros), _modes(recompute), tuple(cps),
                    tuple(precs), tuple(groups), tuple(eps), etps, scaling_recipe, bool(fp8_attention))


def expert_tensor_parallel_values(model: ModelConfig, etp, tps, sps) -> tuple:
    """The expert-tensor-parallel degrees to search (None: etp = tp, Megatron's default; 1:
    every tp rank an expert-parallel rank), checked against the model and the other options:
    etp 1 needs an MoE model where some tp > 1 (tp 1 is the default's),
    and sequence parallelism among the options there (Megatron requires it)."""
    from .graph import check_expert_tensor_parallel
    vals = (None,) if etp is None else v.values_of("expert_tensor_parallel", etp, (int, np.integer))
    if not vals:
        raise ValueError("expert_tensor_parallel must name at least one value (None: etp = tp, or 1)")
    out = []
    for x in vals:
        if x is not None and (isinstance(x, bool) or not isinstance(x, (int, np.integer)) or int(x) != 1):
            raise ValueError(f"expert_tensor_parallel values must be None (etp = tp, Megatron's default) or 1 (each "
                             f"tp rank an expert-parallel rank), got {x!r}")
        out.append(None if x is None else 1)
    out = tuple(dict.fromkeys(out))
    if 1 in out:
        many = [t for t in tps if t > 1]
        if many and not any(sps):
            raise ValueError("expert_tensor_parallel=1 under tp > 1 needs sequence parallelism (Megatron requires it "
                             "for MoE with tensor parallelism): add sequence_parallel=True")
        if many:
            check_expert_tensor_parallel(model, 1, many[0], True)
        if not model.moe:
            raise ValueError("expert_tensor_parallel applies to mixture-of-experts models")
    return out


def _checked_units(units, o: _Options) -> np.ndarray:
    """Precomputed unit costs as the kernels read them: a float array of shape (tps, microbatches,
    sequence-parallel choices, :data:`~cosearch._kernels.formulas.UNIT_FIELDS`) for these options,
    no NaN or negative entry (an infinite one marks a plan the engine cannot run)."""
    try:
        u = np.ascontiguousarray(units, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"units must be an array of cosearch.plan.unit_costs, got {type(units).__name__}") from None
    want = (len(o.tps), len(o.mbs), len(o.sps), F.NU)
    if u.shape != want:
        raise ValueError(f"units has shape {u.shape}; these options need {want} (tps {list(o.tps)}, microbatches "
                         f"{list(o.mbs)}, sequence_parallel {list(o.sps)}): one chip's cosearch.plan.unit_costs(...)[0]")
    if np.isnan(u).any() or (u < 0).any():
        raise ValueError("units has NaN or negative entries; cosearch.plan.unit_costs prices them")
    return u


def _price(o: _Options, combos, units, time_model: str, overlap_dp: bool) -> list[tuple[np.ndarray, np.ndarray]]:
    """Phase 2: every combination's unit costs and hardware row."""
    out = []
    for c, p, e, et, _n in combos:
        if units is not None:
            u_all = units
        else:
            # only the tensor-parallel degrees some configuration of (cp, ep) uses are priced (a
            # high ep leaves room for few); the others' rows stay zero, and no row of its table,
            # nor its lower bound (dp.table_lower_bound walks the same groups), reads them
            used = [ti for ti, t in enumerate(o.tps) if count_configurations(
                o.model, o.cluster.num_chips, o.global_batch, (t,), o.mbs, o.sps, o.virt, o.zeros, c, o.groups, e,
                o.ep_mode(et))]
            u = unit_costs(o.model, o.chip, o.cluster, [o.tps[i] for i in used], o.mbs, o.sps, o.flash_attention,
                           time_model=time_model, engine=o.engine, context_parallel=c, precision=p,
                           expert_parallel=e, expert_tensor_parallel=et, scaling_recipe=o.recipe(p),
                           fp8_attention=o.fp8_attention_in(p))[0]
            if len(used) < len(o.tps):
                u_all = np.zeros((len(o.tps),) + u.shape[1:])
                u_all[used] = u
            else:
                u_all = u
        hw = hw_row(o.chip.hbm_bytes, o.chip.hbm_bandwidth_Bps * o.chip.efficiency.memory, o.mem, overlap_dp,
                    o.engine, p, host_Bps=o.chip.host_link_Bps, comm_sm_share=collective_sm_share(o.chip),
                    lowp_copies=low_precision_copies(o.chip, o.engine, p, o.recipe(p)))
        out.append((u_all, hw))
    return out


def _search_tables(o: _Options, combos, priced, net, prune: bool, cut: float, progress: bool):
    """Phase 3: the exact search, combination by combination from the smallest lower bound
    (:func:`table_lower_bound`); a combination whose bound exceeds the k-th best step found is
    skipped whole, and once k plans are known only the rows whose spread bound can beat the k-th
    are searched.  Returns (found: (step, combination, row), searched rows per combination,
    configurations evaluated)."""
    from ._kernels import dp as kernel
    chips, B = o.cluster.num_chips, o.global_batch
    # (one combination and no cutoff: nothing for the bound to skip)
    bounded = prune and (len(combos) > 1 or math.isfinite(cut))
    bound = [table_lower_bound(u_all, o.model, chips, B, o.tps, o.mbs, o.sps, o.virt, c, e, o.ep_mode(et))
             if bounded else 0.0 for (c, _p, e, et, _n), (u_all, _hw) in zip(combos, priced)]
    bar = None
    if progress:
        from tqdm.auto import tqdm
        bar = tqdm(total=sum(n for *_x, n in combos), desc="plans", unit="cfg", leave=False)
    found: list[tuple[float, int, int]] = []
    searched: dict[int, np.ndarray] = {}
    evaluated = 0
    try:
        kth = cut
        for ci in sorted(range(len(combos)), key=lambda i: (bound[i], i)):
            if prune and bound[ci] > kth:
                if bar is not None:
                    bar.update(combos[ci][-1])
                continue
            u_all, hw = priced[ci]
            c, _p, e, et, n_all = combos[ci]
            if prune and len(found) >= o.top_k:
                searched[ci] = admissible_configurations(o.model, chips, B, o.tps, o.mbs, o.sps, o.virt, o.zeros, c,
                                                         o.groups, e, u_all, kth, o.ep_mode(et))
                if bar is not None:
                    bar.update(n_all - len(searched[ci]))
            else:
                searched[ci] = o.table(c, e, et)
            res, _lb, ev = kernel.search(u_all, net, hw, searched[ci], o.model.num_layers, o.modes, o.top_k,
                                         prune=prune, progress=bar.update if bar is not None else None,
                                         cutoff=kth)
            evaluated += int(ev)
            fin = np.flatnonzero(np.isfinite(res) & (res <= cut))
            found.extend((float(res[i]), ci, int(i)) for i in fin)
            if prune and len(found) >= o.top_k:
                kth = min(kth, sorted(x[0] for x in found)[o.top_k - 1])
    finally:
        if bar is not None:
            bar.close()
    return found, searched, evaluated


def _no_table_reason(o: _Options) -> str:
    """Why the options leave no configuration at all on these chips and this batch: the fewest
    chips a plan of them needs, where that is more than there are; else the batch."""
    chips, batch = o.cluster.num_chips, o.global_batch
    least = min(o.tps) * min(o.cps) * (min(o.eps) if o.model.moe else 1)
    base = f"no configuration fits {chips} chips with global batch {batch} and the given options"
    if least > chips:
        return (f"{base}: the smallest plan they allow needs {least} chips (tp {min(o.tps)} x cp {min(o.cps)}"
                + (f" x ep {min(o.eps)}" if o.model.moe and min(o.eps) > 1 else "") + "); offer smaller degrees or "
                "more chips")
    return (f"{base}: no split of the chips into dp x tp x pp x cp they allow gives every data-parallel "
            f"replica whole microbatches of {', '.join(map(str, o.mbs))} sequences with at most "
            f"{o.model.num_layers} pipeline stages; try other microbatch sizes, degrees or a batch that divides")


def _no_configuration_reason(o: _Options) -> str:
    """Why no configuration of the search is a plan at all (none reaches the memory check)."""
    from .engine import uneven_sequence_split
    uneven = [t for t in o.tps if t > 1 and all(uneven_sequence_split(o.engine, o.model.seq_len // c, t, True)
                                                  for c in o.cps)]
    why = []
    if True in o.sps and uneven:
        why.append(f"sequence parallelism splits each sequence ({o.model.seq_len} tokens) over the tp ranks only "
                   f"evenly (engine {o.engine.name!r}), and tp {', '.join(map(str, uneven))} do not divide it")
    detail = "; ".join(why) if why else "every one is refused before its memory is counted"
    return (f"no configuration searched is a plan on {o.cluster.num_chips} chips: {detail}; widen the search "
            "(other tp degrees, sequence parallelism off)")


def _no_plan_fits(o: _Options, combos, priced, net, total: int, evaluated: int) -> PlacementResult:
    """Phase 4 when nothing fits: the least memory any plan needs, and what would help."""
    from ._kernels import dp as kernel
    need = math.inf
    for (c, _p, e, et, _n), (u_all, hw) in zip(combos, priced):
        need = min(need, float(kernel.min_memory_needed(u_all, net, hw, o.table(c, e, et), o.model.num_layers,
                                                        o.modes)))
    if not math.isfinite(need):
        # every configuration searched is refused before memory (plan.unit_costs marks it)
        return PlacementResult((), reason=_no_configuration_reason(o), min_memory_needed_bytes=need,
                               configurations=total, evaluated=evaluated)
    hints = ["more chips"]
    if 3 not in o.zeros:
        hints.append("ZeRO-3")
    if not o.modes[F.RC_FULL]:
        hints.append("full recompute")
    if not o.flash_attention:
        hints.append("flash attention")
    if True not in o.sps and max(o.tps) > 1:
        hints.append("sequence parallelism")
    hints.append("a chip with more HBM")
    return PlacementResult((), reason=(
        f"no plan fits {o.chip.hbm_bytes / 2**30:.4g} GiB of HBM per chip on {o.cluster.num_chips} chips: every plan "
        f"needs at least {need / 2**30:.4g} GiB per chip; try {', '.join(hints)}"),
        min_memory_needed_bytes=need, configurations=total, evaluated=evaluated)


def _plans(o: _Options, found, combos, priced, searched, net, time_model: str) -> list[Plan]:
    """Phase 4: the best rows as :class:`Plan` s, each re-priced by :func:`plan_from_stages` and
    checked against the kernel's step time."""
    from ._kernels import dp as kernel
    plans = []
    for step_found, ci, i in sorted(found)[:o.top_k]:      # by step, ties in the combinations' and table's order
        c_cp, prec, c_ep, c_etp, _n = combos[ci]
        u_all, hw = priced[ci]
        c = searched[ci][i]
        pp = int(c[kernel.C_PP])
        counts = np.zeros(pp, dtype=np.int64)
        rm = np.zeros(pp, dtype=np.int64)
        u = u_all[c[kernel.C_TI], c[kernel.C_BI], c[kernel.C_SI]]
        dp = int(c[kernel.C_DP])
        replicas = dp * c_cp
        zg = int(c[kernel.C_ZG])
        step = kernel.config_best(u, net, hw, o.model.num_layers, pp, int(c[kernel.C_V]), int(c[kernel.C_M]),
                                  float(replicas), int(c[kernel.C_TP]), int(c[kernel.C_Z]), float(zg), o.modes,
                                  counts, rm, kernel.INF)
        spec = PlanSpec(dp=dp, tp=int(c[kernel.C_TP]), pp=pp, microbatch=int(o.mbs[c[kernel.C_BI]]),
                        recompute=tuple(F.RECOMPUTE_MODES[r] for r in rm), virtual_stages=int(c[kernel.C_V]),
                        sequence_parallel=bool(o.sps[c[kernel.C_SI]]), zero=int(c[kernel.C_Z]),
                        stage_layers=tuple(int(x) for x in counts), flash_attention=o.flash_attention,
                        context_parallel=c_cp, precision=prec, expert_parallel=c_ep,
                        zero_group=None if zg == replicas or int(c[kernel.C_Z]) == 0 else zg,
                        expert_tensor_parallel=c_etp, scaling_recipe=o.recipe(prec),
                        fp8_attention=o.fp8_attention_in(prec))
        if len(set(spec.recompute)) == 1:
            spec = spec.with_(recompute=spec.recompute[0])
        plan = plan_from_stages(o.model, o.chip, o.cluster, spec, o.global_batch, u, net, hw, time_model, o.engine)
        if not (plan.feasible and math.isclose(plan.step_time_s, step, rel_tol=1e-9)
                and math.isclose(step, step_found, rel_tol=1e-9)):  # pragma: no cover
            raise RuntimeError(f"placement kernel and evaluate disagree on {spec.describe()}: "
                               f"{step} vs {plan.step_time_s}")
        plans.append(plan)
    return plans


def search_plans(model: ModelConfig | str, chip: Accelerator | str, cluster: Cluster | int, global_batch: int, *,
                 tps: Sequence[int] | None = None, microbatches: Sequence[int] | None = None,
                 recompute: str | Sequence[str] | None = None, virtual_stages: Sequence[int] | None = None,
                 sequence_parallel: bool | Sequence[bool] | None = None, zero: int | Sequence[int] | None = None,
                 flash_attention: bool = False, top_k: int = 1, mem: memory.MemoryConfig | None = None,
                 overlap_dp: bool = True, time_model: str = "sum", units: np.ndarray | None = None,
                 prune: bool = True, progress: bool = False, cutoff_s: float | None = None,
                 engine: Engine | str | None = None, context_parallel: int | Sequence[int] | None = None,
                 precision: str | Sequence[str] | None = None,
                 zero_group: int | None | Sequence[int | None] = None,
                 expert_parallel: int | Sequence[int] | None = None,
                 expert_tensor_parallel: int | None | Sequence[int | None] = None,
                 scaling_recipe: str | None = None, fp8_attention: bool = False) -> PlacementResult:
    """The ``top_k`` best plans (one per configuration, best first) over the option space.

    Each option is a list of values to try (None: all — tp: the degrees dividing the
    heads, microbatch: the divisors of the batch, recompute: none/selective/full chosen
    per stage, virtual stages: :data:`DEFAULT_VIRTUAL`, sequence parallel: off/on, ZeRO
    0-3).  ``context_parallel`` (default 1), ``precision`` (default ``"bf16"``) and
    ``zero_group`` (default None: ZeRO shards over all ``dp * cp`` ranks; ints: HSDP-style
    groups, tried where they divide ``dp * cp``) and ``expert_parallel`` (default 1; MoE
    models) are searched too when given several values; so is ``expert_tensor_parallel``
    (None, the default: etp = tp; 1: each tp rank an expert-parallel rank, the expert group
    over ``dp * cp * tp`` ranks, under sequence parallelism; ``(None, 1)``: both).
    ``units`` passes precomputed :func:`cosearch.plan.unit_costs` for this chip
    (shape (tps, microbatches, sp options, fields); one context-parallel degree and precision
    only).  The best plan's step time equals :func:`cosearch.plan.evaluate` of its spec (same
    formulas).  ``cutoff_s``: only plans faster than this step time are wanted; if none is, the
    result has no plans and ``cut_off`` set (the co-search's pruning inside a design).
    ``engine``: the training framework (:mod:`cosearch.engine`; default Megatron-LM);
    precomputed ``units`` must have been priced for the same engine.  ``scaling_recipe``
    (:attr:`cosearch.plan.PlanSpec.scaling_recipe`; None: the engine's default): the recipe of
    every low-precision plan searched, which each of those precisions must have.
    ``fp8_attention`` (:attr:`cosearch.plan.PlanSpec.fp8_attention`): the FP8 plans searched run
    their fused attention in FP8 too (it needs ``flash_attention`` and ``"fp8"`` among the
    precisions; bf16 plans keep bf16 attention).
    """
    v.instances(mem=(mem, memory.MemoryConfig))
    for name, x in (("flash_attention", flash_attention), ("overlap_dp", overlap_dp), ("prune", prune),
                    ("progress", progress)):
        v.flag(name, x)
    o = _validated_options(model, chip, cluster, global_batch, tps, microbatches, recompute, virtual_stages,
                           sequence_parallel, zero, flash_attention, top_k, mem, engine, context_parallel, precision,
                           zero_group, expert_parallel, expert_tensor_parallel, scaling_recipe, fp8_attention)
    if units is not None:
        units = _checked_units(units, o)
    if o.model.moe and o.model.moe_layer_step > 1 and o.model.num_layers > 1:
        import warnings
        warnings.warn(f"{o.model.name}: one layer in {o.model.moe_layer_step} is an MoE layer; pipeline splits are "
                      "priced with the mean layer (exact for stages of whole groups; evaluate() warns on the others)",
                      stacklevel=2)
    if units is not None and (len(o.cps) > 1 or len(o.precs) > 1 or len(o.eps) > 1 or len(o.etps) > 1):
        raise ValueError("precomputed units cover one context-parallel degree, precision, expert-parallel and "
                         f"expert-tensor-parallel degree; got context_parallel={list(o.cps)}, precision="
                         f"{list(o.precs)}, expert_parallel={list(o.eps)}, expert_tensor_parallel={list(o.etps)}")
    combos = o.combinations()
    if not combos:
        return PlacementResult((), reason=_no_table_reason(o))
    net = o.cluster.net_array(o.chip)
    total = sum(n for *_x, n in combos)
    cut = math.inf if cutoff_s is None or cutoff_s == math.inf else v.positive_float("cutoff_s", cutoff_s)
    priced = _price(o, combos, units, time_model, overlap_dp)
    found, searched, evaluated = _search_tables(o, combos, priced, net, prune, cut, progress)
    if not found and math.isfinite(cut) and prune:
        return PlacementResult((), reason=f"no plan is faster than the cutoff {cut:.6g} s",
                               configurations=total, evaluated=evaluated, cut_off=True)
    if not found:
        return _no_plan_fits(o, combos, priced, net, total, evaluated)
    return PlacementResult(tuple(_plans(o, found, combos, priced, searched, net, time_model)),
                           configurations=total, evaluated=evaluated)


#: Plan options the co-search explores per design by default (the full space is
#: :func:`cosearch.placement.search_plans`'s default; this keeps a 1,000-design sweep fast).
DEFAULT_PLAN_OPTIONS: dict[str, Any] = {"virtual_stages": (1,), "sequence_parallel": (False,), "zero": (0, 1)}


def _priced_table(model: ModelConfig, cluster: Cluster, global_batch: int, tps, mbs, sps,
                  opts: dict) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """The configuration table, recompute modes and priced options (:func:`priced_options`:
    one value each) that plan options ``opts`` name, as :func:`search_plans` builds them for
    one priced combination."""
    virt, zeros = _virtuals_and_zeros(opts.get("virtual_stages"), opts.get("zero"), opts.get("engine"))
    priced = priced_options(opts)
    groups = _option_list("zero_group", opts.get("zero_group"), (None,), _check_group)
    cfg = configurations(model, cluster.num_chips, global_batch, tps, mbs, tuple(bool(x) for x in sps), virt, zeros,
                         cp=priced["context_parallel"], zero_groups=groups, ep=priced["expert_parallel"],
                         ep_mode=ep_mode_of(priced["expert_tensor_parallel"]))
    engine = engine_preset(opts.get("engine"))
    if engine.pipeline_schedule == "circular":
        cfg = circular_configurations(cfg, model, engine.pipeline_forwarding_delay)
    return cfg, _modes(opts.get("recompute")), priced


def fitting_microbatches(model: ModelConfig, designs: np.ndarray, cluster: Cluster, global_batch: int,
                         tps: Sequence[int], mbs: Sequence[int], mem: memory.MemoryConfig | None = None,
                         **opts) -> tuple[int, ...]:
    """The microbatch sizes of ``mbs`` with which some configuration's memory floor
    (:func:`cosearch._kernels.dp.memory_floor`, a lower bound on its plans' memory per chip)
    fits the HBM of some design — with the others no plan fits any of them, whatever its
    layer times (memory depends on the model, the configuration and the HBM only), so a
    search over many designs can leave them out.  ``opts``: :func:`search_plans`'s plan
    options.  The smallest size is always kept (an infeasible search still reports how
    much memory it would need)."""
    from ._kernels import dp as kernel
    mem = mem or memory.MemoryConfig()
    d = np.atleast_2d(np.asarray(designs, dtype=np.float64))
    sps = _bools("sequence_parallel", opts.get("sequence_parallel"), (False, True))
    cfg, modes, priced = _priced_table(model, cluster, global_batch, tps, mbs, sps, opts)
    if not len(cfg):
        return tuple(mbs)
    chip = Accelerator.from_array(d[0])
    units = unit_costs(model, chip, cluster, tps, mbs, sps, bool(opts.get("flash_attention", False)),
                       engine=opts.get("engine"), **priced)[0]
    net = cluster.net_array(chip)
    hi = DESIGN_FIELDS.index("hbm_bytes")
    keep = {min(mbs)}
    for hbm in np.unique(d[:, hi]):
        hw = hw_row(float(hbm), chip.hbm_bandwidth_Bps, mem, bool(opts.get("overlap_dp", True)), opts.get("engine"))
        fits = kernel.memory_floor(units, net, hw, cfg, model.num_layers, modes) <= hw[F.H_HBM]
        keep |= {int(mbs[b]) for b in np.unique(cfg[fits, kernel.C_BI])}
    return tuple(b for b in mbs if b in keep)


def best_plan_steps(model: ModelConfig, designs: np.ndarray, cluster: Cluster, global_batch: int,
                    units: np.ndarray, tps: Sequence[int], mbs: Sequence[int], sps: Sequence[bool],
                    mem: memory.MemoryConfig | None = None, cutoff_s: float = math.inf, **opts) -> np.ndarray:
    """The best plan's step time of every design — :func:`search_plans`' best over the same
    options, in one compiled call across designs (``units``: their :func:`unit_costs`,
    (designs, tps, mbs, sps, fields)); ``inf`` where no plan fits or none is at most
    ``cutoff_s``.  ``opts``: :func:`search_plans`' plan options."""
    from ._kernels import dp as kernel
    mem = mem or memory.MemoryConfig()
    d = np.atleast_2d(np.asarray(designs, dtype=np.float64))
    engine = engine_preset(opts.get("engine"))
    cfg, modes, priced = _priced_table(model, cluster, global_batch, tps, mbs, sps, opts)
    out = np.full(len(d), np.inf)
    if not len(cfg) or not len(d):
        return out
    rows = []
    for row in d:
        chip = Accelerator.from_array(row)
        rows.append(np.concatenate([cluster.net_array(chip),
                                    hw_row(chip.hbm_bytes, chip.hbm_bandwidth_Bps * chip.efficiency.memory, mem,
                                           bool(opts.get("overlap_dp", True)), engine, priced["precision"],
                                           host_Bps=chip.host_link_Bps,
                                           comm_sm_share=collective_sm_share(chip))]))
    keys, which = np.unique(np.array(rows), axis=0, return_inverse=True)
    which = np.asarray(which).reshape(-1)
    nn = len(rows[0]) - F.NH
    for k, key in enumerate(keys):
        sel = np.flatnonzero(which == k)
        out[sel] = kernel.best_steps(np.ascontiguousarray(units[sel]), key[:nn].copy(), key[nn:].copy(), cfg,
                                     model.num_layers, modes, float(cutoff_s))
    return out


#: Plan options that change the unit costs themselves (tokens per rank, GEMM operand bytes,
#: expert placement, the attention's format): the co-search prices its space once per value of
#: each (:func:`priced_combinations`; ``fp8_attention`` is one value, on the FP8 combinations
#: where asked for), with these defaults.
PRICED_OPTIONS = {"context_parallel": 1, "precision": "bf16", "expert_parallel": 1, "expert_tensor_parallel": None,
                  "fp8_attention": False}


def _priced_values(opts: dict, name: str) -> tuple:
    x = opts.get(name)
    return tuple(dict.fromkeys(v.values_of(name, x) if x is not None else (PRICED_OPTIONS[name],)))


#: Precisions a search space's designs can be priced in: bf16 on every design, FP8 on those
#: whose tensor unit has FP8 MACs (``SearchSpace.fp8_macs``), FP4 (NVFP4) on those with FP4 MACs
#: (``SearchSpace.fp4_macs``).
COSEARCH_PRECISIONS = ("bf16", "fp8", "fp4")
#: The design field that lets a design multiply in each low precision, the CLI flag that lists it,
#: and the MACs per PE a refusal suggests (the dense FP8 / FP4 over BF16 peak ratio of B200).
FORMAT_MAC_FIELDS = {"fp8": ("fp8_macs", "--fp8-macs", 2), "fp4": ("fp4_macs", "--fp4-macs", 4)}


def missing_format(chip: Accelerator, precision: str) -> str:
    """Why ``chip`` cannot run plans in ``precision`` ("" when it can): a searched design in a
    low precision its tensor unit has no MACs for has no plan in it (its plans in the other
    formats are another run's)."""
    field_name = FORMAT_MAC_FIELDS.get(precision, (None,))[0]
    if field_name is None or (chip.supports_fp8 if precision == "fp8" else chip.supports_fp4):
        return ""
    return f"no {precision.upper()} tensor unit ({field_name} = 0)"


#: search_plans options the co-search sets itself for every design (``tps``, ``microbatches``
#: and ``mem`` are the co-search's own arguments).
COSEARCH_OWN_OPTIONS = ("tps", "microbatches", "mem", "units", "progress", "cutoff_s", "top_k", "prune")


def search_plans_options() -> list[str]:
    """The option names :func:`search_plans` takes (its keyword-only parameters), which callers
    that pass options through check against."""
    import inspect
    return [k for k, p in inspect.signature(search_plans).parameters.items() if p.kind == p.KEYWORD_ONLY]


def check_cosearch_options(opts: dict, lists: bool = False, fp8_macs: Sequence[float] | None = None,
                           fp4_macs: Sequence[float] | None = None) -> None:
    """Refuse plan options the co-search cannot honour.  ``precision``: bf16, FP8 and FP4
    (:data:`COSEARCH_PRECISIONS`); FP8 only where some design of the space has FP8 MACs
    (``fp8_macs``: the values the space lists; None: not checked here), FP4 likewise
    (``fp4_macs``).  Context- and expert-parallel degrees and precisions: one value each
    (``lists=False``: one priced space), or several (``lists=True``:
    :func:`cosearch.search.cosearch` searches each combination's priced space and keeps every
    design's best)."""
    known = [k for k in search_plans_options() if k not in COSEARCH_OWN_OPTIONS]
    unknown = sorted(set(opts) - set(known))
    if unknown:
        raise ValueError(f"unknown plan option(s) {unknown}; the co-search passes these to search_plans: "
                         f"{', '.join(known)}")
    for name in ("context_parallel", "expert_parallel"):         # 0 divided the chips (ZeroDivisionError)
        v.int_list(name, _priced_values(opts, name))
    precs = _priced_values(opts, "precision")
    bad = [p for p in precs if p not in COSEARCH_PRECISIONS]
    if bad:
        raise ValueError(f"the co-search prices designs in {', '.join(COSEARCH_PRECISIONS)}; it cannot search "
                         f"precision={bad}")
    for prec, macs in (("fp8", fp8_macs), ("fp4", fp4_macs)):
        field_name, flag, example = FORMAT_MAC_FIELDS[prec]
        if prec in precs and macs is not None and not any(x > 0 for x in macs):
            raise ValueError(f"precision={prec!r}: no design of the search space has {prec.upper()} tensor units; "
                             f"give the space SearchSpace({field_name}=(0, {example})) "
                             f"({prec.upper()} MACs per PE; `cosearch search {flag} 0,{example}`) "
                             "or search bf16 only")
    for name in ("context_parallel", "precision", "expert_parallel", "expert_tensor_parallel"):
        vals = _priced_values(opts, name)
        if not lists and len(vals) > 1:
            raise ValueError(f"this search prices every design once, with one {name}; got {list(vals)}. The "
                             f"single-model co-search (cosearch.cosearch) searches several")


def chip_formats(chip: Accelerator, opts: dict) -> dict:
    """``opts`` with ``precision`` kept to the formats ``chip`` multiplies in (a fixed chip
    searched with the co-search's options: TPUv4 has no FP8, so it searches bf16); the
    options as they are when they name no precision.  Refused when the chip has none of them."""
    if opts.get("precision") is None:
        return opts
    from .plan import check_precision
    precs = _priced_values(opts, "precision")
    ok = []
    for p in precs:
        try:
            check_precision(chip, p)
        except ValueError:
            continue
        ok.append(p)
    if not ok:
        check_precision(chip, precs[0])      # raises, naming what the chip lacks
    return {**opts, "precision": tuple(ok)}


def priced_combinations(opts: dict) -> list[dict[str, Any]]:
    """Every (context_parallel, precision, expert_parallel, expert_tensor_parallel) combination of
    plan options, each as single values, with ``fp8_attention`` where the options ask for it on
    the FP8 combinations (FP8 attention changes the attention's unit costs, so bounds priced
    without it would not bound the plans priced with it)."""
    fp8_attention = bool(opts.get("fp8_attention", False))
    return [dict(context_parallel=c, precision=p, expert_parallel=e, expert_tensor_parallel=et,
                 fp8_attention=fp8_attention and p == "fp8")
            for c in _priced_values(opts, "context_parallel") for p in _priced_values(opts, "precision")
            for e in _priced_values(opts, "expert_parallel")
            for et in _priced_values(opts, "expert_tensor_parallel")]


def priced_options(opts: dict) -> dict[str, Any]:
    """The one (context_parallel, precision, expert_parallel, expert_tensor_parallel) of plan
    options priced once."""
    combos = priced_combinations(opts)
    if len(combos) != 1:
        raise ValueError(f"plan options priced once must hold one context-parallel degree, precision, "
                         f"expert-parallel and expert-tensor-parallel degree; got {combos}")
    return combos[0]


def _unit_work(units: np.ndarray, model: ModelConfig) -> np.ndarray:
    """:func:`cosearch._kernels.formulas.unit_work` of every unit row of ``units`` (trailing axis:
    the fields), the leading shape kept."""
    return F.unit_work.py_func(np.moveaxis(units, -1, 0), model.num_layers)


def spread_bound(units: np.ndarray, model: ModelConfig, tps: Sequence[int], mbs: Sequence[int],
                 global_batch: int, chips: int, cp: int = 1) -> np.ndarray:
    """A lower bound on the step time of every plan with a given (tp, microbatch, sp): all
    chip-seconds of a step spread perfectly over every chip, ``(B / mb) * tp * cp *
    (per-microbatch work of all layers on one rank) / chips`` (a microbatch occupies the
    ``tp * cp`` ranks of one replica; ``units`` priced at context-parallel degree ``cp``) —
    ``units``' trailing shape (tps, mbs, sp, fields), any leading ones kept."""
    work = _unit_work(units, model)
    tp = np.array(tps, dtype=float)[:, None, None]
    mb = np.array(mbs, dtype=float)[None, :, None]
    return (global_batch / mb) * tp * cp * work / chips


def ilp_plan(model: ModelConfig, chip: Accelerator, cluster: Cluster, global_batch: int,
             mem: memory.MemoryConfig, opts: dict[str, Any] | None = None, *,
             tps: Sequence[int] | None = None, microbatches: Sequence[int] | None = None,
             cutoff_s: float = math.inf, units_bound: np.ndarray | None = None) -> Plan | None:
    """The best plan with ILP-scheduled layer times over every (tp, microbatch, sequence
    parallel) choice — exact, without solving the ILP for every choice: best-first over
    two valid bounds per choice, the perfect-spread step (:func:`spread_bound`) and the best
    plan under :func:`cosearch.schedule.layer_bounds` layer times (the stage formulas are
    monotone in layer times); a choice is ILP-planned only when its bound is the smallest
    left and can still beat the best ILP plan found.  ``cutoff_s``: only
    plans faster than it are wanted (None returned if there is none).  ``units_bound``:
    precomputed bound unit costs of this chip (tps, microbatches, sp, fields)."""
    opts = dict(DEFAULT_PLAN_OPTIONS if opts is None else opts)
    combos = priced_combinations(opts)
    if len(combos) > 1:
        # one per (context-parallel, precision, expert-parallel) combination, the best kept
        # (each later one only has to beat the best so far)
        best_p: Plan | None = None
        for combo in combos:
            p = ilp_plan(model, chip, cluster, global_batch, mem, {**opts, **combo}, tps=tps, microbatches=microbatches,
                         cutoff_s=cutoff_s if best_p is None else min(cutoff_s, best_p.step_time_s))
            if p is not None and (best_p is None or p.step_time_s < best_p.step_time_s):
                best_p = p
        return best_p
    tps = tuple(tps) if tps is not None else tuple(default_tps(model, cluster.num_chips))
    mbs = tuple(microbatches) if microbatches is not None else tuple(divisors(global_batch))
    sps = _bools("sequence_parallel", opts.pop("sequence_parallel", None), (False, True))
    flash = bool(opts.get("flash_attention", False))
    priced = priced_options(opts)
    ub = units_bound if units_bound is not None else unit_costs(
        model, chip, cluster, tps, mbs, sps, flash,
        engine=opts.get("engine"), time_model="bound", **priced)[0]
    # best-first over the choices: each starts at its perfect-spread bound, is raised to its
    # best plan under bound layer times, then planned with ILP layer times; a choice whose
    # bound cannot beat the best ILP plan found is never looked at again
    spread = spread_bound(ub, model, tps, mbs, global_batch, cluster.num_chips, priced["context_parallel"])
    etp1 = priced["expert_tensor_parallel"] == 1       # no plan at tp > 1 without sequence parallelism
    heap = [(float(spread[ti, bi, si]), 0, ti, bi, si) for ti, t in enumerate(tps) for bi in range(len(mbs))
            for si, sp in enumerate(sps) if not (sp and t == 1) and not (etp1 and t > 1 and not sp)]
    heapq.heapify(heap)
    best: Plan | None = None
    best_s = cutoff_s
    while heap and heap[0][0] <= best_s:
        _, level, ti, bi, si = heapq.heappop(heap)
        one = {"tps": (tps[ti],), "microbatches": (mbs[bi],), "sequence_parallel": (sps[si],), "mem": mem,
               "cutoff_s": best_s if math.isfinite(best_s) else None}
        if level == 0:
            r = search_plans(model, chip, cluster, global_batch, units=ub[ti:ti + 1, bi:bi + 1, si:si + 1],
                             **one, **opts)
            if r.plans:
                heapq.heappush(heap, (r.plans[0].step_time_s, 1, ti, bi, si))
            continue
        r = search_plans(model, chip, cluster, global_batch, time_model="ilp", **one, **opts)
        if r.plans and r.plans[0].step_time_s <= best_s:
            best, best_s = r.plans[0], r.plans[0].step_time_s
    return best
