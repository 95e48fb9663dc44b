"""FP8 training as it runs on an H200, against the kernel model (cosearch/data/h200_fp8_kernels.csv
and h200_compiled_layers.csv, two runs of scripts/measure_gpu_kernels.py on one H200; conditions
in cosearch/data/h200_kernels.md).

What the rows say: FP8 GEMMs run at the preset's FP8 rate in all three layouts a linear layer
needs, but a Llama 3 8B layer with FP8 linears is only 1.16-1.22x faster than in bf16, because
the per-tensor casts as ``torch.compile`` runs them cost about 3 ms of its 18.  The model prices
that layer within 10-12 % only with the engine's cast kernels (``Engine.fp8_cast_kernel``)."""

import statistics

import numpy as np
import pytest

from cosearch import cost, engine, graph, hardware
from tests.data_tables import package_rows, window_end_s
from tests.test_h200_kernels import LLAMA3_8B, _chip_at, _gemm_error, _rows

H200 = hardware.H200


def _fp8_rows(kind=None, name="h200_fp8_kernels.csv"):
    return package_rows(name, kind)


def _held(kind, name, after_s=1.0):
    """(median seconds, mean SM clock) of a sustained section's windows after ``after_s``."""
    rows = [r for r in _fp8_rows(kind, name) if window_end_s(r) >= after_s]
    assert len(rows) >= 30, (kind, len(rows))
    return statistics.median(float(r["seconds"]) for r in rows), statistics.mean(float(r["sm_clock_mhz"]) for r in rows)


def _layer_s(chip, precision: str) -> float:
    return sum(float(cost.price(graph.build(LLAMA3_8B, tp=1, microbatch=1, phase=ph, part="layer",
                                            flash_attention=True, precision=precision), chip)[0].sum())
               for ph in ("fwd", "bwd"))


def _layer_error(kind, name, precision, cast_kernel="fused") -> float:
    measured, mhz = _held(kind, name)
    chip = _chip_at(mhz)
    chip = chip.with_(efficiency=chip.efficiency.with_cast_kernel(cast_kernel))
    return measured / _layer_s(chip, precision) - 1.0


def _pairs(name="h200_fp8_kernels.csv"):
    """(FP8 row, its bf16 twin) as the script times them, one after the other."""
    g = [r for r in _fp8_rows(name=name) if r["kind"] in ("gemm", "gemm-fp8")]
    pairs = list(zip(g[0::2], g[1::2]))
    for a, b in pairs:
        assert a["kind"] == "gemm-fp8" and b["kind"] == "gemm" and [a[x] for x in "mnk"] == [b[x] for x in "mnk"]
    return pairs


def test_fp8_gemms_in_every_layout_at_their_clock():
    """27 FP8 GEMMs (forward with fast accumulation, data and weight gradient with full
    accumulation, at Llama 3 8B, GPT-3 5B and Nemotron-4 8B shapes) and their bf16 twins: the
    model at each row's clock is within -13 % / +8.5 % (measured -13.0 % to +8.5 %)."""
    pairs = _pairs()
    assert len(pairs) == 27
    assert {r["note"].split()[-1] if "accumulation" not in r["note"] else "forward" for r, _ in pairs} == \
        {"forward", "dgrad", "wgrad"}
    for f8, bf in pairs:
        for r in (f8, bf):
            assert -0.135 <= _gemm_error(r) <= 0.09, (r["kind"], r["note"], _gemm_error(r))


@pytest.mark.parametrize("name", ["h200_fp8_kernels.csv", "h200_fp8_cast_passes.csv"])
def test_same_run_fp8_over_bf16_rate_is_the_presets(name):
    """The FP8 / bf16 rate of the 27 pairs, each measured back to back near the 700 W limit,
    averages the preset's ``fp8_rate`` (1.84, set from other shapes of another run): 1.843, and
    1.861 on the third run's fresh machine (its times within -7 % / +3 % of the first run's)."""
    ratios = [float(a["tflops"]) / float(b["tflops"]) for a, b in _pairs(name)]
    assert len(ratios) == 27 and 1.6 < min(ratios) and max(ratios) < 2.05     # measured 1.62-2.00 (clocks vary)
    assert statistics.mean(ratios) == pytest.approx(H200.efficiency.fp8_rate, abs=0.03)


