"""Reading a run's own config files: which framework a file is (:func:`detect_format`), one
file as a :class:`~cosearch.runs.config.RunConfig` (:func:`read_config`) and the files of one run
merged (:func:`read_configs`); re-exported by :mod:`cosearch.runs`."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from ..models import ModelConfig
from .config import RunConfig, merge
from .foundry import read_foundry
from .hf import read_hf_config
from .maxtext import read_maxtext
from .megatron import read_megatron_args
from .nemo import read_megatron_bridge, read_nemo1
from .torchtitan import read_torchtitan

__all__ = ["FORMATS", "detect_format", "read_config", "read_configs", "RUN_MODEL_FIELDS"]

#: Formats :func:`read_config` reads, by name.
FORMATS = ("megatron-args", "nemo1", "megatron-bridge", "torchtitan", "maxtext", "llm-foundry", "hf-config")


def detect_format(path: str | Path) -> str:
    """The format of a config file, from its suffix and its top-level keys (one of
    :data:`FORMATS`); a file none of them fits is refused, naming what was looked for."""
    from .._validate import input_path
    p = Path(input_path(path, "detect_format: the config"))
    suffix = p.suffix.lower()
    if suffix == ".toml":
        return "torchtitan"
    if suffix == ".json":
        from .torchtitan_saved import load_json
        # torchtitan's saved config (Trainer.Config.to_dict) has model_spec; a Hugging Face config.json not
        return "torchtitan" if "model_spec" in load_json(p) else "hf-config"
    if suffix in (".yaml", ".yml"):
        from ._fields import load_yaml
        keys = set(load_yaml(p))
        if "trainer" in keys and "model" in keys:
            return "nemo1"
        if keys & {"train", "ddp", "mixed_precision", "comm_overlap"}:
            return "megatron-bridge"
        if keys & {"global_train_batch_size", "device_train_microbatch_size", "fsdp_config"}:
            return "llm-foundry"
        if keys & {"per_device_batch_size", "ici_fsdp_parallelism", "base_emb_dim", "remat_policy", "model_name",
                   "max_target_length"} or any(k.startswith(("ici_", "dcn_")) for k in keys):
            return "maxtext"
        raise ValueError(f"{p}: a YAML cosearch cannot place: NeMo 1 has trainer + model, Megatron-Bridge train/ddp/"
                         "mixed_precision, llm-foundry global_train_batch_size/fsdp_config, MaxText "
                         "per_device_batch_size/ici_* keys (give the format explicitly)")
    if suffix in (".sh", ".txt", ".args", ""):
        words = _script_words(p)
        if _megatron_words(words):
            return "megatron-args"
        mx = _maxtext_launch(words, p)
        if mx is not None and all("=" in w for w in mx):
            return "maxtext"
        if words and all("=" in w for w in words):
            bridge = any(w.split("=", 1)[0].lstrip("+").split(".")[0] in _BRIDGE_SECTIONS for w in words)
            return "megatron-bridge" if bridge else "maxtext"
    raise ValueError(f"{p}: unknown config format (suffix {suffix or 'none'}); cosearch reads .toml (torchtitan), "
                     ".yaml (NeMo 1, Megatron-Bridge, MaxText, llm-foundry), .json (HF config, torchtitan's saved "
                     "config) and Megatron argument lines (.sh/.txt/.args)")


#: Top-level sections of a Megatron-Bridge config container (its override keys start with one).
_BRIDGE_SECTIONS = {"model", "train", "ddp", "optimizer", "mixed_precision", "comm_overlap", "dist", "scheduler",
                    "dataset", "logger", "tokenizer", "checkpoint", "rng", "profiling", "peft"}


def _script_words(p: Path, notes: list[str] | None = None) -> list[str]:
    """The shell words of an argument or overrides file: line continuations joined, ``#``
    comments dropped; a bash launch script that builds its line from arrays, variables and
    ``if`` blocks is expanded as bash builds it (:func:`cosearch.runs.shell.launch_words`, its
    assumptions appended to ``notes``)."""
    import shlex

    from .._json import read_text_file
    from .shell import is_bash_script, launch_words
    text = read_text_file(p, "argument", 1 << 20)
    if is_bash_script(text):
        words, said = launch_words(text, str(p))
        if notes is not None:
            notes.extend(said)
        return words
    lines = [ln.split("#", 1)[0] for ln in text.replace("\\\n", " ").splitlines()]
    try:
        return shlex.split(" ".join(lines))
    except ValueError as e:
        raise ValueError(f"{p}: cannot split the arguments: {e}") from None


def _with_notes(rc: RunConfig, notes: list[str]) -> RunConfig:
    """``rc`` with what expanding its launch script assumed (:func:`_script_words`) said too."""
    return dataclasses.replace(rc, assumed=rc.assumed + tuple(notes)) if notes else rc


def _maxtext_launch(words: list[str], p: Path) -> list[str] | None:
    """The ``key=value`` words of a MaxText launch line (``python3 -m ...train <config>/base.yml
    key=value ...``, MaxText's own ``configs/tpu/*.sh``); None where the words run no MaxText
    module.  A config other than ``base.yml`` is refused: give that YAML itself."""
    for i, w in enumerate(words[:-1]):
        if w == "-m" and "maxtext" in words[i + 1].lower():
            rest = words[i + 2:]
            if rest and rest[0].endswith((".yml", ".yaml")):
                if Path(rest[0]).name != "base.yml":
                    raise ValueError(f"{p}: the MaxText launch line starts from {rest[0]}; give that YAML with the "
                                     "line's key=value overrides")
                rest = rest[1:]
            return rest
    return None


def _megatron_words(words: list[str]) -> list[str]:
    """The Megatron flags among a launch script's words: the launcher's words (``torchrun ...
    pretrain_gpt.py``) before the training script left out; [] when no flag remains."""
    scripts = [i for i, w in enumerate(words) if w.endswith(".py")]
    if scripts:
        words = words[scripts[-1] + 1:]
    else:
        words = words[next((i for i, w in enumerate(words) if w.startswith("--")), len(words)):]
    return words if any(w.startswith("--") for w in words) else []


def read_config(path: str | Path, overrides: list[str] | tuple[str, ...] = (), fmt: str | None = None,
                model: ModelConfig | str | None = None, seq_len: int | None = None,
                devices_per_chip: int = 1) -> RunConfig:
    """One config file as a :class:`RunConfig` (``fmt``: one of :data:`FORMATS`, None: detected).
    ``overrides``: ``key=value`` words applied after the file (Hydra / MaxText / torchtitan
    style).  ``model``: the model when the file leaves it out (Megatron lines, NeMo configs whose
    tokenizer is unknown); ``seq_len``: the sequence for a ``config.json``.
    ``devices_per_chip``: the JAX devices a chip of the run exposes (the chip's
    :attr:`~cosearch.hardware.Accelerator.devices_per_chip`): a MaxText config counts devices
    (:func:`read_maxtext`); the other formats count chips (GPUs) and refuse more than 1."""
    from .._validate import input_path
    from .config import given_model
    model = given_model(model, "read_config")
    path = input_path(path, "read_config: the config")
    fmt = fmt or detect_format(path)
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
    if overrides and fmt in ("megatron-args", "hf-config"):
        raise ValueError(f"{path}: {fmt} takes no key=value overrides")
    from .._validate import positive_int
    devices_per_chip = positive_int("devices_per_chip", devices_per_chip, 8)
    if devices_per_chip > 1 and fmt not in ("maxtext", "hf-config"):
        raise ValueError(f"{path}: a {fmt} config counts GPUs, one device each; {devices_per_chip} devices a chip "
                         "applies to MaxText configs (JAX devices)")
    if fmt == "megatron-args":
        import shlex
        notes: list[str] = []
        rc = read_megatron_args(shlex.join(_megatron_words(_script_words(Path(path), notes))), model,
                                source=f"Megatron arguments {path}")
        return _with_notes(rc, notes)
    if fmt == "hf-config":
        return read_hf_config(path, seq_len)
    if fmt == "nemo1":
        return read_nemo1(path, overrides, model)
    yaml_file = Path(path).suffix.lower() in (".yaml", ".yml")
    if not yaml_file and fmt in ("megatron-bridge", "maxtext"):
        # a file of key=value overrides alone (a recipe's or train.py's command line), or MaxText's
        # launch script (its trainer's key=value words)
        notes: list[str] = []
        words = _script_words(Path(path), notes)
        words = (_maxtext_launch(words, Path(path)) if fmt == "maxtext" else None) or words
        words = words + list(overrides)
        return _with_notes(read_megatron_bridge(None, words, model) if fmt == "megatron-bridge"
                           else read_maxtext(None, words, devices_per_chip), notes)
    if fmt == "megatron-bridge":
        return read_megatron_bridge(path, overrides, model)
    if fmt == "maxtext":
        return read_maxtext(path, overrides, devices_per_chip)
    return {"torchtitan": read_torchtitan, "llm-foundry": read_foundry}[fmt](path, overrides)


#: Model fields a run's files set as training choices on top of a given model (Megatron's
#: ``--mtp-num-layers``, ``--moe-expert-capacity-factor``, ``--moe-pad-expert-input-to-capacity``).
RUN_MODEL_FIELDS = ("mtp_layers", "moe_capacity_factor", "moe_pad_to_capacity")


def read_configs(items: list[tuple[str | Path, list[str]]] | list[str | Path], model: ModelConfig | str | None = None,
                 devices_per_chip: int = 1) -> RunConfig:
    """The files of one run, merged (:func:`merge`).  ``items``: paths, or ``(path, overrides)``
    pairs.  Files that describe the plan are read first, so a ``config.json`` is read at their
    sequence length and a Megatron line without model flags gets the model from the others.
    ``devices_per_chip``: as :func:`read_config` takes it (for a MaxText config).  ``model``: a
    :class:`~cosearch.models.ModelConfig` or a preset's name."""
    from .._validate import input_path
    from .config import given_model
    model = given_model(model, "read_configs")
    if isinstance(items, (str, os.PathLike)) or not isinstance(items, (list, tuple)):
        raise ValueError(f"read_configs: give a list of paths or (path, overrides) pairs, got {items!r}")
    pairs = []
    for i in items:
        if isinstance(i, (str, os.PathLike)):
            pairs.append((Path(input_path(i, "read_configs: a config")), []))
        elif isinstance(i, (list, tuple)) and len(i) == 2 and isinstance(i[1], (list, tuple)):
            pairs.append((Path(input_path(i[0], "read_configs: a config")), list(i[1])))
        else:
            raise ValueError(f"read_configs: each item is a path or a (path, overrides) pair, got {i!r}")
    if not pairs:
        raise ValueError("read_configs: no files")
    fmts = [detect_format(p) for p, _ in pairs]
    order = sorted(range(len(pairs)), key=lambda i: {"hf-config": 1, "megatron-args": 2}.get(fmts[i], 0))
    done: list[RunConfig] = []
    for i in order:
        p, ov = pairs[i]
        known = merge(done) if done else None
        seq = (known.seq_len or (known.model.seq_len if known.model else None)) if known else None
        m = (known.model if known and known.model else None) or model
        if fmts[i] == "hf-config" and known is not None and known.hf_config_overrides:
            # another file's config_overrides applied to this config.json: met, so no longer owed
            done = [dataclasses.replace(c, hf_config_overrides={}) for c in done]
            done.append(read_hf_config(p, seq, known.hf_config_overrides, known.source))
            continue
        done.append(read_config(p, ov, fmts[i], model=m, seq_len=seq,
                                devices_per_chip=devices_per_chip if fmts[i] in ("maxtext", "hf-config") else 1))
    if model is not None:
        # the training choices a run's files make for a given model (multi-token prediction depth,
        # an MoE capacity): the files' (the readers apply them to the given model)
        read = merge(done).model if done else None
        if read is not None:
            model = model.with_(**{f: getattr(read, f) for f in RUN_MODEL_FIELDS})
        done.append(RunConfig("the given model", model=model))
    return merge(done)
