"""1,000 simulated clients at FEMNIST size with client sampling (issue #43 item 6): time and
memory per round, on Flower's simulation engine (Ray, 1,000 virtual SuperNodes, each reading only
its own saved partition) and on the in-process engine (``simulate(clients_per_round=...)``).

The clients are FEMNIST-sized writers (1x28x28, 62 classes, 226 samples each: LEAF FEMNIST's mean
per writer) from :func:`cosearch.fl.data.femnist_like`, FLuID's FEMNIST CNN and optimiser; 10
clients (1 %) train each round, one straggler per round among them once two of them have been
seen (a client is cut only after a first full round has measured it, so early rounds have none).  Memory is the peak resident
set of this process and every child (Ray's workers included), sampled every 0.1 s.  No target is
set by the issue: the figures are reported.

Run: python -m pytest bench/bench_fl_scale.py --benchmark-only -s
"""

import os
import threading
import time

import pytest

CLIENTS = 1000
PER_ROUND = 10
ROUNDS = 20


class PeakRSS:
    """Peak resident memory of this process and its children, sampled in a thread."""

    def __init__(self, every_s: float = 0.1):
        import psutil
        self.proc, self.every, self.peak = psutil.Process(), every_s, 0
        self._stop = threading.Event()

    def _rss(self) -> int:
        import psutil
        total = 0
        for p in [self.proc, *self.proc.children(recursive=True)]:
            try:
                total += p.memory_info().rss
            except psutil.Error:
                pass
        return total

    def __enter__(self):
        self.peak = self._rss()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()
        return self

    def _run(self):
        while not self._stop.wait(self.every):
            self.peak = max(self.peak, self._rss())

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()
        self.peak = max(self.peak, self._rss())


@pytest.fixture(scope="module")
def partitions(tmp_path_factory):
    from cosearch.fl.data import femnist_like, save_partitions
    t0 = time.perf_counter()
    data = femnist_like(CLIENTS, seed=0)
    d = save_partitions(data, str(tmp_path_factory.mktemp("femnist1000")), source="femnist_like(1000)")
    size = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
    print(f"\n[fl scale] {CLIENTS} FEMNIST-size clients generated and saved in {time.perf_counter() - t0:.1f} s "
          f"({size / 1e6:.0f} MB compressed)")
    return d, data


def test_flower_simulation_engine_1000_clients(benchmark, partitions):
    from cosearch.fl.flower_app import run_flower_simulation
    d, _ = partitions
    cfg = {"dataset": "femnist", "data-dir": d, "num-rounds": ROUNDS, "fraction-fit": PER_ROUND / CLIENTS,
           "fraction-evaluate": 0.0, "min-clients": PER_ROUND, "method": "invariant"}
    with PeakRSS() as mem:
        t0 = time.perf_counter()
        hist = benchmark.pedantic(run_flower_simulation, args=(cfg, CLIENTS), rounds=1, iterations=1)
        wall = time.perf_counter() - t0
    per = [h["server_round_s"] for h in hist]
    steady = per[1:]
    print(f"\n[fl scale] Flower simulation engine, {CLIENTS} SuperNodes, {PER_ROUND} per round, {ROUNDS} rounds: "
          f"{wall:.1f} s in all; round 1 {per[0]:.2f} s (Ray's workers start), rounds 2-{ROUNDS} "
          f"{sum(steady) / len(steady):.2f} s each (min {min(steady):.2f}, max {max(steady):.2f}); "
          f"peak memory {mem.peak / 2**30:.2f} GiB (this process and Ray's)")
    print(f"  rounds with a straggler: {sum(bool(h['keep']) for h in hist)} of {ROUNDS}: "
          + "; ".join(f"r{h['round']} {h['keep']}" for h in hist if h["keep"]))
    assert len(hist) == ROUNDS and all(len(h["partition_ids"]) == PER_ROUND for h in hist)


def test_in_process_engine_1000_clients(benchmark, partitions):
    from cosearch import fl
    _, data = partitions
    with PeakRSS() as mem:
        t0 = time.perf_counter()
        res = benchmark.pedantic(fl.simulate, args=(data,), kwargs=dict(method="invariant", rounds=ROUNDS,
                                                                         clients_per_round=PER_ROUND),
                                 rounds=1, iterations=1)
        wall = time.perf_counter() - t0
    print(f"\n[fl scale] in-process engine, {CLIENTS} clients, {PER_ROUND} per round, {ROUNDS} rounds: "
          f"{wall / ROUNDS:.2f} s a round (training, central and participants' evaluation); peak memory "
          f"{mem.peak / 2**30:.2f} GiB (the 1,000 clients' data held in memory: "
          f"{sum(x.nbytes for x, _ in data.clients) / 2**30:.2f} GiB)")
    print(f"  rounds with a straggler: {sum(bool(m.keep) for m in res.rounds)} of {ROUNDS}: "
          + "; ".join(f"r{m.round} {m.keep}" for m in res.rounds if m.keep))
    assert len(res.rounds) == ROUNDS and all(len(m.client_times_s) == PER_ROUND for m in res.rounds)
