"""The cached numba kernels stay safe to load together, whatever order they were compiled in.

``cosearch plan`` then two ``cosearch search`` runs used to end in a segmentation fault: the
plan compiled ``np.sort`` (in ``dp.config_best``), the first search compiled ``np.argsort``
(in ``dp._best_one``), numba gave both sorts' inner closures the same symbol, and the second
search, loading both from the cache, called the wrong one (see :mod:`cosearch._kernels.order`).
"""

import ast
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from cosearch._kernels import order

KERNELS = pathlib.Path(__file__).resolve().parents[1] / "cosearch" / "_kernels"


@pytest.mark.parametrize("keys", [
    np.array([]),
    np.array([3.0]),
    np.array([2.0, 1.0, 2.0, 1.0, 2.0]),                       # ties
    np.array([np.inf, 1.0, np.nan, -np.inf, 0.0, np.nan, np.inf]),  # infinities and NaN
    np.random.default_rng(0).normal(size=1001),
    np.random.default_rng(1).integers(0, 7, size=500).astype(float),
])
def test_heapsort_matches_numpy(keys):
    idx = order.argsort(keys)
    assert sorted(idx.tolist()) == list(range(len(keys)))       # a permutation
    np.testing.assert_array_equal(keys[idx], np.sort(keys))      # NumPy's order, NaN last
    np.testing.assert_array_equal(order.sorted_copy(keys), np.sort(keys))


def _njit_functions(tree):
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            for d in node.decorator_list:
                f = d.func if isinstance(d, ast.Call) else d
                if isinstance(f, ast.Name) and f.id == "njit":
                    yield node


def test_no_numpy_sort_inside_compiled_kernels():
    """Every sort inside an njit kernel goes through :mod:`cosearch._kernels.order`."""
    offenders = []
    for path in KERNELS.glob("*.py"):
        if path.name == "order.py":        # the sorts themselves
            continue
        for fn in _njit_functions(ast.parse(path.read_text())):
            for node in ast.walk(fn):
                if not isinstance(node, ast.Call):
                    continue
                f = node.func
                name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
                base = getattr(getattr(f, "value", None), "id", None)
                if name in ("sort", "argsort", "sorted", "msort") and base != "order":
                    offenders.append(f"{path.name}:{node.lineno} {fn.name}")
    assert not offenders, offenders


#: Run in the last process of the sequence: the search through the CLI, then every cosearch
#: kernel that holds more than one compiled signature (a literal argument, a read-only array or
#: an omitted default compiles a kernel again: the plan and search chains once cost 14 s and 18 s
#: more to compile from an empty cache than they do now).
_LAST = """
import gc, sys
from numba.core.registry import CPUDispatcher
from cosearch.cli import main
if __name__ == "__main__":
    rc = main(sys.argv[1:])
    twice = sorted(f"{d.py_func.__module__}.{d.py_func.__name__}: {[str(s) for s in d.signatures]}"
                   for d in gc.get_objects() if isinstance(d, CPUDispatcher)
                   and d.py_func.__module__.startswith("cosearch") and len(d.signatures) > 1)
    print("\\n".join(twice), file=sys.stderr)
    sys.exit(rc or (3 if twice else 0))
"""


def test_plan_then_two_searches_from_a_fresh_cache(tmp_path):
    """The sequence that crashed, each command in its own process, from an empty cache; the last
    also checks that no kernel was compiled for two signatures."""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba-cache"))
    (tmp_path / "last.py").write_text(_LAST)
    search = ["search", "--model", "gpt3-1.3b", "--chips", "64", "--batch", "128", "--out", "r0.json", "--force"]
    cmds = [["-m", "cosearch", "plan", "--model", "gpt3-1.3b", "--cluster", "dgx-h100", "--nodes", "1", "--batch",
             "16", "--tp", "1", "--mb", "1"], ["-m", "cosearch", *search], [str(tmp_path / "last.py"), *search]]
    for cmd in cmds:
        p = subprocess.run([sys.executable, *cmd], cwd=tmp_path, env=env, capture_output=True, text=True,
                           timeout=600)
        assert p.returncode == 0, (cmd, p.returncode, p.stderr[-2000:])
    assert (tmp_path / "r0.json").is_file()


def test_a_changed_kernel_source_drops_the_whole_cache(tmp_path):
    """numba keys a cached kernel on its own file only, so dp.py's cached code would keep an old
    formulas.py inlined: any change to a kernel source drops every cached kernel of the package
    (on a copy of the package's sources, with fake cache files)."""
    from cosearch import _kernels
    pkg = tmp_path / "k"
    pkg.mkdir()
    for f in KERNELS.glob("*.py"):
        (pkg / f.name).write_bytes(f.read_bytes())
    cache = pkg / "__pycache__"
    cache.mkdir()
    (cache / "dp.best_steps-1.py311.nbi").write_text("index")
    (cache / "dp.best_steps-1.py311.0.nbc").write_text("code")
    (cache / "graph.cpython-311.pyc").write_text("bytecode")
    assert _kernels.drop_stale_cache(pkg)                       # no stamp yet: dropped
    assert not list(cache.glob("*.nb*")) and (cache / "graph.cpython-311.pyc").exists()
    (cache / "dp.best_steps-1.py311.nbi").write_text("index")
    assert not _kernels.drop_stale_cache(pkg)                   # same sources: kept
    assert (cache / "dp.best_steps-1.py311.nbi").exists()
    f = pkg / "formulas.py"
    f.write_text(f.read_text() + "\n# changed\n")
    assert _kernels.drop_stale_cache(pkg)                       # formulas.py changed: dp's cache goes too
    assert not (cache / "dp.best_steps-1.py311.nbi").exists()
    assert (cache / _kernels.STAMP).read_text() == _kernels.sources_digest(pkg)
