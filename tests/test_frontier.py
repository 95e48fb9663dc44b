"""System-level co-design (cosearch.frontier): the power, cost and domain rules worked by hand,
and the search over systems x plans against brute force through evaluate() (top 2)."""

import json

import numpy as np
import pytest

from cosearch import frontier as fr
from cosearch import hardware, models
from cosearch.plan import evaluate
from tests.test_modern_plans import two_layer_plan_specs
from tests.test_placement import cached_units  # noqa: F401  (fixture)

MOE = models.ModelConfig("moe", 2, 64, 4, 128, 512, 64, kv_heads=2, activation="swiglu", position="rotary",
                         norm="rmsnorm", bias=False, dropout=False, num_experts=4, experts_per_token=2,
                         moe_ffn_hidden=64)


def test_power_by_hand():
    """GB200 (1,200 W) with 8 HBM4 stacks (16 TB/s, 8 more than its 8 TB/s at 4 pJ/bit: 256 W),
    its own NVLink, 50 GB/s of scale-out both ways at 5 pJ/bit (4 W)."""
    s = fr.system_space(fr.fixed_system("gb200-nvl72"), scale_up=(72,), scale_out_Bps=(50e9,),
                        hbm=(("hbm4-12h", 8),))[0]
    assert s.chip.hbm_bandwidth_Bps == pytest.approx(16e12) and s.chip.hbm_bytes == pytest.approx(288e9)
    assert s.power_w() == pytest.approx(1200 + 8e12 * 8 * 4e-12 + 50e9 * 2 * 8 * 5e-12)
    # NVLink at half the GB200's 900 GB/s: 450 GB/s less both ways at 5 pJ/bit
    half = fr.SystemDesign(hardware.GB200, 72, 50e9, scale_up_Bps=450e9)
    assert half.power_w() == pytest.approx(1200 - 450e9 * 2 * 8 * 5e-12 + 4.0)
    # no published rated power: power unknown (NaN), no per-watt figure, power budgets unmet
    tpu = fr.fixed_system("tpuv5p-pod")
    assert tpu.chip_power_w is None and np.isnan(tpu.power_w())
    assert fr.SystemDesign(hardware.TPUv5p, 64, 50e9, chip_power_w=500.0).power_w() == pytest.approx(504.0)


def test_tpu_pods_as_fixed_systems():
    """A TPU pod is one 3D-torus slice of its cluster preset, at most its published size; its
    plans run MaxText; with no rated power it has no tokens per joule and fails power budgets."""
    from cosearch import cluster
    tpu = fr.fixed_system("tpuv5p-pod")
    cl = tpu.cluster(512)
    assert cl.torus_side == cluster.tpuv5p_pod(512).torus_side > 0 and cl.num_chips == 512
    with pytest.raises(ValueError, match="more than its 8960"):
        tpu.cluster(16384)
    assert fr.default_plan_options(MOE, tpu.chip, 512)["engine"] == "maxtext"
    opts = dict(tps=(1, 2), virtual_stages=(1,), sequence_parallel=(True,), zero=(3,), flash_attention=True,
                engine="maxtext", precision=("bf16",))
    res = fr.codesign(MOE, [tpu], 64, 64, plan_options=opts)
    r = res.rows[0]
    assert r.plan is not None and r.tokens_per_joule is None and res.best("tokens_per_joule") is None
    assert json.loads(json.dumps(r.to_dict()))["power_w_per_chip"] is None
    r2 = fr.codesign(MOE, [tpu], 64, 64, plan_options=opts, chip_power_budget_w=1000).rows[0]
    assert r2.plan is None and "not published" in r2.reason
    res16k = fr.codesign(MOE, [tpu], 16384, 16384, plan_options=opts)
    assert res16k.rows[0].plan is None and "more than its" in res16k.rows[0].reason


def test_cost_by_hand():
    """$40,000 a slot, 96 GB more HBM at $10/GB, 100 GB/s of scale-out at $20 per GB/s, 1,000 W
    for 4 years at $0.10/kWh and PUE 1.2: 40,000 + 960 + 2,000 + 1.0 kW x 1.2 x 35,064 h x 0.1."""
    cm = fr.CostModel(usd_per_kwh=0.10, lifetime_years=4, pue=1.2, hbm_usd_per_gb=10, scale_out_usd_per_GBps=20)
    s = fr.SystemDesign(hardware.GB200.with_(hbm_bytes=282e9), 72, 100e9, base="GB200", chip_usd=40_000)
    hours = 4 * 365.25 * 24
    assert cm.usd_per_chip(s, 1000.0) == pytest.approx(40_000 + 96 * 10 + 100 * 20 + 1.0 * 1.2 * hours * 0.1)
    assert cm.usd_per_chip(fr.fixed_system("dgx-b200"), 1000.0) is None
    with pytest.raises(ValueError, match="pue"):
        fr.CostModel(usd_per_kwh=0.1, lifetime_years=4, pue=0.5)


