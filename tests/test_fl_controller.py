"""The model-based straggler controller (cosearch.fl.controller, rule="model"): the time fit
against closed forms, the keep fraction against the root of the time equation, swaps only past
the margin, and the straggler on target in a simulation."""

import math

import numpy as np
import pytest

from cosearch.fl import controller
from cosearch.fl.profiling import StragglerProfiler, device_profiles


def _costs(p):
    return (p * p, p)          # FLOPs ~ p^2, bytes ~ p: a hand-made cost curve


def test_time_fit_recovers_compute_communication_and_latency_seconds():
    tm = controller.ClientTimeModel(_costs)
    for p in (1.0, 0.5, 0.8, 0.6):       # a = 6 s of compute, c = 4 s of bytes, d = 0.5 s of latency
        tm.observe(7, p, 6.0 * p * p + 4.0 * p + 0.5)
    assert tm.predict(7, 0.7) == pytest.approx(6 * 0.49 + 4 * 0.7 + 0.5, rel=1e-9)
    # two keep fractions cannot separate a constant from the slope: a f + c b only (exact here)
    tm = controller.ClientTimeModel(_costs)
    for p in (1.0, 0.5, 1.0, 0.5):
        tm.observe(1, p, 6.0 * p * p + 4.0 * p)
    assert tm.predict(1, 0.7) == pytest.approx(6 * 0.49 + 4 * 0.7, rel=1e-9)


@pytest.mark.parametrize("latency, with_constant", [(0.5, False), (2.0, True)])
def test_the_constant_is_fitted_only_where_it_pays_for_its_parameter(latency, with_constant):
    """Six rounds at keeps 1, 0.5, 0.8, 0.6, 1, 0.5 of t = 6 p^2 + 4 p + latency, the 0.8 and 0.6
    rounds 1 % off (x 1.01, x 0.99).  Least squares by the normal equations (numpy's lstsq; every
    coefficient comes out non-negative, so it is the NNLS fit): with the constant the residual sum
    of squares falls to 0.953 of the two-term fit's at latency 0.5 and to 0.233 at 2.0; Schwarz's
    criterion keeps the constant only below 6^(-1/6) = 0.742, so the 0.5 s latency is not told
    from the noise and the 2 s one is."""
    ps = np.array([1.0, 0.5, 0.8, 0.6, 1.0, 0.5])
    t = (6.0 * ps ** 2 + 4.0 * ps + latency) * np.array([1.0, 1.0, 1.01, 0.99, 1.0, 1.0])
    tm = controller.ClientTimeModel(_costs)
    for p, s in zip(ps, t):
        tm.observe(0, float(p), float(s))
    assert len(tm.seen[0]) == 6                          # no change detected: the six rounds fitted
    A = np.c_[ps ** 2, ps, np.ones_like(ps)]
    x2, rss2 = np.linalg.lstsq(A[:, :2], t, rcond=None)[:2]
    x3, rss3 = np.linalg.lstsq(A, t, rcond=None)[:2]
    assert min(x2) > 0 and min(x3) > 0
    assert (rss3[0] / rss2[0] < 6 ** (-1 / 6)) == with_constant
    a, c, d = (x3 if with_constant else (*x2, 0.0))
    assert tm.predict(0, 0.7) == pytest.approx(a * 0.49 + c * 0.7 + d, rel=1e-9)


def test_fewer_rounds_than_a_fit_scale_every_round_by_the_mean_cost_ratio():
    tm = controller.ClientTimeModel(_costs)
    tm.observe(0, 1.0, 4.0)
    tm.observe(0, 0.5, 1.6)
    # mean(4.0 / (1 + 1), 1.6 / (0.25 + 0.5)) x (0.49 + 0.7) at p = 0.7
    assert tm.predict(0, 0.7) == pytest.approx((2.0 + 1.6 / 0.75) / 2 * 1.19, rel=1e-12)


