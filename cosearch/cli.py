"""``cosearch`` command line.

    cosearch search --model gpt3-175b --chips 1024 --batch 1536 --out results.json
    cosearch report results.json [--plot out.png] [--csv out.csv]
    cosearch compare --model llama2-70b --chips 2048 [--batch 1024]
    cosearch models
    cosearch presets
    cosearch fl simulate --dataset digits --clients 5 --method invariant --rounds 30 --out fl.json
    cosearch fl report fl.json --plot fl.png
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
    p.add_argument("--zero1", action="store_true", help="shard optimizer state across data-parallel ranks")


def _run_search(a, baselines: bool):
    from . import memory
    from .search import cosearch
    return cosearch(a.model, None, a.chips, a.batch, "serial" if a.serial else None,
                    prune=not a.no_prune, refine_top=a.refine_top, progress=True, baselines=baselines,
                    mem=memory.MemoryConfig(zero1=a.zero1))


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
    sub.add_parser("models", help="list model presets")
    sub.add_parser("presets", help="list accelerator presets")
    fl = sub.add_parser("fl", help="federated learning with Invariant Dropout")
    flsub = fl.add_subparsers(dest="flcmd", required=True)
    fs = flsub.add_parser("simulate", help="run an in-process FL simulation")
    fs.add_argument("--dataset", default="digits", help="digits (bundled), or femnist/shakespeare/cifar10 with --data")
    fs.add_argument("--data", help="directory with LEAF JSON or CIFAR-10 pickles")
    fs.add_argument("--clients", type=int, default=5)
    fs.add_argument("--method", default="invariant", choices=["invariant", "ordered", "random", "none"])
    fs.add_argument("--rounds", type=int, default=30)
    fs.add_argument("--seed", type=int, default=0)
    fs.add_argument("--out", default="fl.json")
    fr = flsub.add_parser("report", help="summarise FL results")
    fr.add_argument("results", nargs="+")
    fr.add_argument("--plot", help="write accuracy-vs-round / wall-clock plot (PNG)")
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
