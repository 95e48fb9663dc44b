"""A Hugging Face ``config.json`` as a run: the model only (see
:func:`cosearch.models.from_hf_config` for the families and fields read)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .config import RunConfig

__all__ = ["read_hf_config"]


def read_hf_config(source: str | Path | dict[str, Any], seq_len: int | None = None) -> RunConfig:
    """The model of a Hugging Face ``config.json`` (a path or its parsed dict), trained at
    ``seq_len`` (None: the config's context when it is a plausible training length)."""
    from .._json import read_json_file
    from ..models import from_hf_config
    d = read_json_file(source, "Hugging Face config") if not isinstance(source, dict) else source
    label = Path(source).parent.name if isinstance(source, (str, Path)) and Path(source).parent.name else None
    model = from_hf_config(d, name=label or d.get("_name_or_path") or None, seq_len=seq_len)
    return RunConfig(f"HF config {source}" if not isinstance(source, dict) else "HF config", model=model)
