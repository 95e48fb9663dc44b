import math

import numpy as np
import pytest

from cosearch import comm, hardware, memory, models, placement
from tests.reference import placement_exhaustive, placement_python


def random_costs(rng, units, tps=(1, 2), mbs=(1, 2), hbm=None):
    T, B = len(tps), len(mbs)
    scale_t = np.array([1.0 / t for t in tps])[:, None, None]
    scale_b = np.array(mbs, dtype=float)[None, :, None]
    fwd = rng.uniform(0.5, 2.0, (1, 1, units)) * scale_t * scale_b * rng.uniform(0.8, 1.2, (T, B, units))
    bwd = 2 * fwd * rng.uniform(0.9, 1.1, (T, B, units))
    stash = rng.uniform(1, 4, (1, 1, units)) * scale_t * scale_b * 1e9
    inp = stash * 0.1
    stash = np.broadcast_to(stash, (T, B, units)).copy()
    inp = np.broadcast_to(inp, (T, B, units)).copy()
    params = rng.uniform(0.5, 1.5, (1, units)) * 1e8 / np.array(tps)[:, None]
    p2p = rng.uniform(0.0, 0.1, (T, B))
    return placement.LayerCosts(tps=tps, microbatches=mbs, fwd_s=fwd, bwd_s=bwd, stash_bytes=stash,
                                input_bytes=inp, params_per_chip=params, p2p_s=p2p,
                                hbm_bytes=hbm if hbm else rng.uniform(6e9, 20e9),
                                link_bandwidth_Bps=1e10, link_latency_s=1e-5, peak_flops=1e14,
                                flops_per_sample=1e12, tokens_per_sample=128)


@pytest.mark.parametrize("seed", range(12))
def test_dp_equals_exhaustive(seed):
    rng = np.random.default_rng(seed)
    units = int(rng.integers(2, 7))
    chips = int(rng.integers(1, 9))
    gb = int(rng.choice([2, 4, 6, 8]))
    mem = memory.MemoryConfig(zero1=bool(seed % 2))
    c = random_costs(rng, units, mbs=tuple(b for b in (1, 2) if gb % b == 0))
    overlap = seed % 3 != 0
    res = placement.best_plan(c, chips, gb, mem=mem, overlap_dp=overlap, top_k=5)
    ex = placement_exhaustive(c, chips, gb, mem, overlap)
    if not ex:
        assert not res.feasible and "at least" in res.reason
        return
    best = min(e[0] for e in ex)
    assert res.best.step_time_s == pytest.approx(best, rel=1e-7)
    # each returned top-k plan is the optimum of its own configuration
    for p in res.plans:
        own = min(e[0] for e in ex if e[1:5] == (p.tp, p.microbatch, p.dp, p.pp))
        assert p.step_time_s == pytest.approx(own, rel=1e-7)
    steps = [p.step_time_s for p in res.plans]
    assert steps == sorted(steps)


def test_python_reference_algorithm_agrees():
    rng = np.random.default_rng(42)
    c = random_costs(rng, 8)
    mem = memory.MemoryConfig()
    assert placement.best_plan(c, 8, 4, mem=mem).best.step_time_s == pytest.approx(
        placement_python(c, 8, 4, mem), rel=1e-7)


def small_model():
    return models.ModelConfig("tiny", 4, 256, 8, 1024, 1000, 128)


def test_feasible_plans_fit_and_memory_recomputed_independently():
    m = small_model()
    chip = hardware.TPUv4.with_(hbm_bytes=0.2 * 2**30)
    cl = hardware.Cluster(8)
    c = placement.layer_costs(m, chip, cl, global_batch=8)
    res = placement.best_plan(c, cl, 8, top_k=20)
    assert res.feasible
    mem = memory.MemoryConfig()
    for p in res.plans:
        ti, bi = c.tps.index(p.tp), c.microbatches.index(p.microbatch)
        ends = list(p.stage_starts[1:]) + [c.units]
        for s, (i, j) in enumerate(zip(p.stage_starts, ends)):
            need = memory.stage_memory_bytes(
                float(c.params_per_chip[ti, i:j].sum()), list(c.stash_bytes[ti, bi, i:j]),
                list(c.input_bytes[ti, bi, i:j]), s, p.pp, p.num_microbatches, p.dp, p.recompute[s], mem)
            assert need == pytest.approx(p.memory_per_chip_bytes[s])
            assert need <= chip.hbm_bytes
        assert p.dp * p.tp * p.pp <= 8
        assert p.dp * p.microbatch * p.num_microbatches == 8


