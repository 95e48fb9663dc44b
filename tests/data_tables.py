"""The CSV tables cosearch ships under ``cosearch/data``, read as the tests need them."""

import csv
import functools
import importlib.resources


@functools.cache
def _text(name: str) -> str:
    return importlib.resources.files("cosearch").joinpath(f"data/{name}").read_text()


def package_rows(name: str, kind: str | None = None) -> list[dict[str, str]]:
    """Rows of ``cosearch/data/<name>`` as dicts (a fresh list each call), only those of
    ``kind`` where it is given."""
    return [r for r in csv.DictReader(_text(name).splitlines()) if kind is None or r["kind"] == kind]


def window_end_s(row: dict[str, str]) -> float:
    """Seconds into a sustained run at which a window row ended (its note ends "at <s> s")."""
    return float(row["note"].rsplit(" at ", 1)[1][:-2])
