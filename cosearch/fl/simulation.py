"""In-process federated learning simulation with heterogeneous client speeds.

Round 1 is plain FedAvg.  From round 2 the :class:`~cosearch.fl.profiling.StragglerProfiler`
picks stragglers and their kept fraction ``p``; the chosen :mod:`dropout policy
<cosearch.fl.masks>` picks which neurons each straggler keeps; stragglers train the
extracted sub-model, everyone returns weights, and :func:`~cosearch.fl.submodel.merge_updates`
averages them per element.  A client's simulated round time is ``p * latency`` (its
full-model latency for that round, from the profile); the round's time is the slowest
client's.  Invariant Dropout observes the non-stragglers' returned weights each round.
"""

from __future__ import annotations

import copy
import os
from dataclasses import asdict, dataclass, field

import numpy as np

from .._json import dump_json, load_json
from .data import FLData, load_dataset
from .masks import policy as make_policy
from .models import build_model
from .profiling import DEFAULT_WIDTHS, StragglerProfiler
from .submodel import extract_submodel, groups, merge_updates

__all__ = ["simulate", "FLResult", "RoundMetrics"]


@dataclass
class RoundMetrics:
    round: int
    accuracy: float
    loss: float
    round_time_s: float
    wall_clock_s: float
    p: dict = field(default_factory=dict)
    invariant_counts: dict = field(default_factory=dict)
    rejected: list = field(default_factory=list)


@dataclass
class FLResult:
    method: str
    dataset: str
    model: str
    clients: int
    rounds: list[RoundMetrics]
    config: dict = field(default_factory=dict)

    def to_dict(self):
        return {"method": self.method, "dataset": self.dataset, "model": self.model, "clients": self.clients,
                "config": self.config, "rounds": [asdict(r) for r in self.rounds]}

    def to_json(self, path=None) -> str:
        return dump_json(self.to_dict(), path)

    @classmethod
    def from_json(cls, source) -> FLResult:
        d = load_json(source)
        rounds = [RoundMetrics(**{**r, "p": {int(k): v for k, v in r["p"].items()}}) for r in d["rounds"]]
        return cls(d["method"], d["dataset"], d["model"], d["clients"], rounds, d.get("config", {}))

    def summary(self) -> str:
        last = self.rounds[-1]
        return (f"{self.method:>9}: final accuracy {last.accuracy:.3f}, loss {last.loss:.3f}, "
                f"wall clock {last.wall_clock_s:.1f} s over {len(self.rounds)} rounds, "
                f"mean round {np.mean([r.round_time_s for r in self.rounds]):.2f} s")


def plot(results: list[FLResult], path=None):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    for r in results:
        a.plot([m.round for m in r.rounds], [m.accuracy for m in r.rounds], label=r.method)
        b.plot([m.wall_clock_s for m in r.rounds], [m.accuracy for m in r.rounds], label=r.method)
    a.set_xlabel("round")
    b.set_xlabel("simulated wall clock (s)")
    for ax in (a, b):
        ax.set_ylabel("global accuracy")
        ax.legend()
    fig.tight_layout()
    if path:
        fig.savefig(path, dpi=120)
        plt.close(fig)
    return fig


def _evaluate(model, x, y):
    import torch
    import torch.nn.functional as F
    model.eval()
    with torch.no_grad():
        out = model(torch.as_tensor(x))
        yt = torch.as_tensor(y)
        return float((out.argmax(1) == yt).float().mean()), float(F.cross_entropy(out, yt))


def _train(model, x, y, epochs, lr, batch_size, gen):
    import torch
    import torch.nn.functional as F
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    xt, yt = torch.tensor(np.asarray(x)), torch.tensor(np.asarray(y))
    for _ in range(epochs):
        perm = torch.randperm(len(yt), generator=gen)
        for i in range(0, len(yt), batch_size):
            idx = perm[i:i + batch_size]
            opt.zero_grad()
            F.cross_entropy(model(xt[idx]), yt[idx]).backward()
            opt.step()
    return model


