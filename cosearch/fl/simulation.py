"""In-process federated learning driven by :class:`~cosearch.fl.server.RoundProtocol`.

Every client trains every round (FLuID's setting).  Rounds 1 and 2 run the full model on
all clients; the slowest client of round 2 becomes the straggler and, from round 3, trains
the sub-model its keep fraction and the dropout method give it.  A client's simulated round
time follows its device (:class:`~cosearch.fl.profiling.ClientProfile`: the sub-model's own
training FLOPs and bytes, plus latency and noise) or a measured trace
(:class:`~cosearch.fl.profiling.TraceProfile`); the round lasts as long as its slowest client.

After each round the global model is evaluated centrally (the dataset's test set) and
federatedly (every client's test split, example-weighted).
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass, field, fields

import numpy as np

from .._json import load_json, stamped
from .._validate import choice, fraction, nonneg_float, nonneg_int, positive_float, positive_int
from .data import FLData, load_dataset
from .masks import METHODS, ThresholdSchedule, fjord_widths_within
from .models import DATASET_DEFAULTS, build_model
from .profiling import ClientProfile, TraceProfile, device_profiles, model_bytes, training_flops
from .server import ClientUpdate, RoundProtocol

__all__ = ["simulate", "FLResult", "RoundMetrics", "ControllerReport", "plot", "train_local", "evaluate_model"]


@dataclass
class RoundMetrics:
    round: int
    accuracy: float
    loss: float
    fed_accuracy: float
    fed_loss: float
    round_time_s: float
    sim_time_s: float
    client_times_s: dict = field(default_factory=dict)
    keep: dict = field(default_factory=dict)
    invariant_counts: dict = field(default_factory=dict)
    thresholds: dict = field(default_factory=dict)
    rejected: dict = field(default_factory=dict)
    #: rule="model": the controller's target for this round (the slowest non-straggler's
    #: predicted full-model time) and each straggler's predicted time at its keep fraction
    target_s: float | None = None
    predicted_s: dict = field(default_factory=dict)
    #: invariant neurons per layer whose update was exactly zero on every non-straggler (dead
    #: units), the rest of ``invariant_counts`` being alive but slowly changing
    dead_counts: dict = field(default_factory=dict)


def _finite_or_nan(name: str, x) -> float:
    """A saved number: a finite number, or null / NaN (a round that had none)."""
    if x is None:
        return float("nan")
    if isinstance(x, bool) or not isinstance(x, (int, float)) or math.isinf(x):
        raise ValueError(f"{name} must be a number or null, got {x!r}")
    return float(x)


def _round_from_dict(r, i: int) -> RoundMetrics:
    """One saved round (:class:`RoundMetrics` as :func:`dataclasses.asdict` wrote it), checked."""
    if not isinstance(r, dict):
        raise ValueError(f"round {i} must be an object, got {r!r}")
    unknown = sorted(set(r) - {f.name for f in fields(RoundMetrics)})
    if unknown:
        raise ValueError(f"round {i}: unknown field(s) {unknown}")
    r = dict(r)
    r["round"] = positive_int(f"round {i}: 'round'", r["round"])
    for key in ("accuracy", "loss", "fed_accuracy", "fed_loss", "round_time_s", "sim_time_s"):
        r[key] = _finite_or_nan(f"round {i}: {key}", r.get(key))
    if r.get("target_s") is not None:
        r["target_s"] = _finite_or_nan(f"round {i}: target_s", r["target_s"])
    for key in ("client_times_s", "keep", "rejected", "predicted_s", "invariant_counts", "thresholds",
                "dead_counts"):
        m = r.get(key, {})
        if not isinstance(m, dict):
            raise ValueError(f"round {i}: {key} must be an object, got {m!r}")
        if key == "rejected":                       # client -> the reason its update was refused
            r[key] = {_client(i, key, k): str(x) for k, x in m.items()}
        elif key in ("client_times_s", "keep", "predicted_s"):
            r[key] = {_client(i, key, k): _finite_or_nan(f"round {i}: {key}.{k}", x) for k, x in m.items()}
        elif key == "thresholds":                   # per layer
            r[key] = {k: _finite_or_nan(f"round {i}: {key}.{k}", x) for k, x in m.items()}
        else:                                       # neurons per layer
            for k, x in m.items():
                if isinstance(x, bool) or not isinstance(x, int) or x < 0:
                    raise ValueError(f"round {i}: {key}.{k} must be a whole number of neurons, got {x!r}")
    return RoundMetrics(**r)


def _client(i: int, key: str, k) -> int:
    try:
        return int(k)
    except (TypeError, ValueError):
        raise ValueError(f"round {i}: {key} must be keyed by client number, got {k!r}") from None


@dataclass(frozen=True)
class ControllerReport:
    """How the straggler controller did over a run's dropout rounds (round 3 on): per round the
    straggler's time over the controller's target and over the slowest other client's time (the
    round's real target), the swaps of the straggler set, the rounds from round 3 on in which
    nobody dropped, and the RMS log error of the controller's time predictions (NaN for
    FLuID's rule, which predicts none)."""

    rounds: tuple[int, ...]
    over_target: tuple[float, ...]
    over_slowest_other: tuple[float, ...]
    swaps: int
    no_dropout_rounds: int
    estimate_rms_log_error: float

    def within(self, tol: float = 0.05, against: str = "slowest_other") -> float:
        """Fraction of dropout rounds whose straggler time is within ``tol`` of the target
        (``against="slowest_other"``: the round's slowest other client; ``"target"``: the
        controller's predicted target)."""
        x = np.array(self.over_slowest_other if against == "slowest_other" else self.over_target, dtype=float)
        x = x[np.isfinite(x)]
        return float(np.mean(np.abs(x - 1.0) <= tol)) if len(x) else float("nan")

    def describe(self) -> str:
        n = len(self.rounds)
        if n == 0:
            return "no dropout rounds (the run ended before round 3, or nobody was a straggler)"
        return (f"straggler within 5% of the slowest other client in {self.within():.0%} of {n} dropout rounds "
                f"(of the controller's target: {self.within(against='target'):.0%}); {self.swaps} swaps, "
                f"{self.no_dropout_rounds} rounds without a straggler; prediction error "
                f"{self.estimate_rms_log_error:.1%} RMS")


