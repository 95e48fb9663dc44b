"""What made ``cosearch/data/megatron_bridge_moe_dispatch.json``: how each Megatron-Bridge
performance config that a validation row cites dispatches its MoE tokens, read from the config's
own source at the commit the row cites: the expert-parallel all-to-all overlap
(``overlap_moe_expert_parallel_comm``) and the flex dispatcher's backend
(``moe_flex_dispatcher_backend``: ``deepep`` or ``hybridep``; none: the ``alltoall`` dispatcher),
and whether the experts run through Transformer Engine's op fuser (``use_transformer_engine_op_fuser``:
the experts' bias and clamped activation inside its fused grouped MLP), and the SMs the flex
dispatcher holds where the config sets them (``sms``: a perf recipe's last literal
``moe_flex_dispatcher_num_sms``, else its backend's ``moe_hybridep_num_sms`` /
``moe_deepep_num_sms``; a workload base config's HybridEP runs get ``_set_common_perf_overrides``'s).

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

FP8 attention (``fp8_dpa``) as well: the value that reaches the model is the mixed-precision
config's (Megatron-Bridge's ``MixedPrecisionConfig.setup`` writes its fields over the model's), so
a perf recipe's last literal assigned to ``<cfg>.mixed_precision.fp8_dot_product_attention`` after
its last new mixed-precision config (whose default is off), a helper's parameter passed through
read from the call (``_enable_deepseek_full_iteration_mxfp8(cfg, fp8_dot_product_attention=True)``)
or its default; a workload base config's ``fp8_dot_product_attention`` field where the commit's
``utils/overrides.py`` applies it to the mixed-precision config.

The loss implementation is read as well: for a perf recipe where it sets one
(``_benchmark_common(cfg, cross_entropy_impl=...)``, the literal passed or the parameter's
default; a later ``cross_entropy_loss_fusion = False``), and for every commit a row cites (dense
rows included: ``(config <NAME> @ <commit>)`` in their ``src``), what a workload base config runs
with there (:func:`commit_settings`: ``_set_common_perf_overrides``'s ``cross_entropy_fusion_impl``
over the GPT provider's ``cross_entropy_loss_fusion`` default).

No code is run: the files are parsed (``ast``).  ``apply_flex_dispatcher_backend`` applies a backend
only on the GPUs it supports (DeepEP: Ampere, Hopper, B200, B300; HybridEP: those and GB200/GB300);
the rows' DeepEP configs all run on those.  Usage, with a clone of NVIDIA-NeMo/Megatron-Bridge that
holds the cited commits::

    python scripts/megatron_bridge_moe_dispatch.py --repo PATH/Megatron-Bridge \\
        --rows ../shared/validation/moe_runs.jsonl ../shared/validation/modern_runs.jsonl \\
        bench/validation/bridge_cards.jsonl \\
        --out cosearch/data/megatron_bridge_moe_dispatch.json
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
#: The flex dispatcher's SM knobs (Megatron-Core's unified one and each backend's older one).
SMS_KNOBS = ("moe_flex_dispatcher_num_sms", "moe_hybridep_num_sms", "moe_deepep_num_sms")
#: Helpers whose effect depends on the GPU the job runs on, which a recipe's source cannot say:
#: ``apply_flex_dispatcher_backend`` keeps the backend it is passed on the GPUs that backend
#: supports and falls back to the all-to-all dispatcher elsewhere (``_fallback_to_alltoall``), so
#: it is not walked (walking it took the fallback branch as always taken); the row's GPU decides.
DEVICE_DEPENDENT = frozenset({"apply_flex_dispatcher_backend", "validate_flex_dispatcher_backend"})


def _unset() -> dict:
    return {"overlap": False, "overlap_at": "never set (CommOverlapConfig's default: off)",
            "backend": None, "backend_at": "never set (the alltoall dispatcher)",
            "op_fuser": False, "op_fuser_at": "never set (TransformerConfig's default: off)",
            "fp8_dpa": False, "fp8_dpa_at": "never set (MixedPrecisionConfig's default: off)"}


#: FP8 attention's switch.  Megatron-Bridge's ``MixedPrecisionConfig.setup`` writes each of its
#: fields over the model's (``update_config_with_precision_overrides``,
#: ``src/megatron/bridge/training/mixed_precision.py``), so the mixed-precision config's value is
#: the one that runs: a recipe's ``cfg.model.fp8_dot_product_attention`` alone is overwritten.
FP8_DPA = "fp8_dot_product_attention"


#: The perf scripts' common overrides (workload base configs go through them:
#: ``set_workload_base_configs`` calls ``_set_common_perf_overrides``) and the GPT provider whose
#: ``cross_entropy_loss_fusion`` default applies where no config sets it.
OVERRIDES = "scripts/performance/utils/overrides.py"
GPT_PROVIDER = "src/megatron/bridge/models/gpt_provider.py"
CE_IMPL = "cross_entropy_fusion_impl"
CE_FUSION = "cross_entropy_loss_fusion"


def commit_settings(read: Reader, commit: str) -> dict:
    """How a workload base config at ``commit`` computes its loss: ``{"cross_entropy",
    "cross_entropy_at"}``, ``"te"`` / ``"native"`` (Megatron-Core's ``cross_entropy_fusion_impl``
    with ``cross_entropy_loss_fusion`` on) or ``"off"``: the last literal
    ``_set_common_perf_overrides`` assigns to ``cross_entropy_fusion_impl`` (else the provider's
    default, ``native``), with the provider's ``cross_entropy_loss_fusion`` default."""
    fusion, fusion_at = False, "never set (Megatron-Core's default: off)"
    provider = _Sources(read, commit).tree(GPT_PROVIDER)
    for node in ast.walk(provider) if provider is not None else ():
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == CE_FUSION:
            fusion, fusion_at = bool(ast.literal_eval(node.value)), f"{GPT_PROVIDER}:{node.lineno}"
    impl, impl_at = "native", "never set (the provider's default: native)"
    tree = _Sources(read, commit).tree(OVERRIDES)
    fn = next((n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "_set_common_perf_overrides"),
              None) if tree is not None else None
    for node in ast.walk(fn) if fn is not None else ():
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Attribute) and t.attr in (CE_IMPL, CE_FUSION)
                                                for t in node.targets):
            known, value = _literal(node.value)
            attr = next(t.attr for t in node.targets if isinstance(t, ast.Attribute))
            if known and attr == CE_IMPL:
                impl, impl_at = value, f"{OVERRIDES}:{node.lineno}"
            elif known:
                fusion, fusion_at = bool(value), f"{OVERRIDES}:{node.lineno}"
    if not fusion:
        return {"cross_entropy": "off", "cross_entropy_at": fusion_at}
    return {"cross_entropy": impl, "cross_entropy_at": f"{impl_at}; {CE_FUSION} on at {fusion_at}"}


