import json
import pickle

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402

from cosearch import fl  # noqa: E402
from cosearch._kernels.magnitude import neuron_scores  # noqa: E402
from cosearch.fl import data, masks, models, profiling, submodel  # noqa: E402


def zeroed_forward(model, ms, x):
    """Full model with the dropped units' activations zeroed (hook on the activation after
    each unit layer)."""
    gs = submodel.groups(model, x)
    mods = list(model.named_children())
    hooks = []
    for g in gs:
        i = [n for n, _ in mods].index(g.name)
        # first activation after the unit layer
        j = next(k for k in range(i + 1, len(mods)) if isinstance(mods[k][1], (nn.ReLU, nn.Tanh)))
        keep = torch.as_tensor(ms[g.name], dtype=torch.float32)

        def hook(mod, inp, out, keep=keep):
            shape = [1, -1] + [1] * (out.dim() - 2)
            return out * keep.view(shape)

        hooks.append(mods[j][1].register_forward_hook(hook))
    model.eval()
    with torch.no_grad():
        y = model(x)
    for h in hooks:
        h.remove()
    return y


@pytest.mark.parametrize("build,shape", [(lambda: models.mlp(64, 10, 32), (4, 1, 8, 8)),
                                         (lambda: models.femnist_cnn(62, 1, 28), (3, 1, 28, 28)),
                                         (lambda: models.cifar_vgg(10), (2, 3, 32, 32))])
def test_submodel_forward_equals_zeroed_full_model(build, shape):
    torch.manual_seed(0)
    model = build()
    x = torch.randn(*shape)
    gs = submodel.groups(model, x)
    rng = np.random.default_rng(0)
    ms = fl.RandomDropout().masks(0.6, gs, rng)
    sub = submodel.extract_submodel(model, ms, x)
    sub.eval()
    with torch.no_grad():
        ys = sub(x)
    torch.testing.assert_close(ys, zeroed_forward(model, ms, x), rtol=1e-4, atol=1e-5)
    n_sub = sum(p.numel() for p in sub.parameters())
    assert n_sub < sum(p.numel() for p in model.parameters())


def test_lstm_submodel_runs_and_round_trips():
    torch.manual_seed(0)
    m = models.CharLSTM(vocab=20, embed=4, hidden=16)
    gs = submodel.groups(m)
    ms = fl.OrderedDropout().masks(0.5, gs, np.random.default_rng(0))
    sub = submodel.extract_submodel(m, ms)
    x = torch.randint(0, 20, (3, 7))
    assert sub(x).shape == (3, 20)
    assert sub.lstm1.hidden_size == 8 and sub.lstm2.weight_ih_l0.shape == (32, 8)
    new, rej = submodel.merge_updates(m.state_dict(), [(sub.state_dict(), ms, 5)], gs)
    assert not rej
    for k, v in m.state_dict().items():
        torch.testing.assert_close(new[k], v)


def test_lstm_dropped_unit_equals_zero_unit():
    """Dropping LSTM-1 unit j equals a full model whose unit j never activates: zero its
    input/recurrent weights and set its gate biases so the cell and output stay 0."""
    torch.manual_seed(1)
    m = models.CharLSTM(vocab=12, embed=4, hidden=6)
    keep = np.ones(6, dtype=bool)
    keep[[1, 4]] = False
    ms = {"lstm1": keep, "lstm2": np.ones(6, dtype=bool)}
    sub = submodel.extract_submodel(m, ms)
    ref = models.CharLSTM(vocab=12, embed=4, hidden=6)
    ref.load_state_dict(m.state_dict())
    with torch.no_grad():
        H = 6
        for j in (1, 4):
            for g in range(4):
                ref.lstm1.weight_ih_l0[g * H + j] = 0
                ref.lstm1.weight_hh_l0[g * H + j] = 0
                ref.lstm1.bias_ih_l0[g * H + j] = 0
                ref.lstm1.bias_hh_l0[g * H + j] = 0
            ref.lstm1.bias_ih_l0[0 * H + j] = -1e4  # input gate shut -> cell stays 0 -> h = 0
    x = torch.randint(0, 12, (2, 5))
    with torch.no_grad():
        torch.testing.assert_close(sub(x), ref(x), rtol=1e-4, atol=1e-5)


