"""Fidelity of the performance model against published, measured training runs.

Reads bench/validation/published_runs.json (or $COSEARCH_VALIDATION) and prints, per
run, the published figure vs cosearch's prediction, counted the way the source counts
(Megatron's eq. 3 TFLOP/s per GPU including the recompute pass, or MFU over all chips),
the plan used, and the mean absolute error over the rows whose plan is fully given.
Nothing here is fitted to these rows: the chips' kernel efficiencies come from kernel
benchmarks (cosearch.hardware.EFFICIENCY_SOURCES) and the links' from nccl-tests
(cosearch.cluster).  Run: python -m pytest bench/bench_fidelity.py --benchmark-only -s
"""

import json
import os
from pathlib import Path

import pytest
from targets import check

from cosearch import cluster, hardware, models, placement
from cosearch.plan import PlanSpec, evaluate
from cosearch.runs.published import ENGINE_OF, megatron_tflops, predict_published, published_model

#: The validation set shipped in bench/validation/ (its README gives the sources), or
#: $COSEARCH_VALIDATION.
PATH = Path(os.environ.get("COSEARCH_VALIDATION", Path(__file__).resolve().parent / "validation" / "published_runs.json"))


#: A check that isolates one node, printed apart from the published rows (not in the MAE):
#: BigScience's single-node "max possible TFLOPs" run for BLOOM's width before training
#: (bigscience-workshop/bigscience, train/tr11-176B-ml/chronicles-prequel.md, "Max possible
#: TFLOPs check for NHIDDEN=14336"): 1 node of 8 A100-80GB, 6 layers, tp 8, pp 1, mbs 2,
#: 143.48 and 157.02 TFLOP/s in two runs of one configuration (130.43 and 119.19 s per
#: iteration, which Megatron's eq. 3 matches at global batch 512, as the section's header
#: says; its table's "2048" does not).  Assumed where the source is silent: 64 heads (the
#: prequel's "all NHEADS=64"), vocabulary 250,880, full recompute (every tr11 run).  No
#: pipeline, no network: only kernels and NVLink all-reduces.
NODE_CHECK = dict(layers=6, hidden=14336, heads=64, ffn_hidden=4 * 14336, vocab=250880, seq_len=2048,
                  batch=512, published=(143.48, 157.02))


def _node_check() -> str:
    c = NODE_CHECK
    m = models.ModelConfig("bloom-width-6-layers", c["layers"], c["hidden"], c["heads"], c["ffn_hidden"],
                           c["vocab"], c["seq_len"], position="none")
    p = evaluate(m, hardware.A100_80GB, cluster.dgx_a100(1), PlanSpec(1, 8, 1, 2, recompute="full",
                                                                      flash_attention=False),
                 c["batch"], engine="megatron-deepspeed")
    pred = megatron_tflops(m, c["batch"], p.step_time_s) / 8 / 1e12
    lo, hi = c["published"]
    return (f"[fidelity] one node (BLOOM's width, 6 layers, tp 8, no network; not in the MAE): published "
            f"{lo:.1f}-{hi:.1f} predicted {pred:.1f} TFLOP/s/GPU, error {pred / hi - 1:+.1%} to {pred / lo - 1:+.1%}")


def evaluate_modern(path: Path, releases: str = "all", key=None) -> tuple[dict, list]:
    """Every row of a validation-schema file evaluated or refused, through the library's reader
    (:mod:`cosearch.runs.rows`): per group (``key(row)``, default the source), the signed errors
    on tokens/s per GPU and the refusals by reason; and (error, row id, plan, description,
    source group, row) of every evaluated row.  ``releases="newest"``: one row per plan, the
    newest release's."""
    from modern_runs import Refused, describe, source_group

    from cosearch.runs.rows import newest_per_plan
    key = key or source_group
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    rows = [r for r in rows if r.get("complete", True)]
    if releases == "newest":
        rows = newest_per_plan(rows)
    groups: dict[str, dict] = {}
    evaluated = []
    for row in rows:
        g = groups.setdefault(key(row), {"rows": 0, "errors": [], "refused": {}})
        g["rows"] += 1
        try:
            d = describe(row)
            plan = evaluate(d.model, d.chip, d.cluster, d.spec, d.global_batch, engine=d.engine, mem=d.memory)
        except (Refused, ValueError) as e:
            why = str(e).split(";")[0][:90]
            g["refused"][why] = g["refused"].get(why, 0) + 1
            continue
        if not plan.feasible:
            why = "does not fit HBM in cosearch's memory model (activations or static memory too large)"
            g["refused"][why] = g["refused"].get(why, 0) + 1
            continue
        pred = plan.tokens_per_s / d.cluster.num_chips
        err = pred / d.measured_tok_s_per_chip - 1.0
        g["errors"].append(err)
        evaluated.append((err, row["id"], plan, d, source_group(row), row))
    return groups, evaluated


