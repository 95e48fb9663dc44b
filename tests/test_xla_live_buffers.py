"""scripts/xla_live_buffers.py (the route behind cosearch/data/maxtext_compiled_live.csv) on a
hand-written dump in XLA's formats: the peak and its roles worked out by hand."""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))

import xla_live_buffers as xlb  # noqa: E402

# vocab 50, hidden 3, 4 tokens a sequence, 2 sequences
ASSIGNMENT = """BufferAssignment:
allocation 0: size 100, parameter 0, shape |f32[25]| at ShapeIndex {}:
 value: <1 param.1 @0> (size=100,offset=0): f32[25]{0}
allocation 1: size 1292, preallocated-temp:
 value: <2 fusion.1 @0> (size=800,offset=0): bf16[2,4,50]{2,1,0:T(8,128)(2,1)}
 value: <3 bitcast.1 @0> (size=800,offset=0): bf16[2,4,50]{2,1,0}
 value: <4 while.1{2} (phi) @0> (size=144,offset=800): bf16[3,2,4,3]{3,2,1,0}
 value: <5 reshape.1 @0> (size=300,offset=944): bf16[3,50]{1,0}
 value: <6 all-reduce.1 @0> (size=300,offset=944): bf16[50,3]{1,0}
 value: <7 fusion.2 @0> (size=48,offset=1244): bf16[2,4,3]{2,1,0}
"""
LIVE_RANGE = """HloLiveRange (max 6):
  InstructionSequence:
    0:param.1
    1:fusion.2
  BufferLiveRange:
    param.1{}:0-6
    fusion.1{}:2-4
    bitcast.1{}:3-3
    while.1{2}:1-5
    reshape.1{}:3-3
    all-reduce.1{}:5-6
    fusion.2{}:0-1
"""


def test_peak_and_roles_by_hand(tmp_path, capsys):
    (tmp_path / "m.after_optimizations-buffer-assignment.txt").write_text(ASSIGNMENT)
    (tmp_path / "m.after_optimizations-live-range.txt").write_text(LIVE_RANGE)
    values, ranges = xlb.read_dump(tmp_path)
    # live, parameters aside, each (allocation, offset, size) once: t0 48, t1 48 + 144, t2 144 + 800,
    # t3 144 + 800 + 300 (the bitcast shares the logits' buffer), t4 944, t5 144 + 300, t6 300
    sums = [sum(s for _, s, _ in xlb.live_at(values, ranges, t)) for t in range(7)]
    assert sums == [48, 192, 944, 1244, 944, 444, 300]
    assert xlb.peak(values, ranges) == 3
    assert xlb.roles(xlb.live_at(values, ranges, 5), 50, 3, 4) == {"checkpoints": 144, "embedding_grad": 300}
    xlb.main([str(tmp_path), "--vocab", "50", "--hidden", "3", "--seq", "4"])
    out = json.loads(capsys.readouterr().out)
    assert out == {"instruction": 3, "live_temp_bytes": 1244, "logits_bytes": 800, "checkpoints_bytes": 144,
                   "head_weight_bytes": 300}


def test_a_folder_without_a_dump_says_how_to_make_one(tmp_path):
    import pytest
    with pytest.raises(SystemExit, match="xla_dump_to"):
        xlb.read_dump(tmp_path)
