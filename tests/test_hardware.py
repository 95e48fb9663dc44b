import numpy as np
import pytest

from cosearch import cluster, hardware


@pytest.mark.parametrize("chip,tflops", [(hardware.TPUv4, 275), (hardware.A100, 312), (hardware.H100, 989)])
def test_preset_peak_matches_published(chip, tflops):
    assert chip.peak_flops / 1e12 == pytest.approx(tflops, rel=0.01)


def test_preset_lookup():
    assert hardware.preset("h100") is hardware.H100
    with pytest.raises(ValueError, match="TPUv4"):
        hardware.preset("tpu9")


def test_accelerator_validation_names_field():
    with pytest.raises(ValueError, match="systolic_rows"):
        hardware.TPUv4.with_(systolic_rows=0)
    with pytest.raises(ValueError, match="hbm_bandwidth_Bps"):
        hardware.TPUv4.with_(hbm_bandwidth_Bps=-1.0)


@pytest.mark.parametrize("field, value, message", [
    # integers beyond int64 (a chip JSON's 1180591620717411303424): np.isfinite raised a TypeError
    ("systolic_rows", 2**70, "systolic_rows=an integer of 22 digits is larger than the supported maximum 16,777,216"),
    ("l2_bytes", 2**70, None),                                     # a number, if an absurd one: accepted
    ("hbm_bytes", 10**400, "chip.json.*an integer of 401 digits"),
    ("tensor_cores", 1.5, "tensor_cores must be a positive integer"),
], ids=["rows-2^70", "l2-2^70", "hbm-10^400", "cores-1.5"])
def test_chip_json_numbers_beyond_a_float_or_a_chip_are_refused_by_name(tmp_path, field, value, message):
    """Found by fuzzing `cosearch plan --chip FILE`: each refused naming the field, never a
    TypeError from numpy; a JSON file reads as the constructor does."""
    import json
    d = hardware.H100.to_dict()
    d[field] = value
    p = tmp_path / "chip.json"
    p.write_text(json.dumps(d))
    if message is None:
        assert hardware.Accelerator.from_json(p).l2_bytes == float(2**70)
        return
    with pytest.raises(ValueError, match=message):
        hardware.Accelerator.from_json(p)


def test_kernel_tiles_beyond_any_kernel_are_refused():
    """A tile of 2^70 elements priced a feasible plan at 9e17 s: refused now."""
    with pytest.raises(ValueError, match="hbm_bytes must be a positive finite number, got an integer of 401 digits"):
        hardware.H100.with_(hbm_bytes=10**400)
    eff = hardware.H100.efficiency
    for f, hi in (("tile_m", 1 << 16), ("tile_slots", 1 << 24)):
        assert getattr(type(eff)(**{**eff.__dict__, f: hi}), f) == hi
        with pytest.raises(ValueError, match=f"{f} must be a whole number in \\[0, {hi}\\]"):
            type(eff)(**{**eff.__dict__, f: hi + 1})


def test_area_power_hand_worked():
    m = hardware.AreaPowerModel()
    a = hardware.Accelerator("x", 2, 4, 4, 1, 8, 1e9, 1024**2, 2 * 1024**2, 1e9, 1e11, 1e10)
    area = 2 * 16 * m.pe_area_mm2 + 4 * m.sram_area_mm2_per_mib + 8 * m.lane_area_mm2 + 3 * m.core_area_mm2 \
        + 100 * m.hbm_area_mm2_per_gbps + 10 * m.link_area_mm2_per_gbps + m.fixed_area_mm2
    power = 32 * 1e9 * m.pe_energy_j + 4 * m.sram_power_w_per_mib + 8e9 * m.lane_energy_j \
        + 8e11 * m.hbm_energy_j_per_bit + 8e10 * m.link_energy_j_per_bit + 3 * 1e9 * m.core_energy_j \
        + m.fixed_power_w
    stacks = 1e9 / 2**30 * m.hbm_stack_area_mm2_per_gib      # 1e9 bytes of HBM
    assert a.area_mm2() == pytest.approx(area + stacks)
    assert m.die_area_mm2(a.as_array()[None])[0] == pytest.approx(area)
    assert a.power_w() == pytest.approx(power)


def test_search_space_budget_filter():
    s = hardware.SearchSpace()
    grid = s.grid()
    kept = s.arrays()
    assert 0 < len(kept) < len(grid)
    m = s.area_power
    assert np.all(m.area_mm2(kept) <= s.area_budget_mm2 * (1 + 1e-9))
    assert np.all(m.power_w(kept) <= s.power_budget_w * (1 + 1e-9))
    # brute force count
    n = sum(1 for row in grid if m.area_mm2(row[None])[0] <= s.area_budget_mm2 * (1 + 1e-9)
            and m.power_w(row[None])[0] <= s.power_budget_w * (1 + 1e-9))
    assert n == len(kept)
    assert kept.shape[1] == len(hardware.DESIGN_FIELDS)


