"""Kernel efficiency: what a chip's kernels achieve of the roofline (:class:`KernelEfficiency`),
with the public measurement, specification or code behind every constant
(:data:`EFFICIENCY_SOURCES`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

KiB = 1024
MiB = 1024 ** 2
GiB = 1024 ** 3


#: Column order of the design arrays handed to the kernels.  The last three may be 0: ``glb_Bps``
#: (on-chip operand bandwidth not modelled), ``fp8_macs`` and ``fp4_macs`` (FP8 / FP4
#: multiply-adds each PE does a cycle; 0: none in that format).
DESIGN_FIELDS = (
    "tensor_cores", "systolic_rows", "systolic_cols", "vector_units", "vector_width",
    "clock_hz", "l1_bytes", "l2_bytes", "hbm_bytes", "hbm_bandwidth_Bps", "link_bandwidth_Bps", "glb_Bps",
    "fp8_macs", "fp4_macs",
)
#: How many trailing :data:`DESIGN_FIELDS` may be 0 (and may be missing from a row written
#: before they existed, reading as 0).
OPTIONAL_DESIGN_FIELDS = 3
#: Most FP8 multiply-adds a PE may do per cycle (``fp8_macs``): a bf16 PE's operand paths carry
#: two FP8 operand pairs (the datasheet FP8/BF16 dense ratio of H100, B200 and MI300X is 2);
#: wider values are for what-if studies.
MAX_FP8_MACS = 16.0
#: Most FP4 multiply-adds a PE may do per cycle (``fp4_macs``): B200's dense FP4 peak is four
#: times its BF16 one (9 vs 2.25 PFLOP/s on its datasheet); wider values are for what-if studies.
MAX_FP4_MACS = 32.0
#: The design fields that give a tensor unit's low-precision MACs per PE, with each one's ceiling.
MAX_FORMAT_MACS = {"fp8_macs": MAX_FP8_MACS, "fp4_macs": MAX_FP4_MACS}
#: The highest attention clock a KernelEfficiency takes, as a fraction of the datasheet clock: boost
#: clocks run above the datasheet's (H100: 1980 of 1830 MHz), never twice it.
MAX_ATTENTION_CLOCK = 2.0


#: Column order of :meth:`KernelEfficiency.as_array` (what the roofline kernel reads; the
#: indices are :data:`cosearch._kernels.formulas.E_TENSOR` ... ``E_K_OVERHEAD``).
EFF_FIELDS = ("tensor", "attention", "memory", "launch_s", "tile_m", "tile_n", "tile_k", "tile_slots",
              "k_overhead", "fp8_rate", "fp4_rate", "attention_overhead", "sustained_clock", "stream_k_fixup",
              "attention_overhead_bwd", "attention_head_overhead", "cast_memory", "cast_amax_Bps", "attention_clock",
              "attention_speed_fwd", "attention_speed_bwd")
#: The low-precision formats fused attention runs in (Megatron-Core's ``--fp8-dot-product-attention``
#: under a per-tensor recipe, ``"fp8"``, or under MXFP8, ``"mxfp8"``), each with its
#: :class:`KernelEfficiency` speed fields: (forward, backward) for multi-head (MHA, MLA) attention,
#: then for grouped-query attention.
ATTENTION_FORMAT_FIELDS = {
    "fp8": (("fp8_attention_fwd", "fp8_attention_bwd"), ("fp8_attention_gqa_fwd", "fp8_attention_gqa_bwd")),
    "mxfp8": (("mxfp8_attention_fwd", "mxfp8_attention_bwd"),
              ("mxfp8_attention_gqa_fwd", "mxfp8_attention_gqa_bwd")),
}
#: The most a low-precision attention kernel may outrun the bf16 one (the tensor cores' FP8 rate is
#: twice BF16's; the softmax does not speed up), with room for what-if studies.
MAX_ATTENTION_SPEED = 4.0


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
    :func:`cosearch._kernels.formulas.attention_length_efficiency` (at the keys each query meets,
    in causal units, where fewer: a sliding window) — each 128-row block pays
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
    ``attention_clock``: the fraction of the datasheet clock the chip's fused attention kernels
    hold under the same continuous load, where it differs from the GEMMs' (0, the default:
    ``sustained_clock``).  A GPU's clock is set by its power: back-to-back GEMMs reach the
    power limit at a lower clock than attention kernels, which spend part of each cycle on
    softmax and data movement rather than on the tensor cores, and a kernel that stays under the
    limit keeps the boost clock (above the datasheet's, so the field may exceed 1).  Fused
    attention ops are priced at ``clock_hz * attention_clock``; every other op, the batched
    matmuls of unfused attention included (cuBLAS GEMMs), at ``sustained_clock``.
    ``attention_clock_fa2`` is the same for FlashAttention-2-generation kernels (0:
    ``attention_clock``); :meth:`with_attention_kernel` selects it.

    Low-precision attention (Transformer Engine's FP8 ``DotProductAttention``, cuDNN's FP8 and MXFP8
    SDPA kernels): ``fp8_attention_fwd`` / ``_bwd`` are how many times faster the chip's fused
    attention forward / backward runs on per-tensor-scaled FP8 Q, K, V (and dO) than in bf16, for
    multi-head attention (MHA; MLA, whose heads each have their own keys after the up
    projection); ``fp8_attention_gqa_fwd`` / ``_bwd`` the same for grouped-query attention;
    ``mxfp8_attention_*`` the same four for MXFP8 (1 x 32 block scales).  0: not measured; a family
    without its own figure takes the other family's, and a format with neither cannot run
    (:meth:`with_fp8_attention` refuses it).  ``attention_speed_fwd`` / ``_bwd`` are the speeds in
    force for the plan being priced (1: bf16 attention), which :meth:`with_fp8_attention` sets and
    the roofline applies to fused attention ops on low-precision operands
    (:func:`cosearch._kernels.formulas.attention_format_speed`).
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
    attention_clock: float = 0.0
    attention_clock_fa2: float = 0.0
    fp8_attention_fwd: float = 0.0
    fp8_attention_bwd: float = 0.0
    fp8_attention_gqa_fwd: float = 0.0
    fp8_attention_gqa_bwd: float = 0.0
    mxfp8_attention_fwd: float = 0.0
    mxfp8_attention_bwd: float = 0.0
    mxfp8_attention_gqa_fwd: float = 0.0
    mxfp8_attention_gqa_bwd: float = 0.0
    attention_speed_fwd: float = 1.0
    attention_speed_bwd: float = 1.0

    def __post_init__(self) -> None:
        speeds = [f for pairs in ATTENTION_FORMAT_FIELDS.values() for pair in pairs for f in pair]
        for f in (*speeds, "attention_speed_fwd", "attention_speed_bwd"):
            x = getattr(self, f)
            lo = 0.0 if f in speeds else 1.0 / MAX_ATTENTION_SPEED
            if isinstance(x, bool) or not isinstance(x, (int, float)) or not (lo <= x <= MAX_ATTENTION_SPEED):
                what = "0: not measured" if f in speeds else "1: bf16 attention"
                raise ValueError(f"KernelEfficiency.{f} must be in [{lo:g}, {MAX_ATTENTION_SPEED:g}] ({what}), "
                                 f"got {x!r}")
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
        for f in ("attention_clock", "attention_clock_fa2"):
            x = getattr(self, f)
            if isinstance(x, bool) or not isinstance(x, (int, float)) or not (0.0 <= x <= MAX_ATTENTION_CLOCK):
                raise ValueError(f"KernelEfficiency.{f} must be in [0, {MAX_ATTENTION_CLOCK:g}] (a fraction of the "
                                 f"datasheet clock; 0: the sustained clock), got {x!r}")
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
            hi = 1 << (24 if f == "tile_slots" else 16)       # beyond any kernel's tile or any chip's SMs
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not 0 <= v <= hi:
                raise ValueError(f"KernelEfficiency.{f} must be a whole number in [0, {hi}], got {v!r}")
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
        vals["attention_clock"] = float(self.attention_clock_held())     # 0: the sustained clock
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
        clock = self.attention_clock_fa2 if self.attention_clock_fa2 > 0.0 else self.attention_clock
        return replace(self, attention=fa2 * (FA1_TRITON_SPEED if kernel == "fa1-triton" else 1.0),
                       attention_head_overhead=head, attention_clock=clock)

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

    def with_scaling_recipe(self, recipe: str | None) -> KernelEfficiency:
        """This efficiency with an FP8 scaling recipe's GEMM kernels: ``"mxfp8"`` runs its GEMMs at
        :data:`MXFP8_GEMM_SPEED` of the per-tensor FP8 rate (``fp8_rate``, where the chip has a
        measured one; a designed chip's FP8 MACs are its own), and so does ``"blockwise"`` on a
        chip with FP4 tensor cores (Blackwell), where Transformer Engine runs 128-blockwise FP8
        through MXFP8 GEMMs ("On Blackwell (SM100+), FP8 Block is emulated via MXFP8", the same
        document); every other recipe, unchanged (per-tensor scales multiply the output once;
        NVFP4 has its own ``fp4_rate``)."""
        block = recipe == "mxfp8" or (recipe == "blockwise" and self.fp4_rate > 0.0)
        if not block or self.fp8_rate <= 0.0:
            return self
        return replace(self, fp8_rate=self.fp8_rate * MXFP8_GEMM_SPEED)

    def with_fp8_attention(self, fmt: str | None, grouped: bool) -> KernelEfficiency:
        """This efficiency with fused attention in ``fmt`` (:data:`ATTENTION_FORMAT_FIELDS`: ``"fp8"``,
        per-tensor scaled, or ``"mxfp8"``; None: bf16) for a model with grouped-query attention
        (``grouped``) or not: the format's measured (forward, backward) speeds over bf16 for that
        family, else the other family's, put in force (``attention_speed_fwd`` / ``_bwd``).  A
        format this chip has no figure for is refused."""
        if fmt is None:
            return replace(self, attention_speed_fwd=1.0, attention_speed_bwd=1.0)
        if fmt not in ATTENTION_FORMAT_FIELDS:
            raise ValueError(f"unknown attention format {fmt!r}; choose one of {tuple(ATTENTION_FORMAT_FIELDS)} "
                             "or None (bf16)")
        mha, gqa = ATTENTION_FORMAT_FIELDS[fmt]
        for pair in ((gqa, mha) if grouped else (mha, gqa)):
            fwd, bwd = (getattr(self, f) for f in pair)
            if fwd > 0.0 and bwd > 0.0:
                return replace(self, attention_speed_fwd=float(fwd), attention_speed_bwd=float(bwd))
        raise ValueError(f"this chip's kernel efficiency has no measured {fmt} attention kernels "
                         f"(KernelEfficiency.{mha[0]} / {mha[1]} and {gqa[0]} / {gqa[1]} are 0): run "
                         "attention in bf16 (fp8_attention=False), or give the chip's measured speeds")

    def at_full_clock(self) -> KernelEfficiency:
        """The same kernels at the datasheet clock (``sustained_clock = 1``): what a short kernel
        benchmark measures before the power limit binds (attention kernels too)."""
        return replace(self, sustained_clock=1.0, attention_clock=0.0, attention_clock_fa2=0.0)

    def attention_clock_held(self) -> float:
        """The clock fraction this efficiency's attention kernels are priced at (``attention_clock``,
        or ``sustained_clock`` where it is 0)."""
        return self.attention_clock if self.attention_clock > 0.0 else self.sustained_clock

    def shape_efficiency(self, m: float, n: float, k: float, batch: float = 1.0) -> float:
        """The GEMM shape factor (1 without a tile model) for one ``batch x (m x k) @ (k x n)``."""
        from .._kernels.formulas import gemm_shape_efficiency
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
            "Attention 0.618 of peak at long sequences (0.727 per clock): FlashAttention-2 fwd+bwd, causal, "
            "head dim 128, on A100-80GB at 512-16k tokens, 99-189 TFLOP/s (Dao 2023, Fig. 4d; causal FLOPs "
            "halved, as cosearch counts them; an attention benchmark holds the power-limited clock): the "
            "least-squares long-sequence rate, 193.0 TFLOP/s, and length overheads 0.506 of the H200's "
            "(ATTENTION_OVERHEAD_SCALE_A100: forward 1.77, backward 3.92 blocks), every length within "
            "1.3 %; head-dim overhead 16.05 from the same figure's head dim 64 (0.900 of head dim 128).  Memory 0.75: a device copy reaches 1536 and 1490 of 2039 GB/s on A100-80GB "
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
            "GEMMs within -8..+0 %).  Clocks, each kernel class at the clock it holds back to back at the "
            "700 W limit on H200 (h200_kernels.csv, windows after the first second): GEMMs and the rest "
            "1435 / 1830 = 0.784 (8192^3 bf16 GEMMs for 45 s, 692 W; tile-ai/TileOPs #1588: an H200 at 700 W "
            "'cannot reliably sustain' 1830 MHz under full load); cuDNN attention 1839 MHz (8k causal "
            "fwd+bwd for 15 s, 691 W: power-limited too); FlashAttention-2 1980 MHz, the boost clock (587 W: "
            "it never reaches the limit).  A step mixes them: a Llama 3 8B layer's forward+backward ran at "
            "1581 MHz with cuDNN attention and 1680 MHz with FlashAttention-2, and the per-kernel clocks price "
            "both layers within 1.1 % of their measured times (one clock of 1500 MHz for every kernel: +0.2 "
            "% and -6.4 %; tests/test_h200_kernels.py).  Attention 0.526 per clock at long sequences: cuDNN 9.19 fused attention (Transformer "
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
            "express, so the ratio at the power limit is the one used.  FP8 attention (grouped-query, the "
            "only Hopper shape published): 1.48x bf16 forward, 0.81x backward, cuDNN 9.19's SDPA training "
            "benchmark on H200 (FP8_ATTENTION_SPEEDS).",
    "H100-500W": "At 500 W (Meta's Grand Teton H100s): sustained clock 0.6955 of the datasheet clock (1273 "
                 "MHz): FBGEMM's bf16 8192^3 GEMM on 'H100 500W' (pytorch/FBGEMM #2546: 585.2 TFLOP/s; 575.1 and "
                 "546.3 at 65536x8192x7168 and 65536x3584x8192 check it) runs 0.887 as fast as back-to-back "
                 "8192^3 GEMMs at 700 W (659.9 TFLOP/s at 1435 MHz, h200_kernels.csv).  No attention kernel "
                 "was measured at 500 W, so attention runs at that clock too (the 700 W preset's per-kernel "
                 "attention clocks are H200 measurements at 700 W).  FP8 rate 1.965, "
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
                 "datasheet clock (1856 MHz) it gives 1492 MHz for GEMMs and the rest, under FA4's 1580 (0.851 of "
                 "it): GEMMs hold less than an attention loop (on the H200 1435 against 1839-1980 MHz), and no "
                 "B200 GEMM clock is published (SUSTAINED_CLOCK_BLACKWELL).  Attention kernels are priced at "
                 "FA4's own 1580 MHz (ATTENTION_CLOCK_BLACKWELL).  NVFP4 rate 2.871: "
                 "CUTLASS NVFP4 over torch bf16 at 16384 x 6144 x 4096 in the same run (3904.3 / 1360.1, "
                 "vllm-project/vllm #20646, public_kernels.csv rows 35-36), below the 3.36 that the datasheet's "
                 "FP4/FP8 ratio times the FP8 rate would give; GB300 1.5x it (its datasheet's dense FP4).  FP8 "
                 "and MXFP8 attention over bf16 by pass and attention family: cuDNN 9.22's SDPA training "
                 "benchmark on GB200 (B200, GB200) and GB300 (B300, GB300) (FP8_ATTENTION_SPEEDS).",
    "GB200": "GB200 (152 SMs, measured by cudaGetDeviceProperties in Triton's Gluon tutorial 12 and "
             "others; B200 148): sustained clock 0.750 of the 2008 MHz datasheet clock (1506 MHz), the "
             "geometric mean of fp16 cuBLAS at 8192 x 8192 x 2048-16384 over the model at the datasheet "
             "clock (Triton Gluon tutorials, 07-persistence.py; public_kernels.csv rows 59-62); attention "
             "at B200's FA4-to-GEMM clock ratio (1594 MHz).",
    "GB300": "GB300 (148 SMs at 1400 W): sustained clock 0.8845 of the 2062 MHz datasheet clock (1824 "
             "MHz): its cuBLASLt FP8 GEMMs after 10,000 warm-up iterations run 1.1785x the GB200's in the "
             "same benchmark suite (Azure AI-benchmarking-guide, ND GB300 v6 and ND GB200 v6, four large "
             "shapes; public_kernels.csv rows 71-78), where B200's clock fraction gave 1.0714x; attention at "
             "B200's FA4-to-GEMM clock ratio (1931 MHz).",
    "TPU v5": "Tensor 0.9534 (TPU5_TENSOR): XLA's bf16 jnp.matmul at 8192^3 on a TPU v5e runs 181.8 TFLOP/s "
              "(92.3% of 197; jax-ml/jax docs/pallas/tpu/matmul.ipynb, 'XLA matmul' cell, timeit of 100 calls), "
              "over the systolic model's own 190.7 at tensor 1.0 (its fill/drain and padding: 96.8% of peak); "
              "the 4096^3 row of the same cell (166.1, dispatch included) checks it "
              "(cosearch/data/public_kernels.csv rows 33-34).  No TPU v5p or fused-attention kernel "
              "measurement is public: v5p (the same 128 x 128 MXUs) takes v5e's figure, attention is priced at "
              "the matmul rate (an upper bound: a fused attention kernel runs below its chip's plain GEMM), and "
              "memory stays 1.0 (no TPU HBM copy measurement), so TPU predictions remain optimistic by what "
              "XLA's attention and memory-bound kernels lose; no FP8 (v5e/v5p have bf16 and int8 MXUs).",
    "TPU7x": "Tensor 0.8457 (TPU7X_TENSOR): JAX's bf16 matmul on Ironwood runs 950.1 and 956.4 TFLOP/s per "
             "device at 16384^3 and 32768^3 (AI-Hypercomputer/accelerator-microbenchmarks, Ironwood "
             "microbenchmarks readme, GEMM results of gemm_multiple_run, 100 runs each), a device being one "
             "of the chip's two TensorCores (a tpu7x chip exposes two logical JAX devices, per-chip = 2 x "
             "per-device: the same repository's docs/BENCHMARKS.md, section 1.2), so 1,900 and 1,913 per chip; over the systolic model's 2,237 and 2,272 at tensor 1.0, "
             "geometric mean (cosearch/data/public_kernels.csv rows 82-84; the 4096^3 row, 1,786, checks "
             "it at -2.9 %).  The datasheet-only preset (TPU v5's XLA efficiency) ran 9.5-13.2 % over these "
             "rows.  Attention at the matmul rate and memory at 1.0, as on TPU v5 (no Ironwood attention or "
             "HBM copy measurement is public).",
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

#: Per-layer GEMM kernel time on an NVIDIA B300 SXM6, inputs quantized before the timed loop (kernel
#: only), M = 15,872 tokens of a 4,096-wide model (QKV 12,288, attention output, MLP 16,384 up and
#: down), forward + data gradient + weight gradient, through Transformer Engine's GEMM path (cuBLAS,
#: as Megatron-Core runs it): BF16 13.102 ms, per-tensor FP8 (current scaling) 6.812, MXFP8 7.161,
#: NVFP4 3.764 (Transformer Engine ``docs/examples/gemm_profiling/gemm_profiling.rst``, its
#: ``benchmarks/gemm/benchmark_gemm.py --pre-quantize``, pull request #2863, 2026-06-01; FP8 / MXFP8
#: by pass 2.158 / 2.365, 2.329 / 2.397, 2.325 / 2.400).  Its delayed-scaling column is not
#: comparable (it quantizes in the timed loop whatever the flag, as the document says).
TE_B300_GEMM_MS = {"bf16": 13.102, "fp8": 6.812, "mxfp8": 7.161, "nvfp4": 3.764}
#: MXFP8 GEMMs' rate over per-tensor FP8 GEMMs of the same shapes on the same chip: 0.951 (the
#: 1x32 E8M0 block scales the tensor cores apply along K).
MXFP8_GEMM_SPEED = TE_B300_GEMM_MS["fp8"] / TE_B300_GEMM_MS["mxfp8"]

#: Sustained SM clock under continuous load, as a fraction of the clock the datasheet peak uses.
#: A100: the SM clock "drops 1410 -> ~1200 MHz at the power limit" running FlashAttention-2
#: (liangan1/GPU_travel performance/flash-attn/README.md; ../shared/calibration row 20).
SUSTAINED_CLOCK_A100 = 1200.0 / 1410.0
#: H100 / H200 SXM (700 W; the 989 TFLOP/s bf16 peak is 132 SMs x 4096 FLOP/clk at 1830 MHz): the
#: clock GEMMs hold back to back at the power limit, 1435 MHz (8192^3 bf16 GEMMs for 45 s on an
#: H200, 692 W: the mean of cosearch/data/h200_kernels.csv's ``sustained`` windows after the first
#: second; "H200 runners on the current 700W power limit cannot reliably sustain a locked 1830 MHz
#: graphics/SM clock under full load", tile-ai/TileOPs pull request #1588, 2026).  Every kernel but
#: attention runs at it; attention at its own clock (ATTENTION_CLOCK_H100 / _FA2).
SUSTAINED_CLOCK_H100 = 1435.0 / 1830.0
#: The clocks attention kernels hold back to back at 700 W on the H200 (8k causal fwd+bwd for 15 s,
#: windows after the first second, h200_kernels.csv): cuDNN fused attention 1839 MHz at 691 W (at
#: the power limit), FlashAttention-2 1980 MHz at 587 W (the boost clock: under the limit).
ATTENTION_CLOCK_H100 = 1839.0 / 1830.0
ATTENTION_CLOCK_H100_FA2 = 1980.0 / 1830.0
#: B200: back-to-back FlashAttention-4 kernels pull the SM clock "from 1965 MHz to ~1580 MHz"
#: within ~50 ms, TFLOP/s down up to 15% (flashinfer-ai/flashinfer pull request #2899, 2026).
#: The ratio is to the boost clock; the preset's clock is the datasheet's (2.25 PFLOP/s over 148
#: SMs x 8192 FLOP/clk = 1856 MHz), of which it is 1492 MHz, under FA4's 1580 (0.851 of the
#: datasheet clock).  A training step holds less than an attention-only loop: GEMMs draw more
#: power (on the H200 at 700 W back-to-back GEMMs hold 1435 MHz, a FlashAttention-2 Llama layer
#: 1682), and no B200 GEMM clock is published, so the step clock is taken at 1492 MHz, 5.6 %
#: under FA4's.
SUSTAINED_CLOCK_BLACKWELL = 1580.0 / 1965.0
#: B200 attention kernels at FA4's own held clock, 1580 MHz of the 1856 MHz datasheet clock
#: (flashinfer-ai/flashinfer pull request #2899): the only attention clock measured on Blackwell,
#: used for FlashAttention-2-generation kernels too.
ATTENTION_CLOCK_BLACKWELL = 1580.0 / 1856.0
#: GB200 (152 SMs at 1200 W; its datasheet's 2.5 PFLOP/s dense BF16 is 152 x 8192 FLOP/clk at
#: 2008 MHz): the clock its back-to-back cuBLAS GEMMs hold, 1506 MHz (0.750 of the datasheet
#: clock).  Triton's Gluon tutorials (triton-lang/triton pull request #7657, 2025-08,
#: python/tutorials/gluon/07-persistence.py, "Blackwell results", cuBLAS column; its other
#: Blackwell runs name the GB200) time fp16 cuBLAS at M = N = 8192 with triton.testing.do_bench
#: (25 ms of warm-up, 100 ms timed): at K = 2048-16384 they run 0.725-0.781 of the model at the
#: datasheet clock, geometric mean 0.750 (cosearch/data/public_kernels.csv rows 59-62;
#: tests/test_kernel_model.py recomputes it).  The same table's Hopper rows run within 3 % of the
#: H100 preset at its sustained clock (rows 65-68), so those 125 ms reach the power-limited
#: clock.  This replaces B200's FA4 drop applied to GB200's datasheet clock (0.804, 1615 MHz):
#: GB200's datasheet clock sits closer to its boost clock (2062 MHz) than B200's (1856 of 1965),
#: and at the power limit its GEMMs hold about B200's clock (1492 MHz) on 4 more SMs.
SUSTAINED_CLOCK_GB200 = 0.7501
#: GB200's fused attention, at B200's ratio of FA4's held clock to the GEMM clock (1580 / 1492
#: MHz, the clocks above): 1594 MHz.  No attention kernel's clock is published for the GB200.
ATTENTION_CLOCK_GB200 = SUSTAINED_CLOCK_GB200 * ATTENTION_CLOCK_BLACKWELL / SUSTAINED_CLOCK_BLACKWELL
#: GB300 (148 SMs at 1400 W; 2.5 PFLOP/s dense BF16 is a 2062 MHz clock): its GEMMs hold 1.18x the
#: GB200's rate at the power limit.  Azure's AI-benchmarking-guide times cuBLASLt FP8 GEMMs after
#: 10,000 warm-up iterations on both (Azure_Results/ND_GB300_v6_results.md: 3286.3, 3308.5, 3271.3
#: and 3279.5 TFLOP/s at 8192^3, 16384^3, 32768^3 and 6144 x 12288 x 12288; ND_GB200_v6_results.md:
#: 2781.5, 2819.5, 2755.3 and 2798.7; public_kernels.csv rows 71-78): geometric mean 1.1785, where
#: the model at GB200's held clock and B200's fraction for the GB300 (0.804, 1658 MHz) gives 1.0714.
#: So the GB300 holds 0.8845 of its datasheet clock (1824 MHz); its FP8 and BF16 rates per clock are
#: the GB200's (the datasheets' 5 and 2.5 PFLOP/s dense for both), so the FP8 ratio is the clock's.
#: The two runs used CUDA 12.8 (GB200) and 13.0 (GB300).
SUSTAINED_CLOCK_GB300 = 0.8845
#: GB300's fused attention at B200's ratio of FA4's held clock to the GEMM clock (1931 MHz).
ATTENTION_CLOCK_GB300 = SUSTAINED_CLOCK_GB300 * ATTENTION_CLOCK_BLACKWELL / SUSTAINED_CLOCK_BLACKWELL

#: FlashAttention-2 fwd+bwd on A100-80GB, causal, 16k tokens, hidden 2048 (Dao 2023,
#: arXiv:2307.08691, Fig. 4c/4d; the bars of the flash-attention repository's
#: assets/flash2_a100_fwd_bwd_benchmark.png; cosearch/data/public_kernels.csv rows 14 and 85-95),
#: TFLOP/s at sequence 512, 1k, 2k, 4k, 8k and 16k, head dim 128 and head dim 64.
A100_FA2_SEQS = (512, 1024, 2048, 4096, 8192, 16384)
A100_FA2_TFLOPS_HD128 = (99.0, 133.0, 155.0, 173.0, 182.0, 189.0)
A100_FA2_TFLOPS_HD64 = (88.0, 119.0, 140.0, 156.0, 165.0, 171.0)
#: The A100's FlashAttention-2 length curve from its own rates (A100_FA2_TFLOPS_HD128): the
#: H200's forward and backward overheads (ATTENTION_OVERHEAD_FWD / _BWD) times this scale (forward
#: 1.77 blocks, backward 3.92), with a long-sequence rate of A100_FA2_LONG_TFLOPS: the
#: least-squares pair on the log rates of the model's own pricing of each row (every length
#: within 1.3 %; tests/test_kernel_model.py refits it).  The H200's overheads, levelled at 2k,
#: ran 16 % under the 512-token rate and 10 % over the 16k one: the A100's kernel reaches its
#: long-sequence rate sooner (its forward overhead is the 1.8 that FlashAttention-3's and the
#: Triton tutorial's H100 forward rates give, test_attention_length_form_against_published_forward_rates).
ATTENTION_OVERHEAD_SCALE_A100 = 0.5055
A100_FA2_LONG_TFLOPS = 192.97
#: The A100's head-dim overhead (:func:`cosearch._kernels.formulas.attention_head_efficiency`):
#: head dim 64 over head dim 128 in the same figure, geometric mean over the six lengths 0.900
#: (0.889-0.907, flat with length) -> 16.05, the least-squares value on the model's own pricing of
#: the pairs (the H200's FlashAttention-2 sweep: 0.870 -> 22.5).
ATTENTION_HEAD_OVERHEAD_A100 = 16.05
#: Per-clock long-sequence efficiency: A100_FA2_LONG_TFLOPS of 312 at the sustained clock (an
#: attention benchmark holds the power-limited clock, EFFICIENCY_SOURCES["A100"])
_A100_ATTENTION = A100_FA2_LONG_TFLOPS / 312.0 / SUSTAINED_CLOCK_A100
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
#: Fused attention on FP8 / MXFP8 operands over bf16, forward and backward
#: (:data:`ATTENTION_FORMAT_FIELDS`), from cuDNN's own SDPA training benchmark
#: (NVIDIA/cudnn-frontend ``benchmark/sdpa_benchmark_training/results/``: cuDNN 9.22 on GB200 and
#: GB300 at commit fb682ce7, 2026-04-29; cuDNN 9.19 on H200 at df73764a, 2026-03-09; the rows in
#: ``cosearch/data/cudnn_sdpa_training.csv``): causal masks, 2k-32k tokens, the geometric mean over
#: the five lengths of each length's low-precision rate over the bf16 rate of the same shape and
#: pass in the same run (both short kernel benchmarks, so the clock cancels).  Multi-head: the
#: geometric mean of DeepSeek-V3's shape (MLA, 128 heads, head dims 192 / 128) and Kimi-K2.6's (MLA,
#: 64 heads); grouped-query: Llama 3.1 405B's (64 query heads over 8 key/value heads, head dim 128).
#: The two families differ most in the backward (GB200 FP8 1.65x against 1.12x; MXFP8 at short
#: grouped-query sequences runs below bf16, 0.84x at 2k).  Hopper: the H200's Llama rows only
#: (cuDNN 9.19's FP8 kernels refused DeepSeek-V3's head dim 192: "hidden_dim shoud be equal to
#: 128"), FP8's causal backward 0.64-1.06x of bf16; Hopper has no MXFP8.  B200 takes GB200's
#: (the same GPU) and B300 GB300's.  ``tests/test_fp8_attention.py`` recomputes every figure.
FP8_ATTENTION_SPEEDS: dict[str, dict[str, float]] = {
    "Hopper": dict(fp8_attention_gqa_fwd=1.480, fp8_attention_gqa_bwd=0.808),
    "GB200": dict(fp8_attention_fwd=1.489, fp8_attention_bwd=1.651, fp8_attention_gqa_fwd=1.298,
                  fp8_attention_gqa_bwd=1.122, mxfp8_attention_fwd=1.392, mxfp8_attention_bwd=1.324,
                  mxfp8_attention_gqa_fwd=1.209, mxfp8_attention_gqa_bwd=0.987),
    "GB300": dict(fp8_attention_fwd=1.711, fp8_attention_bwd=1.785, fp8_attention_gqa_fwd=1.530,
                  fp8_attention_gqa_bwd=1.212, mxfp8_attention_fwd=1.545, mxfp8_attention_bwd=1.367,
                  mxfp8_attention_gqa_fwd=1.368, mxfp8_attention_gqa_bwd=0.964),
}
_A100_EFF = KernelEfficiency(0.931, _A100_ATTENTION, 0.75, 4e-6, EFFICIENCY_SOURCES["A100"], tile_m=128, tile_n=256,
                             tile_k=64, tile_slots=108, k_overhead=128.0,
                             attention_overhead=ATTENTION_OVERHEAD_FWD * ATTENTION_OVERHEAD_SCALE_A100,
                             attention_overhead_bwd=ATTENTION_OVERHEAD_BWD * ATTENTION_OVERHEAD_SCALE_A100,
                             attention_head_overhead=ATTENTION_HEAD_OVERHEAD_A100,
                             sustained_clock=SUSTAINED_CLOCK_A100)
_H100_EFF = KernelEfficiency(0.856, _H100_ATTENTION, 0.90, 4e-6, EFFICIENCY_SOURCES["H100"], tile_m=128, tile_n=256,
                             tile_k=64, tile_slots=132, k_overhead=128.0, stream_k_fixup=STREAM_K_FIXUP_H100,
                             fp8_rate=FP8_RATE_H100,
                             attention_overhead=ATTENTION_OVERHEAD_FWD, attention_overhead_bwd=ATTENTION_OVERHEAD_BWD,
                             attention_head_overhead=ATTENTION_HEAD_OVERHEAD,
                             attention_head_overhead_fa2=ATTENTION_HEAD_OVERHEAD_FA2, attention_fa2=_H100_ATTENTION_FA2,
                             sustained_clock=SUSTAINED_CLOCK_H100, attention_clock=ATTENTION_CLOCK_H100,
                             attention_clock_fa2=ATTENTION_CLOCK_H100_FA2, **FP8_ATTENTION_SPEEDS["Hopper"])
#: Sustained clock of an H100 held at 500 W (Meta's Grand Teton parts, torchtitan's H100s), as a
#: fraction of the datasheet clock.  FBGEMM's bf16 GEMMs on "H100 500W" (pytorch/FBGEMM pull
#: request #2546, 2024: 585.23, 575.12 and 546.31 TFLOP/s at 8192^3, 65536 x 8192 x 7168 and 65536 x
#: 3584 x 8192; cosearch/data/public_kernels.csv rows 37-39) run at 0.713, 0.695 and 0.659 (mean
#: 0.689) of the H100 model at the datasheet clock; back-to-back 8192^3 GEMMs at 700 W run at 0.804
#: of it (659.9 TFLOP/s, the median of cosearch/data/h200_kernels.csv's ``sustained`` rows after
#: 1 s, at a held 1435 MHz).  The same shape, 8192^3, runs 585.23 / 659.85 = 0.887 as fast at 500 W,
#: so the 500 W GEMM clock is 0.887 x 1435 = 1273 MHz (the kernel's rate in proportion to its
#: clock; SUSTAINED_CLOCK_H100 is the measured 700 W clock, so this one is a clock too, not a
#: model-equivalent).  tests/test_kernel_model.py recomputes it from the rows.
#: Attention kernels run at this clock too: none was measured at 500 W, and the 700 W attention
#: clocks (ATTENTION_CLOCK_H100 / _FA2, cosearch's H200) do not carry over to another power limit on
#: another part (96 GB HBM2e) without a power model that no measurement here supports.
SUSTAINED_CLOCK_H100_500W = 0.6955
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
                         sustained_clock=SUSTAINED_CLOCK_BLACKWELL, attention_clock=ATTENTION_CLOCK_BLACKWELL,
                         attention_clock_fa2=0.0, **FP8_ATTENTION_SPEEDS["GB200"])
#: GB200: Blackwell's kernels on 152 SMs at GB200's own held clocks (SUSTAINED_CLOCK_GB200).
_GB200_EFF = replace(_BLACKWELL_EFF, source=EFFICIENCY_SOURCES["Blackwell"] + "  " + EFFICIENCY_SOURCES["GB200"],
                     tile_slots=152, sustained_clock=SUSTAINED_CLOCK_GB200, attention_clock=ATTENTION_CLOCK_GB200)
#: GB300: Blackwell's kernels at GB300's own held clocks (SUSTAINED_CLOCK_GB300), 1.5x Blackwell's
#: measured NVFP4 rate (its datasheet's dense FP4, 15 against 10 PFLOP/s).
_GB300_EFF = replace(_BLACKWELL_EFF, source=EFFICIENCY_SOURCES["Blackwell"] + "  " + EFFICIENCY_SOURCES["GB300"],
                     fp4_rate=1.5 * FP4_RATE_BLACKWELL, sustained_clock=SUSTAINED_CLOCK_GB300,
                     attention_clock=ATTENTION_CLOCK_GB300, **FP8_ATTENTION_SPEEDS["GB300"])
#: TPU v5's GEMM efficiency on top of the systolic model: XLA's 8192^3 bf16 matmul on a v5e,
#: 181.8 TFLOP/s (jax-ml/jax docs/pallas/tpu/matmul.ipynb), over the model's 190.7 at 1.0
#: (cosearch/data/public_kernels.csv row 33; EFFICIENCY_SOURCES["TPU v5"]).
TPU5_TENSOR = 0.9534
_TPU5_EFF = KernelEfficiency(TPU5_TENSOR, TPU5_TENSOR, source=EFFICIENCY_SOURCES["TPU v5"])
#: TPU7x's (Ironwood's) GEMM efficiency on the systolic model: JAX's bf16 matmuls at 16384^3 and
#: 32768^3 on one of its TensorCores, twice per chip, over the model's rate at 1.0, geometric mean
#: (cosearch/data/public_kernels.csv rows 83-84; EFFICIENCY_SOURCES["TPU7x"]).
TPU7X_TENSOR = 0.8457

#: B200's GEMM clock derived instead from the GB200's held one, scaled to B200's power per SM (1000 W
#: over 148 SMs against 1200 W over 152; the same die) by the clock-power exponent the H100's
#: back-to-back GEMMs show between 500 and 700 W (SUSTAINED_CLOCK_H100_500W over
#: SUSTAINED_CLOCK_H100: 0.887 of the clock at 0.714 of the power, exponent 0.357): 1425 MHz, 0.768
#: of B200's datasheet clock.  A sensitivity alternative (SUSTAINED_CLOCK_ALTERNATIVES), not the
#: chosen value: the exponent is the H100's and the power split between SMs and the rest of the
#: board is not published.
B200_CLOCK_FROM_GB200 = (SUSTAINED_CLOCK_GB200 * 2.5 / 2.25 * (148.0 / 152.0)
                         * ((1000.0 / 148.0) / (1200.0 / 152.0)) ** (math.log(SUSTAINED_CLOCK_H100_500W / SUSTAINED_CLOCK_H100)
                                                                     / math.log(500.0 / 700.0)))

#: The sourced alternatives to each sustained clock (fractions of the datasheet-peak clock), for
#: sensitivity reports (bench/bench_fidelity.py prints every group's error at each): the
#: datasheet clock itself, and the other published measurements quoted above.
SUSTAINED_CLOCK_ALTERNATIVES: dict[str, tuple[tuple[str, float], ...]] = {
    "A100": (("chosen: FA2 at the power limit, 1200 MHz", SUSTAINED_CLOCK_A100), ("datasheet 1410 MHz", 1.0)),
    "H100": (("chosen: back-to-back GEMMs at 700 W, 1435 MHz (H200)", SUSTAINED_CLOCK_H100),
             ("1500 MHz at 700 W (TileOPs #1588)", 1500.0 / 1830.0),
             ("a FlashAttention-2 Llama layer, 1682 MHz (H200)", 1682.0 / 1830.0), ("datasheet 1830 MHz", 1.0)),
    "H100-500W": (("chosen: 0.887 of the 700 W GEMM clock (FBGEMM's 8192^3)", SUSTAINED_CLOCK_H100_500W),
                  ("0.857 of it (FBGEMM's three shapes over the model)", 0.689 / 0.804 * SUSTAINED_CLOCK_H100),
                  ("FBGEMM's 500 W GEMMs directly, 0.689", 0.689), ("datasheet 1830 MHz", 1.0)),
    "Blackwell": (("chosen: 1492 MHz (FA4's drop applied to the datasheet clock)", SUSTAINED_CLOCK_BLACKWELL),
                  ("FA4's measured 1580 MHz", 1580.0 / 1856.0),
                  ("GB200's held GEMM clock at B200's power per SM, 1425 MHz", B200_CLOCK_FROM_GB200),
                  ("datasheet 1856 MHz", 1.0)),
    "GB300": (("chosen: 1.18x GB200's held FP8 GEMMs (Azure, 10,000 warm-ups), 1824 MHz", SUSTAINED_CLOCK_GB300),
              ("B200's FA4 drop applied to the datasheet clock, 1658 MHz", SUSTAINED_CLOCK_BLACKWELL),
              ("datasheet 2062 MHz", 1.0)),
    "GB200": (("chosen: cuBLAS GEMMs back to back, 1506 MHz (Gluon tutorial)", SUSTAINED_CLOCK_GB200),
              ("B200's FA4 drop applied to the datasheet clock, 1615 MHz", SUSTAINED_CLOCK_BLACKWELL),
              ("datasheet 2008 MHz", 1.0)),
}


#: The sourced alternatives to Blackwell's low-precision GEMM rates over bf16 (``fp8_rate``,
#: ``fp4_rate``), for sensitivity reports as :data:`SUSTAINED_CLOCK_ALTERNATIVES`
#: (bench/bench_fidelity.py prints every Blackwell FP8 and NVFP4 group's error at each): the chosen
#: rates (CUTLASS against torch's bf16 matmul on a B200, vLLM; NVFP4 on Blackwell Ultra, B300 and
#: GB300, scaled by the datasheets' dense FP4, 15 / 10 PFLOP/s) and Transformer Engine's cuBLAS
#: ratios on a B300 (:data:`TE_B300_GEMM_MS`: FP8 / BF16 1.92, NVFP4 / BF16 3.48, scaled back by
#: 10 / 15 for B200 and GB200).  Keys: ``"fp8"``, ``"fp4"`` (B200, GB200), ``"fp4-ultra"``.
LOW_PRECISION_RATE_ALTERNATIVES: dict[str, tuple[tuple[str, float], ...]] = {
    "fp8": (("chosen: CUTLASS FP8 / torch bf16 on a B200 (vLLM #19566), 1.68x", FP8_RATE_BLACKWELL),
            ("TE's cuBLAS per-tensor FP8 / BF16 on a B300, 1.92x", TE_B300_GEMM_MS["bf16"] / TE_B300_GEMM_MS["fp8"])),
    "fp4": (("chosen: CUTLASS NVFP4 / torch bf16 on a B200 (vLLM #20646), 2.87x", FP4_RATE_BLACKWELL),
            ("TE's cuBLAS NVFP4 / BF16 on a B300 x 10/15 (datasheet FP4), 2.32x",
             TE_B300_GEMM_MS["bf16"] / TE_B300_GEMM_MS["nvfp4"] / 1.5)),
    "fp4-ultra": (("chosen: 1.5x B200's CUTLASS NVFP4 (datasheet FP4), 4.31x", 1.5 * FP4_RATE_BLACKWELL),
                  ("TE's cuBLAS NVFP4 / BF16 on a B300, 3.48x", TE_B300_GEMM_MS["bf16"] / TE_B300_GEMM_MS["nvfp4"])),
}
