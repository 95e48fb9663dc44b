"""Number formats as tensor-unit features of a searched design (``fp8_macs``, ``fp4_macs``): their
area and power, its roofline rate, and the co-search over designs and precisions, each checked against
a hand-worked figure or a brute force that shares none of the search's code."""

import json
import math

import numpy as np
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from cosearch import cluster, cost, graph, hardware, memory, placement, search
from cosearch.hardware import GiB, MiB
from cosearch.plan import evaluate
from tests.test_modern_plans import TINY, two_layer_plan_specs

# Horowitz, ISSCC 2014 (45 nm): multiply + add area (um^2) and energy (pJ) of 8-bit integers and
# 16-bit floats; van Baalen et al. 2023: an FP8 MAC costs 1.5-2.8x an INT8 one (the middle: 2.15x)
INT8_MAC_UM2, FP16_MAC_UM2 = 282 + 36, 1640 + 1360
INT8_MAC_PJ, FP16_MAC_PJ = 0.2 + 0.03, 1.1 + 0.4
FP8_OVER_INT8 = (1.5 + 2.8) / 2
# an FP4 MAC: at most an FP8 MAC, plus one 16-bit float MAC per NVFP4 block of 16 for its scale
FP4_AREA = FP8_OVER_INT8 * INT8_MAC_UM2 / FP16_MAC_UM2 + 1 / 16
FP4_ENERGY = FP8_OVER_INT8 * INT8_MAC_PJ / FP16_MAC_PJ + 1 / 16


def _design(cores=4, rows=128, cols=128, fp8=0.0, clock=1.0e9, fp4=0.0):
    return hardware.Accelerator("d", cores, rows, cols, 2, 512, clock, 4 * MiB, 64 * MiB, 32 * GiB, 1.2e12, 3e11,
                                fp8_macs=fp8, fp4_macs=fp4)


def _e2m1_values():
    """Every finite E2M1 value, decoded from its 4 bits (sign, 2 exponent bits with bias 1, 1
    mantissa bit; exponent 0 is subnormal), as the OCP MX specification v1.0 defines it."""
    out = set()
    for bits in range(16):
        sign, e, mant = bits >> 3, (bits >> 1) & 3, bits & 1
        mag = (mant / 2) if e == 0 else 2.0 ** (e - 1) * (1 + mant / 2)
        out.add(-mag if sign else mag)
    return out


def test_fp4_mac_upper_bound_rests_on_e2m1_values_being_e4m3_values():
    """The FP4 MAC's area and energy bound: an FP8 MAC computes every FP4 product exactly because
    each E2M1 value survives a round trip through torch's E4M3 (float8_e4m3fn) unchanged; the
    block scale adds one 16-bit float MAC per 16 products."""
    import torch
    vals = sorted(_e2m1_values())
    assert vals == [-6, -4, -3, -2, -1.5, -1, -0.5, 0, 0.5, 1, 1.5, 2, 3, 4, 6]
    x = torch.tensor(vals, dtype=torch.float32)
    assert torch.equal(x.to(torch.float8_e4m3fn).to(torch.float32), x)
    # so is every product of two E2M1 values (an FP8 multiplier's output, before accumulation)
    prods = torch.tensor(sorted({a * b for a in vals for b in vals}), dtype=torch.float32)
    assert torch.equal(prods.to(torch.float8_e4m3fn).to(torch.float32), prods)
    ap = hardware.AreaPowerModel()
    assert ap.fp4_mac_area_fraction == pytest.approx(FP4_AREA, rel=1e-12)
    assert ap.fp4_mac_energy_fraction == pytest.approx(FP4_ENERGY, rel=1e-12)


def test_fp8_mac_area_and_energy_follow_the_cited_figures():
    ap = hardware.AreaPowerModel()
    assert ap.fp8_mac_area_fraction == pytest.approx(FP8_OVER_INT8 * INT8_MAC_UM2 / FP16_MAC_UM2, rel=1e-12)
    assert ap.fp8_mac_energy_fraction == pytest.approx(FP8_OVER_INT8 * INT8_MAC_PJ / FP16_MAC_PJ, rel=1e-12)
    # the ends of van Baalen's range bracket the defaults
    assert 1.5 * INT8_MAC_UM2 / FP16_MAC_UM2 < ap.fp8_mac_area_fraction < 2.8 * INT8_MAC_UM2 / FP16_MAC_UM2



