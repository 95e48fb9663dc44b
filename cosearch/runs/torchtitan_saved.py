"""torchtitan 0.3's configs as the ``train.toml`` table :func:`cosearch.runs.torchtitan.read_torchtitan`
reads: the saved config (``Trainer.Config.to_dict()``, the JSON ``--debug.save_config_file``
writes) and a live ``Trainer.Config``, with the model tree they carry (checked against a preset,
or read whole for a dense Llama 3 / Qwen 3 flavor) and the kernels it names (attention, MoE token
dispatcher).  Read against torchtitan 0.3.0 (PyPI, 2026-09): each rule cites the file it follows."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from .. import models

__all__ = ["SAVED_NEUTRAL_SECTIONS", "saved_config_table", "live_config_table", "check_saved_model",
           "dense_model_from_tree", "saved_attention", "ATTENTION_SAID", "load_json", "fused_qkv"]


#: Sections of torchtitan's saved config (``Trainer.Config.to_dict()``, 0.3.0) that change neither
#: step time nor memory in cosearch's model.
SAVED_NEUTRAL_SECTIONS = ("hf_assets_path", "dump_folder", "profiler", "metrics", "tokenizer", "dataloader",
                          "optimizer", "lr_scheduler", "checkpoint", "comm", "validator", "override")
_AC_COMMON = ("preserve_rng_state", "determinism_check", "debug")
#: A saved activation-checkpointing field -> its ``train.toml`` key.
_AC_KEYS = {"force_recompute_mm_shapes_by_fqns": "per_op_sac_force_recompute_mm_shapes_by_fqns"}


def check_saved_model(m: dict[str, Any], preset: models.ModelConfig, source: str) -> None:
    """The model tree of a saved config checked against the preset its flavor maps to: each
    dimension cosearch prices (width, vocabulary, layers, heads, feed-forward and expert sizes,
    dense first layers, tied embeddings); a difference is refused by name."""
    diffs: list[str] = []

    def sub(parent: dict[str, Any], key: str, where: str) -> dict[str, Any]:
        v = parent.get(key)
        if v is None:
            return {}
        if not isinstance(v, dict):
            raise ValueError(f"{source}: {where}.{key} must be a config's fields or null, got {v!r}")
        return v

    def same(what: str, got: Any, want: Any) -> None:
        if got is not None and got != want:
            diffs.append(f"{what} {got} (the preset's {want})")

    layers = m.get("layers") if isinstance(m.get("layers"), list) else None
    if layers is None or not all(isinstance(x, dict) for x in layers):
        raise ValueError(f"{source}: model_spec.model has no list of layers; not a torchtitan saved config")
    same("dim", m.get("dim"), preset.hidden)
    same("vocab_size", m.get("vocab_size"), preset.vocab)
    same("layers", len(layers), preset.num_layers)
    same("enable_weight_tying", m.get("enable_weight_tying"), preset.tie_embeddings)
    dense = sliding = 0
    for i, layer in enumerate(layers):
        where = f"model_spec.model.layers[{i}]"
        att = sub(layer, "attention", where)
        same(f"layers[{i}] n_heads", att.get("n_heads"), preset.heads)
        # a sliding window (GPT-OSS's every even layer): the Attention config's size, and the
        # varlen kernel's (left, right) window, (size - 1, 0), where it carries one
        window = att.get("sliding_window_size")
        if window is not None:
            sliding += 1
            same(f"layers[{i}] sliding_window_size", window, preset.sliding_window)
        inner = sub(att, "inner_attention", where + ".attention")
        left = inner.get("window_size")
        if left is not None and not (isinstance(left, (list, tuple)) and len(left) == 2 and all(
                isinstance(x, int) and not isinstance(x, bool) for x in left)):
            raise ValueError(f"{source}: {where}.attention.inner_attention.window_size must be [left, right] token "
                             f"counts, got {left!r}")
        if left is not None and left[0] != -1 and left[0] + 1 != window:
            diffs.append(f"layers[{i}] inner_attention.window_size {list(left)} (a {left[0] + 1}-token window where the "
                         f"layer's sliding_window_size is {window})")
        if preset.mla is None:
            same(f"layers[{i}] n_kv_heads", att.get("n_kv_heads"), preset.kv_heads)
        else:
            same(f"layers[{i}] MLA (q_lora_rank, kv_lora_rank, qk_rope_head_dim)",
                 (att.get("q_lora_rank"), att.get("kv_lora_rank"), att.get("qk_rope_head_dim")), tuple(preset.mla))
        ff, moe = sub(layer, "feed_forward", where), sub(layer, "moe", where)
        if ff:
            dense += 1 if dense == i else 0
            same(f"layers[{i}] feed_forward hidden", sub(ff, "w1", where).get("out_features"), preset.ffn_hidden)
        if moe:
            router = sub(moe, "router", where + ".moe")
            inner = sub(sub(moe, "routed_experts", where + ".moe"), "inner_experts", where + ".moe.routed_experts")
            same(f"layers[{i}] num_experts", moe.get("num_experts"), preset.num_experts)
            same(f"layers[{i}] top_k", router.get("top_k"), preset.experts_per_token)
            same(f"layers[{i}] expert hidden", inner.get("hidden_dim"), preset.moe_ffn_hidden)
            same(f"layers[{i}] swiglu_limit", inner.get("swiglu_limit"), preset.activation_clamp or None)
            shared = sub(moe, "shared_experts", where + ".moe")
            width = sub(shared, "w1", where + ".moe.shared_experts").get("out_features") if shared else 0
            same(f"layers[{i}] shared-expert width", width, preset.shared_experts * preset.moe_ffn_hidden)
        if len(diffs) > 8:
            break
    if preset.moe:
        same("dense first layers", dense, preset.dense_layers)
    same("sliding-window layers", sliding, preset.sliding_layers if preset.sliding_window else 0)
    if diffs:
        raise ValueError(f"{source}: the saved model differs from the cosearch preset {preset.name} its flavor maps to: "
                         f"{'; '.join(diffs[:8])}; describe it with its config.json instead")


def saved_config_table(d: dict[str, Any], source: str) -> dict[str, Any]:
    """torchtitan's saved config (``Trainer.Config.to_dict()``: the JSON that
    ``--debug.save_config_file`` writes to the dump folder and ``--debug.print_config`` logs,
    torchtitan 0.3.0) as the ``train.toml`` table :func:`~cosearch.runs.torchtitan.read_torchtitan`
    reads.  Fields keep their names and meaning; torchtitan 0.3.0 moved ``enable_async_tensor_parallel``
    under ``compile``, and its activation checkpointing is a policy class known here by its
    fields (none; ``FullAC``; ``SelectiveAC``, per-op, with ``force_recompute_mm_shapes_by_fqns``;
    ``MemoryBudgetAC``, refused: the compiler chooses what to recompute)."""
    spec = d.get("model_spec")
    if not isinstance(spec, dict) or "name" not in spec or "flavor" not in spec:
        raise ValueError(f"{source}: a torchtitan saved config has model_spec with name and flavor")
    for sec in ("training", "parallelism", "compile", "debug"):
        if sec in d and not isinstance(d[sec], dict):
            raise ValueError(f"{source}: {sec} must be a section of fields, got {d[sec]!r}")
    table: dict[str, Any] = {k: v for k, v in d.items() if k not in ("model_spec", "activation_checkpoint", "loss")}
    table["model"] = {"name": spec["name"], "flavor": spec["flavor"]}
    comp = table.get("compile")
    if isinstance(comp, dict) and "enable_async_tensor_parallel" in comp:
        comp = dict(comp)
        table["parallelism"] = dict(table.get("parallelism") or {},
                                    enable_async_tensor_parallel=comp.pop("enable_async_tensor_parallel"))
        table["compile"] = comp
    if "activation_checkpoint" not in d:
        raise ValueError(f"{source}: no activation_checkpoint (Trainer.Config.to_dict writes it, null when off)")
    ac = d["activation_checkpoint"]
    if ac is None:
        table["activation_checkpoint"] = {"mode": "none"}
    else:
        if not isinstance(ac, dict):
            raise ValueError(f"{source}: activation_checkpoint must be null or a policy's fields, got {ac!r}")
        if "memory_budget" in ac:
            raise ValueError(f"{source}: activation_checkpoint is MemoryBudgetAC (memory_budget {ac['memory_budget']}): "
                             "the compiler's partitioner chooses what to recompute, which is not modelled")
        selective = "force_recompute_mm_shapes_by_fqns" in ac
        other = sorted(set(ac) - set(_AC_COMMON) - {"force_recompute_mm_shapes_by_fqns"})
        if other:
            raise ValueError(f"{source}: activation_checkpoint fields {other} belong to no policy cosearch knows "
                             "(FullAC, SelectiveAC)")
        table["activation_checkpoint"] = {"mode": "selective" if selective else "full",
                                          **({"selective_ac_option": "op"} if selective else {}),
                                          **{_AC_KEYS.get(k, k): v for k, v in ac.items()}}
    dispatchers = _token_dispatchers(spec.get("model"))
    backends = {_dispatcher_backend(td) for td in dispatchers}
    if len(backends) > 1:
        raise ValueError(f"{source}: the MoE layers use different token dispatchers ({sorted(backends)}), which is "
                         "not modelled")
    if backends == {"hybridep"}:
        # HybridEP's own fields (its capacity factor, padding and buffer bound), as the reader's
        # hybridep section; every layer must set them alike
        fields = [tuple(td.get(f) for f in _HYBRIDEP_FIELDS) for td in dispatchers]
        if any(f != fields[0] for f in fields):
            raise ValueError(f"{source}: the MoE layers' HybridEP dispatchers differ "
                             f"({sorted({str(f) for f in fields})}), which is not modelled")
        table["hybridep"] = dict(zip(_HYBRIDEP_FIELDS, fields[0]))
    if backends:
        table["parallelism"] = dict(table.get("parallelism") or {}, expert_parallel_comm_backend=backends.pop())
    loss = d.get("loss")
    if isinstance(loss, dict) and "num_chunks" in loss:
        table["loss"] = {"num_chunks": loss["num_chunks"]}
    elif loss is not None and not (isinstance(loss, dict) and set(loss) <= {"global_vocab_size", "mtp_scale"}):
        raise ValueError(f"{source}: loss {loss!r} is neither CrossEntropyLoss nor ChunkedLossWrapper")
    return table


#: The fields of torchtitan's ``HybridEPTokenDispatcher.Config`` beyond ``num_experts`` and ``top_k``
#: that change what it runs (``hidden_dim`` is the model's width).
_HYBRIDEP_FIELDS = ("non_blocking_capacity_factor", "pad_multiple", "num_max_tokens_per_rank")


def _layer_configs(tree: Any, *path: str) -> list[Any]:
    """Each layer's config at ``path`` in a saved model tree (``layers[i].<path>``), None where a
    layer has none there."""
    layers = tree.get("layers") if isinstance(tree, dict) else None
    out = []
    for layer in layers if isinstance(layers, list) else []:
        node = layer
        for key in path:
            node = node.get(key) if isinstance(node, dict) else None
        out.append(node)
    return out


def _token_dispatchers(tree: Any) -> list[dict[str, Any]]:
    """The ``token_dispatcher`` configs of a saved model tree's MoE layers."""
    return [td for td in _layer_configs(tree, "moe", "routed_experts", "token_dispatcher") if isinstance(td, dict)]


