"""Dropout training on Flower's engine (``pip install 'cosearch[flower]'``).

:class:`DropoutStrategy` is a Flower ``FedAvg`` (client sampling, ``accept_failures``,
federated evaluation, central ``evaluate_fn``) whose fit rounds are run by the same
:class:`~cosearch.fl.server.RoundProtocol` as the in-process simulation: each sampled
straggler receives its own sub-model (its masks travel in the fit config as JSON), the
differently-shaped updates are validated and merged back, and the policy and profiler are
updated from the accepted updates only.  Clients report their round time as the fit metric
``round_time_s`` (simulated from a :class:`~cosearch.fl.profiling.ClientProfile`, or
measured).  :class:`SubmodelClient` is the matching ``NumPyClient``; federated evaluation
returns the example-weighted ``accuracy`` of the clients' test splits.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable

import numpy as np

from .masks import ThresholdSchedule
from .server import ClientUpdate, RoundProtocol

try:
    import flwr
    from flwr.common import FitIns, ndarrays_to_parameters, parameters_to_ndarrays
    from flwr.server.strategy import FedAvg
except ImportError as exc:  # pragma: no cover
    raise ImportError("cosearch.fl.flower needs Flower: pip install 'cosearch[flower]'") from exc

__all__ = ["DropoutStrategy", "SubmodelClient", "encode_masks", "decode_masks", "weighted_accuracy"]

log = logging.getLogger("cosearch.fl")


def encode_masks(masks: dict[str, np.ndarray]) -> str:
    return json.dumps({k: np.flatnonzero(v).tolist() + [-len(v)] for k, v in masks.items()})


def decode_masks(text: str) -> dict[str, np.ndarray]:
    """Masks from :func:`encode_masks`; malformed text raises ``ValueError``."""
    try:
        raw = json.loads(text)
        out = {}
        for k, v in raw.items():
            n = -int(v[-1])
            m = np.zeros(n, dtype=bool)
            m[np.asarray(v[:-1], dtype=np.int64)] = True
            out[k] = m
        return out
    except (ValueError, TypeError, IndexError, AttributeError) as exc:
        raise ValueError(f"malformed mask message: {exc}") from None


def _arrays(state) -> list[np.ndarray]:
    return [v.detach().cpu().numpy() for v in state.values()]


def _state(keys, arrays):
    import torch
    if len(keys) != len(arrays):
        raise ValueError(f"expected {len(keys)} tensors, got {len(arrays)}")
    out = {}
    for k, a in zip(keys, arrays):
        a = np.asarray(a)
        if a.dtype.kind not in "biuf" or a.dtype.fields is not None:
            raise ValueError(f"tensor {k!r} has dtype {a.dtype}, not a number type")
        out[k] = torch.as_tensor(np.array(a))
    return out


def weighted_accuracy(metrics: list[tuple[int, dict]]) -> dict:
    """Example-weighted mean of the clients' ``accuracy`` metric."""
    tot = sum(n for n, m in metrics if "accuracy" in m)
    if not tot:
        return {}
    return {"accuracy": sum(n * float(m["accuracy"]) for n, m in metrics if "accuracy" in m) / tot}


