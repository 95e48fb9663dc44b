"""FIARSE: importance-aware sub-model extraction (Wu et al., NeurIPS 2024, and its code
``HarliWu/FIARSE``), parameter by parameter.

A client of model size ``s`` (the fraction of the masked parameters it may train) is sent the
full-shape global model and a threshold ``theta``: the ``k``-th largest magnitude over every
masked parameter of the global model, ``k = int(s N)`` (its ``generate_mask(topk=True)``, one
threshold over all layers).  Importance is the magnitude itself, so no score is stored or sent:
the client derives its mask ``m = 1[|w| >= theta]`` from the weights it received.

Local training (its Threshold-Controlled Biased Gradient Descent, ``MaskedLinear``/
``MaskedConv2d``/``MaskedEmbedding`` with ``Bern``): the forward pass uses ``w * m(|w|)`` with
the mask recomputed from the current weights against the fixed ``theta`` (a weight that shrinks
below ``theta`` leaves the sub-model), and the mask's backward is
``d m / d|w| = 2 theta / (|w| + theta)^2`` on kept weights and 0 elsewhere, so a kept weight's
gradient is ``g (1 + 2 theta |w| / (|w| + theta)^2)`` and a dropped one's is 0.

Aggregation (its server): every entry is averaged over the clients that updated it, one vote per
client (``tot_grad / tot_mask``), with the global learning rate 1; an entry nobody trained keeps
its global value.  Here a client's entries are its mask at the threshold it was sent.

Masked parameters are those of Linear, Conv and Embedding layers (the layers its code masks);
other parameters (norm layers) are trained in full by every client.  A model with recurrent
layers (LSTM, GRU, RNN) is refused: their flat weights bypass a parametrization, so a mask on
them would silently not apply.

Costs on a device (:func:`sparse_training_flops`, :func:`sparse_bytes`): each masked layer's
FLOPs and bytes scale with the share of its weights kept, FIARSE's own accounting of model size
(it assumes a sparse kernel realises the saving; dense hardware would not).

In cosearch the straggler controller gives a keep fraction ``p`` (a width); a FIARSE straggler
gets the same parameter budget: ``s`` = the parameter share of the width-``p`` sub-model (the
FIARSE paper likewise pairs its model sizes with HeteroFL's widths, size = width^2 for a
width-cut network).
"""

from __future__ import annotations

import contextlib

import numpy as np

__all__ = ["masked_parameters", "threshold", "parameter_masks", "masked_training", "sparse_training_flops",
           "sparse_bytes", "tcb_gradient_factor"]


def _masked_modules(model) -> list[tuple[str, object]]:
    """``(name, module)`` of the Linear, Conv and Embedding layers FIARSE masks.  Refuses a model
    with recurrent layers (module docstring)."""
    import torch.nn as nn
    rec = [n for n, m in model.named_modules() if isinstance(m, nn.RNNBase)]
    if rec:
        raise ValueError(f"fiarse masks the parameters of Linear, Conv and Embedding layers; this model has the "
                         f"recurrent layer(s) {rec}, whose flat weights a mask cannot reach: choose another method "
                         "for it")
    kinds = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.Embedding)
    return [(n, m) for n, m in model.named_modules() if isinstance(m, kinds)]


def masked_parameters(model) -> dict[str, object]:
    """``{state name: parameter}`` of every weight and bias FIARSE masks (Linear, Conv,
    Embedding layers).  Refuses a model with recurrent layers (module docstring)."""
    out = {f"{name}.{pname}" if name else pname: p
           for name, mod in _masked_modules(model) for pname, p in mod.named_parameters(recurse=False)}
    if not out:
        raise ValueError("fiarse needs a model with Linear, Conv or Embedding parameters to mask")
    return out


def threshold(model, size: float) -> float:
    """FIARSE's threshold for model size ``size`` in (0, 1]: the ``k``-th largest magnitude over
    the masked parameters, ``k = max(1, int(size N))``; 0 for ``size >= 1`` (everything kept)."""
    import torch
    s = float(size)
    if not (0.0 < s <= 1.0):
        raise ValueError(f"FIARSE model size must be in (0, 1], got {size!r}")
    params = masked_parameters(model)
    if s >= 1.0:
        return 0.0
    mags = torch.cat([p.detach().abs().reshape(-1) for p in params.values()])
    k = max(1, int(s * mags.numel() + 1e-9))      # int(size N), robust to size = kept / N in floats
    return float(torch.topk(mags, k).values[-1])


