"""FLuID's method: magnitude kernel, threshold calibration and growth, drop order, keep-fraction
buckets, fair drop counts, the device/time model, FLuID's models."""

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from cosearch import fl  # noqa: E402
from cosearch._kernels import magnitude  # noqa: E402
from cosearch._kernels.magnitude import neuron_scores  # noqa: E402
from cosearch.fl import masks, models, profiling, submodel  # noqa: E402


# ---------------------------------------------------------------------- magnitude kernel
def _scores_loops(w, wk, quorum, eps, nin, nout, n):
    """Independent reference: per neuron, collect its elements, then per element sort the
    clients' relative changes with Python's sorted()."""
    out = np.zeros((2, n))
    members = [[] for _ in range(n)]
    for e in range(len(w)):
        for j in (nin[e], nout[e]):
            if j >= 0:
                members[j].append(e)
    for j in range(n):
        for e in members[j]:
            rel = sorted(abs(float(wk[k, e]) - float(w[e])) / (abs(float(w[e])) + float(eps))
                         for k in range(wk.shape[0]))
            out[0, j] = max(out[0, j], rel[quorum - 1])
            out[1, j] = max(out[1, j], rel[-1])
    return out


def _random_map(rng, N, segments):
    shapes = [(7, 13), (40,), (5, 3, 2, 2), (1, 90), (33, 1)]
    rows = [sh[0] for sh in shapes]
    cols = [int(np.prod(sh[1:])) if len(sh) > 1 else 1 for sh in shapes]
    return magnitude.make_map(shapes, [rng.integers(-1, N, r) for r in rows],
                              [rng.integers(-1, N, c) for c in cols], segments)


@pytest.mark.parametrize("K,quorum,segments", [(1, 1, 1), (4, 3, 64), (5, 4, 7), (7, 6, 300), (4, 1, 5),
                                                (10, 5, 9), (20, 15, 64), (3, 3, 4), (6, 4, 11)])
def test_kernel_equals_loop_reference(K, quorum, segments):
    rng = np.random.default_rng(K)
    N = 23
    nmap = _random_map(rng, N, segments)
    P = int(nmap.offsets[-1])
    w = rng.normal(size=P).astype(np.float32)
    w[:20] = 0.0
    wk = (w[None] + rng.normal(scale=0.1, size=(K, P))).astype(np.float32)
    wk[:, :10] = 0.0
    nin, nout = magnitude.expand(nmap)
    got = neuron_scores(w, wk, quorum, np.float32(1e-8), nmap, N)
    np.testing.assert_allclose(got, _scores_loops(w, wk, quorum, 1e-8, nin, nout, N), rtol=2e-6)
    np.testing.assert_allclose(got, masks.neuron_scores_numpy(w, wk, quorum, np.float32(1e-8), nin, nout, N),
                               rtol=1e-6)
    if K - quorum + 1 <= 4 and K <= 16:       # the kernel compiled for large updates, same answer
        spec = magnitude._specialised(K, K - quorum + 1)(w, wk, np.float32(1e-8), nmap, N)
        np.testing.assert_allclose(spec, got, rtol=2e-6)


def test_large_update_kernel_is_vectorised():
    """The speed of the large-update kernel rests on LLVM vectorising its row loops; a change
    that makes them scalar should fail here, not only show in the benchmark.  Packed max
    instructions of any width count (xmm, ymm or zmm: LLVM picks the width by the host, e.g.
    zmm on AVX-512 parts); the scalar forms (``vmaxss``) do not.  Skipped only where the host
    has no AVX2 or numba is told to compile for a named CPU."""

    from numba.core import config
    K, L = 5, 2
    kernel = magnitude._specialised(K, L)
    nmap = _one(list(range(3)), [3 + j for j in range(40)])
    w = np.ones(120, dtype=np.float32)
    kernel(w, np.ones((K, 120), dtype=np.float32), np.float32(1e-8), nmap, 43)
    row_scores, fold = kernel.parts
    cpu = (config.CPU_NAME or "").lower()
    import llvmlite.binding as llvm
    features = llvm.get_host_cpu_features() if not cpu else {}
    if cpu or not features.get("avx2", False):
        pytest.skip("vectorisation checked on hosts with AVX2 or wider")
    rows_asm = "".join(row_scores.inspect_asm().values())
    fold_asm = "".join(fold.inspect_asm().values())
    assert _packed(rows_asm, "vmaxps") >= K      # the sorting network
    assert _packed(fold_asm, "vpmaxsd") >= 4     # the four integer maxima