@dataclass
class FLResult:
    method: str
    dataset: str
    model: str
    clients: int
    rounds: list[RoundMetrics]
    config: dict = field(default_factory=dict)
    #: True when the run was stopped (Ctrl-C, SIGTERM) before its last round: ``rounds`` holds
    #: the finished ones
    interrupted: bool = False
    stopped_by: BaseException | None = field(default=None, repr=False, compare=False)
    #: nested-width methods (FjORD, HeteroFL): the final global model's test accuracy when cut to
    #: each of the method's widths (ordered sub-models), ``{width: accuracy}``
    width_accuracy: dict = field(default_factory=dict)

    def to_dict(self):
        return stamped("fl-result", {"method": self.method, "dataset": self.dataset, "model": self.model,
                                     "clients": self.clients, "config": self.config,
                                     "interrupted": bool(self.interrupted),
                                     "rounds": [asdict(r) for r in self.rounds],
                                     "width_accuracy": {str(w): a for w, a in self.width_accuracy.items()}})

    def to_json(self, path=None, overwrite: bool = False) -> str:
        """The JSON text; also written to ``path`` — which must not exist unless ``overwrite``."""
        from .._json import save_new_json
        return save_new_json(self.to_dict(), path, overwrite)

    @classmethod
    def from_dict(cls, d: dict) -> FLResult:
        """A result from :meth:`to_dict`'s document, every field checked (a hand-edited or
        truncated file is refused naming the field, not failed on later by a report or plot)."""
        try:
            if not isinstance(d.get("rounds"), list):
                raise ValueError("'rounds' must be a list")
            rounds = [_round_from_dict(r, i) for i, r in enumerate(d["rounds"], start=1)]
            interrupted = d.get("interrupted", False)
            if not isinstance(interrupted, bool):
                raise ValueError(f"'interrupted' must be true or false, got {interrupted!r}")
            for key in ("method", "dataset", "model"):
                if not isinstance(d[key], str):
                    raise ValueError(f"'{key}' must be a string, got {d[key]!r}")
            config, widths = d.get("config", {}), d.get("width_accuracy", {})
            if not isinstance(config, dict) or not isinstance(widths, dict):
                raise ValueError("'config' and 'width_accuracy' must be objects")
            return cls(d["method"], d["dataset"], d["model"], positive_int("clients", d["clients"]), rounds, config,
                       interrupted, width_accuracy={float(w): _finite_or_nan(f"width_accuracy.{w}", a)
                                                    for w, a in widths.items()})
        except KeyError as exc:
            raise ValueError(f"not a cosearch FL result: missing field {exc}") from None
        except ValueError as exc:
            raise ValueError(f"not a cosearch FL result: {exc}") from None

    @classmethod
    def from_json(cls, source) -> FLResult:
        from .._json import check_schema
        d = load_json(source)
        check_schema(d, "fl-result", str(source) if len(str(source)) < 200 else "FL result")
        return cls.from_dict(d)

    def controller_report(self, start_round: int = 3) -> ControllerReport:
        """The straggler controller's record over rounds ``start_round`` on (:class:`ControllerReport`)."""
        rounds, over_t, over_o, errs = [], [], [], []
        swaps = full = 0
        prev = None
        for r in self.rounds:
            if r.round < start_round or not r.client_times_s:
                continue
            times = r.client_times_s
            if not r.keep:
                full += 1          # nobody dropped this round
                continue
            s = max(r.keep, key=lambda c: times.get(c, 0.0))
            if prev is not None and set(r.keep) != prev:
                swaps += 1
            prev = set(r.keep)
            others = [v for c, v in times.items() if c not in r.keep]
            rounds.append(r.round)
            over_o.append(times.get(s, float("nan")) / max(others) if others else float("nan"))
            over_t.append(times.get(s, float("nan")) / r.target_s if r.target_s else float("nan"))
            errs += [math.log(times[c] / t) for c, t in r.predicted_s.items() if c in times and t > 0]
        rms = float(np.sqrt(np.mean(np.square(errs)))) if errs else float("nan")
        return ControllerReport(tuple(rounds), tuple(over_t), tuple(over_o), swaps, full, rms)

    def summary(self) -> str:
        if not self.rounds:                 # stopped before its first round ended
            return f"{self.method:>18}: no round finished" + (" (interrupted)" if self.interrupted else "")
        last = self.rounds[-1]
        return (f"{self.method:>18}: accuracy {last.accuracy:.3f} (federated {last.fed_accuracy:.3f}), "
                f"simulated time {last.sim_time_s:.1f} s over {len(self.rounds)} rounds, "
                f"mean round {np.mean([r.round_time_s for r in self.rounds]):.2f} s")


