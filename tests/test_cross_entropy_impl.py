"""The loss as each Megatron run computes it: Megatron-Core's unfused and ``native`` fused
cross-entropy (the same fp32 passes) or Transformer Engine's Triton kernel (``te``), read from
Megatron lines, Megatron-Bridge configs and the cited performance runs.

The TE pricing comes from two of Liger-Kernel's measured rows (16k and 131k logits a token); the
other two (32k and 65k) check it.  The readers' expectations are hand-written from the
frameworks' code (``language_module.py``'s ``compute_language_model_loss``, Megatron-Bridge's
``gpt_provider.py`` and ``_set_common_perf_overrides``)."""

import numpy as np
import pytest

from cosearch import cost, engine, graph, hardware, models
from cosearch.runs.megatron import parse_megatron_args
from cosearch.runs.nemo import read_megatron_bridge


def _ce_s(tokens: int, vocab: int, impl: str) -> float:
    m = models.ModelConfig("ce", 1, 1024, 8, 4096, vocab, tokens, activation="swiglu", norm="rmsnorm",
                           position="rotary", bias=False, tie_embeddings=False, dropout=False)
    total = 0.0
    for ph in ("fwd", "bwd"):
        ops = [o for o in graph.build(m, part="head", phase=ph, cross_entropy=impl).ops
               if o.name.startswith("cross_entropy")]
        total += float(cost.price(np.array([o.as_row() for o in ops]), hardware.H100)[0].sum())
    return total


def test_te_loss_predicts_the_held_out_measurements():
    """Liger-Kernel's fused cross-entropy (TE's passes: two reads of the logits and the gradient
    written in place) at 32k and 65k logits a token on an H100, 8192 tokens: 1.849 and 3.456 ms
    measured (public_cross_entropy.csv).  TE's price adds the backward's scaling pass that a
    mean loss skips, 2/3 of the forward's bytes: the forward share of the model is within 6 % of
    the measurements; the whole loss is 2.6x cheaper than Megatron-Core's native passes."""
    for vocab, ms in ((32768, 1.8492159843444824), (65536, 3.455839991569519)):
        whole = _ce_s(8192, vocab, "te")
        launch = hardware.H100.efficiency.launch_s
        forward = (whole - 2 * launch) * 0.6 + launch          # 6 of its 10 itemized bytes
        assert forward == pytest.approx(ms / 1e3, rel=0.06), vocab
    assert _ce_s(8192, 131072, "fp32") / _ce_s(8192, 131072, "te") == pytest.approx(52.0 / 34.13, rel=0.02)
    fb, fw, bb, bw = graph.CROSS_ENTROPY_TE_BYTES
    assert (fb / fw, bb / bw, (bb + bw) / (fb + fw)) == pytest.approx((2.0, 1.0, 2.0 / 3.0))


LINE = ("--tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 --micro-batch-size 1 "
        "--global-batch-size 8 --bf16")


def test_megatron_lines_read_the_loss():
    """``--cross-entropy-loss-fusion`` with ``--cross-entropy-fusion-impl te`` is TE's loss;
    native (its default) and no fusion are the fp32 passes, each said; an unknown implementation
    is refused; the implementation without the fusion is said to be ignored, as Megatron-Core
    ignores it."""
    m = models.preset("gpt3-1.3b")
    te = parse_megatron_args(LINE + " --cross-entropy-loss-fusion --cross-entropy-fusion-impl te", m, 8)
    assert te.engine.cross_entropy == "te" and te.engine.name.endswith("-te-loss")
    assert any("Transformer Engine's parallel cross-entropy" in a for a in te.assumed)
    native = parse_megatron_args(LINE + " --cross-entropy-loss-fusion", m, 8)
    assert native.engine.cross_entropy == "fp32" and any("fused cross-entropy (native)" in a for a in native.assumed)
    plain = parse_megatron_args(LINE + " --cross-entropy-fusion-impl te", m, 8)
    assert plain.engine.cross_entropy == "fp32" and any("without --cross-entropy-loss-fusion" in a
                                                        for a in plain.assumed)
    with pytest.raises(ValueError, match="native or te"):
        parse_megatron_args(LINE + " --cross-entropy-loss-fusion --cross-entropy-fusion-impl liger", m, 8)
    with pytest.raises(ValueError, match="Megatron-Core's are"):
        engine.with_cross_entropy_fusion(engine.MEGATRON_CORE, "liger")


