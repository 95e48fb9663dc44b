"""What made ``bench/validation/ironwood/``: measured MaxText training runs on TPU7x (Ironwood),
from AI-Hypercomputer/tpu-recipes (``training/ironwood/README.md``'s table of step times, and each
recipe's ``run_recipe.sh``, whose ``MAXTEXT_ARGS`` are the ``key=value`` words MaxText's
``train.py`` took and whose ``--device-type=tpu7x-AxBxC`` gives the slice).  For each table row of
a model cosearch describes (DeepSeek-V3, GPT-OSS-120B, Llama 3.1 70B and 405B, Qwen3-235B-A22B;
not Gemma 4 or Wan 2.1) it writes the recipe's MaxText words as ``<recipe>.args`` (the shell
variables left as written: they name output paths) and one ``runs.csv`` row in the config-file
format of ``cosearch runs check`` (:mod:`cosearch.runs.check`): the file, the ``tpu7x-pod``
slice's chips, the global batch, and the table's tokens/s, step time and TFLOP/s per chip.  A recipe matches a row by model, chips, global batch and precision; the variants
that only change storage (``-gcs``, ``-lustre``) and the Kubernetes manifests are skipped.

Usage, with a clone of AI-Hypercomputer/tpu-recipes (a git directory)::

    python scripts/ironwood_recipes.py --repo PATH/tpu-recipes --out bench/validation/ironwood
"""

from __future__ import annotations

import argparse
import csv
import re
import subprocess
from pathlib import Path

MODELS = {"deepseek-v3": "deepseek3-671b", "gpt-oss-120b": "gpt-oss-120b", "llama3.1-405b": "llama3.1-405b",
          "llama3.1-70b": "llama3.1-70b", "qwen3-235b-a22b": "qwen3-235b-a22b"}
ARGS = re.compile(r'MAXTEXT_ARGS="(.*?)"\n', re.S)
DEVICE = re.compile(r"--device-type=tpu7x-(\d+)x(\d+)x(\d+)")


def _git(repo: str, *args: str) -> str:
    return subprocess.run(["git", "--git-dir", repo, *args], capture_output=True, text=True, check=True).stdout


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repo", required=True, help="a clone of AI-Hypercomputer/tpu-recipes (its git directory)")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    commit = _git(a.repo, "rev-parse", "HEAD").strip()
    table = []
    for line in _git(a.repo, "show", "HEAD:training/ironwood/README.md").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 8 and cells[1].isdigit() and cells[0] in MODELS:
            table.append(cells)
    recipes = [f for f in _git(a.repo, "ls-tree", "-r", "--name-only", "HEAD", "training/ironwood").splitlines()
               if f.endswith("run_recipe.sh") and "/k8s/" not in f and "/cluster_toolkit/" not in f
               and "/cluster-toolkit/" not in f and not re.search(r"-(gcs|lustre)/", f)]
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for cells in table:
        model, chips, gbs, seq, prec = cells[0], int(cells[1]), int(cells[2].replace(",", "")), int(cells[3]), cells[4]
        found = []
        for f in recipes:
            if f.split("/")[2] != MODELS[model]:
                continue
            text = _git(a.repo, "show", f"HEAD:{f}")
            dev, args = DEVICE.search(text), ARGS.search(text)
            if dev is None or args is None:
                continue
            words = " ".join(args.group(1).replace("\\\n", " ").split()).split()
            kv = dict(w.split("=", 1) for w in words if "=" in w)
            n = int(dev.group(1)) * int(dev.group(2)) * int(dev.group(3))
            devices = 2 * n                               # two JAX devices a TPU7x chip
            batch = float(kv.get("per_device_batch_size", "12")) * devices
            quant = "fp8_full" if kv.get("quantization") == "fp8_full" else "bf16"
            if (n, round(batch), int(kv.get("max_target_length", "2048")), quant) == (chips, gbs, seq, prec):
                found.append((f, words, dev.group(0).split("=")[1]))
        if len(found) != 1:
            raise SystemExit(f"{cells}: {len(found)} recipes match")
        f, words, slice_ = found[0]
        name = f.split("/")[2] + "_" + f.split("/")[3]
        (out / f"{name}.args").write_text(" ".join(words) + "\n")
        rows.append({"id": name, "group": f"MaxText TPU7x {'fp8' if prec == 'fp8_full' else prec}",
                     "config": f"{name}.args", "cluster": "tpu7x-pod", "chips": chips, "global_batch": gbs,
                     "measured_tok_s_per_chip": cells[7].replace(",", ""), "measured_step_s": cells[5],
                     "measured_tflops_per_chip": cells[6].replace(",", ""),
                     "source": f"AI-Hypercomputer/tpu-recipes:{f}@{commit[:9]} ({slice_}, sequence {seq}, {prec}); "
                               f"training/ironwood/README.md@{commit[:9]}"})
    with open(out / "runs.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    print(f"{len(rows)} runs -> {out} (table of training/ironwood/README.md@{commit[:9]})")


if __name__ == "__main__":
    main()
