"""Real training runs, read from the files their frameworks use.

One reader per framework file, each mapping the framework's own fields with the framework's own
defaults (cited in each module), refusing unknown or contradictory fields by name, and listing
what it assumed:

=====================================  ===================================================
:func:`read_megatron_args`             a Megatron-LM / Megatron-Core argument line
:func:`read_nemo1`                     a NeMo 1 launcher YAML
:func:`read_megatron_bridge`           a NeMo 2 / Megatron-Bridge config dump and overrides
:func:`read_torchtitan`                a torchtitan ``train.toml``, saved config (0.3.0) or
                                       live ``Trainer.Config``
:func:`read_maxtext`                   a MaxText YAML and ``key=value`` overrides
:func:`read_foundry`                   an llm-foundry YAML
:func:`read_hf_config`                 a Hugging Face ``config.json`` (the model only)
:func:`read_row`                       a row of cosearch's validation schema (measured runs)
=====================================  ===================================================

:func:`read_config` detects the format of a file; :func:`read_configs` reads the files of one
run (a model's ``config.json`` with a plan's TOML, say) and merges them.  Every reader returns a
:class:`RunConfig`; :meth:`RunConfig.resolve` gives the :class:`RunDescription` that
:func:`cosearch.plan.evaluate` prices.  :func:`check_runs` compares predictions with a file of
measured runs (``cosearch runs check``).
"""

from __future__ import annotations

from .check import CheckResult, check_runs, read_measured
from .config import RunConfig, RunDescription, merge
from .files import FORMATS, RUN_MODEL_FIELDS, detect_format, read_config, read_configs
from .foundry import read_foundry
from .hf import read_hf_config
from .maxtext import read_maxtext
from .megatron import MegatronPlan, parse_megatron_args, read_megatron_args
from .nemo import read_megatron_bridge, read_nemo1
from .rows import Refused, read_row
from .torchtitan import read_torchtitan

__all__ = ["RunConfig", "RunDescription", "merge", "read_config", "read_configs", "read_hf_config", "detect_format",
           "read_megatron_args", "parse_megatron_args", "MegatronPlan", "read_nemo1", "read_megatron_bridge",
           "read_torchtitan", "read_maxtext", "read_foundry", "read_row", "Refused", "FORMATS", "check_runs",
           "CheckResult", "read_measured", "RUN_MODEL_FIELDS"]
