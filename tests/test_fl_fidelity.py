"""FLuID's server details, each against a hand-traced round (iwang05/FLuID, fedDropFem_android.py
and fedDropShake_android.py): the one-round calibration lag, the absolute growth start, the growth
stop decided at mask time, the first layer's accumulating invariant list, and Shakespeare's stop
rule."""

import numpy as np
import pytest

from cosearch import fl
from cosearch.fl import masks
from tests.test_fl_method import _mlp_states, _neuron_max_change, _thresholds_by_round


def test_calibration_reaches_the_masks_one_round_later():
    """aggregate_fit runs find_stable (the invariant lists the next masks use, at the threshold as
    it is) before find_min (the calibration): round 3's masks use the initial threshold, round 4's
    the round-2 value."""
    _, gs, g, cs2 = _mlp_states(0)
    _, _, _, cs3 = _mlp_states(0, noise_seed=1)
    sched = fl.ThresholdSchedule("per_layer", growth_period=2, growth_step=0.1, initial=0.3, growth_start=100)
    pol = fl.InvariantDropout(schedule=sched, total_rounds=20, quorum=1.0)    # score = largest change
    pol.observe(1, g, cs2, gs)
    pol.observe(2, g, cs2, gs)
    ch2 = _neuron_max_change(gs, g, cs2)
    for gr in gs:           # masks of round 3: the initial 0.3, although the threshold is now calibrated
        assert pol.thresholds[gr.name] == pytest.approx(ch2[gr.name].min(), rel=1e-5)
        assert np.array_equal(pol.invariant(gr.name), ch2[gr.name] <= 0.3 * (1 + 1e-6))
    pol.observe(3, g, cs3, gs)
    ch3 = _neuron_max_change(gs, g, cs3)
    for gr in gs:           # masks of round 4: round 3's changes at round 2's threshold
        v2 = ch2[gr.name].min()
        want = ch3[gr.name] <= v2 * (1 + 1e-6)
        assert np.array_equal(pol.invariant(gr.name), want)
        assert pol.invariant(gr.name, threshold=pol.thresholds[gr.name]).sum() >= 0   # explicit still works


def test_growth_starts_at_an_absolute_round():
    """FLuID grows the threshold when ``rnd > 125`` (FEMNIST), whatever the run's length: with
    growth_start 3 and a period of 2, rounds 4, 5 count and round 5 grows, then round 7."""
    _, gs, g, cs = _mlp_states(0)
    sched = fl.ThresholdSchedule("first", growth_period=2, growth_step=0.5, growth_start=3)
    assert sched.start_round(10) == sched.start_round(1000) == 3.0
    assert masks.FLUID_SCHEDULES["femnist"].start_round(30) == 125.0
    assert masks.FLUID_SCHEDULES["cifar10"].start_round(35) == 10.0
    assert masks.FLUID_SCHEDULES["shakespeare"].start_round(60) == 20.0
    pol = fl.InvariantDropout(schedule=sched, total_rounds=1000)
    seen = _thresholds_by_round(pol, g, cs, gs, 8)
    base = seen[3]
    assert [seen[r] - base for r in range(3, 9)] == pytest.approx([0, 0, 0.5, 0.5, 1.0, 1.0])
    with pytest.raises(ValueError, match="growth_start"):
        fl.ThresholdSchedule(growth_start=-1)


def test_growth_stop_is_decided_when_the_masks_are_built():
    """FLuID sets stopChange while building round r's sub-model, so round r's own growth step
    (in aggregate_fit) already sees it: the protocol records the sent masks before observing."""
    calls = []

    class Spy(masks.OrderedDropout):
        def observe(self, round, *a):
            calls.append(("observe", round))

        def record(self, client, m):
            calls.append(("record", client))
    from cosearch.fl import models
    from cosearch.fl.server import ClientUpdate, RoundProtocol
    proto = RoundProtocol(models.mlp(4, 2, 4), 2, policy=Spy(), keep_rule="fluid")
    times = {0: 1.0, 1: 2.0}
    for r in (1, 2, 3):
        a = proto.assignments(r, range(2))
        ups = [ClientUpdate(c, proto.submodel(a[c]).state_dict(), 5, times[c] * a[c].keep) for c in range(2)]
        calls.clear()
        proto.aggregate(r, a, ups)
    assert calls == [("record", 1), ("observe", 3)]          # round 3: the straggler's masks first


