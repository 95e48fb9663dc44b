"""Layers kept in bf16 under a low precision (``PlanSpec.bf16_layers``: Megatron's
``--first-last-layers-bf16``, Megatron-Bridge's ``first_last_layers_bf16``), priced on the stages
that hold them against graphs priced op by op, and read from the frameworks' configs."""
import pytest

import cosearch
from cosearch import cost, graph, hardware, models, plan
from cosearch.runs.megatron import parse_megatron_args
from cosearch.runs.nemo import read_megatron_bridge

SMALL = models.ModelConfig("small-gqa", num_layers=8, hidden=1024, heads=8, ffn_hidden=2816, vocab=32000,
                           seq_len=2048, kv_heads=2, activation="swiglu", norm="rmsnorm", position="rotary",
                           bias=False, tie_embeddings=False, dropout=False)


def _layer_s(precision: str, passes: str, chip) -> float:
    """One layer's forward plus backward seconds, its graphs priced op by op."""
    f, b = graph.build_pair(SMALL, 1, 1, flash_attention=True, precision=precision, cast_passes=passes)
    return float(cost.price(f, chip)[0].sum() + cost.price(b, chip)[0].sum())


def _layer_fwd_s(precision: str, passes: str, chip) -> float:
    return float(cost.price(graph.build(SMALL, 1, 1, "fwd", flash_attention=True, precision=precision,
                                        cast_passes=passes), chip)[0].sum())


@pytest.mark.parametrize("recompute", ["none", "full"])
def test_bf16_layers_cost_their_graphs_difference(recompute):
    """One H100, no parallelism, 4 microbatches, 8 layers, FP8 with delayed scaling: keeping the
    first and the last layer in bf16 adds, per microbatch, twice what a bf16 layer's forward and
    backward take beyond an FP8 layer's (and under full recompute its forward once more)."""
    chip = hardware.preset("H100")
    d_layer = _layer_s("bf16", "single", chip) - _layer_s("fp8", "norm-fused", chip)
    d_fwd = _layer_fwd_s("bf16", "single", chip) - _layer_fwd_s("fp8", "norm-fused", chip)
    assert d_layer > 0 and d_fwd > 0
    per_mb = d_layer + (d_fwd if recompute == "full" else 0.0)
    cl = cosearch.Cluster(1)
    step = {}
    for ends in ((0, 0), (1, 1)):
        spec = plan.PlanSpec(1, 1, 1, 1, recompute=recompute, flash_attention=True, precision="fp8", bf16_layers=ends)
        p = plan.evaluate(SMALL, chip, cl, spec, 4)
        assert p.feasible
        step[ends] = p.step_time_s
    assert step[(1, 1)] - step[(0, 0)] == pytest.approx(4 * 2 * per_mb, rel=1e-9)


def test_bf16_layers_sit_on_the_end_stages():
    """pp 2 on two chips, 4 microbatches, stages of 7 and 1 layers (the first critical): its 3
    first layers in bf16 lengthen the step by the critical stage's (m + pp - 1) = 5 microbatch
    slots of three layers' difference; the last layer in bf16 lands on the short last stage and
    leaves the step as it is."""
    chip = hardware.preset("H100")
    d = _layer_s("bf16", "single", chip) - _layer_s("fp8", "norm-fused", chip)
    cl = cosearch.Cluster(2)

    def run(ends):
        spec = plan.PlanSpec(1, 1, 2, 1, stage_layers=(7, 1), flash_attention=True, precision="fp8", bf16_layers=ends)
        return plan.evaluate(SMALL, chip, cl, spec, 4)
    base, first, last = run((0, 0)), run((3, 0)), run((0, 1))
    assert base.critical_stage == first.critical_stage == last.critical_stage == 0
    assert first.step_time_s - base.step_time_s == pytest.approx(5 * 3 * d, rel=1e-9)
    assert last.step_time_s == base.step_time_s
    # and the other way round: stages of 1 and 7 layers, the last critical, its last 3 layers in bf16
    spec = plan.PlanSpec(1, 1, 2, 1, stage_layers=(1, 7), flash_attention=True, precision="fp8")
    p0 = plan.evaluate(SMALL, chip, cl, spec, 4)
    p3 = plan.evaluate(SMALL, chip, cl, spec.with_(bf16_layers=(0, 3)), 4)
    assert p0.critical_stage == p3.critical_stage == 1
    assert p3.step_time_s - p0.step_time_s == pytest.approx(5 * 3 * d, rel=1e-9)


