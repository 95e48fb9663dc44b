"""Accelerator architectures, clusters, the area/power model and search spaces.

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

Power is evaluated at full utilisation (a TDP-style bound).
"""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Sequence
from dataclasses import MISSING, asdict, dataclass, field, replace
from typing import Any

import numpy as np

from . import phaze_area as pa
from ._validate import MAX_HZ, MIN_HZ, bandwidth, in_range

__all__ = [
    "Accelerator", "AreaPowerModel", "PhazeAreaModel", "SearchSpace", "KernelEfficiency", "AREA_MODELS", "named_area_model",
    "TPUv4", "A100", "A100_80GB", "H100", "H100_500W", "PRESETS", "preset", "preset_names",
    "DESIGN_FIELDS", "design_array", "IDEAL", "EFFICIENCY_SOURCES",
]

KiB = 1024
MiB = 1024 ** 2
GiB = 1024 ** 3

#: Column order of the design arrays handed to the kernels.
DESIGN_FIELDS = (
    "tensor_cores", "systolic_rows", "systolic_cols", "vector_units", "vector_width",
    "clock_hz", "l1_bytes", "l2_bytes", "hbm_bytes", "hbm_bandwidth_Bps", "link_bandwidth_Bps", "glb_Bps",
)


#: Column order of :meth:`KernelEfficiency.as_array` (what the roofline kernel reads; the
#: indices are :data:`cosearch._kernels.formulas.E_TENSOR` ... ``E_K_OVERHEAD``).
EFF_FIELDS = ("tensor", "attention", "memory", "launch_s", "tile_m", "tile_n", "tile_k", "tile_slots",
              "k_overhead", "fp8_rate", "fp4_rate", "attention_overhead", "sustained_clock", "stream_k_fixup",
              "attention_overhead_bwd", "attention_head_overhead", "cast_memory", "cast_amax_Bps")


@dataclass(frozen=True)
class KernelEfficiency:
    """What a chip's kernels achieve on top of the roofline.

    ``tensor``: fraction of the modelled compute rate that GEMMs reach at their best shape
    when compute-bound; ``attention``: the same for the attention core (batched score/context
    matmuls or a fused flash-attention kernel); ``memory``: fraction of peak HBM bandwidth that
    memory-bound kernels stream at; ``launch_s``: fixed time per kernel.  An op costs
    ``max(compute / eff, bytes / (memory * HBM bandwidth)) + launch_s``.

    GEMM shape (GPUs): with ``tile_slots > 0`` a GEMM's efficiency is ``tensor`` times
    :func:`cosearch._kernels.formulas.gemm_shape_efficiency` — ``tile_m x tile_n`` output
    tiles of ``tile_k``-deep main-loop steps, ``tile_slots`` tiles at once (one per SM),
    ``k_overhead`` K-equivalents of pipeline prologue per tile — so small, skinny and
    badly-divided GEMMs run below the best-shape rate.  ``tile_slots = 0`` (the default)
    turns it off.  ``stream_k_fixup`` (K-elements; 0 = off): the kernels split the partial last
    wave's tiles along K over all SMs (stream-K, as Hopper's cuBLAS does), each SM paying this
    much for the partial-tile reduction, instead of running a mostly idle last wave.

    ``fp8_rate``: how many times faster an FP8 GEMM runs than the same GEMM in bf16 (the
    datasheet FP8/BF16 dense peak ratio times the measured FP8/BF16 kernel efficiency ratio);
    0 (the default): the chip has no FP8 tensor cores, and FP8 plans are refused.
    ``fp4_rate``: the same for NVFP4 GEMMs (0: no FP4 tensor cores).

    Attention by length and implementation: ``attention`` is the chip's best fused attention
    kernel at long sequences (FlashAttention-2 on Ampere, FlashAttention-3 / cuDNN on Hopper);
    a kernel with ``sq`` query rows reaches ``attention`` times
    :func:`cosearch._kernels.formulas.attention_length_efficiency` — each 128-row block pays
    ``attention_overhead`` key blocks of fixed work in a forward, ``attention_overhead_bwd`` in a
    backward (0: no length effect; -1, the default: the forward's).  Head dim:
    :func:`cosearch._kernels.formulas.attention_head_efficiency` — each score costs ``head_dim``
    multiply-adds per matmul and softmax work worth ``attention_head_overhead`` more, relative to
    head dim 128 (0: no head-dim effect).
    ``attention_fa2``: the long-sequence efficiency of FlashAttention-2-generation kernels
    (PyTorch SDPA's flash backend, Triton ports) on this chip, which engines that run them use
    (:attr:`cosearch.engine.Engine.attention_kernel`); 0: the same as ``attention``;
    ``attention_head_overhead_fa2`` their head-dim overhead (-1: ``attention_head_overhead``).

    Low-precision casts (FP8/NVFP4 training's cast of each GEMM input and incoming gradient,
    :meth:`cosearch.graph._Builder.fp8_cast`): ``cast_memory`` is the fraction of the datasheet
    HBM bandwidth at which the engine's cast kernels stream their logical bytes (bf16 read once,
    the row-wise and column-wise low-precision copies written); 0 (the default): ``memory``, as
    a single-pass fused kernel streams (Transformer Engine's cast-transpose; torchao's Triton
    blockwise FP8 cast kernels reach 0.79-0.87 of the H100's 3.35 TB/s at 32k-131k x 4096,
    pytorch/ao ``benchmarks/prototype/blockwise_fp8_training/README.md``, 2026-03-20; a compiled
    single-pass cast with a given scale, delayed scaling's, streams 4.15-4.24 TB/s on the H200,
    0.96-0.98 of its memory efficiency, ``cosearch/data/h200_fp8_cast_passes.csv``).
    ``cast_amax_Bps``: per-tensor current scaling computed by a separate whole-tensor amax
    reduction before each cast (``torch.compile``'s tensorwise recipe) reads the bf16 input once
    more at this rate, bytes per second (0, the default: no separate pass, the scale comes with
    the cast).  The reduction is not bound by HBM (on the H200 it streams 0.11 of the
    bandwidth), so it is an absolute rate, capped at the chip's own stream.
    :meth:`with_cast_kernel` sets both for an engine's cast kernels.

    Clock: ``sustained_clock`` is the fraction of the datasheet-peak clock the chip holds under
    continuous load at its power limit (training runs for hours; a GPU's SM clock drops to
    what its power budget allows).  Every compute rate of the roofline (GEMM, attention and
    vector cycles) runs at ``clock_hz * sustained_clock``; HBM bandwidth does not (the memory
    clock is not power-capped).  ``tensor``, ``attention`` and ``attention_fa2`` are per-clock
    efficiencies: a kernel runs at ``peak * sustained_clock * efficiency``.
    :meth:`at_full_clock` gives the same kernels at the datasheet clock, which short kernel
    benchmarks (a few hundred ms per shape) reach before the power limit pulls the clock down.
    """

    tensor: float = 1.0
    attention: float = 1.0
    memory: float = 1.0
    launch_s: float = 0.0
    source: str = "ideal roofline"
    tile_m: int = 0
    tile_n: int = 0
    tile_k: int = 0
    tile_slots: int = 0
    k_overhead: float = 0.0
    fp8_rate: float = 0.0
    fp4_rate: float = 0.0
    attention_overhead: float = 0.0
    attention_fa2: float = 0.0
    sustained_clock: float = 1.0
    stream_k_fixup: float = 0.0
    attention_overhead_bwd: float = -1.0
    attention_head_overhead: float = 0.0
    attention_head_overhead_fa2: float = -1.0
    cast_memory: float = 0.0
    cast_amax_Bps: float = 0.0

    def __post_init__(self) -> None:
        for f in ("attention_overhead_bwd", "attention_head_overhead_fa2"):     # -1: another field's
            x = getattr(self, f)
            if isinstance(x, bool) or not isinstance(x, (int, float)) or not (0.0 <= x <= 1e3 or x == -1.0):
                raise ValueError(f"KernelEfficiency.{f} must be in [0, 1e3] or -1 (the default), got {x!r}")
        for f in ("attention_overhead", "attention_fa2", "attention_head_overhead"):
            x = getattr(self, f)
            hi = 1.0 if f == "attention_fa2" else 1e3
            if isinstance(x, bool) or not isinstance(x, (int, float)) or not (0.0 <= x <= hi):
                raise ValueError(f"KernelEfficiency.{f} must be in [0, {hi:g}], got {x!r}")
        for f in ("fp8_rate", "fp4_rate"):
            x = getattr(self, f)
            if isinstance(x, bool) or not isinstance(x, (int, float)) or not (0.0 <= x <= 16.0):
                raise ValueError(f"KernelEfficiency.{f} must be in [0, 16] (0: not supported), got {x!r}")
        for f in ("tensor", "attention", "memory", "sustained_clock"):
            v = getattr(self, f)
            if not (isinstance(v, (int, float)) and 0.0 < v <= 1.0):
                raise ValueError(f"KernelEfficiency.{f} must be in (0, 1], got {v!r}")
        c = self.cast_memory
        if isinstance(c, bool) or not isinstance(c, (int, float)) or not (0.0 <= c <= self.memory):
            raise ValueError(f"KernelEfficiency.cast_memory must be in [0, memory = {self.memory}] (0: casts stream "
                             f"at the memory efficiency; a cast cannot outrun a copy), got {c!r}")
        a = self.cast_amax_Bps
        if isinstance(a, bool) or not isinstance(a, (int, float)) or not (0.0 <= a < 1e15):
            raise ValueError(f"KernelEfficiency.cast_amax_Bps must be in [0, 1e15) bytes/s (0: no separate amax "
                             f"pass), got {a!r}")
        if not (isinstance(self.launch_s, (int, float)) and 0.0 <= self.launch_s < 1.0):
            raise ValueError(f"KernelEfficiency.launch_s must be in [0, 1) seconds, got {self.launch_s!r}")
        tiles = ("tile_m", "tile_n", "tile_k", "tile_slots")
        for f in tiles:
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
                raise ValueError(f"KernelEfficiency.{f} must be a non-negative integer, got {v!r}")
        if self.tile_slots and not all(getattr(self, f) > 0 for f in tiles[:3]):
            raise ValueError("KernelEfficiency: tile_slots > 0 needs positive tile_m, tile_n and tile_k "
                             f"(got {self.tile_m}, {self.tile_n}, {self.tile_k})")
        for f in ("k_overhead", "stream_k_fixup"):
            v = getattr(self, f)
            if isinstance(v, bool) or not (isinstance(v, (int, float)) and 0.0 <= v < 1e6):
                raise ValueError(f"KernelEfficiency.{f} must be in [0, 1e6) K-elements, got {v!r}")

    def as_array(self) -> np.ndarray:
        vals = {f: float(getattr(self, f)) for f in EFF_FIELDS}
        if vals["attention_overhead_bwd"] < 0.0:          # -1: the backward pays the forward's
            vals["attention_overhead_bwd"] = float(self.attention_overhead)
        return np.array([vals[f] for f in EFF_FIELDS], dtype=np.float64)

    def with_attention_kernel(self, kernel: str) -> KernelEfficiency:
        """This efficiency with the attention kernel an engine runs: ``"best"`` (the chip's own,
        unchanged), ``"fa2"`` (FlashAttention-2-generation kernels: ``attention_fa2`` where set)
        or ``"fa1-triton"`` (the FlashAttention-1-era Triton kernel, ``flash_attn_triton.py``:
        the FA2-generation rate times :data:`FA1_TRITON_SPEED`)."""
        if kernel not in ATTENTION_KERNELS:
            raise ValueError(f"unknown attention kernel {kernel!r}; choose one of {ATTENTION_KERNELS}")
        if kernel == "best":
            return self
        fa2 = self.attention_fa2 if self.attention_fa2 > 0.0 else self.attention
        head = self.attention_head_overhead_fa2 if self.attention_head_overhead_fa2 >= 0.0 \
            else self.attention_head_overhead
        return replace(self, attention=fa2 * (FA1_TRITON_SPEED if kernel == "fa1-triton" else 1.0),
                       attention_head_overhead=head)

    def with_cast_kernel(self, kernel: str) -> KernelEfficiency:
        """This efficiency with the FP8 cast kernels an engine runs: ``"fused"`` (single-pass
        kernels streaming at ``memory``: Transformer Engine's, unchanged) or ``"inductor"``
        (per-tensor current scaling compiled by ``torch.compile``, torchao's ``tensorwise``
        recipe as torchtitan runs it: a whole-tensor amax reduction at
        :data:`INDUCTOR_AMAX_BPS_PER_SM` per SM (``tile_slots``; 132 where the chip has no SM
        model), then the cast and its transposed copy at :data:`INDUCTOR_CAST_STREAM` of the
        HBM bandwidth)."""
        if kernel not in CAST_KERNELS:
            raise ValueError(f"unknown FP8 cast kernel {kernel!r}; choose one of {CAST_KERNELS}")
        if kernel == "fused":
            return self
        sms = self.tile_slots if self.tile_slots > 0 else INDUCTOR_CAST_SMS
        return replace(self, cast_memory=min(INDUCTOR_CAST_STREAM, self.memory),
                       cast_amax_Bps=INDUCTOR_AMAX_BPS_PER_SM * sms)

    def at_full_clock(self) -> KernelEfficiency:
        """The same kernels at the datasheet clock (``sustained_clock = 1``): what a short kernel
        benchmark measures before the power limit binds."""
        return replace(self, sustained_clock=1.0)

    def shape_efficiency(self, m: float, n: float, k: float, batch: float = 1.0) -> float:
        """The GEMM shape factor (1 without a tile model) for one ``batch x (m x k) @ (k x n)``."""
        from ._kernels.formulas import gemm_shape_efficiency
        return float(gemm_shape_efficiency(float(m), float(n), float(k), float(batch), float(self.tile_m),
                                           float(self.tile_n), float(self.tile_k), float(self.tile_slots),
                                           float(self.k_overhead), float(self.stream_k_fixup)))


