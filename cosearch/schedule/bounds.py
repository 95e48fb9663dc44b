"""Valid lower bounds on a layer's schedule length.

:func:`lower_bound` bounds one :class:`~cosearch.schedule.problem.Problem`; :func:`work_bounds`
and :func:`layer_bounds` bound many designs at once, vectorised, for the co-search's screening.

The lower bound is the largest of the critical path (fastest mode per op), for each kind
of slot the least slot-time every op needs of that kind (exclusive runs counted whole)
over the number of such slots, and the ops' total HBM time.
"""

from __future__ import annotations

import numpy as np

from .. import cost
from .._kernels import formulas
from ..graph import KIND_ATTENTION, KIND_CAST, KIND_TENSOR, KIND_VECTOR, LayerGraph
from ..hardware import DESIGN_FIELDS, IDEAL
from .problem import (
    BANDWIDTH_TOL,
    Problem,
    _chip_graph,
    _exclusive_runs,
    _hbm_s,
    _mode_prices,
    _on_tensor_cores,
    _one_core,
    _one_core_pays,
    _reach,
    _related,
    _topo_order,
)


def lower_bound(p: Problem) -> float:
    """max(critical path with each op's fastest mode; for each kind of slot the least
    slot-time every op needs of that kind over the number of such slots; and the least HBM
    time, share x latency, the ops need in all — the bandwidth is never oversubscribed)."""
    if len(p) == 0:
        return 0.0
    fastest = p.latency_s.min(axis=1)
    finish = np.zeros(len(p))
    for i in _topo_order(p.preds, p.names):
        finish[i] = fastest[i] + max((finish[j] for j in p.preds[i]), default=0.0)
    best = finish.max()
    kinds = np.array(p.slot_kinds)
    fin = np.isfinite(p.latency_s)
    lat0 = np.where(fin, p.latency_s, 0.0)
    # an exclusive run has the chip to itself: it adds its whole time to every slot kind's area
    excl = _exclusive_runs(p, fin, _related(p))
    for kind in sorted(set(p.slot_kinds)):
        members = set(np.flatnonzero(kinds == kind).tolist())
        use = np.array([len(members & set(m)) for m in p.modes], dtype=float)
        area = np.where(fin, np.where(excl, lat0 * len(members), lat0 * use[None, :]), np.inf).min(axis=1)
        best = max(best, area.sum() / len(members))
    hbm = np.where(fin, p.bandwidth * np.where(fin, p.latency_s, 0.0), np.inf).min(axis=1)
    return float(max(best, hbm.sum()))


def _format_rates(dtype_bytes: np.ndarray, macs: np.ndarray, eff) -> np.ndarray:
    """:func:`cosearch._kernels.formulas.tensor_format_rate` of every (design, op): ``dtype_bytes``
    a (1, ops) row, ``macs`` a (designs, 2) array of each design's FP8 and FP4 MACs per PE; the
    formula once per distinct (formats, operand width) pair."""
    dts, di = np.unique(dtype_bytes, return_inverse=True)
    fs, fi = np.unique(np.reshape(macs, (-1, 2)), axis=0, return_inverse=True)
    table = np.array([[formulas.tensor_format_rate.py_func(a, eff.fp8_rate, eff.fp4_rate, f8, f4) for a in dts]
                      for f8, f4 in fs])
    return table[np.reshape(fi, (-1, 1)), np.reshape(di, np.shape(dtype_bytes))]


