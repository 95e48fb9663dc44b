"""No silently wrong number, no lost file: one test per defect class of the 0.3 fault hunt.

Each test feeds the input that used to be priced, read or overwritten silently and checks the
refusal names what is wrong — or, where the input is legitimate, checks the number against a
hand-worked or brute-force value."""

import itertools
import json
import math
import os
import re

import numpy as np
import pytest

from cosearch import cluster, hardware, models, placement, search
from cosearch.cli import main
from cosearch.plan import FP8_PEAK_OVER_BF16, PlanSpec, evaluate

from .test_search import small_space


# ------------------------------------------------------------------ chip and cluster files
def _chip_file(tmp_path, name="chip.json", **changes):
    d = hardware.H100.to_dict()
    d.update(changes)
    d = {k: x for k, x in d.items() if x is not _DROP}
    p = tmp_path / name
    p.write_text(json.dumps(d))
    return p


_DROP = object()
PLAN = ["--batch", "32", "--dp", "1", "--tp", "8", "--pp", "1", "--mb", "1", "--recompute", "none",
        "--zero", "0", "--sp"]


def test_chip_file_must_choose_its_efficiency(tmp_path, capsys):
    none = _chip_file(tmp_path, "none.json", efficiency=_DROP)
    with pytest.raises(ValueError, match="no 'efficiency'"):
        hardware.Accelerator.from_json(none)
    with pytest.warns(UserWarning, match="roofline"):
        ideal = hardware.Accelerator.from_json(_chip_file(tmp_path, "ideal.json", efficiency="ideal"))
    assert ideal.efficiency == hardware.IDEAL
    named = hardware.Accelerator.from_json(_chip_file(tmp_path, "named.json", efficiency="H100"))
    assert named == hardware.H100           # the datasheet fields plus the preset's kernels: the preset
    assert main(["plan", "--model", "llama2-7b", "--chip", str(none), "--cluster", "flat", "--chips", "8",
                 *PLAN]) == 2
    assert "no 'efficiency'" in capsys.readouterr().err


@pytest.mark.parametrize("field,value,message", [
    ("hbm_bandwidth_Bps", "fast", "'hbm_bandwidth_Bps' must be a number"),
    ("clock_hz", None, "'clock_hz' must be a number"),
    ("tensor_cores", True, "'tensor_cores' must be a number"),
    ("link_bandwidth_Bps", 1e-300, "link_bandwidth_Bps=1e-300 bytes/s is outside"),
    ("hbm_bandwidth_Bps", 1e30, r"hbm_bandwidth_Bps=1e\+30 bytes/s is outside"),
    ("clock_hz", 1.83, "clock_hz=1.83 Hz is outside"),
])
def test_chip_values_are_refused_by_field(tmp_path, field, value, message):
    with pytest.raises(ValueError, match=message):
        hardware.Accelerator.from_json(_chip_file(tmp_path, **{field: value}))


def test_json_constants_and_special_files_are_refused(tmp_path):
    p = tmp_path / "nan.json"
    p.write_text(json.dumps(hardware.H100.to_dict()).replace("3350000000000.0", "NaN"))
    with pytest.raises(ValueError, match="NaN is not a number JSON allows"):
        hardware.Accelerator.from_json(p)
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match="not a regular file"):          # would block forever
        hardware.Accelerator.from_json(fifo)
    with pytest.raises(ValueError, match="not a regular file"):          # would never end
        hardware.Accelerator.from_json("/dev/zero")


def test_json_integers_no_float_holds_are_refused_naming_the_file(tmp_path, capsys):
    """A JSON integer of 400 digits raised OverflowError deep inside (found by fuzzing space,
    chip, model and LEAF files): every JSON reader refuses it with the file's name."""
    huge = "1" + "0" * 400
    chip = tmp_path / "chip.json"
    chip.write_text(json.dumps(hardware.H100.to_dict()).replace("3350000000000.0", huge))
    with pytest.raises(ValueError, match="chip.json.*an integer of 401 digits"):
        hardware.Accelerator.from_json(chip)
    cfg = tmp_path / "config.json"
    cfg.write_text('{"hidden_size": ' + huge + ', "num_hidden_layers": 2, "num_attention_heads": 2}')
    assert main(["plan", "--model", str(cfg), "--cluster", "flat", "--chip", "h100", "--chips", "8",
                 "--batch", "8"]) == 2
    assert "config.json: an integer of 401 digits" in capsys.readouterr().err
    from cosearch.fl.data import load_leaf
    (tmp_path / "leaf").mkdir()
    (tmp_path / "leaf" / "f.json").write_text('{"users": ["a"], "user_data": {"a": {"x": [[0]], "y": [' + huge + ']}}}')
    with pytest.raises(ValueError, match="f.json: an integer of 401 digits"):
        load_leaf(str(tmp_path / "leaf"))


def test_cluster_links_must_be_plausible():
    with pytest.raises(ValueError, match="intra_node_Bps=1e-300"):
        cluster.Cluster(8, intra_node_Bps=1e-300)
    with pytest.raises(ValueError, match="link_latency_s"):
        cluster.Cluster(8, link_latency_s=5.0)
    # found by fuzzing cluster files: a null latency or torus side raised TypeError, and a torus of
    # side 1 divided by log(1) = 0 when a collective was priced
    with pytest.raises(ValueError, match="link_latency_s must be a number of seconds"):
        cluster.Cluster(8, link_latency_s=None)
    for side in (None, 1, [4], 2.5, True):
        with pytest.raises(ValueError, match="torus_side must be 0 .* or a whole number of at least 2"):
            cluster.Cluster(16, 8, 1e11, 1e10, torus_side=side)
    assert cluster.Cluster(16, 8, 1e11, 1e10, torus_side=4.0).torus_side == 4
    # nodes whose intra-node link is the chip's own (intra_node_Bps left out): describe() divided None
    nodes = cluster.Cluster(16, 1, inter_node_Bps=5e10)
    assert nodes.describe().startswith("16 nodes x 1 chips, intra the chip's link x 1.00, inter 50.0 GB/s")


