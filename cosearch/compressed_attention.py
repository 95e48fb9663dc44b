"""DeepSeek-V4's hybrid compressed attention: what each layer attends to, and its sizes.

DeepSeek-V4 (``deepseek4-284b.yml`` and ``layers/attention_compressed.py`` in
AI-Hypercomputer/maxtext at e591f30; Megatron-Bridge's ``DSv4HybridSelfAttention``) gives every
layer one shared key/value head (``wkv``, K = V) and a low-rank query (``wq_a`` to a
``q_lora_rank`` latent, ``wq_b`` up to the heads).  Each layer's ``compress_ratio`` ``r`` decides
what a query meets besides the raw keys of its sliding ``window``:

* ``r = 0``: the window only;
* ``r = 4``, *compressed sparse attention* (CSA): a compressor pools every 4 tokens into one
  entry over an overlapping 8-token window (``kv_proj`` and ``gate_proj`` to ``2 x head_dim``,
  a softmax-gated sum), and an *indexer* (``index_heads`` heads of ``index_head_dim`` on the
  query latent, against its own compressed keys) scores every visible entry and keeps the
  ``index_topk`` best;
* ``r > 4``, *heavily compressed attention* (HCA): non-overlapping ``r``-token blocks pooled into
  one entry each (projections to ``head_dim``), every visible entry attended.

A compressed entry is visible to a query once its whole block precedes it: query ``t`` (from 0)
sees ``floor((t + 1) / r)`` of them (the ``future_mask`` of the HCA compressor and the indexer).
The output is a grouped low-rank projection: the heads' outputs split into ``o_groups`` groups,
each projected to ``o_lora_rank`` (``o_a_proj``), then all groups to the hidden size
(``o_b_proj``).

The plans price identical layers, so :func:`cosearch.graph.build` prices a layer at the mean over
the layers of the kinds' work; the sums here are exact.
"""

from __future__ import annotations

from dataclasses import dataclass

from ._validate import MAX_DIM, shown_int

__all__ = ["CompressedAttention", "window_pairs", "visible_entries", "selected_entries"]

#: The ratio whose layers run compressed *sparse* attention (an overlapping compressor and the
#: top-k indexer); larger ratios are heavily compressed (``attention_compressed.py``:
#: ``compress_ratio > 4`` HCA, ``== 4`` CSA).
CSA_RATIO = 4


def window_pairs(seq_len: int, window: int) -> int:
    """Keys summed over the queries of causal attention within a sliding ``window`` (a query
    meets itself and the ``window - 1`` tokens before it): ``sum_t min(t + 1, window)``."""
    s, w = int(seq_len), int(window)
    if w >= s:
        return s * (s + 1) // 2
    return w * s - w * (w - 1) // 2


def visible_entries(seq_len: int, ratio: int) -> int:
    """Compressed entries summed over the queries: ``sum_{u=1..s} floor(u / r)``, which is
    ``r q (q - 1) / 2 + q (rem + 1)`` for ``s = q r + rem``."""
    s, r = int(seq_len), int(ratio)
    q, rem = divmod(s, r)
    return r * q * (q - 1) // 2 + q * (rem + 1)


def selected_entries(seq_len: int, ratio: int, topk: int) -> int:
    """Compressed entries attended summed over the queries when each keeps at most ``topk`` of
    its visible ones: ``sum_{u=1..s} min(topk, floor(u / r))``."""
    s, r, k = int(seq_len), int(ratio), int(topk)
    full_from = k * r                  # floor(u / r) >= k from u = k r on
    if s < full_from:
        return visible_entries(s, r)
    return visible_entries(full_from - 1, r) + k * (s - full_from + 1)


def _whole(name: str, x, low: int = 1) -> int:
    if isinstance(x, bool) or not isinstance(x, int) or x < low:
        raise ValueError(f"CompressedAttention.{name} must be an integer >= {low}, got {x!r}")
    if x > MAX_DIM:
        raise ValueError(f"CompressedAttention.{name} = {shown_int(x)} is larger than any model's ({MAX_DIM:,} at "
                         "most): a typo or a unit slip?")
    return x