def work_bounds(layer: LayerGraph, designs: np.ndarray, efficiency=None) -> np.ndarray:
    """A cheap lower bound on the ILP makespan of ``layer`` for every design: the largest of
    the tensor cores' work, the vector units' work and the HBM traffic, each spread
    perfectly.  Whatever mode the ILP gives an op, the cores it holds times its duration is
    at least its work on one core — ``batch ceil(K/R) ceil(N/C) (M + R + C - 2)`` cycles for
    a matmul (the roofline's own cycle count: ``c`` cores need ``ceil(tiles/c)`` waves, or
    split M over idle cores, never less), ``elements x ops`` lane-cycles for a vector op — and
    a unit never holds more than its cores; every op streams at least its operands once (a
    GEMM's A, B and C; a vector or attention op's own bytes) and the bandwidth is never
    oversubscribed.  No roofline call, no graph walk: arithmetic on the op and design
    arrays, so the co-search can screen a whole space before :func:`layer_bounds`."""
    d = np.atleast_2d(np.asarray(designs, dtype=np.float64))
    eff = efficiency or IDEAL
    _names, _preds, kept = _chip_graph(layer)
    if not len(kept):
        return np.zeros(len(d))
    col = {f: d[:, [DESIGN_FIELDS.index(f)]] for f in ("tensor_cores", "systolic_rows", "systolic_cols",
                                                      "vector_units", "vector_width", "clock_hz",
                                                      "hbm_bandwidth_Bps")}
    kind, m, n, k, b = (kept[None, :, j] for j in range(5))
    elements, per, rd, wr, dt = (kept[None, :, j] for j in range(5, 10))
    r, c = col["systolic_rows"], col["systolic_cols"]
    mat = np.isin(kind, (KIND_TENSOR, KIND_ATTENTION))
    rate = np.where(kind == KIND_ATTENTION, eff.attention, eff.tensor) * col["clock_hz"]
    # a GEMM on FP8 / NVFP4 operands at the chip's rate in that format (0: it cannot run); on FP32
    # ones on the vector lanes (formulas.fp32_gemm_cycles), its work the whole chip's lanes' time
    fp32 = (kind == KIND_TENSOR) & (dt >= 4.0)
    fmt = _format_rates(np.where((kind == KIND_TENSOR) & ~fp32, dt, 2.0),
                        d[:, [DESIGN_FIELDS.index("fp8_macs"), DESIGN_FIELDS.index("fp4_macs")]], eff)
    rate = np.where(fmt > 0.0, rate * fmt, 0.0)
    cycles = b * np.ceil(k / r) * np.ceil(n / c) * (m + r + c - 2.0)
    lanes = col["vector_units"] * col["vector_width"] * col["clock_hz"]      # lane-cycles a second
    with np.errstate(divide="ignore"):
        tensor = (np.where(mat & ~fp32, cycles / rate, 0.0).sum(axis=1) / col["tensor_cores"][:, 0]
                  + np.where(fp32, m * n * k * b / (lanes * eff.tensor), 0.0).sum(axis=1))
    vec = (kind == KIND_VECTOR) | (kind == KIND_CAST)
    vector = np.where(vec, elements * per / lanes, 0.0).sum(axis=1)
    operand_bytes = np.where(kind == KIND_TENSOR, (m * k + k * n + m * n) * b * dt, rd + wr)
    hbm = operand_bytes.sum(axis=1) / (col["hbm_bandwidth_Bps"][:, 0] * eff.memory)
    return np.maximum(np.maximum(tensor, vector), hbm)