def _literal(node: ast.AST):
    try:
        return True, ast.literal_eval(node)
    except ValueError:
        return False, None


def recipe_settings(read: Reader, commit: str, path: str, name: str) -> dict:
    """``{"overlap", "overlap_at", "backend", "backend_at", "op_fuser", "op_fuser_at", "fp8_dpa",
    "fp8_dpa_at"}`` (and
    ``cross_entropy`` / ``sms`` with their ``_at`` where the recipe sets them) for perf recipe
    ``name`` in ``path`` at ``commit``: each setting's final value and the line that set it last."""
    src = _Sources(read, commit)
    found = src.function(path, name)
    if found is None:
        raise KeyError(f"{name} is not defined in {path}@{commit}")
    state = _unset()
    sms: dict[str, tuple] = {}

    def walk(where: str, fn: ast.FunctionDef, stack: tuple, bound: dict) -> None:
        if (where, fn.name) in stack:
            return
        for stmt in fn.body:
            for node in _in_order(stmt):
                if isinstance(node, ast.Assign):
                    for t in node.targets:
                        if not isinstance(t, ast.Attribute):
                            continue
                        if t.attr == FP8_DPA and ast.unparse(t.value).endswith("mixed_precision"):
                            known, value = _literal(node.value)
                            at = f"{where}:{node.lineno}"
                            if not known and isinstance(node.value, ast.Name) and node.value.id in bound:
                                value, called = bound[node.value.id]        # a helper's parameter
                                known, at = True, f"{at} ({node.value.id} from {called})"
                            if known:
                                state.update(fp8_dpa=bool(value), fp8_dpa_at=at)
                        elif t.attr == "mixed_precision":
                            # a new mixed-precision config: its own switch (default off) unless it sets one
                            kw = {k.arg: k.value for k in node.value.keywords} if isinstance(node.value, ast.Call) \
                                else {}
                            known, value = _literal(kw[FP8_DPA]) if FP8_DPA in kw else (True, False)
                            if known:
                                state.update(fp8_dpa=bool(value), fp8_dpa_at=f"{where}:{node.lineno} (a new "
                                             "mixed-precision config" + ("" if FP8_DPA in kw else ", its default: off")
                                             + ")")
                        elif t.attr == FIELD:
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
                        elif t.attr in SMS_KNOBS:
                            known, value = _literal(node.value)
                            if known:
                                sms[t.attr] = (value, f"{where}:{node.lineno}")
                        elif t.attr == CE_IMPL:
                            known, value = _literal(node.value)
                            if known:
                                state.update(cross_entropy=value, cross_entropy_at=f"{where}:{node.lineno}")
                        elif t.attr == CE_FUSION:
                            known, value = _literal(node.value)
                            if known and not value:
                                state.update(cross_entropy="off", cross_entropy_at=f"{where}:{node.lineno}")
                elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                    if node.func.id in DEVICE_DEPENDENT:
                        continue
                    helper = src.function(where, node.func.id)
                    if helper is not None:
                        bound = _bindings(node, where, helper)
                        if "cross_entropy_impl" in bound:
                            # _benchmark_common(cfg, cross_entropy_impl="te") (perf_recipes/_common.py)
                            # assigns its parameter to cross_entropy_fusion_impl
                            value, at = bound["cross_entropy_impl"]
                            state.update(cross_entropy=value, cross_entropy_at=at)
                        walk(helper[0], helper[1], stack + ((where, fn.name),), bound)

    walk(found[0], found[1], (), {})
    # Megatron-Core: the unified knob first, then the backend's own (none set: the backend's default)
    if state["backend"] is not None:
        for knob in ("moe_flex_dispatcher_num_sms", f"moe_{state['backend']}_num_sms"):
            value, at = sms.get(knob, (None, None))
            if value is not None:
                state.update(sms=int(value), sms_at=f"{at} ({knob})")
                break
    return state