def test_one_keep_seen_scales_by_the_mean_cost_ratio_and_scores_errors():
    tm = controller.ClientTimeModel(_costs)
    for t in (4.0, 4.4, 3.8, 4.2):
        tm.observe(0, 1.0, t)
    # the mean of the rounds at keep 1 (4.1) times (p^2 + p) / 2 at p = 0.5
    assert tm.predict(0, 0.5) == pytest.approx(4.1 * 0.375, rel=1e-12)
    # errors against the running means of n = 1, 2, 3 rounds, log(4.4/4), log(3.8/4.2),
    # log(4.2/4.0667), each over sqrt(1 + 1/n): a mean of n rounds errs by the noise over sqrt(n)
    errs = [math.log(4.4 / 4.0) / math.sqrt(2), math.log(3.8 / 4.2) / math.sqrt(1.5),
            math.log(4.2 / ((4.0 + 4.4 + 3.8) / 3)) / math.sqrt(4 / 3)]
    sigma = 1.4826 * np.median(np.abs(errs))
    assert tm.error(0) == pytest.approx(sigma, rel=1e-9)
    assert tm.standard_error(0) == pytest.approx(sigma / 2, rel=1e-9)        # 4 rounds
    # a round far off (9 s: z = log(9/4.1) / sqrt(5/4) / 0.0999 = 7.0, S+ = 6.5 > 5) is a changed
    # device: its history restarts from that round, and the spread of the errors scored before it
    # (the device's noise, which a shift of its mean leaves as it was) is kept
    tm.observe(0, 1.0, 9.0)
    assert tm.predict(0, 0.5) == pytest.approx(9.0 * 0.375, rel=1e-12)
    assert tm.error(0) == pytest.approx(sigma, rel=1e-9) and tm.standard_error(0) == pytest.approx(sigma, rel=1e-9)
    # the next round's error (against the one round since the change) joins them
    tm.observe(0, 1.0, 8.6)
    errs.append(math.log(8.6 / 9.0) / math.sqrt(2))
    assert tm.error(0) == pytest.approx(1.4826 * np.median(np.abs(errs)), rel=1e-9)
    with pytest.raises(ValueError, match="no observed round"):
        tm.predict(3, 0.5)


def test_a_persistent_small_shift_restarts_the_history_where_it_began():
    """Ten rounds at 1.0 s, then 1.1 s (a 10 % shift, under a one-round 3-sigma rule's 15 %).
    One keep: the prediction is the mean of the n rounds of the history.  Errors so far are 0, so
    each error is standardised by the 5 % floor and by its mean's own error: z = log(1.1 / mean)
    / sqrt(1 + 1/n) / 0.05, S+ = S+ + z - 1/2, by hand: round 11 (n = 10): z = 1.8175, S = 1.3175;
    12: mean 1.00909, z = 1.6520, S = 2.4695; 13: mean 1.01667, z = 1.5138, S = 3.4833; 14: mean
    1.02308, z = 1.3971, S = 4.3804; 15: mean 1.02857, z = 1.2973, S = 5.1777 > 5.  The change
    point maximising (sum z)^2 / n is round 11 (7.678^2 / 5 = 11.8 against 5.860^2 / 4 = 8.6 from
    round 12), so the history is rounds 11-15, all 1.1 s; the errors scored from round 11 on are
    the shift's and go, those before it (all 0) stay."""
    tm = controller.ClientTimeModel(_costs)
    for _ in range(10):
        tm.observe(0, 1.0, 1.0)
    for i in range(4):
        tm.observe(0, 1.0, 1.1)
        assert tm.predict(0, 1.0) == pytest.approx((10 + 1.1 * (i + 1)) / (11 + i), rel=1e-12)
    tm.observe(0, 1.0, 1.1)
    assert len(tm.seen[0]) == 5 and tm.predict(0, 1.0) == pytest.approx(1.1, rel=1e-12) and tm.error(0) == 0.0


def test_one_noisy_round_is_not_a_change():
    """A single 3.6-sigma round (1.2 s after ten at 1.0 s: z = log 1.2 / 0.05 = 3.65, S+ = 3.15 < 5)
    and the rounds after it stay in the history."""
    tm = controller.ClientTimeModel(_costs)
    for t in [1.0] * 10 + [1.2, 1.0, 1.0]:
        tm.observe(0, 1.0, t)
    assert len(tm.seen[0]) == 13 and tm.predict(0, 1.0) == pytest.approx(13.2 / 13, rel=1e-12)


