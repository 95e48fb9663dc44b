"""Activation checkpoints spanning several layers (Engine.recompute_layers): Megatron-Core's
``--recompute-method uniform --recompute-num-layers N`` and MaxText's layer scan over a block of
Gemma's attention pattern keep one input a group of layers and rerun the group whole."""

import math
from dataclasses import replace

import pytest

from cosearch import engine, memory, models
from cosearch._kernels import formulas as F
from cosearch.plan import PlanSpec, evaluate
from cosearch.runs.maxtext import read_maxtext
from cosearch.runs.megatron import parse_megatron_args

GPT13 = models.preset("gpt3-13b")       # 40 layers, hidden 5120, 40 heads, sequence 2048


def _megatron_uniform_checkpoints(layers_per_chunk: int, n: int) -> int:
    """Megatron-Core's TransformerBlock._checkpointed_forward under 'uniform', run as its loop:
    ``layer_idx`` steps by ``recompute_num_layers`` while below the chunk's layers, one
    checkpoint a step."""
    count, layer_idx = 0, 0
    while layer_idx < layers_per_chunk:
        count += 1
        layer_idx += n
    return count


@pytest.mark.parametrize("layers, chunks, span", [(40, 1, 1), (40, 1, 4), (40, 1, 3), (62, 1, 6), (42, 1, 2),
                                                  (20, 2, 3), (8, 4, 5), (7, 1, 7), (7, 1, 9)])
def test_checkpoint_groups_count_megatrons_loop(layers, chunks, span):
    want = chunks * _megatron_uniform_checkpoints(layers // chunks, span)
    assert F.checkpoint_groups(float(layers), chunks, float(span)) == want
    assert F.checkpoint_groups.py_func(float(layers), chunks, float(span)) == want


def test_a_stage_keeps_one_input_a_group_and_reruns_a_group_at_once():
    """GPT-3 13B on one GPU under full recompute, checkpoints spanning 4 layers against 1: 40 - 10
    fewer layer inputs kept, and 4 layers' full activations held while a group reruns where 1
    layer's were — each against the head's activations, which the head's backward frees before
    any layer reruns (the larger of the two counts); the step time is the same (every layer reruns
    either way).  With 3: ceil(40 / 3) = 14 inputs."""
    spec = PlanSpec(1, 1, 1, 1, recompute="full", flash_attention=True)
    base = evaluate(GPT13, "A100-80GB", 1, spec, 1, engine="megatron-lm")
    s = GPT13.seq_len
    x = memory.layer_input_bytes(GPT13, 1, 1)
    full = memory.layer_activation_bytes(GPT13, 1, 1, False, "none", True)
    head = memory.head_activation_bytes(GPT13, 1, 1)
    for span, groups in ((4, 10), (3, 14)):
        e = replace(engine.preset("megatron-lm"), name="grouped", recompute_layers=span)
        p = evaluate(GPT13, "A100-80GB", 1, spec, 1, engine=e)
        assert p.step_time_s == pytest.approx(base.step_time_s, rel=1e-12)
        want = (40 - groups) * x - (max(span * full, head) - max(full, head))
        assert base.memory_per_chip_bytes[0] - p.memory_per_chip_bytes[0] == pytest.approx(want, rel=1e-9)
    assert x == s * GPT13.hidden * 2
    with pytest.raises(ValueError, match="recompute_layers must be a number of layers"):
        engine.Engine("x", recompute_layers=0)


def test_the_readers_set_the_span():
    """Megatron's uniform method with --recompute-num-layers 4 checkpoints runs of 4 (its default
    method too); block checkpoints every layer; MaxText's Gemma 2 pairs, Gemma 3 blocks of 6."""
    mp = parse_megatron_args("--recompute-granularity full --recompute-method uniform --recompute-num-layers 4 "
                             "--global-batch-size 8", GPT13, 8)
    assert mp.engine.recompute_layers == 4 and mp.spec.recompute == "full"
    mp = parse_megatron_args("--recompute-granularity full --recompute-num-layers 2 --global-batch-size 8", GPT13, 8)
    assert mp.engine.recompute_layers == 2
    mp = parse_megatron_args("--recompute-granularity full --recompute-method block --recompute-num-layers 40 "
                             "--global-batch-size 8", GPT13, 8)
    assert mp.engine.recompute_layers == 1
    base = ["per_device_batch_size=1", "ici_fsdp_parallelism=4", "max_target_length=8192"]
    assert read_maxtext(None, ["model_name=gemma2-9b", *base]).engine.recompute_layers == 2
    assert read_maxtext(None, ["model_name=gemma3-27b", *base]).engine.recompute_layers == 6
    assert read_maxtext(None, ["model_name=llama2-7b", *base]).engine.recompute_layers == 1
    assert math.ceil(62 / 6) == F.checkpoint_groups(62.0, 1, 6.0)


def test_the_heads_logits_and_a_rerunning_layer_are_not_live_together():
    """Under full recompute the last stage's head activations (its fp32 logits) are freed by the
    head's backward before any layer reruns: the peak holds the larger of the two, not their sum.
    A 256k vocabulary (Gemma's) on a narrow model: the logits outweigh a layer's activations, so
    a one-layer-wider rerun costs nothing (only the inputs it drops show); a 1k vocabulary: every
    rerun layer counts.  The compiled check is MaxText's own Gemma 2 9B recipe on a v6e-256
    (tpu-recipes' tpu_v6e_gemma2_9b.sh, compiled ahead of time: 29.5 GiB a chip of arguments,
    code and temporaries), which cosearch now prices at 28.5 GiB (35.5 with the sum)."""
    spec = PlanSpec(1, 1, 1, 1, recompute="full", flash_attention=True)
    for vocab, hidden in ((256_000, True), (1_024, False)):
        m = models.ModelConfig("narrow", 8, 512, 8, 2048, vocab, 2048)
        x = memory.layer_input_bytes(m, 1, 1)
        full = memory.layer_activation_bytes(m, 1, 1, False, "none", True)
        head = memory.head_activation_bytes(m, 1, 1)
        assert (head > 2 * full) == hidden
        one = evaluate(m, "A100-80GB", 1, spec, 1, engine="megatron-lm").memory_per_chip_bytes[0]
        two = evaluate(m, "A100-80GB", 1, spec, 1, engine=replace(engine.preset("megatron-lm"), name="pairs",
                                                                   recompute_layers=2)).memory_per_chip_bytes[0]
        want = -4 * x + (0.0 if hidden else full)
        assert two - one == pytest.approx(want, rel=1e-9)