#: The plain roofline (PHAZE's assumption for searched designs).
IDEAL = KernelEfficiency()

#: Where each preset's kernel-efficiency constants come from (kernel-level measurements only).
EFFICIENCY_SOURCES = {
    "A100": "GEMM shape model: CUTLASS's default SM80 tensor-op configuration, 128x256x64 thread-block "
            "tiles with 3 pipeline stages (cutlass/gemm/device/default_gemm_configuration.h), so 2 x 64 = 128 "
            "K-elements of prologue per tile, one tile per SM on the 108 SMs; tensor 0.931: the best-shape bf16 "
            "matmul, 271.2 of 312 TFLOP/s at 1024x10240x5120 (S. Bekman, ml-engineering, MAMF table, torch "
            "2.6+cu126), divided by the shape "
            "model at that shape; checked against every GEMM row of cosearch/data/public_kernels.csv "
            "(tests/test_kernel_model.py).  The best-shape figure is a short per-shape run at the full 1410 "
            "MHz clock (86.9% of peak cannot be reached at the sustained clock below), so tensor is per clock.  "
            "Sustained clock 1200 / 1410 = 0.851: the SM clock drops to ~1200 MHz at the 400 W power limit "
            "under FlashAttention-2 (liangan1/GPU_travel performance/flash-attn/README.md); at that clock the "
            "model gives 0.73 of peak for a 4096^3 GEMM, against 0.66-0.77 measured, and 0.75 for CUTLASS's "
            "profiler example (3456x4096x8192, 235.1 TFLOP/s, NVIDIA/cutlass media/docs/profiler.md).  "
            "Attention 0.700 of peak at long sequences (0.822 per clock): FlashAttention-2 fwd+bwd, causal, "
            "head dim 128, seq 2k, 155 of 312 TFLOP/s on A100-80GB (Dao 2023, Fig. 4d; causal FLOPs halved, "
            "as cosearch counts them; an attention benchmark holds the power-limited clock), divided by the "
            "forward+backward length factor at 2k (0.710, see ATTENTION_OVERHEAD_FWD / _BWD) and the "
            "sustained clock; head-dim overhead assumed FlashAttention-2's on H200 (22.5).  Memory 0.75: a device copy reaches 1536 and 1490 of 2039 GB/s on A100-80GB "
            "(FastIceFlo effective-throughput table; chsasank device-benchmarks).  Launch 4 us per kernel "
            "(CUDA launch + PyTorch dispatch).",
    "H100": "GEMM shape model: 128x256x64 tiles, 128 K-elements of prologue, one tile per SM on the 132 SMs "
            "(assumed as on SM80: CUTLASS 3's warp-specialised SM90 kernels use the same tile), with stream-K: "
            "the tiles of a partial last wave are split along K over all SMs at a fix-up of 512 K-elements "
            "each, the least-squares value over cosearch's own H200 GEMM rows (h200_kernels.csv: shapes whose "
            "last wave is partial run at 0.86-1.05 of the full-wave rate per clock, where whole-tile waves "
            "would give 0.52-0.82; rms error 3.5% over 33 bf16 rows, against 12% without); tensor 0.856: "
            "best-shape bf16 matmul 794.5 of 989 TFLOP/s at 2048x2048x13312 on H100 SXM (ml-engineering MAMF "
            "table, torch 2.7+cu126) divided by the shape model there, per clock (a short run at the 1830 MHz "
            "clock of the datasheet peak); checked per clock against cosearch's own H200 sweep "
            "(cosearch/data/h200_kernels.csv, every row with the SM clock read after it: large training-shape "
            "GEMMs within -8..+0 %).  Sustained clock 1500 / 1830 = 0.820 (H200 at 700 W cannot hold 1830 "
            "MHz under full load, 1500 MHz is the realistic sustained clock: tile-ai/TileOPs #1588); measured "
            "on H200 at 700 W: 1435 MHz under back-to-back 8192^3 bf16 GEMMs, 1580 MHz under a Llama 3 8B "
            "layer's forward+backward with cuDNN attention, 1682 MHz with FlashAttention-2 (h200_kernels.csv), "
            "so a training step's mix sits near 1500.  Attention: kernel benchmarks do not reach the power "
            "limit (FlashAttention-2 fwd+bwd at 8k holds 1980 MHz for 15 s at 570 W, cuDNN averages 1842 MHz), "
            "so their rates are per boost clock (1980 MHz, 1.082x the datasheet clock), not per sustained "
            "clock.  Attention 0.526 per clock at long sequences: cuDNN 9.19 fused attention (Transformer "
            "Engine's Hopper back end), causal, head dim 128, forward and backward rows at 1k-16k tokens "
            "(8k fwd+bwd: 503.9 TFLOP/s at 1965 MHz), each over its clock and its pass's length factor, "
            "geometric mean (h200_kernels.csv); attention_fa2 0.2885 per clock: PyTorch SDPA's flash back end (FlashAttention-2) on the same "
            "sweep (8k: 273.1 TFLOP/s at 1980 MHz).  Checked against FlashAttention-3 (556.4 TFLOP/s fwd+bwd, "
            "Dao-AILab/flash-attention PR #1791) and FlashAttention-2 (286.2 there; 265 at 2k, Dao 2023 Fig. "
            "7) at the boost clock.  Length factors: see ATTENTION_OVERHEAD_FWD / _BWD; head dim: "
            "ATTENTION_HEAD_OVERHEAD (cuDNN, 56.2) and ATTENTION_HEAD_OVERHEAD_FA2 (22.5).  Memory 0.90: a 4 GiB "
            "device copy reaches 4288 of 4800 GB/s on H200 (0.893, h200_kernels.csv) and 90.6% of peak on "
            "an H100; launch 4 us.  FP8 rate 1.84: e4m3 torch._scaled_mm over bf16 torch.matmul at the same "
            "four training shapes (8192^3, 16384^3, 8192x28672x4096, 8192x7168x8192), both at the 700 W power "
            "limit: 1.87, 1.84, 1.80, 1.83 (h200_kernels.csv); per clock the ratio is 1.92-2.01, but FP8 "
            "GEMMs draw more power and hold a ~5% lower clock, which a single sustained clock cannot "
            "express, so the ratio at the power limit is the one used.",
    "H100-500W": "At 500 W (Meta's Grand Teton H100s): sustained clock 0.7027 of the datasheet clock (1286 "
                 "MHz): FBGEMM's bf16 GEMMs on 'H100 500W' (pytorch/FBGEMM #2546: 585.2, 575.1, 546.3 "
                 "TFLOP/s at 8192^3, 65536x8192x7168, 65536x3584x8192) hold 0.857 of the clock back-to-back "
                 "8192^3 GEMMs hold at 700 W (h200_kernels.csv), times the 700 W step clock; FP8 rate 1.965, "
                 "FBGEMM's FP8/bf16 pairs in the same run (public_kernels.csv rows 37-42).  HBM2e 2.4 TB/s "
                 "(torchtitan docs/performance.md).",
    "Blackwell": "The H100's kernel per-clock fractions (tensor 0.856, attention 0.526 / FA2 0.2885, memory "
                 "0.90, the same tile model) are assumed, on the chip's 148 SMs; the peaks are the datasheet's (see "
                 "the chip preset).  B200 GEMM rows (vllm-project/vllm #18778 and #19566, bench_fp8_gemm.py on "
                 "SM100; cosearch/data/public_kernels.csv rows 26-32) check them: torch bf16 at 16384 x 6144 x "
                 "4096 runs 1512.8 TFLOP/s, the model 3.6% under it at the sustained clock.  FP8 rate 1.682: CUTLASS "
                 "FP8 over torch bf16 at that shape in the same run (2544.7 / 1512.8), below the H100's 1.84.  "
                 "Sustained clock 1580 / 1965 = 0.804: back-to-back FlashAttention-4 kernels on B200 pull the SM "
                 "clock from 1965 to ~1580 MHz within ~50 ms (flashinfer-ai/flashinfer #2899); applied to the "
                 "datasheet clock (1856 MHz) it gives 1492 MHz, under FA4's 1580 (0.851 of it): a GEMM-heavy step "
                 "holds less than an attention loop (SUSTAINED_CLOCK_BLACKWELL), and no B200 GEMM clock is "
                 "published.  NVFP4 rate 2.871: "
                 "CUTLASS NVFP4 over torch bf16 at 16384 x 6144 x 4096 in the same run (3904.3 / 1360.1, "
                 "vllm-project/vllm #20646, public_kernels.csv rows 35-36), below the 3.36 that the datasheet's "
                 "FP4/FP8 ratio times the FP8 rate would give; GB300 1.5x it (its datasheet's dense FP4).",
    "TPU v5": "Tensor 0.9534 (TPU5_TENSOR): XLA's bf16 jnp.matmul at 8192^3 on a TPU v5e runs 181.8 TFLOP/s "
              "(92.3% of 197; jax-ml/jax docs/pallas/tpu/matmul.ipynb, 'XLA matmul' cell, timeit of 100 calls), "
              "over the systolic model's own 190.7 at tensor 1.0 (its fill/drain and padding: 96.8% of peak); "
              "the 4096^3 row of the same cell (166.1, dispatch included) checks it "
              "(cosearch/data/public_kernels.csv rows 33-34).  No TPU v5p or fused-attention kernel "
              "measurement is public: v5p (the same 128 x 128 MXUs) takes v5e's figure, attention is priced at "
              "the matmul rate (an upper bound: a fused attention kernel runs below its chip's plain GEMM), and "
              "memory stays 1.0 (no TPU HBM copy measurement), so TPU predictions remain optimistic by what "
              "XLA's attention and memory-bound kernels lose; no FP8 (v5e/v5p have bf16 and int8 MXUs).",
}

