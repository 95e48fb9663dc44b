"""Area and power of a design: cosearch's first-order model and PHAZE's.

Area/power model (:class:`AreaPowerModel`) — first-order constants for a 7 nm
class process, chosen from public sources (not fitted to any chip).  What it computes for
the TPUv4 preset: 294 mm^2 of logic die (PEs 98, SRAM 72, HBM PHY 45, SerDes 15, uncore 60,
vector lanes 4) and 168 W at full utilisation (514 mm^2 with its four 8 GiB HBM stacks); TPUv4's die is reported as < 600 mm^2 with
a 192 W TDP / 170 W mean (Jouppi et al., ISCA 2023), so the die estimate is a lower bound
(no NoC, no CMEM periphery beyond the SRAM constant, no ICI router).  Area budgets are
relative (a design against a reference chip under the same model), which is what the
search needs.

* PE (bf16 MAC + pipeline registers): 7.5e-4 mm^2, 0.5 pJ per MAC
  (Horowitz ISSCC 2014 energy table scaled 45 nm -> 7 nm; Spotlight, Sakhuja et al. HPCA 2023).
* SRAM: 0.45 mm^2 and 0.1 W per MiB (TSMC N7 high-density bitcell 0.027 um^2, ~2x periphery).
* Vector lane (fp32 ALU + register slice): 2e-3 mm^2, 1.5 pJ per op.
* HBM PHY + controller: 0.0375 mm^2 per GB/s (~15 mm^2 per 400 GB/s stack); 4 pJ per bit moved.
* HBM capacity: the stacks' footprint beside the die, 6.875 mm^2 per GiB (an 8-high 16 GB
  HBM2E stack is an 11 x 10 mm package; SK hynix HBM2E datasheet, JEDEC JESD235 outline).
  Counted in :meth:`AreaPowerModel.area_mm2` (package area) and not in
  :meth:`AreaPowerModel.die_area_mm2`; so a search over HBM capacity pays for it.  The
  stacks' static power is not modelled (no public per-GiB figure); their traffic is, per bit.
* Chip-to-chip SerDes: 0.05 mm^2 per GB/s of link bandwidth; 5 pJ per bit.
* Per-core fixed logic (control, address generation, the core's smallest buffer), for every
  tensor and vector core: 8.0706 PE-equivalents, 6.05294e-3 mm^2.  The ratio is PHAZE's
  Accelergy 22 nm figures (:mod:`cosearch.phaze_area`: 6,133.98 um^2 per core against
  760.041 um^2 per PE, solved from the areas PHAZE published with its design list), carried
  over to this model's PE area; it includes a 1 KiB buffer that the SRAM term also counts (at
  most 4.4e-4 mm^2 per core).  So 4,096 small cores are not free: their fixed logic is 24.8
  mm^2.  Its power: ``core_energy_j`` = 4.0353 pJ per core per cycle, the same 8.0706
  PE-equivalents at the PE's 0.5 pJ (no per-core power figure is published; PHAZE's area
  ratio is carried over at equal switching energy per unit of area, an assumption), so 8,192
  small cores at 1.05 GHz burn 34.7 W of fixed logic where TPUv4's 10 cores burn 0.04 W.
* Fixed uncore (control, host interface, misc.): 60 mm^2 and 30 W.
* Number formats (``fp8_macs``: FP8 multiply-adds each PE does per cycle beside its bf16 MAC;
  2 on H100, B200 and MI300X, whose dense FP8 peaks are twice their BF16 ones: 1,979 vs 989,
  4,500 vs 2,250 and 2,615 vs 1,307 TFLOP/s on their datasheets).  Each FP8 MAC is priced as
  a datapath of its own beside the bf16 one (no sharing of the multiplier array, so an upper
  bound at the per-MAC figure): ``fp8_mac_area_fraction`` = 0.228 of a PE's area and
  ``fp8_mac_energy_fraction`` = 0.330 of its energy per MAC.  The chain of public figures:
  Horowitz (ISSCC 2014, 45 nm) gives an 8-bit integer multiplier and adder 282 + 36 um^2 and
  0.2 + 0.03 pJ against a 16-bit float multiplier and adder 1,640 + 1,360 um^2 and 1.1 + 0.4
  pJ, so an INT8 MAC is 0.106 of a 16-bit float MAC in area and 0.153 in energy; van Baalen
  et al. ("FP8 versus INT8 for efficient deep learning inference", arXiv 2303.17951, 2023)
  find FP8 MACs 50-180 % costlier than INT8 ones in dedicated hardware; the middle of that
  range, 2.15x, gives 0.228 and 0.330 (the range's ends: 0.159-0.297 and 0.230-0.429; set the
  fields to study them).  The bf16 PE is taken as that 16-bit float MAC; bf16's 8-bit
  significand makes its multiplier smaller than FP16's, so per bf16 PE the fractions are, if
  anything, low.  Power stays a full-utilisation bound: the tensor unit runs one format at a
  time, so it draws the larger of its bf16 MACs' and its FP8 MACs' power (with these figures
  2 x 0.330 < 1: the bf16 mode).
* FP4 (``fp4_macs``: FP4 multiply-adds each PE does per cycle; 4 on B200, whose dense FP4
  peak is four times its BF16 one, 9 vs 2.25 PFLOP/s).  No public figure gives an FP4 MAC's
  area against a bf16 or FP8 one, so each FP4 MAC is priced at an upper bound built from the
  figures above: ``fp4_mac_area_fraction`` = 0.228 + 1/16 = 0.290 of a PE and
  ``fp4_mac_energy_fraction`` = 0.330 + 1/16 = 0.392 of its energy.  The product: every E2M1
  value (0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives; OCP Microscaling Formats
  specification v1.0, 2023) is an E4M3 value, so an FP8 MAC computes every FP4 product
  exactly and a separate FP4 datapath never needs to cost more.  The block scale: NVFP4
  scales each block of 16 values by an unsigned E4M3 factor, under one FP32 scale per
  tensor (Transformer Engine's ``NVFP4BlockScaling`` recipe; Intel Neural Compressor's NVFP4
  format table), one multiply of the block's FP32 partial sum per 16 products, priced at one
  16-bit float MAC (Horowitz's) each: its 24 x 4-bit significand product (96 partial-product
  bits) is smaller than FP16's 11 x 11 (121).  The other end: DHFP-PE (Kumar et al., arXiv
  2604.04507, 2026) runs two E2M1 MACs on one FP8 MAC's bit-partitioned 4 x 4 multiplier,
  so an FP4 MAC that shares the FP8 datapath costs close to nothing more; set the fields to 0
  to study that end.  Power as for FP8: the largest of the formats' draws at full use.

Power is evaluated at full utilisation (a TDP-style bound).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from .. import phaze_area as pa
from .efficiency import DESIGN_FIELDS, GiB, KiB, MiB

#: Area of one FP8 MAC datapath against a bf16 PE (the module docstring's chain of figures:
#: Horowitz ISSCC 2014's INT8 / 16-bit float MAC areas, 318 / 3,000 um^2, times the middle of
#: van Baalen et al. 2023's 1.5-2.8x FP8-over-INT8 cost).
FP8_MAC_AREA_FRACTION = 2.15 * (282.0 + 36.0) / (1640.0 + 1360.0)
#: Energy of one FP8 multiply-add against a bf16 one (the same chain: 0.23 / 1.5 pJ, times 2.15).
FP8_MAC_ENERGY_FRACTION = 2.15 * (0.2 + 0.03) / (1.1 + 0.4)
#: NVFP4's block: one UE4M3 scale per 16 values (Transformer Engine's NVFP4BlockScaling; Intel
#: Neural Compressor's NVFP4 table).
NVFP4_BLOCK = 16
#: Area of one FP4 MAC datapath against a bf16 PE, an upper bound (the module docstring): an
#: FP8 MAC (E2M1 values are E4M3 values) plus one 16-bit float MAC per NVFP4 block of 16 for
#: the block's scale.
FP4_MAC_AREA_FRACTION = FP8_MAC_AREA_FRACTION + 1.0 / NVFP4_BLOCK
#: Energy of one FP4 multiply-add against a bf16 one, the same upper bound.
FP4_MAC_ENERGY_FRACTION = FP8_MAC_ENERGY_FRACTION + 1.0 / NVFP4_BLOCK

#: PHAZE's clock (``Estimator/architecture.py``: ``frequency = 1.05 GHz``).
PHAZE_CLOCK_HZ = 1.05e9
#: PHAZE's global-buffer bandwidth for a multi-core chip, 2-byte words per cycle
#: (msr-fiddle/phaze ``Estimator/utils/estimator_wrapper.py``: ``max_glb_bw = 4096``).
PHAZE_GLB_WORDS_PER_CYCLE = 4096


@dataclass(frozen=True)
class AreaPowerModel:
    """First-order area (mm^2) and power (W) of a design; constants documented in the module."""

    pe_area_mm2: float = 7.5e-4
    pe_energy_j: float = 0.5e-12
    sram_area_mm2_per_mib: float = 0.45
    sram_power_w_per_mib: float = 0.1
    lane_area_mm2: float = 2.0e-3
    lane_energy_j: float = 1.5e-12
    hbm_area_mm2_per_gbps: float = 0.0375
    hbm_energy_j_per_bit: float = 4.0e-12
    hbm_stack_area_mm2_per_gib: float = 110.0 / 16.0
    link_area_mm2_per_gbps: float = 0.05
    link_energy_j_per_bit: float = 5.0e-12
    fixed_area_mm2: float = 60.0
    fixed_power_w: float = 30.0
    core_area_mm2: float = 6.05294e-3
    core_energy_j: float = 6.05294e-3 / 7.5e-4 * 0.5e-12
    fp8_mac_area_fraction: float = FP8_MAC_AREA_FRACTION
    fp8_mac_energy_fraction: float = FP8_MAC_ENERGY_FRACTION
    fp4_mac_area_fraction: float = FP4_MAC_AREA_FRACTION
    fp4_mac_energy_fraction: float = FP4_MAC_ENERGY_FRACTION
    name = "cosearch"

    def __post_init__(self) -> None:
        from .._validate import nonneg_float
        for k, v in asdict(self).items():
            f = nonneg_float(f"AreaPowerModel.{k}", v)
            if k.endswith("_fraction") and f > 1.0:
                raise ValueError(f"AreaPowerModel.{k}={v!r}: an FP8 or FP4 MAC added to a bf16 MAC costs a "
                                 "fraction of the bf16 MAC's area or energy, at most 1 (a typo or a unit slip?)")

    @staticmethod
    def _cols(d: np.ndarray) -> dict[str, np.ndarray]:
        """The design array's columns by name (the optional last ones 0 where a row lacks them)."""
        d = np.atleast_2d(np.asarray(d, dtype=np.float64))
        return {f: d[:, i] if i < d.shape[1] else np.zeros(len(d)) for i, f in enumerate(DESIGN_FIELDS)}

    def pe_area_factor(self, designs: np.ndarray) -> np.ndarray:
        """Each design's PE area in bf16 PEs: its bf16 MAC, plus ``fp8_macs`` FP8 MACs at
        :attr:`fp8_mac_area_fraction` each and ``fp4_macs`` FP4 MACs at
        :attr:`fp4_mac_area_fraction` each (exactly 1 for a bf16-only tensor unit)."""
        c = self._cols(designs)
        return 1.0 + c["fp8_macs"] * self.fp8_mac_area_fraction + c["fp4_macs"] * self.fp4_mac_area_fraction

    def pe_energy_factor(self, designs: np.ndarray) -> np.ndarray:
        """Each PE's energy per cycle at full use in bf16 MACs, in its costliest format: its bf16
        MAC, its ``fp8_macs`` FP8 MACs at :attr:`fp8_mac_energy_fraction` each, or its
        ``fp4_macs`` FP4 MACs at :attr:`fp4_mac_energy_fraction` each (the unit runs one format
        at a time)."""
        c = self._cols(designs)
        return np.maximum(np.maximum(1.0, c["fp8_macs"] * self.fp8_mac_energy_fraction),
                          c["fp4_macs"] * self.fp4_mac_energy_fraction)

    def area_mm2(self, designs: np.ndarray) -> np.ndarray:
        """Package area: the logic die plus the HBM stacks' footprint (mm^2)."""
        c = self._cols(designs)
        return self.die_area_mm2(designs) + c["hbm_bytes"] / GiB * self.hbm_stack_area_mm2_per_gib

    def die_components_mm2(self, designs: np.ndarray) -> dict[str, np.ndarray]:
        """The logic die's area by component (mm^2): PE arrays, SRAM (the cores' L1 and the
        global buffer), vector lanes, each core's fixed logic, HBM PHYs, SerDes, uncore."""
        c = self._cols(designs)
        pes = c["tensor_cores"] * c["systolic_rows"] * c["systolic_cols"]
        sram_mib = (c["tensor_cores"] * c["l1_bytes"] + c["l2_bytes"]) / MiB
        lanes = c["vector_units"] * c["vector_width"]
        return {"PE arrays": pes * self.pe_area_mm2 * self.pe_area_factor(designs),
                "SRAM": sram_mib * self.sram_area_mm2_per_mib,
                "vector lanes": lanes * self.lane_area_mm2,
                "core logic": (c["tensor_cores"] + c["vector_units"]) * self.core_area_mm2,
                "HBM PHY": c["hbm_bandwidth_Bps"] / 1e9 * self.hbm_area_mm2_per_gbps,
                "SerDes": c["link_bandwidth_Bps"] / 1e9 * self.link_area_mm2_per_gbps,
                "uncore": np.full(len(pes), self.fixed_area_mm2)}

    def package_components_mm2(self, designs: np.ndarray) -> dict[str, np.ndarray]:
        """What :meth:`area_mm2` counts, by component: the die's, then the HBM stacks."""
        c = self._cols(designs)
        return {**self.die_components_mm2(designs),
                "HBM stacks": c["hbm_bytes"] / GiB * self.hbm_stack_area_mm2_per_gib}

    def die_area_mm2(self, designs: np.ndarray) -> np.ndarray:
        """Logic die area (mm^2): the sum of :meth:`die_components_mm2`."""
        parts = iter(self.die_components_mm2(designs).values())
        total = next(parts)
        for x in parts:          # left to right, as one expression would add them
            total = total + x
        return total

    def power_w(self, designs: np.ndarray) -> np.ndarray:
        c = self._cols(designs)
        pes = c["tensor_cores"] * c["systolic_rows"] * c["systolic_cols"]
        sram_mib = (c["tensor_cores"] * c["l1_bytes"] + c["l2_bytes"]) / MiB
        lanes = c["vector_units"] * c["vector_width"]
        return (pes * c["clock_hz"] * self.pe_energy_j * self.pe_energy_factor(designs)
                + sram_mib * self.sram_power_w_per_mib
                + lanes * c["clock_hz"] * self.lane_energy_j
                + c["hbm_bandwidth_Bps"] * 8 * self.hbm_energy_j_per_bit
                + c["link_bandwidth_Bps"] * 8 * self.link_energy_j_per_bit
                + (c["tensor_cores"] + c["vector_units"]) * c["clock_hz"] * self.core_energy_j
                + self.fixed_power_w)


