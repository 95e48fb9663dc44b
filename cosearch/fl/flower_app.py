"""A Flower App (``ServerApp`` + ``ClientApp``) for dropout training on cosearch's FL datasets.

Run it on a real deployment (a SuperLink, SuperNodes started with
``--node-config "partition-id=I num-partitions=N"``) with an app folder whose
``pyproject.toml`` names ``cosearch.fl.flower_app:server_app`` and ``:client_app`` as its
components.  Run config keys: ``method``, ``num-rounds``, ``seed``, ``alpha`` (Dirichlet skew;
negative = IID), ``spread`` (the slowest client computes ``spread`` times slower than the
fastest; round times are simulated with :func:`~cosearch.fl.profiling.device_profiles`),
``fraction-evaluate`` (clients sampled for federated evaluation; 0 = none),
``min-clients``, ``out`` (a JSON file for the strategy's per-round history; empty = none),
``dataset`` (``digits``, bundled; ``femnist``/``shakespeare``/``cifar10`` read from ``data-dir``
on every SuperNode) and ``model`` (``auto``: the dataset's FLuID model, or a
:data:`~cosearch.fl.models.MODELS` name).  ``cosearch fl new-app DIR`` writes such an app folder.
"""

from __future__ import annotations

from flwr.client import ClientApp
from flwr.common import Context
from flwr.server import ServerApp, ServerAppComponents, ServerConfig

from .._json import dump_json
from .data import load_dataset
from .flower import DropoutStrategy, SubmodelClient
from .models import DATASET_DEFAULTS, DATASET_SHAPES, build_model, mlp
from .profiling import device_profiles

__all__ = ["server_app", "client_app"]


def _model():
    return mlp(64, 10, 32)


def _example(cfg):
    """An input batch for the run's model (what the strategy sizes its sub-models with); None for
    the digits MLP, whose first layer gives its input width."""
    import torch
    dataset = str(cfg.get("dataset", "digits"))
    if dataset == "digits" and str(cfg.get("model", "auto")) == "auto":
        return None
    shape = DATASET_SHAPES[dataset][0]
    if dataset == "shakespeare":
        return torch.zeros((2, *shape), dtype=torch.long)
    return torch.zeros((2, *shape))


def _model_fn(cfg):
    """The run's model builder: digits with ``model = "auto"`` keeps the small MLP; otherwise
    the named (or the dataset's FLuID) model at the dataset's shapes."""
    dataset = str(cfg.get("dataset", "digits"))
    name = str(cfg.get("model", "auto"))
    if dataset == "digits" and name == "auto":
        return _model
    name = DATASET_DEFAULTS.get(dataset, DATASET_DEFAULTS["digits"])["model"] if name == "auto" else name
    shape, classes = DATASET_SHAPES[dataset]
    return lambda: build_model(name, shape, classes)


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
    dev = device_profiles(n, spread=float(cfg.get("spread", 2.5)), noise_cv=0.0)[i]
    return SubmodelClient(_model_fn(cfg), *d.clients[i], d.client_tests[i], device=dev, seed=seed + i,
                          partition_id=i).to_client()


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
    cfg = context.run_config
    rounds = int(cfg.get("num-rounds", 4))
    strategy = _SavingStrategy(str(cfg.get("out", "")), model_fn=_model_fn(cfg),
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
