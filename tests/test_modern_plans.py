"""Today's training plans: context parallelism, FP8, ZeRO sharding groups, the FSDP /
Megatron-Core engines and the 2023-25 chips — each against a hand-worked case, and the plan
search over the new dimensions against brute force over evaluate()."""

import itertools
import math
from dataclasses import replace

import numpy as np
import pytest

from cosearch import cluster, cost, graph, hardware, memory, models, placement
from cosearch._kernels import formulas as F
from cosearch.plan import PlanSpec, evaluate, unit_costs
from tests.test_placement import MODES, _compositions, _divs, cached_units  # noqa: F401  (fixture)

TINY = models.ModelConfig("t", 2, 64, 4, 256, 512, 64, kv_heads=2, activation="swiglu", position="rotary",
                          tie_embeddings=False)
MOE_SMALL = models.ModelConfig("moe-small", 2, 128, 4, 256, 1000, 512, kv_heads=2, activation="swiglu",
                               norm="rmsnorm", position="rotary", bias=False, dropout=False, num_experts=8,
                               experts_per_token=2, moe_ffn_hidden=64)


# ------------------------------------------------------------------ context parallelism
def test_ring_exposed_hand_worked():
    # flat domain, 100 GB/s, 1 us: a 1 GB step takes 10.001 ms; 4 chunks of 20 ms / 4 = 5 ms
    net = np.array([0.0, 100e9, 100e9, 1e-6, 1e-6, 0.0])
    assert F.ring_exposed_s(1e9, 4.0, 1.0, 0.020, net) == pytest.approx(3 * (0.010001 - 0.005))
    assert F.ring_exposed_s(1e9, 4.0, 1.0, 0.080, net) == 0.0          # hidden: 20 ms per chunk
    assert F.ring_exposed_s(1e9, 1.0, 1.0, 0.0, net) == 0.0            # no ring
    # nodes of 8: a ring of 4 ranks 4 apart leaves the node -> the 10 GB/s inter-node hop sets the pace
    nodes = np.array([8.0, 100e9, 10e9, 1e-6, 5e-6, 0.0])
    assert F.ring_exposed_s(1e9, 4.0, 4.0, 0.0, nodes) == pytest.approx(3 * (0.1 + 5e-6))
    assert F.ring_exposed_s(1e9, 4.0, 2.0, 0.0, nodes) == pytest.approx(3 * (0.01 + 1e-6))
    # the grid kernel (every design and size of a plan-search cell at once) is the scalar formula
    # cell by cell, each design on its own network row
    nets = np.stack([net, nodes])
    step = np.array([1e8, 1e9, 3e9])
    compute = np.array([[0.0, 0.020, 0.5], [0.001, 0.080, 0.0], [0.2, 0.0, 0.004]])
    net_of = np.array([1, 0, 1], dtype=np.int64)
    got = F.ring_exposed_grid(step, 4.0, 4.0, compute, nets, net_of, np.empty((3, 3)))
    want = [[F.ring_exposed_s.py_func(step[j], 4.0, 4.0, compute[i, j], nets[net_of[i]]) for j in range(3)]
            for i in range(3)]
    assert np.array_equal(got, np.array(want))


def test_context_parallel_splits_work_and_activations_exactly():
    m = TINY
    for part in ("layer", "embedding", "head"):
        for ph in ("fwd", "bwd"):
            one = sum(op.flops for op in graph.build(m, 1, 2, ph, part, flash_attention=True).ops)
            two = sum(op.flops for op in graph.build(m, 1, 2, ph, part, flash_attention=True,
                                                     context_parallel=2).ops)
            assert two * 2 == pytest.approx(one, rel=1e-12), (part, ph)
    cl = cluster.Cluster(4)
    u1 = unit_costs(m, hardware.H100, cl, (1,), (2,), (False,), True)[0, 0, 0, 0]
    u2 = unit_costs(m, hardware.H100, cl, (1,), (2,), (False,), True, context_parallel=2)[0, 0, 0, 0]
    # with flash attention every activation term is linear in the sequence length
    for f in (F.U_ACT_NONE, F.U_ACT_SEL, F.U_ACT_IN, F.U_EACT, F.U_HACT, F.U_P2P_BYTES):
        assert u2[f] * 2 == pytest.approx(u1[f], rel=1e-12)
    assert u2[F.U_PL] == u1[F.U_PL]


