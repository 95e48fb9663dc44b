"""PHAZE's own area model (cosearch.phaze_area) against PHAZE's published design list.

``tests/phaze_cores_sample.csv`` holds rows of msr-fiddle/phaze
``Estimator/arch_configs/cores.json`` copied as published.  The "solve" rows are those the
module's constants were solved from; the "held-out" rows, a stretch of the list read
afterwards, and the list's length (29,360) were not used to make them.
"""

import csv
import os

import numpy as np
import pytest

from cosearch import hardware
from cosearch.hardware import DESIGN_FIELDS as F
from cosearch.hardware import KiB, MiB, PhazeAreaModel
from cosearch.phaze_area import buffer_um2, glb_um2

HERE = os.path.dirname(__file__)
M = 2 ** 20


def _sample(split=None):
    with open(os.path.join(HERE, "phaze_cores_sample.csv")) as f:
        rows = list(csv.DictReader(line for line in f if not line.startswith("#")))
    return [r for r in rows if split is None or r["split"] == split]


def _design(tc, vc, w, d, glb_bytes):
    """One design of PHAZE's space, built by hand (PHAZE's per-core buffer rule)."""
    return hardware.Accelerator("x", tc, w, d, vc, w, 1.05e9, max(1.0, w * d / 64) * KiB, glb_bytes,
                                32 * 2 ** 30, 1.2e12, 3e11).as_array()


def _keys(arr):
    return {(int(r[F.index("tensor_cores")]), int(r[F.index("vector_units")]), int(r[F.index("systolic_rows")]),
             int(r[F.index("systolic_cols")]), int(r[F.index("l2_bytes")])) for r in arr}


@pytest.mark.parametrize("split", ["solve", "held-out"])
def test_areas_equal_phazes_published_areas(split):
    rows = _sample(split)
    assert len(rows) >= 17
    designs = np.stack([_design(*(int(r[k]) for k in ("num_tc", "num_vc", "width", "depth", "GLB_Buffer")))
                        for r in rows])
    got_um2 = PhazeAreaModel().die_area_mm2(designs) * 1e6
    want = np.array([float(r["area"]) for r in rows])
    np.testing.assert_allclose(got_um2, want, rtol=1e-12)


def test_space_is_exactly_phazes_list():
    """PHAZE keeps 29,360 designs (the length of cores.json); every published row sampled is
    among them, with the same area."""
    s = hardware.SearchSpace.phaze(32, area_model="phaze")
    got = s.arrays()
    assert len(got) == 29_360
    keys = _keys(got)
    sample = {(int(r["num_tc"]), int(r["num_vc"]), int(r["width"]), int(r["depth"]), int(r["GLB_Buffer"]))
              for r in _sample()}
    assert sample <= keys
    # the list's first and last rows
    assert (4096, 4096, 16, 2, 32 * M) in keys and (1, 1, 2, 2, 2 * M) in keys
    # the budget is the area of PHAZE's max_acc_config (8 x 128x128 TCs, 2 VCs, 128 MiB), which
    # lies between the largest published area and the smallest one the list leaves out
    assert s.area_budget_mm2 * 1e6 >= 277725981.266688                 # (4096, 4096, 8, 8, 2 MiB), kept
    assert s.area_budget_mm2 * 1e6 < 277725981.266688 + 2740420.0       # the same at 4 MiB: dropped
    assert (4096, 4096, 8, 8, 4 * M) not in keys
    assert s.name == "phaze-hbm32-phaze-area" and s.area_power.name == "phaze"


def test_held_out_stretch_keeps_the_same_buffers():
    """In the held-out stretch of the list (tc 16, vc 2,048) PHAZE keeps exactly these global
    buffers for each array shape (MiB); the others fall outside [0.3, 1] x the reference."""
    kept = {(64, 2): (64, 32, 16, 8, 4, 2), (32, 256): (64, 32, 16, 8, 4, 2), (32, 64): (128, 64, 32, 16, 8, 4, 2),
            (32, 32): (128, 64, 32, 16, 8), (32, 16): (128, 64, 32, 16), (16, 256): (128, 64, 32, 16, 8, 4, 2),
            (16, 64): (128, 64, 32), (8, 64): (128, 64), (4, 256): (128, 64), (2, 2): (128, 64)}
    keys = _keys(hardware.SearchSpace.phaze(32, area_model="phaze").arrays())
    for (w, d), glbs in kept.items():
        have = tuple(g for g in (128, 64, 32, 16, 8, 4, 2) if (16, 2048, w, d, g * M) in keys)
        assert have == glbs, (w, d)


