"""Accelerator chips: :class:`Accelerator` and the chip presets.

An :class:`Accelerator` is one chip: ``tensor_cores`` systolic arrays of
``systolic_rows x systolic_cols`` multiply-accumulate PEs, ``vector_units``
SIMD units of ``vector_width`` lanes, per-core L1 and shared L2 SRAM, HBM
capacity and bandwidth, and chip-to-chip link bandwidth.

Presets (published specs; the "cores" of a GPU are its tensor cores, modelled
as small systolic arrays with the same MACs/clock):

* ``TPUv4`` — 2 TensorCores x 4 MXUs of 128x128 at 1050 MHz (275 TFLOP/s bf16),
  2 x 8x128-lane VPUs, 32 MiB VMEM (4 MiB per MXU), 128 MiB CMEM, 32 GiB HBM2 at
  1200 GB/s, 6 ICI links x 50 GB/s (Jouppi et al., ISCA 2023).
* ``A100`` (SXM4 40GB) — 432 tensor cores x 256 MAC/clk (16x16) at 1410 MHz
  (312 TFLOP/s), 108 SMs x 64 FP32 lanes, 192 KiB L1 per SM (48 KiB per tensor
  core), 40 MiB L2, 40 GiB HBM2 at 1555 GB/s, NVLink 3 at 300 GB/s per direction
  (600 GB/s is the two-way total; NVIDIA A100 whitepaper).
* ``A100-80GB`` (SXM4 80GB) — as ``A100`` with 80 GiB HBM2e at 2039 GB/s
  (NVIDIA A100 datasheet).
* ``H100`` (SXM5 80GB) — 528 tensor cores x 512 MAC/clk (16x32) at 1830 MHz
  (989 TFLOP/s dense bf16), 132 SMs x 128 FP32 lanes, 256 KiB L1 per SM (64 KiB
  per tensor core), 50 MiB L2, 80 GiB HBM3 at 3350 GB/s, NVLink 4 at 450 GB/s per
  direction (NVIDIA H100 whitepaper).
* ``H100-500W`` — an H100 held at 500 W with 96 GB of HBM2e at 2.4 TB/s (Meta's Grand
  Teton parts, torchtitan's performance page): the H100's compute at its 500 W sustained
  clock and FP8 rate, both from FBGEMM's "H100 500W" GEMMs.

Link bandwidths are per chip and per direction.  Each preset carries a
:class:`KernelEfficiency` — what its kernels achieve of the roofline — with the
source of every constant in :data:`EFFICIENCY_SOURCES`.

"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import MISSING, asdict, dataclass, field, replace
from typing import Any

import numpy as np

from .._validate import (
    MAX_HZ,
    MIN_HZ,
    bandwidth,
    in_range,
    nonneg_float,
    positive_float,
    positive_int,
)
from .area import (
    PHAZE_CLOCK_HZ,
    PHAZE_GLB_WORDS_PER_CYCLE,
    AreaPowerModel,
    PhazeAreaModel,
    phaze_l1_bytes,
)
from .efficiency import (
    _A100_EFF,
    _BLACKWELL_EFF,
    _GB200_EFF,
    _GB300_EFF,
    _H100_EFF,
    _TPU5_EFF,
    DESIGN_FIELDS,
    EFFICIENCY_SOURCES,
    FP4_RATE_BLACKWELL,
    FP8_ATTENTION_SPEEDS,
    FP8_RATE_H100_500W,
    IDEAL,
    MAX_FORMAT_MACS,
    OPTIONAL_DESIGN_FIELDS,
    SUSTAINED_CLOCK_H100_500W,
    TPU7X_TENSOR,
    GiB,
    KernelEfficiency,
    KiB,
    MiB,
)

#: Most tensor cores, PEs on a systolic side, vector units or lanes a chip may have: 2^24, beyond
#: any chip built (a Cerebras WSE-3 wafer has 900,000 cores); more is a typo.
MAX_UNITS = 1 << 24


@dataclass(frozen=True)
class Accelerator:
    """One accelerator chip.  All sizes in bytes, bandwidths in bytes/s, clock in Hz."""

    name: str
    tensor_cores: int
    systolic_rows: int
    systolic_cols: int
    vector_units: int
    vector_width: int
    clock_hz: float
    l1_bytes: float
    l2_bytes: float
    hbm_bytes: float
    hbm_bandwidth_Bps: float
    link_bandwidth_Bps: float
    efficiency: KernelEfficiency = field(default=IDEAL, compare=True)
    #: per-direction bandwidth to host memory (activation offload); PCIe Gen4 x16 by default
    host_link_Bps: float = 32e9
    #: operand bandwidth from the global buffer (L2) to the tensor cores, bytes/s; 0: not
    #: modelled (GPU presets, whose measured kernel efficiencies include it)
    glb_Bps: float = 0.0
    #: FP8 multiply-adds each PE of the tensor unit does per cycle beside its one bf16 MAC (a
    #: searched design's number-format feature; 0: a bf16-only tensor unit).  A GEMM on FP8
    #: operands runs this many times faster than in bf16, unless the kernel model gives the
    #: chip a measured rate of its own (``efficiency.fp8_rate``, the GPU presets'), which wins.
    fp8_macs: float = 0.0
    #: FP4 (E2M1, NVFP4 / MXFP4) multiply-adds each PE does per cycle (0: none), likewise: a
    #: GEMM on FP4 operands runs this many times faster than in bf16 unless the kernel model has
    #: the chip's measured FP4 rate (``efficiency.fp4_rate``, Blackwell's).
    fp4_macs: float = 0.0
    #: Whether the chip's FP8 GEMMs take their operands in every layout (not only "TN"): then
    #: Transformer Engine keeps a per-tensor-scaled FP8 tensor (delayed or current scaling) as one
    #: copy serving both the forward's row-wise and the weight gradient's column-wise use, where
    #: on a TN-only chip (Hopper) each cast also writes the transpose and a cached weight keeps
    #: both (``transformer_engine/pytorch/csrc/quantizer.cpp``, ``Float8Quantizer`` and
    #: ``Float8CurrentScalingQuantizer::create_tensor``: ``with_transpose = columnwise_usage &&
    #: !is_non_tn_fp8_gemm_supported``; ``utils.is_non_tn_fp8_gemm_supported``: compute
    #: capability 10.x or >= 13, the data-centre Blackwell parts; NVIDIA/TransformerEngine @
    #: d0067d0, 2026-08).  Block-scaled tensors (MXFP8, NVFP4, 128-blockwise) keep both copies
    #: everywhere: their scales run along K, which differs between the two uses.  True on the
    #: B200, GB200, B300 and GB300 presets; False for a searched design.
    fp8_any_layout: bool = False
    #: The JAX devices the chip exposes (a TPU7x chip's two TensorCores are two devices: Google
    #: Cloud's TPU7x documentation; AI-Hypercomputer/accelerator-microbenchmarks, docs/BENCHMARKS.md
    #: section 1.2, "per-chip = 2 x per-device").  A MaxText config counts devices (its
    #: ``per_device_batch_size`` and ``ici_*`` degrees): :func:`cosearch.runs.read_maxtext` turns
    #: them into chips.  1 for every other preset.
    devices_per_chip: int = 1

    def __post_init__(self) -> None:
        d = self.devices_per_chip
        if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or not 1 <= d <= 8:
            raise ValueError(f"Accelerator.devices_per_chip must be a whole number from 1 to 8 (the JAX devices a chip "
                             f"exposes), got {d!r}")
        object.__setattr__(self, "devices_per_chip", int(d))
        if not isinstance(self.fp8_any_layout, (bool, np.bool_)):
            raise ValueError(f"Accelerator.fp8_any_layout must be True or False (whether FP8 GEMMs take every "
                             f"operand layout), got {self.fp8_any_layout!r}")
        object.__setattr__(self, "fp8_any_layout", bool(self.fp8_any_layout))
        if isinstance(self.glb_Bps, bool) or not (isinstance(self.glb_Bps, (int, float, np.floating))
                                                  and math.isfinite(self.glb_Bps) and self.glb_Bps >= 0):
            raise ValueError(f"Accelerator.glb_Bps must be a non-negative number of bytes/s (0: not modelled), "
                             f"got {self.glb_Bps!r}")
        object.__setattr__(self, "glb_Bps", float(self.glb_Bps))
        for f, most in MAX_FORMAT_MACS.items():      # numbers only, as the other fields (a string "4" was taken)
            x = getattr(self, f)
            if isinstance(x, bool) or not isinstance(x, (int, float, np.integer, np.floating)):
                raise ValueError(f"Accelerator.{f} must be a number of MACs per PE per cycle, got {x!r}")
            macs = nonneg_float(f"Accelerator.{f}", x)
            if macs > most:
                raise ValueError(f"Accelerator.{f}={x!r} {f[:3].upper()} MACs per PE per cycle is outside the "
                                 f"plausible range 0 (none in that format) to {most:g}")
            object.__setattr__(self, f, macs)
        if isinstance(self.host_link_Bps, bool) or not isinstance(self.host_link_Bps, (int, float, np.floating)):
            raise ValueError(f"Accelerator.host_link_Bps must be a positive number, got {self.host_link_Bps!r}")
        bandwidth("Accelerator.host_link_Bps", self.host_link_Bps)
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"Accelerator.name must be a non-empty string, got {self.name!r}")
        if not isinstance(self.efficiency, KernelEfficiency):
            raise ValueError(f"Accelerator.efficiency must be a KernelEfficiency, got {self.efficiency!r}")
        for f in ("tensor_cores", "systolic_rows", "systolic_cols", "vector_units", "vector_width"):
            x = getattr(self, f)
            if isinstance(x, bool) or not isinstance(x, (int, float, np.integer, np.floating)):
                raise ValueError(f"Accelerator.{f} must be a positive integer, got {x!r}")
            object.__setattr__(self, f, positive_int(f"Accelerator.{f}", x, maximum=MAX_UNITS))
        for f in ("clock_hz", "l1_bytes", "l2_bytes", "hbm_bytes", "hbm_bandwidth_Bps",
                  "link_bandwidth_Bps"):
            x = getattr(self, f)
            if isinstance(x, bool) or not isinstance(x, (int, float, np.integer, np.floating)):
                raise ValueError(f"Accelerator.{f} must be a positive finite number, got {x!r}")
            object.__setattr__(self, f, positive_float(f"Accelerator.{f}", x))
        in_range("Accelerator.clock_hz", self.clock_hz, MIN_HZ, MAX_HZ, "Hz")
        for f in ("hbm_bandwidth_Bps", "link_bandwidth_Bps"):
            bandwidth(f"Accelerator.{f}", getattr(self, f))

    @property
    def peak_flops(self) -> float:
        """Peak tensor-unit FLOP/s (2 FLOPs per MAC)."""
        return 2.0 * self.tensor_cores * self.systolic_rows * self.systolic_cols * self.clock_hz

    @property
    def supports_fp8(self) -> bool:
        """Whether the chip has FP8 tensor cores (its kernel model has an FP8 rate, or its
        tensor unit FP8 MACs)."""
        return self.efficiency.fp8_rate > 0.0 or self.fp8_macs > 0.0

    @property
    def supports_fp4(self) -> bool:
        """Whether the chip has FP4 tensor cores (its kernel model has an NVFP4 rate, or its
        tensor unit FP4 MACs)."""
        return self.efficiency.fp4_rate > 0.0 or self.fp4_macs > 0.0

    @property
    def peak_vector_flops(self) -> float:
        return float(self.vector_units * self.vector_width * self.clock_hz)

    def as_array(self) -> np.ndarray:
        """The design as one row in :data:`DESIGN_FIELDS` order."""
        return np.array([float(getattr(self, f)) for f in DESIGN_FIELDS], dtype=np.float64)

    @classmethod
    def from_array(cls, row: Sequence[float], name: str = "design",
                   efficiency: KernelEfficiency = IDEAL) -> Accelerator:
        """The design of one :data:`DESIGN_FIELDS` row (a row without the last fields,
        ``glb_Bps``, ``fp8_macs`` and ``fp4_macs``, as written before they existed, reads them as 0)."""
        vals = [float(x) for x in row]
        n = len(DESIGN_FIELDS) - OPTIONAL_DESIGN_FIELDS      # the positional fields
        if not n <= len(vals) <= len(DESIGN_FIELDS):
            raise ValueError(f"a design row has {len(DESIGN_FIELDS)} fields ({', '.join(DESIGN_FIELDS)}), "
                             f"got {len(vals)}")
        vals += [0.0] * (len(DESIGN_FIELDS) - len(vals))
        return cls(name, *vals[:n], efficiency=efficiency, glb_Bps=vals[n], fp8_macs=vals[n + 1],
                   fp4_macs=vals[n + 2])

    def with_(self, **changes: Any) -> Accelerator:
        return replace(self, **changes)

    def _unbounded(self, **changes: float) -> Accelerator:
        """A copy with fields set outside the plausible ranges, unvalidated: for pricing one
        part of the roofline alone (an infinite bandwidth or clock), never for a user's chip."""
        import copy
        c = copy.copy(self)
        for k, x in changes.items():
            object.__setattr__(c, k, float(x))
        return c

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Accelerator:
        """An accelerator from :meth:`to_dict`'s fields (a chip JSON file); an unknown or missing
        field is refused by name, and every value is validated as the constructor does."""
        from dataclasses import fields
        if not isinstance(d, dict):
            raise ValueError(f"a chip description must be an object, got {type(d).__name__}")
        d = dict(d)
        if "efficiency" not in d:
            raise ValueError("chip: no 'efficiency' given. Choose one: \"efficiency\": \"ideal\" (the roofline "
                             "with no kernel losses: datasheet numbers priced this way run far faster than the "
                             "real chip), the name of a preset whose measured kernels it shares (e.g. \"H100\"), "
                             "or an object of KernelEfficiency fields (cosearch calibrate writes one)")
        eff = d.pop("efficiency")
        if isinstance(eff, str):
            if eff.lower() == "ideal":
                import warnings
                warnings.warn(f"chip {d.get('name', '?')!r}: \"efficiency\": \"ideal\" prices every kernel at the "
                              "roofline, with no kernel losses", stacklevel=2)
                eff_obj = IDEAL
            else:
                try:
                    eff_obj = preset(eff).efficiency
                except ValueError as exc:
                    raise ValueError(f"chip: 'efficiency' {eff!r} is neither \"ideal\" nor a preset ({exc})") from None
            eff = None
        else:
            eff_obj = None
        known = {f.name for f in fields(cls)} - {"efficiency"}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"chip: unknown field(s) {unknown}; known: {sorted(known | {'efficiency'})}")
        missing = sorted(f.name for f in fields(cls) if f.name in known and f.name not in d
                         and f.default is MISSING)
        if missing:
            raise ValueError(f"chip: missing field(s) {missing}")
        if eff_obj is None:
            if not isinstance(eff, dict):
                raise ValueError("chip: 'efficiency' must be \"ideal\", a preset's name or an object of "
                                 "KernelEfficiency fields")
            ekeys = {f.name for f in fields(KernelEfficiency)}
            bad = sorted(set(eff) - ekeys)
            if bad:
                raise ValueError(f"chip: unknown efficiency field(s) {bad}; known: {sorted(ekeys)}")
            text = {f.name for f in fields(KernelEfficiency) if f.type in ("str", str)}
            for k, x in eff.items():
                if k in text:
                    if not isinstance(x, str):
                        raise ValueError(f"chip: efficiency field {k!r} must be text, got {x!r}")
                elif isinstance(x, (str, list, dict, bool)) or x is None:
                    raise ValueError(f"chip: efficiency field {k!r} must be a number, got {x!r}")
            eff_obj = KernelEfficiency(**eff)
        for k, x in d.items():
            if k == "fp8_any_layout":
                if not isinstance(x, bool):
                    raise ValueError(f"chip: field 'fp8_any_layout' must be true or false, got {x!r}")
            elif k != "name" and (x is None or isinstance(x, (str, list, dict, bool))):
                raise ValueError(f"chip: field {k!r} must be a number, got {x!r}")
        return cls(**d, efficiency=eff_obj)

    @classmethod
    def from_json(cls, path: str | os.PathLike) -> Accelerator:
        """A chip from a JSON file of :meth:`to_dict`'s fields."""
        from .._json import read_json_file
        return cls.from_dict(read_json_file(path, "chip"))

    def area_mm2(self, model: AreaPowerModel | PhazeAreaModel | None = None) -> float:
        return float((model or AreaPowerModel()).area_mm2(self.as_array()[None, :])[0])

    def power_w(self, model: AreaPowerModel | PhazeAreaModel | None = None) -> float:
        return float((model or AreaPowerModel()).power_w(self.as_array()[None, :])[0])



