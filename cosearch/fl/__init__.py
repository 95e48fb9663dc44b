"""Federated learning with Invariant Dropout (after FLuID, NeurIPS 2023).

The method: :class:`InvariantDropout` (FLuID's threshold calibration, growth schedule
(:class:`ThresholdSchedule`) and drop order; ``threshold="adaptive"`` keeps cosearch 0.1's
rule) and the baselines :class:`OrderedDropout` (FjORD's ordered masks), :class:`RandomDropout`,
:class:`NoDropout`, :class:`FjORD` (per-batch nested widths up to the client's tier),
:class:`FjORDDistill` (the same with self-distillation), :class:`HeteroFL` (static width tiers) and
:class:`FIARSE` (importance-aware parameter masks, :mod:`cosearch.fl.fiarse`), all one
:class:`DropoutPolicy` interface (:func:`policy` by name).  Stragglers'
keep fractions come from :class:`StragglerProfiler` — by default the model-based controller of
:mod:`cosearch.fl.controller`, FLuID's buckets as ``keep_rule="fluid"``.
Stragglers and keep fractions: :class:`StragglerProfiler` (FLuID's buckets,
:func:`fluid_keep_fraction`); devices and round times: :class:`ClientProfile`,
:class:`TraceProfile`, :func:`training_flops`.

One round protocol (:class:`RoundProtocol` in :mod:`cosearch.fl.server`) drives both the
in-process :func:`simulate` and the Flower strategy (:mod:`cosearch.fl.flower`);
:func:`run_experiment` runs paired multi-seed comparisons with statistics.
Sub-models: :func:`extract_submodel`, :func:`merge_updates`, :func:`groups`.  Datasets in
:mod:`cosearch.fl.data`, FLuID's models in :mod:`cosearch.fl.models`.
torch is imported only when a function needs it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .masks import (
    FIARSE,
    METHODS,
    DropoutPolicy,
    FjORD,
    FjORDDistill,
    HeteroFL,
    InvariantDropout,
    NoDropout,
    OrderedDropout,
    RandomDropout,
    ThresholdSchedule,
    drop_count,
    policy,
)
from .profiling import (
    ClientProfile,
    StragglerProfiler,
    TraceProfile,
    choose_width,
    device_profiles,
    fluid_keep_fraction,
    training_flops,
)
from .submodel import extract_submodel, groups, merge_updates

if TYPE_CHECKING:  # pragma: no cover
    from .experiment import Experiment
    from .simulation import FLResult


def simulate(*args: Any, **kwargs: Any) -> FLResult:
    """See :func:`cosearch.fl.simulation.simulate`."""
    from .simulation import simulate as _sim
    return _sim(*args, **kwargs)


def run_experiment(*args: Any, **kwargs: Any) -> Experiment:
    """See :func:`cosearch.fl.experiment.run_experiment`."""
    from .experiment import run_experiment as _run
    return _run(*args, **kwargs)


def __getattr__(name):
    if name in ("RoundProtocol", "Assignment", "ClientUpdate", "RoundReport"):
        from . import server
        return getattr(server, name)
    raise AttributeError(f"module 'cosearch.fl' has no attribute {name!r}")


__all__ = ["DropoutPolicy", "InvariantDropout", "OrderedDropout", "RandomDropout", "NoDropout", "FjORD", "FjORDDistill", "HeteroFL",
           "FIARSE",
           "policy",
           "METHODS", "ThresholdSchedule", "drop_count", "StragglerProfiler", "fluid_keep_fraction",
           "choose_width", "ClientProfile", "TraceProfile", "device_profiles", "training_flops",
           "extract_submodel", "merge_updates", "groups", "simulate", "run_experiment", "RoundProtocol",
           "Assignment", "ClientUpdate", "RoundReport"]
