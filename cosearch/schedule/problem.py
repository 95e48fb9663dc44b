"""The scheduling instance of one layer on one chip: ops, modes, slots, latencies and
HBM-bandwidth shares (:class:`Problem`, :func:`make_problem`, :func:`scheduling_prices`),
and the structural facts the bounds and the ILP share (reachability, exclusive runs).

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
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from .. import cost
from ..graph import KIND_ATTENTION, KIND_NETWORK, KIND_TENSOR, LayerGraph
from ..hardware import DESIGN_FIELDS, Accelerator

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
    one = np.array(designs, dtype=np.float64)
    one[:, [DESIGN_FIELDS.index("tensor_cores"), DESIGN_FIELDS.index("vector_units")]] = 1.0
    return one


def _one_core_pays(kept: np.ndarray, designs: np.ndarray, efficiency, is_tensor: np.ndarray) -> np.ndarray:
    """(designs, ops): whether one core of its unit is offered to an op — only where it beats
    linear scaling: N such ops side by side, each with 1/N of the cores and of the bandwidth,
    against one after another on the whole chip (a GEMM with fewer tiles than cores, say).
    Where it does not (big GEMMs; ops bound by memory, which share the bandwidth either
    way) it only adds symmetric branches to the ILP."""
    ti, vi = DESIGN_FIELDS.index("tensor_cores"), DESIGN_FIELDS.index("vector_units")
    bi = DESIGN_FIELDS.index("hbm_bandwidth_Bps")
    full = cost.price_rows(kept, designs, 1.0, efficiency=efficiency)
    pays = np.zeros_like(full, dtype=bool)
    for col, mask in ((ti, is_tensor), (vi, ~is_tensor)):
        lin = _one_core(designs)              # one core of the unit with 1/N of the bandwidth
        lin[:, bi] = designs[:, bi] / designs[:, col]
        n = designs[:, [col]]
        t_lin = cost.price_rows(kept, lin, 1.0, efficiency=efficiency)
        pays[:, mask] = ((t_lin < n * full * (1 - 1e-12)) & (n > 1))[:, mask]
    return pays


def _mode_prices(kept: np.ndarray, designs: np.ndarray, frac: float, efficiency) -> np.ndarray:
    """(designs, ops) times of ops run on a ``frac`` share of their unit's cores with the
    whole HBM bandwidth (the roofline scales bandwidth by ``frac``; this undoes it)."""
    c = np.array(designs, dtype=np.float64)
    bi = DESIGN_FIELDS.index("hbm_bandwidth_Bps")
    c[:, bi] = c[:, bi] / frac
    return cost.price_rows(kept, c, frac, efficiency=efficiency)


def _hbm_s(kept: np.ndarray, designs: np.ndarray, efficiency) -> np.ndarray:
    """(designs, ops) seconds each op streams HBM at the whole (achievable) bandwidth: its
    roofline memory time, which no mode changes (one-core modes keep the whole bandwidth,
    and an op's bytes depend on the L2 and the L1 per core, not on how many cores it gets)."""
    fast = np.array(designs, dtype=np.float64)
    fast[:, DESIGN_FIELDS.index("clock_hz")] = 1e300        # compute takes no time
    launch = cost.efficiency_array(fast, efficiency)[3]
    return np.maximum(cost.price_rows(kept, fast, 1.0, efficiency=efficiency) - launch, 0.0)


def scheduling_prices(layer: LayerGraph, designs: np.ndarray, efficiency=None) -> np.ndarray:
    """(designs, values): every roofline price of ``layer``'s ops that the serial sum,
    :func:`make_problem` and :func:`layer_bounds` read of a design — all ops at all cores;
    for the ops on the chip, whether one core is offered (:func:`_one_core_pays`) and, where
    it is, the one-core time with the whole bandwidth and the one-core mode's time as
    :func:`make_problem` prices it (fraction ``1/N``, bandwidth scaled by ``N``); NaN where
    not offered; and each op's HBM time at the whole bandwidth (its share of the bandwidth in
    every mode).  Two designs with equal rows, the same core counts and the same HBM, get the
    same layer schedules and bounds."""
    d = np.atleast_2d(np.asarray(designs, dtype=np.float64))
    ti, vi = DESIGN_FIELDS.index("tensor_cores"), DESIGN_FIELDS.index("vector_units")
    every = cost.price_rows(layer, d, 1.0, efficiency=efficiency)
    _, _, kept = _chip_graph(layer)
    if not len(kept):
        return every
    is_tensor = _on_tensor_cores(kept)
    pays = _one_core_pays(kept, d, efficiency, is_tensor)
    t_one = cost.price_rows(kept, _one_core(d), 1.0, efficiency=efficiency)
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


def _related(p: Problem) -> np.ndarray:
    """Boolean (n, n): a path exists between i and j (either direction)."""
    reach = _reach(p.preds, p.names)
    return reach | reach.T


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

