"""Collective and point-to-point communication times (alpha-beta model).

* ring all-reduce of ``nbytes`` over ``n`` ranks: ``2 (n-1)/n * nbytes / bw + 2 (n-1) * latency``
* ring all-gather / reduce-scatter: half of that
* point-to-point: ``nbytes / bw + latency``

``bw`` is the per-chip link bandwidth in bytes/s.  With one rank every collective is free.
"""

from __future__ import annotations

import numpy as np

__all__ = ["ring_allreduce_s", "allgather_s", "reduce_scatter_s", "p2p_s",
           "tp_allreduces_per_layer"]

#: Megatron tensor parallelism: all-reduces of the (b, s, h) activation per layer.
tp_allreduces_per_layer = {"fwd": 2, "bwd": 2}


def _check(nbytes, n, bw, latency_s):
    if np.any(np.asarray(nbytes) < 0):
        raise ValueError(f"nbytes must be >= 0, got {nbytes!r}")
    if np.any(np.asarray(n) < 1):
        raise ValueError(f"number of ranks must be >= 1, got {n!r}")
    if np.any(np.asarray(bw) <= 0):
        raise ValueError(f"bandwidth must be positive, got {bw!r}")
    if np.any(np.asarray(latency_s) < 0):
        raise ValueError(f"latency must be >= 0, got {latency_s!r}")


def ring_allreduce_s(nbytes, n, bw_Bps, latency_s=0.0):
    """Ring all-reduce time in seconds (0 for a single rank)."""
    _check(nbytes, n, bw_Bps, latency_s)
    n = np.asarray(n, dtype=np.float64)
    t = 2.0 * (n - 1.0) / n * np.asarray(nbytes, dtype=np.float64) / bw_Bps + 2.0 * (n - 1.0) * latency_s
    return float(t) if np.ndim(t) == 0 else t


def allgather_s(nbytes, n, bw_Bps, latency_s=0.0):
    """Ring all-gather of a ``nbytes`` result (each rank contributes nbytes/n)."""
    _check(nbytes, n, bw_Bps, latency_s)
    n = np.asarray(n, dtype=np.float64)
    t = (n - 1.0) / n * np.asarray(nbytes, dtype=np.float64) / bw_Bps + (n - 1.0) * latency_s
    return float(t) if np.ndim(t) == 0 else t


reduce_scatter_s = allgather_s


def p2p_s(nbytes, bw_Bps, latency_s=0.0):
    """Point-to-point send of ``nbytes``."""
    _check(nbytes, 1, bw_Bps, latency_s)
    t = np.asarray(nbytes, dtype=np.float64) / bw_Bps + latency_s
    return float(t) if np.ndim(t) == 0 else t