def test_sustained_fp8_gemm_holds_a_lower_clock_than_bf16():
    """8192^3 FP8 GEMMs back to back hold 1336 MHz (bf16's: 1435 MHz, h200_kernels.csv) and run
    1221 TFLOP/s, 1.85x bf16's sustained rate; the model at that clock is 8-11 % pessimistic."""
    f8 = [r for r in _fp8_rows("sustained-fp8") if window_end_s(r) >= 5.0]
    bf = [r for r in _rows("sustained") if window_end_s(r) >= 5.0]
    f8_mhz, bf_mhz = (statistics.mean(float(r["sm_clock_mhz"]) for r in rows) for rows in (f8, bf))
    assert f8_mhz < bf_mhz - 50
    rate = statistics.median(float(r["tflops"]) for r in f8) / statistics.median(float(r["tflops"]) for r in bf)
    assert rate == pytest.approx(H200.efficiency.fp8_rate, abs=0.05)
    for r in f8:
        assert -0.12 <= _gemm_error(r) <= -0.07


def test_inductor_cast_rates_are_the_tables():
    """``INDUCTOR_AMAX_BPS_PER_SM`` and ``INDUCTOR_CAST_STREAM`` recomputed from the passes run's
    rows (h200_fp8_cast_passes.csv, 8192 x 14336 and 28672): the amax reduction's bf16 bytes
    over its time per SM of the H200's 132, and the cast + transposed copy's 4 logical bytes an
    element over its time as a fraction of 4.8 TB/s."""
    amax = _passes("amax alone")
    cast_t = _passes("cast with a given scale + transposed")
    shapes = ((8192, 14336), (8192, 28672))
    per_sm = [2.0 * m * n / float(amax[m, n]["seconds"]) / 132 for m, n in shapes]
    stream = [4.0 * m * n / float(cast_t[m, n]["seconds"]) / 4.8e12 for m, n in shapes]
    assert statistics.mean(per_sm) == pytest.approx(hardware.INDUCTOR_AMAX_BPS_PER_SM, rel=1e-4)
    assert statistics.mean(stream) == pytest.approx(hardware.INDUCTOR_CAST_STREAM, rel=1e-4)
    assert 0.10 < 132 * statistics.mean(per_sm) / 4.8e12 < 0.12      # not bound by HBM
    # the casts without the transposed copy (run 1) are no faster per logical byte than with
    # it: the amax pass, not the copy, sets the rate
    rows = [r for r in _fp8_rows("fp8-cast") if "transposed" in r["note"] and "compiled" in r["note"]
            and int(r["m"]) == 8192]
    plain = [r for r in _fp8_rows("fp8-cast") if "transposed" not in r["note"] and int(r["m"]) == 8192]
    assert len(rows) == 3 and len(plain) == 3
    for p, t in zip(plain, rows):
        assert float(p["seconds"]) / float(t["seconds"]) > 0.7