def test_change_point_is_the_maximum_likelihood_start_of_a_mean_shift():
    """Against the likelihood itself: z_i ~ N(0, 1) before round j and N(mu, 1) from j, mu at its
    maximum-likelihood value (the mean of z from j, at least 0); the best j by brute force."""
    rng = np.random.default_rng(7)
    for _ in range(200):
        n = int(rng.integers(1, 9))
        z = rng.normal(rng.uniform(-1, 3), 1.0, n)
        z[-1] = abs(z[-1]) + 0.1                 # an alarm ends on a round that pushed the sum up
        exc = [(100 + i, float(v)) for i, v in enumerate(z)]

        def loglik(j, z=z):
            mu = max(0.0, float(np.mean(z[j:])))
            return -0.5 * float(np.sum(z[:j] ** 2)) - 0.5 * float(np.sum((z[j:] - mu) ** 2))
        best = max(range(n), key=lambda j: (loglik(j), j))
        assert controller._change_point(exc) == 100 + best


def test_a_former_straggler_is_predicted_from_its_own_full_rounds():
    """Sub-model rounds that follow t = p^2 exactly, then three full rounds at 1.10, 1.12 and 1.08
    s (the device is not the curve's extrapolation, 1.0 s, but within its change threshold): the
    full time is their mean, 1.10 s, whatever the fit over all seven rounds says."""
    tm = controller.ClientTimeModel(_costs)
    for p in (0.5, 0.6, 0.7, 0.8):
        tm.observe(4, p, p * p)
    assert tm.predict(4, 1.0) == pytest.approx(1.0, rel=1e-9)
    for t in (1.10, 1.12, 1.08):
        tm.observe(4, 1.0, t)
    assert len(tm.seen[4]) == 7 and tm.predict(4, 1.0) == pytest.approx(1.10, rel=1e-12)


def test_the_level_comes_from_every_round_near_the_current_keep():
    """Rounds on t = 6 p^2 + 4 p + 0.5 at keeps 0.5-0.8, then 0.90, 0.92 and 0.88 at 6, 4 and 5 %
    above it.  The curve is the non-negative least-squares fit of all seven rounds (here by brute
    force: lstsq on every subset of the columns, the best non-negative one); the rounds within 0.05 of the current keep 0.88 are the last three (0.80 is
    0.08 away), and the prediction is the curve times their mean ratio to it."""
    def t(p):
        return 6.0 * p * p + 4.0 * p + 0.5
    tm = controller.ClientTimeModel(_costs)
    rounds = [(0.5, t(0.5)), (0.6, t(0.6)), (0.7, t(0.7)), (0.8, t(0.8)),
              (0.9, 1.06 * t(0.9)), (0.92, 1.04 * t(0.92)), (0.88, 1.05 * t(0.88))]
    for p, s in rounds:
        tm.observe(2, p, s)
    A = np.array([[p * p, p, 1.0] for p, _ in rounds])
    y = np.array([s for _, s in rounds])
    best = None
    for cols in ([0], [1], [2], [0, 1], [0, 2], [1, 2], [0, 1, 2]):
        sol, *_ = np.linalg.lstsq(A[:, cols], y, rcond=None)
        if (sol >= 0).all():
            x = np.zeros(3)
            x[cols] = sol
            res = float(np.sum((A @ x - y) ** 2))
            best = (res, x) if best is None or res < best[0] else best
    x = best[1]

    def curve(p):
        return x[0] * p * p + x[1] * p + x[2]
    level = np.mean([s / curve(p) for p, s in rounds[4:]])
    assert tm.predict(2, 0.7) == pytest.approx(curve(0.7) * level, rel=1e-9)
    assert len(tm.seen[2]) == 7          # no change found: 6 % is noise-sized


def _run(devices, rounds, profiler, change=None):
    """Noise-free rounds of clients t_c(p) = A p^2 + C p; ``change``: {round: {client: (A, C)}}."""
    dev = dict(devices)
    keeps = []
    for r in range(1, rounds + 1):
        dev.update((change or {}).get(r, {}))
        keep = profiler.keep_fractions()
        keeps.append(dict(keep))
        times = {c: a * keep.get(c, 1.0) ** 2 + cc * keep.get(c, 1.0) for c, (a, cc) in dev.items()}
        profiler.observe(r, times, keep)
    return keeps


