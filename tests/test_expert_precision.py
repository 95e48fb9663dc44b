"""The routed experts' grouped GEMMs in bf16 inside a low-precision layer
(``Engine.expert_precision`` ``"bf16"``, graph ``expert_precision``): torchtitan's Float8 and MX
converters swap ``nn.Linear`` modules, so an MoE model's grouped experts stay bf16 unless a
grouped-experts converter takes them.  Checked op by op against the all-FP8 and all-bf16 layers,
and the activation memory by hand."""

from dataclasses import replace

import numpy as np
import pytest

from cosearch import engine, graph, memory
from cosearch.models import ModelConfig
from cosearch.plan import PlanSpec, evaluate

MOE = ModelConfig("tiny-moe", 2, 256, 4, 512, 1024, 512, kv_heads=2, activation="swiglu", norm="rmsnorm",
                  position="rotary", bias=False, tie_embeddings=False, dropout=False, num_experts=8,
                  experts_per_token=2, moe_ffn_hidden=128, shared_experts=1)
EXPERT_OPS = ("expert_fc1", "expert_fc1.cast", "expert_act", "expert_fc2", "expert_fc2.cast")


@pytest.mark.parametrize("ep", [1, 2, 4])
def test_bf16_experts_in_an_fp8_layer(ep):
    opts = dict(expert_parallel=ep, flash_attention=True, moe_dispatcher="gather-tokens")
    mixed = graph.build_pair(MOE, 1, 1, precision="fp8", expert_precision="bf16", **opts)
    fp8 = graph.build_pair(MOE, 1, 1, precision="fp8", **opts)
    bf16 = graph.build_pair(MOE, 1, 1, **opts)
    def rows(g, experts):
        # each op but its dependencies' indices (the FP8 layer's expert casts shift them)
        return [(o.name, o.kind, o.m, o.n, o.k, o.batch, o.elements, o.bytes_read, o.bytes_written, o.dtype_bytes)
                for o in g.ops if (o.name.split(".")[0] in EXPERT_OPS) == experts]
    for m, f, b in zip(mixed, fp8, bf16):
        got = {o.name: o for o in m.ops}
        # the experts as in the bf16 layer (no casts before them), everything else as in the FP8 one
        assert rows(m, True) == rows(b, True) and rows(m, False) == rows(f, False)
        assert not any(n.startswith("expert_fc") and "cast" in n for n in got)
        assert got["shared_fc1" if m.phase == "fwd" else "shared_fc1.wgrad"].dtype_bytes == 1.0
    if ep > 2:
        f2, b2 = graph.build_pair(MOE, 1, 1, precision="fp8", expert_precision="bf16", **dict(opts, expert_parallel=2))
        df, db = graph.with_expert_parallel(f2, b2, MOE, 1, 1, ep, 1, "fp8", "single", "fused", "gather-tokens",
                                            "fused", "bf16")
        assert (df, db) == mixed and np.array_equal(df.arrays(), mixed[0].arrays())
    assert graph.build(MOE, 1, 1, precision="bf16", expert_precision="bf16") == graph.build(MOE, 1, 1)
    with pytest.raises(ValueError, match="expert_precision"):
        graph.build(MOE, 1, 1, precision="fp8", expert_precision="fp8")


def test_the_experts_keep_their_inputs_in_bf16():
    """Per sequence at tp 1: every token's k = 2 routed copies keep their dispatched input and the
    activation's output (the down projection's input, F = 128 wide) in bf16, 2 bytes, not their
    1-byte FP8 casts: 512 tokens x (2 x 256 + 2 x 128) elements x 1 byte more."""
    fp8 = memory.layer_activation_bytes(MOE, 1, 1, flash_attention=True, precision="fp8")
    mixed = memory.layer_activation_bytes(MOE, 1, 1, flash_attention=True, precision="fp8", experts_bf16=True)
    assert mixed - fp8 == pytest.approx(512 * (2 * 256 + 2 * 128) * 1.0)
    assert memory.layer_activation_bytes(MOE, 1, 1, flash_attention=True, experts_bf16=True) == \
        memory.layer_activation_bytes(MOE, 1, 1, flash_attention=True)


def test_a_plan_under_the_engine_switch():
    spec = PlanSpec(dp=1, tp=1, pp=1, microbatch=1, zero=0, flash_attention=True, recompute="none", precision="fp8")
    mixed_engine = replace(engine.FSDP, expert_precision="bf16")
    mixed = evaluate(MOE, "H100", 1, spec, 4, engine=mixed_engine)
    fp8 = evaluate(MOE, "H100", 1, spec, 4, engine=engine.FSDP)
    assert mixed.feasible and fp8.feasible and mixed.step_time_s != fp8.step_time_s
    assert mixed.memory_per_chip_bytes > fp8.memory_per_chip_bytes
    bf16 = replace(spec, precision="bf16")
    assert evaluate(MOE, "H100", 1, bf16, 4, engine=mixed_engine).step_time_s == \
        evaluate(MOE, "H100", 1, bf16, 4, engine=engine.FSDP).step_time_s
    assert engine.FSDP.expert_precision == "plan"
    with pytest.raises(ValueError, match="expert_precision"):
        engine.Engine(expert_precision="fp8")
