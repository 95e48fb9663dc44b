"""Per-layer operator scheduling on one accelerator: an ILP (CVXPY + HiGHS), a
critical-path list scheduler and a lower bound.

Resources (PHAZE's formulation, Wang et al. ICML 2024).  A chip has a tensor unit of
``N_T`` cores and a vector unit of ``N_V`` cores.  An op runs in one *mode*: its unit and
either **all** of the unit's cores or **one** core (PHAZE's ``y`` variable).  These are
*slots*: a unit contributes ``W_u = min(N_u, A_u)`` core slots, with ``A_u`` the largest set
of ops on that unit no two of which are ordered by the DAG (a max antichain, Dilworth) —
a one-core op holds one slot, an all-cores op all of them — so at most ``N_u`` one-core
ops ever run at once (PHAZE adds that core constraint lazily; with ``W_u`` slots it holds
exactly, and more slots could never be used).  A one-core mode is offered only where it
beats linear scaling (``N`` such ops side by side, each with ``1/N`` of the cores and
bandwidth, against one after another on all cores: a GEMM with fewer tiles than cores);
elsewhere it only adds symmetric branches.  An op's latency in a mode is the roofline
(:func:`cosearch.cost.price`) at that many cores with the chip's HBM bandwidth; concurrent
ops are *not* charged for sharing that bandwidth (a GEMM beside a memory-bound vector op
is priced as if each had it all; a shared-bandwidth model with HBM as two more slots was
tried and made the backward layer's ILP time out at 10 s — issue 12).  Tensor ops (GEMMs)
run on the tensor cores (PHAZE's mapping) or, with ``allow_gemm_on_vector``, also slowly on
the vector units; vector ops only on the vector units.  All-reduce ops are not chip work:
they are contracted out of the DAG (their time is added by :mod:`cosearch.placement`).  A
mode another mode beats on both latency and slots (a subset) is dropped, and an op
ordered against every other op keeps only its fastest modes.  A layer whose ops form a
chain (a forward layer) is solved without the ILP: its makespan is the sum of the fastest
modes.

Formulation: disjunctive, with big-M.  Binary ``y[i, m]`` picks op ``i``'s mode,
its duration is ``d_i = sum_m lat[i, m] y[i, m]``, ``s_i`` its start.  Precedence:
``s_j >= s_i + d_i`` for every edge.  For every pair of ops with no path between
them and every slot both could use, an order binary ``z_ij`` and::

    s_i + d_i <= s_j + M (1 - z_ij) + M (2 - u_ir - u_jr)
    s_j + d_j <= s_i + M z_ij       + M (2 - u_ir - u_jr)

where ``u_ir`` (a sum of ``y``) is 1 when op ``i`` occupies slot ``r``.  ``M`` is the
list schedule's makespan, which also bounds every finish time.  Minimise the
makespan ``C >= s_i + d_i``.  A unit's core slots are interchangeable, so the ILP may take
the first op (by index) on core slot ``k`` to follow one on slot ``k - 1``: symmetry
breaking that keeps an optimum.  A disjunctive model beats a time-indexed one here:
op latencies span five orders of magnitude (a 10 us norm next to a 10 ms GEMM), so
any time grid fine enough to be exact would need ~10^4 steps per op, while pairs
related by a path need no disjunction at all (a transformer layer is close to a
chain, so few pairs remain).

The list scheduler (upper bound, warm start and fallback) dispatches ready ops
by longest remaining critical path and gives each the mode that finishes it
earliest.  The lower bound is the largest of the critical path (fastest mode per
op) and, for each kind of slot (tensor cores, vector cores), the least slot-time every op
needs of that kind over the number of such slots.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from . import cost
from .graph import KIND_ATTENTION, KIND_NETWORK, KIND_TENSOR, LayerGraph
from .hardware import Accelerator

__all__ = ["ScheduleResult", "Problem", "layer_time", "list_schedule", "lower_bound", "solve_ilp",
           "make_problem", "scheduling_prices", "cache_info", "clear_cache", "SLOTS", "is_chain", "max_antichain", "layer_bounds"]

#: The legacy six-mode layout (two halves per unit), the default of a hand-built
#: :class:`Problem`: slots 0-1 are the tensor cores' halves, 2-3 the vector units'.
SLOTS = ("tensor.0", "tensor.1", "vector.0", "vector.1")
#: mode -> slots it occupies
MODES = ((0, 1), (0,), (1,), (2, 3), (2,), (3,))
MODE_NAMES = ("tensor.all", "tensor.half0", "tensor.half1", "vector.all", "vector.half0", "vector.half1")
#: Interchangeable slot chains of the legacy layout: (modes on slot k-1, modes on slot k).
LEGACY_SYMMETRY = (((1,), (2,)), ((4,), (5,)))


@dataclass(frozen=True)
class Problem:
    """A scheduling instance: latencies (ops x modes, inf = cannot run), edges, and which
    slots each mode occupies.  ``modes``/``slots``/``mode_names`` default to the legacy
    six-mode layout (:data:`MODES`); ``symmetry`` lists (modes on slot k-1, modes on slot
    k) pairs of interchangeable slots for symmetry breaking (``()``: none)."""

    names: tuple[str, ...]
    latency_s: np.ndarray
    preds: tuple[tuple[int, ...], ...]
    modes: tuple[tuple[int, ...], ...] = MODES
    slots: tuple[str, ...] = SLOTS
    mode_names: tuple[str, ...] = MODE_NAMES
    symmetry: tuple = LEGACY_SYMMETRY
    slot_kinds: tuple[str, ...] = ("tensor", "tensor", "vector", "vector")

    def __post_init__(self) -> None:
        lat = np.asarray(self.latency_s, dtype=np.float64)
        n = len(self.names)
        if lat.shape != (n, len(self.modes)):
            raise ValueError(f"latency_s must have shape ({n}, {len(self.modes)}), got {lat.shape}")
        if len(self.mode_names) != len(self.modes) or len(self.slot_kinds) != len(self.slots):
            raise ValueError("mode_names must name every mode and slot_kinds every slot")
        for m in self.modes:
            if not m or any(not (0 <= r < len(self.slots)) for r in m):
                raise ValueError(f"mode slots {m!r} must be a non-empty subset of the {len(self.slots)} slots")
        for i in range(n):
            ok = np.isfinite(lat[i])
            if not ok.any():
                raise ValueError(f"op {self.names[i]!r} cannot run on any unit")
            if np.any(lat[i][ok] <= 0) or np.any(np.isnan(lat[i])):
                raise ValueError(f"op {self.names[i]!r} has a non-positive latency")
        object.__setattr__(self, "latency_s", lat)
        if len(self.preds) != n:
            raise ValueError("preds must list the predecessors of every op")
        _topo_order(self.preds, self.names)

    def __len__(self) -> int:
        return len(self.names)

    def content_key(self) -> tuple:
        """Everything a solver reads: two problems with equal keys have the same schedules
        (designs that price a layer's ops alike share one ILP solve)."""
        return (self.names, self.latency_s.tobytes(), self.preds, self.modes, self.slots, self.mode_names,
                self.symmetry, self.slot_kinds)


def _topo_order(preds, names) -> list[int]:
    n = len(preds)
    indeg = [len(set(p)) for p in preds]
    succ: list[list[int]] = [[] for _ in range(n)]
    for j, ps in enumerate(preds):
        for i in set(ps):
            if not (0 <= i < n):
                raise ValueError(f"op {names[j]!r} depends on unknown op index {i}")
            succ[i].append(j)
    ready = [i for i in range(n) if indeg[i] == 0]
    order = []
    while ready:
        i = ready.pop()
        order.append(i)
        for j in succ[i]:
            indeg[j] -= 1
            if indeg[j] == 0:
                ready.append(j)
    if len(order) != n:
        stuck = [names[i] for i in range(n) if indeg[i] > 0]
        raise ValueError(f"the op graph has a cycle through op {stuck[0]!r}")
    return order


@dataclass(frozen=True)
class ScheduleResult:
    """A layer schedule: makespan, each op's mode and start, the bounds and the status.

    ``status`` is ``optimal`` (proven within ``mip_gap``), ``time_limit`` (best ILP
    solution when the limit hit; ``gap`` says how far from proven), ``list`` (the list
    schedule was asked for) or ``fallback`` (the solver failed; list schedule used).
    """

    latency_s: float
    modes: tuple[str, ...]
    start_s: tuple[float, ...]
    lower_bound_s: float
    list_schedule_s: float
    status: str
    gap: float
    solve_time_s: float = 0.0
    op_names: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}


