import math
import warnings

import numpy as np
import pytest

from cosearch import graph, hardware, models, schedule
from tests.reference import schedule_brute_force

INF = math.inf


def random_problem(rng, n):
    lat = np.full((n, 6), INF)
    preds = []
    for i in range(n):
        preds.append(tuple(j for j in range(i) if rng.random() < 0.3))
        full = rng.uniform(1.0, 10.0)
        if rng.random() < 0.5:  # tensor op
            lat[i, 0] = full
            lat[i, 1] = lat[i, 2] = full * rng.uniform(1.2, 2.5)
            if rng.random() < 0.4:
                v = full * rng.uniform(1.5, 4.0)
                lat[i, 3] = v
                lat[i, 4] = lat[i, 5] = v * rng.uniform(1.2, 2.5)
        else:
            lat[i, 3] = full
            lat[i, 4] = lat[i, 5] = full * rng.uniform(1.2, 2.5)
    return schedule.Problem(tuple(f"op{i}" for i in range(n)), lat, tuple(preds))


@pytest.mark.parametrize("seed", range(25))
def test_ilp_equals_brute_force(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 7)) if seed < 20 else int(rng.integers(7, 9))
    p = random_problem(rng, n)
    r = schedule.solve_ilp(p, time_limit_s=30)
    mk, modes, starts, status = r.makespan_s, r.modes, r.start_s, r.status
    assert status == "optimal"
    bf = schedule_brute_force(p.latency_s.tolist(), p.preds)
    assert mk == pytest.approx(bf, rel=1e-6)
    # the returned schedule is valid: precedence and no overlap on a slot
    fin = [starts[i] + p.latency_s[i, modes[i]] for i in range(n)]
    for j, ps in enumerate(p.preds):
        for i in ps:
            assert starts[j] >= fin[i] - 1e-6 * bf
    for i in range(n):
        for j in range(i + 1, n):
            if set(schedule.MODES[modes[i]]) & set(schedule.MODES[modes[j]]):
                assert fin[i] <= starts[j] + 1e-6 * bf or fin[j] <= starts[i] + 1e-6 * bf
    assert schedule.lower_bound(p) <= bf * (1 + 1e-9)
    assert schedule.list_schedule(p)[0] >= bf * (1 - 1e-9)


def test_chain_makespan_is_sum():
    rng = np.random.default_rng(3)
    n = 6
    lat = np.full((n, 6), INF)
    lat[:, 0] = rng.uniform(1, 5, n)
    lat[:, 1] = lat[:, 2] = lat[:, 0] * 2.5
    p = schedule.Problem(tuple(map(str, range(n))), lat, tuple(() if i == 0 else (i - 1,) for i in range(n)))
    mk = schedule.solve_ilp(p).makespan_s
    assert mk == pytest.approx(lat[:, 0].sum())
    assert schedule.list_schedule(p)[0] == pytest.approx(lat[:, 0].sum())
    assert schedule.lower_bound(p) == pytest.approx(lat[:, 0].sum())


@pytest.mark.parametrize("name", ["gpt3-1.3b", "llama2-7b", "bert-large"])
@pytest.mark.parametrize("phase", ["fwd", "bwd"])
def test_layer_presets_bounds(name, phase):
    g = graph.build(models.preset(name), tp=2, microbatch=1, phase=phase)
    r = schedule.layer_time(g, hardware.TPUv4, use_cache=False)
    assert r.lower_bound_s <= r.latency_s * (1 + 1e-9)
    assert r.latency_s <= r.list_schedule_s * (1 + 1e-9)
    # never worse than running every op alone on the whole chip, one after another
    from cosearch import cost
    assert r.latency_s <= cost.price_on(g, hardware.TPUv4).sum() * (1 + 1e-9)


def test_cache_never_solves_twice():
    schedule.clear_cache()
    g = graph.build(models.preset("gpt3-1.3b"), tp=1, microbatch=1, phase="bwd")
    a = schedule.layer_time(g, hardware.TPUv4)
    b = schedule.layer_time(graph.build(models.preset("gpt3-1.3b"), tp=1, microbatch=1, phase="bwd"),
                            hardware.TPUv4)
    assert a is b
    info = schedule.cache_info()
    assert info["solves"] == 1 and info["hits"] == 1
    schedule.layer_time(graph.build(models.preset("gpt3-1.3b"), tp=2, microbatch=1, phase="bwd"), hardware.TPUv4)
    assert schedule.cache_info()["solves"] == 2