#: Fixed work per 128-row block of a fused attention kernel, in key blocks: 3.5 in a forward and
#: 7.75 in a backward, the least-squares pair over cosearch's own H200 sweep of FlashAttention-2
#: and cuDNN forward-only and backward-only rows, causal, head dim 128, 1k-16k tokens, each row
#: at its own clock and each kernel at its own long-sequence rate (cosearch/data/h200_kernels.csv:
#: every row within 7% of the curve).  (FlashAttention-3 and Triton-tutorial forward rates at
#: 512-16k on H100, pytorch/benchmark commit D60117034, give about 1.8 for the forward.)
ATTENTION_OVERHEAD_FWD = 3.5
ATTENTION_OVERHEAD_BWD = 7.75
#: Softmax work per score element beside the head dim's multiply-adds, relative to head dim 128
#: (:func:`cosearch._kernels.formulas.attention_head_efficiency`): from the H200 sweep's head dim
#: 64 over head dim 128 fwd+bwd rates per FLOP at equal length and clock (geometric mean over
#: 1k-16k; flat with length): cuDNN 0.766 -> 56.2, FlashAttention-2 0.870 -> 22.5.
ATTENTION_HEAD_OVERHEAD = 56.2
ATTENTION_HEAD_OVERHEAD_FA2 = 22.5


def _pair_length(seq: float, bwd_work: float = 2.5) -> float:
    """The length factor of a forward + backward pair (1 + ``bwd_work`` units of work) at ``seq``."""
    def factor(c):
        t = seq / 128.0
        return t / (t + c)
    return (1.0 + bwd_work) / (1.0 / factor(ATTENTION_OVERHEAD_FWD) + bwd_work / factor(ATTENTION_OVERHEAD_BWD))


#: Attention kernels an engine can run (:meth:`KernelEfficiency.with_attention_kernel`).
ATTENTION_KERNELS = ("best", "fa2", "fa1-triton")

#: FP8 cast kernels an engine can run (:meth:`KernelEfficiency.with_cast_kernel`).
CAST_KERNELS = ("fused", "inductor")


