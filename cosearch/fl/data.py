"""Federated datasets: LEAF JSON, CIFAR-10 batches (safe loader), the bundled digits, generators.

Every dataset is an :class:`FLData`: per-client training arrays, per-client test splits
(for federated, example-weighted evaluation) and a central test set.

* :func:`load_digits` — scikit-learn's bundled handwritten digits (1,797 8x8 images, 10
  classes), real data needing no download: a central hold-out (``test_fraction``), the
  rest split non-IID over clients (Dirichlet ``alpha``), each client keeping
  ``client_test_fraction`` of its share as its own test split.
* :func:`load_leaf` — LEAF JSON files (read one file at a time; with ``max_clients`` reading
  stops once that many users are found) (``users``, ``num_samples``, ``user_data: {user:
  {x, y}}``).  With LEAF's layout (``train/`` and ``test/`` folders of ``*.json``) the
  split is LEAF's: a user's training data from ``train/``, its test data from ``test/``,
  the central test set all test data.  A folder of ``all_data`` files (no split) is split
  per user with ``test_fraction``.  A user listed in two files of one split, x/y length
  mismatches, labels outside the classes and an empty test split are errors.
* :func:`load_fluid_clients` — FLuID's own client files (``<i>_{train,test}.json[.gz]``: FEMNIST
  in LEAF's layout, several real writers a client; Shakespeare one role a client in FLuID's own
  ``{idx, character, x, y}`` layout), one file per client as FLuID's Android clients read them.
* :func:`load_cifar10` — the CIFAR-10 "python version" batches through a restricted
  unpickler that admits only NumPy arrays, plain containers and latin-1 bytes (pickle
  protocols 0-5): a crafted file cannot run code.  A folder of FLuID's
  ``partition_<i>_{train,test}.txt`` image lists is read by :func:`load_fluid_partitions`.
* :func:`write_cifar_like` — CIFAR-10-format python batches of coloured digits (CIFAR-shaped).
* :func:`write_femnist_like` / :func:`write_shakespeare_like` — LEAF-format folders generated
  offline from real data (digits restyled per writer; English text from Python's own
  docstrings, split by module as "roles") for experiments and tests of the LEAF path.
"""

from __future__ import annotations

import glob
import io
import json
import os
import pickle

import numpy as np

from .._validate import nonneg_int, positive_int
from .fldata import SHAKESPEARE_CHARS, FLData

__all__ = ["FLData", "load_digits", "load_leaf", "load_fluid_clients", "is_fluid_clients", "save_partitions",
           "load_partitions", "PARTITIONS_META", "load_cifar10", "load_fluid_partitions", "CIFAR10_CLASSES",
           "iid_partition", "dirichlet_partition",
           "SHAKESPEARE_CHARS", "load_dataset", "write_femnist_like", "femnist_like", "load_partition", "is_saved_partitions", "write_shakespeare_like", "write_cifar_like",
           "DATASETS"]

DATASETS = ("digits", "femnist", "shakespeare", "cifar10")


def _class_labels(values, classes: int, where: str) -> np.ndarray:
    """Class labels as int64, refused unless each is a whole number in [0, ``classes``) (a label of
    1.5 or 1e30 is not truncated or wrapped into some class)."""
    if isinstance(values, (list, tuple)) and any(isinstance(v, (bool, np.bool_)) for v in values):
        # JSON true beside numbers becomes 1 in an array: a label of true is not class 1
        raise ValueError(f"{where}: labels must be whole numbers, got a true/false among them")
    a = np.asarray(values)
    if a.ndim != 1 or (a.size and a.dtype.kind not in "iuf"):
        raise ValueError(f"{where}: labels must be a list of whole numbers")
    if a.dtype.kind == "f":
        ok = np.isfinite(a) & (a == np.round(a)) & (np.abs(a) < 2.0 ** 53)
        if not ok.all():
            raise ValueError(f"{where}: labels must be whole numbers, got {a[~ok][:3].tolist()}")
    if a.size and (a.min() < 0 or a.max() >= classes):
        raise ValueError(f"{where}: labels must lie in [0, {classes}), got {a.min():.0f}..{a.max():.0f}")
    return a.astype(np.int64)


def iid_partition(y: np.ndarray, clients: int, rng: np.random.Generator) -> list[np.ndarray]:
    if clients < 1 or clients > len(y):
        raise ValueError(f"clients must be in [1, {len(y)}], got {clients}")
    return [np.sort(p) for p in np.array_split(rng.permutation(len(y)), clients)]


def dirichlet_partition(y: np.ndarray, clients: int, alpha: float, rng: np.random.Generator,
                        min_size: int = 2) -> list[np.ndarray]:
    """Label-skewed split: each class spread over clients by Dirichlet(alpha) proportions."""
    if isinstance(alpha, bool) or not (isinstance(alpha, (int, float, np.floating)) and 0 < alpha < 1e12):   # NaN too
        raise ValueError(f"alpha must be a positive finite number below 1e12 (0 or None: IID), got {alpha!r}")
    alpha = float(alpha)
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


def _client_split(x, y, parts, rng, client_test_fraction):
    train, tests = [], []
    for p in parts:
        p = rng.permutation(p)
        nt = max(1, int(round(client_test_fraction * len(p)))) if client_test_fraction > 0 else 0
        nt = min(nt, len(p) - 1)
        tests.append((x[p[:nt]], y[p[:nt]]))
        train.append((x[p[nt:]], y[p[nt:]]))
    return train, tests


