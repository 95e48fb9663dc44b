"""Paired multi-seed, multi-method FL experiments, with statistics.

:func:`run_experiment` runs every (method, seed) pair with the same data split, initial
weights, device noise and — since stragglers are picked from the full-model rounds 1–2 —
the same stragglers and keep fractions per seed; only the dropout method differs.  Runs go
to a process pool; each finished run is saved at once (atomically) when ``out`` is given, so
Ctrl-C keeps everything finished, and ``resume=`` continues an experiment file.

:meth:`Experiment.summary` reports per method: final central and federated accuracy (mean ±
95% t-interval), the paired difference to a reference method (mean ± 95% CI and a two-sided
paired t-test p-value), the simulated time to reach a target accuracy, the accuracy at equal
simulated time (the shortest run's total), and the mean round time of the dropout rounds
against no dropout.  :meth:`Experiment.plot` draws accuracy against round and against
simulated time with 95% bands, one seed's per-client round times, and the keep fraction per
straggler per round.
"""

from __future__ import annotations

import json
import logging
import math
import os
import signal
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field

import numpy as np

from .._interrupt import stop_pool, worker_deaths
from .._json import load_json, stamped
from .._validate import nonneg_int, positive_int
from .masks import METHODS
from .simulation import FLResult, simulate

__all__ = ["Experiment", "MethodStats", "run_experiment", "mean_ci", "paired_test", "holm", "effect_size"]


def mean_ci(x) -> tuple[float, float]:
    """(mean, half-width of the 95% Student-t interval); half-width NaN for fewer than 2 values."""
    from scipy import stats
    x = np.asarray([v for v in x if v is not None and math.isfinite(v)], dtype=float)
    if len(x) == 0:
        return float("nan"), float("nan")
    if len(x) < 2:
        return float(x.mean()), float("nan")
    return float(x.mean()), float(stats.t.ppf(0.975, len(x) - 1) * x.std(ddof=1) / math.sqrt(len(x)))


def paired_test(a, b) -> tuple[float, float, float]:
    """Paired difference ``a - b``: (mean, 95% CI half-width, two-sided t-test p-value)."""
    from scipy import stats
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    ok = np.isfinite(a) & np.isfinite(b)
    d = a[ok] - b[ok]
    m, h = mean_ci(d)
    if len(d) < 2:
        return m, h, float("nan")
    if np.allclose(d, d[0], rtol=1e-9, atol=1e-12):
        # no spread: no difference at all (p 1), or a t-test without variance (undefined)
        return m, 0.0, 1.0 if abs(d[0]) <= 1e-12 else float("nan")
    return m, h, float(stats.ttest_rel(a[ok], b[ok]).pvalue)


def holm(pvalues) -> list[float]:
    """Holm-Bonferroni adjusted p-values (same order; NaN stays NaN and is not counted): the
    i-th smallest of m is multiplied by m - i + 1, then made non-decreasing, capped at 1."""
    p = [float(x) for x in pvalues]
    idx = sorted((i for i, x in enumerate(p) if math.isfinite(x)), key=lambda i: p[i])
    m = len(idx)
    out = [float("nan")] * len(p)
    running = 0.0
    for rank, i in enumerate(idx):
        running = max(running, min(1.0, (m - rank) * p[i]))
        out[i] = running
    return out


def effect_size(a, b) -> float:
    """Cohen's d_z of the paired differences ``a - b``: their mean over their standard deviation
    (NaN with fewer than two pairs or no spread)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    ok = np.isfinite(a) & np.isfinite(b)
    d = a[ok] - b[ok]
    if len(d) < 2 or d.std(ddof=1) == 0:
        return float("nan")
    return float(d.mean() / d.std(ddof=1))


@dataclass
class MethodStats:
    """One method's summary over the seeds (see :meth:`Experiment.summary`)."""

    method: str
    runs: int
    accuracy: tuple[float, float]
    fed_accuracy: tuple[float, float]
    diff_vs_reference: tuple[float, float, float]
    time_to_target_s: tuple[float, float]
    reached_target: int
    accuracy_at_equal_time: tuple[float, float]
    diff_at_equal_time: tuple[float, float, float]
    round_time_s: tuple[float, float]
    round_time_reduction: tuple[float, float]
    #: the accuracy difference's p-value Holm-corrected over the methods compared with the
    #: reference, and its effect size (Cohen's d_z)
    diff_p_holm: float = float("nan")
    effect_size: float = float("nan")
    #: time to the target accuracy minus FedAvg's ("none"), paired over seeds where both reached
    #: it: (mean s, 95% CI half-width, p)
    time_vs_fedavg: tuple[float, float, float] = (float("nan"),) * 3