def test_single_core_designs_have_no_lower_bound():
    """PHAZE drops designs under 0.3x the reference unless they have one tensor or one vector core."""
    keys = _keys(hardware.SearchSpace.phaze(32, area_model="phaze").arrays())
    assert (1, 1, 2, 2, 2 * M) in keys                       # 3.4 mm^2
    assert (2, 2, 2, 2, 2 * M) not in keys                   # as small, two of each core
    assert (1, 4096, 2, 2, 2 * M) in keys


def test_hand_worked_area():
    """One 4x8 tensor core, one 4-lane vector core and a 2 MiB global buffer, from the
    constants written out: 6133.98 per core, 760.041386 per PE, 759.823853 per lane, 1 KiB
    buffers (no extra), 3,338,220 for the buffer."""
    want = (6133.98 + 32 * 760.041386) + (6133.98 + 4 * 759.823853) + 3338220.0
    a = PhazeAreaModel().die_components_mm2(_design(1, 1, 4, 8, 2 * M))
    assert float(sum(v[0] for v in a.values())) * 1e6 == pytest.approx(want, rel=1e-13)
    assert set(a) == {"tensor cores", "vector cores", "global buffer"}


def test_tables_between_and_past_their_points():
    # halfway between 2 and 4 KiB, and between 2 and 4 MiB
    assert buffer_um2(3 * KiB) == pytest.approx((2114.45 + 6476.52) / 2)
    assert glb_um2(3 * MiB) == pytest.approx((3338220.0 + 6078640.0) / 2)
    # PHAZE's 1 KiB floor; past 1 MiB along the last segment; under 2 MiB along the first, never negative
    assert buffer_um2(256) == 0.0
    assert buffer_um2(2 * MiB) == pytest.approx(1627996.02 + (1627996.02 - 891756.02) * 2)
    assert glb_um2(1 * MiB) == pytest.approx(3338220.0 - (6078640.0 - 3338220.0) / 2)
    assert glb_um2(1) >= 0.0


def test_power_is_cosearchs_and_package_is_the_die():
    d = _design(8, 2, 128, 128, 128 * M)[None]
    m = PhazeAreaModel()
    assert m.power_w(d)[0] == hardware.AreaPowerModel().power_w(d)[0]
    assert m.area_mm2(d)[0] == m.die_area_mm2(d)[0]
    cm = hardware.AreaPowerModel()
    pk = cm.package_components_mm2(d)
    assert sum(v[0] for v in pk.values()) == pytest.approx(cm.area_mm2(d)[0], rel=1e-12)
    assert pk["HBM stacks"][0] == pytest.approx(32 * cm.hbm_stack_area_mm2_per_gib)


def test_area_model_choices_and_errors(tmp_path):
    with pytest.raises(ValueError, match="area_model must be one of cosearch, phaze"):
        hardware.SearchSpace.phaze(32, area_model="accelergy")
    with pytest.raises(ValueError, match="area_power must be an AreaPowerModel or a PhazeAreaModel"):
        hardware.SearchSpace(area_power="phaze")
    with pytest.raises(ValueError, match="PhazeAreaModel.power"):
        PhazeAreaModel(power=PhazeAreaModel())
    p = tmp_path / "space.json"
    p.write_text('{"base": "phaze", "area_model": "phaze", "tensor_cores": [8, 16]}')
    s = hardware.SearchSpace.from_json(str(p))
    assert isinstance(s.area_power, PhazeAreaModel) and set(s.arrays()[:, 0]) <= {8.0, 16.0}
    p.write_text('{"base": "phaze", "area_model": "cacti"}')
    with pytest.raises(ValueError, match="area_model must be one of"):
        hardware.SearchSpace.from_json(str(p))
    d = hardware.SearchSpace.default(32, area_model="phaze")
    assert d.area_budget_mm2 == pytest.approx(hardware.TPUv4.area_mm2(PhazeAreaModel()))
    assert len(d.arrays()) > 0


