"""Published training runs described in words and tables (BLOOM, Llama 3, PaLM, OPT:
``bench/validation/published_runs.json``), and the conventions their figures are counted in.

Their papers give a plan only in part (Llama 3: dp/tp/pp; PaLM: tp/pp), so
:func:`predict_published` evaluates a fully given plan as it is and searches only the parts a
source leaves open, with the given ones fixed.  The readings of each source's words are tables
here, each with its quote, so a user describing the same run gets the same number:

* :data:`ENGINE_OF`: the framework a source names;
* :data:`ZERO_OF`: the sharding a source describes in words;
* :func:`recompute_from_hfu`: the recompute mode a run's published hardware and model FLOPs
  utilisations state (their ratio counts the recomputed work);
* :func:`megatron_tflops`: Megatron's equation 3, the TFLOP/s per GPU that BLOOM and Megatron
  papers publish (it counts the recompute pass);
* TPU v4 runs on the ``TPUv4-XLA`` chip preset (:data:`cosearch.hardware.TPUv4_XLA`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from .. import cluster, hardware, models
from ..engine import MEGATRON_LM, Engine
from ..plan import Plan, PlanSpec, evaluate, recompute_flops

__all__ = ["ENGINE_OF", "ZERO_OF", "published_model", "published_hardware", "recompute_ratios",
           "recompute_from_hfu", "megatron_tflops", "predict_published"]

#: The framework each run used, where its source names one.  BLOOM: the tr11 README trains with
#: Megatron-DeepSpeed (DeepSpeed's pipeline engine, ZeRO stage 1 with BF16_Optimizer).  PaLM
#: (Chowdhery et al. 2022, sec. 4: JAX and T5X on Pathways) shards with XLA, which pads a
#: dimension its mesh does not divide: Megatron-LM's behaviour otherwise, without Megatron's
#: even split of a sequence over the tensor-parallel ranks (its 2,048 tokens over model
#: parallelism 12); its TP collectives as Megatron-LM's (the data gradients' beside the weight
#: gradients, ``Engine.async_dgrad_comm``; XLA's flags for the run are not published).  The others
#: default to Megatron-LM's behaviour.
ENGINE_OF = {"BLOOM-176B": "megatron-deepspeed",
             "PaLM-540B": replace(MEGATRON_LM, name="megatron-lm-xla-sharding", sp_even_split=False,
                                  software="Megatron-LM's physics, a sequence split over tp as XLA splits it "
                                           "(padded)")}

#: ZeRO stage of runs whose source describes its sharding in words.  Llama 3 (Herd of Models,
#: sec. 3.3.2): "Our use of FSDP for Llama 3 shards optimizer states and gradients, but for
#: model shards we do not reshard after forward computation" — gradients and optimizer state
#: sharded, weights gathered and kept: ZeRO-2 (plus the weights' all-gather each step).
#: Other "sharded" data parallelism (PaLM's) is taken as ZeRO-3.
ZERO_OF = {"Llama-3-405B-8k-gpus": 2, "Llama-3-405B-16k-gpus": 2}


def published_model(name: str, d: dict[str, Any]) -> models.ModelConfig:
    """A model from a published run's dimensions (``layers``, ``hidden``, ``heads``,
    ``ffn_hidden``, ``vocab``, ``seq_len`` and the optional architecture fields)."""
    act = d.get("activation", "gelu")
    return models.ModelConfig(
        name, d["layers"], d["hidden"], d["heads"], d["ffn_hidden"], d["vocab"], d["seq_len"],
        kv_heads=d.get("kv_heads"), activation=act, norm=d.get("norm", "layernorm"),
        position={"rotary": "rotary", "learned": "learned"}.get(str(d.get("position", "learned")).split()[0], "none"),
        bias=d.get("bias", act != "swiglu"), tie_embeddings=d.get("tied_embeddings", True), dropout=act != "swiglu")


def published_hardware(run: dict[str, Any]) -> tuple[hardware.Accelerator, cluster.Cluster]:
    """The chip and cluster of a published run.  BLOOM's Jean Zay nodes: 4 x 100 Gb/s Omni-Path
    per 8-GPU node (6.25 GB/s per GPU per direction, the tr11 README); TPU v4 under XLA:
    :data:`cosearch.hardware.TPUv4_XLA` on a TPU v4 pod."""
    hw = run["hardware"]
    n = hw["chips"]
    if hw["chip"].startswith("A100"):
        cl = cluster.dgx_a100(n // 8)
        if "Omni-Path" in hw.get("inter_node", ""):
            cl = cl.with_(inter_node_Bps=4 * 12.5e9 / 8, name="bloom-jz")
        return hardware.A100_80GB, cl
    if hw["chip"].startswith("H100"):
        return hardware.H100, cluster.dgx_h100(n // 8)
    if "v4" in hw["chip"]:
        return hardware.TPUv4_XLA, cluster.tpuv4_pod(n)
    raise ValueError(f"published run chip {hw['chip']!r} has no preset")


def megatron_tflops(m: models.ModelConfig, batch: int, step_s: float) -> float:
    """Megatron's equation 3 (Narayanan et al., SC 2021): FLOP/s of a step counting the
    recompute pass, ``96 B s L h^2 (1 + s / 6h + V / 16 L h) / step``."""
    s, L, h, V = m.seq_len, m.num_layers, m.hidden, m.vocab
    return 96 * batch * s * L * h * h * (1 + s / (6 * h) + V / (16 * L * h)) / step_s


def recompute_ratios(m: models.ModelConfig, engine: Engine | str | None = None) -> dict[str, float]:
    """(model + recomputed FLOPs) / model FLOPs of each recompute mode, selective and full."""
    tokens = float(m.seq_len)
    specs = {mode: PlanSpec(1, 1, 1, 1, recompute=mode, flash_attention=True, stage_layers=(m.num_layers,))
             for mode in ("selective", "full")}
    return {mode: 1.0 + recompute_flops(m, spec, tokens, engine) / (m.flops_per_token() * tokens)
            for mode, spec in specs.items()}


def recompute_from_hfu(m: models.ModelConfig, measured: dict[str, float], engine: Engine | str | None = None
                       ) -> str | None:
    """The recompute mode a run's published hardware and model FLOPs utilisations state: their
    ratio is (model + recomputed FLOPs) / model FLOPs, a count of the work, not of its time
    (PaLM: 57.8 / 46.2 = 1.25); the mode, selective or full, whose :func:`recompute_ratios` is
    nearest.  None where the run gives only one of them."""
    if not ("hfu" in measured and "mfu" in measured):
        return None
    stated = measured["hfu"] / measured["mfu"]
    ratio = recompute_ratios(m, engine)
    return min(ratio, key=lambda mode: abs(ratio[mode] - stated))


def predict_published(run: dict[str, Any], models_by_name: dict[str, dict]) -> tuple[Plan | None, str]:
    """The run's plan priced: evaluated as published when its source gives every part, else the
    best plan of a search over the parts it leaves open (flash attention on; recompute from
    :func:`recompute_from_hfu` where the source says only that activations were recomputed).
    Returns (plan or None, how it was read).  ``models_by_name`` collects each run's model
    dimensions (a run may give ``"same as <name>"``)."""
    from ..placement import search_plans
    md = run["model"] if isinstance(run["model"], dict) else models_by_name[run["model"].replace("same as ", "")]
    m = published_model(run["name"], md)
    models_by_name[run["name"]] = md
    chip, cl = published_hardware(run)
    p = run["plan"]
    B = p.get("global_batch")
    if not B:
        return None, "global batch not given"
    zero = p.get("zero", 0)
    zero = 3 if isinstance(zero, str) or "sharded" in str(p.get("data_parallel", "")) else int(zero or 0)
    zero = ZERO_OF.get(run["name"], zero)
    engine = ENGINE_OF.get(run["name"])
    tp = p.get("tp") or p.get("model_parallel")
    fully = all(isinstance(p.get(k), int) for k in ("dp", "tp", "pp", "microbatch")) and \
        isinstance(p.get("virtual_stages"), int) and p.get("recompute") in ("none", "full", "selective")
    if fully:
        spec = PlanSpec(p["dp"], p["tp"], p["pp"], p["microbatch"], recompute=p["recompute"],
                        virtual_stages=p["virtual_stages"], sequence_parallel=bool(p.get("sequence_parallel")),
                        zero=zero, flash_attention=False)
        return evaluate(m, chip, cl, spec, B, engine=engine), "plan as published"
    rc: Any = p.get("recompute")
    stated = None
    if rc not in ("none", "full", "selective"):
        # "yes (...)": the source says activations were recomputed but not how
        if str(rc).lower().startswith("yes"):
            stated = recompute_from_hfu(m, run["measured"], engine)
            rc = stated or ("selective", "full")
        else:
            rc = None
    res = search_plans(m, chip, cl, B, tps=(tp,) if tp else None, recompute=rc, zero=(zero,), flash_attention=True,
                       top_k=500, engine=engine)
    keep = [q for q in res.plans if (not isinstance(p.get("dp"), int) or q.dp == p["dp"])
            and (not isinstance(p.get("pp"), int) or q.pp == p["pp"])]
    if not keep:
        return None, res.reason or "no searched plan matches the published dp/pp"
    return keep[0], "missing parts searched (flash attention on" + \
        (f"; recompute {stated}, as its HFU/MFU states)" if stated else ")")