TPUv4 = Accelerator("TPUv4", 8, 128, 128, 2, 1024, 1.05e9, 4 * MiB, 128 * MiB, 32 * GiB,
                    1.2e12, 3.0e11, glb_Bps=PHAZE_GLB_WORDS_PER_CYCLE * 2.0 * PHAZE_CLOCK_HZ)
A100 = Accelerator("A100", 432, 16, 16, 108, 64, 1.41e9, 48 * KiB, 40 * MiB, 40 * GiB,
                   1.555e12, 3.0e11, _A100_EFF)
A100_80GB = A100.with_(name="A100-80GB", hbm_bytes=80 * GiB, hbm_bandwidth_Bps=2.039e12)
# host links (activation offload), per direction: PCIe Gen4 x16 32 GB/s (A100), Gen5 x16 64 GB/s
# (H100, H200, B200 in HGX/DGX); a GB200/GB300 superchip's NVLink-C2C, 900 GB/s bidirectional,
# shared by its two GPUs: 225 GB/s per GPU per direction (NVIDIA GB200 NVL72 specifications)
H100 = Accelerator("H100", 528, 16, 32, 132, 128, 1.83e9, 64 * KiB, 50 * MiB, 80 * GiB,
                   3.35e12, 4.5e11, _H100_EFF, host_link_Bps=64e9)

