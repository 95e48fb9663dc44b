"""Properties every prediction of evaluate() must have, on random plans of dense and MoE models
under every engine: a faster chip (clock, HBM bandwidth) or a faster network never makes a
step slower, and tokens/s is the batch's tokens over the step.  Random checks of this kind found
three silent errors: the stage's windows counted TP seconds an overlapping engine hides (a chip
with twice the clock was predicted slower), ZeRO-3's buffers counted resident experts twice,
and the search's bound pruned plans under overlapping engines (tests/test_modern_plans.py)."""

import math

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from cosearch import cluster, hardware, models
from cosearch.plan import PlanSpec, evaluate

MODELS = ("gpt3-1.3b", "llama3-8b", "qwen3-30b-a3b", "mixtral-8x7b")
ENGINES = ("megatron-lm", "megatron-core", "megatron-core-tp-overlap", "fsdp", "megatron-deepspeed", "maxtext")


@settings(max_examples=25, deadline=None)
@given(name=st.sampled_from(MODELS), engine=st.sampled_from(ENGINES), nodes=st.sampled_from([1, 2, 4]),
       tp=st.sampled_from([1, 2, 4, 8]), pp=st.sampled_from([1, 2]), mb=st.sampled_from([1, 2]),
       ga=st.sampled_from([1, 4]), zero=st.sampled_from([0, 1, 3]), sp=st.booleans(),
       recompute=st.sampled_from(["none", "selective", "full"]), ep=st.sampled_from([1, 2, 4]))
@example(name="llama3-8b", engine="megatron-core-tp-overlap", nodes=4, tp=4, pp=1, mb=2, ga=1, zero=1, sp=True,
         recompute="none", ep=1)                           # DP-bound: was 1.3 % slower at twice the clock
def test_faster_hardware_is_never_slower(name, engine, nodes, tp, pp, mb, ga, zero, sp, recompute, ep):
    m = models.preset(name).with_(seq_len=1024)
    cl = cluster.preset("dgx-h100", nodes)
    chip = hardware.H100.with_(hbm_bytes=1e15)             # memory is not what is checked here
    if tp * pp > cl.num_chips:
        return
    dp = cl.num_chips // (tp * pp)
    ep = ep if m.moe and dp % ep == 0 else 1
    spec = PlanSpec(dp, tp, pp, mb, recompute=recompute, zero=zero, sequence_parallel=sp and tp > 1,
                    flash_attention=True, expert_parallel=ep)
    batch = dp * mb * ga
    try:
        base = evaluate(m, chip, cl, spec, batch, engine=engine)
    except ValueError:
        return                                              # a plan the engine refuses, by name
    assert base.tokens_per_s == pytest.approx(batch * m.seq_len / base.step_time_s, rel=1e-12)
    assert all(math.isfinite(x) and x >= 0.0 for x in base.breakdown.values())
    faster = {"clock x2": (chip.with_(clock_hz=2 * chip.clock_hz), cl),
              "HBM bandwidth x2": (chip.with_(hbm_bandwidth_Bps=2 * chip.hbm_bandwidth_Bps), cl),
              "links x4": (chip, cl.with_(intra_node_Bps=4 * cl.intra_node_Bps,
                                          inter_node_Bps=4 * cl.inter_node_Bps))}
    for what, (c, net) in faster.items():
        p = evaluate(m, c, net, spec, batch, engine=engine)
        assert p.step_time_s <= base.step_time_s * (1 + 1e-9), (what, base.breakdown, p.breakdown)