def simulate(dataset: str | FLData = "digits", clients: int = 5, method: str = "invariant", rounds: int = 30,
             model: str = "auto", latency_s=None, local_epochs: int = 1, lr: float = 0.1, batch_size: int = 32,
             widths=DEFAULT_WIDTHS, straggler_fraction: float | None = None, seed: int = 0,
             data_dir: str | None = None, progress: bool = False, out: str | os.PathLike | None = None) -> FLResult:
    """Run ``rounds`` rounds of FL with ``method`` in invariant/ordered/random/none.

    ``model``: mlp, femnist_cnn, cifar_vgg, char_lstm, or "auto" (the FLuID model of the dataset;
    mlp for digits).
    ``latency_s``: per-client full-model round time in seconds — a list (fixed), or a list
    of per-round lists (dynamic stragglers); default: client i takes ``1 + i * 0.25`` s,
    the last client 2.5x the first.
    """
    import torch

    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    data = dataset if isinstance(dataset, FLData) else load_dataset(dataset, clients, data_dir, seed)
    n = len(data.clients)
    if latency_s is None:
        latency_s = [1.0 + 0.25 * i for i in range(n - 1)] + [2.5]
    lat = np.asarray(latency_s, dtype=float)
    if lat.ndim == 1:
        lat = np.tile(lat, (rounds, 1))
    if lat.shape[1] != n or np.any(lat <= 0):
        raise ValueError(f"latency_s must give a positive time for each of {n} clients")
    if model == "auto":
        model = {"femnist": "femnist_cnn", "cifar10": "cifar_vgg", "shakespeare": "char_lstm"}.get(data.name, "mlp")
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    rng = np.random.default_rng(seed)
    net = build_model(model, data.in_shape, data.classes)
    example = torch.as_tensor(data.clients[0][0][:2])
    gs = groups(net, example)
    pol = make_policy(method)
    prof = StragglerProfiler(n, widths, straggler_fraction)
    metrics: list[RoundMetrics] = []
    clock = 0.0
    it = range(1, rounds + 1)
    if progress:
        from tqdm.auto import tqdm
        it = tqdm(it, desc=f"FL {method}", unit="round")
    for r in it:
        plan = {c: 1.0 for c in range(n)} if r == 1 or method == "none" else prof.plan()
        gstate = {k: v.clone() for k, v in net.state_dict().items()}
        updates, full_states, times = [], [], {}
        for c in range(n):
            p = plan[c]
            masks = pol.masks(p, gs, rng) if p < 1.0 else {g.name: np.ones(g.units, dtype=bool) for g in gs}
            local = extract_submodel(net, masks, example) if p < 1.0 else copy.deepcopy(net)
            x, y = data.clients[c]
            _train(local, x, y, local_epochs, lr, batch_size, gen)
            st = local.state_dict()
            updates.append((st, masks, len(y)))
            if p >= 1.0:
                full_states.append(st)
            times[c] = lat[r - 1, c] * p
        prof.observe(times, plan)
        new, rejected = merge_updates(gstate, updates, gs)
        net.load_state_dict(new)
        pol.observe(gstate, full_states)
        acc, loss = _evaluate(net, *data.test)
        rt = max(times.values())
        clock += rt
        metrics.append(RoundMetrics(r, acc, loss, rt, clock, {c: p for c, p in plan.items() if p < 1.0},
                                    dict(getattr(pol, "invariant_counts", {})), [str(x) for x in rejected]))
        if progress:
            it.set_postfix(acc=f"{acc:.3f}")
    res = FLResult(method, data.name, model, n, metrics,
                   {"rounds": rounds, "local_epochs": local_epochs, "lr": lr, "seed": seed,
                    "latency_s": lat.tolist(), "widths": list(widths)})
    if out is not None:
        res.to_json(out)
    return res
