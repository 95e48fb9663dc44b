"""MoE token dispatch as Megatron-Core runs it: the flex dispatcher's per-rank and per-node token
volumes (against brute-force enumeration of every routing), its time worked by hand, the EP
all-to-all overlap's two-stream schedule (against a time-stepped simulation of the two streams),
the overlapped pairs of a pipeline stage worked by hand, the alltoall dispatcher's regrouping of
the received tokens by local expert counted by hand, and the reader and the refusals."""

import itertools
import math

import numpy as np
import pytest

from cosearch import cluster, engine, graph, hardware
from cosearch._kernels import formulas as F
from cosearch.models import ModelConfig
from cosearch.models import preset as models_preset
from cosearch.plan import PlanSpec, evaluate, unit_costs

MOE = ModelConfig("tiny-moe", 4, 256, 8, 512, 1000, 64, kv_heads=2, activation="swiglu", norm="rmsnorm",
                  position="rotary", bias=False, dropout=False, num_experts=8, experts_per_token=2, moe_ffn_hidden=128)


@pytest.mark.parametrize("experts,group,k", [(12, 3, 3), (12, 4, 2), (12, 6, 4), (8, 1, 2), (10, 5, 1), (9, 9, 3)])
def test_expert_group_hit_counts_every_routing(experts, group, k):
    """Over every k-subset of the experts (uniform routing), the share that touches the first
    ``group`` experts."""
    subsets = list(itertools.combinations(range(experts), k))
    hit = sum(1 for s in subsets if min(s) < group) / len(subsets)
    assert F.expert_group_hit(float(experts), float(group), float(k)) == pytest.approx(hit, rel=1e-12)


def test_flex_alltoall_by_hand():
    """8 ranks in one node, 16 experts (2 each), top-2, 1 MB of routed copies (0.5 MB of tokens):
    each token reaches 8 x (1 - C(14,2)/C(16,2)) = 8 x 29/120 ranks, its own included, at
    0.68 of the 400 GB/s intra-node rate; across 2 nodes of 4 (4 experts... 8 per node) the RDMA
    part sends each token once to the other node when it holds one of its experts."""
    net = np.array([8.0, 400e9, 50e9, 2e-6, 5e-6, 0.0])
    tokens = 0.5e6
    ranks = 8 * (1 - (14 * 13) / (16 * 15))
    want = tokens * ranks / (F.FLEX_NVLINK_SHARE * 400e9) + 2e-6
    assert F.flex_alltoall_s(1e6, 8.0, 1.0, net, 2.0, 16.0) == pytest.approx(want, rel=1e-12)
    # two nodes of 4 ranks: NVLink over 4 members, RDMA to the other node
    net4 = net.copy()
    net4[F.N_CPN] = 4.0
    nvl = tokens * ranks / (F.FLEX_NVLINK_SHARE * 400e9) + 2e-6
    rdma = tokens * 1 * (1 - (8 * 7) / (16 * 15)) / (F.FLEX_RDMA_SHARE * 50e9) + 5e-6
    assert F.flex_alltoall_s(1e6, 8.0, 1.0, net4, 2.0, 16.0) == pytest.approx(max(nvl, rdma), rel=1e-12)
    # ep ranks a node (8) apart are those of tp 8 splitting each expert: Megatron-Core's flex
    # dispatcher sends the token to all 8 tp ranks of each hit ep rank over NVLink (8 x 8 x hit
    # destinations), and once over RDMA to each of the 7 other nodes that holds one of its experts
    rdma1 = tokens * 7 * (1 - (14 * 13) / (16 * 15)) / (F.FLEX_RDMA_SHARE * 50e9) + 5e-6
    nvl8 = tokens * 8 * 8 * (1 - (14 * 13) / (16 * 15)) / (F.FLEX_NVLINK_SHARE * 400e9) + 2e-6
    assert F.flex_alltoall_s(1e6, 8.0, 8.0, net, 2.0, 16.0) == pytest.approx(max(rdma1, nvl8), rel=1e-12)
    assert nvl8 > rdma1
    # no expert parallelism: one rank, nothing to send; under tp 4 every token to the 3 other tp ranks
    # (and itself: the kernel copies its own rows too, as HybridEP's measured bytes count them)
    assert F.flex_alltoall_s(1e6, 1.0, 1.0, net, 2.0, 16.0) == 0.0
    assert F.flex_alltoall_s(1e6, 1.0, 4.0, net, 2.0, 16.0) == pytest.approx(
        tokens * 4 / (F.FLEX_NVLINK_SHARE * 400e9) + 2e-6, rel=1e-12)


def _simulate_streams(times, x, dt=1e-4):
    """Time-stepped reference: the compute stream runs af, mb, mw, mf, ab and the communication
    stream cb, df, db, cf in order, each op waiting for its inputs; a compute op advances at
    ``1 - x`` while a communication op is running."""
    order = {"comp": ["af", "mb", "mw", "mf", "ab"], "comm": ["cb", "df", "db", "cf"]}
    deps = {"af": [], "cb": [], "mb": ["cb"], "df": ["af"], "mw": ["mb"], "db": ["mb"], "mf": ["df"],
            "cf": ["mf"], "ab": ["db"]}
    left = dict(times)
    done = {k: v <= 0.0 for k, v in times.items()}
    idx = {"comp": 0, "comm": 0}
    t = 0.0
    while not all(done.values()):
        cur = {}
        for s, ops in order.items():
            while idx[s] < len(ops) and done[ops[idx[s]]]:
                idx[s] += 1
            if idx[s] < len(ops):
                op = ops[idx[s]]
                if all(done[d] for d in deps[op]):
                    cur[s] = op
        comm_on = "comm" in cur
        for s, op in cur.items():
            rate = (1.0 - x) if (s == "comp" and comm_on) else 1.0
            left[op] -= rate * dt
            if left[op] <= 1e-12:
                done[op] = True
        t += dt
        if t > 100.0:
            raise RuntimeError("the reference did not finish")
    return t


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("x", [0.0, 0.15])
def test_ep_overlap_pair_matches_a_stepped_simulation(seed, x):
    rng = np.random.default_rng(seed)
    names = ["af", "df", "mf", "cf", "cb", "mb", "mw", "db", "ab"]
    vals = rng.uniform(0.01, 0.3, size=9)
    if seed % 3 == 0:
        vals[[1, 3, 4, 7]] *= 4.0          # communication-bound layers
    times = dict(zip(names, vals))
    got = F.ep_overlap_pair_s(*vals, x)
    assert got == pytest.approx(_simulate_streams(times, x), abs=2e-3)
    assert got <= vals.sum() + 1e-12


