"""Exact plan search vs a brute force over every plan that calls evaluate()."""

import functools
import itertools
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cosearch import cluster, hardware, models, placement, plan
from cosearch.plan import PlanSpec, evaluate

GiB = 2**30
MODES = ("none", "selective", "full")


def _divs(n):
    return [d for d in range(1, n + 1) if n % d == 0]


def _compositions(total, parts, step):
    """Every split of `total` layers into `parts` stages, each a positive multiple of `step`."""
    chunks = total // step
    for cuts in itertools.combinations(range(1, chunks), parts - 1):
        edges = (0,) + cuts + (chunks,)
        yield tuple((b - a) * step for a, b in zip(edges, edges[1:]))


def brute_force(model, chip, cl, batch, tps, virtuals, sps, zeros, engine=None):
    """Every (dp, tp, pp, microbatch, virtual, sp, zero, split, per-stage recompute) plan through
    evaluate(); returns [(step_s, max stage memory, spec)] for all plans that can run."""
    out = []
    L = model.num_layers
    from cosearch.engine import preset as engine_preset
    circular = engine_preset(engine).pipeline_schedule == "circular"
    for tp, mb, vs, sp, z in itertools.product(tps, _divs(batch), virtuals, sps, zeros):
        if sp and tp == 1:
            continue
        for dp in _divs(batch):
            if batch % (dp * mb):
                continue
            m = batch // (dp * mb)
            for pp in range(1, L + 1):
                if dp * tp * pp > cl.num_chips or (vs > 1 and (pp == 1 or m % pp)) or L % vs:
                    continue
                for split in _compositions(L, pp, vs):
                    for rc in itertools.product(MODES, repeat=pp):
                        spec = PlanSpec(dp, tp, pp, mb, recompute=rc, virtual_stages=vs, sequence_parallel=sp,
                                        zero=z, stage_layers=split)
                        if circular and pp > 1 and (len(set(split)) > 1 or L % (pp * vs) or m % pp):
                            continue            # MaxText's circular pipeline runs even splits only
                        p = evaluate(model, chip, cl, spec, batch, engine=engine)
                        out.append((p.step_time_s if p.feasible else plan_step(p, engine), max(p.memory_per_chip_bytes),
                                    spec))
    return out


def plan_step(p, engine=None):
    # infeasible plans carry no step time; evaluate the same spec on a chip with ample HBM
    big = evaluate(MODEL_CACHE["model"], MODEL_CACHE["chip"].with_(hbm_bytes=1e18), MODEL_CACHE["cluster"],
                   p.spec, MODEL_CACHE["batch"], engine=engine)
    return big.step_time_s


MODEL_CACHE: dict = {}


@pytest.fixture
def cached_units(monkeypatch):
    """Memoise unit_costs so the brute force's thousands of evaluate() calls stay fast
    (evaluate still runs the whole stage/plan code for every spec)."""
    real = plan.unit_costs

    @functools.cache
    def key(model, chip, cl, tps, mbs, sps, flash, tm, engine, cp, precision, ep, etp, recipe, fp8_attention):
        return real(model, chip, cl, tps, mbs, sps, flash, time_model=tm, engine=engine, context_parallel=cp,
                    precision=precision, expert_parallel=ep, expert_tensor_parallel=etp, scaling_recipe=recipe,
                    fp8_attention=fp8_attention)

    def cached(model, chip, cl, tps, mbs, sps=(False,), flash=False, efficiency=None, time_model="sum",
               engine=None, context_parallel=1, precision="bf16", expert_parallel=1, expert_tensor_parallel=None,
               scaling_recipe=None, fp8_attention=False):
        if isinstance(chip, hardware.Accelerator) and efficiency is None:
            return key(model, chip.with_(hbm_bytes=1.0), cl, tuple(tps), tuple(mbs), tuple(sps), flash, time_model,
                       engine, context_parallel, precision, expert_parallel, expert_tensor_parallel, scaling_recipe,
                       fp8_attention)
        return real(model, chip, cl, tps, mbs, sps, flash, efficiency, time_model, engine, context_parallel,
                    precision, expert_parallel, expert_tensor_parallel, scaling_recipe, fp8_attention)

    monkeypatch.setattr(plan, "unit_costs", cached)
    monkeypatch.setattr(placement, "unit_costs", cached)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(layers=st.sampled_from([2, 3, 4]), hidden=st.sampled_from([64, 96]), heads=st.sampled_from([2, 4]),
       chips=st.sampled_from([2, 4, 8]), batch=st.sampled_from([2, 4]), gated=st.booleans(),
       nodes=st.booleans(), engine=st.sampled_from(["megatron-lm", "megatron-deepspeed"]))