def test_a_stage_that_cannot_hold_its_bf16_layers_is_refused():
    cl = cosearch.Cluster(2)
    spec = plan.PlanSpec(1, 1, 2, 4, virtual_stages=2, flash_attention=True, precision="fp8", bf16_layers=(3, 1))
    with pytest.raises(ValueError, match="first model chunk of the first stage.*hold 2 and 2 layers"):
        plan.evaluate(SMALL, "H100", cl, spec, 8)
    with pytest.raises(ValueError, match="hold 8 and 8"):
        plan.evaluate(SMALL, "H100", cosearch.Cluster(1),
                      plan.PlanSpec(1, 1, 1, 1, flash_attention=True, precision="fp8", bf16_layers=(5, 4)), 4)
    with pytest.raises(ValueError, match="precision is bf16 already"):
        plan.PlanSpec(1, 1, 1, 1, bf16_layers=(1, 1))
    with pytest.raises(ValueError, match="give \\(first, last\\)"):
        plan.PlanSpec(1, 1, 1, 1, precision="fp8", bf16_layers=(1,))
    with pytest.raises(ValueError, match="bf16_layers"):
        plan.PlanSpec(1, 1, 1, 1, precision="fp8", bf16_layers=(-1, 0))


def test_the_spec_keeps_and_says_its_bf16_layers():
    spec = plan.PlanSpec(2, 1, 1, 1, precision="fp8", bf16_layers=[2, 1])
    assert spec.bf16_layers == (2, 1) and "bf16-ends 2/1" in spec.describe()
    assert plan.PlanSpec.from_dict(spec.to_dict()) == spec
    d = spec.to_dict()
    d.pop("bf16_layers")
    assert plan.PlanSpec.from_dict(d).bf16_layers == (0, 0)


def test_readers_take_the_bf16_layers_from_the_config():
    gpt = models.preset("gpt3-1.3b")
    line = "--fp8-format hybrid --global-batch-size 8"
    assert parse_megatron_args(line, gpt, 8).spec.bf16_layers == (0, 0)
    assert parse_megatron_args(line + " --first-last-layers-bf16", gpt, 8).spec.bf16_layers == (1, 1)   # defaults
    assert parse_megatron_args(line + " --first-last-layers-bf16 --num-layers-at-start-in-bf16 0 "
                               "--num-layers-at-end-in-bf16 2", gpt, 8).spec.bf16_layers == (0, 2)
    assert parse_megatron_args(line + " --num-layers-at-end-in-bf16 2", gpt, 8).spec.bf16_layers == (0, 0)
    assert parse_megatron_args("--first-last-layers-bf16 --global-batch-size 8", gpt, 8).spec.bf16_layers == (0, 0)
    base = models.preset("llama2-7b")
    words = ["train.global_batch_size=16"]
    cases = [(["mixed_precision=bf16_with_fp8_current_scaling_mixed"], (1, 1)),     # the recipe's own default
             (["mixed_precision=bf16_with_fp8_current_scaling_mixed",                 # Megatron-Bridge's perf scripts
               "mixed_precision.first_last_layers_bf16=false"], (0, 0)),
             (["mixed_precision=nemotron_3_super_bf16_with_nvfp4_mixed"], (0, 14)),
             (["mixed_precision=bf16_with_mxfp8_mixed"], (0, 0)),
             (["mixed_precision.fp8=hybrid", "mixed_precision.first_last_layers_bf16=true"], (0, 0)),   # MB's 0 / 0
             (["mixed_precision.fp8=hybrid", "mixed_precision.first_last_layers_bf16=true",
               "mixed_precision.num_layers_at_start_in_bf16=2", "mixed_precision.num_layers_at_end_in_bf16=1"], (2, 1))]
    for extra, want in cases:
        d = read_megatron_bridge(None, words + extra, model=base).resolve(8)
        assert d.spec.bf16_layers == want, extra
    # a Megatron-Bridge config's FP8 without a recipe is its MixedPrecisionConfig's default, tensorwise
    d = read_megatron_bridge(None, words + ["mixed_precision.fp8=hybrid"], model=base).resolve(8)
    assert d.spec.scaling_recipe == "tensorwise" and any("tensorwise" in a for a in d.assumed)


def test_cli_prices_bf16_layers_on_a_fixed_plan_only(capsys):
    from cosearch.cli import main
    args = ["plan", "--model", "llama3-8b", "--chip", "H100", "--cluster", "dgx-h100", "--nodes", "1", "--batch", "64",
            "--tp", "2", "--mb", "1", "--sp", "--zero", "1", "--flash", "--recompute", "none", "--precision", "fp8"]
    fixed = args + ["--dp", "4", "--pp", "1"]
    assert main(fixed + ["--bf16-layers", "1,1"]) == 0
    assert "bf16-ends 1/1" in capsys.readouterr().out
    assert main(args + ["--bf16-layers", "1,1"]) == 2
    assert "prices a fixed plan" in capsys.readouterr().err
    assert main(fixed + ["--bf16-layers", "1"]) == 2
    assert "give FIRST,LAST" in capsys.readouterr().err