@pytest.mark.parametrize("chips,domain,want", [(8192, 72, 64), (8192, 144, 128), (8192, 36, 32), (100, 72, 50),
                                               (64, 72, 64), (7, 8, 7)])
def test_domain_by_hand(chips, domain, want):
    s = fr.SystemDesign(hardware.GB200, domain, 50e9)
    assert s.domain(chips) == want
    cl = s.cluster(chips)
    assert cl.num_chips == chips and (cl.chips_per_node == want)


def _brute_best(system, batch):
    """Every (precision, ep, zero, dp, mb, tp, pp, split, recompute) plan through evaluate();
    the best step of those that fit the system's HBM."""
    chip, cl = system.chip, system.cluster(4)
    best = np.inf
    for spec in two_layer_plan_specs(batch, cl.num_chips, (1, 2, 4), (0, 1), precisions=("bf16", "fp8")):
        p = evaluate(MOE, chip, cl, spec, batch, engine="megatron-core")
        if p.feasible:
            best = min(best, p.step_time_s)
    return best


@pytest.mark.usefixtures("cached_units")
def test_codesign_equals_brute_force_top2():
    """Three systems (NVLink domains of 2 and 4 chips, slow and fast scale-out, two HBM sizes, the
    smaller binding): the search's two best systems and their step times are the brute force's."""
    base = fr.SystemDesign(hardware.H100.with_(hbm_bytes=2.0e6), 4, 5e9, scale_up_Bps=50e9, base="H100")
    systems = [base, fr.SystemDesign(hardware.H100.with_(hbm_bytes=2.0e6), 2, 1e9, scale_up_Bps=50e9, base="H100"),
               fr.SystemDesign(hardware.H100.with_(hbm_bytes=1.05e6), 4, 5e9, scale_up_Bps=50e9, base="H100")]
    batch = 4
    brute = [_brute_best(s, batch) for s in systems]
    opts = dict(tps=(1, 2), virtual_stages=(1,), sequence_parallel=(False,), zero=(0, 1), flash_attention=True,
                engine="megatron-core", expert_parallel=(1, 2, 4), precision=("bf16", "fp8"))
    res = fr.codesign(MOE, systems, 4, batch, plan_options=opts)
    got = {r.system.name: r.plan.step_time_s for r in res.rows if r.plan is not None}
    want_order = [systems[i].name for i in np.argsort(brute) if np.isfinite(brute[i])][:2]
    assert [r.system.name for r in res.ranked()][:2] == want_order
    for s, b in zip(systems, brute):
        if np.isfinite(b):
            assert got[s.name] == pytest.approx(b, rel=1e-9)
        else:
            assert s.name not in got
    assert len(set(brute)) == 3          # the systems differ


def test_results_rank_pareto_save_and_refusals(tmp_path):
    small = fr.SystemDesign(hardware.H100, 8, 50e9)
    fast_out = fr.SystemDesign(hardware.H100, 8, 400e9)
    a100 = fr.SystemDesign(hardware.A100, 8, 25e9, chip_power_w=400.0)
    opts = dict(tps=(1, 2), virtual_stages=(1,), sequence_parallel=(False,), zero=(1,), flash_attention=True,
                engine="megatron-core", precision=("fp8",))
    res = fr.codesign(MOE, [small, fast_out, a100], 16, 16, plan_options=opts,
                      cost=fr.CostModel(usd_per_kwh=0.1, lifetime_years=4))
    # the A100 has no FP8: reported, not raised
    a = [r for r in res.rows if r.system is a100][0]
    assert a.plan is None and "number formats" in a.reason
    front = res.pareto()
    assert all(r.plan is not None for r in front)
    for r in res.ranked():
        assert not any(o.tokens_per_s > r.tokens_per_s and o.tokens_per_joule > r.tokens_per_joule for o in front) \
            or r not in front
    assert res.best("tokens_per_usd") is None            # no system has a price
    p = tmp_path / "f.json"
    res.save(p)
    d = json.loads(p.read_text())
    assert len(d["rows"]) == 3 and d["rows"][2]["plan"] is None
    assert d["schema"] == "cosearch.codesign-results/1" and "cosearch_version" in d
    with pytest.raises(FileExistsError):
        res.save(p)
    with pytest.raises(ValueError, match="no systems"):
        fr.codesign(MOE, [], 16, 16)
    with pytest.raises(ValueError, match="unknown HBM"):
        fr.hbm_variant("B200", "hbm9", 8)
    with pytest.raises(ValueError, match="unknown fixed system"):
        fr.fixed_system("dgx-z9")