def load_digits(clients: int = 5, alpha: float | None = 0.5, seed: int = 0, test_fraction: float = 0.2,
                client_test_fraction: float = 0.2) -> FLData:
    """scikit-learn's bundled digits, split non-IID (Dirichlet ``alpha``; None = IID)."""
    try:
        from sklearn.datasets import load_digits as sk_digits
    except ImportError as exc:  # pragma: no cover
        raise ImportError("the digits dataset needs scikit-learn: pip install 'cosearch[digits]'") from exc
    d = sk_digits()
    x = (d.images / 16.0).astype(np.float32)[:, None, :, :]
    y = d.target.astype(np.int64)
    rng = np.random.default_rng(seed)
    perm = rng.permutation(len(y))
    nt = max(1, int(test_fraction * len(y)))
    te, tr = perm[:nt], perm[nt:]
    xtr, ytr = x[tr], y[tr]
    parts = iid_partition(ytr, clients, rng) if alpha is None else dirichlet_partition(ytr, clients, alpha, rng, 4)
    train, tests = _client_split(xtr, ytr, parts, rng, client_test_fraction)
    return FLData(train, (x[te], y[te]), (1, 8, 8), 10, "digits", tests)


# ----------------------------------------------------------------------------- LEAF
def _read_json(path: str):
    """A JSON file, gzip-compressed when its name ends in ``.gz`` (FLuID's files ship so)."""
    import gzip

    from .._json import parse_json
    try:
        if path.endswith(".gz"):
            with gzip.open(path, "rt", encoding="utf-8") as fh:
                text = fh.read()
        else:
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: cannot read ({exc})") from None
    return parse_json(text, path, constants=True)


def _leaf_document(d, f: str) -> dict:
    """A parsed LEAF file checked for LEAF's layout: ``users`` (a list of names) and
    ``user_data`` (an object holding every listed user)."""
    if not isinstance(d, dict):
        raise ValueError(f"{f}: not a LEAF file (top level is not an object)")
    for key in ("users", "user_data"):
        if key not in d:
            raise ValueError(f"{f}: not a LEAF file (missing {key!r})")
    if not isinstance(d["users"], list) or not all(isinstance(u, str) for u in d["users"]):
        raise ValueError(f"{f}: LEAF's 'users' must be a list of user names")
    if not isinstance(d["user_data"], dict):
        raise ValueError(f"{f}: LEAF's 'user_data' must be an object keyed by user name")
    missing = [u for u in d["users"] if u not in d["user_data"]]
    if missing:
        raise ValueError(f"{f}: user {missing[0]!r} is listed but has no user_data")
    return d


def _read_leaf_files(files: list[str], split: str, limit: int | None = None,
                     want: set[str] | None = None) -> dict[str, dict]:
    """Users of LEAF files read one file at a time (each file's other users dropped before the
    next is read): the first ``limit`` users in file order, or only the users in ``want``;
    reading stops once they are all found, so a subset of a large dataset needs about one
    file's memory, not the whole dataset's."""
    users: dict[str, dict] = {}
    where: dict[str, str] = {}
    for f in files:
        if (limit is not None and len(users) >= limit) or (want is not None and len(users) == len(want)):
            break
        d = _leaf_document(_read_json(f), f)
        for u in d["users"]:
            if u in where:
                raise ValueError(f"user {u!r} appears in two {split} files: {where[u]} and {f}")
            where[u] = f
            if (want is None or u in want) and (limit is None or len(users) < limit):
                users[u] = d["user_data"][u]
        del d
    return users


def _leaf_arrays(ud: dict, kind: str, where: str):
    """A LEAF user's samples as arrays; any malformed entry is refused naming the user."""
    if not isinstance(ud, dict) or "x" not in ud or "y" not in ud:
        raise ValueError(f"{where}: user_data entries need 'x' and 'y'")
    if not isinstance(ud["x"], list) or not isinstance(ud["y"], list):
        raise ValueError(f"{where}: 'x' and 'y' must be lists of samples and labels")
    try:
        return _leaf_user_arrays(ud, kind, where)
    except (TypeError, ValueError, OverflowError) as exc:
        if str(exc).startswith(where):
            raise
        raise ValueError(f"{where}: malformed samples ({exc})") from None


def _leaf_user_arrays(ud: dict, kind: str, where: str):
    if len(ud["x"]) != len(ud["y"]):
        raise ValueError(f"{where}: {len(ud['x'])} samples in x but {len(ud['y'])} labels in y")
    if kind == "femnist":
        x = np.asarray(ud["x"], dtype=np.float32)
        if len(ud["x"]) == 0:
            x = x.reshape(0, 784)
        if x.ndim != 2 or x.shape[1] != 784:
            raise ValueError(f"{where}: FEMNIST samples must have 784 values, got shape {x.shape}")
        if not np.all(np.isfinite(x)):
            raise ValueError(f"{where}: FEMNIST samples hold non-finite pixel values (NaN or infinity)")
        if x.size and (x.min() < 0.0 or x.max() > 1.0):
            # LEAF writes FEMNIST's pixels in [0, 1] (FLuID's client files too); 0..255 or a stray
            # value would train a differently scaled input without a word
            raise ValueError(f"{where}: FEMNIST pixel values must lie in [0, 1] as LEAF writes them, got "
                             f"{x.min():.4g}..{x.max():.4g} (rescale the images)")
        y = _class_labels(ud["y"], 62, where)
        return x.reshape(-1, 1, 28, 28), y
    if kind == "shakespeare":
        lut = {c: i for i, c in enumerate(SHAKESPEARE_CHARS)}

        def enc(s):
            bad = set(s) - lut.keys()
            if bad:
                raise ValueError(f"{where}: characters {sorted(bad)!r} are not in LEAF's 80-character set")
            return [lut[c] for c in s]
        if any(not isinstance(s, str) or len(s) != 80 for s in ud["x"]):
            raise ValueError(f"{where}: Shakespeare samples must be 80-character strings")
        if any(not isinstance(s, str) or len(s) != 1 for s in ud["y"]):
            raise ValueError(f"{where}: Shakespeare labels must be single characters")
        x = np.array([enc(s) for s in ud["x"]], dtype=np.int64).reshape(-1, 80)
        y = np.array([enc(s)[0] for s in ud["y"]], dtype=np.int64)
        return x, y
    raise ValueError(f"unknown LEAF kind {kind!r}; choose femnist or shakespeare")