class DropoutStrategy(FedAvg):
    """Invariant (or ordered / random / no) dropout for stragglers as a Flower ``FedAvg``.

    ``model_fn()`` builds the global torch model; ``example_input`` is needed for CNNs whose
    ``Flatten`` sizes must be probed.  ``total_rounds`` places FLuID's threshold growth.
    Other keyword arguments go to ``FedAvg`` (``fraction_fit``, ``min_available_clients``,
    ``accept_failures``, ``evaluate_fn``, ...).  ``history`` lists one dict per round.
    """

    def __init__(self, model_fn: Callable, method: str = "invariant", *, example_input=None,
                 total_rounds: int | None = None, schedule: ThresholdSchedule | str = "femnist",
                 straggler_fraction: float | None = None, seed: int = 0, keep_rule: str = "model",
                 keep_confidence: float | None = None, **fedavg):
        from .._validate import choice
        from .masks import METHODS
        choice("method", method, METHODS)              # refused here, not when the first round starts
        for k, zero_ok in (("fraction_fit", False), ("fraction_evaluate", True)):    # 0: no evaluation
            f = fedavg.get(k, 1.0)
            if isinstance(f, bool) or not isinstance(f, (int, float)) or not (
                    (0.0 <= f if zero_ok else 0.0 < f) and f <= 1.0):
                raise ValueError(f"{k} must be a share of the clients in {'[0' if zero_ok else '(0'}, 1], got {f!r}")
        fedavg.setdefault("evaluate_metrics_aggregation_fn", weighted_accuracy)
        super().__init__(**fedavg)
        self.model = model_fn()
        self._proto_args = dict(method=method, example_input=example_input, total_rounds=total_rounds,
                                schedule=schedule, straggler_fraction=straggler_fraction, seed=seed,
                                keep_rule=keep_rule, keep_confidence=keep_confidence)
        self.protocol: RoundProtocol | None = None
        self.method = method
        self._index: dict[str, int] = {}
        self._sent: dict = {}
        self.history: list[dict] = []

    def __repr__(self) -> str:
        return f"DropoutStrategy(method={self.method!r}, accept_failures={self.accept_failures})"

    def initialize_parameters(self, client_manager):
        return ndarrays_to_parameters(_arrays(self.model.state_dict()))

    def _client(self, cid: str) -> int:
        return self._index.setdefault(cid, len(self._index))

    def configure_fit(self, server_round, parameters, client_manager):
        config = self.on_fit_config_fn(server_round) if self.on_fit_config_fn is not None else {}
        size, least = self.num_fit_clients(client_manager.num_available())
        clients = client_manager.sample(num_clients=size, min_num_clients=least)
        if self.protocol is None:
            n = max(2, client_manager.num_available())
            self.protocol = RoundProtocol(self.model, n, **self._proto_args)
        ids = {c.cid: self._client(c.cid) for c in clients}
        self._sent = self.protocol.assignments(server_round, ids.values())
        self._sent_at = time.monotonic()
        out = []
        for c in clients:
            a = self._sent[ids[c.cid]]
            model = self.protocol.submodel(a)
            cfg = dict(config, keep=float(a.keep), masks=encode_masks(a.masks), round=int(server_round))
            pol = self.protocol.policy
            if getattr(pol, "scaler", False):
                cfg["scale_rate"] = float(a.keep)          # HeteroFL's Scaler at the sub-model's rate
            if getattr(pol, "masked_labels", False):
                cfg["mask_labels"] = True                  # HeteroFL's masked cross-entropy
            if a.threshold is not None:
                cfg["param_threshold"] = float(a.threshold)   # FIARSE: the client masks |w| < threshold
            if getattr(pol, "nested", False):
                # FjORD: the client trains per-batch widths up to its p_max, as simulate() does
                from .masks import fjord_widths_within
                cfg.update(widths=",".join(str(w) for w in fjord_widths_within(a.keep)),
                           distill=bool(pol.distill),
                           full_units=",".join(f"{g.name}={g.units}" for g in self.protocol.groups))
            out.append((c, FitIns(ndarrays_to_parameters(_arrays(model.state_dict())), cfg)))
        return out

    def aggregate_fit(self, server_round, results, failures):
        if not results or (failures and not self.accept_failures) or self.protocol is None:
            return None, {"failures": len(failures)}
        # the round as the server saw it: from sending the models to having every result back
        # (training and communication included)
        server_round_s = time.monotonic() - getattr(self, "_sent_at", time.monotonic())
        keys = list(self.model.state_dict().keys())
        updates = []
        partitions = {}
        for proxy, res in results:
            c = self._client(proxy.cid)
            pid = res.metrics.get("partition_id")
            if isinstance(pid, int) and not isinstance(pid, bool):
                partitions[str(c)] = pid
            try:
                state = _state(keys, parameters_to_ndarrays(res.parameters))
            except Exception as exc:       # anything a client sends: reject it, log why, go on
                state = f"undecodable update ({type(exc).__name__}: {exc})"
                log.warning("cosearch: round %s: client %s's update is rejected: %s", server_round, proxy.cid, state)
            labels = None
            if res.metrics.get("labels") is not None:
                try:
                    labels = tuple(int(v) for v in str(res.metrics["labels"]).split(",") if v != "")
                except ValueError:
                    labels = None             # malformed: the update counts for every label
            updates.append(ClientUpdate(c, state, res.num_examples, res.metrics.get("round_time_s"), labels=labels))
        rep = self.protocol.aggregate(server_round, self._sent, updates)
        self.history.append({"round": server_round, "round_time_s": rep.round_time_s,
                             "server_round_s": server_round_s, "partition_ids": partitions,
                             "keep": {str(k): v for k, v in rep.keep.items()},
                             "rejected": {str(k): v for k, v in rep.rejected.items()},
                             "failures": len(failures), **rep.policy_state})
        return (ndarrays_to_parameters(_arrays(self.model.state_dict())),
                {"round_time_s": rep.round_time_s, "rejected": len(rep.rejected)})


