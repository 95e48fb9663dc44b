"""The one copy of the training-performance physics, as njit functions.

Both :func:`cosearch.plan.evaluate` (one fixed plan, called from Python) and the
placement search kernel (:mod:`cosearch._kernels.dp`) call these functions, so a rule
changes in one place.  Arguments are plain scalars and float64 rows whose columns are
named by the constants below.

Collectives (``net`` row, :data:`cosearch.cluster.NET_FIELDS`)
-------------------------------------------------------------
A group of ``n`` ranks ``stride`` apart holds ``k = min(n, cpn // stride)`` members per
node (``k = n`` on a flat domain, ``1`` when ``stride >= cpn``) over ``q = n / k`` nodes.
With ``B_i``/``B_e`` the achievable intra/inter per-chip bandwidths and ``a_i``/``a_e``
the latencies, an all-reduce of ``S`` bytes is hierarchical::

    AR(S) = 2 (k-1)/k S / B_i + 2 (k-1) a_i  +  2 (q-1)/q (S/k) / B_e + 2 (q-1) a_e

(reduce-scatter inside the node, all-reduce of the 1/k shard across nodes on every
member's own NIC, all-gather inside the node).  Reduce-scatter and all-gather cost half.
On a torus (``torus_side > 0``) the group spans ``d = ceil(log n / log side)`` (at most 3)
dimensions and rings run on ``2 d`` links: ``B = 2 d B_i``.  A point-to-point send costs
``S / B + a`` on the link between the two ranks.

Stage of a pipeline (``u`` row: :data:`UNIT_FIELDS`, ``hw`` row: :data:`HW_FIELDS`)
--------------------------------------------------------------------------------
A stage holds ``n`` transformer layers (+ the embedding on the first stage, + the head
on the last).  Per microbatch it spends ``T = F + B + R + C_tp + P`` seconds: forward
and backward compute, recompute (``selective``: the attention core again; ``full``:
the whole forward of its layers incl. their TP communication), tensor-parallel
collectives, ``2 v`` pipeline sends (interleaving with ``v`` virtual stages
multiplies them; whole activations or Megatron's scatter/gather over the tp ranks, by
engine, :mod:`cosearch.engine`), and the engine's gradient-accumulation pass over the
stage's parameters (``grad_accum_bytes`` per parameter at the achievable HBM bandwidth; 0
when the backward GEMMs accumulate in place).  With ZeRO-3 the per-microbatch parameter all-gathers (forward and
backward) and gradient reduce-scatter overlap with that work: ``T = max(T, Z3)``.
After the last microbatch it spends ``E`` seconds: the data-parallel gradient
all-reduce (ZeRO 0) or reduce-scatter + parameter all-gather (ZeRO 1/2; the
distributed optimizer) of ``grad_reduce_bytes`` per gradient element, the reduction
hidden behind the backward of the last microbatch when ``overlap`` (the engine's); the tied embedding's gradient all-reduce between the
first and last stage; the optimizer step (Adam reads and writes master weights and
both moments, reads the gradient and writes the weight: ``2 o + g + w`` bytes per
parameter, sharded by ZeRO >= 1) and per-step fixed work (gradient-norm read and
gradient zeroing, ``2 g`` bytes per parameter, sharded by ZeRO >= 2), all at the
achievable HBM bandwidth.  The step time is::

    step = max over stages of  (m + (p - 1) / v) * T_s + E_s

(1F1B: ``m`` microbatches plus the ``(p - 1) / v`` bubble of the interleaved schedule).
Under MaxText's SPMD circular pipeline (``hw`` field ``circular_pipeline``: its forwarding delay
``d``, 1 or 2; 0 for 1F1B) a pass of ``mp`` microbatches (``pipeline_pass_microbatches``; 0: all
``m``) runs ``mp v + d (p - 1)`` iterations of one ``1 / v`` chunk of each stage's layers, so the
bubble is paid once per pass, ``(m / mp) d (p - 1) / v``; every stage holds :func:`inflight_circular` stage-equivalents of
activations, and a ``1 / p`` share of the embedding and head, which run outside the loop.
``stage_cost`` is non-decreasing in ``n`` (the exposed part of the overlapped gradient
reduction falls by at most one backward per layer, which the pipeline term outgrows),
and so is the stage's memory — the property the exact partition search relies on.

Memory per chip: weights ``w``, gradients ``g`` and optimizer state ``o`` bytes per
parameter, sharded over ``dp`` by ZeRO (1: ``o``; 2: ``g + o``; 3: all, plus two
gathered layers of the sharded weights as working buffers); activations of the in-flight
microbatches: ``min(p - s, m)`` for 1F1B, ``min(2 (p - s - 1) + (v - 1) p + 1, m v) / v``
stage-equivalents for the interleaved schedule (Narayanan et al. 2021; for ``s = 0``
this is Korthikanti et al.'s ``p (1 + (p - 1) / (p v))``); full recompute keeps each
layer's input plus one layer's full activations.
"""

from __future__ import annotations

import math

from numba import njit

# ---------------------------------------------------------------- column layouts
#: per-(tp, microbatch, sequence-parallel) unit costs, one row
UNIT_FIELDS = (
    "layer_fwd_s", "layer_bwd_s", "layer_attn_s", "layer_tp_fwd_s", "layer_tp_bwd_s",
    "emb_fwd_s", "emb_bwd_s", "emb_tp_fwd_s", "emb_tp_bwd_s",
    "head_fwd_s", "head_bwd_s", "head_tp_fwd_s", "head_tp_bwd_s",
    "act_none_bytes", "act_selective_bytes", "act_input_bytes", "emb_act_bytes", "head_act_bytes",
    "p2p_bytes", "p2p_gather_s",
    "layer_params", "emb_params", "head_params", "tied_params", "layer_params_full",
    "layer_cp_fwd_s", "layer_cp_bwd_s", "layer_expert_params", "expert_parallel",
    "mtp_layers", "mtp_head_time", "mtp_head_act", "mtp_params", "layer_ep_overlap_save_s",
    "layer_tp_overlap_extra_fwd_s", "layer_tp_overlap_extra_bwd_s", "act_host_bytes", "layer_tp_overlap_save_s",
    "moe_buffer_bytes",
)
(U_LF, U_LB, U_LATT, U_LTPF, U_LTPB, U_EF, U_EB, U_ETPF, U_ETPB, U_HF, U_HB, U_HTPF, U_HTPB,
 U_ACT_NONE, U_ACT_SEL, U_ACT_IN, U_EACT, U_HACT, U_P2P_BYTES, U_P2P_GATHER,
 U_PL, U_PE, U_PH, U_PTIED, U_PL_FULL, U_LCPF, U_LCPB, U_PLX, U_EP,
 U_MTP, U_MTPT, U_MTPA, U_PMTP, U_EPO, U_TPXF, U_TPXB, U_ACT_HOST, U_TPOS, U_BUF) = range(len(UNIT_FIELDS))
NU = len(UNIT_FIELDS)

#: chip / training-numerics constants, one row
HW_FIELDS = ("hbm_bytes", "weight_bytes", "grad_bytes", "optimizer_bytes", "mem_Bps", "overlap_dp",
             "grad_accum_bytes", "grad_reduce_bytes", "blocking_p2p", "zero3_per_layer",
             "overlap_param_gather", "lowp_weight_bytes", "offload_layers", "host_Bps", "overlap_tp_comm",
             "full_grad_allreduce", "overlap_p2p_comm", "comm_sm_share", "circular_pipeline",
             "pipeline_pass_microbatches", "recompute_layers")
(H_HBM, H_W, H_G, H_O, H_MEMBW, H_OVERLAP, H_GACC, H_GRED, H_P2PB, H_Z3_LAYER, H_PG_OVERLAP,
 H_W8, H_OFFLOAD, H_HOSTBW, H_TP_OVERLAP, H_FULL_AR, H_P2PO, H_COMM_SHARE, H_CIRC,
 H_PASS_MB, H_RC_LAYERS) = range(len(HW_FIELDS))