def _packed(asm: str, instr: str) -> int:
    """How many ``instr`` instructions on vector registers of any width ``asm`` holds."""
    import re
    return len(re.findall(rf"\b{instr}\b[^\n]*%?[xyz]mm\d", asm))


def test_packed_count_accepts_every_vector_width():
    """The check above must hold on AVX2 (ymm) and AVX-512 (zmm) hosts alike (LLVM picks the
    width by the host), and must not count scalar forms."""
    asm = ("\tvmaxps\t%ymm1, %ymm2, %ymm3\n\tvmaxps\t%zmm4, %zmm5, %zmm6\n\tvmaxps\t%xmm0, %xmm1, %xmm2\n"
           "\tvmaxss\t%xmm0, %xmm1, %xmm2\n\tvpmaxsd\t%zmm1, %zmm2, %zmm3\n\tvpmaxsq\t%zmm1, %zmm2, %zmm3\n")
    assert _packed(asm, "vmaxps") == 3
    assert _packed(asm, "vpmaxsd") == 1
    assert _packed(asm, "vmaxss") == 1    # a scalar op on an xmm register; never asked for above


def _one(rows, cols):
    return magnitude.make_map([(len(rows), len(cols))], [np.asarray(rows)], [np.asarray(cols)])


def test_quorum_boundary_hand_worked():
    w = np.array([1.0], dtype=np.float32)
    wk = np.array([[1.1], [1.2], [1.3], [1.4]], dtype=np.float32)  # rel changes .1 .2 .3 .4
    s = neuron_scores(w, wk, 3, np.float32(0.0), _one([0], [-1]), 1)  # 75% of 4 = 3
    assert s[0, 0] == pytest.approx(0.3, rel=1e-6) and s[1, 0] == pytest.approx(0.4, rel=1e-6)


def test_zero_weights_no_nan():
    w = np.zeros(4, dtype=np.float32)
    wk = np.zeros((3, 4), dtype=np.float32)
    s = neuron_scores(w, wk, 2, np.float32(1e-8), _one([0, 1], [-1, -1]), 2)
    assert np.all(s == 0.0)


def test_neuron_map_of_a_cnn_matches_the_groups():
    """Every element the groups' slices name is mapped to exactly that neuron."""
    m = models.femnist_cnn()
    x = torch.zeros(1, 1, 28, 28)
    gs = submodel.groups(m, x)
    names, nmap, offs = masks.neuron_index(m.state_dict(), gs)
    nin, nout = magnitude.expand(nmap)
    sizes = [m.state_dict()[n].numel() for n in names]
    starts = np.concatenate([[0], np.cumsum(sizes)])
    for gi, g in enumerate(gs):
        for j in (0, g.units - 1):
            one = np.zeros(g.units, bool)
            one[j] = True
            for sl in g.slices:
                k = names.index(sl.name)
                shape = tuple(m.state_dict()[sl.name].shape)
                idx = np.zeros(shape, bool)
                index = [slice(None)] * len(shape)
                index[sl.axis] = sl.indices(one)
                idx[tuple(index)] = True
                flat = np.flatnonzero(idx.ravel()) + starts[k]
                target = nin if sl.axis == 0 else nout
                assert np.all(target[flat] == offs[gi] + j)


# ---------------------------------------------------------------------- threshold
def _mlp_states(seed=0, K=4, hidden=6, noise_seed=None):
    torch.manual_seed(seed)
    m = models.mlp(5, 3, hidden)
    gs = submodel.groups(m)
    g = {k: v.clone() for k, v in m.state_dict().items()}
    rng = np.random.default_rng(seed if noise_seed is None else noise_seed)
    cs = []
    for _ in range(K):
        s = {k: v * (1 + torch.as_tensor(rng.uniform(-0.5, 0.5, tuple(v.shape)), dtype=v.dtype))
             for k, v in g.items()}
        cs.append(s)
    return m, gs, g, cs


