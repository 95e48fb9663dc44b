"""Measure a model's kernels and the collectives on the user's own GPUs, in the CSV formats
that :func:`cosearch.cost.calibrate` (and ``cosearch calibrate``) read.

* :func:`op_shapes` lists the distinct GEMMs and attention kernels one layer (forward and
  backward) and the LM head run for a model and plan, from cosearch's own op graph
  (:func:`cosearch.graph.build`), so the measured shapes are exactly the ones cosearch prices.
* :func:`measure_ops` times each with torch: weight GEMMs as ``torch.matmul`` (FP8 ones as
  ``torch._scaled_mm`` where the GPU has FP8 tensor cores), unfused attention matmuls as
  batched ``torch.matmul`` (``gemm`` rows with their ``batch``: cosearch prices them as the
  GEMMs they are), fused attention as ``scaled_dot_product_attention`` (causal; the backward
  timed on its own).  Each row: ``kind, m, n, k, batch, dtype_bytes, seconds`` plus the op's
  name, the TFLOP/s reached, ``head_dim`` (a fused attention kernel's; 0 otherwise) and
  ``sm_clock_mhz`` (the SM clock NVML reads right after the kernel; empty without NVML), so
  :func:`cosearch.cost.calibrate` fits per-clock efficiencies.
* :func:`measure_collectives` times all-reduce, all-gather, reduce-scatter and all-to-all over
  every rank of an initialised ``torch.distributed`` group (run under ``torchrun``); rows
  ``collective, bytes, group, link, seconds`` with ``bytes`` the full buffer as
  :func:`cosearch.comm.collective_s` counts it.  Collectives the backend lacks (gloo has no
  reduce-scatter) are skipped and named.

Times are the median of ``iters`` runs after ``warmup`` runs (CUDA events on a GPU, the
wall clock on a CPU).  ``cosearch measure`` is the command-line entry point.
"""

from __future__ import annotations

import csv
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .models import ModelConfig

__all__ = ["OpShape", "op_shapes", "measure_ops", "measure_collectives", "MeasureResult", "measure",
           "OP_COLUMNS", "COLLECTIVE_COLUMNS", "DEFAULT_COLLECTIVE_BYTES"]

#: Columns of the op CSV (what calibrate reads, then the op's name and its rate).
OP_COLUMNS = ("kind", "m", "n", "k", "batch", "dtype_bytes", "seconds", "name", "tflops", "head_dim", "sm_clock_mhz")
#: Columns of the collective CSV.
COLLECTIVE_COLUMNS = ("collective", "bytes", "group", "link", "seconds")
#: Message sizes of the collective sweep: 64 KiB to 1 GiB, every factor of 4 (the latency-bound
#: end, the knee and the bandwidth-bound end of a latency + bandwidth curve).
DEFAULT_COLLECTIVE_BYTES = tuple(2 ** e for e in range(16, 31, 2))
_COLLECTIVE_KINDS = ("allreduce", "allgather", "reducescatter", "alltoall")


@dataclass(frozen=True)
class OpShape:
    """One kernel to time.  ``kind``: ``gemm`` (a weight GEMM ``(m x k) @ (k x n)``, ``batch``
    times; the graph's ``bmm``, unfused attention's matmuls, are these too), ``attention``
    (``fused``: a causal fused attention kernel over ``batch`` heads of ``m`` queries, ``n`` keys
    and head dim ``head_dim``, forward or, with ``backward``, its backward; not fused: a matmul
    timed as a GEMM that :func:`cosearch.cost.calibrate` fits to the attention efficiency).
    ``k`` is the graph's (FLOPs = 2 m n k batch)."""

    name: str
    kind: str
    m: int
    n: int
    k: int
    batch: int
    dtype_bytes: int
    fused: bool = False
    backward: bool = False
    head_dim: int = 0

    def __post_init__(self) -> None:
        from ._validate import MAX_DIM, choice, flag, nonneg_int, positive_int
        choice("OpShape.kind", self.kind, ("gemm", "attention"))
        for f in ("m", "n", "k", "batch"):
            positive_int(f"OpShape.{f}", getattr(self, f), MAX_DIM)
        if isinstance(self.dtype_bytes, bool) or self.dtype_bytes not in (0.5625, 1, 2):
            raise ValueError(f"OpShape.dtype_bytes is 2 (bf16), 1 (FP8) or 0.5625 (NVFP4), got {self.dtype_bytes!r}")
        for f in ("fused", "backward"):
            flag(f"OpShape.{f}", getattr(self, f))
        nonneg_int("OpShape.head_dim", self.head_dim, MAX_DIM)
        if self.fused and not self.head_dim:
            raise ValueError("OpShape: a fused attention kernel needs its head_dim")

    @property
    def flops(self) -> float:
        return 2.0 * self.m * self.n * self.k * self.batch


