"""What an XLA program keeps live at its memory peak, itemized by role.

The route behind ``cosearch/data/maxtext_compiled_live.csv`` (described in
``cosearch/data/maxtext_pipeline_residuals.md``): compile a step ahead of time with
``XLA_FLAGS="--xla_dump_to=DIR --xla_dump_hlo_as_text"`` (MaxText: ``train_compile`` for a TPU
topology, on any host), then::

    python scripts/xla_live_buffers.py DIR --vocab 256128 --hidden 3584 --seq 8192

XLA's ``*after_optimizations-buffer-assignment.txt`` gives every value's size and its offset in
its allocation; ``*after_optimizations-live-range.txt`` the instructions between which it is live
(loop bodies flattened into the sequence).  Parameters (the step's arguments) are left out, and
values sharing an (allocation, offset) are counted once.  At the instruction where the rest is
largest, the live values are summed by role: ``logits`` (arrays of (sequences, seq, vocab) or
(seq, vocab)), ``checkpoints`` (a loop's stacked (blocks, sequences, seq, hidden) output),
``head_weight`` / ``embedding_grad`` (vocab x hidden bf16 arrays; an all-reduce's output counts as
the gradient), and the rest by whether an array has a ``seq``-long dimension
(``other_activation``) or not (``other_weight``).  Prints one JSON object.
"""

from __future__ import annotations

import argparse
import glob
import json
import re
from collections import Counter
from pathlib import Path

_ALLOC = re.compile(r"allocation (\d+): size (\d+)(.*)")
_VALUE = re.compile(r" value: <\d+ (\S+)(?: \(phi\))? @\d+> \(size=(\d+),offset=(\d+)\): (\S+)")
_RANGE = re.compile(r"\s+(\S+):(\d+)-(\d+)$")


def _one(directory: Path, suffix: str) -> str:
    found = sorted(glob.glob(str(directory / f"*{suffix}")))
    if not found:
        raise SystemExit(f"{directory}: no *{suffix} (compile with XLA_FLAGS=--xla_dump_to={directory})")
    return Path(found[0]).read_text()


def read_dump(directory: str | Path) -> tuple[dict, dict]:
    """``(values, ranges)``: name -> (bytes, offset, shape, allocation, is_parameter), and name ->
    (first, last) instruction of its live range."""
    d = Path(directory)
    values, alloc = {}, None
    for line in _one(d, "after_optimizations-buffer-assignment.txt").splitlines():
        m = _ALLOC.match(line)
        if m:
            alloc = (int(m.group(1)), "parameter" in m.group(3))
            continue
        m = _VALUE.match(line)
        if m and alloc is not None:
            values[m.group(1)] = (int(m.group(2)), int(m.group(3)), re.sub(r"\{.*", "", m.group(4)), *alloc)
    ranges = {}
    for line in _one(d, "after_optimizations-live-range.txt").splitlines():
        m = _RANGE.match(line)
        if m:
            ranges[m.group(1).removesuffix("{}")] = (int(m.group(2)), int(m.group(3)))
    return values, ranges


def live_at(values: dict, ranges: dict, t: int) -> list[tuple[str, int, str]]:
    """(name, bytes, shape) of every non-parameter value live at instruction ``t``, each
    (allocation, offset, size) once."""
    out, seen = [], set()
    for name, (first, last) in ranges.items():
        if name in values and first <= t <= last:
            size, offset, shape, alloc, param = values[name]
            if param or (alloc, offset, size) in seen:
                continue
            seen.add((alloc, offset, size))
            out.append((name, size, shape))
    return out


def peak(values: dict, ranges: dict) -> int:
    """The instruction where the live non-parameter values are largest (the first such)."""
    last = max((e for _, e in ranges.values()), default=0)
    return max(range(last + 1), key=lambda t: (sum(s for _, s, _ in live_at(values, ranges, t)), -t))


def roles(items: list[tuple[str, int, str]], vocab: int, hidden: int, seq: int) -> dict[str, int]:
    """Bytes of ``items`` by role (module docstring)."""
    out: Counter = Counter()
    table = vocab * hidden * 2
    for name, size, shape in items:
        dims = [int(x) for x in re.findall(r"\d+", shape.split("[", 1)[1])] if "[" in shape else []
        if dims and dims[-1] == vocab and ((len(dims) == 3 and dims[1] == seq) or (len(dims) == 2 and dims[0] == seq)):
            out["logits"] += size
        elif len(dims) == 4 and dims[2] == seq and dims[3] == hidden and dims[0] > 1 and name.startswith("while"):
            out["checkpoints"] += size
        elif size == table:
            out["embedding_grad" if name.startswith("all-reduce") else "head_weight"] += size
        elif seq in dims:
            out["other_activation"] += size
        else:
            out["other_weight"] += size
    return dict(out)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dump", help="the --xla_dump_to folder")
    ap.add_argument("--vocab", type=int, required=True)
    ap.add_argument("--hidden", type=int, required=True)
    ap.add_argument("--seq", type=int, required=True, help="tokens a sequence")
    a = ap.parse_args(argv)
    values, ranges = read_dump(a.dump)
    t = peak(values, ranges)
    items = live_at(values, ranges, t)
    print(json.dumps({"instruction": t, "live_temp_bytes": sum(s for _, s, _ in items),
                      **{k + "_bytes": v for k, v in roles(items, a.vocab, a.hidden, a.seq).items()}}))


if __name__ == "__main__":
    main()
