"""RoPE fusion read as each framework's config runs it (Megatron's ``apply_rope_fusion``:
``--no-rope-fusion``, Megatron-Bridge's ``model.apply_rope_fusion``, NeMo 1's, off by default),
and multi-latent attention's fused YaRN RoPE: the graph each reading selects, and the step it
prices against the eager rotary op's bytes counted by hand."""

from dataclasses import replace

import pytest

from cosearch import engine, graph, hardware, models
from cosearch.plan import PlanSpec, evaluate
from cosearch.runs import read_megatron_args, read_megatron_bridge, read_nemo1

LLAMA = models.ModelConfig("tiny-llama", 2, 256, 4, 512, 1000, 128, activation="swiglu", norm="rmsnorm",
                           position="rotary", bias=False, tie_embeddings=False, dropout=False)
LINE = ("--num-layers 2 --hidden-size 256 --num-attention-heads 4 --seq-length 128 --vocab-size 1000 "
        "--ffn-hidden-size 512 --micro-batch-size 1 --global-batch-size 4 --bf16 --swiglu --normalization RMSNorm "
        "--position-embedding-type rope --disable-bias-linear --untie-embeddings-and-output-weights "
        "--attention-dropout 0 --hidden-dropout 0")


def test_which_rope_runs_eager():
    core, unfused = engine.megatron_core(), engine.megatron_core(rope_fusion=False)
    assert unfused.name.endswith("-unfused-rope") and not unfused.rope_fusion
    assert engine.graph_elementwise(core, LLAMA) == "fused"
    assert engine.graph_elementwise(unfused, LLAMA) == "rope-eager"
    # learned positions: nothing to rotate
    assert engine.graph_elementwise(unfused, LLAMA.with_(position="learned")) == "fused"
    # an engine running everything eager stays eager
    assert engine.graph_elementwise(replace(engine.FSDP_EAGER, rope_fusion=False), LLAMA) == "eager"
    # YaRN's attention factor: Megatron-Core's RoPE falls back to PyTorch in standard attention, but
    # its fused MLA kernels take the scaled cos and sin
    dsv3 = models.preset("deepseek-v3").with_(rope_attention_factor=1.2)
    assert dsv3.mla is not None
    assert engine.graph_elementwise(core, dsv3) == "fused"
    assert engine.graph_elementwise(unfused, dsv3) == "rope-eager"
    assert engine.graph_elementwise(core, LLAMA.with_(rope_attention_factor=1.2)) == "rope-eager"
    with pytest.raises(ValueError, match="rope_fusion must be True or False"):
        replace(core, rope_fusion=0)


def test_unfused_rope_costs_its_eager_bytes_every_layer_and_microbatch():
    """The eager rotary op reads and writes 10 bytes an element each way (PyTorch's RoPE, op by
    op): on one chip the step grows by exactly its extra traffic over the fused op's, 2 layers x 4
    microbatches."""
    fused_f, fused_b = graph.build_pair(LLAMA, 1, 1, flash_attention=True)
    f, b = graph.build_pair(LLAMA, 1, 1, flash_attention=True, elementwise="rope-eager")
    rot, rot_b = next(o for o in f.ops if o.name == "rotary"), next(o for o in b.ops if o.name == "rotary.grad")
    frot, frot_b = (next(o for o in fused_f.ops if o.name == "rotary"),
                    next(o for o in fused_b.ops if o.name == "rotary.grad"))
    # the query and key heads' rotated elements: 128 tokens x (4 + 4) heads x 64
    assert rot.elements == 128 * 8 * 64
    assert (rot.bytes_read, rot.bytes_written) == (10 * rot.elements, 10 * rot.elements)
    chip = hardware.preset("H100")
    stream = chip.hbm_bandwidth_Bps * chip.efficiency.memory
    extra_s = (20 * rot.elements + rot_b.bytes_read + rot_b.bytes_written
               - frot.bytes_read - frot.bytes_written - frot_b.bytes_read - frot_b.bytes_written) / stream
    spec = PlanSpec(dp=1, tp=1, pp=1, microbatch=1, flash_attention=True)
    a = evaluate(LLAMA, chip, 1, spec, 4, engine=engine.megatron_core(rope_fusion=False))
    p = evaluate(LLAMA, chip, 1, spec, 4, engine=engine.megatron_core())
    assert a.step_time_s - p.step_time_s == pytest.approx(2 * 4 * extra_s, rel=1e-9)


def test_readers_turn_it_off_exactly_where_the_config_does():
    assert read_megatron_args(LINE).engine.rope_fusion                              # Megatron-LM: on
    off = read_megatron_args(LINE + " --no-rope-fusion")
    assert not off.engine.rope_fusion and any("PyTorch RoPE" in a for a in off.assumed)
    inert = read_megatron_args(LINE.replace("rope", "learned_absolute") + " --no-rope-fusion")
    assert inert.engine.rope_fusion and any("inert" in a for a in inert.assumed)
    words = ["train.global_batch_size=64"]
    unset = read_megatron_bridge(None, words, model="llama3-8b")
    assert unset.engine.rope_fusion and any("apply_rope_fusion not given" in a for a in unset.assumed)
    assert not read_megatron_bridge(None, words + ["model.apply_rope_fusion=false"], model="llama3-8b").engine.rope_fusion
    assert read_megatron_bridge(None, words + ["model.apply_rope_fusion=true"], model="llama3-8b").engine.rope_fusion
    # NeMo 1: off unless the config turns it on (its launcher's Llama and Nemotron configs do)
    cfg = {"trainer": {"num_nodes": 1, "devices": 8, "precision": "bf16"},
           "model": {"micro_batch_size": 1, "global_batch_size": 64, "encoder_seq_length": 128, "num_layers": 2,
                     "hidden_size": 256, "ffn_hidden_size": 512, "num_attention_heads": 4, "megatron_amp_O2": True,
                     "position_embedding_type": "rope", "tokenizer": {"type": "GPT2BPETokenizer"},
                     "gradient_accumulation_fusion": True, "optim": {"name": "distributed_fused_adam"}}}
    assert not read_nemo1(cfg).engine.rope_fusion
    cfg["model"]["apply_rope_fusion"] = True
    assert read_nemo1(cfg).engine.rope_fusion


def test_the_yarn_note_names_only_the_yarn_fallback():
    """The note that a YaRN-scaled RoPE runs unfused is said where that fallback alone makes it
    eager: not under an eager engine, not with RoPE fusion off (said by its own reading), not for a
    RoPE without YaRN's factor."""
    from cosearch.runs.megatron import eager_pass_notes
    oss = models.preset("gpt-oss-120b")

    def yarn(e, m):
        return [n for n in eager_pass_notes(e, m) if "YaRN" in n]

    assert yarn(engine.megatron_core(), oss)
    assert not yarn(engine.megatron_core(rope_fusion=False), oss)
    assert not yarn(engine.FSDP_EAGER, oss) and not yarn(engine.FSDP_EAGER, LLAMA)
    assert not yarn(engine.megatron_core(), LLAMA)