NH = len(HW_FIELDS)

N_CPN, N_BWI, N_BWE, N_LATI, N_LATE, N_TORUS = range(6)

#: recompute modes
RC_NONE, RC_SELECTIVE, RC_FULL = 0, 1, 2
RECOMPUTE_MODES = ("none", "selective", "full")

#: breakdown row written by stage_terms (seconds per step unless noted)
BREAKDOWN_FIELDS = ("forward_s", "backward_s", "recompute_s", "tp_comm_s", "cp_comm_s", "pp_p2p_s", "bubble_s",
                    "dp_exposed_s", "optimizer_s", "grad_accum_s", "offload_s")
(B_FWD, B_BWD, B_REC, B_TP, B_CP, B_P2P, B_BUBBLE, B_DP, B_OPT, B_GACC, B_OFF) = range(len(BREAKDOWN_FIELDS))
# extra columns after the breakdown
B_T, B_E, B_MEM, B_PARAMS, B_COST = range(len(BREAKDOWN_FIELDS), len(BREAKDOWN_FIELDS) + 5)
NB = len(BREAKDOWN_FIELDS) + 5


#: kernel-efficiency row (:class:`cosearch.hardware.KernelEfficiency`, ``EFF_FIELDS`` order)
(E_TENSOR, E_ATTN, E_MEM, E_LAUNCH, E_TILE_M, E_TILE_N, E_TILE_K, E_SLOTS, E_K_OVERHEAD, E_FP8, E_FP4,
 E_ATTN_OVERHEAD, E_CLOCK, E_STREAM_K, E_ATTN_OVERHEAD_BWD, E_ATTN_HEAD, E_CAST, E_CAST_AMAX, E_ATTN_CLOCK,
 E_ATTN_SPEED_FWD, E_ATTN_SPEED_BWD) = range(21)

#: design-array columns of the tensor unit's FP8 and FP4 MACs per PE (``DESIGN_FIELDS``' last two)
D_FP8_MACS = 12
D_FP4_MACS = 13


@njit(cache=True, inline="always")
def fp32_gemm_cycles(m, n, k, batch, lanes):
    """Cycles of ``batch`` GEMMs ``(m x k) @ (k x n)`` on FP32 operands: CUDA runs an FP32 GEMM on
    the vector lanes (one FP32 multiply-add a lane a cycle), not the tensor cores, unless TF32 is
    allowed (``torch.backends.cuda.matmul.allow_tf32``, off by default since PyTorch 1.12), as
    H100's datasheet FP32 and BF16 rates, 67 and 989 TFLOP/s, show (128 FP32 lanes against 2,048
    bf16 MACs an SM): ``m n k batch / lanes``, independent of the tensor unit (its waves and
    its size leave an FP32 GEMM as it is).  ``lanes``: vector units x width (x the core fraction)."""
    return m * n * k * batch / lanes


@njit(cache=True, inline="always")
def tensor_format_rate(dtype_bytes, eff_fp8, eff_fp4, fp8_macs, fp4_macs):
    """How many times faster a GEMM on ``dtype_bytes``-wide tensor-unit operands runs than the same
    GEMM in bf16: 1 for 2-byte operands; for FP8 (1 byte) the kernel model's measured rate
    ``eff_fp8`` where it has one (a real chip's), else the design's tensor unit, ``fp8_macs``
    FP8 MACs per PE per cycle; for FP4 (under a byte: NVFP4) likewise ``eff_fp4``, else the
    design's ``fp4_macs``.  0 where the chip cannot multiply in that format at all (the GEMM
    cannot run: priced as never finishing).  FP32 runs on the vector lanes instead
    (:func:`fp32_gemm_cycles`)."""
    if dtype_bytes >= 2.0:
        return 1.0
    if dtype_bytes == 1.0:
        return eff_fp8 if eff_fp8 > 0.0 else fp8_macs
    if dtype_bytes < 1.0:
        return eff_fp4 if eff_fp4 > 0.0 else fp4_macs
    return 1.0          # between 1 and 2 bytes: no such tensor format, priced as bf16


@njit(cache=True, inline="always")
def operand_traffic_bytes(m, n, k, batch, rows, cols, dtype_bytes):
    """Global-buffer <-> core traffic of ``batch`` GEMMs ``(m x k) @ (k x n)`` on weight-stationary
    ``rows x cols`` arrays: the weights once (``k n``), the inputs once per column of weight tiles
    (``m k ceil(n / cols)``), and one fp32 partial sum per output per row of weight tiles
    (``4 m n ceil(k / rows)`` bytes, reduced through the buffer)."""
    return batch * (k * n * dtype_bytes + m * k * dtype_bytes * math.ceil(n / cols)
                    + m * n * 4.0 * math.ceil(k / rows))


#: Query rows per thread block of a fused attention kernel (FlashAttention-2/3 at head dim 128).
ATTN_BLOCK = 128.0


@njit(cache=True, inline="always")
def attention_length_efficiency(sq, overhead_blocks):
    """Fraction of a fused attention kernel's long-sequence rate reached with ``sq`` query rows:
    each thread block of :data:`ATTN_BLOCK` query rows streams the keys in blocks of the same
    size and pays a fixed prologue/epilogue (loading Q, writing O and the softmax statistics)
    worth ``overhead_blocks`` key blocks, so with ``T = sq / ATTN_BLOCK`` blocks of work the
    useful fraction is ``T / (T + overhead_blocks)``.  1 where ``overhead_blocks`` is 0."""
    if overhead_blocks <= 0.0:
        return 1.0
    t = sq / ATTN_BLOCK
    return t / (t + overhead_blocks)


@njit(cache=True, inline="always")
def attention_head_efficiency(head_dim, head_overhead):
    """Fraction of a fused attention kernel's head-dim-128 rate (per FLOP) reached at
    ``head_dim``: each score element costs ``head_dim`` multiply-adds in each matmul plus softmax
    work worth ``head_overhead`` more (exp, max, rescale), so the useful fraction is
    ``1 / (1 + head_overhead / head_dim)``, over its value at 128.  1 where either is 0."""
    if head_overhead <= 0.0 or head_dim <= 0.0:
        return 1.0
    return (1.0 + head_overhead / 128.0) / (1.0 + head_overhead / head_dim)


@njit(cache=True, inline="always")
def fused_attention_efficiency(sq, n, k, head_dim, eff):
    """The factor a fused attention op's rate gets beside ``eff[E_ATTN]``: the length factor with
    the forward's (``eff[E_ATTN_OVERHEAD]``) or, for a backward (``k > 1.5 head_dim``: its
    ``k`` is 2.5 head dims of work), the backward's overhead (``eff[E_ATTN_OVERHEAD_BWD]``), times
    the head-dim factor.  An attention op without a head dim (a measured row that gives none,
    :func:`cosearch.cost.calibrate`) gets the forward's length factor alone; the batched matmuls
    of unfused attention are GEMMs (``bmm``: the tensor path and its shape model).

    A fused op's ``n`` is the keys it meets in causal-attention units (``sk`` for full causal
    attention, fewer under a sliding window, chunks or a sparse selection:
    :meth:`cosearch.graph._Builder.attention`).  The per-block prologue/epilogue is paid by every
    block of ``ATTN_BLOCK`` query rows whatever keys it meets, so the length factor is taken at
    ``min(sq, n)`` rows: ``sq`` for full causal attention (the length it was measured at), and
    for a window of ``w`` keys the time is ``n + ATTN_BLOCK * overhead`` units per query row, not
    ``n (sq + ATTN_BLOCK * overhead) / sq``.  Under context parallelism (``sq`` a rank's share,
    ``n`` all the keys, met in ring steps of ``sq`` keys each paying the overhead) it stays
    ``sq``."""
    if head_dim <= 0.0:
        return attention_length_efficiency(sq, eff[E_ATTN_OVERHEAD])
    over = eff[E_ATTN_OVERHEAD_BWD] if k > 1.5 * head_dim else eff[E_ATTN_OVERHEAD]
    rows = sq if sq < n else n
    return attention_length_efficiency(rows, over) * attention_head_efficiency(head_dim, eff[E_ATTN_HEAD])


