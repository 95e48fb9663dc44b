"""Exact plan search kernel (numba): the best layer split and per-stage recompute for
every (tp, microbatch, sequence-parallel, dp, pp, virtual stages, ZeRO) configuration.

Every cost comes from :func:`cosearch._kernels.formulas.stage_terms`, the function
:func:`cosearch.plan.evaluate` calls, so the search optimises exactly what evaluate
reports.  For one configuration the step time is ``max_s cost_s(n_s, r_s)`` over the
stages' layer counts ``n_s`` (multiples of ``v``, at least ``v``, summing to the
model's layers) and recompute modes ``r_s``, subject to every stage fitting HBM.

Exactness: the transformer layers are identical, so a stage's cost and memory depend
only on its layer count, its position (memory: in-flight microbatches; the first and
last stages carry the embedding and head) and its mode, and both are non-decreasing
in the layer count (see formulas).  For a threshold ``X`` stage ``s`` can therefore
hold any count in ``[v, hi_s(X)]`` (``hi_s``: the largest count that fits under ``X``
in some allowed mode), and a split with max cost ``<= X`` exists iff every
``hi_s(X) >= v`` and ``sum_s hi_s(X) >= L``.  The optimum is the smallest candidate
``X`` — every stage cost value the formula can produce — that is feasible, found by
binary search over the sorted candidates.

Configurations are visited in order of a valid lower bound (all stages' work spread
evenly: ``(m + (p-1)/v) * (sum of unit work) / p``) and skipped once a valid bound exceeds
the k-th best step time found, which never drops one of the best k: that bound, or the
dearer cheapest cost of the stage that must hold the most layers
(:func:`critical_stage_bound`; it charges memory-forced recompute, sends and what follows
the last microbatch), computed only for configurations the first still admits.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from . import formulas as F
from . import order

INF = np.inf

#: columns of the configuration table handed to :func:`search`
#: (``cp``: context-parallel degree, the ranks holding the same weights are ``dp * cp``;
#: ``zero_group``: the ZeRO sharding group inside them)
CFG_FIELDS = ("tp_index", "mb_index", "sp_index", "dp", "pp", "virtual", "zero", "tp", "m", "cp", "zero_group")
C_TI, C_BI, C_SI, C_DP, C_PP, C_V, C_Z, C_TP, C_M, C_CP, C_ZG = range(len(CFG_FIELDS))

#: Where a configuration table's expert-parallel group lives (``ep_mode``): inside the data x
#: context parallel ranks (expert tensor parallelism = tp, Megatron's default; ep divides
#: ``dp * cp``), or spanning the tp ranks too (expert tensor parallelism 1: ep divides ``dp * cp *
#: tp``, sequence parallelism on under tp > 1, as Megatron requires) — with every tp, or only
#: tp > 1 (where the table of the default mode already holds tp = 1, the same plans).
EP_IN_DP, EP_OVER_TP, EP_OVER_TP_ONLY = 0, 1, 2


@njit(cache=True)
def _spread(work, pp, v, m):
    """:func:`lower_bound` of a configuration whose microbatch work is ``work``."""
    return (m + (pp - 1.0) / v) * work / pp


@njit(cache=True)
def _config_groups(L, chips, B, tps, mbs, sps, dps, virtuals, cp, ep, ep_mode):
    """The configuration table's row groups, in its order: one row ``(ti, bi, si, di, m, vs,
    top)`` for every tp, microbatch, SP choice, dp (a divisor of the batch, ``dps``) and
    virtual-stage count that fit, with ``m`` microbatches per replica and ``top`` the deepest
    pipeline the chips allow (the group's rows are its (ZeRO, group) pairs x pipeline depths).
    ``ep_mode``: where the ``ep`` expert-parallel ranks live (:data:`EP_IN_DP` ...)."""
    out = np.empty((len(tps) * len(mbs) * len(sps) * len(dps) * len(virtuals), 7), dtype=np.int64)
    g = 0
    for ti in range(len(tps)):
        t = tps[ti]
        if ep_mode == EP_OVER_TP_ONLY and t == 1:
            continue
        span = t if ep_mode != EP_IN_DP else 1       # the tp ranks the expert group spans too
        for bi in range(len(mbs)):
            mb = mbs[bi]
            if B % mb:
                continue
            for si in range(len(sps)):
                if sps[si] and t == 1:
                    continue
                if ep_mode != EP_IN_DP and t > 1 and not sps[si]:
                    continue
                for di in range(len(dps)):
                    dp = dps[di]
                    if dp * t * cp > chips or B % (dp * mb) or (dp * cp * span) % ep:
                        continue
                    m = B // (dp * mb)
                    max_pp = min(L, chips // (dp * t * cp))
                    for vs in virtuals:
                        if L % vs:
                            continue
                        r = out[g]
                        r[0], r[1], r[2], r[3], r[4], r[5], r[6] = ti, bi, si, di, m, vs, min(max_pp, L // vs)
                        g += 1
    return out[:g]


@njit(cache=True)
def _config_rows(L, chips, B, tps, mbs, sps, dps, virtuals, zz_z, zz_g, zz_start, cp, ep, ep_mode, work, kth,
                 out):
    """Fill (or, with ``out`` of 0 rows, count) the configuration table's rows: for every group
    of :func:`_config_groups`, every (ZeRO stage, group) pair of its dp
    (``zz_*[zz_start[i]:zz_start[i + 1]]`` for ``dps[i]``) and pipeline depth that fits — the
    order :func:`cosearch.placement.configurations` documents.  Rows whose :func:`lower_bound`
    exceeds ``kth`` (``work``: the unit work of each (tp, microbatch, SP) choice) are left out,
    whole groups at once (the bound does not grow with ``pp``); ``kth`` INF keeps every row."""
    n = 0
    fill = out.shape[0] > 0
    groups = _config_groups(L, chips, B, tps, mbs, sps, dps, virtuals, cp, ep, ep_mode)
    for gi in range(groups.shape[0]):
        ti, bi, si, di, m, vs, top = groups[gi]
        w = work[ti, bi, si]
        if top >= 1 and _spread(w, top, vs, m) > kth:
            continue
        for zi in range(zz_start[di], zz_start[di + 1]):
            for pp in range(1 if vs == 1 else 2, top + 1):
                if vs > 1 and m % pp:
                    continue
                if _spread(w, pp, vs, m) > kth:
                    continue
                if fill:
                    r = out[n]
                    r[0], r[1], r[2], r[3], r[4], r[5] = ti, bi, si, dps[di], pp, vs
                    r[6], r[7], r[8], r[9], r[10] = zz_z[zi], tps[ti], m, cp, zz_g[zi]
                n += 1
    return n


@njit(cache=True)
def _cost(u, net, hw, k, s, pp, v, m, dp, tp, zero, zg, mode, out):
    return F.stage_terms(u, net, hw, float(k * v), s == 0, s == pp - 1, s, pp, v, m, dp, tp, zero,
                         zg, mode, out)


@njit(cache=True)
def _cap(u, net, hw, s, pp, v, m, dp, tp, zero, zg, mode, kmax, x, lo, out, hbm):
    """Largest k in [lo, kmax] whose stage (k*v layers) costs <= x and needs at most ``hbm``
    bytes (INF: memory not checked); lo - 1 if none.  Callers pass ``s`` and ``lo`` as int64
    variables, never integer literals: numba compiles a literal argument as a signature of its
    own, and this function's callee chain is the costliest to compile."""
    a = lo
    c, mm = _cost(u, net, hw, a, s, pp, v, m, dp, tp, zero, zg, mode, out)
    if not (mm <= hbm and c <= x):
        return a - 1
    b = kmax
    c, mm = _cost(u, net, hw, b, s, pp, v, m, dp, tp, zero, zg, mode, out)
    if mm <= hbm and c <= x:
        return b
    while b - a > 1:  # invariant: a fits, b does not
        mid = (a + b) // 2
        c, mm = _cost(u, net, hw, mid, s, pp, v, m, dp, tp, zero, zg, mode, out)
        if mm <= hbm and c <= x:
            a = mid
        else:
            b = mid
    return a


@njit(cache=True)
def _caps(u, net, hw, pp, v, m, dp, tp, zero, zg, modes, kmax, x, memcap, caps, capmode, out):
    """hi_s(x) for every stage (in chunks of v layers) and the mode reaching it."""
    # middle stages share one cost curve; memory caps were precomputed
    ccost = np.zeros(3, dtype=np.int64)
    one = np.int64(1)                  # not the literal 1: one compiled signature of _cap
    for r in range(3):
        if modes[r] and pp > 2:
            ccost[r] = _cap(u, net, hw, one, pp, v, m, dp, tp, zero, zg, r, kmax, x, one, out, INF)
    for s in range(pp):
        best = 0
        bm = -1
        for r in range(3):
            if not modes[r]:
                continue
            if s == 0 or s == pp - 1:
                h = _cap(u, net, hw, s, pp, v, m, dp, tp, zero, zg, r, kmax, x, one, out, hw[F.H_HBM])
            else:
                h = ccost[r] if ccost[r] < memcap[s, r] else memcap[s, r]
            if h > best:
                best = h
                bm = r
        caps[s] = best
        capmode[s] = bm


@njit(cache=True)
def _memcaps(u, net, hw, pp, v, m, dp, tp, zero, zg, modes, kmax, memcap, out):
    one = np.int64(1)                  # not the literal 1: one compiled signature of _cap
    for r in range(3):
        prev = one
        for s in range(pp):
            if not modes[r]:
                memcap[s, r] = 0
                continue
            lo = prev if (s >= 2 and s < pp - 1) else one
            memcap[s, r] = _cap(u, net, hw, s, pp, v, m, dp, tp, zero, zg, r, kmax, INF, lo, out, hw[F.H_HBM])
            if s >= 1 and s < pp - 1 and memcap[s, r] >= 1:
                prev = memcap[s, r]


@njit(cache=True)
def _feasible(caps, pp, total):
    acc = 0
    for s in range(pp):
        if caps[s] < 1:
            return False
        acc += caps[s]
    return acc >= total


@njit(cache=True, inline="always")
def no_plan(u):
    """Whether a unit-cost row is a cell that is no plan (:func:`cosearch.plan.unit_costs` marks
    one, say sequence parallelism over tp ranks that do not divide the sequence, with every field
    infinite, its memory too): no stage formula may run on it (its memory caps divide by what is
    not there).  A row whose times alone are infinite (a chip without the plan's number format)
    is a plan that never finishes, with memory that counts (the co-search's memory floors)."""
    return not (u[F.U_ACT_NONE] < INF)


@njit(cache=True)
def config_best(u, net, hw, L, pp, v, m, dp, tp, zero, zg, modes, counts, rmodes, cutoff=INF):
    """Minimum step time of one configuration (INF if nothing fits, or if no split is at
    most ``cutoff``: then ``counts``/``rmodes`` are not filled); `counts`/`rmodes` (length
    >= pp) receive the layers and recompute mode of each stage."""
    if L % v != 0 or no_plan(u):
        return INF
    total = L // v
    if total < pp:
        return INF
    zg = float(zg)
    kmax = total - (pp - 1)
    out = np.zeros(F.NB)
    memcap = np.zeros((pp, 3), dtype=np.int64)
    _memcaps(u, net, hw, pp, v, m, float(dp), float(tp), zero, zg, modes, kmax, memcap, out)
    caps = np.zeros(pp, dtype=np.int64)
    capmode = np.zeros(pp, dtype=np.int64)
    # quick memory-only check
    _caps(u, net, hw, pp, v, m, float(dp), float(tp), zero, zg, modes, kmax, INF, memcap, caps, capmode, out)
    if not _feasible(caps, pp, total):
        return INF
    if cutoff < INF:
        # a split within `cutoff` exists iff the caps at cutoff cover the layers
        _caps(u, net, hw, pp, v, m, float(dp), float(tp), zero, zg, modes, kmax, cutoff, memcap, caps, capmode, out)
        if not _feasible(caps, pp, total):
            return INF
    # candidate costs: every stage cost value (middle stages share theirs)
    nstage = 3 if pp > 2 else pp
    cand = np.empty(nstage * 3 * kmax)
    nc = 0
    for t in range(nstage):
        s = 0 if t == 0 else (pp - 1 if t == 1 else 1)
        for r in range(3):
            if not modes[r]:
                continue
            for k in range(1, kmax + 1):
                c, mm = _cost(u, net, hw, k, s, pp, v, m, float(dp), float(tp), zero, zg, r, out)
                cand[nc] = c
                nc += 1
    cs = order.sorted_copy(cand[:nc])
    lo = 0
    hi = nc - 1  # the largest candidate is feasible (memory-only feasibility holds)
    while lo < hi:
        mid = (lo + hi) // 2
        _caps(u, net, hw, pp, v, m, float(dp), float(tp), zero, zg, modes, kmax, cs[mid], memcap, caps,
              capmode, out)
        if _feasible(caps, pp, total):
            hi = mid
        else:
            lo = mid + 1
    x = cs[lo]
    _caps(u, net, hw, pp, v, m, float(dp), float(tp), zero, zg, modes, kmax, x, memcap, caps, capmode, out)
    # a split within the caps: add chunks one at a time to the emptiest stage (middle first)
    for s in range(pp):
        counts[s] = 1
    left = total - pp
    while left > 0:
        best = -1
        for q in range(pp):
            s = (q + 1) % pp if pp > 2 else q  # middle stages, then the last, then the first
            if counts[s] < caps[s] and (best < 0 or counts[s] < counts[best]):
                best = s
        counts[best] += 1
        left -= 1
    worst = 0.0
    for s in range(pp):
        bc = INF
        br = -1
        for r in range(3):
            if not modes[r]:
                continue
            c, mm = _cost(u, net, hw, counts[s], s, pp, v, m, float(dp), float(tp), zero, zg, r, out)
            if mm <= hw[F.H_HBM] and c < bc:
                bc = c
                br = r
        rmodes[s] = br
        counts[s] = counts[s] * v
        if bc > worst:
            worst = bc
    return worst


@njit(cache=True)
def lower_bound(u, pp, v, m, L):
    """Valid lower bound on a configuration's step time (no recompute, no p2p, perfect
    balance, nothing after the pipeline)."""
    return _spread(F.unit_work(u, L), pp, v, m)


@njit(cache=True)
def table_lower_bound(units, L, chips, B, tps, mbs, sps, dps, virtuals, cp, ep, ep_mode):
    """The smallest :func:`lower_bound` of the rows :func:`_config_rows` makes from the same
    arguments (or less), without making them: ``(m + (pp - 1) / v) / pp = 1 / v + (m - 1 / v)
    / pp`` does not grow with ``pp`` (``m >= 1 >= 1 / v``), so for each group of
    :func:`_config_groups` the deepest pipeline the chips allow is the smallest; the (ZeRO,
    group) pairs and the divisibility of ``m`` by ``pp`` are not needed for a lower bound."""
    best = INF
    groups = _config_groups(L, chips, B, tps, mbs, sps, dps, virtuals, cp, ep, ep_mode)
    for gi in range(groups.shape[0]):
        ti, bi, si, _di, m, vs, top = groups[gi]
        if top < (1 if vs == 1 else 2):
            continue
        x = _spread(F.unit_work(units[ti, bi, si], L), top, vs, m)
        if x < best:
            best = x
    return best


@njit(cache=True)
def critical_stage_bound(u, net, hw, L, pp, v, m, dp, tp, zero, zg, modes, out):
    """Valid lower bound on a configuration's step time from the stage that must hold the
    most layers: some stage holds at least ``k = ceil(L / (v pp))`` chunks, and its cost is
    at least the cheapest cost of ``k`` chunks, over the recompute modes that fit HBM,
    at a position of its kind — the first stage, the last, or a middle one priced at
    position ``pp - 2`` (middle stages cost the same at every position, and the one
    nearest the end holds the fewest microbatches, so whatever fits elsewhere fits
    there).  It charges what the spread bound cannot: memory-forced recompute, pipeline
    sends, the fp32 accumulation pass and what follows the last microbatch.  INF when
    no mode fits (then no split fits either)."""
    if L % v != 0 or no_plan(u):
        return INF
    total = L // v
    if total < pp:
        return INF
    k = (total + pp - 1) // pp
    best = INF
    for t in range(3):
        if (t == 1 and pp < 2) or (t == 2 and pp < 3):
            continue
        s = 0 if t == 0 else (pp - 1 if t == 1 else pp - 2)
        for r in range(3):
            if not modes[r]:
                continue
            c, mm = _cost(u, net, hw, k, s, pp, v, m, dp, tp, zero, zg, r, out)
            if mm <= hw[F.H_HBM] and c < best:
                best = c
    return best


@njit(cache=True)
def config_bound(u, net, hw, L, pp, v, m, dp, tp, zero, zg, modes, out):
    """The larger of :func:`lower_bound` and :func:`critical_stage_bound`."""
    a = lower_bound(u, pp, v, m, L)
    b = critical_stage_bound(u, net, hw, L, pp, v, m, dp, tp, zero, zg, modes, out)
    return a if a > b else b


@njit(cache=True, parallel=True)
def config_bounds(units, net, hw, cfg, idx, L, modes):
    """:func:`config_bound` of the configuration rows ``idx``."""
    out = np.empty(len(idx))
    for j in prange(len(idx)):
        c = cfg[idx[j]]
        scratch = np.zeros(F.NB)
        out[j] = config_bound(units[c[C_TI], c[C_BI], c[C_SI]], net, hw, L, c[C_PP], c[C_V], c[C_M],
                              float(c[C_DP] * c[C_CP]), float(c[C_TP]), c[C_Z], float(c[C_ZG]), modes, scratch)
    return out


@njit(cache=True, parallel=True)
def lower_bounds(units, net, cfg, L):
    n = cfg.shape[0]
    out = np.empty(n)
    for i in prange(n):
        c = cfg[i]
        out[i] = lower_bound(units[c[C_TI], c[C_BI], c[C_SI]], c[C_PP], c[C_V], c[C_M], L)
    return out


@njit(cache=True, parallel=True)
def _block(units, net, hw, cfg, idx, L, modes, res, cutoff):
    for j in prange(len(idx)):
        i = idx[j]
        c = cfg[i]
        counts = np.zeros(c[C_PP], dtype=np.int64)
        rm = np.zeros(c[C_PP], dtype=np.int64)
        res[i] = config_best(units[c[C_TI], c[C_BI], c[C_SI]], net, hw, L, c[C_PP], c[C_V], c[C_M],
                             float(c[C_DP] * c[C_CP]), c[C_TP], c[C_Z], float(c[C_ZG]), modes, counts, rm, cutoff)


def search(units, net, hw, cfg, L, modes, top_k, prune=True, block=256, progress=None, cutoff=INF):
    """Best step time of every configuration row of ``cfg`` (INF: infeasible or pruned),
    visiting them in spread-bound order (:func:`lower_bound`; once a k-th best step is known,
    each block is also checked against :func:`config_bound`); returns (steps, lower bounds,
    evaluated count).
    ``cutoff``: configurations whose bound exceeds it are not evaluated (a caller that only
    needs plans faster than ``cutoff`` seconds)."""
    n = cfg.shape[0]
    lb = lower_bounds(units, net, cfg, L)
    res = np.full(n, INF)
    evaluated = 0
    kth = cutoff
    size = min(block, 16) if prune else block     # small blocks first: the best plans come early
    # Visit in bound order without sorting every row: the smallest ``chunk`` bounds are picked
    # (argpartition) and sorted, and what is left is first cut to the bounds that can still beat
    # the k-th best step (the chunk doubles each time).  Every row whose bound is <= the k-th step
    # is still evaluated, in increasing bound order, as with one full sort.
    left = np.arange(n)          # cut to the admissible bounds at the top of the loop
    chunk = 4096
    while left.size:
        if prune and np.isfinite(kth):
            left = left[lb[left] <= kth]
            if not left.size:
                break
        if left.size > chunk:
            part = np.argpartition(lb[left], chunk - 1)
            sel, left = left[part[:chunk]], left[part[chunk:]]
            chunk *= 2
        else:
            sel, left = left, left[:0]
        visit = sel[np.argsort(lb[sel], kind="stable")]
        start = 0
        m = len(visit)
        stopped = False
        while start < m:
            if prune and lb[visit[start]] > kth:
                stopped = True
                break
            stop = min(m, start + size)
            size = min(block, 2 * size)
            idx = visit[start:stop]
            if prune and np.isfinite(kth):
                # shrink the block to the configurations the spread bound still admits, then
                # to those the dearer critical-stage bound admits
                idx = idx[:max(1, int(np.searchsorted(lb[idx], kth, side="right")))]
                stop = start + len(idx)
                lb[idx] = np.maximum(lb[idx], config_bounds(units, net, hw, cfg, idx, L, modes))
                idx = idx[lb[idx] <= kth]
            _block(units, net, hw, cfg, idx, L, modes, res, kth if prune else INF)
            evaluated += len(idx)
            if progress is not None:
                progress(stop - start)
            fin = res[np.isfinite(res)]
            if fin.size >= top_k:
                kth = min(kth, np.partition(fin, top_k - 1)[top_k - 1])
            start = stop
        if stopped:            # every row left has a bound at least this chunk's, above the k-th step
            break
    return res, lb, evaluated


@njit(cache=True)
def _best_one(units, net, hw, cfg, L, modes, cutoff):
    """The best step time of one design's units over every configuration (INF if none fits
    or none can beat ``cutoff``), visiting configurations in lower-bound order."""
    n = cfg.shape[0]
    lb = np.empty(n)
    scratch = np.zeros(F.NB)
    for i in range(n):
        c = cfg[i]
        lb[i] = lower_bound(units[c[C_TI], c[C_BI], c[C_SI]], c[C_PP], c[C_V], c[C_M], L)
    visit = order.argsort(lb)
    best = cutoff
    found = INF
    for j in range(n):
        i = visit[j]
        if lb[i] > best:
            break
        c = cfg[i]
        if config_bound(units[c[C_TI], c[C_BI], c[C_SI]], net, hw, L, c[C_PP], c[C_V], c[C_M], float(c[C_DP] * c[C_CP]),
                        float(c[C_TP]), c[C_Z], float(c[C_ZG]), modes, scratch) > best:
            continue
        counts = np.zeros(c[C_PP], dtype=np.int64)
        rm = np.zeros(c[C_PP], dtype=np.int64)
        r = config_best(units[c[C_TI], c[C_BI], c[C_SI]], net, hw, L, c[C_PP], c[C_V], c[C_M],
                        float(c[C_DP] * c[C_CP]), c[C_TP], c[C_Z], float(c[C_ZG]), modes, counts, rm, best)
        if r <= best:
            best = r
            found = r
    return found


@njit(cache=True, parallel=True)
def best_steps(units, net, hw, cfg, L, modes, cutoff):
    """:func:`search`'s best step time (top 1) for many designs at once: ``units`` is
    (designs, tps, mbs, sps, fields), sharing one network and HW row; INF where no plan fits
    or none is at most ``cutoff``."""
    nd = units.shape[0]
    out = np.full(nd, INF)
    for d in prange(nd):
        out[d] = _best_one(units[d], net, hw, cfg, L, modes, cutoff)
    return out


@njit(cache=True, parallel=True)
def memory_floor(units, net, hw, cfg, L, modes):
    """A lower bound on the per-chip memory any configuration's plan needs: some stage
    holds at least ceil(L / pp) layers; priced with the fewest microbatches in flight
    (the last stage's), no embedding or head, in the lightest allowed recompute mode — per
    configuration row."""
    n = cfg.shape[0]
    out = np.full(n, INF)
    for i in prange(n):
        c = cfg[i]
        pp = c[C_PP]
        v = c[C_V]
        k = (L + pp - 1) // pp
        k = ((k + v - 1) // v) * v
        scratch = np.zeros(F.NB)
        best = INF
        if no_plan(units[c[C_TI], c[C_BI], c[C_SI]]):
            continue
        inner = pp < 0
        for r in range(3):
            if not modes[r]:
                continue
            # a middle stage: `inner` is a bool variable, not the literal False, which numba would
            # compile as a signature of stage_terms of its own
            _c, mm = F.stage_terms(units[c[C_TI], c[C_BI], c[C_SI]], net, hw, float(k), inner, inner, pp - 1,
                                   pp, v, c[C_M], float(c[C_DP] * c[C_CP]), float(c[C_TP]), c[C_Z], float(c[C_ZG]), r, scratch)
            if mm < best:
                best = mm
        out[i] = best
    return out


def min_memory_needed(units, net, hw, cfg, L, modes):
    """The smallest :func:`memory_floor` over the configurations (INF if there are none)."""
    out = memory_floor(units, net, hw, cfg, L, modes)
    return out.min() if len(out) else INF


@njit(cache=True, parallel=True)
def plan_steps(units, net, hw, cfg, layers, modes):
    """Step time of fixed plans: row i of cfg is a configuration, layers[i, s] / modes[i, s]
    its stages' layer counts and recompute modes (the same stage formula as evaluate)."""
    n = cfg.shape[0]
    out = np.empty(n)
    for i in prange(n):
        c = cfg[i]
        pp = c[C_PP]
        scratch = np.zeros(F.NB)
        worst = 0.0
        if no_plan(units[c[C_TI], c[C_BI], c[C_SI]]):
            out[i] = INF
            continue
        for s in range(pp):
            cost, mm = F.stage_terms(units[c[C_TI], c[C_BI], c[C_SI]], net, hw, float(layers[i, s]), s == 0,
                                     s == pp - 1, s, pp, c[C_V], c[C_M], float(c[C_DP] * c[C_CP]), float(c[C_TP]), c[C_Z], float(c[C_ZG]),
                                     modes[i, s], scratch)
            if mm > hw[F.H_HBM]:
                worst = INF
                break
            if cost > worst:
                worst = cost
        out[i] = worst
    return out
