"""Megatron-Core's ``recompute_modules`` (engine policy ``"modules:..."``): which ops run again,
which activations are no longer kept (worked by hand from Korthikanti et al.'s terms), and the
validation row reader's mapping."""

import pytest

from cosearch import graph, memory
from cosearch.engine import MEGATRON_CORE
from cosearch.models import ModelConfig
from cosearch.plan import PlanSpec, evaluate

MOE = ModelConfig("tiny-moe", 2, 64, 4, 128, 100, 16, activation="swiglu", norm="rmsnorm", position="rotary",
                  bias=False, dropout=False, num_experts=4, experts_per_token=2, moe_ffn_hidden=32)


def test_recomputed_ops_are_the_named_modules_ops():
    ops = graph.build(MOE, 1, 1, flash_attention=True, precision="fp8").ops
    again = {op.name for op in ops if graph.recompute_share(op, MOE, "modules:layernorm,moe_act") == 1.0}
    assert again == {"norm1", "norm2", "expert_act"}
    moe = {op.name for op in ops if graph.recompute_share(op, MOE, "modules:moe") == 1.0}
    assert {"router", "expert_fc1", "expert_fc1.cast", "expert_fc2", "expert_fc2.cast", "expert_act",
            "moe_unpermute"} <= moe and "qkv" not in moe and "attn_core" not in moe
    core = {op.name for op in ops if graph.recompute_share(op, MOE, "modules:core_attn") == 1.0}
    assert core == {"attn_core"}
    with pytest.raises(ValueError, match="choose from"):
        graph.recompute_share(ops[0], MOE, "modules:layernorm,bogus")


def test_activations_no_longer_kept_by_hand():
    """h = 64, s = 16, one sequence, bf16 (2-byte elements: e = 1), tp 1, flash attention.
    layernorm: the two norm outputs, 4 bytes per token and h; moe_act: the activation output of
    each of k = 2 routed copies, 2 x 32 / 64 x 2 = 2; moe: also the fc1 outputs (2 x 32/64 x 2 x
    2 = 4, gated) and the 2 k e = 4 dispatched copies, 10 in all."""
    none = memory.layer_activation_bytes(MOE, 1, 1, False, "none", True, "bf16")
    sel = memory.layer_activation_bytes(MOE, 1, 1, False, "selective", True, "bf16", ("layernorm", "moe_act"))
    assert none - sel == pytest.approx(16 * 64 * (4 + 2))
    moe = memory.layer_activation_bytes(MOE, 1, 1, False, "selective", True, "bf16", ("moe",))
    assert none - moe == pytest.approx(16 * 64 * 10)
    both = memory.layer_activation_bytes(MOE, 1, 1, False, "selective", True, "bf16", ("moe", "moe_act"))
    assert both == moe                                   # a term is dropped once
    # core_attn with flash attention: the fp32 log-sum-exp, 4 a / h per token and h
    core = memory.layer_activation_bytes(MOE, 1, 1, False, "selective", True, "bf16", ("core_attn",))
    assert none - core == pytest.approx(16 * 64 * 4 * 4 / 64)
    with pytest.raises(ValueError, match="recompute module"):
        memory.layer_activation_bytes(MOE, 1, 1, False, "selective", True, "bf16", ("nope",))


def test_fp8_experts_keep_the_cast_of_their_dispatched_input():
    """Under FP8 Transformer Engine's GroupedLinear keeps the 1-byte cast of the experts' input
    (``grouped_linear.py``: the quantized ``inputmats`` saved for the weight gradient), as Linear
    keeps the norms' casts: recomputing ``moe`` drops the fc1 outputs (bf16, the activation's
    input: 4), the activation's 1-byte cast (2 x 32 / 64 x 1 = 1) and the k = 2 dispatched copies
    at 1 byte (2): 7 bytes per token and h, against bf16's 10."""
    none = memory.layer_activation_bytes(MOE, 1, 1, False, "none", True, "fp8")
    moe = memory.layer_activation_bytes(MOE, 1, 1, False, "selective", True, "fp8", ("moe",))
    assert none - moe == pytest.approx(16 * 64 * 7)


