
import numpy as np
import pytest

from cosearch import graph, models


def gpt(**kw):
    base = dict(name="g", num_layers=2, hidden=256, heads=8, ffn_hidden=1024, vocab=1000, seq_len=64)
    base.update(kw)
    return models.ModelConfig(**base)


@pytest.mark.parametrize("tp", [1, 2, 4, 8])
@pytest.mark.parametrize("b", [1, 3])
def test_forward_tensor_flops_closed_form(tp, b):
    c = gpt()
    g = graph.build(c, tp=tp, microbatch=b)
    T, h, s = b * c.seq_len, c.hidden, c.seq_len
    # Megatron: 24 T h^2 for the four GEMMs + 4 b s^2 h for QK^T and PV, all / tp
    expected = (24 * T * h * h + 4 * b * s * s * h) / tp
    assert g.tensor_flops == pytest.approx(expected)


def test_backward_is_twice_forward_tensor_flops():
    for name in ("gpt3-1.3b", "llama2-7b", "llama2-70b"):
        c = models.preset(name)
        f = graph.build(c, tp=8, phase="fwd")
        bw = graph.build(c, tp=8, phase="bwd")
        assert bw.tensor_flops == pytest.approx(2 * f.tensor_flops)


def test_gated_gqa_flops():
    c = models.preset("llama2-70b")
    g = graph.build(c, tp=8)
    T, h, f, kv = c.seq_len, c.hidden, c.ffn_hidden, c.kv_dim
    gemm = 2 * T * (h * h + 2 * h * kv + h * h + 3 * h * f) / 8
    attn = 4 * c.seq_len ** 2 * h / 8
    assert g.tensor_flops == pytest.approx(gemm + attn)


def test_allreduce_points():
    c = gpt()
    for phase in ("fwd", "bwd"):
        assert len(graph.build(c, tp=1, phase=phase).allreduce_bytes) == 0
        ar = graph.build(c, tp=4, microbatch=2, phase=phase).allreduce_bytes
        assert ar == [2 * 64 * 256 * 2] * 2


def test_backward_has_dgrad_and_wgrad_for_every_gemm():
    g = graph.build(gpt(), phase="bwd")
    names = set(g.names())
    for w in ("qkv", "attn_out", "fc1", "fc2"):
        assert f"{w}.dgrad" in names and f"{w}.wgrad" in names
    # nothing depends on a wgrad
    wg = {i for i, n in enumerate(g.names()) if n.endswith("wgrad")}
    assert not any(d in wg for op in g.ops for d in op.deps)


def test_head_and_embedding():
    c = gpt()
    h = graph.build(c, tp=2, part="head")
    # the 1,000-word vocabulary padded to a multiple of 128 x 2 (1,024), 512 columns a rank
    assert h.tensor_flops == pytest.approx(2 * 64 * 512 * 256)
    e = graph.build(c, tp=1, part="embedding")
    assert e.tensor_flops == 0 and len(e) >= 1


@pytest.mark.parametrize("kw,match", [(dict(tp=3), "tp=3"), (dict(tp=0), "tp"),
                                      (dict(microbatch=0), "microbatch"), (dict(phase="x"), "phase"),
                                      (dict(part="x"), "part")])
def test_bad_input(kw, match):
    with pytest.raises(ValueError, match=match):
        graph.build(gpt(), **kw)


def test_cycle_rejected():
    a = graph.Op("a", "vector", deps=(1,), elements=1, ops_per_element=1)
    b = graph.Op("b", "vector", deps=(0,), elements=1, ops_per_element=1)
    with pytest.raises(ValueError, match="cycle"):
        graph.LayerGraph("bad", (a, b))