def test_keep_is_the_largest_grid_point_within_the_target():
    """Clients 1.0, 1.5 and 3.0 s, t_c(p) = A p^2 + C p.  After round 2 only full rounds are known:
    3 (p^2 + p) / 2 <= 1.5 gives p = 0.618 -> 0.61.  After round 3, three rounds (fewer than a
    fit needs): the mean of 3/2, 3/2 and t(0.61) / (0.61^2 + 0.61) scales p^2 + p.  After round 4
    the three keep fractions give the exact fit 2 p^2 + p <= 1.5: p = (sqrt(13) - 1) / 4 = 0.651 ->
    0.65.  (keep_confidence 0.5: the keep whose predicted time is within the target, no margin.)"""
    prof = StragglerProfiler(3, rule="model", costs=_costs, keep_confidence=0.5)
    keeps = _run({0: (1.0, 0.0), 1: (1.2, 0.3), 2: (2.0, 1.0)}, 5, prof)
    assert keeps[:2] == [{}, {}]
    assert keeps[2] == {2: math.floor(100 * (math.sqrt(5) - 1) / 2) / 100}
    q = 0.61
    scale = (1.5 + 1.5 + (2 * q * q + q) / (q * q + q)) / 3
    assert keeps[3] == {2: math.floor(100 * (math.sqrt(1 + 4 * 1.5 / scale) - 1) / 2) / 100} == {2: 0.63}
    assert keeps[4] == {2: math.floor(100 * (math.sqrt(13) - 1) / 4) / 100}
    d = prof.decisions[-1]
    assert d["round"] == 6 and d["target_s"] == pytest.approx(1.5)
    assert d["predicted_s"][2] == pytest.approx(2 * 0.65 ** 2 + 0.65)


def test_keep_leaves_a_quarter_standard_error_below_the_target():
    """The default keep_confidence 0.6: after two noise-free full rounds every prediction error is
    0, so each client's spread is the 5 % floor over sqrt(2 rounds); the predicted log ratio of
    the straggler (client 2) to the target (client 1) has standard error sqrt(2) x 0.05 / sqrt(2)
    = 0.05, and the keep must satisfy 3 (p^2 + p) / 2 x exp(z 0.05) <= 1.5, z = 0.2533 the 60 %
    normal quantile (NormalDist().inv_cdf(0.6) = 0.25335): p^2 + p <= exp(-0.012667), p = 0.6124
    -> 0.61 on the grid, where no margin gives 0.6180 -> 0.61 too; the same rounds at 2.31 s for
    the straggler (2.31 (p^2 + p) / 2 <= 1.5 exp(-0.012667)) give 0.7445 -> 0.74 without the
    margin and 0.7379 -> 0.73 with it."""
    z = 0.2533471031357997                      # the 0.6 quantile of the standard normal
    for slow, no_margin, margin in ((3.0, 0.61, 0.61), (2.31, 0.74, 0.73)):
        keeps = {}
        for q in (0.5, None):
            prof = StragglerProfiler(3, rule="model", costs=_costs, keep_confidence=q)
            for r in (1, 2):
                prof.observe(r, {0: 1.0, 1: 1.5, 2: slow}, {})
            keeps[q] = prof.keep_fractions()[2]
        bound = math.exp(-z * 0.05) * 2 * 1.5 / slow          # p^2 + p at most this
        p = (math.sqrt(1 + 4 * bound) - 1) / 2
        assert keeps[None] == math.floor(100 * p + 1e-9) / 100 == margin
        assert keeps[0.5] == math.floor(100 * (math.sqrt(1 + 4 * 2 * 1.5 / slow) - 1) / 2 + 1e-9) / 100 == no_margin
    prof = StragglerProfiler(3, rule="model", costs=_costs)
    for r in (1, 2):
        prof.observe(r, {0: 1.0, 1: 1.5, 2: 2.31}, {})
    assert prof.time_model.standard_error(2) == pytest.approx(0.05 / math.sqrt(2))
    for bad in (0.4, 1.0, True, "0.6"):
        with pytest.raises(ValueError, match="keep_confidence"):
            StragglerProfiler(3, rule="model", costs=_costs, keep_confidence=bad)
    with pytest.raises(ValueError, match="rule='model' only"):
        StragglerProfiler(3, rule="fluid", keep_confidence=0.6)


