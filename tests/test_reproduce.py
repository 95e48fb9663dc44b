import pytest

from cosearch import reproduce, search


def test_phaze_rows_saved_and_skipped_on_rerun(tmp_path, monkeypatch):
    out = tmp_path / "phaze.json"
    lines = []
    rows = reproduce.phaze(["opt-350m"], [32], chips=64, global_batch=128, space="default", refine_top=1,
                           out=out, progress=False, executor="serial", echo=lines.append)
    assert len(rows) == 1 and out.exists() and len(lines) == 1
    r = rows[0]
    assert r.model == "opt-350m" and r.hbm_gib == 32 and r.tokens_per_s > 0
    # the same-HBM TPUv4 is in the default space: the co-search can at best tie it
    assert r.gain_over_tpuv4 >= 1 - 1e-9 and r.gain_over_spotlight >= 1 - 1e-9
    assert r.gain_over_megatron == 0.0 and "Megatron-fixed" in r.note   # PHAZE's dp 85 does not scale to 64 chips
    assert reproduce.load(out) == rows

    def boom(*a, **k):
        raise AssertionError("a finished row was run again")
    monkeypatch.setattr(search, "cosearch", boom)
    again = reproduce.phaze(["opt-350m"], [32], chips=64, global_batch=128, space="default", refine_top=1,
                            out=out, progress=False, echo=None)
    assert again == rows
    assert "opt-350m" in reproduce.table(again)
    # a row made on 64 chips is not a row for 32: that run happens, and both stay in the file
    calls = []

    def fake(model, space, chips, *a, **k):
        calls.append(chips)
        raise KeyboardInterrupt
    monkeypatch.setattr(search, "cosearch", fake)
    with pytest.raises(KeyboardInterrupt):
        reproduce.phaze(["opt-350m"], [32], chips=32, global_batch=128, space="default", refine_top=1, out=out,
                        progress=False, echo=None)
    assert calls == [32] and reproduce.load(out) == rows


def test_reproduce_exits_143_on_sigterm(tmp_path, monkeypatch, capsys):
    from cosearch import cli
    from cosearch._interrupt import Terminated

    def term(*a, **k):
        raise Terminated()
    monkeypatch.setattr(reproduce, "phaze", term)
    assert cli.main(["reproduce", "phaze", "--out", str(tmp_path / "p.json")]) == 143
    assert "interrupted" in capsys.readouterr().err


def test_bad_space():
    with pytest.raises(ValueError, match="space"):
        reproduce.phaze(["opt-350m"], [32], space="mine", progress=False)
    # `--models ,` printed the header and saved 0 rows
    with pytest.raises(ValueError, match="at least one model and one HBM scenario"):
        reproduce.phaze([], [32], progress=False)


def test_each_space_name_builds_its_space(monkeypatch):
    """The reproduction's space names: PHAZE's space under cosearch's area model (45,187 designs
    at 32 GiB), under PHAZE's own (its 29,360), without the on-chip bound, and the default grid."""
    from cosearch import hardware
    seen = {}

    def fake(model, space, chips, *a, **k):
        seen[space.name] = (len(space.arrays()), space.area_power.name, space.glb_words_per_cycle)
        raise KeyboardInterrupt
    monkeypatch.setattr(search, "cosearch", fake)
    for name in reproduce.SPACES:
        with pytest.raises(KeyboardInterrupt):
            reproduce.phaze(["opt-350m"], [32], space=name, progress=False, echo=None)
    assert seen["phaze-hbm32"] == (45_187, "cosearch", hardware.PHAZE_GLB_WORDS_PER_CYCLE)
    assert seen["phaze-hbm32-phaze-area"] == (29_360, "phaze", hardware.PHAZE_GLB_WORDS_PER_CYCLE)
    assert seen["phaze-hbm32-no-onchip"] == (45_187, "cosearch", 0.0)
    assert seen["default-hbm32"][1] == "cosearch" and len(seen) == 4
    assert sum(v[2] == 0.0 for v in seen.values()) == 2     # phaze-no-onchip and the default grid


def test_phaze_checks_its_arguments_before_any_run(monkeypatch):
    """One model or HBM size may be given bare (a model's name was read as its letters, a size
    raised a TypeError); a size that is no number, a chip count that is no integer and an echo
    that is no function are refused before the first co-search."""
    seen = []

    def fake(m, sp, chips, gb, *a, **k):                 # no search: the arguments are the point
        seen.append((m.name, chips, gb))
        raise KeyboardInterrupt
    monkeypatch.setattr(search, "cosearch", fake)
    with pytest.raises(KeyboardInterrupt):
        reproduce.phaze("opt-350m", 32, chips=64, global_batch=128, space="default", progress=False)
    assert seen == [("opt-350m", 64, 128)]
    for kw, message in ((dict(hbm_gibs=["x"]), "hbm_gibs must be a positive number, got 'x'"),
                        (dict(chips="64"), "chips must be a positive integer, got '64'"),
                        (dict(echo="print"), "echo must be a function taking a line, or None")):
        args = {"hbm_gibs": [32], **kw}
        with pytest.raises(ValueError, match=message):
            reproduce.phaze(["opt-350m"], space="default", progress=False, **args)
    assert len(seen) == 1
