"""Datasets (LEAF splits, safe CIFAR loader), update validation, the round protocol and the
simulation's time model."""

import json
import os
import pickle

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from cosearch import fl  # noqa: E402
from cosearch.fl import data, models, submodel  # noqa: E402
from cosearch.fl.server import ClientUpdate, RoundProtocol  # noqa: E402


# ---------------------------------------------------------------------- LEAF
def _leaf(users, kind="femnist", n=4, rng=None):
    rng = rng or np.random.default_rng(0)
    ud = {}
    for u in users:
        if kind == "femnist":
            ud[u] = {"x": rng.random((n, 784)).round(2).tolist(), "y": rng.integers(0, 62, n).tolist()}
        else:
            xs = ["".join(rng.choice(list(data.SHAKESPEARE_CHARS[12:60]), 80)) for _ in range(n)]
            ud[u] = {"x": xs, "y": [s[0] for s in xs]}
    return {"users": list(users), "num_samples": [n] * len(users), "user_data": ud}


def _write(path, doc):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))


def test_leaf_split_is_respected(tmp_path):
    _write(tmp_path / "train" / "a.json", _leaf(["w1", "w2"], n=5))
    _write(tmp_path / "test" / "a.json", _leaf(["w1", "w2", "w3"], n=2))
    d = data.load_leaf(str(tmp_path), "femnist")
    assert [len(y) for _, y in d.clients] == [5, 5]
    assert [len(y) for _, y in d.client_tests] == [2, 2]
    assert len(d.test[1]) == 6                        # every test user, also w3
    flat = tmp_path / "flat"
    _write(flat / "all_data_0.json", _leaf(["a", "b"], n=10))
    f = data.load_leaf(str(flat), "femnist", test_fraction=0.3)
    assert [len(y) for _, y in f.clients] == [7, 7] and len(f.test[1]) == 6


def test_leaf_bad_inputs(tmp_path):
    _write(tmp_path / "d1" / "a.json", _leaf(["w1"]))
    _write(tmp_path / "d1" / "b.json", _leaf(["w1"]))
    with pytest.raises(ValueError, match="appears in two"):
        data.load_leaf(str(tmp_path / "d1"))
    doc = _leaf(["w1"])
    doc["user_data"]["w1"]["y"] = doc["user_data"]["w1"]["y"][:-1]
    _write(tmp_path / "d2" / "a.json", doc)
    with pytest.raises(ValueError, match="labels in y"):
        data.load_leaf(str(tmp_path / "d2"))
    doc = _leaf(["w1"])
    doc["user_data"]["w1"]["y"][0] = 62
    _write(tmp_path / "d3" / "a.json", doc)
    with pytest.raises(ValueError, match=r"labels must lie in \[0, 62\)"):
        data.load_leaf(str(tmp_path / "d3"))
    _write(tmp_path / "d4" / "a.json", _leaf(["w1"], n=3))
    with pytest.raises(ValueError, match="empty test split"):
        data.load_leaf(str(tmp_path / "d4"), test_fraction=0.0)
    doc = _leaf(["R"], kind="shakespeare")
    doc["user_data"]["R"]["x"][0] = "é" * 80
    _write(tmp_path / "d5" / "a.json", doc)
    with pytest.raises(ValueError, match="80-character set"):
        data.load_leaf(str(tmp_path / "d5"), "shakespeare")
    with pytest.raises(ValueError, match="LEAF"):
        data.load_leaf(str(tmp_path / "nothing"))


def test_generated_leaf_folders_load(tmp_path):
    pytest.importorskip("sklearn")
    d = data.load_leaf(data.write_femnist_like(str(tmp_path / "f"), users=3, samples=20), "femnist")
    assert len(d.clients) == 3 and d.clients[0][0].shape[1:] == (1, 28, 28) and len(d.test[1]) == 12
    s = data.load_leaf(data.write_shakespeare_like(str(tmp_path / "s"), users=2, samples=30), "shakespeare")
    assert s.clients[0][0].shape[1:] == (80,) and s.classes == 80


