"""Paired experiments: statistics against hand-worked values, resume, Ctrl-C, the CLI."""

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("sklearn")

from cosearch.fl import experiment  # noqa: E402


def test_mean_ci_and_paired_test_hand_worked():
    m, h = experiment.mean_ci([1.0, 2.0, 3.0, 4.0])
    # sd = sqrt(5/3) = 1.290994; t(0.975, 3) = 3.182446; half = t sd / 2
    assert m == 2.5 and h == pytest.approx(3.182446 * 1.290994 / 2, rel=1e-5)
    d, hd, p = experiment.paired_test([2.0, 3.0, 5.0], [1.0, 1.0, 1.0])
    # differences 1, 2, 4: mean 7/3, sd 1.527525, t = (7/3) / (1.527525 / sqrt 3) = 2.645751, df 2
    assert d == pytest.approx(7 / 3) and p == pytest.approx(0.118, abs=0.001)
    assert experiment.paired_test([1, 1], [1, 1])[2] == 1.0
    assert np.isnan(experiment.paired_test([2, 2], [1, 1])[2])      # no variance: no p-value
    assert np.isnan(experiment.mean_ci([])[0])


def test_experiment_statistics_resume_and_plot(tmp_path):
    out = tmp_path / "e.json"
    full = experiment.run_experiment("digits", ["invariant", "none"], 2, 4, clients=3, workers=1, progress=False)
    part = experiment.run_experiment("digits", ["invariant", "none"], [0], 4, clients=3, workers=1,
                                     progress=False, out=out)
    assert part.complete() and all(list(rs) == [0] for rs in part.runs.values())
    resumed = experiment.run_experiment("digits", ["invariant", "none"], 2, 4, clients=3, workers=1,
                                        progress=False, out=out, resume=out)
    assert resumed.complete()
    for m in ("invariant", "none"):
        for s in (0, 1):
            assert resumed.runs[m][s].to_dict() == full.runs[m][s].to_dict()
    stats = {s.method: s for s in full.summary()}
    inv, none = full.runs["invariant"], full.runs["none"]
    d = [inv[s].rounds[-1].accuracy - none[s].rounds[-1].accuracy for s in (0, 1)]
    assert stats["none"].diff_vs_reference[0] == pytest.approx(-np.mean(d))
    t_eq = min(r.rounds[-1].sim_time_s for rs in full.runs.values() for r in rs.values())
    for m, rs in full.runs.items():
        at = [[x.accuracy for x in r.rounds if x.sim_time_s <= t_eq + 1e-12][-1] for r in rs.values()]
        assert stats[m].accuracy_at_equal_time[0] == pytest.approx(np.mean(at))
    # the straggler's sub-model makes the dropout rounds shorter than with no dropout
    assert stats["invariant"].round_time_s[0] < stats["none"].round_time_s[0]
    assert "invariant" in full.table()
    back = experiment.Experiment.from_json(out)
    assert back.to_dict() == resumed.to_dict()
    # an edited file with a run of no rounds: refused on load (the statistics raised IndexError;
    # found by fuzzing fl report)
    import json
    doc = json.loads(out.read_text())
    doc["runs"]["none"]["1"]["rounds"] = []
    (tmp_path / "empty.json").write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="run\\(s\\) without a round: none seed 1"):
        experiment.Experiment.from_json(tmp_path / "empty.json")
    # a target accuracy outside (0, 1] (nan, 2) was used: every run "missed" it
    for bad in (float("nan"), 2.0, 0.0):
        with pytest.raises(ValueError, match="target accuracy must be"):
            full.table(bad)
    full.plot(tmp_path / "e.png")
    assert (tmp_path / "e.png").stat().st_size > 5000
    with pytest.raises(ValueError, match="differ"):
        experiment.run_experiment("digits", ["invariant"], 2, 5, clients=3, workers=1, progress=False,
                                  resume=out)
    with pytest.raises(ValueError, match="unknown method"):
        experiment.run_experiment("digits", ["bogus"], 1, 2)


def _signal_and_wait(proc, sig) -> str:
    """Send ``sig`` to a CLI run and wait for it (killing its group if it hangs); its stderr."""
    proc.send_signal(sig)
    try:
        return proc.communicate(timeout=60)[1]
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise


def test_ctrl_c_keeps_finished_runs_and_stops_workers(tmp_path):
    out = tmp_path / "e.json"
    cmd = [sys.executable, "-m", "cosearch", "fl", "experiment", "--seeds", "40", "--rounds", "3",
           "--clients", "3", "--methods", "invariant,none", "--workers", "2", "--out", str(out)]
    from tests.test_robustness import default_sigint
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=default_sigint)
    deadline = time.time() + 120
    while time.time() < deadline and not out.exists():
        time.sleep(0.2)
    assert out.exists(), proc.stderr.read() if proc.poll() is not None else "no run finished"
    se = _signal_and_wait(proc, signal.SIGINT)
    assert proc.returncode == 130, se
    assert "interrupted" in se and "Traceback" not in se
    d = json.loads(out.read_text())
    assert d["interrupted"] is True and sum(len(v) for v in d["runs"].values()) >= 1
    from tests.test_robustness import _group_empties
    assert _group_empties(proc.pid), "worker processes outlived the experiment"


def test_cli_refuses_bad_outputs_before_work(tmp_path, capsys):
    from cosearch.cli import main
    assert main(["fl", "experiment", "--out", str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err
    assert main(["fl", "experiment", "--out", str(tmp_path / "no" / "e.json")]) == 2
    (tmp_path / "e.json").write_text("{}")
    assert main(["fl", "simulate", "--out", str(tmp_path / "e.json")]) == 2
    assert "--force" in capsys.readouterr().err
    assert main(["fl", "report", str(tmp_path / "e.json")]) == 2       # not a result file


def test_fl_cli_simulate_and_report(tmp_path):
    from cosearch.cli import main
    out = tmp_path / "fl.json"
    assert main(["fl", "simulate", "--clients", "3", "--method", "ordered", "--rounds", "3", "--out", str(out),
                 "--lr", "0.05", "--batch-size", "16", "--optimizer", "adam"]) == 0
    d = json.loads(out.read_text())
    assert d["config"]["optimizer"] == "adam" and d["config"]["lr"] == 0.05 and d["config"]["batch_size"] == 16
    png = tmp_path / "fl.png"
    assert main(["fl", "report", str(out), "--plot", str(png)]) == 0
    assert png.stat().st_size > 1000


def test_dead_worker_is_retried_and_nothing_is_lost(tmp_path):
    """A worker killed mid-run (as by the OOM killer): its run is retried on a fresh pool and the
    experiment completes (before: exit 2 with a partial file marked not interrupted)."""
    import multiprocessing as mp
    import threading
    killed = []

    def kill_one_worker():
        deadline = time.time() + 60
        while time.time() < deadline and not killed:
            kids = mp.active_children()
            if kids:
                time.sleep(2.0)                       # let the workers start their runs
                os.kill(kids[0].pid, signal.SIGKILL)
                killed.append(kids[0].pid)
            time.sleep(0.05)
    t = threading.Thread(target=kill_one_worker, daemon=True)
    t.start()
    exp = experiment.run_experiment("digits", ["invariant", "none"], 3, 25, clients=3, workers=2, progress=False,
                                    out=tmp_path / "e.json")
    t.join(timeout=5)
    assert killed, "no worker was killed"
    assert exp.complete() and not exp.interrupted and sum(len(v) for v in exp.runs.values()) == 6
    d = json.loads((tmp_path / "e.json").read_text())
    assert d["interrupted"] is False and sum(len(v) for v in d["runs"].values()) == 6


def test_simulate_saves_the_finished_rounds_on_an_interrupt(tmp_path, monkeypatch):
    from cosearch.fl import simulation
    real = simulation._eval_sums
    calls = {"n": 0}

    def stop_in_round_3(*a, **k):
        calls["n"] += 1
        if calls["n"] > 2 * 4:                       # the server's and 3 clients' evaluations, rounds 1-2
            raise KeyboardInterrupt
        return real(*a, **k)
    monkeypatch.setattr(simulation, "_eval_sums", stop_in_round_3)
    out = tmp_path / "fl.json"
    res = simulation.simulate("digits", clients=3, rounds=6, out=out)
    assert res.interrupted and len(res.rounds) == 2 and isinstance(res.stopped_by, KeyboardInterrupt)
    d = json.loads(out.read_text())
    assert d["interrupted"] is True and len(d["rounds"]) == 2
    assert simulation.FLResult.from_dict(d).rounds == res.rounds


def test_fl_simulate_cli_exits_143_on_sigterm_with_the_rounds_saved(tmp_path):
    out = tmp_path / "fl.json"
    cmd = [sys.executable, "-m", "cosearch", "fl", "simulate", "--rounds", "5000", "--clients", "3",
           "--out", str(out)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.time() + 120
    while time.time() < deadline and not out.exists() and proc.poll() is None:
        time.sleep(0.2)                               # the first checkpoint (every 10 s)
    assert out.exists(), "no checkpoint was written"
    se = _signal_and_wait(proc, signal.SIGTERM)
    assert proc.returncode == 143, se
    d = json.loads(out.read_text())
    assert d["interrupted"] is True and 0 < len(d["rounds"]) < 5000


def test_experiment_cli_spread_noise_and_seed_offset(tmp_path):
    """--spread/--noise reach every run's devices (noise 0: each client's round time is the same
    in every full-model round) and --seed-offset picks the seeds."""
    import json

    from cosearch.cli import main
    out = tmp_path / "e.json"
    assert main(["fl", "experiment", "--dataset", "digits", "--methods", "invariant,none", "--seeds", "2",
                 "--seed-offset", "5", "--rounds", "3", "--spread", "4", "--noise", "0", "--workers", "1",
                 "--out", str(out)]) == 0
    d = json.loads(out.read_text())
    assert d["seeds"] == [5, 6] and d["config"]["spread"] == 4.0 and d["config"]["noise_cv"] == 0.0
    run = d["runs"]["none"]["5"]["rounds"]
    assert run[0]["client_times_s"] == run[1]["client_times_s"]          # no noise
    t = run[0]["client_times_s"]
    assert max(t.values()) / min(t.values()) > 2.0                       # a 4x compute spread shows
    assert main(["fl", "experiment", "--dataset", "digits", "--seeds", "1", "--spread", "0.5", "--rounds", "1",
                 "--out", str(tmp_path / "f.json")]) == 2


def test_run_experiment_checks_its_seeds_and_settings_before_any_run(tmp_path):
    """Found by fuzzing run_experiment: seeds [1.5] ran seed 1; seeds [1, 1] ran once and the
    statistics counted it twice (runs=2, a spread of 0); an empty list gave an empty experiment;
    seeds=3.0 and None raised TypeError; a typo in a simulate setting failed the first run; a list
    of ClientProfile devices (as simulate takes them) raised TypeError when the settings were saved."""
    from cosearch.fl.profiling import device_profiles
    for seeds, msg in (([1.5], "each seed must be a non-negative integer, got 1.5"), ([1, 1], r"seeds are listed twice: \[1\]"),
                       ([], "seeds is empty"), (["a"], "each seed must be"), (3.0, "seeds must be a count or a list"),
                       (None, "seeds must be a count or a list")):
        with pytest.raises(ValueError, match=msg):
            experiment.run_experiment("digits", ["none"], seeds, 1, progress=False, workers=1)
    with pytest.raises(ValueError, match="unknown setting 'lrate'; simulate takes model, devices"):
        experiment.run_experiment("digits", ["none"], 1, 1, progress=False, workers=1, lrate=0.1)
    with pytest.raises(ValueError, match="seed is set by run_experiment"):
        experiment.run_experiment("digits", ["none"], 1, 1, progress=False, workers=1, seed=3)
    # one method named as a string; ClientProfile devices saved as their fields and resumed
    devs = device_profiles(5, 2.5, 0.0)
    out = tmp_path / "e.json"
    exp = experiment.run_experiment("digits", "none", [4], 1, progress=False, workers=1, devices=devs, out=out)
    assert exp.methods == ["none"] and list(exp.runs["none"]) == [4]
    assert json.loads(out.read_text())["config"]["devices"][4]["flops_per_s"] == devs[4].flops_per_s
    again = experiment.run_experiment("digits", "none", [4], 1, progress=False, workers=1, devices=devs, out=out,
                                      resume=out)
    assert again.runs["none"][4].to_dict() == exp.runs["none"][4].to_dict()