@njit(cache=True, inline="always")
def attention_format_speed(k, head_dim, dtype_bytes, eff):
    """How many times faster a fused attention op runs than in bf16: a fused kernel (a head dim)
    on low-precision operands (``dtype_bytes`` under 2: FP8 or MXFP8 Q, K, V) at the speed in
    force, the forward's (``eff[E_ATTN_SPEED_FWD]``) or a backward's (``k > 1.5 head_dim``,
    ``eff[E_ATTN_SPEED_BWD]``; :meth:`cosearch.hardware.KernelEfficiency.with_fp8_attention`);
    every other op 1."""
    if head_dim <= 0.0 or dtype_bytes >= 2.0:
        return 1.0
    return eff[E_ATTN_SPEED_BWD] if k > 1.5 * head_dim else eff[E_ATTN_SPEED_FWD]


@njit(cache=True, inline="always")
def attention_clock_of(head_dim, eff):
    """The fraction of the datasheet clock an attention op runs at: a fused kernel's
    (``head_dim > 0``) at the clock attention kernels hold (``eff[E_ATTN_CLOCK]``), one without a
    head dim at the sustained clock (``eff[E_CLOCK]``), as GEMMs run (the batched matmuls of
    unfused attention are priced as GEMMs)."""
    return eff[E_ATTN_CLOCK] if head_dim > 0.0 else eff[E_CLOCK]


# ---------------------------------------------------------------- GEMM shape efficiency
@njit(cache=True, inline="always")
def gemm_shape_efficiency(m, n, k, batch, tile_m, tile_n, tile_k, slots, k_overhead, stream_k_fixup):
    """Fraction of a GPU's best-shape GEMM rate that a ``batch`` x (m x k) @ (k x n) GEMM
    reaches, from how a tiled kernel maps onto the chip (wave and tile quantisation).

    The output is cut into ``tile_m x tile_n`` thread-block tiles; ``slots`` of them run at
    once (one per SM).  Along K a tile runs ``ceil(k / tile_k)`` main-loop steps of ``tile_k``
    plus a pipeline prologue and epilogue worth ``k_overhead`` more (the software pipeline
    filling its stages before the first MMA).

    Without stream-K (``stream_k_fixup`` 0) the kernel takes ``waves = ceil(tiles / slots)``
    rounds of whole tiles: the useful fraction of the SM-rounds is ``m n batch / (waves slots
    tile_m tile_n)`` (partial last wave, padded edge tiles, idle SMs of a small GEMM) times
    ``k / (ceil(k / tile_k) tile_k + k_overhead)``.  With stream-K (``stream_k_fixup`` > 0, K-
    elements; Hopper's cuBLAS / CUTLASS 3 persistent kernels) the full waves run whole tiles
    and the tiles of the partial last wave are split along K evenly over all ``slots`` SMs, each
    paying ``stream_k_fixup`` K-elements for the partial-tile reduction: the kernel takes
    ``full * S + max(rem * S / slots, 1) + stream_k_fixup / tile_k`` steps, ``S`` a tile's steps,
    ``full`` and ``rem`` the whole waves and the tiles left over (no share is smaller than one
    main-loop step), or the whole-tile waves' ``ceil(tiles / slots) * S`` where that is fewer (the
    library runs the faster decomposition: a GEMM of one partial wave or a short K is not split).  1 where ``slots <= 0``
    (the model is off: search-space designs are priced on the plain roofline)."""
    if slots <= 0.0:
        return 1.0
    tiles = batch * math.ceil(m / tile_m) * math.ceil(n / tile_n)
    waves = math.ceil(tiles / slots)
    if stream_k_fixup > 0.0:
        steps = math.ceil(k / tile_k) + k_overhead / tile_k
        full = math.floor(tiles / slots)
        rem = tiles - full * slots
        if rem > 0.0:
            share = rem * steps / slots
            if share < 1.0:     # K is split no finer than one main-loop step
                share = 1.0
            split = full * steps + share + stream_k_fixup / tile_k
            if split < waves * steps:
                return (m * n * batch * k) / (slots * tile_m * tile_n * tile_k * split)
    spatial = (m * n * batch) / (waves * slots * tile_m * tile_n)
    temporal = k / (math.ceil(k / tile_k) * tile_k + k_overhead)
    return spatial * temporal


# ---------------------------------------------------------------- collectives
@njit(cache=True)
def group_layout(n, stride, net):
    """(members per node k, nodes q) of a group of n ranks `stride` apart."""
    cpn = net[N_CPN]
    if cpn <= 0.0:
        return n, 1.0
    if stride >= cpn:
        return 1.0, n
    k = math.floor(cpn / stride)
    if k > n:
        k = n
    if k < 1.0:
        k = 1.0
    if n % k != 0.0:
        return 1.0, n
    return k, n / k


@njit(cache=True)
def _intra_bw(n, net):
    side = net[N_TORUS]
    if side > 0.0:
        d = 1.0
        if n > side:
            d = math.ceil(math.log(n) / math.log(side) - 1e-9)
        if d > 3.0:
            d = 3.0
        return 2.0 * d * net[N_BWI]
    return net[N_BWI]


@njit(cache=True)
def allreduce_s(nbytes, n, stride, net):
    """Hierarchical (ring) all-reduce of nbytes over n ranks `stride` apart."""
    if n <= 1.0 or nbytes <= 0.0:
        return 0.0
    k, q = group_layout(n, stride, net)
    t = 0.0
    if k > 1.0:
        t += 2.0 * (k - 1.0) / k * nbytes / _intra_bw(k, net) + 2.0 * (k - 1.0) * net[N_LATI]
    if q > 1.0:
        t += 2.0 * (q - 1.0) / q * (nbytes / k) / net[N_BWE] + 2.0 * (q - 1.0) * net[N_LATE]
    return t


@njit(cache=True)
def allgather_s(nbytes, n, stride, net):
    """All-gather (or reduce-scatter) whose full result is nbytes: half an all-reduce."""
    return 0.5 * allreduce_s(nbytes, n, stride, net)


@njit(cache=True)
def p2p_s(nbytes, stride, net):
    """Send nbytes to the rank `stride` away."""
    if nbytes <= 0.0:
        return 0.0
    cpn = net[N_CPN]
    if cpn > 0.0 and stride >= cpn:
        return nbytes / net[N_BWE] + net[N_LATE]
    return nbytes / _intra_bw(2.0, net) + net[N_LATI]


@njit(cache=True)
def alltoall_s(nbytes, n, stride, net):
    """All-to-all over n ranks `stride` apart, each rank holding ``nbytes`` spread evenly over
    the group (MoE token dispatch/combine): ``(k - 1) / n`` of it goes to the other members of
    its node over the intra-node link and ``(n - k) / n`` to other nodes over its own NIC, the
    exchanges running at once (one latency per link type)."""
    if n <= 1.0 or nbytes <= 0.0:
        return 0.0
    k, q = group_layout(n, stride, net)
    t = 0.0
    if k > 1.0:
        t += (k - 1.0) / n * nbytes / _intra_bw(k, net) + net[N_LATI]
    if q > 1.0:
        t += (n - k) / n * nbytes / net[N_BWE] + net[N_LATE]
    return t


#: Megatron-Core's MoE token dispatchers (``moe_token_dispatcher_type``): ``alltoall`` (NCCL
#: all-to-all of every routed copy) and ``flex`` (DeepEP / HybridEP: each token once per rank).
DISPATCH_ALLTOALL, DISPATCH_FLEX = 0, 1

