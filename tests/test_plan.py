"""evaluate(), the cluster hierarchy and the memory/communication formulas against
hand-worked cases and published closed forms."""

import math

import numpy as np
import pytest

from cosearch import cluster, comm, graph, hardware, memory, models
from cosearch._kernels import formulas as F
from cosearch.plan import PlanSpec, evaluate, even_split, unit_costs

GiB = 2**30


def tiny(**kw):
    base = dict(name="t", num_layers=4, hidden=256, heads=8, ffn_hidden=1024, vocab=1000, seq_len=128)
    base.update(kw)
    return models.ModelConfig(**base)


# ---------------------------------------------------------------- collectives
def test_flat_ring_allreduce_closed_form():
    cl = cluster.Cluster(8, intra_node_Bps=1e10, link_latency_s=1e-6)
    t = comm.collective_s("allreduce", 8e9, 4, cl, hardware.A100)
    assert t == pytest.approx(2 * 3 / 4 * 8e9 / 1e10 + 2 * 3 * 1e-6)
    assert comm.collective_s("allgather", 8e9, 4, cl, hardware.A100) == pytest.approx(t / 2)
    assert comm.collective_s("allreduce", 8e9, 1, cl, hardware.A100) == 0.0
    # Cluster(n) alone uses the chip's own link (per direction)
    assert comm.p2p_s(3e9, cluster.Cluster(4), hardware.A100) == pytest.approx(3e9 / 300e9 + 1e-6)



def test_collectives_grid_hand_worked():
    """formulas.collectives_grid (a plan-search cell's collectives in one kernel call) against the
    closed forms by hand, on two networks at one and two sequences: a tp-4 all-reduce inside a
    node 2 (k-1)/k S / B_i + 2 (k-1) a_i; an all-gather and a reduce-scatter half of it, the
    latter an amax all-reduce's kind of op whose bytes do not grow; an ep-16 all-to-all with its
    ranks 4 apart (2 per node of 8, over 8 nodes) (k-1)/n S / B_i + a_i + (n-k)/n S / B_e + a_e."""
    from cosearch.plan import _collective_s
    nets = np.array([[8.0, 2e11, 4e10, 1e-6, 5e-6, 0.0], [8.0, 1e11, 1e10, 2e-6, 1e-5, 0.0]])
    kinds = np.array([F.COLL_ALLREDUCE, F.COLL_ALLGATHER, F.COLL_ALLGATHER, F.COLL_ALLTOALL], dtype=np.int64)
    nbytes = np.array([8e6, 4e6, 2e3, 16e6])
    grows = np.array([True, True, False, True])
    scales = np.array([1.0, 2.0])
    out = F.collectives_grid(kinds, nbytes, grows, scales, 4.0, nets, 16.0, 4.0, 0.0, 0.0, np.empty((2, 2, 4)))
    for i, (_cpn, bi, be, ai, ae, _t) in enumerate(nets):
        for j, x in enumerate(scales):
            ar = 2 * 3 / 4 * 8e6 * x / bi + 2 * 3 * ai
            assert out[i, j, 0] == pytest.approx(ar, rel=1e-12)
            assert out[i, j, 1] == pytest.approx(0.5 * (2 * 3 / 4 * 4e6 * x / bi + 2 * 3 * ai), rel=1e-12)
            assert out[i, j, 2] == pytest.approx(0.5 * (2 * 3 / 4 * 2e3 / bi + 2 * 3 * ai), rel=1e-12)
            a2a = 1 / 16 * 16e6 * x / bi + ai + 14 / 16 * 16e6 * x / be + ae
            assert out[i, j, 3] == pytest.approx(a2a, rel=1e-12)
            # the string-kind wrapper the readers and tests call gives the same seconds
            assert _collective_s("alltoall", 16e6 * x, 4, nets[i], 16) == pytest.approx(a2a, rel=1e-12)
            assert _collective_s("reducescatter", 4e6 * x, 4, nets[i]) == out[i, j, 1]
    # with a route (top-8 of 256 experts) the all-to-all is the flex dispatcher's
    flex = F.collectives_grid(kinds[3:], nbytes[3:], grows[3:], scales, 4.0, nets, 16.0, 4.0, 8.0, 256.0,
                              np.empty((2, 2, 1)))
    for i in range(2):
        for j, x in enumerate(scales):
            assert flex[i, j, 0] == F.flex_alltoall_s(16e6 * x, 16.0, 4.0, nets[i], 8.0, 256.0)
            assert flex[i, j, 0] == _collective_s("alltoall", 16e6 * x, 4, nets[i], 16, route=(8, 256))


