"""Baselines the co-search is measured against, under the same area/power budget.

* ``TPUv4``: the fixed TPUv4 preset chip with the same placement DP.
* ``Spotlight``: a chip-only search in the style of Spotlight (Sakhuja et al., HPCA 2023):
  among the space's designs, the one with the lowest single-accelerator latency of one
  transformer layer (forward + backward, tp = 1, microbatch 1) — no placement, memory
  or communication awareness — then the placement DP on that chip.

Both use the same layer-time models as the co-search (serial roofline, then ILP
refinement of the chosen plan when ``refine``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from . import memory, placement
from .hardware import Accelerator, Cluster, SearchSpace, TPUv4
from .models import ModelConfig
from .placement import DEFAULT_PLAN_OPTIONS, ilp_plan

__all__ = ["fixed_chip", "spotlight_chip", "run_baselines"]


def fixed_chip(model: ModelConfig, chip: Accelerator, cluster: Cluster, global_batch: int,
               mem: memory.MemoryConfig | None = None, tps: Sequence[int] | None = None,
               microbatches: Sequence[int] | None = None, refine: bool = True,
               plan_options: dict[str, Any] | None = None) -> placement.PlacementResult:
    """Best plan of a fixed chip (same plan search and options as the co-search)."""
    mem = mem or memory.MemoryConfig()
    opts = dict(DEFAULT_PLAN_OPTIONS if plan_options is None else plan_options)
    res = placement.search_plans(model, chip, cluster, global_batch, tps=tps, microbatches=microbatches,
                                 mem=mem, **opts)
    if refine and res.plans:
        p = ilp_plan(model, chip, cluster, global_batch, mem, res.plans[0], opts)
        if p is not None:
            return placement.PlacementResult((p,))
    return res


def spotlight_chip(model: ModelConfig, space: SearchSpace) -> tuple[int, Accelerator]:
    """The design with the lowest single-chip layer latency (fwd + bwd, tp=1, microbatch 1)."""
    from ._kernels import formulas as F
    from .plan import unit_costs
    designs = space.arrays()
    u = unit_costs(model, designs, Cluster(1), (1,), (1,))[:, 0, 0, 0]
    lat = u[:, F.U_LF] + u[:, F.U_LB]
    i = int(np.argmin(lat))
    return i, Accelerator.from_array(designs[i], name=f"spotlight{i}")


def _entry(res: placement.PlacementResult, chip: Accelerator, space: SearchSpace, note: str) -> dict[str, Any]:
    d = {"note": note, "area_mm2": chip.area_mm2(space.area_power), "power_w": chip.power_w(space.area_power),
         "design": chip.to_dict()}
    if res.plans:
        p = res.plans[0]
        d.update(tokens_per_s=p.tokens_per_s, plan=p.to_dict(), mfu=p.mfu, chips_used=p.chips_used)
    else:
        d.update(tokens_per_s=0.0, plan=None, reason=res.reason)
    return d


def run_baselines(model: ModelConfig, space: SearchSpace, cluster: Cluster, global_batch: int,
                  mem: memory.MemoryConfig | None = None, tps=None, microbatches=None,
                  refine: bool = True, plan_options: dict[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    """{"TPUv4": ..., "Spotlight": ...} with throughput, plan, area and power."""
    out = {}
    out["TPUv4"] = _entry(fixed_chip(model, TPUv4, cluster, global_batch, mem, tps, microbatches, refine,
                                     plan_options), TPUv4, space, "fixed TPUv4 chip + plan search")
    i, chip = spotlight_chip(model, space)
    out["Spotlight"] = _entry(fixed_chip(model, chip, cluster, global_batch, mem, tps, microbatches, refine,
                                         plan_options), chip, space, f"chip-only search (design {i}) + plan search")
    return out