def load_leaf(directory: str, kind: str = "femnist", max_clients: int | None = None,
              test_fraction: float = 0.1, seed: int = 0) -> FLData:
    """LEAF JSON in ``directory``: ``train/`` + ``test/`` (LEAF's split) or a flat folder.

    ``max_clients``: the first that many users in file order (files sorted by name, users in
    each file's order); files are read one at a time and reading stops once they are found, and
    the central test set is then those users' test data (without it: every test user's)."""
    if max_clients is not None and (isinstance(max_clients, bool) or not isinstance(max_clients, int)
                                    or max_clients < 1):
        raise ValueError(f"max_clients must be a positive integer or None, got {max_clients!r}")
    tr_dir, te_dir = os.path.join(directory, "train"), os.path.join(directory, "test")
    split = os.path.isdir(tr_dir) and os.path.isdir(te_dir)
    if split:
        tr_files = sorted(glob.glob(os.path.join(tr_dir, "*.json")))
        te_files = sorted(glob.glob(os.path.join(te_dir, "*.json")))
        if not tr_files or not te_files:
            raise ValueError(f"{directory!r}: LEAF train/ and test/ folders need *.json files")
        train_users = _read_leaf_files(tr_files, "train", limit=max_clients)
        test_users = _read_leaf_files(te_files, "test", want=set(train_users) if max_clients else None)
    else:
        files = sorted(glob.glob(os.path.join(directory, "*.json")))
        if not files:
            raise ValueError(f"no LEAF *.json files (or train/ and test/ folders) in {directory!r}")
        train_users, test_users = _read_leaf_files(files, "data", limit=max_clients), {}
    names = list(train_users) if max_clients else sorted(train_users)
    rng = np.random.default_rng(seed)
    clients, tests = [], []
    for u in names:
        x, y = _leaf_arrays(train_users[u], kind, f"user {u!r}")
        if split:
            tx, ty = (_leaf_arrays(test_users[u], kind, f"test user {u!r}") if u in test_users
                      else (x[:0], y[:0]))
        else:
            perm = rng.permutation(len(y))
            nt = int(test_fraction * len(y))
            tx, ty, x, y = x[perm[:nt]], y[perm[:nt]], x[perm[nt:]], y[perm[nt:]]
        clients.append((x, y))
        tests.append((tx, ty))
    if split:   # the central test set: every test user's data (also users without training data)
        pool = [_leaf_arrays(test_users[u], kind, f"test user {u!r}") for u in sorted(test_users)
                if u not in names] + tests
    else:
        pool = tests
    test = (np.concatenate([t[0] for t in pool]), np.concatenate([t[1] for t in pool]))
    if kind == "femnist":
        return FLData(clients, test, (1, 28, 28), 62, "femnist", tests)
    return FLData(clients, test, (80,), len(SHAKESPEARE_CHARS), "shakespeare", tests)


# ----------------------------------------------------------------------------- FLuID's client files
def _fluid_files(directory: str, split: str) -> list[str]:
    """FLuID's per-client files ``<i>_<split>.json[.gz]`` in client order 0, 1, ...; a gap in the
    numbering is an error (a client would silently go missing)."""
    import re
    found = {}
    for f in os.listdir(directory):
        m = re.fullmatch(rf"(\d+)_{split}\.json(\.gz)?", f)
        if m:
            i = int(m.group(1))
            if i in found:
                raise ValueError(f"{directory!r}: client {i} has two {split} files ({found[i]} and {f})")
            found[i] = f
    if found and sorted(found) != list(range(len(found))):
        raise ValueError(f"{directory!r}: FLuID's {split} files must be numbered 0..{len(found) - 1}, got "
                         f"{sorted(found)}")
    return [os.path.join(directory, found[i]) for i in sorted(found)]


def is_fluid_clients(directory: str) -> bool:
    """Whether ``directory`` holds FLuID's per-client files (``0_test.json`` or ``.json.gz``)."""
    return os.path.isdir(directory) and any(os.path.isfile(os.path.join(directory, f"0_{s}.json{z}"))
                                            for s in ("train", "test") for z in ("", ".gz"))


def _fluid_client_arrays(path: str, kind: str) -> tuple[np.ndarray, np.ndarray]:
    """One FLuID client file: FEMNIST in LEAF's layout (every writer of the file merged into the
    client), Shakespeare as FLuID ships it (``{idx, character, num_samples, x, y}``, one role)."""
    d = _read_json(path)
    if not isinstance(d, dict):
        raise ValueError(f"{path}: a FLuID client file is a JSON object")
    if kind == "femnist":
        d = _leaf_document(d, path)
        parts = [_leaf_arrays(d["user_data"][u], kind, f"{path}: writer {u!r}") for u in d["users"]]
        if not parts:
            raise ValueError(f"{path}: no writers")
        return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
    if kind == "shakespeare":
        for key in ("x", "y"):
            if key not in d:
                raise ValueError(f"{path}: FLuID's Shakespeare files have x and y (and idx, character); missing {key!r}")
        arrays = _leaf_arrays({"x": d["x"], "y": d["y"]}, kind, f"{path} ({d.get('character', 'role')})")
        if "num_samples" in d and d["num_samples"] != len(d["y"]):
            # FLuID's own test files disagree with their data (0_test: 2,064 stated, 1,985 samples);
            # its client reads the x/y lists, as here
            import warnings
            warnings.warn(f"{path}: num_samples says {d['num_samples']} but the file holds {len(d['y'])} samples; "
                          "the samples are read", stacklevel=3)
        return arrays
    raise ValueError(f"unknown FLuID dataset {kind!r}; choose femnist or shakespeare")


