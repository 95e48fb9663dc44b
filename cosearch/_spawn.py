"""Whether a spawn-method process pool can start here.

A spawned worker imports the parent's ``__main__`` script again as ``__mp_main__``.  A script
that calls cosearch at its top level without an ``if __name__ == "__main__":`` guard then runs
the whole job again in every worker, and each of those starts workers of its own.  Before any
pool starts, :func:`spawn_problem` says why one would not work — the calling process is itself
a spawned worker, or the main script has no guard — so the caller can run in-process instead
with a one-line warning (README's examples then work when pasted into a plain script).
"""

from __future__ import annotations

import multiprocessing as mp
import re
import sys

__all__ = ["spawn_problem"]

_GUARD = re.compile(r"""__name__\s*==\s*['"]__main__['"]""")


def spawn_problem() -> str | None:
    """None when a spawn pool may start; else the reason it must not."""
    if mp.parent_process() is not None:
        return "this is already a worker process (a pool inside a pool's worker is not started)"
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if not path or getattr(main, "__spec__", None) is not None:
        return None              # interactive, -c, or `python -m pkg`: nothing is re-run
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            source = fh.read()
    except OSError:
        return None
    if _GUARD.search(source):
        return None
    return (f"{path} calls cosearch without an `if __name__ == \"__main__\":` guard, so every worker process "
            "would run the script again; running in-process (add the guard to use several processes)")