#: The H200's SMs (the chip ``torch.compile``'s FP8 casts were measured on)
INDUCTOR_CAST_SMS = 132
#: ``torch.compile``'s tensorwise FP8 cast taken apart on one H200 (torch 2.11, ``scripts/
#: measure_gpu_kernels.py --only fp8-cast-passes``; ``cosearch/data/h200_fp8_cast_passes.csv``,
#: the 8192 x 14336 and 8192 x 28672 rows, seconds): the whole-tensor amax reduction alone, and
#: the cast with a given scale plus its transposed FP8 copy.
INDUCTOR_CAST_PASSES_S = {(8192, 14336): (0.000441608, 0.000175001), (8192, 28672): (0.000872364, 0.000346888)}


def _inductor_amax_Bps_per_sm() -> float:
    """Bytes of bf16 input per second per SM at which ``torch.compile``'s whole-tensor amax
    reduction runs: 531.9 and 538.5 GB/s on the H200's 132 SMs (mean 535.2), 0.11 of its 4.8
    TB/s, so not bound by HBM: the rate is taken per SM (the reduction's blocks and their
    final combine), the same on an H100 of either memory."""
    rates = [2.0 * m * n / s[0] for (m, n), s in INDUCTOR_CAST_PASSES_S.items()]
    return sum(rates) / len(rates) / INDUCTOR_CAST_SMS


def _inductor_cast_stream() -> float:
    """Fraction of the datasheet HBM bandwidth (H200: 4.8 TB/s) at which ``torch.compile``'s
    cast with its transposed copy streams its 4 logical bytes an element (bf16 read, two FP8
    copies written): 2684 and 2708 GB/s, 0.5617 (mean)."""
    f = [4.0 * m * n / s[1] / 4.8e12 for (m, n), s in INDUCTOR_CAST_PASSES_S.items()]
    return sum(f) / len(f)


#: ``torch.compile``'s amax reduction: 4.05 GB/s of bf16 input per SM (535 GB/s on 132 SMs)
INDUCTOR_AMAX_BPS_PER_SM = _inductor_amax_Bps_per_sm()
#: ``torch.compile``'s cast + transposed copy: 0.5617 of the HBM bandwidth
INDUCTOR_CAST_STREAM = _inductor_cast_stream()


def _fa1_triton_speed(fa2_fwd: float = 200.0, fa2_bwd: float = 187.0, fwd_slower: float = 1.4,
                      bwd_slower: float = 2.0, bwd_work: float = 2.5) -> float:
    """fwd+bwd rate of the FlashAttention-1-era Triton kernel over FlashAttention-2's.

    Dao 2023 (arXiv:2307.08691) section 4.1: FlashAttention-2 is "around 1.3-1.5x faster than
    FlashAttention in Triton in the forward pass and around 2x faster in the backward pass"
    (1.4: the middle of the forward range); FA2's own A100 rates at head dim 128, 2k: 200
    TFLOP/s forward, 187 backward (Figs. 5b, 6b); the backward does 2.5x the forward's FLOPs.
    """
    fa2 = (1.0 / fa2_fwd + bwd_work / fa2_bwd)
    return fa2 / (fwd_slower / fa2_fwd + bwd_slower * bwd_work / fa2_bwd)


#: FlashAttention-1-era Triton attention (llm-foundry's ``attn_impl: triton``) against FA2: 0.545
FA1_TRITON_SPEED = _fa1_triton_speed()

#: Sustained SM clock under continuous load, as a fraction of the clock the datasheet peak uses.
#: A100: the SM clock "drops 1410 -> ~1200 MHz at the power limit" running FlashAttention-2
#: (liangan1/GPU_travel performance/flash-attn/README.md; ../shared/calibration row 20).
SUSTAINED_CLOCK_A100 = 1200.0 / 1410.0
#: H100 / H200 SXM (700 W; the 989 TFLOP/s bf16 peak is 132 SMs x 4096 FLOP/clk at 1830 MHz):
#: "H200 runners on the current 700W power limit cannot reliably sustain a locked 1830 MHz
#: graphics/SM clock under full load ... 1500 MHz is a more realistic sustained" clock
#: (tile-ai/TileOPs pull request #1588, 2026).
SUSTAINED_CLOCK_H100 = 1500.0 / 1830.0
#: B200: back-to-back FlashAttention-4 kernels pull the SM clock "from 1965 MHz to ~1580 MHz"
#: within ~50 ms, TFLOP/s down up to 15% (flashinfer-ai/flashinfer pull request #2899, 2026).
#: The ratio is to the boost clock; the preset's clock is the datasheet's (2.25 PFLOP/s over 148
#: SMs x 8192 FLOP/clk = 1856 MHz), of which it is 1492 MHz, under FA4's 1580 (0.851 of the
#: datasheet clock).  A training step holds less than an attention-only loop: GEMMs draw more
#: power (on the H200 at 700 W back-to-back GEMMs hold 1435 MHz, a FlashAttention-2 Llama layer
#: 1682), and no B200 GEMM clock is published, so the step clock is taken at 1492 MHz, 5.6 %
#: under FA4's.
SUSTAINED_CLOCK_BLACKWELL = 1580.0 / 1965.0

#: FlashAttention-2 fwd+bwd on A100-80GB, causal, head dim 128, seq 2k: 155 TFLOP/s of 312
#: (Dao 2023 Fig. 4d), over the length factor at 2k and the sustained clock
_A100_ATTENTION = 155.0 / 312.0 / _pair_length(2048.0) / SUSTAINED_CLOCK_A100
#: The boost clock H100 / H200 attention kernels hold (nvidia-smi's maximum SM clock, 1980 MHz,
#: against the 1830 MHz of the 989 TFLOP/s peak): they stay under the 700 W limit
#: (cosearch/data/h200_kernels.csv).
BOOST_CLOCK_H100 = 1980.0 / 1830.0
#: Per-clock long-sequence efficiencies of cuDNN 9.19 fused attention / PyTorch's FlashAttention-2
#: on H200, causal, head dim 128: the geometric mean over the forward-only and backward-only rows
#: at 1k-16k tokens of each row's rate over (989 TFLOP/s x its clock / 1830 MHz x its pass's
#: length factor), cosearch/data/h200_kernels.csv (8k fwd+bwd: 503.9 TFLOP/s at 1965 MHz / 273.1
#: at 1980 MHz); tests/test_h200_kernels.py recomputes both.
_H100_ATTENTION = 0.526
_H100_ATTENTION_FA2 = 0.2885
#: Hopper's stream-K fix-up per SM for the split last wave, K-elements (8 main-loop steps of 64):
#: the least-squares value over cosearch's own H200 GEMM rows (EFFICIENCY_SOURCES["H100"])
STREAM_K_FIXUP_H100 = 512.0
#: FP8 / BF16 GEMM rate at the 700 W limit on H200, four training shapes (EFFICIENCY_SOURCES["H100"])
FP8_RATE_H100 = 1.84
_A100_EFF = KernelEfficiency(0.931, _A100_ATTENTION, 0.75, 4e-6, EFFICIENCY_SOURCES["A100"], tile_m=128, tile_n=256,
                             tile_k=64, tile_slots=108, k_overhead=128.0, attention_overhead=ATTENTION_OVERHEAD_FWD,
                             attention_overhead_bwd=ATTENTION_OVERHEAD_BWD,
                             attention_head_overhead=ATTENTION_HEAD_OVERHEAD_FA2,
                             sustained_clock=SUSTAINED_CLOCK_A100)
_H100_EFF = KernelEfficiency(0.856, _H100_ATTENTION, 0.90, 4e-6, EFFICIENCY_SOURCES["H100"], tile_m=128, tile_n=256,
                             tile_k=64, tile_slots=132, k_overhead=128.0, stream_k_fixup=STREAM_K_FIXUP_H100,
                             fp8_rate=FP8_RATE_H100,
                             attention_overhead=ATTENTION_OVERHEAD_FWD, attention_overhead_bwd=ATTENTION_OVERHEAD_BWD,
                             attention_head_overhead=ATTENTION_HEAD_OVERHEAD,
                             attention_head_overhead_fa2=ATTENTION_HEAD_OVERHEAD_FA2, attention_fa2=_H100_ATTENTION_FA2,
                             sustained_clock=SUSTAINED_CLOCK_H100)