def load_fluid_clients(directory: str, kind: str, clients: int | None = None, test_fraction: float = 0.2,
                       seed: int = 0) -> FLData:
    """FLuID's own client files (iwang05/FLuID ``*/client/app/src/main/assets/data/``): client
    ``i`` is ``<i>_train.json`` / ``<i>_test.json`` (optionally gzip-compressed), as FLuID's
    Android client ``i + 1`` reads them — FEMNIST in LEAF's layout (a client holds several real
    writers), Shakespeare one speaking role per client in FLuID's own layout.  Where only the
    ``_test`` files are present (the snapshot in this project's shared data), each client's file
    is split ``1 - test_fraction`` / ``test_fraction`` at random (``seed``) into its training and
    test data; the central test set is every client's test data.  ``clients``: the first that
    many (None: all)."""
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction!r}")
    train_files, test_files = _fluid_files(directory, "train"), _fluid_files(directory, "test")
    if not train_files and not test_files:
        raise ValueError(f"{directory!r}: no FLuID client files <i>_train.json / <i>_test.json(.gz)")
    if train_files and test_files and len(train_files) != len(test_files):
        raise ValueError(f"{directory!r}: {len(train_files)} train files but {len(test_files)} test files")
    n = len(train_files or test_files)
    if clients is not None:
        if isinstance(clients, bool) or not isinstance(clients, int) or clients < 1:
            raise ValueError(f"clients must be a positive integer, got {clients!r}")
        if clients > n:
            raise ValueError(f"{directory!r} holds {n} FLuID clients, not {clients}")
        n = clients
    rng = np.random.default_rng(seed)
    train, tests = [], []
    for i in range(n):
        if train_files:
            train.append(_fluid_client_arrays(train_files[i], kind))
            tests.append(_fluid_client_arrays(test_files[i], kind) if test_files else None)
        else:
            x, y = _fluid_client_arrays(test_files[i], kind)
            perm = rng.permutation(len(y))
            nt = max(1, int(round(test_fraction * len(y))))
            tests.append((x[perm[:nt]], y[perm[:nt]]))
            train.append((x[perm[nt:]], y[perm[nt:]]))
    if any(t is None for t in tests):
        raise ValueError(f"{directory!r}: training files without test files")
    central = (np.concatenate([t[0] for t in tests]), np.concatenate([t[1] for t in tests]))
    if kind == "femnist":
        return FLData(train, central, (1, 28, 28), 62, "femnist", tests)
    return FLData(train, central, (80,), len(SHAKESPEARE_CHARS), "shakespeare", tests)


# ----------------------------------------------------------------------------- saved partitions
#: The file that marks a folder written by :func:`save_partitions`.
PARTITIONS_META = "cosearch_partitions.json"


def save_partitions(data: FLData, directory: str, overwrite: bool = False, source: str = "") -> str:
    """Write a dataset's client partitions to ``directory`` so :func:`load_partitions` (and
    ``--data DIR``) reads them later without a network: ``client_<i>.npz`` (``x``, ``y``,
    ``test_x``, ``test_y``), ``central_test.npz`` and :data:`PARTITIONS_META` (name, input shape,
    classes, client count, ``source``).  ``cosearch fl data fetch NAME DIR`` writes one from
    Flower Datasets on a connected machine."""
    if data.name == "digits":
        # load_partitions reads femnist, shakespeare and cifar10 only: the bundled digits need no files
        raise ValueError("digits is bundled with cosearch: there is nothing to save for a later offline load "
                         "(saved partitions are for femnist, shakespeare or cifar10)")
    if os.path.exists(os.path.join(directory, PARTITIONS_META)) and not overwrite:
        raise FileExistsError(f"{directory!r} already holds saved partitions; pass overwrite=True (--force)")
    os.makedirs(directory, exist_ok=True)
    for i, (x, y) in enumerate(data.clients):
        tx, ty = data.client_tests[i] if data.client_tests else (x[:0], y[:0])
        np.savez_compressed(os.path.join(directory, f"client_{i}.npz"), x=x, y=y, test_x=tx, test_y=ty)
    np.savez_compressed(os.path.join(directory, "central_test.npz"), x=data.test[0], y=data.test[1])
    meta = {"name": data.name, "in_shape": list(data.in_shape), "classes": int(data.classes),
            "clients": len(data.clients), "source": source}
    with open(os.path.join(directory, PARTITIONS_META), "w") as fh:
        json.dump(meta, fh, indent=1)
    return directory


def is_saved_partitions(directory: str) -> bool:
    """Whether ``directory`` holds partitions written by :func:`save_partitions`."""
    return os.path.isfile(os.path.join(directory, PARTITIONS_META))


def _partitions_meta(directory: str) -> dict:
    """The saved partitions' description, checked: a dataset cosearch trains, its own input shape
    and class count (the models are built for them), a positive client count."""
    from .models import DATASET_SHAPES
    meta_path = os.path.join(directory, PARTITIONS_META)
    meta = _read_json(meta_path)
    if not isinstance(meta, dict) or not {"name", "in_shape", "classes", "clients"} <= set(meta):
        raise ValueError(f"{meta_path}: needs name, in_shape, classes and clients")
    name = meta["name"]
    if not isinstance(name, str) or name not in DATASET_SHAPES or name == "digits":
        raise ValueError(f"{meta_path}: name must be one of femnist, shakespeare, cifar10, got {name!r}")
    shape, classes = DATASET_SHAPES[name]
    if meta["in_shape"] != list(shape) or meta["classes"] != classes:
        raise ValueError(f"{meta_path}: {name} has input shape {list(shape)} and {classes} classes (its models "
                         f"are built for them), got {meta['in_shape']!r} and {meta['classes']!r}")
    n = meta["clients"]
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"{meta_path}: clients must be a positive whole number, got {n!r}")
    return meta


