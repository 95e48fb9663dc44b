"""What made ``cosearch/data/megatron_bridge_ep_overlap.json``: whether each Megatron-Bridge
performance config that a validation row cites turns on the MoE expert-parallel all-to-all
overlap (``overlap_moe_expert_parallel_comm``), read from the config's own source at the commit
the row cites.

Two kinds of config are cited:

* a workload base config (``scripts/performance/configs/<family>/*_workload_base_configs.py``,
  releases up to 26.06): a module-level constant built as ``WorkloadBaseConfig(...)`` or
  ``replace(OTHER, ...)``; its ``moe_a2a_overlap`` field, else the base it replaces, else the
  dataclass default (``perf_plugins.py``: ``moe_a2a_overlap: bool = False``);
* a perf recipe (``src/megatron/bridge/perf_recipes/<family>/<chip>/*.py``, 26.06.01 on): a
  function that builds a ``ConfigContainer``.  Its statements are walked in order, following
  every call to a helper defined in the same module or imported from ``megatron.bridge`` (at the
  same commit), and the last setting wins: ``CommOverlapConfig(..., overlap_moe_expert_parallel_comm=X)``,
  ``cfg.comm_overlap.overlap_moe_expert_parallel_comm = X``, or a new ``CommOverlapConfig`` without
  the keyword (its default, off).

No code is run: the files are parsed (``ast``).  Usage, with a clone of
NVIDIA-NeMo/Megatron-Bridge that holds the cited commits::

    python scripts/megatron_bridge_ep_overlap.py --repo PATH/Megatron-Bridge \\
        --rows ../shared/validation/moe_runs.jsonl --out cosearch/data/megatron_bridge_ep_overlap.json
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


def recipe_overlap(read: Reader, commit: str, path: str, name: str) -> tuple[bool, str]:
    """(overlap on, where it was last set) for perf recipe ``name`` in ``path`` at ``commit``."""
    src = _Sources(read, commit)
    found = src.function(path, name)
    if found is None:
        raise KeyError(f"{name} is not defined in {path}@{commit}")
    state = [False, "never set (CommOverlapConfig's default: off)"]

    def walk(where: str, fn: ast.FunctionDef, stack: tuple) -> None:
        if (where, fn.name) in stack:
            return
        for stmt in fn.body:
            for node in _in_order(stmt):
                if isinstance(node, ast.Assign):
                    for t in node.targets:
                        if isinstance(t, ast.Attribute) and t.attr == FIELD:
                            state[:] = [bool(ast.literal_eval(node.value)), f"{where}:{node.lineno}"]
                        if isinstance(t, ast.Attribute) and t.attr == "comm_overlap" \
                                and isinstance(node.value, ast.Call):
                            kw = {k.arg: k.value for k in node.value.keywords}
                            state[:] = ([bool(ast.literal_eval(kw[FIELD])), f"{where}:{kw[FIELD].lineno}"]
                                        if FIELD in kw else [False, f"{where}:{node.lineno} (a new CommOverlapConfig)"])
                elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                    helper = src.function(where, node.func.id)
                    if helper is not None:
                        walk(helper[0], helper[1], stack + ((where, fn.name),))

    walk(found[0], found[1], ())
    return state[0], state[1]


def _in_order(stmt: ast.AST):
    """``stmt``'s nodes, calls after their arguments and assignments after their values (the order
    Python runs them), so a helper's settings land where it is called."""
    for child in ast.iter_child_nodes(stmt):
        yield from _in_order(child)
    yield stmt


def workload_overlap(read: Reader, commit: str, path: str, name: str) -> tuple[bool, str]:
    """(overlap on, where) for workload base config constant ``name`` in ``path`` at ``commit``."""
    tree = _Sources(read, commit).tree(path)
    if tree is None:
        raise KeyError(f"no {path} at {commit}")
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            v = node.value
            if isinstance(v, ast.Name):
                return workload_overlap(read, commit, path, v.id)
            if isinstance(v, ast.Call):
                for k in v.keywords:
                    if k.arg == "moe_a2a_overlap":
                        return bool(ast.literal_eval(k.value)), f"{path}:{k.value.lineno}"
                if ast.unparse(v.func).endswith("replace") and v.args and isinstance(v.args[0], ast.Name):
                    return workload_overlap(read, commit, path, v.args[0].id)
                return False, "WorkloadBaseConfig's default (scripts/performance/perf_plugins.py: moe_a2a_overlap = False)"
    raise KeyError(f"{name} is not defined in {path}@{commit}")


def config_overlap(read: Reader, path: str, commit: str, name: str) -> tuple[bool, str]:
    """Either kind of cited config (by its path)."""
    if "/perf_recipes/" in path:
        return recipe_overlap(read, commit, path, name)
    return workload_overlap(read, commit, path, name)


def table_for_rows(rows: list[dict], read: Reader) -> dict:
    """``{"<name>@<commit>": {"file", "overlap", "set_at"}}`` for every config the rows cite."""
    out = {}
    for row in rows:
        for note in row.get("assumed") or ():
            m = CITATION.search(str(note))
            if m is None or "dispatcher" not in str(note):
                continue
            path, commit, name = m.groups()
            key = f"{name}@{commit}"
            if key not in out:
                on, where = config_overlap(read, path, commit, name)
                out[key] = {"file": path, "overlap": on, "set_at": where}
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
                             "scripts/megatron_bridge_ep_overlap.py", "configs": table}, fh, indent=1)
        fh.write("\n")
    print(f"{len(table)} configs, {sum(v['overlap'] for v in table.values())} with the EP all-to-all overlap on")
    return 0


if __name__ == "__main__":
    sys.exit(main())
