"""PHAZE's space, end to end: GPT-3 175B on 1,024 chips at global batch 4,096.

Every design of ``SearchSpace.phaze()`` is screened — once under cosearch's area model
(45,187 designs) and once under PHAZE's own (``area_model="phaze"``: PHAZE's 29,360-design
list) — with the exact plan search, then the top three distinct results ranked on ILP layer times
(seeds, then best-first over three bounds; exact up to the default cap of 256 ILP plans; the
run says whether the top was proven).  Reports
wall time (target < 60 s on 2 cores) and CPU seconds, designs/s, the fraction pruned, ILP solves and cache
hits, the winner under each area model, and (cosearch's model) the pruning-off / pruning-on
time ratio on a 2,217-design subset (64 tensor cores, four buffer sizes, serial layer times)
in the same run.
Run: python -m pytest bench/bench_phaze.py --benchmark-only -s
"""

import time
from dataclasses import replace

import pytest
from targets import check

from cosearch import hardware, schedule, search


@pytest.mark.parametrize("area_model", ["cosearch", "phaze"])
def test_phaze_space_175b(benchmark, area_model):
    space = hardware.SearchSpace.phaze(32, area_model=area_model)
    n = len(space.arrays())
    schedule.clear_cache()
    cpu0 = time.process_time()
    res = benchmark.pedantic(search.cosearch, args=("gpt3-175b", space, 1024, 4096),
                             kwargs={"executor": None, "refine_top": 3}, rounds=1, iterations=1)
    cpu = time.process_time() - cpu0
    t_all = benchmark.stats.stats.median
    info = schedule.cache_info()
    b = res.best.design
    winner = (f"{int(b['tensor_cores'])} x {int(b['systolic_rows'])}x{int(b['systolic_cols'])} TC, "
              f"{int(b['vector_units'])} VC, {b['l2_bytes'] / 2**20:g} MiB, {res.best.area_mm2:.1f} mm^2 of "
              f"{space.area_budget_mm2:.1f}")
    print(f"\n[phaze] GPT-3 175B, 1024 chips, batch 4096, PHAZE space under {area_model}'s area model, {n} designs: "
          f"{t_all:.1f} s end to end, {cpu:.1f} CPU-s (target < 60 s), {n / t_all:.0f} designs/s, "
          f"{res.pruned / n:.1%} pruned, {len(res.rows)} evaluated; ILP: {info['solves']} solves, {info['hits']} cache "
          f"hits, ranking {res.meta.get('ilp_ranking')}, bound-plan candidates {res.meta.get('ilp_ranking_candidates')}. "
          f" Winner: {winner}, {res.best.tokens_per_s:,.0f} tokens/s, {res.best.plan.describe()}")
    check("phaze", f"PHAZE space ({area_model}) end to end, s", t_all, at_most=60.0)
    if area_model != "cosearch":
        return
    sub = replace(space, tensor_cores=(64,), l2_bytes=(2**21, 2**23, 2**25, 2**27))
    m = len(sub.arrays())
    t0 = time.perf_counter()
    on = search.cosearch("gpt3-175b", sub, 1024, 4096, executor=None, refine_top=0, prune=True)
    t_on = time.perf_counter() - t0
    t0 = time.perf_counter()
    off = search.cosearch("gpt3-175b", sub, 1024, 4096, executor=None, refine_top=0, prune=False)
    t_off = time.perf_counter() - t0
    assert off.best.tokens_per_s == on.best.tokens_per_s
    print(f"[phaze] subset of {m}: pruning on {t_on:.1f} s, off {t_off:.1f} s, off/on {t_off / t_on:.2f}x")


def test_phaze_space_with_fp8_units(benchmark):
    """PHAZE's space (PHAZE's area model) with every design also offered with 2 FP8 MACs per PE,
    plans in bf16 and FP8, against the bf16-only search in the same run: twice the designs, each
    precision priced once, so at most 4x the time (target)."""
    space = hardware.SearchSpace.phaze(32, area_model="phaze")
    both = replace(space, fp8_macs=(0, 2))
    opts = dict(search.DEFAULT_PLAN_OPTIONS, precision=("bf16", "fp8"))
    schedule.clear_cache()
    t0 = time.perf_counter()
    ref = search.cosearch("gpt3-175b", space, 1024, 4096, executor=None, refine_top=3)
    t_ref = time.perf_counter() - t0
    schedule.clear_cache()
    res = benchmark.pedantic(search.cosearch, args=("gpt3-175b", both, 1024, 4096),
                             kwargs={"executor": None, "refine_top": 3, "plan_options": opts}, rounds=1,
                             iterations=1)
    t = benchmark.stats.stats.median
    b = res.best
    print(f"\n[phaze-fp8] {len(both.arrays())} designs (bf16 alone: {len(space.arrays())}): {t:.1f} s against "
          f"{t_ref:.1f} s, {t / t_ref:.2f}x (target <= 4x); best {b.tokens_per_s:,.0f} tok/s with "
          f"{b.design['fp8_macs']:g} FP8 MACs per PE ({b.plan.spec.precision}), bf16 alone "
          f"{ref.best.tokens_per_s:,.0f}")
    check("phaze", "PHAZE space with FP8 units / bf16 alone, time ratio", t / t_ref, at_most=4.0)
