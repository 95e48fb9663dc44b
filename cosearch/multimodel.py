"""Cross-model co-search (PHAZE's multi-model mode): one accelerator for several models.

Each design's score is the mean or geometric mean, over the models, of its best training
throughput (tokens/s) for each model, every model with its own exact plan search
(:func:`cosearch.placement.search_plans`) on the same cluster.  A design that fits no plan
for some model scores 0.  The geometric mean weighs models of very different sizes
alike (a 2x gain on a small model counts as much as a 2x gain on a large one); the mean
favours the models with the most tokens/s.

Pruning keeps the search exact: a model's throughput on a design is at most
``tokens / lb`` with ``lb`` the step-time lower bound of the single-model search (all
chip-seconds of a step spread perfectly over every chip), and both means are monotone, so
a design whose bound on the score cannot beat the best score found is skipped.  This
sweep prices layers at the serial sum of op times (the screening time model of
:mod:`cosearch.search`).

Then the top ``refine_top`` designs are ranked exactly on ILP-scheduled layer times, as the
single-model search does (:func:`cosearch.ranking.rank_top_ilp`), with scores in place of step
times: an ILP layer is never slower than its serial sum, so a design's serial score bounds
its ILP score from below and the serial top-k's k-th score is a floor; each model's
throughput is bounded from above by its best plan on :func:`cosearch.schedule.layer_bounds`
layer times (:func:`cosearch.placement.best_plan_steps`), and the combined bound orders a
best-first search that ILP-plans designs (:func:`cosearch.placement.ilp_plan`, every model)
until no design's bound can beat the k-th ILP score found.  Rows keep their time model
(``sum`` or ``ilp``) and tables rank each apart.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import _validate as v
from . import memory, placement, sweep
from . import plan as plan_mod
from .cluster import Cluster, as_cluster
from .hardware import Accelerator, SearchSpace
from .models import ModelConfig
from .models import preset as model_preset
from .placement import DEFAULT_PLAN_OPTIONS
from .report import TIME_MODEL_TITLES
from .results import DesignResult, place_row

__all__ = ["cosearch_models", "MultiModelResults", "JointRow", "OBJECTIVES", "joint_baselines"]

OBJECTIVES = ("geomean", "mean")


def combine(values: np.ndarray, objective: str) -> np.ndarray:
    """Score over the last axis: the mean or the geometric mean (0 if any value is 0)."""
    v = np.asarray(values, dtype=np.float64)
    if objective == "mean":
        return v.mean(axis=-1)
    with np.errstate(divide="ignore"):
        return np.where((v > 0).all(axis=-1), np.exp(np.log(np.where(v > 0, v, 1.0)).mean(axis=-1)), 0.0)


@dataclass(frozen=True)
class JointRow:
    """One design: its score and each model's best plan (a :class:`DesignResult` per model,
    which also carries the design, its area and power)."""

    score: float
    per_model: tuple[DesignResult, ...]

    @property
    def index(self) -> int:
        return self.per_model[0].index

    @property
    def design(self) -> dict[str, float]:
        return self.per_model[0].design

    @property
    def area_mm2(self) -> float:
        return self.per_model[0].area_mm2

    @property
    def power_w(self) -> float:
        return self.per_model[0].power_w

    @property
    def tokens_per_s(self) -> tuple[float, ...]:
        return tuple(r.tokens_per_s for r in self.per_model)

    @property
    def time_model(self) -> str:
        """``ilp`` when every model's plan uses ILP-scheduled layer times, else ``sum``."""
        return "ilp" if all(r.time_model == "ilp" for r in self.per_model) else "sum"

    def accelerator(self) -> Accelerator:
        return self.per_model[0].accelerator()