def _bindings(call: ast.Call, where: str, helper: tuple[str, ast.FunctionDef]) -> dict:
    """The literal values ``call`` gives ``helper``'s keyword parameters (passed, else their
    defaults), each with where it came from: ``{name: (value, "<file>:<line>")}``."""
    a = helper[1].args
    params = a.args + a.kwonlyargs
    defaults = dict(zip([p.arg for p in a.args][len(a.args) - len(a.defaults):], a.defaults))
    defaults.update({p.arg: d for p, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None})
    passed = {k.arg: k.value for k in call.keywords if k.arg}
    out = {}
    for p in params:
        if p.arg in passed:
            known, value = _literal(passed[p.arg])
            at = f"{where}:{call.lineno}"
        elif p.arg in defaults:
            known, value = _literal(defaults[p.arg])
            at = f"{helper[0]}:{helper[1].lineno} (its default)"
        else:
            continue
        if known:
            out[p.arg] = (value, at)
    return out


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
    state["fp8_dpa_at"] = "WorkloadBaseConfig's default (no fp8_dot_product_attention: off)"
    todo = {"moe_a2a_overlap": ("overlap", bool), "moe_flex_dispatcher_backend": ("backend", lambda x: x),
            "cutedsl_fused_grouped_mlp": ("op_fuser", bool), FP8_DPA: ("fp8_dpa", bool)}
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
    """Either kind of cited config (by its path); a perf recipe's loss implementation where it
    sets one (``cross_entropy`` / ``cross_entropy_at``; a workload base config's is its commit's,
    :func:`commit_settings`)."""
    if "/perf_recipes/" in path:
        return recipe_settings(read, commit, path, name)
    state = workload_settings(read, commit, path, name)
    if state["fp8_dpa"] and overrides_fp8_dpa(read, commit) is None:
        state.update(fp8_dpa=False, fp8_dpa_at=f"{state['fp8_dpa_at']}, which {OVERRIDES} at this commit never "
                     "applies")
    elif state["fp8_dpa"]:
        state["fp8_dpa_at"] += f", applied at {overrides_fp8_dpa(read, commit)}"
    if state["backend"] == "hybridep":
        found = overrides_hybridep_sms(read, commit)
        if found is not None:
            state.update(sms=found[0], sms_at=found[1])
    return state