def test_search_equals_brute_force_of_evaluate(cached_units, layers, hidden, heads, chips, batch, gated, nodes,
                                               engine):
    model = models.ModelConfig("t", layers, hidden, heads, 4 * hidden if not gated else 3 * hidden, 512, 64,
                               activation="swiglu" if gated else "gelu", tie_embeddings=not gated)
    chip = hardware.A100
    cl = (cluster.Cluster(chips, 2, 5e9, 1e9, link_latency_s=1e-6, intra_efficiency=0.8, inter_efficiency=0.9)
          if nodes else cluster.Cluster(chips))
    MODEL_CACHE.update(model=model, chip=chip, cluster=cl, batch=batch)
    # DeepSpeed's pipeline engine has no interleaved schedule
    virtuals = (1,) if engine == "megatron-deepspeed" else (1, 2)
    tps, sps, zeros = (1, 2), (False, True), (0, 1, 3)
    plans = brute_force(model, chip, cl, batch, tps, virtuals, sps, zeros, engine)
    mems = np.array([p[1] for p in plans])
    # HBM sizes at which a quarter, half and three quarters of the plans do not fit
    for q in (0.25, 0.5, 0.75):
        hbm = float(np.quantile(mems, q))
        fits = [p for p in plans if p[1] <= hbm]
        res = placement.search_plans(model, chip.with_(hbm_bytes=hbm), cl, batch, tps=tps, virtual_stages=virtuals,
                                     sequence_parallel=sps, zero=zeros, top_k=3, engine=engine)
        if not fits:
            assert not res.feasible
            assert res.min_memory_needed_bytes <= mems.min() * (1 + 1e-12)
            continue
        best = min(p[0] for p in fits)
        assert res.best.step_time_s == pytest.approx(best, rel=1e-9)
        # the best plan's spec evaluates to the same plan
        again = evaluate(model, chip.with_(hbm_bytes=hbm), cl, res.best.spec, batch, engine=engine)
        assert again.feasible and again.step_time_s == pytest.approx(res.best.step_time_s, rel=1e-12)
        steps = [p.step_time_s for p in res.plans]
        assert steps == sorted(steps)


@pytest.mark.parametrize("engine", ["megatron-lm", "megatron-deepspeed", "megatron-core-tp-overlap", "maxtext"])
def test_config_bound_is_below_every_split_and_exact_without_a_pipeline(cached_units, engine):
    """dp.config_bound (spread work, or the cheapest fitting cost of the stage that must hold
    the most layers) against the brute force's best split and recompute per configuration,
    at an HBM size where half the plans do not fit: never above it, equal to it at pp = 1
    (one stage, the bound's own case), and above the spread bound somewhere."""
    from cosearch import memory
    from cosearch._kernels import dp as kernel
    model = models.ModelConfig("t", 4, 64, 2, 256, 512, 64)
    chip, cl, batch = hardware.A100, cluster.Cluster(8, 2, 5e9, 1e9, link_latency_s=1e-6), 4
    MODEL_CACHE.update(model=model, chip=chip, cluster=cl, batch=batch)
    tps, mbs, virtuals, sps, zeros = (1, 2), tuple(_divs(batch)), ((1,) if engine != "megatron-lm" else (1, 2)), \
        (False,), (0, 1)
    plans = brute_force(model, chip, cl, batch, tps, virtuals, sps, zeros, engine)
    hbm = float(np.median([p[1] for p in plans]))
    best: dict = {}
    for step, mem, spec in plans:
        key = (spec.dp, spec.tp, spec.pp, spec.microbatch, spec.virtual_stages, spec.zero)
        best[key] = min(best.get(key, math.inf), step if mem <= hbm else math.inf)
    units = plan.unit_costs(model, chip, cl, tps, mbs, sps, engine=engine)[0]
    hw = plan.hw_row(hbm, chip.hbm_bandwidth_Bps * chip.efficiency.memory, memory.MemoryConfig(), True, engine,
                     comm_sm_share=plan.collective_sm_share(chip))
    net = cl.net_array(chip)
    cfg = placement.configurations(model, cl.num_chips, batch, tps, mbs, sps, virtuals, zeros)
    if engine == "maxtext":             # its circular pipeline's configurations
        cfg = placement.circular_configurations(cfg, model)
    bounds = kernel.config_bounds(units, net, hw, cfg, np.arange(len(cfg)), model.num_layers,
                                  placement._modes(None))
    spread = kernel.lower_bounds(units, net, cfg, model.num_layers)
    tighter = 0
    for c, b, a in zip(cfg, bounds, spread):
        key = (int(c[kernel.C_DP]), tps[c[kernel.C_TI]], int(c[kernel.C_PP]), mbs[c[kernel.C_BI]],
               int(c[kernel.C_V]), int(c[kernel.C_Z]))
        exact = best[key]
        assert b <= exact * (1 + 1e-12)
        if key[2] == 1:
            assert b == pytest.approx(exact, rel=1e-12) or (math.isinf(b) and math.isinf(exact))
        tighter += b > a * (1 + 1e-9)
    assert tighter > 0


