"""Collective and point-to-point times on a cluster's hierarchy.

The formulas (hierarchical ring all-reduce, reduce-scatter / all-gather at half of it,
point-to-point, torus rings) are documented in and live only in
:mod:`cosearch._kernels.formulas`; these are the Python entry points.  A group is
``n`` ranks ``stride`` apart in Megatron's rank order (tensor-parallel ranks adjacent:
stride 1; data-parallel stride ``tp``; pipeline stride ``tp * dp``).
"""

from __future__ import annotations

from ._kernels import formulas
from .cluster import Cluster
from .hardware import Accelerator

__all__ = ["collective_s", "p2p_s", "COLLECTIVES"]

COLLECTIVES = ("allreduce", "allgather", "reducescatter", "alltoall")


def _check(nbytes: float, n: int, stride: int) -> None:
    if not (nbytes >= 0):
        raise ValueError(f"nbytes must be >= 0, got {nbytes!r}")
    if int(n) != n or n < 1:
        raise ValueError(f"number of ranks must be a positive integer, got {n!r}")
    if int(stride) != stride or stride < 1:
        raise ValueError(f"stride must be a positive integer, got {stride!r}")


def collective_s(kind: str, nbytes: float, n: int, cluster: Cluster, chip: Accelerator,
                 stride: int = 1) -> float:
    """Seconds for collective ``kind`` of ``nbytes`` (the full buffer; for an all-to-all, what
    each rank holds) over ``n`` ranks."""
    _check(nbytes, n, stride)
    net = cluster.net_array(chip)
    if kind == "allreduce":
        return float(formulas.allreduce_s(float(nbytes), float(n), float(stride), net))
    if kind in ("allgather", "reducescatter"):
        return float(formulas.allgather_s(float(nbytes), float(n), float(stride), net))
    if kind == "alltoall":
        return float(formulas.alltoall_s(float(nbytes), float(n), float(stride), net))
    raise ValueError(f"unknown collective {kind!r}; choose one of {COLLECTIVES}")


def p2p_s(nbytes: float, cluster: Cluster, chip: Accelerator, stride: int = 1) -> float:
    """Seconds to send ``nbytes`` to the rank ``stride`` away."""
    _check(nbytes, 1, stride)
    return float(formulas.p2p_s(float(nbytes), float(stride), cluster.net_array(chip)))
