"""Search spaces of accelerator designs: :class:`SearchSpace` (PHAZE's space, the default one,
and spaces read from a file) and the area models a space can be budgeted with."""

from __future__ import annotations

import itertools
import math
import os
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from .. import _validate as _valid
from .area import AreaPowerModel, PhazeAreaModel, phaze_glb_words, phaze_l1_bytes
from .chips import PHAZE_CLOCK_HZ, PHAZE_GLB_WORDS_PER_CYCLE, Accelerator, TPUv4, phaze_reference
from .efficiency import MAX_FORMAT_MACS, GiB, MiB

#: Most distinct values one SearchSpace field may list, and most designs its grid may hold
#: before the budget filter (PHAZE's space: 75,712): larger inputs are refused before anything is
#: allocated (a grid row costs ~100 bytes, so the cap keeps the grid under ~1 GB).
MAX_FIELD_VALUES = 4096
MAX_GRID_DESIGNS = 10_000_000
#: Largest space file read (bytes).
MAX_SPACE_FILE_BYTES = 1 << 20


def _as_tuple(name: str, v: Any) -> tuple:
    t = tuple(v) if isinstance(v, (list, tuple, np.ndarray)) else (v,)
    if not t:
        raise ValueError(f"SearchSpace.{name} must not be empty")
    if len(t) > 16 * MAX_FIELD_VALUES:
        raise ValueError(f"SearchSpace.{name} lists {len(t):,} values; at most {MAX_FIELD_VALUES:,} distinct "
                         "values are supported")
    return t


def _distinct(name: str, vals: tuple) -> tuple:
    """The values in their first order, repeats dropped; refused past :data:`MAX_FIELD_VALUES`."""
    try:
        out = tuple(dict.fromkeys(vals))
    except TypeError:
        out = vals
    if len(out) > MAX_FIELD_VALUES:
        raise ValueError(f"SearchSpace.{name} has {len(out):,} distinct values; at most {MAX_FIELD_VALUES:,} "
                         "are supported")
    return out



#: HBM scenarios a run can be given by capacity (GiB) alone: capacity -> bandwidth (B/s).
#: 32 GiB: TPUv4's HBM2 (1.2 TB/s); 64 GiB: the same bandwidth (PHAZE varies capacity only);
#: 80 GiB: likewise.  Give ``hbm_Bps`` to change the bandwidth of a scenario.
HBM_SCENARIO_BPS = 1.2e12

#: Fields a search-space JSON file may set (besides ``"base"`` and ``"hbm_gib"``).
SPACE_FILE_FIELDS = ("tensor_cores", "systolic_dims", "vector_units", "vector_width", "vector_width_tied",
                     "clock_hz", "l1_bytes", "l1_rule", "l2_bytes", "hbm", "link_bandwidth_Bps",
                     "area_budget_mm2", "power_budget_w", "min_area_fraction", "min_area_exempt_single_core",
                     "glb_words_per_cycle", "glb_rule", "fp8_macs", "fp4_macs")


#: Area models a search space can be built with, by name.
AREA_MODELS = ("cosearch", "phaze")


def named_area_model(name: str, power: AreaPowerModel | None = None) -> AreaPowerModel | PhazeAreaModel:
    """The area model called ``name`` (:data:`AREA_MODELS`): ``"cosearch"`` is ``power`` (default
    :class:`AreaPowerModel`); ``"phaze"`` is :class:`PhazeAreaModel`, with ``power`` pricing its
    power."""
    if power is not None and not isinstance(power, AreaPowerModel):
        raise ValueError(f"area_power must be an AreaPowerModel, got {type(power).__name__}")
    if name == "cosearch":
        return power or AreaPowerModel()
    if name == "phaze":
        return PhazeAreaModel(power or AreaPowerModel())
    raise ValueError(f"area_model must be one of {', '.join(AREA_MODELS)}, got {name!r}")


