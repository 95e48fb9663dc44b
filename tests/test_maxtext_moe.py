"""MaxText's token-dropping MoE (capacity factor, one-hot einsum dispatch) and its
``remat_policy: custom`` (named tensors rematerialized, kept on device or offloaded to host),
each against numbers worked by hand from MaxText's code."""

import math
from dataclasses import replace

import numpy as np
import pytest

from cosearch import cluster, graph, hardware, memory, models
from cosearch._kernels import formulas as F
from cosearch.engine import MAXTEXT
from cosearch.plan import PlanSpec, evaluate

MIXTRAL = models.preset("mixtral-8x7b").with_(seq_len=4096)     # h 4096, 8 experts of 14336, top 2


def test_capacity_slots_hand_worked():
    """Megatron-Core: a rank's capacity ceil(T k / E x f); MaxText: int(ceil(S k / E) x f) slots a
    sequence.  Balanced load: T k ep / E per local expert."""
    T, k, E = 2 * 4096, 2, 8
    load = T * k // E                                               # 2048
    assert graph.moe_expert_tokens(MIXTRAL, T, 1, 2) == (load, T * k)
    drop = MIXTRAL.with_(moe_capacity_factor=0.5)                   # 1024 kept of 2048
    assert graph.moe_expert_tokens(drop, T, 1, 2) == (1024, 1024 * E)
    over = MIXTRAL.with_(moe_capacity_factor=1.25)                  # room for more: nothing dropped or padded
    assert graph.moe_expert_tokens(over, T, 1, 2) == (load, T * k)
    pad = over.with_(moe_pad_to_capacity=True)                      # ceil(8192 x 2 / 8 x 1.25) = 2560
    assert graph.moe_expert_tokens(pad, T, 1, 2) == (2560, 2560 * E)
    mt = over.with_(moe_einsum_dispatch=True)                       # 2 sequences x int(1024 x 1.25) = 2560
    assert mt.moe_pad_to_capacity
    assert graph.moe_expert_tokens(mt.with_(seq_len=4000), 2 * 4000, 1, 2) == \
        (2 * int(math.ceil(4000 * 2 / 8) * 1.25), 2 * 1250 * E)     # per sequence: int(1000 x 1.25)
    assert graph.moe_expert_tokens(pad, T, 4, 2)[0] == 4 * 2560     # ep 4: four ranks' slots per expert


def test_einsum_dispatch_flops_hand_worked():
    """BSM,BSEC -> EBCM and EBCM,BSEC -> BSM: 2 S E C h FLOPs each per sequence; the experts run
    E C padded tokens a sequence."""
    m = MIXTRAL.with_(moe_capacity_factor=1.25, moe_einsum_dispatch=True)
    S, E, C, h, f = 4096, 8, 1280, 4096, 14336
    ops = {o.name: o for o in graph.build(m, 1, 2, "fwd").ops}
    assert ops["moe_dispatch_einsum"].flops == pytest.approx(2 * (2 * S * E * C * h))
    assert ops["moe_combine_einsum"].flops == pytest.approx(2 * (2 * S * E * C * h))
    assert ops["expert_fc1"].flops == pytest.approx(2 * (2 * E * C) * h * (2 * f))
    assert ops["expert_fc2"].flops == pytest.approx(2 * (2 * E * C) * f * h)
    assert "moe_permute" not in ops and "moe_unpermute" not in ops
    with pytest.raises(ValueError, match="need a moe_capacity_factor"):
        MIXTRAL.with_(moe_einsum_dispatch=True)
    with pytest.raises(ValueError, match="without tensor or context parallelism"):
        graph.build(m, 2, 1, "fwd")


POLICY = "maxtext:decoder_layer_input=offload,out_proj=offload,query_proj=offload,key_proj=offload,value_proj=offload"