def test_overlapped_exposed_elementwise_closed_form():
    """The element-by-element kernel behind the data-gradient overlap (formulas.overlapped_exposed_grid,
    called on (designs, sizes, collectives) arrays) against its closed form max(c - w, share c),
    on strided views as the plan search passes them, and on no collectives at all."""
    from cosearch.plan import _overlapped_exposed
    rng = np.random.default_rng(7)
    c = rng.uniform(0, 2e-3, (3, 5, 4))
    w = rng.uniform(0, 2e-3, (3, 5, 8))[:, :, ::2]           # a strided view
    for share in (0.0, 0.25):
        np.testing.assert_allclose(_overlapped_exposed(c, w, share), np.maximum(c - w, share * c), rtol=0, atol=0)
    assert _overlapped_exposed(c[:, :, :0], w[:, :, :0], 0.25).shape == (3, 5, 0)

def test_hierarchical_allreduce_hand_worked():
    # 16 ranks, 8 per node: reduce-scatter/all-gather over 8 inside (NVLink), all-reduce of
    # the 1/8 shard over 2 nodes on each GPU's own NIC
    cl = cluster.Cluster(32, 8, 300e9, 25e9, link_latency_s=0.0, intra_efficiency=0.5, inter_efficiency=0.8)
    S = 1e9
    t = comm.collective_s("allreduce", S, 16, cl, hardware.A100)
    assert t == pytest.approx(2 * 7 / 8 * S / 150e9 + 2 * 1 / 2 * (S / 8) / 20e9)
    # data-parallel group with stride 8 (tp = 8): every member on another node
    t = comm.collective_s("allreduce", S, 4, cl, hardware.A100, stride=8)
    assert t == pytest.approx(2 * 3 / 4 * S / 20e9)
    # stride 4: two members per node
    t = comm.collective_s("allreduce", S, 4, cl, hardware.A100, stride=4)
    assert t == pytest.approx(2 * 1 / 2 * S / 150e9 + 2 * 1 / 2 * (S / 2) / 20e9)
    # pipeline neighbours 8 ranks apart cross nodes, 2 apart do not
    assert comm.p2p_s(1e9, cl, hardware.A100, stride=8) == pytest.approx(1e9 / 20e9)
    assert comm.p2p_s(1e9, cl, hardware.A100, stride=2) == pytest.approx(1e9 / 150e9)


def test_torus_uses_two_links_per_spanned_dimension():
    pod = cluster.tpuv4_pod(4096)  # 16 x 16 x 16
    link = 50e9 * 0.9
    S = 1e9
    t1 = comm.collective_s("allreduce", S, 16, pod, hardware.TPUv4)
    assert t1 == pytest.approx(2 * 15 / 16 * S / (2 * link) + 2 * 15 * pod.link_latency_s)
    t2 = comm.collective_s("allreduce", S, 256, pod, hardware.TPUv4)
    assert t2 == pytest.approx(2 * 255 / 256 * S / (4 * link) + 2 * 255 * pod.link_latency_s)


def test_cluster_validation_and_presets():
    with pytest.raises(ValueError, match="tile"):
        cluster.Cluster(12, 8, 300e9, 25e9)
    with pytest.raises(ValueError, match="inter_node_Bps"):
        cluster.Cluster(16, 8, 300e9)
    with pytest.raises(ValueError, match="intra_efficiency"):
        cluster.Cluster(8, intra_efficiency=1.5)
    dgx = cluster.preset("dgx-a100", 4)
    assert (dgx.num_chips, dgx.chips_per_node, dgx.intra_node_Bps, dgx.inter_node_Bps) == (32, 8, 300e9, 25e9)
    h = cluster.preset("dgx-h100", 2)
    assert (h.intra_node_Bps, h.inter_node_Bps) == (450e9, 50e9)
    with pytest.raises(ValueError, match="unknown cluster preset"):
        cluster.preset("dgx-z900", 1)
    assert hardware.preset("A100-80GB").hbm_bandwidth_Bps == 2.039e12
    assert hardware.preset("A100-80GB").hbm_bytes == 80 * GiB


