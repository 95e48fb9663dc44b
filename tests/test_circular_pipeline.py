"""MaxText's SPMD circular pipeline (``Engine.pipeline_schedule = "circular"``): its iterations
against a simulation of MaxText's own indexing, what a stage keeps against the residuals JAX
saves for MaxText's pipeline (``cosearch/data/maxtext_pipeline_residuals.csv``), the step's
bubble per pass, the plan checks, the MaxText reader, and the plan search against brute force."""

import csv
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from cosearch import cluster, engine, hardware, memory, models, placement
from cosearch._kernels import formulas as F
from cosearch.plan import PlanSpec, evaluate
from cosearch.runs import read_maxtext
from tests.reference import maxtext_pipeline_iterations

DATA = Path(__file__).parent.parent / "cosearch" / "data" / "maxtext_pipeline_residuals.csv"
#: the model every row was compiled with (maxtext_pipeline_residuals.md)
TINY = models.ModelConfig("maxtext-16x1024", 16, 1024, 8, 4096, 1024, 2048, kv_heads=8, activation="swiglu",
                          norm="rmsnorm", position="rotary", bias=False, tie_embeddings=False, dropout=False)


def _rows():
    with open(DATA, newline="") as f:
        return list(csv.DictReader(f))


def _bytes(array: str) -> int:
    """An array's bytes per token or slot as the CSVs write it: ``1024`` bf16 values, ``8x128``
    heads of them, or another dtype after a colon (``8:f32``, ``1:i32``)."""
    shape, _, dtype = array.partition(":")
    return math.prod(int(x) for x in shape.split("x")) * {"": 2, "bf16": 2, "f32": 4, "i32": 4}[dtype]


@pytest.mark.parametrize("stages, repeats, micro", [(4, 1, 4), (4, 2, 8), (4, 4, 4), (2, 4, 4), (8, 3, 16),
                                                    (3, 5, 6)])
def test_iterations_against_a_simulation_of_maxtexts_indexing(stages, repeats, micro):
    """MaxText's loop runs micro x repeats + stages - 1 iterations (the simulation counts them);
    every stage does micro x repeats real chunk-steps, so (stages - 1) of its iterations are
    bubble, and the stage-equivalents a stage keeps — every iteration's chunk of 1 / repeats of
    its layers — are inflight_circular's."""
    it, done = maxtext_pipeline_iterations(stages, repeats, micro)
    assert done == [micro * repeats] * stages
    assert it == micro * repeats + stages - 1
    assert F.inflight_circular(stages, micro, repeats, 1.0) == pytest.approx(it / repeats, rel=1e-12)
    assert F.inflight_circular.py_func(stages, micro, repeats, 1.0) == F.inflight_circular(stages, micro, repeats, 1.0)
    # MaxText's delayed forwarding: every stage's output waits one more iteration, twice the bubble
    it2, done2 = maxtext_pipeline_iterations(stages, repeats, micro, delay=2)
    assert it2 == micro * repeats + 2 * (stages - 1) and done2 == done
    assert F.inflight_circular(stages, micro, repeats, 2.0) == pytest.approx(it2 / repeats, rel=1e-12)


@pytest.mark.parametrize("row", _rows(), ids=lambda r: r["source"])
def test_a_stage_keeps_what_jax_saves_for_maxtexts_pipeline(row):
    """Per chip, the activations a stage keeps (inflight_circular stage-equivalents of its layers'
    saved tensors: each layer's input under remat_policy full; with save_qkv_proj the Q, K and V
    projections too) equal the bytes of the residuals JAX stacks over the pipeline scan's
    iterations for MaxText's own code (shapes read from the dumped jaxpr: iterations x stages x
    microbatch x sequence x width, the microbatch sharded over fsdp, the stages over the stage axis;
    under minimal each layer's input and its named projections, as without a pipeline)."""
    P, lps, R, M = (int(row[k]) for k in ("stages", "layers_per_stage", "repeats", "pipeline_microbatches"))
    fsdp, T, delay = int(row["fsdp"]), int(row["iterations"]), int(row["delay"])
    shape = [int(x) for x in row["array_shape"].split(",")]
    assert shape[0] == T == M * R + delay * (P - 1) and shape[1] == P and P * lps * R == TINY.num_layers
    mb = shape[2] // fsdp                                  # sequences of one microbatch on a chip
    assert mb * fsdp * M == int(row["global_batch"])
    measured = T * mb * shape[3] * sum(_bytes(w) for w in row["token_arrays"].split())     # per chip
    n = TINY.num_layers // P                                 # the stage's layers
    if row["remat_policy"] == "full":
        per_layer = memory.layer_input_bytes(TINY, 1, mb)
    elif row["remat_policy"] == "minimal":
        from cosearch.graph import maxtext_minimal_places
        per_layer = memory.maxtext_saved_bytes(TINY, 1, mb, False, maxtext_minimal_places(TINY))[0]
    else:
        from cosearch.runs.maxtext import NAMED_REMAT_POLICIES
        per_layer = memory.maxtext_saved_bytes(TINY, 1, mb, False, NAMED_REMAT_POLICIES[row["remat_policy"]])[0]
    assert F.inflight_circular(P, M, R, float(delay)) * n * per_layer == pytest.approx(measured, rel=1e-12)


