"""Measure one GPU's kernels for cosearch's calibration table (``cosearch/data/<chip>_kernels.csv``).

Run on the GPU to be described, with torch (and, for the clock and power readings,
``nvidia-ml-py``)::

    python scripts/measure_gpu_kernels.py --chip H200 --out h200_kernels.csv

(``--device cpu --tiny`` runs every section that can run off a GPU on tiny shapes in seconds:
``tests/test_measure_script.py`` checks the script that way.)

It times, on random data (zeros draw less power and run faster):

* ``gemm``: bf16 ``torch.matmul`` over square sizes, the shapes of the training runs in
  ``modern_runs.jsonl`` (Llama 3 8B/70B, GPT-3 175B), small-K and small-M shapes, shapes one
  tile either side of a full wave of tiles, and an unaligned K;
* ``gemm-fp8``: e4m3 ``torch._scaled_mm`` (per-tensor scales, bf16 output);
* ``bmm``: batched attention-score matmuls (unfused attention);
* ``attention-fa2`` / ``attention-cudnn``: causal ``scaled_dot_product_attention`` with the
  flash (FlashAttention-2) and cuDNN back ends, forward and backward timed apart, head dim 64
  and 128, 1k-16k tokens;
* ``copy``: device-to-device copies from 4 KiB to 4 GiB (bytes = read + written);
* ``elementwise``: GELU and LayerNorm at training shapes (bytes = read + written);
* ``gemm-sweep``: N and M swept in steps of 256 / 128 (the tile and wave model);
* ``attention-head-dims``: causal fwd+bwd at 4k for head dims 64-256 (one timed call each);
* ``vector``: add by size, SwiGLU's silu(g) * u, RMSNorm, cross-entropy over a 128k vocabulary
  and a fused / foreach AdamW step (rows ``elementwise`` and ``optimizer``);
* ``sustained``: a 8192^3 bf16 GEMM back to back for ``--sustain-s`` seconds, in windows, to
  read the clock and rate the chip holds at its power limit;
* ``sustained-attention``: FlashAttention-2 and cuDNN attention (causal, 8k, head dim 128)
  forward+backward back to back, the same way;
* ``sustained-layer``: a Llama 3 8B decoder layer (8192 tokens) forward+backward back to back,
  with each attention back end: the clock a training step's mix of kernels holds, and the
  layer's time.

Every row carries the SM clock and board power read right after it (NVML), so a row can be
compared with a model at the clock it actually ran at.  Rows are written as they finish
(Ctrl-C keeps them).  Times: CUDA events around ``iters`` back-to-back launches, the median
of ``reps`` such loops, after warm-up.  FLOPs: ``2 m n k batch``; causal attention counts
half the score and value matmuls; the backward counts 2.5x the forward (FlashAttention's
convention).
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import sys
import time

COLUMNS = ("kind", "m", "n", "k", "batch", "dtype_bytes", "seconds", "tflops", "GBps",
           "sm_clock_mhz", "power_w", "note")

#: the torch device measured (``--device``) and whether shapes are cut to a smoke test (``--tiny``)
DEVICE = "cuda"
TINY = False


def _n(full, tiny):
    """``full`` for a real run, ``tiny`` for ``--tiny`` (a seconds-long check that the script
    runs end to end, on a CPU too)."""
    return tiny if TINY else full


class _Stopwatch:
    """Seconds between ``start()`` and ``stop()``: CUDA events on a GPU, the wall clock else."""

    def __init__(self, torch) -> None:
        self.torch = torch
        self.cuda = DEVICE.startswith("cuda")

    def start(self) -> None:
        if self.cuda:
            self.a = self.torch.cuda.Event(enable_timing=True)
            self.b = self.torch.cuda.Event(enable_timing=True)
            self.a.record()
        else:
            self.t0 = time.perf_counter()

    def stop(self) -> float:
        if self.cuda:
            self.b.record()
            self.b.synchronize()
            return self.a.elapsed_time(self.b) / 1e3
        return time.perf_counter() - self.t0


def _sync(torch) -> None:
    if DEVICE.startswith("cuda"):
        torch.cuda.synchronize()


class Nvml:
    """SM clock (MHz) and board power (W) of GPU 0, or blanks where NVML is missing."""

    @classmethod
    def off(cls) -> Nvml:
        """Blanks (a CPU run)."""
        self = cls.__new__(cls)
        self._nv = None
        return self

    def __init__(self) -> None:
        try:
            import pynvml
            pynvml.nvmlInit()
            self._nv = pynvml
            self._h = pynvml.nvmlDeviceGetHandleByIndex(0)
        except Exception:       # noqa: BLE001 - NVML is optional
            self._nv = None

    def read(self) -> tuple[str, str]:
        if self._nv is None:
            return "", ""
        nv, h = self._nv, self._h
        return (str(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)),
                f"{nv.nvmlDeviceGetPowerUsage(h) / 1e3:.0f}")

    def facts(self) -> dict[str, str]:
        if self._nv is None:
            return {}
        nv, h = self._nv, self._h
        out = {}
        for key, fn in (("name", lambda: nv.nvmlDeviceGetName(h)),
                        ("driver", nv.nvmlSystemGetDriverVersion),
                        ("power_limit_w", lambda: nv.nvmlDeviceGetEnforcedPowerLimit(h) / 1e3),
                        ("max_sm_clock_mhz", lambda: nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_SM)),
                        ("max_mem_clock_mhz", lambda: nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_MEM)),
                        ("app_sm_clock_mhz", lambda: nv.nvmlDeviceGetApplicationsClock(h, nv.NVML_CLOCK_SM))):
            try:
                out[key] = str(fn())
            except Exception as exc:    # noqa: BLE001
                out[key] = f"n/a ({type(exc).__name__})"
        return out


class Table:
    def __init__(self, path: str, nvml: Nvml) -> None:
        self.path, self.nvml, self.rows = path, nvml, []

    def add(self, kind, m, n, k, batch, dtype_bytes, seconds, flops=0.0, nbytes=0.0, note=""):
        clock, power = self.nvml.read()
        row = (kind, m, n, k, batch, dtype_bytes, f"{seconds:.6g}",
               f"{flops / seconds / 1e12:.5g}" if flops else "", f"{nbytes / seconds / 1e9:.5g}" if nbytes else "",
               clock, power, note)
        self.rows.append(row)
        with open(self.path, "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(COLUMNS)
            w.writerows(self.rows)
        print(",".join(str(x) for x in row), flush=True)


def timer(torch, fn, iters: int, reps: int = 5, warmup: int = 3) -> float:
    for _ in range(warmup):
        fn()
    _sync(torch)
    times = []
    watch = _Stopwatch(torch)
    for _ in range(reps):
        watch.start()
        for _ in range(iters):
            fn()
        times.append(watch.stop() / iters)
    return statistics.median(times)


def iters_for(flops_or_bytes: float, rate: float) -> int:
    """Enough launches for ~20 ms a loop (at least 3)."""
    return int(max(3, min(_n(2000, 3), 0.02 / max(flops_or_bytes / rate, 1e-7))))


GEMM_SHAPES = [
    # (m, n, k, note)
    *[(s, s, s, "square") for s in (256, 512, 1024, 2048, 3072, 4096, 6144, 8192, 12288, 16384)],
    (2048, 2048, 13312, "MAMF best shape on H100 (ml-engineering)"),
    (1024, 10240, 5120, "MAMF best shape on A100 (ml-engineering)"),
    (3456, 4096, 8192, "CUTLASS profiler example shape"),
    # Llama 3 8B, 8192 tokens, tp1 (qkv, proj, gate+up, down, LM head) and the weight-grad GEMM
    (8192, 6144, 4096, "llama3-8b qkv"), (8192, 4096, 4096, "llama3-8b proj"),
    (8192, 28672, 4096, "llama3-8b fc1 (gate+up)"), (8192, 4096, 14336, "llama3-8b fc2"),
    (8192, 128256, 4096, "llama3-8b lm head"), (4096, 14336, 8192, "llama3-8b fc2 weight grad"),
    # Llama 3 70B, 8192 tokens, tp8
    (8192, 1280, 8192, "llama3-70b tp8 qkv"), (8192, 8192, 1024, "llama3-70b tp8 proj"),
    (8192, 7168, 8192, "llama3-70b tp8 fc1"), (8192, 8192, 3584, "llama3-70b tp8 fc2"),
    # GPT-3 175B, 2048 tokens, tp8
    (2048, 4608, 12288, "gpt3-175b tp8 qkv"), (2048, 12288, 1536, "gpt3-175b tp8 proj"),
    (2048, 6144, 12288, "gpt3-175b tp8 fc1"), (2048, 12288, 6144, "gpt3-175b tp8 fc2"),
    # small K (prologue/epilogue bound) and small M (memory bound)
    *[(8192, 8192, k, "small K") for k in (64, 128, 256, 512, 1024)],
    *[(m, 8192, 8192, "small M") for m in (16, 64, 128, 256, 512)],
    # one 128x256 tile either side of a full wave on 132 SMs (33 x 4 = 132 tiles, 34 x 4 = 136)
    (4224, 1024, 8192, "132 tiles of 128x256"), (4352, 1024, 8192, "136 tiles of 128x256"),
    (8448, 2048, 8192, "528 tiles = 4 waves"), (8576, 2048, 8192, "536 tiles"),
    (4095, 4096, 4096, "odd M"), (4096, 4096, 4095, "odd K (unaligned)"),
]

FP8_SHAPES = [(s, s, s, "square") for s in (2048, 4096, 8192, 16384)] + [
    (1024, 9216, 14336, "MAMF best FP8 shape on H100 (ml-engineering)"),
    (8192, 28672, 4096, "llama3-8b fc1 (gate+up)"), (8192, 7168, 8192, "llama3-70b tp8 fc1")]

BMM_SHAPES = [(2048, 2048, 128, 128, "scores, seq 2k hd 128"), (1024, 1024, 128, 512, "pytorch#83272 shape"),
              (1024, 1024, 140, 384, "pytorch#83272 unaligned K"), (4096, 4096, 128, 32, "scores, seq 4k")]

ATTN = [(seq, hd) for hd in (128, 64) for seq in (1024, 2048, 4096, 8192, 16384)]


def run_gemms(torch, t: Table, peak: float) -> None:
    bf16 = torch.bfloat16
    for m, n, k, note in GEMM_SHAPES:
        a = torch.randn(m, k, device=DEVICE, dtype=bf16)
        b = torch.randn(k, n, device=DEVICE, dtype=bf16)
        f = 2.0 * m * n * k
        s = timer(torch, lambda a=a, b=b: torch.matmul(a, b), iters_for(f, peak * 0.6))
        t.add("gemm", m, n, k, 1, 2, s, flops=f, nbytes=2.0 * (m * k + k * n + m * n), note=note)


def run_fp8(torch, t: Table, peak: float) -> None:
    if not hasattr(torch, "_scaled_mm") or not DEVICE.startswith("cuda"):
        print("FP8 needs torch._scaled_mm on a CUDA GPU: skipped", flush=True)
        return
    f8, one = torch.float8_e4m3fn, torch.ones((), device=DEVICE)
    for m, n, k, note in FP8_SHAPES:
        a = torch.randn(m, k, device=DEVICE).to(f8)
        b = torch.randn(n, k, device=DEVICE).to(f8).t()
        f = 2.0 * m * n * k
        fn = lambda a=a, b=b: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)  # noqa: E731
        s = timer(torch, fn, iters_for(f, 2 * peak * 0.6))
        t.add("gemm-fp8", m, n, k, 1, 1, s, flops=f, note=note)


def run_bmm(torch, t: Table, peak: float) -> None:
    bf16 = torch.bfloat16
    for m, n, k, batch, note in BMM_SHAPES:
        a = torch.randn(batch, m, k, device=DEVICE, dtype=bf16)
        b = torch.randn(batch, k, n, device=DEVICE, dtype=bf16)
        f = 2.0 * m * n * k * batch
        s = timer(torch, lambda a=a, b=b: torch.bmm(a, b), iters_for(f, peak * 0.5))
        t.add("bmm", m, n, k, batch, 2, s, flops=f, nbytes=2.0 * batch * (m * k + k * n + m * n), note=note)


def _fused_attention(torch, t: Table, peak: float, shapes, note: str = "") -> None:
    """Causal ``scaled_dot_product_attention`` with the flash (FlashAttention-2) and cuDNN back
    ends over ``shapes`` ``(seq, head_dim, heads)``: forward and backward timed apart, three rows
    each (forward, backward, both); a back end that cannot run a shape is named and skipped."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    bf16 = torch.bfloat16
    for backend, kind in ((SDPBackend.FLASH_ATTENTION, "attention-fa2"), (SDPBackend.CUDNN_ATTENTION, "attention-cudnn")):
        for seq, hd, heads in shapes:
            q, k, v = (torch.randn(1, heads, seq, hd, device=DEVICE, dtype=bf16, requires_grad=True)
                       for _ in range(3))
            fwd_flops = 4.0 * heads * seq * seq * hd / 2       # causal: half of QK^T and PV
            try:
                with sdpa_kernel([backend]):
                    def fwd(q=q, k=k, v=v):
                        with torch.no_grad():
                            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
                    sf = timer(torch, fwd, iters_for(fwd_flops, peak * 0.4))
                    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                    g = torch.randn_like(out)
                    sb = timer(torch, lambda out=out, qkv=(q, k, v), g=g: torch.autograd.grad(out, qkv, g, retain_graph=True),
                               iters_for(2.5 * fwd_flops, peak * 0.4))
            except Exception as exc:    # noqa: BLE001 - a back end may be missing or refuse the shape
                print(f"{kind} seq {seq} hd {hd}: {type(exc).__name__}: {str(exc)[:200]}", flush=True)
                continue
            t.add(kind, seq, seq, hd, heads, 2, sf, flops=fwd_flops, note="forward" + note)
            t.add(kind, seq, seq, hd, heads, 2, sb, flops=2.5 * fwd_flops, note="backward" + note)
            t.add(kind, seq, seq, hd, heads, 2, sf + sb, flops=3.5 * fwd_flops, note="forward+backward" + note)