def _saved_arrays(path, *keys):
    try:
        with np.load(path, allow_pickle=False) as z:
            return tuple(z[k] for k in keys)
    except (OSError, KeyError, ValueError, EOFError) as exc:
        raise ValueError(f"{path}: not a saved partition ({exc})") from None


def _checked_samples(x, y, meta: dict, where: str) -> tuple[np.ndarray, np.ndarray]:
    """Saved samples as the loaders make them: ``x`` of shape ``(n, *in_shape)``, finite numbers
    (Shakespeare: character indices), ``y`` whole class labels, one per sample."""
    shape = tuple(meta["in_shape"])
    if x.ndim != 1 + len(shape) or tuple(x.shape[1:]) != shape or x.dtype.kind not in "iuf":
        raise ValueError(f"{where}: samples must be numbers of shape (n, {', '.join(map(str, shape))}), "
                         f"got {x.dtype} {x.shape}")
    if meta["name"] == "shakespeare":
        if x.dtype.kind == "f" or (x.size and (x.min() < 0 or x.max() >= len(SHAKESPEARE_CHARS))):
            raise ValueError(f"{where}: Shakespeare samples must be character indices in [0, "
                             f"{len(SHAKESPEARE_CHARS)})")
    elif x.dtype.kind == "f" and not np.isfinite(x).all():
        raise ValueError(f"{where}: non-finite sample values")
    labels = _class_labels(y, int(meta["classes"]), where)
    if len(labels) != len(x):
        raise ValueError(f"{where}: {len(x)} samples but {len(labels)} labels")
    return (x if meta["name"] == "shakespeare" else x.astype(np.float32)), labels


