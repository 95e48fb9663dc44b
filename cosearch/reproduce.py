"""PHAZE's experiment (Wang et al., ICML 2024), re-run with cosearch's models.

1,024 chips, global batch 4,096, PHAZE's six models at their sequence lengths, HBM
scenarios of 32, 64 and 80 GiB per chip.  For each (model, HBM) it co-searches the space
(PHAZE's by default), re-plans the best designs with ILP-scheduled layer times, and
compares the winner against the TPUv4 chip (same HBM), the Spotlight-style chip, and
PHAZE's fixed Megatron placement on the winning chip — all with the same time model.
Rows are saved after each run; a re-run with the same file skips the rows it holds that were
made with the same settings (chips, batch, space, ILP refinement); rows made with other
settings stay in the file and are not reused or returned.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass
from typing import Any

from ._json import dump_json, load_json, stamped
from ._validate import file_path

__all__ = ["PHAZE_MODELS", "PHAZE_HBM_GIB", "PhazeRow", "phaze", "SPACES"]

#: Spaces a reproduction can search: PHAZE's (with its global-buffer bandwidth) under cosearch's
#: area model, the same under PHAZE's own area model (exactly PHAZE's 29,360 designs), PHAZE's
#: without the on-chip bandwidth bound (cosearch 0.2's pricing), and cosearch's default grid.
SPACES = ("phaze", "phaze-area", "phaze-no-onchip", "default")

#: PHAZE's models (its ``scripts/``), by cosearch preset; each at its preset's sequence length
#: (BERT-large 512, GPT2-XL 1,024, OPT-350m 2,048, Llama-2-7B 4,096, Megatron GPT2-8.3B 1,024,
#: GPT-3 175B 2,048).
PHAZE_MODELS = ("bert-large", "gpt2-xl", "opt-350m", "llama2-7b", "megatron-gpt2-8.3b", "gpt3-175b")
PHAZE_HBM_GIB = (32, 64, 80)


@dataclass(frozen=True)
class PhazeRow:
    """One (model, HBM) run: the winner, its plan and its gains over the baselines
    (0.0 where a baseline has no feasible plan)."""

    model: str
    hbm_gib: float
    designs: int
    evaluated: int
    best_design: str
    area_mm2: float
    plan: str
    tokens_per_s: float
    mfu: float
    time_model: str
    gain_over_tpuv4: float
    gain_over_spotlight: float
    gain_over_megatron: float
    seconds: float
    note: str = ""
    #: the run's settings besides the model and HBM (chips, global batch, space, ILP refinement);
    #: a row is reused only by a run with the same ones (None: a file from before they were kept)
    settings: dict[str, Any] | None = None

    def line(self) -> str:
        def g(x):
            return f"{x:6.3f}x" if x > 0 else "    n/a"
        return (f"{self.model:<20} {self.hbm_gib:>4g} {self.best_design:<34} {self.tokens_per_s:>12,.0f} "
                f"{self.mfu:>6.1%} {g(self.gain_over_tpuv4)} {g(self.gain_over_spotlight)} "
                f"{g(self.gain_over_megatron)} {self.seconds:>7.0f}  {self.plan}")


HEADER = (f"{'model':<20} {'HBM':>4} {'best design':<34} {'tokens/s':>12} {'MFU':>6} {'/TPUv4':>7} "
          f"{'/Spotl.':>7} {'/Megat.':>7} {'seconds':>7}  plan")


def _describe(d: dict[str, float]) -> str:
    return (f"{int(d['tensor_cores'])}x{int(d['systolic_rows'])}x{int(d['systolic_cols'])} TC, "
            f"{int(d['vector_units'])} VC, {d['l2_bytes'] / 2**20:g} MiB")


def _table_models(models, echo) -> list:
    """A table's models as a list (one may be given bare: a string is not a list of letters),
    its ``echo`` checked to be a function (or None) before the first run."""
    if echo is not None and not callable(echo):
        raise ValueError(f"echo must be a function taking a line, or None, got {echo!r}")
    return [models] if isinstance(models, str) else list(models)


def phaze(models=PHAZE_MODELS, hbm_gibs=PHAZE_HBM_GIB, *, chips: int = 1024, global_batch: int = 4096,
          space: str = "phaze", refine_top: int = 3, ilp_designs: int = 256, out: str | os.PathLike | None = None,
          progress: bool = True, executor=None, echo=print) -> list[PhazeRow]:
    """Run PHAZE's experiment; see the module docstring.  ``space``: ``"phaze"``, ``"phaze-area"``
    (PHAZE's area model), ``"phaze-no-onchip"`` (no global-buffer bandwidth bound) or ``"default"``.  ``ilp_designs``: the ILP ranking's cap per run (:func:`cosearch.search.cosearch`).
    ``out``: a JSON file the rows are saved to after every run (and read
    back from, to skip finished rows).  ``echo``: called with each finished row's line."""
    from .hardware import SearchSpace
    from .models import preset
    from .search import cosearch
    if space not in SPACES:
        raise ValueError(f"space must be one of {', '.join(SPACES)}, got {space!r}")
    if out is not None:
        out = file_path(out, "out")          # before any work: a run's rows are saved as it ends
    from ._validate import positive_float, positive_int
    models = _table_models(models, echo)
    # one HBM size may be given bare too
    hbm_gibs = [hbm_gibs] if isinstance(hbm_gibs, (int, float, str)) else list(hbm_gibs)
    if not models or not hbm_gibs:
        raise ValueError("PHAZE's table needs at least one model and one HBM scenario")
    hbm_gibs = [positive_float("hbm_gibs", g) for g in hbm_gibs]
    chips, global_batch = positive_int("chips", chips), positive_int("global_batch", global_batch)

    def make_space(gib):
        if space == "phaze-no-onchip":
            return SearchSpace.phaze(gib, onchip_bandwidth=False)
        if space == "phaze-area":
            return SearchSpace.phaze(gib, area_model="phaze")
        return getattr(SearchSpace, space)(gib)
    ms = [preset(m) for m in models]
    sp0 = make_space(float(hbm_gibs[0])) if hbm_gibs else None    # the on-chip rule keys the rows
    settings = {"chips": int(chips), "global_batch": int(global_batch), "space": space,
                "refine_top": int(refine_top), "ilp_designs": int(ilp_designs),
                "glb_words_per_cycle": float(sp0.glb_words_per_cycle) if sp0 else 0.0,
                "glb_rule": sp0.glb_rule if sp0 else "fixed"}
    kept: list[PhazeRow] = []                  # every row of the file, other settings' included
    if out is not None and os.path.isfile(out):
        kept = load(out)
    done = {(r.model, float(r.hbm_gib)): r for r in kept if r.settings == settings}
    rows: list[PhazeRow] = []
    for m in ms:
        for gib in hbm_gibs:
            if (m.name, float(gib)) in done:
                rows.append(done[m.name, float(gib)])
                continue
            sp = make_space(gib)
            t0 = time.perf_counter()
            res = cosearch(m, sp, chips, global_batch, executor, refine_top=refine_top, ilp_designs=ilp_designs,
                           baselines=True,
                           progress=progress)
            dt = time.perf_counter() - t0
            if res.interrupted:
                raise KeyboardInterrupt
            if not res.feasible:
                reason = next((r.reason for r in res.rows if r.reason), "no design has a feasible plan")
                row = PhazeRow(m.name, float(gib), res.total_designs, len(res.rows), "-", 0.0, "-", 0.0, 0.0,
                               "-", 0.0, 0.0, 0.0, dt, reason, settings)
            else:
                b = res.best
                base = {k: v.get("tokens_per_s", 0.0) for k, v in res.baselines.items()}
                g = [b.tokens_per_s / base[k] if base.get(k) else 0.0 for k in ("TPUv4", "Spotlight", "Megatron-fixed")]
                row = PhazeRow(m.name, float(gib), res.total_designs, len(res.rows), _describe(b.design),
                               b.area_mm2, b.plan.spec.describe(), b.tokens_per_s, b.plan.mfu, b.time_model,
                               g[0], g[1], g[2], dt,
                               "; ".join([f"{k}: {v.get('reason', '')}" for k, v in res.baselines.items()
                                          if not v.get("tokens_per_s")] + _ranking_note(res.meta)), settings)
            rows.append(row)
            kept.append(row)
            if out is not None:
                dump_json(stamped("phaze-reproduction", {"experiment": "phaze", "rows": [asdict(r) for r in kept]}),
                          out)
            if echo is not None:
                echo(row.line())
    return rows


def _ranking_note(meta: dict) -> list[str]:
    ir = meta.get("ilp_ranking")
    if ir and not ir["proven"]:
        return [f"ILP top not proven ({ir['scheduled']} ILP plans, {ir['open']} designs open"
                + (f", {ir['time_limited_layers']} layers time-limited" if ir.get("time_limited_layers") else "")
                + ")"]
    return []


def table(rows: list[PhazeRow]) -> str:
    return "\n".join([HEADER] + [r.line() for r in rows])


def load(path: str | os.PathLike) -> list[PhazeRow]:
    from ._json import check_schema
    d: Any = load_json(path)
    check_schema(d, "phaze-reproduction", str(path))
    try:
        return [PhazeRow(**r) for r in d["rows"]]
    except (KeyError, TypeError) as exc:
        raise ValueError(f"{path}: not a PHAZE reproduction file ({exc})") from None


# ---------------------------------------------------------------------- frontier
#: The frontier table's models (issue #42): a dense model and two MoE models of today's training.
FRONTIER_MODELS = ("llama3-405b", "deepseek-v3", "qwen3-235b-a22b")
#: Its chip counts.
FRONTIER_CHIPS = (8192, 32768)
#: The fixed systems, by the chip token the validation rows' groups name.
FIXED_CHIP_TOKEN = {"dgx-h100": "H100", "dgx-b200": "B200", "dgx-b300": "B300", "gb200-nvl72": "GB200",
                    "gb300-nvl72": "GB300", "tpuv5p-pod": "TPU-v5p", "tpu7x-pod": "TPU7x"}


@dataclass(frozen=True)
class FrontierRow:
    """One (model, chips, objective): the best system, its plan and value, and its gain over each
    fixed system (the ratio of the objective; absent where the fixed system has no plan)."""

    model: str
    chips: int
    global_batch: int
    objective: str
    best_system: str
    plan: str
    value: float
    gains: dict[str, float]
    systems: int
    seconds: float
    report: str = ""

    def line(self) -> str:
        g = "  ".join(f"{k} {x:.2f}x" for k, x in self.gains.items())
        unit = {"tokens_per_s": "tok/s/chip", "tokens_per_joule": "tok/J", "tokens_per_usd": "tok/$"}[self.objective]
        val = self.value / self.chips if self.objective == "tokens_per_s" else self.value
        return (f"{self.model:<16} {self.chips:>6} {self.objective:<16} {val:>10.4g} {unit:<10} "
                f"{self.best_system}\n{'':<24}plan {self.plan}\n{'':<24}gain over {g}")


def frontier_systems() -> list:
    """The systems the frontier table searches: the fixed ones (:data:`cosearch.frontier.FIXED_SYSTEMS`)
    and designs around the GB200: NVLink domains of 8-144 GPUs x 50-200 GB/s of scale-out per GPU
    x its own HBM, 8 stacks of 12-high HBM3e, or 8 stacks of HBM4."""
    from . import frontier as fr
    base = fr.fixed_system("gb200-nvl72")
    return [fr.fixed_system(n) for n in fr.FIXED_SYSTEMS] + fr.system_space(
        base, scale_up=(8, 16, 36, 72, 144), scale_out_Bps=(50e9, 100e9, 200e9),
        hbm=(None, ("hbm3e-12h", 8), ("hbm4-12h", 8)))


#: The TPU7x (Ironwood) MaxText runs beside the validation files (a config-file CSV of
#: :mod:`cosearch.runs.check`; bench/validation/ironwood/IRONWOOD.md).
IRONWOOD_RUNS = os.path.join("ironwood", "runs.csv")


def fixed_system_errors(validation: str | os.PathLike | None) -> dict[str, dict[str, Any]]:
    """Per fixed system, the model's error on the published runs of its chip (validation-schema
    files ``modern_runs.jsonl``, every row, and ``moe_runs.jsonl``, each plan's newest release,
    and the TPU7x MaxText runs of :data:`IRONWOOD_RUNS`, every row (each one XLA program: GPU
    time), in the folder ``validation``): ``n``, ``mae``, ``mean_signed``, and the same over the runs
    whose step is the GPU time cosearch prices (``gpu_time``, None when there are none): every
    dense run, and the MoE runs whose whole iteration is one CUDA graph or one XLA program — an
    MoE run launched from the host also waits on the host's launches and its dispatcher's token
    counts, which cosearch does not price (:func:`cosearch.runs.rows.graph_capture_class`).
    Empty when the folder or its files are missing."""
    from .runs.check import check_runs
    if validation is None or not os.path.isdir(validation):
        return {}
    errs: dict[str, list[tuple[float, bool]]] = {k: [] for k in FIXED_CHIP_TOKEN}
    for name, releases in (("modern_runs.jsonl", "all"), ("moe_runs.jsonl", "newest"), (IRONWOOD_RUNS, "all")):
        path = os.path.join(validation, name)
        if not os.path.isfile(path):
            continue
        for r in check_runs(path, releases=releases).runs:
            parts = r.group.split()
            chip = parts[1] if len(parts) > 1 else ""
            # a dense run's step is GPU time; an MoE run's where the host launches nothing
            gpu_time = r.capture in _GPU_TIME_CAPTURES if name == "moe_runs.jsonl" else True
            for k, tok in FIXED_CHIP_TOKEN.items():
                if chip == tok or chip.startswith(tok + "-"):
                    errs[k].append((r.error, gpu_time))
    out: dict[str, dict[str, Any]] = {}
    for k, e in errs.items():
        if e:
            out[k] = {**_error_stats([x for x, _ in e]),
                      "gpu_time": _error_stats([x for x, g in e if g]) if any(g for _, g in e) else None}
    return out


#: What a run's graphs capture (:func:`cosearch.runs.rows.graph_capture_class`) when its step is
#: GPU time alone: the host launches nothing within the iteration.
_GPU_TIME_CAPTURES = ("whole iteration", "XLA (one compiled step)")


def _error_stats(e: list[float]) -> dict[str, float]:
    return {"n": len(e), "mae": sum(abs(x) for x in e) / len(e), "mean_signed": sum(e) / len(e)}


def frontier(models=FRONTIER_MODELS, chip_counts=FRONTIER_CHIPS, *, batch_per_chip: float = 0.5,
             objectives=("tokens_per_s", "tokens_per_joule", "tokens_per_usd"), systems=None, cost=None,
             out: str | os.PathLike | None = None, echo=print, progress: bool = False,
             plot: str | os.PathLike | None = None, **budgets) -> list[FrontierRow]:
    """The frontier table (issue #42): for each model and chip count, every system of ``systems``
    (default :func:`frontier_systems`) with its best FP8 (or bf16) plan
    (:func:`cosearch.frontier.codesign`; its default plan space), the best system per objective
    and its gains over the fixed ones and over the best chip-only and network-only designs around the
    GB200 NVL72 (:func:`cosearch.frontier.split_baselines`), with a design report of each winner
    against the best fixed system (:func:`cosearch.frontier.design_report`).  Global batch: ``batch_per_chip`` sequences per chip (0.5:
    4,096 sequences on 8,192 chips, Llama 3 405B's 16M tokens at 4k tokens a sequence).
    ``budgets``: :func:`cosearch.frontier.codesign`'s.  ``out``: the rows as JSON after every
    run.  ``plot``: a file prefix; each run's throughput-against-energy plot goes to
    ``{plot}-{model}-{chips}.png`` (:meth:`cosearch.frontier.CodesignResults.plot`)."""
    from . import frontier as fr
    if out is not None:
        out = file_path(out, "out")          # before any work: the rows are saved after every run
    if plot is not None:
        # a prefix: its files ({plot}-{model}-{chips}.png) land beside it, so its folder must take them
        if not isinstance(plot, (str, os.PathLike)) or not os.fspath(plot):
            raise ValueError(f"plot must be a file prefix (a str or os.PathLike), got {plot!r}")
        file_path(f"{os.fspath(plot)}-{{model}}.png", "plot")
    from ._validate import choice, int_list, positive_float
    models = _table_models(models, echo)
    # one chip count or objective may be given bare too
    empty = hasattr(chip_counts, "__len__") and len(chip_counts) == 0
    chip_counts = [] if empty else list(int_list("chip_counts", chip_counts))
    objectives = (objectives,) if isinstance(objectives, str) else tuple(objectives)
    if not models or not chip_counts:
        raise ValueError("the frontier table needs at least one model and one chip count")
    for obj in objectives:
        choice("objective", obj, fr.OBJECTIVES)
    if not objectives:
        raise ValueError("the frontier table needs at least one objective")
    positive_float("batch_per_chip", batch_per_chip)
    systems = list(systems) if systems is not None else frontier_systems()
    rows: list[FrontierRow] = []
    for m in models:
        for chips in chip_counts:
            gb = max(1, int(round(batch_per_chip * int(chips))))
            t0 = time.process_time()
            res = fr.codesign(m, systems, int(chips), gb, cost=cost, progress=progress, **budgets)
            dt = time.process_time() - t0
            if res.interrupted:
                raise KeyboardInterrupt
            if plot is not None:
                res.plot(f"{os.fspath(plot)}-{res.model}-{int(chips)}.png", overwrite=True)
            base = next((x for x in systems if x.name == "gb200-nvl72"), None)
            if echo is not None and all(res.best(obj) is None for obj in objectives):
                # nothing to rank: say so, with the reasons, rather than print no row
                reasons = sorted({r.reason for r in res.rows if r.plan is None and r.reason})
                shown = "; ".join(reasons[:3]) + (f"; and {len(reasons) - 3} more reasons" if len(reasons) > 3 else "")
                echo(f"{res.model} on {int(chips)} chips: no system of the {len(systems)} has a plan that runs"
                     + (f" ({shown})" if reasons else ""))
            for obj in objectives:
                b = res.best(obj)
                if b is None:
                    continue
                gains = res.gains(obj)
                if base is not None:
                    # the co-search's gain over searching the chip alone and the network alone
                    for k, r in fr.split_baselines(res, base, obj).items():
                        if r is not None and r.objective(obj) > 0:
                            gains[k] = b.objective(obj) / r.objective(obj)
                fixed = [r for r in res.ranked(obj) if r.system.fixed]
                report = fr.design_report(res, b, fixed[0]) if fixed and not b.system.fixed else ""
                row = FrontierRow(res.model, int(chips), gb, obj, b.system.name, b.plan.spec.describe(),
                                  b.objective(obj), gains, len(systems), dt, report)
                rows.append(row)
                if echo is not None:
                    echo(row.line())
                    if row.report and obj == "tokens_per_s":
                        echo(row.report)
            if out is not None:
                dump_json(stamped("frontier-reproduction", {"experiment": "frontier",
                                                            "rows": [asdict(r) for r in rows]}), out)
    return rows