# ---------------------------------------------------------------------- building problems
def _gemm_on_vector_s(ops: np.ndarray, chip: Accelerator, frac: float) -> np.ndarray:
    """Roofline time of tensor ops run on the vector units (one FMA per lane per cycle)."""
    m, n, k, b = ops[:, 1], ops[:, 2], ops[:, 3], ops[:, 4]
    lanes = chip.vector_units * frac * chip.vector_width
    compute = np.ceil(m * n * k * b / lanes) / chip.clock_hz
    mem = (ops[:, 7] + ops[:, 8]) / (chip.hbm_bandwidth_Bps * frac)
    return np.maximum(compute, mem)


def _reach(preds: Sequence[Sequence[int]], names: Sequence[str]) -> np.ndarray:
    """Boolean (n, n): ``reach[i, j]`` when op ``j`` is a (transitive) predecessor of ``i``."""
    n = len(preds)
    reach = np.zeros((n, n), dtype=bool)
    for i in _topo_order(preds, names):
        for j in preds[i]:
            reach[i, j] = True
            reach[i] |= reach[j]
    return reach


def max_antichain(reach: np.ndarray, members: np.ndarray) -> int:
    """Size of the largest set of ``members`` no two of which are ordered (Dilworth: members
    minus a maximum matching of the comparability bipartite graph)."""
    idx = np.flatnonzero(members)
    if len(idx) <= 1:
        return len(idx)
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import maximum_bipartite_matching
    sub = reach[np.ix_(idx, idx)].T          # sub[a, b]: a precedes b
    match = maximum_bipartite_matching(csr_matrix(sub.astype(np.int8)), perm_type="column")
    return int(len(idx) - np.count_nonzero(match >= 0))


