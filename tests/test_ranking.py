"""The exact ILP ranking's pieces, each against a direct (brute-force) computation:
ilp_plan against planning every (tp, microbatch, sp) choice with ILP layer times, buffer
groups against scheduling each member, the microbatch filter against the plan search,
and the ranking over a space whose buffers bind for some designs and not others."""

import itertools

import numpy as np
import pytest

from cosearch import (
    cluster,
    cost,
    graph,
    hardware,
    memory,
    models,
    placement,
    schedule,
    search,
    sweep,
)
from cosearch import plan as plan_mod

MiB, GiB = 2**20, 2**30


def _chip(row):
    return hardware.Accelerator.from_array(row)


def test_ilp_plan_is_the_best_ilp_plan_over_every_choice():
    m = models.preset("gpt3-1.3b")
    chip = hardware.Accelerator("c", 8, 64, 64, 2, 512, 1e9, 1 * MiB, 32 * MiB, 16 * GiB, 1.2e12, 1e11)
    cl = cluster.Cluster(16)
    tps, mbs = (1, 2, 4), (1, 2, 4)
    opts = dict(placement.DEFAULT_PLAN_OPTIONS, sequence_parallel=(False, True))
    brute = []
    for t, mb, sp in itertools.product(tps, mbs, (False, True)):
        if sp and t == 1:
            continue
        r = placement.search_plans(m, chip, cl, 32, tps=(t,), microbatches=(mb,), sequence_parallel=(sp,),
                                   time_model="ilp", zero=(0, 1), virtual_stages=(1,))
        if r.plans:
            brute.append(r.plans[0].step_time_s)
    best = min(brute)
    got = placement.ilp_plan(m, chip, cl, 32, memory.MemoryConfig(), opts, tps=tps, microbatches=mbs)
    assert got.step_time_s == pytest.approx(best, rel=1e-12)
    # a cutoff above the best keeps it; one below it leaves nothing
    assert placement.ilp_plan(m, chip, cl, 32, memory.MemoryConfig(), opts, tps=tps, microbatches=mbs,
                              cutoff_s=best * 1.01).step_time_s == pytest.approx(best, rel=1e-12)
    assert placement.ilp_plan(m, chip, cl, 32, memory.MemoryConfig(), opts, tps=tps, microbatches=mbs,
                              cutoff_s=best * 0.99) is None


def _buffer_space():
    # 1 MiB of L2 (and 16 KiB of L1) starve the big arrays' GEMMs and batched matmuls; 32 and 64 MiB do not
    return hardware.SearchSpace(tensor_cores=(2, 8), systolic_dims=((32, 32), (128, 128)), vector_units=(2, 4),
                                vector_width=(512,), l1_bytes=(16 * 1024, 1 * MiB),
                                l2_bytes=(1 * MiB, 32 * MiB, 64 * MiB), hbm=((16 * GiB, 1.2e12),))


def test_buffer_groups_schedule_alike_and_split_where_buffers_bind():
    m = models.preset("gpt3-1.3b")
    designs = _buffer_space().arrays()
    tps, mbs = (1, 2), (1, 2)
    groups = sweep.buffer_equivalent_designs(m, designs, tps, mbs, (False,), False)
    assert sorted(i for g in groups for i in g) == list(range(len(designs)))
    assert any(len(g) > 1 for g in groups)                   # merged where buffers change nothing
    fam = {}
    for gi, g in enumerate(groups):
        for i in g:
            key = tuple(np.delete(designs[i], [6, 7]))
            fam.setdefault(key, set()).add(gi)
    assert any(len(v) > 1 for v in fam.values())             # split where they bind
    merged = [g for g in groups if len(g) > 1]
    for g in merged:
        for t, mb, ph, part in itertools.product(tps, mbs, ("fwd", "bwd"), ("layer", "head")):
            lay = graph.build(m, t, mb, ph, part)
            bnd = schedule.layer_bounds(lay, designs[g])
            ser = cost.price(lay, designs[g]).sum(axis=1)
            assert np.all(bnd == bnd[0]) and np.all(ser == ser[0])
    for g in merged[:2]:                                      # each member's own ILP (no cache)
        for t in tps:
            lay = graph.build(m, t, 1, "bwd")
            ref = schedule.layer_time(lay, _chip(designs[g[0]]), use_cache=False)
            for i in g[1:]:
                assert schedule.layer_time(lay, _chip(designs[i]), use_cache=False).latency_s == ref.latency_s