#: HybridEP's achieved NVLink rate as a share of the cluster's achievable intra-node rate
#: (``N_BWI``, the NCCL fraction 0.80 of the wire on the Hopper and Blackwell presets):
#: deepseek-ai/DeepEP branch ``hybrid-ep``, ``docs/README_Hybrid-EP.md``, GB200 table, "Torch
#: API" BF16 dispatch and combine at 16 and 32 SMs over 8-36 ranks, 4096 tokens x 7168 hidden,
#: top-8, random uniform routing: 418-569 GB/s, mean 487 GB/s of received bytes (local rows
#: included, as ``tests/test_hybrid_ep.py`` counts ``nvl_recv_bytes``) = 0.54 of NVLink 5's
#: 900 GB/s per direction; 0.54 / 0.80 = 0.68.  (B200, 8 ranks: 531-536 GB/s, 0.59.)
FLEX_NVLINK_SHARE = 0.68
#: HybridEP's achieved RDMA rate as a share of the cluster's achievable inter-node rate
#: (``N_BWE``, 0.90 of the NIC): the same document's H100 table, "Torch API" BF16 dispatch and
#: combine at 8 and 16 SMs over 16-64 ranks: 41-58 GB/s, mean 49.7 GB/s of bytes sent over
#: RDMA (a token once per remote node) = 0.99 of a 400 Gb/s NIC; 0.99 / 0.90 = 1.10.
FLEX_RDMA_SHARE = 1.10
#: DeepEP's achieved NVLink rate, the same way from the same benchmark of the same document
#: (its GB200 table of DeepEP, "Torch API" BF16 dispatch and combine at 16 and 32 SMs over 8-24
#: ranks, 4096 tokens x 7168 hidden, top-8): 126.5-615.8 GB/s, mean 378.3 GB/s = 0.42 of 900 GB/s;
#: 0.42 / 0.80 = 0.525.  (B200, 8 ranks, the same SMs: 302-619 GB/s, mean 448 GB/s, 0.50.)  Its
#: RDMA rate is taken as HybridEP's: DeepEP's own internode figures (``docs/legacy.md``, H800 with
#: 400 Gb/s CX7, 16-64 ranks: 43-58 GB/s, mean 50.3) are the same 1.0 of the NIC.
FLEX_DEEPEP_NVLINK_SHARE = 0.525


@njit(cache=True)
def expert_group_hit(experts, group, k):
    """Probability that ``group`` of a layer's ``experts`` experts hold at least one of a
    token's ``k`` routed experts, the top-k a uniform random k-subset (Megatron-Core's
    ``moe_router_force_load_balancing`` draws the router's logits at random): one minus
    ``C(E - g, k) / C(E, k)``."""
    if group >= experts:
        return 1.0
    miss = 1.0
    for i in range(int(k)):
        x = experts - group - i
        if x <= 0.0:
            return 1.0
        miss *= x / (experts - i)
    return 1.0 - miss


@njit(cache=True)
def flex_alltoall_s(copies_bytes, n, stride, net, k, experts, nvl_share=FLEX_NVLINK_SHARE):
    """Dispatch (or combine) over ``n`` expert-parallel ranks ``stride`` apart by DeepEP /
    HybridEP (Megatron-Core's ``flex`` dispatcher), each rank holding ``copies_bytes`` of routed
    copies (``k`` per token) of ``experts / n`` experts each.  Each token goes once to every
    rank that holds one of its experts (``n`` times :func:`expert_group_hit` ranks, its own
    included), and between nodes once to every other node that does (``q - 1`` times the hit of
    ``experts / q`` experts), forwarded over NVLink inside the node; the NVLink and RDMA parts
    run pipelined, at HybridEP's measured rates (:data:`FLEX_NVLINK_SHARE`,
    :data:`FLEX_RDMA_SHARE`; DeepEP's NVLink one: ``nvl_share`` :data:`FLEX_DEEPEP_NVLINK_SHARE`).
    A group with one rank per node has no NVLink part.  Ranks
    ``stride`` > 1 apart are those of expert tensor parallelism over the ``stride`` tensor-parallel
    ranks between them: Megatron-Core's flex dispatcher runs one group over all ``stride x n``
    ranks and sends the token to each of them that splits a hit expert ("the routing_map is
    replicated across TP group", ``_initialize_metadata``): ``stride`` times the NVLink part,
    the RDMA part unchanged (once to a node); so even ``n`` = 1 exchanges over the tp ranks."""
    reps = stride if stride > 1.0 else 1.0
    if n * reps <= 1.0 or copies_bytes <= 0.0:
        return 0.0
    kn, q = group_layout(n, stride, net)
    token = copies_bytes / k
    t = 0.0
    if kn * reps > 1.0:
        t = token * n * reps * expert_group_hit(experts, experts / n, k) / (
            nvl_share * _intra_bw(kn * reps, net)) + net[N_LATI]
    if q > 1.0:
        r = token * (q - 1.0) * expert_group_hit(experts, experts / q, k) / (FLEX_RDMA_SHARE * net[N_BWE]) \
            + net[N_LATE]
        if r > t:
            t = r
    return t


#: A collective op's kind as the kernels read it (:data:`cosearch.graph.NETWORK_KINDS`): a
#: reduce-scatter costs what the all-gather of its full result does.
COLL_ALLREDUCE, COLL_ALLGATHER, COLL_ALLTOALL = 0, 1, 2


@njit(cache=True)
def collective_s(kind, nbytes, tp, net, ep, stride, k, experts, nvl_share=FLEX_NVLINK_SHARE):
    """One collective of ``nbytes`` (``kind``: ``COLL_*``): a tensor-parallel all-reduce or
    all-gather over the ``tp`` adjacent ranks, or an MoE all-to-all over the ``ep``
    expert-parallel ranks ``stride`` apart, by NCCL (:func:`alltoall_s`) or, with ``k > 0``
    (top-k of ``experts``), by the ``flex`` dispatcher (:func:`flex_alltoall_s` at its backend's
    ``nvl_share``)."""
    if kind == COLL_ALLREDUCE:
        return allreduce_s(nbytes, tp, 1.0, net)
    if kind == COLL_ALLTOALL:
        if k > 0.0:
            return flex_alltoall_s(nbytes, ep, stride, net, k, experts, nvl_share)
        return alltoall_s(nbytes, ep, stride, net)
    return allgather_s(nbytes, tp, 1.0, net)


@njit(cache=True)
def collectives_grid(kinds, nbytes, grows, scales, tp, nets, ep, stride, k, experts, out,
                     nvl_share=FLEX_NVLINK_SHARE):
    """:func:`collective_s` of every collective ``c`` (``kinds[c]``, ``nbytes[c]``) on every
    network row ``nets[i]`` at every token scale ``scales[j]`` (the bytes of those that
    ``grows[c]`` with the tokens times it): ``out[i, j, c]`` (one call for a plan-search cell's
    graphs instead of one per collective, network and scale)."""
    for i in range(nets.shape[0]):
        for j in range(scales.shape[0]):
            for c in range(kinds.shape[0]):
                b = nbytes[c] * scales[j] if grows[c] else nbytes[c]
                out[i, j, c] = collective_s(kinds[c], b, tp, nets[i], ep, stride, k, experts, nvl_share)
    return out


#: The combined 1F1B layer schedule of :func:`ep_overlap_pair_s`: the compute stream's ops (af,
#: mb, mw, mf, ab) and how many of the communication stream's (cb, df, db, cf) each waits for
#: (mb the backward's combine, mf the forward's dispatch, ab the backward's dispatch), and the
#: communication ops and how many compute ops each waits for (df the forward's attention side,
#: db the expert data-gradients, cf the forward's experts).
_PAIR_COMP_WAITS = (0, 1, 0, 2, 3)
_PAIR_COMM_WAITS = (0, 1, 2, 4)


