"""FjORD and HeteroFL as methods: their width rules, and a run's per-width accuracy."""

import numpy as np
import pytest

from cosearch import fl
from cosearch.fl import masks
from cosearch.fl.experiment import Experiment
from cosearch.fl.simulation import FLResult


def test_fjord_trains_per_batch_widths_uniform_up_to_the_clients_tier():
    """FjORD (Horváth et al. 2021; Flower Baselines' default, no distillation): a client gets its
    widest affordable width p_max, and each local batch trains a width drawn uniformly from P up
    to p_max (here 0.65: 0.2, 0.4, 0.6, a third each over 600 batches, 3 sigma ~ 0.06)."""
    import torch

    from cosearch.fl.models import mlp
    from cosearch.fl.simulation import train_nested
    pol = masks.policy("fjord")
    rng = np.random.default_rng(0)
    assert [pol.width(k, 0, rng) for k in (1.0, 0.85, 0.65, 0.4, 0.1)] == [1.0, 0.8, 0.6, 0.4, 0.2]
    assert pol.nested and not pol.distill and pol.widths() == masks.FJORD_WIDTHS
    torch.manual_seed(0)
    model = mlp(6, 3, hidden=10)
    x, y = np.random.default_rng(0).normal(size=(600, 6)).astype(np.float32), np.arange(600) % 3
    drawn = train_nested(model, x, y, 1, "sgd", 0.01, 1, torch.Generator().manual_seed(0),
                         masks.fjord_widths_within(0.65), {"1": 10, "3": 10}, torch.as_tensor(x[:2]), distill=False)
    counts = np.array([drawn.count(w) for w in (0.2, 0.4, 0.6)])
    assert len(drawn) == 600 and counts.sum() == 600
    assert np.all(np.abs(counts / 600 - 1 / 3) < 0.06)


def test_nested_widths_keep_the_first_ceil_p_k_units():
    """FjORD's ordered dropout keeps the first ceil(p K) units of a K-unit layer (the paper,
    sec. 3; HeteroFL's code rounds up too): 0.2 of 32 -> 7 (6.4 up), 0.85 of 20 -> 17, 0.5 of 3
    -> 2, 0.0625 of 10 -> 1; FLuID's ordered baseline keeps its own int(p K) (0.2 of 32 -> 6)."""
    from cosearch.fl.submodel import Group
    assert [masks.nested_units(p, k) for p, k in ((0.2, 32), (0.85, 20), (0.5, 3), (0.0625, 10), (1.0, 7))] == \
        [7, 17, 2, 1, 7]
    g = [Group("a", 32, (), ()), Group("b", 3, (), ())]
    rng = np.random.default_rng(0)
    for name in ("fjord", "fjord-kd", "heterofl"):
        m = masks.policy(name).masks(0.2, g, rng)
        assert (m["a"].sum(), m["b"].sum()) == (7, 1) and m["a"][:7].all()
    assert masks.policy("ordered").masks(0.2, g, rng)["a"].sum() == 6


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


@pytest.mark.parametrize("method", ["fjord", "fjord-kd", "heterofl"])
def test_nested_methods_run_and_report_accuracy_per_width(method, tmp_path):
    res = fl.simulate("digits", clients=4, method=method, rounds=4, seed=1, out=tmp_path / "r.json")
    widths = masks.FJORD_WIDTHS if method.startswith("fjord") else masks.HETEROFL_TIERS
    assert sorted(res.width_accuracy) == sorted(widths)
    assert res.width_accuracy[1.0] == pytest.approx(res.rounds[-1].accuracy)   # the full width is the model
    assert all(0.0 <= a <= 1.0 for a in res.width_accuracy.values())
    for r in res.rounds:
        assert all(k in widths for k in r.keep.values())
    if method.startswith("fjord"):                                  # p_max: below 1 only for stragglers
        assert res.rounds[0].keep == res.rounds[1].keep == {}
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


def test_fjord_kd_gives_each_client_its_widest_affordable_width():
    pol = masks.policy("fjord-kd")
    rng = np.random.default_rng(0)
    assert [pol.width(k, 0, rng) for k in (1.0, 0.85, 0.65, 0.4, 0.1)] == [1.0, 0.8, 0.6, 0.4, 0.2]
    assert pol.distill and pol.widths() == masks.FJORD_WIDTHS


def _manual_grads(params, x, y, keep, soft=None):
    """A 2-hidden-layer ReLU MLP written out by hand on the first ``keep`` hidden units of each
    layer: (W1, b1, W2, b2, W3, b3) -> their gradients of the cross-entropy (or of the
    soft-label cross-entropy against ``soft``)."""
    import torch
    w1, b1, w2, b2, w3, b3 = (p.detach().clone() for p in params)
    cut = [w1[:keep].requires_grad_(), b1[:keep].requires_grad_(), w2[:keep, :keep].requires_grad_(),
           b2[:keep].requires_grad_(), w3[:, :keep].requires_grad_(), b3.clone().requires_grad_()]
    h = torch.relu(x @ cut[0].T + cut[1])
    h = torch.relu(h @ cut[2].T + cut[3])
    logits = h @ cut[4].T + cut[5]
    logp = torch.log_softmax(logits, 1)
    loss = -(soft * logp).sum(1).mean() if soft is not None else -logp[torch.arange(len(y)), y].mean()
    loss.backward()
    full = [torch.zeros_like(p) for p in params]
    full[0][:keep] = cut[0].grad
    full[1][:keep] = cut[1].grad
    full[2][:keep, :keep] = cut[2].grad
    full[3][:keep] = cut[3].grad
    full[4][:, :keep] = cut[4].grad
    full[5] = cut[5].grad
    return full, logits.detach()


