"""PHAZE's own area model, recovered from the areas PHAZE published with its design list.

PHAZE (msr-fiddle/phaze) prices a chip with Accelergy at 22 nm: each tensor core is a
``width x depth`` grid of PEs (a 32-bit MAC and its register file) under a per-core buffer
of ``max(1, width*depth/64)`` KiB; each vector core is ``width`` lanes under a
``max(1, width/64)`` KiB buffer; one global buffer serves the chip
(``Estimator/architecture.py``: ``generate_area_of_acc`` adds the tensor cores' area, the
vector cores' area and the larger of the two global-buffer figures).  The Accelergy package
that computes those areas is not in PHAZE's repository, but its results are: the 29,360
designs of ``Estimator/arch_configs/cores.json`` (commit fed7cdea) each carry their area in
um^2.

Those areas are exactly linear in the core counts, with one constant per buffer size::

    area = num_tc * (CORE + PE * width * depth + BUFFER(tc buffer))
         + num_vc * (CORE + LANE * width      + BUFFER(vc buffer))
         + GLB(global buffer)

The constants below were solved from 104 rows of that file (every tensor-array size from
2x2 to 256x256, every global-buffer size, 1 to 4,096 cores of each kind) and reproduce each
of them to 1e-13 relative; ``tests/test_phaze_area.py`` checks them against those rows and
against a further 129-row stretch of the list, and that ``SearchSpace.phaze(area_model="phaze")``
keeps exactly PHAZE's 29,360 designs.  Buffer sizes between the table's points are
interpolated linearly in bytes, and sizes past its ends extrapolated along the end segment
(PHAZE itself only uses the table's points; a chip such as TPUv4 with 4 MiB per-core buffers
is priced by that extrapolation).

PHAZE's area is the logic die only: HBM and chip links are scenarios, not area, and PHAZE
sets no power limit.  :class:`~cosearch.hardware.PhazeAreaModel`, the area model built on these
tables, therefore reports power with cosearch's own :class:`~cosearch.hardware.AreaPowerModel`
(its ``power`` field).  This module holds the tables alone (it imports nothing of cosearch).
"""

from __future__ import annotations

import numpy as np

KiB = 1024
MiB = 1024 ** 2

__all__ = ["buffer_um2", "glb_um2", "PHAZE_CORE_UM2", "PHAZE_PE_UM2", "PHAZE_LANE_UM2",
           "PHAZE_BUFFER_BYTES", "PHAZE_BUFFER_UM2", "PHAZE_GLB_BYTES", "PHAZE_GLB_UM2"]

#: Fixed area of one core, tensor or vector, with its smallest (1 KiB) buffer (um^2).
PHAZE_CORE_UM2 = 6133.98
#: One tensor-core PE: a 32-bit MAC and its 32-entry register file (um^2).
PHAZE_PE_UM2 = 760.041386
#: One vector-core lane: a 32-bit MAC and its 12-entry register file (um^2).
PHAZE_LANE_UM2 = 759.823853
#: Per-core buffer sizes of PHAZE's table (bytes): 1 KiB to 1 MiB.
PHAZE_BUFFER_BYTES = tuple(float(2 ** i * KiB) for i in range(11))
#: Each buffer's area above the 1 KiB buffer counted in :data:`PHAZE_CORE_UM2` (um^2).
PHAZE_BUFFER_UM2 = (0.0, 2114.45, 6476.52, 16005.92, 32449.02, 57204.42, 109445.02, 198630.02,
                    440431.02, 891756.02, 1627996.02)
#: Global-buffer sizes of PHAZE's table (bytes): 2 to 128 MiB.
PHAZE_GLB_BYTES = tuple(float(2 ** i * MiB) for i in range(1, 8))
#: Global-buffer areas (um^2).
PHAZE_GLB_UM2 = (3338220.0, 6078640.0, 11952400.0, 23745200.0, 46750900.0, 88605700.0, 175423000.0)


def _table(x: np.ndarray, xs: tuple, ys: tuple, clamp_low: bool) -> np.ndarray:
    """Piecewise-linear in bytes through the table; linear past its ends along the end
    segments (below the first point: held at it when ``clamp_low``, PHAZE's 1 KiB floor)."""
    xs_a, ys_a = np.asarray(xs), np.asarray(ys)
    y = np.interp(x, xs_a, ys_a)
    hi = x > xs_a[-1]
    y = np.where(hi, ys_a[-1] + (x - xs_a[-1]) * (ys_a[-1] - ys_a[-2]) / (xs_a[-1] - xs_a[-2]), y)
    if not clamp_low:
        lo = x < xs_a[0]
        y = np.where(lo, np.maximum(ys_a[0] + (x - xs_a[0]) * (ys_a[1] - ys_a[0]) / (xs_a[1] - xs_a[0]), 0.0), y)
    return y


def buffer_um2(size_bytes) -> np.ndarray:
    """A per-core buffer's area above PHAZE's 1 KiB minimum (um^2)."""
    return _table(np.asarray(size_bytes, dtype=np.float64), PHAZE_BUFFER_BYTES, PHAZE_BUFFER_UM2, True)


def glb_um2(size_bytes) -> np.ndarray:
    """The global buffer's area (um^2)."""
    return _table(np.asarray(size_bytes, dtype=np.float64), PHAZE_GLB_BYTES, PHAZE_GLB_UM2, False)
