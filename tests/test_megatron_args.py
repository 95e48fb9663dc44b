"""Megatron argument lines: every flag is read, listed as neutral or refused by name, the model
comes from the line's own flags (or must agree with ``--model``), and nothing in the line is
silently overridden.  Expected values are worked by hand from Megatron-LM's
``megatron/training/arguments.py`` defaults."""

import pytest

from cosearch import cluster, models
from cosearch.cli import main
from cosearch.plan import evaluate
from cosearch.runs import read_megatron_args, read_megatron_bridge
from cosearch.runs.megatron import parse_megatron_args

GPT13 = models.preset("gpt3-13b")       # 40 layers, hidden 5120, 40 heads, sequence 2048


def test_model_built_from_the_line_with_megatron_defaults():
    line = ("--num-layers 96 --hidden-size 4096 --num-attention-heads 32 --seq-length 4096 --vocab-size 32000 "
            "--swiglu --normalization RMSNorm --position-embedding-type rope --disable-bias-linear "
            "--untie-embeddings-and-output-weights --group-query-attention --num-query-groups 8 "
            "--attention-dropout 0 --hidden-dropout 0 --global-batch-size 8")
    mp = parse_megatron_args(line, None, 8)
    m = mp.model
    assert (m.num_layers, m.hidden, m.heads, m.seq_len, m.vocab, m.kv_heads) == (96, 4096, 32, 4096, 32000, 8)
    # --swiglu without --ffn-hidden-size: int(4 * 4096 * 2/3 / 64) * 64 = int(170.67) * 64 = 10880
    assert m.ffn_hidden == 10880 and any("10880" in a for a in mp.assumed)
    assert (m.activation, m.norm, m.position, m.bias, m.tie_embeddings, m.dropout) == \
        ("swiglu", "rmsnorm", "rotary", False, False, False)
    # GeLU default: 4 x hidden
    m2 = parse_megatron_args("--num-layers 2 --hidden-size 256 --num-attention-heads 4 --seq-length 128 "
                             "--vocab-size 1000 --global-batch-size 8", None, 8).model
    assert m2.ffn_hidden == 1024 and m2.activation == "gelu" and m2.dropout


def test_squared_relu_reads_as_a_two_matrix_relu_mlp():
    """Nemotron-4's ``--squared-relu`` (NeMo 1: ``activation: squared-relu``): a 2-matrix MLP of
    4 x hidden by default, its activation one elementwise pass priced as ReLU, which the run's
    assumptions say; with ``--swiglu`` it is refused (Megatron takes one).  NeMo 1's LayerNorm1P
    (``layernorm_zero_centered_gamma``), scaled initialisation and ``attention_type: multihead``
    change nothing priced; another attention type is refused."""
    from pathlib import Path

    from cosearch.runs import read_nemo1
    base = "--num-layers 2 --hidden-size 256 --num-attention-heads 4 --seq-length 128 --vocab-size 1000 " \
           "--global-batch-size 8"
    mp = parse_megatron_args(base + " --squared-relu", None, 8)
    assert (mp.model.activation, mp.model.ffn_hidden) == ("relu", 1024)
    assert any("--squared-relu" in a for a in mp.assumed)
    with pytest.raises(ValueError, match="one MLP activation"):
        parse_megatron_args(base + " --squared-relu --swiglu", None, 8)
    yaml = Path(__file__).parent / "data" / "runs" / "nemo1_gpt3_5b.yaml"
    rc = read_nemo1(yaml, ["model.activation=squared-relu", "model.layernorm_zero_centered_gamma=true",
                           "model.use_scaled_init_method=true", "model.attention_type=multihead"])
    assert rc.model.activation == "relu" and rc.model == read_nemo1(yaml).model.with_(activation="relu")
    with pytest.raises(ValueError, match="attention_type 'cross'"):
        read_nemo1(yaml, ["model.attention_type=cross"])


def test_line_model_flags_must_agree_with_the_model_given():
    with pytest.raises(ValueError, match=r"--num-layers gives 96 where gpt3-13b has 40"):
        parse_megatron_args("--num-layers 96 --global-batch-size 8", GPT13, 8)
    with pytest.raises(ValueError, match=r"--seq-length gives 4096 where gpt3-13b has 2048"):
        parse_megatron_args("--seq-length 4096 --global-batch-size 8", GPT13, 8)
    # agreeing flags are fine
    mp = parse_megatron_args("--num-layers 40 --hidden-size 5120 --seq-length 2048 --global-batch-size 8", GPT13, 8)
    assert mp.model is GPT13
    with pytest.raises(ValueError, match="lacks --vocab-size"):
        parse_megatron_args("--num-layers 4 --hidden-size 256 --num-attention-heads 4 --seq-length 128 "
                            "--global-batch-size 8", None, 8)


def test_precision_flags_are_priced_not_dropped():
    assert parse_megatron_args("--fp4-format e2m1 --global-batch-size 8", GPT13, 8).spec.precision == "fp4"
    mp = parse_megatron_args("--fp8-format hybrid --fp8-recipe mxfp8 --global-batch-size 8", GPT13, 8)
    assert mp.spec.precision == "fp8" and any("mxfp8" in a for a in mp.assumed)
    with pytest.raises(ValueError, match="--fp16"):
        parse_megatron_args("--fp16 --global-batch-size 8", GPT13, 8)


