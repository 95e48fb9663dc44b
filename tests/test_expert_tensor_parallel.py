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
    # etp = tp (Megatron-Core's MoEAlltoAllTokenDispatcher): the router and the dispatch on the same
    # own 64 tokens, then the received 64 x 2 copies all-gathered over the 2 tp ranks (dispatch_postprocess's
    # AG(TP): all 128 x 2 copies, 256 x 2 bytes each) and sorted by local expert; every tp rank runs
    # its 64-wide slice of each local expert on all of them; the reduce-scatter of their output
    # (combine_preprocess's RS(TP)) before the combine; no tp collective around the MoE block
    tp_ops = {o.name: o for o in graph.build(MOE, 2, 2, "fwd", sequence_parallel=True, flash_attention=True,
                                             expert_parallel=4).ops}
    assert "allgather_mlp" not in tp_ops and "reducescatter_mlp" not in tp_ops
    assert tp_ops["router"].m == 64 and tp_ops["moe_dispatch"].bytes_read == 64 * 2 * 256 * 2
    assert tp_ops["moe_permute"].elements == 64 * 2 * 256 and tp_ops["moe_unpermute"].elements == 64 * 2 * 256
    for name, kind in (("moe_allgather", "allgather"), ("moe_reducescatter", "reducescatter")):
        assert tp_ops[name].kind == kind and tp_ops[name].bytes_read == 128 * 2 * 256 * 2
    assert tp_ops["moe_sort"].elements == 128 * 2 * 256
    names = list(tp_ops)
    assert names.index("moe_dispatch") < names.index("moe_allgather") < names.index("moe_sort") \
        < names.index("expert_fc1") < names.index("moe_unsort") < names.index("moe_reducescatter") \
        < names.index("moe_combine")
    assert (tp_ops["expert_fc1"].m, tp_ops["expert_fc1"].n) == (math.ceil(128 * 2 * 4 / 8), 128)
    assert fc1.flops == pytest.approx(tp_ops["expert_fc1"].flops)   # twice the copies at half the width
    # the flex dispatcher (one group over the tp x ep ranks) delivers the copies itself: no tp
    # collectives, the permutation of the 128 x 2 copies received
    fx = {o.name: o for o in graph.build(MOE, 2, 2, "fwd", sequence_parallel=True, flash_attention=True,
                                         expert_parallel=4, moe_dispatcher="flex").ops}
    assert not {"moe_allgather", "moe_reducescatter", "moe_sort"} & set(fx)
    assert fx["moe_permute"].elements == 128 * 2 * 256 and fx["moe_dispatch"].bytes_read == 64 * 2 * 256 * 2
    # shared experts gather the layer's tokens for themselves and reduce-scatter their output
    sh = {o.name: o for o in graph.build(MOE.with_(shared_experts=1), 2, 2, "fwd", sequence_parallel=True,
                                         flash_attention=True, expert_parallel=4).ops}
    assert sh["shared_allgather"].bytes_read == 128 * 256 * 2 and sh["shared_fc1"].m == 128
    assert sh["shared_reducescatter"].bytes_read == 128 * 256 * 2 and sh["moe_add"].elements == 64 * 256
    with pytest.raises(ValueError, match="sequence parallelism"):
        graph.build(MOE, 2, 2, "fwd", expert_parallel=4, expert_tensor_parallel=1)


def test_shared_experts_under_expert_tensor_parallelism_one_by_hand():
    """etp 1 under tp 2 (SP, microbatch 2, ep 4) with one shared expert: the routed experts as
    without it (the rank's own Tv = 64 tokens, whole width), the shared expert on the dense tp group
    (Megatron-Core's SharedExpertMLP, pg_collection.tp): the T = 128 tokens gathered (128 x 256 x 2
    bytes), its fused gate/up GEMM 128 x (2 x 128 / 2) x 256, its down GEMM 128 x 256 x 64, the
    output reduce-scattered (128 x 256 x 2 bytes) and added to the routed output on 64 x 256."""
    shared = MOE.with_(shared_experts=1)
    ops = {o.name: o for o in graph.build(shared, 2, 2, "fwd", sequence_parallel=True, flash_attention=True,
                                          expert_parallel=4, expert_tensor_parallel=1).ops}
    plain = {o.name: o for o in graph.build(MOE, 2, 2, "fwd", sequence_parallel=True, flash_attention=True,
                                            expert_parallel=4, expert_tensor_parallel=1).ops}
    for name in ("router", "moe_dispatch", "expert_fc1", "expert_fc2", "moe_combine", "moe_unpermute"):
        assert (ops[name].flops, ops[name].bytes_read) == (plain[name].flops, plain[name].bytes_read), name
    assert ops["shared_allgather"].kind == "allgather" and ops["shared_allgather"].bytes_read == 128 * 256 * 2
    f1, f2 = ops["shared_fc1"], ops["shared_fc2"]
    assert (f1.m, f1.n, f1.k) == (128, 128, 256) and f1.flops == 2 * 128 * 128 * 256
    assert (f2.m, f2.n, f2.k) == (128, 256, 64) and f2.flops == 2 * 128 * 256 * 64
    assert ops["shared_reducescatter"].kind == "reducescatter" and ops["shared_reducescatter"].bytes_read == 128 * 256 * 2
    assert ops["moe_add"].elements == 64 * 256
    assert "allgather_mlp" not in ops and "reducescatter_mlp" not in ops
    names = list(ops)
    assert names.index("moe_unpermute") < names.index("shared_allgather") < names.index("moe_add")
    # its weights: the routed experts' over ep x etp = 4 ranks, the shared expert's over tp = 2 (with
    # the attention), as Megatron-Core shards them
    spec = PlanSpec(2, 2, 1, 2, sequence_parallel=True, expert_parallel=4, expert_tensor_parallel=1,
                    flash_attention=True)
    routed = shared.expert_layer_params()
    u = unit_costs(shared, _h100(), cluster.Cluster(4), (spec.tp,), (2,), sequence_parallel=(True,),
                   expert_parallel=4, expert_tensor_parallel=1, flash_attention=True)
    from cosearch._kernels import formulas as F
    norms = 2 * shared.norm_params()        # the layer's two norms, whole on every rank
    assert u[0, 0, 0, 0, F.U_PLX] == pytest.approx(routed / 4)
    assert u[0, 0, 0, 0, F.U_PL] == pytest.approx((shared.layer_params() - routed - norms) / 2 + norms + routed / 4)