def op_shapes(model: ModelConfig | str, tp: int = 1, microbatch: int = 1, precision: str = "bf16",
              flash_attention: bool = True, sequence_parallel: bool = False) -> list[OpShape]:
    """The distinct GEMM and attention kernels of one layer (forward and backward) and of the
    LM head, as cosearch's graph has them for this plan (first occurrence's name kept)."""
    from . import graph
    from .models import preset
    cfg = preset(model)
    seen: dict[tuple, OpShape] = {}
    for part in ("layer", "head"):
        for phase in ("fwd", "bwd"):
            g = graph.build(cfg, tp=tp, microbatch=microbatch, phase=phase, part=part,
                            sequence_parallel=sequence_parallel, flash_attention=flash_attention,
                            precision=precision)
            for op in g.ops:
                if op.kind in ("gemm", "bmm"):  # a bmm is priced as a batched GEMM (graph._KIND_CODE)
                    s = OpShape(op.name, "gemm", op.m, op.n, op.k, op.batch, op.dtype_bytes)
                elif op.kind == "attention":
                    bwd = op.name.endswith(".grad")
                    d = op.head_dim
                    s = OpShape(op.name, "attention", op.m, op.n, op.k, op.batch, op.dtype_bytes,
                                fused=True, backward=bwd, head_dim=d)
                else:
                    continue
                key = (s.kind, s.m, s.n, s.k, s.batch, s.dtype_bytes, s.fused, s.backward)
                seen.setdefault(key, s)
    return list(seen.values())


def _timer(device: str) -> Callable[[Callable[[], object], int, int], float]:
    """Median seconds of ``fn`` over ``iters`` runs after ``warmup`` runs on ``device``."""
    import statistics

    import torch

    def run(fn, warmup, iters):
        for _ in range(warmup):
            fn()
        times = []
        if device.startswith("cuda"):
            torch.cuda.synchronize()
            for _ in range(iters):
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                fn()
                b.record()
                b.synchronize()
                times.append(a.elapsed_time(b) / 1e3)
        else:
            for _ in range(iters):
                t0 = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t0)
        return float(statistics.median(times))
    return run


def _check_repeats(warmup, iters) -> None:
    from ._validate import nonneg_int, positive_int
    nonneg_int("warmup", warmup, 100_000)
    positive_int("iters", iters, 100_000)


def _op_fn(s: OpShape, device: str):
    """A closure running the kernel ``s``, or None with the reason when it cannot run here."""
    import torch
    bf16 = torch.bfloat16
    if s.fused:
        import torch.nn.functional as F
        d = s.head_dim
        q, k, v = (torch.randn(1, s.batch, n, d, device=device, dtype=bf16, requires_grad=s.backward)
                   for n in (s.m, s.n, s.n))
        if not s.backward:
            def fwd():
                with torch.no_grad():
                    return F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return fwd, None
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        grad = torch.randn_like(out)
        return (lambda: torch.autograd.grad(out, (q, k, v), grad, retain_graph=True)), None
    if s.dtype_bytes == 2:
        a = torch.randn(s.batch, s.m, s.k, device=device, dtype=bf16)
        b = torch.randn(s.batch, s.k, s.n, device=device, dtype=bf16)
        if s.batch == 1:
            a, b = a[0], b[0]
        return (lambda: torch.matmul(a, b)), None
    if s.dtype_bytes == 1:
        if not (device.startswith("cuda") and hasattr(torch, "_scaled_mm")
                and torch.cuda.get_device_capability(device) >= (8, 9)):
            return None, "FP8 GEMMs need an FP8 GPU (compute capability 8.9+) and torch._scaled_mm"
        f8 = torch.float8_e4m3fn
        a = torch.randn(s.m, s.k, device=device).to(f8)
        b = torch.randn(s.n, s.k, device=device).to(f8).t()      # column-major, as _scaled_mm wants
        one = torch.ones((), device=device)

        def fp8():
            for _ in range(s.batch):
                torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=bf16)
        return fp8, None
    return None, f"{s.dtype_bytes}-byte operands (NVFP4) have no torch kernel to time"