def load_partition(directory: str, index: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One client's ``(x, y, test_x, test_y)`` from partitions written by :func:`save_partitions`,
    reading only its file (what a client process needs)."""
    return _load_partition(directory, index, _partitions_meta(directory))


def _load_partition(directory: str, index: int, meta: dict):
    """:func:`load_partition` given the folder's checked description (read once per folder)."""
    n = meta["clients"]
    if isinstance(index, bool) or not isinstance(index, (int, np.integer)) or not 0 <= int(index) < n:
        raise ValueError(f"{directory!r} holds {n} saved clients; partition {index!r} is not one of them")
    path = os.path.join(directory, f"client_{int(index)}.npz")
    x, y, tx, ty = _saved_arrays(path, "x", "y", "test_x", "test_y")
    return (*_checked_samples(x, y, meta, f"{path} (training)"), *_checked_samples(tx, ty, meta, f"{path} (test)"))


def load_partitions(directory: str, clients: int | None = None) -> FLData:
    """Partitions written by :func:`save_partitions` (arrays only: ``allow_pickle`` stays off, so
    a crafted file cannot run code); ``clients``: the first that many."""
    meta = _partitions_meta(directory)
    n = meta["clients"]
    if clients is not None:
        if clients > n:
            raise ValueError(f"{directory!r} holds {n} saved clients, not {clients}")
        n = clients
    train, tests = [], []
    for i in range(n):
        x, y, tx, ty = _load_partition(directory, i, meta)
        train.append((x, y))
        tests.append((tx, ty))
    central = os.path.join(directory, "central_test.npz")
    test = _checked_samples(*_saved_arrays(central, "x", "y"), meta, central)
    return FLData(train, test, tuple(meta["in_shape"]), int(meta["classes"]), str(meta["name"]), tests)


# ----------------------------------------------------------------------------- CIFAR-10
_NUMPY_GLOBALS = {("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
                  ("numpy", "ndarray"), ("numpy", "dtype"), ("numpy.core.multiarray", "scalar"),
                  ("numpy._core.multiarray", "scalar"),
                  # pickle protocol 5 (in-band buffers): an array rebuilt from its bytes
                  ("numpy.core.numeric", "_frombuffer"), ("numpy._core.numeric", "_frombuffer")}


def _latin1_encode(text, encoding="latin1"):
    """What Python 3 pickles (protocols 0-2) store bytes as: ``_codecs.encode(str, "latin1")``;
    only that encoding is admitted."""
    import codecs
    if encoding not in ("latin1", "latin-1") or not isinstance(text, str):
        raise pickle.UnpicklingError(f"refusing _codecs.encode with encoding {encoding!r}")
    return codecs.encode(text, encoding)


class _CifarUnpickler(pickle.Unpickler):
    """Admits NumPy arrays, dtypes, plain containers and latin-1 bytes (every pickle protocol
    0-5 of them); any other global is refused."""

    def find_class(self, module, name):
        if (module, name) in _NUMPY_GLOBALS:
            return super().find_class(module, name)
        if (module, name) == ("_codecs", "encode"):
            return _latin1_encode
        raise pickle.UnpicklingError(f"refusing to load global {module}.{name}")


def _read_cifar_batch(path: str):
    with open(path, "rb") as fh:
        raw = fh.read()
    try:
        d = _CifarUnpickler(io.BytesIO(raw), encoding="bytes").load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError) as exc:
        raise ValueError(f"{path}: not a CIFAR-10 batch ({exc})") from None
    if not isinstance(d, dict):
        raise ValueError(f"{path}: not a CIFAR-10 batch (expected a dict)")
    d = {(k.decode() if isinstance(k, bytes) else k): v for k, v in d.items()}
    if "data" not in d or "labels" not in d:
        raise ValueError(f"{path}: a CIFAR-10 batch needs 'data' and 'labels'")
    # types and sizes are checked before anything is converted: a crafted file must not make
    # NumPy walk a huge or deeply nested object
    data, labels = d["data"], d["labels"]
    if not isinstance(data, np.ndarray):
        raise ValueError(f"{path}: CIFAR-10 data must be a NumPy array, got {type(data).__name__}")
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3072:
        raise ValueError(f"{path}: CIFAR-10 data must be uint8 of shape (n, 3072), got {data.dtype} {data.shape}")
    if isinstance(labels, np.ndarray):
        if labels.ndim != 1 or labels.dtype.kind not in "iu":
            raise ValueError(f"{path}: CIFAR-10 labels must be a 1-D integer array, got {labels.dtype} {labels.shape}")
    elif not isinstance(labels, list) or not all(type(x) is int for x in labels[:len(data) + 1]):
        raise ValueError(f"{path}: CIFAR-10 labels must be a list of integers")
    if len(labels) != len(data):
        raise ValueError(f"{path}: {len(data)} images but {len(labels)} labels")
    y = _class_labels(labels, 10, path)
    return data.reshape(-1, 3, 32, 32).astype(np.float32) / 255.0, y


#: CIFAR-10's class names in label order (what FLuID's image folders are named by).
CIFAR10_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")


def _partition_images(directory: str, index: int, split: str) -> tuple[np.ndarray, np.ndarray]:
    """The images one FLuID partition file lists: each line of ``partition_<index>_<split>.txt``
    is an image path relative to ``directory`` whose parent folder names its class."""
    try:
        from PIL import Image
    except ImportError as exc:  # pragma: no cover
        raise ImportError("reading FLuID's image partitions needs Pillow: pip install pillow") from exc
    path = os.path.join(directory, f"partition_{index}_{split}.txt")
    if not os.path.isfile(path):
        raise ValueError(f"{directory!r} has no FLuID partition file partition_{index}_{split}.txt")
    xs, ys = [], []
    with open(path) as fh:
        for n, line in enumerate(fh, start=1):
            rel = line.strip()
            if not rel:
                continue
            label = os.path.basename(os.path.dirname(rel))
            if label not in CIFAR10_CLASSES:
                raise ValueError(f"{path}:{n}: {rel!r} is not in a CIFAR-10 class folder "
                                 f"({', '.join(CIFAR10_CLASSES)})")
            img_path = os.path.normpath(os.path.join(directory, rel))
            if not img_path.startswith(os.path.normpath(directory) + os.sep):
                raise ValueError(f"{path}:{n}: {rel!r} points outside {directory!r}")
            try:
                with Image.open(img_path) as im:
                    a = np.asarray(im.convert("RGB"), dtype=np.float32) / 255.0
            except (OSError, ValueError) as exc:
                raise ValueError(f"{path}:{n}: cannot read image {rel!r} ({exc})") from None
            if a.shape != (32, 32, 3):
                raise ValueError(f"{path}:{n}: {rel!r} is {a.shape[1]}x{a.shape[0]}, not a 32x32 CIFAR image")
            xs.append(a.transpose(2, 0, 1))
            ys.append(CIFAR10_CLASSES.index(label))
    if not ys:
        raise ValueError(f"{path} lists no images")
    return np.stack(xs), np.array(ys, dtype=np.int64)


def load_fluid_partitions(directory: str, clients: int = 5) -> FLData:
    """CIFAR-10 as FLuID's Android clients read it: client ``c`` (0-based) trains on the images
    of ``partition_<c>_train.txt`` and ``partition_<c + clients>_train.txt`` and tests on the two
    ``_test`` files (FLuID's 5 users load partitions ``id - 1`` and ``id - 1 + 5``); the central
    test set is every client's test images.  Lines are image paths relative to ``directory``
    (``train/<class>/<file>.png``)."""
    if isinstance(clients, bool) or not isinstance(clients, int) or clients < 1:
        raise ValueError(f"clients must be a positive integer, got {clients!r}")
    train, tests = [], []
    for c in range(clients):
        parts = [_partition_images(directory, i, "train") for i in (c, c + clients)]
        tparts = [_partition_images(directory, i, "test") for i in (c, c + clients)]
        train.append((np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])))
        tests.append((np.concatenate([p[0] for p in tparts]), np.concatenate([p[1] for p in tparts])))
    central = (np.concatenate([t[0] for t in tests]), np.concatenate([t[1] for t in tests]))
    return FLData(train, central, (3, 32, 32), 10, "cifar10", tests)


def load_cifar10(directory: str, clients: int = 5, alpha: float | None = 0.5, seed: int = 0,
                 client_test_fraction: float = 0.2) -> FLData:
    """CIFAR-10 python batches from ``directory`` (``data_batch_*`` and ``test_batch``), or FLuID's
    image partitions (``partition_<i>_{train,test}.txt``, :func:`load_fluid_partitions`)."""
    if os.path.isfile(os.path.join(directory, "partition_0_train.txt")):
        return load_fluid_partitions(directory, clients)
    batches = sorted(glob.glob(os.path.join(directory, "data_batch_*")))
    test = os.path.join(directory, "test_batch")
    if not batches or not os.path.exists(test):
        raise ValueError(f"{directory!r} has no CIFAR-10 data_batch_* / test_batch files")
    xs, ys = zip(*(_read_cifar_batch(b) for b in batches))
    x, y = np.concatenate(xs), np.concatenate(ys)
    rng = np.random.default_rng(seed)
    parts = iid_partition(y, clients, rng) if alpha is None else dirichlet_partition(y, clients, alpha, rng, 4)
    train, tests = _client_split(x, y, parts, rng, client_test_fraction)
    return FLData(train, _read_cifar_batch(test), (3, 32, 32), 10, "cifar10", tests)