def test_from_module_matches_analytic():
    torch = pytest.importorskip("torch")
    import torch.nn as nn

    class Block(nn.Module):
        def __init__(self, h, heads, f):
            super().__init__()
            self.h, self.heads = h, heads
            self.ln1 = nn.LayerNorm(h)
            self.qkv = nn.Linear(h, 3 * h)
            self.out = nn.Linear(h, h)
            self.ln2 = nn.LayerNorm(h)
            self.fc1 = nn.Linear(h, f)
            self.act = nn.GELU()
            self.fc2 = nn.Linear(f, h)

        def forward(self, x):
            b, s, h = x.shape
            d = h // self.heads
            q, k, v = self.qkv(self.ln1(x)).split(h, dim=-1)
            q = q.view(b, s, self.heads, d).transpose(1, 2)
            k = k.view(b, s, self.heads, d).transpose(1, 2)
            v = v.view(b, s, self.heads, d).transpose(1, 2)
            att = torch.softmax((q @ k.transpose(-2, -1)) * (1.0 / d ** 0.5), dim=-1)
            y = (att @ v).transpose(1, 2).reshape(b, s, h)
            x = x + self.out(y)
            return x + self.fc2(self.act(self.fc1(self.ln2(x))))

    c = gpt(dropout=False)
    blk = Block(c.hidden, c.heads, c.ffn_hidden)
    traced = graph.from_module(blk, torch.zeros(2, c.seq_len, c.hidden))
    analytic = graph.build(c, tp=1, microbatch=2)
    assert traced.total_flops == pytest.approx(analytic.total_flops)
    assert traced.tensor_flops == pytest.approx(analytic.tensor_flops)
    assert sum(o.kind == "gemm" for o in traced.ops) == 4
    assert sum(o.kind == "bmm" for o in traced.ops) == 2


def test_from_module_unsupported_layer_named():
    torch = pytest.importorskip("torch")
    m = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Conv1d(1, 1, 1))
    with pytest.raises(ValueError, match="Conv1d"):
        graph.from_module(m, torch.zeros(1, 4))


