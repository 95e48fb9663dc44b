"""Client device and time model, straggler detection, and each straggler's keep fraction.

**Keep fraction** (FLuID's servers, iwang05/FLuID): with ``ratio = target / straggler`` time,
the sub-model keeps ``0.95`` if ratio >= 0.9, ``0.85`` if >= 0.8, ``0.75`` if >= 0.7,
``0.65`` if >= 0.6, else ``0.5`` (:func:`fluid_keep_fraction`).  ``rule="ceil"`` keeps
cosearch 0.1's rule (the smallest allowed width >= ratio, :func:`choose_width`).

``rule="model"`` (:mod:`cosearch.fl.controller`): each client's sub-model time predicted from
its own rounds and the sub-model's FLOPs and bytes, the largest keep fraction (step 0.01)
predicted to finish within the target with probability ``keep_confidence`` (default 0.6: a
quarter of the prediction's standard error below it), swaps only beyond the prediction error.

**Stragglers** (:class:`StragglerProfiler`, FLuID's rules): each client's full-model time is estimated as
``duration / keep``.  After the first ``start_round`` (FLuID: 2) the slowest client (or
the slowest ``fraction`` of them) becomes a straggler and gets its keep fraction against the
slowest non-straggler (the target).  Later, when a non-straggler is slower than a
straggler's full-model estimate, the two swap and keep fractions are recomputed; after a
swap the set is frozen for one round (FLuID's ``JustUpdatedStrag``).  ``readapt=True``
recomputes every straggler's keep fraction every round instead of only on a change.
Dropout therefore starts in round 3, as in FLuID.

**Device model** (:class:`ClientProfile`): a round costs
``2 latency + bytes / downlink + training FLOPs / FLOP/s + bytes / uplink``, times
log-normal noise with coefficient of variation ``noise_cv``; a sub-model's time follows its
own FLOPs (:func:`training_flops`) and bytes.  The presets of :func:`device_profiles` are
illustrative orders of magnitude, not measurements.  :class:`TraceProfile` replays measured full-model round times
from a CSV (``client,round,seconds``) and scales a sub-model's time by its FLOP ratio.
"""

from __future__ import annotations

import csv
import io
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    import torch
    from torch import nn

from .._validate import flag, nonneg_float, positive_float, positive_int
from .._validate import fraction as unit_fraction

__all__ = ["StragglerProfiler", "fluid_keep_fraction", "choose_width", "ClientProfile", "TraceProfile",
           "device_profiles", "training_flops", "model_bytes", "DEFAULT_WIDTHS", "FLUID_BUCKETS"]

DEFAULT_WIDTHS = (0.5, 0.65, 0.75, 0.85, 0.95)
#: Keep-fraction rules: FLuID's buckets, cosearch 0.1's ceiling, and the model-based controller
#: (:mod:`cosearch.fl.controller`).
RULES = ("fluid", "ceil", "model")
#: (lower bound of target/straggler time ratio, keep fraction), FLuID's servers.
FLUID_BUCKETS = ((0.9, 0.95), (0.8, 0.85), (0.7, 0.75), (0.6, 0.65))
FLUID_FLOOR = 0.5


def fluid_keep_fraction(ratio: float) -> float:
    """FLuID's bucket for ``ratio = target time / straggler time``."""
    r = positive_float("time ratio", ratio)
    for lo, keep in FLUID_BUCKETS:
        if r >= lo:
            return keep
    return FLUID_FLOOR


def choose_width(ratio: float, widths: Sequence[float] = DEFAULT_WIDTHS) -> float:
    """cosearch 0.1's rule: the smallest allowed width >= ratio (1.0 above every width)."""
    ratio = positive_float("time ratio", ratio)
    widths = _widths(widths)
    if ratio >= 1.0:
        return 1.0
    for w in sorted(widths):
        if w >= ratio - 1e-12:
            return w
    return 1.0


def _widths(widths) -> tuple[float, ...]:
    """Allowed widths: a non-empty list of fractions in (0, 1]."""
    if isinstance(widths, (str, bytes)) or not hasattr(widths, "__iter__"):
        raise ValueError(f"widths must be a list of fractions in (0, 1], got {widths!r}")
    out = tuple(unit_fraction("each width", w) for w in widths)
    if not out:
        raise ValueError("widths is empty: give at least one fraction in (0, 1]")
    return out


