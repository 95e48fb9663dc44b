"""The co-search: every accelerator design of a search space x its best training plan.

Three phases, each in its own module:

1. **Screening** (:mod:`cosearch.sweep`): for all designs at once the roofline kernel prices
   the model's graphs for every (tp, microbatch) (:func:`cosearch.plan.unit_costs`); a
   design's layer times are the serial sum of its op times (the per-layer ILP's upper bound).
   The exact plan search (:func:`cosearch.placement.search_plans`) finds each design's best
   plan.  Designs are visited in order of a throughput upper bound and skipped once the
   bound cannot beat the best plans found (pruning): any plan's step time is at least
   ``(B / mb) * tp * sum_u t_u(tp, mb) / chips`` (all chip-seconds of a step spread
   perfectly over every chip), minimised over (tp, mb).  Designs the plan search cannot tell
   apart (:func:`cosearch.sweep.equivalent_designs`) are evaluated once.
2. **Exact ranking** (:mod:`cosearch.ranking`): the top ``refine_top`` distinct results are
   ranked exactly under ILP-scheduled layer times (:func:`cosearch.schedule.layer_time`,
   cached), re-planning designs in order of a valid bound on their ILP throughput until none
   left could enter.
3. **Baselines** (:mod:`cosearch.baselines`), when asked for.

:func:`cosearch` takes the settings of how to search (pruning, ranking, checkpoints,
executor) as a :class:`SearchOptions`, or as keyword arguments of the same names.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np

from . import _validate as v
from . import memory, placement, ranking, sweep
from . import plan as plan_mod
from ._json import IncrementalJSONWriter
from .cluster import Cluster, as_cluster
from .hardware import DESIGN_FIELDS, SearchSpace
from .models import ModelConfig
from .models import preset as model_preset
from .multimodel import cosearch_models
from .placement import DEFAULT_PLAN_OPTIONS, ilp_plan
from .results import DesignResult, Results, pareto_front
from .sweep import evaluate_designs

__all__ = ["cosearch", "compare", "SearchOptions", "Results", "DesignResult", "evaluate_designs",
           "pareto_front", "DEFAULT_PLAN_OPTIONS", "ilp_plan"]

#: ``meta`` keys that describe the settings a result was made with (what ``resume`` compares).
SETTINGS_KEYS = ("tps", "microbatches", "cluster", "plan_options", "area_budget_mm2", "power_budget_w")


@dataclass(frozen=True)
class SearchOptions:
    """How the co-search searches (not what it searches): every field has the meaning of the
    :func:`cosearch` keyword argument of the same name.

    ``executor``: a ``concurrent.futures.Executor``, ``"serial"``, a number of worker
    processes, or None (in-process, then a local pool past :data:`cosearch.sweep.AUTO_POOL_AFTER_S`).
    ``prune``: skip designs whose bound cannot enter the top.  ``refine_top``: rank this many
    distinct results exactly on ILP layer times (0: off), making at most ``ilp_designs`` ILP
    plans.  ``chunk_size``: designs per task.  ``checkpoint``: a file the partial sweep is saved
    to every ``checkpoint_every_s`` seconds, as an append-only journal that
    :meth:`Results.from_json` reads (:class:`cosearch._json.IncrementalJSONWriter`; a write costs
    the new rows, not the whole file); ``resume``: such a file (or a saved result).
    ``objective``: ``"geomean"`` or ``"mean"`` (multi-model search only).
    """

    executor: Executor | str | int | None = None
    prune: bool = True
    refine_top: int = 3
    ilp_designs: int = 256
    chunk_size: int = 32
    progress: bool = False
    checkpoint: str | os.PathLike | None = None
    checkpoint_every_s: float = 10.0
    resume: str | os.PathLike | None = None
    objective: str = "geomean"

    def __post_init__(self) -> None:
        for f in ("prune", "progress"):
            v.flag(f"SearchOptions.{f}", getattr(self, f))
        if isinstance(self.refine_top, bool) or not isinstance(self.refine_top, (int, np.integer)) \
                or self.refine_top < 0:
            raise ValueError(f"refine_top must be a non-negative integer, got {self.refine_top!r}")
        object.__setattr__(self, "ilp_designs", v.positive_int("ilp_designs", self.ilp_designs))
        object.__setattr__(self, "chunk_size", v.positive_int("chunk_size", self.chunk_size))
        object.__setattr__(self, "checkpoint_every_s",
                           v.nonneg_float("checkpoint_every_s", self.checkpoint_every_s))   # 0: every chunk
        v.choice("objective", self.objective, ("geomean", "mean"))
        for f in ("checkpoint", "resume"):
            if getattr(self, f) is not None:
                v.input_path(getattr(self, f), f)

    def with_(self, **changes: Any) -> SearchOptions:
        """A copy with ``changes``; an unknown name is refused with the known ones."""
        known = {f.name for f in fields(self)}
        bad = sorted(set(changes) - known)
        if bad:
            raise TypeError(f"unknown search option(s) {bad}; known: {sorted(known)}")
        return replace(self, **changes)


def cosearch(model: ModelConfig | str | Sequence[ModelConfig | str], space: SearchSpace | None = None,
             cluster: Cluster | int = 1024, global_batch: int = 1536,
             executor: Executor | str | int | None = None, *,
             tps: Sequence[int] | None = None, microbatches: Sequence[int] | None = None,
             mem: memory.MemoryConfig | None = None, plan_options: dict[str, Any] | None = None,
             baselines: bool = False, options: SearchOptions | None = None, **settings: Any) -> Results:
    """Co-search accelerator designs and training plans; see the module docstring.

    ``options`` (:class:`SearchOptions`) says how to search; its fields may also be given as
    keyword arguments (``prune=``, ``refine_top=``, ``ilp_designs=``, ``chunk_size=``,
    ``progress=``, ``checkpoint=``, ``checkpoint_every_s=``, ``resume=``, ``objective=``), which
    override ``options``.  ``executor``: any ``concurrent.futures.Executor`` (e.g. a Dask
    ``Client.get_executor()``), ``"serial"`` to run in-process, an int for a local pool of that
    many worker processes from the start, or None: in-process, with a local process pool over
    the cores for whatever is left after :data:`cosearch.sweep.AUTO_POOL_AFTER_S` seconds.  A
    ``ProcessPoolExecutor`` of your own should use the ``spawn`` (or ``forkserver``) start
    method: numba's OpenMP threads make ``fork`` unsafe.
    ``refine_top``: rank this many best distinct results exactly on ILP-scheduled layer times
    (0: off), re-planning at most ``ilp_designs`` groups of equivalent designs (``Results.meta
    ["ilp_ranking"]`` says whether that proved the top).
    ``baselines``: also run the TPUv4 and Spotlight-style baselines and PHAZE's fixed Megatron
    placement on the best chip found (``Results.baselines``).
    ``plan_options``: keyword options of :func:`cosearch.placement.search_plans` for every
    design (default :data:`DEFAULT_PLAN_OPTIONS`).
    Ctrl-C (or SIGTERM under the CLI) in any phase returns the results gathered so far
    (``Results.interrupted``) and stops the pool's workers.  A dead pool worker's chunks are
    retried on a fresh pool (up to :data:`cosearch.sweep.MAX_POOL_RESTARTS` times).
    ``checkpoint``: a file the partial sweep is saved to at most every ``checkpoint_every_s``
    seconds, as an append-only journal (each write adds the new rows; :meth:`Results.from_json`,
    ``cosearch report`` and ``resume`` read it; ``cosearch search`` replaces it with the plain JSON
    result when it ends); ``resume``: such a file (or a saved result) made with the
    same settings — its evaluated designs are kept and not evaluated again.

    ``model`` a list of models: PHAZE's cross-model search — the design with the best
    ``objective`` (``"geomean"`` or ``"mean"``) of the models' throughputs
    (:func:`cosearch.multimodel.cosearch_models`; returns its ``MultiModelResults``).
    """
    # the class itself, whatever this module's name SearchSpace holds
    from .hardware import SearchSpace as space_class
    v.instances(space=(space, space_class), mem=(mem, memory.MemoryConfig), options=(options, SearchOptions),
                 plan_options=(plan_options, dict))
    v.flag("baselines", baselines)
    o = (options or SearchOptions()).with_(**settings)
    if executor is not None:
        o = o.with_(executor=executor)
    if isinstance(model, (list, tuple)):
        return cosearch_models(model, space, cluster, global_batch, objective=o.objective, mem=mem,
                               prune=o.prune, progress=o.progress, plan_options=plan_options,
                               refine_top=o.refine_top, ilp_designs=o.ilp_designs, baselines=baselines,
                               resume=o.resume, checkpoint=o.checkpoint, checkpoint_every_s=o.checkpoint_every_s)
    model = model_preset(model)
    space = space or SearchSpace()
    cluster = as_cluster(cluster)
    mem = mem or memory.MemoryConfig()
    global_batch = v.positive_int("global_batch", global_batch, v.MAX_BATCH)
    all_opts = dict(DEFAULT_PLAN_OPTIONS if plan_options is None else plan_options)
    placement.check_cosearch_options(all_opts, lists=True, fp8_macs=space.fp8_macs, fp4_macs=space.fp4_macs)
    combos = placement.priced_combinations(all_opts)
    if len(combos) > 1:
        return _cosearch_combinations(model, space, cluster, global_batch, tps, microbatches, mem, all_opts, combos,
                                      baselines, o)
    sp, meta, all_mbs = _prepare(model, space, cluster, global_batch, tps, microbatches, mem, plan_options)
    rows, done = _resumed_rows(o.resume, sp, meta) if o.resume is not None else ([], set())

    def snapshot(rows_now, pruned, final: bool) -> Results:
        return Results(model.name, cluster.num_chips, global_batch, list(rows_now), pruned=pruned,
                       total_designs=len(sp.designs), interrupted=not final, meta=json.loads(json.dumps(meta)))

    writer = None if o.checkpoint is None else IncrementalJSONWriter(o.checkpoint)
    save = None if writer is None else (lambda rows_now, pruned: snapshot(rows_now, pruned, False).checkpoint(writer))
    # prune against the keep_top-th best distinct step (the ILP ranking seeds its top k
    # distinct results with the sweep's)
    out = sweep.run_sweep(sp, rows=rows, done=done, prune=o.prune, keep_top=max(1, int(o.refine_top or 0)),
                          executor=o.executor, chunk_size=o.chunk_size, progress=o.progress, save=save,
                          save_every_s=o.checkpoint_every_s)
    res = snapshot(out.rows, out.pruned, not out.interrupted)
    res.stopped_by = out.stopped_by
    if not out.interrupted:
        _rank_and_compare(res, sp, space, o, baselines, all_mbs)
    return res


def _combination_tag(combo: dict) -> str:
    prec, etp = combo.get("precision", "bf16"), combo.get("expert_tensor_parallel")
    return (f"cp{combo['context_parallel']}-ep{combo['expert_parallel']}" + ("" if prec == "bf16" else f"-{prec}")
            + ("" if etp is None else f"-etp{etp}"))


def _cosearch_combinations(model, space, cluster, global_batch, tps, microbatches, mem, opts, combos, baselines,
                           o: SearchOptions) -> Results:
    """The co-search over several context-parallel, expert-parallel or expert-tensor-parallel
    degrees or precisions: the space priced and searched once per combination (each design's
    unit costs depend on it), every design kept
    at its best plan over them.  Exact: a design in the overall top k is in its own
    combination's top k (its step there is its best, and no design beats it anywhere more than
    k - 1 times), which each run ranks exactly.  Checkpoints and resumes go to one file per
    combination (``FILE.cp2-ep1``); the baselines search the whole option space once."""
    runs: list[Results] = []
    for combo in combos:
        tag = _combination_tag(combo)
        sub = o.with_(checkpoint=None if o.checkpoint is None else f"{os.fspath(o.checkpoint)}.{tag}",
                      resume=None if o.resume is None else f"{os.fspath(o.resume)}.{tag}")
        if sub.resume is not None and not os.path.isfile(sub.resume):
            sub = sub.with_(resume=None)
        r = cosearch(model, space, cluster, global_batch, tps=tps, microbatches=microbatches, mem=mem,
                     plan_options={**opts, **combo}, baselines=False, options=sub)
        runs.append(r)
        if r.interrupted:
            break
    best: dict[int, DesignResult] = {}
    for r in runs:
        for row in r.rows:
            old = best.get(row.index)
            if old is None or (row.plan is not None and (old.plan is None or row.tokens_per_s > old.tokens_per_s)):
                best[row.index] = row
    meta = dict(runs[0].meta)
    meta["plan_options"] = {k: list(x) if isinstance(x, tuple) else getattr(x, "name", x) for k, x in opts.items()}
    meta["combinations"] = [dict(c, **{"ilp_ranking": r.meta.get("ilp_ranking"), "evaluated": len(r.rows)})
                            for c, r in zip(combos, runs)]
    rankings = [r.meta.get("ilp_ranking") for r in runs if r.meta.get("ilp_ranking")]
    if rankings:
        meta["ilp_ranking"] = dict(rankings[0], proven=all(x.get("proven", True) for x in rankings))
    if any(r.meta.get("time_model") == "ilp" for r in runs):
        meta["time_model"] = "ilp"
    total = runs[0].total_designs
    res = Results(model.name, cluster.num_chips, global_batch, sorted(best.values(), key=lambda r: r.index),
                  pruned=total - len(best), total_designs=total, interrupted=any(r.interrupted for r in runs)
                  or len(runs) < len(combos), meta=meta)
    res.stopped_by = next((r.stopped_by for r in runs if r.stopped_by is not None), None)
    if baselines and not res.interrupted and res.feasible:
        from . import baselines as bl
        try:
            res.baselines = bl.run_baselines(model, space, cluster, global_batch, mem=mem, tps=tps,
                                             microbatches=microbatches, refine=bool(o.refine_top), plan_options=opts,
                                             cosearched=res.best.accelerator())
        except KeyboardInterrupt as exc:
            res.interrupted, res.stopped_by = True, exc
    return res


def _prepare(model: ModelConfig, space: SearchSpace, cluster: Cluster, global_batch: int, tps, microbatches,
             mem: memory.MemoryConfig, plan_options) -> tuple[sweep.SweepSpace, dict, tuple]:
    """Validate the plan settings, price every design's unit costs and bounds, and group
    equivalent designs.  Returns the sweep's input, the result's ``meta`` and every
    microbatch size asked for (the baselines search them all)."""
    designs = space.arrays()  # raises naming the constraint if nothing fits
    tps = v.int_list("tps", tps) if tps is not None else tuple(placement.default_tps(model, cluster.num_chips))
    for t in tps:
        if model.heads % t or model.ffn_hidden % t or (model.kv_heads % t and model.kv_heads >= t):
            raise ValueError(f"tps: tp={t} must divide heads={model.heads} (and ffn_hidden={model.ffn_hidden})")
    mbs = v.int_list("microbatches", microbatches, v.MAX_BATCH) if microbatches is not None else \
        tuple(placement.divisors(global_batch))
    bad = [b for b in mbs if global_batch % b]
    if bad:
        raise ValueError(f"microbatch sizes {bad} do not divide global_batch={global_batch}")
    opts = dict(DEFAULT_PLAN_OPTIONS if plan_options is None else plan_options)
    macs = {}
    for prec, (field_name, *_cli) in placement.FORMAT_MAC_FIELDS.items():
        macs[field_name] = designs[:, DESIGN_FIELDS.index(field_name)]
        if prec in placement._priced_values(opts, "precision") and any(x > 0 for x in getattr(space, field_name)) \
                and not np.any(macs[field_name] > 0):
            raise ValueError(f"precision={prec!r}: no design with {prec.upper()} MACs fits the space's area budget "
                             f"({space.area_budget_mm2:.1f} mm^2) and power budget ({space.power_budget_w:.1f} W); "
                             f"raise them or list fewer {prec.upper()} MACs per PE")
    placement.check_cosearch_options(opts, **macs)
    priced = placement.priced_options(opts)
    for k, x in priced.items():
        if x != placement.PRICED_OPTIONS[k] or k in opts:   # the defaults stay unwritten (the fingerprint)
            opts[k] = x
    sps = placement._bools("sequence_parallel", opts.get("sequence_parallel"), (False, True))
    opts["sequence_parallel"] = sps
    all_mbs = mbs
    # microbatch sizes with which no plan fits any design's HBM are never priced
    mbs = tuple(placement.fitting_microbatches(model, designs, cluster, global_batch, tps, mbs, mem, **opts))
    units = plan_mod.unit_costs(model, designs, cluster, tps, mbs, sps, bool(opts.get("flash_attention", False)),
                                engine=opts.get("engine"), **priced)
    group, members = sweep.equivalent_designs(designs, units)
    sp = sweep.SweepSpace(model, designs, cluster, global_batch, tps, mbs, units, mem, space.area_power, opts,
                          sweep.step_lower_bound(units, model, tps, mbs, global_batch, cluster.num_chips,
                                                 priced["context_parallel"]),
                          group, members, space.area_power.area_mm2(designs), space.area_power.power_w(designs))
    meta = {"fingerprint": sweep.run_fingerprint(model, space, designs, cluster, global_batch, mem, tps, all_mbs, opts),
            "model_config": model.to_dict(),
            "tps": list(tps), "microbatches": list(mbs), "time_model": "sum", "cluster": cluster.to_dict(),
            "plan_options": {k: list(x) if isinstance(x, tuple) else x for k, x in opts.items()},
            "area_budget_mm2": space.area_budget_mm2, "power_budget_w": space.power_budget_w,
            "area_model": space.area_power.name, "refined": []}
    return sp, meta, all_mbs


def _model_changes(old: dict | None, new: dict) -> str:
    """The model fields that differ between two ``model_config`` dicts, as ``a: x -> y``."""
    if not isinstance(old, dict):
        return ""
    diff = [f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in new if old.get(k) != new.get(k)]
    return f" (the model changed: {', '.join(diff)})" if diff else ""


def settings_of(meta: dict) -> dict:
    """The settings a result was made with, as saved: only the :data:`SETTINGS_KEYS` that
    change results (keys later phases add, such as ``ilp_ranking``, are left out), with
    non-finite numbers as ``None`` (how JSON holds an unlimited budget)."""
    from ._json import finite_or_none
    return json.loads(json.dumps(finite_or_none({k: meta.get(k) for k in SETTINGS_KEYS})))


def _resumed_rows(resume, sp: sweep.SweepSpace, meta: dict) -> tuple[list[DesignResult], set[int]]:
    """The screened rows of a saved result made with the same settings (ILP rows are ranked
    again); refused with the settings that differ."""
    old = Results.from_json(resume)
    have = (old.model, old.chips, old.global_batch, old.total_designs)
    want = (sp.model.name, sp.cluster.num_chips, sp.global_batch, len(sp.designs))
    was, now = settings_of(old.meta), settings_of(meta)
    differ = [k for k in SETTINGS_KEYS if was.get(k) != now.get(k)]
    if have != want or differ:
        why = f"; these differ: {', '.join(differ)}" if differ else ""
        raise ValueError(f"{resume}: it was made with other settings ({old.model}, {old.chips} chips, batch "
                         f"{old.global_batch}, {old.total_designs} designs{why}); resume with the same ones")
    if old.meta.get("fingerprint") is None:
        raise ValueError(f"{resume}: it has no fingerprint of the settings it was made with (an older cosearch "
                         "wrote it), so it cannot be checked; start afresh (--force)")
    if old.meta["fingerprint"] != meta["fingerprint"]:
        raise ValueError(f"{resume}: it was made with other inputs{_model_changes(old.meta.get('model_config'), meta['model_config'])}"
                         " — model config, sequence length, design space, cluster, batch or plan options; resume "
                         "with the same ones, or start afresh (--force)")
    rows = [r for r in old.rows if r.time_model == "sum"]
    # a group of equivalent designs counts as done only whole; pruned designs are looked at
    # again (and counted again)
    kept = {r.index for r in rows}
    whole = {int(sp.group[i]) for i in kept if all(m in kept for m in sp.members[sp.group[i]])}
    rows = [r for r in rows if int(sp.group[r.index]) in whole]
    return rows, {r.index for r in rows}


def _rank_and_compare(res: Results, sp: sweep.SweepSpace, space: SearchSpace, o: SearchOptions,
                      baselines: bool, all_mbs) -> None:
    """The exact ILP ranking of the top and the baselines; Ctrl-C keeps the sweep."""
    try:
        if o.refine_top and res.feasible:
            ranking.rank_top_ilp(res, sp.model, sp.cluster, sp.global_batch, sp.mem, o.refine_top, sp.plan_options,
                                 sp.designs, sp.tps, sp.mbs, sp.area, sp.power, o.progress,
                                 max_designs=o.ilp_designs)
            # the meta says what the ranked rows say: "ilp" once the top is ranked on ILP layer
            # times (those rows carry time_model "ilp"; the rest stay the screening's "sum")
            if any(r.time_model == "ilp" for r in res.rows):
                res.meta["time_model"] = "ilp"
        if baselines:
            from . import baselines as bl
            res.baselines = bl.run_baselines(sp.model, space, sp.cluster, sp.global_batch, mem=sp.mem, tps=sp.tps,
                                             microbatches=all_mbs, refine=bool(o.refine_top),
                                             plan_options=sp.plan_options,
                                             cosearched=res.best.accelerator() if res.feasible else None)
    except KeyboardInterrupt as exc:
        res.interrupted, res.stopped_by = True, exc


def compare(model: ModelConfig | str, space: SearchSpace | None = None, cluster: Cluster | int = 1024,
            global_batch: int = 1536, executor: Executor | str | int | None = None, show: bool = True,
            **kwargs: Any) -> Results:
    """Co-search vs the TPUv4 and Spotlight-style baselines; prints the side-by-side table."""
    show = v.flag("show", show)
    res = cosearch(model_preset(model), space, cluster, global_batch, executor, baselines=True, **kwargs)
    if show:
        print(res.table(top=5))
    return res