def test_design_report_under_phazes_model():
    from cosearch.design_report import design_report
    r = design_report(hardware.phaze_reference(), None, PhazeAreaModel())
    assert set(r.area_mm2) == {"tensor cores", "vector cores", "global buffer"}
    assert sum(r.area_mm2.values()) == pytest.approx(hardware.SearchSpace.phaze(32, area_model="phaze")
                                                     .area_budget_mm2, rel=1e-12)
    c = design_report(hardware.phaze_reference())
    assert "HBM stacks" in c.area_mm2


def test_cosearch_models_per_core_term_is_phazes_ratio():
    """cosearch's own model charges each core PHAZE's fixed core area in PE-equivalents: 4,096
    4x8 tensor cores plus 4,096 4-lane vector cores carry 8,192 x 6.05294e-3 = 49.6 mm^2 of core
    logic, where 8 tensor and 2 vector cores of 128x128 carry 0.06 mm^2."""
    from cosearch.phaze_area import PHAZE_CORE_UM2, PHAZE_PE_UM2
    m = hardware.AreaPowerModel()
    assert m.core_area_mm2 == pytest.approx(PHAZE_CORE_UM2 / PHAZE_PE_UM2 * m.pe_area_mm2, rel=1e-5)
    small = m.die_components_mm2(_design(4096, 4096, 4, 8, 2 * M))["core logic"][0]
    big = m.die_components_mm2(_design(8, 2, 128, 128, 128 * M))["core logic"][0]
    assert small == pytest.approx(49.58, abs=0.01) and big == pytest.approx(0.0605, abs=1e-4)
    # and its power: the same 8.0706 PE-equivalents at 0.5 pJ a cycle, 4.035 pJ a core a cycle;
    # at 1.05 GHz the 8,192 small cores burn 8,192 x 4.035e-12 x 1.05e9 = 34.7 W more than a
    # design of the same PEs, lanes and SRAM in 10 cores would (which burns 0.042 W)
    assert m.core_energy_j == pytest.approx(8.0706 * 0.5e-12, rel=1e-4)
    from dataclasses import replace
    none = replace(m, core_energy_j=0.0)
    d = _design(4096, 4096, 4, 8, 2 * M)
    assert (m.power_w(d) - none.power_w(d))[0] == pytest.approx(8192 * 4.0353e-12 * 1.05e9, rel=1e-4)
    d = _design(8, 2, 128, 128, 128 * M)
    assert (m.power_w(d) - none.power_w(d))[0] == pytest.approx(0.0424, abs=1e-4)


def test_cli_search_under_phazes_area_model(tmp_path, capsys):
    """A space file naming PHAZE's area model: the search keeps it in its results and the
    winner's report shows PHAZE's components; --area-model with a file is refused."""
    import json

    from cosearch.cli import main
    space = tmp_path / "space.json"
    space.write_text(json.dumps({"base": "phaze", "area_model": "phaze", "tensor_cores": [8, 16],
                                 "systolic_dims": [[128, 128], [128, 64]], "vector_units": [2],
                                 "l2_bytes": [134217728, 16777216]}))
    out = tmp_path / "r.json"
    assert main(["search", "--model", "gpt3-1.3b", "--chips", "16", "--batch", "32", "--serial",
                 "--space", str(space), "--time-model", "sum", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "tensor cores" in text and "global buffer" in text and "uncore" not in text
    assert json.loads(out.read_text())["meta"]["area_model"] == "phaze"
    assert main(["search", "--model", "gpt3-1.3b", "--chips", "16", "--batch", "32", "--serial",
                 "--space", str(space), "--area-model", "phaze"]) == 2
    assert "--area-model applies to --space default or phaze" in capsys.readouterr().err
