"""List heuristics: the serial schedule, the critical-path list schedule with gap
insertion and forward-backward justification (upper bound, the ILP's warm start and fallback).

The list scheduler (upper bound, warm start and fallback) dispatches ready ops
by longest remaining critical path and gives each the mode and the earliest start (gaps
included) that finishes it first with its slots idle and the bandwidth not oversubscribed.
"""

from __future__ import annotations

import math

import numpy as np

from .problem import (
    BANDWIDTH_TOL,
    Problem,
    _related,
    _succs,
    _topo_order,
)


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

