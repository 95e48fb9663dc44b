"""Magnitude test of weight updates and invariant-neuron scores (numba).

For every element ``e`` of a flat float32 parameter vector ``w`` and the ``K`` clients'
returned weights ``wk[k, e]``, the relative change is ``|wk - w| / (|w| + eps)``.  An
element is invariant at threshold ``th`` for a quorum of ``q`` clients iff the q-th
smallest relative change is ``<= th``: that order statistic is the element's *score*.
A neuron is invariant iff every element attached to it (incoming weights and bias,
outgoing weights into the next layer) is, so a neuron's score is the max of its
elements' scores, and ``neuron invariant at th  <=>  score <= th`` (monotone in th).

``neuron_scores(w, wk, quorum, eps, nmap, n_neurons)`` returns, in one pass over the
weights, a ``(2, n_neurons)`` array: row 0 the quorum scores above, row 1 the neuron's
*largest* relative change over every client and element (FLuID calibrates its threshold
with it).

The parameters are described by a :class:`NeuronMap` of plain arrays: tensor ``t`` occupies
``w[offsets[t]:offsets[t+1]]`` viewed as a ``rows[t] x cols[t]`` matrix (a tensor's first
axis, and the product of the others); ``rowmap`` gives the neuron each row belongs to and
``colmap`` the neuron each column belongs to (-1: none).  So the kernel reads the weights
once and only a few small index arrays.  Work is split into row segments (``seg_*``) of
roughly equal size; each keeps, per column, the ``K - q + 1`` largest changes seen so far
by insertion, so the q-th smallest and the largest fall out of one pass without sorting.
For large updates from up to 16 clients with ``K - q + 1 <= 4`` a kernel is compiled for the exact ``K`` and
``L`` (the client loop unrolled, the L largest kept in registers, the division by
``|w| + eps`` done once per element since it scales every client's change alike, and the
maxima taken on the scores' int32 bit patterns), so the loops over a row vectorise (AVX2:
8 elements per instruction); other cases use a general kernel.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit, prange


class NeuronMap(NamedTuple):
    """Which neuron every element of a flat parameter vector enters (row) and leaves (column)."""

    offsets: np.ndarray      # int64[T + 1]: element offset of each tensor
    rows: np.ndarray         # int64[T]
    cols: np.ndarray         # int64[T]
    row_off: np.ndarray      # int64[T + 1]: offsets into rowmap
    rowmap: np.ndarray       # int64[sum(rows)]
    col_off: np.ndarray      # int64[T + 1]: offsets into colmap
    colmap: np.ndarray       # int64[sum(cols)]
    seg_tensor: np.ndarray   # int64[S]: tensor of each work segment
    seg_r0: np.ndarray       # int64[S]: first row
    seg_r1: np.ndarray       # int64[S]: one past the last row


def make_map(shapes: list[tuple[int, ...]], rowmaps: list[np.ndarray], colmaps: list[np.ndarray],
             segments: int = 64) -> NeuronMap:
    """A :class:`NeuronMap` from per-tensor shapes and row/column neuron maps, with work split
    into about ``segments`` segments (never splitting a row)."""
    rows = np.array([s[0] if len(s) else 1 for s in shapes], dtype=np.int64)
    cols = np.array([int(np.prod(s[1:])) if len(s) > 1 else 1 for s in shapes], dtype=np.int64)
    sizes = rows * cols
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    for t, (rm, cm) in enumerate(zip(rowmaps, colmaps)):
        if len(rm) != rows[t] or len(cm) != cols[t]:
            raise ValueError(f"tensor {t}: maps of length {len(rm)}/{len(cm)} for a {rows[t]} x {cols[t]} view")
    target = max(1, int(offsets[-1]) // max(1, segments))
    st, s0, s1 = [], [], []
    for t in range(len(shapes)):
        step = max(1, target // max(1, int(cols[t])))
        for r in range(0, int(rows[t]), step):
            st.append(t)
            s0.append(r)
            s1.append(min(int(rows[t]), r + step))
    i64 = np.int64
    return NeuronMap(offsets, rows, cols, np.concatenate([[0], np.cumsum(rows)]).astype(i64),
                     np.concatenate(rowmaps).astype(i64) if rowmaps else np.zeros(0, i64),
                     np.concatenate([[0], np.cumsum(cols)]).astype(i64),
                     np.concatenate(colmaps).astype(i64) if colmaps else np.zeros(0, i64),
                     np.array(st, i64), np.array(s0, i64), np.array(s1, i64))


def expand(nmap: NeuronMap) -> tuple[np.ndarray, np.ndarray]:
    """Per-element (neuron entered, neuron left) arrays of ``nmap`` (for references and tests)."""
    nin, nout = [], []
    for t in range(len(nmap.rows)):
        r, c = int(nmap.rows[t]), int(nmap.cols[t])
        rm = nmap.rowmap[nmap.row_off[t]:nmap.row_off[t + 1]]
        cm = nmap.colmap[nmap.col_off[t]:nmap.col_off[t + 1]]
        nin.append(np.repeat(rm, c))
        nout.append(np.tile(cm, r))
    return np.concatenate(nin), np.concatenate(nout)


@njit(cache=True, inline="always")
def _flush_row(partial, sg, nr, rq, rm):
    """Fold a row's scores into its neuron (segment ``sg``'s partial maxima)."""
    if nr >= 0:
        partial[sg, 0, nr] = max(partial[sg, 0, nr], rq)
        partial[sg, 1, nr] = max(partial[sg, 1, nr], rm)


@njit(cache=True, inline="always")
def _flush_columns(partial, sg, nmap, t, nc, cq, cm):
    """Fold a segment's per-column maxima into the columns' neurons."""
    for j in range(nc):
        ncn = nmap.colmap[nmap.col_off[t] + j]
        if ncn >= 0:
            partial[sg, 0, ncn] = max(partial[sg, 0, ncn], cq[j])
            partial[sg, 1, ncn] = max(partial[sg, 1, ncn], cm[j])


@njit(cache=True)
def _reduce(partial):
    """Max over segments of the partial neuron scores: a (2, n_neurons) array."""
    out = np.zeros((2, partial.shape[2]), dtype=partial.dtype)
    for sg in range(partial.shape[0]):
        for i in range(2):
            for j in range(partial.shape[2]):
                if partial[sg, i, j] > out[i, j]:
                    out[i, j] = partial[sg, i, j]
    return out


@njit(cache=True, inline="always", error_model="numpy", fastmath=True)
def _row_general(w, wk, e0, nc, L, eps, top, v, cq, cm):
    """One row for any L: the L largest changes per element kept in ``top`` by insertion."""
    K = wk.shape[0]
    for r in range(L):
        for j in range(nc):
            top[r, j] = -1.0
    for k in range(K):
        for j in range(nc):
            x = w[e0 + j]
            v[j] = abs(wk[k, e0 + j] - x) / (abs(x) + eps)
        for r in range(L):
            for j in range(nc):
                a = top[r, j]
                b = v[j]
                top[r, j] = max(a, b)
                v[j] = min(a, b)
    rq = np.float32(0.0)
    rm = np.float32(0.0)
    for j in range(nc):
        s = top[L - 1, j]
        m = top[0, j]
        rq = max(rq, s)
        rm = max(rm, m)
        cq[j] = max(cq[j], s)
        cm[j] = max(cm[j], m)
    return rq, rm


@njit(cache=True, parallel=True, error_model="numpy", fastmath=True)
def _scores_general(w, wk, quorum, eps, nmap, n_neurons):
    """Any K and quorum: per element the L = K - q + 1 largest changes in ``top``."""
    K = wk.shape[0]
    L = K - quorum + 1
    S = nmap.seg_tensor.shape[0]
    maxc = 1
    for t in range(nmap.cols.shape[0]):
        maxc = max(maxc, nmap.cols[t])
    partial = np.zeros((S, 2, n_neurons), dtype=np.float32)
    epsf = np.float32(eps)
    for sg in prange(S):
        t = nmap.seg_tensor[sg]
        nc = nmap.cols[t]
        base = nmap.offsets[t]
        top = np.empty((L, maxc), dtype=np.float32)
        v = np.empty(maxc, dtype=np.float32)
        cq = np.zeros(maxc, dtype=np.float32)
        cm = np.zeros(maxc, dtype=np.float32)
        for i in range(nmap.seg_r0[sg], nmap.seg_r1[sg]):
            e0 = base + i * nc
            rq, rm = _row_general(w, wk, e0, nc, L, epsf, top, v, cq, cm)
            _flush_row(partial, sg, nmap.rowmap[nmap.row_off[t] + i], rq, rm)
        _flush_columns(partial, sg, nmap, t, nc, cq, cm)
    return _reduce(partial)


_SPECIAL: dict[tuple[int, int], object] = {}

#: Updates of at least this many client-elements use the specialised kernel; below it, its
#: compile time (seconds, once per process and (K, L)) would outweigh the run time, and the
#: general kernel (compiled once and cached on disk) is used.
SPECIALISE_ABOVE = 20_000_000


def _specialised(K: int, L: int):
    """The kernel compiled for ``K`` clients keeping the ``L <= 4`` largest changes.

    Written so that LLVM vectorises it (checked by ``tests/test_fl_method.py``): a row is
    done in two loops, one writing every element's two scores to small buffers, one folding
    them into the row and column maxima.  The folding compares the scores' float32 bit
    patterns as int32 — for non-negative floats (scores are ``|change| / (|w| + eps) >= 0``,
    or ``+inf``) the integer order is the float order, and LLVM vectorises integer max
    (a read-modify-write float max it leaves scalar).  The partial maxima stay int32 bits
    until the end.
    """
    key = (K, L)
    if key in _SPECIAL:
        return _SPECIAL[key]

    @njit(error_model="numpy", fastmath=True, inline="never")
    def row_scores(w, wk, e0, nc, eps, s_out, m_out):
        for j in range(nc):
            x = w[e0 + j]
            t1 = np.float32(-1.0)
            t2 = np.float32(-1.0)
            t3 = np.float32(-1.0)
            t4 = np.float32(-1.0)
            for k in range(K):
                v = abs(wk[k, e0 + j] - x)
                a = max(t1, v)
                v = min(t1, v)
                t1 = a
                if L >= 2:
                    a = max(t2, v)
                    v = min(t2, v)
                    t2 = a
                if L >= 3:
                    a = max(t3, v)
                    v = min(t3, v)
                    t3 = a
                if L >= 4:
                    t4 = max(t4, v)
            inv = np.float32(1.0) / (abs(x) + eps)
            s_out[j] = (t1 if L == 1 else (t2 if L == 2 else (t3 if L == 3 else t4))) * inv
            m_out[j] = t1 * inv

    @njit(error_model="numpy", inline="never")
    def fold(s_bits, m_bits, cq, cm):
        rq = np.int32(0)
        rm = np.int32(0)
        for j in range(s_bits.shape[0]):
            a = s_bits[j]
            b = m_bits[j]
            rq = max(rq, a)
            rm = max(rm, b)
            cq[j] = max(cq[j], a)
            cm[j] = max(cm[j], b)
        return rq, rm

    @njit(parallel=True, error_model="numpy", fastmath=True)
    def kernel(w, wk, eps, nmap, n_neurons):
        S = nmap.seg_tensor.shape[0]
        partial = np.zeros((S, 2, n_neurons), dtype=np.int32)
        for sg in prange(S):
            t = nmap.seg_tensor[sg]
            nc = nmap.cols[t]
            base = nmap.offsets[t]
            s_row = np.empty(nc, dtype=np.float32)
            m_row = np.empty(nc, dtype=np.float32)
            s_bits = s_row.view(np.int32)
            m_bits = m_row.view(np.int32)
            cq = np.zeros(nc, dtype=np.int32)
            cm = np.zeros(nc, dtype=np.int32)
            for i in range(nmap.seg_r0[sg], nmap.seg_r1[sg]):
                row_scores(w, wk, base + i * nc, nc, eps, s_row, m_row)
                rq, rm = fold(s_bits, m_bits, cq, cm)
                _flush_row(partial, sg, nmap.rowmap[nmap.row_off[t] + i], rq, rm)
            _flush_columns(partial, sg, nmap, t, nc, cq, cm)
        return _reduce(partial).view(np.float32)

    kernel.parts = (row_scores, fold)
    _SPECIAL[key] = kernel
    return kernel


def neuron_scores(w, wk, quorum, eps, nmap: NeuronMap, n_neurons: int) -> np.ndarray:
    """Per neuron: max element score over its incoming and outgoing elements (float32),
    row 0 at the quorum, row 1 over all clients (see the module docstring).  ``w``: float32
    ``(P,)``; ``wk``: float32 ``(K, P)``; ``1 <= quorum <= K``."""
    K = int(wk.shape[0])
    quorum = int(quorum)
    if not 1 <= quorum <= K:
        raise ValueError(f"quorum must lie in [1, {K}], got {quorum}")
    if w.ndim != 1 or wk.ndim != 2 or wk.shape[1] != w.shape[0] or w.shape[0] != int(nmap.offsets[-1]):
        raise ValueError(f"w {w.shape} / wk {wk.shape} do not match the map's {int(nmap.offsets[-1])} elements")
    L = K - quorum + 1
    if K <= 16 and L <= 4 and w.shape[0] * K >= SPECIALISE_ABOVE:
        return _specialised(K, L)(w, wk, np.float32(eps), nmap, int(n_neurons))
    return _scores_general(w, wk, quorum, np.float32(eps), nmap, int(n_neurons))
