"""The GPU kernel model against cosearch's own H200 measurements (cosearch/data/h200_kernels.csv,
made by scripts/measure_gpu_kernels.py; the conditions are in cosearch/data/h200_kernels.md).

Every row carries the SM clock it ran at, so each is compared with the model on an H200 at that
clock (the preset's per-clock efficiencies, ``sustained_clock`` 1): what is checked is the
kernel model, not the clock assumption; the clock assumption is checked against the sustained
runs apart."""

import importlib.resources
import math
import statistics
from dataclasses import replace

import numpy as np
import pytest

from cosearch import cost, graph, hardware
from cosearch._kernels.formulas import attention_length_efficiency
from cosearch.models import ModelConfig
from tests.data_tables import package_rows, window_end_s

H200 = hardware.H200
DATASHEET_MHZ = 1830.0          # the clock of the 989 TFLOP/s peak
HOST_BOUND_S = 20e-6            # below this a Python launch loop measures the launch rate


def _rows(kind=None):
    return package_rows("h200_kernels.csv", kind)


def _chip_at(mhz: float, attention_kernel: str = "best", chip=H200):
    """``chip`` (default the H200 preset) with its per-clock efficiencies at ``mhz``."""
    eff = chip.efficiency.at_full_clock().with_attention_kernel(attention_kernel)
    return chip.with_(clock_hz=chip.clock_hz * mhz / DATASHEET_MHZ, efficiency=eff)


def _price(ops, chip) -> float:
    return float(cost.price(np.array([o.as_row() for o in ops]), chip)[0].sum())


def _ints(r):
    return (int(r[f]) for f in ("m", "n", "k", "batch", "dtype_bytes"))


def _gemm_error(r, chip=H200) -> float:
    """Model speed over measured speed, minus 1 (positive: the model is optimistic)."""
    m, n, k, b, dt = _ints(r)
    op = graph.Op("g", "gemm", m=m, n=n, k=k, batch=b, bytes_read=(m * k + k * n) * b * dt,
                  bytes_written=m * n * b * 2, dtype_bytes=dt)
    return float(r["seconds"]) / _price([op], _chip_at(float(r["sm_clock_mhz"]), chip=chip)) - 1.0


def _gemm_group(r) -> str:
    m, n, k, b, _ = _ints(r)
    if float(r["seconds"]) < HOST_BOUND_S:
        return "host-bound"
    if k % 8:
        return "unaligned"          # K not a multiple of 8: cuBLAS leaves its fast kernels
    if k < 128:
        return "tiny-k"
    if m < 1024:
        return "small-m"            # cuBLAS picks narrow tiles / split-K; the model pads M to 128
    return "full"


#: (lowest, highest) model error per group, bf16 and FP8, with why
GEMM_BOUNDS = {
    "full": (-0.12, 0.10),          # measured -11% to +5%, partial last waves included (stream-K)
    "small-m": (-0.70, 0.0),        # the model pads M to the 128-row tile: pessimistic
    "tiny-k": (0.0, 0.30),          # a 64-deep K: the prologue model undercharges
    "unaligned": (1.0, 6.0),        # unaligned K runs a slow kernel the model does not know
}


@pytest.mark.parametrize("r", [r for r in _rows() if r["kind"] in ("gemm", "gemm-fp8", "bmm")],
                         ids=lambda r: f"{r['kind']}-{r['m']}x{r['n']}x{r['k']}x{r['batch']}")
def test_gemm_rows_at_their_clock(r):
    group = _gemm_group(r)
    if group == "host-bound":
        pytest.skip("under 20 us: the Python launch loop, not the kernel, is measured")
    lo, hi = GEMM_BOUNDS[group]
    if r["kind"] == "bmm" and group == "full":
        lo = -0.20      # K = 128: the 128-element prologue is overcharged (rows at -10% to -18%)
    err = _gemm_error(r)
    assert lo <= err <= hi, f"{group}: model {err:+.1%} ({r['note']})"