# Datasheet chips of 2023-2025.  The tensor rate is cores x rows x cols x clock, with the
# "clock" chosen so that the product is the datasheet's dense BF16 peak (the array shape is a
# modelling choice for GPUs; only the peak and the SM count enter the GEMM model).
#: H200 SXM: H100's compute, 141 GB HBM3e at 4.8 TB/s (NVIDIA H200 Tensor Core GPU datasheet).
H200 = H100.with_(name="H200", hbm_bytes=141e9, hbm_bandwidth_Bps=4.8e12)
#: H100 at 500 W with 96 GB of HBM2e (Meta's Grand Teton H100s, on which torchtitan's performance
#: page was measured: "96GB HBM2e with 2.4 TB/sec peak memory bandwidth", "the default 500W power
#: limit", pytorch/torchtitan docs/performance.md): the H100's compute and kernels at the 500 W
#: sustained clock and FP8 rate (SUSTAINED_CLOCK_H100_500W, FP8_RATE_H100_500W, from FBGEMM's
#: "H100 500W" GEMMs); attention at the same clock (no attention kernel was measured at 500 W).
H100_500W = H100.with_(name="H100-500W", hbm_bytes=96e9, hbm_bandwidth_Bps=2.4e12,
                       efficiency=replace(_H100_EFF, sustained_clock=SUSTAINED_CLOCK_H100_500W,
                                          attention_clock=0.0, attention_clock_fa2=0.0,
                                          fp8_rate=FP8_RATE_H100_500W,
                                          source=_H100_EFF.source + "  " + EFFICIENCY_SOURCES["H100-500W"]))
