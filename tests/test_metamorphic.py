"""Metamorphic properties of the performance model: a chip or cluster with more of a resource
(clock, HBM bandwidth, chip links, node and network bandwidth, tensor cores) never runs a plan
slower, and more HBM capacity never changes its time.  Checked over a fixed, seeded draw of plans
across dense and MoE models and engines (the unfused Megatron-Core ones included); each property
can fail, independently of how the model prices anything."""

import dataclasses
import math
import random

import pytest

from cosearch import cluster, engine, hardware, models
from cosearch.plan import PlanSpec, evaluate

MODELS = ("llama3-8b", "gpt3-13b", "qwen3-30b-a3b", "mixtral-8x7b", "deepseek-v2-lite", "gpt-oss-20b")
ENGINES = (engine.megatron_core(), engine.megatron_core(rope_fusion=False, activation_fusion=False),
           engine.megatron_core(tp_comm_overlap=True), engine.preset("fsdp"), engine.preset("fsdp-eager"),
           engine.preset("megatron-lm"), engine.preset("llm-foundry"))


def _draws(n: int = 60):
    rng = random.Random(20261207)
    out = []
    while len(out) < n:
        m = models.preset(rng.choice(MODELS))
        chip = hardware.preset(rng.choice(("H100", "A100")))
        e = rng.choice(ENGINES)
        tp, pp = rng.choice((1, 2, 4)), rng.choice((1, 2))
        dp = 16 // (tp * pp)
        ep = rng.choice((1, 2, 4)) if m.moe else 1
        if dp % ep:
            continue
        try:
            spec = PlanSpec(dp=dp, tp=tp, pp=pp, microbatch=rng.choice((1, 2)), flash_attention=True,
                            expert_parallel=ep, sequence_parallel=tp > 1, zero=rng.choice((0, 1, 3)),
                            recompute=rng.choice(("none", "full")))
            cl = cluster.preset("dgx-h100", 2)
            base = evaluate(m, chip, cl, spec, 64, engine=e)
        except ValueError:
            continue
        out.append((m, chip, cl, spec, e, base.step_time_s))
    return out


DRAWS = _draws()


@pytest.mark.parametrize("field,factor", [("clock_hz", 1.3), ("hbm_bandwidth_Bps", 1.5), ("link_bandwidth_Bps", 2.0),
                                          ("tensor_cores", 2)])
def test_more_of_a_chip_resource_is_never_slower(field, factor):
    checked = 0
    for m, chip, cl, spec, e, t in DRAWS:
        faster = chip.with_(**{field: getattr(chip, field) * factor})
        assert evaluate(m, faster, cl, spec, 64, engine=e).step_time_s <= t * (1 + 1e-9), (m.name, e.name, spec)
        checked += 1
    assert checked == len(DRAWS) >= 50


@pytest.mark.parametrize("field", ["intra_node_Bps", "inter_node_Bps"])
def test_more_network_bandwidth_is_never_slower(field):
    for m, chip, cl, spec, e, t in DRAWS:
        wider = dataclasses.replace(cl, **{field: getattr(cl, field) * 2.0})
        assert evaluate(m, chip, wider, spec, 64, engine=e).step_time_s <= t * (1 + 1e-9), (m.name, e.name, spec)


def test_more_hbm_capacity_changes_no_time():
    """A plan that fits keeps its time with twice the HBM; one that does not fit (infinite time) may
    fit then, never the reverse."""
    fits = 0
    for m, chip, cl, spec, e, t in DRAWS:
        bigger = evaluate(m, chip.with_(hbm_bytes=chip.hbm_bytes * 2), cl, spec, 64, engine=e).step_time_s
        if math.isfinite(t):
            assert bigger == pytest.approx(t, rel=1e-12), (m.name, e.name, spec)
            fits += 1
        else:
            assert bigger <= t
    assert fits >= 30