def test_cast_op_hand_worked():
    """One 8192 x 4096 FP8 cast on the H200 at the full clock: 2 bytes read and 2 x 1 written
    per element.  Fused: 134.2 MB at 0.90 x 4.8 TB/s = 31.1 us (+ launch).  Inductor's: the
    amax pass reads 67.1 MB at 132 x 4.054 GB/s = 535.2 GB/s (125.4 us), the cast and its
    transposed copy stream 134.2 MB at 0.5617 x 4.8 TB/s (49.8 us): 175.2 us (+ launch), against
    176.0 us measured whole in the first run (h200_fp8_kernels.csv), and within 8 % at the two
    larger training sizes.  On a 2.4 TB/s HBM2e H100 the amax pass, SM-bound, takes as long and
    the cast stream twice as long: 225.0 us."""
    g = graph._Builder(2)
    g.fp8_cast("c", [], 8192 * 4096, 1.0)
    op = g.ops[0]
    assert op.kind == "cast" and op.bytes_read == 2 * 8192 * 4096 and op.bytes_written == 2 * 8192 * 4096
    eff = H200.efficiency.at_full_clock()
    launch = eff.launch_s
    el = 8192 * 4096
    fused = cost.price(np.array([op.as_row()]), H200.with_(efficiency=eff))[0, 0]
    assert fused == pytest.approx(4.0 * el / (eff.memory * 4.8e12) + launch, rel=1e-9)
    ind = eff.with_cast_kernel("inductor")
    slow = cost.price(np.array([op.as_row()]), H200.with_(efficiency=ind))[0, 0]
    assert slow - launch == pytest.approx(2.0 * el / 535.2e9 + 4.0 * el / (0.5617 * 4.8e12), rel=2e-4)
    assert slow == pytest.approx(176.044e-6, rel=0.03)
    for r in _fp8_rows("fp8-cast"):
        if r["note"].startswith("amax + cast + transposed copy") and int(r["m"]) == 8192:
            g = graph._Builder(2)
            g.fp8_cast("c", [], int(r["m"]) * int(r["n"]), 1.0)
            t = cost.price(np.array([g.ops[0].as_row()]), H200.with_(efficiency=ind))[0, 0]
            assert t == pytest.approx(float(r["seconds"]), rel=0.08), r["n"]
    hbm2e = H200.with_(hbm_bandwidth_Bps=2.4e12, efficiency=ind)
    t = cost.price(np.array([op.as_row()]), hbm2e)[0, 0] - launch
    assert t == pytest.approx(2.0 * el / 535.2e9 + 4.0 * el / (0.5617 * 2.4e12), rel=2e-4)
    # a chip whose stream is slower than the reduction reads the input at its stream instead
    slow_mem = H200.with_(hbm_bandwidth_Bps=0.4e12, efficiency=ind)
    t = cost.price(np.array([op.as_row()]), slow_mem)[0, 0] - launch
    assert t == pytest.approx(2.0 * el / (0.90 * 0.4e12) + 4.0 * el / (0.5617 * 0.4e12), rel=2e-4)
    with pytest.raises(ValueError, match="cast kernel"):
        eff.with_cast_kernel("te")
    with pytest.raises(ValueError, match="cast_memory"):
        hardware.KernelEfficiency(memory=0.5, cast_memory=0.6)
    with pytest.raises(ValueError, match="cast_amax_Bps"):
        hardware.KernelEfficiency(cast_amax_Bps=-1.0)


def test_fp8_backward_casts_the_incoming_gradient():
    """The backward casts each FP8 linear's incoming gradient (its output's size), not its input
    again: Llama 3 8B at 8192 tokens has 8192 x (6144 + 4096 + 28672 + 4096) gradient elements
    cast, 8192 x (4096 + 4096 + 4096 + 14336) input elements in the forward."""
    fwd = graph.build(LLAMA3_8B, tp=1, microbatch=1, phase="fwd", part="layer", flash_attention=True, precision="fp8")
    bwd = graph.build(LLAMA3_8B, tp=1, microbatch=1, phase="bwd", part="layer", flash_attention=True, precision="fp8")
    casts = [sum(o.elements for o in g.ops if o.kind == "cast") for g in (fwd, bwd)]
    assert casts == [8192 * (4096 * 3 + 14336), 8192 * (6144 + 4096 + 28672 + 4096)]
    bf = graph.build(LLAMA3_8B, tp=1, microbatch=1, phase="bwd", part="layer", flash_attention=True)
    assert [o.kind for o in bf.ops if o.kind == "cast"] == []


@pytest.mark.parametrize("name,fp8,bf16", [
    ("h200_fp8_kernels.csv", "sustained-layer-fp8-cudnn", "sustained-layer-bf16-cudnn"),
    ("h200_compiled_layers.csv", "sustained-layer-fp8-cudnn", "sustained-layer-bf16-cudnn")])
def test_fp8_layer_with_the_engines_casts(name, fp8, bf16):
    """The Llama 3 8B layer with FP8 linears (casts compiled by Inductor) and its bf16 twin in the
    same run, each at the clock it held: with Inductor's casts the model misses the FP8 layer by
    at most 6 points more than the bf16 one (+9.8 % against +4.7 %; +8.7 % against +4.0 %); with
    single-pass fused casts it would be 26-28 % fast."""
    e_bf = _layer_error(bf16, name, "bf16")
    e_f8 = _layer_error(fp8, name, "fp8", "inductor")
    assert 0.0 <= e_bf <= 0.06
    assert 0.0 <= e_f8 - e_bf <= 0.06, (e_f8, e_bf)
    assert _layer_error(fp8, name, "fp8", "fused") >= 0.25
    # the FP8 layer's speed-up over bf16: measured 1.21-1.22x, the model's (common clock) 1.27x
    measured = _held(bf16, name)[0] / _held(fp8, name)[0]
    chip = _chip_at(1600.0)
    model = _layer_s(chip, "bf16") / _layer_s(chip.with_(efficiency=chip.efficiency.with_cast_kernel("inductor")), "fp8")
    assert 1.15 < measured < 1.25 and model == pytest.approx(measured, rel=0.06)


