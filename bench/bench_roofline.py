"""Roofline pricing throughput: GPT-3 175B layer (fwd+bwd) over a 10,000-design space.

Reference: the same formulas vectorised with NumPy (cosearch.cost.price_numpy).
Run: python -m pytest bench/bench_roofline.py --benchmark-only -s
"""

import time

import numpy as np
import pytest
from targets import check

from cosearch import cost, graph, hardware, models


def _space_10k():
    s = hardware.SearchSpace(
        tensor_cores=(1, 2, 4, 8, 16, 32, 64), systolic_dims=((16, 16), (32, 32), (64, 64), (128, 128), (256, 256)),
        vector_units=(1, 2, 4, 8), vector_width=(256, 512, 1024), clock_hz=(0.9e9, 1.05e9, 1.4e9),
        l1_bytes=(256e3, 1e6, 4e6, 16e6), l2_bytes=(16e6, 64e6, 128e6),
        hbm=((32e9, 1.2e12), (64e9, 2.4e12)), area_budget_mm2=1e9, power_budget_w=1e9)
    d = s.arrays()
    return d[:10_000]


@pytest.fixture(scope="module")
def problem():
    c = models.preset("gpt3-175b")
    ops = np.vstack([graph.build(c, tp=8, microbatch=1, phase=p).arrays() for p in ("fwd", "bwd")])
    designs = _space_10k()
    assert len(designs) == 10_000
    cost.price(ops, designs[:2])  # compile
    return ops, designs


def test_roofline_throughput(benchmark, problem):
    ops, designs = problem
    out = benchmark(cost.price, ops, designs)
    n = out.size
    t_numba = benchmark.stats.stats.median
    reps = 5
    t0 = time.perf_counter()
    for _ in range(reps):
        ref = cost.price_numpy(ops, designs)
    t_numpy = (time.perf_counter() - t0) / reps
    np.testing.assert_allclose(out, ref, rtol=1e-12)
    rate = n / t_numba
    print(f"\n[roofline] {designs.shape[0]} designs x {ops.shape[0]} ops = {n} pricings; "
          f"numba {t_numba*1e3:.2f} ms ({rate/1e6:.1f} M op-pricings/s), numpy {t_numpy*1e3:.2f} ms; "
          f"speed-up vs numpy {t_numpy/t_numba:.1f}x (targets: >= 20 M/s, >= 5x)")
    check("roofline", "op-pricings per s (M)", rate / 1e6, at_least=20.0)
    check("roofline", "speed-up vs NumPy", t_numpy / t_numba, at_least=5.0)
    benchmark.extra_info.update(pricings_per_s=rate, ratio_vs_numpy=t_numpy / t_numba)


def test_roofline_throughput_shape_aware(benchmark, problem):
    """The same pricing with the A100 preset's kernel model (GEMM tile and wave quantisation
    over its SMs on every GEMM): the shape factor must not push pricing below 100 M op-prices/s."""
    ops, designs = problem
    eff = hardware.A100_80GB.efficiency
    cost.price(ops, designs[:2], efficiency=eff)   # compile
    out = benchmark(cost.price, ops, designs, efficiency=eff)
    t_numba = benchmark.stats.stats.median
    t0 = time.perf_counter()
    ref = cost.price_numpy(ops, designs, 1.0, eff.as_array())
    t_numpy = time.perf_counter() - t0
    np.testing.assert_allclose(out, ref, rtol=1e-12)
    rate = out.size / t_numba
    print(f"\n[roofline, shape-aware GEMMs] {out.size} pricings: numba {t_numba*1e3:.2f} ms "
          f"({rate/1e6:.1f} M op-pricings/s), numpy {t_numpy*1e3:.2f} ms; speed-up vs numpy "
          f"{t_numpy/t_numba:.1f}x (target: >= 100 M/s)")
    check("roofline", "shape-aware op-pricings per s (M)", rate / 1e6, at_least=100.0)
