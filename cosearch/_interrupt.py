"""Interrupts that never lose work: SIGTERM delivered like Ctrl-C, and pools stopped for good.

:func:`terminate_as_interrupt` makes SIGTERM raise :class:`Terminated` (a ``KeyboardInterrupt``),
so every phase's Ctrl-C path — save what is finished, mark it interrupted — also serves SIGTERM;
the command line then exits 143 instead of 130.  :func:`stop_pool` shuts a
``ProcessPoolExecutor`` down without waiting and terminates its worker processes.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager

__all__ = ["Terminated", "terminate_as_interrupt", "stop_pool", "exit_code", "worker_deaths"]


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
