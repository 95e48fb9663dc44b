"""Rows of cosearch's validation schema (``bench/validation/modern_runs.jsonl``, documented in
its README) as runs: one measured training run per row, with its model dimensions, chip, plan,
precision, framework and measured throughput.

Nothing here is fitted to the rows: each maps the published fields onto presets and PlanSpec
fields; the choices that the rows leave open are recorded among the run's ``assumed`` notes
with their reason.  A row cosearch cannot describe raises :class:`Refused` naming the missing
feature.
"""

from __future__ import annotations

import re
from typing import Any

from .. import cluster, hardware, models
from ..engine import (
    Engine,
    llm_foundry,
    megatron_core,
    preset,
    with_cross_entropy_fusion,
    with_moe_dispatch,
    with_op_fuser,
    with_recompute_modules,
)
from ..memory import MemoryConfig
from .config import RunConfig, RunDescription
from .megatron import CUDA_GRAPH_IMPLS, cross_entropy_note, cuda_graph_note, eager_pass_notes
from .nemo import apex_adam_memory
from .torchtitan import fsdp_zero_stage

__all__ = ["Refused", "read_row", "describe_row", "source_group", "measured_tok_s_gpu", "REQUIRED_FIELDS",
           "release_of", "release_label", "plan_key", "newest_per_plan", "precision_class", "group_of",
           "megatron_bridge_moe_dispatch", "megatron_bridge_cross_entropy", "graph_capture", "graph_capture_class"]

#: Fields every row needs (the others are optional: ``head_dim``, ``cp``, ``ep``, ``vp``, ``zero``,
#: ``zero_group``, ``sp``, ``offload``, ``ga``, and one of ``tok_s_gpu`` / ``tflops_gpu``).
REQUIRED_FIELDS = ("model", "arch", "layers", "hidden", "heads", "kv_heads", "ffn", "vocab", "seq", "accel",
                   "n_gpus", "dp", "tp", "pp", "mbs", "gbs", "recompute", "precision", "software")


class Refused(ValueError):
    """A row cosearch cannot describe; the message names the missing feature."""


def source_group(row: dict) -> str:
    """The framework a row ran ("?" where the row names none: the reader refuses it by name)."""
    sw = row.get("software")
    if not isinstance(sw, str):
        return "?"
    if sw.startswith("llm-foundry"):
        return "llm-foundry"
    if sw.startswith("torchtitan"):
        return "torchtitan"
    if sw.startswith("MaxText"):
        return "MaxText"
    if "Megatron-Bridge" in sw:
        return "Megatron-Bridge"
    if sw.startswith("NeMo"):
        return "NeMo"
    return sw.split()[0] if sw.split() else "?"


#: NeMo 1's launcher configs by release (NVIDIA/NeMo-Framework-Launcher, tags 24.03-24.09,
#: ``launcher_scripts/conf/training/<family>/<model>.yaml``: the configs each release's performance
#: table ran; the 24.07 table's TP, PP, CP and VP agree with its tag's files): ``(model.ub_tp_comm_overlap,
#: model.overlap_p2p_comm)`` per pre-training model, read from the files (an unset key is NeMo 1's
#: default, off).  At 24.07, for instance: gpt3/20b.yaml ``ub_tp_comm_overlap: True``,
#: gpt3/175b.yaml ``False`` with ``overlap_p2p_comm: True``, llama/llama2_70b.yaml and
#: llama3_70b.yaml ``true``/``true``, nemotron/nemotron_8b.yaml ``true`` with ``overlap_p2p_comm:
#: False``, nemotron_340b.yaml ``False``/``False``.  The fine-tuning rows ran
#: ``conf/fine_tuning/llama/squad.yaml``, which sets neither.
NEMO_LAUNCHER_OVERLAP = {
    "24.03": {"gpt3_5b": (False, False), "gpt3_20b": (False, False), "gpt3_40b": (True, True),
              "gpt3_175b": (False, False), "llama2_7b": (False, False), "llama2_13b": (True, False),
              "llama2_70b": (True, True), "nemotron_8b": (True, False), "nemotron_15b": (True, False),
              "nemotron_22b": (True, True), "mixtral_8x7b": (False, False)},
    "24.05": {"gpt3_5b": (False, False), "gpt3_20b": (True, False), "gpt3_40b": (True, True),
              "gpt3_175b": (False, True), "llama2_7b": (False, False), "llama2_13b": (False, True),
              "llama2_70b": (True, True), "llama3_8b": (False, False), "llama3_70b": (True, True),
              "nemotron_8b": (True, False), "nemotron_15b": (True, False), "nemotron_22b": (True, True),
              "mixtral_8x7b": (False, False), "mixtral_8x22b": (False, False)},
    "24.07": {"gpt3_5b": (False, False), "gpt3_20b": (True, False), "gpt3_40b": (True, True),
              "gpt3_175b": (False, True), "llama2_7b": (False, False), "llama2_13b": (False, True),
              "llama2_70b": (True, True), "llama3_8b": (False, False), "llama3_70b": (True, True),
              "llama3_1_8b": (False, False), "llama3_1_70b": (True, True), "llama3_1_405b": (True, True),
              "nemotron_8b": (True, False), "nemotron_15b": (True, False), "nemotron_22b": (True, True),
              "nemotron_340b": (False, False), "mixtral_8x7b": (False, True), "mixtral_8x22b": (False, False)},
}
NEMO_LAUNCHER_OVERLAP["24.09"] = NEMO_LAUNCHER_OVERLAP["24.07"]     # the same values in every file


#: NeMo 1's launcher configs that keep the optimizer state of Apex's ``DistributedFusedAdam``
#: (``optim.name: distributed_fused_adam``) in another dtype (``optim.dtype``; fp32 otherwise), by
#: release and pre-training model, read from the files as :data:`NEMO_LAUNCHER_OVERLAP` is: of the
#: tags 24.03-24.09 only nemotron/nemotron_340b.yaml sets one, ``dtype: bf16`` (24.07, 24.09);
#: the fine-tuning config (``conf/fine_tuning/llama/squad.yaml``) sets none.
NEMO_LAUNCHER_OPTIMIZER_DTYPE = {"24.07": {"nemotron_340b": "bf16"}, "24.09": {"nemotron_340b": "bf16"}}


#: Model fields of NeMo 1's launcher configs that the rows' architecture text leaves out, by release
#: and pre-training model, as :func:`cosearch.runs.read_nemo1` reads the files: the GPT-3 configs
#: (``gpt3/5b.yaml``, ``20b.yaml``, ``175b.yaml``, the same at every tag 24.03-24.09) set
#: ``hidden_dropout`` and ``attention_dropout`` 0.1 and leave ``position_embedding_type`` and
#: ``share_embeddings_and_output_weights`` at NeMo 1's defaults (``learned_absolute``; True): dropout,
#: learned positions and a tied output layer; the Nemotron-4 configs (``nemotron/nemotron_8b.yaml``,
#: ``15b``, ``22b``, and ``340b`` from 24.07) set ``bias: false``, as its report says ("no bias terms").
_GPT3_LAUNCHER = {"dropout": True, "position": "learned", "tie_embeddings": True}
NEMO_LAUNCHER_MODEL = {release: {**{m: _GPT3_LAUNCHER for m in ("gpt3_5b", "gpt3_20b", "gpt3_175b")},
                                 **{m: {"bias": False} for m in ("nemotron_8b", "nemotron_15b", "nemotron_22b")
                                    + (("nemotron_340b",) if release in ("24.07", "24.09") else ())}}
                       for release in ("24.03", "24.05", "24.07", "24.09")}


def _nemo_launcher_key(row: dict) -> tuple[str, str, bool]:
    """A NeMo 1 row's (release as the launcher tags it, ``"24.07"``; its model's config file
    stem, ``"llama2_70b"``; whether it is a pre-training row)."""
    parts = str(row["id"]).split("/")
    release = release_label(row)        # the launcher's tags: "24.07"
    key = re.sub(r"[.\-]", "_", parts[1].lower()) if len(parts) > 1 else ""
    return release, key, not (len(parts) >= 3 and parts[2] != "pretrain")


