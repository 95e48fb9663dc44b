"""``cosearch.runs``: the framework readers on the frameworks' own files (tests/data/runs, see its
PROVENANCE.md), each checked against what the framework's documentation says the file means,
against a second reader of the same run in another format, and at its refusals."""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from cosearch import models
from cosearch.plan import evaluate
from cosearch.runs import (
    check_runs,
    detect_format,
    read_config,
    read_configs,
    read_maxtext,
    read_megatron_args,
    read_megatron_bridge,
    read_row,
)

DATA = Path(__file__).resolve().parent / "data" / "runs"


def test_torchtitan_qwen3_30b_a3b_file():
    """torchtitan's own Qwen3-30B-A3B preset (8 H100s): FSDP over all 8 ranks, 2 sequences a rank
    (global 128: 8 accumulation passes), experts over 2 ranks with expert tensor parallelism 1,
    full recompute; the model is the qwen3-30b-a3b preset (per-head q/k norms, 30.5B) and its
    [quantize.linear.float8] section, off without the converter, is read."""
    d = read_config(DATA / "torchtitan_qwen3_30b_a3b.toml").resolve(8)
    s = d.spec
    assert (s.dp, s.tp, s.microbatch, s.recompute, s.zero, s.expert_parallel) == (8, 1, 2, "full", 3, 2)
    assert d.global_batch == 128 and d.engine.name == "fsdp-eager" and d.spec.precision == "bf16"
    assert d.model.name == "qwen3-30b-a3b" and d.model.qk_norm == "head"
    deepseek = read_config(DATA / "torchtitan_qwen3_30b_a3b.toml", ["model.name=deepseek_v3", "model.flavor=671B"])
    assert deepseek.model.name == "deepseek-v3" and any("FlexAttention" in a for a in deepseek.assumed)


def test_torchtitan_llama3_70b_file():
    """torchtitan's own 70B preset (64 A100s): FSDP over what TP 8 leaves (dp 8), 8 sequences a
    replica (global 64), full recompute, no compile; the model is Llama 3.1 70B (70.6B
    parameters, Meta's figure)."""
    rc = read_config(DATA / "torchtitan_llama3_70b.toml")
    d = rc.resolve(64)
    s = d.spec
    assert (s.dp, s.tp, s.pp, s.microbatch, s.recompute, s.zero, s.sequence_parallel) == (8, 8, 1, 8, "full", 3, True)
    assert d.global_batch == 64 and d.engine.name == "fsdp-eager"
    assert d.model.seq_len == 8192 and round(d.model.num_params() / 1e9, 1) == 70.6
    assert "training.steps" in d.neutral and "optimizer.lr" in d.neutral
    # gradient accumulation: a global batch of 128 is two passes of 8 sequences a replica
    d2 = read_config(DATA / "torchtitan_llama3_70b.toml", ["training.global_batch_size=128"]).resolve(64)
    assert (d2.global_batch, d2.spec.microbatch) == (128, 8)
    # torchtitan's default selective option '2' recomputes every other layer: refused by name
    with pytest.raises(ValueError, match="selective_ac_option '2'"):
        read_config(DATA / "torchtitan_llama3_70b.toml", ["activation_checkpoint.mode=selective"])
    with pytest.raises(ValueError, match="training.mystery=1"):
        read_config(DATA / "torchtitan_llama3_70b.toml", ["training.mystery=1"])
    with pytest.raises(ValueError, match="not a multiple of tp x pp x cp"):
        rc.resolve(60)


def test_torchtitan_compile_and_float8_switches_read_as_torchtitan_runs_them():
    """compile.components and compile.backend decide whether the layers are compiled, and an FP8
    converter's emulate / recipe_name whether its GEMMs are the FP8 tensor cores cosearch prices;
    they were neutral, so a config compiling only the loss, or on the aot_eager backend, priced
    Inductor's fused layers, and an emulated FP8 run priced FP8 GEMMs (found by an override fuzzer)."""
    f = DATA / "torchtitan_llama3_70b.toml"
    assert read_config(f, ["compile.enable=true"]).resolve(64).engine.name == "fsdp"
    for ov, why in ((["compile.enable=true", "compile.components=loss"], "without model"),
                    (["compile.enable=true", "compile.backend=aot_eager"], "no Inductor fusion")):
        d = read_config(f, ov).resolve(64)
        assert d.engine.name == "fsdp-eager" and any(why in a for a in d.assumed)
    with pytest.raises(ValueError, match="compile.components"):
        read_config(f, ["compile.components=model,graph"])
    fp8 = ["model.converters=float8"]
    assert read_config(f, fp8).resolve(64).spec.precision == "fp8"
    with pytest.raises(ValueError, match="emulates FP8 in high precision"):
        read_config(f, fp8 + ["float8.emulate=true"])
    d = read_config(f, fp8 + ["float8.recipe_name=rowwise"]).resolve(64)
    assert any("recipe_name 'rowwise'" in a for a in d.assumed)


def test_nemo_and_bridge_loss_wgrad_and_sharp_switches_are_read():
    """NeMo 1's cross_entropy_loss_fusion, fp8_wgrad and sharp, and Megatron-Bridge's fp8_wgrad, were
    neutral: fp8_wgrad false (the weight gradients in bf16) priced FP8 weight gradients, and SHARP went
    unsaid.  The loss reads as the Megatron flag, fp8_wgrad false under FP8 is refused by name (as a
    Megatron line's --no-fp8-wgrad), and SHARP is said."""
    f = DATA / "nemo1_gpt3_5b.yaml"
    d = read_config(f, ["model.cross_entropy_loss_fusion=true"]).resolve()
    assert any("fused cross-entropy (native)" in a for a in d.assumed)
    fp8 = ["model.fp8=true", "model.transformer_engine=true"]
    assert read_config(f, fp8).resolve().spec.precision == "fp8"
    with pytest.raises(ValueError, match="weight-gradient GEMMs in bf16"):
        read_config(f, fp8 + ["model.fp8_wgrad=false"])
    assert read_config(f, ["model.fp8_wgrad=false"]).resolve().spec.precision == "bf16"   # no FP8: harmless
    assert any("SHARP" in a for a in read_config(f, ["model.sharp=true"]).resolve().assumed)
    with pytest.raises(ValueError, match="weight-gradient GEMMs in bf16"):
        read_config(DATA / "bridge_qwen3_30b_a3b_gb200_mxfp8.args", ["mixed_precision.fp8_wgrad=false"],
                    model=models.preset("qwen3-30b-a3b"))


def test_nemo1_checkpoint_logging_and_off_offload_keys_are_neutral():
    """NeMo's own megatron_gpt_config.yaml carries checkpoint-format, timer and S3 keys and the
    offload sub-keys with cpu_offloading off: each changes neither step time nor memory, so the
    plan is the file's own and they are listed neutral; cpu_offloading on is refused by name."""
    f = DATA / "nemo1_gpt3_5b.yaml"
    extra = ["model.dist_ckpt_format=torch_dist", "model.cpu_offloading=false", "model.cpu_offloading_activations=true",
             "model.cpu_offloading_weights=true", "model.cpu_offloading_num_layers=3", "model.reduce_amax=true",
             "s3_checkpointing.chunk_size_MB=64", "model.megatron_timer_kwargs.log_mode=minmax"]
    base, d = read_config(f).resolve(), read_config(f, extra).resolve()
    assert d.spec == base.spec and d.engine == base.engine and d.model == base.model
    assert {"model.dist_ckpt_format", "model.cpu_offloading_activations", "model.reduce_amax",
            "s3_checkpointing.chunk_size_MB", "model.megatron_timer_kwargs.log_mode"} <= set(d.neutral)
    with pytest.raises(ValueError, match="cpu_offloading .* is not read"):
        read_config(f, ["model.cpu_offloading=true"])


def test_nemo1_launcher_file_reads_as_its_megatron_line():
    """NeMo's gpt3/5b launcher config on its 16 x 8 GPUs reads as the Megatron line NeMo runs for
    it (the keys' Megatron names per NeMo's docs), with the model's FFN from the config's own
    ``${multiply:4, ${.hidden_size}}``; neither Megatron-Core's TE layers nor flash attention, so
    its attention unfused (stated on the line: a line without it reads as Megatron's TE default)."""
    d = read_config(DATA / "nemo1_gpt3_5b.yaml").resolve()
    line = ("--num-layers 24 --hidden-size 4096 --num-attention-heads 32 --seq-length 2048 --vocab-size 50257 "
            "--ffn-hidden-size 16384 --micro-batch-size 4 --global-batch-size 2048 --use-distributed-optimizer "
            "--overlap-grad-reduce --overlap-param-gather --bf16 --attention-backend unfused")
    ref = read_megatron_args(line).resolve(128)
    assert d.num_chips == 128 and d.spec == ref.spec and d.engine == ref.engine
    assert d.model.with_(name="x") == ref.model.with_(name="x")
    assert d.model.ffn_hidden == 16384 and d.model.dropout and not d.spec.flash_attention
    # the 5B config has no pipeline: overlap_p2p_comm has no schedule to overlap (Megatron turns it off)
    assert not read_config(DATA / "nemo1_gpt3_5b.yaml", ["model.overlap_p2p_comm=true"]).resolve().engine.overlap_p2p_comm
    with pytest.raises(ValueError, match="FP16"):
        read_config(DATA / "nemo1_gpt3_5b.yaml", ["trainer.precision=16"])
    d = read_config(DATA / "nemo1_gpt3_5b.yaml", ["model.tensor_model_parallel_size=2", "model.sequence_parallel=true",
                                                  "model.ub_tp_comm_overlap=true"]).resolve()
    assert (d.spec.dp, d.spec.tp, d.spec.sequence_parallel) == (64, 2, True)
    assert d.engine.overlap_tp_comm
    # without sequence parallelism NeMo turns the userbuffers overlap off (megatron_base_model.py), said
    d = read_config(DATA / "nemo1_gpt3_5b.yaml", ["model.tensor_model_parallel_size=2", "model.sequence_parallel=false",
                                                  "model.ub_tp_comm_overlap=true"]).resolve()
    assert not d.engine.overlap_tp_comm and any("ub_tp_comm_overlap=true turned off" in a for a in d.assumed)


