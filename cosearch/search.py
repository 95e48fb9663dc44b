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
from ._kernels import formulas as F
from .hardware import DESIGN_FIELDS, Accelerator, AreaPowerModel, Cluster, SearchSpace
from .models import ModelConfig
from .models import preset as model_preset
from .placement import DEFAULT_PLAN_OPTIONS, ilp_plan
from .results import DesignResult, Results, pareto_front

__all__ = ["cosearch", "compare", "Results", "DesignResult", "evaluate_designs", "pareto_front",
           "DEFAULT_PLAN_OPTIONS", "ilp_plan"]

log = logging.getLogger("cosearch")

#: How many times a sweep replaces a pool whose worker died before giving up.
MAX_POOL_RESTARTS = 3


# ---------------------------------------------------------------------- worker
def evaluate_designs(model: ModelConfig, designs: np.ndarray, indices: Sequence[int], cluster: Cluster,
                     global_batch: int, tps: Sequence[int], microbatches: Sequence[int],
                     units: np.ndarray, mem: memory.MemoryConfig, area_power: AreaPowerModel,
                     time_model: str = "sum", plan_options: dict[str, Any] | None = None,
                     cutoff_s: float | None = None) -> list[DesignResult]:
    """Best plan of each design (a picklable task for any executor).  ``units``: the
    designs' :func:`cosearch.plan.unit_costs` (designs, tps, microbatches, sp, fields).
    ``cutoff_s`` (pruning on; ``math.inf`` to start without a bound): designs with no plan
    faster than this step time (lowered as better ones are found) are left out of the
    result — pruned, not infeasible.  None: every design is returned."""
    opts = dict(DEFAULT_PLAN_OPTIONS if plan_options is None else plan_options)
    out = []
    area = area_power.area_mm2(designs)
    power = area_power.power_w(designs)
    pruning = cutoff_s is not None
    cut = float(cutoff_s) if pruning else math.inf
    for k, row in enumerate(designs):
        chip = Accelerator.from_array(row, name=f"design{indices[k]}")
        res = placement.search_plans(model, chip, cluster, global_batch, tps=tps, microbatches=microbatches,
                                     mem=mem, units=units[k], time_model=time_model,
                                     cutoff_s=cut if math.isfinite(cut) else None, **opts)
        if res.cut_off:
            continue
        if res.plans and pruning:
            cut = min(cut, res.plans[0].step_time_s)
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


def _step_lower_bound(units: np.ndarray, model: ModelConfig, tps, mbs, global_batch, chips) -> np.ndarray:
    """Per design: min over (tp, mb) of (B / mb) * tp * (per-microbatch work) / chips."""
    total = F.unit_work.py_func(np.moveaxis(units, -1, 0), model.num_layers).min(axis=-1)  # (D, T, B)
    tp = np.array(tps, dtype=float)[None, :, None]
    mb = np.array(mbs, dtype=float)[None, None, :]
    lb = (global_batch / mb) * tp * total / chips
    return lb.reshape(len(units), -1).min(axis=1)


def _make_executor(executor) -> tuple[Executor | None, bool]:
    if executor == "serial":
        return None, False
    if executor is None:
        n = os.cpu_count() or 1
        if n <= 1:
            return None, False
        import multiprocessing as mp
        # spawn: numba's OpenMP threads make fork() unsafe once a kernel has run
        return ProcessPoolExecutor(max_workers=n, mp_context=mp.get_context("spawn")), True
    if not isinstance(executor, Executor):
        raise ValueError(f"executor must be a concurrent.futures.Executor, 'serial' or None, got {executor!r}")
    return executor, False


