"""Placement DP: GPT-3 175B (96 layers) on 1,024 and 4,096 chips, tp in {1,2,4,8,16},
every microbatch size dividing the batch, recompute on/off per stage.

Reference: the same algorithm in plain Python (tests/reference.py::placement_python),
timed against the kernel on a 24-layer model in the same run.
Run: python -m pytest bench/bench_placement.py --benchmark-only -s
"""

import time

import pytest

from cosearch import hardware, memory, models, placement
from tests.reference import placement_python


@pytest.fixture(scope="module")
def costs_175b():
    m = models.preset("gpt3-175b")
    out = {}
    for chips in (1024, 4096):
        cl = hardware.Cluster(chips)
        out[chips] = placement.layer_costs(m, hardware.TPUv4, cl, tps=(1, 2, 4, 8, 16), global_batch=1536)
    placement.best_plan(out[1024], 1024, 1536)  # compile
    return out


@pytest.mark.parametrize("chips", [1024, 4096])
def test_placement_175b(benchmark, costs_175b, chips):
    c = costs_175b[chips]
    res = benchmark(placement.best_plan, c, chips, 1536)
    t = benchmark.stats.stats.median
    print(f"\n[placement] GPT-3 175B, {chips} chips, {len(c.tps)} tp x {len(c.microbatches)} microbatch "
          f"sizes: {t*1e3:.1f} ms (target < 1 s); best: {res.best.describe()}")


def test_placement_vs_python_24_layers(benchmark):
    m = models.preset("gpt3-1.3b")  # 24 layers
    cl = hardware.Cluster(64)
    c = placement.layer_costs(m, hardware.TPUv4, cl, tps=(1, 2, 4, 8), global_batch=32)
    mem = memory.MemoryConfig()
    placement.best_plan(c, cl, 32)
    res = benchmark(placement.best_plan, c, cl, 32)
    t_numba = benchmark.stats.stats.median
    t0 = time.perf_counter()
    ref = placement_python(c, 64, 32, mem)
    t_py = time.perf_counter() - t0
    assert res.best.step_time_s == pytest.approx(ref, rel=1e-7)
    print(f"\n[placement] 24-layer model, 64 chips: numba {t_numba*1e3:.2f} ms, plain Python {t_py:.2f} s, "
          f"speed-up {t_py/t_numba:.0f}x (target >= 50x)")
