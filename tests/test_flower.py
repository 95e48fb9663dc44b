"""Dropout training on Flower: the strategy's round logic, and a real deployment — a SuperLink
and three SuperNodes on 127.0.0.1 talking over Flower's network APIs."""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

flwr = pytest.importorskip("flwr")
pytest.importorskip("sklearn")
torch = pytest.importorskip("torch")


def test_mask_codec_round_trip_and_garbage():
    from cosearch.fl import flower
    m = {"a": np.array([True, False, True]), "b": np.array([False, False, True, True])}
    back = flower.decode_masks(flower.encode_masks(m))
    assert all(np.array_equal(back[k], m[k]) for k in m)
    for bad in ("{", '{"a": 3}', '{"a": [9, -2]}', "[]"):
        with pytest.raises(ValueError, match="malformed"):
            flower.decode_masks(bad)


class _Proxy:
    def __init__(self, cid):
        self.cid = cid


class _Manager:
    def __init__(self, n):
        self.clients = [_Proxy(str(100 + i)) for i in range(n)]

    def num_available(self):
        return len(self.clients)

    def sample(self, num_clients, min_num_clients=None):
        return self.clients[:num_clients]


def _client_trains_as(model_fn, params, cfg, x, y, seed, train_ref):
    """A SubmodelClient's fit of ``params`` under ``cfg`` (round 1, batch 8) equals ``train_ref(ref,
    gen)`` applied to a model holding the same weights with the generator the client seeds
    (``seed + 1``); returns the client's weights and metrics."""
    from cosearch.fl import flower
    client = flower.SubmodelClient(model_fn, x, y, seed=seed, batch_size=8)
    got, _n, metrics = client.fit([p.copy() for p in params], cfg)
    ref = model_fn()
    ref.load_state_dict({k: torch.as_tensor(v) for k, v in zip(ref.state_dict().keys(), params)})
    train_ref(ref, torch.Generator().manual_seed(seed + 1))
    for a, b in zip(got, ref.state_dict().values()):
        np.testing.assert_allclose(a, b.numpy(), rtol=1e-6, atol=1e-7)
    return got, metrics


def _fit_round(strategy, manager, rnd, times, corrupt=None, fail=False):
    from flwr.common import Code, FitRes, Status, ndarrays_to_parameters, parameters_to_ndarrays
    ins = strategy.configure_fit(rnd, strategy.initialize_parameters(manager), manager)
    results = []
    for proxy, fit in ins:
        arrays = [a * 1.01 for a in parameters_to_ndarrays(fit.parameters)]
        if corrupt == proxy.cid:
            arrays[0] = arrays[0] * np.nan
        keep = fit.config["keep"]
        results.append((proxy, FitRes(Status(Code.OK, ""), ndarrays_to_parameters(arrays), 10,
                                      {"round_time_s": times[proxy.cid] * keep,
                                       "partition_id": int(proxy.cid) - 100})))
    return strategy.aggregate_fit(rnd, results, [RuntimeError("lost")] if fail else []), ins