def test_ep_overlap_pair_limits_by_hand():
    """No communication: the compute one after another; no compute: the four all-to-alls one
    after another; communication shorter than the compute beside it and no slow-down: hidden."""
    assert F.ep_overlap_pair_s(1.0, 0.0, 2.0, 0.0, 0.0, 3.0, 4.0, 0.0, 5.0, 0.2) == pytest.approx(15.0)
    assert F.ep_overlap_pair_s(0.0, 1.0, 0.0, 2.0, 3.0, 0.0, 0.0, 4.0, 0.0, 0.2) == pytest.approx(10.0)
    # cb 0.5 beside af 1; df 0.5 beside mb 1; db 0.5 beside mw 1; mf 1; cf 0.5 beside ab 1
    assert F.ep_overlap_pair_s(1.0, 0.5, 1.0, 0.5, 0.5, 1.0, 1.0, 0.5, 1.0, 0.0) == pytest.approx(5.0)
    # the same with the communication kernels holding a fifth of the SMs: each compute op
    # beside a 0.5 s all-to-all does 0.4 of work in it, then 0.6 more: 1.1 s (mf runs alone)
    assert F.ep_overlap_pair_s(1.0, 0.5, 1.0, 0.5, 0.5, 1.0, 1.0, 0.5, 1.0, 0.2) == pytest.approx(4 * 1.1 + 1.0)


def test_overlapped_pairs_of_a_stage_by_hand():
    """A unit row saving 1 s a layer pair: pp 2 x v 2, m 4 microbatches (8 chunks a stage):
    stage 0 warms up 2 (2 - 0 - 1) + (2 - 1) 2 + 1 = 5 chunks, leaving 3 pairs = 1.5 microbatches
    of 4 layers: 6 s; stage 1 warms up 3: 2.5 x 4 = 10 s.  Without a pipeline, every microbatch
    but the first: (4 - 1) x 4."""
    u = np.zeros(F.NU)
    u[F.U_LF], u[F.U_LB], u[F.U_LTPF], u[F.U_LTPB] = 1.0, 2.0, 3.0, 3.0
    net = np.array([8.0, 1e12, 1e11, 0.0, 0.0, 0.0])
    hw = np.zeros(F.NH)
    hw[F.H_HBM], hw[F.H_MEMBW] = 1e30, 1e12
    out = np.zeros(F.NB)

    def cost(save, s, pp, v):
        u[F.U_EPO] = save
        return F.stage_terms(u, net, hw, 4.0, s == 0, s == pp - 1, s, pp, v, 4, 1.0, 1.0, 0, 1.0, 0, out)[0]
    assert cost(0.0, 0, 2, 2) - cost(1.0, 0, 2, 2) == pytest.approx(6.0)
    assert cost(0.0, 1, 2, 2) - cost(1.0, 1, 2, 2) == pytest.approx(10.0)
    assert cost(0.0, 0, 1, 1) - cost(1.0, 0, 1, 1) == pytest.approx(12.0)
    # the placement search's lower bound stays below the cost
    u[F.U_EPO] = 1.0
    assert F.unit_work(u, 4) * 4 <= cost(1.0, 0, 1, 1) + 1e-12


def _plan(eng, spec=None):
    spec = spec or PlanSpec(8, 1, 1, 2, expert_parallel=8)
    return evaluate(MOE, "H100", cluster.preset("dgx-h100", 1), spec, 64, engine=eng)