@pytest.mark.parametrize("model_keys,want", [({}, "fp32"), ({"cross_entropy_fusion_impl": "te"}, "te"),
                                             ({"cross_entropy_loss_fusion": False, "cross_entropy_fusion_impl": "te"},
                                              "fp32"),
                                             ({"cross_entropy_loss_fusion": True}, "fp32")])
def test_bridge_configs_read_the_loss(model_keys, want):
    """Megatron-Bridge's GPT provider turns ``cross_entropy_loss_fusion`` on by default (native);
    ``te`` is read where the config names it, and ignored with the fusion off."""
    cfg = {"model": {"tensor_model_parallel_size": 1, **model_keys},
           "train": {"micro_batch_size": 1, "global_batch_size": 8}}
    got = read_megatron_bridge(cfg, model=models.preset("gpt3-1.3b"))
    assert got.engine.cross_entropy == want


def test_cited_bridge_runs_take_their_performance_scripts_loss():
    """Every cited Megatron-Bridge commit's ``_set_common_perf_overrides`` sets
    ``cross_entropy_fusion_impl = "te"`` (the shipped table), so a dense row citing a workload
    config and an MoE row citing one price TE's loss; DeepSeek-V4-Flash's perf recipe passes
    ``cross_entropy_impl="native"`` to ``_benchmark_common`` and keeps the fp32 passes."""
    from cosearch.runs import rows
    from tests.test_runs_rows import QWEN3_ROW
    dense = {"src": "NVIDIA-NeMo/Megatron-Bridge:docs/performance-summary-archive.md@067f987df0  "
                    "(config LLAMA31_405B_PRETRAIN_CONFIG_GB200_FP8_CS_V2 @ 21d102f5ec)"}
    impl, at = rows.megatron_bridge_cross_entropy(dense)
    assert impl == "te" and at.startswith("scripts/performance/utils/overrides.py:")
    cited = ["etp/sp/recompute/cuda-graph/dispatcher from NVIDIA-NeMo/Megatron-Bridge:src/megatron/bridge/"
             "perf_recipes/qwen/gb200/qwen3_moe.py@4ab94dfad (qwen3_30b_a3b_pretrain_8gpu_gb200_fp8mx_config)"]
    plain = rows.describe_row(QWEN3_ROW)                                      # cites nothing
    assert plain.engine.cross_entropy == "fp32" and any("cites no Megatron-Bridge commit" in a for a in plain.assumed)
    d = rows.describe_row(dict(QWEN3_ROW, assumed=cited))
    assert d.engine.cross_entropy == "te" and any("the loss: Transformer Engine's" in a for a in d.assumed)
    v4 = {"assumed": ["MoE dispatcher from NVIDIA-NeMo/Megatron-Bridge:src/megatron/bridge/perf_recipes/deepseek/"
                      "gb200/deepseek_v4.py@4ab94dfad (deepseek_v4_flash_pretrain_128gpu_gb200_fp8mx_config)"]}
    assert rows.megatron_bridge_cross_entropy(v4)[0] == "native"
    assert rows.megatron_bridge_cross_entropy({"src": "a paper"}) is None


_OVERRIDES = '''
def _set_common_perf_overrides(recipe):
    recipe.train.train_iters = 50
    if hasattr(recipe.model, "cross_entropy_fusion_impl"):
        recipe.model.cross_entropy_fusion_impl = "te"
'''
_PROVIDER = '''
class GPTModelProvider:
    fp16: bool = False
    cross_entropy_loss_fusion: bool = True
'''
_BENCH_COMMON = '''
def _benchmark_common(cfg, cross_entropy_impl: str = "te"):
    cfg.model.cross_entropy_fusion_impl = cross_entropy_impl
'''
_CE_RECIPE = '''
from megatron.bridge.perf_recipes._common import _benchmark_common

def default_loss():
    cfg = make()
    _benchmark_common(cfg)
    return cfg

def native_loss():
    cfg = make()
    _benchmark_common(cfg, cross_entropy_impl="native")
    return cfg

def fusion_off():
    cfg = make()
    _benchmark_common(cfg)
    cfg.model.cross_entropy_loss_fusion = False
    return cfg
'''
CE_FILES = {"scripts/performance/utils/overrides.py": _OVERRIDES,
            "src/megatron/bridge/models/gpt_provider.py": _PROVIDER,
            "src/megatron/bridge/perf_recipes/_common.py": _BENCH_COMMON,
            "src/megatron/bridge/perf_recipes/fam/chip/loss.py": _CE_RECIPE}


