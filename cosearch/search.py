"""The co-search: every accelerator design of a search space x its best training plan.

For all designs at once the roofline kernel prices the model's embedding, layer and
head graphs (fwd and bwd) for every (tp, microbatch) (:func:`cosearch.plan.unit_costs`);
a design's layer times are the serial sum of its op times (the per-layer ILP's upper
bound) during screening.  The exact plan search (:func:`cosearch.placement.search_plans`)
then finds each design's best plan over the plan options given (``plan_options``).
Designs are visited in order of a throughput upper bound and skipped once the bound
cannot beat the best plan found (pruning): any plan's step time is at least
``(B / mb) * tp * sum_u t_u(tp, mb) / chips`` (all chip-seconds of a step spread
perfectly over every chip), minimised over (tp, mb).  Designs the plan search cannot tell
apart (:func:`equivalent_designs`) are evaluated once.  Finally the top ``refine_top`` are
ranked exactly under ILP-scheduled layer times (:func:`cosearch.schedule.layer_time`,
cached): designs are re-planned in order of a valid bound on their ILP throughput until
none left could enter the top ``refine_top`` (see :func:`_refine`).
"""

from __future__ import annotations

import bisect
import json
import logging
import math
import os
import time
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, Executor, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any

import numpy as np

from . import memory, placement
from . import plan as plan_mod
from ._interrupt import stop_pool
from .hardware import DESIGN_FIELDS, Accelerator, AreaPowerModel, Cluster, SearchSpace
from .models import ModelConfig
from .models import preset as model_preset
from .placement import DEFAULT_PLAN_OPTIONS, ilp_plan
from .results import DesignResult, Results, pareto_front, place_row

__all__ = ["cosearch", "compare", "Results", "DesignResult", "evaluate_designs", "pareto_front",
           "DEFAULT_PLAN_OPTIONS", "ilp_plan"]

log = logging.getLogger("cosearch")

#: How many times a sweep replaces a pool whose worker died before giving up.
MAX_POOL_RESTARTS = 3

#: With ``executor=None`` the sweep runs in-process for this many seconds before it starts a
#: local process pool for what is left.
AUTO_POOL_AFTER_S = 5.0


class _DistinctTop:
    """The ``k`` smallest distinct step times seen; ``kth`` is the largest of them (inf until
    there are ``k``) — the cutoff that keeps every design of the top ``k`` distinct results."""

    def __init__(self, k: int, steps=()) -> None:
        self.k = max(1, int(k))
        self.best: list[float] = []
        for x in steps:
            self.add(x)

    def add(self, step: float) -> None:
        if step not in self.best:
            bisect.insort(self.best, step)
            del self.best[self.k:]

    @property
    def kth(self) -> float:
        return self.best[self.k - 1] if len(self.best) >= self.k else math.inf


# ---------------------------------------------------------------------- worker
def evaluate_designs(model: ModelConfig, designs: np.ndarray, indices: Sequence[int], cluster: Cluster,
                     global_batch: int, tps: Sequence[int], microbatches: Sequence[int],
                     units: np.ndarray, mem: memory.MemoryConfig, area_power: AreaPowerModel,
                     time_model: str = "sum", plan_options: dict[str, Any] | None = None,
                     cutoff_s: float | None = None, keep_top: int = 1) -> list[DesignResult]:
    """Best plan of each design (a picklable task for any executor).  ``units``: the
    designs' :func:`cosearch.plan.unit_costs` (designs, tps, microbatches, sp, fields).
    ``cutoff_s`` (pruning on; ``math.inf`` to start without a bound): designs with no plan
    faster than this step time (lowered to the ``keep_top``-th best distinct step found) are
    left out of the result — pruned, not infeasible.  None: every design is returned."""
    opts = dict(DEFAULT_PLAN_OPTIONS if plan_options is None else plan_options)
    out = []
    area = area_power.area_mm2(designs)
    power = area_power.power_w(designs)
    pruning = cutoff_s is not None
    cut = float(cutoff_s) if pruning else math.inf
    found = _DistinctTop(keep_top)
    for k, row in enumerate(designs):
        chip = Accelerator.from_array(row, name=f"design{indices[k]}")
        res = placement.search_plans(model, chip, cluster, global_batch, tps=tps, microbatches=microbatches,
                                     mem=mem, units=units[k], time_model=time_model,
                                     cutoff_s=cut if math.isfinite(cut) else None, **opts)
        if res.cut_off:
            continue
        if res.plans and pruning:
            found.add(res.plans[0].step_time_s)
            cut = min(cut, found.kth)
        out.append(DesignResult.from_row(indices[k], row, area[k], power[k], res.plans[0] if res.plans else None,
                                         res.reason, time_model))
    return out