def layer_bounds(layer: LayerGraph, designs: np.ndarray, efficiency=None) -> np.ndarray:
    """A lower bound on the ILP makespan of ``layer`` for every row of a design array, in one
    vectorised pass (the co-search's valid bound for pruning under the ILP time model):
    the larger of the critical path with each op's fastest mode (all cores, or one core
    with the whole bandwidth where :func:`make_problem` offers one core) and, per unit, the
    least core-time its ops need — ``t_all``, or ``min(t_all, t_one / N)`` where one core is
    offered — over the unit, plus the fastest time of every op of the *other* unit that is
    ordered against all of this unit's ops (the unit idles while it runs).  Every mode
    :func:`make_problem` offers is among those, and a unit's ``W <= N`` slots host at most
    ``N`` one-core ops at once, so the ILP (with GEMMs on the tensor cores) can never be
    faster; and the ops' total HBM time at the whole bandwidth (shares never exceed 1).
    Ops that can overlap no other op (exclusive: a memory-bound op beside ops that read
    HBM) are taken out of the unit sums and added whole: nothing runs beside them."""
    d = np.atleast_2d(np.asarray(designs, dtype=np.float64))
    names, preds, kept = _chip_graph(layer)
    if not len(kept):
        return np.zeros(len(d))
    ti, vi = DESIGN_FIELDS.index("tensor_cores"), DESIGN_FIELDS.index("vector_units")
    t_all = cost.price_rows(kept, d, 1.0, efficiency=efficiency)
    t_one = cost.price_rows(kept, _one_core(d), 1.0, efficiency=efficiency)          # one core, the whole bandwidth
    is_tensor = _on_tensor_cores(kept)
    n_unit = np.where(is_tensor[None, :], d[:, [ti]], d[:, [vi]])
    pays = _one_core_pays(kept, d, efficiency, is_tensor)               # make_problem's own rule
    fastest = np.where(pays, np.minimum(t_all, t_one), t_all)
    core_time = np.where(pays, np.minimum(t_all, t_one / n_unit), t_all)
    finish = np.zeros_like(fastest)
    for i in _topo_order(preds, names):
        start = np.max(finish[:, list(preds[i])], axis=1) if preds[i] else 0.0
        finish[:, i] = start + fastest[:, i]
    # an op ordered against every op of the other unit runs while that unit idles: its time
    # adds to the other unit's busy time (e.g. the vector ops before a backward layer's first GEMM)
    reach = _reach(preds, names)
    related = reach | reach.T
    n = len(kept)
    alone_t = np.array([bool(is_tensor[j]) or bool(related[j, is_tensor].all()) for j in range(n)]) \
        if is_tensor.any() else np.zeros(n, dtype=bool)
    alone_v = np.array([not is_tensor[j] or bool(related[j, ~is_tensor].all()) for j in range(n)]) \
        if (~is_tensor).any() else np.zeros(n, dtype=bool)
    hbm_op = _hbm_s(kept, d, efficiency)
    hbm = hbm_op.sum(axis=1)                              # the bandwidth is never oversubscribed
    # exclusive ops: in every mode offered, every op not ordered against them shares a slot
    # with them or exceeds the bandwidth beside them — they have the chip to themselves.
    # Shares are taken at their smallest over the modes offered (all cores; one core where
    # it pays), so exclusivity is never over-claimed.
    t_mode = np.array(t_all)
    for col, mask in ((ti, is_tensor), (vi, ~is_tensor)):
        for nn in np.unique(d[:, col]):
            sel = np.flatnonzero(d[:, col] == nn)
            t_mode[np.ix_(sel, np.flatnonzero(mask))] = _mode_prices(kept, d[sel], 1.0 / nn, efficiency)[:, mask]
    slowest = np.where(pays, np.maximum(t_all, t_mode), t_all)
    share = np.minimum(hbm_op / slowest, 1.0)
    # op i clashes with every free op j (no path between them) when j, in the modes that
    # could run beside i — any, on the other unit; one-core, on i's own unit where both have
    # one core offered — always streams more than 1 - share_i
    free = ~related & ~np.eye(n, dtype=bool)
    excl = np.ones_like(pays)
    share_pays = np.where(pays, share, np.inf)
    for i in range(n):
        other = np.flatnonzero(free[i] & (is_tensor != is_tensor[i]))
        same = np.flatnonzero(free[i] & (is_tensor == is_tensor[i]))
        need = 1 + BANDWIDTH_TOL - share[:, i]
        if len(other):
            excl[:, i] &= share[:, other].min(axis=1) > need
        if len(same):
            excl[:, i] &= ~pays[:, i] | (share_pays[:, same].min(axis=1) > need)
    t_excl = np.where(excl, fastest, 0.0).sum(axis=1)
    area_t = np.where(is_tensor[None, :], core_time, fastest)
    area_v = np.where(~is_tensor[None, :], core_time, fastest)
    units = np.maximum((area_t * (alone_t[None] & ~excl)).sum(axis=1), (area_v * (alone_v[None] & ~excl)).sum(axis=1))
    return np.maximum(np.maximum(finish.max(axis=1), hbm), t_excl + units)

