"""Federated learning with Invariant Dropout (after FLuID, NeurIPS 2023).

API: :class:`InvariantDropout`, :class:`OrderedDropout`, :class:`RandomDropout`,
:class:`NoDropout` (one :class:`DropoutPolicy` interface); :func:`extract_submodel`,
:func:`merge_updates`, :func:`groups`; :class:`StragglerProfiler`; :func:`simulate`;
datasets in :mod:`cosearch.fl.data`; models in :mod:`cosearch.fl.models`.
torch is imported only when a function needs it.
"""

from .masks import DropoutPolicy, InvariantDropout, NoDropout, OrderedDropout, RandomDropout, policy
from .profiling import StragglerProfiler, choose_width
from .submodel import extract_submodel, groups, merge_updates


def simulate(*args, **kwargs):
    from .simulation import simulate as _sim
    return _sim(*args, **kwargs)


__all__ = ["DropoutPolicy", "InvariantDropout", "OrderedDropout", "RandomDropout", "NoDropout", "policy",
           "StragglerProfiler", "choose_width", "extract_submodel", "merge_updates", "groups", "simulate"]
