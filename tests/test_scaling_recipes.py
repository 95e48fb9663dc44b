"""Low-precision scaling recipes: which casts read their input once more for its amax, as
Transformer Engine's quantizers run them (``cosearch.graph.RECIPE_CAST_PASSES``), checked against
hand-counted tensor sizes, hand-priced step times and the readers' config lines."""
import json

import pytest

import cosearch
from cosearch import graph, hardware, models, plan
from cosearch.runs import rows
from cosearch.runs.megatron import parse_megatron_args
from cosearch.runs.nemo import read_megatron_bridge

# a small GQA SwiGLU layer: h 1024, 8 heads of 128 (2 K/V heads), ffn 2816, 2048 tokens
SMALL = models.ModelConfig("small-gqa", num_layers=2, hidden=1024, heads=8, ffn_hidden=2816, vocab=32000,
                           seq_len=2048, kv_heads=2, activation="swiglu", norm="rmsnorm", position="rotary",
                           bias=False, tie_embeddings=False, dropout=False)


def _amax(g: graph.LayerGraph) -> dict[str, float]:
    return {o.name: o.elements for o in g.ops if o.name.endswith("amax")}


def test_current_scaling_amax_passes_hand_counted():
    """tp 2 with sequence parallelism, 2048 tokens: a rank holds 4 query heads, 1 K/V head and
    1408 of the MLP's columns.  Current scaling reads for its amax, forward: the attention output
    (2048 x 4 x 128) and the activation (2048 x 1408); the norms feeding QKV and fc1 (TE's
    LayerNormLinear) write theirs.  Backward, every incoming gradient: fc2's (2048 x 1024), fc1's
    (2048 x 2 x 1408), attn_out's (2048 x 1024), QKV's (2048 x (4 + 2) x 128)."""
    f, b = graph.build_pair(SMALL, 2, 1, sequence_parallel=True, flash_attention=True, precision="fp8",
                            cast_passes="amax-unfused")
    assert _amax(f) == {"attn_out.amax": 1_048_576, "fc2.amax": 2_883_584}
    assert _amax(b) == {"fc2.grad_amax": 2_097_152, "fc1.grad_amax": 5_767_168, "attn_out.grad_amax": 2_097_152,
                        "qkv.grad_amax": 1_572_864}
    for o in f.ops + b.ops:
        if o.name.endswith("amax"):
            assert (o.kind, o.bytes_read, o.bytes_written) == ("vector", 2 * o.elements, 0.0)   # one bf16 read
    # NVFP4 (its Hadamard transform's amax in the quantizer): the norms' casts too, 1024 x 1024 each
    f4, b4 = graph.build_pair(SMALL, 2, 1, sequence_parallel=True, flash_attention=True, precision="fp4",
                              cast_passes="amax-all")
    assert _amax(f4) == {**_amax(f), "allgather_attn.amax": 1_048_576, "allgather_mlp.amax": 1_048_576}
    assert _amax(b4) == _amax(b)
    # each amax feeds its cast; an amax has no gradient of its own
    names = [o.name for o in f.ops]
    cast = f.ops[names.index("fc2.cast")]
    assert cast.deps == (names.index("fc2.amax"),)
    assert not any(o.name.endswith("amax.grad") for o in b.ops)


def test_block_scaled_recipes_cast_in_one_pass():
    """MXFP8 and the blockwise recipe: every cast reads the bf16 tensor once and writes both FP8
    copies (TE's block quantizers compute their scales inside the cast; their norm outputs are
    cast after the norm), as cosearch prices a cast by default."""
    base = graph.build_pair(SMALL, 2, 1, sequence_parallel=True, flash_attention=True, precision="fp8")
    for recipe in ("blockwise", "mxfp8"):
        assert plan.cast_passes("megatron-core", "fp8", recipe) == "single"
    single = graph.build_pair(SMALL, 2, 1, sequence_parallel=True, flash_attention=True, precision="fp8",
                              cast_passes="single")
    assert single == base and not _amax(single[0]) and not _amax(single[1])
    cast = next(o for o in single[0].ops if o.name == "fc2.cast")
    assert (cast.bytes_read, cast.bytes_written) == (2 * 2048 * 1408, 2 * 2048 * 1408)   # bf16 in, 2 x FP8 out
    # bf16 has no casts, whatever is asked
    assert not _amax(graph.build(SMALL, 2, 1, "bwd", precision="bf16", cast_passes="amax-all"))


