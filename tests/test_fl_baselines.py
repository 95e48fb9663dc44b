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


# ------------------------------------------------------------------ HeteroFL's training and averaging rules
def test_heterofl_scaler_and_masked_loss_step_by_hand():
    """One SGD step of a HeteroFL client at rate 1/2 on a 1-hidden-layer MLP: the Scaler divides
    the hidden layer's output by the rate (h = relu((W1 x + b1) / r)), the logits of labels the
    client does not hold are zeroed before the cross-entropy; the step equals autograd of that
    function written out by hand."""
    import torch

    from cosearch.fl.simulation import train_local
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(5, 6), torch.nn.ReLU(), torch.nn.Linear(6, 4))
    x = torch.randn(8, 5)
    y = torch.tensor([0, 2, 0, 2, 2, 0, 0, 2])              # the client holds labels 0 and 2 of 4
    mask = np.array([True, False, True, False])
    w1, b1, w2, b2 = (p.detach().clone().requires_grad_() for p in net.parameters())
    logits = torch.relu((x @ w1.T + b1) / 0.5) @ w2.T + b2
    logits = logits * torch.as_tensor(mask, dtype=torch.float32)
    torch.nn.functional.cross_entropy(logits, y).backward()
    want = [p.detach() - 0.1 * p.grad for p in (w1, b1, w2, b2)]
    train_local(net, x.numpy(), y.numpy(), 1, "sgd", 0.1, 8, torch.Generator().manual_seed(0),
                label_mask=mask, scale_rate=0.5, example=x[:1])
    for got, w in zip(net.parameters(), want):
        torch.testing.assert_close(got.detach(), w, rtol=1e-5, atol=1e-6)
    out = net(x)                                             # the hooks are gone after training
    torch.testing.assert_close(out, torch.relu(x @ net[0].weight.T + net[0].bias) @ net[2].weight.T + net[2].bias)


def test_heterofl_averages_clients_not_examples_and_splits_the_output_by_label():
    """HeteroFL's aggregation by hand: two clients, one with 100 examples of labels {0, 1} at
    full width, one with 1 example of labels {1, 2} at width 1/2.  Each hidden unit both hold is
    the plain mean of the two (not 100:1); the units only the wide client holds take its value;
    the classifier's row 0 is the first client's, row 1 the mean, row 2 the second's (and, for the
    hidden units only the wide client holds, which lacks label 2, the old global value)."""
    import torch

    from cosearch.fl.server import ClientUpdate, RoundProtocol
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 3))
    proto = RoundProtocol(model, 2, "heterofl", example_input=torch.zeros(1, 3), seed=0)
    full = proto.assignments(1, [0, 1])[0]
    from cosearch.fl.server import Assignment
    half = Assignment(1, 0.5, proto.policy.masks(0.5, proto.groups, np.random.default_rng(0)))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    a = {k: torch.full_like(v, 1.0) for k, v in model.state_dict().items()}
    sub = proto.submodel(half).state_dict()
    b = {k: torch.full_like(v, 3.0) for k, v in sub.items()}
    proto.aggregate(1, {0: full, 1: half}, [ClientUpdate(0, a, 100, 1.0, labels=(0, 1)),
                                            ClientUpdate(1, b, 1, 1.0, labels=(1, 2))])
    st = model.state_dict()
    assert torch.equal(st["0.weight"][:2], torch.full((2, 3), 2.0))          # both hold units 0-1
    assert torch.equal(st["0.weight"][2:], torch.full((2, 3), 1.0))          # only the wide client
    assert torch.equal(st["2.weight"][:2, 2:], torch.full((2, 2), 1.0))
    assert torch.equal(st["2.weight"][2, 2:], before["2.weight"][2, 2:])      # nobody holding label 2 trained it
    assert st["2.weight"][:, :2].tolist() == [[1.0, 1.0], [2.0, 2.0], [3.0, 3.0]]   # rows by label
    assert st["2.bias"].tolist() == [1.0, 2.0, 3.0]


def test_heterofl_tiers_in_stated_proportions():
    """Fixed proportions deal tiers so every prefix of clients holds its share (10 clients at 20 /
    30 / 50 %: exactly 2, 3 and 5); dynamic ones are drawn each round from the shares."""
    pol = masks.HeteroFL({1.0: 0.2, 0.5: 0.3, 0.125: 0.5})
    tiers = [pol.width(1.0, c, None) for c in range(10)]
    assert (tiers.count(1.0), tiers.count(0.5), tiers.count(0.125)) == (2, 3, 5)
    assert pol.width(0.1, 7, None) == tiers[7]                # the controller's keep does not move it
    dyn = masks.HeteroFL({1.0: 0.25, 0.25: 0.75}, dynamic=True)
    rng = np.random.default_rng(0)
    draws = [dyn.width(1.0, 0, rng) for _ in range(4000)]
    assert abs(draws.count(0.25) / 4000 - 0.75) < 0.03
    with pytest.raises(ValueError, match="summing to 1"):
        masks.HeteroFL({1.0: 0.5, 0.5: 0.4})
    with pytest.raises(ValueError, match="not among"):
        masks.HeteroFL({0.3: 1.0})
