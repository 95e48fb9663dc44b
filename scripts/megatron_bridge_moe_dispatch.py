"""What made ``cosearch/data/megatron_bridge_moe_dispatch.json``: how each Megatron-Bridge
performance config that a validation row cites dispatches its MoE tokens, read from the config's
own source at the commit the row cites: the expert-parallel all-to-all overlap
(``overlap_moe_expert_parallel_comm``) and the flex dispatcher's backend
(``moe_flex_dispatcher_backend``: ``deepep`` or ``hybridep``; none: the ``alltoall`` dispatcher),
and whether the experts run through Transformer Engine's op fuser (``use_transformer_engine_op_fuser``:
the experts' bias and clamped activation inside its fused grouped MLP).

Two kinds of config are cited:

* a workload base config (``scripts/performance/configs/<family>/*_workload_base_configs.py``,
  releases up to 26.06): a module-level constant built as ``WorkloadBaseConfig(...)`` or
  ``replace(OTHER, ...)``; its ``moe_a2a_overlap``, ``moe_flex_dispatcher_backend`` and
  ``cutedsl_fused_grouped_mlp`` fields, else the base it replaces, else the dataclass defaults
  (``perf_plugins.py``: ``moe_a2a_overlap: bool = False``; no backend; no CuTe DSL grouped MLP).
  ``cutedsl_fused_grouped_mlp`` is what turns the op fuser on (``utils/overrides.py`` at 26.06:
  ``if settings.cutedsl_fused_grouped_mlp: cfg.model.use_transformer_engine_op_fuser = True``;
  the releases before it have no such field, and their ``overrides.py`` turns the op fuser off);
* a perf recipe (``src/megatron/bridge/perf_recipes/<family>/<chip>/*.py``, 26.06.01 on): a
  function that builds a ``ConfigContainer``.  Its statements are walked in order, following
  every call to a helper defined in the same module or imported from ``megatron.bridge`` (at the
  same commit; the base recipes included), and the last setting wins: for the overlap
  ``CommOverlapConfig(..., overlap_moe_expert_parallel_comm=X)``,
  ``cfg.comm_overlap.overlap_moe_expert_parallel_comm = X``, or a new ``CommOverlapConfig`` without
  the keyword (its default, off); for the backend the last literal assigned to
  ``moe_flex_dispatcher_backend`` (a helper passing the value through, as
  ``apply_flex_dispatcher_backend`` does, changes nothing), and ``moe_token_dispatcher_type =
  "alltoall"`` after it clears it; for the op fuser the last literal assigned to
  ``use_transformer_engine_op_fuser``.

No code is run: the files are parsed (``ast``).  ``apply_flex_dispatcher_backend`` applies a backend
only on the GPUs it supports (DeepEP: Ampere, Hopper, B200, B300; HybridEP: those and GB200/GB300);
the rows' DeepEP configs all run on those.  Usage, with a clone of NVIDIA-NeMo/Megatron-Bridge that
holds the cited commits::

    python scripts/megatron_bridge_moe_dispatch.py --repo PATH/Megatron-Bridge \\
        --rows ../shared/validation/moe_runs.jsonl --out cosearch/data/megatron_bridge_moe_dispatch.json
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import subprocess
import sys
from collections.abc import Callable

#: A validation row's citation of the config it ran: ``Megatron-Bridge:<path>@<commit> (<name> ...)``.
CITATION = re.compile(r"NVIDIA-NeMo/Megatron-Bridge:(\S+)@(\w+) \((\w+)")
FIELD = "overlap_moe_expert_parallel_comm"

Reader = Callable[[str, str], "str | None"]


class _Sources:
    """Parsed modules at one commit, read through ``read(commit, path)``."""

    def __init__(self, read: Reader, commit: str):
        self.read, self.commit, self.trees = read, commit, {}

    def tree(self, path: str) -> ast.Module | None:
        if path not in self.trees:
            src = self.read(self.commit, path)
            self.trees[path] = None if src is None else ast.parse(src)
        return self.trees[path]

    def function(self, path: str, name: str) -> tuple[str, ast.FunctionDef] | None:
        """``name`` as module ``path`` sees it: defined there, or imported from megatron.bridge."""
        tree = self.tree(path)
        if tree is None:
            return None
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name == name:
                return path, node
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("megatron.bridge"):
                for alias in node.names:
                    if (alias.asname or alias.name) == name:
                        mod = "src/" + node.module.replace(".", "/")
                        target = mod + ".py" if self.tree(mod + ".py") is not None else mod + "/__init__.py"
                        return self.function(target, alias.name)
        return None


FUSER = "use_transformer_engine_op_fuser"


def _unset() -> dict:
    return {"overlap": False, "overlap_at": "never set (CommOverlapConfig's default: off)",
            "backend": None, "backend_at": "never set (the alltoall dispatcher)",
            "op_fuser": False, "op_fuser_at": "never set (TransformerConfig's default: off)"}


def _literal(node: ast.AST):
    try:
        return True, ast.literal_eval(node)
    except ValueError:
        return False, None


def recipe_settings(read: Reader, commit: str, path: str, name: str) -> dict:
    """``{"overlap", "overlap_at", "backend", "backend_at", "op_fuser", "op_fuser_at"}`` for perf
    recipe ``name`` in ``path`` at ``commit``: each setting's final value and the line that set it
    last."""
    src = _Sources(read, commit)
    found = src.function(path, name)
    if found is None:
        raise KeyError(f"{name} is not defined in {path}@{commit}")
    state = _unset()

    def walk(where: str, fn: ast.FunctionDef, stack: tuple) -> None:
        if (where, fn.name) in stack:
            return
        for stmt in fn.body:
            for node in _in_order(stmt):
                if isinstance(node, ast.Assign):
                    for t in node.targets:
                        if not isinstance(t, ast.Attribute):
                            continue
                        if t.attr == FIELD:
                            state.update(overlap=bool(ast.literal_eval(node.value)), overlap_at=f"{where}:{node.lineno}")
                        elif t.attr == "comm_overlap" and isinstance(node.value, ast.Call):
                            kw = {k.arg: k.value for k in node.value.keywords}
                            if FIELD in kw:
                                state.update(overlap=bool(ast.literal_eval(kw[FIELD])),
                                             overlap_at=f"{where}:{kw[FIELD].lineno}")
                            else:
                                state.update(overlap=False, overlap_at=f"{where}:{node.lineno} (a new CommOverlapConfig)")
                        elif t.attr == "moe_flex_dispatcher_backend":
                            known, value = _literal(node.value)
                            if known:
                                state.update(backend=value, backend_at=f"{where}:{node.lineno}")
                        elif t.attr == FUSER:
                            known, value = _literal(node.value)
                            if known:
                                state.update(op_fuser=bool(value), op_fuser_at=f"{where}:{node.lineno}")
                        elif t.attr == "moe_token_dispatcher_type":
                            known, value = _literal(node.value)
                            if known and value == "alltoall":
                                state.update(backend=None, backend_at=f"{where}:{node.lineno} (alltoall)")
                elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                    helper = src.function(where, node.func.id)
                    if helper is not None:
                        walk(helper[0], helper[1], stack + ((where, fn.name),))

    walk(found[0], found[1], ())
    return state


def _in_order(stmt: ast.AST):
    """``stmt``'s nodes, calls after their arguments and assignments after their values (the order
    Python runs them), so a helper's settings land where it is called."""
    for child in ast.iter_child_nodes(stmt):
        yield from _in_order(child)
    yield stmt


