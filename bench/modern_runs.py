"""The bench reads bench/validation/modern_runs.jsonl through the library's reader,
:mod:`cosearch.runs.rows`, so the bench and a user read runs the same way: this module holds no
reading or pricing rule of its own."""

from cosearch.runs.rows import Refused, describe_row, measured_tok_s_gpu, read_row, source_group

describe = describe_row

__all__ = ["Refused", "describe", "measured_tok_s_gpu", "read_row", "source_group"]
