import json
import math

import numpy as np
import pytest

from cosearch import cluster, hardware, models, multimodel, placement, search, sweep

MiB, GiB = 2**20, 2**30


def _space():
    return hardware.SearchSpace(tensor_cores=(2, 4, 8), systolic_dims=((32, 32), (64, 64), (128, 128)),
                                vector_units=(2,), vector_width=(512,), l1_bytes=(1 * MiB,),
                                l2_bytes=(32 * MiB,), hbm=((16 * GiB, 1.2e12),))


@pytest.mark.parametrize("objective", ["geomean", "mean"])
def test_joint_best_equals_brute_force(objective):
    """Every design through search_plans for every model, combined by hand."""
    ms = [models.preset("gpt3-1.3b"), models.preset("opt-350m")]
    sp, cl = _space(), cluster.Cluster(16)
    res = multimodel.cosearch_models(ms, sp, cl, 32, objective=objective, refine_top=0)
    full = multimodel.cosearch_models(ms, sp, cl, 32, objective=objective, prune=False, refine_top=0)
    assert full.pruned == 0 and len(full.rows) == len(sp.arrays())
    scores = []
    for row in sp.arrays():
        chip = hardware.Accelerator.from_array(row)
        t = []
        for m in ms:
            r = placement.search_plans(m, chip, cl, 32, **search.DEFAULT_PLAN_OPTIONS)
            t.append(r.best.tokens_per_s if r.feasible else 0.0)
        if objective == "mean":
            scores.append(sum(t) / len(t))
        else:
            scores.append(math.prod(t) ** (1 / len(t)) if all(t) else 0.0)
    i = int(np.argmax(scores))
    assert full.best.score == pytest.approx(scores[i], rel=1e-9) and full.best.index == i
    assert res.best.score == pytest.approx(scores[i], rel=1e-9) and res.best.index == i
    assert res.pruned + len(res.rows) == res.total_designs
    assert "score" in res.table() and res.to_json()


@pytest.mark.parametrize("objective", ["geomean", "mean"])
def test_joint_ilp_ranking_equals_ilp_for_every_design(objective):
    """The joint top 3 under ILP layer times equals ILP-planning every design for every model
    (search_plans with time_model="ilp") and combining by hand; every ILP row is its design's
    own ILP score, and the table ranks ILP rows apart from screened ones."""
    ms = [models.preset("gpt3-1.3b"), models.preset("opt-350m")]
    sp = hardware.SearchSpace(tensor_cores=(2, 4), systolic_dims=((32, 32), (128, 128)),
                              vector_units=(1, 4), vector_width=(128,), l1_bytes=(1 * MiB,),
                              l2_bytes=(32 * MiB,), hbm=((16 * GiB, 1.2e12),))
    cl, k = cluster.Cluster(2), 3           # two chips, two sequences: few layer ILPs per design
    res = multimodel.cosearch_models(ms, sp, cl, 2, objective=objective, refine_top=k)
    brute = []
    for row in sp.arrays():
        chip = hardware.Accelerator.from_array(row)
        t = []
        for m in ms:
            r = placement.search_plans(m, chip, cl, 2, time_model="ilp", **search.DEFAULT_PLAN_OPTIONS)
            t.append(r.best.tokens_per_s if r.feasible else 0.0)
        brute.append(float(multimodel.combine(np.array(t), objective)))
    brute = np.array(brute)
    ilp = sorted((r for r in res.rows if r.time_model == "ilp"), key=lambda r: -r.score)
    assert res.meta["ilp_ranking"]["proven"] and len(ilp) >= k
    np.testing.assert_allclose([r.score for r in ilp[:k]], np.sort(brute)[::-1][:k], rtol=1e-9)
    for r in ilp:
        assert r.score == pytest.approx(brute[r.index], rel=1e-9)
    assert res.best.time_model == "ilp" and res.best.score == pytest.approx(brute.max(), rel=1e-9)
    text = res.table()
    assert "ILP-scheduled" in text and "proven exact" in text


