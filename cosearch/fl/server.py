"""One federated round of dropout training, written once for every engine.

A round: **observe** the durations the clients reported → **keep fractions** per straggler
(:class:`~cosearch.fl.profiling.StragglerProfiler`) → **masks** per straggler (the
:mod:`dropout policy <cosearch.fl.masks>`) → **sub-models** → clients train → **merge** the
accepted updates (:func:`~cosearch.fl.submodel.merge_updates`) → **policy update** with the
accepted full-model updates only.

:class:`RoundProtocol` keeps queries and updates apart: :meth:`~RoundProtocol.assignments`
and :meth:`~RoundProtocol.submodel` never change it (the random fill of round ``r`` for
client ``c`` comes from a generator seeded by ``(seed, r, c)``, so asking twice gives the same
answer); :meth:`~RoundProtocol.aggregate` is the one update step.  The in-process simulation
(:func:`cosearch.fl.simulate`) and the Flower strategy (:mod:`cosearch.fl.flower`) both drive it.
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass, field

import numpy as np

from .masks import DropoutPolicy, OrderedDropout, ThresholdSchedule
from .masks import policy as make_policy
from .profiling import StragglerProfiler, model_bytes, training_flops, valid_duration
from .submodel import extract_submodel, full_masks, groups, merge_updates

__all__ = ["Assignment", "ClientUpdate", "RoundReport", "RoundProtocol"]

log = logging.getLogger("cosearch.fl")


@dataclass(frozen=True)
class Assignment:
    """What ``client`` trains this round: the full model (``keep == 1``) or the sub-model of
    ``masks``; ``threshold``: FIARSE's magnitude threshold (the client trains the parameters at or
    above it, :mod:`cosearch.fl.fiarse`), None for the other methods."""

    client: int
    keep: float
    masks: dict
    threshold: float | None = None

    def __post_init__(self) -> None:
        from .._validate import fraction, nonneg_float, nonneg_int
        nonneg_int("Assignment.client", self.client)
        fraction("Assignment.keep", self.keep)
        if not isinstance(self.masks, dict):
            raise ValueError(f"Assignment.masks must be a dict of the kept neurons per group, got "
                             f"{type(self.masks).__name__}")
        if self.threshold is not None:
            nonneg_float("Assignment.threshold", self.threshold)


def _output_layer(model) -> tuple[tuple[str, ...], int] | None:
    """The parameter names of the model's last Linear layer (its classifier) and its class count;
    None when the model has no Linear layer."""
    import torch.nn as nn
    last = None
    for name, mod in model.named_modules():
        if isinstance(mod, nn.Linear):
            last = (name, mod)
    if last is None:
        return None
    name, mod = last
    params = tuple(f"{name}.{p}" for p, _ in mod.named_parameters(recurse=False))
    return params, int(mod.out_features)


@dataclass
class ClientUpdate:
    """A client's returned weights (a state dict in the sub-model's shapes), example count
    and measured or simulated round duration in seconds."""

    client: int
    state: dict
    num_examples: float
    duration_s: float | None = None
    #: the labels the client's data holds (HeteroFL's label split of the output layer); None: all
    labels: tuple[int, ...] | None = None


@dataclass
class RoundReport:
    """What one round did: keep fractions, accepted and rejected clients (with reasons),
    durations, the round's time (slowest reporting client), and the policy's state."""

    round: int
    keep: dict[int, float]
    accepted: list[int]
    rejected: dict[int, str]
    durations_s: dict[int, float]
    round_time_s: float
    policy_state: dict = field(default_factory=dict)


def _linear_example(model):
    """An input for a model whose first layer is a Linear (what sizing its sub-models needs);
    other models must be given ``example_input``."""
    import torch
    first = next((m for m in model.modules() if isinstance(m, (torch.nn.Linear, torch.nn.Conv2d, torch.nn.LSTM,
                                                                torch.nn.Embedding))), None)
    if isinstance(first, torch.nn.Linear):
        return torch.zeros(2, first.in_features)
    raise ValueError("keep_rule='model' needs example_input (an input batch, to size the sub-models) for a "
                     "model that does not start with a Linear layer")


def _cost_table(model, example_input, gs):
    """p -> (training FLOPs ratio, bytes ratio) of the sub-model at keep fraction p over the full
    model's (:func:`~cosearch.fl.profiling.training_flops`, :func:`~cosearch.fl.profiling.model_bytes`),
    sized once per p with ordered masks (the sizes depend only on how many neurons each layer keeps,
    the same for every dropout method)."""
    full_f = training_flops(model, example_input, 1)
    full_b = model_bytes(model)
    table: dict[float, tuple[float, float]] = {1.0: (1.0, 1.0)}

    def costs(p: float) -> tuple[float, float]:
        key = round(float(p), 2)
        if key not in table:
            masks = OrderedDropout().masks(key, gs, np.random.default_rng(0))
            sub = extract_submodel(model, masks, example_input)
            table[key] = (training_flops(sub, example_input, 1) / full_f, model_bytes(sub) / full_b)
        return table[key]
    return costs


class RoundProtocol:
    """The round logic around a global torch ``model`` (see the module docstring).

    ``method``: invariant, invariant-adaptive, ordered, random or none (or pass ``policy``).
    ``schedule``: FLuID threshold schedule or dataset name; ``total_rounds`` places its growth.
    ``straggler_fraction``: None = one straggler (FLuID), else that fraction of the clients.
    ``keep_rule``: "model" (the controller of :mod:`cosearch.fl.controller`, default), "fluid"
    (FLuID's buckets) or "ceil".  ``keep_confidence`` ("model" only; None: 0.6): the probability
    with which a straggler's keep is predicted to finish within the target
    (:class:`~cosearch.fl.profiling.StragglerProfiler`; 0.5: no margin).
    """

    def __init__(self, model, num_clients: int, method: str = "invariant", *, policy: DropoutPolicy | None = None,
                 example_input=None, total_rounds: int | None = None,
                 schedule: ThresholdSchedule | str = "femnist", straggler_fraction: float | None = None,
                 keep_rule: str = "model", readapt: bool = False, seed: int = 0,
                 keep_confidence: float | None = None):
        self.model = model
        self.example = example_input
        self.groups = groups(model, example_input)
        self._output = _output_layer(model)
        if policy is None:
            kw = {"schedule": schedule, "total_rounds": total_rounds} if method.startswith("invariant") else {}
            policy = make_policy(method, **kw)
        self.policy = policy
        self.method = policy.name
        if self._by_parameter:
            from .fiarse import masked_parameters
            masked_parameters(model)         # refuses a model whose parameters it cannot mask, up front
        costs = None
        if keep_rule == "model":
            costs = _cost_table(model, example_input if example_input is not None else _linear_example(model),
                                self.groups)
        self.profiler = StragglerProfiler(num_clients, fraction=straggler_fraction, rule=keep_rule,
                                          readapt=readapt, costs=costs, keep_confidence=keep_confidence)
        self.num_clients = num_clients
        self.seed = int(seed)
        self._param_share: dict[float, float] = {}

    # ------------------------------------------------------------------ queries
    def global_state(self) -> dict:
        return {k: v.detach().clone() for k, v in self.model.state_dict().items()}

    def assignments(self, round: int, clients) -> dict[int, Assignment]:
        """Each client's model for round ``round`` (does not change the protocol)."""
        clients = list(clients)
        keep = {} if self.method == "none" else self.profiler.keep_fractions(clients)
        full = full_masks(self.groups)
        out = {}
        for c in clients:
            rng = np.random.default_rng([self.seed, int(round), int(c)])
            p = self.policy.width(keep.get(c, 1.0), c, rng)      # FjORD / HeteroFL pick their own widths
            if p < 1.0:
                out[c] = Assignment(c, p, self.policy.masks(p, self.groups, rng, client=c),
                                    self.parameter_threshold(p) if self._by_parameter else None)
            else:
                out[c] = Assignment(c, 1.0, full)
        return out

    @property
    def _by_parameter(self) -> bool:
        return bool(getattr(self.policy, "parameter_masks", False))

    def parameter_threshold(self, p: float) -> float:
        """FIARSE's threshold for a straggler at keep fraction ``p``: its model size is the
        parameter share of the width-``p`` sub-model (:mod:`cosearch.fl.fiarse`), the threshold
        that share's magnitude cut of the current global model."""
        from .fiarse import masked_parameters, threshold
        key = round(float(p), 6)
        if key not in self._param_share:
            names = set(masked_parameters(self.model))
            sub = extract_submodel(self.model, OrderedDropout().masks(key, self.groups, np.random.default_rng(0)),
                                   self.example)
            full = sum(v.numel() for k, v in self.model.state_dict().items() if k in names)
            kept = sum(v.numel() for k, v in sub.state_dict().items() if k in names)
            self._param_share[key] = kept / full
        return threshold(self.model, self._param_share[key])

    def submodel(self, assignment: Assignment):
        """A fresh copy of the global model, cut to the assignment's masks."""
        if assignment.keep >= 1.0:
            return copy.deepcopy(self.model)
        return extract_submodel(self.model, assignment.masks, self.example)

    # ------------------------------------------------------------------ the update step
    def aggregate(self, round: int, assignments: dict[int, Assignment], updates: list[ClientUpdate]) -> RoundReport:
        """Validate and merge ``updates``, then update the policy and the profiler."""
        gstate = self.global_state()
        rejected: dict[int, str] = {}
        batch, owners = [], []
        for u in updates:
            a = assignments.get(u.client)
            if a is None:
                rejected[u.client] = "no model was sent to this client this round"
                continue
            if not isinstance(u.state, dict):
                rejected[u.client] = f"update is a {type(u.state).__name__}, not a state dict"
                continue
            rows = None
            if a.threshold is not None:
                # FIARSE: the client's entries are its mask at the threshold it was sent
                from .fiarse import parameter_masks
                rows = parameter_masks(self.model, a.threshold)
            elif getattr(self.policy, "label_split", False) and u.labels is not None and self._output is not None:
                # HeteroFL: a client's output rows count only for the labels it holds
                keep = np.zeros(self._output[1], dtype=bool)
                keep[[k for k in u.labels if 0 <= int(k) < len(keep)]] = True
                rows = {name: keep for name in self._output[0]}
            # HeteroFL counts clients, one vote each; an invalid example count still goes to
            # merge_updates, which refuses it by name
            valid = isinstance(u.num_examples, (int, float)) and not isinstance(u.num_examples, bool) \
                and u.num_examples > 0
            weight = 1.0 if valid and getattr(self.policy, "count_clients", False) else u.num_examples
            batch.append((u.state, a.masks, weight, rows) if rows is not None else (u.state, a.masks, weight))
            owners.append(u)
        new, bad = merge_updates(gstate, batch, self.groups) if batch else (gstate, [])
        for i, reason in bad:
            rejected[owners[i].client] = reason
        accepted = [u for u in owners if u.client not in rejected]
        if accepted:
            self.model.load_state_dict(new)
        # what the stragglers were sent first: FLuID decides its growth stop while building the
        # sub-model, before the round's updates are observed
        for c, a in assignments.items():
            if a.keep < 1.0:
                self.policy.record(c, a.masks)
        full_states = [u.state for u in accepted if assignments[u.client].keep >= 1.0]
        self.policy.observe(round, gstate, full_states, self.groups)
        durations = {u.client: float(u.duration_s) for u in updates
                     if u.client in assignments and valid_duration(u.duration_s)}
        ok = {c: d for c, d in durations.items() if c not in rejected}
        if ok:
            self.profiler.observe(round, ok, {c: assignments[c].keep for c in ok})
        for c, reason in rejected.items():
            log.warning("round %d: rejected client %s: %s", round, c, reason)
        return RoundReport(round, {c: a.keep for c, a in assignments.items() if a.keep < 1.0},
                           [u.client for u in accepted], rejected, durations,
                           max(durations.values()) if durations else 0.0, self.policy.state())