@pytest.mark.parametrize("distill", [False, True])
def test_nested_step_equals_the_hand_written_narrow_network(distill):
    """One SGD step of :func:`train_nested` on one batch moves every weight by -lr times the
    gradient of the drawn width's network, written out by hand (plus, with self-distillation, the
    full width's label loss, the drawn width then learning the full width's softmax)."""
    import torch

    from cosearch.fl.models import mlp
    from cosearch.fl.simulation import train_nested
    torch.manual_seed(0)
    net = mlp(6, 3, hidden=10)
    x = torch.randn(16, 6)
    y = torch.randint(0, 3, (16,))
    full_units = {"1": 10, "3": 10}
    seen = set()
    for seed in range(8):
        model = mlp(6, 3, hidden=10)
        model.load_state_dict(net.state_dict())
        before = [p.detach().clone() for p in model.parameters()]
        gen = torch.Generator().manual_seed(seed)
        drawn = train_nested(model, x.numpy(), y.numpy(), 1, "sgd", 0.1, 16, gen, (0.4, 1.0), full_units,
                             x[:2], distill=distill)
        assert len(drawn) == 1
        seen.add(drawn[0])
        keep = 4 if drawn[0] == 0.4 else 10
        grads = [torch.zeros_like(p) for p in before]
        soft = None
        if distill:
            g_full, logits = _manual_grads(before, x, y, 10)
            grads = [a + b for a, b in zip(grads, g_full)]
            soft = logits.softmax(1)
        g_w, _ = _manual_grads(before, x, y, keep, soft)
        grads = [a + b for a, b in zip(grads, g_w)]
        for b, g, p in zip(before, grads, model.parameters()):
            torch.testing.assert_close(p.detach(), b - 0.1 * g, rtol=1e-5, atol=1e-6)
    assert seen == {0.4, 1.0}                                       # both paths checked


def test_nested_flops_by_hand():
    """FjORD's expected round cost: the mean of its widths' training FLOPs, plus the widest
    model's forward and backward when distilling (an MLP's FLOPs are its weight count times 6
    per example: forward 2, backward 4)."""
    import torch

    from cosearch.fl.models import mlp
    from cosearch.fl.simulation import _nested_flops
    net = mlp(6, 3, hidden=10)
    units = {"1": 10, "3": 10}

    def weights(k):                                       # first k units of both hidden layers
        return 6 * k + k * k + k * 3

    per_example = {1.0: 6 * weights(10), 0.4: 6 * weights(4)}
    ex = torch.randn(2, 6)
    from cosearch.fl.profiling import training_flops
    scale = training_flops(net, ex, 1) / per_example[1.0]   # the profiler's own unit convention
    got = _nested_flops(net, ex, units, (0.4, 1.0), 1, 1, distill=False)
    assert got == pytest.approx(scale * (per_example[0.4] + per_example[1.0]) / 2, rel=0.05)
    kd = _nested_flops(net, ex, units, (0.4, 1.0), 1, 1, distill=True)
    assert kd - got == pytest.approx(training_flops(net, ex, 1), rel=1e-12)


@pytest.mark.parametrize("name", ["shakespeare_lstm", "resmlp", "femnist_cnn"])
def test_nested_cut_of_a_cut_equals_the_direct_cut(name):
    """FjORD's nested widths inside a client's sub-model: cutting the first 25% of the full
    model's units out of its first-50% sub-model gives the same weights as cutting them from the
    full model directly (the groups of a cut model report its own sizes: an LSTM sub-model's
    used to report the full hidden size)."""
    import torch

    from cosearch.fl import models as fm
    from cosearch.fl.simulation import nested_masks
    from cosearch.fl.submodel import extract_submodel, groups
    shape, classes = {"shakespeare_lstm": ((80,), 80), "resmlp": ((64,), 10), "femnist_cnn": ((1, 28, 28), 62)}[name]
    torch.manual_seed(0)
    net = fm.build_model(name, shape, classes)
    x = torch.randint(0, 80, (2, 80)) if name == "shakespeare_lstm" else torch.rand(2, *shape)
    full = groups(net, x)
    units = {g.name: g.units for g in full}
    half = extract_submodel(net, nested_masks(full, units, 0.5), x)
    cut = groups(half, x)
    assert [g.units for g in cut] == [u - masks.drop_count(0.5, u) for u in units.values()]
    via_half = extract_submodel(half, nested_masks(cut, units, 0.25), x).state_dict()
    direct = extract_submodel(net, nested_masks(full, units, 0.25), x).state_dict()
    assert via_half.keys() == direct.keys()
    for k in direct:
        torch.testing.assert_close(via_half[k], direct[k], rtol=0, atol=0)