def _dispatcher_backend(td: dict[str, Any]) -> str:
    """torchtitan's ``comm_backend`` of a saved token dispatcher, known by its config's fields
    (``models/common/token_dispatcher.py``: the local and all-to-all dispatchers carry only
    ``num_experts`` and ``top_k``; DeepEP's ``cudagraphable``; HybridEP's
    ``non_blocking_capacity_factor``; MinimalAsyncEP's ``dtype`` and ``device``; torchao's padded
    one ``pad_multiple``)."""
    keys = set(td)
    if "non_blocking_capacity_factor" in keys:
        return "hybridep"
    if "cudagraphable" in keys:
        return "deepep"
    if keys & {"dtype", "device"}:
        return "minimal_async_ep"
    if "pad_multiple" in keys:
        return "torchao"
    return "standard"


def live_config_table(obj: Any, source: str) -> tuple[dict[str, Any], Any]:
    """A live ``Trainer.Config`` (torchtitan 0.3.0, built by a config registry's function) as the
    table :func:`saved_config_table` makes of its ``to_dict()`` and its model tree, with the model's Linear
    converters its saved form drops (they live in the layers' config classes:
    ``Float8Linear.Config``, its torchao recipe's scaling and ``emulate``; ``MXFP8Linear.Config``;
    ``NVFP4Linear.Config``; LoRA's frozen bases, ``Frozen*Linear.Config``, read as the converter
    ``lora``, which is refused)."""
    d = obj.to_dict()
    table = saved_config_table(d, source)
    found: set[str] = set()
    grouped: set[str] = set()
    recipes: set[str] = set()
    emulated = False
    stack, seen = [getattr(getattr(obj, "model_spec", None), "model", None)], set()
    while stack:
        x = stack.pop()
        if id(x) in seen or x is None or isinstance(x, (str, int, float, bool)):
            continue
        seen.add(id(x))
        if dataclasses.is_dataclass(x) and not isinstance(x, type):
            # the class a Config belongs to (a converter may build it inside a function:
            # "_get_float8_grouped_experts_cls.<locals>.Float8GroupedExperts.Config")
            parts = type(x).__qualname__.split(".")
            base = parts[-2] if len(parts) > 1 and parts[-1] == "Config" else parts[0]
            if "LoRA" in base or base.startswith("Frozen"):
                # LoRA's converter freezes the base weights (FrozenFloat8Linear, ...): no gradients
                # or optimizer states for them, which cosearch does not model
                found.add("lora")
            if "Experts" in base and ("Float8" in base or "MXFP8" in base):
                # the grouped-experts converters (components/quantization/float8.py, mx.py)
                grouped.add("float8" if "Float8" in base else "mx")
            elif "Float8" in base:
                found.add("float8")
                torchao = getattr(x, "_torchao_config", None)
                emulated = emulated or bool(getattr(torchao, "emulate", False))
                cast = getattr(torchao, "cast_config_input", None)
                gran = str(getattr(cast, "scaling_granularity", "")).lower()
                if gran:
                    recipes.add("rowwise" if "axis" in gran else "tensorwise")
            elif "MXFP8" in base:
                found.add("mx")
            elif "NVFP4" in base or "QAT" in base:
                found.add(base)
            stack.extend(getattr(x, f.name) for f in dataclasses.fields(x))
        elif isinstance(x, (list, tuple)):
            stack.extend(x)
        elif isinstance(x, dict):
            stack.extend(x.values())
    table["model"]["converters"] = sorted(found)
    table["model"]["grouped_converters"] = sorted(grouped)
    if emulated or len(recipes) == 1:
        float8 = table.setdefault("quantize", {}).setdefault("linear", {}).setdefault("float8", {})
        if emulated:
            float8["emulate"] = True
        if len(recipes) == 1:
            float8["recipe_name"] = recipes.pop()
    return table, d["model_spec"].get("model")


