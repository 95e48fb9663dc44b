"""A Flower App (``ServerApp`` + ``ClientApp``) for dropout training on cosearch's FL datasets.

Run it on a real deployment (a SuperLink, SuperNodes started with
``--node-config "partition-id=I num-partitions=N"``) with an app folder whose
``pyproject.toml`` names ``cosearch.fl.flower_app:server_app`` and ``:client_app`` as its
components.  Run config keys: ``method``, ``num-rounds``, ``seed``, ``alpha`` (Dirichlet skew;
negative = IID), ``spread`` (the slowest client computes ``spread`` times slower than the
fastest; round times are simulated with :func:`~cosearch.fl.profiling.device_profiles`),
``fraction-evaluate`` (clients sampled for federated evaluation; 0 = none),
``min-clients``, ``out`` (an **absolute** path of a JSON file for the strategy's per-round
history, written by the ServerApp, which runs in the SuperLink's working folder, not where
``flwr run`` was called; empty = none), ``dataset`` (``digits``, bundled;
``femnist``/``shakespeare``/``cifar10`` read from ``data-dir`` on every SuperNode) and ``model``
(``auto``: the dataset's model as ``simulate`` builds it, or a :data:`~cosearch.fl.models.MODELS`
name).  As in ``simulate``: each dataset's optimiser, learning rate and batch size
(:data:`~cosearch.fl.models.DATASET_DEFAULTS`; run config ``optimizer``, ``lr``, ``batch-size``,
``local-epochs`` override them) and device noise (``noise``, the coefficient of variation of
each round time, default 0.05, drawn per client and round from the run's seed as ``simulate``
draws it).  ``cosearch fl new-app DIR`` writes such an app folder.
"""

from __future__ import annotations

from flwr.client import ClientApp
from flwr.common import Context
from flwr.server import ServerApp, ServerAppComponents, ServerConfig

from .._json import dump_json
from .data import load_dataset
from .flower import DropoutStrategy, SubmodelClient
from .models import DATASET_DEFAULTS, DATASET_SHAPES, build_model
from .profiling import device_profiles

__all__ = ["server_app", "client_app"]


def _example(cfg):
    """An input batch for the run's model (what the strategy sizes its sub-models with)."""
    import torch
    dataset = str(cfg.get("dataset", "digits"))
    shape = DATASET_SHAPES[dataset][0]
    if dataset == "shakespeare":
        return torch.zeros((2, *shape), dtype=torch.long)
    return torch.zeros((2, *shape))


def _model_fn(cfg):
    """The run's model builder: the named model, or (``auto``) the dataset's, at the dataset's
    shapes, exactly as :func:`~cosearch.fl.simulation.simulate` builds it."""
    dataset = str(cfg.get("dataset", "digits"))
    name = str(cfg.get("model", "auto"))
    name = DATASET_DEFAULTS.get(dataset, DATASET_DEFAULTS["digits"])["model"] if name == "auto" else name
    shape, classes = DATASET_SHAPES[dataset]
    return lambda: build_model(name, shape, classes)


def _training(cfg) -> dict:
    """The local training settings of the run: the dataset's (as ``simulate``), run config overrides."""
    d = DATASET_DEFAULTS.get(str(cfg.get("dataset", "digits")), DATASET_DEFAULTS["digits"])
    return {"optimizer": str(cfg.get("optimizer", d["optimizer"])), "lr": float(cfg.get("lr", d["lr"])),
            "batch_size": int(cfg.get("batch-size", d["batch_size"])), "epochs": int(cfg.get("local-epochs", 1))}


#: Seconds a round waits for its clients before the missing ones count as failures.
DEFAULT_ROUND_TIMEOUT_S = 600.0


def _alpha(cfg) -> float | None:
    a = float(cfg.get("alpha", -1.0))
    return None if a <= 0 else a


def _client_fn(context: Context):
    i = int(context.node_config["partition-id"])
    n = int(context.node_config["num-partitions"])
    cfg = context.run_config
    seed = int(cfg.get("seed", 0))
    d = load_dataset(str(cfg.get("dataset", "digits")), n, str(cfg.get("data-dir", "")) or None, seed, _alpha(cfg))
    dev = device_profiles(n, spread=float(cfg.get("spread", 2.5)), noise_cv=float(cfg.get("noise", 0.05)))[i]
    return SubmodelClient(_model_fn(cfg), *d.clients[i], d.client_tests[i], device=dev, seed=seed + i,
                          partition_id=i, example_input=_example(cfg)[:1], noise_seed=seed,
                          **_training(cfg)).to_client()


class _SavingStrategy(DropoutStrategy):
    def __init__(self, out: str, **kw):
        super().__init__(**kw)
        self.out = out

    def aggregate_fit(self, server_round, results, failures):
        res = super().aggregate_fit(server_round, results, failures)
        if self.out:
            dump_json({"method": self.method, "history": self.history}, self.out)
        return res


def _server_fn(context: Context) -> ServerAppComponents:
    import os
    cfg = context.run_config
    rounds = int(cfg.get("num-rounds", 4))
    out = str(cfg.get("out", ""))
    if out and not os.path.isabs(out):
        raise ValueError(f"run config out={out!r} must be an absolute path: the ServerApp writes it from the "
                         "SuperLink's working folder, not where flwr run was called")
    strategy = _SavingStrategy(out, model_fn=_model_fn(cfg),
                               method=str(cfg.get("method", "invariant")), example_input=_example(cfg),
                               total_rounds=rounds, seed=int(cfg.get("seed", 0)),
                               min_available_clients=int(cfg.get("min-clients", 2)),
                               min_fit_clients=int(cfg.get("min-clients", 2)),
                               min_evaluate_clients=int(cfg.get("min-clients", 2)),
                               fraction_evaluate=float(cfg.get("fraction-evaluate", 1.0)))
    # a client that never answers ends its round after round-timeout seconds (counted as a
    # failure, which the strategy accepts) instead of hanging the run
    timeout = float(cfg.get("round-timeout", DEFAULT_ROUND_TIMEOUT_S))
    if not timeout > 0:
        raise ValueError(f"run config round-timeout must be a positive number of seconds, got {timeout!r}")
    return ServerAppComponents(strategy=strategy, config=ServerConfig(num_rounds=rounds, round_timeout=timeout))


server_app = ServerApp(server_fn=_server_fn)
client_app = ClientApp(client_fn=_client_fn)