#: B200 (HGX/DGX B200): 2.25 PFLOP/s dense BF16, 4.5 dense FP8, 180 GB HBM3e at 8 TB/s, NVLink 5 at
#: 1.8 TB/s bidirectional (900 GB/s per direction), 148 SMs (NVIDIA DGX B200 datasheet: 72 PFLOP/s
#: FP8 training and 1,440 GB for 8 GPUs; HGX B200 specifications).  L2 assumed 2 x 50 MB (two dies).
B200 = Accelerator("B200", 592, 16, 64, 148, 128, 2.25e15 / (2 * 592 * 16 * 64), 228 * KiB, 100 * MiB, 180e9,
                   8.0e12, 9.0e11, _BLACKWELL_EFF, host_link_Bps=64e9, fp8_any_layout=True)
#: GB200 (one Blackwell GPU of a GB200 NVL72): 2.5 PFLOP/s dense BF16, 5 dense FP8, 186 GB HBM3e
#: at 8 TB/s (NVIDIA GB200 NVL72 specifications: 360 PFLOP/s sparse BF16 and 13.4 TB HBM3e per 72
#: GPUs), on 152 SMs (cudaGetDeviceProperties on a GB200: "Device: NVIDIA GB200, SMs: 152", Triton's
#: Gluon tutorial 12-cluster-launch-control.py; B200 and GB300 have 148), so a 2008 MHz datasheet
#: clock; its kernels at the clocks its GEMMs hold at 1200 W (SUSTAINED_CLOCK_GB200).
GB200 = B200.with_(name="GB200", tensor_cores=4 * 152, vector_units=152, clock_hz=2.5e15 / (2 * 608 * 16 * 64),
                   hbm_bytes=186e9, host_link_Bps=225e9, efficiency=_GB200_EFF)
