"""Expert tensor parallelism 1 under tp > 1 (Megatron-Core's expert_tensor_parallel_size=1):
every tensor-parallel rank an expert-parallel rank of its own, worked by hand."""

import math

import pytest

from cosearch import cluster, graph
from cosearch.models import ModelConfig
from cosearch.plan import PlanSpec, evaluate, unit_costs
from tests.test_modern_plans import two_layer_plan_specs

MOE = ModelConfig("tiny-moe", 4, 256, 8, 512, 1000, 64, kv_heads=2, activation="swiglu", norm="rmsnorm",
                  position="rotary", bias=False, dropout=False, num_experts=8, experts_per_token=2, moe_ffn_hidden=128)


def test_the_layer_graph_by_hand():
    """tp 2 with sequence parallelism, microbatch 2: each rank's Tv = 2 x 64 / 2 = 64 tokens go to
    the router and the dispatch without the tp all-gather (k h 2 bytes each: 64 x 2 x 256 x 2),
    its 8 / ep = 2 local experts get ceil(64 x 2 x 4 / 8) = 64 tokens each at the whole width
    (2 x 128 for the fused gate/up GEMM), and no reduce-scatter follows the MLP."""
    ops = {o.name: o for o in graph.build(MOE, 2, 2, "fwd", sequence_parallel=True, flash_attention=True,
                                          expert_parallel=4, expert_tensor_parallel=1).ops}
    assert "allgather_mlp" not in ops and "reducescatter_mlp" not in ops and "allgather_attn" in ops
    assert ops["router"].m == 64 and ops["moe_dispatch"].bytes_read == 64 * 2 * 256 * 2
    fc1 = ops["expert_fc1"]
    assert (fc1.m, fc1.n, fc1.k, fc1.batch) == (math.ceil(64 * 2 * 4 / 8), 2 * 128, 256, 2)
    # etp = tp: the tp group's 128 tokens, experts split over tp (64 wide), gather and scatter
    tp_ops = {o.name: o for o in graph.build(MOE, 2, 2, "fwd", sequence_parallel=True, flash_attention=True,
                                             expert_parallel=4).ops}
    assert "allgather_mlp" in tp_ops and tp_ops["expert_fc1"].n == 128 and tp_ops["router"].m == 128
    assert fc1.flops == pytest.approx(tp_ops["expert_fc1"].flops)       # the same work, other shapes
    with pytest.raises(ValueError, match="sequence parallelism"):
        graph.build(MOE, 2, 2, "fwd", expert_parallel=4, expert_tensor_parallel=1)
    with pytest.raises(ValueError, match="shared experts"):
        graph.build(MOE.with_(shared_experts=1), 2, 2, "fwd", sequence_parallel=True, expert_parallel=4,
                    expert_tensor_parallel=1)


def test_the_expert_group_spans_the_tp_ranks():
    """dp 4, tp 2, etp 1: ep may reach dp x tp / etp = 8 (Megatron's ep x etp x edp = tp x dp);
    the experts' weights split over ep x etp = 8 ranks, not ep x tp = 16."""
    s = PlanSpec(4, 2, 1, 1, sequence_parallel=True, expert_parallel=8, expert_tensor_parallel=1)
    assert s.expert_tensor_parallel == 1 and "etp1" in s.describe()
    assert PlanSpec(4, 2, 1, 1, expert_tensor_parallel=2).expert_tensor_parallel is None     # = tp
    with pytest.raises(ValueError, match="must divide dp"):
        PlanSpec(4, 2, 1, 1, expert_parallel=8)
    with pytest.raises(ValueError, match="etp = tp"):
        PlanSpec(4, 4, 1, 1, expert_tensor_parallel=2)
    from cosearch._kernels import formulas as F
    from cosearch.hardware import H100
    cl = cluster.preset("dgx-h100", 1)
    u1 = unit_costs(MOE, H100, cl, (2,), (1,), (True,), True, expert_parallel=8, expert_tensor_parallel=1)[0, 0, 0, 0]
    experts = MOE.expert_layer_params()
    assert u1[F.U_PLX] == pytest.approx(experts / 8) and u1[F.U_EP] == pytest.approx(8 * 1 / 2)
    p = evaluate(MOE, "H100", cl, s, 64, engine="megatron-core")
    assert p.feasible and p.step_time_s > 0


