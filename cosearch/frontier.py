"""Which system to build for today's training: the chip's memory, the rack and the plan, searched
together (issue #42, at system level).

A :class:`SystemDesign` is a chip (a preset, or a variant with other HBM: :func:`hbm_variant`)
in switched scale-up domains of ``scale_up`` chips (NVLink-style) at ``scale_up_Bps`` per chip,
the domains joined by ``scale_out_Bps`` per chip; or (``torus_side``) every chip of the job on
one TPU-style torus of that side, ``torus_ports`` links of ``scale_up_Bps`` each per chip
(:mod:`cosearch.cluster`'s torus: a collective over ``n`` chips runs on ``ceil(log n / log side)``
dimensions, at most 3).  :func:`codesign` gives every system of a list
its best training plan at a fixed chip count over the modern plan space — number format, tensor,
pipeline, context and expert parallelism, ZeRO, virtual stages, recompute per stage — with the
exact plan search (:func:`cosearch.placement.search_plans`, each system's best plan proven), and
ranks the systems by throughput, throughput per watt and, with a :class:`CostModel`, throughput
per dollar over their lifetime; :meth:`CodesignResults.pareto` is the front over the objectives.
:func:`system_space` spans a design space around a base system (domain size x scale-out
bandwidth x HBM); :data:`FIXED_SYSTEMS` are the systems one can buy, the honest baselines: the
same plan space, the same performance and power model.

Power (watts per chip, a TDP-style bound as :class:`cosearch.hardware.AreaPowerModel` prices
designs): the chip's rated power (:data:`RATED_POWER_W`, its datasheet's), plus what its HBM
and links draw beyond the base chip's at full bandwidth — HBM at
``AreaPowerModel.hbm_energy_j_per_bit`` (4 pJ/bit) and SerDes at ``link_energy_j_per_bit``
(5 pJ/bit, both directions), the scale-out links counted whole (the base chip's rating holds its
own NVLink, not its NIC).  Switches, optics, CPUs and cooling are not modelled: per-watt figures
compare chips and links, not data centres.

Cost (:class:`CostModel`, only when given): capex per chip slot of the system
(``SystemDesign.chip_usd``), plus HBM per GB and links per GB/s beyond the base chip's, plus the
energy over ``lifetime_years`` at ``usd_per_kwh`` times ``pue``; or a system's all-in
``usd_per_hour`` per chip (:data:`FIXED_USD_PER_HOUR`: the three systems with a published cloud TCO
figure, DGX H100, DGX B200 and GB200 NVL72).  No other price is built in: no public price list
exists, so every other price is the user's input and is echoed in the result.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from . import _validate as v
from .cluster import Cluster
from .hardware import Accelerator, AreaPowerModel
from .hardware import preset as chip_preset
from .models import ModelConfig
from .models import preset as model_preset

__all__ = ["SystemDesign", "CostModel", "SystemResult", "CodesignResults", "codesign", "system_space",
           "hbm_variant", "HBM_STACKS", "RATED_POWER_W", "FIXED_SYSTEMS", "fixed_system", "OBJECTIVES",
           "split_baselines", "design_report", "default_plan_options", "FIXED_USD_PER_HOUR"]

#: Per-stack HBM options: (capacity bytes, bandwidth B/s, source).
HBM_STACKS: dict[str, tuple[float, float, str]] = {
    "hbm3-8h": (16e9, 0.67e12, "H100 SXM: 80 GB on 5 active stacks at 3.35 TB/s (NVIDIA H100 datasheet)"),
    "hbm3e-8h": (24e9, 1.0e12, "B200: 192 GB on 8 stacks at 8 TB/s (NVIDIA DGX B200 datasheet: 1,440 GB per 8 "
                              "GPUs, HGX B200 specifications)"),
    "hbm3e-12h": (36e9, 1.0e12, "B300 / GB300: 288 GB on 8 stacks at 8 TB/s (NVIDIA GB300 NVL72 and DGX B300 "
                                "specifications)"),
    "hbm4-12h": (36e9, 2.0e12, "JEDEC JESD270-4 HBM4 (April 2025): a 2,048-bit interface at up to 8 Gb/s per pin, "
                               "2 TB/s per stack; 12-high stacks of 24 Gb dies, 36 GB"),
}

#: Rated board power of each chip (W): NVIDIA H100 SXM5 700 W (H100 datasheet); B200 1,000 W (DGX
#: B200: 8 GPUs at 1,000 W each); GB200 1,200 W (GB200 NVL72 specifications, the Blackwell GPU's
#: power in the superchip); B300 1,100 W (HGX B300 specifications); GB300 1,400 W
#: (facebookexperimental/triton pull request #2023: ``default_limit == max_limit == 1400 W`` on
#: an ``NVIDIA GB300``).
RATED_POWER_W: dict[str, float] = {"H100": 700.0, "H200": 700.0, "B200": 1000.0, "GB200": 1200.0, "B300": 1100.0,
                                   "GB300": 1400.0}

#: What :func:`codesign` ranks by.
OBJECTIVES = ("tokens_per_s", "tokens_per_joule", "tokens_per_usd")


@dataclass(frozen=True)
class SystemDesign:
    """A chip in racks (see the module docstring).  ``base``: the chip preset's name the design
    varies (its rated power and links are the reference of the power and cost deltas; default
    the chip's own name).  ``scale_up_efficiency`` / ``scale_out_efficiency``: the achievable
    fractions of the links (NCCL's, as :mod:`cosearch.cluster`'s presets: 0.80 NVLink, 0.90
    InfiniBand).  ``chip_power_w``: None takes :data:`RATED_POWER_W` of the base chip, and stays
    None (power unknown: no per-watt or energy figure, and power budgets cannot be met) for a
    chip without one; it must cover the base chip's own HBM and scale-up link power, which the
    power deltas scale (a design removing them is refused rather than priced at negative watts).
    ``cluster_preset``: a :mod:`cosearch.cluster` preset the system's network
    is (TPU pods' 3D tori: ``tpuv5p-pod``, ``tpu7x-pod``), instead of switched domains;
    ``max_chips``: the largest job the system holds (0: no limit; a TPU pod's slice).
    ``chip_usd``: capex per chip slot, for a :class:`CostModel` (None: not priced);
    ``usd_per_hour``: the all-in cost of a chip slot per hour (a cloud TCO figure: capex
    amortised, power and facility), which prices the system without a :class:`CostModel`."""

    chip: Accelerator
    scale_up: int
    scale_out_Bps: float
    scale_up_Bps: float | None = None
    name: str = ""
    base: str = ""
    chip_power_w: float | None = None
    chip_usd: float | None = None
    usd_per_hour: float | None = None
    scale_up_efficiency: float = 0.80
    scale_out_efficiency: float = 0.90
    fixed: bool = False
    cluster_preset: str = ""
    max_chips: int = 0
    torus_side: int = 0
    torus_ports: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.chip, Accelerator):
            object.__setattr__(self, "chip", chip_preset(self.chip))
        object.__setattr__(self, "scale_up", v.positive_int("SystemDesign.scale_up", self.scale_up, 1 << 16))
        object.__setattr__(self, "scale_out_Bps", v.bandwidth("SystemDesign.scale_out_Bps", self.scale_out_Bps))
        up = self.chip.link_bandwidth_Bps if self.scale_up_Bps is None else self.scale_up_Bps
        object.__setattr__(self, "scale_up_Bps", v.bandwidth("SystemDesign.scale_up_Bps", up))
        for f in ("name", "base", "cluster_preset"):
            if not isinstance(getattr(self, f), str):
                raise ValueError(f"SystemDesign.{f} must be a string, got {getattr(self, f)!r}")
        if not isinstance(self.fixed, bool):
            raise ValueError(f"SystemDesign.fixed must be True or False, got {self.fixed!r}")
        object.__setattr__(self, "base", self.base or self.chip.name)
        for f in ("scale_up_efficiency", "scale_out_efficiency"):
            v.fraction(f"SystemDesign.{f}", getattr(self, f))
        if self.chip_power_w is None:
            object.__setattr__(self, "chip_power_w", RATED_POWER_W.get(self.base))
        if self.chip_power_w is not None:
            v.positive_float("SystemDesign.chip_power_w", self.chip_power_w)
        if self.cluster_preset:
            from .cluster import PRESETS
            if self.cluster_preset not in PRESETS:
                raise ValueError(f"SystemDesign.cluster_preset {self.cluster_preset!r}; choose one of "
                                 f"{', '.join(sorted(PRESETS))}")
        for f in ("torus_side", "torus_ports"):
            x = getattr(self, f)
            if isinstance(x, bool) or not isinstance(x, int) or x < 0 or x > 1024:
                raise ValueError(f"SystemDesign.{f} must be a whole number in [0, 1024] (0: switched domains), "
                                 f"got {x!r}")
        if self.torus_side:
            if self.torus_side < 2:
                raise ValueError(f"SystemDesign.torus_side must be at least 2, got {self.torus_side}")
            if self.cluster_preset:
                raise ValueError("SystemDesign: give torus_side or cluster_preset, not both")
            if not self.torus_ports:
                object.__setattr__(self, "torus_ports", 6)          # a 3D torus: two links per dimension
        elif self.torus_ports:
            raise ValueError("SystemDesign.torus_ports needs torus_side (a switched domain has no torus links)")
        if isinstance(self.max_chips, bool) or not isinstance(self.max_chips, int) or self.max_chips < 0:
            raise ValueError(f"SystemDesign.max_chips must be a non-negative integer (0: no limit), got "
                             f"{self.max_chips!r}")
        for f in ("chip_usd", "usd_per_hour"):
            if getattr(self, f) is not None:
                v.positive_float(f"SystemDesign.{f}", getattr(self, f))
        if not self.name:
            object.__setattr__(self, "name", self.describe())

    def describe(self) -> str:
        c = self.chip
        hbm = f"HBM {c.hbm_bytes / 1e9:g} GB {c.hbm_bandwidth_Bps / 1e12:g} TB/s"
        if self.torus_side:
            return (f"{c.name} torus side {self.torus_side} {self.torus_ports} x {self.scale_up_Bps / 1e9:g} GB/s "
                    f"links {hbm}")
        return (f"{c.name} x{self.scale_up} up {self.scale_up_Bps / 1e9:g} GB/s out {self.scale_out_Bps / 1e9:g} GB/s "
                f"{hbm}")

    def domain(self, chips: int) -> int:
        """Chips per scale-up domain in a job of ``chips``: ``scale_up``, or the largest divisor
        of ``chips`` below it (a job of 8,192 GPUs on 72-GPU racks uses 64 of each, as published
        NVL72 runs of 64-GPU multiples do)."""
        if chips <= self.scale_up:
            return chips
        return max(d for d in v.divisors(chips) if d <= self.scale_up)

    def cluster(self, chips: int) -> Cluster:
        n = v.positive_int("chips", chips, v.MAX_CHIPS)
        if self.max_chips and n > self.max_chips:
            raise ValueError(f"{self.name}: {n} chips are more than its {self.max_chips}")
        if self.cluster_preset:
            from .cluster import preset as cluster_preset
            return cluster_preset(self.cluster_preset, n)
        if self.torus_side:
            # one slice: the TPU pods' links and efficiency (cosearch.cluster.tpuv5p_pod)
            return Cluster(n, None, self.scale_up_Bps, None, link_latency_s=2e-6,
                           intra_efficiency=self.scale_up_efficiency, torus_side=self.torus_side, name=f"{self.name} {n}")
        per = self.domain(n)
        return Cluster(n, per, self.scale_up_Bps, self.scale_out_Bps if per < n else None, link_latency_s=3e-6,
                       inter_latency_s=6e-6, intra_efficiency=self.scale_up_efficiency,
                       inter_efficiency=self.scale_out_efficiency, name=f"{self.name} {n}")

    @property
    def reference(self) -> Accelerator:
        """The chip the power, area and cost deltas are taken against: the ``base`` preset (the
        chip itself when ``base`` names none)."""
        from .hardware import preset_names
        return chip_preset(self.base) if self.base in preset_names() else self.chip

    def power_parts_w(self, ap: AreaPowerModel | None = None) -> dict[str, float] | None:
        """Watts per chip by part: the rated power, and what the HBM, the scale-up links and the
        scale-out links add (module docstring); None when the chip's power is unknown."""
        if self.chip_power_w is None:
            return None
        ap = ap or AreaPowerModel()
        ref = self.reference
        # the deltas scale the reference chip's own HBM and scale-up power, which its rated power
        # holds: a rating below them would price a design that removes them at negative watts
        own = {"HBM": ref.hbm_bandwidth_Bps * 8 * ap.hbm_energy_j_per_bit,
               "scale-up links": self.reference_links_Bps * 2 * 8 * ap.link_energy_j_per_bit}
        if self.chip_power_w < sum(own.values()):
            raise ValueError(f"SystemDesign {self.name!r}: chip_power_w = {self.chip_power_w:g} W is less than what "
                             f"{ref.name}'s own " + " and ".join(f"{k} draw ({w:.0f} W)" for k, w in own.items())
                             + " at the area-power model's energies; give the base chip's whole rated power")
        return {"rated": float(self.chip_power_w),
                "HBM": (self.chip.hbm_bandwidth_Bps - ref.hbm_bandwidth_Bps) * 8 * ap.hbm_energy_j_per_bit,
                "scale-up": self._links_delta_Bps() * 2 * 8 * ap.link_energy_j_per_bit,
                "scale-out": 0.0 if self.torus_side else self.scale_out_Bps * 2 * 8 * ap.link_energy_j_per_bit}

    @property
    def reference_links_Bps(self) -> float:
        """The reference chip's own scale-up bandwidth in this design's layout, one way: its
        per-chip figure, or one link's times the torus ports (what the deltas can remove)."""
        return self.reference.link_bandwidth_Bps * (self.torus_ports if self.torus_side else 1)

    def _links_delta_Bps(self) -> float:
        """The scale-up bandwidth per chip beyond the reference chip's, one way: a switched
        design's per-chip figure, or a torus's links times their change (a torus chip's
        ``link_bandwidth_Bps`` is one link's, as the TPU presets give it)."""
        delta = self.scale_up_Bps - self.reference.link_bandwidth_Bps
        return delta * self.torus_ports if self.torus_side else delta

    def power_w(self, ap: AreaPowerModel | None = None) -> float:
        """Watts per chip: the sum of :meth:`power_parts_w`; NaN when the chip's power is unknown."""
        parts = self.power_parts_w(ap)
        return math.nan if parts is None else float(sum(parts.values()))

    def die_area_parts_mm2(self, ap: AreaPowerModel | None = None) -> dict[str, float]:
        """Logic-die area this design adds to its base chip's, by part (mm^2, negative when it
        removes): HBM PHYs at ``AreaPowerModel.hbm_area_mm2_per_gbps`` of the bandwidth change and
        SerDes at ``link_area_mm2_per_gbps`` of the scale-up bandwidth change (the NIC sits off
        the die on today's systems and is not counted)."""
        ap = ap or AreaPowerModel()
        ref = self.reference
        return {"HBM PHY": (self.chip.hbm_bandwidth_Bps - ref.hbm_bandwidth_Bps) / 1e9 * ap.hbm_area_mm2_per_gbps,
                "SerDes": self._links_delta_Bps() / 1e9 * ap.link_area_mm2_per_gbps}

    def die_area_delta_mm2(self, ap: AreaPowerModel | None = None) -> float:
        """The sum of :meth:`die_area_parts_mm2`."""
        return float(sum(self.die_area_parts_mm2(ap).values()))

    def to_dict(self) -> dict[str, Any]:
        d = {k: x for k, x in asdict(self).items() if k != "chip"}
        d["chip"] = self.chip.name
        d["hbm_bytes"], d["hbm_bandwidth_Bps"] = self.chip.hbm_bytes, self.chip.hbm_bandwidth_Bps
        return d


def hbm_variant(chip: Accelerator | str, stack: str, stacks: int) -> Accelerator:
    """``chip`` with ``stacks`` stacks of :data:`HBM_STACKS` ``stack`` (capacity and bandwidth
    replaced; its name says so)."""
    c = chip_preset(chip)
    if not isinstance(stack, str) or stack not in HBM_STACKS:
        raise ValueError(f"unknown HBM stack {stack!r}; choose one of {', '.join(HBM_STACKS)}")
    n = v.positive_int("stacks", stacks, 64)
    cap, bw, _ = HBM_STACKS[stack]
    return c.with_(name=f"{c.name}+{n}x{stack}", hbm_bytes=n * cap, hbm_bandwidth_Bps=n * bw)


@dataclass(frozen=True)
class CostModel:
    """Total cost of ownership (see the module docstring): every price is the caller's.
    ``hbm_usd_per_gb``, ``scale_up_usd_per_GBps`` and ``scale_out_usd_per_GBps`` price a design's
    HBM and links beyond its base chip's (the base's are in its ``chip_usd``; scale-out counted
    whole, as :meth:`SystemDesign.power_w` does).  A design's ``chip_usd`` must cover what these
    prices make of its base chip's own HBM and scale-up links (refused otherwise: a design that
    removes them would cost less than nothing)."""

    usd_per_kwh: float
    lifetime_years: float
    pue: float = 1.0
    hbm_usd_per_gb: float = 0.0
    scale_up_usd_per_GBps: float = 0.0
    scale_out_usd_per_GBps: float = 0.0

    def __post_init__(self) -> None:
        v.nonneg_float("CostModel.usd_per_kwh", self.usd_per_kwh)
        v.in_range("CostModel.lifetime_years", self.lifetime_years, 1e-3, 50.0, "years")
        v.in_range("CostModel.pue", self.pue, 1.0, 5.0, "")
        for f in ("hbm_usd_per_gb", "scale_up_usd_per_GBps", "scale_out_usd_per_GBps"):
            v.nonneg_float(f"CostModel.{f}", getattr(self, f))

    @property
    def lifetime_s(self) -> float:
        return self.lifetime_years * 365.25 * 86400.0

    def usd_per_chip(self, s: SystemDesign, power_w: float) -> float | None:
        """Lifetime cost of one chip slot of ``s`` (None when ``s`` has no ``chip_usd``)."""
        if s.chip_usd is None or not math.isfinite(power_w):
            return None
        ref = s.reference
        own = {"HBM": ref.hbm_bytes / 1e9 * self.hbm_usd_per_gb,
               "scale-up links": s.reference_links_Bps / 1e9 * self.scale_up_usd_per_GBps}
        if s.chip_usd < sum(own.values()):
            # the deltas below remove the reference's own HBM and links at these prices
            raise ValueError(f"SystemDesign {s.name!r}: chip_usd = {s.chip_usd:,.0f} is less than this cost model's "
                             f"price of {ref.name}'s own " + " and ".join(f"{k} ({x:,.0f})" for k, x in own.items())
                             + "; give the base chip slot's whole capex, or lower the per-GB prices")
        capex = (s.chip_usd + (s.chip.hbm_bytes - ref.hbm_bytes) / 1e9 * self.hbm_usd_per_gb
                 + (s.scale_up_Bps - ref.link_bandwidth_Bps) / 1e9 * self.scale_up_usd_per_GBps
                 + s.scale_out_Bps / 1e9 * self.scale_out_usd_per_GBps)
        energy = power_w * self.pue * self.lifetime_s / 3.6e6 * self.usd_per_kwh
        return float(capex + energy)


@dataclass
class SystemResult:
    """One system's best plan and objectives (``plan`` None: no plan runs; ``reason`` says why)."""

    system: SystemDesign
    plan: Any
    chips: int
    power_w: float
    reason: str = ""
    usd: float | None = None
    lifetime_s: float = 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.plan.tokens_per_s if self.plan is not None else 0.0

    @property
    def tokens_per_joule(self) -> float | None:
        if self.plan is None:
            return 0.0
        if not math.isfinite(self.power_w):
            return None
        return self.tokens_per_s / (self.power_w * self.chips)

    @property
    def tokens_per_usd(self) -> float | None:
        """Tokens per dollar: over the lifetime at a :class:`CostModel`'s cost, else at the
        system's ``usd_per_hour``; None when neither prices it."""
        if self.plan is None:
            return None
        if self.usd is not None:
            return self.tokens_per_s * self.lifetime_s / (self.usd * self.chips)
        if self.system.usd_per_hour is not None:
            return self.tokens_per_s * 3600.0 / (self.system.usd_per_hour * self.chips)
        return None

    def objective(self, name: str) -> float:
        x = getattr(self, v.choice("objective", name, OBJECTIVES))
        return -math.inf if x is None else float(x)

    def to_dict(self) -> dict[str, Any]:
        p = self.plan
        return {"system": self.system.to_dict(), "chips": self.chips,
                "power_w_per_chip": self.power_w if math.isfinite(self.power_w) else None,
                "usd_per_chip": self.usd, "reason": self.reason,
                "plan": None if p is None else p.spec.describe(), "step_time_s": None if p is None else p.step_time_s,
                "tokens_per_s": self.tokens_per_s, "tokens_per_joule": self.tokens_per_joule,
                "tokens_per_usd": self.tokens_per_usd, "mfu": None if p is None else p.mfu}


@dataclass
class CodesignResults:
    """Every system's result, in the order given; ``interrupted``: Ctrl-C stopped the search
    (the systems done so far are kept)."""

    model: str
    chips: int
    global_batch: int
    rows: list[SystemResult]
    cost: CostModel | None = None
    interrupted: bool = False
    meta: dict = field(default_factory=dict)

    def ranked(self, objective: str = "tokens_per_s") -> list[SystemResult]:
        """Systems with a plan, best first by ``objective`` (:data:`OBJECTIVES`); per dollar only
        the priced ones."""
        rows = [r for r in self.rows if r.plan is not None and r.objective(objective) > -math.inf]
        return sorted(rows, key=lambda r: (-r.objective(objective), r.system.name))

    def best(self, objective: str = "tokens_per_s") -> SystemResult | None:
        r = self.ranked(objective)
        return r[0] if r else None

    def pareto(self, objectives: Sequence[str] = ("tokens_per_s", "tokens_per_joule")) -> list[SystemResult]:
        """The systems no other beats or ties on every objective while beating on one."""
        rows = [r for r in self.rows if r.plan is not None and all(r.objective(o) > -math.inf for o in objectives)]
        vals = [tuple(r.objective(o) for o in objectives) for r in rows]
        front = [r for i, r in enumerate(rows)
                 if not any(all(b >= a for a, b in zip(vals[i], vals[j])) and vals[j] != vals[i]
                            for j in range(len(rows)))]
        return sorted(front, key=lambda r: -r.objective(objectives[0]))

    def gains(self, objective: str = "tokens_per_s") -> dict[str, float]:
        """The best system's ``objective`` over each fixed system's (ratio; those without a plan
        or a price left out)."""
        b = self.best(objective)
        out = {}
        for r in self.rows:
            if r.system.fixed and b is not None and r.plan is not None and r.objective(objective) > 0:
                out[r.system.name] = b.objective(objective) / r.objective(objective)
        return out

    def table(self, top: int = 10, objective: str = "tokens_per_s") -> str:
        top = v.top_count(top)
        lines = [f"{self.model} on {self.chips} chips, global batch {self.global_batch}: best by {objective}"
                 + (" (interrupted)" if self.interrupted else "")]
        lines.append(f"{'system':<58} {'tok/s/chip':>10} {'tok/J':>8} {'tok/$':>10}  plan")
        for r in self.ranked(objective)[:top]:
            usd = r.tokens_per_usd
            tpj = r.tokens_per_joule
            lines.append(f"{r.system.name[:58]:<58} {r.tokens_per_s / r.chips:10.0f} "
                         f"{'-' if tpj is None else f'{tpj:8.2f}':>8} "
                         f"{'-' if usd is None else f'{usd:10.4g}':>10}  {r.plan.spec.describe()}"
                         + ("  [fixed]" if r.system.fixed else ""))
        for r in self.rows:
            if r.plan is None:
                lines.append(f"  no plan: {r.system.name}: {r.reason}")
        return "\n".join(lines)

    def plot(self, path: str | os.PathLike | None = None, overwrite: bool = False):
        """Tokens/s per chip against tokens per joule, one point per system with a plan (fixed
        systems marked and named), the Pareto front over the two drawn; written to ``path`` (PNG)
        when given.  Needs matplotlib (``pip install cosearch[plot]``)."""
        from ._plotting import finish, pyplot
        plt = pyplot("CodesignResults.plot", path, overwrite)
        rows = [r for r in self.rows if r.plan is not None and r.tokens_per_joule is not None]
        fig, ax = plt.subplots(figsize=(6.4, 4.8))
        for fixed, style in ((False, dict(c="0.6", s=14, label="designs")), (True, dict(c="C3", s=30, marker="s",
                                                                                         label="fixed systems"))):
            rs = [r for r in rows if r.system.fixed == fixed]
            ax.scatter([r.tokens_per_joule for r in rs], [r.tokens_per_s / r.chips for r in rs], **style)
            if fixed:
                for r in rs:
                    ax.annotate(r.system.name, (r.tokens_per_joule, r.tokens_per_s / r.chips), fontsize=7)
        front = sorted(self.pareto(), key=lambda r: r.tokens_per_joule)
        if front:
            ax.plot([r.tokens_per_joule for r in front], [r.tokens_per_s / r.chips for r in front], "C0-",
                    label="Pareto front")
        ax.set_xlabel("tokens per joule")
        ax.set_ylabel("tokens/s per chip")
        ax.set_title(f"{self.model} on {self.chips} chips, batch {self.global_batch}", fontsize=9)
        ax.legend(fontsize=7)
        return finish(fig, path)

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "chips": self.chips, "global_batch": self.global_batch,
                "cost": None if self.cost is None else asdict(self.cost), "interrupted": self.interrupted,
                "meta": self.meta, "rows": [r.to_dict() for r in self.rows]}

    def save(self, path: str | os.PathLike, overwrite: bool = False) -> None:
        """Write :meth:`to_dict` as JSON, stamped ``cosearch.codesign-results`` with the version,
        atomically and with standard numbers only (an infinite or undefined value is null), as
        every cosearch file; an existing file only with ``overwrite``."""
        from ._json import save_new_json, stamped
        save_new_json(stamped("codesign-results", self.to_dict()), path, overwrite)


def default_plan_options(model: ModelConfig, chip: Accelerator, chips: int) -> dict[str, Any]:
    """The modern plan space :func:`codesign` searches by default: the number formats the chip
    has among bf16 and FP8, Megatron-Core with Transformer Engine's TP overlap as Megatron-Bridge's
    recipes run it (flash attention, sequence parallelism, ZeRO-1),
    virtual stages 1, 2 and 4, context parallelism 1 and 2, and for an MoE model every
    power-of-two expert-parallel degree dividing its experts (up to 64 and the chip count), with
    expert tensor parallelism = tp and 1 (each tp rank an expert-parallel rank: Megatron-Bridge's
    perf recipes for Qwen3 MoE, GPT-OSS and DeepSeek set ``expert_tensor_parallel_size = 1``; shared
    experts stay tensor-parallel).  A TPU runs MaxText (FSDP over the torus, tensor parallelism, no
    pipeline stages)."""
    from .engine import megatron_core
    from .models import model_arg
    model = model_arg(model, "default_plan_options")
    chip = chip_preset(chip)
    chips = v.positive_int("chips", chips)
    precs = ("bf16", "fp8") if chip.supports_fp8 else ("bf16",)
    eps: tuple[int, ...] = (1,)
    if model.moe:
        eps = tuple(2 ** i for i in range(7) if model.num_experts % 2 ** i == 0 and 2 ** i <= min(64, chips))
    if chip.name.startswith("TPU"):
        # a TPU runs MaxText: FSDP (ZeRO-3) with tensor parallelism over the torus, no pipeline
        return dict(precision=precs, engine="maxtext", flash_attention=True, sequence_parallel=(True,), zero=(3,),
                    virtual_stages=(1,), context_parallel=(1,), expert_parallel=eps)
    etps = (None, 1) if model.moe else (None,)
    return dict(precision=precs, engine=megatron_core(tp_comm_overlap=True), flash_attention=True,
                sequence_parallel=(True,), zero=(1,), virtual_stages=(1, 2, 4), context_parallel=(1, 2),
                expert_parallel=eps, expert_tensor_parallel=etps)


def codesign(model: ModelConfig | str, systems: Sequence[SystemDesign], chips: int, global_batch: int, *,
             plan_options: dict[str, Any] | None = None, cost: CostModel | None = None,
             area_power: AreaPowerModel | None = None, progress: bool = False,
             chip_power_budget_w: float | None = None, rack_power_budget_w: float | None = None,
             die_area_budget_mm2: float | None = None) -> CodesignResults:
    """Each system's best plan for ``model`` on ``chips`` chips at ``global_batch`` sequences
    (see the module docstring).  ``plan_options``: :func:`cosearch.placement.search_plans`'s
    options for every system (None: :func:`default_plan_options` per chip; a precision the chip
    lacks is dropped for it, and a system left with none is reported, not raised).  Budgets:
    a system whose chip draws more than ``chip_power_budget_w`` (:meth:`SystemDesign.power_w`),
    whose scale-up domain draws more than ``rack_power_budget_w`` (its chips' power), or whose
    die grows by more than ``die_area_budget_mm2`` (:meth:`SystemDesign.die_area_delta_mm2`) is
    reported over budget and not searched.  Ctrl-C returns the systems done so far
    (``interrupted``)."""
    from .placement import search_plans
    model = model_preset(model)
    chips = v.positive_int("chips", chips, v.MAX_CHIPS)
    global_batch = v.positive_int("global_batch", global_batch, v.MAX_BATCH)
    systems = [systems] if isinstance(systems, SystemDesign) else list(systems)     # one system may come bare
    if not systems:
        raise ValueError("codesign: no systems given")
    for s in systems:
        if not isinstance(s, SystemDesign):
            raise ValueError(f"codesign: systems must be SystemDesign, got {type(s).__name__}")
    if cost is not None and not isinstance(cost, CostModel):
        raise ValueError(f"codesign: cost must be a CostModel, got {type(cost).__name__}")
    if area_power is not None and not isinstance(area_power, AreaPowerModel):
        raise ValueError(f"codesign: area_power must be an AreaPowerModel, got {type(area_power).__name__}")
    progress = v.flag("progress", progress)
    if plan_options is not None:
        if not isinstance(plan_options, dict):
            raise ValueError(f"codesign: plan_options must be a dict of search_plans' options, got "
                             f"{type(plan_options).__name__}")
        from .placement import search_plans_options
        known = search_plans_options()
        unknown = sorted(set(plan_options) - set(known))
        if unknown:
            raise ValueError(f"codesign: unknown plan option(s) {unknown}; search_plans takes {', '.join(known)}")
    ap = area_power or AreaPowerModel()
    budgets = {"chip_power_budget_w": chip_power_budget_w, "rack_power_budget_w": rack_power_budget_w,
               "die_area_budget_mm2": die_area_budget_mm2}
    for k, b in budgets.items():
        if b is not None:
            budgets[k] = v.positive_float(k, b)
    res = CodesignResults(model.name, chips, global_batch, [], cost,
                          meta={"budgets": dict(budgets), "plan_options": None if plan_options is None else
                                {k: (list(x) if isinstance(x, tuple) else getattr(x, "name", x))
                                 for k, x in plan_options.items()}})
    bar = None
    if progress:
        from tqdm.auto import tqdm
        bar = tqdm(total=len(systems), desc="systems", unit="system")
    try:
        for s in systems:
            opts = dict(plan_options) if plan_options is not None else default_plan_options(model, s.chip, chips)
            precs = opts.get("precision", ("bf16",))
            precs = (precs,) if isinstance(precs, str) else tuple(precs)
            ok = tuple(p for p in precs if p == "bf16" or (p == "fp8" and s.chip.supports_fp8)
                       or (p == "fp4" and s.chip.supports_fp4))
            pw = s.power_w(ap)
            usd = cost.usd_per_chip(s, pw) if cost is not None else None
            row = SystemResult(s, None, chips, pw, usd=usd, lifetime_s=cost.lifetime_s if cost is not None else 0.0)
            over = _over_budget(s, pw, chips, ap, budgets)
            if over:
                row.reason = over
            elif not ok:
                row.reason = f"{s.chip.name} has none of the number formats {list(precs)}"
            else:
                opts["precision"] = ok
                try:
                    r = search_plans(model, s.chip, s.cluster(chips), global_batch, **opts)
                except ValueError as exc:
                    row.reason = str(exc)
                else:
                    if r.plans:
                        row.plan = r.plans[0]
                    else:
                        row.reason = r.reason
            res.rows.append(row)
            if bar is not None:
                bar.update(1)
    except KeyboardInterrupt:
        res.interrupted = True
    finally:
        if bar is not None:
            bar.close()
    return res


def _over_budget(s: SystemDesign, power_w: float, chips: int, ap: AreaPowerModel, budgets: dict) -> str:
    """Why ``s`` breaks a budget ("" when it fits them all)."""
    if not math.isfinite(power_w) and (budgets["chip_power_budget_w"] is not None
                                       or budgets["rack_power_budget_w"] is not None):
        return "its power is not published, so no power budget can be checked"
    b = budgets["chip_power_budget_w"]
    if b is not None and power_w > b * (1 + 1e-12):
        return f"over the chip power budget: {power_w:.0f} W > {b:.0f} W"
    b = budgets["rack_power_budget_w"]
    if b is not None and power_w * s.domain(chips) > b * (1 + 1e-12):
        return f"over the rack power budget: {s.domain(chips)} chips x {power_w:.0f} W > {b:.0f} W"
    b = budgets["die_area_budget_mm2"]
    if b is not None and s.die_area_delta_mm2(ap) > b * (1 + 1e-12):
        return f"over the die area budget: +{s.die_area_delta_mm2(ap):.0f} mm^2 > {b:.0f} mm^2"
    return ""


def system_space(base: SystemDesign, scale_up: Sequence[int] = (8, 16, 36, 72, 144),
                 scale_out_Bps: Sequence[float] = (50e9, 100e9, 200e9),
                 hbm: Sequence[tuple[str, int] | None] = (None,),
                 scale_up_Bps: Sequence[float | None] = (None,),
                 torus_side: Sequence[int] = ()) -> list[SystemDesign]:
    """Designs around ``base``: every HBM (a (:data:`HBM_STACKS` name, stacks) pair, or None for
    the base chip's) x scale-up bandwidth per chip (None: the base's) x scale-up domain size x
    scale-out bandwidth, named after what they are; with ``torus_side``, TPU-style tori of each
    side instead of switched domains (``scale_up_Bps`` then per link; ``scale_up`` and
    ``scale_out_Bps`` do not apply).  ``base``'s chip power and capex carry over (the deltas are
    priced by :meth:`SystemDesign.power_w` and :class:`CostModel`); a product's ``usd_per_hour``
    does not (a design is not that product), nor does a pod's fixed slice preset."""
    if not isinstance(base, SystemDesign):
        raise ValueError(f"system_space: base must be a SystemDesign, got {type(base).__name__}")
    lists = {"scale_up": scale_up, "scale_out_Bps": scale_out_Bps, "hbm": hbm, "scale_up_Bps": scale_up_Bps}
    for name, values in (*lists.items(), ("torus_side", torus_side)):
        if isinstance(values, (str, bytes)) or not isinstance(values, (Sequence, np.ndarray)):
            raise ValueError(f"system_space: {name} must be a list of values, got {values!r}")
    empty = [name for name, values in lists.items() if not len(values) and not (len(torus_side) and name in (
        "scale_up", "scale_out_Bps"))]
    if empty:
        raise ValueError(f"system_space: {', '.join(empty)} lists no value, so no design would be made")
    for h in hbm:
        if h is not None and not (isinstance(h, (tuple, list)) and len(h) == 2):
            raise ValueError(f"system_space: each hbm entry is None (the base chip's) or a (stack name, stacks) "
                             f"pair, got {h!r}")
    out = []
    for h in hbm:
        chip = base.chip if h is None else hbm_variant(base.chip, *h)
        for up in scale_up_Bps:
            link = base.scale_up_Bps if up is None else up
            if torus_side:
                for k in torus_side:
                    out.append(replace(base, chip=chip, scale_up=1, name="", fixed=False, scale_up_Bps=link,
                                       usd_per_hour=None, cluster_preset="", torus_side=int(k),
                                       torus_ports=base.torus_ports if base.torus_side else 0,
                                       scale_up_efficiency=base.scale_up_efficiency if base.torus_side
                                       else TORUS_LINK_EFFICIENCY))
                continue
            for d in scale_up:
                for bw in scale_out_Bps:
                    out.append(replace(base, chip=chip, scale_up=d, scale_out_Bps=bw, name="", fixed=False,
                                       scale_up_Bps=link, usd_per_hour=None))
    return out


def split_baselines(res: CodesignResults, base: SystemDesign,
                    objective: str = "tokens_per_s") -> dict[str, SystemResult | None]:
    """The best of the co-designed systems of ``res`` that vary only the chip (``base``'s rack:
    its domain size and links; a Spotlight-style chip-only search) and only the network
    (``base``'s chip and HBM), by ``objective``; fixed systems left out."""
    v.instances("split_baselines", none_ok=False, res=(res, CodesignResults), base=(base, SystemDesign))
    if objective not in OBJECTIVES:
        raise ValueError(f"split_baselines: objective {objective!r}; choose one of {', '.join(OBJECTIVES)}")

    def rack(s):
        return (s.scale_up, s.scale_up_Bps, s.scale_out_Bps, s.torus_side, s.torus_ports)

    def chip(s):
        return (s.chip.name, s.chip.hbm_bytes, s.chip.hbm_bandwidth_Bps)
    out: dict[str, SystemResult | None] = {}
    for name, same in (("chip-only", lambda s: rack(s) == rack(base)), ("network-only", lambda s: chip(s) == chip(base))):
        rows = [r for r in res.ranked(objective) if not r.system.fixed and same(r.system)]
        out[name] = rows[0] if rows else None
    return out


def design_report(res: CodesignResults, winner: SystemResult, versus: SystemResult,
                  ap: AreaPowerModel | None = None) -> str:
    """Why ``winner`` beats ``versus``: the step's seconds by term on each (the terms it removes
    first), its power and die-area deltas by component, and which budget each of its margins
    rests on — for chip power, rack power and die area, the best system that stays within the
    next-lower value (what wins if that budget tightens below the winner)."""
    v.instances("design_report", none_ok=False, res=(res, CodesignResults), winner=(winner, SystemResult),
                versus=(versus, SystemResult))
    v.instances("design_report", ap=(ap, AreaPowerModel))
    ap = ap or AreaPowerModel()
    w, x = winner, versus
    if w.plan is None or x.plan is None:
        raise ValueError("design_report needs two systems with a plan")
    lines = [f"{w.system.name}  vs  {x.system.name}  ({res.model}, {res.chips} chips)",
             f"  tokens/s {w.tokens_per_s:,.0f} vs {x.tokens_per_s:,.0f} ({w.tokens_per_s / x.tokens_per_s:.2f}x); "
             f"plans {w.plan.spec.describe()}  |  {x.plan.spec.describe()}",
             "  step seconds by term (winner - other), largest removal first:"]
    keys = sorted(set(w.plan.breakdown) | set(x.plan.breakdown),
                  key=lambda k: w.plan.breakdown.get(k, 0.0) - x.plan.breakdown.get(k, 0.0))
    for k in keys:
        a, b = w.plan.breakdown.get(k, 0.0), x.plan.breakdown.get(k, 0.0)
        if abs(a - b) > 1e-6 or a > 1e-6:
            lines.append(f"    {k:<14} {a:9.3f} s vs {b:9.3f} s  ({a - b:+.3f})")
    s = w.system
    power = s.power_parts_w(ap) or {}
    lines.append(f"  power per chip {w.power_w:.0f} W: "
                 + ", ".join(f"{k} {x:.0f}" if k == "rated" else f"{k} {x:+.0f}" for k, x in power.items()))
    area = s.die_area_parts_mm2(ap)
    lines.append(f"  die area beyond {s.base}: {sum(area.values()):+.0f} mm^2 ("
                 + ", ".join(f"{k} {x:+.0f}" for k, x in area.items()) + ")")
    for label, val in (("chip power", lambda r: r.power_w), ("rack power", lambda r: r.power_w * r.system.domain(res.chips)),
                       ("die area", lambda r: r.system.die_area_delta_mm2(ap))):
        below = [r for r in res.ranked() if val(r) < val(w) - 1e-9]
        alt = below[0] if below else None
        lines.append(f"  if the {label} budget falls below the winner's {val(w):,.0f}: "
                     + (f"{alt.system.name} wins at {alt.tokens_per_s / w.tokens_per_s:.2f}x the winner's tokens/s"
                        if alt else "no system of the space is left"))
    return "\n".join(lines)


#: The achievable fraction of a torus link (cosearch.cluster's TPU pod presets' ``intra_efficiency``).
TORUS_LINK_EFFICIENCY = 0.90


#: Systems one can buy, as the cluster presets price them (NVIDIA datasheets: DGX H100 and DGX
#: B200 with 8 GPUs per NVLink domain and a 400 Gb/s NIC per GPU; GB200 NVL72 with 72 per domain
#: and 400 Gb/s per GPU; GB300 NVL72 with 800 Gb/s ConnectX-8 per GPU; DGX B300 likewise).
FIXED_SYSTEMS: dict[str, dict[str, Any]] = {
    "dgx-h100": dict(chip="H100", scale_up=8, scale_out_Bps=50e9),
    "dgx-b200": dict(chip="B200", scale_up=8, scale_out_Bps=50e9),
    "dgx-b300": dict(chip="B300", scale_up=8, scale_out_Bps=100e9),
    "gb200-nvl72": dict(chip="GB200", scale_up=72, scale_out_Bps=50e9),
    "gb300-nvl72": dict(chip="GB300", scale_up=72, scale_out_Bps=100e9),
    # TPU pods: one 3D-torus slice (cosearch.cluster's tpuv5p-pod / tpu7x-pod), at most 8,960 and
    # 9,216 chips (Google Cloud's TPU v5p and TPU7x pages); no rated power is published for them
    "tpuv5p-pod": dict(chip="TPUv5p", scale_up=8960, scale_out_Bps=100e9, cluster_preset="tpuv5p-pod",
                       max_chips=8960),
    "tpu7x-pod": dict(chip="TPU7x", scale_up=9216, scale_out_Bps=100e9, cluster_preset="tpu7x-pod", max_chips=9216),
}


#: All-in cost per GPU-hour of the systems with a public figure: SemiAnalysis's AI Cloud TCO
#: Model, the cost of owning at a hyperscaler ("Owning - Hyperscaler", ``costh`` in
#: SemiAnalysisAI/InferenceX-app ``packages/app/src/lib/constants.ts``, ``GPU_SPECS``, commit
#: 77ca49a of 2026-04-03; ``docs/tco-calculator.md`` there names the three rates): H100 $1.30,
#: B200 $1.95, GB200 NVL72 $2.21 per GPU-hour (the last two also quoted in that repository's pull
#: request #381, 2026-05-26: "GB200 NVL72 TCO is about 13% higher per GPU-hour").  Its B300 and
#: GB300 rates are placeholders by its own comment ("temporary - using 1.2x B200 pricing until
#: official pricing is available"), so those systems carry no price here; nor do the TPU pods.
FIXED_USD_PER_HOUR: dict[str, float] = {"dgx-h100": 1.30, "dgx-b200": 1.95, "gb200-nvl72": 2.21}


def fixed_system(name: str, chip_usd: float | None = None) -> SystemDesign:
    """The :data:`FIXED_SYSTEMS` entry ``name`` (with a capex per chip slot, if given, and its
    :data:`FIXED_USD_PER_HOUR` where one is published)."""
    if not isinstance(name, str) or name not in FIXED_SYSTEMS:
        raise ValueError(f"unknown fixed system {name!r}; choose one of {', '.join(FIXED_SYSTEMS)}")
    f = dict(FIXED_SYSTEMS[name])
    return SystemDesign(chip_preset(f.pop("chip")), f.pop("scale_up"), f.pop("scale_out_Bps"), name=name,
                        chip_usd=chip_usd, usd_per_hour=FIXED_USD_PER_HOUR.get(name), fixed=True, **f)
