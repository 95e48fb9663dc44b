"""Query/key norms (Qwen3, Gemma 3, OLMo 2, Llama 4) and multi-head latent attention's latent
norms: the ops, the activations they keep, the parameters, and every reader that names them.

The expected numbers are counted by hand from the models' definitions (transformers'
``modeling_qwen3.py``: ``q_norm`` / ``k_norm`` of ``head_dim`` applied to the projected q and k
before RoPE; DeepSeek's ``q_a_layernorm`` / ``kv_a_layernorm`` on the latents) and from what a
layer keeps for its backward (Korthikanti et al.'s accounting, one tensor at a time)."""

import pytest

from cosearch import graph, models
from cosearch.memory import layer_activation_bytes
from cosearch.models import ModelConfig, from_hf_config

#: A small model whose heads are wider than hidden / heads (as Qwen3's: 32 x 128 over 2,048).
SMALL = ModelConfig("qk", 2, 256, 4, 512, 1000, 128, kv_heads=2, head_size=96, activation="swiglu",
                    norm="rmsnorm", position="rotary", bias=False, tie_embeddings=False, dropout=False)


def _ops(m, tp=1, **kw):
    return {o.name: (i, o) for i, o in enumerate(graph.build(m, tp, 1, "fwd", flash_attention=True, **kw).ops)}