#: GB300 (Blackwell Ultra in a GB300 NVL72): the GB200's dense BF16/FP8 rates, on 148 SMs (as B300:
#: 2062 MHz for 2.5 PFLOP/s), 288 GB HBM3e at 8 TB/s, dense NVFP4 15 PFLOP/s, 1.5x the GB200's 10
#: (NVIDIA GB300 NVL72 specifications: 1,080 PFLOP/s FP4 dense per 72), so 1.5x Blackwell's
#: measured NVFP4 rate; its kernels at the clocks its GEMMs hold at 1400 W (SUSTAINED_CLOCK_GB300).
GB300 = B200.with_(name="GB300", clock_hz=2.5e15 / (2 * 592 * 16 * 64), hbm_bytes=288e9, host_link_Bps=225e9,
                   efficiency=_GB300_EFF)
#: B300 (HGX/DGX B300, Blackwell Ultra), from its specifications alone: the B200's dense BF16 and
#: FP8 rates (NVIDIA DGX B300: 72 PFLOP/s FP8 and 36 PFLOP/s BF16 per 8 GPUs, with sparsity, as the
#: DGX B200's), 108 PFLOP/s dense FP4 per 8 GPUs, 1.5x the B200's 72 (so 1.5x Blackwell's measured
#: NVFP4 rate, as GB300), 288 GB HBM3e a GPU (2.3 TB per 8) at 8 TB/s, NVLink 5 at 1.8 TB/s
#: bidirectional, PCIe Gen6 to the host (128 GB/s per direction).
B300 = B200.with_(name="B300", hbm_bytes=288e9, host_link_Bps=128e9,
                  efficiency=replace(_BLACKWELL_EFF, fp4_rate=1.5 * FP4_RATE_BLACKWELL,
                                     **FP8_ATTENTION_SPEEDS["GB300"]))
