import numpy as np
import pytest

from cosearch import hardware


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


def test_area_power_hand_worked():
    m = hardware.AreaPowerModel()
    a = hardware.Accelerator("x", 2, 4, 4, 1, 8, 1e9, 1024**2, 2 * 1024**2, 1e9, 1e11, 1e10)
    area = 2 * 16 * m.pe_area_mm2 + 4 * m.sram_area_mm2_per_mib + 8 * m.lane_area_mm2 \
        + 100 * m.hbm_area_mm2_per_gbps + 10 * m.link_area_mm2_per_gbps + m.fixed_area_mm2
    power = 32 * 1e9 * m.pe_energy_j + 4 * m.sram_power_w_per_mib + 8e9 * m.lane_energy_j \
        + 8e11 * m.hbm_energy_j_per_bit + 8e10 * m.link_energy_j_per_bit + m.fixed_power_w
    assert a.area_mm2() == pytest.approx(area)
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
        hardware.Cluster(0)
    assert hardware.Cluster(8).link_bandwidth(hardware.TPUv4) == hardware.TPUv4.link_bandwidth_Bps
