"""The cached public entry point :func:`layer_time`: one layer on one chip, by the ILP, the
list schedule or the lower bound, never solving the same instance twice.
"""

from __future__ import annotations

import math

from ..graph import LayerGraph
from ..hardware import Accelerator
from .bounds import lower_bound
from .heuristics import (
    is_chain,
    list_schedule,
    serial_schedule,
)
from .ilp import solve_ilp
from .problem import (
    ScheduleResult,
    make_problem,
)

# ---------------------------------------------------------------------- cached public entry
_CACHE: dict = {}


#: ``time_limited``: layer times handed out (solved or from the cache) that the ILP did not prove
#: optimal (status ``time_limit`` or ``fallback``), so whatever was built on them is not proven.
_STATS = {"hits": 0, "misses": 0, "solves": 0, "time_limited": 0}
_UNPROVEN = ("time_limit", "fallback")


def cache_info() -> dict:
    """Hits, misses and ILP solves of the layer-schedule cache, its size, and how many layer
    times were handed out unproven (``time_limited``: the ILP hit its time limit or fell back)."""
    return {**_STATS, "size": len(_CACHE)}


def clear_cache() -> None:
    _CACHE.clear()
    for k in _STATS:
        _STATS[k] = 0


#: The MILP solvers cvxpy ships with cosearch's dependencies (cvxpy names; HiGHS is the default).
MILP_SOLVERS = ("HIGHS", "SCIPY")


def _check_solver_settings(method, solver, time_limit_s, mip_gap, allow_gemm_on_vector, use_cache) -> None:
    """The ILP settings, checked whatever the method (a cached or chain-shaped layer never reaches
    the solver, so a typo would otherwise pass unnoticed until the first real ILP)."""
    from .._validate import choice, nonneg_float, positive_float
    choice("solver", solver, MILP_SOLVERS)
    positive_float("time_limit_s", time_limit_s)
    if nonneg_float("mip_gap", mip_gap) >= 1.0:
        raise ValueError(f"mip_gap is a relative gap below 1, got {mip_gap!r}")
    for name, flag in (("allow_gemm_on_vector", allow_gemm_on_vector), ("use_cache", use_cache)):
        if not isinstance(flag, bool):
            raise ValueError(f"{name} must be True or False, got {flag!r}")


def layer_time(layer: LayerGraph, chip: Accelerator, method: str = "ilp", solver: str = "HIGHS",
               time_limit_s: float = 10.0, mip_gap: float = 1e-6, allow_gemm_on_vector: bool = False,
               use_cache: bool = True) -> ScheduleResult:
    """Schedule one layer graph on ``chip`` and return its latency.

    ``method`` is ``"ilp"`` (MILP, falls back to the list schedule on failure), ``"list"``
    or ``"bound"`` (the lower bound only: ``latency_s`` is :func:`lower_bound`).  A chain
    of ops is solved exactly without the ILP (status ``optimal``, sum of fastest modes).
    Results are cached by (layer signature — which includes tp and microbatch —, design,
    method, solver settings) and by the scheduling instance itself
    (:meth:`Problem.content_key`), so a search never solves the same ILP twice, even for two
    designs that price the layer's ops alike.
    """
    if method not in ("ilp", "list", "bound"):
        raise ValueError(f"method must be 'ilp', 'list' or 'bound', got {method!r}")
    if not isinstance(layer, LayerGraph):
        raise ValueError(f"layer must be a LayerGraph (cosearch.graph.build), got {type(layer).__name__}")
    if not isinstance(chip, Accelerator):
        raise ValueError(f"chip must be an Accelerator, got {type(chip).__name__}")
    _check_solver_settings(method, solver, time_limit_s, mip_gap, allow_gemm_on_vector, use_cache)
    key = (layer.signature(), tuple(chip.as_array()), chip.efficiency, method, solver, time_limit_s, mip_gap,
           allow_gemm_on_vector)
    if use_cache and key in _CACHE:
        _STATS["hits"] += 1
        _STATS["time_limited"] += _CACHE[key].status in _UNPROVEN
        return _CACHE[key]
    p = make_problem(layer, chip, allow_gemm_on_vector)
    key2 = ("problem", p.content_key(), method, solver, time_limit_s, mip_gap)
    if use_cache and key2 in _CACHE:       # another design, the same instance
        _STATS["hits"] += 1
        _STATS["time_limited"] += _CACHE[key2].status in _UNPROVEN
        _CACHE[key] = _CACHE[key2]
        return _CACHE[key2]
    _STATS["misses"] += 1
    lb = lower_bound(p)
    names = p.mode_names
    if method == "bound":
        res = ScheduleResult(lb, (), (), lb, math.nan, "bound", math.nan, 0.0, p.names)
    elif is_chain(p):
        t, best, starts = serial_schedule(p)
        res = ScheduleResult(t, tuple(names[m] for m in best), tuple(starts), lb, t, "optimal", 0.0, 0.0, p.names)
    else:
        # the list schedule, or ops one after another where that is better: so a scheduled
        # layer is never slower than the serial sum (the co-search's ILP ranking relies on it)
        ub, modes, starts = min(list_schedule(p), serial_schedule(p), key=lambda x: x[0])
        if method == "list":
            res = ScheduleResult(ub, tuple(names[m] for m in modes), tuple(starts), lb, ub, "list",
                                 (ub - lb) / ub if ub > 0 else 0.0, 0.0, p.names)
        else:
            _STATS["solves"] += 1
            r = solve_ilp(p, solver, time_limit_s, mip_gap, start=(ub, modes, starts), lb=lb)
            res = ScheduleResult(r.makespan_s, tuple(names[m] for m in r.modes), r.start_s, lb, ub, r.status,
                                 r.gap, r.solve_time_s, p.names)
            _STATS["time_limited"] += res.status in _UNPROVEN
    if use_cache:
        _CACHE[key] = _CACHE[key2] = res
    return res

