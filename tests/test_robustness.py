"""No lost work and no silent wrong numbers on the co-search side: real signals to a real
`cosearch search`, a killed pool worker, resume, bad outputs and inputs, infeasibility."""

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from cosearch import ranking, search
from cosearch.cli import main

SMALL = ["--model", "gpt3-1.3b", "--chips", "64", "--batch", "256", "--refine-top", "0"]


def default_sigint():
    """preexec_fn for a child that must see Ctrl-C: a shell that starts the test run in the
    background ignores SIGINT, children inherit that, and Python then installs no
    KeyboardInterrupt handler — the signal would be lost, not the feature tested."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start(tmp_path, out, *extra, every: float = 0.2):
    cmd = [sys.executable, "-m", "cosearch", "search", *SMALL, "--out", str(out), "--checkpoint-every", str(every),
           "--workers", "2", *extra]
    return subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=default_sigint)


def _group_empties(pgid, timeout=15.0):
    """True once no process of the group is left (multiprocessing's resource tracker exits
    a moment after its parent)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if not subprocess.run(["pgrep", "-g", str(pgid)], capture_output=True, text=True).stdout.split():
            return True
        time.sleep(0.2)
    return False


def _wait_for(path, proc, timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline and not path.exists():
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    return path.exists()


@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signal_saves_partial_results_and_stops_workers(tmp_path, sig, code):
    out = tmp_path / "r.json"
    # the small search takes about a second on a fast host: a signal may land after its last save
    # (the file then holds the whole search, nothing lost); checkpoint sooner and try again
    for every in (0.2, 0.05, 0.02):
        out.unlink(missing_ok=True)
        proc = _start(tmp_path, out, every=every)
        assert _wait_for(out, proc), proc.communicate()[1][-2000:]
        os.kill(proc.pid, sig)
        try:
            _, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            raise
        d = json.loads(out.read_text())
        if proc.returncode != 0 and d["interrupted"]:
            break
        # finished before the signal landed: the saved search is the complete one
        assert not d["interrupted"] and len(d["rows"]) > 0
        assert _group_empties(proc.pid), "worker processes outlived the search"
    else:
        pytest.skip("the search finished before every signal")
    assert proc.returncode == code, err[-2000:]
    assert "interrupted" in err and "Traceback" not in err
    assert d["interrupted"] is True and len(d["rows"]) > 0
    assert _group_empties(proc.pid), "worker processes outlived the search"
    # --resume continues and ends with the same best design as an uninterrupted search
    assert main(["search", *SMALL, "--serial", "--out", str(out), "--resume"]) == 0
    full = search.cosearch("gpt3-1.3b", None, 64, 256, "serial", refine_top=0)
    done = search.Results.from_json(out)
    assert not done.interrupted and done.best.index == full.best.index
    assert done.best.tokens_per_s == pytest.approx(full.best.tokens_per_s)


def _children(pid):
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as fh:
                    if int(fh.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(d))
            except (OSError, ValueError, IndexError):
                pass
    return out


def test_dead_worker_is_replaced_and_nothing_is_lost():
    res = {}

    def run():
        res["r"] = search.cosearch("bert-large", None, 16, 64, 2, refine_top=0, prune=False, chunk_size=1)
    t = threading.Thread(target=run)
    t.start()
    killed = False
    deadline = time.time() + 60
    while not killed and time.time() < deadline and t.is_alive():
        kids = [k for k in _children(os.getpid()) if "spawn_main" in open(f"/proc/{k}/cmdline").read()]
        if len(kids) >= 2:
            time.sleep(0.5)               # let it get going (the whole sweep takes a few seconds)
            os.kill(kids[0], signal.SIGKILL)
            killed = True
        time.sleep(0.05)
    t.join(300)
    assert killed and "r" in res
    r = res["r"]
    assert not r.interrupted and len(r.rows) == r.total_designs
    ref = search.cosearch("bert-large", None, 16, 64, "serial", refine_top=0, prune=False)
    assert sorted(x.index for x in r.rows) == sorted(x.index for x in ref.rows)
    assert r.best.index == ref.best.index


def test_outputs_checked_before_any_work(tmp_path, capsys, monkeypatch):
    started = []
    monkeypatch.setattr(search, "cosearch", lambda *a, **k: started.append(1))
    assert main(["search", *SMALL, "--out", str(tmp_path)]) == 2
    assert main(["search", *SMALL, "--out", str(tmp_path / "missing" / "r.json")]) == 2
    (tmp_path / "r.json").write_text("{}")
    assert main(["search", *SMALL, "--out", str(tmp_path / "r.json")]) == 2
    err = capsys.readouterr().err
    assert "is a directory" in err and "does not exist" in err and "--force" in err
    assert not started                                # refused before the search started
    assert (tmp_path / "r.json").read_text() == "{}"  # not replaced


def test_report_validates_what_it_reads(tmp_path, capsys):
    res = search.cosearch("bert-large", None, 8, 16, "serial", refine_top=0)
    good = tmp_path / "g.json"
    res.to_json(good)
    assert main(["report", str(good)]) == 0
    d = json.loads(good.read_text())
    cases = {"interrupted": ("interrupted", "false"), "nan": None, "missing": None, "huge": None, "mfu": None,
             "chips": None, "many_chips": None}
    for name in cases:
        bad = json.loads(json.dumps(d))
        row = next(r for r in bad["rows"] if r["plan"])
        if name == "interrupted":
            bad["interrupted"] = "false"
        elif name == "nan":
            row["plan"]["tokens_per_s"] = float("nan")
        elif name == "huge":
            row["plan"]["tokens_per_s"] = 1e308
        elif name == "mfu":
            row["plan"]["mfu"] = float("nan")
        elif name == "chips":
            bad["chips"] = 10 ** 400
        elif name == "many_chips":
            bad["chips"] = 2 ** 40
        else:
            del bad["rows"]
        p = tmp_path / f"{name}.json"
        p.write_text(json.dumps(bad))
        assert main(["report", str(p)]) == 2, name
    err = capsys.readouterr().err
    assert "true or false" in err and "finite" in err and "missing field" in err
    assert "beyond any machine" in err and "plan.mfu" in err and "supported maximum" in err
    assert "an integer of 401 digits is beyond any number cosearch reads" in err
    (tmp_path / "junk.json").write_text("{not json")
    assert main(["report", str(tmp_path / "junk.json")]) == 2
    assert main(["report", str(tmp_path / "nothing.json")]) == 2
    assert "Traceback" not in capsys.readouterr().err


def test_infeasible_search_exits_nonzero_with_the_memory_needed(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert main(["search", "--model", "gpt3-175b", "--chips", "8", "--batch", "64", "--serial",
                 "--out", str(out), "--refine-top", "0"]) == 3
    err = capsys.readouterr().err
    assert "no design has a feasible plan" in err and "GiB" in err and "needs at least" in err


def test_bad_numbers_refused_at_the_edge(capsys):
    for argv in (["search", "--model", "gpt3-1.3b", "--refine-top", "-1"],
                 ["search", "--model", "gpt3-1.3b", "--chips", str(2 ** 70)],
                 ["search", "--model", "gpt3-1.3b", "--batch", "0"],
                 ["report", "x.json", "--top", "-3"]):
        with pytest.raises(SystemExit) as e:
            main(argv)
        assert e.value.code == 2
    assert main(["search", "--model", "nonesuch", "--out", os.devnull, "--force"]) == 2
    assert "unknown model" in capsys.readouterr().err


def test_ilp_gap_is_real_when_not_proven():
    import cosearch as cs
    from cosearch import graph, schedule
    layer = graph.build(cs.model_preset("gpt3-175b"), 8, 1, "bwd")
    quick = schedule.layer_time(layer, cs.TPUv4, time_limit_s=0.001, use_cache=False)
    best = schedule.layer_time(layer, cs.TPUv4, use_cache=False)
    assert best.status == "optimal"
    if quick.status != "optimal":
        # the reported gap bounds the true distance to the optimum from above
        assert quick.gap >= 1.0 - best.latency_s / quick.latency_s - 1e-9
        assert quick.gap > 0.0 or quick.latency_s == pytest.approx(best.latency_s)


def test_missing_extra_is_named_and_debug_shows_traceback(tmp_path, capsys, monkeypatch):
    res = search.cosearch("bert-large", None, 8, 16, "serial", refine_top=0)
    good = tmp_path / "g.json"
    res.to_json(good)
    monkeypatch.setitem(sys.modules, "matplotlib", None)      # as if matplotlib were not installed
    assert main(["report", str(good), "--plot", str(tmp_path / "p.png")]) == 2
    err = capsys.readouterr().err
    assert "pip install 'cosearch[plot]'" in err and "Traceback" not in err
    with pytest.raises(ImportError):
        main(["--debug", "report", str(good), "--plot", str(tmp_path / "p.png")])


def test_resume_from_a_named_file(tmp_path, capsys):
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    args = ["search", "--model", "bert-large", "--chips", "8", "--batch", "16", "--serial", "--refine-top", "0"]
    assert main([*args, "--out", str(first)]) == 0
    a = search.Results.from_json(first)
    partial = search.Results(a.model, a.chips, a.global_batch, a.rows[: len(a.rows) // 2], a.pruned,
                             a.total_designs, True, meta=a.meta)
    partial.to_json(first, overwrite=True)
    assert main([*args, "--out", str(second), "--resume", str(first)]) == 0
    b = search.Results.from_json(second)
    assert not b.interrupted and b.best.index == a.best.index
    assert sorted(r.index for r in b.rows) == sorted(r.index for r in a.rows)
    assert main([*args, "--out", str(tmp_path / "c.json"), "--resume", str(tmp_path / "none.json")]) == 2


@pytest.mark.parametrize("phase", ["ranking", "baselines"])
def test_interrupt_in_refinement_or_baselines_keeps_the_sweep(tmp_path, monkeypatch, capsys, phase):
    from cosearch import baselines
    from cosearch._interrupt import Terminated

    def boom(*a, **k):
        raise Terminated()
    if phase == "ranking":
        monkeypatch.setattr(ranking, "rank_top_ilp", boom)
    else:
        monkeypatch.setattr(baselines, "run_baselines", boom)
    out = tmp_path / "r.json"
    rc = main(["search", "--model", "bert-large", "--chips", "8", "--batch", "16", "--serial", "--out", str(out),
               "--baselines", "--refine-top", "1"])
    assert rc == 143
    d = json.loads(out.read_text())
    assert d["interrupted"] is True and len(d["rows"]) == d["total_designs"] - d["pruned"]
    assert "interrupted" in capsys.readouterr().err


def test_serial_and_workers_exclude_each_other(capsys):
    assert main(["search", *SMALL, "--serial", "--workers", "2"]) == 2
    assert "--serial and --workers exclude each other" in capsys.readouterr().err
    with pytest.raises(ValueError, match="worker processes must be >= 1"):
        search.cosearch("gpt3-1.3b", None, 64, 256, 0, refine_top=0)


def test_failed_final_save_prints_the_table_and_keeps_the_result(tmp_path, monkeypatch, capsys):
    """--out passed the up-front check, then its folder vanished: the table is still printed,
    the result goes to a fallback file named in the message, and the exit status is 4."""
    import shutil

    from cosearch import cli
    gone = tmp_path / "gone"
    gone.mkdir()
    real = search.cosearch

    def run_then_remove(*a, **k):
        res = real(*a, **k)
        shutil.rmtree(gone)
        return res
    monkeypatch.setattr(search, "cosearch", run_then_remove)
    monkeypatch.chdir(tmp_path)
    rc = main(["search", "--model", "bert-large", "--chips", "8", "--batch", "16", "--serial", "--refine-top", "0",
               "--out", str(gone / "r.json")])
    out, err = capsys.readouterr()
    assert rc == cli.EXIT_SAVE_FAILED
    assert "designs evaluated" in out and "saved" not in out
    fallback = [p for p in tmp_path.iterdir() if p.name.startswith("r.unsaved-")]
    assert len(fallback) == 1 and str(fallback[0].name) in err
    back = search.Results.from_json(fallback[0])
    assert back.best is not None and not back.interrupted


def test_search_offers_plan_options_and_names_the_untried(capsys):
    """A 64k-token sequence on 8 small chips: with ZeRO 0/1 and no flash attention nothing fits and
    the message names the options not tried; with ZeRO-3, flash attention and SP a plan fits."""
    base = ["search", "--model", "gpt3-1.3b", "--seq-len", "65536", "--chips", "8", "--batch", "8", "--serial",
            "--refine-top", "0", "--out", "r.json", "--hbm-gib", "32"]
    assert main(base) == 3
    err = capsys.readouterr().err
    assert "not tried: --zero 0,1,2,3, --flash, --sp" in err and "ZeRO-3" in err
    assert main(base[:-4] + ["--out", "r2.json", "--hbm-gib", "32", "--zero", "0,1,2,3", "--flash", "--sp"]) == 0
    out = capsys.readouterr().out
    assert "flash" in out
    assert main(base + ["--zero", "0,4", "--force"]) == 2
    assert "ZeRO stages 0-3" in capsys.readouterr().err


def test_space_inputs_are_bounded_before_any_allocation(tmp_path):
    from cosearch import hardware
    assert hardware.SearchSpace(tensor_cores=[2] * 20_000).tensor_cores == (2,)      # repeats collapse
    with pytest.raises(ValueError, match="at most 4,096"):
        hardware.SearchSpace(tensor_cores=[2] * 5_000_000)
    with pytest.raises(ValueError, match="grid holds 767,616,048 designs"):
        hardware.SearchSpace(tensor_cores=list(range(1, 4000)), vector_units=list(range(1, 4000))).grid()
    big = tmp_path / "space.json"
    big.write_text(json.dumps({"tensor_cores": [2] * 600_000}))
    with pytest.raises(ValueError, match="at most 1,048,576 bytes"):
        hardware.SearchSpace.from_json(str(big))


def test_temp_files_of_a_killed_save_are_removed_on_the_next_write(tmp_path):
    """A writer SIGKILLed mid-save leaves its temporary file; the next write of the same path
    removes it (its pid is gone), and leaves other paths' and live writers' files alone."""
    import subprocess as sp
    import sys as _sys

    from cosearch._json import dump_json
    child = sp.Popen([_sys.executable, "-c", "pass"])
    child.wait()                                            # a pid that is certainly gone now
    stale = tmp_path / f".tmp-r.json-{child.pid}-abc.json"
    other = tmp_path / f".tmp-other.json-{child.pid}-abc.json"
    live = tmp_path / f".tmp-r.json-{os.getppid()}-abc.json"
    for f in (stale, other, live):
        f.write_text("{half")
    dump_json({"a": 1}, tmp_path / "r.json")
    assert not stale.exists() and other.exists() and live.exists()
    assert json.loads((tmp_path / "r.json").read_text()) == {"a": 1}
    assert not [p for p in os.listdir(tmp_path) if p.startswith(f".tmp-r.json-{os.getpid()}")]


def test_checkpoint_interval_must_be_finite(capsys):
    assert main(["search", *SMALL, "--serial", "--out", "r.json", "--checkpoint-every", "nan"]) == 2
    assert "checkpoint_every_s must be a non-negative finite number" in capsys.readouterr().err   # 0: every chunk


def test_library_call_in_an_unguarded_script_runs_in_process(tmp_path):
    """README's library example pasted into a script without `if __name__ == "__main__":`:
    the pool would re-run the script in every worker; it runs in-process with a warning."""
    script = tmp_path / "job.py"
    script.write_text("import cosearch as cs\n"
                      "res = cs.cosearch('bert-large', None, 8, 16, executor=2, refine_top=0)\n"
                      "print('best', res.best.index)\n")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("best") == 1
    assert "without an `if __name__" in out.stderr and "running in-process" in out.stderr
    guarded = tmp_path / "guarded.py"
    guarded.write_text("import cosearch as cs\n"
                       "if __name__ == '__main__':\n"
                       "    res = cs.cosearch('bert-large', None, 8, 16, executor=2, refine_top=0)\n"
                       "    print('best', res.best.index)\n")
    out2 = subprocess.run([sys.executable, str(guarded)], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert out2.returncode == 0 and "running in-process" not in out2.stderr
    assert out2.stdout == out.stdout


def test_worker_deaths_are_named():
    from types import SimpleNamespace

    from cosearch._interrupt import worker_deaths
    pool = SimpleNamespace(_processes={1: SimpleNamespace(exitcode=-9), 2: SimpleNamespace(exitcode=None),
                                       3: SimpleNamespace(exitcode=3)})
    assert worker_deaths(pool) == "killed by SIGKILL, as the out-of-memory killer does; exited with status 3"
    assert worker_deaths(SimpleNamespace(_processes={})) == "how they ended is not known"


def _signal_now(signum):
    """Send ``signum`` to this process and give Python a few bytecodes to run its handler."""
    os.kill(os.getpid(), signum)
    for _ in range(1000):
        pass


def test_deferred_interrupts_hold_the_first_signal_and_pass_a_second():
    from cosearch._interrupt import Terminated, deferred_interrupts, terminate_as_interrupt
    with terminate_as_interrupt():
        steps = []
        with pytest.raises(Terminated):
            with deferred_interrupts() as d:
                _signal_now(signal.SIGTERM)
                steps.append("after the signal")      # not cut short
            steps.append("after the block")           # the held signal raises from the with
        assert steps == ["after the signal"] and d.held == [signal.SIGTERM]
        with pytest.raises(Terminated):
            with deferred_interrupts():
                _signal_now(signal.SIGTERM)
                _signal_now(signal.SIGTERM)            # asked twice: raised at once
                steps.append("never")
        assert steps == ["after the signal"]
        with deferred_interrupts(deliver=False) as d:
            _signal_now(signal.SIGTERM)
        assert d.held == [signal.SIGTERM]
        # the handlers are back: a signal now raises at once
        with pytest.raises(Terminated):
            _signal_now(signal.SIGTERM)
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:                                              # an ignored signal stays ignored
        with deferred_interrupts() as d:
            _signal_now(signal.SIGINT)
        assert d.held == [] and signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, old)


BERT = ["search", "--model", "bert-large", "--chips", "8", "--batch", "16", "--serial", "--refine-top", "0",
        "--checkpoint-every", "0"]


def test_signal_during_the_final_save_is_held_until_the_save_ends(tmp_path, monkeypatch, capsys):
    """SIGTERM while the finished result replaces the checkpoint journal: the save completes (plain
    JSON, the whole search, not interrupted) and the exit status is 143.  Without the hold the
    signal cut the save and left the journal (what CI once caught a real signal doing)."""
    real = search.Results.to_json

    def signal_then_save(self, *a, **k):
        _signal_now(signal.SIGTERM)
        return real(self, *a, **k)
    monkeypatch.setattr(search.Results, "to_json", signal_then_save)
    out = tmp_path / "r.json"
    assert main([*BERT, "--out", str(out)]) == 143
    d = json.loads(out.read_text())
    assert d["interrupted"] is False and len(d["rows"]) == d["total_designs"] - d["pruned"] > 0
    assert "interrupted after the search finished; the result is saved" in capsys.readouterr().err


def test_signal_between_phases_leaves_plain_json_that_resumes(tmp_path, monkeypatch, capsys):
    """A signal no phase catches (here: the moment after the sweep returns) leaves the journal
    rewritten as plain JSON marked interrupted, holding every checkpointed row; --resume ends
    where an uninterrupted search does.  A file this run never wrote is left as it was."""
    from cosearch import sweep
    from cosearch._interrupt import Terminated
    real = sweep.run_sweep

    def sweep_then_signal(*a, **k):
        real(*a, **k)
        raise Terminated()
    full = search.cosearch("bert-large", None, 8, 16, "serial", refine_top=0)
    monkeypatch.setattr(sweep, "run_sweep", sweep_then_signal)
    out = tmp_path / "r.json"
    assert main([*BERT, "--out", str(out)]) == 143
    assert "the finished part is saved in" in capsys.readouterr().err
    d = json.loads(out.read_text())          # checkpointed after every chunk: every evaluated row
    assert d["interrupted"] is True and sorted(r["index"] for r in d["rows"]) == sorted(r.index for r in full.rows)
    monkeypatch.setattr(sweep, "run_sweep", real)
    assert main([*BERT, "--out", str(out), "--resume"]) == 0
    done = search.Results.from_json(out)
    assert not done.interrupted and done.best.index == full.best.index
    capsys.readouterr()

    def signal_at_once(*a, **k):
        raise Terminated()
    monkeypatch.setattr(sweep, "run_sweep", signal_at_once)
    before = out.read_bytes()
    assert main([*BERT, "--out", str(out), "--force"]) == 143
    assert "nothing was saved yet" in capsys.readouterr().err
    assert out.read_bytes() == before