class SubmodelClient(flwr.client.NumPyClient):
    """Trains whatever sub-model the strategy sends (shape given by the masks in the config)
    and evaluates the global model on its test split.

    ``device`` (a :class:`~cosearch.fl.profiling.ClientProfile`, optional) simulates the round
    time from the sub-model's FLOPs and bytes (with its noise drawn from ``noise_seed``, the
    round and ``partition_id`` when given, as ``simulate`` draws it); otherwise the measured
    training time is reported.
    ``partition_id``: reported with every result, so the server's history names the data
    partition behind each client.
    """

    def __init__(self, model_fn: Callable, x, y, test=None, *, epochs: int = 1, optimizer: str = "sgd",
                 lr: float = 0.1, batch_size: int = 32, device=None, example_input=None, seed: int = 0,
                 partition_id: int | None = None, noise_seed: int | None = None,
                 samples_per_round: int | None = None):
        self.model_fn, self.x, self.y, self.test = model_fn, x, y, test
        self.partition_id = partition_id
        self.epochs, self.optimizer, self.lr, self.batch_size = epochs, optimizer, lr, batch_size
        self.device, self.example, self.seed = device, example_input, seed
        self.noise_seed = noise_seed
        self.samples_per_round = samples_per_round

    def fit(self, parameters, config):
        import torch

        from .profiling import model_bytes, training_flops
        from .simulation import round_subset, train_local
        from .submodel import extract_submodel
        masks = decode_masks(config["masks"])
        # this round's samples, drawn as simulate() draws them ([seed, 13, round, partition])
        x, y = round_subset(self.x, self.y, self.samples_per_round,
                            self.noise_seed if self.noise_seed is not None else self.seed,
                            int(config.get("round", 0)), self.partition_id or 0)
        model = extract_submodel(self.model_fn(), masks, self.example)
        model.load_state_dict(_state(list(model.state_dict().keys()), parameters))
        gen = torch.Generator().manual_seed(self.seed + int(config.get("round", 0)))
        ex = self.example if self.example is not None else torch.as_tensor(x[:1])
        t0 = time.perf_counter()
        if config.get("widths"):
            # FjORD's per-batch nested widths (the strategy names them and the full model's units)
            from .simulation import _nested_flops, train_nested
            widths = [float(w) for w in str(config["widths"]).split(",")]
            full_units = {k: int(v) for k, v in (kv.split("=") for kv in str(config["full_units"]).split(","))}
            distill = bool(config.get("distill", False))
            train_nested(model, x, y, self.epochs, self.optimizer, self.lr, self.batch_size, gen, widths,
                         full_units, ex, distill=distill)
            flops = _nested_flops(model, ex, full_units, widths, len(y), self.epochs, distill) \
                if self.device is not None else 0.0
        elif "param_threshold" in config:
            from .simulation import _fiarse_train
            flops, nbytes = _fiarse_train(model, float(config["param_threshold"]), x, y, self.epochs,
                                          self.optimizer, self.lr, self.batch_size, gen, ex,
                                          price=self.device is not None)
        else:
            mask = None
            if config.get("mask_labels"):
                with torch.no_grad():
                    classes = int(model(ex).shape[-1])
                mask = np.isin(np.arange(classes), np.unique(self.y))
            rate = float(config["scale_rate"]) if "scale_rate" in config else None
            train_local(model, x, y, self.epochs, self.optimizer, self.lr, self.batch_size, gen,
                        label_mask=mask, scale_rate=rate, example=ex)
            flops = training_flops(model, ex, len(y), self.epochs) if self.device is not None else 0.0
        t = time.perf_counter() - t0
        if self.device is not None:
            # the device's noise drawn per client and round as simulate() draws it ([seed, 7, round, client])
            rng = None
            if self.noise_seed is not None and self.partition_id is not None:
                rng = np.random.default_rng([int(self.noise_seed), 7, int(config.get("round", 0)),
                                             int(self.partition_id)])
            t = self.device.round_time_s(flops, nbytes if "param_threshold" in config else model_bytes(model), rng)
        metrics = {"round_time_s": float(t), "labels": ",".join(str(int(v)) for v in np.unique(self.y))}
        if self.partition_id is not None:
            metrics["partition_id"] = int(self.partition_id)
        return _arrays(model.state_dict()), len(self.y), metrics

    def evaluate(self, parameters, config):
        from .simulation import evaluate_model
        if self.test is None or len(self.test[1]) == 0:
            return 0.0, 0, {}
        model = self.model_fn()
        model.load_state_dict(_state(list(model.state_dict().keys()), parameters))
        acc, loss, n = evaluate_model(model, *self.test)
        return float(loss), int(n), {"accuracy": float(acc)}