def test_engine_policy_prices_time_and_memory():
    from dataclasses import replace

    from cosearch import cluster
    eng = replace(MEGATRON_CORE, selective_recompute="modules:layernorm,moe_act")
    cl = cluster.preset("dgx-h100", 1)
    base = evaluate(MOE, "H100", cl, PlanSpec(8, 1, 1, 2, flash_attention=True, expert_parallel=4), 64,
                    engine=MEGATRON_CORE)
    sel = evaluate(MOE, "H100", cl, PlanSpec(8, 1, 1, 2, recompute="selective", flash_attention=True,
                                             expert_parallel=4), 64, engine=eng)
    assert sel.step_time_s > base.step_time_s and sel.memory_per_chip_bytes < base.memory_per_chip_bytes
    with pytest.raises(ValueError, match="modules"):
        replace(MEGATRON_CORE, selective_recompute="modules:everything")


def test_validation_rows_read_recompute_modules():
    from cosearch.runs.rows import Refused, _recompute
    notes = []
    assert _recompute({"recompute": "selective: layernorm,moe_act (GPT-OSS base recipe ...)"}, notes) == \
        ("selective", ("layernorm", "moe_act"))
    assert _recompute({"recompute": "selective: mla_up_proj"}, notes) == ("selective", ("mla_up_proj",))
    assert _recompute({"recompute": "none"}, notes) == ("none", ())
    with pytest.raises(Refused, match="not Megatron-Core recompute_modules"):
        _recompute({"recompute": "selective: attention_everything"}, notes)


def test_megatron_and_bridge_configs_read_recompute_modules():
    from cosearch.runs.megatron import read_megatron_args
    from cosearch.runs.nemo import read_megatron_bridge
    base = ("--num-layers 4 --hidden-size 256 --num-attention-heads 4 --seq-length 128 --vocab-size 1000 "
            "--micro-batch-size 1 ")
    r = read_megatron_args(base + "--recompute-granularity selective --recompute-modules layernorm moe_act")
    assert r.engine.selective_recompute == "modules:layernorm,moe_act" and r.plan["recompute"] == "selective"
    # Megatron-Core's default module list is its classic selective recompute
    r = read_megatron_args(base + "--recompute-granularity selective --recompute-modules core_attn")
    assert r.engine.selective_recompute == "attention-core"
    for extra, why in (("--recompute-modules layernorm", "needs --recompute-granularity selective"),
                       ("--recompute-granularity full --recompute-modules mlp", "selective only"),
                       ("--recompute-granularity selective --recompute-modules bogus", "bogus")):
        with pytest.raises(ValueError, match=why):
            read_megatron_args(base + extra)
    b = read_megatron_bridge({"model": {"num_layers": 4, "hidden_size": 256, "num_attention_heads": 4,
                                        "seq_length": 128, "vocab_size": 1000, "recompute_granularity": "selective",
                                        "recompute_modules": ["mla_up_proj", "mlp"]},
                              "train": {"micro_batch_size": 1, "global_batch_size": 8}})
    assert b.engine.selective_recompute == "modules:mla_up_proj,mlp"


def test_maxtext_minimal_remat_reruns_all_but_the_weight_gemms():
    """MaxText's remat_policy minimal (its weight GEMMs' checkpoint names saved): every vector op
    up to the MLP's down projection and the attention core run again, no weight GEMM, nothing
    after the down projection (the residual add: the layer's output is the next layer's saved
    input); the recompute seconds of a plan are the sum of those ops' forward times, worked from
    the op prices; the reader picks the engine."""
    from cosearch import cluster, engine, graph, hardware, models
    from cosearch._kernels import formulas as F
    from cosearch.cost import price
    from cosearch.plan import unit_costs
    m = models.preset("llama2-7b")
    g = graph.build(m, 1, 1, "fwd", flash_attention=True)
    shares = {op.name: graph.recompute_share(op, m, "dots-saved") for op in g.ops}
    after = {"fc2", "residual2"}
    assert {op.name for op in g.ops} >= after
    assert all(shares[op.name] == (0.0 if op.kind == "gemm" or op.name in after else 1.0)
               for op in g.ops if op.kind != "attention")
    assert shares["attn_core"] == 1.0 and shares["qkv"] == 0.0 and shares["norm1"] == 1.0
    e = engine.preset("maxtext-minimal-remat")
    assert e.selective_recompute == "dots-saved"
    chip = hardware.TPUv5p
    u = unit_costs(m, chip, cluster.Cluster(1), (1,), (1,), (False,), True, engine=e)[0, 0, 0, 0]
    t = price(g.arrays(), chip.as_array()[None], efficiency=chip.efficiency)[0]
    want = sum(x for op, x in zip(g.ops, t)
               if op.kind != "gemm" and op.kind not in graph.NETWORK_KINDS and op.name not in after)
    assert u[F.U_LATT] == pytest.approx(want, rel=1e-9)
    from cosearch.runs.maxtext import read_maxtext
    words = ["ici_fsdp_parallelism=4", "per_device_batch_size=1", "remat_policy=minimal", "base_emb_dim=256",
             "base_num_decoder_layers=2", "base_num_query_heads=4", "base_num_kv_heads=4", "base_mlp_dim=512",
             "head_dim=64", "vocab_size=1000"]
    rc = read_maxtext(None, words)
    assert rc.engine.name == "maxtext-minimal-remat" and rc.plan["recompute"] == "selective"
    assert read_maxtext(None, [w.replace("minimal", "full") for w in words]).engine.name == "maxtext"


