"""``cosearch.runs.rows`` reads published runs as plans: hand-made rows in the validation set's
format, each checked against what the framework's own code says the run did."""

import sys
from pathlib import Path

import pytest

from cosearch import hardware
from cosearch.runs import rows

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))


def _row(**kw):
    row = dict(id="x", model="m", arch="llama2-style: SwiGLU, RoPE, RMSNorm, MHA, untied output", layers=4,
               hidden=1024, heads=8, kv_heads=8, ffn=2816, vocab=32000, seq=2048, head_dim=None, ep=1, cp=1,
               vp=None, zero=0, zero_group=None, sp=False, offload=None, recompute="none", precision="BF16",
               accel="H100-SXM-80GB", n_gpus=8, dp=8, tp=1, pp=1, mbs=1, gbs=8, ga=1, tok_s_gpu=1000.0,
               software="NeMo 26.04 container (Megatron-Bridge + Megatron-Core)")
    row.update(kw)
    return row


def test_maxtext_tensor_parallel_microbatch_is_the_groups():
    """MaxText's per_device_batch_size is per chip: 256 v5e chips at tp 16 and fsdp 16 with 1
    sequence a chip run 16 sequences per data-parallel replica in one microbatch (ga 1), and their
    activations are sharded over the tensor axis as sequence parallelism shards them."""
    row = _row(software="MaxText (JAX/XLA) 2023-12", accel="TPU-v5e chip", n_gpus=256, dp=16, tp=16, mbs=1,
               gbs=256, ga=1, zero=3, recompute="remat_policy=full (full layer)", tok_s_gpu=None,
               tflops_gpu=110.0, mfu_pct=56.06, mfu_peak=197, flop_conv="F-mx")
    d = rows.describe_row(row)
    assert (d.spec.microbatch, d.spec.sequence_parallel, d.spec.tp, d.spec.dp) == (16, True, 16, 16)
    assert d.global_batch // (d.spec.dp * d.spec.microbatch) == 1      # one microbatch a step, as the row's ga says
    # a row whose fields already agree keeps its microbatch; data parallelism alone: no SP
    d = rows.describe_row(_row(dp=4, n_gpus=4, mbs=2, gbs=32, ga=4))
    assert (d.spec.microbatch, d.spec.sequence_parallel) == (2, False)


def test_self_contradicting_row_is_refused():
    """A row whose TFLOP/s and MFU disagree by more than 3 % is refused by name, not checked
    against either figure; one that agrees is converted."""
    bad = _row(software="MaxText (JAX/XLA) 2024-04", accel="TPU-v5p chip", n_gpus=64, dp=64, tok_s_gpu=None,
               tflops_gpu=249.0, mfu_pct=64.05, mfu_peak=459, flop_conv="F-mx", gbs=64)
    with pytest.raises(rows.Refused, match="contradicts itself"):
        rows.describe_row(bad)
    good = dict(bad, tflops_gpu=294.0)
    assert rows.describe_row(good).measured_tok_s_per_chip > 0


@pytest.mark.parametrize("precision,fp8_params", [("FP8 (per-tensor current scaling)", True),
                                                  ("MXFP8 (1x32 blocks)", True), ("NVFP4", False)])
def test_megatron_bridge_fp8_recipes_keep_fp8_weights(precision, fp8_params):
    """Megatron-Bridge's performance precision configs set fp8_param_gather for FP8 current
    scaling and MXFP8, not for NVFP4 (scripts/performance/utils/precision.py)."""
    d = rows.describe_row(_row(precision=precision, accel="B200", tp=2, dp=4, sp=True, gbs=8))
    assert d.engine.fp8_param_gather == fp8_params


@pytest.mark.parametrize("accel,hbm_bytes", [
    ("H100-SXM-96GB-HBM2e-500W (Meta Grand Teton, RDMA 400Gb/s/GPU)", 96e9), ("H100-95GB-HBM2e lower-TDP SXM", 95e9)])
