import json

import numpy as np
import pytest

from cosearch import baselines, cluster, hardware, models, placement, search, sweep
from cosearch.cli import main

MiB, GiB = 2**20, 2**30


def small_space(**kw):
    base = dict(tensor_cores=(2, 4, 8), systolic_dims=((64, 64), (128, 128)), vector_units=(2,),
                vector_width=(512, 1024), l1_bytes=(1 * MiB, 4 * MiB), l2_bytes=(32 * MiB,),
                hbm=((16 * GiB, 1.2e12), (32 * GiB, 1.6e12)))
    base.update(kw)
    return hardware.SearchSpace(**base)


def test_best_is_best_of_exhaustive_and_pruning_keeps_it():
    m = models.preset("gpt3-1.3b")
    sp = small_space()
    cl = cluster.Cluster(16)
    res = search.cosearch(m, sp, cl, 32, "serial", refine_top=0, prune=True)
    full = search.cosearch(m, sp, cl, 32, "serial", refine_top=0, prune=False)
    assert full.pruned == 0 and len(full.rows) == len(sp.arrays())
    # exhaustive: every design through search_plans directly
    best = 0.0
    for row in sp.arrays():
        chip = hardware.Accelerator.from_array(row)
        r = placement.search_plans(m, chip, cl, 32, **search.DEFAULT_PLAN_OPTIONS)
        if r.feasible:
            best = max(best, r.best.tokens_per_s)
    assert full.best.tokens_per_s == pytest.approx(best, rel=1e-9)
    assert res.best.tokens_per_s == pytest.approx(best, rel=1e-9)
    assert res.pruned + len(res.rows) == res.total_designs


def test_pruning_bound_is_valid():
    m = models.preset("gpt3-1.3b")
    sp = small_space()
    cl = cluster.Cluster(16)
    full = search.cosearch(m, sp, cl, 32, "serial", refine_top=0, prune=False)
    designs = sp.arrays()
    tps = placement.default_tps(m, 16)
    mbs = placement.divisors(32)
    from cosearch.plan import unit_costs
    units = unit_costs(m, designs, cl, tps, mbs, (False,))
    lb = sweep.step_lower_bound(units, m, tps, mbs, 32, 16)
    for r in full.feasible:
        assert lb[r.index] <= r.plan.step_time_s * (1 + 1e-9)


def test_json_round_trip(tmp_path):
    res = search.cosearch("gpt3-1.3b", small_space(), 16, 32, "serial", refine_top=1)
    p = tmp_path / "r.json"
    res.to_json(p)
    back = search.Results.from_json(p)
    assert back.to_dict() == json.loads(res.to_json())
    assert back.best == res.best
    csv = res.to_csv()
    assert csv.count("\n") == len(res.rows) + 1
    assert "designs evaluated" in res.table()
    d = json.loads(p.read_text())
    assert d["schema"] == "cosearch.results/1" and d["cosearch_version"]


def test_csv_in_rank_order_with_plan_columns():
    import csv as csv_mod
    import io
    res = search.cosearch("gpt3-1.3b", small_space(), 16, 32, "serial", refine_top=0,
                          plan_options={"zero": (0, 1, 3), "sequence_parallel": (False, True)})
    rows = list(csv_mod.DictReader(io.StringIO(res.to_csv())))
    tps = [float(r["tokens_per_s"]) for r in rows if r["rank"]]
    assert tps == sorted(tps, reverse=True) and [r["rank"] for r in rows if r["rank"]] == [str(i + 1) for i in range(len(tps))]
    best = res.best
    top = rows[0]
    assert int(top["index"]) == best.index and int(top["dp"]) == best.plan.dp
    for col in ("cp", "ep", "recompute", "virtual_stages", "sequence_parallel", "zero", "precision"):
        assert col in top
    assert top["precision"] == "bf16" and top["cp"] == "1"


def test_pareto_front_brute_force():
    rng = np.random.default_rng(0)
    x, y = rng.uniform(0, 1, 40).tolist(), rng.uniform(0, 1, 40).tolist()
    front = set(search.pareto_front(x, y))
    for i in range(40):
        dominated = any((x[j] <= x[i] and y[j] > y[i]) or (x[j] < x[i] and y[j] >= y[i]) for j in range(40))
        assert (i in front) == (not dominated)