def test_megatron_lines_read_expert_tensor_parallelism():
    from cosearch.runs.megatron import read_megatron_args
    line = ("--num-layers 4 --hidden-size 256 --num-attention-heads 8 --seq-length 64 --vocab-size 1000 "
            "--num-experts 8 --moe-router-topk 2 --moe-ffn-hidden-size 128 --swiglu --micro-batch-size 1 "
            "--tensor-model-parallel-size 2 --sequence-parallel --expert-model-parallel-size 8 ")
    r = read_megatron_args(line + "--expert-tensor-parallel-size 1")
    assert r.plan["expert_tensor_parallel"] == 1
    assert read_megatron_args(line + "--expert-tensor-parallel-size 2").plan["expert_tensor_parallel"] is None


CL = cluster.Cluster(8, 4, 5e9, 1e9, link_latency_s=1e-6, intra_efficiency=0.8, inter_efficiency=0.9)


@pytest.fixture(scope="module")
def etp_brute_force():
    """(step, memory per chip, spec) of every plan of the 4-layer MoE (ZeRO 0-1, ep 1-8, SP off and
    on, etp = tp and 1: :func:`tests.test_modern_plans.two_layer_plan_specs`) on an H100 with
    unbounded HBM (a plan fits a chip iff its memory does)."""
    from cosearch import hardware
    big = hardware.H100.with_(hbm_bytes=1e18)
    out = []
    for s in two_layer_plan_specs(8, 8, (1, 2, 4, 8), (0, 1), layers=4, sequence_parallel=(False, True),
                                  expert_tensor_parallel=(None, 1)):
        p = evaluate(MOE, big, CL, s, 8, engine="megatron-core")
        out.append((p.step_time_s, max(p.memory_per_chip_bytes), s))
    return out


@pytest.mark.parametrize("hbm_quantile", [0.1, 0.75])
def test_search_over_expert_tensor_parallelism_equals_brute_force(hbm_quantile, etp_brute_force):
    """search_plans over etp = tp and etp = 1 (ep 1, 2, 4, 8; tp 1, 2; SP on and off) finds the
    best step of every plan written out above through evaluate(), where memory binds and where
    it does not; its top 5 are distinct plans (tp 1 is not offered twice)."""
    import numpy as np

    from cosearch import hardware, placement
    rows = etp_brute_force
    assert any(s.expert_tensor_parallel == 1 for *_x, s in rows)
    hbm = float(np.quantile([m for _t, m, _s in rows], hbm_quantile))
    best_t, _m, best_s = min((r for r in rows if r[1] <= hbm), key=lambda r: r[0])
    small = hardware.H100.with_(hbm_bytes=hbm)
    opts = dict(tps=(1, 2), microbatches=(1, 2, 4, 8), virtual_stages=(1,), sequence_parallel=(False, True),
                zero=(0, 1), flash_attention=True, engine="megatron-core", expert_parallel=(1, 2, 4, 8))
    res = placement.search_plans(MOE, small, CL, 8, expert_tensor_parallel=(None, 1), top_k=5, **opts)
    assert res.plans[0].step_time_s == pytest.approx(best_t, rel=1e-9)
    descs = [p.spec.describe() for p in res.plans]
    assert len(set(descs)) == len(descs)
    # the best over etp = tp alone, and over etp = 1 alone (tp 1 plans included), bracket it
    alone = [min((r[0] for r in rows if r[1] <= hbm and (r[2].expert_tensor_parallel == 1) == one), default=math.inf)
             for one in (False, True)]
    for etp, want in ((None, alone[0]), (1, alone[1] if alone[1] < math.inf else None)):
        r = placement.search_plans(MOE, small, CL, 8, expert_tensor_parallel=etp, **opts)
        if want is not None and etp is None:
            assert r.plans[0].step_time_s == pytest.approx(want, rel=1e-9)
        if etp == 1:     # etp 1 alone: its tp-2 plans and every tp-1 plan
            tp1 = min((x[0] for x in rows if x[1] <= hbm and x[2].tp == 1), default=math.inf)
            assert r.plans[0].step_time_s == pytest.approx(min(alone[1], tp1), rel=1e-9)
    # etp 1 at tp 2 alone: the table whose expert group spans the tp ranks (ep up to dp x tp)
    r = placement.search_plans(MOE, small, CL, 8, expert_tensor_parallel=1, **dict(opts, tps=(2,)))
    assert r.plans[0].step_time_s == pytest.approx(alone[1], rel=1e-9)
    assert r.plans[0].spec.expert_tensor_parallel == 1