def test_merge_equals_fedavg_without_stragglers():
    torch.manual_seed(0)
    m = models.mlp(16, 3, 8)
    gs = submodel.groups(m)
    full = submodel.full_masks(gs)
    states, ns = [], [3, 5, 2]
    for _ in ns:
        s = {k: v + torch.randn_like(v) for k, v in m.state_dict().items()}
        states.append(s)
    new, _ = submodel.merge_updates(m.state_dict(), [(s, full, n) for s, n in zip(states, ns)], gs)
    for k in new:
        expect = sum(s[k] * n for s, n in zip(states, ns)) / sum(ns)
        torch.testing.assert_close(new[k], expect)


def test_merge_never_double_counts_and_keeps_untrained():
    torch.manual_seed(0)
    m = models.mlp(4, 2, 4)
    gs = submodel.groups(m)
    g0 = gs[0].name
    a = {g.name: np.array([True, True, False, False]) if g.name == g0 else np.ones(4, bool) for g in gs}
    b = {g.name: np.array([False, True, True, False]) if g.name == g0 else np.ones(4, bool) for g in gs}
    sa = submodel.extract_submodel(m, a)
    sb = submodel.extract_submodel(m, b)
    with torch.no_grad():
        for p in sa.parameters():
            p.fill_(1.0)
        for p in sb.parameters():
            p.fill_(3.0)
    new, _ = submodel.merge_updates(m.state_dict(), [(sa.state_dict(), a, 1), (sb.state_dict(), b, 3)], gs)
    w = new[f"{g0}.weight"]
    assert torch.allclose(w[0], torch.ones(4))          # only a trained unit 0
    assert torch.allclose(w[1], torch.full((4,), 2.5))  # both: (1*1 + 3*3) / 4
    assert torch.allclose(w[2], torch.full((4,), 3.0))  # only b
    assert torch.equal(w[3], m.state_dict()[f"{g0}.weight"][3])  # nobody: unchanged


def test_bad_update_rejected_global_intact():
    m = models.mlp(4, 2, 4)
    gs = submodel.groups(m)
    full = submodel.full_masks(gs)
    bad = {k: v.clone() for k, v in m.state_dict().items()}
    k0 = next(iter(bad))
    bad[k0][0, 0] = float("nan")
    wrong = {k: v.clone() for k, v in m.state_dict().items()}
    wrong[k0] = torch.zeros(3, 3)
    new, rej = submodel.merge_updates(m.state_dict(), [(bad, full, 1), (wrong, full, 1)], gs)
    assert [r[0] for r in rej] == [0, 1]
    assert "NaN" in rej[0][1] and "shape" in rej[1][1]
    for k, v in m.state_dict().items():
        assert torch.equal(new[k], v)


def test_bad_masks_and_layers():
    m = models.mlp(4, 2, 4)
    gs = submodel.groups(m)
    with pytest.raises(ValueError, match="shape"):
        submodel.extract_submodel(m, {gs[0].name: np.ones(3, bool)})
    with pytest.raises(ValueError, match="unknown layers"):
        submodel.extract_submodel(m, {"nope": np.ones(3, bool)})
    with pytest.raises(ValueError, match="Conv1d"):
        submodel.groups(nn.Sequential(nn.Conv1d(1, 2, 1), nn.ReLU(), nn.Linear(2, 2)))
    for p in (0.0, 1.5, -0.1):
        with pytest.raises(ValueError, match="p must be"):
            fl.OrderedDropout().masks(p, gs, np.random.default_rng(0))


# ---------------------------------------------------------------------- magnitude kernel
def test_kernel_equals_numpy_reference():
    rng = np.random.default_rng(0)
    P, K, N = 5000, 5, 40
    w = rng.normal(size=P).astype(np.float32)
    w[:50] = 0.0
    wk = (w[None] + rng.normal(scale=0.1, size=(K, P))).astype(np.float32)
    wk[:, :25] = 0.0
    nin = rng.integers(-1, N, P)
    nout = rng.integers(-1, N, P)
    a = neuron_scores(w, wk, 4, np.float32(1e-8), nin, nout, N)
    b = masks.neuron_scores_numpy(w, wk, 4, np.float32(1e-8), nin, nout, N)
    np.testing.assert_allclose(a, b, rtol=1e-6)
    assert np.all(np.isfinite(a))


