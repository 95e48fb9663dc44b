"""Cost model: roofline x kernel efficiency for every op of a layer graph on every design.

The formulas are documented in :mod:`cosearch._kernels.roofline`; this module
packs :class:`~cosearch.graph.LayerGraph` and :class:`~cosearch.hardware.Accelerator`
/ design arrays into the kernel's arrays and offers a vectorised-NumPy version
of the same formulas (``backend="numpy"``) used as the benchmark reference.

Achieved efficiency comes from the chip's :class:`~cosearch.hardware.KernelEfficiency`
(presets document their kernel-level sources) or from :func:`calibrate`, which fits it
to a table of measured op and collective times.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from .graph import OP_FIELDS, LayerGraph
from .hardware import DESIGN_FIELDS, IDEAL, Accelerator, KernelEfficiency, design_array

if TYPE_CHECKING:  # pragma: no cover
    from .cluster import Cluster

__all__ = ["price", "price_on", "price_rows", "price_numpy", "op_array", "calibrate", "Calibration",
           "efficiency_array"]


def efficiency_array(designs, efficiency: KernelEfficiency | None = None) -> np.ndarray:
    """The efficiency row to price with: ``efficiency`` if given, else a single
    Accelerator's own, else the ideal roofline (search-space designs)."""
    if efficiency is not None:
        if not isinstance(efficiency, KernelEfficiency):
            raise ValueError(f"efficiency must be a KernelEfficiency, got {efficiency!r}")
        return efficiency.as_array()
    if isinstance(designs, Accelerator):
        return designs.efficiency.as_array()
    return IDEAL.as_array()


def op_array(ops: LayerGraph | np.ndarray) -> np.ndarray:
    """Op rows (:data:`~cosearch.graph.OP_FIELDS` order) of a graph, validated."""
    if isinstance(ops, LayerGraph):
        return ops.arrays()
    try:
        arr = np.ascontiguousarray(ops, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"ops must be a LayerGraph or an (n, {len(OP_FIELDS)}) array of op rows, got "
                         f"{type(ops).__name__}") from None
    if arr.ndim == 2 and arr.shape[1] == len(OP_FIELDS) - 1:   # rows from before head_dim: none fused
        arr = np.ascontiguousarray(np.hstack([arr, np.zeros((len(arr), 1))]))
    if arr.ndim != 2 or arr.shape[1] != len(OP_FIELDS):
        raise ValueError(f"op array must have shape (n, {len(OP_FIELDS)}) (or {len(OP_FIELDS) - 1} columns "
                         f"without head_dim), got {arr.shape}")
    if not np.all(np.isfinite(arr)) or np.any(arr < 0):
        raise ValueError("op array has negative or non-finite entries")
    _check_op_rows(arr)
    return arr


def _check_op_rows(arr: np.ndarray) -> None:
    """The rules :class:`~cosearch.graph.Op` applies, on raw rows (a row the kernels cannot price
    would be priced 0 s, NaN, or raise ZeroDivisionError inside them): a known kind code; a
    GEMM or attention op with positive ``m, n, k, batch``; a vector or cast op with positive
    ``elements`` and ``ops_per_element``; a network op with positive ``bytes_read``; positive
    ``dtype_bytes``; a whole ``head_dim``, on attention ops only."""
    from .graph import KIND_ATTENTION, KIND_CAST, KIND_NETWORK, KIND_TENSOR, KIND_VECTOR
    col = {f: arr[:, i] for i, f in enumerate(OP_FIELDS)}
    kind = col["kind"]
    tensor = (kind == KIND_TENSOR) | (kind == KIND_ATTENTION)
    vector = (kind == KIND_VECTOR) | (kind == KIND_CAST)
    rules = [(~(tensor | vector | (kind == KIND_NETWORK)), f"its kind code is not one of {KIND_TENSOR} (GEMM), "
              f"{KIND_VECTOR} (vector), {KIND_NETWORK} (network), {KIND_ATTENTION} (attention), {KIND_CAST} (cast)")]
    rules += [(tensor & (col[f] <= 0), f"a GEMM or attention op needs a positive {f}") for f in ("m", "n", "k", "batch")]
    rules += [(vector & (col[f] <= 0), f"a vector op needs a positive {f}") for f in ("elements", "ops_per_element")]
    rules += [((kind == KIND_NETWORK) & (col["bytes_read"] <= 0), "a network op needs positive bytes_read"),
              (col["dtype_bytes"] <= 0, "dtype_bytes must be positive"),
              ((col["head_dim"] != np.floor(col["head_dim"])) | ((col["head_dim"] > 0) & (kind != KIND_ATTENTION)),
               "head_dim is a whole number, on attention ops only")]
    for bad, why in rules:
        if bad.any():
            i = int(np.argmax(bad))
            raise ValueError(f"op array row {i} ({dict(zip(OP_FIELDS, arr[i].tolist()))}): {why}")