def test_llm_foundry_qk_norms_read_as_llm_foundry_builds_them():
    """llm-foundry's qk_ln (a norm over the whole projected q, d_model, and k, kv_n_heads x head_dim)
    and qk_gn (one per head, head_dim) were refused; they read as cosearch's full and per-head q/k
    norms in the model's LayerNorm, whose weights and biases count by hand: 24 layers x 2 x (16 + 16)
    x 128 = 196,608 and 24 x 2 norms x 2 x 128 = 12,288 parameters."""
    f = DATA / "foundry_mpt_1b.yaml"
    base = read_config(f).resolve(8).model
    full = read_config(f, ["model.attn_config.qk_ln=true"]).resolve(8).model
    head = read_config(f, ["model.attn_config.qk_gn=true"]).resolve(8).model
    assert (full.qk_norm, head.qk_norm, base.qk_norm) == ("full", "head", "none")
    assert full.num_params() - base.num_params() == 196_608 and head.num_params() - base.num_params() == 12_288
    with pytest.raises(ValueError, match="qk_ln and qk_gn together"):
        read_config(f, ["model.attn_config.qk_ln=true", "model.attn_config.qk_gn=true"])


def test_llm_foundry_clip_qkv_refused_and_rope_impl_said():
    """MPT's clip_qkv clamps q, k and v in a pass of its own (neutral until now): refused; its
    rope_impl (dail, the default, or hf) is read, dail's fused rotary kernel said to be priced as the
    eager passes."""
    f = DATA / "foundry_mpt_1b.yaml"
    with pytest.raises(ValueError, match="clip_qkv clamps"):
        read_config(f, ["model.attn_config.clip_qkv=8"])
    dail = read_config(f, ["model.attn_config.rope=true"])
    assert dail.model.position == "rotary" and any("rope_impl dail" in a for a in dail.assumed)
    assert not any("rope_impl" in a for a in read_config(f, ["model.attn_config.rope=true",
                                                               "model.attn_config.rope_impl=hf"]).assumed)
    with pytest.raises(ValueError, match="rope_impl 'xx'"):
        read_config(f, ["model.attn_config.rope_impl=xx"])


def test_llm_foundry_mpt_1b_file():
    """llm-foundry's MPT-1B preset: FSDP FULL_SHARD with PURE mixed precision, microbatch 4,
    global 512; the model's parameters by hand: V d + S d + L (12 d^2 + 13 d) + 2 d."""
    d = read_config(DATA / "foundry_mpt_1b.yaml").resolve(64)
    s = d.spec
    assert (s.dp, s.tp, s.microbatch, s.zero, s.recompute, s.flash_attention) == (64, 1, 4, 3, "none", True)
    assert d.global_batch == 512 and d.engine.name == "llm-foundry-pure"
    V, S, L, h = 50368, 2048, 24, 2048
    assert d.model.num_params() == V * h + S * h + L * (12 * h * h + 13 * h) + 2 * h
    with pytest.raises(ValueError, match="auto"):
        read_config(DATA / "foundry_mpt_1b.yaml", ["device_train_microbatch_size=auto"])
    with pytest.raises(ValueError, match="amp_fp16"):
        read_config(DATA / "foundry_mpt_1b.yaml", ["precision=amp_fp16"])


def test_maxtext_overrides_read_as_the_validation_row_of_the_same_run():
    """MaxText's own command line and the validation row of the same v5e run (tp 16 x fsdp 16, one
    sequence a chip) give the same plan."""
    dims = dict(layers=4, hidden=4096, heads=8, kv_heads=8, ffn=2816, vocab=32000, seq=2048)
    row = dict(id="v5e", model="m", arch="llama2-style: SwiGLU, RoPE, RMSNorm", head_dim=None, ep=1, cp=1, vp=None,
               zero=3, zero_group=None, sp=False, offload=None, recompute="remat_policy=full (full layer)",
               precision="BF16", accel="TPU-v5e chip", n_gpus=256, dp=16, tp=16, pp=1, mbs=1, gbs=256, ga=1,
               tok_s_gpu=1000.0, software="MaxText (JAX/XLA) 2023-12 attention=flash", **dims)
    by_row = read_row(row).resolve()
    words = ["ici_fsdp_parallelism=16", "ici_tensor_parallelism=16", "per_device_batch_size=1", "remat_policy=full",
             "attention=flash", "base_emb_dim=4096", "base_num_decoder_layers=4", "base_num_query_heads=8",
             "base_num_kv_heads=8", "base_mlp_dim=2816", "head_dim=512", "vocab_size=32000"]
    by_maxtext = read_maxtext(None, words).resolve(256)
    assert by_maxtext.spec == by_row.spec and by_maxtext.global_batch == by_row.global_batch == 256
    assert by_maxtext.model.num_params() == by_row.model.num_params()
    # MaxText's own llama2-70b v5p command: remat_policy save_dot_except_mlpwi and the one-hot
    # (iota) embedding, 4 sequences a chip, the fsdp axis over every chip
    d = read_config(DATA / "maxtext_llama2_70b_v5p.args").resolve(512)
    assert d.engine.name == "maxtext-remat-save-dot-except-mlpwi-iota-embed" and d.engine.embedding == "one-hot"
    assert (d.spec.dp, d.spec.tp, d.spec.microbatch, d.spec.recompute, d.spec.zero) == (512, 1, 4, "selective", 3)
    assert d.global_batch == 2048 and d.model.seq_len == 4096
    with pytest.raises(ValueError, match="not a whole number"):
        read_maxtext(None, ["per_device_batch_size=0.5", "ici_fsdp_parallelism=4"])
    # weight_dtype and logits_dot_in_fp32 were neutral: a bfloat16-weight or float32-logits run
    # was priced as MaxText's defaults without a word; now bf16 weights (and their gradients and
    # moments) are 8 bytes a parameter, and float32 logits said (a non-boolean refused)
    d = read_config(DATA / "maxtext_llama2_70b_v5p.args", ["weight_dtype=bfloat16", "logits_dot_in_fp32=true"]).resolve(512)
    assert d.memory.bytes_per_param == 8.0 and any("parameter state 8 bytes" in a for a in d.assumed)
    assert any("logits_dot_in_fp32" in a for a in d.assumed)
    with pytest.raises(ValueError, match="logits_dot_in_fp32 must be true or false"):
        read_config(DATA / "maxtext_llama2_70b_v5p.args", ["logits_dot_in_fp32=abc"])


def test_megatron_bridge_overrides():
    """Megatron-Bridge's documented override example, on top of the recipe's model: the train and
    model fields land as Megatron's flags; a recipe name sets FP8; comm_overlap sets the engine
    (its TP overlap needs sequence parallelism: without it Bridge's CommOverlapConfig.setup turns
    the overlap off, said)."""
    base = models.preset("llama2-7b")
    words = ["train.micro_batch_size=2", "train.global_batch_size=128", "model.num_layers=32", "model.hidden_size=4096",
             "model.num_attention_heads=32", "model.max_position_embeddings=4096", "model.tensor_model_parallel_size=2",
             "mixed_precision=bf16_with_fp8_current_scaling_mixed", "comm_overlap.tp_comm_overlap=true",
             "checkpoint.save=/ckpt", "logger.wandb_project=p", "model.sequence_parallel=true"]
    d = read_megatron_bridge(None, words, model=base).resolve(16)
    assert (d.spec.dp, d.spec.tp, d.spec.microbatch, d.spec.precision) == (8, 2, 2, "fp8")
    assert d.engine.overlap_tp_comm and d.global_batch == 128
    off = read_megatron_bridge(None, words[:-1], model=base)
    assert not off.engine.overlap_tp_comm and any(a.startswith("tp_comm_overlap=true turned off") for a in off.assumed)
    with pytest.raises(ValueError, match="--num-layers"):
        read_megatron_bridge(None, ["model.num_layers=40", "train.global_batch_size=8"], model=base)
    with pytest.raises(ValueError, match="model.mystery_switch=True"):
        read_megatron_bridge(None, ["model.mystery_switch=true"], model=base)
    # a switch that may sit in two sections is read from both (neither is then taken as unknown),
    # and two values of one field that differ are refused
    both = read_megatron_bridge(None, ["train.global_batch_size=8", "comm_overlap.tp_comm_overlap=true",
                                       "model.tp_comm_overlap=true", "model.tensor_model_parallel_size=2",
                                       "model.sequence_parallel=true"], model=base).resolve(8)
    assert both.engine.overlap_tp_comm
    with pytest.raises(ValueError, match="contradict each other"):
        read_megatron_bridge(None, ["mixed_precision.fp8=hybrid", "model.fp8=e4m3"], model=base)
    # a switch that is off in a full dump is neutral
    d = read_megatron_bridge(None, ["model.mystery_switch=false", "train.global_batch_size=8"], model=base).resolve(8)
    assert "model.mystery_switch" in d.neutral


HF_YAML = """variables:
  model_name: meta-llama/Llama-3.1-8B
max_seq_len: 4096
model:
  name: hf_causal_lm
  pretrained_model_name_or_path: ${variables.model_name}
  pretrained: false
  use_auth_token: true
{extra}
tokenizer:
  name: ${variables.model_name}
global_train_batch_size: 64
device_train_microbatch_size: 2
precision: amp_bf16
expandable_segments: true
icl_seq_len: 1024
fsdp_config:
  sharding_strategy: FULL_SHARD
  mixed_precision: PURE
"""

HF_JSON = {"model_type": "llama", "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16,
           "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 131072,
           "tie_word_embeddings": True, "hidden_act": "silu", "rope_scaling": None}


def _foundry_hf(tmp_path, extra="", config=None):
    (tmp_path / "train.yaml").write_text(HF_YAML.replace("{extra}", extra))
    (tmp_path / "config.json").write_text(json.dumps(config or HF_JSON))
    return tmp_path / "train.yaml", tmp_path / "config.json"


@pytest.mark.parametrize("extra, flash, engine", [
    ("", False, "llm-foundry-fp32-loss-pure"),                                    # llm-foundry's default: eager
    ("  use_flash_attention_2: true", True, "llm-foundry-fp32-loss-fa2-pure"),
    ("  attn_implementation: sdpa", True, "llm-foundry-fp32-loss-fa2-pure"),
    ("  attn_implementation: eager\n  use_flash_attention_2: true", True, "llm-foundry-fp32-loss-fa2-pure")])
