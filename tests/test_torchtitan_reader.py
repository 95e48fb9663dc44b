"""torchtitan's pipeline split and its saved config (torchtitan 0.3.0), read as torchtitan builds them.

The split is checked against hand-worked cases and a second formulation (the effective layers as
a row of slots cut into contiguous stages); the saved configs are files torchtitan 0.3.0 wrote
itself (tests/data/runs/PROVENANCE.md)."""

import copy
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from cosearch.runs import detect_format, read_config, read_torchtitan
from cosearch.runs.torchtitan import pipeline_stage_layers, stage_layers_of_parts

DATA = Path(__file__).parent / "data" / "runs"
LLAMA = DATA / "torchtitan_llama3_8b_saved.json"
QWEN = DATA / "torchtitan_qwen3_30b_a3b_deepep_saved.json"
GPT_OSS = DATA / "torchtitan_gpt_oss_20b_saved.json"
DSV2_LITE = DATA / "torchtitan_deepseek_v3_16b_saved.json"


def _slots(L, pp, stages, iw, ow):
    """The split as a row of slots: iw embedding slots, the L layers, ow output slots, cut into
    ``stages`` contiguous runs (the first ``remainder`` one longer); a rank's layers are the
    layer slots of its runs r, r + pp, ..."""
    row = ["E"] * iw + ["L"] * L + ["O"] * ow
    base, extra = divmod(len(row), stages)
    runs, at = [], 0
    for s in range(stages):
        n = base + (1 if s < extra else 0)
        runs.append(row[at:at + n].count("L"))
        at += n
    return stages // pp, tuple(sum(runs[r::pp]) for r in range(pp))


def test_split_hand_worked():
    # torchtitan's own docstring example: 3 layers, embedding and output weighted 2, two stages:
    # 7 slots as 4 + 3, so 4 - 2 = 2 layers and 3 - 2 = 1
    assert pipeline_stage_layers(3, 2, "1F1B", None, 2, 2) == (1, (2, 1))
    # Llama 3 8B over 4 ranks: 32 + 2 = 34 slots as 9, 9, 8, 8: 8 (+ embedding), 9, 8, 7 (+ output)
    assert pipeline_stage_layers(32, 4) == (1, (8, 9, 8, 7))
    # Interleaved1F1B, two stages a rank by default: 34 slots as 5, 5, 4 x 6: stage layers 4, 5, 4,
    # 4, 4, 4, 4, 3; rank r holds stages r and r + 4
    assert pipeline_stage_layers(32, 4, "Interleaved1F1B") == (2, (8, 9, 8, 7))
    # Llama 3.1 405B, 126 layers, 4 a stage: ceil(128 / 4) = 32 stages, 4 a rank; the first and
    # last stage give a slot to the embedding and the output
    assert pipeline_stage_layers(126, 8, "interleaved1f1b", 4) == (4, (15,) + (16,) * 6 + (15,))
    # no weights: an even split
    assert pipeline_stage_layers(32, 4, "GPipe", None, 0, 0) == (1, (8, 8, 8, 8))