def _designs(designs) -> np.ndarray:
    if isinstance(designs, Accelerator) or (isinstance(designs, Sequence) and designs
                                            and isinstance(designs[0], Accelerator)):
        return design_array(designs)
    return design_array(np.asarray(designs, dtype=np.float64))


def _check_fraction(core_fraction: float) -> float:
    f = float(core_fraction)
    if not (0.0 < f <= 1.0):
        raise ValueError(f"core_fraction must be in (0, 1], got {core_fraction!r}")
    return f


def price(ops: LayerGraph | np.ndarray, designs: Accelerator | Sequence[Accelerator] | np.ndarray,
          core_fraction: float = 1.0,
          backend: str = "numba", efficiency: KernelEfficiency | None = None) -> np.ndarray:
    """(designs, ops) array of op latencies in seconds.

    ``designs`` is an :class:`Accelerator`, a list of them, or a (n, 13) design
    array (:data:`~cosearch.hardware.DESIGN_FIELDS`).  ``core_fraction`` prices
    each op on that fraction of the chip's tensor cores / vector units and HBM
    bandwidth (how the scheduler splits the chip between concurrent ops).
    ``efficiency`` overrides the kernel efficiency (default: a single Accelerator's own,
    the ideal roofline for design arrays).
    """
    return price_rows(op_array(ops), designs, core_fraction, backend, efficiency)


def price_rows(rows: LayerGraph | np.ndarray, designs: Accelerator | Sequence[Accelerator] | np.ndarray,
               core_fraction: float = 1.0, backend: str = "numba",
               efficiency: KernelEfficiency | None = None) -> np.ndarray:
    """:func:`price` of op rows built from :class:`~cosearch.graph.Op` objects (a graph's
    ``arrays()``, or rows taken from them), which their constructor has checked: cosearch's own
    callers skip :func:`op_array`'s row check, a sixth of a plan search's time."""
    if isinstance(rows, LayerGraph):
        rows = rows.arrays()
    eff = efficiency_array(designs, efficiency)
    d = _designs(designs)
    f = _check_fraction(core_fraction)
    if backend == "numpy":
        o = np.ascontiguousarray(rows, dtype=np.float64)
        return price_numpy(o, d, f, eff)
    if backend != "numba":
        raise ValueError(f"unknown backend {backend!r}; choose 'numba' or 'numpy'")
    return price_checked(rows, d, eff, f)


def price_checked(rows: np.ndarray, designs: np.ndarray, efficiency: np.ndarray,
                  core_fraction: float = 1.0) -> np.ndarray:
    """:func:`price_rows` with the numba kernels of op rows built from ops, a design array that
    :func:`~cosearch.hardware.design_array` returned and an efficiency row
    (:meth:`KernelEfficiency.as_array`), none checked again: the plan search prices many graphs
    on the same designs."""
    from ._kernels import roofline
    o = np.ascontiguousarray(rows, dtype=np.float64).view()
    o.flags.writeable = False     # the kernels see read-only ops whatever the caller holds: one compiled signature
    kernel = roofline.price if len(designs) >= roofline.PARALLEL_MIN_DESIGNS else roofline.price_serial
    return kernel(o, designs, float(core_fraction), efficiency)


def price_on(ops: LayerGraph | np.ndarray, accelerator: Accelerator, core_fraction: float = 1.0) -> np.ndarray:
    """Per-op latency (seconds) on one accelerator."""
    return price(ops, accelerator, core_fraction)[0]