#: Sustained clock of an H100 held at 500 W (Meta's Grand Teton parts, torchtitan's H100s), as a
#: fraction of the datasheet clock.  FBGEMM's bf16 GEMMs on "H100 500W" (pytorch/FBGEMM pull
#: request #2546, 2024: 585.23, 575.12 and 546.31 TFLOP/s at 8192^3, 65536 x 8192 x 7168 and 65536 x
#: 3584 x 8192; cosearch/data/public_kernels.csv rows 37-39) run at 0.713, 0.695 and 0.659 (mean
#: 0.689) of the H100 model at the datasheet clock; back-to-back 8192^3 GEMMs at 700 W run at 0.804
#: of it (659.9 TFLOP/s, the median of cosearch/data/h200_kernels.csv's ``sustained`` rows after
#: 1 s).  So 500 W holds 0.857 of the 700 W GEMM clock, and a training step's clock is taken as
#: the 700 W step's (SUSTAINED_CLOCK_H100, 1500 MHz) times the same 0.857: 1286 MHz.
#: tests/test_kernel_model.py recomputes it from the rows.
SUSTAINED_CLOCK_H100_500W = 0.7027
#: FP8 / BF16 GEMM rate at 500 W: FBGEMM's row-wise-scaled FP8 GEMMs over its bf16 GEMMs in the same
#: run (1125.51 / 585.23, 1082.75 / 575.12, 1141.38 / 546.31; rows 40-42): 1.923, 1.883, 2.089, mean
#: 1.965 — the per-clock ratio cosearch measured for tensorwise ``torch._scaled_mm`` on the H200
#: (1.92-2.01): at 500 W both precisions run at the same power-limited clock, where at 700 W FP8
#: held a ~5 % lower one (FP8_RATE_H100).
FP8_RATE_H100_500W = (1125.51 / 585.23 + 1082.75 / 575.12 + 1141.38 / 546.31) / 3.0
#: FP8 / BF16 GEMM rate on B200: CUTLASS FP8 (per-tensor scales, inputs already quantized) over
#: torch bf16 matmul at 16384 x 6144 x 4096 in the same run, 2544.7 / 1512.8 TFLOP/s
#: (vllm-project/vllm pull request #19566, benchmarks/kernels/bench_fp8_gemm.py on SM100;
#: cosearch/data/public_kernels.csv rows 26 and 31)
FP8_RATE_BLACKWELL = 2544.68 / 1512.84
#: NVFP4 / BF16 GEMM rate on B200: CUTLASS NVFP4 (inputs already quantized) over torch bf16 matmul
#: at the same 16384 x 6144 x 4096 in the same run, 3904.3 / 1360.1 TFLOP/s (vllm-project/vllm
#: pull request #20646, benchmarks/kernels/bench_nvfp4_gemm.py on SM100, its "Before" table;
#: public_kernels.csv rows 35-36): 2.87, where the datasheet's 2x the FP8 rate would give 3.36.
FP4_RATE_BLACKWELL = 3904.33 / 1360.14
_BLACKWELL_EFF = replace(_H100_EFF, source=EFFICIENCY_SOURCES["Blackwell"], tile_slots=148,
                         fp8_rate=FP8_RATE_BLACKWELL, fp4_rate=FP4_RATE_BLACKWELL,
                         sustained_clock=SUSTAINED_CLOCK_BLACKWELL)
#: TPU v5's GEMM efficiency on top of the systolic model: XLA's 8192^3 bf16 matmul on a v5e,
#: 181.8 TFLOP/s (jax-ml/jax docs/pallas/tpu/matmul.ipynb), over the model's 190.7 at 1.0
#: (cosearch/data/public_kernels.csv row 33; EFFICIENCY_SOURCES["TPU v5"]).
TPU5_TENSOR = 0.9534
_TPU5_EFF = KernelEfficiency(TPU5_TENSOR, TPU5_TENSOR, source=EFFICIENCY_SOURCES["TPU v5"])


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

    def __post_init__(self) -> None:
        if isinstance(self.glb_Bps, bool) or not (isinstance(self.glb_Bps, (int, float, np.floating))
                                                  and math.isfinite(self.glb_Bps) and self.glb_Bps >= 0):
            raise ValueError(f"Accelerator.glb_Bps must be a non-negative number of bytes/s (0: not modelled), "
                             f"got {self.glb_Bps!r}")
        object.__setattr__(self, "glb_Bps", float(self.glb_Bps))
        if isinstance(self.host_link_Bps, bool) or not isinstance(self.host_link_Bps, (int, float, np.floating)):
            raise ValueError(f"Accelerator.host_link_Bps must be a positive number, got {self.host_link_Bps!r}")
        bandwidth("Accelerator.host_link_Bps", self.host_link_Bps)
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"Accelerator.name must be a non-empty string, got {self.name!r}")
        if not isinstance(self.efficiency, KernelEfficiency):
            raise ValueError(f"Accelerator.efficiency must be a KernelEfficiency, got {self.efficiency!r}")
        for f in ("tensor_cores", "systolic_rows", "systolic_cols", "vector_units", "vector_width"):
            x = getattr(self, f)
            if isinstance(x, bool) or not isinstance(x, (int, float, np.integer, np.floating)) \
                    or not np.isfinite(x) or int(x) != x or x <= 0:
                raise ValueError(f"Accelerator.{f} must be a positive integer, got {x!r}")
            object.__setattr__(self, f, int(x))
        for f in ("clock_hz", "l1_bytes", "l2_bytes", "hbm_bytes", "hbm_bandwidth_Bps",
                  "link_bandwidth_Bps"):
            x = getattr(self, f)
            if isinstance(x, bool) or not isinstance(x, (int, float, np.integer, np.floating)) \
                    or not np.isfinite(x) or x <= 0:
                raise ValueError(f"Accelerator.{f} must be a positive finite number, got {x!r}")
            object.__setattr__(self, f, float(x))
        in_range("Accelerator.clock_hz", self.clock_hz, MIN_HZ, MAX_HZ, "Hz")
        for f in ("hbm_bandwidth_Bps", "link_bandwidth_Bps"):
            bandwidth(f"Accelerator.{f}", getattr(self, f))

    @property
    def peak_flops(self) -> float:
        """Peak tensor-unit FLOP/s (2 FLOPs per MAC)."""
        return 2.0 * self.tensor_cores * self.systolic_rows * self.systolic_cols * self.clock_hz

    @property
    def supports_fp8(self) -> bool:
        """Whether the chip has FP8 tensor cores (its kernel model has an FP8 rate)."""
        return self.efficiency.fp8_rate > 0.0

    @property
    def supports_fp4(self) -> bool:
        """Whether the chip has NVFP4 tensor cores (its kernel model has an FP4 rate)."""
        return self.efficiency.fp4_rate > 0.0

    @property
    def peak_vector_flops(self) -> float:
        return float(self.vector_units * self.vector_width * self.clock_hz)

    def as_array(self) -> np.ndarray:
        """The design as one row in :data:`DESIGN_FIELDS` order."""
        return np.array([float(getattr(self, f)) for f in DESIGN_FIELDS], dtype=np.float64)

    @classmethod
    def from_array(cls, row: Sequence[float], name: str = "design",
                   efficiency: KernelEfficiency = IDEAL) -> Accelerator:
        """The design of one :data:`DESIGN_FIELDS` row (a row without the last field,
        ``glb_Bps``, as written before it existed, reads as 0: not modelled)."""
        vals = [float(x) for x in row]
        if len(vals) not in (len(DESIGN_FIELDS), len(DESIGN_FIELDS) - 1):
            raise ValueError(f"a design row has {len(DESIGN_FIELDS)} fields ({', '.join(DESIGN_FIELDS)}), "
                             f"got {len(vals)}")
        n = len(DESIGN_FIELDS) - 1                      # the positional fields before glb_Bps
        return cls(name, *vals[:n], efficiency=efficiency, glb_Bps=vals[n] if len(vals) > n else 0.0)

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
            if k != "name" and (x is None or isinstance(x, (str, list, dict, bool))):
                raise ValueError(f"chip: field {k!r} must be a number, got {x!r}")
        return cls(**d, efficiency=eff_obj)

    @classmethod
    def from_json(cls, path: str | os.PathLike) -> Accelerator:
        """A chip from a JSON file of :meth:`to_dict`'s fields."""
        from ._json import read_json_file
        return cls.from_dict(read_json_file(path, "chip"))

    def area_mm2(self, model: AreaPowerModel | PhazeAreaModel | None = None) -> float:
        return float((model or AreaPowerModel()).area_mm2(self.as_array()[None, :])[0])

    def power_w(self, model: AreaPowerModel | PhazeAreaModel | None = None) -> float:
        return float((model or AreaPowerModel()).power_w(self.as_array()[None, :])[0])