def test_generated_cifar_batches_are_cifar_format_and_carry_their_labels(tmp_path):
    """Read with the standard library (not cosearch's loader): protocol-2 pickles of uint8
    (n, 3072) rows; the digit in each image is what its label says: a nearest-centroid classifier
    on shift-invariant features (the FFT magnitude of each image's contrast against its own
    median colour) trained on the training batches gets far above the 10% of chance on the test
    batch.  The same folder loads through load_cifar10 and ``fl generate cifar10``."""
    pytest.importorskip("sklearn")
    out = data.write_cifar_like(str(tmp_path / "c"), images=600, test_images=200, seed=1)

    def feats(path):
        raw = open(path, "rb").read()
        assert raw[:2] == b"\x80\x02"
        d = pickle.loads(raw, encoding="bytes")
        assert d[b"data"].dtype == np.uint8 and d[b"data"].shape[1] == 3072 and len(d[b"labels"]) == len(d[b"data"])
        x = d[b"data"].reshape(-1, 3, 32, 32).astype(float) / 255.0
        contrast = np.abs(x - np.median(x, axis=(2, 3), keepdims=True)).sum(1)
        f = np.abs(np.fft.fft2(contrast)).reshape(len(x), -1)
        return f / np.linalg.norm(f, axis=1, keepdims=True), np.array(d[b"labels"])

    parts = [feats(tmp_path / "c" / f"data_batch_{b}") for b in range(1, 6)]
    x, y = np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
    tx, ty = feats(tmp_path / "c" / "test_batch")
    assert len(y) == 600 and len(ty) == 200 and set(y.tolist()) == set(range(10))
    centroids = np.stack([x[y == k].mean(0) for k in range(10)])
    acc = (np.argmin(((tx[:, None] - centroids[None]) ** 2).sum(-1), 1) == ty).mean()
    assert acc > 0.6
    d = data.load_cifar10(out, clients=3, alpha=None)
    assert d.test[0].shape == (200, 3, 32, 32) and sum(len(c[1]) + len(t[1]) for c, t in zip(d.clients, d.client_tests)) == 600
    from cosearch.cli import main
    assert main(["fl", "generate", "cifar10", str(tmp_path / "g"), "--samples", "50"]) == 0
    assert len(data.load_cifar10(str(tmp_path / "g"), clients=2, alpha=None).test[1]) == 10
    with pytest.raises(ValueError, match="positive integer"):
        data.write_cifar_like(str(tmp_path / "bad"), images=0)
    # found by trying `fl generate` at its edges: each wrote a folder no loader could use (no users,
    # users without a test sample, empty batches) or ignored --users
    with pytest.raises(ValueError, match="cannot fill 5 batches"):
        data.write_cifar_like(str(tmp_path / "bad"), images=2)
    for users, samples, message in ((0, 20, "users must be a positive integer"),
                                    (2, 1, "samples must be at least 2 a user")):
        with pytest.raises(ValueError, match=message):
            data.write_femnist_like(str(tmp_path / "badf"), users=users, samples=samples)
        with pytest.raises(ValueError, match=message):
            data.write_shakespeare_like(str(tmp_path / "bads"), users=users, samples=samples)
    assert not (tmp_path / "badf").exists() and not (tmp_path / "bads").exists()
    assert main(["fl", "generate", "cifar10", str(tmp_path / "g2"), "--users", "3"]) == 2


def test_cifar_vgg_starts_with_an_input_dependent_output():
    """Glorot-uniform weights within sqrt(6 / (fan_in + fan_out)) and zero biases, as FLuID's Keras
    model; the logits then vary with the input (PyTorch's default initialisation leaves their
    spread across inputs at ~1e-4 of their size)."""
    import torch
    torch.manual_seed(0)
    net = models.cifar_vgg()
    for mod in net:
        if isinstance(mod, (torch.nn.Conv2d, torch.nn.Linear)):
            w = mod.weight.detach()
            rf = w[0, 0].numel() if w.dim() == 4 else 1
            bound = (6.0 / (w.shape[1] * rf + w.shape[0] * rf)) ** 0.5
            assert float(w.abs().max()) <= bound and float(w.abs().max()) > 0.9 * bound
            assert float(mod.bias.detach().abs().max()) == 0.0
    out = net(torch.rand(64, 3, 32, 32))
    assert float(out.std(0).mean()) > 0.05 * float(out.abs().mean())


