"""DeepSeek-V3's per-rank memory, worked by hand from the tensors a rank holds (the issue's check:
"per-rank memory of a DeepSeek-V3 plan hand-worked from first principles").

deepseek-v3 preset: 61 layers of hidden 7,168 (the first 3 dense, MLP 18,432), 128 heads of 128
with MLA (q rank 1,536, kv rank 512, rope 64), 256 routed experts of 2,048 (top 8) and one shared,
vocab 129,280, untied, no dropout; 4,096-token sequences.  The numbers below are counted tensor
by tensor, in bytes per token of one layer, with nothing recomputed and flash attention:

* the two norms' inputs (2 x 7,168 x 2) and outputs (the same, bf16; FP8: one-byte casts);
* the q and kv latents, each kept as the latent norm's input and as the up projection's input
  (its normed copy): 2 x (1,536 + 512) x 2 (FP8: the second one byte);
* Q and K at 128 x (128 + 64) and V at 128 x 128, what the fused attention keeps: 2 x 65,536;
* the attention output, 128 x 128 x 2 (Megatron-Core keeps no FP8 copy of it for the output
  projection under current scaling);
* the fp32 log-sum-exp, 128 x 4;
* an MoE layer: each of the 8 routed copies' up projection output (2 x 2,048 x 2) and activation
  output (2,048 x 2; FP8 1), the shared expert's the same once, and the 8 dispatched copies of
  the layer input the experts' up projection keeps (8 x 7,168 x 2; FP8 1);
* a dense layer: the up projections' output (2 x 18,432 x 2) and activation output (18,432 x 2;
  FP8 1).
"""

import pytest

from cosearch import cluster, models
from cosearch.memory import layer_activation_bytes
from cosearch.plan import PlanSpec, evaluate

H, S, V = 7168, 4096, 129280


def _moe_layer(fp8: bool) -> int:
    c = 1 if fp8 else 2
    return (2 * H * 2 + 2 * H * c + 2048 * 2 + 2048 * c + 2 * 65536 + 128 * 128 * 2 + 128 * 4
            + 8 * 2048 * (2 * 2 + c) + 2048 * (2 * 2 + c) + 8 * H * c)


def _dense_layer(fp8: bool) -> int:
    c = 1 if fp8 else 2
    return 2 * H * 2 + 2 * H * c + 2048 * 2 + 2048 * c + 2 * 65536 + 128 * 128 * 2 + 128 * 4 + 18432 * (2 * 2 + c)


def test_a_layers_activations_by_hand():
    m = models.preset("deepseek-v3")
    assert (_moe_layer(False), _dense_layer(False), _moe_layer(True)) == (455168, 340480, 363008)
    got = (layer_activation_bytes(m, 1, 1, flash_attention=True),
           layer_activation_bytes(m, 1, 1, flash_attention=True, precision="fp8", proj_input_cast=False),
           layer_activation_bytes(m.dense_counterpart(), 1, 1, flash_attention=True))
    assert got == pytest.approx((S * 455168, S * 363008, S * 340480), rel=1e-12)


def test_a_deepseek_v3_ranks_memory_by_hand():
    """dp 8, ep 8, tp 1, pp 1, one sequence a microbatch, ZeRO-1, bf16: every rank holds the
    attention, norms, router, shared experts, dense layers, embedding and head (all but the
    routed experts) with 2 + 2 bytes a parameter and 12 / 8 of Adam's; its 32 routed experts of the
    256 (58 MoE layers x 256 x 3 x 7,168 x 2,048 / 8) with 2 + 2 + 12, their optimizer sharded over
    an expert data-parallel group of dp x tp / ep = 1; one microbatch in flight: every layer's
    activations (58 MoE, 3 dense), the embedding's output (4,096 x 7,168 x 2), and the head's
    final-norm input and fp32 logits (4,096 x (7,168 x 2 + 129,280 x 4))."""
    m = models.preset("deepseek-v3")
    experts = 58 * 256 * 3 * H * 2048
    rest = m.num_params() - experts
    static = rest * (2 + 2 + 12 / 8) + experts / 8 * (2 + 2 + 12)
    act = (58 * _moe_layer(False) + 3 * _dense_layer(False)) * S + S * H * 2 + S * (H * 2 + V * 4)
    p = evaluate(m, "H100", cluster.Cluster(8), PlanSpec(8, 1, 1, 1, zero=1, flash_attention=True, expert_parallel=8),
                 8, engine="megatron-core")
    assert p.memory_per_chip_bytes[0] == pytest.approx(static + act, rel=1e-12)
    assert not p.feasible                                   # 1.5 TB: far beyond an H100's 80 GB
