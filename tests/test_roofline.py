import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cosearch import cost, graph, hardware, models
from tests.reference import roofline


def random_ops(rng, n):
    rows = []
    for _ in range(n):
        kind = rng.integers(0, 5)
        m, nn, k = rng.integers(1, 5000, size=3)
        b = rng.integers(1, 64)
        el = float(rng.integers(1, 10**7))
        rows.append([kind, m, nn, k, b, el, rng.uniform(1, 10), el * 2 * rng.uniform(1, 3),
                     el * 2, rng.choice([1, 2, 4])])
    return np.array(rows, dtype=float)


def random_designs(rng, n):
    rows = []
    for _ in range(n):
        rows.append([rng.integers(1, 600), rng.choice([8, 16, 32, 128, 256]), rng.choice([8, 32, 128]),
                     rng.integers(1, 200), rng.choice([32, 128, 1024]), rng.uniform(0.5e9, 2e9),
                     rng.choice([8e3, 64e3, 4e6]), rng.choice([1e6, 50e6, 128e6]), 32e9,
                     rng.uniform(0.5e12, 3e12), 1e11, rng.choice([0.0, 2e12, 2e13, 2e14]), rng.choice([0.0, 2.0, 3.0])])
    return np.array(rows, dtype=float)


EFFS = [hardware.IDEAL, hardware.KernelEfficiency(0.8, 0.6, 0.9, 4e-6), hardware.KernelEfficiency(0.5, 0.9, 0.3, 0),
        hardware.KernelEfficiency(0.9, 0.5, 0.75, 4e-6, tile_m=128, tile_n=256, tile_k=64, tile_slots=108,
                                  k_overhead=128.0),
        hardware.KernelEfficiency(1.0, 1.0, 1.0, 0.0, tile_m=64, tile_n=32, tile_k=16, tile_slots=7, k_overhead=5.0),
        hardware.KernelEfficiency(0.8, 0.6, 0.9, 4e-6, cast_memory=0.2),
        hardware.KernelEfficiency(0.8, 0.6, 0.9, 4e-6, cast_memory=0.5, cast_amax_Bps=1e12),
        hardware.KernelEfficiency(0.8, 0.6, 0.9, 4e-6, sustained_clock=0.7, attention_clock=1.1)]


@pytest.mark.parametrize("frac", [1.0, 0.5, 0.25])
@pytest.mark.parametrize("eff", EFFS)
def test_kernel_equals_python_reference(frac, eff):
    rng = np.random.default_rng(0)
    ops, des = random_ops(rng, 60), random_designs(rng, 40)
    got = cost.price(ops, des, frac, efficiency=eff)
    ref = np.array(roofline(ops, des, frac, tuple(eff.as_array())))
    np.testing.assert_allclose(got, ref, rtol=1e-12)


@pytest.mark.parametrize("eff", EFFS)
def test_numpy_backend_equals_kernel(eff):
    rng = np.random.default_rng(1)
    ops, des = random_ops(rng, 80), random_designs(rng, 50)
    np.testing.assert_allclose(cost.price(ops, des, backend="numpy", efficiency=eff),
                               cost.price(ops, des, efficiency=eff), rtol=1e-12)


@settings(max_examples=50, deadline=None)
@given(m=st.integers(1, 20000), n=st.integers(1, 20000), k=st.integers(1, 20000),
       chip=st.sampled_from([hardware.TPUv4, hardware.A100, hardware.H100]))
def test_gemm_never_beats_peak_or_bandwidth(m, n, k, chip):
    op = graph.Op("g", "gemm", m=m, n=n, k=k, bytes_read=2 * (m * k + k * n), bytes_written=2 * m * n)
    t = cost.price_on(np.array([op.as_row()]), chip)[0]
    assert t >= op.flops / chip.peak_flops * (1 - 1e-12)
    assert t >= 2 * (m * k + k * n + m * n) / chip.hbm_bandwidth_Bps * (1 - 1e-12)


