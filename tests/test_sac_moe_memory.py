"""What torchtitan 0.3's per-op selective activation checkpointing keeps on an MoE layer
(``distributed/activation_checkpoint.py``: ``SelectiveAC`` saves the outputs of PyTorch's
compute-intensive ops, SDPA, ``topk`` and the all-to-alls, every other ``aten.mm``; the router
gate's shape is force-recomputed; the experts' ``_grouped_mm`` is not in the list), hand-worked
from the layer's op order (``models/common/moe.py``: the router, the routed experts, then the
shared experts), and the plans that take it."""

import pytest

from cosearch import memory, models, plan
from cosearch.models import ModelConfig

MOE = ModelConfig("tiny-moe", 2, 256, 4, 512, 1024, 512, kv_heads=2, activation="swiglu", norm="rmsnorm",
                  position="rotary", bias=False, tie_embeddings=False, dropout=False, num_experts=8,
                  experts_per_token=2, moe_ffn_hidden=128)


def test_an_moe_layer_hand_worked():
    """Per token, bf16: the layer input (256 x 2), wq's output (4 heads x 64 = 256 x 2, the first
    matmul), wv's (2 x 64 x 2; wk, the second, rerun), SDPA's output (256 x 2) and its fp32
    log-sum-exp (4 heads x 4); wo (the fourth) rerun; the router's topk: 2 fp32 scores and 2 int64
    ids (24); its gate and the experts' grouped GEMMs rerun.  With one shared expert of 128
    (SwiGLU): w1 (the fifth matmul) kept, w3 rerun, w2 (the seventh, its local h) kept: 128 x 2 +
    256 x 2.  Across an expert-parallel group the dispatch's and the combine's all-to-all outputs:
    each token's 2 routed copies of 256, twice.  Times 512 tokens."""
    per_token = 512 + 512 + 256 + 512 + 16 + 24
    assert memory.every_other_matmul_bytes(MOE, 1, 1) == 512 * per_token
    shared = MOE.with_(shared_experts=1)
    assert memory.every_other_matmul_bytes(shared, 1, 1) == 512 * (per_token + 256 + 512)
    assert memory.every_other_matmul_bytes(MOE, 1, 3, dispatched=True) == 3 * 512 * (per_token + 2 * 2 * 256 * 2)
    # a plain (GeLU) shared expert: w1 the fifth, kept; w2 the sixth, rerun
    gelu = MOE.with_(activation="gelu", shared_experts=1)
    assert memory.every_other_matmul_bytes(gelu, 1, 1) == 512 * (per_token + 256)
    # torchtitan 0.3's fused wqkv: the first matmul, q, k and v kept; the parity after it the same
    assert memory.every_other_matmul_bytes(MOE, 1, 1, fused_qkv=True) == 512 * (per_token + 256)
    # far below Megatron's selective figure (the experts' activations and dispatched copies kept)
    assert memory.every_other_matmul_bytes(MOE, 1, 1) < memory.layer_activation_bytes(MOE, 1, 1, False, "selective",
                                                                                      True)


@pytest.mark.parametrize("model, tp, exact", [
    (MOE, 1, True), (MOE, 2, False), (MOE.with_(bias=True), 1, False), (MOE.with_(moe_capacity_factor=1.25), 1, False),
    (models.preset("deepseek-v2-lite"), 1, False), (models.preset("llama3-8b"), 4, True),
])
def test_which_layers_are_itemized(model, tp, exact):
    """MoE layers without tensor parallelism, biases (GPT-OSS's addmm) or a capacity factor, and
    every dense multi-head or grouped-query layer; not MLA.  Otherwise refused by name (a plan then
    takes Megatron's selective figure, an upper bound)."""
    assert memory.every_other_matmul_exact(model, tp) is exact
    if model.moe and not exact:
        with pytest.raises(ValueError, match="not itemized"):
            memory.every_other_matmul_bytes(model, tp, 1)


def test_plans_take_it_with_the_all_to_alls_only_across_an_expert_parallel_group():
    """The plan's per-sequence selective bytes under torchtitan's policy: the itemized figure, the
    all-to-alls' outputs at ep > 1 only; GPT-OSS-like biases fall back to Megatron's figure."""
    args = (MOE, 1, False, "every-other-matmul", True, "bf16")
    sel1 = plan._per_sequence_bytes(*args)[0][1]
    sel2 = plan._per_sequence_bytes(*args, dispatched=True)[0][1]
    assert sel1 == memory.every_other_matmul_bytes(MOE, 1, 1)
    assert sel2 == memory.every_other_matmul_bytes(MOE, 1, 1, dispatched=True) > sel1
    biased = MOE.with_(bias=True)
    assert plan._per_sequence_bytes(biased, 1, False, "every-other-matmul", True, "bf16")[0][1] == \
        memory.layer_activation_bytes(biased, 1, 1, False, "selective", True)
    # through evaluate: the fsdp engine (torchtitan's policy) keeps less than Megatron-Core's
    # selective recompute of the same plan
    spec = plan.PlanSpec(dp=2, tp=1, pp=1, microbatch=1, recompute="selective", flash_attention=True,
                         expert_parallel=2, zero=1)
    tt = plan.evaluate(MOE, "H100", 2, spec, 4, engine="fsdp")
    mc = plan.evaluate(MOE, "H100", 2, spec, 4, engine="megatron-core")
    assert tt.feasible and max(tt.memory_per_chip_bytes) < max(mc.memory_per_chip_bytes)
