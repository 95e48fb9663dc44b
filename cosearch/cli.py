"""``cosearch`` command line.

    cosearch search --model gpt3-175b --chips 1024 --batch 1536 --out results.json
    cosearch report results.json [--plot out.png] [--csv out.csv]
    cosearch compare --model llama2-70b --chips 2048 [--batch 1024]
    cosearch plan --model gpt3-175b --chip A100-80GB --cluster dgx-a100 --nodes 128 --batch 1536 \
                  [--dp 8 --tp 8 --pp 16 --mb 1 --recompute full --virtual 2 --sp --zero 1] [--json]
    cosearch models
    cosearch presets
    cosearch fl simulate --dataset digits --clients 5 --method invariant --rounds 30 --out fl.json
    cosearch fl experiment --dataset digits --methods invariant,ordered,random,none --seeds 10 --out exp.json
    cosearch fl report exp.json --plot exp.png
"""

from __future__ import annotations

import argparse
import os
import sys

from .engine import ENGINES
from .reproduce import SPACES

__all__ = ["main"]


def _count(text: str) -> int:
    """argparse type: a non-negative integer."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text!r}") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {v}")
    return v


def _bytes(text: str) -> int:
    """argparse type: a byte count, 1 to 2^40."""
    v = _count(text)
    if not (1 <= v <= 2 ** 40):
        raise argparse.ArgumentTypeError(f"must be between 1 and 2^40 bytes, got {v}")
    return v


def _positive(text: str) -> int:
    """argparse type: a positive integer within the supported range."""
    from ._validate import MAX_BATCH
    v = _count(text)
    if v == 0 or v > MAX_BATCH:
        raise argparse.ArgumentTypeError(f"must be between 1 and {MAX_BATCH}, got {v}")
    return v


def _model_from_args(a):
    """A preset by name, or a Hugging Face config.json path (with --seq-len)."""
    import os
    import warnings

    from .models import from_hf_config
    from .models import preset as model_preset
    seq = getattr(a, "seq_len", None)
    if str(a.model).endswith(".json") or os.path.isfile(a.model):
        if not os.path.isfile(a.model):
            raise ValueError(f"--model {a.model}: no such file")
        from ._json import parse_json, read_text_file
        cfg = parse_json(read_text_file(a.model, "--model"), f"--model {a.model}", constants=True)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            base = os.path.basename(a.model)
            label = (os.path.basename(os.path.dirname(os.path.abspath(a.model))) if base == "config.json"
                     else os.path.splitext(base)[0])
            m = from_hf_config(cfg, name=label or None, seq_len=seq)
        for w in caught:
            print(f"cosearch: {w.message}", file=sys.stderr)
        print(f"cosearch: {m.name}: {m.num_params() / 1e9:.2f}B parameters, sequence length {m.seq_len}",
              file=sys.stderr)
        return m
    m = model_preset(a.model)
    return m.with_(seq_len=seq) if seq else m


def _model_args(p: argparse.ArgumentParser, required: bool = True) -> None:
    """--model and --seq-len, read by :func:`_model_from_args`."""
    p.add_argument("--model", required=required,
                   help="model preset (see `cosearch models`) or a Hugging Face config.json path"
                        + ("" if required else " (optional with --from-megatron-args when its line gives the "
                                               "model's flags)"))
    p.add_argument("--seq-len", type=_positive, default=argparse.SUPPRESS,
                   help="training sequence length (default: the preset's, or a config's context if <= 8192)")


def _search_args(p: argparse.ArgumentParser) -> None:
    _model_args(p)
    p.add_argument("--chips", type=_positive, default=1024, help="number of chips in the cluster")
    p.add_argument("--batch", type=_positive, default=1536, help="global batch size (sequences)")
    p.add_argument("--no-prune", action="store_true", help="evaluate every design")
    p.add_argument("--refine-top", type=_count, default=3, help="designs re-planned with ILP layer times (0: none)")
    p.add_argument("--serial", action="store_true", help="run in-process, never a process pool")
    p.add_argument("--workers", type=_positive, default=None,
                   help="a local pool of this many worker processes from the start (default: in-process, "
                        "with a pool over the cores once the sweep runs past 5 s)")
    p.add_argument("--zero", default="0,1", help="ZeRO stages to try per design, comma-separated (0-3; "
                                                 "default 0,1)")
    p.add_argument("--flash", action="store_true", help="flash attention (no s x s attention activations)")
    p.add_argument("--engine", choices=list(ENGINES), default=None,
                   help="training framework every design's plans run on (default megatron-lm)")
    p.add_argument("--scale-up", type=_positive, default=None,
                   help="chips per switched scale-up domain, joined at each design's own link rate "
                        "(default: one flat domain of --chips); needs --scale-out-gbps")
    p.add_argument("--scale-out-gbps", type=float, default=None,
                   help="GB/s per chip per direction between scale-up domains")
    p.add_argument("--cp", default=None, help="context-parallel degrees to try, comma-separated (default 1; "
                                             "needs --flash); the space is priced once per degree")
    p.add_argument("--ep", default=None, help="expert-parallel degrees to try for an MoE model, comma-separated "
                                             "(default 1)")
    p.add_argument("--etp", default=None,
                   help="expert tensor parallelism to try for an MoE model, comma-separated: tp (Megatron's "
                        "default: experts split like the MLP) and/or 1 (each tp rank an expert-parallel rank; needs "
                        "--sp) (default tp)")
    p.add_argument("--precision", default=None,
                   help="number formats the plans may train in, comma-separated: bf16, fp8, fp4 (default bf16); "
                        "fp8 runs on the designs with FP8 MACs (--fp8-macs), fp4 (NVFP4) on those with FP4 MACs "
                        "(--fp4-macs), each design keeps its best")
    p.add_argument("--fp8-macs", default=None,
                   help="tensor-unit FP8 MACs per PE to search, comma-separated (0: bf16 only; 2: FP8 at twice "
                        "bf16's rate, as H100/B200); each costs PE area and power (default: the space's, 0)")
    p.add_argument("--fp4-macs", default=None,
                   help="tensor-unit FP4 (NVFP4) MACs per PE to search, comma-separated (0: none; 4: FP4 at four "
                        "times bf16's rate, as B200); each costs PE area and power at an upper bound (default: the "
                        "space's, 0)")
    p.add_argument("--sp", action="store_true", help="also try sequence parallelism (default: off only)")
    p.add_argument("--virtual", help="interleaved virtual stages to try, comma-separated (default: 1)")
    p.add_argument("--tps", help="tensor-parallel degrees to try, comma-separated (default: those dividing the heads)")
    p.add_argument("--microbatches", help="microbatch sizes to try, comma-separated (default: divisors of --batch)")
    p.add_argument("--time-model", choices=["ilp", "sum"], default="ilp",
                   help="ilp: rank the best --refine-top designs exactly on ILP-scheduled layer times; "
                        "sum: serial layer times only")
    p.add_argument("--ilp-designs", type=_positive, default=256,
                   help="most ILP plans the exact ranking makes (one per group of designs the model cannot tell apart; the table says if the top was proven)")
    p.add_argument("--objective", choices=["geomean", "mean"], default="geomean",
                   help="with several --model names (a,b,c): rank designs by this mean of their throughputs")
    p.add_argument("--space", default="default",
                   help="accelerator space: default (square arrays, <= 32 cores), phaze (PHAZE's space), "
                        "or a JSON file of SearchSpace fields")
    p.add_argument("--hbm-gib", type=float, default=None,
                   help="HBM scenario: capacity per chip in GiB at TPUv4's 1.2 TB/s (default 32, or the "
                        "space file's hbm_gib); HBM is not searched")
    p.add_argument("--area-model", choices=["cosearch", "phaze"], default=None,
                   help="area model of --space default/phaze: cosearch's (default) or PHAZE's own Accelergy "
                        "figures (with --space phaze: exactly PHAZE's 29,360 designs); a space file sets "
                        "its own with \"area_model\"")


def _int_list(text: str, name: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in str(text).split(",") if x.strip())
    except ValueError:
        raise ValueError(f"--{name} must be comma-separated integers, got {text!r}") from None


def _run_search(a, baselines: bool, out: str | None = None, resume=None):
    from .search import DEFAULT_PLAN_OPTIONS, cosearch
    if a.serial and getattr(a, "workers", None):
        raise ValueError("--serial and --workers exclude each other: choose in-process or a pool")
    opts = dict(DEFAULT_PLAN_OPTIONS, zero=_int_list(a.zero, "zero"))
    bad = [z for z in opts["zero"] if z not in (0, 1, 2, 3)]
    if bad or not opts["zero"]:
        raise ValueError(f"--zero must list ZeRO stages 0-3, got {a.zero!r}")
    if a.flash:
        opts["flash_attention"] = True
    if a.sp:
        opts["sequence_parallel"] = (False, True)
    if a.virtual:
        opts["virtual_stages"] = _int_list(a.virtual, "virtual")
    if getattr(a, "engine", None):
        opts["engine"] = a.engine
    if getattr(a, "cp", None):
        opts["context_parallel"] = _int_list(a.cp, "cp")
    if getattr(a, "ep", None):
        opts["expert_parallel"] = _int_list(a.ep, "ep")
    if getattr(a, "etp", None):
        vals = [x.strip().lower() for x in str(a.etp).split(",") if x.strip()]
        bad = [x for x in vals if x not in ("tp", "1")]
        if bad or not vals:
            raise ValueError(f"--etp must list tp and/or 1, comma-separated, got {a.etp!r}")
        opts["expert_tensor_parallel"] = tuple(None if x == "tp" else 1 for x in vals)
    if getattr(a, "precision", None):
        opts["precision"] = tuple(x.strip() for x in str(a.precision).split(",") if x.strip())
    cluster = _search_cluster(a)
    if "," in str(a.model):
        import argparse as _ap
        names = [x.strip() for x in str(a.model).split(",") if x.strip()]
        ms = [_model_from_args(_ap.Namespace(**{**vars(a), "model": n})) for n in names]
        return cosearch(ms, _space_from_args(a), cluster, a.batch, prune=not a.no_prune, progress=True,
                        plan_options=opts, objective=a.objective,
                        refine_top=a.refine_top if a.time_model == "ilp" else 0, ilp_designs=a.ilp_designs,
                        baselines=baselines, resume=_resume_file(resume, out), checkpoint=out,
                        checkpoint_every_s=getattr(a, "checkpoint_every", 10.0))
    return cosearch(_model_from_args(a), _space_from_args(a), cluster, a.batch,
                    "serial" if a.serial else getattr(a, "workers", None),
                    tps=_int_list(a.tps, "tps") if a.tps else None,
                    microbatches=_int_list(a.microbatches, "microbatches") if a.microbatches else None,
                    prune=not a.no_prune, refine_top=a.refine_top if a.time_model == "ilp" else 0,
                    ilp_designs=a.ilp_designs,
                    progress=True, baselines=baselines,
                    plan_options=opts, checkpoint=out, checkpoint_every_s=getattr(a, "checkpoint_every", 10.0),
                    resume=_resume_file(resume, out))


def _search_cluster(a):
    """The co-search's cluster: one flat domain of ``--chips``, or switched scale-up domains of
    ``--scale-up`` chips (each design's own link inside) joined at ``--scale-out-gbps``."""
    from .cluster import Cluster
    up, out = getattr(a, "scale_up", None), getattr(a, "scale_out_gbps", None)
    if up is None and out is None:
        return Cluster(a.chips)
    if up is None or out is None:
        raise ValueError("--scale-up and --scale-out-gbps go together: the chips per scale-up domain and the "
                         "GB/s per chip between domains")
    if not (0 < out < 1e6):
        raise ValueError(f"--scale-out-gbps must be a positive number of GB/s, got {out}")
    if a.chips % up:
        raise ValueError(f"--scale-up {up} does not divide --chips {a.chips}: the domains must be whole")
    return Cluster(a.chips, up, None, out * 1e9 if up < a.chips else None, name=f"{a.chips} chips in domains of {up}")


def _space_from_args(a):
    """The search space of ``--space``, ``--hbm-gib`` and ``--area-model``, with ``--fp8-macs``'s
    and ``--fp4-macs``'s tensor-unit formats where given."""
    from dataclasses import replace
    space = _base_space(a)
    for field_name in ("fp8_macs", "fp4_macs"):
        given = getattr(a, field_name, None)
        if given is None:
            continue
        flag, fmt = "--" + field_name.replace("_", "-"), field_name[:3].upper()
        try:
            vals = tuple(float(x) for x in str(given).split(",") if x.strip())
        except ValueError:
            raise ValueError(f"{flag} must list numbers of {fmt} MACs per PE, comma-separated, got {given!r}") \
                from None
        space = replace(space, **{field_name: vals},
                        name=f"{space.name}-{field_name.replace('_', '')}{'_'.join(f'{x:g}' for x in vals)}")
    return space


def _base_space(a):
    from .hardware import SearchSpace
    if a.hbm_gib is not None and not (0 < a.hbm_gib < 1e6):
        raise ValueError(f"--hbm-gib must be a positive number of GiB, got {a.hbm_gib}")
    area_model = getattr(a, "area_model", None)
    if a.space in ("default", "phaze"):
        return getattr(SearchSpace, a.space)(32.0 if a.hbm_gib is None else a.hbm_gib,
                                             area_model=area_model or "cosearch")
    import os
    if not os.path.isfile(a.space):
        raise ValueError(f"--space {a.space!r}: not 'default', 'phaze' or an existing JSON file")
    if area_model is not None:
        raise ValueError("--area-model applies to --space default or phaze; a space file sets its own "
                         "with \"area_model\"")
    return SearchSpace.from_json(a.space, hbm_gib=a.hbm_gib)


def _resume_file(resume, out):
    """The file to continue from: ``--resume FILE``, or ``--out`` for a bare ``--resume``."""
    import os
    if resume is None:
        return None
    path = out if resume is True else resume
    if not path or not os.path.isfile(path):
        if resume is True:
            return None           # nothing saved yet: start from scratch
        raise ValueError(f"--resume {path}: " + ("a folder, not a file" if os.path.isdir(path) else "no such file"))
    return path


#: Exit status when the result could not be written to ``--out`` (it went to a fallback file).
EXIT_SAVE_FAILED = 4


def _save_with_fallback(res, out: str) -> str | None:
    """Write ``res`` to ``out``; if that fails, to a fallback file (next to ``out``, else in the
    current folder, else in the temp folder).  Returns the fallback path used (None: saved
    to ``out``); raises only if every place failed."""
    import os
    import tempfile
    try:
        res.to_json(out, overwrite=True)
        return None
    except OSError as exc:
        first = exc
    stem = os.path.splitext(os.path.basename(out))[0] or "results"
    name = f"{stem}.unsaved-{os.getpid()}.json"
    for folder in (os.path.dirname(os.path.abspath(out)), os.getcwd(), tempfile.gettempdir()):
        path = os.path.join(folder, name)
        try:
            res.to_json(path, overwrite=True)
        except OSError:
            continue
        print(f"cosearch: error: could not write {out} ({first}); the result is saved in {path}", file=sys.stderr)
        return path
    raise first


def _file_identity(path: str | None) -> tuple | None:
    """What tells whether ``path`` was written since (inode, size, modification time), or None
    when there is no such file."""
    import os
    if not path:
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


def _search_and_finish(a, baselines: bool, top: int, resume=None) -> int:
    """Run the search of ``search`` / ``compare`` and save, print and choose the exit status
    (:func:`_finish_search`); a signal no phase caught goes to :func:`_interrupted_search`."""
    before = _file_identity(a.out)
    try:
        res = _run_search(a, baselines, a.out, resume)
    except KeyboardInterrupt as exc:
        return _interrupted_search(a.out, before, exc)
    return _finish_search(res, a.out, top)


def _interrupted_search(out: str | None, before: tuple | None, exc: KeyboardInterrupt) -> int:
    """A signal that stopped the search where no phase could catch it (a pool winding down, the
    moment between two phases): the checkpoint this run left in ``out`` — a journal — is
    rewritten as the plain JSON a finished save writes, marked interrupted; the exit status is
    130 or 143.  A file this run never wrote is left as it was."""
    from ._interrupt import deferred_interrupts, exit_code
    from ._json import dump_json, is_journal, load_json
    where = ""
    if out and _file_identity(out) not in (None, before):
        with deferred_interrupts(deliver=False):          # stopping already
            try:
                if is_journal(out):
                    dump_json({**load_json(out), "interrupted": True}, out)
                where = f" in {out} (continue with --resume)"
            except (OSError, ValueError) as err:
                where = f" in the checkpoint {out}, which could not be rewritten as plain JSON ({err})"
    print("cosearch: interrupted; " + (f"the finished part is saved{where}" if where else "nothing was saved yet"),
          file=sys.stderr)
    return exit_code(exc)


def _finish_search(res, out: str | None, top: int) -> int:
    """Print, save, and choose the exit status: 130/143 interrupted, 3 nothing fits, 4 the
    result could not be written to ``out`` (it is in a fallback file the message names).
    The table is printed before the save, so a failed save never hides the result."""
    from ._interrupt import exit_code
    stopped = None
    try:
        print(res.table(top=top))
        _print_design_report(res)
    except KeyboardInterrupt as exc:      # a signal while printing: the result is still saved
        stopped = exc
    if out:
        from ._interrupt import deferred_interrupts
        fallback = saved = None
        try:
            with deferred_interrupts():          # a signal mid-save would leave the checkpoint journal
                fallback = _save_with_fallback(res, out)
                saved = True
        except KeyboardInterrupt as exc:
            if not saved:                        # a second signal: the user insists
                raise
            stopped = stopped or exc
        if fallback is not None:
            return EXIT_SAVE_FAILED
        print(f"saved {out}")
    if stopped is not None:
        print("cosearch: interrupted after the search finished; the result is saved" + (f" in {out}" if out else ""),
              file=sys.stderr)
        return exit_code(stopped)
    if res.interrupted:
        print("cosearch: interrupted; the finished part is saved" + (f" in {out} (continue with --resume)"
                                                                    if out else ""), file=sys.stderr)
        return exit_code(res.stopped_by)
    if not res.feasible:
        print(f"cosearch: error: {_infeasible_reason(res)}", file=sys.stderr)
        return 3
    return 0


def _print_design_report(res) -> None:
    """Why the best design wins (area by component, tile efficiency, operand bandwidth need):
    :mod:`cosearch.design_report`; nothing for a multi-model or infeasible result."""
    import numpy as np

    from .design_report import design_report
    from .hardware import AREA_MODELS, DESIGN_FIELDS, Accelerator, design_array, named_area_model
    from .models import PRESETS
    if not getattr(res, "feasible", None) or not hasattr(res, "model") or not isinstance(res.model, str):
        return
    best = res.best
    chip = Accelerator.from_array(design_array(np.array([[best.design.get(f, 0.0) for f in DESIGN_FIELDS]]))[0],
                                  name=f"best design {best.index}")
    am = (getattr(res, "meta", None) or {}).get("area_model", "cosearch")
    print(design_report(chip, res.model if res.model in PRESETS else None,
                        named_area_model(am if am in AREA_MODELS else "cosearch")).describe())


def _infeasible_reason(res) -> str:
    """The reason of the design with the most HBM: what the largest memory could not hold."""
    rows = [r for r in res.rows if r.reason]
    if not rows:
        return "no design has a feasible plan"
    r = max(rows, key=lambda r: r.design.get("hbm_bytes", 0.0))
    msg = f"no design has a feasible plan on {res.chips} chips (the largest-HBM design: {r.reason})"
    return msg + _untried(res.meta.get("plan_options") or {})


def _untried(opts: dict) -> str:
    """The `search` options that widen the plan space and were not used."""
    out = []
    zeros = set(opts.get("zero") or ())
    if not {2, 3} <= zeros:
        out.append("--zero 0,1,2,3")
    if not opts.get("flash_attention"):
        out.append("--flash")
    if True not in (opts.get("sequence_parallel") or ()):
        out.append("--sp")
    return f"; not tried: {', '.join(out)}" if out else ""


def _plan_args(p: argparse.ArgumentParser) -> None:
    _model_args(p, required=False)
    p.add_argument("--chip", default=None,
                   help="chip preset (see `cosearch presets`) or chip JSON file (default: the cluster preset's "
                        "own chip, or a cluster file's \"chip\"; required with --cluster flat)")
    p.add_argument("--cluster", default="dgx-a100",
                   help="cluster preset: dgx-a100, dgx-h100, dgx-h200, dgx-b200, dgx-h800 (sized by --nodes), "
                        "gb200-nvl72, tpuv4-pod, tpuv5e-pod, tpuv5p-pod, tpu7x-pod (by --chips), flat (--chips, the "
                        "chip's own link), or a JSON file of Cluster fields with an optional \"chip\"")
    p.add_argument("--nodes", type=_positive, help="nodes of a DGX cluster preset")
    p.add_argument("--chips", type=_positive, help="chips of a gb200-nvl72, TPU pod or flat cluster")
    p.add_argument("--chips-per-node", type=_positive,
                   help="override the cluster's chips per node (a DGX preset keeps --nodes: nodes x this many "
                        "chips; a cluster sized by --chips keeps its chips, which this must divide)")
    p.add_argument("--intra-Bps", type=float, help="override the per-chip intra-node bandwidth (bytes/s, one direction)")
    p.add_argument("--inter-Bps", type=float, help="override the per-chip inter-node bandwidth (bytes/s, one direction)")
    p.add_argument("--intra-efficiency", type=float, help="override the achievable fraction of the intra-node link")
    p.add_argument("--inter-efficiency", type=float, help="override the achievable fraction of the inter-node link")
    p.add_argument("--batch", type=_positive, help="global batch size in sequences (or --global-batch-size in "
                                             "--from-megatron-args)")
    p.add_argument("--dp", type=_positive, help="data-parallel degree (omit to search; with --tp, --pp and --mb given: "
                                                   "what the chips leave, chips / (tp pp cp))")
    p.add_argument("--tp", type=_positive, help="tensor-parallel degree (omit to search)")
    p.add_argument("--pp", type=_positive, help="pipeline stages (omit to search)")
    p.add_argument("--mb", type=_positive, help="microbatch size in sequences (omit to search)")
    p.add_argument("--recompute", choices=["none", "selective", "full"], help="recompute mode (omit to search per stage)")
    p.add_argument("--virtual", type=_positive, help="interleaved virtual stages per pipeline stage (omit to search)")
    p.add_argument("--sp", action="store_true", default=None, help="sequence parallelism (omit to search)")
    p.add_argument("--no-sp", dest="sp", action="store_false", help="no sequence parallelism (omit to search)")
    p.add_argument("--zero", type=int, choices=[0, 1, 2, 3], help="ZeRO stage (omit to search)")
    p.add_argument("--pipeline-microbatches", type=_positive, default=None,
                   help="with a full plan under a circular-pipeline engine (maxtext): the microbatches of one pass "
                        "of the pipeline, MaxText's num_pipeline_microbatches (omit: all of a step's, one pass)")
    p.add_argument("--flash", action="store_true", help="flash attention (no s x s attention activations)")
    p.add_argument("--cp", type=_positive, help="context-parallel degree (needs --flash; omit: 1)")
    p.add_argument("--ep", type=_positive, help="expert-parallel degree of an MoE model (omit: 1)")
    p.add_argument("--etp", choices=["tp", "1"], default=None,
                   help="expert tensor parallelism of an MoE model: tp (Megatron's default) or 1 (each tp rank an "
                        "expert-parallel rank; needs --sp under tp > 1) (omit: tp)")
    p.add_argument("--precision", choices=["bf16", "fp8", "fp4"], help="GEMM precision (omit: bf16; fp4: NVFP4)")
    p.add_argument("--scaling-recipe", choices=["delayed", "tensorwise", "blockwise", "mxfp8", "nvfp4"], default=None,
                   help="low-precision scaling recipe, Megatron's --fp8-recipe names (omit: the engine's default, "
                        "delayed under Transformer Engine; tensorwise and nvfp4 price an amax pass before casts)")
    p.add_argument("--fp8-attention", action="store_true", default=None,
                   help="under --precision fp8, the fused attention in FP8 too (Megatron's --fp8-dot-product-attention; "
                        "MXFP8 under --scaling-recipe mxfp8; needs --flash)")
    p.add_argument("--bf16-layers", metavar="FIRST,LAST", default=None,
                   help="under fp8/fp4, the first and last layers kept in bf16 (Megatron's --first-last-layers-bf16; "
                        "a fixed plan only: give --dp/--tp/--pp/--mb)")
    p.add_argument("--zero-group", type=_positive, help="ZeRO sharding group inside the dp x cp ranks (HSDP; omit: all)")
    p.add_argument("--engine", choices=list(ENGINES), default=None,
                   help="training framework: what overlaps what, how often sharded weights are gathered, "
                        "pipeline sends (cosearch.engine; default megatron-lm, megatron-core with "
                        "--from-megatron-args)")
    p.add_argument("--op-fuser", action="store_true",
                   help="the experts through Transformer Engine's op fuser (Megatron's --use-transformer-engine-op-"
                        "fuser): an MoE model's expert bias and clamped activation fused, where Megatron-Core's "
                        "engines otherwise price them as eager passes (GPT-OSS)")
    p.add_argument("--cross-entropy", choices=["off", "native", "te"], default=None,
                   help="the loss as Megatron-Core computes it: off (unfused), native (--cross-entropy-loss-fusion) "
                        "or te (with --cross-entropy-fusion-impl te: Transformer Engine's kernel, cheaper) "
                        "(omit: the engine's, or what the run's files say)")
    p.add_argument("--moe-dispatcher", choices=["alltoall", "flex", "gather-tokens"], default=None,
                   help="an MoE model's token dispatcher: alltoall (Megatron-Core's NCCL all-to-alls), flex "
                        "(its DeepEP / HybridEP backends) or gather-tokens (MaxText and torchtitan: the tokens "
                        "gathered over tp before routing) (omit: the engine's)")
    p.add_argument("--moe-flex-backend", choices=["hybridep", "deepep"], default=None,
                   help="the flex dispatcher's backend (Megatron's --moe-flex-dispatcher-backend): the SMs it holds "
                        "and the buffers each rank allocates (omit: the engine's, hybridep)")
    p.add_argument("--moe-a2a-overlap", action="store_true",
                   help="Megatron-Core's --overlap-moe-expert-parallel-comm: each microbatch's dispatch and combine "
                        "beside another's compute (needs --ep > 1, no full recompute, and virtual stages under "
                        "pipeline parallelism)")
    p.add_argument("--from-megatron-args", metavar="ARGS",
                   help="a Megatron-LM / NeMo argument line (quoted) giving tp, pp, cp, virtual stages, "
                        "microbatch, global batch, recompute, SP, distributed optimizer and FP8")
    p.add_argument("--from", dest="from_files", action="append", nargs="+", metavar=("FILE", "KEY=VALUE"),
                   help="a framework's own config file, with optional key=value overrides: torchtitan .toml, "
                        "NeMo 1 / Megatron-Bridge / MaxText / llm-foundry .yaml, a HF config.json, a Megatron "
                        "argument file (.sh/.txt/.args), or a file of key=value overrides; repeat for the files "
                        "of one run (cosearch.runs)")
    p.add_argument("--top", type=_positive, default=1, help="plans to show when searching")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")


_NODE_PRESETS = ("dgx-a100", "dgx-h100", "dgx-h200", "dgx-b200", "dgx-h800")
_CHIP_PRESETS = ("gb200-nvl72", "tpuv4-pod", "tpuv5e-pod", "tpuv5p-pod", "tpu7x-pod")
#: Every --cluster name that is not a file.
_CLUSTER_NAMES = _NODE_PRESETS + _CHIP_PRESETS + ("flat",)


def _cluster_from_args(a):
    c = _base_cluster(a)
    changes = {k: getattr(a, arg) for k, arg in (("chips_per_node", "chips_per_node"), ("intra_node_Bps", "intra_Bps"),
                                                  ("inter_node_Bps", "inter_Bps"),
                                                  ("intra_efficiency", "intra_efficiency"),
                                                  ("inter_efficiency", "inter_efficiency"))
               if getattr(a, arg, None) is not None}
    if "chips_per_node" in changes and a.cluster in _NODE_PRESETS:
        # a DGX preset is sized by --nodes: keep the user's node count (nodes of the new size),
        # not the preset's chip count regrouped into more or fewer nodes
        changes["num_chips"] = a.nodes * changes["chips_per_node"]
    return c.with_(**changes) if changes else c


def _is_file(name: str | None, presets=()) -> bool:
    """Whether ``--chip``/``--cluster`` names a file: a ``.json`` name or a path, or an existing
    file whose name is not a preset's (a file called ``H100`` in the working folder does not
    shadow the preset)."""
    if not name:
        return False
    s = str(name)
    if s.endswith(".json") or os.sep in s or (os.altsep and os.altsep in s):
        return True
    return os.path.isfile(s) and s.lower() not in {p.lower() for p in presets}


def _cluster_file(path: str):
    """A cluster JSON file's :class:`Cluster` and the chip it names (``"chip"``: a preset's
    name, a chip JSON path, or an object of chip fields; None when the file has none)."""
    from . import cluster as cl
    from ._json import read_json_file
    d = read_json_file(path, "cluster")
    if not isinstance(d, dict):
        raise ValueError(f"cluster file {path!r}: the top level must be an object of Cluster fields")
    d = dict(d)
    return cl.Cluster.from_dict({k: x for k, x in d.items() if k != "chip"}), d.get("chip")


def _base_cluster(a):
    from . import cluster as cl
    if _is_file(a.cluster, _CLUSTER_NAMES):
        c, _chip = _cluster_file(a.cluster)
        for flag, given, have in (("--chips", a.chips, c.num_chips), ("--nodes", a.nodes, c.nodes)):
            if given is not None and given != have:
                raise ValueError(f"{flag} {given} contradicts the cluster file {a.cluster} ({have}); drop {flag} "
                                 "or edit the file")
        return c
    if a.cluster in _NODE_PRESETS:
        if a.nodes is None:
            raise ValueError(f"--cluster {a.cluster} needs --nodes")
        c = cl.preset(a.cluster, a.nodes)
        if a.chips is not None and a.chips != c.num_chips:
            raise ValueError(f"--chips {a.chips} contradicts --cluster {a.cluster} --nodes {a.nodes} "
                             f"({c.num_chips} chips); give only --nodes")
        return c
    if a.cluster in _CHIP_PRESETS or a.cluster == "flat":
        if a.chips is None:
            raise ValueError(f"--cluster {a.cluster} needs --chips")
        if a.nodes is not None:
            raise ValueError(f"--nodes applies to the DGX presets; --cluster {a.cluster} is sized by --chips")
        return cl.preset(a.cluster, a.chips) if a.cluster != "flat" else cl.Cluster(a.chips)
    raise ValueError(f"unknown --cluster {a.cluster!r}; choose one of {', '.join(_NODE_PRESETS + _CHIP_PRESETS)} "
                     "or flat")


def _chip_from_args(a):
    """--chip, or the chip the cluster is built of (a preset's own, or a cluster file's
    ``"chip"``); a flat cluster or a cluster file without a chip needs --chip."""
    from .cluster import PRESET_CHIPS
    from .hardware import Accelerator, preset_names
    from .hardware import preset as chip_preset

    def load(name):           # a chip file's warning is printed by main()'s one-line printer
        if isinstance(name, dict):
            return Accelerator.from_dict(name)
        if _is_file(name, preset_names()):
            return Accelerator.from_json(name)
        return chip_preset(name)

    if a.chip is not None:
        return load(a.chip)
    if a.cluster is not None and _is_file(a.cluster, _CLUSTER_NAMES):
        _c, chip = _cluster_file(a.cluster)
        if chip is None:
            raise ValueError(f"cluster file {a.cluster} names no chip: give --chip, or add \"chip\": \"<preset>\" "
                             "(or a chip file's path) to the file")
        return load(chip)
    if a.cluster in PRESET_CHIPS:
        return chip_preset(PRESET_CHIPS[a.cluster])
    raise ValueError(f"--cluster {a.cluster} has no chip of its own: give --chip (see `cosearch presets`)")


def _print_plan(p, out) -> None:
    print(p.describe(), file=out)
    if p.feasible:
        print("step breakdown (s): " + ", ".join(f"{k[:-2]} {v:.4g}" for k, v in p.breakdown.items()), file=out)
    for s, (n, mm) in enumerate(zip(p.spec.stage_layers, p.memory_per_chip_bytes)):
        rc = p.spec.recompute_per_stage()[s]
        print(f"  stage {s:>3}: {n:>3} layers, recompute {rc:<9} {mm / 2**30:8.2f} GiB of "
              f"{p.hbm_bytes / 2**30:.0f} GiB", file=out)


def _run_calibrate(a) -> int:
    """Fit the chip to the CSVs, print what was fitted, write the chip JSON."""
    from ._json import dump_json
    from ._validate import output_path
    from .cost import calibrate, read_csv_columns
    output_path(a.out, a.force)
    if not a.gemm_csv and not a.collective_csv:
        raise ValueError("give --gemm-csv and/or --collective-csv")
    chip = _chip_from_args(a)
    cl = None
    if a.collective_csv:
        if a.cluster is None:
            raise ValueError("--collective-csv needs --cluster (and --nodes or --chips) for the link bandwidths")
        a.chips_per_node = a.intra_Bps = a.inter_Bps = a.intra_efficiency = a.inter_efficiency = None
        cl = _cluster_from_args(a)
    tables = [read_csv_columns(path) for path in (a.gemm_csv, a.collective_csv) if path]
    keys = sorted({k for t in tables for k in t if k})
    cols = {k: [x for t in tables for x in (t.get(k) or [""] * len(next(iter(t.values()))))] for k in keys}
    cal = calibrate(chip, cols, cluster=cl)
    e = cal.chip.efficiency
    print(f"fitted: {', '.join(cal.fitted) or 'no kernel parameter'} on {cal.gemm_rows} op rows "
          f"(rms log error {cal.gemm_rms_log_error:.3f}); tensor {e.tensor:.3f}, attention {e.attention:.3f}, "
          f"memory {e.memory:.3f}, launch {e.launch_s * 1e6:.1f} us")
    if cal.collective_rows:
        print(f"collectives: intra efficiency {cal.intra_efficiency}, latency {cal.intra_latency_s}; "
              f"inter efficiency {cal.inter_efficiency}, latency {cal.inter_latency_s}")
    dump_json(cal.chip.to_dict(), a.out)
    print(f"wrote {a.out} (use it with --chip {a.out})")
    return 0


def _run_measure(a) -> int:
    """Time the model's kernels (and collectives under torchrun) into --out/ops.csv etc."""
    import os

    from .measure import DEFAULT_COLLECTIVE_BYTES, measure
    if not os.path.isdir(a.out):
        raise ValueError(f"--out {a.out!r}: no such folder")
    for f in ("ops.csv", "collectives.csv"):
        if os.path.exists(os.path.join(a.out, f)) and not a.force:
            raise ValueError(f"{os.path.join(a.out, f)} exists; pass --force to replace it")
    model = _model_from_args(a)
    import torch
    device = a.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cpu"):
        print("cosearch: measuring on the CPU: the times are this CPU's, not a GPU's (bf16 matmuls on a CPU "
              "are slow; use --seq-len and a small model to try the format)", file=sys.stderr)
    sizes = [s for s in DEFAULT_COLLECTIVE_BYTES if s <= a.collective_max_bytes] or [a.collective_max_bytes]
    res = measure(model, a.out, tp=a.tp, microbatch=a.mb, precision=a.precision, flash_attention=not a.no_flash,
                  sequence_parallel=a.sp, device=a.device, warmup=a.warmup, iters=a.iters,
                  collective_bytes=sizes, progress=sys.stderr.isatty())
    for why in res.skipped:
        print(f"skipped: {why}", file=sys.stderr)
    if res.op_csv:
        print(f"wrote {res.op_csv} ({res.op_rows} kernels); fit with: cosearch calibrate --chip CHIP "
              f"--gemm-csv {res.op_csv} --out chip.json")
    if res.collective_csv:
        print(f"wrote {res.collective_csv} ({res.collective_rows} collectives); add --collective-csv "
              f"{res.collective_csv} --cluster NAME --nodes N")
    return 0


def _bf16_layers_arg(text: str | None) -> tuple[int, int]:
    """``--bf16-layers FIRST,LAST`` as a pair of whole numbers ((0, 0) when not given)."""
    if text is None:
        return (0, 0)
    parts = [x.strip() for x in str(text).split(",")]
    if len(parts) != 2 or not all(x.isdigit() for x in parts):
        raise ValueError(f"--bf16-layers {text!r}: give FIRST,LAST, two whole numbers (1,1)")
    return (int(parts[0]), int(parts[1]))


def _best_fixed_plan(model, chip, cluster, base, a):
    """The best of ``base`` over the options ``plan`` was not given (recompute, sequence
    parallelism, ZeRO stage within the engine's, virtual stages that split the layers evenly), as
    ``--help`` promises; every option given is kept.  Returns ([the best plan, or the infeasible
    one needing the least memory], what was searched)."""
    import itertools

    from .placement import DEFAULT_VIRTUAL
    from .plan import evaluate
    rcs = (a.recompute,) if a.recompute else ("none", "selective", "full")
    sps = (a.sp,) if a.sp is not None else ((False, True) if base.tp > 1 else (False,))
    zeros = (a.zero,) if a.zero is not None else tuple(z for z in a.engine.zero_stages if z == 0 or base.dp > 1)
    m = a.batch // (base.dp * base.microbatch) if a.batch % (base.dp * base.microbatch) == 0 else 0
    circular = a.engine.pipeline_schedule == "circular" and base.pp > 1       # MaxText's: even chunks only
    virtuals = (a.virtual,) if a.virtual else tuple(
        v for v in DEFAULT_VIRTUAL if (v == 1 and not circular) or (base.pp > 1 and not a.engine.blocking_p2p
                                                                   and model.num_layers % (base.pp * v) == 0
                                                                   and m % base.pp == 0)) or (1,)
    plans = [evaluate(model, chip, cluster, base.with_(recompute=r, sequence_parallel=s, zero=z, virtual_stages=vs),
                      a.batch, engine=a.engine) for r, s, z, vs in itertools.product(rcs, sps, zeros, virtuals)]
    ok = [p for p in plans if p.feasible]
    best = max(ok, key=lambda p: p.tokens_per_s) if ok else min(plans, key=lambda p: max(p.memory_per_chip_bytes))
    searched = [n for n, opts in (("recompute", rcs), ("sequence parallelism", sps), ("ZeRO", zeros),
                                  ("virtual stages", virtuals)) if len(opts) > 1]
    note = (f"searched {', '.join(searched)} for the fixed dp/tp/pp/mb ({len(plans)} plans)" if searched else "")
    return [best], note


def _run_plan(a) -> int:
    import json

    from .engine import preset as engine_preset
    from .placement import search_plans
    from .plan import PlanSpec, evaluate
    if a.model is None and a.from_megatron_args is None and not a.from_files:
        raise ValueError("--model is required (or --from FILE / --from-megatron-args describing the model)")
    model = _model_from_args(a) if a.model is not None else None
    run = None
    if a.from_files:
        if a.from_megatron_args is not None:
            raise ValueError("give the Megatron line as a --from file, or --from-megatron-args, not both")
        from .runs import read_configs
        # a MaxText config counts the chip's JAX devices (TPU7x: two a chip)
        run = read_configs([(f[0], f[1:]) for f in a.from_files], model=model,
                           devices_per_chip=_chip_from_args(a).devices_per_chip)
        if run.num_chips is not None and a.nodes is None and a.chips is None and not _is_file(a.cluster,
                                                                                              _CLUSTER_NAMES):
            # the file states the run's size (NeMo's trainer.num_nodes x devices)
            if a.cluster in _NODE_PRESETS:
                if run.num_chips % 8:
                    raise ValueError(f"{run.source}: {run.num_chips} GPUs are not whole 8-GPU nodes of {a.cluster}")
                a.nodes = run.num_chips // 8
            else:
                a.chips = run.num_chips
    chip = _chip_from_args(a)
    cluster = _cluster_from_args(a)
    full = None not in (a.dp, a.tp, a.pp, a.mb)
    ignored: tuple[str, ...] = ()
    assumed: tuple[str, ...] = ()
    spec = None                                  # a fixed plan to evaluate; None: search
    mem = None                                   # the bytes a parameter keeps where a config sets them
    if run is not None and not run.plan:
        # model files only: search (or evaluate) the plan the flags leave open
        model = run.model
    elif run is not None:
        if any(x is not None for x in (a.dp, a.tp, a.pp, a.mb, a.virtual, a.cp, a.ep, a.etp, a.recompute, a.sp,
                                       a.zero, a.precision, a.zero_group, a.scaling_recipe, a.bf16_layers,
                                       a.fp8_attention, a.pipeline_microbatches)):
            raise ValueError("--from gives the plan: drop --dp/--tp/--pp/--mb/--virtual/--cp/--ep/--etp/--recompute/"
                             "--sp/--zero/--precision/--zero-group/--scaling-recipe/--bf16-layers/--fp8-attention/"
                             "--pipeline-microbatches (or edit the file with key=value overrides)")
        d = run.resolve(cluster.num_chips, global_batch=a.batch, model=None)
        model, spec, a.batch, assumed, mem = d.model, d.spec, d.global_batch, d.assumed, d.memory
        seq = getattr(a, "seq_len", None)
        if seq is not None and seq != model.seq_len:
            raise ValueError(f"--seq-len {seq} contradicts the run's model (sequence {model.seq_len})")
        a.engine = a.engine or d.engine
        if a.flash:
            spec = spec.with_(flash_attention=True)
        print(f"read from {', '.join(d.sources)}: {d.summary()}", file=sys.stderr)
        for note in assumed:
            print(f"assumed: {note}", file=sys.stderr)
        if d.neutral:
            print(f"neutral (change neither step time nor memory): {len(d.neutral)} fields", file=sys.stderr)
    if a.from_megatron_args is not None:
        from .runs.megatron import parse_megatron_args
        if any(x is not None for x in (a.dp, a.tp, a.pp, a.mb, a.virtual, a.cp, a.ep, a.etp, a.recompute, a.sp)):
            raise ValueError("--from-megatron-args gives the plan: drop --dp/--tp/--pp/--mb/--virtual/--cp/--ep/"
                             "--etp/--recompute/--sp")
        mp = parse_megatron_args(a.from_megatron_args, model, cluster.num_chips, a.batch)
        model = mp.model
        seq = getattr(a, "seq_len", None)
        if seq is not None and seq != model.seq_len:
            raise ValueError(f"--seq-len {seq} contradicts the Megatron line's model (sequence {model.seq_len}); "
                             "drop one")
        a.batch, a.engine, ignored, assumed = mp.global_batch, a.engine or mp.engine, mp.ignored, mp.assumed
        mem = mp.memory
        if a.precision is not None and a.precision != mp.spec.precision:
            raise ValueError(f"--precision {a.precision} contradicts the Megatron line ({mp.spec.precision})")
        if a.scaling_recipe is not None and a.scaling_recipe != mp.spec.scaling_recipe:
            raise ValueError(f"--scaling-recipe {a.scaling_recipe} contradicts the Megatron line "
                             f"({mp.spec.scaling_recipe or 'no low precision'}: --fp8-recipe / --fp4-recipe)")
        if a.fp8_attention and not mp.spec.fp8_attention:
            raise ValueError("--fp8-attention contradicts the Megatron line (no --fp8-dot-product-attention); add it "
                             "there")
        if a.zero is not None and a.zero != mp.spec.zero:
            raise ValueError(f"--zero {a.zero} contradicts the Megatron line (ZeRO {mp.spec.zero}: "
                             "--use-distributed-optimizer is ZeRO 1)")
        spec = mp.spec.with_(flash_attention=mp.spec.flash_attention or a.flash, zero_group=a.zero_group)
        print(f"read from the Megatron line: {model.name} ({model.num_params() / 1e9:.2f}B parameters, "
              f"sequence {model.seq_len}), {spec.describe()}, "
              f"global batch {a.batch}", file=sys.stderr)
        for note in assumed:
            print(f"assumed: {note}", file=sys.stderr)
    a.engine = engine_preset(a.engine or "megatron-lm")
    if a.moe_dispatcher is not None or a.moe_a2a_overlap or a.moe_flex_backend is not None:
        from .engine import with_moe_dispatch
        if not model.moe:
            raise ValueError(f"--moe-dispatcher / --moe-flex-backend / --moe-a2a-overlap: {model.name} has no experts")
        if a.moe_flex_backend is not None and (a.moe_dispatcher or a.engine.moe_dispatcher) != "flex":
            raise ValueError("--moe-flex-backend names a backend of the flex dispatcher: add --moe-dispatcher flex")
        read = a.from_megatron_args is not None or bool(a.from_files)
        if read and a.moe_dispatcher not in (None, a.engine.moe_dispatcher):
            if a.engine.moe_dispatcher == "flex":      # only a run that names its backend has it
                raise ValueError(f"--moe-dispatcher {a.moe_dispatcher} contradicts the run's flex dispatcher "
                                 "(a DeepEP or HybridEP backend); drop one")
            print(f"cosearch: --moe-dispatcher {a.moe_dispatcher} replaces the run's {a.engine.moe_dispatcher} "
                  "(its files name no other)", file=sys.stderr)
        a.engine = with_moe_dispatch(a.engine, a.moe_dispatcher or a.engine.moe_dispatcher,
                                     a.moe_a2a_overlap or a.engine.overlap_moe_a2a, a.engine.moe_comm_sms,
                                     a.moe_flex_backend)
    if a.cross_entropy is not None:
        from .engine import with_cross_entropy_fusion
        a.engine = with_cross_entropy_fusion(a.engine, a.cross_entropy)
    if a.op_fuser:
        from .engine import with_op_fuser
        if a.engine.expert_elementwise == "fused":
            print(f"cosearch: --op-fuser: engine {a.engine.name} runs the experts' bias and clamp fused already",
                  file=sys.stderr)
        a.engine = with_op_fuser(a.engine)
    if a.batch is None:
        raise ValueError("--batch is required (the global batch in sequences)")
    if a.zero is not None and a.zero not in a.engine.zero_stages:
        raise ValueError(f"--zero {a.zero}: engine {a.engine.name} runs ZeRO {', '.join(map(str, a.engine.zero_stages))} "
                         "only; choose an engine that runs it (cosearch presets), or --engine any")
    fixed_note = ""
    if spec is None and a.tp and a.mb and (a.dp is None) != (a.pp is None):
        # the one of dp / pp left out is what the chips leave, as Megatron derives dp
        cp = a.cp or 1
        known, name = (a.tp * a.pp * cp, "dp") if a.dp is None else (a.tp * a.dp * cp, "pp")
        if cluster.num_chips % known:
            raise ValueError(f"--{name}: {cluster.num_chips} chips are not a multiple of the other degrees' "
                             f"product {known}; give --{name}")
        setattr(a, name, cluster.num_chips // known)
        fixed_note = f"{name} {getattr(a, name)} from the {cluster.num_chips} chips"
        full = True
    if spec is None and full:
        base = PlanSpec(a.dp, a.tp, a.pp, a.mb, recompute=a.recompute or "none", virtual_stages=a.virtual or 1,
                        sequence_parallel=bool(a.sp), zero=a.zero or 0, flash_attention=a.flash,
                        context_parallel=a.cp or 1, precision=a.precision or "bf16", zero_group=a.zero_group,
                        expert_parallel=a.ep or 1, expert_tensor_parallel=1 if a.etp == "1" else None,
                        scaling_recipe=a.scaling_recipe, bf16_layers=_bf16_layers_arg(a.bf16_layers),
                        fp8_attention=bool(a.fp8_attention), pipeline_microbatches=a.pipeline_microbatches)
        plans, tried = _best_fixed_plan(model, chip, cluster, base, a)
        searched = None
        notes = [n for n in (fixed_note, tried) if n]
        if notes and not a.json:
            print(f"cosearch: {'; '.join(notes)}", file=sys.stderr)
    elif spec is not None:
        plans = [evaluate(model, chip, cluster, spec, a.batch, engine=a.engine, mem=mem)]
        searched = None
    else:
        if a.dp is not None or a.pp is not None:
            raise ValueError("--dp and --pp are searched together with --tp and --mb; give all four to "
                             "evaluate a fixed plan, or fix only --tp/--mb and the options")
        if a.bf16_layers is not None:
            raise ValueError("--bf16-layers prices a fixed plan (the search does not search plans with bf16 layers); "
                             "give --dp/--tp/--pp/--mb")
        res = search_plans(model, chip, cluster, a.batch, tps=(a.tp,) if a.tp else None,
                           microbatches=(a.mb,) if a.mb else None, recompute=a.recompute,
                           virtual_stages=(a.virtual,) if a.virtual else None,
                           sequence_parallel=(a.sp,) if a.sp is not None else None,
                           zero=(a.zero,) if a.zero is not None else None, flash_attention=a.flash,
                           top_k=a.top, progress=not a.json, engine=a.engine,
                           context_parallel=(a.cp,) if a.cp else None,
                           precision=(a.precision,) if a.precision else None,
                           zero_group=(a.zero_group,) if a.zero_group else None,
                           expert_parallel=(a.ep,) if a.ep else None,
                           expert_tensor_parallel=1 if getattr(a, "etp", None) == "1" else None,
                           scaling_recipe=a.scaling_recipe, fp8_attention=bool(a.fp8_attention))
        if not res.feasible:
            raise ValueError(res.reason)
        plans = list(res.plans)
        searched = res
    if a.json:
        d = {"model": model.name, "chip": chip.name, "cluster": cluster.to_dict(), "global_batch": a.batch,
             "engine": a.engine.name,
             "plans": [dict(p.to_dict(), mfu_peak="bf16 dense",
                            **({"mfu_fp8_peak": p.mfu_fp8_peak} if p.mfu_fp8_peak is not None else {}))
                       for p in plans]}
        if searched is not None:
            d.update(configurations=searched.configurations, evaluated=searched.evaluated)
        print(json.dumps(d, indent=1))
    else:
        print(f"{model.name} on {cluster.describe()} of {chip.name}, global batch {a.batch}, {a.engine.name}"
              + (f": searched {searched.configurations:,} configurations ({searched.evaluated:,} evaluated)"
                 if searched is not None else ""))
        for p in plans:
            _print_plan(p, sys.stdout)
        if ignored:
            print(f"(Megatron flags that change neither step time nor memory: {' '.join(ignored)})")
        if model.moe and not any("CUDA graph" in n for n in assumed):
            # a config read says what its graphs capture in its assumptions; a bare plan does not
            print("(GPU time only: an MoE run that launches its kernels from the host, without a CUDA graph of "
                  "the whole iteration, also waits on the host's launches and its dispatcher's token counts, "
                  "which cosearch does not price)")
    return 0 if plans[0].feasible else 3


def _reproduce_frontier(a) -> int:
    """``cosearch reproduce frontier``: the table, then each fixed system's error on the published
    runs of its chip."""
    import os

    from . import reproduce
    from ._validate import output_path
    out = output_path(a.out or "frontier.json", a.force)
    models = [x.strip() for x in (a.models or ",".join(reproduce.FRONTIER_MODELS)).split(",") if x.strip()]
    counts = _int_list(a.chip_counts, "chip-counts")
    from ._validate import positive_int
    from .models import preset as model_preset
    for m in models:
        model_preset(m)                       # an unknown name is refused before any work
    for n in counts:
        positive_int("--chip-counts", n)
    val = a.validation or os.environ.get("COSEARCH_VALIDATION") or ("bench/validation" if os.path.isdir(
        "bench/validation") else None)
    if val is not None and os.path.isfile(val):
        val = os.path.dirname(val)
    if a.validation is not None and not os.path.isdir(a.validation):
        raise ValueError(f"--validation {a.validation}: not a folder")
    budgets = {k: x for k, x in (("chip_power_budget_w", a.chip_power_budget),
                                 ("rack_power_budget_w", a.rack_power_budget),
                                 ("die_area_budget_mm2", a.die_area_budget)) if x is not None}
    print(f"frontier: {len(reproduce.frontier_systems())} systems x {len(models)} models x {len(counts)} chip "
          "counts; best system per objective and its gain over each fixed system")
    try:
        reproduce.frontier(models, counts, out=out, plot=a.plot, **budgets)
    except KeyboardInterrupt as exc:
        from ._interrupt import exit_code
        print(f"cosearch: interrupted; finished rows are in {out}", file=sys.stderr)
        return exit_code(exc)
    errs = reproduce.fixed_system_errors(val)
    print("\nhow far to trust each fixed system's gain: the model's error on the published runs of its chip "
          f"({val or 'no validation folder found: --validation DIR'})")
    for name in reproduce.FIXED_CHIP_TOKEN:
        e = errs.get(name)
        g = e.get("gpu_time") if e else None
        print(f"  {name:<12} " + (f"{e['n']:>4} runs  MAE {e['mae']:6.1%}  mean signed {e['mean_signed']:+6.1%}"
                                  if e else "no published runs checked")
              + (f";  {g['n']:>4} whose step is GPU time  MAE {g['mae']:6.1%}  mean signed {g['mean_signed']:+6.1%}"
                 if g and g["n"] != e["n"] else ""))
    if any(e.get("gpu_time") and e["gpu_time"]["n"] != e["n"] for e in errs.values()):
        print("  (whose step is GPU time: the dense runs and the MoE runs whose whole iteration is one CUDA graph or "
              "XLA program; an MoE run launched from the host also waits on it, which is not priced)")
    print(f"rows saved in {out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    fmt = argparse.ArgumentDefaultsHelpFormatter
    ap = argparse.ArgumentParser(prog="cosearch", description="Hardware/placement co-search for LLM "
                                 "training and federated learning with Invariant Dropout", formatter_class=fmt)
    ap.add_argument("--debug", action="store_true", help="show the full traceback of an error")
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("search", help="co-search the default accelerator space for a model", formatter_class=fmt)
    _search_args(s)
    s.add_argument("--out", default="results.json",
                   help="results JSON, also the checkpoint while the search runs")
    s.add_argument("--force", action="store_true", help="replace an existing --out file")
    s.add_argument("--resume", nargs="?", const=True, default=None, metavar="FILE",
                   help="continue a saved search: FILE, or --out when no FILE is given")
    s.add_argument("--checkpoint-every", type=float, default=10.0,
                   help="seconds between checkpoints of the partial search into --out")
    s.add_argument("--baselines", action="store_true", help="also run the TPUv4 and Spotlight baselines")
    r = sub.add_parser("report", help="summarise a results file", formatter_class=fmt)
    r.add_argument("results", help="a results JSON written by `cosearch search`")
    r.add_argument("--plot", help="write a throughput-vs-area plot (PNG)")
    r.add_argument("--csv", help="write all rows as CSV")
    r.add_argument("--top", type=_count, default=10, help="rows to show")
    r.add_argument("--force", action="store_true", help="replace existing --plot/--csv files")
    c = sub.add_parser("compare", help="co-search vs TPUv4 and Spotlight-style baselines", formatter_class=fmt)
    _search_args(c)
    c.add_argument("--out", help="also save the results (JSON)")
    c.add_argument("--force", action="store_true", help="replace an existing --out file")
    pl = sub.add_parser("plan", help="evaluate a fixed training plan, or search the parts not given",
                        formatter_class=fmt)
    _plan_args(pl)
    ru = sub.add_parser("runs", help="check the performance model on measured runs", formatter_class=fmt)
    rsub = ru.add_subparsers(dest="runs_cmd", required=True)
    rc = rsub.add_parser("check", help="predicted against measured throughput, per run and per group",
                         formatter_class=fmt)
    rc.add_argument("measured", help="measured runs: validation-schema .jsonl, or a .csv with columns "
                                     "model,cluster,chips,tp,pp,mb,batch,measured_tok_s_per_chip[,...], or a .csv "
                                     "of runs by their config files: config,cluster,chips,measured_tok_s_per_chip"
                                     "[,...] (cosearch.runs.check)")
    rc.add_argument("--releases", choices=["all", "newest"], default="all",
                    help="check every row, or only the newest software release's row of each plan")
    rc.add_argument("--plot", help="write a predicted-vs-measured scatter with the ±10%% band (PNG)")
    rc.add_argument("--json", dest="json_out", help="write every run, group and refusal as JSON")
    rc.add_argument("--force", action="store_true", help="replace existing --plot/--json files")
    cal = sub.add_parser("calibrate", help="fit a chip's kernel efficiency to measured times; write a chip JSON",
                         formatter_class=fmt)
    cal.add_argument("--chip", required=True, help="the chip measured: a preset or a chip JSON file")
    cal.add_argument("--gemm-csv", help="op times: m,n,k,batch,dtype_bytes,seconds[,kind]")
    cal.add_argument("--collective-csv", help="collective times: collective,bytes,group,link,seconds "
                                              "(needs --cluster/--nodes for the link bandwidths)")
    cal.add_argument("--cluster", default=None, help="the cluster preset the collectives ran on (with --nodes/--chips)")
    cal.add_argument("--nodes", type=_positive)
    cal.add_argument("--chips", type=_positive)
    cal.add_argument("--out", required=True, help="chip JSON to write (use it with --chip FILE)")
    cal.add_argument("--force", action="store_true", help="replace an existing --out file")
    me = sub.add_parser("measure", help="time the model's kernels (and, under torchrun, the collectives) with "
                        "torch on this machine's GPU; write the CSVs that calibrate reads", formatter_class=fmt)
    _model_args(me)
    me.add_argument("--tp", type=_positive, default=1, help="tensor-parallel degree of the shapes")
    me.add_argument("--mb", type=_positive, default=1, help="microbatch size (sequences) of the shapes")
    me.add_argument("--precision", choices=["bf16", "fp8", "fp4"], default="bf16", help="layer GEMM precision")
    me.add_argument("--no-flash", action="store_true", help="unfused attention (two batched matmuls)")
    me.add_argument("--sp", action="store_true", help="sequence parallelism")
    me.add_argument("--device", default=None, help="torch device (default: cuda if available, else cpu)")
    me.add_argument("--warmup", type=_count, default=3, help="untimed runs before timing each kernel")
    me.add_argument("--iters", type=_positive, default=10, help="timed runs per kernel (the median is kept)")
    me.add_argument("--collective-max-bytes", type=_bytes, default=2 ** 30,
                    help="largest collective message (bytes; sizes from 64 KiB up by factors of 4)")
    me.add_argument("--out", required=True, help="folder for ops.csv (and collectives.csv under torchrun)")
    me.add_argument("--force", action="store_true", help="replace existing CSVs in --out")
    sub.add_parser("models", help="list model presets")
    sub.add_parser("presets", help="list chip, cluster and engine presets")
    rp = sub.add_parser("reproduce", help="re-run an experiment (phaze: PHAZE's ICML 2024 table; frontier: which "
                        "system to build for today's training, against the systems one can buy)",
                        formatter_class=fmt)
    rp.add_argument("experiment", choices=["phaze", "frontier"])
    rp.add_argument("--models", default=None,
                    help="comma-separated model presets (default: phaze's six; frontier: llama3-405b, deepseek-v3, "
                         "qwen3-235b-a22b)")
    rp.add_argument("--hbm-gib", default="32,64,80", help="comma-separated HBM scenarios (GiB per chip)")
    rp.add_argument("--space", choices=list(SPACES), default="phaze",
                    help="accelerator space: phaze (PHAZE's, its global buffer feeding 4,096 words per cycle), "
                         "phaze-area (the same under PHAZE's own area model: its 29,360 designs), "
                         "phaze-no-onchip (no on-chip bandwidth bound), default")
    rp.add_argument("--chips", type=_positive, default=1024, help="chips in the cluster")
    rp.add_argument("--batch", type=_positive, default=4096, help="global batch (sequences)")
    rp.add_argument("--refine-top", type=_count, default=3, help="designs re-planned with ILP layer times")
    rp.add_argument("--ilp-designs", type=_positive, default=256, help="most ILP plans the exact ranking makes per run")
    rp.add_argument("--out", default=None, help="rows saved here after each run (default phaze.json / "
                    "frontier.json); phaze skips the finished rows it holds")
    rp.add_argument("--chip-counts", default="8192,32768", help="frontier: comma-separated chip counts")
    rp.add_argument("--validation", default=None,
                    help="frontier: folder of validation-schema runs (modern_runs.jsonl, moe_runs.jsonl) whose "
                         "errors are printed next to each fixed system (default: $COSEARCH_VALIDATION, else "
                         "bench/validation when it exists)")
    rp.add_argument("--chip-power-budget", type=float, default=None, help="frontier: most watts per chip")
    rp.add_argument("--rack-power-budget", type=float, default=None,
                    help="frontier: most watts per scale-up domain (its chips)")
    rp.add_argument("--die-area-budget", type=float, default=None,
                    help="frontier: most mm^2 a design may add to its base chip's die")
    rp.add_argument("--force", action="store_true", help="frontier: replace an existing --out file")
    rp.add_argument("--plot", default=None, metavar="PREFIX",
                    help="frontier: write each run's tokens/s-against-tokens/J plot to PREFIX-MODEL-CHIPS.png")
    from .fl.cli import add_parsers as add_fl_parsers
    add_fl_parsers(sub)
    a = ap.parse_args(argv)
    import warnings

    def _one_line(message, category, filename, lineno, file=None, line=None):
        print(f"cosearch: warning: {message}", file=sys.stderr)
    from ._interrupt import exit_code, terminate_as_interrupt
    try:
        with terminate_as_interrupt(), warnings.catch_warnings():
            warnings.showwarning = _one_line          # restored when the command ends
            return _dispatch(a)
    except KeyboardInterrupt as exc:
        if a.debug:
            raise
        print("cosearch: interrupted", file=sys.stderr)
        return exit_code(exc)
    except Exception as exc:  # one line for the user; --debug shows the traceback
        if a.debug:
            raise
        print(f"cosearch: error: {_user_message(exc)}", file=sys.stderr)
        return 2


#: Optional extras by the module whose absence means the extra is missing.
_EXTRAS = {"matplotlib": "plot", "flwr": "flower", "dask": "dask", "distributed": "dask", "sklearn": "digits",
           "flwr_datasets": "datasets", "torch": "fl", "ray": "ray"}


def _user_message(exc: BaseException) -> str:
    if isinstance(exc, ImportError):
        mod = (getattr(exc, "name", None) or "").split(".")[0]
        if mod in _EXTRAS:
            return f"this needs the optional package {mod!r}: pip install 'cosearch[{_EXTRAS[mod]}]'"
        return f"missing package: {exc}"
    if isinstance(exc, OSError) and getattr(exc, "filename", None):
        return f"{exc.filename}: {exc.strerror or exc}"
    if isinstance(exc, (ValueError, RuntimeError, OSError)):
        return str(exc)
    return f"{type(exc).__name__}: {exc} (run with --debug for the traceback)"


def _dispatch(a) -> int:
    if a.cmd == "models":
        from .models import PRESETS
        print(f"{'name':<12} {'layers':>6} {'hidden':>6} {'heads':>5} {'kv':>3} {'ffn':>6} {'seq':>5} {'params':>9}")
        for name, m in PRESETS.items():
            print(f"{name:<12} {m.num_layers:>6} {m.hidden:>6} {m.heads:>5} {m.kv_heads:>3} {m.ffn_hidden:>6} "
                  f"{m.seq_len:>5} {m.num_params()/1e9:>8.2f}B")
        return 0
    if a.cmd == "runs":
        from .runs import check_runs
        for out in (a.plot, a.json_out):
            if out:
                from ._validate import new_file
                new_file(out, a.force)
        res = check_runs(a.measured, progress=sys.stderr.isatty(), releases=a.releases)
        print(res.table())
        if a.json_out:
            res.to_json(a.json_out, overwrite=a.force)
        if a.plot:
            res.plot(a.plot, overwrite=a.force)
        return 0 if res.runs else 3
    if a.cmd == "calibrate":
        return _run_calibrate(a)
    if a.cmd == "measure":
        return _run_measure(a)
    if a.cmd == "presets":
        from .cluster import PRESET_CHIPS
        from .engine import ENGINES
        from .hardware import PRESETS
        print("chips (--chip NAME, or --chip FILE.json with Accelerator.to_dict() fields):")
        print(f"  {'name':<10} {'BF16 TFLOP/s':>12} {'FP8':>5} {'HBM GiB':>8} {'TB/s':>6} {'L2 MiB':>7}")
        for chip in PRESETS.values():
            print(f"  {chip.name:<10} {chip.peak_flops/1e12:>12.0f} {'yes' if chip.supports_fp8 else 'no':>5} "
                  f"{chip.hbm_bytes/2**30:>8.0f} {chip.hbm_bandwidth_Bps/1e12:>6.2f} {chip.l2_bytes/2**20:>7.0f}")
        print("clusters (--cluster NAME with --nodes or --chips, or --cluster FILE.json with Cluster.to_dict() "
              "fields):")
        for name, chip in PRESET_CHIPS.items():
            print(f"  {name:<12} chip {chip}")
        print("engines (--engine NAME):")
        for e in ENGINES.values():
            on = [n for n, f in ((f"TP communication overlapped ({e.tp_overlap_kernel})", e.overlap_tp_comm),
                                 ("TP data-gradient collectives beside the weight-gradient GEMMs",
                                  e.tp_overlap_rule == "dgrad-wgrad"),
                                 ("FP8 weights only", e.fp8_param_gather),
                                 ("gradients all-reduced in full under ZeRO 1/2", e.full_grad_allreduce)) if f]
            print(f"  {e.name:<26} {e.software} [attention kernels: {e.attention_kernel}; FP8 casts: "
                  f"{e.fp8_cast_kernel}; loss: {e.cross_entropy}; elementwise: {e.elementwise}"
                  + "".join(f"; {n}" for n in on) + "]")
        return 0
    if a.cmd == "plan":
        return _run_plan(a)
    if a.cmd == "search":
        from ._validate import output_path
        output_path(a.out, a.force, a.resume is not None)
        return _search_and_finish(a, a.baselines, 10, a.resume)
    if a.cmd == "compare":
        if a.out:
            from ._validate import output_path
            output_path(a.out, a.force)
        return _search_and_finish(a, True, 5)
    if a.cmd == "report":
        import os

        from ._json import load_json
        from ._validate import output_path
        from .multimodel import MultiModelResults
        from .search import Results
        if not os.path.isfile(a.results):
            raise ValueError(f"{a.results}: " + ("a folder, not a results file" if os.path.isdir(a.results)
                                                  else "no such file"))
        for path, flag in ((a.csv, "--csv"), (a.plot, "--plot")):
            if path:
                output_path(path, a.force, flag=flag)
        doc = load_json(a.results)                      # parsed once: results files run to tens of MiB
        kind = str(doc.get("schema", "")) if isinstance(doc, dict) else ""
        res = (MultiModelResults if kind.startswith("cosearch.multi-model-results/") else Results).from_document(
            doc, a.results)
        print(res.table(top=a.top))
        if a.csv:
            if not hasattr(res, "to_csv"):
                raise ValueError("--csv: a multi-model result has no CSV form; use its JSON")
            res.to_csv(a.csv, overwrite=True)
            print(f"wrote {a.csv}")
        if a.plot:
            if not hasattr(res, "plot"):
                raise ValueError("--plot: a multi-model result has no plot; use its JSON")
            res.plot(a.plot, overwrite=True)
            print(f"wrote {a.plot}")
        return 0
    if a.cmd == "reproduce" and a.experiment == "frontier":
        return _reproduce_frontier(a)
    if a.cmd == "reproduce":
        from . import reproduce
        from ._validate import output_path
        a.out = a.out or "phaze.json"
        a.models = a.models or ",".join(reproduce.PHAZE_MODELS)
        output_path(a.out, True)
        gibs = [float(x) for x in a.hbm_gib.split(",") if x.strip()]
        if not gibs or any(not (0 < g < 1e6) for g in gibs):
            raise ValueError(f"--hbm-gib must list positive GiB values, got {a.hbm_gib!r}")
        print(reproduce.HEADER)
        try:
            rows = reproduce.phaze([x.strip() for x in a.models.split(",") if x.strip()], gibs, chips=a.chips,
                                   global_batch=a.batch, space=a.space, refine_top=a.refine_top,
                                   ilp_designs=a.ilp_designs, out=a.out)
        except KeyboardInterrupt as exc:
            from ._interrupt import exit_code
            print(f"cosearch: interrupted; finished rows are in {a.out} (run again to continue)", file=sys.stderr)
            return exit_code(exc)
        print(f"{len(rows)} rows saved in {a.out}")
        return 0
    if a.cmd == "fl":
        from .fl import cli as flcli
        return flcli.run(a)
    raise ValueError(f"unknown command {a.cmd}")  # pragma: no cover


if __name__ == "__main__":
    sys.exit(main())
