"""The co-search: every accelerator design of a search space x its best training plan.

For all designs at once the roofline kernel prices the model's embedding, layer and
head graphs (fwd and bwd) for every (tp, microbatch) (:func:`cosearch.plan.unit_costs`);
a design's layer times are the serial sum of its op times (the per-layer ILP's upper
bound) during screening.  The exact plan search (:func:`cosearch.placement.search_plans`)
then finds each design's best plan over the plan options given (``plan_options``).
Designs are visited in order of a throughput upper bound and skipped once the bound
cannot beat the best plan found (pruning): any plan's step time is at least
``(B / mb) * tp * sum_u t_u(tp, mb) / chips`` (all chip-seconds of a step spread
perfectly over every chip), minimised over (tp, mb).  Finally the top ``refine_top``
designs are re-planned with ILP-scheduled layer times (:func:`cosearch.schedule.layer_time`,
cached) for the (tp, microbatch) pairs of their best plans, and the results re-ranked.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import math
import os
import time
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, Executor, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import memory, placement
from . import plan as plan_mod
from ._interrupt import stop_pool
from ._json import dump_json, load_json
from ._kernels import formulas as F
from .hardware import DESIGN_FIELDS, Accelerator, AreaPowerModel, Cluster, SearchSpace
from .models import ModelConfig
from .models import preset as model_preset

__all__ = ["cosearch", "Results", "DesignResult", "evaluate_designs", "pareto_front"]

log = logging.getLogger("cosearch")

#: How many times a sweep replaces a pool whose worker died before giving up.
MAX_POOL_RESTARTS = 3


@dataclass(frozen=True)
class DesignResult:
    """One design of the space and its best plan (``plan`` is None if nothing fits)."""

    index: int
    design: dict[str, float]
    area_mm2: float
    power_w: float
    plan: plan_mod.Plan | None
    reason: str = ""
    time_model: str = "sum"

    @property
    def tokens_per_s(self) -> float:
        return self.plan.tokens_per_s if self.plan else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "design": dict(self.design), "area_mm2": self.area_mm2,
                "power_w": self.power_w, "plan": self.plan.to_dict() if self.plan else None,
                "reason": self.reason, "time_model": self.time_model}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> DesignResult:
        """Parse one row, refusing non-finite or negative numbers (a hand-edited NaN must not
        rank first)."""
        def num(name, v):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise ValueError(f"row {d.get('index')!r}: {name} must be a finite non-negative number, got {v!r}")
            return float(v)
        if not isinstance(d["design"], dict):
            raise ValueError(f"row {d.get('index')!r}: design must be an object")
        design = {k: num(f"design.{k}", v) for k, v in d["design"].items()}
        plan = plan_mod.Plan.from_dict(d["plan"]) if d["plan"] else None
        if plan is not None:
            num("plan.tokens_per_s", plan.tokens_per_s)
            if plan.feasible:
                num("plan.step_time_s", plan.step_time_s)
        tm = d.get("time_model", "sum")
        if tm not in ("sum", "ilp"):
            raise ValueError(f"row {d.get('index')!r}: time_model must be 'sum' or 'ilp', got {tm!r}")
        return cls(index=int(d["index"]), design=design, area_mm2=num("area_mm2", d["area_mm2"]),
                   power_w=num("power_w", d["power_w"]), plan=plan, reason=str(d.get("reason", "")),
                   time_model=tm)

    def accelerator(self) -> Accelerator:
        return Accelerator.from_array([self.design[f] for f in DESIGN_FIELDS], name=f"design{self.index}")


def pareto_front(x: Sequence[float], y: Sequence[float]) -> list[int]:
    """Indices of points with no other point of lower-or-equal ``x`` and higher ``y``
    (minimise x, maximise y), sorted by x."""
    order = sorted(range(len(x)), key=lambda i: (x[i], -y[i]))
    front, best = [], -math.inf
    for i in order:
        if y[i] > best:
            front.append(i)
            best = y[i]
    return front


@dataclass
class Results:
    """Co-search results: one row per evaluated design, the best, Pareto fronts, baselines."""

    model: str
    chips: int
    global_batch: int
    rows: list[DesignResult]
    pruned: int = 0
    total_designs: int = 0
    interrupted: bool = False
    baselines: dict[str, dict[str, Any]] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    stopped_by: BaseException | None = field(default=None, repr=False, compare=False)

    @property
    def feasible(self) -> list[DesignResult]:
        return [r for r in self.rows if r.plan is not None]

    @property
    def best(self) -> DesignResult:
        f = self.feasible
        if not f:
            reasons = {r.reason for r in self.rows if r.reason}
            raise ValueError("no design has a feasible plan" + (f": {sorted(reasons)[0]}" if reasons else ""))
        return max(f, key=lambda r: (r.tokens_per_s, -r.index))

    def pareto(self, against: str = "area") -> list[DesignResult]:
        """Designs on the throughput-vs-area (or ``"power"``) Pareto front."""
        if against not in ("area", "power"):
            raise ValueError(f"against must be 'area' or 'power', got {against!r}")
        f = self.feasible
        x = [r.area_mm2 if against == "area" else r.power_w for r in f]
        return [f[i] for i in pareto_front(x, [r.tokens_per_s for r in f])]

    # ------------------------------------------------------------------ persistence
    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "chips": self.chips, "global_batch": self.global_batch,
                "pruned": self.pruned, "total_designs": self.total_designs,
                "interrupted": self.interrupted, "baselines": self.baselines, "meta": self.meta,
                "rows": [r.to_dict() for r in self.rows]}

    def to_json(self, path: str | os.PathLike | None = None) -> str:
        return dump_json(self.to_dict(), path)

    @classmethod
    def from_json(cls, source: str | os.PathLike) -> Results:
        """Load from a JSON string or a file path."""
        d = load_json(source)
        name = source if len(str(source)) < 200 else "results"
        try:
            if not isinstance(d, dict):
                raise ValueError("the top level is not an object")
            interrupted = d["interrupted"]
            if not isinstance(interrupted, bool):
                raise ValueError(f"'interrupted' must be true or false, got {interrupted!r}")
            if not isinstance(d["rows"], list):
                raise ValueError("'rows' must be a list")
            return cls(model=str(d["model"]), chips=int(d["chips"]), global_batch=int(d["global_batch"]),
                       rows=[DesignResult.from_dict(r) for r in d["rows"]], pruned=int(d["pruned"]),
                       total_designs=int(d["total_designs"]), interrupted=interrupted,
                       baselines=d.get("baselines", {}), meta=d.get("meta", {}))
        except KeyError as exc:
            raise ValueError(f"{name}: not a cosearch results file (missing field {exc})") from None
        except (TypeError, AttributeError) as exc:
            raise ValueError(f"{name}: malformed cosearch results file ({exc})") from None
        except ValueError as exc:
            raise ValueError(f"{name}: malformed cosearch results file: {exc}") from None

    def to_csv(self, path: str | os.PathLike | None = None) -> str:
        buf = io.StringIO()
        w = csv.writer(buf)
        cols = ["index", *DESIGN_FIELDS, "area_mm2", "power_w", "tokens_per_s", "step_time_s",
                "dp", "tp", "pp", "microbatch", "chips_used", "mfu", "time_model"]
        w.writerow(cols)
        for r in self.rows:
            p = r.plan
            w.writerow([r.index, *[r.design[f] for f in DESIGN_FIELDS], r.area_mm2, r.power_w,
                        r.tokens_per_s, p.step_time_s if p else "", p.dp if p else "", p.tp if p else "",
                        p.pp if p else "", p.microbatch if p else "", p.chips_used if p else "",
                        p.mfu if p else "", r.time_model])
        text = buf.getvalue()
        if path is not None:
            with open(path, "w", newline="") as fh:
                fh.write(text)
        return text

    def table(self, top: int = 10) -> str:
        """Plain-text summary: the best designs, the baselines and the pruning count."""
        lines = [f"cosearch: {self.model} on {self.chips} chips, global batch {self.global_batch}: "
                 f"{len(self.rows)} designs evaluated, {self.pruned} pruned of {self.total_designs}"
                 + (" (interrupted: partial results)" if self.interrupted else "")]
        hdr = f"{'rank':>4} {'design':>7} {'cores':>5} {'array':>9} {'L1 MiB':>7} {'L2 MiB':>7} {'HBM GB':>7} " \
              f"{'TB/s':>5} {'area':>6} {'W':>6} {'tok/s':>10} {'chips':>6} {'MFU':>6} {'time':>4}  plan"
        lines.append(hdr)
        ranked = sorted(self.feasible, key=lambda r: -r.tokens_per_s)[:top]
        for k, r in enumerate(ranked, 1):
            d = r.design
            lines.append(f"{k:>4} {r.index:>7} {int(d['tensor_cores']):>5} "
                         f"{int(d['systolic_rows']):>4}x{int(d['systolic_cols']):<4} "
                         f"{d['l1_bytes']/2**20:>7.2f} {d['l2_bytes']/2**20:>7.0f} {d['hbm_bytes']/1e9:>7.0f} "
                         f"{d['hbm_bandwidth_Bps']/1e12:>5.2f} {r.area_mm2:>6.0f} {r.power_w:>6.0f} "
                         f"{r.tokens_per_s:>10,.0f} {r.plan.chips_used:>6} {r.plan.mfu:>6.1%} {r.time_model:>4}  "
                         f"{r.plan.spec.describe()}")
        if ranked:
            b = ranked[0].plan.breakdown
            lines.append("best plan's step (s): " + ", ".join(f"{k[:-2]} {v:.3g}" for k, v in b.items()))
        for name, b in self.baselines.items():
            lines.append(f"baseline {name}: {b.get('tokens_per_s', 0):,.0f} tok/s ({b.get('note', '')})")
        if self.feasible and self.baselines:
            best = self.best.tokens_per_s
            for name, b in self.baselines.items():
                if b.get("tokens_per_s"):
                    lines.append(f"co-search / {name}: {best / b['tokens_per_s']:.3f}x")
        return "\n".join(lines)

    def plot(self, path: str | os.PathLike | None = None, against: str = "area"):
        """Throughput vs area (or power) of every design, Pareto front and baselines marked.
        Needs matplotlib (``pip install cosearch[plot]``)."""
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError as exc:  # pragma: no cover
            raise ImportError("Results.plot needs matplotlib: pip install 'cosearch[plot]'") from exc
        f = self.feasible
        key = "area_mm2" if against == "area" else "power_w"
        fig, ax = plt.subplots(figsize=(7, 4.5))
        ax.scatter([getattr(r, key) for r in f], [r.tokens_per_s for r in f], s=8, alpha=0.4,
                   label="designs")
        front = self.pareto(against)
        ax.plot([getattr(r, key) for r in front], [r.tokens_per_s for r in front], "k-", lw=1,
                label="Pareto front")
        if f:
            b = self.best
            ax.scatter([getattr(b, key)], [b.tokens_per_s], marker="*", s=200, c="red", label="co-search best")
        for (name, base), mk in zip(self.baselines.items(), ("s", "^", "D")):
            if base.get("tokens_per_s"):
                ax.scatter([base.get(key, np.nan)], [base["tokens_per_s"]], marker=mk, s=80, label=name)
        ax.set_xlabel("area (mm$^2$)" if against == "area" else "power (W)")
        ax.set_ylabel("training throughput (tokens/s)")
        ax.set_title(f"{self.model}, {self.chips} chips, batch {self.global_batch}")
        ax.legend(fontsize=8)
        fig.tight_layout()
        if path is not None:
            fig.savefig(path, dpi=120)
            plt.close(fig)
        return fig


# ---------------------------------------------------------------------- worker
#: Plan options the co-search explores per design by default (the full space is
#: :func:`cosearch.placement.search_plans`'s default; this keeps a 1,000-design sweep fast).
DEFAULT_PLAN_OPTIONS: dict[str, Any] = {"virtual_stages": (1,), "sequence_parallel": (False,), "zero": (0, 1)}


def evaluate_designs(model: ModelConfig, designs: np.ndarray, indices: Sequence[int], cluster: Cluster,
                     global_batch: int, tps: Sequence[int], microbatches: Sequence[int],
                     units: np.ndarray, mem: memory.MemoryConfig, area_power: AreaPowerModel,
                     time_model: str = "sum", plan_options: dict[str, Any] | None = None) -> list[DesignResult]:
    """Best plan of each design (a picklable task for any executor).  ``units``: the
    designs' :func:`cosearch.plan.unit_costs` (designs, tps, microbatches, sp, fields)."""
    opts = dict(DEFAULT_PLAN_OPTIONS if plan_options is None else plan_options)
    out = []
    area = area_power.area_mm2(designs)
    power = area_power.power_w(designs)
    for k, row in enumerate(designs):
        chip = Accelerator.from_array(row, name=f"design{indices[k]}")
        res = placement.search_plans(model, chip, cluster, global_batch, tps=tps, microbatches=microbatches,
                                     mem=mem, units=units[k], time_model=time_model, **opts)
        out.append(DesignResult(int(indices[k]), {f: float(v) for f, v in zip(DESIGN_FIELDS, row)},
                                float(area[k]), float(power[k]), res.plans[0] if res.plans else None,
                                res.reason, time_model))
    return out


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
             checkpoint_every_s: float = 10.0, resume: str | os.PathLike | None = None) -> Results:
    """Co-search accelerator designs and training plans; see the module docstring.

    ``executor``: any ``concurrent.futures.Executor`` (e.g. a Dask ``Client.get_executor()``),
    ``"serial"`` to run in-process, or None for a local process pool over the cores.  A
    ``ProcessPoolExecutor`` of your own should use the ``spawn`` (or ``forkserver``) start
    method: numba's OpenMP threads make ``fork`` unsafe.
    ``refine_top``: re-plan this many best designs with ILP-scheduled layer times (0: off).
    ``baselines``: also run the TPUv4 and Spotlight-style baselines (``Results.baselines``).
    ``plan_options``: keyword options of :func:`cosearch.placement.search_plans` for every
    design (default :data:`DEFAULT_PLAN_OPTIONS`).
    Ctrl-C (or SIGTERM under the CLI) in any phase returns the results gathered so far
    (``Results.interrupted``) and stops the pool's workers.  A dead pool worker's chunks are
    retried on a fresh pool (up to :data:`MAX_POOL_RESTARTS` times).  ``checkpoint``: a JSON
    file the partial sweep is saved to at most every ``checkpoint_every_s`` seconds;
    ``resume``: such a file (or a saved result) made with the same settings — its evaluated
    designs are kept and not evaluated again.
    """
    model = model_preset(model)
    space = space or SearchSpace()
    cluster = cluster if isinstance(cluster, Cluster) else Cluster(int(cluster))
    mem = mem or memory.MemoryConfig()
    if isinstance(global_batch, bool) or int(global_batch) != global_batch or global_batch <= 0:
        raise ValueError(f"global_batch must be a positive integer, got {global_batch!r}")
    global_batch = int(global_batch)
    designs = space.arrays()  # raises naming the constraint if nothing fits
    tps = tuple(tps or placement.default_tps(model, cluster.num_chips))
    mbs = tuple(microbatches or placement.divisors(global_batch))
    bad = [b for b in mbs if global_batch % b]
    if bad:
        raise ValueError(f"microbatch sizes {bad} do not divide global_batch={global_batch}")
    opts = dict(DEFAULT_PLAN_OPTIONS if plan_options is None else plan_options)
    sps = placement._bools("sequence_parallel", opts.get("sequence_parallel"), (False, True))
    opts["sequence_parallel"] = sps
    units = plan_mod.unit_costs(model, designs, cluster, tps, mbs, sps,
                                bool(opts.get("flash_attention", False)))
    lb = _step_lower_bound(units, model, tps, mbs, global_batch, cluster.num_chips)
    order = np.argsort(lb, kind="stable")
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
        done_idx = {r.index for r in rows}
        pruned = old.pruned
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
                space.area_power, "sum", opts)

    def absorb(batch):
        nonlocal best_step
        for r in batch:
            rows.append(r)
            if r.plan is not None and r.plan.step_time_s < best_step:
                best_step = r.plan.step_time_s
        if bar is not None:
            bar.update(len(batch))
            if best_step < math.inf:
                bar.set_postfix(best_tok_s=f"{global_batch * model.seq_len / best_step:,.0f}")
        if checkpoint is not None and time.monotonic() - last_save[0] >= checkpoint_every_s:
            snapshot(False).to_json(checkpoint)
            last_save[0] = time.monotonic()

    def select(ch):
        nonlocal pruned
        ch = ch[[i not in done_idx for i in ch]] if done_idx else ch
        keep = ch[lb[ch] <= best_step] if prune else ch
        pruned += len(ch) - len(keep)
        if bar is not None and len(ch) > len(keep):
            bar.update(len(ch) - len(keep))
        return keep

    try:
        chunks = [order[i:i + chunk_size] for i in range(0, len(order), chunk_size)]
        if pool is None:
            for ch in chunks:
                keep = select(ch)
                if len(keep):
                    absorb(evaluate_designs(*task_args(keep)))
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
                        absorb(fut.result())
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
            _refine(res, model, cluster, global_batch, mem, refine_top, opts)
        if baselines and not interrupted:
            from . import baselines as bl
            res.baselines = bl.run_baselines(model, space, cluster, global_batch, mem=mem, tps=tps,
                                             microbatches=mbs, refine=bool(refine_top), plan_options=opts)
    except KeyboardInterrupt as exc:      # refinement or baselines cut short: keep the sweep
        res.interrupted, res.stopped_by = True, exc
    return res


