"""Multi-token prediction (ModelConfig.mtp_layers): its parameters by hand, and its price on the
last pipeline stage against the same model with one layer more plus the head run again."""

import pytest

from cosearch import cluster, models
from cosearch.plan import PlanSpec, evaluate, unit_costs


def test_mtp_parameters_by_hand():
    """DeepSeek-V3 with one MTP module: one MoE layer, the 2 x 7168 -> 7168 projection and three
    RMSNorms (7168 each) more; the model FLOPs (MFU) stay the main model's."""
    m = models.preset("deepseek-v3")
    x = m.with_(mtp_layers=1)
    assert x.num_params() - m.num_params() == m.layer_params() + 2 * 7168 * 7168 + 3 * 7168
    assert x.num_params(active=True) - m.num_params(active=True) == m.layer_params(True) + 2 * 7168 ** 2 + 3 * 7168
    assert x.flops_per_token() == m.flops_per_token()
    with pytest.raises(ValueError, match="mtp_layers"):
        m.with_(mtp_layers=-1)


def test_mtp_runs_a_layer_and_the_head_again_on_the_last_stage():
    """One stage (first and last): forward with MTP = forward of the model with one layer more
    (the MTP layer) + the head's forward again, times 1 + 2h / V for the 2h -> h projection."""
    base = models.preset("llama2-7b").with_(num_layers=4, seq_len=512)
    mtp = base.with_(mtp_layers=1)
    more = base.with_(num_layers=5)
    cl = cluster.preset("dgx-h100", 1)
    spec = PlanSpec(8, 1, 1, 1, flash_attention=True)
    fwd = {k: evaluate(m, "H100", cl, spec, 64).breakdown["forward_s"] for k, m in
           (("base", base), ("mtp", mtp), ("more", more))}
    from cosearch.hardware import H100
    u = unit_costs(base, H100, cl, (1,), (1,), (False,), True)[0, 0, 0, 0]
    from cosearch._kernels import formulas as F
    head = u[F.U_HF] * 8                               # 8 microbatches a step
    assert fwd["mtp"] == pytest.approx(fwd["more"] + head * (1 + 2 * base.hidden / base.vocab), rel=1e-9)
    assert fwd["mtp"] > fwd["more"] > fwd["base"]


def test_megatron_lines_and_bridge_dumps_read_the_mtp_depth():
    from cosearch.runs.megatron import read_megatron_args
    from cosearch.runs.nemo import read_megatron_bridge
    line = "--num-layers 4 --hidden-size 256 --num-attention-heads 4 --seq-length 128 --vocab-size 1000 "
    assert read_megatron_args(line + "--mtp-num-layers 1").model.mtp_layers == 1
    assert read_megatron_args(line).model.mtp_layers == 0
    ds = read_megatron_args("--mtp-num-layers 1 --micro-batch-size 1", model=models.preset("deepseek-v3"))
    assert ds.model.mtp_layers == 1 and ds.model.num_layers == 61
    with pytest.raises(ValueError, match="--mtp-num-layers must be at least 0"):
        read_megatron_args(line + "--mtp-num-layers -1")
    b = read_megatron_bridge({"model": {"num_layers": 4, "hidden_size": 256, "num_attention_heads": 4,
                                        "seq_length": 128, "vocab_size": 1000, "mtp_num_layers": 2}})
    assert b.model.mtp_layers == 2