def price_numpy(ops: np.ndarray, designs: np.ndarray, core_fraction: float = 1.0,
                eff: np.ndarray | None = None) -> np.ndarray:
    """The roofline formulas vectorised over (designs, ops) with NumPy broadcasting."""
    e_t, e_a, e_m, launch, tm, tn, tk, slots, k_over, fp8_rate, fp4_rate, a_over, sustained, sk_fix, a_over_bwd, \
        a_head, e_cast, e_amax, attn_clock, speed_fwd, speed_bwd = IDEAL.as_array() if eff is None else eff
    o = {f: ops[None, :, i] for i, f in enumerate(OP_FIELDS)}
    d = {f: designs[:, i, None] for i, f in enumerate(DESIGN_FIELDS)}
    frac = core_fraction
    bw = d["hbm_bandwidth_Bps"] * frac * e_m
    clock = d["clock_hz"] * sustained
    m, n, k, b, dt = o["m"], o["n"], o["k"], o["batch"], o["dtype_bytes"]
    r, c = d["systolic_rows"], d["systolic_cols"]
    with np.errstate(divide="ignore", invalid="ignore"):
        cores = np.maximum(1.0, np.floor(d["tensor_cores"] * frac))
        tiles = b * np.ceil(k / r) * np.ceil(n / c)
        many = tiles >= cores
        s = np.minimum(np.floor(cores / np.maximum(tiles, 1e-300)), m)
        s = np.maximum(s, 1.0)
        rows = np.where(many, m, np.ceil(m / s))
        waves = np.where(many, np.ceil(tiles / cores), 1.0)
        compute_t = waves * (rows + r + c - 2.0) / clock
        total = (m * k + k * n + m * n) * b * dt
        l2 = d["l2_bytes"]
        t = np.maximum(1.0, np.floor(np.sqrt(l2 / (3.0 * dt))))
        blocked = b * dt * (m * k * np.ceil(n / t) + k * n * np.ceil(m / t) + m * n)
        nbytes = np.where(total <= l2, total, blocked)
        need_l1 = dt * 2.0 * r * c + r * (r * dt + 4.0 * c)
        nbytes = nbytes + np.where(need_l1 > d["l1_bytes"], tiles * np.ceil(m / r) * r * c * dt, 0.0)
        # on-chip operand traffic (weights once, inputs per weight-tile column, fp32 partial sums
        # per weight-tile row) at the design's global-buffer bandwidth (0: not modelled)
        glb = d["glb_Bps"] * frac
        traffic = b * (k * n * dt + m * k * dt * np.ceil(n / c) + 4.0 * m * n * np.ceil(k / r))
        onchip_t = np.where(glb > 0, traffic / np.where(glb > 0, glb, 1.0), 0.0)
        if slots > 0:     # thread-block tiles over the SMs (an independent NumPy statement of the rule)
            sl = max(1.0, np.floor(slots * frac))
            blocks = b * np.ceil(m / tm) * np.ceil(n / tn)
            per_tile = np.ceil(k / tk) * tk + k_over           # K-elements a tile takes
            busy = np.ceil(blocks / sl) * per_tile              # whole tiles, wave after wave
            if sk_fix > 0:   # stream-K: whole waves, then the leftover tiles' K-steps over every SM
                leftover = np.mod(blocks, sl)
                split = np.floor(blocks / sl) * per_tile + np.maximum(leftover * per_tile / sl, tk) + sk_fix
                busy = np.where(leftover > 0, np.minimum(busy, split), busy)
            shape = m * n * b * k / (sl * tm * tn * busy)
        else:
            shape = 1.0
        # 1-byte operands: the chip's measured FP8 rate, else its tensor unit's FP8 MACs per PE;
        # FP4 (under a byte: NVFP4) likewise its FP4 rate, else its FP4 MACs; none: the GEMM
        # cannot run (an infinite time)
        rate = np.where(dt == 1.0, fp8_rate if fp8_rate > 0.0 else d["fp8_macs"], 1.0)
        rate = np.where(dt < 1.0, fp4_rate if fp4_rate > 0.0 else d["fp4_macs"], rate)
        gemm_t = np.where(rate > 0.0, compute_t / np.where(rate > 0.0, rate, 1.0), np.inf)
        # 4-byte (FP32) operands: on the vector lanes, one FMA a lane a cycle (no tensor-unit waves)
        lanes = d["vector_units"] * frac * d["vector_width"]         # (a vector op's too, below)
        gemm_t = np.where(dt >= 4.0, m * n * k * b / lanes / clock, gemm_t)
        tensor_t = np.maximum(np.maximum(gemm_t / (e_t * shape), nbytes / bw), onchip_t) + launch
        op_bytes = (o["bytes_read"] + o["bytes_written"]) / bw
        # fused attention: per 128-query-row block, a_over (forward) or a_over_bwd (a backward,
        # k = 2.5 head dims) blocks of fixed work beside its m / 128; a head of d does d MACs a
        # score against a_head of softmax work (relative to d = 128); unfused matmuls (d = 0):
        # the forward's length factor alone
        d_head = o["head_dim"]
        over = np.where((d_head > 0) & (k > 1.5 * d_head), a_over_bwd, a_over)
        # the length factor at min(m, n) rows for fused kernels (a window's or a sparse
        # selection's blocks pay the same per-block overhead for the fewer keys they meet)
        rows_l = np.where(d_head > 0, np.minimum(m, n), m)
        length = np.where(over > 0, rows_l / (rows_l + 128.0 * over), 1.0)
        head = np.where((d_head > 0) & (a_head > 0), (1.0 + a_head / 128.0) / (1.0 + a_head / np.maximum(d_head, 1.0)),
                        1.0)
        # fused attention kernels (a head dim) run at their own held clock (attn_clock); unfused
        # attention's batched matmuls and GEMMs at the sustained one
        held = np.where(d_head > 0, attn_clock, sustained)
        # a fused kernel on FP8 / MXFP8 operands (dtype under 2 bytes) at its pass's speed over bf16
        speed = np.where((d_head > 0) & (dt < 2.0), np.where(k > 1.5 * d_head, speed_bwd, speed_fwd), 1.0)
        attn_t = np.maximum(compute_t * (sustained / held) / (e_a * length * head * speed), op_bytes) + launch
        lane_t = np.ceil(o["elements"] / lanes) * o["ops_per_element"] / clock
        vec_t = np.maximum(lane_t, op_bytes) + launch
        # a low-precision cast: a vector op, streaming at the engine's cast rate where one is set
        cast_bytes = op_bytes if e_cast <= 0 else (o["bytes_read"] + o["bytes_written"]) / (
            d["hbm_bandwidth_Bps"] * frac * e_cast)
        # and a separate amax reduction reading the input once more, no faster than the stream
        if e_amax > 0:
            cast_bytes = cast_bytes + o["bytes_read"] / np.minimum(e_amax * frac, bw)
        cast_t = np.maximum(lane_t, cast_bytes) + launch
    kind = o["kind"]
    return np.where(kind == 0, tensor_t, np.where(kind == 3, attn_t, np.where(kind == 1, vec_t,
                                                                              np.where(kind == 4, cast_t, 0.0))))