def test_first_layer_invariant_list_only_grows():
    """FEMNIST's server keeps a first-layer neuron in its invariant list once it was there
    (``list[0] = self.unchagedWeights[0]``); other layers are recomputed every round."""
    _, gs, g, cs = _mlp_states(0)
    _, _, _, cs_big = _mlp_states(0, noise_seed=1)
    sched = fl.ThresholdSchedule("first", initial=0.3, growth_start=100)
    pol = fl.InvariantDropout(schedule=sched, total_rounds=20, quorum=1.0)
    pol.observe(1, g, cs, gs)
    first = gs[0].name
    before = pol.invariant(first).copy()
    big = [{k: v * 3.0 for k, v in s.items()} for s in cs_big]   # every weight changes a lot
    pol.observe(2, g, big, gs)
    assert np.array_equal(pol.invariant(first) & before, before)          # none left the list
    ch = _neuron_max_change(gs, g, big)
    assert np.array_equal(pol.invariant(gs[1].name), ch[gs[1].name] <= 0.3 * (1 + 1e-6))


def _two_layer_policy(scope):
    pol = fl.InvariantDropout(schedule=fl.ThresholdSchedule(scope, growth_start=100), total_rounds=10)
    pol.scores = {"a": np.zeros(4), "b": np.zeros(4)}
    pol.thresholds = {"a": 0.1, "b": 0.1}
    pol.stopped = {"a": False, "b": False}
    return pol


def test_shakespeare_stop_rule():
    """Shakespeare's server stops the growth when the first LSTM layer's drop is filled from its
    invariant neurons, or the second's is filled from its invariant neurons but not from its
    previous drops alone (the `idx == 0 or idx == 3` branch); FEMNIST's only by the first layer."""
    drop2 = np.array([False, False, True, True])                # keep mask: drop units 0 and 1
    full = np.ones(4, bool)
    # second layer has enough invariant neurons (0, 1, 2), first has one: Shakespeare stops
    pol = _two_layer_policy("mean")
    pol.mask_invariant = {"a": np.array([1, 0, 0, 0], bool), "b": np.array([1, 1, 1, 0], bool)}
    pol.record(0, {"a": drop2, "b": drop2})
    assert pol.stopped == {"a": True, "b": True}
    # the same for FEMNIST's rule (first layer only): no stop
    pol = _two_layer_policy("first")
    pol.mask_invariant = {"a": np.array([1, 0, 0, 0], bool), "b": np.array([1, 1, 1, 0], bool)}
    pol.record(0, {"a": drop2, "b": drop2})
    assert pol.stopped == {"a": False, "b": False}
    # Shakespeare, second layer filled by its previous drops alone (units 0, 1 still invariant):
    # FLuID takes the first branch, which stops only for the first layer
    pol = _two_layer_policy("mean")
    pol.mask_invariant = {"a": np.array([1, 0, 0, 0], bool), "b": np.array([1, 1, 1, 0], bool)}
    pol.last_dropped[0] = {"a": ~full, "b": ~drop2}             # round r dropped units 0, 1 of b
    pol.record(0, {"a": drop2, "b": drop2})                     # round r + 1
    assert pol.stopped == {"a": False, "b": False}


def test_early_stopping_at_a_target_accuracy():
    full = fl.simulate("digits", clients=3, method="invariant", rounds=8, seed=2)
    accs = [r.accuracy for r in full.rounds]
    target = sorted(accs)[len(accs) // 2]                    # reached somewhere inside the run
    first = next(i for i, a in enumerate(accs) if a >= target) + 1
    res = fl.simulate("digits", clients=3, method="invariant", rounds=8, seed=2, stop_at_accuracy=target)
    assert len(res.rounds) == first and res.config["stopped_early"] == (first < 8)
    assert [r.accuracy for r in res.rounds] == accs[:first]   # the same rounds, cut at the target
    with pytest.raises(ValueError, match="stop_at_accuracy"):
        fl.simulate("digits", clients=3, rounds=1, stop_at_accuracy=1.5)
