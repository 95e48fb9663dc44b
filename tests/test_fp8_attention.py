"""FP8 / MXFP8 fused attention (Megatron-Core's ``--fp8-dot-product-attention``): the chips'
measured speeds over bf16, recomputed from cuDNN's published benchmark rows; the roofline's
pricing of a low-precision attention op, hand-worked; the graph's casts around the kernel,
counted by hand; the plan, search, reader and CLI switches and their refusals."""

import csv
import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest

from cosearch import cost, graph, hardware, models, plan
from cosearch.graph import LayerGraph, Op
from cosearch.hardware import efficiency as E
from cosearch.runs import read_megatron_args

DATA = Path(__file__).parent.parent / "cosearch" / "data" / "cudnn_sdpa_training.csv"
LENGTHS = (2048, 4096, 8192, 16384, 32768)


def _rows():
    with open(DATA, newline="") as f:
        return list(csv.DictReader(f))


def test_shipped_rows_are_the_published_benchmark():
    """The data file holds cuDNN's causal training rows as published: five lengths of every
    (GPU, shape, format, pass), GB200 / GB300 at cuDNN 9.22 and H200 at 9.19, each citing its file."""
    rows = _rows()
    assert len(rows) == 200
    keys = {(r["gpu"], r["model"], int(r["seq"]), r["format"], r["pass"]) for r in rows}
    assert len(keys) == len(rows)
    for gpu, fmts, shapes in (("GB200", ("bf16", "fp8", "mxfp8"), ("llama3.1", "dsv3", "kimiK26")),
                              ("GB300", ("bf16", "fp8", "mxfp8"), ("llama3.1", "dsv3", "kimiK26")),
                              ("H200", ("bf16", "fp8"), ("llama3.1",))):
        for m in shapes:
            for f in fmts:
                for p in ("fwd", "bwd"):
                    assert all((gpu, m, s, f, p) in keys for s in LENGTHS), (gpu, m, f, p)
    assert all(r["source"].startswith("NVIDIA/cudnn-frontend@") for r in rows)
    # one published figure read back: DeepSeek-V3's shape, GB200, FP8 forward at 32k (1743 -> 2447 TFLOP/s)
    r = {(x["gpu"], x["model"], int(x["seq"]), x["format"], x["pass"]): float(x["tflops"]) for x in rows}
    assert (r["GB200", "dsv3", 32768, "bf16", "fwd"], r["GB200", "dsv3", 32768, "fp8", "fwd"]) == (1743.0, 2447.0)


def test_speeds_are_the_geometric_means_of_the_rows():
    """Every FP8_ATTENTION_SPEEDS figure recomputed from the rows: per shape, the geometric mean
    over the lengths of low-precision over bf16 TFLOP/s; multi-head the geometric mean of the two
    MLA shapes, grouped-query Llama 3.1's; a family without rows has no figure (0)."""
    r = {(x["gpu"], x["model"], int(x["seq"]), x["format"], x["pass"]): float(x["tflops"]) for x in _rows()}

    def gm(xs):
        return math.exp(sum(math.log(x) for x in xs) / len(xs))

    for family, gpu in (("Hopper", "H200"), ("GB200", "GB200"), ("GB300", "GB300")):
        want = E.FP8_ATTENTION_SPEEDS[family]
        for fmt in ("fp8", "mxfp8"):
            for shapes, gqa in ((("dsv3", "kimiK26"), ""), (("llama3.1",), "gqa_")):
                for p in ("fwd", "bwd"):
                    have = [gm([r[gpu, m, s, fmt, p] / r[gpu, m, s, "bf16", p] for s in LENGTHS])
                            for m in shapes if (gpu, m, 2048, fmt, p) in r]
                    name = f"{fmt}_attention_{gqa}{p}"
                    assert want.get(name, 0.0) == pytest.approx(gm(have) if have else 0.0, abs=6e-4), (family, name)
    # the presets carry them: H100 and H200 Hopper's, B200 GB200's, B300 GB300's
    for chip, family in (("H100", "Hopper"), ("H200", "Hopper"), ("B200", "GB200"), ("GB200", "GB200"),
                         ("B300", "GB300"), ("GB300", "GB300")):
        eff = hardware.preset(chip).efficiency
        for name, x in E.FP8_ATTENTION_SPEEDS[family].items():
            assert getattr(eff, name) == x, (chip, name)
    assert hardware.preset("A100").efficiency.fp8_attention_fwd == 0.0


