"""``cosearch.runs.rows`` reads published runs as plans: hand-made rows in the validation set's
format, each checked against what the framework's own code says the run did."""

import pytest

from cosearch import hardware
from cosearch.runs import rows


def _row(**kw):
    row = dict(id="x", model="m", arch="llama2-style: SwiGLU, RoPE, RMSNorm, MHA, untied output", layers=4,
               hidden=1024, heads=8, kv_heads=8, ffn=2816, vocab=32000, seq=2048, head_dim=None, ep=1, cp=1,
               vp=None, zero=0, zero_group=None, sp=False, offload=None, recompute="none", precision="BF16",
               accel="H100-SXM-80GB", n_gpus=8, dp=8, tp=1, pp=1, mbs=1, gbs=8, ga=1, tok_s_gpu=1000.0,
               software="NeMo 26.04 container (Megatron-Bridge + Megatron-Core)")
    row.update(kw)
    return row


def test_maxtext_tensor_parallel_microbatch_is_the_groups():
    """MaxText's per_device_batch_size is per chip: 256 v5e chips at tp 16 and fsdp 16 with 1
    sequence a chip run 16 sequences per data-parallel replica in one microbatch (ga 1), and their
    activations are sharded over the tensor axis as sequence parallelism shards them."""
    row = _row(software="MaxText (JAX/XLA) 2023-12", accel="TPU-v5e chip", n_gpus=256, dp=16, tp=16, mbs=1,
               gbs=256, ga=1, zero=3, recompute="remat_policy=full (full layer)", tok_s_gpu=None,
               tflops_gpu=110.0, mfu_pct=56.06, mfu_peak=197, flop_conv="F-mx")
    d = rows.describe_row(row)
    assert (d.spec.microbatch, d.spec.sequence_parallel, d.spec.tp, d.spec.dp) == (16, True, 16, 16)
    assert d.global_batch // (d.spec.dp * d.spec.microbatch) == 1      # one microbatch a step, as the row's ga says
    # a row whose fields already agree keeps its microbatch; data parallelism alone: no SP
    d = rows.describe_row(_row(dp=4, n_gpus=4, mbs=2, gbs=32, ga=4))
    assert (d.spec.microbatch, d.spec.sequence_parallel) == (2, False)


def test_self_contradicting_row_is_refused():
    """A row whose TFLOP/s and MFU disagree by more than 3 % is refused by name, not checked
    against either figure; one that agrees is converted."""
    bad = _row(software="MaxText (JAX/XLA) 2024-04", accel="TPU-v5p chip", n_gpus=64, dp=64, tok_s_gpu=None,
               tflops_gpu=249.0, mfu_pct=64.05, mfu_peak=459, flop_conv="F-mx", gbs=64)
    with pytest.raises(rows.Refused, match="contradicts itself"):
        rows.describe_row(bad)
    good = dict(bad, tflops_gpu=294.0)
    assert rows.describe_row(good).measured_tok_s_per_chip > 0


@pytest.mark.parametrize("precision,fp8_params", [("FP8 (per-tensor current scaling)", True),
                                                  ("MXFP8 (1x32 blocks)", True), ("NVFP4", False)])
def test_megatron_bridge_fp8_recipes_keep_fp8_weights(precision, fp8_params):
    """Megatron-Bridge's performance precision configs set fp8_param_gather for FP8 current
    scaling and MXFP8, not for NVFP4 (scripts/performance/utils/precision.py)."""
    d = rows.describe_row(_row(precision=precision, accel="B200", tp=2, dp=4, sp=True, gbs=8))
    assert d.engine.fp8_param_gather == fp8_params


@pytest.mark.parametrize("accel,hbm_bytes", [
    ("H100-SXM-96GB-HBM2e-500W (Meta Grand Teton, RDMA 400Gb/s/GPU)", 96e9), ("H100-95GB-HBM2e lower-TDP SXM", 95e9)])
def test_grand_teton_h100_is_its_sources_part(accel, hbm_bytes):
    """torchtitan's H100 rows run on Grand Teton's HBM2e parts at 500 W, "96GB HBM2e with 2.4
    TB/sec peak memory bandwidth" (docs/performance.md): the H100-500W preset with the row's HBM
    size; every other H100 row is the SXM5 at 700 W with 3.35 TB/s."""
    row = _row(software="torchtitan 2024-12", accel=accel, zero=3, precision="BF16 + torch.compile")
    chip = rows.describe_row(row).chip
    assert (chip.name, chip.hbm_bandwidth_Bps, chip.hbm_bytes) == ("H100-500W", 2.4e12, hbm_bytes)
    assert chip.efficiency == hardware.H100_500W.efficiency
    other = rows.describe_row(_row()).chip
    assert (other.name, other.hbm_bandwidth_Bps) == ("H100", 3.35e12)


def test_published_recompute_mode_from_hfu_over_mfu():
    """A run that says only that it recomputed (PaLM: "yes") is read at the mode its published
    hardware / model FLOPs utilisations state.  By hand for PaLM's shapes (118 layers of 18432,
    48 heads of 384 and one KV head, SwiGLU FFN 73728, 2048 tokens, 256k tied vocabulary): N =
    118 (2 h^2 + 2 h 384 + 3 h f + 2 h) + V h + h = 567.6e9, 6 N + 12 L h s = 3.459e12 FLOPs a
    token; full recompute repeats each layer's forward, 2 (2 h^2 + 2 h 384 + 3 h f) + 4 h s a
    token, so (model + recomputed) / model = 1.331; selective repeats the attention core, 4 h s:
    1.005.  PaLM's 57.8 / 46.2 = 1.251 is nearer full; 1.05 is nearer selective."""
    from cosearch import models
    from cosearch.runs.published import recompute_from_hfu, recompute_ratios
    m = models.ModelConfig("palm", 118, 18432, 48, 73728, 256000, 2048, kv_heads=1, activation="swiglu",
                           norm="layernorm", position="rotary", bias=False, tie_embeddings=True, dropout=False)
    h, f, V, L, s = 18432, 73728, 256000, 118, 2048
    mm = 2 * h * h + 2 * h * 384 + 3 * h * f
    per_token = 6.0 * (L * (mm + 2 * h) + V * h + h) + 12.0 * L * h * s
    ratios = recompute_ratios(m)
    assert ratios["full"] == pytest.approx(1.0 + L * (2 * mm + 4 * h * s) / per_token, rel=1e-4)
    assert ratios["selective"] == pytest.approx(1.0 + L * 4 * h * s / per_token, rel=1e-4)
    assert (round(ratios["full"], 3), round(ratios["selective"], 3)) == (1.331, 1.005)
    assert recompute_from_hfu(m, {"hfu": 0.578, "mfu": 0.462}, None) == "full"
    assert recompute_from_hfu(m, {"hfu": 0.462 * 1.05, "mfu": 0.462}, None) == "selective"
    assert recompute_from_hfu(m, {"mfu": 0.462}, None) is None