def test_stream_k_prices_partial_last_waves():
    """Shapes whose 128x256 tiles leave a partial last wave (136 of 264 slots, 288 of 396, 320
    of 396, 536 of 660) run at the full-wave rate per clock on the H200 within a few percent;
    whole-tile waves (``stream_k_fixup`` 0) would price them 17-48% slow."""
    notes = ("136 tiles of 128x256", "536 tiles", "llama3-70b tp8 qkv", "gpt3-175b tp8 qkv")
    rows = [r for r in _rows("gemm") if r["note"] in notes]
    assert len(rows) == 4
    classic = H200.with_(efficiency=replace(H200.efficiency, stream_k_fixup=0.0))
    for r in rows:
        assert _gemm_error(r, classic) < -0.15, r["note"]
        assert abs(_gemm_error(r)) <= 0.10, r["note"]


def test_every_gemm_group_is_populated_and_full_rows_are_the_training_shapes():
    groups = {}
    for r in _rows("gemm"):
        groups.setdefault(_gemm_group(r), []).append(r["note"])
    assert set(GEMM_BOUNDS) <= set(groups)
    full = groups["full"]
    assert sum("llama3" in n or "gpt3" in n for n in full) >= 10, full


def test_fp8_rate_is_the_measured_ratio_at_the_power_limit():
    """FP8 / bf16 rate at the same four training shapes, both near the 700 W limit."""
    bf = {(r["m"], r["n"], r["k"]): float(r["tflops"]) for r in _rows("gemm")}
    shapes = [("8192", "8192", "8192"), ("16384", "16384", "16384"), ("8192", "28672", "4096"),
              ("8192", "7168", "8192")]
    f8 = {(r["m"], r["n"], r["k"]): float(r["tflops"]) for r in _rows("gemm-fp8")}
    ratios = [f8[s] / bf[s] for s in shapes]
    assert all(1.75 < x < 1.9 for x in ratios), ratios
    assert statistics.mean(ratios) == pytest.approx(H200.efficiency.fp8_rate, abs=0.01)


def _attention_rows(kind, head_dim, note="forward+backward"):
    return [r for r in _rows(kind) if r["note"] == note and int(r["k"]) == head_dim]


def _attention_error(r, kernel) -> float:
    s, _, d, heads, dt = _ints(r)
    g = graph._Builder(dt)
    if r["note"] in ("forward", "forward+backward"):
        g.attention("fwd", [], s, s, d, heads, 1.0, 3.0 * s, 1.0 * s)
    if r["note"] in ("backward", "forward+backward"):
        g.attention("bwd", [], s, s, d, heads, 1.0, 5.0 * s, 3.0 * s, work=2.5)
    return float(r["seconds"]) / _price(g.ops, _chip_at(float(r["sm_clock_mhz"]), kernel)) - 1.0


KERNELS = {"attention-cudnn": "best", "attention-fa2": "fa2"}


@pytest.mark.parametrize("kind", sorted(KERNELS))
@pytest.mark.parametrize("note", ["forward", "backward", "forward+backward"])
@pytest.mark.parametrize("head_dim", [128, 64])
def test_attention_by_pass_length_and_head_dim_at_their_clock(kind, note, head_dim):
    """Forward, backward and both, head dim 128 and 64, 1k-16k tokens: every row within 12%
    (one long-sequence rate per kernel, one length overhead per pass, one head-dim overhead
    per kernel, fitted to the rates; the priced op adds the 4 us launch and the systolic fill,
    which shows at 1k: the model is 8-11% slow there and within 8% from 2k up)."""
    rows = _attention_rows(kind, head_dim, note)
    assert [int(r["m"]) for r in rows] == [1024, 2048, 4096, 8192, 16384]
    errs = [_attention_error(r, KERNELS[kind]) for r in rows]
    assert max(abs(e) for e in errs) <= 0.12, [f"{e:+.1%}" for e in errs]
    assert max(abs(e) for e in errs[1:]) <= 0.08, [f"{e:+.1%}" for e in errs]