def test_no_design_under_budget_says_which():
    with pytest.raises(ValueError, match="area budget"):
        search.cosearch("gpt3-1.3b", small_space(area_budget_mm2=10.0), 16, 32, "serial")


def test_unknown_model_lists_choices():
    with pytest.raises(ValueError, match="llama2-70b"):
        search.cosearch("gpt-17", small_space(), 16, 32, "serial")


def test_process_pool_matches_serial():
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor
    sp = small_space()
    a = search.cosearch("gpt3-1.3b", sp, 16, 32, "serial", refine_top=0, prune=False)
    with ProcessPoolExecutor(2, mp_context=mp.get_context("spawn")) as ex:
        b = search.cosearch("gpt3-1.3b", sp, 16, 32, ex, refine_top=0, prune=False, chunk_size=8)
    assert sorted((r.index, r.tokens_per_s) for r in a.rows) == sorted((r.index, r.tokens_per_s) for r in b.rows)


def test_default_executor_starts_a_pool_only_for_a_long_sweep(monkeypatch):
    """executor=None runs in-process and hands what is left to a spawned local pool once
    AUTO_POOL_AFTER_S has passed; either way the rows are the serial sweep's."""
    sp = small_space()
    a = search.cosearch("gpt3-1.3b", sp, 16, 32, "serial", refine_top=0, prune=False)
    started = []
    real = sweep.ProcessPoolExecutor

    def spy(*args, **kwargs):
        started.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(sweep, "ProcessPoolExecutor", spy)
    monkeypatch.setattr(sweep, "AUTO_POOL_AFTER_S", 1e9)
    b = search.cosearch("gpt3-1.3b", sp, 16, 32, None, refine_top=0, prune=False, chunk_size=8)
    assert not started
    monkeypatch.setattr(sweep, "AUTO_POOL_AFTER_S", 0.0)
    monkeypatch.setattr(sweep.os, "cpu_count", lambda: 2)
    c = search.cosearch("gpt3-1.3b", sp, 16, 32, None, refine_top=0, prune=False, chunk_size=8)
    assert started
    want = sorted((r.index, r.tokens_per_s) for r in a.rows)
    assert sorted((r.index, r.tokens_per_s) for r in b.rows) == want
    assert sorted((r.index, r.tokens_per_s) for r in c.rows) == want


def test_dask_executor():
    distributed = pytest.importorskip("distributed")
    sp = small_space(tensor_cores=(4, 8))
    a = search.cosearch("gpt3-1.3b", sp, 16, 32, "serial", refine_top=0, prune=False)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as lc, distributed.Client(lc) as client:
        b = search.cosearch("gpt3-1.3b", sp, 16, 32, client.get_executor(), refine_top=0, prune=False,
                            chunk_size=4)
    assert sorted((r.index, r.tokens_per_s) for r in a.rows) == sorted((r.index, r.tokens_per_s) for r in b.rows)


def test_keyboard_interrupt_returns_partial(monkeypatch):
    calls = {"n": 0}
    real = sweep.evaluate_designs

    def flaky(*a, **k):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(sweep, "evaluate_designs", flaky)
    res = search.cosearch("gpt3-1.3b", small_space(), 16, 32, "serial", chunk_size=4, prune=False)
    assert res.interrupted and 0 < len(res.rows) < res.total_designs


@pytest.mark.parametrize("name,chips,batch", [("gpt3-13b", 64, 128), ("llama2-13b", 64, 128)])
def test_cosearch_never_loses_to_baselines(name, chips, batch):
    """Both baselines' chips lie in the space (TPUv4 is a grid point), so the co-search can at
    best tie them; with HBM held at one scenario it does tie Spotlight on these models."""
    res = search.cosearch(name, hardware.SearchSpace(), chips, batch, "serial", refine_top=2, baselines=True)
    best = res.best.tokens_per_s
    assert best >= res.baselines["TPUv4"]["tokens_per_s"] * (1 - 1e-9)
    assert best >= res.baselines["Spotlight"]["tokens_per_s"] * (1 - 1e-9)
    assert res.best.area_mm2 <= res.meta["area_budget_mm2"] * (1 + 1e-9)
    assert res.best.power_w <= res.meta["power_budget_w"] * (1 + 1e-9)


