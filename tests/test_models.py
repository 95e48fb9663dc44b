import pytest

from cosearch import models

# Published parameter counts (papers / model cards), in billions.
PUBLISHED = {
    "bert-large": 0.340, "gpt2-xl": 1.558,
    "gpt3-1.3b": 1.3, "gpt3-2.7b": 2.7, "gpt3-6.7b": 6.7, "gpt3-13b": 13.0, "gpt3-175b": 175.0,
    "opt-1.3b": 1.3, "opt-6.7b": 6.7, "opt-13b": 13.0, "opt-30b": 30.0, "opt-66b": 66.0,
    "opt-175b": 175.0, "llama2-7b": 6.74, "llama2-13b": 13.0, "llama2-70b": 68.98,
    "megatron-gpt2-8.3b": 8.3,
}


def test_opt_350m_count_off_by_its_narrow_embedding():
    """OPT-350m's embedding is 512 wide with 1024<->512 projections (331.2M, model card); the
    preset models it 1024 wide: the difference is exactly the wider embedding table less the
    two projections."""
    n = models.preset("opt-350m").num_params()
    V, h, e = 50272, 1024, 512
    assert n - (V * (h - e) - 2 * h * e) == pytest.approx(331.2e6, rel=0.01)


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_preset_param_count_within_2_percent(name):
    n = models.preset(name).num_params() / 1e9
    assert abs(n - PUBLISHED[name]) / PUBLISHED[name] < 0.02, (name, n)


def test_all_required_presets_exist():
    assert set(PUBLISHED) <= set(models.preset_names())


def test_llama2_70b_uses_gqa():
    m = models.preset("llama2-70b")
    assert m.kv_heads == 8 and m.heads == 64 and m.kv_dim == 1024


def test_layer_params_hand_worked():
    # tiny GPT block: h=8, f=32, biases, layernorm
    m = models.ModelConfig("t", 1, 8, 2, 32, 10, 4)
    attn = 4 * 8 * 8 + 4 * 8
    mlp = 2 * 8 * 32 + 32 + 8
    norms = 2 * 2 * 8
    assert m.layer_params() == attn + mlp + norms
    assert m.embedding_params() == 10 * 8 + 4 * 8 + 2 * 8


def test_unknown_preset_lists_known():
    with pytest.raises(ValueError, match="gpt3-175b"):
        models.preset("gpt5")


@pytest.mark.parametrize("field,value", [("hidden", 0), ("num_layers", -1), ("heads", 3),
                                         ("kv_heads", 3), ("activation", "tanh"),
                                         ("seq_len", 2**31), ("vocab", 2**62)])
def test_bad_config_names_field(field, value):
    kw = dict(name="x", num_layers=2, hidden=64, heads=4, ffn_hidden=256, vocab=100, seq_len=16)
    kw[field] = value
    with pytest.raises(ValueError, match=field if field != "kv_heads" else "kv_heads"):
        models.ModelConfig(**kw)


def test_from_hf_config_llama2_7b():
    cfg = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008,
           "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
           "vocab_size": 32000, "max_position_embeddings": 4096, "hidden_act": "silu",
           "rms_norm_eps": 1e-5, "tie_word_embeddings": False}
    m = models.ModelConfig.from_hf_config(cfg, name="llama")
    assert m.num_params() == models.preset("llama2-7b").num_params()


def test_from_hf_config_gpt2():
    cfg = {"model_type": "gpt2", "n_layer": 48, "n_embd": 1600, "n_head": 25, "vocab_size": 50257,
           "n_positions": 1024, "activation_function": "gelu_new"}
    m = models.ModelConfig.from_hf_config(cfg)
    assert m.num_params() == models.preset("gpt2-xl").num_params()


def test_from_hf_config_missing_field():
    with pytest.raises(ValueError, match="hidden_size"):
        models.ModelConfig.from_hf_config({"num_hidden_layers": 2, "num_attention_heads": 2, "vocab_size": 3})
