"""Per-layer ILP: GPT-3 175B layer (fwd and bwd, tp=8, microbatch 1) on the TPUv4 preset.

Reports the median ILP solve time (target < 1 s per layer graph) and the ratio
ILP makespan / list-schedule makespan (the list scheduler is the reference).
Run: python -m pytest bench/bench_schedule.py --benchmark-only -s
"""

import pytest
from targets import check

from cosearch import graph, hardware, models, schedule


@pytest.mark.parametrize("phase", ["fwd", "bwd"])
def test_ilp_175b_layer(benchmark, phase):
    g = graph.build(models.preset("gpt3-175b"), tp=8, microbatch=1, phase=phase)
    schedule.layer_time(g, hardware.TPUv4, use_cache=False)  # warm cvxpy imports
    res = benchmark.pedantic(schedule.layer_time, args=(g, hardware.TPUv4), kwargs={"use_cache": False},
                             rounds=5, iterations=1)
    t = benchmark.stats.stats.median
    print(f"\n[schedule] GPT-3 175B {phase} ({len(g)} ops): median {t*1e3:.0f} ms per layer graph "
          f"(target < 1 s), status {res.status}, ILP/list makespan {res.latency_s/res.list_schedule_s:.3f}, "
          f"lower bound/ILP {res.lower_bound_s/res.latency_s:.3f}")
    check("schedule", f"ILP solve of a {phase} layer graph, s", t, at_most=1.0)
