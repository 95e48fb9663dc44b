"""FP8 copies on chips whose FP8 GEMMs take every operand layout (``Accelerator.fp8_any_layout``,
data-centre Blackwell): Transformer Engine keeps a per-tensor-scaled FP8 tensor as one copy there
(``quantizer.cpp``: ``with_transpose = columnwise_usage && !is_non_tn_fp8_gemm_supported``), so a
cast writes one copy, a delayed-scaling norm's FP8 output needs no transpose, and a cached FP8
weight is one copy; block-scaled recipes keep both copies everywhere.  Checked against hand-counted
bytes, hand-priced step times and hand-worked memory."""
import json

import pytest

import cosearch
from cosearch import engine, graph, hardware, models, plan

# a small GQA SwiGLU layer: h 1024, 8 heads of 128 (2 K/V heads), ffn 2816, 2048 tokens
SMALL = models.ModelConfig("small-gqa", num_layers=2, hidden=1024, heads=8, ffn_hidden=2816, vocab=32000,
                           seq_len=2048, kv_heads=2, activation="swiglu", norm="rmsnorm", position="rotary",
                           bias=False, tie_embeddings=False, dropout=False)


def _casts(g: graph.LayerGraph) -> dict[str, graph.Op]:
    return {o.name: o for o in g.ops if o.kind == "cast"}


def test_one_copy_casts_write_half_hand_counted():
    """tp 2 with sequence parallelism: every cast of current scaling writes one FP8 byte an element
    where it wrote two (fc2's input, 2048 x 1408 a rank: 2,883,584 bytes, not 5,767,168), reads
    the same bf16, and nothing else in the forward or backward changes."""
    kw = dict(sequence_parallel=True, flash_attention=True, precision="fp8")
    two = graph.build_pair(SMALL, 2, 1, cast_passes="amax-unfused", **kw)
    one = graph.build_pair(SMALL, 2, 1, cast_passes="amax-unfused-one-copy", **kw)
    for g2, g1 in zip(two, one):
        c2, c1 = _casts(g2), _casts(g1)
        assert c2 and set(c2) == set(c1)
        for name, op in c2.items():
            assert c1[name].bytes_written == op.bytes_written / 2 == op.elements
            assert c1[name].bytes_read == op.bytes_read
        assert [o for o in g2.ops if o.kind != "cast"] == [o for o in g1.ops if o.kind != "cast"]
    assert _casts(one[0])["fc2.cast"].bytes_written == 2048 * 1408


def test_delayed_scaling_norm_output_needs_no_transpose_on_any_layout_chips():
    """Delayed scaling: the norms inside LayerNormLinear write the FP8 copy (1 byte an element, as
    on Hopper) and, with one copy serving both layouts, the transposing casts after them are gone;
    the attention output's and the activation's casts write one copy."""
    kw = dict(sequence_parallel=True, flash_attention=True, precision="fp8")
    f2, _ = graph.build_pair(SMALL, 2, 1, cast_passes="norm-fused", **kw)
    f1, b1 = graph.build_pair(SMALL, 2, 1, cast_passes="norm-fused-one-copy", **kw)
    by1, by2 = {o.name: o for o in f1.ops}, {o.name: o for o in f2.ops}
    share = 1024 * 1024
    for norm, cast in (("norm1", "allgather_attn.cast"), ("norm2", "allgather_mlp.cast")):
        assert by1[norm].bytes_written == by2[norm].bytes_written == share
        assert cast in by2 and cast not in by1
    assert set(by2) - set(by1) == {"allgather_attn.cast", "allgather_mlp.cast"}
    assert by1["fc2.cast"].bytes_written == 2048 * 1408 == by2["fc2.cast"].bytes_written / 2
    assert all(o.bytes_written == o.elements for o in b1.ops if o.kind == "cast")
    # eager norms write bf16: no fusion, one-copy casts (the "single" mode)
    eager = graph.build(SMALL, 1, 1, precision="fp8", flash_attention=True, cast_passes="norm-fused-one-copy",
                        elementwise="eager")
    assert eager == graph.build(SMALL, 1, 1, precision="fp8", flash_attention=True, elementwise="eager",
                                cast_passes="single-one-copy")


@pytest.mark.parametrize("chip, recipe, eng, copies, passes", [
    ("GB200", "tensorwise", "megatron-core", 1, "amax-unfused-one-copy"),
    ("B200", "delayed", "megatron-core", 1, "norm-fused-one-copy"),
    ("B300", None, "megatron-core", 1, "norm-fused-one-copy"),         # None: delayed, TE's default
    ("GB300", "mxfp8", "megatron-core", 2, "single"),                   # block scales: both copies
    ("GB200", "blockwise", "megatron-core", 2, "single"),
    ("H100", "tensorwise", "megatron-core", 2, "amax-unfused"),         # Hopper FP8 GEMMs: TN only
    ("H200", "delayed", "megatron-core", 2, "norm-fused"),
    ("B200", "tensorwise", "fsdp", 2, "single"),                        # torchao's casts, not TE's
])
def test_copies_by_chip_recipe_and_engine(chip, recipe, eng, copies, passes):
    c = hardware.preset(chip)
    assert plan.low_precision_copies(c, eng, "fp8", recipe) == copies
    assert plan.cast_passes(eng, "fp8", recipe, c) == passes
    assert plan.low_precision_copies(None, eng, "fp8", recipe) == 2          # a searched design
    assert plan.low_precision_copies(c, eng, "bf16") == 2