def test_cluster_file_names_its_chip_and_sizes_agree(tmp_path, capsys):
    cl = cluster.preset("dgx-h100", 2).to_dict()
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps(cl))
    assert main(["plan", "--model", "llama2-7b", "--cluster", str(bare), *PLAN]) == 2
    assert "names no chip" in capsys.readouterr().err
    with_chip = tmp_path / "h100s.json"
    with_chip.write_text(json.dumps(dict(cl, chip="H100")))
    assert main(["plan", "--model", "llama2-7b", "--cluster", str(with_chip), *PLAN, "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    want = evaluate("llama2-7b", hardware.H100, cluster.preset("dgx-h100", 2),
                    PlanSpec(1, 8, 1, 1, sequence_parallel=True), 32)
    assert d["chip"] == "H100" and d["plans"][0]["step_time_s"] == pytest.approx(want.step_time_s, rel=1e-12)
    assert main(["plan", "--model", "llama2-7b", "--cluster", str(with_chip), "--chips", "64", *PLAN]) == 2
    assert "--chips 64 contradicts" in capsys.readouterr().err
    assert main(["plan", "--model", "llama2-7b", "--cluster", "dgx-h100", "--nodes", "2", "--chips", "8",
                 *PLAN]) == 2
    assert main(["plan", "--model", "llama2-7b", "--cluster", "flat", "--chips", "8", *PLAN]) == 2
    assert "give --chip" in capsys.readouterr().err
    # a file named like a preset does not shadow it
    (tmp_path / "H100").write_text("not a chip")
    os.chdir(tmp_path)
    assert main(["plan", "--model", "llama2-7b", "--chip", "H100", "--cluster", "flat", "--chips", "8", *PLAN]) == 0


@pytest.mark.parametrize("flag", ["--cp", "--ep", "--virtual", "--dp", "--nodes"])
def test_zero_sizes_are_refused_not_read_as_one(flag, capsys):
    with pytest.raises(SystemExit) as e:
        main(["plan", "--model", "llama2-7b", "--cluster", "dgx-h100", "--nodes", "1", "--batch", "8", flag, "0"])
    assert e.value.code == 2 and f"argument {flag}" in capsys.readouterr().err


# ------------------------------------------------------------------ results files
def test_resume_compares_the_model_not_its_name(tmp_path):
    m = models.preset("gpt3-1.3b")
    sp = small_space()
    f = tmp_path / "r.json"
    search.cosearch(m, sp, 16, 32, "serial", refine_top=0).to_json(f)
    deeper = m.with_(num_layers=48)                       # same name, edited config
    with pytest.raises(ValueError, match=r"num_layers: 24 -> 48"):
        search.cosearch(deeper, sp, 16, 32, "serial", refine_top=0, resume=f)
    with pytest.raises(ValueError, match=r"seq_len: 2048 -> 1024"):
        search.cosearch(m.with_(seq_len=1024), sp, 16, 32, "serial", refine_top=0, resume=f)
    again = search.cosearch(m, sp, 16, 32, "serial", refine_top=0, resume=f)
    assert again.best.tokens_per_s > 0
    d = json.loads(f.read_text())
    del d["meta"]["fingerprint"]
    f.write_text(json.dumps(d))
    with pytest.raises(ValueError, match="no fingerprint"):
        search.cosearch(m, sp, 16, 32, "serial", refine_top=0, resume=f)


def test_schemas_are_checked_on_load(tmp_path, capsys):
    res = search.cosearch("bert-large", small_space(), 8, 16, "serial", refine_top=0)
    d = res.to_dict()
    for schema, message in (("cosearch.results/9", "is not one this cosearch reads"),
                            ("cosearch.fl-result/1", "not a cosearch.results file")):
        p = tmp_path / "x.json"
        p.write_text(json.dumps(dict(d, schema=schema)))
        with pytest.raises(ValueError, match=message):
            search.Results.from_json(p)
    p.write_text(json.dumps({k: x for k, x in d.items() if k != "schema"}))
    with pytest.raises(ValueError, match="no 'schema'"):
        search.Results.from_json(p)


def test_a_hand_edited_results_file_is_refused_on_load_not_in_the_report(tmp_path, capsys):
    """Found by fuzzing `cosearch report` on edited results files: each of these loaded, then
    the report failed with a TypeError, KeyError or AttributeError; now the load refuses them
    naming the part, and the report prints one line."""
    res = search.cosearch("bert-large", small_space(), 8, 16, "serial", refine_top=0)
    p = tmp_path / "r.json"

    def edited(change):
        d = json.loads(res.to_json())
        change(d)
        p.write_text(json.dumps(d))
        return p
    cases = ((lambda d: d["rows"][0]["plan"]["breakdown"].update(forward_s=[1]), "breakdown.forward_s"),
             (lambda d: d["rows"][0]["plan"].update(memory_per_chip_bytes=[-1.0]), "memory_per_chip_bytes"),
             (lambda d: d["rows"][0]["design"].pop("l2_bytes"), "design lacks l2_bytes"),
             (lambda d: d.update(baselines=3), "'baselines' must be an object of objects"),
             (lambda d: d.update(baselines={"tpuv4": {"tokens_per_s": "fast"}}), "baselines.tpuv4.tokens_per_s"),
             (lambda d: d.update(meta=7), "'meta' must be an object"),
             (lambda d: d["meta"].update(ilp_ranking={"proven": 1}), "ilp_ranking"),
             (lambda d: d["rows"][0]["plan"].update(chips_used=[8]), "chips_used must be a positive integer"),
             (lambda d: d["rows"][0]["plan"].update(feasible="yes"), "plan.feasible must be true or false"))
    for change, message in cases:
        with pytest.raises(ValueError, match=message):
            search.Results.from_json(edited(change))
        assert main(["report", str(p)]) == 2
        err = capsys.readouterr().err
        assert "malformed cosearch results file" in err and "--debug" not in err
    assert main(["report", str(edited(lambda d: None))]) == 0


def test_a_hand_edited_fl_result_is_refused_on_load_naming_the_field(tmp_path, capsys):
    """Found by fuzzing `cosearch fl report`: edited FL results loaded and then failed in the
    report (AttributeError, TypeError); a run stopped before its first round ended (no rounds)
    failed with IndexError."""
    from cosearch.fl.simulation import FLResult, RoundMetrics
    r = RoundMetrics(1, 0.5, 1.2, 0.4, 1.3, 2.0, 2.0, client_times_s={0: 2.0, 1: 1.5}, keep={1: 0.8},
                     invariant_counts={"1": 4}, thresholds={"1": 0.01}, dead_counts={"1": 3})
    res = FLResult("invariant", "digits", "mlp", 2, [r])
    p = tmp_path / "fl.json"
    res.to_json(p)
    assert FLResult.from_json(p).to_dict() == res.to_dict()
    cases = ((lambda d: d["rounds"][0].update(client_times_s="fast"), "round 1: client_times_s must be an object"),
             (lambda d: d["rounds"][0].update(keep={"x": 0.5}), "keep must be keyed by client number"),
             (lambda d: d["rounds"][0].update(round=[1]), "'round' must be a positive integer"),
             (lambda d: d["rounds"][0].update(accuracy="high"), "accuracy must be a number or null"),
             (lambda d: d["rounds"][0].update(dead_counts={"1": 2.5}), "dead_counts.1 must be a whole number"),
             (lambda d: d["rounds"][0].update(speed=1), r"unknown field\(s\) \['speed'\]"),
             (lambda d: d.update(width_accuracy=[0.5]), "'width_accuracy' must be objects"),
             (lambda d: d.update(rounds={}), "'rounds' must be a list"))
    for change, message in cases:
        d = res.to_dict()
        change(d)
        p.write_text(json.dumps(d))
        with pytest.raises(ValueError, match=message):
            FLResult.from_json(p)
        assert main(["fl", "report", str(p)]) == 2
        assert "not a cosearch FL result" in capsys.readouterr().err
    p.write_text(json.dumps(dict(res.to_dict(), rounds=[], interrupted=True)))
    assert main(["fl", "report", str(p)]) == 0
    assert "no round finished (interrupted)" in capsys.readouterr().out


def test_report_csv_and_to_csv_never_overwrite(tmp_path, capsys):
    res = search.cosearch("bert-large", small_space(), 8, 16, "serial", refine_top=0)
    r = tmp_path / "r.json"
    res.to_json(r)
    c = tmp_path / "r.csv"
    c.write_text("mine")
    with pytest.raises(FileExistsError):
        res.to_csv(c)
    assert main(["report", str(r), "--csv", str(c)]) == 2
    assert c.read_text() == "mine" and "--force" in capsys.readouterr().err
    assert main(["report", str(r), "--csv", str(c), "--force"]) == 0
    assert c.read_text().startswith("rank,index")


# ------------------------------------------------------------------ calibrate
def _op_rows(seconds, **extra):
    # a 4096^3 bf16 GEMM: 137 GFLOP, 0.139 ms at the H100's 989 TFLOP/s datasheet peak
    return {"m": [4096], "n": [4096], "k": [4096], "batch": [1], "dtype_bytes": [2], "seconds": [seconds], **extra}


@pytest.mark.parametrize("seconds,message", [(1e-30, "outside the physical range"),
                                             (1e30, "outside the physical range"),
                                             (1e-5, "faster than")])
def test_calibrate_refuses_impossible_kernel_times(seconds, message):
    from cosearch.cost import calibrate
    with pytest.raises(ValueError, match=message):
        calibrate(hardware.H100, _op_rows(seconds))


def test_calibrate_refuses_impossible_collectives_and_unknown_links():
    from cosearch.cost import calibrate
    cl = cluster.preset("dgx-h100", 2)
    sizes = [2.0 ** 24, 2.0 ** 26, 2.0 ** 28]
    # 8-rank all-reduces: 2 x 7/8 x S on the wire; at 450 GB/s x 0.8 a 256 MiB one takes 1.3 ms.
    # These take 1/800 of the wire time: the bytes column counted something else.
    fast = [2 * 7 / 8 * s / 450e9 / 800 + 1e-5 for s in sizes]
    rows = {"collective": ["allreduce"] * 3, "bytes": sizes, "group": [8] * 3, "link": ["intra"] * 3,
            "seconds": fast}
    with pytest.raises(ValueError, match="faster than the wire"):
        calibrate(hardware.H100, rows, cluster=cl)
    rows = dict(rows, link=["intra", "pcie", "intra"], seconds=[2 * 7 / 8 * s / 360e9 for s in sizes])
    with pytest.raises(ValueError, match=r"row\(s\) \[2\] have link \['pcie'\]"):
        calibrate(hardware.H100, rows, cluster=cl)


def test_calibrate_csv_files(tmp_path, capsys):
    from cosearch.cost import read_csv_columns
    bom = tmp_path / "bom.csv"
    bom.write_bytes("\ufeffm,n,k,batch,dtype_bytes,seconds\n4096,4096,4096,1,2,0.0002\n".encode())
    assert read_csv_columns(bom)["m"] == ["4096"]
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    binary = tmp_path / "bin.csv"
    binary.write_bytes(b"\x00\x01\x02m,n\n")
    for p, message in ((empty, "no data rows"), (binary, "binary")):
        assert main(["calibrate", "--chip", "H100", "--gemm-csv", str(p), "--out", str(tmp_path / "c.json")]) == 2
        assert message in capsys.readouterr().err


# ------------------------------------------------------------------ plans
def test_uneven_virtual_split_warns():
    m = models.preset("gpt3-1.3b")                     # 24 layers: 24 / 4 = 6 chunks over pp 4
    with pytest.warns(UserWarning, match=r"uneven split \[4, 8, 8, 4\]"):
        p = evaluate(m, "H100", cluster.preset("dgx-h100", 2), PlanSpec(4, 1, 4, 1, virtual_stages=4), 64)
    assert p.spec.stage_layers == (4, 8, 8, 4)


def test_fp8_mfu_states_both_denominators():
    p = evaluate("llama2-7b", "H100", cluster.preset("dgx-h100", 1), PlanSpec(1, 8, 1, 1, flash_attention=True,
                                                                             precision="fp8"), 8)
    # MFU counts against the bf16 dense peak; the FP8 dense peak is twice it (989.5 / 1,979 TFLOP/s)
    assert FP8_PEAK_OVER_BF16 == 1979 / 989.5
    assert p.mfu_fp8_peak == pytest.approx(p.mfu / 2)
    assert f"{p.mfu:.1%} of the bf16 peak, {p.mfu / 2:.1%} of the FP8 peak" in p.describe()


def test_fixed_plan_searches_the_omitted_options_and_infers_dp(capsys):
    """Llama 2 70B, tp 4 pp 4 mb 1 on 64 H100s, FP8: without recompute, SP and ZeRO it needs
    102 GiB of the 80; `plan --help` says omitted options are searched, so the best of the
    combinations (36 with the virtual stages) is printed, and dp is what the chips leave,
    64 / (4 x 4) = 4."""
    cl = cluster.preset("dgx-h100", 8)
    base = PlanSpec(4, 4, 4, 1, flash_attention=True, precision="fp8")
    assert not evaluate("llama2-70b", "H100", cl, base, 64).feasible
    # virtual stages that split 80 layers evenly over pp 4 with 16 microbatches: 1, 2 and 4
    brute = [evaluate("llama2-70b", "H100", cl, base.with_(recompute=r, sequence_parallel=s, zero=z,
                                                           virtual_stages=vs), 64)
             for r, s, z, vs in itertools.product(("none", "selective", "full"), (False, True), (0, 1), (1, 2, 4))]
    best = max((p for p in brute if p.feasible), key=lambda p: p.tokens_per_s)
    assert main(["plan", "--model", "llama2-70b", "--cluster", "dgx-h100", "--nodes", "8", "--batch", "64",
                 "--tp", "4", "--pp", "4", "--mb", "1", "--flash", "--precision", "fp8", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)["plans"][0]
    assert d["spec"]["dp"] == 4 and d["feasible"]
    assert d["step_time_s"] == pytest.approx(best.step_time_s, rel=1e-12)


def test_plan_search_stays_within_the_engines_zero_stages(capsys):
    from cosearch import placement
    m, cl = models.preset("gpt3-1.3b"), cluster.preset("dgx-h100", 1)
    res = placement.search_plans(m, "H100", cl, 64, top_k=50, progress=False)
    assert {p.spec.zero for p in res.plans} <= {0, 1}                 # megatron-lm: distributed optimizer only
    res = placement.search_plans(m, "H100", cl, 64, top_k=50, progress=False, engine="fsdp")
    assert 3 in {p.spec.zero for p in res.plans} or 2 in {p.spec.zero for p in res.plans}
    args = ["plan", "--model", "gpt3-1.3b", "--cluster", "dgx-h100", "--nodes", "1", "--batch", "64",
            "--tp", "1", "--mb", "1", "--zero", "3"]
    assert main(args) == 2 and "runs ZeRO 0, 1 only" in capsys.readouterr().err
    assert main([*args, "--engine", "any"]) == 0


# ------------------------------------------------------------------ federated learning: no lost work
def test_fl_api_never_overwrites(tmp_path):
    from cosearch.fl.experiment import run_experiment
    from cosearch.fl.simulation import simulate
    out = tmp_path / "mine.json"
    out.write_text("precious")
    with pytest.raises(FileExistsError, match="overwrite=True"):
        simulate("digits", clients=3, rounds=1, out=out)
    with pytest.raises(FileExistsError, match="overwrite=True"):
        run_experiment("digits", ["none"], 1, 1, clients=3, out=out, progress=False)
    assert out.read_text() == "precious"


def test_ctrl_c_with_one_worker_stops_the_experiment(monkeypatch, tmp_path):
    from cosearch.fl import experiment
    from cosearch.fl.simulation import FLResult
    calls = []

    def interrupted_run(**kw):
        calls.append(kw["method"])
        r = FLResult(kw["method"], "digits", "mlp", 3, [], {}, interrupted=True)
        r.stopped_by = KeyboardInterrupt()
        return r
    monkeypatch.setattr(experiment, "simulate", interrupted_run)
    exp = experiment.run_experiment("digits", ["none", "random"], 2, 1, clients=3, workers=1, progress=False,
                                    out=tmp_path / "e.json")
    assert exp.interrupted and calls == ["none"]                   # stopped at once
    assert not any(exp.runs.values())                              # the cut run is not counted as finished


def test_new_app_keeps_the_users_files_and_quotes_paths(tmp_path, capsys):
    import tomllib

    from cosearch.fl.app_template import write_app
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "README.md").write_text("my notes")
    with pytest.raises(ValueError, match="already holds README.md"):
        write_app(tmp_path / "a")
    assert (tmp_path / "a" / "README.md").read_text() == "my notes"
    odd = 'C:\\data\\fem "2"'
    write_app(tmp_path / "b", dataset="femnist", data_dir=odd)
    cfg = tomllib.loads((tmp_path / "b" / "pyproject.toml").read_text())
    assert cfg["tool"]["flwr"]["app"]["config"]["data-dir"] == odd
    assert cfg["tool"]["flwr"]["app"]["config"]["round-timeout"] > 0
    with pytest.raises(ValueError, match="control characters"):
        write_app(tmp_path / "c", dataset="femnist", data_dir="a\nb")
    # one SuperNode cannot run federated dropout (simulate refuses one client too): it wrote an app
    with pytest.raises(ValueError, match="at least 2 clients"):
        write_app(tmp_path / "d", clients=1)
    assert not (tmp_path / "d").exists()


@pytest.mark.parametrize("bad", [np.array(["a", "b"]), np.zeros(2, dtype=[("x", "f4"), ("y", "i4")])])
def test_flower_strategy_rejects_non_numeric_updates_and_goes_on(bad, caplog):
    pytest.importorskip("flwr")
    from flwr.common import Code, FitRes, Status, ndarrays_to_parameters, parameters_to_ndarrays

    from cosearch.fl import flower
    from cosearch.fl import models as flm

    from .test_flower import _Manager
    s = flower.DropoutStrategy(lambda: flm.mlp(64, 10, 32), "invariant", total_rounds=4,
                               min_available_clients=3, min_fit_clients=3)
    mgr = _Manager(3)
    ins = s.configure_fit(1, s.initialize_parameters(mgr), mgr)
    results = []
    for proxy, fit in ins:
        arrays = parameters_to_ndarrays(fit.parameters)
        if proxy.cid == "101":
            arrays = [bad] + arrays[1:]
        results.append((proxy, FitRes(Status(Code.OK, ""), ndarrays_to_parameters(arrays), 10,
                                      {"round_time_s": 1.0})))
    params, metrics = s.aggregate_fit(1, results, [])
    assert params is not None and metrics["rejected"] == 1
    assert "101" in caplog.text and "not a number type" in caplog.text      # the reason is logged


# ------------------------------------------------------------------ checkpoints, loaders, devices
def test_incremental_checkpoint_reads_back_as_the_full_document(tmp_path):
    import dataclasses

    from cosearch._json import IncrementalJSONWriter, load_json
    res = search.cosearch("gpt3-1.3b", small_space(), 16, 32, "serial", refine_top=0)
    ck = tmp_path / "ck.json"
    w = IncrementalJSONWriter(ck)

    def partial(k, rows=None):
        return search.Results(res.model, res.chips, res.global_batch, list(rows or res.rows[:k]),
                              pruned=k, total_designs=res.total_designs, interrupted=True,
                              meta=res.meta)
    partial(5).checkpoint(w)
    assert load_json(ck) == json.loads(partial(5).to_json())
    first = ck.read_bytes()
    partial(9).checkpoint(w)                       # four more rows: appended, the old bytes kept
    assert ck.read_bytes().startswith(first) and load_json(ck) == json.loads(partial(9).to_json())
    # a crash mid-append cuts the last line: the file still reads as the previous checkpoint
    whole = ck.read_bytes()
    partial(12).checkpoint(w)
    ck.write_bytes(ck.read_bytes()[:len(whole) + 40])
    assert load_json(ck) == json.loads(partial(9).to_json())
    ck.write_bytes(whole)
    # a row replaced by a new object: the file is rewritten as the whole new document
    w2 = IncrementalJSONWriter(ck)
    partial(9).checkpoint(w2)
    rows = list(res.rows[:9])
    rows[0] = dataclasses.replace(rows[0], reason="replaced")
    partial(9, rows).checkpoint(w2)
    assert load_json(ck) == json.loads(partial(9, rows).to_json())
    assert search.Results.from_json(ck).rows[0].reason == "replaced"


@pytest.mark.parametrize("doc,message", [
    ({"users": 5, "user_data": {}}, "'users' must be a list"),
    ({"users": ["a"], "user_data": []}, "'user_data' must be an object"),
    ({"users": ["a"], "user_data": {"a": {"x": 5, "y": [1]}}}, "must be lists"),
    ({"users": ["a"], "user_data": {"a": {"x": [[1, 2], [3]], "y": [1, 2]}}}, "user 'a': malformed samples"),
    ({"users": ["a"], "user_data": {"a": {"x": [[0.0] * 784], "y": ["q"]}}}, "user 'a': labels must be a list of whole"),
    # a label of 1.5 was truncated to class 1, one of 1e30 stopped the load with an OverflowError,
    # and NaN pixels were read (found by fuzzing load_leaf)
    ({"users": ["a"], "user_data": {"a": {"x": [[0.0] * 784], "y": [1.5]}}}, r"labels must be whole numbers, got \[1.5\]"),
    ({"users": ["a"], "user_data": {"a": {"x": [[0.0] * 784], "y": [1e30]}}}, "labels must be whole numbers"),
    ({"users": ["a"], "user_data": {"a": {"x": [[float("nan")] * 784], "y": [1]}}}, "non-finite pixel values"),
    # a label of true beside numbers was class 1, and pixels of 62 or 1e20 (or 0..255 images) were
    # trained on as they were (found by a fuzzer over mutated LEAF files)
    ({"users": ["a"], "user_data": {"a": {"x": [[0.0] * 784] * 2, "y": [True, 3]}}}, "a true/false among them"),
    ({"users": ["a"], "user_data": {"a": {"x": [[0.0] * 783 + [62.0]], "y": [1]}}},
     r"pixel values must lie in \[0, 1\] as LEAF writes them, got 0..62"),
    ({"users": ["a"], "user_data": {"a": {"x": [[255.0] * 784], "y": [1]}}}, "rescale the images"),
])
def test_leaf_files_of_the_wrong_shape_are_refused_by_name(tmp_path, doc, message):
    from cosearch.fl.data import load_leaf
    (tmp_path / "f.json").write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=message):
        load_leaf(str(tmp_path))