def equivalent_designs(designs: np.ndarray, units: np.ndarray) -> tuple[np.ndarray, list[list[int]]]:
    """Group designs the plan search cannot tell apart: the same unit costs (every priced
    time, byte and parameter count) and the same HBM capacity, HBM bandwidth and link
    bandwidth — the only other things it reads of a chip.  Returns (group of each design,
    members of each group, lowest index first)."""
    import hashlib
    cols = [DESIGN_FIELDS.index(f) for f in ("hbm_bytes", "hbm_bandwidth_Bps", "link_bandwidth_Bps")]
    seen: dict[bytes, int] = {}
    group = np.empty(len(designs), dtype=np.int64)
    members: list[list[int]] = []
    for i in range(len(designs)):
        h = hashlib.blake2b(np.ascontiguousarray(units[i]).tobytes(), digest_size=16)
        h.update(np.ascontiguousarray(designs[i, cols]).tobytes())
        k = h.digest()
        if k not in seen:
            seen[k] = len(members)
            members.append([])
        group[i] = seen[k]
        members[seen[k]].append(i)
    return group, members


def buffer_equivalent_designs(model: ModelConfig, designs: np.ndarray, tps, mbs, sps, flash: bool,
                              efficiency=None) -> list[list[int]]:
    """Group designs that differ only in their buffer sizes (L1, L2) and get the same
    :func:`cosearch.schedule.scheduling_prices` for every graph the search prices
    (embedding, layer and head, fwd and bwd, for every (tp, microbatch, sequence parallel)).
    The buffers are read only by the roofline, so such designs get the same serial and ILP
    layer times, bounds and plans — the performance model cannot tell them apart (their area
    and power still differ).  Returns the groups, lowest index first."""
    from . import schedule
    d = np.atleast_2d(np.asarray(designs, dtype=np.float64))
    rest = d.copy()
    rest[:, [DESIGN_FIELDS.index("l1_bytes"), DESIGN_FIELDS.index("l2_bytes")]] = 0.0
    _, gid = np.unique(rest, axis=0, return_inverse=True)
    gid = np.asarray(gid).reshape(-1)
    shared = np.flatnonzero(np.bincount(gid)[gid] > 1)     # only families of 2+ can merge
    if len(shared):
        sub, sid = d[shared], gid[shared]
        seen: set = set()
        for t in tps:
            for mb in mbs:
                for sp in sps:
                    sp = bool(sp) and t > 1
                    if (t, mb, sp) in seen:
                        continue
                    seen.add((t, mb, sp))
                    for g in plan_mod._graph_rows(model, t, mb, sp, flash).values():
                        a = np.nan_to_num(schedule.scheduling_prices(g, sub, efficiency), nan=-1.0)
                        _, sid = np.unique(np.column_stack([sid, a]), axis=0, return_inverse=True)
                        sid = np.asarray(sid).reshape(-1)
        gid = gid.copy()
        gid[shared] = gid.max() + 1 + sid
    out: dict[int, list[int]] = {}
    for i, g in enumerate(gid.tolist()):
        out.setdefault(g, []).append(i)
    return sorted(out.values())


def _step_lower_bound(units: np.ndarray, model: ModelConfig, tps, mbs, global_batch, chips) -> np.ndarray:
    """Per design: the smallest :func:`cosearch.placement.spread_bound` over (tp, mb, sp)."""
    lb = placement.spread_bound(units, model, tps, mbs, global_batch, chips)
    return lb.reshape(len(units), -1).min(axis=1)


