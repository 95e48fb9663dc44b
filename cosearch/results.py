"""Co-search results: one row per evaluated design (:class:`DesignResult`), the whole run
(:class:`Results`) with its best design, Pareto fronts and baselines, and their JSON/CSV
persistence.  Tables and plots live in :mod:`cosearch.report`.
"""

from __future__ import annotations

import csv
import io
import math
import os
from dataclasses import dataclass, field
from typing import Any

from . import _validate as v
from . import plan as plan_mod
from ._json import (
    IncrementalJSONWriter,
    atomic_write_text,
    check_schema,
    load_json,
    save_new_json,
    stamped,
)
from .hardware import DESIGN_FIELDS, Accelerator
from .hardware.efficiency import OPTIONAL_DESIGN_FIELDS
from .report import pareto_front, plot, table

__all__ = ["DesignResult", "Results", "pareto_front"]


#: Largest throughput a results file may claim (tokens/s): a million times the fastest published
#: training runs' ~1e9 tokens/s; anything above is a corrupted or hand-edited file.
MAX_TOKENS_PER_S = 1e15


def _check_baselines(baselines: Any) -> None:
    """A results file's baselines, as the report reads them: an object of objects whose
    ``tokens_per_s`` is a finite non-negative number."""
    if not isinstance(baselines, dict) or not all(isinstance(b, dict) for b in baselines.values()):
        raise ValueError("'baselines' must be an object of objects")
    for name, b in baselines.items():
        v.nonneg_float(f"baselines.{name}.tokens_per_s", b.get("tokens_per_s", 0.0))


def _check_meta(meta: Any) -> None:
    """A results file's meta, as the report reads it: an object whose ``ilp_ranking`` (if any)
    is one with its counts."""
    if not isinstance(meta, dict):
        raise ValueError("'meta' must be an object")
    ir = meta.get("ilp_ranking")
    if ir is not None:
        if not isinstance(ir, dict) or not isinstance(ir.get("proven"), bool):
            raise ValueError("'meta.ilp_ranking' must be an object with 'proven' true or false")
        for k in ("scheduled", "top", "designs", "open", "time_limited_layers"):
            if k in ir:
                _count(f"meta.ilp_ranking.{k}", ir[k])


def _count(name: str, x) -> int:
    if isinstance(x, bool) or not isinstance(x, int) or not (0 <= x <= 1 << 40):
        raise ValueError(f"'{name}' must be a whole number in [0, 2^40], got {x!r}")
    return x


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
        missing = [f for f in DESIGN_FIELDS[:len(DESIGN_FIELDS) - OPTIONAL_DESIGN_FIELDS] if f not in d["design"]]
        if missing:
            raise ValueError(f"row {d.get('index')!r}: design lacks {', '.join(missing)}")
        design = {k: num(f"design.{k}", v) for k, v in d["design"].items()}
        plan = plan_mod.Plan.from_dict(d["plan"]) if d["plan"] else None
        if plan is not None:
            if num("plan.tokens_per_s", plan.tokens_per_s) > MAX_TOKENS_PER_S:
                raise ValueError(f"row {d.get('index')!r}: plan.tokens_per_s={plan.tokens_per_s:g} is beyond any "
                                 f"machine (at most {MAX_TOKENS_PER_S:g})")
            for f in ("mfu", "hfu"):
                # (model FLOPs count attention without causal halving, so a long-sequence plan at
                # the ideal roofline may pass 1, never 2)
                if num(f"plan.{f}", getattr(plan, f)) > 2.0:
                    raise ValueError(f"row {d.get('index')!r}: plan.{f}={getattr(plan, f)!r} is over twice the peak")
            if plan.feasible:
                num("plan.step_time_s", plan.step_time_s)
            v.positive_int(f"row {d.get('index')!r}: plan.num_chips", plan.num_chips, v.MAX_CHIPS)
        tm = d.get("time_model", "sum")
        if tm not in ("sum", "ilp"):
            raise ValueError(f"row {d.get('index')!r}: time_model must be 'sum' or 'ilp', got {tm!r}")
        return cls(index=int(d["index"]), design=design, area_mm2=num("area_mm2", d["area_mm2"]),
                   power_w=num("power_w", d["power_w"]), plan=plan, reason=str(d.get("reason", "")),
                   time_model=tm)

    @classmethod
    def from_row(cls, index: int, row, area_mm2: float, power_w: float, plan: plan_mod.Plan | None,
                 reason: str = "", time_model: str = "sum") -> DesignResult:
        """A result for design ``index`` given as one :data:`DESIGN_FIELDS` row."""
        return cls(int(index), {f: float(v) for f, v in zip(DESIGN_FIELDS, row)}, float(area_mm2), float(power_w),
                   plan, reason, time_model)

    def accelerator(self) -> Accelerator:
        return Accelerator.from_array([self.design.get(f, 0.0) for f in DESIGN_FIELDS], name=f"design{self.index}")