def test_measure_refuses_a_device_this_machine_lacks():
    torch = pytest.importorskip("torch")
    from cosearch.measure import check_device
    check_device("cpu")
    with pytest.raises(ValueError, match="measure runs on cuda or cpu"):
        check_device("meta")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="no CUDA GPU"):
            check_device("cuda")


def test_predictions_need_no_torch(tmp_path):
    """`pip install -e .` (no extras) is enough to predict and search plans: the same commands run
    with torch unimportable."""
    import subprocess
    import sys
    code = ("import sys; sys.modules['torch'] = None\n"
            "from cosearch.cli import main\n"
            "rc = main(['plan', '--model', 'gpt3-1.3b', '--cluster', 'dgx-h100', '--nodes', '1', '--batch', '16',"
            " '--tp', '1', '--mb', '1'])\n"
            "assert rc == 0, rc\n"
            "assert 'torch' not in [m for m in sys.modules if sys.modules[m] is not None]\n")
    p = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]


def test_fl_report_checks_schemas_and_keeps_plots(tmp_path, capsys):
    res = search.cosearch("bert-large", small_space(), 8, 16, "serial", refine_top=0)
    r = tmp_path / "search.json"
    res.to_json(r)
    assert main(["fl", "report", str(r)]) == 2                 # a search result is not an FL result
    assert "not a cosearch.fl-result file" in capsys.readouterr().err
    png = tmp_path / "mine.png"
    png.write_text("precious")
    assert main(["fl", "report", str(r), "--plot", str(png)]) == 2
    assert png.read_text() == "precious"


