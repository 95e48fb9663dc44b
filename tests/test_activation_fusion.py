"""The MLP's activation fused or run as PyTorch ops, as each framework's config says
(Megatron's ``bias_activation_fusion``: ``--no-bias-swiglu-fusion`` / ``--no-bias-gelu-fusion``,
off for a GeLU MLP without biases; Megatron-Bridge's ``model.bias_activation_fusion``; NeMo 1's):
the graph each selects, the eager activation's bytes by hand (dense, routed and shared experts),
and the step it prices."""

from dataclasses import replace

import pytest

from cosearch import engine, graph, hardware, models
from cosearch.plan import PlanSpec, evaluate
from cosearch.runs import read_megatron_args, read_megatron_bridge, read_nemo1
from cosearch.runs.megatron import activation_fusion_off_flag

LLAMA = models.ModelConfig("tiny-llama", 2, 256, 4, 512, 1000, 128, activation="swiglu", norm="rmsnorm",
                           position="rotary", bias=False, tie_embeddings=False, dropout=False)
MOE = LLAMA.with_(name="tiny-moe", num_experts=8, experts_per_token=2, moe_ffn_hidden=64, shared_experts=1)
LINE = ("--num-layers 2 --hidden-size 256 --num-attention-heads 4 --seq-length 128 --vocab-size 1000 "
        "--ffn-hidden-size 512 --micro-batch-size 1 --global-batch-size 4 --bf16 --normalization RMSNorm "
        "--position-embedding-type rope --untie-embeddings-and-output-weights --attention-dropout 0 "
        "--hidden-dropout 0")


def test_which_activation_runs_eager():
    off = engine.megatron_core(activation_fusion=False)
    assert off.name.endswith("-unfused-act")
    assert engine.graph_elementwise(off, LLAMA) == "act-eager"
    assert engine.graph_elementwise(engine.megatron_core(rope_fusion=False, activation_fusion=False),
                                    LLAMA) == "act-rope-eager"
    assert engine.graph_elementwise(off, LLAMA.with_(activation="relu")) == "fused"      # one pass either way
    assert engine.graph_elementwise(replace(engine.FSDP_EAGER, activation_fusion=False), LLAMA) == "eager"
    assert graph.eager_activation("act-rope-eager") and graph.eager_rope("act-rope-eager")
    assert not graph.eager_activation("rope-eager") and not graph.eager_rope("act-eager")


def test_eager_swiglu_moves_its_itemized_bytes_dense_and_experts():
    """``chunk`` (a view), ``silu(g)`` (read g 2, write s 2), ``s * u`` (read 4, write 2): 6 read and
    4 written an element of the activation's output forward; the dense MLP's T x F, and the routed
    and shared experts' activations alike; every other op as fused."""
    fused_f, _ = graph.build_pair(LLAMA, 1, 1, flash_attention=True)
    f, b = graph.build_pair(LLAMA, 1, 1, flash_attention=True, elementwise="act-eager")
    act = next(o for o in f.ops if o.name == "act")
    assert act.elements == 128 * 512
    assert (act.bytes_read, act.bytes_written) == (6 * act.elements, 4 * act.elements)
    act_b = next(o for o in b.ops if o.name == "act.grad")
    assert (act_b.bytes_read, act_b.bytes_written) == (12 * act.elements, 6 * act.elements)
    assert ([(o.name, o.bytes_read, o.bytes_written) for o in f.ops if o.name != "act"]
            == [(o.name, o.bytes_read, o.bytes_written) for o in fused_f.ops if o.name != "act"])
    moe = {o.name: o for o in graph.build(MOE, 1, 1, flash_attention=True, elementwise="act-eager").ops}
    for name in ("expert_act", "shared_act"):
        assert (moe[name].bytes_read, moe[name].bytes_written) == (6 * moe[name].elements, 4 * moe[name].elements)