def test_delayed_scaling_norms_write_their_fp8_output():
    """Delayed scaling (Megatron's default recipe): TE's norm kernel inside LayerNormLinear writes
    the FP8 row-wise copy itself (FULLY_FUSED), so norm1 and norm2 write 1 byte an element, not 2,
    and their casts only transpose (1 byte in, 1 out); tp 2 with sequence parallelism, a rank's
    1024 x 1024 share of each norm.  The attention output's and the activation's casts and every
    gradient's stay single passes; no amax is read."""
    f, b = graph.build_pair(SMALL, 2, 1, sequence_parallel=True, flash_attention=True, precision="fp8",
                            cast_passes="norm-fused")
    base, base_b = graph.build_pair(SMALL, 2, 1, sequence_parallel=True, flash_attention=True, precision="fp8")
    by, was = {o.name: o for o in f.ops}, {o.name: o for o in base.ops}
    share = 1024 * 1024
    for norm, cast in (("norm1", "allgather_attn.cast"), ("norm2", "allgather_mlp.cast")):
        assert by[norm].bytes_written == share and was[norm].bytes_written == 2 * share
        assert (by[cast].bytes_read, by[cast].bytes_written) == (share, share)
        assert by[norm].bytes_read == was[norm].bytes_read
    changed = {n for n in by if by[n] != was[n]}
    assert changed == {"norm1", "norm2", "allgather_attn.cast", "allgather_mlp.cast"}
    assert b == base_b and not _amax(f)
    # without sequence parallelism the GEMMs' own casts are the fused ones
    f1 = {o.name: o for o in graph.build(SMALL, 1, 1, precision="fp8", flash_attention=True,
                                          cast_passes="norm-fused").ops}
    assert f1["qkv.cast"].bytes_read == f1["fc1.cast"].bytes_read == 2048 * 1024
    assert f1["attn_out.cast"].bytes_read == 2 * 2048 * 1024
    # PyTorch's eager norms write bf16: no fusion with eager elementwise ops
    eager = graph.build(SMALL, 1, 1, precision="fp8", flash_attention=True, cast_passes="norm-fused",
                        elementwise="eager")
    assert eager == graph.build(SMALL, 1, 1, precision="fp8", flash_attention=True, elementwise="eager")


def test_moe_and_mla_casts_take_the_pass_where_their_norm_is_separate():
    """An MoE layer's experts and shared expert follow a separate pre-MLP TENorm, MLA's down
    projections a separate input TENorm: their casts all read for the amax; MLA's up projections
    are LayerNormLinear (their latent norm writes it)."""
    m = models.preset("deepseek-v3")
    f, _ = graph.build_pair(m, 1, 1, flash_attention=True, precision="fp8", expert_parallel=8, cast_passes="amax-unfused")
    got = set(_amax(f))
    assert {"expert_fc1.amax", "expert_fc2.amax", "shared_fc1.amax", "shared_fc2.amax", "q_down.amax",
            "kv_down.amax", "attn_out.amax"} <= got
    assert not {"q_up.amax", "kv_up.amax"} & got
    # derived from the ep-2 graphs (only the experts rebuilt) it is the same graph
    f2, b2 = graph.build_pair(m, 1, 1, flash_attention=True, precision="fp8", expert_parallel=2, cast_passes="amax-unfused")
    f8, b8 = graph.build_pair(m, 1, 1, flash_attention=True, precision="fp8", expert_parallel=8, cast_passes="amax-unfused")
    assert graph.with_expert_parallel(f2, b2, m, 1, 1, 8, 1, "fp8", "amax-unfused") == (f8, b8)


