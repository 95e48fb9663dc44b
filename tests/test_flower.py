import numpy as np
import pytest

pytest.importorskip("flwr")
pytest.importorskip("ray")
pytest.importorskip("sklearn")


def test_flower_simulation_sends_submodels_and_merges():
    from flwr.server import ServerConfig
    from flwr.simulation import start_simulation

    from cosearch.fl import data, flower, models

    d = data.load_digits(3, alpha=None)
    lat = [1.0, 1.3, 2.0]

    def model_fn():
        return models.mlp(64, 10, 32)

    def client_fn(context):
        i = int(context.node_config["partition-id"])
        return flower.SubmodelClient(model_fn, *d.clients[i], latency_s=lat[i]).to_client()

    strat = flower.DropoutStrategy(model_fn, "invariant", min_clients=3)
    start_simulation(client_fn=client_fn, num_clients=3, config=ServerConfig(num_rounds=3), strategy=strat,
                     client_resources={"num_cpus": 1}, ray_init_args={"num_cpus": 2, "include_dashboard": False})
    h = strat.history
    assert len(h) == 3 and h[0]["round_time_s"] == pytest.approx(2.0)
    # the straggler (2.0 s) got its own sub-model: 1.3 / 2.0 = 0.65 -> width 0.65
    assert list(h[1]["p"].values()) == [0.65] and h[1]["round_time_s"] == pytest.approx(1.3)
    assert all(r["rejected"] == 0 for r in h)
    # the global model is still full size and finite
    for v in strat.model.state_dict().values():
        assert np.isfinite(v.numpy()).all()
    assert strat.model[1].out_features == 32


def test_mask_codec_round_trip():
    from cosearch.fl import flower
    m = {"a": np.array([True, False, True]), "b": np.array([False, False, True, True])}
    back = flower.decode_masks(flower.encode_masks(m))
    assert all(np.array_equal(back[k], m[k]) for k in m)
