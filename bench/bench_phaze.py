"""PHAZE's space, end to end: GPT-3 175B on 1,024 chips at global batch 4,096.

Every design of ``SearchSpace.phaze()`` (45,874 under cosearch's area model) is screened
with the exact plan search, then the top three distinct results ranked on ILP layer times
(seeds, then best-first over three bounds; exact up to the default cap of 256 ILP plans; the
run says whether the top was proven).  Reports
wall time (target < 60 s on 2 cores), designs/s, the fraction pruned, ILP solves and cache
hits, and the pruning-off / pruning-on time ratio on a 2,253-design subset (64 tensor cores,
four buffer sizes, serial layer times) in the same run.
Run: python -m pytest bench/bench_phaze.py --benchmark-only -s
"""

import time
from dataclasses import replace

from cosearch import hardware, schedule, search


def test_phaze_space_175b(benchmark):
    space = hardware.SearchSpace.phaze(32)
    n = len(space.arrays())
    schedule.clear_cache()
    res = benchmark.pedantic(search.cosearch, args=("gpt3-175b", space, 1024, 4096),
                             kwargs={"executor": None, "refine_top": 3}, rounds=1, iterations=1)
    t_all = benchmark.stats.stats.median
    info = schedule.cache_info()
    sub = replace(space, tensor_cores=(64,), l2_bytes=(2**21, 2**23, 2**25, 2**27))
    m = len(sub.arrays())
    t0 = time.perf_counter()
    on = search.cosearch("gpt3-175b", sub, 1024, 4096, executor=None, refine_top=0, prune=True)
    t_on = time.perf_counter() - t0
    t0 = time.perf_counter()
    off = search.cosearch("gpt3-175b", sub, 1024, 4096, executor=None, refine_top=0, prune=False)
    t_off = time.perf_counter() - t0
    assert off.best.tokens_per_s == on.best.tokens_per_s
    print(f"\n[phaze] GPT-3 175B, 1024 chips, batch 4096, PHAZE space {n} designs: {t_all:.1f} s end to end "
          f"(target < 60 s), {n / t_all:.0f} designs/s, {res.pruned / n:.1%} pruned, {len(res.rows)} evaluated; "
          f"ILP: {info['solves']} solves, {info['hits']} cache hits, ranking {res.meta.get('ilp_ranking')}, bound-plan candidates {res.meta.get('ilp_ranking_candidates')}.  Subset of {m}: pruning on {t_on:.1f} s, "
          f"off {t_off:.1f} s, off/on {t_off / t_on:.2f}x.  Best: {res.best.plan.describe()}")
