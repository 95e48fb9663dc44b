"""What a framework's file says about a training run, and the plan it becomes on a cluster.

Every reader in :mod:`cosearch.runs` returns a :class:`RunConfig`: the model (if the file
describes one), the plan fields it fixes, the batch, the engine its switches select, and two
lists a user should read: what the reader **assumed** where the file is silent (the
framework's own defaults, each with its source) and which fields were **neutral** (they change
neither step time nor memory in cosearch's model).  Anything else a file sets is refused by
name, so no field is ever silently dropped.

Several files describe one run together (a Hugging Face ``config.json`` for the model and a
torchtitan TOML for the plan): :func:`merge` combines them and refuses any field two files set
differently.  :meth:`RunConfig.resolve` turns the result into a :class:`RunDescription` on a
number of chips: the data-parallel degree is what the chips leave (``chips / (tp pp cp)``), as
every framework here derives it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from .._validate import MAX_CHIPS, positive_float, positive_int
from ..cluster import Cluster
from ..engine import MEGATRON_CORE, Engine
from ..hardware import Accelerator
from ..memory import MemoryConfig
from ..models import ModelConfig
from ..plan import PlanSpec

__all__ = ["RunConfig", "RunDescription", "merge", "model_differences", "given_model"]


def given_model(model: ModelConfig | str | None, where: str) -> ModelConfig | None:
    """A model handed to a reader: None (the files give it), or :func:`cosearch.models.model_arg`'s."""
    from ..models import model_arg
    return None if model is None else model_arg(model, where)

#: The PlanSpec fields a reader may fix (dp is derived from the chips unless a file states it).
PLAN_FIELDS = ("tp", "pp", "microbatch", "recompute", "virtual_stages", "sequence_parallel", "zero",
               "flash_attention", "context_parallel", "precision", "zero_group", "expert_parallel",
               "stage_layers", "offload_layers", "expert_tensor_parallel", "scaling_recipe", "bf16_layers",
               "fp8_attention", "pipeline_microbatches")


@dataclass(frozen=True)
class RunDescription:
    """One run, ready for :func:`cosearch.plan.evaluate`: ``evaluate(d.model, d.chip, d.cluster,
    d.spec, d.global_batch, engine=d.engine, mem=d.memory)`` (``chip``/``cluster`` are None where
    no file names the hardware; give your own).  ``measured_tok_s_per_chip``: the throughput a
    measured-run file states (None otherwise).  ``memory``: the bytes a parameter keeps where a
    file sets them (a precision-aware optimizer's state dtypes; None: the memory model's
    default)."""

    model: ModelConfig
    spec: PlanSpec
    global_batch: int
    engine: Engine
    num_chips: int
    sources: tuple[str, ...]
    chip: Accelerator | None = None
    cluster: Cluster | None = None
    measured_tok_s_per_chip: float | None = None
    assumed: tuple[str, ...] = ()
    neutral: tuple[str, ...] = ()
    memory: MemoryConfig | None = None

    def summary(self) -> str:
        """One line: what was read."""
        m = self.model
        return (f"{m.name} ({m.num_params() / 1e9:.2f}B parameters, sequence {m.seq_len}), "
                f"{self.spec.describe()}, global batch {self.global_batch}, engine {self.engine.name}")