@njit(cache=True)
def ep_overlap_pair_s(af, df, mf, cf, cb, mb, mw, db, ab, x):
    """Seconds for one layer's forward of one microbatch and backward of another under
    Megatron-Core's ``overlap_moe_expert_parallel_comm`` (the combined 1F1B schedule,
    ``TransformerLayerSchedulePlan.run``): on the communication stream the backward's combine
    (``cb``), the forward's dispatch (``df``), the backward's dispatch (``db``) and the forward's
    combine (``cf``); on the compute stream the forward's attention side (``af``: everything but
    the experts), the backward's expert data-gradients (``mb``) and weight-gradients (``mw``), the
    forward's experts (``mf``) and the backward's attention side (``ab``), each in stream order
    and waiting for its inputs: mb for cb, df for af, db for mb, mf for df, cf for mf, ab for db.
    While a communication op runs, a compute op progresses at ``1 - x`` (``x``: the share of SMs
    the communication kernels hold, in [0, 1)).  Simulated event by event (piecewise linear,
    exact).  Without overlap the two would take the sum of the nine times."""
    comp = (af, mb, mw, mf, ab)
    comm = (cb, df, db, cf)
    i = 0
    j = 0
    rc = comp[0]
    ra = comm[0]
    t = 0.0
    while i < 5 or j < 4:
        run_c = i < 5 and j >= _PAIR_COMP_WAITS[i]
        run_a = j < 4 and i >= _PAIR_COMM_WAITS[j]
        if run_c and rc <= 0.0:
            i += 1
            rc = comp[i] if i < 5 else 0.0
            continue
        if run_a and ra <= 0.0:
            j += 1
            ra = comm[j] if j < 4 else 0.0
            continue
        if not (run_c or run_a):
            break                       # unreachable: the schedule has no cycle
        rate = (1.0 - x) if (run_c and run_a) else 1.0
        dc = rc / rate if run_c else math.inf
        da = ra if run_a else math.inf
        if dc <= da:
            t += dc
            rc = 0.0
            if run_a:
                ra -= dc
        else:
            t += da
            ra = 0.0
            if run_c:
                rc -= da * rate
    return t


#: Transformer Engine's userbuffers overlap methods (``initialize_ub``'s defaults,
#: ``transformer_engine/pytorch/module/base.py``): ``ring_exchange`` for the all-gather before
#: QKV and FC1 and before the output-projection and FC2 data-gradients (copy engines, one SM,
#: ``num_splits = tp``); ``pipeline`` for the reduce-scatter after the output projection and FC2
#: (16 SMs, 4 splits, the GEMM on the other SMs: ``set_sm_margin``); ``bulk`` for the
#: reduce-scatter of the QKV and FC1 data-gradients beside their weight-gradient GEMMs (16 SMs).
UB_RING, UB_PIPELINE, UB_BULK = 0, 1, 2
UB_COMM_SMS = 16.0
UB_PIPELINE_SPLITS = 4.0


@njit(cache=True)
def userbuffers_exposed_s(method, gemm_s, comm_s, tp, sms):
    """Seconds a collective of ``comm_s`` adds to its paired GEMM of ``gemm_s`` under Transformer
    Engine's userbuffers overlap (``method``: :data:`UB_RING`, :data:`UB_PIPELINE`,
    :data:`UB_BULK`), ``tp`` ranks, a chip of ``sms`` SMs (0: no SM model, no slow-down).

    * ring exchange, ``tp`` chunks over the copy engines: the local chunk's GEMM first, then each
      of the other ``tp - 1`` chunks' transfer beside the previous chunk's GEMM:
      ``g / tp + (tp - 1) max(g / tp, c / (tp - 1))``.
    * pipeline, 4 chunks, the GEMM on ``sms - 16`` SMs (``g' = g sms / (sms - 16)``): each chunk's
      reduce-scatter beside the next chunk's GEMM, the last one exposed:
      ``g' / 4 + 3 max(g' / 4, c / 4) + c / 4``.
    * bulk: the whole reduce-scatter beside the whole GEMM on the other SMs: ``max(g', c)``.

    Returns the pair's time less ``gemm_s``."""
    if comm_s <= 0.0:
        return 0.0
    slow = sms / (sms - UB_COMM_SMS) if sms > UB_COMM_SMS else 1.0
    if method == UB_RING:
        if tp <= 1.0:
            return comm_s
        step = gemm_s / tp
        x = comm_s / (tp - 1.0)
        t = step + (tp - 1.0) * (step if step > x else x)
    elif method == UB_PIPELINE:
        k = UB_PIPELINE_SPLITS
        g = gemm_s * slow / k
        x = comm_s / k
        t = g + (k - 1.0) * (g if g > x else x) + x
    else:
        g = gemm_s * slow
        t = g if g > comm_s else comm_s
    return t - gemm_s


@njit(cache=True)
def ring_step_s(nbytes, n, stride, net):
    """One step of a ring exchange over ``n`` ranks ``stride`` apart (context parallelism's
    K/V ring): every rank sends ``nbytes`` to its neighbour at once, so a step takes the
    slowest hop — an inter-node one when the ring leaves the node (``n * stride`` ranks
    exceed a node), else an intra-node one."""
    if nbytes <= 0.0 or n <= 1.0:
        return 0.0
    cpn = net[N_CPN]
    if cpn > 0.0 and n * stride > cpn:
        return nbytes / net[N_BWE] + net[N_LATE]
    return nbytes / _intra_bw(2.0, net) + net[N_LATI]


@njit(cache=True)
def ring_exposed_s(step_bytes, n, stride, compute_s, net):
    """Exposed time of a ring exchange overlapped with compute, as context parallelism runs
    attention (Megatron-Core's ``AttnFuncWithCPAndKVP2P``, torchtitan's ring attention): the
    work is ``n`` chunks of ``compute_s / n``; while chunk ``i`` is computed the K/V of chunk
    ``i + 1`` arrives, so each of the ``n - 1`` transfers hides behind one chunk and only
    ``(n - 1) max(0, step - compute_s / n)`` is exposed."""
    if n <= 1.0:
        return 0.0
    step = ring_step_s(step_bytes, n, stride, net)
    x = step - compute_s / n
    return (n - 1.0) * x if x > 0.0 else 0.0


@njit(cache=True)
def ring_exposed_grid(step_bytes, n, stride, compute_s, nets, net_of, out):
    """:func:`ring_exposed_s` for every (design ``i``, size ``j``): ``out[i, j]`` of
    ``step_bytes[j]`` over ``compute_s[i, j]`` on network row ``nets[net_of[i]]`` (one call for a
    plan-search cell instead of one per design and microbatch size)."""
    for i in range(compute_s.shape[0]):
        net = nets[net_of[i]]
        for j in range(compute_s.shape[1]):
            out[i, j] = ring_exposed_s(step_bytes[j], n, stride, compute_s[i, j], net)
    return out


# ---------------------------------------------------------------- memory
@njit(cache=True)
def static_bytes(params, dp, zero, w, g, o):
    """Weights + gradients + optimizer state of `params` parameters under ZeRO `zero`."""
    if zero == 0:
        return params * (w + g + o)
    if zero == 1:
        return params * (w + g + o / dp)
    if zero == 2:
        return params * (w + (g + o) / dp)
    return params * (w + g + o) / dp


@njit(cache=True, inline="always")
def checkpoint_groups(n, v, span):
    """The activation checkpoints of a stage of ``n`` layers in ``v`` chunks (virtual stages)
    checkpointed ``span`` layers at a time (:attr:`cosearch.engine.Engine.recompute_layers`):
    ``v ceil(n / (v span))`` — each chunk's layers grouped from its first, the last group
    shorter.  ``n`` where ``span`` is 1."""
    if span <= 1.0 or n <= 0.0:
        return n
    return v * math.ceil(n / (v * span) - 1e-9)