def test_budgets_refuse_by_hand():
    """GB200 with 8 HBM4 stacks: 1,460 W a chip, 72 a domain (105,120 W), +300 mm^2 of HBM PHY
    (8 TB/s more at 0.0375 mm^2 per GB/s)."""
    s = fr.system_space(fr.fixed_system("gb200-nvl72"), scale_up=(72,), scale_out_Bps=(50e9,),
                        hbm=(("hbm4-12h", 8),))[0]
    assert s.die_area_delta_mm2() == pytest.approx(8000 * 0.0375)
    opts = dict(tps=(1,), virtual_stages=(1,), sequence_parallel=(False,), zero=(1,), flash_attention=True,
                engine="megatron-core", precision=("fp8",))
    for kw, match in ((dict(chip_power_budget_w=1400), "chip power"), (dict(rack_power_budget_w=100_000), "rack power"),
                      (dict(die_area_budget_mm2=250), "die area")):
        r = fr.codesign(MOE, [s], 72, 72, plan_options=opts, **kw).rows[0]
        assert r.plan is None and match in r.reason
    r = fr.codesign(MOE, [s], 72, 72, plan_options=opts, chip_power_budget_w=1460.0, rack_power_budget_w=105_120,
                    die_area_budget_mm2=300).rows[0]
    assert r.plan is not None                      # exactly at every budget: kept


def test_reproduce_frontier_and_errors(tmp_path):
    """The table on a small case, rows saved; the fixed systems' errors from a validation folder
    of two published rows (B200 and GB200), each checked by hand against the library's check."""
    from cosearch import reproduce
    from cosearch.runs.check import check_runs
    systems = [fr.fixed_system("dgx-b200"), fr.fixed_system("gb200-nvl72")] + fr.system_space(
        fr.fixed_system("gb200-nvl72"), scale_up=(8, 72), scale_out_Bps=(50e9,))
    out = tmp_path / "f.json"
    rows = reproduce.frontier(("gpt3-1.3b",), (64,), systems=systems, out=out, echo=None)
    assert {r.objective for r in rows} == {"tokens_per_s", "tokens_per_joule", "tokens_per_usd"}
    per_usd = [r for r in rows if r.objective == "tokens_per_usd"][0]
    assert set(per_usd.gains) == {"dgx-b200", "gb200-nvl72"}            # only the priced systems
    best = [r for r in rows if r.objective == "tokens_per_s"][0]
    assert {"dgx-b200", "gb200-nvl72", "chip-only", "network-only"} <= set(best.gains)
    assert min(best.gains.values()) >= 1.0 - 1e-12 and "step seconds by term" in best.report
    assert json.loads(out.read_text())["rows"][0]["model"] == "gpt3-1.3b"
    # no system runs the model (its weights alone need more than 7 chips hold): a line says so,
    # with the reason, where there used to be no line at all; an empty model list is refused
    lines = []
    assert reproduce.frontier(("llama3-405b",), (7,), systems=systems[:2], echo=lines.append) == []
    assert len(lines) == 1 and lines[0].startswith("llama3-405b on 7 chips: no system of the 2 has a plan")
    assert "every plan needs at least" in lines[0]
    with pytest.raises(ValueError, match="at least one model and one chip count"):
        reproduce.frontier((), (64,), systems=systems)
    import pathlib
    src = pathlib.Path(__file__).resolve().parents[1] / "bench" / "validation" / "modern_runs.jsonl"
    if not src.is_file():
        pytest.skip("bench/validation is not in this checkout")
    keep = [line for line in src.read_text().splitlines()
            if '"id": "mbridge-25.11/LLAMA3_8B/B200/FP8-MX/8"' in line or '"id": "mbridge-25.11/LLAMA3_8B/GB200/FP8-MX/8"' in line]
    assert len(keep) == 2
    val = tmp_path / "val"
    val.mkdir()
    (val / "modern_runs.jsonl").write_text("\n".join(keep) + "\n")
    errs = reproduce.fixed_system_errors(val)
    by_id = {r.id: r.error for r in check_runs(val / "modern_runs.jsonl").runs}
    assert errs["dgx-b200"]["n"] == 1 and errs["dgx-b200"]["mae"] == pytest.approx(
        abs(by_id["mbridge-25.11/LLAMA3_8B/B200/FP8-MX/8"]))
    assert errs["gb200-nvl72"]["mean_signed"] == pytest.approx(by_id["mbridge-25.11/LLAMA3_8B/GB200/FP8-MX/8"])
    assert "dgx-h100" not in errs and reproduce.fixed_system_errors(tmp_path / "nope") == {}
    # the dense runs' step is GPU time: the subset is every run
    assert errs["dgx-b200"]["gpu_time"] == {k: errs["dgx-b200"][k] for k in ("n", "mae", "mean_signed")}
    # the TPU7x pod's: the Ironwood MaxText runs of ironwood/runs.csv (config-file CSV), every one
    import shutil
    (val / "ironwood").mkdir()
    shutil.copy(pathlib.Path(__file__).resolve().parent / "data" / "runs" / "maxtext_llama3_70b_tpu7x.args",
                val / "ironwood" / "l70.args")
    (val / "ironwood" / "runs.csv").write_text("id,group,config,cluster,chips,measured_tok_s_per_chip\n"
                                               "l70,MaxText TPU7x bf16,l70.args,tpu7x-pod,64,2686.98\n")
    tpu = reproduce.fixed_system_errors(val)["tpu7x-pod"]
    (one,) = check_runs(val / "ironwood" / "runs.csv").runs
    assert tpu["n"] == 1 and tpu["mean_signed"] == pytest.approx(one.error) and tpu["gpu_time"]["n"] == 1