def _spec(**kw):
    base = dict(dp=4, tp=1, pp=4, microbatch=1, virtual_stages=2, recompute="full", zero=3, flash_attention=True)
    return PlanSpec(**{**base, **kw})


def test_the_bubble_is_paid_once_a_pass_and_the_memory_is_a_passs():
    """16 microbatches as one pass or two of 8: the forward, backward and recompute are the same,
    the bubble doubles exactly, and every stage's memory falls by 8 microbatch-stage-equivalents of
    its layers' inputs plus a 1/pp share of 8 microbatches' embedding and head activations, by hand."""
    chip, B = "TPUv5e", 64
    one = evaluate(TINY, chip, 16, _spec(), B, engine="maxtext")
    two = evaluate(TINY, chip, 16, _spec(pipeline_microbatches=8), B, engine="maxtext")
    assert one.num_microbatches == 16
    for k in ("forward_s", "backward_s", "recompute_s", "pp_p2p_s"):
        assert two.breakdown[k] == pytest.approx(one.breakdown[k], rel=1e-12)
    assert one.breakdown["bubble_s"] > 0
    assert two.breakdown["bubble_s"] == pytest.approx(2 * one.breakdown["bubble_s"], rel=1e-12)
    assert two.step_time_s - one.step_time_s == pytest.approx(one.breakdown["bubble_s"], rel=1e-9)
    n = TINY.num_layers // 4
    ends = (memory.embedding_activation_bytes(TINY, 1, 1) + memory.head_activation_bytes(TINY, 1, 1)) / 4
    want = 8 * (n * memory.layer_input_bytes(TINY, 1, 1) + ends)
    for a, b in zip(one.memory_per_chip_bytes, two.memory_per_chip_bytes):
        assert a - b == pytest.approx(want, rel=1e-9)
    # every stage the same under the circular schedule (the embedding and head spread over them)
    assert len(set(round(x) for x in one.memory_per_chip_bytes)) == 1