def plot(results: list[FLResult], path=None, overwrite: bool = False):
    """Accuracy vs round and vs simulated time for single runs (experiments: :mod:`.experiment`);
    an existing ``path`` is replaced only with ``overwrite``."""
    from .._plotting import pyplot
    plt = pyplot("fl.plot", path, overwrite)
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    for r in results:
        a.plot([m.round for m in r.rounds], [m.accuracy for m in r.rounds], label=r.method)
        b.plot([m.sim_time_s for m in r.rounds], [m.accuracy for m in r.rounds], label=r.method)
    a.set_xlabel("round")
    b.set_xlabel("simulated time (s)")
    for ax in (a, b):
        ax.set_ylabel("central accuracy")
        ax.legend()
    fig.tight_layout()
    if path:
        fig.savefig(path, dpi=120)
        plt.close(fig)
    return fig


def _eval_sums(model, x, y, batch: int = 1024) -> tuple[float, float, int]:
    """(correct predictions, summed cross-entropy, samples) of ``model`` on ``(x, y)``."""
    import torch
    import torch.nn.functional as F
    model.eval()
    correct, loss = 0.0, 0.0
    with torch.no_grad():
        for i in range(0, len(y), batch):
            out = model(torch.as_tensor(x[i:i + batch]))
            yt = torch.as_tensor(y[i:i + batch])
            correct += float((out.argmax(1) == yt).sum())
            loss += float(F.cross_entropy(out, yt, reduction="sum"))
    return correct, loss, len(y)


def evaluate_model(model, x, y, batch: int = 1024) -> tuple[float, float, int]:
    """(accuracy, mean cross-entropy, samples) of ``model`` on ``(x, y)``."""
    if len(y) == 0:
        return float("nan"), float("nan"), 0
    correct, loss, n = _eval_sums(model, x, y, batch)
    return correct / n, loss / n, n


def _test_is_union(data) -> bool:
    """Whether the central test set is every client's test split, in client order (FLuID's own
    client files): then one pass over the clients' splits gives both evaluations."""
    tests = [t for t in data.client_tests if len(t[1])]
    if len(tests) != len(data.client_tests) or sum(len(t[1]) for t in tests) != len(data.test[1]):
        return False
    return bool(np.array_equal(np.concatenate([t[1] for t in tests]), data.test[1])
                and np.array_equal(np.concatenate([t[0] for t in tests]), data.test[0]))


def _local_optimizer(model, optimizer: str, lr: float):
    """A fresh optimizer (``sgd`` or ``adam``) for a round of local training, the model in
    training mode."""
    import torch
    model.train()
    return {"sgd": torch.optim.SGD, "adam": torch.optim.Adam}[optimizer](model.parameters(), lr=lr)


