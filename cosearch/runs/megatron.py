"""Read a Megatron-LM / NeMo (Megatron-Core) argument line as a cosearch model and plan.

``cosearch plan --from-megatron-args "--tensor-model-parallel-size 8 ..."`` prices the run a
Megatron command line describes.  Every flag of the line is one of three kinds:

* **read**: it sets the plan, the engine or the model (tables below);
* **neutral**: it changes neither step time nor memory in cosearch's model (learning rate,
  data paths, logging, checkpoints, ...); these are listed back;
* anything else is **refused by name**: a flag that would change the run but that cosearch does
  not price (``--fp16``, uneven pipeline splits, ...) never
  leaves a silently different number.

Defaults are Megatron-LM's own (``megatron/training/arguments.py``): a flag the line does not
give takes the value Megatron would.

Plan and engine
===========================================  ====================================================
``--tensor-model-parallel-size``             tp
``--pipeline-model-parallel-size``           pp
``--context-parallel-size``                  context_parallel
``--expert-model-parallel-size``             expert_parallel
``--num-layers-per-virtual-pipeline-stage``  virtual stages = layers / (pp x this)
``--num-virtual-stages-per-pipeline-rank``   virtual stages (the newer spelling)
``--micro-batch-size``                       microbatch
``--global-batch-size``                      the global batch (must agree with ``--batch``)
``--recompute-granularity``                  ``full`` / ``selective`` (absent: none)
``--recompute-modules``                      with selective: the engine's ``"modules:..."`` recompute
``--expert-tensor-parallel-size``            ``expert_tensor_parallel`` (tp or 1)
``--mtp-num-layers``                         the model's ``mtp_layers`` (multi-token prediction)
``--moe-layer-freq``                         ``moe_layer_step`` (one MoE layer in k) or ``dense_layers``
``--moe-expert-capacity-factor``             ``moe_capacity_factor``, with
                                             ``--moe-pad-expert-input-to-capacity`` its padding
``--recompute-method``, ``--recompute-num-layers``  ``uniform`` (or none given) recomputes every layer,
                                             checkpointed in runs of ``--recompute-num-layers``
                                             (``Engine.recompute_layers``); ``block`` is read
                                             only when it covers every layer
``--recompute-activations``                  selective (the older spelling)
``--sequence-parallel``                      sequence parallelism
``--use-distributed-optimizer``              ZeRO-1 (Megatron's distributed optimizer)
``--overlap-grad-reduce``                    the gradient reduction overlaps the backward (absent:
                                             it runs after the backward, as Megatron's default)
``--overlap-param-gather``                   read with ``--overlap-grad-reduce`` (one overlap term)
``--fp8-format``                             FP8 (``hybrid`` or ``e4m3``)
``--fp8-recipe``                             ``scaling_recipe``: delayed (default) / tensorwise / blockwise /
                                             mxfp8, each FP8 (tensorwise with its amax passes)
``--fp4-format``, ``--fp4-recipe``           NVFP4 (``e2m1``; recipe ``nvfp4``)
``--fp8-dot-product-attention``              ``fp8_attention``: the fused attention in FP8 (MXFP8
                                             under ``--fp8-recipe mxfp8``), at the chip's measured
                                             FP8 attention speeds; without ``--fp8-format`` it does
                                             nothing (said)
``--first-last-layers-bf16``                 ``bf16_layers``: ``--num-layers-at-start-in-bf16`` and
                                             ``--num-layers-at-end-in-bf16`` (default 1 each) in bf16
``--use-flash-attn`` / ``--attention-backend flash|fused|auto``   flash attention; without
                                             either, Megatron's defaults (``--transformer-impl
                                             transformer_engine`` since April 2024,
                                             ``--attention-backend auto``): TE's fused attention,
                                             said; ``--transformer-impl local``: unfused
``--tp-comm-overlap``                        engine ``megatron-core-tp-overlap`` (needs
                                             ``--sequence-parallel`` under tp > 1, as Megatron does)
``--no-overlap-p2p-communication``           pipeline sends beside the chunks off (absent: on with
                                             virtual stages, Megatron's default since 2023-10;
                                             the older ``--overlap-p2p-communication`` turns it on)
``--fp8-param-gather``                       the engine's ``fp8_param_gather`` (FP8 plans)
``--decoder-first-pipeline-num-layers``,     ``stage_layers``: the first / last stage's layers, the rest even
``--decoder-last-pipeline-num-layers``       (Megatron-Core's ``get_num_layers_to_build``)
``--account-for-embedding-in-pipeline-split``,  ``stage_layers``: the embedding / loss counted as one layer
``--account-for-loss-in-pipeline-split``     of the first / last stage
``--accumulate-allreduce-grads-in-fp32``,   the data-parallel reduction's bytes (``Engine.grad_reduce_bytes``):
``--grad-reduce-in-bf16``,                   4 (fp32, Megatron's rule for bf16 runs, the engine named
``--main-grads-dtype``                       ``...-fp32-grad-reduce``) or 2 (bf16 reduction or main gradients)
``--use-precision-aware-optimizer`` with    the memory model's optimizer bytes (``RunConfig.memory``): the
``--main-params-dtype``, ``--exp-avg-dtype``,  main parameters' and Adam moments' bytes summed
``--exp-avg-sq-dtype``
``--cp-comm-type p2p``                       the ring cosearch prices (other types refused with cp > 1)
``--moe-flex-dispatcher-num-sms`` (older:     the flex dispatcher's SMs (``Engine.moe_comm_sms``,
``--moe-hybridep-num-sms``,                  priced beside the EP all-to-all overlap; absent:
``--moe-deepep-num-sms``)                    DeepEP's 20, HybridEP's own default)
``--use-transformer-engine-op-fuser``        the experts' bias and clamped activation inside TE's
                                             fused grouped MLP (``Engine.expert_elementwise``);
                                             absent: Megatron-Core's eager passes
``--no-rope-fusion``                         RoPE as Megatron-Core's PyTorch ops (``Engine.rope_fusion``);
                                             absent: Transformer Engine's fused RoPE
``--no-bias-swiglu-fusion``,                 the MLP's activation as PyTorch ops
``--no-bias-gelu-fusion``                    (``Engine.activation_fusion``); GeLU without linear
                                             biases always (Megatron's rule)
``--no-gradient-accumulation-fusion``        the weight gradients added to the main gradients after
                                             each backward (``Engine.grad_accum_bytes``,
                                             :func:`unfused_grad_accum_bytes`); absent: the
                                             weight-gradient GEMMs accumulate into them (Megatron's
                                             default)
===========================================  ====================================================

Read and said in ``assumed`` (cosearch prices GPU time only, so none of these changes its
number; :func:`_moe_execution`): CUDA graphs (``--cuda-graph-impl``, ``--cuda-graph-scope`` /
``--cuda-graph-modules``, the older ``--enable-cuda-graph`` and ``--external-cuda-graph``: whole
iteration, per module, or none, where an MoE run's host time goes unpriced), sync-free MoE
(``--moe-expert-rank-capacity-factor``, HybridEP only) and ``--moe-paged-stash`` with its buffer
factors, ``--moe-router-force-load-balancing`` (without it the router's own imbalance is not
priced),
``--delay-wgrad-compute`` and the router's padding for low-precision GEMMs.

Model (any of these builds the model from the line; with a ``--model`` preset as well, each one
the line gives must agree with the preset, or the line is refused naming the flag)
===========================================  ====================================================
``--num-layers``, ``--hidden-size``, ``--num-attention-heads``, ``--seq-length``  required to
                                             build a model from the line alone
``--ffn-hidden-size``                        default ``4 h``; with ``--swiglu``
                                             ``int(4 h 2/3 / 64) 64`` (Megatron's)
``--group-query-attention``, ``--num-query-groups``  kv heads (default: heads; the group
                                             count defaults to 1 with the flag, as in Megatron)
``--kv-channels``                            head size (default ``h / heads``)
``--swiglu``                                 gated MLP (default GeLU)
``--squared-relu``                           2-matrix MLP, relu(x)^2 priced as ReLU (said)
``--normalization``                          ``LayerNorm`` (default) / ``RMSNorm``
``--position-embedding-type``                ``learned_absolute`` (default) / ``rope`` / ``yarn`` / ``none``;
                                             ``yarn`` with ``--rotary-scaling-factor``, ``--mscale``,
                                             ``--mscale-all-dim``: ``rope_attention_factor``
``--use-rotary-position-embeddings``         rope (the older spelling)
``--disable-bias-linear``                    no linear biases
``--untie-embeddings-and-output-weights``    an output head of its own
``--attention-dropout``, ``--hidden-dropout``  dropout ops unless both are 0 (default 0.1)
``--vocab-size``                             the vocabulary (needed without ``--model``)
``--num-experts``, ``--moe-router-topk`` (default 2), ``--moe-ffn-hidden-size``  an MoE MLP
``--window-size``, ``--window-attn-skip-freq``  sliding-window layers (a causal window of left + 1 keys
                                             on the layers the frequency leaves windowed)
``--quick-geglu``, ``--glu-linear-offset``,  GPT-OSS's gated activation (priced as the SwiGLU) and its
``--activation-func-clamp-value``            clamp; ``--softmax-type`` learnable / off-by-one: sinks
                                             inside the fused attention, said
===========================================  ====================================================

The data-parallel degree is what the cluster's chips leave: ``chips / (tp pp cp)``, as Megatron
derives it.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field, replace

from ..engine import (
    FLEX_SMS_DEEPEP,
    MEGATRON_CORE,
    Engine,
    graph_elementwise,
    megatron_core,
    with_cross_entropy_fusion,
    with_moe_dispatch,
    with_recompute_modules,
)
from ..graph import SCALING_RECIPES, eager_rope
from ..memory import MemoryConfig
from ..models import ModelConfig, yarn_attention_factor
from ..plan import PlanSpec
from .config import RunConfig

__all__ = ["MegatronPlan", "parse_megatron_args", "read_megatron_args", "unfused_grad_accum_bytes", "NEUTRAL_FLAGS",
           "NEUTRAL_VALUED"]

#: Flags with a value that set the plan, the engine or the model.
_VALUED = {"--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--context-parallel-size",
           "--expert-model-parallel-size", "--expert-tensor-parallel-size",
           "--num-layers-per-virtual-pipeline-stage", "--num-virtual-stages-per-pipeline-rank",
           "--micro-batch-size", "--global-batch-size", "--recompute-granularity", "--recompute-method",
           "--recompute-num-layers", "--fp8-format", "--fp8-recipe", "--fp4-format", "--fp4-recipe",
           "--num-layers-at-start-in-bf16", "--num-layers-at-end-in-bf16",
           "--attention-backend", "--transformer-impl", "--optimizer", "--moe-token-dispatcher-type",
           "--moe-flex-dispatcher-backend",
           # the model
           "--num-layers", "--hidden-size", "--num-attention-heads", "--seq-length", "--ffn-hidden-size",
           "--num-query-groups", "--kv-channels", "--normalization", "--position-embedding-type",
           "--rotary-scaling-factor", "--mscale", "--mscale-all-dim",
           "--attention-dropout", "--hidden-dropout", "--vocab-size", "--num-experts", "--moe-router-topk",
           "--moe-ffn-hidden-size", "--mtp-num-layers", "--moe-expert-capacity-factor", "--moe-layer-freq",
           # MoE execution (:func:`_moe_execution`)
           "--moe-hybridep-num-sms", "--moe-deepep-num-sms", "--moe-flex-dispatcher-num-sms", "--cuda-graph-impl",
           "--moe-expert-rank-capacity-factor", "--moe-paged-stash-buffer-size-factor-cuda",
           "--moe-paged-stash-buffer-size-factor-cpu", "--moe-router-dtype", "--moe-router-num-groups",
           "--moe-router-group-topk", "--moe-router-topk-limited-devices",
           # multi-head latent attention and shared experts (the model, :func:`_model`)
           "--q-lora-rank", "--kv-lora-rank", "--qk-head-dim", "--qk-pos-emb-head-dim", "--v-head-dim",
           "--moe-shared-expert-intermediate-size",
           # the loss implementation (:func:`_cross_entropy`)
           "--cross-entropy-fusion-impl",
           # the share of a head's dimensions RoPE rotates (the model's rotary_fraction)
           "--rotary-percent",
           # Megatron-FSDP's sharding (:func:`_zero_stage`)
           "--data-parallel-sharding-strategy",
           # an uneven pipeline split (:func:`_stage_layers`)
           "--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers", "--main-grads-dtype",
           "--megatron-fsdp-grad-comm-dtype", "--megatron-fsdp-main-grads-dtype",
           # the optimizer's state (:func:`_optimizer_memory`)
           "--main-params-dtype", "--exp-avg-dtype", "--exp-avg-sq-dtype",
           # the userbuffers overlap's per-GEMM methods (a YAML file), said
           "--tp-comm-overlap-cfg",
           # GPT-OSS's attention and activation (:func:`_line_gpt_oss`)
           "--window-size", "--window-attn-skip-freq", "--softmax-type", "--glu-linear-offset",
           "--activation-func-clamp-value", "--rope-type"}
#: Flags with a list of values (every word up to the next flag), and what they list.
_MULTI_VALUED = {"--recompute-modules": "module names", "--cuda-graph-scope": "CUDA graph scopes",
                 "--cuda-graph-modules": "CUDA graph modules", "--cp-comm-type": "context-parallel communication types"}
#: Megatron's context-parallel communication types (``--cp-comm-type``, one for all layers or one
#: a layer); cosearch prices ``p2p``, the K/V ring beside the attention kernel.
CP_COMM_TYPES = ("p2p", "a2a", "allgather", "a2a+p2p")
#: Bare flags that set the plan, the engine or the model.
_FLAGS = {"--sequence-parallel", "--use-distributed-optimizer", "--use-flash-attn", "--tp-comm-overlap",
          "--fp8-param-gather", "--overlap-grad-reduce", "--overlap-param-gather", "--recompute-activations",
          "--group-query-attention", "--swiglu", "--squared-relu", "--use-rotary-position-embeddings",
          "--disable-bias-linear", "--multi-latent-attention", "--qk-layernorm", "--qk-l2-norm",
          "--untie-embeddings-and-output-weights", "--overlap-moe-expert-parallel-comm", "--moe-enable-deepep",
          "--overlap-p2p-communication", "--no-overlap-p2p-communication", "--moe-pad-expert-input-to-capacity",
          "--first-last-layers-bf16",
          # the learned position table dropped: nothing where the positions are rotary (:func:`_model`)
          "--no-position-embedding",
          # MoE execution and host-side switches (:func:`_moe_execution`), read and said in ``assumed``
          "--enable-cuda-graph", "--external-cuda-graph", "--moe-paged-stash", "--use-transformer-engine-op-fuser",
          "--moe-router-force-load-balancing", "--fp8-dot-product-attention", "--delay-wgrad-compute",
          "--moe-permute-fusion", "--moe-router-fusion", "--moe-shared-expert-overlap", "--moe-grouped-gemm",
          "--cross-entropy-loss-fusion", "--no-fp8-wgrad",
          # Megatron-FSDP (:func:`_zero_stage`), its buffers and user-buffer NCCL said
          "--use-megatron-fsdp", "--fsdp-double-buffer", "--use-nccl-ub",
          "--moe-router-padding-for-quantization", "--moe-router-padding-for-fp8",
          "--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split",
          # the gradients' reduction dtype (:func:`_grad_reduce_bytes`)
          "--accumulate-allreduce-grads-in-fp32", "--grad-reduce-in-bf16", "--use-precision-aware-optimizer",
          # the weight gradients accumulated outside the GEMMs (:func:`unfused_grad_accum_bytes`)
          "--no-gradient-accumulation-fusion",
          # Megatron-Core's PyTorch RoPE op by op (Engine.rope_fusion), and its activation
          # (Engine.activation_fusion, :func:`_activation_fusion`)
          "--no-rope-fusion", "--no-bias-swiglu-fusion", "--no-bias-gelu-fusion",
          # the first parameter all-gather beside the optimizer step (said, :func:`read_megatron_args`)
          "--overlap-param-gather-with-optimizer-step",
          # GPT-OSS's gated activation (:func:`_line_gpt_oss`)
          "--quick-geglu",
          # the unfused attention's scale, mask and softmax as separate passes (said)
          "--no-masked-softmax-fusion"}

#: Flags with a value that change neither step time nor memory in cosearch's model.
NEUTRAL_VALUED = frozenset({
    "--lr", "--min-lr", "--lr-decay-style", "--lr-decay-iters", "--lr-decay-samples", "--lr-warmup-iters",
    "--lr-warmup-samples", "--lr-warmup-fraction", "--lr-warmup-init", "--train-iters", "--train-samples",
    "--weight-decay", "--start-weight-decay", "--end-weight-decay", "--weight-decay-incr-style", "--clip-grad",
    "--adam-beta1", "--adam-beta2", "--adam-eps", "--init-method-std", "--seed", "--save", "--load",
    "--save-interval", "--eval-interval", "--eval-iters", "--log-interval", "--data-path", "--train-data-path",
    "--valid-data-path", "--test-data-path", "--split", "--vocab-file", "--merge-file", "--tokenizer-type",
    "--tokenizer-model", "--tensorboard-dir", "--tensorboard-log-interval", "--wandb-project",
    "--wandb-exp-name", "--wandb-save-dir", "--exit-interval", "--exit-duration-in-mins",
    "--distributed-backend", "--distributed-timeout-minutes", "--data-cache-path", "--timing-log-level",
    "--max-position-embeddings", "--make-vocab-size-divisible-by", "--num-workers", "--ckpt-format",
    "--dataloader-type", "--norm-epsilon", "--rotary-base", "--loss-scale",
    "--initial-loss-scale", "--min-loss-scale", "--loss-scale-window", "--hysteresis", "--log-dir",
    "--moe-aux-loss-coeff", "--moe-z-loss-coeff", "--moe-router-load-balancing-type", "--data-args-path",
    # the router's own arithmetic (its score function, scaling, expert bias and its update, the
    # drop policy under a capacity factor): one fused softmax/top-k op either way
    "--moe-router-topk-scaling-factor", "--moe-router-score-function", "--moe-router-bias-update-rate",
    "--moe-token-drop-policy",
    "--per-split-data-args-path", "--mock-data-seed",
    # host-side housekeeping, checkpoint and logging switches, and the MTP loss's weight
    "--manual-gc-interval", "--dist-ckpt-strictness", "--logging-level", "--mtp-loss-scaling-factor",
    # a weight layout the fused grouped MLP reads, and the graph warm-up steps before timing
    "--moe-mlp-glu-interleave-size", "--cuda-graph-warmup-steps", "--moe-paged-stash-page-size",
    # the embedding's own learning rate (decoupled AdamW), the tokenizer's split pattern, the
    # profiled steps, and delayed scaling's amax history (a few floats a tensor) and its reduction
    "--decoupled-lr", "--decoupled-min-lr", "--tiktoken-pattern", "--profile-step-start", "--profile-step-end",
    "--fp8-amax-history-len", "--fp8-amax-compute-algo",
    # the caching allocator emptied after each step (host time, not priced)
    "--empty-unused-memory-level",
})
#: Bare flags that change neither step time nor memory in cosearch's model (``--bf16`` is the
#: precision cosearch prices by default).
NEUTRAL_FLAGS = frozenset({
    "--bf16", "--log-throughput", "--no-load-optim", "--no-load-rng", "--use-mcore-models",
    "--no-bias-dropout-fusion",
    "--log-params-norm", "--log-num-zeros-in-grad", "--log-timers-to-tensorboard",
    "--log-validation-ppl-to-tensorboard", "--log-memory-to-tensorboard", "--log-world-size-to-tensorboard",
    "--mock-data", "--use-checkpoint-args", "--no-save-optim", "--no-save-rng", "--finetune",
    "--manual-gc", "--no-async-tensor-model-parallel-allreduce",
    "--attention-softmax-in-fp32", "--apply-query-key-layer-scaling",
    "--check-for-nan-in-loss-and-grad", "--no-check-for-nan-in-loss-and-grad",
    # pads the experts' buffers only for CUDA-graphed inference
    "--moe-pad-experts-for-cuda-graph-inference",
    # the router's expert bias and pre-softmax scoring, the probabilities applied to the experts'
    # input instead of their output, per-layer logging: no time or memory in cosearch's model
    "--moe-router-enable-expert-bias", "--moe-router-pre-softmax", "--moe-apply-probs-on-input",
    "--moe-per-layer-logging",
    # data loading and checkpoint format switches; --enable-experimental only unlocks flags, each
    # read on its own
    "--no-mmap-bin-files", "--no-create-attention-mask-in-dataloader", "--auto-detect-ckpt-format",
    "--enable-experimental", "--calculate-per-token-loss", "--init-model-with-meta-device",
    # LayerNorm1P (the weight stored as gamma - 1: the same kernel's work), a profiled window of
    # steps
    "--apply-layernorm-1p", "--profile",
    # when Megatron-FSDP registers its NCCL user buffers (with --use-nccl-ub, read and said)
    "--fsdp-manual-registration",
    # the scheduler's state from a checkpoint, LayerNorm's persistent kernel (Transformer Engine's
    # LayerNormLinear runs its own), the loss masked at end-of-document tokens, positions restarted
    # per document: the same work
    "--use-checkpoint-opt_param-scheduler", "--no-persist-layer-norm", "--eod-mask-loss", "--reset-position-ids",
})

#: Why a flag that changes the run is refused.
_REFUSED = {
    "--fp16": "FP16 with loss scaling is not modelled; train bf16 (--bf16) or FP8 (--fp8-format)",
    "--rampup-batch-size": "a batch that grows during training has no single step time",
    "--cpu-offloading": "activation offloading is not read from Megatron lines",
    "--use-torch-fsdp2": "Megatron's FSDP2 path is not read from Megatron lines (use --engine fsdp)",
}

#: ModelConfig fields a Megatron line can set, by the flag that sets them.
_MODEL_FLAGS = {"--num-layers": "num_layers", "--hidden-size": "hidden", "--num-attention-heads": "heads",
                "--seq-length": "seq_len", "--ffn-hidden-size": "ffn_hidden", "--num-query-groups": "kv_heads",
                "--kv-channels": "head_dim", "--swiglu": "activation", "--squared-relu": "activation",
                "--normalization": "norm",
                "--position-embedding-type": "position", "--use-rotary-position-embeddings": "position",
                "--disable-bias-linear": "bias", "--untie-embeddings-and-output-weights": "tie_embeddings",
                "--attention-dropout": "dropout", "--hidden-dropout": "dropout", "--vocab-size": "vocab",
                "--num-experts": "num_experts", "--moe-router-topk": "experts_per_token",
                "--moe-ffn-hidden-size": "expert_ffn", "--group-query-attention": "kv_heads",
                "--multi-latent-attention": "mla", "--moe-shared-expert-intermediate-size": "shared_experts",
                "--qk-layernorm": "qk_norm", "--qk-l2-norm": "qk_norm", "--rotary-percent": "rotary_fraction",
                "--quick-geglu": "activation", "--window-size": "sliding_window",
                "--window-attn-skip-freq": "sliding_layers", "--activation-func-clamp-value": "activation_clamp"}
#: Megatron-LM's defaults of the multi-head latent attention flags (``megatron/training/arguments.py``:
#: ``--q-lora-rank`` None, the query projected directly, cosearch's 0; ``--kv-lora-rank`` 32;
#: ``--qk-head-dim`` 128; ``--qk-pos-emb-head-dim`` 64; ``--v-head-dim`` 128).
MLA_DEFAULTS = {"--q-lora-rank": 0, "--kv-lora-rank": 32, "--qk-head-dim": 128, "--qk-pos-emb-head-dim": 64,
                "--v-head-dim": 128}
_REQUIRED_MODEL = ("--num-layers", "--hidden-size", "--num-attention-heads", "--seq-length", "--vocab-size")


@dataclass(frozen=True)
class MegatronPlan:
    """What an argument line describes: the model, the plan, its global batch, the engine its
    flags select, the flags that do not change the run (``ignored``, as given), what was
    assumed where the line is silent (Megatron's defaults, and readings cosearch approximates)
    and the bytes a parameter keeps where the line sets them (``memory``; None: the default)."""

    spec: PlanSpec
    global_batch: int
    ignored: tuple[str, ...] = ()
    engine: Engine = MEGATRON_CORE
    model: ModelConfig | None = None
    assumed: tuple[str, ...] = field(default_factory=tuple)
    memory: MemoryConfig | None = None


def _int(flag: str, value: str, minimum: int = 1) -> int:
    try:
        x = int(value)
    except ValueError:
        raise ValueError(f"{flag} needs a whole number, got {value!r}") from None
    if x < minimum:
        raise ValueError(f"{flag} must be at least {minimum}, got {x}")
    return x


def _float(flag: str, value: str, top: float = 1.0) -> float:
    try:
        x = float(value)
    except ValueError:
        raise ValueError(f"{flag} needs a number, got {value!r}") from None
    if not 0.0 <= x <= top:
        what = "a probability in [0, 1]" if top == 1.0 else f"a number in [0, {top:g}]"
        raise ValueError(f"{flag} must be {what}, got {value!r}")
    return x


def _split(text: str) -> tuple[dict[str, str], set[str], list[str]]:
    """(values of the valued flags, the bare flags read, the neutral words) of a line; refuses
    unknown flags and stray words by name."""
    try:
        words = shlex.split(text)
    except ValueError as e:
        raise ValueError(f"cannot split the Megatron argument line: {e}") from None
    vals: dict[str, str] = {}
    flags: set[str] = set()
    neutral: list[str] = []
    unknown: list[str] = []
    refused: list[str] = []
    i = 0
    while i < len(words):
        w = words[i]
        key, eq, inline = w.partition("=")
        nxt = words[i + 1] if i + 1 < len(words) else None
        has_next_value = nxt is not None and not nxt.startswith("--")
        if key in _MULTI_VALUED:
            # nargs: every following word up to the next flag
            mods = inline.split(",") if eq else []
            while i + 1 < len(words) and not words[i + 1].startswith("--"):
                mods.append(words[i + 1])
                i += 1
            if not [m for m in mods if m]:
                raise ValueError(f"{key} needs {_MULTI_VALUED[key]}")
            vals[key] = ",".join(m for m in mods if m)
        elif key in _VALUED:
            if eq:
                value = inline
            elif has_next_value:
                value = nxt
                i += 1
            else:
                raise ValueError(f"{key} needs a value")
            if key in vals and vals[key] != value:
                raise ValueError(f"{key} is given twice, as {vals[key]!r} and {value!r}")
            vals[key] = value
        elif w in _FLAGS:
            flags.add(w)
        elif key in _REFUSED:
            refused.append(f"{key} ({_REFUSED[key]})")
            if not eq and has_next_value:
                i += 1
        elif key in NEUTRAL_VALUED:
            neutral.append(w)
            if not eq and has_next_value:
                neutral.append(nxt)
                i += 1
        elif w in NEUTRAL_FLAGS:
            neutral.append(w)
        else:
            unknown.append(w)
        i += 1
    if refused:
        raise ValueError("the Megatron line uses what cosearch cannot price: " + "; ".join(refused))
    if unknown:
        raise ValueError(f"the Megatron line has flags or words cosearch does not know: {' '.join(unknown)} "
                         "(a flag that may change the run is never dropped silently; remove it if it does not "
                         "change step time or memory)")
    return vals, flags, neutral


def _moe_dispatch(vals: dict[str, str], flags: set[str], ep: int, assumed: list[str]) -> tuple[str, bool, str]:
    """Megatron-Core's dispatch switches: ``--moe-token-dispatcher-type`` (``alltoall``; ``flex``,
    whose DeepEP and HybridEP backends move tokens at the same measured rates here, and differ in
    their SMs and buffers; ``allgather``, Megatron's default, priced as the all-to-all, said in
    ``assumed``), its backend (``--moe-flex-dispatcher-backend``; DeepEP, Megatron-Core's default,
    where a flex line names none), ``--moe-enable-deepep`` (the deprecated spelling of the flex
    DeepEP backend) and ``--overlap-moe-expert-parallel-comm``: (dispatcher, overlap, backend)."""
    flex, backend = _flex_dispatcher(vals, flags)
    overlap = "--overlap-moe-expert-parallel-comm" in flags
    if ep > 1 and not flex and vals.get("--moe-token-dispatcher-type") in (None, "allgather"):
        assumed.append("MoE token dispatcher allgather (Megatron-Core's default) priced as the all-to-all one")
    if overlap and ep <= 1:
        raise ValueError("--overlap-moe-expert-parallel-comm needs --expert-model-parallel-size > 1")
    if flex and backend is None:
        backend = "deepep"
        assumed.append("--moe-flex-dispatcher-backend not given: DeepEP, Megatron-Core's default")
    return ("flex" if flex else "alltoall"), overlap, backend or "hybridep"


def _flex_dispatcher(vals: dict[str, str], flags: set[str]) -> tuple[bool, str | None]:
    """Whether a line runs Megatron-Core's flex token dispatcher (``--moe-token-dispatcher-type
    flex``, or ``--moe-enable-deepep``, the deprecated spelling of flex with DeepEP), and its
    backend (``--moe-flex-dispatcher-backend``; DeepEP under ``--moe-enable-deepep`` where none is
    given), both checked against what Megatron-Core accepts and cosearch models."""
    kind = vals.get("--moe-token-dispatcher-type")
    if kind not in (None, "alltoall", "flex", "allgather"):
        raise ValueError(f"--moe-token-dispatcher-type {kind!r}; Megatron-Core accepts allgather, alltoall or flex")
    backend = vals.get("--moe-flex-dispatcher-backend")
    if backend not in (None, "deepep", "hybridep"):
        raise ValueError(f"--moe-flex-dispatcher-backend {backend!r} is not modelled (deepep, hybridep)")
    if "--moe-enable-deepep" in flags:
        return True, backend or "deepep"
    return kind == "flex", backend


#: SMs DeepEP's kernels hold when the line does not set them: DeepEP's own ``Buffer`` default,
#: 20, which Megatron-Core also passed as ``moe_deepep_num_sms`` before it unified the knobs.
DEEPEP_DEFAULT_SMS = FLEX_SMS_DEEPEP
#: HybridEP's SMs that Megatron-Core passed by default before 2026-07
#: (``TransformerConfig.moe_hybridep_num_sms: int = 16``); since then (commit 2d7060f44f,
#: ``moe_flex_dispatcher_num_sms`` None) each backend takes its own default, HybridEP's 24 in one
#: NVLink domain and 8 across nodes (:data:`cosearch.engine.FLEX_SMS_NVLINK`).
MEGATRON_HYBRIDEP_SMS_BEFORE_2026_07 = 16
#: ``--cuda-graph-impl`` values and the ``--cuda-graph-scope`` / ``--cuda-graph-modules`` scopes
#: Megatron-LM accepts (``megatron/training/arguments.py``; ``full``: the older per-layer scope).
CUDA_GRAPH_IMPLS = ("none", "local", "transformer_engine", "full_iteration")
CUDA_GRAPH_SCOPES = ("attn", "mlp", "moe", "moe_router", "moe_preprocess", "mamba", "full_iteration", "full")
#: The older switches and the implementation each stands for.
_LEGACY_CUDA_GRAPH = {"--enable-cuda-graph": "local", "--external-cuda-graph": "transformer_engine"}


def cuda_graphs(vals: dict[str, str], flags: set[str]) -> tuple[str, tuple[str, ...]]:
    """(implementation, scopes) of the CUDA graphs a line captures: ``--cuda-graph-impl`` with
    ``--cuda-graph-scope`` (or its newer spelling ``--cuda-graph-modules``), or the older
    ``--enable-cuda-graph`` (Megatron-Core's own per-layer graphs, ``local``) and
    ``--external-cuda-graph`` (Transformer Engine's ``make_graphed_callables``).  A
    ``full_iteration`` scope under ``local`` (or no implementation, which Megatron-Core promotes)
    is the whole-iteration graph, implementation ``full_iteration``."""
    impl = vals.get("--cuda-graph-impl")
    if impl is not None and impl not in CUDA_GRAPH_IMPLS:
        raise ValueError(f"--cuda-graph-impl {impl!r}; Megatron accepts {', '.join(CUDA_GRAPH_IMPLS)}")
    legacy = {f: i for f, i in _LEGACY_CUDA_GRAPH.items() if f in flags}
    named = set(legacy.values()) | ({impl} if impl is not None else set())
    if len(named) > 1:
        raise ValueError(f"{' and '.join(list(legacy) + ([f'--cuda-graph-impl {impl}'] if impl else []))} name "
                         "different CUDA graph implementations: give one")
    if legacy:
        impl = next(iter(legacy.values()))
    if "--cuda-graph-scope" in vals and "--cuda-graph-modules" in vals:
        raise ValueError("give one of --cuda-graph-scope and --cuda-graph-modules (the newer spelling)")
    scopes = tuple(dict.fromkeys(
        (vals.get("--cuda-graph-scope") or vals.get("--cuda-graph-modules") or "").split(","))) if (
        "--cuda-graph-scope" in vals or "--cuda-graph-modules" in vals) else ()
    bad = [x for x in scopes if x not in CUDA_GRAPH_SCOPES]
    if bad:
        raise ValueError(f"CUDA graph scope {bad}: Megatron accepts {', '.join(CUDA_GRAPH_SCOPES)}")
    if "full_iteration" in scopes:
        if impl not in (None, "local", "full_iteration"):
            raise ValueError(f"--cuda-graph-scope full_iteration is Megatron-Core's own whole-iteration graph; "
                             f"--cuda-graph-impl {impl} cannot capture it")
        return "full_iteration", ()
    impl = impl or "none"
    return impl, (() if impl == "full_iteration" else scopes)


def cuda_graph_note(impl: str, scopes: tuple[str, ...], moe: bool) -> str | None:
    """What cosearch's number leaves out under a run's CUDA graphs (:func:`cuda_graphs`): it
    prices GPU time only, so the host's launch time is missing wherever the graphs do not
    capture the whole iteration, which matters for an expert-parallel MoE run (``moe``: its
    dispatcher also waits on the host for token counts); None for a dense run without graphs.
    Scopes without an implementation capture nothing (Megatron warns and runs without)."""
    if impl == "full_iteration":
        return ("CUDA graphs capture the whole iteration: no host launch time, as cosearch prices it (GPU time "
                "only); the graphs' memory pool is not counted")
    if impl == "none" and scopes:
        return (f"CUDA graph scopes {', '.join(scopes)} without an implementation: Megatron captures nothing "
                "(it warns so); cosearch prices GPU time only, with no host launch time")
    if impl != "none":
        what = ", ".join(scopes) if scopes else "each layer"
        return (f"CUDA graphs ({impl}) capture {what} only: the rest launches from the host, whose time cosearch "
                "does not price (GPU time only); the graphs' memory pool is not counted")
    if moe:
        return ("no CUDA graphs: the host launches every kernel and waits on the dispatcher's token counts; cosearch "
                "prices GPU time only, so a host that cannot keep the GPUs fed is not priced "
                "(docs/performance-model.md: where the MoE error sits)")
    return None


def _fp8_attention(flags: set[str], precision: str, recipe: str | None, flash: bool,
                   assumed: list[str]) -> bool:
    """``--fp8-dot-product-attention`` (Transformer Engine's ``fp8_dpa``, which Megatron-Core's
    ``get_fp8_recipe`` passes to the per-tensor and MXFP8 recipes), refused where it cannot run;
    without an FP8 recipe it does nothing (said)."""
    if "--fp8-dot-product-attention" not in flags:
        return False
    if precision != "fp8":
        assumed.append(f"--fp8-dot-product-attention acts only under an FP8 recipe (--fp8-format): this {precision} "
                       "run's attention stays bf16")
        return False
    if not flash:
        raise ValueError("--fp8-dot-product-attention runs Transformer Engine's fused attention: it needs "
                         "--attention-backend flash|fused|auto (or --use-flash-attn)")
    from ..plan import check_fp8_attention
    check_fp8_attention(precision, recipe, flash, "--fp8-dot-product-attention")
    return True


def _moe_execution(vals: dict[str, str], flags: set[str], model: ModelConfig, ep: int, precision: str,
                   assumed: list[str]) -> int:
    """The host-side and MoE-execution switches of a line, each read and said in ``assumed``
    where cosearch does not price it (GPU time is all it prices: no host launch time, no
    synchronisation); returns the SMs the flex dispatcher's kernels hold (0: not flex), which the
    EP all-to-all overlap prices.

    * CUDA graphs (:func:`cuda_graphs`): none, per module, or the whole iteration.
    * ``--moe-flex-dispatcher-num-sms`` (or the older ``--moe-hybridep-num-sms`` /
      ``--moe-deepep-num-sms``): the dispatcher's SMs; where the line is silent, DeepEP's 20
      (:data:`DEEPEP_DEFAULT_SMS`) and HybridEP's own default, as Megatron-Core runs them since
      2026-07 (older releases passed :data:`MEGATRON_HYBRIDEP_SMS_BEFORE_2026_07`, said).
    * Sync-free MoE (``--moe-expert-rank-capacity-factor``: HybridEP and the fused grouped experts
      run on buffers pre-sized for that multiple of a rank's balanced tokens, with no host
      synchronisation) and ``--moe-paged-stash`` (the routed experts' saved activations packed in
      paged buffers; it needs the capacity factor, as Megatron-Core requires).
    * ``--moe-router-force-load-balancing``: cosearch prices balanced, dropless routing either way.
    * ``--moe-permute-fusion`` / ``--moe-router-fusion``: the fused kernels cosearch prices; without
      them (Megatron-Core's default) the PyTorch ops' extra passes are said, not priced.
    * ``--moe-grouped-gemm``: the grouped GEMMs cosearch prices; without it (Megatron-Core's default)
      ``SequentialMLP``'s loop over the local experts, priced at the same shapes, said.
    * ``--use-transformer-engine-op-fuser``, ``--delay-wgrad-compute`` and the router's padding
      for low-precision GEMMs."""
    moe = model.moe and ep > 1
    note = cuda_graph_note(*cuda_graphs(vals, flags), moe)
    if note:
        assumed.append(note)
    flex, backend = _flex_dispatcher(vals, flags)
    sms = 0
    for b, flag in (("hybridep", "--moe-hybridep-num-sms"), ("deepep", "--moe-deepep-num-sms")):
        if flag in vals and not (flex and backend == b):
            raise ValueError(f"{flag} sets the {b} backend's SMs, which the line does not run (Megatron-Core "
                             f"since 2026-07 routes it to every flex backend, older releases to {b} only): give "
                             "--moe-flex-dispatcher-num-sms")
    if "--moe-flex-dispatcher-num-sms" in vals and not flex:
        raise ValueError("--moe-flex-dispatcher-num-sms sets the flex dispatcher's SMs: the line does not run it "
                         "(--moe-token-dispatcher-type flex)")
    if flex and backend is None:
        backend = "deepep"          # Megatron-Core's default backend
    if flex and backend in ("hybridep", "deepep") and moe:
        # Megatron-Core: the unified knob first, then the backend's deprecated one
        flag = next((f for f in ("--moe-flex-dispatcher-num-sms", f"--moe-{backend}-num-sms") if f in vals), None)
        if flag is not None:
            sms = _int(flag, vals[flag])
        elif backend == "deepep":
            sms = DEEPEP_DEFAULT_SMS
            assumed.append(f"--moe-flex-dispatcher-num-sms not given: DeepEP's default {sms} SMs")
        else:
            assumed.append(f"--moe-flex-dispatcher-num-sms not given: HybridEP's own default SMs (Megatron-Core since "
                           f"2026-07; older releases pass {MEGATRON_HYBRIDEP_SMS_BEFORE_2026_07}: give "
                           f"--moe-hybridep-num-sms {MEGATRON_HYBRIDEP_SMS_BEFORE_2026_07} for them)")
    cap = vals.get("--moe-expert-rank-capacity-factor")
    if cap is not None:
        f = _float("--moe-expert-rank-capacity-factor", cap, 64.0)
        if f <= 0.0:
            raise ValueError(f"--moe-expert-rank-capacity-factor must be positive (buffers sized for that multiple of "
                             f"a rank's balanced tokens), got {cap!r}")
        if not (flex and backend == "hybridep"):
            raise ValueError("--moe-expert-rank-capacity-factor (sync-free MoE) runs on the flex dispatcher's "
                             "HybridEP backend only (--moe-token-dispatcher-type flex --moe-flex-dispatcher-backend "
                             "hybridep), as Megatron-Core requires")
        if not model.moe:
            raise ValueError("--moe-expert-rank-capacity-factor needs a mixture-of-experts model")
        assumed.append(f"sync-free MoE (--moe-expert-rank-capacity-factor {f:g}): buffers sized for {f:g}x a rank's "
                       "balanced tokens and no host synchronisation; priced as balanced dropless routing, and the "
                       "buffers' room beyond the routed tokens is not counted in memory")
    stash = ("--moe-paged-stash" in flags or "--moe-paged-stash-buffer-size-factor-cuda" in vals
             or "--moe-paged-stash-buffer-size-factor-cpu" in vals)
    if stash:
        if "--moe-paged-stash" not in flags:
            raise ValueError("--moe-paged-stash-buffer-size-factor-* size the paged stash: they need --moe-paged-stash")
        if cap is None:
            raise ValueError("--moe-paged-stash needs --moe-expert-rank-capacity-factor (Megatron-Core refuses it "
                             "without)")
        cuda = _float("--moe-paged-stash-buffer-size-factor-cuda",
                      vals.get("--moe-paged-stash-buffer-size-factor-cuda", "1.0"), 64.0)
        host = _float("--moe-paged-stash-buffer-size-factor-cpu",
                      vals.get("--moe-paged-stash-buffer-size-factor-cpu", "0"), 64.0)
        assumed.append(f"--moe-paged-stash: the routed experts' saved activations in paged buffers ({cuda:g}x on "
                       f"the GPU{f', {host:g}x pinned on the host' if host else ''}); the copies into and out of "
                       "them are not priced, and memory counts the activations themselves")
    if moe and "--moe-router-force-load-balancing" not in flags:
        assumed.append("the router's own routing priced as balanced and dropless: its imbalance over the "
                       "expert-parallel ranks is not priced")
    dtype = vals.get("--moe-router-dtype")
    if dtype not in (None, "fp32", "fp64"):
        raise ValueError(f"--moe-router-dtype {dtype!r}; Megatron-Core accepts fp32 or fp64")
    if dtype == "fp64":
        raise ValueError("--moe-router-dtype fp64 runs the router's GEMM in fp64 (torch.mm), which is not modelled")
    if dtype == "fp32":
        assumed.append("--moe-router-dtype fp32: the router's GEMM writes fp32 logits (Transformer Engine's GEMM, "
                       "bf16 operands); priced as the bf16 router")
    groups, group_k = vals.get("--moe-router-num-groups"), vals.get("--moe-router-group-topk")
    if (groups is None) != (group_k is None):
        raise ValueError("--moe-router-num-groups and --moe-router-group-topk go together (group-limited routing)")
    if groups is not None:
        g, gk = _int("--moe-router-num-groups", groups), _int("--moe-router-group-topk", group_k)
        if gk > g:
            raise ValueError(f"--moe-router-group-topk {gk} exceeds --moe-router-num-groups {g}")
        assumed.append(f"group-limited routing ({gk} of {g} expert groups a token): the dispatch priced as routing "
                       "over all experts")
    if "--moe-router-topk-limited-devices" in vals:
        n = _int("--moe-router-topk-limited-devices", vals["--moe-router-topk-limited-devices"])
        assumed.append(f"device-limited routing ({n} expert-parallel ranks a token, --moe-router-topk-limited-devices): "
                       "the dispatch priced as routing over all experts")
    if "--moe-shared-expert-overlap" in flags:
        assumed.append("--moe-shared-expert-overlap: the shared experts' compute beside the dispatch is not priced "
                       "(they run in series with it)")
    if model.moe:
        # cosearch prices Transformer Engine's fused kernels (one pass each); Megatron-Core's
        # defaults are off (moe_permute_fusion, moe_router_fusion False): PyTorch ops instead
        for flag, what in (("--moe-permute-fusion", "permutes the tokens"),
                           ("--moe-router-fusion", "computes the router's top-k, softmax and auxiliary loss")):
            if flag not in flags:
                assumed.append(f"without {flag} Megatron-Core {what} with PyTorch ops (several passes): priced as "
                               "the fused kernel's single pass")
        if "--moe-grouped-gemm" not in flags:
            # Megatron-Core's layer specs (models/gpt/gpt_layer_specs.py, get_moe_module_spec): TEGroupedMLP
            # with moe_grouped_gemm, SequentialMLP (each local expert its own MLP, in a loop) without
            assumed.append("without --moe-grouped-gemm Megatron-Core runs each local expert's MLP in turn "
                           "(SequentialMLP): priced as the grouped GEMMs at the same per-expert shapes, the loop's "
                           "launches not priced")
    if "--use-transformer-engine-op-fuser" in flags:
        assumed.append("--use-transformer-engine-op-fuser: the experts' fused grouped MLP kernels priced as separate "
                       "grouped GEMMs, activation and casts, their bias and clamped activation fused")
    if "--no-fp8-wgrad" in flags and precision in ("fp8", "fp4"):
        # Transformer Engine then runs every weight-gradient GEMM in bf16 (recipe.override_linear_precision)
        raise ValueError("--no-fp8-wgrad (fp8_wgrad false) runs the weight-gradient GEMMs in bf16 under a low "
                         "precision, which cosearch does not model (it would price them in the plan's format)")
    if "--delay-wgrad-compute" in flags:
        assumed.append("--delay-wgrad-compute: the weight gradients priced where the backward computes them "
                       "(the EP overlap's combined 1F1B schedule prices what it hides)")
    pads = [f for f in ("--moe-router-padding-for-quantization", "--moe-router-padding-for-fp8") if f in flags]
    if pads:
        assumed.append(f"{pads[0]}: each expert's tokens padded to the low-precision GEMM's alignment (a few rows "
                       "a block), not priced")
    return sms


#: Megatron-FSDP's ``--data-parallel-sharding-strategy`` as the ZeRO stage it shards to
#: (``megatron/core/distributed/fsdp``: ``no_shard``; ``optim``, the optimizer state; ``optim_grads``,
#: and the gradients; ``optim_grads_params``, and the parameters, gathered a layer at a time).
FSDP_SHARDING = {"no_shard": 0, "optim": 1, "optim_grads": 2, "optim_grads_params": 3}


def _zero_stage(vals: dict[str, str], flags: set[str], assumed: list[str]) -> int:
    """The ZeRO stage a line shards to: Megatron-FSDP's strategy (:data:`FSDP_SHARDING`; Megatron-LM's
    default ``no_shard``) where ``--use-megatron-fsdp`` is given, else 1 with the distributed
    optimizer, else 0.  ZeRO-2, which the Megatron-Core engines do not run, is refused."""
    strategy = vals.get("--data-parallel-sharding-strategy")
    if "--use-nccl-ub" in flags:
        assumed.append("--use-nccl-ub: NCCL's user-buffer registration for the data-parallel collectives, not "
                       "priced (the collectives at cosearch's NCCL rates)")
    if "--use-megatron-fsdp" not in flags:
        if strategy is not None and strategy != "no_shard":
            raise ValueError("--data-parallel-sharding-strategy is Megatron-FSDP's: give --use-megatron-fsdp")
        for f in ("--fsdp-double-buffer",):
            if f in flags:
                raise ValueError(f"{f} is Megatron-FSDP's: give --use-megatron-fsdp")
        return 1 if "--use-distributed-optimizer" in flags else 0
    strategy = strategy or "no_shard"
    if strategy not in FSDP_SHARDING:
        raise ValueError(f"--data-parallel-sharding-strategy {strategy!r}; Megatron accepts "
                         f"{', '.join(FSDP_SHARDING)}")
    zero = FSDP_SHARDING[strategy]
    if zero == 2:
        raise ValueError("--data-parallel-sharding-strategy optim_grads (ZeRO-2) is not modelled for Megatron-Core: "
                         "optim (ZeRO-1) or optim_grads_params (ZeRO-3) are")
    assumed.append(f"Megatron-FSDP, {strategy}: priced as ZeRO-{zero} (the parameters gathered a layer at a time, "
                   "two layers' buffers)" if zero == 3 else f"Megatron-FSDP, {strategy}: priced as ZeRO-{zero}")
    return zero


def cross_entropy_note(impl: str, where: str) -> str:
    """What a run's loss implementation (:data:`cosearch.engine.MEGATRON_CROSS_ENTROPY`) is priced
    as, said with ``where`` it is set."""
    what = {"te": "Transformer Engine's parallel cross-entropy (cross_entropy_fusion_impl te), priced as its "
                  "passes at Liger-Kernel's measured fused kernel's rate",
            "native": "Megatron-Core's fused cross-entropy (native), priced as its passes over fp32 logits, as "
                      "measured",
            "off": "Megatron-Core's unfused vocab-parallel cross-entropy over fp32 logits"}[impl]
    return f"the loss: {what}, {where}"


def _cross_entropy(vals: dict[str, str], flags: set[str], assumed: list[str]) -> str:
    """The loss implementation a Megatron line runs: ``--cross-entropy-loss-fusion`` with
    ``--cross-entropy-fusion-impl native|te`` (Megatron-Core's ``cross_entropy_fusion_impl``,
    default ``native``), else Megatron-Core's unfused loss (``"off"``)."""
    impl = vals.get("--cross-entropy-fusion-impl")
    if impl is not None and impl not in ("native", "te"):
        raise ValueError(f"--cross-entropy-fusion-impl {impl!r}; Megatron accepts native or te")
    if "--cross-entropy-loss-fusion" not in flags:
        if impl is not None:
            assumed.append(f"--cross-entropy-fusion-impl {impl} without --cross-entropy-loss-fusion: Megatron-Core "
                           "runs its unfused loss")
        return "off"
    impl = impl or "native"
    assumed.append(cross_entropy_note(impl, "as the run's flags set it"))
    return impl


def eager_pass_notes(engine: Engine, model: ModelConfig) -> list[str]:
    """What a run's assumptions say, the same from every reader, where ``engine`` runs ``model``'s
    experts' clamp and bias (:attr:`~cosearch.engine.Engine.expert_elementwise`) or its YaRN-scaled
    RoPE (:func:`~cosearch.engine.graph_elementwise`) as eager passes, which are priced."""
    notes = []
    if model.moe and engine.expert_elementwise == "eager" and (model.bias or model.activation_clamp):
        what = " and ".join(x for x, on in (("clamp", model.activation_clamp), ("bias", model.bias)) if on)
        notes.append(f"without the op fuser the experts' {what} run as Megatron-Core's eager PyTorch passes (priced)")
    if eager_rope(graph_elementwise(engine, model)) and not eager_rope(
            graph_elementwise(replace(engine, scaled_rope="fused"), model)):
        # the YaRN fallback alone makes the RoPE eager (not RoPE fusion off, not an eager engine)
        notes.append(f"the YaRN-scaled RoPE (YaRN's attention factor ({model.rope_attention_factor:.3f}) on cos and "
                     "sin, which Transformer Engine's fused RoPE does not take) runs unfused, as Megatron-Core runs "
                     "it (priced)")
    return notes


def _line_qk_norm(flags: set[str], stated: dict, base: ModelConfig | None, assumed: list[str]) -> None:
    """``--qk-layernorm`` / ``--qk-l2-norm`` as Megatron-Core's layer specs build them
    (``models/gpt/gpt_layer_specs.py``): without multi-head latent attention, ``q_layernorm`` /
    ``k_layernorm`` of the head width (a ``TENorm`` of ``--normalization``, or ``L2Norm``), the
    model's ``qk_norm`` ``"head"`` or ``"l2"``; with it, ``--qk-layernorm`` norms the q and kv
    latents inside the up projections (``column_parallel_layer_norm_linear``), as DeepSeek's
    ``q_a_layernorm`` / ``kv_a_layernorm``, which cosearch's MLA always carries (said where the
    line lacks it), and ``--qk-l2-norm`` is refused (Megatron-Core asserts so)."""
    layer, l2 = "--qk-layernorm" in flags, "--qk-l2-norm" in flags
    if layer and l2:
        raise ValueError("--qk-layernorm and --qk-l2-norm: Megatron norms the queries and keys one way")
    if "mla" in stated or (base is not None and base.mla is not None and "mla" not in stated):
        if l2:
            raise ValueError("--qk-l2-norm with multi-head latent attention: Megatron-Core asserts it is not supported")
        if not layer:
            assumed.append("multi-head latent attention without --qk-layernorm: Megatron-Core norms no latents; "
                           "cosearch prices DeepSeek's q and kv latent norms (two norms of q_lora_rank and "
                           "kv_lora_rank per layer)")
        return
    if layer or l2:
        stated["qk_norm"] = "head" if layer else "l2"


def _window_layers(freq: str, layers: int) -> int:
    """How many of ``layers`` layers attend within the window under Megatron-Core's
    ``--window-attn-skip-freq`` (``is_layer_window_attention``, ``transformer/utils.py``, layers
    counted from 1): an integer N windows every layer but each N-th; a list of 0/1 (``"[1,1,1,0]*3"``:
    1 a window layer, 0 full attention), optionally repeated, one entry a layer."""
    text = freq.replace(" ", "")
    if text.isdigit():
        n = _int("--window-attn-skip-freq", text)
        return layers - layers // n
    m = re.fullmatch(r"\[([01](?:,[01])*)\](?:\*(\d+))?", text)
    if m is None:
        raise ValueError(f"--window-attn-skip-freq {freq!r}: give an integer or a list of 0/1 such as [1,1,1,0]*3")
    pattern = [int(x) for x in m.group(1).split(",")] * int(m.group(2) or 1)
    if len(pattern) != layers:
        raise ValueError(f"--window-attn-skip-freq {freq!r} lists {len(pattern)} layers, the model has {layers}")
    return sum(pattern)


def _line_gpt_oss(vals: dict[str, str], flags: set[str], stated: dict, base: ModelConfig | None,
                  assumed: list[str]) -> None:
    """GPT-OSS's flags as Megatron-Core builds them (``TransformerConfig``): ``--quick-geglu`` (a
    gated MLP, ``x sigmoid(1.702 x)`` times the linear half, priced as the SwiGLU: the same kernels'
    bytes), its ``--glu-linear-offset`` (inside them), ``--activation-func-clamp-value`` (the
    model's ``activation_clamp``), ``--window-size L,R`` (a causal window, ``R`` 0, of ``L + 1``
    keys, FlashAttention's ``window_size``) on the layers ``--window-attn-skip-freq`` leaves windowed
    (:func:`_window_layers`; every layer without it), ``--softmax-type`` (``learnable`` / ``off-by-one``:
    the sinks inside Transformer Engine's fused attention, said) and ``--rope-type`` (``rope`` for
    standard attention, its default; ``yarn`` is MLA's)."""
    if "--quick-geglu" in flags:
        if "--swiglu" in flags or "--squared-relu" in flags:
            raise ValueError("--quick-geglu with --swiglu or --squared-relu: Megatron takes one MLP activation")
        stated["activation"] = "swiglu"
        assumed.append("--quick-geglu: the gated x sigmoid(1.702 x) priced as the SwiGLU (the same passes)")
    if "--glu-linear-offset" in vals:
        _float("--glu-linear-offset", vals["--glu-linear-offset"], 1e3)
        if "--quick-geglu" not in flags and "--swiglu" not in flags:
            raise ValueError("--glu-linear-offset needs a gated MLP (--swiglu or --quick-geglu)")
    if "--activation-func-clamp-value" in vals:
        clamp = _float("--activation-func-clamp-value", vals["--activation-func-clamp-value"], 1e6)
        if not clamp > 0.0:
            raise ValueError("--activation-func-clamp-value must be above 0 (Megatron-Core asserts so)")
        stated["activation_clamp"] = clamp
    if "--window-size" in vals:
        parts = re.sub(r"[()\[\] ]", "", vals["--window-size"]).split(",")
        if len(parts) != 2 or not all(x.lstrip("-").isdigit() for x in parts):
            raise ValueError(f"--window-size {vals['--window-size']!r}: give left,right such as 127,0")
        left, right = (int(x) for x in parts)
        if right != 0 or left < 1:
            raise ValueError(f"--window-size {left},{right}: a causal window (right 0, left at least 1) is modelled")
        layers = stated.get("num_layers", base.num_layers if base is not None else None)
        if layers is None:
            raise ValueError("--window-size needs --num-layers (or --model) to count the window layers")
        stated["sliding_window"] = left + 1
        stated["sliding_layers"] = _window_layers(vals["--window-attn-skip-freq"], int(layers)) \
            if "--window-attn-skip-freq" in vals else int(layers)
    elif "--window-attn-skip-freq" in vals:
        assumed.append("--window-attn-skip-freq: inert without --window-size")
    kind = vals.get("--softmax-type", "vanilla")
    if kind not in ("vanilla", "off-by-one", "learnable"):
        raise ValueError(f"--softmax-type {kind!r}; Megatron-Core accepts vanilla, off-by-one or learnable")
    if kind != "vanilla":
        assumed.append(f"--softmax-type {kind}: the attention sinks inside Transformer Engine's fused attention, "
                       "not priced")
    rope = vals.get("--rope-type")
    if rope is not None and rope not in ("rope", "yarn"):
        raise ValueError(f"--rope-type {rope!r}; Megatron accepts rope or yarn")
    if rope == "yarn" and "--multi-latent-attention" not in flags:
        raise ValueError("--rope-type yarn is multi-latent attention's; standard attention takes YaRN from "
                         "--position-embedding-type yarn")


def _line_model(vals: dict[str, str], flags: set[str], base: ModelConfig | None, assumed: list[str]
                ) -> ModelConfig | None:
    """The model the line describes: ``base`` checked against every model flag the line gives,
    or, without ``base``, the model built from the line with Megatron's defaults."""
    # the multi-token prediction depth and the MoE capacity are the run's: they apply to a given
    # model as well
    mtp = _int("--mtp-num-layers", vals["--mtp-num-layers"], minimum=0) if "--mtp-num-layers" in vals else None
    run = _moe_run_fields(vals, flags)
    if mtp is not None:
        run["mtp_layers"] = mtp
    given = [f for f in _MODEL_FLAGS if f in vals or f in flags]
    if not given:
        return base if base is None or not run else _with_run(base, run)
    stated: dict[str, object] = {
        _MODEL_FLAGS[f]: _int(f, vals[f])
        for f in ("--num-layers", "--hidden-size", "--num-attention-heads", "--seq-length", "--vocab-size",
                  "--ffn-hidden-size", "--kv-channels") if f in vals}
    if "--group-query-attention" in flags:
        stated["kv_heads"] = _int("--num-query-groups", vals.get("--num-query-groups", "1"))
    elif "--num-query-groups" in vals:
        raise ValueError("--num-query-groups needs --group-query-attention (Megatron ignores it without)")
    if "--swiglu" in flags:
        if "--squared-relu" in flags:
            raise ValueError("--swiglu and --squared-relu: Megatron takes one MLP activation")
        stated["activation"] = "swiglu"
    elif "--squared-relu" in flags:
        # Nemotron-4's MLP: relu(x)^2, a 2-matrix MLP whose activation is one elementwise kernel as
        # ReLU's (Megatron-Core's squared_relu, fused with the bias when there is one)
        stated["activation"] = "relu"
        assumed.append("--squared-relu: the MLP's activation priced as ReLU (one elementwise pass, a 2-matrix MLP)")
    if "--normalization" in vals:
        norm = {"LayerNorm": "layernorm", "RMSNorm": "rmsnorm"}.get(vals["--normalization"])
        if norm is None:
            raise ValueError(f"--normalization {vals['--normalization']!r}; Megatron accepts LayerNorm or RMSNorm")
        stated["norm"] = norm
    pos = vals.get("--position-embedding-type")
    if pos is not None:
        stated["position"] = {"learned_absolute": "learned", "rope": "rotary", "yarn": "rotary", "none": "none"}.get(pos)
        if stated["position"] is None:
            raise ValueError(f"--position-embedding-type {pos!r}; choose learned_absolute, rope, yarn or none")
        if pos == "yarn":
            # Megatron-Core's YaRN: --rotary-scaling-factor, --mscale and
            # --mscale-all-dim as config.yarn_* (training/argument_utils.py's
            # _apply_yarn_config_from_args: defaults 1.0, 1.0, 0.0), their attention factor
            # _yarn_get_concentration_factor's (models.yarn_attention_factor)
            stated["rope_attention_factor"] = yarn_attention_factor(
                _float("--rotary-scaling-factor", vals.get("--rotary-scaling-factor", "1.0"), 1e6),
                _float("--mscale", vals.get("--mscale", "1.0"), 1e3),
                _float("--mscale-all-dim", vals.get("--mscale-all-dim", "0.0"), 1e3))
        elif pos == "rope":
            stated["rope_attention_factor"] = 1.0
    elif any(f in vals for f in ("--rotary-scaling-factor", "--mscale", "--mscale-all-dim")):
        raise ValueError("--rotary-scaling-factor, --mscale and --mscale-all-dim set YaRN's RoPE: give "
                         "--position-embedding-type yarn")
    if "--use-rotary-position-embeddings" in flags:
        if stated.get("position", "rotary") != "rotary":
            raise ValueError("--use-rotary-position-embeddings contradicts --position-embedding-type")
        stated["position"] = "rotary"
    if "--no-position-embedding" in flags and stated.get("position") not in ("rotary", "none"):
        # the learned table it drops exists only under learned_absolute (Megatron-Core's
        # GPTModel builds it from position_embedding_type alone)
        raise ValueError("--no-position-embedding with learned absolute positions is not read: give "
                         "--position-embedding-type rope or none")
    if "--rotary-percent" in vals:
        # Megatron-Core's RotaryEmbedding rotates rotary_percent of kv_channels, under RoPE only
        share = _float("--rotary-percent", vals["--rotary-percent"], 1.0)
        if not share > 0.0:
            raise ValueError(f"--rotary-percent {vals['--rotary-percent']}: give a share in (0, 1]")
        rotary = stated.get("position", base.position if base is not None else "learned") == "rotary"
        if rotary and ("mla" in stated or (base is not None and base.mla is not None)):
            rotary = share != 1.0      # MLA rotates its own rope dims: only a share other than 1 is refused
        if rotary:
            stated["rotary_fraction"] = share
        elif share != 1.0:
            assumed.append(f"--rotary-percent {vals['--rotary-percent']} without RoPE: Megatron ignores it")
    if "--disable-bias-linear" in flags:
        stated["bias"] = False
    if "--untie-embeddings-and-output-weights" in flags:
        stated["tie_embeddings"] = False
    if "--attention-dropout" in vals or "--hidden-dropout" in vals:
        drops = [_float(f, vals.get(f, "0.1")) for f in ("--attention-dropout", "--hidden-dropout")]
        stated["dropout"] = any(d > 0 for d in drops)
    if "--num-experts" in vals:
        stated["num_experts"] = _int("--num-experts", vals["--num-experts"])
        stated["experts_per_token"] = _int("--moe-router-topk", vals.get("--moe-router-topk", "2"))
        if "--moe-ffn-hidden-size" in vals:
            stated["expert_ffn"] = _int("--moe-ffn-hidden-size", vals["--moe-ffn-hidden-size"])
    elif "--moe-router-topk" in vals or "--moe-ffn-hidden-size" in vals:
        raise ValueError("--moe-router-topk and --moe-ffn-hidden-size need --num-experts")
    if "--moe-shared-expert-intermediate-size" in vals:
        size = _int("--moe-shared-expert-intermediate-size", vals["--moe-shared-expert-intermediate-size"])
        per = stated.get("expert_ffn") or (base.expert_ffn if base is not None and base.moe else None)
        if "num_experts" not in stated and (base is None or not base.moe):
            raise ValueError("--moe-shared-expert-intermediate-size needs --num-experts (an MoE model)")
        if not per or size % per:
            raise ValueError(f"--moe-shared-expert-intermediate-size {size} is not a whole number of experts of "
                             f"{per} (cosearch's shared experts are routed-expert sized): give --moe-ffn-hidden-size")
        stated["shared_experts"] = size // per
    mla_values = [f for f in MLA_DEFAULTS if f in vals]
    if "--multi-latent-attention" in flags:
        dims = {f: _int(f, vals[f], minimum=0 if f == "--q-lora-rank" else 1) if f in vals else d
                for f, d in MLA_DEFAULTS.items()}
        if dims["--qk-head-dim"] != dims["--v-head-dim"]:
            raise ValueError(f"--qk-head-dim {dims['--qk-head-dim']} and --v-head-dim {dims['--v-head-dim']} differ: "
                             "cosearch's multi-head latent attention has one head width")
        stated["mla"] = (dims["--q-lora-rank"], dims["--kv-lora-rank"], dims["--qk-pos-emb-head-dim"])
        stated["head_dim"] = dims["--qk-head-dim"]
        for f in MLA_DEFAULTS:
            if f not in vals:
                assumed.append(f"{f} {dims[f]} (Megatron-LM's default)")
    elif mla_values:
        raise ValueError(f"{', '.join(mla_values)} set multi-head latent attention: give --multi-latent-attention")
    _line_qk_norm(flags, stated, base, assumed)
    _line_gpt_oss(vals, flags, stated, base, assumed)

    if base is not None:
        have = {"num_layers": base.num_layers, "hidden": base.hidden, "heads": base.heads,
                "seq_len": base.seq_len, "vocab": base.vocab, "ffn_hidden": base.ffn_hidden,
                "head_dim": base.head_dim, "kv_heads": base.kv_heads, "activation": base.activation,
                "norm": base.norm, "position": base.position, "bias": base.bias,
                "tie_embeddings": base.tie_embeddings, "dropout": base.dropout,
                "num_experts": base.num_experts, "experts_per_token": base.experts_per_token,
                "expert_ffn": base.expert_ffn, "rope_attention_factor": base.rope_attention_factor,
                "mla": base.mla, "shared_experts": base.shared_experts, "qk_norm": base.qk_norm,
                "rotary_fraction": base.rotary_fraction, "sliding_window": base.sliding_window,
                "sliding_layers": base.sliding_layers, "activation_clamp": base.activation_clamp}
        flag_of = {v: k for k, v in _MODEL_FLAGS.items()}
        flag_of.update(kv_heads="--num-query-groups", dropout="--attention-dropout/--hidden-dropout",
                       position="--position-embedding-type", experts_per_token="--moe-router-topk",
                       rope_attention_factor="--position-embedding-type (YaRN's attention factor)",
                       mla="--multi-latent-attention (q, kv lora ranks, rope dim)",
                       head_dim="--kv-channels / --qk-head-dim", qk_norm="--qk-layernorm / --qk-l2-norm",
                       activation="--swiglu / --squared-relu / --quick-geglu", sliding_window="--window-size",
                       sliding_layers="--window-size / --window-attn-skip-freq")
        bad = [f"{flag_of[k]} gives {v!r} where {base.name} has {have[k]!r}"
               for k, v in stated.items() if have[k] != v]
        if bad:
            raise ValueError(f"the Megatron line contradicts --model {base.name}: " + "; ".join(bad)
                             + " (drop --model to price the line's own model, or fix the line)")
        return _with_run(base, run)

    missing = [f for f in _REQUIRED_MODEL if f not in vals]
    if missing:
        raise ValueError(f"the Megatron line describes a model but lacks {', '.join(missing)}: give them, or "
                         "--model with a preset or config.json that the line's model flags agree with")
    h = int(stated["hidden"])
    if "ffn_hidden" not in stated:
        gated = stated.get("activation") == "swiglu"
        stated["ffn_hidden"] = int((4 * h * 2 / 3) / 64) * 64 if gated else 4 * h
        assumed.append(f"--ffn-hidden-size {stated['ffn_hidden']} (Megatron's default"
                       + (" for --swiglu)" if gated else ": 4 x hidden)"))
    for what, default in (("activation", "gelu"), ("norm", "layernorm"), ("position", "learned"),
                          ("bias", True), ("tie_embeddings", True), ("dropout", True)):
        if what not in stated:
            stated[what] = default
    head_dim = stated.pop("head_dim", None)
    expert_ffn = stated.pop("expert_ffn", None)
    heads = int(stated["heads"])
    head_size = None if head_dim is None or head_dim * heads == h else head_dim
    if head_dim is None and h % heads:
        raise ValueError(f"--num-attention-heads {heads} does not divide --hidden-size {h}: give --kv-channels")
    return _with_run(ModelConfig(name=f"megatron-{stated['num_layers']}L-{h}", head_size=head_size,
                                 moe_ffn_hidden=expert_ffn if stated.get("num_experts") else None, **stated), run)


def _stage_layers(vals: dict[str, str], flags: set[str], layers: int, pp: int, virtual: int
                  ) -> tuple[int, ...] | None:
    """The transformer layers of each pipeline stage, as Megatron-Core's
    ``get_num_layers_to_build`` (``megatron/core/transformer/transformer_block.py``) splits them:
    ``--decoder-first-pipeline-num-layers`` / ``--decoder-last-pipeline-num-layers`` fix the first
    (last) stage and the other layers split evenly over the stages left;
    ``--account-for-embedding-in-pipeline-split`` / ``--account-for-loss-in-pipeline-split`` count
    the embedding (the loss) as one layer of the first (last) stage, the layers and those splitting
    evenly over the stages.  Each stage's count divides over its ``virtual`` model chunks.  None:
    the even split (no such flag).  Megatron's assertions are refusals here."""
    first = _int("--decoder-first-pipeline-num-layers", vals["--decoder-first-pipeline-num-layers"]) \
        if "--decoder-first-pipeline-num-layers" in vals else None
    last = _int("--decoder-last-pipeline-num-layers", vals["--decoder-last-pipeline-num-layers"]) \
        if "--decoder-last-pipeline-num-layers" in vals else None
    emb = "--account-for-embedding-in-pipeline-split" in flags
    loss = "--account-for-loss-in-pipeline-split" in flags
    if first is None and last is None and not (emb or loss):
        return None
    if (first is not None or last is not None) and (emb or loss):
        raise ValueError("--decoder-first/last-pipeline-num-layers cannot be combined with "
                         "--account-for-embedding/loss-in-pipeline-split (Megatron-Core asserts so)")
    if first is not None or last is not None:
        if pp < 2:
            raise ValueError("--decoder-first/last-pipeline-num-layers need --pipeline-model-parallel-size > 1")
        rest = layers - (first or 0) - (last or 0)
        left = pp - (first is not None) - (last is not None)
        if rest < 0 or (left > 0 and rest % left) or (left == 0 and rest):
            raise ValueError(f"{layers} layers less the first/last stages' {first or 0} + {last or 0} leave {rest} "
                             f"for {left} other stage(s): Megatron needs them to divide evenly")
        per = rest // left if left else 0
        split = [per] * pp
        if first is not None:
            split[0] = first
        if last is not None:
            split[-1] = last
        counts = split
    else:
        total = layers + emb + loss
        if total % pp:
            raise ValueError(f"{layers} layers{' + the embedding' if emb else ''}{' + the loss' if loss else ''} = "
                             f"{total} do not divide over --pipeline-model-parallel-size {pp} (Megatron asserts so)")
        counts = [total // pp] * pp
        split = list(counts)
        split[0] -= emb
        split[-1] -= loss
    bad = [c for c in counts if c % virtual]
    if virtual > 1 and bad:
        raise ValueError(f"a stage of {bad[0]} layers does not divide over {virtual} virtual stages (Megatron "
                         "asserts each stage's layers divide over its model chunks)")
    if min(split) < 1:
        raise ValueError(f"the pipeline split {split} leaves a stage without a transformer layer")
    return tuple(split)


def _grad_reduce_bytes(vals: dict[str, str], flags: set[str], assumed: list[str]) -> float:
    """Bytes per gradient element the data-parallel reduction moves, as Megatron-LM decides it
    (``megatron/training/arguments.py``): a bf16 run accumulates and all-reduces its gradients in
    fp32 (4 bytes) unless ``--grad-reduce-in-bf16`` or ``--main-grads-dtype bf16`` (2 bytes);
    ``--accumulate-allreduce-grads-in-fp32`` with bf16 main gradients is refused, as Megatron
    asserts.  The fp32 gradient buffer's memory is said, not counted (the memory model keeps 2
    bytes a gradient)."""
    fsdp = {f: vals.get(f, "auto") for f in ("--megatron-fsdp-grad-comm-dtype", "--megatron-fsdp-main-grads-dtype")}
    for f, v in fsdp.items():
        if v not in ("fp32", "bf16", "fp16", "auto"):
            raise ValueError(f"{f} {v!r}; Megatron accepts fp32, bf16, fp16 or auto")
    given = [f"{f} {v}" for f, v in fsdp.items() if f in vals]
    if given and "--use-megatron-fsdp" not in flags:
        assumed.append(f"{', '.join(given)}: Megatron-FSDP's, inert without --use-megatron-fsdp")
    elif "--use-megatron-fsdp" in flags:
        # Megatron-FSDP communicates gradients in its grad-comm dtype, 'auto' its main-grads dtype,
        # 'auto' the model's own gradient dtype, bf16 here (distributed_data_parallel_config.py;
        # mcore_fsdp_adapter.py builds its MixedPrecisionPolicy from these alone, not from
        # --accumulate-allreduce-grads-in-fp32 or --grad-reduce-in-bf16)
        comm = fsdp["--megatron-fsdp-grad-comm-dtype"]
        comm = fsdp["--megatron-fsdp-main-grads-dtype"] if comm == "auto" else comm
        if comm == "auto":
            assumed.append("Megatron-FSDP's gradients in the model's bf16 (--megatron-fsdp-main-grads-dtype and "
                           "--megatron-fsdp-grad-comm-dtype auto): the reduction moves 2 bytes an element")
        return 4.0 if comm == "fp32" else 2.0
    main = vals.get("--main-grads-dtype", "fp32")
    if main not in ("fp32", "bf16"):
        raise ValueError(f"--main-grads-dtype {main!r}; Megatron accepts fp32 or bf16")
    if "--accumulate-allreduce-grads-in-fp32" in flags and main != "fp32":
        raise ValueError("--accumulate-allreduce-grads-in-fp32 needs --main-grads-dtype fp32 (Megatron asserts so)")
    if "--grad-reduce-in-bf16" in flags or main == "bf16":
        return 2.0
    assumed.append("gradients accumulated and all-reduced in fp32 (Megatron's rule for a bf16 run; "
                   "--grad-reduce-in-bf16 turns it off): the data-parallel reduction moves 4 bytes an element; the "
                   "fp32 gradient buffer is counted at the memory model's 2 bytes a parameter")
    return 4.0


def unfused_grad_accum_bytes(main_grad_bytes: float, sharded_grads: bool = False) -> float:
    """HBM bytes per parameter per microbatch that Megatron-Core moves to accumulate a weight
    gradient outside its GEMM (``Engine.grad_accum_bytes``), as it runs without
    ``gradient_accumulation_fusion`` (``--no-gradient-accumulation-fusion``; Megatron-Bridge's
    ``model.gradient_accumulation_fusion: false``; NeMo 1's, off by default).  With the fusion, the
    weight-gradient GEMM accumulates into the main gradient itself (Transformer Engine's
    ``fuse_wgrad_accumulation``): nothing moves outside it.  Without it the GEMM writes the
    gradient as ``param.grad`` in the model's bf16 and a backward hook adds it to the main
    gradient: ``param.main_grad.add_(param.grad.data)`` (Megatron-Core's
    ``DistributedDataParallel._make_backward_post_hook``, ``megatron/core/distributed/
    distributed_data_parallel.py``; Apex's ``DistributedFusedAdam._grad_copy`` does the same
    ``add_`` into its bucket), a 2-byte read and the main gradient read and written:
    ``2 + 2 main_grad_bytes`` (10 with fp32 main gradients, Megatron's rule for bf16 runs).
    Megatron-FSDP with sharded gradients copies it into the unsharded buffer it then
    reduce-scatters (``param.main_grad.copy_(param.grad)``, ``megatron_fsdp.py``):
    ``2 + main_grad_bytes``."""
    if main_grad_bytes not in (2.0, 4.0):
        raise ValueError(f"main_grad_bytes={main_grad_bytes!r}: Megatron keeps main gradients in fp32 (4) or bf16 (2)")
    return 2.0 + (1.0 if sharded_grads else 2.0) * main_grad_bytes


def _rope_fusion(flags: set[str], model: ModelConfig, assumed: list[str]) -> bool:
    """Megatron's ``apply_rope_fusion`` (on by default; ``--no-rope-fusion`` turns it off): off,
    Megatron-Core's ``apply_rotary_pos_emb`` runs its PyTorch RoPE op by op
    (:attr:`~cosearch.engine.Engine.rope_fusion`); Megatron turns it off itself where the
    positions are not rotary (``megatron/training/arguments.py``), where the flag changes nothing."""
    if "--no-rope-fusion" not in flags:
        return True
    if model.position != "rotary":
        assumed.append("--no-rope-fusion: inert, the model's positions are not rotary")
        return True
    assumed.append("--no-rope-fusion: the rotary embedding run as Megatron-Core's PyTorch RoPE, op by op")
    return False


def activation_fusion_off_flag(gated: bool) -> str:
    """Megatron-LM's switch that turns its MLP's bias-activation fusion off, as a config's
    ``bias_activation_fusion: false`` maps to it: ``--no-bias-swiglu-fusion`` for a gated (SwiGLU)
    MLP, ``--no-bias-gelu-fusion`` otherwise (``argument_utils.py``; read back by
    :func:`_activation_fusion`)."""
    return "--no-bias-swiglu-fusion" if gated else "--no-bias-gelu-fusion"


def _activation_fusion(flags: set[str], model: ModelConfig, assumed: list[str]) -> bool:
    """Megatron's ``bias_activation_fusion`` as Megatron-LM sets it (``argument_utils.py``: the
    ``--no-bias-swiglu-fusion`` switch for a SwiGLU MLP, ``--no-bias-gelu-fusion`` otherwise; and
    ``arguments.py`` turns the GeLU one off without linear biases): off, ``MLP.forward`` runs the
    activation as PyTorch ops (:attr:`~cosearch.engine.Engine.activation_fusion`); a clamped
    activation (GPT-OSS's) unfused is refused where the engine's graph is chosen
    (:func:`~cosearch.engine.graph_elementwise`)."""
    swiglu_off, gelu_off = "--no-bias-swiglu-fusion" in flags, "--no-bias-gelu-fusion" in flags
    if model.activation == "swiglu":
        off = swiglu_off
        if gelu_off:
            assumed.append("--no-bias-gelu-fusion: inert, the MLP is SwiGLU (--no-bias-swiglu-fusion is its switch)")
    elif model.activation == "gelu":
        off = gelu_off or not model.bias
        if swiglu_off:
            assumed.append("--no-bias-swiglu-fusion: inert, the MLP is GeLU (--no-bias-gelu-fusion is its switch)")
        if not model.bias and not gelu_off:
            assumed.append("a GeLU MLP without linear biases runs F.gelu unfused (Megatron turns the bias-GeLU "
                           "fusion off without biases)")
        elif off:
            assumed.append("--no-bias-gelu-fusion: the GeLU run as PyTorch's F.gelu, the MLP's bias added by a pass "
                           "of its own before it (both priced)")
    else:
        off = False
        for f in ("--no-bias-swiglu-fusion", "--no-bias-gelu-fusion"):
            if f in flags:
                assumed.append(f"{f}: not priced for the model's {model.activation} activation (one pass either way)")
    if off and model.activation == "swiglu":
        assumed.append("--no-bias-swiglu-fusion: the SwiGLU run as PyTorch ops (chunk, SiLU, product)"
                       + (", the experts' too" if model.moe else "")
                       + (", the MLP's bias added by a pass of its own before it" if model.bias else "") + " (priced)")
    return not off


def _grad_accum_bytes(vals: dict[str, str], flags: set[str], reduce_bytes: float, zero: int,
                      assumed: list[str]) -> float:
    """The line's :func:`unfused_grad_accum_bytes`, 0 with Megatron's gradient accumulation
    fusion (its default): the main gradients' bytes are the reduction's (Megatron's buffer holds
    them in the dtype it reduces), Megatron-FSDP's its ``--megatron-fsdp-main-grads-dtype`` (by
    default the model's bf16); its ZeRO-3 strategy shards them."""
    if "--no-gradient-accumulation-fusion" not in flags:
        return 0.0
    main = reduce_bytes
    if "--use-megatron-fsdp" in flags:
        main = 4.0 if vals.get("--megatron-fsdp-main-grads-dtype") == "fp32" else 2.0
    sharded = "--use-megatron-fsdp" in flags and zero == 3
    acc = unfused_grad_accum_bytes(main, sharded_grads=sharded)
    assumed.append(f"--no-gradient-accumulation-fusion: each backward's weight gradients written in bf16 and "
                   f"{'copied into' if sharded else 'added to'} the {'fp32' if main == 4.0 else 'bf16'} main "
                   f"gradients by a pass of {acc:g} bytes a parameter")
    return acc


#: Bytes of one element of each dtype Megatron's precision-aware optimizer can keep its state in
#: (``--main-params-dtype`` fp32/fp16, ``--exp-avg-dtype`` / ``--exp-avg-sq-dtype`` fp32/fp16/bf16/fp8).
OPTIMIZER_DTYPE_BYTES = {"fp32": 4.0, "fp16": 2.0, "bf16": 2.0, "fp8": 1.0}


def _optimizer_memory(vals: dict[str, str], flags: set[str], assumed: list[str]) -> MemoryConfig | None:
    """The optimizer state a line keeps: with ``--use-precision-aware-optimizer``, the main
    parameters (``--main-params-dtype``: fp32 or fp16) and Adam's two moments (``--exp-avg-dtype``,
    ``--exp-avg-sq-dtype``: fp32, fp16, bf16 or fp8) in their own dtypes, the memory model's
    optimizer bytes their sum (Megatron-LM's ``arguments.py`` choices; fp32 each by default, 12
    bytes, the memory model's own); without the flag Megatron keeps them fp32 whatever the dtypes
    say (said).  None: the memory model's default."""
    given = {f: vals[f] for f in ("--main-params-dtype", "--exp-avg-dtype", "--exp-avg-sq-dtype") if f in vals}
    allowed = {"--main-params-dtype": ("fp32", "fp16"), "--exp-avg-dtype": tuple(OPTIMIZER_DTYPE_BYTES),
               "--exp-avg-sq-dtype": tuple(OPTIMIZER_DTYPE_BYTES)}
    for f, v in given.items():
        if v not in allowed[f]:
            raise ValueError(f"{f} {v!r}; Megatron accepts {', '.join(allowed[f])}")
    if "--use-precision-aware-optimizer" not in flags:
        if any(v != "fp32" for v in given.values()):
            assumed.append(f"{', '.join(f'{f} {v}' for f, v in given.items())} without "
                           "--use-precision-aware-optimizer: Megatron keeps the optimizer state in fp32 (12 bytes a "
                           "parameter)")
        return None
    b = {f: OPTIMIZER_DTYPE_BYTES[given.get(f, "fp32")] for f in allowed}
    total = sum(b.values())
    assumed.append(f"precision-aware optimizer: main parameters {given.get('--main-params-dtype', 'fp32')}, moments "
                   f"{given.get('--exp-avg-dtype', 'fp32')} and {given.get('--exp-avg-sq-dtype', 'fp32')}: "
                   f"{total:g} bytes of optimizer state a parameter")
    return MemoryConfig(optimizer_bytes=total)


def _moe_run_fields(vals: dict[str, str], flags: set[str]) -> dict:
    """The MoE layout and capacity a line sets: ``--moe-layer-freq`` (Megatron's int k: one layer
    in k is MoE; or its ``([0]*(k-1)+[1])*n`` / ``([1]+[0]*(k-1))*n`` pattern, or ``[0]*d+[1]*m``
    for d dense layers first), ``--moe-expert-capacity-factor`` and
    ``--moe-pad-expert-input-to-capacity`` (:class:`~cosearch.models.ModelConfig`'s
    ``moe_layer_step``, ``dense_layers``, ``moe_capacity_factor`` and ``moe_pad_to_capacity``)."""
    import re
    out: dict = {}
    freq = vals.get("--moe-layer-freq")
    if freq is not None:
        f = freq.replace(" ", "")
        m1 = re.fullmatch(r"\(\[0\]\*(\d+)\+\[1\](?:\*1)?\)\*(\d+)", f)
        m2 = re.fullmatch(r"\(\[1\](?:\*1)?\+\[0\]\*(\d+)\)\*(\d+)", f)
        m3 = re.fullmatch(r"\[0\]\*(\d+)\+\[1\]\*(\d+)", f) or re.fullmatch(r"\(\[0\]\*(\d+)\+\[1\]\*(\d+)\)", f)
        if f.isdigit():
            if int(f) > 1:
                out["moe_layer_step"] = _int("--moe-layer-freq", f)
        elif m1 or m2:
            out["moe_layer_step"] = int((m1 or m2).group(1)) + 1
        elif m3:
            if int(m3.group(1)):
                out["dense_layers"] = int(m3.group(1))
        else:
            raise ValueError(f"--moe-layer-freq {freq!r}: cosearch reads an int, ([0]*(k-1)+[1])*n, ([1]+[0]*(k-1))*n "
                             "or [0]*d+[1]*m (one MoE layer in k, or d dense layers first)")
    if "--moe-expert-capacity-factor" in vals:
        cf = _float("--moe-expert-capacity-factor", vals["--moe-expert-capacity-factor"], 64.0)
        if cf > 0:
            out["moe_capacity_factor"] = cf
            out["moe_pad_to_capacity"] = "--moe-pad-expert-input-to-capacity" in flags
    elif "--moe-pad-expert-input-to-capacity" in flags:
        raise ValueError("--moe-pad-expert-input-to-capacity needs --moe-expert-capacity-factor")
    return out


def _with_run(model: ModelConfig, run: dict) -> ModelConfig:
    if not run:
        return model
    if not model.moe and set(run) - {"mtp_layers"}:
        raise ValueError("--moe-layer-freq / --moe-expert-capacity-factor need an MoE model (--num-experts)")
    try:
        return model.with_(**run)
    except ValueError as e:
        raise ValueError(f"the Megatron line's MoE layout or capacity: {e}") from None


def _recompute_modules(vals: dict[str, str], rc: str) -> tuple[str, ...]:
    """``--recompute-modules`` under selective granularity (Megatron-Core's default
    ``["core_attn"]`` is its classic selective recompute: no module list)."""
    from ..graph import RECOMPUTE_MODULES
    if rc != "selective" or "--recompute-modules" not in vals:
        return ()
    mods = tuple(dict.fromkeys(vals["--recompute-modules"].split(",")))
    bad = [m for m in mods if m not in RECOMPUTE_MODULES]
    if bad:
        raise ValueError(f"--recompute-modules {bad}: Megatron-Core's modules are {', '.join(RECOMPUTE_MODULES)}")
    return () if mods == ("core_attn",) else mods


def _recompute(vals: dict[str, str], flags: set[str], layers_per_stage: float,
               assumed: list[str]) -> tuple[str, int]:
    """(The recompute mode, the layers one activation checkpoint spans:
    :attr:`cosearch.engine.Engine.recompute_layers`).  Full granularity's ``uniform`` method (its
    default) checkpoints each run of ``--recompute-num-layers`` layers at its input and reruns it
    whole (Megatron-Core's ``_checkpointed_forward``); ``block`` with at least a stage's layers
    checkpoints each layer."""
    rc = vals.get("--recompute-granularity")
    if rc is None:
        if "--recompute-modules" in vals:
            raise ValueError("--recompute-modules needs --recompute-granularity selective")
        if "--recompute-method" in vals or "--recompute-num-layers" in vals:
            raise ValueError("--recompute-method and --recompute-num-layers need --recompute-granularity full")
        return ("selective" if "--recompute-activations" in flags else "none"), 1
    if rc not in ("full", "selective"):
        raise ValueError(f"--recompute-granularity {rc!r}; Megatron accepts full or selective")
    if "--recompute-activations" in flags and rc != "selective":
        raise ValueError("--recompute-activations (selective) contradicts --recompute-granularity full")
    if rc == "selective":
        if "--recompute-method" in vals:
            raise ValueError("--recompute-method applies to --recompute-granularity full only")
        return rc, 1
    if "--recompute-modules" in vals:
        raise ValueError("--recompute-modules applies to --recompute-granularity selective only")
    method = vals.get("--recompute-method")
    if method is None:
        assumed.append("--recompute-granularity full without --recompute-method: every layer recomputed")
        method = "uniform"
    if method not in ("uniform", "block"):
        raise ValueError(f"--recompute-method {method!r}; Megatron accepts uniform or block")
    n = _int("--recompute-num-layers", vals.get("--recompute-num-layers", "1"))
    if method == "block" and n < layers_per_stage:
        raise ValueError(f"--recompute-method block --recompute-num-layers {n} recomputes only part of each "
                         f"stage's {layers_per_stage:g} layers: partial recompute is not modelled")
    return "full", n if method == "uniform" else 1


def _precision(vals: dict[str, str], assumed: list[str]) -> tuple[str, str | None]:
    """(precision, scaling recipe) of ``--fp8-format``/``--fp8-recipe`` (Megatron's default
    ``delayed``) and ``--fp4-format``/``--fp4-recipe``."""
    fmt, recipe = vals.get("--fp8-format"), vals.get("--fp8-recipe")
    fp4, fp4_recipe = vals.get("--fp4-format"), vals.get("--fp4-recipe")
    if fmt is not None and fmt not in ("hybrid", "e4m3"):
        raise ValueError(f"--fp8-format {fmt!r}; choose hybrid or e4m3")
    if recipe is not None:
        if recipe not in SCALING_RECIPES["fp8"]:
            raise ValueError(f"--fp8-recipe {recipe!r}; Megatron accepts {', '.join(SCALING_RECIPES['fp8'])}")
        if fmt is None:
            raise ValueError("--fp8-recipe needs --fp8-format")
        if recipe in ("blockwise", "mxfp8"):
            assumed.append(f"--fp8-recipe {recipe}: its block scales' bytes left out of the FP8 operands")
    if fp4 is not None or fp4_recipe is not None:
        if fp4 not in ("e2m1",):
            raise ValueError(f"--fp4-format {fp4!r}; Megatron accepts e2m1 (NVFP4)")
        if fp4_recipe not in (None, "nvfp4"):
            raise ValueError(f"--fp4-recipe {fp4_recipe!r}: only nvfp4 is modelled")
        if fmt is not None:
            assumed.append("--fp4-format with --fp8-format: every layer GEMM priced in NVFP4")
        return "fp4", "nvfp4"
    return ("fp8", recipe or "delayed") if fmt else ("bf16", None)


def _bf16_layers(vals: dict[str, str], flags: set[str], precision: str) -> tuple[int, int]:
    """``--first-last-layers-bf16`` with ``--num-layers-at-start-in-bf16`` /
    ``--num-layers-at-end-in-bf16`` (Megatron's defaults 1 and 1; the counts alone do nothing):
    the (first, last) layers kept in bf16 under FP8 or NVFP4; none under bf16."""
    if "--first-last-layers-bf16" not in flags or precision == "bf16":
        return (0, 0)
    return (_int("--num-layers-at-start-in-bf16", vals.get("--num-layers-at-start-in-bf16", "1"), 0),
            _int("--num-layers-at-end-in-bf16", vals.get("--num-layers-at-end-in-bf16", "1"), 0))


def _overlap_p2p(flags: set[str], pp: int, virtual: int, assumed: list[str]) -> bool:
    """Megatron's ``overlap_p2p_comm``: on by default with virtual stages (``arguments.py``:
    ``--no-overlap-p2p-communication`` stores False, default True, since commit 4eeff55 of
    2023-10; ``validate_args`` turns it off without an interleaved schedule), on with the older
    ``--overlap-p2p-communication``."""
    on, off = "--overlap-p2p-communication" in flags, "--no-overlap-p2p-communication" in flags
    if on and off:
        raise ValueError("give one of --overlap-p2p-communication and --no-overlap-p2p-communication")
    if pp == 1 or virtual == 1:
        if on:
            assumed.append("--overlap-p2p-communication without virtual stages: off (Megatron's validate_args "
                           "turns it off without the interleaved schedule)")
        return False
    if not on and not off:
        assumed.append("pipeline sends and receives overlap the interleaved schedule's chunks (Megatron's default "
                       "with virtual stages since 2023-10; --no-overlap-p2p-communication turns it off)")
    return not off


def read_megatron_args(text: str, model: ModelConfig | str | None = None, source: str = "Megatron arguments"
                       ) -> RunConfig:
    """What a Megatron argument line fixes, as a :class:`~cosearch.runs.RunConfig` (dp is left
    to the chips: ``chips / (tp pp cp)``, as Megatron derives it).

    ``model``: the model the run trains (None: built from the line's model flags); the line's
    model flags must agree with it.  Raises ``ValueError`` naming the flag for a malformed,
    contradictory or unpriceable line."""
    if not isinstance(text, str):
        raise ValueError(f"read_megatron_args: give the argument line as text (a str), got {type(text).__name__}")
    from .config import given_model
    model = given_model(model, "read_megatron_args")
    vals, flags, neutral = _split(text)
    assumed: list[str] = []
    model = _line_model(vals, flags, model, assumed)
    if model is None:
        raise ValueError("the Megatron line has no model flags (--num-layers, --hidden-size, ...): give the model "
                         "(--model, or a config.json)")
    tp = _int("--tensor-model-parallel-size", vals.get("--tensor-model-parallel-size", "1"))
    pp = _int("--pipeline-model-parallel-size", vals.get("--pipeline-model-parallel-size", "1"))
    cp = _int("--context-parallel-size", vals.get("--context-parallel-size", "1"))
    mb = _int("--micro-batch-size", vals.get("--micro-batch-size", "1"))
    ep = _int("--expert-model-parallel-size", vals.get("--expert-model-parallel-size", "1"))
    etp = _int("--expert-tensor-parallel-size", vals["--expert-tensor-parallel-size"]) \
        if "--expert-tensor-parallel-size" in vals else None
    if etp == tp:
        etp = None
    batch = _int("--global-batch-size", vals["--global-batch-size"]) if "--global-batch-size" in vals else None
    virtual = 1
    if "--num-virtual-stages-per-pipeline-rank" in vals:
        virtual = _int("--num-virtual-stages-per-pipeline-rank", vals["--num-virtual-stages-per-pipeline-rank"])
        if "--num-layers-per-virtual-pipeline-stage" in vals:
            raise ValueError("give one of --num-virtual-stages-per-pipeline-rank and "
                             "--num-layers-per-virtual-pipeline-stage")
    elif "--num-layers-per-virtual-pipeline-stage" in vals:
        per = _int("--num-layers-per-virtual-pipeline-stage", vals["--num-layers-per-virtual-pipeline-stage"])
        if model.num_layers % (pp * per):
            raise ValueError(f"--num-layers-per-virtual-pipeline-stage {per}: {model.num_layers} layers are not "
                             f"pp x {per} = {pp * per} per model chunk")
        virtual = model.num_layers // (pp * per)
    split = _stage_layers(vals, flags, model.num_layers, pp, virtual)
    if split is not None and "--num-layers-per-virtual-pipeline-stage" in vals:
        raise ValueError("an uneven pipeline split with --num-layers-per-virtual-pipeline-stage: give the model "
                         "chunks as --num-virtual-stages-per-pipeline-rank")
    if split is None and model.num_layers % (pp * virtual):
        raise ValueError(f"{model.num_layers} layers do not split evenly over pp x virtual stages = {pp} x {virtual} "
                         "(Megatron refuses an uneven split without --decoder-first/last-pipeline-num-layers)")
    if "--cp-comm-type" in vals:
        kinds = set(vals["--cp-comm-type"].split(","))
        bad = sorted(kinds - set(CP_COMM_TYPES))
        if bad:
            raise ValueError(f"--cp-comm-type {bad}; Megatron accepts {', '.join(CP_COMM_TYPES)}")
        if cp > 1 and kinds != {"p2p"}:
            raise ValueError(f"--cp-comm-type {', '.join(sorted(kinds))} is not modelled: cosearch prices context "
                             "parallelism as the p2p K/V ring (Megatron's default)")
    rc, span = _recompute(vals, flags, model.num_layers / pp, assumed)
    precision, recipe = _precision(vals, assumed)
    bf16_layers = _bf16_layers(vals, flags, precision)
    backend = vals.get("--attention-backend")
    if backend is not None and backend not in ("flash", "fused", "unfused", "local", "auto"):
        raise ValueError(f"--attention-backend {backend!r}; Megatron accepts flash, fused, unfused, local or auto")
    optimizer = vals.get("--optimizer", "adam")
    if optimizer != "adam":
        # Megatron's --optimizer: adam (its default) keeps Adam's two fp32 moments, which the memory
        # model prices; sgd keeps one momentum, muon adds Newton-Schulz compute: not modelled
        raise ValueError(f"--optimizer {optimizer!r} is not modelled (adam, Megatron's default, is)")
    impl = vals.get("--transformer-impl")
    if impl is not None and impl not in ("transformer_engine", "local"):
        raise ValueError(f"--transformer-impl {impl!r} is not modelled for training (transformer_engine, local)")
    flash = "--use-flash-attn" in flags or backend in ("flash", "fused", "auto") or cp > 1
    if backend == "auto":
        assumed.append("--attention-backend auto: a fused (flash) attention kernel")
    elif backend is None and not flash:
        if impl == "local":
            assumed.append("--transformer-impl local without --use-flash-attn or --attention-backend: Megatron-Core's "
                           "local core attention, unfused")
        else:
            # Megatron-LM's defaults: --transformer-impl transformer_engine (since April 2024, e7b74a4b7e)
            # and --attention-backend auto (TransformerConfig.attention_backend), with which Transformer
            # Engine's DotProductAttention picks its fused kernels
            flash = True
            assumed.append("no --attention-backend: Megatron's defaults (--transformer-impl transformer_engine since "
                           "April 2024, --attention-backend auto) run Transformer Engine's fused attention; a line for "
                           "an older Megatron-LM, whose local implementation ran it unfused, needs "
                           "--transformer-impl local")
    if "--no-masked-softmax-fusion" in flags and not flash:
        # Megatron-Core's FusedScaleMaskSoftmax falls back to PyTorch's scale, mask and softmax (the
        # local attention's path); the fused attention kernels do all three inside
        assumed.append("--no-masked-softmax-fusion: the unfused attention's scale, mask and softmax run as separate "
                       "PyTorch passes over the scores, priced as one softmax pass")
    if "--overlap-param-gather" in flags and "--overlap-grad-reduce" not in flags:
        raise ValueError("--overlap-param-gather needs --overlap-grad-reduce (Megatron refuses it without)")
    if "--overlap-grad-reduce" not in flags:
        assumed.append("no --overlap-grad-reduce: the data-parallel gradient reduction runs after the backward "
                       "(Megatron's default)")
    if "--overlap-param-gather-with-optimizer-step" in flags:
        # megatron/training/arguments.py's assertions
        if not ("--use-distributed-optimizer" in flags and "--overlap-param-gather" in flags and virtual > 1):
            raise ValueError("--overlap-param-gather-with-optimizer-step needs --use-distributed-optimizer, "
                             "--overlap-param-gather and an interleaved pipeline (virtual stages), as Megatron asserts")
        assumed.append("--overlap-param-gather-with-optimizer-step: the first bucket's parameter all-gather beside the "
                       "optimizer step, priced as --overlap-param-gather's overlap with the next forward")
    if "--tp-comm-overlap-cfg" in vals:
        assumed.append("--tp-comm-overlap-cfg: the userbuffers overlap's per-GEMM methods from that file not read "
                       "(cosearch's TP-overlap model prices the overlap)" if "--tp-comm-overlap" in flags else
                       "--tp-comm-overlap-cfg: inert without --tp-comm-overlap")
    if "--fp8-param-gather" in flags and precision != "fp8":
        raise ValueError("--fp8-param-gather keeps FP8 weights: it needs --fp8-format")
    if "--tp-comm-overlap" in flags and not (tp > 1 and "--sequence-parallel" in flags):
        # megatron/training/arguments.py: "Tensor parallel communication/GEMM overlap can happen only
        # when sequence parallelism is enabled", after turning sequence parallelism off at tp 1
        raise ValueError("--tp-comm-overlap needs --sequence-parallel under tensor parallelism > 1 (Megatron refuses "
                         "it otherwise, and turns sequence parallelism off at tp 1)")
    engine = megatron_core(tp_comm_overlap="--tp-comm-overlap" in flags,
                           fp8_param_gather="--fp8-param-gather" in flags,
                           overlap_grad_reduce="--overlap-grad-reduce" in flags,
                           overlap_p2p_comm=_overlap_p2p(flags, pp, virtual, assumed),
                           op_fuser="--use-transformer-engine-op-fuser" in flags,
                           rope_fusion=_rope_fusion(flags, model, assumed),
                           activation_fusion=_activation_fusion(flags, model, assumed))
    reduce_bytes = _grad_reduce_bytes(vals, flags, assumed)
    if reduce_bytes == 4.0:
        engine = replace(engine, name=engine.name + "-fp32-grad-reduce", grad_reduce_bytes=4.0)
    zero = _zero_stage(vals, flags, assumed)
    accum = _grad_accum_bytes(vals, flags, reduce_bytes, zero, assumed)
    if accum:
        engine = replace(engine, name=engine.name + "-unfused-grad-accum", grad_accum_bytes=accum)
    engine = with_cross_entropy_fusion(engine, _cross_entropy(vals, flags, assumed))
    engine = with_recompute_modules(engine, _recompute_modules(vals, rc))
    if span > 1:
        engine = replace(engine, name=engine.name + f"-recompute-{span}-layers", recompute_layers=span)
    sms = _moe_execution(vals, flags, model, ep, precision, assumed)
    dispatcher, overlap, backend = _moe_dispatch(vals, flags, ep, assumed)
    engine = with_moe_dispatch(engine, dispatcher, overlap, sms, backend)
    # (through graph_elementwise, which also refuses what the engine cannot run on this model)
    assumed += eager_pass_notes(engine, model)
    plan = dict(tp=tp, pp=pp, microbatch=mb, recompute=rc, virtual_stages=virtual,
                sequence_parallel="--sequence-parallel" in flags and tp > 1,
                zero=zero, flash_attention=flash,
                context_parallel=cp, precision=precision, expert_parallel=ep, expert_tensor_parallel=etp,
                scaling_recipe=recipe, bf16_layers=bf16_layers, stage_layers=split,
                fp8_attention=_fp8_attention(flags, precision, recipe, flash, assumed))
    memory = _optimizer_memory(vals, flags, assumed)
    return RunConfig(source, model=model, plan=plan, global_batch=batch, engine=engine, assumed=tuple(assumed),
                     neutral=tuple(neutral), memory=memory)


def parse_megatron_args(text: str, model: ModelConfig | None, num_chips: int, global_batch: int | None = None
                        ) -> MegatronPlan:
    """The model and :class:`PlanSpec` of a Megatron argument line on ``num_chips`` chips.

    ``model``: the model the run trains (None: built from the line's model flags); the line's
    model flags must agree with it.  ``global_batch``: the batch given outside the line (None:
    the line's ``--global-batch-size``); both given must agree.  Raises ``ValueError`` naming
    the flag for a malformed, contradictory or unpriceable line."""
    rc = read_megatron_args(text, model)
    if rc.global_batch is not None and global_batch is not None and int(global_batch) != rc.global_batch:
        raise ValueError(f"--global-batch-size {rc.global_batch} in the Megatron line contradicts the batch given "
                         f"({global_batch}): drop one")
    if rc.global_batch is None and global_batch is None:
        raise ValueError("the argument line has no --global-batch-size and no batch was given")
    d = rc.resolve(num_chips, global_batch=global_batch)
    return MegatronPlan(d.spec, d.global_batch, d.neutral, d.engine, d.model, d.assumed, d.memory)
