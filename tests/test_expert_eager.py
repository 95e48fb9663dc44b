"""The routed experts' bias and clamped activation as Megatron-Core runs them without Transformer
Engine's op fuser (``Engine.expert_elementwise``): each eager PyTorch kernel of
``weighted_bias_quick_geglu_impl``'s clamp and of ``TEGroupedMLP._apply_bias`` counted here by
hand from the tensors it reads and writes, against the graph's ops."""

from dataclasses import replace

import numpy as np
import pytest

from cosearch import engine, graph, hardware, memory, models
from cosearch.models import ModelConfig
from cosearch.plan import PlanSpec, evaluate

# A small GPT-OSS-shaped MoE: 8 experts of 48 (gated), top-2, hidden 64, biases, clamped at 7.
TINY = ModelConfig("tiny-oss", 2, 64, 4, 48, 512, 32, kv_heads=2, activation="swiglu", norm="rmsnorm",
                   position="rotary", bias=True, tie_embeddings=False, dropout=False, num_experts=8,
                   experts_per_token=2, moe_ffn_hidden=48, activation_clamp=7.0)


def _kernels_bytes(kernels):
    """(read, written) bytes of a list of kernels, each ``(elements read x bytes, ...), (written)``."""
    return sum(sum(r) for r, _ in kernels), sum(sum(w) for _, w in kernels)


def _hand_clamp(n, f, dt=2):
    """The clamp before the fused activation on the up projection's [n, 2f] output, kernel by kernel
    (``x_glu.clamp(max)``, ``x_linear.clamp(min, max)``, ``torch.cat``), and its backward
    (``clamp_backward``: comparisons into a bool mask, ``logical_and_`` for the two-sided clamp,
    ``where(mask, grad, 0)``; then ``chunk``'s backward, a ``cat`` of the two gradients)."""
    half = n * f
    fwd = [((half * dt,), (half * dt,)), ((half * dt,), (half * dt,)), ((2 * half * dt,), (2 * half * dt,))]
    bwd = [((half * dt,), (half,)), ((half, half * dt), (half * dt,)),                      # gate: <=, where
           ((half * dt,), (half,)), ((half * dt,), (half,)), ((half, half), (half,)),       # linear: >=, <=, and
           ((half, half * dt), (half * dt,)),                                               # where
           ((2 * half * dt,), (2 * half * dt,))]                                            # chunk's cat
    return _kernels_bytes(fwd), _kernels_bytes(bwd)


def _hand_bias(n, h, dt=2, pb=2):
    """``_apply_bias``: per local expert ``b * p`` (written in the promoted dtype r), ``t + (b*p)``,
    then ``torch.cat`` and ``.to(dt)``; backward: the cast back, the add's gradient to ``t`` cast,
    ``mul``'s two gradients (product then a sum each), ``split``'s backward ``cat``."""
    r = max(dt, pb)
    e = n * h
    fwd = [((0,), (e * r,)), ((e * dt, e * r), (e * r,)), ((e * r,), (e * r,))]
    bwd = [((e * r,), (e * r,)), ((e * r,), (0,)), ((e * r,), (e * r,)), ((e * r,), (0,)), ((e * dt,), (e * dt,))]
    if r != dt:
        fwd.append(((e * r,), (e * dt,)))
        bwd += [((e * dt,), (e * r,)), ((e * r,), (e * dt,))]
    return _kernels_bytes(fwd), _kernels_bytes(bwd)