@pytest.mark.parametrize("chip", [hardware.H100, hardware.A100_80GB, hardware.TPUv4])
def test_large_gemm_runs_at_the_measured_ceiling(chip):
    # a big square GEMM reaches the chip's best-shape matmul efficiency times its shape factor
    # (1 for TPUv4, which has no tile model) at the sustained clock, never more; the GPU presets'
    # figures are checked against measured kernels in test_kernel_model.py
    s = 8192
    op = graph.Op("g", "gemm", m=s, n=s, k=s, bytes_read=4 * s * s, bytes_written=2 * s * s)
    t = cost.price_on(np.array([op.as_row()]), chip)[0]
    achieved = op.flops / t
    e = chip.efficiency
    ceiling = e.tensor * e.shape_efficiency(s, s, s) * e.sustained_clock * chip.peak_flops
    assert 0.95 * ceiling <= achieved <= ceiling


def test_padding_waste_hand_worked():
    # 100x100x100 GEMM on one 128x128 array: 1 tile, 100 rows + fill/drain 254 cycles
    chip = hardware.Accelerator("one", 1, 128, 128, 1, 128, 1e9, 4e6, 64e6, 1e9, 1e15, 1e9)
    op = graph.Op("g", "gemm", m=100, n=100, k=100, bytes_read=4e4, bytes_written=2e4)
    t = cost.price_on(np.array([op.as_row()]), chip)[0]
    assert t == pytest.approx((100 + 254) / 1e9)
    # utilisation of the PEs while streaming is 100*100 / 128^2 < 1
    assert op.flops / ((100) / 1e9) < chip.peak_flops


def test_l1_spill_adds_hbm_traffic():
    big = hardware.TPUv4
    tiny = big.with_(l1_bytes=1024.0)
    op = graph.Op("g", "gemm", m=4096, n=4096, k=4096, bytes_read=1, bytes_written=1)
    row = np.array([op.as_row()])
    # all operands fit in the 128 MiB L2: 3 * 4096^2 * 2 bytes once; spilled weight tiles are
    # re-read for every 128-row block: 32*32 tiles * 32 blocks * 128*128*2 bytes
    expected = (3 * 4096**2 * 2 + 1024 * 32 * 128 * 128 * 2) / big.hbm_bandwidth_Bps
    assert cost.price_on(row, tiny)[0] == pytest.approx(expected)
    assert cost.price_on(row, big)[0] < expected / 1.5


def test_elementwise_at_hbm_bandwidth():
    n = 1 << 28
    for chip in (hardware.H100, hardware.TPUv4, hardware.A100):
        op = graph.Op("add", "vector", elements=n, ops_per_element=1, bytes_read=2 * 2 * n, bytes_written=2 * n)
        t = cost.price_on(np.array([op.as_row()]), chip)[0] - chip.efficiency.launch_s
        assert 6 * n / t == pytest.approx(chip.hbm_bandwidth_Bps * chip.efficiency.memory, rel=1e-9)


def test_layer_prices_all_designs():
    g = graph.build(models.preset("gpt3-1.3b"), tp=2, microbatch=2, phase="bwd")
    des = hardware.SearchSpace().arrays()[:20]
    out = cost.price(g, des)
    assert out.shape == (20, len(g))
    assert np.all(out >= 0) and np.all(np.isfinite(out))


def test_bad_input():
    g = graph.build(models.preset("gpt3-1.3b"))
    with pytest.raises(ValueError, match="core_fraction"):
        cost.price(g, hardware.TPUv4, core_fraction=0)
    with pytest.raises(ValueError, match="design array"):
        cost.price(g, np.ones((3, 4)))
    with pytest.raises(ValueError, match="backend"):
        cost.price(g, hardware.TPUv4, backend="cuda")
    with pytest.raises(ValueError, match="non-positive"):
        cost.price(g, -np.ones((1, 11)))