def test_search_space_default_budget_is_tpuv4():
    s = hardware.SearchSpace()
    assert s.area_budget_mm2 == pytest.approx(hardware.TPUv4.area_mm2())
    assert s.power_budget_w == pytest.approx(hardware.TPUv4.power_w())
    # an HBM scenario moves the reference's HBM with it: the budget pays for the same stacks
    s80 = hardware.SearchSpace.default(hbm_gib=80)
    assert s80.area_budget_mm2 - s.area_budget_mm2 == pytest.approx(48 * s.area_power.hbm_stack_area_mm2_per_gib)
    assert len(s80.arrays()) == len(s.arrays())


def test_searching_hbm_costs_area():
    """Several HBM pairs = HBM searched: capacity and bandwidth cost area against TPUv4's budget."""
    one = hardware.SearchSpace()
    many = hardware.SearchSpace(hbm=((32 * 2**30, 1.2e12), (48 * 2**30, 1.2e12), (96 * 2**30, 2.4e12)))
    hbm = many.arrays()[:, hardware.DESIGN_FIELDS.index("hbm_bytes")]
    big = hbm > 32 * 2**30
    assert 0 < big.sum() < (~big).sum()          # 48 GiB fits only by giving up compute or SRAM
    assert not np.any(hbm > 64 * 2**30)          # 96 GiB's stacks alone exceed what is left
    assert (~big).sum() == len(one.arrays())


def _phaze_area(tc, w, d, vc, glb_mib, m, hbm_gib=32, hbm_Bps=1.2e12):
    """Die area of a PHAZE-space design, written out term by term (independent of the grid code)."""
    per_core_kib = max(1.0, w * d / 64)
    return (tc * w * d * m.pe_area_mm2 + (tc * per_core_kib / 1024 + glb_mib) * m.sram_area_mm2_per_mib
            + vc * w * m.lane_area_mm2 + (tc + vc) * m.core_area_mm2 + hbm_Bps / 1e9 * m.hbm_area_mm2_per_gbps
            + 300 * m.link_area_mm2_per_gbps + m.fixed_area_mm2)


def test_phaze_space_matches_its_definition():
    """PHAZE's space by brute force: every (tc, vc, width, depth, GLB) kept iff its die area is
    within [0.3, 1] x the reference's (no lower bound with one tensor or vector core)."""
    s = hardware.SearchSpace.phaze()
    m = s.area_power
    ref = _phaze_area(8, 128, 128, 2, 128, m)
    expect = set()
    for lt in range(13):
        for lv in range(13):
            for lw in range(1, 9):
                for ld in range(1, 9):
                    for lg in range(1, 8):
                        tc, vc, w, d, g = 2 ** lt, 2 ** lv, 2 ** lw, 2 ** ld, 2 ** lg
                        a = _phaze_area(tc, w, d, vc, g, m)
                        lo = 0.0 if tc == 1 or vc == 1 else 0.3
                        if lo * ref <= a * (1 + 1e-12) and a <= ref * (1 + 1e-12):
                            expect.add((tc, vc, w, d, g))
    got = s.arrays()
    F = hardware.DESIGN_FIELDS
    keys = {(int(r[F.index("tensor_cores")]), int(r[F.index("vector_units")]), int(r[F.index("systolic_rows")]),
             int(r[F.index("systolic_cols")]), int(round(r[F.index("l2_bytes")] / 2**20))) for r in got}
    assert keys == expect and len(got) == len(expect)
    assert np.all(got[:, F.index("vector_width")] == got[:, F.index("systolic_rows")])
    assert np.all(got[:, F.index("clock_hz")] == 1.05e9)
    assert np.all(got[:, F.index("hbm_bytes")] == 32 * 2**30)
    # the reference itself is in the space, at the budget's edge
    assert (8, 2, 128, 128, 128) in keys