def test_alltoall_dispatch_regroups_the_received_tokens_by_hand():
    """Megatron-Core's alltoall dispatcher sorts the copies a rank receives by local expert
    (``sort_chunks_by_idxs``) and restores their order before the combine; the flex dispatcher
    does not.  Mixtral's 4,096-token sequence, top-2: a rank receives 4,096 x 2 = 8,192 copies of
    4,096 bf16 values (the 8 experts split over ep 2: 4 a rank), so each pass reads and writes
    8,192 x 4,096 x 2 B = 64 MiB, at 0.90 of the H100's 3.35 TB/s plus the 4 us launch.  At tp 1
    the two passes and their two backwards are the whole difference between the dispatchers'
    compute."""
    m = models_preset("mixtral-8x7b").with_(num_layers=4)
    rows = 4096 * 2
    nbytes = rows * 4096 * 2
    f, b = graph.build_pair(m, 1, 1, expert_parallel=2, flash_attention=True)
    for op in [o for o in f.ops + b.ops if o.name.split(".")[0] in ("moe_sort", "moe_unsort")]:
        assert (op.elements, op.bytes_read, op.bytes_written) == (rows * 4096, nbytes, nbytes)
    assert [o.name for o in f.ops if "sort" in o.name] == ["moe_sort", "moe_unsort"]
    assert [o.name for o in b.ops if "sort" in o.name] == ["moe_unsort.grad", "moe_sort.grad"]
    flex, _ = graph.build_pair(m, 1, 1, expert_parallel=2, flash_attention=True, moe_dispatcher="flex")
    assert not any("sort" in o.name for o in flex.ops)
    # on the experts' side of the EP overlap, and rerun with the whole MoE block
    assert {"moe_sort", "moe_unsort"} <= set(graph.MOE_EXPERT_OPS) & set(graph.RECOMPUTE_MODULES["moe"])
    chip, cl = hardware.H100, cluster.preset("dgx-h100", 1)
    spec = PlanSpec(8, 1, 1, 1, zero=1, flash_attention=True, expert_parallel=2)
    core = engine.preset("megatron-core")
    a2a = evaluate(m, chip, cl, spec, 16, engine=core)
    fx = evaluate(m, chip, cl, spec, 16, engine=engine.with_moe_dispatch(core, "flex"))
    one = 2 * nbytes / (3.35e12 * 0.9) + 4e-6
    passes = 4 * (16 // 8) * 2               # 4 layers x 2 microbatches x (sort, unsort)
    assert a2a.breakdown["forward_s"] - fx.breakdown["forward_s"] == pytest.approx(passes * one, rel=1e-6)
    assert a2a.breakdown["backward_s"] - fx.breakdown["backward_s"] == pytest.approx(passes * one, rel=1e-6)
    # one expert a rank (ep 8 of 8): nothing to regroup
    spec8 = PlanSpec(8, 1, 1, 1, zero=1, flash_attention=True, expert_parallel=8)
    assert not any("sort" in o.name for o in graph.build(m, 1, 1, expert_parallel=8, flash_attention=True).ops)
    a8 = evaluate(m, chip, cl, spec8, 16, engine=core)
    f8 = evaluate(m, chip, cl, spec8, 16, engine=engine.with_moe_dispatch(core, "flex"))
    assert a8.breakdown["forward_s"] == pytest.approx(f8.breakdown["forward_s"], rel=1e-12)
    with pytest.raises(ValueError, match="dt must be"):
        graph.moe_regroup_bytes(3)
    with pytest.raises(ValueError, match="moe_dispatcher"):
        graph.build(m, 1, 1, expert_parallel=2, moe_dispatcher="deepep")


def test_flex_and_overlap_in_a_plan():
    """One expert per rank, top-2: the flex dispatcher sends each token to exactly its 2 ranks,
    its own included, at 0.68 of the intra-node rate; NCCL's all-to-all 2 copies, 7/8 of them
    to other ranks, at the full rate.  The overlap saves (m - 1) pair savings of every layer
    (no pipeline), never more than the all-to-alls' time."""
    base = engine.preset("megatron-core")
    flex = engine.with_moe_dispatch(base, "flex")
    ovl = engine.with_moe_dispatch(base, "flex", True)
    assert flex.name == "megatron-core-flex" and ovl.name == "megatron-core-flex-a2a-overlap"
    p_flex, p_ovl = _plan(flex), _plan(ovl)
    cl = cluster.preset("dgx-h100", 1)
    u = unit_costs(MOE, hardware.H100, cl, (1,), (2,), engine=ovl, expert_parallel=8)[0, 0, 0, 0]
    u_nccl = unit_costs(MOE, hardware.H100, cl, (1,), (2,), engine=base, expert_parallel=8)[0, 0, 0, 0]
    u_flex = unit_costs(MOE, hardware.H100, cl, (1,), (2,), engine=flex, expert_parallel=8)[0, 0, 0, 0]
    net = cl.net_array(hardware.H100)
    tokens = 2 * 64 * 256 * 2                 # microbatch 2 x 64 tokens x 256 hidden x 2 bytes
    a2a_nccl = F.alltoall_s(2.0 * tokens, 8.0, 1.0, net)
    a2a_flex = F.flex_alltoall_s(2.0 * tokens, 8.0, 1.0, net, 2.0, 8.0)
    assert a2a_flex == pytest.approx(2 * tokens / (F.FLEX_NVLINK_SHARE * net[F.N_BWI]) + net[F.N_LATI])
    # four all-to-alls a layer (dispatch and combine, forward and backward)
    assert (u_flex[F.U_LTPF] + u_flex[F.U_LTPB]) - (u_nccl[F.U_LTPF] + u_nccl[F.U_LTPB]) == pytest.approx(
        4 * (a2a_flex - a2a_nccl), rel=1e-9)
    assert 0.0 < u[F.U_EPO] <= u[F.U_LTPF] + u[F.U_LTPB]
    m = p_ovl.num_microbatches
    saved = (m - 1) * MOE.num_layers * u[F.U_EPO]
    assert p_flex.step_time_s - p_ovl.step_time_s == pytest.approx(saved, rel=1e-9)
    assert p_flex.breakdown["tp_comm_s"] - p_ovl.breakdown["tp_comm_s"] == pytest.approx(saved, rel=1e-9)


def test_overlap_refusals():
    ovl = engine.with_moe_dispatch(engine.preset("megatron-core"), "alltoall", True)
    with pytest.raises(ValueError, match="expert_parallel > 1"):
        _plan(ovl, PlanSpec(8, 1, 1, 2))
    with pytest.raises(ValueError, match="virtual_stages > 1"):
        _plan(ovl, PlanSpec(4, 1, 2, 2, expert_parallel=4))
    with pytest.raises(ValueError, match="full recompute"):
        _plan(ovl, PlanSpec(8, 1, 1, 2, expert_parallel=8, recompute="full"))
    with pytest.raises(ValueError, match="does not restrict"):
        from cosearch.placement import search_plans
        search_plans(MOE, "H100", cluster.preset("dgx-h100", 1), 64, engine=ovl)
    with pytest.raises(ValueError, match="moe_dispatcher"):
        engine.Engine(moe_dispatcher="deepep")
    with pytest.raises(ValueError, match="moe_comm_sms"):
        engine.Engine(moe_comm_sms=-1)
    assert engine.moe_comm_sms(engine.Engine(moe_dispatcher="flex"), False) == 24
    assert engine.moe_comm_sms(engine.Engine(moe_dispatcher="flex"), True) == 8
    assert engine.moe_comm_sms(engine.Engine(), True) == 32


def test_the_reader_sets_dispatch_from_the_notes():
    from cosearch.runs.rows import describe_row
    row = {"id": "t", "src": "x", "model": "Tiny", "arch": "MoE", "software": "Megatron-Bridge / NeMo 26.04 container",
           "accel": "H100-SXM-80GB", "gpus_per_node": 8, "n_gpus": 16, "layers": 4, "hidden": 256, "heads": 8,
           "kv_heads": 2, "ffn": None, "moe_ffn": 128, "num_experts": 8, "experts_per_token": 2,
           "shared_experts": 0, "moe_layers": "all", "vocab": 1000, "seq": 64, "gbs": 64, "mbs": 2, "tp": 1,
           "pp": 1, "cp": 1, "ep": 8, "dp": 16, "precision": "BF16", "recompute": "none", "zero": 1,
           "tok_s_gpu": 1000.0, "complete": True,
           "notes": "moe dispatcher backend=hybridep; EP a2a overlap on; token-dropless"}
    try:
        d = describe_row(row)
    except Exception as e:          # the reader's own refusal names a missing field, never a traceback
        pytest.fail(f"the row was refused: {e}")
    assert d.engine.moe_dispatcher == "flex" and d.engine.overlap_moe_a2a
    row["notes"] = "token-dropless"
    d = describe_row(row)
    assert d.engine.moe_dispatcher == "alltoall" and not d.engine.overlap_moe_a2a
    assert math.isfinite(evaluate(d.model, d.chip, d.cluster, d.spec, d.global_batch, engine=d.engine).step_time_s)


def test_userbuffers_overlap_by_hand():
    """Transformer Engine's overlap methods on a 132-SM chip (16 SMs to the pipelined and bulk
    collectives: the GEMM runs 132/116 slower): ring exchange over tp 4 of a 3 ms GEMM and a
    6 ms all-gather: 0.75 + 3 x max(0.75, 2) = 6.75 ms, 3.75 exposed; pipelined 4 ms GEMM + 2 ms
    reduce-scatter: g' = 4 x 132/116, g'/4 + 3 max(g'/4, 0.5) + 0.5; bulk: max(g', c)."""
    assert F.userbuffers_exposed_s(F.UB_RING, 3.0, 6.0, 4.0, 132.0) == pytest.approx(6.75 - 3.0)
    assert F.userbuffers_exposed_s(F.UB_RING, 8.0, 6.0, 4.0, 132.0) == pytest.approx(2.0 + 3 * 2.0 - 8.0)
    g = 4.0 * 132 / 116
    assert F.userbuffers_exposed_s(F.UB_PIPELINE, 4.0, 2.0, 4.0, 132.0) == pytest.approx(g / 4 + 3 * g / 4 + 0.5 - 4.0)
    assert F.userbuffers_exposed_s(F.UB_BULK, 4.0, 2.0, 4.0, 132.0) == pytest.approx(g - 4.0)
    assert F.userbuffers_exposed_s(F.UB_BULK, 1.0, 2.0, 4.0, 132.0) == pytest.approx(1.0)
    assert F.userbuffers_exposed_s(F.UB_PIPELINE, 4.0, 0.0, 4.0, 132.0) == 0.0


def test_userbuffers_pairs_each_collective_with_its_gemm():
    """A tp 4 SP layer on H100 under the userbuffers engine: what stage_terms adds beyond the
    whole-layer rule equals the sum over the collectives of each one's exposure beside its own GEMM
    (all-gather: the next GEMM, ring; reduce-scatter: the previous, pipelined forward, bulk
    backward), and in the backward the inputs of QKV and FC1 gathered again in bulk beside their
    data-gradient GEMMs (``ub_bulk_dgrad``), less the whole-layer rule's exposure, worked from the
    op prices."""
    from cosearch import engine as eng_mod
    from cosearch import graph, plan
    from cosearch.cost import price
    m = models_preset("llama3-8b")
    cl = cluster.preset("dgx-h100", 1)
    e = eng_mod.megatron_core(tp_comm_overlap=True)
    u = unit_costs(m, hardware.H100, cl, (4,), (1,), (True,), True, engine=e)[0, 0, 0, 0]
    net = cl.net_array(hardware.H100)
    eff = hardware.H100.efficiency
    for ph, fx, fc, ft in (("fwd", F.U_TPXF, F.U_LTPF, F.U_LF), ("bwd", F.U_TPXB, F.U_LTPB, F.U_LB)):
        g = graph.build(m, 4, 1, ph, sequence_parallel=True, flash_attention=True)
        t = price(g.arrays(), hardware.H100.with_(efficiency=eff).as_array()[None], efficiency=eff)[0]
        exposed = 0.0
        for i, op in enumerate(g.ops):
            if op.kind not in ("allgather", "reducescatter"):
                continue
            c = plan._collective_s(op.kind, op.bytes_read, 4, net)
            if op.kind == "allgather":
                j = next(k for k in range(i + 1, len(g.ops)) if g.ops[k].kind == "gemm")
                exposed += F.userbuffers_exposed_s(F.UB_RING, t[j], c, 4.0, 132.0)
            else:
                j = next(k for k in range(i - 1, -1, -1) if g.ops[k].kind == "gemm")
                exposed += F.userbuffers_exposed_s(F.UB_PIPELINE if ph == "fwd" else F.UB_BULK, t[j], c, 4.0, 132.0)
        if ph == "bwd":
            names = [op.name for op in g.ops]
            fwd = graph.build(m, 4, 1, "fwd", sequence_parallel=True, flash_attention=True)
            for ag, gemm in (("allgather_attn", "qkv"), ("allgather_mlp", "fc1")):
                c = plan._collective_s("allgather", next(op for op in fwd.ops if op.name == ag).bytes_read, 4, net)
                exposed += F.userbuffers_exposed_s(F.UB_BULK, t[names.index(gemm + ".dgrad")], c, 4.0, 132.0)
        assert u[fx] == pytest.approx(max(0.0, exposed - max(0.0, u[fc] - u[ft])), rel=1e-9)
        assert u[fx] > 0.0
    # the whole-layer rule adds nothing
    from dataclasses import replace
    whole = replace(e, name="whole-layer", tp_overlap_kernel="whole-layer")
    u2 = unit_costs(m, hardware.H100, cl, (4,), (1,), (True,), True, engine=whole)[0, 0, 0, 0]
    assert u2[F.U_TPXF] == 0.0 and u2[F.U_TPXB] == 0.0


def test_megatron_data_gradient_collectives_ride_beside_their_weight_gradients():
    """Megatron-Core without --tp-comm-overlap (Transformer Engine's "Overlap dgrad-RS/AR with
    wgrad"), llama3-8b at tp 4 on H100, worked by hand from the graphs: the forward's collectives
    are all exposed; in the backward the data gradient of QKV and of FC1 (reduce-scatter under
    sequence parallelism, all-reduce without) runs beside that layer's weight-gradient GEMM, which
    NCCL's 24 CTAs slow by 24/132 meanwhile, so it shows max(c - w, 24/132 c); the gathers of the
    output projection's and FC2's gradients show whole; and under sequence parallelism the inputs
    of QKV and FC1, kept sharded, are gathered again beside their data-gradient GEMMs ("Overlap
    input AG with dgrad"): max(c - d, 24/132 c) each.  Megatron-LM 2021 (no such overlap) shows
    every collective second."""
    from cosearch import graph, plan
    from cosearch.cost import price
    m = models_preset("llama3-8b")
    cl = cluster.preset("dgx-h100", 1)
    net = cl.net_array(hardware.H100)
    eff = hardware.H100.efficiency
    on = np.zeros(F.NH)
    on[F.H_TP_OVERLAP] = 1.0
    share = 24.0 / 132.0
    riding = {True: {"allgather_mlp.grad": "fc1.wgrad", "allgather_attn.grad": "qkv.wgrad"},
              False: {"fc1.allreduce": "fc1.wgrad", "qkv.allreduce": "qkv.wgrad"}}
    for sp in (True, False):
        u = unit_costs(m, hardware.H100, cl, (4,), (1,), (sp,), True, engine="megatron-core")[0, 0, 0, 0]
        old = unit_costs(m, hardware.H100, cl, (4,), (1,), (sp,), True, engine="megatron-lm-2021")[0, 0, 0, 0]
        assert old[F.U_LTPF] == u[F.U_LTPF] > 0 and old[F.U_LTPB] == u[F.U_LTPB] > 0
        shown = {}
        for ph in ("fwd", "bwd"):
            g = graph.build(m, 4, 1, ph, sequence_parallel=sp, flash_attention=True)
            t = dict(zip((op.name for op in g.ops),
                         price(g.arrays(), hardware.H100.as_array()[None], efficiency=eff)[0]))
            total = 0.0
            for op in g.ops:
                if op.kind not in graph.NETWORK_KINDS:
                    continue
                c = plan._collective_s(op.kind, op.bytes_read, 4, net)
                w = t[riding[sp][op.name]] if ph == "bwd" and op.name in riding[sp] else None
                total += c if w is None else max(c - w, share * c)
            if ph == "bwd":     # both data gradients are in the graph, each right after its weight gradient
                names = [op.name for op in g.ops]
                assert all(names[names.index(n) - 1] == w for n, w in riding[sp].items())
                if sp:
                    fwd = graph.build(m, 4, 1, "fwd", sequence_parallel=True, flash_attention=True)
                    for ag, gemm in (("allgather_attn", "qkv"), ("allgather_mlp", "fc1")):
                        c = plan._collective_s("allgather", next(o for o in fwd.ops if o.name == ag).bytes_read,
                                               4, net)
                        total += max(c - t[gemm + ".dgrad"], share * c)
            shown[ph] = total
        f, b = F.layer_tp_seconds(u, on)
        assert f == pytest.approx(u[F.U_LTPF], rel=1e-12) and f == pytest.approx(shown["fwd"], rel=1e-12)
        assert b == pytest.approx(shown["bwd"], rel=1e-12) and b < u[F.U_LTPB]
        assert F.layer_tp_seconds(old, np.zeros(F.NH)) == (old[F.U_LTPF], old[F.U_LTPB])
        # the lower-bound time models charge at least every collective but the riding ones, and
        # no more than the rule itself: a layer's backward wall time stays a lower bound
        for tm in ("bound", "work-bound"):
            lo = unit_costs(m, hardware.H100, cl, (4,), (1,), (sp,), True, engine="megatron-core",
                            time_model=tm)[0, 0, 0, 0]
            fl, bl = F.layer_tp_seconds(lo, on)
            assert fl == pytest.approx(lo[F.U_LTPF], rel=1e-12)
            assert lo[F.U_LB] + bl <= u[F.U_LB] + b + 1e-15
            assert bl >= u[F.U_LTPB] - sum(plan._collective_s(op.kind, op.bytes_read, 4, net) for op in
                                           graph.build(m, 4, 1, "bwd", sequence_parallel=sp, flash_attention=True).ops
                                           if op.name in riding[sp]) - 1e-15


def test_async_collectives_hide_only_behind_independent_compute():
    """MaxText's asynchronous collectives (no collective matmul), a tp 4 SP layer on TPU v5p:
    the forward's collectives, which every next op waits for, are all exposed; the backward's
    hide behind the layer's weight-gradient GEMMs only.  Worked from the graphs: each collective
    priced alone, each weight-gradient GEMM priced alone; then one stage of 4 layers and 2
    microbatches charges 8 x (TP_f + max(0, TP_b - W_b)) as its layers' TP time (the embedding's
    and the head's collectives besides, each microbatch, as every engine charges them)."""
    from cosearch import graph, plan
    from cosearch.cost import price
    from cosearch.engine import MAXTEXT
    assert MAXTEXT.tp_overlap_kernel == "async"
    m = ModelConfig("tiny-tp", 4, 2048, 16, 8192, 32000, 2048, kv_heads=4, activation="swiglu", norm="rmsnorm",
                    position="rotary", bias=False)
    chip = hardware.preset("tpuv5p")
    cl = cluster.preset("tpuv5p-pod", 4)
    net = cl.net_array(chip)
    u = unit_costs(m, chip, cl, (4,), (1,), (True,), True, engine=MAXTEXT)[0, 0, 0, 0]
    exposed = {}
    for ph in ("fwd", "bwd"):
        g = graph.build(m, 4, 1, ph, sequence_parallel=True, flash_attention=True)
        t = price(g.arrays(), chip.as_array()[None], efficiency=chip.efficiency)[0]
        tp = sum(plan._collective_s(op.kind, op.bytes_read, 4, net) for op in g.ops if op.kind in graph.NETWORK_KINDS)
        assert tp == pytest.approx(u[F.U_LTPF if ph == "fwd" else F.U_LTPB], rel=1e-12) and tp > 0
        wgrad = sum(x for op, x in zip(g.ops, t) if op.name.endswith(".wgrad"))
        assert (wgrad > 0) == (ph == "bwd")
        exposed[ph] = max(0.0, tp - wgrad)
    assert exposed["fwd"] == u[F.U_LTPF]
    lf, lb = F.layer_tp_seconds(u, np.array([1.0 if i == F.H_TP_OVERLAP else 0.0 for i in range(F.NH)]))
    assert lf == pytest.approx(exposed["fwd"], rel=1e-12) and lb == pytest.approx(exposed["bwd"], rel=1e-12)
    assert exposed["bwd"] < u[F.U_LTPB]          # the weight gradients do hide some
    p = evaluate(m, chip, cl, PlanSpec(1, 4, 1, 1, sequence_parallel=True, flash_attention=True), 2, engine=MAXTEXT)
    ends = u[F.U_ETPF] + u[F.U_ETPB] + u[F.U_HTPF] + u[F.U_HTPB]
    assert p.breakdown["tp_comm_s"] == pytest.approx(8 * (exposed["fwd"] + exposed["bwd"]) + 2 * ends, rel=1e-9)


def test_overlap_terms_under_each_time_model():
    """The scheduled time models take the overlap saving and the userbuffers exposure from the
    ops' serial prices, as the sum model does; the lower-bound models keep what can only lower
    the bound (every all-to-all second saved; the whole-layer TP rule)."""
    ovl = engine.with_moe_dispatch(engine.megatron_core(tp_comm_overlap=True), "flex", True)
    cl = cluster.preset("dgx-h100", 1)
    args = (MOE, hardware.H100, cl, (2,), (2,), (True,), True)
    u = {tm: unit_costs(*args, engine=ovl, expert_parallel=4, time_model=tm)[0, 0, 0, 0]
         for tm in ("sum", "list", "bound")}
    assert u["list"][F.U_EPO] == pytest.approx(u["sum"][F.U_EPO], rel=1e-12) and u["sum"][F.U_EPO] > 0
    assert u["list"][F.U_TPXF] == pytest.approx(u["sum"][F.U_TPXF], rel=1e-12)
    assert u["bound"][F.U_TPXF] == 0.0 and u["bound"][F.U_EPO] >= u["sum"][F.U_EPO]


def test_megatron_lines_read_the_dispatch():
    """--moe-token-dispatcher-type flex (DeepEP or HybridEP backend, or the deprecated
    --moe-enable-deepep) and --overlap-moe-expert-parallel-comm set the engine; Megatron's default
    allgather dispatcher is priced as the all-to-all and said so; a wrong value is refused."""
    from cosearch.runs.megatron import read_megatron_args
    line = ("--num-layers 4 --hidden-size 256 --num-attention-heads 8 --seq-length 64 --vocab-size 1000 "
            "--num-experts 8 --moe-router-topk 2 --moe-ffn-hidden-size 128 --swiglu --micro-batch-size 1 "
            "--expert-model-parallel-size 8 ")
    r = read_megatron_args(line + "--moe-token-dispatcher-type flex --moe-flex-dispatcher-backend hybridep "
                                  "--overlap-moe-expert-parallel-comm")
    assert r.engine.moe_dispatcher == "flex" and r.engine.overlap_moe_a2a
    assert read_megatron_args(line + "--moe-enable-deepep").engine.moe_dispatcher == "flex"
    r = read_megatron_args(line + "--moe-token-dispatcher-type alltoall")
    assert r.engine.moe_dispatcher == "alltoall" and not r.engine.overlap_moe_a2a
    r = read_megatron_args(line)
    assert any("allgather" in a for a in r.assumed)
    with pytest.raises(ValueError, match="accepts allgather, alltoall or flex"):
        read_megatron_args(line + "--moe-token-dispatcher-type deepep")


def test_megatron_bridge_configs_read_the_dispatch():
    """A Megatron-Bridge dump's model.moe_token_dispatcher_type / moe_flex_dispatcher_backend and
    comm_overlap.overlap_moe_expert_parallel_comm reach the engine as the Megatron line would."""
    from cosearch.runs.nemo import read_megatron_bridge
    cfg = {"model": {"num_layers": 4, "hidden_size": 256, "num_attention_heads": 8, "seq_length": 64,
                     "vocab_size": 1000, "num_moe_experts": 8, "moe_router_topk": 2, "moe_ffn_hidden_size": 128,
                     "gated_linear_unit": True, "expert_model_parallel_size": 8,
                     "moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": "deepep"},
           "comm_overlap": {"overlap_moe_expert_parallel_comm": True},
           "train": {"micro_batch_size": 1, "global_batch_size": 64}}
    r = read_megatron_bridge(cfg)
    assert r.engine.moe_dispatcher == "flex" and r.engine.overlap_moe_a2a
    cfg["model"]["moe_token_dispatcher_type"] = "alltoall"
    del cfg["comm_overlap"]
    r = read_megatron_bridge(cfg)
    assert r.engine.moe_dispatcher == "alltoall" and not r.engine.overlap_moe_a2a


def test_the_cli_sets_the_dispatcher_and_the_overlap(capsys):
    """``cosearch plan --moe-dispatcher / --moe-a2a-overlap`` price the plan as ``evaluate`` does
    with the engine they name (``engine.with_moe_dispatch``); a dense model, or a dispatcher the
    run's own Megatron line contradicts, is refused by name."""
    import json

    from cosearch.cli import main
    m = models_preset("qwen3-30b-a3b")
    cl = cluster.preset("dgx-h100", 2)
    spec = PlanSpec(16, 1, 1, 1, zero=1, flash_attention=True, expert_parallel=16)
    core = engine.preset("megatron-core")
    args = ["plan", "--model", "qwen3-30b-a3b", "--cluster", "dgx-h100", "--nodes", "2", "--batch", "64", "--dp", "16",
            "--tp", "1", "--pp", "1", "--mb", "1", "--ep", "16", "--zero", "1", "--flash", "--recompute", "none",
            "--engine", "megatron-core", "--json"]
    for extra, eng in (([], core), (["--moe-dispatcher", "flex"], engine.with_moe_dispatch(core, "flex")),
                       (["--moe-dispatcher", "flex", "--moe-flex-backend", "deepep"],
                        engine.with_moe_dispatch(core, "flex", backend="deepep")),
                       (["--moe-a2a-overlap"], engine.with_moe_dispatch(core, "alltoall", True))):
        assert main(args + extra) == 0
        got = json.loads(capsys.readouterr().out)["plans"][0]["step_time_s"]
        assert got == pytest.approx(evaluate(m, "H100", cl, spec, 64, engine=eng).step_time_s, rel=1e-12)
    assert main(["plan", "--model", "llama3-8b", "--cluster", "dgx-h100", "--nodes", "1", "--batch", "64",
                 "--moe-dispatcher", "flex"]) == 2
    assert "has no experts" in capsys.readouterr().err
    assert main(args + ["--moe-flex-backend", "deepep"]) == 2
    assert "add --moe-dispatcher flex" in capsys.readouterr().err
    line = ("--tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 --expert-model-parallel-size 16 "
            "--micro-batch-size 1 --global-batch-size 64 --moe-token-dispatcher-type flex "
            "--moe-flex-dispatcher-backend hybridep --use-distributed-optimizer --bf16")
    assert main(["plan", "--model", "qwen3-30b-a3b", "--cluster", "dgx-h100", "--nodes", "2", "--from-megatron-args",
                 line, "--moe-dispatcher", "alltoall"]) == 2
    assert "contradicts" in capsys.readouterr().err


def test_flex_dispatch_buffers_by_hand():
    """The bytes a rank allocates for the flex dispatcher's buffers, counted by hand from DeepEP's
    ``get_nvl_buffer_size_hint`` / ``get_rdma_buffer_size_hint`` and HybridEP's allocations
    (hidden 4,096, 20 DeepEP SMs: 10 channels; a token slot 8,192 B of row + 8 of source meta +
    128 x (8 + 4 + 4) of top-k indices, weights and scales = 10,248 B):

    * DeepEP, 8 ranks (dispatch and combine both 256 NVLink slots): 10 x 8 x 5 x 4 + 10 x 8 x 256
      x 10,248 = 209,880,640, rounded up to 128 B: 209,880,704; no RDMA part.
    * DeepEP, 16 ranks (2 RDMA ranks; 288 NVLink slots; RDMA receive chunks 128 aligned up to the
      dispatch's 20-token sends: 140): NVLink 10 x 8 x 7 x 4 + 10 x 8 x 288 x 10,248 = 236,116,160 ->
      236,116,224; RDMA 10 x 2 x 18 x 2 x 4 + 10 x 2 x 140 x 10,264 x 2 = 57,481,280 -> 57,481,344.
    * HybridEP, 2,048 tokens a rank, 16 ranks in 2 domains of 8, 4 experts a rank: in the domain
      room for 2,048 x 16 tokens of 8,192 B + 4 x 8 fp32 probabilities + 32 fp32 scales (8,448 B):
      276,824,064; across domains the dispatch's own tokens (8,192 + 4 x 16 x 4 + 128 B) and the
      other domain's (8,448 B), 2,048 each, and the combine's two buffers of 2,048 x (8,192 + 128):
      17,563,648 + 17,301,504 + 34,078,720."""
    from cosearch import memory
    assert memory.moe_dispatch_buffer_bytes("deepep", 4096, 2048, 8, 8, 4, 20) == 209_880_704
    assert memory.moe_dispatch_buffer_bytes("deepep", 4096, 2048, 16, 8, 4, 20) == 236_116_224 + 57_481_344
    assert memory.moe_dispatch_buffer_bytes("hybridep", 4096, 2048, 16, 8, 4, 24) == \
        276_824_064 + 17_563_648 + 17_301_504 + 34_078_720
    # one domain: no cross-domain staging
    assert memory.moe_dispatch_buffer_bytes("hybridep", 4096, 2048, 8, 8, 4, 24) == 2048 * 8 * (8192 + 128 + 128)
    for bad in (("nccl", 4096, 1, 8, 8, 4, 20), ("deepep", 0, 1, 8, 8, 4, 20), ("hybridep", 4096, 1.5, 8, 8, 4, 20)):
        with pytest.raises(ValueError):
            memory.moe_dispatch_buffer_bytes(*bad)


def test_a_plan_keeps_its_dispatch_buffers():
    """A plan's memory is its dispatcher's buffers more under the flex dispatcher than under NCCL's
    (tp 1: the same activations and weights): HybridEP's for one 4,096-token Mixtral sequence a
    rank over ep 8 in one 8-GPU node, DeepEP's for the same group; the step time does not change
    with the backend (both at HybridEP's measured rates) unless the SMs it holds do."""
    from cosearch import memory
    m = models_preset("mixtral-8x7b").with_(num_layers=4)
    cl = cluster.preset("dgx-h100", 1)
    spec = PlanSpec(8, 1, 1, 1, zero=1, flash_attention=True, expert_parallel=8)
    core = engine.preset("megatron-core")
    base = max(evaluate(m, "H100", cl, spec, 16, engine=core).memory_per_chip_bytes)
    for backend, sms in (("hybridep", engine.FLEX_SMS_NVLINK), ("deepep", engine.FLEX_SMS_DEEPEP)):
        e = engine.with_moe_dispatch(core, "flex", backend=backend)
        assert engine.moe_comm_sms(e, False) == sms
        got = max(evaluate(m, "H100", cl, spec, 16, engine=e).memory_per_chip_bytes)
        want = memory.moe_dispatch_buffer_bytes(backend, 4096, 4096, 8, 8, 1, sms)
        assert got - base == pytest.approx(want, rel=1e-9)
    assert memory.moe_dispatch_buffer_bytes("hybridep", 4096, 4096, 8, 8, 1, 24) == 4096 * 8 * (8192 + 32 + 128)
    with pytest.raises(ValueError, match="moe_flex_backend"):
        engine.Engine(moe_flex_backend="nccl")


def test_the_readers_name_the_flex_backend():
    """A Megatron line that runs the flex dispatcher without naming a backend runs DeepEP
    (Megatron-Core's ``moe_flex_dispatcher_backend`` default), said in its assumptions; a named
    backend is kept; a validation row's backend comes from its config or notes."""
    from cosearch.runs.megatron import parse_megatron_args
    m = models_preset("qwen3-30b-a3b")
    base = ("--tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 --expert-model-parallel-size 8 "
            "--micro-batch-size 1 --global-batch-size 64 --moe-token-dispatcher-type flex --bf16")
    mp = parse_megatron_args(base, m, 8)
    assert mp.engine.moe_flex_backend == "deepep" and any("DeepEP, Megatron-Core's default" in a for a in mp.assumed)
    mp = parse_megatron_args(base + " --moe-flex-dispatcher-backend hybridep", m, 8)
    assert mp.engine.moe_flex_backend == "hybridep"
    from cosearch.runs.rows import describe_row
    row = {"id": "t", "src": "x", "model": "Tiny", "arch": "MoE", "software": "Megatron-Bridge / NeMo 26.04 container",
           "accel": "H100-SXM-80GB", "gpus_per_node": 8, "n_gpus": 16, "layers": 4, "hidden": 256, "heads": 8,
           "kv_heads": 2, "ffn": None, "moe_ffn": 128, "num_experts": 8, "experts_per_token": 2,
           "shared_experts": 0, "moe_layers": "all", "vocab": 1000, "seq": 64, "gbs": 64, "mbs": 2, "tp": 1,
           "pp": 1, "cp": 1, "ep": 8, "dp": 16, "precision": "BF16", "recompute": "none", "zero": 1,
           "tok_s_gpu": 1000.0, "complete": True}
    for backend in ("deepep", "hybridep"):
        d = describe_row(dict(row, notes=f"moe dispatcher backend={backend}; token-dropless"))
        assert (d.engine.moe_dispatcher, d.engine.moe_flex_backend) == ("flex", backend)


def test_deepep_moves_tokens_at_its_own_measured_nvlink_rate():
    """DeepEP's NVLink share from the HybridEP document's own DeepEP table (GB200, Torch API, BF16
    dispatch and combine at 16 and 32 SMs over 8, 16 and 24 ranks), the way HybridEP's is derived:
    their mean over 900 GB/s, over the 0.80 achievable fraction; a flex dispatch inside one node
    takes the backend's share, and a plan's all-to-all seconds follow (RDMA at the same rate)."""
    table = [362.01, 310.21, 615.78, 519.57, 328.80, 278.34, 520.76, 442.51, 324.64, 126.53, 502.84, 207.10]
    assert F.FLEX_DEEPEP_NVLINK_SHARE == pytest.approx(sum(table) / len(table) / 900.0 / 0.80, abs=1e-3)
    net = np.array([8.0, 400e9, 50e9, 2e-6, 5e-6, 0.0])
    tokens, ranks = 0.5e6, 8 * (1 - (14 * 13) / (16 * 15))
    for share in (F.FLEX_NVLINK_SHARE, F.FLEX_DEEPEP_NVLINK_SHARE):
        want = tokens * ranks / (share * 400e9) + 2e-6
        assert F.flex_alltoall_s(1e6, 8.0, 1.0, net, 2.0, 16.0, share) == pytest.approx(want, rel=1e-12)
    m = models_preset("mixtral-8x7b").with_(num_layers=4)
    cl = cluster.preset("dgx-h100", 1)
    spec = PlanSpec(8, 1, 1, 1, zero=1, flash_attention=True, expert_parallel=8)
    core = engine.preset("megatron-core")
    comm = {b: evaluate(m, "H100", cl, spec, 16, engine=engine.with_moe_dispatch(core, "flex", backend=b))
            .breakdown["tp_comm_s"] for b in ("hybridep", "deepep")}
    assert comm["deepep"] > comm["hybridep"] > 0.0