def test_forward_layer_is_a_chain_solved_without_the_ilp():
    """A forward layer's ops are totally ordered: its makespan is the sum, over ops, of the
    fastest mode (here: every op on all cores), with no ILP solve."""
    from cosearch import cost
    schedule.clear_cache()
    for chip in (hardware.TPUv4, hardware.A100):
        g = graph.build(models.preset("gpt3-1.3b"), tp=1, microbatch=1, phase="fwd")
        r = schedule.layer_time(g, chip)
        assert schedule.is_chain(schedule.make_problem(g, chip))
        assert r.status == "optimal" and r.latency_s == pytest.approx(cost.price_on(g, chip).sum(), rel=1e-12)
    assert schedule.cache_info()["solves"] == 0


def _random_dag(rng, n, p=0.3):
    return tuple(tuple(j for j in range(i) if rng.random() < p) for i in range(n))


def _antichain_brute(preds):
    import itertools
    n = len(preds)
    reach = [set() for _ in range(n)]
    for i in range(n):
        for j in preds[i]:
            reach[i] |= {j} | reach[j]
    best = 0
    for k in range(n, 0, -1):
        for sub in itertools.combinations(range(n), k):
            if all(b not in reach[a] and a not in reach[b] for a, b in itertools.combinations(sub, 2)):
                return k
    return best


@pytest.mark.parametrize("seed", range(12))
def test_max_antichain_against_subsets(seed):
    rng = np.random.default_rng(100 + seed)
    n = int(rng.integers(1, 10))
    preds = _random_dag(rng, n, float(rng.uniform(0.1, 0.6)))
    reach = schedule.problem._reach(preds, [str(i) for i in range(n)])
    assert schedule.max_antichain(reach, np.ones(n, dtype=bool)) == _antichain_brute(preds)


def _general_problem(rng, n, wt, wv):
    """PHAZE-style layout: tensor slots 0..wt-1, vector slots wt..wt+wv-1; modes 'all' (every
    slot of the unit) and 'one core' on each slot; one-core ops take 1.3-4x the all-cores time."""
    T = tuple(range(wt))
    V = tuple(range(wt, wt + wv))
    modes = [T] + ([(t,) for t in T] if wt > 1 else []) + [V] + ([(v,) for v in V] if wv > 1 else [])
    names = ["tensor.all"] + [f"tensor.core{t}" for t in T if wt > 1] + ["vector.all"] + \
        [f"vector.core{v}" for v in range(wv) if wv > 1]
    lat = np.full((n, len(modes)), INF)
    for i in range(n):
        full = rng.uniform(1.0, 10.0)
        one = full * rng.uniform(1.3, 4.0)
        lo, hi = (0, 1 + (wt if wt > 1 else 0)) if rng.random() < 0.5 else \
            (1 + (wt if wt > 1 else 0), len(modes))
        lat[i, lo] = full
        lat[i, lo + 1:hi] = one
    sym = []
    for first, w in ((1, wt), (2 + (wt if wt > 1 else 0), wv)):
        if w > 1:
            sym += [((first + k - 1,), (first + k,)) for k in range(1, w)]
    kinds = ["tensor"] * wt + ["vector"] * wv
    return schedule.Problem(tuple(f"op{i}" for i in range(n)), lat, _random_dag(rng, n), tuple(modes),
                            tuple(f"s{r}" for r in range(wt + wv)), tuple(names), tuple(sym), tuple(kinds))


@pytest.mark.parametrize("seed", range(16))
def test_core_slot_ilp_equals_brute_force(seed):
    """All-or-one-core modes on 1-3 tensor and 1-2 vector slots, symmetry breaking on: the
    ILP's makespan equals an exhaustive search over dispatch orders and modes."""
    rng = np.random.default_rng(500 + seed)
    n = int(rng.integers(2, 7))
    wt, wv = int(rng.integers(1, 4)), int(rng.integers(1, 3))
    p = _general_problem(rng, n, wt, wv)
    r = schedule.solve_ilp(p, time_limit_s=30)
    mk, modes, starts, status = r.makespan_s, r.modes, r.start_s, r.status
    bf = schedule_brute_force(p.latency_s.tolist(), p.preds, p.modes, len(p.slots))
    assert status == "optimal" and mk == pytest.approx(bf, rel=1e-6)
    fin = [starts[i] + p.latency_s[i, modes[i]] for i in range(n)]
    for i in range(n):
        for j in range(i + 1, n):
            if set(p.modes[modes[i]]) & set(p.modes[modes[j]]):
                assert fin[i] <= starts[j] + 1e-6 * bf or fin[j] <= starts[i] + 1e-6 * bf
    assert schedule.lower_bound(p) <= bf * (1 + 1e-9) <= schedule.list_schedule(p)[0] * (1 + 2e-9)