def _neuron_max_change(gs, g, cs):
    """Per layer, per neuron: the largest relative change over clients of any weight the
    neuron owns (rows/bias of its layer, the column of the next layer) — by named tensors."""
    out = {}
    layer_names = [gr.name for gr in gs]
    names = sorted({int(n) for n in layer_names})
    for gr in gs:
        i = int(gr.name)
        nxt = [j for j in range(i + 1, 10) if f"{j}.weight" in g][0]
        vals = []
        for u in range(gr.units):
            best = 0.0
            for c in cs:
                for key, sl in ((f"{i}.weight", (u, slice(None))), (f"{i}.bias", (u,)),
                                (f"{nxt}.weight", (slice(None), u))):
                    d = (c[key][sl] - g[key][sl]).abs() / (g[key][sl].abs() + 1e-12)
                    best = max(best, float(d.max()))
            vals.append(best)
        out[gr.name] = np.array(vals)
    assert names
    return out


@pytest.mark.parametrize("scope", ["first", "mean", "per_layer"])
def test_threshold_calibrates_in_rounds_2_and_3(scope):
    m, gs, g, cs2 = _mlp_states(0)
    _, _, _, cs3 = _mlp_states(0, noise_seed=1)
    sched = fl.ThresholdSchedule(scope, growth_after=0.5, growth_period=2, growth_step=0.1, initial=0.3)
    pol = fl.InvariantDropout(schedule=sched, total_rounds=20)
    pol.observe(1, g, cs2, gs)
    assert pol.thresholds == {gr.name: 0.3 for gr in gs}     # round 1: not calibrated
    pol.observe(2, g, cs2, gs)
    mins2 = {k: v.min() for k, v in _neuron_max_change(gs, g, cs2).items()}
    pol.observe(3, g, cs3, gs)
    mins3 = {k: v.min() for k, v in _neuron_max_change(gs, g, cs3).items()}
    names = [gr.name for gr in gs]

    def value(mins):
        if scope == "per_layer":
            return mins
        v = mins[names[0]] if scope == "first" else np.mean([mins[n] for n in names])
        return {n: v for n in names}
    v2, v3 = value(mins2), value(mins3)
    for n in names:
        assert pol.thresholds[n] == pytest.approx(0.5 * (v2[n] + v3[n]), rel=1e-5)


def _thresholds_by_round(pol, g, cs, gs, last):
    """Observe the same updates in rounds 1..last; the first layer's threshold after each."""
    seen = {}
    for r in range(1, last + 1):
        pol.observe(r, g, cs, gs)
        seen[r] = pol.thresholds[gs[0].name]
    return seen


def test_threshold_growth_schedule_and_stop():
    m, gs, g, cs = _mlp_states(0)
    sched = fl.ThresholdSchedule("first", growth_after=0.5, growth_period=3, growth_step=0.25)
    pol = fl.InvariantDropout(schedule=sched, total_rounds=20)
    seen = _thresholds_by_round(pol, g, cs, gs, 20)
    base = seen[3]
    # growth after round 10, every 3 rounds: rounds 13, 16, 19
    for r in range(3, 21):
        k = sum(1 for t in (13, 16, 19) if t <= r)
        assert seen[r] == pytest.approx(base + 0.25 * k)
    # once the first layer has enough invariant neurons to fill a drop, growth stops for good
    pol2 = fl.InvariantDropout(schedule=sched, total_rounds=20)
    for r in range(1, 4):
        pol2.observe(r, g, cs, gs)
    need = int(pol2.invariant(gs[0].name).sum())
    assert need >= 1                             # the calibrating neuron itself is invariant
    keep = np.ones(gs[0].units, bool)
    keep[:need] = False
    pol2.record(0, {gs[0].name: keep, gs[1].name: np.ones(gs[1].units, bool)})
    t = pol2.thresholds[gs[0].name]
    for r in range(4, 21):
        pol2.observe(r, g, cs, gs)
    assert pol2.thresholds[gs[0].name] == t