#: torchtitan's decoders built of the common parts (``models/common``: GQA attention, a SwiGLU
#: feed-forward of w1/w2/w3, RMSNorm, RoPE), whose dense flavors a saved tree describes whole.
_DENSE_DECODERS = ("llama3", "qwen3")


def saved_attention(tree: dict[str, Any], source: str) -> str:
    """The attention kernel of a saved model tree, known by its ``inner_attention`` config's
    fields (torchtitan 0.3.0 ``models/common/attention.py``; ``config_utils.get_attention_config``):
    ``FlexAttention`` (``block_size``, ``kernel_options``; ``flex_flash`` where the kernel options
    name the FLASH backend), ``VarlenAttention`` (``window_size``), ``ScaledDotProductAttention``
    (no fields).  Every layer must use the same."""
    kinds = set()
    for inner in _layer_configs(tree, "attention", "inner_attention"):
        if not isinstance(inner, dict):
            continue
        if "block_size" in inner or "kernel_options" in inner:
            opts = inner.get("kernel_options")
            kinds.add("flex_flash" if isinstance(opts, dict) and opts.get("BACKEND") == "FLASH" else "flex")
        elif "window_size" in inner:
            kinds.add("varlen")
        elif not inner or set(inner) <= {"param_init", "sharding_config"}:
            kinds.add("sdpa")
        else:
            raise ValueError(f"{source}: an inner_attention with fields {sorted(inner)} is no attention cosearch knows "
                             "(FlexAttention, VarlenAttention, ScaledDotProductAttention)")
    if len(kinds) > 1:
        raise ValueError(f"{source}: the layers use different attention kernels ({sorted(kinds)}), which is not "
                         "modelled")
    return kinds.pop() if kinds else "flex"