# ---------------------------------------------------------------- memory
def test_korthikanti_activation_formulas():
    # GPT layer, 2-byte activations with dropout: Korthikanti et al. 2022, Table 2
    m = tiny()
    s, b, h, a = 128, 2, 256, 8
    for t in (1, 2, 4):
        none = memory.layer_activation_bytes(m, t, b)
        assert none == pytest.approx(s * b * h * (10 + 24 / t + 5 * a * s / (h * t)))
        sel = memory.layer_activation_bytes(m, t, b, recompute="selective")
        assert sel == pytest.approx(s * b * h * (10 + 24 / t))
        sp = memory.layer_activation_bytes(m, t, b, sequence_parallel=True)
        assert sp == pytest.approx(s * b * h * (34 / t + 5 * a * s / (h * t)))
        assert memory.layer_activation_bytes(m, t, b, True, "selective") == pytest.approx(s * b * h * 34 / t)
        full = memory.layer_activation_bytes(m, t, b, recompute="full")
        assert full == pytest.approx(2 * s * b * h)
        flash = memory.layer_activation_bytes(m, t, b, flash_attention=True)
        assert flash == pytest.approx(s * b * h * (10 + 24 / t) + 4 * a * s * b / t)


def test_in_flight_microbatches():
    # 1F1B: stage s holds min(p - s, m); interleaved first stage: p (1 + (p-1)/(p v)) (Korthikanti)
    assert [memory.in_flight(s, 4, 8) for s in range(4)] == [4, 3, 2, 1]
    assert memory.in_flight(0, 4, 2) == 2
    for p, v in ((4, 2), (8, 4), (16, 3)):
        assert memory.in_flight(0, p, 64, v) == pytest.approx(p * (1 + (p - 1) / (p * v)))


def test_zero_static_bytes():
    mem = memory.MemoryConfig()
    P = 1e9
    assert memory.static_bytes(P, 8, 0, mem) == pytest.approx(16e9)
    assert memory.static_bytes(P, 8, 1, mem) == pytest.approx(P * (2 + 2 + 12 / 8))
    assert memory.static_bytes(P, 8, 2, mem) == pytest.approx(P * (2 + 14 / 8))
    assert memory.static_bytes(P, 8, 3, mem) == pytest.approx(P * 16 / 8)


# ---------------------------------------------------------------- graphs
def test_gated_mlp_has_two_tp_allreduces_per_pass():
    m = models.preset("llama2-7b")
    for phase in ("fwd", "bwd"):
        g = graph.build(m, tp=4, phase=phase)
        assert [k for k, _, _ in g.collectives] == ["allreduce", "allreduce"]


def test_sequence_parallel_swaps_allreduce_for_rs_ag():
    m = tiny()
    for phase in ("fwd", "bwd"):
        g = graph.build(m, tp=4, microbatch=2, phase=phase, sequence_parallel=True)
        kinds = sorted(k for k, _, _ in g.collectives)
        assert kinds == ["allgather", "allgather", "reducescatter", "reducescatter"]
    # same bytes on the wire: RS + AG = AR in the ring model
    cl = cluster.Cluster(8)
    u0 = unit_costs(m, hardware.A100, cl, (4,), (2,), (False,))[0, 0, 0, 0]
    u1 = unit_costs(m, hardware.A100, cl, (4,), (2,), (True,))[0, 0, 0, 0]
    assert u1[F.U_LTPF] == pytest.approx(u0[F.U_LTPF]) and u1[F.U_LTPB] == pytest.approx(u0[F.U_LTPB])
    assert u1[F.U_LF] < u0[F.U_LF]  # norms/dropouts/residuals on 1/tp of the rows


def test_flash_attention_has_no_score_traffic():
    m = tiny(seq_len=2048)
    g = graph.build(m, flash_attention=True)
    assert "attn_core" in g.names() and "softmax" not in g.names()
    core = g.ops[g.names().index("attn_core")]
    d = m.head_dim
    assert core.flops == pytest.approx(2 * 2048 * 2048 * d * m.heads)  # causal: half of 4 s^2 d
    assert core.bytes_read + core.bytes_written == pytest.approx(4 * 2048 * d * m.heads * 2)


