"""Read a Megatron-LM / NeMo (Megatron-Core) argument line as a cosearch plan.

``cosearch plan --from-megatron-args "--tensor-model-parallel-size 8 ..."`` prices the run a
Megatron command line describes.  The flags read (Megatron-LM ``megatron/training/arguments.py``
names):

==========================================  =====================================================
``--tensor-model-parallel-size``            tp
``--pipeline-model-parallel-size``          pp
``--context-parallel-size``                 context_parallel
``--expert-model-parallel-size``            expert_parallel
``--num-layers-per-virtual-pipeline-stage`` virtual stages = layers / (pp x this)
``--num-virtual-stages-per-pipeline-rank``  virtual stages (the newer spelling)
``--micro-batch-size``                      microbatch
``--global-batch-size``                     the global batch
``--recompute-granularity``                 ``full`` / ``selective`` (absent: none)
``--sequence-parallel``                     sequence parallelism
``--use-distributed-optimizer``             ZeRO-1 (Megatron's distributed optimizer)
``--fp8-format``                            FP8 (``hybrid`` or ``e4m3``)
``--use-flash-attn`` / ``--attention-backend flash|fused``   flash attention
``--tp-comm-overlap``                       engine ``megatron-core-tp-overlap`` (with tp > 1)
``--fp8-param-gather``                      the engine's ``fp8_param_gather`` (FP8 plans)
==========================================  =====================================================

The engine (:attr:`MegatronPlan.engine`) is Megatron-Core's, with the two flags above applied.

The data-parallel degree is what the cluster's chips leave: ``chips / (tp pp cp)``, as Megatron
derives it.  Flags that do not change the plan's performance model are listed back as ignored.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from .engine import MEGATRON_CORE, Engine, megatron_core
from .models import ModelConfig
from .plan import PlanSpec

__all__ = ["MegatronPlan", "parse_megatron_args"]

_VALUED = {"--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--context-parallel-size",
           "--expert-model-parallel-size",
           "--num-layers-per-virtual-pipeline-stage", "--num-virtual-stages-per-pipeline-rank",
           "--micro-batch-size", "--global-batch-size", "--recompute-granularity", "--fp8-format",
           "--attention-backend"}
_FLAGS = {"--sequence-parallel", "--use-distributed-optimizer", "--use-flash-attn", "--tp-comm-overlap",
          "--fp8-param-gather"}


@dataclass(frozen=True)
class MegatronPlan:
    """The plan an argument line describes, its global batch, the flags not used and the
    engine the flags select."""

    spec: PlanSpec
    global_batch: int
    ignored: tuple[str, ...] = ()
    engine: Engine = MEGATRON_CORE


def _int(flag: str, value: str) -> int:
    try:
        x = int(value)
    except ValueError:
        raise ValueError(f"{flag} needs a whole number, got {value!r}") from None
    if x < 1:
        raise ValueError(f"{flag} must be at least 1, got {x}")
    return x


def parse_megatron_args(text: str, model: ModelConfig, num_chips: int, global_batch: int | None = None
                        ) -> MegatronPlan:
    """The :class:`PlanSpec` of a Megatron argument line on ``num_chips`` chips.  Raises
    ``ValueError`` naming the flag for a malformed or inconsistent line."""
    try:
        words = shlex.split(text)
    except ValueError as e:
        raise ValueError(f"cannot split the Megatron argument line: {e}") from None
    vals: dict[str, str] = {}
    flags: set[str] = set()
    ignored: list[str] = []
    i = 0
    while i < len(words):
        w = words[i]
        key, eq, inline = w.partition("=")
        if key in _VALUED:
            if eq:
                vals[key] = inline
            elif i + 1 < len(words):
                vals[key] = words[i + 1]
                i += 1
            else:
                raise ValueError(f"{key} needs a value")
        elif w in _FLAGS:
            flags.add(w)
        else:
            ignored.append(w)
        i += 1
    tp = _int("--tensor-model-parallel-size", vals.get("--tensor-model-parallel-size", "1"))
    pp = _int("--pipeline-model-parallel-size", vals.get("--pipeline-model-parallel-size", "1"))
    cp = _int("--context-parallel-size", vals.get("--context-parallel-size", "1"))
    mb = _int("--micro-batch-size", vals.get("--micro-batch-size", "1"))
    ep = _int("--expert-model-parallel-size", vals.get("--expert-model-parallel-size", "1"))
    if "--global-batch-size" in vals:
        global_batch = _int("--global-batch-size", vals["--global-batch-size"])
    if global_batch is None:
        raise ValueError("the argument line has no --global-batch-size and no batch was given")
    if num_chips % (tp * pp * cp):
        raise ValueError(f"{num_chips} chips are not a multiple of tp x pp x cp = {tp} x {pp} x {cp}")
    dp = num_chips // (tp * pp * cp)
    virtual = 1
    if "--num-virtual-stages-per-pipeline-rank" in vals:
        virtual = _int("--num-virtual-stages-per-pipeline-rank", vals["--num-virtual-stages-per-pipeline-rank"])
    elif "--num-layers-per-virtual-pipeline-stage" in vals:
        per = _int("--num-layers-per-virtual-pipeline-stage", vals["--num-layers-per-virtual-pipeline-stage"])
        if model.num_layers % (pp * per):
            raise ValueError(f"--num-layers-per-virtual-pipeline-stage {per}: {model.num_layers} layers are not "
                             f"pp x {per} = {pp * per} per model chunk")
        virtual = model.num_layers // (pp * per)
    rc = vals.get("--recompute-granularity", "none")
    if rc not in ("none", "full", "selective"):
        raise ValueError(f"--recompute-granularity {rc!r}; Megatron accepts full or selective")
    fmt = vals.get("--fp8-format")
    if fmt is not None and fmt not in ("hybrid", "e4m3"):
        raise ValueError(f"--fp8-format {fmt!r}; choose hybrid or e4m3")
    backend = vals.get("--attention-backend", "")
    flash = "--use-flash-attn" in flags or backend in ("flash", "fused") or cp > 1
    spec = PlanSpec(dp, tp, pp, mb, recompute=rc, virtual_stages=virtual,
                    sequence_parallel="--sequence-parallel" in flags and tp > 1,
                    zero=1 if "--use-distributed-optimizer" in flags else 0, flash_attention=flash,
                    context_parallel=cp, precision="fp8" if fmt else "bf16", expert_parallel=ep)
    if "--fp8-param-gather" in flags and fmt is None:
        raise ValueError("--fp8-param-gather keeps FP8 weights: it needs --fp8-format")
    engine = megatron_core(tp_comm_overlap="--tp-comm-overlap" in flags and tp > 1,
                           fp8_param_gather="--fp8-param-gather" in flags)
    return MegatronPlan(spec, int(global_batch), tuple(ignored), engine)