def test_batch_given_twice_must_agree():
    with pytest.raises(ValueError, match="contradicts the batch given"):
        parse_megatron_args("--global-batch-size 64", GPT13, 8, global_batch=32)
    assert parse_megatron_args("--global-batch-size 64", GPT13, 8, global_batch=64).global_batch == 64
    assert parse_megatron_args("", GPT13, 8, global_batch=16).global_batch == 16


def test_unknown_and_unpriceable_flags_are_refused_by_name():
    with pytest.raises(ValueError, match="--frobnicate"):
        parse_megatron_args("--frobnicate 3 --global-batch-size 8", GPT13, 8)
    with pytest.raises(ValueError, match="give one of --overlap-p2p-communication and --no-overlap"):
        parse_megatron_args("--overlap-p2p-communication --no-overlap-p2p-communication --global-batch-size 8",
                            GPT13, 8)
    with pytest.raises(ValueError, match="partial recompute"):   # 40 layers / pp 2 = 20 per stage > 4
        parse_megatron_args("--pipeline-model-parallel-size 2 --recompute-granularity full "
                            "--recompute-method block --recompute-num-layers 4 --global-batch-size 8", GPT13, 8)
    mp = parse_megatron_args("--recompute-granularity full --recompute-method block --recompute-num-layers 40 "
                             "--global-batch-size 8", GPT13, 8)
    assert mp.spec.recompute == "full"
    with pytest.raises(ValueError, match="do not split evenly"):            # 40 layers over 3 x 1
        parse_megatron_args("--pipeline-model-parallel-size 3 --global-batch-size 8", GPT13, 9)
    with pytest.raises(ValueError, match="given twice"):
        parse_megatron_args("--micro-batch-size 1 --micro-batch-size 2 --global-batch-size 8", GPT13, 8)


def test_grad_reduce_overlap_only_where_the_line_sets_it():
    off = parse_megatron_args("--use-distributed-optimizer --global-batch-size 8", GPT13, 8)
    on = parse_megatron_args("--use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather "
                             "--global-batch-size 8", GPT13, 8)
    assert not off.engine.overlap_grad_reduce and on.engine.overlap_grad_reduce
    assert on.engine.name == "megatron-core-fp32-grad-reduce"
    assert off.engine.name == "megatron-core-no-grad-overlap-fp32-grad-reduce"
    with pytest.raises(ValueError, match="needs --overlap-grad-reduce"):
        parse_megatron_args("--overlap-param-gather --global-batch-size 8", GPT13, 8)


def test_cli_prices_the_lines_model(capsys):
    line = ("--num-layers 96 --hidden-size 5120 --num-attention-heads 40 --seq-length 2048 --vocab-size 50257 "
            "--tensor-model-parallel-size 8 --pipeline-model-parallel-size 2 --global-batch-size 64")
    assert main(["plan", "--cluster", "dgx-a100", "--nodes", "16", "--from-megatron-args", line]) == 0
    out = capsys.readouterr()
    assert "megatron-96L-5120" in out.out and "layers [48, 48]" in out.out
    assert main(["plan", "--model", "gpt3-13b", "--cluster", "dgx-a100", "--nodes", "16",
                 "--from-megatron-args", line]) == 2
    assert "--num-layers gives 96" in capsys.readouterr().err


def test_cli_seq_len_must_agree_with_the_lines_model(capsys):
    line = ("--num-layers 4 --hidden-size 256 --num-attention-heads 4 --seq-length 128 --vocab-size 1000 "
            "--global-batch-size 8")
    assert main(["plan", "--cluster", "dgx-h100", "--nodes", "1", "--seq-len", "256",
                 "--from-megatron-args", line]) == 2
    assert "--seq-len 256 contradicts" in capsys.readouterr().err
    assert main(["plan", "--cluster", "dgx-h100", "--nodes", "1", "--seq-len", "128",
                 "--from-megatron-args", line]) == 0


def test_moe_layout_and_capacity_flags():
    """--moe-layer-freq (an int, Megatron's ([0]*(k-1)+[1])*n pattern, or [0]*d+[1]*m) and the
    capacity flags set the model's MoE layout and capacity, on a given model as on the line's; a
    layout cosearch cannot read is refused by name; Megatron-Bridge's fields read the same."""
    from cosearch import models
    from cosearch.runs.megatron import read_megatron_args
    from cosearch.runs.nemo import read_megatron_bridge
    mix = models.preset("mixtral-8x7b")
    assert read_megatron_args("--moe-layer-freq 2", mix).model.moe_layer_step == 2
    assert read_megatron_args("--moe-layer-freq ([1]*1+[0]*3)*8", mix).model.moe_layer_step == 4
    assert read_megatron_args("--moe-layer-freq 1", mix).model == mix
    assert read_megatron_args("--moe-layer-freq [0]*3+[1]*29", mix).model.dense_layers == 3
    m = read_megatron_args("--moe-expert-capacity-factor 1.25 --moe-pad-expert-input-to-capacity", mix).model
    assert (m.moe_capacity_factor, m.moe_pad_to_capacity) == (1.25, True)
    with pytest.raises(ValueError, match="--moe-layer-freq"):
        read_megatron_args("--moe-layer-freq [1,0,0,1,1]", mix)
    with pytest.raises(ValueError, match="needs --moe-expert-capacity-factor"):
        read_megatron_args("--moe-pad-expert-input-to-capacity", mix)
    with pytest.raises(ValueError, match="need an MoE model"):
        read_megatron_args("--moe-layer-freq 2", GPT13)
    b = read_megatron_bridge({"model": {"moe_layer_freq": 2, "moe_expert_capacity_factor": 1.0,
                                        "moe_pad_expert_input_to_capacity": True}}, model=mix)
    assert (b.model.moe_layer_step, b.model.moe_capacity_factor, b.model.moe_pad_to_capacity) == (2, 1.0, True)