def test_ranking_with_binding_buffers_equals_ilp_for_every_design():
    m = models.preset("gpt3-1.3b")
    sp = _buffer_space()
    designs = sp.arrays()
    cl = cluster.Cluster(16)
    k = 3
    res = search.cosearch(m, sp, cl, 32, "serial", tps=(1, 2), microbatches=(1, 2), refine_top=k)
    brute = []
    for row in designs:
        r = placement.search_plans(m, _chip(row), cl, 32, tps=(1, 2), microbatches=(1, 2), time_model="ilp",
                                   **search.DEFAULT_PLAN_OPTIONS)
        brute.append(r.best.step_time_s if r.feasible else np.inf)
    brute = np.array(brute)
    ilp_rows = sorted((r for r in res.feasible if r.time_model == "ilp"), key=lambda r: r.plan.step_time_s)
    assert res.meta["ilp_ranking"]["proven"]
    np.testing.assert_allclose([r.plan.step_time_s for r in ilp_rows[:k]], np.sort(brute)[:k], rtol=1e-12)
    for r in ilp_rows:                                        # every ILP row is its design's own optimum
        assert r.plan.step_time_s == pytest.approx(brute[r.index], rel=1e-12)
    # the table collapses designs with one result: every design among the k best *distinct*
    # ILP steps has its ILP row (counting rows, equivalent designs could fill the top k alone)
    thr = np.unique(brute[np.isfinite(brute)])[k - 1]
    need = {i for i in range(len(brute)) if brute[i] <= thr * (1 + 1e-12)}
    assert len(need) > k                                      # ties: the case that tells the two apart
    assert need <= {r.index for r in ilp_rows}


def test_fitting_microbatches_drops_only_sizes_no_plan_fits():
    m = models.preset("gpt3-1.3b")
    chip = hardware.Accelerator("c", 8, 64, 64, 2, 512, 1e9, 1 * MiB, 32 * MiB, 3 * GiB, 1.2e12, 1e11)
    designs = chip.as_array()[None]
    cl = cluster.Cluster(8)
    tps, mbs = (1, 2), (1, 2, 4, 8, 16, 32, 64)
    keep = placement.fitting_microbatches(m, designs, cl, 64, tps, mbs, **placement.DEFAULT_PLAN_OPTIONS)
    assert keep[0] == 1 and len(keep) < len(mbs)            # tight HBM: some sizes go
    for mb in mbs:
        r = placement.search_plans(m, chip, cl, 64, tps=tps, microbatches=(mb,), **placement.DEFAULT_PLAN_OPTIONS)
        if mb not in keep:
            assert not r.feasible                            # brute force: nothing fits
    # more HBM on another design brings sizes back
    roomy = hardware.Accelerator.from_array(designs[0]).with_(hbm_bytes=64 * GiB).as_array()[None]
    more = placement.fitting_microbatches(m, np.vstack([designs, roomy]), cl, 64, tps, mbs,
                                          **placement.DEFAULT_PLAN_OPTIONS)
    assert set(keep) <= set(more) and len(more) > len(keep)


def test_scheduled_layer_never_slower_than_serial_sum():
    """Even when the ILP stops at its time limit, a layer's schedule is no slower than the
    ops one after another on all cores (the co-search's ILP ranking relies on it)."""
    m = models.preset("llama2-7b")
    for row in _buffer_space().arrays()[::5]:
        chip = _chip(row)
        for t, ph in itertools.product((1, 2), ("fwd", "bwd")):
            lay = graph.build(m, t, 2, ph)
            r = schedule.layer_time(lay, chip, time_limit_s=0.01, use_cache=False)
            assert r.latency_s <= cost.price_on(lay, chip).sum() * (1 + 1e-12)


def test_spread_bound_is_below_every_plan():
    m = models.preset("gpt3-1.3b")
    chip = hardware.Accelerator("c", 8, 64, 64, 2, 512, 1e9, 1 * MiB, 32 * MiB, 16 * GiB, 1.2e12, 1e11)
    cl = cluster.Cluster(16)
    tps, mbs = (1, 2, 4), (1, 2, 4)
    u = plan_mod.unit_costs(m, chip, cl, tps, mbs, (False,))[0]
    sb = placement.spread_bound(u, m, tps, mbs, 32, 16)
    for (ti, t), (bi, mb) in itertools.product(enumerate(tps), enumerate(mbs)):
        r = placement.search_plans(m, chip, cl, 32, tps=(t,), microbatches=(mb,), sequence_parallel=(False,),
                                   top_k=10_000)
        for p in r.plans:
            assert sb[ti, bi, 0] <= p.step_time_s * (1 + 1e-12)


