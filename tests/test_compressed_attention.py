"""DeepSeek-V4's compressed attention and hyper-connections: key counts by enumerating masks,
parameters by listing MaxText's tensor shapes, the layer graph's FLOPs, activation bytes by hand,
the reader of the Megatron-Bridge rows and the Hugging Face config."""

from __future__ import annotations

import math

import numpy as np
import pytest

from cosearch import graph
from cosearch.compressed_attention import (
    CompressedAttention,
    selected_entries,
    visible_entries,
    window_pairs,
)
from cosearch.memory import layer_activation_bytes, layer_input_bytes
from cosearch.models import ModelConfig, from_hf_config, preset


def _keys_by_mask(s: int, window: int, ratio: int, topk: int) -> int:
    """(query, key) pairs of one layer by enumeration: the raw keys of the window, plus the
    compressed entries whose whole block precedes the query (at most ``topk`` on a CSA layer)."""
    total = 0
    for t in range(s):
        total += sum(1 for j in range(s) if t - window < j <= t)
        if ratio:
            seen = sum(1 for blk in range(s // ratio) if (blk + 1) * ratio <= t + 1)
            total += min(topk, seen) if ratio == 4 else seen
    return total


@pytest.mark.parametrize("s", [1, 3, 4, 7, 37, 64, 130])
@pytest.mark.parametrize("r", [4, 5, 8, 128])
def test_entry_counts_equal_enumeration(s, r):
    for w in (1, 3, 8, 200):
        assert window_pairs(s, w) == sum(min(t + 1, w) for t in range(s))
    assert visible_entries(s, r) == sum(sum(1 for b in range(s // r) if (b + 1) * r <= t + 1) for t in range(s))
    for k in (1, 2, 5, 1000):
        assert selected_entries(s, r, k) == sum(min(k, (t + 1) // r) for t in range(s))


def _tiny_ca(**kw) -> CompressedAttention:
    base = dict(ratios=(0, 4, 8, 4), window=5, q_lora_rank=6, o_groups=2, o_lora_rank=5, index_heads=2,
                index_head_dim=4, index_topk=3, rope_head_dim=2)
    base.update(kw)
    return CompressedAttention(**base)


def _tiny(ca: CompressedAttention | None = None, s: int = 37, **kw) -> ModelConfig:
    ca = ca or _tiny_ca()
    return ModelConfig("tiny-v4", len(ca.ratios), 16, 4, 32, 50, s, kv_heads=1, head_size=8, activation="swiglu",
                       norm="rmsnorm", position="rotary", bias=False, tie_embeddings=False, dropout=False,
                       compressed_attention=ca, **kw)


def test_mean_keys_and_core_flops_by_enumeration():
    ca = _tiny_ca()
    s = 37
    pairs = [_keys_by_mask(s, 5, r, 3) for r in ca.ratios]
    assert ca.mean_keys(s) * len(ca.ratios) * s == pytest.approx(sum(pairs), rel=1e-12)
    index = sum(sum((t + 1) // 4 for t in range(s)) for r in ca.ratios if r == 4)
    assert ca.mean_index_keys(s) * len(ca.ratios) * s == pytest.approx(index, rel=1e-12)
    # per token: 4 heads x head_dim per key (QK^T and PV), 2 index_heads x index_head_dim per scored entry
    want = (4 * 4 * 8 * sum(pairs) + 2 * 2 * 4 * index) / (len(ca.ratios) * s)
    assert ca.core_flops_per_token(s, 4, 8) == pytest.approx(want, rel=1e-12)


def _layer_tensors(ratio: int, h=16, a=4, d=8, qr=6, groups=2, rank=5, ih=2, idd=4) -> list[tuple[int, ...]]:
    """One layer's attention tensors, as MaxText's ``CompressedAttention`` declares them
    (``layers/attention_compressed.py`` at e591f30)."""
    out = [(a,), (h, qr), (qr,), (qr, a, d), (d,), (h, 1, d), (d,), (groups, a * d // groups, rank), (groups * rank, h)]
    if ratio == 4:
        out += [(h, 2 * d), (h, 2 * d), (4, 2 * d), (d,),                        # the overlapping compressor
                (qr, ih * idd), (h, 2 * idd), (h, 2 * idd), (4, 2 * idd), (idd,), (h, ih)]   # the indexer
    elif ratio:
        out += [(h, d), (h, d), (ratio, d), (d,)]
    return out


def test_parameters_equal_maxtexts_tensors():
    m = _tiny()
    shapes = [_layer_tensors(r) for r in m.compressed_attention.ratios]
    attention = sum(math.prod(x) for layer in shapes for x in layer)
    assert m.attention_params() * m.num_layers == pytest.approx(attention, rel=1e-12)
    per_layer_rest = 3 * 16 * 32 + 2 * 16       # a SwiGLU MLP and two RMSNorms
    emb = 2 * 50 * 16 + 16                      # untied embedding and head, the final norm
    assert m.num_params() == attention + m.num_layers * per_layer_rest + emb


def test_deepseek_v4_flash_sizes_match_its_card():
    """DeepSeek-V4-Flash's model card: 284B parameters, 13B activated (the activated count
    without the 1.06B of embedding and head)."""
    m = preset("deepseek-v4-flash")
    assert m.num_params() == pytest.approx(284e9, abs=0.5e9)
    emb = 2 * m.vocab * m.hidden
    assert m.num_params(active=True) - emb == pytest.approx(13e9, abs=0.5e9)


def test_hyper_connection_parameters_and_ops():
    """n = 4 streams of h = 16: per sublayer the norm (64), the 64 -> 24 projection (1,536),
    its 24 biases and 3 scales: 1,627, two sublayers a layer."""
    plain = ModelConfig("d", 2, 16, 4, 32, 50, 8, activation="swiglu", norm="rmsnorm", position="rotary",
                        bias=False, dropout=False)
    hc = plain.with_(hyper_connections=4)
    assert hc.layer_params() - plain.layer_params() == 2 * 1627
    assert hc.num_params() - plain.num_params() == 2 * 2 * 1627
    ops = {o.name: o for o in graph.build(hc, 1, 2, flash_attention=True).ops}
    base = {o.name: o for o in graph.build(plain, 1, 2, flash_attention=True).ops}
    assert not any(n.startswith("hc_") for n in base)
    T = 2 * 8
    assert (ops["hc_coef_attn"].m, ops["hc_coef_attn"].n, ops["hc_coef_attn"].k) == (T, 24, 64)
    assert ops["residual1"].elements == 4 * base["residual1"].elements == 4 * T * 16
    assert ops["hc_norm_mlp"].elements == T * 64
    # the full-recompute input and the pipeline's activation are the 4 streams
    assert layer_input_bytes(hc, 1, 1) == 4 * layer_input_bytes(plain, 1, 1) == 4 * 8 * 16 * 2
    with pytest.raises(ValueError, match="hyper_connections"):
        plain.with_(hyper_connections=0)


def _weight_flops_by_hand(m: ModelConfig, tokens: int) -> float:
    """2 x tokens x the mean over layers of the attention's weight matrices (no norms, sinks or
    position biases), from :func:`_layer_tensors`."""
    mats = [[x for x in _layer_tensors(r) if len(x) > 1 and x[0] not in (4, 8)] for r in m.compressed_attention.ratios]
    return 2.0 * tokens * sum(math.prod(x) for layer in mats for x in layer) / m.num_layers


def test_layer_graph_flops_by_hand():
    """Ratios 4 and 8 (half the layers indexed) make every mean width whole: the graph's attention
    GEMMs equal 2 T x the weight matrices' mean, its core 4 heads d per key met and its indexer
    2 heads d per entry scored (each within one rounded key of the enumeration)."""
    ca = _tiny_ca(ratios=(4, 8))
    s, b = 64, 2
    m = _tiny(ca, s=s)
    ops = graph.build(m, 1, b, flash_attention=True).ops
    names = ("q_down", "q_up", "kv_proj", "compress_proj", "index_q", "index_compress_proj", "index_weights",
             "o_group_proj", "attn_out")
    got = sum(o.flops for o in ops if o.name in names)
    assert got == pytest.approx(_weight_flops_by_hand(m, b * s), rel=1e-12)
    by = {o.name: o for o in ops}
    keys = sum(_keys_by_mask(s, 5, r, 3) for r in ca.ratios) / len(ca.ratios)   # per layer, summed over queries
    core = 4 * 4 * 8 * keys * b
    assert abs(by["attn_core"].flops - core) <= 2 * s * 0.5 * 8 * 4 * b * 2   # one key rounded, both matmuls
    scored = sum(sum((t + 1) // 4 for t in range(s)) for r in ca.ratios if r == 4) / len(ca.ratios)
    assert abs(by["index_scores"].flops - 2 * 2 * 4 * scored * b) <= 2 * s * 0.5 * 4 * 2 * b
    # the backward of the core keeps the head dim and 2.5 of them of work: priced as a backward
    bwd = {o.name: o for o in graph.build(m, 1, b, phase="bwd", flash_attention=True).ops}
    g = bwd["attn_core.grad"]
    assert (g.head_dim, g.k, g.n) == (8, 20, by["attn_core"].n)
    assert g.flops == pytest.approx(2.5 * by["attn_core"].flops)


def test_tensor_parallel_splits_heads_groups_and_indexer():
    ca = _tiny_ca(ratios=(4, 8))
    m = _tiny(ca, s=64)
    one = {o.name: o for o in graph.build(m, 1, 1, flash_attention=True).ops}
    two = {o.name: o for o in graph.build(m, 2, 1, flash_attention=True).ops}
    for name in ("q_up", "o_group_proj", "attn_out", "attn_core", "index_q", "index_scores"):
        assert two[name].flops == pytest.approx(one[name].flops / 2), name
    for name in ("q_down", "kv_proj", "compress_proj"):       # replicated, as MLA's down projections
        assert two[name].flops == one[name].flops, name
    assert "allreduce_attn" in two
    with pytest.raises(ValueError, match="o_groups"):
        graph.build(_tiny(_tiny_ca(ratios=(4, 8), o_groups=1), s=64), 2, 1)


def test_activation_bytes_by_hand():
    """bf16, no recompute, one chip: per token and hidden, the two norm inputs (4) and outputs
    (4), the queries (2 x 32/16), the attention output and the grouped projection's (2 x 42/16),
    the indexer's queries (2 x 0.5 x 8/16), the latents kept whole (2 x (6 + 8 + 24)/16), the
    SwiGLU MLP (2 x 2 x 2 + 2 x 2) and the log-sum-exp (4 x 4 / 16); mla_up_proj drops the
    queries."""
    ca = _tiny_ca(ratios=(4, 8))
    m = _tiny(ca, s=64)
    per_h = 4 + 4 + 2 * 2 + 2 * (32 + 10) / 16 + 2 * 0.5 * 8 / 16 + 2 * (6 + 8 + 24) / 16 + (2 * 2 * 2 + 2 * 2) + 1.0
    assert layer_activation_bytes(m, 1, 1, flash_attention=True) == pytest.approx(64 * 16 * per_h)
    dropped = layer_activation_bytes(m, 1, 1, recompute="selective", flash_attention=True, modules=("mla_up_proj",))
    assert dropped == pytest.approx(64 * 16 * (per_h - 4))
    # four streams: each sublayer keeps them beside its norm's input
    hc = m.with_(hyper_connections=4)
    assert layer_activation_bytes(hc, 1, 1, flash_attention=True) == pytest.approx(64 * 16 * (per_h + 4 * 4))


def test_validation_names_the_problem():
    with pytest.raises(ValueError, match="one compress ratio per layer"):
        _tiny(_tiny_ca(ratios=(4, 8, 0)), s=64).with_(num_layers=2)
    with pytest.raises(ValueError, match="not a DeepSeek-V4 layer kind"):
        _tiny_ca(ratios=(0, 2))
    with pytest.raises(ValueError, match="leave mla"):
        _tiny(mla=(4, 4, 2))
    with pytest.raises(ValueError, match="o_groups"):
        _tiny(_tiny_ca(o_groups=3))
    m = _tiny()
    assert ModelConfig(**m.to_dict()) == m          # a saved config round-trips


#: DeepSeek-V4-Flash's config.json keys as vLLM's and SGLang's DeepSeek-V4 loaders read them, with
#: the values of maxtext's deepseek4-284b.yml (AI-Hypercomputer/maxtext at e591f30, which mirrors
#: it); the last ratio is the multi-token prediction layer's.
V4_FLASH_HF = {"model_type": "deepseek_v4", "vocab_size": 129280, "hidden_size": 4096, "moe_intermediate_size": 2048,
               "num_hidden_layers": 43, "num_attention_heads": 64, "num_key_value_heads": 1, "head_dim": 512,
               "qk_rope_head_dim": 64, "q_lora_rank": 1024, "o_lora_rank": 1024, "o_groups": 8, "hidden_act": "silu",
               "rms_norm_eps": 1e-6, "max_position_embeddings": 1048576, "sliding_window": 128, "rope_theta": 10000,
               "compress_ratios": [0, 0] + [4, 128] * 20 + [4, 0], "index_n_heads": 64, "index_head_dim": 128,
               "index_topk": 512, "hc_mult": 4, "n_routed_experts": 256, "n_shared_experts": 1,
               "num_experts_per_tok": 6, "num_hash_layers": 3, "num_nextn_predict_layers": 1,
               "tie_word_embeddings": False}


def test_hf_config_reads_as_the_preset():
    m = from_hf_config(V4_FLASH_HF, name="deepseek-v4-flash", seq_len=4096)
    assert m == preset("deepseek-v4-flash")
    with pytest.raises(ValueError, match="compress_ratios"):
        from_hf_config({**V4_FLASH_HF, "compress_ratios": [0, 4]}, seq_len=4096)


#: The Megatron-Bridge 26.08 GB200 row of DeepSeek-V4-Flash (shared/validation/moe_runs.jsonl,
#: from Megatron-Bridge docs/performance-summary.md at 067f987), the fields the reader uses.
V4_ROW = {"id": "mbridge-26.08/DeepSeekV4_Flash/GB200/FP8_MX/128/gbs2048",
          "src": "NVIDIA-NeMo/Megatron-Bridge:docs/performance-summary.md@067f987 [26.08 NeMo Container, Pre-Training]",
          "model": "DeepSeek-V4-Flash",
          "arch": "MoE, compressed/sparse attention (DeepSeek-V4), hash-routed first 3 layers",
          "layers": 43, "hidden": 4096, "heads": 64, "kv_heads": 1, "ffn": None, "moe_ffn": 2048, "num_experts": 256,
          "experts_per_token": 6, "shared_experts": 1, "moe_layers": "all (first 3 hash-routed)", "vocab": 129280,
          "seq": 4096, "accel": "GB200 (NVL72)", "gen": "Blackwell", "gpus_per_node": 4, "n_gpus": 128, "gbs": 2048,
          "mbs": 1, "ga": 16, "tp": 1, "pp": 1, "vp": None, "cp": 1, "ep": 64, "etp": 1, "dp": 128, "sp": False,
          "zero": "1 (distributed optimizer)", "recompute": "selective: mla_up_proj (perf recipe sets "
          "recompute_granularity='selective')", "precision": "MXFP8 (1x32 blocks)", "step_s": 8.428,
          "tok_s_gpu": 7776, "tflops_gpu": 706, "software": "Megatron-Bridge / NeMo 26.08 container",
          "assumed": [], "complete": True,
          "notes": "moe dispatcher backend=hybridep; token-dropless with forced expert load balancing (page footnote)"}


def test_bridge_row_reads_deepseek_v4():
    from cosearch.runs.rows import Refused, describe_row
    d = describe_row(V4_ROW)
    ref = preset("deepseek-v4-flash")
    assert d.model.compressed_attention == ref.compressed_attention
    # the recipe builds the model from the HF config, whose one MTP layer the bridge keeps
    assert (d.model.hyper_connections, d.model.head_dim, d.model.mtp_layers) == (4, 512, 1)
    assert d.model.num_params() == ref.with_(mtp_layers=1).num_params()
    assert d.spec.expert_parallel == 64 and d.measured_tok_s_per_chip == 7776
    with pytest.raises(Refused, match="DeepSeek-V4-Flash"):
        describe_row({**V4_ROW, "layers": 61})


def test_model_flops_count_the_compressed_core():
    """6 N + 3 L x the core's forward FLOPs per token (not 12 L h s)."""
    m = preset("deepseek-v4-flash")
    core = m.compressed_attention.core_flops_per_token(4096, 64, 512)
    assert m.flops_per_token() == pytest.approx(6.0 * m.num_params(active=True) + 3 * 43 * core)
    dense = preset("gpt3-1.3b")
    assert dense.flops_per_token() == 6.0 * dense.num_params(active=True) + 12 * 24 * 2048 * 2048


def test_window_keys_mask_cross_check():
    i = np.arange(50)
    mask = (i[None, :] <= i[:, None]) & (i[:, None] - i[None, :] < 7)
    assert window_pairs(50, 7) == mask.sum()


def test_each_layers_core_and_the_pipeline_warning():
    """Layer by layer, by enumeration; a pipeline of V4 layers is priced with the mean layer and
    says how far a stage's own attention is from it."""
    from cosearch import cluster
    from cosearch.hardware import H100
    from cosearch.plan import PlanSpec, evaluate
    ca = _tiny_ca()
    s = 37
    per = ca.layer_core_flops(s, 4, 8)
    for r, got in zip(ca.ratios, per):
        index = sum((t + 1) // 4 for t in range(s)) if r == 4 else 0
        assert got == pytest.approx((4 * 4 * 8 * _keys_by_mask(s, 5, r, 3) + 2 * 2 * 4 * index) / s, rel=1e-12)
    assert sum(per) / len(per) == pytest.approx(ca.core_flops_per_token(s, 4, 8), rel=1e-12)
    m = _tiny(ca, s=64)
    spec = PlanSpec(dp=1, tp=1, pp=2, microbatch=1, flash_attention=True)
    with pytest.warns(UserWarning, match="priced with the mean layer"):
        evaluate(m, H100, cluster.dgx_h100(1), spec, 4)


def test_maxtext_named_attention_tensors_are_refused():
    from cosearch.memory import maxtext_saved_bytes
    m = _tiny(_tiny_ca(ratios=(4, 8)), s=64)
    with pytest.raises(ValueError, match="compressed attention's projections"):
        maxtext_saved_bytes(m, 1, 1, False, {"query_proj": "device"})
    dev, off = maxtext_saved_bytes(m, 1, 1, False, {"decoder_layer_input": "device"})
    assert (dev, off) == (64 * 16 * 2, 0.0)
    assert maxtext_saved_bytes(m.with_(hyper_connections=4), 1, 1, False, {"decoder_layer_input": "device"})[0] == \
        4 * 64 * 16 * 2                  # the layer's input is its four streams