def valid_duration(d) -> bool:
    """A round time a client may report: a positive finite number of seconds (not a bool)."""
    return isinstance(d, (int, float)) and not isinstance(d, bool) and math.isfinite(d) and d > 0


class StragglerProfiler:
    """Straggler set and keep fractions from observed round durations (module docstring).

    ``observe(round, durations, keep)`` is the update step; ``keep_fractions()`` and
    ``stragglers`` are queries that never change the profiler.
    """

    def __init__(self, num_clients: int, *, fraction: float | None = None, rule: str = "fluid",
                 widths=DEFAULT_WIDTHS, start_round: int = 2, hysteresis: bool = True, readapt: bool = False,
                 costs=None, min_keep: float = FLUID_FLOOR, min_margin: float = 0.05, window: int = 20,
                 keep_confidence: float | None = None):
        if not isinstance(num_clients, int) or num_clients < 2:
            raise ValueError(f"need at least 2 clients to have stragglers, got {num_clients!r}")
        widths = _widths(widths)
        if fraction is not None and (isinstance(fraction, bool) or not isinstance(fraction, (int, float))
                                     or not 0.0 < fraction < 1.0):
            raise ValueError(f"straggler fraction must be in (0, 1), got {fraction!r}")
        if rule not in RULES:
            raise ValueError(f"rule={rule!r}; choose one of {RULES}")
        if rule == "model" and costs is None:
            raise ValueError("rule='model' needs costs: p -> (FLOPs ratio, bytes ratio) of the sub-model at "
                             "keep fraction p (RoundProtocol sizes them from the model)")
        min_keep = unit_fraction("min_keep", min_keep)
        nonneg_float("min_margin", min_margin)
        window = positive_int("window", window, 100_000)
        if window < 2:
            raise ValueError(f"window must be at least 2 rounds, got {window!r}")
        self.n, self.fraction, self.rule, self.widths = num_clients, fraction, rule, tuple(widths)
        self.start_round = positive_int("start_round", start_round, 10**9)
        self.hysteresis, self.readapt = flag("hysteresis", hysteresis), flag("readapt", readapt)
        self.full_time: dict[int, float] = {}
        self._stragglers: list[int] = []
        self._keep: dict[int, float] = {}
        self._frozen = 0
        self._last_round = 0
        #: rule="model": the per-client time model, swaps made, and per decided round the target
        #: and each straggler's predicted time at its keep fraction
        self.swaps = 0
        self.decisions: list[dict] = []
        if rule == "model":
            from statistics import NormalDist

            from .controller import KEEP_CONFIDENCE, ClientTimeModel, keep_grid
            self.time_model = ClientTimeModel(costs, window)
            self.grid = keep_grid(min_keep)
            self.min_margin = float(min_margin)
            q = KEEP_CONFIDENCE if keep_confidence is None else keep_confidence
            if isinstance(q, bool) or not isinstance(q, (int, float)) or not 0.5 <= q < 1.0:
                raise ValueError(f"keep_confidence must be a probability in [0.5, 1), got {q!r}: the chance "
                                 "that a straggler's chosen keep finishes within the target (0.5: no margin)")
            self.keep_confidence = float(q)
            #: the margin, in standard errors of the predicted log ratio, below the target
            self._keep_z = NormalDist().inv_cdf(self.keep_confidence)
        elif keep_confidence is not None:
            raise ValueError(f"keep_confidence applies to rule='model' only, not rule={rule!r}")

    @property
    def stragglers(self) -> list[int]:
        return list(self._stragglers)

    def _count(self) -> int:
        k = 1 if self.fraction is None else max(1, int(self.fraction * self.n))
        return min(k, self.n - 1)

    def _bucket(self, ratio: float) -> float:
        return fluid_keep_fraction(ratio) if self.rule == "fluid" else choose_width(ratio, self.widths)

    def _assign(self) -> None:
        others = [c for c in self.full_time if c not in self._stragglers]
        if not others:
            return
        target = max(self.full_time[c] for c in others)
        self._keep = {c: self._bucket(min(1.0, target / self.full_time[c])) for c in self._stragglers}

    def _largest_keep_within(self, client: int, target_client: int) -> tuple[float, float]:
        """rule="model": the largest grid keep whose predicted time for ``client`` is within the
        target, ``target_client``'s predicted full time, with probability ``keep_confidence`` (the
        smallest keep when none is), and that predicted time (:mod:`cosearch.fl.controller`,
        **Decisions**)."""
        tm = self.time_model
        target = self.full_time[target_client]
        times = tm.predict_many(client, self.grid)
        margin = 0.0
        if self._keep_z > 0.0:
            margin = self._keep_z * math.hypot(tm.standard_error(client), tm.standard_error(target_client))
        fits = np.flatnonzero(times * math.exp(margin) <= target)
        i = int(fits[-1]) if len(fits) else 0
        return float(self.grid[i]), float(times[i])

    def _observe_model(self, round: int, durations: dict[int, float], keep: dict[int, float]) -> None:
        """rule="model" (:mod:`cosearch.fl.controller`): predict, pick, swap on a margin."""
        tm = self.time_model
        for c, d in durations.items():
            tm.observe(c, float(keep.get(c, 1.0)), float(d))
        for c in durations:            # only these clients' histories changed
            self.full_time[c] = tm.predict(c, 1.0)
        if round < self.start_round or len(self.full_time) < 2:
            return
        ft = self.full_time
        if not self._stragglers:
            self._stragglers = sorted(ft, key=lambda c: -ft[c])[:self._count()]
        else:
            others = [c for c in ft if c not in self._stragglers]
            while others:
                slow = max(others, key=lambda c: ft[c])
                fast = min(self._stragglers, key=lambda c: ft[c])
                margin = max(self.min_margin, 2.0 * tm.error(slow, fast))
                if ft[slow] <= ft[fast] * math.exp(margin):
                    break
                self._stragglers[self._stragglers.index(fast)] = slow
                others[others.index(slow)] = fast
                self.swaps += 1
        others = [c for c in ft if c not in self._stragglers]
        slowest = max(others, key=lambda c: ft[c])
        self._keep, predicted = {}, {}
        for s in self._stragglers:
            self._keep[s], predicted[s] = self._largest_keep_within(s, slowest)
        self.decisions.append({"round": int(round) + 1, "target_s": float(ft[slowest]), "predicted_s": predicted,
                               "swaps": self.swaps})

    def observe(self, round: int, durations: dict[int, float], keep: dict[int, float]) -> None:
        """Record round ``round``'s durations (seconds) of clients that ran at ``keep``."""
        for c, d in durations.items():
            if not valid_duration(d):
                raise ValueError(f"client {c} reported round time {d!r}; it must be a positive finite number")
        self._last_round = max(self._last_round, int(round))
        if self.rule == "model":
            self._observe_model(round, durations, keep)
            return
        for c, d in durations.items():
            self.full_time[c] = float(d) / float(keep.get(c, 1.0))
        if round < self.start_round or len(self.full_time) < 2:
            return
        if not self._stragglers:
            ranked = sorted(self.full_time, key=lambda c: -self.full_time[c])
            self._stragglers = ranked[:self._count()]
            self._assign()
            return
        if self._frozen > 0:
            self._frozen -= 1
            if self.readapt:
                self._assign()
            return
        others = [c for c in self.full_time if c not in self._stragglers]
        changed = False
        while others:
            slow = max(others, key=lambda c: self.full_time[c])
            fast = min(self._stragglers, key=lambda c: self.full_time[c])
            if self.full_time[slow] <= self.full_time[fast]:
                break
            self._stragglers[self._stragglers.index(fast)] = slow
            others[others.index(slow)] = fast
            changed = True
        if changed:
            self._frozen = 1 if self.hysteresis else 0
        if changed or self.readapt:
            self._assign()

    def keep_fractions(self, participants=None) -> dict[int, float]:
        """Keep fraction per straggler for the next round (clients not listed run the full model).

        ``participants``: the clients sampled for the round when not every client trains (client
        sampling).  The stragglers are then chosen among them each round: the slowest
        ``fraction`` of the participants whose full-model time is known (one when ``fraction`` is
        None), each cut to the slowest other participant's full-model time (predicted by the
        time model for ``rule="model"``; FLuID's buckets or the ceiling rule otherwise).
        Participants never seen run the full model.  A query: the profiler does not change."""
        if participants is None:
            return dict(self._keep)
        part = sorted({int(c) for c in participants})
        if set(part) >= set(range(self.n)):
            return dict(self._keep)
        return self._sampled_keep(part)

    def _sampled_keep(self, part: list[int]) -> dict[int, float]:
        ft = self.full_time
        seen = sorted((c for c in part if c in ft), key=lambda c: -ft[c])
        if len(seen) < 2 or self._last_round < self.start_round:
            return {}
        k = 1 if self.fraction is None else max(1, int(self.fraction * len(part)))
        k = min(k, len(seen) - 1)
        stragglers, others = seen[:k], seen[k:]
        slowest = max(others, key=lambda c: ft[c])
        keep = {}
        for s in stragglers:
            if self.rule == "model":
                keep[s] = self._largest_keep_within(s, slowest)[0]
            else:
                keep[s] = self._bucket(min(1.0, ft[slowest] / ft[s]))
        return {c: p for c, p in keep.items() if p < 1.0}