def test_infeasible_states_true_lower_bound(cached_units):
    model = models.ModelConfig("t", 3, 64, 2, 256, 512, 64)
    cl = cluster.Cluster(4)
    MODEL_CACHE.update(model=model, chip=hardware.A100, cluster=cl, batch=4)
    plans = brute_force(model, hardware.A100, cl, 4, (1, 2), (1,), (False, True), (0, 1, 2, 3))
    least = min(p[1] for p in plans)
    res = placement.search_plans(model, hardware.A100.with_(hbm_bytes=least * 0.999), cl, 4, tps=(1, 2),
                                 virtual_stages=(1,), zero=(0, 1, 2, 3))
    assert not res.feasible
    assert res.min_memory_needed_bytes <= least
    assert "GiB of HBM" in res.reason and "needs at least" in res.reason
    with pytest.raises(ValueError, match="no feasible plan"):
        _ = res.best


def test_gpt3_175b_dgx_a100_finds_megatron_like_plan():
    """The 0.1 search declared dp8 tp8 pp16 infeasible on 64 GiB; now it fits and is beaten or matched."""
    m = models.preset("gpt3-175b")
    chip = hardware.A100_80GB.with_(hbm_bytes=64 * GiB)
    cl = cluster.dgx_a100(128)
    p = evaluate(m, chip, cl, PlanSpec(8, 8, 16, 1, "full", zero=1), 1536)
    assert p.feasible and max(p.memory_per_chip_bytes) < 64 * GiB
    res = placement.search_plans(m, chip, cl, 1536, tps=(8,), virtual_stages=(1,), sequence_parallel=(False,),
                                 zero=(1,))
    assert res.best.step_time_s <= p.step_time_s * (1 + 1e-12)
    assert res.best.pp <= m.num_layers


def test_bad_options():
    m = models.ModelConfig("t", 4, 64, 2, 256, 512, 64)
    with pytest.raises(ValueError, match="do not divide"):
        placement.search_plans(m, hardware.A100, 4, 6, microbatches=(4,))
    with pytest.raises(ValueError, match="tp=3"):
        placement.search_plans(m, hardware.A100, 4, 4, tps=(3,))
    with pytest.raises(ValueError, match="recompute"):
        placement.search_plans(m, hardware.A100, 4, 4, recompute="sometimes")
    with pytest.raises(ValueError, match="zero"):
        placement.search_plans(m, hardware.A100, 4, 4, zero=(5,))
    # found by fuzzing search_plans' options: a value of the wrong kind raised a TypeError
    # ("'bool' object is not iterable", "float() argument must be ... not 'tuple'")
    for kw, name in (({"zero": True}, "zero"), ({"precision": True}, "precision"), ({"recompute": 0}, "recompute"),
                     ({"sequence_parallel": 1.5}, "sequence_parallel"), ({"zero_group": 1.5}, "zero_group"),
                     ({"expert_tensor_parallel": float("nan")}, "expert_tensor_parallel"),
                     ({"cutoff_s": (1, 2)}, "cutoff_s"), ({"cutoff_s": -1.0}, "cutoff_s"),
                     ({"virtual_stages": 2**70}, "larger than the supported maximum")):      # was OverflowError
        with pytest.raises(ValueError, match=name):
            placement.search_plans(m, hardware.A100, 4, 4, **kw)
    assert placement.search_plans(m, hardware.A100, 4, 4, zero=np.int64(1), recompute="full", tps=(1,),
                                  cutoff_s=float("inf")).feasible
    with pytest.raises(ValueError, match="global_batch"):
        placement.search_plans(m, hardware.A100, 4, 0)
    assert math.isinf(evaluate(m, hardware.A100.with_(hbm_bytes=1e3), 4, PlanSpec(1, 1, 1, 1), 4).step_time_s)