def _local_batches(x, y, epochs: int, batch_size: int, gen):
    """(inputs, labels) batches of ``epochs`` shuffled passes (one permutation per epoch)."""
    import torch
    xt, yt = torch.as_tensor(np.asarray(x)), torch.as_tensor(np.asarray(y))
    for _ in range(epochs):
        perm = torch.randperm(len(yt), generator=gen)
        for i in range(0, len(yt), batch_size):
            idx = perm[i:i + batch_size]
            yield xt[idx], yt[idx]


def round_subset(x, y, samples: int | None, seed: int, rnd: int, client: int):
    """A client's training data for one round: all of it, or (``samples``) that many of its
    samples drawn without replacement from the run's ``seed``, the round and the client (the same
    draw on both engines), in their stored order."""
    if samples is None or len(y) <= samples:
        return x, y
    idx = np.sort(np.random.default_rng([int(seed), 13, int(rnd), int(client)]).choice(len(y), samples, replace=False))
    return x[idx], y[idx]


def train_local(model, x, y, epochs: int, optimizer: str, lr: float, batch_size: int, gen,
                label_mask: np.ndarray | None = None, scale_rate: float | None = None, example=None):
    """Local training with a fresh optimizer (``sgd`` or ``adam``) each round.

    HeteroFL's two training rules (Diao et al. 2021 and its code): ``label_mask`` (a boolean per
    class) zeroes the logits of the labels the client does not hold before the cross-entropy
    (its ``masked_fill(label_mask == 0, 0)``); ``scale_rate`` r < 1 divides every hidden layer's
    output (the Linear/Conv layers whose units the sub-model cuts) by r during training, its
    Scaler module (``example``: an input batch to find those layers)."""
    import torch
    import torch.nn.functional as F
    opt = _local_optimizer(model, optimizer, lr)
    handles = scaler_hooks(model, example, scale_rate) if scale_rate is not None and scale_rate < 1.0 else []
    mask = None if label_mask is None else torch.as_tensor(np.asarray(label_mask, dtype=bool))
    try:
        for xb, yb in _local_batches(x, y, epochs, batch_size, gen):
            opt.zero_grad()
            out = model(xb)
            if mask is not None:
                out = out.masked_fill(~mask, 0.0)
            F.cross_entropy(out, yb).backward()
            opt.step()
    finally:
        for h in handles:
            h.remove()
    return model


def scaler_hooks(model, example, rate: float) -> list:
    """HeteroFL's Scaler on ``model`` (a sub-model of rate ``rate``): forward hooks dividing the
    output of every Linear/Conv layer whose output units a dropout group cuts by ``rate``
    (the hidden layers; not the output layer).  Returns the hook handles to remove."""
    import torch.nn as nn

    from .submodel import groups
    if example is None:
        raise ValueError("HeteroFL's scaler needs an example input to find the hidden layers")
    producers = {path for g in groups(model, example) for path, attr, _k, _s in g.attrs
                 if attr in ("out_features", "out_channels")}
    mods = dict(model.named_modules())
    scale = 1.0 / float(rate)
    return [mods[p].register_forward_hook(lambda _m, _i, out: out * scale) for p in sorted(producers)
            if isinstance(mods.get(p), (nn.Linear, nn.Conv2d, nn.Conv1d))]


def nested_masks(local_groups, full_units: dict[str, int], width: float) -> dict[str, np.ndarray]:
    """Masks of ``local_groups`` (a client's ``p_max`` sub-model) keeping the nested sub-model of
    ``width`` of the *full* model: the first ``ceil(width units)`` units of each layer
    (:func:`~cosearch.fl.masks.nested_units`), as every FjORD width is a prefix of the full
    model's units."""
    from .masks import nested_units
    out = {}
    for g in local_groups:
        n = full_units[g.name]
        k = min(g.units, nested_units(width, n))
        m = np.zeros(g.units, dtype=bool)
        m[:k] = True
        out[g.name] = m
    return out


def _add_sub_grads(model, sub, idx: dict[str, dict[int, np.ndarray]]) -> None:
    """Add ``sub``'s parameter gradients into ``model``'s at the kept indices (``idx``: from
    :func:`~cosearch.fl.submodel.param_indices`)."""
    import torch
    subp = dict(sub.named_parameters())
    for name, p in model.named_parameters():
        g = subp[name].grad
        if g is None:
            continue
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        axes = idx.get(name)
        if not axes:
            p.grad.add_(g)
            continue
        if not set(axes) <= {0, 1}:
            raise ValueError(f"nested widths: parameter {name!r} is cut along axes {sorted(axes)}")
        i0 = torch.as_tensor(axes[0], dtype=torch.long) if 0 in axes else torch.arange(p.shape[0])
        if 1 in axes:
            i1 = torch.as_tensor(axes[1], dtype=torch.long)
            p.grad.index_put_((i0[:, None], i1[None, :]), g, accumulate=True)
        else:
            p.grad.index_put_((i0,), g, accumulate=True)