def _make_executor(executor) -> tuple[Executor | None, bool]:
    if executor == "serial":
        return None, False
    if executor is None or (isinstance(executor, int) and not isinstance(executor, bool)):
        n = (os.cpu_count() or 1) if executor is None else executor
        if n < 1:
            raise ValueError(f"executor: a number of worker processes must be >= 1, got {n}")
        if n <= 1 and executor is None:
            return None, False
        import multiprocessing as mp
        # spawn: numba's OpenMP threads make fork() unsafe once a kernel has run
        return ProcessPoolExecutor(max_workers=n, mp_context=mp.get_context("spawn")), True
    if not isinstance(executor, Executor):
        raise ValueError(f"executor must be a concurrent.futures.Executor, 'serial', a number of worker "
                         f"processes or None, got {executor!r}")
    return executor, False


def cosearch(model: ModelConfig | str, space: SearchSpace | None = None, cluster: Cluster | int = 1024,
             global_batch: int = 1536, executor: Executor | str | None = None, *,
             tps: Sequence[int] | None = None, microbatches: Sequence[int] | None = None,
             mem: memory.MemoryConfig | None = None, prune: bool = True, refine_top: int = 3,
             chunk_size: int = 32, progress: bool = False, baselines: bool = False,
             plan_options: dict[str, Any] | None = None, checkpoint: str | os.PathLike | None = None,
             checkpoint_every_s: float = 10.0, resume: str | os.PathLike | None = None,
             objective: str = "geomean", ilp_designs: int = 256) -> Results:
    """Co-search accelerator designs and training plans; see the module docstring.

    ``executor``: any ``concurrent.futures.Executor`` (e.g. a Dask ``Client.get_executor()``),
    ``"serial"`` to run in-process, an int for a local pool of that many worker processes from
    the start, or None: in-process, with a local process pool over the cores for whatever is
    left after :data:`AUTO_POOL_AFTER_S` seconds.  A
    ``ProcessPoolExecutor`` of your own should use the ``spawn`` (or ``forkserver``) start
    method: numba's OpenMP threads make ``fork`` unsafe.
    ``refine_top``: rank this many best designs exactly on ILP-scheduled layer times (0: off),
    re-planning at most ``ilp_designs`` groups of equivalent designs (``Results.meta
    ["ilp_ranking"]`` says whether that proved the top).
    ``baselines``: also run the TPUv4 and Spotlight-style baselines and PHAZE's fixed Megatron
    placement on the best chip found (``Results.baselines``).
    ``plan_options``: keyword options of :func:`cosearch.placement.search_plans` for every
    design (default :data:`DEFAULT_PLAN_OPTIONS`).
    Ctrl-C (or SIGTERM under the CLI) in any phase returns the results gathered so far
    (``Results.interrupted``) and stops the pool's workers.  A dead pool worker's chunks are
    retried on a fresh pool (up to :data:`MAX_POOL_RESTARTS` times).  ``checkpoint``: a JSON
    file the partial sweep is saved to at most every ``checkpoint_every_s`` seconds;
    ``resume``: such a file (or a saved result) made with the same settings — its evaluated
    designs are kept and not evaluated again.

    ``model`` a list of models: PHAZE's cross-model search — the design with the best
    ``objective`` (``"geomean"`` or ``"mean"``) of the models' throughputs
    (:func:`cosearch.multimodel.cosearch_models`; returns its ``MultiModelResults``).
    """
    if isinstance(model, (list, tuple)):
        from .multimodel import cosearch_models
        return cosearch_models(model, space, cluster, global_batch, objective=objective, mem=mem, prune=prune,
                               progress=progress, plan_options=plan_options, refine_top=refine_top,
                               ilp_designs=ilp_designs, baselines=baselines, resume=resume,
                               checkpoint=checkpoint, checkpoint_every_s=checkpoint_every_s)
    model = model_preset(model)
    space = space or SearchSpace()
    cluster = cluster if isinstance(cluster, Cluster) else Cluster(int(cluster))
    mem = mem or memory.MemoryConfig()
    if isinstance(global_batch, bool) or int(global_batch) != global_batch or global_batch <= 0:
        raise ValueError(f"global_batch must be a positive integer, got {global_batch!r}")
    global_batch = int(global_batch)
    designs = space.arrays()  # raises naming the constraint if nothing fits
    from . import _validate as v
    tps = v.int_list("tps", tps) if tps else tuple(placement.default_tps(model, cluster.num_chips))
    for t in tps:
        if model.heads % t or model.ffn_hidden % t or (model.kv_heads % t and model.kv_heads >= t):
            raise ValueError(f"tps: tp={t} must divide heads={model.heads} (and ffn_hidden={model.ffn_hidden})")
    mbs = v.int_list("microbatches", microbatches, v.MAX_BATCH) if microbatches else \
        tuple(placement.divisors(global_batch))
    bad = [b for b in mbs if global_batch % b]
    if bad:
        raise ValueError(f"microbatch sizes {bad} do not divide global_batch={global_batch}")
    opts = dict(DEFAULT_PLAN_OPTIONS if plan_options is None else plan_options)
    sps = placement._bools("sequence_parallel", opts.get("sequence_parallel"), (False, True))
    opts["sequence_parallel"] = sps
    all_mbs = mbs
    # microbatch sizes with which no plan fits any design's HBM are never priced
    mbs = placement.fitting_microbatches(model, designs, cluster, global_batch, tps, mbs, mem, **opts)
    units = plan_mod.unit_costs(model, designs, cluster, tps, mbs, sps, bool(opts.get("flash_attention", False)),
                                engine=opts.get("engine"))
    lb = _step_lower_bound(units, model, tps, mbs, global_batch, cluster.num_chips)
    group, members = equivalent_designs(designs, units)
    reps = np.array(sorted({m[0] for m in members}), dtype=np.int64)
    order = reps[np.argsort(lb[reps], kind="stable")]
    size = np.array([len(members[group[i]]) for i in range(len(designs))])
    area_all = space.area_power.area_mm2(designs)
    power_all = space.area_power.power_w(designs)
    meta = {"tps": list(tps), "microbatches": list(mbs), "time_model": "sum", "cluster": cluster.to_dict(),
            "plan_options": {k: list(v) if isinstance(v, tuple) else v for k, v in opts.items()},
            "area_budget_mm2": space.area_budget_mm2, "power_budget_w": space.power_budget_w, "refined": []}
    rows: list[DesignResult] = []
    done_idx: set[int] = set()
    pruned = 0
    if resume is not None:
        old = Results.from_json(resume)
        settings = (old.model, old.chips, old.global_batch, old.total_designs)
        same_meta = {k: v for k, v in old.meta.items() if k != "refined"} == \
            json.loads(json.dumps({k: v for k, v in meta.items() if k != "refined"}))
        if settings != (model.name, cluster.num_chips, global_batch, len(designs)) or not same_meta:
            raise ValueError(f"{resume}: it was made with other settings ({old.model}, {old.chips} chips, batch "
                             f"{old.global_batch}, {old.total_designs} designs); resume with the same ones")
        rows = [r for r in old.rows if r.time_model == "sum"]
        have = {r.index for r in rows}
        # a group of equivalent designs counts as done only whole; pruned designs are
        # looked at again (and counted again)
        whole = {int(group[i]) for i in have if all(m in have for m in members[group[i]])}
        rows = [r for r in rows if int(group[r.index]) in whole]
        done_idx = {r.index for r in rows}
    interrupted = False
    stopped_by: BaseException | None = None
    # prune against the keep_top-th best distinct step (the ILP ranking seeds its top k
    # distinct results with the sweep's)
    keep_top = max(1, int(refine_top or 0))
    tops = _DistinctTop(keep_top, (r.plan.step_time_s for r in rows if r.plan is not None))
    # executor None: run in-process first and start a local pool only if the sweep is still
    # going after AUTO_POOL_AFTER_S (spawning workers costs seconds; a well-pruned sweep of
    # a large space is often done sooner)
    auto = executor is None
    pool, owned = _make_executor("serial" if auto else executor)
    bar = None
    if progress:
        from tqdm.auto import tqdm
        bar = tqdm(total=len(designs), initial=len(done_idx) + pruned, desc="designs", unit="design")
    last_save = [time.monotonic()]

    def snapshot(final: bool) -> Results:
        return Results(model.name, cluster.num_chips, global_batch, list(rows), pruned=pruned,
                       total_designs=len(designs), interrupted=not final, meta=json.loads(json.dumps(meta)))

    def task_args(idx):
        return (model, designs[idx], idx, cluster, global_batch, tps, mbs, units[idx], mem,
                space.area_power, "sum", opts, tops.kth if prune else None, keep_top)

    def absorb(batch, submitted):
        nonlocal pruned
        got = {r.index for r in batch}
        cut = int(sum(size[i] for i in submitted if i not in got))   # no plan of theirs beat the cutoff
        pruned += cut
        if bar is not None and cut:
            bar.update(cut)
        for r in batch:
            for m in members[group[r.index]]:          # the design and those equivalent to it
                rows.append(r if m == r.index else DesignResult.from_row(
                    m, designs[m], area_all[m], power_all[m], r.plan, r.reason, r.time_model))
            if r.plan is not None:
                tops.add(r.plan.step_time_s)
        if bar is not None:
            bar.update(int(sum(size[r.index] for r in batch)))
            if tops.best:
                bar.set_postfix(best_tok_s=f"{global_batch * model.seq_len / tops.best[0]:,.0f}")
        if checkpoint is not None and time.monotonic() - last_save[0] >= checkpoint_every_s:
            snapshot(False).to_json(checkpoint)
            last_save[0] = time.monotonic()

    def select(ch):
        nonlocal pruned
        ch = ch[[i not in done_idx for i in ch]] if done_idx else ch
        keep = ch[lb[ch] <= tops.kth] if prune else ch
        dropped = int(size[ch].sum() - size[keep].sum())
        pruned += dropped
        if bar is not None and dropped:
            bar.update(dropped)
        return keep

    try:
        chunks = [order[i:i + chunk_size] for i in range(0, len(order), chunk_size)]
        ci = 0
        if pool is None:
            started = time.monotonic()
            can_pool = auto and (os.cpu_count() or 1) > 1
            while ci < len(chunks) and not (can_pool and time.monotonic() - started > AUTO_POOL_AFTER_S):
                keep = select(chunks[ci])
                ci += 1
                if len(keep):
                    absorb(evaluate_designs(*task_args(keep)), keep)
            if ci < len(chunks):
                pool, owned = _make_executor(None)
        if pool is not None:
            workers = max(1, getattr(pool, "_max_workers", os.cpu_count() or 2))
            pending: dict = {}
            restarts = 0
            while ci < len(chunks) or pending:
                while ci < len(chunks) and len(pending) < 2 * workers:
                    keep = select(chunks[ci])
                    ci += 1
                    if len(keep):
                        pending[pool.submit(evaluate_designs, *task_args(keep))] = keep
                if not pending:
                    break
                done, _ = wait(list(pending), return_when=FIRST_COMPLETED)
                broken = False
                for fut in done:
                    try:
                        absorb(fut.result(), pending[fut])
                        pending.pop(fut)
                    except BrokenProcessPool:
                        broken = True
                if broken:   # a worker died: resubmit every unfinished chunk to a fresh pool
                    if not owned or restarts >= MAX_POOL_RESTARTS:
                        raise RuntimeError("worker processes died repeatedly (out of memory?); "
                                           f"{len(rows)} designs were evaluated") from None
                    restarts += 1
                    log.warning("a worker process died; retrying %d chunks on a fresh pool", len(pending))
                    stop_pool(pool)
                    pool, owned = _make_executor(None)
                    pending = {pool.submit(evaluate_designs, *task_args(k)): k for k in pending.values()}
            # designs pruned after submission are still evaluated; that is harmless
    except KeyboardInterrupt as exc:
        interrupted, stopped_by = True, exc
    finally:
        if bar is not None:
            bar.close()
        if owned:
            if interrupted:
                stop_pool(pool)
            else:
                pool.shutdown(wait=True)
    res = snapshot(not interrupted)
    res.stopped_by = stopped_by
    try:
        if refine_top and not interrupted and res.feasible:
            _refine(res, model, cluster, global_batch, mem, refine_top, opts, designs, tps, mbs,
                    area_all, power_all, progress, max_designs=ilp_designs)
        if baselines and not interrupted:
            from . import baselines as bl
            res.baselines = bl.run_baselines(model, space, cluster, global_batch, mem=mem, tps=tps,
                                             microbatches=all_mbs, refine=bool(refine_top), plan_options=opts,
                                             cosearched=res.best.accelerator() if res.feasible else None)
    except KeyboardInterrupt as exc:      # refinement or baselines cut short: keep the sweep
        res.interrupted, res.stopped_by = True, exc
    return res


