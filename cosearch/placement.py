"""Device placement: the best (dp, tp, pp, microbatch, recompute, stage cut) for a chip.

:func:`layer_costs` turns a model and an accelerator into per-unit (embedding, every
transformer layer, LM head) forward/backward seconds, activation bytes and parameters
for each (tp, microbatch) choice; :func:`best_plan` runs the numba placement kernel
(:mod:`cosearch._kernels.dp`, formulas there) over every configuration with
``dp * tp * pp <= chips`` and ``dp * microbatch * num_microbatches = global_batch``
and returns the best :class:`Plan` (or the top-k).

Layer times come from summing the roofline op times (``time_model="sum"``, ops run
one after another), the per-layer ILP schedule (``"ilp"``) or its list-schedule
upper bound (``"list"``), plus the layer's tensor-parallel all-reduces
(:mod:`cosearch.comm`), which sit on the critical path in Megatron's split.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from . import comm, cost, graph, memory
from .hardware import Accelerator, Cluster
from .models import ModelConfig

__all__ = ["LayerCosts", "Plan", "PlacementResult", "layer_costs", "best_plan",
           "default_tps", "divisors", "unit_times"]


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def default_tps(model: ModelConfig, chips: int, candidates: Sequence[int] = (1, 2, 4, 8, 16)) -> list[int]:
    """Tensor-parallel degrees that divide the heads and MLP width and fit in ``chips``."""
    out = [t for t in candidates if t <= chips and model.heads % t == 0 and model.ffn_hidden % t == 0
           and (model.kv_heads % t == 0 or model.kv_heads < t)]
    return out or [1]


@dataclass(frozen=True)
class LayerCosts:
    """Per-unit costs for every (tp, microbatch): arrays shaped (T, B, U) unless noted.

    Units are ``[embedding, layer_0 .. layer_{L-1}, head]``.
    """

    tps: tuple[int, ...]
    microbatches: tuple[int, ...]
    fwd_s: np.ndarray
    bwd_s: np.ndarray
    stash_bytes: np.ndarray
    input_bytes: np.ndarray
    params_per_chip: np.ndarray  # (T, U)
    p2p_s: np.ndarray  # (T, B): one pipeline send of a microbatch's activations
    hbm_bytes: float
    link_bandwidth_Bps: float
    link_latency_s: float
    peak_flops: float
    flops_per_sample: float
    tokens_per_sample: int
    unit_names: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        T, B = len(self.tps), len(self.microbatches)
        for f in ("fwd_s", "bwd_s", "stash_bytes", "input_bytes"):
            a = np.ascontiguousarray(getattr(self, f), dtype=np.float64)
            if a.ndim != 3 or a.shape[:2] != (T, B):
                raise ValueError(f"LayerCosts.{f} must have shape ({T}, {B}, units), got {a.shape}")
            if not np.all(np.isfinite(a)) or np.any(a < 0):
                raise ValueError(f"LayerCosts.{f} must be finite and >= 0")
            object.__setattr__(self, f, a)
        U = self.fwd_s.shape[2]
        par = np.ascontiguousarray(self.params_per_chip, dtype=np.float64)
        if par.shape != (T, U):
            raise ValueError(f"LayerCosts.params_per_chip must have shape ({T}, {U}), got {par.shape}")
        object.__setattr__(self, "params_per_chip", par)
        p2p = np.ascontiguousarray(self.p2p_s, dtype=np.float64)
        if p2p.shape != (T, B):
            raise ValueError(f"LayerCosts.p2p_s must have shape ({T}, {B}), got {p2p.shape}")
        object.__setattr__(self, "p2p_s", p2p)

    @property
    def units(self) -> int:
        return self.fwd_s.shape[2]


@dataclass(frozen=True)
class Plan:
    """One training plan and its predicted performance."""

    dp: int
    tp: int
    pp: int
    microbatch: int
    num_microbatches: int
    stage_starts: tuple[int, ...]
    recompute: tuple[bool, ...]
    step_time_s: float
    tokens_per_s: float
    samples_per_s: float
    mfu: float
    memory_per_chip_bytes: tuple[float, ...]
    chips_used: int

    @property
    def stage_units(self) -> list[tuple[int, int]]:
        """(first unit, end unit) of every stage; unit 0 is the embedding, the last the head."""
        ends = list(self.stage_starts[1:]) + [None]
        return [(s, e) for s, e in zip(self.stage_starts, ends)]

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["stage_starts"] = list(self.stage_starts)
        d["recompute"] = list(self.recompute)
        d["memory_per_chip_bytes"] = list(self.memory_per_chip_bytes)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Plan:
        d = dict(d)
        for k in ("stage_starts", "recompute", "memory_per_chip_bytes"):
            d[k] = tuple(d[k])
        return cls(**d)

    def describe(self) -> str:
        rc = sum(self.recompute)
        return (f"dp={self.dp} tp={self.tp} pp={self.pp} mb={self.microbatch} x{self.num_microbatches} "
                f"recompute {rc}/{self.pp} stages, step {self.step_time_s:.3f} s, "
                f"{self.tokens_per_s:,.0f} tok/s, MFU {self.mfu:.1%}")


@dataclass(frozen=True)
class PlacementResult:
    """Best plans (best first), or none with the reason and the least memory a plan needs."""

    plans: tuple[Plan, ...]
    reason: str = ""
    min_memory_needed_bytes: float = 0.0

    @property
    def feasible(self) -> bool:
        return bool(self.plans)

    @property
    def best(self) -> Plan:
        if not self.plans:
            raise ValueError(f"no feasible plan: {self.reason}")
        return self.plans[0]


# ---------------------------------------------------------------------- building costs
def unit_times(model: ModelConfig, designs: np.ndarray, tps: Sequence[int], microbatches: Sequence[int],
               cluster: Cluster, time_model: str = "sum") -> tuple[np.ndarray, np.ndarray]:
    """(fwd, bwd) seconds shaped (designs, T, B, 3) for the embedding, one layer and the head,
    including the tensor-parallel all-reduces (link bandwidth of each design or the cluster's)."""
    from .hardware import design_array
    d = design_array(designs)
    nd = len(d)
    fwd = np.zeros((nd, len(tps), len(microbatches), 3))
    bwd = np.zeros_like(fwd)
    link = np.full(nd, cluster.link_bandwidth_Bps) if cluster.link_bandwidth_Bps else d[:, 10]
    for ti, t in enumerate(tps):
        for bi, b in enumerate(microbatches):
            for pi, part in enumerate(("embedding", "layer", "head")):
                for phase, out in (("fwd", fwd), ("bwd", bwd)):
                    g = graph.build(model, t, b, phase, part)
                    if time_model == "sum":
                        chip = cost.price(g, d).sum(axis=1)
                    elif time_model in ("ilp", "list"):
                        from . import schedule
                        chip = np.array([schedule.layer_time(g, Accelerator.from_array(row),
                                                             method=time_model).latency_s for row in d])
                    else:
                        raise ValueError(f"unknown time_model {time_model!r}; choose 'sum', 'ilp' or 'list'")
                    ar = sum(comm.ring_allreduce_s(nb, t, link, cluster.link_latency_s)
                             for nb in g.allreduce_bytes) if t > 1 else 0.0
                    out[:, ti, bi, pi] = chip + ar
    return fwd, bwd


def layer_costs(model: ModelConfig, accelerator: Accelerator, cluster: Cluster,
                tps: Sequence[int] | None = None, microbatches: Sequence[int] | None = None,
                global_batch: int | None = None, time_model: str = "sum",
                mem: memory.MemoryConfig | None = None,
                times: tuple[np.ndarray, np.ndarray] | None = None) -> LayerCosts:
    """Per-unit costs of ``model`` on ``accelerator`` for each (tp, microbatch).

    ``times`` may pass precomputed ``unit_times`` for this design ((T, B, 3) each).
    Microbatches default to the divisors of ``global_batch``.
    """
    mem = mem or memory.MemoryConfig()
    tps = tuple(int(t) for t in (tps or default_tps(model, cluster.num_chips)))
    if microbatches is None:
        if global_batch is None:
            raise ValueError("give microbatches or global_batch")
        microbatches = divisors(int(global_batch))
    mbs = tuple(int(b) for b in microbatches)
    if times is None:
        f, b = unit_times(model, accelerator.as_array()[None], tps, mbs, cluster, time_model)
        f, b = f[0], b[0]
    else:
        f, b = times
    L = model.num_layers
    U = L + 2
    T, B = len(tps), len(mbs)

    def expand(x3):  # (T, B, 3) -> (T, B, U)
        return np.concatenate([x3[:, :, :1], np.repeat(x3[:, :, 1:2], L, axis=2), x3[:, :, 2:]], axis=2)

    stash = np.zeros((T, B, 3))
    inp = np.zeros((T, B, 3))
    p2p = np.zeros((T, B))
    params = np.zeros((T, U))
    link = cluster.link_bandwidth(accelerator)
    sp = mem.sequence_parallel
    c = model
    for ti, t in enumerate(tps):
        norms = 2 * c.norm_params()
        params[ti, 1:-1] = (c.layer_params() - norms) / t + norms
        emb = c.vocab * c.hidden / t + (c.seq_len * c.hidden if c.position == "learned" else 0)
        params[ti, 0] = emb
        params[ti, -1] = c.norm_params() + (0 if c.tie_embeddings else c.vocab * c.hidden / t)
        for bi, mb in enumerate(mbs):
            x_in = memory.layer_input_bytes(c, t, mb, sp)
            stash[ti, bi, 1] = memory.layer_activation_bytes(c, t, mb, sp)
            inp[ti, bi, 1] = x_in
            stash[ti, bi, 0] = x_in
            inp[ti, bi, 0] = x_in
            # head: final-norm input + fp32 logits of the vocab shard
            stash[ti, bi, 2] = x_in + c.seq_len * mb * math.ceil(c.vocab / t) * 4.0
            inp[ti, bi, 2] = x_in
            p2p[ti, bi] = comm.p2p_s(c.seq_len * mb * c.hidden * c.dtype_bytes / (t if sp else 1),
                                     link, cluster.link_latency_s)
    return LayerCosts(tps=tps, microbatches=mbs, fwd_s=expand(f), bwd_s=expand(b),
                      stash_bytes=expand(stash), input_bytes=expand(inp), params_per_chip=params,
                      p2p_s=p2p, hbm_bytes=accelerator.hbm_bytes, link_bandwidth_Bps=link,
                      link_latency_s=cluster.link_latency_s, peak_flops=accelerator.peak_flops,
                      flops_per_sample=c.flops_per_token() * c.seq_len, tokens_per_sample=c.seq_len,
                      unit_names=("embedding",) + tuple(f"layer{i}" for i in range(L)) + ("head",))


# ---------------------------------------------------------------------- the search
def _validate(costs: LayerCosts, chips: int, global_batch: int) -> None:
    if isinstance(chips, bool) or int(chips) != chips or chips <= 0:
        raise ValueError(f"chips must be a positive integer, got {chips!r}")
    if isinstance(global_batch, bool) or int(global_batch) != global_batch or global_batch <= 0:
        raise ValueError(f"global_batch must be a positive integer, got {global_batch!r}")
    bad = [b for b in costs.microbatches if global_batch % b]
    if bad:
        raise ValueError(f"microbatch sizes {bad} do not divide global_batch={global_batch}")


def search_table(costs: LayerCosts, chips: int, global_batch: int, mem: memory.MemoryConfig | None = None,
                 overlap_dp: bool = True, max_pp: int | None = None, rtol: float = 1e-9) -> tuple[np.ndarray, np.ndarray]:
    """(step-time table (T, B, D, P), dp values) from the numba kernel."""
    from ._kernels import dp as kernel
    mem = mem or memory.MemoryConfig()
    _validate(costs, chips, global_batch)
    dp_vals = np.array([d for d in divisors(global_batch) if d <= chips], dtype=np.int64)
    max_pp = int(min(max_pp or costs.units, costs.units, chips))
    table = kernel.search(costs.fwd_s, costs.bwd_s, costs.stash_bytes, costs.input_bytes,
                          costs.params_per_chip, costs.p2p_s, np.array(costs.tps, dtype=np.int64),
                          np.array(costs.microbatches, dtype=np.int64), dp_vals, max_pp,
                          int(global_batch), int(chips), float(costs.hbm_bytes),
                          mem.weight_bytes + mem.grad_bytes, mem.optimizer_bytes, bool(mem.zero1),
                          mem.grad_bytes, costs.link_bandwidth_Bps, costs.link_latency_s,
                          bool(overlap_dp), float(rtol))
    return table, dp_vals


def _plan_for(costs: LayerCosts, ti: int, bi: int, dp: int, pp: int, global_batch: int,
              mem: memory.MemoryConfig, overlap_dp: bool, rtol: float) -> Plan:
    from ._kernels import dp as kernel
    mb = costs.microbatches[bi]
    m = global_batch // (dp * mb)
    bounds = np.zeros(pp + 1, dtype=np.int64)
    recomp = np.zeros(pp + 1, dtype=np.bool_)
    mems = np.zeros(pp + 1)
    spp = mem.weight_bytes + mem.grad_bytes + (mem.optimizer_bytes / dp if mem.zero1 else mem.optimizer_bytes)
    step = kernel.best_partition(costs.fwd_s[ti, bi], costs.bwd_s[ti, bi], costs.stash_bytes[ti, bi],
                                 costs.input_bytes[ti, bi], costs.params_per_chip[ti],
                                 float(costs.p2p_s[ti, bi]), m, pp, dp, float(costs.hbm_bytes), spp,
                                 mem.grad_bytes, costs.link_bandwidth_Bps, costs.link_latency_s,
                                 bool(overlap_dp), float(rtol), bounds, recomp, mems)
    tp = costs.tps[ti]
    chips_used = dp * tp * pp
    return Plan(dp=int(dp), tp=int(tp), pp=int(pp), microbatch=int(mb), num_microbatches=int(m),
                stage_starts=tuple(int(x) for x in bounds[:pp]),
                recompute=tuple(bool(x) for x in recomp[:pp]), step_time_s=float(step),
                tokens_per_s=global_batch * costs.tokens_per_sample / step,
                samples_per_s=global_batch / step,
                mfu=global_batch * costs.flops_per_sample / (step * chips_used * costs.peak_flops),
                memory_per_chip_bytes=tuple(float(x) for x in mems[:pp]), chips_used=int(chips_used))


def min_memory_needed(costs: LayerCosts, chips: int, global_batch: int, mem: memory.MemoryConfig) -> float:
    """A lower bound on per-chip memory of any plan: the heaviest unit alone on a stage,
    recomputed, one microbatch in flight, at the largest tp and dp allowed."""
    best = np.inf
    for ti, t in enumerate(costs.tps):
        for bi, _b in enumerate(costs.microbatches):
            dps = [d for d in divisors(global_batch) if d * t <= chips and global_batch % (d * costs.microbatches[bi]) == 0]
            if not dps:
                continue
            dp = max(dps)
            static = memory.static_bytes(costs.params_per_chip[ti], dp, mem)
            need = static + np.minimum(costs.input_bytes[ti, bi] + costs.stash_bytes[ti, bi],
                                       costs.stash_bytes[ti, bi])
            best = min(best, float(need.max()))
    return best


def best_plan(costs: LayerCosts, cluster: Cluster | int, global_batch: int, top_k: int = 1,
              mem: memory.MemoryConfig | None = None, overlap_dp: bool = True,
              max_pp: int | None = None, rtol: float = 1e-9) -> PlacementResult:
    """Highest-throughput plans for ``costs`` on ``cluster`` (best first, up to ``top_k``
    distinct (dp, tp, pp, microbatch) configurations).

    Returns a :class:`PlacementResult`; if nothing fits, ``plans`` is empty and
    ``reason`` states the least memory per chip a plan would need.
    """
    chips = cluster.num_chips if isinstance(cluster, Cluster) else cluster
    mem = mem or memory.MemoryConfig()
    if isinstance(top_k, bool) or int(top_k) != top_k or top_k < 1:
        raise ValueError(f"top_k must be a positive integer, got {top_k!r}")
    table, dp_vals = search_table(costs, chips, global_batch, mem, overlap_dp, max_pp, rtol)
    flat = table.ravel()
    finite = np.flatnonzero(np.isfinite(flat))
    if finite.size == 0:
        need = min_memory_needed(costs, chips, global_batch, mem)
        return PlacementResult((), reason=(f"no plan fits {costs.hbm_bytes / 2**30:.1f} GiB of HBM per chip "
                                           f"on {chips} chips; a plan needs at least "
                                           f"{need / 2**30:.1f} GiB per chip"),
                               min_memory_needed_bytes=need)
    order = finite[np.argsort(flat[finite], kind="stable")][:top_k]
    plans = []
    for idx in order:
        ti, bi, di, pi = np.unravel_index(idx, table.shape)
        plans.append(_plan_for(costs, int(ti), int(bi), int(dp_vals[di]), int(pi) + 1, global_batch,
                               mem, overlap_dp, rtol))
    return PlacementResult(tuple(plans))
