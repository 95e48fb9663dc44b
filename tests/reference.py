"""Plain-Python reference implementations the kernels are tested against.

Written from the formulas in the kernels' docstrings, loop by loop, without
sharing code with the package.
"""

import math


def roofline_one(op, d, frac=1.0):
    kind, m, n, k, b, elems, ope, br, bw_, dt = op
    cores_total, r, c, vu, vw, clock, l1, l2, _hbm, hbm_bw, _link = d
    bw = hbm_bw * frac
    if kind == 0:
        cores = max(1, math.floor(cores_total * frac))
        tiles = b * math.ceil(k / r) * math.ceil(n / c)
        if tiles >= cores:
            waves, rows = math.ceil(tiles / cores), m
        else:
            split = min(cores // tiles, m)
            waves, rows = 1, math.ceil(m / split)
        compute = waves * (rows + r + c - 2) / clock
        a_bytes, b_bytes, c_bytes = m * k * dt * b, k * n * dt * b, m * n * dt * b
        if a_bytes + b_bytes + c_bytes <= l2:
            traffic = a_bytes + b_bytes + c_bytes
        else:
            t = max(1, math.floor(math.sqrt(l2 / (3 * dt))))
            traffic = a_bytes * math.ceil(n / t) + b_bytes * math.ceil(m / t) + c_bytes
        if 2 * r * c * dt + r * (r * dt + 4 * c) > l1:
            traffic += tiles * math.ceil(m / r) * r * c * dt
        return max(compute, traffic / bw)
    if kind == 1:
        lanes = vu * frac * vw
        return max(math.ceil(elems / lanes) * ope / clock, (br + bw_) / bw)
    return 0.0


def roofline(ops, designs, frac=1.0):
    return [[roofline_one(list(o), list(d), frac) for o in ops] for d in designs]


# ---------------------------------------------------------------------- placement
def _divisors(n):
    return [d for d in range(1, n + 1) if n % d == 0]


def _ring(nbytes, n, bw, lat):
    return 0.0 if n <= 1 else 2 * (n - 1) / n * nbytes / bw + 2 * (n - 1) * lat


def stage_cost_fixed(c, ti, bi, i, j, s, pp, m, dp, mem, overlap, rec):
    """(cost, memory) of units [i, j) as stage s with recompute ``rec``; cost inf if it
    does not fit in HBM."""
    fwd = sum(c.fwd_s[ti, bi, i:j])
    bwd = sum(c.bwd_s[ti, bi, i:j])
    stash = list(c.stash_bytes[ti, bi, i:j])
    inp = list(c.input_bytes[ti, bi, i:j])
    par = sum(c.params_per_chip[ti, i:j])
    nf = min(pp - s, m)
    opt = mem.optimizer_bytes / dp if mem.zero1 else mem.optimizer_bytes
    static = par * (mem.weight_bytes + mem.grad_bytes + opt)
    memory = static + (nf * sum(inp) + max(stash) if rec else nf * sum(stash))
    if memory > c.hbm_bytes:
        return math.inf, memory
    ar = _ring(mem.grad_bytes * par, dp, c.link_bandwidth_Bps, c.link_latency_s)
    if overlap:
        ar = max(0.0, ar - bwd)
    p2p = 2 * c.p2p_s[ti, bi] if pp > 1 else 0.0
    t = (2 * fwd if rec else fwd) + bwd + p2p
    return (m + pp - 1) * t + ar, memory


def stage_eval(c, ti, bi, i, j, s, pp, m, dp, mem, overlap):
    """(cost, recompute, memory) of units [i, j) as stage s, or (inf, None, None)."""
    best = (math.inf, None, None)
    for rec in (False, True):
        cost, memory = stage_cost_fixed(c, ti, bi, i, j, s, pp, m, dp, mem, overlap, rec)
        if cost < best[0]:
            best = (cost, rec, memory)
    return best


def _compositions(n, k):
    """All ways to cut range(n) into k non-empty contiguous parts, as start indices."""
    import itertools
    for cuts in itertools.combinations(range(1, n), k - 1):
        yield (0,) + cuts


def placement_exhaustive(c, chips, global_batch, mem, overlap=True):
    """Every plan, every partition, every recompute vector: [(step, tp, mb, dp, pp, starts)]."""
    import itertools
    U = c.fwd_s.shape[2]
    out = []
    for ti, tp in enumerate(c.tps):
        for bi, mb in enumerate(c.microbatches):
            for dp in _divisors(global_batch):
                if global_batch % (dp * mb):
                    continue
                m = global_batch // (dp * mb)
                for pp in range(1, U + 1):
                    if dp * tp * pp > chips:
                        continue
                    for starts in _compositions(U, pp):
                        ends = list(starts[1:]) + [U]
                        for recs in itertools.product((False, True), repeat=pp):
                            worst = max(stage_cost_fixed(c, ti, bi, i, j, s, pp, m, dp, mem, overlap, recs[s])[0]
                                        for s, (i, j) in enumerate(zip(starts, ends)))
                            if worst < math.inf:
                                out.append((worst, tp, mb, dp, pp, starts))
    return out


def placement_python(c, chips, global_batch, mem, overlap=True, rtol=1e-9):
    """The kernel's algorithm (greedy cut + bisection) in plain Python; best step time."""
    U = c.fwd_s.shape[2]
    best = math.inf

    def greedy(x, ti, bi, m, pp, dp):
        i, s, starts = 0, 0, []
        while i < U:
            if s >= pp:
                return math.inf
            j = i
            while j < U and stage_eval(c, ti, bi, i, j + 1, s, pp, m, dp, mem, overlap)[0] <= x:
                j += 1
            if j == i:
                return math.inf
            starts.append(i)
            i, s = j, s + 1
        while len(starts) < pp:
            ends = starts[1:] + [U]
            k = max((q for q in range(len(starts)) if ends[q] - starts[q] >= 2), default=-1)
            if k < 0:
                return math.inf
            starts.insert(k + 1, ends[k] - 1)
        ends = starts[1:] + [U]
        return max(stage_eval(c, ti, bi, a, b, q, pp, m, dp, mem, overlap)[0]
                   for q, (a, b) in enumerate(zip(starts, ends)))

    for ti, tp in enumerate(c.tps):
        for bi, mb in enumerate(c.microbatches):
            for dp in _divisors(global_batch):
                if dp > chips or global_batch % (dp * mb):
                    continue
                m = global_batch // (dp * mb)
                for pp in range(1, U + 1):
                    if dp * tp * pp > chips:
                        break
                    hi = greedy(math.inf, ti, bi, m, pp, dp)
                    if hi == math.inf:
                        continue
                    lo = 0.0
                    while hi - lo > rtol * hi:
                        x = 0.5 * (lo + hi)
                        v = greedy(x, ti, bi, m, pp, dp)
                        if v == math.inf:
                            lo = x
                        else:
                            hi = v
                    best = min(best, hi)
    return best


# ---------------------------------------------------------------------- scheduling
SCHED_MODES = ((0, 1), (0,), (1,), (2, 3), (2,), (3,))


def schedule_brute_force(latency, preds):
    """Optimal makespan by enumerating every (dispatch order, mode) sequence with a serial
    schedule-generation scheme (each op at its earliest start after its predecessors and
    after the last op on its slots) — this set contains an optimal schedule.  Branches
    whose partial makespan already reaches the best known are cut (exactness kept)."""
    n = len(preds)
    best = [math.inf]
    finish = [0.0] * n
    done = [False] * n

    def rec(count, slot_free, cur):
        if cur >= best[0]:
            return
        if count == n:
            best[0] = cur
            return
        for i in range(n):
            if done[i] or not all(done[j] for j in preds[i]):
                continue
            ready = max([finish[j] for j in preds[i]], default=0.0)
            for m, slots in enumerate(SCHED_MODES):
                lat = latency[i][m]
                if lat == math.inf:
                    continue
                st = max([ready] + [slot_free[r] for r in slots])
                f = st + lat
                new_free = list(slot_free)
                for r in slots:
                    new_free[r] = f
                done[i] = True
                finish[i] = f
                rec(count + 1, new_free, max(cur, f))
                done[i] = False
    rec(0, [0.0] * 4, 0.0)
    return best[0]