@pytest.mark.parametrize("field", ["fp8_mac_area_fraction", "fp8_mac_energy_fraction", "fp4_mac_area_fraction",
                                   "fp4_mac_energy_fraction"])
def test_a_mac_fraction_above_one_is_refused(field):
    """An FP8 or FP4 MAC beside a bf16 one costs a fraction of it: 1 is accepted (the bound), a
    fraction beyond it (a unit slip: 22.8 for 0.228) is refused by name."""
    assert getattr(hardware.AreaPowerModel(**{field: 1.0}), field) == 1.0
    with pytest.raises(ValueError, match=f"AreaPowerModel.{field}=22.8: .* at most 1"):
        hardware.AreaPowerModel(**{field: 22.8})

def test_fp8_macs_cost_pe_area_and_power_by_hand():
    ap = hardware.AreaPowerModel()
    bf16, fp8x2, fp8x4 = _design(), _design(fp8=2), _design(fp8=4)
    pes = 4 * 128 * 128
    base = ap.die_components_mm2(bf16.as_array()[None])
    for chip, n in ((fp8x2, 2), (fp8x4, 4)):
        parts = ap.die_components_mm2(chip.as_array()[None])
        # each PE: its bf16 MAC (7.5e-4 mm^2) and n FP8 MACs at 0.2279 of it
        assert parts["PE arrays"][0] == pytest.approx(pes * 7.5e-4 * (1 + n * 2.15 * 318 / 3000), rel=1e-12)
        for k in parts:
            if k != "PE arrays":
                assert parts[k][0] == base[k][0]
    # power at full use: the costlier format. 2 FP8 MACs at 0.3297 of a bf16 MAC's energy draw
    # less than the bf16 MAC (no change); 4 draw 1.319x its power
    pe_w = pes * 1.0e9 * 0.5e-12
    assert fp8x2.power_w(ap) == pytest.approx(bf16.power_w(ap), rel=1e-12)
    assert fp8x4.power_w(ap) - bf16.power_w(ap) == pytest.approx(pe_w * (4 * 2.15 * 0.23 / 1.5 - 1), rel=1e-9)
    # PHAZE's own area model adds the same fraction of its PE figure; a bf16 design is unchanged
    ph = hardware.PhazeAreaModel()
    from cosearch import phaze_area as pa
    assert ph.area_mm2(fp8x2.as_array()[None])[0] - ph.area_mm2(bf16.as_array()[None])[0] == pytest.approx(
        pes * 2 * 2.15 * 318 / 3000 * pa.PHAZE_PE_UM2 * 1e-6, rel=1e-9)


def test_fp4_macs_cost_pe_area_and_power_by_hand():
    """2 FP8 and 4 FP4 MACs beside each bf16 one, as B200's datasheet ratios (FP8 2x, FP4 4x
    BF16): each PE is 1 + 2 x 0.2279 + 4 x 0.2904 bf16 PEs; at full use it draws its costliest
    format's power, the FP4 MACs' 4 x 0.3922 = 1.569 bf16 MACs."""
    ap = hardware.AreaPowerModel()
    pes, pe_w = 4 * 128 * 128, 4 * 128 * 128 * 1.0e9 * 0.5e-12
    bf16, both = _design(), _design(fp8=2, fp4=4)
    fp8_area = FP8_OVER_INT8 * INT8_MAC_UM2 / FP16_MAC_UM2
    assert ap.die_components_mm2(both.as_array()[None])["PE arrays"][0] == pytest.approx(
        pes * 7.5e-4 * (1 + 2 * fp8_area + 4 * FP4_AREA), rel=1e-12)
    assert both.power_w(ap) - bf16.power_w(ap) == pytest.approx(pe_w * (4 * FP4_ENERGY - 1), rel=1e-9)
    # one FP4 MAC draws less than the bf16 MAC: no change in power, only in area
    assert _design(fp4=1).power_w(ap) == pytest.approx(bf16.power_w(ap), rel=1e-12)
    # the fields study the shared-datapath end (DHFP-PE): free FP4 MACs cost nothing
    free = hardware.AreaPowerModel(fp4_mac_area_fraction=0.0, fp4_mac_energy_fraction=0.0)
    assert free.area_mm2(_design(fp4=4).as_array()[None])[0] == pytest.approx(
        free.area_mm2(bf16.as_array()[None])[0], rel=1e-12)
    assert both.supports_fp4 and not _design(fp8=2).supports_fp4