@dataclass
class MultiModelResults:
    """Result of :func:`cosearch_models`: evaluated designs ranked by score."""

    models: tuple[str, ...]
    objective: str
    chips: int
    global_batch: tuple[int, ...]
    rows: list[JointRow]
    pruned: int = 0
    total_designs: int = 0
    interrupted: bool = False
    meta: dict[str, Any] = field(default_factory=dict)
    stopped_by: BaseException | None = field(default=None, repr=False, compare=False)
    baselines: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def feasible(self) -> list[JointRow]:
        return [r for r in self.rows if r.score > 0]

    @property
    def best(self) -> JointRow:
        """The best design under the most exact time model present (ILP rows if any)."""
        f = self.feasible
        if not f:
            raise ValueError(f"the models {', '.join(self.models)} share no design with a feasible plan for "
                             "every one of them")
        f = [r for r in f if r.time_model == "ilp"] or f
        return max(f, key=lambda r: (r.score, -r.index))

    def table(self, top: int = 10) -> str:
        """Plain-text summary: the ILP-ranked designs, then the screened ones (never ranked
        together: their layer times come from different time models)."""
        top = v.top_count(top)
        lines = [f"cosearch (models {', '.join(self.models)}; {self.objective} of tokens/s) on {self.chips} chips: "
                 f"{len(self.rows)} designs evaluated, {self.pruned} pruned of {self.total_designs}"
                 + (" (interrupted: partial results)" if self.interrupted else "")]
        ir = self.meta.get("ilp_ranking")
        if ir:
            lines.append(f"ILP ranking: top {ir['top']} " + ("proven exact" if ir["proven"] else
                         f"not proven ({ir['time_limited_layers']} layer schedules hit the ILP time limit)"
                         if ir.get("time_limited_layers") else
                         f"not proven ({ir['open']} designs could still enter; raise ilp_designs)")
                         + f" after {ir['scheduled']} ILP-planned designs")
        for tm, title in TIME_MODEL_TITLES:
            rows = sorted((r for r in self.feasible if r.time_model == tm), key=lambda r: -r.score)[:top]
            if not rows:
                continue
            lines.append(f"-- {title}")
            lines.append(f"{'rank':>4} {'design':>7} {'cores':>5} {'array':>9} {'L2 MiB':>7} {'area':>6} "
                         f"{'score':>12}  " + "  ".join(f"{m + ' tok/s':>16}" for m in self.models))
            for k, r in enumerate(rows, 1):
                d = r.design
                lines.append(f"{k:>4} {r.index:>7} {int(d['tensor_cores']):>5} "
                             f"{int(d['systolic_rows']):>4}x{int(d['systolic_cols']):<4} "
                             f"{d['l2_bytes'] / 2**20:>7.0f} {r.area_mm2:>6.0f} {r.score:>12,.0f}  "
                             + "  ".join(f"{t:>16,.0f}" for t in r.tokens_per_s))
        if self.baselines:
            best = self.best.score if self.feasible else 0.0
            for name, b in self.baselines.items():
                per = "  ".join(f"{m} {t:,.0f}" for m, t in zip(self.models, b["tokens_per_s"]))
                ratio = f"; co-search / {name}: {best / b['score']:.3f}x" if b["score"] > 0 else ""
                lines.append(f"baseline {name}: score {b['score']:,.0f} ({per}) — {b['note']}{ratio}")
        return "\n".join(lines)

    @staticmethod
    def _row_dict(r: JointRow) -> dict[str, Any]:
        return {"index": r.index, "design": r.design, "area_mm2": r.area_mm2, "power_w": r.power_w,
                "score": r.score, "per_model": [p.to_dict() for p in r.per_model]}

    def to_dict(self, rows: bool = True) -> dict[str, Any]:
        """The JSON document (``rows=False``: everything but the rows, for :meth:`checkpoint`)."""
        from ._json import stamped
        d = stamped("multi-model-results", {
            "models": list(self.models), "objective": self.objective, "chips": self.chips,
            "global_batch": list(self.global_batch), "pruned": self.pruned,
            "total_designs": self.total_designs, "interrupted": self.interrupted, "meta": self.meta,
            "baselines": self.baselines})
        if rows:
            d["rows"] = [self._row_dict(r) for r in self.rows]
        return d

    def checkpoint(self, writer) -> None:
        """Write through an :class:`cosearch._json.IncrementalJSONWriter` (rows serialised once)."""
        writer.write(self.to_dict(rows=False), self.rows, self._row_dict)

    def to_json(self, path=None, overwrite: bool = False) -> str:
        """As :meth:`cosearch.results.Results.to_json`: ``path`` must not exist unless ``overwrite``."""
        from ._json import save_new_json
        return save_new_json(self.to_dict(), path, overwrite)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> MultiModelResults:
        """Parse :meth:`to_dict`'s output (rows validated as :meth:`DesignResult.from_dict` does;
        the models, batches, counts, baselines and meta checked so a hand-edited file is refused
        naming the field, not failed on by the report)."""
        import math

        from .results import _check_meta, _count
        try:
            names = d["models"]
            if not isinstance(names, list) or not names or not all(isinstance(m, str) for m in names):
                raise ValueError(f"'models' must be a non-empty list of model names, got {names!r}")
            batches = d["global_batch"]
            if not isinstance(batches, list) or len(batches) != len(names):
                raise ValueError(f"'global_batch' must list one batch per model ({len(names)}), got {batches!r}")
            batches = tuple(v.positive_int("global_batch", b, v.MAX_BATCH) for b in batches)
            objective = d["objective"]
            if objective not in OBJECTIVES:
                raise ValueError(f"'objective' must be one of {', '.join(OBJECTIVES)}, got {objective!r}")
            interrupted = d.get("interrupted", False)
            if not isinstance(interrupted, bool) or not isinstance(d["rows"], list):
                raise ValueError("'interrupted' must be true or false and 'rows' a list")
            meta, baselines = d.get("meta", {}), d.get("baselines", {})
            _check_meta(meta)
            if not isinstance(baselines, dict) or not all(
                    isinstance(b, dict) and isinstance(b.get("note", ""), str)
                    and isinstance(b.get("tokens_per_s"), list) and len(b["tokens_per_s"]) == len(names)
                    for b in baselines.values()):
                raise ValueError("'baselines' must be an object of objects with a note and one tokens_per_s per model")
            for name, b in baselines.items():
                v.nonneg_float(f"baselines.{name}.score", b.get("score"))
                for t in b["tokens_per_s"]:
                    v.nonneg_float(f"baselines.{name}.tokens_per_s", t)
            rows = []
            for r in d["rows"]:
                score = r["score"]
                if isinstance(score, bool) or not isinstance(score, (int, float)) or not math.isfinite(score) \
                        or score < 0:
                    raise ValueError(f"row {r.get('index')!r}: score must be a finite non-negative number")
                if not isinstance(r["per_model"], list) or len(r["per_model"]) != len(names):
                    raise ValueError(f"row {r.get('index')!r}: per_model must hold one result per model")
                rows.append(JointRow(float(score), tuple(DesignResult.from_dict(p) for p in r["per_model"])))
            return cls(tuple(names), objective, v.positive_int("chips", d["chips"], v.MAX_CHIPS), batches,
                       rows, _count("pruned", d.get("pruned", 0)), _count("total_designs", d["total_designs"]),
                       interrupted, dict(meta), baselines=dict(baselines))
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"not a multi-model co-search result ({type(exc).__name__}: {exc})") from None
        except ValueError as exc:
            raise ValueError(f"not a multi-model co-search result: {exc}") from None

    @classmethod
    def from_json(cls, path) -> MultiModelResults:
        from ._json import load_json
        return cls.from_document(load_json(path), str(path) if len(str(path)) < 200 else "results")

    @classmethod
    def from_document(cls, d: Any, name: str = "results") -> MultiModelResults:
        """A result from an already parsed document, schema checked (``name``: how messages call it)."""
        from ._json import check_schema
        check_schema(d, "multi-model-results", name)
        return cls.from_dict(d)