def test_bad_input():
    with pytest.raises(ValueError, match="objective"):
        multimodel.cosearch_models(["gpt3-1.3b"], _space(), 16, 32, objective="max")
    with pytest.raises(ValueError, match="twice"):
        multimodel.cosearch_models(["gpt3-1.3b", "gpt3-1.3b"], _space(), 16, 32)
    with pytest.raises(ValueError, match="one per model"):
        multimodel.cosearch_models(["gpt3-1.3b", "opt-350m"], _space(), 16, [32, 32, 32])
    with pytest.raises(ValueError, match="refine_top"):
        multimodel.cosearch_models(["gpt3-1.3b", "opt-350m"], _space(), 16, 32, refine_top=-1)


def test_models_that_share_no_design_say_so():
    # GPT-3 175B cannot fit 16 chips of 16 GiB; the small model can: no shared design
    with pytest.raises(ValueError, match="share no design"):
        multimodel.cosearch_models(["gpt3-1.3b", "gpt3-175b"], _space(), 16, 32)


def test_cli_several_models(tmp_path, capsys):
    from cosearch.cli import main
    space = tmp_path / "space.json"
    space.write_text('{"tensor_cores": [2, 4], "systolic_dims": [[64, 64]], "vector_units": [2], '
                     '"vector_width": [512], "l1_bytes": [1048576], "l2_bytes": [33554432]}')
    out = tmp_path / "mm.json"
    code = main(["search", "--model", "gpt3-1.3b,opt-350m", "--chips", "16", "--batch", "32",
                 "--space", str(space), "--hbm-gib", "16", "--objective", "mean", "--out", str(out)])
    text = capsys.readouterr().out
    assert code == 0 and "mean of tokens/s" in text and out.exists()
    assert "ILP ranking: top 3 proven exact" in text and "ILP-scheduled" in text
    # --resume: the same settings continue (nothing left to screen), others are refused
    assert main(["search", "--model", "gpt3-1.3b,opt-350m", "--chips", "16", "--batch", "32", "--space",
                 str(space), "--hbm-gib", "16", "--objective", "mean", "--resume", str(out),
                 "--out", str(tmp_path / "y.json")]) == 0
    assert main(["search", "--model", "gpt3-1.3b,opt-350m", "--chips", "16", "--batch", "32", "--space",
                 str(space), "--hbm-gib", "16", "--resume", str(out), "--out", str(tmp_path / "x.json")]) != 0
    assert "other settings" in capsys.readouterr().err


def test_joint_baselines_score_like_designs():
    """TPUv4 and Spotlight joint scores equal each model's own plan search on those chips,
    combined by hand; the Spotlight chip is the design with the best combined single-chip
    layer throughput (checked against evaluate on one chip, tp 1, microbatch 1); fixed
    Megatron says why where PHAZE gives no placement."""
    from cosearch import baselines as bl
    from cosearch.plan import unit_costs
    ms = [models.preset("gpt3-1.3b"), models.preset("opt-350m")]
    sp, cl = _space(), cluster.Cluster(16)
    res = multimodel.cosearch_models(ms, sp, cl, 32, objective="mean", refine_top=0, baselines=True)
    b = res.baselines
    assert set(b) == {"TPUv4", "Spotlight", "Megatron-fixed"}
    tpu = sp.with_scenario_hbm(hardware.TPUv4)
    want = [placement.search_plans(m, tpu, cl, 32, **search.DEFAULT_PLAN_OPTIONS).best.tokens_per_s for m in ms]
    assert b["TPUv4"]["tokens_per_s"] == pytest.approx(want, rel=1e-12)
    assert b["TPUv4"]["score"] == pytest.approx(sum(want) / 2, rel=1e-12)
    # the Spotlight chip: brute force over the designs of the combined single-chip throughput
    single = []
    for row in sp.arrays():
        t = []
        for m in ms:
            u = unit_costs(m, row[None], cluster.Cluster(1), (1,), (1,))[0, 0, 0, 0]
            from cosearch._kernels import formulas as F
            t.append(m.seq_len / (u[F.U_LF] + u[F.U_LB]))
        single.append(sum(t) / 2)
    assert f"design {int(np.argmax(single))})" in b["Spotlight"]["note"]
    # PHAZE fixes no placement for gpt3-1.3b, and its 1,024-chip opt-350m one does not scale to 16
    assert b["Megatron-fixed"]["score"] == 0.0
    assert "no fixed Megatron placement for gpt3-1.3b" in b["Megatron-fixed"]["note"]
    assert "does not scale to 16 chips" in b["Megatron-fixed"]["note"]
    assert "baseline TPUv4" in res.table() and res.to_json()
    assert bl.PHAZE_MEGATRON_PLANS  # the fixed placements come from PHAZE's table


