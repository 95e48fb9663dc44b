"""The readers on the MoE execution and host-side switches of today's Megatron-Core MoE recipes:
CUDA graphs, the flex dispatcher's SMs, sync-free MoE (expert-rank capacity factor, paged
stash), the Transformer Engine op fuser, FP8 attention and delayed weight gradients.  Each is
read: priced where cosearch prices it (the dispatcher's SMs, under the EP all-to-all overlap),
said in ``assumed`` where it does not, refused where Megatron-Core refuses it."""

from pathlib import Path

import pytest

from cosearch import cluster, engine, models
from cosearch.plan import evaluate
from cosearch.runs import read_config, read_megatron_args, read_megatron_bridge, read_nemo1
from cosearch.runs.megatron import (
    DEEPEP_DEFAULT_SMS,
    MEGATRON_HYBRIDEP_SMS_BEFORE_2026_07,
    _split,
    cuda_graphs,
)

DATA = Path(__file__).parent / "data" / "runs"
QWEN = models.preset("qwen3-30b-a3b")
# the plan of Megatron-Bridge's Qwen3-30B-A3B GB200 MXFP8 recipe, as a Megatron line
LINE = ("--expert-model-parallel-size 8 --micro-batch-size 4 --global-batch-size 512 --moe-token-dispatcher-type flex "
        "--moe-flex-dispatcher-backend hybridep --overlap-moe-expert-parallel-comm --fp8-format e4m3 --fp8-recipe mxfp8 "
        "--attention-backend auto")


def _said(rc, *words):
    return [a for a in rc.assumed if all(w in a for w in words)]


def test_bridge_perf_recipe_reads_whole():
    """Megatron-Bridge's own Qwen3-30B-A3B GB200 MXFP8 performance recipe (tests/data/runs,
    PROVENANCE.md): every setting read, none refused; the plan as the recipe sets it."""
    rc = read_config(DATA / "bridge_qwen3_30b_a3b_gb200_mxfp8.args", model=QWEN)
    assert rc.plan["expert_parallel"] == 8 and rc.plan["microbatch"] == 4
    assert (rc.plan["precision"], rc.plan["scaling_recipe"]) == ("fp8", "mxfp8")
    assert rc.global_batch == 512
    e = rc.engine
    assert (e.moe_dispatcher, e.overlap_moe_a2a, e.moe_comm_sms) == ("flex", True, 32)
    assert e.cross_entropy == "te"                         # _benchmark_common's cross_entropy_fusion_impl
    assert _said(rc, "CUDA graphs capture the whole iteration")
    assert _said(rc, "sync-free MoE", "1.5x")
    assert _said(rc, "--moe-paged-stash", "1.2x on the GPU", "1x pinned on the host")
    assert _said(rc, "op-fuser")
    assert rc.plan["fp8_attention"] and not _said(rc, "--fp8-dot-product-attention")   # priced, not said
    assert _said(rc, "--delay-wgrad-compute")
    assert _said(rc, "high_priority_a2a_comm_stream")
    assert _said(rc, "moe_hybridep_num_sms_preprocessing=32")
    assert not _said(rc, "imbalance")                      # the recipe forces balanced routing
    assert {"model.moe_mlp_glu_interleave_size", "model.moe_pad_experts_for_cuda_graph_inference"} <= set(rc.neutral)


def test_bridge_and_megatron_line_agree():
    """The Bridge fields are read as the Megatron flags they stand for: the same plan and engine
    (Bridge's bf16_with_mxfp8_mixed recipe gathers its parameters in FP8: --fp8-param-gather)."""
    bridge = read_megatron_bridge(None, [
        "train.global_batch_size=512", "train.micro_batch_size=4", "model.expert_model_parallel_size=8",
        "model.moe_token_dispatcher_type=flex", "model.moe_flex_dispatcher_backend=hybridep",
        "comm_overlap.overlap_moe_expert_parallel_comm=true", "mixed_precision=bf16_with_mxfp8_mixed",
        "model.moe_hybridep_num_sms=24", "model.cuda_graph_impl=transformer_engine",
        "model.cuda_graph_scope=[attn,moe_router]", "model.moe_router_force_load_balancing=true"], model=QWEN)
    line = read_megatron_args(LINE + " --fp8-param-gather --moe-hybridep-num-sms 24 --cuda-graph-impl transformer_engine "
                              "--cuda-graph-scope attn moe_router --moe-router-force-load-balancing", QWEN)
    assert bridge.plan == line.plan
    assert bridge.engine == line.engine and bridge.engine.moe_comm_sms == 24
    for rc in (bridge, line):
        assert _said(rc, "CUDA graphs (transformer_engine) capture attn, moe_router only")


