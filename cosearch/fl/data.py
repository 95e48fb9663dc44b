"""Federated datasets: LEAF JSON, CIFAR-10 pickles, a bundled offline default, partitioners.

* :func:`load_digits` — scikit-learn's bundled handwritten digits (1,797 8x8 images,
  10 classes), real data that needs no download: the default.
* :func:`load_leaf` — a LEAF ``all_data`` directory of JSON files (``users``,
  ``num_samples``, ``user_data: {user: {x, y}}``): FEMNIST (784 floats per sample, one
  client per writer) or Shakespeare (80-character strings, one client per role).
* :func:`load_cifar10` — the CIFAR-10 "python version" pickles (``data_batch_*``, ``test_batch``).
* :func:`iid_partition`, :func:`dirichlet_partition` — split a pooled dataset over clients.
"""

from __future__ import annotations

import glob
import json
import os
import pickle
from dataclasses import dataclass

import numpy as np

__all__ = ["FLData", "load_digits", "load_leaf", "load_cifar10", "iid_partition", "dirichlet_partition",
           "SHAKESPEARE_CHARS", "load_dataset"]

SHAKESPEARE_CHARS = ("\n !\"&'(),-.0123456789:;>?ABCDEFGHIJKLMNOPQRSTUVWXYZ[]abcdefghijklmnopqrstuvwxyz}")


@dataclass
class FLData:
    """Per-client training arrays, a pooled test set, and the input shape / class count."""

    clients: list[tuple[np.ndarray, np.ndarray]]
    test: tuple[np.ndarray, np.ndarray]
    in_shape: tuple
    classes: int
    name: str


def iid_partition(y: np.ndarray, clients: int, rng: np.random.Generator) -> list[np.ndarray]:
    if clients < 1 or clients > len(y):
        raise ValueError(f"clients must be in [1, {len(y)}], got {clients}")
    return [np.sort(p) for p in np.array_split(rng.permutation(len(y)), clients)]


def dirichlet_partition(y: np.ndarray, clients: int, alpha: float, rng: np.random.Generator,
                        min_size: int = 2) -> list[np.ndarray]:
    """Label-skewed split: each class spread over clients by Dirichlet(alpha) proportions."""
    if alpha <= 0:
        raise ValueError(f"alpha must be positive, got {alpha!r}")
    if clients < 1 or clients * min_size > len(y):
        raise ValueError(f"cannot give {clients} clients {min_size} samples each from {len(y)}")
    for _ in range(100):
        parts: list[list[int]] = [[] for _ in range(clients)]
        for c in np.unique(y):
            idx = rng.permutation(np.flatnonzero(y == c))
            cuts = (np.cumsum(rng.dirichlet(np.full(clients, alpha))) * len(idx)).astype(int)[:-1]
            for k, chunk in enumerate(np.split(idx, cuts)):
                parts[k].extend(chunk.tolist())
        if min(len(p) for p in parts) >= min_size:
            return [np.sort(np.array(p, dtype=np.int64)) for p in parts]
    raise ValueError(f"Dirichlet(alpha={alpha}) left a client with fewer than {min_size} samples; raise alpha")


def _split(x, y, clients, alpha, rng, test_fraction):
    perm = rng.permutation(len(y))
    nt = max(1, int(test_fraction * len(y)))
    te, tr = perm[:nt], perm[nt:]
    xtr, ytr = x[tr], y[tr]
    parts = iid_partition(ytr, clients, rng) if alpha is None else dirichlet_partition(ytr, clients, alpha, rng)
    return [(xtr[p], ytr[p]) for p in parts], (x[te], y[te])


def load_digits(clients: int = 5, alpha: float | None = 0.5, seed: int = 0, test_fraction: float = 0.2) -> FLData:
    """scikit-learn's bundled digits, split non-IID (Dirichlet ``alpha``; None = IID)."""
    try:
        from sklearn.datasets import load_digits as sk_digits
    except ImportError as exc:  # pragma: no cover
        raise ImportError("the digits dataset needs scikit-learn: pip install 'cosearch[digits]'") from exc
    d = sk_digits()
    x = (d.images / 16.0).astype(np.float32)[:, None, :, :]
    y = d.target.astype(np.int64)
    rng = np.random.default_rng(seed)
    cl, test = _split(x, y, clients, alpha, rng, test_fraction)
    return FLData(cl, test, (1, 8, 8), 10, "digits")