def overrides_fp8_dpa(read: Reader, commit: str) -> str | None:
    """Where the perf scripts' overrides at ``commit`` apply a workload base config's
    ``fp8_dot_product_attention`` to the mixed-precision config (``utils/overrides.py``: ``if
    settings.fp8_dot_product_attention is not None: cfg.mixed_precision.fp8_dot_product_attention =
    ...``); None where they do not."""
    tree = _Sources(read, commit).tree(OVERRIDES)
    for node in ast.walk(tree) if tree is not None else ():
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Attribute) and t.attr == FP8_DPA
                                                and ast.unparse(t.value).endswith("mixed_precision")
                                                for t in node.targets):
            return f"{OVERRIDES}:{node.lineno}"
    return None


def overrides_hybridep_sms(read: Reader, commit: str) -> tuple[int, str] | None:
    """The SMs ``_set_common_perf_overrides`` gives HybridEP at ``commit`` (``utils/overrides.py``:
    ``if ... moe_flex_dispatcher_backend == "hybridep": recipe.model.moe_hybridep_num_sms = 32``),
    which every workload base config's run goes through; None where it sets none."""
    tree = _Sources(read, commit).tree(OVERRIDES)
    fn = next((n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "_set_common_perf_overrides"),
              None) if tree is not None else None
    for node in ast.walk(fn) if fn is not None else ():
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Attribute) and t.attr == "moe_hybridep_num_sms"
                                                for t in node.targets):
            known, value = _literal(node.value)
            if known and value is not None:
                return int(value), f"{OVERRIDES}:{node.lineno} (_set_common_perf_overrides, for HybridEP)"
    return None


#: A dense row's citation (``... (config <NAME> @ <commit>)`` in its ``src``).
DENSE_CITATION = re.compile(r"Megatron-Bridge:.*\(config (\w+) @ ([0-9a-f]+)\)")
#: Commits are keyed by their first 9 hex digits (the rows cite 9 or 10).
COMMIT_KEY = 9


def table_for_rows(rows: list[dict], read: Reader) -> tuple[dict, dict]:
    """``{"<name>@<commit>": {"file", "overlap", "overlap_at", "backend", "backend_at", "op_fuser",
    "op_fuser_at", "fp8_dpa", "fp8_dpa_at"[, "cross_entropy", "cross_entropy_at"]}}`` for every MoE
    config the rows cite,
    and ``{"<commit>": {"cross_entropy", "cross_entropy_at"}}`` for every commit any row cites."""
    out, commits = {}, {}
    for row in rows:
        for note in row.get("assumed") or ():
            m = CITATION.search(str(note))
            if m is None or "dispatcher" not in str(note):
                continue
            path, commit, name = m.groups()
            commits.setdefault(commit[:COMMIT_KEY], None)
            key = f"{name}@{commit}"
            if key not in out:
                out[key] = {"file": path, **config_settings(read, path, commit, name)}
        m = DENSE_CITATION.search(str(row.get("src") or ""))
        if m is not None:
            commits.setdefault(m.group(2)[:COMMIT_KEY], None)
    commits = {c: commit_settings(read, c) for c in sorted(commits)}
    return dict(sorted(out.items())), commits


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repo", required=True, help="a clone of NVIDIA-NeMo/Megatron-Bridge (a git directory)")
    p.add_argument("--rows", required=True, nargs="+", help="validation-schema JSONL files whose rows cite configs")
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)

    def read(commit: str, path: str) -> str | None:
        r = subprocess.run(["git", "-C", a.repo, "show", f"{commit}:{path}"], capture_output=True, text=True)
        return r.stdout if r.returncode == 0 else None

    rows = []
    for path in a.rows:
        with open(path) as fh:
            rows += [json.loads(line) for line in fh if line.strip()]
    table, commits = table_for_rows(rows, read)
    with open(a.out, "w") as fh:
        json.dump({"source": "NVIDIA-NeMo/Megatron-Bridge, each config at the commit its rows cite; made by "
                             "scripts/megatron_bridge_moe_dispatch.py", "configs": table, "commits": commits},
                  fh, indent=1)
        fh.write("\n")
    print(f"{len(table)} configs, {sum(v['overlap'] for v in table.values())} with the EP all-to-all overlap on, "
          f"{sum(v['backend'] is not None for v in table.values())} with a flex dispatcher backend, "
          f"{sum(v['op_fuser'] for v in table.values())} with the op fuser, "
          f"{sum(v['fp8_dpa'] for v in table.values())} with FP8 attention; {len(commits)} commits, losses "
          f"{sorted({v['cross_entropy'] for v in commits.values()})}, recipes setting their own: "
          f"{sum('cross_entropy' in v for v in table.values())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
