"""Check the performance model on measured runs: predicted against measured throughput, per run
and per group (``cosearch runs check MEASURED``).

Two input formats:

* cosearch's validation schema, one JSON object per line (``.jsonl``), read by
  :func:`cosearch.runs.rows.read_row` (the bench's own files are in this format, dense and MoE);
  with ``releases="newest"`` only the newest software release's row of each plan is checked;
* a minimal CSV (``.csv``) with one run per row.  Required columns: ``model`` (a preset name or
  the path of a Hugging Face ``config.json``), ``cluster`` (a cluster preset: ``dgx-a100``,
  ``dgx-h100``, ``dgx-h200``, ``dgx-b200``, ``gb200-nvl72``, ``tpuv4-pod``, ``tpuv5e-pod``,
  ``tpuv5p-pod``), ``chips``, ``tp``, ``pp``, ``mb`` (microbatch), ``batch`` (global batch in
  sequences), ``measured_tok_s_per_chip``.  Optional: ``id``, ``group``, ``chip`` (default: the
  cluster's), ``seq_len``, ``cp``, ``ep``, ``virtual``, ``recompute`` (none), ``precision``
  (bf16), ``scaling_recipe`` (the engine's default; ``tensorwise`` for FP8 current scaling,
  :attr:`cosearch.plan.PlanSpec.scaling_recipe`), ``fp8_attention`` (0/1, default 0: the fused
  attention in FP8 too, ``--fp8-dot-product-attention``, :attr:`cosearch.plan.PlanSpec.fp8_attention`),
  ``sp`` (0/1), ``zero`` (0), ``zero_group``, ``flash`` (1), ``engine``
  (megatron-core), ``cuda_graphs`` (what the run's CUDA graphs capture: ``full_iteration``,
  ``transformer_engine`` / ``local`` / ``per_module``, or ``none``; :data:`CSV_CUDA_GRAPHS`),
  ``op_fuser`` (0/1, default 0: the experts through Transformer Engine's op fuser,
  ``--use-transformer-engine-op-fuser``, so a model's expert bias and clamped activation run fused,
  :func:`cosearch.engine.with_op_fuser`; without it Megatron-Core runs them as eager passes);
  for MoE runs ``etp`` (``tp``, the default, or ``1``: expert tensor parallelism), ``moe_dispatcher``
  (``alltoall``, ``flex`` or ``gather-tokens``; default the engine's,
  :attr:`cosearch.engine.Engine.moe_dispatcher`), ``moe_flex_backend`` (``hybridep`` or
  ``deepep``, with ``flex``) and ``moe_a2a_overlap`` (0/1: ``--overlap-moe-expert-parallel-comm``);
  ``cross_entropy`` (``off``, ``native`` or ``te``: Megatron-Core's loss, ``--cross-entropy-loss-fusion``
  with ``--cross-entropy-fusion-impl``, :func:`cosearch.engine.with_cross_entropy_fusion`; default the
  engine's).  Unknown columns are refused by name.
* a CSV of runs given by their own config files (a ``config`` column: :data:`CONFIG_CSV_REQUIRED`):
  each run's framework file (a Megatron line, a NeMo or Megatron-Bridge YAML, a torchtitan TOML,
  a MaxText YAML or ``key=value`` words, an llm-foundry YAML; a path relative to the CSV) read by
  :func:`cosearch.runs.read_config` (a MaxText config on the chip's JAX devices,
  :attr:`cosearch.hardware.Accelerator.devices_per_chip`), on ``chips`` chips of ``cluster``;
  optional :data:`CONFIG_CSV_OPTIONAL`: ``id``, ``group``, ``chip`` (default: the cluster's),
  ``global_batch`` (checked against the file's), ``model`` (a preset, where the file leaves the
  model out), ``overrides`` (``key=value`` words applied after the file), and ``source`` /
  ``notes`` / ``measured_step_s`` / ``measured_tflops_per_chip`` (provenance, not read).

Rows cosearch cannot describe are listed with their reason, never dropped silently.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["CheckedRun", "CheckResult", "check_runs", "read_measured", "CSV_REQUIRED", "CSV_OPTIONAL",
           "CONFIG_CSV_REQUIRED", "CONFIG_CSV_OPTIONAL"]

CSV_REQUIRED = ("model", "cluster", "chips", "tp", "pp", "mb", "batch", "measured_tok_s_per_chip")
CSV_OPTIONAL = ("id", "group", "chip", "seq_len", "cp", "ep", "virtual", "recompute", "precision", "scaling_recipe",
                "fp8_attention", "sp", "zero", "zero_group", "flash", "engine", "cuda_graphs", "op_fuser", "etp", "moe_dispatcher",
                "moe_flex_backend", "moe_a2a_overlap", "cross_entropy")
#: The columns of a CSV of runs given by their config files (module docstring).
CONFIG_CSV_REQUIRED = ("config", "cluster", "chips", "measured_tok_s_per_chip")
CONFIG_CSV_OPTIONAL = ("id", "group", "chip", "global_batch", "model", "overrides", "source", "notes",
                       "measured_step_s", "measured_tflops_per_chip")
#: A CSV row's ``cuda_graphs`` (Megatron's ``--cuda-graph-impl`` words and ``per_module``) as the
#: capture classes of :func:`cosearch.runs.rows.graph_capture_class`.
CSV_CUDA_GRAPHS = {"full_iteration": "whole iteration", "transformer_engine": "per module",
                   "local": "per module", "per_module": "per module", "none": "none"}
#: The band the scatter plot shades and the table counts runs within.
BAND = 0.10


@dataclass(frozen=True)
class CheckedRun:
    """One measured run: its prediction and signed error (predicted / measured - 1).
    ``capture``: what an MoE run's CUDA graphs capture (:func:`cosearch.runs.rows.graph_capture_class`:
    whole iteration, per module, none, or XLA's one compiled step), "" for a dense run or a file
    that does not say; cosearch prices GPU time, so an MoE run launched from the host also waits
    on the host, which is not priced."""

    id: str
    group: str
    plan: str
    predicted_tok_s_per_chip: float
    measured_tok_s_per_chip: float
    capture: str = ""

    @property
    def error(self) -> float:
        return self.predicted_tok_s_per_chip / self.measured_tok_s_per_chip - 1.0


@dataclass(frozen=True)
class CheckResult:
    """Every run checked, and every one refused with its reason."""

    runs: tuple[CheckedRun, ...]
    refused: tuple[tuple[str, str], ...] = field(default_factory=tuple)

    def groups(self, by: str = "group") -> dict[str, dict[str, float]]:
        """Per group: ``n``, ``mae`` (mean absolute error), ``mean_signed`` and ``within_band``
        (the fraction within ±10 %); the group ``all`` covers every run.  ``by="capture"``: per
        :attr:`CheckedRun.capture` instead, over the runs whose capture is known (a ``.jsonl``
        file's MoE rows, a CSV's ``cuda_graphs`` column)."""
        if by not in ("group", "capture"):
            raise ValueError(f"by must be 'group' or 'capture', got {by!r}")
        runs = [r for r in self.runs if by == "group" or r.capture]
        out: dict[str, dict[str, float]] = {}
        names = sorted({getattr(r, by) for r in runs})
        for g in names + ["all"]:
            e = np.array([r.error for r in runs if g == "all" or getattr(r, by) == g])
            if e.size:
                out[g] = {"n": int(e.size), "mae": float(np.abs(e).mean()), "mean_signed": float(e.mean()),
                          "within_band": float((np.abs(e) <= BAND).mean())}
        return out

    def table(self) -> str:
        """Per run, then per group, as text (names in full: groups differing only at their end,
        such as the number format, stay apart)."""
        wid = max([3] + [len(r.id) for r in self.runs])
        wg = max([5] + [len(r.group) for r in self.runs])
        lines = [f"{'run':<{wid}} {'group':<{wg}} {'predicted':>11} {'measured':>11} {'error':>8}  plan"]
        for r in self.runs:
            lines.append(f"{r.id:<{wid}} {r.group:<{wg}} {r.predicted_tok_s_per_chip:>11,.0f} "
                         f"{r.measured_tok_s_per_chip:>11,.0f} {r.error:>+8.1%}  {r.plan}")
        lines.append("")
        lines += _stats_lines("group", self.groups(), wg)
        captures = self.groups("capture")
        if captures:
            lines.append("")
            lines.append("MoE runs by what their CUDA graphs capture (cosearch prices GPU time: a run launched from "
                         "the host also waits on it):")
            lines += _stats_lines("capture", captures, max(len(c) for c in captures))
        if self.refused:
            lines.append("")
            lines.append(f"{len(self.refused)} run(s) not checked:")
            lines += [f"  {rid}: {why}" for rid, why in self.refused]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {"runs": [dict(id=r.id, group=r.group, plan=r.plan, predicted_tok_s_per_chip=r.predicted_tok_s_per_chip,
                              measured_tok_s_per_chip=r.measured_tok_s_per_chip, error=r.error, capture=r.capture)
                         for r in self.runs],
                "groups": self.groups(), "captures": self.groups("capture"),
                "refused": [{"id": i, "reason": w} for i, w in self.refused]}

    def to_json(self, path: str | os.PathLike, overwrite: bool = False) -> None:
        """Write :meth:`to_dict`, stamped ``cosearch.checked-runs`` with the version, as every
        cosearch file."""
        from .._json import save_new_json, stamped
        save_new_json(stamped("checked-runs", self.to_dict()), path, overwrite)

    def plot(self, path: str | os.PathLike | None = None, overwrite: bool = False):
        """Predicted against measured tokens/s per chip, one colour per group, with the ±10 %
        band around the diagonal.  Needs matplotlib."""
        from .._plotting import finish, pyplot
        plt = pyplot("CheckResult.plot", path, overwrite)
        fig, ax = plt.subplots(figsize=(6.4, 5.6))
        if self.runs:
            vals = [v for r in self.runs for v in (r.predicted_tok_s_per_chip, r.measured_tok_s_per_chip)]
            lo, hi = min(vals) * 0.8, max(vals) * 1.25
            xs = np.geomspace(lo, hi, 50)
            ax.fill_between(xs, xs * (1 - BAND), xs * (1 + BAND), color="0.9", label="±10 %")
            ax.plot(xs, xs, "k-", lw=0.8)
            stats = self.groups()
            for g in sorted({r.group for r in self.runs}):
                rs = [r for r in self.runs if r.group == g]
                ax.scatter([r.measured_tok_s_per_chip for r in rs], [r.predicted_tok_s_per_chip for r in rs], s=14,
                           label=f"{g} (n={len(rs)}, MAE {stats[g]['mae']:.1%})")
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlim(lo, hi)
            ax.set_ylim(lo, hi)
        ax.set_xlabel("measured tokens/s per chip")
        ax.set_ylabel("predicted tokens/s per chip")
        ax.set_title(f"cosearch against {len(self.runs)} measured runs"
                     + (f" ({len(self.refused)} not checked)" if self.refused else ""), fontsize=9)
        ax.legend(fontsize=7)
        return finish(fig, path)


def _csv_rows(path: Path) -> list[dict[str, str]]:
    """A measured-runs CSV's rows: the plan columns (:data:`CSV_REQUIRED`), or with a ``config``
    column the config-file format (:data:`CONFIG_CSV_REQUIRED`)."""
    import csv
    import io

    from .._json import read_text_file
    text = read_text_file(path, "measured-runs CSV", 64 << 20)
    reader = csv.DictReader(io.StringIO(text))
    cols = [c.strip() for c in (reader.fieldnames or [])]
    if not cols:
        raise ValueError(f"{path}: an empty CSV; the header needs {', '.join(CSV_REQUIRED)} (or "
                         f"{', '.join(CONFIG_CSV_REQUIRED)} for runs given by their config files)")
    required, optional = ((CONFIG_CSV_REQUIRED, CONFIG_CSV_OPTIONAL) if "config" in cols
                          else (CSV_REQUIRED, CSV_OPTIONAL))
    missing = [c for c in required if c not in cols]
    unknown = [c for c in cols if c not in required + optional]
    if missing or unknown:
        raise ValueError(f"{path}: " + "; ".join(x for x in (
            f"missing columns {', '.join(missing)}" if missing else "",
            f"unknown columns {', '.join(unknown)} (known: {', '.join(required + optional)})" if unknown else "")
            if x))
    rows = []
    for i, r in enumerate(reader, start=2):
        if None in r or any(v is None for v in r.values()):
            raise ValueError(f"{path}: line {i} has {'more' if None in r else 'fewer'} fields than the header")
        rows.append({k.strip(): (v or "").strip() for k, v in r.items()})
    return rows


def _csv_config(r: dict[str, str], line: int, path: Path):
    from .. import models
    from ..engine import (
        MEGATRON_CROSS_ENTROPY,
        with_cross_entropy_fusion,
        with_moe_dispatch,
        with_op_fuser,
    )
    from ..engine import preset as engine_preset
    from .config import RunConfig

    def num(key: str, default: str | None = None, kind=int):
        return _csv_number(r, key, default, kind)

    chips = num("chips")
    mname = r["model"]
    if Path(mname).suffix == ".json":
        from .hf import read_hf_config
        p = Path(mname) if Path(mname).is_absolute() else path.parent / mname
        model = read_hf_config(p, int(r["seq_len"]) if r.get("seq_len") else None).model
    else:
        model = models.preset(mname)
    if r.get("seq_len"):
        model = model.with_(seq_len=num("seq_len"))
    cluster, chip = _cluster_of(r, chips)
    bool_of = {"": None, "0": False, "1": True, "false": False, "true": True}
    flags = {}
    for key in ("sp", "flash", "op_fuser", "moe_a2a_overlap", "fp8_attention"):
        v = r.get(key, "").lower()
        if v not in bool_of:
            raise ValueError(f"{key} {r[key]!r} is not 0/1")
        flags[key] = bool_of[v]
    plan = dict(tp=num("tp"), pp=num("pp"), microbatch=num("mb"), context_parallel=num("cp", "1"),
                expert_parallel=num("ep", "1"), virtual_stages=num("virtual", "1"),
                recompute=r.get("recompute") or "none", precision=r.get("precision") or "bf16",
                sequence_parallel=bool(flags["sp"]), zero=num("zero", "0"),
                flash_attention=True if flags["flash"] is None else flags["flash"])
    if r.get("zero_group"):
        plan["zero_group"] = num("zero_group")
    if r.get("scaling_recipe"):
        plan["scaling_recipe"] = r["scaling_recipe"]
    if flags["fp8_attention"]:
        plan["fp8_attention"] = True
    etp = (r.get("etp") or "tp").lower()
    if etp not in ("tp", "1"):
        raise ValueError(f"etp {r['etp']!r}: give tp (expert tensor parallelism = tp) or 1")
    if etp == "1":
        plan["expert_tensor_parallel"] = 1
    graphs = (r.get("cuda_graphs") or "").strip()
    if graphs and graphs not in CSV_CUDA_GRAPHS:
        raise ValueError(f"cuda_graphs {graphs!r}: give one of {', '.join(CSV_CUDA_GRAPHS)}")
    eng = engine_preset(r.get("engine") or "megatron-core")
    eng = with_op_fuser(eng) if flags["op_fuser"] else eng
    loss = (r.get("cross_entropy") or "").strip().lower()
    if loss:
        if loss not in MEGATRON_CROSS_ENTROPY:
            raise ValueError(f"cross_entropy {r['cross_entropy']!r}: give {', '.join(MEGATRON_CROSS_ENTROPY)} "
                             "(Megatron-Core's loss: unfused, fused native, Transformer Engine's)")
        eng = with_cross_entropy_fusion(eng, loss)
    dispatcher, backend = (r.get("moe_dispatcher") or "").strip(), (r.get("moe_flex_backend") or "").strip()
    if dispatcher or backend or flags["moe_a2a_overlap"]:
        if not model.moe:
            raise ValueError(f"moe_dispatcher / moe_flex_backend / moe_a2a_overlap: {model.name} has no experts")
        if backend and (dispatcher or eng.moe_dispatcher) != "flex":
            raise ValueError(f"moe_flex_backend {backend!r} names a backend of the flex dispatcher: give "
                             "moe_dispatcher flex")
        eng = with_moe_dispatch(eng, dispatcher or eng.moe_dispatcher, bool(flags["moe_a2a_overlap"]),
                                eng.moe_comm_sms, backend or None)
    return RunConfig(f"{path.name} line {line}", model=model, plan=plan, global_batch=num("batch"), num_chips=chips,
                     engine=eng, chip=chip, cluster=cluster,
                     measured_tok_s_per_chip=num("measured_tok_s_per_chip", kind=float))


def _stats_lines(title: str, stats: dict[str, dict[str, float]], width: int) -> list[str]:
    """A header and one line per key of :meth:`CheckResult.groups`' statistics."""
    lines = [f"{title:<{width}} {'runs':>5} {'MAE':>7} {'mean signed':>12} {'within 10%':>11}"]
    for g, st in stats.items():
        lines.append(f"{g:<{width}} {st['n']:>5} {st['mae']:>7.1%} {st['mean_signed']:>+12.1%} "
                     f"{st['within_band']:>11.0%}")
    return lines