def test_quorum_boundary_hand_worked():
    w = np.array([1.0], dtype=np.float32)
    wk = np.array([[1.1], [1.2], [1.3], [1.4]], dtype=np.float32)  # rel changes .1 .2 .3 .4
    nin = np.array([0])
    nout = np.array([-1])
    s = neuron_scores(w, wk, 3, np.float32(0.0), nin, nout, 1)[0]  # 75% of 4 clients = 3
    assert s == pytest.approx(0.3, rel=1e-6)
    assert neuron_scores(w, wk, 4, np.float32(0.0), nin, nout, 1)[0] == pytest.approx(0.4, rel=1e-6)


def test_zero_weights_no_nan():
    w = np.zeros(4, dtype=np.float32)
    wk = np.zeros((3, 4), dtype=np.float32)
    s = neuron_scores(w, wk, 2, np.float32(1e-8), np.array([0, 0, 1, 1]), np.full(4, -1), 2)
    assert np.all(s == 0.0)


def _redundant_setup(seed=0):
    torch.manual_seed(seed)
    m = models.mlp(10, 3, 20)
    gs = submodel.groups(m)
    g = gs[0]
    with torch.no_grad():
        m[3].weight[:, 10:] *= 0.01  # units 10..19 of layer 1 barely matter downstream
    gstate = {k: v.clone() for k, v in m.state_dict().items()}
    rng = np.random.default_rng(seed)
    clients = []
    for _ in range(4):
        s = {k: v.clone() for k, v in gstate.items()}
        for k in s:
            s[k] += torch.as_tensor(rng.normal(scale=0.2, size=tuple(s[k].shape)), dtype=torch.float32) * s[k].abs()
        w1 = s[f"{g.name}.weight"]
        w1[10:] = gstate[f"{g.name}.weight"][10:] * (1 + 1e-4)   # low-update units: tiny changes
        s[f"{g.name}.bias"][10:] = gstate[f"{g.name}.bias"][10:] * (1 + 1e-4)
        s["3.weight"][:, 10:] = gstate["3.weight"][:, 10:] * (1 + 1e-4)
        clients.append(s)
    return m, gs, gstate, clients


def test_invariant_set_monotone_in_threshold():
    m, gs, gstate, clients = _redundant_setup()
    pol = fl.InvariantDropout()
    pol.observe(gstate, clients)
    pol.masks(0.5, gs, np.random.default_rng(0))
    prev = -1
    for th in np.logspace(-6, 1, 30):
        n = int(pol.invariant(gs[0].name, th).sum())
        assert n >= prev
        prev = n


def test_invariant_beats_random_on_redundant_units():
    m, gs, gstate, clients = _redundant_setup()
    pol = fl.InvariantDropout()
    pol.observe(gstate, clients)
    rng = np.random.default_rng(0)
    mi = pol.masks(0.5, gs, rng)
    dropped = np.flatnonzero(~mi[gs[0].name])
    overlap_inv = np.isin(dropped, np.arange(10, 20)).mean()
    overlaps, errs_r = [], []
    x = torch.randn(64, 1, 10)
    full = m.eval()(x).detach()
    err_i = (submodel.extract_submodel(m, mi).eval()(x) - full).pow(2).mean().item()
    for s in range(20):
        mr = fl.RandomDropout().masks(0.5, gs, np.random.default_rng(s))
        overlaps.append(np.isin(np.flatnonzero(~mr[gs[0].name]), np.arange(10, 20)).mean())
        errs_r.append((submodel.extract_submodel(m, mr).eval()(x) - full).pow(2).mean().item())
    assert overlap_inv == 1.0
    assert overlap_inv > np.mean(overlaps) + 0.3
    assert err_i < np.mean(errs_r)


