"""Plain-Python reference implementations the kernels are tested against.

Written from the formulas in the kernels' docstrings, loop by loop, without
sharing code with the package.
"""

import math


def roofline_one(op, d, frac=1.0, eff=(1.0, 1.0, 1.0, 0.0)):
    kind, m, n, k, b, elems, ope, br, bw_, dt = op
    cores_total, r, c, vu, vw, clock, l1, l2, _hbm, hbm_bw, _link = d
    e_tensor, e_attention, e_memory, launch = eff
    bw = hbm_bw * frac * e_memory
    if kind in (0, 3):
        cores = max(1, math.floor(cores_total * frac))
        tiles = b * math.ceil(k / r) * math.ceil(n / c)
        if tiles >= cores:
            waves, rows = math.ceil(tiles / cores), m
        else:
            split = min(cores // tiles, m)
            waves, rows = 1, math.ceil(m / split)
        compute = waves * (rows + r + c - 2) / clock
        if kind == 3:  # attention: its own efficiency, the op's own HBM bytes
            return max(compute / e_attention, (br + bw_) / bw) + launch
        a_bytes, b_bytes, c_bytes = m * k * dt * b, k * n * dt * b, m * n * dt * b
        if a_bytes + b_bytes + c_bytes <= l2:
            traffic = a_bytes + b_bytes + c_bytes
        else:
            t = max(1, math.floor(math.sqrt(l2 / (3 * dt))))
            traffic = a_bytes * math.ceil(n / t) + b_bytes * math.ceil(m / t) + c_bytes
        if 2 * r * c * dt + r * (r * dt + 4 * c) > l1:
            traffic += tiles * math.ceil(m / r) * r * c * dt
        return max(compute / e_tensor, traffic / bw) + launch
    if kind == 1:
        lanes = vu * frac * vw
        return max(math.ceil(elems / lanes) * ope / clock, (br + bw_) / bw) + launch
    return 0.0


def roofline(ops, designs, frac=1.0, eff=(1.0, 1.0, 1.0, 0.0)):
    return [[roofline_one(list(o), list(d), frac, eff) for o in ops] for d in designs]


# ---------------------------------------------------------------------- scheduling
SCHED_MODES = ((0, 1), (0,), (1,), (2, 3), (2,), (3,))


def schedule_brute_force(latency, preds, modes=SCHED_MODES, nslots=4, bandwidth=None):
    """Optimal makespan by enumerating every (dispatch order, mode) sequence with a serial
    schedule-generation scheme — this set contains an optimal schedule.  Without
    ``bandwidth`` each op starts after its predecessors and after the last op on its slots.
    With ``bandwidth`` (op x mode shares of the HBM, at most 1 at any instant) each op takes
    the earliest start, gaps included, at which its slots are idle and the shares fit for its
    whole run: the candidates are its ready time and the finishes of the runs already placed
    (Kolisch 1996: such "active" schedules contain an optimum).  Branches whose partial
    makespan reaches the best known are cut (exactness kept)."""
    n = len(preds)
    best = [math.inf]
    finish = [0.0] * n
    done = [False] * n

    def fits(runs, t, lat, slots, share):
        for (s0, f0, sl0, _sh0) in runs:
            if s0 < t + lat and t < f0 and set(sl0) & set(slots):
                return False
        if bandwidth is None:
            return True
        # the load is a step function; check it just after each step inside [t, t + lat)
        steps = sorted({t} | {s0 for (s0, f0, _, _) in runs if t < s0 < t + lat}
                       | {f0 for (s0, f0, _, _) in runs if t < f0 < t + lat})
        for x in steps:
            load = share + sum(sh0 for (s0, f0, _, sh0) in runs if s0 <= x < f0)
            if load > 1 + 1e-9:
                return False
        return True

    def rec(count, slot_free, runs, cur):
        if cur >= best[0]:
            return
        if count == n:
            best[0] = cur
            return
        for i in range(n):
            if done[i] or not all(done[j] for j in preds[i]):
                continue
            ready = max([finish[j] for j in preds[i]], default=0.0)
            for m, slots in enumerate(modes):
                lat = latency[i][m]
                if lat == math.inf:
                    continue
                if bandwidth is None:
                    st = max([ready] + [slot_free[r] for r in slots])
                else:
                    share = bandwidth[i][m]
                    st = min(t for t in [ready] + [f0 for (_, f0, _, _) in runs if f0 > ready]
                             if fits(runs, t, lat, slots, share))
                f = st + lat
                new_free = list(slot_free)
                for r in slots:
                    new_free[r] = max(new_free[r], f)
                done[i] = True
                finish[i] = f
                sh = 0.0 if bandwidth is None else bandwidth[i][m]
                rec(count + 1, new_free, runs + [(st, f, slots, sh)], max(cur, f))
                done[i] = False
    rec(0, [0.0] * nslots, [], 0.0)
    return best[0]
