"""FjORD and HeteroFL as methods: their width rules, and a run's per-width accuracy."""

import numpy as np
import pytest

from cosearch import fl
from cosearch.fl import masks
from cosearch.fl.experiment import Experiment
from cosearch.fl.simulation import FLResult


def test_fjord_samples_uniformly_from_the_widths_a_client_affords():
    pol = masks.policy("fjord")
    rng = np.random.default_rng(0)
    draws = [pol.width(0.65, 3, rng) for _ in range(6000)]
    assert set(draws) == {0.2, 0.4, 0.6}                          # never above the client's 0.65
    counts = np.array([draws.count(w) for w in (0.2, 0.4, 0.6)])
    assert np.all(np.abs(counts / 6000 - 1 / 3) < 0.03)           # uniform (3 sigma ~ 0.018)
    assert set(pol.width(1.0, 0, rng) for _ in range(500)) == set(masks.FJORD_WIDTHS)
    assert pol.width(0.1, 0, rng) == 0.2                          # below every width: the smallest
    assert pol.widths() == masks.FJORD_WIDTHS


def test_heterofl_tier_is_fixed_by_the_first_sub_model():
    pol = masks.policy("heterofl")
    rng = np.random.default_rng(0)
    assert pol.width(1.0, 2, rng) == 1.0
    assert pol.width(0.76, 2, rng) == 0.5                         # largest tier within 0.76
    from cosearch.fl.submodel import Group
    g = [Group("a", 32, (), ()), Group("b", 16, (), ())]
    pol.record(2, pol.masks(0.5, g, rng))
    assert pol.width(0.9, 2, rng) == pol.width(0.3, 2, rng) == pol.width(1.0, 2, rng) == 0.5   # static
    assert pol.width(0.3, 4, rng) == 0.25 and pol.width(0.05, 4, rng) == 0.0625
    assert pol.state() == {"tiers": {"2": 0.5}}


@pytest.mark.parametrize("method", ["fjord", "heterofl"])
def test_nested_methods_run_and_report_accuracy_per_width(method, tmp_path):
    res = fl.simulate("digits", clients=4, method=method, rounds=4, seed=1, out=tmp_path / "r.json")
    widths = masks.FJORD_WIDTHS if method == "fjord" else masks.HETEROFL_TIERS
    assert sorted(res.width_accuracy) == sorted(widths)
    assert res.width_accuracy[1.0] == pytest.approx(res.rounds[-1].accuracy)   # the full width is the model
    assert all(0.0 <= a <= 1.0 for a in res.width_accuracy.values())
    for r in res.rounds:
        assert all(k in widths for k in r.keep.values())
    if method == "fjord":                                           # every client samples from round 1
        assert any(r.keep for r in res.rounds[:2])
    else:                                                           # only stragglers, from round 3
        assert res.rounds[0].keep == res.rounds[1].keep == {}
    back = FLResult.from_json(tmp_path / "r.json")
    assert back.width_accuracy == res.width_accuracy
    exp = Experiment("digits", [method], [1], {"rounds": 4, "clients": 4}, {method: {1: res}})
    assert method in exp.width_table() and "1: " in exp.width_table()
    assert f"({method}: the method picks the widths" in exp.controller_table()


def test_holm_and_effect_size_by_hand():
    from cosearch.fl.experiment import effect_size, holm
    # sorted 0.01 x 3 = 0.03, 0.03 x 2 = 0.06, 0.04 x 1 = 0.04 -> raised to 0.06; NaN untouched
    assert holm([0.01, 0.04, float("nan"), 0.03]) == pytest.approx([0.03, 0.06, float("nan"), 0.06], nan_ok=True)
    assert holm([0.6, 0.5]) == pytest.approx([1.0, 1.0])
    assert effect_size([2, 4, 6], [1, 2, 3]) == pytest.approx(2.0)      # diffs 1, 2, 3: mean 2, sd 1
    assert np.isnan(effect_size([1, 2], [0, 1]))                        # no spread