def _per_clock(r, over):
    """A row's rate over the peak at its clock and its length factor (per-clock efficiency)."""
    return float(r["tflops"]) / (989.0 * float(r["sm_clock_mhz"]) / DATASHEET_MHZ) \
        / attention_length_efficiency(float(r["m"]), over)


@pytest.mark.parametrize("kind,field", [("attention-cudnn", "attention"), ("attention-fa2", "attention_fa2")])
def test_attention_constants_recomputed_from_the_table(kind, field):
    """The preset's per-clock efficiency is the geometric mean over the forward-only and
    backward-only head-dim-128 rows of each row's per-clock rate: recomputed here."""
    per = [_per_clock(r, hardware.ATTENTION_OVERHEAD_FWD) for r in _attention_rows(kind, 128, "forward")]
    per += [_per_clock(r, hardware.ATTENTION_OVERHEAD_BWD) for r in _attention_rows(kind, 128, "backward")]
    assert len(per) == 10
    assert math.exp(statistics.mean(math.log(x) for x in per)) == pytest.approx(getattr(H200.efficiency, field),
                                                                                 abs=0.001)


def test_length_overheads_are_the_least_squares_pair():
    """(3.5, 7.75) blocks minimise the squared log error of both kernels' forward-only and
    backward-only rows over 1k-16k (each kernel at its own best per-clock rate), on a
    0.25-block grid."""
    passes = {kind: (_attention_rows(kind, 128, "forward"), _attention_rows(kind, 128, "backward")) for kind in KERNELS}

    def sse(cf, cb):
        total = 0.0
        for fwd, bwd in passes.values():
            per = [math.log(_per_clock(r, cf)) for r in fwd] + [math.log(_per_clock(r, cb)) for r in bwd]
            mu = sum(per) / len(per)
            total += sum((x - mu) ** 2 for x in per)
        return total
    grid = [0.25 * i for i in range(0, 57)]
    best = min(((cf, cb) for cf in grid[:25] for cb in grid), key=lambda p: sse(*p))
    assert best == (hardware.ATTENTION_OVERHEAD_FWD, hardware.ATTENTION_OVERHEAD_BWD)


@pytest.mark.parametrize("kind,overhead", [("attention-cudnn", hardware.ATTENTION_HEAD_OVERHEAD),
                                           ("attention-fa2", hardware.ATTENTION_HEAD_OVERHEAD_FA2)])
def test_head_dim_overhead_recomputed_from_the_table(kind, overhead):
    """Head dim 64 over head dim 128, per FLOP at equal length and clock (geometric mean over
    1k-16k, fwd+bwd) = (1 + h / 128) / (1 + h / 64), solved for h."""
    r64 = {r["m"]: float(r["tflops"]) / float(r["sm_clock_mhz"]) for r in _attention_rows(kind, 64)}
    r128 = {r["m"]: float(r["tflops"]) / float(r["sm_clock_mhz"]) for r in _attention_rows(kind, 128)}
    ratio = math.exp(statistics.mean(math.log(r64[s] / r128[s]) for s in r128))
    assert 0.7 < ratio < 0.9
    assert (1.0 - ratio) / (ratio / 64.0 - 1.0 / 128.0) == pytest.approx(overhead, abs=0.1)


def test_large_copies_and_the_memory_efficiency():
    for r in _rows("copy"):
        m = int(r["m"])
        op = graph.Op("copy", "vector", elements=m / 2, ops_per_element=1.0, bytes_read=float(m),
                      bytes_written=float(m), dtype_bytes=2)
        err = float(r["seconds"]) / _price([op], _chip_at(float(r["sm_clock_mhz"]))) - 1.0
        if m >= 64 * 2 ** 20:
            assert abs(err) <= 0.03, (m, err)
        else:       # launch-bound from Python (~8 us a launch) or L2-resident: not HBM
            assert float(r["seconds"]) < 40e-6


