"""A Hugging Face ``config.json`` as a run: the model only (see
:func:`cosearch.models.from_hf_config` for the families and fields read)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .config import RunConfig

__all__ = ["read_hf_config", "hf_config_notes", "apply_config_overrides"]


def read_hf_config(source: str | Path | dict[str, Any], seq_len: int | None = None,
                   overrides: dict[str, Any] | None = None, who: str = "") -> RunConfig:
    """The model of a Hugging Face ``config.json`` (a path or its parsed dict), trained at
    ``seq_len`` (None: the config's context when it is a plausible training length), with
    ``who``'s ``overrides`` applied first (:func:`apply_config_overrides`)."""
    from .._json import read_json_file
    from ..models import from_hf_config
    d = read_json_file(source, "Hugging Face config") if not isinstance(source, dict) else source
    if overrides:
        d = apply_config_overrides(d, overrides, who)
    label = Path(source).parent.name if isinstance(source, (str, Path)) and Path(source).parent.name else None
    model = from_hf_config(d, name=label or d.get("_name_or_path") or None, seq_len=seq_len)
    name = f"HF config {source}" if not isinstance(source, dict) else "HF config"
    return RunConfig(name + (f" (with {who}'s config_overrides)" if overrides else ""), model=model,
                     assumed=tuple(hf_config_notes(d)))


def apply_config_overrides(config: dict[str, Any], overrides: dict[str, Any], who: str) -> dict[str, Any]:
    """A Hugging Face ``config.json`` with ``overrides`` applied as llm-foundry's
    ``set_config_overrides`` (``llmfoundry/utils/config_utils.py``) applies them: a mapping onto
    a mapping field updates it (a key it does not have is refused, as llm-foundry refuses typos
    in nested configs), a mapping onto a null field sets it, anything else replaces the field."""
    out = dict(config)
    for k, v in overrides.items():
        cur = out.get(k)
        if isinstance(cur, dict):
            if not isinstance(v, dict):
                raise ValueError(f"{who}: config_overrides.{k} must be a mapping, as the config's {k} is; got {v!r}")
            extra = sorted(set(v) - set(cur))
            if extra:
                raise ValueError(f"{who}: config_overrides.{k} has keys the config's {k} does not: {extra} "
                                 f"(llm-foundry refuses them; expected some of {sorted(cur)})")
            out[k] = {**cur, **v}
        else:
            out[k] = dict(v) if isinstance(v, dict) else v
    return out


def hf_config_notes(config: dict[str, Any]) -> list[str]:
    """What a ``config.json`` names that :func:`cosearch.models.from_hf_config` reads but does not
    price, or prices approximately, said so a user sees it: dropout where its hidden and attention
    probabilities differ (:func:`cosearch.models.hf_dropout`), attention sinks (GPT-OSS), logit
    soft-capping and post-norms (Gemma 2/3), Llama 4's NoPE layers, and multi-token prediction
    modules (DeepSeek-V3's ``num_nextn_predict_layers``, a training choice)."""
    mt = str(config.get("model_type", "")).lower().replace("-", "_")
    if isinstance(config.get("text_config"), dict):
        config = {**config["text_config"], "model_type": config["text_config"].get("model_type", mt)}
        mt = str(config.get("model_type", mt)).lower().replace("-", "_")
    notes = []
    from ..models import hf_dropout
    hidden, attention = hf_dropout(config, mt)
    if attention > 0 and hidden == 0:
        notes.append(f"attention dropout {attention:g} (the only dropout this family runs): inside the fused attention "
                     "kernel, not priced")
    elif hidden > 0 and hidden != attention:
        notes.append(f"hidden dropout {hidden:g}, attention dropout {attention:g}: dropout priced at the embedding, "
                     "attention and MLP outputs, and on the attention probabilities where the attention runs unfused")
    if mt == "gpt_oss":
        notes.append("attention sinks (one learned logit per head and layer): priced where the framework rescales "
                     "the attention output with them (torchtitan), not inside a fused attention kernel")
    if config.get("attn_logit_softcapping"):
        notes.append(f"attn_logit_softcapping {config['attn_logit_softcapping']}: the scores' tanh soft-capping "
                     "priced where the attention runs unfused, not inside a fused attention kernel")
    if mt in ("llama4", "llama4_text"):
        notes.append("Llama 4's NoPE layers (one in four) priced with RoPE and the q/k norm of the others")
    n = config.get("num_nextn_predict_layers")
    if isinstance(n, int) and not isinstance(n, bool) and n > 0:
        notes.append(f"num_nextn_predict_layers {n}: the multi-token prediction modules are priced only where the "
                     "run trains them (Megatron's --mtp-num-layers)")
    return notes