# ------------------------------------------------------------------ uneven pipeline splits (Megatron-Core's rules)
BASE = ("--num-layers 30 --hidden-size 512 --num-attention-heads 8 --seq-length 1024 --vocab-size 32000 "
        "--micro-batch-size 1 --global-batch-size 64 ")


def test_uneven_first_last_stage_split():
    """``--decoder-first/last-pipeline-num-layers``: the given stages as given, the other layers
    even over the stages left (30 - 6 - 4 = 20 over 2 stages: 10 each), priced as that split."""
    rc = read_megatron_args(BASE + "--pipeline-model-parallel-size 4 --decoder-first-pipeline-num-layers 6 "
                            "--decoder-last-pipeline-num-layers 4")
    assert rc.plan["stage_layers"] == (6, 10, 10, 4)
    only_first = read_megatron_args(BASE + "--pipeline-model-parallel-size 3 --decoder-first-pipeline-num-layers 8")
    assert only_first.plan["stage_layers"] == (8, 11, 11)
    # the read split is the one priced: the same step as the PlanSpec given that split by hand
    from cosearch.plan import PlanSpec
    d = rc.resolve(8)
    hand = PlanSpec(2, 1, 4, 1, stage_layers=(6, 10, 10, 4), flash_attention=d.spec.flash_attention)
    cl = cluster.preset("dgx-h100", 8)
    assert evaluate(d.model, "H100", cl, d.spec, 64).step_time_s == evaluate(d.model, "H100", cl, hand, 64).step_time_s
    with pytest.raises(ValueError, match="divide evenly"):
        read_megatron_args(BASE + "--pipeline-model-parallel-size 4 --decoder-first-pipeline-num-layers 5")
    with pytest.raises(ValueError, match="pipeline-model-parallel-size > 1"):
        read_megatron_args(BASE + "--decoder-first-pipeline-num-layers 5")


def test_embedding_and_loss_counted_as_layers():
    """``--account-for-embedding/loss-in-pipeline-split``: Llama 3.1 405B's Megatron-Bridge recipe,
    126 layers + the embedding + the loss = 128 over pp 8: 16 a stage, the first and last
    building 15 transformer layers; with 4 virtual stages each stage's 16 divide into chunks."""
    line = ("--num-layers 126 --hidden-size 16384 --num-attention-heads 128 --seq-length 8192 --vocab-size 128256 "
            "--ffn-hidden-size 53248 --swiglu --group-query-attention --num-query-groups 8 --micro-batch-size 1 "
            "--global-batch-size 512 --pipeline-model-parallel-size 8 --num-virtual-stages-per-pipeline-rank 4 "
            "--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split")
    rc = read_megatron_args(line)
    assert rc.plan["stage_layers"] == (15,) + (16,) * 6 + (15,)
    # 31 layers + the embedding = 32 over pp 4: the first stage builds 7
    emb_only = read_megatron_args(BASE.replace("--num-layers 30", "--num-layers 31")
                                  + "--pipeline-model-parallel-size 4 --account-for-embedding-in-pipeline-split")
    assert emb_only.plan["stage_layers"] == (7, 8, 8, 8)
    with pytest.raises(ValueError, match="without a transformer layer"):
        read_megatron_args(BASE + "--pipeline-model-parallel-size 31 --account-for-embedding-in-pipeline-split")
    with pytest.raises(ValueError, match="do not divide"):
        read_megatron_args(BASE + "--pipeline-model-parallel-size 4 --account-for-loss-in-pipeline-split")
    with pytest.raises(ValueError, match="cannot be combined"):
        read_megatron_args(BASE + "--pipeline-model-parallel-size 2 --decoder-first-pipeline-num-layers 14 "
                           "--account-for-loss-in-pipeline-split")
    with pytest.raises(ValueError, match="virtual stages"):
        read_megatron_args(BASE + "--pipeline-model-parallel-size 2 --num-virtual-stages-per-pipeline-rank 4 "
                           "--decoder-first-pipeline-num-layers 14")
    bridge = read_megatron_bridge(None, ["train.global_batch_size=512", "train.micro_batch_size=1",
                                         "model.pipeline_model_parallel_size=8",
                                         "model.virtual_pipeline_model_parallel_size=4",
                                         "model.account_for_embedding_in_pipeline_split=true",
                                         "model.account_for_loss_in_pipeline_split=true"],
                                  model=models.preset("llama3-405b"))
    assert bridge.plan["stage_layers"] == (15,) + (16,) * 6 + (15,)


