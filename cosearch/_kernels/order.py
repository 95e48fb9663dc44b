"""Sorting inside the cached kernels, without NumPy's sort.

Why not ``np.sort`` / ``np.argsort`` in an ``@njit(cache=True)`` kernel: numba builds each
sort from a closure factory (``numba.misc.quicksort.make_quicksort_impl``), so the sort
of ``np.sort`` and the one of ``np.argsort`` share qualified names such as
``make_quicksort_impl.<locals>.run_quicksort1`` with the same argument types, and their
symbols differ only by a per-process counter (the ``v<n>`` ABI tag).  Two processes that
compile the two sorts in different orders can give different code the same symbol; when
a third process loads both from the cache, the linker keeps the first, and the other
kernel calls the wrong sort.  That is how ``cosearch plan`` (``np.sort`` in
``dp.config_best``) followed by two ``cosearch search`` runs (``np.argsort`` in
``dp._best_one``) ended in a segmentation fault (numba issue #10128 is the same class of
bug for gufuncs).  These functions have names of their own, so no other code can share
their symbols.

Both are heapsorts: ``O(n log n)`` in every case, in place, no recursion.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def _sift_down(keys, idx, start, end):
    """Restore the max-heap below ``start`` in ``keys[idx[0:end]]``."""
    root = start
    while True:
        child = 2 * root + 1
        if child >= end:
            return
        if child + 1 < end and keys[idx[child + 1]] > keys[idx[child]]:
            child += 1
        if keys[idx[child]] > keys[idx[root]]:
            idx[root], idx[child] = idx[child], idx[root]
            root = child
        else:
            return


@njit(cache=True)
def argsort(keys):
    """Indices that sort the float64 array ``keys`` ascending (NaN last; ties in no stated
    order): ``keys[argsort(keys)]`` is sorted."""
    n = keys.shape[0]
    work = np.empty(n)
    for i in range(n):                 # NaN sorts last, as in NumPy
        work[i] = np.inf if np.isnan(keys[i]) else keys[i]
    idx = np.arange(n)
    for start in range(n // 2 - 1, -1, -1):
        _sift_down(work, idx, start, n)
    for end in range(n - 1, 0, -1):
        idx[0], idx[end] = idx[end], idx[0]
        _sift_down(work, idx, end - end, end)    # an int64 0, not the literal: one signature
    # NaNs were ranked as +inf: move them after every true +inf, keeping the rest in place
    nan_count = 0
    for i in range(n):
        if np.isnan(keys[i]):
            nan_count += 1
    if nan_count:
        out = np.empty(n, dtype=np.int64)
        j = 0
        for i in range(n):
            if not np.isnan(keys[idx[i]]):
                out[j] = idx[i]
                j += 1
        for i in range(n):
            if np.isnan(keys[idx[i]]):
                out[j] = idx[i]
                j += 1
        return out
    return idx


@njit(cache=True)
def sorted_copy(keys):
    """A sorted (ascending, NaN last) copy of the float64 array ``keys``."""
    idx = argsort(keys)
    out = np.empty(keys.shape[0])
    for i in range(keys.shape[0]):
        out[i] = keys[idx[i]]
    return out
