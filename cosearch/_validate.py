"""Small argument checks shared by the configuration dataclasses and entry points.

Each raises ``ValueError`` naming the field and the offending value, and returns the
value normalised (``int``/``float``).
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

#: Largest cluster the kernels accept (int64-safe products, bounded work).
MAX_CHIPS = 1 << 24
#: Largest size of any one model dimension (layers, widths, heads, vocabulary, sequence, experts'
#: width): 2^31 - 1, far beyond any model built (the longest context, Llama 4 Scout's 10M tokens,
#: is 2^23.3); a larger one is a typo or a unit slip, and its products would overflow a float.
#: (``cosearch.models.MAX_DIM``.)
MAX_DIM = 2**31 - 1
#: Largest global batch (sequences) accepted.
MAX_BATCH = 1 << 30


def instances(where: str = "", *, none_ok: bool = True, **given: tuple[Any, type]) -> None:
    """Each argument of its class (or None, where ``none_ok``), refused by name otherwise, with
    ``where`` (the function) first where given (a string where a config object belongs raised
    AttributeError deep inside)."""
    for name, (x, kind) in given.items():
        if (x is not None or not none_ok) and not isinstance(x, kind):
            raise ValueError(f"{where + ': ' if where else ''}{name} must be a {kind.__name__}"
                             f"{' (or None)' if none_ok else ''}, got {type(x).__name__} {x!r:.60}")


def flag(name: str, value: Any) -> bool:
    """True or False (numpy's bool too), refused by name otherwise."""
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be True or False, got {value!r}")
    return bool(value)


def top_count(top: Any) -> int | None:
    """A table's ``top``: how many rows to show (0: none, the summary only), or None for all.  A
    negative count would drop rows from the end (``rows[:-1]``), so it is refused."""
    return None if top is None else nonneg_int("top", top)


def shown_int(value: int) -> str:
    """An integer as a message shows it: ``1,234,567``, or ``an integer of N digits`` past 10^15
    (a 400-digit typo is not printed whole)."""
    return f"{value:,}" if abs(value) < 10**15 else f"an integer of {len(str(abs(value)))} digits"


def positive_int(name: str, value: Any, maximum: int | None = None) -> int:
    ok = (isinstance(value, numbers.Integral) and not isinstance(value, bool)) or (
        isinstance(value, float) and value.is_integer())
    if not ok or int(value) <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    iv = int(value)
    if maximum is not None and iv > maximum:
        raise ValueError(f"{name}={shown_int(iv)} is larger than the supported maximum {maximum:,}")
    return iv


def nonneg_int(name: str, value: Any, maximum: int | None = None) -> int:
    """A whole number >= 0 (an int or numpy integer; at most ``maximum`` when given), e.g. a seed."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0 or (
            maximum is not None and value > maximum):
        raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
    return int(value)


def _finite(name: str, value: Any, allow_zero: bool) -> float:
    what = "a non-negative" if allow_zero else "a positive"
    try:
        f = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be {what} number, got {value!r}") from None
    except OverflowError:                 # an integer beyond any float
        raise ValueError(f"{name} must be {what} finite number, got {shown_int(int(value))}") from None
    if isinstance(value, bool) or not math.isfinite(f) or f < 0 or (f == 0 and not allow_zero):
        raise ValueError(f"{name} must be {what} finite number, got {value!r}")
    return f


def positive_float(name: str, value: Any) -> float:
    return _finite(name, value, allow_zero=False)


def nonneg_float(name: str, value: Any) -> float:
    return _finite(name, value, allow_zero=True)


#: Plausible bandwidths, bytes/s: from a slow serial link (1 MB/s) to beyond any memory
#: system built (10 PB/s).  Values outside are typos (a unit slip, a missing exponent) and
#: would price a "feasible" plan at an absurd or infinite step time.
MIN_BPS, MAX_BPS = 1e6, 1e16
#: Plausible clock rates, Hz (1 MHz to 100 GHz).
MIN_HZ, MAX_HZ = 1e6, 1e11


def in_range(name: str, value: Any, lo: float, hi: float, unit: str) -> float:
    """A finite number in ``[lo, hi]`` (refused naming ``name`` and the range otherwise)."""
    f = positive_float(name, value)
    if not lo <= f <= hi:
        raise ValueError(f"{name}={value!r} {unit} is outside the plausible range {lo:g} to {hi:g} {unit}")
    return f


def bandwidth(name: str, value: Any) -> float:
    """A bandwidth in bytes/s within :data:`MIN_BPS` .. :data:`MAX_BPS`."""
    return in_range(name, value, MIN_BPS, MAX_BPS, "bytes/s")


def fraction(name: str, value: Any) -> float:
    f = positive_float(name, value)
    if f > 1.0:
        raise ValueError(f"{name} must be in (0, 1], got {value!r}")
    return f


def choice(name: str, value: Any, options: tuple) -> Any:
    if value not in options:
        raise ValueError(f"{name}={value!r}; choose one of {', '.join(map(repr, options))}")
    return value


def values_of(name: str, x: Any, scalar: tuple = (str, int, np.integer)) -> tuple:
    """An option given as one value or a list of them, as a tuple: ``x`` itself when it is one of
    the ``scalar`` types (a bool counts only where listed), else its items; anything else (a
    float, a set, a number of the wrong kind) is refused naming ``name``."""
    if isinstance(x, scalar) and (not isinstance(x, bool) or bool in scalar or np.bool_ in scalar):
        return (x,)
    if isinstance(x, (list, tuple, np.ndarray, range)):
        return tuple(x)
    raise ValueError(f"{name} must be a value or a list of values, got {x!r}")


def int_list(name: str, values: Any, maximum: int | None = MAX_CHIPS) -> tuple[int, ...]:
    """A non-empty tuple of positive integers (a single integer is accepted too), each at most
    ``maximum`` (default :data:`MAX_CHIPS`: every listed count is a degree or a size the kernels
    hold in int64)."""
    if isinstance(values, (int,)) and not isinstance(values, bool):
        values = (values,)
    try:
        vals = tuple(values)
    except TypeError:
        raise ValueError(f"{name} must be a list of positive integers, got {values!r}") from None
    if not vals:
        raise ValueError(f"{name} must not be empty")
    return tuple(positive_int(name, x, maximum) for x in vals)


def divisors(n: int) -> list[int]:
    """Sorted divisors of ``n`` in O(sqrt(n))."""
    n = positive_int("n", n)
    small, large = [], []
    d = 1
    while d * d <= n:
        if n % d == 0:
            small.append(d)
            if d * d != n:
                large.append(n // d)
        d += 1
    return small + large[::-1]


def input_path(path, what: str) -> str:
    """A file's path as text: a non-empty str or os.PathLike (refused naming ``what`` otherwise,
    before the operating system's TypeError from deep inside a reader or writer)."""
    import os
    if not isinstance(path, (str, os.PathLike)) or not os.fspath(path):
        raise ValueError(f"{what} must be a file path (a str or os.PathLike), got {path!r}")
    p = os.fspath(path)
    return os.fsdecode(p) if isinstance(p, bytes) else p


def file_path(path, flag: str = "out") -> str:
    """An output file's path, checked before any work: a non-empty str or os.PathLike, not a
    folder, in a folder that exists and is writable (refused naming ``flag`` otherwise)."""
    import os
    p = input_path(path, flag)
    if os.path.isdir(p):
        raise ValueError(f"{flag} {p!r} is a directory")
    parent = os.path.dirname(os.path.abspath(p))
    if not os.path.isdir(parent):
        raise ValueError(f"{flag} {p!r}: folder {parent!r} does not exist")
    if not os.access(parent, os.W_OK):
        raise ValueError(f"{flag} {p!r}: folder {parent!r} is not writable")
    return p


def new_file(path, overwrite: bool, flag: str = "out") -> None:
    """Refuse an existing ``path`` unless ``overwrite`` (the Python API's twin of ``--force``),
    and a ``path`` that is no path at all; None: no file.  Whether its folder takes the file is
    left to the write (an OSError there, which the command line's fallback save catches); a run
    that writes only at its end checks that first with :func:`file_path`."""
    import os
    if path is None:
        return
    p = input_path(path, flag)
    if not overwrite and os.path.exists(p):
        raise FileExistsError(f"{p} exists; pass overwrite=True to replace it")


def output_path(path, force: bool = False, resume: bool | None = None, flag: str = "--out") -> str:
    """Check an output file before any work: not a folder, its folder exists and is writable,
    and an existing file is replaced only with ``force`` (or continued with ``resume``).
    ``resume=None``: the command has no resume option."""
    import os
    p = file_path(path, flag)
    if os.path.exists(p) and not (force or bool(resume)):
        raise ValueError(f"{flag} {p!r} exists; pass --force to replace it"
                         + (" or --resume to continue it" if resume is not None else ""))
    return p