@pytest.mark.parametrize("mode,pb", [("eager", 2), ("eager-fp32-probs", 4)])
@pytest.mark.parametrize("ep,mb", [(1, 1), (2, 3), (4, 1)])
def test_eager_expert_passes_move_the_bytes_counted_kernel_by_kernel(mode, pb, ep, mb):
    f, b = graph.build_pair(TINY, 1, mb, expert_parallel=ep, flash_attention=True, expert_elementwise=mode)
    fw, bw = {o.name: o for o in f.ops}, {o.name: o for o in b.ops}
    # balanced dropless routing: each of the rank's 8/ep experts gets tokens x k x ep / 8 rows
    n = (8 // ep) * (mb * 32 * 2 * ep // 8)
    (cr, cw), (cbr, cbw) = _hand_clamp(n, 48)
    (br, bw_), (bbr, bbw) = _hand_bias(n, 64, pb=pb)
    assert (fw["expert_clamp"].bytes_read, fw["expert_clamp"].bytes_written) == (cr, cw)
    assert (bw["expert_clamp.grad"].bytes_read, bw["expert_clamp.grad"].bytes_written) == (cbr, cbw)
    assert (fw["expert_bias"].bytes_read, fw["expert_bias"].bytes_written) == (br, bw_)
    assert (bw["expert_bias.grad"].bytes_read, bw["expert_bias.grad"].bytes_written) == (bbr, bbw)
    # the clamp sits between the up projection and the activation, the bias after the down projection
    names = [o.name for o in f.ops]
    assert names.index("expert_fc1") < names.index("expert_clamp") < names.index("expert_act")
    assert names.index("expert_fc2") < names.index("expert_bias") < names.index("moe_unpermute")


def test_fused_experts_and_models_without_bias_or_clamp_add_nothing():
    fused = graph.build(TINY, 1, 1, expert_parallel=2, flash_attention=True)
    assert not {"expert_clamp", "expert_bias"} & {o.name for o in fused.ops}
    mixtral = models.preset("mixtral-8x7b")
    a = graph.build(mixtral, 1, 1, expert_parallel=2, flash_attention=True)
    e = graph.build(mixtral, 1, 1, expert_parallel=2, flash_attention=True, expert_elementwise="eager")
    assert a == e
    # bias without a clamp: the bias pass only
    nb = graph.build(TINY.with_(activation_clamp=0.0), 1, 1, expert_parallel=2, expert_elementwise="eager")
    assert {"expert_bias"} == {o.name for o in nb.ops} & {"expert_clamp", "expert_bias"}
    with pytest.raises(ValueError, match="expert_elementwise"):
        graph.build(TINY, 1, 1, expert_elementwise="compiled")


@pytest.mark.parametrize("mode", ["eager", "eager-fp32-probs"])
@pytest.mark.parametrize("dispatcher", ["alltoall", "flex"])
def test_expert_parallel_graphs_derived_from_ep2_carry_the_eager_passes(mode, dispatcher):
    opts = dict(flash_attention=True, expert_elementwise=mode, moe_dispatcher=dispatcher)
    f2, b2 = graph.build_pair(TINY, 1, 2, expert_parallel=2, **opts)
    # at ep 8 each rank holds one of the 8 experts: the alltoall dispatcher's regrouping stops
    for ep in (4, 8) if dispatcher == "flex" else (4,):
        f, b = graph.build_pair(TINY, 1, 2, expert_parallel=ep, **opts)
        df, db = graph.with_expert_parallel(f2, b2, TINY, 1, 2, ep, 1, "bf16", "single", mode, dispatcher)
        assert df == f and db == b
        assert np.array_equal(df.arrays(), f.arrays()) and np.array_equal(db.arrays(), b.arrays())


def test_moe_act_recompute_reruns_the_clamp_and_drops_its_copy():
    """Megatron-Core checkpoints ``bias_act_func`` (the clamp is inside it) for ``moe_act``; the
    clamped copy the activation keeps is one more [tokens x k, 2F] bf16 tensor, hand-counted."""
    assert "expert_clamp" in graph.RECOMPUTE_MODULES["moe_act"]
    assert "expert_bias" not in graph.RECOMPUTE_MODULES["moe_act"]
    for tp in (1, 2):
        plain = memory.layer_activation_bytes(TINY, tp, 1)
        eager = memory.layer_activation_bytes(TINY, tp, 1, eager_clamp=True)
        assert eager - plain == pytest.approx(32 * 2 * (2 * 48) * 2 / tp)
        kept = memory.layer_activation_bytes(TINY, tp, 1, recompute="selective", modules=("moe_act",), eager_clamp=True)
        assert kept == pytest.approx(memory.layer_activation_bytes(TINY, tp, 1, recompute="selective",
                                                                   modules=("moe_act",)))


def test_engines_and_the_op_fuser():
    assert engine.MEGATRON_CORE.expert_elementwise == "eager"
    assert engine.megatron_core(tp_comm_overlap=True).expert_elementwise == "eager"
    fused = engine.megatron_core(op_fuser=True)
    assert (fused.expert_elementwise, fused.name) == ("fused", "megatron-core-op-fuser")
    assert engine.with_op_fuser(fused) is fused
    assert engine.FSDP.expert_elementwise == "fused"
    assert engine.expert_graph_option(engine.MEGATRON_CORE) == "eager"
    assert engine.expert_graph_option(engine.with_moe_dispatch(engine.MEGATRON_CORE, "flex")) == "eager-fp32-probs"
    assert engine.expert_graph_option(engine.with_moe_dispatch(fused, "flex")) == "fused"
    with pytest.raises(ValueError, match="expert_elementwise"):
        engine.Engine(expert_elementwise="eager-fp32-probs")
    with pytest.raises(ValueError, match="op_fuser"):
        engine.megatron_core(op_fuser="yes")


def test_a_plan_prices_the_eager_passes_where_the_engine_runs_them():
    m = models.preset("gpt-oss-120b").with_(num_layers=4, sliding_layers=2)
    spec = PlanSpec(dp=8, tp=1, pp=1, microbatch=1, expert_parallel=8, zero=1, flash_attention=True)
    eager = evaluate(m, "H100", 8, spec, 64, engine=engine.megatron_core())
    fused = evaluate(m, "H100", 8, spec, 64, engine=engine.megatron_core(op_fuser=True))
    # fused, the clamp costs nothing: the same plan as without one
    plain = evaluate(m.with_(activation_clamp=0.0), "H100", 8, spec, 64, engine=engine.megatron_core(op_fuser=True))
    assert eager.feasible and fused.feasible
    assert eager.step_time_s > fused.step_time_s
    assert fused.step_time_s == pytest.approx(plain.step_time_s, rel=1e-9)
    assert eager.memory_per_chip_bytes > fused.memory_per_chip_bytes


def test_model_fields_and_the_hf_reader():
    assert models.preset("gpt-oss-120b").activation_clamp == 7.0 and models.preset("gpt-oss-120b").bias
    for bad in (-1.0, float("nan"), "7", True):
        with pytest.raises(ValueError, match="activation_clamp"):
            TINY.with_(activation_clamp=bad)
    with pytest.raises(ValueError, match="gated activation"):
        ModelConfig("g", 2, 64, 4, 256, 512, 32, activation="gelu", activation_clamp=7.0)
    # openai/gpt-oss-120b config.json's fields
    hf = {"model_type": "gpt_oss", "hidden_size": 2880, "num_hidden_layers": 36, "num_attention_heads": 64,
          "num_key_value_heads": 8, "head_dim": 64, "intermediate_size": 2880, "num_local_experts": 128,
          "num_experts_per_tok": 4, "vocab_size": 201088, "hidden_act": "silu", "attention_bias": True,
          "swiglu_limit": 7.0, "tie_word_embeddings": False, "rms_norm_eps": 1e-5, "rope_theta": 150000,
          "sliding_window": 128, "max_position_embeddings": 131072}
    got = models.from_hf_config(hf, seq_len=4096)
    assert (got.activation_clamp, got.bias) == (7.0, True)
    with pytest.raises(ValueError, match="swiglu_limit"):
        models.from_hf_config(dict(hf, swiglu_limit="seven"), seq_len=4096)


def test_yarn_attention_factor_as_hugging_face_and_megatron_compute_it():
    """0.1 m ln s + 1 above factor 1: GPT-OSS's factor 32 gives 1 + 0.1 ln 32; DeepSeek's
    mscale / mscale_all_dim of equal values gives 1; a factor of 1 or below gives 1."""
    import math
    assert models.yarn_attention_factor(32.0) == pytest.approx(1.0 + 0.1 * math.log(32.0))
    assert models.yarn_attention_factor(40.0, 1.0, 1.0) == 1.0
    assert models.yarn_attention_factor(40.0, 0.707, 1.0) == pytest.approx((0.0707 * math.log(40) + 1) /
                                                                           (0.1 * math.log(40) + 1))
    assert models.yarn_attention_factor(1.0) == models.yarn_attention_factor(0.5) == 1.0
    assert models.preset("gpt-oss-120b").rope_attention_factor == pytest.approx(1.0 + 0.1 * math.log(32.0))
    assert models.preset("deepseek-v3").rope_attention_factor == 1.0
    hf = {"model_type": "gpt_oss", "hidden_size": 2880, "num_hidden_layers": 36, "num_attention_heads": 64,
          "num_key_value_heads": 8, "head_dim": 64, "intermediate_size": 2880, "num_local_experts": 128,
          "num_experts_per_tok": 4, "vocab_size": 201088, "hidden_act": "silu", "rms_norm_eps": 1e-5,
          "rope_theta": 150000, "rope_scaling": {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0,
                                                  "beta_slow": 1.0, "original_max_position_embeddings": 4096}}
    assert models.from_hf_config(hf, seq_len=4096).rope_attention_factor == pytest.approx(1.0 + 0.1 * math.log(32))
    given = dict(hf, rope_scaling=dict(hf["rope_scaling"], attention_factor=1.2))
    assert models.from_hf_config(given, seq_len=4096).rope_attention_factor == 1.2
    llama = dict(hf, rope_scaling={"rope_type": "llama3", "factor": 8.0})
    assert models.from_hf_config(llama, seq_len=4096).rope_attention_factor == 1.0
    with pytest.raises(ValueError, match="rope_scaling's 'factor'"):
        models.from_hf_config(dict(hf, rope_scaling={"rope_type": "yarn", "factor": "32"}), seq_len=4096)
    for bad in (0.0, -1.0, float("inf"), "1.3", 100.0):
        with pytest.raises(ValueError, match="rope_attention_factor"):
            TINY.with_(rope_attention_factor=bad)


def test_a_yarn_scaled_rope_runs_eager_under_megatron_core():
    """Megatron-Core runs a RoPE whose cos and sin carry YaRN's factor in PyTorch (TE's fused RoPE
    takes no factor): the rotary op moves the eager bytes, 10 read and 10 written an element each
    way; on one chip with no overlap the step grows by exactly that traffic, layers x microbatches."""
    scaled = TINY.with_(rope_attention_factor=1.3)
    assert engine.graph_elementwise(engine.megatron_core(), scaled) == "rope-eager"
    assert engine.graph_elementwise(engine.megatron_core(), TINY) == "fused"
    assert engine.graph_elementwise(engine.FSDP, scaled) == "fused"
    assert engine.graph_elementwise(engine.FSDP_EAGER, scaled) == "eager"
    fused_f, fused_b = graph.build_pair(scaled, 1, 1, flash_attention=True)
    f, b = graph.build_pair(scaled, 1, 1, flash_attention=True, elementwise="rope-eager")
    rot, rot_b = (next(o for o in g.ops if o.name == n) for g, n in ((f, "rotary"), (b, "rotary.grad")))
    assert (rot.bytes_read, rot.bytes_written) == (10 * rot.elements, 10 * rot.elements)
    assert (rot_b.bytes_read, rot_b.bytes_written) == (10 * rot.elements, 10 * rot.elements)
    others = [(o.name, o.bytes_read, o.bytes_written) for o in f.ops if o.name != "rotary"]
    assert others == [(o.name, o.bytes_read, o.bytes_written) for o in fused_f.ops if o.name != "rotary"]
    chip = hardware.preset("H100")
    stream = chip.hbm_bandwidth_Bps * chip.efficiency.memory
    frot = next(o for o in fused_f.ops if o.name == "rotary")
    frot_b = next(o for o in fused_b.ops if o.name == "rotary.grad")
    extra_s = (rot.bytes_read + rot.bytes_written + rot_b.bytes_read + rot_b.bytes_written
               - frot.bytes_read - frot.bytes_written - frot_b.bytes_read - frot_b.bytes_written) / stream
    spec = PlanSpec(dp=1, tp=1, pp=1, microbatch=1, flash_attention=True)
    plain = replace(engine.megatron_core(), scaled_rope="fused")
    a = evaluate(scaled, chip, 1, spec, 4, engine=engine.megatron_core())
    p = evaluate(scaled, chip, 1, spec, 4, engine=plain)
    assert a.step_time_s - p.step_time_s == pytest.approx(2 * 4 * extra_s, rel=1e-9)


def test_expert_tensor_parallelism_splits_the_clamp_not_the_bias():
    """Under tp 2 with experts split over it (etp = tp), each rank clamps its half of every expert's
    up projection (2F / 2 columns) but adds the bias to the down projection's whole [n, H] output
    (the row-parallel GEMM's partial sums before their reduce-scatter)."""
    one = {o.name: o for o in graph.build(TINY, 1, 1, expert_parallel=2, flash_attention=True,
                                           expert_elementwise="eager").ops}
    two = {o.name: o for o in graph.build(TINY, 2, 1, expert_parallel=2, flash_attention=True,
                                           expert_elementwise="eager").ops}
    assert two["expert_clamp"].elements * 2 == one["expert_clamp"].elements
    assert two["expert_bias"].elements == one["expert_bias"].elements


def test_the_cli_op_fuser_switch(capsys):
    """``cosearch plan --op-fuser``: GPT-OSS's experts fused, a shorter step than Megatron-Core's eager
    passes on the same plan; said where the engine fuses them already."""
    import json

    from cosearch.cli import main
    args = ["plan", "--model", "gpt-oss-120b", "--cluster", "gb200-nvl72", "--chips", "64", "--batch", "256",
            "--dp", "64", "--tp", "1", "--pp", "1", "--mb", "4", "--ep", "64", "--zero", "1", "--flash",
            "--recompute", "none", "--json"]
    steps = {}
    for extra in ([], ["--op-fuser"]):
        assert main(args + ["--engine", "megatron-core"] + extra) == 0
        steps[bool(extra)] = json.loads(capsys.readouterr().out)["plans"][0]["step_time_s"]
    assert steps[True] < steps[False]
    assert main(args + ["--engine", "fsdp", "--op-fuser"]) == 0
    assert "fused already" in capsys.readouterr().err


def test_the_helpers_refuse_what_they_cannot_price():
    for bad in ("32", None, float("nan"), -1.0, [32]):
        with pytest.raises(ValueError, match="yarn_attention_factor"):
            models.yarn_attention_factor(bad)
    with pytest.raises(ValueError, match="mscale"):
        models.yarn_attention_factor(32.0, "1", 1.0)
    with pytest.raises(ValueError, match="dt must be"):
        graph.expert_eager_bytes("eager", 3)
    with pytest.raises(ValueError, match="unknown engine"):
        engine.with_op_fuser("megatron")
    assert engine.with_op_fuser("megatron-core").expert_elementwise == "fused"
    with pytest.raises(ValueError, match="expects a ModelConfig"):
        engine.graph_elementwise(engine.MEGATRON_CORE, "gpt-oss-120b")


def _hand_torchtitan(n, f, h, dt=2):
    """torchtitan 0.3's ``GptOssGroupedExperts`` without ``torch.compile``, kernel by kernel as a
    profile of the same PyTorch ops lists them (``torch.profiler`` on torch 2.13): the up
    projection's bias (``repeat_interleave`` as ``index_select``, the add; backward ``index_add_``),
    the clamps of the two halves (``x[..., ::2]``, ``x[..., 1::2]``: a stride-2 half read moves its
    row's sectors, so it counts as the row; backward: the comparisons into 1-byte masks,
    ``logical_and_``, ``where``, each slice's ``slice_backward`` (a zero row, the half's gradient
    copied into it) and the sum of the two rows), the clamped SwiGLU (``alpha * g``, ``sigmoid``,
    ``g * s``, ``addcmul(o, o, l)``; backward: ``addcmul``'s two gradients, each a scaling by
    ``value`` then a product, and the sum of ``o``'s, ``mul``'s two, ``sigmoid_backward``, the
    scaling by alpha and the sum of ``g``'s), the down projection's bias."""
    row, half, mask, t, e = n * 2 * f * dt, n * f * dt, n * f, n * f * dt, n * h * dt
    k = {
        "expert_fc1_bias": ([((0,), (row,)), ((row, row), (row,))], [((row,), (0,))]),
        "expert_clamp": ([((row,), (half,)), ((row,), (half,))],
                         [((row,), (mask,)), ((mask, half), (half,)),                              # max: le, where
                          ((row,), (mask,)), ((row,), (mask,)), ((mask, mask), (mask,)),           # ge, le, and
                          ((mask, half), (half,)),                                                 # where
                          ((0,), (row,)), ((half,), (row,)), ((0,), (row,)), ((half,), (row,)),   # slice_backward x 2
                          ((row, row), (row,))]),                                                  # add_
        "expert_act": ([((t,), (t,)), ((t,), (t,)), ((t, t), (t,)), ((t, t), (t,))],
                       [((t,), (t,)), ((t, t), (t,)), ((t,), (t,)), ((t, t), (t,)), ((t, t), (t,)),   # addcmul
                        ((t, t), (t,)), ((t, t), (t,)),                                            # mul
                        ((t, t), (t,)),                                                            # sigmoid
                        ((t,), (t,)), ((t, t), (t,))]),                                            # alpha, add_
        "expert_bias": ([((0,), (e,)), ((e, e), (e,))], [((e,), (0,))]),
    }
    return {name: (_kernels_bytes(fw), _kernels_bytes(bw)) for name, (fw, bw) in k.items()}


@pytest.mark.parametrize("ep,mb", [(1, 1), (2, 3), (4, 1)])
def test_torchtitan_gpt_oss_experts_move_the_bytes_counted_kernel_by_kernel(ep, mb):
    f, b = graph.build_pair(TINY, 1, mb, expert_parallel=ep, flash_attention=True, elementwise="eager",
                            expert_elementwise="torchtitan", moe_dispatcher="gather-tokens")
    fw, bw = {o.name: o for o in f.ops}, {o.name: o for o in b.ops}
    n = (8 // ep) * (mb * 32 * 2 * ep // 8)
    for name, ((r, w), (br, bw_)) in _hand_torchtitan(n, 48, 64).items():
        assert (fw[name].bytes_read, fw[name].bytes_written) == (r, w), name
        assert (bw[name + ".grad"].bytes_read, bw[name + ".grad"].bytes_written) == (br, bw_), name
    names = [o.name for o in f.ops]
    assert (names.index("expert_fc1") < names.index("expert_fc1_bias") < names.index("expert_clamp")
            < names.index("expert_act") < names.index("expert_fc2") < names.index("expert_bias"))


def test_eager_elementwise_runs_the_experts_activation_eager_too():
    """torchtitan's ``GroupedExperts`` and shared ``FeedForward`` run ``F.silu(a) * b`` op by op: the
    routed and shared experts' activation moves the dense eager SwiGLU's bytes (silu reads a and
    writes s, the product reads s and b and writes: 3 dt read, 2 dt written an element; its
    backward 12 and 6 bytes), where ``elementwise`` is eager; the unclamped model's experts are
    the same under the torchtitan mode and without it."""
    m = TINY.with_(bias=False, activation_clamp=0.0, shared_experts=1)
    fused = {o.name: o for o in graph.build(m, 1, 1, expert_parallel=2, flash_attention=True).ops}
    f, b = graph.build_pair(m, 1, 1, expert_parallel=2, flash_attention=True, elementwise="eager")
    fw, bw = {o.name: o for o in f.ops}, {o.name: o for o in b.ops}
    for name in ("expert_act", "shared_act"):
        assert (fw[name].bytes_read, fw[name].bytes_written) == (3 * 2 * fw[name].elements, 2 * 2 * fw[name].elements)
        assert (bw[name + ".grad"].bytes_read, bw[name + ".grad"].bytes_written) == (
            12 * fw[name].elements, 6 * fw[name].elements)
        assert fused[name].bytes_read < fw[name].bytes_read
    tt = graph.build_pair(m, 1, 1, expert_parallel=2, flash_attention=True, elementwise="eager",
                          expert_elementwise="torchtitan")
    assert tt == (f, b)


@pytest.mark.parametrize("elementwise,mode", [("eager", "torchtitan"), ("eager", "fused"), ("fused", "torchtitan")])
def test_expert_parallel_graphs_derived_from_ep2_carry_torchtitan_passes(elementwise, mode):
    opts = dict(flash_attention=True, elementwise=elementwise, expert_elementwise=mode, moe_dispatcher="gather-tokens")
    for m in (TINY, TINY.with_(bias=False, activation_clamp=0.0, shared_experts=1)):
        f2, b2 = graph.build_pair(m, 1, 2, expert_parallel=2, **opts)
        f, b = graph.build_pair(m, 1, 2, expert_parallel=4, **opts)
        df, db = graph.with_expert_parallel(f2, b2, m, 1, 2, 4, 1, "bf16", "single", mode, "gather-tokens",
                                            elementwise)
        assert df == f and db == b
        assert np.array_equal(df.arrays(), f.arrays()) and np.array_equal(db.arrays(), b.arrays())


def test_torchtitan_engines_run_gpt_oss_experts_eager_unless_compiled():
    assert engine.FSDP_EAGER.expert_elementwise == "torchtitan" and engine.FSDP.expert_elementwise == "fused"
    assert engine.expert_graph_option(engine.with_moe_dispatch(engine.FSDP_EAGER, "flex", backend="deepep")) == \
        "torchtitan"
    with pytest.raises(ValueError, match="op fuser is Megatron-Core"):
        engine.with_op_fuser("fsdp-eager")
    m = models.preset("gpt-oss-20b").with_(num_layers=4, sliding_layers=2)
    spec = PlanSpec(dp=8, tp=1, pp=1, microbatch=1, expert_parallel=8, zero=3, flash_attention=True)
    eager = evaluate(m, "H100", 8, spec, 64, engine=engine.FSDP_EAGER)
    plain = evaluate(m, "H100", 8, spec, 64, engine=replace(engine.FSDP_EAGER, expert_elementwise="fused"))
    assert eager.feasible and eager.step_time_s > plain.step_time_s
    assert eager.memory_per_chip_bytes > plain.memory_per_chip_bytes


def test_gpt_oss_20b_preset_against_its_model_card():
    """openai/gpt-oss-20b: 20.9B parameters in total, 3.6B active a token (its model card, which
    counts the active ones without the unembedding); gpt-oss-120b's layers, 24 of them, 32 experts."""
    small, big = models.preset("gpt-oss-20b"), models.preset("gpt-oss-120b")
    assert small.num_params() / 1e9 == pytest.approx(20.9, abs=0.05)
    unembed = small.vocab * small.hidden
    assert (small.num_params(active=True) - unembed) / 1e9 == pytest.approx(3.6, abs=0.05)
    assert (small.num_layers, small.num_experts, small.sliding_layers) == (24, 32, 12)
    assert small.with_(name=big.name, num_layers=36, num_experts=128, sliding_layers=18) == big