def test_llm_foundry_hf_causal_lm_attention_as_hf_base_sets_it(tmp_path, extra, flash, engine):
    """llm-foundry's hf_causal_lm (models/hf/hf_base.py): flash_attention_2 where
    use_flash_attention_2 is set (over any attn_implementation), else the named implementation,
    else eager, the unfused attention (it was read as flash); the loss is the Hugging Face model's
    own, its logits upcast to fp32.  The allocator, evaluation and Hub keys are said, not refused."""
    yaml_file, cfg = _foundry_hf(tmp_path, extra)
    d = read_configs([yaml_file, cfg]).resolve(8)
    assert (d.spec.flash_attention, d.engine.name, d.engine.cross_entropy) == (flash, engine, "fp32")
    assert (d.model.num_layers, d.spec.microbatch, d.global_batch, d.spec.zero) == (16, 2, 64, 3)
    said = " ".join(d.assumed)
    assert "expandable_segments" in said and "icl_seq_len" in said and ("unfused" in said) == (not flash)


def test_llm_foundry_config_overrides_apply_to_the_config_json(tmp_path):
    """config_overrides change the config.json as llm-foundry's set_config_overrides does: 4 layers
    instead of 16, a mapping set on a null field; a mapping onto a mapping with a key it lacks, a
    run whose model never met the overrides (a preset) and the Hub's MPT models are refused."""
    extra = "  config_overrides:\n    num_hidden_layers: 4\n    rope_scaling:\n      rope_type: llama3\n      factor: 8.0"
    yaml_file, cfg = _foundry_hf(tmp_path, extra)
    d = read_configs([yaml_file, cfg]).resolve(8)
    assert d.model.num_layers == 4 and "config_overrides num_hidden_layers=4" in " ".join(d.assumed)
    with pytest.raises(ValueError, match="config_overrides .* no file of this run gave"):
        read_config(yaml_file).resolve(8, model=models.preset("llama3-8b").with_(seq_len=4096))
    bad = dict(HF_JSON, rope_scaling={"rope_type": "llama3", "factor": 8.0})
    yaml_file, cfg = _foundry_hf(tmp_path, "  config_overrides:\n    rope_scaling:\n      typo: 1", bad)
    with pytest.raises(ValueError, match="keys the config's rope_scaling does not: \\['typo'\\]"):
        read_configs([yaml_file, cfg])
    yaml_file, cfg = _foundry_hf(tmp_path, "  config_overrides: {}")
    assert read_configs([yaml_file, cfg]).resolve(8).model.num_layers == 16
    with pytest.raises(ValueError, match="no longer loads the Hub's MPT"):
        read_config(yaml_file, ["model.pretrained_model_name_or_path=mosaicml/mpt-7b"])
    with pytest.raises(ValueError, match="attn_implementation 'flex_attention' is not modelled"):
        read_config(yaml_file, ["model.attn_implementation=flex_attention"])


def test_llm_foundry_mpt_loss_and_sequence_id():
    """MPT's loss_fn (modeling_mpt.py): fused_crossentropy, the default, one kernel;
    torch_crossentropy, fp32 passes; attn_uses_sequence_id false is its default, true is refused."""
    f = DATA / "foundry_mpt_1b.yaml"
    assert read_config(f).resolve(8).engine.cross_entropy == "fused"
    torch_loss = read_config(f, ["model.loss_fn=torch_crossentropy"]).resolve(8).engine
    assert torch_loss.cross_entropy == "fp32" and torch_loss.name == "llm-foundry-fp32-loss-pure"
    with pytest.raises(ValueError, match="loss_fn 'mystery' is not modelled"):
        read_config(f, ["model.loss_fn=mystery"])
    assert read_config(f, ["model.attn_config.attn_uses_sequence_id=false"]).resolve(8).spec.flash_attention
    with pytest.raises(ValueError, match="attn_uses_sequence_id"):
        read_config(f, ["model.attn_config.attn_uses_sequence_id=true"])


def test_hf_config_and_a_plan_file_merge(tmp_path):
    """A model's config.json with a torchtitan TOML whose flavor has no preset: the model comes from
    the JSON, read at the TOML's sequence; a contradicting model is refused naming the field."""
    cfg = {"model_type": "llama", "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16,
           "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 131072,
           "tie_word_embeddings": True, "hidden_act": "silu"}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    toml = ("[model]\nname = \"llama3\"\nflavor = \"1B\"\n[training]\nlocal_batch_size = 2\nseq_len = 4096\n"
            "[parallelism]\ndata_parallel_shard_degree = -1\n[activation_checkpoint]\nmode = \"none\"\n")
    (tmp_path / "train.toml").write_text(toml)
    rc = read_configs([tmp_path / "train.toml", tmp_path / "config.json"])
    d = rc.resolve(8)
    assert (d.model.num_layers, d.model.seq_len, d.model.kv_heads) == (16, 4096, 8)
    assert (d.spec.dp, d.spec.microbatch, d.global_batch) == (8, 2, 16)
    with pytest.raises(ValueError, match="num_layers"):
        read_configs([tmp_path / "train.toml", tmp_path / "config.json"], model=models.preset("llama3-8b").with_(
            seq_len=4096))


def test_detect_format(tmp_path):
    assert detect_format(DATA / "nemo1_gpt3_5b.yaml") == "nemo1"
    assert detect_format(DATA / "foundry_mpt_1b.yaml") == "llm-foundry"
    assert detect_format(DATA / "torchtitan_llama3_70b.toml") == "torchtitan"
    assert detect_format(DATA / "maxtext_llama2_70b_v5p.args") == "maxtext"
    (tmp_path / "run.sh").write_text("torchrun --nproc-per-node 8 pretrain_gpt.py \\\n  --tensor-model-parallel-size 2 \\\n"
                                     "  --global-batch-size 8  # comment\n")
    assert detect_format(tmp_path / "run.sh") == "megatron-args"
    rc = read_config(tmp_path / "run.sh", model=models.preset("gpt3-1.3b"))
    assert rc.resolve(8).spec.tp == 2
    (tmp_path / "bridge.args").write_text("train.global_batch_size=8 model.tensor_model_parallel_size=2\n")
    assert detect_format(tmp_path / "bridge.args") == "megatron-bridge"
    (tmp_path / "x.yaml").write_text("foo: 1\n")
    with pytest.raises(ValueError, match="cannot place"):
        detect_format(tmp_path / "x.yaml")
    (tmp_path / "x.yaml").write_text("- a\n- b\n")
    with pytest.raises(ValueError, match="YAML mapping"):
        read_config(tmp_path / "x.yaml", fmt="maxtext")


def _csv(tmp_path, rows, header="id,group,model,cluster,chips,tp,pp,mb,batch,measured_tok_s_per_chip"):
    p = tmp_path / "measured.csv"
    p.write_text(header + "\n" + "\n".join(rows) + "\n")
    return p


def test_check_runs_csv(tmp_path):
    """Two runs of a user's CSV: each error is predicted / measured - 1 of the model's own
    prediction, the group's MAE and mean signed error their plain averages; a run cosearch
    cannot describe is listed with its reason."""
    from cosearch import cluster, hardware
    from cosearch.engine import MEGATRON_CORE
    from cosearch.plan import PlanSpec
    p = _csv(tmp_path, ["a,g,gpt3-1.3b,dgx-a100,8,1,1,4,64,4000", "b,g,gpt3-1.3b,dgx-a100,16,2,1,2,64,3000",
                        "c,g,no-such-model,dgx-a100,8,1,1,4,64,1000"])
    res = check_runs(p)
    m, chip = models.preset("gpt3-1.3b"), hardware.preset("A100-80GB")
    pa = evaluate(m, chip, cluster.dgx_a100(1), PlanSpec(8, 1, 1, 4, flash_attention=True), 64, engine=MEGATRON_CORE)
    pb = evaluate(m, chip, cluster.dgx_a100(2), PlanSpec(8, 2, 1, 2, flash_attention=True), 64, engine=MEGATRON_CORE)
    ea, eb = pa.tokens_per_s / 8 / 4000 - 1, pb.tokens_per_s / 16 / 3000 - 1
    assert [r.error for r in res.runs] == pytest.approx([ea, eb])
    g = res.groups()["g"]
    assert g["n"] == 2 and g["mae"] == pytest.approx((abs(ea) + abs(eb)) / 2)
    assert g["mean_signed"] == pytest.approx((ea + eb) / 2)
    assert res.refused[0][0] == "c" and "no-such-model" in res.refused[0][1]
    assert "MAE" in res.table()
    res.to_json(tmp_path / "r.json")
    with pytest.raises(FileExistsError):
        res.to_json(tmp_path / "r.json")
    with pytest.raises(ValueError, match="unknown columns colour"):
        check_runs(_csv(tmp_path, ["a,g,gpt3-1.3b,dgx-a100,8,1,1,4,64,4000,red"],
                        "id,group,model,cluster,chips,tp,pp,mb,batch,measured_tok_s_per_chip,colour"))


def test_check_runs_refuses_measured_values_that_are_not_a_throughput(tmp_path):
    """A measured throughput of nan, inf, zero or less, and a chip count of inf, are refused with
    the field named, and the good run beside them is still checked (a nan used to enter the MAE
    as nan%; chips=inf stopped the whole check with an OverflowError)."""
    p = _csv(tmp_path, ["ok,g,gpt3-1.3b,dgx-a100,8,1,1,4,64,4000", "n,g,gpt3-1.3b,dgx-a100,8,1,1,4,64,nan",
                        "i,g,gpt3-1.3b,dgx-a100,8,1,1,4,64,inf", "z,g,gpt3-1.3b,dgx-a100,8,1,1,4,64,0",
                        "m,g,gpt3-1.3b,dgx-a100,8,1,1,4,64,-5", "c,g,gpt3-1.3b,dgx-a100,inf,1,1,4,64,4000"])
    res = check_runs(p)
    assert [r.id for r in res.runs] == ["ok"] and math.isfinite(res.groups()["g"]["mae"])
    why = dict(res.refused)
    assert set(why) == {"n", "i", "z", "m", "c"}
    assert all("measured_tok_s_per_chip must be a positive finite number" in why[k] for k in "nizm")
    assert "chips 'inf' is not a whole number" in why["c"]