def test_strategy_is_fedavg_and_survives_a_malformed_update():
    from flwr.server.strategy import FedAvg

    from cosearch.fl import flower, models
    s = flower.DropoutStrategy(lambda: models.mlp(64, 10, 32), "invariant", total_rounds=6,
                               min_available_clients=3, min_fit_clients=3)
    assert isinstance(s, FedAvg)
    mgr = _Manager(3)
    times = {"100": 1.0, "101": 1.3, "102": 2.0}
    for rnd in (1, 2):
        (params, metrics), _ = _fit_round(s, mgr, rnd, times, corrupt="100" if rnd == 2 else None)
        assert params is not None
    assert s.history[1]["rejected"].keys() == {"0"}              # client "100" -> index 0
    assert s.history[0]["partition_ids"] == {"0": 0, "1": 1, "2": 2} and s.history[0]["server_round_s"] >= 0
    (params, _), ins = _fit_round(s, mgr, 3, times)
    keeps = {p.cid: f.config["keep"] for p, f in ins}
    # the controller: the largest p (step 0.01) whose predicted time 2.0 r(p) is within the target
    # 1.3, r the mean of the sub-model's FLOPs and bytes ratios; counted by hand for the
    # 64-32-32-10 MLP keeping h = int(32 p) of each hidden layer: p = 0.71 keeps 22 (r = 0.6238,
    # 1.248 s), p = 0.72 keeps 23 (r = 0.6588, 1.318 s)
    def r(h):
        return ((64 * h + h * h + 10 * h) / 3392 + (64 * h + h + h * h + h + 10 * h + 10) / 3466) / 2
    assert 2.0 * r(22) <= 1.3 < 2.0 * r(23)
    assert keeps == {"100": 1.0, "101": 1.0, "102": 0.71}
    for v in s.model.state_dict().values():
        assert torch.isfinite(v).all()
    strict = flower.DropoutStrategy(lambda: models.mlp(64, 10, 32), accept_failures=False)
    (params, _), _ = _fit_round(strict, mgr, 1, times, fail=True)
    assert params is None


def test_flower_fjord_trains_per_batch_widths_as_simulate_does():
    """On Flower's engine FjORD is the same method as in simulate(): the strategy names each
    client's widths up to its p_max (and whether to distill), and the client runs train_nested on
    them; its update equals train_nested's on the same generator."""
    from cosearch.fl import flower, models
    from cosearch.fl.masks import FJORD_WIDTHS
    from cosearch.fl.simulation import train_nested
    for method, distill in (("fjord", False), ("fjord-kd", True)):
        s = flower.DropoutStrategy(lambda: models.mlp(8, 3, 10), method, total_rounds=4, min_available_clients=2,
                                   min_fit_clients=2)
        ins = s.configure_fit(1, s.initialize_parameters(None), _Manager(2))
        cfg = ins[0][1].config
        assert cfg["widths"] == ",".join(map(str, FJORD_WIDTHS)) and cfg["distill"] is distill
        rng = np.random.default_rng(0)
        x, y = rng.normal(size=(40, 8)).astype(np.float32), np.arange(40) % 3
        params = flwr.common.parameters_to_ndarrays(ins[0][1].parameters)
        units = {k: int(v) for k, v in (kv.split("=") for kv in cfg["full_units"].split(","))}

        def reference(ref, gen, x=x, y=y, units=units, distill=distill):
            train_nested(ref, x, y, 1, "sgd", 0.1, 8, gen, FJORD_WIDTHS, units, torch.as_tensor(x[:1]),
                         distill=distill)
        _client_trains_as(lambda: models.mlp(8, 3, 10), params, cfg, x, y, 5, reference)


def test_flower_heterofl_trains_and_reports_as_simulate_does():
    """HeteroFL on Flower's engine: the strategy asks for the Scaler at the sub-model's rate and the
    masked cross-entropy; the client trains exactly as train_local does with them and reports its
    labels, which the strategy hands to the label-split aggregation."""
    from cosearch.fl import flower, models
    from cosearch.fl.simulation import train_local
    s = flower.DropoutStrategy(lambda: models.mlp(8, 4, 10), "heterofl", total_rounds=4, min_available_clients=2,
                               min_fit_clients=2)
    ins = s.configure_fit(1, s.initialize_parameters(None), _Manager(2))
    cfg = dict(ins[0][1].config, scale_rate=0.5)            # as sent to a tier-1/2 client
    assert ins[0][1].config["mask_labels"] is True and ins[0][1].config["scale_rate"] == 1.0
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(24, 8)).astype(np.float32), np.array([0, 2] * 12)
    params = flwr.common.parameters_to_ndarrays(ins[0][1].parameters)
    _got, metrics = _client_trains_as(
        lambda: models.mlp(8, 4, 10), params, cfg, x, y, 3,
        lambda ref, gen: train_local(ref, x, y, 1, "sgd", 0.1, 8, gen, label_mask=np.array([True, False, True, False]),
                                     scale_rate=0.5, example=torch.as_tensor(x[:1])))
    assert metrics["labels"] == "0,2"