def test_an_fp4_gemm_runs_at_the_tensor_units_fp4_rate():
    """A compute-bound GEMM on NVFP4 operands: a quarter of the bf16 cycles with 4 FP4 MACs per
    PE (the closed form of the FP8 test); it cannot run without FP4 MACs, FP8 MACs alone
    included; a chip's measured FP4 rate wins over its design field."""
    m, n, k = 8192, 4096, 4096
    tiles = math.ceil(k / 128) * math.ceil(n / 128)
    bf16_s = math.ceil(tiles / 4) * (m + 128 + 128 - 2) / 1.0e9
    ops = np.array([[0, m, n, k, 1, 0, 0, 0, 0, 0.5625, 0]], dtype=float)     # one NVFP4 GEMM
    for backend in ("numba", "numpy"):
        assert cost.price(ops, _design(fp4=4), backend=backend)[0, 0] == pytest.approx(bf16_s / 4, rel=1e-12)
        assert cost.price(ops, _design(fp8=2), backend=backend)[0, 0] == math.inf
        eff = hardware.KernelEfficiency(fp4_rate=3.0)
        assert cost.price(ops, _design(fp4=4).with_(efficiency=eff), backend=backend)[0, 0] == pytest.approx(
            bf16_s / 3.0, rel=1e-12)


def test_an_fp8_gemm_runs_at_the_tensor_units_fp8_rate():
    """A compute-bound GEMM on FP8 operands: half the bf16 cycles with 2 FP8 MACs per PE (closed
    form: ``waves (M + R + C - 2) / clock / 2``); it cannot run on a bf16-only unit; a chip's own
    measured FP8 rate wins over its design field."""
    m, n, k = 8192, 4096, 4096
    chip = _design(fp8=2)
    tiles = math.ceil(k / 128) * math.ceil(n / 128)
    bf16_s = math.ceil(tiles / 4) * (m + 128 + 128 - 2) / 1.0e9
    ops = np.array([[0, m, n, k, 1, 0, 0, 0, 0, 1.0, 0]], dtype=float)     # one FP8 GEMM
    for backend in ("numba", "numpy"):
        assert cost.price(ops, chip, backend=backend)[0, 0] == pytest.approx(bf16_s / 2, rel=1e-12)
        assert cost.price(ops, _design(fp8=0), backend=backend)[0, 0] == math.inf
        eff = hardware.KernelEfficiency(fp8_rate=1.6)
        assert cost.price(ops, chip.with_(efficiency=eff), backend=backend)[0, 0] == pytest.approx(bf16_s / 1.6,
                                                                                                 rel=1e-12)
    assert chip.supports_fp8 and not _design().supports_fp8


def test_work_bound_stays_below_the_fp8_layer():
    """The ILP screen's work bound must stay a lower bound when FP8 GEMMs run faster."""
    from cosearch.schedule.bounds import work_bounds
    chips = [_design(fp8=2), _design(cores=2, rows=64, cols=64, fp8=3)]
    d = hardware.design_array(chips)
    layer = graph.build(TINY.with_(hidden=1024, heads=8, kv_heads=8, ffn_hidden=4096, seq_len=1024), 1, 2,
                        precision="fp8", flash_attention=True)
    ops = layer.arrays()
    lb = work_bounds(layer, d)
    serial = cost.price(ops, d).sum(axis=1)
    assert np.all(lb <= serial * (1 + 1e-12)) and np.all(lb > 0)
    bf16_lb = work_bounds(layer, hardware.design_array([c.with_(fp8_macs=0.0) for c in chips]))
    assert np.all(np.isinf(bf16_lb))         # a bf16-only unit cannot run the FP8 layer at all