# ---------------------------------------------------------------------- calibration
_CAL_OP_COLS = ("m", "n", "k", "batch", "dtype_bytes", "seconds")
_CAL_COLL_COLS = ("collective", "bytes", "group", "link", "seconds")


def _read_table(measurements) -> dict[str, np.ndarray]:
    """Columns of a CSV file (path) or a mapping of equal-length arrays."""
    import os
    if isinstance(measurements, (str, os.PathLike)):
        if not os.path.isfile(measurements):
            raise ValueError(f"calibrate: no such measurement file {str(measurements)!r}")
        cols = read_csv_columns(measurements)
    elif isinstance(measurements, dict):
        cols = {str(k): list(np.atleast_1d(v)) for k, v in measurements.items()}
    else:
        raise ValueError("calibrate: measurements must be a CSV path or a mapping of column arrays, "
                         f"got {type(measurements).__name__}")
    lens = {len(v) for v in cols.values()}
    if len(lens) != 1:
        raise ValueError(f"calibrate: measurement columns have different lengths {sorted(lens)}")
    return {k: np.asarray(v) for k, v in cols.items()}


def read_csv_columns(path) -> dict[str, list[str]]:
    """The columns of a measurement CSV (UTF-8, with or without a byte-order mark); an empty,
    header-only, binary or ragged file is refused with a message naming it."""
    import csv
    import io
    import os
    name = os.fspath(path)
    try:
        with open(path, "rb") as fh:
            raw = fh.read(1 << 28)
    except OSError as exc:
        raise ValueError(f"calibrate: {name}: {exc.strerror or exc}") from None
    if b"\0" in raw:
        raise ValueError(f"calibrate: {name} is a binary file, not a CSV")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise ValueError(f"calibrate: {name} is not UTF-8 text") from None
    rows = list(csv.DictReader(io.StringIO(text)))
    if not rows:
        raise ValueError(f"calibrate: {name} holds no data rows (a header line, then one row per measurement)")
    ragged = [i + 2 for i, r in enumerate(rows) if None in r or any(x is None for x in r.values())]
    if ragged:
        raise ValueError(f"calibrate: {name}: line(s) {ragged[:5]} have a different number of cells than the header")
    return {k.strip(): [r[k] for r in rows] for k in rows[0] if k is not None}