def _stats(e) -> str:
    return (f"MAE {sum(abs(x) for x in e) / len(e):6.1%}, mean signed {sum(e) / len(e):+6.1%}" if e
            else "no rows evaluated")


def group_targets(groups: dict, what: str) -> list[str]:
    """Issue #39's targets on every group of at least 10 evaluated rows: MAE <= 10 % and
    |mean signed error| <= 5 % (a miss prints a FAILED line and fails the run)."""
    lines = []
    for name, g in sorted(groups.items()):
        e = g["errors"]
        if len(e) >= 10:
            mae, signed = sum(abs(x) for x in e) / len(e), sum(e) / len(e)
            lines.append(f"  {name:<36} {len(e):3d} rows  {_stats(e)}")
            check("fidelity", f"{what} {name}: MAE", mae, at_most=0.10)
            check("fidelity", f"{what} {name}: |mean signed error|", abs(signed), at_most=0.05)
    return lines


def moe_table(path: Path) -> str:
    """The MoE rows (complete ones): per release (every row), then one row per plan at its newest
    release, by source x chip x number format, with every refusal's reason; the share evaluated
    against the target of 90 %."""
    from cosearch.runs.rows import graph_capture_class, group_of, release_label
    groups_all, ev_all = evaluate_modern(path, "all", key=release_label)
    groups, evaluated = evaluate_modern(path, "newest", key=group_of)
    total_all = sum(g["rows"] for g in groups_all.values())
    lines = [f"[fidelity] moe_runs.jsonl: {total_all} complete rows, {len(ev_all)} evaluated "
             f"({len(ev_all) / max(total_all, 1):.0%}); per software release (every row):"]
    for name, g in sorted(groups_all.items()):
        lines.append(f"  release {name:<10} rows {g['rows']:3d}, evaluated {len(g['errors']):3d}; {_stats(g['errors'])}")
    refused: dict[str, int] = {}
    for g in groups_all.values():
        for why, n in g["refused"].items():
            refused[why] = refused.get(why, 0) + n
    for why, n in sorted(refused.items(), key=lambda x: -x[1]):
        lines.append(f"      refused {n:3d}: {why}")
    # cosearch prices GPU time only: where the host launches kernels (no whole-iteration CUDA
    # graph) and a dropless dispatcher waits on it for token counts, the host's time is missing
    by_capture, _ = evaluate_modern(path, "all", key=lambda r: (graph_capture_class(r), r["model"]))
    lines.append("[fidelity] MoE by what CUDA graphs capture, then by model (every row; cosearch prices GPU time, "
                 "no host time):")
    for capture in sorted({c for c, _m in by_capture}, key=lambda c: -sum(
            g["rows"] for (c2, _m), g in by_capture.items() if c2 == c)):
        models = {m: g for (c2, m), g in by_capture.items() if c2 == capture}
        errors = [e for g in models.values() for e in g["errors"]]
        lines.append(f"  {capture:<46} rows {sum(g['rows'] for g in models.values()):3d}, evaluated "
                     f"{len(errors):3d}; {_stats(errors)}")
        for m, g in sorted(models.items()):
            lines.append(f"      {m:<42} rows {g['rows']:3d}, evaluated {len(g['errors']):3d}; {_stats(g['errors'])}")
    total = sum(g["rows"] for g in groups.values())
    lines.append(f"[fidelity] MoE, one row per plan at its newest release ({total} plans, {len(evaluated)} evaluated):")
    for name, g in sorted(groups.items()):
        lines.append(f"  {name:<36} rows {g['rows']:3d}, evaluated {len(g['errors']):3d}; {_stats(g['errors'])}")
    for err, rid, plan, _d, _g, _r in sorted(evaluated, key=lambda x: -abs(x[0]))[:5]:
        bd = ", ".join(f"{k.removesuffix('_s')} {v:.2f}" for k, v in plan.breakdown.items() if v > 0.005)
        lines.append(f"      worst {err:+6.1%} {rid}: {plan.spec.describe()} step {plan.step_time_s:.2f} s ({bd})")
    check("fidelity", "MoE rows evaluated (share of complete rows)", len(ev_all) / max(total_all, 1), at_least=0.90)
    lines += group_targets(groups, "MoE newest")
    return "\n".join(lines)


