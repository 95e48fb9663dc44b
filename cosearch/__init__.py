"""cosearch — hardware/placement co-search for LLM training and federated learning
with Invariant Dropout.

Co-search pipeline (PHAZE-style)::

    import cosearch as cs
    model = cs.models.preset("gpt3-175b")
    space = cs.SearchSpace.phaze(hbm_gib=32)       # PHAZE's space; HBM is the run's scenario
    res = cs.cosearch(model, space, cs.Cluster(1024), global_batch=1536)
    print(res.table())

Public API
----------
Models and graphs: :class:`ModelConfig`, :func:`model_preset`, :mod:`graph` (``build``,
``from_module``; MoE models through ``num_experts``; DeepSeek-V4's attention through
:class:`CompressedAttention`; presets include mixtral-8x7b, grok-1, deepseek-v3 and
deepseek-v4-flash).  Hardware: :class:`Accelerator`, :class:`Cluster`, :class:`SearchSpace`,
:data:`TPUv4`, :data:`A100`, :data:`H100`, :data:`H100_500W` (Meta's 500 W HBM2e H100),
:data:`H200`, :data:`B200`, :data:`B300`, :data:`GB200`, :data:`GB300`, :data:`TPUv5e`, :data:`TPUv5p`, :data:`TPUv6e` (Trillium, from its datasheet), :class:`AreaPowerModel` (cosearch's area and
power model) and :class:`PhazeAreaModel` (PHAZE's own area figures, tables in :mod:`phaze_area`;
``SearchSpace.phaze(area_model="phaze")`` is exactly PHAZE's design list).  Cost: :func:`price`.
Clusters: :class:`Cluster` (nodes, intra/inter-node links; presets in :mod:`cluster`).
Cost: :func:`price`, :func:`calibrate` (fit kernel efficiency to measured op times);
:mod:`measure` (``cosearch measure``) times a model's kernels and the collectives with torch on
the user's own GPUs, in the CSV formats ``calibrate`` reads.
Scheduling: :func:`layer_time` (ILP, CVXPY/HiGHS).  Training plans: :class:`PlanSpec`,
:func:`evaluate` (one fixed plan -> :class:`Plan` with time breakdown and memory per stage),
:func:`search_plans` (exact search over dp/tp/pp/microbatch/recompute/virtual/SP/ZeRO ->
:class:`PlacementResult`; also context and expert parallelism, FP8 and ZeRO sharding groups); both
take an ``engine`` (:class:`Engine`, :mod:`engine`: Megatron-LM (and its 2021 behaviour),
Megatron-Core, Megatron-DeepSpeed, FSDP, MaxText — what overlaps what, how often sharded
weights are gathered, and which attention, FP8-cast and loss kernels the framework runs).  :func:`parse_megatron_args` reads a Megatron-LM / NeMo argument line
as a :class:`PlanSpec`.
Search: :func:`cosearch` (one model, or several: PHAZE's cross-model mode, :mod:`multimodel`)
with :class:`SearchOptions` (pruning, ILP ranking, checkpoints, executor), :func:`compare`,
:class:`Results` (:mod:`results`; tables and plots in :mod:`report`); the phases live in
:mod:`sweep` (screening) and :mod:`ranking` (exact ILP ranking of the top); ``SearchSpace.phaze()`` is PHAZE's architecture space and
:mod:`reproduce` re-runs PHAZE's experiment; :mod:`baselines` holds TPUv4, Spotlight-style and
PHAZE's fixed Megatron placement; :func:`design_report` says why a design wins (area by
component, tile efficiency, on-chip operand bandwidth need).
Systems for today's training: :func:`codesign` (:mod:`frontier`) gives each
:class:`SystemDesign` — a chip and its HBM in racks of a scale-up domain size and scale-out
bandwidth — its best plan over the modern plan space (FP8, CP, EP, ...) and ranks them by
throughput, per watt and per dollar (the caller's prices), with budgets and Pareto fronts;
``cosearch reproduce frontier`` tables it against the systems one can buy.
Federated learning: :mod:`cosearch.fl`.

``torch``, ``cvxpy`` and ``numba`` are imported only when first needed, so
``import cosearch`` stays fast.
"""

from __future__ import annotations

import importlib
from typing import Any

from . import cluster, graph, hardware, models
from ._version import __version__ as __version__
from .cluster import Cluster
from .compressed_attention import CompressedAttention
from .cost import calibrate, example_gemm_times, price, price_on
from .hardware import (
    A100,
    A100_80GB,
    B200,
    B300,
    GB200,
    GB300,
    H100,
    H100_500W,
    H200,
    Accelerator,
    AreaPowerModel,
    KernelEfficiency,
    PhazeAreaModel,
    SearchSpace,
    TPUv4,
    TPUv5e,
    TPUv5p,
    TPUv6e,
)
from .models import ModelConfig
from .models import preset as model_preset

_LAZY = {
    "layer_time": ("schedule", "layer_time"), "ScheduleResult": ("schedule", "ScheduleResult"),
    "search_plans": ("placement", "search_plans"), "PlacementResult": ("placement", "PlacementResult"),
    "Plan": ("plan", "Plan"), "PlanSpec": ("plan", "PlanSpec"), "evaluate": ("plan", "evaluate"),
    "plan": ("plan", None),
    "cosearch": ("search", "cosearch"), "Results": ("results", "Results"),
    "compare": ("search", "compare"), "results": ("results", None), "report": ("report", None),
    "multimodel": ("multimodel", None), "reproduce": ("reproduce", None), "cosearch_models": ("multimodel", "cosearch_models"),
    "schedule": ("schedule", None), "placement": ("placement", None), "memory": ("memory", None),
    "comm": ("comm", None), "search": ("search", None), "baselines": ("baselines", None),
    "cost": ("cost", None), "fl": ("fl", None), "cli": ("cli", None),
    "engine": ("engine", None), "Engine": ("engine", "Engine"),
    "SearchOptions": ("search", "SearchOptions"), "sweep": ("sweep", None), "ranking": ("ranking", None),
    "parse_megatron_args": ("runs.megatron", "parse_megatron_args"), "runs": ("runs", None),
    "read_configs": ("runs", "read_configs"), "read_config": ("runs", "read_config"),
    "check_runs": ("runs", "check_runs"),
    "measure": ("measure", None), "design_report": ("design_report", "design_report"),
    "phaze_area": ("phaze_area", None),
    "frontier": ("frontier", None), "codesign": ("frontier", "codesign"), "SystemDesign": ("frontier", "SystemDesign"),
}

__all__ = [
    "A100", "A100_80GB", "H100", "H100_500W", "H200", "B200", "B300", "GB200", "GB300", "TPUv4", "TPUv5e", "TPUv5p", "TPUv6e", "Accelerator", "AreaPowerModel", "PhazeAreaModel", "Cluster", "KernelEfficiency",
    "CompressedAttention", "ModelConfig", "SearchSpace", "calibrate", "cluster", "graph", "hardware", "models", "model_preset",
    "price", "price_on", "example_gemm_times",
    *_LAZY,
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        mod_name, attr = _LAZY[name]
        mod = importlib.import_module(f".{mod_name}", __name__)
        return mod if attr is None else getattr(mod, attr)
    raise AttributeError(f"module 'cosearch' has no attribute {name!r}")