def test_megatron_flex_sms_defaults():
    """Without a count, the flex backend's SMs are what Megatron-Core passes today: nothing, so
    each backend's own default (HybridEP's, the engine's default; DeepEP's 20), the older
    releases' 16 for HybridEP said; the unified knob wins over the older per-backend one; the
    all-to-all dispatcher takes none."""
    hy = read_megatron_args(LINE, QWEN)
    assert hy.engine.moe_comm_sms == 0
    assert engine.moe_comm_sms(hy.engine, False) == engine.FLEX_SMS_NVLINK == 24
    assert _said(hy, "HybridEP's own default", f"older releases pass {MEGATRON_HYBRIDEP_SMS_BEFORE_2026_07}")
    dp = read_megatron_args(LINE.replace("hybridep", "deepep"), QWEN)
    assert dp.engine.moe_comm_sms == DEEPEP_DEFAULT_SMS == 20
    both = read_megatron_args(LINE + " --moe-hybridep-num-sms 16 --moe-flex-dispatcher-num-sms 40", QWEN)
    assert both.engine.moe_comm_sms == 40
    a2a = read_megatron_args(LINE.replace("--moe-token-dispatcher-type flex --moe-flex-dispatcher-backend hybridep",
                                          "--moe-token-dispatcher-type alltoall"), QWEN)
    assert a2a.engine.moe_comm_sms == 0
    # no graphs and the router's own routing: both said for an expert-parallel MoE run
    assert _said(hy, "no CUDA graphs") and _said(hy, "imbalance")


def test_flex_sms_priced_only_beside_the_overlap():
    """The dispatcher's SMs slow the compute that runs beside the EP all-to-alls: more SMs, a
    step no faster under the overlap, and the same step without it (nothing runs beside them)."""
    cl = cluster.preset("gb200-nvl72", 8)
    base = read_megatron_args(LINE, QWEN).resolve(8)
    steps = {}
    for overlap in (True, False):
        for sms in (8, 16, 64):
            e = engine.with_moe_dispatch(engine.megatron_core(), "flex", overlap, sms)
            steps[overlap, sms] = evaluate(QWEN, "GB200", cl, base.spec, 512, engine=e).step_time_s
    assert steps[True, 8] < steps[True, 16] < steps[True, 64]
    assert steps[False, 8] == steps[False, 16] == steps[False, 64]


def test_cuda_graph_readings():
    def graphs(line):
        vals, flags, _ = _split(line)
        return cuda_graphs(vals, flags)
    assert graphs("") == ("none", ())
    assert graphs("--enable-cuda-graph") == ("local", ())
    assert graphs("--external-cuda-graph --cuda-graph-scope attn") == ("transformer_engine", ("attn",))
    assert graphs("--cuda-graph-impl local --cuda-graph-scope full_iteration") == ("full_iteration", ())
    assert graphs("--cuda-graph-scope full_iteration") == ("full_iteration", ())     # Megatron-Core promotes it
    assert graphs("--cuda-graph-impl full_iteration") == ("full_iteration", ())
    # scopes without an implementation: Megatron warns and captures nothing; said so
    assert graphs("--cuda-graph-scope attn") == ("none", ("attn",))
    rc = read_megatron_args(LINE + " --cuda-graph-scope attn moe_router", QWEN)
    assert _said(rc, "CUDA graph scopes attn, moe_router without an implementation: Megatron captures nothing")
    assert graphs("--cuda-graph-impl transformer_engine --cuda-graph-modules attn moe_router attn") == (
        "transformer_engine", ("attn", "moe_router"))
    for bad, why in (("--cuda-graph-impl cudnn", "Megatron accepts"),
                     ("--cuda-graph-impl local --cuda-graph-scope router", "scope"),
                     ("--enable-cuda-graph --cuda-graph-impl transformer_engine", "give one"),
                     ("--cuda-graph-impl local --cuda-graph-scope attn --cuda-graph-modules attn", "give one of"),
                     ("--cuda-graph-impl transformer_engine --cuda-graph-scope full_iteration", "cannot capture")):
        with pytest.raises(ValueError, match=why):
            graphs(bad)