LLAMA3_8B = ModelConfig(name="llama3-8b-layer", num_layers=1, hidden=4096, heads=32, kv_heads=8, ffn_hidden=14336,
                        vocab=128256, seq_len=8192, activation="swiglu", norm="rmsnorm", position="rotary",
                        bias=False, tie_embeddings=False, dropout=False)


def _layer_s(chip) -> float:
    return sum(_price(graph.build(LLAMA3_8B, tp=1, microbatch=1, phase=ph, part="layer",
                                  flash_attention=True).ops, chip) for ph in ("fwd", "bwd"))


@pytest.mark.parametrize("kind,kernel", [("sustained-layer-cudnn", "best"), ("sustained-layer-fa2", "fa2")])
def test_llama3_8b_layer_at_its_clock(kind, kernel):
    """A whole decoder layer, forward+backward, as PyTorch ran it back to back for 15 s: the
    model's price at the clock it held is within 6% of the measured time (the windows after the
    first second, median; the model is 4-5% fast)."""
    rows = [r for r in _rows(kind) if window_end_s(r) >= 1.0]
    assert len(rows) >= 30
    measured = statistics.median(float(r["seconds"]) for r in rows)
    mhz = statistics.mean(float(r["sm_clock_mhz"]) for r in rows)
    err = measured / _layer_s(_chip_at(mhz, kernel)) - 1.0
    assert abs(err) <= 0.06, f"model {err:+.1%} at {mhz:.0f} MHz"


def _held(kind, after_s=1.0):
    """Mean SM clock and peak power of a back-to-back run's windows after ``after_s``."""
    rows = [r for r in _rows(kind) if window_end_s(r) >= after_s]
    return statistics.mean(float(r["sm_clock_mhz"]) for r in rows), max(float(r["power_w"]) for r in rows)


def test_preset_clocks_are_the_back_to_back_clocks():
    """Each kernel class is priced at the clock it held back to back at 700 W: GEMMs (8192^3,
    45 s) and cuDNN attention at the power limit, FlashAttention-2 at the boost clock under it.
    The presets' fractions of the 1830 MHz datasheet clock are those clocks, to 1 MHz."""
    e = H200.efficiency
    gemm, gemm_w = _held("sustained")
    cudnn, cudnn_w = _held("sustained-attention-cudnn")
    fa2, fa2_w = _held("sustained-attention-fa2")
    assert gemm_w > 680 and cudnn_w > 680 and fa2_w < 620       # who meets the 700 W limit
    assert fa2 == 1980.0                                         # the boost clock, never pulled down
    assert e.sustained_clock * DATASHEET_MHZ == pytest.approx(gemm, abs=1.0)
    assert e.attention_clock * DATASHEET_MHZ == pytest.approx(cudnn, abs=1.0)
    assert e.attention_clock_fa2 * DATASHEET_MHZ == pytest.approx(fa2, abs=1.0)
    assert e.with_attention_kernel("fa2").attention_clock_held() == e.attention_clock_fa2
    # the whole layers ran between their kernels' clocks
    assert gemm < _held("sustained-layer-cudnn")[0] < cudnn
    assert gemm < _held("sustained-layer-fa2")[0] < fa2


@pytest.mark.parametrize("kind,kernel", [("sustained-layer-cudnn", "best"), ("sustained-layer-fa2", "fa2")])
def test_preset_clocks_price_the_layer(kind, kernel):
    """The Llama 3 8B layer as the preset prices it (GEMMs at the GEMM clock, attention at its
    kernel's clock; nothing here was set from the layer rows): within 2 % of the measured time
    (the median window) for either attention kernel.  One clock for every kernel cannot do both:
    at 1500 MHz the FlashAttention-2 layer is priced 6 % slow."""
    measured = statistics.median(float(r["seconds"]) for r in _rows(kind))
    chip = H200.with_(efficiency=H200.efficiency.with_attention_kernel(kernel))
    assert abs(measured / _layer_s(chip) - 1.0) <= 0.02, kind
    one_clock = H200.with_(efficiency=replace(H200.efficiency, sustained_clock=1500.0 / DATASHEET_MHZ,
                                              attention_clock=0.0, attention_clock_fa2=0.0)
                           .with_attention_kernel(kernel))
    if kernel == "fa2":
        assert measured / _layer_s(one_clock) - 1.0 < -0.05


