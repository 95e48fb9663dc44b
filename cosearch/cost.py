"""Roofline cost model: price every op of a layer graph on every design at once.

The formulas are documented in :mod:`cosearch._kernels.roofline`; this module
packs :class:`~cosearch.graph.LayerGraph` and :class:`~cosearch.hardware.Accelerator`
/ design arrays into the kernel's arrays and offers a vectorised-NumPy version
of the same formulas (``backend="numpy"``) used as the benchmark reference.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .graph import OP_FIELDS, LayerGraph
from .hardware import DESIGN_FIELDS, Accelerator, design_array

__all__ = ["price", "price_on", "price_numpy", "op_array"]


def op_array(ops: LayerGraph | np.ndarray) -> np.ndarray:
    """Op rows (:data:`~cosearch.graph.OP_FIELDS` order) of a graph, validated."""
    if isinstance(ops, LayerGraph):
        return ops.arrays()
    arr = np.ascontiguousarray(ops, dtype=np.float64)
    if arr.ndim != 2 or arr.shape[1] != len(OP_FIELDS):
        raise ValueError(f"op array must have shape (n, {len(OP_FIELDS)}), got {arr.shape}")
    if not np.all(np.isfinite(arr)) or np.any(arr < 0):
        raise ValueError("op array has negative or non-finite entries")
    return arr


def _designs(designs) -> np.ndarray:
    if isinstance(designs, Accelerator) or (isinstance(designs, Sequence) and designs
                                            and isinstance(designs[0], Accelerator)):
        return design_array(designs)
    return design_array(np.asarray(designs, dtype=np.float64))


def _check_fraction(core_fraction: float) -> float:
    f = float(core_fraction)
    if not (0.0 < f <= 1.0):
        raise ValueError(f"core_fraction must be in (0, 1], got {core_fraction!r}")
    return f


def price(ops: LayerGraph | np.ndarray, designs, core_fraction: float = 1.0,
          backend: str = "numba") -> np.ndarray:
    """(designs, ops) array of op latencies in seconds.

    ``designs`` is an :class:`Accelerator`, a list of them, or a (n, 11) design
    array (:data:`~cosearch.hardware.DESIGN_FIELDS`).  ``core_fraction`` prices
    each op on that fraction of the chip's tensor cores / vector units and HBM
    bandwidth (how the scheduler splits the chip between concurrent ops).
    """
    o = op_array(ops)
    d = _designs(designs)
    f = _check_fraction(core_fraction)
    if backend == "numba":
        from ._kernels.roofline import price as kernel
        return kernel(o, d, f)
    if backend == "numpy":
        return price_numpy(o, d, f)
    raise ValueError(f"unknown backend {backend!r}; choose 'numba' or 'numpy'")


def price_on(ops: LayerGraph | np.ndarray, accelerator: Accelerator, core_fraction: float = 1.0) -> np.ndarray:
    """Per-op latency (seconds) on one accelerator."""
    return price(ops, accelerator, core_fraction)[0]


def price_numpy(ops: np.ndarray, designs: np.ndarray, core_fraction: float = 1.0) -> np.ndarray:
    """The roofline formulas vectorised over (designs, ops) with NumPy broadcasting."""
    o = {f: ops[None, :, i] for i, f in enumerate(OP_FIELDS)}
    d = {f: designs[:, i, None] for i, f in enumerate(DESIGN_FIELDS)}
    frac = core_fraction
    bw = d["hbm_bandwidth_Bps"] * frac
    clock = d["clock_hz"]
    m, n, k, b, dt = o["m"], o["n"], o["k"], o["batch"], o["dtype_bytes"]
    r, c = d["systolic_rows"], d["systolic_cols"]
    with np.errstate(divide="ignore", invalid="ignore"):
        cores = np.maximum(1.0, np.floor(d["tensor_cores"] * frac))
        tiles = b * np.ceil(k / r) * np.ceil(n / c)
        many = tiles >= cores
        s = np.minimum(np.floor(cores / np.maximum(tiles, 1e-300)), m)
        s = np.maximum(s, 1.0)
        rows = np.where(many, m, np.ceil(m / s))
        waves = np.where(many, np.ceil(tiles / cores), 1.0)
        compute_t = waves * (rows + r + c - 2.0) / clock
        total = (m * k + k * n + m * n) * b * dt
        l2 = d["l2_bytes"]
        t = np.maximum(1.0, np.floor(np.sqrt(l2 / (3.0 * dt))))
        blocked = b * dt * (m * k * np.ceil(n / t) + k * n * np.ceil(m / t) + m * n)
        nbytes = np.where(total <= l2, total, blocked)
        need_l1 = dt * 2.0 * r * c + r * (r * dt + 4.0 * c)
        nbytes = nbytes + np.where(need_l1 > d["l1_bytes"], tiles * np.ceil(m / r) * r * c * dt, 0.0)
        tensor_t = np.maximum(compute_t, nbytes / bw)
        lanes = d["vector_units"] * frac * d["vector_width"]
        vec_t = np.maximum(np.ceil(o["elements"] / lanes) * o["ops_per_element"] / clock,
                           (o["bytes_read"] + o["bytes_written"]) / bw)
    kind = o["kind"]
    return np.where(kind == 0, tensor_t, np.where(kind == 1, vec_t, 0.0))