def _refine(res: Results, model: ModelConfig, cluster: Cluster, global_batch: int,
            mem: memory.MemoryConfig, top: int, opts: dict[str, Any]) -> None:
    """Re-plan the best designs with ILP layer times on their best plans' (tp, mb)."""
    ranked = sorted(res.feasible, key=lambda r: -r.tokens_per_s)[:top]
    by_index = {r.index: i for i, r in enumerate(res.rows)}
    for r in ranked:
        new = ilp_plan(model, r.accelerator(), cluster, global_batch, mem, r.plan, opts)
        if new is not None:
            res.rows[by_index[r.index]] = DesignResult(r.index, r.design, r.area_mm2, r.power_w, new,
                                                       "", "ilp")
            res.meta["refined"].append(r.index)


def ilp_plan(model: ModelConfig, chip: Accelerator, cluster: Cluster, global_batch: int,
             mem: memory.MemoryConfig, plan: plan_mod.Plan, opts: dict[str, Any] | None = None) -> plan_mod.Plan | None:
    """Best plan with ILP-scheduled layer times at ``plan``'s tp, microbatch and
    sequence-parallel choice."""
    opts = dict(DEFAULT_PLAN_OPTIONS if opts is None else opts)
    opts["sequence_parallel"] = (plan.spec.sequence_parallel,)
    r = placement.search_plans(model, chip, cluster, global_batch, tps=(plan.tp,), microbatches=(plan.microbatch,),
                               mem=mem, time_model="ilp", **opts)
    return r.plans[0] if r.plans else None