def test_a_signal_while_the_pool_winds_down_keeps_every_row(monkeypatch):
    """Ctrl-C that lands in the pool's shutdown, after the last chunk: reported as interrupted,
    with every evaluated row kept (it used to escape the sweep and lose the result)."""
    from concurrent.futures import ProcessPoolExecutor

    real = ProcessPoolExecutor.shutdown

    def interrupted_shutdown(self, wait=True, **kw):
        real(self, wait=wait, **kw)
        if wait:
            raise KeyboardInterrupt
    monkeypatch.setattr(ProcessPoolExecutor, "shutdown", interrupted_shutdown)
    res = search.cosearch("gpt3-1.3b", small_space(), 16, 32, 2, refine_top=0, prune=False)
    assert res.interrupted and isinstance(res.stopped_by, KeyboardInterrupt)
    assert len(res.rows) == len(small_space().arrays())


def test_model_config_file_with_a_bom_reads_and_a_binary_one_is_refused(tmp_path, capsys):
    """``--model config.json`` went through ``json.load`` on its own: a config saved with a UTF-8
    byte-order mark (as Windows editors save) failed ("Unexpected UTF-8 BOM"), and a FIFO would
    block.  It now reads as every other JSON file does."""
    cfg = {"model_type": "llama", "hidden_size": 256, "intermediate_size": 688, "num_attention_heads": 4,
           "num_hidden_layers": 2, "num_key_value_heads": 4, "vocab_size": 1000, "max_position_embeddings": 512,
           "hidden_act": "silu", "tie_word_embeddings": False}
    plain, bom = tmp_path / "plain" / "config.json", tmp_path / "bom" / "config.json"
    for path, prefix in ((plain, b""), (bom, b"\xef\xbb\xbf")):
        path.parent.mkdir()
        path.write_bytes(prefix + json.dumps(cfg).encode())
    args = ["plan", "--cluster", "flat", "--chip", "h100", "--chips", "8", "--batch", "8"]
    outs = []
    for path in (plain, bom):
        assert main([*args, "--model", str(path)]) == 0
        outs.append(capsys.readouterr().out.replace("bom", "plain"))
    assert outs[0] == outs[1]
    binary = tmp_path / "x.json"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe")
    assert main([*args, "--model", str(binary)]) == 2
    assert "is not UTF-8 text" in capsys.readouterr().err