def test_grand_teton_h100_is_its_sources_part(accel, hbm_bytes):
    """torchtitan's H100 rows run on Grand Teton's HBM2e parts at 500 W, "96GB HBM2e with 2.4
    TB/sec peak memory bandwidth" (docs/performance.md): the H100-500W preset with the row's HBM
    size; every other H100 row is the SXM5 at 700 W with 3.35 TB/s."""
    row = _row(software="torchtitan 2024-12", accel=accel, zero=3, precision="BF16 + torch.compile")
    chip = rows.describe_row(row).chip
    assert (chip.name, chip.hbm_bandwidth_Bps, chip.hbm_bytes) == ("H100-500W", 2.4e12, hbm_bytes)
    assert chip.efficiency == hardware.H100_500W.efficiency
    other = rows.describe_row(_row()).chip
    assert (other.name, other.hbm_bandwidth_Bps) == ("H100", 3.35e12)


def test_published_recompute_mode_from_hfu_over_mfu():
    """A run that says only that it recomputed (PaLM: "yes") is read at the mode its published
    hardware / model FLOPs utilisations state.  By hand for PaLM's shapes (118 layers of 18432,
    48 heads of 384 and one KV head, SwiGLU FFN 73728, 2048 tokens, 256k tied vocabulary): N =
    118 (2 h^2 + 2 h 384 + 3 h f + 2 h) + V h + h = 567.6e9, 6 N + 12 L h s = 3.459e12 FLOPs a
    token; full recompute repeats each layer's forward, 2 (2 h^2 + 2 h 384 + 3 h f) + 4 h s a
    token, so (model + recomputed) / model = 1.331; selective repeats the attention core, 4 h s:
    1.005.  PaLM's 57.8 / 46.2 = 1.251 is nearer full; 1.05 is nearer selective."""
    import bench_fidelity

    from cosearch import models
    m = models.ModelConfig("palm", 118, 18432, 48, 73728, 256000, 2048, kv_heads=1, activation="swiglu",
                           norm="layernorm", position="rotary", bias=False, tie_embeddings=True, dropout=False)
    h, f, V, L, s = 18432, 73728, 256000, 118, 2048
    mm = 2 * h * h + 2 * h * 384 + 3 * h * f
    per_token = 6.0 * (L * (mm + 2 * h) + V * h + h) + 12.0 * L * h * s
    ratios = bench_fidelity.recompute_ratios(m)
    assert ratios["full"] == pytest.approx(1.0 + L * (2 * mm + 4 * h * s) / per_token, rel=1e-4)
    assert ratios["selective"] == pytest.approx(1.0 + L * 4 * h * s / per_token, rel=1e-4)
    assert (round(ratios["full"], 3), round(ratios["selective"], 3)) == (1.331, 1.005)
    assert bench_fidelity._recompute_from_hfu(m, {"hfu": 0.578, "mfu": 0.462}, None) == "full"
    assert bench_fidelity._recompute_from_hfu(m, {"hfu": 0.462 * 1.05, "mfu": 0.462}, None) == "selective"
    assert bench_fidelity._recompute_from_hfu(m, {"mfu": 0.462}, None) is None


def test_published_tpu_v4_runs_take_tpu_v5s_measured_matmul_rate():
    """PaLM's TPU v4 is priced at TPU v5's measured XLA matmul efficiency in the fidelity bench,
    while the TPUv4 preset, PHAZE's chip, stays an ideal roofline."""
    import bench_fidelity

    from cosearch import hardware
    chip, cl = bench_fidelity._setup({"hardware": {"chip": "TPU v4", "chips": 6144}})
    assert chip.efficiency.tensor == hardware.TPU5_TENSOR and chip.peak_flops == hardware.TPUv4.peak_flops
    assert hardware.TPUv4.efficiency.tensor == 1.0 and cl.num_chips == 6144