def nemo_launcher_memory(row: dict) -> tuple[MemoryConfig | None, str]:
    """A NeMo 1 row's optimizer memory from the launcher config its release ran
    (:data:`NEMO_LAUNCHER_OPTIMIZER_DTYPE`, :func:`cosearch.runs.nemo.apex_adam_memory`), and the
    assumption to print where it is not the memory model's default; (None, "") otherwise."""
    release, key, pretrain = _nemo_launcher_key(row)
    dtype = NEMO_LAUNCHER_OPTIMIZER_DTYPE.get(release, {}).get(key) if pretrain else None
    if dtype is None:
        return None, ""
    mem = apex_adam_memory(dtype, name=str(row["id"]))
    return mem, (f"optimizer state {dtype} (the NeMo {release} launcher config's optim.dtype for Apex's "
                 f"DistributedFusedAdam): {mem.optimizer_bytes:g} bytes a parameter")


def nemo_launcher_overlap(row: dict) -> tuple[bool, bool, str]:
    """A NeMo 1 row's ``(ub_tp_comm_overlap, overlap_p2p_comm)`` from the launcher config its
    release ran (:data:`NEMO_LAUNCHER_OVERLAP`), and an assumption to print when that config is not
    known (a release or model outside the table: NeMo 1's defaults, both off; a fine-tuning row:
    off, as its SFT config sets neither)."""
    parts = str(row["id"]).split("/")
    release, key, pretrain = _nemo_launcher_key(row)
    if not pretrain:
        return False, False, ""
    table = NEMO_LAUNCHER_OVERLAP.get(release, {})
    if key in table:
        tp, p2p = table[key]
        return tp, p2p, ""
    return False, False, (f"NeMo {release} launcher config for {parts[1] if len(parts) > 1 else row['id']} not known: "
                          "TP and pipeline overlap off (NeMo 1's defaults)")


#: A Megatron-Bridge row's notes where its recipe turns TP-communication overlap off
#: (``CommOverlapConfig(tp_comm_overlap=False)``, as the DeepSeek-V3 H100 recipes build it) and where
#: it reduces the gradients after the backward (``ddp.overlap_grad_reduce = False``).
_TP_OVERLAP_OFF = "TP comm overlap off"
_GRAD_REDUCE_OFF = "grad reduce overlap off"


def _engine(row: dict) -> str | Engine:
    """The framework's engine.  Megatron-Bridge's performance recipes turn TP-communication
    overlap on wherever tp > 1 except with NVFP4 (scripts/performance/configs/llama/
    llama3_llm_pretrain.py: ``tp_comm_overlap = False if precision == "nvfp4" else`` the
    recipe's, which src/megatron/bridge/recipes/llama/llama3.py sets True for Llama 3/3.1 70B and
    405B; the 8B configs set ``tp_comm_overlap=bool(tp > 1)``), and their precision configs
    (scripts/performance/utils/precision.py) keep the weights in FP8 only for FP8 current scaling
    and MXFP8 (``fp8_param_gather = True``), not NVFP4.  Where a recipe turns the TP overlap or the
    overlapped gradient reduction off, the row's notes say ``TP comm overlap off`` / ``grad reduce
    overlap off``."""
    g = source_group(row)
    vp = row.get("vp")
    interleaved = int(row["pp"]) > 1 and isinstance(vp, (int, float)) and vp > 1
    if g == "Megatron-Bridge":
        # CommOverlapConfig (src/megatron/bridge/training/comm_overlap.py): overlap_p2p_comm on
        # whenever pp > 1 with virtual stages, batch_p2p_comm otherwise; a row whose recipe turns
        # the TP overlap or the overlapped gradient reduction off says so in its notes
        text = str(row.get("notes") or "")
        grad_overlap = _GRAD_REDUCE_OFF not in text
        if "NVFP4" in row["precision"]:
            return megatron_core(overlap_p2p_comm=interleaved, overlap_grad_reduce=grad_overlap)
        return megatron_core(tp_comm_overlap=int(row["tp"]) > 1 and _TP_OVERLAP_OFF not in text,
                             fp8_param_gather="FP8" in row["precision"], overlap_p2p_comm=interleaved,
                             overlap_grad_reduce=grad_overlap)
    if g == "NeMo":
        tp_overlap, p2p_overlap, _ = nemo_launcher_overlap(row)
        return megatron_core(tp_comm_overlap=tp_overlap and int(row["tp"]) > 1,
                             overlap_p2p_comm=p2p_overlap and interleaved)
    if g == "llm-foundry" and "PURE" in row["precision"]:
        # MP mode PURE: bf16 parameters, gradients and gradient reduction (MODERN_RUNS.md, code LF)
        return llm_foundry("PURE")
    if g == "torchtitan" and "no compile" in row["precision"].replace("torch.compile", "compile"):
        # torch.compile off: the model's Python norms, SwiGLU and RoPE run op by op (eager)
        return "fsdp-eager"
    # torchtitan's async TP rows run on the plain fsdp engine: pricing them with the TP
    # collectives hidden (overlap_tp_comm) predicts a 13-17 % gain where the paper measures
    # 4.5-5.7 % (its Table 4 and the 405B Float8 rows), so its micro-pipelining hides only part of
    # them, which part not being modelled
    if g == "MaxText" and _MINIMAL_REMAT.match(str(row.get("recompute", ""))):
        # MaxText's minimal remat: checkpoint_dots_with_no_batch_dims (the weight GEMMs' outputs saved)
        return "maxtext-minimal-remat"
    return {"llm-foundry": "llm-foundry", "torchtitan": "fsdp", "MaxText": "maxtext"}.get(g, "megatron-core")


def _chip(row: dict, notes: list) -> hardware.Accelerator:
    a = row["accel"]
    if a.startswith("A100-SXM-40GB"):
        return hardware.A100
    if a.startswith("A100"):
        return hardware.A100_80GB
    if a.startswith("H100-SXM-96GB") or a.startswith("H100-95GB"):
        # Meta's Grand Teton H100s: "96GB HBM2e with 2.4 TB/sec peak memory bandwidth" at "the
        # default 500W power limit" (torchtitan docs/performance.md, the rows' own source): the
        # H100-500W preset, its clock and FP8 rate from FBGEMM's "H100 500W" GEMMs; HBM size
        # from the row
        return hardware.H100_500W.with_(hbm_bytes=(95e9 if "95GB" in a else 96e9))
    gen = str(row.get("gen", ""))
    if gen in ("TPU v5p", "TPU v6e"):      # the MoE rows name the slice in ``accel``, the chip in ``gen``
        return hardware.TPUv5p if gen == "TPU v5p" else hardware.TPUv6e
    for prefix, chip in (("H100", hardware.H100), ("H200", hardware.H200), ("B200", hardware.B200),
                         ("B300", hardware.B300), ("GB200", hardware.GB200), ("GB300", hardware.GB300), ("TPU-v5e", hardware.TPUv5e),
                         ("TPU-v5p", hardware.TPUv5p)):
        if a.startswith(prefix):
            return chip
    raise Refused(f"chip {a!r} has no preset")


