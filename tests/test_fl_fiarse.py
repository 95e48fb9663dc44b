"""FIARSE (cosearch.fl.fiarse) against its paper's and code's rules, worked by hand on a 2x2
Linear layer: the top-k magnitude threshold, the masked forward, the threshold-controlled
gradient, the one-vote-per-client entry average, the sub-model's bytes and FLOPs, and the refusal
of recurrent models."""

import numpy as np
import pytest
import torch
import torch.nn as nn

from cosearch.fl import fiarse


def _layer():
    lin = nn.Linear(2, 2)
    with torch.no_grad():
        lin.weight.copy_(torch.tensor([[0.1, -0.5], [0.3, 0.05]]))
        lin.bias.copy_(torch.tensor([0.2, -0.4]))
    return lin


def test_threshold_is_the_kth_largest_magnitude_over_all_masked_parameters():
    lin = _layer()                      # magnitudes 0.5, 0.4, 0.3, 0.2, 0.1, 0.05 (N = 6)
    assert fiarse.threshold(lin, 0.5) == pytest.approx(0.3)          # k = 3
    assert fiarse.threshold(lin, 0.34) == pytest.approx(0.4)         # k = int(2.04) = 2
    assert fiarse.threshold(lin, 0.1) == pytest.approx(0.5)          # k = max(1, 0)
    assert fiarse.threshold(lin, 1.0) == 0.0
    assert fiarse.threshold(lin, 4 / 6) == pytest.approx(0.2)        # k = 4 exactly, not 3.9999
    m = fiarse.parameter_masks(lin, 0.3)
    assert m["weight"].tolist() == [[False, True], [True, False]] and m["bias"].tolist() == [False, True]
    with pytest.raises(ValueError, match="model size"):
        fiarse.threshold(lin, 0.0)


def test_masked_forward_and_threshold_controlled_gradient_by_hand():
    """theta = 0.3, x = (1, 2), loss = sum of outputs.  Forward: row 0 keeps -0.5 only (-1.0),
    row 1 keeps 0.3 and the bias -0.4 (0.3 - 0.4 = -0.1).  Backward: d loss / d w_eff = x_j (1
    for the bias), times 1 + 2 theta |w| / (|w| + theta)^2 on kept entries, 0 elsewhere:
    -0.5: 2 x (1 + 0.3 / 0.64); 0.3: 1 x 1.5; bias -0.4: 1 + 0.24 / 0.49."""
    lin = _layer()
    x = torch.tensor([[1.0, 2.0]])
    with fiarse.masked_training(lin, 0.3):
        out = lin(x)
        out.sum().backward()
    np.testing.assert_allclose(out.detach().numpy(), [[-1.0, -0.1]], rtol=1e-6)
    gw = lin.weight.grad.numpy()
    np.testing.assert_allclose(gw, [[0.0, 2 * (1 + 0.3 / 0.64)], [1.5, 0.0]], rtol=1e-6)
    np.testing.assert_allclose(lin.bias.grad.numpy(), [0.0, 1 + 0.24 / 0.49], rtol=1e-6)
    # the same factors from the documented closed form
    np.testing.assert_allclose(fiarse.tcb_gradient_factor([[0.1, -0.5], [0.3, 0.05]], 0.3),
                               [[0.0, 1.46875], [1.5, 0.0]])
    # after the block the parameters are plain again and hold the raw weights
    assert not hasattr(lin, "parametrizations") and set(lin.state_dict()) == {"weight", "bias"}
    assert lin.weight[0, 0].item() == pytest.approx(0.1)


def test_a_weight_that_shrinks_below_the_threshold_leaves_the_submodel():
    lin = _layer()
    x = torch.tensor([[1.0, 2.0]])
    with fiarse.masked_training(lin, 0.3):
        with torch.no_grad():
            lin.parametrizations.weight.original[1, 0] = 0.29       # 0.3 -> 0.29 < theta
        out = lin(x)
    np.testing.assert_allclose(out.detach().numpy(), [[-1.0, -0.4]], rtol=1e-6)


