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


def _peak(result) -> float:
    mem = result.memory_per_chip_bytes
    return max(mem) if hasattr(mem, "__len__") else mem


def _plan_kwargs(n: int, seed: int):
    rng = random.Random(seed)
    out = []
    while len(out) < n:
        m = models.preset(rng.choice(MODELS + ("llama3-70b",)))
        tp, pp = rng.choice((1, 2, 4)), rng.choice((1, 2))
        dp = 32 // (tp * pp)
        ep = rng.choice((1, 2)) if m.moe else 1
        if dp % ep:
            continue
        out.append((m, rng.choice(ENGINES), dict(dp=dp, tp=tp, pp=pp, flash_attention=True, expert_parallel=ep,
                                                 sequence_parallel=tp > 1)))
    return out


def test_memory_grows_with_the_microbatch_and_falls_with_recompute():
    """Per chip: a larger microbatch never needs less memory; selective recompute never more than
    none, full never more than selective; full recompute never runs faster than none."""
    cl = cluster.preset("dgx-h100", 4)
    checked = 0
    for m, e, kw in _plan_kwargs(25, 7):
        try:
            r = {(mb, rc): evaluate(m, "H100", cl, PlanSpec(microbatch=mb, recompute=rc, zero=1, **kw), 128, engine=e)
                 for mb in (1, 2) for rc in ("none", "selective", "full")}
        except ValueError:
            continue
        checked += 1
        for rc in ("none", "selective", "full"):
            assert _peak(r[(2, rc)]) >= _peak(r[(1, rc)]) * (1 - 1e-12), (m.name, e.name, kw, rc)
        for mb in (1, 2):
            none, sel, full = (_peak(r[(mb, x)]) for x in ("none", "selective", "full"))
            assert full <= sel * (1 + 1e-12) and sel <= none * (1 + 1e-12), (m.name, e.name, kw, mb)
            t_none, t_full = r[(mb, "none")].step_time_s, r[(mb, "full")].step_time_s
            if math.isfinite(t_none) and math.isfinite(t_full):
                assert t_full >= t_none * (1 - 1e-12), (m.name, e.name, kw, mb)
    assert checked >= 15


def test_a_higher_zero_stage_never_needs_more_memory():
    cl = cluster.preset("dgx-h100", 4)
    checked = 0
    for m, e, kw in _plan_kwargs(25, 11):
        peaks = {}
        for z in (0, 1, 2, 3):
            try:
                peaks[z] = _peak(evaluate(m, "H100", cl, PlanSpec(microbatch=1, zero=z, **kw), 128, engine=e))
            except ValueError:
                pass          # a stage this engine does not run
        stages = sorted(peaks)
        checked += len(stages) > 1
        for a, b in zip(stages, stages[1:]):
            assert peaks[b] <= peaks[a] * (1 + 1e-12), (m.name, e.name, kw, a, b)
    assert checked >= 15