def _sm_clock_reader(device: str) -> Callable[[], str]:
    """A function returning the GPU's current SM clock in MHz (NVML, ``nvidia-ml-py``) as text,
    or ``""`` where it cannot be read (a CPU, no NVML)."""
    if not device.startswith("cuda"):
        return lambda: ""
    try:
        import pynvml
        import torch
        pynvml.nvmlInit()
        index = torch.device(device).index
        handle = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device() if index is None else index)
    except Exception:   # noqa: BLE001 - NVML is optional: the column stays empty
        return lambda: ""

    def read() -> str:
        try:
            return str(pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM))
        except Exception:   # noqa: BLE001
            return ""
    return read


def _write_csv(path: str, columns: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(columns)
        w.writerows(rows)
    os.replace(tmp, path)


def measure_ops(shapes: Sequence[OpShape], path: str, device: str | None = None, warmup: int = 3,
                iters: int = 10, progress: bool = True) -> tuple[int, tuple[str, ...]]:
    """Time every shape on ``device`` (default: ``cuda`` if available, else ``cpu``) and write the
    op CSV to ``path``.  Returns (rows written, the skipped shapes with their reasons)."""
    import torch
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    check_device(device)
    _check_repeats(warmup, iters)
    run = _timer(device)
    clock = _sm_clock_reader(device)
    rows, skipped = [], []
    bar = None
    if progress:
        from tqdm.auto import tqdm
        bar = tqdm(total=len(shapes), desc="ops", unit="op", leave=False)
    try:
        for s in shapes:
            fn, why = _op_fn(s, device)
            if fn is None:
                skipped.append(f"{s.name} ({s.m}x{s.n}x{s.k}): {why}")
            else:
                t = run(fn, warmup, iters)
                rows.append((s.kind, s.m, s.n, s.k, s.batch, s.dtype_bytes, f"{t:.9g}", s.name,
                             f"{s.flops / t / 1e12:.4g}", s.head_dim if s.fused else 0, clock()))
                _write_csv(path, OP_COLUMNS, rows)      # each finished row is kept (Ctrl-C loses none)
            if bar is not None:
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    if not rows:
        _write_csv(path, OP_COLUMNS, rows)
    return len(rows), tuple(skipped)


def _collective_fn(kind: str, full, part, out):
    """A closure running collective ``kind`` on these buffers (``full``: the whole message,
    ``part``: one rank's share, ``out``: a receive buffer the size of ``full``)."""
    import torch.distributed as dist
    return {"allreduce": lambda: dist.all_reduce(full),
            "allgather": lambda: dist.all_gather_into_tensor(out, part),
            "reducescatter": lambda: dist.reduce_scatter_tensor(part, full),
            "alltoall": lambda: dist.all_to_all_single(out, full)}[kind]


def measure_collectives(path: str | None, sizes_bytes: Sequence[int] = DEFAULT_COLLECTIVE_BYTES,
                        kinds: Sequence[str] = _COLLECTIVE_KINDS, warmup: int = 3,
                        iters: int = 10) -> tuple[int, tuple[str, ...]]:
    """Time each collective at each size over the whole initialised ``torch.distributed`` group
    (every rank calls this; rank 0 writes ``path``).  A collective's time is the slowest rank's
    median.  ``link`` is ``intra`` when the group fits on one node (``LOCAL_WORLD_SIZE``, as
    torchrun sets it), else ``inter``.  Returns (rows written, skipped collectives with reasons)."""
    import torch
    import torch.distributed as dist

    from ._validate import positive_int, values_of
    # the arguments first: a typo is found before a torchrun job is launched for it
    kinds = values_of("kinds", kinds, (str,))
    bad = sorted(set(kinds) - set(_COLLECTIVE_KINDS))
    if bad or not kinds:
        raise ValueError(f"unknown collective(s) {bad}; choose from {_COLLECTIVE_KINDS}" if bad else
                         f"kinds is empty: choose from {_COLLECTIVE_KINDS}")
    sizes_bytes = [positive_int("each of sizes_bytes", x, 1 << 40) for x in values_of("sizes_bytes", sizes_bytes)]
    if not sizes_bytes:
        raise ValueError("sizes_bytes is empty: give at least one message size in bytes")
    _check_repeats(warmup, iters)
    if not dist.is_available() or not dist.is_initialized():
        raise ValueError("measure_collectives needs an initialised torch.distributed group (run under torchrun)")
    n = dist.get_world_size()
    rank = dist.get_rank()
    backend = dist.get_backend()
    device = f"cuda:{torch.cuda.current_device()}" if backend == "nccl" else "cpu"
    local = int(os.environ.get("LOCAL_WORLD_SIZE", n))
    link = "intra" if n <= local else "inter"
    run = _timer(device)
    rows, skipped = [], []
    for kind in kinds:
        for size in sizes_bytes:
            elems = max(n, int(size) // 2 // n * n)          # bf16 elements, a multiple of the group
            full = torch.ones(elems, dtype=torch.bfloat16, device=device)
            part = torch.ones(elems // n, dtype=torch.bfloat16, device=device)
            out = torch.empty_like(full)
            fn = _collective_fn(kind, full, part, out)
            try:
                fn()
            except (RuntimeError, NotImplementedError, ValueError) as exc:
                skipped.append(f"{kind} on {backend}: {str(exc).splitlines()[0][:120]}")
                break
            dist.barrier()
            t = torch.tensor([run(fn, warmup, iters)], dtype=torch.float64)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            rows.append((kind, elems * 2, n, link, f"{float(t[0]):.9g}"))
    if rank == 0 and path is not None:
        _write_csv(path, COLLECTIVE_COLUMNS, rows)
    return len(rows), tuple(skipped)


@dataclass(frozen=True)
class MeasureResult:
    """What :func:`measure` wrote: the op CSV (and the collective CSV when a group of several
    ranks was running), how many rows each holds, and what was skipped and why."""

    op_csv: str | None
    op_rows: int
    collective_csv: str | None
    collective_rows: int
    skipped: tuple[str, ...]


def check_device(device: str | None) -> None:
    """Refuse a torch device this machine does not have, naming what it has."""
    if device is None:
        return
    import torch
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(f"device {device!r} is not a torch device ({exc})") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device {device!r}: this machine has no CUDA GPU that torch can use "
                             f"(torch {torch.__version__}{'' if torch.version.cuda else ', a CPU-only build'}); "
                             "run on a GPU machine, or --device cpu to try the format")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ValueError(f"device {device!r}: only {torch.cuda.device_count()} CUDA device(s)")
    elif dev.type != "cpu":
        raise ValueError(f"device {device!r}: measure runs on cuda or cpu")


def measure(model: ModelConfig | str, out_dir: str, tp: int = 1, microbatch: int = 1, precision: str = "bf16",
            flash_attention: bool = True, sequence_parallel: bool = False, device: str | None = None,
            warmup: int = 3, iters: int = 10, collective_bytes: Sequence[int] = DEFAULT_COLLECTIVE_BYTES,
            progress: bool = True) -> MeasureResult:
    """Measure ``model``'s kernels (rank 0 of a group, or the only process) into
    ``out_dir/ops.csv`` and, when running under ``torchrun`` with several ranks, the collectives
    into ``out_dir/collectives.csv``.  Feed them to ``cosearch calibrate --gemm-csv ops.csv
    --collective-csv collectives.csv``."""
    if not os.path.isdir(out_dir):
        raise ValueError(f"output folder {out_dir!r} does not exist")
    import torch
    import torch.distributed as dist
    check_device(device)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    started = False
    if world > 1 and dist.is_available() and not dist.is_initialized():
        if torch.cuda.is_available() and (device is None or device.startswith("cuda")):
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
            dist.init_process_group("nccl")
        else:
            dist.init_process_group("gloo")
        started = True
    try:
        rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
        if device is None and torch.cuda.is_available():
            device = f"cuda:{torch.cuda.current_device()}"
        op_csv, op_rows, skipped = None, 0, ()
        if rank == 0:
            shapes = op_shapes(model, tp, microbatch, precision, flash_attention, sequence_parallel)
            op_csv = os.path.join(out_dir, "ops.csv")
            op_rows, skipped = measure_ops(shapes, op_csv, device, warmup, iters, progress)
        coll_csv, coll_rows = None, 0
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            dist.barrier()
            coll_csv = os.path.join(out_dir, "collectives.csv") if rank == 0 else None
            coll_rows, sk = measure_collectives(coll_csv, collective_bytes, warmup=warmup, iters=iters)
            skipped = tuple(skipped) + sk
    finally:
        if started:
            dist.destroy_process_group()
    return MeasureResult(op_csv, op_rows, coll_csv, coll_rows, tuple(skipped))