def test_fixed_system_errors_split_off_moe_runs_launched_from_the_host(tmp_path):
    """An MoE run whose whole iteration is one CUDA graph counts in the GPU-time subset; the same
    model launched from the host (Transformer Engine's per-module graphs, or none) counts only
    in the whole: the subset's numbers are those of its runs alone."""
    import pathlib

    from cosearch import reproduce
    from cosearch.runs.check import check_runs
    src = pathlib.Path(__file__).resolve().parents[1] / "bench" / "validation" / "moe_runs.jsonl"
    if not src.is_file():
        pytest.skip("bench/validation is not in this checkout")
    want = ("mbridge-26.08/Qwen3_30B_a3B/GB200/FP8_MX/8/gbs512",        # whole iteration
            "mbridge-26.04.01/GPT_OSS_120B/GB200/BF16/64/gbs1280")     # no graphs
    keep = [line for line in src.read_text().splitlines() if any(f'"id": "{w}"' in line for w in want)]
    assert len(keep) == 2 and "cuda_graph=full_iteration" in next(x for x in keep if "Qwen3" in x)
    val = tmp_path / "val"
    val.mkdir()
    (val / "moe_runs.jsonl").write_text("\n".join(keep) + "\n")
    by_id = {r.id: r.error for r in check_runs(val / "moe_runs.jsonl").runs}
    e = reproduce.fixed_system_errors(val)["gb200-nvl72"]
    assert e["n"] == 2 and e["mae"] == pytest.approx((abs(by_id[want[0]]) + abs(by_id[want[1]])) / 2)
    assert e["gpu_time"]["n"] == 1 and e["gpu_time"]["mean_signed"] == pytest.approx(by_id[want[0]])


def test_cli_reproduce_frontier(tmp_path, capsys):
    from cosearch import cli
    out = tmp_path / "fr.json"
    assert cli.main(["reproduce", "frontier", "--models", "gpt3-1.3b", "--chip-counts", "64", "--out", str(out),
                     "--validation", str(tmp_path), "--plot", str(tmp_path / "fr")]) == 0
    text = capsys.readouterr().out
    assert "gain over" in text and "no published runs checked" in text and out.is_file()
    png = tmp_path / "fr-gpt3-1.3b-64.png"
    assert png.is_file() and png.read_bytes()[:4] == b"\x89PNG"
    assert cli.main(["reproduce", "frontier", "--models", "gpt3-1.3b", "--chip-counts", "64", "--out", str(out)]) == 2