def test_swaps_only_past_the_margin():
    # client 1 is 3% slower than the straggler's full time: inside the 5% margin, never swapped
    prof = StragglerProfiler(3, rule="model", costs=_costs, keep_confidence=0.5)
    _run({0: (1.0, 0.0), 1: (2.8, 0.3), 2: (2.0, 1.0)}, 12, prof)
    assert prof.stragglers == [1] and prof.swaps == 0     # 3.1 s > 3.0 s: the slowest from the start
    prof = StragglerProfiler(3, rule="model", costs=_costs, keep_confidence=0.5)
    keeps = _run({0: (1.0, 0.0), 1: (1.2, 0.3), 2: (2.0, 1.0)}, 12, prof, change={5: {1: (3.2, 0.3)}})
    # client 1 becomes 3.5 s in round 5, far off its prediction (1.5 s): its history restarts,
    # 3.5 > 3.0 x e^0.05, one swap; it then keeps 3.5 (p^2 + p) / 2 <= 3.0: p = 0.9015 -> 0.90;
    # with two and three rounds the mean of t / (p^2 + p) scales p^2 + p (0.91 both times), and
    # with four rounds at three keep fractions the exact fit 3.2 p^2 + 0.3 p <= 3.0: p = 0.9225 -> 0.92
    assert prof.swaps == 1 and prof.stragglers == [1]
    assert all(k == {2: k[2]} for k in keeps[2:5])

    def t1(p):
        return 3.2 * p * p + 0.3 * p

    def keep(scale):
        return math.floor(100 * (math.sqrt(1 + 4 * 3.0 / scale) - 1) / 2) / 100
    s6 = (3.5 / 2 + t1(0.90) / (0.81 + 0.90)) / 2
    s7 = (3.5 / 2 + t1(0.90) / (0.81 + 0.90) + t1(0.91) / (0.91 ** 2 + 0.91)) / 3
    assert keeps[5] == {1: 0.90} and keeps[6] == {1: keep(s6)} == {1: 0.91} and keeps[7] == {1: keep(s7)} == {1: 0.91}
    assert keeps[8] == {1: 0.92} and keeps[11] == {1: 0.92}


def test_model_rule_puts_the_straggler_on_target_in_simulation():
    """digits, 5 clients, noise-free devices: the straggler finishes within 5% of the slowest
    other client in >= 90% of dropout rounds, without swaps; FLuID's buckets do not."""
    from cosearch import fl
    reps = {rule: fl.simulate("digits", clients=5, method="invariant", rounds=12, keep_rule=rule,
                              devices=device_profiles(5, noise_cv=0.0)).controller_report()
            for rule in ("model", "fluid")}
    m = reps["model"]
    assert m.within(0.05) >= 0.9 and m.swaps == 0 and m.no_dropout_rounds == 0
    assert m.estimate_rms_log_error < 0.05
    assert reps["fluid"].within(0.05) < m.within(0.05)


def test_controller_report_by_hand():
    from cosearch.fl.simulation import FLResult, RoundMetrics

    def rm(r, times, keep, target=None, pred=None):
        return RoundMetrics(r, 0.5, 1.0, 0.5, 1.0, max(times.values()), float(r), times, keep,
                            target_s=target, predicted_s=pred or {})
    rounds = [rm(1, {0: 1.0, 1: 2.0}, {}), rm(2, {0: 1.0, 1: 2.0}, {}),
              rm(3, {0: 1.0, 1: 1.02}, {1: 0.7}, 1.0, {1: 1.0}),        # 1.02 of the other, on target
              rm(4, {0: 1.0, 1: 0.90}, {1: 0.6}, 1.0, {1: 0.95}),       # 0.90: outside 5%
              rm(5, {0: 1.5, 1: 1.0}, {0: 0.5}, 1.0, {0: 1.0}),         # a swap; 1.5 / 1.0
              rm(6, {0: 1.0, 1: 1.0}, {})]                              # nobody dropped
    rep = FLResult("invariant", "digits", "mlp", 2, rounds).controller_report()
    assert rep.rounds == (3, 4, 5) and rep.swaps == 1 and rep.no_dropout_rounds == 1
    assert rep.over_slowest_other == pytest.approx((1.02, 0.90, 1.5))
    assert rep.within(0.05) == pytest.approx(1 / 3) and rep.within(0.05, "target") == pytest.approx(1 / 3)
    errs = [math.log(1.02 / 1.0), math.log(0.90 / 0.95), math.log(1.5 / 1.0)]
    assert rep.estimate_rms_log_error == pytest.approx(math.sqrt(np.mean(np.square(errs))))


