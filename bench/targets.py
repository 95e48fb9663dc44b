"""Targets the benchmarks print, checked: each :func:`check` records whether a measured figure
met its target; ``bench/conftest.py`` prints every miss as a ``FAILED target`` line at the end
of the run and makes the run fail, so a benchmark never passes while its figure misses."""

from __future__ import annotations

import math

#: (bench, what, value, target text, met) of every check in this run.
RESULTS: list[tuple[str, str, float, str, bool]] = []


def check(bench: str, what: str, value: float, *, at_most: float | None = None,
          at_least: float | None = None) -> bool:
    """Record ``value`` against ``<= at_most`` and/or ``>= at_least``; returns whether it met them
    (a NaN never meets a target)."""
    ok = not math.isnan(value)
    parts = []
    if at_most is not None:
        ok = ok and value <= at_most
        parts.append(f"<= {at_most:g}")
    if at_least is not None:
        ok = ok and value >= at_least
        parts.append(f">= {at_least:g}")
    RESULTS.append((bench, what, float(value), " and ".join(parts), bool(ok)))
    return ok