# ---------------------------------------------------------------------- CIFAR-10, safe unpickling
def test_cifar_batches(tmp_path):
    rng = np.random.default_rng(0)
    for name, n in (("data_batch_1", 20), ("data_batch_2", 20), ("test_batch", 10)):
        with open(tmp_path / name, "wb") as fh:
            pickle.dump({b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
                         b"labels": rng.integers(0, 10, n).tolist(), b"batch_label": b"x"}, fh)
    d = data.load_cifar10(str(tmp_path), clients=2, alpha=None)
    assert sum(len(c[1]) + len(t[1]) for c, t in zip(d.clients, d.client_tests)) == 40
    assert d.test[0].shape == (10, 3, 32, 32) and d.test[0].max() <= 1.0


class _Evil:
    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (os.system, (f"touch {self.path}",))


def test_cifar_loader_runs_no_code(tmp_path):
    marker = tmp_path / "pwned"
    with open(tmp_path / "data_batch_1", "wb") as fh:
        pickle.dump({b"data": _Evil(marker), b"labels": [0]}, fh)
    with open(tmp_path / "test_batch", "wb") as fh:
        pickle.dump({b"data": np.zeros((1, 3072), np.uint8), b"labels": [0]}, fh)
    with pytest.raises(ValueError, match="not a CIFAR-10 batch"):
        data.load_cifar10(str(tmp_path), clients=1, alpha=None)
    assert not marker.exists()


def test_cifar_loader_type_checks_before_converting(tmp_path):
    """A tiny pickle of a list that refers to itself 60 levels deep (2**60 leaves through the
    memo) would keep np.asarray busy for ever; it is refused by type first."""
    deep: list = [0]
    for _ in range(60):
        deep = [deep, deep]
    with open(tmp_path / "test_batch", "wb") as fh:
        pickle.dump({b"data": np.zeros((1, 3072), np.uint8), b"labels": [0]}, fh)
    for bad, match in (({b"data": deep, b"labels": [0]}, "NumPy array"),
                       ({b"data": np.zeros((1, 3072), np.uint8), b"labels": deep}, "list of integers"),
                       ({b"data": np.zeros((1, 3072), np.uint8), b"labels": np.zeros(1, np.float32)}, "integer"),
                       # an integer beyond int64 stopped the load with an OverflowError
                       ({b"data": np.zeros((1, 3072), np.uint8), b"labels": [10 ** 30]}, "whole numbers")):
        raw = pickle.dumps(bad)
        assert len(raw) < 8000
        (tmp_path / "data_batch_1").write_bytes(raw)
        with pytest.raises(ValueError, match=match):
            data.load_cifar10(str(tmp_path), clients=1, alpha=None)


# ---------------------------------------------------------------------- update validation
@pytest.mark.parametrize("n", [float("inf"), float("nan"), 0, -3, True, "10", None, 2.0 ** 60])
def test_bad_num_examples_rejected(n):
    m = models.mlp(4, 2, 4)
    gs = submodel.groups(m)
    full = submodel.full_masks(gs)
    good = {k: v + 1.0 for k, v in m.state_dict().items()}
    new, rej = submodel.merge_updates(m.state_dict(), [(good, full, 2), (good, full, n)], gs)
    assert [r[0] for r in rej] == [1] and "num_examples" in rej[0][1]
    ref, _ = submodel.merge_updates(m.state_dict(), [(good, full, 2)], gs)
    for k in new:
        assert torch.equal(new[k], ref[k]) and torch.isfinite(new[k]).all()