@pytest.mark.parametrize("extra, why", [
    ("--moe-expert-rank-capacity-factor 0", "must be positive"),
    ("--moe-paged-stash", "needs --moe-expert-rank-capacity-factor"),
    ("--moe-paged-stash-buffer-size-factor-cuda 1.2", "need --moe-paged-stash"),
    ("--moe-deepep-num-sms 24", "give --moe-flex-dispatcher-num-sms"),
    ("--fp8-dot-product-attention --fp8-format e4m3", None),
])
def test_moe_execution_refusals(extra, why):
    line = LINE.replace("--fp8-format e4m3 --fp8-recipe mxfp8", "") + " " + extra
    if why is None:                                         # FP8 attention acts inside an FP8 run: this one is
        assert read_megatron_args(line, QWEN).plan["fp8_attention"]
        bf16 = read_megatron_args(line.replace("--fp8-format e4m3", ""), QWEN)   # inert without one, said
        assert not bf16.plan["fp8_attention"] and _said(bf16, "acts only under an FP8 recipe")
        return
    with pytest.raises(ValueError, match=why):
        read_megatron_args(line, QWEN)


def test_sync_free_needs_hybridep():
    line = LINE.replace("hybridep", "deepep") + " --moe-expert-rank-capacity-factor 1.5"
    with pytest.raises(ValueError, match="HybridEP backend only"):
        read_megatron_args(line, QWEN)
    dense = ("--num-layers 2 --hidden-size 256 --num-attention-heads 4 --seq-length 128 --vocab-size 1000 "
             "--moe-token-dispatcher-type flex --moe-flex-dispatcher-backend hybridep "
             "--moe-expert-rank-capacity-factor 1.5")
    with pytest.raises(ValueError, match="mixture-of-experts"):
        read_megatron_args(dense)


def test_nemo1_cuda_graph_is_read():
    """NeMo 1's ``model.enable_cuda_graph`` is Megatron-Core's per-layer graphs, said (it was
    listed as changing nothing)."""
    rc = read_nemo1(DATA / "nemo1_gpt3_5b.yaml", ["model.enable_cuda_graph=true"])
    assert _said(rc, "CUDA graphs (local) capture each layer only")
    assert "model.enable_cuda_graph" not in rc.neutral



def test_the_op_fuser_flag_fuses_the_experts_bias_and_clamp():
    """``--use-transformer-engine-op-fuser``: the experts' bias and clamped activation inside TE's
    fused grouped MLP; without it, a model that has them runs Megatron-Core's eager passes, said."""
    oss = models.preset("gpt-oss-120b")
    line = LINE.replace("--expert-model-parallel-size 8", "--expert-model-parallel-size 8 --num-experts 128 --moe-router-topk 4")
    eager = read_megatron_args(line, oss)
    fused = read_megatron_args(line + " --use-transformer-engine-op-fuser", oss)
    assert eager.engine.expert_elementwise == "eager" and _said(eager, "clamp and bias", "eager")
    assert fused.engine.expert_elementwise == "fused" and "-op-fuser" in fused.engine.name
    assert not _said(fused, "eager PyTorch passes")
    assert not _said(read_megatron_args(LINE, QWEN), "eager PyTorch passes")       # no bias, no clamp
    # GPT-OSS's YaRN-scaled RoPE runs unfused under Megatron-Core, fused op fuser or not
    for rc in (eager, fused):
        assert _said(rc, "YaRN's attention factor (1.347)", "unfused")
    assert not _said(read_megatron_args(LINE, QWEN), "YaRN")