def test_the_family_and_its_fallback():
    gb = hardware.preset("GB300").efficiency
    e = gb.with_fp8_attention("mxfp8", grouped=True)
    assert (e.attention_speed_fwd, e.attention_speed_bwd) == (gb.mxfp8_attention_gqa_fwd, gb.mxfp8_attention_gqa_bwd)
    e = gb.with_fp8_attention("fp8", grouped=False)
    assert (e.attention_speed_fwd, e.attention_speed_bwd) == (gb.fp8_attention_fwd, gb.fp8_attention_bwd)
    assert gb.with_fp8_attention(None, grouped=False).attention_speed_fwd == 1.0
    # Hopper measured grouped-query only: multi-head takes it
    h = hardware.preset("H100").efficiency.with_fp8_attention("fp8", grouped=False)
    assert (h.attention_speed_fwd, h.attention_speed_bwd) == (1.480, 0.808)
    with pytest.raises(ValueError, match="no measured mxfp8 attention"):
        hardware.preset("H100").efficiency.with_fp8_attention("mxfp8", grouped=True)
    with pytest.raises(ValueError, match="unknown attention format"):
        gb.with_fp8_attention("fp4", grouped=True)
    with pytest.raises(ValueError, match="fp8_attention_fwd must be in"):
        hardware.KernelEfficiency(fp8_attention_fwd=-1.0)
    with pytest.raises(ValueError, match="attention_speed_bwd must be in"):
        hardware.KernelEfficiency(attention_speed_bwd=0.0)


def _attention_op(dt: float, work: float, d: int = 128, s: int = 4096) -> Op:
    return Op("attn_core", "attention", (), m=s, n=s, k=int(work * d), batch=64, bytes_read=3 * s * d * 64 * dt,
              bytes_written=s * d * 64 * dt, dtype_bytes=dt, head_dim=d)


@pytest.mark.parametrize("work, field", [(1.0, "fp8_attention_gqa_fwd"), (graph.ATTENTION_BWD_FACTOR,
                                                                       "fp8_attention_gqa_bwd")])
def test_a_low_precision_attention_op_runs_its_pass_speed_faster(work, field):
    """Hand-worked: a compute-bound fused attention op on FP8 operands takes the bf16 op's
    compute time over its pass's speed (the launch unchanged); a bf16 op under the same
    efficiency is untouched; the kernel and its NumPy statement agree."""
    chip = hardware.preset("GB200")
    e8 = chip.efficiency.with_fp8_attention("fp8", grouped=True)
    fast = chip.with_(efficiency=e8)
    launch = chip.efficiency.launch_s
    bf16 = float(np.ravel(cost.price_on(LayerGraph("x", [_attention_op(2.0, work)]), chip))[0])
    fp8 = float(np.ravel(cost.price_on(LayerGraph("x", [_attention_op(1.0, work)]), fast))[0])
    assert fp8 - launch == pytest.approx((bf16 - launch) / getattr(chip.efficiency, field), rel=1e-12)
    same = float(np.ravel(cost.price_on(LayerGraph("x", [_attention_op(2.0, work)]), fast))[0])
    assert same == bf16
    for op, c in ((_attention_op(1.0, work), fast), (_attention_op(2.0, work), fast)):
        rows = cost.op_array(LayerGraph("x", [op]))
        want = float(np.ravel(cost.price_on(LayerGraph("x", [op]), c))[0])
        assert float(cost.price_numpy(rows, hardware.design_array([c]), 1.0, c.efficiency.as_array())[0, 0]) \
            == pytest.approx(want, rel=1e-12)