def _cluster(row: dict, chip: hardware.Accelerator) -> cluster.Cluster:
    n = int(row["n_gpus"])
    name = chip.name
    if name.startswith("TPUv5e"):
        return cluster.tpuv5e_pod(n)
    if name.startswith("TPUv5p"):
        return cluster.tpuv5p_pod(n)
    if name.startswith("TPUv6e"):
        return cluster.tpuv6e_pod(n)
    if name in ("GB200", "GB300"):
        return cluster.gb200_nvl72(n)
    base = {"A100": cluster.dgx_a100, "A100-80GB": cluster.dgx_a100, "H100": cluster.dgx_h100,
            "H100-500W": cluster.dgx_h100, "H200": cluster.dgx_h200, "B200": cluster.dgx_b200,
            "B300": cluster.dgx_b300}[name]
    if n % 8 == 0:
        return base(n // 8)
    one = base(1)   # fewer GPUs than a node: one flat NVLink domain of n
    return cluster.Cluster(n, None, one.intra_node_Bps, None, link_latency_s=one.link_latency_s,
                           intra_efficiency=one.intra_efficiency, name=f"{one.name} ({n} GPUs)")


def _model(row: dict, notes: list | None = None) -> models.ModelConfig:
    notes = [] if notes is None else notes
    arch = row["arch"]
    geglu = "GeGLU" in arch
    gated = "SwiGLU" in arch or "llama" in arch.lower() or geglu
    act = ("geglu" if geglu else "swiglu") if gated else ("relu" if "ReLU" in arch else "gelu")  # squared-ReLU as ReLU
    learned = "learned pos-emb" in arch
    alibi = "ALiBi" in arch or "alibi" in arch
    head = int(row["head_dim"]) if row.get("head_dim") else None
    if head == row["hidden"] // row["heads"] and row["hidden"] % row["heads"] == 0:
        head = None
    if head is None and row["hidden"] % row["heads"]:
        raise Refused(f"heads={row['heads']} do not divide hidden={row['hidden']} and no head size is given")
    moe = _moe_fields(row, notes) if row.get("num_experts") else {}
    # a dense row's attention features (an MoE row's are read with its experts)
    dense_attention = {} if moe else _attention_features(row, notes)
    bias = not ("no-bias" in arch or gated or "MaxText" in row["model"])
    if moe:
        gated, act = True, "geglu" if geglu else "swiglu"
        head = moe.pop("head_size", head)
        bias = moe.pop("bias", False)
    return models.ModelConfig(row["model"], row["layers"], row["hidden"], row["heads"], row.get("ffn") or row["moe_ffn"],
                              row["vocab"], row["seq"], kv_heads=row["kv_heads"], activation=act,
                              norm="rmsnorm" if (gated or "RMSNorm" in arch) else "layernorm",
                              position="learned" if learned else ("none" if alibi else "rotary"),
                              bias=bias,
                              tie_embeddings=("tied" in arch and "untied" not in arch) or "MPT" in row["model"],
                              dropout=False, head_size=head, **moe, **dense_attention)


#: Words of a row's architecture naming token mixers other than softmax attention, refused.
OTHER_MIXER_WORDS = ("Mamba", "state-space", "SSM", "linear attention", "DeltaNet", "lightning attention", "RWKV",
                     "Hyena", "sparse attention (DSA)")


def _attention_features(row: dict, notes: list) -> dict:
    """The attention features a row's ``arch`` names, dense or MoE: q/k norms ("qk-norm": Qwen3's
    per-head RMSNorms; with "chunked attention", Llama 4's weightless L2 norm), an alternating
    sliding window ("alternating sliding-window(W)"; any other layout refused) and attention
    sinks (inside the fused attention kernel: said, not priced)."""
    arch, out = str(row["arch"]), {}
    other = [w for w in OTHER_MIXER_WORDS if w.lower() in arch.lower()]
    if other:
        raise Refused(f"architecture {arch!r}: {other[0]} layers are not modelled (they would be priced as attention)")
    if "qk-norm" in arch:
        if "chunked attention" in arch:
            # Llama 4 Scout (config.json use_qk_norm): Llama4TextL2Norm, no weights, on the RoPE layers
            out["qk_norm"] = "l2"
            notes.append("Llama 4's weightless L2 norm of q and k per head, priced on every layer (the NoPE layers, "
                         "one in four, skip it)")
        else:
            # Qwen3 (config.json; modeling_qwen3.py / modeling_qwen3_moe.py's q_norm / k_norm of head_dim)
            out["qk_norm"] = "head"
            notes.append("per-head q/k RMSNorms (Qwen3's q_norm / k_norm)")
    win = re.search(r"(alternating )?sliding-window\((\d+)\)", arch)
    if win:
        if not win.group(1):
            raise Refused(f"sliding-window layout {arch!r} is not modelled (every layer, or alternating with full)")
        out["sliding_window"] = int(win.group(2))
        out["sliding_layers"] = int(row["layers"]) // 2
        notes.append(f"sliding window {win.group(2)} on every other layer ({int(row['layers']) // 2})")
    if "attention sinks" in arch:
        notes.append("attention sinks inside the fused attention kernel (Transformer Engine's softmax_type "
                     "learnable), not priced (one learned logit per head)")
    return out


#: Per-head width of MoE families whose rows leave it out, from each model's published
#: config.json: Qwen3-30B-A3B / Qwen3-235B-A22B ``"head_dim": 128`` (hidden / heads is 64);
#: DeepSeek-V3 and Kimi-K2 (MLA) ``qk_nope_head_dim`` = ``v_head_dim`` = 128 with
#: ``qk_rope_head_dim`` 64.
MOE_HEAD_DIM = {"Qwen3": 128, "DeepSeek-V3": 128, "Kimi-K2": 128}
#: MLA ranks of DeepSeek-V3 and Kimi-K2 (config.json: ``q_lora_rank`` 1536, ``kv_lora_rank`` 512,
#: ``qk_rope_head_dim`` 64), used where a row names "MLA (DeepSeek-V3 style)" without them.
DEEPSEEK_MLA = (1536, 512, 64)


def _moe_fields(row: dict, notes: list) -> dict:
    """The mixture-of-experts fields of an MoE row (``moe_runs.jsonl``), or :class:`Refused`
    naming the architecture feature cosearch does not price."""
    arch, layers = row["arch"], str(row.get("moe_layers") or "all")
    v4 = "compressed/sparse attention" in arch
    if v4:
        ref = models.preset("deepseek-v4-flash")
        sizes = (int(row["layers"]), int(row["hidden"]), int(row["heads"]), int(row["kv_heads"]))
        if sizes != (ref.num_layers, ref.hidden, ref.heads, ref.kv_heads):
            raise Refused(f"DeepSeek-V4 model of (layers, hidden, heads, kv heads) {sizes}: only DeepSeek-V4-Flash's "
                          "compressed attention sizes are known (maxtext deepseek4-284b.yml)")
        notes.append("DeepSeek-V4-Flash's compressed attention and 4 hyper-connection streams from maxtext's "
                     "deepseek4-284b.yml at e591f30; the 3 hash-routed layers priced with a router (h x 256, "
                     "0.3 % of a layer); the sparse core priced as a dense fused kernel over the keys each query meets")
        layers = "all"
    m = re.search(r"first (\d+) dense", layers)
    step = re.match(r"every (\d)(?:nd|rd|th) layer", layers)
    dense = 0
    if m and layers.startswith("layers "):
        dense = int(m.group(1))
    elif layers != "all" and not step:
        raise Refused(f"MoE layer layout {layers!r} is not modelled (all MoE, the first k dense, or every k-th MoE)")
    out: dict = dict(num_experts=int(row["num_experts"]), experts_per_token=int(row["experts_per_token"]),
                     moe_ffn_hidden=int(row["moe_ffn"]), shared_experts=int(row.get("shared_experts") or 0),
                     dense_layers=dense)
    if step:
        out["moe_layer_step"] = int(step.group(1))
        notes.append(f"one layer in {step.group(1)} MoE, the others dense ({row['ffn']}): a layer priced as their mean")
    if "chunked attention" in arch:
        # Llama 4 (both config.json files): attention_chunk_size 8192 on the RoPE layers; every
        # 4th layer is NoPE with global attention
        out["attention_chunk"] = LLAMA4_ATTENTION_CHUNK
        out["chunked_layers"] = int(row["layers"]) - int(row["layers"]) // 4
        notes.append(f"chunked attention ({LLAMA4_ATTENTION_CHUNK}-token blocks) on 3 of every 4 layers; RoPE "
                     "priced on every layer (the NoPE layers skip it)")
    if v4:
        out.update(compressed_attention=ref.compressed_attention, hyper_connections=ref.hyper_connections,
                   head_size=ref.head_size)
        return out
    family = next((f for f in MOE_HEAD_DIM if str(row["model"]).startswith(f)), None)
    hd = re.search(r"head_dim (\d+)", arch)
    if hd:
        out["head_size"] = int(hd.group(1))
    elif family is not None and MOE_HEAD_DIM[family] * int(row["heads"]) != int(row["hidden"]):
        out["head_size"] = MOE_HEAD_DIM[family]
        notes.append(f"head size {MOE_HEAD_DIM[family]} from {family}'s config.json")
    if "MLA" in arch:
        q = re.search(r"q_lora (\d+)", arch)
        kv = re.search(r"kv_lora (\d+)", arch)
        out["mla"] = (int(q.group(1)), int(kv.group(1)), DEEPSEEK_MLA[2]) if q and kv else DEEPSEEK_MLA
        out["head_size"] = MOE_HEAD_DIM.get(family or "DeepSeek-V3", 128)
        notes.append("MLA with rope head dim 64 (DeepSeek-V3's config.json)")
    out.update(_attention_features(row, notes))
    if str(row["model"]).startswith("GPT-OSS"):
        # the gpt-oss-120b preset's, from its config.json (attention_bias, the experts' biases,
        # swiglu_limit, rope_scaling), as Megatron-Bridge's GPTOSSBridge builds it
        ref = models.preset("gpt-oss-120b")
        out.update(bias=ref.bias, activation_clamp=ref.activation_clamp, rope_attention_factor=ref.rope_attention_factor)
        notes.append(f"GPT-OSS's biases, its activation clamped at {ref.activation_clamp:g} and its YaRN RoPE (attention "
                     f"factor {ref.rope_attention_factor:.3f}), from config.json (attention_bias, swiglu_limit, "
                     "rope_scaling)")
    text = " ".join([str(row.get("notes") or "")] + [str(a) for a in row.get("assumed") or ()])
    for recipe, (factor, how) in MAXTEXT_RECIPE_DROPPING.items():
        if recipe in text:
            text += f" {how}" + ("" if "capacity" in text else f" capacity_factor {factor}")
    cap = re.search(r"capacity(?:[ _]factor)?\s+(\d+(?:\.\d+)?)", text)
    if cap and "dropless" not in text:
        out["moe_capacity_factor"] = float(cap.group(1))
        if str(row.get("software", "")).startswith("MaxText"):
            if "sparse_matmul False" not in text and "megablox False" not in text:
                raise Refused("MaxText token dropping with sparse_matmul (megablox) is not modelled")
            out["moe_einsum_dispatch"] = True
            notes.append(f"token dropping at capacity factor {cap.group(1)} through MaxText's dense dispatch "
                         "(one-hot einsums into padded expert slots: sparse_matmul False)")
        elif re.search(r"pad\w*[^.;]*capacity|capacity[^.;]*\bpad", text, re.I):
            out["moe_pad_to_capacity"] = True
            notes.append(f"token dropping at capacity factor {cap.group(1)}, every expert padded to its capacity")
        else:
            notes.append(f"token dropping at capacity factor {cap.group(1)} (no padding)")
    if dense and int(row.get("ffn") or 0) and int(row["ffn"]) != int(row["moe_ffn"]) * (
            int(row["experts_per_token"]) + int(row.get("shared_experts") or 0)):
        notes.append(f"the {dense} dense layers priced as MoE layers (cosearch prices identical layers)")
    return out


#: A row's MaxText ``remat_policy=minimal`` (not ``minimal_with_context`` and the other named ones).
_MINIMAL_REMAT = re.compile(r"remat_policy=minimal(\s|$)")


def _recompute(row: dict, notes: list) -> tuple[str, tuple[str, ...]]:
    """The row's recompute mode and, for Megatron-Core's ``recompute_modules`` (``"selective:
    layernorm,moe_act"``), the modules (:data:`cosearch.graph.RECOMPUTE_MODULES`)."""
    from ..graph import RECOMPUTE_MODULES
    r = row["recompute"]
    if r.startswith("none"):
        return "none", ()
    if r.startswith("full") or r.startswith("remat_policy=full"):
        return "full", ()
    if r.startswith("selective (core attention)"):
        return "selective", ()
    m = re.match(r"selective:\s*([a-z_,\s]+?)(?:\s*\(|$)", r)
    if m:
        mods = tuple(x.strip() for x in m.group(1).split(",") if x.strip())
        bad = [x for x in mods if x not in RECOMPUTE_MODULES]
        if bad:
            raise Refused(f"recompute modules {bad} are not Megatron-Core recompute_modules cosearch prices")
        notes.append(f"recompute of Megatron-Core modules {', '.join(mods)}")
        return "selective", mods
    if r.startswith("custom"):
        return "selective", _maxtext_custom_policy(row, notes)
    if _MINIMAL_REMAT.match(r):
        notes.append("remat_policy minimal: the weight GEMMs' outputs saved, every other op rerun "
                     "(checkpoint_dots_with_no_batch_dims); their bytes kept with the layer input")
        return "selective", ()
    named = re.match(r"remat_policy=([a-z_]+)", r)
    if named:
        from .maxtext import NAMED_REMAT_POLICIES, remat_places_policy
        if named.group(1) not in NAMED_REMAT_POLICIES:
            raise Refused(f"recompute {r!r}: MaxText remat policy {named.group(1)!r} is not modelled")
        if not str(row.get("software", "")).startswith("MaxText"):
            raise Refused(f"recompute {r!r}: a MaxText remat policy is read for MaxText rows only")
        notes.append(f"MaxText remat_policy {named.group(1)}: the tensors its get_remat_policy saves kept, every "
                     "other one rematerialized")
        return "selective", remat_places_policy(NAMED_REMAT_POLICIES[named.group(1)])
    if r.startswith("selective"):
        notes.append(f"recompute {r!r} priced as Megatron's selective (attention core)")
        return "selective", ()
    raise Refused(f"recompute {r!r} is not modelled")


#: Llama 4's ``attention_chunk_size`` (meta-llama Llama-4-Scout-17B-16E and -Maverick-17B-128E
#: config.json, text_config).
LLAMA4_ATTENTION_CHUNK = 8192

#: tpu-recipes' token-dropping MaxText workloads, for rows that cite the recipe by name: its
#: capacity factor and dispatch (the Mixtral-8x7B README's ``mixtral_8x7b_dropped`` workload
#: details, and ``mixtral_8x22b_dropped`` in maxtext's benchmarks/maxtext_trillium_model_configs.py
#: at e591f30: capacity_factor 1.25, megablox False, sparse_matmul False).
MAXTEXT_RECIPE_DROPPING = {"mixtral_8x7b_dropped": (1.25, "megablox False, sparse_matmul False"),
                           "mixtral_8x22b_dropped": (1.25, "megablox False, sparse_matmul False")}

#: The tensors tpu-recipes' Mixtral-8x7B recipe offloads (its README's ``mixtral_8x7b_dropped``
#: workload: ``remat_policy: custom`` with decoder_layer_input, out_proj, query_proj, key_proj and
#: value_proj ``'offload'``), for rows that cite the recipe instead of listing them.
MAXTEXT_RECIPE_OFFLOAD = {"Mixtral-8x7B": ("decoder_layer_input", "out_proj", "query_proj", "key_proj", "value_proj")}


def _maxtext_custom_policy(row: dict, notes: list) -> str:
    """A MaxText ``remat_policy: custom`` row (``"custom: decoder_layer_input, out_proj,
    query/key/value_proj offloaded"``) as the engine's ``"maxtext:..."`` policy: the listed tensors
    on host, every other one rematerialized (MaxText's defaults)."""
    from ..graph import MAXTEXT_TENSORS
    r = str(row["recompute"])
    if not str(row.get("software", "")).startswith("MaxText"):
        raise Refused(f"recompute {r!r}: a custom remat policy is read for MaxText rows only")
    m = re.match(r"custom:\s*(.+?)\s+offloaded", r)
    if m:
        names = []
        for item in m.group(1).split(","):
            item = item.strip()
            if item == "query/key/value_proj":
                names += ["query_proj", "key_proj", "value_proj"]
            elif item:
                names.append(item)
    elif r.startswith("custom offload") and row.get("model") in MAXTEXT_RECIPE_OFFLOAD:
        names = list(MAXTEXT_RECIPE_OFFLOAD[row["model"]])
    else:
        raise Refused(f"recompute {r.split('(')[0].strip()!r}: its tensors are not named")
    bad = [n for n in names if n not in MAXTEXT_TENSORS]
    if bad:
        raise Refused(f"MaxText remat tensors {bad} are not among those cosearch prices")
    notes.append(f"MaxText remat_policy custom: {', '.join(names)} offloaded to host memory, every other tensor "
                 "rematerialized (MaxText's default 'remat')")
    return "maxtext:" + ",".join(f"{n}=offload" for n in names)


def precision_class(row: dict) -> str:
    """bf16, fp8, mxfp8 or nvfp4: the number format a row's precision text names."""
    p = str(row.get("precision", ""))
    if "NVFP4" in p:
        return "nvfp4"
    if "MXFP8" in p or "FP8-MX" in p:
        return "mxfp8"
    return "fp8" if ("FP8" in p or "Float8" in p) else "bf16"


def group_of(row: dict) -> str:
    """The fidelity group of a row: source x chip x number format (``Megatron-Bridge GB200 fp8``)."""
    chip = re.split(r"[\s,(]+", str(row.get("accel", "?")).strip())[0]
    return f"{source_group(row)} {chip} {precision_class(row)}"


def _zero(row: dict) -> int:
    """``zero``: an int, or text starting with the stage ("1 (distributed optimizer)")."""
    z = row.get("zero")
    if z is None or z == "":
        return 0
    if isinstance(z, (int, float)):
        return int(z)
    text = str(z)
    m = re.match(r"3 \(FSDP (\d+)\) x (EP|TP) (\d+)$", text)
    if m:
        fsdp, axis, n = int(m.group(1)), m.group(2), int(m.group(3))
        if axis == "EP" and fsdp * n == int(row["dp"]) and n == int(row.get("ep") or 1):
            # MaxText's fsdp x expert mesh: the dense weights sharded over both axes (its logical
            # rules put 'embed' on fsdp and expert), the experts over the fsdp ranks holding the same
            # ones: ZeRO-3 over every data-parallel rank, the experts over dp / ep (cosearch's rule)
            return 3
        if axis == "TP" and fsdp * n == int(row["n_gpus"]) and n == int(row["tp"]):
            return 3                                   # fsdp over every data-parallel rank, tp apart
    if text[:1].isdigit() and (len(text) == 1 or text[1] == " "):
        if "x" in text.split("(", 1)[-1] and ")" in text and text.split(")", 1)[1].strip():
            raise Refused(f"ZeRO layout {text!r} (sharding crossed with another axis) is not read")
        return int(text[0])
    raise Refused(f"ZeRO stage {text!r} is not read")


#: Megatron-Bridge's performance configs, each at a commit validation rows cite, with how it
#: dispatches MoE tokens and the line that sets each: the EP all-to-all overlap
#: (``overlap_moe_expert_parallel_comm``) and the flex dispatcher's backend (``deepep`` /
#: ``hybridep``; none: ``alltoall``).  ``cosearch/data/megatron_bridge_moe_dispatch.json``, read from
#: each config's source by ``scripts/megatron_bridge_moe_dispatch.py`` (a workload base config's
#: fields; a perf recipe's settings, its helpers' and base recipe's included, the last one winning).
MEGATRON_BRIDGE_MOE_DISPATCH_FILE = "data/megatron_bridge_moe_dispatch.json"
_CITED_CONFIG = re.compile(r"NVIDIA-NeMo/Megatron-Bridge:(\S+)@(\w+) \((\w+)")
_MOE_DISPATCH: dict | None = None
_BRIDGE_COMMITS: dict = {}


def _load_bridge_table() -> None:
    """Read :data:`MEGATRON_BRIDGE_MOE_DISPATCH_FILE` once: its configs and its commits."""
    global _MOE_DISPATCH
    if _MOE_DISPATCH is None:
        import importlib.resources
        import json
        text = importlib.resources.files("cosearch").joinpath(MEGATRON_BRIDGE_MOE_DISPATCH_FILE).read_text()
        table = json.loads(text)
        _MOE_DISPATCH = table["configs"]
        _BRIDGE_COMMITS.update(table["commits"])


def megatron_bridge_moe_dispatch(row: dict) -> dict | None:
    """How the Megatron-Bridge performance config a row cites in its ``assumed`` notes
    (``...dispatcher from NVIDIA-NeMo/Megatron-Bridge:<file>@<commit> (<config>)``) dispatches MoE
    tokens, from :data:`MEGATRON_BRIDGE_MOE_DISPATCH_FILE`: ``{"config", "commit", "overlap",
    "overlap_at", "backend", "backend_at"}``; None when the row cites no config the table holds."""
    _load_bridge_table()
    for note in row.get("assumed") or ():
        m = _CITED_CONFIG.search(str(note))
        if m is not None and "dispatcher" in str(note):
            hit = _MOE_DISPATCH.get(f"{m.group(3)}@{m.group(2)}")
            if hit is not None:
                return {"config": m.group(3), "commit": m.group(2), **hit}
    return None


_DENSE_CITED = re.compile(r"Megatron-Bridge:.*\(config (\w+) @ ([0-9a-f]+)\)")


def megatron_bridge_cross_entropy(row: dict) -> tuple[str, str] | None:
    """How the Megatron-Bridge performance run a row cites computes its loss, and where that is
    set: ``("te" | "native" | "off", "<file>:<line> ...")`` from
    :data:`MEGATRON_BRIDGE_MOE_DISPATCH_FILE` (a perf recipe's own ``_benchmark_common``
    argument where it sets one, else the commit's: Megatron-Bridge's performance scripts set
    ``cross_entropy_fusion_impl = "te"`` in ``_set_common_perf_overrides`` at every cited commit,
    over the GPT provider's ``cross_entropy_loss_fusion = True``); None for a row citing neither."""
    _load_bridge_table()
    cited = megatron_bridge_moe_dispatch(row)
    if cited is not None and "cross_entropy" in cited:
        return cited["cross_entropy"], cited["cross_entropy_at"]
    commit = cited["commit"] if cited is not None else None
    if commit is None:
        m = _DENSE_CITED.search(str(row.get("src") or ""))
        commit = m.group(2) if m else None
    hit = _BRIDGE_COMMITS.get(commit[:9]) if commit else None
    return (hit["cross_entropy"], hit["cross_entropy_at"]) if hit else None


def graph_capture(row: dict) -> tuple[str, tuple[str, ...]]:
    """(implementation, scopes) of the CUDA graphs a Megatron-Core row's notes give
    (``cuda_graph=<impl> scope=[...]``): ``("none", ())`` where they give none, no scopes for the
    whole iteration, as :func:`cosearch.runs.megatron.cuda_graphs` reads a command line."""
    graphs = re.search(r"cuda_graph=(\w+) scope=\[([^\]]*)\]", str(row.get("notes") or ""))
    impl = graphs.group(1) if graphs else "none"
    if impl not in CUDA_GRAPH_IMPLS:
        raise Refused(f"the row's CUDA graphs {impl!r} are none of Megatron's ({', '.join(CUDA_GRAPH_IMPLS)})")
    scopes = tuple(x.strip(" '\"") for x in graphs.group(2).split(",") if x.strip(" '\"")) if graphs else ()
    return impl, (() if impl in ("none", "full_iteration") else scopes)


def graph_capture_class(row: dict) -> str:
    """What a row's CUDA graphs capture, in words (the fidelity bench groups MoE rows by it,
    since cosearch prices GPU time only): ``"whole iteration"``, ``"per module: attn, ..."``,
    ``"none"``; ``"XLA (one compiled step)"`` for MaxText rows, whose step is one XLA program."""
    if source_group(row) == "MaxText":
        return "XLA (one compiled step)"
    impl, scopes = graph_capture(row)
    if impl == "full_iteration":
        return "whole iteration"
    if impl == "none":
        return "none"
    return "per module: " + (", ".join(scopes) if scopes else "each layer")


def _graph_notes(row: dict, moe: bool, notes: list) -> None:
    """The CUDA graphs a Megatron-Core row's notes give (:func:`graph_capture`), said as the
    config readers say them (:func:`cosearch.runs.megatron.cuda_graph_note`): cosearch prices no
    host time."""
    note = cuda_graph_note(*graph_capture(row), moe)
    if note:
        notes.append(note)


def _moe_notes(row: dict, notes: list) -> tuple[str, bool, bool, str, int]:
    """An MoE row's dispatch, as Megatron-Core runs it: the dispatcher (a DeepEP or HybridEP
    backend: the ``flex`` dispatcher; none: the recipes' ``alltoall``) and the EP all-to-all
    overlap (``overlap_moe_expert_parallel_comm``), each as the Megatron-Bridge config the row
    cites sets it (:func:`megatron_bridge_moe_dispatch`), else as its notes say (``moe dispatcher
    backend=deepep|hybridep``, ``EP a2a overlap on``); and whether the cited config runs the
    experts through Transformer Engine's op fuser (off where the row cites none: the releases
    before 26.06 turn it off in their performance overrides); the flex backend; and the SMs the
    flex dispatcher holds where the cited config sets them (0: the backend's default)."""
    text = str(row.get("notes") or "")
    said_backend = next((b for b in ("hybridep", "deepep") if f"backend={b}" in text or f"dispatcher {b}" in text),
                        None)
    said_overlap = "a2a overlap on" in text
    cited = megatron_bridge_moe_dispatch(row)
    backend, overlap = (said_backend, said_overlap) if cited is None else (cited["backend"], cited["overlap"])
    if cited is not None:
        at = f"{cited['config']}@{cited['commit']}"
        if backend != said_backend:
            notes.append(f"MoE dispatcher {backend or 'alltoall'} as the cited config sets it ({at}, "
                         f"{cited['backend_at']}); the row's notes say {said_backend or 'no backend'}")
        if overlap != said_overlap:
            notes.append(f"EP all-to-all overlap {'on' if overlap else 'off'} as the cited config sets it ({at}, "
                         f"{cited['overlap_at']}); the row's notes {'say on' if said_overlap else 'do not say so'}")
    if backend is not None:
        notes.append(f"MoE dispatcher {backend}: the flex dispatcher (each token once per rank holding its "
                     f"experts, at HybridEP's measured rates)")
    if overlap:
        notes.append("EP all-to-all overlap on (combined 1F1B: dispatch and combine beside the paired "
                     "microbatch's compute)")
    fuser = bool(cited is not None and cited.get("op_fuser"))
    if fuser:
        notes.append(f"the experts through Transformer Engine's op fuser, as the cited config sets it "
                     f"({cited['config']}@{cited['commit']}, {cited['op_fuser_at']}): their bias and clamped "
                     "activation fused")
    sms = int(cited["sms"]) if cited is not None and backend is not None and cited.get("sms") else 0
    if sms:
        notes.append(f"the flex dispatcher on {sms} SMs, as the cited config sets it ({cited['config']}@"
                     f"{cited['commit']}, {cited['sms_at']})")
    return ("alltoall" if backend is None else "flex"), overlap, fuser, backend or "hybridep", sms


def _fp8_attention(row: dict, model, precision: str, recipe: str | None, notes: list) -> bool:
    """Whether an MoE row's cited Megatron-Bridge config runs its attention in FP8
    (:func:`megatron_bridge_moe_dispatch`'s ``fp8_dpa``: the mixed-precision config's
    ``fp8_dot_product_attention``), said with the line that sets it.  The switch acts inside
    an FP8 recipe only (Megatron-Core's ``get_fp8_recipe`` passes it to one): a run in another
    precision keeps bf16 attention, said."""
    cited = megatron_bridge_moe_dispatch(row) if model.moe else None
    if not (cited and cited.get("fp8_dpa")):
        return False
    if precision != "fp8":
        notes.append(f"fp8_dot_product_attention set by the cited config ({cited['config']}@{cited['commit']}, "
                     f"{cited['fp8_dpa_at']}) acts only under an FP8 recipe: this {precision} run's attention "
                     "stays bf16")
        return False
    from ..graph import check_attention_format
    from ..plan import fp8_attention_format
    try:
        check_attention_format(model, fp8_attention_format(recipe), True)
    except ValueError as e:
        raise Refused(f"the cited config runs the attention in FP8 ({cited['config']}@{cited['commit']}, "
                      f"{cited['fp8_dpa_at']}), which cosearch cannot price here: {e}") from None
    fmt = {"mxfp8": "MXFP8", "fp8": "per-tensor FP8"}[fp8_attention_format(recipe)]
    notes.append(f"attention in {fmt} (fp8_dot_product_attention), as the cited config sets it "
                 f"({cited['config']}@{cited['commit']}, {cited['fp8_dpa_at']}): at the chip's measured {fmt} "
                 "attention speeds")
    if model.sliding_layers:
        notes.append(f"its {fmt} attention backward priced as full causal attention on the sliding-window layers "
                     "too: cuDNN's FP8 backward meets every causal key under a window (graph.fp8_window_backward_keys)")
    return True


def _precision(row: dict, notes: list) -> tuple[str, str | None]:
    """(precision, scaling recipe) as the row's precision text states them: NVFP4, MXFP8,
    per-tensor current scaling (``tensorwise``; torchao's Float8 is that), finer-grained block
    scaling (``blockwise``) or delayed scaling; an FP8 row that does not say takes the engine's
    default (a note says so)."""
    p = row["precision"]
    if "NVFP4" in p:
        notes.append("NVFP4 on every layer GEMM, as Megatron-Bridge's bf16_with_nvfp4_mixed runs it (its Nemotron 3 "
                     "Super and GPT-OSS 20B recipes keep the last 14 and 4 layers in bf16, which is not priced)")
        return "fp4", "nvfp4"
    if "FP8" in p or "Float8" in p:
        low = p.lower()
        if "MXFP8" in p or "FP8-MX" in p:
            return "fp8", "mxfp8"
        if "current scaling" in low or "FP8-CS" in p or "Float8" in p:
            return "fp8", "tensorwise"
        if "blockwise" in low or "finer-grained" in low:
            return "fp8", "blockwise"
        if "delayed" in low:
            return "fp8", "delayed"
        notes.append("FP8 scaling recipe not stated: the engine's default (Megatron's delayed scaling)")
        return "fp8", None
    return "bf16", None


def measured_tok_s_gpu(row: dict, model: models.ModelConfig) -> float:
    """Tokens/s per GPU as published; MaxText rows give only TFLOP/s per chip, converted back with
    MaxText's own FLOP count (matmul FLOPs incl. the logits, attention without causal halving)."""
    if row.get("tok_s_gpu"):
        return float(row["tok_s_gpu"])
    t, mfu, peak = row.get("tflops_gpu"), row.get("mfu_pct"), row.get("mfu_peak")
    if t and mfu and peak and abs(float(t) / (float(mfu) / 100.0 * float(peak)) - 1.0) > 0.03:
        # one row of the set: MaxText's v5p table gives 1024B on v5p-2048 249 TFLOP/s at 64.05 % MFU,
        # which is 294 TFLOP/s of the 459 peak; which figure is the typo cannot be told
        raise Refused(f"the row contradicts itself: {t} TFLOP/s/chip is {float(t) / float(peak):.1%} of the "
                      f"{peak} TFLOP/s peak, but its MFU is {mfu}%")
    if row.get("flop_conv") == "F-mx" and row.get("tflops_gpu"):
        m = model
        per_layer = 2 * m.hidden * m.q_dim + 2 * m.hidden * m.kv_dim + (3 if m.gated else 2) * m.hidden * m.ffn_hidden
        matmul = m.num_layers * per_layer + m.vocab * m.hidden
        flops_per_token = 6.0 * matmul + 12.0 * m.num_layers * m.seq_len * m.q_dim
        return float(row["tflops_gpu"]) * 1e12 / flops_per_token
    raise Refused("the row gives neither tokens/s nor a convertible TFLOP/s")


def _offload(row: dict, pp: int) -> int:
    """``activation CPU offload of N layers`` -> N per pipeline stage (the rows that offload have
    one stage)."""
    text = row.get("offload")
    if not text:
        return 0
    words = [w for w in str(text).split() if w.isdigit()]
    if not words:
        raise Refused(f"offload {text!r} names no layer count")
    return -(-int(words[0]) // pp)


#: The validation schema's fields by kind (``MODERN_RUNS.md``, ``MOE_RUNS.md``): whole numbers,
#: numbers, texts, flags; each may be null.  ``zero`` is a stage or a text ("3 (FSDP 64) x EP 4").
ROW_INTEGERS = ("layers", "hidden", "heads", "kv_heads", "ffn", "moe_ffn", "num_experts", "experts_per_token",
                "shared_experts", "vocab", "seq", "n_gpus", "gpus_per_node", "dp", "tp", "pp", "cp", "ep", "etp", "vp",
                "mbs", "gbs", "ga", "head_dim", "zero_group", "num_params", "mfu_peak")
ROW_NUMBERS = ("tok_s_gpu", "step_s", "tflops_gpu", "mfu_pct")
ROW_TEXTS = ("id", "model", "arch", "accel", "gen", "recompute", "precision", "software", "notes", "moe_layers",
             "offload", "flop_conv", "quote", "src")
ROW_FLAGS = ("sp", "complete")


def check_row_types(row: Any, source: str = "validation row") -> None:
    """Refuse a row whose fields are of the wrong kind (a list where a count goes, a number where
    a text goes), naming the field, before any rule reads it."""
    import math
    if not isinstance(row, dict):
        raise Refused(f"{source}: a row is a JSON object, got {type(row).__name__}")
    for f in ROW_INTEGERS:
        x = row.get(f)
        least = 0 if f in ("shared_experts", "mfu_peak") else 1          # counts, degrees and sizes
        if x is not None and (isinstance(x, bool) or not isinstance(x, (int, float))
                              or (isinstance(x, float) and not x.is_integer()) or not least <= x <= 2**53):
            raise Refused(f"{source}: {f} must be a whole number of at least {least}, got {x!r}")
    for f in ROW_NUMBERS:
        x = row.get(f)
        if x is not None and (isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x)):
            raise Refused(f"{source}: {f} must be a finite number, got {x!r}")
    for f in ROW_TEXTS:
        if row.get(f) is not None and not isinstance(row[f], str):
            raise Refused(f"{source}: {f} must be a text, got {row[f]!r}")
    for f in ROW_FLAGS:
        if row.get(f) is not None and not isinstance(row[f], bool):
            raise Refused(f"{source}: {f} must be true or false, got {row[f]!r}")
    z = row.get("zero")
    if z is not None and (isinstance(z, bool) or not isinstance(z, (int, str))):
        raise Refused(f"{source}: zero must be a stage or a text, got {z!r}")
    a = row.get("assumed")
    if a is not None and (not isinstance(a, list) or not all(isinstance(x, str) for x in a)):
        raise Refused(f"{source}: assumed must be a list of texts, got {a!r}")


def read_row(row: dict, source: str = "validation row") -> RunConfig:
    """The row as a :class:`~cosearch.runs.RunConfig` with its chip, cluster and measured
    throughput; raises :class:`Refused` with the reason, or ``ValueError`` from cosearch's own
    validation."""
    check_row_types(row, source)
    notes: list[str] = []
    if row.get("mbs") is None and row.get("ga") and row.get("dp") and row.get("gbs") and \
            int(row["gbs"]) % (int(row["dp"]) * int(row["ga"])) == 0:
        # MaxText rows state per_device_batch_size through the global batch: gbs / (dp x ga)
        row = dict(row, mbs=int(row["gbs"]) // (int(row["dp"]) * int(row["ga"])))
        notes.append(f"microbatch {row['mbs']} = gbs / (dp x ga) (the row gives none)")
    required = [f for f in REQUIRED_FIELDS if not (f == "ffn" and row.get("num_experts"))]   # all-MoE: no dense FFN
    if row.get("num_experts"):
        required += ["moe_ffn", "experts_per_token"]
    missing = [f for f in required if row.get(f) is None]
    if missing:
        raise Refused(f"{source}: missing fields {', '.join(missing)}")
    chip = _chip(row, notes)
    cl = _cluster(row, chip)
    model = _model(row, notes)
    regression = re.search(r"page footnote: ([^;]*regression[^;]*)", str(row.get("notes") or ""), re.I)
    if regression:
        notes.append(f"its source marks this throughput as a software regression ({regression.group(1).strip()}); "
                     "cosearch prices the kernels as they run without it")
    ep = int(row.get("ep") or 1)
    etp = row.get("etp")
    if ep > 1 and not model.moe:
        raise Refused("expert parallelism on a dense model")
    etp = None if etp is None or not model.moe or int(etp) == int(row["tp"]) else int(etp)
    if etp is not None and etp != 1:
        raise Refused(f"expert tensor parallelism {etp} with tp {row['tp']} is not modelled (etp = tp or 1)")
    dispatcher, a2a_overlap, op_fuser, backend, sms = (_moe_notes(row, notes) if model.moe
                                                  else ("alltoall", False, False, "hybridep", 0))
    if source_group(row) in ("Megatron-Bridge", "NeMo"):
        _graph_notes(row, model.moe and ep > 1, notes)
    memory = None
    if source_group(row) == "NeMo":
        why = nemo_launcher_overlap(row)[2]
        if why:
            notes.append(why)
        memory, why = nemo_launcher_memory(row)
        if why:
            notes.append(why)
        release, key, pretrain = _nemo_launcher_key(row)
        fields = NEMO_LAUNCHER_MODEL.get(release, {}).get(key) if pretrain else None
        if fields and any(getattr(model, f) != v for f, v in fields.items()):
            model = model.with_(**fields)
            notes.append(f"the NeMo {release} launcher config's model: "
                         + ", ".join(f"{f} {v}" for f, v in fields.items()) + " (the file's, NeMo 1's defaults where it is silent)")
    precision, recipe = _precision(row, notes)
    rc, rc_modules = _recompute(row, notes)
    dp, tp, pp, cp = int(row["dp"]), int(row["tp"]), int(row["pp"]), int(row.get("cp") or 1)
    if str(row.get("software", "")).startswith("MaxText") and tp > 1 and dp == int(row["n_gpus"]) \
            and dp % (tp * pp * cp) == 0:
        # a MaxText row whose dp counts chips (its fsdp x tensor mesh: fsdp 32 x tensor 4 on 128)
        dp //= tp * pp * cp
        notes.append(f"data parallelism {dp}: the row's dp counts the chips of its fsdp x tensor mesh")
    vp = row.get("vp")
    vp = int(vp) if isinstance(vp, (int, float)) and vp and vp > 1 else 1
    zero = _zero(row)
    if source_group(row) == "torchtitan" and zero == 3 and pp > 1:
        # torchtitan's FSDP under pipeline stages (its default reshard policy, the rows' config)
        zero = fsdp_zero_stage("default", pp)
        notes.append("torchtitan FSDP under pipeline parallelism: no reshard after forward, and the pipeline "
                     "stage reshards and reduces once after the last microbatch (ZeRO 2)")
    zg = row.get("zero_group")
    zg = None if (zg is None or int(zg) == dp * cp or zero == 0) else int(zg)
    sw = row["software"]
    flash = not (sw.startswith("MaxText") and "attention=flash" not in sw)
    if cp > 1 and not flash:
        raise Refused("context parallelism without flash attention")
    split = None
    L = model.num_layers
    layout = _deepseek_layout(row, pp, vp)
    if layout is not None:
        split, mtp = layout
        if mtp:
            model = model.with_(mtp_layers=mtp)
        notes.append(f"Megatron-Bridge's {model.name} pipeline layout (embedding, {'MTP layer and ' if mtp else ''}"
                     f"loss in the split): layers per stage {list(split)}")
    elif model.compressed_attention is not None and source_group(row) == "Megatron-Bridge":
        # DeepSeek-V4's Megatron-Bridge recipes build the model from its HF config
        # (AutoBridge.from_hf_pretrained), and the bridge sets mtp_num_layers from
        # num_nextn_predict_layers: 1 for V4-Flash (deepseek_v4_bridge.py; maxtext's
        # deepseek4-284b.yml drops that 44th layer)
        model = model.with_(mtp_layers=DEEPSEEK_V4_MTP_LAYERS)
        notes.append(f"{DEEPSEEK_V4_MTP_LAYERS} multi-token prediction layer (the bridge's mtp_num_layers from "
                     "the HF config's num_nextn_predict_layers)")
    elif vp > 1 and L % (pp * vp) and (L + 2) % (pp * vp) == 0:
        # Megatron-Core's account_for_embedding/loss_in_pipeline_split (the Megatron-Bridge Llama
        # 3.1 405B recipes): the embedding and the loss count as layers of the first and last stage
        k = (L + 2) // pp
        split = (k - 1,) + (k,) * (pp - 2) + (k - 1,)
        notes.append("embedding and loss counted as pipeline layers")
    mbs = int(row["mbs"])
    ga, gbs = row.get("ga"), int(row["gbs"])
    if ga and gbs % (dp * int(ga)) == 0 and gbs // (dp * int(ga)) != mbs:
        # MX-tpu: MaxText's per_device_batch_size is per chip; with tensor parallelism a group of
        # tp chips runs tp x that many sequences as one microbatch (the row's ga is 1)
        mbs = gbs // (dp * int(ga))
        notes.append(f"microbatch {mbs} per data-parallel replica (gbs / (dp x ga)); the row's mbs is per chip")
    sp = bool(row.get("sp")) and tp > 1
    if sw.startswith("MaxText") and tp > 1:
        # MaxText shards the residual stream's hidden dim over the tensor axis (base.yml
        # logical_axis_rules: ['activation_embed', 'tensor']): 1/tp activation memory and an
        # all-gather / reduce-scatter around each matmul pair, as Megatron's sequence parallelism
        sp = True
        notes.append("MaxText tensor parallelism priced as TP with sequence parallelism (activation_embed on 'tensor')")
    plan = dict(tp=tp, pp=pp, microbatch=mbs, recompute=rc, virtual_stages=vp, sequence_parallel=sp, zero=zero,
                flash_attention=flash, context_parallel=cp, precision=precision, zero_group=zg, stage_layers=split,
                offload_layers=_offload(row, pp), expert_parallel=ep, expert_tensor_parallel=etp,
                scaling_recipe=recipe, fp8_attention=_fp8_attention(row, model, precision, recipe, notes))
    engine = preset(_engine(row))
    if op_fuser:
        engine = with_op_fuser(engine)
    loss = megatron_bridge_cross_entropy(row)
    if loss is not None:
        engine = with_cross_entropy_fusion(engine, loss[0])
        notes.append(cross_entropy_note(loss[0], f"as the cited Megatron-Bridge run sets it ({loss[1]})"))
    elif source_group(row) == "Megatron-Bridge":
        notes.append("the loss: the row cites no Megatron-Bridge commit cosearch has read, so Megatron-Core's native "
                     "fp32 passes are priced; Megatron-Bridge's performance scripts set Transformer Engine's "
                     "cross-entropy at every commit read (2025-12 on)")
    notes += eager_pass_notes(engine, model)
    return RunConfig(f"{source} {row.get('id', '')}".strip(), model=model, plan=plan, dp=dp, global_batch=gbs,
                     num_chips=int(row["n_gpus"]),
                     engine=with_moe_dispatch(_with_policy(engine, rc_modules),
                                              # (no backend named: the framework's own dispatcher)
                                              engine.moe_dispatcher if dispatcher == "alltoall" else dispatcher,
                                              a2a_overlap and ep > 1, sms, backend=backend),
                     chip=chip, cluster=cl,
                     measured_tok_s_per_chip=measured_tok_s_gpu(row, model), assumed=tuple(notes), memory=memory)


def _with_policy(engine: Engine, policy) -> Engine:
    """``engine`` with a row's selective policy: Megatron-Core modules (a tuple) or a MaxText
    custom policy (a ``"maxtext:..."`` string)."""
    if isinstance(policy, str):
        from dataclasses import replace
        return replace(engine, name=engine.name + "-custom-remat", selective_recompute=policy)
    return with_recompute_modules(engine, policy)


#: Megatron-Bridge's DeepSeek-V3 pipeline layouts (``set_deepseek_v3_pipeline_model_parallel_layout``,
#: src/megatron/bridge/recipes/deepseek/deepseek_v3.py; the 26.x performance recipes' explicit
#: ``"Et*4|(t*4|)*14tmL"`` for pp 2 x vp 8): decoder layers per model chunk, in chunk order, for
#: pp x vp chunks; the first chunk also holds the embedding, the last the MTP layers and the loss.
#: Kimi-K2 (DeepSeek-V3's architecture, 61 layers) the same chunks without MTP
#: (``_get_kimi_k2_pipeline_layout``, src/megatron/bridge/recipes/kimi/kimi_k2.py).
#: 32 chunks: the H100 perf recipe's explicit ``"Et|(tt|)*30mL"`` for pp 8 x vp 4
#: (src/megatron/bridge/perf_recipes/deepseek/h100/deepseek_v3.py, commit 6d9a87d6a): one layer
#: beside the embedding, 30 chunks of two, and a last chunk of the MTP layer and the loss alone.
DEEPSEEK_V3_LAYOUT = {4: (16, 16, 16, 13), 8: (8,) * 7 + (5,), 16: (4,) * 15 + (1,), 32: (1,) + (2,) * 30 + (0,)}

#: DeepSeek-V4-Flash's multi-token prediction layers (its HF config's ``num_nextn_predict_layers``,
#: which Megatron-Bridge's ``deepseek_v4_bridge.py`` turns into ``mtp_num_layers``).
DEEPSEEK_V4_MTP_LAYERS = 1


def _deepseek_layout(row: dict, pp: int, vp: int) -> tuple[tuple[int, ...], int] | None:
    """A DeepSeek-V3 or Kimi-K2 Megatron-Bridge row's layers per pipeline stage (chunk ``c`` on
    stage ``c mod pp``) and its MTP depth (DeepSeek-V3 1, or 0 for the rows named "w/o MTP";
    Kimi-K2 0); None for other rows."""
    name = str(row.get("model", ""))
    if not name.startswith(("DeepSeek-V3", "Kimi-K2")) or source_group(row) != "Megatron-Bridge" or pp < 2:
        return None
    chunks = DEEPSEEK_V3_LAYOUT.get(pp * vp)
    if chunks is None or sum(chunks) != int(row["layers"]):
        raise Refused(f"{name} over pp {pp} x vp {vp}: no Megatron-Bridge layout of its 61 layers is known")
    per = [0] * pp
    for c, n in enumerate(chunks):
        per[c % pp] += n
    mtp = 0 if name.startswith("Kimi-K2") or "w/o MTP" in str(row.get("id", "")).replace("_", " ") else 1
    return tuple(per), mtp


def release_of(row: dict) -> tuple[int, ...] | None:
    """The software release a row was measured with, as a sortable tuple (``"Megatron-Bridge /
    NeMo 26.04.01 container"`` -> (26, 4, 1)); None where the row names none."""
    m = re.search(r"NeMo (\d+(?:\.\d+)+)", str(row.get("software", ""))) or \
        re.match(r"[a-z]+-(\d+(?:\.\d+)+)/", str(row.get("id", "")))
    return tuple(int(x) for x in m.group(1).split(".")) if m else None


def release_label(row: dict) -> str:
    """The release as its containers spell it (``(26, 2, 1)`` -> ``"26.02.01"``), ``"none"``
    where the row names none."""
    rel = release_of(row)
    return ".".join([str(rel[0])] + [f"{x:02d}" for x in rel[1:]]) if rel else "none"


def plan_key(row: dict) -> str:
    """What stays the same when one plan is re-measured in another release: the row's id
    without its release prefix (``mbridge-26.08/DeepSeekV3/GB300/...`` -> ``DeepSeekV3/GB300/...``)."""
    rid = str(row.get("id", ""))
    return rid.split("/", 1)[1] if release_of(row) is not None and "/" in rid else rid


def newest_per_plan(rows: list[dict]) -> list[dict]:
    """One row per plan: the newest release's measurement (rows without a release are kept
    as they are).  A software-agnostic model is compared with the newest software, never with an
    average over releases whose throughput moves by up to 46 % for one plan (MOE_RUNS.md)."""
    best: dict[str, dict] = {}
    for r in rows:
        k = plan_key(r)
        if k not in best or (release_of(r) or ()) > (release_of(best[k]) or ()):
            best[k] = r
    return list(best.values())


def describe_row(row: dict) -> RunDescription:
    """The row resolved on its own chips (see :func:`read_row`)."""
    return read_row(row).resolve()