def test_check_runs_refuses_zero_degrees_row_by_row(tmp_path):
    """A row with tp, pp or chips 0 is refused with the field named, and the good rows beside it are
    still checked: a tp of 0 stopped the whole check with a ZeroDivisionError (the chips modulo tp x
    pp x cp), found by a fuzzer over CSV rows."""
    p = _csv(tmp_path, ["ok,g,gpt3-1.3b,dgx-a100,8,1,1,4,64,4000", "t,g,gpt3-1.3b,dgx-a100,8,0,1,4,64,4000",
                        "p,g,gpt3-1.3b,dgx-a100,8,1,0,4,64,4000", "c,g,gpt3-1.3b,gb200-nvl72,0,1,1,4,64,4000"])
    res = check_runs(p)
    assert [r.id for r in res.runs] == ["ok"]
    why = dict(res.refused)
    assert set(why) == {"t", "p", "c"}
    assert "tp must be a positive integer, got 0" in why["t"] and "pp must be a positive integer" in why["p"]
    assert "0" in why["c"]


def test_check_runs_jsonl_reads_the_validation_schema(tmp_path):
    row = dict(id="r1", model="m", arch="llama2-style: SwiGLU, RoPE, RMSNorm, MHA, untied output", layers=4,
               hidden=1024, heads=8, kv_heads=8, ffn=2816, vocab=32000, seq=2048, head_dim=None, ep=1, cp=1,
               vp=None, zero=0, zero_group=None, sp=False, offload=None, recompute="none", precision="BF16",
               accel="H100-SXM-80GB", n_gpus=8, dp=8, tp=1, pp=1, mbs=1, gbs=8, ga=1, tok_s_gpu=1000.0,
               software="NeMo 26.04 container (Megatron-Bridge + Megatron-Core)")
    p = tmp_path / "m.jsonl"
    p.write_text(json.dumps(row) + "\n" + json.dumps(dict(row, id="r2", accel="Z9000")) + "\n"
                 + json.dumps(dict(row, id="r3", complete=False)) + "\n")
    res = check_runs(p)
    assert [r.id for r in res.runs] == ["r1"]
    assert dict(res.refused) == {"r2": "chip 'Z9000' has no preset",
                                 "r3": "the row is marked incomplete (its notes say what is missing)"}
    assert "Megatron-Bridge H100-SXM-80GB bf16 " in res.table()   # the whole group name
    d = read_row(row).resolve()
    pred = evaluate(d.model, d.chip, d.cluster, d.spec, d.global_batch, engine=d.engine).tokens_per_s / 8
    assert res.runs[0].predicted_tok_s_per_chip == pytest.approx(pred)
    # a row whose text field holds a number is refused by name, beside the good row, in either
    # release mode (it stopped the whole check with an AttributeError while its group was read)
    p.write_text(json.dumps(row) + "\n" + json.dumps(dict(row, id="r4", software=26.04)) + "\n")
    for releases in ("all", "newest"):
        res = check_runs(p, releases=releases)
        assert [r.id for r in res.runs] == ["r1"]
        assert dict(res.refused) == {"r4": "m.jsonl: software must be a text, got 26.04"}
    # and one that names no software at all (null) is refused as missing it, in either mode
    p.write_text(json.dumps(row) + "\n" + json.dumps(dict(row, id="r5", software=None)) + "\n")
    for releases in ("all", "newest"):
        res = check_runs(p, releases=releases)
        assert [r.id for r in res.runs] == ["r1"] and dict(res.refused) == {"r5": "m.jsonl: missing fields software"}


