"""Magnitude test of weight updates and invariant-neuron scores (numba).

For every element ``e`` of a flat float32 parameter vector ``w`` and the ``K`` clients'
returned weights ``wk[k, e]``, the relative change is ``|wk - w| / (|w| + eps)``.  An
element is invariant at threshold ``th`` for a quorum of ``q`` clients iff the q-th
smallest relative change is ``<= th``: that order statistic is the element's *score*.
A neuron is invariant iff every element attached to it (incoming weights and bias,
outgoing weights into the next layer) is, so a neuron's score is the max of its
elements' scores, and ``neuron invariant at th  <=>  score <= th`` (monotone in th).

``neuron_scores(w, wk, quorum, eps, nin, nout, n_neurons)`` returns those neuron scores;
``nin[e]``/``nout[e]`` give the neuron an element enters / leaves (-1 for none).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange


@njit(cache=True, inline="always")
def _quorum_change(w, wk, e, quorum, eps, buf):
    K = wk.shape[0]
    base = abs(w[e]) + eps
    for k in range(K):
        buf[k] = abs(wk[k, e] - w[e]) / base
    # insertion sort of K (small) values
    for a in range(1, K):
        v = buf[a]
        b = a - 1
        while b >= 0 and buf[b] > v:
            buf[b + 1] = buf[b]
            b -= 1
        buf[b + 1] = v
    return buf[quorum - 1]


@njit(cache=True, parallel=True)
def element_scores(w, wk, quorum, eps):
    """Per element: the quorum-th smallest relative change over clients (float32)."""
    P = w.shape[0]
    out = np.empty(P, dtype=np.float32)
    nchunk = 64
    step = (P + nchunk - 1) // nchunk
    for c in prange(nchunk):
        buf = np.empty(wk.shape[0], dtype=np.float32)
        for e in range(c * step, min(P, (c + 1) * step)):
            out[e] = _quorum_change(w, wk, e, quorum, eps, buf)
    return out


@njit(cache=True, parallel=True)
def neuron_scores(w, wk, quorum, eps, nin, nout, n_neurons):
    """Per neuron: max element score over its incoming and outgoing elements (float32)."""
    P = w.shape[0]
    nchunk = 64
    step = (P + nchunk - 1) // nchunk
    partial = np.zeros((nchunk, n_neurons), dtype=np.float32)
    for c in prange(nchunk):
        buf = np.empty(wk.shape[0], dtype=np.float32)
        for e in range(c * step, min(P, (c + 1) * step)):
            a = nin[e]
            b = nout[e]
            if a < 0 and b < 0:
                continue
            s = _quorum_change(w, wk, e, quorum, eps, buf)
            if a >= 0 and s > partial[c, a]:
                partial[c, a] = s
            if b >= 0 and s > partial[c, b]:
                partial[c, b] = s
    out = np.zeros(n_neurons, dtype=np.float32)
    for c in range(nchunk):
        for j in range(n_neurons):
            if partial[c, j] > out[j]:
                out[j] = partial[c, j]
    return out
