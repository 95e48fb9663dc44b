"""Megatron launch scripts that build their argument line in bash (cosearch.runs.shell): the
line each script below builds, worked out by hand as bash expands it, and the Megatron reader's
reading of a script against its reading of the hand-expanded line."""

import pytest

from cosearch.runs import read_config, read_megatron_args
from cosearch.runs.shell import is_bash_script, launch_words

SCRIPT = r"""#!/bin/bash
export CUDA_DEVICE_MAX_CONNECTIONS=1
GPUS_PER_NODE=8
NUM_NODES=${NUM_NODES:-2}
WORLD_SIZE=$(($GPUS_PER_NODE*$NUM_NODES))
CHECKPOINT_PATH=$1 # the user's
DTYPE=${DTYPE:-"fp8"}
TP=2

DISTRIBUTED_ARGS=(
    --nproc_per_node $GPUS_PER_NODE   # one process a GPU (flash/fused)
    --nnodes $NUM_NODES
)

MODEL_ARGS=(
    --num-layers 32
    --hidden-size 4096
    --num-attention-heads 32
    --seq-length 4096
    --vocab-size 128256
    --swiglu
    --normalization RMSNorm
    --position-embedding-type rope
)

TRAINING_ARGS=(
    --micro-batch-size 2
    --global-batch-size $((16 * 8))
    --bf16
)

DTYPE_ARGS=()
if [[ "$DTYPE" == "fp8" ]] || [[ -z "$DTYPE" ]]; then
    DTYPE_ARGS+=(
        "--fp8-format hybrid"
        "--fp8-recipe tensorwise"
    )
elif [ "$DTYPE" = "bf16" ]; then
    DTYPE_ARGS+=(--no-such-flag)
else
    DTYPE_ARGS+=(--neither)
fi

if [ -n "${WANDB_API_KEY}" ]; then
    TRAINING_ARGS+=( --wandb-project x )
fi

PARALLEL_ARGS=( --tensor-model-parallel-size ${TP} --sequence-parallel )
TRAINING_ARGS+=("${PARALLEL_ARGS[@]}")

if [ ! -f "$CHECKPOINT_PATH/x" ]; then
    echo "no checkpoint"
fi

torchrun ${DISTRIBUTED_ARGS[@]} pretrain_gpt.py \
    ${MODEL_ARGS[@]} \
    ${TRAINING_ARGS[@]} \
    ${DTYPE_ARGS[@]} \
    --save "$CHECKPOINT_PATH" --world $WORLD_SIZE
"""

#: The line bash builds from SCRIPT with no environment and no arguments, by hand: NUM_NODES
#: 2 (its default), WORLD_SIZE 16, DTYPE fp8 (so the first branch), WANDB_API_KEY unset (no
#: wandb), the quoted "--fp8-format hybrid" elements split by the unquoted ${DTYPE_ARGS[@]},
#: "${PARALLEL_ARGS[@]}" appended element by element, $1 the user's argument.
EXPANDED = ("torchrun --nproc_per_node 8 --nnodes 2 pretrain_gpt.py --num-layers 32 --hidden-size 4096 "
            "--num-attention-heads 32 --seq-length 4096 --vocab-size 128256 --swiglu --normalization RMSNorm "
            "--position-embedding-type rope --micro-batch-size 2 --global-batch-size 128 --bf16 "
            "--tensor-model-parallel-size 2 --sequence-parallel --fp8-format hybrid --fp8-recipe tensorwise "
            "--save <$1> --world 16")


def test_the_line_bash_builds():
    assert is_bash_script(SCRIPT) and not is_bash_script("--num-layers 2 --hidden-size 8\n")
    words, notes = launch_words(SCRIPT, "train.sh")
    assert words == EXPANDED.split()
    assert any("fresh shell" in n for n in notes)


def test_quoting_defaults_and_commands_kept_in_strings():
    """Quoted array expansion keeps each element whole, unquoted splits it; ${X:-d} takes d when X
    is unset or empty, ${X-d} only when unset; an environment prefix makes a command, not an
    assignment; a command kept in a string is the launch line when it names the script."""
    s = ('A=( "x y" z )\nE=\nB=${E:-d1}\nC=${E-d2}\nOUT="${A[@]}"\n'
         'CMD="cd /w; python /w/pretrain_gpt.py ${A[@]} $B [$C] $OUT"\nNCCL_DEBUG=INFO echo "$CMD"\n')
    words, _ = launch_words(s, "s")
    assert words == ["python", "/w/pretrain_gpt.py", "x", "y", "z", "d1", "[]", "x", "y", "z"]
    words, _ = launch_words('A=( "--a 1" --b )\nCUDA_X=1 python train.py "${A[@]}" ${A[@]}\n', "s")
    assert words == ["python", "train.py", "--a 1", "--b", "--a", "1", "--b"]
    # ${X:=d} assigns its default as well as giving it
    assert launch_words('echo ${N:=4}\npython t.py $N\n', "s")[0] == ["python", "t.py", "4"]