def cosearch_models(models: Sequence[ModelConfig | str], space: SearchSpace | None = None,
                    cluster: Cluster | int = 1024, global_batch: int | Sequence[int] = 1536, *,
                    objective: str = "geomean", mem: memory.MemoryConfig | None = None, prune: bool = True,
                    chunk_size: int = 16, progress: bool = False,
                    plan_options: dict[str, Any] | None = None, refine_top: int = 3,
                    ilp_designs: int = 256, baselines: bool = False,
                    resume: str | os.PathLike | None = None, checkpoint: str | os.PathLike | None = None,
                    checkpoint_every_s: float = 10.0) -> MultiModelResults:
    """The design with the best mean (``objective="mean"``) or geometric-mean throughput over
    ``models`` (see the module docstring).  ``global_batch``: one for all models or one per
    model.  ``refine_top``: rank this many best designs exactly on ILP-scheduled layer times
    (0: off), ILP-planning at most ``ilp_designs`` designs (``meta["ilp_ranking"]`` says
    whether that proved the top).  ``baselines``: also score the TPUv4 chip, the
    Spotlight-style chip (the best ``objective`` of the models' single-chip layer
    throughputs) and PHAZE's fixed Megatron placements on the best chip found, with the same
    plan search and time model (:func:`joint_baselines`).  ``resume``: a saved result of the
    same settings (say, one cut short by Ctrl-C): its screened designs are kept and not
    evaluated again.  ``checkpoint``: a file the partial screening is saved to at most every
    ``checkpoint_every_s`` seconds as an append-only journal (a valid ``resume`` file, read by
    :meth:`MultiModelResults.from_json`).  Runs in-process; Ctrl-C returns the designs finished so
    far (``interrupted``)."""
    if isinstance(models, (str, ModelConfig)):
        models = [models]
    ms = [model_preset(m) for m in models]
    if len(ms) < 1:
        raise ValueError("cosearch_models needs at least one model")
    names = [m.name for m in ms]
    if len(set(names)) != len(names):
        raise ValueError(f"models listed twice: {names}")
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {OBJECTIVES}, got {objective!r}")
    for name, x in (("prune", prune), ("progress", progress), ("baselines", baselines)):
        v.flag(name, x)
    chunk_size = v.positive_int("chunk_size", chunk_size)
    refine_top = v.nonneg_int("refine_top", refine_top)
    ilp_designs = v.positive_int("ilp_designs", ilp_designs)
    v.nonneg_float("checkpoint_every_s", checkpoint_every_s)             # 0: every chunk
    v.instances(space=(space, SearchSpace), mem=(mem, memory.MemoryConfig), plan_options=(plan_options, dict))
    space = space or SearchSpace()
    cluster = as_cluster(cluster)
    mem = mem or memory.MemoryConfig()
    batches = [global_batch] * len(ms) if isinstance(global_batch, (int, np.integer)) else list(global_batch)
    if len(batches) != len(ms):
        raise ValueError(f"give one global batch for all models or one per model ({len(ms)}), got {len(batches)}")
    for b in batches:
        if isinstance(b, bool) or int(b) != b or b <= 0:
            raise ValueError(f"global_batch must be a positive integer, got {b!r}")
    batches = [int(b) for b in batches]
    opts = dict(DEFAULT_PLAN_OPTIONS if plan_options is None else plan_options)
    placement.check_cosearch_options(opts, fp8_macs=space.fp8_macs, fp4_macs=space.fp4_macs)
    priced = placement.priced_options(opts)     # the one cp, precision and ep every design is priced at
    sps = placement._bools("sequence_parallel", opts.get("sequence_parallel"), (False, True))
    opts["sequence_parallel"] = sps
    designs = space.arrays()
    per = []
    for m, b in zip(ms, batches):
        tps = tuple(placement.default_tps(m, cluster.num_chips))
        mbs = tuple(placement.divisors(b))
        units = plan_mod.unit_costs(m, designs, cluster, tps, mbs, sps, bool(opts.get("flash_attention", False)),
                                    engine=opts.get("engine"), **priced)
        lb = sweep.step_lower_bound(units, m, tps, mbs, b, cluster.num_chips, priced["context_parallel"])
        per.append((m, b, tps, mbs, units, (b * m.seq_len) / lb))
    ub = combine(np.stack([p[5] for p in per], axis=-1), objective)
    order = np.argsort(-ub, kind="stable")
    rows: list[JointRow] = []
    meta = {"fingerprint": sweep.run_fingerprint(ms, space, designs, cluster, batches, mem,
                                                 [p[2] for p in per], [p[3] for p in per], opts),
            "time_model": "sum", "space": space.name,
            "plan_options": {k: list(v) if isinstance(v, tuple) else v for k, v in opts.items()}}
    if resume is not None:
        old = MultiModelResults.from_json(resume)
        same = (old.models, old.objective, old.chips, old.global_batch, old.total_designs) == \
            (tuple(names), objective, cluster.num_chips, tuple(batches), len(designs))
        if not same or {k: old.meta.get(k) for k in ("space", "plan_options")} != \
                json.loads(json.dumps({k: meta[k] for k in ("space", "plan_options")})):
            raise ValueError(f"{resume}: it was made with other settings ({', '.join(old.models)}, "
                             f"{old.objective}, {old.chips} chips, batches {list(old.global_batch)}, "
                             f"{old.total_designs} designs); resume with the same ones")
        if old.meta.get("fingerprint") != meta["fingerprint"]:
            raise ValueError(f"{resume}: it was made with other inputs (model configs, sequence lengths, design "
                             "space, cluster, batches or plan options), or by an older cosearch without a "
                             "fingerprint; resume with the same ones, or start afresh (--force)")
        rows = [r for r in old.rows if r.time_model == "sum"]   # ILP rows are ranked again
    done = {r.index for r in rows}
    best = max((r.score for r in rows), default=0.0)
    last_save = time.monotonic()
    from ._json import IncrementalJSONWriter
    writer = IncrementalJSONWriter(checkpoint) if checkpoint is not None else None
    pruned = 0
    interrupted = False
    stopped_by = None
    bar = None
    if progress:
        from tqdm.auto import tqdm
        bar = tqdm(total=len(designs), initial=len(done), desc="designs", unit="design")
    try:
        for i in range(0, len(order), chunk_size):
            ch = order[i:i + chunk_size]
            if done:
                ch = ch[~np.isin(ch, list(done))]
            keep = ch[ub[ch] >= best] if prune else ch
            pruned += len(ch) - len(keep)
            if len(keep):
                results = [sweep.evaluate_designs(m, designs[keep], keep, cluster, b, tps, mbs, units[keep], mem,
                                            space.area_power, "sum", opts)
                           for (m, b, tps, mbs, units, _) in per]
                for k in range(len(keep)):
                    pm = tuple(r[k] for r in results)
                    score = float(combine(np.array([r.tokens_per_s for r in pm]), objective))
                    rows.append(JointRow(score, pm))
                    best = max(best, score)
            if bar is not None:
                bar.update(len(ch))
            if checkpoint is not None and time.monotonic() - last_save >= checkpoint_every_s:
                MultiModelResults(tuple(names), objective, cluster.num_chips, tuple(batches), list(rows), pruned,
                                  len(designs), True, json.loads(json.dumps(meta))).checkpoint(writer)
                last_save = time.monotonic()
    except KeyboardInterrupt as exc:
        interrupted, stopped_by = True, exc
    finally:
        if bar is not None:
            bar.close()
    res = MultiModelResults(tuple(names), objective, cluster.num_chips, tuple(batches), rows, pruned,
                            len(designs), interrupted, meta, stopped_by)
    if refine_top > 0 and not interrupted and res.feasible:
        area = space.area_power.area_mm2(designs)
        power = space.area_power.power_w(designs)
        try:
            _refine_joint(res, per, cluster, mem, opts, designs, area, power, int(refine_top), objective,
                          int(ilp_designs), progress)
            res.meta["time_model"] = "ilp"
        except KeyboardInterrupt as exc:
            res.interrupted, res.stopped_by = True, exc
    if baselines and not res.interrupted and res.feasible:
        try:
            res.baselines = joint_baselines(ms, space, cluster, batches, objective, mem, opts,
                                            cosearched=res.best.accelerator(), refine=refine_top > 0)
        except KeyboardInterrupt as exc:
            res.interrupted, res.stopped_by = True, exc
    if not interrupted and not res.feasible:
        raise ValueError(f"the models {', '.join(names)} share no design with a feasible plan for every one "
                         f"of them on {cluster.num_chips} chips")
    return res