def train_nested(model, x, y, epochs: int, optimizer: str, lr: float, batch_size: int, gen, widths,
                 full_units: dict[str, int], example, distill: bool = True) -> list[float]:
    """FjORD's local training (Horváth et al. 2021; Flower Baselines ``fjord``): ``model`` is the
    client's widest sub-model (``max(widths)`` of the full model); every batch draws a width
    uniformly from ``widths`` and trains that nested sub-model.  With ``distill`` the widest
    model first takes a cross-entropy step on the labels, and the drawn width is trained on the
    widest model's softmax (soft labels) instead of the labels; both gradients go into one
    optimiser step.  Returns the widths drawn, in order."""
    import torch
    import torch.nn.functional as F

    from .submodel import extract_submodel, groups, param_indices
    widths = sorted(float(w) for w in widths)
    top = widths[-1]
    local_groups = groups(model, example)
    cuts = {w: nested_masks(local_groups, full_units, w) for w in widths[:-1]}
    idx = {w: param_indices(local_groups, m) for w, m in cuts.items()}
    opt = _local_optimizer(model, optimizer, lr)
    drawn = []
    for xb, target in _local_batches(x, y, epochs, batch_size, gen):
        w = widths[int(torch.randint(len(widths), (1,), generator=gen))]
        drawn.append(w)
        opt.zero_grad(set_to_none=False)
        if distill:
            out = model(xb)
            F.cross_entropy(out, target).backward()
            target = out.detach().softmax(dim=1)
        if w == top:
            F.cross_entropy(model(xb), target).backward()
        else:
            sub = extract_submodel(model, cuts[w], example, local_groups)
            F.cross_entropy(sub(xb), target).backward()
            _add_sub_grads(model, sub, idx[w])
        opt.step()
    return drawn


def _fiarse_train(model, theta, x, y, epochs, optimizer, lr, batch_size, gen, example,
                  price: bool = True) -> tuple[float, int]:
    """FIARSE's local training of ``model`` at threshold ``theta`` (:mod:`cosearch.fl.fiarse`);
    returns the sub-model's training FLOPs and bytes each way, priced as it was sent (0, 0
    unless ``price``: no device model needs them)."""
    from .fiarse import masked_training, sparse_bytes, sparse_training_flops
    flops = sparse_training_flops(model, example, theta, len(y), epochs) if price else 0.0
    nbytes = sparse_bytes(model, theta) if price else 0
    with masked_training(model, theta):
        train_local(model, x, y, epochs, optimizer, lr, batch_size, gen)
    return flops, nbytes


def _nested_flops(model, example, full_units, widths, n: int, epochs: int, distill: bool) -> float:
    """Expected training FLOPs of :func:`train_nested`: the mean over the widths of each nested
    sub-model's, plus the widest model's forward and backward when distilling."""
    from .submodel import extract_submodel, groups
    gs = groups(model, example)
    top = max(widths)
    per = [training_flops(model if w == top else extract_submodel(model, nested_masks(gs, full_units, w), example, gs),
                          example, n, epochs) for w in widths]
    return float(np.mean(per)) + (training_flops(model, example, n, epochs) if distill else 0.0)


def _devices(devices, n: int, rounds: int, latency_s, spread: float = 2.5, noise_cv: float = 0.05):
    if devices is not None and latency_s is not None:
        raise ValueError("give devices= or latency_s=, not both")
    if latency_s is not None:   # fixed full-model times: a trace
        try:
            lat = np.asarray(latency_s, dtype=float)
        except (TypeError, ValueError):
            raise ValueError(f"latency_s must give a number of seconds per client (or per round and client), got "
                             f"{latency_s!r}") from None
        if lat.ndim == 1:
            lat = np.tile(lat, (rounds, 1))
        if lat.ndim != 2 or lat.shape[1] != n or not np.all(np.isfinite(lat)) or np.any(lat <= 0):
            raise ValueError(f"latency_s must give a positive finite time for each of {n} clients")
        return TraceProfile({(c, r + 1): float(lat[min(r, len(lat) - 1), c]) for c in range(n) for r in range(rounds)})
    if devices is None:
        return device_profiles(n, spread, noise_cv)
    if isinstance(devices, (str, os.PathLike, TraceProfile)):
        trace = TraceProfile.from_csv(devices) if not isinstance(devices, TraceProfile) else devices
        first: dict[int, int] = {}                  # each client's first round in the trace
        for c, r in trace.seconds:
            first[c] = min(r, first.get(c, r))
        extra = [c for c in trace.clients if c >= n]
        missing = [c for c in range(n) if first.get(c) != 1]
        if extra or missing:
            raise ValueError(f"the device trace must give clients 0..{n - 1} (the run's {n}) a time from round 1 on: "
                             + "; ".join(x for x in (f"it names client(s) {extra[:5]} beyond them" if extra else "",
                                                     f"client(s) {missing[:5]} have no round-1 time" if missing else "")
                                         if x))
        return trace
    if not isinstance(devices, (list, tuple)) or len(devices) != n or not all(isinstance(d, ClientProfile)
                                                                             for d in devices):
        raise ValueError(f"devices must be {n} ClientProfile objects (one per client), a TraceProfile or a CSV path, "
                         f"got {devices!r}")
    return list(devices)