@pytest.mark.parametrize("name,want,at", [("default_loss", "te", "_common.py:2 (its default)"),
                                          ("native_loss", "native", "loss.py:11"),
                                          ("fusion_off", "off", "loss.py:17")])
def test_script_reads_a_recipes_loss(name, want, at):
    """The table script follows ``_benchmark_common``'s parameter (the literal passed, else its
    default) and a later ``cross_entropy_loss_fusion = False``, line by line."""
    from tests.test_runs_rows import _script
    got = _script().config_settings(lambda c, p: CE_FILES.get(p),
                                    "src/megatron/bridge/perf_recipes/fam/chip/loss.py", "c0", name)
    assert got["cross_entropy"] == want and got["cross_entropy_at"].endswith(at)


def test_script_reads_a_commits_loss():
    """A workload config's loss is its commit's: the common overrides' literal, over the
    provider's fusion default; with the fusion off by default and no override, off; with no
    override, the native implementation."""
    s = __import__("tests.test_runs_rows", fromlist=["_script"])._script()
    got = s.commit_settings(lambda c, p: CE_FILES.get(p), "c0")
    assert got["cross_entropy"] == "te" and got["cross_entropy_at"].startswith("scripts/performance/utils/overrides.py:5")
    off = dict(CE_FILES, **{"src/megatron/bridge/models/gpt_provider.py": _PROVIDER.replace("True", "False"),
                            "scripts/performance/utils/overrides.py": "def _set_common_perf_overrides(r):\n    pass\n"})
    assert s.commit_settings(lambda c, p: off.get(p), "c0")["cross_entropy"] == "off"
    bare = dict(CE_FILES, **{"scripts/performance/utils/overrides.py": "def _set_common_perf_overrides(r):\n    pass\n"})
    assert s.commit_settings(lambda c, p: bare.get(p), "c0")["cross_entropy"] == "native"


def test_a_csvs_cross_entropy_column_and_the_cli_flag(tmp_path, capsys):
    """``cosearch runs check`` CSVs take ``cross_entropy`` (off / native / te) and price the run as
    ``evaluate()`` with that engine; an unknown loss refuses the row by name.  ``cosearch plan
    --cross-entropy te`` is faster than ``off`` on the same plan by the loss's difference."""
    import json

    from cosearch import cluster
    from cosearch.cli import main
    from cosearch.plan import PlanSpec, evaluate
    from cosearch.runs import check_runs
    header = "id,group,model,cluster,chips,tp,pp,mb,batch,measured_tok_s_per_chip,zero,cross_entropy"
    p = tmp_path / "runs.csv"
    p.write_text(header + "\n" + "\n".join(["te,g,llama3-8b,dgx-h100,8,1,1,1,64,9000,1,te",
                                             "native,g,llama3-8b,dgx-h100,8,1,1,1,64,9000,1,native",
                                             "bad,g,llama3-8b,dgx-h100,8,1,1,1,64,9000,1,liger"]) + "\n")
    res = check_runs(p)
    by_id = {r.id: r for r in res.runs}
    m = models.preset("llama3-8b")
    for rid, impl in (("te", "te"), ("native", "native")):
        eng = engine.with_cross_entropy_fusion("megatron-core", impl)
        want = evaluate(m, "H100", cluster.preset("dgx-h100", 1), PlanSpec(8, 1, 1, 1, zero=1, flash_attention=True), 64,
                        engine=eng).tokens_per_s / 8
        assert by_id[rid].predicted_tok_s_per_chip == pytest.approx(want, rel=1e-9)
    assert by_id["te"].predicted_tok_s_per_chip > by_id["native"].predicted_tok_s_per_chip
    assert "cross_entropy 'liger'" in dict(res.refused)["bad"]
    args = ["plan", "--model", "llama3-8b", "--cluster", "dgx-h100", "--nodes", "1", "--batch", "64", "--dp", "8",
            "--tp", "1", "--pp", "1", "--mb", "1", "--zero", "1", "--flash", "--recompute", "none", "--engine",
            "megatron-core",
            "--json"]
    steps = {}
    for impl in ("off", "te"):
        assert main(args + ["--cross-entropy", impl]) == 0
        steps[impl] = json.loads(capsys.readouterr().out)["plans"][0]["step_time_s"]
    assert steps["te"] < steps["off"]
