"""cosearch measure: the shapes it times are the model's, its CSVs are what calibrate reads
(tiny runs on the CPU; the collectives over two gloo ranks on 127.0.0.1)."""

import csv
import os
import socket
import subprocess
import sys

import numpy as np
import pytest

from cosearch import cluster, comm, cost, graph, hardware, measure, models

TINY = models.ModelConfig(name="tiny", num_layers=1, hidden=32, heads=2, ffn_hidden=64, vocab=96, seq_len=16)


def _read(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def test_op_shapes_are_the_layer_and_head_gemms_by_hand():
    """GPT layer at tp 1: forward QKV (s x 3h x h), attention out (s x h x h), FC1 (s x f x h),
    FC2 (s x h x f) and the LM head (s x V x h); backward adds the weight gradients (k = s) and
    the input gradients, which repeat forward shapes except QKV's and the head's.  The 96-word
    vocabulary is padded to 128 (graph.vocab_shard)."""
    s, h, f, V = 16, 32, 64, 128
    shapes = measure.op_shapes(TINY, flash_attention=True)
    gemms = {(x.m, x.n, x.k) for x in shapes if x.kind == "gemm"}
    want = {(s, 3 * h, h), (s, h, h), (s, f, h), (s, h, f), (s, V, h),            # forward
            (h, 3 * h, s), (h, h, s), (h, f, s), (f, h, s), (h, V, s),            # weight gradients
            (s, h, 3 * h), (s, h, V)}                                             # new input gradients
    assert gemms == want
    fused = [x for x in shapes if x.fused]
    assert [(x.backward, x.m, x.n, x.head_dim, x.batch) for x in fused] == [(False, s, s, 16, 2), (True, s, s, 16, 2)]
    assert fused[1].k == 40             # 2.5 x head dim: the backward's FLOPs
    unfused = measure.op_shapes(TINY, flash_attention=False)
    assert not [x for x in unfused if x.kind == "attention"]        # unfused attention: batched GEMMs
    assert {(x.m, x.n, x.k, x.batch) for x in unfused if x.kind == "gemm"} >= {(s, s, 16, 2), (s, 16, s, 2)}  # QK^T, PV


def test_op_shapes_follow_the_plan():
    a = {(x.m, x.n, x.k) for x in measure.op_shapes(TINY, tp=2, microbatch=2) if x.kind == "gemm"}
    assert (32, 48, 32) in a            # QKV split over two ranks, two sequences of 16
    fp8 = measure.op_shapes(TINY, precision="fp8")
    assert {x.dtype_bytes for x in fp8 if x.name == "qkv"} == {1}
    assert {x.dtype_bytes for x in fp8 if x.name == "lm_head"} == {2}      # the head stays bf16


def test_measure_ops_on_cpu_writes_what_calibrate_reads(tmp_path):
    pytest.importorskip("torch")
    shapes = measure.op_shapes(TINY)
    path = str(tmp_path / "ops.csv")
    n, skipped = measure.measure_ops(shapes, path, device="cpu", warmup=1, iters=2, progress=False)
    assert n == len(shapes) and skipped == ()
    rows = _read(path)
    assert tuple(rows[0]) == measure.OP_COLUMNS and len(rows) == n
    for r, s in zip(rows, shapes):
        assert (r["kind"], int(r["m"]), int(r["n"]), int(r["k"]), int(r["batch"])) == (s.kind, s.m, s.n, s.k, s.batch)
        assert float(r["seconds"]) > 0
        assert float(r["tflops"]) == pytest.approx(s.flops / float(r["seconds"]) / 1e12, rel=1e-3)
    assert all(r["sm_clock_mhz"] == "" for r in rows)           # no NVML clock on a CPU
    assert {int(r["head_dim"]) for r in rows if r["kind"] == "attention"} == {16}   # fused, head dim 16
    cal = cost.calibrate(hardware.A100, path)
    assert cal.gemm_rows == n and len(cal.residuals) == n
    assert cal.chip.efficiency.sustained_clock == 1.0           # no clocks: datasheet-clock fractions


def test_measure_ops_skips_fp8_without_an_fp8_gpu(tmp_path):
    pytest.importorskip("torch")
    shapes = [s for s in measure.op_shapes(TINY, precision="fp8") if s.name in ("qkv", "lm_head")]
    n, skipped = measure.measure_ops(shapes, str(tmp_path / "o.csv"), device="cpu", warmup=0, iters=1,
                                     progress=False)
    assert n == 1 and len(skipped) == 1 and "qkv" in skipped[0] and "FP8" in skipped[0]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_WORKER = r"""
import os, sys, torch.distributed as dist
from cosearch import measure
dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d", rank=int(sys.argv[1]), world_size=2)
n, skipped = measure.measure_collectives(sys.argv[2] if sys.argv[1] == "0" else None, (4096, 8 << 20),
                                         warmup=1, iters=2)
print("ROWS", n, "SKIPPED", "|".join(skipped))
dist.destroy_process_group()
"""


def test_collectives_over_two_gloo_ranks(tmp_path):
    """Two ranks on 127.0.0.1: every collective gloo has is timed at each size, any it lacks is
    named; calibrate fits the rows on a two-chip cluster."""
    pytest.importorskip("torch")
    path = str(tmp_path / "coll.csv")
    code = _WORKER % _free_port()
    env = dict(os.environ, LOCAL_WORLD_SIZE="2", OMP_NUM_THREADS="1")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(r), path], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env) for r in (0, 1)]
    outs = []
    for p in procs:
        try:
            out, err = p.communicate(timeout=240)
        finally:
            p.kill()
        assert p.returncode == 0, err[-2000:]
        outs.append(out)
    rows = _read(path)
    assert tuple(rows[0]) == measure.COLLECTIVE_COLUMNS
    kinds = {r["collective"] for r in rows}
    assert {"allreduce", "allgather"} <= kinds
    skipped = outs[0].split("SKIPPED", 1)[1]
    for kind in ("reducescatter", "alltoall"):        # timed at both sizes, or named as missing
        assert (sum(r["collective"] == kind for r in rows) == 2) != (f"{kind} on gloo" in skipped)
    for r in rows:
        assert int(r["group"]) == 2 and r["link"] == "intra" and float(r["seconds"]) > 0
        assert int(r["bytes"]) in (4096, 8 << 20)
    cal = cost.calibrate(hardware.A100, path, cluster=cluster.Cluster(2, chips_per_node=2))
    assert cal.collective_rows == len(rows) and cal.intra_efficiency is not None


