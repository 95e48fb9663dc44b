"""The frontier table (issue #42): for Llama 3 405B, DeepSeek-V3 and Qwen3-235B-A22B at 8,192 and
32,768 chips, the 52 systems of :func:`cosearch.reproduce.frontier_systems` (the seven fixed ones
and 45 designs around the GB200: NVLink domains of 8-144 x 50-200 GB/s of scale-out x three
HBM configurations), each with its exact best plan over FP8/bf16, tp, pp, cp, ep, virtual stages
and recompute.  Prints the CPU seconds of each (model, chips) against the target of 10
CPU-minutes for one model at 8k chips, the configurations the plan search visited against those
it skipped by its bounds (pruning), and the table.

Run: python -m pytest bench/bench_frontier.py --benchmark-only -s
"""

import time

from targets import check

from cosearch import frontier as fr
from cosearch import reproduce
from cosearch.placement import search_plans


def _pruning(model, system, chips, batch):
    """(configurations in the plan space, configurations the exact search evaluated) for one system."""
    from cosearch.models import preset
    m = preset(model)
    opts = fr.default_plan_options(m, system.chip, chips)
    r = search_plans(m, system.chip, system.cluster(chips), batch, **opts)
    return r.configurations, r.evaluated


def test_frontier_table(benchmark):
    systems = reproduce.frontier_systems()
    lines = []

    def run():
        for model in reproduce.FRONTIER_MODELS:
            for chips in reproduce.FRONTIER_CHIPS:
                t0 = time.process_time()
                rows = reproduce.frontier((model,), (chips,), systems=systems, echo=None)
                dt = time.process_time() - t0
                total, evaluated = _pruning(model, fr.fixed_system("gb200-nvl72"), chips, chips // 2)
                lines.append(f"[frontier] {model} on {chips} chips: {len(systems)} systems in {dt:.1f} CPU-s "
                             f"({dt / 600:.3f} of the 10 CPU-min target); GB200 NVL72's plan search evaluated "
                             f"{evaluated:,} of {total:,} configurations ({evaluated / max(total, 1):.1%})")
                if chips == 8192:
                    check("frontier", f"{model} at 8k chips: CPU seconds", dt, at_most=600.0)
                lines.extend(r.line() for r in rows)

    benchmark.pedantic(run, rounds=1, iterations=1)
    print("\n" + "\n".join(lines))