def _chip_graph(layer: LayerGraph) -> tuple[tuple[str, ...], tuple[tuple[int, ...], ...], np.ndarray]:
    """The layer's chip work: (op names, their predecessors among themselves, their op
    rows), all-reduce ops contracted out (a successor of one depends on
    its chip predecessors)."""
    ops = layer.arrays()
    keep = [i for i in range(len(layer)) if ops[i, 0] != KIND_NETWORK]
    new_index = {old: new for new, old in enumerate(keep)}

    def chip_preds(i: int) -> set[int]:
        out: set[int] = set()
        for d in layer.ops[i].deps:
            out |= {new_index[d]} if d in new_index else chip_preds(d)
        return out

    names = tuple(layer.ops[i].name for i in keep)
    preds = tuple(tuple(sorted(chip_preds(old))) for old in keep)
    return names, preds, ops[keep]


def _on_tensor_cores(kept: np.ndarray) -> np.ndarray:
    """GEMMs and attention matmuls (PHAZE maps both to the tensor cores)."""
    return np.isin(kept[:, 0], (KIND_TENSOR, KIND_ATTENTION))


def _one_core(designs: np.ndarray) -> np.ndarray:
    """The designs with one tensor core and one vector unit (the rest, bandwidth included, kept)."""
    from .hardware import DESIGN_FIELDS
    one = np.array(designs, dtype=np.float64)
    one[:, [DESIGN_FIELDS.index("tensor_cores"), DESIGN_FIELDS.index("vector_units")]] = 1.0
    return one


def _one_core_pays(kept: np.ndarray, designs: np.ndarray, efficiency, is_tensor: np.ndarray) -> np.ndarray:
    """(designs, ops): whether one core of its unit is offered to an op — only where it beats
    linear scaling: N such ops side by side, each with 1/N of the cores and of the bandwidth,
    against one after another on the whole chip (a GEMM with fewer tiles than cores, say).
    Where it does not (big GEMMs; ops bound by memory, which share the bandwidth either
    way) it only adds symmetric branches to the ILP."""
    from .hardware import DESIGN_FIELDS
    ti, vi = DESIGN_FIELDS.index("tensor_cores"), DESIGN_FIELDS.index("vector_units")
    bi = DESIGN_FIELDS.index("hbm_bandwidth_Bps")
    full = cost.price(kept, designs, 1.0, efficiency=efficiency)
    pays = np.zeros_like(full, dtype=bool)
    for col, mask in ((ti, is_tensor), (vi, ~is_tensor)):
        lin = _one_core(designs)              # one core of the unit with 1/N of the bandwidth
        lin[:, bi] = designs[:, bi] / designs[:, col]
        n = designs[:, [col]]
        t_lin = cost.price(kept, lin, 1.0, efficiency=efficiency)
        pays[:, mask] = ((t_lin < n * full * (1 - 1e-12)) & (n > 1))[:, mask]
    return pays