def test_calibrate_recovers_a_known_efficiency_curve(tmp_path):
    """Synthetic measurements from a known (tensor, attention, memory, launch) curve are
    fitted back, from a mapping and from a CSV file; collectives too."""
    from dataclasses import replace

    from cosearch import cluster
    chip = hardware.A100_80GB
    truth = replace(chip.efficiency, tensor=0.71, attention=0.55, memory=0.83, launch_s=6e-6)
    rng = np.random.default_rng(3)
    rows = []
    for i in range(60):
        m, n, k = (int(x) for x in 2 ** rng.uniform(4, 14, 3))
        b = int(rng.choice([1, 1, 8, 64]))
        kind = "attention" if i % 4 == 0 else "gemm"
        op = graph.Op("x", "gemm" if kind == "gemm" else "attention", m=m, n=n, k=k, batch=b,
                      bytes_read=2 * (m * k + k * n) * b, bytes_written=2 * m * n * b)
        t = cost.price_on(np.array([op.as_row()]), chip.with_(efficiency=truth))[0]
        rows.append((kind, m, n, k, b, 2, t))
    cols = {name: [r[i] for r in rows] for i, name in enumerate(("kind", "m", "n", "k", "batch", "dtype_bytes",
                                                                   "seconds"))}
    cal = cost.calibrate(chip, cols)
    got = cal.chip.efficiency
    # the fit is in fractions of the datasheet-clock peak: the rows carry their clock
    clock = truth.sustained_clock
    assert got.sustained_clock == 1.0
    assert got.tensor == pytest.approx(truth.tensor * clock, rel=1e-3)
    assert got.attention == pytest.approx(truth.attention * clock, rel=1e-3)
    assert got.memory == pytest.approx(truth.memory, rel=1e-3)
    assert got.launch_s == pytest.approx(truth.launch_s, rel=1e-2)
    assert got.as_array()[4:12].tolist() == chip.efficiency.as_array()[4:12].tolist()   # shape model kept
    # collectives: t = f (n-1)/n S / (e B) + f (n-1) a on a DGX-like cluster
    cl = cluster.dgx_a100(4)
    coll = {"collective": [], "bytes": [], "group": [], "link": [], "seconds": []}
    for kind, f in (("allreduce", 2.0), ("allgather", 1.0)):
        for size in (1e6, 1e7, 1e8, 1e9):
            for n in (2, 8):
                for link, bw, e, a in (("intra", 300e9, 0.74, 4e-6), ("inter", 25e9, 0.88, 9e-6)):
                    coll["collective"].append(kind)
                    coll["bytes"].append(size)
                    coll["group"].append(n)
                    coll["link"].append(link)
                    coll["seconds"].append(f * (n - 1) / n * size / (e * bw) + f * (n - 1) * a)
    path = tmp_path / "coll.csv"
    import csv
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["kind", "m", "n", "k", "batch", "dtype_bytes", *coll])
        for r in rows:
            w.writerow([*r[:6], "", "", "", "", r[6]])
        for i in range(len(coll["seconds"])):
            w.writerow(["", "", "", "", "", "", *(coll[c][i] for c in coll)])
    cal2 = cost.calibrate(chip, path, cluster=cl)
    assert cal2.chip.efficiency.tensor == pytest.approx(truth.tensor * clock, rel=1e-3)
    assert cal2.intra_efficiency == pytest.approx(0.74, rel=1e-6)
    assert cal2.inter_efficiency == pytest.approx(0.88, rel=1e-6)
    assert cal2.inter_latency_s == pytest.approx(9e-6, rel=1e-6)
    tuned = cal2.apply(cl)
    assert tuned.intra_efficiency == pytest.approx(0.74) and tuned.inter_efficiency == pytest.approx(0.88)
    with pytest.raises(ValueError, match="no such measurement file"):
        cost.calibrate(chip, tmp_path / "missing.csv")
    with pytest.raises(ValueError, match="column 'seconds'"):
        cost.calibrate(chip, {k: v for k, v in cols.items() if k != "seconds"})