def _accuracy_at(res: FLResult, t: float) -> float:
    acc = [r.accuracy for r in res.rounds if r.sim_time_s <= t + 1e-12]
    return acc[-1] if acc else float("nan")


def _time_to(res: FLResult, target: float) -> float:
    for r in res.rounds:
        if r.accuracy >= target:
            return r.sim_time_s
    return float("nan")


def _dropout_round_time(res: FLResult) -> float:
    rounds = [r.round_time_s for r in res.rounds if r.round >= 3] or [r.round_time_s for r in res.rounds]
    return float(np.mean(rounds))


@dataclass
class Experiment:
    """Runs of ``methods`` x ``seeds`` (``runs[method][seed]``) and the settings they share."""

    dataset: str
    methods: list[str]
    seeds: list[int]
    config: dict
    runs: dict[str, dict[int, FLResult]] = field(default_factory=dict)
    interrupted: bool = False
    stopped_by: BaseException | None = field(default=None, repr=False, compare=False)

    def complete(self) -> bool:
        return all(s in self.runs.get(m, {}) for m in self.methods for s in self.seeds)

    # ------------------------------------------------------------------ persistence
    def to_dict(self) -> dict:
        return stamped("fl-experiment", {
            "kind": "cosearch.fl.experiment", "dataset": self.dataset, "methods": self.methods,
            "seeds": self.seeds, "config": self.config, "interrupted": bool(self.interrupted),
            "runs": {m: {str(s): r.to_dict() for s, r in rs.items()} for m, rs in self.runs.items()}})

    def to_json(self, path=None, overwrite: bool = False) -> str:
        """The JSON text; also written to ``path`` — which must not exist unless ``overwrite``."""
        from .._json import save_new_json
        return save_new_json(self.to_dict(), path, overwrite)

    @classmethod
    def from_json(cls, source) -> Experiment:
        from .._json import check_schema
        d = load_json(source)
        check_schema(d, "fl-experiment", str(source) if len(str(source)) < 200 else "FL experiment")
        if d.get("kind") != "cosearch.fl.experiment":
            raise ValueError(f"{source}: not a cosearch FL experiment file")
        try:
            runs = {m: {int(s): FLResult.from_dict(r) for s, r in rs.items()} for m, rs in d["runs"].items()}
            empty = [f"{m} seed {s}" for m, rs in runs.items() for s, r in rs.items() if not r.rounds]
            if empty:        # an experiment keeps finished runs only: each has its rounds
                raise ValueError(f"{source}: run(s) without a round: {', '.join(empty)}")
            interrupted = d.get("interrupted", False)
            if not isinstance(interrupted, bool):
                raise ValueError(f"'interrupted' must be true or false, got {interrupted!r}")
            return cls(str(d["dataset"]), [str(m) for m in d["methods"]], [int(s) for s in d["seeds"]],
                       dict(d["config"]), runs, interrupted)
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"{source}: malformed experiment file ({exc!r})") from None

    # ------------------------------------------------------------------ statistics
    def default_target(self) -> float:
        """95% of the lowest mean final accuracy over the methods (every method can reach it)."""
        finals = [np.mean([r.rounds[-1].accuracy for r in rs.values()]) for rs in self.runs.values() if rs]
        return 0.95 * float(min(finals)) if finals else float("nan")

    def summary(self, target_accuracy: float | None = None, reference: str | None = None) -> list[MethodStats]:
        """Per-method statistics over the seeds that every method finished (``target_accuracy``:
        a fraction in (0, 1]; None: :meth:`default_target`)."""
        if target_accuracy is not None:
            from .._validate import fraction
            fraction("target accuracy", target_accuracy)
        methods = [m for m in self.methods if self.runs.get(m)]
        if not methods:
            return []
        seeds = [s for s in self.seeds if all(s in self.runs.get(m, {}) for m in methods)]
        reference = reference or ("invariant" if "invariant" in methods else methods[0])
        target = self.default_target() if target_accuracy is None else float(target_accuracy)
        t_equal = min(self.runs[m][s].rounds[-1].sim_time_s for m in methods for s in seeds) if seeds else 0.0
        ref = {s: self.runs[reference][s] for s in seeds} if reference in methods else {}
        base = {s: self.runs["none"][s] for s in seeds} if "none" in methods else {}
        out = []
        for m in methods:
            rs = [self.runs[m][s] for s in seeds]
            acc = [r.rounds[-1].accuracy for r in rs]
            at_t = [_accuracy_at(r, t_equal) for r in rs]
            ttt = [_time_to(r, target) for r in rs]
            rt = [_dropout_round_time(r) for r in rs]
            red = [1.0 - rt[i] / _dropout_round_time(base[s]) for i, s in enumerate(seeds)] if base else []
            ref_acc = [ref[s].rounds[-1].accuracy for s in seeds] if ref else []
            out.append(MethodStats(
                m, len(rs), mean_ci(acc), mean_ci([r.rounds[-1].fed_accuracy for r in rs]),
                paired_test(acc, ref_acc) if ref else (np.nan,) * 3,
                mean_ci(ttt), int(np.isfinite(ttt).sum()), mean_ci(at_t),
                paired_test(at_t, [_accuracy_at(ref[s], t_equal) for s in seeds]) if ref else (np.nan,) * 3,
                mean_ci(rt), mean_ci(red),
                effect_size=effect_size(acc, ref_acc) if ref and m != reference else float("nan"),
                time_vs_fedavg=(paired_test(ttt, [_time_to(base[s], target) for s in seeds])
                                if base and m != "none" else (np.nan,) * 3)))
        adjusted = holm([st.diff_vs_reference[2] if st.method != reference else float("nan") for st in out])
        for st, p in zip(out, adjusted):
            st.diff_p_holm = p
        return out

    def table(self, target_accuracy: float | None = None, reference: str | None = None) -> str:
        stats = self.summary(target_accuracy, reference)
        if not stats:
            return "no finished runs"
        ref = reference or ("invariant" if "invariant" in [s.method for s in stats] else stats[0].method)
        target = self.default_target() if target_accuracy is None else target_accuracy

        def pm(v, scale=1.0, fmt=".1f"):
            m, h = v[0] * scale, v[1] * scale
            return "n/a" if not math.isfinite(m) else (f"{m:{fmt}}" + (f" ± {h:{fmt}}" if math.isfinite(h) else ""))
        lines = [f"{self.dataset}: {len(self.seeds)} paired seeds, {self.config.get('rounds')} rounds, "
                 f"{self.config.get('clients')} clients; accuracy in %, mean ± 95% CI; paired differences "
                 f"vs {ref} (p: two-sided paired t-test; Holm p: corrected over the methods; d: Cohen's d_z); "
                 f"target accuracy {100 * target:.1f}%; vs FedAvg: time to target minus no dropout's (s)"
                 + ("  [INTERRUPTED: partial]" if self.interrupted else ""),
                 f"{'method':>18} {'runs':>4} {'accuracy':>13} {'federated':>13} {'diff vs ' + ref:>22} "
                 f"{'Holm p':>7} {'d':>5} "
                 f"{'time to target s':>17} {'vs FedAvg s':>20} {'acc @ equal time':>16} {'diff @ equal time':>22} "
                 f"{'round time s':>15} {'vs none':>13}"]
        def paired(s, d):
            return "—" if s.method == ref or not math.isfinite(d[0]) else (
                f"{100 * d[0]:+.1f} ± {100 * d[1]:.1f} p={d[2]:.3f}" if math.isfinite(d[1]) and math.isfinite(d[2])
                else f"{100 * d[0]:+.1f} p=n/a")
        for s in stats:
            diff = paired(s, s.diff_vs_reference)
            ttt = pm(s.time_to_target_s, 1.0, ".2f") + ("" if s.reached_target == s.runs
                                                          else f" ({s.reached_target}/{s.runs})")
            tv = s.time_vs_fedavg
            tvs = "—" if not math.isfinite(tv[0]) else (f"{tv[0]:+.2f}" + (f" p={tv[2]:.3f}" if math.isfinite(tv[2])
                                                                             else ""))
            lines.append(f"{s.method:>18} {s.runs:>4} {pm(s.accuracy, 100):>13} {pm(s.fed_accuracy, 100):>13} "
                         f"{diff:>22} {('—' if not math.isfinite(s.diff_p_holm) else f'{s.diff_p_holm:.3f}'):>7} "
                         f"{('—' if not math.isfinite(s.effect_size) else f'{s.effect_size:+.2f}'):>5} "
                         f"{ttt:>17} {tvs:>20} {pm(s.accuracy_at_equal_time, 100):>16} "
                         f"{paired(s, s.diff_at_equal_time):>22} "
                         f"{pm(s.round_time_s, 1.0, '.3f'):>15} "
                         f"{('n/a' if not math.isfinite(s.round_time_reduction[0]) else pm(s.round_time_reduction, 100) + '%'):>13}")
        return "\n".join(lines)

    def controller_table(self) -> str:
        """Per method, how the straggler controller did over the seeds' dropout rounds: the share of
        rounds whose straggler finished within 5% of the slowest other client (and of the
        controller's own target), swaps per 10 rounds, rounds without a straggler, and the RMS log
        error of its time predictions."""
        lines = [f"{'method':>18} {'within 5%':>10} {'of target':>10} {'swaps/10 rounds':>16} "
                 f"{'no-straggler rounds':>20} {'estimate error':>15}"]
        skipped = []
        for m in self.methods:
            if m in OWN_WIDTHS:
                if self.runs.get(m):
                    skipped.append(m)
                continue
            reps = [r.controller_report() for r in self.runs.get(m, {}).values()]
            reps = [c for c in reps if c.rounds]
            if not reps:
                continue
            n = sum(len(c.rounds) for c in reps)
            within = sum(c.within() * len(c.rounds) for c in reps) / n
            tgt = [c.within(against="target") for c in reps]
            tgt = [x for x in tgt if math.isfinite(x)]
            err = [c.estimate_rms_log_error for c in reps if math.isfinite(c.estimate_rms_log_error)]
            lines.append(f"{m:>18} {100 * within:>9.0f}% "
                         f"{(f'{100 * float(np.mean(tgt)):.0f}%' if tgt else 'n/a'):>10} "
                         f"{10 * sum(c.swaps for c in reps) / n:>16.2f} {sum(c.no_dropout_rounds for c in reps):>20} "
                         f"{(f'{100 * float(np.mean(err)):.1f}%' if err else 'n/a'):>15}")
        if skipped:
            lines.append(f"({', '.join(skipped)}: the method picks the widths clients train, not the controller)")
        return ("straggler controller over the dropout rounds (round 3 on), all seeds\n" + "\n".join(lines)
                if len(lines) > 1 else "")

    def width_table(self) -> str:
        """Per-width test accuracy (mean over seeds, %) of the nested-width methods (FjORD's
        widths, HeteroFL's tiers): the final global model cut to each width."""
        rows = []
        for m in self.methods:
            rs = [r for r in self.runs.get(m, {}).values() if r.width_accuracy]
            if not rs:
                continue
            widths = sorted({w for r in rs for w in r.width_accuracy})
            cells = [f"{w:g}: {100 * np.mean([r.width_accuracy[w] for r in rs if w in r.width_accuracy]):.1f}"
                     for w in widths]
            rows.append(f"{m:>18}  " + "  ".join(cells))
        return ("accuracy (%) of the final model at each width, mean over seeds\n" + "\n".join(rows)) if rows else ""

    def plot(self, path=None, overwrite: bool = False):
        """The experiment's figure; an existing ``path`` is replaced only with ``overwrite``."""
        from .._plotting import pyplot
        plt = pyplot("Experiment.plot", path, overwrite)
        fig, axes = plt.subplots(2, 3, figsize=(17, 8))
        (a, b, e), (c, d, f) = axes
        for m in self.methods:
            rs = list(self.runs.get(m, {}).values())
            if not rs:
                continue
            n = min(len(r.rounds) for r in rs)
            acc = np.array([[x.accuracy for x in r.rounds[:n]] for r in rs])
            t = np.array([[x.sim_time_s for x in r.rounds[:n]] for r in rs]).mean(axis=0)
            mean = acc.mean(axis=0)
            half = np.array([mean_ci(acc[:, i])[1] for i in range(n)]) if len(rs) > 1 else np.zeros(n)
            half = np.nan_to_num(half)
            rounds = np.arange(1, n + 1)
            a.plot(rounds, mean, label=m)
            a.fill_between(rounds, mean - half, mean + half, alpha=0.2)
            b.plot(t, mean, label=m)
            b.fill_between(t, mean - half, mean + half, alpha=0.2)
        a.set_xlabel("round")
        b.set_xlabel("simulated time (s, mean over seeds)")
        for ax in (a, b):
            ax.set_ylabel("central accuracy (mean, 95% band)")
            ax.legend(fontsize=8)
        show = next((m for m in self.methods if m.startswith("invariant") and self.runs.get(m)),
                    next((m for m in self.methods if self.runs.get(m)), None))
        if show is not None:
            run = self.runs[show][min(self.runs[show])]
            clients = sorted({c for r in run.rounds for c in r.client_times_s})
            for cl in clients:
                c.plot([r.round for r in run.rounds], [r.client_times_s.get(cl, np.nan) for r in run.rounds],
                       label=f"client {cl}")
            c.set_title(f"{show}, seed {min(self.runs[show])}: round time per client")
            c.set_xlabel("round")
            c.set_ylabel("simulated seconds")
            c.legend(fontsize=7)
            strag = sorted({k for r in run.rounds for k in r.keep})
            for cl in strag:
                d.step([r.round for r in run.rounds], [r.keep.get(cl, 1.0) for r in run.rounds], where="mid",
                       label=f"client {cl}")
            d.set_ylim(0.4, 1.05)
            d.set_title("keep fraction per straggler")
            d.set_xlabel("round")
            d.legend(fontsize=7)
            # the controller: straggler time over the slowest other client's, per round, and swaps
            for m in self.methods:
                if m in OWN_WIDTHS or not self.runs.get(m):
                    continue
                rep = self.runs[m][min(self.runs[m])].controller_report()
                if rep.rounds:
                    e.plot(rep.rounds, rep.over_slowest_other, marker=".", label=f"{m} ({rep.swaps} swaps)")
            e.axhspan(0.95, 1.05, color="grey", alpha=0.15, label="within 5%")
            e.axhline(1.0, color="grey", lw=0.8)
            e.set_title("straggler time / slowest other client (first seed)")
            e.set_xlabel("round")
            e.legend(fontsize=7)
            swaps = [(m, sum(r.controller_report().swaps for r in self.runs[m].values()))
                     for m in self.methods if m not in OWN_WIDTHS and self.runs.get(m)]
            f.bar([m for m, _ in swaps], [k for _, k in swaps])
            f.set_title("straggler swaps (all seeds)")
            f.tick_params(axis="x", labelrotation=30, labelsize=8)
        fig.tight_layout()
        if path:
            fig.savefig(path, dpi=110)
            plt.close(fig)
        return fig