def test_overflowing_float64_update_rejected():
    m = models.mlp(4, 2, 4)
    gs = submodel.groups(m)
    full = submodel.full_masks(gs)
    huge = {k: v.to(torch.float64) * 1e300 for k, v in m.state_dict().items()}
    new, rej = submodel.merge_updates(m.state_dict(), [(huge, full, 1)], gs)
    assert rej and "range" in rej[0][1]
    for k, v in m.state_dict().items():
        assert torch.equal(new[k], v)


# ---------------------------------------------------------------------- the round protocol
class _Spy(fl.NoDropout):
    name = "spy"

    def __init__(self):
        self.seen = []

    def observe(self, round, global_state, client_states, groups):
        self.seen.append(len(client_states))
        for s in client_states:
            for v in s.values():
                assert torch.isfinite(v).all()


def test_rejected_update_never_reaches_policy_and_global_stays_finite():
    torch.manual_seed(0)
    spy = _Spy()
    proto = RoundProtocol(models.mlp(4, 2, 4), 3, policy=spy)
    ref = RoundProtocol(models.mlp(4, 2, 4), 3, policy=fl.NoDropout())
    ref.model.load_state_dict(proto.model.state_dict())
    for r in (1, 2, 3):
        a = proto.assignments(r, range(3))
        base = proto.global_state()
        good = [ClientUpdate(c, {k: v + 0.1 * (c + 1) for k, v in base.items()}, 5, 1.0 + c) for c in (0, 1)]
        bad = {k: v.clone() for k, v in base.items()}
        next(iter(bad.values())).view(-1)[0] = float("nan")
        rep = proto.aggregate(r, a, good + [ClientUpdate(2, bad, 5, 3.0)])
        rep_ref = ref.aggregate(r, ref.assignments(r, range(3)), good)
        assert rep.rejected.keys() == {2} and "NaN" in rep.rejected[2]
        for k, v in proto.model.state_dict().items():
            assert torch.isfinite(v).all()
            torch.testing.assert_close(v, ref.model.state_dict()[k])
        assert rep_ref.accepted == [0, 1]
    assert spy.seen == [2, 2, 1]     # round 3: client 1 is the straggler; only client 0 is full



@pytest.mark.parametrize("kw,match", [
    (dict(client="x"), "Assignment.client must be a non-negative integer"),
    (dict(client=-1), "Assignment.client must be a non-negative integer"),
    (dict(client=True), "Assignment.client must be a non-negative integer"),
    (dict(keep=0.0), "Assignment.keep must be a positive"),
    (dict(keep=1.5), r"Assignment.keep must be in \(0, 1\]"),
    (dict(keep=float("nan")), "Assignment.keep must be a positive finite"),
    (dict(keep=None), "Assignment.keep must be a positive number"),
    (dict(masks=[1]), "Assignment.masks must be a dict"),
    (dict(threshold=-0.1), "Assignment.threshold must be a non-negative"),
    (dict(threshold=float("inf")), "Assignment.threshold must be a non-negative finite"),
])
def test_an_assignment_a_user_builds_is_checked_where_it_is_made(kw, match):
    """A simulator that builds its own assignments for RoundProtocol.aggregate gets a clear error
    when it builds one, not a TypeError from inside the round; the server's own pass (a numpy
    client id, keep 1, a FIARSE threshold of 0) are accepted."""
    from cosearch.fl.server import Assignment
    good = dict(client=3, keep=0.5, masks={}, threshold=None)
    with pytest.raises(ValueError, match=match):
        Assignment(**{**good, **kw})
    assert Assignment(np.int64(7), 1.0, {}).client == 7
    assert Assignment(0, 0.25, {}, threshold=0.0).threshold == 0.0


@pytest.mark.parametrize("field", ["hysteresis", "readapt"])
@pytest.mark.parametrize("value", ["x", "false", 0, None])
def test_profiler_switches_take_only_booleans(field, value):
    """The profiler's switches refuse anything but True/False (the string "false" is truthy, so
    accepting it would silently turn the switch on)."""
    with pytest.raises(ValueError, match=f"{field} must be True or False"):
        fl.StragglerProfiler(5, **{field: value})
    assert getattr(fl.StragglerProfiler(5, **{field: np.bool_(False)}), field) is False