def free_search_gains(evaluated) -> str:
    """The free plan search's predicted speed-up over each vendor recipe (NeMo / Megatron-Bridge
    rows), with the recipe's chip, cluster, batch, engine, precision, scaling recipe and ZeRO stage, everything
    else searched (tp, pp, cp 1/2, microbatch, recompute per stage, virtual stages, SP).  Both
    sides are cosearch predictions, so a gain well above 1 says the model favours plans the vendor
    did not pick."""
    gains = []
    for _err, rid, plan, d, group, _row in evaluated:
        if group not in ("NeMo", "Megatron-Bridge"):
            continue
        res = placement.search_plans(d.model, d.chip, d.cluster, d.global_batch, engine=d.engine, mem=d.memory,
                                     zero=(d.spec.zero,),
                                     precision=(d.spec.precision,), scaling_recipe=d.spec.scaling_recipe,
                                     flash_attention=True,
                                     context_parallel=(1, 2), virtual_stages=(1, 2, 4))
        if not res.feasible:
            continue
        gains.append((plan.step_time_s / res.best.step_time_s, rid, plan.spec.describe(), res.best.spec.describe(),
                      explain_gain(plan, res.best)))
    if not gains:
        return "[fidelity] free search vs vendor recipes: no rows"
    gains.sort()
    over = [g for g in gains if g[0] > 1.10]
    lines = [f"[fidelity] free search vs {len(gains)} NeMo/Megatron-Bridge recipes (predicted step of the recipe / "
             f"of the best searched plan): median {gains[len(gains) // 2][0]:.2f}x, max {gains[-1][0]:.2f}x, "
             f"{len(over)} above 1.10x, each with where the time goes (one line per distinct recipe -> plan):"]
    seen: dict[tuple, list] = {}
    for g, rid, was, best, why in over:
        seen.setdefault((was, best, why), []).append((g, rid))
    for (was, best, why), hits in sorted(seen.items(), key=lambda kv: -max(h[0] for h in kv[1])):
        g, rid = max(hits)
        more = f" (+{len(hits) - 1} other releases)" if len(hits) > 1 else ""
        lines.append(f"      {g:.2f}x {rid}{more}: recipe {was} -> {best}\n          {why}")
    return "\n".join(lines)


def explain_gain(recipe, best) -> str:
    """Where a searched plan's predicted gain over a recipe comes from: the step-time terms that
    shrink most (the critical pipeline stage carries the LM head unless the recipe balances the
    split, so forward/backward shrink when the pipeline gets shallower or the layers per stage
    grow; TP communication that the recipe leaves exposed; the bubble), and how full the
    searched plan's HBM is (a plan at the edge of memory may not fit a real allocator)."""
    delta = {k: recipe.breakdown[k] - best.breakdown.get(k, 0.0) for k in recipe.breakdown}
    saved = recipe.step_time_s - best.step_time_s
    terms = sorted(((v, k) for k, v in delta.items() if v > 0.02 * saved), reverse=True)[:3]
    parts = ", ".join(f"{k.removesuffix('_s')} -{v:.2f} s" for v, k in terms)
    fwd_bwd = delta.get("forward_s", 0.0) + delta.get("backward_s", 0.0)
    notes = []
    if fwd_bwd > 0.3 * saved and recipe.spec.pp > best.spec.pp:
        layers = recipe.spec.stage_layers
        notes.append(f"the recipe's critical stage (of {len(layers)}, {max(layers)} layers, the last also the LM head) "
                     f"does more than its share")
    mem = max(best.memory_per_chip_bytes) / best.hbm_bytes
    if mem > 0.9:
        notes.append(f"the searched plan fills {mem:.0%} of HBM")
    return f"saved {saved:.2f} s of {recipe.step_time_s:.2f}: {parts}" + ("; " + "; ".join(notes) if notes else "")