def test_spotlight_picks_min_layer_latency():
    m = models.preset("gpt3-1.3b")
    sp = small_space()
    i, chip = baselines.spotlight_chip(m, sp)
    from cosearch import cost, graph
    lat = [cost.price(graph.build(m), row[None]).sum() + cost.price(graph.build(m, phase="bwd"), row[None]).sum()
           for row in sp.arrays()]
    assert i == int(np.argmin(lat))


def test_cli(tmp_path, capsys):
    assert main(["models"]) == 0
    assert "llama2-70b" in capsys.readouterr().out
    assert main(["presets"]) == 0
    assert "TPUv4" in capsys.readouterr().out
    assert main(["search", "--model", "nope", "--chips", "8", "--batch", "8", "--serial"]) == 2
    assert "known presets" in capsys.readouterr().err


def test_cli_search_report(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(search, "SearchSpace", lambda: small_space())
    out = tmp_path / "r.json"
    assert main(["search", "--model", "gpt3-1.3b", "--chips", "16", "--batch", "32", "--serial",
                 "--out", str(out), "--refine-top", "0"]) == 0
    png = tmp_path / "r.png"
    assert main(["report", str(out), "--plot", str(png), "--csv", str(tmp_path / "r.csv")]) == 0
    assert png.stat().st_size > 1000


def test_table_separates_time_models_and_collapses_equivalent_designs():
    """Brute force on the rows: every distinct (time model, plan, chips, throughput) appears once
    with its count, ILP rows are listed before (never among) screened rows."""
    res = search.cosearch("gpt3-1.3b", small_space(), 16, 32, "serial", refine_top=2)
    from cosearch import report
    text = res.table(top=100)
    feas = res.feasible
    for tm in ("ilp", "sum"):
        rows = [r for r in feas if r.time_model == tm]
        keys = {}
        for r in rows:
            keys.setdefault((r.plan.spec.describe(), r.plan.chips_used, round(r.tokens_per_s, 3)), []).append(r)
        groups = [g for g in report.collapse(rows)]
        assert len(groups) == len(keys)
        assert sorted(n for _, n in groups) == sorted(len(v) for v in keys.values())
        for rep, n in groups:   # the representative is the smallest-area member
            same = keys[(rep.plan.spec.describe(), rep.plan.chips_used, round(rep.tokens_per_s, 3))]
            assert rep.area_mm2 == min(r.area_mm2 for r in same) and n == len(same)
    lines = text.splitlines()
    ilp_at = next(i for i, s in enumerate(lines) if s.startswith("-- ranked on ILP"))
    sum_at = next((i for i, s in enumerate(lines) if s.startswith("-- screened")), None)
    if sum_at is None:      # every screened design was ILP-ranked
        assert all(r.time_model == "ilp" for r in feas)
        sum_at = len(lines)
    assert ilp_at < sum_at
    assert all(" ilp " in s for s in lines[ilp_at + 2:sum_at] if s[:4].strip().isdigit())
    assert not any(" ilp " in s for s in lines[sum_at + 2:] if s[:4].strip().isdigit())


def test_results_report_and_baselines_do_not_import_the_search_loop():
    import subprocess
    import sys
    code = ("import sys, cosearch.results, cosearch.report, cosearch.baselines; "
            "sys.exit(1 if 'cosearch.search' in sys.modules else 0)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_fixed_megatron_is_phazes_placement_and_never_beats_the_plan_search():
    m = models.preset("gpt3-175b")
    cl = cluster.Cluster(1024)
    p, why = baselines.fixed_megatron(m, hardware.TPUv4, cl, 1536)
    assert p is not None and why == ""
    assert (p.dp, p.tp, p.pp) == (8, 4, 32)                 # PHAZE's Solver/baseline_configs.py
    # the exact plan search covers every spec the fixed placement tries (and more)
    free = placement.search_plans(m, hardware.TPUv4, cl, 1536, **search.DEFAULT_PLAN_OPTIONS)
    assert free.best.step_time_s <= p.step_time_s * (1 + 1e-9)
    # an independent check of the choice: no (mb, uniform recompute, zero) of that placement is faster
    from cosearch.plan import PlanSpec, evaluate
    for mb in (1, 2, 4):
        for rc in ("none", "selective", "full"):
            q = evaluate(m, hardware.TPUv4, cl, PlanSpec(8, 4, 32, mb, recompute=rc, zero=1), 1536)
            assert not q.feasible or q.step_time_s >= p.step_time_s * (1 - 1e-9)


def test_fixed_megatron_says_why_not():
    p, why = baselines.fixed_megatron(models.preset("opt-350m"), hardware.TPUv4, cluster.Cluster(1024), 4096)
    assert p is None and "dp=85" in why                     # 4096 sequences do not split over 85 replicas
    p, why = baselines.fixed_megatron(models.preset("gpt3-13b"), hardware.TPUv4, cluster.Cluster(1024), 1536)
    assert p is None and "no fixed Megatron placement" in why
    p, why = baselines.fixed_megatron(models.preset("opt-350m"), hardware.TPUv4, cluster.Cluster(512), 4096)
    assert p is None and "does not scale to 512 chips (dp would be 42.5)" in why


def test_fixed_megatron_scales_dp_with_the_cluster():
    """PHAZE's plans are for 1,024 chips: dp grows with the cluster, tp and pp stay (by hand)."""
    assert baselines.scaled_megatron_plan("gpt3-175b", 4096) == (32, 4, 32)
    assert baselines.scaled_megatron_plan("gpt3-175b", 512) == (4, 4, 32)
    assert baselines.scaled_megatron_plan("opt-350m", 2048) == (170, 1, 12)
    assert "dp would be 0.5" in baselines.scaled_megatron_plan("gpt3-175b", 64)
    p, why = baselines.fixed_megatron(models.preset("gpt3-175b"), hardware.TPUv4, cluster.Cluster(4096), 2048)
    assert why == "" and (p.dp, p.tp, p.pp) == (32, 4, 32) and p.chips_used == 4096


def test_plan_search_cutoff_keeps_the_best_or_says_cut():
    m = models.preset("gpt3-1.3b")
    cl = cluster.Cluster(16)
    full = placement.search_plans(m, hardware.TPUv4, cl, 32, **search.DEFAULT_PLAN_OPTIONS)
    t = full.best.step_time_s
    above = placement.search_plans(m, hardware.TPUv4, cl, 32, cutoff_s=t * 1.001, **search.DEFAULT_PLAN_OPTIONS)
    assert above.best.step_time_s == t and above.best.spec == full.best.spec and above.evaluated <= full.evaluated
    below = placement.search_plans(m, hardware.TPUv4, cl, 32, cutoff_s=t * 0.999, **search.DEFAULT_PLAN_OPTIONS)
    assert below.cut_off and not below.plans and "cutoff" in below.reason


def test_equivalent_designs_have_the_same_plan_and_rows_match_a_per_design_search():
    """Designs grouped as equivalent (same unit costs, HBM and links) are evaluated once; every
    design's row must still equal its own plan search."""
    m = models.preset("gpt3-1.3b")
    sp = small_space(vector_units=(2, 4), l2_bytes=(32 * MiB, 64 * MiB))
    cl = cluster.Cluster(16)
    res = search.cosearch(m, sp, cl, 32, "serial", refine_top=0, prune=False)
    from cosearch.plan import unit_costs
    designs = sp.arrays()
    tps, mbs = placement.default_tps(m, 16), placement.divisors(32)
    group, members = sweep.equivalent_designs(designs, unit_costs(m, designs, cl, tps, mbs, (False,)))
    assert len(members) < len(designs)           # vector units / L2 that change nothing are shared
    by_index = {r.index: r for r in res.rows}
    assert sorted(by_index) == list(range(len(designs)))
    for row in designs[::3]:
        i = int(np.flatnonzero((designs == row).all(axis=1))[0])
        r = placement.search_plans(m, hardware.Accelerator.from_array(row), cl, 32, **search.DEFAULT_PLAN_OPTIONS)
        assert by_index[i].tokens_per_s == pytest.approx(r.best.tokens_per_s if r.feasible else 0.0, rel=1e-12)


def test_exact_ilp_ranking_equals_ilp_for_every_design():
    """The ILP-ranked top-k equals re-planning every design with ILP layer times over every
    (tp, microbatch) (brute force, no bounds)."""
    m = models.preset("gpt3-1.3b")
    sp = hardware.SearchSpace(tensor_cores=(2, 4, 8), systolic_dims=((64, 64), (128, 128)), vector_units=(2,),
                              vector_width=(512,), l1_bytes=(1 * MiB,), l2_bytes=(32 * MiB,),
                              hbm=((16 * GiB, 1.2e12),))
    cl = cluster.Cluster(16)
    k = 2
    res = search.cosearch(m, sp, cl, 32, "serial", tps=(1, 2), microbatches=(1, 2), refine_top=k)
    brute = []
    for i, row in enumerate(sp.arrays()):
        r = placement.search_plans(m, hardware.Accelerator.from_array(row), cl, 32, tps=(1, 2), microbatches=(1, 2),
                                   time_model="ilp", **search.DEFAULT_PLAN_OPTIONS)
        brute.append((r.best.tokens_per_s if r.feasible else 0.0, i))
    brute.sort(key=lambda x: -x[0])
    ilp_rows = sorted((r for r in res.feasible if r.time_model == "ilp"), key=lambda r: -r.tokens_per_s)
    assert len(ilp_rows) >= k
    for (tok, _), r in zip(brute[:k], ilp_rows[:k]):
        assert r.tokens_per_s == pytest.approx(tok, rel=1e-9)
    # every ILP row is the design's true ILP optimum, not just a lower bound on it
    truth = {i: tok for tok, i in brute}
    for r in ilp_rows:
        assert r.tokens_per_s == pytest.approx(truth[r.index], rel=1e-9)
    assert res.best.tokens_per_s == pytest.approx(brute[0][0], rel=1e-9)
    assert res.meta["ilp_ranking"]["proven"] and "proven exact" in res.table()
    # a budget of one re-planned design cannot prove a top 2: said so, never hidden
    short = search.cosearch(m, sp, cl, 32, "serial", tps=(1, 2), microbatches=(1, 2), refine_top=k, ilp_designs=1)
    ir = short.meta["ilp_ranking"]
    assert not ir["proven"] and ir["scheduled"] == 1 and ir["open"] >= 1 and "NOT proven" in short.table()


@pytest.mark.parametrize("name,tp,mb", [("gpt3-1.3b", 1, 1), ("llama2-7b", 2, 2), ("bert-large", 1, 4)])
def test_layer_bounds_never_exceed_the_ilp(name, tp, mb):
    from cosearch import graph, schedule
    m = models.preset(name)
    designs = small_space(tensor_cores=(1, 2, 8), vector_units=(1, 2)).arrays()[::2]
    for ph in ("fwd", "bwd"):
        g = graph.build(m, tp, mb, ph)
        lb = schedule.layer_bounds(g, designs)
        wb = schedule.work_bounds(g, designs)
        schedule.clear_cache()
        for row, b, w in zip(designs, lb, wb):
            # cached by instance: designs that price the layer alike share one exact solve
            r = schedule.layer_time(g, hardware.Accelerator.from_array(row))
            assert b <= r.latency_s * (1 + 1e-9)
            assert r.status == "optimal" or b <= r.latency_s
            assert 0 < w <= r.latency_s * (1 + 1e-9)


def test_plot_and_cli_lists(tmp_path, capsys):
    res = search.cosearch("gpt3-1.3b", small_space(), 16, 32, "serial", refine_top=1)
    fig = res.plot(tmp_path / "front.png")
    assert (tmp_path / "front.png").stat().st_size > 1000 and len(fig.axes) == 2
    ax, bx = fig.axes
    # the front is drawn (a line with markers through the non-dominated designs)
    front = [ln for ln in ax.get_lines() if ln.get_label().startswith("Pareto front")]
    assert front and len(front[0].get_xdata()) >= 1 and front[0].get_marker() == "o"
    xs = list(front[0].get_xdata())
    assert xs == sorted(xs)
    best = max(r.tokens_per_s for r in res.feasible)
    assert max(front[0].get_ydata()) == pytest.approx(best)
    if res.pruned:
        assert "pruned unevaluated" in ax.get_title()
    assert ax.yaxis.get_major_formatter()(1234567, 0) == "1,234,567"
    assert bx.texts and all(t.get_text() for t in bx.texts)          # every bar labelled with its value
    assert max(len(x) for x in bx.get_title().splitlines()) <= 48
    space = tmp_path / "s.json"
    space.write_text('{"tensor_cores": [2, 4], "systolic_dims": [[64, 64]], "vector_units": [2], '
                     '"vector_width": [512], "l1_bytes": [1048576], "l2_bytes": [33554432]}')
    base = ["search", "--model", "gpt3-1.3b", "--chips", "16", "--batch", "32", "--serial", "--space", str(space),
            "--hbm-gib", "16"]
    assert main([*base, "--tps", "1,2", "--microbatches", "1,2", "--time-model", "sum",
                 "--out", str(tmp_path / "a.json")]) == 0
    d = json.loads((tmp_path / "a.json").read_text())
    assert d["meta"]["tps"] == [1, 2] and d["meta"]["microbatches"] == [1, 2]
    assert all(r["time_model"] == "sum" for r in d["rows"])
    assert main([*base, "--tps", "3", "--out", str(tmp_path / "b.json")]) == 2
    assert "tp=3 must divide" in capsys.readouterr().err


@pytest.mark.parametrize("name,tp,mb", [("bert-large", 1, 4), ("gpt3-1.3b", 2, 1)])
def test_layer_bounds_never_exceed_the_ilp_on_phaze_designs(name, tp, mb):
    """PHAZE's space spans 1-4,096 cores of 2x2 to 256x256 arrays: the bound stays under the
    proven ILP makespan on a spread of them (backward layers, where the ILP overlaps ops)."""
    from cosearch import graph, schedule
    g = graph.build(models.preset(name), tp, mb, "bwd")
    designs = hardware.SearchSpace.phaze().arrays()[::5000]
    ratios = []
    for row, b, w in zip(designs, schedule.layer_bounds(g, designs), schedule.work_bounds(g, designs)):
        r = schedule.layer_time(g, hardware.Accelerator.from_array(row), use_cache=False)
        assert r.status == "optimal"
        assert b <= r.latency_s * (1 + 1e-9)
        assert w <= r.latency_s * (1 + 1e-9)          # the cheap screen is a bound too
        ratios.append(w / r.latency_s)
    assert np.median(ratios) > 0.8                 # and a tight one where compute binds


def test_resume_accepts_unlimited_budgets_ranked_and_finished_files(tmp_path):
    """Resume compares only the settings that change results: an unlimited power budget
    (saved as null, as PHAZE's space has it), the ILP ranking's ``meta`` keys and a finished
    file are all accepted, and the resumed run gives the uninterrupted answer; a setting that
    changes results is still refused, naming it."""
    m = models.preset("gpt3-1.3b")
    sp = small_space(power_budget_w=float("inf"))
    full = search.cosearch(m, sp, 16, 32, "serial", refine_top=1)
    assert "ilp_ranking" in full.meta and full.meta["power_budget_w"] == float("inf")
    f = tmp_path / "r.json"
    full.to_json(f)
    again = search.cosearch(m, sp, 16, 32, "serial", refine_top=1, resume=f)
    assert again.best.index == full.best.index
    assert again.best.tokens_per_s == pytest.approx(full.best.tokens_per_s, rel=1e-12)
    # a file cut short mid-sweep (half its rows, marked interrupted) resumes to the same answer
    d = json.loads(f.read_text())
    d["rows"] = [r for r in d["rows"] if r["time_model"] == "sum"][: len(d["rows"]) // 2]
    d["interrupted"] = True
    f.write_text(json.dumps(d))
    part = search.cosearch(m, sp, 16, 32, "serial", refine_top=1, resume=f)
    assert part.best.index == full.best.index and not part.interrupted
    with pytest.raises(ValueError, match="these differ: tps"):
        search.cosearch(m, sp, 16, 32, "serial", tps=(1,), refine_top=1, resume=f)


def test_results_to_json_refuses_to_overwrite_by_default(tmp_path):
    res = search.cosearch("bert-large", None, 8, 16, "serial", refine_top=0)
    p = tmp_path / "r.json"
    res.to_json(p)
    with pytest.raises(FileExistsError, match="overwrite=True"):
        res.to_json(p)
    res.to_json(p, overwrite=True)
    assert json.loads(p.read_text())["model"] == res.model


def test_meta_time_model_agrees_with_the_rows():
    res = search.cosearch("gpt3-1.3b", small_space(), 16, 32, "serial", refine_top=1)
    assert any(r.time_model == "ilp" for r in res.rows) and res.meta["time_model"] == "ilp"
    res0 = search.cosearch("gpt3-1.3b", small_space(), 16, 32, "serial", refine_top=0)
    assert all(r.time_model == "sum" for r in res0.rows) and res0.meta["time_model"] == "sum"


def test_time_limited_layer_schedules_leave_the_ranking_unproven(monkeypatch):
    """A layer ILP stopped by its time limit is not a proof: the ranking built on it says
    'NOT proven' and counts the time-limited layers (here every solve is reported as stopped)."""
    import dataclasses

    from cosearch import schedule
    from cosearch.schedule import cache as sched_cache
    real = sched_cache.solve_ilp

    def stopped(*a, **kw):
        return dataclasses.replace(real(*a, **kw), status="time_limit")
    monkeypatch.setattr(sched_cache, "solve_ilp", stopped)
    schedule.clear_cache()
    m = models.preset("gpt3-1.3b")
    sp = hardware.SearchSpace(tensor_cores=(2, 4), systolic_dims=((64, 64),), vector_units=(2,),
                              vector_width=(512,), l1_bytes=(1 * MiB,), l2_bytes=(32 * MiB,),
                              hbm=((16 * GiB, 1.2e12),))
    try:
        res = search.cosearch(m, sp, cluster.Cluster(16), 32, "serial", tps=(1, 2), microbatches=(1, 2), refine_top=1)
    finally:
        schedule.clear_cache()
    ir = res.meta["ilp_ranking"]
    assert ir["time_limited_layers"] > 0 and not ir["proven"]
    assert "hit the ILP time limit" in res.table()


def test_design_report_by_hand():
    """TPUv4 (4 cores of 128x128) on a 2048 x 4096 @ 4096 x 4096 GEMM: 32 x 32 = 1,024 weight
    tiles in 256 waves of 2048 + 254 cycles, 524,288 useful cycles of 589,312; traffic: weights
    once, inputs 32 times, fp32 partial sums 32 times; the area parts add up to the chip's."""
    from cosearch.design_report import design_report, operand_traffic_bytes, tile_efficiency
    assert tile_efficiency(2048, 4096, 4096, 4, 128, 128) == pytest.approx(524_288 / 589_312, rel=1e-12)
    want = 4096 * 4096 * 2 + 2048 * 4096 * 2 * 32 + 2048 * 4096 * 4 * 32
    assert operand_traffic_bytes(2048, 4096, 4096, 128, 128) == want
    # few tiles: a 4x8 array chip with more cores than tiles splits M over the idle cores
    assert tile_efficiency(64, 8, 4, 16, 4, 8) == pytest.approx((64 * 8 * 4) / (16 * 32 * (4 + 10)), rel=1e-12)
    rep = design_report(hardware.TPUv4)
    assert sum(rep.area_mm2.values()) == pytest.approx(hardware.TPUv4.area_mm2(), rel=1e-12)
    assert rep.reference_Bps == pytest.approx(4096 * 2 * hardware.TPUv4.clock_hz)
    assert "mm^2" in rep.describe() and rep.operand_Bps_needed > 0
    with pytest.raises(ValueError, match="Accelerator"):
        design_report("TPUv4")


def test_cosearch_refuses_options_its_pricing_cannot_honour():
    """The space's designs have bf16 tensor units only: FP8 is refused with the way to search it
    (FP8 MACs in the space); expert parallelism on a dense model is refused by name."""
    sp = hardware.SearchSpace(tensor_cores=(2,), systolic_dims=((64, 64),), vector_units=(2,), vector_width=(512,),
                              l1_bytes=(1 * MiB,), l2_bytes=(32 * MiB,), hbm=((16 * GiB, 1.2e12),))
    # a degree of 0 divided the chips by zero (found by fuzzing `cosearch search --ep 0` / `--cp 0`)
    for opt, match in (({"precision": "fp8"}, "fp8_macs=\\(0, 2\\)"), ({"expert_parallel": 2}, "dense"),
                       ({"expert_parallel": (1, 0)}, "expert_parallel must be a positive integer, got 0"),
                       ({"context_parallel": 0}, "context_parallel must be a positive integer, got 0")):
        opts = dict(search.DEFAULT_PLAN_OPTIONS, flash_attention=True, **opt)
        with pytest.raises(ValueError, match=match):
            search.cosearch(models.preset("gpt3-1.3b"), sp, cluster.Cluster(16), 32, "serial", plan_options=opts)
    ok = dict(search.DEFAULT_PLAN_OPTIONS, context_parallel=(1,), precision=("bf16",))
    assert search.cosearch(models.preset("gpt3-1.3b"), sp, cluster.Cluster(16), 32, "serial", plan_options=ok,
                           refine_top=0).feasible


@pytest.mark.parametrize("refine", [0, 1])
def test_cosearch_over_context_parallel_keeps_each_designs_best(refine):
    """Context parallelism 1 and 2 over a three-design space: every design's row is its best plan
    over both degrees — what search_plans (serial times) or ilp_plan (ILP times, the exact top)
    gives that chip with both degrees, and a degree of 2 alone never beats it."""
    from cosearch.placement import ilp_plan, search_plans
    sp = hardware.SearchSpace(tensor_cores=(2, 8), systolic_dims=((64, 64),), vector_units=(2,),
                              vector_width=(512,), l1_bytes=(1 * MiB,), l2_bytes=(32 * MiB,),
                              hbm=((16 * GiB, 1.2e12),), link_bandwidth_Bps=(3e11, 3e10))
    m = models.preset("gpt3-1.3b").with_(seq_len=4096)
    cl, batch = cluster.Cluster(16, 4, None, 25e9), 8       # 8 sequences on 16 chips at tp 1: cp 2 binds
    opts = dict(search.DEFAULT_PLAN_OPTIONS, flash_attention=True, context_parallel=(1, 2))
    res = search.cosearch(m, sp, cl, batch, "serial", tps=(1,), plan_options=opts, refine_top=refine, prune=False)
    assert [c["context_parallel"] for c in res.meta["combinations"]] == [1, 2]
    designs = sp.arrays()
    for r in res.rows:
        chip = hardware.Accelerator.from_array(designs[r.index])
        if r.time_model == "ilp":
            want = ilp_plan(m, chip, cl, batch, res_mem(), dict(opts), tps=(1,)).step_time_s
        else:
            want = search_plans(m, chip, cl, batch, tps=(1,), **opts).best.step_time_s
        assert r.plan.step_time_s == pytest.approx(want, rel=1e-9)
    assert any("cp2" in r.plan.spec.describe() for r in res.rows)
    only1 = search.cosearch(m, sp, cl, batch, "serial", tps=(1,), plan_options=dict(opts, context_parallel=(1,)),
                            refine_top=refine, prune=False)
    assert res.best.tokens_per_s > only1.best.tokens_per_s
    if refine:
        assert res.best.time_model == "ilp"


def res_mem():
    from cosearch import memory
    return memory.MemoryConfig()