def test_cli_plan_from_and_runs_check(tmp_path):
    out = subprocess.run([sys.executable, "-m", "cosearch", "plan", "--from", str(DATA / "torchtitan_llama3_70b.toml"),
                          "training.local_batch_size=4", "--cluster", "dgx-a100", "--nodes", "8"],
                         capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "read from torchtitan TOML" in out.stderr and "dp8 tp8 pp1 mb4" in out.stdout
    p = _csv(tmp_path, ["a,g,gpt3-1.3b,dgx-a100,8,1,1,4,64,4000"])
    out = subprocess.run([sys.executable, "-m", "cosearch", "runs", "check", str(p), "--plot", "s.png"],
                         capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "s.png").stat().st_size > 0 and "all" in out.stdout


def test_two_files_that_disagree_are_refused_naming_both(tmp_path):
    """Two files of one run setting the same field differently: refused, naming the field and both
    files; agreeing files merge, their assumptions and neutral fields kept."""
    from cosearch.runs import merge
    a = read_config(DATA / "torchtitan_llama3_70b.toml")
    b = read_config(DATA / "torchtitan_llama3_70b.toml", ["parallelism.tensor_parallel_degree=4"])
    with pytest.raises(ValueError, match=r"tp: torchtitan TOML .* gives 8 where torchtitan TOML .* gives 4"):
        merge([a, b])
    both = merge([a, read_config(DATA / "torchtitan_llama3_70b.toml")])
    assert both.resolve(64).spec == a.resolve(64).spec and len(both.assumed) == 2 * len(a.assumed)


@pytest.mark.parametrize("fmt_file, override, field", [
    # a list field given a number: was TypeError "'int' object is not iterable"
    ("torchtitan_llama3_70b.toml", "model.converters=4096", "model.converters must be a list of names"),
    # a number given a list or a word: was TypeError / "could not convert string to float: 'abc'"
    ("foundry_mpt_1b.yaml", "model.resid_pdrop=[1]", "model.resid_pdrop must be a non-negative number"),
    ("foundry_mpt_1b.yaml", "model.expansion_ratio=abc", "model.expansion_ratio must be a positive number"),
    ("foundry_mpt_1b.yaml", "model.expansion_ratio=nan", "model.expansion_ratio must be a positive finite"),
    # a width beyond any float: was OverflowError "int too large to convert to float"
    ("foundry_mpt_1b.yaml", "model.expansion_ratio=1e300", "ffn_hidden = an integer of 304 digits is larger than any model's"),
])
def test_config_values_of_the_wrong_kind_are_refused_naming_the_field(fmt_file, override, field):
    """Found by fuzzing `cosearch plan --from FILE key=value` with values of the wrong kind: each
    is refused with the file and the field, never a TypeError or OverflowError from inside."""
    with pytest.raises(ValueError, match=field):
        read_config(DATA / fmt_file, [override]).resolve(64)


def test_maxtext_values_of_the_wrong_kind_are_refused_naming_the_field():
    base = ["ici_fsdp_parallelism=4", "base_emb_dim=256", "base_num_query_heads=4", "base_num_kv_heads=4",
            "head_dim=64", "base_num_decoder_layers=2", "base_mlp_dim=512", "vocab_size=1000"]
    assert read_maxtext(None, base + ["per_device_batch_size=2"]).resolve(4).global_batch == 8
    with pytest.raises(ValueError, match="per_device_batch_size must be a positive number, got \\[1, 2\\]"):
        read_maxtext(None, base + ["per_device_batch_size=[1,2]"])
    with pytest.raises(ValueError, match="mlp_activations must be a list of names, got 7"):
        read_maxtext(None, base + ["mlp_activations=7"])
    # one comma-separated string reads as the list
    assert read_maxtext(None, base + ["mlp_activations=gelu,linear"]).model.activation == "geglu"



def test_maxtext_pipeline_stages_run_the_circular_schedule_and_their_settings_neutral_without_them():
    """MaxText's SPMD pipeline, on the ICI or the DCN axis, is read as its circular schedule (the
    maxtext engine's, tests/test_circular_pipeline.py: 4 layers over 2 stages, 2 repeats of one
    layer, num_pipeline_microbatches or its default the stages); base.yml's pipeline settings act
    only with stages, so without them they are neutral."""
    base = ["ici_fsdp_parallelism=4", "base_emb_dim=256", "base_num_query_heads=4", "base_num_kv_heads=4",
            "head_dim=64", "base_num_decoder_layers=4", "base_mlp_dim=512", "vocab_size=1000",
            "per_device_batch_size=2"]
    for words, micro in ((["ici_pipeline_parallelism=2", "num_pipeline_microbatches=4"], 4),
                         (["num_slices=2", "dcn_pipeline_parallelism=2"], 2)):
        r = read_maxtext(None, base + words)
        assert (r.plan["pp"], r.plan["virtual_stages"], r.plan["pipeline_microbatches"]) == (2, 2, micro)
        d = r.resolve(8)
        assert d.engine.pipeline_schedule == "circular" and d.spec.pipeline_microbatches == micro
    rc = read_maxtext(None, base + ["num_layers_per_pipeline_stage=1", "num_pipeline_microbatches=-1",
                                    "pipeline_fsdp_ag_once=false"])
    assert {"num_layers_per_pipeline_stage", "num_pipeline_microbatches"} <= set(rc.neutral)
    assert rc.resolve(4).spec.pp == 1


def test_maxtext_decoder_block_must_be_the_one_the_model_is_read_as():
    """decoder_block chooses MaxText's architecture: the base_* dimensions are read as its llama2
    block, a model_name as its own block (configs/models/<name>.yml); another is refused (it was
    listed neutral)."""
    base = ["ici_fsdp_parallelism=4", "base_emb_dim=256", "base_num_query_heads=4", "base_num_kv_heads=4",
            "head_dim=64", "base_num_decoder_layers=2", "base_mlp_dim=512", "vocab_size=1000",
            "per_device_batch_size=2"]
    assert read_maxtext(None, base + ["decoder_block=llama2"]).model.norm == "rmsnorm"
    with pytest.raises(ValueError, match="decoder_block 'gemma'"):
        read_maxtext(None, base + ["decoder_block=gemma"])
    mixtral = ["model_name=mixtral-8x7b", "ici_fsdp_parallelism=4", "per_device_batch_size=1"]
    assert read_maxtext(None, mixtral + ["decoder_block=mixtral"]).model.name == "mixtral-8x7b"
    with pytest.raises(ValueError, match=r"mixtral-8x7b as \(its own block, 'mixtral'\)"):
        read_maxtext(None, mixtral + ["decoder_block=llama2"])


def test_foundry_fsdp_cpu_offload_refused():
    """Composer's fsdp_config.cpu_offload keeps FSDP's parameters in host memory: refused when on
    (it was listed neutral), neutral when off."""
    assert read_config(DATA / "foundry_mpt_1b.yaml", ["fsdp_config.cpu_offload=false"])
    with pytest.raises(ValueError, match="cpu_offload = true"):
        read_config(DATA / "foundry_mpt_1b.yaml", ["fsdp_config.cpu_offload=true"])

# MaxText's named remat policies, transcribed from Decoder.get_remat_policy (MaxText
# layers/decoders.py): the checkpoint names each keeps; here independently of the reader's table
_MAXTEXT_KEEPS = {
    "save_out_proj": {"out_proj"},
    "save_qkv_proj": {"query_proj", "value_proj", "key_proj", "qkv_proj"},
    "save_dot_except_mlp": {"query_proj", "value_proj", "key_proj", "qkv_proj", "out_proj"},
    "save_dot_except_mlpwi": {"query_proj", "value_proj", "key_proj", "qkv_proj", "out_proj", "mlpwo"},
    "save_dot_with_context_except_mlp": {"query_proj", "value_proj", "key_proj", "qkv_proj", "context", "out_proj"},
    "minimal_with_context": {"query_proj", "value_proj", "key_proj", "qkv_proj", "out_proj", "mlpwi_0", "mlpwi_1",
                             "mlpwi", "mlpwo", "context"},
}
_MT_DIMS = ["ici_fsdp_parallelism=8", "base_emb_dim=4096", "base_num_query_heads=32", "base_num_kv_heads=32",
            "head_dim=128", "base_num_decoder_layers=8", "base_mlp_dim=11008", "vocab_size=32000",
            "per_device_batch_size=4", "max_target_length=4096"]


def _mt_plan(policy, extra=()):
    from cosearch import cluster, hardware
    d = read_maxtext(None, _MT_DIMS + [f"remat_policy={policy}", *extra]).resolve(8)
    return d, evaluate(d.model, hardware.TPUv5p, cluster.tpuv5p_pod(8), d.spec, d.global_batch, engine=d.engine)


@pytest.mark.parametrize("policy", sorted(_MAXTEXT_KEEPS))
def test_maxtext_named_remat_policies_read_as_maxtext_defines_them(policy):
    """Each named policy is MaxText's save_only_these_names set: the engine's selective policy
    keeps exactly those tensors (and the layer input, the scan's carry) and rematerializes the
    rest; it reruns less than full remat and at least what a policy keeping more reruns."""
    from cosearch import graph
    d, plan = _mt_plan(policy)
    places = graph.maxtext_policy(d.engine.selective_recompute)
    assert d.spec.recompute == "selective"
    assert {t for t, w in places.items() if w == "device"} == _MAXTEXT_KEEPS[policy] | {"decoder_layer_input"}
    assert {w for t, w in places.items() if t not in _MAXTEXT_KEEPS[policy] | {"decoder_layer_input"}} == {"remat"}
    full = _mt_plan("full")[1]
    assert 0 < plan.breakdown["recompute_s"] < full.breakdown["recompute_s"]
    for other, keeps in _MAXTEXT_KEEPS.items():
        if keeps > _MAXTEXT_KEEPS[policy]:       # keeps more: reruns no more
            assert _mt_plan(other)[1].breakdown["recompute_s"] <= plan.breakdown["recompute_s"] + 1e-12


def test_maxtext_mlpwo_is_no_residual_and_offloaded_policies_send_to_the_host():
    """A dense MLP's output only enters the residual sum, whose backward reads nothing, so keeping
    it (save_dot_except_mlpwi) costs no memory and saves no rerun over save_dot_except_mlp;
    qkv_proj_offloaded keeps Q, K and V in host memory (less HBM than saving them, offload time
    only past the layers' compute); custom reads each tensor's own key, and a custom key under a
    named policy is noted, not applied."""
    a, b = _mt_plan("save_dot_except_mlp")[1], _mt_plan("save_dot_except_mlpwi")[1]
    assert a.memory_per_chip_bytes == b.memory_per_chip_bytes and a.step_time_s == b.step_time_s
    saved, off = _mt_plan("save_qkv_proj")[1], _mt_plan("qkv_proj_offloaded")[1]
    # per layer, per chip: 4 sequences x 4096 tokens x (3 x 4096) bf16 values of Q, K and V, the
    # hidden dimension whole (fsdp shards the batch); 8 layers
    qkv = 8 * 4 * 4096 * 3 * 4096 * 2
    assert max(saved.memory_per_chip_bytes) - max(off.memory_per_chip_bytes) == pytest.approx(qkv)
    assert off.breakdown["recompute_s"] == saved.breakdown["recompute_s"]
    d, custom = _mt_plan("custom", ["query_proj=offload", "key_proj=offload", "value_proj=offload"])
    assert custom.memory_per_chip_bytes == off.memory_per_chip_bytes and custom.step_time_s == off.step_time_s
    d2, _ = _mt_plan("save_qkv_proj", ["out_proj=device"])
    assert any("out_proj: 'device' applies under remat_policy custom only" in n for n in d2.assumed)
    with pytest.raises(ValueError, match="remat_policy custom: MaxText remat tensor context='disk'"):
        _mt_plan("custom", ["context=disk"])
    with pytest.raises(ValueError, match="remat_policy 'save_everything' is not modelled"):
        _mt_plan("save_everything")


def test_one_hot_embedding_is_a_gemm_whose_backward_is_the_tables_gradient_only():
    """MaxText's use_iota_embed: one-hot(tokens) x this rank's vocabulary rows, 2 T V h / tp FLOPs
    forward, and in the backward only the table's gradient (the one-hot has none), by hand; a
    gather costs no GEMM.  An unknown lookup is refused."""
    from cosearch import engine, graph, models
    m = models.preset("llama2-7b")              # V 32,000, h 4,096, s 4,096
    T, V, h = 2 * 4096, 32000, 4096
    f, b = graph.build_pair(m, 2, 2, "embedding", embedding="one-hot")
    gemms = [o for o in f.ops if o.kind == "gemm"]
    assert [(o.m, o.n, o.k) for o in gemms] == [(T, h, V // 2)]
    assert sum(2.0 * o.m * o.n * o.k for o in b.ops if o.kind == "gemm") == 2.0 * T * h * V / 2
    assert [o.name for o in b.ops if o.kind == "gemm"] == ["embedding_onehot.wgrad"]
    f2, b2 = graph.build_pair(m, 2, 2, "embedding")
    assert not [o for o in f2.ops + b2.ops if o.kind == "gemm"]
    with pytest.raises(ValueError, match="embedding"):
        engine.Engine("x", embedding="lookup")
    with pytest.raises(ValueError, match="embedding"):
        graph.build(m, 1, 1, part="embedding", embedding="lookup")


def test_checked_runs_grouped_by_what_their_cuda_graphs_capture(tmp_path):
    """MoE runs are also grouped by what their CUDA graphs capture (the host's time is not
    priced where it launches kernels): the statistics hand-worked over the runs of each capture,
    a dense run (no capture) left out of that table and of its 'all'; the capture read from the
    rows' notes, and nothing from a .csv file that does not say."""
    from cosearch.runs.check import CheckedRun, CheckResult, moe_captures
    runs = (CheckedRun("a", "g", "p", 110.0, 100.0, "whole iteration"),
            CheckedRun("b", "g", "p", 98.0, 100.0, "whole iteration"),
            CheckedRun("c", "g", "p", 150.0, 100.0, "none"),
            CheckedRun("d", "g", "p", 100.0, 100.0))
    res = CheckResult(runs)
    cap = res.groups("capture")
    assert set(cap) == {"whole iteration", "none", "all"}
    assert cap["whole iteration"]["n"] == 2 and cap["whole iteration"]["mae"] == pytest.approx(0.06)
    assert cap["whole iteration"]["mean_signed"] == pytest.approx(0.04)
    assert cap["all"]["n"] == 3 and cap["all"]["mean_signed"] == pytest.approx((0.10 - 0.02 + 0.50) / 3)
    assert res.groups()["all"]["n"] == 4
    assert "MoE runs by what their CUDA graphs capture" in res.table()
    assert "MoE runs by" not in CheckResult(runs[3:]).table()
    with pytest.raises(ValueError, match="by must be 'group' or 'capture'"):
        res.groups("chip")
    rows = [{"id": "m1", "num_experts": 128, "software": "Megatron-Bridge / NeMo 26.08 container",
             "notes": "cuda_graph=full_iteration scope=[]; moe dispatcher backend=hybridep"},
            {"id": "m2", "num_experts": 64, "software": "Megatron-Bridge / NeMo 26.02 container",
             "notes": "cuda_graph=transformer_engine scope=['moe_router', 'moe_preprocess']"},
            {"id": "m3", "num_experts": 8, "software": "Megatron-Bridge / NeMo 26.02 container", "notes": ""},
            {"id": "dense", "software": "Megatron-Bridge / NeMo 26.02 container", "notes": ""}]
    path = tmp_path / "runs.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    assert moe_captures(path) == {"m1": "whole iteration", "m2": "per module: moe_router, moe_preprocess",
                                  "m3": "none"}
    (tmp_path / "runs.csv").write_text("model,cluster,chips,tp,pp,mb,batch,measured_tok_s_per_chip\n"
                                       "gpt3-1.3b,dgx-a100,8,1,1,4,64,4000\n")
    assert moe_captures(tmp_path / "runs.csv") == {}             # no cuda_graphs column: nothing said


def test_a_csvs_cuda_graphs_column_groups_its_runs_by_capture(tmp_path):
    """A user's CSV says what each run's CUDA graphs capture in its optional cuda_graphs column:
    the runs are grouped by it as the validation schema's MoE rows are (Megatron's words, read
    as the capture classes), a row that leaves it empty is in no capture group, and a word
    Megatron does not have refuses that row by name."""
    header = "id,group,model,cluster,chips,tp,pp,mb,batch,measured_tok_s_per_chip,cuda_graphs"
    p = _csv(tmp_path, ["a,g,gpt3-1.3b,dgx-a100,8,1,1,4,64,4000,full_iteration",
                        "b,g,gpt3-1.3b,dgx-a100,8,1,1,4,64,3000,transformer_engine",
                        "c,g,gpt3-1.3b,dgx-a100,8,1,1,4,64,3500,",
                        "d,g,gpt3-1.3b,dgx-a100,8,1,1,4,64,3500,cudnn"], header)
    res = check_runs(p)
    by_id = {r.id: r for r in res.runs}
    assert (by_id["a"].capture, by_id["b"].capture, by_id["c"].capture) == ("whole iteration", "per module", "")
    cap = res.groups("capture")
    assert set(cap) == {"whole iteration", "per module", "all"} and cap["all"]["n"] == 2
    assert cap["whole iteration"]["mean_signed"] == pytest.approx(by_id["a"].error)
    why = dict(res.refused)
    assert "cuda_graphs 'cudnn': give one of full_iteration" in why["d"]


def test_a_csvs_op_fuser_column_fuses_the_experts_bias_and_clamp(tmp_path):
    """GPT-OSS (expert biases, clamped activation) checked from a CSV: with ``op_fuser`` 1 its
    experts run fused and the prediction is faster than the same run's without it (Megatron-Core's
    eager passes); a value that is not 0/1 refuses the row by name."""
    header = "id,group,model,cluster,chips,tp,pp,mb,batch,measured_tok_s_per_chip,ep,zero,op_fuser"
    p = _csv(tmp_path, ["fused,g,gpt-oss-120b,dgx-h100,64,1,1,1,512,5000,64,1,1",
                        "eager,g,gpt-oss-120b,dgx-h100,64,1,1,1,512,5000,64,1,0",
                        "bad,g,gpt-oss-120b,dgx-h100,64,1,1,1,512,5000,64,1,yes"], header)
    res = check_runs(p)
    by_id = {r.id: r for r in res.runs}
    assert "op-fuser" in by_id["fused"].plan and "op-fuser" not in by_id["eager"].plan
    assert by_id["fused"].predicted_tok_s_per_chip > by_id["eager"].predicted_tok_s_per_chip
    assert "op_fuser 'yes' is not 0/1" in dict(res.refused)["bad"]


def test_a_csvs_moe_dispatch_columns(tmp_path):
    """An MoE run's dispatch from a CSV: ``moe_dispatcher``, ``moe_flex_backend``,
    ``moe_a2a_overlap`` and ``etp`` price the run as ``evaluate()`` does with that engine and plan;
    a backend without the flex dispatcher, a dispatcher on a dense model and a bad ``etp`` are
    refused by name."""
    from cosearch import cluster, engine
    from cosearch.models import preset
    from cosearch.plan import PlanSpec, evaluate
    header = ("id,group,model,cluster,chips,tp,pp,mb,batch,measured_tok_s_per_chip,ep,zero,sp,moe_dispatcher,"
              "moe_flex_backend,moe_a2a_overlap,etp")
    p = _csv(tmp_path, ["nccl,g,qwen3-30b-a3b,dgx-h100,16,1,1,1,64,5000,16,1,0,,,0,",
                        "deepep,g,qwen3-30b-a3b,dgx-h100,16,1,1,1,64,5000,16,1,0,flex,deepep,0,",
                        "hybridep-overlap,g,qwen3-30b-a3b,dgx-h100,16,1,1,1,64,5000,16,1,0,flex,hybridep,1,",
                        "etp1,g,qwen3-30b-a3b,dgx-h100,16,2,1,1,64,5000,16,1,1,,,0,1",
                        "nobackend,g,qwen3-30b-a3b,dgx-h100,16,1,1,1,64,5000,16,1,0,,deepep,0,",
                        "dense,g,llama3-8b,dgx-h100,16,1,1,1,64,5000,1,1,0,flex,,0,",
                        "badetp,g,qwen3-30b-a3b,dgx-h100,16,2,1,1,64,5000,16,1,1,,,0,2"], header)
    res = check_runs(p)
    by_id = {r.id: r for r in res.runs}
    m, cl = preset("qwen3-30b-a3b"), cluster.preset("dgx-h100", 2)
    core = engine.preset("megatron-core")
    for rid, spec, eng in (
            ("nccl", PlanSpec(16, 1, 1, 1, zero=1, flash_attention=True, expert_parallel=16), core),
            ("deepep", PlanSpec(16, 1, 1, 1, zero=1, flash_attention=True, expert_parallel=16),
             engine.with_moe_dispatch(core, "flex", backend="deepep")),
            ("hybridep-overlap", PlanSpec(16, 1, 1, 1, zero=1, flash_attention=True, expert_parallel=16),
             engine.with_moe_dispatch(core, "flex", True, backend="hybridep")),
            ("etp1", PlanSpec(8, 2, 1, 1, zero=1, flash_attention=True, sequence_parallel=True, expert_parallel=16,
                              expert_tensor_parallel=1), core)):
        want = evaluate(m, "H100", cl, spec, 64, engine=eng).tokens_per_s / 16
        assert by_id[rid].predicted_tok_s_per_chip == pytest.approx(want, rel=1e-9)
    why = dict(res.refused)
    assert "give moe_dispatcher flex" in why["nobackend"]
    assert "has no experts" in why["dense"]
    assert "etp '2'" in why["badetp"]


def test_torchtitan_expert_parallelism_as_torchtitan_defines_it():
    """torchtitan's ``expert_tensor_parallel_degree``: 1 (its default) under tp > 1 is
    "[partial dp + all tp -> ep]", cosearch's etp 1; equal to tp is etp = tp; anything else is
    refused, as torchtitan refuses it.  ``expert_parallel_comm_backend`` deepep runs the flex
    dispatcher with DeepEP; standard, PyTorch's all-to-alls with the tokens gathered over tp."""
    from cosearch.runs import read_torchtitan
    m = models.preset("qwen3-30b-a3b")
    base = {"model": {"name": "qwen3", "flavor": "30B-A3B"}, "training": {"seq_len": m.seq_len, "local_batch_size": 2},
            "parallelism": {"tensor_parallel_degree": 2, "expert_parallel_degree": 8},
            "activation_checkpoint": {"mode": "none"}, "compile": {"enable": True}}
    d = read_torchtitan(base).resolve(16, model=m)
    assert (d.spec.tp, d.spec.expert_parallel, d.spec.expert_tensor_parallel) == (2, 8, 1)
    assert d.engine.moe_dispatcher == "gather-tokens"
    same = dict(base, parallelism=dict(base["parallelism"], expert_tensor_parallel_degree=2,
                                       expert_parallel_comm_backend="deepep"))
    d = read_torchtitan(same).resolve(16, model=m)
    assert d.spec.expert_tensor_parallel is None
    assert (d.engine.moe_dispatcher, d.engine.moe_flex_backend) == ("flex", "deepep")
    with pytest.raises(ValueError, match="expert_tensor_parallel_degree 4"):
        read_torchtitan(dict(base, parallelism=dict(base["parallelism"], expert_tensor_parallel_degree=4)))
    with pytest.raises(ValueError, match="expert_parallel_comm_backend 'nccl'"):
        read_torchtitan(dict(base, parallelism=dict(base["parallelism"], expert_parallel_comm_backend="nccl")))


def test_maxtext_moe_configs_read_as_maxtext_runs_them():
    """MaxText's MoE model names map to cosearch's presets of the same published models, and its
    MoE switches are read: ``sparse_matmul`` (base.yml's True: dropless grouped GEMMs; Megablox or,
    with ``megablox`` False, ``jax.lax.ragged_dot``, said), ``sparse_matmul`` False with
    ``capacity_factor`` 1.25 (the Mixtral dropping recipe: the dense one-hot dispatch at that factor,
    as the validation rows read it), and the refusals: dropping through ``sparse_matmul``, the dense
    path without a factor, expert counts contradicting the model, experts on a dense model."""
    base = ["per_device_batch_size=1", "ici_fsdp_parallelism=-1", "remat_policy=full"]
    d = read_maxtext(None, base + ["model_name=deepseek3-671b", "ici_expert_parallelism=8", "megablox=False"]).resolve(64)
    assert d.model.name == "deepseek-v3" and d.spec.expert_parallel == 8 and not d.model.moe_einsum_dispatch
    assert any("ragged_dot" in a for a in d.assumed)
    drop = read_maxtext(None, base + ["model_name=mixtral-8x7b", "sparse_matmul=False", "megablox=False",
                                      "capacity_factor=1.25"]).resolve(64)
    assert (drop.model.moe_capacity_factor, drop.model.moe_einsum_dispatch) == (1.25, True)
    assert math.isfinite(evaluate(drop.model, drop.chip or "TPUv5p", 64, drop.spec, drop.global_batch,
                                  engine=drop.engine).step_time_s)
    for extra, why in ((["model_name=mixtral-8x7b", "capacity_factor=1.25"], "with sparse_matmul"),
                       (["model_name=mixtral-8x7b", "sparse_matmul=False"], "every expert on every token"),
                       (["model_name=qwen3-30b-a3b", "num_experts=64"], "contradicts"),
                       (["model_name=llama2-7b", "num_experts=8"], "a dense model"),
                       (["model_name=mixtral-8x7b", "capacity_factor=abc"], "must be a number")):
        with pytest.raises(ValueError, match=why):
            read_maxtext(None, base + extra)


def test_maxtext_counts_jax_devices_on_a_chip_of_two():
    """A TPU7x chip exposes two JAX devices (Accelerator.devices_per_chip); MaxText counts devices.
    The tpu-recipes Llama 3.1 70B recipe on a tpu7x-4x4x4 slice (64 chips, 128 devices),
    per_device_batch_size 2: 2 x 128 = 256 sequences, 4 a chip (ici_fsdp -1: ZeRO-3 over every
    chip); its kernel tuning (splash blocks) said, its bf16 first moment as 14 bytes a parameter
    (4 weights + 4 gradients + 2 + 4 moments: cosearch's optimizer share 10)."""
    from cosearch import hardware
    assert hardware.preset("TPU7x").devices_per_chip == 2 and hardware.H100.devices_per_chip == 1
    d = read_config(DATA / "maxtext_llama3_70b_tpu7x.args", devices_per_chip=2).resolve(64)
    assert d.global_batch == 256 and (d.spec.dp, d.spec.microbatch, d.spec.zero) == (64, 4, 3)
    assert d.memory.optimizer_bytes == 10.0 and d.memory.bytes_per_param == 14.0
    assert any("kernel tuning" in a for a in d.assumed) and any("2 devices a chip" in a for a in d.assumed)
    # counted as one device a chip, the same words are half the batch
    assert read_config(DATA / "maxtext_llama3_70b_tpu7x.args").resolve(64).global_batch == 128
    # an explicit fsdp degree counts devices: 64 x data 2 on 128 devices is 32 x 2 on 64 chips
    words = ["model_name=llama3.1-70b", "per_device_batch_size=1", "ici_fsdp_parallelism=64", "ici_data_parallelism=2"]
    two = read_maxtext(None, words, devices_per_chip=2).resolve(64)
    assert (two.spec.dp, two.spec.zero_group, two.global_batch) == (64, 32, 128)
    with pytest.raises(ValueError, match="does not split into chips of 2 devices"):
        read_maxtext(None, ["model_name=llama3.1-70b", "ici_fsdp_parallelism=3", "ici_data_parallelism=2"],
                     devices_per_chip=2)
    # no fsdp: the data axis holds the chip's devices
    dp_only = read_maxtext(None, ["model_name=llama3.1-8b", "per_device_batch_size=1", "ici_fsdp_parallelism=1",
                                  "ici_data_parallelism=8"], devices_per_chip=2).resolve(4)
    assert (dp_only.spec.dp, dp_only.spec.zero, dp_only.global_batch) == (4, 0, 8)
    with pytest.raises(ValueError, match="counts GPUs"):
        read_config(DATA / "torchtitan_llama3_70b.toml", devices_per_chip=2)
    from cosearch.hardware.chips import Accelerator
    for bad in (0, 9, 1.5, True):
        with pytest.raises(ValueError, match="devices_per_chip"):
            hardware.H100.with_(devices_per_chip=bad)
    assert isinstance(hardware.H100.with_(devices_per_chip=2), Accelerator)


@pytest.mark.parametrize("words,state", [
    (["mu_dtype=bfloat16"], 14.0), (["mu_dtype=bfloat16", "grad_dtype=bfloat16"], 12.0),
    (["weight_dtype=bfloat16"], 8.0), (["weight_dtype=float32", "mu_dtype=float32"], 16.0)])
def test_maxtext_parameter_state_from_its_dtypes(words, state):
    """MaxText's weights (float32 by default), gradients and Adam's first moment (the weights'
    dtype unless set) and second moment (the weights'): bytes a parameter, by hand."""
    d = read_maxtext(None, ["model_name=llama3.1-8b", "per_device_batch_size=1", *words]).resolve(8)
    got = 16.0 if d.memory is None else d.memory.bytes_per_param
    assert got == state


def test_maxtext_qwix_fp8_and_what_it_reads_and_says():
    """quantization fp8_full is Qwix's (use_qwix_quantization true): FP8 GEMMs; its fixed
    calibration said; random routing, vocabulary tiling and expert sharding over fsdp said; a
    dtype MaxText does not have refused."""
    base = ["model_name=qwen3-235b-a22b", "per_device_batch_size=1", "sparse_matmul=True"]
    d = read_maxtext(None, base + ["quantization=fp8_full", "use_qwix_quantization=True",
                                   "weight_quantization_calibration_method='fixed,-224,224'", "use_random_routing=True",
                                   "num_vocab_tiling=4", "shard_exp_on_fsdp=True", "sa_block_q=1024",
                                   "use_tokamax_gmm=True"]).resolve(16)
    assert d.spec.precision == "fp8"
    for said in ("calibration", "use_random_routing", "num_vocab_tiling 4", "shard_exp_on_fsdp", "kernel tuning (2 keys"):
        assert any(said in a for a in d.assumed), said
    with pytest.raises(ValueError, match="use_qwix_quantization"):
        read_maxtext(None, base + ["quantization=fp8_full"])
    with pytest.raises(ValueError, match="mu_dtype 'float16' is not modelled"):
        read_maxtext(None, base + ["mu_dtype=float16"])
    with pytest.raises(ValueError, match="has none"):
        read_maxtext(None, ["model_name=llama3.1-8b", "shard_exp_on_fsdp=True"])
    for bad in ("num_vocab_tiling=0", "num_vocab_tiling=-3", "attn_logits_soft_cap=abc", "attn_logits_soft_cap=-1"):
        with pytest.raises(ValueError, match=bad.split("=")[0]):
            read_maxtext(None, base + [bad])


def test_check_runs_given_by_their_config_files(tmp_path):
    """The config-file CSV: each run's own framework file (here the tpu-recipes Ironwood Llama 3.1
    70B recipe, 64 TPU7x chips) read on the cluster's chip (two JAX devices a chip) and priced;
    the error is predicted over measured tokens/s a chip, checked against evaluate() of the same
    description; a global batch that contradicts the file's, a missing column, and an unknown one
    refused by name."""
    import shutil

    from cosearch import hardware
    from cosearch.cluster import preset as cluster_preset
    shutil.copy(DATA / "maxtext_llama3_70b_tpu7x.args", tmp_path / "l70.args")
    head = "id,group,config,cluster,chips,global_batch,measured_tok_s_per_chip,measured_step_s,source\n"
    (tmp_path / "runs.csv").write_text(head + "l70,MaxText TPU7x bf16,l70.args,tpu7x-pod,64,256,2686.98,12.20,tpu-recipes\n"
                                       "bad,MaxText TPU7x bf16,l70.args,tpu7x-pod,64,512,2686.98,,\n")
    res = check_runs(tmp_path / "runs.csv")
    (run,) = res.runs
    d = read_config(tmp_path / "l70.args", devices_per_chip=2).resolve(64)
    plan = evaluate(d.model, hardware.preset("TPU7x"), cluster_preset("tpu7x-pod", 64), d.spec, d.global_batch,
                    engine=d.engine, mem=d.memory)
    assert run.error == pytest.approx(plan.tokens_per_s / 64 / 2686.98 - 1.0)
    assert run.group == "MaxText TPU7x bf16" and "dp64" in run.plan
    (rid, why), = res.refused
    assert rid == "bad" and "global batch 512 contradicts" in why
    (tmp_path / "missing.csv").write_text("id,config,cluster,chips\nx,l70.args,tpu7x-pod,64\n")
    with pytest.raises(ValueError, match="missing columns measured_tok_s_per_chip"):
        check_runs(tmp_path / "missing.csv")
    (tmp_path / "unknown.csv").write_text("config,cluster,chips,measured_tok_s_per_chip,tp\nl70.args,tpu7x-pod,64,1,1\n")
    with pytest.raises(ValueError, match="unknown columns tp"):
        check_runs(tmp_path / "unknown.csv")


@pytest.mark.parametrize("fields, gather, said", [
    # Megatron-Bridge's bf16_with_mxfp8_mixed recipe gathers its parameters in FP8 (its own field)
    (["mixed_precision=bf16_with_mxfp8_mixed"], True, None),
    (["mixed_precision=bf16_with_mxfp8_mixed", "mixed_precision.fp8_param_gather=false"], False, None),
    # fp8_param is the same switch (MixedPrecisionConfig keeps the two in sync)
    (["mixed_precision=bf16_with_mxfp8_mixed", "mixed_precision.fp8_param=false"], False, None),
    # the model's value is overwritten by the mixed-precision config's at setup
    (["mixed_precision=bf16_with_mxfp8_mixed", "model.fp8_param_gather=false"], True, "model.fp8_param_gather=false"),
    # without a mixed-precision config the model's value stands
    (["model.fp8=e4m3", "model.fp8_recipe=mxfp8", "model.fp8_param_gather=true"], True, None),
    (["model.fp8=e4m3", "model.fp8_recipe=mxfp8"], False, None),
])
def test_bridge_precision_switches_as_bridge_sets_them_up(fields, gather, said):
    """Megatron-Bridge's MixedPrecisionConfig.setup writes its fields over the model's: the
    mixed-precision config (the field, else its recipe's value, else the default) decides."""
    from cosearch.runs import read_megatron_bridge
    base = ["train.global_batch_size=64", "train.micro_batch_size=1", "model.attention_backend=fused"]
    rc = read_megatron_bridge(None, base + fields, model=models.preset("llama3-8b"))
    assert rc.engine.fp8_param_gather is gather
    notes = [a for a in rc.assumed if "is overwritten by the mixed-precision config" in a]
    assert (said is None and not notes) or (said is not None and any(n.startswith(said) for n in notes))


def test_bridge_precision_switch_contradiction_and_wgrad():
    from cosearch.runs import read_megatron_bridge
    base = ["train.global_batch_size=64", "train.micro_batch_size=1", "mixed_precision=bf16_with_mxfp8_mixed"]
    with pytest.raises(ValueError, match="contradict each other"):
        read_megatron_bridge(None, base + ["mixed_precision.fp8_param=true", "mixed_precision.fp8_param_gather=false"],
                             model=models.preset("llama3-8b"))
    # the model's fp8_wgrad=false is overwritten (the recipe keeps FP8 weight gradients): read, not refused
    rc = read_megatron_bridge(None, base + ["model.fp8_wgrad=false"], model=models.preset("llama3-8b"))
    assert any(a.startswith("model.fp8_wgrad=false is overwritten") for a in rc.assumed)
    with pytest.raises(ValueError, match="no-fp8-wgrad"):
        read_megatron_bridge(None, base + ["mixed_precision.fp8_wgrad=false"], model=models.preset("llama3-8b"))


@pytest.mark.parametrize("fields, grad, said", [
    # a comm-overlap config with the distributed optimizer turns the data-parallel overlap on
    (["comm_overlap.tp_comm_overlap=false", "ddp.use_distributed_optimizer=true"], True, False),
    # ... over the DDP config's own value, said
    (["comm_overlap.tp_comm_overlap=false", "ddp.use_distributed_optimizer=true", "ddp.overlap_grad_reduce=false"],
     True, True),
    (["comm_overlap.tp_comm_overlap=false", "ddp.use_distributed_optimizer=true",
      "comm_overlap.overlap_grad_reduce=false", "comm_overlap.overlap_param_gather=false"], False, False),
    # without the distributed optimizer, or without a comm-overlap config, the DDP config's value stands
    (["comm_overlap.tp_comm_overlap=false"], False, False),
    (["ddp.use_distributed_optimizer=true"], False, False),
    (["ddp.use_distributed_optimizer=true", "ddp.overlap_grad_reduce=true"], True, False),
])
def test_bridge_data_parallel_overlap_as_comm_overlap_sets_it_up(fields, grad, said):
    """Megatron-Bridge's CommOverlapConfig.setup writes its data-parallel overlap (on by default with
    the distributed optimizer and more than one data-parallel rank) into the DDP config; the
    parameter gather's overlap left on with the gradients' off (which Bridge runs and Megatron-LM's
    argument check refuses) is priced with the gradients' overlap term, said; the optimizer's
    overlap_param_gather is the same switch (read, not refused)."""
    from cosearch.runs import read_megatron_bridge
    base = ["train.global_batch_size=64", "train.micro_batch_size=1"]
    rc = read_megatron_bridge(None, base + fields, model=models.preset("llama3-8b"))
    assert rc.engine.overlap_grad_reduce is grad
    assert any("is overwritten by the comm-overlap config" in a for a in rc.assumed) is said
    if grad and not said and "comm_overlap.tp_comm_overlap=false" in fields:
        lone = read_megatron_bridge(None, base + fields + ["comm_overlap.overlap_grad_reduce=false"],
                                    model=models.preset("llama3-8b"))
        assert not lone.engine.overlap_grad_reduce
        assert any(a.startswith("overlap_param_gather without overlap_grad_reduce") for a in lone.assumed)
    opt = read_megatron_bridge(None, base + fields + ["optimizer.overlap_param_gather=true"],
                               model=models.preset("llama3-8b"))
    assert "optimizer.overlap_param_gather" not in opt.neutral and opt.engine.overlap_grad_reduce is grad


@pytest.mark.parametrize("fields, ep_overlap, said", [
    (["model.overlap_moe_expert_parallel_comm=true"], True, False),                  # no comm-overlap config
    (["comm_overlap.overlap_moe_expert_parallel_comm=true"], True, False),
    # a comm-overlap config without it writes its own off over the model's
    (["comm_overlap.tp_comm_overlap=false", "model.overlap_moe_expert_parallel_comm=true"], False, True),
])
def test_bridge_model_overlap_as_comm_overlap_sets_it_up(fields, ep_overlap, said):
    """Megatron-Bridge's CommOverlapConfig.setup writes the model's overlap switches (off unless the
    comm-overlap config turns them on) over the model's."""
    from cosearch.runs import read_megatron_bridge
    base = ["train.global_batch_size=64", "train.micro_batch_size=1", "model.expert_model_parallel_size=8",
            "model.moe_token_dispatcher_type=alltoall"]
    rc = read_megatron_bridge(None, base + fields, model=models.preset("qwen3-30b-a3b"))
    assert rc.engine.overlap_moe_a2a is ep_overlap
    assert any(a.startswith("model.overlap_moe_expert_parallel_comm=true is overwritten") for a in rc.assumed) is said


def test_megatron_line_without_an_attention_flag_reads_as_megatron_runs_it():
    """Megatron-LM's defaults since April 2024 (--transformer-impl transformer_engine, e7b74a4b7e)
    and --attention-backend auto (TransformerConfig) run Transformer Engine's fused attention: a
    line without an attention flag (Megatron-LM's own Mixtral example) read so, said; the local
    implementation without flash attention unfused; an implementation cosearch does not price
    refused.  (Until stop 71 such a line read as unfused attention, silently.)"""
    base = "--micro-batch-size 1 --global-batch-size 64 --tensor-model-parallel-size 2 --bf16"
    rc = read_megatron_args(base, models.preset("llama2-7b"))
    assert rc.plan["flash_attention"] and any("--attention-backend auto" in a for a in rc.assumed)
    assert read_megatron_args(base + " --transformer-impl transformer_engine", "llama2-7b").plan["flash_attention"]
    assert not read_megatron_args(base + " --transformer-impl local", "llama2-7b").plan["flash_attention"]
    assert read_megatron_args(base + " --transformer-impl local --use-flash-attn", "llama2-7b").plan["flash_attention"]
    assert not read_megatron_args(base + " --attention-backend unfused", "llama2-7b").plan["flash_attention"]
    with pytest.raises(ValueError, match="inference_optimized"):
        read_megatron_args(base + " --transformer-impl inference_optimized", "llama2-7b")


def test_readers_take_a_model_preset_by_name():
    """A reader's model may be a preset's name (it was a traceback from deep inside); anything
    else but a ModelConfig refused by name."""
    rc = read_config(DATA / "megatron_deepseek_v3.args", model="deepseek-v3")
    assert rc.model.name == "deepseek-v3"
    assert read_configs([DATA / "megatron_deepseek_v3.args"], model="deepseek-v3").model.name == "deepseek-v3"
    assert read_config(DATA / "torchtitan_llama3_70b.toml").resolve(64, model="llama3-70b").model.name == "llama3-70b"
    with pytest.raises(ValueError, match="read_configs: model must be a ModelConfig or a model preset's name"):
        read_configs([DATA / "megatron_deepseek_v3.args"], model=5)
    with pytest.raises(ValueError, match="unknown model preset"):
        read_config(DATA / "megatron_deepseek_v3.args", model="no-such-model")


def test_nemo1_attention_kernel_as_its_layers_run_it():
    """NeMo 1's attention: Transformer Engine's layers (Megatron-Core's te_gpt spec under mcore_gpt,
    TE's own TransformerLayer in NeMo's legacy model) run fused attention; without TE,
    Megatron-Core's local spec and NeMo's legacy CoreAttention run it unfused unless
    use_flash_attention (the legacy TE model read unfused until stop 71)."""
    f = DATA / "nemo1_gpt3_5b.yaml"
    flash = {(te, mc, fa): read_config(f, [f"model.transformer_engine={te}", f"model.mcore_gpt={mc}",
                                           f"model.use_flash_attention={fa}"]).resolve().spec.flash_attention
             for te in ("true", "false") for mc in ("true", "false") for fa in ("true", "false")}
    assert flash == {(te, mc, fa): te == "true" or fa == "true"
                     for te in ("true", "false") for mc in ("true", "false") for fa in ("true", "false")}


def test_maxtext_dropout_read_where_it_runs():
    """MaxText's dropout_rate (base.yml 0.0; enable_dropout true) was listed neutral: a rate above
    0 runs dropout after the embedding and each layer's attention and MLP, priced as cosearch's
    dropout ops (their masks kept: more activation memory than without)."""
    base = ["ici_fsdp_parallelism=4", "base_emb_dim=256", "base_num_query_heads=4", "base_num_kv_heads=4",
            "head_dim=64", "base_num_decoder_layers=2", "base_mlp_dim=512", "vocab_size=1000",
            "per_device_batch_size=2", "remat_policy=minimal"]
    off = read_maxtext(None, base)
    on = read_maxtext(None, base + ["dropout_rate=0.1"])
    assert not off.model.dropout and on.model.dropout and any("dropout_rate 0.1" in a for a in on.assumed)
    assert not read_maxtext(None, base + ["dropout_rate=0.1", "enable_dropout=false"]).model.dropout
    d_off, d_on = off.resolve(4), on.resolve(4)
    from cosearch import cluster, hardware
    a = evaluate(d_off.model, hardware.TPUv5e, cluster.tpuv5e_pod(4), d_off.spec, d_off.global_batch, engine=d_off.engine)
    b = evaluate(d_on.model, hardware.TPUv5e, cluster.tpuv5e_pod(4), d_on.spec, d_on.global_batch, engine=d_on.engine)
    assert b.memory_per_chip_bytes[0] > a.memory_per_chip_bytes[0] and b.step_time_s > a.step_time_s


def test_maxtext_optimizer_state_from_opt_type():
    """opt_type (listed neutral until stop 71) decides the optimizer's state: adamw and adam_pax keep
    Adam's two moments (MaxText's all-float32 default, 16 bytes a parameter), optax.sgd none
    (4 + 4 = 8 bytes: cosearch's MemoryConfig of the same total, 2 + 2 + 4), muon refused."""
    base = ["ici_fsdp_parallelism=4", "base_emb_dim=256", "base_num_query_heads=4", "base_num_kv_heads=4",
            "head_dim=64", "base_num_decoder_layers=2", "base_mlp_dim=512", "vocab_size=1000",
            "per_device_batch_size=2"]
    assert read_maxtext(None, base + ["opt_type=adam_pax"]).memory is None
    sgd = read_maxtext(None, base + ["opt_type=sgd"]).memory
    assert sgd.weight_bytes + sgd.grad_bytes + sgd.optimizer_bytes == 8
    with pytest.raises(ValueError, match="opt_type 'muon'"):
        read_maxtext(None, base + ["opt_type=muon"])


def test_foundry_optimizer_state_from_its_name():
    """llm-foundry's optimizer section was neutral whole; its name decides the state each parameter
    keeps (llmfoundry/optim): DecoupledAdamW two fp32 moments (16 bytes with FSDP's fp32 weights and
    gradients, the memory model's default), the Lion variants one (12), no_op none (8); another
    refused by name."""
    f = DATA / "foundry_mpt_1b.yaml"
    assert read_config(f).memory is None
    for opt, total in (("decoupled_lionw", 12), ("clip_lion", 12), ("no_op", 8)):
        m = read_config(f, [f"optimizer.name={opt}"]).memory
        assert m.weight_bytes + m.grad_bytes + m.optimizer_bytes == total
    with pytest.raises(ValueError, match="optimizer.name 'adafactor'"):
        read_config(f, ["optimizer.name=adafactor"])


def test_optimizer_read_where_a_config_names_it():
    """Megatron's --optimizer (unknown to the reader until stop 71, so a line naming its default was
    refused) and Megatron-Bridge's optimizer.optimizer (neutral, so sgd was priced as Adam): adam
    read, anything else refused by name (its state is not Adam's)."""
    base = "--micro-batch-size 1 --global-batch-size 64"
    assert read_megatron_args(base + " --optimizer adam", "llama2-7b")
    with pytest.raises(ValueError, match="--optimizer 'sgd'"):
        read_megatron_args(base + " --optimizer sgd", "llama2-7b")
    words = ["train.micro_batch_size=1", "train.global_batch_size=64"]
    assert read_megatron_bridge(None, words + ["optimizer.optimizer=adam"], "llama3-8b")
    with pytest.raises(ValueError, match="--optimizer 'sgd'"):
        read_megatron_bridge(None, words + ["optimizer.optimizer=sgd"], "llama3-8b")
