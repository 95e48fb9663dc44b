"""Flower Datasets path: partitions in the Hub datasets' column layout become FLData (tiny
in-memory fixtures, no network), and a missing extra says how to get the data."""

import importlib.util
import json
import os

import numpy as np
import pytest
from PIL import Image

from cosearch.fl import data
from cosearch.fl import flower_datasets as fd


def _femnist_part(rng, n):
    px = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
    return {"image": [Image.fromarray(p, mode="L") for p in px], "character": rng.integers(0, 62, n).tolist(),
            "writer_id": ["w"] * n}, px


def test_femnist_partitions_become_clients_with_their_own_test_split():
    rng = np.random.default_rng(0)
    parts, raw = zip(*(_femnist_part(rng, 10) for _ in range(2)))
    d = fd.from_partitions("femnist", parts, seed=1)
    assert [len(y) for _, y in d.clients] == [8, 8] and [len(y) for _, y in d.client_tests] == [2, 2]
    assert d.in_shape == (1, 28, 28) and d.classes == 62 and len(d.test[1]) == 4
    # every training sample is one of the partition's images, scaled to [0, 1], with its label
    x, y = d.clients[0]
    for xi, yi in zip(x, y):
        k = [j for j in range(10) if np.allclose(raw[0][j] / 255.0, xi[0])]
        assert len(k) == 1 and parts[0]["character"][k[0]] == yi


def test_shakespeare_and_cifar_layouts():
    line = "To be, or not to be: that is the question. Whether 'tis nobler in the mind to suf"[:80]
    part = {"x": [line] * 5, "y": ["f"] * 5, "character_id": ["HAMLET"] * 5}
    d = fd.from_partitions("shakespeare", [part, part])
    assert d.clients[0][0].shape[1:] == (80,) and d.clients[0][1][0] == data.SHAKESPEARE_CHARS.index("f")
    assert "".join(data.SHAKESPEARE_CHARS[i] for i in d.clients[0][0][0]) == line
    rng = np.random.default_rng(2)
    imgs = rng.integers(0, 256, (6, 32, 32, 3), dtype=np.uint8)
    cpart = {"img": [Image.fromarray(p) for p in imgs], "label": [0, 1, 2, 3, 4, 5]}
    test = {"img": [Image.fromarray(imgs[0])], "label": [7]}
    c = fd.from_partitions("cifar10", [cpart], central_test=test)
    assert c.test[0].shape == (1, 3, 32, 32) and c.test[1].tolist() == [7]
    np.testing.assert_allclose(c.test[0][0], imgs[0].transpose(2, 0, 1) / 255.0, rtol=1e-6)
    with pytest.raises(ValueError, match="80-character"):
        fd.partition_arrays("shakespeare", {"x": ["\u00e9" * 80], "y": ["a"]})


@pytest.mark.skipif(importlib.util.find_spec("flwr_datasets") is not None, reason="Flower Datasets is installed")
def test_missing_extra_says_how_to_get_the_data():
    with pytest.raises(ImportError, match=r"cosearch\[datasets\]") as e:
        data.load_dataset("femnist", 3)
    assert "HF_DATASETS_OFFLINE" in str(e.value) and "--data" in str(e.value)
    from cosearch.cli import main
    assert main(["fl", "simulate", "--dataset", "cifar10", "--rounds", "1"]) == 2


# ------------------------------------------------------------------ FLuID's own client files
FLUID = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "fluid")


def _raw(path):
    import gzip
    with gzip.open(path, "rt") as fh:
        return json.load(fh)


def test_fluid_femnist_client_files_are_one_client_each():
    """FLuID's FEMNIST files hold several real writers per client: each file is one client with
    every writer's images; with only the _test files, each is split 80/20 (5 of 24 held out)."""
    from cosearch.fl.data import load_dataset, load_fluid_clients
    d = load_fluid_clients(os.path.join(FLUID, "femnist"), "femnist")
    assert len(d.clients) == 2 and d.in_shape == (1, 28, 28) and d.classes == 62
    for i, ((x, y), (tx, ty)) in enumerate(zip(d.clients, d.client_tests)):
        raw = _raw(os.path.join(FLUID, "femnist", f"{i}_test.json.gz"))
        want = sorted(tuple(np.round(np.asarray(r, dtype=np.float32), 6)) for u in raw["users"]
                      for r in raw["user_data"][u]["x"])
        got = sorted(tuple(np.round(r.ravel(), 6)) for r in np.concatenate([x, tx]))
        assert got == want and (len(y), len(ty)) == (19, 5)
    assert len(d.test[1]) == 10
    assert load_dataset("femnist", 2, os.path.join(FLUID, "femnist")).clients[0][0].shape == d.clients[0][0].shape
    with pytest.raises(ValueError, match="holds 2 FLuID clients, not 5"):
        load_fluid_clients(os.path.join(FLUID, "femnist"), "femnist", clients=5)