def test_context_parallel_ring_bytes_hand_worked():
    """A slow link so the ring dominates: per layer forward, cp - 1 steps each moving this rank's
    K and V (b x s/cp x kv_heads x head_dim x 2 bytes, twice) minus the attention it hides."""
    m, mb, cp = TINY, 2, 2
    chip = hardware.H100
    cl = cluster.Cluster(2, intra_node_Bps=1e6, link_latency_s=2e-6)
    u = unit_costs(m, chip, cl, (1,), (mb,), (False,), True, context_parallel=cp)[0, 0, 0, 0]
    step_bytes = 2 * mb * (64 // cp) * 2 * (64 // 4) * 2        # K and V
    step_s = step_bytes / 1e6 + 2e-6
    attn_fwd = u[F.U_LATT]                                       # the fused attention kernel's time
    assert u[F.U_LCPF] == pytest.approx((cp - 1) * (step_s - attn_fwd / cp), rel=1e-9)
    assert u[F.U_LCPB] > 1.9 * u[F.U_LCPF]                       # K/V again and their gradients
    spec = PlanSpec(1, 1, 1, mb, flash_attention=True, context_parallel=cp)
    p = evaluate(m, chip, cl, spec, mb)
    assert p.breakdown["cp_comm_s"] == pytest.approx(m.num_layers * (u[F.U_LCPF] + u[F.U_LCPB]), rel=1e-12)


def test_context_parallel_refusals():
    cl = cluster.Cluster(8)
    with pytest.raises(ValueError, match="flash attention"):
        evaluate(TINY, "H100", cl, PlanSpec(1, 1, 1, 1, context_parallel=2), 1)
    with pytest.raises(ValueError, match="equal chunks"):
        evaluate(TINY.with_(seq_len=60), "H100", cl, PlanSpec(1, 1, 1, 1, context_parallel=4,
                                                             flash_attention=True), 1)
    with pytest.raises(ValueError, match="no context parallelism"):
        evaluate(TINY, "H100", cl, PlanSpec(1, 1, 1, 1, context_parallel=2, flash_attention=True), 1,
                 engine="megatron-deepspeed")
    with pytest.raises(ValueError, match=r"dp\*tp\*pp\*cp"):
        evaluate(TINY, "H100", cluster.Cluster(2), PlanSpec(2, 1, 1, 1, context_parallel=2,
                                                            flash_attention=True), 2)


# ------------------------------------------------------------------ FP8
def _big_gemms(dtypes):
    """A compute-bound 8192^3 GEMM with operands of each byte width (output in bf16)."""
    return np.array([graph.Op("g", "gemm", m=8192, n=8192, k=8192, bytes_read=(2 * 8192 ** 2) * dt,
                              bytes_written=8192 ** 2 * 2, dtype_bytes=dt).as_row() for dt in dtypes])


def _speedup(chip, low_bytes) -> float:
    """How many times faster the big GEMM runs on ``low_bytes`` operands than on bf16 (launch
    time taken out)."""
    t16, tlow = cost.price(_big_gemms((2, low_bytes)), chip)[0]
    launch = chip.efficiency.launch_s
    return (t16 - launch) / (tlow - launch)


def test_fp8_gemm_runs_at_the_chips_fp8_rate():
    chip = hardware.H100
    assert _speedup(chip, 1) == pytest.approx(chip.efficiency.fp8_rate, rel=1e-9)  # compute-bound
    ref = cost.price_numpy(_big_gemms((2, 1)), chip.as_array()[None], 1.0, chip.efficiency.as_array())[0]
    assert np.allclose(ref, cost.price(_big_gemms((2, 1)), chip)[0], rtol=1e-12)


def test_fp8_plan_memory_and_refusal():
    m, cl = TINY, cluster.Cluster(1)
    spec = PlanSpec(1, 1, 1, 1, flash_attention=True)
    bf = evaluate(m, "H100", cl, spec, 1)
    f8 = evaluate(m, "H100", cl, spec.with_(precision="fp8"), 1)
    # 2 bytes per parameter more: the FP8 weight and its transpose (ZeRO-0, one stage holds all);
    # per layer, activations 5 bytes per token x hidden fewer: the two norm outputs (2 -> 1 byte each)
    # and the 4h-wide activation output (2 -> 1) kept as FP8 casts, plus the attention output's cast (+1)
    extra = f8.memory_per_chip_bytes[0] - bf.memory_per_chip_bytes[0]
    tokens_x_hidden = 64 * 64
    assert extra == pytest.approx(2.0 * m.num_params() - m.num_layers * 5 * tokens_x_hidden, rel=1e-12)
    assert f8.breakdown["forward_s"] < bf.breakdown["forward_s"]
    with pytest.raises(ValueError, match="no FP8 tensor cores"):
        evaluate(m, "A100", cl, spec.with_(precision="fp8"), 1)
    with pytest.raises(ValueError, match="precision"):
        PlanSpec(1, 1, 1, 1, precision="int4")


# ------------------------------------------------------------------ ZeRO groups
def test_zero_group_memory_and_hsdp_reduction_hand_worked():
    """dp 4 in one flat 100 GB/s domain, no latency, ZeRO-2 in groups of 2 on an engine that does
    not overlap the reduction: after the last microbatch, reduce-scatter in the group (bf16
    gradients), all-reduce of the half shard across the 2 groups, all-gather of the weights."""
    m = TINY
    cl = cluster.Cluster(4, intra_node_Bps=100e9, link_latency_s=0.0)
    P = m.num_params()
    B = 100e9
    spec = PlanSpec(4, 1, 1, 1, zero=2, zero_group=2, flash_attention=True)
    p = evaluate(m, "H100", cl, spec, 4, engine="megatron-lm-2021")
    rs = 0.5 * 2 * (1 / 2) * (P * 2) / B
    ar = 2 * (1 / 2) * (P * 2 / 2) / B
    ag = 0.5 * 2 * (1 / 2) * (P * 2) / B
    assert p.breakdown["dp_exposed_s"] == pytest.approx(rs + ar + ag, rel=1e-9)
    full = evaluate(m, "H100", cl, spec.with_(zero_group=None), 4, engine="megatron-lm-2021")
    # static memory: 2 + (2 + 12) / group bytes per parameter
    diff = p.memory_per_chip_bytes[0] - full.memory_per_chip_bytes[0]
    assert diff == pytest.approx(P * 14 * (1 / 2 - 1 / 4), rel=1e-12)
    with pytest.raises(ValueError, match="must divide"):
        PlanSpec(4, 1, 1, 1, zero=3, zero_group=3)
    assert PlanSpec(2, 1, 1, 1, context_parallel=2, zero_group=4, flash_attention=True).shard_group == 4


# ------------------------------------------------------------------ overlap contention
def _simulate_pair_s(comm_s: float, work_s: float, share: float, dt: float = 1e-4) -> float:
    """Time-stepped: a collective of ``comm_s`` and compute of ``work_s`` start together; while the
    collective runs the compute advances at ``1 - share`` of its rate, then at its full rate."""
    t = done = 0.0
    while done < work_s or t < comm_s:
        rate = (1.0 - share) if t < comm_s else 1.0
        if done < work_s:
            done += rate * dt
        t += dt
    return t


@pytest.mark.parametrize("comm,work,share", [(4.0, 10.0, 0.25), (9.0, 10.0, 0.25), (14.0, 10.0, 0.25),
                                             (3.0, 2.0, 0.18), (0.5, 7.0, 0.0), (7.0, 0.5, 0.0)])
def test_overlapped_collective_against_a_time_stepped_pair(comm, work, share):
    """What a collective adds beside compute when its kernels hold a share of the SMs, against
    a time-stepped simulation of the pair (hand-worked: 4 s beside 10 s at a quarter of the SMs
    adds 1 s; 9 s adds 2.25 s; 14 s outlasts the slowed compute, 13.3 s, and adds 4 s)."""
    got = F.overlapped_exposed_s(comm, work, share)
    assert got == pytest.approx(_simulate_pair_s(comm, work, share) - work, abs=2e-3)
    assert F.overlapped_exposed_s(4.0, 10.0, 0.25) == pytest.approx(1.0)
    assert F.overlapped_exposed_s(14.0, 10.0, 0.25) == pytest.approx(4.0)


def test_collectives_hold_nccls_ctas_of_the_sms():
    """24 CTAs (an FSDP all-gather beside a GEMM on an H100) over the chip's SMs; no SM model
    (TPUs): no contention.  evaluate prices a ZeRO-3 plan's layer gathers with it: the same plan
    with the collectives free of SMs is faster by what they slow."""
    from cosearch import engine as E
    from cosearch import plan as P
    assert E.NCCL_COLLECTIVE_CTAS == 24
    assert P.collective_sm_share(hardware.H100) == pytest.approx(24 / 132)
    assert P.collective_sm_share(hardware.A100) == pytest.approx(24 / 108)
    assert P.collective_sm_share(hardware.TPUv5p) == 0.0
    few = hardware.H100.with_(efficiency=replace(hardware.H100.efficiency, tile_slots=24))
    with pytest.raises(ValueError, match="24 SMs"):
        P.collective_sm_share(few)
    m = models.ModelConfig("t", 8, 4096, 32, 16384, 32000, 2048)
    cl = cluster.dgx_h100(1)
    spec = PlanSpec(8, 1, 1, 1, zero=3, flash_attention=True)
    p = evaluate(m, "H100", cl, spec, 8, engine="fsdp")
    free = evaluate(m, hardware.H100.with_(efficiency=replace(hardware.H100.efficiency, tile_slots=0)), cl, spec, 8,
                    engine="fsdp")
    assert p.breakdown["dp_exposed_s"] > free.breakdown["dp_exposed_s"]
    for bad in (-0.1, 1.0, float("nan"), "x"):
        with pytest.raises(ValueError, match="comm_sm_share"):
            P.hw_row(80e9, 3e12, memory.MemoryConfig(), True, comm_sm_share=bad)


def test_fsdp_gathers_slow_the_compute_they_hide_behind():
    """Ample compute: each later layer's gather (forward) and gather + reduce-scatter (backward)
    add ``share`` of themselves; the first gather of each pass and the last reduce-scatter show
    whole, as without contention."""
    n, P, B, zg, share = 4, 1e8, 100e9, 4.0, 0.2
    net = np.array([0.0, B, B, 0.0, 0.0, 0.0])
    hw = np.zeros(F.NH)
    hw[F.H_W], hw[F.H_GRED], hw[F.H_Z3_LAYER], hw[F.H_MEMBW], hw[F.H_HBM] = 2.0, 4.0, 1.0, 1e12, 1e30
    hw[F.H_COMM_SHARE] = share
    u = np.zeros(F.NU)
    u[F.U_PL], u[F.U_LF], u[F.U_LB] = P, 1.0, 2.0
    ag = 0.5 * 2 * (3 / 4) * (P * 2) / B
    rs = 0.5 * 2 * (3 / 4) * (P * 4) / B
    want = 2 * ag + rs + (n - 1) * share * (ag + ag + rs)
    assert F.fsdp_exposed_s(u, net, hw, float(n), False, False, zg, zg, 1.0, 0.0) == pytest.approx(want)


# ------------------------------------------------------------------ engines
def test_fsdp_gathers_every_layer_twice_per_microbatch():
    """With no compute to hide behind, FSDP's per-microbatch traffic is every layer gathered
    for the forward and again for the backward plus every layer's gradient reduce-scattered,
    one after another; with ample compute only the first gather of each pass and the last
    reduce-scatter show."""
    n, P, B, zg = 4, 1e8, 100e9, 4.0
    net = np.array([0.0, B, B, 0.0, 0.0, 0.0])
    hw = np.zeros(F.NH)
    hw[F.H_W], hw[F.H_GRED], hw[F.H_Z3_LAYER], hw[F.H_MEMBW], hw[F.H_HBM] = 2.0, 4.0, 1.0, 1e12, 1e30
    u = np.zeros(F.NU)
    u[F.U_PL] = P
    ag = 0.5 * 2 * (3 / 4) * (P * 2) / B
    rs = 0.5 * 2 * (3 / 4) * (P * 4) / B
    assert F.fsdp_exposed_s(u, net, hw, float(n), False, False, zg, zg, 1.0, 0.0) == pytest.approx(n * (2 * ag + rs))
    u[F.U_LF], u[F.U_LB] = 1.0, 2.0
    assert F.fsdp_exposed_s(u, net, hw, float(n), False, False, zg, zg, 1.0, 0.0) == pytest.approx(2 * ag + rs)
    out = np.zeros(F.NB)
    cost, _ = F.stage_terms(u, net, hw, float(n), False, False, 0, 1, 1, 3, 4.0, 1.0, 3, zg, F.RC_NONE, out)
    assert out[F.B_DP] == pytest.approx(3 * (2 * ag + rs))      # three microbatches


def test_zero3_buffers_hold_only_the_gathered_weights_hand_worked():
    """ZeRO-3 keeps two layers' gathered weights as working buffers — of what it shards.  A layer of
    D = 1e8 dense and X = 3e8 expert parameters (bf16 weights, fp32 gradients, 12-byte optimizer
    state), 2 layers, no activations: at dp 2 and ep 2 the experts' own group has one rank, so they
    stay whole and resident (16 X n bytes) and only the dense part is gathered into the buffers;
    at dp 4 (expert group 2) the experts are sharded and gathered as well."""
    D, X, n = 1e8, 3e8, 2
    net = np.array([0.0, 1e11, 1e11, 0.0, 0.0, 0.0])
    hw = np.zeros(F.NH)
    hw[F.H_W], hw[F.H_G], hw[F.H_O], hw[F.H_GRED], hw[F.H_MEMBW], hw[F.H_HBM] = 2.0, 4.0, 12.0, 4.0, 1e12, 1e30
    u = np.zeros(F.NU)
    u[F.U_PL] = u[F.U_PL_FULL] = D + X
    u[F.U_PLX], u[F.U_EP] = X, 2.0
    out = np.zeros(F.NB)
    for dp, sharded_x in ((2.0, False), (4.0, True)):
        _, mem = F.stage_terms(u, net, hw, float(n), False, False, 0, 1, 1, 1, dp, 1.0, 3, dp, F.RC_NONE, out)
        dpx = dp / 2
        want = n * D * 18.0 / dp + n * X * 18.0 / dpx + 2 * D * 2.0 + (2 * X * 2.0 if sharded_x else 0.0)
        assert mem == pytest.approx(want, rel=1e-12), dp
    # a dense layer: both buffers, as before
    u[F.U_PLX], u[F.U_EP] = 0.0, 1.0
    _, mem = F.stage_terms(u, net, hw, float(n), False, False, 0, 1, 1, 1, 2.0, 1.0, 3, 2.0, F.RC_NONE, out)
    assert mem == pytest.approx(n * (D + X) * 18.0 / 2 + 2 * (D + X) * 2.0, rel=1e-12)


def test_engine_presets_differ_where_their_software_does():
    m = models.preset("gpt3-1.3b")
    cl = cluster.preset("dgx-h100", 2)
    spec = PlanSpec(16, 1, 1, 1, zero=3, flash_attention=True)
    fsdp = evaluate(m, "H100", cl, spec, 64, engine="fsdp")
    meg = evaluate(m, "H100", cl, spec, 64, engine="megatron-lm")
    assert fsdp.step_time_s > meg.step_time_s                   # gathers every microbatch, one layer ahead
    z1 = PlanSpec(16, 1, 1, 1, zero=1, flash_attention=True)
    core = evaluate(m, "H100", cl, z1, 64, engine="megatron-core")
    lm = evaluate(m, "H100", cl, z1, 64, engine="megatron-lm")
    assert core.step_time_s < lm.step_time_s                    # the parameter gather hides behind a forward
    old = evaluate(m, "H100", cl, PlanSpec(16, 1, 1, 1), 64, engine="megatron-lm-2021")
    new = evaluate(m, "H100", cl, PlanSpec(16, 1, 1, 1), 64, engine="megatron-lm")
    assert old.step_time_s > new.step_time_s


# ------------------------------------------------------------------ chips and clusters
@pytest.mark.parametrize("name,bf16,hbm,fp8", [("H100", 989e12, 80 * 2**30, True), ("H200", 989e12, 141e9, True),
                                              ("B200", 2.25e15, 180e9, True), ("GB200", 2.5e15, 186e9, True),
                                              ("B300", 36e15 / 2 / 8, 288e9, True),
                                              ("GB300", 2.5e15, 288e9, True), ("TPUv5e", 197e12, 16 * 2**30, False),
                                              ("TPUv5p", 459e12, 95 * 2**30, False)])
def test_chip_presets_match_datasheets(name, bf16, hbm, fp8):
    chip = hardware.preset(name)
    assert chip.peak_flops == pytest.approx(bf16, rel=0.003)
    assert chip.hbm_bytes == hbm and chip.supports_fp8 is fp8


def test_cluster_presets():
    g = cluster.preset("gb200-nvl72", 256)
    assert (g.chips_per_node, g.nodes) == (64, 4)               # 64 GPUs per rack for power-of-two jobs
    assert cluster.preset("gb200-nvl72", 144).chips_per_node == 72
    with pytest.raises(ValueError, match="neither whole 72-GPU racks"):
        cluster.preset("gb200-nvl72", 100)
    t = cluster.preset("tpuv5e-pod", 1024)
    assert (t.chips_per_node, t.torus_side) == (256, 16)
    # multislice DCN: 2 x 100 Gb/s NICs per 8-chip host = 6.4 Tb/s per 256-chip pod, per chip
    assert t.inter_node_Bps == pytest.approx(2 * 100e9 / 8 / 8) == pytest.approx(6.4e12 / 8 / 256)
    with pytest.raises(ValueError, match="whole slices"):
        cluster.preset("tpuv5e-pod", 300)
    assert cluster.preset("dgx-b200", 2).intra_node_Bps == 900e9
    # DGX B300: 8 x 800 Gb/s ConnectX-8 per node, 100 GB/s per GPU; dense FP4 108 PFLOP/s per 8
    # GPUs over the B200's 72: 1.5x its FP4 rate
    b3 = cluster.preset("dgx-b300", 2)
    assert b3.inter_node_Bps == 800e9 / 8 and b3.intra_node_Bps == 900e9 and b3.num_chips == 16
    assert hardware.B300.efficiency.fp4_rate == pytest.approx(108 / 72 * hardware.B200.efficiency.fp4_rate)
    assert set(cluster.PRESET_CHIPS) == set(cluster.PRESETS)
    for chip in cluster.PRESET_CHIPS.values():
        hardware.preset(chip)


# ------------------------------------------------------------------ the search over the new dimensions
def _brute(model, chip, cl, batch, tps, cps, precs, zeros, groups, engine, recipe=None):
    out = []
    L = model.num_layers
    for tp, cp, prec, z, zg in itertools.product(tps, cps, precs, zeros, groups):
        for mb in _divs(batch):
            for dp in _divs(batch):
                if batch % (dp * mb):
                    continue
                if zg is not None and ((dp * cp) % zg or z == 0):
                    continue
                for pp in range(1, L + 1):
                    if dp * tp * pp * cp > cl.num_chips:
                        continue
                    for split in _compositions(L, pp, 1):
                        for rc in itertools.product(MODES, repeat=pp):
                            spec = PlanSpec(dp, tp, pp, mb, recompute=rc, zero=z, stage_layers=split,
                                            flash_attention=True, context_parallel=cp, precision=prec,
                                            zero_group=zg, scaling_recipe=recipe if prec != "bf16" else None)
                            p = evaluate(model, chip, cl, spec, batch, engine=engine)
                            big = evaluate(model, chip.with_(hbm_bytes=1e18), cl, spec, batch, engine=engine)
                            out.append((big.step_time_s, max(p.memory_per_chip_bytes), spec))
    return out


@pytest.mark.usefixtures("cached_units")
@pytest.mark.parametrize("engine,recipe", [("megatron-core", None), ("fsdp", None), ("megatron-core", "tensorwise")])
def test_search_over_cp_precision_and_groups_equals_brute_force(engine, recipe):
    model = TINY
    chip = hardware.H100
    cl = cluster.Cluster(8, 4, 5e9, 1e9, link_latency_s=1e-6, intra_efficiency=0.8, inter_efficiency=0.9)
    batch, tps, cps, precs, zeros, groups = 2, (1, 2), (1, 2), ("bf16", "fp8"), (0, 1, 3), (None, 2)
    plans = _brute(model, chip, cl, batch, tps, cps, precs, zeros, groups, engine, recipe)
    mems = np.array([p[1] for p in plans])
    assert any(p[2].context_parallel == 2 for p in plans) and any(p[2].zero_group == 2 for p in plans)
    for q in (0.2, 0.6):
        hbm = float(np.quantile(mems, q))
        fits = [p for p in plans if p[1] <= hbm]
        res = placement.search_plans(model, chip.with_(hbm_bytes=hbm), cl, batch, tps=tps, virtual_stages=(1,),
                                     sequence_parallel=(False,), zero=zeros, flash_attention=True, top_k=2,
                                     engine=engine, context_parallel=cps, precision=precs, zero_group=groups,
                                     scaling_recipe=recipe)
        best = min(p[0] for p in fits)
        assert res.best.step_time_s == pytest.approx(best, rel=1e-9)
        # the runner-up too (the best plan of another configuration): combinations of cp and
        # precision are skipped whole or cut to their admissible rows once two plans are known
        per_cfg = {}
        for step, _mem, sp in fits:
            reps = sp.dp * sp.context_parallel
            key = (sp.tp, sp.context_parallel, sp.precision, sp.zero, sp.microbatch, sp.dp, sp.pp,
                   reps if sp.zero_group is None or sp.zero == 0 else sp.zero_group)
            per_cfg[key] = min(step, per_cfg.get(key, math.inf))
        second = sorted(per_cfg.values())[1]
        assert [p.step_time_s for p in res.plans] == pytest.approx([best, second], rel=1e-9)
        again = evaluate(model, chip.with_(hbm_bytes=hbm), cl, res.best.spec, batch, engine=engine)
        assert again.step_time_s == pytest.approx(res.best.step_time_s, rel=1e-12)
        assert math.isfinite(res.plans[-1].step_time_s)


def test_search_refuses_fp8_on_a_chip_without_it():
    with pytest.raises(ValueError, match="no FP8"):
        placement.search_plans(TINY, "A100", 4, 4, precision=("bf16", "fp8"))
    with pytest.raises(ValueError, match="no low-precision casts"):
        placement.search_plans(TINY, "H100", 4, 4, scaling_recipe="tensorwise")
    with pytest.raises(ValueError, match="'tensorwise' with precision 'fp4'"):
        placement.search_plans(TINY, "B200", 4, 4, precision=("fp8", "fp4"), scaling_recipe="tensorwise")
    with pytest.raises(ValueError, match="torchao's Float8 casts"):
        placement.search_plans(TINY, "H100", 4, 4, precision="fp8", scaling_recipe="delayed", engine="fsdp")
    with pytest.raises(ValueError, match="flash attention"):
        placement.search_plans(TINY, "H100", 4, 4, context_parallel=(1, 2))


def test_memory_helper_is_unchanged_for_groups():
    mem = memory.MemoryConfig()
    assert memory.static_bytes(1e9, 4, 1, mem) == pytest.approx(1e9 * (2 + 2 + 12 / 4))


# ------------------------------------------------------------------ Megatron argument lines and the CLI
def test_megatron_args_hand_read():
    from cosearch.runs.megatron import parse_megatron_args
    m = models.preset("llama2-7b")
    line = ("--tensor-model-parallel-size 2 --pipeline-model-parallel-size=4 --context-parallel-size 2 "
            "--num-layers-per-virtual-pipeline-stage 4 --micro-batch-size 1 --global-batch-size 256 "
            "--recompute-granularity selective --sequence-parallel --use-distributed-optimizer --fp8-format hybrid "
            "--overlap-grad-reduce --lr 3e-4 --bf16")
    mp = parse_megatron_args(line, m, 64)
    s = mp.spec
    # 64 chips / (tp 2 x pp 4 x cp 2) = dp 4; 32 layers / (pp 4 x 4 per chunk) = 2 virtual stages
    assert (s.dp, s.tp, s.pp, s.context_parallel, s.virtual_stages, s.microbatch) == (4, 2, 4, 2, 2, 1)
    assert (s.recompute, s.sequence_parallel, s.zero, s.precision, s.flash_attention) == \
        ("selective", True, 1, "fp8", True)
    assert mp.global_batch == 256 and mp.ignored == ("--lr", "3e-4", "--bf16")
    # virtual stages: Megatron's default overlap_p2p_comm (on since 2023-10); a bf16 run's fp32 gradient reduction
    assert mp.engine.name == "megatron-core-p2p-overlap-fp32-grad-reduce" and not mp.engine.fp8_param_gather
    assert mp.engine.overlap_p2p_comm
    mp = parse_megatron_args(line + " --tp-comm-overlap --fp8-param-gather", m, 64)
    assert mp.engine.overlap_tp_comm and mp.engine.fp8_param_gather and mp.ignored == ("--lr", "3e-4", "--bf16")
    with pytest.raises(ValueError, match="--tp-comm-overlap needs --sequence-parallel"):     # tp 1, as Megatron
        parse_megatron_args("--tp-comm-overlap --global-batch-size 8", m, 8)
    with pytest.raises(ValueError, match="--tp-comm-overlap needs --sequence-parallel"):     # no SP under tp 2
        parse_megatron_args("--tp-comm-overlap --tensor-model-parallel-size 2 --global-batch-size 8", m, 8)
    with pytest.raises(ValueError, match="needs --fp8-format"):
        parse_megatron_args("--fp8-param-gather --global-batch-size 8", m, 8)
    with pytest.raises(ValueError, match="not a multiple"):
        parse_megatron_args("--tensor-model-parallel-size 3 --global-batch-size 8", m, 8)
    with pytest.raises(ValueError, match="global-batch-size"):
        parse_megatron_args("--tensor-model-parallel-size 2", m, 8)
    with pytest.raises(ValueError, match="whole number"):
        parse_megatron_args("--micro-batch-size two --global-batch-size 8", m, 8)
    with pytest.raises(ValueError, match="needs a value"):
        parse_megatron_args("--global-batch-size", m, 8)


def test_cli_plan_with_modern_options(capsys):
    from cosearch.cli import main
    rc = main(["plan", "--model", "llama2-7b", "--cluster", "dgx-h100", "--nodes", "2", "--from-megatron-args",
               "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --context-parallel-size 2 "
               "--micro-batch-size 1 --global-batch-size 64 --sequence-parallel --use-distributed-optimizer "
               "--fp8-format hybrid --fp8-param-gather"])
    out = capsys.readouterr().out
    assert rc == 0 and "dp2 tp2 pp2 cp2 mb1 rc:none sp zero1 flash fp8" in out and "megatron-core-fp8-params" in out
    assert "of H100" in out                                     # dgx-h100 implies the H100
    rc = main(["plan", "--model", "llama2-7b", "--cluster", "gb200-nvl72", "--chips", "64", "--batch", "64",
               "--dp", "16", "--tp", "2", "--pp", "1", "--mb", "1", "--cp", "2", "--flash", "--precision", "fp8",
               "--engine", "fsdp", "--zero", "3", "--zero-group", "8", "--json"])
    import json
    d = json.loads(capsys.readouterr().out)
    spec = d["plans"][0]["spec"]
    assert rc == 0 and d["chip"] == "GB200" and (spec["context_parallel"], spec["zero_group"]) == (2, 8)
    assert main(["plan", "--model", "llama2-7b", "--cluster", "dgx-a100", "--nodes", "1", "--batch", "8",
                 "--dp", "8", "--tp", "1", "--pp", "1", "--mb", "1", "--precision", "fp8"]) == 2
    assert "no FP8 tensor cores" in capsys.readouterr().err


# ------------------------------------------------------------------ mixture of experts
MOE = models.ModelConfig("moe", 2, 64, 4, 128, 512, 64, kv_heads=2, activation="swiglu", position="rotary",
                         tie_embeddings=False, dropout=False, bias=False, norm="rmsnorm", num_experts=4,
                         experts_per_token=2, moe_ffn_hidden=96, shared_experts=1)


def test_moe_active_flops_hand_worked():
    """One MoE layer's forward GEMM FLOPs on T = 2 x 64 tokens: attention projections, the
    router, each token's 2 routed experts and the shared one (3 matrices of 64 x 96 each)."""
    T, h = 128, 64
    g = graph.build(MOE, 1, 2, "fwd", "layer", flash_attention=True)
    gemm = sum(op.flops for op in g.ops if op.kind == "gemm")
    attn_proj = h * 64 + 2 * h * 32 + 64 * h                        # q, k, v (2 KV heads of 16), out
    per_token = attn_proj + h * 4 + (2 + 1) * 3 * h * 96
    assert gemm == pytest.approx(2.0 * T * per_token, rel=1e-12)
    assert MOE.num_params(active=True) - MOE.embedding_params() == 2 * (per_token + 2 * 64)   # + the 2 norms
    # expert parallelism moves work, not FLOPs, and adds the two all-to-alls of every routed copy
    g2 = graph.build(MOE, 1, 2, "fwd", "layer", flash_attention=True, expert_parallel=2)
    assert sum(op.flops for op in g2.ops if op.kind == "gemm") == pytest.approx(gemm, rel=1e-12)
    assert [b for k, b, _ in g2.collectives] == [T * 2 * h * 2] * 2


def test_alltoall_hand_worked():
    # 8 ranks 1 apart in nodes of 4: 3/8 of the bytes to node peers at 100 GB/s, 4/8 over a 10 GB/s NIC
    net = np.array([4.0, 100e9, 10e9, 1e-6, 5e-6, 0.0])
    assert F.alltoall_s(8e9, 8.0, 1.0, net) == pytest.approx(3e9 / 100e9 + 1e-6 + 4e9 / 10e9 + 5e-6)
    assert F.alltoall_s(8e9, 4.0, 1.0, net) == pytest.approx(3 / 4 * 8e9 / 100e9 + 1e-6)   # one node
    assert F.alltoall_s(8e9, 1.0, 1.0, net) == 0.0


def test_experts_are_sharded_by_ep_and_reduced_over_their_own_group():
    cl = cluster.Cluster(4, intra_node_Bps=100e9, link_latency_s=0.0)
    u1 = unit_costs(MOE, hardware.H100, cl, (1,), (1,), (False,), True)[0, 0, 0, 0]
    u2 = unit_costs(MOE, hardware.H100, cl, (1,), (1,), (False,), True, expert_parallel=2)[0, 0, 0, 0]
    experts = 4 * 3 * 64 * 96
    assert u1[F.U_PLX] == experts and u2[F.U_PLX] == experts / 2
    assert u1[F.U_PL] - u2[F.U_PL] == experts / 2
    # ZeRO-0 on an engine without overlap, dp 4, ep 2: dense gradients all-reduced over 4 ranks,
    # each expert's over the 2 ranks that hold it (bf16 gradients, no latency)
    B = 100e9
    spec = PlanSpec(4, 1, 1, 1, flash_attention=True, expert_parallel=2)
    p = evaluate(MOE, "H100", cl, spec, 4, engine="megatron-lm-2021")
    L = MOE.num_layers
    dense = MOE.num_params() - L * experts
    want = 2 * (3 / 4) * dense * 2 / B + 2 * (1 / 2) * (L * experts / 2) * 2 / B
    assert p.breakdown["dp_exposed_s"] == pytest.approx(want, rel=1e-9)
    with pytest.raises(ValueError, match="must divide the 4 experts"):
        evaluate(MOE, "H100", cluster.Cluster(8), PlanSpec(8, 1, 1, 1, expert_parallel=8), 8)
    with pytest.raises(ValueError, match="mixture-of-experts"):
        evaluate(TINY, "H100", cl, PlanSpec(4, 1, 1, 1, expert_parallel=2), 4)
    with pytest.raises(ValueError, match="must divide dp"):
        PlanSpec(2, 1, 1, 1, expert_parallel=4)


def two_layer_plan_specs(batch: int, chips: int, eps, zeros, precisions=("bf16",), layers: int = 2,
                         sequence_parallel=(False,), expert_tensor_parallel=(None,)):
    """Every (precision, ep, zero, dp, microbatch, tp 1-2, SP, etp, pp 1-``layers``, split,
    per-stage recompute) plan of a ``layers``-layer model (two by default) on ``chips`` chips,
    flash attention on: the brute force's plan list, written out without the search's tables.
    SP and etp 1 only under tp 2 (at tp 1 etp 1 is etp = tp), etp 1 with SP only (as Megatron
    requires), and ep dividing dp, or dp x tp with etp 1."""
    for prec, ep, z, dp, mb, tp, sp, etp in itertools.product(precisions, eps, zeros, _divs(batch), _divs(batch),
                                                              (1, 2), sequence_parallel, expert_tensor_parallel):
        if batch % (dp * mb) or (dp * (tp if etp == 1 else 1)) % ep:
            continue
        if tp == 1 and (sp or etp is not None) or etp == 1 and not sp:
            continue
        for pp in range(1, layers + 1):
            if dp * tp * pp > chips:
                continue
            for split in _compositions(layers, pp, 1):
                for rc in itertools.product(MODES, repeat=pp):
                    yield PlanSpec(dp, tp, pp, mb, recompute=rc, zero=z, stage_layers=split, flash_attention=True,
                                   sequence_parallel=sp, expert_parallel=ep, precision=prec,
                                   expert_tensor_parallel=etp)


@pytest.mark.usefixtures("cached_units")
def test_search_over_expert_parallel_equals_brute_force():
    model, chip, batch = MOE, hardware.H100, 4
    cl = cluster.Cluster(4, 2, 5e9, 1e9, link_latency_s=1e-6, intra_efficiency=0.8, inter_efficiency=0.9)
    plans = []
    for spec in two_layer_plan_specs(batch, cl.num_chips, (1, 2, 4), (0, 1, 3)):
        p = evaluate(model, chip, cl, spec, batch, engine="megatron-core")
        big = evaluate(model, chip.with_(hbm_bytes=1e18), cl, spec, batch, engine="megatron-core")
        plans.append((big.step_time_s, max(p.memory_per_chip_bytes)))
    assert len(plans) > 100
    for q in (0.3, 0.7):
        hbm = float(np.quantile([p[1] for p in plans], q))
        best = min(p[0] for p in plans if p[1] <= hbm)
        res = placement.search_plans(model, chip.with_(hbm_bytes=hbm), cl, batch, tps=(1, 2), virtual_stages=(1,),
                                     sequence_parallel=(False,), zero=(0, 1, 3), flash_attention=True,
                                     engine="megatron-core", expert_parallel=(1, 2, 4))
        assert res.best.step_time_s == pytest.approx(best, rel=1e-9)


@pytest.mark.usefixtures("cached_units")
def test_a_high_ep_that_leaves_no_room_for_tp_is_searched_exactly():
    """4 chips, batch 4: ep 4 needs dp 4, so only tp 1 has configurations at ep 4 (the search
    prices no other tp there), while ep 2 allows tp 2 and pipelines: the search over tp 1-2 and
    ep 2 and 4 equals the brute force over evaluate(), at two memory limits."""
    model, chip, batch = MOE, hardware.H100, 4
    cl = cluster.Cluster(4, 2, 5e9, 1e9, link_latency_s=1e-6, intra_efficiency=0.8, inter_efficiency=0.9)
    plans = []
    for spec in two_layer_plan_specs(batch, cl.num_chips, (2, 4), (0, 1)):
        p = evaluate(model, chip, cl, spec, batch, engine="megatron-core")
        big = evaluate(model, chip.with_(hbm_bytes=1e18), cl, spec, batch, engine="megatron-core")
        plans.append((big.step_time_s, max(p.memory_per_chip_bytes), spec.expert_parallel, spec.tp))
    assert {tp for _, _, ep, tp in plans if ep == 4} == {1} and {tp for _, _, ep, tp in plans if ep == 2} == {1, 2}
    for q in (0.2, 0.8):
        hbm = float(np.quantile([p[1] for p in plans], q))
        best = min(p[0] for p in plans if p[1] <= hbm)
        res = placement.search_plans(model, chip.with_(hbm_bytes=hbm), cl, batch, tps=(1, 2), virtual_stages=(1,),
                                     sequence_parallel=(False,), zero=(0, 1), flash_attention=True,
                                     engine="megatron-core", expert_parallel=(2, 4))
        assert res.best.step_time_s == pytest.approx(best, rel=1e-9)
        only4 = min((p[0] for p in plans if p[1] <= hbm and p[2] == 4), default=None)
        if only4 is not None:
            res4 = placement.search_plans(model, chip.with_(hbm_bytes=hbm), cl, batch, tps=(1, 2),
                                          virtual_stages=(1,), sequence_parallel=(False,), zero=(0, 1),
                                          flash_attention=True, engine="megatron-core", expert_parallel=(4,))
            assert res4.best.step_time_s == pytest.approx(only4, rel=1e-9)


def test_moe_presets_and_plan():
    m = models.preset("mixtral-8x7b")
    assert m.num_params() == pytest.approx(46.7e9, rel=0.01)
    assert m.num_params(active=True) == pytest.approx(12.9e9, rel=0.01)
    assert m.flops_per_token() < 6.5 * m.num_params(active=True) + 12 * 32 * 4096 * 4096
    cl = cluster.preset("dgx-h100", 4)
    base = PlanSpec(8, 2, 2, 1, zero=1, flash_attention=True, sequence_parallel=True)
    one = evaluate(m, "H100", cl, base, 256, engine="megatron-core")
    four = evaluate(m, "H100", cl, base.with_(expert_parallel=4), 256, engine="megatron-core")
    assert max(four.memory_per_chip_bytes) < max(one.memory_per_chip_bytes)   # experts sharded
    assert "ep4" in four.spec.describe()


def test_nvfp4_rate_memory_and_refusal():
    chip = hardware.GB200
    # NVFP4 at Blackwell's measured NVFP4/BF16 ratio (B200: CUTLASS NVFP4 3904.3 over torch bf16
    # 1360.1 TFLOP/s, same run), FP8 at its measured FP8/BF16 ratio (2544.7 over 1512.8); GB300's
    # datasheet has 1.5x the GB200's dense FP4
    assert _speedup(chip, 0.5625) == pytest.approx(3904.33 / 1360.14, rel=1e-9)
    assert _speedup(chip, 1) == pytest.approx(2544.68 / 1512.84, rel=1e-9)
    assert hardware.GB300.efficiency.fp4_rate == pytest.approx(1.5 * 3904.33 / 1360.14)
    m, cl = TINY, cluster.Cluster(1)
    spec = PlanSpec(1, 1, 1, 1, flash_attention=True)
    bf = evaluate(m, chip, cl, spec, 1)
    f4 = evaluate(m, chip, cl, spec.with_(precision="fp4"), 1)
    # 2 x 0.5625 bytes of weight copies per parameter; activations: norm outputs 2 x (2 - 0.5625),
    # the 4h-wide activation output 4 x (2 - 0.5625), the attention output's cast +0.5625
    per_layer = (2 * (2 - 0.5625) + 4 * (2 - 0.5625) - 0.5625) * 64 * 64
    extra = f4.memory_per_chip_bytes[0] - bf.memory_per_chip_bytes[0]
    assert extra == pytest.approx(1.125 * m.num_params() - m.num_layers * per_layer, rel=1e-12)
    with pytest.raises(ValueError, match="no NVFP4 tensor cores"):
        evaluate(m, "H100", cl, spec.with_(precision="fp4"), 1)


def test_activation_offload_hand_worked():
    """4 layers, 2 offloaded: each moves its A bytes out in the forward and back in the backward
    at the host bandwidth H, hidden behind its layer's compute; memory loses their activations."""
    A, H, n = 4e9, 100e9, 4.0                                  # 40 ms per transfer
    net = np.array([0.0, 1e11, 1e11, 0.0, 0.0, 0.0])
    hw = np.zeros(F.NH)
    hw[F.H_HBM], hw[F.H_MEMBW], hw[F.H_HOSTBW], hw[F.H_OFFLOAD] = 1e30, 1e12, H, 2.0
    u = np.zeros(F.NU)
    u[F.U_LF], u[F.U_LB], u[F.U_ACT_NONE] = 0.010, 0.050, A     # forward 10 ms, backward 50 ms
    out = np.zeros(F.NB)
    _, mem = F.stage_terms(u, net, hw, n, False, False, 0, 1, 1, 1, 1.0, 1.0, 0, 1.0, F.RC_NONE, out)
    assert out[F.B_OFF] == pytest.approx(2 * (0.040 - 0.010))  # the backward hides its 40 ms
    assert mem == pytest.approx((n - 2) * A)
    hw[F.H_OFFLOAD] = 9.0                                      # more than the stage has: all 4
    _, mem = F.stage_terms(u, net, hw, n, False, False, 0, 1, 1, 1, 1.0, 1.0, 0, 1.0, F.RC_NONE, out)
    assert out[F.B_OFF] == pytest.approx(4 * 0.030) and mem == pytest.approx(0.0)
    spec = PlanSpec(1, 1, 1, 1, flash_attention=True, offload_layers=1)
    cl = cluster.Cluster(1)
    on, off = evaluate(TINY, "GB200", cl, spec, 1), evaluate(TINY, "GB200", cl, spec.with_(offload_layers=0), 1)
    a_l = unit_costs(TINY, hardware.GB200, cl, (1,), (1,), (False,), True)[0, 0, 0, 0][F.U_ACT_NONE]
    assert off.memory_per_chip_bytes[0] - on.memory_per_chip_bytes[0] == pytest.approx(a_l)
    assert "offload1" in on.spec.describe()
    with pytest.raises(ValueError, match="offload_layers"):
        PlanSpec(1, 1, 1, 1, offload_layers=-1)
    with pytest.raises(ValueError, match="host_link_Bps"):
        hardware.H100.with_(host_link_Bps=0.0)


@pytest.mark.parametrize("model,kw", [
    (models.preset("gpt3-1.3b"), dict(tps=(1, 2), sps=(False, True), flash=False)),
    (TINY, dict(tps=(1, 2), sps=(False, True), flash=True, context_parallel=2, precision="fp8")),
    (models.preset("llama2-7b"), dict(tps=(4,), sps=(True,), flash=True, precision="fp4")),
    # MoE: 512 tokens x top-2 x ep 2 / 8 experts = 256 a local expert (whole: extrapolated) ...
    (MOE_SMALL, dict(tps=(1, 2), sps=(False, True), flash=True, precision="fp8", ep=2)),
    # per-tensor current scaling: an amax pass before each cast but those of LayerNormLinear's norms
    (TINY, dict(tps=(2,), sps=(True,), flash=True, precision="fp8", recipe="tensorwise", passes="amax-unfused")),
    (MOE_SMALL, dict(tps=(2,), sps=(True,), flash=True, precision="fp8", recipe="tensorwise", passes="amax-unfused", ep=4)),
    # ... 500 x 2 / 8 = 125 (whole) and 501 x 2 / 8 = 125.25 (rounded up: built at every size)
    (MOE_SMALL.with_(seq_len=500), dict(tps=(1,), sps=(False,), flash=True, ep=1)),
    (MOE_SMALL.with_(seq_len=501), dict(tps=(1,), sps=(False,), flash=True, ep=1)),
])
def test_unit_costs_extrapolated_rows_equal_graphs_built_at_each_size(model, kw):
    """unit_costs builds graphs at microbatch 1 and 2 and extrapolates the rows; the sums must
    equal those of graphs built at each size and priced op by op."""
    chip = hardware.GB200
    cl = cluster.preset("gb200-nvl72", 8)
    mbs = (1, 3, 4, 7)
    ep = kw.get("ep", 1)
    if model.moe:
        from cosearch.plan import _moe_rows_affine
        assert _moe_rows_affine(model, 1, False, 1, ep, False) is (model.seq_len != 501)
    u = unit_costs(model, chip, cl, kw["tps"], mbs, kw["sps"], kw["flash"],
                   context_parallel=kw.get("context_parallel", 1), precision=kw.get("precision", "bf16"),
                   expert_parallel=ep, scaling_recipe=kw.get("recipe"))[0]
    # the precision's default recipe (fp8: delayed, the norms writing FP8; fp4: NVFP4, an amax
    # pass before every cast)
    passes = kw.get("passes", {"fp8": "norm-fused", "fp4": "amax-all"}.get(kw.get("precision", "bf16"), "single"))
    if passes in ("norm-fused", "amax-unfused"):
        passes += graph.ONE_COPY      # per-tensor FP8 on the GB200, whose FP8 GEMMs take every layout: one copy
    for ti, t in enumerate(kw["tps"]):
        for bi, mb in enumerate(mbs):
            for si, sp in enumerate(kw["sps"]):
                for part, ph, f in (("layer", "fwd", F.U_LF), ("layer", "bwd", F.U_LB), ("head", "bwd", F.U_HB),
                                    ("embedding", "fwd", F.U_EF)):
                    g = graph.build(model, t, mb, ph, part, sequence_parallel=sp and t > 1,
                                    flash_attention=kw["flash"], context_parallel=kw.get("context_parallel", 1),
                                    precision=kw.get("precision", "bf16"), cross_entropy="fp32",   # Megatron-LM's
                                    expert_parallel=ep, cast_passes=passes)
                    assert u[ti, bi, si, f] == pytest.approx(cost.price(g, chip)[0].sum(), rel=1e-12), (t, mb, sp, f)
                # the tensor-parallel collectives of the layer, priced on the graph built at this size
                # (each collective op of it priced alone, against the one kernel call over the cell's graphs)
                from cosearch.plan import _collective_s
                g = graph.build(model, t, mb, "fwd", "layer", sequence_parallel=sp and t > 1,
                                flash_attention=kw["flash"], context_parallel=kw.get("context_parallel", 1),
                                precision=kw.get("precision", "bf16"), expert_parallel=ep, cast_passes=passes)
                want = sum(_collective_s(op.kind, op.bytes_read, t, cl.net_array(chip), ep) for op in g.ops
                           if op.kind in graph.NETWORK_KINDS)
                assert u[ti, bi, si, F.U_LTPF] == pytest.approx(want, rel=1e-12)


def test_tp_comm_overlap_hand_worked():
    """With Megatron-Core's TP-communication overlap a layer exposes only the TP time beyond its
    compute: forward 3 ms of collectives behind 2 ms of compute shows 1 ms, backward none."""
    net = np.array([0.0, 1e11, 1e11, 0.0, 0.0, 0.0])
    hw = np.zeros(F.NH)
    hw[F.H_HBM], hw[F.H_MEMBW], hw[F.H_TP_OVERLAP] = 1e30, 1e12, 1.0
    u = np.zeros(F.NU)
    u[F.U_LF], u[F.U_LB], u[F.U_LTPF], u[F.U_LTPB] = 0.002, 0.004, 0.003, 0.003
    out = np.zeros(F.NB)
    F.stage_terms(u, net, hw, 5.0, False, False, 0, 1, 1, 1, 1.0, 2.0, 0, 1.0, F.RC_NONE, out)
    assert out[F.B_TP] == pytest.approx(5 * 0.001)
    hw[F.H_TP_OVERLAP] = 0.0
    F.stage_terms(u, net, hw, 5.0, False, False, 0, 1, 1, 1, 1.0, 2.0, 0, 1.0, F.RC_NONE, out)
    assert out[F.B_TP] == pytest.approx(5 * 0.006)
    m, cl = models.preset("llama2-7b"), cluster.preset("dgx-h100", 1)
    spec = PlanSpec(1, 8, 1, 1, sequence_parallel=True, flash_attention=True)
    a = evaluate(m, "H100", cl, spec, 8, engine="megatron-core")
    b = evaluate(m, "H100", cl, spec, 8, engine="megatron-core-tp-overlap")
    assert b.breakdown["tp_comm_s"] < a.breakdown["tp_comm_s"] and b.step_time_s < a.step_time_s
    # MaxText's recipes run XLA's asynchronous collectives (no collective matmul): the backward's
    # TP collectives hide behind its weight-gradient GEMMs, the forward's (half of them) do not;
    # with the overlap off (otherwise the same engine) every collective second comes back
    from dataclasses import replace

    from cosearch.engine import MAXTEXT
    assert MAXTEXT.overlap_tp_comm
    spec = PlanSpec(16, 16, 1, 16, sequence_parallel=True, flash_attention=True, recompute="full", zero=3)
    m = models.ModelConfig("mx-128b", 64, 10240, 64, 65536, 32768, 2048, bias=False)
    on = evaluate(m, "TPUv5e", cluster.preset("tpuv5e-pod", 256), spec, 256, engine=MAXTEXT)
    off = evaluate(m, "TPUv5e", cluster.preset("tpuv5e-pod", 256), spec, 256,
                   engine=replace(MAXTEXT, name="maxtext-no-tp-overlap", overlap_tp_comm=False))
    assert 0.45 * off.breakdown["tp_comm_s"] < on.breakdown["tp_comm_s"] < 0.55 * off.breakdown["tp_comm_s"]
    assert on.step_time_s < off.step_time_s


def test_overlapped_tp_shortens_the_windows_other_traffic_hides_behind_hand_worked():
    """Under an engine that overlaps its TP collectives a layer lasts its compute plus what they
    expose, and that is the window the data-parallel reduction and ZeRO-3's prefetch hide
    behind.  5 layers, backward 4 ms of compute beside 5 ms of collectives (1 ms exposed): a 40 ms
    gradient all-reduce (4e9 bytes over 2 ranks at 100 GB/s) hides behind 5 x (4 + 1) = 25 ms and
    shows 15 ms; counting every collective second (5 x 9 = 45 ms) would have hidden it all."""
    net = np.array([0.0, 1e11, 1e11, 0.0, 0.0, 0.0])
    hw = np.zeros(F.NH)
    hw[F.H_HBM], hw[F.H_MEMBW], hw[F.H_GRED], hw[F.H_OVERLAP], hw[F.H_TP_OVERLAP] = 1e30, 1e30, 4.0, 1.0, 1.0
    u = np.zeros(F.NU)
    u[F.U_LF], u[F.U_LB], u[F.U_LTPF], u[F.U_LTPB], u[F.U_PL] = 0.002, 0.004, 0.001, 0.005, 2e8
    out = np.zeros(F.NB)
    F.stage_terms(u, net, hw, 5.0, False, False, 0, 1, 1, 1, 2.0, 1.0, 0, 2.0, F.RC_NONE, out)
    assert out[F.B_TP] == pytest.approx(5 * 0.001) and out[F.B_DP] == pytest.approx(0.040 - 0.025)
    hw[F.H_TP_OVERLAP] = 0.0
    F.stage_terms(u, net, hw, 5.0, False, False, 0, 1, 1, 1, 2.0, 1.0, 0, 2.0, F.RC_NONE, out)
    assert out[F.B_TP] == pytest.approx(5 * 0.006) and out[F.B_DP] == 0.0
    # full recompute reruns the forward with its collectives overlapped as the forward does
    hw[F.H_TP_OVERLAP] = 1.0
    u[F.U_LTPF] = 0.003
    F.stage_terms(u, net, hw, 5.0, False, False, 0, 1, 1, 1, 2.0, 1.0, 0, 2.0, F.RC_FULL, out)
    assert out[F.B_REC] == pytest.approx(5 * (0.002 + 0.001))
    # ZeRO-3 prefetch: a 3 ms layer gather hides behind the previous layer's forward, which lasts
    # 2 ms of compute with 1.5 ms of collectives overlapped (none exposed): 1 ms shows for each
    # of the 3 layers after the first; counting the collectives (3.5 ms) would have hidden it
    hw[F.H_W], hw[F.H_Z3_LAYER] = 2.0, 1.0
    u[F.U_LB], u[F.U_LTPB], u[F.U_LTPF], u[F.U_PL] = 1.0, 0.0, 0.0015, 2e8
    assert F.allgather_s(2e8 * 2.0, 4.0, 1.0, net) == pytest.approx(0.5 * 2 * (3 / 4) * (2e8 * 2) / 1e11)  # 3 ms
    on = F.fsdp_exposed_s(u, net, hw, 4.0, False, False, 4.0, 4.0, 1.0, 0.0)
    hw[F.H_TP_OVERLAP] = 0.0
    off = F.fsdp_exposed_s(u, net, hw, 4.0, False, False, 4.0, 4.0, 1.0, 0.0)
    assert on - off == pytest.approx(3 * 0.001)


def test_work_bound_under_tp_overlap_hand_worked():
    """The spread bound's per-layer work under an engine that overlaps its TP collectives is what
    stage_terms charges: forward 2 ms of compute beside 3 ms of collectives shows 2 + 1, backward
    4 beside 3 shows 4 — 7 ms a layer, not the 12 ms of compute plus every collective second that
    the bound charged before (then above the stage's own cost, so the search pruned plans it
    should have kept: the MaxText case below)."""
    from cosearch.plan import _tp_overlap_save
    u = np.zeros((1, F.NU))
    u[0, F.U_LF], u[0, F.U_LB], u[0, F.U_LTPF], u[0, F.U_LTPB] = 0.002, 0.004, 0.003, 0.003
    assert _tp_overlap_save(u.copy(), "megatron-lm-2021")[0, F.U_TPOS] == 0.0     # no overlap at all
    # an engine whose rule is finer than the whole layer's (Megatron's asynchronous data-gradient
    # collectives) saves the whole-layer amount less what its extra terms expose
    v = u.copy()
    v[0, F.U_TPXF], v[0, F.U_TPXB] = 0.002, 0.001
    assert _tp_overlap_save(v, "megatron-core")[0, F.U_TPOS] == pytest.approx(0.005 - 0.003)
    u = _tp_overlap_save(u, "megatron-core-tp-overlap")
    assert u[0, F.U_TPOS] == pytest.approx(0.002 + 0.003)
    assert F.unit_work(u[0], 5) == pytest.approx(5 * 0.007)
    hw = np.zeros(F.NH)
    hw[F.H_HBM], hw[F.H_MEMBW], hw[F.H_TP_OVERLAP] = 1e30, 1e12, 1.0
    out = np.zeros(F.NB)
    F.stage_terms(u[0], np.array([0.0, 1e11, 1e11, 0.0, 0.0, 0.0]), hw, 5.0, False, False, 0, 1, 1, 1, 1.0, 2.0, 0,
                  1.0, F.RC_NONE, out)
    assert out[F.B_FWD] + out[F.B_BWD] + out[F.B_TP] == pytest.approx(5 * 0.007)
    # the overlap kernels' extra exposure (userbuffers) is charged by both
    u[0, F.U_TPXF] = 0.0005
    u = _tp_overlap_save(u, "megatron-core-tp-overlap")
    assert F.unit_work(u[0], 5) == pytest.approx(5 * 0.0075)


@pytest.mark.usefixtures("cached_units")
def test_search_under_tp_overlap_equals_brute_force():
    """MaxText (XLA's collectives overlapped with the matmuls) on an MoE model over two expert-
    parallel degrees: the search's best equals the brute force over evaluate() at every memory
    level.  Before the work bound knew the overlap, the ep-4 combination's bound (every TP and
    all-to-all second charged) exceeded its own best plan at the 40 % memory level, and the search
    returned an ep-2 plan 34 % slower.  (Its pipelines are 1F1B's, uneven splits included: the
    engine here is MaxText's overlap rules on Megatron's schedule, as the test is about the overlap;
    MaxText's own circular schedule has its brute force in tests/test_circular_pipeline.py.)"""
    from cosearch.engine import MAXTEXT
    model, chip, batch = MOE_SMALL, hardware.H100, 4
    eng = replace(MAXTEXT, name="maxtext-1f1b", pipeline_schedule="1f1b")
    cl = cluster.Cluster(12, 4, 5e9, 1e9, link_latency_s=1e-6, intra_efficiency=0.8, inter_efficiency=0.9)
    plans = []
    for spec in two_layer_plan_specs(batch, cl.num_chips, (2, 4), (1, 2), sequence_parallel=(True,)):
        p = evaluate(model, chip, cl, spec, batch, engine=eng)
        big = evaluate(model, chip.with_(hbm_bytes=1e18), cl, spec, batch, engine=eng)
        plans.append((big.step_time_s, max(p.memory_per_chip_bytes)))
    assert len(plans) > 30
    for q in (0.1, 0.25, 0.4, 0.6, 1.0):
        hbm = float(np.quantile([p[1] for p in plans], q)) * (1 + 1e-9)
        best = min(p[0] for p in plans if p[1] <= hbm)
        res = placement.search_plans(model, chip.with_(hbm_bytes=hbm), cl, batch, tps=(1, 2), virtual_stages=(1,),
                                     sequence_parallel=(True,), zero=(1, 2), flash_attention=True, engine=eng,
                                     expert_parallel=(2, 4))
        assert res.best.step_time_s == pytest.approx(best, rel=1e-9), q


def test_chip_and_cluster_files_round_trip_and_cli(tmp_path, capsys):
    import json

    from cosearch.cli import main
    chip = hardware.H100.with_(name="my-h100", hbm_bytes=96e9)
    cl = cluster.preset("dgx-h100", 2).with_(inter_node_Bps=25e9, name="slow-ib")
    (tmp_path / "chip.json").write_text(json.dumps(chip.to_dict()))
    (tmp_path / "cl.json").write_text(json.dumps(cl.to_dict()))
    assert hardware.Accelerator.from_json(tmp_path / "chip.json") == chip
    assert cluster.Cluster.from_json(tmp_path / "cl.json") == cl
    spec = ["--batch", "32", "--dp", "4", "--tp", "4", "--pp", "1", "--mb", "1", "--recompute", "none", "--zero", "0",
            "--no-sp", "--json"]
    assert main(["plan", "--model", "llama2-7b", "--chip", str(tmp_path / "chip.json"), "--cluster",
                 str(tmp_path / "cl.json"), *spec]) == 0
    d = json.loads(capsys.readouterr().out)
    want = evaluate("llama2-7b", chip, cl, PlanSpec(4, 4, 1, 1), 32)
    assert d["chip"] == "my-h100" and d["plans"][0]["step_time_s"] == pytest.approx(want.step_time_s, rel=1e-12)
    # flags override a preset's links
    assert main(["plan", "--model", "llama2-7b", "--cluster", "dgx-h100", "--nodes", "2", "--inter-Bps", "25e9",
                 *spec]) == 0
    d2 = json.loads(capsys.readouterr().out)
    assert d2["cluster"]["inter_node_Bps"] == 25e9 and d2["chip"] == "H100"
    bad = dict(chip.to_dict(), turbo=True)
    with pytest.raises(ValueError, match=r"unknown field\(s\) \['turbo'\]"):
        hardware.Accelerator.from_dict(bad)
    with pytest.raises(ValueError, match=r"unknown field\(s\) \['nodes'\]"):
        cluster.Cluster.from_dict(dict(cl.to_dict(), nodes=2))
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    assert main(["plan", "--model", "llama2-7b", "--chip", str(tmp_path / "bad.json"), "--cluster", "flat",
                 "--chips", "16", *spec]) == 2
    assert "turbo" in capsys.readouterr().err
    assert main(["presets"]) == 0
    out = capsys.readouterr().out
    assert "chips (" in out and "clusters (" in out and "engines (" in out and "fsdp" in out


def test_torchtitan_selective_recomputes_every_other_matmul_by_hand():
    """torchtitan's per-op selective checkpointing (the ``fsdp`` engine) saves the odd matmuls
    and SDPA and recomputes the even matmuls (wk, wo, w3 of a Llama block) and every cheaper op;
    Megatron's selective recomputes the attention core.  Llama 2 13B (MHA, SwiGLU), tp 1: the
    recomputed time is the op prices weighted by hand, and the HFU counts 2 (h h + h h + h f)
    FLOPs a token a layer."""
    from cosearch import cost, graph
    from cosearch.engine import FSDP, Engine
    m = models.preset("llama2-13b")
    chip = hardware.A100_80GB
    g = graph.build(m, tp=1, microbatch=2, phase="fwd", part="layer", flash_attention=True)
    t = cost.price(g, chip.with_(efficiency=chip.efficiency.with_attention_kernel("fa2")))[0]
    by_hand = {"norm1": 1, "qkv": 1 / 3, "rotary": 1, "attn_core": 0, "attn_out": 1, "residual1": 1, "norm2": 1,
               "fc1": 0.5, "act": 1, "fc2": 0, "residual2": 1}
    assert [o.name for o in g.ops] == list(by_hand)
    want = sum(by_hand[o.name] * ti for o, ti in zip(g.ops, t))
    spec = PlanSpec(dp=64, tp=1, pp=1, microbatch=2, recompute="selective", zero=3, flash_attention=True)
    p = evaluate(m, chip, cluster.dgx_a100(8), spec, 128, engine="fsdp")
    assert p.num_microbatches == 1       # 128 sequences over dp 64 in microbatches of 2
    assert p.breakdown["recompute_s"] == pytest.approx(want * m.num_layers, rel=1e-9)
    h, f = m.hidden, m.ffn_hidden
    tokens = 128 * m.seq_len
    extra = 2.0 * (h * h + h * h + h * f) * m.num_layers * tokens
    peak = chip.peak_flops * 64
    assert p.hfu * p.step_time_s * peak == pytest.approx(p.mfu * p.step_time_s * peak + extra, rel=1e-9)
    mega = evaluate(m, chip, cluster.dgx_a100(8), spec, 128, engine="megatron-lm")
    assert p.breakdown["recompute_s"] > 3 * mega.breakdown["recompute_s"]
    assert FSDP.selective_recompute == "every-other-matmul"
    with pytest.raises(ValueError, match="selective_recompute"):
        Engine("x", selective_recompute="half")


def test_torchtitan_selective_memory_by_hand():
    """Llama 2 13B (h 5120, 40 heads of 128, SwiGLU 13824), tp 1, one 4096-token sequence: the
    layer input, wq, wv, SDPA's output, w1 and w2's outputs in bf16 plus the fp32 log-sum-exp:
    2 (5120 + 5120 + 5120 + 5120 + 13824 + 5120) + 4 x 40 = 79,008 bytes a token; tp 2 with SP
    halves all but w2's local output."""
    from cosearch import memory
    m = models.preset("llama2-13b")
    assert memory.every_other_matmul_bytes(m, 1, 1) == 4096 * 79008
    half = 2 * (2560 + 2560 + 20 * 128 + 2560 + 6912) + 4 * 20 + 2 * 5120
    assert memory.every_other_matmul_bytes(m, 2, 1, sequence_parallel=True) == 4096 * half
    # less than Megatron's selective figure, which keeps every matmul input and the norms
    assert memory.every_other_matmul_bytes(m, 1, 1) < memory.layer_activation_bytes(m, 1, 1, False, "selective", True)
    # torchtitan 0.3's one fused wqkv matmul: its k output kept too (40 KV heads of 128 = 5120)
    assert memory.every_other_matmul_bytes(m, 1, 1, fused_qkv=True) == 4096 * (79008 + 2 * 5120)
    fused = {op.name: graph.recompute_share(op, m, "every-other-matmul-fused-qkv")
             for op in graph.build(m, 1, 1, flash_attention=True).ops if op.kind == "gemm"}
    assert fused == {"qkv": 0.0, "attn_out": 1.0, "fc1": 0.5, "fc2": 0.0}
    spec = PlanSpec(dp=64, tp=1, pp=1, microbatch=2, recompute="selective", zero=3, flash_attention=True)
    tt = evaluate(m, hardware.A100_80GB, cluster.dgx_a100(8), spec, 128, engine="fsdp")
    mega = evaluate(m, hardware.A100_80GB, cluster.dgx_a100(8), spec, 128, engine="megatron-lm")
    saved = (memory.layer_activation_bytes(m, 1, 2, False, "selective", True)
             - memory.every_other_matmul_bytes(m, 1, 2)) * m.num_layers
    assert mega.memory_per_chip_bytes[0] - tt.memory_per_chip_bytes[0] == pytest.approx(saved, rel=1e-9)


def test_fp8_param_gather_keeps_the_weights_in_fp8_only():
    """Megatron-Core's fp8_param_gather: no bf16 weight, so an FP8 plan's static memory drops by
    exactly 2 bytes a parameter (bf16 weight 2 + FP8 copies 2 -> FP8 row- and column-wise 1 + 1),
    and the distributed optimizer's parameter all-gather moves 1 byte a parameter instead of 2:
    (k - 1) / k x P bytes less over the node's NVLink (latencies cancel).  bf16 and NVFP4 plans
    are unchanged."""
    from dataclasses import replace

    from cosearch.engine import MEGATRON_CORE
    m, cl = models.preset("llama2-7b"), cluster.preset("dgx-h100", 1)
    off = replace(MEGATRON_CORE, name="mc-no-overlap", overlap_param_gather=False, overlap_grad_reduce=False)
    on = replace(off, name="mc-fp8-params", fp8_param_gather=True)
    spec = PlanSpec(8, 1, 1, 1, zero=1, flash_attention=True, precision="fp8")
    a = evaluate(m, "H100", cl, spec, 64, engine=off)
    b = evaluate(m, "H100", cl, spec, 64, engine=on)
    P = m.num_params()
    assert a.memory_per_chip_bytes[0] - b.memory_per_chip_bytes[0] == pytest.approx(2.0 * P, rel=1e-9)
    bw = cl.intra_node_Bps * cl.intra_efficiency
    assert a.breakdown["dp_exposed_s"] - b.breakdown["dp_exposed_s"] == pytest.approx(7 / 8 * P / bw, rel=1e-6)
    for precision, chip in (("bf16", "H100"), ("fp4", "B200")):
        s = replace(spec, precision=precision)
        c2 = cluster.preset("dgx-b200", 1) if chip == "B200" else cl
        x, y = (evaluate(m, chip, c2, s, 64, engine=e) for e in (off, on))
        assert x.memory_per_chip_bytes == y.memory_per_chip_bytes and x.step_time_s == y.step_time_s
    with pytest.raises(ValueError, match="fp8_param_gather"):
        replace(MEGATRON_CORE, fp8_param_gather=1)


def test_deepspeed_bf16_optimizer_all_reduces_gradients_in_full():
    """DeepSpeed's pipeline engine with its BF16_Optimizer all-reduces the fp32 gradients in full
    even under ZeRO-1 (``_bf16_reduce_grads`` -> ``buffered_allreduce_fallback``), where Megatron's
    distributed optimizer reduce-scatters them: on one node of 8 (dp 8, nothing overlapped) the
    exposed data-parallel time grows by one reduce-scatter of the 4-byte gradients, 7/8 x 4P / B
    plus 7 link latencies."""
    from dataclasses import replace

    from cosearch.engine import MEGATRON_DEEPSPEED
    assert MEGATRON_DEEPSPEED.full_grad_allreduce
    m, cl = models.preset("gpt3-1.3b"), cluster.preset("dgx-a100", 1)
    spec = PlanSpec(8, 1, 1, 1, zero=1)
    on = evaluate(m, "A100-80GB", cl, spec, 64, engine=MEGATRON_DEEPSPEED)
    off = evaluate(m, "A100-80GB", cl, spec, 64, engine=replace(MEGATRON_DEEPSPEED, name="ds-rs",
                                                                  full_grad_allreduce=False))
    P = m.num_params()
    bw = cl.intra_node_Bps * cl.intra_efficiency
    want = 7 / 8 * 4.0 * P / bw + 7 * cl.link_latency_s
    assert on.breakdown["dp_exposed_s"] - off.breakdown["dp_exposed_s"] == pytest.approx(want, rel=1e-6)
    assert on.memory_per_chip_bytes == off.memory_per_chip_bytes
    # ZeRO 0 and 3 are unaffected (a full all-reduce already, or sharded gradients)
    for z in (0, 3):
        s = PlanSpec(8, 1, 1, 1, zero=z)
        a = evaluate(m, "A100-80GB", cl, s, 64, engine=MEGATRON_DEEPSPEED)
        b = evaluate(m, "A100-80GB", cl, s, 64, engine=replace(MEGATRON_DEEPSPEED, full_grad_allreduce=False))
        assert a.step_time_s == b.step_time_s