def test_gradient_reduction_dtype_as_megatron_decides_it():
    """A bf16 run accumulates and all-reduces its gradients in fp32 unless the line says
    otherwise (Megatron-LM's arguments.py): 4 bytes an element on the data-parallel reduction,
    said; ``--grad-reduce-in-bf16`` or bf16 main gradients keep the memory model's 2.  The fp32
    reduction costs more exposed data-parallel time when nothing hides it."""
    line = "--use-distributed-optimizer --global-batch-size 64"
    fp32 = parse_megatron_args(line, GPT13, 64)
    bf16 = parse_megatron_args(line + " --grad-reduce-in-bf16", GPT13, 64)
    main_bf16 = parse_megatron_args(line + " --main-grads-dtype bf16", GPT13, 64)
    assert fp32.engine.grad_reduce_bytes == 4.0 and any("all-reduced in fp32" in a for a in fp32.assumed)
    assert bf16.engine.grad_reduce_bytes is None and main_bf16.engine.grad_reduce_bytes is None
    assert not any("all-reduced in fp32" in a for a in bf16.assumed)
    cl = cluster.preset("dgx-h100", 64)
    t32, t16 = (evaluate(GPT13, "H100", cl, p.spec, 64, engine=p.engine).breakdown["dp_exposed_s"] for p in (fp32, bf16))
    assert t32 > t16 > 0.0
    with pytest.raises(ValueError, match="needs --main-grads-dtype fp32"):
        parse_megatron_args(line + " --accumulate-allreduce-grads-in-fp32 --main-grads-dtype bf16", GPT13, 64)
    with pytest.raises(ValueError, match="fp32 or bf16"):
        parse_megatron_args(line + " --main-grads-dtype fp16", GPT13, 64)
    # Megatron-Bridge: the mixed-precision config's grad_reduce_in_fp32 (True by default) wins over the DDP's
    words = ["train.global_batch_size=64", "ddp.use_distributed_optimizer=true"]
    on = read_megatron_bridge(None, words + ["mixed_precision=bf16_mixed", "ddp.grad_reduce_in_fp32=false"], model=GPT13)
    off = read_megatron_bridge(None, words + ["mixed_precision=bf16_mixed", "mixed_precision.grad_reduce_in_fp32=false"],
                               model=GPT13)
    assert on.engine.grad_reduce_bytes == 4.0 and any("overridden" in a for a in on.assumed)
    assert off.engine.grad_reduce_bytes is None
    # NeMo 1: Megatron-Core's DDP reduces in fp32 unless optim.grad_sync_dtype is bf16 (NeMo's default fp32)
    from pathlib import Path

    from cosearch.runs import read_nemo1
    yaml = Path(__file__).parent / "data" / "runs" / "nemo1_gpt3_5b.yaml"
    assert read_nemo1(yaml).engine.grad_reduce_bytes == 4.0
    assert read_nemo1(yaml, ["model.optim.grad_sync_dtype=bf16"]).engine.grad_reduce_bytes is None


def test_precision_aware_optimizer_memory():
    """``--use-precision-aware-optimizer``: the optimizer state in its own dtypes, the memory
    model's optimizer bytes their sum (fp32 main parameters 4 + bf16 moments 2 + 2 = 8, where
    the default keeps 12); the step's static memory falls by 4 bytes a parameter over the
    distributed optimizer's shards.  Without the flag the dtypes change nothing (said)."""
    from cosearch.memory import MemoryConfig
    line = ("--use-distributed-optimizer --global-batch-size 64 --use-precision-aware-optimizer "
            "--exp-avg-dtype bf16 --exp-avg-sq-dtype bf16")
    mp = parse_megatron_args(line, GPT13, 64)
    assert mp.memory == MemoryConfig(optimizer_bytes=8.0)
    assert any("8 bytes of optimizer state" in a for a in mp.assumed)
    fp8 = parse_megatron_args(line.replace("--exp-avg-dtype bf16", "--exp-avg-dtype fp8")
                              + " --main-params-dtype fp16", GPT13, 64)
    assert fp8.memory.optimizer_bytes == 2 + 1 + 2
    plain = parse_megatron_args(line.replace("--use-precision-aware-optimizer ", ""), GPT13, 64)
    assert plain.memory is None and any("without --use-precision-aware-optimizer" in a for a in plain.assumed)
    with pytest.raises(ValueError, match="fp32, fp16$"):
        parse_megatron_args(line + " --main-params-dtype bf16", GPT13, 64)
    # priced: ZeRO-1 over dp 64 shards the optimizer state, so a chip keeps 4 bytes / 64 a parameter less
    cl = cluster.preset("dgx-h100", 64)
    full = evaluate(GPT13, "H100", cl, mp.spec, 64, engine=mp.engine)
    aware = evaluate(GPT13, "H100", cl, mp.spec, 64, engine=mp.engine, mem=mp.memory)
    saved = full.memory_per_chip_bytes[0] - aware.memory_per_chip_bytes[0]
    assert saved == pytest.approx(4.0 * GPT13.num_params() / 64, rel=1e-6)
    # Megatron-Bridge: the OptimizerConfig fields, torch dtypes as a dump writes them
    rc = read_megatron_bridge(None, ["train.global_batch_size=64", "optimizer.use_precision_aware_optimizer=true",
                                     "optimizer.exp_avg_dtype=torch.bfloat16",
                                     "optimizer.exp_avg_sq_dtype=torch.bfloat16",
                                     "optimizer.main_params_dtype=torch.float32"], model=GPT13)
    assert rc.memory == MemoryConfig(optimizer_bytes=8.0)
    assert rc.resolve(64).memory == rc.memory