#: PHAZE's clock (``Estimator/architecture.py``: ``frequency = 1.05 GHz``).
PHAZE_CLOCK_HZ = 1.05e9
#: PHAZE's global-buffer bandwidth for a multi-core chip, 2-byte words per cycle
#: (msr-fiddle/phaze ``Estimator/utils/estimator_wrapper.py``: ``max_glb_bw = 4096``).
PHAZE_GLB_WORDS_PER_CYCLE = 4096

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
#: "H100 500W" GEMMs).
H100_500W = H100.with_(name="H100-500W", hbm_bytes=96e9, hbm_bandwidth_Bps=2.4e12,
                       efficiency=replace(_H100_EFF, sustained_clock=SUSTAINED_CLOCK_H100_500W,
                                          fp8_rate=FP8_RATE_H100_500W,
                                          source=_H100_EFF.source + "  " + EFFICIENCY_SOURCES["H100-500W"]))
#: B200 (HGX/DGX B200): 2.25 PFLOP/s dense BF16, 4.5 dense FP8, 180 GB HBM3e at 8 TB/s, NVLink 5 at
#: 1.8 TB/s bidirectional (900 GB/s per direction), 148 SMs (NVIDIA DGX B200 datasheet: 72 PFLOP/s
#: FP8 training and 1,440 GB for 8 GPUs; HGX B200 specifications).  L2 assumed 2 x 50 MB (two dies).
B200 = Accelerator("B200", 592, 16, 64, 148, 128, 2.25e15 / (2 * 592 * 16 * 64), 228 * KiB, 100 * MiB, 180e9,
                   8.0e12, 9.0e11, _BLACKWELL_EFF, host_link_Bps=64e9)
#: GB200 (one Blackwell GPU of a GB200 NVL72): 2.5 PFLOP/s dense BF16, 5 dense FP8, 186 GB HBM3e
#: at 8 TB/s (NVIDIA GB200 NVL72 specifications: 360 PFLOP/s sparse BF16 and 13.4 TB HBM3e per 72 GPUs).
GB200 = B200.with_(name="GB200", clock_hz=2.5e15 / (2 * 592 * 16 * 64), hbm_bytes=186e9, host_link_Bps=225e9)
#: GB300 (Blackwell Ultra in a GB300 NVL72): the GB200's dense BF16/FP8 rates, 288 GB HBM3e at 8 TB/s,
#: dense NVFP4 15 PFLOP/s, 1.5x the GB200's 10 (NVIDIA GB300 NVL72 specifications: 1,080 PFLOP/s FP4
#: dense per 72), so 1.5x Blackwell's measured NVFP4 rate.
GB300 = GB200.with_(name="GB300", hbm_bytes=288e9,
                    efficiency=replace(_BLACKWELL_EFF, fp4_rate=1.5 * FP4_RATE_BLACKWELL))
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
PRESETS: dict[str, Accelerator] = {"tpuv4": TPUv4, "a100": A100, "a100-80gb": A100_80GB, "h100": H100,
                                   "h100-500w": H100_500W, "h200": H200,
                                   "b200": B200, "gb200": GB200, "gb300": GB300, "tpuv5e": TPUv5e, "tpuv5p": TPUv5p}


def preset_names() -> list[str]:
    return [a.name for a in PRESETS.values()]