def test_resume_keeps_screened_designs_and_refuses_other_settings(tmp_path, monkeypatch):
    """A result cut short (here: half its rows kept) resumes to the same designs and scores
    as an uninterrupted run, evaluating only the designs it lacks; other settings are refused."""
    ms = ["gpt3-1.3b", "opt-350m"]
    sp, cl = _space(), cluster.Cluster(16)
    full = multimodel.cosearch_models(ms, sp, cl, 32, objective="mean", refine_top=0, prune=False)
    d = full.to_dict()
    kept = d["rows"][:4]
    d.update(rows=kept, interrupted=True)
    part = tmp_path / "part.json"
    part.write_text(json.dumps(d))
    seen = []
    real = sweep.evaluate_designs

    def counting(model, designs, idx, *a, **k):
        seen.extend(int(i) for i in idx)
        return real(model, designs, idx, *a, **k)

    monkeypatch.setattr(sweep, "evaluate_designs", counting)
    res = multimodel.cosearch_models(ms, sp, cl, 32, objective="mean", refine_top=0, prune=False, resume=part)
    assert not res.interrupted and len(res.rows) == len(full.rows)
    assert {r.index: r.score for r in res.rows} == pytest.approx({r.index: r.score for r in full.rows}, rel=1e-12)
    assert set(seen) == set(range(len(sp.arrays()))) - {r["index"] for r in kept}
    assert multimodel.MultiModelResults.from_json(part).rows[0].score == pytest.approx(kept[0]["score"])
    with pytest.raises(ValueError, match="other settings"):
        multimodel.cosearch_models(ms, sp, cl, 32, objective="geomean", refine_top=0, resume=part)
    with pytest.raises(ValueError, match="other settings"):
        multimodel.cosearch_models(ms, sp, cluster.Cluster(8), 32, objective="mean", refine_top=0, resume=part)
    bad = tmp_path / "bad.json"
    doc = json.loads(json.dumps(multimodel.MultiModelResults.from_json(part).to_dict()))
    doc["rows"][0]["score"] = -1
    bad.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="score must be"):
        multimodel.MultiModelResults.from_json(bad)
    # found by fuzzing `cosearch report`: a model name that is not a string, a batch list of
    # another length or a row missing a model loaded and failed in the report
    for key, value, message in (("models", [3, "x"], "'models' must be a non-empty list of model names"),
                                ("global_batch", [32], "one batch per model"),
                                ("objective", "max", "'objective' must be one of geomean, mean")):
        bad.write_text(json.dumps(dict(doc, rows=[], **{key: value})))
        with pytest.raises(ValueError, match=message):
            multimodel.MultiModelResults.from_json(bad)
    doc["rows"][0]["score"] = 1.0
    doc["rows"][0]["per_model"] = doc["rows"][0]["per_model"][:1]
    bad.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="per_model must hold one result per model"):
        multimodel.MultiModelResults.from_json(bad)


