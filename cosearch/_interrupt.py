"""Interrupts that never lose work: SIGTERM delivered like Ctrl-C, and pools stopped for good.

:func:`terminate_as_interrupt` makes SIGTERM raise :class:`Terminated` (a ``KeyboardInterrupt``),
so every phase's Ctrl-C path — save what is finished, mark it interrupted — also serves SIGTERM;
the command line then exits 143 instead of 130.  :class:`deferred_interrupts` holds the first
Ctrl-C or SIGTERM until a write that must finish has finished.  :func:`stop_pool` shuts a
``ProcessPoolExecutor`` down without waiting and terminates its worker processes.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Any

__all__ = ["Terminated", "terminate_as_interrupt", "deferred_interrupts", "stop_pool", "exit_code", "worker_deaths"]


class Terminated(KeyboardInterrupt):
    """The process received SIGTERM."""


@contextmanager
def terminate_as_interrupt():
    """Within the block, SIGTERM raises :class:`Terminated` (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise Terminated()

    old = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


class deferred_interrupts:
    """Within the block, the first SIGINT or SIGTERM is held and delivered when the block ends
    (its handler then raises as it would have, from the ``with`` statement); a second one is
    delivered at once, so a write that hangs can still be stopped.  For saves that must not be
    cut short: a result half replaced, or a checkpoint journal left where plain JSON belongs.

    Only signals whose handler is a Python function (``KeyboardInterrupt``'s, or
    :func:`terminate_as_interrupt`'s) are held; an ignored or default one is left as it is.
    Outside the main thread the block runs unchanged.  ``deliver=False`` drops the held signal
    instead (for a caller already stopping because of an earlier one)."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, deliver: bool = True) -> None:
        self.deliver = deliver
        self.held: list[int] = []
        self._handlers: dict[int, Any] = {}       # the handlers replaced, restored at the end

    def __enter__(self) -> deferred_interrupts:
        if threading.current_thread() is threading.main_thread():
            for s in self.SIGNALS:
                old = signal.getsignal(s)
                if callable(old):
                    self._handlers[s] = old
                    signal.signal(s, self._hold)
        return self

    def _hold(self, signum: int, frame) -> None:
        self.held.append(signum)
        if len(self.held) > 1:                    # asked twice: stop now
            self._restore()
            self._handlers[signum](signum, frame)

    def _restore(self) -> None:
        for s, h in self._handlers.items():
            if signal.getsignal(s) == self._hold:
                signal.signal(s, h)

    def __exit__(self, exc_type, exc, tb) -> None:
        self._restore()
        if self.held and self.deliver and exc_type is None:
            self._handlers[self.held[0]](self.held[0], None)


def exit_code(exc: BaseException | None) -> int:
    """130 after Ctrl-C, 143 after SIGTERM (the shell's 128 + signal number)."""
    return 143 if isinstance(exc, Terminated) else 130


def stop_pool(pool, wait: bool = False) -> None:
    """Shut ``pool`` down, cancel queued work and terminate its worker processes."""
    procs = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=wait, cancel_futures=True)
    for p in procs:
        if p.is_alive():
            p.terminate()
    for p in procs:
        p.join(timeout=10)


def worker_deaths(pool) -> str:
    """How a broken pool's workers ended, from their exit codes (``"killed by SIGKILL, as the
    out-of-memory killer does"``), or that it is not known."""
    import signal as _signal
    codes = sorted({p.exitcode for p in (getattr(pool, "_processes", None) or {}).values()
                    if p.exitcode not in (None, 0)})
    if not codes:
        return "how they ended is not known"
    out = []
    for c in codes:
        if c < 0:
            try:
                name = _signal.Signals(-c).name
            except ValueError:
                name = f"signal {-c}"
            out.append(f"killed by {name}" + (", as the out-of-memory killer does" if -c == _signal.SIGKILL else ""))
        else:
            out.append(f"exited with status {c}")
    return "; ".join(out)