def run_attention(torch, t: Table, peak: float) -> None:
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    bf16 = torch.bfloat16
    # 128k query rows in all (every SM busy)
    _fused_attention(torch, t, peak, [(seq, hd, _n(131072 // seq, 2)) for seq, hd in ATTN])
    # unfused (math back end) at 2k, head dim 128, as Dao 2023's PyTorch baseline
    seq, hd, heads = _n((2048, 128, 16), (64, 16, 2))
    q, k, v = (torch.randn(8, heads, seq, hd, device=DEVICE, dtype=bf16, requires_grad=True) for _ in range(3))
    with sdpa_kernel([SDPBackend.MATH]):
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        g = torch.randn_like(out)

        def fb():
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            torch.autograd.grad(o, (q, k, v), g)
        s = timer(torch, fb, 3)
    t.add("attention-unfused", seq, seq, hd, 8 * heads, 2, s, flops=3.5 * 4.0 * 8 * heads * seq * seq * hd / 2,
          note="forward+backward, math back end")


def run_memory(torch, t: Table, hbm: float) -> None:
    for e in range(12, _n(33, 17), 2):          # 4 KiB .. 4 GiB
        nbytes = 2 ** e
        src = torch.empty(nbytes // 2, device=DEVICE, dtype=torch.bfloat16).normal_()
        dst = torch.empty_like(src)
        s = timer(torch, lambda dst=dst, src=src: dst.copy_(src), iters_for(2.0 * nbytes, hbm * 0.7))
        t.add("copy", nbytes, 1, 1, 1, 2, s, nbytes=2.0 * nbytes, note="device-to-device copy_")
    import torch.nn.functional as F
    for tokens, width in _n(((8192, 4096), (8192, 8192), (2048, 12288), (8192, 28672)), ((32, 64),)):
        x = torch.randn(tokens, width, device=DEVICE, dtype=torch.bfloat16)
        nb = 2.0 * 2 * tokens * width
        s = timer(torch, lambda x=x: F.gelu(x), iters_for(nb, hbm * 0.7))
        t.add("elementwise", tokens, width, 1, 1, 2, s, nbytes=nb, note="gelu")
        w = torch.ones(width, device=DEVICE, dtype=torch.bfloat16)
        s = timer(torch, lambda x=x, w=w, width=width: F.layer_norm(x, (width,), w, w), iters_for(nb, hbm * 0.7))
        t.add("elementwise", tokens, width, 1, 1, 2, s, nbytes=nb, note="layer_norm")


def run_vector(torch, t: Table, hbm: float) -> None:
    """Training's memory-bound kernels: elementwise add by size, SwiGLU's silu(g) * u, RMSNorm,
    the LM head's cross-entropy (forward+backward over a 128k vocabulary) and a fused AdamW
    step (fp32 master weights, gradients and both moments: 28 bytes per parameter)."""
    import torch.nn.functional as F
    bf16 = torch.bfloat16
    for e in range(_n(20, 12), _n(31, 15), 2):  # 1 MiB .. 1 GiB per operand
        n = 2 ** e // 2
        a, b = (torch.randn(n, device=DEVICE, dtype=bf16) for _ in range(2))
        nb = 3.0 * 2 * n
        s = timer(torch, lambda a=a, b=b: torch.add(a, b), iters_for(nb, hbm * 0.6))
        t.add("elementwise", n, 1, 1, 1, 2, s, nbytes=nb, note="add (read 2, write 1)")
    for tokens, width in _n(((8192, 14336), (8192, 3584)), ((32, 64),)):
        g, u = (torch.randn(tokens, width, device=DEVICE, dtype=bf16) for _ in range(2))
        nb = 3.0 * 2 * tokens * width
        s = timer(torch, lambda g=g, u=u: F.silu(g) * u, iters_for(nb, hbm * 0.6))
        t.add("elementwise", tokens, width, 1, 1, 2, s, nbytes=nb, note="silu(g) * u, eager (two kernels)")
    for tokens, width in _n(((8192, 4096), (8192, 8192)), ((32, 64),)):
        x = torch.randn(tokens, width, device=DEVICE, dtype=bf16)
        w = torch.ones(width, device=DEVICE, dtype=bf16)
        nb = 2.0 * 2 * tokens * width
        s = timer(torch, lambda x=x, w=w, width=width: F.rms_norm(x, (width,), w), iters_for(nb, hbm * 0.6))
        t.add("elementwise", tokens, width, 1, 1, 2, s, nbytes=nb, note="rms_norm")
    tokens, vocab = _n((8192, 128256), (32, 500))
    logits = torch.randn(tokens, vocab, device=DEVICE, dtype=bf16, requires_grad=True)
    target = torch.randint(0, vocab, (tokens,), device=DEVICE)

    def ce(logits=logits, target=target):
        F.cross_entropy(logits, target).backward()
    s = timer(torch, ce, 3)
    t.add("elementwise", tokens, vocab, 1, 1, 2, s, nbytes=2.0 * 2 * tokens * vocab,
          note="cross_entropy forward+backward (bytes: logits read, grad written)")
    n = _n(1_000_000_000, 4000)
    params = [torch.zeros(n // 4, device=DEVICE, requires_grad=True) for _ in range(4)]
    for q in params:
        q.grad = torch.randn_like(q)
    for fused in (True, False):
        if fused and not DEVICE.startswith("cuda"):
            continue                            # the fused kernel is CUDA's
        opt = torch.optim.AdamW(params, lr=1e-4, fused=fused, foreach=None if fused else True)
        s = timer(torch, opt.step, 3, reps=3, warmup=2)
        t.add("optimizer", n, 1, 1, 1, 4, s, nbytes=28.0 * n,
              note=f"AdamW step, fp32, {'fused' if fused else 'foreach'} (28 bytes per parameter)")
        del opt


def run_gemm_sweep(torch, t: Table, peak: float) -> None:
    """Dense sweeps for the tile/wave model: N from 256 to 4096 by 256 at M = K = 8192, and M
    from 128 to 4096 by 128 at N = K = 4096."""
    bf16 = torch.bfloat16
    shapes = [(8192, n, 8192) for n in range(256, 4097, 256)] + [(m, 4096, 4096) for m in range(128, 4097, 128)]
    shapes = _n(shapes, [(64, 32, 64), (32, 64, 64)])
    for m, n, k in shapes:
        a = torch.randn(m, k, device=DEVICE, dtype=bf16)
        b = torch.randn(k, n, device=DEVICE, dtype=bf16)
        f = 2.0 * m * n * k
        s = timer(torch, lambda a=a, b=b: torch.matmul(a, b), iters_for(f, peak * 0.6))
        t.add("gemm", m, n, k, 1, 2, s, flops=f, nbytes=2.0 * (m * k + k * n + m * n), note="sweep")


def run_attention_head_dims(torch, t: Table, peak: float) -> None:
    """Causal attention at 4k tokens for head dims 64, 96, 128, 192 and 256, both back ends."""
    seq = _n(4096, 64)
    _fused_attention(torch, t, peak, [(seq, hd, _n(32 * 128 // hd, 2)) for hd in (64, 96, 128, 192, 256)],
                     ", head-dim sweep")


def run_sustained(torch, t: Table, seconds: float) -> None:
    n = _n(8192, 64)
    a = torch.randn(n, n, device=DEVICE, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=DEVICE, dtype=torch.bfloat16)
    _windows(torch, t, "sustained", lambda: torch.matmul(a, b), 2.0 * n ** 3, seconds, (n, n, n, 1),
             f"{n}^3 bf16 matmul")


def _windows(torch, t: Table, kind: str, fn, flops: float, seconds: float, shape, note: str,
             dtype_bytes: int = 2) -> None:
    """Run ``fn`` back to back for ``seconds``; one row per ~0.2 s window (rate, clock, power)."""
    m, n, k, batch = shape
    fn()
    _sync(torch)
    watch = _Stopwatch(torch)
    watch.start()
    fn()
    per_window = max(1, int(0.2 / max(watch.stop(), 1e-6)))
    t0, window = time.time(), 0
    while time.time() - t0 < seconds:
        watch.start()
        for _ in range(per_window):
            fn()
        s = watch.stop() / per_window
        t.add(kind, m, n, k, batch, dtype_bytes, s, flops=flops,
              note=f"{note}; window {window} at {time.time() - t0:.1f} s")
        window += 1


def _backends(SDPBackend, prefix: str):
    """Off a GPU only PyTorch's math attention runs: ``[(MATH, prefix-math)]``; None on a GPU."""
    return None if DEVICE.startswith("cuda") else [(SDPBackend.MATH, f"{prefix}-math")]


def run_sustained_attention(torch, t: Table, seconds: float) -> None:
    """FlashAttention-2 and cuDNN attention (causal, 8k, head dim 128) fwd+bwd back to back."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    seq, hd, heads = _n((8192, 128, 16), (64, 16, 2))
    q, k, v = (torch.randn(1, heads, seq, hd, device=DEVICE, dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))
    flops = 3.5 * 4.0 * heads * seq * seq * hd / 2
    for backend, kind in _backends(SDPBackend, "sustained-attention") or ((SDPBackend.FLASH_ATTENTION, "sustained-attention-fa2"),
                          (SDPBackend.CUDNN_ATTENTION, "sustained-attention-cudnn")):
        with sdpa_kernel([backend]):
            def step(q=q, k=k, v=v):
                out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                out.backward(torch.ones_like(out))
            _windows(torch, t, kind, step, flops, seconds, (seq, seq, hd, heads), "forward+backward")


def _has_scaled_mm(torch) -> bool:
    """Whether this torch has FP8 GEMMs (``torch._scaled_mm``); says so when it has not."""
    if hasattr(torch, "_scaled_mm"):
        return True
    print("FP8 needs torch._scaled_mm: skipped", flush=True)
    return False


def _llama3_8b_layer(torch, linear=None, compiled: bool = False):
    """A Llama 3 8B decoder layer (8192 tokens, GQA 32/8 heads of 128, SwiGLU 14336, RMSNorm;
    K/V expanded with ``repeat_interleave`` as torchtitan does), forward and backward with
    autograd.  ``linear(x, w, w8)`` runs the four weight GEMMs (default ``x @ w`` in bf16; ``w8``
    is the weight's FP8 cast, made here once, outside the step, where ``linear`` is given);
    ``compiled``: the forward (and with it, through AOTAutograd, the backward) under
    ``torch.compile``, as torchtitan runs its model, so casts fuse into the norms and activations.
    Returns ``(step, flops, shape)``: FLOPs are 3x the GEMMs' forward plus 3.5x the causal
    attention forward."""
    import torch.nn.functional as F
    tokens, h, heads, kv, hd, ffn = _n((8192, 4096, 32, 8, 128, 14336), (64, 64, 4, 2, 16, 96))
    bf16 = torch.bfloat16

    def w(*shape):
        return (torch.randn(*shape, device=DEVICE, dtype=bf16) * 0.02).requires_grad_(True)
    weights = [w(h, (heads + 2 * kv) * hd), w(heads * hd, h), w(h, 2 * ffn), w(ffn, h)]
    if linear is None:
        linear, casts = (lambda x, wt, _: x @ wt), [None] * 4
    else:
        cast_t = _fp8_casts(torch)[1]
        casts = [cast_t(wt.detach()) for wt in weights]
    (wqkv, wo, w13, w2), (cqkv, co, c13, c2) = weights, casts
    n1, n2 = (torch.ones(h, device=DEVICE, dtype=bf16, requires_grad=True) for _ in range(2))
    x = torch.randn(tokens, h, device=DEVICE, dtype=bf16, requires_grad=True)
    gemm_flops = 2.0 * tokens * h * ((heads + 2 * kv) * hd + heads * hd + 3 * ffn)
    attn_flops = 4.0 * heads * tokens * tokens * hd / 2

    def forward():
        a = F.rms_norm(x, (h,), n1)
        qkv = linear(a, wqkv, cqkv)
        q, k, v = qkv.split([heads * hd, kv * hd, kv * hd], dim=-1)
        q = q.view(1, tokens, heads, hd).transpose(1, 2)
        k = k.view(1, tokens, kv, hd).transpose(1, 2).repeat_interleave(heads // kv, dim=1)
        v = v.view(1, tokens, kv, hd).transpose(1, 2).repeat_interleave(heads // kv, dim=1)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(tokens, heads * hd)
        y = x + linear(o, wo, co)
        b = F.rms_norm(y, (h,), n2)
        g, u = linear(b, w13, c13).chunk(2, dim=-1)
        return y + linear(F.silu(g) * u, w2, c2)
    if compiled:
        forward = torch.compile(forward)

    def layer():
        out = forward()
        out.backward(torch.ones_like(out))
    return layer, 3.0 * gemm_flops + 3.5 * attn_flops, (tokens, h, ffn, 1)


def run_sustained_layer(torch, t: Table, seconds: float) -> None:
    """The Llama 3 8B layer (``_llama3_8b_layer``) back to back with each attention back end:
    the clock a training step's kernel mix holds, and the layer's time for comparison with
    cosearch's price of the same layer."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    layer, flops, shape = _llama3_8b_layer(torch)
    for backend, kind in _backends(SDPBackend, "sustained-layer") or ((SDPBackend.FLASH_ATTENTION, "sustained-layer-fa2"),
                          (SDPBackend.CUDNN_ATTENTION, "sustained-layer-cudnn")):
        with sdpa_kernel([backend]):
            _windows(torch, t, kind, layer, flops, seconds, shape, "llama3-8b layer fwd+bwd, 8192 tokens")


def run_sustained_layer_fp8(torch, t: Table, seconds: float) -> None:
    """The Llama 3 8B layer with its four weight GEMMs in FP8 (``_fp8_linear``: current-scaling
    casts with the transposed copies, FP8 forward, data- and weight-gradient GEMMs; attention,
    norms and SwiGLU in bf16, as Transformer Engine's FP8 recipes leave them), then the same
    layer in bf16 in the same run, each back to back with cuDNN attention."""
    if not _has_scaled_mm(torch):
        return
    from torch.nn.attention import SDPBackend, sdpa_kernel
    _, cast_t, how = _fp8_casts(torch)
    for name, linear in (("fp8", _fp8_linear(torch, cast_t)), ("bf16", None)):
        layer, flops, shape = _llama3_8b_layer(torch, linear)
        backends = _backends(SDPBackend, f"sustained-layer-{name}") or ((SDPBackend.CUDNN_ATTENTION,
                                                                         f"sustained-layer-{name}-cudnn"),)
        for backend, kind in backends:
            with sdpa_kernel([backend]):
                _windows(torch, t, kind, layer, flops, seconds, shape,
                         f"llama3-8b layer fwd+bwd, 8192 tokens, {name} linears" + (f" ({how})" if name == "fp8" else ""))


def run_sustained_layer_compiled(torch, t: Table, seconds: float) -> None:
    """The Llama 3 8B layer under ``torch.compile`` (as torchtitan runs it), FP8 linears then
    bf16, each back to back with cuDNN attention (FlashAttention-2 where cuDNN's fails): how
    much of the FP8 casts' cost the compiler's fusion into norms and activations removes."""
    if not _has_scaled_mm(torch):
        return
    from torch.nn.attention import SDPBackend, sdpa_kernel
    cast_t = _make_fp8_casts_eager(torch)[1]
    for name, linear in (("fp8", _fp8_linear(torch, cast_t)), ("bf16", None)):
        backends = _backends(SDPBackend, f"sustained-layer-compiled-{name}") or (
            (SDPBackend.CUDNN_ATTENTION, f"sustained-layer-compiled-{name}-cudnn"),
            (SDPBackend.FLASH_ATTENTION, f"sustained-layer-compiled-{name}-fa2"))
        for backend, kind in backends:
            try:
                with sdpa_kernel([backend]):
                    torch._dynamo.reset()
                    layer, flops, shape = _llama3_8b_layer(torch, linear, compiled=True)
                    _windows(torch, t, kind, layer, flops, seconds, shape,
                             f"llama3-8b layer fwd+bwd, 8192 tokens, {name} linears, torch.compile")
                break
            except Exception as exc:    # noqa: BLE001 - try the next attention back end
                print(f"{kind}: {type(exc).__name__}: {str(exc)[:300]}", flush=True)


#: FP8 GEMMs in the three layouts a trained linear layer runs (Transformer Engine's): forward
#: ``y = x W`` (m = tokens, n = out, k = in, fast accumulation), data gradient ``dx = dy W^T``
#: (m = tokens, n = in, k = out) and weight gradient ``dW = x^T dy`` (m = in, n = out, k =
#: tokens), both with full-precision accumulation.  (tokens, out, in, note): Llama 3 8B and
#: NeMo's GPT-3 5B at 8192 tokens, Nemotron-4 8B at tp 2.
FP8_TRAINING_LINEARS = [
    (8192, 6144, 4096, "llama3-8b qkv"), (8192, 4096, 4096, "llama3-8b proj"),
    (8192, 28672, 4096, "llama3-8b fc1 (gate+up)"), (8192, 4096, 14336, "llama3-8b fc2"),
    (8192, 12288, 4096, "gpt3-5b qkv"), (8192, 16384, 4096, "gpt3-5b fc1"), (8192, 4096, 16384, "gpt3-5b fc2"),
    (8192, 8192, 4096, "nemotron-8b tp2 fc1"), (8192, 4096, 8192, "nemotron-8b tp2 fc2"),
]

#: FP8 e4m3's largest finite value (the current-scaling target of a tensor's amax)
E4M3_MAX = 448.0


def _fp8_casts(torch):
    """Per-tensor current-scaling FP8 casts as Transformer Engine's ``Float8CurrentScaling``
    does them: the tensor's amax, the scale ``448 / amax``, the cast; ``cast_t`` also writes the
    transposed copy the weight-gradient GEMM needs on Hopper (TE's fused cast-transpose).
    Compiled with ``torch.compile`` on a GPU (Inductor fuses each into an amax reduction and
    one cast kernel, as TE's kernels are); eager off a GPU.  Returns ``(cast, cast_t, how)``,
    made once per run."""
    if DEVICE in _CASTS:
        return _CASTS[DEVICE]
    _CASTS[DEVICE] = _make_fp8_casts(torch)
    return _CASTS[DEVICE]


_CASTS: dict = {}


def _make_fp8_casts_eager(torch):
    """The eager current-scaling casts ``(cast, cast_t)`` (``_fp8_casts``)."""
    f8 = torch.float8_e4m3fn

    def cast(x):
        inv = x.abs().amax().float().clamp(min=1e-12) / E4M3_MAX
        return (x.float() / inv).to(f8), inv

    def cast_t(x):
        q, inv = cast(x)
        return q, q.t().contiguous(), inv
    return cast, cast_t


def _make_fp8_casts(torch):
    cast, cast_t = _make_fp8_casts_eager(torch)
    if not DEVICE.startswith("cuda"):
        return cast, cast_t, "eager casts"
    try:
        c, ct = torch.compile(cast), torch.compile(cast_t)
        x = torch.randn(256, 512, device=DEVICE, dtype=torch.bfloat16)
        c(x), ct(x)
        return c, ct, "compiled casts"
    except Exception as exc:    # noqa: BLE001 - Inductor may be missing: eager casts, said so
        print(f"torch.compile failed ({type(exc).__name__}: {str(exc)[:200]}): eager casts", flush=True)
        return cast, cast_t, "eager casts"


def _fp8_linear(torch, cast_t):
    """``linear(x, w, w8)``: ``x @ w`` (x ``[tokens, in]``, w ``[in, out]`` bf16) with FP8
    GEMMs forward and backward (``_scaled_mm``: first operand row-major, second column-major).
    ``w8 = (w8, w8t, inv)`` is the weight's cast, made once per step outside (TE caches it across
    microbatches).  The gradient of ``w`` is returned in bf16."""
    mm, bf16 = torch._scaled_mm, torch.bfloat16

    class Fp8Linear(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, w, w8, w8t, winv):
            x8, x8t, xinv = cast_t(x)
            ctx.save_for_backward(x8t, xinv, w8, winv)
            return mm(x8, w8t.t(), scale_a=xinv, scale_b=winv, out_dtype=bf16, use_fast_accum=True)

        @staticmethod
        def backward(ctx, dy):
            x8t, xinv, w8, winv = ctx.saved_tensors
            g8, g8t, ginv = cast_t(dy.contiguous())
            dx = mm(g8, w8.t(), scale_a=ginv, scale_b=winv, out_dtype=bf16)
            dw = mm(x8t, g8t.t(), scale_a=xinv, scale_b=ginv, out_dtype=bf16)
            return dx, dw, None, None, None

    def linear(x, w, w8):
        return Fp8Linear.apply(x, w, *w8)
    return linear


def run_fp8_training(torch, t: Table, peak: float) -> None:
    """FP8 GEMMs as a trained linear layer runs them (``FP8_TRAINING_LINEARS``, three layouts),
    each followed by the bf16 GEMM of the same shape (the same-run FP8/bf16 ratio), and the
    current-scaling casts on their own (``fp8-cast``: bytes = bf16 read twice (amax, cast) +
    FP8 written once or twice (with the transpose))."""
    if not _has_scaled_mm(torch):
        return
    f8, bf16, one = torch.float8_e4m3fn, torch.bfloat16, torch.ones((), device=DEVICE)
    linears = _n(FP8_TRAINING_LINEARS, [(64, 48, 32, "tiny")])
    for tokens, out, inn, note in linears:
        for layout, (m, n, k), fast in (("forward", (tokens, out, inn), True), ("dgrad", (tokens, inn, out), False),
                                        ("wgrad", (inn, out, tokens), False)):
            a = torch.randn(m, k, device=DEVICE).to(f8)
            b = torch.randn(n, k, device=DEVICE).to(f8).t()
            f = 2.0 * m * n * k
            fn = lambda a=a, b=b, fast=fast: torch._scaled_mm(a, b, scale_a=one, scale_b=one,  # noqa: E731
                                                              out_dtype=bf16, use_fast_accum=fast)
            s = timer(torch, fn, iters_for(f, 2 * peak * 0.6))
            t.add("gemm-fp8", m, n, k, 1, 1, s, flops=f,
                  note=f"{note} {layout}{', fast accumulation' if fast else ''}")
            a16, b16 = torch.randn(m, k, device=DEVICE, dtype=bf16), torch.randn(k, n, device=DEVICE, dtype=bf16)
            s = timer(torch, lambda a=a16, b=b16: torch.matmul(a, b), iters_for(f, peak * 0.6))
            t.add("gemm", m, n, k, 1, 2, s, flops=f, nbytes=2.0 * (m * k + k * n + m * n), note=f"{note} {layout}")
    cast, cast_t, how = _fp8_casts(torch)
    for tokens, width in _n(((8192, 4096), (8192, 14336), (8192, 28672), (2048, 4096)), ((64, 32),)):
        x = torch.randn(tokens, width, device=DEVICE, dtype=bf16)
        el = float(tokens * width)
        s = timer(torch, lambda x=x: cast(x), iters_for(5.0 * el, 3e12))
        t.add("fp8-cast", tokens, width, 1, 1, 2, s, nbytes=5.0 * el, note=f"amax + cast ({how})")
        s = timer(torch, lambda x=x: cast_t(x), iters_for(6.0 * el, 3e12))
        t.add("fp8-cast", tokens, width, 1, 1, 2, s, nbytes=6.0 * el, note=f"amax + cast + transposed copy ({how})")


def run_fp8_cast_passes(torch, t: Table) -> None:
    """The passes of an FP8 cast apart, each compiled by ``torch.compile`` (eager off a GPU):
    the amax reduction alone (bytes: bf16 read), a cast with a given scale as delayed scaling
    runs it (bf16 read, FP8 written) and the same with the transposed copy (FP8 written twice),
    at three training sizes: which pass makes ``fp8-cast`` slow."""
    f8, bf16 = torch.float8_e4m3fn, torch.bfloat16

    def amax(x):
        return x.abs().amax().float()

    def cast_scaled(x, scale):
        return (x.float() * scale).to(f8)

    def cast_scaled_t(x, scale):
        q = (x.float() * scale).to(f8)
        return q, q.t().contiguous()
    how = "eager"
    if DEVICE.startswith("cuda"):
        amax, cast_scaled, cast_scaled_t = (torch.compile(f) for f in (amax, cast_scaled, cast_scaled_t))
        how = "compiled"
    scale = torch.full((), 2.0, device=DEVICE)
    for tokens, width in _n(((8192, 4096), (8192, 14336), (8192, 28672)), ((64, 32),)):
        x = torch.randn(tokens, width, device=DEVICE, dtype=bf16)
        el = float(tokens * width)
        for note, fn, nb in (("amax alone", lambda x=x: amax(x), 2.0 * el),
                             ("cast with a given scale (delayed scaling)", lambda x=x: cast_scaled(x, scale), 3.0 * el),
                             ("cast with a given scale + transposed copy", lambda x=x: cast_scaled_t(x, scale), 4.0 * el)):
            s = timer(torch, fn, iters_for(nb, 3e12))
            t.add("fp8-cast", tokens, width, 1, 1, 2, s, nbytes=nb, note=f"{note} ({how})")


def run_vector_passes(torch, t: Table, hbm: float) -> None:
    """A layer's memory-bound kernels forward and backward apart, at training shapes, eager and
    under ``torch.compile``: LayerNorm, RMSNorm, GELU (tanh) and SwiGLU's ``silu(g) * u``
    (bytes: the tensors each pass must read and write in bf16 — forward: input and output
    (SwiGLU: two inputs); backward: input, output gradient and input gradient (SwiGLU: both
    inputs and the output gradient read, two input gradients written); the norms' weight
    gradients, a reduction over tokens, are not counted).  The backward is timed as forward +
    backward less the forward."""
    import torch.nn.functional as F
    bf16 = torch.bfloat16

    def make(kind, width):
        if kind == "swiglu":
            return lambda g, u: F.silu(g) * u, 2
        if kind == "gelu":
            return lambda x: F.gelu(x, approximate="tanh"), 1
        w = torch.ones(width, device=DEVICE, dtype=bf16, requires_grad=True)
        b = torch.zeros(width, device=DEVICE, dtype=bf16, requires_grad=True)
        if kind == "layer_norm":
            return lambda x: F.layer_norm(x, (width,), w, b), 1
        return lambda x: F.rms_norm(x, (width,), w), 1
    shapes = {"layer_norm": ((8192, 4096), (8192, 12288)), "rms_norm": ((8192, 4096), (8192, 8192)),
              "gelu": ((8192, 16384), (8192, 49152)), "swiglu": ((8192, 14336), (8192, 28672))}
    for kind, sizes in shapes.items():
        for tokens, width in _n(sizes, ((32, 64),)):
            eager, n_in = make(kind, width)
            for how, fn in (("eager", eager), ("compiled", torch.compile(eager) if DEVICE.startswith("cuda") else None)):
                if fn is None:
                    continue
                xs = [torch.randn(tokens, width, device=DEVICE, dtype=bf16, requires_grad=True) for _ in range(n_in)]
                el = float(tokens * width)
                with torch.no_grad():
                    sf = timer(torch, lambda fn=fn, xs=xs: fn(*xs), iters_for(2.0 * (n_in + 1) * el, hbm * 0.5))
                g = torch.randn(tokens, width, device=DEVICE, dtype=bf16)
                # forward and backward each time (a compiled backward cannot be replayed on one
                # graph); the backward is the difference
                sfb = timer(torch, lambda fn=fn, xs=xs, g=g: torch.autograd.grad(fn(*xs), xs, g),
                            iters_for(2.0 * (3 * n_in + 2) * el, hbm * 0.5))
                sb = max(sfb - sf, 1e-9)
                t.add("vector-pass", tokens, width, 1, n_in, 2, sf, nbytes=2.0 * (n_in + 1) * el,
                      note=f"{kind} forward ({how})")
                t.add("vector-pass", tokens, width, 1, n_in, 2, sb, nbytes=2.0 * (2 * n_in + 1) * el,
                      note=f"{kind} backward ({how})")


def _megatron_style_ce(torch):
    """Cross-entropy written pass by pass as Megatron-Core's single-rank
    ``vocab_parallel_cross_entropy`` runs it: upcast, max, subtract in place, exp in place, sum,
    normalise in place (the softmax kept for the backward); backward: subtract one at the
    targets, scale by the incoming gradient in place, and the upcast's gradient back to bf16."""

    class MegatronCE(torch.autograd.Function):
        @staticmethod
        def forward(ctx, logits, target):
            x = logits.float()
            mx = x.max(dim=-1, keepdim=True)[0]
            x -= mx
            picked = x.gather(-1, target[:, None])[:, 0]
            torch.exp(x, out=x)
            total = x.sum(dim=-1)
            loss = torch.log(total) - picked
            x.div_(total[:, None])
            ctx.save_for_backward(x, target)
            return loss

        @staticmethod
        def backward(ctx, grad):
            softmax, target = ctx.saved_tensors
            rows = torch.arange(softmax.shape[0], device=softmax.device)
            softmax[rows, target] -= 1.0
            softmax.mul_(grad[:, None])
            return softmax, None
    return lambda logits, target: MegatronCE.apply(logits, target)


def run_cross_entropy(torch, t: Table) -> None:
    """The loss over 8192 tokens' logits, forward + backward (bf16 logits): PyTorch's
    ``F.cross_entropy`` on upcast logits (torchtitan's loss), the same on bf16 logits, and
    Megatron-Core's passes (``_megatron_style_ce``); bytes: the bf16 logits read and their
    gradient written (4 per logit), the rate being what cosearch's cross-entropy charge is
    checked against."""
    import torch.nn.functional as F
    megatron = _megatron_style_ce(torch)
    tokens = _n(8192, 32)
    for vocab in _n((32768, 131072), (500,)):
        logits = torch.randn(tokens, vocab, device=DEVICE, dtype=torch.bfloat16, requires_grad=True)
        target = torch.randint(0, vocab, (tokens,), device=DEVICE)
        for note, fn in (("F.cross_entropy on logits.float()", lambda x, y: F.cross_entropy(x.float(), y)),
                         ("F.cross_entropy on bf16 logits", lambda x, y: F.cross_entropy(x, y)),
                         ("Megatron-Core's passes (fp32)", lambda x, y: megatron(x, y).mean())):
            def step(fn=fn, logits=logits, target=target):
                return torch.autograd.grad(fn(logits, target), (logits,))
            s = timer(torch, step, 3)
            t.add("cross-entropy", tokens, vocab, 1, 1, 2, s, nbytes=4.0 * tokens * vocab,
                  note=f"{note}, forward+backward")


def run_sustained_fp8(torch, t: Table, seconds: float) -> None:
    """An 8192^3 FP8 GEMM back to back: the clock FP8 tensor cores hold at the power limit."""
    if not _has_scaled_mm(torch):
        return
    n, f8, one = _n(8192, 64), torch.float8_e4m3fn, torch.ones((), device=DEVICE)
    a = torch.randn(n, n, device=DEVICE).to(f8)
    b = torch.randn(n, n, device=DEVICE).to(f8).t()
    _windows(torch, t, "sustained-fp8", lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16),
             2.0 * n ** 3, seconds, (n, n, n, 1), f"{n}^3 e4m3 _scaled_mm", dtype_bytes=1)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--chip", required=True, help="the chip's name as cosearch's presets spell it (H200)")
    p.add_argument("--out", required=True, help="CSV to write")
    p.add_argument("--peak-tflops", type=float, default=989.0, help="dense bf16 peak, to size the loops")
    p.add_argument("--hbm-GBps", type=float, default=4800.0, help="datasheet HBM bandwidth, to size the loops")
    p.add_argument("--sustain-s", type=float, default=30.0)
    p.add_argument("--only", default="gemm,fp8,bmm,attention,memory,vector,sustained",
                   help="comma-separated sections: " + ", ".join(SECTIONS))
    p.add_argument("--device", default="cuda", help="torch device (cpu: a smoke test of the script, with --tiny)")
    p.add_argument("--tiny", action="store_true", help="tiny shapes: check the script runs, in seconds")
    a = p.parse_args(argv)
    unknown = [x for x in a.only.split(",") if x not in SECTIONS]
    if unknown:
        print(f"unknown section(s) {unknown}; choose from {', '.join(SECTIONS)}", file=sys.stderr)
        return 2
    global DEVICE, TINY, GEMM_SHAPES, FP8_SHAPES, BMM_SHAPES, ATTN
    DEVICE, TINY = a.device, bool(a.tiny)
    if TINY:
        GEMM_SHAPES = [(64, 32, 64, "tiny"), (32, 64, 48, "tiny"), (64, 64, 63, "odd K (unaligned)")]
        FP8_SHAPES = [(64, 64, 64, "tiny")]
        BMM_SHAPES = [(32, 32, 16, 4, "tiny")]
        ATTN = [(64, 16), (128, 16)]
    import torch
    cuda = DEVICE.startswith("cuda")
    if cuda and not torch.cuda.is_available():
        print("no CUDA GPU: nothing to measure (--device cpu --tiny checks the script itself)", file=sys.stderr)
        return 2
    nvml = Nvml() if cuda else Nvml.off()
    facts = {"torch": torch.__version__, "device": DEVICE, "tiny": str(TINY), **nvml.facts()}
    if cuda:
        facts.update({"cuda": str(torch.version.cuda),
                      "cublas": str(getattr(torch.backends.cuda, "preferred_blas_library", lambda: "")()),
                      "cudnn": str(torch.backends.cudnn.version()), "device_name": torch.cuda.get_device_name(0),
                      "sm_count": str(torch.cuda.get_device_properties(0).multi_processor_count)})
    with open(os.path.splitext(a.out)[0] + "_facts.txt", "w") as fh:
        fh.write("\n".join(f"{k}: {v}" for k, v in facts.items()) + "\n")
    print(facts, flush=True)
    t = Table(a.out, nvml)
    peak, hbm = a.peak_tflops * 1e12, a.hbm_GBps * 1e9
    steps = {"gemm": lambda: run_gemms(torch, t, peak), "fp8": lambda: run_fp8(torch, t, peak),
             "bmm": lambda: run_bmm(torch, t, peak), "attention": lambda: run_attention(torch, t, peak),
             "memory": lambda: run_memory(torch, t, hbm), "sustained": lambda: run_sustained(torch, t, a.sustain_s),
             "vector": lambda: run_vector(torch, t, hbm),
             "gemm-sweep": lambda: run_gemm_sweep(torch, t, peak),
             "attention-head-dims": lambda: run_attention_head_dims(torch, t, peak),
             "sustained-attention": lambda: run_sustained_attention(torch, t, a.sustain_s),
             "sustained-layer": lambda: run_sustained_layer(torch, t, a.sustain_s),
             "fp8-training": lambda: run_fp8_training(torch, t, peak),
             "fp8-cast-passes": lambda: run_fp8_cast_passes(torch, t),
             "vector-passes": lambda: run_vector_passes(torch, t, hbm),
             "cross-entropy": lambda: run_cross_entropy(torch, t),
             "sustained-fp8": lambda: run_sustained_fp8(torch, t, a.sustain_s),
             "sustained-layer-fp8": lambda: run_sustained_layer_fp8(torch, t, a.sustain_s),
             "sustained-layer-compiled": lambda: run_sustained_layer_compiled(torch, t, a.sustain_s)}
    for name in a.only.split(","):
        t0 = time.time()
        try:
            steps[name]()
        except Exception as exc:    # noqa: BLE001 - keep the other sections
            print(f"section {name} failed: {type(exc).__name__}: {exc}", flush=True)
        print(f"section {name}: {time.time() - t0:.1f} s", flush=True)
    return 0


SECTIONS = ("gemm", "fp8", "bmm", "attention", "memory", "vector", "gemm-sweep", "attention-head-dims",
            "sustained", "sustained-attention", "sustained-layer", "fp8-training", "sustained-fp8",
            "sustained-layer-fp8", "sustained-layer-compiled", "fp8-cast-passes", "vector-passes", "cross-entropy")


if __name__ == "__main__":
    raise SystemExit(main())
