"""Neuron-selection policies: which units a straggler's sub-model keeps.

Every policy drops exactly :func:`drop_count` ``= n - int(p n)`` units of an ``n``-unit
layer at keep fraction ``p`` (at least one unit is kept), as FLuID's code does for all of
its methods, so the methods differ only in *which* units they drop.

* :class:`InvariantDropout` (FLuID, NeurIPS 2023): drop neurons whose weights barely change
  on the non-stragglers.  An element is invariant at threshold ``th`` when its relative
  change ``|w_k - w| / |w|`` is ``<= th`` on at least ``quorum`` (75%) of the
  non-stragglers; a neuron is invariant when all its incoming weights, its bias and its
  outgoing weights are (:mod:`cosearch._kernels.magnitude`).

  ``threshold="fluid"`` (default) follows FLuID's servers: the threshold is calibrated from
  the non-stragglers' updates in rounds 2 and 3 (round 2: the smallest, over neurons, of a
  neuron's largest relative change; round 3: the mean of that value and the new smallest),
  then kept, and grown additively late in training (:class:`ThresholdSchedule`; growth
  stops for good once its layer has enough invariant neurons).  Drop order per layer:
  neurons this straggler dropped last round that are still invariant; then the other
  invariant neurons; then a random fill; when a class has more candidates than needed, a
  random sample of it is dropped.
  ``threshold="adaptive"`` is cosearch 0.1's rule, kept for comparison: every round the
  threshold restarts at the least-changing neuron's score and is multiplied by ``growth``
  until enough neurons are invariant; invariant neurons are then dropped least-change first.
* :class:`OrderedDropout` (FjORD's ordered masks, FLuID's baseline): keep the first
  ``n - drop_count`` units of a straggler's layers.
* :class:`FjORD` (Horváth et al., NeurIPS 2021, and Flower Baselines' ``fjord`` in its default
  mode, without distillation): a client gets the widest sub-model it can afford, ``p_max`` (the
  largest width of ``P = {0.2, 0.4, 0.6, 0.8, 1.0}``, the paper's uniform ``D_P`` with k = 5,
  within the keep fraction the straggler controller gives it; 1 for the others), and every
  local batch trains a width sampled uniformly from ``P`` up to ``p_max`` inside it
  (:func:`cosearch.fl.simulation.train_nested`).  A width ``p`` keeps the first ``ceil(p K)``
  of a layer's ``K`` units (the paper's ordered dropout; :func:`nested_units`).
* :class:`FjORDDistill` (``"fjord-kd"``): the same with self-distillation, as the paper trains
  it: the ``p_max`` model's cross-entropy on the labels, then the sampled width's
  cross-entropy against the ``p_max`` model's softmax, one optimiser step for both.
* :class:`HeteroFL` (Diao et al., ICLR 2021, and its code ``dem123456789/HeteroFL``): width
  tiers ``1, 1/2, 1/4, 1/8, 1/16`` (the paper's ``a``-``e``), each keeping the first ``ceil(r K)``
  units.  Tiers come from stated proportions (fixed per client, or drawn each round), or, by
  default, from the straggler controller: a client gets the largest tier within its first keep
  fraction below 1 and keeps it (a device class; so a straggler allowed 0.85 trains tier 1/2,
  the paper's halving).  As the paper trains: the Scaler divides each hidden layer's output by
  the rate in local training; the cross-entropy is masked to the client's own labels (absent
  labels' logits zeroed, as its code does); every parameter is averaged over the clients that
  hold it, one vote per client; the output layer's rows over the clients holding each label.
* :class:`FIARSE` (Wu et al., NeurIPS 2024; :mod:`cosearch.fl.fiarse`): no unit is cut; the
  straggler trains the full-shape model with the parameters of largest magnitude only (one
  threshold over all layers, its parameter budget the width-``p`` sub-model's), with the
  threshold-controlled gradient, and every entry is averaged over the clients that trained it.
* :class:`RandomDropout` (Federated Dropout): keep a random ``n - drop_count`` units.
* :class:`NoDropout`: keep everything (FedAvg with the full model).

Policies separate queries from updates: ``masks(p, groups, rng, client)`` and
``invariant(layer)`` never change the policy; ``observe(round, global_state,
client_states, groups)`` (the non-stragglers' accepted weights) and ``record(client,
masks)`` (what a straggler was sent) are the explicit update steps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .._validate import choice, flag, fraction, nonneg_float, positive_float, positive_int
from .submodel import Group

__all__ = ["DropoutPolicy", "InvariantDropout", "OrderedDropout", "RandomDropout", "NoDropout", "FjORD", "FjORDDistill",
           "HeteroFL", "FIARSE",
           "FJORD_WIDTHS", "HETEROFL_TIERS", "nested_units",
           "ThresholdSchedule", "FLUID_SCHEDULES", "drop_count", "neuron_index", "flatten_state",
           "neuron_scores_numpy", "policy", "METHODS"]

#: Method names accepted by :func:`policy` (``invariant-adaptive``: the 0.1 threshold rule).
METHODS = ("invariant", "invariant-adaptive", "ordered", "random", "none", "fjord", "fjord-kd", "heterofl",
           "fiarse")


def _check_p(p: float) -> float:
    return fraction("kept fraction p", p)


def drop_count(p: float, n: int) -> int:
    """Units dropped from an ``n``-unit layer at keep fraction ``p``: ``n - int(p n)``
    (FLuID's ``numToDrop``; a 1e-9 guard keeps ``0.85 * 20`` at 17), at most ``n - 1``."""
    p = _check_p(p)
    n = positive_int("a layer's units n", n)
    return min(n - int(p * n + 1e-9), n - 1)


class DropoutPolicy:
    """Interface shared by the dropout methods (see the module docstring)."""

    name = "base"

    def observe(self, round: int, global_state: dict, client_states: list[dict], groups: list[Group]) -> None:
        """Update step: the full-model weights the non-stragglers returned this round."""

    def record(self, client: int, masks: dict[str, np.ndarray]) -> None:
        """Update step: ``client`` was sent the sub-model ``masks`` this round."""

    def masks(self, p: float, groups: list[Group], rng: np.random.Generator,
              client: int | None = None) -> dict[str, np.ndarray]:
        """Query: ``{layer: keep mask}`` for a straggler at keep fraction ``p``."""
        raise NotImplementedError

    def width(self, keep: float, client: int, rng: np.random.Generator) -> float:
        """The width ``client`` trains this round given the keep fraction the straggler
        controller allows it (1: not a straggler).  Most methods train exactly that."""
        return keep

    def widths(self) -> tuple[float, ...]:
        """The widths the method trains nested sub-models at (for per-width accuracy; empty when
        its sub-models are not nested)."""
        return ()

    def state(self) -> dict:
        """Scalars worth logging per round (thresholds, invariant counts)."""
        return {}


class NoDropout(DropoutPolicy):
    name = "none"

    def masks(self, p, groups, rng, client=None):
        _check_p(p)
        return {g.name: np.ones(g.units, dtype=bool) for g in groups}


class OrderedDropout(DropoutPolicy):
    name = "ordered"

    def masks(self, p, groups, rng, client=None):
        out = {}
        for g in groups:
            m = np.zeros(g.units, dtype=bool)
            m[: g.units - drop_count(p, g.units)] = True
            out[g.name] = m
        return out


#: FjORD's width set P (Horváth et al. 2021, uniform over k = 5 widths).
FJORD_WIDTHS = (0.2, 0.4, 0.6, 0.8, 1.0)
#: HeteroFL's width tiers a-e (Diao et al. 2021: hidden channel shrinkage ratio 1/2 per tier).
HETEROFL_TIERS = (1.0, 0.5, 0.25, 0.125, 0.0625)


def fjord_widths_within(keep: float) -> list[float]:
    """FjORD's widths a client with keep fraction ``keep`` affords (the smallest if none is)."""
    return [w for w in FJORD_WIDTHS if w <= keep + 1e-9] or [FJORD_WIDTHS[0]]


def nested_units(p: float, n: int) -> int:
    """Units a nested-width method keeps of an ``n``-unit layer at width ``p``: the first
    ``ceil(p n)`` (FjORD's ordered dropout, Horváth et al. 2021 sec. 3; HeteroFL's code rounds
    its channel counts up the same way), at least 1."""
    p = _check_p(p)
    return max(1, min(n, math.ceil(p * n - 1e-9)))


class _NestedWidths(OrderedDropout):
    """Ordered masks at a nested width: the first ``ceil(p K)`` units (:func:`nested_units`)."""

    def masks(self, p, groups, rng, client=None):
        out = {}
        for g in groups:
            m = np.zeros(g.units, dtype=bool)
            m[:nested_units(p, g.units)] = True
            out[g.name] = m
        return out


class FjORD(_NestedWidths):
    """FjORD: per-batch nested widths up to the client's ``p_max`` (module docstring)."""

    name = "fjord"
    #: the client trains nested widths per local batch (FjORD's training)
    nested = True
    #: the widest model is not a teacher in this mode
    distill = False

    def width(self, keep, client, rng):
        return max(fjord_widths_within(keep))

    def widths(self):
        return FJORD_WIDTHS


class FjORDDistill(FjORD):
    """FjORD with per-batch widths and self-distillation (module docstring)."""

    name = "fjord-kd"
    #: the client trains nested widths per batch with the widest as its teacher
    distill = True


class HeteroFL(_NestedWidths):
    """HeteroFL (Diao et al., ICLR 2021) as its paper and code train it (module docstring).

    ``proportions``: ``{tier: share}`` of the clients at each tier (the paper's fixed
    computation-capability mixes, e.g. ``{1.0: 0.5, 0.25: 0.5}``); ``None``: a client's tier is
    the largest within its first keep fraction below 1 from the straggler controller (cosearch's
    device-driven reading).  ``dynamic``: with proportions, every round draws each client's tier
    from them (the paper's "dynamic" mode) instead of fixing it."""

    name = "heterofl"
    #: averaging as the paper does: each parameter over the clients that hold it, one vote each
    count_clients = True
    #: the Scaler module: a sub-model of rate r scales each hidden layer's output by 1/r in training
    scaler = True
    #: masked cross-entropy: logits of labels a client does not hold are zeroed (HeteroFL's code)
    masked_labels = True
    #: the output layer's rows (classes) are averaged over the clients that hold each label
    label_split = True

    def __init__(self, proportions: dict[float, float] | None = None, dynamic: bool = False):
        self.tier: dict[int, float] = {}
        self._dealt: list[float] = []
        self.dynamic = flag("HeteroFL dynamic", dynamic)
        self.proportions = None
        if proportions is not None:
            if not isinstance(proportions, dict) or not proportions:
                raise ValueError("HeteroFL proportions must be a non-empty {tier: share} dict")
            bad = [t for t in proportions if isinstance(t, bool) or t not in HETEROFL_TIERS]
            if bad:
                raise ValueError(f"HeteroFL tiers {bad} are not among {HETEROFL_TIERS}")
            for t, v in proportions.items():
                nonneg_float(f"HeteroFL proportion of tier {t}", v)
            total = sum(float(v) for v in proportions.values())
            if not math.isclose(total, 1.0, abs_tol=1e-9):
                raise ValueError(f"HeteroFL proportions must be non-negative shares summing to 1, got {proportions}")
            self.proportions = {float(t): float(v) for t, v in sorted(proportions.items(), reverse=True)}
        elif dynamic:
            raise ValueError("HeteroFL dynamic tiers need proportions")

    def _fixed_tier(self, client: int) -> float:
        """Client ``client``'s tier under fixed proportions: tiers dealt in order so that every
        prefix of clients 0..c holds each tier in its share, to the nearest client (smooth
        weighted round-robin: client c takes the tier furthest below its share so far).  The
        deal is extended as far as needed and kept."""
        tiers = list(self.proportions)
        while len(self._dealt) <= client:
            c = len(self._dealt)
            counts = {t: self._dealt.count(t) for t in tiers}
            self._dealt.append(max(tiers, key=lambda t: (self.proportions[t] * (c + 1) - counts[t], t)))
        return self._dealt[client]

    def width(self, keep, client, rng):
        if self.proportions is not None:
            if self.dynamic:
                tiers = list(self.proportions)
                return float(tiers[int(rng.choice(len(tiers), p=[self.proportions[t] for t in tiers]))])
            return self._fixed_tier(int(client))
        if client in self.tier:
            return self.tier[client]
        if keep >= 1.0:
            return 1.0
        t = max([x for x in HETEROFL_TIERS if x <= keep + 1e-9] or [HETEROFL_TIERS[-1]])
        return t

    def record(self, client, masks):
        # the first sub-model a client is sent fixes its tier (its device class) for good
        if self.proportions is None and client not in self.tier:
            kept = [float(m.mean()) for m in masks.values()]
            self.tier[client] = min(HETEROFL_TIERS, key=lambda x: abs(x - max(kept)))

    def widths(self):
        return HETEROFL_TIERS

    def state(self):
        return {"tiers": {str(c): t for c, t in sorted(self.tier.items())}}


class FIARSE(DropoutPolicy):
    """FIARSE (Wu et al., NeurIPS 2024), importance-aware extraction parameter by parameter
    (:mod:`cosearch.fl.fiarse`): every unit is kept, and the round protocol sends a straggler a
    magnitude threshold instead (:attr:`parameter_masks`)."""

    name = "fiarse"
    #: the sub-model is a per-parameter mask at a magnitude threshold, not a cut of units
    parameter_masks = True
    #: its server averages each entry over the clients that trained it, one vote each
    count_clients = True

    def masks(self, p, groups, rng, client=None):
        _check_p(p)
        return {g.name: np.ones(g.units, dtype=bool) for g in groups}


class RandomDropout(DropoutPolicy):
    name = "random"

    def masks(self, p, groups, rng, client=None):
        out = {}
        for g in groups:
            m = np.ones(g.units, dtype=bool)
            m[rng.choice(g.units, size=drop_count(p, g.units), replace=False)] = False
            out[g.name] = m
        return out


@dataclass(frozen=True)
class ThresholdSchedule:
    """How FLuID's invariance threshold is calibrated and grown.

    ``scope``: ``"first"`` — one threshold, calibrated on the first droppable layer (FLuID's
    FEMNIST server); ``"mean"`` — one threshold, the mean of the layers' calibration values
    (Shakespeare: its two LSTM layers); ``"per_layer"`` — one threshold per layer (CIFAR-10).
    ``calibration_start``: the first of the two observed rounds whose updates set the
    threshold (FLuID: rounds 2 and 3).
    ``growth_after``: growth starts after this fraction of the run's rounds;
    every ``growth_period`` rounds the threshold grows by ``growth_step`` until its layer has
    enough invariant neurons.  ``initial``: the value before calibration.

    FLuID's values (iwang05/FLuID servers): FEMNIST 250 rounds, +0.01 every 10 rounds after
    round 125; CIFAR-10 35 rounds, +0.2 every 2 rounds after round 10, per layer;
    Shakespeare 60 rounds, +1.0 every 3 rounds after round 20 (:data:`FLUID_SCHEDULES`, with
    those absolute rounds as ``growth_start``: a shorter run never grows, as in FLuID).
    """

    scope: str = "first"
    growth_after: float = 0.5
    growth_period: int = 10
    growth_step: float = 0.01
    initial: float = 0.1
    calibration_start: int = 2
    #: the round after which growth counts, as FLuID's servers fix it (``rnd > 125``); None:
    #: ``growth_after`` of the run's rounds
    growth_start: int | None = None

    def __post_init__(self):
        choice("scope", self.scope, ("first", "mean", "per_layer"))
        if nonneg_float("growth_after", self.growth_after) > 1.0:
            raise ValueError(f"growth_after is a fraction of the rounds in [0, 1], got {self.growth_after!r}")
        object.__setattr__(self, "growth_period", positive_int("growth_period", self.growth_period, 10**9))
        if self.growth_start is not None and (isinstance(self.growth_start, bool) or
                                              not isinstance(self.growth_start, int) or self.growth_start < 0):
            raise ValueError(f"growth_start must be a round number >= 0 or None, got {self.growth_start!r}")
        positive_float("growth_step", self.growth_step)
        positive_float("initial", self.initial)
        object.__setattr__(self, "calibration_start", positive_int("calibration_start", self.calibration_start, 10**9))

    def start_round(self, total_rounds: int | None) -> float:
        """Growth applies in rounds strictly after this one (never when the total is unknown)."""
        if self.growth_start is not None:
            return float(self.growth_start)
        return math.inf if total_rounds is None else self.growth_after * total_rounds

    @classmethod
    def for_dataset(cls, name: str) -> ThresholdSchedule:
        """FLuID's schedule for ``femnist``, ``cifar10`` or ``shakespeare``; FEMNIST's otherwise."""
        return FLUID_SCHEDULES.get(name, FLUID_SCHEDULES["femnist"])


FLUID_SCHEDULES = {
    "femnist": ThresholdSchedule("first", 125 / 250, 10, 0.01, 0.1, growth_start=125),
    "cifar10": ThresholdSchedule("per_layer", 10 / 35, 2, 0.2, 1.5, growth_start=10),
    "shakespeare": ThresholdSchedule("mean", 20 / 60, 3, 1.0, 30.0, growth_start=20),
}


def flatten_state(state: dict, names: list[str]) -> np.ndarray:
    return np.concatenate([np.asarray(state[n].detach().cpu().numpy() if hasattr(state[n], "detach")
                                      else state[n], dtype=np.float32).ravel() for n in names])


def neuron_index(state: dict, groups: list[Group]):
    """(param names, :class:`~cosearch._kernels.magnitude.NeuronMap`, group offsets) of the
    flattened params the groups touch: each tensor viewed as (first axis) x (the rest), its
    rows mapped to the neuron they enter (axis-0 slices) and its columns to the neuron they
    leave (axis-1 slices), -1 for none."""
    from .._kernels.magnitude import make_map
    names = sorted({s.name for g in groups for s in g.slices})
    shapes = [tuple(int(d) for d in state[n].shape) for n in names]
    rowmaps = [np.full(sh[0] if sh else 1, -1, dtype=np.int64) for sh in shapes]
    colmaps = [np.full(int(np.prod(sh[1:])) if len(sh) > 1 else 1, -1, dtype=np.int64) for sh in shapes]
    offsets = np.concatenate([[0], np.cumsum([g.units for g in groups])]).astype(np.int64)
    for gi, g in enumerate(groups):
        for s in g.slices:
            k = names.index(s.name)
            shape = shapes[k]
            ids = np.full(shape[s.axis], -1, dtype=np.int64)
            for j in range(g.units):
                one = np.zeros(g.units, dtype=bool)
                one[j] = True
                ids[s.indices(one)] = offsets[gi] + j
            if s.axis == 0:
                sel = ids >= 0
                rowmaps[k][sel] = ids[sel]
            elif s.axis == 1:
                inner = int(np.prod(shape[2:])) if len(shape) > 2 else 1
                full = np.repeat(ids, inner)
                sel = full >= 0
                colmaps[k][sel] = full[sel]
            else:
                raise ValueError(f"{s.name}: slices along axis {s.axis} are not supported")
    return names, make_map(shapes, rowmaps, colmaps), offsets


def neuron_scores_numpy(w, wk, quorum, eps, nin, nout, n_neurons):
    """NumPy version of :func:`cosearch._kernels.magnitude.neuron_scores` over per-element
    neuron arrays (``magnitude.expand``), written with partition/maximum.at: the benchmark's
    NumPy reference."""
    rel = np.abs(wk - w[None, :]) / (np.abs(w)[None, :] + eps)
    q = np.partition(rel, quorum - 1, axis=0)[quorum - 1].astype(np.float32)
    mx = rel.max(axis=0).astype(np.float32)
    out = np.zeros((2, n_neurons), dtype=np.float32)
    for row, v in ((0, q), (1, mx)):
        for idx in (nin, nout):
            a = idx >= 0
            np.maximum.at(out[row], idx[a], v[a])
    return out


class InvariantDropout(DropoutPolicy):
    """FLuID's Invariant Dropout (see the module docstring).

    ``schedule``: a :class:`ThresholdSchedule` or a dataset name (FLuID's values);
    ``total_rounds``: the run's length, which places the growth phase.
    """

    name = "invariant"

    def __init__(self, threshold: str = "fluid", schedule: ThresholdSchedule | str = "femnist",
                 total_rounds: int | None = None, quorum: float = 0.75, eps: float = 1e-12,
                 growth: float = 1.5, max_steps: int = 200):
        choice("threshold", threshold, ("fluid", "adaptive"))
        quorum = fraction("quorum", quorum)
        if positive_float("growth", growth) <= 1.0:
            raise ValueError(f"growth must be > 1, got {growth!r}")
        eps = positive_float("eps", eps)
        max_steps = positive_int("max_steps", max_steps, 100_000)
        if isinstance(schedule, str):
            schedule = ThresholdSchedule.for_dataset(schedule)
        if not isinstance(schedule, ThresholdSchedule):
            raise ValueError(f"schedule must be a ThresholdSchedule or a dataset name, got {schedule!r}")
        self.rule, self.schedule = threshold, schedule
        self.total_rounds = None if total_rounds is None else positive_int("total_rounds", total_rounds, 10**9)
        self.quorum, self.eps, self.growth, self.max_steps = quorum, eps, growth, max_steps
        if threshold == "adaptive":
            self.name = "invariant-adaptive"
        self.scores: dict[str, np.ndarray] | None = None       # quorum scores per layer
        self.max_scores: dict[str, np.ndarray] | None = None   # largest change per neuron
        self.thresholds: dict[str, float] = {}
        self.stopped: dict[str, bool] = {}
        self.last_dropped: dict = {}
        self._counter = 0
        self._calibrated = 0
        self._index = None
        #: rule "fluid": the invariant neurons the next round's masks use, fixed when a round is
        #: observed, after the growth step and before the calibration (FLuID's find_stable runs
        #: before find_min), so a calibration reaches the masks one round later
        self.mask_invariant: dict[str, np.ndarray] = {}

    # ------------------------------------------------------------------ updates
    def _score(self, global_state, client_states, groups):
        from .._kernels.magnitude import neuron_scores
        key = [g.name for g in groups]
        if self._index is None or self._index[0] != key:
            self._index = (key, *neuron_index(global_state, groups))
        _, names, nmap, offsets = self._index
        w = flatten_state(global_state, names)
        wk = np.stack([flatten_state(s, names) for s in client_states])
        q = max(1, math.ceil(self.quorum * len(client_states) - 1e-9))
        sc = neuron_scores(w, wk, q, np.float32(self.eps), nmap, int(offsets[-1]))
        self.scores = {g.name: sc[0, offsets[i]:offsets[i + 1]] for i, g in enumerate(groups)}
        self.max_scores = {g.name: sc[1, offsets[i]:offsets[i + 1]] for i, g in enumerate(groups)}

    def _calibration_values(self, groups) -> dict[str, float]:
        mins = {g.name: float(self.max_scores[g.name].min()) for g in groups}
        scope = self.schedule.scope
        if scope == "per_layer":
            return mins
        v = mins[groups[0].name] if scope == "first" else float(np.mean(list(mins.values())))
        return {g.name: v for g in groups}

    def observe(self, round, global_state, client_states, groups):
        """Score this round's non-straggler updates; calibrate and grow the threshold."""
        if not client_states:
            return
        self._score(global_state, client_states, groups)
        for g in groups:
            self.thresholds.setdefault(g.name, self.schedule.initial)
            self.stopped.setdefault(g.name, False)
        if self.rule != "fluid":
            return
        if round > self.schedule.start_round(self.total_rounds) and not all(self.stopped.values()):
            self._counter += 1
            if self._counter >= self.schedule.growth_period:
                self._counter = 0
                for g in groups:
                    if not self.stopped[g.name]:
                        self.thresholds[g.name] += self.schedule.growth_step
        prev = self.mask_invariant
        self.mask_invariant = {k: self.scores[k] <= self.thresholds[k] for k in self.scores}
        if self.schedule.scope == "first" and prev:
            # FLuID's FEMNIST server keeps a first-layer neuron in its invariant list for good
            first = groups[0].name
            if first in prev and len(prev[first]) == len(self.mask_invariant[first]):
                self.mask_invariant[first] = self.mask_invariant[first] | prev[first]
        if self._calibrated < 2 and round >= self.schedule.calibration_start:
            vals = self._calibration_values(groups)
            for k, v in vals.items():
                self.thresholds[k] = v if self._calibrated == 0 else 0.5 * (self.thresholds[k] + v)
            self._calibrated += 1

    def record(self, client, masks):
        """Remember what ``client`` dropped (preferred next time) and stop the growth of a
        threshold once its layer had enough invariant neurons to fill the drop — decided from
        the masks as they were built (FLuID sets its stop flag while building the sub-model, so
        the round's own growth step already sees it).  ``first`` scope: the first layer decides;
        ``mean`` (Shakespeare): the first layer, or a later one whose drop was filled from its
        invariant neurons but not from its previous drops alone (FLuID's Shakespeare server);
        ``per_layer``: each layer for itself."""
        prev = self.last_dropped.get(client, {})
        self.last_dropped[client] = {k: ~np.asarray(v, dtype=bool) for k, v in masks.items()}
        if self.scores is None or self.rule != "fluid":
            return
        need = {k: int((~np.asarray(v)).sum()) for k, v in masks.items() if k in self.scores}
        enough = {k: int(self.invariant(k).sum()) >= n for k, n in need.items()}
        if not enough:
            return
        scope = self.schedule.scope
        if scope == "per_layer":
            for k, ok in enough.items():
                self.stopped[k] = self.stopped[k] or ok
            return
        names = [k for k in self.scores if k in enough]
        ok = enough[names[0]]
        if scope == "mean":
            for k in names[1:]:
                kept = prev.get(k)
                from_prev = int((kept & self.invariant(k)).sum()) if kept is not None and \
                    len(kept) == len(self.invariant(k)) else 0
                ok = ok or (enough[k] and from_prev < need[k])
        if ok:
            for k in self.stopped:
                self.stopped[k] = True

    # ------------------------------------------------------------------ queries
    def invariant(self, layer: str, threshold: float | None = None) -> np.ndarray:
        """Invariant neurons of ``layer`` at ``threshold`` (default: the set the next masks use —
        rule "fluid": fixed before the last calibration step, see :attr:`mask_invariant`; else
        at the current threshold)."""
        if self.scores is None:
            raise ValueError("no non-straggler updates observed yet")
        if threshold is None and self.rule == "fluid" and layer in self.mask_invariant:
            return self.mask_invariant[layer]
        th = self.thresholds[layer] if threshold is None else threshold
        return self.scores[layer] <= th

    def _adaptive_threshold(self, sc: np.ndarray, k: int) -> float:
        th = float(sc.min())
        steps = 0
        while (sc <= th).sum() < k and steps < self.max_steps:
            th = th * self.growth if th > 0 else float(np.min(sc[sc > 0], initial=1e-12))
            steps += 1
        return th

    def masks(self, p, groups, rng, client=None):
        out = {}
        prev_all = self.last_dropped.get(client, {})
        for g in groups:
            n = g.units
            k = drop_count(p, n)
            keep = np.ones(n, dtype=bool)
            if k > 0 and self.scores is None:        # nothing observed yet: random fill
                keep[rng.choice(n, k, replace=False)] = False
            elif k > 0:
                sc = self.scores[g.name]
                prev = prev_all.get(g.name, np.zeros(n, dtype=bool))
                if self.rule == "adaptive":
                    inv = sc <= self._adaptive_threshold(sc, k)
                    first = np.flatnonzero(prev & inv)
                    second = np.flatnonzero(~prev & inv)
                    order = np.concatenate([first, second[np.argsort(sc[second], kind="stable")]])
                    chosen = order[:k]
                    if len(chosen) < k:
                        rest = np.setdiff1d(np.arange(n), chosen)
                        chosen = np.concatenate([chosen, rng.choice(rest, k - len(chosen), replace=False)])
                else:
                    inv = self.invariant(g.name)
                    chosen = _fluid_drop(prev & inv, inv, k, rng)
                keep[chosen] = False
            out[g.name] = keep
        return out

    def state(self):
        if self.scores is None:
            return {}
        out = {"invariant_counts": {k: int(self.invariant(k).sum()) for k in self.scores},
               # of those, the dead ones: no non-straggler changed them at all this round (a ReLU
               # unit that never fires); the rest are alive but changing slowly
               "dead_counts": {k: int((self.invariant(k) & (self.max_scores[k] <= 0)).sum()) for k in self.scores}}
        if self.rule == "fluid":
            out["thresholds"] = {k: float(v) for k, v in self.thresholds.items()}
        return out


def _fluid_drop(preferred: np.ndarray, invariant: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """FLuID's drop order: a sample of ``preferred`` if it holds ``k``; else all of it plus
    a sample of the other invariant neurons; else every invariant neuron plus a random fill."""
    pref = np.flatnonzero(preferred)
    if len(pref) >= k:
        return rng.choice(pref, k, replace=False)
    inv = np.flatnonzero(invariant)
    if len(inv) >= k:
        others = np.setdiff1d(inv, pref)
        return np.concatenate([pref, rng.choice(others, k - len(pref), replace=False)])
    rest = np.flatnonzero(~invariant)
    return np.concatenate([inv, rng.choice(rest, k - len(inv), replace=False)])


def policy(name: str, **kw) -> DropoutPolicy:
    """A dropout policy by name (:data:`METHODS`); keyword arguments go to its constructor."""
    choice("method", name, METHODS)
    table = {"invariant": InvariantDropout, "invariant-adaptive": InvariantDropout, "ordered": OrderedDropout,
             "random": RandomDropout, "none": NoDropout, "fjord": FjORD, "fjord-kd": FjORDDistill,
             "heterofl": HeteroFL, "fiarse": FIARSE}
    if name == "invariant-adaptive":
        kw = {"threshold": "adaptive", **kw}
    import inspect
    known = set(inspect.signature(table[name]).parameters)
    unknown = sorted(set(kw) - known)
    if unknown:       # a misspelt option: named, not a TypeError from the constructor
        raise ValueError(f"method {name!r} takes no option(s) {unknown}; its options: {sorted(known) or 'none'}")
    return table[name](**kw)