def test_published_tpu_v4_runs_take_tpu_v5s_measured_matmul_rate():
    """PaLM's TPU v4 is priced on the TPUv4-XLA preset, at TPU v5's measured XLA matmul
    efficiency, while the TPUv4 preset, PHAZE's chip, stays an ideal roofline."""
    from cosearch import hardware
    from cosearch.runs.published import published_hardware
    chip, cl = published_hardware({"hardware": {"chip": "TPU v4", "chips": 6144}})
    assert chip is hardware.preset("tpuv4-xla")
    assert chip.efficiency.tensor == hardware.TPU5_TENSOR and chip.peak_flops == hardware.TPUv4.peak_flops
    assert hardware.TPUv4.efficiency.tensor == 1.0 and cl.num_chips == 6144


# ------------------------------------------------------------------ MoE rows (moe_runs.jsonl's schema)
QWEN3_ROW = {"id": "mbridge-26.08/Qwen3_30B_a3B/GB200/FP8_MX/8/gbs512", "model": "Qwen3-30B-A3B",
             "arch": "MoE, GQA, qk-norm", "layers": 48, "hidden": 2048, "heads": 32, "kv_heads": 4, "ffn": None,
             "moe_ffn": 768, "num_experts": 128, "experts_per_token": 8, "shared_experts": 0, "moe_layers": "all",
             "vocab": 151936, "seq": 4096, "accel": "GB200 (NVL72)", "n_gpus": 8, "gbs": 512, "mbs": 4, "ga": 16,
             "tp": 1, "pp": 1, "vp": None, "cp": 1, "ep": 8, "etp": None, "dp": 8, "sp": False,
             "zero": "1 (distributed optimizer)", "recompute": "none (perf recipe sets recompute_granularity=None)",
             "precision": "MXFP8 (1x32 blocks)", "tok_s_gpu": 39936,
             "software": "Megatron-Bridge / NeMo 26.08 container",
             "notes": "cuda_graph=full_iteration scope=[]; moe dispatcher backend=hybridep; token-dropless with forced "
                      "expert load balancing (page footnote)"}


def test_moe_row_reads_as_the_published_model_and_plan():
    """A Megatron-Bridge Qwen3-30B-A3B row: the model is Qwen's config.json (the preset, 30.5B
    total / 3.3B active), with its 128-wide heads; the plan keeps EP 8 inside dp 8, ZeRO-1 from
    the distributed optimizer; what cosearch prices differently is listed."""
    from cosearch import models
    d = rows.describe_row(QWEN3_ROW)
    ref = models.preset("qwen3-30b-a3b")
    assert (d.model.num_params(), d.model.num_params(active=True), d.model.flops_per_token()) == \
        (ref.num_params(), ref.num_params(active=True), ref.flops_per_token())
    s = d.spec
    assert (s.dp, s.expert_parallel, s.zero, s.microbatch, s.precision) == \
        (8, 8, 1, 4, "fp8")
    text = " ".join(d.assumed)
    assert "hybridep" in text and "CUDA graphs" in text and "head size 128" in text and "q/k RMSNorms" in text


@pytest.mark.parametrize("change,why", [
    ({"arch": "MoE, GQA (head_dim 64), sliding-window(128) in 3 of 4 layers"}, "sliding-window layout"),
    ({"tp": 4, "dp": 2, "etp": 2}, "expert tensor parallelism 2"),
    ({"recompute": "selective: mla_up_proj,everything (a note)"}, "not Megatron-Core recompute_modules"),
    ({"moe_layers": "layers 2, 3, 7 and 11 (irregular)"}, "layer layout"),
    ({"zero": "3 (FSDP 64) x EP 4"}, "ZeRO layout"),
])
def test_moe_rows_cosearch_cannot_price_are_refused_by_name(change, why):
    with pytest.raises(rows.Refused, match=why):
        rows.describe_row(dict(QWEN3_ROW, **change))


