"""Pipeline send/receive overlap (Megatron-Core's ``overlap_p2p_comm``): the stage formula
against hand-worked costs, and the readers turning it on exactly where a run's config does."""

import numpy as np
import pytest

from cosearch import cluster, hardware, models
from cosearch._kernels import formulas as F
from cosearch.engine import megatron_core
from cosearch.plan import PlanSpec, evaluate
from cosearch.runs.megatron import read_megatron_args
from cosearch.runs.nemo import read_megatron_bridge, read_nemo1

NET = np.array([0.0, 1e9, 1e9, 0.0, 0.0, 0.0])          # flat, 1 GB/s, no latency


def _stage(x_s: float, overlap: bool, v: int = 2, m: int = 8, pp: int = 4):
    """An interior stage of 2 layers (forward 0.5 s, backward 1.0 s each per microbatch) whose
    every pipeline exchange takes ``x_s``."""
    hw = np.zeros(F.NH)
    hw[F.H_HBM], hw[F.H_MEMBW], hw[F.H_P2PO] = 1e30, 1.0, 1.0 if overlap else 0.0
    u = np.zeros(F.NU)
    u[F.U_LF], u[F.U_LB], u[F.U_P2P_BYTES] = 0.5, 1.0, x_s * 1e9
    out = np.zeros(F.NB)
    cost, _ = F.stage_terms.py_func(u, NET, hw, 2.0, False, False, 1, pp, v, m, 1.0, 1.0, 0, 1.0, F.RC_NONE, out)
    return cost, out


@pytest.mark.parametrize("x_s,off_cost,on_cost,on_p2p", [
    # per microbatch: forward 1 s, backward 2 s over v = 2 chunks (0.5 s and 1 s a chunk);
    # 2 v = 4 exchanges of x.  Off: T = 3 + 4x, cost = 8 T + 3/2 T.
    # On: the forward exchange beside a 1 s backward chunk, the backward one beside a 0.5 s
    # forward chunk: exposed v (max(0, x - 1) + max(0, x - 0.5)); the fill keeps all 4x.
    (0.3, 9.5 * 4.2, 8 * 3.0 + 1.5 * 4.2, 0.0),
    (0.8, 9.5 * 6.2, 8 * 3.6 + 1.5 * (3.6 + 3.2 - 0.6), 0.6),
    (1.5, 9.5 * 9.0, 8 * 6.0 + 1.5 * (6.0 + 6.0 - 3.0), 3.0),     # 2 (0.5 + 1.0) = 3 exposed
])
def test_overlapped_exchanges_expose_only_what_exceeds_the_chunk_beside_them(x_s, off_cost, on_cost, on_p2p):
    off, _ = _stage(x_s, False)
    on, out = _stage(x_s, True)
    assert off == pytest.approx(off_cost, rel=1e-12)
    assert on == pytest.approx(on_cost, rel=1e-12)
    assert out[F.BREAKDOWN_FIELDS.index("pp_p2p_s")] == pytest.approx(8 * on_p2p, rel=1e-12, abs=1e-12)


def test_without_virtual_stages_the_switch_changes_nothing():
    """Megatron-LM's validate_args turns overlap_p2p_comm off without the interleaved schedule."""
    assert _stage(0.8, True, v=1)[0] == _stage(0.8, False, v=1)[0]


def test_evaluate_hides_the_sends_of_an_interleaved_plan():
    m = models.preset("gpt3-1.3b")
    cl = cluster.dgx_h100(4)
    spec = PlanSpec(8, 1, 4, 1, virtual_stages=2)
    off = evaluate(m, hardware.H100, cl, spec, 64, engine=megatron_core())
    on = evaluate(m, hardware.H100, cl, spec, 64, engine=megatron_core(overlap_p2p_comm=True))
    assert off.breakdown["pp_p2p_s"] > 0.0 and on.breakdown["pp_p2p_s"] == 0.0
    # the steady state loses its exchanges; the fill and drain keep them
    assert on.step_time_s == pytest.approx(off.step_time_s - off.breakdown["pp_p2p_s"], rel=1e-9)
    assert on.breakdown["bubble_s"] == pytest.approx(off.breakdown["bubble_s"], rel=1e-9)


LINE = ("--num-layers 24 --hidden-size 2048 --num-attention-heads 16 --seq-length 2048 --vocab-size 50257 "
        "--pipeline-model-parallel-size 4 --micro-batch-size 1 --global-batch-size 64 --bf16")


