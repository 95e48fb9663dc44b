"""ZeRO-3's working memory on the last stage, in its two phases (the head's and the layers'),
hand-worked from the tensors live in each, and checked against what XLA's buffer assignment
keeps live at the peak of MaxText's own v6e Gemma recipes compiled ahead of time
(``cosearch/data/maxtext_compiled_live.csv``)."""

import csv
from pathlib import Path

import numpy as np
import pytest

from cosearch._kernels import formulas as F
from tests.test_gemma import priced_v6e_recipe

# one stage holding everything (pp 1): n layers of D parameters, a tied embedding of E
# parameters (the head's weight), bf16 weights, fp32 gradients, 12-byte optimizer state
D, E, n, zg = 2e8, 9e8, 4, 8.0
W, G, OPT = 2.0, 4.0, 12.0
NET = np.array([0.0, 1e11, 1e11, 0.0, 0.0, 0.0])


def _stage(mode, zero, head_act, rerun_act, ckpt_act, tied=True, span=1):
    hw = np.zeros(F.NH)
    hw[F.H_W], hw[F.H_G], hw[F.H_O], hw[F.H_GRED], hw[F.H_MEMBW], hw[F.H_HBM] = W, G, OPT, G, 1e12, 1e30
    hw[F.H_RC_LAYERS] = span
    u = np.zeros(F.NU)
    u[F.U_PL] = u[F.U_PL_FULL] = D
    u[F.U_PE] = E
    if tied:
        u[F.U_PTIED] = E
    else:
        u[F.U_PH] = E
    u[F.U_HACT], u[F.U_ACT_NONE], u[F.U_ACT_IN] = head_act, rerun_act, ckpt_act
    out = np.zeros(F.NB)
    _, mem = F.stage_terms(u, NET, hw, float(n), True, True, 0, 1, 1, 1, zg, 1.0, zero, zg, mode, out)
    return mem


def test_the_head_phase_holds_the_logits_and_the_heads_gathered_weight():
    """Full recompute, logits larger than a rerunning layer: the peak is the head's backward, with
    every checkpoint, the logits, the head's weight gathered whole (E bf16 values) and the first
    layer to run backward prefetched (D values); the two layers' buffers of the layer phase are
    not live then."""
    static = (n * D + E) * (W + G + OPT) / zg
    head, rerun, ckpt = 30e9, 2e9, 1e8
    want = static + n * ckpt + head + E * W + D * W
    assert _stage(F.RC_FULL, 3, head, rerun, ckpt) == pytest.approx(want, rel=1e-12)
    # the same without ZeRO-3 (ZeRO-1): nothing is gathered; the larger of the logits and a
    # rerunning layer, as before
    static1 = (n * D + E) * (W + G + OPT / zg)
    assert _stage(F.RC_FULL, 1, head, rerun, ckpt) == pytest.approx(static1 + n * ckpt + head, rel=1e-12)


def test_the_layer_phase_holds_a_rerunning_layer_two_layers_and_a_tied_embeddings_gradient():
    """A rerunning layer larger than the logits: the peak is a layer's backward, the logits freed,
    two layers gathered (2 D) and the tied embedding's gradient still whole (E bf16 values: it
    waits for the embedding's own backward before its reduce-scatter); untied, the head's
    gradient is reduce-scattered after its backward and nothing of its size stays."""
    static = (n * D + E) * (W + G + OPT) / zg
    head, rerun, ckpt = 1e8, 5e9, 1e8
    base = static + n * ckpt
    assert _stage(F.RC_FULL, 3, head, rerun, ckpt) == pytest.approx(base + rerun + 2 * D * W + E * W, rel=1e-12)
    untied = (n * D + 2 * E) * (W + G + OPT) / zg + n * ckpt     # an embedding and a head of E each
    assert _stage(F.RC_FULL, 3, head, rerun, ckpt, tied=False) == pytest.approx(untied + rerun + 2 * D * W, rel=1e-12)


def test_without_recompute_the_layers_activations_stay_through_the_heads_phase():
    """No recompute: every layer's activations are held through the head's backward too, so the
    head's phase is the larger whenever the head's weight outweighs a layer's and its gradient."""
    static = (n * D + E) * (W + G + OPT) / zg
    head, act = 3e9, 1e9
    want = static + n * act + head + E * W + D * W
    assert _stage(F.RC_NONE, 3, head, act, 0.0) == pytest.approx(want, rel=1e-12)


LIVE = Path(__file__).parent.parent / "cosearch" / "data" / "maxtext_compiled_live.csv"
ROWS = list(csv.DictReader(open(LIVE, newline="")))


def _priced(row, tmp_path):
    return priced_v6e_recipe(tmp_path, row["model_name"], row["per_device_batch_size"])


@pytest.mark.parametrize("row", ROWS, ids=lambda r: f"{r['model_name']}-b{r['per_device_batch_size']}")
def test_the_compilers_live_buffers_are_cosearchs_terms(row, tmp_path):
    """Each role the compiler's peak holds, against cosearch's own term for it: the fp32 logits
    (two bf16 copies live from two sequences a chip; one at one), the checkpoints of every scanned
    block, the head's weight gathered whole and, in the layers' phase, the tied embedding's whole
    gradient — to the byte."""
    from cosearch import memory
    d, _ = _priced(row, tmp_path)
    m, b = d.model, int(row["per_device_batch_size"])
    table = m.vocab * m.hidden * 2                        # bf16 values of the tied embedding
    if row["peak_phase"] == "head":
        logits = memory.head_activation_bytes(m, 1, b) - b * m.seq_len * m.hidden * 2
        assert int(row["logits_bytes"]) == (logits if b > 1 else logits / 2)
        blocks = m.num_layers // d.engine.recompute_layers
        assert int(row["checkpoints_bytes"]) == blocks * memory.layer_input_bytes(m, 1, b)
        assert int(row["head_weight_bytes"]) == table
    else:
        assert int(row["embedding_grad_bytes"]) == table


@pytest.mark.parametrize("row", [r for r in ROWS if int(r["per_device_batch_size"]) > 1],
                         ids=lambda r: f"{r['model_name']}-b{r['per_device_batch_size']}")
def test_the_recipes_priced_near_the_compilers_live_peak(row, tmp_path):
    """From two sequences a chip, the plan's memory is within 5 % of what the compiler keeps live
    at its peak (arguments included); over it by at most the prefetched layer cosearch counts and
    XLA's scan does not gather before its loop."""
    _, p = _priced(row, tmp_path)
    live = int(row["live_temp_bytes"]) + int(row["argument_bytes"])
    priced = max(p.memory_per_chip_bytes)
    assert abs(priced / live - 1.0) < 0.05
