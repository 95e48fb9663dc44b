"""Tables and plots of co-search :class:`~cosearch.results.Results`."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

__all__ = ["table", "plot", "collapse", "pareto_front", "TIME_MODEL_TITLES"]


class Results(Protocol):
    """What a table or plot reads of a co-search result (:class:`cosearch.results.Results` has
    it); a protocol, so this module imports nothing above it, not even for typing."""

    model: str
    chips: int
    global_batch: int
    rows: list[Any]
    pruned: int
    total_designs: int
    interrupted: bool
    baselines: dict[str, dict[str, Any]]
    meta: dict[str, Any]

    @property
    def feasible(self) -> list[Any]: ...

    @property
    def best(self) -> Any: ...


#: Time models in the order their rows are listed; rows of different models are never
#: ranked against each other (an ILP-scheduled layer is faster than the serial sum).
TIME_MODEL_TITLES = (("ilp", "ranked on ILP-scheduled layer times"),
                     ("sum", "screened on serial layer times (not ILP-ranked; an ILP schedule would be faster)"))


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


def collapse(rows) -> list[tuple[object, int]]:
    """Rows that differ only in parameters with no effect on the result (same time model,
    plan, chips used and throughput) as one (smallest-area representative, count) each,
    best first."""
    groups: dict[tuple, list] = {}
    for r in rows:
        key = (r.time_model, r.plan.spec.describe(), r.plan.chips_used, float(f"{r.tokens_per_s:.9g}"))
        groups.setdefault(key, []).append(r)
    out = [(min(g, key=lambda r: (r.area_mm2, r.index)), len(g)) for g in groups.values()]
    return sorted(out, key=lambda rc: (-rc[0].tokens_per_s, rc[0].area_mm2, rc[0].index))


def _row(k: int, r, n: int, formats: tuple[str, ...] = ()) -> str:
    d = r.design
    return (f"{k:>4} {r.index:>7} {n:>4} {int(d['tensor_cores']):>5} "
            f"{int(d['systolic_rows']):>4}x{int(d['systolic_cols']):<4} "
            + "".join(f"{d.get(f + '_macs', 0.0):>4g} " for f in formats) + f"{int(d['vector_units']):>5} "
            f"{d['l1_bytes']/2**20:>7.2f} {d['l2_bytes']/2**20:>7.0f} {d['hbm_bytes']/2**30:>7.0f} "
            f"{d['hbm_bandwidth_Bps']/1e12:>5.2f} {r.area_mm2:>6.0f} {r.power_w:>6.0f} "
            f"{r.tokens_per_s:>10,.0f} {r.plan.chips_used:>6} {r.plan.mfu:>6.1%} {r.time_model:>4}  "
            f"{r.plan.spec.describe()}")


def table(res: Results, top: int = 10) -> str:
    """Plain-text summary: the best designs per time model (equivalent designs collapsed
    into one row with their count ``n``), the best plan's breakdown, the baselines and the
    pruning count.  MFU is over all chips of the cluster."""
    from ._validate import top_count
    top = top_count(top)
    lines = [f"cosearch: {res.model} on {res.chips} chips, global batch {res.global_batch}: "
             f"{len(res.rows)} designs evaluated, {res.pruned} pruned of {res.total_designs}"
             + (" (interrupted: partial results)" if res.interrupted else "")]
    # a space with FP8 / FP4 tensor units shows each design's MACs per PE in those formats
    formats = tuple(f for f in ("fp8", "fp4") if any(r.design.get(f + "_macs", 0.0) > 0 for r in res.rows))
    hdr = f"{'rank':>4} {'design':>7} {'n':>4} {'cores':>5} {'array':>9} " + "".join(f"{f:>4} " for f in formats) + \
          f"{'vec':>5} {'L1 MiB':>7} " \
          f"{'L2 MiB':>7} {'HBM GiB':>7} {'TB/s':>5} {'area':>6} {'W':>6} {'tok/s':>10} {'chips':>6} " \
          f"{'MFU':>6} {'time':>4}  plan"
    ir = res.meta.get("ilp_ranking")
    if ir:
        planned = f"{ir['scheduled']} ILP plans ({ir.get('designs', ir['scheduled'])} designs)"
        lines.append(f"ILP ranking: top {ir['top']} proven exact after {planned}"
                     if ir["proven"] else
                     f"ILP ranking NOT proven: {planned}; " + (
                         f"{ir['time_limited_layers']} layer schedules hit the ILP time limit (their "
                         f"optimality is not proven)" if ir.get("time_limited_layers") else
                         f"{ir['open']} more designs could still enter the top {ir['top']} by their bound "
                         f"(raise --ilp-designs)"))
    shown = None
    for tm, title in TIME_MODEL_TITLES:
        rows = [r for r in res.feasible if r.time_model == tm]
        if not rows:
            continue
        groups = collapse(rows)
        lines.append(f"-- {title}: {len(rows)} designs in {len(groups)} distinct results")
        lines.append(hdr)
        for k, (r, n) in enumerate(groups[:top], 1):
            lines.append(_row(k, r, n, formats))
        shown = shown or groups[0][0]
    if shown is not None:
        b = shown.plan.breakdown
        lines.append("best plan's step (s): " + ", ".join(f"{k[:-2]} {v:.3g}" for k, v in b.items()))
    for name, b in res.baselines.items():
        why = f"; no plan: {b['reason']}" if not b.get("tokens_per_s") and b.get("reason") else ""
        lines.append(f"baseline {name}: {b.get('tokens_per_s', 0):,.0f} tok/s ({b.get('note', '')}{why})")
    if res.feasible and res.baselines:
        best = res.best.tokens_per_s
        for name, b in res.baselines.items():
            if b.get("tokens_per_s"):
                lines.append(f"co-search / {name}: {best / b['tokens_per_s']:.3f}x")
    return "\n".join(lines)


def plot(res: Results, path: str | os.PathLike | None = None, against: str = "area", overwrite: bool = False):
    """Left: throughput vs area (or power) of every evaluated design — ILP-ranked and screened
    rows marked apart —, their Pareto front (a step line with markers), the baselines, and a
    note of how many designs a bound pruned unevaluated.  Right: the winner's step-time
    breakdown, each bar labelled with its seconds.  Axes carry thousands separators.  Needs
    matplotlib (``pip install cosearch[plot]``)."""
    import textwrap

    from ._plotting import finish, pyplot
    plt = pyplot("Results.plot", path, overwrite)
    from matplotlib.ticker import FuncFormatter
    f = res.feasible
    key = "area_mm2" if against == "area" else "power_w"
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(12, 4.8), gridspec_kw={"width_ratios": [3, 2]})
    for tm, colour, label in (("sum", "0.6", "screened (serial layers)"), ("ilp", "C0", "ILP-ranked")):
        rows = [r for r in f if r.time_model == tm]
        if rows:
            ax.scatter([getattr(r, key) for r in rows], [r.tokens_per_s for r in rows], s=8, alpha=0.5,
                       c=colour, label=label)
    front = sorted((f[i] for i in pareto_front([getattr(r, key) for r in f], [r.tokens_per_s for r in f])),
                   key=lambda r: getattr(r, key))
    if front:
        ax.plot([getattr(r, key) for r in front], [r.tokens_per_s for r in front], "k-o", ms=4, lw=1,
                drawstyle="steps-post", label=f"Pareto front ({len(front)} design{'s' if len(front) > 1 else ''})")
    if f:
        b = res.best
        ax.scatter([getattr(b, key)], [b.tokens_per_s], marker="*", s=200, c="red", label="co-search best", zorder=3)
        items = [(k[:-2].replace("_", " "), v) for k, v in b.plan.breakdown.items() if v > 0]
        bars = bx.barh([k for k, _ in items], [v for _, v in items], color="C1")
        bx.bar_label(bars, labels=[f"{v:,.3g}" for _, v in items], fontsize=7, padding=2)
        bx.invert_yaxis()
        bx.set_xlabel("seconds per step")
        bx.margins(x=0.25)
        title = f"best design {b.index}: {b.plan.spec.describe()}"
        bx.set_title("\n".join(textwrap.wrap(title, 48)), fontsize=8)
    for (name, base), mk in zip(res.baselines.items(), ("s", "^", "D")):
        if base.get("tokens_per_s"):
            ax.scatter([base.get(key, np.nan)], [base["tokens_per_s"]], marker=mk, s=80, label=name)
    note = ""
    if res.pruned:
        note = (f"\n{res.pruned:,} of {res.total_designs:,} designs pruned unevaluated: a valid lower bound on "
                f"their step time\n(all work spread over every chip) was above the best plan found")
    thousands = FuncFormatter(lambda x, _pos: f"{x:,.0f}")
    ax.yaxis.set_major_formatter(thousands)
    ax.xaxis.set_major_formatter(thousands)
    ax.set_xlabel("area (mm$^2$)" if against == "area" else "power (W)")
    ax.set_ylabel("training throughput (tokens/s)")
    ax.set_title(f"{res.model}, {res.chips:,} chips, batch {res.global_batch:,}" + note, fontsize=9)
    ax.legend(fontsize=8)
    return finish(fig, path)
