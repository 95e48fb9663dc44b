"""A Flower strategy for Invariant Dropout (``pip install 'cosearch[flower]'``).

:class:`DropoutStrategy` implements Flower's ``Strategy`` interface: every round it
profiles the clients' reported round times (``metrics["round_time_s"]``), picks the
stragglers and their kept fraction with :class:`~cosearch.fl.profiling.StragglerProfiler`,
chooses their neurons with a :mod:`dropout policy <cosearch.fl.masks>`, and sends each
straggler its own sub-model in its own ``FitIns`` (the masks travel in the config as a
JSON string).  ``aggregate_fit`` maps the differently-shaped updates back with
:func:`~cosearch.fl.submodel.merge_updates`.  :class:`SubmodelClient` is the matching
``NumPyClient``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import numpy as np

from .masks import policy as make_policy
from .profiling import DEFAULT_WIDTHS, StragglerProfiler
from .submodel import extract_submodel, groups, merge_updates

try:
    import flwr
    from flwr.common import (
        FitIns,
        ndarrays_to_parameters,
        parameters_to_ndarrays,
    )
    from flwr.server.strategy import Strategy
except ImportError as exc:  # pragma: no cover
    raise ImportError("cosearch.fl.flower needs Flower: pip install 'cosearch[flower]'") from exc

__all__ = ["DropoutStrategy", "SubmodelClient", "encode_masks", "decode_masks"]


def encode_masks(masks: dict[str, np.ndarray]) -> str:
    return json.dumps({k: np.flatnonzero(v).tolist() + [-len(v)] for k, v in masks.items()})


def decode_masks(text: str) -> dict[str, np.ndarray]:
    out = {}
    for k, v in json.loads(text).items():
        n = -v[-1]
        m = np.zeros(n, dtype=bool)
        m[v[:-1]] = True
        out[k] = m
    return out


def _state_to_arrays(state) -> list[np.ndarray]:
    return [v.detach().cpu().numpy() for v in state.values()]


def _arrays_to_state(keys, arrays):
    import torch
    return {k: torch.as_tensor(np.asarray(a)) for k, a in zip(keys, arrays)}


class DropoutStrategy(Strategy):
    """Invariant (or ordered / random / no) dropout for stragglers, as a Flower strategy.

    ``model_fn()`` builds the global torch model; ``example_input`` (optional) is needed
    for CNNs whose ``Flatten`` sizes must be probed.  ``evaluate_fn(model) -> (loss, metrics)``
    (optional) evaluates the global model on the server.
    """

    def __init__(self, model_fn: Callable, method: str = "invariant", widths=DEFAULT_WIDTHS,
                 straggler_fraction: float | None = None, min_clients: int = 2, example_input=None,
                 evaluate_fn: Callable | None = None, seed: int = 0):
        super().__init__()
        self.model = model_fn()
        self.example = example_input
        self.groups = groups(self.model, example_input)
        self.policy = make_policy(method)
        self.method = method
        self.widths, self.fraction = widths, straggler_fraction
        self.min_clients = min_clients
        self.evaluate_fn = evaluate_fn
        self.rng = np.random.default_rng(seed)
        self.profiler: StragglerProfiler | None = None
        self.sent: dict[str, tuple[dict, float]] = {}
        self.history: list[dict] = []
        self._index: dict[str, int] = {}

    def __repr__(self) -> str:
        return f"DropoutStrategy(method={self.method!r})"

    def initialize_parameters(self, client_manager):
        return ndarrays_to_parameters(_state_to_arrays(self.model.state_dict()))

    def configure_fit(self, server_round, parameters, client_manager):
        client_manager.wait_for(self.min_clients)
        clients = sorted(client_manager.all().values(), key=lambda c: c.cid)
        for c in clients:
            self._index.setdefault(c.cid, len(self._index))
        if self.profiler is None:
            self.profiler = StragglerProfiler(max(2, len(clients)), self.widths, self.fraction)
        plan = self.profiler.plan() if (server_round > 1 and self.method != "none") else {}
        full = {g.name: np.ones(g.units, dtype=bool) for g in self.groups}
        out = []
        self.sent = {}
        for c in clients:
            p = plan.get(self._index[c.cid], 1.0)
            masks = self.policy.masks(p, self.groups, self.rng) if p < 1.0 else full
            model = extract_submodel(self.model, masks, self.example) if p < 1.0 else self.model
            self.sent[c.cid] = (masks, p)
            cfg = {"p": float(p), "masks": encode_masks(masks), "round": int(server_round)}
            out.append((c, FitIns(ndarrays_to_parameters(_state_to_arrays(model.state_dict())), cfg)))
        return out

    def aggregate_fit(self, server_round, results, failures):
        keys = list(self.model.state_dict().keys())
        gstate = {k: v.clone() for k, v in self.model.state_dict().items()}
        updates, full_states, times, used = [], [], {}, {}
        for proxy, res in results:
            if proxy.cid not in self.sent:
                continue
            masks, p = self.sent[proxy.cid]
            state = _arrays_to_state(keys, parameters_to_ndarrays(res.parameters))
            updates.append((state, masks, res.num_examples))
            if p >= 1.0:
                full_states.append(state)
            i = self._index[proxy.cid]
            times[i] = float(res.metrics.get("round_time_s", 1.0))
            used[i] = p
        if not updates:
            return None, {"rejected": len(failures)}
        new, rejected = merge_updates(gstate, updates, self.groups)
        self.model.load_state_dict(new)
        self.policy.observe(gstate, full_states)
        if self.profiler is not None and times:
            self.profiler.observe(times, used)
        round_time = max(times.values()) if times else 0.0
        self.history.append({"round": server_round, "round_time_s": round_time,
                             "p": {str(k): v for k, v in used.items() if v < 1.0}, "rejected": len(rejected)})
        return ndarrays_to_parameters(_state_to_arrays(new)), {"round_time_s": round_time,
                                                               "rejected": len(rejected)}

    def configure_evaluate(self, server_round, parameters, client_manager):
        return []

    def aggregate_evaluate(self, server_round, results, failures):
        return None, {}

    def evaluate(self, server_round, parameters):
        if self.evaluate_fn is None:
            return None
        return self.evaluate_fn(self.model)


class SubmodelClient(flwr.client.NumPyClient):
    """Trains whatever sub-model the strategy sends (shape given by the masks in the config).

    ``latency_s`` (optional) simulates the client's full-model round time: it reports
    ``p * latency_s`` as ``round_time_s``; otherwise the measured training time.
    """

    def __init__(self, model_fn: Callable, x, y, epochs: int = 1, lr: float = 0.1, batch_size: int = 32,
                 latency_s: float | None = None, example_input=None, seed: int = 0):
        self.model_fn, self.x, self.y = model_fn, x, y
        self.epochs, self.lr, self.batch_size = epochs, lr, batch_size
        self.latency_s, self.example, self.seed = latency_s, example_input, seed

    def fit(self, parameters, config):
        import torch

        from .simulation import _train
        masks = decode_masks(config["masks"])
        model = extract_submodel(self.model_fn(), masks, self.example)
        keys = list(model.state_dict().keys())
        model.load_state_dict(_arrays_to_state(keys, parameters))
        t0 = time.perf_counter()
        _train(model, self.x, self.y, self.epochs, self.lr, self.batch_size,
               torch.Generator().manual_seed(self.seed + int(config.get("round", 0))))
        t = time.perf_counter() - t0
        rt = float(config["p"]) * self.latency_s if self.latency_s else t
        return _state_to_arrays(model.state_dict()), len(self.y), {"round_time_s": rt}

    def evaluate(self, parameters, config):
        return 0.0, len(self.y), {}
