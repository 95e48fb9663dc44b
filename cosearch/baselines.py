"""Baselines the co-search is measured against, under the same area/power budget.

* ``TPUv4``: the fixed TPUv4 preset chip (given the run's HBM scenario) with the same
  exact plan search.
* ``Spotlight``: a chip-only search in the style of Spotlight (Sakhuja et al., HPCA 2023):
  among the space's designs, the one with the lowest single-accelerator latency of one
  transformer layer (forward + backward, tp = 1, microbatch 1) — no placement, memory
  or communication awareness — then the plan search on that chip.
* ``Megatron-fixed``: PHAZE's fixed Megatron-LM placement (its ``baseline_configs.py``
  dp/tp/pp) on the co-searched chip.

All use the co-search's time models: serial roofline layers, then (``refine``) the exact
ILP-scheduled plan (:func:`cosearch.placement.ilp_plan`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from . import memory, placement
from .cluster import Cluster
from .hardware import Accelerator, SearchSpace, TPUv4
from .models import ModelConfig
from .placement import DEFAULT_PLAN_OPTIONS, ilp_plan

__all__ = ["fixed_chip", "spotlight_chip", "run_baselines", "fixed_megatron", "PHAZE_MEGATRON_PLANS",
           "scaled_megatron_plan", "PHAZE_PLAN_CHIPS"]

#: PHAZE's fixed Megatron-LM placements for 1,024 accelerators, as (dp, tp, pp)
#: (msr-fiddle/phaze, ``Solver/baseline_configs.py``: ``d``, ``t``, ``p`` per model).
PHAZE_MEGATRON_PLANS: dict[str, tuple[int, int, int]] = {
    "opt-350m": (85, 1, 12), "bert-large": (128, 1, 8), "gpt2-xl": (32, 1, 32),
    "megatron-gpt2-8.3b": (16, 8, 8), "gpt3-175b": (8, 4, 32), "llama2-7b": (128, 1, 8),
}


def fixed_chip(model: ModelConfig, chip: Accelerator, cluster: Cluster, global_batch: int,
               mem: memory.MemoryConfig | None = None, tps: Sequence[int] | None = None,
               microbatches: Sequence[int] | None = None, refine: bool = True,
               plan_options: dict[str, Any] | None = None) -> placement.PlacementResult:
    """Best plan of a fixed chip (same plan search and options as the co-search, in the
    precisions of those the chip has tensor units for: :func:`cosearch.placement.chip_formats`)."""
    mem = mem or memory.MemoryConfig()
    opts = placement.chip_formats(chip, dict(DEFAULT_PLAN_OPTIONS if plan_options is None else plan_options))
    res = placement.search_plans(model, chip, cluster, global_batch, tps=tps, microbatches=microbatches,
                                 mem=mem, **opts)
    if refine and res.plans:
        p = ilp_plan(model, chip, cluster, global_batch, mem, opts, tps=tps, microbatches=microbatches)
        if p is not None:
            return placement.PlacementResult((p,))
    return res


#: The cluster size PHAZE's fixed placements are written for.
PHAZE_PLAN_CHIPS = 1024


def scaled_megatron_plan(model_name: str, num_chips: int) -> tuple[int, int, int] | str:
    """PHAZE's fixed (dp, tp, pp) for ``model_name`` on ``num_chips`` chips: its 1,024-chip plan
    with dp scaled by ``num_chips / 1024`` (tp and pp kept: the model's partition is the same,
    more replicas run it), or the reason it does not scale (no plan, or a fractional dp)."""
    fixed = PHAZE_MEGATRON_PLANS.get(model_name)
    if fixed is None:
        return f"PHAZE gives no fixed Megatron placement for {model_name}"
    dp, tp, pp = fixed
    scaled = dp * num_chips / PHAZE_PLAN_CHIPS
    if scaled < 1 or scaled != int(scaled):
        return (f"PHAZE's {PHAZE_PLAN_CHIPS}-chip placement dp{dp} tp{tp} pp{pp} does not scale to {num_chips} "
                f"chips (dp would be {scaled:g})")
    return int(scaled), tp, pp


def fixed_megatron(model: ModelConfig, chip: Accelerator, cluster: Cluster, global_batch: int,
                   mem: memory.MemoryConfig | None = None, microbatches: Sequence[int] | None = None,
                   zero: Sequence[int] = (0, 1), time_model: str = "sum") -> tuple[object | None, str]:
    """PHAZE's fixed Megatron placement (:data:`PHAZE_MEGATRON_PLANS`) on ``chip``: dp, tp and pp
    as PHAZE fixes them for 1,024 chips, dp scaled with the cluster (:func:`scaled_megatron_plan`;
    n/a with the reason where it does not scale); microbatch, one recompute mode for all stages and the ZeRO stage
    chosen by trying each with :func:`cosearch.plan.evaluate` (serial layer times; with
    ``time_model="ilp"`` the best three are re-timed with ILP-scheduled layers and the best of
    those kept).  Returns (best feasible Plan or None, reason)."""
    from .plan import PlanSpec, evaluate
    fixed = scaled_megatron_plan(model.name, cluster.num_chips)
    if isinstance(fixed, str):
        return None, fixed
    dp, tp, pp = fixed
    if global_batch % dp:
        return None, f"global batch {global_batch} is not divisible by PHAZE's dp={dp}"
    mbs = [b for b in (microbatches or placement.divisors(global_batch // dp)) if (global_batch // dp) % b == 0]
    tried, why = [], "no microbatch, recompute mode or ZeRO stage fits"
    for mb in mbs:
        for rc in ("none", "selective", "full"):
            for z in zero:
                p = evaluate(model, chip, cluster, PlanSpec(dp, tp, pp, mb, recompute=rc, zero=z), global_batch,
                             mem=mem)
                if p.feasible:
                    tried.append(p)
                else:
                    why = p.reason
    tried.sort(key=lambda p: p.step_time_s)
    if time_model != "sum":   # the best few re-timed with scheduled layers (ILP solves are costly)
        tried = sorted((evaluate(model, chip, cluster, p.spec, global_batch, mem=mem, time_model=time_model)
                        for p in tried[:3]), key=lambda p: p.step_time_s)
    best = tried[0] if tried else None
    return best, "" if best else why


def single_chip_layer_s(model: ModelConfig, designs: np.ndarray, precisions: Sequence[str] = ("bf16",)
                        ) -> np.ndarray:
    """Each design's single-chip layer latency (fwd + bwd, tp=1, microbatch 1) in the fastest of
    ``precisions`` it has tensor units for (inf where it has none): what the chip-only search ranks."""
    from ._kernels import formulas as F
    from .plan import unit_costs
    lat = np.full(len(designs), np.inf)
    for p in precisions:
        u = unit_costs(model, designs, Cluster(1), (1,), (1,), precision=p)[:, 0, 0, 0]
        lat = np.minimum(lat, u[:, F.U_LF] + u[:, F.U_LB])      # no FP8 unit: an infinite latency
    return lat


def spotlight_chip(model: ModelConfig, space: SearchSpace, precisions: Sequence[str] = ("bf16",)
                   ) -> tuple[int, Accelerator]:
    """The design with the lowest single-chip layer latency (:func:`single_chip_layer_s`), each
    design in the fastest of ``precisions`` it has tensor units for."""
    designs = space.arrays()
    i = int(np.argmin(single_chip_layer_s(model, designs, precisions)))
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


def fixed_chip_in_its_formats(model: ModelConfig, chip: Accelerator, cluster: Cluster, global_batch: int,
                              mem: memory.MemoryConfig | None = None, tps: Sequence[int] | None = None,
                              microbatches: Sequence[int] | None = None, refine: bool = True,
                              plan_options: dict[str, Any] | None = None) -> placement.PlacementResult:
    """:func:`fixed_chip`, or no plan with the reason where the chip has none of the number formats
    the co-search trains in (TPUv4 under ``precision="fp4"``): a baseline that cannot run is
    reported, not raised after the co-search has finished."""
    try:
        placement.chip_formats(chip, dict(DEFAULT_PLAN_OPTIONS if plan_options is None else plan_options))
    except ValueError as exc:
        return placement.PlacementResult((), reason=str(exc))
    return fixed_chip(model, chip, cluster, global_batch, mem, tps, microbatches, refine, plan_options)


def run_baselines(model: ModelConfig, space: SearchSpace, cluster: Cluster, global_batch: int,
                  mem: memory.MemoryConfig | None = None, tps=None, microbatches=None,
                  refine: bool = True, plan_options: dict[str, Any] | None = None,
                  cosearched: Accelerator | None = None) -> dict[str, dict[str, Any]]:
    """{"TPUv4": ..., "Spotlight": ...} with throughput, plan, area and power; with
    ``cosearched`` (the co-search's best chip) also ``"Megatron-fixed"``: PHAZE's fixed
    Megatron placement on that chip, where PHAZE gives one for the model."""
    out = {}
    tpu = space.with_scenario_hbm(TPUv4)
    out["TPUv4"] = _entry(fixed_chip_in_its_formats(model, tpu, cluster, global_batch, mem, tps, microbatches, refine,
                                                plan_options), tpu, space,
                          "fixed TPUv4 chip + plan search" + (f" (HBM {tpu.hbm_bytes / 2**30:g} GiB, as every design)"
                                                              if tpu.hbm_bytes != TPUv4.hbm_bytes else ""))
    i, chip = spotlight_chip(model, space, placement._priced_values(dict(plan_options or {}), "precision"))
    out["Spotlight"] = _entry(fixed_chip_in_its_formats(model, chip, cluster, global_batch, mem, tps, microbatches, refine,
                                                    plan_options), chip, space,
                              f"chip-only search (design {i}) + plan search")
    if cosearched is not None and model.name in PHAZE_MEGATRON_PLANS:
        opts = dict(DEFAULT_PLAN_OPTIONS if plan_options is None else plan_options)
        p, why = fixed_megatron(model, cosearched, cluster, global_batch, mem, microbatches,
                                zero=tuple(opts.get("zero", (0, 1))), time_model="ilp" if refine else "sum")
        res = placement.PlacementResult((p,) if p else (), reason=why)
        out["Megatron-fixed"] = _entry(res, cosearched, space, "PHAZE's fixed Megatron placement on the "
                                       "co-searched chip" + (f" ({why})" if why else ""))
    return out
