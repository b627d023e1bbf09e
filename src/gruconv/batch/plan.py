"""The plan: each input's output under ``--out-dir`` (named by the writers registry through the reader), collisions, outputs that would overwrite inputs, and what a failed job must undo."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from ..errors import GruconvError, InputError, OutputError, ParityError, UsageError
from .records import UP_TO_DATE, Record
from .discovery import Input, name_too_long, real_path
from .state import State, format_module, input_files, output_files, output_mtime


# --------------------------------------------------------------------------- planning

def safe_output(out_dir: Path, rel: str) -> Path:
    """``out_dir / rel``, refusing anything that would land outside ``out_dir``.

    Refuses absolute paths, ``..`` components and paths whose resolved location (following any
    symlink already inside ``out_dir``) is not under the resolved ``out_dir``.
    """
    p = Path(rel)
    if not rel or p.is_absolute() or p.drive or p.root:
        raise OutputError(f"output path {rel!r} is absolute; refusing to write outside {str(out_dir)!r}")
    if any(part == ".." for part in p.parts):
        raise OutputError(f"output path {rel!r} has a '..' component (the input resolves outside the "
                          f"argument it was found under, e.g. through a symlink); refusing to write "
                          f"outside {str(out_dir)!r}")
    target = Path(out_dir) / p
    base = real_path(out_dir)
    real = real_path(target)
    if real != base and not real.startswith(base.rstrip(os.sep) + os.sep):
        raise OutputError(f"output {str(target)!r} resolves to {real!r}, outside {str(out_dir)!r} "
                          "(a symlink in the output tree?); refusing to write there")
    if real == base:
        raise OutputError(f"output {str(target)!r} is the output directory itself")
    return target


# ----- format facts: batch knows nothing about a format; the writers' planning decides each output's
# name and what is written beside it from the facts the input's reader states
# (:func:`gruconv.writers.planning.batch_output_name`, :func:`gruconv.writers.planning.extra_outputs`).



def options_record(options: dict):
    """``options`` as the :class:`gruconv.options.Options` that format verbs take."""
    from ..options import Options

    return Options.of({k: v for k, v in options.items() if k in Options.__dataclass_fields__})


def _stem(name: str) -> str:
    from .. import run_options

    return name[: -len(Path(name).suffix)] if Path(name).suffix.lower() in run_options.input_suffixes() else name


def output_name(path: Path, fmt: str, options: dict) -> str:
    """The file (or, for a TF1 checkpoint with several stacks, directory) name the output of input
    ``path`` gets, from ``path.name``: planning decides from the reader's facts about the input."""
    from ..writers.planning import batch_output_name

    return batch_output_name(format_module(fmt), path, options_record(options), _stem(path.name))


def _output_rel(item: Input, options: dict) -> str:
    if item.out_rel is None:   # asked twice per run (collision check, plan): the format reads the input
        rel = Path(item.rel)
        name = output_name(Path(real_path(item.path)).with_name(rel.name), item.format, options)
        item.out_rel = (rel.parent / name).as_posix() if str(rel.parent) != "." else name
    return item.out_rel


def _extra_outputs(out: Path, fmt: Optional[str]) -> list:
    """Files written beside ``out`` (for the overlap check), as planning says
    (:func:`gruconv.writers.planning.extra_outputs`: a checkpoint's other tensors in ``OUT.rest.npz``)."""
    if fmt is None:
        return []
    from ..writers.planning import extra_outputs

    return extra_outputs(format_module(fmt), out)


# ----- what a failed job leaves: nothing

def snapshot(outs: list) -> dict:
    snap = {}
    for f in output_files(outs):
        try:
            st = f.lstat()
            snap[str(f)] = (st.st_ino, st.st_mtime_ns, st.st_size)
        except OSError:
            continue
    return snap


def undo(outs: list, snap: dict) -> list:
    """Remove the files of ``outs`` that the failed job created or replaced; return them."""
    removed = []
    for f in output_files(outs):
        try:
            st = f.lstat()
            if snap.get(str(f)) != (st.st_ino, st.st_mtime_ns, st.st_size):
                f.unlink()
                removed.append(str(f))
        except OSError:
            continue
    for out in outs:
        if out.is_dir() and not out.is_symlink() and not any(k.startswith(str(out) + os.sep) for k in snap):
            for d in sorted((p for p in out.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)) + [out]:
                try:
                    d.rmdir()
                except OSError:
                    pass
    return removed


@dataclass
class Job:
    record: Record
    item: Input
    output: Optional[Path] = None
    outs: list = field(default_factory=list)    # output and the files written beside it
    force: bool = False
    todo: bool = False        # needs converting (else: the record is final: failed or skipped)
    snap: dict = field(default_factory=dict)    # the output files before the job ran
    input_mtime: Optional[int] = None
    made_dirs: list = field(default_factory=list)