def test_the_delayed_forwarding_doubles_the_bubble_and_its_kept_iterations():
    """pipeline_delay_activation_forwarding (Engine.pipeline_forwarding_delay 2): the same plan's
    bubble twice, every stage's memory up by the (pp - 1) / R more stage-equivalents of its layers'
    inputs (3 / 2 x 4 layers of one sequence), nothing else; the reader turns it on, its default
    microbatches 2 x pp; too few microbatches refused."""
    delayed = replace(engine.MAXTEXT, name="maxtext-delayed", pipeline_forwarding_delay=2)
    a = evaluate(TINY, "TPUv5e", 16, _spec(), 64, engine="maxtext")
    b = evaluate(TINY, "TPUv5e", 16, _spec(), 64, engine=delayed)
    assert b.breakdown["bubble_s"] == pytest.approx(2 * a.breakdown["bubble_s"], rel=1e-12)
    assert b.breakdown["forward_s"] == pytest.approx(a.breakdown["forward_s"], rel=1e-12)
    extra = 3 / 2 * (TINY.num_layers // 4) * memory.layer_input_bytes(TINY, 1, 1)
    for x, y in zip(a.memory_per_chip_bytes, b.memory_per_chip_bytes):
        assert y - x == pytest.approx(extra, rel=1e-9)
    with pytest.raises(ValueError, match="at least 2 x pp = 8"):
        evaluate(TINY, "TPUv5e", 16, _spec(pipeline_microbatches=4), 64, engine=delayed)
    with pytest.raises(ValueError, match="needs pipeline_schedule='circular'"):
        engine.Engine("x", pipeline_forwarding_delay=2)
    for bad in (3, 2.0, True, "2"):
        with pytest.raises(ValueError, match="must be 1 or 2"):
            engine.Engine("x", pipeline_schedule="circular", pipeline_forwarding_delay=bad)
    r = read_maxtext(None, BASE + ["per_device_batch_size=2", "pipeline_delay_activation_forwarding=true"])
    assert r.plan["pipeline_microbatches"] == 8 and any("forwarding delayed" in x for x in r.assumed)
    assert r.resolve(16).engine.pipeline_forwarding_delay == 2


def test_circular_against_1f1b_on_the_same_engine():
    """The same engine with Megatron's 1F1B: the first stage keeps at most pp - s stage-equivalents
    (here m v ... capped), the circular schedule all of a pass's; the same bubble formula at one
    pass, so with the embedding and head moved off the end stages the step differs only by where
    they run."""
    onef1b = replace(engine.MAXTEXT, name="maxtext-1f1b", pipeline_schedule="1f1b")
    a = evaluate(TINY, "TPUv5e", 16, _spec(), 64, engine="maxtext")
    b = evaluate(TINY, "TPUv5e", 16, _spec(), 64, engine=onef1b)
    assert min(a.memory_per_chip_bytes) > max(b.memory_per_chip_bytes)
    with pytest.raises(ValueError, match="1F1B pipeline, one pass"):
        evaluate(TINY, "TPUv5e", 16, _spec(pipeline_microbatches=8), 64, engine=onef1b)


@pytest.mark.parametrize("kw, why", [
    (dict(pipeline_microbatches=12), "does not divide the step's 16"),
    (dict(stage_layers=(3, 5, 4, 4)), "stage_layers be even"),
    (dict(virtual_stages=3), "virtual_stages=3 does not divide"),
])
def test_plans_the_circular_schedule_cannot_run_are_refused(kw, why):
    with pytest.raises(ValueError, match=why):
        evaluate(TINY, "TPUv5e", 16, _spec(**kw), 64, engine="maxtext")


@pytest.mark.parametrize("kw, why", [
    (dict(pp=1, virtual_stages=1, pipeline_microbatches=4), "needs pipeline parallelism"),
    (dict(pipeline_microbatches=6), "multiple of pp=4"),
])
def test_planspec_checks(kw, why):
    with pytest.raises(ValueError, match=why):
        _spec(**kw)
    s = _spec(pipeline_microbatches=8)
    assert PlanSpec.from_dict(s.to_dict()) == s and s.describe().endswith("pass8")


BASE = ["model_name=llama2-7b", "ici_fsdp_parallelism=4", "ici_pipeline_parallelism=4", "max_target_length=2048",
        "remat_policy=full"]


def test_the_reader_reads_maxtexts_pipeline_keys():
    """32 layers over 4 stages: num_layers_per_pipeline_stage 2 -> 4 repeats; 8 pipeline
    microbatches of the replica's 2 x 4 x 2 = 16 sequences under 2 accumulation steps -> 1 each,
    2 passes; the defaults (1 layer a stage, microbatches = stages) too."""
    r = read_maxtext(None, BASE + ["per_device_batch_size=4", "num_layers_per_pipeline_stage=2",
                                   "num_pipeline_microbatches=8", "gradient_accumulation_steps=2"])
    assert {k: r.plan[k] for k in ("pp", "virtual_stages", "microbatch", "pipeline_microbatches")} == \
        {"pp": 4, "virtual_stages": 4, "microbatch": 1, "pipeline_microbatches": 8}
    assert any("35 iterations, 3 of them bubble), 2 passes a step" in a for a in r.assumed)
    d = r.resolve(16)
    assert d.engine.pipeline_schedule == "circular"
    p = evaluate(d.model, "TPUv5e", 16, d.spec, d.global_batch, engine=d.engine, mem=d.memory)
    assert p.num_microbatches == 16 and p.breakdown["bubble_s"] > 0
    r = read_maxtext(None, BASE + ["per_device_batch_size=1"])
    assert (r.plan["virtual_stages"], r.plan["pipeline_microbatches"], r.plan["microbatch"]) == (8, 4, 1)


@pytest.mark.parametrize("extra, why", [
    (["pipeline_delay_activation_forwarding=true", "num_pipeline_microbatches=4"], "at least 8 with the delayed"),
    (["pipeline_fsdp_ag_once=true"], "pipeline_fsdp_ag_once true"),
    (["pipeline_fsdp_ag_per_repeat=true"], "pipeline_fsdp_ag_per_repeat true"),
    (["pipeline_parallel_layers=16"], "pipeline_parallel_layers 16 of the 32"),
    (["num_pipeline_microbatches=6"], "multiple of the 4 stages"),
    (["num_layers_per_pipeline_stage=3"], "does not divide the 32"),
    (["set_remat_policy_on_pipeline_iterations=false"], "set_remat_policy_on_pipeline_iterations"),
    (["per_device_batch_size=0.5"], "do not split into"),
])
def test_the_reader_refuses_what_it_does_not_model(extra, why):
    with pytest.raises(ValueError, match=why):
        read_maxtext(None, [x for x in BASE if not x.startswith(extra[0].split("=")[0] + "=")] + extra
                     + (["per_device_batch_size=2"] if not extra[0].startswith("per_device") else []))


def test_minimal_under_a_pipeline_is_read_and_keeps_what_jax_saves():
    """remat_policy minimal with pipeline stages (refused until stop 75): MaxText's pipeline policy
    saves the layers' names and the iteration inputs, so every iteration keeps, for each layer of
    the stage's chunk, its input and minimal's projections (maxtext_pipeline_residuals.csv row 9's
    stacked arrays).  Read through the reader's plan for the compiled configuration: 8 pipeline
    microbatches against 4 (per_device_batch_size 2 against 1: one sequence a chip and microbatch
    either way) keep 19 - 11 = 8 more iterations of those arrays and a 1/pp share of 4 more
    microbatches' embedding and head activations; nothing else changes."""
    row = next(r for r in _rows() if r["remat_policy"] == "minimal")
    words = ["base_emb_dim=1024", "base_num_query_heads=8", "base_num_kv_heads=8", "head_dim=128", "base_mlp_dim=4096",
             "vocab_size=1024", "max_target_length=2048", "base_num_decoder_layers=16", "ici_pipeline_parallelism=4",
             "ici_fsdp_parallelism=4", "num_layers_per_pipeline_stage=2", "remat_policy=minimal", "attention=flash",
             "enable_dropout=false"]
    got = {}
    for micro, per_device in ((8, 2), (4, 1)):
        r = read_maxtext(None, words + [f"num_pipeline_microbatches={micro}", f"per_device_batch_size={per_device}"])
        assert r.engine.name == "maxtext-minimal-remat" and r.plan["pp"] == 4
        d = r.resolve(16)
        p = evaluate(d.model, "TPUv5e", 16, d.spec, d.global_batch, engine=d.engine, mem=d.memory)
        assert p.feasible
        got[micro] = p.memory_per_chip_bytes
    T = int(row["iterations"])
    assert T == 19 and int(row["global_batch"]) // int(row["pipeline_microbatches"]) // int(row["fsdp"]) == 1
    per_iteration = 2048 * sum(_bytes(w) for w in row["token_arrays"].split())     # one sequence a chip
    model = r.model
    ends = (memory.embedding_activation_bytes(model, 1, 1) + memory.head_activation_bytes(model, 1, 1)) / 4
    want = (T - 11) * per_iteration + 4 * ends
    for a, b in zip(got[8], got[4]):
        assert a - b == pytest.approx(want, rel=1e-9)


def test_deepseeks_default_pipelines_only_its_moe_layers_and_is_refused():
    with pytest.raises(ValueError, match="pipeline_parallel_layers 58 of the 61"):
        read_maxtext(None, ["model_name=deepseek3-671b", "ici_fsdp_parallelism=4", "ici_pipeline_parallelism=2",
                            "per_device_batch_size=2", "max_target_length=1024"])


def _circular_specs(batch, chips):
    for pp in (1, 2, 4):
        for vs in ((1,) if pp == 1 else (1, 2)):
            if TINY.num_layers % (pp * vs):
                continue
            dp = chips // pp
            for mb in (1, 2):
                if batch % (dp * mb) or (pp > 1 and (batch // (dp * mb)) % pp):
                    continue
                for z in (0, 3):
                    for rc in ("none", "full"):
                        yield PlanSpec(dp, 1, pp, mb, recompute=rc, virtual_stages=vs, zero=z, flash_attention=True)


@pytest.mark.parametrize("delay", [1, 2])
def test_search_under_the_circular_schedule_equals_brute_force(delay):
    """The plan search under the maxtext engine finds the fastest plan that fits, among those the
    circular schedule can run (even splits, pp x repeats dividing the layers, microbatches a
    multiple of pp; with the delayed forwarding at least 2 x pp of them: the search returned plans
    evaluate() refuses until stop 75), as the brute force over evaluate() does — every plan it
    accepts — at two memory limits; every plan the search returns passes evaluate's checks."""
    tiny = TINY.with_(num_layers=8, seq_len=512)
    chip, batch = hardware.preset("TPUv5e"), 16
    cl = cluster.preset("tpuv5e-pod", 8)
    eng = replace(engine.MAXTEXT, name="maxtext-delayed", pipeline_forwarding_delay=2) if delay == 2 else engine.MAXTEXT
    plans, refused = [], 0
    for spec in _circular_specs(batch, 8):
        if tiny.num_layers % (spec.pp * spec.virtual_stages):
            continue
        try:
            p = evaluate(tiny, chip, cl, spec, batch, engine=eng)
        except ValueError:
            refused += 1
            continue
        big = evaluate(tiny, chip.with_(hbm_bytes=1e18), cl, spec, batch, engine=eng)
        plans.append((big.step_time_s, max(p.memory_per_chip_bytes), spec))
    assert len(plans) > 20 and any(s.pp > 1 for *_, s in plans) and (refused > 0) == (delay == 2)
    for q in (0.3, 0.9):
        hbm = float(np.quantile([p[1] for p in plans], q))
        best = min(p[0] for p in plans if p[1] <= hbm)
        res = placement.search_plans(tiny, chip.with_(hbm_bytes=hbm), cl, batch, tps=(1,), microbatches=(1, 2),
                                     virtual_stages=(1, 2), sequence_parallel=(False,), zero=(0, 3),
                                     recompute=("none", "full"), flash_attention=True, engine=eng, top_k=1000)
        assert res.best.step_time_s == pytest.approx(best, rel=1e-9)
        for found in res.plans:
            again = evaluate(tiny, chip.with_(hbm_bytes=hbm), cl, found.spec, batch, engine=eng)
            assert again.step_time_s == pytest.approx(found.step_time_s, rel=1e-9)


def test_the_engine_field_is_checked():
    with pytest.raises(ValueError, match="pipeline_schedule"):
        engine.Engine("x", pipeline_schedule="gpipe")
    assert engine.MAXTEXT.pipeline_schedule == "circular" and engine.MEGATRON_LM.pipeline_schedule == "1f1b"
    assert engine.MAXTEXT_MINIMAL_REMAT.pipeline_schedule == "circular"


def test_the_cli_prices_a_pass_on_a_fixed_plan(capsys):
    """``cosearch plan --engine maxtext --pipeline-microbatches``: a fixed plan's pass (said in its
    line); the virtual stages it searches are those the circular schedule runs; a 1F1B engine
    refuses the flag."""
    from cosearch.cli import main
    args = ["plan", "--model", "llama3-8b", "--chip", "TPUv5e", "--cluster", "tpuv5e-pod", "--chips", "32",
            "--batch", "64", "--dp", "8",
            "--tp", "1", "--pp", "4", "--mb", "1", "--zero", "3", "--flash", "--recompute", "full"]
    assert main(args + ["--engine", "maxtext", "--pipeline-microbatches", "4"]) == 0
    out = capsys.readouterr().out
    assert "pass4" in out and "pp4" in out
    assert main(args + ["--engine", "any", "--pipeline-microbatches", "4"]) == 2
    assert "1F1B pipeline, one pass" in capsys.readouterr().err


LAYER_DATA = Path(__file__).parent.parent / "cosearch" / "data" / "maxtext_layer_residuals.csv"


def _layer_rows():
    with open(LAYER_DATA, newline="") as f:
        return list(csv.DictReader(f))



#: The MaxText configurations of maxtext_layer_residuals.md as cosearch models: the dense base
#: (16 layers of 1024, 8 heads of 128, SwiGLU 4096), its Mixtral block (8 experts of 512, 2 a
#: token, grouped GEMMs or the token-dropping einsums at capacity 1.0) and its DeepSeek block (MLA
#: with query / key-value latents 256 / 128, 64 + 32 RoPE dims a head, one shared expert of 512).
_MOE = dict(ffn_hidden=512, num_experts=8, experts_per_token=2, moe_ffn_hidden=512)
LAYER_MODELS = {
    "dense": TINY,
    "moe": TINY.with_(name="maxtext-moe", num_layers=4, **_MOE),
    "moe-einsum": TINY.with_(name="maxtext-moe-einsum", num_layers=4, moe_capacity_factor=1.0,
                             moe_einsum_dispatch=True, **_MOE),
    "moe-mla": TINY.with_(name="maxtext-mla", num_layers=4, dense_layers=1, shared_experts=1, mla=(256, 128, 32),
                          head_size=64, **_MOE),
    # decoder_block gemma2: GeGLU, post norms, soft caps 50 / 30, a 1024-token window on every other
    # layer, logits through the embedding; its scan's unit is a [local, global] pair of layers
    "gemma2": TINY.with_(name="maxtext-gemma2", num_layers=4, activation="geglu", post_norms=True,
                         logit_softcap=30.0, attention_softcap=50.0, sliding_window=1024, sliding_layers=2,
                         tie_embeddings=True),
}


@pytest.mark.parametrize("row", _layer_rows(), ids=lambda r: r["source"])
def test_a_layer_keeps_what_jax_saves_for_maxtexts_layer_scan(row):
    """Without a pipeline, per layer and chip: the bytes cosearch keeps in HBM under each remat
    policy equal the arrays JAX stacks over MaxText's layer scan (the shipped shapes: one sequence
    a chip of 2048 tokens, bf16; per token the listed widths, per routed slot, 2 a token, the slot
    arrays): the layer input kept unless offloaded (the checkpointed layer's input), an MoE
    layer's routed tensors under the dense MLP's names where MaxText tags them so, MLA's query,
    key and value by their names; under minimal the plan's own per-sequence figure (the
    maxtext-minimal-remat engine's ``dots-saved``) is the same, where Megatron's selective figure
    (what an MoE or MLA layer took before) is 1.6-2.4x it.  With Gemma's post norms the MLP's
    output (``mlpwo``) is kept too (its norm's backward reads it).  Gemma 2's scan unit is a pair
    of layers with one checkpointed input: the arrays a unit keeps are two layers' figures less one
    layer input, which cosearch keeps per layer (an upper bound by it)."""
    from cosearch import plan
    from cosearch.graph import maxtext_minimal_places, maxtext_policy
    from cosearch.runs.maxtext import NAMED_REMAT_POLICIES
    model = LAYER_MODELS[row["model"]]
    mb = int(row["global_batch"]) // int(row["fsdp"])
    per_token = (sum(_bytes(w) for w in row["token_arrays"].split())
                 + int(row["slots_per_token"]) * sum(_bytes(w) for w in row["slot_arrays"].split()))
    measured = mb * 2048 * per_token
    policy = row["remat_policy"]
    if policy == "full":
        kept = memory.layer_input_bytes(model, 1, mb)
    else:
        if policy == "minimal":
            places = maxtext_minimal_places(model)
            selective = plan._per_sequence_bytes(model, 1, False, "dots-saved", True, "bf16")[0][1] * mb
            assert selective == memory.maxtext_saved_bytes(model, 1, mb, False, places)[0]
            if model.moe:
                megatron = memory.layer_activation_bytes(model, 1, mb, False, "selective", True)
                assert megatron > 1.5 * selective
        elif policy == "custom":
            places = maxtext_policy("maxtext:" + ",".join(row["custom_places"].split()))
        else:
            places = NAMED_REMAT_POLICIES[policy]
        kept = memory.maxtext_saved_bytes(model, 1, mb, False, places)[0]
    unit = int(row["layers_per_unit"])
    assert unit * kept - (unit - 1) * memory.layer_input_bytes(model, 1, mb) == measured


