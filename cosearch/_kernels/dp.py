"""Placement search kernel (numba): pipeline partitions x (dp, tp, pp, microbatch, recompute).

For one (tp, microbatch, dp, pp) configuration with ``m = global_batch / (dp * microbatch)``
microbatches, the layers (units) ``0..U-1`` are cut into ``pp`` contiguous stages.  Stage
``s`` holding units ``[i, j)`` costs::

    T      = sum fwd + sum bwd (+ sum fwd again if recomputed) + 2 p2p   (p2p only if pp > 1)
    AR     = ring all-reduce of grad_bytes * sum params over dp ranks, minus the stage's
             backward time of one microbatch when overlapped (never below 0)
    cost_s = (m + pp - 1) * T + AR                                     (1F1B + exposed dp sync)

and fits if ``static + activations <= hbm`` with ``min(pp - s, m)`` microbatches in flight
(stash: their full activations; recompute: their layer inputs plus one layer's stash).
Recompute is chosen per stage.  The step time is ``max_s cost_s``; the kernel minimises it
exactly over all contiguous partitions: a threshold ``X`` is feasible iff the greedy cut
(each stage takes the most units it can at cost <= X that still fit) covers all units in
``<= pp`` stages — optimal because cost and memory only grow as a stage gains units and
later stages hold fewer microbatches — and the smallest feasible ``X`` (always the cost of
some partition) is found by bisection that jumps to the greedy partition's actual cost.
This is the exact min-max partition DP evaluated by parametric search in O(U log 1/eps)
per configuration instead of O(pp U^2).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

INF = np.inf


@njit(cache=True)
def _ring(nbytes, n, bw, lat):
    if n <= 1:
        return 0.0
    return 2.0 * (n - 1.0) / n * nbytes / bw + 2.0 * (n - 1.0) * lat


@njit(cache=True)
def _stage(i, j, s, fwd, bwd, stash, inp, params, p2p, m, pp, dp, hbm, static_per_param,
           grad_bytes, ar_bw, ar_lat, overlap):
    """(cost, recompute, memory) of units [i, j) as stage s; cost INF if neither option fits."""
    nf = pp - s
    if m < nf:
        nf = m
    sf = 0.0
    sb = 0.0
    sst = 0.0
    sin = 0.0
    spar = 0.0
    mst = 0.0
    for u in range(i, j):
        sf += fwd[u]
        sb += bwd[u]
        sst += stash[u]
        sin += inp[u]
        spar += params[u]
        if stash[u] > mst:
            mst = stash[u]
    return _stage_cost(sf, sb, sst, sin, spar, mst, nf, p2p, m, pp, dp, hbm, static_per_param,
                       grad_bytes, ar_bw, ar_lat, overlap)


@njit(cache=True, inline="always")
def _stage_cost(sf, sb, sst, sin, spar, mst, nf, p2p, m, pp, dp, hbm, static_per_param,
                grad_bytes, ar_bw, ar_lat, overlap):
    mult = m + pp - 1.0
    extra = 2.0 * p2p if pp > 1 else 0.0
    ar = _ring(grad_bytes * spar, dp, ar_bw, ar_lat)
    if overlap:
        ar = ar - sb
        if ar < 0.0:
            ar = 0.0
    static = static_per_param * spar
    mem0 = static + nf * sst
    mem1 = static + nf * sin + mst
    c0 = mult * (sf + sb + extra) + ar if mem0 <= hbm else INF
    c1 = mult * (2.0 * sf + sb + extra) + ar if mem1 <= hbm else INF
    if c0 <= c1:
        return c0, False, mem0
    return c1, True, mem1


@njit(cache=True)
def _greedy(x, fwd, bwd, stash, inp, params, p2p, m, pp, dp, hbm, static_per_param,
            grad_bytes, ar_bw, ar_lat, overlap, bounds, recomp, mems):
    """Greedy cut at threshold x, then split to exactly pp stages.  Returns the partition's
    max stage cost (INF if infeasible) and fills bounds (stage start units), recompute
    flags and memory (bytes) per stage."""
    U = fwd.shape[0]
    i = 0
    s = 0
    while i < U:
        if s >= pp:
            return INF
        nf = pp - s
        if m < nf:
            nf = m
        sf = 0.0
        sb = 0.0
        sst = 0.0
        sin = 0.0
        spar = 0.0
        mst = 0.0
        j = i
        while j < U:
            nmst = mst if mst > stash[j] else stash[j]
            c, _r, _mm = _stage_cost(sf + fwd[j], sb + bwd[j], sst + stash[j], sin + inp[j],
                                     spar + params[j], nmst, nf, p2p, m, pp, dp, hbm,
                                     static_per_param, grad_bytes, ar_bw, ar_lat, overlap)
            if not (c <= x):
                break
            sf += fwd[j]
            sb += bwd[j]
            sst += stash[j]
            sin += inp[j]
            spar += params[j]
            mst = nmst
            j += 1
        if j == i:
            return INF
        bounds[s] = i
        i = j
        s += 1
    # fewer stages than pp: split off the last unit of the last multi-unit stage (the parts
    # cost no more and fit no worse; later stages hold fewer microbatches)
    while s < pp:
        k = -1
        for q in range(s):
            end = bounds[q + 1] if q + 1 < s else U
            if end - bounds[q] >= 2:
                k = q
        if k < 0:
            return INF
        end = bounds[k + 1] if k + 1 < s else U
        for q in range(s, k + 1, -1):
            bounds[q] = bounds[q - 1]
        bounds[k + 1] = end - 1
        s += 1
    worst = 0.0
    for q in range(pp):
        end = bounds[q + 1] if q + 1 < pp else U
        c, r, mm = _stage(bounds[q], end, q, fwd, bwd, stash, inp, params, p2p, m, pp, dp, hbm,
                          static_per_param, grad_bytes, ar_bw, ar_lat, overlap)
        recomp[q] = r
        mems[q] = mm
        if c > worst:
            worst = c
    return worst


@njit(cache=True)
def best_partition(fwd, bwd, stash, inp, params, p2p, m, pp, dp, hbm, static_per_param,
                   grad_bytes, ar_bw, ar_lat, overlap, rtol, bounds, recomp, mems):
    """Minimum step time over contiguous partitions for one configuration (INF if none fits).
    ``bounds``/``recomp``/``mems`` (length >= pp) receive the optimal partition."""
    U = fwd.shape[0]
    if U < pp:
        return INF
    hi = _greedy(INF, fwd, bwd, stash, inp, params, p2p, m, pp, dp, hbm, static_per_param,
                 grad_bytes, ar_bw, ar_lat, overlap, bounds, recomp, mems)
    if hi == INF:
        return INF
    # lower bound: the pipeline term of a perfectly balanced, stash-only partition
    tot = 0.0
    for u in range(U):
        tot += fwd[u] + bwd[u]
    lo = (m + pp - 1.0) * (tot / pp) * (1.0 - 1e-12)
    if lo > hi:
        lo = 0.0
    it = 0
    while hi - lo > rtol * hi and it < 200:
        x = 0.5 * (lo + hi)
        c = _greedy(x, fwd, bwd, stash, inp, params, p2p, m, pp, dp, hbm, static_per_param,
                    grad_bytes, ar_bw, ar_lat, overlap, bounds, recomp, mems)
        if c == INF:
            lo = x
        else:
            hi = c
        it += 1
    return _greedy(hi, fwd, bwd, stash, inp, params, p2p, m, pp, dp, hbm, static_per_param,
                   grad_bytes, ar_bw, ar_lat, overlap, bounds, recomp, mems)


@njit(cache=True, parallel=True)
def search(fwd, bwd, stash, inp, params, p2p, tp_vals, mb_vals, dp_vals, max_pp, global_batch,
           chips, hbm, weight_grad_bytes, optimizer_bytes, zero1, grad_bytes, ar_bw, ar_lat,
           overlap, rtol):
    """Best step time for every (tp, microbatch, dp, pp) configuration.

    fwd/bwd/stash/inp: (T, B, U); params: (T, U); p2p: (T, B); *_vals: 1-D int arrays.
    Returns a (T, B, D, max_pp) array of seconds (INF where infeasible or not allowed).
    """
    T = fwd.shape[0]
    B = fwd.shape[1]
    D = dp_vals.shape[0]
    out = np.full((T, B, D, max_pp), INF)
    for tb in prange(T * B):
        t = tb // B
        b = tb % B
        bounds = np.zeros(max_pp + 1, dtype=np.int64)
        recomp = np.zeros(max_pp + 1, dtype=np.bool_)
        mems = np.zeros(max_pp + 1)
        for di in range(D):
            dp = dp_vals[di]
            per = dp * mb_vals[b]
            if global_batch % per != 0:
                continue
            m = global_batch // per
            spp = weight_grad_bytes + (optimizer_bytes / dp if zero1 else optimizer_bytes)
            for pi in range(max_pp):
                pp = pi + 1
                if dp * tp_vals[t] * pp > chips:
                    break
                out[t, b, di, pi] = best_partition(
                    fwd[t, b], bwd[t, b], stash[t, b], inp[t, b], params[t], p2p[t, b], m, pp, dp,
                    hbm, spp, grad_bytes, ar_bw, ar_lat, overlap, rtol, bounds, recomp, mems)
    return out