def test_step_times_are_the_hand_priced_cast_passes():
    """One H100, tp 1, no recompute, 4 microbatches of one sequence, 2 layers.  Against 128-blockwise
    FP8's single-pass casts (the same FP8 GEMMs on Hopper): current scaling adds, per layer and microbatch, its
    amax ops, each one bf16 read at the chip's stream rate plus a kernel launch; delayed scaling
    saves, on each of the two norms fused with their casts, 3 bytes an element (the norm writes 1
    byte, not 2; the cast reads 1, not 2, and writes 1 copy, not 2) over 2048 x 1024 elements."""
    chip = hardware.preset("H100")
    elements = [2048 * 1024, 2048 * 2816,                          # forward: attention output, activation
                2048 * 1024, 2048 * 2 * 2816, 2048 * 1024, 2048 * 12 * 128]   # gradients: fc2, fc1, attn_out, qkv
    stream = chip.hbm_bandwidth_Bps * chip.efficiency.memory
    amax_s = sum(2.0 * e / stream + chip.efficiency.launch_s for e in elements)
    fused_s = 2 * 3.0 * 2048 * 1024 / stream
    cl = cosearch.Cluster(1)
    step = {}
    for recipe in ("blockwise", "tensorwise", "delayed", None):
        spec = plan.PlanSpec(dp=1, tp=1, pp=1, microbatch=1, precision="fp8", flash_attention=True,
                             scaling_recipe=recipe)
        p = plan.evaluate(SMALL, chip, cl, spec, 4, engine="megatron-core")
        assert p.feasible
        step[recipe] = p.step_time_s
    assert step["tensorwise"] - step["blockwise"] == pytest.approx(4 * 2 * amax_s, rel=1e-9)
    assert step["blockwise"] - step["delayed"] == pytest.approx(4 * 2 * fused_s, rel=1e-9)
    assert step[None] == step["delayed"]            # None: the engine's default, delayed under TE


def test_a_recipe_the_precision_or_engine_lacks_is_refused_by_name():
    with pytest.raises(ValueError, match="bf16 has no scaling recipe"):
        plan.PlanSpec(dp=1, tp=1, pp=1, microbatch=1, scaling_recipe="delayed")
    with pytest.raises(ValueError, match="PlanSpec.scaling_recipe='nvfp4' with precision 'fp8'"):
        plan.PlanSpec(dp=1, tp=1, pp=1, microbatch=1, precision="fp8", scaling_recipe="nvfp4")
    with pytest.raises(ValueError, match="'tensorwise' with precision 'fp4'"):
        plan.PlanSpec(dp=1, tp=1, pp=1, microbatch=1, precision="fp4", scaling_recipe="tensorwise")
    with pytest.raises(ValueError, match="cast_passes"):
        graph.build(SMALL, precision="fp8", cast_passes="some")
    # torchao under torch.compile runs per-tensor current scaling only, its amax priced by the engine
    assert plan.cast_passes("fsdp", "fp8", None) == plan.cast_passes("fsdp", "fp8", "tensorwise") == "single"
    with pytest.raises(ValueError, match="torchao's Float8 casts"):
        plan.cast_passes("fsdp", "fp8", "delayed")
    spec = plan.PlanSpec(dp=1, tp=1, pp=1, microbatch=1, precision="fp8", scaling_recipe="mxfp8")
    with pytest.raises(ValueError, match="torchao's Float8 casts"):
        plan.evaluate(SMALL, "B200", cosearch.Cluster(1), spec, 4, engine="fsdp")


def test_the_spec_round_trips_and_says_its_recipe():
    spec = plan.PlanSpec(dp=2, tp=1, pp=1, microbatch=1, precision="fp8", scaling_recipe="tensorwise")
    assert plan.PlanSpec.from_dict(spec.to_dict()) == spec
    assert "fp8:tensorwise" in spec.describe()
    d = spec.to_dict()
    d.pop("scaling_recipe")                      # a file written before the field reads as the default
    assert plan.PlanSpec.from_dict(d).scaling_recipe is None


