"""Neuron-selection policies: which units a straggler's sub-model keeps.

All policies share :class:`DropoutPolicy`: ``masks(p, groups, rng)`` returns
``{layer: keep mask}``; ``observe(global_state, client_states)`` feeds the weights the
non-stragglers returned this round (only Invariant Dropout uses them).

* :class:`InvariantDropout` (FLuID): drop neurons whose weights barely change on the
  non-stragglers (see :mod:`cosearch._kernels.magnitude` for the test and the score).
  The threshold starts at the least-changing neuron's score per layer and grows by
  ``growth`` until ``n - int(p n)`` neurons are invariant; drop preference: neurons
  dropped last round that are still invariant, then other invariant ones (least change
  first), then a random fill.  At least one neuron is kept.
* :class:`OrderedDropout` (FjORD): keep the first ``ceil(p n)`` units.
* :class:`RandomDropout` (Federated Dropout): keep a random ``max(1, int(p n))`` units.
* :class:`NoDropout`: keep everything (FedAvg with the full model).
"""

from __future__ import annotations

import math

import numpy as np

from .submodel import Group

__all__ = ["DropoutPolicy", "InvariantDropout", "OrderedDropout", "RandomDropout", "NoDropout",
           "neuron_index", "flatten_state", "neuron_scores_numpy", "policy"]


def _check_p(p: float) -> float:
    if not (0.0 < float(p) <= 1.0):
        raise ValueError(f"kept fraction p must be in (0, 1], got {p!r}")
    return float(p)


class DropoutPolicy:
    name = "base"

    def observe(self, global_state: dict, client_states: list[dict]) -> None:
        """Record the non-stragglers' returned weights (ignored by most policies)."""

    def masks(self, p: float, groups: list[Group], rng: np.random.Generator) -> dict[str, np.ndarray]:
        raise NotImplementedError


class NoDropout(DropoutPolicy):
    name = "none"

    def masks(self, p, groups, rng):
        _check_p(p)
        return {g.name: np.ones(g.units, dtype=bool) for g in groups}


class OrderedDropout(DropoutPolicy):
    name = "ordered"

    def masks(self, p, groups, rng):
        p = _check_p(p)
        out = {}
        for g in groups:
            m = np.zeros(g.units, dtype=bool)
            m[: max(1, math.ceil(p * g.units - 1e-9))] = True
            out[g.name] = m
        return out


class RandomDropout(DropoutPolicy):
    name = "random"

    def masks(self, p, groups, rng):
        p = _check_p(p)
        out = {}
        for g in groups:
            m = np.zeros(g.units, dtype=bool)
            m[rng.choice(g.units, size=max(1, int(p * g.units)), replace=False)] = True
            out[g.name] = m
        return out


def flatten_state(state: dict, names: list[str]) -> np.ndarray:
    return np.concatenate([state[n].detach().cpu().numpy().astype(np.float32).ravel() for n in names])


def neuron_index(state: dict, groups: list[Group]) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
    """(param names, nin, nout, group offsets): element -> neuron it enters (axis-0
    slices) / leaves (axis-1 slices), -1 for none, over the flattened params."""
    names = sorted({s.name for g in groups for s in g.slices})
    sizes = [int(np.prod(state[n].shape)) for n in names]
    starts = np.concatenate([[0], np.cumsum(sizes)])
    nin = np.full(starts[-1], -1, dtype=np.int64)
    nout = np.full(starts[-1], -1, dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum([g.units for g in groups])])
    for gi, g in enumerate(groups):
        for s in g.slices:
            k = names.index(s.name)
            shape = tuple(state[s.name].shape)
            ids = np.full(shape[s.axis], -1, dtype=np.int64)
            for j in range(g.units):
                one = np.zeros(g.units, dtype=bool)
                one[j] = True
                ids[s.indices(one)] = offsets[gi] + j
            bshape = [1] * len(shape)
            bshape[s.axis] = shape[s.axis]
            full = np.broadcast_to(ids.reshape(bshape), shape).ravel()
            target = nin if s.axis == 0 else nout
            seg = target[starts[k]:starts[k + 1]]
            sel = full >= 0
            seg[sel] = full[sel]
    return names, nin, nout, offsets