# ---------------------------------------------------------------- evaluate
def test_evaluate_single_chip_hand_worked():
    m = tiny()
    chip = hardware.A100
    cl = cluster.Cluster(1)
    p = evaluate(m, chip, cl, PlanSpec(1, 1, 1, 2), 2)
    u = unit_costs(m, chip, cl, (1,), (2,))[0, 0, 0, 0]
    compute = 4 * (u[F.U_LF] + u[F.U_LB]) + u[F.U_EF] + u[F.U_EB] + u[F.U_HF] + u[F.U_HB]
    opt = m.num_params() * (2 * 12 + 2 + 2 + 2 * 2) / (chip.hbm_bandwidth_Bps * chip.efficiency.memory)
    assert p.step_time_s == pytest.approx(compute + opt, rel=1e-9)
    assert p.breakdown["optimizer_s"] == pytest.approx(opt)
    assert sum(p.breakdown.values()) == pytest.approx(p.step_time_s)
    s, b, h, a, V = 128, 2, 256, 8, 1000
    acts = 4 * s * b * h * (34 + 5 * a * s / h) + (2 * s * b * h + s * b * h) + (2 * s * b * h + s * b * V * 4)
    assert p.memory_per_chip_bytes[0] == pytest.approx(16 * m.num_params() + acts)
    assert p.tokens_per_s == pytest.approx(2 * 128 / p.step_time_s)


def test_mfu_counts_every_chip_of_the_cluster():
    m = tiny()
    spec = PlanSpec(2, 2, 1, 1)
    small = evaluate(m, hardware.A100, cluster.Cluster(4), spec, 8)
    big = evaluate(m, hardware.A100, cluster.Cluster(8), spec, 8)
    assert big.step_time_s == pytest.approx(small.step_time_s)
    assert big.mfu == pytest.approx(small.mfu / 2)
    assert (big.chips_used, big.idle_chips) == (4, 4)
    assert small.mfu == pytest.approx(m.flops_per_token() * 8 * 128 / (small.step_time_s * 4 * hardware.A100.peak_flops))


def test_interleaving_shrinks_the_bubble_and_adds_p2p():
    m = tiny(num_layers=8)
    cl = cluster.Cluster(4)
    one = evaluate(m, hardware.A100, cl, PlanSpec(1, 1, 4, 1), 16)
    two = evaluate(m, hardware.A100, cl, PlanSpec(1, 1, 4, 1, virtual_stages=2), 16)
    assert two.breakdown["bubble_s"] < one.breakdown["bubble_s"]
    assert two.breakdown["pp_p2p_s"] == pytest.approx(2 * one.breakdown["pp_p2p_s"])


def test_recompute_trades_time_for_memory():
    m = tiny()
    cl = cluster.Cluster(2)
    runs = {rc: evaluate(m, hardware.A100, cl, PlanSpec(1, 1, 2, 2, rc), 8) for rc in ("none", "selective", "full")}
    assert runs["none"].step_time_s < runs["selective"].step_time_s < runs["full"].step_time_s
    mems = {k: max(r.memory_per_chip_bytes) for k, r in runs.items()}
    assert mems["full"] < mems["selective"] < mems["none"]
    assert runs["full"].hfu > runs["full"].mfu and runs["none"].hfu == pytest.approx(runs["none"].mfu)


def test_infeasible_plan_reports_memory_not_exception():
    m = tiny()
    p = evaluate(m, hardware.A100.with_(hbm_bytes=1e6), 2, PlanSpec(1, 1, 2, 1), 2)
    assert not p.feasible and p.tokens_per_s == 0.0 and math.isinf(p.step_time_s)
    assert "GiB per chip" in p.reason and "GiB of HBM" in p.reason
    assert p.to_dict()["step_time_s"] is None


def test_even_split_puts_extra_layers_in_the_middle():
    assert even_split(70, 12) == (5,) + (6,) * 10 + (5,)  # BLOOM's 70 layers on 12 stages
    assert even_split(126, 16) == (7,) + (8,) * 14 + (7,)  # Llama 3 405B
    assert even_split(96, 16) == (6,) * 16
    assert even_split(8, 2, 2) == (4, 4)