def simulate(dataset: str | FLData = "digits", clients: int = 5, method: str = "invariant", rounds: int = 30,
             model: str = "auto", *, devices=None, latency_s=None, local_epochs: int = 1,
             optimizer: str | None = None, lr: float | None = None, batch_size: int | None = None,
             schedule: ThresholdSchedule | str | None = None, straggler_fraction: float | None = None,
             keep_rule: str = "model", alpha: float | None = 0.5, seed: int = 0, data_dir: str | None = None,
             progress: bool = False, out: str | os.PathLike | None = None,
             checkpoint_every_s: float = 10.0, spread: float = 2.5, noise_cv: float = 0.05,
             stop_at_accuracy: float | None = None, overwrite: bool = False,
             method_options: dict | None = None, clients_per_round: int | None = None,
             samples_per_round: int | None = None, keep_confidence: float | None = None) -> FLResult:
    """Run ``rounds`` rounds of FL with ``method`` (:data:`~cosearch.fl.masks.METHODS`).

    ``clients_per_round``: client sampling — that many clients, drawn uniformly without
    replacement each round from the run's seed, train and are evaluated federatedly (None: every
    client, FLuID's setting); the stragglers are then the slowest of each round's participants
    (:meth:`~cosearch.fl.profiling.StragglerProfiler.keep_fractions`).
    ``samples_per_round``: each participating client trains each round on that many of its samples
    (a fresh random subset, :func:`round_subset`), its update still weighted by all its samples —
    FedAvg's fixed number of local updates for large clients (McMahan et al. 2017); None: all of
    them, FLuID's setting.
    ``method_options``: keyword arguments of the method's policy (for ``heterofl``:
    ``proportions={1.0: 0.5, 0.25: 0.5}`` and ``dynamic=True``, :class:`~cosearch.fl.masks.HeteroFL`).

    ``model``: a :data:`~cosearch.fl.models.MODELS` name or "auto" (the dataset's FLuID model).
    ``optimizer``/``lr``/``batch_size``: default to FLuID's per dataset
    (:data:`~cosearch.fl.models.DATASET_DEFAULTS`).
    ``devices``: one :class:`ClientProfile` per client, a :class:`TraceProfile`, or a trace CSV
    path; default :func:`~cosearch.fl.profiling.device_profiles` with ``spread`` (slowest over
    fastest compute) and ``noise_cv`` (round-time noise).  ``latency_s``: shorthand
    for a trace of full-model times (one per client, or per round and client).
    ``schedule``: FLuID's threshold schedule (default: the dataset's).
    ``keep_confidence`` (``keep_rule="model"`` only; None: 0.6): the probability with which each
    straggler's keep is predicted to finish within the target
    (:class:`~cosearch.fl.profiling.StragglerProfiler`; 0.5: the keep just within it, no margin).
    ``stop_at_accuracy``: early stopping — the run ends after the first round whose central
    accuracy reaches it (``config["stopped_early"]`` says so); None runs every round.
    ``out``: the result is saved there at the end and, while running, every
    ``checkpoint_every_s`` seconds (the finished rounds, ``interrupted: true``).  Ctrl-C or
    SIGTERM (as :class:`KeyboardInterrupt`) stops the run: the finished rounds are saved to
    ``out`` and returned with ``interrupted=True`` (``stopped_by`` holds the signal).  An existing
    ``out`` is refused before any work unless ``overwrite``.
    """
    import torch

    from .._validate import file_path, new_file
    if out is not None:
        file_path(out, "out")          # before any round: the result is written as the run goes
    new_file(out, overwrite)
    choice("method", method, METHODS)
    rounds = positive_int("rounds", rounds, 100_000)
    local_epochs = positive_int("local_epochs", local_epochs, 10_000)
    if not isinstance(dataset, FLData):
        clients = positive_int("clients", clients, 1_000_000)
    nonneg_int("seed", seed, 2**63 - 1)
    if stop_at_accuracy is not None:
        fraction("stop_at_accuracy", stop_at_accuracy)
    if method_options is not None and not isinstance(method_options, dict):
        raise ValueError(f"method_options must be a dict of the method's options, got {method_options!r}")
    noise_cv = nonneg_float("noise_cv", noise_cv)
    data = dataset if isinstance(dataset, FLData) else load_dataset(dataset, clients, data_dir, seed, alpha)
    n = len(data.clients)
    if n < 2:
        raise ValueError(f"federated dropout needs at least 2 clients, got {n}")
    if clients_per_round is not None:
        clients_per_round = positive_int("clients_per_round", clients_per_round)
        if not 2 <= clients_per_round <= n:
            raise ValueError(f"clients_per_round must be between 2 and the {n} clients, got {clients_per_round}")
    if samples_per_round is not None:
        samples_per_round = positive_int("samples_per_round", samples_per_round)
    defaults = DATASET_DEFAULTS.get(data.name, DATASET_DEFAULTS["digits"])
    model = defaults["model"] if model == "auto" else model
    optimizer = choice("optimizer", optimizer or defaults["optimizer"], ("sgd", "adam"))
    lr = positive_float("lr", defaults["lr"] if lr is None else lr)
    batch_size = positive_int("batch_size", defaults["batch_size"] if batch_size is None else batch_size)
    dev = _devices(devices, n, rounds, latency_s, positive_float("spread", spread), float(noise_cv))
    torch.manual_seed(seed)
    net = build_model(model, data.in_shape, data.classes)
    example = torch.as_tensor(data.clients[0][0][:2])
    pol = None
    if method_options:
        from .masks import policy as make_policy
        pol = make_policy(method, **method_options)
    proto = RoundProtocol(net, n, method, policy=pol, example_input=example, total_rounds=rounds,
                          schedule=schedule if schedule is not None else data.name,
                          straggler_fraction=straggler_fraction, keep_rule=keep_rule, seed=seed,
                          keep_confidence=keep_confidence)
    full_flops = training_flops(net, example, 1)
    metrics: list[RoundMetrics] = []
    every = positive_float("checkpoint_every_s", checkpoint_every_s)
    config = {"rounds": rounds, "local_epochs": local_epochs, "optimizer": optimizer, "lr": lr,
              "batch_size": batch_size, "seed": seed, "alpha": alpha, "keep_rule": keep_rule,
              "straggler_fraction": straggler_fraction, "clients_per_round": clients_per_round,
              **({"samples_per_round": samples_per_round} if samples_per_round is not None else {}),
              **({"keep_confidence": keep_confidence} if keep_confidence is not None else {}),
              **({"spread": spread, "noise_cv": noise_cv} if devices is None and latency_s is None else {})}
    res = FLResult(method, data.name, model, n, metrics, config, interrupted=True)
    try:
        _run_rounds(proto, data, dev, net, example, full_flops, metrics, rounds, local_epochs, optimizer, lr,
                    batch_size, seed, method, progress, out, res, every, stop_at_accuracy, clients_per_round,
                    samples_per_round)
        if stop_at_accuracy is not None:
            config["stop_at_accuracy"] = float(stop_at_accuracy)
            config["stopped_early"] = len(metrics) < rounds
    except KeyboardInterrupt as exc:
        res.stopped_by = exc
        if out is not None:
            res.to_json(out, overwrite=True)
        return res
    res.interrupted = False
    res.width_accuracy = width_accuracy(proto, data, example)
    if out is not None:
        res.to_json(out, overwrite=True)
    return res


