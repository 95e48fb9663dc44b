"""``cosearch fl new-app DIR``: a Flower App folder for :mod:`cosearch.fl.flower_app`.

The folder holds a ``pyproject.toml`` whose components are cosearch's ``server_app`` and
``client_app`` and whose run config picks the dataset, model, dropout method and rounds, and a
``README.md`` with the commands that run it on a local SuperLink and SuperNodes.  Nothing in it
imports Flower, so the command line stays light.
"""

from __future__ import annotations

import os

from .._validate import choice, positive_int
from .data import DATASETS
from .masks import METHODS
from .names import MODEL_NAMES

__all__ = ["write_app"]

_TOML = """[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "{name}"
version = "1.0.0"
dependencies = []

[tool.hatch.build.targets.wheel]
packages = ["."]

[tool.flwr.app]
publisher = "cosearch"

[tool.flwr.app.components]
serverapp = "cosearch.fl.flower_app:server_app"
clientapp = "cosearch.fl.flower_app:client_app"

[tool.flwr.app.config]
dataset = "{dataset}"
data-dir = "{data_dir}"
model = "{model}"
method = "{method}"
num-rounds = {rounds}
seed = 0
alpha = -1.0
spread = 2.5
min-clients = {clients}
fraction-evaluate = 0.0
round-timeout = 600.0
noise = 0.05
out = ""
"""

_README = """# {name}: cosearch's dropout FL on Flower

Start a SuperLink and {clients} SuperNodes (each its own partition), then run the app:

```bash
flower-superlink --insecure --port 9093 &
for i in $(seq 0 {last}); do
  flower-supernode --insecure --superlink 127.0.0.1:9093 --port $((9100 + i)) \\
      --node-config "partition-id=$i num-partitions={clients}" &
done
flwr run . local --run-config "out=\"$PWD/history.json\""
```

(Flower 1.42's flags) with a `local` connection in `$FLWR_HOME/config.toml` (default `~/.flwr`):
`[superlink.local]` with `address = "127.0.0.1:9093"` and `insecure = true`.  The test suite runs
exactly this (tests/test_flower.py).
Run config (`pyproject.toml`, or `--run-config`): dataset `{dataset}`, model `{model}`, method `{method}`,
{rounds} rounds; `data-dir` must exist on every SuperNode for femnist/shakespeare/cifar10.  `out` must
be an absolute path: the ServerApp writes it from the SuperLink's working folder.  Models,
optimisers (per dataset) and device noise (`noise`) are those of `cosearch fl simulate`.
"""


def toml_string(text: str, what: str) -> str:
    """``text`` as a TOML basic string's contents (backslashes and quotes escaped); control
    characters (a newline, a tab) are refused naming ``what``."""
    bad = sorted({repr(ch) for ch in text if ord(ch) < 32 or ord(ch) == 127})
    if bad:
        raise ValueError(f"{what} {text!r} holds control characters ({', '.join(bad)}), which a run config cannot "
                         "carry; rename the folder")
    return text.replace("\\", "\\\\").replace('"', '\\"')


#: The files :func:`write_app` writes.
APP_FILES = ("pyproject.toml", "README.md", "app_marker.py")


def write_app(directory: str | os.PathLike, dataset: str = "digits", model: str = "auto",
              method: str = "invariant", rounds: int = 10, clients: int = 3, data_dir: str = "",
              overwrite: bool = False) -> str:
    """Write the app folder (refusing one that already holds any of :data:`APP_FILES` unless
    ``overwrite``); returns it."""
    choice("dataset", dataset, DATASETS)
    choice("model", model, ("auto", *MODEL_NAMES))
    choice("method", method, METHODS)
    positive_int("rounds", rounds, 100_000)
    if positive_int("clients", clients, 10_000) < 2:
        raise ValueError(f"federated dropout needs at least 2 clients (SuperNodes), got {clients}: the straggler's "
                         "sub-model is set by the clients faster than it, as simulate requires")
    if dataset != "digits" and not data_dir:
        raise ValueError(f"dataset {dataset!r} is read from a folder on every SuperNode: give data_dir (--data)")
    directory = os.fspath(directory)
    held = [f for f in APP_FILES if os.path.exists(os.path.join(directory, f))]
    if held and not overwrite:
        raise ValueError(f"{directory!r} already holds {', '.join(held)}; choose an empty folder (or --force)")
    data_dir = toml_string(str(data_dir), "--data")
    os.makedirs(directory, exist_ok=True)
    name = "cosearch" + "".join(ch for ch in os.path.basename(os.path.abspath(directory)).lower() if ch.isalnum())
    fields = dict(name=name, dataset=dataset, model=model, method=method, rounds=rounds, clients=clients,
                  last=clients - 1, data_dir=data_dir)
    with open(os.path.join(directory, "pyproject.toml"), "w") as fh:
        fh.write(_TOML.format(**fields))
    with open(os.path.join(directory, "README.md"), "w") as fh:
        fh.write(_README.format(**fields))
    with open(os.path.join(directory, "app_marker.py"), "w") as fh:
        fh.write("# the app's components live in cosearch.fl.flower_app\n")
    return directory