def test_fluid_drop_order():
    rng = np.random.default_rng(0)
    n = 12
    inv = np.zeros(n, bool)
    inv[[1, 3, 5, 7, 9]] = True
    pref = np.zeros(n, bool)
    pref[[3, 7]] = True
    for _ in range(20):
        d = masks._fluid_drop(pref & inv, inv, 2, rng)              # preferred suffice
        assert sorted(d) == [3, 7]
        d = masks._fluid_drop(pref & inv, inv, 4, rng)              # then other invariant ones
        assert {3, 7} <= set(d) <= {1, 3, 5, 7, 9} and len(set(d)) == 4
        d = masks._fluid_drop(pref & inv, inv, 8, rng)              # then a random fill
        assert {1, 3, 5, 7, 9} <= set(d) and len(set(d)) == 8
    # more preferred than needed: a random sample of them, not always the same
    picks = {tuple(sorted(masks._fluid_drop(inv, inv, 2, rng))) for _ in range(30)}
    assert len(picks) > 1 and all(set(p) <= {1, 3, 5, 7, 9} for p in picks)


@pytest.mark.parametrize("n", [7, 16, 20, 64, 120])
@pytest.mark.parametrize("p", [0.5, 0.65, 0.75, 0.85, 0.95])
def test_every_method_drops_the_same_number(n, p):
    expect = {(7, 0.65): 3, (20, 0.85): 3, (120, 0.95): 6, (16, 0.5): 8, (64, 0.75): 16}
    g = submodel.Group("l", n, ())
    m, gs0, gstate, cs = _mlp_states(0, hidden=n)
    pol = fl.InvariantDropout()
    pol.observe(2, gstate, cs, gs0)
    counts = set()
    for method in fl.METHODS[2:4]:
        counts.add(int((~fl.policy(method).masks(p, [g], np.random.default_rng(0))["l"]).sum()))
    counts.add(int((~pol.masks(p, gs0, np.random.default_rng(0))[gs0[0].name]).sum()))
    counts.add(int((~fl.policy("invariant-adaptive").masks(p, [g], np.random.default_rng(0))["l"]).sum()))
    assert len(counts) == 1 and 1 <= counts.pop() < n
    if (n, p) in expect:
        assert int((~fl.OrderedDropout().masks(p, [g], None)["l"]).sum()) == expect[(n, p)]


def test_masks_is_a_query():
    m, gs, g, cs = _mlp_states(0)
    pol = fl.InvariantDropout()
    pol.observe(2, g, cs, gs)
    before = (dict(pol.thresholds), {k: v.copy() for k, v in pol.scores.items()}, dict(pol.last_dropped))
    a = pol.masks(0.5, gs, np.random.default_rng(3), client=1)
    b = pol.masks(0.5, gs, np.random.default_rng(3), client=1)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert before[0] == pol.thresholds and before[2] == pol.last_dropped
    pol.record(1, a)
    c = pol.masks(0.5, gs, np.random.default_rng(4), client=1)
    for k in a:      # last round's drops that are still invariant are dropped again first
        again = ~a[k] & pol.invariant(k)
        assert np.all(~c[k][again])


def test_bad_method_arguments():
    with pytest.raises(ValueError, match="method"):
        fl.policy("bogus")
    with pytest.raises(ValueError, match="threshold"):
        fl.InvariantDropout(threshold="magic")
    with pytest.raises(ValueError, match="scope"):
        fl.ThresholdSchedule("everywhere")
    with pytest.raises(ValueError, match="growth_step"):
        fl.ThresholdSchedule(growth_step=0)
    g = submodel.Group("l", 4, ())
    for p in (0.0, 1.5, -0.1, float("nan"), "x"):
        with pytest.raises(ValueError, match="p must be"):
            fl.OrderedDropout().masks(p, [g], np.random.default_rng(0))


# ---------------------------------------------------------------------- keep fraction, stragglers
def test_fluid_buckets():
    table = {0.875: 0.85, 0.9: 0.95, 0.99: 0.95, 1.0: 0.95, 0.8: 0.85, 0.79: 0.75, 0.7: 0.75,
             0.65: 0.65, 0.6: 0.65, 0.59: 0.5, 0.1: 0.5}
    for r, keep in table.items():
        assert fl.fluid_keep_fraction(r) == keep
    assert profiling.choose_width(0.875) == 0.95       # the 0.1 rule, kept as rule="ceil"
    with pytest.raises(ValueError):
        fl.fluid_keep_fraction(0.0)