def test_megatron_lines_take_megatrons_default_with_virtual_stages():
    """Megatron-LM (arguments.py): ``--no-overlap-p2p-communication`` stores False, default True;
    without virtual stages validate_args turns it off."""
    v = " --num-virtual-stages-per-pipeline-rank 2"
    assert read_megatron_args(LINE + v).engine.overlap_p2p_comm
    assert not read_megatron_args(LINE + v + " --no-overlap-p2p-communication").engine.overlap_p2p_comm
    assert read_megatron_args(LINE + v + " --overlap-p2p-communication").engine.overlap_p2p_comm
    r = read_megatron_args(LINE + " --overlap-p2p-communication")
    assert not r.engine.overlap_p2p_comm and any("validate_args" in a for a in r.assumed)


def _nemo1(**model):
    base = {"trainer": {"num_nodes": 4, "devices": 8, "precision": "bf16"},
            "model": {"micro_batch_size": 1, "global_batch_size": 64, "tensor_model_parallel_size": 1,
                      "pipeline_model_parallel_size": 4, "virtual_pipeline_model_parallel_size": 2,
                      "encoder_seq_length": 2048, "num_layers": 24, "hidden_size": 2048,
                      "ffn_hidden_size": 8192, "num_attention_heads": 16, "megatron_amp_O2": True,
                      "tokenizer": {"type": "GPT2BPETokenizer"}}}
    base["model"].update(model)
    return base


def test_nemo1_reads_overlap_p2p_comm_with_nemos_default_off():
    """NeMo 1 (megatron_base_model: ``cfg.get('overlap_p2p_comm', False)``)."""
    assert read_nemo1(_nemo1(overlap_p2p_comm=True)).engine.overlap_p2p_comm
    assert not read_nemo1(_nemo1(overlap_p2p_comm=False)).engine.overlap_p2p_comm
    assert not read_nemo1(_nemo1()).engine.overlap_p2p_comm


def test_bridge_reads_overlap_p2p_comm_and_refuses_a_contradiction():
    base = ["model.num_layers=24", "model.hidden_size=2048", "model.ffn_hidden_size=8192",
            "model.num_attention_heads=16", "model.seq_length=2048", "model.vocab_size=50257",
            "model.pipeline_model_parallel_size=4", "model.virtual_pipeline_model_parallel_size=2",
            "train.micro_batch_size=1", "train.global_batch_size=64"]
    assert read_megatron_bridge({}, base).engine.overlap_p2p_comm           # CommOverlapConfig's rule
    assert not read_megatron_bridge({}, base + ["comm_overlap.overlap_p2p_comm=false"]).engine.overlap_p2p_comm
    with pytest.raises(ValueError, match="contradict"):
        read_megatron_bridge({}, base + ["comm_overlap.overlap_p2p_comm=false", "model.overlap_p2p_comm=true"])


def test_nemo_rows_read_their_releases_launcher_configs():
    """The launcher files at each release's tag: Llama 2 70B overlaps TP and sends at 24.07; GPT-3
    175B only its sends at 24.07 but neither at 24.03; fine-tuning rows neither; a model or
    release outside the table takes NeMo 1's defaults (off) and says so."""
    from cosearch.runs.rows import nemo_launcher_overlap
    sw = {"software": "NeMo 24.07 container"}
    assert nemo_launcher_overlap({"id": "nemo-24.07/LLAMA2-70B/pretrain/64", **sw}) == (True, True, "")
    assert nemo_launcher_overlap({"id": "nemo-24.07/GPT3-175B/pretrain/128", **sw}) == (False, True, "")
    assert nemo_launcher_overlap({"id": "x/GPT3-175B/pretrain/128", "software": "NeMo 24.03"}) == (False, False, "")
    assert nemo_launcher_overlap({"id": "nemo-24.07/LLAMA3.1-405B/pretrain/576", **sw}) == (True, True, "")
    assert nemo_launcher_overlap({"id": "nemo-24.07/LLAMA2-70B/SFT/16", **sw}) == (False, False, "")
    tp, p2p, why = nemo_launcher_overlap({"id": "nemo-24.12/Unknown-1B/pretrain/8", "software": "NeMo 24.12"})
    assert (tp, p2p) == (False, False) and "not known" in why