def collisions(items: list[Input], out_dir: Path, options: dict) -> dict:
    """Before any work: inputs (of any shard: shards share ``out_dir``) that map to one output, or
    whose output lies inside another's (a directory output). Every one of them fails while planning
    — the first claimant too, so nothing of a colliding pair is converted — and the others run.
    Returns ``{input key: OutputError}``; an input whose output cannot be planned at all is left to
    fail on its own in :func:`make_plan`."""
    claims: dict = {}     # real output path -> [(input, output)]
    for item in items:
        if item.error is not None or item.skip is not None:
            continue
        try:
            out = safe_output(out_dir, _output_rel(item, options))
        except (GruconvError, OSError):
            continue
        claims.setdefault(real_path(out), []).append((item, out))
    base = real_path(out_dir)
    clash: dict = {}      # input key -> (its output, the other input)

    def mark(a, b) -> None:
        clash.setdefault(a[0].key, (a[1], b[0]))
        clash.setdefault(b[0].key, (b[1], a[0]))

    for real, group in claims.items():
        for a in group[1:]:
            mark(a, group[0])
        child, parent = real, os.path.dirname(real)
        while parent != child and len(parent) > len(base):    # an output inside another's directory
            for other in claims.get(parent, ()):
                for a in group:
                    mark(a, other)
            child, parent = parent, os.path.dirname(parent)
    return {key: OutputError(f"output {str(out)!r} collides with the output of {other.display}; neither is "
                             "converted (rename one, or convert them into separate --out-dir directories)")
            for key, (out, other) in clash.items()}


def make_plan(items: list[Input], out_dir: Path, options: dict, skip_existing: bool,
          state: Optional["State"] = None, collisions: Optional[dict] = None) -> list[Job]:
    """One job per input; ``collisions`` (:func:`collisions`, over every shard's inputs; computed
    here from ``items`` when not given) fail the inputs that share an output."""
    if collisions is None:
        collisions = collisions(items, out_dir, options)
    jobs = []
    for item in items:
        rec = Record(input=item.display, format=item.format)
        job = Job(rec, item)
        jobs.append(job)
        try:
            if item.error is not None:
                raise item.error
            if item.skip is not None:   # a directory passed over while discovering: reported, not converted
                rec.status, rec.reason = "skipped", item.skip
                continue
            out = safe_output(out_dir, _output_rel(item, options))
            if item.key in collisions:
                raise collisions[item.key]
            rec.output = str(out)
            job.output = out
            job.outs = [out] + _extra_outputs(out, item.format)
            if skip_existing and output_mtime(out) is not None:
                if state is not None and state.up_to_date(item, job.outs):
                    rec.status, rec.outputs = "skipped", [str(out)]
                    rec.reason = UP_TO_DATE
                    continue
                # stale, or not known to come from a successful conversion: rebuild it
                job.force = True
            job.todo = True
        except GruconvError as e:
            fail_record(rec, e)
        except OSError as e:
            fail_record(rec, InputError(f"cannot plan the output ({e.strerror or e})", path=item.display))
    return jobs


def check_no_input_is_written(plan: list[Job], items: list[Input], extra_outputs: list,
                               extra_inputs: tuple = ()) -> None:
    """Before any work: no planned output, no report file may be (or link to) any input file —
    a model's files, or ``extra_inputs`` (the ``--config`` file)."""
    from ..files.outputs import check_outputs

    for p in extra_outputs:
        why = None if p is None else name_too_long(p)
        if why is not None:
            raise OutputError(why, path=p)
    inputs = [f for item in items if item.error is None and item.skip is None for f in input_files(item)]
    inputs += [Path(p) for p in extra_inputs if p is not None]
    if not inputs:
        return
    outs = [o for job in plan if job.todo for o in job.outs] + [Path(p) for p in extra_outputs if p is not None]
    try:
        check_outputs(outs, inputs)
    except OutputError as e:
        raise OutputError(e.message + " (with --out-dir: choose an output directory apart from the inputs, "
                                      "or another --report/--junit path)", path=e.path) from None
    reports = [Path(p) for p in extra_outputs if p is not None]
    planned = {real_path(o) for job in plan if job.output is not None for o in job.outs}
    for r in reports:
        if real_path(r) in planned:
            raise OutputError("report path is also a converted model's output", path=r)
    if len(reports) == 2 and real_path(reports[0]) == real_path(reports[1]):
        raise UsageError("--report and --junit name the same file", path=reports[0])


def fail_record(rec: Record, e: GruconvError) -> None:
    rec.status = "parity-failed" if isinstance(e, ParityError) else "failed"
    rec.error, rec.error_type, rec.exit_code = str(e), type(e).__name__, e.exit_code