def test_split_baselines_and_design_report():
    """Chip-only: the designs on the base's rack; network-only: the designs on the base's chip;
    the report's terms are the two plans' breakdowns and its power split adds up."""
    base = fr.SystemDesign(hardware.H100, 8, 50e9)
    systems = [fr.SystemDesign(hardware.H100, 8, 50e9, name="fixed", fixed=True)] + fr.system_space(
        base, scale_up=(4, 8), scale_out_Bps=(25e9, 50e9), hbm=(None, ("hbm3e-8h", 5)))
    opts = dict(tps=(1, 2), virtual_stages=(1,), sequence_parallel=(False,), zero=(1,), flash_attention=True,
                engine="megatron-core", precision=("fp8",))
    res = fr.codesign(MOE, systems, 16, 16, plan_options=opts)
    split = fr.split_baselines(res, base)
    chip_only = [r for r in res.ranked() if not r.system.fixed and (r.system.scale_up, r.system.scale_out_Bps) == (8, 50e9)]
    net_only = [r for r in res.ranked() if not r.system.fixed and r.system.chip.name == "H100"]
    assert split["chip-only"] is chip_only[0] and split["network-only"] is net_only[0]
    assert len(chip_only) == 2 and len(net_only) == 4
    w, x = res.best(), [r for r in res.rows if r.system.fixed][0]
    text = fr.design_report(res, w, x)
    for k, sec in w.plan.breakdown.items():
        if sec > 1e-6:
            assert f"{k:<14} {sec:9.3f} s" in text
    assert f"power per chip {w.power_w:.0f} W" in text and "chip power budget" in text
    with pytest.raises(ValueError, match="two systems with a plan"):
        fr.design_report(res, w, fr.SystemResult(base, None, 16, 700.0))


def test_tokens_per_dollar_at_an_hourly_price():
    """GB200 NVL72 at its published $2.21 per GPU-hour: tokens/s x 3,600 / (2.21 x chips); a design
    derived from it is not that product and carries no hourly price.  SemiAnalysis's owning-cost
    rates (InferenceX-app GPU_SPECS costh): H100 $1.30, B200 $1.95; B300 and GB300 have placeholder
    rates there, so no price."""
    g = fr.fixed_system("gb200-nvl72")
    assert g.usd_per_hour == pytest.approx(2.21) and fr.fixed_system("dgx-b200").usd_per_hour == pytest.approx(1.95)
    assert fr.fixed_system("dgx-h100").usd_per_hour == pytest.approx(1.30)
    assert fr.fixed_system("gb300-nvl72").usd_per_hour is None and fr.fixed_system("dgx-b300").usd_per_hour is None
    assert all(s.usd_per_hour is None for s in fr.system_space(g, scale_up=(8,), scale_out_Bps=(50e9,)))
    opts = dict(tps=(1,), virtual_stages=(1,), sequence_parallel=(False,), zero=(1,), flash_attention=True,
                engine="megatron-core", precision=("fp8",))
    r = fr.codesign(MOE, [g], 64, 64, plan_options=opts).rows[0]
    assert r.tokens_per_usd == pytest.approx(r.tokens_per_s * 3600 / (2.21 * 64))
    with pytest.raises(ValueError, match="usd_per_hour"):
        fr.SystemDesign(hardware.GB200, 72, 50e9, usd_per_hour=-1.0)


def test_cosearch_cli_takes_the_rack_and_the_engine(tmp_path, capsys):
    """`cosearch search --scale-up 8 --scale-out-gbps 25 --engine megatron-core`: the saved result
    says the cluster and engine it was searched on; half a rack pair is refused."""
    from cosearch import cli
    from cosearch.results import Results
    out = tmp_path / "s.json"
    assert cli.main(["search", "--model", "gpt3-1.3b", "--chips", "64", "--batch", "64", "--scale-up", "8",
                     "--scale-out-gbps", "25", "--engine", "megatron-core", "--refine-top", "0", "--serial",
                     "--out", str(out)]) == 0
    r = Results.from_json(out)
    assert r.meta["cluster"]["chips_per_node"] == 8 and r.meta["cluster"]["inter_node_Bps"] == pytest.approx(25e9)
    assert r.meta["plan_options"]["engine"] == "megatron-core"
    assert cli.main(["search", "--model", "gpt3-1.3b", "--chips", "64", "--scale-up", "8", "--out",
                     str(tmp_path / "t.json")]) == 2
    assert "go together" in capsys.readouterr().err


