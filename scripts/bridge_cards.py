"""What made ``bench/validation/bridge_cards.jsonl``: measured runs outside the validation set,
from Megatron-Bridge's model verification cards (``examples/model_verification_cards/<model>/card.yaml``
in NVIDIA-NeMo/Megatron-Bridge, read at commit 067f987df of 2026-08-22), in the validation schema
so that ``cosearch runs check`` and the fidelity bench read them as they read the validation rows.

Each card item (``pretrain_performance.<GPU>``, ``pretrain_weak_scaling.GB300``) gives the recipe
it ran, the Megatron-Bridge commit (``bridge_commit``; where a card gives none, the commit that
recorded the item), its last-ten-steps mean step time, model TFLOP/s and tokens/s per GPU, and in
its text the parallel layout, batch and the features it turned on.  A row takes the model's
architecture fields from the validation row of the same model (``moe_runs.jsonl``), the card's
numbers and layout, and cites the recipe at that commit, so the reader takes the EP all-to-all
overlap, the dispatcher, the op fuser and the loss from the recipe's own source
(``scripts/megatron_bridge_moe_dispatch.py`` parses it into ``cosearch/data/
megatron_bridge_moe_dispatch.json``); the CUDA graphs and recompute modules are written in the
notes as each recipe sets them (read by hand, lines in ``bench/validation/BRIDGE_CARDS.md``).

GPT-OSS-120B on GB200 (BF16) cites no dispatcher: its recipe names DeepEP, which Megatron-Bridge's
``apply_flex_dispatcher_backend`` replaces with the all-to-all dispatcher on GB200
(``training/flex_dispatcher_backend.py``: DeepEP on Ampere, Hopper, B200 and B300 only).

Usage (from the repository root)::

    python scripts/bridge_cards.py bench/validation/moe_runs.jsonl bench/validation/bridge_cards.jsonl
"""

from __future__ import annotations

import copy
import json
import sys

MB = "NVIDIA-NeMo/Megatron-Bridge"
CARDS_AT = "067f987df"
BALANCED = "token-dropless with forced expert load balancing (the recipe's moe_router_force_load_balancing)"
FULL = "cuda_graph=full_iteration scope=[]"
#: the notes of a recipe with full-iteration CUDA graphs, HybridEP and the EP all-to-all overlap
HYBRIDEP = f"{FULL}; moe dispatcher backend=hybridep; EP a2a overlap on; {BALANCED}"
Q, D, G = ("src/megatron/bridge/perf_recipes/" + f for f in ("qwen", "deepseek", "gpt_oss"))
#: recipes whose source names no dispatcher the row can cite (module docstring: GPT-OSS on GB200)
CITES_NO_DISPATCHER = {"gpt_oss_120b_pretrain_64gpu_gb200_bf16_config"}