def clock_sensitivity(evaluated) -> str:
    """Every source x chip x number-format group's error with its chip's sustained clock at each
    sourced alternative (cosearch.hardware.SUSTAINED_CLOCK_ALTERNATIVES: the chosen value, the
    datasheet clock and the other published measurements), the rest of the model unchanged, so a
    reader sees how much of each group's accuracy rests on that one judgment.  ``evaluated``:
    :func:`evaluate_modern`'s evaluated rows (memory does not depend on the clock, so the rows that
    fit are the same at every clock).  Chips whose attention kernels hold their own clock
    (``KernelEfficiency.attention_clock``) also print the group at the chosen clock for every kernel,
    which shows how much rests on the per-kernel clocks."""

    from cosearch.hardware import SUSTAINED_CLOCK_ALTERNATIVES
    from cosearch.runs.rows import group_of
    chosen = {alts[0][1]: name for name, alts in SUSTAINED_CLOCK_ALTERNATIVES.items()}
    by_group: dict[str, list] = {}
    for _err, _rid, _plan, d, _src, row in evaluated:
        fam = chosen.get(d.chip.efficiency.sustained_clock)
        if fam is not None:
            by_group.setdefault(group_of(row), []).append((d, fam))
    lines = ["[fidelity] sustained-clock sensitivity (MAE / mean signed error of each group at each sourced clock; "
             "where the chip prices attention at its own clock, also the chosen clock for every kernel):"]
    for g, items in sorted(by_group.items()):
        fam = items[0][1]
        cells = []
        alts = [(label, clock, False) for label, clock in SUSTAINED_CLOCK_ALTERNATIVES[fam]]
        if any(d.chip.efficiency.attention_clock > 0.0 for d, _f in items):
            alts.append(("one clock: attention at the chosen GEMM clock too", SUSTAINED_CLOCK_ALTERNATIVES[fam][0][1],
                         True))
        for label, clock, one in alts:
            changes = dict(sustained_clock=clock, **(dict(attention_clock=0.0, attention_clock_fa2=0.0) if one else {}))
            cell = _errors_at([d for d, _f in items], changes)
            if cell:
                cells.append(f"{label}: {cell}")
        lines.append(f"  {g} ({len(items)} evaluated rows, {fam}):")
        lines += [f"      {c}" for c in cells]
    return "\n".join(lines)


def rate_sensitivity(evaluated) -> str:
    """Every Blackwell FP8 / NVFP4 group's error with the chip's low-precision GEMM rate over bf16 at
    each sourced alternative (cosearch.hardware.LOW_PRECISION_RATE_ALTERNATIVES: the chosen CUTLASS
    ratios, and Transformer Engine's cuBLAS ratios on a B300), the rest of the model unchanged: the
    clock report's counterpart for the other judgment the low-precision groups rest on."""

    from cosearch.hardware import LOW_PRECISION_RATE_ALTERNATIVES
    from cosearch.runs.rows import group_of
    by_group: dict[str, list] = {}
    for _err, _rid, _plan, d, _src, row in evaluated:
        eff = d.chip.efficiency
        # the rates' family: the one whose chosen rate the chip's own is
        own = eff.fp8_rate if d.spec.precision == "fp8" else eff.fp4_rate
        key = next((k for k, alts in LOW_PRECISION_RATE_ALTERNATIVES.items()
                    if k.startswith(d.spec.precision) and alts[0][1] == own), None)
        if key is not None:
            by_group.setdefault((group_of(row), key), []).append(d)
    lines = ["[fidelity] low-precision GEMM-rate sensitivity (MAE / mean signed error of each Blackwell FP8 / NVFP4 "
             "group at each sourced FP8-or-NVFP4 / BF16 GEMM rate):"]
    for (g, key), items in sorted(by_group.items()):
        lines.append(f"  {g} ({len(items)} evaluated rows):")
        field = "fp8_rate" if key == "fp8" else "fp4_rate"
        for label, rate in LOW_PRECISION_RATE_ALTERNATIVES[key]:
            cell = _errors_at(items, {field: rate})
            if cell:
                lines.append(f"      {label}: {cell}")
    return "\n".join(lines)


def _errors_at(items, changes: dict) -> str:
    """MAE / mean signed error of the runs ``items`` (their descriptions) with their chips'
    kernel efficiencies changed by ``changes``, over the plans that fit; "" where none does."""
    from dataclasses import replace
    errs = []
    for d in items:
        chip = d.chip.with_(efficiency=replace(d.chip.efficiency, **changes))
        p = evaluate(d.model, chip, d.cluster, d.spec, d.global_batch, engine=d.engine, mem=d.memory)
        if p.feasible:
            errs.append(p.tokens_per_s / d.cluster.num_chips / d.measured_tok_s_per_chip - 1.0)
    return f"{sum(abs(e) for e in errs) / len(errs):.1%} / {sum(errs) / len(errs):+.1%}" if errs else ""