def test_split_against_the_slot_formulation():
    n = 0
    for L in (2, 3, 5, 7, 16, 31, 32, 61, 80, 126):
        for pp in (2, 3, 4, 8):
            for iw, ow in ((0, 0), (1, 1), (2, 1), (0, 2)):
                for sched, per in (("1F1B", None), ("Interleaved1F1B", None), ("LoopedBFS", 2), ("1F1B", -1)):
                    stages = pp * (2 if sched != "1F1B" else 1)
                    if per == -1:
                        per = -(-(L + iw + ow) // pp)             # one stage a rank, given explicitly
                    if per is not None:
                        stages = -(-(L + iw + ow) // per)
                    try:
                        got = pipeline_stage_layers(L, pp, sched, per, iw, ow)
                    except ValueError:
                        continue
                    assert got == _slots(L, pp, stages, iw, ow), (L, pp, iw, ow, sched, per)
                    assert sum(got[1]) == L
                    n += 1
    assert n > 150


@pytest.mark.parametrize("args, match", [
    ((32, 4, "Interleaved1F1B", 5), "not a multiple of pipeline_parallel_degree"),   # ceil(34 / 5) = 7 stages
    ((30, 4, "1F1B", 4), "one stage a rank"),                  # 32 / 4 = 8 stages, two a rank
    ((32, 4, "Interleaved1F1B", 9), "at least two stages a rank"),
    ((32, 4, "ZBVZeroBubble"), "not modelled"),
    ((32, 4, "Interleaved1F1B", None, 5, 1), "weight above"),
    ((2, 2, "1F1B", None, 2, 0), "without transformer layers"),     # 4 slots as 2, 2: the embedding takes both of the first
])
def test_split_refusals(args, match):
    with pytest.raises(ValueError, match=match):
        pipeline_stage_layers(*args)


def test_model_parts_as_given():
    parts = [["tok_embeddings", "layers.0", "layers.1"], ["layers.2", "layers.3", "layers.4"], ["layers.5"],
             ["layers.6", "layers.7", "norm", "lm_head"]]
    assert stage_layers_of_parts(parts, 2, "Interleaved1F1B", 8) == (2, (2 + 1, 3 + 2))    # ranks: parts 0, 2 and 1, 3
    assert stage_layers_of_parts(parts, 4, "1F1B", 8) == (1, (2, 3, 1, 2))
    with pytest.raises(ValueError, match="every transformer layer once"):
        stage_layers_of_parts(parts[:3], 3, "1F1B", 8)
    with pytest.raises(ValueError, match="every transformer layer once"):
        stage_layers_of_parts([["layers.0", "layers.2"], ["layers.1", "layers.2"]], 2, "1F1B", None)


def test_saved_llama3_8b_read_as_torchtitan_builds_it():
    """torchtitan's llama3_8b with tp 2, pp 2 and Interleaved1F1B, as its saved config: SelectiveAC
    (per-op), compile off (eager layers), pp 2 x two stages a rank: 34 slots as 9, 9, 8, 8 -> stage
    layers 8, 9, 8, 7, rank 0 holding stages 0 and 2 (16 layers), rank 1 stages 1 and 3 (16)."""
    assert detect_format(LLAMA) == "torchtitan"
    rc = read_config(LLAMA, ["model.converters=none"])
    d = rc.resolve(16)
    s = d.spec
    assert (s.dp, s.tp, s.pp, s.virtual_stages, s.stage_layers) == (4, 2, 2, 2, (16, 16))
    # FSDP under pipeline stages: ZeRO 2 (fsdp_zero_stage)
    assert (s.microbatch, s.recompute, s.sequence_parallel, s.zero, s.precision) == (1, "selective", True, 2, "bf16")
    assert d.global_batch == 4 * 4 and d.model.name == "llama3-8b" and d.model.seq_len == 8192
    assert d.engine.name == "fsdp-eager-loss8" and d.engine.loss_chunks == 8       # ChunkedLossWrapper, 8 chunks
    # 0.3's FusedQKVLinear (qkv_linear.wqkv): one matmul for q, k, v in the per-op policy's count
    assert d.engine.selective_recompute == "every-other-matmul-fused-qkv"
    assert any("fused wqkv" in a for a in rc.assumed)
    assert any("ChunkedLossWrapper" in a for a in rc.assumed)
    assert "profiler.enable_profiling" in rc.neutral and "lr_scheduler.warmup_steps" in rc.neutral
    fp8 = read_config(LLAMA, ["model.converters=float8"]).resolve(16)
    assert fp8.spec.precision == "fp8"


def test_saved_config_refusals():
    base = json.loads(LLAMA.read_text())
    # the converters are not in the saved file: FP8 and bf16 save the same JSON
    with pytest.raises(ValueError, match="model.converters=float8, mx or none"):
        read_config(LLAMA)

    def refused(change, match):
        d = copy.deepcopy(base)
        change(d)
        with pytest.raises(ValueError, match=match):
            read_torchtitan(d, ["model.converters=none"])

    refused(lambda d: d["model_spec"]["model"]["layers"][7]["feed_forward"]["w1"].update(out_features=11008),
            r"layers\[7\] feed_forward hidden 11008 \(the preset's 14336\)")
    refused(lambda d: d["model_spec"]["model"]["layers"].pop(), r"layers 31 \(the preset's 32\)")
    refused(lambda d: d["activation_checkpoint"].update(memory_budget=0.5), "MemoryBudgetAC")
    refused(lambda d: d["training"].update(dtype="bfloat16"), "training.dtype")
    refused(lambda d: d["debug"].update(batch_invariant=True), "batch-invariant")
    refused(lambda d: d["parallelism"].update(context_parallel_degree=2, context_parallel_load_balancer=None),
            "unbalanced")
    refused(lambda d: d["parallelism"].update(pipeline_parallel_schedule="DualPipeV"), "not modelled")
    refused(lambda d: d["parallelism"].update(brand_new_switch=True), "parallelism.brand_new_switch")
    # the other policies: none and FullAC
    d = copy.deepcopy(base)
    d["activation_checkpoint"] = None
    assert read_torchtitan(d, ["model.converters=none"]).resolve(16).spec.recompute == "none"
    d["activation_checkpoint"] = {"preserve_rng_state": True, "determinism_check": "default", "debug": False}
    assert read_torchtitan(d, ["model.converters=none"]).resolve(16).spec.recompute == "full"
    # sequence parallelism off, and async TP read from its new place under compile
    d["parallelism"]["enable_sequence_parallel"] = False
    assert read_torchtitan(d, ["model.converters=none"]).resolve(16).spec.sequence_parallel is False


def test_saved_qwen3_deepep():
    """qwen3_30b_a3b with the DeepEP dispatcher and ep 8: FullAC, the flex dispatcher with DeepEP's
    kernels (known by its config's ``cudagraphable`` field), the preset's experts checked; its
    dispatchers made HybridEP's (``non_blocking_capacity_factor``): the flex dispatcher with
    HybridEP's kernels on 16 SMs, blocking or at capacity 1, a smaller capacity refused."""
    rc = read_config(QWEN, ["model.converters=none"])
    d = rc.resolve(64)
    assert (d.spec.dp, d.spec.expert_parallel, d.spec.recompute) == (64, 8, "full")
    assert d.engine.moe_dispatcher == "flex" and d.engine.moe_flex_backend == "deepep"
    assert d.model.name == "qwen3-30b-a3b" and d.model.seq_len == 4096
    base = json.loads(QWEN.read_text())
    for layer in base["model_spec"]["model"]["layers"]:
        td = layer["moe"]["routed_experts"]["token_dispatcher"]
        td.clear()
        td.update(num_experts=128, top_k=8, non_blocking_capacity_factor=None, pad_multiple=None, hidden_dim=2048,
                  num_max_tokens_per_rank=None)
    # HybridEP: the flex dispatcher with its kernels on torchtitan's 16 SMs, blocking
    rc = read_torchtitan(base, ["model.converters=none"])
    d = rc.resolve(64)
    assert (d.engine.moe_dispatcher, d.engine.moe_flex_backend, d.engine.moe_comm_sms) == ("flex", "hybridep", 16)
    assert any("blocking (it synchronizes the stream" in a for a in rc.assumed)

    def dispatchers(**fields):
        out = copy.deepcopy(base)
        for layer in out["model_spec"]["model"]["layers"]:
            layer["moe"]["routed_experts"]["token_dispatcher"].update(fields)
        return out
    rc = read_torchtitan(dispatchers(non_blocking_capacity_factor=1.0, pad_multiple=32), ["model.converters=mx"])
    assert any("capacity factor 1.0" in a and "multiple of 32" in a for a in rc.assumed)
    assert rc.resolve(64).engine.expert_precision == "plan"       # padded: the grouped experts converted
    with pytest.raises(ValueError, match="drops the tokens past that capacity"):
        read_torchtitan(dispatchers(non_blocking_capacity_factor=0.8), ["model.converters=none"])
    with pytest.raises(ValueError, match="pad_multiple must be a positive number"):
        read_torchtitan(dispatchers(pad_multiple=[16]), ["model.converters=float8"])
    with pytest.raises(ValueError, match=r"must be in \(0, 1\]"):
        read_torchtitan(dispatchers(non_blocking_capacity_factor=1.5), ["model.converters=none"])
    mixed = dispatchers(non_blocking_capacity_factor=1.0)
    mixed["model_spec"]["model"]["layers"][5]["moe"]["routed_experts"]["token_dispatcher"]["pad_multiple"] = 16
    with pytest.raises(ValueError, match="HybridEP dispatchers differ"):
        read_torchtitan(mixed, ["model.converters=none"])
    # without expert parallelism the tokens stay local: HybridEP's fields change nothing
    local = read_torchtitan(base, ["model.converters=none", "parallelism.expert_parallel_degree=1"]).resolve(64)
    assert local.engine.moe_dispatcher == "gather-tokens" and local.spec.expert_parallel == 1
    # MinimalAsyncEP stays refused
    minimal = copy.deepcopy(base)
    for layer in minimal["model_spec"]["model"]["layers"]:
        layer["moe"]["routed_experts"]["token_dispatcher"] = {"num_experts": 128, "top_k": 8, "dtype": "bfloat16",
                                                                "device": "cuda", "num_max_tokens_per_rank": None}
    with pytest.raises(ValueError, match="'minimal_async_ep' is not modelled"):
        read_torchtitan(minimal, ["model.converters=none"])
    base["model_spec"]["model"]["layers"][3]["moe"]["router"]["top_k"] = 4
    with pytest.raises(ValueError, match=r"layers\[3\] top_k 4"):
        read_torchtitan(base, ["model.converters=none"])


def test_saved_gpt_oss_20b_read_as_torchtitan_runs_it():
    """gpt_oss_20b with ep 8 (compile off): the gpt-oss-20b preset, its sliding windows (every even
    layer, 128 tokens, the varlen kernel's (127, 0)) and clamped experts checked; the experts'
    biases and clamped SwiGLU priced as GptOssGroupedExperts runs them eagerly, fused once the model
    is compiled; the attention sinks said."""
    rc = read_config(GPT_OSS, ["model.converters=none"])
    d = rc.resolve(8)
    assert d.model.name == "gpt-oss-20b" and d.model.seq_len == 8192
    assert (d.spec.dp, d.spec.expert_parallel, d.spec.recompute, d.spec.zero) == (8, 8, "full", 3)
    assert d.engine.expert_elementwise == "torchtitan" and d.engine.elementwise == "eager"
    assert any("GptOssGroupedExperts runs them, op by op" in a for a in rc.assumed)
    assert any("attention sinks" in a for a in rc.assumed)
    # a live config's to_dict keeps the varlen window a tuple
    live = json.loads(GPT_OSS.read_text())
    for layer in live["model_spec"]["model"]["layers"]:
        inner = layer["attention"]["inner_attention"]
        inner["window_size"] = tuple(inner["window_size"])
    assert read_torchtitan(live, ["model.converters=none"]).resolve(8).model.name == "gpt-oss-20b"
    compiled = read_config(GPT_OSS, ["model.converters=none", "compile.enable=true"]).resolve(8)
    assert compiled.engine.expert_elementwise == "fused" and compiled.engine.elementwise == "fused"
    base = json.loads(GPT_OSS.read_text())

    def refused(change, match):
        d = copy.deepcopy(base)
        change(d["model_spec"]["model"]["layers"])
        with pytest.raises(ValueError, match=match):
            read_torchtitan(d, ["model.converters=none"])

    refused(lambda layers: layers[4]["attention"].update(sliding_window_size=256),
            r"layers\[4\] sliding_window_size 256 \(the preset's 128\)")
    refused(lambda layers: layers[5]["attention"].update(sliding_window_size=128),
            r"sliding-window layers 13 \(the preset's 12\)")
    refused(lambda layers: layers[2]["attention"]["inner_attention"].update(window_size=[63, 0]),
            r"layers\[2\] inner_attention.window_size \[63, 0\] \(a 64-token window")
    refused(lambda layers: layers[2]["attention"]["inner_attention"].update(window_size=[[127], 0]),
            r"window_size must be \[left, right\] token counts")
    refused(lambda layers: layers[0]["moe"]["routed_experts"]["inner_experts"].update(swiglu_limit=10.0),
            r"layers\[0\] swiglu_limit 10.0 \(the preset's 7.0\)")
    refused(lambda layers: layers[1]["moe"].update(num_experts=64), r"layers\[1\] num_experts 64")


def test_saved_deepseek_v3_16b_is_deepseek_v2_lite():
    """torchtitan's deepseek_v3 16B flavor has DeepSeek-V2-Lite's sizes (MLA without a query LoRA,
    64 experts top-6 + 2 shared, the first layer dense): read as that preset, the tree checked;
    its registry config compiles the loss only, so the layers run eager and the router in FP32."""
    rc = read_config(DSV2_LITE, ["model.converters=none"])
    d = rc.resolve(64)
    assert d.model.name == "deepseek-v2-lite" and d.model.mla == (0, 512, 64) and d.model.seq_len == 4096
    assert (d.spec.expert_parallel, d.spec.dp) == (8, 64)
    assert d.engine.elementwise == "eager" and d.engine.router_dtype == "fp32"
    assert any("compile.components without model" in a for a in rc.assumed)
    base = json.loads(DSV2_LITE.read_text())
    base["model_spec"]["model"]["layers"][4]["attention"]["q_lora_rank"] = 1536
    with pytest.raises(ValueError, match=r"layers\[4\] MLA .* \(1536, 512, 64\) \(the preset's \(0, 512, 64\)\)"):
        read_torchtitan(base, ["model.converters=none"])


def test_deepseek_v2_presets_against_their_model_cards():
    """DeepSeek-V2: 236B total, 21B active; DeepSeek-V2-Lite: 15.7B and 2.4B (the cards count the
    active parameters without the output embedding)."""
    from cosearch import models
    for name, total, active in (("deepseek-v2", 236.0, 21.0), ("deepseek-v2-lite", 15.7, 2.4)):
        m = models.preset(name)
        assert m.num_params() / 1e9 == pytest.approx(total, rel=0.005)
        assert (m.num_params(active=True) - m.vocab * m.hidden) / 1e9 == pytest.approx(active, rel=0.03)


# A live Trainer.Config (a registry function's result) keeps the converters its saved form drops:
# stand-ins with torchtitan's class names and fields, the layers' Float8 config carrying torchao's
# scaling as torchtitan's Float8Linear.Config does (_torchao_config.cast_config_input).
@dataclass
class _Cast:
    scaling_granularity: str = "ScalingGranularity.AXISWISE"


@dataclass
class _TorchaoConfig:
    cast_config_input: _Cast = field(default_factory=_Cast)


class Float8Linear:
    @dataclass
    class Config:
        in_features: int
        out_features: int
        _torchao_config: Any = None


@dataclass
class _Model:
    layers: list


@dataclass
class _Spec:
    model: _Model


class _Trainer:
    def __init__(self, saved: dict, model: _Model):
        self._saved, self.model_spec = saved, _Spec(model)

    def to_dict(self):
        return self._saved


def _grouped_experts_class():
    # torchtitan 0.3 builds its Float8 grouped-experts class inside a function
    # (components/quantization/float8.py: _get_float8_grouped_experts_cls)
    class Float8GroupedExperts:
        @dataclass
        class Config:
            dim: int = 2048
    return Float8GroupedExperts


def test_live_moe_config_finds_the_grouped_experts_converter():
    """A live MoE config: the Linear converter alone leaves the grouped experts bf16; with the
    grouped-experts converter's config class on the experts they run in FP8 too."""
    saved = json.loads(QWEN.read_text())
    lin = Float8Linear.Config(2048, 4096, _TorchaoConfig())
    grouped = _grouped_experts_class().Config()
    assert "<locals>.Float8GroupedExperts.Config" in type(grouped).__qualname__
    only_linear = read_torchtitan(_Trainer(saved, _Model([{"attention": [lin]}]))).resolve(64)
    assert only_linear.spec.precision == "fp8" and only_linear.engine.expert_precision == "bf16"
    both = read_torchtitan(_Trainer(saved, _Model([{"attention": [lin], "moe": [grouped]}]))).resolve(64)
    assert both.spec.precision == "fp8" and both.engine.expert_precision == "plan"
    with pytest.raises(ValueError, match="Linear modules stay bf16"):
        read_torchtitan(_Trainer(saved, _Model([{"moe": [grouped]}])))


def test_live_config_finds_the_converters():
    saved = json.loads(LLAMA.read_text())
    plain = _Trainer(saved, _Model([{"w1": object()}]))
    assert read_torchtitan(plain).resolve(16).spec.precision == "bf16"
    lin = Float8Linear.Config(4096, 14336, _TorchaoConfig())
    rc = read_torchtitan(_Trainer(saved, _Model([{"feed_forward": [lin]}])))
    assert rc.resolve(16).spec.precision == "fp8"
    assert any("recipe_name 'rowwise'" in a for a in rc.assumed)


def test_toml_pipeline_split_as_torchtitan_splits_it():
    """The train.toml reader splits the stages as torchtitan does (it priced an even split): the 70B
    preset's 80 layers over pp 4: 82 slots as 21, 21, 20, 20 -> 20, 21, 20, 19; the split priced by
    evaluate on that split (its slowest stage, 21 layers, sets the step)."""
    from cosearch import cluster, hardware
    from cosearch.plan import evaluate
    toml = DATA / "torchtitan_llama3_70b.toml"
    rc = read_config(toml, ["parallelism.pipeline_parallel_degree=4", "parallelism.tensor_parallel_degree=4",
                            "parallelism.pipeline_parallel_microbatch_size=2"])
    d = rc.resolve(64)
    assert (d.spec.pp, d.spec.virtual_stages, d.spec.stage_layers, d.spec.microbatch) == (4, 1, (20, 21, 20, 19), 2)
    p = evaluate(d.model, hardware.H100, cluster.dgx_h100(8), d.spec, d.global_batch, engine=d.engine)
    even = evaluate(d.model, hardware.H100, cluster.dgx_h100(8), d.spec.with_(stage_layers=(20, 20, 20, 20)),
                    d.global_batch, engine=d.engine)
    assert p.step_time_s > even.step_time_s
    assert p.critical_stage == 1
    parts = [[f"layers.{i}" for i in range(a, b)] for a, b in ((0, 10), (10, 40), (40, 70), (70, 80))]
    d2 = read_config(toml, ["parallelism.pipeline_parallel_degree=4", f"parallelism.module_fqns_per_model_part={parts}",
                            "parallelism.pipeline_parallel_microbatch_size=2"]).resolve(64)
    assert d2.spec.stage_layers == (10, 30, 30, 10)
    with pytest.raises(ValueError, match="#1416"):
        read_config(toml, ["parallelism.pipeline_parallel_degree=4", "parallelism.pipeline_parallel_split_points=[layers.20]"])
    with pytest.raises(ValueError, match="not a multiple of pipeline_parallel_microbatch_size"):
        read_config(toml, ["parallelism.pipeline_parallel_degree=4", "parallelism.pipeline_parallel_microbatch_size=3"])


def test_saved_dense_model_without_a_preset_read_from_its_tree():
    """A dense flavor cosearch has no preset for is read from the saved tree; Llama 3 8B's tree
    under another flavor name gives the hand-entered Meta preset back (dimension by dimension
    and parameter count); Qwen 3's per-head q/k norms and a tied embedding are read; biases
    are refused; the attention kernel is said as the tree names it."""
    from cosearch import models
    d = json.loads(LLAMA.read_text())
    d["model_spec"]["flavor"] = "8B-custom"
    rc = read_torchtitan(d, ["model.converters=none"])
    m, ref = rc.resolve(16).model, models.preset("llama3-8b")
    for f in ("num_layers", "hidden", "heads", "kv_heads", "head_dim", "ffn_hidden", "vocab", "seq_len", "activation",
              "norm", "position", "tie_embeddings", "qk_norm"):
        assert getattr(m, f) == getattr(ref, f), f
    assert m.num_params() == ref.num_params()
    assert any("FlexAttention with torchtitan's block-causal" in a for a in rc.assumed)
    tied = copy.deepcopy(d)
    tied["model_spec"]["model"]["enable_weight_tying"] = True
    for layer in tied["model_spec"]["model"]["layers"]:
        layer["attention"]["qk_norm"] = {"normalized_shape": 128, "eps": 1e-6, "elementwise_affine": True}
        layer["attention"]["inner_attention"] = {"window_size": [-1, 0]}
    rc = read_torchtitan(tied, ["model.converters=none"])
    m = rc.resolve(16).model
    assert (m.tie_embeddings, m.qk_norm) == (True, "head")
    assert m.num_params() == ref.num_params() - ref.vocab * ref.hidden + 32 * 2 * 128
    assert any("variable-length flash attention" in a for a in rc.assumed)
    biased = copy.deepcopy(d)
    biased["model_spec"]["model"]["layers"][3]["feed_forward"]["w2"]["bias"] = True
    with pytest.raises(ValueError, match="layer 3 has biased projections"):
        read_torchtitan(biased, ["model.converters=none"])
    odd = copy.deepcopy(d)
    odd["model_spec"]["model"]["layers"][0]["attention"]["inner_attention"] = {"softcap": 30}
    with pytest.raises(ValueError, match="no attention cosearch knows"):
        read_torchtitan(odd, ["model.converters=none"])


class FrozenFloat8Linear:
    @dataclass
    class Config:
        in_features: int
        out_features: int


def test_live_config_refuses_what_it_cannot_price():
    saved = json.loads(LLAMA.read_text())
    emulated = Float8Linear.Config(4096, 14336, _TorchaoConfig())
    emulated._torchao_config.emulate = True
    with pytest.raises(ValueError, match="emulates FP8 in high precision"):
        read_torchtitan(_Trainer(saved, _Model([emulated])))
    with pytest.raises(ValueError, match=r"converters \['lora'\]"):
        read_torchtitan(_Trainer(saved, _Model([FrozenFloat8Linear.Config(4096, 14336)])))


def test_chunked_loss_memory_by_hand():
    """torchtitan's ChunkedLossWrapper (Engine.loss_chunks): one chunk's fp32 logits alive instead
    of the sequence's, plus a bf16 copy of the final hidden states and their fp32 gradient buffer.
    Llama 3 8B, one 8,192-token sequence a rank: 8192 x 128256 x 4 x (1 - 1/8) - 8192 x 4096 x
    (2 + 4) = 3,476,029,440 bytes less head activations a microbatch; under full recompute the
    peak holds the larger of the head's phase and a rerunning layer's (the head's backward frees its
    logits first), so the plan's memory falls by the head phase's excess over the layers' where the
    chunked head's phase is the smaller; the step time unchanged."""
    import dataclasses

    from cosearch import cluster, hardware, models
    from cosearch.engine import preset
    from cosearch.plan import PlanSpec, evaluate
    m = models.preset("llama3-8b")
    plain = preset("fsdp")
    chunked = dataclasses.replace(plain, loss_chunks=8, name="fsdp-loss8")
    from cosearch import memory
    for mb in (1, 2):
        spec = PlanSpec(8, 1, 1, mb, recompute="full", zero=3, flash_attention=True)
        a, b = (evaluate(m, hardware.H100, cluster.dgx_h100(1), spec, 16 * mb, engine=e) for e in (plain, chunked))
        saved = 8192 * 128256 * 4 * (1 - 1 / 8) - 8192 * 4096 * (2 + 4)
        head = memory.head_activation_bytes(m, 1, mb)
        assert head - memory.head_activation_bytes(m, 1, mb, loss_chunks=8) == pytest.approx(mb * saved, rel=1e-12)
        layer = memory.layer_activation_bytes(m, 1, mb, False, "none", True)
        assert head - mb * saved < layer < head
        # under ZeRO-3 the head's phase also holds the head's weight gathered whole and a layer's
        # prefetched, the layers' phase two layers' (tests/test_zero3_head_phase.py)
        lw = (4096 * (4096 + 1024 + 1024 + 4096) + 3 * 4096 * 14336 + 2 * 4096) * 2
        hgw = (128256 * 4096 + 4096) * 2
        want = (head + hgw + lw) - max(head - mb * saved + hgw + lw, layer + 2 * lw)
        assert a.memory_per_chip_bytes[0] - b.memory_per_chip_bytes[0] == pytest.approx(want, rel=1e-12)
        assert a.step_time_s == b.step_time_s
    with pytest.raises(ValueError, match="loss_chunks"):
        dataclasses.replace(plain, loss_chunks=0)
    d = json.loads(LLAMA.read_text())
    d["loss"]["num_chunks"] = 3                       # 8192 tokens do not split in 3
    with pytest.raises(ValueError, match="do not divide the local sequence"):
        read_torchtitan(d, ["model.converters=none"])


@pytest.mark.parametrize("toml, words, match", [
    ("torchtitan_llama3_70b.toml", ["training.enable_cpu_offload=true"], "host memory"),
    ("torchtitan_llama3_70b.toml", ["parallelism.disable_loss_parallel=true"], "gathers the output layer's logits"),
    ("torchtitan_llama3_70b.toml", ["model.converters=[float8]", "float8.filter_fqns=[output,attention.wo]"],
     r"filter_fqns \['attention.wo'\] keeps those modules in bf16"),
])
def test_toml_switches_that_change_the_run_are_refused(toml, words, match):
    """Fields the TOML reader listed as neutral that change the run: FSDP's CPU offload, loss
    parallelism off under tp, a Float8 filter keeping layer GEMMs in bf16; each is refused by name
    (and neutral where it changes nothing)."""
    with pytest.raises(ValueError, match=match):
        read_config(DATA / toml, words)


def test_toml_switches_neutral_where_they_change_nothing():
    toml = DATA / "torchtitan_llama3_70b.toml"
    assert read_config(toml, ["parallelism.disable_loss_parallel=true", "parallelism.tensor_parallel_degree=1"])
    rc = read_config(toml, ["model.converters=[float8]", "float8.filter_fqns=[output,auto_filter_small_kn]"])
    assert rc.plan["precision"] == "fp8" and any("auto_filter_small_kn" in a for a in rc.assumed)
    qwen = read_config(DATA / "torchtitan_qwen3_30b_a3b.toml", ["model.converters=[float8]",
                                                                  "float8.moe_fqns_prototype=[experts]"])
    assert qwen.plan["precision"] == "fp8" and qwen.engine.expert_precision == "plan"


def test_float8_on_moe_leaves_the_grouped_experts_bf16_unless_converted():
    """torchtitan's Float8 / MX converters swap nn.Linear modules: an MoE model's grouped experts
    stay bf16 (engine ``expert_precision`` bf16) unless a grouped-experts converter takes them
    (2025: ``float8.moe_fqns_prototype``; 0.3: the Float8/MXFP8 grouped-experts converters, which
    swap the dispatcher for torchao's padded one, or pad HybridEP's); grouped experts converted with
    the Linear modules left bf16 is a mix refused by name."""
    qwen = read_config(DATA / "torchtitan_qwen3_30b_a3b.toml", ["model.converters=[float8]"])
    assert qwen.plan["precision"] == "fp8" and qwen.engine.expert_precision == "bf16"
    assert any("grouped GEMMs in bf16" in a for a in qwen.assumed)
    base = json.loads(QWEN.read_text())
    padded = copy.deepcopy(base)
    for layer in padded["model_spec"]["model"]["layers"]:
        layer["moe"]["routed_experts"]["token_dispatcher"] = {"num_experts": 128, "top_k": 8, "pad_multiple": 16}
    rc = read_torchtitan(padded, ["model.converters=float8"])
    d = rc.resolve(64)
    assert d.spec.precision == "fp8" and d.engine.expert_precision == "plan" and d.engine.moe_dispatcher == \
        "gather-tokens"
    assert any("padded token dispatcher" in a for a in rc.assumed)
    with pytest.raises(ValueError, match="Linear modules stay bf16"):
        read_torchtitan(padded, ["model.converters=none"])
    # DeepEP's dispatcher: no grouped converter (torchtitan refuses quantized experts with it)
    assert read_torchtitan(base, ["model.converters=float8"]).resolve(64).engine.expert_precision == "bf16"
    # a flavor its config.json describes: an MoE model's experts would stay bf16 too
    custom = copy.deepcopy(base)
    custom["model_spec"]["flavor"] = "custom"
    rc = read_torchtitan(custom, ["model.converters=float8"])
    assert rc.model is None and rc.engine.expert_precision == "bf16"
    assert any("an MoE model's routed experts' grouped GEMMs in bf16" in a for a in rc.assumed)


def test_token_counted_layout_after_0_3_refused_with_the_reason():
    """torchtitan's main branch after 0.3.0 counts a step in tokens
    (num_tokens_per_microbatch_per_dp_rank, max_context_length): refused saying so, not as
    unknown fields."""
    d = json.loads(LLAMA.read_text())
    t = d["training"]
    t.pop("local_batch_size"), t.pop("seq_len")
    t.update(num_tokens_per_microbatch_per_dp_rank=16384, max_context_length=8192)
    with pytest.raises(ValueError, match="count the step in tokens"):
        read_torchtitan(d, ["model.converters=none"])


def test_optimizer_state_as_torchtitan_builds_it():
    """torchtitan's optimizer section was neutral whole: Adam / AdamW (torch's) keep two fp32
    moments, the memory model's 16 bytes a parameter; 0.3's fused_opt_states_bf16 keeps them in
    bf16 (12 bytes); DistMuon or another optimizer refused, in the TOML and the saved config."""
    toml = DATA / "torchtitan_llama3_70b.toml"
    assert read_config(toml).memory is None
    with pytest.raises(ValueError, match="optimizer Lion is not modelled"):
        read_config(toml, ["optimizer.name=Lion"])
    d = json.loads(LLAMA.read_text())
    assert read_torchtitan(d, ["model.converters=none"]).memory is None
    d["optimizer"]["implementation"] = "fused_opt_states_bf16"
    m = read_torchtitan(d, ["model.converters=none"]).memory
    assert m.weight_bytes + m.grad_bytes + m.optimizer_bytes == 12
    d["optimizer"]["param_groups"][0]["optimizer_name"] = "DistMuon"
    with pytest.raises(ValueError, match="optimizer DistMuon is not modelled"):
        read_torchtitan(d, ["model.converters=none"])


def test_2024_experimental_parallelism_refused_not_dropped():
    """torchtitan of 2024 kept pipeline and context parallelism and async TP under [experimental],
    a section the reader listed neutral: experimental.pipeline_parallel_degree = 8 read as pp 1,
    silently.  Now refused naming the later place; their off values stay neutral."""
    toml = DATA / "torchtitan_llama3_70b.toml"
    for word in ("experimental.pipeline_parallel_degree=8", "experimental.context_parallel_degree=2",
                 "experimental.enable_async_tensor_parallel=true"):
        with pytest.raises(ValueError, match="before 2025 kept these under"):
            read_config(toml, [word])
    rc = read_config(toml, ["experimental.pipeline_parallel_degree=1", "experimental.enable_async_tensor_parallel=false",
                            "experimental.pipeline_parallel_schedule=1F1B"])
    assert rc.resolve(64).spec.pp == 1 and "experimental.pipeline_parallel_degree" in rc.neutral


def test_fsdp_under_pipeline_stages_is_zero2():
    """torchtitan's default reshard policy does not reshard after forward under pipeline stages
    (``not pp_enabled``), and torch's PipelineStage reshards and reduces only after the last
    microbatch: ZeRO 2, in the reader and for the validation rows alike; "always" stays ZeRO 3."""
    from cosearch.runs.torchtitan import fsdp_zero_stage
    assert [fsdp_zero_stage(p, pp) for p in ("default", "always", "never") for pp in (1, 4)] == [3, 2, 3, 3, 2, 2]
    with pytest.raises(ValueError, match="torchtitan accepts default, always, never"):
        fsdp_zero_stage("sometimes", 2)
    rc = read_config(LLAMA, ["model.converters=none"])          # tp 2, pp 2
    assert rc.resolve(16).spec.zero == 2
    assert any("reduces the gradients once" in a for a in rc.assumed)
    always = read_config(LLAMA, ["model.converters=none", "parallelism.fsdp_reshard_after_forward=always"])
    assert always.resolve(16).spec.zero == 3
    from cosearch.runs.rows import describe_row
    row = {"id": "tt-pp", "src": "test", "model": "Llama-3.1-405B", "arch": "dense GQA SwiGLU", "layers": 126,
           "hidden": 16384, "heads": 128, "kv_heads": 8, "ffn": 53248, "vocab": 128256, "seq": 8192,
           "accel": "H100-SXM-80GB", "gen": "Hopper", "gpus_per_node": 8, "n_gpus": 512, "gbs": 64, "mbs": 1,
           "tp": 8, "pp": 8, "cp": 1, "ep": 1, "dp": 8, "sp": True, "zero": 3, "recompute": "full",
           "precision": "bf16", "tok_s_gpu": 100.0, "software": "torchtitan 9dec370"}
    d = describe_row(row)
    assert d.spec.zero == 2 and any("ZeRO 2" in n for n in d.assumed)


def test_deterministic_training_is_said_not_neutral():
    """``training.deterministic`` (torchtitan's ``set_determinism``: PyTorch's deterministic
    algorithms) was a neutral key; on, its slower kernel variants are said, not priced."""
    on = read_torchtitan(DATA / "torchtitan_llama3_70b.toml", ["training.deterministic=true"])
    assert any("training.deterministic" in a for a in on.assumed)
    off = read_torchtitan(DATA / "torchtitan_llama3_70b.toml", ["training.deterministic=false"])
    assert not any("deterministic" in a for a in off.assumed)