#: TPU v5e: 197 TFLOP/s BF16 from 4 MXUs of 128 x 128 at 1.5 GHz, 16 GB HBM2e at 819 GB/s, ICI
#: 1,600 Gb/s per chip over 4 links (50 GB/s each) (Google Cloud TPU v5e documentation).  Google's
#: HBM "GB" are binary, as NVIDIA's 40 and 80 GB are (the A100/H100 presets): a v6e, "32 GB",
#: hands its runtime 33,550,237,696 bytes (31.25 GiB; vllm-project/vllm #16211's usage log), more
#: than 32e9; so 16 GiB here, and 95 GiB for the v5p.
TPUv5e = Accelerator("TPUv5e", 4, 128, 128, 4, 1024, 1.5e9, 4 * MiB, 48 * MiB, 16 * GiB, 8.19e11, 5.0e10, _TPU5_EFF)
#: TPU v5p: 459 TFLOP/s BF16 from 2 TensorCores x 4 MXUs of 128 x 128 at 1.75 GHz, 95 GB HBM2e at
#: 2,765 GB/s, ICI 4,800 Gb/s per chip over 6 links (100 GB/s each) (Google Cloud TPU v5p documentation).
TPUv5p = Accelerator("TPUv5p", 8, 128, 128, 8, 1024, 1.75e9, 4 * MiB, 96 * MiB, 95 * GiB, 2.765e12, 1.0e11,
                     _TPU5_EFF)
