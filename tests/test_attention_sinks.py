"""Attention sinks (GPT-OSS) where the framework applies them: inside the fused attention kernel
(nothing priced) or as torchtitan rescales the kernel's output, ``out * sigmoid(lse - sinks)``
(``models/gpt_oss/model.py``), compiled or op by op: the pass's bytes by hand and the step it
adds."""

from dataclasses import replace

import pytest

from cosearch import engine, graph, hardware, models
from cosearch.models import ModelConfig, from_hf_config
from cosearch.plan import PlanSpec, evaluate

# a small GPT-OSS-shaped dense model: 2 layers, 8 heads of 32, 2 KV heads, sinks
TINY = ModelConfig("tiny-sinks", 2, 256, 8, 512, 1000, 128, kv_heads=2, activation="swiglu", norm="rmsnorm",
                   position="rotary", bias=False, tie_embeddings=False, dropout=False, attention_sinks=True)


def _sink_ops(fwd, bwd):
    return next((o for o in fwd.ops if o.name == "attn_sinks"), None), \
        next((o for o in bwd.ops if o.name == "attn_sinks.grad"), None)


@pytest.mark.parametrize("mode,fwd_bytes,bwd_bytes", [("compiled", (2, 2), (4, 2)), ("eager", (2, 2), (8, 4))])
@pytest.mark.parametrize("tp", [1, 2])
def test_the_rescale_moves_its_bytes_over_the_attention_output(mode, fwd_bytes, bwd_bytes, tp):
    """Per element of this rank's attention output (128 tokens x 8 / tp heads x 32): eager, the
    product reads and writes it (2, 2) and its backward reads 8 and writes 4 bytes (grad x scale,
    grad x out, their sum over the head); compiled, one kernel each way (2, 2 and 4, 2)."""
    f, b = graph.build_pair(TINY, tp, 1, flash_attention=True, attention_sinks=mode)
    op, grad = _sink_ops(f, b)
    n = 128 * (8 // tp) * 32
    assert op.elements == n
    assert (op.bytes_read, op.bytes_written) == (fwd_bytes[0] * n, fwd_bytes[1] * n)
    assert (grad.bytes_read, grad.bytes_written) == (bwd_bytes[0] * n, bwd_bytes[1] * n)


def test_only_where_the_framework_applies_them_outside_the_kernel():
    assert _sink_ops(*graph.build_pair(TINY, 1, 1, flash_attention=True)) == (None, None)      # "kernel"
    no_sinks = TINY.with_(attention_sinks=False)
    assert _sink_ops(*graph.build_pair(no_sinks, 1, 1, flash_attention=True, attention_sinks="eager")) == (None, None)
    assert (engine.FSDP.attention_sinks, engine.FSDP_EAGER.attention_sinks) == ("compiled", "eager")
    assert engine.megatron_core().attention_sinks == engine.LLM_FOUNDRY.attention_sinks == "kernel"
    with pytest.raises(ValueError, match="attention_sinks"):
        replace(engine.FSDP, attention_sinks="fused")
    with pytest.raises(ValueError, match="attention_sinks"):
        TINY.with_(attention_sinks=1)


def test_the_step_grows_by_the_pass_every_layer_and_microbatch():
    """One chip, no recompute: torchtitan's eager engine prices the model with sinks exactly the
    pass's bytes (forward and backward) and its two launches x 2 layers x 4 microbatches slower than
    without."""
    chip = hardware.preset("H100")
    stream = chip.hbm_bandwidth_Bps * chip.efficiency.memory
    n = 128 * 8 * 32
    # the pass's bytes at the memory stream, and one kernel launch each way (the preset's 4 us)
    extra_s = (2 + 2 + 8 + 4) * n / stream + 2 * chip.efficiency.launch_s
    spec = PlanSpec(dp=1, tp=1, pp=1, microbatch=1, flash_attention=True)
    with_sinks = evaluate(TINY, chip, 1, spec, 4, engine="fsdp-eager")
    without = evaluate(TINY.with_(attention_sinks=False), chip, 1, spec, 4, engine="fsdp-eager")
    assert with_sinks.step_time_s - without.step_time_s == pytest.approx(2 * 4 * extra_s, rel=1e-9)
    # inside the kernel (Megatron-Core) the sinks change nothing
    a = evaluate(TINY, chip, 1, spec, 4, engine=engine.megatron_core())
    b = evaluate(TINY.with_(attention_sinks=False), chip, 1, spec, 4, engine=engine.megatron_core())
    assert a.step_time_s == b.step_time_s


def test_gpt_oss_has_them_from_its_preset_and_config():
    assert models.preset("gpt-oss-120b").attention_sinks and models.preset("gpt-oss-20b").attention_sinks
    assert not models.preset("llama3-8b").attention_sinks
    cfg = {"model_type": "gpt_oss", "num_hidden_layers": 2, "hidden_size": 256, "num_attention_heads": 8,
           "num_key_value_heads": 2, "head_dim": 32, "intermediate_size": 256, "vocab_size": 1000,
           "num_local_experts": 4, "num_experts_per_tok": 2, "max_position_embeddings": 4096,
           "hidden_act": "silu", "rms_norm_eps": 1e-5}
    assert from_hf_config(cfg, seq_len=128).attention_sinks
