"""Gradient accumulation outside the weight-gradient GEMMs, read as Megatron-Core runs it
(``--no-gradient-accumulation-fusion``; Megatron-Bridge's ``model.gradient_accumulation_fusion``;
NeMo 1's, off by default): the pass's bytes by hand, its time from a model whose parameters are
counted by hand, and each reader turning it on exactly where the config does."""

from pathlib import Path

import pytest

from cosearch import cluster, hardware
from cosearch.plan import evaluate
from cosearch.runs import read_megatron_args, read_megatron_bridge, read_nemo1
from cosearch.runs.megatron import unfused_grad_accum_bytes

DATA = Path(__file__).parent / "data" / "runs"
L, H, HEADS, S, V = 2, 1024, 16, 2048, 32000
LINE = (f"--num-layers {L} --hidden-size {H} --num-attention-heads {HEADS} --seq-length {S} --vocab-size {V} "
        "--micro-batch-size 1 --global-batch-size 64 --bf16 --use-distributed-optimizer")


def test_the_pass_moves_the_bf16_gradient_and_the_main_gradient():
    """``param.main_grad.add_(param.grad)``: read 2 bytes, read and write the main gradient;
    Megatron-FSDP's sharded buffers take a copy (read 2, write the main gradient)."""
    assert unfused_grad_accum_bytes(4.0) == 2 + 4 + 4
    assert unfused_grad_accum_bytes(2.0) == 2 + 2 + 2
    assert unfused_grad_accum_bytes(4.0, sharded_grads=True) == 2 + 4
    assert unfused_grad_accum_bytes(2.0, sharded_grads=True) == 2 + 2
    with pytest.raises(ValueError, match="fp32 .4. or bf16 .2."):
        unfused_grad_accum_bytes(1.0)


@pytest.mark.parametrize("extra,acc", [
    ("", 0.0),                                                          # Megatron's default: fused
    (" --no-gradient-accumulation-fusion", 10.0),                       # fp32 main gradients (bf16 run)
    (" --no-gradient-accumulation-fusion --grad-reduce-in-bf16", 6.0),
    (" --no-gradient-accumulation-fusion --main-grads-dtype bf16", 6.0),
    # Megatron-FSDP: main gradients in the model's bf16 unless given; ZeRO-3 shards (copies) them
    (" --no-gradient-accumulation-fusion --use-megatron-fsdp --data-parallel-sharding-strategy optim_grads_params", 4.0),
    (" --no-gradient-accumulation-fusion --use-megatron-fsdp --data-parallel-sharding-strategy optim_grads_params"
     " --megatron-fsdp-main-grads-dtype fp32", 6.0),
    (" --no-gradient-accumulation-fusion --use-megatron-fsdp --data-parallel-sharding-strategy optim", 6.0),
])
def test_megatron_line_reads_the_fusion_switch(extra, acc):
    rc = read_megatron_args(LINE.replace(" --use-distributed-optimizer", "") + extra if "fsdp" in extra
                            else LINE + extra)
    assert rc.engine.grad_accum_bytes == acc
    assert any("--no-gradient-accumulation-fusion" in a for a in rc.assumed) == (acc > 0)


def test_the_pass_costs_every_microbatch_its_ranks_parameters_at_hbm_speed():
    """GPT-style model from the line, tp = pp = 1 on 8 H100s: each rank holds every parameter,
    counted by hand (per layer QKV 3h^2 + 3h, projection h^2 + h, MLP 8h^2 + 5h, two LayerNorms
    4h; the token and learned position tables; the final LayerNorm; the output tied), and runs
    64 / 8 = 8 microbatches, each adding its 10-byte pass."""
    fused = read_megatron_args(LINE).resolve(8)
    unfused = read_megatron_args(LINE + " --no-gradient-accumulation-fusion").resolve(8)
    chip, cl = hardware.H100, cluster.preset("dgx-h100", 8)
    a = evaluate(fused.model, chip, cl, fused.spec, 64, engine=fused.engine)
    b = evaluate(unfused.model, chip, cl, unfused.spec, 64, engine=unfused.engine)
    params = L * (12 * H * H + 13 * H) + V * H + S * H + 2 * H
    want = 8 * params * 10 / (chip.hbm_bandwidth_Bps * chip.efficiency.memory)
    assert a.breakdown["grad_accum_s"] == 0.0
    assert b.breakdown["grad_accum_s"] == pytest.approx(want, rel=1e-9)
    assert b.step_time_s - a.step_time_s == pytest.approx(want, rel=1e-6)