def place_row(res, by_index: dict[int, int], index: int, row) -> None:
    """Put ``row`` (design ``index``'s re-planned result) into ``res.rows``: in place of the
    design's old row if it has one (``by_index``: design -> position, kept up to date), else
    appended, the design then no longer counted as pruned.  ``res`` is any result with
    ``rows`` and ``pruned`` (single- or multi-model)."""
    if index in by_index:
        res.rows[by_index[index]] = row
    else:
        by_index[index] = len(res.rows)
        res.rows.append(row)
        res.pruned -= 1


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
    def checkpoint(self, writer: IncrementalJSONWriter) -> None:
        """Write this result through ``writer`` (each row serialised once across checkpoints);
        the file reads back as :meth:`to_json`'s does."""
        header = self.to_dict(rows=False)
        writer.write(header, self.rows, DesignResult.to_dict)

    def to_dict(self, rows: bool = True) -> dict[str, Any]:
        """The JSON document (``rows=False``: everything but the rows, for :meth:`checkpoint`)."""
        d = stamped("results", {"model": self.model, "chips": self.chips, "global_batch": self.global_batch,
                                "pruned": self.pruned, "total_designs": self.total_designs,
                                "interrupted": self.interrupted, "baselines": self.baselines, "meta": self.meta})
        if rows:
            d["rows"] = [r.to_dict() for r in self.rows]
        return d

    def to_json(self, path: str | os.PathLike | None = None, overwrite: bool = False) -> str:
        """The JSON text; also written to ``path`` when given — which must not exist unless
        ``overwrite`` (as the command line refuses without ``--force``)."""
        return save_new_json(self.to_dict(), path, overwrite)

    @classmethod
    def from_json(cls, source: str | os.PathLike) -> Results:
        """Load from a JSON string or a file path."""
        return cls.from_document(load_json(source), str(source) if len(str(source)) < 200 else "results")

    @classmethod
    def from_document(cls, d: Any, name: str = "results") -> Results:
        """A result from an already parsed document (:meth:`to_dict`'s output), schema checked
        (``name``: how messages call it)."""
        check_schema(d, "results", name)
        try:
            interrupted = d["interrupted"]
            if not isinstance(interrupted, bool):
                raise ValueError(f"'interrupted' must be true or false, got {interrupted!r}")
            if not isinstance(d["rows"], list):
                raise ValueError("'rows' must be a list")
            _check_baselines(d.get("baselines", {}))
            _check_meta(d.get("meta", {}))
            return cls(model=str(d["model"]), chips=v.positive_int("chips", d["chips"], v.MAX_CHIPS),
                       global_batch=v.positive_int("global_batch", d["global_batch"], v.MAX_BATCH),
                       rows=[DesignResult.from_dict(r) for r in d["rows"]],
                       pruned=_count("pruned", d["pruned"]),
                       total_designs=_count("total_designs", d["total_designs"]), interrupted=interrupted,
                       baselines=d.get("baselines", {}), meta=d.get("meta", {}))
        except KeyError as exc:
            raise ValueError(f"{name}: not a cosearch results file (missing field {exc})") from None
        except (TypeError, AttributeError) as exc:
            raise ValueError(f"{name}: malformed cosearch results file ({exc})") from None
        except ValueError as exc:
            raise ValueError(f"{name}: malformed cosearch results file: {exc}") from None

    #: Columns of :meth:`to_csv` after the design fields (README's "Output files").
    CSV_PLAN_COLUMNS = ("dp", "tp", "pp", "cp", "ep", "microbatch", "recompute", "virtual_stages",
                        "sequence_parallel", "zero", "zero_group", "precision", "flash_attention", "chips_used",
                        "mfu", "time_model", "reason")

    def to_csv(self, path: str | os.PathLike | None = None, overwrite: bool = False) -> str:
        """One row per design in rank order (best throughput first, designs without a plan
        last), with the plan's columns (:data:`CSV_PLAN_COLUMNS`); also written to ``path`` when
        given — which must not exist unless ``overwrite``."""
        v.new_file(path, overwrite, "path")
        buf = io.StringIO()
        w = csv.writer(buf)
        cols = ["rank", "index", *DESIGN_FIELDS, "area_mm2", "power_w", "tokens_per_s", "step_time_s",
                *self.CSV_PLAN_COLUMNS]
        w.writerow(cols)
        ranked = sorted(self.rows, key=lambda r: (r.plan is None, -r.tokens_per_s, r.index))
        for rank, r in enumerate(ranked, start=1):
            p = r.plan
            if p is None:
                plan_cols = [""] * (len(self.CSV_PLAN_COLUMNS) - 2) + [r.time_model, r.reason]
            else:
                s = p.spec
                rc = s.recompute if isinstance(s.recompute, str) else plan_mod.recompute_runs(s.recompute)
                plan_cols = [s.dp, s.tp, s.pp, s.context_parallel, s.expert_parallel, s.microbatch, rc,
                             s.virtual_stages, s.sequence_parallel, s.zero, s.shard_group if s.zero else "",
                             s.precision, s.flash_attention, p.chips_used, p.mfu, r.time_model, r.reason]
            w.writerow([rank if p is not None else "", r.index, *[r.design.get(f, 0.0) for f in DESIGN_FIELDS], r.area_mm2,
                        r.power_w, r.tokens_per_s, p.step_time_s if p else "", *plan_cols])
        text = buf.getvalue()
        if path is not None:
            atomic_write_text(path, text)
        return text

    def table(self, top: int = 10) -> str:
        """Plain-text summary (see :func:`cosearch.report.table`)."""
        return table(self, top)

    def plot(self, path: str | os.PathLike | None = None, against: str = "area", overwrite: bool = False):
        """Throughput vs area (or power) with the Pareto front and baselines (see
        :func:`cosearch.report.plot`); an existing ``path`` is replaced only with ``overwrite``."""
        return plot(self, path, against, overwrite)