def test_core_slots_follow_core_counts_and_antichains():
    """W_u = min(cores, max antichain of the ops that may use one core); one core of one is
    the whole unit; a one-core mode is offered only where it beats linear scaling."""
    m = models.preset("gpt3-175b")
    g = graph.build(m, 8, 1, "bwd", "layer")
    for chip in (hardware.TPUv4, hardware.A100, hardware.TPUv4.with_(tensor_cores=1, vector_units=1)):
        p = schedule.make_problem(g, chip)
        kinds = np.array(p.slot_kinds)
        wt, wv = int((kinds == "tensor").sum()), int((kinds == "vector").sum())
        assert wt <= chip.tensor_cores and wv <= chip.vector_units
        reach = schedule.problem._reach(p.preds, p.names)
        assert wt <= max(1, schedule.max_antichain(reach, np.ones(len(p), dtype=bool)))
        if chip.tensor_cores == 1:
            assert wt == 1 and not any("core" in n for n in p.mode_names if n.startswith("tensor"))
        from cosearch import cost
        for mi, name in enumerate(p.mode_names):
            if ".core" in name:
                unit = name.split(".")[0]
                N = chip.tensor_cores if unit == "tensor" else chip.vector_units
                ops = g.arrays()[[i for i, op in enumerate(g.ops) if op.name in p.names]]
                lin = N * cost.price(ops, chip, 1.0)[0]
                one = cost.price(ops, chip, 1.0 / N)[0]
                fin = np.isfinite(p.latency_s[:, mi])
                assert np.all(one[fin] < lin[fin])


def test_bad_input_names_op():
    lat = np.full((2, 6), INF)
    lat[0, 0] = 1.0
    with pytest.raises(ValueError, match="op1"):
        schedule.Problem(("op0", "op1"), lat, ((), (0,)))
    lat[1, 3] = -1.0
    with pytest.raises(ValueError, match="op1.*non-positive"):
        schedule.Problem(("op0", "op1"), lat, ((), (0,)))
    lat[1, 3] = 1.0
    with pytest.raises(ValueError, match="cycle"):
        schedule.Problem(("op0", "op1"), lat, ((1,), (0,)))
    with pytest.raises(ValueError, match="method"):
        schedule.layer_time(graph.build(models.preset("gpt3-1.3b")), hardware.TPUv4, method="magic")


def test_solver_failure_falls_back_with_warning(monkeypatch):
    import cvxpy as cp
    rng = np.random.default_rng(0)
    p = random_problem(rng, 5)

    def boom(self, *a, **k):
        raise cp.error.SolverError("synthetic failure")

    monkeypatch.setattr(cp.Problem, "solve", boom)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        r = schedule.solve_ilp(p, lb=0.0)          # a bound the start cannot meet: the solver runs
        mk, status = r.makespan_s, r.status
    assert status == "fallback"
    assert mk == pytest.approx(schedule.list_schedule(p)[0])
    assert any("list schedule" in str(x.message) for x in w)


def _shared_problem(rng, n, wt, wv):
    """A PHAZE-layout problem whose runs stream HBM: memory-bound runs at share 1, others at
    a random share (mode-dependent: one-core runs are slower and stream slower)."""
    p = _general_problem(rng, n, wt, wv)
    bw = np.zeros_like(p.latency_s)
    for i in range(n):
        fin = np.flatnonzero(np.isfinite(p.latency_s[i]))
        hbm = p.latency_s[i, fin].min() * (1.0 if rng.random() < 0.3 else rng.uniform(0.1, 0.9))
        bw[i, fin] = hbm / p.latency_s[i, fin]       # same bytes in every mode
    return schedule.Problem(p.names, p.latency_s, p.preds, p.modes, p.slots, p.mode_names, p.symmetry,
                            p.slot_kinds, bw)