def test_nemo1_distributed_fused_adam_state_dtype():
    """NeMo 1's ``distributed_fused_adam`` is Apex's DistributedFusedAdam, whose state bucket keeps
    the two Adam moments and (``store_params``, its default) a copy of the parameters in
    ``optim.dtype``: bf16 is 2 + 2 + 2 = 6 bytes a parameter where fp32 is 12; without the copy 4;
    fp32 moments with the 16-bit remainders of bf16 parameters 4 + 4 + 2 = 10.  The NeMo 1 reader
    reads them, the validation rows take the launcher config's (Nemotron-340B at 24.07: bf16), and
    a ZeRO-1 chip keeps 6 bytes / dp a parameter less."""
    from pathlib import Path

    from cosearch.memory import MemoryConfig
    from cosearch.runs import read_nemo1
    from cosearch.runs.nemo import apex_adam_memory
    from cosearch.runs.rows import nemo_launcher_memory
    assert apex_adam_memory() is None and apex_adam_memory("fp32") is None
    assert apex_adam_memory("bf16") == MemoryConfig(optimizer_bytes=6.0)
    assert apex_adam_memory("torch.float16", store_params=False) == MemoryConfig(optimizer_bytes=4.0)
    assert apex_adam_memory("fp32", store_params=False, store_param_remainders=True) == \
        MemoryConfig(optimizer_bytes=10.0)
    with pytest.raises(ValueError, match="store_param_remainders needs store_params false"):
        apex_adam_memory("fp32", store_param_remainders=True)
    with pytest.raises(ValueError, match="fp32, fp16, bf16"):
        apex_adam_memory("fp8")
    yaml = Path(__file__).parent / "data" / "runs" / "nemo1_gpt3_5b.yaml"
    assert read_nemo1(yaml).memory is None
    bf16 = read_nemo1(yaml, ["model.optim.dtype=bf16"])
    assert bf16.memory == MemoryConfig(optimizer_bytes=6.0) and any("optim.dtype" in a for a in bf16.assumed)
    assert read_nemo1(yaml, ["model.optim.dtype=bf16", "model.optim.store_params=false"]).memory.optimizer_bytes == 4.0
    with pytest.raises(ValueError, match="model.optim.dtype"):      # another optimizer's dtype is not read
        read_nemo1(yaml, ["model.optim.name=fused_adam", "model.optim.dtype=bf16"])
    sw = {"software": "NeMo 24.07 container"}
    mem, why = nemo_launcher_memory({"id": "nemo-24.07/Nemotron-340B/pretrain/128", **sw})
    assert mem == MemoryConfig(optimizer_bytes=6.0) and "optim.dtype" in why
    assert nemo_launcher_memory({"id": "nemo-24.07/LLAMA2-70B/pretrain/64", **sw}) == (None, "")
    assert nemo_launcher_memory({"id": "nemo-24.07/Nemotron-340B/SFT/128", **sw}) == (None, "")
    # priced: ZeRO-1 shards the state over the dp ranks, 6 bytes / dp a parameter less (one stage, tp 1)
    d = bf16.resolve()
    cl = cluster.preset("dgx-h100", d.num_chips // 8)
    full = evaluate(d.model, "H100", cl, d.spec, d.global_batch, engine=d.engine)
    less = evaluate(d.model, "H100", cl, d.spec, d.global_batch, engine=d.engine, mem=d.memory)
    saved = full.memory_per_chip_bytes[0] - less.memory_per_chip_bytes[0]
    assert (d.spec.zero, d.spec.tp, d.spec.pp) == (1, 1, 1)
    assert saved == pytest.approx(6.0 * d.model.num_params() / d.spec.dp, rel=1e-9)


def test_cp_comm_type():
    """``--cp-comm-type``: the p2p ring (Megatron's default) is what cosearch prices, read with
    cp > 1; another type is refused there, and changes nothing at cp 1; Bridge's string or list
    reads alike."""
    line = "--context-parallel-size 2 --use-flash-attn --global-batch-size 8 "
    assert parse_megatron_args(line + "--cp-comm-type p2p", GPT13, 8).spec.context_parallel == 2
    assert parse_megatron_args(line + "--cp-comm-type p2p p2p", GPT13, 8).spec.context_parallel == 2
    with pytest.raises(ValueError, match="not modelled"):
        parse_megatron_args(line + "--cp-comm-type a2a", GPT13, 8)
    with pytest.raises(ValueError, match="Megatron accepts"):
        parse_megatron_args(line + "--cp-comm-type ring", GPT13, 8)
    assert parse_megatron_args("--cp-comm-type allgather --global-batch-size 8", GPT13, 8).spec.context_parallel == 1
    for v in ("p2p", "[p2p]"):
        rc = read_megatron_bridge(None, ["train.global_batch_size=8", "model.context_parallel_size=2",
                                         f"model.cp_comm_type={v}"], model=GPT13)
        assert rc.plan["context_parallel"] == 2
    with pytest.raises(ValueError, match="not modelled"):
        read_megatron_bridge(None, ["train.global_batch_size=8", "model.context_parallel_size=2",
                                    "model.cp_comm_type=allgather"], model=GPT13)


def test_yarn_rope_is_read_as_megatron_core_scales_it():
    """``--position-embedding-type yarn`` with ``--rotary-scaling-factor`` (``--mscale`` 1 and
    ``--mscale-all-dim`` 0 by default, as ``_apply_yarn_config_from_args`` sets them): the attention
    factor 0.1 ln 32 + 1 for factor 32, hand-computed; equal mscales give 1; the scaling flags
    without yarn are refused; a preset's YaRN is checked against the line's."""
    import math

    base = ("--num-layers 4 --hidden-size 1024 --num-attention-heads 8 --seq-length 2048 --micro-batch-size 1 "
            "--global-batch-size 8 --swiglu --disable-bias-linear --normalization RMSNorm --vocab-size 32000")
    m = read_megatron_args(base + " --position-embedding-type yarn --rotary-scaling-factor 32").model
    assert (m.position, m.rope_attention_factor) == ("rotary", pytest.approx(0.1 * math.log(32) + 1))
    m = read_megatron_args(base + " --position-embedding-type yarn --rotary-scaling-factor 40 --mscale 0.7 "
                           "--mscale-all-dim 0.7").model
    assert m.rope_attention_factor == pytest.approx(1.0)
    assert read_megatron_args(base + " --position-embedding-type rope").model.rope_attention_factor == 1.0
    with pytest.raises(ValueError, match="give --position-embedding-type yarn"):
        read_megatron_args(base + " --rotary-scaling-factor 32")
    oss = models.preset("gpt-oss-120b")
    line = "--micro-batch-size 1 --global-batch-size 64 --expert-model-parallel-size 8 --num-experts 128 " \
           "--moe-router-topk 4"
    assert read_megatron_args(line + " --position-embedding-type yarn --rotary-scaling-factor 32", oss).model == oss
    with pytest.raises(ValueError, match="YaRN's attention factor"):
        read_megatron_args(line + " --position-embedding-type rope", oss)


def test_bridge_yarn_fields_are_read_under_yarn_only():
    """A Megatron-Bridge config's ``model.yarn_*`` fields as the Megatron line's YaRN flags, under
    ``position_embedding_type: yarn`` only (a rope model that keeps the provider's yarn fields, as
    GPT-OSS 20B's perf config does, is plain RoPE); null mscales take the factor alone."""
    import math
    base = ["train.global_batch_size=64", "train.micro_batch_size=1", "model.num_layers=4", "model.hidden_size=1024",
            "model.num_attention_heads=8", "model.seq_length=2048", "model.vocab_size=32000"]
    yarn = ["model.yarn_rotary_scaling_factor=32.0", "model.yarn_mscale=null", "model.yarn_mscale_all_dim=null"]
    m = read_megatron_bridge(None, base + ["model.position_embedding_type=yarn"] + yarn).model
    assert m.rope_attention_factor == pytest.approx(0.1 * math.log(32) + 1)
    assert read_megatron_bridge(None, base + ["model.position_embedding_type=rope"] + yarn).model.rope_attention_factor == 1.0
    equal = ["model.yarn_rotary_scaling_factor=40", "model.yarn_mscale=1.0", "model.yarn_mscale_all_dim=1.0"]
    assert read_megatron_bridge(None, base + ["model.position_embedding_type=yarn"] + equal).model.rope_attention_factor == \
        pytest.approx(1.0)
    oss = models.preset("gpt-oss-120b")
    got = read_megatron_bridge(None, ["train.global_batch_size=64", "train.micro_batch_size=1",
                                      "model.expert_model_parallel_size=8", "model.position_embedding_type=yarn"] + yarn,
                               model=oss)
    assert got.model.rope_attention_factor == oss.rope_attention_factor


def test_deepseek_v3s_own_megatron_line_reads():
    """DeepSeek-V3's Megatron line (multi-head latent attention, shared experts, the first 3 layers
    dense, multi-token prediction, YaRN, device-limited routing) reads against the deepseek-v3
    preset, and builds the same attention and experts on its own: MLA's ranks and head width from
    ``--q-lora-rank``, ``--kv-lora-rank``, ``--qk-pos-emb-head-dim``, ``--qk-head-dim`` (Megatron-LM's
    defaults said where absent), one shared expert of 2,048 from
    ``--moe-shared-expert-intermediate-size`` over ``--moe-ffn-hidden-size``.  A query and value head
    width that differ, MLA sizes without ``--multi-latent-attention``, a shared size that is not
    whole experts, and MLA ranks that contradict the preset are refused by name."""
    from cosearch.runs.megatron import parse_megatron_args
    m = models.preset("deepseek-v3")
    line = ("--tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 --expert-model-parallel-size 64 "
            "--micro-batch-size 1 --global-batch-size 1024 --bf16 --multi-latent-attention --q-lora-rank 1536 "
            "--kv-lora-rank 512 --qk-head-dim 128 --qk-pos-emb-head-dim 64 --v-head-dim 128 "
            "--moe-shared-expert-intermediate-size 2048 --moe-router-topk 8 --num-experts 256 --moe-ffn-hidden-size 2048 "
            "--moe-layer-freq ([0]*3+[1]*58) --mtp-num-layers 1 --moe-router-topk-limited-devices 4 "
            "--position-embedding-type yarn --rotary-scaling-factor 40 --mscale 1.0 --mscale-all-dim 1.0")
    mp = parse_megatron_args(line, m, 512)
    assert (mp.model.mla, mp.model.shared_experts, mp.model.dense_layers, mp.model.mtp_layers) == ((1536, 512, 64), 1, 3, 1)
    assert any("device-limited routing (4" in a for a in mp.assumed)
    own = parse_megatron_args(line + " --num-layers 61 --hidden-size 7168 --num-attention-heads 128 --seq-length 4096 "
                              "--vocab-size 129280 --swiglu --normalization RMSNorm --ffn-hidden-size 18432 "
                              "--disable-bias-linear --untie-embeddings-and-output-weights --attention-dropout 0 "
                              "--hidden-dropout 0", None, 512).model
    assert (own.mla, own.head_dim, own.shared_experts, own.expert_ffn) == ((1536, 512, 64), 128, 1, 2048)
    short = parse_megatron_args(line.replace(" --qk-head-dim 128", "").replace(" --v-head-dim 128", ""), m, 512)
    assert any("--qk-head-dim 128 (Megatron-LM's default)" in a for a in short.assumed)
    for bad, why in ((line.replace("--v-head-dim 128", "--v-head-dim 64"), "one head width"),
                     (line.replace("--multi-latent-attention ", ""), "give --multi-latent-attention"),
                     (line.replace("intermediate-size 2048", "intermediate-size 3000"), "whole number of experts"),
                     (line.replace("--kv-lora-rank 512", "--kv-lora-rank 256"), "contradicts --model deepseek-v3")):
        with pytest.raises(ValueError, match=why):
            parse_megatron_args(bad, m, 512)
    bridge = read_megatron_bridge({"model": {"expert_model_parallel_size": 64, "multi_latent_attention": True,
                                             "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_head_dim": 128,
                                             "qk_pos_emb_head_dim": 64, "v_head_dim": 128, "num_moe_experts": 256,
                                             "moe_router_topk": 8, "moe_ffn_hidden_size": 2048,
                                             "moe_shared_expert_intermediate_size": 2048},
                                   "train": {"micro_batch_size": 1, "global_batch_size": 1024}}, model=m)
    assert (bridge.model.mla, bridge.model.shared_experts) == ((1536, 512, 64), 1)


def test_script_switches_that_change_nothing_priced_are_read():
    """Flags common in Megatron's launch scripts, refused as unknown until now: the scheduler's
    checkpointed state, LayerNorm's persistent kernel, the end-of-document loss mask and position
    reset are neutral; the first parameter all-gather beside the optimizer step is said (and refused
    without what Megatron asserts it needs); the userbuffers overlap's config file is said."""
    base = "--global-batch-size 64 --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather"
    rc = read_megatron_args(base + " --use-checkpoint-opt_param-scheduler --no-persist-layer-norm --eod-mask-loss "
                            "--reset-position-ids", model="llama3-8b")
    assert {"--eod-mask-loss", "--reset-position-ids", "--no-persist-layer-norm"} <= set(rc.neutral)
    with pytest.raises(ValueError, match="interleaved pipeline"):
        read_megatron_args(base + " --overlap-param-gather-with-optimizer-step", model="llama3-8b")
    piped = read_megatron_args(base + " --overlap-param-gather-with-optimizer-step --pipeline-model-parallel-size 2 "
                               "--num-layers-per-virtual-pipeline-stage 4", model="llama3-8b")
    assert any("beside the optimizer step" in a for a in piped.assumed)
    cfg = read_megatron_args(base + " --tensor-model-parallel-size 2 --sequence-parallel --tp-comm-overlap "
                             "--tp-comm-overlap-cfg ub.yaml", model="llama3-8b")
    assert any("--tp-comm-overlap-cfg" in a and "not read" in a for a in cfg.assumed)
    assert any("inert" in a for a in read_megatron_args(base + " --tp-comm-overlap-cfg ub.yaml",
                                                          model="llama3-8b").assumed)


GPT_OSS_FLAGS = (" --quick-geglu --glu-linear-offset 1.0 --softmax-type learnable --window-size 127,0 "
                 "--window-attn-skip-freq 2 --activation-func-clamp-value 7.0 --position-embedding-type yarn "
                 "--rotary-scaling-factor 32 --rope-type rope")


def test_gpt_oss_flags_read_as_megatron_core_builds_them():
    """GPT-OSS's Megatron flags (refused as unknown until now) against its config.json: every other
    layer a 128-token window (``layer_types`` alternate, from a sliding one: 18 of 36, 12 of 24),
    the SwiGLU clamped at 7, the sinks inside the fused attention (said)."""
    line = "--global-batch-size 64 --expert-model-parallel-size 8 --moe-grouped-gemm" + GPT_OSS_FLAGS
    for name, windowed in (("gpt-oss-120b", 18), ("gpt-oss-20b", 12)):
        rc = read_megatron_args(line, model=name)
        assert (rc.model.sliding_window, rc.model.sliding_layers, rc.model.activation_clamp) == (128, windowed, 7.0)
        assert any("--softmax-type learnable" in a for a in rc.assumed)
        assert any("--quick-geglu" in a for a in rc.assumed)
    with pytest.raises(ValueError, match="gives 24 where gpt-oss-120b has 18"):
        read_megatron_args(line.replace("--window-attn-skip-freq 2", "--window-attn-skip-freq 3"), model="gpt-oss-120b")


@pytest.mark.parametrize("freq,layers,windowed", [
    ("4", 12, 9),                       # layers 4, 8, 12 full (1-indexed, n % 4 == 0)
    ("2", 7, 4),                        # 1, 3, 5, 7 windowed
    ("[1,1,1,0]*3", 12, 9),
    ("[1, 0]*2", 4, 2),
])
def test_window_layers_by_megatron_cores_rule(freq, layers, windowed):
    from cosearch.runs.megatron import _window_layers
    assert _window_layers(freq, layers) == windowed


def test_gpt_oss_flags_refused_where_megatron_refuses_them_or_cosearch_cannot_price_them():
    base = "--num-layers 4 --hidden-size 256 --num-attention-heads 4 --seq-length 512 --vocab-size 1000 "
    built = read_megatron_args(base + "--swiglu --window-size 63,0").model
    assert (built.sliding_window, built.sliding_layers) == (64, 4)
    cases = [("--swiglu --window-size 63,63", "causal window"),
             ("--swiglu --window-size 63", "left,right"),
             ("--swiglu --window-size 63,0 --window-attn-skip-freq [1,0]*3", "lists 6 layers"),
             ("--swiglu --window-size 63,0 --window-attn-skip-freq x", "integer or a list"),
             ("--swiglu --softmax-type sparse", "--softmax-type 'sparse'"),
             ("--swiglu --rope-type yarn", "multi-latent"),
             ("--swiglu --quick-geglu", "one MLP activation"),
             ("--glu-linear-offset 1.0", "gated MLP"),
             ("--swiglu --activation-func-clamp-value 0", "above 0")]
    for extra, match in cases:
        with pytest.raises(ValueError, match=match):
            read_megatron_args(base + extra)


def test_bridge_gpt_oss_fields_reach_the_same_flags():
    """A Megatron-Bridge config's GPT-OSS fields (GPTOSSProvider's window_size, window_attn_skip_freq,
    softmax_type, activation_func quick_gelu with its clamp and offset) read as the line does, the
    skip frequency as an integer or the provider's 0/1 list."""
    model = {"expert_model_parallel_size": 8, "num_moe_experts": 128, "moe_router_topk": 4,
             "window_size": [127, 0], "softmax_type": "learnable", "gated_linear_unit": True,
             "activation_func": "torch.nn.functional.quick_gelu", "activation_func_clamp_value": 7.0,
             "glu_linear_offset": 1.0}
    for freq in (2, [1, 0] * 18):
        rc = read_megatron_bridge({"train": {"global_batch_size": 64}, "model": {**model, "window_attn_skip_freq": freq}},
                                  model="gpt-oss-120b")
        assert (rc.model.sliding_window, rc.model.sliding_layers, rc.model.activation_clamp) == (128, 18, 7.0)
    with pytest.raises(ValueError, match="activation_func 'gelu' is not modelled"):
        read_megatron_bridge({"train": {"global_batch_size": 64}, "model": {**model, "activation_func": "gelu"}},
                             model="gpt-oss-120b")


def test_masked_softmax_fusion_off_is_said_where_the_attention_is_unfused():
    """``--no-masked-softmax-fusion`` (neutral until now) changes only the unfused attention's
    passes: said there, nothing said beside a fused attention kernel; NeMo 1's and Megatron-Bridge's
    ``masked_softmax_fusion`` reach the same flag."""
    base = "--global-batch-size 64 --no-masked-softmax-fusion"
    said = [a for a in read_megatron_args(base + " --transformer-impl local", model="llama3-8b").assumed
            if "masked-softmax" in a]
    assert said and "separate PyTorch passes" in said[0]
    assert not any("masked-softmax" in a for a in read_megatron_args(base, model="llama3-8b").assumed)
    bridge = read_megatron_bridge(None, ["train.global_batch_size=64", "model.masked_softmax_fusion=false",
                                         "model.attention_backend=unfused"], model="llama3-8b")
    assert any("masked-softmax" in a for a in bridge.assumed)
