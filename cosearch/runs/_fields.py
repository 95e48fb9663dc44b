"""The bookkeeping every config reader shares: a nested config flattened to dotted keys,
``key=value`` overrides, and the rule that no key is dropped silently (each one is read, listed
as neutral, or refused by name)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .._json import read_text_file
from .._validate import nonneg_float, positive_float, positive_int

#: Largest config file read (the largest framework configs are tens of KiB).
MAX_CONFIG_BYTES = 16 << 20

_MISSING = object()


def flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}`` (lists and scalars are leaves)."""
    if not isinstance(d, dict):
        return {prefix: d} if prefix else {}
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(v, dict) and v:
            out.update(flatten(v, key))
        else:
            out[key] = v
    return out


def parse_overrides(words: list[str] | tuple[str, ...], source: str) -> dict[str, Any]:
    """``["a.b=4", "c=true"]`` -> ``{"a.b": 4, "c": True}`` (values parsed as YAML scalars, as
    Hydra/OmegaConf and MaxText read them); a word without ``=`` is refused."""
    import yaml
    if words is None:
        return {}
    if isinstance(words, (str, bytes)) or not isinstance(words, (list, tuple)) or \
            not all(isinstance(w, str) for w in words):
        raise ValueError(f"{source}: overrides must be a list of key=value strings, got {words!r:.80}")
    out: dict[str, Any] = {}
    for w in words:
        key, eq, value = w.partition("=")
        key = key.lstrip("+")
        if not eq or not key:
            raise ValueError(f"{source}: override {w!r} is not key=value")
        try:
            out[key] = yaml.safe_load(value) if value != "" else ""
        except yaml.YAMLError:
            out[key] = value
    return out


def load_yaml(path: str | Path) -> dict[str, Any]:
    """A YAML mapping from a file, refused clearly when it is not one."""
    import yaml
    p = str(path)
    try:
        d = yaml.safe_load(read_text_file(path, "YAML config", MAX_CONFIG_BYTES))
    except yaml.YAMLError as e:
        raise ValueError(f"{p}: not a readable YAML file ({e})") from None
    if not isinstance(d, dict):
        raise ValueError(f"{p}: a YAML mapping of config keys is expected, got {type(d).__name__}")
    return d


def load_toml(path: str | Path) -> dict[str, Any]:
    """A TOML table from a file."""
    try:
        import tomllib
    except ModuleNotFoundError:                     # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]

    try:
        return tomllib.loads(read_text_file(path, "TOML config", MAX_CONFIG_BYTES))
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"{path}: not a readable TOML file ({e})") from None