@pytest.mark.parametrize("call,message", [
    # a count of 10^19 clients built profiles until memory ran out; a spread near 0 divided by zero
    (lambda fl: fl.device_profiles(10**19), "clients=an integer of 20 digits is larger than the supported maximum 1,000,000"),
    (lambda fl: fl.device_profiles(5, spread=1e-300), "spread is the slowest client's time over the fastest's"),
    (lambda fl: fl.device_profiles(5, base_flops_per_s=None), "base_flops_per_s must be a positive"),
    # a NaN ratio chose the full model; an infinite width was returned as a keep fraction
    (lambda fl: fl.choose_width(float("nan")), "time ratio must be a positive finite number"),
    (lambda fl: fl.choose_width(0.7, [float("inf")]), "each width must be a positive finite number"),
    (lambda fl: fl.choose_width(0.7, []), "widths is empty"),
    (lambda fl: fl.fluid_keep_fraction(None), "time ratio must be a positive number"),
    (lambda fl: fl.drop_count(0.5, -1), "a layer's units n must be a positive integer"),
    # a trace of NaN or negative seconds, or of keys that are no (client, round), was kept
    (lambda fl: fl.TraceProfile({(0, 1): float("nan")}), "client 0 in round 1 must be a positive finite"),
    (lambda fl: fl.TraceProfile({(0, 1): -1.0}), "client 0 in round 1 must be a positive finite"),
    (lambda fl: fl.TraceProfile({("a", 1): 1.0}), r"\(client >= 0, round >= 1\) pairs of integers, got \('a', 1\)"),
    (lambda fl: fl.TraceProfile({(0, 0): 1.0}), r"pairs of integers, got \(0, 0\)"),
    # eps, max_steps and a NaN growth were stored unchecked and failed (or looped) mid-run
    (lambda fl: fl.InvariantDropout(eps=float("nan")), "eps must be a positive finite number"),
    (lambda fl: fl.InvariantDropout(max_steps=-1), "max_steps must be a positive integer"),
    (lambda fl: fl.InvariantDropout(growth=float("nan")), "growth must be a positive finite number"),
    (lambda fl: fl.InvariantDropout(quorum=None), "quorum must be a positive number"),
    (lambda fl: fl.StragglerProfiler(5, window=-1), "window must be a positive integer"),
    (lambda fl: fl.StragglerProfiler(5, window=1), "window must be at least 2 rounds"),
    (lambda fl: fl.StragglerProfiler(5, min_keep=None), "min_keep must be a positive number"),
    (lambda fl: fl.StragglerProfiler(5, widths=0.5), "widths must be a list of fractions"),
    (lambda fl: fl.ThresholdSchedule(growth_after=None), "growth_after must be a non-negative number"),
    (lambda fl: fl.HeteroFL(proportions={0.5: None, 1.0: 0.5}), "HeteroFL proportion of tier 0.5 must be"),
    (lambda fl: fl.HeteroFL(proportions={True: 1.0}), r"HeteroFL tiers \[True\] are not among"),
])
def test_fl_building_blocks_refuse_what_they_cannot_use(call, message):
    """Found by fuzzing cosearch.fl's public classes and functions: each of these hung, raised a
    TypeError or ZeroDivisionError from inside, or was accepted and failed (or gave a silent
    number) later.  Each is now refused by name."""
    import signal

    import cosearch.fl as fl

    def hung(*_):
        raise AssertionError("hung")
    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(20)
    try:
        with pytest.raises(ValueError, match=message):
            call(fl)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def test_area_model_memory_config_and_compressed_attention_refuse_by_name():
    """Found by fuzzing the configuration classes: an AreaPowerModel constant given as text or
    an integer beyond any float raised TypeError from numpy; a 2^70 CompressedAttention size was accepted (a
    ModelConfig dimension is refused above 2^31 - 1); 1e300 bytes per parameter priced every plan
    as not fitting without saying why."""
    from cosearch import memory
    from cosearch.compressed_attention import CompressedAttention
    with pytest.raises(ValueError, match="AreaPowerModel.pe_area_mm2 must be a non-negative number, got 'x'"):
        hardware.AreaPowerModel(pe_area_mm2="x")
    with pytest.raises(ValueError, match="AreaPowerModel.core_energy_j must be a non-negative finite number, got "
                                         "an integer of 401 digits"):
        hardware.AreaPowerModel(core_energy_j=10**400)
    v4 = dict(ratios=(4, 128), window=128, q_lora_rank=1024, o_groups=8, o_lora_rank=1024, index_heads=64,
              index_head_dim=128, index_topk=512)
    with pytest.raises(ValueError, match="CompressedAttention.index_topk = an integer of 22 digits is larger than "
                                         "any model's"):
        CompressedAttention(**{**v4, "index_topk": 2**70})
    CompressedAttention(**{**v4, "index_topk": 2**31 - 1})
    with pytest.raises(ValueError, match="MemoryConfig.optimizer_bytes = 1e\\+300 bytes per parameter is more than"):
        memory.MemoryConfig(optimizer_bytes=1e300)
    assert memory.MemoryConfig(4, 4, 24).bytes_per_param == 32       # fp32 weights, gradients and Adam


