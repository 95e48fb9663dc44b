"""Expert tensor parallelism 1 under tp > 1 (Megatron-Core's expert_tensor_parallel_size=1):
every tensor-parallel rank an expert-parallel rank of its own, worked by hand."""

import math

import pytest

from cosearch import cluster, graph
from cosearch.models import ModelConfig
from cosearch.plan import PlanSpec, evaluate, unit_costs

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
