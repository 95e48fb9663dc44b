"""The co-search's screening sweep: every design of a space, its best plan on serial layer times.

For all designs at once the roofline kernel prices the model's embedding, layer and head
graphs (fwd and bwd) for every (tp, microbatch) (:func:`cosearch.plan.unit_costs`); a
design's layer times are the serial sum of its op times (the per-layer ILP's upper bound).
The exact plan search (:func:`cosearch.placement.search_plans`) finds each design's best
plan (:func:`evaluate_designs`, a picklable task for any executor).  Designs are visited in
order of a throughput upper bound (:func:`step_lower_bound`) and skipped once the bound cannot
beat the ``keep_top``-th best distinct step found (pruning).  Designs the plan search cannot
tell apart (:func:`equivalent_designs`) are evaluated once.  :func:`run_sweep` drives it,
in-process or on a pool (a dead worker's chunks are retried on a fresh pool), checkpointing
as it goes; Ctrl-C returns what is finished.
"""

from __future__ import annotations

import bisect
import logging
import math
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Executor, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import memory, placement, schedule
from . import plan as plan_mod
from ._interrupt import stop_pool, worker_deaths
from .cluster import Cluster
from .hardware import DESIGN_FIELDS, Accelerator, AreaPowerModel, PhazeAreaModel
from .models import ModelConfig
from .placement import DEFAULT_PLAN_OPTIONS
from .results import DesignResult

__all__ = ["DistinctTop", "evaluate_designs", "equivalent_designs", "buffer_equivalent_designs",
           "step_lower_bound", "make_executor", "run_sweep", "SweepSpace", "SweepOutcome",
           "MAX_POOL_RESTARTS", "AUTO_POOL_AFTER_S"]

log = logging.getLogger("cosearch")

#: How many times a sweep replaces a pool whose worker died before giving up.
MAX_POOL_RESTARTS = 3

#: With ``executor=None`` the sweep runs in-process for this many seconds before it starts a
#: local process pool for what is left.
AUTO_POOL_AFTER_S = 5.0


class DistinctTop:
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



def evaluate_designs(model: ModelConfig, designs: np.ndarray, indices: Sequence[int], cluster: Cluster,
                     global_batch: int, tps: Sequence[int], microbatches: Sequence[int],
                     units: np.ndarray, mem: memory.MemoryConfig, area_power: AreaPowerModel | PhazeAreaModel,
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
    found = DistinctTop(keep_top)
    for k, row in enumerate(designs):
        chip = Accelerator.from_array(row, name=f"design{indices[k]}")
        lacks = placement.missing_format(chip, opts.get("precision", "bf16"))
        if lacks:
            if not pruning:      # no plan in a format without its units (its bf16 ones are another run's)
                out.append(DesignResult.from_row(indices[k], row, area[k], power[k], None, lacks, time_model))
            continue
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
                              efficiency=None, priced: dict | None = None) -> list[list[int]]:
    """Group designs that differ only in their buffer sizes (L1, L2) and get the same
    :func:`cosearch.schedule.scheduling_prices` for every graph the search prices
    (embedding, layer and head, fwd and bwd, for every (tp, microbatch, sequence parallel)).
    The buffers are read only by the roofline, so such designs get the same serial and ILP
    layer times, bounds and plans — the performance model cannot tell them apart (their area
    and power still differ).  ``priced``: the context-parallel degree, precision, expert-parallel
    and expert-tensor-parallel degree the graphs are built at (:func:`cosearch.placement.priced_options`).
    Returns the groups, lowest index first."""
    pr = priced or {}

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
            etp = None if t == 1 else pr.get("expert_tensor_parallel")     # at tp 1, etp 1 is etp = tp
            for mb in mbs:
                for sp in sps:
                    sp = bool(sp) and t > 1
                    if (t, mb, sp) in seen or (etp == 1 and not sp):     # (etp 1 under tp > 1: no plan without sp)
                        continue
                    seen.add((t, mb, sp))
                    graphs = list(plan_mod._graph_rows(model, t, mb, sp, flash, pr.get("context_parallel", 1),
                                                       pr.get("precision", "bf16"), pr.get("expert_parallel", 1),
                                                       etp=etp).values())
                    if model.moe and model.moe_layer_step > 1:    # its dense layers are priced too
                        graphs += list(plan_mod._graph_rows(model.dense_counterpart(), t, mb, sp, flash,
                                                            pr.get("context_parallel", 1),
                                                            pr.get("precision", "bf16"), 1).values())
                    for g in graphs:
                        a = np.nan_to_num(schedule.scheduling_prices(g, sub, efficiency), nan=-1.0)
                        _, sid = np.unique(np.column_stack([sid, a]), axis=0, return_inverse=True)
                        sid = np.asarray(sid).reshape(-1)
        gid = gid.copy()
        gid[shared] = gid.max() + 1 + sid
    out: dict[int, list[int]] = {}
    for i, g in enumerate(gid.tolist()):
        out.setdefault(g, []).append(i)
    return sorted(out.values())