# ----------------------------------------------------------------------------- device model
@dataclass(frozen=True)
class ClientProfile:
    """A client device: achieved training FLOP/s, link bandwidths (bytes/s), one-way
    latency (s) and the coefficient of variation of per-round log-normal noise."""

    flops_per_s: float
    downlink_Bps: float
    uplink_Bps: float
    latency_s: float = 0.05
    noise_cv: float = 0.0
    name: str = ""

    def __post_init__(self):
        positive_float("flops_per_s", self.flops_per_s)
        positive_float("downlink_Bps", self.downlink_Bps)
        positive_float("uplink_Bps", self.uplink_Bps)
        nonneg_float("latency_s", self.latency_s)
        nonneg_float("noise_cv", self.noise_cv)

    def round_time_s(self, train_flops: float, nbytes: float, rng: np.random.Generator | None = None,
                     client: int = 0, round: int = 0) -> float:
        t = (2 * self.latency_s + nbytes / self.downlink_Bps + train_flops / self.flops_per_s
             + nbytes / self.uplink_Bps)
        if self.noise_cv > 0 and rng is not None:
            s = math.sqrt(math.log1p(self.noise_cv ** 2))
            t *= float(rng.lognormal(-0.5 * s * s, s))
        return t


class TraceProfile:
    """Measured full-model round times ``seconds[client, round]`` from a CSV with columns
    ``client,round,seconds`` (rounds from 1; a missing round repeats the client's last one).
    A sub-model's time is the full time scaled by ``sub FLOPs / full FLOPs``."""

    def __init__(self, seconds: dict[tuple[int, int], float]):
        if not isinstance(seconds, dict) or not seconds:
            raise ValueError("a trace needs at least one (client, round): seconds entry")
        for key, t in seconds.items():
            if (not isinstance(key, tuple) or len(key) != 2 or
                    any(isinstance(x, bool) or not isinstance(x, (int, np.integer)) for x in key)
                    or key[0] < 0 or key[1] < 1):
                raise ValueError(f"a trace's keys are (client >= 0, round >= 1) pairs of integers, got {key!r}")
            if not valid_duration(t):
                raise ValueError(f"a trace's time for client {key[0]} in round {key[1]} must be a positive finite "
                                 f"number of seconds, got {t!r}")
        self.seconds = {(int(c), int(r)): float(t) for (c, r), t in seconds.items()}
        self.clients = sorted({c for c, _ in seconds})

    @classmethod
    def from_csv(cls, path: str | os.PathLike) -> TraceProfile:
        from .._json import read_text_file
        out: dict[tuple[int, int], float] = {}
        text = read_text_file(path, "device trace")             # a binary or missing file refused by name
        reader = csv.DictReader(io.StringIO(text, newline=""))
        need = {"client", "round", "seconds"}
        if reader.fieldnames is None or not need <= set(reader.fieldnames):
            raise ValueError(f"{path}: a trace CSV needs the columns client,round,seconds; "
                             f"got {reader.fieldnames}")
        for i, row in enumerate(reader, start=2):
            try:
                c, r, s = int(row["client"]), int(row["round"]), float(row["seconds"])
            except (TypeError, ValueError):
                raise ValueError(f"{path}:{i}: client and round must be integers and seconds a "
                                 f"number, got {row}") from None
            if c < 0 or r < 1 or not (math.isfinite(s) and s > 0):
                raise ValueError(f"{path}:{i}: need client >= 0, round >= 1, seconds > 0; got {row}")
            out[(c, r)] = s
        return cls(out)

    def full_time_s(self, client: int, round: int) -> float:
        rounds = [r for c, r in self.seconds if c == client and r <= round]
        if not rounds:
            raise ValueError(f"the trace has no time for client {client} at or before round {round}")
        return self.seconds[(client, max(rounds))]

    def round_time_s(self, client: int, round: int, flops_ratio: float) -> float:
        return self.full_time_s(client, round) * flops_ratio


