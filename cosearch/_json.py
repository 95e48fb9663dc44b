"""Saving and loading result objects as JSON (a file path or the text itself)."""

from __future__ import annotations

import json
import os
from typing import Any


def dump_json(data: dict[str, Any], path: str | os.PathLike | None = None) -> str:
    """The JSON text of ``data``; also written to ``path`` when given."""
    text = json.dumps(data, indent=1)
    if path is not None:
        with open(path, "w") as fh:
            fh.write(text)
    return text


def load_json(source: str | os.PathLike) -> dict[str, Any]:
    """Parse ``source``: JSON text (starting with ``{``) or the path of a JSON file."""
    text = str(source)
    if not text.lstrip().startswith("{"):
        with open(source) as fh:
            text = fh.read()
    return json.loads(text)