def test_a_biased_mlp_adds_its_bias_by_a_pass_of_its_own_when_unfused():
    """Megatron-Core's MLP without bias_activation_fusion adds fc1's bias before the activation:
    per element of the activation's output, a GeLU MLP's add reads 2 bytes and writes 2 (bf16),
    its backward reads the 2-byte gradient for the bias gradient's sum; a SwiGLU's input is twice
    as wide (4, 4; 4).  Hand-worked on top of the eager activation's bytes; a fully eager model
    (addmm) and a model without biases add nothing; the step grows by exactly those bytes."""
    gelu = LLAMA.with_(name="tiny-gpt", activation="gelu", norm="layernorm", bias=True)
    for m, add in ((gelu, (2.0, 2.0, 2.0, 0.0)), (LLAMA.with_(name="tiny-biased", bias=True), (4.0, 4.0, 4.0, 0.0))):
        want = tuple(a + b for a, b in zip(graph.EAGER_ELEMENTWISE_BYTES[m.activation], add))
        assert graph.unfused_bias_add_bytes(m) == add
        for mode in ("act-eager", "act-rope-eager"):
            f, b = graph.build_pair(m, 1, 1, flash_attention=True, elementwise=mode)
            act, grad = next(o for o in f.ops if o.name == "act"), next(o for o in b.ops if o.name == "act.grad")
            assert (act.bytes_read, act.bytes_written) == (want[0] * act.elements, want[1] * act.elements), mode
            assert (grad.bytes_read, grad.bytes_written) == (want[2] * act.elements, want[3] * act.elements), mode
        f, _ = graph.build_pair(m, 1, 1, flash_attention=True, elementwise="eager")
        eager = next(o for o in f.ops if o.name == "act")
        base = graph.EAGER_ELEMENTWISE_BYTES[m.activation]
        assert (eager.bytes_read, eager.bytes_written) == (base[0] * eager.elements, base[1] * eager.elements)
    # the step: the biased GeLU model unfused against fused, by the act ops' bytes counted by hand
    # (fused: the bias-GeLU kernel's 2 read, 2 written forward and 4, 2 back an element)
    chip = hardware.preset("H100")
    spec = PlanSpec(dp=1, tp=1, pp=1, microbatch=1, flash_attention=True)
    f, _ = graph.build_pair(gelu, 1, 1, flash_attention=True)
    fused = next(o for o in f.ops if o.name == "act")
    n = fused.elements
    assert (fused.bytes_read, fused.bytes_written) == (2 * n, 2 * n)
    unfused = sum(graph.EAGER_ELEMENTWISE_BYTES["gelu"]) + 6.0
    extra_s = (unfused - 10.0) * n / (chip.hbm_bandwidth_Bps * chip.efficiency.memory)
    a = evaluate(gelu, chip, 1, spec, 4, engine=engine.megatron_core(activation_fusion=False))
    p = evaluate(gelu, chip, 1, spec, 4, engine=engine.megatron_core())
    assert a.step_time_s - p.step_time_s == pytest.approx(2 * 4 * extra_s, rel=1e-9)


def test_unfused_activation_costs_its_extra_bytes_every_layer_and_microbatch():
    fused_f, fused_b = graph.build_pair(LLAMA, 1, 1, flash_attention=True)
    f, b = graph.build_pair(LLAMA, 1, 1, flash_attention=True, elementwise="act-eager")

    def moved(fwd, bwd):
        a, g = next(o for o in fwd.ops if o.name == "act"), next(o for o in bwd.ops if o.name == "act.grad")
        return a.bytes_read + a.bytes_written + g.bytes_read + g.bytes_written

    chip = hardware.preset("H100")
    extra_s = (moved(f, b) - moved(fused_f, fused_b)) / (chip.hbm_bandwidth_Bps * chip.efficiency.memory)
    assert extra_s > 0
    spec = PlanSpec(dp=1, tp=1, pp=1, microbatch=1, flash_attention=True)
    a = evaluate(LLAMA, chip, 1, spec, 4, engine=engine.megatron_core(activation_fusion=False))
    p = evaluate(LLAMA, chip, 1, spec, 4, engine=engine.megatron_core())
    assert a.step_time_s - p.step_time_s == pytest.approx(2 * 4 * extra_s, rel=1e-9)


