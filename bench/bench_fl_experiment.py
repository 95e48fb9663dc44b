"""A paired FL experiment end to end: 30 rounds on the bundled digits, 4 methods x 10 seeds,
2 worker processes.  Target: under 2 minutes on 2 cores.

Run: python -m pytest bench/bench_fl_experiment.py --benchmark-only -s
"""

import time

from targets import check

from cosearch.fl.experiment import run_experiment

TARGET_S = 120.0


def test_fl_experiment_4_methods_10_seeds(benchmark):
    def run():
        return run_experiment("digits", ["invariant", "ordered", "random", "none"], 10, 30, clients=5,
                              workers=2, progress=False)

    t0 = time.perf_counter()
    exp = benchmark.pedantic(run, rounds=1, iterations=1)
    t = time.perf_counter() - t0
    assert exp.complete()
    runs = sum(len(v) for v in exp.runs.values())
    print(f"\n[fl experiment] digits, 30 rounds, 4 methods x 10 seeds = {runs} runs on 2 workers: {t:.1f} s "
          f"({runs * 30 / t:.0f} client-rounds x5 per s); target {TARGET_S:.0f} s: ratio {t / TARGET_S:.2f} "
          f"(<= 1 meets it)")
    check("fl experiment", "wall time / target", t / TARGET_S, at_most=1.0)
    print(exp.table())