def test_transformer_engine_and_nccl_settings_are_said_or_refused():
    """The NVTE_* / NCCL_* variables a script sets reach the training process: the deterministic
    attention backward, NCCL's algorithm and the norms' SM margins are said; both fused attention
    backends off is refused unless the line names its --attention-backend; InfiniBand transport and
    logging settings are neutral."""
    s = ('export NVTE_ALLOW_NONDETERMINISTIC_ALGO=0\nexport NCCL_ALGO=^NVLS\nexport NCCL_IB_SL=1\n'
         'NVTE_FWD_LAYERNORM_SM_MARGIN=16 python pretrain_gpt.py --num-layers 2\n')
    _, notes = launch_words(s, "s")
    said = " | ".join(notes)
    assert "deterministic fused attention backward" in said and "NCCL_ALGO=^NVLS" in said
    assert "NVTE_FWD_LAYERNORM_SM_MARGIN=16" in said and "NCCL_IB_SL" not in said
    off = "export NVTE_FLASH_ATTN=0\nexport NVTE_FUSED_ATTN=0\npython pretrain_gpt.py --num-layers 2"
    with pytest.raises(ValueError, match="NVTE_FLASH_ATTN=0 and NVTE_FUSED_ATTN=0"):
        launch_words(off + "\n", "s")
    words, _ = launch_words(off + " --attention-backend unfused\n", "s")
    assert words[-2:] == ["--attention-backend", "unfused"]
    # an unset ${X} leaves the variable empty: nothing to say
    _, notes = launch_words("export NVTE_ALLOW_NONDETERMINISTIC_ALGO=${X}\npython t.py\n", "s")
    assert not any("NVTE" in n for n in notes)


def test_here_documents_are_data_not_statements():
    """An sbatch here-document's body (a job script) is the command's input: its assignments and
    commands are not this script's."""
    s = ("A=(--x 1)\npython t.py ${A[@]}\nsbatch <<EOF\nA=(--y 2)\npython other.py ${A[@]}\nEOF\n"
         "cat <<-'END'\n\tpython third.py\n\tEND\necho done\n")
    assert launch_words(s, "s")[0] == ["python", "t.py", "--x", "1"]


def test_what_is_not_evaluated_is_refused_where_it_would_change_the_line():
    with pytest.raises(ValueError, match="`\\[ -f x \\]` decides whether A is set"):
        launch_words("if [ -f x ]; then\n A=(--x)\nfi\npython t.py ${A[@]}\n", "s")
    with pytest.raises(ValueError, match="a loop, case or function sets A"):
        launch_words("for i in 1 2; do\n A=(--x)\ndone\npython t.py\n", "s")
    with pytest.raises(ValueError, match="no launch line"):
        launch_words("A=(--x)\necho ${A[@]}\n", "s")
    # a loop over the script's own arguments never runs on a run without any
    words, notes = launch_words('A=1\nwhile [[ $# -gt 0 ]]; do\n case $1 in\n  --a) A=2 ;;\n esac\n shift\ndone\n'
                                'python t.py --x $A\n', "s")
    assert words == ["python", "t.py", "--x", "1"] and any("loops over the script's arguments" in n for n in notes)


@pytest.mark.parametrize("text", ["python t.py `", "python t.py $", "python t.py ${", "A=(\npython t.py",
                                  "if [[\npython t.py", "python t.py $((1/0)) $((", "fi\npython t.py", "'\"",
                                  "python t.py \"${A[@]"])
def test_malformed_scripts_are_read_or_refused_by_name(text):
    """A cut or unbalanced script: a line, or a ValueError naming the problem, never a crash."""
    try:
        words, _ = launch_words(text, "s")
    except ValueError as e:
        assert str(e).startswith("s:")
    else:
        assert "t.py" in words


def test_a_launch_script_reads_as_its_expanded_line(tmp_path):
    f = tmp_path / "train.sh"
    f.write_text(SCRIPT.replace(" --world $WORLD_SIZE", ""))
    script = read_config(f).resolve(16)
    line = read_megatron_args(EXPANDED.split("pretrain_gpt.py ", 1)[1].replace(" --world 16", "")).resolve(16)
    assert script.spec == line.spec and script.engine == line.engine and script.global_batch == line.global_batch == 128
    assert script.model.with_(name="x") == line.model.with_(name="x")
    assert (script.spec.tp, script.spec.dp, script.spec.precision, script.spec.scaling_recipe) == (2, 8, "fp8", "tensorwise")
    assert any("fresh shell" in a for a in script.assumed)


BASE = ("--num-layers 4 --hidden-size 1024 --num-attention-heads 16 --seq-length 2048 --vocab-size 32000 "
        "--micro-batch-size 1 --global-batch-size 64 --bf16 --position-embedding-type rope")