def test_compiled_layers():
    """Under ``torch.compile`` the bf16 layer runs 5 % faster than eager (norms and SwiGLU fused)
    and the model is within 2 %; the FP8 layer gains nothing (18.06 ms against 18.10) and the
    model with Inductor's casts is 12 % fast."""
    name = "h200_compiled_layers.csv"
    eager, _ = _held("sustained-layer-bf16-cudnn", name)
    compiled, _ = _held("sustained-layer-compiled-bf16-cudnn", name)
    assert 0.9 < compiled / eager < 0.97
    assert abs(_layer_error("sustained-layer-compiled-bf16-cudnn", name, "bf16")) <= 0.03
    e = _layer_error("sustained-layer-compiled-fp8-cudnn", name, "fp8", "inductor")
    assert 0.08 <= e <= 0.14


def test_engines_choose_their_cast_kernels():
    """torchtitan's FSDP engine runs Inductor's casts, Transformer Engine's frameworks fused ones;
    the engine's choice reaches the plan's price."""
    assert engine.FSDP.fp8_cast_kernel == "inductor"
    assert {engine.preset(n).fp8_cast_kernel for n in ("megatron-core", "llm-foundry", "megatron-lm")} == {"fused"}
    with pytest.raises(ValueError, match="fp8_cast_kernel"):
        engine.Engine(fp8_cast_kernel="te")
    from cosearch import cluster
    from cosearch.plan import PlanSpec, evaluate
    spec = PlanSpec(1, 1, 1, 1, flash_attention=True, precision="fp8")
    a = evaluate(LLAMA3_8B, "H100", cluster.Cluster(8), spec, 8, engine="megatron-core")
    b = evaluate(LLAMA3_8B, "H100", cluster.Cluster(8), spec, 8,
                 engine=engine.Engine("mc-inductor", overlap_param_gather=True, fp8_cast_kernel="inductor"))
    assert b.breakdown["forward_s"] > a.breakdown["forward_s"] * 1.03      # one layer and a 128k-vocab head
    assert a.feasible and b.feasible and b.tokens_per_s < a.tokens_per_s


def _passes(note_start):
    return {(int(r["m"]), int(r["n"])): r for r in _fp8_rows(name="h200_fp8_cast_passes.csv")
            if r["kind"] == "fp8-cast" and r["note"].startswith(note_start)}


def test_the_amax_reduction_is_what_makes_compiled_casts_slow():
    """A third run takes the cast apart (h200_fp8_cast_passes.csv, at 8192 x 14336 and 28672):
    a single-pass cast with a given scale (delayed scaling) streams within 5 % of the model's
    memory efficiency (4.15-4.24 TB/s against 0.90 x 4.8), which is what the ``fused`` cast
    kernel assumes; Inductor's whole-tensor amax reduction alone runs at 0.11 of the bandwidth;
    and amax plus the cast with its transposed copy adds up to the current-scaling cast of the
    same run within 5 %."""
    amax, cast, cast_t = _passes("amax alone"), _passes("cast with a given scale (delayed"), \
        _passes("cast with a given scale + transposed")
    current = _passes("amax + cast + transposed copy")
    stream = H200.efficiency.memory * H200.hbm_bandwidth_Bps
    for shape in ((8192, 14336), (8192, 28672)):
        el = shape[0] * shape[1]
        assert 3.0 * el / float(cast[shape]["seconds"]) == pytest.approx(stream, rel=0.05)
        assert 2.0 * el / float(amax[shape]["seconds"]) < 0.15 * H200.hbm_bandwidth_Bps
        parts = float(amax[shape]["seconds"]) + float(cast_t[shape]["seconds"])
        assert parts == pytest.approx(float(current[shape]["seconds"]), rel=0.05)
        # the repeat of run 1's current-scaling casts on this machine agrees with it within 3 %
        first = next(r for r in _fp8_rows("fp8-cast") if (int(r["m"]), int(r["n"])) == shape
                     and r["note"].startswith("amax + cast + transposed copy"))
        assert float(current[shape]["seconds"]) == pytest.approx(float(first["seconds"]), rel=0.03)


