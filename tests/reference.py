"""Plain-Python reference implementations the kernels are tested against.

Written from the formulas in the kernels' docstrings, loop by loop, without
sharing code with the package.
"""

import math


def roofline_one(op, d, frac=1.0, eff=(1.0, 1.0, 1.0, 0.0, 0, 0, 0, 0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0,
                                       0.0)):
    kind, m, n, k, b, elems, ope, br, bw_, dt = op[:10]
    head_dim = op[10] if len(op) > 10 else 0
    cores_total, r, c, vu, vw, boost_clock, l1, l2, _hbm, hbm_bw, _link = d[:11]
    glb = d[11] if len(d) > 11 else 0.0
    fp8_macs = d[12] if len(d) > 12 else 0.0     # the tensor unit's FP8 MACs per PE per cycle
    fp4_macs = d[13] if len(d) > 13 else 0.0     # and its FP4 MACs
    e_tensor, e_attention, e_memory, launch, tm, tn, tk, slots, k_over, fp8, fp4, attn_over, sustained, sk_fix, \
        attn_over_bwd, attn_head, cast_memory, amax_Bps, attn_clock = \
        (tuple(eff) + (0, 0, 0, 0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0))[:19]
    clock = boost_clock * sustained   # the sustained clock; the HBM bandwidth stays
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
        if kind == 3:  # attention: its own efficiency (times m / (m + 128 overhead blocks)), its own bytes
            backward = head_dim > 0 and k >= 2 * head_dim        # the backward does 2.5 head dims of work
            over = attn_over_bwd if backward else attn_over
            length = m / (m + 128.0 * over) if over > 0 else 1.0
            head = 1.0
            if head_dim > 0 and attn_head > 0:   # softmax work per score against head_dim MACs, vs 128
                head = (head_dim / (head_dim + attn_head)) / (128.0 / (128.0 + attn_head))
            if attn_clock > 0 and head_dim > 0:     # a fused kernel holds its own clock (0: the sustained one)
                compute *= sustained / attn_clock
            return max(compute / (e_attention * length * head), (br + bw_) / bw) + launch
        a_bytes, b_bytes, c_bytes = m * k * dt * b, k * n * dt * b, m * n * dt * b
        if a_bytes + b_bytes + c_bytes <= l2:
            traffic = a_bytes + b_bytes + c_bytes
        else:
            t = max(1, math.floor(math.sqrt(l2 / (3 * dt))))
            traffic = a_bytes * math.ceil(n / t) + b_bytes * math.ceil(m / t) + c_bytes
        if 2 * r * c * dt + r * (r * dt + 4 * c) > l1:
            traffic += tiles * math.ceil(m / r) * r * c * dt
        if slots > 0:   # thread-block tiles: count the rounds the busiest SM runs
            sl = max(1, math.floor(slots * frac))
            blocks = int(b) * math.ceil(m / tm) * math.ceil(n / tn)
            per_tile = math.ceil(k / tk) * tk + k_over      # K-elements of work per tile
            busiest = (blocks // sl + (1 if blocks % sl else 0)) * per_tile
            if sk_fix > 0 and blocks % sl:   # stream-K: leftover tiles shared by all, if faster
                shared = (blocks // sl) * per_tile + max((blocks % sl) * per_tile / sl, tk) + sk_fix
                busiest = min(busiest, shared)
            e_tensor = e_tensor * (m * n * b * k) / (busiest * sl * tm * tn)
        if dt == 1:   # FP8 operands: the chip's measured FP8 rate, else its PEs' FP8 MACs
            speed = fp8 if fp8 > 0 else fp8_macs
        elif dt < 1:  # NVFP4 at the chip's measured FP4 rate, else its PEs' FP4 MACs
            speed = fp4 if fp4 > 0 else fp4_macs
        elif dt >= 4:  # FP32 on the vector lanes, an FMA a lane a cycle: no tensor-unit waves
            compute = m * n * k * b / (vu * frac * vw) / clock
            speed = 1.0
        else:
            speed = 1.0
        if speed == 0:   # no tensor unit for the format: the GEMM never finishes
            return math.inf
        e_tensor = e_tensor * speed
        onchip = 0.0
        if glb > 0:   # every weight tile column re-reads the inputs; every tile row adds fp32 partials
            per_gemm = k * n * dt + sum(m * k * dt for _col in range(math.ceil(n / c))) \
                + sum(4 * m * n for _row in range(math.ceil(k / r)))
            onchip = b * per_gemm / (glb * frac)
        return max(compute / e_tensor, traffic / bw, onchip) + launch
    if kind in (1, 4):   # a vector op; a low-precision cast (4) streams at its own rate where one is set
        lanes = vu * frac * vw
        stream = hbm_bw * frac * cast_memory if kind == 4 and cast_memory > 0 else bw
        passes = (br + bw_) / stream
        if kind == 4 and amax_Bps > 0:   # the input read once more by an amax reduction, at most at bw
            passes += br / min(amax_Bps * frac, bw)
        return max(math.ceil(elems / lanes) * ope / clock, passes) + launch
    return 0.0


def gemm_tiles_simulated(m, n, k, batch, tile_m, tile_n, tile_k, slots, k_overhead, stream_k_fixup=0.0):
    """Efficiency of a tiled GEMM by simulation: every output tile (edge tiles clipped) is
    handed to the SM that frees up first; a tile costs ``ceil(k / tile_k) tile_k +
    k_overhead`` MAC-rounds of a full ``tile_m x tile_n`` tile whatever its size.  With
    ``stream_k_fixup`` > 0 (stream-K) the tiles that do not fill a last wave are not handed out
    whole: their MAC-rounds are pooled and dealt to the SMs in equal shares (none under one
    ``tile_k`` step), each SM's share costing ``stream_k_fixup`` more, unless handing out whole
    tiles is faster.  Returns useful MACs / (makespan x slots x tile_m x tile_n)."""
    import heapq
    free = [0.0] * slots
    heapq.heapify(free)
    useful = 0.0
    cost = math.ceil(k / tile_k) * tile_k + k_overhead
    tiles = [(i, j) for _ in range(batch) for i in range(0, m, tile_m) for j in range(0, n, tile_n)]
    whole = len(tiles) if stream_k_fixup <= 0 else len(tiles) - len(tiles) % slots
    for i, j in tiles:
        useful += min(tile_m, m - i) * min(tile_n, n - j) * k
    for _ in range(whole):
        heapq.heappush(free, heapq.heappop(free) + cost)
    pooled = (len(tiles) - whole) * cost
    if pooled:
        share = max(pooled / slots, tile_k)     # K is not split finer than one main-loop step
        split = max(f + share + stream_k_fixup for f in free)
        whole_tiles = gemm_tiles_simulated(m, n, k, batch, tile_m, tile_n, tile_k, slots, k_overhead)
        return max(useful / (split * slots * tile_m * tile_n), whole_tiles)   # the faster of the two
    return useful / (max(free) * slots * tile_m * tile_n)


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


# ---------------------------------------------------------------- DeepSpeed's pipeline schedule
def deepspeed_train_steps(micro, stages, stage):
    """The instruction stream DeepSpeed's ``TrainSchedule`` gives one stage, as (kind, microbatch)
    pairs in order: "ra"/"sa" receive/send an activation, "rg"/"sg" a gradient, "f"/"b" compute.

    Written from the schedule's documented rules (not shared with cosearch): 2 (micro +
    stages - 1) steps; at each step a stage runs a forward or a backward, by the parity of
    step and stage; a forward step first receives its activation and sends back the gradient
    of the previous step's microbatch, a backward step sends on the previous step's
    activation and receives its gradient."""
    def micro_of(step):
        even_step, even_stage = step % 2 == 0, stage % 2 == 0
        if even_step and even_stage:
            return step // 2 - stage // 2, True
        if not even_step and not even_stage:
            return (step - 1) // 2 - stage // 2, True
        if even_step:
            return step // 2 - stages + (stage + 1) // 2, False
        return (step - 1) // 2 - stages + 1 + stage // 2, False

    def valid(i):
        return 0 <= i < micro

    out, prev = [], -1
    for step in range(2 * (micro + stages - 1)):
        i, fwd = micro_of(step)
        if fwd and stage > 0:
            out += [("ra", i)] if valid(i) else []
            out += [("sg", prev)] if valid(prev) else []
        if not fwd and stage < stages - 1:
            out += [("sa", prev)] if valid(prev) else []
            out += [("rg", i)] if valid(i) else []
        if valid(i):
            out.append(("f" if fwd else "b", i))
        prev = i
    return out


def deepspeed_pipeline_time(micro, stages, fwd_s, bwd_s, transfer_s):
    """Makespan of DeepSpeed's pipeline schedule when every send waits for its partner's
    receive (blocking p2p): stage s computes a forward in fwd_s[s] and a backward in
    bwd_s[s]; a transfer starts when both partners reach it and takes transfer_s."""
    progs = [deepspeed_train_steps(micro, stages, s) for s in range(stages)]
    pc, clock = [0] * stages, [0.0] * stages
    partner = {"ra": (-1, "sa"), "sg": (-1, "rg"), "sa": (1, "ra"), "rg": (1, "sg")}
    while any(pc[s] < len(progs[s]) for s in range(stages)):
        moved = False
        for s in range(stages):
            while pc[s] < len(progs[s]):
                kind, i = progs[s][pc[s]]
                if kind in ("f", "b"):
                    clock[s] += fwd_s[s] if kind == "f" else bwd_s[s]
                    pc[s] += 1
                    moved = True
                    continue
                step, want = partner[kind]
                q = s + step
                if pc[q] >= len(progs[q]) or progs[q][pc[q]] != (want, i):
                    break
                clock[s] = clock[q] = max(clock[s], clock[q]) + transfer_s
                pc[s] += 1
                pc[q] += 1
                moved = True
        if not moved:
            raise RuntimeError("the schedule deadlocked")
    return max(clock)


def systolic_ws_simulate(A, W):
    """Cycle-by-cycle simulation of one weight-stationary R x C systolic array computing
    ``A @ W`` (A: M x R inputs, W: R x C weights held in the PEs): input row m enters array row
    i at cycle m + i (skewed) and moves one PE right per cycle; partial sums move one PE down
    per cycle; PE (i, j) adds a[m][i] * w[i][j] when both meet.  Returns (product, cycles until
    the last output leaves the bottom row), counted from the first input's cycle 0."""
    M, R = len(A), len(A[0])
    C = len(W[0])
    out = [[0.0] * C for _ in range(M)]
    # register state: the input each PE holds this cycle (m index or None) and the partial sum
    # each PE passes down (m, value) or None
    a_reg = [[None] * C for _ in range(R)]
    p_reg = [[None] * C for _ in range(R)]
    cycle = 0
    done = 0
    last = -1
    while done < M * C:
        new_a = [[None] * C for _ in range(R)]
        new_p = [[None] * C for _ in range(R)]
        for i in range(R):
            for j in range(C):
                # the input arriving this cycle: from the left neighbour, or the skewed feed
                if j == 0:
                    m = cycle - i
                    src = m if 0 <= m < M else None
                else:
                    src = a_reg[i][j - 1]
                new_a[i][j] = src
                if src is None:
                    continue
                # the partial sum arriving from above (row 0 starts a new one)
                above = (src, 0.0) if i == 0 else p_reg[i - 1][j]
                assert above is not None and above[0] == src, "input and partial sum out of step"
                new_p[i][j] = (src, above[1] + A[src][i] * W[i][j])
        a_reg, p_reg = new_a, new_p
        for j in range(C):        # outputs leaving the bottom row at the end of this cycle
            if p_reg[R - 1][j] is not None:
                m, v = p_reg[R - 1][j]
                out[m][j] = v
                done += 1
                last = cycle
        cycle += 1
    return out, last + 1


# ---------------------------------------------------------------- MaxText's circular pipeline
def maxtext_pipeline_iterations(stages, repeats, micro, delay=1):
    """(iterations, real chunk-steps of each stage) of MaxText's SPMD circular pipeline, simulated
    from its indexing (``PipelineBase.get_microbatch_and_repeat_ids``, written anew here): at
    iteration ``it`` stage ``s`` has processed ``max(it - delay s, 0)`` microbatch-chunks, its
    microbatch that count modulo ``micro`` and its repeat that count divided by ``micro``; it does
    real work while that count is below ``micro x repeats``.  The loop runs until the last stage
    has finished the last microbatch's last repeat (every iteration runs every stage, real or
    bubble)."""
    done = [0] * stages
    it = 0
    while done[stages - 1] < micro * repeats:
        for s in range(stages):
            processed = max(it - delay * s, 0)
            if it - delay * s >= 0 and processed < micro * repeats:
                done[s] += 1
        it += 1
    return it, done