def test_readers_turn_it_off_exactly_where_the_config_does():
    swiglu = LINE + " --swiglu --disable-bias-linear"
    assert read_megatron_args(swiglu).engine.activation_fusion
    assert not read_megatron_args(swiglu + " --no-bias-swiglu-fusion").engine.activation_fusion
    inert = read_megatron_args(swiglu + " --no-bias-gelu-fusion")
    assert inert.engine.activation_fusion and any("inert" in a for a in inert.assumed)
    # GeLU: on with biases unless --no-bias-gelu-fusion; without biases always off (Megatron's rule)
    assert read_megatron_args(LINE).engine.activation_fusion
    biased_off = read_megatron_args(LINE + " --no-bias-gelu-fusion")
    assert not biased_off.engine.activation_fusion and any("bias added by a pass of its own" in a and "priced" in a
                                                             for a in biased_off.assumed)
    nobias = read_megatron_args(LINE + " --disable-bias-linear")
    assert not nobias.engine.activation_fusion and any("F.gelu unfused" in a for a in nobias.assumed)
    # GPT-OSS's clamped activation unfused: refused
    with pytest.raises(ValueError, match="clamped activation unfused"):
        read_megatron_args("--no-bias-swiglu-fusion --global-batch-size 64", model="gpt-oss-120b")
    words = ["train.global_batch_size=64"]
    unset = read_megatron_bridge(None, words, model="llama3-8b")
    assert unset.engine.activation_fusion and any("bias_activation_fusion not given" in a for a in unset.assumed)
    off = read_megatron_bridge(None, words + ["model.bias_activation_fusion=false", "model.gated_linear_unit=true"],
                               model="llama3-8b")
    assert not off.engine.activation_fusion
    cfg = {"trainer": {"num_nodes": 1, "devices": 8, "precision": "bf16"},
           "model": {"micro_batch_size": 1, "global_batch_size": 64, "encoder_seq_length": 128, "num_layers": 2,
                     "hidden_size": 256, "ffn_hidden_size": 512, "num_attention_heads": 4, "megatron_amp_O2": True,
                     "activation": "swiglu", "bias": False, "tokenizer": {"type": "GPT2BPETokenizer"},
                     "gradient_accumulation_fusion": True, "optim": {"name": "distributed_fused_adam"}}}
    assert read_nemo1(cfg).engine.activation_fusion                       # NeMo 1's default on
    cfg["model"]["bias_activation_fusion"] = False
    assert not read_nemo1(cfg).engine.activation_fusion
    # a biased GeLU MLP: NeMo 1's switch maps to --no-bias-gelu-fusion, its bias add priced with the GeLU
    gelu = read_nemo1({**cfg, "model": {**cfg["model"], "activation": "gelu", "bias": True}})
    assert not gelu.engine.activation_fusion
    assert any("bias added by a pass of its own" in a for a in gelu.assumed)
    assert activation_fusion_off_flag(True) == "--no-bias-swiglu-fusion"
    assert activation_fusion_off_flag(False) == "--no-bias-gelu-fusion"


def test_a_clamped_activation_unfused_is_refused_through_the_api_too():
    oss = models.preset("gpt-oss-20b")
    with pytest.raises(ValueError, match="clamped"):
        engine.graph_elementwise(engine.megatron_core(activation_fusion=False), oss)
    chip = hardware.preset("H100")
    spec = PlanSpec(dp=8, tp=1, pp=1, microbatch=1, flash_attention=True, expert_parallel=8)
    with pytest.raises(ValueError, match="clamped"):
        evaluate(oss, chip, 8, spec, 64, engine=engine.megatron_core(activation_fusion=False))
    assert engine.graph_elementwise(engine.megatron_core(), oss) == "rope-eager"      # YaRN, fused activation