def test_the_graph_casts_around_the_kernel():
    """Llama 3 8B at tp 1, one sequence of 8192: Q, K, V (32 + 2 x 8 heads of 128) cast to FP8
    before the kernel, O (32 heads) back to bf16 after; the backward quantizes dO (O's size) and
    dequantizes dQ, dK, dV; the kernels on 1-byte operands (MXFP8: 1 + 1/32)."""
    m = models.preset("llama3-8b")
    T = 8192
    f, b = graph.build_pair(m, 1, 1, flash_attention=True, precision="fp8", attention_format="fp8")
    ops = {op.name: op for op in f.ops + b.ops}
    qkv, out = T * (32 + 2 * 8) * 128, T * 32 * 128
    assert (ops["attn_core.quant"].elements, ops["attn_core.quant"].bytes_read,
            ops["attn_core.quant"].bytes_written) == (qkv, 2 * qkv, qkv)
    assert (ops["attn_core.dequant"].elements, ops["attn_core.dequant"].bytes_read,
            ops["attn_core.dequant"].bytes_written) == (out, out, 2 * out)
    assert (ops["attn_core.dequant.grad"].bytes_read, ops["attn_core.dequant.grad"].bytes_written) == (2 * out, out)
    assert (ops["attn_core.quant.grad"].bytes_read, ops["attn_core.quant.grad"].bytes_written) == (qkv, 2 * qkv)
    assert ops["attn_core"].dtype_bytes == 1.0 and ops["attn_core.grad"].dtype_bytes == 1.0
    # the kernel reads the quantized Q, K, V and feeds the dequantization
    names = [op.name for op in f.ops]
    core = names.index("attn_core")
    assert f.ops[core].deps == (names.index("attn_core.quant"),)
    assert f.ops[names.index("attn_core.dequant")].deps == (core,)
    mx, _ = graph.build_pair(m, 1, 1, flash_attention=True, precision="fp8", attention_format="mxfp8")
    assert {op.name: op for op in mx.ops}["attn_core"].dtype_bytes == 1.0 + 1.0 / 32.0
    bf, _ = graph.build_pair(m, 1, 1, flash_attention=True, precision="fp8")
    assert not [op for op in bf.ops if op.name.endswith(graph.ATTENTION_CASTS)]
    # Megatron's selective recompute of the core attention reruns its casts with it
    share = {op.name: graph.recompute_share(op, m, "attention-core") for op in f.ops}
    assert share["attn_core.quant"] == share["attn_core.dequant"] == share["attn_core"] == 1.0


@pytest.mark.parametrize("name, kwargs, why", [
    ("llama3-8b", dict(flash_attention=False), "needs flash_attention"),
    ("deepseek-v4-flash", dict(flash_attention=True), "compressed attention"),
    ("llama3-8b", dict(flash_attention=True, attention_format="fp4"), "attention_format"),
])
def test_graph_refusals(name, kwargs, why):
    kwargs = {"attention_format": "fp8", **kwargs}
    with pytest.raises(ValueError, match=why):
        graph.build(models.preset(name), 1, 1, precision="fp8", **kwargs)


def test_chunked_layers_are_refused_only_where_the_chunks_bind():
    """Llama 4's 8192-token chunks: at its preset's 8192 tokens every layer is full causal attention
    (FP8 priced); at 16384 the chunked layers bind, and no FP8 kernel is measured for them."""
    scout = models.preset("llama4-scout")
    assert scout.attention_chunk == scout.seq_len == 8192
    graph.build(scout, 1, 1, precision="fp8", flash_attention=True, attention_format="fp8")
    with pytest.raises(ValueError, match="chunked attention layers"):
        graph.build(dataclasses.replace(scout, seq_len=16384), 1, 1, precision="fp8", flash_attention=True,
                    attention_format="fp8")


@pytest.mark.parametrize("kwargs, why", [
    (dict(precision="bf16"), "precision is 'bf16'"),
    (dict(precision="fp4"), "precision is 'fp4'"),
    (dict(precision="fp8", scaling_recipe="blockwise"), "'blockwise'"),
    (dict(precision="fp8", flash_attention=False), "needs flash_attention"),
])
def test_plan_refusals(kwargs, why):
    kwargs = {"flash_attention": True, **kwargs}
    with pytest.raises(ValueError, match=why):
        plan.PlanSpec(dp=8, tp=1, pp=1, microbatch=1, fp8_attention=True, **kwargs)


def _spec(**kw):
    return plan.PlanSpec(dp=8, tp=1, pp=1, microbatch=1, zero=1, flash_attention=True, precision="fp8", **kw)