def test_calibrate_fits_alltoall_rows_by_the_comm_formula():
    """Rows made by cosearch.comm's own all-to-all and all-reduce on a cluster with known link
    efficiency and latency: calibrate recovers both (a closed-form round trip)."""
    cl = cluster.Cluster(8, chips_per_node=8, intra_efficiency=0.7, link_latency_s=5e-6)
    sizes = [2.0 ** e for e in range(16, 30, 2)]
    rows = {"collective": [], "bytes": [], "group": [], "link": [], "seconds": []}
    for kind in ("alltoall", "allreduce"):
        for s in sizes:
            for c, v in zip(rows, (kind, s, 8, "intra", comm.collective_s(kind, s, 8, cl, hardware.A100))):
                rows[c].append(v)
    cal = cost.calibrate(hardware.A100, rows, cluster=cl.with_(intra_efficiency=1.0, link_latency_s=0.0))
    assert cal.intra_efficiency == pytest.approx(0.7, rel=1e-6)
    assert cal.intra_latency_s == pytest.approx(5e-6, rel=1e-6)
    # by hand: an all-to-all of 1 MiB on 8 ranks sends 7/8 of it at 0.7 x 300 GB/s, one latency
    want = 7 / 8 * 2 ** 20 / (0.7 * hardware.A100.link_bandwidth_Bps) + 5e-6
    assert comm.collective_s("alltoall", 2 ** 20, 8, cl, hardware.A100) == pytest.approx(want, rel=1e-12)
    assert np.isfinite(cal.intra_latency_s)


def test_measure_cli_refuses_bad_output(tmp_path):
    from cosearch.cli import main
    assert main(["measure", "--model", "opt-350m", "--out", str(tmp_path / "nope")]) == 2
    (tmp_path / "ops.csv").write_text("x")
    assert main(["measure", "--model", "opt-350m", "--out", str(tmp_path)]) == 2


def test_calibrate_with_row_clocks_fits_per_clock_and_keeps_the_sustained_clock():
    """Rows timed at known SM clocks from a known per-clock efficiency: the fit returns that
    per-clock efficiency whatever clocks the rows ran at, and the chip keeps its sustained clock
    (a chip calibrated on boost-clock benchmarks is not made faster for a long run)."""
    from dataclasses import replace
    chip = hardware.H100
    truth = replace(chip.efficiency, tensor=0.8, memory=0.85, launch_s=5e-6)
    rng = np.random.default_rng(7)
    cols = {k: [] for k in ("kind", "m", "n", "k", "batch", "dtype_bytes", "seconds", "sm_clock_mhz")}
    for _ in range(30):
        m, n, k = (int(2 ** x) for x in rng.integers(9, 14, 3))
        mhz = float(rng.choice([1410.0, 1755.0, 1980.0]))
        at = chip.with_(clock_hz=chip.clock_hz * mhz / 1830.0, efficiency=truth.at_full_clock())
        op = graph.Op("g", "gemm", m=m, n=n, k=k, bytes_read=2.0 * (m * k + k * n), bytes_written=2.0 * m * n)
        for key, val in zip(cols, ("gemm", m, n, k, 1, 2, cost.price_on(np.array([op.as_row()]), at)[0], mhz)):
            cols[key].append(val)
    cal = cost.calibrate(chip, cols)
    assert cal.chip.efficiency.tensor == pytest.approx(0.8, rel=1e-3)
    assert cal.chip.efficiency.sustained_clock == chip.efficiency.sustained_clock
    assert cal.gemm_rms_log_error < 1e-4
    cols["sm_clock_mhz"][3] = ""
    with pytest.raises(ValueError, match="sm_clock_mhz"):
        cost.calibrate(chip, cols)