def _h100():
    from cosearch import hardware
    return hardware.H100


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


def test_tp_split_experts_keep_every_gathered_copy():
    """With the experts split over tp 2 (etp = tp) each tp rank keeps all T k copies its experts'
    up projection reads (the all-gathered input), not half of them: half of 64 tokens x 2 copies x
    256 x 2 B more per sequence and layer than with them split, hand-counted; the plan's memory
    follows (the same plan with etp 1 keeps its own copies only)."""
    from cosearch import memory
    split = memory.layer_activation_bytes(MOE, 2, 1, True, "none", True)
    whole = memory.layer_activation_bytes(MOE, 2, 1, True, "none", True, experts_gathered=True)
    assert whole - split == pytest.approx(64 * 2 * 256 * 2 / 2)
    assert memory.layer_activation_bytes(MOE, 1, 1, False, "none", True, experts_gathered=True) == \
        memory.layer_activation_bytes(MOE, 1, 1, False, "none", True)          # tp 1: nothing split
    with pytest.raises(ValueError, match="experts_gathered"):
        memory.layer_activation_bytes(MOE, 2, 1, True, "none", True, experts_gathered="yes")
    # in a plan (pp 1: one microbatch in flight): a second 64-token sequence a microbatch adds, over
    # the 4 layers, 4 x 64 x 2 x 256 x 2 B of copies with the experts split, half of it with etp 1
    cl = cluster.preset("dgx-h100", 1)
    grow = {}
    for etp in (None, 1):
        mem = [max(evaluate(MOE, "H100", cl, PlanSpec(4, 2, 1, mb, sequence_parallel=True, flash_attention=True,
                                                      expert_parallel=4, expert_tensor_parallel=etp),
                            16, engine="megatron-core").memory_per_chip_bytes) for mb in (1, 2)]
        grow[etp] = mem[1] - mem[0]
    assert grow[None] - grow[1] == pytest.approx(MOE.num_layers * 64 * 2 * 256 * 2 / 2)


def test_dispatcher_collectives_are_neither_userbuffered_nor_async():
    """Megatron-Core's dispatcher calls NCCL itself on the compute stream: under Transformer
    Engine's userbuffers only the layer's linears' all-gathers and reduce-scatters ride beside
    their GEMMs, and the backward's reduce-scatter of the gathered copies does not ride beside the
    weight-gradient GEMM before it (one expert a rank: no sort between them).  With every
    collective 1 s and every GEMM 10 s: the attention's gather and scatter hide, the dispatcher's
    four collectives show whole."""
    import numpy as np

    from cosearch import plan
    m = MOE.with_(num_experts=4)
    f, b = graph.build_pair(m, 2, 1, sequence_parallel=True, flash_attention=True, expert_parallel=4)
    assert "moe_sort" not in [o.name for o in f.ops]
    op_s = np.array([10.0 if o.kind == "gemm" else 0.0 for o in f.ops])
    shown = plan._userbuffers_exposed(f, op_s, lambda op: 1.0, 2, 132, "fwd")
    from cosearch._kernels import formulas as F
    # the attention's all-gather rides on the QKV GEMM (ring exchange), its reduce-scatter on the
    # output projection (pipelined); the dispatcher's four collectives whole
    beside = F.userbuffers_exposed_s(F.UB_RING, 10.0, 1.0, 2.0, 132.0) + \
        F.userbuffers_exposed_s(F.UB_PIPELINE, 10.0, 1.0, 2.0, 132.0)
    assert [o.name for o in f.ops if o.kind in graph.NETWORK_KINDS] == [
        "allgather_attn", "reducescatter_attn", "moe_dispatch", "moe_allgather", "moe_reducescatter", "moe_combine"]
    assert shown == pytest.approx(4.0 + beside)
    names = [o.name for o in b.ops]
    k = names.index("moe_allgather.grad")
    assert b.ops[k].kind == "reducescatter" and names[k - 1].endswith(".wgrad")
    assert not plan._rides_beside_wgrad(b, k)
    assert plan._rides_beside_wgrad(b, names.index("allgather_attn.grad")) is (
        names[names.index("allgather_attn.grad") - 1].endswith(".wgrad"))