def test_custom_policy_reruns_what_the_backward_needs_and_no_name_holds():
    """With the projections saved, JAX reruns the norms, RoPE, the attention core (context not
    saved), the router and dispatch, the experts' up projection and activation, and their down
    projection (the router's gradient reads the experts' outputs), never Q/K/V, the output
    projection, the combine or anything after it."""
    m = MIXTRAL.with_(dropout=False)
    share = {o.name: graph.recompute_share(o, m, POLICY) for o in graph.build(m, 1, 1, "fwd").ops}
    assert share["qkv"] == 0.0 and share["attn_out"] == 0.0 and share["residual2"] == 0.0
    for name in ("norm1", "norm2", "expert_fc1", "expert_act", "expert_fc2", "router", "moe_permute"):
        assert share[name] == 1.0, name
    assert share["moe_unpermute"] == 0.0
    core = [n for n in share if n in graph.ATTENTION_CORE]
    assert core and all(share[n] == 1.0 for n in core)
    half = graph.maxtext_policy("maxtext:query_proj=device")                 # only Q saved
    q = m.heads / (m.heads + 2 * m.kv_heads)
    assert graph._maxtext_rerun("qkv", m, half) == pytest.approx(1.0 - q)
    # MaxText compiles decoder_layer_input=remat and keeps the layer input all the same
    kept = graph.maxtext_policy("maxtext:decoder_layer_input=remat")
    assert memory.maxtext_saved_bytes(m, 1, 1, False, kept) == (4096 * 4096 * 2, 0.0)
    with pytest.raises(ValueError, match="choose from"):
        graph.maxtext_policy("maxtext:frobnicate=offload")


def test_custom_policy_bytes_hand_worked():
    """Per token: layer input h, Q 4096, K and V 1024 each (8 kv heads of 128), attention output h:
    14,336 bf16 values; all offloaded, none kept on the device."""
    places = graph.maxtext_policy(POLICY)
    dev, host = memory.maxtext_saved_bytes(MIXTRAL, 1, 3, False, places)
    assert dev == 0.0
    assert host == pytest.approx(3 * 4096 * (4096 + 4096 + 1024 + 1024 + 4096) * 2)
    dev, host = memory.maxtext_saved_bytes(MIXTRAL, 1, 1, False, graph.maxtext_policy("maxtext:out_proj=device"))
    assert (dev, host) == (4096 * (4096 + 4096) * 2, 0.0)                    # the layer input stays too


def test_offload_transfer_exposed_beyond_the_layers_compute():
    """Each layer sends its offloaded bytes x during the forward and fetches them during the
    backward: exposed n (max(0, x / B - fwd) + max(0, x / B - (bwd + rerun)))."""
    hw = np.zeros(F.NH)
    hw[F.H_HBM], hw[F.H_MEMBW], hw[F.H_HOSTBW] = 1e30, 1.0, 1e9
    net = np.array([0.0, 1e9, 1e9, 0.0, 0.0, 0.0])
    out = np.zeros(F.NB)

    def cost(x_s):
        u = np.zeros(F.NU)
        u[F.U_LF], u[F.U_LB], u[F.U_LATT], u[F.U_ACT_HOST] = 1.0, 2.0, 0.5, x_s * 1e9
        return F.stage_terms.py_func(u, net, hw, 4.0, False, False, 0, 1, 1, 1, 1.0, 1.0, 0, 1.0, F.RC_SELECTIVE,
                                     out)[0]
    base = 4 * (1.0 + 2.0 + 0.5)
    assert cost(0.9) == pytest.approx(base)                                  # hidden both ways
    assert cost(1.5) == pytest.approx(base + 4 * 0.5)                        # 0.5 past the forward
    assert cost(3.0) == pytest.approx(base + 4 * (2.0 + 0.5))                # past both