def test_profiler_round2_pick_swap_and_hysteresis():
    pr = fl.StragglerProfiler(4)
    pr.observe(1, {0: 1.0, 1: 1.2, 2: 1.5, 3: 2.0}, {})
    assert pr.keep_fractions() == {} and pr.stragglers == []          # dropout starts in round 3
    pr.observe(2, {0: 1.0, 1: 1.2, 2: 1.5, 3: 2.0}, {})
    assert pr.keep_fractions() == {3: 0.75}                            # 1.5 / 2.0
    assert pr.keep_fractions() == {3: 0.75} and pr.stragglers == [3]  # queries change nothing
    # client 1 becomes slower than the straggler's full-model estimate (1.5 / 0.75 = 2.0)
    pr.observe(3, {0: 1.0, 1: 3.0, 2: 1.5, 3: 1.5}, {3: 0.75})
    assert pr.stragglers == [1] and pr.keep_fractions() == {1: 0.65}    # 2.0 / 3.0 = 0.667
    pr.observe(4, {0: 1.0, 1: 1.5, 2: 1.5, 3: 2.5}, {1: 0.65})
    assert pr.stragglers == [1]                                         # frozen one round
    pr.observe(5, {0: 1.0, 1: 1.5, 2: 1.5, 3: 2.5}, {1: 0.65})
    assert pr.stragglers == [3]
    with pytest.raises(ValueError):
        fl.StragglerProfiler(1)
    with pytest.raises(ValueError, match="round time"):
        pr.observe(6, {0: float("nan")}, {})


def test_profiler_fraction_of_clients():
    pr = fl.StragglerProfiler(10, fraction=0.2)
    t = {c: 1.0 + 0.1 * c for c in range(10)}
    pr.observe(2, t, {})
    assert sorted(pr.stragglers) == [8, 9]
    kf = pr.keep_fractions()
    assert kf[9] == fl.fluid_keep_fraction(1.7 / 1.9) and kf[8] == fl.fluid_keep_fraction(1.7 / 1.8)


# ---------------------------------------------------------------------- device / time model
def test_round_time_closed_form_and_noise():
    d = fl.ClientProfile(1e9, 2e6, 1e6, 0.01)
    assert d.round_time_s(3e9, 4e6) == pytest.approx(0.02 + 2.0 + 3.0 + 4.0)
    noisy = fl.ClientProfile(1e9, 2e6, 1e6, 0.01, noise_cv=0.2)
    rng = np.random.default_rng(0)
    ts = np.array([noisy.round_time_s(3e9, 4e6, rng) for _ in range(20000)])
    assert ts.mean() == pytest.approx(9.02, rel=0.01)
    assert ts.std() / ts.mean() == pytest.approx(0.2, rel=0.05)
    with pytest.raises(ValueError, match="flops_per_s"):
        fl.ClientProfile(0, 1, 1)


def test_training_flops_closed_forms():
    cnn = models.femnist_cnn()
    x = torch.zeros(2, 1, 28, 28)
    conv1 = 2 * 25 * 1 * 16 * 28 * 28
    conv2 = 2 * 25 * 16 * 64 * 14 * 14
    fc = 2 * 3136 * 120 + 2 * 120 * 62
    assert profiling.forward_flops(cnn, x) == conv1 + conv2 + fc
    assert fl.training_flops(cnn, x, 10, 2) == 3 * (conv1 + conv2 + fc) * 20
    lstm = models.ShakespeareLSTM()
    f = profiling.forward_flops(lstm, torch.zeros(1, 80, dtype=torch.long))
    assert f == 2 * 4 * 128 * (80 + 128) * 80 + 2 * 4 * 128 * (128 + 128) * 80 + 2 * 128 * 80
    assert profiling.model_bytes(cnn) == 4 * 410_022


