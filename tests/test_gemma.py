"""Gemma 2 / 3's own ops, hand-worked: the post norms on the attention's and the MLP's outputs,
the final logits' soft cap and the attention scores' soft cap (priced where the attention runs
unfused), the post norms' inputs kept for their backward, and the readers that set them."""

import csv
from pathlib import Path

import pytest

from cosearch import graph, memory, models
from cosearch.plan import evaluate
from cosearch.runs.hf import hf_config_notes
from tests.test_hf_configs import GEMMA2_9B as _GEMMA2_9B
from tests.test_hf_configs import GEMMA3_1B

#: google/gemma-2-9b's config.json with its logit soft cap too ("final_logit_softcapping": 30.0)
GEMMA2_9B = dict(_GEMMA2_9B, final_logit_softcapping=30.0)


def _ops(model, tp=1, b=1, flash=True, sp=False):
    return {o.name: o for o in graph.build(model, tp, b, "fwd", flash_attention=flash, sequence_parallel=sp).ops}


def test_gemma2_reads_its_post_norms_and_soft_caps():
    """google/gemma-2-9b's config: post norms, logits capped at 30, scores at 50; Gemma 3 has the
    post norms and no caps; a Llama config neither.  The parameter count is the published one
    (the post norms' 2 x 42 x 3584 weights), and a bad cap is refused."""
    g2 = models.from_hf_config(GEMMA2_9B, seq_len=4096)
    assert g2.post_norms and (g2.logit_softcap, g2.attention_softcap) == (30.0, 50.0)
    assert g2.num_params() == pytest.approx(9_241_705_984, rel=1e-4)
    assert g2.num_params() - g2.with_(post_norms=False).num_params() == 2 * 42 * 3584
    g3 = models.from_hf_config(GEMMA3_1B, seq_len=512)
    assert g3.post_norms and (g3.logit_softcap, g3.attention_softcap) == (0.0, 0.0)
    assert not models.preset("llama3-8b").post_norms
    for bad in (-1.0, float("nan"), True, "30"):
        with pytest.raises(ValueError, match="logit_softcap must be a finite number"):
            g2.with_(logit_softcap=bad)
    with pytest.raises(ValueError, match="post_norms must be true or false"):
        g2.with_(post_norms=1)
    with pytest.raises(ValueError, match="final_logit_softcapping"):
        models.from_hf_config(dict(GEMMA2_9B, final_logit_softcapping="30"), seq_len=4096)


def test_the_layer_and_head_price_gemmas_ops_by_hand():
    """Gemma-2-9B, 2 sequences of 4,096 on one chip: each post norm an RMSNorm over 8,192 x 3,584
    values, between the output projection (or the down projection) and its residual add; the soft
    cap a 4-operation pass over the 8,192 x 256,000 logits before the loss; the scores' cap over
    2 x 16 heads x 4,096^2 scores where the attention runs unfused, none inside a fused kernel.
    Under sequence parallelism at tp 4 the post norms run on the rank's quarter of the rows."""
    g2 = models.from_hf_config(GEMMA2_9B, seq_len=4096)
    ops = _ops(g2, b=2)
    T, h = 2 * 4096, 3584
    for name in ("post_attn_norm", "post_mlp_norm"):
        assert ops[name].elements == T * h
        assert ops[name].ops_per_element == graph.VECTOR_OPS_PER_ELEMENT["rmsnorm"]
    names = list(ops)
    assert names.index("attn_out") < names.index("post_attn_norm") < names.index("residual1")
    assert names.index("fc2") < names.index("post_mlp_norm") < names.index("residual2")
    assert "attn_softcap" not in ops
    unfused = _ops(g2, b=2, flash=False)
    assert unfused["attn_softcap"].elements == 2 * 16 * 4096 * 4096
    assert unfused["attn_softcap"].ops_per_element == 4.0
    sp = _ops(g2, tp=4, b=2, sp=True)
    assert sp["post_attn_norm"].elements == T * h / 4
    heads = {o.name: o for o in graph._forward_head(g2, 1, 2)}
    assert heads["logit_softcap"].elements == T * graph.vocab_shard(256000, 1)
    names = list(heads)
    assert names.index("lm_head") < names.index("logit_softcap") < names.index("cross_entropy")
    plain = {o.name for o in graph._forward_head(g2.with_(logit_softcap=0.0), 1, 2)}
    assert "logit_softcap" not in plain
    llama = _ops(models.preset("llama3-8b"))
    assert "post_attn_norm" not in llama and "post_mlp_norm" not in llama


def test_the_post_norms_inputs_are_kept():
    """Without recompute each post norm keeps its input, the attention's and the MLP's outputs, 2
    bytes a value each: 2 x 2 x s x h bytes a sequence more than without them; under full
    recompute only the layer input, as before."""
    g2 = models.from_hf_config(GEMMA2_9B, seq_len=4096)
    plain = g2.with_(post_norms=False)
    for rc in ("none", "selective"):
        more = memory.layer_activation_bytes(g2, 1, 1, False, rc, True) - \
            memory.layer_activation_bytes(plain, 1, 1, False, rc, True)
        assert more == pytest.approx(2 * 2 * 4096 * 3584, rel=1e-12)
    assert memory.layer_activation_bytes(g2, 1, 1, False, "full") == memory.layer_activation_bytes(plain, 1, 1, False,
                                                                                                     "full")
    assert not memory.every_other_matmul_exact(g2, 1)