@pytest.mark.parametrize("extra", [{}, {"zero": (3,), "zero_group": (None, 4)}])
def test_best_plan_steps_equals_search_plans_per_design(extra):
    """The compiled best step of every design equals its own plan search, over the same options
    (ZeRO sharding groups included: on nodes of 4 joined by a slow network, ZeRO-3 sharded over
    one node's 4 ranks gathers its weights there, faster than over all 16)."""
    m = models.preset("gpt3-1.3b")
    designs = hardware.SearchSpace(tensor_cores=(2, 8), systolic_dims=((32, 32), (128, 128)), vector_units=(2,),
                                   vector_width=(512,), l1_bytes=(1 * MiB,), l2_bytes=(32 * MiB,),
                                   hbm=((GiB // 2, 1.2e12), (16 * GiB, 1.6e12))).arrays()
    cl = cluster.Cluster(16, 4, 300e9, 5e9) if extra else cluster.Cluster(16)
    tps, mbs, sps = (1, 2), (1, 2, 4), (False, True)
    opts = dict(placement.DEFAULT_PLAN_OPTIONS, **extra)
    units = plan_mod.unit_costs(m, designs, cl, tps, mbs, sps)
    got = placement.best_plan_steps(m, designs, cl, 32, units, tps, mbs, sps, **{k: v for k, v in opts.items()
                                                                              if k != "sequence_parallel"})
    want = []
    for row in designs:
        r = placement.search_plans(m, _chip(row), cl, 32, tps=tps, microbatches=mbs,
                                   **dict(opts, sequence_parallel=sps))
        want.append(r.best.step_time_s if r.feasible else np.inf)
    want = np.array(want)
    assert np.isinf(want).any() and np.isfinite(want).any()           # 0.5 GiB: some designs fit nothing
    if extra:     # the node-local group wins somewhere
        whole = placement.search_plans(m, _chip(designs[-1]), cl, 32, tps=tps, microbatches=mbs,
                                       **dict(opts, sequence_parallel=sps, zero_group=None))
        assert whole.best.step_time_s > want[-1] * (1 + 1e-9)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    cut = float(np.median(want[np.isfinite(want)]))
    capped = placement.best_plan_steps(m, designs, cl, 32, units, tps, mbs, sps, cutoff_s=cut,
                                       **{k: v for k, v in opts.items() if k != "sequence_parallel"})
    np.testing.assert_allclose(capped, np.where(want <= cut, want, np.inf), rtol=1e-12)


def test_top_k_counts_distinct_results_not_equivalent_designs():
    """Two chip families, each with six buffer variants that change nothing: the top 2 the
    table shows are the two families, so both must be ILP-ranked (counting rows, the best
    family's six copies would fill a "top 2" by themselves) — against ILP-planning every
    design."""
    m = models.preset("gpt3-1.3b")
    sp = hardware.SearchSpace(tensor_cores=(4, 8), systolic_dims=((64, 64),), vector_units=(2,), vector_width=(512,),
                              l1_bytes=(1 * MiB, 2 * MiB), l2_bytes=(32 * MiB, 64 * MiB, 128 * MiB),
                              hbm=((16 * GiB, 1.2e12),))
    designs = sp.arrays()
    cl = cluster.Cluster(16)
    res = search.cosearch(m, sp, cl, 32, "serial", tps=(1, 2), microbatches=(1, 2), refine_top=2)
    brute = np.array([placement.search_plans(m, _chip(row), cl, 32, tps=(1, 2), microbatches=(1, 2),
                                             time_model="ilp", **search.DEFAULT_PLAN_OPTIONS).best.step_time_s
                      for row in designs])
    distinct = np.unique(brute)
    assert len(distinct) >= 2 and (brute == distinct[0]).sum() >= 2
    need = set(np.flatnonzero(brute <= distinct[1]).tolist())
    ilp = {r.index: r for r in res.feasible if r.time_model == "ilp"}
    assert need <= set(ilp) and res.meta["ilp_ranking"]["proven"]
    for i in need:
        assert ilp[i].plan.step_time_s == pytest.approx(brute[i], rel=1e-12)
    lines = res.table(top=2).splitlines()
    first = lines.index(next(x for x in lines if x.startswith("-- ranked on ILP")))
    assert "ilp" in lines[first + 2] and "ilp" in lines[first + 3]