def width_accuracy(proto, data, example) -> dict[float, float]:
    """Test accuracy of the global model cut to each nested width of the method (FjORD's
    widths, HeteroFL's tiers; empty for methods whose sub-models are not nested)."""
    from .masks import OrderedDropout
    from .submodel import extract_submodel
    out = {}
    for w in proto.policy.widths():
        net = proto.model if w >= 1.0 else extract_submodel(
            proto.model, OrderedDropout().masks(w, proto.groups, np.random.default_rng(0)), example)
        out[float(w)] = float(evaluate_model(net, *data.test)[0])
    return out


def _run_rounds(proto, data, dev, net, example, full_flops, metrics, rounds, local_epochs, optimizer, lr,
                batch_size, seed, method, progress, out, partial, every, stop_at=None, per_round=None,
                samples_per_round=None) -> None:
    """The round loop of :func:`simulate`, appending to ``metrics`` (``partial`` saved to ``out``
    every ``every`` seconds)."""
    import time

    import torch
    n = len(data.clients)
    clock = 0.0
    last_save = time.monotonic()
    it = range(1, rounds + 1)
    if progress:
        from tqdm.auto import tqdm
        it = tqdm(it, desc=f"FL {method}", unit="round", leave=False)
    decisions = getattr(proto.profiler, "decisions", [])
    nested = bool(getattr(proto.policy, "nested", False))      # FjORD: per-batch widths
    distill = bool(getattr(proto.policy, "distill", False))
    full_units = {g.name: g.units for g in proto.groups}
    nested_flops: dict = {}
    label_sets = [tuple(int(v) for v in np.unique(cy)) for _cx, cy in data.clients]
    label_masks = [np.isin(np.arange(data.classes), ls) for ls in label_sets]
    union = _test_is_union(data)
    for r in it:
        part = list(range(n)) if per_round is None else \
            sorted(int(c) for c in np.random.default_rng([seed, 11, r]).choice(n, per_round, replace=False))
        assign = proto.assignments(r, part)
        dec = decisions[-1] if decisions and decisions[-1]["round"] == r else {}
        updates = []
        for c in part:
            local = proto.submodel(assign[c])
            x, y = data.clients[c]
            n_c = len(y)
            x, y = round_subset(x, y, samples_per_round, seed, r, c)
            gen = torch.Generator().manual_seed(int(np.random.SeedSequence([seed, r, c]).generate_state(1)[0]))
            nbytes = None                 # bytes each way: the sub-model's state unless FIARSE prices them
            if nested:
                ws = fjord_widths_within(assign[c].keep)
                train_nested(local, x, y, local_epochs, optimizer, lr, batch_size, gen, ws, full_units, example,
                             distill=distill)
                # the expected cost depends only on the widths and the data size: once per pair
                key = (assign[c].keep, len(y))
                if key not in nested_flops:
                    nested_flops[key] = _nested_flops(local, example, full_units, ws, len(y), local_epochs, distill)
                flops = nested_flops[key]
            elif assign[c].threshold is not None:
                # FIARSE: the full-shape model, its parameters above the threshold trained
                flops, nbytes = _fiarse_train(local, assign[c].threshold, x, y, local_epochs, optimizer, lr,
                                              batch_size, gen, example)
            else:
                hetero = getattr(proto.policy, "scaler", False)
                train_local(local, x, y, local_epochs, optimizer, lr, batch_size, gen,
                            label_mask=label_masks[c] if getattr(proto.policy, "masked_labels", False) else None,
                            scale_rate=assign[c].keep if hetero else None, example=example)
                flops = training_flops(local, example, len(y), local_epochs)
            if isinstance(dev, TraceProfile):
                t = dev.round_time_s(c, r, flops / (full_flops * len(y) * local_epochs))
            else:
                t = dev[c].round_time_s(flops, model_bytes(local) if nbytes is None else nbytes,
                                        np.random.default_rng([seed, 7, r, c]))
            updates.append(ClientUpdate(c, local.state_dict(), n_c, t, labels=label_sets[c]))
        rep = proto.aggregate(r, assign, updates)
        sums = {c: _eval_sums(net, *data.client_tests[c]) for c in part if len(data.client_tests[c][1])}
        if union and len(sums) == n:
            # the central test set is the clients' splits: the same predictions, summed
            tot_c = sum(v[0] for v in sums.values())
            tot_l = sum(v[1] for v in sums.values())
            tot_n = sum(v[2] for v in sums.values())
            acc, loss = tot_c / tot_n, tot_l / tot_n
        else:
            acc, loss, _ = evaluate_model(net, *data.test)
        tot = sum(v[2] for v in sums.values())
        facc = sum(v[0] for v in sums.values()) / tot if tot else float("nan")
        floss = sum(v[1] for v in sums.values()) / tot if tot else float("nan")
        clock += rep.round_time_s
        st = rep.policy_state
        metrics.append(RoundMetrics(r, acc, loss, facc, floss, rep.round_time_s, clock, rep.durations_s,
                                    rep.keep, st.get("invariant_counts", {}), st.get("thresholds", {}),
                                    rep.rejected, dec.get("target_s"), dict(dec.get("predicted_s", {})),
                                    st.get("dead_counts", {})))
        if progress:
            it.set_postfix(acc=f"{acc:.3f}")
        if out is not None and time.monotonic() - last_save >= every:
            partial.to_json(out, overwrite=True)
            last_save = time.monotonic()
        if stop_at is not None and acc >= stop_at:
            break