def test_fluid_shakespeare_role_files_decode_to_their_text(tmp_path):
    """FLuID's Shakespeare files are one role each, {idx, character, x, y}: x decodes back to its
    80-character lines through LEAF's alphabet, y to the next character; LEAF's loader refused
    them ("missing 'users'") before."""
    from cosearch.fl.data import SHAKESPEARE_CHARS, load_dataset
    d = load_dataset("shakespeare", 2, os.path.join(FLUID, "shakespeare"))
    for i in range(2):
        raw = _raw(os.path.join(FLUID, "shakespeare", f"{i}_train.json.gz"))
        x, y = d.clients[i]
        assert ["".join(SHAKESPEARE_CHARS[c] for c in row) for row in x] == raw["x"]
        assert "".join(SHAKESPEARE_CHARS[c] for c in y) == "".join(raw["y"])
        assert len(d.client_tests[i][1]) == 10
    assert len(d.test[1]) == 20 and d.in_shape == (80,)
    # plain JSON works too; a gap in the numbering and a stale num_samples are named
    import gzip
    import shutil
    for i in (0, 2):
        for split in ("train", "test"):
            with gzip.open(os.path.join(FLUID, "shakespeare", f"0_{split}.json.gz"), "rb") as src, \
                    open(tmp_path / f"{i}_{split}.json", "wb") as dst:
                shutil.copyfileobj(src, dst)
    with pytest.raises(ValueError, match="numbered 0..1"):
        load_dataset("shakespeare", 2, str(tmp_path))
    os.rename(tmp_path / "2_train.json", tmp_path / "1_train.json")
    os.rename(tmp_path / "2_test.json", tmp_path / "1_test.json")
    doc = json.loads((tmp_path / "1_test.json").read_text())
    (tmp_path / "1_test.json").write_text(json.dumps(dict(doc, num_samples=99)))
    with pytest.warns(UserWarning, match="num_samples says 99"):
        d = load_dataset("shakespeare", 2, str(tmp_path))
    assert len(d.client_tests[1][1]) == 10
    # found by fuzzing FLuID's files: x of the wrong kind raised TypeError (len of a number)
    (tmp_path / "1_test.json").write_text(json.dumps(dict(doc, x=7)))
    with pytest.raises(ValueError, match="1_test.json .*'x' and 'y' must be lists"):
        load_dataset("shakespeare", 2, str(tmp_path))


@pytest.mark.parametrize("change, message", [
    # each raised TypeError (found by fuzzing FLuID's FEMNIST client files)
    (lambda d: d.update(user_data=3), "LEAF's 'user_data' must be an object"),
    (lambda d: d.update(users=[["f0027_29"]]), "LEAF's 'users' must be a list of user names"),
    (lambda d: d.update(users=None), "LEAF's 'users' must be a list of user names"),
    (lambda d: d.update(users=d["users"] + ["nobody"]), "user 'nobody' is listed but has no user_data"),
])
def test_fluid_femnist_files_of_the_wrong_shape_are_refused_by_name(tmp_path, change, message):
    import gzip
    import shutil

    from cosearch.fl.data import load_dataset
    for f in os.listdir(os.path.join(FLUID, "femnist")):
        shutil.copy(os.path.join(FLUID, "femnist", f), tmp_path / f)
    doc = _raw(tmp_path / "1_test.json.gz")
    change(doc)
    with gzip.open(tmp_path / "1_test.json.gz", "wt") as fh:
        json.dump(doc, fh)
    with pytest.raises(ValueError, match=message):
        load_dataset("femnist", 2, str(tmp_path))


def test_saved_partitions_load_offline_as_written(tmp_path):
    """`fl data fetch` writes a dataset's partitions once; `--data DIR` loads exactly those arrays
    later (checked on FLuID's real FEMNIST clients), refuses another dataset's folder, never
    overwrites without being told, and loads no pickled objects."""
    from cosearch.fl.data import load_dataset, load_fluid_clients, save_partitions
    d = load_fluid_clients(os.path.join(FLUID, "femnist"), "femnist")
    save_partitions(d, str(tmp_path / "p"), source="test")
    back = load_dataset("femnist", 2, str(tmp_path / "p"))
    for (x, y), (bx, by) in zip(d.clients + d.client_tests + [d.test], back.clients + back.client_tests + [back.test]):
        assert np.array_equal(x, bx) and np.array_equal(y, by)
    assert (back.in_shape, back.classes) == (d.in_shape, d.classes)
    with pytest.raises(ValueError, match="saved femnist partitions, not shakespeare"):
        load_dataset("shakespeare", 2, str(tmp_path / "p"))
    with pytest.raises(FileExistsError):
        save_partitions(d, str(tmp_path / "p"))
    np.savez(tmp_path / "p" / "client_1.npz", x=np.array([object()], dtype=object), y=np.zeros(1),
             test_x=np.zeros(1), test_y=np.zeros(1))
    with pytest.raises(ValueError, match="not a saved partition"):
        load_dataset("femnist", 2, str(tmp_path / "p"))
    # the bundled digits: a folder of them could never be loaded back, so none is written
    with pytest.raises(ValueError, match="digits is bundled with cosearch: there is nothing to save"):
        save_partitions(load_dataset("digits", 3), str(tmp_path / "d"))
    assert not (tmp_path / "d").exists()

