"""Flower Datasets path: partitions in the Hub datasets' column layout become FLData (tiny
in-memory fixtures, no network), and a missing extra says how to get the data."""

import importlib.util

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