def test_serial_kernel_for_few_designs_equals_parallel_and_reference():
    """Few designs are priced on the calling thread (roofline.price_serial); it, the parallel
    kernel and the Python reference agree, FP8 and NVFP4 operands included."""
    from cosearch._kernels import roofline as kern
    rng = np.random.default_rng(3)
    ops = random_ops(rng, 60)
    ops[::3, 9] = 1.0                      # FP8 operands
    ops[1::3, 9] = 0.5625                  # NVFP4 operands
    des = random_designs(rng, 3)
    eff = hardware.KernelEfficiency(0.9, 0.6, 0.8, 4e-6, tile_m=128, tile_n=256, tile_k=64, tile_slots=108,
                                    k_overhead=128.0, fp8_rate=1.7, fp4_rate=3.4)
    assert len(des) < kern.PARALLEL_MIN_DESIGNS
    got = cost.price(ops, des, efficiency=eff)
    np.testing.assert_allclose(got, kern.price(ops, des, 1.0, eff.as_array()), rtol=0, atol=0)
    np.testing.assert_allclose(got, np.array(roofline(ops, des, 1.0, tuple(eff.as_array()))), rtol=1e-12)
    np.testing.assert_allclose(got, cost.price(ops, des, backend="numpy", efficiency=eff), rtol=1e-12)


def test_calibrate_fits_only_what_the_rows_identify():
    """Large compute-bound GEMMs identify the tensor efficiency only: memory and launch keep the
    chip's values (before, memory became the fit's 0.80 starting guess and launch drifted to
    50 us); the result names what it fitted and each row's residual; launch stays in 1-20 us."""
    from dataclasses import replace
    chip = hardware.A100_80GB
    truth = replace(chip.efficiency, tensor=0.66)
    rows = []
    for m in (4096, 8192, 12288):
        for n in (4096, 8192):
            op = graph.Op("x", "gemm", m=m, n=n, k=8192, bytes_read=2 * (m * 8192 + 8192 * n), bytes_written=2 * m * n)
            rows.append((m, n, 8192, 1, 2, cost.price_on(np.array([op.as_row()]), chip.with_(efficiency=truth))[0]))
    cols = {name: [r[i] for r in rows] for i, name in enumerate(("m", "n", "k", "batch", "dtype_bytes", "seconds"))}
    cal = cost.calibrate(chip, cols)
    got = cal.chip.efficiency
    assert cal.fitted == ("tensor",) and len(cal.residuals) == 6 and max(map(abs, cal.residuals)) < 1e-6
    clock = chip.efficiency.sustained_clock
    assert got.tensor == pytest.approx(0.66 * clock, rel=1e-4) and got.sustained_clock == 1.0
    assert (got.memory, got.launch_s) == (chip.efficiency.memory, chip.efficiency.launch_s)
    assert got.attention == pytest.approx(chip.efficiency.attention * clock, rel=1e-12)   # same rate
    # tiny ops besides identify the launch time, held to its physical range: they ask for 50 us
    slow = replace(truth, launch_s=50e-6)
    op = graph.Op("x", "gemm", m=64, n=64, k=64, bytes_read=2 * 2 * 64 * 64, bytes_written=2 * 64 * 64)
    tiny = [(64, 64, 64, 1, 2, cost.price_on(np.array([op.as_row()]), chip.with_(efficiency=slow))[0])] * 3
    cols2 = {name: [r[i] for r in rows + tiny]
             for i, name in enumerate(("m", "n", "k", "batch", "dtype_bytes", "seconds"))}
    cal2 = cost.calibrate(chip, cols2)
    assert "launch_s" in cal2.fitted and cal2.chip.efficiency.launch_s == pytest.approx(cost.LAUNCH_BOUNDS_S[1])


