"""A Flower App (``ServerApp`` + ``ClientApp``) for dropout training on cosearch's FL datasets.

Run it on a real deployment (a SuperLink, SuperNodes started with
``--node-config "partition-id=I num-partitions=N"``) with an app folder whose
``pyproject.toml`` names ``cosearch.fl.flower_app:server_app`` and ``:client_app`` as its
components.  Run config keys: ``method``, ``num-rounds``, ``seed``, ``alpha`` (Dirichlet skew;
negative = IID), ``spread`` (the slowest client computes ``spread`` times slower than the
fastest; round times are simulated with :func:`~cosearch.fl.profiling.device_profiles`),
``fraction-fit`` (clients sampled to train each round, default 1: all; the stragglers are then the
slowest of each round's sample), ``samples-per-round`` (each client trains each round on that many of its
samples, drawn as ``simulate`` draws them; 0 = all), ``fraction-evaluate`` (clients sampled for federated evaluation; 0 = none),
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

import functools

from flwr.client import ClientApp
from flwr.common import Context
from flwr.server import ServerApp, ServerAppComponents, ServerConfig

from .._json import dump_json
from .data import is_saved_partitions, load_dataset, load_partition
from .flower import DropoutStrategy, SubmodelClient
from .models import DATASET_DEFAULTS, DATASET_SHAPES, build_model
from .profiling import device_profiles

__all__ = ["server_app", "client_app", "server_components", "make_client", "run_flower_simulation"]


# ------------------------------------------------------------------ run config values
# A run config comes from a TOML file or `flwr run --run-config`: each value is checked here
# and refused naming its key (a float batch size was truncated, an unknown dataset raised a
# KeyError from inside).
def _cfg_int(cfg, key: str, default: int, minimum: int = 1) -> int:
    from .._validate import nonneg_int, positive_int
    v = cfg.get(key, default)
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    return positive_int(f"run config {key}", v) if minimum >= 1 else nonneg_int(f"run config {key}", v)


def _cfg_float(cfg, key: str, default: float) -> float:
    v = cfg.get(key, default)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValueError(f"run config {key} must be a number, got {v!r}")
    return float(v)


def _cfg_dataset(cfg) -> str:
    from .._validate import choice
    return choice("run config dataset", str(cfg.get("dataset", "digits")), tuple(DATASET_SHAPES))


def _example(cfg):
    """An input batch for the run's model (what the strategy sizes its sub-models with)."""
    import torch
    dataset = _cfg_dataset(cfg)
    shape = DATASET_SHAPES[dataset][0]
    if dataset == "shakespeare":
        return torch.zeros((2, *shape), dtype=torch.long)
    return torch.zeros((2, *shape))


def _model_fn(cfg):
    """The run's model builder: the named model, or (``auto``) the dataset's, at the dataset's
    shapes, exactly as :func:`~cosearch.fl.simulation.simulate` builds it."""
    dataset = _cfg_dataset(cfg)
    name = str(cfg.get("model", "auto"))
    name = DATASET_DEFAULTS.get(dataset, DATASET_DEFAULTS["digits"])["model"] if name == "auto" else name
    shape, classes = DATASET_SHAPES[dataset]
    return lambda: build_model(name, shape, classes)


def _training(cfg) -> dict:
    """The local training settings of the run: the dataset's (as ``simulate``), run config overrides."""
    d = DATASET_DEFAULTS.get(_cfg_dataset(cfg), DATASET_DEFAULTS["digits"])
    return {"optimizer": str(cfg.get("optimizer", d["optimizer"])), "lr": _cfg_float(cfg, "lr", d["lr"]),
            "batch_size": _cfg_int(cfg, "batch-size", d["batch_size"]), "epochs": _cfg_int(cfg, "local-epochs", 1),
            "samples_per_round": _cfg_int(cfg, "samples-per-round", 0, minimum=0) or None}


#: Seconds a round waits for its clients before the missing ones count as failures.
DEFAULT_ROUND_TIMEOUT_S = 600.0


def _alpha(cfg) -> float | None:
    a = _cfg_float(cfg, "alpha", -1.0)
    return None if a <= 0 else a


@functools.lru_cache(maxsize=2)
def _dataset(name: str, n: int, data_dir: str | None, seed: int, alpha):
    """The run's dataset, read once per process (a simulation engine's worker serves many clients)."""
    return load_dataset(name, n, data_dir, seed, alpha)


