"""Sliding-window attention (ModelConfig.sliding_window / sliding_layers): pairs by brute force, the
fused attention op's FLOPs, the refusals."""

import pytest


def test_sliding_window_attention_pairs_and_flops_by_brute_force():
    """The (query, key) pairs of causal attention within a window, counted on a mask, over the
    full causal pairs; and the fused attention op of a model whose layers are half windowed
    prices 2 s^2 d per head times 1 - 1/2 + 1/2 x that ratio (s = 8, window 3: 21 of 36 pairs)."""
    import numpy as np

    from cosearch import graph
    from cosearch.models import ModelConfig, attention_pair_ratio
    for s, w in ((8, 3), (100, 7), (64, 64), (5, 9), (4096, 128)):
        i = np.arange(s)
        mask = (i[None, :] <= i[:, None]) & (i[:, None] - i[None, :] < w)
        assert attention_pair_ratio(s, w) == pytest.approx(mask.sum() / (s * (s + 1) / 2), rel=1e-12)
    m = ModelConfig("w", 4, 72, 2, 144, 50, 8, activation="swiglu", norm="rmsnorm", position="rotary",
                    dropout=False, sliding_window=3, sliding_layers=2)
    assert m.attention_flops_share == pytest.approx(0.5 + 0.5 * 21 / 36)
    ops = {op.name: op for op in graph.build(m, 1, 1, flash_attention=True).ops}
    att = ops["attn_core"]
    # the share scales the keys met: n = 8 x (1/2 + 21/72) = 6.33 -> 6, k the head dim 36
    assert (att.n, att.k, att.head_dim) == (round(8 * m.attention_flops_share), 36, 36)
    assert att.flops == pytest.approx(2 * 8 * round(8 * m.attention_flops_share) * 36 * 2)
    full = {op.name: op for op in graph.build(m.with_(sliding_layers=0, sliding_window=None), 1, 1,
                                                          flash_attention=True).ops}["attn_core"]
    assert full.flops == pytest.approx(2 * 8 * 8 * 36 * 2)
    with pytest.raises(ValueError, match="sliding-window attention is not modelled"):
        graph.check_context_parallel(m, 2, True)
    with pytest.raises(ValueError, match="needs sliding_window"):
        ModelConfig("w", 4, 72, 2, 144, 50, 8, sliding_layers=2)