#: TPU v6e (Trillium), from Google Cloud's TPU v6e page alone (docs.cloud.google.com/tpu/docs/v6e):
#: one TensorCore with two 256 x 256 MXUs, 918 TFLOP/s BF16 per chip, 32 GB HBM (binary, as the
#: v5e's: the runtime gets 31.25 GiB) at 1,638 GB/s, 800 GB/s bidirectional ICI over 4 ports
#: (100 GB/s per link each way) on a 2D torus of 256 chips, PCIe Gen5 to the host (64 GB/s each
#: way for x16; the lane count is not stated).  Modelling choices, not published: the clock is
#: the one the BF16 peak sets for two 256 x 256 MXUs (3.5 GHz, an effective figure); the vector
#: unit is the page's 128 lanes x 8 sublanes; SRAM as TPUv5e's; XLA's matmul efficiency as
#: measured on TPU v5 (:data:`TPU5_TENSOR`).  No measured v6e kernel is used.
TPUv6e = Accelerator("TPUv6e", 2, 256, 256, 1, 1024, 918e12 / (2 * 2 * 256 * 256), 4 * MiB, 48 * MiB, 32 * GiB,
                     1.638e12, 1.0e11, _TPU5_EFF, host_link_Bps=64e9)
#: H800 SXM (the H100 for export markets): the H100's compute, memory and kernels with NVLink cut to
#: 400 GB/s bidirectional, 200 GB/s per direction (NVIDIA H800 Tensor Core GPU datasheet; DeepSeek-V3
#: technical report, sec. 3.2: "NVLink offers a bandwidth of 160 GB/s" achieved, IB 50 GB/s).
H800 = H100.with_(name="H800", link_bandwidth_Bps=2.0e11)
#: TPU7x (Ironwood), from Google Cloud's TPU7x page and one public GEMM sweep (no measured training
#: run of it is used): 2,307 TFLOP/s dense BF16 and 4,614 FP8 per chip, 192 GiB HBM at 7,380 GB/s,
#: 1,200 GB/s bidirectional ICI per chip on a 3D torus (6 links: 100 GB/s each per direction), 9,216
#: chips a pod, two TensorCores per chip (two JAX devices: ``devices_per_chip``).  Modelling choices, not published: each TensorCore's 4
#: MXUs taken as 256 x 256 (Trillium's, the generation before), the clock then set by the BF16 peak
#: (2.2 GHz); SRAM and vector units as TPUv5p's.  XLA's matmul efficiency measured on Ironwood
#: (:data:`TPU7X_TENSOR`; the datasheet alone, with TPU v5's, priced its GEMMs 9.5-13.2 % fast);
#: FP8 at the datasheet's 2x the BF16 rate (no FP8 kernel measurement).  Checked (not fitted)
#: against 16 measured MaxText runs on Ironwood (bench/validation/ironwood/): dense Llama 3.1
#: predicted 19 % too fast in bf16 and 29 % in FP8, MoE recipes 64-182 %.
TPU7x = Accelerator("TPU7x", 8, 256, 256, 8, 1024, 2.307e15 / (2 * 8 * 256 * 256), 4 * MiB, 96 * MiB, 192 * GiB,
                    7.38e12, 1.0e11, KernelEfficiency(TPU7X_TENSOR, TPU7X_TENSOR, fp8_rate=2.0,
                                                      source=EFFICIENCY_SOURCES["TPU7x"] + "  TPU7x FP8: the "
                                                      "datasheet's 4,614 / 2,307 TFLOP/s (Google Cloud TPU7x page)."),
                    devices_per_chip=2)
