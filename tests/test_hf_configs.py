"""from_hf_config on real config.json contents against the published parameter counts (2%)."""

import warnings

import pytest

from cosearch.models import from_hf_config

L = {"hidden_act": "silu", "rms_norm_eps": 1e-5, "tie_word_embeddings": False}
CASES = {
    # name: (config.json fields, seq_len or None, published parameters)
    "gpt2": ({"model_type": "gpt2", "n_layer": 12, "n_embd": 768, "n_head": 12, "vocab_size": 50257,
              "n_positions": 1024, "n_ctx": 1024, "activation_function": "gelu_new"}, None, 124_439_808),
    "gpt-j-6b": ({"model_type": "gptj", "n_layer": 28, "n_embd": 4096, "n_head": 16, "rotary_dim": 64,
                  "vocab_size": 50400, "n_positions": 2048, "activation_function": "gelu_new",
                  "tie_word_embeddings": False}, None, 6_053_381_344),
    "gpt-neox-20b": ({"model_type": "gpt_neox", "num_hidden_layers": 44, "hidden_size": 6144,
                      "num_attention_heads": 64, "intermediate_size": 24576, "vocab_size": 50432,
                      "max_position_embeddings": 2048, "rotary_pct": 0.25, "hidden_act": "gelu",
                      "tie_word_embeddings": False, "use_parallel_residual": True}, None, 20_554_567_680),
    "opt-1.3b": ({"model_type": "opt", "num_hidden_layers": 24, "hidden_size": 2048, "num_attention_heads": 32,
                  "ffn_dim": 8192, "vocab_size": 50272, "max_position_embeddings": 2048,
                  "activation_function": "relu", "word_embed_proj_dim": 2048}, None, 1_315_758_080),
    "bloom-560m": ({"model_type": "bloom", "n_layer": 24, "hidden_size": 1024, "n_head": 16,
                    "vocab_size": 250880}, 2048, 559_214_592),
    "llama-2-7b": ({"model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008,
                    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
                    "vocab_size": 32000, "max_position_embeddings": 4096, **L}, None, 6_738_415_616),
    "llama-3-8b": ({"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
                    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
                    "vocab_size": 128256, "max_position_embeddings": 8192, "rope_theta": 500000.0, **L},
                   None, 8_030_261_248),
    "llama-3.1-8b": ({"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
                      "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
                      "vocab_size": 128256, "max_position_embeddings": 131072, "rope_theta": 500000.0,
                      "rope_scaling": {"rope_type": "llama3", "factor": 8.0}, **L}, 8192, 8_030_261_248),
    "mistral-7b": ({"model_type": "mistral", "hidden_size": 4096, "intermediate_size": 14336,
                    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
                    "vocab_size": 32000, "max_position_embeddings": 32768, "sliding_window": 4096, **L},
                   4096, 7_241_732_096),
    "qwen2-7b": ({"model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944,
                  "num_attention_heads": 28, "num_hidden_layers": 28, "num_key_value_heads": 4,
                  "vocab_size": 152064, "max_position_embeddings": 131072, **L}, 4096, 7_615_616_512),
    "falcon-7b": ({"model_type": "falcon", "hidden_size": 4544, "num_attention_heads": 71,
                   "num_hidden_layers": 32, "vocab_size": 65024, "multi_query": True, "parallel_attn": True,
                   "bias": False, "alibi": False, "new_decoder_architecture": False}, 2048, 6_921_720_704),
    "gemma-7b": ({"model_type": "gemma", "hidden_size": 3072, "intermediate_size": 24576,
                  "num_attention_heads": 16, "num_key_value_heads": 16, "head_dim": 256,
                  "num_hidden_layers": 28, "vocab_size": 256000, "max_position_embeddings": 8192,
                  "hidden_act": "gelu", "rms_norm_eps": 1e-6}, None, 8_537_680_896),
    "gemma-2b": ({"model_type": "gemma", "hidden_size": 2048, "intermediate_size": 16384,
                  "num_attention_heads": 8, "num_key_value_heads": 1, "head_dim": 256,
                  "num_hidden_layers": 18, "vocab_size": 256000, "max_position_embeddings": 8192,
                  "hidden_act": "gelu", "rms_norm_eps": 1e-6}, None, 2_506_172_416),
    "phi-2": ({"model_type": "phi", "hidden_size": 2560, "intermediate_size": 10240, "num_attention_heads": 32,
               "num_hidden_layers": 32, "vocab_size": 51200, "max_position_embeddings": 2048,
               "hidden_act": "gelu_new", "partial_rotary_factor": 0.4, "tie_word_embeddings": False},
              None, 2_779_683_840),
    "bert-base": ({"model_type": "bert", "hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
                   "intermediate_size": 3072, "vocab_size": 30522, "max_position_embeddings": 512,
                   "type_vocab_size": 2, "hidden_act": "gelu"}, None, 109_482_240),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_published_parameter_counts(name):
    cfg, seq, published = CASES[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = from_hf_config(cfg, name=name, seq_len=seq)
    assert m.num_params() == pytest.approx(published, rel=0.02), (name, m.num_params(), published)


def test_structure_follows_the_family():
    gemma = from_hf_config(CASES["gemma-7b"][0])
    assert gemma.head_dim == 256 and gemma.q_dim == 4096 and gemma.tie_embeddings
    falcon = from_hf_config(CASES["falcon-7b"][0], seq_len=2048)
    assert falcon.kv_heads == 1 and falcon.norms_per_layer == 1
    llama3 = from_hf_config(CASES["llama-3-8b"][0])
    assert llama3.kv_heads == 8 and llama3.gated and not llama3.tie_embeddings


def test_sequence_length_is_explicit_for_long_contexts():
    with pytest.raises(ValueError, match="seq_len"):
        from_hf_config(CASES["llama-3.1-8b"][0])
    with pytest.warns(UserWarning, match="context length 8192"):
        m = from_hf_config(CASES["llama-3-8b"][0])
    assert m.seq_len == 8192
    assert from_hf_config(CASES["llama-3.1-8b"][0], seq_len=4096).seq_len == 4096


MIXTRAL = {"model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
           "num_hidden_layers": 32, "num_key_value_heads": 8, "vocab_size": 32000, "rms_norm_eps": 1e-5,
           "rope_theta": 1e6, "max_position_embeddings": 32768, "num_local_experts": 8, "num_experts_per_tok": 2,
           "hidden_act": "silu", "tie_word_embeddings": False}
# Qwen/Qwen1.5-MoE-A2.7B config.json
QWEN_MOE = {"model_type": "qwen2_moe", "hidden_size": 2048, "intermediate_size": 5632, "moe_intermediate_size": 1408,
            "shared_expert_intermediate_size": 5632, "num_experts": 60, "num_experts_per_tok": 4,
            "num_attention_heads": 16, "num_key_value_heads": 16, "num_hidden_layers": 24, "vocab_size": 151936,
            "rms_norm_eps": 1e-6, "rope_theta": 1e6, "max_position_embeddings": 8192, "hidden_act": "silu",
            "tie_word_embeddings": False}
# deepseek-ai/DeepSeek-V3 config.json
DEEPSEEK_V3 = {"model_type": "deepseek_v3", "hidden_size": 7168, "intermediate_size": 18432,
               "moe_intermediate_size": 2048, "num_hidden_layers": 61, "num_attention_heads": 128,
               "num_key_value_heads": 128, "n_routed_experts": 256, "n_shared_experts": 1, "num_experts_per_tok": 8,
               "first_k_dense_replace": 3, "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_rope_head_dim": 64,
               "qk_nope_head_dim": 128, "v_head_dim": 128, "vocab_size": 129280, "rms_norm_eps": 1e-6,
               "rope_theta": 10000, "max_position_embeddings": 163840, "hidden_act": "silu",
               "tie_word_embeddings": False}


@pytest.mark.parametrize("cfg,total,active", [(MIXTRAL, 46.7e9, 12.9e9), (QWEN_MOE, 14.3e9, 2.7e9),
                                              (DEEPSEEK_V3, 671e9, 37e9)])
def test_moe_configs_match_published_sizes(cfg, total, active):
    """Published totals and active counts: Mixtral paper (46.7B / 12.9B), the Qwen1.5-MoE-A2.7B
    model card (14.3B / 2.7B), the DeepSeek-V3 report (671B / 37B without the MTP module)."""
    m = from_hf_config(cfg, seq_len=4096)
    assert m.num_params() == pytest.approx(total, rel=0.02)
    assert m.num_params(active=True) == pytest.approx(active, rel=0.03)


def test_gpt_oss_120b_preset_matches_its_model_card():
    """openai/gpt-oss-120b: 116.83B parameters, 5.13B active per token without the input embedding
    (a lookup; the model card's count), every other layer a 128-token window."""
    from cosearch import models
    m = models.preset("gpt-oss-120b")
    assert m.num_params() == pytest.approx(116.83e9, rel=0.002)
    assert m.num_params(active=True) - m.vocab * m.hidden == pytest.approx(5.13e9, rel=0.01)
    assert (m.sliding_window, m.sliding_layers, m.num_layers) == (128, 18, 36)


def test_moe_presets_match_from_hf_config():
    from cosearch import models
    for name, cfg in (("mixtral-8x7b", MIXTRAL), ("deepseek-v3", DEEPSEEK_V3)):
        m = from_hf_config(cfg, seq_len=4096)
        assert models.preset(name).num_params() == m.num_params()
        assert models.preset(name).num_params(active=True) == m.num_params(active=True)
    assert models.preset("grok-1").num_params() == pytest.approx(314e9, rel=0.01)     # xAI's release


def test_refused_with_a_reason():
    with pytest.raises(ValueError, match="expert count"):
        from_hf_config(dict(MIXTRAL, model_type="qwen2_moe", num_local_experts=None), seq_len=4096)
    with pytest.raises(ValueError, match="num_experts_per_tok"):
        from_hf_config(dict(MIXTRAL, num_experts_per_tok=None), seq_len=4096)
    for enc_dec in ({"model_type": "t5", "d_model": 512, "num_layers": 6, "num_heads": 8, "vocab_size": 32128,
                     "is_encoder_decoder": True},
                    {"model_type": "bart", "d_model": 768, "encoder_layers": 6, "vocab_size": 50265}):
        with pytest.raises(ValueError, match="encoder-decoder"):
            from_hf_config(enc_dec, seq_len=512)
    with pytest.raises(ValueError, match="positive integer"):
        from_hf_config(dict(CASES["gpt2"][0], n_embd="768"))
    with pytest.raises(ValueError, match="positive integer"):
        from_hf_config(dict(CASES["gpt2"][0], n_layer=12.5))
    with pytest.raises(ValueError, match="missing 'num_hidden_layers'"):
        from_hf_config({"hidden_size": 8, "num_attention_heads": 2, "vocab_size": 3})


# google/gemma-2-9b and google/gemma-3-1b-pt config.json (the fields that size the model)
GEMMA2_9B = {"model_type": "gemma2", "hidden_size": 3584, "intermediate_size": 14336, "num_attention_heads": 16,
             "num_key_value_heads": 8, "head_dim": 256, "num_hidden_layers": 42, "vocab_size": 256000,
             "max_position_embeddings": 8192, "sliding_window": 4096, "hidden_activation": "gelu_pytorch_tanh",
             "rms_norm_eps": 1e-6, "query_pre_attn_scalar": 256, "attn_logit_softcapping": 50.0}
GEMMA3_1B = {"model_type": "gemma3_text", "hidden_size": 1152, "intermediate_size": 6912, "num_attention_heads": 4,
             "num_key_value_heads": 1, "head_dim": 256, "num_hidden_layers": 26, "vocab_size": 262144,
             "max_position_embeddings": 32768, "sliding_window": 512, "hidden_activation": "gelu_pytorch_tanh",
             "rms_norm_eps": 1e-6, "query_pre_attn_scalar": 256}


def test_gemma2_and_gemma3_sizes():
    """Published counts: Gemma-2-9B 9,241,705,984 and Gemma-3-1B 999,885,952 (the HF model pages'
    safetensors totals).  Before: 7.08B and 0.79B (their MLPs read as ungated)."""
    g2 = from_hf_config(GEMMA2_9B, seq_len=4096)
    assert g2.num_params() == pytest.approx(9_241_705_984, rel=1e-4)
    assert g2.activation == "geglu" and g2.tie_embeddings and g2.head_dim == 256
    g3 = from_hf_config(GEMMA3_1B, seq_len=512)
    assert g3.num_params() == pytest.approx(999_885_952, rel=1e-4)
    nested = from_hf_config({"model_type": "gemma3", "text_config": GEMMA3_1B}, seq_len=512)
    assert nested.num_params() == g3.num_params()


def test_sliding_windows_are_read_and_a_narrow_embedding_refused():
    """Gemma-2-9B: 42 layers alternating local (4,096 tokens, the even layers) and global: 21
    windowed; Mistral-7B: every layer windowed; a layer_types list is counted as given; a window
    no shorter than the sequence changes nothing."""
    g2 = from_hf_config(GEMMA2_9B, seq_len=8192)
    assert (g2.sliding_window, g2.sliding_layers) == (4096, 21)
    mi = from_hf_config(CASES["mistral-7b"][0], seq_len=8192)
    assert (mi.sliding_window, mi.sliding_layers) == (4096, 32)
    assert from_hf_config(CASES["mistral-7b"][0], seq_len=4096).sliding_layers == 0
    typed = dict(CASES["mistral-7b"][0], layer_types=["sliding_attention", "full_attention"] * 16)
    assert from_hf_config(typed, seq_len=8192).sliding_layers == 16
    with pytest.raises(ValueError, match="layer_types lists 2 layers"):
        from_hf_config(dict(typed, layer_types=["sliding_attention", "full_attention"]), seq_len=8192)
    opt350 = dict(CASES["opt-1.3b"][0], hidden_size=1024, num_attention_heads=16, ffn_dim=4096,
                  word_embed_proj_dim=512)
    with pytest.raises(ValueError, match="project_in/out"):
        from_hf_config(opt350)


@pytest.mark.parametrize("name,total,active", [("mixtral-8x22b", 141e9, 39e9), ("qwen3-30b-a3b", 30.5e9, 3.3e9),
                                               ("qwen3-235b-a22b", 235e9, 22e9), ("kimi-k2", 1.04e12, 32e9),
                                               ("llama4-scout", 109e9, 17e9), ("llama4-maverick", 400e9, 17e9)])
def test_moe_presets_match_published_sizes(name, total, active):
    """Published totals and active counts: Mistral's Mixtral 8x22B announcement (141B / 39B), the
    Qwen3 model cards (30.5B / 3.3B, 235B / 22B), Kimi-K2's model card (1.04T / 32B), the Llama 4
    model cards (Scout 109B / 17B, Maverick 400B / 17B: its dense layers counted as dense)."""
    from cosearch import models
    m = models.preset(name)
    assert m.num_params() == pytest.approx(total, rel=0.02)
    assert m.num_params(active=True) == pytest.approx(active, rel=0.03)


@pytest.mark.parametrize("preset,experts,step", [("llama4-scout", 16, 1), ("llama4-maverick", 128, 2)])
def test_llama4_config_reads_as_its_preset(preset, experts, step):
    """Llama 4's multimodal config.json (its text_config, as transformers' Llama4TextConfig names
    the fields) reads as the preset: experts of 8,192 plus a shared one, an MoE layer every
    ``interleave_moe_layer_step``, 8,192-token chunks on the RoPE layers (all but every 4th)."""
    from cosearch import models
    text = dict(hidden_size=5120, intermediate_size=8192, intermediate_size_mlp=16384, num_hidden_layers=48,
                num_attention_heads=40, num_key_value_heads=8, head_dim=128, vocab_size=202048,
                num_local_experts=experts, num_experts_per_tok=1, interleave_moe_layer_step=step,
                attention_chunk_size=8192, max_position_embeddings=10485760, rope_theta=500000.0,
                rms_norm_eps=1e-5, hidden_act="silu", tie_word_embeddings=False, use_qk_norm=step == 1)
    m = models.from_hf_config({"model_type": "llama4", "text_config": text, "vision_config": {}}, seq_len=8192)
    assert m.with_(name=preset) == models.preset(preset)
    with pytest.raises(ValueError, match="moe_layers other than"):
        models.from_hf_config({"model_type": "llama4", "text_config": {**text, "moe_layers": [0, 5]}}, seq_len=8192)


def test_mla_without_a_query_latent_deepseek_v2_lite():
    """DeepSeek-V2-Lite's config.json (q_lora_rank null: the query projected directly from the
    hidden state): 15.7B parameters (its model card), a ``q_proj`` GEMM of h x heads (d + rope)
    instead of the query's down and up projections."""
    from cosearch import graph, models
    cfg = {"model_type": "deepseek_v2", "hidden_size": 2048, "intermediate_size": 10944,
           "moe_intermediate_size": 1408, "num_hidden_layers": 27, "num_attention_heads": 16,
           "num_key_value_heads": 16, "n_routed_experts": 64, "n_shared_experts": 2, "num_experts_per_tok": 6,
           "first_k_dense_replace": 1, "q_lora_rank": None, "kv_lora_rank": 512, "qk_rope_head_dim": 64,
           "qk_nope_head_dim": 128, "v_head_dim": 128, "vocab_size": 102400, "max_position_embeddings": 163840,
           "rms_norm_eps": 1e-6, "hidden_act": "silu", "tie_word_embeddings": False}
    m = models.from_hf_config(cfg, seq_len=4096)
    assert m.mla == (0, 512, 64) and m.num_params() == pytest.approx(15.7e9, rel=0.01)
    ops = {o.name: o for o in graph.build(m, 1, 1, "fwd", flash_attention=True).ops}
    assert "q_down" not in ops and (ops["q_proj"].n, ops["q_proj"].k) == (16 * (128 + 64), 2048)
    with pytest.raises(ValueError, match="q_lora_rank"):
        m.with_(mla=(-1, 512, 64))


@pytest.mark.parametrize("case, key, value, message", [
    # a window cosearch could not read was dropped: every layer priced as full attention
    ("mistral-7b", "sliding_window", 1.5, "'sliding_window' must be a positive integer"),
    ("mistral-7b", "sliding_window", "4096", "'sliding_window' must be a positive integer"),
    ("mistral-7b", "sliding_window", 0, "'sliding_window' must be a positive integer"),
    ("mistral-7b", "layer_types", "sliding_attention", "'layer_types' must be a list"),
    ("mistral-7b", "use_sliding_window", "false", "'use_sliding_window' must be true or false"),
    # a string "false" was read as true by its truthiness
    ("llama-2-7b", "attention_bias", "false", "'attention_bias' must be true or false"),
    ("falcon-7b", "multi_query", "true", "'multi_query' must be true or false"),
    ("falcon-7b", "alibi", 1, "'alibi' must be true or false"),
    # an unknown or non-text activation was priced as gelu
    ("gpt2", "activation_function", "gleu_new", "activation 'gleu_new' is not one transformers defines"),
    ("llama-2-7b", "hidden_act", 7, "'hidden_act' must be a name"),
    ("llama-2-7b", "model_type", 3, "'model_type' must be a name"),
    ("llama-2-7b", "rope_scaling", ["yarn"], "'rope_scaling' must be an object"),
])
def test_config_fields_of_the_wrong_kind_are_refused_by_name(case, key, value, message):
    """Fields of a config.json that cosearch read by their truthiness or skipped when they were of
    the wrong kind (found by a fuzzer over these configs) are refused by name; the real configs
    still read, and their null values mean the family's default."""
    cfg = dict(CASES[case][0], **{key: value})
    with pytest.raises(ValueError, match=message):
        from_hf_config(cfg, seq_len=8192)
    assert from_hf_config(CASES[case][0], seq_len=8192).num_layers > 0
    assert from_hf_config(dict(CASES[case][0], **{key: None}), seq_len=8192).num_layers > 0


@pytest.mark.parametrize("name,fields,dropout", [
    ("gpt2", {}, True),                                          # transformers' defaults: 0.1 each
    ("gpt2", {"resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0}, False),
    ("gpt-j-6b", {"resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0}, False),   # its config.json
    ("gpt-neox-20b", {}, False),                                 # GPTNeoXConfig: hidden_dropout 0.0
    ("bloom-560m", {"hidden_dropout": 0.0, "attention_dropout": 0.0}, False),          # its config.json
    ("falcon-7b", {"hidden_dropout": 0.0, "attention_dropout": 0.0}, False),           # its config.json
    ("opt-1.3b", {"dropout": 0.1, "attention_dropout": 0.0}, True),                    # its config.json
    ("phi-2", {"resid_pdrop": 0.1, "embd_pdrop": 0.0, "attention_dropout": 0.0}, True),  # its config.json
    ("bert-base", {}, True),                                     # BertConfig: hidden_dropout_prob 0.1
    ("llama-2-7b", {"attention_dropout": 0.0}, False),
    ("llama-2-7b", {"attention_dropout": 0.1}, False),           # attention-only: inside the kernel
])
def test_dropout_is_read_from_the_families_own_keys(name, fields, dropout):
    """Dropout ops are priced where the config's hidden dropout is on, read from the family's
    own keys with transformers' defaults; until this reading, every non-gated family (BLOOM,
    Falcon, GPT-J, GPT-NeoX: all 0.0) was priced with dropout."""
    cfg, seq, _ = CASES[name]
    m = from_hf_config({**cfg, **fields}, seq_len=seq or 2048)
    assert m.dropout is dropout


def test_dropout_notes_and_bad_probabilities():
    from cosearch.runs.hf import hf_config_notes
    llama = {**CASES["llama-2-7b"][0], "attention_dropout": 0.1}
    assert any("attention dropout 0.1" in n and "not priced" in n for n in hf_config_notes(llama))
    opt = {**CASES["opt-1.3b"][0], "dropout": 0.1, "attention_dropout": 0.0}
    assert any("hidden dropout 0.1, attention dropout 0" in n for n in hf_config_notes(opt))
    assert not any("dropout" in n for n in hf_config_notes(CASES["gpt2"][0]))      # 0.1 everywhere
    for bad in (1.5, -0.1, "0.1", True):
        with pytest.raises(ValueError, match="'hidden_dropout' must be a dropout probability"):
            from_hf_config({**CASES["bloom-560m"][0], "hidden_dropout": bad}, seq_len=2048)


def test_dropout_of_a_family_read_by_its_usual_field_names():
    """A family cosearch reads generically (StarCoder2: ``residual_dropout``,
    ``embedding_dropout``) is priced with dropout where one of the usual keys is on."""
    base = {"model_type": "starcoder2", "num_hidden_layers": 2, "hidden_size": 512, "num_attention_heads": 8,
            "intermediate_size": 2048, "vocab_size": 1000, "max_position_embeddings": 2048,
            "hidden_act": "gelu_pytorch_tanh", "use_bias": True}
    assert from_hf_config(base).dropout is False
    assert from_hf_config({**base, "residual_dropout": 0.1}).dropout is True
    assert from_hf_config({**base, "embedding_dropout": 0.05}).dropout is True
    assert from_hf_config({**base, "attention_dropout": 0.1}).dropout is False