@pytest.mark.parametrize("field,value,kind,message", [
    ("kind", 7.5, None, "its kind code is not one of 0 \\(GEMM\\)"),       # was priced 0 s
    ("kind", 5, None, "its kind code is not one of"),
    ("m", 0, None, "a GEMM or attention op needs a positive m"),           # ZeroDivisionError in the kernel
    ("batch", 0, None, "needs a positive batch"),                          # ZeroDivisionError / NaN
    ("k", 0, 3, "needs a positive k"),
    ("elements", 0, 1, "a vector op needs a positive elements"),
    ("bytes_read", 0, 2, "a network op needs positive bytes_read"),
    ("dtype_bytes", 0, None, "dtype_bytes must be positive"),              # priced inf
    ("head_dim", 64, None, "head_dim is a whole number, on attention ops only"),
    ("head_dim", 64.5, 3, "head_dim is a whole number"),
])
def test_raw_op_rows_are_checked_as_ops_are(field, value, kind, message):
    """``cosearch.price`` of a user's op array skipped the rules an :class:`Op` enforces (found by
    fuzzing price): an unknown kind code was priced 0 s, a GEMM with m or batch 0 raised
    ZeroDivisionError inside the numba kernel (NaN from the NumPy backend)."""
    from cosearch import cost
    from cosearch.graph import OP_FIELDS
    row = np.array([[0, 4096, 4096, 4096, 1, 0, 0, 1e8, 1e8, 2, 0]], dtype=float)
    assert cost.price(row, hardware.H100)[0, 0] == cost.price_rows(row, hardware.H100)[0, 0] > 0
    row[0, OP_FIELDS.index(field)] = value
    if kind is not None:
        row[0, 0] = kind
    for backend in ("numba", "numpy"):
        with pytest.raises(ValueError, match="op array row 0 .*" + message):
            cost.price(row, hardware.H100, backend=backend)


def test_layer_time_checks_its_settings_even_when_no_ilp_runs():
    """Found by fuzzing layer_time: a chain-shaped or cached layer never reaches the solver, so
    solver='x', time_limit_s=-1 or NaN, mip_gap=2 and use_cache=None were accepted silently, and
    a layer that is not a LayerGraph raised AttributeError."""
    from cosearch import graph
    from cosearch.schedule import layer_time
    layer = graph.build(models.preset("gpt2-xl"), 1, 1)
    layer = getattr(layer, "forward", layer)
    assert layer_time(layer, hardware.H100).latency_s > 0
    for kw, msg in ((dict(solver="x"), "solver='x'; choose one of 'HIGHS', 'SCIPY'"),
                    (dict(time_limit_s=-1), "time_limit_s must be a positive finite number"),
                    (dict(time_limit_s=float("nan")), "time_limit_s must be a positive finite number"),
                    (dict(mip_gap=2.0), "mip_gap is a relative gap below 1"),
                    (dict(use_cache=None), "use_cache must be True or False")):
        with pytest.raises(ValueError, match=re.escape(msg) if "(" in msg else msg):
            layer_time(layer, hardware.H100, **kw)
    with pytest.raises(ValueError, match="layer must be a LayerGraph"):
        layer_time(models.preset("gpt2-xl"), hardware.H100)


def test_cosearch_checks_its_arguments_before_the_sweep():
    """Found by fuzzing cosearch(): cluster=3.5 searched 3 chips and cluster='x' said only
    "invalid literal for int()"; tps=[] and microbatches=[] fell back to the defaults silently;
    an unknown plan option raised TypeError from search_plans; a string as space, mem or options
    raised AttributeError deep inside; baselines='x' ran the baselines."""
    sp = small_space(tensor_cores=(2,), systolic_dims=((64, 64),), vector_width=(512,), l1_bytes=(1 << 20,),
                     hbm=((16 << 30, 1.2e12),))
    for kw, msg in ((dict(cluster=3.5), r"cluster \(a Cluster or a number of chips\) must be a positive integer, "
                                        "got 3.5"),
                    (dict(cluster="x"), "cluster .* must be a positive integer, got 'x'"),
                    (dict(tps=[]), "tps must not be empty"), (dict(microbatches=[]), "microbatches must not be empty"),
                    (dict(plan_options={"recompute": "none", "flash": True}), r"unknown plan option\(s\) \['flash'\]"),
                    (dict(space="x"), "space must be a SearchSpace"), (dict(mem="x"), "mem must be a MemoryConfig"),
                    (dict(options="x"), "options must be a SearchOptions"),
                    (dict(baselines="x"), "baselines must be True or False")):
        args = {**dict(space=sp, cluster=16, global_batch=32, executor="serial"), **kw}
        with pytest.raises(ValueError, match=msg):
            search.cosearch("gpt3-1.3b", **args)
    with pytest.raises(ValueError, match="cluster .* got 3.5"):
        evaluate("gpt3-1.3b", hardware.H100, 3.5, PlanSpec(1, 1, 1, 1), 8)
    # the cross-model search: chunk_size=0 said "range() arg 3 must not be zero", a string space
    # or mem raised AttributeError / TypeError, and prune, progress or baselines='x' ran
    from cosearch.multimodel import cosearch_models
    for kw, msg in ((dict(chunk_size=0), "chunk_size must be a positive integer"),
                    (dict(space="x"), "space must be a SearchSpace"), (dict(mem="x"), "mem must be a MemoryConfig"),
                    (dict(prune="x"), "prune must be True or False"),
                    (dict(checkpoint_every_s=-1), "checkpoint_every_s must be a non-negative"),
                    (dict(baselines="x"), "baselines must be True or False")):
        with pytest.raises(ValueError, match=msg):
            cosearch_models(["gpt3-1.3b", "gpt3-2.7b"], **{**dict(space=sp, cluster=16, global_batch=32), **kw})