@pytest.mark.parametrize("spec,match", [
    (PlanSpec(4, 2, 2, 1), "exceeds the cluster"),
    (PlanSpec(1, 1, 1, 3), "not divisible"),
    (PlanSpec(1, 1, 1, 1, stage_layers=(4,)), None),
    (PlanSpec(1, 1, 2, 1, stage_layers=(1, 2)), "sums to"),
    (PlanSpec(1, 3, 1, 1), "tp=3"),
    (PlanSpec(1, 1, 2, 1, virtual_stages=3), "virtual_stages=3"),
])
def test_bad_specs_name_the_field(spec, match):
    m = tiny()
    if match is None:
        assert evaluate(m, hardware.A100, 8, spec, 8).feasible
        return
    with pytest.raises(ValueError, match=match):
        evaluate(m, hardware.A100, 8, spec, 8)


def test_planspec_validation():
    with pytest.raises(ValueError, match="recompute"):
        PlanSpec(1, 1, 1, 1, recompute="some")
    with pytest.raises(ValueError, match="zero"):
        PlanSpec(1, 1, 1, 1, zero=4)
    with pytest.raises(ValueError, match="dp"):
        PlanSpec(0, 1, 1, 1)
    with pytest.raises(ValueError, match="2 entries"):
        PlanSpec(1, 1, 3, 1, recompute=("none", "full"))
    with pytest.raises(ValueError, match="needs pipeline"):
        PlanSpec(1, 1, 1, 1, virtual_stages=2)
    with pytest.raises(ValueError, match="pp=9"):
        evaluate(tiny(), hardware.A100, 16, PlanSpec(1, 1, 9, 1), 8)
    s = PlanSpec(2, 2, 2, 1, recompute=("none", "full"), stage_layers=(1, 3))
    assert PlanSpec.from_dict(s.to_dict()) == s


def test_plan_json_round_trip():
    from cosearch.plan import Plan
    p = evaluate(tiny(), hardware.A100, 4, PlanSpec(2, 1, 2, 1, "selective"), 8)
    assert Plan.from_dict(p.to_dict()) == p
    assert np.isfinite(p.step_time_s)


# ---------------------------------------------------------------- engines
def test_engine_validation_and_presets():
    from cosearch import engine
    assert engine.preset(None) is engine.MEGATRON_LM
    assert engine.preset("megatron-deepspeed") is engine.MEGATRON_DEEPSPEED
    with pytest.raises(ValueError, match="unknown engine 'colossal'"):
        engine.preset("colossal")
    with pytest.raises(ValueError, match="grad_accum_bytes"):
        engine.Engine("x", grad_accum_bytes=-1)
    with pytest.raises(ValueError, match="overlap_grad_reduce"):
        engine.Engine("x", overlap_grad_reduce="yes")
    with pytest.raises(ValueError, match="unknown engine"):
        evaluate(tiny(), hardware.A100, cluster.Cluster(1), PlanSpec(1, 1, 1, 1), 2, engine="nope")


