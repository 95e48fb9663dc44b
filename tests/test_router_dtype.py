"""torchtitan's MoE router GEMM in FP32 (``Engine.router_dtype``): ``TokenChoiceTopKRouter`` runs
``gate(x)`` under ``torch.autocast(dtype=torch.float32)`` and PyTorch runs an FP32 GEMM on the
CUDA cores (TF32 off by default), so the GEMM is priced on the chip's vector lanes, one FMA a lane a
cycle, against its tensor MACs: 16 times the bf16 time on an H100 (528 tensor cores of 16 x 32
MACs against 132 SMs of 128 FP32 lanes; its datasheet's FP32 and BF16 rates, 67 and 989 TFLOP/s,
differ by the same factor at their clocks) and an A100 (432 x 16 x 16 against 108 x 64; 19.5 and 312)."""

import math
from dataclasses import replace

import numpy as np
import pytest

from cosearch import cost, engine, graph, hardware
from cosearch._kernels import formulas
from cosearch.models import ModelConfig
from cosearch.plan import PlanSpec, evaluate

MOE = ModelConfig("tiny-moe", 2, 256, 4, 512, 1024, 512, kv_heads=2, activation="swiglu", norm="rmsnorm",
                  position="rotary", bias=False, tie_embeddings=False, dropout=False, num_experts=8,
                  experts_per_token=2, moe_ffn_hidden=128)


@pytest.mark.parametrize("chip,ratio", [("H100", 16.0), ("A100-80GB", 16.0)])
@pytest.mark.parametrize("backend", ["numba", "numpy"])
def test_an_fp32_gemm_runs_on_the_vector_lanes(chip, ratio, backend):
    """Hand-worked, 8192^3: in bf16 the tensor unit's ceil(tiles / cores) waves of (8192 + R + C - 2)
    cycles; in FP32 8192^3 / (SMs x lanes) cycles on the vector lanes, at the same clock and shape
    efficiency, so the FP32 time over the bf16 one is the ratio of the two cycle counts (the
    datasheets' 1/16 where the waves fill: 15.9 on the H100, 15.8 on the A100)."""
    c = hardware.preset(chip)
    assert c.tensor_cores * c.systolic_rows * c.systolic_cols / (c.vector_units * c.vector_width) == ratio
    launch = c.efficiency.launch_s
    rows = []
    for dt in (2.0, 4.0):      # a large, compute-bound GEMM in bf16 and in FP32
        op = np.zeros(len(graph.OP_FIELDS))
        op[:5] = (0, 8192, 8192, 8192, 1)
        op[graph.OP_FIELDS.index("dtype_bytes")] = dt
        rows.append(op)
    t16, t32 = cost.price(np.array(rows), c, backend=backend)[0]
    R, C, n = c.systolic_rows, c.systolic_cols, 8192
    tensor_cycles = math.ceil((n / R) * (n / C) / c.tensor_cores) * (n + R + C - 2)
    lane_cycles = n ** 3 / (c.vector_units * c.vector_width)
    assert (t32 - launch) == pytest.approx((t16 - launch) * lane_cycles / tensor_cycles, rel=1e-12)
    assert 0.97 * ratio < lane_cycles / tensor_cycles < ratio
    assert formulas.fp32_gemm_cycles.py_func(8.0, 4.0, 2.0, 3.0, 16.0) == 8 * 4 * 2 * 3 / 16
    assert formulas.tensor_format_rate.py_func(2.0, 1.8, 0.0, 0.0, 0.0) == 1.0
    assert formulas.tensor_format_rate.py_func(1.0, 1.8, 0.0, 0.0, 0.0) == 1.8