def test_torchtitan_per_op_policy_on_moe_and_mla_counted_by_hand():
    """torchtitan's per-op selective checkpointing (``every-other-matmul``) on an MoE layer, each
    matmul counted in execution order (odd saved, even rerun): wq, wk, wv, wo, then the shared
    experts' w1, w3, w2; the router gate forced to rerun and the experts' ``_grouped_mm`` never
    saved (neither counted).  Under MLA with a query LoRA: wq_a, wq_b, wkv_a, wkv_b, wo (five), so
    the shared w2 is the eighth, rerun; without one wq, wkv_a, wkv_b, wo."""
    from cosearch.models import preset
    gqa = MOE.with_(shared_experts=1)
    # the fused QKV GEMM: wk (kv heads of heads + 2 kv) rerun
    want_gqa = {"qkv": gqa.kv_heads / (gqa.heads + 2 * gqa.kv_heads), "attn_out": 1.0, "router": 1.0, "expert_fc1": 1.0, "expert_fc2": 1.0, "shared_fc1": 0.5,
                "shared_fc2": 0.0}
    want_v3 = {"q_down": 0.0, "q_up": 1.0, "kv_down": 0.0, "kv_up": 1.0, "attn_out": 0.0, "router": 1.0,
               "expert_fc1": 1.0, "expert_fc2": 1.0, "shared_fc1": 0.5, "shared_fc2": 1.0}
    want_lite = {"q_proj": 0.0, "kv_down": 1.0, "kv_up": 0.0, "attn_out": 1.0, "router": 1.0,
                 "expert_fc1": 1.0, "expert_fc2": 1.0, "shared_fc1": 0.5, "shared_fc2": 0.0}
    for m, want in ((gqa, want_gqa), (preset("deepseek-v3"), want_v3), (preset("deepseek-v2-lite"), want_lite)):
        ops = graph.build(m, 1, 1, flash_attention=True, expert_parallel=2).ops
        got = {o.name: graph.recompute_share(o, m, "every-other-matmul") for o in ops if o.kind == "gemm"}
        assert got == want, m.name
    # the dense first layer after MLA with a query LoRA: w1 / w3 half, w2 (the eighth) rerun
    dense = preset("deepseek-v3").dense_counterpart()
    shares = {o.name: graph.recompute_share(o, dense, "every-other-matmul")
              for o in graph.build(dense, 1, 1, flash_attention=True).ops if o.kind == "gemm"}
    assert (shares["fc1"], shares["fc2"], shares["attn_out"]) == (0.5, 1.0, 0.0)


def test_torchtitan_per_op_policy_saves_biased_projections():
    """GPT-OSS's biased projections and router run as ``aten.addmm``, which torchtitan 0.3's policy
    saves (PyTorch's compute-intensive ops) without counting it or matching the router's forced
    shape: none of them rerun; its experts' grouped GEMMs rerun whole.  The per-model lists before
    0.3 (aten.mm and linear) reran them."""
    from cosearch.models import preset
    m = preset("gpt-oss-20b").with_(num_layers=2, sliding_layers=1)
    ops = graph.build(m, 1, 1, flash_attention=True, expert_parallel=2).ops
    got = {o.name: graph.recompute_share(o, m, "every-other-matmul-fused-qkv") for o in ops if o.kind == "gemm"}
    assert got == {"qkv": 0.0, "attn_out": 0.0, "router": 0.0, "expert_fc1": 1.0, "expert_fc2": 1.0}
    # before 0.3 each model's list held aten.mm and linear only: the addmm projections rerun
    old = {o.name: graph.recompute_share(o, m, "every-other-matmul") for o in ops if o.kind == "gemm"}
    assert old == dict.fromkeys(got, 1.0)