def test_bridge_reads_its_model_switch_default_on():
    words = ["train.global_batch_size=64", "ddp.use_distributed_optimizer=true", "mixed_precision=bf16_mixed"]
    on = read_megatron_bridge(None, words, model="gpt3-13b")
    off = read_megatron_bridge(None, words + ["model.gradient_accumulation_fusion=false"], model="gpt3-13b")
    assert on.engine.grad_accum_bytes == 0.0
    assert off.engine.grad_accum_bytes == 10.0          # the mixed-precision config's fp32 reduction
    bf16 = read_megatron_bridge(None, words + ["model.gradient_accumulation_fusion=false",
                                               "mixed_precision.grad_reduce_in_fp32=false"], model="gpt3-13b")
    assert bf16.engine.grad_accum_bytes == 6.0


def _nemo1(**model):
    base = {"trainer": {"num_nodes": 1, "devices": 8, "precision": "bf16"},
            "model": {"micro_batch_size": 1, "global_batch_size": 64, "tensor_model_parallel_size": 1,
                      "pipeline_model_parallel_size": 1, "encoder_seq_length": 2048, "num_layers": 4,
                      "hidden_size": 1024, "ffn_hidden_size": 4096, "num_attention_heads": 16,
                      "megatron_amp_O2": True, "tokenizer": {"type": "GPT2BPETokenizer"}}}
    base["model"].update(model)
    return base


def test_nemo1_reads_fusion_and_o2_as_nemo_runs_them():
    """NeMo 1 (``megatron_base_model.py``): the fusion is off unless the config turns it on; on, NeMo
    turns it off at pp 1 over more than one data-parallel rank with a non-distributed optimizer;
    O1 (``megatron_amp_O2`` false, NeMo's default) is refused."""
    yaml = DATA / "nemo1_gpt3_5b.yaml"                   # the launcher's: O2, fusion on, distributed Adam
    assert read_nemo1(yaml).engine.grad_accum_bytes == 0.0
    assert read_nemo1(yaml, ["model.gradient_accumulation_fusion=false"]).engine.grad_accum_bytes == 10.0
    assert read_nemo1(_nemo1()).engine.grad_accum_bytes == 10.0                   # unset: NeMo's false
    dist = {"name": "distributed_fused_adam"}
    assert read_nemo1(_nemo1(gradient_accumulation_fusion=True, optim=dist)).engine.grad_accum_bytes == 0.0
    plain = read_nemo1(_nemo1(gradient_accumulation_fusion=True, optim={"name": "fused_adam"}))
    assert plain.engine.grad_accum_bytes == 10.0 and any("turned off, as NeMo does" in a for a in plain.assumed)
    one = _nemo1(gradient_accumulation_fusion=True, optim={"name": "fused_adam"})
    one["trainer"]["devices"] = 1                        # one data-parallel rank: NeMo keeps it on
    assert read_nemo1(one).engine.grad_accum_bytes == 0.0
    piped = read_nemo1(_nemo1(gradient_accumulation_fusion=True, optim={"name": "fused_adam"},
                              pipeline_model_parallel_size=2))
    assert piped.engine.grad_accum_bytes == 0.0
    with pytest.raises(ValueError, match="megatron_amp_O2 is false"):
        read_nemo1(_nemo1(megatron_amp_O2=False))
    with pytest.raises(ValueError, match="megatron_amp_O2 is false"):
        cfg = _nemo1()
        del cfg["model"]["megatron_amp_O2"]
        read_nemo1(cfg)
