"""Sub-models of torch models by neuron masks, and merging their updates back.

A model's *droppable groups* are its hidden units: the output units of every
``nn.Linear`` but the last, the filters of every ``nn.Conv2d`` (with the
``BatchNorm2d`` that follows), and the hidden units of each single-layer
``nn.LSTM`` (all four gates of a unit together).  A group lists, for every
parameter or buffer it touches, the axis and the index map from kept units to
kept indices: identity, blocks (a conv filter feeding ``Flatten`` -> ``Linear``
owns ``H*W`` consecutive NCHW features) or gates (an LSTM unit owns row ``g*H+j``
of each of the four gates).

Supported containers: ``nn.Sequential`` of Linear / Conv2d / BatchNorm1d/2d / ReLU /
Tanh / Sigmoid / GELU / MaxPool2d / AvgPool2d / Flatten / Dropout, and models that
declare ``fl_groups()`` (as :class:`~cosearch.fl.models.ShakespeareLSTM` — LSTM units —
and :class:`~cosearch.fl.models.ResMLP` — residual blocks sharing one drop set per stage — do).  Anything
else raises ``ValueError`` naming the layer type.
"""

from __future__ import annotations

import copy
import logging
import math
import numbers
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    import torch
    from torch import nn

__all__ = ["Group", "ParamSlice", "groups", "extract_submodel", "merge_updates", "full_masks",
           "param_indices"]

log = logging.getLogger("cosearch.fl")

#: Largest accepted ``num_examples`` (exact in float64; keeps weighted sums finite).
MAX_EXAMPLES = 2.0 ** 53


@dataclass(frozen=True)
class ParamSlice:
    """Parameter ``name`` is indexed along ``axis`` by the kept units of a group:
    ``kind`` "direct" (unit j -> index j), "block" (j -> j*size .. j*size+size-1) or
    "gates" (j -> g*size + j for g in 0..3)."""

    name: str
    axis: int
    kind: str = "direct"
    size: int = 1

    def indices(self, keep: np.ndarray) -> np.ndarray:
        keep = np.flatnonzero(keep)
        if self.kind == "direct":
            return keep
        if self.kind == "block":
            return (keep[:, None] * self.size + np.arange(self.size)[None, :]).ravel()
        if self.kind == "gates":
            return np.concatenate([g * self.size + keep for g in range(4)])
        raise ValueError(f"unknown slice kind {self.kind!r}")


@dataclass(frozen=True)
class Group:
    """A droppable set of ``units`` neurons and the parameter slices they own."""

    name: str
    units: int
    slices: tuple[ParamSlice, ...]
    # (module path, attribute, kind) to update on the sub-model: kind "out"/"in" sizes
    attrs: tuple[tuple[str, str, str, int], ...] = ()


_ACTS = ("ReLU", "Tanh", "Sigmoid", "GELU", "MaxPool2d", "AvgPool2d", "Dropout", "Identity",
         "LeakyReLU", "SiLU")


def groups(model: nn.Module, example_input: torch.Tensor | None = None) -> list[Group]:
    """Droppable groups of ``model`` (see the module docstring)."""
    import torch
    import torch.nn as nn

    if hasattr(model, "fl_groups"):
        return list(model.fl_groups())
    if not isinstance(model, nn.Sequential):
        raise ValueError(f"unsupported model type {type(model).__name__}: use nn.Sequential or define fl_groups()")
    mods = list(model.named_children())
    shapes: dict[str, tuple] = {}
    if example_input is not None:
        hooks = [m.register_forward_pre_hook(lambda mod, inp, n=n: shapes.__setitem__(n, tuple(inp[0].shape)))
                 for n, m in mods]
        with torch.no_grad():
            model.eval()
            model(example_input)
        for h in hooks:
            h.remove()
    for n, m in mods:
        t = type(m).__name__
        if not isinstance(m, (nn.Linear, nn.Conv2d, nn.BatchNorm1d, nn.BatchNorm2d, nn.Flatten)) and t not in _ACTS:
            raise ValueError(f"unsupported layer type {t} at {n!r}: supported are Linear, Conv2d, BatchNorm1d/2d, "
                             f"Flatten and {', '.join(_ACTS)}")
    unit_layers = [i for i, (_, m) in enumerate(mods) if isinstance(m, (nn.Linear, nn.Conv2d))]
    out: list[Group] = []
    for a, b in zip(unit_layers[:-1], unit_layers[1:]):
        name, m = mods[a]
        nxt_name, nxt = mods[b]
        units = m.out_features if isinstance(m, nn.Linear) else m.out_channels
        sl = [ParamSlice(f"{name}.weight", 0)]
        attrs = [(name, "out_features" if isinstance(m, nn.Linear) else "out_channels", "units", 1)]
        if m.bias is not None:
            sl.append(ParamSlice(f"{name}.bias", 0))
        flatten = False
        for k in range(a + 1, b):
            bn_name, bn = mods[k]
            if isinstance(bn, (nn.BatchNorm1d, nn.BatchNorm2d)):
                for p in ("weight", "bias", "running_mean", "running_var"):
                    if getattr(bn, p, None) is not None:
                        sl.append(ParamSlice(f"{bn_name}.{p}", 0))
                attrs.append((bn_name, "num_features", "units", 1))
            if isinstance(bn, nn.Flatten):
                flatten = True
        if isinstance(nxt, nn.Linear) and isinstance(m, nn.Conv2d):
            if not flatten:
                raise ValueError(f"Conv2d {name!r} feeds Linear {nxt_name!r} without a Flatten")
            if nxt.in_features % units:
                raise ValueError(f"Linear {nxt_name!r} in_features={nxt.in_features} is not a multiple of "
                                 f"{units} channels")
            hw = nxt.in_features // units
            sl.append(ParamSlice(f"{nxt_name}.weight", 1, "block", hw))
            attrs.append((nxt_name, "in_features", "units", hw))
        else:
            sl.append(ParamSlice(f"{nxt_name}.weight", 1))
            attrs.append((nxt_name, "in_features" if isinstance(nxt, nn.Linear) else "in_channels", "units", 1))
        out.append(Group(name, units, tuple(sl), tuple(attrs)))
    return out