def test_neutral_flags_of_megatron_examples_leave_the_plan():
    """Megatron-LM's own Llama 3 example's flags that change neither step time nor memory."""
    extra = (" --apply-layernorm-1p --decoupled-lr 5e-4 --decoupled-min-lr 4.5e-5 --empty-unused-memory-level 1 "
             "--fp8-amax-history-len 1024 --fp8-amax-compute-algo max --tiktoken-pattern v2 --profile "
             "--profile-step-start 4 --profile-step-end 6 --no-position-embedding")
    a, b = read_megatron_args(BASE).resolve(8), read_megatron_args(BASE + extra).resolve(8)
    assert a.spec == b.spec and a.engine == b.engine and a.model == b.model
    with pytest.raises(ValueError, match="--no-position-embedding with learned absolute"):
        read_megatron_args(BASE.replace("rope", "learned_absolute") + " --no-position-embedding")


@pytest.mark.parametrize("flags, reduce_bytes", [
    ("", 4.0),                                                             # Megatron's DDP: fp32 for a bf16 run
    (" --use-megatron-fsdp", 2.0),                                         # auto: the model's bf16
    (" --use-megatron-fsdp --megatron-fsdp-main-grads-dtype fp32", 4.0),
    (" --use-megatron-fsdp --megatron-fsdp-main-grads-dtype fp32 --megatron-fsdp-grad-comm-dtype bf16", 2.0),
    (" --megatron-fsdp-main-grads-dtype bf16", 4.0)])                      # inert without Megatron-FSDP
def test_megatron_fsdp_gradient_dtypes(flags, reduce_bytes):
    """Megatron-FSDP reduces gradients in --megatron-fsdp-grad-comm-dtype, 'auto' its main-grads
    dtype, 'auto' the model's own (DistributedDataParallelConfig's docstrings)."""
    d = read_megatron_args(BASE + " --use-distributed-optimizer" + flags).resolve(8)
    assert (d.engine.grad_reduce_bytes or 2.0) == reduce_bytes          # None: the bf16 default
    if "--use-megatron-fsdp" not in flags and "fsdp" in flags:
        assert any("inert without --use-megatron-fsdp" in a for a in d.assumed)
    with pytest.raises(ValueError, match="--megatron-fsdp-grad-comm-dtype 'fp8'"):
        read_megatron_args(BASE + " --use-megatron-fsdp --megatron-fsdp-grad-comm-dtype fp8")


@pytest.mark.parametrize("scale, scales", [(1, (0, 0, 0, 0)), (2, (0, 1, 1, 0)), (4, (1, 1, 1, 0)), (8, (1, 1, 1, 1)),
                                           (16, (1, 2, 2, 1)), (128, (2, 3, 3, 2)), (1024, (3, 4, 4, 3))])
def test_maxtext_parameter_scales(scale, scales):
    """MaxText's get_individual_scales by hand: log2(scale) = 3 b + r; heads and MLP 2^(b + (r > 0)),
    the embedding 2^(b + (r > 1)), the layers 2^b."""
    from cosearch.runs.maxtext import parameter_scales
    assert parameter_scales(scale) == scales


MAXTEXT_SCRIPT = r"""#!/bin/bash
set -e
export EXECUTABLE="train"
for ARGUMENT in "$@"; do
    IFS='=' read -r KEY VALUE <<< "$ARGUMENT"
    export "$KEY"="$VALUE"
done
if [ -n "$RUN_NAME" ]; then
    export M_RUN_NAME=$RUN_NAME
fi
export LIBTPU_INIT_ARGS="--xla_tpu_enable_data_parallel_all_reduce_opt=true"
python3 -m maxtext.trainers.pre_train.$EXECUTABLE "${MAXTEXT_CONFIGS_DIR:-${MAXTEXT_REPO_ROOT:-$PWD}/src/maxtext/configs}"//base.yml\
    steps=15 per_device_batch_size=2 enable_checkpointing=false remat_policy=full global_parameter_scale=16\
    max_target_length=2048 base_output_directory=$OUTPUT_PATH dataset_type=synthetic attention='flash'\
    fused_qkv=True fused_mlp=True
"""


def test_a_maxtext_launch_script_reads_as_its_overrides(tmp_path):
    """MaxText's own configs/tpu/*.sh shape: the trainer module's key=value words, read as MaxText
    reads them; scale 16 on base.yml's 2048 x 16 heads x 7168 x 16 layers (the reader's base
    defaults) gives 4096, 64 heads (and K/V heads), 28672, 32 layers."""
    from cosearch.runs.files import detect_format
    f = tmp_path / "16b.sh"
    f.write_text(MAXTEXT_SCRIPT)
    assert detect_format(f) == "maxtext"
    d = read_config(f).resolve(256)
    m = d.model
    assert (m.hidden, m.heads, m.kv_heads, m.ffn_hidden, m.num_layers, m.seq_len) == (4096, 64, 64, 28672, 32, 2048)
    assert (d.spec.microbatch, d.spec.recompute, d.global_batch) == (2, "full", 512)
    f.write_text(MAXTEXT_SCRIPT.replace("global_parameter_scale=16", "global_parameter_scale=12"))
    with pytest.raises(ValueError, match="global_parameter_scale 12 is not a power of two"):
        read_config(f)
    f.write_text(MAXTEXT_SCRIPT.replace("//base.yml", "/models/llama2-7b.yml"))
    with pytest.raises(ValueError, match="starts from .*llama2-7b.yml; give that YAML"):
        read_config(f)