def make_client(cfg, partition_id: int, num_partitions: int):
    """The ``ClientApp``'s client for partition ``partition_id`` of ``num_partitions`` under run
    config ``cfg``.  From a folder of saved partitions (``data-dir``, :func:`~cosearch.fl.data.save_partitions`)
    only this client's file is read; other datasets are loaded once per process and partitioned."""
    i, n = int(partition_id), int(num_partitions)
    seed = _cfg_int(cfg, "seed", 0, minimum=0)
    name, data_dir = _cfg_dataset(cfg), str(cfg.get("data-dir", "")) or None
    if data_dir and is_saved_partitions(data_dir):
        x, y, tx, ty = load_partition(data_dir, i)
        train, test = (x, y), (tx, ty)
    else:
        d = _dataset(name, n, data_dir, seed, _alpha(cfg))
        train, test = d.clients[i], d.client_tests[i]
    dev = device_profiles(n, spread=_cfg_float(cfg, "spread", 2.5), noise_cv=_cfg_float(cfg, "noise", 0.05))[i]
    return SubmodelClient(_model_fn(cfg), *train, test, device=dev, seed=seed + i,
                          partition_id=i, example_input=_example(cfg)[:1], noise_seed=seed,
                          **_training(cfg)).to_client()


def _client_fn(context: Context):
    return make_client(context.run_config, int(context.node_config["partition-id"]),
                       int(context.node_config["num-partitions"]))


class _SavingStrategy(DropoutStrategy):
    def __init__(self, out: str, **kw):
        super().__init__(**kw)
        self.out = out

    def aggregate_fit(self, server_round, results, failures):
        res = super().aggregate_fit(server_round, results, failures)
        if self.out:
            dump_json({"method": self.method, "history": self.history}, self.out)
        return res


def server_components(cfg, strategy_class=None) -> ServerAppComponents:
    """The ``ServerApp``'s strategy and server config under run config ``cfg`` (module
    docstring; ``fraction-fit``: the share of clients sampled to train each round, default all)."""
    import os
    rounds = _cfg_int(cfg, "num-rounds", 4)
    out = str(cfg.get("out", ""))
    if out and not os.path.isabs(out):
        raise ValueError(f"run config out={out!r} must be an absolute path: the ServerApp writes it from the "
                         "SuperLink's working folder, not where flwr run was called")
    fraction_fit = _cfg_float(cfg, "fraction-fit", 1.0)
    min_clients = _cfg_int(cfg, "min-clients", 2)
    if not 0.0 < fraction_fit <= 1.0:
        raise ValueError(f"run config fraction-fit must be in (0, 1], got {fraction_fit!r}")
    strategy = (strategy_class or _SavingStrategy)(
        out, model_fn=_model_fn(cfg), method=str(cfg.get("method", "invariant")), example_input=_example(cfg),
        total_rounds=rounds, seed=_cfg_int(cfg, "seed", 0, minimum=0), fraction_fit=fraction_fit,
        min_available_clients=min_clients, min_fit_clients=min_clients, min_evaluate_clients=min_clients,
        fraction_evaluate=_cfg_float(cfg, "fraction-evaluate", 1.0))
    # a client that never answers ends its round after round-timeout seconds (counted as a
    # failure, which the strategy accepts) instead of hanging the run
    timeout = _cfg_float(cfg, "round-timeout", DEFAULT_ROUND_TIMEOUT_S)
    if not timeout > 0:
        raise ValueError(f"run config round-timeout must be a positive number of seconds, got {timeout!r}")
    return ServerAppComponents(strategy=strategy, config=ServerConfig(num_rounds=rounds, round_timeout=timeout))


def _server_fn(context: Context) -> ServerAppComponents:
    return server_components(context.run_config)


def run_flower_simulation(cfg: dict, num_clients: int, *, cpus_per_client: float = 1.0) -> list[dict]:
    """Run this app on Flower's simulation engine (Ray, in this process) with ``num_clients``
    virtual SuperNodes under run config ``cfg`` (the keys of the module docstring, e.g.
    ``{"dataset": "femnist", "data-dir": DIR, "fraction-fit": 0.01, "num-rounds": 5}``) and return
    the strategy's per-round history (``server_round_s``: the round's wall time as the server saw
    it).  Needs ``flwr[simulation]``."""
    from flwr.simulation import run_simulation
    holder: dict = {}

    class _Kept(_SavingStrategy):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            holder["strategy"] = self

    def server_fn(_context):
        return server_components(cfg, _Kept)

    def client_fn(context):
        return make_client(cfg, int(context.node_config["partition-id"]), int(context.node_config["num-partitions"]))
    run_simulation(ServerApp(server_fn=server_fn), ClientApp(client_fn=client_fn), num_supernodes=int(num_clients),
                   backend_config={"client_resources": {"num_cpus": float(cpus_per_client), "num_gpus": 0.0}})
    if "strategy" not in holder:
        raise RuntimeError("Flower's simulation ended before its ServerApp built the strategy (see its log)")
    return list(holder["strategy"].history)


server_app = ServerApp(server_fn=_server_fn)
client_app = ClientApp(client_fn=_client_fn)