def device_profiles(n: int, spread: float = 2.5, noise_cv: float = 0.05,
                    base_flops_per_s: float = 2e8, link_Bps: float = 2e6, latency_s: float = 0.02
                    ) -> list[ClientProfile]:
    """``n`` illustrative clients: client ``i`` computes ``1 + (spread - 1) i / (n - 1)``
    times slower than client 0 (the last one is the straggler), equal links.  The defaults
    (0.2 GFLOP/s achieved in small-batch training, 2 MB/s, 20 ms) are an order of magnitude
    for phone-class devices running an interpreted training loop, not a measurement."""
    positive_int("clients", n, 1_000_000)
    if positive_float("spread", spread) < 1.0:
        raise ValueError(f"spread is the slowest client's time over the fastest's, at least 1; got {spread!r}")
    for name, x in (("noise_cv", noise_cv), ("latency_s", latency_s)):
        nonneg_float(name, x)
    positive_float("base_flops_per_s", base_flops_per_s)
    positive_float("link_Bps", link_Bps)
    out = []
    for i in range(n):
        slow = 1.0 + (spread - 1.0) * (i / (n - 1) if n > 1 else 0.0)
        out.append(ClientProfile(base_flops_per_s / slow, link_Bps, link_Bps, latency_s, noise_cv, f"client{i}"))
    return out


