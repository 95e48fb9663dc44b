"""``cosearch`` command line.

    cosearch search --model gpt3-175b --chips 1024 --batch 1536 --out results.json
    cosearch report results.json [--plot out.png] [--csv out.csv]
    cosearch compare --model llama2-70b --chips 2048 [--batch 1024]
    cosearch plan --model gpt3-175b --chip A100-80GB --cluster dgx-a100 --nodes 128 --batch 1536 \
                  [--dp 8 --tp 8 --pp 16 --mb 1 --recompute full --virtual 2 --sp --zero 1] [--json]
    cosearch models
    cosearch presets
    cosearch fl simulate --dataset digits --clients 5 --method invariant --rounds 30 --out fl.json
    cosearch fl experiment --dataset digits --methods invariant,ordered,random,none --seeds 10 --out exp.json
    cosearch fl report exp.json --plot exp.png
"""

from __future__ import annotations

import argparse
import sys

__all__ = ["main"]


def _search_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, help="model preset (see `cosearch models`)")
    p.add_argument("--chips", type=int, default=1024, help="number of chips in the cluster")
    p.add_argument("--batch", type=int, default=1536, help="global batch size (sequences)")
    p.add_argument("--no-prune", action="store_true", help="evaluate every design")
    p.add_argument("--refine-top", type=int, default=3, help="designs re-planned with ILP layer times")
    p.add_argument("--serial", action="store_true", help="run in-process instead of a process pool")
    p.add_argument("--zero", default="0,1", help="ZeRO stages to try per design, comma-separated (default: 0,1)")


def _int_list(text: str, name: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in str(text).split(",") if x.strip())
    except ValueError:
        raise ValueError(f"--{name} must be comma-separated integers, got {text!r}") from None


def _run_search(a, baselines: bool):
    from .search import DEFAULT_PLAN_OPTIONS, cosearch
    opts = dict(DEFAULT_PLAN_OPTIONS, zero=_int_list(a.zero, "zero"))
    return cosearch(a.model, None, a.chips, a.batch, "serial" if a.serial else None,
                    prune=not a.no_prune, refine_top=a.refine_top, progress=True, baselines=baselines,
                    plan_options=opts)


def _plan_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, help="model preset (see `cosearch models`)")
    p.add_argument("--chip", default="A100-80GB", help="chip preset (see `cosearch presets`; default A100-80GB)")
    p.add_argument("--cluster", default="dgx-a100",
                   help="cluster preset: dgx-a100, dgx-h100 (sized by --nodes), tpuv4-pod (by --chips), "
                        "or flat (--chips, the chip's own link) (default dgx-a100)")
    p.add_argument("--nodes", type=int, help="nodes of a DGX cluster preset")
    p.add_argument("--chips", type=int, help="chips of a tpuv4-pod or flat cluster")
    p.add_argument("--batch", type=int, required=True, help="global batch size in sequences")
    p.add_argument("--dp", type=int, help="data-parallel degree (omit to search)")
    p.add_argument("--tp", type=int, help="tensor-parallel degree (omit to search)")
    p.add_argument("--pp", type=int, help="pipeline stages (omit to search)")
    p.add_argument("--mb", type=int, help="microbatch size in sequences (omit to search)")
    p.add_argument("--recompute", choices=["none", "selective", "full"], help="recompute mode (omit to search per stage)")
    p.add_argument("--virtual", type=int, help="interleaved virtual stages per pipeline stage (omit to search)")
    p.add_argument("--sp", action="store_true", default=None, help="sequence parallelism (omit to search)")
    p.add_argument("--zero", type=int, choices=[0, 1, 2, 3], help="ZeRO stage (omit to search)")
    p.add_argument("--flash", action="store_true", help="flash attention (no s x s attention activations)")
    p.add_argument("--top", type=int, default=1, help="plans to show when searching (default 1)")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")


def _cluster_from_args(a):
    from . import cluster as cl
    if a.cluster in ("dgx-a100", "dgx-h100"):
        if a.nodes is None:
            raise ValueError(f"--cluster {a.cluster} needs --nodes")
        return cl.preset(a.cluster, a.nodes)
    if a.cluster == "tpuv4-pod":
        if a.chips is None:
            raise ValueError("--cluster tpuv4-pod needs --chips")
        return cl.preset(a.cluster, a.chips)
    if a.cluster == "flat":
        if a.chips is None:
            raise ValueError("--cluster flat needs --chips")
        return cl.Cluster(a.chips)
    raise ValueError(f"unknown --cluster {a.cluster!r}; choose dgx-a100, dgx-h100, tpuv4-pod or flat")


def _print_plan(p, out) -> None:
    print(p.describe(), file=out)
    if p.feasible:
        print("step breakdown (s): " + ", ".join(f"{k[:-2]} {v:.4g}" for k, v in p.breakdown.items()), file=out)
    for s, (n, mm) in enumerate(zip(p.spec.stage_layers, p.memory_per_chip_bytes)):
        rc = p.spec.recompute_per_stage()[s]
        print(f"  stage {s:>3}: {n:>3} layers, recompute {rc:<9} {mm / 2**30:8.2f} GiB of "
              f"{p.hbm_bytes / 2**30:.0f} GiB", file=out)