def _bound_candidates(model: ModelConfig, designs: np.ndarray, cluster: Cluster, global_batch: int, tps, mbs, sps,
                      flash: bool, engine, ceiling: float) -> tuple[np.ndarray, dict[int, np.ndarray]]:
    """The designs whose perfect-spread step on :func:`cosearch.schedule.layer_bounds` layer
    times is at most ``ceiling`` — the only ones whose ILP step can be — and those unit
    costs by design index.  The whole space is first screened on the far cheaper
    :func:`cosearch.schedule.work_bounds` (itself a valid bound on the ILP layer time, so a
    design it puts above ``ceiling`` cannot be below it), and ``layer_bounds`` is priced on
    the rest."""
    wb = plan_mod.unit_costs(model, designs, cluster, tps, mbs, sps, flash, time_model="work-bound", engine=engine)
    pre = np.flatnonzero(_step_lower_bound(wb, model, tps, mbs, global_batch, cluster.num_chips) <= ceiling)
    if not len(pre):
        return pre, {}
    ub = plan_mod.unit_costs(model, designs[pre], cluster, tps, mbs, sps, flash, time_model="bound", engine=engine)
    keep = _step_lower_bound(ub, model, tps, mbs, global_batch, cluster.num_chips) <= ceiling
    return pre[keep], {int(i): ub[k] for k, i in enumerate(pre) if keep[k]}