def preset(name: str | Accelerator) -> Accelerator:
    """Accelerator preset by name (case-insensitive): TPUv4, A100, A100-80GB, H100, H100-500W, H200,
    B200, GB200, GB300, TPUv5e, TPUv5p."""
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
        if arr.ndim == 2 and arr.shape[1] == len(DESIGN_FIELDS) - 1:
            # written before glb_Bps existed: the on-chip bandwidth is not modelled
            arr = np.ascontiguousarray(np.hstack([arr, np.zeros((len(arr), 1))]))
        if arr.ndim != 2 or arr.shape[1] != len(DESIGN_FIELDS):
            raise ValueError(f"design array must have shape (n, {len(DESIGN_FIELDS)}), got {arr.shape}")
        body = arr[:, :-1]
        if not np.all(np.isfinite(arr)) or np.any(body <= 0) or np.any(arr[:, -1] < 0):
            bad = np.argwhere(~np.isfinite(arr) | np.hstack([body <= 0, arr[:, -1:] < 0]))[0]
            what = "negative" if bad[1] == len(DESIGN_FIELDS) - 1 else "non-positive"
            raise ValueError(f"design {bad[0]} has {what} {DESIGN_FIELDS[bad[1]]}={arr[tuple(bad)]}")
        return arr
    if isinstance(designs, Accelerator):
        designs = [designs]
    return np.stack([d.as_array() for d in designs]) if len(designs) else np.zeros((0, len(DESIGN_FIELDS)))


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
    name = "cosearch"

    def __post_init__(self) -> None:
        for k, v in asdict(self).items():
            if v < 0 or not np.isfinite(v):
                raise ValueError(f"AreaPowerModel.{k} must be a finite non-negative number, got {v}")

    @staticmethod
    def _cols(d: np.ndarray) -> dict[str, np.ndarray]:
        d = np.atleast_2d(np.asarray(d, dtype=np.float64))
        return {f: d[:, i] for i, f in enumerate(DESIGN_FIELDS)}

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
        return {"PE arrays": pes * self.pe_area_mm2, "SRAM": sram_mib * self.sram_area_mm2_per_mib,
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
        return (pes * c["clock_hz"] * self.pe_energy_j + sram_mib * self.sram_power_w_per_mib
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
        tc = c["tensor_cores"] * (pa.PHAZE_CORE_UM2 + pa.PHAZE_PE_UM2 * c["systolic_rows"] * c["systolic_cols"]
                                  + pa.buffer_um2(c["l1_bytes"]))
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


#: Most distinct values one SearchSpace field may list, and most designs its grid may hold
#: before the budget filter (PHAZE's space: 75,712): larger inputs are refused before anything is
#: allocated (a grid row costs ~100 bytes, so the cap keeps the grid under ~1 GB).
MAX_FIELD_VALUES = 4096
MAX_GRID_DESIGNS = 10_000_000
#: Largest space file read (bytes).
MAX_SPACE_FILE_BYTES = 1 << 20


def _as_tuple(name: str, v: Any) -> tuple:
    t = tuple(v) if isinstance(v, (list, tuple, np.ndarray)) else (v,)
    if not t:
        raise ValueError(f"SearchSpace.{name} must not be empty")
    if len(t) > 16 * MAX_FIELD_VALUES:
        raise ValueError(f"SearchSpace.{name} lists {len(t):,} values; at most {MAX_FIELD_VALUES:,} distinct "
                         "values are supported")
    return t


def _distinct(name: str, vals: tuple) -> tuple:
    """The values in their first order, repeats dropped; refused past :data:`MAX_FIELD_VALUES`."""
    try:
        out = tuple(dict.fromkeys(vals))
    except TypeError:
        out = vals
    if len(out) > MAX_FIELD_VALUES:
        raise ValueError(f"SearchSpace.{name} has {len(out):,} distinct values; at most {MAX_FIELD_VALUES:,} "
                         "are supported")
    return out


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


def phaze_reference(hbm_bytes: float = 32 * GiB, hbm_Bps: float = 1.2e12) -> Accelerator:
    """PHAZE's area reference (``max_acc_config``): 8 tensor cores of 128 x 128, 2 vector
    cores of 128 lanes, a 128 MiB global buffer, PHAZE's per-core buffers, at 1.05 GHz,
    with the run's HBM and TPUv4's 300 GB/s of chip links."""
    return Accelerator("PHAZE-reference", 8, 128, 128, 2, 128, PHAZE_CLOCK_HZ, phaze_l1_bytes(128, 128),
                       128 * MiB, hbm_bytes, hbm_Bps, 3.0e11,
                       glb_Bps=PHAZE_GLB_WORDS_PER_CYCLE * 2.0 * PHAZE_CLOCK_HZ)


#: HBM scenarios a run can be given by capacity (GiB) alone: capacity -> bandwidth (B/s).
#: 32 GiB: TPUv4's HBM2 (1.2 TB/s); 64 GiB: the same bandwidth (PHAZE varies capacity only);
#: 80 GiB: likewise.  Give ``hbm_Bps`` to change the bandwidth of a scenario.
HBM_SCENARIO_BPS = 1.2e12

#: Fields a search-space JSON file may set (besides ``"base"`` and ``"hbm_gib"``).
SPACE_FILE_FIELDS = ("tensor_cores", "systolic_dims", "vector_units", "vector_width", "vector_width_tied",
                     "clock_hz", "l1_bytes", "l1_rule", "l2_bytes", "hbm", "link_bandwidth_Bps",
                     "area_budget_mm2", "power_budget_w", "min_area_fraction", "min_area_exempt_single_core",
                     "glb_words_per_cycle", "glb_rule")


#: Area models a search space can be built with, by name.
AREA_MODELS = ("cosearch", "phaze")


def named_area_model(name: str, power: AreaPowerModel | None = None) -> AreaPowerModel | PhazeAreaModel:
    """The area model called ``name`` (:data:`AREA_MODELS`): ``"cosearch"`` is ``power`` (default
    :class:`AreaPowerModel`); ``"phaze"`` is :class:`PhazeAreaModel`, with ``power`` pricing its
    power."""
    if power is not None and not isinstance(power, AreaPowerModel):
        raise ValueError(f"area_power must be an AreaPowerModel, got {type(power).__name__}")
    if name == "cosearch":
        return power or AreaPowerModel()
    if name == "phaze":
        return PhazeAreaModel(power or AreaPowerModel())
    raise ValueError(f"area_model must be one of {', '.join(AREA_MODELS)}, got {name!r}")


def _area_suffix(area_model: str) -> str:
    """What a space's name says of its area model: nothing for cosearch's own."""
    return "" if area_model == "cosearch" else f"-{area_model}-area"


@dataclass(frozen=True)
class SearchSpace:
    """A Cartesian grid of accelerator designs under an area and power budget.

    Each field lists the candidate values of one architecture parameter;
    ``systolic_dims`` lists (rows, cols) pairs and ``hbm`` lists
    (capacity_bytes, bandwidth_Bps) pairs.  ``vector_width_tied``: every vector unit is as
    wide as the systolic array (``vector_width`` then ignored; PHAZE's rule).  ``l1_rule``:
    ``"grid"`` (the ``l1_bytes`` values) or ``"phaze"`` (:func:`phaze_l1_bytes`).
    ``glb_words_per_cycle``: every design's global buffer feeds its tensor cores this many
    2-byte words per cycle (``glb_Bps = words x 2 x clock``; 0: not modelled), so a GEMM's
    operand traffic bounds its time (:func:`cosearch._kernels.formulas.operand_traffic_bytes`);
    ``glb_rule="phaze"`` gives single-core designs PHAZE's smaller figure (:func:`phaze_glb_words`).

    Budgets: the area (package: die + HBM stacks) and power of ``reference`` (default the
    TPUv4 preset, given the grid's HBM when the grid has a single HBM scenario) unless set.
    ``min_area_fraction``: designs whose *die* area is below this fraction of the
    reference's die area are dropped (PHAZE keeps 0.3x-1x, except designs with a single
    tensor or vector core: ``min_area_exempt_single_core``).  :meth:`arrays` returns the
    designs that fit as one row per design (:data:`DESIGN_FIELDS` order).

    HBM is a *scenario* (one capacity per run) in both presets; a grid with several HBM
    pairs searches it, and then capacity and bandwidth cost area (and bandwidth power).
    """

    tensor_cores: tuple = (2, 4, 8, 16, 32)
    systolic_dims: tuple = ((32, 32), (64, 64), (128, 128), (256, 256))
    vector_units: tuple = (2, 4, 8)
    vector_width: tuple = (512, 1024)
    clock_hz: tuple = (1.05e9,)
    l1_bytes: tuple = (1 * MiB, 4 * MiB, 16 * MiB)
    l2_bytes: tuple = (32 * MiB, 128 * MiB)
    hbm: tuple = ((32 * GiB, 1.2e12),)
    link_bandwidth_Bps: tuple = (3.0e11,)
    area_budget_mm2: float | None = None
    power_budget_w: float | None = None
    area_power: AreaPowerModel | PhazeAreaModel = field(default_factory=AreaPowerModel)
    vector_width_tied: bool = False
    l1_rule: str = "grid"
    min_area_fraction: float = 0.0
    min_area_exempt_single_core: bool = False
    reference: Accelerator | None = None
    name: str = "default"
    glb_words_per_cycle: float = 0.0
    glb_rule: str = "fixed"

    def __post_init__(self) -> None:
        if not isinstance(self.area_power, (AreaPowerModel, PhazeAreaModel)):
            raise ValueError(f"SearchSpace.area_power must be an AreaPowerModel or a PhazeAreaModel, got "
                             f"{type(self.area_power).__name__}")
        if self.glb_rule not in ("fixed", "phaze"):
            raise ValueError(f"SearchSpace.glb_rule must be 'fixed' or 'phaze', got {self.glb_rule!r}")
        w = self.glb_words_per_cycle
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not (math.isfinite(w) and w >= 0):
            raise ValueError(f"SearchSpace.glb_words_per_cycle must be a non-negative number (0: on-chip "
                             f"bandwidth not modelled), got {w!r}")
        for f in ("tensor_cores", "vector_units", "vector_width", "clock_hz", "l1_bytes",
                  "l2_bytes", "link_bandwidth_Bps"):
            vals = _as_tuple(f, getattr(self, f))
            for v in vals:
                if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) \
                        or not (float(v) > 0) or not np.isfinite(float(v)):
                    raise ValueError(f"SearchSpace.{f} values must be positive numbers, got {v!r}")
            object.__setattr__(self, f, _distinct(f, vals))
        for f, names in (("systolic_dims", ("rows", "cols")), ("hbm", ("capacity", "bandwidth"))):
            vals = getattr(self, f)
            if not isinstance(vals, (list, tuple)) or not vals:
                raise ValueError(f"SearchSpace.{f} must be a non-empty list of ({names[0]}, {names[1]}) pairs")
            _as_tuple(f, vals)
            pairs = tuple(tuple(p) if isinstance(p, (list, tuple)) else (p,) for p in vals)
            for p in pairs:
                if len(p) != 2 or not all(isinstance(x, (int, float)) and not isinstance(x, bool)
                                          and float(x) > 0 and np.isfinite(x) for x in p):
                    raise ValueError(f"SearchSpace.{f} entries must be positive ({names[0]}, {names[1]}) "
                                     f"pairs, got {p!r}")
            object.__setattr__(self, f, _distinct(f, pairs))
        if self.l1_rule not in ("grid", "phaze"):
            raise ValueError(f"SearchSpace.l1_rule must be 'grid' or 'phaze', got {self.l1_rule!r}")
        if not (isinstance(self.min_area_fraction, (int, float)) and 0.0 <= self.min_area_fraction < 1.0):
            raise ValueError(f"SearchSpace.min_area_fraction must be in [0, 1), got {self.min_area_fraction!r}")
        ref = self.reference or TPUv4
        if not isinstance(ref, Accelerator):
            raise ValueError(f"SearchSpace.reference must be an Accelerator, got {ref!r}")
        ref = self.with_scenario_hbm(ref)      # an HBM scenario: the reference carries the same HBM
        object.__setattr__(self, "reference", ref)
        for f, fn in (("area_budget_mm2", ref.area_mm2), ("power_budget_w", ref.power_w)):
            v = getattr(self, f)
            if v is None:
                object.__setattr__(self, f, fn(self.area_power))
            elif isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
                raise ValueError(f"SearchSpace.{f} must be a positive number, got {v!r}")

    def with_scenario_hbm(self, chip: Accelerator) -> Accelerator:
        """``chip`` with this space's HBM when the space holds one HBM scenario (a reference
        or baseline gets the same memory as every design), else ``chip`` as it is."""
        if len(self.hbm) == 1:
            return chip.with_(hbm_bytes=float(self.hbm[0][0]), hbm_bandwidth_Bps=float(self.hbm[0][1]))
        return chip

    # ------------------------------------------------------------------ presets
    @classmethod
    def phaze(cls, hbm_gib: float = 32, hbm_Bps: float | None = None,
              area_power: AreaPowerModel | None = None, onchip_bandwidth: bool = True,
              area_model: str = "cosearch") -> SearchSpace:
        """PHAZE's architecture space (msr-fiddle/phaze, ``Estimator/architecture.py``):
        1-4,096 tensor cores and 1-4,096 vector cores (powers of two), systolic width and
        depth independently 2-256 (powers of two), vector width = array width, a 2-128 MiB
        global buffer, PHAZE's per-core buffers (:func:`phaze_l1_bytes`), 1.05 GHz; kept
        when its die area lies between 0.3x and 1x that of :func:`phaze_reference` (no
        lower bound for a single tensor or vector core, as PHAZE).  HBM is the run's
        scenario: ``hbm_gib`` GiB at ``hbm_Bps`` (default :data:`HBM_SCENARIO_BPS`); no power cap
        (PHAZE constrains area only).  ``onchip_bandwidth``: the global buffer feeds the cores
        PHAZE's :data:`PHAZE_GLB_WORDS_PER_CYCLE` words per cycle (its estimator's
        ``max_glb_bw``; a single core less, :func:`phaze_glb_words`), so GEMMs are bounded by
        their operand traffic too; False prices them
        without that bound (cosearch 0.2's space).  ``area_model``: ``"cosearch"``
        (:class:`AreaPowerModel`, or ``area_power`` when given) or ``"phaze"``
        (:class:`PhazeAreaModel`, PHAZE's own figures: the space is then
        exactly PHAZE's 29,360-design list, ``Estimator/arch_configs/cores.json``)."""
        from . import _validate as v
        gib = v.positive_float("hbm_gib", hbm_gib)
        bw = HBM_SCENARIO_BPS if hbm_Bps is None else v.positive_float("hbm_Bps", hbm_Bps)
        hbm = (gib * GiB, bw)
        ap = named_area_model(area_model, area_power)
        suffix = _area_suffix(area_model) + ("" if onchip_bandwidth else "-no-onchip")
        p2 = [2 ** i for i in range(0, 13)]
        dims = tuple((2 ** w, 2 ** d) for w in range(1, 9) for d in range(1, 9))
        return cls(tensor_cores=tuple(p2), systolic_dims=dims, vector_units=tuple(p2), vector_width=(1,),
                   clock_hz=(PHAZE_CLOCK_HZ,), l1_bytes=(1,), l2_bytes=tuple(2 ** i * MiB for i in range(1, 8)),
                   hbm=(hbm,), link_bandwidth_Bps=(3.0e11,), power_budget_w=math.inf,
                   area_power=ap, vector_width_tied=True, l1_rule="phaze",
                   min_area_fraction=0.3, min_area_exempt_single_core=True,
                   reference=phaze_reference(*hbm), name=f"phaze-hbm{gib:g}{suffix}",
                   glb_words_per_cycle=PHAZE_GLB_WORDS_PER_CYCLE if onchip_bandwidth else 0.0, glb_rule="phaze")

    @classmethod
    def default(cls, hbm_gib: float = 32, hbm_Bps: float | None = None, area_model: str = "cosearch") -> SearchSpace:
        """The default grid (square arrays, up to 32 cores) at one HBM scenario; ``area_model``
        as in :meth:`phaze` (the budget is then TPUv4's area under that model)."""
        from . import _validate as v
        gib = v.positive_float("hbm_gib", hbm_gib)
        bw = HBM_SCENARIO_BPS if hbm_Bps is None else v.positive_float("hbm_Bps", hbm_Bps)
        suffix = _area_suffix(area_model)
        return cls(hbm=((gib * GiB, bw),), name=f"default-hbm{gib:g}{suffix}",
                   area_power=named_area_model(area_model))

    @classmethod
    def from_json(cls, path: str, hbm_gib: float | None = None) -> SearchSpace:
        """A user's grid from a JSON object: ``"base"`` (``"default"`` or ``"phaze"``, default
        ``"default"``), ``"hbm_gib"``, ``"area_model"`` (:data:`AREA_MODELS`, default
        ``"cosearch"``), and any of :data:`SPACE_FILE_FIELDS` (byte and Hz units as in the
        dataclass).  Unknown fields are an error naming them."""
        from ._json import read_json_file
        d = read_json_file(path, "space", MAX_SPACE_FILE_BYTES)
        if not isinstance(d, dict):
            raise ValueError(f"space file {path!r}: the top level must be an object")
        unknown = sorted(set(d) - set(SPACE_FILE_FIELDS) - {"base", "hbm_gib", "area_model"})
        if unknown:
            raise ValueError(f"space file {path!r}: unknown field(s) {unknown}; allowed: "
                             f"base, hbm_gib, area_model, {', '.join(SPACE_FILE_FIELDS)}")
        am = d.pop("area_model", "cosearch")
        if am not in AREA_MODELS:
            raise ValueError(f"space file {path!r}: area_model must be one of {', '.join(AREA_MODELS)}, got {am!r}")
        base = d.pop("base", "default")
        if base not in ("default", "phaze"):
            raise ValueError(f"space file {path!r}: base must be 'default' or 'phaze', got {base!r}")
        gib = d.pop("hbm_gib", None) if hbm_gib is None else hbm_gib
        space = (cls.phaze if base == "phaze" else cls.default)(**({} if gib is None else {"hbm_gib": gib}),
                                                               area_model=am)
        changes = {}
        for k, val in d.items():
            changes[k] = tuple(tuple(x) if isinstance(x, list) else x for x in val) if isinstance(val, list) else val
        if "hbm" in changes:
            changes["reference"] = space.reference.with_(hbm_bytes=TPUv4.hbm_bytes) if base == "default" \
                else space.reference
        try:
            return replace(space, name=os.path.basename(str(path)), **changes)
        except ValueError as exc:
            raise ValueError(f"space file {path!r}: {exc}") from None
        except TypeError as exc:
            raise ValueError(f"space file {path!r}: {exc}") from None

    # ------------------------------------------------------------------ designs
    @property
    def grid_size(self) -> int:
        """Designs in the grid before the budget filter."""
        return math.prod(len(x) for x in (
            self.tensor_cores, self.systolic_dims, self.vector_units,
            (0,) if self.vector_width_tied else self.vector_width, self.clock_hz,
            (0,) if self.l1_rule == "phaze" else self.l1_bytes, self.l2_bytes, self.hbm, self.link_bandwidth_Bps))

    def grid(self) -> np.ndarray:
        """Every design of the grid, before the budget filter."""
        n = self.grid_size
        if n > MAX_GRID_DESIGNS:
            raise ValueError(f"the search space's grid holds {n:,} designs, more than the {MAX_GRID_DESIGNS:,} "
                             "supported; list fewer values per field")
        vws = (0.0,) if self.vector_width_tied else self.vector_width
        l1s = (0.0,) if self.l1_rule == "phaze" else self.l1_bytes
        rows = []
        for tc, (r, c), vu, vw, clk, l1, l2, (hc, hb), lb in itertools.product(
                self.tensor_cores, self.systolic_dims, self.vector_units, vws,
                self.clock_hz, l1s, self.l2_bytes, self.hbm, self.link_bandwidth_Bps):
            rows.append((tc, r, c, vu, r if self.vector_width_tied else vw, clk,
                         phaze_l1_bytes(r, c) if self.l1_rule == "phaze" else l1, l2, hc, hb, lb,
                         (phaze_glb_words(tc, r, c) if self.glb_rule == "phaze" and self.glb_words_per_cycle > 0
                          else self.glb_words_per_cycle) * 2.0 * clk))
        return np.array(rows, dtype=np.float64)

    def budget_mask(self, grid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Boolean (fits area, fits power) masks for the rows of ``grid``; the area mask also
        holds the lower bound ``min_area_fraction``."""
        ap = self.area_power
        ok_a = ap.area_mm2(grid) <= self.area_budget_mm2 * (1 + 1e-9)
        if self.min_area_fraction > 0:
            floor = self.min_area_fraction * ap.die_area_mm2(self.reference.as_array()[None])[0]
            big = ap.die_area_mm2(grid) >= floor * (1 - 1e-9)
            if self.min_area_exempt_single_core:
                big |= (grid[:, 0] == 1) | (grid[:, 3] == 1)
            ok_a &= big
        return ok_a, ap.power_w(grid) <= self.power_budget_w * (1 + 1e-9)

    def arrays(self) -> np.ndarray:
        """Designs under budget; raises ``ValueError`` naming the constraint if none are."""
        g = self.grid()
        ok_a, ok_p = self.budget_mask(g)
        keep = ok_a & ok_p
        if not keep.any():
            why = []
            if not ok_a.any():
                why.append(f"area budget {self.area_budget_mm2:.1f} mm^2 (smallest design "
                           f"{self.area_power.area_mm2(g).min():.1f} mm^2)")
            if not ok_p.any():
                why.append(f"power budget {self.power_budget_w:.1f} W (smallest design "
                           f"{self.area_power.power_w(g).min():.1f} W)")
            if not why:
                why.append("area and power together (each alone leaves designs)")
            raise ValueError("no design of the search space fits the " + " and the ".join(why))
        return np.ascontiguousarray(g[keep])

    def __len__(self) -> int:
        return len(self.arrays())

    def accelerators(self) -> list[Accelerator]:
        return [Accelerator.from_array(r, name=f"design{i}") for i, r in enumerate(self.arrays())]

    def describe(self) -> dict[str, Any]:
        g = self.grid()
        ok_a, ok_p = self.budget_mask(g)
        return {"name": self.name, "grid": len(g), "over_area": int((~ok_a).sum()), "over_power": int((~ok_p).sum()),
                "feasible": int((ok_a & ok_p).sum()), "area_budget_mm2": self.area_budget_mm2,
                "power_budget_w": self.power_budget_w}