#: (base validation row, card model folder, card item, GPU, commit, recipe file, recipe, step ms,
#: tokens/s/GPU, model TFLOP/s/GPU, notes, changes to the base row)
CARDS = [
    ("mbridge-26.06/Qwen3_30B_a3B/H100/FP8_CS/16/gbs1024", "qwen3-30b-a3b", "pretrain_performance", "H100",
     "3a9559f01", f"{Q}/h100/qwen3_moe.py", "qwen3_30b_a3b_pretrain_16gpu_h100_bf16_config", 20147.290, 13011.378,
     299.352, "cuda_graph=transformer_engine scope=[moe_router, moe_preprocess]; moe dispatcher backend=hybridep; "
     f"EP a2a overlap on; {BALANCED}",
     dict(precision="BF16", etp=1, recompute="none (the default recipe sets recompute_granularity=None)")),
    ("mbridge-26.08/Qwen3_30B_a3B/GB200/FP8_MX/8/gbs512", "qwen3-30b-a3b", "pretrain_performance", "GB200",
     "6e1b47893", f"{Q}/gb200/qwen3_moe.py", "qwen3_30b_a3b_pretrain_8gpu_gb200_fp8mx_config", 6501.120, 40322.898,
     927.680, HYBRIDEP, {}),
    ("mbridge-26.08/Qwen3_30B_a3B/GB300/FP8_MX/8/gbs512", "qwen3-30b-a3b", "pretrain_performance", "GB300",
     "048058687", f"{Q}/gb300/qwen3_moe.py", "qwen3_30b_a3b_pretrain_8gpu_gb300_fp8mx_config", 5854.910, 44773.361,
     1030.070, HYBRIDEP, {}),
    *[("mbridge-26.08/Qwen3_30B_a3B/GB300/FP8_MX/8/gbs512", "qwen3-30b-a3b", "pretrain_weak_scaling", "GB300",
       "fbb7570cf", f"{Q}/gb300/qwen3_moe.py", "qwen3_30b_a3b_pretrain_8gpu_gb300_fp8mx_config", ms, tok, tf,
       HYBRIDEP,
       dict(n_gpus=n, gbs=64 * n, id=f"mbridge-card/Qwen3_30B_a3B/GB300/FP8_MX/{n}/gbs{64 * n}/weak-scaling"))
      for n, ms, tok, tf in ((8, 5889.420, 44511.004, 1024.020), (32, 5814.290, 45086.158, 1037.270),
                             (128, 5831.720, 44951.404, 1034.180), (256, 5818.620, 45052.607, None))],
    ("mbridge-26.08/Qwen3_235B_a22B/GB300/FP8_MX/256/gbs8192", "qwen3-235b-a22b", "pretrain_performance", "GB300",
     "fbb7570cf", f"{Q}/gb300/qwen3_moe.py", "qwen3_235b_a22b_pretrain_256gpu_gb300_fp8mx_config", 14920.840,
     8784.492, 1300.440, HYBRIDEP, {}),
    ("mbridge-26.08/Qwen3_235B_a22B/GB200/FP8_MX/256/gbs8192", "qwen3-235b-a22b", "pretrain_performance", "GB200",
     "048058687", f"{Q}/gb200/qwen3_moe.py", "qwen3_235b_a22b_pretrain_256gpu_gb200_fp8mx_config", 17905.340,
     7320.274, 1083.660, HYBRIDEP, {}),
    ("mbridge-26.08/DeepSeekV3/GB200/FP8_MX/256/gbs4096", "deepseek-v3", "pretrain_performance", "GB200",
     "6d9a87d6a", f"{D}/gb200/deepseek_v3.py", "deepseek_v3_pretrain_256gpu_gb200_fp8mx_config", 13841.180,
     4734.856, 1231.040, HYBRIDEP, {}),
    ("mbridge-26.08/DeepSeekV3/GB300/FP8_MX/256/gbs4096", "deepseek-v3", "pretrain_performance", "GB300",
     "6d9a87d6a", f"{D}/gb300/deepseek_v3.py", "deepseek_v3_pretrain_256gpu_gb300_fp8mx_config", 10667.300,
     6143.635, 1597.310, HYBRIDEP, {}),
    ("mbridge-26.08/DeepSeekV3/GB200/FP8_MX/256/gbs4096", "deepseek-v3", "pretrain_performance", "H100",
     "6d9a87d6a", f"{D}/h100/deepseek_v3.py", "deepseek_v3_pretrain_1024gpu_h100_bf16_config", 61756.130,
     1061.206, 276.030, f"moe dispatcher backend=hybridep; TP comm overlap off; grad reduce overlap off; {BALANCED}",
     dict(n_gpus=1024, gbs=16384, accel="H100-SXM-80GB (DGX)", gen="Hopper", gpus_per_node=8, tp=2, pp=8, vp=4,
          ep=64, etp=1, sp=True, precision="BF16",
          recompute="selective: mla_up_proj,mlp (the perf recipe's recompute_modules)")),
    ("mbridge-26.08/DeepSeekV4_Flash/GB200/FP8_MX/128/gbs2048", "deepseek-v4-flash", "pretrain_performance", "GB200",
     "cc59a637a", f"{D}/gb200/deepseek_v4.py", "deepseek_v4_flash_pretrain_128gpu_gb200_fp8mx_config", 8134.600,
     8056.450, 731.400, f"{FULL}; moe dispatcher backend=hybridep; {BALANCED}", {}),
    ("mbridge-26.08/DeepSeekV4_Flash/GB300/FP8_MX/128/gbs2048", "deepseek-v4-flash", "pretrain_performance", "GB300",
     "c93251151", f"{D}/gb300/deepseek_v4.py", "deepseek_v4_flash_pretrain_128gpu_gb300_fp8mx_config", 7840.320,
     8358.842, 759.280, f"{FULL}; moe dispatcher backend=hybridep; {BALANCED}", {}),
    ("mbridge-26.04.01/GPT_OSS_120B/GB200/BF16/64/gbs1280", "gpt-oss-120b", "pretrain_performance", "GB200",
     "894d55832", f"{G}/gb200/gpt_oss.py", "gpt_oss_120b_pretrain_64gpu_gb200_bf16_config", 4995.630, 16398.332,
     535.230, f"EP a2a overlap on; {BALANCED}", {}),
    ("mbridge-26.08/GPT_OSS_120B/GB300/FP8_MX/64/gbs1280", "gpt-oss-120b", "pretrain_performance", "GB300",
     "048058687", f"{G}/gb300/gpt_oss.py", "gpt_oss_120b_pretrain_64gpu_gb300_fp8mx_config", 2481.140, 33017.081,
     1077.350, HYBRIDEP, {}),
]