def test_controller_criteria_harness():
    """The criteria harness (cosearch.fl.controller_check): without noise the oracle, which knows
    every expected time, is on time in every dropout round by construction (its straggler's
    E(p) is within the next-slowest's E, which no other client exceeds), and the controller is on
    target; a client slowed to a fifth of its speed becomes the straggler by a swap that is not a
    wrong one, and the re-targeting lag is the number of off-target dropout rounds from the change
    until the first on-target one, read off the rows."""
    from cosearch.fl.controller_check import check_controller
    r = check_controller("mlp", rounds=20, noise_cv=0.0)
    assert r.dropout_rounds == 18 and r.oracle_on_time == 1.0 and r.on_target >= 0.9
    c = check_controller("mlp", rounds=24, noise_cv=0.0, change=(12, 1, 0.2))
    assert c.swaps >= 1 and c.wrong_swaps == 0
    assert {x["straggler"] for x in c.rounds if x["round"] > 16 and "straggler" in x} == {1}
    after = [x["on_target"] for x in c.rounds if x["round"] >= 12 and "straggler" in x]
    assert c.retarget_rounds == after.index(True) and all(not a for a in after[:c.retarget_rounds])
    cut = [x["straggler"] for x in c.rounds if x["round"] >= 12 and "straggler" in x]
    assert c.reassigned_rounds == cut.index(1) and 1 not in cut[:c.reassigned_rounds]
    assert c.reassigned_rounds <= c.retarget_rounds
    assert "wrong swaps 0" in c.table() and "slowest client cut after" in c.table()


def test_noise_limited_reference_is_the_oracle_without_noise_and_sees_a_change_one_round_late():
    """The reference (cosearch.fl.controller_check) estimates each device's factor from its noise
    draws: without noise every factor is exactly 1, so each of its decisions is the oracle's (the
    same straggler and keep, hence the same ratio, and on time in every round).  A device slowed
    at round 12: the decision for round 12 was made on round 11's devices, the one for round 13
    on the changed device's first round, so the reference is on target again one dropout round
    after the change, where the oracle's own ratio is on target."""
    from cosearch.fl.controller_check import TARGET_BAND, check_controller
    r = check_controller("mlp", rounds=20, noise_cv=0.0)
    rows = [x for x in r.rounds if "reference_ratio" in x]
    assert len(rows) == 18 and r.reference_on_time == 1.0
    for x in rows:
        assert x["reference_ratio"] == pytest.approx(x["oracle_ratio"], rel=1e-12)
    want = sum(abs(x["oracle_ratio"] - 1.0) <= TARGET_BAND for x in rows) / len(rows)
    assert r.reference_on_target == pytest.approx(want)
    c = check_controller("mlp", rounds=24, noise_cv=0.0, change=(12, 1, 0.2))
    at = {x["round"]: x for x in c.rounds}
    assert at[12]["reference_ratio"] != pytest.approx(at[12]["oracle_ratio"])          # decided before the change
    assert all(at[k]["reference_ratio"] == pytest.approx(at[k]["oracle_ratio"], rel=1e-12) for k in range(13, 25))
    assert abs(at[13]["oracle_ratio"] - 1.0) <= TARGET_BAND and c.reference_retarget_rounds == 1
    assert "noise-limited reference" in c.table()