def test_measure_checks_shapes_repeats_and_collective_settings_before_any_work():
    """Found by fuzzing cosearch.measure: an OpShape of an unknown kind, m = 0 or 3-byte operands
    was accepted (and failed or was skipped on the GPU); iters=1.5 and warmup=None raised
    TypeError, device='x' a RuntimeError from torch; measure_collectives checked its sizes and
    repeats only once under torchrun, on the cluster."""
    from cosearch import measure as M
    for kw, msg in ((dict(kind="x"), "OpShape.kind='x'"), (dict(m=0), "OpShape.m must be a positive integer"),
                    (dict(dtype_bytes=3), "OpShape.dtype_bytes is 2 \\(bf16\\), 1 \\(FP8\\) or 0.5625"),
                    (dict(fused=True), "a fused attention kernel needs its head_dim")):
        with pytest.raises(ValueError, match=msg):
            M.OpShape(**{**dict(name="g", kind="gemm", m=8, n=8, k=8, batch=1, dtype_bytes=2), **kw})
    shapes = M.op_shapes("gpt2-xl")[:1]
    for kw, msg in ((dict(iters=1.5), "iters must be a positive integer"),
                    (dict(warmup=None), "warmup must be a non-negative integer"),
                    (dict(device="x"), "device 'x' is not a torch device")):
        with pytest.raises(ValueError, match=msg):
            M.measure_ops(shapes, "unused.csv", progress=False, **kw)
    for kw, msg in ((dict(sizes_bytes=[0]), "each of sizes_bytes must be a positive integer"),
                    (dict(sizes_bytes=[]), "sizes_bytes is empty"),
                    (dict(kinds=["x"]), "unknown collective"), (dict(kinds=[]), "kinds is empty"),
                    (dict(iters=0), "iters must be a positive integer")):
        with pytest.raises(ValueError, match=msg):
            M.measure_collectives(None, **kw)


def test_calibrate_attention_rows_on_a_chip_with_its_own_attention_clock():
    """H100 fused attention kernels hold their own clock (``attention_clock``).  Fused attention
    rows (a head dim) timed at known SM clocks from a known per-clock efficiency fit back to it,
    and the chip keeps both clocks; rows without clocks, priced at the preset's own clocks, fit
    to the datasheet-clock fractions (per-clock efficiency times each kernel class's clock)."""
    from dataclasses import replace
    chip = hardware.H100
    truth = replace(chip.efficiency, tensor=0.8, attention=0.45)
    rng = np.random.default_rng(11)
    names = ("kind", "m", "n", "k", "batch", "dtype_bytes", "head_dim", "seconds")
    timed = {k: [] for k in names + ("sm_clock_mhz",)}
    plain = {k: [] for k in names}
    for i in range(24):
        m, n = (int(2 ** x) for x in rng.integers(11, 14, 2))
        b = int(rng.choice([8, 32]))
        if i % 2:       # a fused attention kernel: m queries over n keys, head dim 128
            kind, k, hd = "attention", 128, 128
            op = graph.Op("a", "attention", m=m, n=n, k=k, batch=b, bytes_read=2.0 * (m + 2 * n) * hd * b,
                          bytes_written=2.0 * m * hd * b, head_dim=hd)
        else:
            kind, k, hd = "gemm", 2048, 0
            op = graph.Op("g", "gemm", m=m, n=n, k=k, batch=b, bytes_read=2.0 * (m * k + k * n) * b,
                          bytes_written=2.0 * m * n * b)
        mhz = float(rng.choice([1410.0, 1755.0, 1980.0]))
        at = chip.with_(clock_hz=chip.clock_hz * mhz / 1830.0, efficiency=truth.at_full_clock())
        row = np.array([op.as_row()])
        for key, val in zip(timed, (kind, m, n, k, b, 2, hd, cost.price_on(row, at)[0], mhz)):
            timed[key].append(val)
        for key, val in zip(plain, (kind, m, n, k, b, 2, hd, cost.price_on(row, chip.with_(efficiency=truth))[0])):
            plain[key].append(val)
    got = cost.calibrate(chip, timed).chip.efficiency
    assert got.attention == pytest.approx(0.45, rel=1e-3)
    assert (got.attention_clock, got.attention_clock_fa2) == (chip.efficiency.attention_clock,
                                                               chip.efficiency.attention_clock_fa2)
    flat = cost.calibrate(chip, plain).chip.efficiency
    assert flat.attention == pytest.approx(0.45 * chip.efficiency.attention_clock, rel=1e-3)
    assert flat.tensor == pytest.approx(0.8 * chip.efficiency.sustained_clock, rel=1e-3)
    assert flat.attention_clock_held() == flat.sustained_clock == 1.0
