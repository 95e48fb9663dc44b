"""The package's shape: imports flow one way (no cycles, lazy imports included), heavy
dependencies stay out of ``import cosearch``, and the search settings are one validated
dataclass."""

import ast
import pathlib
import subprocess
import sys

import pytest

from cosearch import search

PKG = pathlib.Path(__file__).resolve().parents[1] / "cosearch"


def _module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(PKG.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_graph() -> dict[str, set[str]]:
    """module -> the package modules it imports anywhere in its body (function-level imports
    and typing-only imports under ``if TYPE_CHECKING:`` count too: a cycle of types is a cycle
    of ideas)."""
    files = {_module_name(p): p for p in PKG.rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in files}
    for mod, path in files.items():
        tree = ast.parse(path.read_text())
        base = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom):
                continue
            if node.level:
                parts = base.split(".")
                target = ".".join(parts[:len(parts) - node.level + 1] + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            subs = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in files]
            for t in subs or [target]:
                if t in files and t != mod:
                    graph[mod].add(t)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of two or more modules (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_cycle_finder_finds_a_planted_cycle():
    g = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(g) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles():
    """No module imports one that (directly or through others) imports it back, not even
    lazily inside a function (the package's ``__init__`` re-exports are not edges back)."""
    g = _import_graph()
    g = {m: {t for t in ts if t != "cosearch"} for m, ts in g.items() if m != "cosearch"}
    assert g["cosearch.search"] >= {"cosearch.sweep", "cosearch.ranking", "cosearch.multimodel"}
    assert _cycles(g) == []


def test_import_is_light():
    """``import cosearch`` does not import torch or cvxpy (or numba's compiler)."""
    code = ("import sys, cosearch; "
            "print(','.join(m for m in ('torch', 'cvxpy', 'numba') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_search_options_validate_and_refuse_unknown_names():
    o = search.SearchOptions()
    assert o.refine_top == 3 and o.prune and o.executor is None
    assert o.with_(refine_top=0).refine_top == 0
    with pytest.raises(TypeError, match="unknown search option"):
        o.with_(refine=1)
    for bad in ({"refine_top": -1}, {"ilp_designs": 0}, {"chunk_size": 1.5}, {"checkpoint_every_s": float("nan")},
                {"objective": "median"}, {"prune": "yes"}):
        with pytest.raises(ValueError):
            search.SearchOptions(**bad)
    with pytest.raises(TypeError, match="unknown search option"):
        search.cosearch("bert-large", None, 8, 16, "serial", refine=1)


def test_cli_imports_no_torch_unless_an_fl_command_runs():
    """`cosearch --help`, `models` and `presets` build every sub-parser; none may import torch
    (it costs ~2 s), and the FL parser's model list must equal the models themselves."""
    code = ("import sys, contextlib, io\n"
            "from cosearch.cli import main\n"
            "for argv in (['--help'], ['models'], ['presets'], ['fl', 'simulate', '--help']):\n"
            "    with contextlib.redirect_stdout(io.StringIO()):\n"
            "        try:\n"
            "            main(argv)\n"
            "        except SystemExit:\n"
            "            pass\n"
            "print('torch' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", out.stderr
    pytest.importorskip("torch")
    from cosearch.fl.cli import MODEL_NAMES
    from cosearch.fl.models import MODELS
    assert tuple(MODELS) == MODEL_NAMES


#: Every public name cosearch.hardware had as one module (0.3), before it became a package.
HARDWARE_03_NAMES = ('A100', 'A100_80GB', 'AREA_MODELS', 'ATTENTION_HEAD_OVERHEAD', 'ATTENTION_HEAD_OVERHEAD_FA2', 'ATTENTION_KERNELS', 'ATTENTION_OVERHEAD_BWD', 'ATTENTION_OVERHEAD_FWD', 'Accelerator', 'AreaPowerModel', 'B200', 'BOOST_CLOCK_H100', 'CAST_KERNELS', 'DESIGN_FIELDS', 'EFFICIENCY_SOURCES', 'EFF_FIELDS', 'FA1_TRITON_SPEED', 'FP4_RATE_BLACKWELL', 'FP8_RATE_BLACKWELL', 'FP8_RATE_H100', 'FP8_RATE_H100_500W', 'GB200', 'GB300', 'GiB', 'H100', 'H100_500W', 'H200', 'HBM_SCENARIO_BPS', 'IDEAL', 'INDUCTOR_AMAX_BPS_PER_SM', 'INDUCTOR_CAST_PASSES_S', 'INDUCTOR_CAST_SMS', 'INDUCTOR_CAST_STREAM', 'KernelEfficiency', 'KiB', 'MAX_FIELD_VALUES', 'MAX_GRID_DESIGNS', 'MAX_SPACE_FILE_BYTES', 'MiB', 'PHAZE_CLOCK_HZ', 'PHAZE_GLB_WORDS_PER_CYCLE', 'PRESETS', 'PhazeAreaModel', 'SPACE_FILE_FIELDS', 'STREAM_K_FIXUP_H100', 'SUSTAINED_CLOCK_A100', 'SUSTAINED_CLOCK_BLACKWELL', 'SUSTAINED_CLOCK_H100', 'SUSTAINED_CLOCK_H100_500W', 'SearchSpace', 'TPU5_TENSOR', 'TPUv4', 'TPUv5e', 'TPUv5p', 'design_array', 'named_area_model', 'phaze_glb_words', 'phaze_l1_bytes', 'phaze_reference', 'preset', 'preset_names')


def test_hardware_package_keeps_every_public_name():
    """hardware/ split by concern (efficiency, area, chips, space): every name users imported
    from cosearch.hardware still imports from there, and its classes and functions are defined in
    one of the four submodules."""
    from cosearch import hardware
    missing = [n for n in HARDWARE_03_NAMES if not hasattr(hardware, n)]
    assert missing == []
    defined = {n: getattr(hardware, n).__module__ for n in HARDWARE_03_NAMES
               if isinstance(getattr(hardware, n), type) or callable(getattr(hardware, n))}
    assert defined and all(m.rsplit(".", 1)[0] == "cosearch.hardware" and m.rsplit(".", 1)[1] in
                           ("efficiency", "area", "chips", "space") for m in defined.values()), defined