# ---------------------------------------------------------------- memory-bound kernels, both passes
#: (forward ops per element, tensors read forward) of each measured kernel, as the graph builds it
_VECTOR_KINDS = {"layer_norm": (graph.VECTOR_OPS_PER_ELEMENT["layernorm"], 1),
                 "rms_norm": (graph.VECTOR_OPS_PER_ELEMENT["rmsnorm"], 1),
                 "gelu": (graph.VECTOR_OPS_PER_ELEMENT["gelu"], 1),
                 "swiglu": (graph.VECTOR_OPS_PER_ELEMENT["swiglu"], 2)}


def _vector_pass_error(r) -> float:
    """Measured over modelled time of a ``vector-pass`` row, minus 1: the op as the graph builds
    it (forward: ``inputs`` bf16 tensors read, one written; backward: the vector-op rule, forward
    bytes read again plus the output gradient, the input gradients written), priced on the H200."""
    kind, rest = r["note"].split(" ", 1)
    per, inputs = _VECTOR_KINDS[kind]
    el = float(int(r["m"]) * int(r["n"]))
    g = graph._Builder(2)
    g.vector("v", [], el, {"layer_norm": "layernorm", "rms_norm": "rmsnorm"}.get(kind, kind), inputs=inputs)
    op = g.ops[0]
    assert op.ops_per_element == per
    if rest.startswith("backward"):
        op = graph._backward([op], 1, 2, ())[0]
    chip = _chip_at(float(r["sm_clock_mhz"]))
    return float(r["seconds"]) / float(cost.price(np.array([op.as_row()]), chip)[0, 0]) - 1.0


def test_norms_and_activations_forward_and_backward_are_known_optimistic():
    """PyTorch's own LayerNorm, RMSNorm, GELU and SwiGLU kernels at training shapes, forward and
    backward apart (h200_vector_passes.csv, eager: the kernels frameworks call): the model prices
    every pass at 0.90 of the HBM bandwidth, but the norms run at 0.46-0.63 of it in either pass
    (the model 27-87 % fast), GELU at 0.75-0.85 (5-17 %), eager SwiGLU, two kernels, at 0.49-0.52
    (70-81 %).  Compiled, SwiGLU's forward is one kernel at the model's rate (within 2 %); the
    compiled norms' backward rows time the compiled graph's dispatch, not its kernels.  Stated
    here so that a model change that prices them shows."""
    rows = [r for r in _fp8_rows("vector-pass", "h200_vector_passes.csv")]
    assert len(rows) == 32
    bands = {"layer_norm": (0.25, 0.90), "rms_norm": (0.25, 0.90), "gelu": (0.03, 0.20), "swiglu": (0.65, 0.85)}
    for r in rows:
        if r["note"].endswith("(eager)"):
            lo, hi = bands[r["note"].split()[0]]
            assert lo <= _vector_pass_error(r) <= hi, (r["note"], r["n"], _vector_pass_error(r))
        elif r["note"] == "swiglu forward (compiled)":
            assert abs(_vector_pass_error(r)) <= 0.03, (r["n"], _vector_pass_error(r))


