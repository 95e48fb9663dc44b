import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cosearch import cost, graph, hardware, models
from tests.reference import roofline


def random_ops(rng, n):
    rows = []
    for _ in range(n):
        kind = rng.integers(0, 3)
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
                     rng.uniform(0.5e12, 3e12), 1e11])
    return np.array(rows, dtype=float)


@pytest.mark.parametrize("frac", [1.0, 0.5, 0.25])
def test_kernel_equals_python_reference(frac):
    rng = np.random.default_rng(0)
    ops, des = random_ops(rng, 60), random_designs(rng, 40)
    got = cost.price(ops, des, frac)
    ref = np.array(roofline(ops, des, frac))
    np.testing.assert_allclose(got, ref, rtol=1e-12)


def test_numpy_backend_equals_kernel():
    rng = np.random.default_rng(1)
    ops, des = random_ops(rng, 80), random_designs(rng, 50)
    np.testing.assert_allclose(cost.price(ops, des, backend="numpy"), cost.price(ops, des), rtol=1e-12)


@settings(max_examples=50, deadline=None)
@given(m=st.integers(1, 20000), n=st.integers(1, 20000), k=st.integers(1, 20000),
       chip=st.sampled_from([hardware.TPUv4, hardware.A100, hardware.H100]))
def test_gemm_never_beats_peak_or_bandwidth(m, n, k, chip):
    op = graph.Op("g", "gemm", m=m, n=n, k=k, bytes_read=2 * (m * k + k * n), bytes_written=2 * m * n)
    t = cost.price_on(np.array([op.as_row()]), chip)[0]
    assert t >= op.flops / chip.peak_flops * (1 - 1e-12)
    assert t >= 2 * (m * k + k * n + m * n) / chip.hbm_bandwidth_Bps * (1 - 1e-12)


@pytest.mark.parametrize("chip", [hardware.H100, hardware.TPUv4])
def test_large_gemm_within_5_percent_of_peak(chip):
    s = 8192
    op = graph.Op("g", "gemm", m=s, n=s, k=s, bytes_read=4 * s * s, bytes_written=2 * s * s)
    t = cost.price_on(np.array([op.as_row()]), chip)[0]
    achieved = op.flops / t
    assert 0.95 * chip.peak_flops <= achieved <= chip.peak_flops


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
        t = cost.price_on(np.array([op.as_row()]), chip)[0]
        assert 6 * n / t == pytest.approx(chip.hbm_bandwidth_Bps, rel=1e-9)


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