def test_checkpoint_is_a_resumable_partial_result(tmp_path):
    """With checkpoint_every_s=0 every chunk is saved; the last checkpoint is marked
    interrupted, holds screened rows only, and resumes to the full result."""
    ms = ["gpt3-1.3b", "opt-350m"]
    sp, cl = _space(), cluster.Cluster(16)
    ck = tmp_path / "ck.json"
    full = multimodel.cosearch_models(ms, sp, cl, 32, objective="mean", refine_top=0, prune=False,
                                      chunk_size=4, checkpoint=ck, checkpoint_every_s=0.0)
    saved = multimodel.MultiModelResults.from_json(ck)
    assert saved.interrupted and len(saved.rows) == len(sp.arrays())
    assert all(r.time_model == "sum" for r in saved.rows)
    res = multimodel.cosearch_models(ms, sp, cl, 32, objective="mean", refine_top=0, prune=False, resume=ck)
    assert {r.index: r.score for r in res.rows} == pytest.approx({r.index: r.score for r in full.rows}, rel=1e-12)


def test_joint_search_prices_the_plan_options_precision():
    """Plan options that change the unit costs (here FP8 on designs with FP8 MACs) are priced at
    the options' combination: each model's row is that chip's own FP8 plan search (the joint
    search priced every design at the defaults, cp 1 and ep 1, whatever the options said)."""
    ms = [models.preset("gpt3-1.3b"), models.preset("opt-350m")]
    sp = hardware.SearchSpace(tensor_cores=(2, 4), systolic_dims=((64, 64),), vector_units=(2,), vector_width=(512,),
                              l1_bytes=(1 * MiB,), l2_bytes=(32 * MiB,), hbm=((16 * GiB, 1.2e12),), fp8_macs=(2,))
    cl = cluster.Cluster(16)
    opts = dict(search.DEFAULT_PLAN_OPTIONS, precision="fp8")
    res = multimodel.cosearch_models(ms, sp, cl, 32, objective="mean", refine_top=0, prune=False, plan_options=opts)
    for row in res.rows:
        chip = hardware.Accelerator.from_array(sp.arrays()[row.index])
        for m, got in zip(ms, row.per_model):
            want = placement.search_plans(m, chip, cl, 32, **opts).best
            assert got.plan.spec.precision == "fp8"
            assert got.tokens_per_s == pytest.approx(want.tokens_per_s, rel=1e-9)


def test_joint_baselines_in_a_format_tpuv4_lacks():
    """A joint co-search in FP8 alone: TPUv4 has no FP8 tensor cores, so its baseline scores 0
    and says why for each model (it raised); the Spotlight chip is chosen by its FP8 layer
    latency among the designs with FP8 MACs and runs FP8 plans."""
    ms = [models.preset("gpt3-1.3b"), models.preset("opt-350m")]
    sp = hardware.SearchSpace(tensor_cores=(2, 4), systolic_dims=((64, 64),), vector_units=(2,), vector_width=(512,),
                              l1_bytes=(1 * MiB,), l2_bytes=(32 * MiB,), hbm=((16 * GiB, 1.2e12),), fp8_macs=(0, 2))
    cl = cluster.Cluster(16)
    opts = dict(search.DEFAULT_PLAN_OPTIONS, precision="fp8")
    b = multimodel.joint_baselines(ms, sp, cl, [32, 32], "mean", refine=False, plan_options=opts)
    assert b["TPUv4"]["score"] == 0.0 and b["TPUv4"]["plans"] == [None, None]
    assert b["TPUv4"]["note"].count("has no FP8 tensor cores") == 2
    assert b["Spotlight"]["design"]["fp8_macs"] == 2.0
    assert all(p["spec"]["precision"] == "fp8" for p in b["Spotlight"]["plans"]) and b["Spotlight"]["score"] > 0