def load_leaf(directory: str, kind: str = "femnist", max_clients: int | None = None,
              test_fraction: float = 0.1, seed: int = 0) -> FLData:
    """LEAF JSON files in ``directory`` (every ``*.json``): one client per user."""
    files = sorted(glob.glob(os.path.join(directory, "*.json")))
    if not files:
        raise ValueError(f"no LEAF *.json files in {directory!r}")
    users: dict[str, dict] = {}
    for f in files:
        with open(f) as fh:
            d = json.load(fh)
        for key in ("users", "user_data"):
            if key not in d:
                raise ValueError(f"{f}: not a LEAF file (missing {key!r})")
        for u in d["users"]:
            users[u] = d["user_data"][u]
    names = sorted(users)[:max_clients]
    rng = np.random.default_rng(seed)
    clients, tx, ty = [], [], []
    for u in names:
        x, y = _leaf_arrays(users[u], kind)
        perm = rng.permutation(len(y))
        nt = int(test_fraction * len(y))
        tx.append(x[perm[:nt]])
        ty.append(y[perm[:nt]])
        clients.append((x[perm[nt:]], y[perm[nt:]]))
    if kind == "femnist":
        return FLData(clients, (np.concatenate(tx), np.concatenate(ty)), (1, 28, 28), 62, "femnist")
    return FLData(clients, (np.concatenate(tx), np.concatenate(ty)), (80,), len(SHAKESPEARE_CHARS), "shakespeare")


def _leaf_arrays(ud: dict, kind: str):
    if kind == "femnist":
        x = np.asarray(ud["x"], dtype=np.float32)
        if x.ndim != 2 or x.shape[1] != 784:
            raise ValueError(f"FEMNIST samples must have 784 values, got shape {x.shape}")
        return x.reshape(-1, 1, 28, 28), np.asarray(ud["y"], dtype=np.int64)
    if kind == "shakespeare":
        lut = {c: i for i, c in enumerate(SHAKESPEARE_CHARS)}
        x = np.array([[lut.get(c, 0) for c in s] for s in ud["x"]], dtype=np.int64)
        y = np.array([lut.get(c, 0) for c in ud["y"]], dtype=np.int64)
        return x, y
    raise ValueError(f"unknown LEAF kind {kind!r}; choose femnist or shakespeare")


def load_cifar10(directory: str, clients: int = 5, alpha: float | None = 0.5, seed: int = 0) -> FLData:
    """CIFAR-10 python pickles from ``directory`` (``data_batch_*`` and ``test_batch``)."""
    def read(path):
        with open(path, "rb") as fh:
            d = pickle.load(fh, encoding="bytes")
        x = np.asarray(d[b"data"], dtype=np.uint8).reshape(-1, 3, 32, 32).astype(np.float32) / 255.0
        return x, np.asarray(d[b"labels"], dtype=np.int64)
    batches = sorted(glob.glob(os.path.join(directory, "data_batch_*")))
    test = os.path.join(directory, "test_batch")
    if not batches or not os.path.exists(test):
        raise ValueError(f"{directory!r} has no CIFAR-10 data_batch_* / test_batch files")
    xs, ys = zip(*(read(b) for b in batches))
    x, y = np.concatenate(xs), np.concatenate(ys)
    rng = np.random.default_rng(seed)
    parts = iid_partition(y, clients, rng) if alpha is None else dirichlet_partition(y, clients, alpha, rng)
    return FLData([(x[p], y[p]) for p in parts], read(test), (3, 32, 32), 10, "cifar10")


def load_dataset(name: str, clients: int = 5, data_dir: str | None = None, seed: int = 0, alpha=0.5) -> FLData:
    if name == "digits":
        return load_digits(clients, alpha, seed)
    if name in ("femnist", "shakespeare"):
        if not data_dir:
            raise ValueError(f"{name} needs --data pointing at a LEAF directory")
        return load_leaf(data_dir, name, max_clients=clients, seed=seed)
    if name == "cifar10":
        if not data_dir:
            raise ValueError("cifar10 needs --data pointing at the CIFAR-10 python pickles")
        return load_cifar10(data_dir, clients, alpha, seed)
    raise ValueError(f"unknown dataset {name!r}; choose digits, femnist, shakespeare or cifar10")