def test_invariant_prefers_last_rounds_drops_and_is_deterministic():
    m, gs, gstate, clients = _redundant_setup()
    a, b = fl.InvariantDropout(), fl.InvariantDropout()
    for p in (a, b):
        p.observe(gstate, clients)
    ma = a.masks(0.75, gs, np.random.default_rng(1))
    mb = b.masks(0.75, gs, np.random.default_rng(1))
    assert all(np.array_equal(ma[k], mb[k]) for k in ma)
    m2 = a.masks(0.5, gs, np.random.default_rng(2))
    assert np.all(~m2[gs[0].name][~ma[gs[0].name]])  # earlier drops still dropped
    assert all(v.sum() >= 1 for v in m2.values())


# ---------------------------------------------------------------------- profiling
def test_width_buckets():
    assert profiling.choose_width(0.65) == 0.65
    assert profiling.choose_width(0.651) == 0.75
    assert profiling.choose_width(0.2) == 0.5
    assert profiling.choose_width(0.96) == 1.0
    assert profiling.choose_width(1.3) == 1.0


def test_profiler_targets_next_slowest_and_swaps_with_hysteresis():
    pr = profiling.StragglerProfiler(4)
    assert pr.plan() == {0: 1, 1: 1, 2: 1, 3: 1}
    pr.observe({0: 1.0, 1: 1.2, 2: 1.5, 3: 2.0}, {})
    plan = pr.plan()
    assert plan[3] == 0.75 and plan[0] == plan[1] == plan[2] == 1.0   # 1.5 / 2.0 = 0.75
    # client 1 becomes much slower: swap, then frozen for one round
    pr.observe({0: 1.0, 1: 3.0, 2: 1.5, 3: 1.5}, {3: 0.75})
    plan = pr.plan()
    assert pr.stragglers == [1] and plan[1] == 0.75   # target = client 3's 2.0 full time / 3.0 -> 0.75
    pr.observe({0: 1.0, 1: 1.5, 2: 1.5, 3: 2.5}, {1: 0.75})
    pr.plan()
    assert pr.stragglers == [1]   # frozen this round
    with pytest.raises(ValueError):
        profiling.StragglerProfiler(1)


# ---------------------------------------------------------------------- data
def test_leaf_femnist_and_shakespeare(tmp_path):
    rng = np.random.default_rng(0)
    fem = {"users": ["w1", "w2"], "num_samples": [5, 4],
           "user_data": {"w1": {"x": rng.random((5, 784)).tolist(), "y": [1, 2, 3, 4, 5]},
                         "w2": {"x": rng.random((4, 784)).tolist(), "y": [0, 0, 1, 61]}}}
    (tmp_path / "fem").mkdir()
    (tmp_path / "fem" / "all_data_0.json").write_text(json.dumps(fem))
    d = data.load_leaf(str(tmp_path / "fem"), "femnist", test_fraction=0.25)
    assert len(d.clients) == 2 and d.clients[0][0].shape[1:] == (1, 28, 28) and d.classes == 62
    assert sum(len(c[1]) for c in d.clients) + len(d.test[1]) == 9
    sh = {"users": ["ROMEO"], "num_samples": [2],
          "user_data": {"ROMEO": {"x": ["a" * 80, "b" * 80], "y": ["c", "d"]}}}
    (tmp_path / "sh").mkdir()
    (tmp_path / "sh" / "x.json").write_text(json.dumps(sh))
    s = data.load_leaf(str(tmp_path / "sh"), "shakespeare", test_fraction=0.0)
    x, y = s.clients[0]
    assert x.shape == (2, 80) and data.SHAKESPEARE_CHARS[y[0]] in "cd"
    with pytest.raises(ValueError, match="LEAF"):
        data.load_leaf(str(tmp_path / "nothing"))


def test_cifar_pickles(tmp_path):
    rng = np.random.default_rng(0)
    for name, n in (("data_batch_1", 20), ("data_batch_2", 20), ("test_batch", 10)):
        with open(tmp_path / name, "wb") as fh:
            pickle.dump({b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
                         b"labels": rng.integers(0, 10, n).tolist()}, fh)
    d = data.load_cifar10(str(tmp_path), clients=2, alpha=None)
    assert sum(len(c[1]) for c in d.clients) == 40 and d.test[0].shape == (10, 3, 32, 32)
    assert d.test[0].max() <= 1.0


