"""Per-layer operator scheduling on one accelerator: an ILP (CVXPY + HiGHS), a
critical-path list scheduler and lower bounds (PHAZE's formulation, Wang et al. ICML 2024).

One idea per module:

* :mod:`.problem` — the instance: ops, modes (a unit and all or one of its cores), slots,
  latencies from the roofline and HBM-bandwidth shares (:class:`Problem`,
  :func:`make_problem`, :func:`scheduling_prices`);
* :mod:`.bounds` — valid lower bounds (:func:`lower_bound`, and :func:`work_bounds` /
  :func:`layer_bounds` vectorised over designs for the co-search);
* :mod:`.heuristics` — the serial and list schedules (upper bound, warm start, fallback);
* :mod:`.ilp` — the exact disjunctive MILP (:func:`solve_ilp`, :class:`ILPResult`);
* :mod:`.cache` — the cached entry point :func:`layer_time`.

Every public name is re-exported here, so ``from cosearch import schedule;
schedule.layer_time(...)`` is unchanged.
"""

from .bounds import layer_bounds, lower_bound, work_bounds
from .cache import cache_info, clear_cache, layer_time
from .heuristics import is_chain, list_schedule, serial_schedule
from .ilp import ILPResult, solve_ilp
from .problem import (
    MODE_NAMES,
    MODES,
    SLOTS,
    Problem,
    ScheduleResult,
    make_problem,
    max_antichain,
    scheduling_prices,
)

__all__ = ["ScheduleResult", "ILPResult", "Problem", "layer_time", "list_schedule", "lower_bound", "solve_ilp",
           "make_problem", "scheduling_prices", "cache_info", "clear_cache", "SLOTS", "MODES", "MODE_NAMES",
           "is_chain", "max_antichain", "layer_bounds", "work_bounds", "serial_schedule"]