def jsonl_rows(path: str | os.PathLike) -> list[dict]:
    """The rows of a validation-schema ``.jsonl`` file: one JSON object per non-blank line, each
    with an ``id`` (``line N`` where it has none); a line that is no JSON object is refused by
    its number."""
    from .._json import read_text_file
    text = read_text_file(path, "measured-runs", 256 << 20)
    rows = []
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}: line {n} is not JSON ({e})") from None
        if not isinstance(row, dict):
            raise ValueError(f"{path}: line {n} is not a JSON object")
        rows.append(dict(row, id=str(row.get("id") or f"line {n}")))
    return rows


def _typed_rows(rows: list[dict], source: str) -> tuple[list[dict], list[tuple[str, str]]]:
    """The rows whose fields are of the right kind (:func:`cosearch.runs.rows.check_row_types`),
    and ``(id, reason)`` of the others: a row of the wrong kind is refused by name before any rule
    (its group, its release, its capture) reads it (a number where the software's name goes
    stopped the whole check)."""
    from .rows import Refused, check_row_types
    typed, wrong = [], []
    for row in rows:
        try:
            check_row_types(row, source=source)
        except Refused as e:
            wrong.append((row["id"], str(e)))
            continue
        typed.append(row)
    return typed, wrong


def _config_csv_row(r: dict[str, str], line: int, path: Path):
    """A config-file CSV row as a :class:`~cosearch.runs.config.RunConfig` with its chip, cluster
    and measured throughput (module docstring)."""
    import shlex

    from .. import models
    from .._validate import positive_int
    from .config import RunConfig, merge
    from .files import read_config
    chips = positive_int("chips", _csv_number(r, "chips"))
    cluster, chip = _cluster_of(r, chips)
    cfg = Path(r["config"])
    cfg = cfg if cfg.is_absolute() else path.parent / cfg
    model = models.preset(r["model"]) if r.get("model") else None
    run = read_config(cfg, shlex.split(r.get("overrides") or ""), model=model,
                      devices_per_chip=chip.devices_per_chip)
    # RunConfig refuses a measured throughput that is not a positive finite number
    given = RunConfig(f"{path.name} line {line}", num_chips=chips, chip=chip, cluster=cluster,
                      measured_tok_s_per_chip=_csv_number(r, "measured_tok_s_per_chip", kind=float),
                      global_batch=(positive_int("global_batch", _csv_number(r, "global_batch"))
                                    if r.get("global_batch") else None))
    return merge([run, given])