@dataclass(frozen=True)
class CompressedAttention:
    """DeepSeek-V4's attention sizes (see the module docstring).  ``ratios``: each layer's
    ``compress_ratio`` (0, 4 or more than 4; as many as the model's layers, the multi-token
    prediction layer's left out); ``window``: the sliding window in tokens; ``q_lora_rank``:
    the query latent; ``o_groups`` / ``o_lora_rank``: the grouped output projection;
    ``index_heads`` / ``index_head_dim`` / ``index_topk``: the CSA indexer; ``rope_head_dim``:
    the rotary dims of each head (rotated on the queries, the keys, the compressed entries and
    back on the outputs).  DeepSeek-V4-Flash (``deepseek4-284b.yml``): 2 window layers, then 4
    and 128 alternating, window 128, ranks 1024, 8 output groups, an indexer of 64 x 128 keeping
    512, 64 rotary dims."""

    ratios: tuple[int, ...]
    window: int
    q_lora_rank: int
    o_groups: int
    o_lora_rank: int
    index_heads: int
    index_head_dim: int
    index_topk: int
    rope_head_dim: int = 64

    def __post_init__(self) -> None:
        try:
            ratios = tuple(self.ratios)
        except TypeError:
            raise ValueError(f"CompressedAttention.ratios must be a sequence of per-layer ratios, "
                             f"got {self.ratios!r}") from None
        if not ratios:
            raise ValueError("CompressedAttention.ratios is empty: give one compress ratio per layer")
        for r in ratios:
            if isinstance(r, bool) or not isinstance(r, int) or not (r == 0 or r >= CSA_RATIO):
                raise ValueError(f"CompressedAttention.ratios: {r!r} is not a DeepSeek-V4 layer kind; each ratio is 0 "
                                 f"(window only), {CSA_RATIO} (compressed sparse) or above {CSA_RATIO} "
                                 "(heavily compressed)")
        object.__setattr__(self, "ratios", ratios)
        for f in ("window", "q_lora_rank", "o_groups", "o_lora_rank", "index_heads", "index_head_dim",
                  "index_topk"):
            _whole(f, getattr(self, f))
        _whole("rope_head_dim", self.rope_head_dim, 0)

    # ---------------------------------------------------------------- the layer kinds
    @property
    def num_layers(self) -> int:
        return len(self.ratios)

    @property
    def csa_layers(self) -> int:
        """Layers of compressed sparse attention (ratio 4: the indexer's)."""
        return sum(1 for r in self.ratios if r == CSA_RATIO)

    @property
    def hca_layers(self) -> tuple[int, ...]:
        """The ratios of the heavily compressed layers."""
        return tuple(r for r in self.ratios if r > CSA_RATIO)

    def check_model(self, num_layers: int, heads: int, head_dim: int) -> None:
        """Refuse sizes that do not fit the model (a ratio per layer, whole output groups)."""
        if len(self.ratios) != num_layers:
            raise ValueError(f"CompressedAttention.ratios has {len(self.ratios)} entries for a model of {num_layers} "
                             "layers: give one compress ratio per layer (drop the multi-token prediction layer's)")
        if heads % self.o_groups:
            raise ValueError(f"CompressedAttention.o_groups={self.o_groups} must divide the {heads} heads")
        if self.rope_head_dim > head_dim:
            raise ValueError(f"CompressedAttention.rope_head_dim={self.rope_head_dim} exceeds the head size {head_dim}")

    # ---------------------------------------------------------------- per-query work
    def _layer_counts(self, seq_len: int, ratio: int) -> tuple[int, int]:
        """(keys attended, compressed entries the indexer scores), summed over the queries of one
        layer of ``ratio``: its window, plus a CSA layer's selected entries (and its indexer's
        every visible one) or an HCA layer's visible entries."""
        s = int(seq_len)
        keys = window_pairs(s, self.window)
        if ratio == CSA_RATIO:
            return keys + selected_entries(s, ratio, self.index_topk), visible_entries(s, ratio)
        return keys + (visible_entries(s, ratio) if ratio else 0), 0

    def mean_keys(self, seq_len: int) -> float:
        """Keys one query meets, the mean over queries and layers: its window, plus the CSA
        layers' selected entries and the HCA layers' visible ones."""
        return sum(self._layer_counts(seq_len, r)[0] for r in self.ratios) / (self.num_layers * int(seq_len))

    def mean_index_keys(self, seq_len: int) -> float:
        """Compressed entries the indexer scores for one query, the mean over queries and layers
        (zero on the layers without an indexer)."""
        return sum(self._layer_counts(seq_len, r)[1] for r in self.ratios) / (self.num_layers * int(seq_len))

    def layer_core_flops(self, seq_len: int, heads: int, head_dim: int) -> list[float]:
        """Each layer's forward attention-core and indexer-score FLOPs per token: ``4 heads
        head_dim`` per key (QK^T and PV) and ``2 index_heads index_head_dim`` per scored entry."""
        s = int(seq_len)
        return [(4.0 * heads * head_dim * keys + 2.0 * self.index_heads * self.index_head_dim * index) / s
                for keys, index in (self._layer_counts(s, r) for r in self.ratios)]

    def core_flops_per_token(self, seq_len: int, heads: int, head_dim: int) -> float:
        """Forward FLOPs of one layer's attention core and indexer scores per token, the mean
        over layers (of :meth:`layer_core_flops`)."""
        per = self.layer_core_flops(seq_len, heads, head_dim)
        return sum(per) / len(per)

    # ---------------------------------------------------------------- sizes
    def compressor_width(self, head_dim: int) -> float:
        """The compressors' ``kv_proj`` + ``gate_proj`` output width, the mean over layers
        (``2 x 2 head_dim`` on CSA layers, which pool overlapping windows; ``2 head_dim`` on HCA
        layers; none on window layers)."""
        return (self.csa_layers * 4 * head_dim + len(self.hca_layers) * 2 * head_dim) / self.num_layers

    @property
    def csa_share(self) -> float:
        """The share of layers with an indexer."""
        return self.csa_layers / self.num_layers

    def params(self, hidden: int, heads: int, head_dim: int, kv_heads: int = 1) -> float:
        """Attention parameters of one layer, the mean over the layers (exact in total): the
        learned sinks (one per head), ``wq_a`` + its norm, ``wq_b`` + the per-head query norm,
        ``wkv`` + its norm, the grouped ``o_a_proj`` (``heads head_dim o_lora_rank`` in all) and
        ``o_b_proj``; per compressor ``kv_proj``, ``gate_proj``, the position bias (``ratio x``
        their width) and a norm; per indexer its query projection from the latent, its own
        compressor (width ``2 index_head_dim`` each) and the per-head weights projection."""
        h, a, d, qr = hidden, heads, head_dim, self.q_lora_rank
        common = (a + h * qr + qr + qr * a * d + d + h * kv_heads * d + d
                  + a * d * self.o_lora_rank + self.o_groups * self.o_lora_rank * h)
        ih, idd = self.index_heads, self.index_head_dim
        csa = (2 * h * 2 * d + CSA_RATIO * 2 * d + d
               + qr * ih * idd + 2 * h * 2 * idd + CSA_RATIO * 2 * idd + idd + h * ih)
        hca = sum(2 * h * d + r * d + d for r in self.hca_layers)
        return common + (self.csa_layers * csa + hca) / self.num_layers