def load_dataset(name: str, clients: int = 5, data_dir: str | None = None, seed: int = 0, alpha=0.5) -> FLData:
    """``digits`` (bundled), ``femnist``/``shakespeare`` (LEAF folder) or ``cifar10`` (batches or
    FLuID's partition files) from ``data_dir``; without ``data_dir`` the last three come through
    Flower Datasets (:mod:`cosearch.fl.flower_datasets`, ``pip install 'cosearch[datasets]'``)."""
    if name == "digits":
        if data_dir:
            raise ValueError(f"digits is bundled with cosearch, so data_dir (--data) {data_dir!r} would go unread; "
                             "give a folder for femnist, shakespeare or cifar10, or leave it out")
        return load_digits(clients, alpha, seed)
    if data_dir and is_saved_partitions(data_dir):
        d = load_partitions(data_dir, clients)
        if d.name != name:
            raise ValueError(f"{data_dir!r} holds saved {d.name} partitions, not {name}")
        return d
    if name in ("femnist", "shakespeare", "cifar10") and not data_dir:
        # no local copy: Flower Datasets (an optional extra) downloads it
        from .flower_datasets import load_flower_dataset
        return load_flower_dataset(name, clients, alpha, seed)
    if name in ("femnist", "shakespeare"):
        if is_fluid_clients(data_dir):
            return load_fluid_clients(data_dir, name, clients, seed=seed)
        return load_leaf(data_dir, name, max_clients=clients, seed=seed)
    if name == "cifar10":
        return load_cifar10(data_dir, clients, alpha, seed)
    raise ValueError(f"unknown dataset {name!r}; choose one of {', '.join(DATASETS)}")


# ----------------------------------------------------------------------------- generators
def _write_leaf(directory: str, train: dict, test: dict) -> str:
    for split, users in (("train", train), ("test", test)):
        os.makedirs(os.path.join(directory, split), exist_ok=True)
        names = sorted(users)
        doc = {"users": names, "num_samples": [len(users[u]["y"]) for u in names], "user_data": users}
        with open(os.path.join(directory, split, f"{split}_0.json"), "w") as fh:
            json.dump(doc, fh)
    return directory


#: Most users a generator writes (LEAF's FEMNIST has 3,550 writers; the scale bench uses 1,000).
MAX_GENERATED_USERS = 100_000


def _generator_sizes(users, samples, seed, where: str) -> None:
    """Refuse sizes a generated folder cannot have: at least one user, two samples a user (one
    for training and one for test), a non-negative seed."""
    positive_int(f"{where}: users", users, MAX_GENERATED_USERS)
    if positive_int(f"{where}: samples", samples) < 2:
        raise ValueError(f"{where}: samples must be at least 2 a user (one for training, one for test), got {samples}")
    nonneg_int(f"{where}: seed", seed)


def _femnist_like_writers(users: int, samples: int, seed: int):
    """Per writer, ``(images (samples, 784) float32 in [0, 1], labels)``: the bundled digits
    restyled per writer (its own shift, stroke weight, contrast and a skewed digit mix)."""
    _generator_sizes(users, samples, seed, "femnist-like data")
    from sklearn.datasets import load_digits as sk_digits
    d = sk_digits()
    by_label = [np.flatnonzero(d.target == lab) for lab in range(10)]
    rng = np.random.default_rng(seed)
    for _w in range(users):
        mix = rng.dirichlet(np.full(10, 1.0))
        labels = rng.choice(10, samples, p=mix)
        dy, dx = rng.integers(-2, 3, 2)
        gamma, contrast = rng.uniform(0.6, 1.6), rng.uniform(0.7, 1.0)
        xs = np.empty((samples, 784), dtype=np.float32)
        for j, lab in enumerate(labels):
            img = d.images[rng.choice(by_label[lab])] / 16.0
            big = np.kron(img, np.ones((3, 3)))                   # 24 x 24
            canvas = np.zeros((28, 28))
            canvas[2 + dy:26 + dy, 2 + dx:26 + dx] = big
            canvas = contrast * canvas ** gamma + rng.normal(0, 0.05, canvas.shape)
            xs[j] = np.clip(canvas, 0, 1).ravel().round(3)
        yield xs, labels


def write_femnist_like(directory: str, users: int = 10, samples: int = 120, seed: int = 0,
                       test_fraction: float = 0.2) -> str:
    """A LEAF FEMNIST-format folder (28x28 floats, labels 0-9 of the 62) from the bundled
    digits, restyled per writer: each writer has its own shift, stroke weight, contrast and
    a skewed digit mix.  Returns ``directory``."""
    train, test = {}, {}
    for w, (xs, labels) in enumerate(_femnist_like_writers(users, samples, seed)):
        xs = [[round(float(v), 3) for v in row] for row in xs]
        nt = max(1, int(test_fraction * samples))
        name = f"f{w:04d}"
        test[name] = {"x": xs[:nt], "y": labels[:nt].tolist()}
        train[name] = {"x": xs[nt:], "y": labels[nt:].tolist()}
    return _write_leaf(directory, train, test)