#: What each attention kernel of a saved config is priced as, said.
ATTENTION_SAID = {
    "flex": "FlexAttention with torchtitan's block-causal (per-document) mask, priced as the flash kernel over one "
            "causal sequence: FlexAttention's own speed and the work shorter documents save are not modelled",
    "flex_flash": "FlexAttention's FLASH backend with torchtitan's block-causal (per-document) mask, priced as the "
                  "flash kernel over one causal sequence (the work shorter documents save is not modelled)",
    "varlen": "variable-length flash attention over torchtitan's packed documents, priced as the flash kernel over "
              "one causal sequence (the work shorter documents save is not modelled)",
    "sdpa": "flash attention (scaled_dot_product_attention's flash kernel)",
}


def dense_model_from_tree(tree: dict[str, Any], mname: str, flavor: str, seq: int,
                           source: str) -> models.ModelConfig | None:
    """A dense Llama 3 / Qwen 3 flavor without a cosearch preset, from its saved tree: width,
    vocabulary, layers, heads, KV heads, head width, SwiGLU width (``w1``), Qwen 3's per-head q/k
    RMSNorms (``qk_norm``), tied embeddings; every layer alike and without biases.  None for any
    other model (an MoE, another family): its config.json describes it."""
    from .._validate import positive_int
    layers = tree.get("layers")
    if mname not in _DENSE_DECODERS or not isinstance(layers, list) or not layers:
        return None
    shapes = set()
    for i, layer in enumerate(layers):
        if not isinstance(layer, dict) or layer.get("moe") is not None or not isinstance(layer.get("feed_forward"), dict):
            return None
        att, ff = layer.get("attention"), layer["feed_forward"]
        if not isinstance(att, dict) or not all(isinstance(ff.get(w), dict) for w in ("w1", "w2", "w3")):
            return None
        qkv = att.get("qkv_linear") if isinstance(att.get("qkv_linear"), dict) else {}
        linears = [ff[w] for w in ("w1", "w2", "w3")] + [att.get(w) for w in ("wo", "wq", "wk", "wv")]
        linears += [qkv.get(w) for w in ("wqkv", "wq", "wk", "wv")]
        if any(isinstance(lin, dict) and lin.get("bias") for lin in linears):
            raise ValueError(f"{source}: layer {i} has biased projections, which {mname} has not; describe the model "
                             "with its config.json")
        where = f"{source}: model_spec.model.layers[{i}]"
        heads = positive_int(f"{where} n_heads", att.get("n_heads"))
        kv = positive_int(f"{where} n_kv_heads", att.get("n_kv_heads") or qkv.get("n_kv_heads") or heads)
        head_dim = att.get("head_dim") or qkv.get("head_dim")
        head_dim = positive_int(f"{where} head_dim", head_dim) if head_dim is not None else None
        ffn = positive_int(f"{where} feed_forward.w1.out_features", ff["w1"].get("out_features"))
        shapes.add((heads, kv, head_dim, ffn, att.get("qk_norm") is not None))
    if len(shapes) != 1:
        raise ValueError(f"{source}: the layers differ in shape ({len(shapes)} kinds), which is not modelled")
    heads, kv, head_dim, ffn, qk = shapes.pop()
    hidden = positive_int(f"{source}: model_spec.model.dim", tree.get("dim"))
    tied = tree.get("enable_weight_tying", False)
    if not isinstance(tied, bool):
        raise ValueError(f"{source}: model_spec.model.enable_weight_tying must be true or false, got {tied!r}")
    return models.ModelConfig(
        f"{mname}-{flavor}".lower(), len(layers), hidden, heads, ffn,
        positive_int(f"{source}: model_spec.model.vocab_size", tree.get("vocab_size")), seq,
        kv_heads=kv, head_size=head_dim,
        activation="swiglu", norm="rmsnorm", position="rotary", bias=False,
        tie_embeddings=tied, dropout=False, qk_norm="head" if qk else "none")


def fused_qkv(tree: dict[str, Any]) -> bool:
    """Whether a saved model tree's attention projects q, k and v in one matmul (torchtitan 0.3's
    ``FusedQKVLinear``: ``qkv_linear`` holds ``wqkv``; its Llama 3 and Qwen 3 default), every layer
    alike; separate ``wq``, ``wk``, ``wv`` (or MLA's projections) otherwise."""
    return {isinstance(qkv, dict) and isinstance(qkv.get("wqkv"), dict)
            for qkv in _layer_configs(tree, "attention", "qkv_linear")} == {True}


def load_json(path: str | Path) -> dict[str, Any]:
    from .._json import read_json_file
    from ._fields import MAX_CONFIG_BYTES
    d = read_json_file(path, "JSON config", MAX_CONFIG_BYTES)
    if not isinstance(d, dict):
        raise ValueError(f"{path}: a JSON object of config sections is expected, got {type(d).__name__}")
    return d
