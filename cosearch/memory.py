"""Training-memory model: parameters, gradients, optimizer state and activations.

Per chip, for the layers of one pipeline stage under tensor parallelism ``tp``:

* **static** = params/tp x (weight + gradient + optimizer bytes).  Mixed-precision
  Adam keeps bf16 weights (2) and gradients (2) plus fp32 master weights, momentum
  and variance (12): 16 bytes/param (:class:`MemoryConfig`).  ZeRO-1 divides the
  optimizer part by the data-parallel degree.
* **activations, stash** (Korthikanti et al., "Reducing Activation Recomputation
  in Large Transformer Models", 2022, eq. 2/3), per layer and microbatch of ``b``
  sequences of length ``s``, hidden ``h``, ``a`` heads, in bytes for 2-byte
  activations with 1-byte dropout masks::

      s b h (10 + 24/t + 5 a s / (h t))          without sequence parallelism
      s b h (34 / t + 5 a s / (h t))             with sequence parallelism

  The 24 sbh of the MLP/attention projections (= 4 + 16 + 4 for QKV input, MLP
  input/activation and attention output) is generalised to other MLP widths and
  gated MLPs, GQA's smaller K/V, dtypes other than 2 bytes and no-dropout models
  (see :func:`layer_activation_bytes`); for a GPT-style layer it is the paper's formula.
* **activations, recompute**: only the layer input ``2 s b h`` (``/t`` with sequence
  parallelism) per layer and microbatch, plus one layer's full stash while that
  layer is recomputed in the backward pass.
* **1F1B**: stage ``i`` of ``p`` keeps ``min(p - i, m)`` microbatches in flight.
"""

from __future__ import annotations

from dataclasses import dataclass

from .models import ModelConfig

__all__ = ["MemoryConfig", "layer_activation_bytes", "layer_input_bytes", "static_bytes",
           "in_flight", "stage_memory_bytes"]


@dataclass(frozen=True)
class MemoryConfig:
    """Bytes per parameter and activation options."""

    weight_bytes: float = 2.0
    grad_bytes: float = 2.0
    optimizer_bytes: float = 12.0
    zero1: bool = False
    sequence_parallel: bool = False

    def __post_init__(self) -> None:
        for f in ("weight_bytes", "grad_bytes", "optimizer_bytes"):
            if getattr(self, f) < 0:
                raise ValueError(f"MemoryConfig.{f} must be >= 0, got {getattr(self, f)!r}")

    @property
    def bytes_per_param(self) -> float:
        return self.weight_bytes + self.grad_bytes + self.optimizer_bytes


def layer_activation_bytes(config: ModelConfig, tp: int, microbatch: int,
                           sequence_parallel: bool = False) -> float:
    """Activations one transformer layer stashes for its backward pass, per chip."""
    c = config
    s, b, h, a, t = c.seq_len, microbatch, c.hidden, c.heads, tp
    e = c.dtype_bytes / 2.0  # the formula counts 2-byte activations
    mask = 1.0 if c.dropout else 0.0
    kv_ratio = c.kv_heads / c.heads
    # replicated (not split by tp unless sequence parallel): 2 LN inputs (4), residual
    # dropout masks (2), QKV + MLP inputs (LN outputs, 4)
    replicated = (4.0 * e + 2.0 * mask + 4.0 * e)
    # split by tp: Q, K, V (2 each, K/V scaled for GQA), attention output proj input (2),
    # attention dropout mask region handled below, MLP: fc1 output and activation output
    f_ratio = c.ffn_hidden / h
    mlp = 2.0 * f_ratio * (3.0 if c.gated else 2.0) * e  # fc1 (and gate) output + activation output
    qkv = 2.0 * (1.0 + 2.0 * kv_ratio) * e + 2.0 * e
    split = qkv + mlp
    # attention scores: softmax output (2), dropout mask (1), dropout output (2) per a s^2 b
    attn = (2.0 * e + mask * 1.0 + mask * 2.0 * e) * a * s / h
    if sequence_parallel:
        per = (replicated + split) / t + attn / t
    else:
        per = replicated + split / t + attn / t
    return s * b * h * per


def layer_input_bytes(config: ModelConfig, tp: int, microbatch: int,
                      sequence_parallel: bool = False) -> float:
    """The layer input kept under full recomputation, per chip."""
    n = config.seq_len * microbatch * config.hidden * config.dtype_bytes
    return n / tp if sequence_parallel else float(n)


def static_bytes(params_per_chip: float, dp: int, mem: MemoryConfig) -> float:
    """Weights + gradients + optimizer state of ``params_per_chip`` parameters."""
    opt = mem.optimizer_bytes / dp if mem.zero1 else mem.optimizer_bytes
    return params_per_chip * (mem.weight_bytes + mem.grad_bytes + opt)


def in_flight(stage: int, stages: int, microbatches: int) -> int:
    """Microbatches whose activations stage ``stage`` (0-based) holds under 1F1B."""
    return min(stages - stage, microbatches)


def stage_memory_bytes(params_per_chip: float, act_stash: list[float], act_input: list[float],
                       stage: int, stages: int, microbatches: int, dp: int, recompute: bool,
                       mem: MemoryConfig) -> float:
    """Peak memory per chip of one pipeline stage holding layers with the given
    per-layer stash / input activation bytes."""
    n = in_flight(stage, stages, microbatches)
    if recompute:
        act = n * sum(act_input) + (max(act_stash) if act_stash else 0.0)
    else:
        act = n * sum(act_stash)
    return static_bytes(params_per_chip, dp, mem) + act