def test_design_arrays_written_before_the_fields_read_as_bf16():
    F = hardware.DESIGN_FIELDS
    f8, f4 = F.index("fp8_macs"), F.index("fp4_macs")
    row = _design(fp8=2, fp4=4).as_array()
    assert (row[f8], row[f4]) == (2.0, 4.0)
    for cut, want in ((1, (2.0, 0.0)), (2, (0.0, 0.0))):     # written before fp4_macs / before fp8_macs
        arr = hardware.design_array(row[:-cut])
        assert arr.shape == (1, len(F)) and (arr[0, f8], arr[0, f4]) == want
    assert hardware.Accelerator.from_array(row[:-3]).fp8_macs == 0.0
    assert hardware.Accelerator.from_array(row[:-1]).fp4_macs == 0.0
    chip = hardware.Accelerator.from_array(row)
    assert (chip.fp8_macs, chip.fp4_macs) == (2.0, 4.0)
    for col, name, bad in ((f8, "fp8_macs", (-1.0, 40.0)), (f4, "fp4_macs", (-1.0, 40.0))):
        for x in bad:
            r = row.copy()
            r[col] = x
            with pytest.raises(ValueError, match=name):
                hardware.design_array(r)
    for kw in (dict(fp8=-1), dict(fp4=-1), dict(fp4=33), dict(fp4="4"), dict(fp8="2"), dict(fp4=True)):
        with pytest.raises(ValueError, match="fp4_macs" if "fp4" in kw else "fp8_macs"):
            _design(**kw)
    for name in ("fp8_macs", "fp4_macs"):
        with pytest.raises(ValueError, match=name):
            hardware.SearchSpace(**{name: (0, "two")})


SPACE = dict(tensor_cores=(2, 4), systolic_dims=((32, 32), (64, 64)), vector_units=(2,), vector_width=(256,),
             l1_bytes=(1 * MiB,), l2_bytes=(16 * MiB,), hbm=((1 * GiB, 1.2e12),), fp8_macs=(0, 2),
             link_bandwidth_Bps=(5e10,), area_budget_mm2=1e4, power_budget_w=1e4)
F8, F4 = hardware.DESIGN_FIELDS.index("fp8_macs"), hardware.DESIGN_FIELDS.index("fp4_macs")


def test_cosearch_over_formats_equals_brute_force():
    """Designs with and without FP8 and FP4 units, plans in bf16, FP8 and FP4: the co-search's
    top 2 (serial layer times) equal the best of every plan of every design through evaluate(),
    each design in the precisions its tensor unit has; a design never gets a plan in a format
    it has no MACs for."""
    sp = hardware.SearchSpace(**dict(SPACE, fp4_macs=(0, 4)))
    designs = sp.arrays()
    assert sorted(set(designs[:, F8])) == [0.0, 2.0] and sorted(set(designs[:, F4])) == [0.0, 4.0]
    m = TINY.with_(seq_len=256)
    cl, batch = cluster.Cluster(4, 2, 5e9, 1e9), 4
    opts = dict(search.DEFAULT_PLAN_OPTIONS, flash_attention=True, precision=("bf16", "fp8", "fp4"), zero=(0, 1),
                sequence_parallel=(False,), virtual_stages=(1,))
    res = search.cosearch(m, sp, cl, batch, "serial", tps=(1, 2), plan_options=opts, refine_top=0)
    best_of = {}
    for i, row in enumerate(designs):
        chip = hardware.Accelerator.from_array(row)
        precs = ("bf16",) + (("fp8",) if row[F8] > 0 else ()) + (("fp4",) if row[F4] > 0 else ())
        steps = [p.step_time_s for spec in two_layer_plan_specs(batch, cl.num_chips, (1,), (0, 1), precs)
                 if (p := evaluate(m, chip, cl, spec, batch, mem=memory.MemoryConfig())).feasible]
        best_of[i] = min(steps)
    want = sorted(best_of.values())[:2]
    got = sorted(r.plan.step_time_s for r in res.feasible)[:2]
    assert got == pytest.approx(want, rel=1e-9)
    for prec, field_name in (("fp8", "fp8_macs"), ("fp4", "fp4_macs")):
        won = [r for r in res.feasible if r.plan.spec.precision == prec]
        assert won and all(r.design[field_name] > 0 for r in won)
    assert [c["precision"] for c in res.meta["combinations"]] == ["bf16", "fp8", "fp4"]


