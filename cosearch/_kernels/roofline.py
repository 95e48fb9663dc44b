"""Roofline pricing of ops on accelerator designs (numba).

``price(ops, designs, core_fraction, eff)`` -> (designs, ops) seconds.
``eff`` is a :class:`cosearch.hardware.KernelEfficiency` row (tensor, attention, memory,
launch_s): the fraction of the roofline compute rate GEMMs / attention kernels reach, the
fraction of HBM bandwidth memory-bound kernels stream at, and a fixed time per kernel.

``ops`` rows follow :data:`cosearch.graph.OP_FIELDS`:
kind, m, n, k, batch, elements, ops_per_element, bytes_read, bytes_written, dtype_bytes.
``designs`` rows follow :data:`cosearch.hardware.DESIGN_FIELDS`:
tensor_cores, rows, cols, vector_units, vector_width, clock_hz, l1_bytes, l2_bytes,
hbm_bytes, hbm_bandwidth_Bps, link_bandwidth_Bps, glb_Bps, fp8_macs, fp4_macs.

Tensor op (weight-stationary systolic array R x C):
  tiles   = batch * ceil(K/R) * ceil(N/C)        (padding waste from the ceilings)
  cores   = max(1, floor(tensor_cores * core_fraction))
  if tiles >= cores: waves = ceil(tiles/cores), rows = M
  else:              split M over idle cores: s = min(cores // tiles, M), rows = ceil(M/s), waves = 1
  cycles  = waves * (rows + R + C - 2)           (fill + drain once per weight tile; equal to a
                                                  cycle-by-cycle simulation of the array in
                                                  tests/reference.py; weight loads double-buffered)
  HBM bytes: all operands once if A, B and C fit in L2; else L2 blocking with square
  tiles of edge T = floor(sqrt(L2 / (3 dtype))): A read ceil(N/T) times, B ceil(M/T) times.
  L1 spill: a core needs 2 R C dtype (double-buffered weights) + R (R dtype + 4 C) bytes
  (an R-row input block and fp32 partial sums); if L1 is smaller, weight tiles are
  re-fetched from HBM for every R-row block: + tiles * ceil(M/R) * R C dtype bytes.
  On-chip operands (designs with ``glb_Bps > 0``): the global buffer feeds the cores at
  ``glb_Bps * core_fraction``; a GEMM needs
  :func:`cosearch._kernels.formulas.operand_traffic_bytes` through it (weights once, inputs once
  per weight-tile column, fp32 partial sums once per weight-tile row), a third bound beside
  compute and HBM, so many small arrays pay for the traffic they need.
Attention op (kind 3: batched activation matmuls or a fused flash kernel): the tensor
  compute formula, HBM bytes = the op's bytes_read + bytes_written, efficiency eff[1] times
  :func:`cosearch._kernels.formulas.fused_attention_efficiency`: the length factor of its M
  (query rows; of its N, the keys met in causal units, where that is smaller: a sliding window,
  chunks, a sparse selection) with eff[11] (``E_ATTN_OVERHEAD``, forward) or eff[14] (``E_ATTN_OVERHEAD_BWD``,
  a backward) blocks of per-block overhead, times the head-dim factor (eff[15],
  ``E_ATTN_HEAD``) of its head dim (op column 10; 0 for unfused matmuls: the length factor alone),
  times, for a fused kernel on FP8 / MXFP8 operands (dtype_bytes under 2), the speed over bf16 in
  force for its pass (eff[19] forward, eff[20] backward:
  :func:`cosearch._kernels.formulas.attention_format_speed`).
Vector op: cycles = ceil(elements / (vector_units * core_fraction * width)) * ops_per_element.
Network op: 0 (priced by cosearch.comm).
Every cycle count runs at ``clock_hz`` times eff[12] (``E_CLOCK``, the fraction of the datasheet
clock the chip sustains under continuous load), fused attention ops' (those with a head dim) at
``clock_hz`` times eff[18] (``E_ATTN_CLOCK``, the clock attention kernels hold;
``KernelEfficiency.as_array`` writes the sustained clock there where the chip sets none;
:func:`cosearch._kernels.formulas.attention_clock_of`); HBM bandwidth does not scale with either.
Each op's time = max(compute / eff_unit, bytes / (HBM bandwidth * core_fraction * eff[2]))
+ eff[3] (launch).  A GEMM's ``eff_unit`` is ``eff[0]`` times
:func:`cosearch._kernels.formulas.gemm_shape_efficiency` (wave and tile quantisation of a
GPU's thread-block tiles over its SMs, ``eff[4:9]``, with stream-K's split last wave where
``eff[13]`` (``E_STREAM_K``) is set; 1 where ``eff[7]`` (slots) is 0), the
slots scaled by ``core_fraction`` like the cores.  A GEMM with 1-byte operands (FP8) runs
``eff[9]`` (``E_FP8``) times faster than the same GEMM in bf16 (0: the design's ``fp8_macs``,
design column 12), one with NVFP4 operands (under 1 byte) ``eff[10]`` (``E_FP4``) times (0: the
design's ``fp4_macs``, column 13) (:func:`cosearch._kernels.formulas.tensor_format_rate`); a format the chip has no rate for
cannot run: the GEMM takes forever (``inf``), so no plan using it is feasible.  A GEMM with FP32
(4-byte) operands runs on the vector lanes, not the tensor unit: ``m n k batch / (vector_units *
core_fraction * width)`` cycles (one FMA a lane a cycle; :func:`cosearch._kernels.formulas.fp32_gemm_cycles`)
at the same ``eff_unit``.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from .formulas import (
    D_FP4_MACS,
    D_FP8_MACS,
    E_CAST,
    E_CAST_AMAX,
    E_CLOCK,
    E_FP4,
    E_FP8,
    E_K_OVERHEAD,
    E_SLOTS,
    E_STREAM_K,
    E_TENSOR,
    E_TILE_K,
    E_TILE_M,
    E_TILE_N,
    attention_clock_of,
    attention_format_speed,
    fp32_gemm_cycles,
    fused_attention_efficiency,
    gemm_shape_efficiency,
    operand_traffic_bytes,
    tensor_format_rate,
)


@njit(cache=True)
def _cast_s(read, written, hbm_Bps, stream_Bps, frac, eff):
    """Memory time of a low-precision cast: its bytes at the engine's cast stream
    (``eff[E_CAST]`` of the HBM bandwidth; 0: the memory efficiency's ``stream_Bps``), plus,
    where the engine computes the scale by a separate amax reduction (``eff[E_CAST_AMAX]``
    bytes/s, 0: none), the input read once more at that rate, never faster than the stream.
    Kept out of line: casts are rare, and the vector path stays small."""
    bw = hbm_Bps * eff[E_CAST] if eff[E_CAST] > 0.0 else stream_Bps
    t = (read + written) / bw
    if eff[E_CAST_AMAX] > 0.0:
        amax = eff[E_CAST_AMAX] * frac
        t += read / (amax if amax < stream_Bps else stream_Bps)
    return t


@njit(cache=True, inline="always")
def _price_one(op, d, frac, eff):
    kind = op[0]
    clock = d[5] * eff[E_CLOCK]   # the clock the chip holds under sustained load
    bw = d[9] * frac * eff[2]
    if kind == 0.0 or kind == 3.0:
        m = op[1]
        n = op[2]
        k = op[3]
        b = op[4]
        dt = op[9]
        r = d[1]
        c = d[2]
        cores = math.floor(d[0] * frac)
        if cores < 1.0:
            cores = 1.0
        tiles = b * math.ceil(k / r) * math.ceil(n / c)
        if tiles >= cores:
            waves = math.ceil(tiles / cores)
            rows = m
        else:
            s = math.floor(cores / tiles)
            if s > m:
                s = m
            rows = math.ceil(m / s)
            waves = 1.0
        cycles = waves * (rows + r + c - 2.0)
        if kind == 3.0:
            # a fused kernel at the clock attention kernels hold, unfused matmuls at the sustained one
            compute = cycles / (d[5] * attention_clock_of(op[10], eff)) / (eff[1] * fused_attention_efficiency(
                m, n, k, op[10], eff) * attention_format_speed(k, op[10], dt, eff))
            mem = (op[7] + op[8]) / bw
            return (compute if compute > mem else mem) + eff[3]
        slots = math.floor(eff[E_SLOTS] * frac)
        if eff[E_SLOTS] > 0.0 and slots < 1.0:
            slots = 1.0
        shape = gemm_shape_efficiency(m, n, k, b, eff[E_TILE_M], eff[E_TILE_N], eff[E_TILE_K], slots,
                                      eff[E_K_OVERHEAD], eff[E_STREAM_K])
        if dt >= 4.0:
            # FP32 operands: the vector lanes (no tensor-unit waves)
            cycles = fp32_gemm_cycles(m, n, k, b, d[3] * frac * d[4])
        compute = cycles / clock / (eff[E_TENSOR] * shape)
        if dt < 2.0:
            # FP8 / NVFP4 operands: the chip's rate in that format (0: it has none)
            rate = tensor_format_rate(dt, eff[E_FP8], eff[E_FP4], d[D_FP8_MACS], d[D_FP4_MACS])
            compute = compute / rate if rate > 0.0 else math.inf
        total = (m * k + k * n + m * n) * b * dt
        l2 = d[7]
        if total <= l2:
            nbytes = total
        else:
            t = math.floor(math.sqrt(l2 / (3.0 * dt)))
            if t < 1.0:
                t = 1.0
            nbytes = b * dt * (m * k * math.ceil(n / t) + k * n * math.ceil(m / t) + m * n)
        need_l1 = dt * 2.0 * r * c + r * (r * dt + 4.0 * c)
        if need_l1 > d[6]:
            nbytes += tiles * math.ceil(m / r) * r * c * dt
        mem = nbytes / bw
        if d[11] > 0.0:   # operands through the global buffer at the design's on-chip bandwidth
            onchip = operand_traffic_bytes(m, n, k, b, r, c, dt) / (d[11] * frac)
            if onchip > mem:
                mem = onchip
        return (compute if compute > mem else mem) + eff[3]
    elif kind == 1.0 or kind == 4.0:
        lanes = d[3] * frac * d[4]
        cycles = math.ceil(op[5] / lanes) * op[6]
        compute = cycles / clock
        if kind == 4.0:   # a low-precision cast at the engine's cast rate
            mem = _cast_s(op[7], op[8], d[9] * frac, bw, frac, eff)
        else:
            mem = (op[7] + op[8]) / bw
        return (compute if compute > mem else mem) + eff[3]
    return 0.0


@njit(cache=True, inline="always")
def _price_design(ops, d, core_fraction, eff, out_row):
    for j in range(ops.shape[0]):
        out_row[j] = _price_one(ops[j], d, core_fraction, eff)


@njit(cache=True, parallel=True)
def price(ops, designs, core_fraction, eff):
    out = np.empty((designs.shape[0], ops.shape[0]), dtype=np.float64)
    for i in prange(designs.shape[0]):
        _price_design(ops, designs[i], core_fraction, eff, out[i])
    return out


@njit(cache=True)
def price_serial(ops, designs, core_fraction, eff):
    """:func:`price` on the calling thread: for a few designs (one chip's plan) the thread
    pool's start-up and, on a loaded machine, waiting for busy cores cost more than the work."""
    out = np.empty((designs.shape[0], ops.shape[0]), dtype=np.float64)
    for i in range(designs.shape[0]):
        _price_design(ops, designs[i], core_fraction, eff, out[i])
    return out

#: Below this many designs, pricing runs on the calling thread (:func:`price_serial`).
PARALLEL_MIN_DESIGNS = 32


@njit(cache=True, inline="always")
def _price_cell_design(base, per_seq, extra, d, eff, starts, again, weights, core, ops_s, graph_s, again_s, core_s):
    row = np.empty(base.shape[1])
    ng = starts.shape[0]
    for j in range(extra.shape[0]):
        x = extra[j]
        for o in range(base.shape[0]):
            for f in range(base.shape[1]):
                row[f] = base[o, f] + x * per_seq[o, f]
            ops_s[j, o] = _price_one(row, d, 1.0, eff)
        for g in range(ng):
            end = starts[g + 1] if g + 1 < ng else base.shape[0]
            acc = 0.0
            for o in range(starts[g], end):
                acc += ops_s[j, o]
            graph_s[j, g] = acc
        acc = 0.0
        for q in range(again.shape[0]):
            acc += ops_s[j, again[q]] * weights[q]
        again_s[j] = acc
        acc = 0.0
        for q in range(core.shape[0]):
            acc += ops_s[j, core[q]]
        core_s[j] = acc


@njit(cache=True, parallel=True)
def price_cell(base, per_seq, extra, designs, eff, starts, again, weights, core, ops_s, graph_s, again_s, core_s):
    """A plan-search cell's op rows priced at several microbatch sizes in one call, with the sums
    the cell needs.  Size ``j``'s rows are ``base + extra[j] * per_seq`` (an affine cell: the rows
    at one sequence, their change per sequence and the sizes less one; else the rows, zeros and
    one 0), priced on every design ``i`` at the whole chip: ``ops_s[i, j, o]``; the ops of each
    graph (rows ``starts[g]`` to the next start, the last to the end) summed into
    ``graph_s[i, j, g]``; ``again_s[i, j]`` the ops ``again[q]`` weighted by ``weights[q]``
    (selective recompute's shares, none 0: an op never recomputed adds nothing even where it
    cannot run); ``core_s[i, j]`` the ops ``core[q]`` summed.  Designs run in parallel
    (:func:`price_cell_serial` for a few)."""
    for i in prange(designs.shape[0]):
        _price_cell_design(base, per_seq, extra, designs[i], eff, starts, again, weights, core, ops_s[i],
                           graph_s[i], again_s[i], core_s[i])


@njit(cache=True)
def price_cell_serial(base, per_seq, extra, designs, eff, starts, again, weights, core, ops_s, graph_s, again_s,
                      core_s):
    """:func:`price_cell` on the calling thread."""
    for i in range(designs.shape[0]):
        _price_cell_design(base, per_seq, extra, designs[i], eff, starts, again, weights, core, ops_s[i],
                           graph_s[i], again_s[i], core_s[i])


@njit(cache=True, parallel=True)
def price_sum(ops, designs, core_fraction, weights, eff):
    """Weighted sum over ops of their roofline times, per design (no (D, O) array)."""
    nd = designs.shape[0]
    no = ops.shape[0]
    out = np.empty(nd, dtype=np.float64)
    for i in prange(nd):
        d = designs[i]
        acc = 0.0
        for j in range(no):
            acc += weights[j] * _price_one(ops[j], d, core_fraction, eff)
        out[i] = acc
    return out
