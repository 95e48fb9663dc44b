"""scripts/measure_gpu_kernels.py (what made cosearch/data/h200_kernels.csv) runs end to end:
a tiny CPU run of every section that can run off a GPU writes the table's format, with rates
that follow from the times, and the GPU-only parts say they were skipped."""

import csv
import re
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "measure_gpu_kernels.py"
SECTIONS = ("gemm,fp8,bmm,attention,memory,vector,gemm-sweep,attention-head-dims,sustained,sustained-layer,"
            "fp8-training,sustained-fp8,sustained-layer-fp8,sustained-layer-compiled,fp8-cast-passes,vector-passes,"
            "cross-entropy")


def test_tiny_cpu_run_writes_the_table_format(tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "k.csv"
    r = subprocess.run([sys.executable, str(SCRIPT), "--chip", "test", "--device", "cpu", "--tiny", "--out", str(out),
                        "--only", SECTIONS, "--sustain-s", "0.2"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "FP8 needs torch._scaled_mm on a CUDA GPU: skipped" in r.stdout
    assert not re.search(r"^section \S+ failed", r.stdout, re.M), r.stdout[-2000:]   # every section ran
    with open(out) as fh:
        rows = list(csv.DictReader(fh))
    with open(out) as fh:
        header = next(csv.reader(fh))
    assert header == ["kind", "m", "n", "k", "batch", "dtype_bytes", "seconds", "tflops", "GBps", "sm_clock_mhz",
                      "power_w", "note"]
    kinds = {r["kind"] for r in rows}
    assert {"gemm", "bmm", "copy", "elementwise", "optimizer", "sustained", "sustained-layer-math",
            "attention-unfused", "gemm-fp8", "fp8-cast", "sustained-fp8", "sustained-layer-fp8-math",
            "sustained-layer-bf16-math", "sustained-layer-compiled-fp8-math", "sustained-layer-compiled-bf16-math", "vector-pass", "cross-entropy"} <= kinds
    for r in rows:
        assert float(r["seconds"]) > 0 and r["sm_clock_mhz"] == "" and r["power_w"] == ""   # no NVML on a CPU
        if r["kind"] in ("gemm", "gemm-fp8"):
            m, n, k = (int(r[x]) for x in "mnk")
            assert float(r["tflops"]) == pytest.approx(2 * m * n * k / float(r["seconds"]) / 1e12, rel=1e-3)
        if r["kind"] == "copy":
            assert float(r["GBps"]) == pytest.approx(2 * int(r["m"]) / float(r["seconds"]) / 1e9, rel=1e-3)
        if r["kind"] == "fp8-cast":   # bytes per element by the passes a row times
            per = next(b for prefix, b in (("amax alone", 2), ("cast with a given scale + transposed", 4),
                                           ("cast with a given scale", 3), ("amax + cast + transposed", 6),
                                           ("amax + cast", 5)) if r["note"].startswith(prefix))
            assert float(r["GBps"]) == pytest.approx(per * int(r["m"]) * int(r["n"]) / float(r["seconds"]) / 1e9,
                                                     rel=1e-3)
    assert (tmp_path / "k_facts.txt").read_text().startswith("torch: ")


def test_unknown_section_and_missing_gpu_are_refused(tmp_path):
    r = subprocess.run([sys.executable, str(SCRIPT), "--chip", "x", "--out", str(tmp_path / "a.csv"), "--only", "gemms"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "unknown section(s) ['gemms']" in r.stderr


def test_fp8_linear_gradients_match_bf16():
    """The script's FP8 linear (``_fp8_linear``: current-scaling casts, ``_scaled_mm`` forward,
    data- and weight-gradient GEMMs in their layouts) gives the output and both gradients of
    ``x @ w`` to within e4m3's rounding (3 mantissa bits: ~4 % in norm); a wrong layout or scale
    would be off by O(1)."""
    torch = pytest.importorskip("torch")
    import importlib.util
    spec = importlib.util.spec_from_file_location("measure_gpu_kernels", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.DEVICE = "cpu"
    _, cast_t = mod._make_fp8_casts_eager(torch)
    linear = mod._fp8_linear(torch, cast_t)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(64, 32, generator=gen).to(torch.bfloat16).requires_grad_(True)
    w = (torch.randn(32, 48, generator=gen) * 0.1).to(torch.bfloat16).requires_grad_(True)
    y = linear(x, w, cast_t(w.detach()))
    g = torch.randn(64, 48, generator=gen).to(torch.bfloat16)
    y.backward(g)
    dx, dw = x.grad.clone(), w.grad.clone()
    x.grad = w.grad = None
    y2 = x @ w
    y2.backward(g)

    def rel(a, b):
        return float((a.detach().float() - b.detach().float()).norm() / b.detach().float().norm())
    for got, want in ((y, y2), (dx, x.grad), (dw, w.grad)):
        assert rel(got, want) < 0.06


def test_megatron_style_cross_entropy_matches_pytorch():
    """The script's pass-by-pass Megatron cross-entropy gives PyTorch's loss and logit gradient
    (on upcast logits) to float32 rounding, at an odd vocabulary."""
    torch = pytest.importorskip("torch")
    import importlib.util
    spec = importlib.util.spec_from_file_location("measure_gpu_kernels", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    ce = mod._megatron_style_ce(torch)
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(24, 77, generator=gen).to(torch.bfloat16).requires_grad_(True)
    y = torch.randint(0, 77, (24,), generator=gen)
    loss = ce(x, y).mean()
    (g,) = torch.autograd.grad(loss, (x,))
    x2 = x.detach().clone().requires_grad_(True)
    loss2 = torch.nn.functional.cross_entropy(x2.float(), y)
    (g2,) = torch.autograd.grad(loss2, (x2,))
    assert float(loss.detach()) == pytest.approx(float(loss2.detach()), rel=1e-6)
    assert torch.allclose(g.float(), g2.float(), atol=1e-3)