def test_assignments_are_queries_and_stragglers_start_in_round_3():
    torch.manual_seed(0)
    proto = RoundProtocol(models.mlp(8, 3, 20), 3, "invariant", total_rounds=10, seed=5,
                          keep_rule="fluid")    # FLuID's buckets, traced by hand
    times = {0: 1.0, 1: 1.3, 2: 2.0}
    for r in (1, 2, 3):
        a = proto.assignments(r, range(3))
        b = proto.assignments(r, range(3))
        assert {c: x.keep for c, x in a.items()} == {c: x.keep for c, x in b.items()}
        assert all(np.array_equal(a[c].masks[k], b[c].masks[k]) for c in a for k in a[c].masks)
        if r < 3:
            assert all(x.keep == 1.0 for x in a.values())
        else:
            assert a[2].keep == 0.65 and a[0].keep == a[1].keep == 1.0       # 1.3 / 2.0
            assert proto.submodel(a[2])[1].out_features == 20 - submodel_drop(0.65, 20)
        base = proto.global_state()
        ups = []
        for c in range(3):
            sub = proto.submodel(a[c])
            st = {k: v * 1.01 for k, v in sub.state_dict().items()}
            ups.append(ClientUpdate(c, st, 4, times[c] * a[c].keep))
        rep = proto.aggregate(r, a, ups)
        assert not rep.rejected and base.keys() == proto.global_state().keys()


def submodel_drop(p, n):
    return fl.drop_count(p, n)


def test_update_for_unassigned_client_rejected():
    proto = RoundProtocol(models.mlp(4, 2, 4), 2, "random")
    a = proto.assignments(1, [0, 1])
    rep = proto.aggregate(1, a, [ClientUpdate(7, proto.global_state(), 1, 1.0),
                                 ClientUpdate(0, "garbage", 1, 1.0)])
    assert set(rep.rejected) == {7, 0}


# ---------------------------------------------------------------------- simulation
def test_simulation_time_model_and_json(tmp_path):
    pytest.importorskip("sklearn")
    devs = [fl.ClientProfile(2e8 / s, 2e6, 2e6, 0.02) for s in (1.0, 1.2, 1.4, 1.6, 2.2)]
    res = fl.simulate("digits", clients=5, method="invariant", rounds=4, devices=devs, out=tmp_path / "f.json")
    d = data.load_digits(5, 0.5, 0)
    per_sample = 3 * 2 * (64 * 64 + 64 * 64 + 64 * 10)        # mlp(64, 10, 64) forward, x3 for training
    nbytes = 4 * models.count_parameters(models.mlp(64, 10))
    for c, dev in enumerate(devs):
        t = 0.04 + 2 * nbytes / 2e6 + per_sample * len(d.clients[c][1]) / dev.flops_per_s
        assert res.rounds[0].client_times_s[c] == pytest.approx(t, rel=1e-9)
    assert res.rounds[0].keep == res.rounds[1].keep == {}
    slow = max(range(5), key=lambda c: res.rounds[1].client_times_s[c])
    assert set(res.rounds[2].keep) == {slow}
    assert res.rounds[2].client_times_s[slow] < res.rounds[1].client_times_s[slow]
    back = fl.simulation.FLResult.from_json(tmp_path / "f.json")
    assert back.to_dict() == res.to_dict()
    text = (tmp_path / "f.json").read_text()
    assert "NaN" not in text and "Infinity" not in text
    for r in res.rounds:
        assert 0 <= r.accuracy <= 1 and 0 <= r.fed_accuracy <= 1


def test_simulation_on_leaf_shakespeare_uses_lstm(tmp_path):
    _write(tmp_path / "train" / "a.json", _leaf(["A", "B", "C"], "shakespeare", n=12))
    _write(tmp_path / "test" / "a.json", _leaf(["A", "B", "C"], "shakespeare", n=3))
    d = data.load_leaf(str(tmp_path), "shakespeare")
    res = fl.simulate(d, method="invariant", rounds=3, latency_s=[1.0, 1.2, 2.0], batch_size=4, keep_rule="fluid")
    assert res.model == "shakespeare_lstm" and res.config["optimizer"] == "adam"
    assert res.rounds[2].keep == {2: 0.65}                            # FLuID's bucket for 1.2 / 2.0
    assert all(np.isfinite(r.loss) for r in res.rounds)