def test_cosearch_refuses_formats_it_cannot_price():
    sp = hardware.SearchSpace(**dict(SPACE, fp8_macs=(0,)))
    m = TINY.with_(seq_len=256)
    for prec, match in (("fp8", "no design of the search space has FP8"),
                        ("fp4", "no design of the search space has FP4 tensor units; give the space "
                                "SearchSpace\\(fp4_macs=\\(0, 4\\)\\)")):
        opts = dict(search.DEFAULT_PLAN_OPTIONS, flash_attention=True, precision=prec)
        with pytest.raises(ValueError, match=match):
            search.cosearch(m, sp, cluster.Cluster(4), 4, "serial", plan_options=opts)
    with pytest.raises(ValueError, match="one precision"):
        placement.check_cosearch_options({"precision": ("bf16", "fp8")})
    # FP8 MACs listed, but none fits the budget: the budget is named
    tight = hardware.SearchSpace(tensor_cores=(4,), systolic_dims=((128, 128),), vector_units=(4,),
                                 vector_width=(512,), l1_bytes=(4 * MiB,), l2_bytes=(64 * MiB,), fp8_macs=(0, 16))
    assert not (tight.arrays()[:, F8] > 0).any()
    with pytest.raises(ValueError, match="no design with FP8 MACs fits the space's area budget"):
        search.cosearch(m, tight, cluster.Cluster(4), 4, "serial",
                        plan_options=dict(search.DEFAULT_PLAN_OPTIONS, flash_attention=True, precision="fp8"))


def test_fixed_chip_baseline_searches_the_formats_it_has():
    """TPUv4 has no FP8: a co-search over bf16 and FP8 runs its baseline in bf16 alone."""
    opts = {"precision": ("bf16", "fp8"), "zero": (0,)}
    assert placement.chip_formats(hardware.TPUv4, opts)["precision"] == ("bf16",)
    assert placement.chip_formats(hardware.H100, opts)["precision"] == ("bf16", "fp8")
    with pytest.raises(ValueError, match="no FP8"):
        placement.chip_formats(hardware.TPUv4, {"precision": ("fp8",)})


def test_a_baseline_without_the_searched_format_is_reported_not_raised():
    """A co-search in FP4 alone with baselines: TPUv4 has no FP4 tensor cores, so its baseline
    has no plan and says why (it raised after the search had finished); the chip-only baseline
    is a design of the space with FP4 MACs, trained in FP4."""
    from cosearch import baselines, report
    sp = hardware.SearchSpace(**dict(SPACE, fp8_macs=(0,), fp4_macs=(0, 4)))
    m = TINY.with_(seq_len=256)
    opts = dict(search.DEFAULT_PLAN_OPTIONS, flash_attention=True, precision="fp4", zero=(0,),
                sequence_parallel=(False,), virtual_stages=(1,))
    out = baselines.run_baselines(m, sp, cluster.Cluster(4, 2, 5e9, 1e9), 4, tps=(1,), refine=False,
                                  plan_options=opts)
    assert out["TPUv4"]["plan"] is None and "no NVFP4 tensor cores" in out["TPUv4"]["reason"]
    assert out["Spotlight"]["plan"]["spec"]["precision"] == "fp4" and out["Spotlight"]["design"]["fp4_macs"] == 4
    res = search.cosearch(m, sp, cluster.Cluster(4, 2, 5e9, 1e9), 4, "serial", tps=(1,), plan_options=opts,
                          refine_top=0)
    res.baselines = out
    line = next(x for x in report.table(res).splitlines() if x.startswith("baseline TPUv4"))
    assert line.startswith("baseline TPUv4: 0 tok/s (fixed TPUv4 chip + plan search")
    assert "; no plan: precision='fp4': chip TPUv4 has no NVFP4 tensor cores" in line