def test_evaluate_and_search_plans_refuse_a_wrong_kind_of_mem_flag_or_units():
    """Found by fuzzing evaluate and search_plans: mem='x' raised AttributeError, units='x' a
    numba TypingError from inside the kernel, and overlap_dp, prune, progress or flash_attention
    = 'x' (or None) ran as if True or False."""
    spec = PlanSpec(2, 2, 2, 1)
    for kw, msg in ((dict(mem="x"), "mem must be a MemoryConfig"), (dict(overlap_dp=None), "overlap_dp must be True")):
        with pytest.raises(ValueError, match=msg):
            evaluate("gpt3-1.3b", hardware.H100, 8, spec, 16, **kw)
    for kw, msg in ((dict(mem="x"), "mem must be a MemoryConfig"), (dict(units="x"), "units must be an array"),
                    (dict(units=np.zeros((1, 1, 1, 1))), r"units has shape \(1, 1, 1, 1\); these options need"),
                    (dict(prune="x"), "prune must be True or False"),
                    (dict(flash_attention="x"), "flash_attention must be True or False")):
        with pytest.raises(ValueError, match=msg):
            placement.search_plans("gpt3-1.3b", hardware.H100, 8, 16, **kw)
    # one chip's precomputed unit costs give the search's own answer
    from cosearch.plan import unit_costs
    m = models.preset("gpt3-1.3b")
    opts = dict(tps=[1, 2], microbatches=[1, 2], sequence_parallel=False, flash_attention=True)
    u = unit_costs(m, hardware.H100, cluster.Cluster(8), [1, 2], [1, 2], [False], True)[0]
    assert (placement.search_plans(m, hardware.H100, 8, 16, units=u, **opts).plans[0].step_time_s
            == placement.search_plans(m, hardware.H100, 8, 16, **opts).plans[0].step_time_s)


def test_result_tables_refuse_a_negative_or_fractional_top():
    """Found by fuzzing the results API: ``table(top=-1)`` sliced ``rows[:-1]`` and silently
    dropped the last row; ``top=1.5`` raised TypeError ("slice indices must be integers")."""
    from cosearch import frontier
    res = frontier.codesign("llama2-7b", [frontier.fixed_system("dgx-h100"), frontier.fixed_system("dgx-b200")],
                            64, 64)
    assert res.table(top=None).count("\n") == res.table(top=2).count("\n") == res.table(top=0).count("\n") + 2
    for top, msg in ((-1, "top must be a non-negative integer, got -1"), (1.5, "top must be a non-negative")):
        with pytest.raises(ValueError, match=msg):
            res.table(top=top)


# ------------------------------------------------------------------ switches
def _switch_calls():
    from cosearch import engine, memory
    from cosearch.fl.masks import HeteroFL
    from cosearch.hardware.space import SearchSpace
    m = models.preset("llama3-8b")
    yield "tp_comm_overlap", lambda v: engine.megatron_core(tp_comm_overlap=v)
    yield "fp8_param_gather", lambda v: engine.megatron_core(fp8_param_gather=v)
    yield "overlap_grad_reduce", lambda v: engine.megatron_core(overlap_grad_reduce=v)
    yield "overlap_p2p_comm", lambda v: engine.megatron_core(overlap_p2p_comm=v)
    yield "SearchSpace.vector_width_tied", lambda v: SearchSpace(vector_width_tied=v)
    yield "SearchSpace.min_area_exempt_single_core", lambda v: SearchSpace(min_area_exempt_single_core=v)
    yield "HeteroFL dynamic", lambda v: HeteroFL({1.0: 0.5, 0.5: 0.5}, dynamic=v)
    yield "sequence_parallel", lambda v: memory.layer_activation_bytes(m, 2, 1, sequence_parallel=v)
    yield "flash_attention", lambda v: memory.layer_activation_bytes(m, 2, 1, flash_attention=v)
    yield "sequence_parallel", lambda v: memory.layer_input_bytes(m, 2, 1, sequence_parallel=v)
    from cosearch import graph, measure
    yield "flash_attention", lambda v: measure.op_shapes(m, 1, 1, flash_attention=v)
    yield "sequence_parallel", lambda v: graph.build(m, 2, 1, sequence_parallel=v)
    # refused before the search runs: a switch that is refused never costs a search
    yield "show", lambda v: search.compare("gpt3-1.3b", None, 8, 8, show=v) if not isinstance(v, (bool, np.bool_)) \
        else None


@pytest.mark.parametrize("name,call", list(_switch_calls()), ids=lambda x: x if isinstance(x, str) else "")
def test_switches_take_only_booleans(name, call):
    """An on/off switch given a string ("false" is truthy), a number or None is refused by name,
    not read as on; numpy's booleans are booleans."""
    for bad in ("false", 0, None, 0.5):
        with pytest.raises(ValueError, match=f"{re.escape(name)} must be True or False"):
            call(bad)
    call(np.bool_(True))
    call(False)


def test_model_dimensions_take_numpy_integers_as_integers():
    """A sweep over ``np.arange`` gives numpy integers: a model takes them and keeps Python ints
    (its JSON stays plain), while a float stays refused, as before."""
    m = models.preset("llama3-8b").with_(seq_len=np.int64(2048), num_layers=np.int32(4))
    assert (m.seq_len, m.num_layers) == (2048, 4)
    assert type(m.seq_len) is int and type(m.num_layers) is int
    assert json.loads(json.dumps(m.to_dict()))["seq_len"] == 2048
    assert m == models.preset("llama3-8b").with_(seq_len=2048, num_layers=4)
    with pytest.raises(ValueError, match="ModelConfig.seq_len must be a positive integer, got np.float64"):
        models.preset("llama3-8b").with_(seq_len=np.float64(2048.0))
    # and a cluster's torus side, stored as an int
    cl = cluster.preset("dgx-h100", 2).with_(torus_side=np.int64(0))
    assert cl.torus_side == 0 and type(cl.torus_side) is int


@pytest.mark.parametrize("field,value", [("checkpoint", [1]), ("checkpoint", ""), ("resume", {"a": 1}), ("resume", "")])
def test_search_files_must_be_paths(field, value):
    """A checkpoint or resume that is not a path (a list, a dict, an empty string) is refused when
    the options are made; a dict was read as JSON text and a list was never written to."""
    with pytest.raises(ValueError, match=f"{field} must be a file path"):
        search.SearchOptions(**{field: value})
    assert search.SearchOptions(**{field: "run.json"}).__getattribute__(field) == "run.json"


@pytest.mark.parametrize("bad,message", [([1], "out must be a file path"), ("", "out must be a file path"),
                                         (5, "out must be a file path"),
                                         ("no-such-folder/rows.json", "folder .* does not exist")])