@pytest.mark.parametrize("tp", [1, 2])
def test_qk_norm_ops_sit_between_the_projection_and_rope(tp):
    """q_norm over this rank's 128 tokens x (4 / tp) heads x 96, k_norm over its (2 / tp) K heads;
    both read the qkv projection and feed RoPE; an RMSNorm reads and writes each element once
    (2 bytes in bf16) at 4 operations an element."""
    ops = _ops(SMALL.with_(qk_norm="head"), tp, sequence_parallel=tp > 1)
    iq, q = ops["q_norm"]
    ik, k = ops["k_norm"]
    assert (q.elements, k.elements) == (128 * (4 // tp) * 96, 128 * (2 // tp) * 96)
    assert (q.bytes_read, q.bytes_written, q.ops_per_element) == (2 * q.elements, 2 * q.elements, 4.0)
    assert q.deps == k.deps == (ops["qkv"][0],)
    assert set(ops["rotary"][1].deps) == {iq, ik}
    assert "q_norm" not in _ops(SMALL)
    # no RoPE: the attention core reads the normed q and k
    nope = _ops(SMALL.with_(qk_norm="head", position="none"))
    assert {nope["q_norm"][0], nope["k_norm"][0]} <= set(nope["attn_core"][1].deps)
    # a LayerNorm model norms them with LayerNorm's 5 operations an element
    assert _ops(SMALL.with_(qk_norm="head", norm="layernorm"))["q_norm"][1].ops_per_element == 5.0


def test_qk_norms_have_backward_ops_and_eager_bytes():
    """Each norm has its gradient op; run eagerly (torchtitan's ``nn.RMSNorm``) each prices the
    measured eager RMSNorm's bytes, as the layer's own norms."""
    m = SMALL.with_(qk_norm="head")
    fwd, bwd = graph.build_pair(m, 1, 1, flash_attention=True)
    assert {"q_norm.grad", "k_norm.grad"} <= {o.name for o in bwd.ops}
    eager = {o.name: o for o in graph.build(m, 1, 1, "fwd", flash_attention=True, elementwise="eager").ops}
    per = graph.EAGER_ELEMENTWISE_BYTES["rmsnorm"]
    for name in ("q_norm", "k_norm", "norm1"):
        o = eager[name]
        assert o.bytes_read == pytest.approx(per[0] * o.elements)
        assert o.bytes_written == pytest.approx(per[1] * o.elements)


def test_activations_count_the_projected_heads_and_the_norm_inputs():
    """Per token with nothing recomputed (bf16, flash attention, no dropout, tp 1): the two norm
    inputs and outputs 4 x 256 x 2; Q, K, V 2 x (4 x 96 + 2 x 2 x 96); the attention output
    2 x 4 x 96; the gated MLP's two up projections and activation 3 x 512 x 2; the fp32
    log-sum-exp 4 x 4: 7,440 bytes.  The q/k norms keep their inputs, 2 x (4 + 2) x 96 more."""
    s = 128
    assert layer_activation_bytes(SMALL, 1, 1, flash_attention=True) == pytest.approx(7440 * s)
    assert layer_activation_bytes(SMALL.with_(qk_norm="head"), 1, 1, flash_attention=True) == \
        pytest.approx((7440 + 1152) * s)
    # four ranks and two K/V heads: each rank holds its Q head and one K/V head (replicated, as
    # Megatron-Core and the layer graph do): norms 4 x 256 x 2 whole, then Q, K, V 2 x 3 x 96, the
    # attention output 2 x 96, the MLP 3 x 512 x 2 / 4, the log-sum-exp 4 x 4 / 4
    assert layer_activation_bytes(SMALL, 4, 1, flash_attention=True) == \
        pytest.approx((2048 + 576 + 192 + 768 + 4) * s)
    # split over two ranks with sequence parallelism: all of it halves
    assert layer_activation_bytes(SMALL.with_(qk_norm="l2"), 2, 1, sequence_parallel=True, flash_attention=True) == \
        pytest.approx((7440 + 1152) * s / 2)


def test_mla_latent_norms_and_their_activations():
    """MLA (q rank 64, kv rank 32, rope 16, head 48, 4 heads): the latent norms over T x 64 and
    T x 32 feed the up projections; per token the layer keeps Q and K of 4 x (48 + 16) and V of
    4 x 48 (2 bytes each: 1,408), the attention output 2 x 4 x 48 (384), each latent twice (the
    norm's input and output: 2 x 2 x 96 = 384) besides the norms and MLP (4 x 256 x 2 + 3 x 512 x 2
    + 4 x 4 = 5,136): 7,312 bytes.  Recomputing mla_up_proj drops Q, K, V and the normed latents
    (1,408 + 192)."""
    m = SMALL.with_(head_size=48, mla=(64, 32, 16))
    ops = _ops(m)
    (iq, q), (ik, k) = ops["q_latent_norm"], ops["kv_latent_norm"]
    assert (q.elements, k.elements) == (128 * 64, 128 * 32)
    assert ops["q_up"][1].deps == (iq,) and ops["kv_up"][1].deps == (ik,)
    assert q.deps == (ops["q_down"][0],) and k.deps == (ops["kv_down"][0],)
    assert layer_activation_bytes(m, 1, 1, flash_attention=True) == pytest.approx(7312 * 128)
    assert layer_activation_bytes(m, 1, 1, recompute="selective", modules=("mla_up_proj",), flash_attention=True) == \
        pytest.approx((7312 - 1408 - 192) * 128)
    assert {"q_latent_norm", "kv_latent_norm"} <= set(graph.RECOMPUTE_MODULES["mla_up_proj"])


def test_qk_norm_field_and_parameters():
    """``True`` / ``False`` name the per-head norm and none; a per-head RMSNorm adds 2 x 96
    weights a layer, a LayerNorm twice that, OLMo 2's full-width norm (4 + 2) x 96, L2 none; an
    unknown kind and a q/k norm on latent attention are refused."""
    assert SMALL.with_(qk_norm=True).qk_norm == "head" and SMALL.with_(qk_norm=False).qk_norm == "none"
    base = SMALL.num_params()
    assert SMALL.with_(qk_norm="head").num_params() - base == 2 * 2 * 96
    assert SMALL.with_(qk_norm="head", norm="layernorm").num_params() - SMALL.with_(norm="layernorm").num_params() \
        == 2 * 2 * 2 * 96
    assert SMALL.with_(qk_norm="full").num_params() - base == 2 * 6 * 96
    assert SMALL.with_(qk_norm="l2").num_params() == base
    with pytest.raises(ValueError, match="choose one of"):
        SMALL.with_(qk_norm="rms")
    with pytest.raises(ValueError, match="latents instead"):
        SMALL.with_(head_size=48, mla=(64, 32, 16), qk_norm="head")
    assert models.preset("qwen3-30b-a3b").qk_norm == "head" and models.preset("llama4-scout").qk_norm == "l2"
    assert models.preset("llama4-maverick").qk_norm == "none"


QWEN3_8B = {"architectures": ["Qwen3ForCausalLM"], "attention_bias": False, "head_dim": 128, "hidden_act": "silu",
            "hidden_size": 4096, "intermediate_size": 12288, "max_position_embeddings": 40960, "model_type": "qwen3",
            "num_attention_heads": 32, "num_hidden_layers": 36, "num_key_value_heads": 8, "rms_norm_eps": 1e-06,
            "rope_theta": 1000000, "tie_word_embeddings": False, "vocab_size": 151936}


def test_hf_configs_name_their_qk_norms():
    """Qwen3-8B's config.json (Qwen/Qwen3-8B): per-head q/k norms, no biases (only
    ``attention_bias`` says so; it was read as biased); 8.2B parameters (its model card), counted
    by hand: embeddings and head 2 x 151,936 x 4,096, per layer the projections 4,096 x (4,096 +
    2 x 1,024) + 4,096 x 4,096, the MLP 3 x 4,096 x 12,288, two norms of 4,096 and the q/k norms
    2 x 128, and the final norm.  OLMo 2 norms the whole q and k; Llama 4's ``use_qk_norm`` is a
    weightless L2 norm; a non-boolean switch is refused."""
    m = from_hf_config(QWEN3_8B, seq_len=4096)
    assert (m.qk_norm, m.bias) == ("head", False)
    per_layer = 4096 * (4096 + 2 * 1024) + 4096 * 4096 + 3 * 4096 * 12288 + 2 * 4096 + 2 * 128
    assert m.num_params() == 2 * 151936 * 4096 + 36 * per_layer + 4096
    assert m.num_params() == pytest.approx(8.2e9, rel=0.01)
    olmo = dict(QWEN3_8B, model_type="olmo2")
    assert from_hf_config(olmo, seq_len=4096).qk_norm == "full"
    assert from_hf_config(dict(QWEN3_8B, model_type="cohere", use_qk_norm=True), seq_len=4096).qk_norm == "head"
    assert from_hf_config(dict(QWEN3_8B, model_type="llama", use_qk_norm=False), seq_len=4096).qk_norm == "none"
    with pytest.raises(ValueError, match="use_qk_norm"):
        from_hf_config(dict(QWEN3_8B, use_qk_norm="yes"), seq_len=4096)


QWEN3_LINE = ("--tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 --expert-model-parallel-size 8 "
              "--micro-batch-size 1 --global-batch-size 256 --bf16 --num-experts 128 --moe-router-topk 8 "
              "--moe-ffn-hidden-size 768")
QWEN3_MODEL = (" --num-layers 48 --hidden-size 2048 --num-attention-heads 32 --group-query-attention "
               "--num-query-groups 4 --kv-channels 128 --seq-length 4096 --vocab-size 151936 --swiglu "
               "--normalization RMSNorm --ffn-hidden-size 6144 --disable-bias-linear "
               "--untie-embeddings-and-output-weights --attention-dropout 0 --hidden-dropout 0 "
               "--position-embedding-type rope")


def test_megatron_lines_read_qk_norms():
    """``--qk-layernorm`` is Megatron-Core's per-head ``TENorm``, ``--qk-l2-norm`` its ``L2Norm``
    (``gpt_layer_specs.py``): Qwen3's line reads against its preset and builds the same model on
    its own; both flags at once, or a flag that contradicts the preset, are refused."""
    from cosearch.runs.megatron import parse_megatron_args
    from cosearch.runs.nemo import read_megatron_bridge
    ref = models.preset("qwen3-30b-a3b")
    assert parse_megatron_args(QWEN3_LINE + " --qk-layernorm", ref, 512).model.qk_norm == "head"
    own = parse_megatron_args(QWEN3_LINE + QWEN3_MODEL + " --qk-layernorm", None, 512).model
    assert own.qk_norm == "head" and own.num_params() == ref.num_params()
    assert parse_megatron_args(QWEN3_LINE + QWEN3_MODEL, None, 512).model.qk_norm == "none"
    assert parse_megatron_args(QWEN3_LINE + QWEN3_MODEL + " --qk-l2-norm", None, 512).model.qk_norm == "l2"
    with pytest.raises(ValueError, match="one way"):
        parse_megatron_args(QWEN3_LINE + " --qk-layernorm --qk-l2-norm", ref, 512)
    with pytest.raises(ValueError, match="contradicts --model qwen3-30b-a3b"):
        parse_megatron_args(QWEN3_LINE + " --qk-l2-norm", ref, 512)
    bridge = read_megatron_bridge({"model": {"expert_model_parallel_size": 8, "num_moe_experts": 128,
                                             "moe_router_topk": 8, "moe_ffn_hidden_size": 768, "qk_layernorm": True},
                                   "train": {"micro_batch_size": 1, "global_batch_size": 256}}, model=ref)
    assert bridge.model.qk_norm == "head"


def test_megatron_mla_reads_qk_layernorm_as_the_latent_norms():
    """Under ``--multi-latent-attention`` Megatron-Core's ``--qk-layernorm`` norms the latents
    inside the up projections (DeepSeek-V3's recipes set it): read, not refused; without it the
    line is priced with DeepSeek's latent norms and says so; ``--qk-l2-norm`` is refused, as
    Megatron-Core asserts."""
    from cosearch.runs.megatron import parse_megatron_args
    m = models.preset("deepseek-v3")
    line = ("--tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 --expert-model-parallel-size 64 "
            "--micro-batch-size 1 --global-batch-size 1024 --bf16 --multi-latent-attention --q-lora-rank 1536 "
            "--kv-lora-rank 512 --qk-head-dim 128 --qk-pos-emb-head-dim 64 --v-head-dim 128")
    with_norm = parse_megatron_args(line + " --qk-layernorm", m, 512)
    assert with_norm.model.mla == (1536, 512, 64) and with_norm.model.qk_norm == "none"
    assert not any("norms no latents" in a for a in with_norm.assumed)
    assert any("norms no latents" in a for a in parse_megatron_args(line, m, 512).assumed)
    with pytest.raises(ValueError, match="not supported"):
        parse_megatron_args(line + " --qk-l2-norm", m, 512)


def test_validation_rows_carry_their_qk_norms():
    """A Qwen3 row (arch "qk-norm") prices per-head norms; Llama 4 Scout's row ("qk-norm, chunked
    attention") its weightless L2 norm."""
    from cosearch.runs import rows
    from tests.test_runs_rows import QWEN3_ROW
    assert rows.describe_row(QWEN3_ROW).model.qk_norm == "head"
    scout = dict(QWEN3_ROW, id="tpu-recipes/v5p/Llama4-Scout-17B-16E-Maxtext/v5p-1024",
                 model="Llama-4-Scout-17B-16E (109B)", layers=48, hidden=5120, heads=40, kv_heads=8, moe_ffn=8192,
                 num_experts=16, experts_per_token=1, shared_experts=1, vocab=202048, seq=8192,
                 arch="MoE (top-1 routed + 1 shared), GQA, qk-norm, chunked attention + NoPE every 4th layer")
    d = rows.describe_row(scout)
    assert d.model.qk_norm == "l2" and any("L2 norm of q and k" in a for a in d.assumed)


def test_megatron_lms_own_deepseek_v3_line_reads(tmp_path):
    """Megatron-LM's own DeepSeek-V3 training line (tests/data/runs/megatron_deepseek_v3.args,
    PROVENANCE.md) reads whole against the deepseek-v3 preset: MLA with ``--qk-layernorm`` (the
    latent norms), HybridEP's flex dispatcher, one MTP layer, ep 8, mb 4; with the script's
    Megatron-FSDP additions it shards to ZeRO-3 (``optim_grads_params``); ZeRO-2, an unknown
    strategy and a strategy without Megatron-FSDP are refused by name, as from a Bridge config."""
    from pathlib import Path

    from cosearch.runs import read_config
    line = Path(__file__).parent / "data" / "runs" / "megatron_deepseek_v3.args"
    m = models.preset("deepseek-v3")
    rc = read_config(line, model=m)
    assert (rc.plan["expert_parallel"], rc.plan["microbatch"], rc.global_batch) == (8, 4, 2048)
    assert (rc.model.mla, rc.model.mtp_layers, rc.model.qk_norm) == ((1536, 512, 64), 1, "none")
    assert (rc.engine.moe_dispatcher, rc.engine.moe_flex_backend) == ("flex", "hybridep")
    assert not any("norms no latents" in a for a in rc.assumed)
    # the CLI's path (cosearch plan --from LINE --model deepseek-v3): the line's MTP depth is the
    # run's, kept on the given model, not a contradiction
    from cosearch.runs import read_configs
    assert read_configs([line], model=m).model.mtp_layers == 1
    # the script's Megatron-FSDP additions (on by default there): ZeRO-3 sharding, its flags read
    fsdp = tmp_path / "fsdp.args"
    fsdp.write_text(line.read_text() + "\n--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads_params "
                    "--no-gradient-accumulation-fusion --use-distributed-optimizer --calculate-per-token-loss "
                    "--init-model-with-meta-device --ckpt-format fsdp_dtensor --grad-reduce-in-bf16 "
                    "--fsdp-double-buffer --use-nccl-ub\n")
    rf = read_config(fsdp, model=m)
    assert rf.plan["zero"] == 3 and any("Megatron-FSDP, optim_grads_params" in a for a in rf.assumed)
    assert "fp32-grad-reduce" not in rf.engine.name           # --grad-reduce-in-bf16
    for bad, why in (("--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads", "ZeRO-2"),
                     ("--use-megatron-fsdp --data-parallel-sharding-strategy full", "Megatron accepts"),
                     ("--data-parallel-sharding-strategy optim", "give --use-megatron-fsdp")):
        f = tmp_path / "bad.args"
        f.write_text(line.read_text() + "\n" + bad + "\n")
        with pytest.raises(ValueError, match=why):
            read_config(f, model=m)
    from cosearch.runs.nemo import read_megatron_bridge
    bridge = read_megatron_bridge({"model": {"tensor_model_parallel_size": 1},
                                   "ddp": {"use_megatron_fsdp": True, "data_parallel_sharding_strategy": "optim_grads_params"},
                                   "train": {"micro_batch_size": 1, "global_batch_size": 8}}, model=models.preset("llama3-8b"))
    assert bridge.plan["zero"] == 3


def test_megatron_cores_attention_projection_keeps_its_bf16_input():
    """Megatron-Core (core 0.15+, ``set_save_original_input(self.linear_proj)``) keeps no FP8 copy
    of the attention projection's input under a current-scaling recipe: a pp-1 plan's stage holds
    one microbatch of every layer, so its memory is num_layers x s x mb x heads x head_dim / tp x 1
    byte under the engine without the switch; under delayed scaling, where Megatron-Core keeps the
    copy, the two engines agree."""
    from dataclasses import replace

    from cosearch import cluster, engine
    from cosearch.plan import PlanSpec, evaluate
    m = SMALL.with_(num_layers=4, seq_len=256)
    cl = cluster.Cluster(2)
    core = engine.MEGATRON_CORE
    older = replace(core, name="core-with-cast", attn_proj_original_input=False)
    assert layer_activation_bytes(m, 1, 1, flash_attention=True, precision="fp8") - \
        layer_activation_bytes(m, 1, 1, flash_attention=True, precision="fp8", proj_input_cast=False) == 256 * 4 * 96
    for recipe, want in (("tensorwise", 4 * 256 * 2 * 4 * 96 / 2), ("delayed", 0.0)):
        spec = PlanSpec(1, 2, 1, 2, flash_attention=True, precision="fp8", scaling_recipe=recipe)
        new, old = (evaluate(m, "H100", cl, spec, 2, engine=e).memory_per_chip_bytes[0] for e in (core, older))
        assert old - new == pytest.approx(want), recipe


@pytest.mark.parametrize("extra,what", [
    ({"model_type": "qwen3_next", "full_attention_interval": 4}, "Gated DeltaNet"),
    ({"model_type": "qwen3_next", "layer_types": ["linear_attention"] * 3 + ["full_attention"]}, "linear_attention"),
    ({"model_type": "deepseek_v32", "index_topk": 2048}, "DeepSeek Sparse Attention"),
    ({"model_type": "minimax", "attn_type_list": [0, 0, 0, 1]}, "lightning"),
    ({"model_type": "nemotron_h", "hybrid_override_pattern": "M-M*"}, "Mamba-2"),
    ({"model_type": "jamba", "attn_layer_period": 8}, "Mamba"),
])
def test_hf_configs_with_other_token_mixers_are_refused(extra, what):
    """Layers that mix tokens by something other than softmax attention (linear attention, state
    spaces, a sparse indexer) would be priced as attention: refused by name.  MiniMax's list of
    all-softmax layers (1s) and the attention kinds cosearch prices read."""
    cfg = dict(QWEN3_8B, num_hidden_layers=4, **extra)
    with pytest.raises(ValueError, match=what):
        from_hf_config(cfg, seq_len=4096)
    assert from_hf_config(dict(QWEN3_8B, num_hidden_layers=4, model_type="minimax", attn_type_list=[1] * 4),
                          seq_len=4096).num_layers == 4
    assert from_hf_config(dict(QWEN3_8B, num_hidden_layers=4, sliding_window=1024,
                               layer_types=["sliding_attention", "full_attention"] * 2), seq_len=4096).sliding_layers == 2


def test_mla_under_sequence_parallelism_gathers_its_latents():
    """Megatron-Core's MLA under sequence parallelism (``multi_latent_attention.py``: the
    duplicated down projections give "[s / TP, b, q_lora_rank]"; the up projections'
    ``LayerNormLinear`` gathers): at tp 2 the down projections and latent norms run on the rank's
    64 of 128 rows, the normed q latent (64 wide) and kv latent with the key's rope part (32 + 16)
    are gathered, 128 x 64 and 128 x 48 elements of 2 bytes, and the layer input is not; without
    sequence parallelism nothing is gathered and the down projections see all 128 rows.  Under FP8
    the gathers carry the latents' one-byte casts, and the up projections cast nothing more."""
    m = SMALL.with_(head_size=48, mla=(64, 32, 16))
    ops = {o.name: o for o in graph.build(m, 2, 1, "fwd", flash_attention=True, sequence_parallel=True).ops}
    assert "allgather_attn" not in ops and ops["reducescatter_attn"].kind == "reducescatter"
    assert (ops["q_down"].m, ops["kv_down"].m, ops["q_up"].m, ops["kv_up"].m) == (64, 64, 128, 128)
    assert (ops["q_latent_norm"].elements, ops["kv_latent_norm"].elements) == (64 * 64, 64 * 32)
    assert (ops["allgather_q_latent"].bytes_read, ops["allgather_kv_latent"].bytes_read) == (128 * 64 * 2, 128 * 48 * 2)
    plain = {o.name: o for o in graph.build(m, 2, 1, "fwd", flash_attention=True).ops}
    assert not any(n.startswith("allgather") for n in plain) and plain["q_down"].m == 128
    f8 = {o.name: o for o in graph.build(m, 2, 1, "fwd", flash_attention=True, sequence_parallel=True,
                                         precision="fp8").ops}
    assert f8["allgather_q_latent"].bytes_read == 128 * 64 * 1
    assert "q_up.cast" not in f8 and "allgather_q_latent.cast" in f8 and "q_down.cast" in f8
    assert {"allgather_q_latent", "allgather_kv_latent"} <= set(graph.RECOMPUTE_MODULES["mla_up_proj"])


def test_partial_rotary_embeddings():
    """RoPE over a share of each head (GPT-NeoX's rotary_pct 0.25, GPT-J's rotary_dim 64 of 256,
    Megatron's --rotary-percent): the rotary op covers that share of q and k; a share outside
    (0, 1], one without RoPE, or one on MLA is refused, and Megatron's own reading of it (ignored
    without RoPE) is followed."""
    from cosearch.runs.megatron import parse_megatron_args
    from cosearch.runs.nemo import read_megatron_bridge
    half = {o.name: o for o in graph.build(SMALL.with_(rotary_fraction=0.5), 1, 1, "fwd", flash_attention=True).ops}
    assert half["rotary"].elements == 128 * (4 + 2) * 96 * 0.5
    for bad, why in ((dict(rotary_fraction=0.0), r"\(0, 1\]"), (dict(rotary_fraction=1.5), r"\(0, 1\]"),
                     (dict(rotary_fraction=0.5, position="learned"), "needs position 'rotary'"),
                     (dict(rotary_fraction=0.5, head_size=48, mla=(64, 32, 16)), "rope dimensions")):
        with pytest.raises(ValueError, match=why):
            SMALL.with_(**bad)
    neox = {"model_type": "gpt_neox", "hidden_size": 6144, "intermediate_size": 24576, "num_attention_heads": 64,
            "num_hidden_layers": 44, "vocab_size": 50432, "max_position_embeddings": 2048, "rotary_pct": 0.25,
            "tie_word_embeddings": False}
    gptj = {"model_type": "gptj", "n_embd": 4096, "n_head": 16, "n_layer": 28, "vocab_size": 50400,
            "n_positions": 2048, "rotary_dim": 64}
    assert from_hf_config(neox, seq_len=2048).rotary_fraction == 0.25
    assert from_hf_config(gptj, seq_len=2048).rotary_fraction == 64 / 256
    assert from_hf_config(QWEN3_8B, seq_len=4096).rotary_fraction == 1.0
    line = ("--tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 --micro-batch-size 1 --global-batch-size 8 "
            "--bf16 --num-layers 2 --hidden-size 256 --num-attention-heads 4 --seq-length 128 --vocab-size 1000 ")
    assert parse_megatron_args(line + "--position-embedding-type rope --rotary-percent 0.5", None, 8).model \
        .rotary_fraction == 0.5
    ignored = parse_megatron_args(line + "--rotary-percent 0.5", None, 8)
    assert ignored.model.rotary_fraction == 1.0 and any("Megatron ignores it" in a for a in ignored.assumed)
    llama = models.preset("llama3-8b")
    with pytest.raises(ValueError, match="contradicts --model llama3-8b"):
        parse_megatron_args("--micro-batch-size 1 --global-batch-size 8 --rotary-percent 0.5", llama, 8)
    bridge = read_megatron_bridge({"model": {"rotary_percent": 1.0}, "train": {"micro_batch_size": 1,
                                                                                "global_batch_size": 8}}, model=llama)
    assert bridge.model.rotary_fraction == 1.0


#: A dense Megatron-Bridge row of the validation schema (modern_runs.jsonl's first row's fields).
DENSE_ROW = {"id": "mbridge-26.06/LLAMA3.1_405B/GB300/FP8/256", "model": "Llama-3.1-405B", "arch": "dense GQA SwiGLU",
             "layers": 126, "hidden": 16384, "heads": 128, "kv_heads": 8, "ffn": 53248, "vocab": 128256, "seq": 8192,
             "accel": "GB300-NVL72 (288GB)", "gpus_per_node": 4, "n_gpus": 256, "gbs": 1536, "mbs": 1, "ga": 192,
             "tp": 4, "pp": 8, "vp": 4, "cp": 1, "ep": 1, "dp": 8, "zero_group": 8, "sp": True, "zero": 1,
             "recompute": "none", "precision": "FP8 (per-tensor current scaling)", "tok_s_gpu": 1048.0,
             "software": "NeMo 26.06 container (Megatron-Bridge + Megatron-Core)", "assumed": ["MB-cfg", "Z1", "SP"]}


def test_dense_rows_read_their_attention_features():
    """A dense row's "qk-norm" and "alternating sliding-window(W)" are read as an MoE row's are
    (they were ignored for dense rows); a sliding-window layout cosearch does not model is refused."""
    from cosearch.runs import rows
    plain = rows.describe_row(DENSE_ROW).model
    qk = rows.describe_row(dict(DENSE_ROW, arch="dense GQA SwiGLU, qk-norm")).model
    assert (plain.qk_norm, qk.qk_norm) == ("none", "head") and (qk.bias, qk.activation) == (plain.bias, "swiglu")
    win = rows.describe_row(dict(DENSE_ROW, arch="dense GQA SwiGLU, alternating sliding-window(4096)/full")).model
    assert (win.sliding_window, win.sliding_layers) == (4096, 63)
    with pytest.raises(rows.Refused, match="sliding-window layout"):
        rows.describe_row(dict(DENSE_ROW, arch="dense GQA SwiGLU, sliding-window(4096)"))
    # Gemma's gated GELU and BLOOM's ALiBi (no position embedding) were read as a plain GELU MLP and RoPE
    gemma = rows.describe_row(dict(DENSE_ROW, arch="dense MHA GeGLU")).model
    bloom = rows.describe_row(dict(DENSE_ROW, arch="dense MHA GeLU, ALiBi")).model
    assert (gemma.activation, gemma.norm, bloom.position, bloom.activation) == ("geglu", "rmsnorm", "none", "gelu")
    # layers that are not softmax attention would be priced as attention: refused by name
    for arch in ("hybrid Mamba-Transformer, GQA", "dense GQA, linear attention 3 of 4 layers (Gated DeltaNet)"):
        with pytest.raises(rows.Refused, match="not modelled"):
            rows.describe_row(dict(DENSE_ROW, arch=arch))


QWEN3_30B = {"model_type": "qwen3_moe", "hidden_size": 2048, "intermediate_size": 6144, "num_attention_heads": 32,
             "num_key_value_heads": 4, "head_dim": 128, "num_hidden_layers": 48, "vocab_size": 151936,
             "max_position_embeddings": 40960, "rms_norm_eps": 1e-6, "rope_theta": 1e6, "hidden_act": "silu",
             "tie_word_embeddings": False, "num_experts": 128, "num_experts_per_tok": 8, "moe_intermediate_size": 768,
             "decoder_sparse_step": 1, "mlp_only_layers": [], "attention_bias": False}


def test_qwen_moe_layer_layouts():
    """Qwen3-30B-A3B's config.json reads as the qwen3-30b-a3b preset (q/k norms, no biases); its
    ``decoder_sparse_step`` k is one MoE layer in k, its ``mlp_only_layers`` the first layers dense
    (they were ignored: every layer priced as MoE); dense layers elsewhere are refused by name."""
    m = from_hf_config(QWEN3_30B, seq_len=4096)
    assert m == models.preset("qwen3-30b-a3b").with_(name=m.name)
    assert from_hf_config(dict(QWEN3_30B, decoder_sparse_step=2), seq_len=4096).moe_layer_step == 2
    assert from_hf_config(dict(QWEN3_30B, mlp_only_layers=[0, 1]), seq_len=4096).dense_layers == 2
    with pytest.raises(ValueError, match="not the first layers"):
        from_hf_config(dict(QWEN3_30B, mlp_only_layers=[5]), seq_len=4096)


def test_hf_configs_say_what_is_not_priced():
    """A config.json read as a run says what its model has that is not priced: Gemma 2's scores'
    soft-capping inside a fused attention kernel (its post norms and logit soft cap are priced
    since stop 75, tests/test_gemma.py), GPT-OSS's attention sinks, DeepSeek-V3's MTP modules
    (priced only where the run trains them); a plain Qwen3 config says nothing."""
    from cosearch.runs.hf import read_hf_config
    from tests.test_hf_configs import GEMMA2_9B
    gemma = " ".join(read_hf_config(GEMMA2_9B, seq_len=4096).assumed)
    assert "soft-capping" in gemma and "fused attention kernel" in gemma and "post-MLP norms" not in gemma
    from cosearch.runs.hf import hf_config_notes
    assert any("attention sinks" in n for n in hf_config_notes({"model_type": "gpt_oss"}))
    assert any("--mtp-num-layers" in n for n in hf_config_notes({"model_type": "deepseek_v3", "num_nextn_predict_layers": 1}))
    assert read_hf_config(QWEN3_8B, seq_len=4096).assumed == ()