def test_torus_designs_by_hand_and_against_the_pod_preset():
    """A torus design of the pod preset's side and links is that pod (the same network, the same
    best plan); its SerDes area grows by ports x the link change (hand-worked at the area model's
    mm^2 per GB/s); a GPU chip on a torus draws ports x the link change at the link energy; a
    TPU has no rated power; a torus and a slice preset together, or ports without a torus, are
    refused."""
    from cosearch import cluster
    from cosearch.hardware import AreaPowerModel
    pod = fr.fixed_system("tpuv5p-pod")
    same, fast = fr.system_space(pod, torus_side=(8,), scale_up_Bps=(None, 200e9))
    assert np.array_equal(same.cluster(512).net_array(pod.chip), cluster.tpuv5p_pod(512).net_array(pod.chip))
    opts = dict(tps=(1, 2), virtual_stages=(1,), sequence_parallel=(True,), zero=(3,), flash_attention=True,
                engine="maxtext", precision=("bf16",))
    a, b = fr.codesign(MOE, [pod, same], 64, 64, plan_options=opts).rows
    assert a.plan.step_time_s == pytest.approx(b.plan.step_time_s, rel=1e-12)
    ap = AreaPowerModel()
    assert fast.die_area_parts_mm2(ap)["SerDes"] == pytest.approx(6 * 100 * ap.link_area_mm2_per_gbps)
    assert fast.power_parts_w(ap) is None
    gpu = fr.SystemDesign(hardware.H100, 1, 50e9, scale_up_Bps=100e9, torus_side=4, torus_ports=4)
    up = gpu.power_parts_w(ap)["scale-up"]
    assert up == pytest.approx(4 * (100e9 - hardware.H100.link_bandwidth_Bps) * 2 * 8 * ap.link_energy_j_per_bit)
    assert gpu.power_parts_w(ap)["scale-out"] == 0.0 and gpu.cluster(64).torus_side == 4
    with pytest.raises(ValueError, match="not both"):
        fr.SystemDesign(hardware.TPUv5p, 1, 50e9, torus_side=8, cluster_preset="tpuv5p-pod")
    with pytest.raises(ValueError, match="needs torus_side"):
        fr.SystemDesign(hardware.H100, 8, 50e9, torus_ports=6)
    # found by fuzzing SystemDesign: a name, base or preset that is not a string raised a TypeError
    for f, x in (("name", 8), ("cluster_preset", ["gb200-nvl72"]), ("base", 1.5), ("fixed", "yes")):
        with pytest.raises(ValueError, match=f"SystemDesign.{f} must be"):
            fr.SystemDesign(hardware.H100, 8, 50e9, **{f: x})


def test_a_rating_or_price_below_the_base_chips_own_parts_is_refused_not_priced_negative():
    """The power and capex deltas remove the base chip's own HBM and link power and price: a
    chip_power_w or chip_usd below them priced a design at negative watts and dollars, and
    codesign ranked it by a negative tokens per joule (found by fuzzing codesign)."""
    slow = hardware.B200.with_(name="B200-slow-HBM", hbm_bandwidth_Bps=0.1e12)
    # by hand: 1,000 W rated; HBM (0.1 - 8) TB/s x 8 bit x 4 pJ/bit = -252.8 W; 50 GB/s out both ways
    # x 8 bit x 5 pJ/bit = +4 W.  B200's own HBM draws 256 W and its 900 GB/s links 72 W.
    assert fr.SystemDesign(slow, 8, 50e9, base="B200").power_w() == pytest.approx(1000 - 252.8 + 4)
    low = fr.SystemDesign(slow, 8, 50e9, base="B200", chip_power_w=60.0)
    with pytest.raises(ValueError, match=r"chip_power_w = 60 W is less than what B200's own HBM draw \(256 W\) "
                                         r"and scale-up links draw \(72 W\)"):
        low.power_w()
    with pytest.raises(ValueError, match="chip_power_w = 60 W"):
        fr.codesign("llama2-7b", [low], 8, 64)
    assert fr.SystemDesign(slow, 8, 50e9, base="B200", chip_power_w=328.0).power_w() == pytest.approx(328 - 252.8 + 4)
    cm = fr.CostModel(usd_per_kwh=0.1, lifetime_years=4, hbm_usd_per_gb=100.0)
    small = fr.SystemDesign(hardware.B200.with_(hbm_bytes=1e9), 8, 50e9, base="B200", chip_usd=1000.0)
    with pytest.raises(ValueError, match=r"chip_usd = 1,000 is less than this cost model's price of B200's own "
                                         r"HBM \(18,000\)"):
        cm.usd_per_chip(small, 1000.0)
    # at the smallest capex the model allows, the HBM-less slot costs its energy and nothing else
    edge = fr.SystemDesign(hardware.B200.with_(hbm_bytes=0.0 + 1.0), 8, 50e9, base="B200", chip_usd=18_000.0)
    assert cm.usd_per_chip(edge, 1000.0) == pytest.approx(1e-9 * 100 + 1.0 * 4 * 365.25 * 24 * 0.1)


