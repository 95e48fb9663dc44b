"""Public functions handed an object of the wrong kind refuse it by name (a ValueError naming the
function and argument), not a TypeError or AttributeError from deep inside: each case below was
such a traceback until stop 71 (found by calling every public function with wrong-typed
arguments)."""

from pathlib import Path

import numpy as np
import pytest

from cosearch import cost, frontier, placement, ranking
from cosearch.runs import detect_format, merge, read_maxtext, read_megatron_bridge

DATA = Path(__file__).parent / "data" / "runs"


@pytest.mark.parametrize("call, match", [
    (lambda: cost.price({}, "H100"), "ops must be a LayerGraph"),
    (lambda: merge(5), "merge: give a list of RunConfig"),
    (lambda: merge(["llama3-8b"]), "merge: give a list of RunConfig"),
    (lambda: detect_format(None), "detect_format: the config must be a file path"),
    (lambda: read_megatron_bridge(None, b"x"), "overrides must be a list of key=value strings"),
    (lambda: read_maxtext(None, "model_name=llama2-7b"), "overrides must be a list of key=value strings"),
    (lambda: placement.default_tps(None, 8), "default_tps: model must be a ModelConfig"),
    (lambda: placement.default_tps("llama3-8b", None), "chips"),
    (lambda: placement.default_tps("llama3-8b", 8, None), "candidates must be a sequence"),
    (lambda: frontier.fixed_system([]), "unknown fixed system"),
    (lambda: frontier.hbm_variant("H100", [], 2), "unknown HBM stack"),
    (lambda: frontier.split_baselines(None, None), "split_baselines: res must be a CodesignResults"),
    (lambda: frontier.design_report("x", None, None), "design_report: res must be a CodesignResults"),
    (lambda: frontier.default_plan_options(None, "H100", 8), "default_plan_options: model must be a ModelConfig"),
    (lambda: ranking.bound_candidates("llama3-8b", np.zeros((1, 1)), 8, 16, (1,), (1,), (False,), True, None, 1.0),
     "bound_candidates: model must be a ModelConfig"),
    (lambda: ranking.rank_top_ilp(None, None, None, 16, None, 3, {}, np.zeros(1), (1,), (1,), np.zeros(1),
                                  np.zeros(1)), "rank_top_ilp: res must be a Results"),
])
def test_wrong_kind_refused_by_name(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_overrides_none_is_no_overrides():
    """``overrides=None`` reads as no overrides (Python's usual "nothing given")."""
    assert read_maxtext(None, None).resolve(16) is not None


def test_fl_functions_refuse_the_wrong_kind():
    torch = pytest.importorskip("torch")
    from cosearch.fl import extract_submodel, groups, merge_updates, training_flops
    net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    x = torch.zeros((2, 4))
    with pytest.raises(ValueError, match="training_flops: model must be a torch.nn.Module"):
        training_flops(None, x, 10)
    with pytest.raises(ValueError, match="training_flops: example_input must be a torch.Tensor"):
        training_flops(net, "x", 10)
    with pytest.raises(ValueError, match="samples"):
        training_flops(net, x, 0)
    assert training_flops(net, x, 10) > 0
    with pytest.raises(ValueError, match="extract_submodel: model must be a torch.nn.Module"):
        extract_submodel("net", {})
    with pytest.raises(ValueError, match="extract_submodel: the groups must be a list of Group"):
        extract_submodel(net, {}, x, model_groups=5)
    gs = groups(net, x)
    with pytest.raises(ValueError, match="merge_updates: global_state must be a state dict"):
        merge_updates(None, [], gs)
    with pytest.raises(ValueError, match="merge_updates: updates must be a list"):
        merge_updates(net.state_dict(), "u", gs)
    with pytest.raises(ValueError, match="merge_updates: the groups must be a list of Group"):
        merge_updates(net.state_dict(), [], "gs")


@pytest.mark.parametrize("field, value, match", [
    ("num_layers", None, "num_layers"),
    ("extra_params", None, "extra_params must be an integer"),
    ("mla", -1, "mla must be"),
    ("compressed_attention", {}, "compressed_attention"),
])
def test_model_config_fields_of_the_wrong_kind(field, value, match):
    """ModelConfig checked its sizes after comparing with them (None < int was a TypeError)."""
    from cosearch import models
    with pytest.raises(ValueError, match=match):
        models.preset("deepseek-v3").with_(**{field: value})


def test_plan_spec_stage_layers_of_the_wrong_kind():
    from cosearch.plan import PlanSpec
    with pytest.raises(ValueError, match="stage_layers must be a list"):
        PlanSpec(8, 1, 2, 1, stage_layers=-1)
    assert PlanSpec(8, 1, 2, 1, stage_layers=np.array([16, 16])).stage_layers == (16, 16)