@dataclass(frozen=True)
class RunConfig:
    """What one file (or several, :func:`merge`) fixes about a run.

    ``source``: the reader and file (``"torchtitan TOML train.toml"``).  ``plan``: PlanSpec
    fields the file fixes (names as :data:`PLAN_FIELDS`).  ``dp``: a data-parallel degree the
    file states (None: what the chips leave).  ``global_batch`` or ``batch_per_replica``
    (sequences per data-parallel replica per step, as torchtitan's ``local_batch_size``).
    ``num_chips``, ``chip``, ``cluster``: the hardware where the file names it.  ``seq_len``: the
    training sequence a file states without describing the model (it must agree with the model's).
    ``memory``: the bytes a parameter keeps, where the file sets them (None: the memory model's
    default).  ``hf_config_overrides``: Hugging Face config fields a file sets on the model's
    ``config.json`` (llm-foundry's ``model.config_overrides``, nested as written), which
    :func:`cosearch.runs.read_configs` applies where it reads that file (and then clears); a
    run still owing them (its model never met them) is refused."""

    source: str
    model: ModelConfig | None = None
    plan: dict[str, Any] = field(default_factory=dict)
    dp: int | None = None
    global_batch: int | None = None
    batch_per_replica: int | None = None
    num_chips: int | None = None
    engine: Engine | None = None
    chip: Accelerator | None = None
    cluster: Cluster | None = None
    measured_tok_s_per_chip: float | None = None
    seq_len: int | None = None
    assumed: tuple[str, ...] = ()
    neutral: tuple[str, ...] = ()
    memory: MemoryConfig | None = None
    hf_config_overrides: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        bad = sorted(set(self.plan) - set(PLAN_FIELDS))
        if bad:
            raise ValueError(f"RunConfig.plan: unknown plan fields {bad}; known: {', '.join(PLAN_FIELDS)}")
        if self.measured_tok_s_per_chip is not None:
            # a measured throughput of NaN, infinity, zero or less would make every error it enters a
            # silent NaN or a meaningless number
            object.__setattr__(self, "measured_tok_s_per_chip",
                               positive_float("measured_tok_s_per_chip", self.measured_tok_s_per_chip))

    def resolve(self, num_chips: int | None = None, model: ModelConfig | str | None = None,
                global_batch: int | None = None) -> RunDescription:
        """The run on ``num_chips`` chips (None: the file's own count).  ``model`` /
        ``global_batch`` given outside the files must agree with a file that sets them.  Raises
        ``ValueError`` naming what is missing or contradictory."""
        model = given_model(model, "RunConfig.resolve")
        base = merge([self, RunConfig("the command line", model=model, global_batch=global_batch,
                                      num_chips=num_chips)]) if (model or global_batch or num_chips) else self
        if base.model is None:
            raise ValueError(f"{self.source}: no file describes the model; add a model file (a Hugging Face "
                             "config.json) or a model preset")
        if base.hf_config_overrides:
            raise ValueError(f"{self.source}: config_overrides {base.hf_config_overrides} change the Hugging Face "
                             "config.json, which no file of this run gave: read the YAML with its config.json "
                             "(read_configs; on the command line each after --from) so they apply")
        if base.seq_len is not None and base.seq_len != base.model.seq_len:
            raise ValueError(f"{self.source}: sequence {base.seq_len} contradicts the model's {base.model.seq_len}")
        n = base.num_chips or (base.cluster.num_chips if base.cluster is not None else None)
        if n is None:
            raise ValueError(f"{self.source}: the number of chips is not given; give the cluster's size")
        n = positive_int(f"{base.source}: the number of chips", n, MAX_CHIPS)
        p = dict(base.plan)
        # the degrees divide the chips below: a zero or a fraction is refused by name first (a run
        # file's tp of 0 was a ZeroDivisionError that stopped `cosearch runs check` on every row)
        tp, pp, cp = (positive_int(f"{base.source}: {k}", p.get(k, 1), MAX_CHIPS)
                      for k in ("tp", "pp", "context_parallel"))
        if base.dp is not None:
            dp = positive_int(f"{base.source}: dp", base.dp, MAX_CHIPS)
            if dp * tp * pp * cp != n:
                raise ValueError(f"{base.source}: dp x tp x pp x cp = {dp} x {tp} x {pp} x {cp} = {dp * tp * pp * cp} "
                                 f"contradicts the {n} chips")
        else:
            if n % (tp * pp * cp):
                raise ValueError(f"{base.source}: {n} chips are not a multiple of tp x pp x cp = {tp} x {pp} x {cp}")
            dp = n // (tp * pp * cp)
        batch = base.global_batch
        if base.batch_per_replica is not None:
            implied = base.batch_per_replica * dp
            if batch is not None and batch != implied:
                raise ValueError(f"{base.source}: global batch {batch} contradicts {base.batch_per_replica} sequences "
                                 f"per data-parallel replica x dp {dp} = {implied}")
            batch = implied
        if batch is None:
            raise ValueError(f"{base.source}: no global batch is given")
        batch = positive_int(f"{base.source}: the global batch", batch, 1 << 40)
        assumed = list(base.assumed)
        if "microbatch" not in p:
            if batch % dp:
                raise ValueError(f"{base.source}: global batch {batch} is not a multiple of dp {dp}")
            if pp > 1:
                raise ValueError(f"{base.source}: the microbatch size is not given (needed with pipeline stages)")
            p["microbatch"] = batch // dp
            assumed.append(f"microbatch {batch // dp}: the whole per-replica batch in one pass (no gradient "
                           "accumulation is stated)")
        mb = int(p.pop("microbatch"))
        spec = PlanSpec(dp, tp=tp, pp=pp, microbatch=mb, **{k: v for k, v in p.items() if k not in ("tp", "pp")})
        return RunDescription(base.model, spec, int(batch), base.engine or MEGATRON_CORE, int(n),
                              tuple(base.source.split(" + ")), base.chip, base.cluster,
                              base.measured_tok_s_per_chip, tuple(assumed), base.neutral, base.memory)