def test_maxtext_reruns_the_mlp_output_a_post_norm_reads():
    """Under a MaxText policy the MLP's down projection reruns where post norms read its output
    and mlpwo does not hold it (without post norms never); the post norm after it never reruns
    (its output only enters the residual sum), the one after the attention does (the next norm
    reads the residual sum it feeds)."""
    g2 = models.from_hf_config(GEMMA2_9B, seq_len=4096)
    none = graph.maxtext_policy("maxtext:out_proj=device")
    kept = graph.maxtext_policy("maxtext:mlpwo=device")
    rerun = graph._maxtext_rerun
    assert rerun("fc2", g2, none) == 1.0 and rerun("fc2", g2, kept) == 0.0
    assert rerun("fc2", g2.with_(post_norms=False), none) == 0.0
    assert rerun("post_mlp_norm", g2, none) == 0.0 and rerun("post_attn_norm", g2, none) == 1.0


def test_the_hf_reader_says_what_stays_unpriced():
    """The scores' soft cap is said (a fused kernel's is not priced); the logits' cap and the post
    norms are priced, so no longer said."""
    notes = hf_config_notes(GEMMA2_9B)
    assert any("attn_logit_softcapping 50.0" in n and "fused attention kernel" in n for n in notes)
    assert not any("final_logit_softcapping" in n or "post-attention" in n for n in notes)


def test_maxtext_reads_its_gemma_models():
    """MaxText's gemma2-9b (its yml: 21 [local, global] pairs, 42 layers of 3,584, 16 query / 8
    kv heads of 256, 4,096-token window on every other layer, soft caps 30 / 50, post norms, tied
    logits, vocabulary 256,128): 9.24B parameters, the published 9,241,705,984 plus MaxText's 128
    padded vocabulary rows; gemma3-27b: five local layers of every six (1,024 tokens) of 62, q/k
    norms, no caps; a key overrides its yml; one post norm without the other, another activation
    and a scaled model are refused; the scan's blocks are said."""
    from cosearch.runs.maxtext import read_maxtext
    base = ["per_device_batch_size=1", "ici_fsdp_parallelism=4", "max_target_length=8192"]
    r = read_maxtext(None, ["model_name=gemma2-9b", *base])
    m = r.model
    assert (m.num_layers, m.hidden, m.heads, m.kv_heads, m.head_dim, m.ffn_hidden, m.vocab) == \
        (42, 3584, 16, 8, 256, 14336, 256128)
    assert (m.sliding_window, m.sliding_layers, m.post_norms, m.logit_softcap, m.attention_softcap) == \
        (4096, 21, True, 30.0, 50.0)
    assert m.activation == "geglu" and m.tie_embeddings and m.qk_norm == "none"
    assert m.num_params() == 9_241_705_984 + 128 * 3584
    assert any("block of 2 layers" in a for a in r.assumed) and any("splash" in a for a in r.assumed)
    g3 = read_maxtext(None, ["model_name=gemma3-27b", *base]).model
    assert (g3.num_layers, g3.sliding_window, g3.sliding_layers, g3.qk_norm, g3.logit_softcap) == \
        (62, 1024, 62 - 10, "head", 0.0)
    short = read_maxtext(None, ["model_name=gemma2-9b", "base_num_decoder_layers=2", "final_logits_soft_cap=0",
                                *base]).model
    assert short.num_layers == 4 and short.logit_softcap == 0.0
    for extra, why in ((["use_post_ffw_norm=false"], "one post norm without the other"),
                       (['mlp_activations=["silu","linear"]'], "not modelled"),
                       (["global_parameter_scale=2"], "global_parameter_scale")):
        with pytest.raises(ValueError, match=why):
            read_maxtext(None, ["model_name=gemma2-9b", *base, *extra])


COMPILED = Path(__file__).parent.parent / "cosearch" / "data" / "maxtext_compiled_memory.csv"


def priced_v6e_recipe(tmp_path, model_name, batch, remat_policy="full", seq=8192):
    """MaxText's v6e Gemma recipe flags (``configs/tpu/v6e/gemma*.sh``) for ``model_name`` at
    ``batch`` sequences a chip, read by cosearch's reader and priced on the ``TPUv6e`` preset over
    256 chips: (the resolved run, its plan)."""
    from cosearch.runs import read_config
    script = tmp_path / f"{model_name}.sh"
    script.write_text("python3 -m maxtext.trainers.pre_train.train base.yml "
                      f"model_name={model_name} per_device_batch_size={batch} remat_policy={remat_policy} "
                      f"ici_fsdp_transpose_parallelism=256 ici_fsdp_parallelism=-1 max_target_length={seq} "
                      "dataset_type=synthetic attention=flash\n")
    d = read_config(script).resolve(256)
    return d, evaluate(d.model, "TPUv6e", 256, d.spec, d.global_batch, engine=d.engine, mem=d.memory)


@pytest.mark.parametrize("row", list(csv.DictReader(open(COMPILED, newline=""))), ids=lambda r: r["model_name"])
def test_maxtexts_gemma_recipes_against_the_compilers_peak(row, tmp_path):
    """MaxText's v6e Gemma recipes, compiled ahead of time for a v6e-256 (the compiler's
    arguments, temporaries and code a chip): cosearch's reader and plan price each within 15 % of
    the compiled peak (+1.1, -9.9, -0.3 %; the allocation's slack beyond the live buffers is XLA's
    packing, tests/test_zero3_head_phase.py), and as fitting the v6e as the compiled step does
    (the sum of the head's logits and a rerunning block priced them 20-46 % over, not fitting)."""
    from cosearch import hardware
    _, p = priced_v6e_recipe(tmp_path, row["model_name"], row["per_device_batch_size"], row["remat_policy"],
                             row["max_target_length"])
    compiled = sum(float(row[k]) for k in ("argument_bytes", "temp_bytes", "code_bytes"))
    priced = max(p.memory_per_chip_bytes)
    assert compiled < hardware.preset("TPUv6e").hbm_bytes and p.feasible
    assert abs(priced / compiled - 1.0) < 0.15
