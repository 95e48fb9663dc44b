"""README's and the docs' command blocks run as a user would run them (bash lines through the shell, Python
blocks as scripts without a main guard), at small sizes where a block is expensive, so README
cannot drift from the code.  Blocks that install, run this suite, run the benchmarks or start a
Flower deployment (tests/test_flower.py runs that one) are listed and skipped."""

import os
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
#: README and the docs, in the order a reader meets them; their blocks run in this order in one
#: folder (the docs reuse README's results.json).
DOCS = [README] + [ROOT / "docs" / f for f in ("install.md", "co-search.md", "runs.md", "performance-model.md",
                                                "federated-learning.md", "output.md", "benchmarks.md")]

#: (text in README, what the test runs instead): the same commands at small sizes.
SMALLER = [
    ("--chips 1024 --batch 1536", "--chips 256 --batch 256"),
    ("cs.SearchSpace.phaze(hbm_gib=32), cs.Cluster(1024), global_batch=4096",
     "cs.SearchSpace(), cs.Cluster(256), global_batch=256"),
    ('cs.SearchSpace(), 64, 128, objective="geomean"', 'cs.SearchSpace(), 16, 32, objective="geomean"'),
    ('cs.reproduce.phaze(["opt-350m"], [32], out="phaze.json")',
     'cs.reproduce.phaze(["opt-350m"], [32], chips=64, global_batch=128, space="default", refine_top=1, '
     'out="phaze.json")'),
    ("--seeds 10 --rounds 30", "--seeds 2 --rounds 2"),
    ("--rounds 30", "--rounds 2"),
    ("--seeds 5 --rounds 40", "--seeds 2 --rounds 2"),
    ("seeds=10, rounds=30", "seeds=2, rounds=2"),
    ("rounds=30", "rounds=2"),
    ("--models deepseek-v3 --chip-counts 8192", "--models gpt3-1.3b --chip-counts 64"),
    ('"deepseek-v3", systems, chips=8192, global_batch=4096', '"qwen3-30b-a3b", systems, chips=64, global_batch=64'),
]
#: Blocks not run here, by a phrase they contain.
SKIP = ("pip install", "--benchmark-only", "flower-superlink")


def _blocks():
    text = "\n".join(p.read_text() for p in DOCS)
    out = []
    for lang, body in re.findall(r"```(\w*)\n(.*?)```", text, re.S):
        if lang not in ("bash", "python") or any(s in body for s in SKIP):
            continue
        for a, b in SMALLER:
            body = body.replace(a, b)
        out.append((lang, body))
    return out


def _bash_commands(body: str) -> list[str]:
    lines, cur = [], ""
    for raw in body.splitlines():
        line = re.sub(r"\s+#.*$", "", raw) if not raw.lstrip().startswith("#") else ""
        if not line.strip():
            continue
        if line.rstrip().endswith("\\"):
            cur += line.rstrip()[:-1] + " "
            continue
        lines.append((cur + line).strip())
        cur = ""
    cosearch = f"{sys.executable} -m cosearch"
    return [re.sub(r"(^|&& )cosearch ", lambda m: m.group(1) + cosearch + " ", c) for c in lines]


BLOCKS = _blocks()


def test_readme_has_the_blocks_this_test_runs():
    assert len(BLOCKS) >= 6 and any(lang == "python" for lang, _ in BLOCKS)


def _run(lang: str, body: str, folder) -> None:
    env = dict(os.environ, MPLBACKEND="Agg")
    if lang == "python":
        script = folder / "block.py"
        script.write_text(body)
        runs = [[sys.executable, str(script)]]
    else:
        runs = [["bash", "-c", c] for c in _bash_commands(body)]
    for cmd in runs:
        out = subprocess.run(cmd, cwd=folder, env=env, capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, f"{cmd[-1][:200]}\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}"
        assert "Traceback" not in out.stderr, out.stderr[-3000:]


def test_readme_blocks_run_in_order_twice_in_one_folder(tmp_path):
    """As a newcomer runs README: every block in order in one folder, then all of them again —
    a block that needs a fresh folder, or that a later block's files break, fails here."""
    for _ in range(2):
        for lang, body in BLOCKS:
            _run(lang, body, tmp_path)