def modern_table(path: Path) -> str:
    groups, evaluated = evaluate_modern(path)
    total = sum(g["rows"] for g in groups.values())
    lines = [f"[fidelity] modern_runs.jsonl: {total} rows, {len(evaluated)} evaluated "
             f"({len(evaluated) / total:.0%}); tokens/s per GPU, predicted vs measured:"]
    for name, g in sorted(groups.items()):
        e = g["errors"]
        stats = (f"MAE {sum(abs(x) for x in e) / len(e):6.1%}, mean signed {sum(e) / len(e):+6.1%}" if e
                 else "no rows evaluated")
        lines.append(f"  {name:<16} rows {g['rows']:3d}, evaluated {len(e):3d}, refused {g['rows'] - len(e):3d}; {stats}")
        for why, n in sorted(g["refused"].items(), key=lambda x: -x[1]):
            lines.append(f"      refused {n:3d}: {why}")
        worst = sorted((x for x in evaluated if x[4] == name), key=lambda x: -abs(x[0]))[:3]
        for err, rid, plan, d, _g, _r in worst:
            bd = ", ".join(f"{k.removesuffix('_s')} {v:.2f}" for k, v in plan.breakdown.items() if v > 0.005)
            lines.append(f"      worst {err:+6.1%} {rid}: {plan.spec.describe()} [{d.engine.name}] step "
                         f"{plan.step_time_s:.2f} s ({bd})")
    from cosearch.runs.rows import group_of
    by_group: dict[str, dict] = {}          # the same evaluated rows, by source x chip x number format
    for err, *_rest, row in evaluated:
        by_group.setdefault(group_of(row), {"errors": []})["errors"].append(err)
    lines.append("[fidelity] by source x chip x number format (groups of >= 10 rows; targets MAE <= 10 %, "
                 "|mean signed| <= 5 %):")
    lines += group_targets(by_group, "dense")
    lines.append(clock_sensitivity(evaluated))
    lines.append(rate_sensitivity(evaluated))
    lines.append(free_search_gains(evaluated))
    return "\n".join(lines)


def cards_table(path: Path) -> str:
    """Runs outside the validation set (bench/validation/BRIDGE_CARDS.md: Megatron-Bridge's model
    verification cards, measured after every release the validation rows hold, each read with the
    config of its own recipe at its own commit): every row's error, and per group, by CUDA graph
    capture and over all.  A check only: no constant and no reading rule is chosen on them, and
    no target is set on so few rows."""
    from cosearch.runs.rows import graph_capture_class, group_of
    groups, evaluated = evaluate_modern(path, "all", key=group_of)
    total = sum(g["rows"] for g in groups.values())
    lines = [f"[fidelity] runs outside the validation set ({path.name}): {total} rows, {len(evaluated)} evaluated"]
    for err, rid, plan, _d, _g, row in sorted(evaluated, key=lambda x: x[1]):
        lines.append(f"  {err:+6.1%} {rid:<64} {graph_capture_class(row)[:26]:<26} {plan.spec.describe()}")
    for name, g in sorted(groups.items()):
        lines.append(f"  {name:<36} rows {g['rows']:3d}, evaluated {len(g['errors']):3d}; {_stats(g['errors'])}")
        for why, n in g["refused"].items():
            lines.append(f"      refused {n}: {why}")
    by_capture: dict[str, list] = {}
    for err, _rid, _p, _d, _g, row in evaluated:
        by_capture.setdefault(graph_capture_class(row), []).append(err)
    for capture, errs in sorted(by_capture.items(), key=lambda x: -len(x[1])):
        lines.append(f"  captured: {capture:<36} rows {len(errs):3d}; {_stats(errs)}")
    lines.append(f"  all {len(evaluated)} evaluated: {_stats([e for e, *_ in evaluated])}")
    return "\n".join(lines)