def parameter_masks(model, theta: float) -> dict[str, np.ndarray]:
    """``{state name: bool array}``: the masked parameters' entries with ``|w| >= theta``."""
    return {k: (p.detach().abs() >= float(theta)).numpy() for k, p in masked_parameters(model).items()}


def tcb_gradient_factor(w, theta: float):
    """What FIARSE's masked forward multiplies a weight's gradient by: ``1 + 2 theta |w| /
    (|w| + theta)^2`` where ``|w| >= theta``, else 0 (module docstring)."""
    a = np.abs(np.asarray(w, dtype=float))
    th = float(theta)
    with np.errstate(divide="ignore", invalid="ignore"):
        f = 1.0 + np.nan_to_num(2.0 * th * a / (a + th) ** 2)
    return np.where(a >= th, f, 0.0)


def _bern():
    import torch

    class _Bern(torch.autograd.Function):
        @staticmethod
        def forward(ctx, scores, theta):
            ctx.save_for_backward(scores, theta)
            return (scores >= theta).to(scores.dtype)

        @staticmethod
        def backward(ctx, grad_output):
            scores, theta = ctx.saved_tensors
            g = torch.nan_to_num(2.0 * theta / (scores + theta) ** 2, nan=0.0, posinf=0.0, neginf=0.0)
            return grad_output * g * (scores >= theta).to(scores.dtype), None
    return _Bern


@contextlib.contextmanager
def masked_training(model, theta: float):
    """Train ``model`` as FIARSE's client does at threshold ``theta`` inside the block: every
    masked parameter is used as ``w * m(|w|)`` with the TCB-GD backward (module docstring).  On
    exit the parameters are plain again and hold the trained raw weights."""
    import torch
    import torch.nn as nn
    from torch.nn.utils import parametrize

    bern = _bern()
    th = torch.tensor(float(theta))

    class _Mask(nn.Module):
        def forward(self, w):
            return w * bern.apply(w.abs(), th.to(w.dtype))

    # every target listed (recurrent models refused) before anything changes
    targets = [(mod, p) for _name, mod in _masked_modules(model) for p, _ in list(mod.named_parameters(recurse=False))]
    if not targets:
        masked_parameters(model)          # refuses it: nothing to mask
    done = []
    try:
        for mod, pname in targets:
            parametrize.register_parametrization(mod, pname, _Mask())
            done.append((mod, pname))
        yield model
    finally:
        for mod, pname in done:
            parametrize.remove_parametrizations(mod, pname, leave_parametrized=False)


def _densities(model, theta: float) -> dict[str, float]:
    """Each masked module's kept share of its weight at ``theta`` (by module name)."""
    return {name: float((mod.weight.detach().abs() >= float(theta)).float().mean()) if mod.weight.numel() else 1.0
            for name, mod in _masked_modules(model)}


def sparse_training_flops(model, example, theta: float, samples: int, epochs: int = 1) -> float:
    """Training FLOPs of the FIARSE sub-model at ``theta``: each layer's FLOPs
    (:func:`~cosearch.fl.profiling.forward_flops_by_module`) times the share of its weight kept."""
    from .profiling import forward_flops_by_module
    dens = _densities(model, theta)
    per = forward_flops_by_module(model, example)
    return 3.0 * sum(f * dens.get(name, 1.0) for name, f in per.items()) * samples * epochs


def sparse_bytes(model, theta: float) -> int:
    """Bytes sent each way for the FIARSE sub-model at ``theta``: the kept entries of the masked
    parameters (the mask follows from the global weights and ``theta``, so no index is sent) and
    every other floating-point state entry in full."""
    masked = masked_parameters(model)
    total = 0
    for k, v in model.state_dict().items():
        if not v.is_floating_point():
            continue
        if k in masked:
            total += int((v.abs() >= float(theta)).sum()) * v.element_size()
        else:
            total += v.numel() * v.element_size()
    return total