def test_custom_policy_plan_against_full_remat_on_v6e():
    """The same plan under the custom policy reruns less than under full remat (Q/K/V and the
    output projection are saved) and keeps no activation in HBM but what full remat keeps less
    the layer inputs (offloaded)."""
    m = MIXTRAL.with_(moe_capacity_factor=1.25, moe_einsum_dispatch=True)
    eng = replace(MAXTEXT, name="mt-custom", selective_recompute=POLICY)
    spec = PlanSpec(256, 1, 1, 2, zero=3, flash_attention=True)
    cl = cluster.tpuv6e_pod(256)
    full = evaluate(m, hardware.TPUv6e, cl, replace(spec, recompute="full"), 512, engine=MAXTEXT)
    cust = evaluate(m, hardware.TPUv6e, cl, replace(spec, recompute="selective"), 512, engine=eng)
    assert 0 < cust.breakdown["recompute_s"] < full.breakdown["recompute_s"]
    assert cust.breakdown["forward_s"] == full.breakdown["forward_s"]


def _tpu_row(**kw):
    row = dict(id="tpu-recipes/trillium/Mixtral-8x7B-MaxText/v6e-256", model="Mixtral-8x7B",
               arch="MoE (top-2), GQA, sliding-window not used", layers=32, hidden=4096, heads=32, kv_heads=8,
               ffn=None, moe_ffn=14336, num_experts=8, experts_per_token=2, shared_experts=0, moe_layers="all",
               vocab=32000, seq=4096, accel="TPU v6e (Trillium), 1 x v6e-256 slice", gen="TPU v6e",
               gpus_per_node=4, n_gpus=256, gbs=3072, mbs=12, ga=1, tp=1, pp=1, vp=None, cp=1, ep=1, etp=None,
               dp=256, sp=False, zero="3 (FSDP over all devices)",
               recompute="custom: decoder_layer_input, out_proj, query_proj, key_proj, value_proj offloaded to host",
               precision="BF16", step_s=13.484, tok_s_gpu=3645.203, software="MaxText tag tpu-recipes-v0.1.2",
               assumed=["plan from the 'mixtral_8x7b_dropped' workload details (capacity_factor 1.25, "
                        "megablox False, sparse_matmul False)"],
               notes="token-dropping MoE (capacity factor 1.25)", complete=True)
    row.update(kw)
    return row


def test_a_maxtext_tpu_moe_row_reads_as_its_recipe():
    """tpu-recipes' Mixtral-8x7B on v6e: the v6e preset, capacity 1.25 through the dense dispatch,
    the listed tensors offloaded; a row citing the recipe by name reads the same; a dropping row on
    MaxText's sparse path is refused by name."""
    from cosearch.runs import rows
    d = rows.describe_row(_tpu_row())
    assert d.chip.name == "TPUv6e" and d.cluster.num_chips == 256
    assert d.model.moe_capacity_factor == 1.25 and d.model.moe_einsum_dispatch and d.model.moe_pad_to_capacity
    assert d.spec.recompute == "selective"
    assert graph.maxtext_policy(d.engine.selective_recompute) == graph.maxtext_policy(POLICY)
    cited = rows.describe_row(_tpu_row(recompute="custom offload (as tpu-recipes Mixtral-8x7B recipe)", notes="",
                                       assumed=["plan assumed = linked tpu-recipes recipe (mixtral_8x7b_dropped, "
                                                "per_device_batch_size 12)"]))
    assert cited.model == d.model and cited.engine.selective_recompute == d.engine.selective_recompute
    with pytest.raises(rows.Refused, match="sparse_matmul"):
        rows.describe_row(_tpu_row(assumed=["capacity_factor 1.25"]))
    # a row naming one of MaxText's named policies reads as the config reader reads it; others
    # are refused by name, and "minimal" stays its own (checkpoint_dots_with_no_batch_dims)
    named = rows.describe_row(_tpu_row(recompute="remat_policy=save_qkv_proj"))
    kept = {t for t, w in graph.maxtext_policy(named.engine.selective_recompute).items() if w == "device"}
    assert kept == {"decoder_layer_input", "query_proj", "key_proj", "value_proj", "qkv_proj"}
    assert named.spec.recompute == "selective"
    with pytest.raises(rows.Refused, match="MaxText remat policy 'save_everything' is not modelled"):
        rows.describe_row(_tpu_row(recompute="remat_policy=save_everything"))
    minimal = rows.describe_row(_tpu_row(recompute="remat_policy=minimal (saves matmul outputs)"))
    assert minimal.engine.selective_recompute == "dots-saved"