def femnist_like(users: int, samples: int = 226, seed: int = 0, test_fraction: float = 0.1) -> FLData:
    """The writers of :func:`write_femnist_like` in memory, one client each, at FEMNIST's shapes
    (1x28x28, 62 classes; 226 samples: LEAF FEMNIST's mean per writer, 805,263 over 3,550, with its
    10 % test split); for scale runs (:func:`save_partitions` writes it for Flower's clients)."""
    clients, tests = [], []
    for xs, labels in _femnist_like_writers(users, samples, seed):
        nt = max(1, int(test_fraction * samples))
        x = xs.reshape(-1, 1, 28, 28)
        tests.append((x[:nt], labels[:nt].astype(np.int64)))
        clients.append((x[nt:], labels[nt:].astype(np.int64)))
    k = max(1, 1000 // max(users, 1))
    test = (np.concatenate([t[0][:k] for t in tests]), np.concatenate([t[1][:k] for t in tests]))
    return FLData(clients, test, (1, 28, 28), 62, "femnist", tests)


def write_cifar_like(directory: str, images: int = 1000, test_images: int = 300, seed: int = 0,
                     batches: int = 5) -> str:
    """CIFAR-10 python batches (``data_batch_1..batches``, ``test_batch``, ``batches.meta``; uint8
    rows of 3 x 32 x 32 pixels, protocol-2 pickles as the real archive) generated from the bundled
    digits: each image is a digit, upscaled to 24 x 24 and placed with a random shift, in a random
    colour on a two-colour gradient background of the opposite lightness with pixel noise,
    labelled by its digit.
    CIFAR-10-shaped (the tensor shapes, the 10 classes, the loader and the VGG model), not CIFAR-10
    (the content is far easier).  Returns ``directory``."""
    import pickle

    from sklearn.datasets import load_digits as sk_digits
    for name, v in (("images", images), ("test_images", test_images), ("batches", batches)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"write_cifar_like: {name} must be a positive integer, got {v!r}")
    if images < batches:
        raise ValueError(f"write_cifar_like: {images} training images cannot fill {batches} batches")
    nonneg_int("write_cifar_like: seed", seed)
    d = sk_digits()
    rng = np.random.default_rng(seed)
    ramp = np.linspace(0.0, 1.0, 32)[None, :, None]

    def make(n: int) -> tuple[np.ndarray, list[int]]:
        labels = rng.integers(0, 10, n)
        out = np.empty((n, 3, 32, 32), dtype=np.uint8)
        for i, lab in enumerate(labels):
            glyph = np.kron(d.images[rng.choice(np.flatnonzero(d.target == lab))] / 16.0, np.ones((3, 3)))
            mask = np.zeros((32, 32))
            dy, dx = rng.integers(0, 9, 2)
            mask[dy:dy + 24, dx:dx + 24] = glyph
            # background: a gradient between two dark or two light colours; the digit in a colour
            # of the other half, so its shape always shows
            light = rng.random() < 0.5
            c0, c1 = rng.uniform(0.55, 1.0, (2, 3)) if light else rng.uniform(0.0, 0.45, (2, 3))
            fg = rng.uniform(0.0, 0.35, 3) if light else rng.uniform(0.65, 1.0, 3)
            grad = c0[:, None, None] * (1 - ramp) + c1[:, None, None] * ramp   # (3, 1, 32) -> broadcast
            img = grad * (1 - mask[None]) + fg[:, None, None] * mask[None] + rng.normal(0, 0.06, (3, 32, 32))
            out[i] = np.clip(np.round(img * 255), 0, 255).astype(np.uint8)
        return out.reshape(n, 3072), [int(x) for x in labels]

    os.makedirs(directory, exist_ok=True)
    x, y = make(images)
    for b, idx in enumerate(np.array_split(np.arange(images), batches), start=1):
        with open(os.path.join(directory, f"data_batch_{b}"), "wb") as fh:
            pickle.dump({b"batch_label": f"training batch {b} of {batches}".encode(), b"labels": [y[i] for i in idx],
                         b"data": x[idx], b"filenames": [f"img{i}.png".encode() for i in idx]}, fh, protocol=2)
    tx, ty = make(test_images)
    with open(os.path.join(directory, "test_batch"), "wb") as fh:
        pickle.dump({b"batch_label": b"testing batch 1 of 1", b"labels": ty, b"data": tx,
                     b"filenames": [f"test{i}.png".encode() for i in range(test_images)]}, fh, protocol=2)
    with open(os.path.join(directory, "batches.meta"), "wb") as fh:
        pickle.dump({b"label_names": [c.encode() for c in CIFAR10_CLASSES], b"num_cases_per_batch": images // batches,
                     b"num_vis": 3072}, fh, protocol=2)
    return directory


_TEXT_MODULES = ("argparse", "collections", "json", "logging", "pathlib", "subprocess", "threading",
                 "unittest", "email", "http", "asyncio", "datetime", "decimal", "fractions", "statistics")


def write_shakespeare_like(directory: str, users: int = 6, samples: int = 200, seed: int = 0,
                           test_fraction: float = 0.2, stride: int = 3) -> str:
    """A LEAF Shakespeare-format folder (80-character windows, next character) from English
    prose shipped with Python (module and function docstrings), one module per "role".
    Characters outside LEAF's alphabet become spaces.  Returns ``directory``."""
    import importlib
    import inspect
    _generator_sizes(users, samples, seed, "shakespeare-like data")
    lut = set(SHAKESPEARE_CHARS)
    rng = np.random.default_rng(seed)
    train, test = {}, {}
    if users > len(_TEXT_MODULES):
        raise ValueError(f"at most {len(_TEXT_MODULES)} users can be generated, got {users}")
    for name in _TEXT_MODULES[:users]:
        mod = importlib.import_module(name)
        docs = [inspect.getdoc(mod) or ""] + [inspect.getdoc(v) or "" for _, v in sorted(vars(mod).items())
                                              if callable(v) and getattr(v, "__module__", "") == name]
        text = " ".join(" ".join(t.split()) for t in docs if t)
        text = "".join(c if c in lut else " " for c in text)
        starts = np.arange(0, max(0, len(text) - 81), stride)
        if len(starts) < 10:
            raise ValueError(f"module {name!r} has too little documentation text")
        pick = np.sort(rng.choice(starts, min(samples, len(starts)), replace=False))
        xs = [text[s:s + 80] for s in pick]
        ys = [text[s + 80] for s in pick]
        nt = max(1, int(test_fraction * len(xs)))
        test[name] = {"x": xs[-nt:], "y": ys[-nt:]}
        train[name] = {"x": xs[:-nt], "y": ys[:-nt]}
    return _write_leaf(directory, train, test)