def test_readers_take_the_recipe_from_the_config():
    gpt = models.preset("gpt3-1.3b")
    line = "--fp8-format hybrid --global-batch-size 8"
    assert parse_megatron_args(line, gpt, 8).spec.scaling_recipe == "delayed"          # Megatron's default
    assert parse_megatron_args(line + " --fp8-recipe tensorwise", gpt, 8).spec.scaling_recipe == "tensorwise"
    assert parse_megatron_args("--fp4-format e2m1 --global-batch-size 8", gpt, 8).spec.scaling_recipe == "nvfp4"
    assert parse_megatron_args("--global-batch-size 8", gpt, 8).spec.scaling_recipe is None
    base = models.preset("llama2-7b")
    for name, recipe in (("bf16_with_fp8_current_scaling_mixed", "tensorwise"), ("bf16_with_mxfp8_mixed", "mxfp8"),
                         ("bf16_with_fp8_subchannel_scaling_mixed", "blockwise"), ("bf16_with_nvfp4_mixed", "nvfp4")):
        d = read_megatron_bridge(None, ["train.global_batch_size=16", f"mixed_precision={name}"],
                                 model=base).resolve(8)
        assert d.spec.scaling_recipe == recipe, name


@pytest.mark.parametrize("text,precision,recipe", [
    ("FP8 (per-tensor current scaling)", "fp8", "tensorwise"), ("FP8 per-tensor current scaling (FP8-CS)", "fp8",
                                                                 "tensorwise"),
    ("FP8 (TE hybrid, delayed scaling)", "fp8", "delayed"), ("MXFP8 (1x32 blocks)", "fp8", "mxfp8"),
    ("FP8 finer-grained scaling (32x32 on Blackwell, 128x128/1x128 blockwise on H100) per page footnote", "fp8",
     "blockwise"),
    ("NVFP4", "fp4", "nvfp4"), ("FP8 (scaling not stated on the 25.09 page)", "fp8", None), ("BF16", "bf16", None)])
def test_validation_rows_state_their_recipe(text, precision, recipe):
    row = dict(id="x", model="m", arch="llama2-style: SwiGLU, RoPE, RMSNorm, GQA, untied output", layers=4,
               hidden=1024, heads=8, kv_heads=2, ffn=2816, vocab=32000, seq=2048, head_dim=None, ep=1, cp=1,
               vp=None, zero=1, zero_group=None, sp=True, offload=None, recompute="none", precision=text,
               accel="B200", n_gpus=8, dp=4, tp=2, pp=1, mbs=1, gbs=8, ga=2, tok_s_gpu=1000.0,
               software="NeMo 26.04 container (Megatron-Bridge + Megatron-Core)")
    d = rows.describe_row(row)
    assert (d.spec.precision, d.spec.scaling_recipe) == (precision, recipe)
    if "not stated" in text:
        assert any("not stated" in a for a in d.assumed)


def test_cli_prices_the_recipe_it_is_given(capsys):
    from cosearch.cli import main
    args = ["plan", "--model", "llama3-8b", "--chip", "H100", "--cluster", "dgx-h100", "--nodes", "1", "--batch", "64",
            "--dp", "4", "--tp", "2", "--pp", "1", "--mb", "1", "--sp", "--zero", "1", "--flash", "--recompute", "none",
            "--precision", "fp8", "--json"]
    steps = {}
    for recipe in (None, "tensorwise"):
        assert main(args + (["--scaling-recipe", recipe] if recipe else [])) == 0
        out = capsys.readouterr().out
        steps[recipe] = json.loads(out)["plans"][0]["step_time_s"]
    assert steps["tensorwise"] > steps[None]                 # the amax passes cost time
    assert main(args[:-3] + ["--scaling-recipe", "tensorwise"]) == 2
    assert "bf16 has no scaling recipe" in capsys.readouterr().err
    line = "--fp8-format hybrid --fp8-recipe mxfp8 --tensor-model-parallel-size 2 --global-batch-size 64"
    assert main(["plan", "--model", "llama3-8b", "--chip", "H100", "--cluster", "dgx-h100", "--nodes", "1",
                 "--from-megatron-args", line, "--scaling-recipe", "tensorwise"]) == 2
    assert "contradicts the Megatron line (mxfp8" in capsys.readouterr().err


