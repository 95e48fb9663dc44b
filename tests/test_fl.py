
import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402

from cosearch import fl  # noqa: E402
from cosearch.fl import models, submodel  # noqa: E402


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
    m = models.ShakespeareLSTM(vocab=20, hidden=16)
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
    m = models.ShakespeareLSTM(vocab=12, hidden=6)
    keep = np.ones(6, dtype=bool)
    keep[[1, 4]] = False
    ms = {"lstm1": keep, "lstm2": np.ones(6, dtype=bool)}
    sub = submodel.extract_submodel(m, ms)
    ref = models.ShakespeareLSTM(vocab=12, hidden=6)
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