@njit(cache=True)
def inflight_circular(pp, mp, v, delay):
    """Stage-equivalents of activations every stage holds under MaxText's SPMD circular
    pipeline (``layers/pipeline.py``): autodiff through its scan over ``mp v + delay (pp - 1)``
    iterations keeps every iteration's saved tensors until the backward, the ``delay (pp - 1)``
    bubble iterations' included, each a chunk of ``1 / v`` of the stage's layers (``mp``: the
    pipeline's microbatches, ``v``: its repeats, ``delay``: its forwarding delay, 2 under
    ``pipeline_delay_activation_forwarding``, else 1)."""
    return mp + delay * (pp - 1.0) / v


@njit(cache=True)
def inflight(s, pp, m, v):
    """Stage-equivalents of activations stage s holds (1F1B / interleaved 1F1B)."""
    if v <= 1:
        c = pp - s
        return float(c if c < m else m)
    chunks = 2 * (pp - s - 1) + (v - 1) * pp + 1
    if chunks > m * v:
        chunks = m * v
    return chunks / float(v)


# ---------------------------------------------------------------- whole-model work
@njit(cache=True)
def unit_work(u, layers):
    """Compute + TP seconds of one microbatch through the whole model (no recompute, no
    pipeline sends), less what the expert-parallel all-to-all overlap can save per layer at most
    (``u[U_EPO]``: a step pairs at most every microbatch's forward with another's backward) and
    what an engine's tensor-parallel overlap hides of each layer's TP collectives
    (``u[U_TPOS]``: :func:`stage_terms` charges ``max(0, TP - compute)`` plus the overlap
    kernels' extra where ``overlap_tp_comm``), so that it bounds the stage cost from below.  ``u``
    may also be a (fields, ...) array through ``unit_work.py_func``."""
    return (layers * (u[U_LF] + u[U_LB] + u[U_LTPF] + u[U_LTPB] - u[U_EPO] - u[U_TPOS]) + u[U_EF] + u[U_EB] + u[U_ETPF]
            + u[U_ETPB] + u[U_HF] + u[U_HB] + u[U_HTPF] + u[U_HTPB])


# ---------------------------------------------------------------- one stage
@njit(cache=True, inline="always")
def layer_tp_seconds(u, hw):
    """The tensor-parallel seconds a layer's forward and backward take on their own stream
    (``(forward, backward)``): every collective second (``U_LTPF``, ``U_LTPB``), or, where the
    engine overlaps them with the layer's GEMMs (``overlap_tp_comm``), only what exceeds the
    layer's compute plus what the overlap kernels expose beyond that (``U_TPXF``, ``U_TPXB``:
    userbuffers_exposed_s).  A layer's wall time is its compute plus these: the window that the
    data-parallel reduction, ZeRO-3's prefetch and activation offload hide behind."""
    if hw[H_TP_OVERLAP] > 0.0:
        # max(0, x) written as (x + |x|) / 2 (exact): the same code serves arrays of unit rows
        # through ``layer_tp_seconds.py_func`` (cosearch.plan's work-bound save)
        xf = u[U_LTPF] - u[U_LF]
        xb = u[U_LTPB] - u[U_LB]
        return 0.5 * (xf + abs(xf)) + u[U_TPXF], 0.5 * (xb + abs(xb)) + u[U_TPXB]
    return u[U_LTPF], u[U_LTPB]


@njit(cache=True, inline="always")
def overlapped_exposed_s(comm_s, window_s, share):
    """Seconds a collective of ``comm_s`` adds to ``window_s`` of compute it runs beside, when
    its kernels hold ``share`` of the SMs (NCCL's CTAs: :data:`cosearch.engine.NCCL_COLLECTIVE_CTAS`
    over the chip's SMs; 0: no contention).  While the collective runs the compute proceeds at
    ``1 - share`` of its rate, so the pair takes ``window + share comm`` when the compute
    outlasts the collective and ``comm`` when it does not:
    ``max(comm - window, share comm)`` beyond the window (``max(0, comm - window)`` at 0)."""
    x = comm_s - window_s
    y = comm_s * share
    return x if x > y else y


@njit(cache=True)
def overlapped_exposed_grid(comm_s, window_s, share, out):
    """:func:`overlapped_exposed_s` element by element over equal-shaped 2-D arrays: ``out[i, j]``
    of ``comm_s[i, j]`` beside ``window_s[i, j]``."""
    for i in range(comm_s.shape[0]):
        for j in range(comm_s.shape[1]):
            out[i, j] = overlapped_exposed_s(comm_s[i, j], window_s[i, j], share)
    return out


@njit(cache=True)
def fsdp_exposed_s(u, net, hw, n, first, last, dp, zg, tp, rec):
    """ZeRO-3 communication of one microbatch that per-layer prefetch cannot hide (PyTorch
    FSDP/FSDP2, MaxText's FSDP): each unit — a layer; the embedding and the head are units
    of their own — is gathered for the forward and again for the backward and its gradient
    reduce-scattered after its backward, and the next unit's gather is issued while the
    current one computes (one unit ahead).  Per pass the first layer's gather is exposed
    whole, and every other unit exposes what its collectives exceed its own compute: forward
    ``AG + sum_{u > 1} max(0, AG_u - F_u)``, backward ``AG + RS + sum_{u > 1} max(0, AG_u + RS_u
    - B_u)`` (the last reduce-scatter is waited for too; a recomputed forward runs inside its
    unit's backward).  With no compute at all this is every gather and reduce-scatter one
    after another: ``n`` layer gathers per pass and ``n`` reduce-scatters per microbatch.
    The collectives' kernels hold ``hw[H_COMM_SHARE]`` of the SMs while they run, which slows
    the compute beside them (:func:`overlapped_exposed_s`)."""
    w = hw[H_W]
    gr = hw[H_GRED]
    ep = u[U_EP] if u[U_EP] > 1.0 else 1.0
    dpx = dp / ep                          # the expert weights' own group (see stage_terms)
    pld = u[U_PL] - u[U_PLX]
    agl = allgather_s(pld * w, zg, tp, net) + allgather_s(u[U_PLX] * w, dpx, tp * ep, net)
    rsl = allgather_s(pld * gr, zg, tp, net) + allgather_s(u[U_PLX] * gr, dpx, tp * ep, net)
    tpf, tpb = layer_tp_seconds(u, hw)
    lf = u[U_LF] + tpf + u[U_LCPF]
    lb = u[U_LB] + tpb + u[U_LCPB]
    if n > 0.0:
        lb += rec / n
    sh = hw[H_COMM_SHARE]
    rest = n - 1.0 if n >= 1.0 else 0.0
    out = agl + (agl + rsl) + rest * (overlapped_exposed_s(agl, lf, sh) + overlapped_exposed_s(agl + rsl, lb, sh))
    if first:
        out += _unit_exposed(u[U_PE], u[U_EF] + u[U_ETPF], u[U_EB] + u[U_ETPB], w, gr, zg, tp, net, sh)
    if last:
        # the head unit (with any multi-token prediction modules' head passes and projections)
        out += _unit_exposed(u[U_PH] + u[U_PMTP], u[U_HF] * (1.0 + u[U_MTPT]) + u[U_HTPF] * (1.0 + u[U_MTPA]),
                             u[U_HB] * (1.0 + u[U_MTPT]) + u[U_HTPB] * (1.0 + u[U_MTPA]), w, gr, zg, tp, net, sh)
    return out


@njit(cache=True, inline="always")
def _unit_exposed(params, fwd, bwd, w, gr, zg, tp, net, share):
    """What one prefetched FSDP unit's gather (forward) and gather + reduce-scatter (backward)
    expose beyond its own compute, their kernels holding ``share`` of the SMs."""
    ag = allgather_s(params * w, zg, tp, net)
    rs = allgather_s(params * gr, zg, tp, net)
    return overlapped_exposed_s(ag, fwd, share) + overlapped_exposed_s(ag + rs, bwd, share)