def test_with_client_sampling_the_stragglers_are_the_slowest_seen_participants():
    """Ten clients, three seen at 1, 2 and 4 s (full rounds 1 and 2).  Sampled {0, 1, 2, 5}: client
    2 is the straggler, cut to the slowest other participant's 2 s; FLuID's bucket of 2/4 is 0.5,
    the model rule's fallback 4 (p^2 + p) / 2 <= 2 gives p = 0.618 -> 0.61.  With one seen
    participant nobody is cut; with every client the unsampled decision stands."""
    from cosearch.fl.profiling import fluid_keep_fraction
    for rule, want in (("fluid", fluid_keep_fraction(0.5)), ("model", 0.61)):
        prof = StragglerProfiler(10, rule=rule, costs=_costs if rule == "model" else None,
                                 keep_confidence=0.5 if rule == "model" else None)
        for r in (1, 2):
            prof.observe(r, {0: 1.0, 1: 2.0, 2: 4.0}, {})
        assert prof.keep_fractions([5, 2, 1, 0]) == {2: want}
        assert prof.keep_fractions([0, 5, 7]) == {}
        assert prof.keep_fractions(range(10)) == prof.keep_fractions()
    early = StragglerProfiler(10, rule="fluid")
    early.observe(1, {0: 1.0, 1: 2.0, 2: 4.0}, {})
    assert early.keep_fractions([0, 1, 2]) == {}              # before start_round: no dropout


def test_simulate_samples_clients_per_round():
    from cosearch import fl
    r = fl.simulate("digits", clients=12, method="invariant", rounds=4, clients_per_round=4)
    for m in r.rounds:
        want = sorted(int(c) for c in np.random.default_rng([0, 11, m.round]).choice(12, 4, replace=False))
        assert sorted(m.client_times_s) == want and set(m.keep) <= set(want)
    assert r.config["clients_per_round"] == 4
    with pytest.raises(ValueError, match="clients_per_round"):
        fl.simulate("digits", clients=12, rounds=1, clients_per_round=13)


def test_the_curve_is_fitted_once_a_round_and_refitted_after_each(monkeypatch):
    """Every prediction between two observed rounds reuses one NNLS fit; the next round refits
    (its prediction equals the closed-form curve through the new rounds)."""
    import scipy.optimize as so
    calls = []
    real = so.nnls
    monkeypatch.setattr(so, "nnls", lambda A, t: calls.append(1) or real(A, t))
    tm = controller.ClientTimeModel(_costs)
    for p in (1.0, 0.5, 0.8, 0.6):
        tm.observe(3, p, 6.0 * p * p + 4.0 * p + 0.5)
    before = len(calls)
    tm.predict(3, 1.0)
    tm.predict_many(3, [0.5, 0.7, 0.9])
    tm.predict(3, 0.3)
    assert len(calls) - before == 2                      # one fit: the curve with and without its constant
    tm.observe(3, 0.7, 6.0 * 0.49 + 4.0 * 0.7 + 0.5)
    assert len(calls) - before == 2                      # observe scored the round with the cached fit
    tm.predict(3, 1.0)
    tm.predict(3, 0.5)
    assert len(calls) - before == 4                      # refitted once, on the five rounds
    assert tm.predict(3, 0.9) == pytest.approx(6 * 0.81 + 4 * 0.9 + 0.5, rel=1e-9)


def test_keep_confidence_reaches_the_controller_from_every_engine():
    """simulate(keep_confidence=), RoundProtocol and the Flower strategy hand it to the profiler
    (recorded in the run's config when given); a value outside [0.5, 1), or one given with FLuID's
    buckets, is refused by name before any round."""
    from cosearch import fl
    from cosearch.fl.flower import DropoutStrategy
    from cosearch.fl.models import build_model
    from cosearch.fl.server import RoundProtocol
    r = fl.simulate("digits", clients=3, method="invariant", rounds=1, keep_confidence=0.5)
    assert r.config["keep_confidence"] == 0.5
    assert "keep_confidence" not in fl.simulate("digits", clients=3, method="invariant", rounds=1).config
    for bad, rule in ((0.3, "model"), (1.0, "model"), (0.6, "fluid")):
        with pytest.raises(ValueError, match="keep_confidence"):
            fl.simulate("digits", clients=3, method="invariant", rounds=1, keep_confidence=bad, keep_rule=rule)
    s = DropoutStrategy(lambda: build_model("mlp"), keep_confidence=0.55)
    # the strategy builds its protocol from these arguments once it knows the clients (configure_fit)
    assert RoundProtocol(s.model, 3, **s._proto_args).profiler.keep_confidence == 0.55
    assert RoundProtocol(build_model("mlp"), 3).profiler.keep_confidence == 0.6