def _area_suffix(area_model: str) -> str:
    """What a space's name says of its area model: nothing for cosearch's own."""
    return "" if area_model == "cosearch" else f"-{area_model}-area"


#: The plausible range of a searched clock (Hz) and link bandwidth (bytes/s): the ranges an
#: :class:`Accelerator`'s own fields are held to (:data:`cosearch._validate.MIN_HZ` ...), so a unit
#: slip (8 for 8 GHz) is refused rather than searched.
_PLAUSIBLE = {"clock_hz": (_valid.MIN_HZ, _valid.MAX_HZ, "Hz"),
              "link_bandwidth_Bps": (_valid.MIN_BPS, _valid.MAX_BPS, "bytes/s")}


@dataclass(frozen=True)
class SearchSpace:
    """A Cartesian grid of accelerator designs under an area and power budget.

    Each field lists the candidate values of one architecture parameter;
    ``systolic_dims`` lists (rows, cols) pairs and ``hbm`` lists
    (capacity_bytes, bandwidth_Bps) pairs.  ``vector_width_tied``: every vector unit is as
    wide as the systolic array (``vector_width`` then ignored; PHAZE's rule).  ``l1_rule``:
    ``"grid"`` (the ``l1_bytes`` values) or ``"phaze"`` (:func:`phaze_l1_bytes`).
    ``glb_words_per_cycle``: every design's global buffer feeds its tensor cores this many
    2-byte words per cycle (``glb_Bps = words x 2 x clock``; 0: not modelled), so a GEMM's
    operand traffic bounds its time (:func:`cosearch._kernels.formulas.operand_traffic_bytes`);
    ``glb_rule="phaze"`` gives single-core designs PHAZE's smaller figure (:func:`phaze_glb_words`).

    Budgets: the area (package: die + HBM stacks) and power of ``reference`` (default the
    TPUv4 preset, given the grid's HBM when the grid has a single HBM scenario) unless set.
    ``min_area_fraction``: designs whose *die* area is below this fraction of the
    reference's die area are dropped (PHAZE keeps 0.3x-1x, except designs with a single
    tensor or vector core: ``min_area_exempt_single_core``).  :meth:`arrays` returns the
    designs that fit as one row per design (:data:`DESIGN_FIELDS` order).

    HBM is a *scenario* (one capacity per run) in both presets; a grid with several HBM
    pairs searches it, and then capacity and bandwidth cost area (and bandwidth power).

    ``fp8_macs``: the tensor unit's number formats — FP8 multiply-adds each PE does per cycle
    beside its bf16 MAC (0, the default: bf16 only; 2: FP8 at twice the bf16 rate, as H100 and
    B200).  FP8 MACs cost PE area and energy (:class:`AreaPowerModel`'s
    ``fp8_mac_area_fraction`` / ``fp8_mac_energy_fraction``), and only designs with them can
    run FP8 plans (``precision="fp8"``); list ``(0, 2)`` to let the search decide.
    ``fp4_macs`` likewise for FP4 (E2M1, NVFP4; 4 on B200, whose dense FP4 peak is four times
    its BF16 one), priced at an upper bound per MAC (``fp4_mac_area_fraction`` /
    ``fp4_mac_energy_fraction``); only designs with them run ``precision="fp4"`` plans.
    """

    tensor_cores: tuple = (2, 4, 8, 16, 32)
    systolic_dims: tuple = ((32, 32), (64, 64), (128, 128), (256, 256))
    vector_units: tuple = (2, 4, 8)
    vector_width: tuple = (512, 1024)
    clock_hz: tuple = (1.05e9,)
    l1_bytes: tuple = (1 * MiB, 4 * MiB, 16 * MiB)
    l2_bytes: tuple = (32 * MiB, 128 * MiB)
    hbm: tuple = ((32 * GiB, 1.2e12),)
    link_bandwidth_Bps: tuple = (3.0e11,)
    area_budget_mm2: float | None = None
    power_budget_w: float | None = None
    area_power: AreaPowerModel | PhazeAreaModel = field(default_factory=AreaPowerModel)
    vector_width_tied: bool = False
    l1_rule: str = "grid"
    min_area_fraction: float = 0.0
    min_area_exempt_single_core: bool = False
    reference: Accelerator | None = None
    name: str = "default"
    glb_words_per_cycle: float = 0.0
    glb_rule: str = "fixed"
    fp8_macs: tuple = (0.0,)
    fp4_macs: tuple = (0.0,)

    def __post_init__(self) -> None:
        try:
            self._check_fields()
        except OverflowError:        # an integer no float holds, in any field
            raise ValueError("SearchSpace: a value is beyond any float (an integer of hundreds of digits?); give "
                             "sizes, rates and budgets as ordinary numbers") from None

    def _check_fields(self) -> None:
        if not isinstance(self.area_power, (AreaPowerModel, PhazeAreaModel)):
            raise ValueError(f"SearchSpace.area_power must be an AreaPowerModel or a PhazeAreaModel, got "
                             f"{type(self.area_power).__name__}")
        if self.glb_rule not in ("fixed", "phaze"):
            raise ValueError(f"SearchSpace.glb_rule must be 'fixed' or 'phaze', got {self.glb_rule!r}")
        from .._validate import flag
        for f in ("vector_width_tied", "min_area_exempt_single_core"):
            flag(f"SearchSpace.{f}", getattr(self, f))
        w = self.glb_words_per_cycle
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not (math.isfinite(w) and w >= 0):
            raise ValueError(f"SearchSpace.glb_words_per_cycle must be a non-negative number (0: on-chip "
                             f"bandwidth not modelled), got {w!r}")
        for f in ("tensor_cores", "vector_units", "vector_width", "clock_hz", "l1_bytes",
                  "l2_bytes", "link_bandwidth_Bps"):
            vals = _as_tuple(f, getattr(self, f))
            for v in vals:
                if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) \
                        or not (float(v) > 0) or not np.isfinite(float(v)):
                    raise ValueError(f"SearchSpace.{f} values must be positive numbers, got {v!r}")
                if f in _PLAUSIBLE:
                    # the range a chip's own field must lie in (Accelerator refuses the same values)
                    _valid.in_range(f"SearchSpace.{f}", v, *_PLAUSIBLE[f])
            object.__setattr__(self, f, _distinct(f, vals))
        for f, most in MAX_FORMAT_MACS.items():
            vals = _as_tuple(f, getattr(self, f))
            for x in vals:
                if isinstance(x, bool) or not isinstance(x, (int, float, np.integer, np.floating)) \
                        or not (0.0 <= float(x) <= most):
                    raise ValueError(f"SearchSpace.{f} values must be numbers of {f[:3].upper()} MACs per PE per "
                                     f"cycle in [0, {most:g}] (0: none in that format), got {x!r}")
            object.__setattr__(self, f, _distinct(f, tuple(float(x) for x in vals)))
        for f, names in (("systolic_dims", ("rows", "cols")), ("hbm", ("capacity", "bandwidth"))):
            vals = getattr(self, f)
            if not isinstance(vals, (list, tuple)) or not vals:
                raise ValueError(f"SearchSpace.{f} must be a non-empty list of ({names[0]}, {names[1]}) pairs")
            _as_tuple(f, vals)
            pairs = tuple(tuple(p) if isinstance(p, (list, tuple)) else (p,) for p in vals)
            for p in pairs:
                if len(p) != 2 or not all(isinstance(x, (int, float)) and not isinstance(x, bool)
                                          and float(x) > 0 and np.isfinite(x) for x in p):
                    raise ValueError(f"SearchSpace.{f} entries must be positive ({names[0]}, {names[1]}) "
                                     f"pairs, got {p!r}")
                if f == "hbm":
                    _valid.bandwidth("SearchSpace.hbm bandwidth", p[1])
            object.__setattr__(self, f, _distinct(f, pairs))
        if self.l1_rule not in ("grid", "phaze"):
            raise ValueError(f"SearchSpace.l1_rule must be 'grid' or 'phaze', got {self.l1_rule!r}")
        if not (isinstance(self.min_area_fraction, (int, float)) and 0.0 <= self.min_area_fraction < 1.0):
            raise ValueError(f"SearchSpace.min_area_fraction must be in [0, 1), got {self.min_area_fraction!r}")
        ref = self.reference or TPUv4
        if not isinstance(ref, Accelerator):
            raise ValueError(f"SearchSpace.reference must be an Accelerator, got {ref!r}")
        ref = self.with_scenario_hbm(ref)      # an HBM scenario: the reference carries the same HBM
        object.__setattr__(self, "reference", ref)
        for f, fn in (("area_budget_mm2", ref.area_mm2), ("power_budget_w", ref.power_w)):
            v = getattr(self, f)
            if v is None:
                object.__setattr__(self, f, fn(self.area_power))
            elif isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
                raise ValueError(f"SearchSpace.{f} must be a positive number, got {v!r}")
            else:
                object.__setattr__(self, f, float(v))

    def with_scenario_hbm(self, chip: Accelerator) -> Accelerator:
        """``chip`` with this space's HBM when the space holds one HBM scenario (a reference
        or baseline gets the same memory as every design), else ``chip`` as it is."""
        if len(self.hbm) == 1:
            return chip.with_(hbm_bytes=float(self.hbm[0][0]), hbm_bandwidth_Bps=float(self.hbm[0][1]))
        return chip

    # ------------------------------------------------------------------ presets
    @classmethod
    def phaze(cls, hbm_gib: float = 32, hbm_Bps: float | None = None,
              area_power: AreaPowerModel | None = None, onchip_bandwidth: bool = True,
              area_model: str = "cosearch") -> SearchSpace:
        """PHAZE's architecture space (msr-fiddle/phaze, ``Estimator/architecture.py``):
        1-4,096 tensor cores and 1-4,096 vector cores (powers of two), systolic width and
        depth independently 2-256 (powers of two), vector width = array width, a 2-128 MiB
        global buffer, PHAZE's per-core buffers (:func:`phaze_l1_bytes`), 1.05 GHz; kept
        when its die area lies between 0.3x and 1x that of :func:`phaze_reference` (no
        lower bound for a single tensor or vector core, as PHAZE).  HBM is the run's
        scenario: ``hbm_gib`` GiB at ``hbm_Bps`` (default :data:`HBM_SCENARIO_BPS`); no power cap
        (PHAZE constrains area only).  ``onchip_bandwidth``: the global buffer feeds the cores
        PHAZE's :data:`PHAZE_GLB_WORDS_PER_CYCLE` words per cycle (its estimator's
        ``max_glb_bw``; a single core less, :func:`phaze_glb_words`), so GEMMs are bounded by
        their operand traffic too; False prices them
        without that bound (cosearch 0.2's space).  ``area_model``: ``"cosearch"``
        (:class:`AreaPowerModel`, or ``area_power`` when given) or ``"phaze"``
        (:class:`PhazeAreaModel`, PHAZE's own figures: the space is then
        exactly PHAZE's 29,360-design list, ``Estimator/arch_configs/cores.json``)."""
        from .. import _validate as v
        gib = v.positive_float("hbm_gib", hbm_gib)
        bw = HBM_SCENARIO_BPS if hbm_Bps is None else v.positive_float("hbm_Bps", hbm_Bps)
        hbm = (gib * GiB, bw)
        ap = named_area_model(area_model, area_power)
        suffix = _area_suffix(area_model) + ("" if onchip_bandwidth else "-no-onchip")
        p2 = [2 ** i for i in range(0, 13)]
        dims = tuple((2 ** w, 2 ** d) for w in range(1, 9) for d in range(1, 9))
        return cls(tensor_cores=tuple(p2), systolic_dims=dims, vector_units=tuple(p2), vector_width=(1,),
                   clock_hz=(PHAZE_CLOCK_HZ,), l1_bytes=(1,), l2_bytes=tuple(2 ** i * MiB for i in range(1, 8)),
                   hbm=(hbm,), link_bandwidth_Bps=(3.0e11,), power_budget_w=math.inf,
                   area_power=ap, vector_width_tied=True, l1_rule="phaze",
                   min_area_fraction=0.3, min_area_exempt_single_core=True,
                   reference=phaze_reference(*hbm), name=f"phaze-hbm{gib:g}{suffix}",
                   glb_words_per_cycle=PHAZE_GLB_WORDS_PER_CYCLE if onchip_bandwidth else 0.0, glb_rule="phaze")

    @classmethod
    def default(cls, hbm_gib: float = 32, hbm_Bps: float | None = None, area_model: str = "cosearch") -> SearchSpace:
        """The default grid (square arrays, up to 32 cores) at one HBM scenario; ``area_model``
        as in :meth:`phaze` (the budget is then TPUv4's area under that model)."""
        from .. import _validate as v
        gib = v.positive_float("hbm_gib", hbm_gib)
        bw = HBM_SCENARIO_BPS if hbm_Bps is None else v.positive_float("hbm_Bps", hbm_Bps)
        suffix = _area_suffix(area_model)
        return cls(hbm=((gib * GiB, bw),), name=f"default-hbm{gib:g}{suffix}",
                   area_power=named_area_model(area_model))

    @classmethod
    def from_json(cls, path: str, hbm_gib: float | None = None) -> SearchSpace:
        """A user's grid from a JSON object: ``"base"`` (``"default"`` or ``"phaze"``, default
        ``"default"``), ``"hbm_gib"``, ``"area_model"`` (:data:`AREA_MODELS`, default
        ``"cosearch"``), and any of :data:`SPACE_FILE_FIELDS` (byte and Hz units as in the
        dataclass).  Unknown fields are an error naming them."""
        from .._json import read_json_file
        d = read_json_file(path, "space", MAX_SPACE_FILE_BYTES)
        if not isinstance(d, dict):
            raise ValueError(f"space file {path!r}: the top level must be an object")
        unknown = sorted(set(d) - set(SPACE_FILE_FIELDS) - {"base", "hbm_gib", "area_model"})
        if unknown:
            raise ValueError(f"space file {path!r}: unknown field(s) {unknown}; allowed: "
                             f"base, hbm_gib, area_model, {', '.join(SPACE_FILE_FIELDS)}")
        am = d.pop("area_model", "cosearch")
        if am not in AREA_MODELS:
            raise ValueError(f"space file {path!r}: area_model must be one of {', '.join(AREA_MODELS)}, got {am!r}")
        base = d.pop("base", "default")
        if base not in ("default", "phaze"):
            raise ValueError(f"space file {path!r}: base must be 'default' or 'phaze', got {base!r}")
        gib = d.pop("hbm_gib", None) if hbm_gib is None else hbm_gib
        space = (cls.phaze if base == "phaze" else cls.default)(**({} if gib is None else {"hbm_gib": gib}),
                                                               area_model=am)
        changes = {}
        for k, val in d.items():
            changes[k] = tuple(tuple(x) if isinstance(x, list) else x for x in val) if isinstance(val, list) else val
        if "hbm" in changes:
            changes["reference"] = space.reference.with_(hbm_bytes=TPUv4.hbm_bytes) if base == "default" \
                else space.reference
        try:
            return replace(space, name=os.path.basename(str(path)), **changes)
        except ValueError as exc:
            raise ValueError(f"space file {path!r}: {exc}") from None
        except TypeError as exc:
            raise ValueError(f"space file {path!r}: {exc}") from None

    # ------------------------------------------------------------------ designs
    @property
    def grid_size(self) -> int:
        """Designs in the grid before the budget filter."""
        return math.prod(len(x) for x in (
            self.tensor_cores, self.systolic_dims, self.vector_units,
            (0,) if self.vector_width_tied else self.vector_width, self.clock_hz,
            (0,) if self.l1_rule == "phaze" else self.l1_bytes, self.l2_bytes, self.hbm, self.link_bandwidth_Bps,
            self.fp8_macs, self.fp4_macs))

    def grid(self) -> np.ndarray:
        """Every design of the grid, before the budget filter."""
        n = self.grid_size
        if n > MAX_GRID_DESIGNS:
            raise ValueError(f"the search space's grid holds {n:,} designs, more than the {MAX_GRID_DESIGNS:,} "
                             "supported; list fewer values per field")
        vws = (0.0,) if self.vector_width_tied else self.vector_width
        l1s = (0.0,) if self.l1_rule == "phaze" else self.l1_bytes
        rows = []
        for tc, (r, c), vu, vw, clk, l1, l2, (hc, hb), lb, f8, f4 in itertools.product(
                self.tensor_cores, self.systolic_dims, self.vector_units, vws, self.clock_hz, l1s,
                self.l2_bytes, self.hbm, self.link_bandwidth_Bps, self.fp8_macs, self.fp4_macs):
            rows.append((tc, r, c, vu, r if self.vector_width_tied else vw, clk,
                         phaze_l1_bytes(r, c) if self.l1_rule == "phaze" else l1, l2, hc, hb, lb,
                         (phaze_glb_words(tc, r, c) if self.glb_rule == "phaze" and self.glb_words_per_cycle > 0
                          else self.glb_words_per_cycle) * 2.0 * clk, f8, f4))
        return np.array(rows, dtype=np.float64)

    def budget_mask(self, grid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Boolean (fits area, fits power) masks for the rows of ``grid``; the area mask also
        holds the lower bound ``min_area_fraction``."""
        ap = self.area_power
        ok_a = ap.area_mm2(grid) <= self.area_budget_mm2 * (1 + 1e-9)
        if self.min_area_fraction > 0:
            floor = self.min_area_fraction * ap.die_area_mm2(self.reference.as_array()[None])[0]
            big = ap.die_area_mm2(grid) >= floor * (1 - 1e-9)
            if self.min_area_exempt_single_core:
                big |= (grid[:, 0] == 1) | (grid[:, 3] == 1)
            ok_a &= big
        return ok_a, ap.power_w(grid) <= self.power_budget_w * (1 + 1e-9)

    def arrays(self) -> np.ndarray:
        """Designs under budget; raises ``ValueError`` naming the constraint if none are."""
        g = self.grid()
        ok_a, ok_p = self.budget_mask(g)
        keep = ok_a & ok_p
        if not keep.any():
            why = []
            if not ok_a.any():
                why.append(f"area budget {self.area_budget_mm2:.1f} mm^2 (smallest design "
                           f"{self.area_power.area_mm2(g).min():.1f} mm^2)")
            if not ok_p.any():
                why.append(f"power budget {self.power_budget_w:.1f} W (smallest design "
                           f"{self.area_power.power_w(g).min():.1f} W)")
            if not why:
                why.append("area and power together (each alone leaves designs)")
            raise ValueError("no design of the search space fits the " + " and the ".join(why))
        return np.ascontiguousarray(g[keep])

    def __len__(self) -> int:
        return len(self.arrays())

    def accelerators(self) -> list[Accelerator]:
        return [Accelerator.from_array(r, name=f"design{i}") for i, r in enumerate(self.arrays())]

    def describe(self) -> dict[str, Any]:
        g = self.grid()
        ok_a, ok_p = self.budget_mask(g)
        return {"name": self.name, "grid": len(g), "over_area": int((~ok_a).sum()), "over_power": int((~ok_p).sum()),
                "feasible": int((ok_a & ok_p).sum()), "area_budget_mm2": self.area_budget_mm2,
                "power_budget_w": self.power_budget_w}



