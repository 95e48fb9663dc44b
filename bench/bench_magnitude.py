"""Magnitude thresholding + invariant-neuron scores over a 25M-parameter update from 5 clients.

Reports GB/s (bytes of the global + client weights and index arrays read), the ratio against the NumPy
implementation of the same definition (cosearch.fl.masks.neuron_scores_numpy), and the
fraction of memory bandwidth reached (reference: np.copyto of the same bytes).
Run: python -m pytest bench/bench_magnitude.py --benchmark-only -s
"""

import time

import numpy as np

from cosearch._kernels.magnitude import neuron_scores
from cosearch.fl.masks import neuron_scores_numpy


def test_magnitude_25m(benchmark):
    P, K, rows = 25_000_000, 5, 5000
    rng = np.random.default_rng(0)
    w = rng.standard_normal(P, dtype=np.float32)
    wk = w[None, :] + 0.01 * rng.standard_normal((K, P), dtype=np.float32)
    e = np.arange(P, dtype=np.int64)
    nin = e // (P // rows)                 # rows of a weight matrix: incoming weights
    nout = rows + e % rows                 # columns: outgoing weights into the next layer
    n = 2 * rows
    neuron_scores(w[:1000], wk[:, :1000], 4, np.float32(1e-8), nin[:1000], nout[:1000], n)
    out = benchmark.pedantic(neuron_scores, args=(w, wk, 4, np.float32(1e-8), nin, nout, n),
                             rounds=3, iterations=1)
    t = benchmark.stats.stats.median
    nbytes = w.nbytes + wk.nbytes + nin.nbytes + nout.nbytes
    t0 = time.perf_counter()
    ref = neuron_scores_numpy(w, wk, 4, np.float32(1e-8), nin, nout, n)
    t_np = time.perf_counter() - t0
    np.testing.assert_allclose(out, ref, rtol=1e-6)
    src = np.ones(nbytes // 4, dtype=np.float32)
    dst = np.empty_like(src)
    np.copyto(dst, src)
    t0 = time.perf_counter()
    for _ in range(3):
        np.copyto(dst, src)
    t_copy = (time.perf_counter() - t0) / 3
    print(f"\n[magnitude] 25M params x {K} clients: kernel {t*1e3:.0f} ms ({nbytes/t/1e9:.1f} GB/s read), "
          f"NumPy {t_np*1e3:.0f} ms, speed-up {t_np/t:.1f}x (target >= 3x); np.copyto of the same "
          f"{nbytes/1e9:.2f} GB: {t_copy*1e3:.0f} ms ({nbytes/t_copy/1e9:.1f} GB/s), kernel/copy time "
          f"{t/t_copy:.2f}x (target within 3x)")