def _check_schedule(p, modes, starts, tol):
    """Precedence, no two runs on a slot at once, and the HBM shares at most 1 at every instant."""
    n = len(p)
    fin = [starts[i] + p.latency_s[i, modes[i]] for i in range(n)]
    for j, ps in enumerate(p.preds):
        for i in ps:
            assert starts[j] >= fin[i] - tol
    for i in range(n):
        for j in range(i + 1, n):
            if set(p.modes[modes[i]]) & set(p.modes[modes[j]]):
                assert fin[i] <= starts[j] + tol or fin[j] <= starts[i] + tol
    for t in starts:
        load = sum(p.bandwidth[i, modes[i]] for i in range(n) if starts[i] <= t + tol and fin[i] > t + tol)
        assert load <= 1 + 1e-6


@pytest.mark.parametrize("seed", range(20))
def test_shared_bandwidth_ilp_equals_brute_force(seed):
    """HBM shared among concurrent runs: the ILP (pairwise conflicts up front, larger sets
    cut lazily) equals an exhaustive active-schedule search; its schedule, the list
    schedule's, and the lower bound are valid."""
    rng = np.random.default_rng(900 + seed)
    n = int(rng.integers(3, 7))
    wt, wv = int(rng.integers(1, 4)), int(rng.integers(1, 3))
    p = _shared_problem(rng, n, wt, wv)
    bf = schedule_brute_force(p.latency_s.tolist(), p.preds, p.modes, len(p.slots), p.bandwidth.tolist())
    r = schedule.solve_ilp(p, time_limit_s=60)
    assert r.status == "optimal" and r.makespan_s == pytest.approx(bf, rel=1e-6)
    _check_schedule(p, r.modes, r.start_s, 1e-6 * bf)
    ls, lmodes, lstarts = schedule.list_schedule(p)
    _check_schedule(p, lmodes, lstarts, 1e-9 * bf)
    assert schedule.lower_bound(p) <= bf * (1 + 1e-9) <= ls * (1 + 2e-9)


def test_three_runs_that_fit_in_pairs_are_cut_lazily():
    """Three independent runs at share 0.4 on three slots: any two fit side by side, all three
    do not — the pairwise rule allows it, the lazy cut must stagger them: optimum 2."""
    lat = np.full((3, 3), INF)
    for i in range(3):
        lat[i, i] = 1.0
    bw = np.where(np.isfinite(lat), 0.4, 0.0)
    p = schedule.Problem(("a", "b", "c"), lat, ((), (), ()), ((0,), (1,), (2,)), ("s0", "s1", "s2"),
                         ("m0", "m1", "m2"), (), ("tensor",) * 3, bw)
    r = schedule.solve_ilp(p)
    assert r.makespan_s == pytest.approx(2.0) and r.status == "optimal" and r.bandwidth_cuts >= 1
    free = schedule.Problem(p.names, lat, p.preds, p.modes, p.slots, p.mode_names, (), p.slot_kinds)
    assert schedule.solve_ilp(free).makespan_s == pytest.approx(1.0)


def test_layer_schedule_never_oversubscribes_hbm():
    """A real backward layer on TPUv4 (memory-bound vector runs at share ~1): the ILP schedule
    keeps the HBM shares at most 1, and the bound from exclusive runs holds."""
    g = graph.build(models.preset("gpt3-175b"), 8, 1, "bwd")
    p = schedule.make_problem(g, hardware.TPUv4)
    assert p.shares_bandwidth
    r = schedule.layer_time(g, hardware.TPUv4, use_cache=False)
    modes = [p.mode_names.index(m) for m in r.modes]
    _check_schedule(p, modes, r.start_s, 1e-6 * r.latency_s)
    assert r.lower_bound_s <= r.latency_s * (1 + 1e-9)


def test_ilp_reports_the_wall_seconds_it_spent():
    """The time limit counts CPU seconds, but solve_time_s is the wall time of the call: within
    the wall time measured around it (a mixed-clock difference would be far outside)."""
    import time
    rng = np.random.default_rng(3)
    p = random_problem(rng, 6)
    t0 = time.perf_counter()
    r = schedule.solve_ilp(p, time_limit_s=30)
    wall = time.perf_counter() - t0
    assert 0.0 <= r.solve_time_s <= wall