def test_a_measured_runs_csv_states_its_recipe(tmp_path):
    """``cosearch runs check``'s CSV takes a ``scaling_recipe`` column: the same run checked as FP8
    current scaling is predicted slower (its amax passes), exactly as evaluate() prices the spec;
    a recipe its precision lacks is refused with its reason."""
    from cosearch import cluster
    from cosearch.runs.check import check_runs
    p = tmp_path / "measured.csv"
    p.write_text("id,model,cluster,chips,tp,pp,mb,batch,precision,scaling_recipe,sp,zero,measured_tok_s_per_chip\n"
                 "cs,llama3-8b,dgx-h100,8,2,1,1,32,fp8,tensorwise,1,1,10000\n"
                 "ds,llama3-8b,dgx-h100,8,2,1,1,32,fp8,,1,1,10000\n"
                 "bad,llama3-8b,dgx-h100,8,2,1,1,32,bf16,tensorwise,1,1,10000\n")
    res = check_runs(p)
    got = {r.id: r.predicted_tok_s_per_chip for r in res.runs}
    spec = plan.PlanSpec(4, 2, 1, 1, sequence_parallel=True, zero=1, flash_attention=True, precision="fp8",
                         scaling_recipe="tensorwise")
    want = plan.evaluate(models.preset("llama3-8b"), "H100", cluster.preset("dgx-h100", 1), spec, 32,
                         engine="megatron-core").tokens_per_s / 8
    assert got["cs"] == pytest.approx(want, rel=1e-12) and got["cs"] < got["ds"]
    assert res.refused[0][0] == "bad" and "bf16 has no scaling recipe" in res.refused[0][1]


def test_sequence_parallel_shards_all_reduce_their_amax_over_tp():
    """Under sequence parallelism TE all-reduces a shard's amax over the tensor-parallel group
    before casting it (a column-parallel linear's input, a row-parallel linear's output gradient):
    per layer two 4-byte all-reduces forward (QKV's and fc1's inputs) and two backward (the
    attention output's and fc2's gradients), 8 bytes under NVFP4 (its row- and column-wise
    amaxes); none without sequence parallelism or under a recipe without a current amax.  On one
    flat 100 GB/s domain with 10 us links, each is 4 / 1e11 + 2 x 10 us at tp 2 (one ring's two
    steps), all of it in the layer's tensor-parallel seconds."""
    def reduces(g):
        return {o.name: o.bytes_read for o in g.ops if o.name.endswith("amax_allreduce")}
    f, b = graph.build_pair(SMALL, 2, 1, sequence_parallel=True, flash_attention=True, precision="fp8",
                            cast_passes="amax-unfused")
    assert reduces(f) == {"allgather_attn.amax_allreduce": 4.0, "allgather_mlp.amax_allreduce": 4.0}
    assert reduces(b) == {"fc2.grad_amax_allreduce": 4.0, "attn_out.grad_amax_allreduce": 4.0}
    f4, b4 = graph.build_pair(SMALL, 2, 1, sequence_parallel=True, flash_attention=True, precision="fp4",
                              cast_passes="amax-all")
    assert set(reduces(f4).values()) == set(reduces(b4).values()) == {8.0}
    for passes, sp in (("amax-unfused", False), ("norm-fused", True), ("single", True)):
        g1, g2 = graph.build_pair(SMALL, 2, 1, sequence_parallel=sp, flash_attention=True, precision="fp8",
                                  cast_passes=passes)
        assert not reduces(g1) and not reduces(g2)
    from cosearch._kernels import formulas as F
    cl = cosearch.Cluster(8, 8, 1e11, 1e10, link_latency_s=1e-5, intra_efficiency=1.0, inter_efficiency=1.0)
    u = {r: plan.unit_costs(SMALL, hardware.preset("H100"), cl, (2,), (1,), (True,), True, engine="megatron-core",
                            precision="fp8", scaling_recipe=r)[0, 0, 0, 0] for r in ("tensorwise", "mxfp8")}
    one = 4.0 / 1e11 + 2 * 1e-5
    assert u["tensorwise"][F.U_LTPF] - u["mxfp8"][F.U_LTPF] == pytest.approx(2 * one, rel=1e-9)
    assert u["tensorwise"][F.U_LTPB] - u["mxfp8"][F.U_LTPB] == pytest.approx(2 * one, rel=1e-9)