def test_step_time_hand_priced_one_copy():
    """One chip, tp 1, 4 microbatches of one sequence, 2 layers, current scaling: the same H100 with
    FP8 GEMMs that take every layout writes one FP8 byte less per element of each cast, forward
    (QKV's and fc1's norm outputs, 2048 x 1024 each; the attention output, 2048 x 1024; the
    activation, 2048 x 2816) and backward (the gradients into fc2, 2048 x 1024; fc1, 2048 x 2 x
    2816; attn_out, 2048 x 1024; QKV, 2048 x 12 x 128), at the chip's stream rate."""
    h100 = hardware.preset("H100")
    any_layout = h100.with_(fp8_any_layout=True)
    elements = [2048 * 1024, 2048 * 1024, 2048 * 1024, 2048 * 2816,
                2048 * 1024, 2048 * 2 * 2816, 2048 * 1024, 2048 * 12 * 128]
    saved_s = sum(elements) / (h100.hbm_bandwidth_Bps * h100.efficiency.memory)
    spec = plan.PlanSpec(dp=1, tp=1, pp=1, microbatch=1, precision="fp8", flash_attention=True,
                         scaling_recipe="tensorwise")
    cl = cosearch.Cluster(1)
    a = plan.evaluate(SMALL, h100, cl, spec, 4, engine="megatron-core")
    b = plan.evaluate(SMALL, any_layout, cl, spec, 4, engine="megatron-core")
    assert a.feasible and b.feasible
    assert a.step_time_s - b.step_time_s == pytest.approx(4 * 2 * saved_s, rel=1e-9)
    # block scales (128-blockwise on Hopper, as MXFP8 on Blackwell) keep both copies on either chip
    mx = spec.with_(scaling_recipe="blockwise")
    assert plan.evaluate(SMALL, h100, cl, mx, 4, engine="megatron-core").step_time_s == \
        plan.evaluate(SMALL, any_layout, cl, mx, 4, engine="megatron-core").step_time_s


@pytest.mark.parametrize("eng", [engine.megatron_core(), engine.megatron_core(fp8_param_gather=True)])
def test_memory_one_weight_copy_hand_worked(eng):
    """dp 2, ZeRO 1, one stage: a cached FP8 weight keeps one copy, not two, on a chip whose FP8
    GEMMs take every layout, so each of the chip's parameters holds one byte less — with bf16
    weights (bf16 + 2 FP8 copies -> bf16 + 1) and with FP8-only weights (FP8 parameter + its
    transpose -> the parameter alone); under MXFP8 nothing changes."""
    chip = hardware.preset("GB200")
    tn_only = chip.with_(fp8_any_layout=False)
    spec = plan.PlanSpec(dp=2, tp=1, pp=1, microbatch=1, precision="fp8", flash_attention=True, zero=1,
                         scaling_recipe="tensorwise")
    cl = cosearch.Cluster(2)
    a = plan.evaluate(SMALL, tn_only, cl, spec, 4, engine=eng)
    b = plan.evaluate(SMALL, chip, cl, spec, 4, engine=eng)
    assert a.memory_per_chip_bytes[0] - b.memory_per_chip_bytes[0] == pytest.approx(SMALL.num_params(), rel=1e-12)
    mx = spec.with_(scaling_recipe="mxfp8")
    assert plan.evaluate(SMALL, tn_only, cl, mx, 4, engine=eng).memory_per_chip_bytes == \
        plan.evaluate(SMALL, chip, cl, mx, 4, engine=eng).memory_per_chip_bytes


def test_the_flag_is_validated_and_read_from_chip_files(tmp_path):
    with pytest.raises(ValueError, match="fp8_any_layout must be True or False"):
        hardware.preset("H100").with_(fp8_any_layout="yes")
    d = hardware.preset("GB200").to_dict()
    assert d["fp8_any_layout"] is True
    assert hardware.Accelerator.from_dict(d) == hardware.preset("GB200")
    path = tmp_path / "chip.json"
    path.write_text(json.dumps({**d, "efficiency": "GB200", "fp8_any_layout": 1}))
    with pytest.raises(ValueError, match="'fp8_any_layout' must be true or false"):
        hardware.Accelerator.from_json(path)
    del d["fp8_any_layout"]                       # a chip file written before the field: TN only
    assert hardware.Accelerator.from_dict(d).fp8_any_layout is False