def model_differences(a: ModelConfig, b: ModelConfig) -> list[str]:
    """The fields (other than the name) on which two model configs differ, as ``field: a -> b``."""
    out = []
    for f in dataclasses.fields(ModelConfig):
        if f.name == "name":
            continue
        va, vb = getattr(a, f.name), getattr(b, f.name)
        if va != vb:
            out.append(f"{f.name}: {va!r} vs {vb!r}")
    return out


def _agree(name: str, a: Any, b: Any, sa: str, sb: str) -> Any:
    if a is None:
        return b
    if b is None:
        return a
    if isinstance(a, ModelConfig) and isinstance(b, ModelConfig):
        diff = model_differences(a, b)
        if diff:
            raise ValueError(f"the model of {sa} and of {sb} differ: {'; '.join(diff)}")
        return a
    if a != b:
        raise ValueError(f"{name}: {sa} gives {_show(a)} where {sb} gives {_show(b)}; drop one")
    return a


def _show(v: Any) -> str:
    return getattr(v, "name", None) or repr(v)


def merge(configs: list[RunConfig]) -> RunConfig:
    """One config from several files of one run; a field two of them set differently is
    refused naming both files."""
    if not isinstance(configs, (list, tuple)) or not all(isinstance(c, RunConfig) for c in configs):
        raise ValueError(f"merge: give a list of RunConfig (the readers' results), got {configs!r:.80}")
    if not configs:
        raise ValueError("merge: no run configs")
    out = configs[0]
    for c in configs[1:]:
        plan = dict(out.plan)
        for k, v in c.plan.items():
            plan[k] = _agree(k, plan.get(k), v, out.source, c.source)
        kw: dict[str, Any] = {}
        for f in ("model", "dp", "global_batch", "batch_per_replica", "num_chips", "engine", "chip", "cluster",
                  "measured_tok_s_per_chip", "seq_len", "memory"):
            kw[f] = _agree(f.replace("_", " "), getattr(out, f), getattr(c, f), out.source, c.source)
        hf = dict(out.hf_config_overrides)
        for k, v in c.hf_config_overrides.items():
            hf[k] = _agree(f"config_overrides.{k}", hf.get(k), v, out.source, c.source)
        out = RunConfig(f"{out.source} + {c.source}", plan=plan, assumed=out.assumed + c.assumed,
                        neutral=out.neutral + c.neutral, hf_config_overrides=hf, **kw)
    return out