def _needed(bounds: np.ndarray, kth: float, objective: str) -> np.ndarray:
    """Per model, the least throughput that could still give a score of ``kth`` with every
    other model at its upper bound (``bounds``: (models,)); 0 where any will do."""
    n = len(bounds)
    out = np.zeros(n)
    for m in range(n):
        others = np.delete(bounds, m)
        if objective == "mean":
            out[m] = n * kth - others.sum()
        elif kth > 0:
            prod = float(np.prod(others))
            out[m] = kth ** n / prod if prod > 0 else np.inf
    return np.maximum(out, 0.0)


def _refine_joint(res: MultiModelResults, per, cluster: Cluster, mem, opts, designs, area, power, top: int,
                  objective: str, max_designs: int, progress: bool) -> None:
    """Exact top-``top`` scores under ILP layer times (see the module docstring)."""
    import heapq
    import math

    sps = tuple(opts.get("sequence_parallel", (False,)))
    flash = bool(opts.get("flash_attention", False))
    plan_opts = {k: v for k, v in opts.items() if k != "sequence_parallel"}
    serial = sorted((r.score for r in res.feasible), reverse=True)
    floor = serial[top - 1] if len(serial) >= top else 0.0
    # (0) perfect-spread bound on bound layer times, per model, for every design
    bound_units, tput0 = [], []
    for (m, b, tps, mbs, _, _) in per:
        u = plan_mod.unit_costs(m, designs, cluster, tps, mbs, sps, flash, time_model="bound",
                                engine=opts.get("engine"))
        bound_units.append(u)
        tput0.append(b * m.seq_len / sweep.step_lower_bound(u, m, tps, mbs, b, cluster.num_chips))
    tput0 = np.stack(tput0, axis=-1)
    cand = np.flatnonzero(combine(tput0, objective) >= floor * (1 - 1e-12))
    # (1) each model's best plan on bound layer times, every candidate in one compiled call
    tput1 = np.zeros((len(cand), len(per)))
    for k, (m, b, tps, mbs, _, _) in enumerate(per):
        if len(cand):
            steps = placement.best_plan_steps(m, designs[cand], cluster, b, bound_units[k][cand], tps, mbs, sps,
                                              mem, math.inf, **plan_opts)
            tput1[:, k] = np.where(np.isfinite(steps), b * m.seq_len / steps, 0.0)
    score1 = combine(tput1, objective)
    scores: list[float] = []
    by_index = {r.index: k for k, r in enumerate(res.rows)}
    planned = 0
    refined: list[int] = []

    def kth() -> float:
        return max(floor, sorted(scores, reverse=True)[top - 1]) if len(scores) >= top else floor

    def plan(ci: int) -> None:
        nonlocal planned
        planned += 1
        d = int(cand[ci])
        chip = Accelerator.from_array(designs[d], name=f"design{d}")
        need = _needed(tput1[ci], kth(), objective)
        pm = []
        for k, (m, b, tps, mbs, _, _) in enumerate(per):
            cutoff = b * m.seq_len / need[k] if need[k] > 0 else math.inf
            p = placement.ilp_plan(m, chip, cluster, b, mem, dict(plan_opts, sequence_parallel=sps), tps=tps,
                                   microbatches=mbs, cutoff_s=cutoff, units_bound=bound_units[k][d])
            if p is None:           # this model cannot reach the k-th score here: neither can the design
                return
            pm.append(DesignResult.from_row(d, designs[d], area[d], power[d], p, "", "ilp"))
        row = JointRow(float(combine(np.array([r.tokens_per_s for r in pm]), objective)), tuple(pm))
        scores.append(row.score)
        refined.append(d)
        place_row(res, by_index, d, row)

    bar = None
    if progress:
        from tqdm.auto import tqdm
        bar = tqdm(desc="ILP ranking", unit="design", leave=False)
    pos = {int(d): ci for ci, d in enumerate(cand)}
    done: set[int] = set()
    proven = True
    from .schedule import cache_info
    limited0 = cache_info()["time_limited"]
    try:
        # seeds: the serial sweep's best designs (their ILP scores are at least the serial ones)
        for r in sorted(res.feasible, key=lambda r: -r.score):
            if len(scores) >= top or planned >= max_designs:
                break
            if r.index in pos:
                done.add(pos[r.index])
                plan(pos[r.index])
                if bar is not None:
                    bar.update(1)
        heap = [(-float(score1[ci]), ci) for ci in range(len(cand)) if ci not in done and score1[ci] > 0]
        heapq.heapify(heap)
        while heap and -heap[0][0] >= kth() * (1 - 1e-12):
            if planned >= max_designs:
                proven = False
                break
            _, ci = heapq.heappop(heap)
            plan(ci)
            if bar is not None:
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    cut = kth()
    left = sum(1 for b, _ in heap if -b >= cut) if not proven else 0
    res.meta["refined"] = refined
    limited = cache_info()["time_limited"] - limited0      # layers the ILP did not prove: not proven
    res.meta["ilp_ranking"] = {"proven": proven and limited == 0, "scheduled": planned, "designs": len(refined),
                               "top": top, "open": left, "time_limited_layers": limited}


