"""``cosearch fl simulate`` / ``cosearch fl report``."""

from __future__ import annotations


def run(a) -> int:
    from .simulation import FLResult, plot, simulate
    if a.flcmd == "simulate":
        res = simulate(a.dataset, clients=a.clients, method=a.method, rounds=a.rounds, seed=a.seed,
                       data_dir=a.data, progress=True, out=a.out)
        print(res.summary())
        print(f"saved {a.out}")
        return 0
    results = [FLResult.from_json(p) for p in a.results]
    for r in results:
        print(r.summary())
    if a.plot:
        plot(results, a.plot)
        print(f"wrote {a.plot}")
    return 0