def test_sparse_bytes_and_flops_by_hand():
    lin = _layer()
    # kept at 0.3: two weights and one bias entry, 4 bytes each
    assert fiarse.sparse_bytes(lin, 0.3) == 12
    # forward 2 x 2 x 2 = 8 FLOPs a sample, the weight half kept, x 3 for training, 5 samples
    assert fiarse.sparse_training_flops(lin, torch.zeros(2, 2), 0.3, 5) == pytest.approx(3 * 8 * 0.5 * 5)


def test_entries_are_averaged_over_the_clients_that_trained_them_one_vote_each():
    """A full client returns W + 1 (10 examples), a FIARSE client at theta = 0.3 returns W + 3 (30
    examples): its three kept entries average to W + 2, the other three are W + 1 (the full
    client's alone)."""
    from cosearch.fl.server import Assignment, ClientUpdate, RoundProtocol
    net = nn.Sequential(_layer())
    proto = RoundProtocol(net, 2, "fiarse", example_input=torch.zeros(2, 2), keep_rule="fluid")
    w0 = {k: v.clone() for k, v in net.state_dict().items()}
    full = {}
    assigns = {0: Assignment(0, 1.0, full), 1: Assignment(1, 0.5, full, threshold=0.3)}
    ups = [ClientUpdate(0, {k: v + 1 for k, v in w0.items()}, 10, 1.0),
           ClientUpdate(1, {k: v + 3 for k, v in w0.items()}, 30, 1.0)]
    rep = proto.aggregate(1, assigns, ups)
    assert rep.accepted == [0, 1]
    new = net.state_dict()
    np.testing.assert_allclose((new["0.weight"] - w0["0.weight"]).numpy(), [[1, 2], [2, 1]], rtol=1e-6)
    np.testing.assert_allclose((new["0.bias"] - w0["0.bias"]).numpy(), [1, 2], rtol=1e-6)


def test_a_straggler_gets_the_parameter_budget_of_its_width():
    """An 8-16-16-3 MLP at keep 0.5 keeps 8 units of each hidden layer: (8 x 8 + 8) + (8 x 8 + 8) +
    (3 x 8 + 3) = 171 of (8 x 16 + 16) + (16 x 16 + 16) + (3 x 16 + 3) = 467 parameters, so its
    threshold is the 171st largest magnitude."""
    from cosearch.fl import models
    from cosearch.fl.server import RoundProtocol
    torch.manual_seed(0)
    net = models.mlp(8, 3, 16)
    proto = RoundProtocol(net, 3, "fiarse", example_input=torch.zeros(2, 8), keep_rule="fluid")
    mags = np.sort(np.concatenate([p.detach().abs().numpy().ravel() for p in net.parameters()]))[::-1]
    assert len(mags) == 467
    assert proto.parameter_threshold(0.5) == pytest.approx(float(mags[170]))
    a = proto.assignments(3, [0])
    assert a[0].threshold is None                      # nobody is a straggler before round 3's decision


def test_recurrent_models_are_refused_by_name():
    from cosearch.fl import models
    from cosearch.fl.server import RoundProtocol
    net = models.build_model("shakespeare_lstm")
    with pytest.raises(ValueError, match="recurrent layer"):
        RoundProtocol(net, 3, "fiarse", example_input=torch.zeros(2, 80, dtype=torch.long), keep_rule="fluid")


def test_simulate_runs_fiarse():
    """simulate() runs FIARSE end to end: the straggler's keep becomes a threshold (the Flower
    client's parity is in tests/test_flower.py)."""
    from cosearch import fl
    r = fl.simulate("digits", clients=4, method="fiarse", rounds=4)
    assert r.rounds[-1].keep and all(np.isfinite(m.accuracy) for m in r.rounds)