def cosearch(model: ModelConfig | str, space: SearchSpace | None = None, cluster: Cluster | int = 1024,
             global_batch: int = 1536, executor: Executor | str | None = None, *,
             tps: Sequence[int] | None = None, microbatches: Sequence[int] | None = None,
             mem: memory.MemoryConfig | None = None, prune: bool = True, refine_top: int = 3,
             chunk_size: int = 32, progress: bool = False, baselines: bool = False,
             plan_options: dict[str, Any] | None = None, checkpoint: str | os.PathLike | None = None,
             checkpoint_every_s: float = 10.0, resume: str | os.PathLike | None = None,
             objective: str = "geomean", ilp_designs: int = 64) -> Results:
    """Co-search accelerator designs and training plans; see the module docstring.

    ``executor``: any ``concurrent.futures.Executor`` (e.g. a Dask ``Client.get_executor()``),
    ``"serial"`` to run in-process, or None for a local process pool over the cores.  A
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
                               progress=progress, plan_options=plan_options)
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
    units = plan_mod.unit_costs(model, designs, cluster, tps, mbs, sps,
                                bool(opts.get("flash_attention", False)))
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
    best_step = min((r.plan.step_time_s for r in rows if r.plan is not None), default=math.inf)
    pool, owned = _make_executor(executor)
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
                space.area_power, "sum", opts, best_step if prune else None)

    def absorb(batch, submitted):
        nonlocal best_step, pruned
        got = {r.index for r in batch}
        cut = int(sum(size[i] for i in submitted if i not in got))   # no plan of theirs beat the cutoff
        pruned += cut
        if bar is not None and cut:
            bar.update(cut)
        for r in batch:
            for m in members[group[r.index]]:          # the design and those equivalent to it
                rows.append(r if m == r.index else DesignResult.from_row(
                    m, designs[m], area_all[m], power_all[m], r.plan, r.reason, r.time_model))
            if r.plan is not None and r.plan.step_time_s < best_step:
                best_step = r.plan.step_time_s
        if bar is not None:
            bar.update(int(sum(size[r.index] for r in batch)))
            if best_step < math.inf:
                bar.set_postfix(best_tok_s=f"{global_batch * model.seq_len / best_step:,.0f}")
        if checkpoint is not None and time.monotonic() - last_save[0] >= checkpoint_every_s:
            snapshot(False).to_json(checkpoint)
            last_save[0] = time.monotonic()

    def select(ch):
        nonlocal pruned
        ch = ch[[i not in done_idx for i in ch]] if done_idx else ch
        keep = ch[lb[ch] <= best_step] if prune else ch
        dropped = int(size[ch].sum() - size[keep].sum())
        pruned += dropped
        if bar is not None and dropped:
            bar.update(dropped)
        return keep

    try:
        chunks = [order[i:i + chunk_size] for i in range(0, len(order), chunk_size)]
        if pool is None:
            for ch in chunks:
                keep = select(ch)
                if len(keep):
                    absorb(evaluate_designs(*task_args(keep)), keep)
        else:
            workers = max(1, getattr(pool, "_max_workers", os.cpu_count() or 2))
            pending: dict = {}
            restarts = 0
            ci = 0
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
                                             microbatches=mbs, refine=bool(refine_top), plan_options=opts,
                                             cosearched=res.best.accelerator() if res.feasible else None)
    except KeyboardInterrupt as exc:      # refinement or baselines cut short: keep the sweep
        res.interrupted, res.stopped_by = True, exc
    return res


def _refine(res: Results, model: ModelConfig, cluster: Cluster, global_batch: int,
            mem: memory.MemoryConfig, top: int, opts: dict[str, Any], designs: np.ndarray,
            tps, mbs, area: np.ndarray, power: np.ndarray, progress: bool = False, max_designs: int = 64) -> None:
    """Exact top-``top`` under ILP layer times.  Every design's ILP throughput is at most
    ``tokens / lb`` with ``lb`` the perfect-spread step bound on
    :func:`cosearch.schedule.layer_bounds` layer times; designs are re-planned exactly
    (:func:`cosearch.placement.ilp_plan`) in order of that bound until the ``top``-th best
    ILP step time is no slower than the next design's bound — so no design left
    unscheduled could enter the top ``top``.  Each design is re-planned on its own: designs
    the plan search cannot tell apart on serial layer times (:func:`equivalent_designs`) may
    still schedule differently (the ILP reads per-op times and core counts).  Re-planned
    designs' rows become ILP rows (designs the sweep had pruned gain a row).  At most
    ``max_designs`` designs are re-planned; ``res.meta["ilp_ranking"]`` says whether the top
    was proven and, if not, how many designs' bounds still beat the ``top``-th ILP plan."""
    sps = tuple(opts.get("sequence_parallel", (False,)))
    ub = plan_mod.unit_costs(model, designs, cluster, tps, mbs, sps, bool(opts.get("flash_attention", False)),
                             time_model="bound")
    lb = _step_lower_bound(ub, model, tps, mbs, global_batch, cluster.num_chips)
    reps = sorted(range(len(designs)), key=lambda g: (lb[g], g))
    steps: list[float] = []
    by_index = {r.index: k for k, r in enumerate(res.rows)}
    bar = None
    if progress:
        from tqdm.auto import tqdm
        bar = tqdm(desc="ILP ranking", unit="design", leave=False)
    done = 0
    proven = True
    try:
        for pos, rep in enumerate(reps):
            kth = sorted(steps)[top - 1] if len(steps) >= top else math.inf
            if lb[rep] > kth:
                break
            if done >= max_designs:
                proven = False
                left = sum(1 for g in reps[pos:] if lb[g] <= kth)
                res.meta["ilp_ranking"] = {"proven": False, "scheduled": done, "top": top, "open": left}
                break
            done += 1
            chip = Accelerator.from_array(designs[rep], name=f"design{rep}")
            new = ilp_plan(model, chip, cluster, global_batch, mem, opts, tps=tps, microbatches=mbs,
                           cutoff_s=kth, units_bound=ub[rep])
            if bar is not None:
                bar.update(1)
            if new is None:
                continue
            steps.append(new.step_time_s)
            row = DesignResult.from_row(rep, designs[rep], area[rep], power[rep], new, "", "ilp")
            if rep in by_index:
                res.rows[by_index[rep]] = row
            else:
                by_index[rep] = len(res.rows)
                res.rows.append(row)
                res.pruned -= 1
            res.meta["refined"].append(int(rep))
    finally:
        if bar is not None:
            bar.close()
    if proven:
        res.meta["ilp_ranking"] = {"proven": True, "scheduled": done, "top": top, "open": 0}


def compare(model: ModelConfig | str, space: SearchSpace | None = None, cluster: Cluster | int = 1024,
            global_batch: int = 1536, executor=None, show: bool = True, **kwargs):
    """Co-search vs the TPUv4 and Spotlight-style baselines; prints the side-by-side table."""
    res = cosearch(model_preset(model), space, cluster, global_batch, executor, baselines=True, **kwargs)
    if show:
        print(res.table(top=5))
    return res