def full_masks(gs: list[Group]) -> dict[str, np.ndarray]:
    return {g.name: np.ones(g.units, dtype=bool) for g in gs}


def _check_masks(gs: list[Group], masks: dict[str, np.ndarray]) -> None:
    names = {g.name for g in gs}
    unknown = set(masks) - names
    if unknown:
        raise ValueError(f"masks for unknown layers {sorted(unknown)}; droppable layers are {sorted(names)}")
    for g in gs:
        if g.name in masks:
            m = np.asarray(masks[g.name])
            if m.shape != (g.units,) or m.dtype != bool:
                raise ValueError(f"mask for {g.name!r} must be a bool array of shape ({g.units},), "
                                 f"got {m.dtype} {m.shape}")
            if not m.any():
                raise ValueError(f"mask for {g.name!r} drops every unit; keep at least one")


def param_indices(gs: list[Group], masks: dict[str, np.ndarray]) -> dict[str, dict[int, np.ndarray]]:
    """{param name: {axis: kept indices}} implied by the masks."""
    out: dict[str, dict[int, np.ndarray]] = {}
    for g in gs:
        keep = np.asarray(masks.get(g.name, np.ones(g.units, dtype=bool)))
        for s in g.slices:
            out.setdefault(s.name, {})[s.axis] = s.indices(keep)
    return out


def _slice(t, idx: dict[int, np.ndarray]):
    import torch
    for axis, ind in sorted(idx.items()):
        t = torch.index_select(t, axis, torch.as_tensor(ind, dtype=torch.long, device=t.device))
    return t


def _check_groups(gs, where: str) -> list:
    """``gs`` as :func:`groups` returns it (a list of :class:`Group`), refused naming ``where``."""
    if not isinstance(gs, (list, tuple)) or not all(isinstance(g, Group) for g in gs):
        raise ValueError(f"{where}: the groups must be a list of Group (from groups(model, example_input)), "
                         f"got {gs!r:.80}")
    return list(gs)


def extract_submodel(model: nn.Module, masks: dict[str, np.ndarray], example_input: torch.Tensor | None = None,
                     model_groups: list[Group] | None = None) -> nn.Module:
    """A smaller copy of ``model`` keeping the units where ``masks[layer]`` is True.
    ``model_groups``: ``groups(model, example_input)`` if the caller has them (cutting the same
    model repeatedly need not trace it each time)."""
    import torch

    if not isinstance(model, torch.nn.Module):
        raise ValueError(f"extract_submodel: model must be a torch.nn.Module, got {type(model).__name__}")
    gs = groups(model, example_input) if model_groups is None else _check_groups(model_groups, "extract_submodel")
    _check_masks(gs, masks)
    sub = copy.deepcopy(model)
    idx = param_indices(gs, masks)
    state = model.state_dict()
    mods = dict(sub.named_modules())
    with torch.no_grad():
        for name, axes in idx.items():
            mod_name, _, attr = name.rpartition(".")
            mod = mods[mod_name]
            new = _slice(state[name], axes).clone()
            if isinstance(getattr(mod, attr), torch.nn.Parameter):
                setattr(mod, attr, torch.nn.Parameter(new))
            else:
                setattr(mod, attr, new)
        for g in gs:
            keep = int(np.asarray(masks.get(g.name, np.ones(g.units, dtype=bool))).sum())
            for mod_name, attr, _kind, mult in g.attrs:
                setattr(mods[mod_name], attr, keep * mult)
        for m in mods.values():
            if hasattr(m, "_init_flat_weights"):
                m._init_flat_weights()
    return sub