def test_plans_price_the_attention_at_the_chips_speeds():
    """On GB300 (every FP8 attention speed above 1) the plan's forward and backward both shorten;
    on the H100 (grouped-query FP8 backward 0.808x bf16) the backward lengthens; only the layer
    changes (its attention and casts), so the difference is the priced layer's times the layers.
    A chip without FP8 attention figures is refused by name."""
    m = models.preset("qwen3-30b-a3b")
    for chip, faster_bwd in (("GB300", True), ("H100", False)):
        base = plan.evaluate(m, chip, 8, _spec(expert_parallel=8), 64)
        fp8 = plan.evaluate(m, chip, 8, _spec(expert_parallel=8, fp8_attention=True), 64)
        assert fp8.breakdown["forward_s"] < base.breakdown["forward_s"]
        assert (fp8.breakdown["backward_s"] < base.breakdown["backward_s"]) == faster_bwd
        assert fp8.spec.describe().endswith("fp8-attention")
    mx = plan.evaluate(m, "GB300", 8, _spec(expert_parallel=8, scaling_recipe="mxfp8", fp8_attention=True), 64)
    assert mx.spec.attention_format == "mxfp8" and "mxfp8-attention" in mx.spec.describe()
    with pytest.raises(ValueError, match="chip TPU7x: .*no measured fp8 attention"):
        plan.evaluate(models.preset("llama3-8b"), "TPU7x", 8, _spec(fp8_attention=True), 64)
    assert plan.PlanSpec.from_dict(_spec(fp8_attention=True).to_dict()).fp8_attention


def test_search_finds_fp8_attention_plans_evaluate_agrees_with():
    from cosearch.placement import search_plans
    m = models.preset("qwen3-30b-a3b")
    res = search_plans(m, "GB200", 8, 64, flash_attention=True, precision=("bf16", "fp8"), expert_parallel=(8,),
                       fp8_attention=True, top_k=4)
    assert res.feasible
    for p in res.plans:
        assert p.spec.fp8_attention == (p.spec.precision == "fp8")
        again = plan.evaluate(m, "GB200", 8, p.spec, 64)
        assert again.step_time_s == pytest.approx(p.step_time_s, rel=1e-9)
    with pytest.raises(ValueError, match="no FP8 plans"):
        search_plans(m, "GB200", 8, 64, flash_attention=True, expert_parallel=(8,), fp8_attention=True)
    long_scout = dataclasses.replace(models.preset("llama4-scout"), seq_len=16384)
    with pytest.raises(ValueError, match="chunked attention layers"):        # refused before any pricing
        search_plans(long_scout, "GB200", 64, 64, flash_attention=True, precision=("fp8",),
                     expert_parallel=(16,), fp8_attention=True)


def test_megatron_flag_is_read_as_the_plan_switch():
    line = ("--num-layers 4 --hidden-size 1024 --num-attention-heads 8 --seq-length 2048 --vocab-size 32000 "
            "--micro-batch-size 1 --global-batch-size 8 --attention-backend fused --fp8-format e4m3 "
            "--fp8-dot-product-attention")
    rc = read_megatron_args(line)
    assert rc.plan["fp8_attention"] and not [a for a in rc.assumed if "dot-product" in a]
    mx = read_megatron_args(line + " --fp8-recipe mxfp8")
    d = mx.resolve(8)
    assert d.spec.attention_format == "mxfp8"
    with pytest.raises(ValueError, match="only"):
        read_megatron_args(line + " --fp8-recipe blockwise")
    with pytest.raises(ValueError, match="needs --attention-backend"):
        read_megatron_args(line.replace("--attention-backend fused", "--attention-backend unfused"))
    assert not read_megatron_args(line.replace(" --fp8-dot-product-attention", "")).plan["fp8_attention"]


def test_measured_runs_csv_column(tmp_path):
    """``cosearch runs check``'s CSV: ``fp8_attention`` 1 runs the plan's attention in FP8 (MXFP8
    under the mxfp8 recipe); a value other than 0/1 is refused by name."""
    from cosearch.runs import read_measured
    head = "model,cluster,chips,tp,pp,mb,batch,ep,precision,scaling_recipe,fp8_attention,measured_tok_s_per_chip\n"
    f = tmp_path / "runs.csv"
    f.write_text(head + "qwen3-30b-a3b,gb200-nvl72,8,1,1,4,512,8,fp8,mxfp8,1,40000\n"
                        "qwen3-30b-a3b,gb200-nvl72,8,1,1,4,512,8,fp8,mxfp8,0,40000\n"
                        "qwen3-30b-a3b,gb200-nvl72,8,1,1,4,512,8,fp8,mxfp8,yes,40000\n")
    (_, _, on), (_, _, off), (_, _, bad) = read_measured(f)
    assert on.plan["fp8_attention"] and on.resolve(8).spec.attention_format == "mxfp8"
    assert not off.plan.get("fp8_attention", False)
    assert "fp8_attention 'yes' is not 0/1" in str(bad)