@njit(cache=True)
def stage_terms(u, net, hw, n, first, last, s, pp, v, m, dp, tp, zero, zg, mode, out):
    """Cost of stage s holding n layers (+ embedding if first, + head if last) under
    recompute `mode`; fills `out` (:data:`BREAKDOWN_FIELDS` then T, E, memory, params,
    cost) and returns (cost, memory) with cost = m T + (pp-1)/v T' + E, T' = T (less the
    pipeline transfers under a blocking engine).

    ``dp``: the ranks holding the same weights, ``tp`` apart in rank order (data x context
    parallel ranks); ``zg``: the ZeRO sharding group inside them (a divisor of ``dp``,
    consecutive ranks; ``dp / zg`` replicas of it are all-reduced across).  MoE expert
    weights (``u[U_PLX]`` of each layer's parameters) live on ``ep`` (``u[U_EP]``) of those
    ranks each, so their gradients are reduced — and ZeRO shards them — over the ``dp / ep``
    ranks ``tp * ep`` apart that hold the same experts (Megatron-Core's expert data parallel
    group); a ZeRO group smaller than that is not applied to them.

    Multi-token prediction (``u[U_MTP]`` modules, DeepSeek-V3's): the last stage also runs each
    module's transformer layer (as one more of its layers: time, weights, activations) and its
    output head again (``u[U_MTPT]`` head-times, its ``2h -> h`` projection included;
    ``u[U_MTPA]`` head-activations; ``u[U_PMTP]`` the projection's and norms' weights)."""
    # MaxText's circular pipeline (hw[H_CIRC]): every stage runs a 1/pp share of the embedding and
    # the head outside the pipeline loop (their batch is sharded over the stage axis too), and
    # keeps its saved tensors for all of a pass's iterations (inflight_circular)
    circ = hw[H_CIRC] > 0.0 and pp > 1
    if last and not circ:
        n = n + u[U_MTP]
    f = n * u[U_LF]
    b = n * u[U_LB]
    # tensor-parallel collectives, or under an engine that overlaps them with the layer's GEMMs
    # (Megatron-Core's tp_comm_overlap, XLA's collective matmul) only what they expose
    tpf, tpb = layer_tp_seconds(u, hw)
    # what the forward and the backward take beside their compute (TP collectives as they run,
    # the CP ring's exposed part): their wall time is the window other traffic hides behind
    side_f = n * (tpf + u[U_LCPF])
    side_b = n * (tpb + u[U_LCPB])
    tpc = n * (tpf + tpb)
    cpc = n * (u[U_LCPF] + u[U_LCPB])
    params = n * u[U_PL]
    pexp = n * u[U_PLX]
    ep = u[U_EP] if u[U_EP] > 1.0 else 1.0
    dpx = dp / ep
    act = n * (u[U_ACT_NONE] if mode == RC_NONE else (u[U_ACT_SEL] if mode == RC_SELECTIVE
                                                       else u[U_ACT_IN]))
    # checkpoints spanning hw[H_RC_LAYERS] layers (Engine.recompute_layers): a group keeps its
    # first layer's input only, the others' rerun from it
    span = hw[H_RC_LAYERS] if hw[H_RC_LAYERS] > 1.0 else 1.0
    if span > 1.0 and mode != RC_NONE and n > 0:
        act -= (n - checkpoint_groups(n, v, span)) * u[U_ACT_IN]
    ends_act = 0.0          # circular: the embedding's and head's activations, the whole pass's batch
    head_act = 0.0          # the last stage's head's (and multi-token prediction's) activations
    mp = float(m)
    if circ:
        if hw[H_PASS_MB] > 0.0:
            mp = hw[H_PASS_MB]
        sh = 1.0 / pp
        f += sh * (u[U_EF] + u[U_HF])
        b += sh * (u[U_EB] + u[U_HB])
        tpc += sh * (u[U_ETPF] + u[U_ETPB] + u[U_HTPF] + u[U_HTPB])
        side_f += sh * (u[U_ETPF] + u[U_HTPF])
        side_b += sh * (u[U_ETPB] + u[U_HTPB])
        params += sh * (u[U_PE] + u[U_PH])
        ends_act = mp * sh * (u[U_EACT] + u[U_HACT])
    if first and not circ:
        f += u[U_EF]
        b += u[U_EB]
        tpc += u[U_ETPF] + u[U_ETPB]
        side_f += u[U_ETPF]
        side_b += u[U_ETPB]
        params += u[U_PE]
        act += u[U_EACT]
    if last and not circ:
        f += u[U_HF] * (1.0 + u[U_MTPT])
        b += u[U_HB] * (1.0 + u[U_MTPT])
        tpc += (u[U_HTPF] + u[U_HTPB]) * (1.0 + u[U_MTPA])
        side_f += u[U_HTPF] * (1.0 + u[U_MTPA])
        side_b += u[U_HTPB] * (1.0 + u[U_MTPA])
        params += u[U_PH] + u[U_PMTP]
        head_act = u[U_HACT] * (1.0 + u[U_MTPA])
        act += head_act
        if pp > 1:
            params += u[U_PTIED]
    rec = 0.0
    if mode == RC_SELECTIVE:
        rec = n * (u[U_LATT] + u[U_LCPF])
    elif mode == RC_FULL:
        # the recomputed forward runs as the forward does, its TP collectives overlapped alike
        rec = n * (u[U_LF] + tpf + u[U_LCPF])
    p2p = 0.0
    p2p_chain = 0.0
    if pp > 1:
        send = p2p_s(u[U_P2P_BYTES], tp * dp, net)
        if hw[H_P2PB] > 0.0:
            # one blocking transfer at a time: receive activation, send its gradient back,
            # send activation on, receive its gradient (the end stages have one neighbour);
            # every received (partitioned) tensor is all-gathered
            k = 2.0 if (first or last) else 4.0
            p2p = k * send + 0.5 * k * u[U_P2P_GATHER]
        else:
            # per chunk, two exchanges that send and receive at once
            x = send + u[U_P2P_GATHER]
            p2p = 2.0 * v * x
            p2p_chain = p2p
            if hw[H_P2PO] > 0.0 and v > 1:
                # overlap_p2p_comm: the forward exchange runs beside a backward chunk, the
                # backward exchange beside a forward chunk; only the excess is exposed
                xf = x - (b + rec) / v
                xb = x - f / v
                p2p = v * ((xf if xf > 0.0 else 0.0) + (xb if xb > 0.0 else 0.0))
    w = hw[H_W]
    g = hw[H_G]
    o = hw[H_O]
    gr = hw[H_GRED]
    gacc = params * hw[H_GACC] / hw[H_MEMBW]
    # activation offload (Megatron-Core's cpu_offloading_num_layers): the saved activations of
    # up to `offload_layers` of the stage's layers go to host memory during the forward and come
    # back during the backward on a side stream; each transfer hides behind its layer's compute
    off = 0.0
    k_off = hw[H_OFFLOAD] if hw[H_OFFLOAD] < n else n
    if k_off > 0.0 and mode != RC_FULL:
        a_l = u[U_ACT_NONE] if mode == RC_NONE else u[U_ACT_SEL]
        x = a_l / hw[H_HOSTBW]
        xf = x - (u[U_LF] + tpf + u[U_LCPF])
        xb = x - (u[U_LB] + tpb + u[U_LCPB])
        off = k_off * ((xf if xf > 0.0 else 0.0) + (xb if xb > 0.0 else 0.0))
        act -= k_off * a_l
    # a selective policy's host-offloaded tensors (MaxText's remat_policy custom, 'offload'): every
    # layer sends them during its forward and fetches them during its backward, each transfer
    # beside that layer's compute
    if mode == RC_SELECTIVE and u[U_ACT_HOST] > 0.0 and n > 0:
        x = u[U_ACT_HOST] / hw[H_HOSTBW]
        xf = x - (u[U_LF] + tpf + u[U_LCPF])
        xb = x - (u[U_LB] + tpb + u[U_LCPB] + u[U_LATT])
        off += n * ((xf if xf > 0.0 else 0.0) + (xb if xb > 0.0 else 0.0))
    work = f + b + rec + tpc + cpc + p2p + gacc + off
    t = work
    sharded = zero == 3 and zg > 1.0      # ZeRO-3 shards the dense weights, gathered before use
    if sharded:
        if hw[H_Z3_LAYER] > 0.0:
            t = work + fsdp_exposed_s(u, net, hw, n, first and not circ, last and not circ, dp, zg, tp, rec)
        else:
            # the stage's gathers and reduce-scatter run beside all of its microbatch work
            pd = params - pexp
            z3 = (2.0 * allgather_s(pd * w, zg, tp, net) + allgather_s(pd * gr, zg, tp, net)
                  + 2.0 * allgather_s(pexp * w, dpx, tp * ep, net) + allgather_s(pexp * gr, dpx, tp * ep, net))
            t = work + overlapped_exposed_s(z3, work, hw[H_COMM_SHARE])
    # ---- after the last microbatch
    gcomm = 0.0
    pgather = 0.0
    reps = dp / zg
    pd = params - pexp
    if zero == 0:
        gcomm = allreduce_s(pd * gr, dp, tp, net) + allreduce_s(pexp * gr, dpx, tp * ep, net)
    elif zero <= 2:
        if hw[H_FULL_AR] > 0.0:
            # the gradients all-reduced in full before each rank updates its partition
            # (DeepSpeed's BF16_Optimizer under its pipeline engine)
            gcomm = allreduce_s(pd * gr, dp, tp, net) + allreduce_s(pexp * gr, dpx, tp * ep, net)
        else:
            gcomm = (allgather_s(pd * gr, zg, tp, net) + allreduce_s(pd * gr / zg, reps, tp * zg, net)
                     + allgather_s(pexp * gr, dpx, tp * ep, net))
        pgather = allgather_s(pd * w, zg, tp, net) + allgather_s(pexp * w, dpx, tp * ep, net)
    else:
        # sharded gradients of the zg-group replicas (HSDP); nothing when one group holds all
        gcomm = allreduce_s(pd * gr / zg, reps, tp * zg, net)
    if hw[H_OVERLAP] > 0.0:
        # the reduction hides behind the backward's wall time, its kernels holding some SMs
        exposed = overlapped_exposed_s(gcomm, b + rec + side_b, hw[H_COMM_SHARE])
    else:
        exposed = gcomm
    if hw[H_PG_OVERLAP] > 0.0:
        # the updated parameters are gathered behind the next step's first forward (its wall time)
        exposed += overlapped_exposed_s(pgather, f + side_f, hw[H_COMM_SHARE])
    else:
        exposed += pgather
    if pp > 1 and not circ and (first or last) and u[U_PTIED] > 0.0:
        exposed += allreduce_s(u[U_PTIED] * gr, 2.0, tp * dp * (pp - 1.0), net)
    opt_shard = zg if zero >= 1 else 1.0
    fixed_shard = zg if zero >= 2 else 1.0
    xopt_shard = dpx if zero >= 1 else 1.0
    xfixed_shard = dpx if zero >= 2 else 1.0
    opt = (pd * ((2.0 * o + g + w) / opt_shard + 2.0 * g / fixed_shard)
           + pexp * ((2.0 * o + g + w) / xopt_shard + 2.0 * g / xfixed_shard)) / hw[H_MEMBW]
    e = exposed + opt
    # ---- memory
    held = inflight_circular(pp, mp, v, hw[H_CIRC]) if circ else inflight(s, pp, m, v)
    mem = static_bytes(pd, zg, zero, w, g, o) + static_bytes(pexp, dpx, zero, w, g, o) + held * act + ends_act
    mem += pd * hw[H_W8] / (zg if zero == 3 else 1.0) + pexp * hw[H_W8] / (dpx if zero == 3 else 1.0)
    # the layers one checkpoint spans rerun together under full recompute, their activations held
    # at once
    rerun = 0.0
    if mode == RC_FULL and n > 0:
        rerun = u[U_ACT_NONE] * (span if span < n else n)
    # an MoE dispatcher's communication buffers (the flex backends'), once a rank with layers
    if n > 0:
        mem += u[U_BUF]
    # ZeRO-3's working buffers: a unit's gathered weights and the next unit's, prefetched — of the
    # parts that are sharded, the dense ones over zg, the experts over their dp / ep ranks
    # (unsharded experts stay resident) (circular: chunks of the stage's layers, the iteration's
    # and the next one's); lw is one layer's (one chunk's)
    chunk = n / v if circ and n > v else 1.0
    lw = 0.0
    if sharded:
        lw += chunk * (u[U_PL_FULL] - u[U_PLX]) * w
    if zero == 3 and dpx > 1.0:
        lw += chunk * u[U_PLX] * w
    if last and not circ:
        # two phases on the last stage.  The head's: its activations (the logits, in ``act``),
        # its weight gathered whole under ZeRO-3 (a tied embedding's too) and the last layer's
        # prefetched.  The layers': the head's backward has freed the logits before any layer
        # reruns or runs its backward, so a rerunning group and two layers' weights stand in their
        # place, and a tied embedding's gradient, whole: one stage holding both the embedding and
        # the head waits for the embedding's own backward before reducing it.  The larger phase
        # counts (the compiler's live buffers at the peaks of MaxText's Gemma recipes compiled for
        # a v6e: cosearch/data/maxtext_compiled_live.csv)
        hgw = 0.0
        tied_grad = 0.0
        if sharded:
            hgw = (u[U_PH] + u[U_PTIED]) * w
            if first:
                tied_grad = u[U_PTIED] * w
        head_phase = hgw + lw
        layer_phase = rerun + 2.0 * lw + tied_grad - head_act
        mem += head_phase if head_phase > layer_phase else layer_phase
    else:
        mem += rerun + 2.0 * lw
    # the fill and drain: Megatron-LM's exchanges sit on that path; a blocking engine's
    # transfers there meet a stage idle anyway (its simulated schedule, tests/reference.py)
    # with overlap_p2p_comm the fill and drain still wait on every transfer of the chain
    fill = t - p2p if hw[H_P2PB] > 0.0 else t + (p2p_chain - p2p)
    # circular: the bubble is paid once per pass of mp microbatches, each bubble iteration priced
    # at a stage's whole microbatch time (its 1/pp share of the embedding and head included, which
    # the loop does not run: kept so the plan search's lower bound stays one)
    fills = m / mp * hw[H_CIRC] if circ else 1.0         # passes times the forwarding delay
    # EP all-to-all overlap (Megatron-Core's combined 1F1B): every forward chunk of the steady
    # state runs beside a backward one, each pair of layers saving u[U_EPO]; the warm-up's
    # forwards (one more than the schedule's own, and the single first forward without a
    # pipeline) and the cool-down's backwards run alone
    ovl = 0.0
    if u[U_EPO] > 0.0:
        warm = 1.0
        if pp > 1:
            warm = 2.0 * (pp - s - 1.0) + (v - 1.0) * pp + 1.0
        chunks = m * v
        if warm > chunks:
            warm = chunks
        ovl = (chunks - warm) / v * n * u[U_EPO]
    cost = m * t - ovl + fills * (pp - 1.0) / v * fill + e
    out[B_FWD] = m * f
    out[B_BWD] = m * b
    out[B_REC] = m * rec
    out[B_TP] = m * tpc - ovl
    out[B_CP] = m * cpc
    out[B_P2P] = m * p2p
    out[B_BUBBLE] = fills * (pp - 1.0) / v * fill
    out[B_DP] = m * (t - work) + exposed
    out[B_OPT] = opt
    out[B_GACC] = m * gacc
    out[B_OFF] = m * off
    out[B_T] = t
    out[B_E] = e
    out[B_MEM] = mem
    out[B_PARAMS] = params
    out[B_COST] = cost
    return cost, mem