def test_deepspeed_engine_hand_worked():
    """Megatron-DeepSpeed on a flat 8-chip domain (10 GB/s, 1 us): partitioned pipeline sends
    one at a time, an fp32 accumulation pass of 10 bytes per parameter per microbatch, and the
    fp32 gradient reduction after the pipeline drains — each term worked by hand."""
    m = tiny()
    chip = hardware.A100
    B, a = 1e10, 1e-6
    cl = cluster.Cluster(8, intra_node_Bps=B, link_latency_s=a)
    spec = PlanSpec(2, 2, 2, 1)                       # dp 2, tp 2, pp 2, microbatch 1: 4 microbatches
    lm = evaluate(m, chip, cl, spec, 8)
    ds = evaluate(m, chip, cl, spec, 8, engine="megatron-deepspeed")
    micro = 4
    act = m.seq_len * 1 * m.hidden * 2                # one microbatch's activation, bf16
    # both frameworks send 1/tp of a tensor and all-gather it over the 2 tp ranks on receipt
    gather = (2 - 1) / 2 * act / B + (2 - 1) * a
    send = act / 2 / B + a
    # Megatron: two exchanges per microbatch, each sending and receiving at once
    assert lm.breakdown["pp_p2p_s"] == pytest.approx(micro * 2 * (send + gather), rel=1e-12)
    # DeepSpeed, pp 2 (both stages at an end): send activation + receive gradient (stage 0)
    # or receive activation + send gradient (stage 1), one after the other; one gather
    assert ds.breakdown["pp_p2p_s"] == pytest.approx(micro * (2 * send + gather), rel=1e-12)
    # the critical stage's parameters per chip (tp 2): 2 layers and the embedding or the head
    crit = ds.critical_stage
    norms = 2 * m.norm_params()
    layer = (m.layer_params() - norms) / 2 + norms
    pos = m.seq_len * m.hidden if m.position == "learned" else 0
    extra = m.vocab * m.hidden / 2 + pos if crit == 0 else m.norm_params() + m.vocab * m.hidden / 2
    params = 2 * layer + extra
    bw = chip.hbm_bandwidth_Bps * chip.efficiency.memory
    assert ds.breakdown["grad_accum_s"] == pytest.approx(micro * params * 10 / bw, rel=1e-9)
    assert lm.breakdown["grad_accum_s"] == 0.0
    # ZeRO 0: fp32 gradients all-reduced over dp 2 (ranks tp*... apart, same flat domain), not hidden
    ar = 2 * (2 - 1) / 2 * params * 4 / B + 2 * (2 - 1) * a
    tied = 2 * (2 - 1) / 2 * (m.vocab * m.hidden / 2) * 4 / B + 2 * a    # first/last stage tied embedding
    assert ds.breakdown["dp_exposed_s"] == pytest.approx(ar + tied, rel=1e-9)
    assert ds.step_time_s > lm.step_time_s
    assert sum(ds.breakdown.values()) == pytest.approx(ds.step_time_s, rel=1e-12)


@pytest.mark.parametrize("micro,stages,fwd,bwd,transfer", [
    (128, 12, [0.146] * 12, [0.416] * 12, 0.0209),          # BLOOM-like: 4 transfers ~ 10% of a cycle
    (32, 4, [1.0] * 4, [3.0] * 4, 0.5),
    (24, 6, [1.0] * 6, [2.0] * 6, 0.2),
    (64, 8, [0.5] * 8, [1.5] * 8, 0.05),
    (16, 2, [1.0, 1.0], [2.0, 2.0], 0.4),
])
def test_blocking_pipeline_matches_a_simulated_deepspeed_schedule(micro, stages, fwd, bwd, transfer):
    """The stage formula under a blocking engine (4 transfers per microbatch inside the
    pipeline, 2 at its ends) against a simulation of DeepSpeed's TrainSchedule instruction
    streams with rendezvous sends (tests/reference.py).  Megatron-LM's two exchanges per
    microbatch would be 4-12% short on the first two cases."""
    from tests.reference import deepspeed_pipeline_time
    sim = deepspeed_pipeline_time(micro, stages, fwd, bwd, transfer)
    net = np.array([0.0, 1e9, 1e9, 0.0, 0.0, 0.0])            # flat, 1 GB/s, no latency
    hw = np.zeros(F.NH)
    hw[F.H_HBM], hw[F.H_MEMBW], hw[F.H_P2PB] = 1e30, 1.0, 1.0
    out = np.zeros(F.NB)
    costs = []
    for s in range(stages):
        u = np.zeros(F.NU)
        u[F.U_LF], u[F.U_LB], u[F.U_P2P_BYTES] = fwd[s], bwd[s], transfer * 1e9
        cost, _ = F.stage_terms.py_func(u, net, hw, 1.0, s == 0, s == stages - 1, s, stages, 1, micro,
                                        1.0, 1.0, 0, 1.0, F.RC_NONE, out)
        costs.append(cost)
    assert max(costs) == pytest.approx(sim, rel=0.015)
    hw[F.H_P2PB] = 0.0                                         # the non-blocking count for contrast
    u = np.zeros(F.NU)
    u[F.U_LF], u[F.U_LB], u[F.U_P2P_BYTES] = max(fwd), max(bwd), transfer * 1e9
    two = F.stage_terms.py_func(u, net, hw, 1.0, False, False, 1, stages, 1, micro, 1.0, 1.0, 0, 1.0, F.RC_NONE, out)[0]
    if stages > 2 and transfer * 4 > 0.05 * (max(fwd) + max(bwd)):
        assert two < sim * 0.97


