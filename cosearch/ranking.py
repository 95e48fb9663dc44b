"""Exact ranking of the co-search's top designs on ILP-scheduled layer times.

After the sweep (:mod:`cosearch.sweep`) has screened every design on serial layer times,
:func:`rank_top_ilp` re-plans designs in order of valid bounds on their ILP step time until
none left could enter the top ``k`` distinct results (best-first search over three bounds,
each tighter and dearer than the last).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from . import _validate as v
from . import memory, placement
from . import plan as plan_mod
from .cluster import Cluster
from .hardware import Accelerator
from .models import ModelConfig
from .placement import ilp_plan
from .results import DesignResult, Results, place_row
from .sweep import DistinctTop, buffer_equivalent_designs, step_lower_bound

__all__ = ["rank_top_ilp", "bound_candidates"]


def bound_candidates(model: ModelConfig, designs: np.ndarray, cluster: Cluster, global_batch: int, tps, mbs, sps,
                      flash: bool, engine, ceiling: float,
                      priced: dict | None = None) -> tuple[np.ndarray, dict[int, np.ndarray]]:
    """The designs whose perfect-spread step on :func:`cosearch.schedule.layer_bounds` layer
    times is at most ``ceiling`` — the only ones whose ILP step can be — and those unit
    costs by design index.  The whole space is first screened on the far cheaper
    :func:`cosearch.schedule.work_bounds` (itself a valid bound on the ILP layer time, so a
    design it puts above ``ceiling`` cannot be below it), and ``layer_bounds`` is priced on
    the rest."""
    v.instances("bound_candidates", none_ok=False, model=(model, ModelConfig), cluster=(cluster, Cluster),
                designs=(designs, np.ndarray))
    pr = priced or {}
    cp = int(pr.get("context_parallel", 1))
    wb = plan_mod.unit_costs(model, designs, cluster, tps, mbs, sps, flash, time_model="work-bound", engine=engine,
                             **pr)
    pre = np.flatnonzero(step_lower_bound(wb, model, tps, mbs, global_batch, cluster.num_chips, cp) <= ceiling)
    if not len(pre):
        return pre, {}
    ub = plan_mod.unit_costs(model, designs[pre], cluster, tps, mbs, sps, flash, time_model="bound", engine=engine,
                             **pr)
    keep = step_lower_bound(ub, model, tps, mbs, global_batch, cluster.num_chips, cp) <= ceiling
    return pre[keep], {int(i): ub[k] for k, i in enumerate(pre) if keep[k]}



def rank_top_ilp(res: Results, model: ModelConfig, cluster: Cluster, global_batch: int,
            mem: memory.MemoryConfig, top: int, opts: dict[str, Any], designs: np.ndarray,
            tps, mbs, area: np.ndarray, power: np.ndarray, progress: bool = False, max_designs: int = 64) -> None:
    """Exact top-``top`` distinct results under ILP layer times, by best-first search over
    bounds.  "Distinct": the table collapses designs with one result into a row, so the top
    ``top`` rows it shows are the designs whose ILP step is among the ``top`` smallest
    distinct steps — every such design gets an ILP plan.

    Seeds first: the serial sweep's best designs are planned exactly until they give ``top``
    distinct ILP steps; the largest of those (the running ``top``-th distinct step) bounds
    the rest.  Three valid bounds on a design's ILP step time, each tighter and dearer than
    the last: (0) the perfect-spread step on :func:`cosearch.schedule.layer_bounds` layer
    times (after a :func:`cosearch.schedule.work_bounds` screen of the whole space; it picks
    the candidates); (1) the design's best plan under those layer times (the exact plan
    search, the stage formulas being monotone in layer times;
    :func:`cosearch.placement.best_plan_steps`, one compiled call for all candidates); (2)
    the exact ILP plan (:func:`cosearch.placement.ilp_plan`).  A heap holds the candidates
    at bound (1), and the smallest is planned exactly until the next bound exceeds the
    ``top``-th distinct ILP step found — then no design left could enter.  Designs that
    differ only in buffers that make no difference to them
    (:func:`buffer_equivalent_designs`) are one heap entry and get one plan (a seed's, where
    their group holds one); all other designs are planned on their own (two designs with
    equal serial layer times may schedule differently).  Planned designs' rows become ILP
    rows (designs the sweep had pruned gain a row).  At most ``max_designs`` ILP plans are
    made; ``res.meta["ilp_ranking"]`` says whether the top was proven and, if not, how many
    designs' bounds still beat the ``top``-th distinct ILP step."""
    v.instances("rank_top_ilp", none_ok=False, res=(res, Results), model=(model, ModelConfig),
                cluster=(cluster, Cluster), mem=(mem, memory.MemoryConfig), opts=(opts, dict),
                designs=(designs, np.ndarray))
    import heapq
    sps = tuple(opts.get("sequence_parallel", (False,)))
    flash = bool(opts.get("flash_attention", False))
    engine = opts.get("engine")
    priced = placement.priced_options(opts)
    by_index = {r.index: k for k, r in enumerate(res.rows)}
    bar = None
    if progress:
        from tqdm.auto import tqdm
        bar = tqdm(desc="ILP ranking", unit="design", leave=False)
    planned = 0
    steps = DistinctTop(top)                 # distinct ILP step times found
    ub: dict[int, np.ndarray] = {}            # bound unit costs: the seeds', then the candidates'
    plan_opts = {k: v for k, v in opts.items() if k != "sequence_parallel"}

    def kth() -> float:
        # the top-th best *distinct* step: the table collapses designs with one result, so
        # "top k" means k distinct results, not k rows
        return steps.kth

    def plan_design(i: int, members: Sequence[int]):
        nonlocal planned
        planned += 1
        chip = Accelerator.from_array(designs[i], name=f"design{i}")
        new = ilp_plan(model, chip, cluster, global_batch, mem, dict(plan_opts, sequence_parallel=sps), tps=tps,
                       microbatches=mbs, cutoff_s=kth(), units_bound=ub[i])
        if bar is not None:
            bar.update(len(members))
        record(new, members)
        return new

    def record(new, members) -> None:
        if new is None:
            return
        steps.add(new.step_time_s)
        for m in members:
            place_row(res, by_index, m, DesignResult.from_row(m, designs[m], area[m], power[m], new, "", "ilp"))
            res.meta["refined"].append(int(m))

    heap: list = []
    groups: list[list[int]] = []
    proven = True
    from .schedule import cache_info
    limited0 = cache_info()["time_limited"]
    try:
        # seeds: the serial sweep's best designs, planned exactly until they give `top`
        # distinct ILP steps — the cutoff of every bound below (an ILP layer is never
        # slower than its serial sum, so these are found early)
        seeded: dict[int, object] = {}
        rows = sorted((r for r in res.rows if r.plan is not None), key=lambda r: r.plan.step_time_s)
        pool = list(dict.fromkeys(r.index for r in rows))
        if pool:
            pool_ub = plan_mod.unit_costs(model, designs[pool], cluster, tps, mbs, sps, flash, time_model="bound",
                                          engine=engine, **priced)
            ub.update({i: pool_ub[k] for k, i in enumerate(pool)})
            family = {pool[k]: [pool[j] for j in g]
                      for g in buffer_equivalent_designs(model, designs[pool], tps, mbs, sps, flash, priced=priced)
                      for k in g}
        for i in pool:
            if math.isfinite(kth()) or planned >= max_designs:
                break
            if i not in seeded:
                new = plan_design(i, family[i])
                seeded.update({m: new for m in family[i]})
        # bound (0) over the whole space picks the candidates; buffer-equivalent candidates
        # share one plan (a seed's, where the group holds one)
        cand, more_ub = bound_candidates(model, designs, cluster, global_batch, tps, mbs, sps, flash, engine,
                                          kth(), priced)
        ub.update(more_ub)
        groups = [[int(cand[k]) for k in g]
                  for g in buffer_equivalent_designs(model, designs[cand], tps, mbs, sps, flash, priced=priced)]
        todo = []
        for gi, g in enumerate(groups):
            have = [m for m in g if m in seeded]
            if have:
                record(seeded[have[0]], [m for m in g if m not in seeded])
            else:
                todo.append(gi)
        res.meta["ilp_ranking_candidates"] = len(todo)
        # bound (1) for every other group at once (one compiled call): its best plan on bound
        # layer times, with the seeds' k-th ILP step as cutoff
        reps = np.array([groups[gi][0] for gi in todo], dtype=np.int64)
        first = placement.best_plan_steps(model, designs[reps], cluster, global_batch,
                                          np.array([ub[int(r)] for r in reps]), tps, mbs, sps,
                                          mem, kth(), **plan_opts) if len(todo) else np.zeros(0)
        heap = [(float(first[k]), gi) for k, gi in enumerate(todo) if np.isfinite(first[k])]
        heapq.heapify(heap)
        while heap and heap[0][0] <= kth():
            if planned >= max_designs:
                proven = False
                break
            _, gi = heapq.heappop(heap)
            plan_design(groups[gi][0], groups[gi])
    finally:
        if bar is not None:
            bar.close()
    cut = kth()
    left = sum(len(groups[gi]) for b, gi in heap if b <= cut) if not proven else 0
    # a layer the ILP did not prove optimal (time limit) leaves its plan, and so the ranking, unproven
    limited = cache_info()["time_limited"] - limited0
    res.meta["ilp_ranking"] = {"proven": proven and limited == 0, "scheduled": planned,
                               "designs": len(res.meta["refined"]), "top": top, "open": left,
                               "time_limited_layers": limited}