def test_space_file(tmp_path):
    p = tmp_path / "space.json"
    p.write_text('{"base": "phaze", "hbm_gib": 64, "tensor_cores": [8, 16], "l2_bytes": [134217728]}')
    s = hardware.SearchSpace.from_json(str(p))
    a = s.arrays()
    assert set(a[:, 0]) <= {8.0, 16.0} and np.all(a[:, hardware.DESIGN_FIELDS.index("hbm_bytes")] == 64 * 2**30)
    bad = tmp_path / "bad.json"
    for text, why in (('{"tensor_core": [8]}', "unknown field.*tensor_core"), ('{"tensor_cores": [0, 8]}', "tensor_cores"),
                      ('{"hbm": [[-1, 5]]}', "hbm"), ('[1, 2]', "object"),
                      # an integer no float holds: was OverflowError (found by fuzzing space files)
                      ('{"l2_bytes": [1' + "0" * 400 + ']}', "bad.json.*an integer of 401 digits")):
        bad.write_text(text)
        with pytest.raises(ValueError, match=why):
            hardware.SearchSpace.from_json(str(bad))
    with pytest.raises(ValueError, match="no-such"):
        hardware.SearchSpace.from_json(str(tmp_path / "no-such.json"))
    # the same from Python: any field (was OverflowError from a float conversion inside)
    for kw in ({"tensor_cores": (10**400,)}, {"hbm": ((10**400, 1e12),)}, {"area_budget_mm2": 10**400}):
        with pytest.raises(ValueError, match="beyond any float"):
            hardware.SearchSpace(**kw)
    assert hardware.SearchSpace(area_budget_mm2=800).area_budget_mm2 == 800.0


def test_search_space_all_rejected_says_why():
    with pytest.raises(ValueError, match="area budget"):
        hardware.SearchSpace(area_budget_mm2=1.0).arrays()
    with pytest.raises(ValueError, match="power budget"):
        hardware.SearchSpace(power_budget_w=1.0).arrays()


def test_search_space_bad_values():
    with pytest.raises(ValueError, match="tensor_cores"):
        hardware.SearchSpace(tensor_cores=(0, 2))
    with pytest.raises(ValueError, match="systolic_dims"):
        hardware.SearchSpace(systolic_dims=((128,),))


def test_cluster_validation():
    with pytest.raises(ValueError, match="num_chips"):
        cluster.Cluster(0)
    assert cluster.Cluster(8).link_bandwidth(hardware.TPUv4) == hardware.TPUv4.link_bandwidth_Bps


def test_phaze_space_feeds_its_cores_phaze_global_buffer_bandwidth():
    """PHAZE's estimator gives a multi-core chip's global buffer 4,096 words per cycle; every
    design of PHAZE's space carries it as 4096 x 2 bytes x 1.05 GHz = 8.6016 TB/s, TPUv4 and the
    area reference too; without it (cosearch 0.2's pricing) the column is 0.  Rows written before
    the column existed read as 0."""
    col = hardware.DESIGN_FIELDS.index("glb_Bps")
    on = hardware.SearchSpace.phaze().arrays()
    multi = on[:, 0] > 1
    assert np.all(on[multi, col] == 4096 * 2 * 1.05e9)
    # one core: 4096 x max(width, depth) / 256 words, at least 4 (PHAZE's rule), by hand
    one = on[~multi]
    assert len(one) > 0
    want = np.minimum(np.maximum(16.0 * np.maximum(one[:, 1], one[:, 2]), 4.0), 4096.0) * 2 * 1.05e9
    np.testing.assert_allclose(one[:, col], want, rtol=1e-15)
    assert hardware.phaze_glb_words(1, 2, 2) == 32.0 and hardware.phaze_glb_words(1, 256, 8) == 4096.0
    assert hardware.TPUv4.glb_Bps == 4096 * 2 * 1.05e9 == hardware.phaze_reference().glb_Bps
    off = hardware.SearchSpace.phaze(onchip_bandwidth=False).arrays()
    assert np.all(off[:, col] == 0.0) and np.array_equal(off[:, :col], on[:, :col])
    assert hardware.A100.glb_Bps == 0.0
    old = on[:3, :col]
    np.testing.assert_array_equal(hardware.design_array(old)[:, col], 0.0)
    assert hardware.Accelerator.from_array(old[0]).glb_Bps == 0.0
    with pytest.raises(ValueError, match="glb_Bps"):
        hardware.TPUv4.with_(glb_Bps=-1.0)
    with pytest.raises(ValueError, match="glb_words_per_cycle"):
        hardware.SearchSpace(glb_words_per_cycle=-2)


def test_space_and_chip_files_carry_the_global_buffer_bandwidth(tmp_path):
    import json
    p = tmp_path / "space.json"
    p.write_text(json.dumps({"base": "default", "glb_words_per_cycle": 512}))
    sp = hardware.SearchSpace.from_json(str(p))
    col = hardware.DESIGN_FIELDS.index("glb_Bps")
    a = sp.arrays()
    np.testing.assert_allclose(a[:, col], 512 * 2 * a[:, hardware.DESIGN_FIELDS.index("clock_hz")])
    p.write_text(json.dumps({"base": "default", "glb_rule": "guess"}))
    with pytest.raises(ValueError, match="glb_rule"):
        hardware.SearchSpace.from_json(str(p))
    chip = tmp_path / "chip.json"
    chip.write_text(json.dumps(hardware.TPUv4.to_dict()))
    assert hardware.Accelerator.from_json(chip).glb_Bps == hardware.TPUv4.glb_Bps
    d = hardware.TPUv4.to_dict()
    d.pop("glb_Bps")                                   # a chip file written before the field existed
    chip.write_text(json.dumps(d))
    assert hardware.Accelerator.from_json(chip).glb_Bps == 0.0