def test_block_scaled_fp8_gemms_run_at_the_measured_mxfp8_rate():
    """Transformer Engine's kernel-only B300 figures (gemm_profiling.rst): a layer's GEMMs take
    7.161 ms in MXFP8 and 6.812 ms in per-tensor FP8.  A compute-bound FP8 GEMM priced on a B200
    takes that ratio longer under MXFP8, and under 128-blockwise FP8 (run through MXFP8 GEMMs on
    Blackwell), not on an H100; per-tensor recipes are unchanged."""
    from cosearch.cost import price_on
    g = graph._Builder(2)
    g.gemm("big", [], 16384, 16384, 16384, operand_bytes=1.0)
    ops = graph.LayerGraph("one", tuple(g.ops))
    for name, block_recipes in (("B200", ("mxfp8", "blockwise")), ("H100", ("mxfp8",))):
        chip = hardware.preset(name)
        launch = chip.efficiency.launch_s              # a kernel's fixed launch time, not the rate's
        base = price_on(ops, chip)[0] - launch
        for recipe in ("mxfp8", "blockwise", "tensorwise", "delayed"):
            t = price_on(ops, chip.with_(efficiency=chip.efficiency.with_scaling_recipe(recipe)))[0] - launch
            want = 7.161 / 6.812 if recipe in block_recipes else 1.0
            assert t / base == pytest.approx(want, rel=1e-9), (name, recipe)
    # MXFP8 needs block-scaled tensor cores: refused on Hopper, by name
    spec = plan.PlanSpec(dp=1, tp=1, pp=1, microbatch=1, precision="fp8", flash_attention=True, scaling_recipe="mxfp8")
    with pytest.raises(ValueError, match="block-scaled tensor cores"):
        plan.evaluate(SMALL, "H100", cosearch.Cluster(1), spec, 4, engine="megatron-core")
    assert plan.evaluate(SMALL, "B200", cosearch.Cluster(1), spec, 4, engine="megatron-core").feasible


def test_low_precision_rate_alternatives_start_at_the_presets_rates():
    """The sensitivity report's first entry is each chip's own rate (the chosen one); the other is
    Transformer Engine's B300 table, hand-divided: 13.102 / 6.812 and 13.102 / 3.764 (x 10/15 for
    the B200-class chips, whose dense FP4 is 10 of the B300's 15 PFLOP/s)."""
    alts = hardware.LOW_PRECISION_RATE_ALTERNATIVES
    assert alts["fp8"][0][1] == hardware.preset("GB200").efficiency.fp8_rate == hardware.preset("GB300").efficiency.fp8_rate
    assert alts["fp4"][0][1] == hardware.preset("B200").efficiency.fp4_rate
    assert alts["fp4-ultra"][0][1] == hardware.preset("GB300").efficiency.fp4_rate == \
        hardware.preset("B300").efficiency.fp4_rate
    assert alts["fp8"][1][1] == pytest.approx(1.9234, abs=1e-4)
    assert alts["fp4-ultra"][1][1] == pytest.approx(3.4809, abs=1e-4)
    assert alts["fp4"][1][1] == pytest.approx(3.4809 / 1.5, abs=1e-4)
    assert hardware.MXFP8_GEMM_SPEED == pytest.approx(6.812 / 7.161)
