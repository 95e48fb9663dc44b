"""Real federated datasets through Flower Datasets (``pip install 'cosearch[datasets]'``).

``femnist`` (``flwrlabs/femnist``, one client per writer: ``writer_id``), ``shakespeare``
(``flwrlabs/shakespeare``, one client per speaking role: ``character_id``) and ``cifar10``
(``uoft-cs/cifar10``, IID or Dirichlet(``alpha``) over ``label``), each partition split 80/20
into the client's training and test data; the central test set is CIFAR-10's test split, or
the clients' test data where the dataset has none.  FEMNIST and Shakespeare keep the first
``clients`` natural partitions.

Flower Datasets downloads from the Hugging Face Hub into its cache (``HF_HOME``, default
``~/.cache/huggingface``).  Offline, either set ``HF_DATASETS_OFFLINE=1`` with that cache filled
on a connected machine, or pass ``--data`` with a local copy: a LEAF folder (FEMNIST,
Shakespeare) or the CIFAR-10 python batches, read by :mod:`cosearch.fl.data`.
"""

from __future__ import annotations

import os

import numpy as np

from .fldata import SHAKESPEARE_CHARS, FLData

__all__ = ["HUB_DATASETS", "load_flower_dataset", "partition_arrays", "download_note"]

#: dataset -> (Hugging Face Hub id, column that names the natural partition or None)
HUB_DATASETS = {"femnist": ("flwrlabs/femnist", "writer_id"), "shakespeare": ("flwrlabs/shakespeare", "character_id"),
                "cifar10": ("uoft-cs/cifar10", None)}


def download_note(name: str) -> str:
    """Where ``name`` would be downloaded, and how to run without a network."""
    hub = HUB_DATASETS[name][0]
    cache = os.environ.get("HF_HOME", os.path.join(os.path.expanduser("~"), ".cache", "huggingface"))
    local = "a LEAF folder" if name != "cifar10" else "the CIFAR-10 python batches or FLuID's partition files"
    return (f"{name} comes from the Hugging Face Hub ({hub}) through Flower Datasets, cached in {cache}; "
            f"offline, fill that cache on a connected machine and set HF_DATASETS_OFFLINE=1, or pass --data "
            f"with {local}")


def partition_arrays(name: str, part) -> tuple[np.ndarray, np.ndarray]:
    """(x, y) arrays of one partition (a Hugging Face ``Dataset`` or a mapping of columns):
    FEMNIST 28x28 grey images in [0, 1] and ``character`` labels (62 classes); Shakespeare 80
    characters and the next one as indices into LEAF's alphabet; CIFAR-10 RGB ``img`` in [0, 1]
    and ``label``."""
    if name == "femnist":
        x = np.stack([np.asarray(im.convert("L") if hasattr(im, "convert") else im, dtype=np.float32)
                      for im in part["image"]]) / 255.0
        if x.shape[1:] != (28, 28):
            raise ValueError(f"FEMNIST images must be 28x28, got {x.shape[1:]}")
        y = np.asarray(part["character"], dtype=np.int64)
        if len(y) and (y.min() < 0 or y.max() >= 62):
            raise ValueError("FEMNIST labels must lie in [0, 62)")
        return x[:, None], y
    if name == "shakespeare":
        lut = {c: i for i, c in enumerate(SHAKESPEARE_CHARS)}
        xs, ys = list(part["x"]), list(part["y"])
        for s in xs + ys:
            bad = set(s) - lut.keys()
            if bad:
                raise ValueError(f"Shakespeare characters {sorted(bad)!r} are not in LEAF's 80-character set")
        if any(len(s) != 80 for s in xs) or any(len(s) != 1 for s in ys):
            raise ValueError("Shakespeare samples must be 80 characters and labels single characters")
        return (np.array([[lut[c] for c in s] for s in xs], dtype=np.int64).reshape(-1, 80),
                np.array([lut[s] for s in ys], dtype=np.int64))
    if name == "cifar10":
        x = np.stack([np.asarray(im.convert("RGB") if hasattr(im, "convert") else im, dtype=np.float32)
                      for im in part["img"]]) / 255.0
        if x.shape[1:] != (32, 32, 3):
            raise ValueError(f"CIFAR-10 images must be 32x32 RGB, got {x.shape[1:]}")
        y = np.asarray(part["label"], dtype=np.int64)
        return x.transpose(0, 3, 1, 2), y
    raise ValueError(f"unknown dataset {name!r}; choose one of {sorted(HUB_DATASETS)}")


def _split(x, y, rng, test_fraction=0.2):
    perm = rng.permutation(len(y))
    nt = min(len(y) - 1, max(1, int(round(test_fraction * len(y))))) if len(y) > 1 else 0
    return (x[perm[nt:]], y[perm[nt:]]), (x[perm[:nt]], y[perm[:nt]])


def from_partitions(name: str, parts, central_test=None, seed: int = 0) -> FLData:
    """An :class:`FLData` from per-client partitions (each split 80/20 into train and test) and
    an optional central test partition (default: every client's test data)."""
    rng = np.random.default_rng(seed)
    train, tests = [], []
    for part in parts:
        tr, te = _split(*partition_arrays(name, part), rng)
        train.append(tr)
        tests.append(te)
    if central_test is not None:
        test = partition_arrays(name, central_test)
    else:
        test = (np.concatenate([t[0] for t in tests]), np.concatenate([t[1] for t in tests]))
    shape, classes = {"femnist": ((1, 28, 28), 62), "shakespeare": ((80,), len(SHAKESPEARE_CHARS)),
                      "cifar10": ((3, 32, 32), 10)}[name]
    return FLData(train, test, shape, classes, name, tests)


def load_flower_dataset(name: str, clients: int = 5, alpha: float | None = 0.5, seed: int = 0) -> FLData:
    """``name`` through Flower Datasets (module docstring): natural partitions for FEMNIST and
    Shakespeare, IID (``alpha=None``) or Dirichlet(``alpha``) over labels for CIFAR-10."""
    if name not in HUB_DATASETS:
        raise ValueError(f"Flower Datasets offers {sorted(HUB_DATASETS)}, not {name!r}")
    try:
        from flwr_datasets import FederatedDataset
        from flwr_datasets.partitioner import (
            DirichletPartitioner,
            IidPartitioner,
            NaturalIdPartitioner,
        )
    except ImportError as exc:
        raise ImportError(f"{name} without --data needs Flower Datasets: pip install 'cosearch[datasets]'. "
                          + download_note(name)) from exc
    hub, natural = HUB_DATASETS[name]
    if natural is not None:
        partitioner = NaturalIdPartitioner(partition_by=natural)
    elif alpha is None:
        partitioner = IidPartitioner(num_partitions=clients)
    else:
        partitioner = DirichletPartitioner(num_partitions=clients, partition_by="label", alpha=alpha, seed=seed)
    try:
        fds = FederatedDataset(dataset=hub, partitioners={"train": partitioner})
        parts = [fds.load_partition(c, "train") for c in range(clients)]
        central = fds.load_split("test") if name == "cifar10" else None
    except (OSError, ConnectionError) as exc:
        raise ValueError(f"could not load {name} ({exc}). " + download_note(name)) from None
    return from_partitions(name, parts, central, seed)