def merge_updates(global_state: dict, updates: list[tuple], gs: list[Group]
                  ) -> tuple[dict, list[tuple[int, str]]]:
    """Example-weighted, per-element average of sub-model states mapped back into the
    global model's coordinates.  ``updates`` are ``(sub_state_dict, masks, num_examples)``, or
    ``(sub_state_dict, masks, num_examples, rows)`` with ``rows`` ``{parameter: bool per row}``:
    the update counts only for those rows of those parameters (HeteroFL's label split of the
    output layer: a client's classifier rows for labels it does not hold are not averaged in),
    or ``{parameter: bool array of its shape}``: only for those entries (FIARSE's parameter masks).
    An element nobody trained keeps its global value.  An update is rejected (logged, and
    listed in the result) when its masks are invalid, its ``num_examples`` is not a positive
    finite number, a tensor is missing, has the wrong shape, holds NaN/inf, or holds values
    that overflow the global tensor's dtype; the rest are merged.

    Returns ``(new_state, rejected)`` with ``rejected`` a list of (update index, reason).
    """
    import torch

    if not isinstance(global_state, dict):
        raise ValueError(f"merge_updates: global_state must be a state dict, got {type(global_state).__name__}")
    if not isinstance(updates, (list, tuple)) or not all(isinstance(u, (list, tuple)) and len(u) in (3, 4)
                                                         for u in updates):
        raise ValueError("merge_updates: updates must be a list of (state_dict, masks, num_examples[, rows]) "
                         f"tuples, got {updates!r:.80}")
    _check_groups(gs, "merge_updates")
    sums = {k: torch.zeros_like(v, dtype=torch.float64) for k, v in global_state.items()
            if torch.is_floating_point(v)}
    counts = {k: torch.zeros_like(v, dtype=torch.float64) for k in sums for v in (global_state[k],)}
    rejected: list[tuple[int, str]] = []
    for u, upd in enumerate(updates):
        state, masks, n = upd[:3]
        rows = upd[3] if len(upd) > 3 else None
        try:
            _check_masks(gs, masks)
        except ValueError as exc:
            rejected.append((u, str(exc)))
            continue
        nf = float(n) if isinstance(n, numbers.Real) else float("nan")
        if isinstance(n, bool) or not (math.isfinite(nf) and 0 < nf <= MAX_EXAMPLES):
            log.warning("rejecting update %d: num_examples=%r", u, n)
            rejected.append((u, f"num_examples must be a positive finite number (at most 2^53), got {n!r}"))
            continue
        n = nf
        idx = param_indices(gs, masks)
        reason = ""
        for k in sums:
            if k not in state:
                reason = f"missing parameter {k!r}"
                break
            expect = list(global_state[k].shape)
            for axis, ind in idx.get(k, {}).items():
                expect[axis] = len(ind)
            if list(state[k].shape) != expect:
                reason = f"{k!r} has shape {tuple(state[k].shape)}, expected {tuple(expect)}"
                break
            t = state[k]
            if not isinstance(t, torch.Tensor):
                reason = f"{k!r} is a {type(t).__name__}, not a tensor"
                break
            if not (torch.is_floating_point(t) or t.dtype in (torch.int32, torch.int64)):
                reason = f"{k!r} has dtype {t.dtype}"
                break
            if not torch.isfinite(t).all():
                reason = f"{k!r} contains NaN or inf"
                break
            limit = torch.finfo(global_state[k].dtype).max
            if t.numel() and float(t.abs().max()) > limit:
                reason = f"{k!r} holds values beyond {global_state[k].dtype}'s range"
                break
        if reason:
            log.warning("rejecting update %d: %s", u, reason)
            rejected.append((u, reason))
            continue
        for k in sums:
            axes = idx.get(k, {})
            ix = [torch.arange(s) for s in global_state[k].shape]
            for axis, ind in axes.items():
                ix[axis] = torch.as_tensor(ind, dtype=torch.long)
            grid = torch.meshgrid(*ix, indexing="ij") if ix else ()
            weight = torch.full_like(state[k], float(n), dtype=torch.float64)
            if rows is not None and k in rows and np.shape(rows[k]) == tuple(weight.shape) == tuple(global_state[k].shape):
                # an entry mask on an uncut tensor (FIARSE)
                weight = weight * torch.as_tensor(np.asarray(rows[k], dtype=bool)).to(torch.float64)
            elif rows is not None and k in rows:
                r = torch.as_tensor(np.asarray(rows[k], dtype=bool))
                if r.numel() != weight.shape[0] or 0 in axes:
                    raise ValueError(f"row mask of {k!r} has {r.numel()} rows for a tensor of {weight.shape[0]}")
                weight = weight * r.to(torch.float64).reshape((-1,) + (1,) * (weight.dim() - 1))
            val = state[k].to(torch.float64) * weight
            if grid:
                sums[k].index_put_(grid, val, accumulate=True)
                counts[k].index_put_(grid, weight, accumulate=True)
            else:
                sums[k] += val
                counts[k] += weight
    new = {}
    for k, v in global_state.items():
        if k in sums:
            c = counts[k]
            avg = torch.where(c > 0, sums[k] / torch.clamp(c, min=1e-300), v.to(torch.float64))
            new[k] = avg.to(v.dtype)
        else:
            new[k] = v.clone()
    return new, rejected