def ironwood_table(path: Path) -> str:
    """Measured MaxText runs on TPU7x (Ironwood; bench/validation/ironwood/IRONWOOD.md), outside the
    validation set, through the library's checker (``cosearch runs check`` on the config-file CSV:
    each recipe's own MaxText words read by the MaxText reader on the chip's two JAX devices,
    priced on the TPU7x preset, its datasheet and one public GEMM sweep, on the ``tpu7x-pod``
    slice).  A check of a chip predicted from its specification: nothing is chosen on these runs."""
    from cosearch.runs.check import check_runs, read_measured
    res = check_runs(path)
    moe = {rid for rid, _g, rc in read_measured(path) if not isinstance(rc, str) and rc.model is not None
           and rc.model.moe}
    lines = [f"[fidelity] TPU7x (Ironwood) MaxText runs outside the validation set ({path.parent.name}/{path.name}): "
             f"{len(res.runs)} priced, {len(res.refused)} refused"]
    groups: dict[str, list] = {}
    for r in res.runs:
        kind = ("MoE " if r.id in moe else "dense ") + r.group.split()[-1]
        groups.setdefault(kind, []).append(r.error)
        lines.append(f"  {r.error:+6.1%} {r.id:<40} {r.plan}")
    for rid, why in res.refused:
        lines.append(f"  refused {rid}: {why[:110]}")
    for kind, errs in sorted(groups.items()):
        lines.append(f"  {kind:<12} {len(errs):2d} runs; {_stats(errs)}")
    return "\n".join(lines)


def test_fidelity(benchmark):
    runs = json.loads(PATH.read_text())["runs"] if PATH.exists() else pytest.skip(f"no {PATH}")
    rows, errors, by_name = [], [], {}
    groups: dict[str, dict] = {}           # per source: rows, signed errors, refusals by reason
    for run in runs:
        src = groups.setdefault(run["source"].split()[0], {"rows": 0, "errors": [], "refused": {}})
        src["rows"] += 1
        plan, how = predict_published(run, by_name)
        meas = run["measured"]
        if plan is None or not plan.feasible:
            why = how if plan is None else plan.reason
            src["refused"][why] = src["refused"].get(why, 0) + 1
            rows.append(f"{run['name']:<24} not predicted ({why})")
            continue
        m = published_model(run["name"], by_name[run["name"]])
        if "tflops_per_gpu" in meas and "step_time_s" in meas:
            pub = meas["tflops_per_gpu"]
            pred = megatron_tflops(m, run["plan"]["global_batch"], plan.step_time_s) / plan.num_chips / 1e12
            unit = "TFLOP/s/GPU (Megatron eq. 3)"
        elif "mfu" in meas:
            pub, pred, unit = meas["mfu"], plan.mfu, "MFU"
        else:
            pub = meas.get("tflops_per_gpu_up_to") or meas.get("tflops_per_gpu")
            pred = plan.hfu * plan.num_chips * hardware.A100_80GB.peak_flops / plan.num_chips / 1e12
            unit = "TFLOP/s/GPU"
        err = (pred - pub) / pub
        src["errors"].append(err)
        full = how == "plan as published"
        if full:
            errors.append(abs(err))
        eng = ENGINE_OF.get(run["name"], "megatron-lm")
        eng = getattr(eng, "name", eng)
        rows.append(f"{run['name']:<24} published {pub:8.3f} predicted {pred:8.3f} {unit:<28} error {err:+6.1%}"
                    f"  [{how}; {eng}] {plan.spec.describe()}  step {plan.step_time_s:.2f} s")
    mae = sum(errors) / len(errors) if errors else float("nan")
    benchmark.pedantic(lambda: None, rounds=1, iterations=1)
    print("\n[fidelity] published vs predicted:\n  " + "\n  ".join(rows))
    print(f"[fidelity] mean absolute error over {len(errors)} fully-given plan(s): {mae:.1%} (target <= 10%)")
    check("fidelity", "published runs' MAE, fully given plans", mae, at_most=0.10)
    print("[fidelity] per source (every evaluated row, plans partly searched included):")
    for name, g in groups.items():
        e = g["errors"]
        refused = "; ".join(f"{n} {why}" for why, n in g["refused"].items()) or "none"
        stats = (f"MAE {sum(abs(x) for x in e) / len(e):.1%}, mean signed {sum(e) / len(e):+.1%}" if e
                 else "no errors")
        print(f"  {name:<12} rows {g['rows']}, evaluated {len(e)}, refused {g['rows'] - len(e)} "
              f"({refused}); {stats}")
    modern = PATH.with_name("modern_runs.jsonl")
    if modern.exists():
        print(modern_table(modern))
    moe = PATH.with_name("moe_runs.jsonl")
    if moe.exists():
        print(moe_table(moe))
    cards = PATH.with_name("bridge_cards.jsonl")
    if cards.exists():
        print(cards_table(cards))
    ironwood = PATH.with_name("ironwood") / "runs.csv"
    if ironwood.exists():
        print(ironwood_table(ironwood))
    print(_node_check())