@pytest.mark.parametrize("backend", ["numba", "numpy"])
def test_an_fp32_gemm_does_not_depend_on_the_tensor_unit(backend):
    """More (or fewer) tensor cores leave an FP32 GEMM's time as it is, at every shape (it never
    runs on them); more vector lanes never slow it.  Until stop 74 the tensor unit's waves leaked
    into it: torchtitan's 4096 x 128 x 2048 router ran 33 % slower on an A100 with twice the
    tensor cores."""
    c = hardware.preset("A100")
    shapes = [(4096, 128, 2048), (8192, 8192, 8192), (1000, 7, 333), (16, 16, 16)]
    ops = []
    for m, n, k in shapes:
        op = np.zeros(len(graph.OP_FIELDS))
        op[:5] = (0, m, n, k, 1)
        op[graph.OP_FIELDS.index("dtype_bytes")] = 4.0
        ops.append(op)
    ops = np.array(ops)
    base = cost.price(ops, c, backend=backend)[0]
    for tc in (c.tensor_cores // 2, c.tensor_cores * 2, c.tensor_cores * 4):
        assert np.array_equal(cost.price(ops, c.with_(tensor_cores=tc), backend=backend)[0], base)
    more = cost.price(ops, c.with_(vector_units=c.vector_units * 2), backend=backend)[0]
    assert np.all(more <= base)


def test_the_router_graph_in_fp32():
    """The router GEMM reads its T x h input and h x E weight and writes T x E logits, 4 bytes each;
    its backward's two GEMMs take 4-byte operands; no other op changes."""
    T, h, E = 512, 256, 8
    f16, b16 = graph.build_pair(MOE, 1, 1, expert_parallel=2, flash_attention=True)
    f32, b32 = graph.build_pair(MOE, 1, 1, expert_parallel=2, flash_attention=True, router_dtype="fp32")
    r = next(o for o in f32.ops if o.name == "router")
    assert (r.dtype_bytes, r.bytes_read, r.bytes_written) == (4.0, (T * h + h * E) * 4.0, T * E * 4.0)
    assert {o.name: o.dtype_bytes for o in b32.ops if o.name.startswith("router.")} == {
        "router.dgrad": 4.0, "router.wgrad": 4.0}
    assert [o for o in f16.ops if o.name != "router"] == [o for o in f32.ops if o.name != "router"]
    assert [o for o in b16.ops if not o.name.startswith("router.")] == [
        o for o in b32.ops if not o.name.startswith("router.")]
    dense = MOE.dense_counterpart()
    assert graph.build(dense, 1, 1, router_dtype="fp32") == graph.build(dense, 1, 1)
    with pytest.raises(ValueError, match="router_dtype"):
        graph.build(MOE, 1, 1, router_dtype="fp16")


def test_a_plan_pays_the_fp32_router_layer_by_layer():
    """One chip, no recompute: the step grows by exactly the router's three GEMMs' extra time,
    layers x microbatches (the rest of the plan is the same)."""
    chip = hardware.preset("H100")
    f16, b16 = graph.build_pair(MOE, 1, 1, flash_attention=True, moe_dispatcher="gather-tokens",
                                elementwise="eager", expert_elementwise="torchtitan")
    f32, b32 = graph.build_pair(MOE, 1, 1, flash_attention=True, moe_dispatcher="gather-tokens",
                                elementwise="eager", expert_elementwise="torchtitan", router_dtype="fp32")

    def router_s(f, b):
        tf, tb = cost.price_on(f, chip), cost.price_on(b, chip)
        return sum(t for o, t in zip(f.ops, tf) if o.name == "router") + sum(
            t for o, t in zip(b.ops, tb) if o.name.startswith("router."))
    extra = router_s(f32, b32) - router_s(f16, b16)
    assert extra > 0
    spec = PlanSpec(dp=1, tp=1, pp=1, microbatch=1, zero=0, flash_attention=True, recompute="none")
    a = evaluate(MOE, chip, 1, spec, 4, engine=engine.FSDP_EAGER)
    p = evaluate(MOE, chip, 1, spec, 4, engine=replace(engine.FSDP_EAGER, router_dtype="bf16"))
    assert a.feasible and p.feasible
    assert a.step_time_s - p.step_time_s == pytest.approx(2 * 4 * extra, rel=1e-9)


def test_engines_and_the_work_bound():
    assert engine.FSDP.router_dtype == engine.FSDP_EAGER.router_dtype == "fp32"
    for e in (engine.MEGATRON_CORE, engine.LLM_FOUNDRY, engine.preset("maxtext")):
        assert e.router_dtype == "bf16"
    with pytest.raises(ValueError, match="router_dtype"):
        engine.Engine(router_dtype="tf32")
    # the ILP screen's work bound stays below the layer priced op by op with the FP32 router
    from cosearch.schedule.bounds import work_bounds
    layer = graph.build(MOE.with_(seq_len=4096), 1, 1, flash_attention=True, router_dtype="fp32")
    d = hardware.design_array([hardware.preset("H100"), hardware.preset("A100-80GB")])
    lb = work_bounds(layer, d)
    serial = cost.price(layer.arrays(), d).sum(axis=1)
    assert np.all(lb <= serial * (1 + 1e-12)) and np.all(lb > 0)
    plain = work_bounds(graph.build(MOE.with_(seq_len=4096), 1, 1, flash_attention=True), d)
    assert np.all(lb >= plain) and not math.isinf(float(lb.max()))