def test_fsdp_by_expert_mesh_and_llama4_chunks():
    """MaxText's fsdp 64 x expert 4 mesh reads as ZeRO-3 over all 256 data-parallel ranks with
    the experts on 4 (their weights sharded over the 64 holding each); Llama 4's chunked attention
    (8,192-token blocks on 3 of every 4 layers) covers an 8,192-token sequence whole."""
    from cosearch.runs import rows
    d = rows.describe_row(_tpu_row(zero="3 (FSDP 64) x EP 4", ep=4, mbs=8, gbs=2048))
    assert (d.spec.zero, d.spec.expert_parallel, d.spec.dp) == (3, 4, 256)
    with pytest.raises(rows.Refused, match="ZeRO layout"):
        rows.describe_row(_tpu_row(zero="3 (FSDP 32) x EP 4", ep=4))           # 32 x 4 is not dp 256
    arch = "MoE (top-1 routed + 1 shared), GQA, chunked attention + NoPE every 4th layer"
    m = rows.describe_row(_tpu_row(arch=arch, seq=8192)).model
    assert (m.attention_chunk, m.chunked_layers, m.attention_flops_share) == (8192, 24, 1.0)   # 3 of 4 of 32
    assert rows.describe_row(_tpu_row(arch=arch, seq=16384)).model.attention_flops_share < 1.0


