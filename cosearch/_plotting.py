"""The matplotlib set-up and saving every figure of cosearch shares."""

from __future__ import annotations

import os
from typing import Any


def pyplot(what: str, path: str | os.PathLike | None, overwrite: bool) -> Any:
    """``matplotlib.pyplot`` on the file-only Agg backend, once ``path`` is known not to replace
    a file without ``overwrite``; a missing matplotlib is refused naming ``what`` and the extra
    that installs it."""
    from ._validate import new_file
    new_file(path, overwrite, "path")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:  # pragma: no cover
        raise ImportError(f"{what} needs matplotlib: pip install 'cosearch[plot]'") from exc
    return plt


def finish(fig: Any, path: str | os.PathLike | None, dpi: int = 120) -> Any:
    """Lay ``fig`` out, and write and close it when ``path`` is given; returns it."""
    fig.tight_layout()
    if path is not None:
        import matplotlib.pyplot as plt
        fig.savefig(path, dpi=dpi)
        plt.close(fig)
    return fig