def test_memory_hand_worked_single_chip():
    m = small_model()
    cl = hardware.Cluster(1)
    c = placement.layer_costs(m, hardware.TPUv4, cl, tps=(1,), microbatches=(2,))
    p = placement.best_plan(c, cl, 2).best
    assert (p.dp, p.tp, p.pp, p.num_microbatches) == (1, 1, 1, 1)
    s, b, h, a, V = 128, 2, 256, 8, 1000
    korthikanti = s * b * h * (34 + 5 * a * s / h)
    x_in = 2 * s * b * h
    acts = x_in + 4 * korthikanti + x_in + s * b * V * 4
    assert p.memory_per_chip_bytes[0] == pytest.approx(16 * m.num_params() + acts)
    # step: one stage, one microbatch, no dp: fwd + bwd of all units
    assert p.step_time_s == pytest.approx(c.fwd_s[0, 0].sum() + c.bwd_s[0, 0].sum())


def test_throughput_never_rises_when_hbm_shrinks():
    m = small_model()
    cl = hardware.Cluster(8)
    prev = math.inf
    for gib in (4, 1, 0.5, 0.25, 0.1, 0.05, 0.03):
        c = placement.layer_costs(m, hardware.TPUv4.with_(hbm_bytes=gib * 2**30), cl, global_batch=16)
        r = placement.best_plan(c, cl, 16)
        thr = r.best.tokens_per_s if r.feasible else 0.0
        assert thr <= prev * (1 + 1e-9)
        prev = thr


def test_no_feasible_plan_states_memory():
    m = small_model()
    cl = hardware.Cluster(2)
    c = placement.layer_costs(m, hardware.TPUv4.with_(hbm_bytes=1e5), cl, global_batch=4)
    r = placement.best_plan(c, cl, 4)
    assert not r.feasible
    assert "GiB per chip" in r.reason and r.min_memory_needed_bytes > 1e5
    with pytest.raises(ValueError, match="no feasible plan"):
        _ = r.best


def test_bad_input():
    m = small_model()
    cl = hardware.Cluster(4)
    c = placement.layer_costs(m, hardware.TPUv4, cl, microbatches=(1, 2))
    with pytest.raises(ValueError, match="do not divide"):
        placement.best_plan(c, cl, 3)
    with pytest.raises(ValueError, match="chips"):
        placement.best_plan(c, 0, 4)
    with pytest.raises(ValueError, match="global_batch"):
        placement.best_plan(c, cl, 0)


def test_comm_closed_forms():
    assert comm.ring_allreduce_s(8e9, 4, 1e10) == pytest.approx(2 * 3 / 4 * 0.8)
    assert comm.ring_allreduce_s(1e9, 1, 1e10) == 0.0
    assert comm.p2p_s(1e9, 1e10, 1e-6) == pytest.approx(0.1 + 1e-6)
    with pytest.raises(ValueError):
        comm.ring_allreduce_s(-1, 2, 1e9)


def test_tp_allreduce_in_layer_time():
    m = small_model()
    cl = hardware.Cluster(4, link_bandwidth_Bps=1e9)
    c = placement.layer_costs(m, hardware.TPUv4, cl, tps=(1, 2), microbatches=(1,))
    from cosearch import cost, graph
    g = graph.build(m, 2, 1, "fwd")
    chip = cost.price_on(g, hardware.TPUv4).sum()
    ar = 2 * comm.ring_allreduce_s(128 * 256 * 2, 2, 1e9, cl.link_latency_s)
    assert c.fwd_s[1, 0, 1] == pytest.approx(chip + ar)