def test_flower_fiarse_client_trains_as_simulate_does():
    """FIARSE on Flower's engine: the strategy sends the threshold, and the client trains exactly as
    the simulation's FIARSE step does on the same generator; entries under the threshold stay."""
    from cosearch.fl import flower, models
    from cosearch.fl.simulation import _fiarse_train
    s = flower.DropoutStrategy(lambda: models.mlp(8, 3, 10), "fiarse", total_rounds=4, min_available_clients=2,
                               min_fit_clients=2)
    ins = s.configure_fit(1, s.initialize_parameters(None), _Manager(2))
    cfg = dict(ins[0][1].config, param_threshold=0.2)      # as sent to a straggler
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(24, 8)).astype(np.float32), np.arange(24) % 3
    params = flwr.common.parameters_to_ndarrays(ins[0][1].parameters)
    got, _m = _client_trains_as(lambda: models.mlp(8, 3, 10), params, cfg, x, y, 3,
                                lambda ref, gen: _fiarse_train(ref, 0.2, x, y, 1, "sgd", 0.1, 8, gen,
                                                               torch.as_tensor(x[:1])))
    below = np.abs(params[0]) < 0.2
    np.testing.assert_array_equal(got[0][below], params[0][below])


def _signal_group(p, sig):
    try:
        os.killpg(p.pid, sig)
    except ProcessLookupError:
        pass


def _free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def _flower_bin(name):
    """A Flower command next to this interpreter (a venv need not be on PATH), else on PATH."""
    here = os.path.join(os.path.dirname(sys.executable), name)
    return here if os.path.exists(here) else shutil.which(name)