def test_datasheet_only_presets_h800_and_tpu7x():
    """Chips predicted from their specifications (no training run of them is used): H800 is the H100
    with NVLink cut to 200 GB/s per direction (its datasheet's 400 GB/s bidirectional); TPU7x has
    the 2,307 TFLOP/s BF16, 4,614 FP8, 192 GiB at 7,380 GB/s of Google's TPU7x page (its GEMM
    efficiency a public JAX sweep on it: test_kernel_model).  A tensor-parallel plan whose
    all-reduces cross NVLink is slower on the H800 by exactly its exposed TP communication (that of
    the recomputed forward included); its compute is the H100's."""
    from cosearch import cluster, models
    from cosearch.plan import PlanSpec, evaluate
    h800, h100 = hardware.preset("h800"), hardware.H100
    assert h800.with_(name="H100", link_bandwidth_Bps=h100.link_bandwidth_Bps) == h100
    tpu = hardware.preset("tpu7x")
    assert tpu.peak_flops == pytest.approx(2.307e15) and tpu.hbm_bytes == 192 * 2 ** 30
    assert tpu.hbm_bandwidth_Bps == 7.38e12 and tpu.efficiency.fp8_rate == 2.0
    m = models.preset("gpt3-13b")
    spec = PlanSpec(1, 8, 1, 1, flash_attention=True, recompute="full")
    a = evaluate(m, h100, cluster.dgx_h100(1), spec, 8, engine="megatron-lm")
    b = evaluate(m, h800, cluster.preset("dgx-h800", 1), spec, 8, engine="megatron-lm")
    assert b.breakdown["tp_comm_s"] > a.breakdown["tp_comm_s"] > 0
    for k in ("forward_s", "backward_s", "optimizer_s"):
        assert b.breakdown[k] == a.breakdown[k]
    comm = sum(b.breakdown[k] - a.breakdown[k] for k in ("tp_comm_s", "recompute_s"))
    assert b.step_time_s - a.step_time_s == pytest.approx(comm, rel=1e-9)


def test_sustained_clock_alternatives_start_with_the_presets_choice():
    """The sensitivity table's first entry per family is the clock the presets use, and every
    alternative is a fraction of the datasheet clock in (0.5, 1]."""
    alts = hardware.SUSTAINED_CLOCK_ALTERNATIVES
    used = {"A100": hardware.A100, "H100": hardware.H100, "H100-500W": hardware.H100_500W, "Blackwell": hardware.B200}
    for fam, chip in used.items():
        assert alts[fam][0][1] == chip.efficiency.sustained_clock
        assert all(0.5 < v <= 1.0 for _label, v in alts[fam]) and alts[fam][-1][1] == 1.0


def test_datasheet_only_preset_tpuv6e_and_its_pod():
    """TPU v6e from Google's v6e page: 918 TFLOP/s BF16, 32 GiB at 1,638 GB/s; its pod a 16 x 16
    2D torus of 100 GB/s links (800 GB/s bidirectional over 4 ports); more than one 256-chip slice is
    refused (the page gives no data-center bandwidth).  A 256-chip all-reduce of the same bytes on
    the v6e pod takes half the v5e pod's wire time (100 vs 50 GB/s links, the same torus)."""
    from cosearch import cluster
    from cosearch.comm import collective_s
    tpu = hardware.preset("tpuv6e")
    assert tpu.peak_flops == pytest.approx(918e12, rel=1e-12)
    assert tpu.hbm_bytes == 32 * 2 ** 30 and tpu.hbm_bandwidth_Bps == 1.638e12
    pod = cluster.preset("tpuv6e-pod", 256)
    assert pod.num_chips == 256 and pod.torus_side == 16
    with pytest.raises(ValueError, match="data-center network bandwidth"):
        cluster.tpuv6e_pod(512)
    v5e = cluster.tpuv5e_pod(256)
    nbytes = 2e9
    t6 = collective_s("allreduce", nbytes, 256, pod, tpu) - collective_s("allreduce", 1.0, 256, pod, tpu)
    t5 = (collective_s("allreduce", nbytes, 256, v5e, hardware.TPUv5e)
          - collective_s("allreduce", 1.0, 256, v5e, hardware.TPUv5e))
    assert t6 == pytest.approx(t5 / 2.0, rel=1e-9)
