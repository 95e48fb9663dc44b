"""Modules from_module must handle (#27 item 8): nanoGPT attention, HF-style RMSNorm, a Llama-style
GQA attention with rotary embeddings and repeat_interleave, masked multi-head attention and
nn.TransformerEncoder."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class NanoGPTAttention(nn.Module):
    """nanoGPT's CausalSelfAttention, the non-flash path (karpathy/nanoGPT model.py)."""
    def __init__(self, n_embd=64, n_head=4, block_size=32):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.attn_dropout = nn.Dropout(0.0)
        self.resid_dropout = nn.Dropout(0.0)
        self.n_head, self.n_embd = n_head, n_embd
        self.register_buffer("bias", torch.tril(torch.ones(block_size, block_size)).view(1, 1, block_size, block_size))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        att = self.attn_dropout(att)
        y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class HFRMSNorm(nn.Module):
    """Llama's LlamaRMSNorm (transformers)."""
    def __init__(self, hidden, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


class HFLlamaAttention(nn.Module):
    """A Llama-style GQA attention with rotary embeddings and repeat_interleave of K/V heads."""
    def __init__(self, hidden=64, heads=4, kv_heads=2, seq=16):
        super().__init__()
        self.h, self.a, self.kv, self.d = hidden, heads, kv_heads, hidden // heads
        self.q_proj = nn.Linear(hidden, heads * self.d, bias=False)
        self.k_proj = nn.Linear(hidden, kv_heads * self.d, bias=False)
        self.v_proj = nn.Linear(hidden, kv_heads * self.d, bias=False)
        self.o_proj = nn.Linear(heads * self.d, hidden, bias=False)
        self.norm = HFRMSNorm(hidden)
        inv_freq = 1.0 / (10000 ** (torch.arange(0, self.d, 2).float() / self.d))
        t = torch.arange(seq).float()
        freqs = torch.outer(t, inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos", emb.cos())
        self.register_buffer("sin", emb.sin())

    def forward(self, x):
        B, T, _ = x.shape
        x = self.norm(x)
        q = self.q_proj(x).view(B, T, self.a, self.d).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.kv, self.d).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.kv, self.d).transpose(1, 2)
        cos, sin = self.cos[:T], self.sin[:T]
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(self.a // self.kv, dim=1)
        v = torch.repeat_interleave(v, self.a // self.kv, dim=1)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(y.transpose(1, 2).reshape(B, T, self.h))


class MaskedMHA(nn.Module):
    def __init__(self, d=64, h=4, seq=16):
        super().__init__()
        self.mha = nn.MultiheadAttention(d, h, batch_first=True)
        self.register_buffer("mask", torch.triu(torch.ones(seq, seq, dtype=torch.bool), 1))

    def forward(self, x):
        y, _ = self.mha(x, x, x, attn_mask=self.mask, need_weights=False)
        return y


def encoder():
    layer = nn.TransformerEncoderLayer(64, 4, 256, batch_first=True)
    return nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
