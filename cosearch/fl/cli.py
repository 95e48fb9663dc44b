"""``cosearch fl simulate | experiment | report``."""

from __future__ import annotations

import argparse
import os
import sys

from .names import MODEL_NAMES  # the models' names, without importing torch


def _common(p: argparse.ArgumentParser) -> None:
    from .data import DATASETS
    p.add_argument("--dataset", default="digits", choices=DATASETS,
                   help="digits (bundled), or femnist/shakespeare (LEAF folder) / cifar10 (batches) with --data "
                        "(default: digits)")
    p.add_argument("--data", help="folder with LEAF JSON (train/ and test/, or all_data), FLuID's client files "
                                  "(<i>_train/_test.json[.gz]) or CIFAR-10 batches")
    p.add_argument("--clients", type=int, default=5, help="number of clients (default: 5)")
    p.add_argument("--rounds", type=int, default=30, help="federated rounds (default: 30)")
    p.add_argument("--model", default="auto", choices=["auto", *MODEL_NAMES],
                   help="model; auto = the dataset's FLuID model (mlp for digits) (default: auto)")
    p.add_argument("--optimizer", choices=["sgd", "adam"], help="client optimizer (default: the dataset's, FLuID's)")
    p.add_argument("--lr", type=float, help="client learning rate (default: the dataset's, FLuID's)")
    p.add_argument("--batch-size", type=int, help="client batch size (default: the dataset's, FLuID's)")
    p.add_argument("--local-epochs", type=int, default=1, help="local epochs per round (default: 1)")
    p.add_argument("--alpha", type=float, default=0.5,
                   help="Dirichlet label skew for digits/cifar10; 0 = IID (default: 0.5)")
    p.add_argument("--devices", help="CSV of measured full-model round times (client,round,seconds); "
                                     "default: illustrative device profiles")
    p.add_argument("--spread", type=float, default=2.5,
                   help="slowest/fastest compute ratio of the default device profiles (default: 2.5)")
    p.add_argument("--noise", type=float, default=0.05,
                   help="per-round round-time noise (coefficient of variation) of the default profiles "
                        "(default: 0.05)")
    p.add_argument("--straggler-fraction", type=float,
                   help="fraction of clients treated as stragglers (default: one straggler, as FLuID)")
    p.add_argument("--samples-per-round", type=int, default=None,
                   help="each client trains each round on this many of its samples, a fresh random subset "
                        "(default: all of them, FLuID's setting)")
    p.add_argument("--clients-per-round", type=int, default=None,
                   help="client sampling: clients drawn to train each round; the stragglers are the slowest "
                        "of them (default: every client, as FLuID)")
    p.add_argument("--stop-at-accuracy", type=float, default=None,
                   help="early stopping: end a run after the first round whose accuracy reaches this (0-1)")
    p.add_argument("--keep-rule", choices=["model", "fluid", "ceil"], default="model",
                   help="straggler keep fraction: model (predicted sub-model time within the target), "
                        "fluid (FLuID's buckets) or ceil (cosearch 0.1)")
    p.add_argument("--keep-confidence", type=float, default=None,
                   help="with --keep-rule model: the probability with which a straggler's keep is predicted "
                        "to finish within the target, 0.5 to 1 (default 0.6; 0.5: no margin)")