def test_simulation_bad_arguments():
    pytest.importorskip("sklearn")
    with pytest.raises(ValueError, match="method"):
        fl.simulate("digits", method="magic", rounds=1)
    with pytest.raises(ValueError, match="rounds"):
        fl.simulate("digits", rounds=0)
    with pytest.raises(ValueError, match="latency_s"):
        fl.simulate("digits", clients=3, rounds=1, latency_s=[1.0, -1.0, 2.0])
    with pytest.raises(ValueError, match="optimizer"):
        fl.simulate("digits", clients=3, rounds=1, optimizer="lbfgs")
    with pytest.raises(ValueError, match="dataset"):
        fl.simulate("mnist9", rounds=1)


@pytest.mark.parametrize("protocol", range(0, pickle.HIGHEST_PROTOCOL + 1))
def test_cifar_batches_of_every_pickle_protocol(tmp_path, protocol):
    """Python 3 pickles of every protocol (bytes as _codecs.encode on 0-2, in-band buffers on 5)
    load; numpy arrays and lists of labels alike."""
    rng = np.random.default_rng(protocol)
    for name, n in (("data_batch_1", 12), ("test_batch", 6)):
        labels = rng.integers(0, 10, n)
        with open(tmp_path / name, "wb") as fh:
            pickle.dump({b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
                         "labels": labels if protocol % 2 else labels.tolist(), b"batch_label": b"x"}, fh,
                        protocol=protocol)
    d = data.load_cifar10(str(tmp_path), clients=2, alpha=None)
    assert d.test[0].shape == (6, 3, 32, 32)


def test_cifar_unpickler_admits_latin1_bytes_only(tmp_path):
    """_codecs.encode is admitted for what protocols 0-2 store bytes as, and only with latin-1."""
    import codecs
    for enc, ok in (("latin1", True), ("rot13", False)):
        class _B:
            def __reduce__(self, enc=enc):
                return (codecs.encode, ("abc", enc))
        (tmp_path / "data_batch_1").write_bytes(pickle.dumps({b"data": _B(), b"labels": [0]}, protocol=2))
        with pytest.raises(ValueError, match="NumPy array" if ok else "not a CIFAR-10 batch"):
            data._read_cifar_batch(str(tmp_path / "data_batch_1"))


def test_fluid_partition_files(tmp_path):
    """FLuID's Android layout: partition_<i>_{train,test}.txt list image paths whose folder is the
    class; client c reads partitions c and c + clients."""
    from PIL import Image
    rng = np.random.default_rng(0)
    want = {}
    for i in range(4):                                   # 2 clients x 2 partitions
        for split, n in (("train", 3), ("test", 1)):
            lines = []
            for k in range(n):
                cls = data.CIFAR10_CLASSES[(i + k) % 10]
                rel = f"{split}/{cls}/img_{i}_{k}.png"
                (tmp_path / split / cls).mkdir(parents=True, exist_ok=True)
                px = rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)
                Image.fromarray(px).save(tmp_path / rel)
                want[rel] = (px, (i + k) % 10)
                lines.append(rel)
            (tmp_path / f"partition_{i}_{split}.txt").write_text("\n".join(lines) + "\n")
    d = data.load_cifar10(str(tmp_path), clients=2)
    assert [len(y) for _, y in d.clients] == [6, 6] and [len(y) for _, y in d.client_tests] == [2, 2]
    x0, y0 = d.clients[1]                                 # client 1: partitions 1 then 3
    px, label = want["train/bird/img_1_1.png"]           # partition 1, second line: class (1 + 1)
    np.testing.assert_allclose(x0[1], px.transpose(2, 0, 1) / 255.0, rtol=1e-6)
    assert y0.tolist() == [1, 2, 3, 3, 4, 5] and label == 2
    assert len(d.test[1]) == 4
    (tmp_path / "partition_0_train.txt").write_text("../../etc/cat/passwd.png\n")
    with pytest.raises(ValueError, match="outside"):
        data.load_cifar10(str(tmp_path), clients=2)