log = logging.getLogger("cosearch")

#: Methods whose clients train widths the method picks (not the straggler controller's keep).
OWN_WIDTHS = ("fjord", "fjord-kd", "heterofl")

#: Fresh pools an experiment starts after workers die before it gives up.
MAX_POOL_RESTARTS = 3


def _one_run(kw: dict) -> dict:
    import torch
    torch.set_num_threads(1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)      # the parent decides what an interrupt means
    return simulate(**kw).to_dict()


def _seed_list(seeds) -> list[int]:
    """``seeds`` as run_experiment takes it: a count (seeds 0 .. count - 1) or distinct seeds."""
    if isinstance(seeds, (int, np.integer)) and not isinstance(seeds, bool):
        return list(range(positive_int("seeds", int(seeds), 10_000)))
    if isinstance(seeds, (str, bytes)) or not hasattr(seeds, "__iter__"):
        raise ValueError(f"seeds must be a count or a list of seeds, got {seeds!r}")
    out = [nonneg_int("each seed", s, 2**63 - 1) for s in seeds]
    if not out:
        raise ValueError("seeds is empty: give a count or at least one seed")
    if len(set(out)) != len(out):
        raise ValueError(f"seeds are listed twice: {sorted(s for s in set(out) if out.count(s) > 1)} (each seed is "
                         "one paired run; a repeat would count the same run twice in the statistics)")
    return out