def step_lower_bound(units: np.ndarray, model: ModelConfig, tps, mbs, global_batch, chips, cp: int = 1) -> np.ndarray:
    """Per design: the smallest :func:`cosearch.placement.spread_bound` over (tp, mb, sp)
    (``units`` priced at context-parallel degree ``cp``)."""
    lb = placement.spread_bound(units, model, tps, mbs, global_batch, chips, cp)
    return lb.reshape(len(units), -1).min(axis=1)



def make_executor(executor) -> tuple[Executor | None, bool]:
    if executor == "serial":
        return None, False
    if executor is None or (isinstance(executor, int) and not isinstance(executor, bool)):
        n = (os.cpu_count() or 1) if executor is None else executor
        if n < 1:
            raise ValueError(f"executor: a number of worker processes must be >= 1, got {n}")
        if n <= 1 and executor is None:
            return None, False
        from ._spawn import spawn_problem
        why = spawn_problem()
        if why is not None:
            log.warning("cosearch: %s", why)
            return None, False
        import multiprocessing as mp
        # spawn: numba's OpenMP threads make fork() unsafe once a kernel has run
        return ProcessPoolExecutor(max_workers=n, mp_context=mp.get_context("spawn")), True
    if not isinstance(executor, Executor):
        raise ValueError(f"executor must be a concurrent.futures.Executor, 'serial', a number of worker "
                         f"processes or None, got {executor!r}")
    return executor, False




@dataclass(frozen=True)
class SweepSpace:
    """What the sweep prices: the designs, their unit costs and bounds, and the plan settings."""

    model: ModelConfig
    designs: np.ndarray
    cluster: Cluster
    global_batch: int
    tps: tuple
    mbs: tuple
    units: np.ndarray
    mem: memory.MemoryConfig
    area_power: AreaPowerModel | PhazeAreaModel
    plan_options: dict
    lb: np.ndarray                     # per design: a lower bound on its step time
    group: np.ndarray                  # per design: its equivalence group
    members: list                      # per group: its designs, lowest index first
    area: np.ndarray
    power: np.ndarray


@dataclass
class SweepOutcome:
    """The rows found (one per design, equivalent designs included), designs pruned, and
    whether (and by what) the sweep was stopped."""

    rows: list = field(default_factory=list)
    pruned: int = 0
    interrupted: bool = False
    stopped_by: BaseException | None = None