def card_row(base: dict, model_dir, item, gpu, commit, recipe_file, recipe, step_ms, tok, tflops, notes, changes):
    """One card item as a validation-schema row (module docstring)."""
    r = copy.deepcopy(base)
    r.update(changes)
    r["dp"] = r["n_gpus"] // (r["tp"] * r["pp"] * r["cp"])
    r["ga"] = r["gbs"] // (r["mbs"] * r["dp"])
    prec = "BF16" if r["precision"] == "BF16" else "FP8_MX"
    if "id" not in changes:
        r["id"] = f"mbridge-card/{base['id'].split('/', 1)[1].rsplit('/', 4)[0]}/{gpu}/{prec}/{r['n_gpus']}/gbs{r['gbs']}"
    r["src"] = f"{MB}:examples/model_verification_cards/{model_dir}/card.yaml@{CARDS_AT} [items.{item}.{gpu}]"
    r["quote"] = (f"bridge_commit {commit}; last_10_steps_step_time_ms_avg: {step_ms}; last_10_steps_model_tflops_"
                  f"per_gpu_avg: {tflops}; last_10_steps_tokens_per_second_per_gpu_avg: {tok}")
    r["step_s"] = round(step_ms / 1000.0, 5)
    r["tok_s_gpu"], r["tflops_gpu"], r["mfu_pct"] = tok, tflops, None
    r["software"] = f"Megatron-Bridge main at {commit} (model verification card)"
    what = "etp/sp/recompute/cuda-graph" if recipe in CITES_NO_DISPATCHER else "etp/sp/recompute/cuda-graph/dispatcher"
    r["assumed"] = [base["assumed"][0], f"{what} from {MB}:{recipe_file}@{commit} ({recipe})", base["assumed"][2],
                    "dp=#GPUs/(TP*PP*CP) and ga=GBS/(MBS*dp) computed; step_s is the card's last-ten-steps mean step "
                    "time (tokens/s/GPU = GBS*seq/(step_s*#GPUs) within rounding)"]
    r["complete"] = True
    r["notes"] = notes
    return r


def main(argv: list[str]) -> None:
    if len(argv) != 2:
        raise SystemExit("usage: python scripts/bridge_cards.py MOE_RUNS_JSONL OUT_JSONL")
    with open(argv[0]) as f:
        rows = {r["id"]: r for r in (json.loads(line) for line in f if line.strip())}
    out = [card_row(rows[c[0]], *c[1:]) for c in CARDS]
    for r in out:
        tok = r["gbs"] * r["seq"] / (r["step_s"] * r["n_gpus"])
        if abs(tok / r["tok_s_gpu"] - 1.0) > 2e-3:
            raise SystemExit(f"{r['id']}: step time and tokens/s disagree ({tok:.1f} vs {r['tok_s_gpu']})")
    with open(argv[1], "w") as f:
        for r in out:
            f.write(json.dumps(r) + "\n")
    print(f"{len(out)} rows -> {argv[1]}")


if __name__ == "__main__":
    main(sys.argv[1:])