def test_the_ep_overlap_counts_the_gathered_copies_with_the_experts():
    """In Megatron-Core's combined 1F1B schedule the all-gather over tp and its reduce-scatter run
    inside the experts' node (``submodule_moe_forward``: dispatch_postprocess, experts,
    combine_preprocess): with ops of 1 s and collectives of 2 s, the experts' forward part is its
    ops plus the two collectives, and the caller leaves them out of the attention side."""
    import numpy as np

    from cosearch import plan
    f, b = graph.build_pair(MOE, 2, 1, sequence_parallel=True, flash_attention=True, expert_parallel=4)
    fs = np.array([0.0 if o.kind in graph.NETWORK_KINDS else 1.0 for o in f.ops])
    bs = np.array([0.0 if o.kind in graph.NETWORK_KINDS else 1.0 for o in b.ops])
    parts = plan._ep_overlap_parts(f, b, fs, bs, lambda op: 2.0)
    expert_ops = [o for o in f.ops if o.name in graph.MOE_EXPERT_OPS]
    assert {"moe_allgather", "moe_reducescatter"} <= {o.name for o in expert_ops}
    want = sum(2.0 if o.kind in graph.NETWORK_KINDS else 1.0 for o in expert_ops)
    assert parts[2] == pytest.approx(want)
    assert parts[1] == parts[3] == 2.0                   # the dispatch and the combine
    assert plan._expert_side_collectives_s(f, b, lambda op: 2.0) == (4.0, 4.0)


def test_maxtext_gathers_the_tokens_before_routing_them():
    """MaxText's ``sparse_matmul`` all-gathers the input activations over the tensor axis
    ("We all gather the input activations over tensor parallelism"), as torchtitan's MoE plan does,
    and routes all T tokens on every tensor rank; ``ragged_all_to_all`` delivers copies by source rank that ``local_permute``
    sorts (dispatcher ``"gather-tokens"``, the ``maxtext`` preset's): the tokens' gather of 128 x 256 bf16
    values before the router, no gather of the copies."""
    from cosearch import engine
    assert {engine.preset(e).moe_dispatcher for e in ("maxtext", "fsdp", "fsdp-eager")} == {"gather-tokens"}
    assert engine.preset("megatron-core").moe_dispatcher == "alltoall"
    ops = {o.name: o for o in graph.build(MOE, 2, 2, "fwd", sequence_parallel=True, flash_attention=True,
                                          expert_parallel=4, moe_dispatcher="gather-tokens").ops}
    assert ops["allgather_mlp"].bytes_read == 128 * 256 * 2 and ops["router"].m == 128
    assert "moe_allgather" not in ops and "moe_sort" in ops and "reducescatter_mlp" in ops
    # one expert a rank (ep 8 of 8): nothing to sort
    assert "moe_sort" not in {o.name for o in graph.build(MOE, 2, 2, "fwd", sequence_parallel=True,
                                                          flash_attention=True, expert_parallel=8,
                                                          moe_dispatcher="gather-tokens").ops}


def test_search_with_shared_experts_over_expert_tensor_parallelism_equals_brute_force():
    """A 2-layer MoE with a shared expert (DeepSeek's layout) on 4 chips: search_plans over
    etp = tp and etp = 1 (tp 1, 2; SP off and on; ep 1, 2, 4) finds the best step of every plan written out
    through evaluate(), with HBM at the brute force's median plan memory (memory binds)."""
    import numpy as np

    from cosearch import hardware, placement
    model = MOE.with_(shared_experts=1, num_layers=2)
    cl = cluster.Cluster(4, 2, 5e9, 1e9, link_latency_s=1e-6, intra_efficiency=0.8, inter_efficiency=0.9)
    big = hardware.H100.with_(hbm_bytes=1e18)
    rows = []
    for s in two_layer_plan_specs(4, 4, (1, 2, 4), (1,), sequence_parallel=(False, True),
                                  expert_tensor_parallel=(None, 1)):
        p = evaluate(model, big, cl, s, 4, engine="megatron-core")
        rows.append((p.step_time_s, max(p.memory_per_chip_bytes), s))
    assert any(s.expert_tensor_parallel == 1 for *_x, s in rows)
    hbm = float(np.median([m for _t, m, _s in rows]))
    best = min(t for t, m, _s in rows if m <= hbm)
    res = placement.search_plans(model, hardware.H100.with_(hbm_bytes=hbm), cl, 4, tps=(1, 2),
                                 microbatches=(1, 2, 4), virtual_stages=(1,), sequence_parallel=(False, True), zero=(1,),
                                 flash_attention=True, engine="megatron-core", expert_parallel=(1, 2, 4),
                                 expert_tensor_parallel=(None, 1))
    assert res.plans[0].step_time_s == pytest.approx(best, rel=1e-9)