class Keys:
    """A flattened config whose keys are consumed as a reader reads them; :meth:`finish`
    classifies the rest as neutral or refuses them by name."""

    def __init__(self, source: str, flat: dict[str, Any]):
        self.source = source
        self.flat = flat
        self.read: set[str] = set()

    def __contains__(self, key: str) -> bool:
        return key in self.flat

    def get(self, key: str, default: Any = None) -> Any:
        self.read.add(key)
        v = self.flat.get(key, _MISSING)
        return default if v is _MISSING or v is None else v

    def int(self, key: str, default: Any = None) -> Any:
        v = self.get(key, default)
        if v is None:
            return None
        if isinstance(v, str) and v.strip().lstrip("-").isdigit():
            v = int(v)
        if isinstance(v, bool) or not isinstance(v, int):
            raise ValueError(f"{self.source}: {key} must be an integer, got {v!r}")
        return v

    def positive(self, key: str, default: Any = None) -> Any:
        v = self.int(key, default)
        return None if v is None else positive_int(f"{self.source}: {key}", v)

    def number(self, key: str, default: Any = None, positive: bool = False) -> float:
        """A finite real number (non-negative; positive with ``positive``), refused by name otherwise."""
        check = positive_float if positive else nonneg_float
        return check(f"{self.source}: {key}", self.get(key, default))

    def names(self, key: str, default: Any = ()) -> list[str]:
        """A list of names: a list of strings, or one comma-separated string."""
        v = self.get(key, default)
        if isinstance(v, str):
            return [s.strip() for s in v.split(",") if s.strip()]
        if isinstance(v, (list, tuple)) and all(isinstance(x, str) for x in v):
            return list(v)
        raise ValueError(f"{self.source}: {key} must be a list of names, got {v!r}")

    def bool(self, key: str, default: bool = False) -> bool:
        v = self.get(key, default)
        if isinstance(v, str) and v.lower() in ("true", "false"):
            v = v.lower() == "true"
        if not isinstance(v, bool):
            raise ValueError(f"{self.source}: {key} must be true or false, got {v!r}")
        return v

    def finish(self, neutral_sections: tuple[str, ...] = (), neutral_keys: frozenset[str] | set[str] = frozenset(),
               off_is_neutral_under: tuple[str, ...] = ()) -> tuple[str, ...]:
        """The keys not read: those under a neutral section or listed neutral are returned (to be
        shown to the user); under ``off_is_neutral_under`` a key set to an "off" value (false, null,
        0, empty) is neutral too (a full config dump lists every switch, most of them off); any
        other key is refused by name."""
        neutral, unknown = [], []
        for k, v in self.flat.items():
            if k in self.read:
                continue
            if k in neutral_keys or any(k == s or k.startswith(s + ".") for s in neutral_sections):
                neutral.append(k)
            elif v in (None, False, 0, "", []) and any(s == "" or k.startswith(s + ".")
                                                       for s in off_is_neutral_under):
                neutral.append(k)
            else:
                unknown.append(f"{k}={v!r}")
        if unknown:
            raise ValueError(f"{self.source}: fields cosearch does not read: {', '.join(sorted(unknown))} (a field that "
                             "may change the run is never dropped silently; remove it if it changes neither step time "
                             "nor memory)")
        return tuple(sorted(neutral))


def resolve_interpolations(d: dict[str, Any]) -> dict[str, Any]:
    """OmegaConf-style ``${path}`` references (absolute ``${a.b}``, relative ``${.b}``) and the
    ``${multiply:x, y}`` resolver NeMo's launcher registers, resolved in a nested config.  A
    reference that cannot be resolved is left as written (a reader refuses it only if it reads
    that key)."""
    import re

    ref = re.compile(r"^\$\{(.+)\}$")

    def lookup(path: str, parent: tuple[str, ...]) -> Any:
        if path.startswith("."):
            keys = list(parent) + path[1:].split(".")
        else:
            keys = path.split(".")
        node: Any = d
        for key in keys:
            if not isinstance(node, dict) or key not in node:
                # the launcher nests a config under "training."; try without that prefix
                if keys and keys[0] == "training" and node is d:
                    return lookup(".".join(keys[1:]), ())
                raise KeyError(path)
            node = node[key]
        return value(node, tuple(keys[:-1]), 0)

    def value(v: Any, parent: tuple[str, ...], depth: int) -> Any:
        if not isinstance(v, str) or depth > 20:
            return v
        m = ref.match(v.strip())
        if not m:
            return v
        body = m.group(1).strip()
        try:
            if body.startswith("multiply:"):
                args = _split_args(body[len("multiply:"):])
                out = 1
                for a in args:
                    x = value(a, parent, depth + 1)
                    x = int(x) if isinstance(x, str) and x.strip().isdigit() else x
                    if isinstance(x, bool) or not isinstance(x, (int, float)):
                        return v
                    out *= x
                return out
            return lookup(body, parent)
        except (KeyError, RecursionError):
            return v

    def walk(node: Any, parent: tuple[str, ...]) -> Any:
        if isinstance(node, dict):
            return {k: walk(x, parent + (str(k),)) for k, x in node.items()}
        return value(node, parent[:-1], 0)

    return walk(d, ())


def _split_args(text: str) -> list[str]:
    """``"4, ${.hidden_size}"`` -> ``["4", "${.hidden_size}"]`` (commas inside ``${}`` kept)."""
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
            continue
        depth += ch == "{"
        depth -= ch == "}"
        cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out