#: Settings run_experiment sets itself for each run.
_OWN_SETTINGS = ("dataset", "method", "seed", "rounds", "clients")


def _check_settings(settings: dict) -> None:
    """Every setting passed through to :func:`simulate` must be one of its keywords, checked before
    any run (a typo would otherwise fail the first run after the pool has started)."""
    import inspect
    known = [k for k in inspect.signature(simulate).parameters if k not in _OWN_SETTINGS]
    for k in settings:
        if k in _OWN_SETTINGS:
            raise ValueError(f"{k} is set by run_experiment for each run; pass it as its own argument"
                             if k in ("dataset", "rounds", "clients") else f"{k} is set by run_experiment for each run")
        if k not in known:
            raise ValueError(f"unknown setting {k!r}; simulate takes {', '.join(known)}")


def _plain(obj):
    """``json.dumps``'s ``default``: a dataclass setting (a ClientProfile) saved as its fields."""
    from dataclasses import asdict, is_dataclass
    if is_dataclass(obj) and not isinstance(obj, type):
        return asdict(obj)
    raise TypeError(type(obj).__name__)


def run_experiment(dataset: str = "digits", methods=("invariant", "ordered", "random", "none"), seeds=10,
                   rounds: int = 30, *, clients: int = 5, workers: int | None = None,
                   out: str | os.PathLike | None = None, resume: str | os.PathLike | None = None,
                   progress: bool = True, overwrite: bool = False, **simulate_kwargs) -> Experiment:
    """Run every method on every seed (``seeds``: a count or a list) and return the
    :class:`Experiment`.  ``simulate_kwargs`` go to :func:`~cosearch.fl.simulation.simulate`
    (``model``, ``optimizer``, ``lr``, ``batch_size``, ``devices``, ``alpha``, ``data_dir``,
    ...).  ``out``: saved after every run; ``resume``: an earlier experiment file with the same
    settings whose finished runs are kept.  On Ctrl-C the finished runs are returned (and
    saved) with ``interrupted=True``.  An existing ``out`` is refused before any work unless
    ``overwrite``, or unless it is the ``resume`` file (continued in place)."""
    from .._validate import file_path, new_file
    continued = out is not None and resume is not None and os.path.abspath(resume) == os.path.abspath(out)
    if out is not None:
        file_path(out, "out")          # before any run: each finished run is saved
    new_file(out, overwrite or continued)
    methods = [methods] if isinstance(methods, str) else list(methods)
    if not methods:
        raise ValueError("give at least one method")
    for m in methods:
        if m not in METHODS:
            raise ValueError(f"unknown method {m!r}; choose from {', '.join(METHODS)}")
    if len(set(methods)) != len(methods):
        raise ValueError(f"methods are listed twice: {methods}")
    seed_list = _seed_list(seeds)
    positive_int("rounds", rounds, 100_000)
    positive_int("clients", clients, 10_000)
    _check_settings(simulate_kwargs)
    for key in ("devices", "latency_s"):
        v = simulate_kwargs.get(key)
        if v is not None and not isinstance(v, (str, os.PathLike, list, tuple)):
            raise ValueError(f"{key} must be a CSV path or a list to run in worker processes")
    config = {"rounds": rounds, "clients": clients}
    for k, v in simulate_kwargs.items():
        try:
            config[k] = json.loads(json.dumps(os.fspath(v) if isinstance(v, os.PathLike) else v, default=_plain))
        except (TypeError, ValueError):
            raise ValueError(f"{k}={v!r} cannot be saved with the experiment: give a number, text, a path, a "
                             "list of them, or ClientProfile objects") from None
    exp = Experiment(dataset, methods, seed_list, config)
    if resume is not None:
        old = Experiment.from_json(resume)
        if old.dataset != dataset or old.config != config:
            raise ValueError(f"{resume}: its settings ({old.dataset}, {old.config}) differ from this run's "
                             f"({dataset}, {config}); resume with the same settings")
        for m, rs in old.runs.items():
            if m in methods:
                exp.runs[m] = {s: r for s, r in rs.items() if s in seed_list}
    todo = [(m, s) for s in seed_list for m in methods if s not in exp.runs.get(m, {})]
    workers = min(os.cpu_count() or 1, 2) if workers is None else positive_int("workers", workers)
    bar = None
    if progress:
        from tqdm.auto import tqdm
        bar = tqdm(total=len(todo), desc=f"FL experiment ({dataset})", unit="run")

    def done(m, s, d):
        exp.runs.setdefault(m, {})[s] = FLResult.from_dict(d)
        if out is not None:
            exp.to_json(out, overwrite=True)
        if bar is not None:
            bar.update(1)

    kw = {"dataset": dataset, "rounds": rounds, "clients": clients, **simulate_kwargs}
    if workers > 1 and len(todo) > 1:
        from .._spawn import spawn_problem
        why = spawn_problem()
        if why is not None:
            log.warning("cosearch: %s", why)
            workers = 1
    try:
        if workers == 1 or len(todo) <= 1:
            for m, s in todo:
                r = simulate(**dict(kw, method=m, seed=s))
                if r.interrupted:        # simulate keeps its own Ctrl-C: the run is not finished
                    raise r.stopped_by if isinstance(r.stopped_by, KeyboardInterrupt) else KeyboardInterrupt()
                done(m, s, r.to_dict())
        else:
            import multiprocessing as mp
            # spawn: torch's and numba's thread pools make fork() unsafe once they have run
            def new_pool():
                return ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn"))
            pool = new_pool()
            restarts = 0
            try:
                pending = {pool.submit(_one_run, dict(kw, method=m, seed=s)): (m, s) for m, s in todo}
                while pending:
                    finished, _ = wait(pending, return_when=FIRST_COMPLETED)
                    broken = False
                    for f in finished:
                        try:
                            d = f.result()
                        except BrokenProcessPool:
                            broken = True
                            continue
                        m, s = pending.pop(f)
                        done(m, s, d)
                    if broken:
                        # a worker died (killed, out of memory): its runs and those queued behind
                        # it are run again on a fresh pool, as the co-search's sweep does
                        if restarts >= MAX_POOL_RESTARTS:
                            raise RuntimeError(f"FL worker processes died {restarts + 1} times "
                                               f"({worker_deaths(pool)}); "
                                               f"{sum(len(r) for r in exp.runs.values())} finished runs are "
                                               f"saved" + (f" in {out}" if out is not None else ""))
                        restarts += 1
                        stop_pool(pool)
                        pool = new_pool()
                        pending = {pool.submit(_one_run, dict(kw, method=m, seed=s)): (m, s)
                                   for m, s in pending.values()}
            finally:
                stop_pool(pool)          # on an interrupt, stop runs in flight; no worker outlives us
    except KeyboardInterrupt as exc:
        exp.interrupted = True
        exp.stopped_by = exc
        if out is not None:
            exp.to_json(out, overwrite=True)
    finally:
        if bar is not None:
            bar.close()
    return exp
