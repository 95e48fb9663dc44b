"""The exact layer schedule: a disjunctive MILP built with CVXPY and solved by HiGHS.

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
"""

from __future__ import annotations

import itertools
import time
import warnings
from dataclasses import dataclass

import numpy as np

from .bounds import lower_bound
from .heuristics import (
    list_schedule,
)
from .problem import (
    BANDWIDTH_TOL,
    OVERLAP_TOL,
    Problem,
    _exclusive_runs,
    _fields_as_dict,
    _holds,
    _related,
    _succs,
    _topo_order,
)


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
    solver fails.  ``time_limit_s`` counts this process's CPU seconds (the solver's work), not
    wall time, so a loaded machine gets the same search as a quiet one; a solve stopped by it
    says so (status ``time_limit``, with its gap), and :func:`cosearch.schedule.cache_info`
    counts it under ``time_limited``.
    """
    clock = time.process_time          # the budget: CPU seconds
    t_start = clock()
    t_wall = time.perf_counter()       # what is reported: wall seconds spent
    n = len(p)
    ub, lmodes, lstarts = start if start is not None else list_schedule(p)
    if n <= 1:
        return ILPResult(ub, tuple(lmodes), tuple(lstarts), "optimal", 0.0, 0.0, 0, 0)
    if lb is None:
        lb = lower_bound(p)
    if ub <= lb * (1 + mip_gap):          # the starting schedule meets the bound: proven
        return ILPResult(ub, tuple(lmodes), tuple(lstarts), "optimal", max(0.0, 1.0 - lb / ub) if ub > 0 else 0.0,
                         time.perf_counter() - t_wall, 0, 0)
    model = _DisjunctiveModel(p, ub, lmodes, lstarts, lb)
    rounds = cuts = 0
    relaxed_lb = lb
    while True:
        rounds += 1
        left = time_limit_s - (clock() - t_start)
        try:
            sol = model.solve(solver, max(left, 1e-3), mip_gap)
        except Exception as exc:  # solver failure -> the starting schedule
            warnings.warn(f"ILP solver {solver} failed ({type(exc).__name__}: {exc}); using the list schedule",
                          RuntimeWarning, stacklevel=2)
            return ILPResult(ub, tuple(lmodes), tuple(lstarts), "fallback", float("nan"),
                             time.perf_counter() - t_wall, rounds, cuts)
        if sol is None:
            warnings.warn(f"ILP solver {solver} returned status {model.status!r}; using the list schedule",
                          RuntimeWarning, stacklevel=2)
            return ILPResult(ub, tuple(lmodes), tuple(lstarts), "fallback", float("nan"),
                             time.perf_counter() - t_wall, rounds, cuts)
        makespan, modes, starts, optimal, reported = sol
        if optimal:            # the optimum of a relaxation (fewer cuts) bounds the true one
            relaxed_lb = max(relaxed_lb, makespan * (1 - mip_gap))
        bad = _oversubscribed(p, modes, starts, makespan) if p.shares_bandwidth else []
        if not bad:
            break
        cuts += model.add_cuts(bad)
        if rounds >= max_rounds or clock() - t_start >= time_limit_s:
            # out of rounds: the starting schedule stands, with the best bound we proved
            gap = max(0.0, 1.0 - relaxed_lb / ub) if ub > 0 else 0.0
            return ILPResult(ub, tuple(lmodes), tuple(lstarts), "time_limit", gap,
                             time.perf_counter() - t_wall, rounds, cuts)
    elapsed = time.perf_counter() - t_wall
    if makespan > ub:  # numerical slack: never worse than the starting schedule
        makespan, modes, starts = ub, list(lmodes), list(lstarts)
    if optimal:
        return ILPResult(float(makespan), tuple(modes), tuple(starts), "optimal", reported, elapsed, rounds, cuts)
    # a real gap: incumbent against the best valid bound we hold (ours, or the solver's own
    # when it reports a positive one); a reported 0 with no proof is not trusted
    ours = max(0.0, 1.0 - relaxed_lb / makespan) if makespan > 0 else 0.0
    gap = min(ours, reported) if reported is not None and reported > 0 else ours
    return ILPResult(float(makespan), tuple(modes), tuple(starts), "time_limit", gap, elapsed, rounds, cuts)


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