def _nano_block(torch, nn, E, H):
    import torch.nn.functional as F

    class Block(nn.Module):
        """nanoGPT's block: pre-norm, fused qkv, F.scaled_dot_product_attention (causal), 4x MLP."""

        def __init__(self):
            super().__init__()
            self.ln_1 = nn.LayerNorm(E)
            self.c_attn = nn.Linear(E, 3 * E)
            self.c_proj = nn.Linear(E, E)
            self.ln_2 = nn.LayerNorm(E)
            self.c_fc = nn.Linear(E, 4 * E)
            self.gelu = nn.GELU()
            self.mlp_proj = nn.Linear(4 * E, E)

        def forward(self, x):
            B, T, C = x.size()
            q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
            q = q.view(B, T, H, C // H).transpose(1, 2)
            k = k.view(B, T, H, C // H).transpose(1, 2)
            v = v.view(B, T, H, C // H).transpose(1, 2)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            y = y.transpose(1, 2).contiguous().view(B, T, C)
            x = x + self.c_proj(y)
            return x + self.mlp_proj(self.gelu(self.c_fc(self.ln_2(x))))
    return Block()


def test_from_module_standard_layers_closed_forms():
    torch = pytest.importorskip("torch")
    import torch.nn as nn
    N, L, E, H, F_ = 2, 16, 64, 4, 128
    d = E // H
    rows = N * L
    proj = 2 * rows * E * E
    attn = 2 * (2 * N * H * L * L * d)
    x = torch.zeros(N, L, E)
    mha = graph.from_module(nn.MultiheadAttention(E, H, batch_first=True), (x, x, x))
    assert mha.tensor_flops == pytest.approx(4 * proj + attn)
    enc = graph.from_module(nn.TransformerEncoderLayer(E, H, F_, batch_first=True), x)
    assert enc.tensor_flops == pytest.approx(4 * proj + attn + 2 * (2 * rows * E * F_))
    assert sum(o.kind == "vector" and "norm" in o.name for o in enc.ops) == 2
    seq_first = graph.from_module(nn.MultiheadAttention(E, H), (x.transpose(0, 1),) * 3)
    assert seq_first.tensor_flops == pytest.approx(mha.tensor_flops)
    nano = graph.from_module(_nano_block(torch, nn, E, H), x)
    causal = attn / 2
    assert nano.tensor_flops == pytest.approx(2 * rows * E * 3 * E + proj + 2 * (2 * rows * E * 4 * E) + causal)
    assert sum(o.kind == "attention" for o in nano.ops) == 1


def test_from_module_names_what_it_cannot_do():
    torch = pytest.importorskip("torch")
    import torch.nn as nn

    class Branchy(nn.Module):
        def forward(self, x):
            return x if x.sum() > 0 else -x
    with pytest.raises(ValueError, match="could not trace Branchy"):
        graph.from_module(Branchy(), torch.zeros(2, 2))

    class Erf(nn.Module):
        def forward(self, x):
            return torch.special.erf(x)
    with pytest.raises(ValueError, match="erf"):
        graph.from_module(Erf(), torch.zeros(2, 2))


def _gemm_flops(g):
    return sum(op.flops for op in g.ops if op.kind in ("gemm", "bmm", "attention"))


def test_from_module_handles_todays_attention_blocks():
    """Hand-counted FLOPs on 2 sequences of 16 tokens, width 64, 4 heads of 16 (32 tokens)."""
    torch = pytest.importorskip("torch")
    from tests import modules_for_tracing as mt
    x = torch.randn(2, 16, 64)
    T, h = 32, 64
    # nanoGPT: c_attn, c_proj, and q k^T, att v over 8 (batch x head) 16 x 16 x 16 products
    g = graph.from_module(mt.NanoGPTAttention(), x)
    assert _gemm_flops(g) == 2 * T * h * 3 * h + 2 * T * h * h + 2 * (2 * 16 * 16 * 16 * 8)
    assert {op.kind for op in g.ops} == {"gemm", "bmm", "vector"}
    # HF RMSNorm: square, mean, add eps, rsqrt, scale, weight (the dtype casts are free)
    g = graph.from_module(mt.HFRMSNorm(64), x)
    assert [op.kind for op in g.ops] == ["vector"] * 6 and _gemm_flops(g) == 0
    # Llama-style GQA: q and o (64 x 64), k and v (64 x 32), causal SDPA (half of 4 s^2 d per head)
    g = graph.from_module(mt.HFLlamaAttention(), x)
    assert _gemm_flops(g) == 2 * T * (h * h + 2 * h * 32 + h * h) + 4 * 16 * 16 * 16 * 8 // 2
    assert any(op.name.startswith("repeat_interleave") for op in g.ops)
    # masked multi-head attention: the mask changes nothing in the FLOPs (no causal skip assumed)
    g = graph.from_module(mt.MaskedMHA(), x)
    assert _gemm_flops(g) == 2 * T * h * 3 * h + 2 * T * h * h + 4 * 16 * 16 * 16 * 8
    # nn.TransformerEncoder of 2 layers (d_ff 256): twice the layer's projections, FFN and attention
    g = graph.from_module(mt.encoder(), x)
    per_layer = 2 * T * h * 3 * h + 2 * T * h * h + 2 * 2 * T * h * 256 + 4 * 16 * 16 * 16 * 8
    assert _gemm_flops(g) == 2 * per_layer


def test_from_module_names_an_unsupported_op():
    torch = pytest.importorskip("torch")

    class Odd(torch.nn.Module):
        def forward(self, x):
            return torch.fft.fft(x).real
    with pytest.raises(ValueError, match=r"fft"):
        graph.from_module(Odd(), torch.randn(2, 8))


def test_lm_head_vocabulary_is_padded_per_rank_as_megatron_does():
    """Megatron-LM pads the vocabulary to a multiple of 128 x tp (make-vocab-size-divisible-by):
    GPT-2's 50,257 at tp 8 is 51,200, 6,400 a rank; Llama 3's 128,256 at tp 1 is already aligned."""
    from cosearch.graph import vocab_shard
    assert vocab_shard(50257, 8) == 51200 // 8
    assert vocab_shard(50257, 1) == 50304
    assert vocab_shard(128256, 1) == 128256
    assert vocab_shard(128256, 8) == 129024 // 8
    cfg = models.preset("gpt3-175b")
    head = graph.build(cfg, tp=8, phase="fwd", part="head")
    lm = next(o for o in head.ops if o.name == "lm_head")
    assert lm.n == 6400 and lm.n % 128 == 0


@pytest.mark.parametrize("name,tp,mb,cp,precision,sp", [
    ("qwen3-30b-a3b", 1, 1, 1, "fp8", False), ("qwen3-30b-a3b", 2, 2, 1, "bf16", True),
    ("mixtral-8x7b", 2, 3, 1, "fp8", False), ("deepseek-v3", 1, 1, 2, "fp8", False)])
def test_expert_parallel_graphs_derived_from_ep2_equal_built_ones(name, tp, mb, cp, precision, sp):
    """A dropless MoE layer at ep 4 or 8 derived from its ep-2 graphs (only the experts' ops
    rebuilt) is op for op, and row for row, the graph built at that ep."""
    m = models.preset(name)
    for dispatcher in ("alltoall", "flex"):
        opts = dict(precision=precision, sequence_parallel=sp, context_parallel=cp, flash_attention=True,
                    moe_dispatcher=dispatcher)
        f2, b2 = graph.build_pair(m, tp, mb, expert_parallel=2, **opts)
        for ep in (4, 8):
            f, b = graph.build_pair(m, tp, mb, expert_parallel=ep, **opts)
            if dispatcher == "alltoall" and m.num_experts == ep:
                # one expert a rank: no regrouping, which the ep-2 graphs have; refused, not mixed
                assert not any(o.name == "moe_sort" for o in f.ops)
                with pytest.raises(ValueError, match="build the graphs at this ep"):
                    graph.with_expert_parallel(f2, b2, m, tp, mb, ep, cp, precision)
                continue
            df, db = graph.with_expert_parallel(f2, b2, m, tp, mb, ep, cp, precision, moe_dispatcher=dispatcher)
            assert df == f and db == b
            assert np.array_equal(df.arrays(), f.arrays()) and np.array_equal(db.arrays(), b.arrays())
    with pytest.raises(ValueError, match="dropless MoE layer at ep >= 2"):
        graph.with_expert_parallel(f2, b2, m.with_(moe_capacity_factor=1.0), tp, mb, 4, cp, precision)


@pytest.mark.filterwarnings("ignore:The tensor attributes")   # torch.export on the GRU's flat weights
def test_from_module_prices_or_names_ops_with_several_outputs():
    """An op returning several tensors was taken for free (its output had no single shape): a
    router's top-k vanished from the graph and an nn.GRU traced to no op at all, priced 0 s.  The
    top-k is now one pass over the router's scores (8 x 6 of them); the GRU is refused by name;
    split/chunk stay free views."""
    torch = pytest.importorskip("torch")
    import torch.nn as nn

    class Router(nn.Module):
        def __init__(self):
            super().__init__()
            self.gate = nn.Linear(16, 6, bias=False)

        def forward(self, x):
            probs = torch.softmax(self.gate(x), dim=-1)
            weights, idx = torch.topk(probs, 2, dim=-1)
            return weights

    g = graph.from_module(Router(), torch.randn(2, 4, 16))
    top = [o for o in g.ops if "topk" in o.name]
    assert len(top) == 1 and top[0].kind == "vector" and top[0].elements == 2 * 4 * 6
    assert [o.kind for o in g.ops] == ["gemm", "vector", "vector"]

    class Recurrent(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = nn.GRU(16, 16)

        def forward(self, x):
            return self.rnn(x)[0]
    with pytest.raises(ValueError, match="gru"):
        graph.from_module(Recurrent(), torch.randn(8, 2, 16))

    class Halves(nn.Module):
        def forward(self, x):
            a, b = x.chunk(2, dim=-1)
            return a * b
    assert [o.kind for o in graph.from_module(Halves(), torch.randn(2, 8)).ops] == ["vector"]