def run_sweep(sp: SweepSpace, *, rows: list, done: set, prune: bool, keep_top: int, executor,
              chunk_size: int, progress: bool, save: Callable[[list, int], None] | None = None,
              save_every_s: float = 10.0) -> SweepOutcome:
    """Evaluate the designs of ``sp`` best bound first, pruning against the ``keep_top``-th
    best distinct step; ``rows``/``done``: results kept from a resumed file (not evaluated
    again).  ``executor`` as :func:`cosearch.search.cosearch` takes it.  ``save(rows, pruned)``
    is called at most every ``save_every_s`` seconds (a checkpoint).  Ctrl-C stops the sweep
    and returns what is finished (``interrupted``)."""
    out = SweepOutcome(list(rows))
    designs, members, group = sp.designs, sp.members, sp.group
    size = np.array([len(members[group[i]]) for i in range(len(designs))])
    reps = np.array(sorted({m[0] for m in members}), dtype=np.int64)
    order = reps[np.argsort(sp.lb[reps], kind="stable")]
    tops = DistinctTop(keep_top, (r.plan.step_time_s for r in out.rows if r.plan is not None))
    # executor None: run in-process first and start a local pool only if the sweep is still
    # going after AUTO_POOL_AFTER_S (spawning workers costs seconds; a well-pruned sweep of
    # a large space is often done sooner)
    auto = executor is None
    pool, owned = make_executor("serial" if auto else executor)
    bar = None
    if progress:
        from tqdm.auto import tqdm
        bar = tqdm(total=len(designs), initial=len(done), desc="designs", unit="design")
    last_save = [time.monotonic()]

    def task_args(idx):
        return (sp.model, designs[idx], idx, sp.cluster, sp.global_batch, sp.tps, sp.mbs, sp.units[idx], sp.mem,
                sp.area_power, "sum", sp.plan_options, tops.kth if prune else None, keep_top)

    def count_pruned(n: int) -> None:
        out.pruned += n
        if bar is not None and n:
            bar.update(n)

    def absorb(batch, submitted):
        got = {r.index for r in batch}
        count_pruned(int(sum(size[i] for i in submitted if i not in got)))  # no plan beat the cutoff
        for r in batch:
            for m in members[group[r.index]]:          # the design and those equivalent to it
                out.rows.append(r if m == r.index else DesignResult.from_row(
                    m, designs[m], sp.area[m], sp.power[m], r.plan, r.reason, r.time_model))
            if r.plan is not None:
                tops.add(r.plan.step_time_s)
        if bar is not None:
            bar.update(int(sum(size[r.index] for r in batch)))
            if tops.best:
                bar.set_postfix(best_tok_s=f"{sp.global_batch * sp.model.seq_len / tops.best[0]:,.0f}")
        if save is not None and time.monotonic() - last_save[0] >= save_every_s:
            save(out.rows, out.pruned)
            last_save[0] = time.monotonic()

    def select(ch):
        ch = ch[[i not in done for i in ch]] if done else ch
        keep = ch[sp.lb[ch] <= tops.kth] if prune else ch
        count_pruned(int(size[ch].sum() - size[keep].sum()))
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
                pool, owned = make_executor(None)
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
                finished, _ = wait(list(pending), return_when=FIRST_COMPLETED)
                broken = False
                for fut in finished:
                    try:
                        absorb(fut.result(), pending[fut])
                        pending.pop(fut)
                    except BrokenProcessPool:
                        broken = True
                if broken:   # a worker died: resubmit every unfinished chunk to a fresh pool
                    if not owned or restarts >= MAX_POOL_RESTARTS:
                        raise RuntimeError(f"worker processes died repeatedly ({worker_deaths(pool)}); "
                                           f"{len(out.rows)} designs were evaluated") from None
                    restarts += 1
                    log.warning("a worker process died; retrying %d chunks on a fresh pool", len(pending))
                    stop_pool(pool)
                    pool, owned = make_executor(None)
                    pending = {pool.submit(evaluate_designs, *task_args(k)): k for k in pending.values()}
            # designs pruned after submission are still evaluated; that is harmless
    except KeyboardInterrupt as exc:
        out.interrupted, out.stopped_by = True, exc
    finally:
        if bar is not None:
            bar.close()
        if owned:
            if out.interrupted:
                stop_pool(pool)
            else:
                try:
                    pool.shutdown(wait=True)
                except KeyboardInterrupt as exc:    # a signal while the pool winds down: every row is
                    out.interrupted, out.stopped_by = True, exc     # in; report it as interrupted
                    stop_pool(pool)
    return out


def run_fingerprint(model, space, designs, cluster, global_batch, mem, tps, mbs, opts: dict) -> str:
    """A fingerprint of everything that determines a search's rows: the model's whole config
    (sequence length included), the design space and its designs, the cluster, the batch, the
    memory model, the tp and microbatch choices and the plan options (what ``resume`` compares)."""
    import dataclasses
    import hashlib

    from ._json import fingerprint
    d = np.ascontiguousarray(designs, dtype="<f8")
    models = [m.to_dict() for m in model] if isinstance(model, (list, tuple)) else model.to_dict()
    return fingerprint({"model": models, "space": dataclasses.asdict(space),
                        "designs": hashlib.sha256(d.tobytes()).hexdigest() + f":{d.shape}",
                        "cluster": cluster.to_dict(), "global_batch": global_batch,
                        "mem": dataclasses.asdict(mem), "tps": list(tps), "microbatches": list(mbs),
                        "plan_options": {k: (getattr(x, "name", x)) for k, x in opts.items()}})