def add_parsers(sub) -> None:
    from .masks import METHODS
    fl = sub.add_parser("fl", help="federated learning with Invariant Dropout",
                        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    flsub = fl.add_subparsers(dest="flcmd", required=True)
    fs = flsub.add_parser("simulate", help="run one in-process FL simulation")
    _common(fs)
    fs.add_argument("--method", default="invariant", choices=METHODS, help="dropout method (default: invariant)")
    fs.add_argument("--seed", type=int, default=0, help="seed of data split, weights and noise (default: 0)")
    fs.add_argument("--out", default="fl.json", help="result JSON (default: fl.json)")
    fs.add_argument("--force", action="store_true", help="replace an existing --out file")
    fe = flsub.add_parser("experiment", help="paired multi-seed comparison of methods, with statistics")
    _common(fe)
    fe.add_argument("--methods", default="invariant,ordered,random,none",
                    help=f"comma-separated, from {', '.join(METHODS)} (default: invariant,ordered,random,none)")
    fe.add_argument("--seeds", type=int, default=10, help="paired seeds per method (default: 10)")
    fe.add_argument("--seed-offset", type=int, default=0,
                    help="first seed (seeds offset, offset+1, ...), to add seeds to an experiment (default: 0)")
    fe.add_argument("--workers", type=int, help="worker processes (default: min(2, CPUs))")
    fe.add_argument("--target", type=float, help="target accuracy in [0, 1] for time-to-target "
                                                 "(default: 95%% of the lowest mean final accuracy)")
    fe.add_argument("--out", default="exp.json", help="experiment JSON, saved after every run (default: exp.json)")
    fe.add_argument("--resume", action="store_true", help="continue the runs already in --out")
    fe.add_argument("--force", action="store_true", help="replace an existing --out file")
    fg = flsub.add_parser("generate", help="write a LEAF-format folder (or CIFAR-10 batches) generated offline "
                                           "from real data")
    fg.add_argument("kind", choices=["femnist", "shakespeare", "cifar10"],
                    help="femnist: bundled digits restyled per writer; shakespeare: English prose from "
                         "Python's docstrings, one module per role; cifar10: CIFAR-10-format batches of the "
                         "bundled digits in colour on gradient backgrounds (CIFAR-shaped, not CIFAR-10)")
    fg.add_argument("out", help="folder to create (train/ and test/ inside; the batch files for cifar10)")
    fg.add_argument("--users", type=int, default=None, help="clients (writers or roles) (default: 5; not for "
                                                            "cifar10, whose batches are split at load by --clients)")
    fg.add_argument("--samples", type=int, default=150, help="samples per user before the split; for cifar10 "
                                                             "the training images in all (default: 150)")
    fg.add_argument("--seed", type=int, default=0, help="generator seed (default: 0)")
    fn = flsub.add_parser("new-app", help="write a Flower App folder (flwr run) for a dataset, model and method")
    fn.add_argument("out", help="folder to create")
    fn.add_argument("--dataset", default="digits", help="digits (bundled), femnist, shakespeare or cifar10")
    fn.add_argument("--data", default="", help="the dataset's folder on every SuperNode (not for digits)")
    fn.add_argument("--model", default="auto", help="auto (the dataset's FLuID model) or a model name")
    fn.add_argument("--method", default="invariant", help="dropout method (default: invariant)")
    fn.add_argument("--rounds", type=int, default=10, help="rounds (default: 10)")
    fn.add_argument("--clients", type=int, default=3, help="SuperNodes, one partition each (default: 3)")
    fn.add_argument("--force", action="store_true", help="replace the app files in an existing folder")
    fd = flsub.add_parser("data", help="datasets: fetch once on a connected machine, load later offline")
    fdsub = fd.add_subparsers(dest="datacmd", required=True)
    ff = fdsub.add_parser("fetch", help="download a dataset through Flower Datasets and save its client partitions "
                                        "to a folder that --data DIR loads without a network")
    ff.add_argument("name", choices=["femnist", "shakespeare", "cifar10"])
    ff.add_argument("dir", help="folder to write (client_<i>.npz, central_test.npz, cosearch_partitions.json)")
    ff.add_argument("--clients", type=int, default=5, help="clients to save (natural partitions for FEMNIST and "
                                                           "Shakespeare, Dirichlet --alpha for CIFAR-10)")
    ff.add_argument("--alpha", type=float, default=0.5, help="CIFAR-10 Dirichlet concentration (0: IID)")
    ff.add_argument("--seed", type=int, default=0)
    ff.add_argument("--force", action="store_true", help="replace saved partitions in DIR")
    fr = flsub.add_parser("report", help="summarise FL results or an experiment")
    fr.add_argument("results", nargs="+", help="result or experiment JSON files")
    fr.add_argument("--force", action="store_true", help="replace an existing --plot file")
    fr.add_argument("--plot", help="write a PNG: accuracy vs round and vs simulated time (bands for experiments), "
                                   "per-client round times, keep fractions")
    fr.add_argument("--target", type=float, help="target accuracy for an experiment's time-to-target")


def _sim_kwargs(a) -> dict:
    kw = {"model": a.model, "optimizer": a.optimizer, "lr": a.lr, "batch_size": a.batch_size,
          "local_epochs": a.local_epochs, "alpha": None if a.alpha == 0 else a.alpha, "data_dir": a.data,
          "straggler_fraction": a.straggler_fraction, "keep_rule": a.keep_rule}
    if a.clients_per_round is not None:
        kw["clients_per_round"] = a.clients_per_round
    if a.keep_confidence is not None:
        kw["keep_confidence"] = a.keep_confidence
    if a.samples_per_round is not None:
        kw["samples_per_round"] = a.samples_per_round
    if a.stop_at_accuracy is not None:
        kw["stop_at_accuracy"] = a.stop_at_accuracy
    if a.devices:
        if not os.path.isfile(a.devices):
            raise ValueError(f"--devices {a.devices!r}: no such file")
        kw["devices"] = a.devices
    else:
        if not (a.spread >= 1.0) or not (0.0 <= a.noise < 10.0):
            raise ValueError(f"--spread must be >= 1 and --noise in [0, 10), got {a.spread}, {a.noise}")
        kw.update(spread=a.spread, noise_cv=a.noise)
    return kw


def run(a) -> int:
    from .._validate import output_path
    from .experiment import Experiment, run_experiment
    from .simulation import FLResult, plot, simulate
    if a.flcmd == "data":
        from .data import PARTITIONS_META, save_partitions
        from .flower_datasets import load_flower_dataset
        if os.path.exists(os.path.join(a.dir, PARTITIONS_META)) and not a.force:
            raise ValueError(f"{a.dir!r} already holds saved partitions; pass --force to replace them")
        d = load_flower_dataset(a.name, a.clients, None if a.alpha == 0 else a.alpha, a.seed)
        save_partitions(d, a.dir, overwrite=a.force, source=f"Flower Datasets {a.name}, {a.clients} clients, "
                                                             f"alpha {a.alpha}, seed {a.seed}")
        print(f"saved {a.name}: {len(d.clients)} clients, {sum(len(c[1]) for c in d.clients):,} training samples "
              f"in {a.dir}; use --dataset {a.name} --data {a.dir} (no network needed)")
        return 0
    if a.flcmd == "simulate":
        output_path(a.out, a.force)
        res = simulate(a.dataset, clients=a.clients, method=a.method, rounds=a.rounds, seed=a.seed,
                       progress=True, out=a.out, overwrite=True, **_sim_kwargs(a))
        if res.rounds:
            print(res.summary())
            print(res.controller_report().describe())
        if res.interrupted:
            from .._interrupt import exit_code
            print(f"cosearch: interrupted after {len(res.rounds)} of {a.rounds} rounds; they are saved in {a.out}",
                  file=sys.stderr)
            return exit_code(res.stopped_by)
        print(f"saved {a.out}")
        return 0
    if a.flcmd == "experiment":
        output_path(a.out, a.force, a.resume)
        kw = _sim_kwargs(a)
        methods = [m.strip() for m in a.methods.split(",") if m.strip()]
        if a.seed_offset < 0:
            raise ValueError(f"--seed-offset must be >= 0, got {a.seed_offset}")
        if a.target is not None:                  # checked before the runs, not after them
            from .._validate import fraction
            fraction("--target", a.target)
        seeds = list(range(a.seed_offset, a.seed_offset + a.seeds)) if a.seeds >= 1 else a.seeds
        exp = run_experiment(a.dataset, methods, seeds, a.rounds, clients=a.clients, workers=a.workers,
                             out=a.out, resume=a.out if (a.resume and os.path.exists(a.out)) else None,
                             overwrite=True, **kw)
        print(exp.table(a.target))
        for extra in (exp.controller_table(), exp.width_table()):
            if extra:
                print(extra)
        if exp.interrupted:
            from .._interrupt import exit_code
            print(f"cosearch: interrupted; saved the finished runs to {a.out} (continue with --resume)",
                  file=sys.stderr)
            return exit_code(exp.stopped_by)
        print(f"saved {a.out}")
        return 0
    if a.flcmd == "new-app":
        from .app_template import write_app
        d = write_app(a.out, a.dataset, a.model, a.method, a.rounds, a.clients, a.data, overwrite=a.force)
        print(f"wrote Flower app {d} (see {os.path.join(d, 'README.md')} for the flwr run commands)")
        return 0
    if a.flcmd == "generate":
        from .data import write_cifar_like, write_femnist_like, write_shakespeare_like
        if a.kind == "cifar10":
            if a.users is not None:
                raise ValueError("--users: CIFAR-10 batches have no users; give --clients when loading them")
            if os.path.exists(os.path.join(a.out, "test_batch")):
                raise ValueError(f"{a.out!r} already holds CIFAR-10 batches")
            write_cifar_like(a.out, images=a.samples, test_images=max(10, a.samples // 5), seed=a.seed)
            print(f"wrote CIFAR-10-format batches {a.out} ({a.samples} training images; use --dataset cifar10 "
                  f"--data {a.out})")
            return 0
        if os.path.exists(os.path.join(a.out, "train")):
            raise ValueError(f"{a.out!r} already holds a LEAF train/ folder")
        users = 5 if a.users is None else a.users
        if a.kind == "femnist":
            write_femnist_like(a.out, users, a.samples, a.seed)
        else:
            write_shakespeare_like(a.out, users, a.samples, a.seed, stride=2)
        print(f"wrote {a.kind}-like LEAF folder {a.out} ({users} users)")
        return 0
    for path in a.results:
        if not os.path.isfile(path):
            raise ValueError(f"{path}: no such file")
    from .._json import check_schema, load_json
    if a.plot:
        output_path(a.plot, a.force, flag="--plot")
    docs = [(p, load_json(p)) for p in a.results]
    exps = [Experiment.from_json(p) for p, d in docs if isinstance(d, dict) and d.get("kind") == "cosearch.fl.experiment"]
    singles = []
    for p, d in docs:
        if not (isinstance(d, dict) and d.get("kind")):
            check_schema(d, "fl-result", p)
            singles.append(FLResult.from_dict(d))
    for e in exps:
        print(e.table(a.target))
        for extra in (e.controller_table(), e.width_table()):
            if extra:
                print(extra)
    for r in singles:
        print(r.summary())
        print("  " + r.controller_report().describe())
    if a.plot:
        if exps:
            exps[0].plot(a.plot, overwrite=True)
        else:
            plot(singles, a.plot, overwrite=True)
        print(f"wrote {a.plot}")
    return 0