def test_leaf_loader_stops_at_max_clients(tmp_path, monkeypatch):
    """With max_clients the LEAF files are read one at a time and reading stops once enough users
    are found: a later, broken file is never opened."""
    _write(tmp_path / "train" / "a.json", _leaf(["u1", "u2"], "femnist", n=4))
    _write(tmp_path / "train" / "b.json", _leaf(["u3"], "femnist", n=4))
    (tmp_path / "train" / "c.json").write_text("{not json")
    _write(tmp_path / "test" / "a.json", _leaf(["u1", "u2", "u3"], "femnist", n=2))
    (tmp_path / "test" / "b.json").write_text("{not json")
    d = data.load_leaf(str(tmp_path), "femnist", max_clients=3)
    assert len(d.clients) == 3 and len(d.test[1]) == 6           # the three users' test data only
    d2 = data.load_leaf(str(tmp_path), "femnist", max_clients=2)
    assert len(d2.clients) == 2
    with pytest.raises(ValueError, match="not valid JSON"):
        data.load_leaf(str(tmp_path), "femnist")                 # everything: the broken file is read
    with pytest.raises(ValueError, match="max_clients"):
        data.load_leaf(str(tmp_path), "femnist", max_clients=0)


def test_dirichlet_alpha_must_be_a_positive_finite_number():
    """``alpha=nan`` passed ``alpha <= 0`` and failed later as "fewer than 4 samples; raise
    alpha"; each bad alpha is now refused as what it is."""
    rng = np.random.default_rng(0)
    y = np.repeat(np.arange(10), 20)
    for bad in (float("nan"), float("inf"), -1.0, 0.0):
        with pytest.raises(ValueError, match="alpha must be a positive finite number"):
            data.dirichlet_partition(y, 4, bad, rng)
    parts = data.dirichlet_partition(y, 4, 0.5, rng)
    assert sorted(np.concatenate(parts).tolist()) == list(range(200))


@pytest.mark.parametrize("kw, message", [
    # found by fuzzing simulate()'s arguments: each raised a TypeError from numpy, torch or a comparison
    ({"seed": "x"}, "seed must be a non-negative integer"),
    ({"seed": -1}, "seed must be a non-negative integer"),
    ({"clients": None}, "clients must be a positive integer"),
    ({"stop_at_accuracy": [0.5]}, "stop_at_accuracy must be a positive"),
    ({"straggler_fraction": (0.1, 0.2)}, "straggler fraction must be in \\(0, 1\\)"),
    ({"devices": float("nan")}, "devices must be 3 ClientProfile objects"),
    ({"latency_s": {}}, "latency_s must give a number of seconds"),
    ({"model": [1, 2]}, "unknown model"),
    ({"noise_cv": "adam"}, "noise_cv must be a non-negative number"),
    ({"method_options": {"treshold": 0.1}}, "method 'invariant' takes no option\\(s\\) \\['treshold'\\]"),
    ({"alpha": 2**70}, "alpha must be a positive finite number below 1e12"),
    ({"local_epochs": 1e12}, "local_epochs=1,000,000,000,000 is larger than the supported maximum 10,000"),
])
def test_simulate_refuses_arguments_of_the_wrong_kind_by_name(kw, message):
    with pytest.raises(ValueError, match=message):
        fl.simulate("digits", **{"clients": 3, "rounds": 1, **kw})


def test_a_folder_given_for_the_bundled_digits_is_refused(tmp_path):
    """digits needs no files: a --data folder given with it would go unread, so it is refused by
    name rather than silently ignored (the run then trained on the bundled digits)."""
    with pytest.raises(ValueError, match="digits is bundled with cosearch, so data_dir"):
        data.load_dataset("digits", 5, str(tmp_path))
    assert len(data.load_dataset("digits", 5, None).clients) == 5
