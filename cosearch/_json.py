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

__all__ = ["dump_json", "save_new_json", "IncrementalJSONWriter", "load_json", "read_json_file", "atomic_write_text", "finite_or_none", "stamped",
           "check_schema", "fingerprint", "SCHEMA_VERSION"]

#: Version of the layout of cosearch's JSON files (results, FL results and experiments,
#: PHAZE reproductions); README's "Output files" section documents the fields.
SCHEMA_VERSION = 1


def stamped(kind: str, data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with ``schema`` (``"cosearch.<kind>/<SCHEMA_VERSION>"``) and the cosearch
    version that wrote it, first."""
    from ._version import __version__
    return {"schema": f"cosearch.{kind}/{SCHEMA_VERSION}", "cosearch_version": __version__, **data}


def check_schema(d: Any, kind: str, name: str) -> None:
    """Refuse ``d`` unless it is an object stamped by :func:`stamped` as ``kind`` in a schema
    version this cosearch reads (``name``: how the message calls the file)."""
    if not isinstance(d, dict):
        raise ValueError(f"{name}: not a cosearch {kind} file (the top level is not an object)")
    schema = d.get("schema")
    if schema is None:
        raise ValueError(f"{name}: not a cosearch {kind} file (it has no 'schema' field)")
    prefix, _, version = str(schema).partition("/")
    if prefix != f"cosearch.{kind}":
        raise ValueError(f"{name}: a {prefix!r} file, not a cosearch.{kind} file")
    if not version.isdigit() or int(version) > SCHEMA_VERSION:
        raise ValueError(f"{name}: schema {schema!r} (cosearch {d.get('cosearch_version', '?')}) is not one this "
                         f"cosearch reads (cosearch.{kind}/1 to /{SCHEMA_VERSION}); open it with the cosearch "
                         "that wrote it")


def fingerprint(data: Any) -> str:
    """A SHA-256 of ``data``'s canonical JSON (sorted keys; arrays as lists): equal for equal
    inputs, in any process and on any host."""
    import hashlib
    text = json.dumps(finite_or_none(_plain(data)), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def _plain(obj: Any) -> Any:
    """``obj`` with NumPy arrays and scalars, tuples and sets as JSON's lists and numbers."""
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    if isinstance(obj, (set, frozenset)):
        return sorted(_plain(v) for v in obj)
    return obj


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


#: How a checkpoint journal (:class:`IncrementalJSONWriter`) starts: its first line is the header.
JOURNAL_START = '{"_header":'


def is_journal(path: str | os.PathLike) -> bool:
    """Whether the file at ``path`` is a checkpoint journal rather than plain JSON."""
    with open(path) as fh:
        return fh.read(len(JOURNAL_START)) == JOURNAL_START


class IncrementalJSONWriter:
    """A checkpoint of a growing document ``{...header..., "rows": [...]}`` written as an
    append-only journal: each write appends only the rows added since the last one and the
    current header, so it costs milliseconds whatever the document's size (a 45,000-row search
    result: a full rewrite serialised 73 MiB in 9 s).

    The journal is JSON lines: ``{"_header": {...}}`` (the document without its rows; the last
    one counts) and ``{"_rows": [...]}`` (rows in order).  :func:`load_json` reads it back as
    the whole document; a last line cut short by a crash mid-append is ignored, so the file
    always holds the previous checkpoint at least.  The first write, and any write whose rows
    are not the earlier rows plus new ones (rows are compared by identity), replaces the file
    atomically.  A finished result is then saved as plain JSON over it (``Results.to_json``)."""

    def __init__(self, path: str | os.PathLike):
        self.path = path
        self._written: list = []          # the row objects already in the file, in order

    def write(self, header: dict[str, Any], rows: list, row_to_dict) -> None:
        head = json.dumps({"_header": finite_or_none(header)}, separators=(",", ":"), allow_nan=False)
        n = len(self._written)
        extends = n <= len(rows) and all(a is b for a, b in zip(self._written, rows))
        new = rows[n:] if extends else rows
        body = json.dumps({"_rows": [finite_or_none(row_to_dict(r)) for r in new]}, separators=(",", ":"),
                          allow_nan=False)
        if extends and n:
            with open(self.path, "a") as fh:
                fh.write((body + "\n" if new else "") + head + "\n")
                fh.flush()
                os.fsync(fh.fileno())
        else:
            atomic_write_text(self.path, head + "\n" + body + "\n")
        self._written = list(rows)


def _read_journal(text: str) -> dict[str, Any]:
    """The document an :class:`IncrementalJSONWriter` journal holds (a cut-short last line is
    ignored)."""
    header = None
    rows: list = []
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            d = json.loads(line, parse_int=bounded_int)
        except json.JSONDecodeError:
            if i >= len(lines) - 2:          # the last line, cut short mid-append
                break
            raise ValueError(f"checkpoint journal line {i + 1} is not valid JSON") from None
        if "_header" in d:
            header = d["_header"]
        elif "_rows" in d:
            rows.extend(d["_rows"])
    if not isinstance(header, dict):
        raise ValueError("checkpoint journal has no header line")
    return {**header, "rows": rows}


def save_new_json(data: dict[str, Any], path: str | os.PathLike | None, overwrite: bool) -> str:
    """:func:`dump_json`, refusing an existing ``path`` unless ``overwrite`` (as the command line
    refuses without ``--force``)."""
    from ._validate import new_file
    new_file(path, overwrite, "path")
    return dump_json(data, path)


#: Most digits of an integer read from JSON: a float holds up to ~1.8e308, so a longer integer
#: could not be used as a number anywhere in cosearch (it would raise OverflowError deep inside).
MAX_INT_DIGITS = 300


def bounded_int(text: str) -> int:
    """``json``'s ``parse_int``: an integer literal, refused (``ValueError``) past
    :data:`MAX_INT_DIGITS` digits."""
    digits = len(text.lstrip("-"))
    if digits > MAX_INT_DIGITS:
        raise ValueError(f"an integer of {digits} digits is beyond any number cosearch reads")
    return int(text)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows (give a finite number)")


#: Largest JSON file read (results of the largest searches are tens of MiB).
MAX_JSON_BYTES = 1 << 30


def _regular_file(path: str | os.PathLike, what: str, max_bytes: int) -> None:
    """Refuse what is not a regular file (a FIFO would block, ``/dev/zero`` never ends) or is
    larger than ``max_bytes``."""
    import stat
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        raise ValueError(f"{what} file {os.fspath(path)!r} is not a regular file")
    if st.st_size > max_bytes:
        raise ValueError(f"{what} file {os.fspath(path)!r} is {st.st_size:,} bytes; a {what} file is at most "
                         f"{max_bytes:,} bytes")


def parse_json(text: str, where: str, constants: bool = False) -> Any:
    """``text`` parsed as JSON, or ``ValueError`` starting with ``where`` (the file or flag it
    came from): invalid JSON, an integer past :data:`MAX_INT_DIGITS` digits, and ``NaN`` /
    ``Infinity`` unless ``constants`` (files written by other tools, such as Hugging Face
    configs, may hold them in fields cosearch never reads)."""
    try:
        if constants:
            return json.loads(text, parse_int=bounded_int)
        return json.loads(text, parse_constant=_no_constant, parse_int=bounded_int)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{where}: not valid JSON ({exc})") from None
    except ValueError as exc:                                 # NaN / Infinity, an endless integer
        raise ValueError(f"{where}: {exc}") from None


def _parse(text: str, what: str, path: str) -> Any:
    return parse_json(text, f"{what} file {path!r}")


def read_text_file(path: str | os.PathLike, what: str, max_bytes: int | None = None) -> str:
    """The UTF-8 text of a user's file (a BOM dropped), or ``ValueError`` naming ``what`` and the
    problem (a FIFO, device, binary file or a file over ``max_bytes`` is refused)."""
    from ._validate import input_path
    path = input_path(path, f"the {what} file")
    try:
        _regular_file(path, what, MAX_JSON_BYTES if max_bytes is None else max_bytes)
        with open(path, encoding="utf-8-sig") as fh:
            return fh.read()
    except OSError as exc:
        raise ValueError(f"{what} file {os.fspath(path)!r}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ValueError(f"{what} file {os.fspath(path)!r} is not UTF-8 text") from None


def read_json_file(path: str | os.PathLike, what: str, max_bytes: int | None = None) -> Any:
    """The parsed JSON of a user's file, or ``ValueError`` naming ``what`` and the problem (a
    FIFO, device or a file over ``max_bytes`` is refused before it is read; ``NaN`` and
    ``Infinity`` are refused)."""
    return _parse(read_text_file(path, what, max_bytes), what, os.fspath(path))


def load_json(source: str | os.PathLike) -> dict[str, Any]:
    """Parse ``source``: JSON text (starting with ``{``) or the path of a JSON file; a checkpoint
    journal (:class:`IncrementalJSONWriter`) is read back as the whole document."""
    text = str(source)
    if not text.lstrip().startswith("{"):
        text = read_text_file(source, "JSON", MAX_JSON_BYTES)     # a binary file refused by name
    if text.startswith(JOURNAL_START):
        return _read_journal(text)
    return parse_json(text, str(source) if len(str(source)) < 200 else "text", constants=True)