def test_chunked_attention_pairs_by_enumeration():
    """The chunked pair ratio against counting every (query, key) pair a query meets in its own
    block, for sequences that are and are not whole blocks."""
    from cosearch.models import chunked_pair_ratio
    for s, c in ((10, 4), (12, 4), (7, 7), (9, 20), (33, 8)):
        pairs = sum(1 for i in range(s) for j in range(i + 1) if i // c == j // c)
        assert chunked_pair_ratio(s, c) == pytest.approx(pairs / (s * (s + 1) / 2), rel=1e-14)
    m = models.preset("llama4-scout").with_(seq_len=32768)        # 36 of 48 layers in 4 blocks of 8192
    assert m.attention_flops_share == pytest.approx(0.25 + 0.75 * (4 * 8192 * 8193) / (32768 * 32769), rel=1e-12)
    assert models.preset("llama4-scout").attention_flops_share == 1.0    # one block at 8192
    with pytest.raises(ValueError, match="chunked attention is not modelled"):
        graph.build(m, 1, 1, "fwd", flash_attention=True, context_parallel=2)


#: A small MoE model whose layers can mix dense and MoE MLPs (pp 1: every stage holds them all).
_MIXED_BASE = models.ModelConfig("tiny-moe", 4, 512, 8, 2048, 1000, 256, activation="swiglu", norm="rmsnorm",
                                 position="rotary", bias=False, dropout=False, num_experts=4, experts_per_token=1,
                                 moe_ffn_hidden=1024, shared_experts=1)


def _fwd_bwd(model) -> dict[str, float]:
    """The forward and backward seconds of one pp-1 plan of ``model`` on a DGX H100."""
    p = evaluate(model, hardware.H100, cluster.dgx_h100(1), PlanSpec(8, 1, 1, 2, flash_attention=True), 32,
                 engine="megatron-core")
    return {k: p.breakdown[k] for k in ("forward_s", "backward_s")}


def test_interleaved_moe_layers_priced_as_the_mean_of_both_kinds():
    """A model with every 2nd layer MoE: its forward and backward are the means of the same model
    all-MoE and all-dense (pp 1: every stage holds whole pairs); its sizes count each kind."""
    base = _MIXED_BASE
    inter = base.with_(moe_layer_step=2)
    dense = base.dense_counterpart()
    ev = {k: _fwd_bwd(m) for k, m in (("inter", inter), ("moe", base), ("dense", dense))}
    for k in ("forward_s", "backward_s"):
        assert ev["inter"][k] == pytest.approx((ev["moe"][k] + ev["dense"][k]) / 2, rel=1e-9)
    moe_layer = base.layer_params()
    assert inter.num_params() == 2 * moe_layer + 2 * dense.layer_params() + base.embedding_params()
    with pytest.raises(ValueError, match="whole groups of 3"):
        base.with_(moe_layer_step=3)


def test_dense_first_layers_priced_as_the_mean_of_both_kinds():
    """DeepSeek-style dense first layers (1 of 4): the forward and backward are 3/4 of the same
    model all-MoE and 1/4 all-dense (pp 1), as the parameter count is."""
    base = _MIXED_BASE
    first = base.with_(dense_layers=1)
    dense = base.dense_counterpart()
    ev = {k: _fwd_bwd(m) for k, m in (("first", first), ("moe", base), ("dense", dense))}
    for k in ("forward_s", "backward_s"):
        assert ev["first"][k] == pytest.approx(0.75 * ev["moe"][k] + 0.25 * ev["dense"][k], rel=1e-9)
    assert ev["dense"]["forward_s"] != ev["moe"]["forward_s"]
    assert first.num_params() == 3 * base.layer_params() + dense.layer_params() + base.embedding_params()


def test_stages_without_whole_moe_groups_are_named():
    """A pipeline stage of an interleaved model that does not hold whole groups of
    ``moe_layer_step`` layers is priced with the mean layer, and evaluate() says so."""
    import warnings
    base = models.ModelConfig("tiny-moe", 6, 512, 8, 2048, 1000, 256, activation="swiglu", norm="rmsnorm",
                              position="rotary", bias=False, dropout=False, num_experts=4, experts_per_token=1,
                              moe_ffn_hidden=1024, moe_layer_step=2)
    cl = cluster.dgx_h100(1)
    with pytest.warns(UserWarning, match="whole groups of 2"):
        evaluate(base, hardware.H100, cl, PlanSpec(4, 1, 2, 1, flash_attention=True), 32, engine="megatron-core")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        evaluate(base, hardware.H100, cl, PlanSpec(4, 1, 2, 1, flash_attention=True, stage_layers=(2, 4)), 32,
                 engine="megatron-core")


def test_megatron_capacity_rows_with_and_without_padding():
    """A Megatron row's notes name its capacity factor, and whether experts pad to it."""
    from cosearch.runs import rows
    base = dict(software="Megatron-Bridge / NeMo 26.04 container", gen="Hopper", accel="H100-SXM-80GB",
                recompute="none", assumed=[], zero="1 (distributed optimizer)", gpus_per_node=8, n_gpus=8,
                dp=8, ep=1, gbs=64, mbs=1, ga=8)
    plain = rows.describe_row(_tpu_row(**base, notes="token dropping, capacity factor 1.0"))
    padded = rows.describe_row(_tpu_row(**base, notes="capacity factor 1.0, pad to capacity"))
    assert plain.model.moe_capacity_factor == 1.0 and not plain.model.moe_pad_to_capacity
    assert padded.model.moe_pad_to_capacity and not padded.model.moe_einsum_dispatch


def test_minimal_remat_keeps_the_projections_by_hand():
    """MaxText's remat_policy minimal keeps the weight GEMMs' outputs (its minimal_policy names):
    per token the layer input h, Q (heads x head_dim), K and V (kv_heads x head_dim each), the
    attention output h and the gated MLP's two input projections (ffn each) — not the MLP's output,
    no residual — in bf16.  Llama 2 70B-shaped (h 8192, 64 heads of 128, 8 KV heads, ffn 28672) on
    one 4,096-token sequence, tp 1.  (Megatron's selective figure, used before, overstated it: the
    v5p rows of 32B and 64B on 64 chips, which ran, did not fit.)"""
    from cosearch import models
    from cosearch.plan import _per_sequence_bytes
    m = models.preset("llama2-70b")
    per_token = 8192 + 64 * 128 + 2 * 8 * 128 + 8192 + 2 * 28672
    sel = _per_sequence_bytes(m, 1, False, "dots-saved", True, "bf16")[0][1]
    assert sel == pytest.approx(4096 * per_token * 2, rel=1e-12)


def test_maxtext_model_names_of_the_new_presets():
    """MaxText's configs/models/deepseek2-16b.yml, deepseek2-236b.yml and gpt-oss-20b.yml carry
    DeepSeek-V2-Lite's, DeepSeek-V2's and GPT-OSS-20B's sizes; gpt3-175b.yml GPT-3 175B's with its
    vocabulary padded to 50304, no dropout, a 16384-row learned position table and
    ``use_iota_embed: true`` (a command line may turn it off)."""
    from cosearch.runs import read_maxtext
    base = ["per_device_batch_size=1", "ici_fsdp_parallelism=-1"]
    for name, preset in (("deepseek2-16b", "deepseek-v2-lite"), ("deepseek2-236b", "deepseek-v2"),
                         ("gpt-oss-20b", "gpt-oss-20b")):
        d = read_maxtext(None, [f"model_name={name}", "max_target_length=4096", *base]).resolve(64)
        assert d.model == models.preset(preset).with_(seq_len=4096)
    rc = read_maxtext(None, ["model_name=gpt3-175b", "max_target_length=2048", *base])
    d = rc.resolve(64)
    gpt3 = models.preset("gpt3-175b")
    assert (d.model.vocab, d.model.dropout) == (50304, False)
    assert d.model.num_params() - gpt3.num_params() == (50304 - 50257) * 12288 + (16384 - 2048) * 12288
    assert d.engine.embedding == "one-hot"
    off = read_maxtext(None, ["model_name=gpt3-175b", "max_target_length=2048", "use_iota_embed=false", *base])
    assert off.resolve(64).engine.embedding == "gather"
    with pytest.raises(ValueError, match="trainable_position_size 1024 is shorter"):
        read_maxtext(None, ["model_name=gpt3-175b", "max_target_length=2048", "trainable_position_size=1024", *base])
    with pytest.raises(ValueError, match="enable_dropout"):
        read_maxtext(None, ["model_name=gpt3-175b", "max_target_length=2048", "enable_dropout=true", *base])


def test_a_named_models_own_yml_turns_dropout_off():
    """Every model yml cosearch maps but llama2-70b's sets ``enable_dropout: false`` over base.yml's
    true: a ``dropout_rate`` alone drops nothing there (until stop 72 it was priced as dropout); the
    command line's ``enable_dropout=true`` turns it on; the base_* dimensions and llama2-70b keep
    base.yml's true."""
    from cosearch.runs import read_maxtext
    base = ["per_device_batch_size=1", "ici_fsdp_parallelism=-1", "max_target_length=4096", "dropout_rate=0.1"]
    assert not read_maxtext(None, ["model_name=llama3-8b", *base]).resolve(64).model.dropout
    assert read_maxtext(None, ["model_name=llama3-8b", "enable_dropout=true", *base]).resolve(64).model.dropout
    assert read_maxtext(None, ["model_name=llama2-70b", *base]).resolve(64).model.dropout
    assert read_maxtext(None, base).resolve(64).model.dropout


def test_minimal_reruns_by_maxtexts_names_on_moe_and_mla_layers():
    """``remat_policy: minimal`` on an MoE layer (MaxText 0.2.5's ``moe.py``): the routed gate and
    down projections carry the dense MLP's names (``mlpwi_0``, ``mlpwo``) and stay; the up
    projection, ``moe_mlpwi_1`` alone in the grouped-GEMM path, runs again with the router and the
    permute that feed it (half the fused gate+up GEMM); the einsum path also names it ``mlpwi_1``,
    so nothing of the experts reruns.  On an MLA layer the query, key and value are named after
    their up projections, which stay; the down projections (their latents unnamed) run again."""
    m = MIXTRAL.with_(dropout=False)
    share = {o.name: graph.recompute_share(o, m, "dots-saved") for o in graph.build(m, 1, 1, "fwd").ops}
    assert share["expert_fc1"] == 0.5 and share["expert_fc2"] == 0.0
    assert share["router"] == 1.0 and share["moe_permute"] == 1.0 and share["qkv"] == 0.0
    einsum = m.with_(moe_capacity_factor=1.0, moe_einsum_dispatch=True)
    share = {o.name: graph.recompute_share(o, einsum, "dots-saved") for o in graph.build(einsum, 1, 1, "fwd").ops}
    assert share["expert_fc1"] == 0.0 and share["expert_fc2"] == 0.0
    ds = models.preset("deepseek-v3")
    share = {o.name: graph.recompute_share(o, ds, "dots-saved") for o in graph.build(ds, 1, 1, "fwd").ops}
    assert share["q_up"] == 0.0 and share["kv_up"] == 0.0
    assert share["q_down"] == 1.0 and share["kv_down"] == 1.0
    # a custom policy keeping the key alone: the key-value up projection's value half runs again
    half = graph.maxtext_policy("maxtext:key_proj=device")
    assert graph._maxtext_rerun("kv_up", ds, half) == 0.5
    assert graph._maxtext_rerun("q_up", ds, half) == 1.0


def test_maxtexts_newer_tensor_names_rerun_what_they_do_not_hold():
    """MaxText 0.2.5's names beside the projections: ``context`` (the kernel's output and
    log-sum-exp) spares the attention kernel's rerun, ``attention_out`` (the output alone) does not
    (the compiled step calls the splash forward kernel again without the log-sum-exp); MLA's
    latents spare their down projections (query_wa_proj, kv_wa_proj) and their norms (mla_q,
    mla_kv); ``moe_x_sorted`` spares routing's permute and the dispatch of a grouped-GEMM layer
    (the einsum path has no such tensor); the bytes each keeps, per token, by hand."""
    ds = models.preset("deepseek-v3")                       # 128 heads, latents 1536 / 512, RoPE 64
    m = MIXTRAL.with_(dropout=False)
    rerun = graph._maxtext_rerun
    assert rerun("attn_core", m, graph.maxtext_policy("maxtext:context=device")) == 0.0
    assert rerun("attn_core", m, graph.maxtext_policy("maxtext:attention_out=device")) == 1.0
    lat = graph.maxtext_policy("maxtext:query_wa_proj=device,mla_kv=device")
    assert (rerun("q_down", ds, lat), rerun("q_latent_norm", ds, lat)) == (0.0, 1.0)
    assert (rerun("kv_down", ds, lat), rerun("kv_latent_norm", ds, lat)) == (1.0, 0.0)
    xs = graph.maxtext_policy("maxtext:moe_x_sorted=device")
    assert rerun("moe_permute", m, xs) == 0.0 and rerun("moe_dispatch", m, xs) == 0.0
    assert rerun("expert_fc1", m, xs) == 1.0 and rerun("router", m, xs) == 1.0
    einsum = m.with_(moe_capacity_factor=1.0, moe_einsum_dispatch=True)
    assert rerun("moe_dispatch", einsum, xs) == 1.0
    s = 4096

    def kept(model, pol):
        return memory.maxtext_saved_bytes(model, 1, 1, False, graph.maxtext_policy(pol))[0] / s
    h = 4096                                                 # the layer input, always kept
    assert kept(m, "maxtext:context=device") == h * 2 + 32 * 128 * 2 + 32 * 4
    assert kept(m, "maxtext:attention_out=device") == h * 2 + 32 * 128 * 2
    assert kept(ds, "maxtext:query_wa_proj=device,kv_wa_proj=device,mla_q=device,mla_kv=device") == \
        7168 * 2 + (1536 + 576 + 1536 + 512) * 2
    assert kept(m, "maxtext:moe_x_sorted=device") == h * 2 + 2 * (h * 2 + 4 + 2)      # 2 slots a token
    assert kept(einsum, "maxtext:moe_x_sorted=device") == h * 2