def test_output_files_are_checked_before_any_work(bad, message, tmp_path, monkeypatch):
    """The long library runs check their output file before the first run, not when the first
    run's rows are written (a frontier run then failed after its first model with a bare
    TypeError or FileNotFoundError): PHAZE's table, the frontier table and its plot prefix, an FL
    simulation and an FL experiment."""
    from cosearch import fl, reproduce
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match=message):
        reproduce.phaze(["opt-350m"], [32], out=bad, progress=False)
    with pytest.raises(ValueError, match=message):
        reproduce.frontier(["gpt3-1.3b"], [64], out=bad)
    with pytest.raises(ValueError, match=message.replace("out must be a file path", "plot must be a file prefix")):
        reproduce.frontier(["gpt3-1.3b"], [64], plot=bad)
    with pytest.raises(ValueError, match=message):
        fl.simulate(dataset="digits", method="none", rounds=1, out=bad)
    with pytest.raises(ValueError, match=message):
        fl.run_experiment(dataset="digits", methods=["none"], seeds=[0], rounds=1, out=bad, progress=False)


@pytest.mark.parametrize("bad", [5, None, [1], b"x.yaml", ""])
def test_readers_refuse_what_is_no_path(bad):
    """The config readers given no path (a number, None, a list, bytes, an empty string) refuse
    it by name: the operating system's TypeError ('stat: path should be string ...') or an
    AttributeError ('int' object has no attribute 'read') came from deep inside before."""
    from cosearch import runs
    from cosearch.runs.check import read_measured
    calls = [(runs.read_config, "read_config: the config must be a file path"),
             (runs.read_nemo1, "must be a file path"), (runs.read_foundry, "must be a file path"),
             (runs.read_torchtitan, "must be a file path"), (runs.read_hf_config, "must be a file path"),
             (read_measured, "the measured-runs file must be a file path")]
    if bad is not None:                        # read_maxtext(None) is MaxText's own defaults
        calls.append((runs.read_maxtext, "must be a file path"))
    for fn, message in calls:
        with pytest.raises(ValueError, match=re.escape(message)):
            fn(bad)
    with pytest.raises(ValueError, match="give the argument line as text"):
        runs.read_megatron_args(5)
    with pytest.raises(ValueError, match="read_configs: "):
        runs.read_configs(bad if bad is not None else 5)


def test_a_folder_where_a_file_is_wanted_is_named_a_folder(tmp_path, capsys):
    """`report` and `search --resume` given a folder say it is one (they said "no such file",
    which a user who sees the folder cannot act on)."""
    assert main(["report", str(tmp_path)]) == 2
    assert "a folder, not a results file" in capsys.readouterr().err
    assert main(["search", "--model", "gpt3-1.3b", "--chips", "8", "--batch", "8", "--serial", "--refine-top", "0",
                 "--resume", str(tmp_path), "--out", str(tmp_path / "r.json")]) == 2
    assert "--resume " + str(tmp_path) + ": a folder, not a file" in capsys.readouterr().err


def test_an_moe_plan_says_the_host_is_not_priced(capsys):
    """A bare MoE plan says that its number is GPU time, which a run launched from the host also
    waits beyond; a dense plan carries no such line."""
    base = ["plan", "--cluster", "dgx-h100", "--nodes", "1", "--tp", "1", "--pp", "1", "--mb", "1", "--flash"]
    assert main(base + ["--model", "mixtral-8x7b", "--batch", "8", "--ep", "8"]) in (0, 3)
    assert "also waits on the host's launches" in capsys.readouterr().out
    assert main(base + ["--model", "gpt3-1.3b", "--batch", "8"]) == 0
    assert "host's launches" not in capsys.readouterr().out


@pytest.mark.parametrize("field,value,message", [
    ("clock_hz", 8, "SearchSpace.clock_hz=8 Hz is outside the plausible range"),
    ("clock_hz", (1e9, 1e13), "SearchSpace.clock_hz=10000000000000.0 Hz is outside the plausible range"),
    ("link_bandwidth_Bps", 8, "SearchSpace.link_bandwidth_Bps=8 bytes/s is outside the plausible range"),
    ("hbm", ((32 * 2**30, 8),), "SearchSpace.hbm bandwidth=8 bytes/s is outside the plausible range"),
])
def test_search_space_holds_clocks_and_links_to_a_chips_ranges(field, value, message):
    """A searched clock or bandwidth outside the range a chip's own field is held to (8 for 8 GHz,
    a unit slip) is refused as the chip refuses it, not searched into designs priced at 8 Hz."""
    from cosearch.hardware.space import SearchSpace
    with pytest.raises(ValueError, match=message):
        SearchSpace(**{field: value})
    with pytest.raises(ValueError, match="outside the plausible range"):
        hardware.H100.with_(clock_hz=8) if field == "clock_hz" else hardware.H100.with_(link_bandwidth_Bps=8)


def test_plan_search_over_cells_that_are_no_plan_neither_crashes_nor_misleads(capsys):
    """Sequence parallelism over tp ranks that do not divide a 3-token sequence is no plan
    (evaluate refuses it): a search offered only those cells crashed inside the compiled kernel
    (a division by zero in the memory caps of an all-infinite cell), and its 'no plan fits'
    message said every plan needs 'inf GiB'.  Now it finds none and says why; offered sequence
    parallelism beside its absence, it finds exactly the best plan a brute force over evaluate()
    finds."""
    m = models.preset("gpt3-1.3b").with_(seq_len=3)
    cl = cluster.dgx_a100(1)
    res = placement.search_plans(m, "A100-80GB", cl, 16, sequence_parallel=(True,), progress=False)
    assert not res.plans and "tp 2, 4, 8 do not divide it" in res.reason
    with pytest.raises(ValueError, match="only evenly"):
        evaluate(m, "A100-80GB", cl, PlanSpec(1, 8, 1, 2, sequence_parallel=True), 16)
    both = placement.search_plans(m, "A100-80GB", cl, 16, sequence_parallel=(False, True), tps=(2, 4, 8),
                                  microbatches=(1, 2, 4), zero=(0,), virtual_stages=(1,), recompute=("none",),
                                  progress=False)
    best = math.inf
    for tp, pp, mb, sp in itertools.product((2, 4, 8), (1, 2, 4, 8), (1, 2, 4), (False, True)):
        if 8 % (tp * pp) or 16 % (8 // (tp * pp) * mb):
            continue
        try:
            p = evaluate(m, "A100-80GB", cl, PlanSpec(8 // (tp * pp), tp, pp, mb, sequence_parallel=sp), 16)
        except ValueError:
            continue
        if p.feasible:
            best = min(best, p.step_time_s)
    assert both.best.step_time_s == pytest.approx(best, rel=1e-9)
    assert not both.best.spec.sequence_parallel
    assert main(["plan", "--model", "gpt3-1.3b", "--seq-len", "3", "--cluster", "dgx-a100", "--nodes", "1",
                 "--batch", "16", "--sp"]) == 2
    err = capsys.readouterr().err
    assert "sequence parallelism splits each sequence (3 tokens)" in err and "inf GiB" not in err


def test_a_search_with_no_configuration_says_what_it_needs():
    """Options that leave no configuration on the chips (tensor parallelism of 2 or 4 on one chip)
    said only 'the given options'; the reason now names the fewest chips they need."""
    m = models.preset("llama3-8b").with_(num_layers=4, seq_len=64)
    res = placement.search_plans(m, "H100", cluster.Cluster(1), 64, tps=(2, 4), progress=False)
    assert not res.plans and "needs 2 chips (tp 2 x cp 1)" in res.reason
