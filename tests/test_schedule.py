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
    mk, modes, starts, status, gap, _ = schedule.solve_ilp(p, time_limit_s=30)
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
    mk = schedule.solve_ilp(p)[0]
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
    g = graph.build(models.preset("gpt3-1.3b"), tp=1, microbatch=1, phase="fwd")
    a = schedule.layer_time(g, hardware.TPUv4)
    b = schedule.layer_time(graph.build(models.preset("gpt3-1.3b"), tp=1, microbatch=1, phase="fwd"),
                            hardware.TPUv4)
    assert a is b
    info = schedule.cache_info()
    assert info["solves"] == 1 and info["hits"] == 1
    schedule.layer_time(graph.build(models.preset("gpt3-1.3b"), tp=2, microbatch=1), hardware.TPUv4)
    assert schedule.cache_info()["solves"] == 2


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
        mk, _, _, status, _, _ = schedule.solve_ilp(p)
    assert status == "fallback"
    assert mk == pytest.approx(schedule.list_schedule(p)[0])
    assert any("list schedule" in str(x.message) for x in w)