def _vector_error(r, ops_per_element: float, streams: float) -> float:
    """Model error for a memory-bound row of ``m x n`` bf16 elements moving ``streams`` bytes
    per element-byte (read + written)."""
    m, n = int(r["m"]), int(r["n"])
    el = float(m * n)
    op = graph.Op("v", "vector", elements=el, ops_per_element=ops_per_element, bytes_read=2.0 * el * (streams - 1),
                  bytes_written=2.0 * el, dtype_bytes=2)
    return float(r["seconds"]) / _price([op], _chip_at(float(r["sm_clock_mhz"]))) - 1.0


def test_elementwise_add_streams_at_the_memory_efficiency():
    """a + b (read 2, write 1) from 64 MiB per operand up: within 6% of the model's
    0.90 x HBM bandwidth (4.1-4.4 TB/s measured); smaller ones are launch- or L2-bound (three
    16 MiB operands fit the 60 MB L2)."""
    adds = [r for r in _rows("elementwise") if r["note"].startswith("add")]
    assert len(adds) == 6
    big = [r for r in adds if int(r["m"]) * 2 >= 64 * 2 ** 20]
    assert len(big) == 3
    for r in big:
        assert abs(_vector_error(r, 1.0, 3.0)) <= 0.06, r["m"]


def test_norms_activations_loss_and_optimizer_are_known_optimistic():
    """Kernels the model prices at the streaming bandwidth but PyTorch runs slower (measured on
    the H200; each stated so a model change that moves them shows): RMSNorm (fp32 math and a
    row reduction, 0.54-0.64 of the bandwidth), eager SwiGLU (two kernels, five streams where the
    model has three), eager bf16 cross-entropy over a 128k vocabulary (several passes over the
    logits) and a fused fp32 AdamW step (0.73 of the bandwidth)."""
    rows = _rows("elementwise")
    norms = [_vector_error(r, 4.0, 2.0) for r in rows if r["note"] == "rms_norm"]
    swiglu = [_vector_error(r, 5.0, 3.0) for r in rows if r["note"].startswith("silu")]
    assert norms and all(0.15 <= e <= 0.6 for e in norms), norms
    assert swiglu and all(0.5 <= e <= 0.9 for e in swiglu), swiglu
    ce = next(r for r in rows if r["note"].startswith("cross_entropy"))
    g = graph.build(LLAMA3_8B, part="head", phase="fwd", flash_attention=True)
    gb = graph.build(LLAMA3_8B, part="head", phase="bwd", flash_attention=True)
    chip = _chip_at(float(ce["sm_clock_mhz"]))
    model_ce = sum(_price([o], chip) for o in g.ops + gb.ops if o.name.startswith("cross_entropy"))
    assert 1.5 <= float(ce["seconds"]) / model_ce <= 3.0
    adam = next(r for r in _rows("optimizer") if "fused" in r["note"])
    achieved = 28.0 * int(adam["m"]) / float(adam["seconds"])
    assert 0.65 <= achieved / H200.hbm_bandwidth_Bps <= 0.8 < H200.efficiency.memory


