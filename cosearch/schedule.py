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
(:func:`cosearch.cost.price`) at that many cores with the chip's HBM bandwidth.

HBM bandwidth is shared.  A run streams HBM at a fixed *share* of the bandwidth: its
memory time at the whole bandwidth over its latency (1 for a memory-bound run, about 0.2
for a big GEMM); runs that overlap never hold more than 1 between them.  Durations do not
stretch, so every schedule is achievable — a memory-bound op waits for the bandwidth rather
than slowing a GEMM beside it (the model is conservative where a real chip would let both
slow down and overlap).  Tensor ops (GEMMs) run on the tensor cores (PHAZE's mapping) or,
with ``allow_gemm_on_vector``, also slowly on the vector units; vector ops only on the
vector units.  All-reduce ops are not chip work: they are contracted out of the DAG (their
time is added by :mod:`cosearch.placement`).  A mode another mode beats on latency, slots
(a subset) and share is dropped, and an op ordered against every other op keeps only its
fastest modes.  A layer whose ops form a chain (a forward layer) is solved without the
ILP: its makespan is the sum of the fastest modes.

Formulation: disjunctive, with big-M.  Binary ``y[i, m]`` picks op ``i``'s mode,
its duration is ``d_i = sum_m lat[i, m] y[i, m]``, ``s_i`` its start.  Precedence:
``s_j >= s_i + d_i`` for every edge.  For every pair of ops with no path between
them and every slot both could use, an order binary ``z_ij`` and::

    s_i + d_i <= s_j + M (1 - z_ij) + M (2 - u_ir - u_jr)
    s_j + d_j <= s_i + M z_ij       + M (2 - u_ir - u_jr)

where ``u_ir`` (a sum of ``y``) is 1 when op ``i`` occupies slot ``r``.  ``M`` is the
starting schedule's makespan, which also bounds every finish time.  Minimise the
makespan ``C >= s_i + d_i``.  Bandwidth: a pair whose runs' shares sum above 1 gets a
binary ``q_ij`` (no overlap) with the same two big-M rows and ``q_ij >= y_im + y_jm' - 1``;
three or more runs whose shares fit pairwise but not together are cut lazily (solve, find
an instant where the shares exceed 1, add "some two of these do not overlap", solve
again — intervals that pairwise overlap share an instant, so the cuts are exact).
Energetic cuts: every slot is busy at most ``C``, and a run that can overlap no other op
(an *exclusive* run, e.g. a memory-bound op beside GEMMs that read HBM) adds its whole
time to every slot's load.  A unit's core slots are interchangeable, so the ILP may take
the first op (by index) on core slot ``k`` to follow one on slot ``k - 1``: symmetry
breaking that keeps an optimum.  A disjunctive model beats a time-indexed one here:
op latencies span five orders of magnitude (a 10 us norm next to a 10 ms GEMM), so
any time grid fine enough to be exact would need ~10^4 steps per op, while pairs
related by a path need no disjunction at all (a transformer layer is close to a
chain, so few pairs remain).  The model is built from named CVXPY variables
(``_DisjunctiveModel``) and solved by HiGHS; :func:`solve_ilp` returns an
:class:`ILPResult`.

The list scheduler (upper bound, warm start and fallback) dispatches ready ops
by longest remaining critical path and gives each the mode and the earliest start (gaps
included) that finishes it first with its slots idle and the bandwidth not oversubscribed.
The lower bound is the largest of the critical path (fastest mode per op), for each kind
of slot the least slot-time every op needs of that kind (exclusive runs counted whole)
over the number of such slots, and the ops' total HBM time.
"""

from __future__ import annotations

import itertools
import math
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from . import cost
from .graph import KIND_ATTENTION, KIND_NETWORK, KIND_TENSOR, KIND_VECTOR, LayerGraph
from .hardware import Accelerator

__all__ = ["ScheduleResult", "ILPResult", "Problem", "layer_time", "list_schedule", "lower_bound", "solve_ilp",
           "make_problem", "scheduling_prices", "cache_info", "clear_cache", "SLOTS", "is_chain", "max_antichain", "layer_bounds"]

#: The legacy six-mode layout (two halves per unit), the default of a hand-built
#: :class:`Problem`: slots 0-1 are the tensor cores' halves, 2-3 the vector units'.
SLOTS = ("tensor.0", "tensor.1", "vector.0", "vector.1")
#: mode -> slots it occupies
MODES = ((0, 1), (0,), (1,), (2, 3), (2,), (3,))
MODE_NAMES = ("tensor.all", "tensor.half0", "tensor.half1", "vector.all", "vector.half0", "vector.half1")
#: Interchangeable slot chains of the legacy layout: (modes on slot k-1, modes on slot k).
LEGACY_SYMMETRY = (((1,), (2,)), ((4,), (5,)))
#: Slack on the bandwidth budget (shares sum to at most 1 + this) and on overlaps (relative
#: to the makespan), absorbing the solver's feasibility tolerance.
BANDWIDTH_TOL = 1e-9
OVERLAP_TOL = 1e-6


@dataclass(frozen=True)
class Problem:
    """A scheduling instance: latencies (ops x modes, inf = cannot run), edges, and which
    slots each mode occupies.  ``modes``/``slots``/``mode_names`` default to the legacy
    six-mode layout (:data:`MODES`); ``symmetry`` lists (modes on slot k-1, modes on slot
    k) pairs of interchangeable slots for symmetry breaking (``()``: none).  ``bandwidth``
    (ops x modes, in [0, 1]; ``None``: zeros) is the share of the chip's HBM bandwidth an op
    streams at while it runs in a mode: ops running at once never demand more than 1."""

    names: tuple[str, ...]
    latency_s: np.ndarray
    preds: tuple[tuple[int, ...], ...]
    modes: tuple[tuple[int, ...], ...] = MODES
    slots: tuple[str, ...] = SLOTS
    mode_names: tuple[str, ...] = MODE_NAMES
    symmetry: tuple = LEGACY_SYMMETRY
    slot_kinds: tuple[str, ...] = ("tensor", "tensor", "vector", "vector")
    bandwidth: np.ndarray | None = None


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
        bw = np.zeros_like(lat) if self.bandwidth is None else np.asarray(self.bandwidth, dtype=np.float64)
        if bw.shape != lat.shape:
            raise ValueError(f"bandwidth must have the shape of latency_s {lat.shape}, got {bw.shape}")
        if np.any(np.isnan(bw)) or np.any(bw < 0) or np.any(bw > 1 + 1e-9):
            raise ValueError("bandwidth shares must lie in [0, 1] (a share of the chip's HBM bandwidth)")
        object.__setattr__(self, "bandwidth", np.minimum(bw, 1.0))
        if len(self.preds) != n:
            raise ValueError("preds must list the predecessors of every op")
        _topo_order(self.preds, self.names)

    def __len__(self) -> int:
        return len(self.names)

    def content_key(self) -> tuple:
        """Everything a solver reads: two problems with equal keys have the same schedules
        (designs that price a layer's ops alike share one ILP solve).  The bandwidth shares
        enter as the constraints they make: with at most two slots no more than two runs
        ever overlap, so only which pairs of runs exceed the bandwidth matters (designs whose
        L2 changes a GEMM's bytes but no conflict share a solve); with more slots, the
        shares themselves."""
        if not self.shares_bandwidth:
            bw: object = None
        elif len(self.slots) <= 2:
            fin = np.isfinite(self.latency_s)
            f = np.where(fin, self.bandwidth, -np.inf).ravel()
            bw = np.packbits(f[:, None] + f[None, :] > 1 + BANDWIDTH_TOL).tobytes()
        else:
            bw = self.bandwidth.tobytes()
        return (self.names, self.latency_s.tobytes(), self.preds, self.modes, self.slots, self.mode_names,
                self.symmetry, self.slot_kinds, bw)

    @property
    def shares_bandwidth(self) -> bool:
        """Whether ops running at once could ever demand more HBM bandwidth than the chip has."""
        top = np.where(np.isfinite(self.latency_s), self.bandwidth, 0.0).max(axis=1)
        return len(self) > 1 and float(top.sum()) > 1 + BANDWIDTH_TOL


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


def _fields_as_dict(obj) -> dict:
    """A result dataclass's fields as JSON-ready values (tuples as lists)."""
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in obj.__dict__.items()}


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
        return _fields_as_dict(self)


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


def _hbm_s(kept: np.ndarray, designs: np.ndarray, efficiency) -> np.ndarray:
    """(designs, ops) seconds each op streams HBM at the whole (achievable) bandwidth: its
    roofline memory time, which no mode changes (one-core modes keep the whole bandwidth,
    and an op's bytes depend on the L2 and the L1 per core, not on how many cores it gets)."""
    from .hardware import DESIGN_FIELDS
    fast = np.array(designs, dtype=np.float64)
    fast[:, DESIGN_FIELDS.index("clock_hz")] = 1e300        # compute takes no time
    launch = cost.efficiency_array(fast, efficiency)[3]
    return np.maximum(cost.price(kept, fast, 1.0, efficiency=efficiency) - launch, 0.0)


def scheduling_prices(layer: LayerGraph, designs: np.ndarray, efficiency=None) -> np.ndarray:
    """(designs, values): every roofline price of ``layer``'s ops that the serial sum,
    :func:`make_problem` and :func:`layer_bounds` read of a design — all ops at all cores;
    for the ops on the chip, whether one core is offered (:func:`_one_core_pays`) and, where
    it is, the one-core time with the whole bandwidth and the one-core mode's time as
    :func:`make_problem` prices it (fraction ``1/N``, bandwidth scaled by ``N``); NaN where
    not offered; and each op's HBM time at the whole bandwidth (its share of the bandwidth in
    every mode).  Two designs with equal rows, the same core counts and the same HBM, get the
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
    return np.concatenate([every, pays.astype(float), np.where(pays, t_one, np.nan), np.where(pays, t_mode, np.nan),
                           _hbm_s(kept, d, efficiency)], axis=1)


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
    # HBM share of each mode: the op's memory time at the whole bandwidth over its latency
    fin = np.isfinite(lat)
    hbm = np.repeat(_hbm_s(kept, chip.as_array()[None], chip.efficiency)[0][:, None], len(modes), axis=1)
    if allow_gemm_on_vector:
        on_vec = np.array([u == "vector" for u, _ in spec])
        hbm[np.ix_(is_tensor, on_vec)] = ((kept[:, 7] + kept[:, 8]) / chip.hbm_bandwidth_Bps)[is_tensor, None]
    bw = np.where(fin, np.minimum(hbm / np.where(fin, lat, 1.0), 1.0), 0.0)
    if prune_dominated:
        # a mode is dropped when another takes a subset of its slots, no longer and no more
        # bandwidth (ties: the smaller slot set, then the lower index)
        sets = [set(m) for m in modes]
        for i in range(n):
            for m in range(len(modes)):
                if not np.isfinite(lat[i, m]):
                    continue
                for m2 in range(len(modes)):
                    if m2 != m and np.isfinite(lat[i, m2]) and sets[m2] <= sets[m] and bw[i, m2] <= bw[i, m] and (
                            lat[i, m2] < lat[i, m] or (lat[i, m2] == lat[i, m] and (sets[m2] < sets[m] or m2 < m))):
                        lat[i, m] = np.inf
                        break
        bw[~np.isfinite(lat)] = 0.0
    symmetry = []
    mode_sets = [set(m) for m in modes]
    for u in ("tensor", "vector"):
        us = unit_slots[u]
        if len(us) >= 2 and width[u] >= 2:
            for c in range(1, len(us)):
                prev = tuple(m for m in range(len(modes)) if mode_sets[m] & set(us) == {us[c - 1]})
                cur = tuple(m for m in range(len(modes)) if mode_sets[m] & set(us) == {us[c]})
                symmetry.append((prev, cur))
    return Problem(names, lat, preds, tuple(modes), tuple(slots), tuple(mode_names), tuple(symmetry), tuple(kinds),
                   bw)


# ---------------------------------------------------------------------- bounds and list schedule
def _succs(p: Problem) -> list[list[int]]:
    s: list[list[int]] = [[] for _ in range(len(p))]
    for j, ps in enumerate(p.preds):
        for i in ps:
            s[i].append(j)
    return s


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
    from .hardware import DESIGN_FIELDS, IDEAL
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
    cycles = b * np.ceil(k / r) * np.ceil(n / c) * (m + r + c - 2.0)
    tensor = np.where(mat, cycles / rate, 0.0).sum(axis=1) / col["tensor_cores"][:, 0]
    vec = kind == KIND_VECTOR
    lanes = col["vector_units"] * col["vector_width"] * col["clock_hz"]
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
    """List schedule: (makespan, mode per op, start per op).  Ready ops are taken by longest
    remaining critical path, or (a second pass) in the graph's own op order, and the better
    of the two schedules is kept; each op gets the mode and the earliest start that finishes
    it first, with its slots free and the HBM bandwidth never oversubscribed (an op may fill
    an earlier gap)."""
    n = len(p)
    if n == 0:
        return 0.0, [], []
    fastest = p.latency_s.min(axis=1)
    succ = _succs(p)
    order = _topo_order(p.preds, p.names)
    tail = np.zeros(n)
    for i in reversed(order):
        tail[i] = fastest[i] + max((tail[j] for j in succ[i]), default=0.0)
    best = min(_list_pass(p, succ, lambda k: (tail[k], -k)), _list_pass(p, succ, lambda k: -k),
               key=lambda x: x[0])
    return _justify(p, succ, *best)


def _sgs(p: Problem, order, modes, preds) -> list[float]:
    """Serial schedule generation with fixed modes: each op of ``order`` (topological for
    ``preds``) at its earliest start after its ``preds`` with its slots idle and the
    bandwidth not oversubscribed.  Returns the starts."""
    placed: list[tuple[float, float, frozenset, float]] = []
    start = [0.0] * len(p)
    finish = [0.0] * len(p)
    for i in order:
        m = modes[i]
        lat = float(p.latency_s[i, m])
        t0 = max((finish[j] for j in preds[i]), default=0.0)
        start[i] = _first_fit(placed, t0, lat, frozenset(p.modes[m]), float(p.bandwidth[i, m]))
        finish[i] = start[i] + lat
        placed.append((start[i], finish[i], frozenset(p.modes[m]), float(p.bandwidth[i, m])))
    return start


def _justify(p: Problem, succ, makespan: float, modes, starts, rounds: int = 3):
    """Forward-backward improvement (Valls et al. 2005, "justification"): schedule the ops
    again as late as possible in order of decreasing finish, then as early as possible in
    order of the new starts; modes kept.  Never longer; repeated while it shortens."""
    lat = np.array([p.latency_s[i, m] for i, m in enumerate(modes)])
    for _ in range(rounds):
        fin = np.asarray(starts) + lat
        back = _sgs(p, sorted(range(len(p)), key=lambda i: (-fin[i], i)), modes, succ)   # reversed time
        span = max(b + lat[i] for i, b in enumerate(back))
        late = [span - (b + lat[i]) for i, b in enumerate(back)]                        # real starts
        fwd = _sgs(p, sorted(range(len(p)), key=lambda i: (late[i], i)), modes, p.preds)
        new = max(f + lat[i] for i, f in enumerate(fwd))
        if new >= makespan * (1 - 1e-12):
            break
        makespan, starts = float(new), fwd
    return float(makespan), list(modes), list(starts)


def _list_pass(p: Problem, succ, priority) -> tuple[float, list[int], list[float]]:
    """One list-scheduling pass taking the ready op of highest ``priority`` first."""
    n = len(p)
    remaining = [len(set(ps)) for ps in p.preds]
    ready = {i for i in range(n) if remaining[i] == 0}
    placed: list[tuple[float, float, frozenset, float]] = []
    finish = [0.0] * n
    modes = [-1] * n
    starts = [0.0] * n
    mode_slots = [frozenset(m) for m in p.modes]
    while ready:
        i = max(ready, key=priority)
        ready.remove(i)
        t0 = max((finish[j] for j in p.preds[i]), default=0.0)
        best = (math.inf, math.inf, -1)
        for m in range(len(p.modes)):
            lat = p.latency_s[i, m]
            if not np.isfinite(lat):
                continue
            st = _first_fit(placed, t0, lat, mode_slots[m], float(p.bandwidth[i, m]))
            cand = (st + lat, lat, m)
            if cand < best:
                best = cand
        f, lat, m = best
        modes[i], starts[i], finish[i] = m, f - lat, f
        placed.append((f - lat, f, mode_slots[m], float(p.bandwidth[i, m])))
        for j in succ[i]:
            remaining[j] -= 1
            if remaining[j] == 0:
                ready.add(j)
    return float(max(finish)), modes, starts


def _first_fit(placed: list, t0: float, lat: float, slots: frozenset, share: float) -> float:
    """Earliest start ``>= t0`` of a ``lat``-long run on ``slots`` demanding ``share`` of the
    HBM bandwidth, next to ``placed`` runs (start, finish, slots, share): none of its slots
    busy and the shares in use at every instant at most 1.  The candidates are ``t0`` and
    the placed runs' finishes after it (the earliest feasible start is one of them)."""
    for t in sorted({t0, *(f for _, f, _, _ in placed if f > t0)}):
        end = t + lat
        over = [(s, f, sl, sh) for s, f, sl, sh in placed if s < end and f > t]
        if any(sl & slots for _, _, sl, _ in over):
            continue
        if share > 0 and over:
            # the load is piecewise constant; it peaks at t or at a placed run's start inside
            points = [t] + [s for s, _, _, _ in over if s > t]
            if any(share + sum(sh for s, f, _, sh in over if s <= q < f) > 1 + BANDWIDTH_TOL for q in points):
                continue
        return t
    return t0  # unreachable: after every placed run finishes, all is free


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


@dataclass(frozen=True)
class ILPResult:
    """What :func:`solve_ilp` found: the makespan, each op's mode (index into
    ``Problem.modes``) and start, ``status`` (``optimal``: proven within the gap asked for;
    ``time_limit``: the best schedule when time ran out, ``gap`` says how far from proven;
    ``fallback``: the solver failed and the starting schedule is returned), the gap, the
    seconds spent, how many solver rounds ran and how many bandwidth cuts they added."""

    makespan_s: float
    modes: tuple[int, ...]
    start_s: tuple[float, ...]
    status: str
    gap: float
    solve_time_s: float
    rounds: int = 1
    bandwidth_cuts: int = 0

    def to_dict(self) -> dict:
        return _fields_as_dict(self)


def _oversubscribed(p: Problem, modes, starts, makespan: float) -> list[tuple[tuple[int, int], ...]]:
    """Sets of runs (op, mode) that run at one instant of a schedule and together demand
    more than the whole HBM bandwidth — each cut to a smallest violating subset (largest
    shares first).  Runs that merely touch (one ends where the next starts) do not overlap."""
    tol = OVERLAP_TOL * makespan
    related = _related(p)
    share = np.array([p.bandwidth[i, m] for i, m in enumerate(modes)])
    fin = np.array([st + p.latency_s[i, m] for i, (st, m) in enumerate(zip(starts, modes))])
    st = np.asarray(starts)
    found = set()
    for t in np.unique(st):
        on = np.flatnonzero((st <= t + tol) & (fin > t + tol))
        if share[on].sum() <= 1 + BANDWIDTH_TOL:
            continue
        on = on[np.argsort(-share[on], kind="stable")]
        k = int(np.searchsorted(np.cumsum(share[on]), 1 + BANDWIDTH_TOL, side="right")) + 1
        found.add(tuple(sorted((int(i), int(modes[i])) for i in on[:k])))
    # runs ordered by a path never overlap: such a "set" is solver tolerance, not a schedule
    found = {c for c in found if not any(related[a, b] for (a, _), (b, _) in itertools.combinations(c, 2))}
    return sorted(found)


def solve_ilp(p: Problem, solver: str = "HIGHS", time_limit_s: float = 10.0, mip_gap: float = 1e-6,
              start: tuple[float, list[int], list[float]] | None = None, lb: float | None = None,
              max_rounds: int = 50) -> ILPResult:
    """Solve the disjunctive MILP (see the module docstring) and return an :class:`ILPResult`.

    ``start`` / ``lb`` may pass an already computed feasible schedule (makespan, modes,
    starts), e.g. :func:`list_schedule`'s, and :func:`lower_bound`.  Where the ops may
    oversubscribe the HBM bandwidth, every pair of runs that cannot share it is ordered up
    front, and larger sets are cut lazily: a solution in which some runs overlap at one
    instant demanding more than the bandwidth gets the cut "if these ops run in these
    modes, some two of them do not overlap" (intervals on a line that pairwise overlap
    share an instant, so this is exact) and is solved again, at most ``max_rounds`` times
    within ``time_limit_s``.  Falls back to the starting schedule with a warning if the
    solver fails.
    """
    t_start = time.perf_counter()
    n = len(p)
    ub, lmodes, lstarts = start if start is not None else list_schedule(p)
    if n <= 1:
        return ILPResult(ub, tuple(lmodes), tuple(lstarts), "optimal", 0.0, 0.0, 0, 0)
    if lb is None:
        lb = lower_bound(p)
    if ub <= lb * (1 + mip_gap):          # the starting schedule meets the bound: proven
        return ILPResult(ub, tuple(lmodes), tuple(lstarts), "optimal", max(0.0, 1.0 - lb / ub) if ub > 0 else 0.0,
                         time.perf_counter() - t_start, 0, 0)
    model = _DisjunctiveModel(p, ub, lmodes, lstarts, lb)
    rounds = cuts = 0
    relaxed_lb = lb
    while True:
        rounds += 1
        left = time_limit_s - (time.perf_counter() - t_start)
        try:
            sol = model.solve(solver, max(left, 1e-3), mip_gap)
        except Exception as exc:  # solver failure -> the starting schedule
            warnings.warn(f"ILP solver {solver} failed ({type(exc).__name__}: {exc}); using the list schedule",
                          RuntimeWarning, stacklevel=2)
            return ILPResult(ub, tuple(lmodes), tuple(lstarts), "fallback", float("nan"),
                             time.perf_counter() - t_start, rounds, cuts)
        if sol is None:
            warnings.warn(f"ILP solver {solver} returned status {model.status!r}; using the list schedule",
                          RuntimeWarning, stacklevel=2)
            return ILPResult(ub, tuple(lmodes), tuple(lstarts), "fallback", float("nan"),
                             time.perf_counter() - t_start, rounds, cuts)
        makespan, modes, starts, optimal, reported = sol
        if optimal:            # the optimum of a relaxation (fewer cuts) bounds the true one
            relaxed_lb = max(relaxed_lb, makespan * (1 - mip_gap))
        bad = _oversubscribed(p, modes, starts, makespan) if p.shares_bandwidth else []
        if not bad:
            break
        cuts += model.add_cuts(bad)
        if rounds >= max_rounds or time.perf_counter() - t_start >= time_limit_s:
            # out of rounds: the starting schedule stands, with the best bound we proved
            gap = max(0.0, 1.0 - relaxed_lb / ub) if ub > 0 else 0.0
            return ILPResult(ub, tuple(lmodes), tuple(lstarts), "time_limit", gap,
                             time.perf_counter() - t_start, rounds, cuts)
    elapsed = time.perf_counter() - t_start
    if makespan > ub:  # numerical slack: never worse than the starting schedule
        makespan, modes, starts = ub, list(lmodes), list(lstarts)
    if optimal:
        return ILPResult(float(makespan), tuple(modes), tuple(starts), "optimal", reported, elapsed, rounds, cuts)
    # a real gap: incumbent against the best valid bound we hold (ours, or the solver's own
    # when it reports a positive one); a reported 0 with no proof is not trusted
    ours = max(0.0, 1.0 - relaxed_lb / makespan) if makespan > 0 else 0.0
    gap = min(ours, reported) if reported is not None and reported > 0 else ours
    return ILPResult(float(makespan), tuple(modes), tuple(starts), "time_limit", gap, elapsed, rounds, cuts)


def _holds(p: Problem) -> np.ndarray:
    """Boolean (modes, slots): the slots each mode holds."""
    inc = np.zeros((len(p.modes), len(p.slots)), dtype=bool)
    for m, sl in enumerate(p.modes):
        inc[m, list(sl)] = True
    return inc


def _exclusive_runs(p: Problem, finite: np.ndarray, related: np.ndarray) -> np.ndarray:
    """(ops, modes): runs that can overlap no other op's run in any mode — every op not
    ordered against them holds a common slot in each of its modes or would oversubscribe
    the HBM bandwidth beside them (a memory-bound op next to anything that reads HBM)."""
    n, nm = finite.shape
    if not p.shares_bandwidth:
        return np.zeros((n, nm), dtype=bool)
    inc = _holds(p).astype(int)
    common = (inc @ inc.T) > 0
    bw = np.where(finite, p.bandwidth, 0.0)
    out = finite.copy()
    for i in range(n):
        for j in np.flatnonzero(~related[i]):
            if j == i:
                continue
            mj = np.flatnonzero(finite[j])
            # run (i, m) may overlap j when some mode of j shares no slot and fits the bandwidth
            fits = (~common[:, mj]) & (bw[i][:, None] + bw[j, mj][None, :] <= 1 + BANDWIDTH_TOL)
            out[i] &= ~fits.any(axis=1)
    return out


class _DisjunctiveModel:
    """The MILP of one :class:`Problem` as named CVXPY variables, in units of the starting
    makespan ``ub`` (so every time lies in [0, 1] and 1 is a valid big-M):

    * ``y`` (ops x modes, boolean): the mode of each op; ``d = sum_m L * y`` its duration;
    * ``s`` (ops), ``C``: starts and the makespan;
    * ``z`` (pairs, boolean): for each pair of ops with no path between them, whether the
      lower-index op goes first (read only where the pair must not overlap);
    * ``q`` (bandwidth pairs, boolean): the pair does not overlap, forced where the two
      runs' HBM shares sum above 1 and chosen where a lazy cut needs it.
    """

    def __init__(self, p: Problem, ub: float, lmodes, lstarts, lb: float):
        n = len(p)
        self.p, self.ub, self.n = p, ub, n
        lat = p.latency_s
        fastest = lat.min(axis=1)
        order = _topo_order(p.preds, p.names)
        succ = _succs(p)
        head = np.zeros(n)
        for i in order:
            head[i] = max((head[j] + fastest[j] for j in p.preds[i]), default=0.0)
        tail = np.zeros(n)
        for i in reversed(order):
            tail[i] = max((tail[j] + fastest[j] for j in succ[i]), default=0.0)
        # a mode that cannot finish within the starting makespan is never optimal
        finite = np.isfinite(lat) & (head[:, None] + np.where(np.isfinite(lat), lat, 0) + tail[:, None]
                                     <= ub * (1 + 1e-12))
        related = _related(p)
        # an op ordered against every other op runs alone: only its fastest modes matter
        for i in range(n):
            if related[i, np.arange(n) != i].all():
                finite[i] &= lat[i] <= fastest[i] * (1 + 1e-12)
        finite[np.arange(n), lmodes] = True
        self.finite = finite
        self.scale = 1.0 / ub
        self.L = np.where(finite, lat * self.scale, 0.0)
        self.head, self.tail, self.lb = head * self.scale, tail * self.scale, lb * self.scale
        self.inc = _holds(p).astype(float)                  # mode -> slots it holds
        self.usable = (finite.astype(float) @ self.inc) > 0   # op i may hold slot r
        self.pairs = [(i, j) for i in range(n) for j in range(i + 1, n) if not related[i, j]]
        self.pair_index = {pr: k for k, pr in enumerate(self.pairs)}
        self.edges = np.array([(i, j) for j, ps in enumerate(p.preds) for i in ps], dtype=int).reshape(-1, 2)
        # bandwidth: pairs of runs on disjoint slots whose shares exceed the bandwidth
        self.q_of: dict[int, int] = {}                      # pair index -> its q variable
        self.conflicts: list[tuple[int, int, tuple[int, ...]]] = []   # (pair, mode of i, modes of j)
        # pairs that can never overlap (in every pair of modes they share a slot or exceed
        # the bandwidth) get plain disjunctions, without slot or q terms
        bw = np.where(finite, p.bandwidth, 0.0) if p.shares_bandwidth else np.zeros_like(p.latency_s)
        disjoint = (self.inc @ self.inc.T) == 0
        self.apart = np.array([not (disjoint[np.ix_(finite[i], finite[j])]
                                    & (bw[i, finite[i]][:, None] + bw[j, finite[j]][None, :]
                                       <= 1 + BANDWIDTH_TOL)).any() for i, j in self.pairs], dtype=bool)
        if p.shares_bandwidth:
            for k, (i, j) in enumerate(self.pairs):
                if self.apart[k]:
                    continue
                for m in np.flatnonzero(finite[i]):
                    clash = tuple(int(m2) for m2 in np.flatnonzero(finite[j]) if disjoint[m, m2]
                                  and bw[i, m] + bw[j, m2] > 1 + BANDWIDTH_TOL)
                    if clash:
                        self.q_of.setdefault(k, len(self.q_of))
                        self.conflicts.append((k, int(m), clash))
        self.exclusive = _exclusive_runs(p, finite, related)
        self.cuts: list[tuple[tuple[int, int], ...]] = []
        self.lmodes, self.lstarts = list(lmodes), list(lstarts)
        self.status = None

    def _cut_pairs(self, cut) -> list[int]:
        """Pair indices of every two runs of a cut."""
        return [self.pair_index[(min(a, b), max(a, b))] for (a, _), (b, _) in itertools.combinations(cut, 2)]

    def add_cuts(self, sets) -> int:
        new = [c for c in sets if c not in self.cuts]
        for c in new:
            for k in self._cut_pairs(c):
                self.q_of.setdefault(k, len(self.q_of))
        self.cuts += new
        return len(new)

    def _build(self):
        import cvxpy as cp
        p, n = self.p, self.n
        nm = len(p.modes)
        L, finite = self.L, self.finite
        y = cp.Variable((n, nm), boolean=True, name="y")
        s = cp.Variable(n, nonneg=True, name="s")
        C = cp.Variable(nonneg=True, name="C")
        d = cp.sum(cp.multiply(L, y), axis=1)
        hold = y @ self.inc                                  # (ops, slots): op i holds slot r
        cons = [cp.sum(y, axis=1) == 1, s >= self.head, s + d + self.tail <= C,
                C >= self.lb * (1 - 1e-9), C <= 1.0 + 1e-9]
        off = np.argwhere(~finite)
        if len(off):
            cons.append(y[off[:, 0], off[:, 1]] == 0)
        if len(self.edges):
            a, b = self.edges[:, 0], self.edges[:, 1]
            cons.append(s[a] + d[a] <= s[b])
        z = q = None
        if self.pairs:
            z = cp.Variable(len(self.pairs), boolean=True, name="z")
            # slot disjunctions: a pair holding a common slot does not overlap
            rows = [(k, i, j, r) for k, (i, j) in enumerate(self.pairs) if not self.apart[k]
                    for r in np.flatnonzero(self.usable[i] & self.usable[j])]
            if self.apart.any():
                K = np.flatnonzero(self.apart)
                fst = np.array([self.pairs[k][0] for k in K])
                snd = np.array([self.pairs[k][1] for k in K])
                cons += [s[fst] + d[fst] <= s[snd] + (1 - z[K]), s[snd] + d[snd] <= s[fst] + z[K]]
            if rows:
                K, fst, snd, R = (np.array(c) for c in zip(*rows))
                both = 2 - hold[fst, R] - hold[snd, R]
                cons += [s[fst] + d[fst] <= s[snd] + (1 - z[K]) + both, s[snd] + d[snd] <= s[fst] + z[K] + both]
            if self.q_of:
                q = cp.Variable(len(self.q_of), boolean=True, name="q")
                Kq = np.array(list(self.q_of))
                fst = np.array([self.pairs[k][0] for k in Kq])
                snd = np.array([self.pairs[k][1] for k in Kq])
                cons += [s[fst] + d[fst] <= s[snd] + (1 - z[Kq]) + (1 - q),
                         s[snd] + d[snd] <= s[fst] + z[Kq] + (1 - q)]
                qi = self.q_of
                for k, m, clash in self.conflicts:          # shares above 1: no overlap
                    i, j = self.pairs[k]
                    cons.append(q[qi[k]] >= y[i, m] + cp.sum(y[j, list(clash)]) - 1)
                for c in self.cuts:                        # not all of these at one instant
                    idx = [qi[k] for k in self._cut_pairs(c)]
                    ops, ms = np.array([i for i, _ in c]), np.array([m for _, m in c])
                    cons.append(cp.sum(q[idx]) >= 1 - cp.sum(1 - y[ops, ms]))
        # energetic cuts: every slot is busy at most C, and a run that can share the HBM with
        # no other op (an exclusive run) has the chip to itself, so exclusive runs plus a
        # slot's other load fit in C (valid, and they tighten the LP a lot)
        excl = self.exclusive
        load = cp.sum(cp.multiply(L * ~excl, y) @ self.inc, axis=0)
        alone = cp.sum(cp.multiply(L * excl, y)) if excl.any() else 0.0
        users = [np.flatnonzero(self.usable[:, r] | excl.any(axis=1)) for r in range(len(p.slots))]
        busy = [r for r in range(len(p.slots)) if len(users[r])]
        slack = np.array([self.head[users[r]].min() + self.tail[users[r]].min() for r in busy])
        if busy:
            cons.append(load[busy] + alone + slack <= C)
        # symmetry breaking: interchangeable slots, so the first op (by index) on slot k may
        # be taken to follow an op on slot k - 1
        for prev, cur in p.symmetry:
            on_cur = cp.sum(y[:, list(cur)], axis=1)
            on_prev = cp.sum(y[:, list(prev)], axis=1)
            before = cp.cumsum(on_prev) - on_prev               # ops j < i on slot k - 1
            cons.append(on_cur <= before)
        prob = cp.Problem(cp.Minimize(C), cons)
        # warm start: the starting schedule
        y0 = np.zeros((n, nm))
        y0[np.arange(n), self.lmodes] = 1.0
        y.value = y0
        st0 = np.array(self.lstarts) * self.scale
        s.value, C.value = st0, np.array(1.0)
        fin0 = st0 + self.L[np.arange(n), self.lmodes]
        if z is not None:
            z.value = np.array([1.0 if st0[i] <= st0[j] else 0.0 for i, j in self.pairs])
        if q is not None:
            q.value = np.array([1.0 if fin0[self.pairs[k][0]] <= st0[self.pairs[k][1]] + 1e-12
                                or fin0[self.pairs[k][1]] <= st0[self.pairs[k][0]] + 1e-12 else 0.0
                                for k in self.q_of])
        return prob, y, s

    def solve(self, solver: str, time_limit_s: float, mip_gap: float):
        """One solver round: (makespan, modes, starts, proven optimal, reported gap) or None."""
        import cvxpy as cp
        prob, y, s = self._build()
        opts = ({"time_limit": float(time_limit_s), "mip_rel_gap": float(mip_gap), "output_flag": False}
                if solver == "HIGHS" else {})
        with warnings.catch_warnings(), _QuietStdout():
            warnings.simplefilter("ignore")
            prob.solve(solver=getattr(cp, solver), warm_start=True, verbose=False, **opts)
        self.status = prob.status
        if y.value is None or s.value is None or prob.status not in ("optimal", "optimal_inaccurate", "user_limit"):
            return None
        lat = self.p.latency_s
        modes = [int(np.argmax(r)) for r in y.value]
        starts = [max(0.0, float(v) / self.scale) for v in s.value]
        makespan = max(st + lat[i, modes[i]] for i, st in enumerate(starts))
        info = prob.solver_stats.extra_stats
        reported = getattr(info, "mip_gap", None) if info is not None else None
        reported = float(reported) if isinstance(reported, (int, float)) and np.isfinite(reported) \
            and reported >= 0 else None
        optimal = prob.status == "optimal" and reported is not None and reported <= max(mip_gap, 1e-9) * 1.0001
        return makespan, modes, starts, optimal, reported


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
            r = solve_ilp(p, solver, time_limit_s, mip_gap, start=(ub, modes, starts), lb=lb)
            res = ScheduleResult(r.makespan_s, tuple(names[m] for m in r.modes), r.start_s, lb, ub, r.status,
                                 r.gap, r.solve_time_s, p.names)
    if use_cache:
        _CACHE[key] = _CACHE[key2] = res
    return res