@pytest.mark.skipif(_flower_bin("flower-superlink") is None, reason="Flower's CLI is not installed")
def test_superlink_and_three_supernodes_run_invariant_dropout(tmp_path):
    """Two full rounds, then two rounds of invariant dropout, on Flower's deployment engine."""
    bindir = os.path.dirname(_flower_bin("flower-superlink"))
    env = dict(os.environ, FLWR_HOME=str(tmp_path / "home"), PATH=bindir + os.pathsep + os.environ["PATH"])
    link, *nodes = _free_ports(4)
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "config.toml").write_text(textwrap.dedent(f"""
        [superlink]
        default = "test"

        [superlink.test]
        address = "127.0.0.1:{link}"
        insecure = true
        """))
    # the app folder `cosearch fl new-app` writes, as a user would run it
    from cosearch.cli import main
    app = tmp_path / "app"
    assert main(["fl", "new-app", str(app), "--rounds", "4", "--clients", "3"]) == 0
    out = tmp_path / "history.json"
    procs = []
    try:
        procs.append(subprocess.Popen([os.path.join(bindir, "flower-superlink"), "--insecure", "--port", str(link),
                                       "--disable-runtime-dependency-installation"], env=env,
                                      start_new_session=True, stdout=subprocess.DEVNULL, stderr=open(tmp_path / "link.log", "w")))
        for i, port in enumerate(nodes):
            procs.append(subprocess.Popen(
                [os.path.join(bindir, "flower-supernode"), "--insecure", "--superlink", f"127.0.0.1:{link}",
                 "--port", str(port), "--node-config", f"partition-id={i} num-partitions=3"],
                env=env, start_new_session=True, stdout=subprocess.DEVNULL,
                stderr=open(tmp_path / f"node{i}.log", "w")))
        deadline = time.time() + 240
        run = None
        while time.time() < deadline:
            run = subprocess.run([os.path.join(bindir, "flwr"), "run", ".", "test", "--run-config",
                                  f'out="{out}"'], cwd=app, env=env, capture_output=True, text=True, timeout=120)
            if run.returncode == 0:
                break
            time.sleep(2)
        assert run is not None and run.returncode == 0, run.stdout + run.stderr
        hist = None
        while time.time() < deadline:
            if out.exists():
                hist = json.loads(out.read_text())["history"]
                if len(hist) == 4:
                    break
            time.sleep(1)
        assert hist is not None and len(hist) == 4, (tmp_path / "link.log").read_text()[-3000:]
    finally:
        for p in procs:      # each server runs in its own session: stop it with its app processes
            _signal_group(p, signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                _signal_group(p, signal.SIGKILL)
    assert [h["keep"] for h in hist[:2]] == [{}, {}]                 # dropout starts in round 3
    straggler = hist[2]["keep"]
    assert len(straggler) == 1 and 0.5 <= next(iter(straggler.values())) < 1.0
    assert hist[3]["keep"].keys() == straggler.keys()                 # the same straggler, its keep re-fitted
    assert 0.5 <= next(iter(hist[3]["keep"].values())) < 1.0
    assert all(h["rejected"] == {} and h["failures"] == 0 for h in hist)
    assert all(sorted(h["partition_ids"].values()) == [0, 1, 2] and h["server_round_s"] > 0 for h in hist)
    assert hist[2]["round_time_s"] < hist[1]["round_time_s"]         # the straggler's sub-model is faster
    assert hist[2]["thresholds"].keys() == hist[2]["invariant_counts"].keys() == {"1", "3"}


def test_new_app_writes_a_flower_app_for_any_dataset_and_model(tmp_path, capsys):
    import tomllib

    from cosearch.cli import main
    assert main(["fl", "new-app", str(tmp_path / "a"), "--dataset", "femnist", "--data", "/data/fem",
                 "--model", "femnist_cnn", "--method", "ordered", "--rounds", "7", "--clients", "5"]) == 0
    cfg = tomllib.loads((tmp_path / "a" / "pyproject.toml").read_text())
    assert cfg["tool"]["flwr"]["app"]["components"] == {"serverapp": "cosearch.fl.flower_app:server_app",
                                                        "clientapp": "cosearch.fl.flower_app:client_app"}
    run = cfg["tool"]["flwr"]["app"]["config"]
    assert (run["dataset"], run["data-dir"], run["model"], run["method"], run["num-rounds"], run["min-clients"]) == \
        ("femnist", "/data/fem", "femnist_cnn", "ordered", 7, 5)
    assert "num-partitions=5" in (tmp_path / "a" / "README.md").read_text()
    assert main(["fl", "new-app", str(tmp_path / "a")]) == 2                      # never over an app
    assert main(["fl", "new-app", str(tmp_path / "b"), "--dataset", "cifar10"]) == 2    # needs --data
    assert main(["fl", "new-app", str(tmp_path / "c"), "--model", "gpt"]) == 2
    err = capsys.readouterr().err
    assert "already holds" in err and "give data_dir" in err and "model" in err


@pytest.mark.parametrize("dataset", ["femnist", "shakespeare"])
def test_flower_app_sizes_sub_models_of_conv_and_lstm_models(dataset):
    """The app's strategy gets an input batch for the dataset's model, so the straggler
    controller can size its sub-models (a CNN or LSTM gives no input width by itself)."""
    pytest.importorskip("flwr")
    from cosearch.fl import flower_app
    from cosearch.fl.server import RoundProtocol
    cfg = {"dataset": dataset}
    proto = RoundProtocol(flower_app._model_fn(cfg)(), 3, example_input=flower_app._example(cfg))
    f, b = proto.profiler.time_model.costs(0.5)
    assert 0.0 < f < 1.0 and 0.0 < b < 1.0
    assert flower_app._example({"dataset": "digits"}).shape == (2, 1, 8, 8)


def test_samples_per_round_on_both_engines():
    """A client training on ``samples_per_round`` of its samples: the same subset on both engines
    (drawn from the seed, the round and the client), trained as train_local trains it, the update
    weighted by all the client's samples; ``simulate`` records the setting."""
    from cosearch.fl import flower, models
    from cosearch.fl.simulation import round_subset, simulate, train_local
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(40, 8)).astype(np.float32), np.arange(40) % 3
    sx, sy = round_subset(x, y, 12, 9, 1, 2)
    rows = [int(np.flatnonzero((x == r).all(1))[0]) for r in sx]          # distinct samples, in stored order
    assert len(sy) == 12 and len(set(rows)) == 12 and rows == sorted(rows) and np.array_equal(y[rows], sy)
    assert np.array_equal(round_subset(x, y, 12, 9, 1, 2)[1], sy)              # deterministic
    assert not np.array_equal(round_subset(x, y, 12, 9, 2, 2)[0], sx)          # a fresh draw each round
    assert round_subset(x, y, 50, 9, 1, 2)[0] is x                             # fewer samples than asked: all
    s = flower.DropoutStrategy(lambda: models.mlp(8, 3, 10), "none", total_rounds=4, min_available_clients=2,
                               min_fit_clients=2)
    ins = s.configure_fit(1, s.initialize_parameters(None), _Manager(2))
    params = flwr.common.parameters_to_ndarrays(ins[0][1].parameters)
    client = flower.SubmodelClient(lambda: models.mlp(8, 3, 10), x, y, seed=5, batch_size=8, partition_id=2,
                                   noise_seed=9, samples_per_round=12)
    got, n, _m = client.fit([p.copy() for p in params], ins[0][1].config)
    ref = models.mlp(8, 3, 10)
    ref.load_state_dict({k: torch.as_tensor(v) for k, v in zip(ref.state_dict().keys(), params)})
    train_local(ref, sx, sy, 1, "sgd", 0.1, 8, torch.Generator().manual_seed(6))
    for a, b in zip(got, ref.state_dict().values()):
        np.testing.assert_allclose(a, b.numpy(), rtol=1e-6, atol=1e-7)
    assert n == 40
    res = simulate("digits", 3, "none", rounds=1, seed=0, samples_per_round=16)
    assert res.config["samples_per_round"] == 16 and len(res.rounds) == 1