def test_cli_searches_formats_and_shows_them(tmp_path, capsys):
    from cosearch.cli import main
    space = tmp_path / "space.json"
    space.write_text(json.dumps({**{k: v for k, v in SPACE.items() if k != "fp8_macs"}, "hbm": [[16 * GiB, 1.2e12]]}))
    out = tmp_path / "r.json"
    main(["search", "--model", "gpt3-1.3b", "--seq-len", "512", "--chips", "8", "--batch", "8", "--serial",
          "--space", str(space), "--precision", "bf16,fp8,fp4", "--fp8-macs", "0,2", "--fp4-macs", "0,4",
          "--refine-top", "0", "--out", str(out)])
    text = capsys.readouterr().out
    headers = [line.split()[:8] for line in text.splitlines() if line.startswith("rank")]
    assert headers and all(h == ["rank", "design", "n", "cores", "array", "fp8", "fp4", "vec"] for h in headers)
    saved = search.Results.from_json(out)
    assert {r.design["fp8_macs"] for r in saved.rows} <= {0.0, 2.0}
    assert {r.design["fp4_macs"] for r in saved.rows} <= {0.0, 4.0}
    best = saved.best.accelerator()
    assert (best.fp8_macs, best.fp4_macs) == (saved.best.design["fp8_macs"], saved.best.design["fp4_macs"])
    for flag in ("--fp8-macs", "--fp4-macs"):
        assert main(["search", "--model", "gpt3-1.3b", "--chips", "8", "--batch", "8", flag, "two"]) != 0
        assert f"{flag} must list numbers" in capsys.readouterr().err


def test_design_report_names_the_fp8_macs_area():
    from cosearch.design_report import design_report
    chip = _design(fp8=2)
    rep = design_report(chip)
    assert rep.fp8_area_mm2 == pytest.approx(4 * 128 * 128 * 7.5e-4 * 2 * 2.15 * 318 / 3000, rel=1e-9)
    assert "2 FP8 MACs a cycle" in rep.describe()
    assert "FP8" not in design_report(_design()).describe()
    rep = design_report(_design(fp8=2, fp4=4))
    assert rep.fp4_area_mm2 == pytest.approx(4 * 128 * 128 * 7.5e-4 * 4 * FP4_AREA, rel=1e-9)
    assert "4 FP4 MACs a cycle" in rep.describe() and "2 FP8 MACs a cycle" in rep.describe()


@settings(max_examples=12, deadline=None)
@given(cores=st.lists(st.sampled_from([1, 2, 4]), min_size=1, max_size=2, unique=True),
       f8=st.lists(st.sampled_from([0.0, 1.0, 2.0, 3.0]), min_size=1, max_size=3, unique=True),
       f4=st.lists(st.sampled_from([0.0, 2.0, 4.0]), min_size=1, max_size=2, unique=True),
       precs=st.lists(st.sampled_from(["bf16", "fp8", "fp4"]), min_size=1, max_size=3, unique=True),
       budget=st.sampled_from([None, 1e4]))
def test_any_formats_search_returns_honest_rows_or_refuses_by_name(cores, f8, f4, precs, budget):
    """Random spaces, FP8 and FP4 MAC lists, precisions and budgets: the co-search returns rows
    whose FP8 / FP4 plans sit only on designs with those MACs, each plan's step what evaluate()
    gives that chip, or refuses with a ValueError naming what is missing (never another error)."""
    sp_kw = dict(SPACE, tensor_cores=tuple(cores), fp8_macs=tuple(f8), fp4_macs=tuple(f4))
    if budget is None:
        sp_kw.update(area_budget_mm2=None, power_budget_w=None)
    m = TINY.with_(seq_len=256)
    cl = cluster.Cluster(4, 2, 5e9, 1e9)
    opts = dict(search.DEFAULT_PLAN_OPTIONS, flash_attention=True, precision=tuple(precs))
    try:
        sp = hardware.SearchSpace(**sp_kw)
        res = search.cosearch(m, sp, cl, 4, "serial", tps=(1, 2), plan_options=opts, refine_top=0)
    except ValueError as e:
        event("refused")
        assert any(w in str(e) for w in ("FP4", "FP8", "fp8", "no design", "budget")), str(e)
        return
    event("searched")
    designs = sp.arrays()
    for r in res.feasible:
        chip = hardware.Accelerator.from_array(designs[r.index])
        assert r.plan.spec.precision in precs
        if r.plan.spec.precision == "fp8":
            assert chip.fp8_macs > 0
        if r.plan.spec.precision == "fp4":
            assert chip.fp4_macs > 0
        p = evaluate(m, chip, cl, r.plan.spec, 4, mem=memory.MemoryConfig())
        assert p.step_time_s == pytest.approx(r.plan.step_time_s, rel=1e-9)
