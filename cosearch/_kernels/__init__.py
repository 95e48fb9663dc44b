"""Numba kernels: plain NumPy arrays and scalars in, plain arrays out.

Numba's on-disk cache (``cache=True``) keys each compiled function on its own module's source
file only: a kernel in :mod:`.dp` that calls :func:`.formulas.stage_terms` keeps its cached
machine code, with the old formula inlined, after ``formulas.py`` changes — a silently wrong
number, not an error.  So on import the cache of this package is dropped whenever any of its
sources changed (:func:`drop_stale_cache`): one hash of the kernel sources, kept beside the
cache as ``kernels.stamp``.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

#: The file beside numba's cache that records the kernel sources it was compiled from.
STAMP = "kernels.stamp"


def sources_digest(folder: Path | None = None) -> str:
    """SHA-256 over the names and contents of the kernel package's ``.py`` files."""
    here = Path(folder) if folder is not None else Path(__file__).resolve().parent
    h = hashlib.sha256()
    for f in sorted(here.glob("*.py")):
        h.update(f.name.encode())
        h.update(f.read_bytes())
    return h.hexdigest()


def drop_stale_cache(folder: Path | None = None) -> bool:
    """Remove numba's cached kernels (``__pycache__/*.nbi``, ``*.nbc``) of the kernel package
    when its sources differ from those the cache was made from; returns whether it did.  A
    read-only install (nothing can be removed or written) is left as it is: numba then compiles
    in memory.  With ``NUMBA_CACHE_DIR`` set, numba keeps its cache elsewhere and this does not
    reach it."""
    here = Path(folder) if folder is not None else Path(__file__).resolve().parent
    cache = here / "__pycache__"
    digest = sources_digest(here)
    stamp = cache / STAMP
    try:
        if stamp.read_text() == digest:
            return False
    except OSError:
        pass
    try:
        cache.mkdir(exist_ok=True)
        for p in list(cache.glob("*.nbi")) + list(cache.glob("*.nbc")):
            p.unlink(missing_ok=True)
        stamp.write_text(digest)
    except OSError:
        return False
    return True


drop_stale_cache()