def test_one_saved_partition_is_read_alone_and_femnist_like_has_femnist_shapes(tmp_path):
    from cosearch.fl.data import femnist_like, is_saved_partitions, load_partition, save_partitions
    d = femnist_like(3, samples=20, seed=1)
    assert d.in_shape == (1, 28, 28) and d.classes == 62 and len(d.clients) == 3
    assert d.clients[0][0].shape == (18, 1, 28, 28) and d.client_tests[0][0].shape == (2, 1, 28, 28)
    assert 0.0 <= d.clients[0][0].min() and d.clients[0][0].max() <= 1.0
    out = save_partitions(d, str(tmp_path / "p"))
    assert is_saved_partitions(out) and not is_saved_partitions(str(tmp_path))
    x, y, tx, ty = load_partition(out, 2)
    np.testing.assert_array_equal(x, d.clients[2][0])
    np.testing.assert_array_equal(ty, d.client_tests[2][1])
    os.remove(os.path.join(out, "client_0.npz"))            # reading client 2 never touches client 0
    assert load_partition(out, 2)[1].tolist() == d.clients[2][1].tolist()
    with pytest.raises(ValueError, match="partition 3"):
        load_partition(out, 3)


@pytest.mark.parametrize("edit, message", [
    # found by fuzzing `--data DIR` on edited partitions: each was read and failed inside torch
    # (a dtype error, a shape error, a C++ abort on a 1e30-class head) or trained on NaN
    (lambda m, a: m.update(classes=1e30), "femnist has input shape \\[1, 28, 28\\] and 62 classes"),
    (lambda m, a: m.update(in_shape=-1), "femnist has input shape"),
    (lambda m, a: m.update(name=[28]), "name must be one of femnist, shakespeare, cifar10"),
    (lambda m, a: m.update(clients="3"), "clients must be a positive whole number"),
    (lambda m, a: a.update(y=a["y"] + 0.5), "labels must be whole numbers"),
    (lambda m, a: a.update(y=a["y"] + 1000), "labels must lie in \\[0, 62\\)"),
    (lambda m, a: a.update(x=a["x"] * np.nan), "non-finite sample values"),
    (lambda m, a: a.update(x=a["x"].reshape(len(a["x"]), -1)), "samples must be numbers of shape \\(n, 1, 28, 28\\)"),
    (lambda m, a: a.update(y=a["y"][:-1]), "samples but .* labels"),
])
def test_edited_saved_partitions_are_refused_naming_the_file(tmp_path, edit, message):
    import json

    from cosearch.fl.data import PARTITIONS_META, femnist_like, load_partitions, save_partitions
    out = save_partitions(femnist_like(2, samples=10, seed=1), str(tmp_path / "p"))
    meta = json.loads((tmp_path / "p" / PARTITIONS_META).read_text())
    with np.load(tmp_path / "p" / "client_1.npz") as z:
        arrays = {k: z[k] for k in z.files}
    edit(meta, arrays)
    (tmp_path / "p" / PARTITIONS_META).write_text(json.dumps(meta))
    np.savez(tmp_path / "p" / "client_1.npz", **arrays)
    with pytest.raises(ValueError, match=message):
        load_partitions(out)


def test_central_test_of_fluids_clients_is_evaluated_once_as_their_union():
    """FLuID's client files make the central test set the clients' test splits in order: one pass
    over the splits gives both evaluations (the central accuracy is then the clients', exactly);
    a central set that differs is evaluated on its own."""
    from pathlib import Path

    from cosearch.fl.data import load_fluid_clients
    from cosearch.fl.fldata import FLData
    from cosearch.fl.simulation import _test_is_union, evaluate_model, simulate
    d = load_fluid_clients(str(Path(__file__).parent / "data" / "fluid" / "femnist"), "femnist")
    assert _test_is_union(d)
    other = FLData(d.clients, (d.test[0][::-1].copy(), d.test[1][::-1].copy()), d.in_shape, d.classes, d.name,
                   d.client_tests)
    assert not _test_is_union(other)
    res = simulate(d, len(d.clients), "none", rounds=1, seed=0)
    r = res.rounds[0]
    assert r.accuracy == r.fed_accuracy and r.loss == pytest.approx(r.fed_loss, rel=1e-12)
    import torch
    net = torch.nn.Linear(2, 3)
    x, y = np.zeros((5, 2), dtype=np.float32), np.array([0, 1, 2, 0, 0])
    acc, _loss, n = evaluate_model(net, x, y)                 # a constant model: one class for every input
    assert n == 5 and acc in (0.6, 0.2)