def test_search_refuses_expert_tensor_parallelism_it_cannot_price():
    from cosearch import hardware, placement
    with pytest.raises(ValueError, match="None .*or 1"):
        placement.search_plans(MOE, hardware.H100, 8, 8, tps=(2,), expert_tensor_parallel=2)
    with pytest.raises(ValueError, match="sequence parallelism"):
        placement.search_plans(MOE, hardware.H100, 8, 8, tps=(2,), sequence_parallel=(False,),
                               expert_tensor_parallel=1)
    with pytest.raises(ValueError, match="shared experts"):
        placement.search_plans(MOE.with_(shared_experts=1), hardware.H100, 8, 8, tps=(1, 2),
                               expert_tensor_parallel=(None, 1))


def test_cosearch_over_expert_tensor_parallelism_keeps_each_designs_best():
    """The co-search over etp = tp and 1: every design's row is its own plan search's best over
    both (search_plans on that chip), and the space is priced once per degree."""
    from cosearch import hardware, search
    from cosearch.hardware import GiB, MiB
    from cosearch.placement import search_plans
    sp = hardware.SearchSpace(tensor_cores=(2, 8), systolic_dims=((32, 32),), vector_units=(2,), vector_width=(256,),
                              l1_bytes=(1 * MiB,), l2_bytes=(16 * MiB,), hbm=((16 * GiB, 1.2e12),),
                              link_bandwidth_Bps=(5e10, 5e9), area_budget_mm2=1e4, power_budget_w=1e4)
    opts = dict(search.DEFAULT_PLAN_OPTIONS, flash_attention=True, sequence_parallel=(False, True),
                expert_parallel=(2, 4), expert_tensor_parallel=(None, 1))
    res = search.cosearch(MOE, sp, CL, 8, "serial", tps=(1, 2), plan_options=opts, refine_top=0, prune=False)
    assert {(c["expert_parallel"], c["expert_tensor_parallel"]) for c in res.meta["combinations"]} == \
        {(2, None), (2, 1), (4, None), (4, 1)}
    designs = sp.arrays()
    for r in res.rows:
        chip = hardware.Accelerator.from_array(designs[r.index])
        want = search_plans(MOE, chip, CL, 8, tps=(1, 2), **opts).best.step_time_s
        assert r.plan.step_time_s == pytest.approx(want, rel=1e-9)


def test_cli_plan_search_takes_expert_tensor_parallelism(capsys):
    from cosearch.cli import main
    assert main(["plan", "--model", "qwen3-30b-a3b", "--cluster", "dgx-h100", "--nodes", "4", "--batch", "256",
                 "--ep", "8", "--etp", "1", "--tp", "2", "--sp"]) == 0
    assert " ep8 etp1 " in capsys.readouterr().out


def test_progress_bar_counts_combinations_the_bound_skips():
    """With a progress bar, combinations skipped whole by their bound advance it by their size
    (the bar reads the combination's configuration count, its last field)."""
    from cosearch import hardware, placement
    opts = dict(tps=(1, 2), microbatches=(1, 2, 4), virtual_stages=(1,), sequence_parallel=(False, True),
                zero=(0, 1), flash_attention=True, engine="megatron-core", expert_parallel=(1, 2, 4, 8),
                expert_tensor_parallel=(None, 1))
    quiet = placement.search_plans(MOE, hardware.H100, CL, 8, **opts)
    shown = placement.search_plans(MOE, hardware.H100, CL, 8, progress=True, **opts)
    assert shown.plans[0].spec == quiet.plans[0].spec and shown.evaluated == quiet.evaluated
    assert shown.evaluated < shown.configurations          # some combination or row was skipped
