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