def test_moe_rows_read_windows_and_recompute_modules():
    """GPT-OSS's alternating 128-token windows (every other layer) and Megatron-Core's
    recompute_modules become the model's sliding layers and the engine's module policy."""
    row = dict(QWEN3_ROW, arch="MoE, GQA (head_dim 64), alternating sliding-window(128)/full attention, "
                               "attention sinks", recompute="selective: layernorm,moe_act (a note)")
    d = rows.describe_row(row)
    assert (d.model.sliding_window, d.model.sliding_layers) == (128, QWEN3_ROW["layers"] // 2)
    assert d.engine.selective_recompute == "modules:layernorm,moe_act" and d.spec.recompute == "selective"


def test_a_row_without_mbs_takes_it_from_the_global_batch():
    """MaxText rows give per_device_batch_size through gbs only: 3072 sequences over dp 256 with
    ga 1 are microbatches of 12."""
    d = rows.describe_row(dict(QWEN3_ROW, mbs=None, gbs=3072, dp=256, ga=1, n_gpus=256, ep=8))
    assert d.spec.microbatch == 12 and any("gbs / (dp x ga)" in a for a in d.assumed)


def test_newest_release_per_plan():
    """One plan measured in three releases is compared at its newest (26.08 > 26.04.01 > 26.04),
    whatever the file's order; a row without a release stays."""
    a = dict(QWEN3_ROW, id="mbridge-26.04.01/Q/x", software="Megatron-Bridge / NeMo 26.04.01 container", tok_s_gpu=1)
    b = dict(QWEN3_ROW, id="mbridge-26.08/Q/x", software="Megatron-Bridge / NeMo 26.08 container", tok_s_gpu=2)
    c = dict(QWEN3_ROW, id="mbridge-26.04/Q/x", software="Megatron-Bridge / NeMo 26.04 container", tok_s_gpu=3)
    other = dict(QWEN3_ROW, id="maxtext/other", software="MaxText", tok_s_gpu=4)
    assert rows.release_of(a) == (26, 4, 1) and rows.release_of(other) is None
    kept = rows.newest_per_plan([a, b, c, other])
    assert sorted(r["tok_s_gpu"] for r in kept) == [2, 4]
    assert rows.group_of(b) == "Megatron-Bridge GB200 mxfp8"



def test_release_labels_and_what_a_rows_cuda_graphs_capture():
    """The release as its containers spell it, and the CUDA graphs a row's notes give, as the
    fidelity bench groups MoE rows by them: Megatron's own whole-iteration graph, Transformer
    Engine's per-module graphs with their scopes, none where the notes give none, and MaxText's
    one XLA program; a graph implementation Megatron does not have is refused."""
    a = dict(QWEN3_ROW, id="mbridge-26.02.01/Q/x", software="Megatron-Bridge / NeMo 26.02.01 container")
    assert rows.release_label(a) == "26.02.01"
    assert rows.release_label(dict(a, software="NeMo 25.11 container")) == "25.11"
    assert rows.release_label(dict(a, id="maxtext/x", software="MaxText")) == "none"
    whole = dict(a, notes="cuda_graph=full_iteration scope=[]; moe dispatcher backend=hybridep")
    te = dict(a, notes="cuda_graph=transformer_engine scope=['attn', 'moe_router', 'moe_preprocess']; EP a2a")
    bare = dict(a, notes="token-dropless with forced expert load balancing")
    assert rows.graph_capture(whole) == ("full_iteration", ())
    assert rows.graph_capture(te) == ("transformer_engine", ("attn", "moe_router", "moe_preprocess"))
    assert rows.graph_capture(bare) == ("none", ())
    assert [rows.graph_capture_class(r) for r in (whole, te, bare)] == [
        "whole iteration", "per module: attn, moe_router, moe_preprocess", "none"]
    assert rows.graph_capture_class(dict(a, software="MaxText (JAX/XLA) 2025-07")) == "XLA (one compiled step)"
    with pytest.raises(rows.Refused, match="none of Megatron's"):
        rows.graph_capture(dict(a, notes="cuda_graph=cudnn scope=[]"))

DSV3_ROW = dict(QWEN3_ROW, id="mbridge-26.08/DeepSeekV3/GB200/FP8_MX/256/gbs4096", model="DeepSeek-V3-671B",
                arch="MoE, MLA attention (q_lora 1536, kv_lora 512), sigmoid router", layers=61, hidden=7168,
                heads=128, kv_heads=128, ffn=18432, moe_ffn=2048, num_experts=256, shared_experts=1,
                moe_layers="layers 4-61 (first 3 dense)", vocab=129280, n_gpus=256, gbs=4096, mbs=1, ga=64, tp=1,
                pp=4, vp=4, ep=64, dp=64, recompute="selective: mla_up_proj (a note)")


@pytest.mark.parametrize("pp,vp,dp,stages", [(4, 4, 64, (16, 16, 16, 13)), (2, 8, 128, (32, 29)),
                                             (8, 2, 32, (8,) * 7 + (5,)), (8, 4, 32, (7,) + (8,) * 6 + (6,)),
                                             (4, 1, 64, (16, 16, 16, 13)), (8, 1, 32, (8,) * 7 + (5,))])
def test_deepseek_v3_rows_use_megatron_bridges_pipeline_layout(pp, vp, dp, stages):
    """Megatron-Bridge's DeepSeek-V3 layouts: pp x vp = 16 chunks of 4 decoder layers but the last
    (1 layer, the MTP layer and the loss), chunk c on stage c mod pp (pp 2 x vp 8: 8 x 4 = 32 and
    7 x 4 + 1 = 29; pp 8 x vp 2: chunks s and s + 8, 4 + 4, the last 4 + 1); pp 4 alone 16, 16,
    16, 13; pp 8 alone 8 x 7 and 5; pp 8 x vp 4, the H100 recipe's "Et|(tt|)*30mL": chunk 0 one
    layer, chunks 1-30 two, chunk 31 none, so stage 0 1 + 2 + 2 + 2 = 7, stage 7 2 + 2 + 2 + 0 = 6,
    the others 8)."""
    d = rows.describe_row(dict(DSV3_ROW, pp=pp, vp=vp if vp > 1 else None, dp=dp, ga=4096 // dp, ep=min(64, dp)))
    assert d.spec.stage_layers == stages and sum(stages) == 61
    assert d.model.mtp_layers == 1 and d.engine.selective_recompute == "modules:mla_up_proj"
    no_mtp = rows.describe_row(dict(DSV3_ROW, id="mbridge-25.11/DeepSeekV3_(w/o_MTP)/GB200/BF16/256/gbs4096"))
    assert no_mtp.model.mtp_layers == 0
    with pytest.raises(rows.Refused, match="no Megatron-Bridge layout"):
        rows.describe_row(dict(DSV3_ROW, pp=2, vp=None, dp=128, ga=32))
    # Kimi-K2: the same chunks, no MTP layer (Megatron-Bridge's _get_kimi_k2_pipeline_layout)
    kimi = rows.describe_row(dict(DSV3_ROW, id="mbridge-26.06/Kimi_K2/GB300/FP8_MX/256/gbs4096", model="Kimi-K2-1T",
                                  num_experts=384, vocab=163840, heads=64, kv_heads=64,
                                  moe_layers="layers 2-61 (first 1 dense)"))
    assert kimi.spec.stage_layers == (16, 16, 16, 13) and kimi.model.mtp_layers == 0


def test_bridge_rows_whose_recipes_turn_overlaps_off():
    """A Megatron-Bridge row's notes "TP comm overlap off" / "grad reduce overlap off" (the DeepSeek-V3
    H100 recipe's CommOverlapConfig(tp_comm_overlap=False) and ddp.overlap_grad_reduce = False) turn
    the engine's overlaps off; without them tp > 1 overlaps, as the performance scripts set it."""
    base = dict(QWEN3_ROW, n_gpus=32, dp=16, tp=2, ep=32, etp=1, sp=True, gbs=512, ga=32, mbs=1)
    on = rows.describe_row(base).engine
    assert on.overlap_tp_comm and on.overlap_grad_reduce
    off = rows.describe_row(dict(base, notes=base["notes"] + "; TP comm overlap off; grad reduce overlap off")).engine
    assert not off.overlap_tp_comm and not off.overlap_grad_reduce
    only_grad = rows.describe_row(dict(base, notes="grad reduce overlap off")).engine
    assert only_grad.overlap_tp_comm and not only_grad.overlap_grad_reduce


def test_rows_with_expert_tensor_parallelism_one():
    """Qwen3-235B on H100: tp 2, etp 1, ep 32 over dp 16 (the expert group spans the tp ranks)."""
    d = rows.describe_row(dict(QWEN3_ROW, n_gpus=32, dp=16, tp=2, ep=32, etp=1, sp=True, gbs=512, ga=32, mbs=1))
    assert d.spec.expert_tensor_parallel == 1 and d.spec.expert_parallel == 32
    with pytest.raises(rows.Refused, match="expert tensor parallelism 2 with tp 4"):
        rows.describe_row(dict(QWEN3_ROW, n_gpus=32, dp=8, tp=4, ep=8, etp=2, sp=True, gbs=512, ga=64, mbs=1))


@pytest.mark.parametrize("change, why", [
    # found by fuzzing describe_row with edited validation rows: each raised a TypeError,
    # AttributeError, KeyError, IndexError or ZeroDivisionError from inside the reader
    ({"tp": [1]}, "tp must be a whole number of at least 1"),
    ({"pp": 0}, "pp must be a whole number of at least 1"),
    ({"dp": 2.5}, "dp must be a whole number"),
    ({"recompute": 7}, "recompute must be a text"),
    ({"precision": ["BF16"]}, "precision must be a text"),
    ({"tok_s_gpu": float("nan")}, "tok_s_gpu must be a finite number"),
    ({"sp": "yes"}, "sp must be true or false"),
    ({"zero": 1.5}, "zero must be a stage or a text"),
    ({"assumed": "all of it"}, "assumed must be a list of texts"),
])
def test_rows_of_the_wrong_kind_are_refused_naming_the_field(change, why):
    with pytest.raises(rows.Refused, match=why):
        rows.describe_row(_row(**change))


def test_moe_rows_without_their_expert_width_are_refused_and_any_software_has_a_group():
    bad = {k: v for k, v in QWEN3_ROW.items() if k != "moe_ffn"}
    with pytest.raises(rows.Refused, match="missing fields moe_ffn"):
        rows.describe_row(bad)
    assert rows.source_group(_row(software="")) == "?"          # an empty software text: IndexError before


# ------------------------------------------------------------------ EP overlap from the cited config
def _cite(config, commit, path="src/megatron/bridge/perf_recipes/qwen/gb200/qwen3_moe.py"):
    return [f"etp/sp/recompute/cuda-graph/dispatcher from NVIDIA-NeMo/Megatron-Bridge:{path}@{commit} ({config})"]


@pytest.mark.parametrize("assumed,notes,want", [
    # the 26.08 perf recipe's helper (_enable_hybridep_full_iteration_mxfp8, qwen/common.py:58) turns
    # the overlap on; the row's notes do not say so: the config wins
    (_cite("qwen3_30b_a3b_pretrain_8gpu_gb200_fp8mx_config", "4ab94dfad"), "", True),
    # DeepSeek-V4-Flash's recipe sets it False (perf_recipes/deepseek/gb200/deepseek_v4.py:104): off,
    # whatever the notes say
    (_cite("deepseek_v4_flash_pretrain_128gpu_gb200_fp8mx_config", "4ab94dfad",
           "src/megatron/bridge/perf_recipes/deepseek/gb200/deepseek_v4.py"), "EP a2a overlap on", False),
    # a workload base config with moe_a2a_overlap=True at 26.06 (8f341b04f)
    (_cite("QWEN3_30B_A3B_PRETRAIN_CONFIG_GB200_FP8_MX_V1", "8f341b04f",
           "scripts/performance/configs/qwen/qwen3_workload_base_configs.py"), "", True),
    # no config cited, or one the table does not hold: the notes decide
    ([], "EP a2a overlap on", True),
    ([], "", False),
    (_cite("some_other_config", "4ab94dfad"), "EP a2a overlap on", True),
])
def test_ep_overlap_is_read_from_the_cited_config(assumed, notes, want):
    row = dict(QWEN3_ROW, assumed=assumed, notes="moe dispatcher backend=hybridep; " + notes)
    d = rows.describe_row(row)
    assert d.engine.overlap_moe_a2a is want
    said = "a2a overlap on" in notes
    disagreement = [n for n in d.assumed if n.startswith("EP all-to-all overlap") and "cited config" in n]
    assert bool(disagreement) == (bool(assumed) and "some_other" not in assumed[0] and want != said)


@pytest.mark.parametrize("assumed,notes,want", [
    # 26.06.01 DeepSeek-V3 on GB200: the base recipe sets HybridEP (recipes/deepseek/h100/deepseek_v3.py:145
    # at 381d0b825); the row's notes name no backend
    (_cite("deepseek_v3_pretrain_256gpu_gb200_fp8mx_config", "381d0b825",
           "src/megatron/bridge/perf_recipes/deepseek/gb200/deepseek_v3.py"), "", "flex"),
    # GPT-OSS on H100 at 26.04.01: no backend in its workload config, whatever the notes say
    (_cite("GPT_OSS_120B_PRETRAIN_CONFIG_H100_BF16_V2", "21d102f5e",
           "scripts/performance/configs/gpt_oss/gpt_oss_workload_base_configs.py"), "moe dispatcher backend=deepep",
     "alltoall"),
    ([], "moe dispatcher backend=deepep", "flex"),
    ([], "", "alltoall"),
])
def test_dispatcher_is_read_from_the_cited_config(assumed, notes, want):
    d = rows.describe_row(dict(QWEN3_ROW, assumed=assumed, notes=notes))
    assert d.engine.moe_dispatcher == want
    named = [n for n in d.assumed if n.startswith("MoE dispatcher") and "cited config" in n]
    assert bool(named) == bool(assumed)


# A recipe module, a shared helper module and a workload base config, written by hand to check the
# config reader of scripts/megatron_bridge_moe_dispatch.py: what each config ends up with, by hand.
_RECIPE = """
from megatron.bridge.perf_recipes.fam.common import _full_iteration, CommOverlapConfig, apply_backend, apply_flex_dispatcher_backend

def _base(cfg):
    cfg.comm_overlap = CommOverlapConfig(tp_comm_overlap=True)

def on_by_helper():
    cfg = make()
    _base(cfg)
    _full_iteration(cfg)
    apply_backend(cfg.model, cfg.model.moe_flex_dispatcher_backend)
    return cfg

def reset_after_helper():
    cfg = make()
    _full_iteration(cfg)
    cfg.comm_overlap = CommOverlapConfig(tp_comm_overlap=True)
    cfg.model.moe_token_dispatcher_type = "alltoall"
    return cfg

def off_by_attribute():
    cfg = make()
    _full_iteration(cfg)
    cfg.comm_overlap.overlap_moe_expert_parallel_comm = False
    cfg.model.moe_flex_dispatcher_backend = "deepep"
    cfg.model.use_transformer_engine_op_fuser = True
    return cfg

def never_set():
    return make()

def chained():
    cfg = on_by_helper()
    return cfg

def kept_on_its_gpus():
    cfg = make()
    cfg.model.moe_token_dispatcher_type = "alltoall"
    cfg.model.moe_flex_dispatcher_backend = "hybridep"
    apply_flex_dispatcher_backend(cfg.model, cfg.model.moe_flex_dispatcher_backend)
    return cfg

def sms_by_backend_knob():
    cfg = on_by_helper()
    cfg.model.moe_hybridep_num_sms = 32
    cfg.model.moe_deepep_num_sms = 20
    return cfg

def sms_by_unified_knob():
    cfg = sms_by_backend_knob()
    cfg.model.moe_flex_dispatcher_num_sms = 16
    return cfg

def sms_unified_knob_cleared():
    cfg = sms_by_unified_knob()
    cfg.model.moe_flex_dispatcher_num_sms = None
    return cfg
"""
_COMMON = """
from megatron.bridge.training.comm_overlap import CommOverlapConfig

def _full_iteration(cfg):
    cfg.model.moe_flex_dispatcher_backend = "hybridep"
    cfg.comm_overlap = CommOverlapConfig(
        tp_comm_overlap=True,
        overlap_moe_expert_parallel_comm=True,
    )

def apply_backend(model, backend):
    model.moe_flex_dispatcher_backend = backend

def apply_flex_dispatcher_backend(model, backend):
    if unsupported_gpu():
        model.moe_token_dispatcher_type = "alltoall"
        model.moe_flex_dispatcher_backend = None
        return
    model.moe_token_dispatcher_type = "flex"
"""
_WORKLOAD = """
BASE = WorkloadBaseConfig(num_gpus=8, moe_a2a_overlap=True, moe_flex_dispatcher_backend="deepep")
PLAIN = WorkloadBaseConfig(num_gpus=8)
DERIVED = replace(BASE, num_gpus=16)
TURNED_OFF = replace(BASE, moe_a2a_overlap=False)
ALIAS = DERIVED
FUSED = replace(DERIVED, cutedsl_fused_grouped_mlp=True)
"""


def _script():
    import importlib.util
    from pathlib import Path
    path = Path(__file__).resolve().parents[1] / "scripts" / "megatron_bridge_moe_dispatch.py"
    spec = importlib.util.spec_from_file_location("megatron_bridge_moe_dispatch", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


FILES = {"src/megatron/bridge/perf_recipes/fam/chip/recipe.py": _RECIPE,
         "src/megatron/bridge/perf_recipes/fam/common.py": _COMMON,
         "scripts/performance/configs/fam/fam_workload_base_configs.py": _WORKLOAD}


@pytest.mark.parametrize("name,overlap,overlap_at,backend,backend_at", [
    ("on_by_helper", True, "fam/common.py:8", "hybridep", "fam/common.py:5"),
    ("reset_after_helper", False, "recipe.py:17", None, "recipe.py:18"),
    ("off_by_attribute", False, "recipe.py:24", "deepep", "recipe.py:25"),
    ("never_set", False, None, None, None),
    ("chained", True, "fam/common.py:8", "hybridep", "fam/common.py:5"),
    # Megatron-Bridge's apply_flex_dispatcher_backend falls back to alltoall only on GPUs the
    # backend does not support: not walked, so the recipe's backend stands (the row's GPU decides)
    ("kept_on_its_gpus", False, None, "hybridep", "recipe.py:39"),
])
def test_recipe_reader_follows_helpers_in_order(name, overlap, overlap_at, backend, backend_at):
    got = _script().config_settings(lambda commit, p: FILES.get(p) if commit == "c0" else None,
                                    "src/megatron/bridge/perf_recipes/fam/chip/recipe.py", "c0", name)
    assert (got["overlap"], got["backend"]) == (overlap, backend)
    for at, want in ((got["overlap_at"], overlap_at), (got["backend_at"], backend_at)):
        assert ("never set" in at) if want is None else (f"{want} " in f"{at} "), at
    assert "sms" not in got                                    # none of these sets the dispatcher's SMs


@pytest.mark.parametrize("name,sms,at", [
    # the backend's own knob (HybridEP's 32; DeepEP's 20 is another backend's)
    ("sms_by_backend_knob", 32, "recipe.py:45 (moe_hybridep_num_sms)"),
    # Megatron-Core's unified knob first
    ("sms_by_unified_knob", 16, "recipe.py:51 (moe_flex_dispatcher_num_sms)"),
    # a None there leaves the backend's knob
    ("sms_unified_knob_cleared", 32, "recipe.py:45 (moe_hybridep_num_sms)"),
])
def test_recipe_reader_reads_the_flex_dispatchers_sms(name, sms, at):
    got = _script().config_settings(lambda commit, p: FILES.get(p) if commit == "c0" else None,
                                    "src/megatron/bridge/perf_recipes/fam/chip/recipe.py", "c0", name)
    assert got["backend"] == "hybridep" and got["sms"] == sms and got["sms_at"].endswith(at)


def test_workload_configs_take_the_overrides_hybridep_sms():
    """A workload base config's HybridEP run gets the SMs ``_set_common_perf_overrides`` sets
    (``scripts/performance/utils/overrides.py``); a DeepEP one does not, nor one where the
    overrides set none."""
    overrides = ('def _set_common_perf_overrides(recipe):\n'
                 '    if recipe.model.moe_flex_dispatcher_backend == "hybridep":\n'
                 '        recipe.model.moe_hybridep_num_sms = 32\n')
    path = "scripts/performance/configs/fam/fam_workload_base_configs.py"
    files = dict(FILES, **{"scripts/performance/utils/overrides.py": overrides,
                           path: FILES[path] + 'HYBRID = replace(BASE, moe_flex_dispatcher_backend="hybridep")\n'})
    s = _script()
    hy = s.config_settings(lambda commit, p: files.get(p), path, "c0", "HYBRID")
    assert (hy["backend"], hy["sms"]) == ("hybridep", 32) and hy["sms_at"].startswith("scripts/performance/utils/overrides.py:3")
    assert "sms" not in s.config_settings(lambda commit, p: files.get(p), path, "c0", "BASE")      # DeepEP
    assert "sms" not in s.config_settings(lambda commit, p: FILES.get(p), path, "c0", "DERIVED")


# FP8 attention's switch, by hand: the mixed-precision config's value is the one that runs
_FP8_RECIPE = """
from megatron.bridge.perf_recipes.fam.common import _mxfp8

def direct():
    cfg = make()
    cfg.mixed_precision = bf16_with_mxfp8_mixed()
    cfg.mixed_precision.fp8_dot_product_attention = True
    return cfg

def model_only():
    cfg = make()
    cfg.model.fp8_dot_product_attention = True
    return cfg

def reset_by_a_new_config():
    cfg = direct()
    cfg.mixed_precision = bf16_with_mxfp8_mixed()
    return cfg

def by_parameter():
    cfg = make()
    _mxfp8(cfg, fp8_dot_product_attention=True)
    return cfg

def by_default():
    cfg = make()
    _mxfp8(cfg)
    return cfg
"""
_FP8_COMMON = """
def _mxfp8(cfg, *, fp8_dot_product_attention: bool = False):
    cfg.model.moe_flex_dispatcher_backend = "hybridep"
    cfg.mixed_precision.fp8_dot_product_attention = fp8_dot_product_attention
"""


@pytest.mark.parametrize("name,on,at", [
    ("direct", True, "recipe.py:7"),
    ("model_only", False, None),                   # overwritten by the mixed-precision config's default
    ("reset_by_a_new_config", False, "recipe.py:17 (a new mixed-precision config"),
    ("by_parameter", True, "fam/common.py:4 (fp8_dot_product_attention from src/megatron/bridge/perf_recipes/fam/"
                           "chip/recipe.py:22)"),
    ("by_default", False, "fam/common.py:4 (fp8_dot_product_attention from src/megatron/bridge/perf_recipes/fam/"
                          "common.py:2 (its default))"),
])
def test_recipe_reader_reads_fp8_attention_as_the_mixed_precision_config_sets_it(name, on, at):
    files = {"src/megatron/bridge/perf_recipes/fam/chip/recipe.py": _FP8_RECIPE,
             "src/megatron/bridge/perf_recipes/fam/common.py": _FP8_COMMON}
    got = _script().config_settings(lambda commit, p: files.get(p), "src/megatron/bridge/perf_recipes/fam/chip/recipe.py",
                                    "c0", name)
    assert got["fp8_dpa"] is on
    assert ("never set" in got["fp8_dpa_at"]) if at is None else at in got["fp8_dpa_at"], got["fp8_dpa_at"]


def test_workload_fp8_attention_needs_the_overrides_to_apply_it():
    """A workload base config's ``fp8_dot_product_attention`` runs only where the commit's
    overrides write it into the mixed-precision config."""
    path = "scripts/performance/configs/fam/fam_workload_base_configs.py"
    overrides = ('def set_workload_base_configs(cfg, settings):\n'
                 '    if settings.fp8_dot_product_attention is not None:\n'
                 '        cfg.mixed_precision.fp8_dot_product_attention = settings.fp8_dot_product_attention\n')
    files = dict(FILES, **{path: FILES[path] + "FP8_DPA = replace(DERIVED, fp8_dot_product_attention=True)\n"})
    s = _script()
    got = s.config_settings(lambda commit, p: dict(files, **{"scripts/performance/utils/overrides.py": overrides}).get(p),
                            path, "c0", "FP8_DPA")
    assert got["fp8_dpa"] and got["fp8_dpa_at"].endswith("applied at scripts/performance/utils/overrides.py:3")
    got = s.config_settings(lambda commit, p: files.get(p), path, "c0", "FP8_DPA")
    assert not got["fp8_dpa"] and "never applies" in got["fp8_dpa_at"]
    assert not s.config_settings(lambda commit, p: files.get(p), path, "c0", "DERIVED")["fp8_dpa"]


@pytest.mark.parametrize("name,overlap,backend", [("BASE", True, "deepep"), ("PLAIN", False, None),
                                                  ("DERIVED", True, "deepep"), ("TURNED_OFF", False, "deepep"),
                                                  ("ALIAS", True, "deepep")])
def test_workload_reader_follows_replace_and_defaults(name, overlap, backend):
    s = _script()
    path = "scripts/performance/configs/fam/fam_workload_base_configs.py"
    got = s.config_settings(lambda commit, p: FILES.get(p), path, "c0", name)
    assert (got["overlap"], got["backend"]) == (overlap, backend)
    assert ("default" in got["overlap_at"]) == (name == "PLAIN")
    with pytest.raises(KeyError):
        s.config_settings(lambda commit, p: FILES.get(p), path, "c0", "MISSING")


def test_dispatch_script_writes_the_table_from_a_clone(tmp_path):
    """``scripts/megatron_bridge_moe_dispatch.py`` end to end: a git clone holding the hand-written
    configs at one commit, rows citing two of them (and one citing nothing), the table written."""
    import json
    import shutil
    import subprocess
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    repo = tmp_path / "mb"
    for path, text in FILES.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text)
    import os
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@t", GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_NOSYSTEM="1")
    for cmd in (["init", "-q"], ["add", "."], ["commit", "-qm", "configs"]):
        subprocess.run(["git", "-C", str(repo), *cmd], check=True, env=env, capture_output=True)
    commit = subprocess.run(["git", "-C", str(repo), "rev-parse", "--short=9", "HEAD"], check=True,
                            capture_output=True, text=True).stdout.strip()
    rows_file = tmp_path / "rows.jsonl"
    cited = [_cite("off_by_attribute", commit, "src/megatron/bridge/perf_recipes/fam/chip/recipe.py"),
             _cite("DERIVED", commit, "scripts/performance/configs/fam/fam_workload_base_configs.py"), []]
    rows_file.write_text("".join(json.dumps({"id": f"r{i}", "assumed": a}) + "\n" for i, a in enumerate(cited)))
    out = tmp_path / "table.json"
    assert _script().main(["--repo", str(repo), "--rows", str(rows_file), "--out", str(out)]) == 0
    table = json.loads(out.read_text())["configs"]
    assert set(table) == {f"off_by_attribute@{commit}", f"DERIVED@{commit}"}
    assert (table[f"off_by_attribute@{commit}"]["overlap"], table[f"off_by_attribute@{commit}"]["backend"]) == \
        (False, "deepep")
    assert (table[f"DERIVED@{commit}"]["overlap"], table[f"DERIVED@{commit}"]["backend"]) == (True, "deepep")


def test_row_cuda_graphs_said_as_the_readers_say_them():
    """A Megatron-Core row's CUDA graphs (its notes' ``cuda_graph=<impl> scope=[...]``) are said
    with the config readers' own sentence (cosearch prices no host time), none where they give
    none; an implementation Megatron does not have is refused by name."""
    from cosearch.runs.megatron import cuda_graph_note
    whole = rows.describe_row(QWEN3_ROW)
    assert cuda_graph_note("full_iteration", (), True) in whole.assumed
    te = dict(QWEN3_ROW, notes="cuda_graph=transformer_engine scope=['attn', 'moe_router']; moe dispatcher "
                               "backend=hybridep")
    said = rows.describe_row(te).assumed
    assert cuda_graph_note("transformer_engine", ("attn", "moe_router"), True) in said
    assert any("capture attn, moe_router only" in a for a in said)
    none = rows.describe_row(dict(QWEN3_ROW, notes="moe dispatcher backend=hybridep"))
    assert any(a.startswith("no CUDA graphs") for a in none.assumed)
    with pytest.raises(rows.Refused, match="CUDA graphs 'cudnn'"):
        rows.describe_row(dict(QWEN3_ROW, notes="cuda_graph=cudnn scope=[]"))


def test_nemo_row_takes_its_launcher_configs_optimizer_state():
    """NeMo 24.07's Nemotron-340B row (the published table's, 128 H100, tp 8, pp 8, vp 12, dp 2,
    FP8): its launcher config keeps Apex DistributedFusedAdam's state in bf16 (``optim.dtype``),
    6 bytes a parameter, so a chip of the middle stages holds 12 layers of 3.45e9 / 8 parameters
    (their LayerNorms whole) x 3 bytes (12 / 2 -> 6 / 2) less than the fp32 default, by hand; the
    row then fits the 80 GB HBM the run ran in."""
    from cosearch.memory import MemoryConfig
    from cosearch.plan import evaluate
    row = _row(id="nemo-24.07/Nemotron-340B/pretrain/128", model="Nemotron-4-340B", arch="dense GQA squared-ReLU",
               layers=96, hidden=18432, heads=96, kv_heads=8, ffn=73728, vocab=256000, seq=4096,
               accel="H100-SXM-80GB (DGX-H100)", n_gpus=128, gbs=32, mbs=1, ga=16, tp=8, pp=8, vp=12, dp=2,
               zero_group=2, sp=True, zero=1, recompute="selective (core attention)",
               precision="FP8 (TE hybrid, delayed scaling)", tok_s_gpu=326.0, software="NeMo 24.07 container")
    d = rows.describe_row(row)
    assert d.memory == MemoryConfig(optimizer_bytes=6.0) and any("optim.dtype" in a for a in d.assumed)
    # Nemotron-4 as its launcher config builds it: squared ReLU (priced as ReLU), no bias terms, RoPE, untied
    m = d.model
    assert (m.activation, m.bias, m.position, m.tie_embeddings) == ("relu", False, "rotary", False)
    fit = evaluate(d.model, d.chip, d.cluster, d.spec, d.global_batch, engine=d.engine, mem=d.memory)
    full = evaluate(d.model, d.chip, d.cluster, d.spec, d.global_batch, engine=d.engine)
    assert fit.feasible and not full.feasible
    norms = 4 * 18432            # two LayerNorms' weights and biases, replicated over the tp ranks
    per_chip = 12 * ((d.model.layer_params() - norms) / 8 + norms)
    assert full.memory_per_chip_bytes[3] - fit.memory_per_chip_bytes[3] == pytest.approx(3.0 * per_chip, rel=1e-9)
    # another model of the same release keeps the default
    assert rows.describe_row(_row(id="nemo-24.07/LLAMA2-7B/pretrain/8", software="NeMo 24.07 container")).memory is None


def test_nemo_gpt3_rows_build_the_model_their_launcher_config_builds():
    """NeMo 24.07's GPT-3 5B row (its published table's) against the launcher's own ``gpt3/5b.yaml``
    read by the NeMo 1 reader (``tests/data/runs/nemo1_gpt3_5b.yaml``): the row's architecture text
    says GeLU and learned positions only, and the file sets dropout 0.1 (hidden and attention) and
    leaves the output layer tied (NeMo 1's default), so the row is read with the same dropout,
    positions, tying, bias, norm and activation as the file."""
    from pathlib import Path

    from cosearch.runs import read_nemo1
    row = _row(id="nemo-24.07/GPT3-5B/pretrain/64", model="GPT-3-5B(NeMo)", arch="dense MHA GeLU, learned pos-emb",
               layers=24, hidden=4096, heads=32, kv_heads=32, ffn=16384, vocab=50257, seq=2048,
               accel="H100-SXM-80GB (DGX-H100)", n_gpus=64, gbs=2048, mbs=4, ga=8, dp=64, zero_group=64, zero=1,
               precision="FP8 (TE hybrid, delayed scaling)", tok_s_gpu=23406.0, software="NeMo 24.07 container")
    m = rows.describe_row(row).model
    f = read_nemo1(Path(__file__).parent / "data" / "runs" / "nemo1_gpt3_5b.yaml").model
    fields = ("dropout", "position", "tie_embeddings", "bias", "norm", "activation", "hidden", "num_layers", "vocab")
    assert {k: getattr(m, k) for k in fields} == {k: getattr(f, k) for k in fields}
    assert (m.dropout, m.position, m.tie_embeddings) == (True, "learned", True)
    # a fine-tuning row keeps what its text says (its config is another file)
    sft = rows.describe_row(dict(row, id="nemo-24.07/GPT3-5B/SFT/64")).model
    assert (sft.dropout, sft.tie_embeddings) == (False, False)


@pytest.mark.parametrize("path,name,fuser,at", [
    ("src/megatron/bridge/perf_recipes/fam/chip/recipe.py", "off_by_attribute", True, "recipe.py:26"),
    ("src/megatron/bridge/perf_recipes/fam/chip/recipe.py", "on_by_helper", False, None),
    ("scripts/performance/configs/fam/fam_workload_base_configs.py", "FUSED", True, "fam_workload_base_configs.py:7"),
    ("scripts/performance/configs/fam/fam_workload_base_configs.py", "DERIVED", False, "default"),
])
def test_the_op_fuser_is_read_from_each_kind_of_config(path, name, fuser, at):
    """A perf recipe's last ``use_transformer_engine_op_fuser``; a workload base config's
    ``cutedsl_fused_grouped_mlp``, which 26.06's overrides turn into the op fuser."""
    got = _script().config_settings(lambda commit, p: FILES.get(p), path, "c0", name)
    assert got["op_fuser"] is fuser
    assert ("never set" in got["op_fuser_at"]) if at is None else (at in got["op_fuser_at"]), got["op_fuser_at"]


GPT_OSS_ROW = {"id": "mbridge-26.06/GPT_OSS_120B/GB200/FP8_MX/64/gbs1280", "model": "GPT-OSS-120B",
               "arch": "MoE, GQA (head_dim 64), alternating sliding-window(128)/full attention, attention sinks",
               "layers": 36, "hidden": 2880, "heads": 64, "kv_heads": 8, "ffn": None, "moe_ffn": 2880,
               "num_experts": 128, "experts_per_token": 4, "shared_experts": 0, "moe_layers": "all",
               "vocab": 201088, "seq": 4096, "accel": "GB200 (NVL72)", "n_gpus": 64, "gbs": 1280, "mbs": 4,
               "ga": 5, "tp": 1, "pp": 1, "vp": None, "cp": 1, "ep": 64, "etp": 1, "dp": 64, "sp": False,
               "zero": "1 (distributed optimizer)", "recompute": "none", "precision": "MXFP8 (1x32 blocks)",
               "tok_s_gpu": 28947, "software": "Megatron-Bridge / NeMo 26.06 container",
               "notes": "cuda_graph=full_iteration scope=[]; moe dispatcher backend=hybridep; EP a2a overlap on"}


@pytest.mark.parametrize("config,fused", [("GPT_OSS_120B_PRETRAIN_CONFIG_GB200_FP8_MX_V2@8f341b04f", True),
                                          ("GPT_OSS_120B_PRETRAIN_CONFIG_GB200_BF16_V2@c0b9a0003", False)])
def test_gpt_oss_rows_price_the_experts_eager_passes_unless_their_config_fuses_them(config, fused):
    """The shipped table (cosearch/data/megatron_bridge_moe_dispatch.json) says which cited configs
    run the op fuser: 26.06's GB200 MXFP8 config sets cutedsl_fused_grouped_mlp, the BF16 one
    does not.  The MXFP8 config runs the attention in FP8 too, over GPT-OSS's sliding windows (its
    backward priced over every causal key, said)."""
    name, commit = config.split("@")
    path = "scripts/performance/configs/gpt_oss/gpt_oss_workload_base_configs.py"
    row = dict(GPT_OSS_ROW, assumed=[f"etp/sp/recompute/cuda-graph/dispatcher from NVIDIA-NeMo/Megatron-Bridge:"
                                     f"{path}@{commit} ({name})"])
    cited = rows.megatron_bridge_moe_dispatch(row)
    assert (cited["op_fuser"], cited["fp8_dpa"]) == (fused, fused)
    d = rows.describe_row(row)
    assert d.spec.fp8_attention == fused
    assert any("full causal attention on the sliding-window layers" in n for n in d.assumed) == fused
    assert (d.model.activation_clamp, d.model.bias) == (7.0, True)
    assert d.engine.expert_elementwise == ("fused" if fused else "eager")
    assert any("through Transformer Engine's op fuser" in n for n in d.assumed) == fused
    assert any("eager PyTorch passes" in n for n in d.assumed) != fused
    assert any("YaRN-scaled RoPE" in n and "unfused" in n for n in d.assumed)


def test_a_regression_the_source_marks_is_said():
    """Megatron-Bridge's 26.06.01 page marks GPT-OSS's throughput as a regression (its footnote):
    the row says so, and is priced as its kernels run without it; a row without the footnote does
    not say it."""
    marked = dict(GPT_OSS_ROW, notes=GPT_OSS_ROW["notes"] + "; page footnote: GPT-OSS regression, known cuDNN issue")
    said = [n for n in rows.describe_row(marked).assumed if "software regression" in n]
    assert said and "GPT-OSS regression, known cuDNN issue" in said[0]
    assert not [n for n in rows.describe_row(GPT_OSS_ROW).assumed if "software regression" in n]


def _cards():
    import json
    from pathlib import Path
    path = Path(__file__).resolve().parents[1] / "bench" / "validation" / "bridge_cards.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_bridge_card_rows_are_consistent_as_transcribed():
    """bench/validation/bridge_cards.jsonl (Megatron-Bridge's model verification cards): each row's
    tokens/s per GPU is its global batch's tokens over its step time and GPUs (the card gives both
    figures, so a transcription slip shows), its layout multiplies out to its GPUs and batch, and
    it cites its card and the recipe it ran."""
    cards = _cards()
    assert len(cards) == 16 and len({r["id"] for r in cards}) == 16
    for r in cards:
        assert r["gbs"] * r["seq"] / (r["step_s"] * r["n_gpus"]) == pytest.approx(r["tok_s_gpu"], rel=2e-3), r["id"]
        assert r["dp"] * r["tp"] * r["pp"] * r["cp"] == r["n_gpus"] and r["ga"] * r["mbs"] * r["dp"] == r["gbs"]
        assert "model_verification_cards" in r["src"] and "perf_recipes" in r["assumed"][1]


def test_bridge_card_rows_read_their_own_recipes():
    """Every card row is described and priced (GPT-OSS's MXFP8 run's recipe runs the attention in
    FP8 over sliding windows: its backward over every causal key, said); a row citing its recipe's dispatcher
    takes the EP overlap and backend the recipe's source sets (the shipped table), not its notes:
    Qwen3-30B-A3B on H100 overlaps with HybridEP, DeepSeek-V4-Flash does not overlap; GPT-OSS on
    GB200 cites none (DeepEP falls back to the all-to-all dispatcher there) and takes its notes:
    overlap on, all-to-all.  DeepSeek-V3 on H100: its recipe's pipeline layout, its TP overlap and
    overlapped gradient reduction off, expert tensor parallelism 1 under tp 2 beside its shared
    expert.  Qwen3-30B-A3B's GB300 MXFP8 recipe runs MXFP8 attention."""
    from cosearch.plan import evaluate
    described = {}
    for r in _cards():
        d = described[r["id"]] = rows.describe_row(r)
        assert evaluate(d.model, d.chip, d.cluster, d.spec, d.global_batch, engine=d.engine, mem=d.memory).feasible
        if "dispatcher from" in r["assumed"][1]:
            assert rows.megatron_bridge_moe_dispatch(r) is not None, r["id"]
    assert len(described) == 16
    oss8 = described["mbridge-card/GPT_OSS_120B/GB300/FP8_MX/64/gbs1280"]
    assert oss8.spec.attention_format == "mxfp8"
    assert any("full causal attention on the sliding-window layers" in a for a in oss8.assumed)
    qwen = described["mbridge-card/Qwen3_30B_a3B/GB300/FP8_MX/8/gbs512"]
    assert qwen.spec.attention_format == "mxfp8" and any("attention in MXFP8" in a for a in qwen.assumed)
    ds = described["mbridge-card/DeepSeekV3/H100/BF16/1024/gbs16384"]
    assert ds.spec.stage_layers == (7,) + (8,) * 6 + (6,) and ds.spec.expert_tensor_parallel == 1
    assert not ds.engine.overlap_tp_comm and not ds.engine.overlap_grad_reduce and ds.engine.moe_dispatcher == "flex"
    h100_run = described["mbridge-card/Qwen3_30B_a3B/H100/BF16/16/gbs1024"]
    h100 = h100_run.engine
    assert h100.overlap_moe_a2a and h100.moe_dispatcher == "flex" and h100.moe_flex_backend == "hybridep"
    # its recipe's HybridEP SMs (recipes/qwen/h100/qwen3_moe.py: moe_hybridep_num_sms = 32), where a row
    # citing none takes HybridEP's default (8 across nodes)
    assert h100.moe_comm_sms == 32 and any("on 32 SMs" in a for a in h100_run.assumed)
    v4 = described["mbridge-card/DeepSeekV4_Flash/GB300/FP8_MX/128/gbs2048"].engine
    assert not v4.overlap_moe_a2a and v4.moe_dispatcher == "flex"
    oss = described["mbridge-card/GPT_OSS_120B/GB200/BF16/64/gbs1280"].engine
    assert oss.overlap_moe_a2a and oss.moe_dispatcher == "alltoall" and oss.moe_comm_sms == 0