def test_cli_switch(capsys):
    from cosearch.cli import main
    args = ["plan", "--model", "llama3-8b", "--chip", "GB200", "--cluster", "gb200-nvl72", "--chips", "8", "--batch", "64", "--dp", "8",
            "--tp", "1", "--pp", "1", "--mb", "1", "--zero", "1", "--flash", "--precision", "fp8", "--json"]
    assert main(args) == 0
    base = capsys.readouterr().out
    assert main(args + ["--fp8-attention"]) == 0
    fp8 = capsys.readouterr().out
    import json
    t0, t1 = (json.loads(x)["plans"][0]["step_time_s"] for x in (base, fp8))
    assert t1 < t0
    assert main([a for a in args if a != "--flash"] + ["--fp8-attention"]) != 0
    assert "needs flash_attention" in capsys.readouterr().err


def test_context_parallel_rings_the_quantized_keys_and_values():
    """Under context parallelism FP8 attention rings its FP8 K and V (Transformer Engine's
    ``AttnFuncWithCPAndKVP2P``): bytes per forward step 2 x tokens x kv heads x head dim x 1
    (MXFP8 1 + 1/32), against the model's 2 bytes; on links so slow the ring is all exposed, the
    forward's exposed time halves and the backward's (K/V again, then the bf16 gradients) is 3/4."""
    from cosearch import cluster
    from cosearch._kernels import formulas as F
    m = models.preset("llama3-8b")
    want = 2 * 1 * (8192 // 2) * 8 * 128
    assert plan.cp_ring_bytes(m, 1, 1, 2, 1.0) == want and plan.cp_ring_bytes(m, 1, 1, 2) == 2 * want
    assert plan.cp_ring_bytes(m, 1, 1, 2, graph.ATTENTION_FORMAT_BYTES["mxfp8"]) == want * (1 + 1 / 32)
    slow = cluster.Cluster(8, 8, 1e6, 1e6)

    def ring(fp8: bool):
        u = plan.unit_costs(m, hardware.preset("GB200"), slow, (1,), (1,), (False,), True, context_parallel=2,
                            precision="fp8", fp8_attention=fp8)[0, 0, 0, 0]
        return u[F.U_LCPF], u[F.U_LCPB]

    (f0, b0), (f1, b1) = ring(False), ring(True)
    assert f1 / f0 == pytest.approx(0.5, rel=1e-4) and b1 / b0 == pytest.approx(0.75, rel=1e-4)


def test_a_bf16_row_keeps_bf16_attention_whatever_its_config_sets():
    """fp8_dot_product_attention acts inside an FP8 recipe only: a BF16 row citing a config that
    sets it is priced with bf16 attention, and says so; the same row in MXFP8 runs it in MXFP8 (over
    GPT-OSS's sliding windows: its backward priced causal, said)."""
    from cosearch.runs import rows
    from tests.test_runs_rows import GPT_OSS_ROW
    path = "scripts/performance/configs/gpt_oss/gpt_oss_workload_base_configs.py"
    cite = [f"etp/sp/recompute/cuda-graph/dispatcher from NVIDIA-NeMo/Megatron-Bridge:{path}@8f341b04f "
            "(GPT_OSS_120B_PRETRAIN_CONFIG_GB200_FP8_MX_V2)"]
    d = rows.describe_row(dict(GPT_OSS_ROW, precision="BF16", assumed=cite))
    assert not d.spec.fp8_attention and any("acts only under an FP8 recipe" in a for a in d.assumed)
    d = rows.describe_row(dict(GPT_OSS_ROW, assumed=cite))       # its windows' FP8 backward priced causal
    assert d.spec.fp8_attention and any("full causal attention on the sliding-window layers" in a for a in d.assumed)


def test_calibrate_refuses_fp8_attention_rows():
    """``cost.calibrate`` fits the bf16 attention efficiency: an FP8 attention row would fold FP8's
    speed into it, so it is refused by its row number."""
    cols = {"kind": ["gemm", "attention"], "m": [4096, 4096], "n": [4096, 4096], "k": [4096, 128],
            "batch": [1, 64], "dtype_bytes": [2, 1], "head_dim": [0, 128], "seconds": [2e-4, 4e-4]}
    with pytest.raises(ValueError, match=r"attention row\(s\) \[2\] have dtype_bytes under 2"):
        cost.calibrate(hardware.preset("H100"), cols)
    cols["dtype_bytes"] = [2, 2]
    assert cost.calibrate(hardware.preset("H100"), cols).chip.efficiency.attention > 0


@pytest.mark.parametrize("fields, on, said", [
    (["mixed_precision=bf16_with_mxfp8_mixed", "mixed_precision.fp8_dot_product_attention=true"], True, False),
    # the mixed-precision config writes its own (false) over the model's
    (["mixed_precision=bf16_with_mxfp8_mixed", "model.fp8_dot_product_attention=true"], False, True),
    (["mixed_precision=bf16_with_mxfp8_mixed"], False, False),
    # no mixed-precision config: the model's own switch stands
    (["model.fp8=hybrid", "model.fp8_recipe=tensorwise", "model.fp8_dot_product_attention=true"], True, False),
])
def test_bridge_reads_fp8_attention_as_its_mixed_precision_config_sets_it(fields, on, said):
    from cosearch.runs import read_megatron_bridge
    base = ["train.global_batch_size=512", "train.micro_batch_size=4", "model.expert_model_parallel_size=8",
            "model.attention_backend=fused"]
    rc = read_megatron_bridge(None, base + fields, model=models.preset("qwen3-30b-a3b"))
    assert rc.plan["fp8_attention"] is on
    assert any("is overwritten by the mixed-precision config" in a for a in rc.assumed) is said


def test_priced_combinations_carry_fp8_attention_to_the_fp8_ones():
    """The options priced once per combination (the co-search's spaces, the ILP plan's bound)
    carry FP8 attention on their FP8 combinations only, so a bound is priced as its plans are and a
    bf16 combination stays a valid search."""
    from cosearch.placement import priced_combinations, search_plans
    opts = {"precision": ("bf16", "fp8"), "flash_attention": True, "fp8_attention": True}
    combos = priced_combinations(opts)
    assert {c["precision"]: c["fp8_attention"] for c in combos} == {"bf16": False, "fp8": True}
    assert not any(c["fp8_attention"] for c in priced_combinations({"precision": ("fp8",)}))
    m = models.preset("llama3-8b")
    for c in combos:                       # each combination is a search of its own
        res = search_plans(m, "GB200", 8, 64, top_k=1, **{**opts, **c})
        assert res.feasible and res.plans[0].spec.fp8_attention == (c["precision"] == "fp8")
        from cosearch import cluster
        rack = cluster.gb200_nvl72(8)
        u = plan.unit_costs(m, hardware.preset("GB200"), rack, (1,), (1,), (False,), True, **c)
        plain = plan.unit_costs(m, hardware.preset("GB200"), rack, (1,), (1,), (False,), True,
                                precision=c["precision"])
        assert np.array_equal(u, plain) == (not c["fp8_attention"])     # priced with it where it is on


@pytest.mark.parametrize("recipe, qkv_bytes, o_bytes", [("delayed", 1.0, 1.0), ("tensorwise", 1.0, 2.0),
                                                        ("mxfp8", 2.0 * (1.0 + 1.0 / 32.0), 2.0)])
def test_activation_memory_keeps_what_transformer_engine_saves(recipe, qkv_bytes, o_bytes):
    """Llama 3 8B at tp 1, pp 1, one 8,192-token sequence a microbatch: each layer's attention keeps
    Q (32 heads x 128), K and V (8 heads x 128 each) per token, 6,144 elements, and O, 4,096.  bf16
    attention keeps them at 2 bytes; FP8 attention (TransformerEngine FusedAttnFunc.forward) the
    quantized Q, K, V at 1 byte, O at 1 under delayed scaling and 2 under current scaling; MXFP8 a
    row-wise and a column-wise copy of Q, K, V at 1 + 1/32 bytes each, O at 2.  The chip's memory
    falls by 32 layers x 8,192 tokens x those differences (MXFP8: rises)."""
    from cosearch import memory
    m = models.preset("llama3-8b")
    assert (m.heads * m.head_dim, m.kv_heads * m.head_dim, m.seq_len, m.num_layers) == (4096, 1024, 8192, 32)
    spec = plan.PlanSpec(dp=8, tp=1, pp=1, microbatch=1, precision="fp8", flash_attention=True, scaling_recipe=recipe)
    base = plan.evaluate(m, "GB200", 8, spec, 64).memory_per_chip_bytes[0]
    fp8 = plan.evaluate(m, "GB200", 8, dataclasses.replace(spec, fp8_attention=True), 64).memory_per_chip_bytes[0]
    saved = 32 * 8192 * (6144 * (2.0 - qkv_bytes) + 4096 * (2.0 - o_bytes))
    assert base - fp8 == pytest.approx(saved, rel=1e-12)
    fmt = plan.fp8_attention_format(recipe)
    assert memory.fp8_attention_saved_bytes(fmt, recipe) == (qkv_bytes, None if o_bytes == 2.0 else o_bytes)


def test_fp8_attention_saved_bytes_refusals():
    from cosearch import memory
    with pytest.raises(ValueError, match="attention_format 'fp4'"):
        memory.fp8_attention_saved_bytes("fp4", "delayed")
    with pytest.raises(ValueError, match="'delayed' or 'tensorwise'.*'blockwise'"):
        memory.fp8_attention_saved_bytes("fp8", "blockwise")
    with pytest.raises(ValueError, match="needs flash_attention"):
        memory.layer_activation_bytes(models.preset("llama3-8b"), 1, 1, flash_attention=False, precision="fp8",
                                      attention_saved=(1.0, 1.0))


WINDOW_DATA = Path(__file__).parent.parent / "cosearch" / "data" / "cudnn_sdpa_window.csv"


def _window_rows():
    with open(WINDOW_DATA, newline="") as f:
        return list(csv.DictReader(f))


def test_shipped_window_rows_are_the_published_benchmark():
    """cuDNN's sliding-window training rows as published: GPT-OSS's window (128 keys, head dim 64,
    2 x 128 heads) at five lengths, every format and pass, from three runs (GB200 and GB300 on cuDNN
    9.22, GB300 on 9.26, GB200 on 9.27), each row citing its file; two figures read back."""
    rows = _window_rows()
    assert len(rows) == 120
    keys = {(r["gpu"], r["cudnn"], int(r["seq"]), r["format"], r["pass"]) for r in rows}
    assert len(keys) == len(rows)
    for gpu, ver in (("GB200", "92200"), ("GB300", "92200"), ("GB300", "92600"), ("GB200", "92700")):
        for f in ("bf16", "fp8", "mxfp8"):
            for p in ("fwd", "bwd"):
                assert all((gpu, ver, s, f, p) in keys for s in LENGTHS), (gpu, ver, f, p)
    assert all(r["source"].startswith("NVIDIA/cudnn-frontend@") and r["window"] == "128" for r in rows)
    t = {(r["gpu"], r["cudnn"], int(r["seq"]), r["format"], r["pass"]): float(r["time_ms"]) for r in rows}
    assert t["GB200", "92200", 32768, "fp8", "bwd"] == 90.348 and t["GB200", "92700", 32768, "fp8", "bwd"] == 91.732


def test_the_published_fp8_window_backward_grows_as_causal_attention():
    """From the rows alone: doubling the sequence doubles a window's (query, key) pairs and
    quadruples causal attention's.  Every bf16 backward grows at most 2.2x per doubling (the
    window's work plus fixed costs), every FP8 and MXFP8 backward at least 3x, reaching 3.8x
    and more from 16k to 32k — the kernel meets every causal key, in every cuDNN release measured."""
    t = {(r["gpu"], r["cudnn"], int(r["seq"]), r["format"], r["pass"]): float(r["time_ms"]) for r in _window_rows()}
    for gpu, ver in (("GB200", "92200"), ("GB300", "92200"), ("GB300", "92600"), ("GB200", "92700")):
        for f in ("bf16", "fp8", "mxfp8"):
            growth = [t[gpu, ver, 2 * s, f, "bwd"] / t[gpu, ver, s, f, "bwd"] for s in LENGTHS[:-1]]
            if f == "bf16":
                assert max(growth) < 2.2, (gpu, ver, growth)
            else:
                assert min(growth) > 3.0 and growth[-1] > 3.8, (gpu, ver, f, growth)


def _window_config(seq: int):
    """The benchmark's shape as a model: 128 heads of 64 (hidden 8192), a 128-token window on
    every layer."""
    return models.ModelConfig("swa-bench", num_layers=2, hidden=8192, heads=128, ffn_hidden=8192, vocab=32000,
                              seq_len=seq, sliding_window=128, sliding_layers=2)


def test_the_graph_prices_the_fp8_window_backward_as_causal():
    """Hand-worked on GPT-OSS 120B (4096 tokens, 18 of 36 layers in a 128-token window): the forward
    meets the mean window share of the keys, (18 x 1 + 18 x (128 x 4096 - 128 x 127 / 2) /
    (4096 x 4097 / 2)) / 36 of 4096 in FP8 and bf16 alike; the FP8 backward meets all 4096 (its
    bf16 backward the forward's share); a model without windows keeps the forward's keys."""
    m = models.preset("gpt-oss-120b")
    s, w = 4096, 128
    share = (18 + 18 * (w * s - w * (w - 1) / 2) / (s * (s + 1) / 2)) / 36
    want_fwd = round(share * s)
    for fmt in ("fp8", "mxfp8", None):
        f, b = graph.build_pair(m, 1, 1, flash_attention=True, precision="fp8", attention_format=fmt)
        fo, bo = {o.name: o for o in f.ops}["attn_core"], {o.name: o for o in b.ops}["attn_core.grad"]
        assert fo.n == want_fwd
        assert bo.n == (s if fmt else want_fwd), fmt
        assert (bo.m, bo.k) == (s, int(graph.ATTENTION_BWD_FACTOR * 64))
    assert graph.fp8_window_backward_keys(m) == s
    llama = models.preset("llama3-8b")
    assert graph.fp8_window_backward_keys(llama) == 0
    f, b = graph.build_pair(llama, 1, 1, flash_attention=True, precision="fp8", attention_format="fp8")
    assert {o.name: o for o in b.ops}["attn_core.grad"].n == {o.name: o for o in f.ops}["attn_core"].n


@pytest.mark.parametrize("gpu, ver", [("GB200", "92200"), ("GB300", "92200"), ("GB300", "92600"),
                                      ("GB200", "92700")])
def test_the_fp8_window_backward_against_the_published_rows(gpu, ver):
    """The graph's FP8 and MXFP8 window backward (built for the benchmark's shape: 2 sequences,
    128 heads of 64) priced on the chip at its measured multi-head FP8 speeds, against cuDNN's
    time at each length: cuDNN takes 1.25-1.47x the price at every length, the same to 6 % from 2k to 32k
    (the kernel's growth is the model's; the offset is the FP8 backward speed, measured on
    DeepSeek-V3's and Kimi's head dims, 192 and 128, run here at 64).  Priced at the window's keys,
    as the forward is, it would run 3-36x faster than measured."""
    t = {(r["gpu"], r["cudnn"], int(r["seq"]), r["format"], r["pass"]): float(r["time_ms"]) for r in _window_rows()}
    chip = hardware.preset(gpu)
    for fmt in ("fp8", "mxfp8"):
        fast = chip.with_(efficiency=chip.efficiency.with_fp8_attention(fmt, grouped=False))
        ratios, window_ratios = [], []
        for s in LENGTHS:
            m = _window_config(s)
            _, b = graph.build_pair(m, 1, 2, flash_attention=True, precision="fp8", attention_format=fmt)
            op = dataclasses.replace({o.name: o for o in b.ops}["attn_core.grad"], deps=())
            assert op.batch == 2 * 128 and op.n == s
            priced_ms = 1e3 * float(np.ravel(cost.price_on(LayerGraph("x", [op]), fast))[0])
            ratios.append(t[gpu, ver, s, fmt, "bwd"] / priced_ms)
            as_window = dataclasses.replace(op, n=max(1, round(m.attention_flops_share * s)))
            window_ratios.append(t[gpu, ver, s, fmt, "bwd"]
                                 / (1e3 * float(np.ravel(cost.price_on(LayerGraph("x", [as_window]), fast))[0])))
        assert 1.2 < min(ratios) and max(ratios) < 1.5, (fmt, ratios)
        assert max(ratios) / min(ratios) < 1.08, (fmt, ratios)
        assert min(window_ratios) > 2.5 and max(window_ratios) > 30, (fmt, window_ratios)