def _mode_prices(kept: np.ndarray, designs: np.ndarray, frac: float, efficiency) -> np.ndarray:
    """(designs, ops) times of ops run on a ``frac`` share of their unit's cores with the
    whole HBM bandwidth (the roofline scales bandwidth by ``frac``; this undoes it)."""
    from .hardware import DESIGN_FIELDS
    c = np.array(designs, dtype=np.float64)
    bi = DESIGN_FIELDS.index("hbm_bandwidth_Bps")
    c[:, bi] = c[:, bi] / frac
    return cost.price(kept, c, frac, efficiency=efficiency)


def scheduling_prices(layer: LayerGraph, designs: np.ndarray, efficiency=None) -> np.ndarray:
    """(designs, values): every roofline price of ``layer``'s ops that the serial sum,
    :func:`make_problem` and :func:`layer_bounds` read of a design — all ops at all cores;
    for the ops on the chip, whether one core is offered (:func:`_one_core_pays`) and, where
    it is, the one-core time with the whole bandwidth and the one-core mode's time as
    :func:`make_problem` prices it (fraction ``1/N``, bandwidth scaled by ``N``); NaN where
    not offered.  Two designs with equal rows, the same core counts and the same HBM, get the
    same layer schedules and bounds."""
    from .hardware import DESIGN_FIELDS
    d = np.atleast_2d(np.asarray(designs, dtype=np.float64))
    ti, vi = DESIGN_FIELDS.index("tensor_cores"), DESIGN_FIELDS.index("vector_units")
    every = cost.price(layer, d, 1.0, efficiency=efficiency)
    _, _, kept = _chip_graph(layer)
    if not len(kept):
        return every
    is_tensor = _on_tensor_cores(kept)
    pays = _one_core_pays(kept, d, efficiency, is_tensor)
    t_one = cost.price(kept, _one_core(d), 1.0, efficiency=efficiency)
    t_mode = np.full_like(t_one, np.nan)
    for col, mask in ((ti, is_tensor), (vi, ~is_tensor)):
        for n in np.unique(d[:, col]):
            sel = np.flatnonzero(d[:, col] == n)
            frac = 1.0 / n
            t_mode[np.ix_(sel, np.flatnonzero(mask))] = _mode_prices(kept, d[sel], frac, efficiency)[:, mask]
    return np.concatenate([every, pays.astype(float), np.where(pays, t_one, np.nan), np.where(pays, t_mode, np.nan)],
                          axis=1)