@dataclass(frozen=True)
class PhazeAreaModel:
    """PHAZE's area model (:mod:`cosearch.phaze_area`): die area from PHAZE's own Accelergy
    figures, power from cosearch's :class:`AreaPowerModel` (``power``).

    Drop-in for :class:`AreaPowerModel` wherever a search space, a
    baseline or a design report takes one.  Each tensor core's buffer is the design's
    ``l1_bytes``; each vector core's is PHAZE's rule, ``max(1 KiB, vector_width / 64 KiB)``.
    """

    power: AreaPowerModel = field(default_factory=AreaPowerModel)
    name = "phaze"

    def __post_init__(self) -> None:
        if not isinstance(self.power, AreaPowerModel):
            raise ValueError(f"PhazeAreaModel.power must be an AreaPowerModel, got {type(self.power).__name__}")

    def die_components_mm2(self, designs: np.ndarray) -> dict[str, np.ndarray]:
        """The die's area by component (mm^2): tensor cores (PEs and per-core buffers),
        vector cores, global buffer."""
        c = AreaPowerModel._cols(designs)
        # PHAZE's PEs are bf16; FP8 / FP4 MACs beside them (0 in PHAZE's space) at the power model's fractions
        tc = c["tensor_cores"] * (pa.PHAZE_CORE_UM2 + pa.PHAZE_PE_UM2 * c["systolic_rows"] * c["systolic_cols"]
                                  * self.power.pe_area_factor(designs) + pa.buffer_um2(c["l1_bytes"]))
        vc_buffer = np.maximum(1.0, c["vector_width"] / 64.0) * KiB
        vc = c["vector_units"] * (pa.PHAZE_CORE_UM2 + pa.PHAZE_LANE_UM2 * c["vector_width"] + pa.buffer_um2(vc_buffer))
        return {"tensor cores": tc * 1e-6, "vector cores": vc * 1e-6, "global buffer": pa.glb_um2(c["l2_bytes"]) * 1e-6}

    def die_area_mm2(self, designs: np.ndarray) -> np.ndarray:
        """Die area (mm^2), summed as PHAZE sums it: tensor cores, vector cores, global buffer."""
        p = self.die_components_mm2(designs)
        return p["tensor cores"] + p["vector cores"] + p["global buffer"]

    def package_components_mm2(self, designs: np.ndarray) -> dict[str, np.ndarray]:
        """What :meth:`area_mm2` counts, by component: the die's (PHAZE counts no HBM)."""
        return self.die_components_mm2(designs)

    def area_mm2(self, designs: np.ndarray) -> np.ndarray:
        """PHAZE's area (mm^2): the die alone."""
        return self.die_area_mm2(designs)

    def power_w(self, designs: np.ndarray) -> np.ndarray:
        """Power (W) from cosearch's model; PHAZE constrains area only."""
        return self.power.power_w(designs)



def phaze_l1_bytes(rows: float, cols: float) -> float:
    """PHAZE's per-core buffer: ``2**(log2(width) + log2(depth) - 6)`` KiB, at least 1 KiB
    (msr-fiddle/phaze, ``Estimator/utils/estimator_wrapper.py``, ``L2_Buffer``) — 1/64 KiB per
    PE, so 256 KiB for a 128 x 128 array."""
    return max(1.0, rows * cols / 64.0) * KiB




def phaze_glb_words(cores: float, rows: float, cols: float) -> float:
    """PHAZE's global-buffer bandwidth in words per cycle (``create_core_config_for_estimation``):
    :data:`PHAZE_GLB_WORDS_PER_CYCLE` for a multi-core chip; a single core gets
    ``4096 * max(width, depth) / 256``, held to 4-4096."""
    if cores > 1:
        return float(PHAZE_GLB_WORDS_PER_CYCLE)
    return float(min(max(PHAZE_GLB_WORDS_PER_CYCLE * max(rows, cols) / 256.0, 4.0), PHAZE_GLB_WORDS_PER_CYCLE))