def _cluster_of(r: dict[str, str], chips: int):
    """A CSV row's cluster (its ``cluster`` preset at ``chips`` chips: whole 8-GPU nodes of a DGX
    preset) and chip (its ``chip``, else the cluster's)."""
    from .. import cluster as cl
    from .. import hardware
    cname = r["cluster"].lower()
    if cname not in cl.PRESET_CHIPS:
        raise ValueError(f"cluster {r['cluster']!r} is not a preset ({', '.join(cl.PRESET_CHIPS)})")
    if cname.startswith("dgx"):
        if chips % 8:
            raise ValueError(f"{chips} chips are not whole 8-GPU nodes of {cname}")
        cluster = cl.preset(cname, chips // 8)
    else:
        cluster = cl.preset(cname, chips)
    return cluster, hardware.preset(r.get("chip") or cl.PRESET_CHIPS[cname])


def _csv_number(r: dict[str, str], key: str, default: str | None = None, kind=int):
    """A CSV cell as a whole number (``kind=int``) or a real one (``kind=float``), ``default``
    where empty, refused by name where neither."""
    v = r.get(key) or default
    if v is None or v == "":
        raise ValueError(f"{key} is empty")
    try:
        x = kind(float(v)) if kind is int else kind(v)
    except (ValueError, OverflowError):         # OverflowError: int('inf')
        raise ValueError(f"{key} {v!r} is not a {'whole ' if kind is int else ''}number") from None
    if kind is int and float(v) != x:
        raise ValueError(f"{key} {v!r} is not a whole number")
    return x


def read_measured(path: str | os.PathLike, releases: str = "all") -> list[tuple[str, str, Any]]:
    """``(id, group, RunConfig or the reason it was refused)`` for each run of a measured-runs
    file (``.jsonl`` in the validation schema, or the minimal ``.csv``).  ``releases``: ``all``
    rows, or only the ``newest`` release's measurement of each plan (validation schema:
    :func:`cosearch.runs.rows.newest_per_plan`).  A JSONL row's group is source x chip x number
    format (:func:`cosearch.runs.rows.group_of`)."""
    return [item[:3] for item in _measured(path, releases)]


def _measured(path: str | os.PathLike, releases: str) -> list[tuple[str, str, Any, str]]:
    """:func:`read_measured`'s items, each with what the run's CUDA graphs capture
    (:func:`_row_capture`, :func:`_csv_capture`), the file read once."""
    from .rows import group_of, newest_per_plan, read_row
    if releases not in ("all", "newest"):
        raise ValueError(f"releases must be 'all' or 'newest', got {releases!r}")
    from .._validate import input_path
    p = Path(input_path(path, "the measured-runs file"))
    out: list[tuple[str, str, Any, str]] = []
    if p.suffix.lower() == ".csv":
        for i, r in enumerate(_csv_rows(p), start=2):
            rid = r.get("id") or f"line {i}"
            try:
                rc = _config_csv_row(r, i, p) if "config" in r else _csv_config(r, i, p)
            except ValueError as e:
                rc = str(e)
            out.append((rid, r.get("group") or r.get("cluster", "?"), rc, _csv_capture(r)))
        return out
    if p.suffix.lower() not in (".jsonl", ".json"):
        raise ValueError(f"{p}: measured runs are a .jsonl (validation schema) or .csv file")
    rows, wrong = _typed_rows(jsonl_rows(p), str(p.name))
    out += [(rid, "?", why, "") for rid, why in wrong]
    # rows the schema marks incomplete (moe_runs.jsonl keeps them so nothing read is lost) are
    # listed, not checked, and never chosen as a plan's newest measurement
    incomplete = [r for r in rows if r.get("complete") is False]
    rows = [r for r in rows if r.get("complete") is not False]
    if releases == "newest":
        rows = newest_per_plan(rows)
    for row in incomplete:
        out.append((row["id"], "?", "the row is marked incomplete (its notes say what is missing)", ""))
    for row in rows:
        try:
            group = group_of(row)
        except (KeyError, TypeError):
            group = "?"
        try:
            rc: Any = read_row(row, source=str(p.name))
        except (ValueError, KeyError) as e:
            rc = str(e) if not isinstance(e, KeyError) else f"missing field {e}"
        out.append((row["id"], group, rc, _row_capture(row)))
    return out


def moe_captures(path: str | os.PathLike) -> dict[str, str]:
    """Per MoE run of a validation-schema ``.jsonl`` file (``num_experts`` above 1), what its
    CUDA graphs capture (:func:`cosearch.runs.rows.graph_capture_class`; a row naming a graph
    implementation Megatron does not have is left out: the checker refuses it); for a ``.csv``
    file, each row whose ``cuda_graphs`` column says (:data:`CSV_CUDA_GRAPHS`)."""
    if Path(path).suffix.lower() == ".csv":
        caps = {(r.get("id") or f"line {i}"): _csv_capture(r) for i, r in enumerate(_csv_rows(Path(path)), start=2)}
    elif Path(path).suffix.lower() in (".jsonl", ".json"):
        # rows of the wrong kind are left out: the checker refuses them by name
        caps = {row["id"]: _row_capture(row) for row in _typed_rows(jsonl_rows(path), str(path))[0]}
    else:
        return {}
    return {rid: c for rid, c in caps.items() if c}


def _row_capture(row: dict) -> str:
    """An MoE row's capture (:func:`cosearch.runs.rows.graph_capture_class`); "" for a dense row
    or one naming a graph implementation Megatron does not have (the checker refuses it)."""
    from .rows import Refused, graph_capture_class
    experts = row.get("num_experts")
    if isinstance(experts, bool) or not isinstance(experts, (int, float)) or experts <= 1:
        return ""
    try:
        return graph_capture_class(row)
    except Refused:
        return ""


def _csv_capture(r: dict) -> str:
    """A CSV row's capture from its ``cuda_graphs`` column; "" where it says none it knows."""
    return CSV_CUDA_GRAPHS.get((r.get("cuda_graphs") or "").strip(), "")


def check_runs(path: str | os.PathLike, progress: bool = False, releases: str = "all") -> CheckResult:
    """Predict every run of a measured-runs file and compare with what it measured
    (``releases``: see :func:`read_measured`)."""
    from tqdm.auto import tqdm

    from ..plan import evaluate
    items = _measured(path, releases)
    runs, refused = [], []
    for rid, group, rc, capture in tqdm(items, desc="runs", unit="run", disable=not progress, leave=False):
        if isinstance(rc, str):
            refused.append((rid, rc))
            continue
        try:
            d = rc.resolve()
            plan = evaluate(d.model, d.chip, d.cluster, d.spec, d.global_batch, engine=d.engine, mem=d.memory)
        except ValueError as e:
            refused.append((rid, str(e)))
            continue
        if not plan.feasible:
            refused.append((rid, f"infeasible as described: {plan.reason}"))
            continue
        if not d.measured_tok_s_per_chip:
            refused.append((rid, "no measured throughput"))
            continue
        runs.append(CheckedRun(rid, group, f"{d.spec.describe()} [{d.engine.name}]",
                               plan.tokens_per_s / d.num_chips, float(d.measured_tok_s_per_chip),
                               capture))
    return CheckResult(tuple(runs), tuple(refused))