def _refine(res: Results, model: ModelConfig, cluster: Cluster, global_batch: int,
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
    import heapq
    sps = tuple(opts.get("sequence_parallel", (False,)))
    flash = bool(opts.get("flash_attention", False))
    engine = opts.get("engine")
    by_index = {r.index: k for k, r in enumerate(res.rows)}
    bar = None
    if progress:
        from tqdm.auto import tqdm
        bar = tqdm(desc="ILP ranking", unit="design", leave=False)
    planned = 0
    steps = _DistinctTop(top)                 # distinct ILP step times found
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
    try:
        # seeds: the serial sweep's best designs, planned exactly until they give `top`
        # distinct ILP steps — the cutoff of every bound below (an ILP layer is never
        # slower than its serial sum, so these are found early)
        seeded: dict[int, object] = {}
        rows = sorted((r for r in res.rows if r.plan is not None), key=lambda r: r.plan.step_time_s)
        pool = list(dict.fromkeys(r.index for r in rows))
        if pool:
            pool_ub = plan_mod.unit_costs(model, designs[pool], cluster, tps, mbs, sps, flash, time_model="bound",
                                          engine=engine)
            ub.update({i: pool_ub[k] for k, i in enumerate(pool)})
            family = {pool[k]: [pool[j] for j in g]
                      for g in buffer_equivalent_designs(model, designs[pool], tps, mbs, sps, flash) for k in g}
        for i in pool:
            if math.isfinite(kth()) or planned >= max_designs:
                break
            if i not in seeded:
                new = plan_design(i, family[i])
                seeded.update({m: new for m in family[i]})
        # bound (0) over the whole space picks the candidates; buffer-equivalent candidates
        # share one plan (a seed's, where the group holds one)
        cand, more_ub = _bound_candidates(model, designs, cluster, global_batch, tps, mbs, sps, flash, engine,
                                          kth())
        ub.update(more_ub)
        groups = [[int(cand[k]) for k in g]
                  for g in buffer_equivalent_designs(model, designs[cand], tps, mbs, sps, flash)]
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
    res.meta["ilp_ranking"] = {"proven": proven, "scheduled": planned, "designs": len(res.meta["refined"]),
                               "top": top, "open": left}


def compare(model: ModelConfig | str, space: SearchSpace | None = None, cluster: Cluster | int = 1024,
            global_batch: int = 1536, executor=None, show: bool = True, **kwargs):
    """Co-search vs the TPUv4 and Spotlight-style baselines; prints the side-by-side table."""
    res = cosearch(model_preset(model), space, cluster, global_batch, executor, baselines=True, **kwargs)
    if show:
        print(res.table(top=5))
    return res