def test_calibrate_on_a_real_measure_run():
    """``cosearch measure --model llama2-7b --mb 2`` on the H200 (cosearch/data/h200_llama2_7b_ops.csv:
    the 16 distinct GEMM and fused-attention kernels of a layer and the head, as cosearch's graph
    has them) fed to ``calibrate``: the fit identifies the tensor and attention efficiencies,
    lands inside the physical bounds, and prices every measured kernel within 20% (rms 8%; the
    largest residuals are the attention forward priced 14% slow and its backward 12% fast, one
    length overhead serving both, and a 4096 x 4096 x 8192 weight gradient 15% fast).  The rows
    ran near the boost clock (a cold GPU), so the fitted tensor efficiency, in fractions of the
    datasheet-clock peak, sits above the preset's per-clock 0.856 times its sustained 0.82."""
    path = importlib.resources.files("cosearch").joinpath("data/h200_llama2_7b_ops.csv")
    rows = package_rows("h200_llama2_7b_ops.csv")
    assert len(rows) == 16 and {r["kind"] for r in rows} == {"gemm", "attention"}
    with importlib.resources.as_file(path) as p:
        cal = cost.calibrate(H200, str(p))
    assert cal.gemm_rows == 16
    assert {"tensor", "attention"} <= set(cal.fitted)
    e = cal.chip.efficiency
    assert 0.0 < e.tensor <= 1.0 and 0.0 < e.attention <= 1.0 and 1e-6 <= e.launch_s <= 20e-6
    assert H200.efficiency.tensor * H200.efficiency.sustained_clock < e.tensor < 0.95
    assert max(abs(x) for x in cal.residuals) <= math.log(1.20)
    assert cal.gemm_rms_log_error <= 0.10


def test_calibrate_reads_the_head_dim_column():
    """With the head dims ``cosearch measure`` now writes (128 for Llama 2's fused attention), the
    fused rows get their pass's length factor: the attention residuals shrink from +14% / -12%
    (one overhead for both passes) to within 9%, and the fit's rms falls."""
    rows = package_rows("h200_llama2_7b_ops.csv")
    cols = {k: [r[k] for r in rows] for k in rows[0]}
    plain = cost.calibrate(H200, cols)
    cols["head_dim"] = ["128" if r["kind"] == "attention" else "0" for r in rows]
    fused = cost.calibrate(H200, cols)
    att = [i for i, r in enumerate(rows) if r["kind"] == "attention"]
    assert max(abs(fused.residuals[i]) for i in att) <= math.log(1.09)
    assert max(abs(fused.residuals[i]) for i in att) < max(abs(plain.residuals[i]) for i in att)
    assert fused.gemm_rms_log_error < plain.gemm_rms_log_error
    cols["head_dim"] = ["64"] * len(rows)          # a GEMM row cannot have one
    with pytest.raises(ValueError, match="head_dim"):
        cost.calibrate(H200, cols)


def test_calibrate_per_clock_on_the_sweep_recovers_the_presets():
    """The sweep's training-shape bf16 GEMMs and cuDNN attention rows (head dim 128, forward and
    backward apart), each with its clock, fed to ``calibrate``: the fitted per-clock tensor and
    attention efficiencies land within 5% of the preset's (0.856 from the H100 MAMF table, an
    independent source; 0.526 from these rows' geometric mean), and the chip keeps its
    sustained clock."""
    cols = {k: [] for k in ("kind", "m", "n", "k", "batch", "dtype_bytes", "seconds", "head_dim", "sm_clock_mhz")}

    def add(kind, r, head_dim):
        for key, val in zip(cols, (kind, r["m"], r["n"], r["k"], r["batch"], r["dtype_bytes"], r["seconds"],
                                   head_dim, r["sm_clock_mhz"])):
            cols[key].append(val)
    for r in _rows("gemm"):
        if _gemm_group(r) == "full" and r["note"] != "sweep":
            add("gemm", r, 0)
    for note in ("forward", "backward"):
        for r in _attention_rows("attention-cudnn", 128, note):
            d = 128
            k = d if note == "forward" else int(2.5 * d)       # the graph's k: 2.5 head dims of work
            add("attention", {**r, "k": str(k), "batch": r["batch"]}, d)
    cal = cost.calibrate(H200, cols)
    e = cal.chip.efficiency
    assert {"tensor", "attention"} <= set(cal.fitted)
    assert e.sustained_clock == H200.efficiency.sustained_clock
    assert e.tensor == pytest.approx(H200.efficiency.tensor, rel=0.05)
    assert e.attention == pytest.approx(H200.efficiency.attention, rel=0.05)