#: TPU v4 as XLA runs it (PaLM, published training runs): TPU v4's specification (the ``TPUv4``
#: preset, 2 TensorCores x 4 MXUs of 128 x 128, 32 GiB HBM2 at 1.2 TB/s) with TPU v5's measured
#: XLA matmul efficiency (:data:`TPU5_TENSOR`, XLA's bf16 matmul on a v5e): their MXUs are the same
#: 128 x 128 systolic arrays under the same compiler, and no TPU v4 kernel measurement is public.
#: ``TPUv4`` itself stays an ideal roofline, as PHAZE's experiment prices it.
TPUv4_XLA = TPUv4.with_(name="TPUv4-XLA", efficiency=_TPU5_EFF)
PRESETS: dict[str, Accelerator] = {"tpuv4": TPUv4, "tpuv4-xla": TPUv4_XLA, "h800": H800, "tpu7x": TPU7x, "a100": A100, "a100-80gb": A100_80GB, "h100": H100,
                                   "h100-500w": H100_500W, "h200": H200,
                                   "b200": B200, "b300": B300, "gb200": GB200, "gb300": GB300, "tpuv5e": TPUv5e, "tpuv5p": TPUv5p,
                                   "tpuv6e": TPUv6e}


def preset_names() -> list[str]:
    return [a.name for a in PRESETS.values()]


def preset(name: str | Accelerator) -> Accelerator:
    """Accelerator preset by name (case-insensitive; :func:`preset_names` lists them)."""
    if isinstance(name, Accelerator):
        return name
    key = str(name).lower().replace("_", "-")
    if key not in PRESETS:
        raise ValueError(f"unknown accelerator preset {name!r}; known presets: {', '.join(preset_names())}")
    return PRESETS[key]


def design_array(designs: Sequence[Accelerator] | np.ndarray) -> np.ndarray:
    """Stack accelerators (or validate an array) into a (designs, len(DESIGN_FIELDS)) array."""
    if isinstance(designs, np.ndarray):
        arr = np.ascontiguousarray(designs, dtype=np.float64)
        if arr.ndim == 1:
            arr = arr[None, :]
        n = len(DESIGN_FIELDS) - OPTIONAL_DESIGN_FIELDS
        if arr.ndim == 2 and n <= arr.shape[1] < len(DESIGN_FIELDS):
            # written before glb_Bps / fp8_macs / fp4_macs existed: not modelled / no such MACs
            arr = np.ascontiguousarray(np.hstack([arr, np.zeros((len(arr), len(DESIGN_FIELDS) - arr.shape[1]))]))
        if arr.ndim != 2 or arr.shape[1] != len(DESIGN_FIELDS):
            raise ValueError(f"design array must have shape (n, {len(DESIGN_FIELDS)}), got {arr.shape}")
        body, tail = arr[:, :n], arr[:, n:]
        if not np.all(np.isfinite(arr)) or np.any(body <= 0) or np.any(tail < 0):
            bad = np.argwhere(~np.isfinite(arr) | np.hstack([body <= 0, tail < 0]))[0]
            what = "negative" if bad[1] >= n else "non-positive"
            raise ValueError(f"design {bad[0]} has {what} {DESIGN_FIELDS[bad[1]]}={arr[tuple(bad)]}")
        for name, most in MAX_FORMAT_MACS.items():
            col = arr[:, DESIGN_FIELDS.index(name)]
            if np.any(col > most):
                i = int(np.argmax(col > most))
                raise ValueError(f"design {i} has {name}={col[i]}; at most {most:g} {name[:3].upper()} MACs per PE")
        return arr
    if isinstance(designs, Accelerator):
        designs = [designs]
    return np.stack([d.as_array() for d in designs]) if len(designs) else np.zeros((0, len(DESIGN_FIELDS)))



def phaze_reference(hbm_bytes: float = 32 * GiB, hbm_Bps: float = 1.2e12) -> Accelerator:
    """PHAZE's area reference (``max_acc_config``): 8 tensor cores of 128 x 128, 2 vector
    cores of 128 lanes, a 128 MiB global buffer, PHAZE's per-core buffers, at 1.05 GHz,
    with the run's HBM and TPUv4's 300 GB/s of chip links."""
    return Accelerator("PHAZE-reference", 8, 128, 128, 2, 128, PHAZE_CLOCK_HZ, phaze_l1_bytes(128, 128),
                       128 * MiB, hbm_bytes, hbm_Bps, 3.0e11,
                       glb_Bps=PHAZE_GLB_WORDS_PER_CYCLE * 2.0 * PHAZE_CLOCK_HZ)