def test_calibrate_cli_writes_a_chip_file_plan_accepts(tmp_path, capsys):
    import json

    from cosearch.cli import main
    out = tmp_path / "a100-cal.json"
    assert main(["calibrate", "--chip", "A100-80GB", "--gemm-csv", cost.example_gemm_times(), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "fitted" in text and out.exists()
    chip = hardware.Accelerator.from_json(out)
    assert chip.efficiency.source.startswith("calibrated on 9 measured ops")
    assert main(["plan", "--model", "gpt3-1.3b", "--chip", str(out), "--cluster", "dgx-a100", "--nodes", "1",
                 "--batch", "16", "--dp", "8", "--tp", "1", "--pp", "1", "--mb", "2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["chip"] == "A100-80GB"
    assert main(["calibrate", "--chip", "A100-80GB", "--gemm-csv", cost.example_gemm_times(), "--out", str(out)]) == 2


@pytest.mark.parametrize("seed", range(5))
def test_fill_drain_equals_a_cycle_level_systolic_simulation(seed):
    """The roofline charges one weight tile M + R + C - 2 cycles on an R x C weight-stationary
    array (fill, M rows streaming, drain); a cycle-by-cycle simulation of the array
    (tests/reference.py) computes the product and takes exactly that long."""
    import numpy as np

    from cosearch import cost, graph, hardware
    from tests.reference import systolic_ws_simulate
    rng = np.random.default_rng(seed)
    M, R, C = (int(x) for x in rng.integers(1, 9, size=3))
    A = rng.standard_normal((M, R))
    W = rng.standard_normal((R, C))
    out, cycles = systolic_ws_simulate(A.tolist(), W.tolist())
    np.testing.assert_allclose(np.array(out), A @ W, rtol=1e-12, atol=1e-12)
    assert cycles == M + R + C - 2
    chip = hardware.Accelerator(name="one", tensor_cores=1, systolic_rows=R, systolic_cols=C, vector_units=1,
                                vector_width=1, clock_hz=1e9, l1_bytes=1e12, l2_bytes=1e12, hbm_bytes=1e12,
                                hbm_bandwidth_Bps=1e12, link_bandwidth_Bps=1e9)._unbounded(hbm_bandwidth_Bps=1e30)
    op = graph.Op("g", "gemm", m=M, n=C, k=R, bytes_read=1.0, bytes_written=1.0)
    t = cost.price(np.array([op.as_row()]), chip)[0, 0]
    assert t * 1e9 == pytest.approx(cycles, rel=1e-12)


def test_onchip_operand_bandwidth_by_hand():
    """A 2048 x 4096 @ 4096 x 4096 GEMM, global buffer at PHAZE's 4,096 2-byte words per cycle
    (8.6 TB/s at 1.05 GHz), HBM and L2 out of the way.  4,096 cores of 4 x 8: 1,024 x 512 weight
    tiles, 128 waves of 2,048 + 4 + 8 - 2 cycles = 0.251 ms of compute, but 4096^2 x 2 bytes of
    weights + 2048 x 4096 x 2 x 512 of inputs + 4 x 2048 x 4096 x 1,024 of fp32 partial sums =
    42.98 GB through the buffer: 5.00 ms.  8 cores of 128 x 128: 128 waves of 2,302 cycles =
    0.281 ms of compute against 1.644 GB = 0.191 ms of traffic: compute-bound, unchanged."""
    glb = 4096 * 2 * 1.05e9
    op = graph.Op("g", "gemm", m=2048, n=4096, k=4096, bytes_read=2 * (2048 + 4096) * 4096,
                  bytes_written=2 * 2048 * 4096)
    rows = np.array([op.as_row()])

    def chip(cores, r, c, glb_Bps):
        return hardware.Accelerator("x", cores, r, c, 1, 1, 1.05e9, 1e12, 1e12, 1e12, 1e12, 1e11,
                                    glb_Bps=glb_Bps)._unbounded(hbm_bandwidth_Bps=1e18)

    small = cost.price(rows, chip(4096, 4, 8, glb))[0, 0]
    assert small == pytest.approx((4096 * 4096 * 2 + 2048 * 4096 * 2 * 512 + 4 * 2048 * 4096 * 1024) / glb, rel=1e-12)
    assert small == pytest.approx(5.0e-3, rel=0.01)
    assert cost.price(rows, chip(4096, 4, 8, 0.0))[0, 0] == pytest.approx(128 * 2058 / 1.05e9, rel=1e-12)
    big = cost.price(rows, chip(8, 128, 128, glb))[0, 0]
    assert big == pytest.approx(128 * 2302 / 1.05e9, rel=1e-12)
    assert (1.644e9 / glb) < big
    # half the cores get half the buffer bandwidth
    half = cost.price(rows, chip(4096, 4, 8, glb), core_fraction=0.5)[0, 0]
    assert half == pytest.approx(2 * small, rel=1e-12)


@pytest.mark.parametrize("n_designs", [3, 40])
def test_cell_kernel_equals_reference_prices_and_sums(n_designs):
    """roofline.price_cell (the plan search's one call per cell, parallel over many designs and
    serial for few) against the Python reference: each size's rows are ``base + x per_seq``,
    priced op by op; each graph's sum, the weighted ops and the listed ops summed by hand.  A
    NVFP4 op on designs without an FP4 rate takes forever: a graph holding it sums to inf, and
    a weighted sum that leaves it out stays finite."""
    from cosearch._kernels import roofline as kern
    rng = np.random.default_rng(4)
    base = random_ops(rng, 23)
    per_seq = base.copy()
    per_seq[:, [0, 2, 3, 4, 9]] = 0.0            # kind, n, k, batch, dtype do not grow with the tokens
    base[5, :4], base[5, 9] = (0.0, 64.0, 64.0, 64.0), 0.5625   # an NVFP4 GEMM
    per_seq[5, 1:4] = (0.0, 0.0, 0.0)
    des = np.hstack([random_designs(rng, n_designs), np.zeros((n_designs, 1))])   # no FP4 rate: that GEMM cannot run
    eff = hardware.KernelEfficiency(0.9, 0.6, 0.8, 4e-6, tile_m=128, tile_n=256, tile_k=64, tile_slots=108,
                                    k_overhead=128.0, fp8_rate=1.7)
    extra = np.array([0.0, 1.0, 2.0, 7.0])
    starts = np.array([0, 4, 11, 20], dtype=np.int64)
    again, weights = np.array([6, 7, 9], dtype=np.int64), np.array([1.0, 0.5, 0.25])
    core = np.array([12, 15], dtype=np.int64)
    nd, ns, no = len(des), len(extra), len(base)
    ops_s, graph_s = np.empty((nd, ns, no)), np.empty((nd, ns, len(starts)))
    again_s, core_s = np.empty((nd, ns)), np.empty((nd, ns))
    kernel = kern.price_cell if nd >= kern.PARALLEL_MIN_DESIGNS else kern.price_cell_serial
    kernel(base, per_seq, extra, des, eff.as_array(), starts, again, weights, core, ops_s, graph_s, again_s, core_s)
    bounds = list(starts) + [no]
    for j, x in enumerate(extra):
        ref = np.array(roofline(base + x * per_seq, des, 1.0, tuple(eff.as_array())))
        np.testing.assert_allclose(ops_s[:, j], ref, rtol=1e-12)
        for g in range(len(starts)):
            want = [sum(r[bounds[g]:bounds[g + 1]]) for r in ref]
            np.testing.assert_allclose(graph_s[:, j, g], want, rtol=1e-12)
        np.testing.assert_allclose(again_s[:, j], [r[6] + 0.5 * r[7] + 0.25 * r[9] for r in ref], rtol=1e-12)
        np.testing.assert_allclose(core_s[:, j], [r[12] + r[15] for r in ref], rtol=1e-12)
    assert np.isinf(ops_s[:, :, 5]).all() and np.isinf(graph_s[:, :, 1]).all()
    assert np.isfinite(graph_s[:, :, [0, 2, 3]]).all() and np.isfinite(again_s).all()