#: Measured kernel and collective times must lie in this range, seconds: a GPU kernel launch
#: alone takes microseconds, and no single kernel or collective of a training step runs an hour.
MEASURED_S_BOUNDS = (1e-7, 3600.0)
#: A measured op may beat the chip's ideal roofline (its datasheet clock, no kernel losses) by at
#: most this factor (a boost clock above the datasheet's); a faster row is a unit slip.
ROOFLINE_SLACK = 1.5


def _check_seconds(sec: np.ndarray, rows: np.ndarray, what: str) -> None:
    lo, hi = MEASURED_S_BOUNDS
    bad = np.flatnonzero((sec < lo) | (sec > hi))
    if len(bad):
        raise ValueError(f"calibrate: {what} row(s) {[int(rows[i]) + 1 for i in bad[:5]]} take "
                         f"{[float(sec[i]) for i in bad[:5]]} s, outside the physical range {lo:g} to {hi:g} s "
                         "(seconds, not microseconds or milliseconds?)")


def _blank(values) -> np.ndarray:
    """Which cells of a column are empty (a CSV's "", or NaN / None from a mapping)."""
    return np.array([str(x).strip() in ("", "nan", "None") for x in values], dtype=bool)


def _num(cols, name, rows) -> np.ndarray:
    try:
        a = np.asarray(cols[name][rows], dtype=np.float64)
    except (KeyError, ValueError) as exc:
        raise ValueError(f"calibrate: column {name!r} is missing or not numeric ({exc})") from None
    if not np.all(np.isfinite(a)) or np.any(a <= 0):
        raise ValueError(f"calibrate: column {name!r} must hold positive finite numbers")
    return a


@dataclass(frozen=True)
class Calibration:
    """A chip whose :class:`KernelEfficiency` was fitted to measurements, and the fitted
    collective bandwidth fractions and latencies (None where no rows were given).

    ``apply(cluster)`` returns the cluster with the fitted link efficiencies/latencies."""

    chip: Accelerator
    gemm_rows: int
    gemm_rms_log_error: float
    intra_efficiency: float | None = None
    intra_latency_s: float | None = None
    inter_efficiency: float | None = None
    inter_latency_s: float | None = None
    collective_rows: int = 0
    #: the kernel-efficiency parameters the op rows identified and were fitted (the others keep
    #: the chip's values), and each op row's log residual (model - measured)
    fitted: tuple[str, ...] = ()
    residuals: tuple[float, ...] = ()

    def apply(self, cluster):
        ch = {}
        if self.intra_efficiency is not None:
            ch.update(intra_efficiency=min(1.0, self.intra_efficiency), link_latency_s=self.intra_latency_s)
        if self.inter_efficiency is not None and not cluster.flat:
            ch.update(inter_efficiency=min(1.0, self.inter_efficiency), inter_latency_s=self.inter_latency_s)
        return cluster.with_(**ch) if ch else cluster


#: Physical bounds of a fitted kernel launch time (seconds): 1-20 us.
LAUNCH_BOUNDS_S = (1e-6, 20e-6)
#: A row this short (at the chip's values) identifies the launch time.
LAUNCH_MATTERS_S = 200e-6


def example_gemm_times() -> str:
    """Path of a small measurement CSV in :func:`calibrate`'s format: A100 GEMM times derived
    from the public kernel rows (``cosearch/data/public_kernels.csv``), to try ``calibrate`` on."""
    import importlib.resources
    return str(importlib.resources.files("cosearch").joinpath("data/example_gemm_times.csv"))