@pytest.mark.parametrize("kw,message", [
    (dict(area_power="x"), "area_power must be an AreaPowerModel, got str"),
    (dict(plan_options="x"), "plan_options must be a dict of search_plans' options, got str"),
    (dict(plan_options={"zeros": (1,)}), r"unknown plan option\(s\) \['zeros'\]; search_plans takes"),
    (dict(progress="x"), "progress must be True or False"),
])
def test_codesign_refuses_bad_arguments_before_any_system(kw, message):
    """A wrong area model, plan options that are no dict or name no option, and a non-boolean
    progress switch are refused by name before the first system is priced (an AttributeError
    from inside, or a switch read as on, before)."""
    systems = [fr.SystemDesign(hardware.H100, 8, 50e9, name="dgx")]
    with pytest.raises(ValueError, match=message):
        fr.codesign("gpt3-1.3b", systems, 16, 16, **kw)
    # one system may come bare (a TypeError, 'SystemDesign' object is not iterable, before)
    with pytest.raises(ValueError, match=message):
        fr.codesign("gpt3-1.3b", systems[0], 16, 16, **kw)


@pytest.mark.parametrize("kw,message", [
    (dict(base="gb200"), "base must be a SystemDesign, got str"),
    (dict(scale_up=72), "scale_up must be a list of values, got 72"),
    (dict(hbm=["hbm4-12h"]), r"each hbm entry is None \(the base chip's\) or a \(stack name, stacks\) pair"),
    (dict(scale_up=[]), "scale_up lists no value, so no design would be made"),
])
def test_system_space_refuses_what_makes_no_design(kw, message):
    """A base that is no system, a bare number or an HBM name where lists are wanted, and an
    empty list (no design at all, found only when codesign had no systems) are refused by name;
    a numpy array is a list, and a torus space needs no switched-domain lists."""
    base = fr.fixed_system("gb200-nvl72")
    with pytest.raises(ValueError, match=message):
        fr.system_space(**{"base": base, **kw})
    assert len(fr.system_space(base, scale_up=np.array([8, 72]), scale_out_Bps=[50e9])) == 2
    assert len(fr.system_space(base, scale_up=[], scale_out_Bps=[], torus_side=[4, 8])) == 2


def test_frontier_table_checks_its_arguments_before_any_run():
    """One model, chip count or objective may be given bare (a string was read as its letters:
    "unknown model preset 'g'"); a zero chip count anywhere in the list, an unknown objective,
    a non-positive batch per chip and an echo that is no function are refused before the first
    run (they failed after it, or never)."""
    from cosearch import reproduce
    sy = [fr.fixed_system("dgx-h100")]
    quiet = []
    rows = reproduce.frontier("gpt3-1.3b", 16, objectives="tokens_per_s", systems=sy, echo=quiet.append)
    assert [r.objective for r in rows] == ["tokens_per_s"] and rows[0].model == "gpt3-1.3b"
    for kw, message in ((dict(chip_counts=[16, 0]), "chip_counts must be a positive integer, got 0"),
                        (dict(objectives=("tokens", "tokens_per_s")), "objective='tokens'; choose one of"),
                        (dict(batch_per_chip=0), "batch_per_chip must be a positive finite number"),
                        (dict(echo="print"), "echo must be a function taking a line, or None")):
        args = {"chip_counts": [16], **kw}
        with pytest.raises(ValueError, match=message):
            reproduce.frontier(["gpt3-1.3b"], systems=sy, **args)