def test_blocking_engine_refuses_interleaving():
    m = tiny()
    cl = cluster.Cluster(8)
    with pytest.raises(ValueError, match="no interleaved pipeline schedule: virtual_stages must be 1, got 2"):
        evaluate(m, hardware.A100, cl, PlanSpec(1, 1, 2, 1, virtual_stages=2), 8, engine="megatron-deepspeed")
    from cosearch import placement
    with pytest.raises(ValueError, match="no interleaved pipeline schedule"):
        placement.search_plans(m, hardware.A100, cl, 8, virtual_stages=(1, 2), engine="megatron-deepspeed")
    res = placement.search_plans(m, hardware.A100, cl, 8, top_k=50, engine="megatron-deepspeed")
    assert res.plans and all(p.spec.virtual_stages == 1 for p in res.plans)


def test_plan_cli_evaluates_and_searches_with_an_engine(capsys):
    import json

    from cosearch import placement
    from cosearch.cli import main
    args = ["plan", "--model", "gpt3-1.3b", "--chip", "A100-80GB", "--cluster", "dgx-a100", "--nodes", "2",
            "--batch", "64", "--json", "--engine", "megatron-deepspeed"]
    cl = cluster.dgx_a100(2)
    assert main(args + ["--dp", "4", "--tp", "2", "--pp", "2", "--mb", "2", "--recompute", "selective", "--zero", "0",
                        "--no-sp", "--virtual", "1"]) == 0
    out = json.loads(capsys.readouterr().out)
    want = evaluate("gpt3-1.3b", "A100-80GB", cl, PlanSpec(4, 2, 2, 2, recompute="selective"), 64,
                    engine="megatron-deepspeed")
    assert out["engine"] == "megatron-deepspeed"
    assert out["plans"][0]["step_time_s"] == pytest.approx(want.step_time_s, rel=1e-12)
    assert out["plans"][0]["breakdown"]["grad_accum_s"] > 0
    assert main(args + ["--tp", "2"]) == 0
    out = json.loads(capsys.readouterr().out)
    best = placement.search_plans("gpt3-1.3b", "A100-80GB", cl, 64, tps=(2,), engine="megatron-deepspeed")
    assert out["plans"][0]["step_time_s"] == pytest.approx(best.best.step_time_s, rel=1e-12)
    with pytest.raises(SystemExit) as exc:                              # unknown engine: argparse's message
        main(args[:-1] + ["colossal", "--tp", "2"])
    assert exc.value.code == 2 and "invalid choice: 'colossal'" in capsys.readouterr().err



def test_plan_cli_chips_per_node_keeps_the_nodes_given(capsys):
    """``--cluster dgx-a100 --nodes 2 --chips-per-node 4`` is 2 nodes of 4 chips (8 chips), priced as
    the same cluster built by hand; it was the preset's 16 chips regrouped into 4 nodes of 4."""
    import json

    from cosearch.cli import main
    args = ["plan", "--model", "gpt3-1.3b", "--cluster", "dgx-a100", "--nodes", "2", "--chips-per-node", "4",
            "--batch", "64", "--json", "--dp", "8", "--tp", "1", "--pp", "1", "--mb", "1", "--recompute", "none",
            "--zero", "1", "--no-sp", "--virtual", "1"]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    cl = cluster.dgx_a100(2).with_(num_chips=8, chips_per_node=4)
    assert (cl.nodes, cl.num_chips) == (2, 8)
    want = evaluate("gpt3-1.3b", "A100-80GB", cl, PlanSpec(8, 1, 1, 1, zero=1), 64, engine="megatron-lm")
    assert out["plans"][0]["step_time_s"] == pytest.approx(want.step_time_s, rel=1e-12)
    # a chip-sized cluster keeps its chips; a size that does not tile them is refused
    assert main(["plan", "--model", "gpt3-1.3b", "--cluster", "gb200-nvl72", "--chips", "64", "--chips-per-node", "5",
                 "--batch", "64"]) == 2
    assert "does not tile num_chips=64" in capsys.readouterr().err


def test_per_stage_recompute_prints_as_runs():
    from cosearch.plan import recompute_runs
    assert recompute_runs(("selective",) * 19 + ("none",) * 2) == "sel×19/none×2"
    assert recompute_runs(("full", "selective", "selective", "none")) == "full/sel×2/none"
    assert PlanSpec(1, 1, 3, 1, recompute=("full", "full", "none")).describe() == "dp1 tp1 pp3 mb1 rc:full×2/none"
