"""Client latency profiles, straggler detection and the kept fraction per straggler.

The server records each client's round duration and the kept fraction ``p`` it ran
with, and estimates its full-model time as ``duration / p`` (latency model t(p) = p t(1)).
Stragglers are the slowest client (or the slowest ``fraction`` of clients).  The target
is the slowest non-straggler's full-model time; a straggler gets the smallest allowed
width ``>= target / its full time``.  A new straggler set is adopted only when another
client has become slower, and after a swap the selection is frozen for one round
(hysteresis).
"""

from __future__ import annotations

import math

__all__ = ["StragglerProfiler", "choose_width"]

DEFAULT_WIDTHS = (0.5, 0.65, 0.75, 0.85, 0.95)


def choose_width(ratio: float, widths=DEFAULT_WIDTHS) -> float:
    """Smallest allowed width >= ratio (1.0 if ratio > max width, min width if below all)."""
    ws = sorted(widths)
    if ratio >= 1.0:
        return 1.0
    for w in ws:
        if w >= ratio - 1e-12:
            return w
    return 1.0


class StragglerProfiler:
    def __init__(self, num_clients: int, widths=DEFAULT_WIDTHS, fraction: float | None = None,
                 hysteresis: bool = True):
        if num_clients < 2:
            raise ValueError(f"need at least 2 clients to have stragglers, got {num_clients}")
        for w in widths:
            if not (0.0 < w <= 1.0):
                raise ValueError(f"widths must lie in (0, 1], got {w!r}")
        if fraction is not None and not (0.0 < fraction < 1.0):
            raise ValueError(f"fraction must be in (0, 1), got {fraction!r}")
        self.n, self.widths, self.fraction, self.hysteresis = num_clients, tuple(widths), fraction, hysteresis
        self.full_time: dict[int, float] = {}
        self.stragglers: list[int] = []
        self._frozen = 0

    def observe(self, durations: dict[int, float], p_used: dict[int, float]) -> None:
        for c, d in durations.items():
            if not (d > 0 and math.isfinite(d)):
                raise ValueError(f"client {c} reported a non-positive round time {d!r}")
            self.full_time[c] = d / p_used.get(c, 1.0)

    def _count(self) -> int:
        return 1 if self.fraction is None else max(1, int(round(self.fraction * self.n)))

    def plan(self) -> dict[int, float]:
        """Kept fraction per client for the next round (1.0 for non-stragglers)."""
        if len(self.full_time) < self.n:
            return {c: 1.0 for c in range(self.n)}
        ranked = sorted(self.full_time, key=lambda c: -self.full_time[c])
        k = min(self._count(), self.n - 1)
        candidate = ranked[:k]
        if not self.stragglers:
            self.stragglers = candidate
        elif set(candidate) != set(self.stragglers):
            if self._frozen > 0:
                self._frozen -= 1
            else:
                slowest_current = min(self.full_time[c] for c in self.stragglers)
                if any(self.full_time[c] > slowest_current for c in candidate if c not in self.stragglers):
                    self.stragglers = candidate
                    self._frozen = 1 if self.hysteresis else 0
        else:
            self._frozen = max(0, self._frozen - 1)
        others = [c for c in range(self.n) if c not in self.stragglers]
        target = max(self.full_time[c] for c in others)
        out = {c: 1.0 for c in range(self.n)}
        for c in self.stragglers:
            out[c] = choose_width(target / self.full_time[c], self.widths)
        return out