def calibrate(chip: Accelerator, measurements: str | os.PathLike | Mapping[str, Sequence[Any]],
              cluster: Cluster | None = None) -> Calibration:
    """Fit ``chip``'s kernel efficiency (and optionally link efficiencies) to measured times.

    ``measurements``: a CSV path or a mapping of column arrays.  Op rows carry
    ``m, n, k, batch, dtype_bytes, seconds`` (a GEMM ``(m x k) @ (k x n)`` repeated ``batch``
    times; an optional ``kind`` column says ``gemm`` (default) or ``attention``, and an optional
    ``head_dim`` column marks fused attention kernels, priced as the graph's are, and an optional
    ``sm_clock_mhz`` column gives the SM clock each kernel ran at: then the fit is per clock and
    the chip keeps its sustained clock — without it, kernels timed at a short benchmark's boost
    clock calibrate a chip too fast for a long training run); collective
    rows carry ``collective`` (allreduce / allgather / reducescatter / alltoall), ``bytes``, ``group``
    (ranks), ``link`` (intra / inter) and ``seconds``.  Rows of the other kind leave those
    columns empty.  GEMM times are fitted as ``max(c / e_t, b / (e_m B)) + launch``
    (``c``: the roofline compute time, ``b``: its HBM bytes) by least squares on log time;
    collective times as ``f S / (e B) + steps * latency`` (ring factors ``f``) by linear
    least squares.  Needs ``cluster`` for the link bandwidths when collective rows are given.
    """
    import scipy.optimize as so

    from .graph import Op
    if not isinstance(chip, Accelerator):
        raise ValueError(f"calibrate: chip must be an Accelerator, got {chip!r}")
    cols = _read_table(measurements)
    nrows = len(next(iter(cols.values())))
    coll = np.zeros(nrows, dtype=bool)
    if "collective" in cols:
        coll = ~_blank(cols["collective"])
    ops_rows = np.flatnonzero(~coll)
    # measured kernels ran at whatever clock they ran at.  With an sm_clock_mhz column (cosearch
    # measure writes NVML's reading after each kernel) each row's compute is priced at its own
    # clock: the fit is per clock and the chip keeps its sustained clock.  Without one the fit
    # works in fractions of the datasheet-clock peak (the chip's per-clock values times its
    # sustained clock as the prior) and the calibrated chip prices at sustained_clock 1.
    e0 = chip.efficiency
    row_mhz = None
    if len(ops_rows) and "sm_clock_mhz" in cols:
        empty = _blank(cols["sm_clock_mhz"][ops_rows])
        if not empty.any():
            row_mhz = _num(cols, "sm_clock_mhz", ops_rows)
        elif not empty.all():
            raise ValueError("calibrate: column 'sm_clock_mhz' must be given for every op row or for none")
    # without row clocks the op rows are fitted in fractions of the datasheet-clock peak
    datasheet_fractions = bool(len(ops_rows)) and row_mhz is None
    clock = e0.sustained_clock if datasheet_fractions else 1.0
    # attention kernels at their own held clock (KernelEfficiency.attention_clock)
    att_clock = e0.attention_clock_held() if datasheet_fractions else 1.0
    fa2_clock = e0.with_attention_kernel("fa2").attention_clock_held() if datasheet_fractions else 1.0
    e_t, e_a, e_m, launch = e0.tensor * clock, min(e0.attention * att_clock, 1.0), e0.memory, e0.launch_s
    rms = 0.0
    fitted: tuple[str, ...] = ()
    residuals: tuple[float, ...] = ()
    if len(ops_rows):
        m, n, k, b, dt, sec = (_num(cols, c, ops_rows) for c in _CAL_OP_COLS)
        _check_seconds(sec, ops_rows, "op")
        kinds = (np.array([str(x).strip().lower() for x in cols["kind"][ops_rows]])
                 if "kind" in cols else np.array(["gemm"] * len(ops_rows)))
        bad = sorted(set(kinds) - {"gemm", "attention"})
        if bad:
            raise ValueError(f"calibrate: unknown op kind(s) {bad}; use 'gemm' or 'attention'")
        # an optional head_dim column marks fused attention kernels (cosearch measure writes it):
        # they get the length factor of their pass and the head-dim factor, as the graph's ops do
        hd = np.zeros(len(ops_rows))
        if "head_dim" in cols:
            raw = cols["head_dim"][ops_rows]
            hd = np.array([0.0 if e else float(x) for x, e in zip(raw, _blank(raw))])
            if not np.all(np.isfinite(hd)) or np.any(hd < 0) or np.any(hd != np.round(hd)):
                raise ValueError("calibrate: column 'head_dim' must hold non-negative whole numbers (0: not fused)")
            if np.any((hd > 0) & (kinds != "attention")):
                raise ValueError("calibrate: only attention rows can have a head_dim")
        lowp_att = np.flatnonzero((kinds == "attention") & (dt < 2.0))
        if len(lowp_att):
            # the fit is of the bf16 attention efficiency; FP8 attention runs at its own speed over it
            raise ValueError(f"calibrate: attention row(s) {[int(ops_rows[i]) + 1 for i in lowp_att[:5]]} have "
                             "dtype_bytes under 2 (FP8 attention): calibrate fits the bf16 attention efficiency, "
                             "and FP8 attention's speed over it is KernelEfficiency's fp8_attention_* / "
                             "mxfp8_attention_* fields (set them from your FP8 and bf16 timings of the same "
                             "shapes); give bf16 attention rows here")

        def _op(a, bb, c, d, t, kk, h):
            # an attention row without a head dim is still priced (and fitted) as attention, with
            # the forward's length factor alone (formulas.fused_attention_efficiency)
            kind = "gemm" if kk == "gemm" else "attention"
            if h > 0:
                # a fused kernel moves its operands, never the a x bb scores: forward Q, K, V in and
                # O out; a backward (k = 2.5 head dims) Q, O, dO, K, V in and dQ, dK, dV out
                bwd = c > 1.5 * h
                read, written = ((3.0 * a + 2.0 * bb) * h, (a + 2.0 * bb) * h) if bwd else \
                    ((a + 2.0 * bb) * h, a * h)
            else:
                read, written = a * c + c * bb, a * bb
            return Op("m", kind, m=int(a), n=int(bb), k=int(c), batch=int(d), bytes_read=read * d * t,
                      bytes_written=written * d * t, dtype_bytes=int(t), head_dim=int(h))
        ops = [_op(*row) for row in zip(m, n, k, b, dt, kinds, hd)]
        arr = np.array([o.as_row() for o in ops])
        # the roofline's compute part (unbounded bandwidth) and memory part (unbounded clock)
        # (with the chip's GEMM shape model, if it has one: only the four scalars are fitted)
        unit = replace(chip.efficiency.at_full_clock(), tensor=1.0, attention=1.0, memory=1.0, launch_s=0.0)
        compute = price(arr, chip._unbounded(hbm_bandwidth_Bps=1e30), efficiency=unit)[0]
        if row_mhz is not None:        # each row's compute at the clock it ran at
            compute = compute * chip.clock_hz / (row_mhz * 1e6)
        memory = price(arr, chip._unbounded(clock_hz=1e30), efficiency=unit)[0]
        is_att = arr[:, 0] == 3.0
        # the plain roofline (FLOPs at the datasheet peak, bytes at the datasheet bandwidth, no tile
        # or fill/drain model): no kernel can beat it
        ideal = np.maximum(np.array([o.flops for o in ops]) / chip.peak_flops,
                           np.array([o.bytes_read + o.bytes_written for o in ops]) / chip.hbm_bandwidth_Bps)
        fast = np.flatnonzero(sec * ROOFLINE_SLACK < ideal)
        if len(fast):
            raise ValueError(f"calibrate: op row(s) {[int(ops_rows[i]) + 1 for i in fast[:5]]} ran faster than "
                             f"{chip.name}'s ideal roofline allows ({[float(sec[i]) for i in fast[:5]]} s against "
                             f"{[float(ideal[i]) for i in fast[:5]]} s): check the shapes, dtype_bytes and seconds")
        y = np.log(sec)
        prior = np.array([e_t, e_a, e_m, min(max(launch, LAUNCH_BOUNDS_S[0]), LAUNCH_BOUNDS_S[1])])

        def model(x):
            et, ea, em, la = x
            c = compute / np.where(is_att, ea, et)
            return np.log(np.maximum(c, memory / em) + la)

        # only what the rows identify is fitted; the rest keeps the chip's value: a unit's
        # efficiency needs a row bound by it (at the chip's values), the launch time a row short
        # enough for it to matter
        c0 = compute / np.where(is_att, prior[1], prior[0])
        m0 = memory / prior[2]
        free = [bool(np.any(~is_att & (c0 >= m0))), bool(np.any(is_att & (c0 >= m0))), bool(np.any(m0 > c0)),
                bool(np.any(np.maximum(c0, m0) < LAUNCH_MATTERS_S))]
        idx = [i for i, f in enumerate(free) if f]
        lo = np.array([0.01, 0.01, 0.01, LAUNCH_BOUNDS_S[0]])
        hi = np.array([1.0, 1.0, 1.0, LAUNCH_BOUNDS_S[1]])
        x = prior.copy()
        if idx:
            def resid(z):
                xx = prior.copy()
                xx[idx] = z
                return model(xx) - y
            fit = so.least_squares(resid, np.clip(prior[idx], lo[idx], hi[idx]), bounds=(lo[idx], hi[idx]),
                                   x_scale=np.array([0.1, 0.1, 0.1, 1e-6])[idx], xtol=1e-14, ftol=1e-14, gtol=1e-14)
            x[idx] = fit.x
        e_t, e_a, e_m, launch = (float(v) for v in x)
        fitted = tuple(name for name, f in zip(("tensor", "attention", "memory", "launch_s"), free) if f)
        residuals = tuple(float(r) for r in (model(x) - y))
        rms = float(np.sqrt(np.mean(np.square(residuals))))
    eff = replace(chip.efficiency, tensor=e_t, attention=e_a, memory=e_m, launch_s=launch,
                  attention_fa2=min(chip.efficiency.attention_fa2 * fa2_clock, 1.0),
                  sustained_clock=1.0 if datasheet_fractions else e0.sustained_clock,
                  attention_clock=0.0 if datasheet_fractions else e0.attention_clock,
                  attention_clock_fa2=0.0 if datasheet_fractions else e0.attention_clock_fa2,
                  source=(f"calibrated on {len(ops_rows)} measured ops (fitted: {', '.join(fitted) or 'nothing'}; "
                          f"rms log error {rms:.3f}); the rest from: {chip.efficiency.source}"))
    out = {"intra": (None, None), "inter": (None, None)}
    coll_rows = np.flatnonzero(coll)
    if len(coll_rows):
        if cluster is None:
            raise ValueError("calibrate: collective rows need the cluster (for the link bandwidths)")
        kinds = np.array([str(x).strip().lower() for x in cols["collective"][coll_rows]])
        links = np.array([str(x).strip().lower() for x in cols["link"][coll_rows]]) if "link" in cols \
            else np.array(["intra"] * len(coll_rows))
        odd = np.flatnonzero(~np.isin(links, ["intra", "inter"]))
        if len(odd):
            raise ValueError(f"calibrate: collective row(s) {[int(coll_rows[i]) + 1 for i in odd[:5]]} have link "
                             f"{sorted({str(x) for x in links[odd]})}; each must be 'intra' or 'inter'")
        nbytes = _num(cols, "bytes", coll_rows)
        group = _num(cols, "group", coll_rows)
        sec = _num(cols, "seconds", coll_rows)
        _check_seconds(sec, coll_rows, "collective")
        small = np.flatnonzero(group < 2)
        if len(small):
            raise ValueError(f"calibrate: collective row(s) {[int(coll_rows[i]) + 1 for i in small[:5]]} have a "
                             "group of fewer than 2 ranks")
        # ring collectives: f (n-1)/n S on the wire and f (n-1) latencies; an all-to-all sends
        # (n-1)/n S, all exchanges at once (one latency), as cosearch.comm prices them
        factor = {"allreduce": 2.0, "allgather": 1.0, "reducescatter": 1.0, "alltoall": 1.0}
        for link in ("intra", "inter"):
            sel = links == link
            if not sel.any():
                continue
            unknown = sorted(set(kinds[sel]) - set(factor))
            if unknown:
                raise ValueError(f"calibrate: unknown collective(s) {unknown}; choose from {sorted(factor)}")
            f = np.array([factor[x] for x in kinds[sel]])
            nn = group[sel]
            steps = np.where(kinds[sel] == "alltoall", 1.0, f * (nn - 1))
            wire = cluster.link_bandwidth(chip) if link == "intra" else float(cluster.inter_node_Bps or 0)
            if wire <= 0:
                raise ValueError("calibrate: the cluster has no inter-node link for 'inter' rows")
            # t = f (n-1)/n S / (e B) + steps a   -> linear in (1/e, a)
            A = np.stack([f * (nn - 1) / nn * nbytes[sel] / wire, steps], axis=1)
            (inv_e, lat), *_ = np.linalg.lstsq(A, sec[sel], rcond=None)
            if inv_e <= 0:
                raise ValueError(f"calibrate: {link}-node collective times do not grow with size")
            if 1.0 / inv_e > 1.0:
                raise ValueError(f"calibrate: the {link}-node collectives run at {1.0 / inv_e:.3g} of the link's "
                                 f"{wire / 1e9:.0f} GB/s, faster than the wire: check the bytes column (bytes, not "
                                 "elements or bits), the group sizes and the cluster's link bandwidths")
            out[link] = (float(1.0 / inv_e), float(max(lat, 0.0)))
    return Calibration(chip=chip.with_(efficiency=eff), gemm_rows=len(ops_rows), gemm_rms_log_error=rms,
                       fitted=fitted, residuals=residuals,
                       intra_efficiency=out["intra"][0], intra_latency_s=out["intra"][1],
                       inter_efficiency=out["inter"][0], inter_latency_s=out["inter"][1],
                       collective_rows=len(coll_rows))