@pytest.mark.parametrize("cp,virt", [(1, (1,)), (2, (1, 2, 3))])
def test_table_bound_and_admissible_rows_against_the_full_table(cp, virt):
    """The combination-level bound is the smallest spread bound of the table's rows (equal
    with one virtual stage, at most it otherwise), and the admissible table is the full
    table's rows whose spread bound is at most kth, in order — both checked on the table
    itself, built row by row."""
    from cosearch._kernels import dp as kernel
    m = models.ModelConfig("t", num_layers=6, hidden=256, heads=8, ffn_hidden=1024, seq_len=256, vocab=1000)
    chip, cl = hardware.H100, cluster.Cluster(16, 8, 1e11, 1e10)
    B, tps, mbs, sps, zeros = 8, (1, 2, 4), (1, 2, 4, 8), (False, True), (0, 1, 3)
    units = plan.unit_costs(m, chip, cl, tps, mbs, sps, True, context_parallel=cp)[0]
    cfg = placement.configurations(m, 16, B, tps, mbs, sps, virt, zeros, cp, (None, 2))
    lb = np.array([kernel.lower_bound.py_func(units[c[0], c[1], c[2]], c[4], c[5], c[8], m.num_layers)
                   for c in cfg])
    tb = placement.table_lower_bound(units, m, 16, B, tps, mbs, sps, virt, cp)
    if virt == (1,):
        assert tb == pytest.approx(lb.min(), rel=1e-12)
    else:
        assert tb <= lb.min() * (1 + 1e-12)
    for kth in (np.quantile(lb, 0.1), np.quantile(lb, 0.7), lb.min() / 2):
        adm = placement.admissible_configurations(m, 16, B, tps, mbs, sps, virt, zeros, cp, (None, 2), 1, units, kth)
        np.testing.assert_array_equal(adm, cfg[lb <= kth].reshape(-1, cfg.shape[1]))
    assert placement.count_configurations(m, 16, B, tps, mbs, sps, virt, zeros, cp, (None, 2)) == len(cfg)


def test_sequence_parallelism_splits_a_sequence_only_evenly_under_megatron():
    """Megatron's sequence parallelism splits the [s, b, h] activations along s over the tp ranks
    and asserts s divisible by tp (``_split_along_first_dim``): a 6-token sequence at tp 4 is no
    Megatron plan (evaluate refuses it; the search returns the best plan among the rest, checked
    against every plan through evaluate), while FSDP's DTensor shards it unevenly."""
    m = models.ModelConfig("t6", 2, 64, 4, 256, 512, 6)            # 6 tokens: tp 2 divides, tp 4 does not
    cl = cluster.Cluster(4)
    with pytest.raises(ValueError, match="splits each sequence \\(6 tokens\\) over tp 4 ranks"):
        evaluate(m, hardware.A100, cl, PlanSpec(1, 4, 1, 1, sequence_parallel=True), 4)
    assert evaluate(m, hardware.A100, cl, PlanSpec(1, 4, 1, 1, sequence_parallel=True, zero=3), 4,
                    engine="fsdp").feasible
    assert evaluate(m, hardware.A100, cl, PlanSpec(2, 2, 1, 1, sequence_parallel=True), 4).feasible
    res = placement.search_plans(m, hardware.A100, cl, 4, tps=(2, 4), virtual_stages=(1,), zero=(0,),
                                 sequence_parallel=(False, True), microbatches=(1,), top_k=50)
    found = [p for p in res.plans]
    assert found and not any(p.spec.tp == 4 and p.spec.sequence_parallel for p in found)
    best = math.inf
    for tp, pp, sp, rc in itertools.product((2, 4), (1, 2), (False, True), ("none", "selective", "full")):
        if (4 // tp) % pp:
            continue
        try:
            p = evaluate(m, hardware.A100, cl, PlanSpec(4 // (tp * pp), tp, pp, 1, rc, sequence_parallel=sp), 4)
        except ValueError:
            continue
        if p.feasible:
            best = min(best, p.step_time_s)
    assert res.best.step_time_s == pytest.approx(best, rel=1e-9)


def test_palm_keeps_its_uneven_model_parallel_split():
    """PaLM's 2,048 tokens over model parallelism 12 do not split evenly; it ran on JAX/XLA, which
    pads, so its Megatron-LM stand-in drops Megatron's even-split rule (and nothing else)."""
    from dataclasses import replace

    from cosearch.engine import MEGATRON_LM
    from cosearch.runs.published import ENGINE_OF
    palm = ENGINE_OF["PaLM-540B"]
    assert not palm.sp_even_split and MEGATRON_LM.sp_even_split
    assert replace(palm, name=MEGATRON_LM.name, software=MEGATRON_LM.software, sp_even_split=True) == MEGATRON_LM