def joint_baselines(models: Sequence[ModelConfig], space: SearchSpace, cluster: Cluster,
                    global_batch: Sequence[int], objective: str = "geomean",
                    mem: memory.MemoryConfig | None = None, plan_options: dict[str, Any] | None = None,
                    cosearched: Accelerator | None = None, refine: bool = True) -> dict[str, dict[str, Any]]:
    """The cross-model baselines, each scored like a design (``objective`` of the models'
    throughputs, every model with its own plan search, ILP layer times when ``refine``):
    ``"TPUv4"`` (the TPUv4 preset with the space's HBM scenario), ``"Spotlight"`` (the design
    with the best ``objective`` of the models' single-chip layer throughputs, tp 1 and
    microbatch 1 — the chip-only search) and, with ``cosearched``, ``"Megatron-fixed"``
    (PHAZE's fixed dp/tp/pp for each model on that chip; score 0 with the reason where PHAZE
    gives none or it does not fit)."""
    from .baselines import fixed_chip_in_its_formats, fixed_megatron, single_chip_layer_s
    from .hardware import TPUv4
    opts = dict(plan_options or {})
    designs = space.arrays()

    def scored(chip: Accelerator, note: str, plans) -> dict[str, Any]:
        tput = [p.tokens_per_s if p is not None else 0.0 for p in plans]
        return {"note": note, "score": float(combine(np.array(tput), objective)), "tokens_per_s": tput,
                "plans": [p.to_dict() if p is not None else None for p in plans],
                "design": chip.to_dict(), "area_mm2": chip.area_mm2(space.area_power),
                "power_w": chip.power_w(space.area_power)}

    def searched(chip: Accelerator, note: str) -> dict[str, Any]:
        """The chip's best plan for each model, scored; a model with none names why in the note
        (a chip without the searched number format has no plan, as in the single-model baselines)."""
        plans, why = [], []
        for m, b in zip(models, global_batch):
            r = fixed_chip_in_its_formats(m, chip, cluster, b, mem, refine=refine, plan_options=opts)
            plans.append(r.plans[0] if r.plans else None)
            if not r.plans and r.reason:
                why.append(f"{m.name}: {r.reason}")
        return scored(chip, note + (f" (no plan for {'; '.join(why)})" if why else ""), plans)

    out = {}
    tpu = space.with_scenario_hbm(TPUv4)
    out["TPUv4"] = searched(tpu, "fixed TPUv4 chip + plan search")
    precs = placement._priced_values(opts, "precision")
    single = np.stack([m.seq_len / single_chip_layer_s(m, designs, precs) for m in models], axis=-1)
    i = int(np.argmax(combine(single, objective)))
    spot = Accelerator.from_array(designs[i], name=f"spotlight{i}")
    out["Spotlight"] = searched(spot, f"chip-only search (design {i}) + plan search")
    if cosearched is not None:
        plans, why = [], []
        for m, b in zip(models, global_batch):
            p, w = fixed_megatron(m, cosearched, cluster, b, mem, zero=tuple(opts.get("zero", (0, 1))),
                                  time_model="ilp" if refine else "sum")
            plans.append(p)
            if w:
                why.append(f"{m.name}: {w}")
        out["Megatron-fixed"] = scored(cosearched, "PHAZE's fixed Megatron placements on the co-searched chip"
                                       + (f" ({'; '.join(why)})" if why else ""), plans)
    return out
