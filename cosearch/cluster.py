"""Training clusters: chips grouped into nodes, with intra- and inter-node links.

A :class:`Cluster` is ``num_chips`` identical chips.  With ``chips_per_node`` set, the
chips form nodes joined by a fast intra-node fabric (NVLink/NVSwitch) and a slower
inter-node network (InfiniBand/RoCE); each collective is priced where its group lives
(:mod:`cosearch.comm`).  Bandwidths are **per chip and per direction**, multiplied by an
achievable fraction per link type (what NCCL-style collectives reach of the wire rate).
``Cluster(n)`` alone is one flat domain that uses the chip's own link bandwidth.

Ranks are laid out as Megatron-LM lays them out: tensor-parallel ranks are adjacent,
then data-parallel, then pipeline-parallel.  A group of ``n`` ranks ``stride`` apart
holds ``min(n, chips_per_node // stride)`` members per node (1 when ``stride`` is a
node or more).

Presets (:func:`preset`):

* ``dgx-a100``: 8 x A100-80GB per node, NVSwitch at 300 GB/s per GPU per direction
  (NVLink 3: 12 links x 25 GB/s), 8 x 200 Gb/s HDR InfiniBand per node (25 GB/s per GPU).
  Achievable fractions: NVLink 0.70 — nccl-tests ``all_reduce_perf`` bus bandwidth of
  about 200-230 GB/s on 8 x A100 SXM4 (NVIDIA/nccl-tests issues #149, #100); InfiniBand
  0.90 — about 85-96 GB/s bus bandwidth of a 100 GB/s (4 x HDR per 8 GPUs) node share
  (nccl-tests issue #119).
* ``dgx-h100``: 8 x H100 SXM5 per node, NVSwitch at 450 GB/s per GPU per direction
  (NVLink 4: 18 links x 25 GB/s), 8 x 400 Gb/s NDR per node (50 GB/s per GPU).
  Achievable: NVLink 0.80 — ring all-reduce bus bandwidth of about 360-370 GB/s on
  8 x H100 (NVIDIA/nccl issue #1374); InfiniBand 0.90 as for HDR.
* ``tpuv4-pod``: a 3D torus of TPU v4 chips with 6 ICI links of 50 GB/s each
  (Jouppi et al., ISCA 2023).  A collective over a group that spans ``d`` torus
  dimensions runs bidirectional rings on ``2 d`` links; no published collective
  benchmark was found, so the achievable fraction is 0.90 as for InfiniBand (assumed).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from . import _validate as v

if TYPE_CHECKING:  # pragma: no cover
    from .hardware import Accelerator

__all__ = ["Cluster", "as_cluster", "preset", "preset_names", "PRESETS", "PRESET_CHIPS", "NET_FIELDS"]

#: Column order of :meth:`Cluster.net_array` (read by the njit formulas).
NET_FIELDS = ("chips_per_node", "intra_Bps", "inter_Bps", "intra_latency_s", "inter_latency_s",
              "torus_side")


@dataclass(frozen=True)
class Cluster:
    """``num_chips`` chips, optionally in nodes of ``chips_per_node``.

    Parameters
    ----------
    num_chips: chips in the cluster (a plan may leave some idle; MFU counts all).
    chips_per_node: chips per node, or None for one flat domain.  Must divide ``num_chips``.
    intra_node_Bps: per-chip, per-direction bandwidth inside a node (None: the chip's link).
    inter_node_Bps: per-chip, per-direction bandwidth between nodes (needed with nodes).
    link_latency_s: per-message latency inside a node (and of the flat domain).
    inter_latency_s: per-message latency between nodes (None: ``link_latency_s``).
    intra_efficiency / inter_efficiency: achievable fraction of each link's bandwidth.
    torus_side: for a torus (TPU pods): chips along one torus dimension; a group spanning
        ``d`` dimensions gets ``2 d`` links of ``intra_node_Bps`` each.  0: switched fabric.
    name: label for reports.
    """

    num_chips: int
    chips_per_node: int | None = None
    intra_node_Bps: float | None = None
    inter_node_Bps: float | None = None
    link_latency_s: float = 1e-6
    inter_latency_s: float | None = None
    intra_efficiency: float = 1.0
    inter_efficiency: float = 1.0
    torus_side: int = 0
    name: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "num_chips", v.positive_int("Cluster.num_chips", self.num_chips,
                                                            maximum=v.MAX_CHIPS))
        if self.chips_per_node is not None:
            cpn = v.positive_int("Cluster.chips_per_node", self.chips_per_node)
            if self.num_chips % cpn:
                raise ValueError(f"Cluster.chips_per_node={cpn} does not tile num_chips={self.num_chips}: "
                                 "the chips must fill whole nodes")
            object.__setattr__(self, "chips_per_node", cpn)
            if self.inter_node_Bps is None and cpn < self.num_chips:
                raise ValueError("Cluster.inter_node_Bps is needed when the chips span several nodes")
        for f in ("intra_node_Bps", "inter_node_Bps"):
            if getattr(self, f) is not None:
                object.__setattr__(self, f, v.bandwidth(f"Cluster.{f}", getattr(self, f)))
        if self.link_latency_s is None:
            raise ValueError("Cluster.link_latency_s must be a number of seconds (only inter_latency_s may be "
                             "left out: it is then link_latency_s)")
        for f in ("link_latency_s", "inter_latency_s"):
            if getattr(self, f) is not None and v.nonneg_float(f"Cluster.{f}", getattr(self, f)) > 1.0:
                raise ValueError(f"Cluster.{f}={getattr(self, f)!r} s: a per-message latency over 1 s is not a "
                                 "network's (seconds, not microseconds?)")
        for f in ("intra_efficiency", "inter_efficiency"):
            v.fraction(f"Cluster.{f}", getattr(self, f))
        t = self.torus_side
        whole = (isinstance(t, (int, np.integer)) and not isinstance(t, bool)) or (
            isinstance(t, float) and t.is_integer())
        # a ring of one chip has no link (and log(side) divides a group's span in the torus formulas)
        if not whole or not (t == 0 or 2 <= t <= v.MAX_CHIPS):
            raise ValueError("Cluster.torus_side must be 0 (a switched fabric) or a whole number of at least 2 "
                             f"chips along a torus dimension, got {t!r}")
        object.__setattr__(self, "torus_side", int(t))

    # ------------------------------------------------------------------ derived
    @property
    def flat(self) -> bool:
        return self.chips_per_node is None or self.chips_per_node >= self.num_chips

    @property
    def nodes(self) -> int:
        return 1 if self.flat else self.num_chips // self.chips_per_node

    def intra_Bps(self, chip: Accelerator) -> float:
        """Achievable per-chip, per-direction bandwidth inside a node."""
        return float(self.intra_node_Bps or chip.link_bandwidth_Bps) * self.intra_efficiency

    def inter_Bps(self, chip: Accelerator) -> float:
        """Achievable per-chip, per-direction bandwidth between nodes."""
        if self.flat:
            return self.intra_Bps(chip)
        return float(self.inter_node_Bps) * self.inter_efficiency

    def link_bandwidth(self, chip: Accelerator) -> float:
        """Wire bandwidth of the flat domain / intra-node link (before efficiency)."""
        return float(self.intra_node_Bps or chip.link_bandwidth_Bps)

    def net_array(self, chip: Accelerator) -> np.ndarray:
        """The cluster as a :data:`NET_FIELDS` row for the njit collective formulas."""
        return np.array([0.0 if self.flat else float(self.chips_per_node), self.intra_Bps(chip),
                         self.inter_Bps(chip), float(self.link_latency_s),
                         float(self.inter_latency_s if self.inter_latency_s is not None else self.link_latency_s),
                         float(self.torus_side)], dtype=np.float64)

    def with_(self, **changes: Any) -> Cluster:
        from dataclasses import replace
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Cluster:
        """A cluster from :meth:`to_dict`'s fields (a cluster JSON file); an unknown field is
        refused by name and every value validated."""
        from dataclasses import fields
        if not isinstance(d, dict):
            raise ValueError(f"a cluster description must be an object, got {type(d).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"cluster: unknown field(s) {unknown}; known: {sorted(known)}")
        if "num_chips" not in d:
            raise ValueError("cluster: missing field 'num_chips'")
        return cls(**d)

    @classmethod
    def from_json(cls, path) -> Cluster:
        """A cluster from a JSON file of :meth:`to_dict`'s fields."""
        from ._json import read_json_file
        return cls.from_dict(read_json_file(path, "cluster"))

    def describe(self) -> str:
        if self.flat:
            return f"{self.num_chips} chips, one flat domain"
        intra = "the chip's link" if self.intra_node_Bps is None else f"{self.intra_node_Bps / 1e9:.0f} GB/s"
        return (f"{self.nodes} nodes x {self.chips_per_node} chips, intra {intra}"
                f" x {self.intra_efficiency:.2f}, inter {self.inter_node_Bps / 1e9:.1f} GB/s"
                f" x {self.inter_efficiency:.2f} per chip per direction")


def as_cluster(cluster: Cluster | int) -> Cluster:
    """``cluster`` itself, or a flat cluster of that many chips (a whole number; 3.5 or "x" is
    refused naming ``cluster``, not truncated)."""
    if isinstance(cluster, Cluster):
        return cluster
    return Cluster(v.positive_int("cluster (a Cluster or a number of chips)", cluster, v.MAX_CHIPS))


def dgx_a100(nodes: int) -> Cluster:
    """``nodes`` DGX A100 (8 x A100-80GB, NVSwitch, 8 x HDR 200 Gb/s InfiniBand)."""
    n = v.positive_int("nodes", nodes, maximum=v.MAX_CHIPS // 8)
    return Cluster(8 * n, 8, 300e9, 25e9, link_latency_s=3e-6, inter_latency_s=6e-6,
                   intra_efficiency=0.70, inter_efficiency=0.90, name=f"dgx-a100 x{n}")


def dgx_h100(nodes: int) -> Cluster:
    """``nodes`` DGX H100 (8 x H100 SXM5, NVSwitch, 8 x NDR 400 Gb/s InfiniBand)."""
    n = v.positive_int("nodes", nodes, maximum=v.MAX_CHIPS // 8)
    return Cluster(8 * n, 8, 450e9, 50e9, link_latency_s=3e-6, inter_latency_s=6e-6,
                   intra_efficiency=0.80, inter_efficiency=0.90, name=f"dgx-h100 x{n}")


def dgx_h800(nodes: int) -> Cluster:
    """``nodes`` H800 servers: 8 x H800 SXM on NVSwitch at 200 GB/s per GPU per direction (400 GB/s
    NVLink, NVIDIA H800 datasheet), 400 Gb/s InfiniBand per GPU (50 GB/s; DeepSeek-V3 technical
    report sec. 3.2, its H800 cluster); achievable fractions as :func:`dgx_h100`'s."""
    return dgx_h100(nodes).with_(intra_node_Bps=200e9, name=f"dgx-h800 x{nodes}")


def tpuv4_pod(chips: int = 4096) -> Cluster:
    """A TPU v4 slice of ``chips`` chips as a 3D torus (side = cube root, rounded up)."""
    n = v.positive_int("chips", chips, maximum=v.MAX_CHIPS)
    side = max(2, math.ceil(round(n ** (1.0 / 3.0), 9)))
    return Cluster(n, None, 50e9, None, link_latency_s=2e-6, intra_efficiency=0.90, torus_side=side,
                   name=f"tpuv4-pod {n}")


def dgx_h200(nodes: int) -> Cluster:
    """``nodes`` DGX H200 (8 x H200 SXM, the DGX H100's NVSwitch and NDR fabric)."""
    return dgx_h100(nodes).with_(name=f"dgx-h200 x{nodes}")


def dgx_b200(nodes: int) -> Cluster:
    """``nodes`` DGX B200: 8 x B200, NVLink 5 at 900 GB/s per GPU per direction, 8 x 400 Gb/s
    ConnectX-7 per node (50 GB/s per GPU) (NVIDIA DGX B200 datasheet).  Achievable NVLink
    fraction 0.80 as on DGX H100, which NCCL's own topology model gives Blackwell too: it prices
    an SM100 NVLink at 40.1 GB/s, 18 links 721.8 GB/s of 900 (``SM100_NVLINK_BW``,
    ``src/graph/topo.h``, NCCL 2.27; NVIDIA/nccl issue #1807, whose 8 x B200 log shows ``maxBw
    721.8`` for its rings and 830+ GB/s all-reduce bus bandwidth, which NVLink SHARP reaches and
    the ring collectives of tensor parallelism do not); InfiniBand 0.90 as on DGX H100."""
    n = v.positive_int("nodes", nodes, maximum=v.MAX_CHIPS // 8)
    return Cluster(8 * n, 8, 900e9, 50e9, link_latency_s=3e-6, inter_latency_s=6e-6,
                   intra_efficiency=0.80, inter_efficiency=0.90, name=f"dgx-b200 x{n}")


def dgx_b300(nodes: int) -> Cluster:
    """``nodes`` DGX B300: 8 x B300, NVLink 5 at 900 GB/s per GPU per direction, 8 x 800 Gb/s
    ConnectX-8 per node (100 GB/s per GPU) (NVIDIA DGX B300 specifications); achievable fractions
    as :func:`dgx_b200`'s (the same NVLink 5 and NCCL topology model)."""
    n = v.positive_int("nodes", nodes, maximum=v.MAX_CHIPS // 8)
    return dgx_b200(n).with_(inter_node_Bps=100e9, name=f"dgx-b300 x{n}")


def gb200_nvl72(chips: int) -> Cluster:
    """``chips`` GB200 GPUs in NVL72 racks: one rack is one 72-GPU NVLink 5 domain (900 GB/s per
    GPU per direction), racks joined by 400 Gb/s per GPU (50 GB/s) (NVIDIA GB200 NVL72
    specifications); achievable fractions as :func:`dgx_b200`'s.  Jobs of a multiple of 64 GPUs use 64 GPUs per rack (power-of-two groups, as
    published runs of 64/128/256 GPUs do); other counts must fill whole 72-GPU racks."""
    n = v.positive_int("chips", chips, maximum=v.MAX_CHIPS)
    if n <= 72:
        per = n
    elif n % 64 == 0:
        per = 64
    elif n % 72 == 0:
        per = 72
    else:
        raise ValueError(f"gb200-nvl72: {n} GPUs are neither whole 72-GPU racks nor a multiple of 64 GPUs "
                         "(64 per rack); choose a multiple of 64 or 72, or build a Cluster by hand")
    return Cluster(n, per, 900e9, 50e9, link_latency_s=3e-6, inter_latency_s=6e-6,
                   intra_efficiency=0.80, inter_efficiency=0.90, name=f"gb200-nvl72 {n}")


def _tpu_slices(chips: int, slice_chips: int, side: int, link_Bps: float, dcn_Bps: float, name: str) -> Cluster:
    n = v.positive_int("chips", chips, maximum=v.MAX_CHIPS)
    if n <= slice_chips:
        return Cluster(n, None, link_Bps, None, link_latency_s=2e-6, intra_efficiency=0.90,
                       torus_side=min(side, max(2, math.ceil(round(n ** 0.5, 9)))) if side else 0,
                       name=f"{name} {n}")
    if n % slice_chips:
        raise ValueError(f"{name}: {n} chips are not whole slices of {slice_chips}")
    return Cluster(n, slice_chips, link_Bps, dcn_Bps, link_latency_s=2e-6, inter_latency_s=1e-5,
                   intra_efficiency=0.90, inter_efficiency=0.90, torus_side=side, name=f"{name} {n}")


def tpuv5e_pod(chips: int = 256) -> Cluster:
    """TPU v5e: slices of up to 256 chips on a 16 x 16 2D torus of 50 GB/s ICI links; more chips
    are whole 256-chip slices joined over the data-center network (multislice) at 3.125 GB/s per
    chip: 2 x 100 Gb/s NICs per 8-chip host, 6.4 Tb/s per 256-chip pod (Google Cloud TPU v5e
    documentation, its specification table)."""
    return _tpu_slices(chips, 256, 16, 50e9, 3.125e9, "tpuv5e-pod")


def tpuv6e_pod(chips: int = 256) -> Cluster:
    """TPU v6e (Trillium): one slice of up to 256 chips on a 16 x 16 2D torus of 100 GB/s ICI links
    (800 GB/s bidirectional per chip over 4 ports, Google Cloud's TPU v6e page).  Multislice is
    refused: the page gives no data-center network bandwidth for v6e."""
    n = v.positive_int("chips", chips, maximum=v.MAX_CHIPS)
    if n > 256:
        raise ValueError(f"tpuv6e-pod: {n} chips is more than one 256-chip slice; Google's v6e page gives no "
                         "data-center network bandwidth for multislice: build a Cluster with your own")
    return _tpu_slices(n, 256, 16, 100e9, 0.0, "tpuv6e-pod")


def tpuv5p_pod(chips: int = 8960) -> Cluster:
    """TPU v5p: one slice of up to 8,960 chips on a 3D torus of 100 GB/s ICI links (side: the
    cube root, rounded up), as :func:`tpuv4_pod` prices TPU v4."""
    n = v.positive_int("chips", chips, maximum=v.MAX_CHIPS)
    side = max(2, math.ceil(round(n ** (1.0 / 3.0), 9)))
    return Cluster(n, None, 100e9, None, link_latency_s=2e-6, intra_efficiency=0.90, torus_side=side,
                   name=f"tpuv5p-pod {n}")


def tpu7x_pod(chips: int = 9216) -> Cluster:
    """TPU7x (Ironwood): one slice of up to 9,216 chips on a 3D torus of 100 GB/s ICI links
    (1,200 GB/s bidirectional per chip over 6 links, Google Cloud's TPU7x page), priced as
    :func:`tpuv5p_pod`."""
    n = v.positive_int("chips", chips, maximum=v.MAX_CHIPS)
    return tpuv5p_pod(n).with_(name=f"tpu7x-pod {n}")


PRESETS = {"dgx-a100": dgx_a100, "dgx-h100": dgx_h100, "dgx-h200": dgx_h200, "dgx-b200": dgx_b200, "dgx-b300": dgx_b300,
           "dgx-h800": dgx_h800, "gb200-nvl72": gb200_nvl72, "tpuv4-pod": tpuv4_pod, "tpuv5e-pod": tpuv5e_pod,
           "tpuv5p-pod": tpuv5p_pod, "tpuv6e-pod": tpuv6e_pod, "tpu7x-pod": tpu7x_pod}

#: The chip each cluster preset is built of (a cluster preset implies its chip).
PRESET_CHIPS = {"dgx-a100": "A100-80GB", "dgx-h100": "H100", "dgx-h200": "H200", "dgx-b200": "B200", "dgx-b300": "B300", "dgx-h800": "H800",
                "tpu7x-pod": "TPU7x",
                "gb200-nvl72": "GB200", "tpuv4-pod": "TPUv4", "tpuv5e-pod": "TPUv5e", "tpuv5p-pod": "TPUv5p",
                "tpuv6e-pod": "TPUv6e"}


def preset_names() -> list[str]:
    return sorted(PRESETS)


def preset(name: str, size: int) -> Cluster:
    """Cluster preset: the ``dgx-*`` presets take a node count; ``gb200-nvl72`` and the ``tpu*-pod``
    presets a chip count."""
    key = str(name).lower().replace("_", "-")
    if key not in PRESETS:
        raise ValueError(f"unknown cluster preset {name!r}; known presets: {', '.join(preset_names())}")
    return PRESETS[key](size)