def test_the_permute_and_router_fusions_are_read_and_their_absence_said():
    """``--moe-permute-fusion`` and ``--moe-router-fusion`` are the fused kernels cosearch prices:
    read, nothing said; without them (Megatron-Core's defaults are off) the PyTorch ops' extra
    passes are said in ``assumed``, not silently priced as fused.  A Megatron-Bridge config's
    ``model.moe_permute_fusion`` / ``moe_router_fusion`` reach the same flags."""
    fused = read_megatron_args(LINE + " --moe-permute-fusion --moe-router-fusion", model=QWEN)
    assert not _said(fused, "fusion")
    plain = read_megatron_args(LINE, model=QWEN)
    assert _said(plain, "without --moe-permute-fusion") and _said(plain, "without --moe-router-fusion")
    bridge = read_megatron_bridge({"model": {"tensor_model_parallel_size": 1, "expert_model_parallel_size": 8,
                                             "moe_permute_fusion": True, "moe_router_fusion": False},
                                   "train": {"micro_batch_size": 1, "global_batch_size": 64}}, model=QWEN)
    assert not _said(bridge, "without --moe-permute-fusion") and _said(bridge, "without --moe-router-fusion")


def test_sequential_experts_without_grouped_gemm_are_said():
    """Without ``--moe-grouped-gemm`` (Megatron-Core's default) the layer spec builds
    ``SequentialMLP``, a loop over the local experts: said, priced at the grouped GEMMs' shapes; a
    Megatron-Bridge config's ``model.moe_grouped_gemm`` reaches the same flag."""
    assert _said(read_megatron_args(LINE, model=QWEN), "without --moe-grouped-gemm", "SequentialMLP")
    assert not _said(read_megatron_args(LINE + " --moe-grouped-gemm", model=QWEN), "SequentialMLP")
    base = {"model": {"tensor_model_parallel_size": 1, "expert_model_parallel_size": 8},
            "train": {"micro_batch_size": 1, "global_batch_size": 64}}
    assert _said(read_megatron_bridge(base, model=QWEN), "SequentialMLP")
    base["model"]["moe_grouped_gemm"] = True
    assert not _said(read_megatron_bridge(base, model=QWEN), "SequentialMLP")


def test_the_routers_own_switches_are_read():
    """DeepSeek-V3's Megatron line and Megatron-Bridge config carry the router's own switches (score
    function, top-k scaling, expert bias and its update rate, group-limited routing, fp32 router
    dtype, drop policy, shared-expert overlap): each read — the router's arithmetic changes
    nothing cosearch prices, the group limit and the shared-expert overlap are said, fp64 routing
    and half a group setting are refused by name."""
    m = models.preset("deepseek-v3")
    line = ("--expert-model-parallel-size 8 --micro-batch-size 1 --global-batch-size 64 --moe-router-score-function "
            "sigmoid --moe-router-topk-scaling-factor 2.5 --moe-router-enable-expert-bias --moe-router-bias-update-rate "
            "1e-3 --moe-router-num-groups 8 --moe-router-group-topk 4 --moe-router-dtype fp32 --moe-token-drop-policy "
            "probs --moe-shared-expert-overlap --moe-router-pre-softmax --moe-per-layer-logging --bf16")
    rc = read_megatron_args(line, model=m)
    assert _said(rc, "group-limited routing (4 of 8") and _said(rc, "--moe-shared-expert-overlap")
    assert _said(rc, "--moe-router-dtype fp32")
    with pytest.raises(ValueError, match="fp64"):
        read_megatron_args(line.replace("dtype fp32", "dtype fp64"), model=m)
    with pytest.raises(ValueError, match="go together"):
        read_megatron_args(line.replace(" --moe-router-group-topk 4", ""), model=m)
    with pytest.raises(ValueError, match="exceeds"):
        read_megatron_args(line.replace("group-topk 4", "group-topk 9"), model=m)
    bridge = read_megatron_bridge({"model": {"expert_model_parallel_size": 8, "moe_router_num_groups": 8,
                                             "moe_router_group_topk": 4, "moe_router_score_function": "sigmoid",
                                             "moe_shared_expert_overlap": True, "moe_router_dtype": "fp32",
                                             "moe_router_enable_expert_bias": True, "moe_token_drop_policy": "probs",
                                             "moe_router_topk_scaling_factor": 2.5},
                                   "train": {"micro_batch_size": 1, "global_batch_size": 64}}, model=m)
    assert _said(bridge, "group-limited routing") and _said(bridge, "--moe-shared-expert-overlap")
