"""Magnitude test of weight updates and invariant-neuron scores (numba).

For every element ``e`` of a flat float32 parameter vector ``w`` and the ``K`` clients'
returned weights ``wk[k, e]``, the relative change is ``|wk - w| / (|w| + eps)``.  An
element is invariant at threshold ``th`` for a quorum of ``q`` clients iff the q-th
smallest relative change is ``<= th``: that order statistic is the element's *score*.
A neuron is invariant iff every element attached to it (incoming weights and bias,
outgoing weights into the next layer) is, so a neuron's score is the max of its
elements' scores, and ``neuron invariant at th  <=>  score <= th`` (monotone in th).

``neuron_scores(w, wk, quorum, eps, nin, nout, n_neurons)`` returns, in one pass over the
weights, a ``(2, n_neurons)`` array: row 0 the quorum scores above, row 1 the neuron's
*largest* relative change over every client and element (the quorum-``K`` score), which
FLuID uses to calibrate its threshold.  ``nin[e]``/``nout[e]`` give the neuron an element
enters / leaves (-1 for none).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

_BLOCK = 2048


@njit(cache=True, inline="always", error_model="numpy", fastmath=True)
def _block_scores(w, wk, lo, hi, quorum, eps, r):
    """Scores of elements [lo, hi) into r[quorum - 1, :hi-lo]: relative changes of every
    client in rows of r, then an odd-even transposition sorting network across the rows
    (elementwise min/max, so the inner loops vectorise)."""
    K = wk.shape[0]
    n = hi - lo
    for k in range(K):
        for t in range(n):
            e = lo + t
            r[k, t] = abs(wk[k, e] - w[e]) / (abs(w[e]) + eps)
    for rnd in range(K):
        for k in range(rnd % 2, K - 1, 2):
            for t in range(n):
                a = r[k, t]
                b = r[k + 1, t]
                r[k, t] = min(a, b)
                r[k + 1, t] = max(a, b)


@njit(cache=True, parallel=True, error_model="numpy")
def element_scores(w, wk, quorum, eps):
    """Per element: the quorum-th smallest relative change over clients (float32)."""
    P = w.shape[0]
    nblk = (P + _BLOCK - 1) // _BLOCK
    out = np.empty(P, dtype=np.float32)
    for b in prange(nblk):
        r = np.empty((wk.shape[0], _BLOCK), dtype=np.float32)
        lo = b * _BLOCK
        hi = min(P, lo + _BLOCK)
        _block_scores(w, wk, lo, hi, quorum, eps, r)
        for t in range(hi - lo):
            out[lo + t] = r[quorum - 1, t]
    return out


@njit(cache=True, parallel=True, error_model="numpy")
def neuron_scores(w, wk, quorum, eps, nin, nout, n_neurons):
    """Per neuron: max element score over its incoming and outgoing elements (float32),
    row 0 at the quorum, row 1 over all clients (see the module docstring)."""
    P = w.shape[0]
    K = wk.shape[0]
    nchunk = 64
    step = (P + nchunk - 1) // nchunk
    partial = np.zeros((nchunk, 2, n_neurons), dtype=np.float32)
    for c in prange(nchunk):
        r = np.empty((wk.shape[0], _BLOCK), dtype=np.float32)
        end = min(P, (c + 1) * step)
        lo = c * step
        while lo < end:
            hi = min(end, lo + _BLOCK)
            _block_scores(w, wk, lo, hi, quorum, eps, r)
            for t in range(hi - lo):
                e = lo + t
                s = r[quorum - 1, t]
                m = r[K - 1, t]
                a = nin[e]
                b = nout[e]
                if a >= 0:
                    if s > partial[c, 0, a]:
                        partial[c, 0, a] = s
                    if m > partial[c, 1, a]:
                        partial[c, 1, a] = m
                if b >= 0:
                    if s > partial[c, 0, b]:
                        partial[c, 0, b] = s
                    if m > partial[c, 1, b]:
                        partial[c, 1, b] = m
            lo = hi
    out = np.zeros((2, n_neurons), dtype=np.float32)
    for c in range(nchunk):
        for i in range(2):
            for j in range(n_neurons):
                if partial[c, i, j] > out[i, j]:
                    out[i, j] = partial[c, i, j]
    return out
