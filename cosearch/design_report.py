"""Why a design wins: its area by component, how well its systolic arrays fill on a GEMM, and the
on-chip operand traffic that GEMM needs against what a global buffer like PHAZE's delivers.

The co-search's cost model charges fill/drain, tile padding and, where the design has a
global-buffer bandwidth (``Accelerator.glb_Bps``; PHAZE's space and TPUv4 do), the operand traffic
below; cosearch's area model charges each core its fixed logic (``AreaPowerModel.core_area_mm2``)
and PHAZE's (:class:`~cosearch.hardware.PhazeAreaModel`) its own per-core figures.  This report
shows an architect where a winner's advantage comes from, with the area by component of the
area model it is given.

* **Tile efficiency**: useful multiply-accumulates over the array-cycles the roofline charges
  (``waves x (rows + R + C - 2)`` per weight tile, :mod:`cosearch._kernels.roofline`).
* **Operand traffic** of a weight-stationary array between the global buffer and the cores: the
  weights once (``k n``), the inputs once per column of weight tiles (``m k ceil(n / C)``), and
  one fp32 partial sum per output per row of weight tiles (``4 m n ceil(k / R)`` bytes, reduced
  through the buffer); over the GEMM's compute time that is the bandwidth it needs.
* **Reference bandwidth**: the chip's own ``glb_Bps`` where it has one (then the cost model
  charges the traffic); otherwise what PHAZE's estimator gives a multi-core chip's global buffer,
  4,096 2-byte words per cycle at the chip's clock (msr-fiddle/phaze
  ``Estimator/utils/estimator_wrapper.py``: ``max_glb_bw = 4096``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .hardware import PHAZE_GLB_WORDS_PER_CYCLE, Accelerator, AreaPowerModel, PhazeAreaModel
from .models import ModelConfig

__all__ = ["DesignReport", "design_report", "operand_traffic_bytes", "tile_efficiency", "PHAZE_GLB_WORDS_PER_CYCLE"]



def tile_efficiency(m: int, n: int, k: int, cores: int, rows: int, cols: int) -> float:
    """Useful MACs over the MAC-cycles the roofline charges a ``(m x k) @ (k x n)`` GEMM on
    ``cores`` weight-stationary ``rows x cols`` arrays: the roofline kernel's own compute time
    (its fill/drain and padding rule; unbounded memory bandwidth, no kernel-efficiency losses)
    against the ideal ``m n k / (cores rows cols)`` cycles."""
    import numpy as np

    from .cost import price
    from .graph import Op
    from .hardware import IDEAL
    clock = 1e9
    chip = Accelerator(name="tile", tensor_cores=cores, systolic_rows=rows, systolic_cols=cols, vector_units=1,
                       vector_width=1, clock_hz=clock, l1_bytes=1e30, l2_bytes=1e30, hbm_bytes=1e12,
                       hbm_bandwidth_Bps=1e12, link_bandwidth_Bps=1e9)._unbounded(hbm_bandwidth_Bps=1e30)
    op = Op("g", "gemm", m=m, n=n, k=k, bytes_read=1.0, bytes_written=1.0)
    t = float(price(np.array([op.as_row()]), chip, efficiency=IDEAL)[0, 0])
    return (m * n * k) / (cores * rows * cols * clock) / t


def operand_traffic_bytes(m: int, n: int, k: int, rows: int, cols: int, dtype_bytes: int = 2) -> float:
    """Global-buffer traffic of the GEMM on ``rows x cols`` weight-stationary arrays (module
    docstring): weights once, inputs once per weight-tile column, fp32 partial sums once per
    weight-tile row."""
    from ._kernels.formulas import operand_traffic_bytes as traffic
    return float(traffic(float(m), float(n), float(k), 1.0, float(rows), float(cols), float(dtype_bytes)))


@dataclass(frozen=True)
class DesignReport:
    """See :func:`design_report`."""

    name: str
    area_mm2: dict = field(default_factory=dict)
    gemm: tuple[int, int, int] = (0, 0, 0)
    tile_efficiency: float = 0.0
    compute_s: float = 0.0
    operand_bytes: float = 0.0
    operand_Bps_needed: float = 0.0
    reference_Bps: float = 0.0
    #: whether the cost model charges that traffic (the chip has a global-buffer bandwidth)
    charged: bool = False
    #: FP8 MACs per PE beside the bf16 one, and the area they take (mm^2, within the PE arrays)
    fp8_macs: float = 0.0
    fp8_area_mm2: float = 0.0
    #: FP4 MACs per PE, and the area they take (mm^2, within the PE arrays)
    fp4_macs: float = 0.0
    fp4_area_mm2: float = 0.0

    def describe(self) -> str:
        m, n, k = self.gemm
        total = sum(self.area_mm2.values())
        parts = ", ".join(f"{name} {a:.1f}" for name, a in self.area_mm2.items() if a > 0)
        ratio = self.operand_Bps_needed / self.reference_Bps if self.reference_Bps else math.nan
        formats = "".join(f"; its PEs each do {macs:g} {fmt} MACs a cycle beside the bf16 one ({mm2:.1f} mm^2 of the "
                          "arrays)" for fmt, macs, mm2 in (("FP8", self.fp8_macs, self.fp8_area_mm2),
                                                           ("FP4", self.fp4_macs, self.fp4_area_mm2)) if macs > 0)
        return (f"{self.name}: area {total:.1f} mm^2 ({parts}){formats}; on a {m}x{k} @ {k}x{n} GEMM its arrays are "
                f"{self.tile_efficiency:.1%} busy (fill/drain and padding) and need "
                f"{self.operand_Bps_needed / 1e12:.1f} TB/s of operand traffic from the global buffer, "
                f"{ratio:.1f}x the {self.reference_Bps / 1e12:.1f} TB/s "
                + ("its global buffer delivers (charged: a GEMM runs no faster than its operands arrive)"
                   if self.charged else "PHAZE's estimator gives one (not charged: the chip sets no global-buffer "
                                        "bandwidth)"))


def design_report(chip: Accelerator, model: ModelConfig | str | None = None,
                  area_model: AreaPowerModel | PhazeAreaModel | None = None) -> DesignReport:
    """Area by component, tile efficiency and operand-bandwidth need of ``chip`` on ``model``'s
    largest layer GEMM (the MLP up-projection of one sequence at tp 1; a 2048 x 12288 x 12288
    GEMM without a model)."""
    from .models import preset
    if not isinstance(chip, Accelerator):
        raise ValueError(f"design_report needs an Accelerator, got {type(chip).__name__}")
    ap = area_model or AreaPowerModel()
    if model is not None:
        cfg = preset(model)
        m, n, k = cfg.seq_len, cfg.ffn_hidden, cfg.hidden
    else:
        m, n, k = 2048, 12288, 12288
    cores, r, c = int(chip.tensor_cores), int(chip.systolic_rows), int(chip.systolic_cols)
    area = {k: float(v[0]) for k, v in ap.package_components_mm2(chip.as_array()[None]).items()}
    eff = tile_efficiency(m, n, k, cores, r, c)
    compute_s = m * n * k / (cores * r * c * chip.clock_hz) / eff
    traffic = operand_traffic_bytes(m, n, k, r, c)
    ref = chip.glb_Bps if chip.glb_Bps > 0 else PHAZE_GLB_WORDS_PER_CYCLE * 2.0 * chip.clock_hz
    die = float(ap.die_area_mm2(chip.as_array()[None])[0])
    fp8_mm2, fp4_mm2 = (die - float(ap.die_area_mm2(chip.with_(**{f: 0.0}).as_array()[None])[0])
                        for f in ("fp8_macs", "fp4_macs"))
    return DesignReport(chip.name or "design", area, (m, n, k), eff, compute_s, traffic, traffic / compute_s,
                        ref, chip.glb_Bps > 0, chip.fp8_macs, fp8_mm2, chip.fp4_macs, fp4_mm2)
