"""End-to-end co-search: GPT-3 175B on 1,024 chips over the default space (423 designs at the
32 GiB HBM scenario).

Reports wall time (target < 60 s on 2 cores), designs evaluated per second, the ratio
of wall time with pruning off vs on, and that no layer ILP was solved twice.
Run: python -m pytest bench/bench_search.py --benchmark-only -s
"""

import time

from targets import check

from cosearch import hardware, schedule, search


def test_cosearch_175b_1024(benchmark):
    space = hardware.SearchSpace()
    n = len(space.arrays())
    assert n >= 400
    schedule.clear_cache()
    res = benchmark.pedantic(search.cosearch, args=("gpt3-175b", space, 1024, 1536),
                             kwargs={"executor": None, "prune": True}, rounds=1, iterations=1)
    t_on = benchmark.stats.stats.median
    info = schedule.cache_info()
    schedule.clear_cache()                      # the pruning-off run solves its own layer ILPs
    t0 = time.perf_counter()
    full = search.cosearch("gpt3-175b", space, 1024, 1536, executor=None, prune=False)
    t_off = time.perf_counter() - t0
    assert full.best.tokens_per_s == res.best.tokens_per_s
    print(f"\n[search] GPT-3 175B, 1024 chips, {n} designs: pruning on {t_on:.1f} s "
          f"({n / t_on:.0f} designs/s, {res.pruned} pruned), pruning off {t_off:.1f} s "
          f"({n / t_off:.0f} designs/s); off/on {t_off / t_on:.2f}x (target < 60 s). "
          f"ILP cache: {info['solves']} solves, {info['hits']} hits. Best: {res.best.plan.describe()}")
    check("search", "GPT-3 175B co-search with pruning, s", t_on, at_most=60.0)