@pytest.mark.parametrize("cfg,message", [
    ({"num-rounds": 2.5}, "run config num-rounds must be a positive integer, got 2.5"),
    ({"dataset": "mnist"}, "run config dataset='mnist'; choose one of"),
    ({"seed": -1}, "run config seed must be a non-negative integer"),
    ({"round-timeout": "x"}, "run config round-timeout must be a number, got 'x'"),
    ({"min-clients": 0}, "run config min-clients must be a positive integer"),
    ({"fraction-evaluate": 1.5}, "fraction_evaluate must be a share of the clients in [0, 1], got 1.5"),
    ({"fraction-evaluate": -0.1}, "fraction_evaluate must be a share of the clients in [0, 1], got -0.1"),
    ({"method": "fedprox"}, "method='fedprox'; choose one of"),
])
def test_run_config_values_are_checked_by_key(cfg, message):
    """A run config's values are checked where the app reads them and refused naming the key: a
    fractional round count was truncated and an unknown dataset raised a KeyError from inside;
    a whole number written as a float is the number."""
    from cosearch.fl import flower_app
    with pytest.raises(ValueError, match=re.escape(message) if "choose" not in message else message):
        flower_app.server_components(cfg)
    assert flower_app.server_components({"num-rounds": 3.0}).config.num_rounds == 3
    with pytest.raises(ValueError, match="run config batch-size must be a positive integer, got 32.5"):
        flower_app._training({"batch-size": 32.5})
    with pytest.raises(ValueError, match="run config lr must be a number, got '0.1'"):
        flower_app._training({"lr": "0.1"})
    assert flower_app._training({"samples-per-round": 0})["samples_per_round"] is None