def workload_settings(read: Reader, commit: str, path: str, name: str) -> dict:
    """The same for workload base config constant ``name`` in ``path`` at ``commit``."""
    tree = _Sources(read, commit).tree(path)
    if tree is None:
        raise KeyError(f"no {path} at {commit}")
    state = _unset()
    state["overlap_at"] = "WorkloadBaseConfig's default (scripts/performance/perf_plugins.py: moe_a2a_overlap = False)"
    state["backend_at"] = "WorkloadBaseConfig's default (no flex backend: the alltoall dispatcher)"
    state["op_fuser_at"] = "WorkloadBaseConfig's default (no cutedsl_fused_grouped_mlp: the op fuser off)"
    todo = {"moe_a2a_overlap": ("overlap", bool), "moe_flex_dispatcher_backend": ("backend", lambda x: x),
            "cutedsl_fused_grouped_mlp": ("op_fuser", bool)}
    while todo:
        node = next((n for n in tree.body if isinstance(n, ast.Assign)
                     and any(isinstance(t, ast.Name) and t.id == name for t in n.targets)), None)
        if node is None:
            raise KeyError(f"{name} is not defined in {path}@{commit}")
        v = node.value
        if isinstance(v, ast.Name):
            name = v.id
            continue
        if not isinstance(v, ast.Call):
            break
        for k in v.keywords:
            if k.arg in todo:
                key, conv = todo.pop(k.arg)
                state[key], state[f"{key}_at"] = conv(ast.literal_eval(k.value)), f"{path}:{k.value.lineno}"
        if ast.unparse(v.func).endswith("replace") and v.args and isinstance(v.args[0], ast.Name):
            name = v.args[0].id
            continue
        break
    return state


def config_settings(read: Reader, path: str, commit: str, name: str) -> dict:
    """Either kind of cited config (by its path)."""
    if "/perf_recipes/" in path:
        return recipe_settings(read, commit, path, name)
    return workload_settings(read, commit, path, name)


def table_for_rows(rows: list[dict], read: Reader) -> dict:
    """``{"<name>@<commit>": {"file", "overlap", "overlap_at", "backend", "backend_at", "op_fuser",
    "op_fuser_at"}}`` for every config the rows cite."""
    out = {}
    for row in rows:
        for note in row.get("assumed") or ():
            m = CITATION.search(str(note))
            if m is None or "dispatcher" not in str(note):
                continue
            path, commit, name = m.groups()
            key = f"{name}@{commit}"
            if key not in out:
                out[key] = {"file": path, **config_settings(read, path, commit, name)}
    return dict(sorted(out.items()))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repo", required=True, help="a clone of NVIDIA-NeMo/Megatron-Bridge (a git directory)")
    p.add_argument("--rows", required=True, help="a validation-schema JSONL file whose rows cite configs")
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)

    def read(commit: str, path: str) -> str | None:
        r = subprocess.run(["git", "-C", a.repo, "show", f"{commit}:{path}"], capture_output=True, text=True)
        return r.stdout if r.returncode == 0 else None

    with open(a.rows) as fh:
        rows = [json.loads(line) for line in fh if line.strip()]
    table = table_for_rows(rows, read)
    with open(a.out, "w") as fh:
        json.dump({"source": "NVIDIA-NeMo/Megatron-Bridge, each config at the commit its rows cite; made by "
                             "scripts/megatron_bridge_moe_dispatch.py", "configs": table}, fh, indent=1)
        fh.write("\n")
    print(f"{len(table)} configs, {sum(v['overlap'] for v in table.values())} with the EP all-to-all overlap on, "
          f"{sum(v['backend'] is not None for v in table.values())} with a flex dispatcher backend, "
          f"{sum(v['op_fuser'] for v in table.values())} with the op fuser")
    return 0


if __name__ == "__main__":
    sys.exit(main())