def _run_plan(a) -> int:
    import json

    from .hardware import preset as chip_preset
    from .models import preset as model_preset
    from .placement import search_plans
    from .plan import PlanSpec, evaluate
    model = model_preset(a.model)
    chip = chip_preset(a.chip)
    cluster = _cluster_from_args(a)
    full = None not in (a.dp, a.tp, a.pp, a.mb)
    if full:
        spec = PlanSpec(a.dp, a.tp, a.pp, a.mb, recompute=a.recompute or "none", virtual_stages=a.virtual or 1,
                        sequence_parallel=bool(a.sp), zero=a.zero or 0, flash_attention=a.flash)
        plans = [evaluate(model, chip, cluster, spec, a.batch)]
        searched = None
    else:
        if a.dp is not None or a.pp is not None:
            raise ValueError("--dp and --pp are searched together with --tp and --mb; give all four to "
                             "evaluate a fixed plan, or fix only --tp/--mb and the options")
        res = search_plans(model, chip, cluster, a.batch, tps=(a.tp,) if a.tp else None,
                           microbatches=(a.mb,) if a.mb else None, recompute=a.recompute,
                           virtual_stages=(a.virtual,) if a.virtual else None,
                           sequence_parallel=(True,) if a.sp else None,
                           zero=(a.zero,) if a.zero is not None else None, flash_attention=a.flash,
                           top_k=a.top, progress=not a.json)
        if not res.feasible:
            raise ValueError(res.reason)
        plans = list(res.plans)
        searched = res
    if a.json:
        d = {"model": model.name, "chip": chip.name, "cluster": cluster.to_dict(), "global_batch": a.batch,
             "plans": [p.to_dict() for p in plans]}
        if searched is not None:
            d.update(configurations=searched.configurations, evaluated=searched.evaluated)
        print(json.dumps(d, indent=1))
    else:
        print(f"{model.name} on {cluster.describe()} of {chip.name}, global batch {a.batch}"
              + (f": searched {searched.configurations:,} configurations ({searched.evaluated:,} evaluated)"
                 if searched is not None else ""))
        for p in plans:
            _print_plan(p, sys.stdout)
    return 0 if plans[0].feasible else 3


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="cosearch", description="Hardware/placement co-search for LLM "
                                 "training and federated learning with Invariant Dropout")
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("search", help="co-search the default accelerator space for a model")
    _search_args(s)
    s.add_argument("--out", default="results.json", help="where to write the results (JSON)")
    s.add_argument("--baselines", action="store_true", help="also run the TPUv4 and Spotlight baselines")
    r = sub.add_parser("report", help="summarise a results file")
    r.add_argument("results")
    r.add_argument("--plot", help="write a throughput-vs-area plot (PNG)")
    r.add_argument("--csv", help="write all rows as CSV")
    r.add_argument("--top", type=int, default=10)
    c = sub.add_parser("compare", help="co-search vs TPUv4 and Spotlight-style baselines")
    _search_args(c)
    c.add_argument("--out", help="also save the results (JSON)")
    pl = sub.add_parser("plan", help="evaluate a fixed training plan, or search the parts not given")
    _plan_args(pl)
    sub.add_parser("models", help="list model presets")
    sub.add_parser("presets", help="list accelerator presets")
    from .fl.cli import add_parsers as add_fl_parsers
    add_fl_parsers(sub)
    a = ap.parse_args(argv)
    try:
        return _dispatch(a)
    except ValueError as exc:
        print(f"cosearch: error: {exc}", file=sys.stderr)
        return 2


def _dispatch(a) -> int:
    if a.cmd == "models":
        from .models import PRESETS
        print(f"{'name':<12} {'layers':>6} {'hidden':>6} {'heads':>5} {'kv':>3} {'ffn':>6} {'seq':>5} {'params':>9}")
        for name, m in PRESETS.items():
            print(f"{name:<12} {m.num_layers:>6} {m.hidden:>6} {m.heads:>5} {m.kv_heads:>3} {m.ffn_hidden:>6} "
                  f"{m.seq_len:>5} {m.num_params()/1e9:>8.2f}B")
        return 0
    if a.cmd == "presets":
        from .hardware import PRESETS
        for chip in PRESETS.values():
            print(f"{chip.name:<6} {chip.tensor_cores:>4} x {chip.systolic_rows}x{chip.systolic_cols} @ "
                  f"{chip.clock_hz/1e9:.2f} GHz = {chip.peak_flops/1e12:.0f} TFLOP/s, HBM "
                  f"{chip.hbm_bytes/2**30:.0f} GiB @ {chip.hbm_bandwidth_Bps/1e12:.2f} TB/s, "
                  f"L2 {chip.l2_bytes/2**20:.0f} MiB, area {chip.area_mm2():.0f} mm^2, {chip.power_w():.0f} W")
        return 0
    if a.cmd == "plan":
        return _run_plan(a)
    if a.cmd == "search":
        res = _run_search(a, a.baselines)
        res.to_json(a.out)
        print(res.table())
        print(f"saved {a.out}")
        return 130 if res.interrupted else 0
    if a.cmd == "compare":
        res = _run_search(a, True)
        print(res.table(top=5))
        if a.out:
            res.to_json(a.out)
        return 130 if res.interrupted else 0
    if a.cmd == "report":
        from .search import Results
        res = Results.from_json(a.results)
        print(res.table(top=a.top))
        if a.csv:
            res.to_csv(a.csv)
            print(f"wrote {a.csv}")
        if a.plot:
            res.plot(a.plot)
            print(f"wrote {a.plot}")
        return 0
    if a.cmd == "fl":
        from .fl import cli as flcli
        return flcli.run(a)
    raise ValueError(f"unknown command {a.cmd}")  # pragma: no cover


if __name__ == "__main__":
    sys.exit(main())