def neuron_scores_numpy(w, wk, quorum, eps, nin, nout, n_neurons):
    """NumPy reference of the magnitude kernel (same definition)."""
    rel = np.abs(wk - w[None, :]) / (np.abs(w)[None, :] + eps)
    q = np.partition(rel, quorum - 1, axis=0)[quorum - 1].astype(np.float32)
    out = np.zeros(n_neurons, dtype=np.float32)
    a = nin >= 0
    np.maximum.at(out, nin[a], q[a])
    b = nout >= 0
    np.maximum.at(out, nout[b], q[b])
    return out


class InvariantDropout(DropoutPolicy):
    """FLuID's Invariant Dropout (see module docstring)."""

    name = "invariant"

    def __init__(self, quorum: float = 0.75, eps: float = 1e-8, growth: float = 1.5, max_steps: int = 200):
        if not (0.0 < quorum <= 1.0):
            raise ValueError(f"quorum must be in (0, 1], got {quorum!r}")
        if growth <= 1.0:
            raise ValueError(f"growth must be > 1, got {growth!r}")
        self.quorum, self.eps, self.growth, self.max_steps = quorum, eps, growth, max_steps
        self.scores: dict[str, np.ndarray] | None = None
        self.thresholds: dict[str, float] = {}
        self.invariant_counts: dict[str, int] = {}
        self.last_dropped: dict[str, np.ndarray] = {}
        self._index = None

    def observe(self, global_state, client_states):
        if not client_states:
            return
        self._pending = (global_state, client_states)
        self.scores = None  # computed lazily against the groups

    def _compute(self, groups):
        from .._kernels.magnitude import neuron_scores
        gstate, cstates = self._pending
        if self._index is None or self._index[0] != [g.name for g in groups]:
            self._index = ([g.name for g in groups], *neuron_index(gstate, groups))
        _, names, nin, nout, offsets = self._index
        w = flatten_state(gstate, names)
        wk = np.stack([flatten_state(s, names) for s in cstates])
        q = max(1, math.ceil(self.quorum * len(cstates) - 1e-9))
        sc = neuron_scores(w, wk, q, np.float32(self.eps), nin, nout, int(offsets[-1]))
        self.scores = {g.name: sc[offsets[i]:offsets[i + 1]] for i, g in enumerate(groups)}

    def invariant(self, layer: str, th: float) -> np.ndarray:
        """Neurons of ``layer`` invariant at threshold ``th`` (scores from the last observe)."""
        return self.scores[layer] <= th

    def masks(self, p, groups, rng):
        p = _check_p(p)
        if getattr(self, "_pending", None) is not None and self.scores is None:
            self._compute(groups)
        out = {}
        for g in groups:
            n = g.units
            drop_n = min(n - max(1, int(p * n)), n - 1)
            keep = np.ones(n, dtype=bool)
            if drop_n <= 0:
                out[g.name] = keep
                continue
            if self.scores is None:  # nothing observed yet: random fill
                keep[rng.choice(n, drop_n, replace=False)] = False
                out[g.name] = keep
                continue
            sc = self.scores[g.name]
            th = float(sc.min())
            steps = 0
            while (sc <= th).sum() < drop_n and steps < self.max_steps:
                th = th * self.growth if th > 0 else float(np.min(sc[sc > 0], initial=1e-12))
                steps += 1
            inv = sc <= th
            self.thresholds[g.name] = th
            self.invariant_counts[g.name] = int(inv.sum())
            prev = self.last_dropped.get(g.name, np.zeros(n, dtype=bool))
            first = np.flatnonzero(prev & inv)
            second = np.flatnonzero(~prev & inv)
            second = second[np.argsort(sc[second], kind="stable")]
            chosen = list(first[:drop_n]) + list(second[: max(0, drop_n - len(first))])
            if len(chosen) < drop_n:
                rest = np.setdiff1d(np.arange(n), chosen)
                chosen += list(rng.choice(rest, drop_n - len(chosen), replace=False))
            keep[np.array(chosen[:drop_n], dtype=np.int64)] = False
            self.last_dropped[g.name] = ~keep
            out[g.name] = keep
        return out


def policy(name: str, **kw) -> DropoutPolicy:
    table = {"invariant": InvariantDropout, "ordered": OrderedDropout, "random": RandomDropout, "none": NoDropout}
    if name not in table:
        raise ValueError(f"unknown dropout method {name!r}; choose one of {sorted(table)}")
    return table[name](**kw)