# ----------------------------------------------------------------------------- model costs
def forward_flops_by_module(model, example_input) -> dict[str, float]:
    """Forward FLOPs of one sample (multiply-add = 2 FLOPs) per Linear, Conv2d and LSTM layer
    (by module name), counted with forward hooks on one example batch."""
    import torch
    import torch.nn as nn

    total: dict[str, float] = {}

    def hook_for(name):
        def hook(mod, inp, out):
            x = inp[0]
            b = x.shape[0] if x.dim() > 1 else 1
            f = 0.0
            if isinstance(mod, nn.Linear):
                f = 2.0 * mod.in_features * mod.out_features * (x.numel() / mod.in_features) / b
            elif isinstance(mod, nn.Conv2d):
                k = mod.kernel_size[0] * mod.kernel_size[1] * mod.in_channels / mod.groups
                f = 2.0 * k * out[0].numel()
            elif isinstance(mod, nn.LSTM):
                steps = x.shape[1] if mod.batch_first else x.shape[0]
                h, i = mod.hidden_size, mod.input_size
                f = 2.0 * 4 * h * (i + h) * steps * mod.num_layers
            total[name] = total.get(name, 0.0) + f
        return hook

    hooks = [m.register_forward_hook(hook_for(n)) for n, m in model.named_modules()
             if isinstance(m, (nn.Linear, nn.Conv2d, nn.LSTM))]
    try:
        with torch.no_grad():
            model.eval()
            model(example_input[:1])
    finally:
        for h in hooks:
            h.remove()
    return total


def forward_flops(model, example_input) -> float:
    """Forward FLOPs of one sample (multiply-add = 2 FLOPs) of Linear, Conv2d and LSTM layers
    (:func:`forward_flops_by_module`, summed)."""
    return float(sum(forward_flops_by_module(model, example_input).values()))


def training_flops(model: nn.Module, example_input: torch.Tensor, samples: int, epochs: int = 1) -> float:
    """FLOPs of local training: 3 x forward (forward + backward) per sample per epoch."""
    import torch

    from .._validate import positive_int
    if not isinstance(model, torch.nn.Module):
        raise ValueError(f"training_flops: model must be a torch.nn.Module, got {type(model).__name__}")
    if not isinstance(example_input, torch.Tensor):
        raise ValueError(f"training_flops: example_input must be a torch.Tensor, got {type(example_input).__name__}")
    samples, epochs = positive_int("samples", samples), positive_int("epochs", epochs)
    return 3.0 * forward_flops(model, example_input) * samples * epochs


def model_bytes(model) -> int:
    """Bytes of the model's floating-point state (what is sent down and up)."""
    return int(sum(v.numel() * v.element_size() for v in model.state_dict().values() if v.is_floating_point()))
