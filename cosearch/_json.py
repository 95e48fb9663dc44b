"""Saving and loading result objects as JSON (a file path or the text itself).

Writes are atomic (a temporary file in the same folder, then a rename), so an interrupted
save never leaves a half-written file; non-finite floats are written as ``null`` (strict
JSON never holds a bare ``NaN``).
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from typing import Any

__all__ = ["dump_json", "save_new_json", "load_json", "read_json_file", "atomic_write_text", "finite_or_none", "stamped", "SCHEMA_VERSION"]

#: Version of the layout of cosearch's JSON files (results, FL results and experiments,
#: PHAZE reproductions); README's "Output files" section documents the fields.
SCHEMA_VERSION = 1


def stamped(kind: str, data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with ``schema`` (``"cosearch.<kind>/<SCHEMA_VERSION>"``) and the cosearch
    version that wrote it, first."""
    from ._version import __version__
    return {"schema": f"cosearch.{kind}/{SCHEMA_VERSION}", "cosearch_version": __version__, **data}


def finite_or_none(obj: Any) -> Any:
    """``obj`` with every non-finite float (also inside containers) replaced by ``None``."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite_or_none(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite_or_none(v) for v in obj]
    return obj


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:                      # exists, owned by someone else
        return True
    return True


def _remove_stale_temps(folder: str, base: str) -> None:
    """Remove the temporary files of earlier writes of ``base`` whose writer died mid-save
    (SIGKILL, power loss): ``.tmp-<base>-<pid>-*.json`` with no such process alive."""
    prefix = f".tmp-{base}-"
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        if not (name.startswith(prefix) and name.endswith(".json")):
            continue
        pid = name[len(prefix):].split("-", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
            try:
                os.unlink(os.path.join(folder, name))
            except OSError:
                pass


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file (``.tmp-<name>-<pid>-*.json``) and a
    rename; temporary files of this path left by a writer that died are removed first."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    base = os.path.basename(path)
    _remove_stale_temps(folder, base)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".tmp-{base}-{os.getpid()}-", suffix=".json")
    umask = os.umask(0)
    os.umask(umask)
    try:
        os.fchmod(fd, 0o666 & ~umask)       # mkstemp's 0600 would differ from a plain open()
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def dump_json(data: dict[str, Any], path: str | os.PathLike | None = None) -> str:
    """The JSON text of ``data``; also written (atomically) to ``path`` when given."""
    text = json.dumps(finite_or_none(data), indent=1, allow_nan=False)
    if path is not None:
        atomic_write_text(path, text)
    return text


def save_new_json(data: dict[str, Any], path: str | os.PathLike | None, overwrite: bool) -> str:
    """:func:`dump_json`, refusing an existing ``path`` unless ``overwrite`` (as the command line
    refuses without ``--force``)."""
    if path is not None and not overwrite and os.path.exists(path):
        raise FileExistsError(f"{os.fspath(path)} exists; pass overwrite=True to replace it")
    return dump_json(data, path)


def read_json_file(path: str | os.PathLike, what: str, max_bytes: int | None = None) -> Any:
    """The parsed JSON of a user's file, or ``ValueError`` naming ``what`` and the problem
    (a file over ``max_bytes`` is refused before it is read)."""
    try:
        if max_bytes is not None:
            size = os.path.getsize(path)
            if size > max_bytes:
                raise ValueError(f"{what} file {os.fspath(path)!r} is {size:,} bytes; a {what} file is at most "
                                 f"{max_bytes:,} bytes (list each value once)")
        with open(path) as fh:
            return json.load(fh)
    except OSError as exc:
        raise ValueError(f"{what} file {os.fspath(path)!r}: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{what} file {os.fspath(path)!r} is not valid JSON: {exc}") from None


def load_json(source: str | os.PathLike) -> dict[str, Any]:
    """Parse ``source``: JSON text (starting with ``{``) or the path of a JSON file."""
    text = str(source)
    if not text.lstrip().startswith("{"):
        with open(source) as fh:
            text = fh.read()
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{source if len(str(source)) < 200 else 'text'}: not valid JSON ({exc})") from None
