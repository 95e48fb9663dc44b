"""Rows of cosearch's validation schema (``bench/validation/modern_runs.jsonl``, documented in
its README) as runs: one measured training run per row, with its model dimensions, chip, plan,
precision, framework and measured throughput.

Nothing here is fitted to the rows: each maps the published fields onto presets and PlanSpec
fields; the choices that the rows leave open are recorded among the run's ``assumed`` notes
with their reason.  A row cosearch cannot describe raises :class:`Refused` naming the missing
feature.
"""

from __future__ import annotations

from .. import cluster, hardware, models
from ..engine import Engine, llm_foundry, megatron_core, preset
from .config import RunConfig, RunDescription

__all__ = ["Refused", "read_row", "describe_row", "source_group", "measured_tok_s_gpu", "REQUIRED_FIELDS"]

#: Fields every row needs (the others are optional: ``head_dim``, ``cp``, ``ep``, ``vp``, ``zero``,
#: ``zero_group``, ``sp``, ``offload``, ``ga``, and one of ``tok_s_gpu`` / ``tflops_gpu``).
REQUIRED_FIELDS = ("model", "arch", "layers", "hidden", "heads", "kv_heads", "ffn", "vocab", "seq", "accel",
                   "n_gpus", "dp", "tp", "pp", "mbs", "gbs", "recompute", "precision", "software")


class Refused(ValueError):
    """A row cosearch cannot describe; the message names the missing feature."""


def source_group(row: dict) -> str:
    sw = row["software"]
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
    return sw.split()[0]


def _engine(row: dict) -> str | Engine:
    """The framework's engine.  Megatron-Bridge's performance recipes turn TP-communication
    overlap on wherever tp > 1 except with NVFP4 (scripts/performance/configs/llama/
    llama3_llm_pretrain.py: ``tp_comm_overlap = False if precision == "nvfp4" else`` the
    recipe's, which src/megatron/bridge/recipes/llama/llama3.py sets True for Llama 3/3.1 70B and
    405B; the 8B configs set ``tp_comm_overlap=bool(tp > 1)``), and their precision configs
    (scripts/performance/utils/precision.py) keep the weights in FP8 only for FP8 current scaling
    and MXFP8 (``fp8_param_gather = True``), not NVFP4."""
    g = source_group(row)
    if g == "Megatron-Bridge" and "NVFP4" not in row["precision"]:
        return megatron_core(tp_comm_overlap=int(row["tp"]) > 1, fp8_param_gather="FP8" in row["precision"])
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
    for prefix, chip in (("H100", hardware.H100), ("H200", hardware.H200), ("B200", hardware.B200),
                         ("GB200", hardware.GB200), ("GB300", hardware.GB300), ("TPU-v5e", hardware.TPUv5e),
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
    if name in ("GB200", "GB300"):
        return cluster.gb200_nvl72(n)
    base = {"A100": cluster.dgx_a100, "A100-80GB": cluster.dgx_a100, "H100": cluster.dgx_h100,
            "H100-500W": cluster.dgx_h100, "H200": cluster.dgx_h200, "B200": cluster.dgx_b200}[name]
    if n % 8 == 0:
        return base(n // 8)
    one = base(1)   # fewer GPUs than a node: one flat NVLink domain of n
    return cluster.Cluster(n, None, one.intra_node_Bps, None, link_latency_s=one.link_latency_s,
                           intra_efficiency=one.intra_efficiency, name=f"{one.name} ({n} GPUs)")


def _model(row: dict) -> models.ModelConfig:
    arch = row["arch"]
    gated = "SwiGLU" in arch or "llama" in arch.lower()
    act = "swiglu" if gated else ("relu" if "ReLU" in arch else "gelu")   # squared-ReLU priced as ReLU
    learned = "learned pos-emb" in arch
    head = int(row["head_dim"]) if row.get("head_dim") else None
    if head == row["hidden"] // row["heads"] and row["hidden"] % row["heads"] == 0:
        head = None
    if head is None and row["hidden"] % row["heads"]:
        raise Refused(f"heads={row['heads']} do not divide hidden={row['hidden']} and no head size is given")
    return models.ModelConfig(row["model"], row["layers"], row["hidden"], row["heads"], row["ffn"], row["vocab"],
                              row["seq"], kv_heads=row["kv_heads"], activation=act,
                              norm="rmsnorm" if (gated or "RMSNorm" in arch) else "layernorm",
                              position="learned" if learned else "rotary",
                              bias=not ("no-bias" in arch or gated or "MaxText" in row["model"]),
                              tie_embeddings=("tied" in arch and "untied" not in arch) or "MPT" in row["model"],
                              dropout=False, head_size=head)


def _recompute(row: dict, notes: list) -> str:
    r = row["recompute"]
    if r.startswith("none"):
        return "none"
    if r.startswith("full") or r.startswith("remat_policy=full"):
        return "full"
    if r.startswith("selective (core attention)"):
        return "selective"
    if r.startswith("selective") or r.startswith("remat_policy=minimal"):
        notes.append(f"recompute {r!r} priced as Megatron's selective (attention core)")
        return "selective"
    raise Refused(f"recompute {r!r} is not modelled")


def _precision(row: dict, notes: list) -> str:
    p = row["precision"]
    if "NVFP4" in p:
        notes.append("NVFP4 priced on every layer GEMM (the recipe keeps a few layers in bf16)")
        return "fp4"
    if "FP8" in p or "Float8" in p:
        if "MXFP8" in p:
            notes.append("MXFP8 priced as per-tensor FP8")
        return "fp8"
    return "bf16"


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


def read_row(row: dict, source: str = "validation row") -> RunConfig:
    """The row as a :class:`~cosearch.runs.RunConfig` with its chip, cluster and measured
    throughput; raises :class:`Refused` with the reason, or ``ValueError`` from cosearch's own
    validation."""
    missing = [f for f in REQUIRED_FIELDS if row.get(f) is None]
    if missing:
        raise Refused(f"{source}: missing fields {', '.join(missing)}")
    notes: list[str] = []
    if int(row.get("ep") or 1) > 1:
        raise Refused("expert parallelism is not modelled")
    chip = _chip(row, notes)
    cl = _cluster(row, chip)
    model = _model(row)
    precision = _precision(row, notes)
    rc = _recompute(row, notes)
    dp, tp, pp, cp = int(row["dp"]), int(row["tp"]), int(row["pp"]), int(row.get("cp") or 1)
    vp = row.get("vp")
    vp = int(vp) if isinstance(vp, (int, float)) and vp and vp > 1 else 1
    zero = int(row.get("zero") or 0)
    zg = row.get("zero_group")
    zg = None if (zg is None or int(zg) == dp * cp or zero == 0) else int(zg)
    sw = row["software"]
    flash = not (sw.startswith("MaxText") and "attention=flash" not in sw)
    if cp > 1 and not flash:
        raise Refused("context parallelism without flash attention")
    split = None
    L = model.num_layers
    if vp > 1 and L % (pp * vp) and (L + 2) % (pp * vp) == 0:
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
                offload_layers=_offload(row, pp))
    return RunConfig(f"{source} {row.get('id', '')}".strip(), model=model, plan=plan, dp=dp, global_batch=gbs,
                     num_chips=int(row["n_gpus"]), engine=preset(_engine(row)), chip=chip, cluster=cl,
                     measured_tok_s_per_chip=measured_tok_s_gpu(row, model), assumed=tuple(notes))


def describe_row(row: dict) -> RunDescription:
    """The row resolved on its own chips (see :func:`read_row`)."""
    return read_row(row).resolve()