def test_partitioners():
    rng = np.random.default_rng(0)
    y = np.repeat(np.arange(10), 50)
    parts = data.iid_partition(y, 5, rng)
    assert sorted(np.concatenate(parts).tolist()) == list(range(500))
    parts = data.dirichlet_partition(y, 5, 0.3, rng)
    assert sorted(np.concatenate(parts).tolist()) == list(range(500))
    # strong skew: some client's label histogram is far from uniform
    skew = max(np.bincount(y[p], minlength=10).max() / len(p) for p in parts)
    assert skew > 0.2
    with pytest.raises(ValueError, match="alpha"):
        data.dirichlet_partition(y, 5, 0.0, rng)


# ---------------------------------------------------------------------- simulation
def test_simulation_round_time_and_json(tmp_path):
    pytest.importorskip("sklearn")
    lat = [1.0, 1.2, 1.4, 1.6, 2.2]
    res = fl.simulate("digits", clients=5, method="invariant", rounds=4, latency_s=lat, out=tmp_path / "f.json")
    assert res.rounds[0].round_time_s == pytest.approx(2.2)
    for r in res.rounds[1:]:
        assert r.p == {4: 0.75}
        assert r.round_time_s <= 1.6 * 1.10
    from cosearch.fl.simulation import FLResult
    back = FLResult.from_json(tmp_path / "f.json")
    assert back.to_dict() == res.to_dict()
    assert all(0 <= r.accuracy <= 1 and np.isfinite(r.loss) for r in res.rounds)


def test_fl_cli(tmp_path, capsys):
    pytest.importorskip("sklearn")
    from cosearch.cli import main
    out = tmp_path / "fl.json"
    assert main(["fl", "simulate", "--dataset", "digits", "--clients", "3", "--method", "ordered",
                 "--rounds", "2", "--out", str(out)]) == 0
    png = tmp_path / "fl.png"
    assert main(["fl", "report", str(out), "--plot", str(png)]) == 0
    assert png.stat().st_size > 1000
    assert main(["fl", "simulate", "--dataset", "mnist9", "--rounds", "1", "--out", str(out)]) == 2


def test_simulation_on_leaf_shakespeare_uses_lstm(tmp_path):
    rng = np.random.default_rng(0)
    chars = data.SHAKESPEARE_CHARS
    ud = {}
    for u in ("A", "B", "C"):
        xs = ["".join(rng.choice(list(chars[10:40]), 80)) for _ in range(12)]
        ud[u] = {"x": xs, "y": [s[-1] for s in xs]}
    (tmp_path / "d.json").write_text(json.dumps({"users": list(ud), "num_samples": [12] * 3, "user_data": ud}))
    d = data.load_leaf(str(tmp_path), "shakespeare", test_fraction=0.25)
    res = fl.simulate(d, method="invariant", rounds=3, latency_s=[1.0, 1.2, 2.0], batch_size=4)
    assert res.model == "char_lstm"
    assert res.rounds[1].p == {2: 0.65}
    assert all(np.isfinite(r.loss) for r in res.rounds)


def test_residual_stage_shares_one_drop_set():
    torch.manual_seed(0)
    m = models.ResMLP(12, 4, width=10, hidden=16, blocks=2).eval()
    gs = submodel.groups(m)
    assert [g.name for g in gs] == ["stage", "blocks.0.hidden", "blocks.1.hidden"]
    ms = fl.RandomDropout().masks(0.6, gs, np.random.default_rng(3))
    sub = submodel.extract_submodel(m, ms).eval()
    x = torch.randn(5, 12)
    keep_stage = torch.as_tensor(ms["stage"], dtype=torch.float32)
    with torch.no_grad():
        h = m.act(m.stem(m.flatten(x))) * keep_stage
        for i, b in enumerate(m.blocks):
            kh = torch.as_tensor(ms[f"blocks.{i}.hidden"], dtype=torch.float32)
            h = (h + b.fc2(b.act(b.fc1(h)) * kh)) * keep_stage
        ref = m.head(h)
        torch.testing.assert_close(sub(x), ref, rtol=1e-5, atol=1e-6)
    assert all(b.fc2.out_features == int(ms["stage"].sum()) for b in sub.blocks)
    new, rej = submodel.merge_updates(m.state_dict(), [(sub.state_dict(), ms, 3)], gs)
    assert not rej
    for k, v in m.state_dict().items():
        torch.testing.assert_close(new[k], v)