def test_trace_csv(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("client,round,seconds\n0,1,2.0\n1,1,3.0\n1,3,4.0\n")
    tr = fl.TraceProfile.from_csv(p)
    assert tr.full_time_s(1, 2) == 3.0 and tr.full_time_s(1, 5) == 4.0
    assert tr.round_time_s(1, 3, 0.5) == 2.0
    bad = tmp_path / "b.csv"
    bad.write_text("client,seconds\n0,1\n")
    with pytest.raises(ValueError, match="columns"):
        fl.TraceProfile.from_csv(bad)
    bad.write_text("client,round,seconds\n0,1,-3\n")
    with pytest.raises(ValueError, match="seconds > 0"):
        fl.TraceProfile.from_csv(bad)
    # found by fuzzing --devices: a binary file raised UnicodeDecodeError without its name, and a
    # trace naming other clients than the run's was read silently (or failed mid-run)
    bad.write_bytes(b"\xd0\xcf\x11client,round,seconds\n")
    with pytest.raises(ValueError, match="device trace file .*b.csv.* is not UTF-8 text"):
        fl.TraceProfile.from_csv(bad)
    from cosearch.fl.simulation import _devices
    assert _devices(p, 2, 3, None).clients == [0, 1]
    with pytest.raises(ValueError, match=r"names client\(s\) \[1\] beyond them"):
        _devices(p, 1, 3, None)
    with pytest.raises(ValueError, match=r"client\(s\) \[2\] have no round-1 time"):
        _devices(p, 3, 3, None)
    late = tmp_path / "late.csv"
    late.write_text("client,round,seconds\n0,1,2.0\n1,2,3.0\n")
    with pytest.raises(ValueError, match=r"client\(s\) \[1\] have no round-1 time"):
        _devices(tr.__class__.from_csv(late), 2, 3, None)


# ---------------------------------------------------------------------- FLuID's models
def test_fluid_model_sizes():
    n = models.count_parameters
    assert n(models.build_model("femnist_cnn")) == 410_022
    assert n(models.build_model("cifar_vgg")) == 1_469_994
    lstm = models.build_model("shakespeare_lstm")
    keras = n(lstm) - lstm.lstm1.bias_hh_l0.numel() - lstm.lstm2.bias_hh_l0.numel()
    assert keras == 248_912
    assert [g.name for g in submodel.groups(lstm)] == ["lstm1", "lstm2"]     # output never dropped
    x = torch.zeros(2, 3, 32, 32)
    assert len(submodel.groups(models.build_model("cifar_vgg"), x)) == 8
    with pytest.raises(ValueError, match="unknown model"):
        models.build_model("resnet")
    assert math.isclose(models.DATASET_DEFAULTS["femnist"]["lr"], 0.004)


def test_dead_invariant_neurons_are_counted_apart_from_slow_ones():
    """The per-round report tells dead invariant neurons (no non-straggler changed any of their
    weights) from alive ones that change slowly: counted by hand from the clients' states."""
    import torch

    from cosearch.fl import masks
    from cosearch.fl.models import mlp
    from cosearch.fl.submodel import groups
    torch.manual_seed(0)
    net = mlp(4, 2, hidden=6)
    gs = groups(net, torch.zeros(1, 4))
    g = {k: v.clone() for k, v in net.state_dict().items()}
    clients = []
    for c in range(3):
        s = {k: v.clone() for k, v in g.items()}
        for j, rel in ((1, 1e-7), (2, 0.5), (3, 1e-7), (4, 0.5), (5, 0.5)):   # neuron 0 of layer "1": untouched
            s["1.weight"][j] *= 1 + rel * (c + 1)
        s["3.bias"] += 1.0 + c                                                    # layer "3": every unit moves
        clients.append(s)
    pol = masks.policy("invariant", schedule="femnist", total_rounds=30)
    for r in (2, 3):
        pol.observe(r, g, clients, gs)
    st = pol.state()
    inv = pol.invariant("1")
    moved = [j for j in range(6) if any(not torch.equal(s["1.weight"][j], g["1.weight"][j]) or
                                        not torch.equal(s["1.bias"][j], g["1.bias"][j]) or
                                        not torch.equal(s["3.weight"][:, j], g["3.weight"][:, j]) for s in clients)]
    assert moved == [1, 2, 3, 4, 5] and inv[0]
    assert st["dead_counts"]["1"] == sum(1 for j in range(6) if inv[j] and j not in moved) == 1
    assert st["invariant_counts"]["1"] >= st["dead_counts"]["1"] and st["dead_counts"]["3"] == 0