def make_problem(layer: LayerGraph, chip: Accelerator, allow_gemm_on_vector: bool = False,
                 prune_dominated: bool = True) -> Problem:
    """Scheduling instance of ``layer`` on ``chip`` in PHAZE's all-or-one-core formulation
    (see the module docstring); all-reduce ops are contracted out."""
    names, preds, kept = _chip_graph(layer)
    n = len(kept)
    reach = _reach(preds, names)
    related = reach | reach.T
    concurrent = bool(n > 1 and (~related[~np.eye(n, dtype=bool)]).any())
    is_tensor = _on_tensor_cores(kept)
    cores = {"tensor": chip.tensor_cores, "vector": chip.vector_units}
    pays = _one_core_pays(kept, chip.as_array()[None], chip.efficiency, is_tensor)[0]
    one_pays = {"tensor": is_tensor & pays, "vector": ~is_tensor & pays}
    width = {u: min(cores[u], max_antichain(reach, one_pays[u])) if concurrent else 1
             for u in ("tensor", "vector")}
    slots: list[str] = []
    kinds: list[str] = []
    unit_slots = {}
    for u in ("tensor", "vector"):
        k = max(1, width[u])
        unit_slots[u] = tuple(range(len(slots), len(slots) + k))
        slots += [f"{u}.{c}" for c in range(k)]
        kinds += [u] * k
    core_opts = {u: [("all", unit_slots[u], 1.0)] + ([(f"core{c}", (unit_slots[u][c],), 1.0 / cores[u])
                                                       for c in range(width[u])] if width[u] >= 2 else [])
                 for u in ("tensor", "vector")}
    modes, mode_names, spec = [], [], []
    for u in ("tensor", "vector"):
        for cname, cslots, frac in core_opts[u]:
            modes.append(tuple(sorted(cslots)))
            mode_names.append(f"{u}.{cname}")
            spec.append((u, frac))
    lat = np.full((n, len(modes)), np.inf)
    priced: dict[float, tuple] = {}
    for m, (u, frac) in enumerate(spec):
        key = frac
        if key not in priced:
            c = chip.with_(hbm_bandwidth_Bps=chip.hbm_bandwidth_Bps / frac)   # the whole bandwidth
            priced[key] = (_mode_prices(kept, chip.as_array()[None], frac, chip.efficiency)[0],
                           _gemm_on_vector_s(kept, c, frac) if allow_gemm_on_vector else None)
        own, gemm_vec = priced[key]
        rows = np.ones(n, dtype=bool) if frac == 1.0 else one_pays[u]
        if u == "tensor":
            sel = is_tensor & rows
            lat[sel, m] = own[sel]
        else:
            sel = ~is_tensor & rows
            lat[sel, m] = own[sel]
            if allow_gemm_on_vector and frac == 1.0:
                lat[is_tensor, m] = gemm_vec[is_tensor]
    bad = [names[i] for i in range(n) if np.any(lat[i][np.isfinite(lat[i])] <= 0)]
    if bad:
        raise ValueError(f"op {bad[0]!r} has a non-positive latency (an empty op?)")
    if prune_dominated:
        sets = [set(m) for m in modes]
        for i in range(n):
            for m in range(len(modes)):
                if not np.isfinite(lat[i, m]):
                    continue
                for m2 in range(len(modes)):
                    if m2 != m and np.isfinite(lat[i, m2]) and sets[m2] <= sets[m] and (
                            lat[i, m2] < lat[i, m] or (lat[i, m2] == lat[i, m] and (sets[m2] < sets[m] or m2 < m))):
                        lat[i, m] = np.inf
                        break
    symmetry = []
    mode_sets = [set(m) for m in modes]
    for u in ("tensor", "vector"):
        us = unit_slots[u]
        if len(us) >= 2 and width[u] >= 2:
            for c in range(1, len(us)):
                prev = tuple(m for m in range(len(modes)) if mode_sets[m] & set(us) == {us[c - 1]})
                cur = tuple(m for m in range(len(modes)) if mode_sets[m] & set(us) == {us[c]})
                symmetry.append((prev, cur))
    return Problem(names, lat, preds, tuple(modes), tuple(slots), tuple(mode_names), tuple(symmetry), tuple(kinds))


# ---------------------------------------------------------------------- bounds and list schedule
def _succs(p: Problem) -> list[list[int]]:
    s: list[list[int]] = [[] for _ in range(len(p))]
    for j, ps in enumerate(p.preds):
        for i in ps:
            s[i].append(j)
    return s