def test_sequence_parallel_gathers_the_fp8_copy():
    """Under sequence parallelism an FP8 layer gathers the FP8 copy of its normed input
    (Transformer Engine's LayerNormLinear quantizes ln_out before gather_along_first_dim;
    torchao's PrepareFloat8ModuleInput casts before the Shard -> Replicate all-gather): for Llama 3
    8B at 8192 tokens and tp 4 each forward all-gather moves 8192 x 4096 x 1 byte (not 2), the
    cast runs on the rank's 2048 x 4096 shard and the QKV and FC1 GEMMs cast nothing; the
    gradients go back by reduce-scatter in bf16, 8192 x 4096 x 2 bytes."""
    T, h = 8192, 4096
    fwd = graph.build(LLAMA3_8B, tp=4, microbatch=1, phase="fwd", part="layer", sequence_parallel=True,
                      flash_attention=True, precision="fp8")
    ops = {o.name: o for o in fwd.ops}
    for ag in ("allgather_attn", "allgather_mlp"):
        assert ops[ag].kind == "allgather" and ops[ag].bytes_read == T * h * 1
        assert ops[f"{ag}.cast"].kind == "cast" and ops[f"{ag}.cast"].elements == T * h / 4
    assert "qkv.cast" not in ops and "fc1.cast" not in ops
    assert ops["attn_out.cast"].elements == T * (4096 // 4) and ops["fc2.cast"].elements == T * 14336 // 4
    assert [b for k, b, _ in fwd.collectives] == [T * h, T * h * 2, T * h, T * h * 2]
    bwd = graph.build(LLAMA3_8B, tp=4, microbatch=1, phase="bwd", part="layer", sequence_parallel=True,
                      flash_attention=True, precision="fp8")
    grads = {o.name: o for o in bwd.ops if o.kind in ("allgather", "reducescatter")}
    assert grads["allgather_attn.grad"].kind == "reducescatter" and grads["allgather_attn.grad"].bytes_read == T * h * 2
    assert grads["reducescatter_mlp.grad"].bytes_read == T * h * 2
    # bf16: the gathers move 2 bytes an element and the GEMMs cast nothing
    bf = graph.build(LLAMA3_8B, tp=4, microbatch=1, phase="fwd", part="layer", sequence_parallel=True,
                     flash_attention=True)
    assert [b for k, b, _ in bf.collectives] == [T * h * 2] * 4
    assert not any(o.kind == "cast" for o in bf.ops)


def test_moe_router_input_is_gathered_in_bf16():
    """An MoE layer's router and dispatch take bf16 tokens: only the attention input's gather
    moves the FP8 copy (Mixtral 8x7B, tp 2, one sequence of 4096 tokens).  Megatron-Core routes
    each rank's own 2048 tokens and gathers the 4096 x 2 routed copies over tp in bf16 after the
    dispatch; MaxText (``"gather-tokens"``) gathers the 4096 tokens in bf16 before routing them."""
    from cosearch import models
    m = models.preset("mixtral-8x7b")
    T, h = m.seq_len, m.hidden
    fwd = graph.build(m, tp=2, microbatch=1, phase="fwd", part="layer", sequence_parallel=True,
                      flash_attention=True, precision="fp8")
    ops = {o.name: o for o in fwd.ops}
    assert ops["allgather_attn"].bytes_read == T * h and ops["moe_allgather"].bytes_read == T * 2 * h * 2
    assert ops["router"].m == T // 2 and "allgather_mlp" not in ops and "allgather_mlp.cast" not in ops
    xla = {o.name: o for o in graph.build(m, tp=2, microbatch=1, phase="fwd", part="layer", sequence_parallel=True,
                                          flash_attention=True, precision="fp8", moe_dispatcher="gather-tokens").ops}
    assert xla["allgather_mlp"].bytes_read == T * h * 2 and "allgather_mlp.cast" not in xla


@pytest.mark.parametrize("name", ["h200_fp8_kernels.csv", "h200_compiled_layers.csv"])
def test_bf16_layer_of_other_runs_at_the_presets_clocks(name):
    """The bf16 Llama 3 8B layer with cuDNN attention as two other runs timed it (no constant was
    set from them), priced at the H200 preset's own per-kernel clocks (GEMMs 1435 MHz, cuDNN
    attention 1839 MHz): within 3 % (+2.2 % and +1.0 %); the FP8 twin, with Inductor's casts, is
    priced 5-7 % fast, the casts' known optimism (test_fp8_layer_with_the_engines_casts)."""
    from cosearch import hardware
    h200 = hardware.H200
    measured, _ = _held("sustained-layer-bf16-cudnn", name)
    assert abs(measured / _layer_s(h200, "bf16") - 1.0) <= 0.03
    measured, _ = _held("sustained-layer-fp8-cudnn", name)
    chip = h200.with_(efficiency=h200.efficiency.with_cast_kernel("inductor"))
    assert 0.0 <= measured / _layer_s(chip, "fp8") - 1.0 <= 0.08