def lower_bound(p: Problem) -> float:
    """max(critical path with each op's fastest mode, and for each kind of slot the least
    slot-time every op needs of that kind over the number of such slots)."""
    if len(p) == 0:
        return 0.0
    fastest = p.latency_s.min(axis=1)
    finish = np.zeros(len(p))
    for i in _topo_order(p.preds, p.names):
        finish[i] = fastest[i] + max((finish[j] for j in p.preds[i]), default=0.0)
    best = finish.max()
    kinds = np.array(p.slot_kinds)
    for kind in sorted(set(p.slot_kinds)):
        members = set(np.flatnonzero(kinds == kind).tolist())
        use = np.array([len(members & set(m)) for m in p.modes], dtype=float)
        fin = np.isfinite(p.latency_s)
        area = np.where(fin, np.where(use[None, :] > 0, np.where(fin, p.latency_s, 0.0) * use[None, :], 0.0),
                        np.inf).min(axis=1)
        best = max(best, area.sum() / len(members))
    return float(best)


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
    faster."""
    from .hardware import DESIGN_FIELDS
    d = np.atleast_2d(np.asarray(designs, dtype=np.float64))
    names, preds, kept = _chip_graph(layer)
    if not len(kept):
        return np.zeros(len(d))
    ti, vi = DESIGN_FIELDS.index("tensor_cores"), DESIGN_FIELDS.index("vector_units")
    t_all = cost.price(kept, d, 1.0, efficiency=efficiency)
    t_one = cost.price(kept, _one_core(d), 1.0, efficiency=efficiency)          # one core, the whole bandwidth
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
    area_t = np.where(is_tensor[None, :], core_time, fastest)[:, alone_t].sum(axis=1)
    area_v = np.where(~is_tensor[None, :], core_time, fastest)[:, alone_v].sum(axis=1)
    return np.maximum(finish.max(axis=1), np.maximum(area_t, area_v))


def is_chain(p: Problem) -> bool:
    """Every pair of ops is ordered: no two can ever run at once."""
    n = len(p)
    return n <= 1 or bool(_related(p)[~np.eye(n, dtype=bool)].all())


def serial_schedule(p: Problem) -> tuple[float, list[int], list[float]]:
    """Ops one after another in topological order, each in its fastest mode: (makespan,
    mode per op, start per op) — optimal for a chain, and never slower than the serial sum
    of all-core times."""
    modes = [int(np.argmin(p.latency_s[i])) for i in range(len(p))]
    starts = [0.0] * len(p)
    t = 0.0
    for i in _topo_order(p.preds, p.names):
        starts[i] = t
        t += float(p.latency_s[i, modes[i]])
    return t, modes, starts


def list_schedule(p: Problem) -> tuple[float, list[int], list[float]]:
    """Critical-path list schedule: (makespan, mode per op, start per op)."""
    n = len(p)
    if n == 0:
        return 0.0, [], []
    fastest = p.latency_s.min(axis=1)
    succ = _succs(p)
    order = _topo_order(p.preds, p.names)
    tail = np.zeros(n)
    for i in reversed(order):
        tail[i] = fastest[i] + max((tail[j] for j in succ[i]), default=0.0)
    remaining = [len(set(ps)) for ps in p.preds]
    ready = {i for i in range(n) if remaining[i] == 0}
    slot_free = [0.0] * len(p.slots)
    finish = [0.0] * n
    modes = [-1] * n
    starts = [0.0] * n
    while ready:
        i = max(ready, key=lambda k: (tail[k], -k))
        ready.remove(i)
        t0 = max((finish[j] for j in p.preds[i]), default=0.0)
        best = (math.inf, math.inf, -1)
        for m, slots in enumerate(p.modes):
            lat = p.latency_s[i, m]
            if not np.isfinite(lat):
                continue
            st = max([t0] + [slot_free[r] for r in slots])
            cand = (st + lat, lat, m)
            if cand < best:
                best = cand
        f, lat, m = best
        modes[i], starts[i], finish[i] = m, f - lat, f
        for r in p.modes[m]:
            slot_free[r] = f
        for j in succ[i]:
            remaining[j] -= 1
            if remaining[j] == 0:
                ready.add(j)
    return float(max(finish)), modes, starts


def _related(p: Problem) -> np.ndarray:
    """Boolean (n, n): a path exists between i and j (either direction)."""
    reach = _reach(p.preds, p.names)
    return reach | reach.T


# ---------------------------------------------------------------------- the ILP
class _QuietStdout:
    """Silence C-level stdout (HiGHS prints a banner even with output_flag off)."""

    def __enter__(self):
        import os
        import sys
        try:
            sys.stdout.flush()
            self._fd = os.dup(1)
            self._null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(self._null, 1)
        except (OSError, ValueError):
            self._fd = None
        return self

    def __exit__(self, *exc):
        import os
        if self._fd is not None:
            os.dup2(self._fd, 1)
            os.close(self._fd)
            os.close(self._null)
        return False


def solve_ilp(p: Problem, solver: str = "HIGHS", time_limit_s: float = 10.0, mip_gap: float = 1e-6,
              start: tuple[float, list[int], list[float]] | None = None, lb: float | None = None,
              ) -> tuple[float, list[int], list[float], str, float, float]:
    """Solve the disjunctive MILP.  Returns (makespan, modes, starts, status, gap, solve seconds).

    ``start`` / ``lb`` may pass an already computed :func:`list_schedule` result and
    :func:`lower_bound`.  Falls back to the list schedule with a warning if the solver fails.
    """
    import cvxpy as cp

    n = len(p)
    ub, lmodes, lstarts = start if start is not None else list_schedule(p)
    if n <= 1:
        return ub, lmodes, lstarts, "optimal", 0.0, 0.0
    t_start = time.perf_counter()
    lat = p.latency_s
    # earliest start (head) and least remaining time after an op (tail), fastest modes
    fastest = lat.min(axis=1)
    order = _topo_order(p.preds, p.names)
    succ = _succs(p)
    head = np.zeros(n)
    for i in order:
        head[i] = max((head[j] + fastest[j] for j in p.preds[i]), default=0.0)
    tail = np.zeros(n)
    for i in reversed(order):
        tail[i] = max((tail[j] + fastest[j] for j in succ[i]), default=0.0)
    # a mode that cannot finish within the list schedule's makespan is never optimal
    finite = np.isfinite(lat) & (head[:, None] + np.where(np.isfinite(lat), lat, 0) + tail[:, None]
                                 <= ub * (1 + 1e-12))
    related = _related(p)
    # an op ordered against every other op runs alone: only its fastest modes matter
    for i in range(n):
        if related[i, np.arange(n) != i].all():
            finite[i] &= lat[i] <= fastest[i] * (1 + 1e-12)
    finite[np.arange(n), lmodes] = True
    if lb is None:
        lb = lower_bound(p)
    M = ub
    scale = 1.0 / ub  # solve in units of the upper bound for numerical sanity
    L = np.where(finite, lat * scale, 0.0)
    MODES_, SLOTS_ = p.modes, p.slots
    nm = len(MODES_)
    usable = np.array([[any(finite[i, m] and r in MODES_[m] for m in range(nm))
                        for r in range(len(SLOTS_))] for i in range(n)])
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n) if not related[i, j]]
    P = len(pairs)
    # boolean vector xb = [y (n*nm, row-major), z (P)]; continuous xc = [s (n), C]
    nb, nc = n * nm + P, n + 1
    big = M * scale
    rb: list[int] = []
    cb: list[int] = []
    vb: list[float] = []
    rc: list[int] = []
    cc: list[int] = []
    vc: list[float] = []
    rhs: list[float] = []

    def row(bool_terms, cont_terms, b):
        r = len(rhs)
        for col, v in bool_terms:
            rb.append(r)
            cb.append(col)
            vb.append(v)
        for col, v in cont_terms:
            rc.append(r)
            cc.append(col)
            vc.append(v)
        rhs.append(b)

    def dur(i, sign=1.0):
        return [(i * nm + m, sign * L[i, m]) for m in range(nm) if finite[i, m]]

    def use(i, r, coef):
        return [(i * nm + m, coef) for m in range(nm) if finite[i, m] and r in MODES_[m]]

    for i in range(n):
        row(dur(i), [(i, 1.0), (n, -1.0)], -tail[i] * scale)  # s_i + d_i + tail_i <= C
        row([], [(i, -1.0)], -head[i] * scale)  # s_i >= head_i
    row([], [(n, -1.0)], -lb * scale * (1 - 1e-9))  # C >= lower bound
    for j, ps in enumerate(p.preds):
        for i in ps:
            row(dur(i), [(i, 1.0), (j, -1.0)], 0.0)  # s_i + d_i <= s_j
    for k, (i, j) in enumerate(pairs):
        zc = n * nm + k
        for r in range(len(SLOTS_)):
            if not (usable[i, r] and usable[j, r]):
                continue
            row(dur(i) + [(zc, big)] + use(i, r, big) + use(j, r, big), [(i, 1.0), (j, -1.0)], 3 * big)
            row(dur(j) + [(zc, -big)] + use(i, r, big) + use(j, r, big), [(j, 1.0), (i, -1.0)], 2 * big)
    # energetic cuts: every slot is busy at most C (valid, and they tighten the LP a lot)
    for r in range(len(SLOTS_)):
        terms = [(i * nm + m, L[i, m]) for i in range(n) for m in range(nm) if finite[i, m] and r in MODES_[m]]
        if terms:
            users = [i for i in range(n) if any(finite[i, m] and r in MODES_[m] for m in range(nm))]
            slack = (min(head[users]) + min(tail[users])) * scale
            row(terms, [(n, -1.0)], -slack)
    # symmetry breaking: interchangeable slots, so the first op (by index) on slot k may be
    # taken to follow an op on slot k - 1
    for prev, cur in p.symmetry:
        for i in range(n):
            mine = [(i * nm + m, 1.0) for m in cur if finite[i, m]]
            if mine:
                row(mine + [(j * nm + m, -1.0) for j in range(i) for m in prev if finite[j, m]], [], 0.0)
    from scipy import sparse
    nr = len(rhs)
    Ab = sparse.csr_matrix((vb, (rb, cb)), shape=(nr, nb))
    Ac = sparse.csr_matrix((vc, (rc, cc)), shape=(nr, nc))
    Eq = sparse.csr_matrix((np.ones(n * nm), (np.repeat(np.arange(n), nm), np.arange(n * nm))),
                           shape=(n, nb))
    xb = cp.Variable(nb, boolean=True)
    xc = cp.Variable(nc, nonneg=True)
    cons = [Ab @ xb + Ac @ xc <= np.array(rhs), Eq @ xb == 1, xc[n] <= 1.0 + 1e-9]
    forbidden = np.flatnonzero(~finite.ravel())
    if forbidden.size:
        cons.append(xb[forbidden] == 0)
    # warm start from the list schedule
    x0 = np.zeros(nb)
    x0[np.arange(n) * nm + np.array(lmodes)] = 1.0
    st0 = np.array(lstarts)
    for k, (i, j) in enumerate(pairs):
        x0[n * nm + k] = 1.0 if st0[i] <= st0[j] else 0.0
    xb.value = x0
    xc.value = np.concatenate([st0 * scale, [1.0]])
    prob = cp.Problem(cp.Minimize(xc[n]), cons)
    try:
        opts = ({"time_limit": float(time_limit_s), "mip_rel_gap": float(mip_gap), "output_flag": False}
                if solver == "HIGHS" else {})
        with warnings.catch_warnings(), _QuietStdout():
            warnings.simplefilter("ignore")
            prob.solve(solver=getattr(cp, solver), warm_start=True, verbose=False, **opts)
    except Exception as exc:  # solver failure -> list schedule
        warnings.warn(f"ILP solver {solver} failed ({type(exc).__name__}: {exc}); using the list schedule",
                      RuntimeWarning, stacklevel=2)
        return ub, lmodes, lstarts, "fallback", float("nan"), time.perf_counter() - t_start
    elapsed = time.perf_counter() - t_start
    if xb.value is None or xc.value is None or prob.status not in ("optimal", "optimal_inaccurate", "user_limit"):
        warnings.warn(f"ILP solver {solver} returned status {prob.status!r}; using the list schedule",
                      RuntimeWarning, stacklevel=2)
        return ub, lmodes, lstarts, "fallback", float("nan"), elapsed
    modes = [int(np.argmax(r)) for r in xb.value[: n * nm].reshape(n, nm)]
    starts = [max(0.0, float(v) / scale) for v in xc.value[:n]]
    makespan = max(st + lat[i, modes[i]] for i, st in enumerate(starts))
    info = prob.solver_stats.extra_stats
    reported = getattr(info, "mip_gap", None) if info is not None else None
    reported = float(reported) if isinstance(reported, (int, float)) and np.isfinite(reported) and reported >= 0 \
        else None
    optimal = prob.status == "optimal" and reported is not None and reported <= max(mip_gap, 1e-9) * 1.0001
    status = "optimal" if optimal else "time_limit"
    if makespan > ub:  # numerical slack: never worse than the list schedule
        makespan, modes, starts = ub, lmodes, lstarts
    if optimal:
        gap = reported
    else:
        # a real gap: incumbent against the best valid bound we hold (our lower bound, or the
        # solver's own when it reports a positive one); a reported 0 with no proof is not trusted
        lb_v = lb if lb is not None else lower_bound(p)
        ours = max(0.0, 1.0 - lb_v / makespan) if makespan > 0 else 0.0
        gap = min(ours, reported) if reported is not None and reported > 0 else ours
    return float(makespan), modes, starts, status, gap, elapsed


# ---------------------------------------------------------------------- cached public entry
_CACHE: dict = {}
_STATS = {"hits": 0, "misses": 0, "solves": 0}


def cache_info() -> dict:
    """Hits, misses and ILP solves of the layer-schedule cache, and its size."""
    return {**_STATS, "size": len(_CACHE)}


def clear_cache() -> None:
    _CACHE.clear()
    for k in _STATS:
        _STATS[k] = 0


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
    if not isinstance(chip, Accelerator):
        raise ValueError(f"chip must be an Accelerator, got {type(chip).__name__}")
    key = (layer.signature(), tuple(chip.as_array()), chip.efficiency, method, solver, time_limit_s, mip_gap,
           allow_gemm_on_vector)
    if use_cache and key in _CACHE:
        _STATS["hits"] += 1
        return _CACHE[key]
    p = make_problem(layer, chip, allow_gemm_on_vector)
    key2 = ("problem", p.content_key(), method, solver, time_limit_s, mip_gap)
    if use_cache and key2 in _CACHE:       # another design, the same instance
        _STATS["hits"] += 1
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
            mk, modes, starts, status, gap, t = solve_ilp(p, solver, time_limit_s, mip_gap,
                                                          start=(ub, modes, starts), lb=lb)
            res = ScheduleResult(mk, tuple(names[m] for m in modes), tuple(starts), lb, ub, status,
                                 gap, t, p.names)
    if use_cache:
        _CACHE[key] = _CACHE[key2] = res
    return res
