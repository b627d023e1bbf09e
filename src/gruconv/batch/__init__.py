"""Batch conversion for CI: many inputs into one output directory, in parallel, with reports.

:func:`convert_many` is what ``gruconv convert INPUT... --out-dir DIR`` runs:

1. **Discover** inputs: files, directories (searched recursively; every file's format is detected
   from its content with :func:`gruconv.readers.detect`; a TF1 checkpoint directory or prefix is
   one input and is not descended into) and glob patterns (``**`` allowed), expanded by
   :meth:`_Discovery.walk`, not :mod:`glob`: no symlink leads out of the argument's directory
   (a symlinked directory outside is a failed input, "not followed"), loops are cut, the walk is
   bounded (:data:`MAX_WALK_ENTRIES`, :data:`MAX_WALK_DEPTH`), FIFOs and devices are never
   opened. Files in a directory that are not models are ignored; an explicitly named path that
   is not a model is a failure. Inputs are deduplicated by their real path and sorted.
2. **Shard** (``K/N``): input ``i`` of the sorted list belongs to shard ``i % N + 1``.
3. **Plan** each input's output: its path relative to the argument it was found under, mirrored
   under ``DIR`` with the name the input's format gives it (:func:`output_name`). Outputs are
   resolved and must stay inside ``DIR``; inputs (of any shard) that would share one output all
   fail (none of them is converted). No output, and no ``--report``/``--junit`` file, may be an
   input (a model's files or the ``--config`` file; any spelling, symlink or hard link) — that
   refuses the whole run before any work. Nothing is written before these checks: ``DIR`` is
   created only once something is to be converted (a path component too long for the file
   system is a one-line refusal, or a failed input).
   A named checkpoint directory whose prefix cannot be resolved and that holds no other model is
   a failed input. ``--skip-existing`` skips an input only if
   ``DIR/.gruconv.batch.json`` records a successful conversion of it whose output files are
   unchanged (size, mtime, SHA-256) and whose input has not changed since; anything else is
   converted again (``--force`` implied for it).
4. **Convert** with :func:`gruconv.api.convert`, in-process for ``jobs=1``, else in a pool of
   worker processes, forked where that is safe and spawned otherwise (:func:`.work.start_method`; each
   is reused, and imports Keras once when the run needs it). A :class:`GruconvError`
   fails one input (``failed``); any other exception is a bug, recorded as ``internal-error``
   (its error text starting ``internal error:``) with its traceback in the JSON report and as a
   JUnit ``<error>``; so is a worker process that died. A failed input leaves no output (what it created or replaced is
   removed, with the directories made for it). Without ``keep_going`` the first failure stops
   the run (pending work is cancelled); the reports still cover what ran.
5. **Report**: one line per input through ``print_fn`` (stderr by default; a progress line on a
   terminal; names with control characters escaped), a summary table (stdout), and optionally a
   JSON report and a JUnit XML file (both written atomically).

Exit code (:attr:`Summary.exit_code`), the most serious outcome first: ``InternalError.exit_code`` (4)
if any input hit an internal error, else ``InputError.exit_code`` (3) if any input failed or no input
of any shard could be converted at all (nothing found, or every directory skipped: one line names the
roots, and the JSON and JUnit reports say so; a CI job that converts nothing never looks green), else
``ParityError.exit_code`` (1) if any failed verification, else 0 (converted, skipped, nothing to
convert).  Directories passed over while discovering (a ``checkpoint`` state file pointing outside, an
unreadable directory, a SavedModel no reader takes) are ``skipped`` records with their reason.

This module prints nothing itself and imports no Click; format knowledge is asked of the format
modules (``output_name``, ``input_files``), with the old rules as a marked fallback.
No TensorFlow/Keras is imported in the calling process unless ``jobs=1``.

The package: :mod:`.discovery` (inputs), :mod:`.plan` (outputs), :mod:`.state` (the record of
successful conversions), :mod:`.work` (converting), :mod:`.records` (records, console, reports); this
module is the driver (:func:`convert_many`).
"""

from __future__ import annotations

import datetime as _dt
import os
import time
from pathlib import Path
from typing import Optional

from ..errors import InputError, OutputError, UsageError
from .discovery import (MAX_WALK_DEPTH, MAX_WALK_ENTRIES, Input, discover, discover_all, name_too_long,
                        nothing_converted, nothing_convertible, parse_shard, select_shard)
from .plan import Job, check_no_input_is_written, collisions, make_plan, output_name, safe_output
from .records import STATUSES, Console, Record, Summary, junit_xml, print_console, summary_text, write_reports
from .state import STATE_FILE, State, input_mtime
from .work import cpu_count, refuse_unread_options, run_plan

#: What callers and tests use (re-exported from the modules that define them).
__all__ = ["convert_many", "discover", "parse_shard", "select_shard", "safe_output", "output_name", "Input",
           "State", "STATE_FILE", "STATUSES", "Record", "Summary", "summary_text", "junit_xml", "write_reports",
           "input_mtime", "MAX_WALK_ENTRIES", "MAX_WALK_DEPTH"]


# --------------------------------------------------------------------------- driver

def _dirs_to_sync(done: list) -> set:
    """The directories whose sync the run postponed (:func:`gruconv.files.outputs.defer_sync`): those
    holding a finished job's outputs, and the parents of the directories made for a job."""
    dirs = set()
    for job in done:
        for o in job.record.outputs or []:
            dirs.add(os.path.dirname(os.path.abspath(o)))
        for d in getattr(job, "made_dirs", None) or []:
            dirs.add(os.path.dirname(os.path.abspath(d)))
    return dirs


def convert_many(paths, out_dir, *, jobs: Optional[int] = None, keep_going: bool = False,
                 skip_existing: bool = False, shard=None, report=None, junit=None, echo: bool = True,
                 print_fn=None, html=None, **options) -> Summary:
    """Convert every model in ``paths`` into ``out_dir``; see the module docstring.

    ``options`` are :func:`gruconv.api.convert`'s (``force``, ``format``, ``config``, ``verify``,
    ``bounds``, ``hints``, ``rnn``, ``prefer``, ...). ``echo=False`` silences the console.
    ``html``: a directory for one HTML page per input and an ``index.html`` (:func:`.records.write_html`).
    ``print_fn(text, err=False, nl=True)`` prints the console (per-input lines and progress with
    ``err=True``, the summary table with ``err=False``); ``click.echo`` fits, and the default
    writes to ``sys.stderr`` / ``sys.stdout``.
    Before any conversion, refuses (:class:`OutputError`) a planned output or ``report`` /
    ``junit`` file that is one of the inputs (same path, symlink or hard link).
    With ``jobs > 1`` the workers are forked only when that is safe (Linux, no ``verify`` /
    ``check_load``, no ML framework imported, no other thread: :func:`.work.start_method`) and *spawned*
    otherwise (TensorFlow is not fork-safe), so a script calling this must guard its top level with
    ``if __name__ == "__main__":``, as for any spawn pool.  The outputs' fsyncs are deferred to one
    ``syncfs`` at the end of the run, before the record and reports are written
    (:func:`gruconv.files.outputs.defer_sync` says what that keeps and what it gives up).
    Raises :class:`UsageError` for a bad ``shard``/``jobs``/``format``; per-input problems are
    records in the returned :class:`Summary`, never exceptions.
    """
    t0 = time.perf_counter()
    started = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    shard_t = parse_shard(shard)
    if jobs is None:
        jobs = cpu_count()
    if not isinstance(jobs, int) or jobs < 1:
        raise UsageError(f"--jobs must be a positive integer, got {jobs!r}")
    if options.get("format") is not None:
        from .. import writers

        writers.module(options["format"])  # a writer's name, or the one usage line
    if not paths:
        raise UsageError("no inputs given")
    config_file = None
    if options.get("config") is not None and not isinstance(options["config"], dict):
        config_file = Path(options["config"])   # an input: no output or report may overwrite it
        why = name_too_long(config_file)
        if why is not None:
            raise InputError(why, path=config_file)
        options["config"] = str(config_file.resolve())  # workers may not share our cwd
    if options.get("custom_objects") is not None:  # the user's classes: same reason
        options["custom_objects"] = str(Path(options["custom_objects"]).resolve())
    out_dir = Path(out_dir)
    why = name_too_long(out_dir)
    if why is not None:
        raise OutputError(f"--out-dir: {why}", path=out_dir)
    try:
        if os.path.lexists(out_dir) and not out_dir.is_dir():
            raise OutputError("--out-dir exists and is not a directory", path=out_dir)
    except OSError as e:
        raise OutputError(f"cannot use the output directory ({e.strerror or e})", path=out_dir) from None
    from ..files.outputs import check_creatable

    for flag, path in (("--report", report), ("--junit", junit)):
        if path is not None:   # written at the end: refused now, before anything is converted
            check_creatable(Path(path), what=flag)

    # Every whole-run refusal comes before anything is written: --out-dir is created only once the
    # plan stands and something is to be converted.
    all_items, roots = discover_all(paths, out_dir)
    items = select_shard(all_items, shard_t)
    refuse_unread_options(all_items, options)
    state = State(out_dir)
    plan = make_plan(items, out_dir, options, skip_existing, state, collisions(all_items, out_dir, options))
    check_no_input_is_written(plan, all_items, [report, junit], (config_file,))
    if html is not None:
        check_no_input_is_written(plan, all_items, [Path(html) / "index.html"], (config_file,))
    if any(job.todo for job in plan):
        try:
            out_dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise OutputError(f"cannot create the output directory ({e.strerror or e})", path=out_dir) from None
    summary = Summary(records=[], started=started, jobs=jobs,
                      shard=None if shard_t is None else f"{shard_t[0]}/{shard_t[1]}", out_dir=str(out_dir),
                      nothing_found=nothing_convertible(all_items, roots))
    say = print_fn or print_console
    console = Console(len(plan), echo, say)
    done: list[Job] = []
    from ..files import outputs

    deferred = outputs.defer_sync(True)  # this process's conversions (jobs=1); workers set their own
    try:
        run_plan(plan, jobs, keep_going, options, console, done, state)
    finally:
        outputs.restore_sync(deferred)
        console.close()
        # every output (data and rename) made durable before the record of successful conversions says so
        outputs.sync_deferred(_dirs_to_sync(done))
        state.save()
        done_ids = {id(j) for j in done}
        summary.records = [j.record for j in plan if id(j) in done_ids]
        summary.not_run = [j.record.input for j in plan if id(j) not in done_ids]
        summary.duration_s = time.perf_counter() - t0
        if summary.nothing_found is None and shard_t is None:
            summary.nothing_found = nothing_converted(summary.records, roots)
        write_reports(summary, report, junit, html)
    if echo:
        if summary.nothing_found is not None:
            say(f"gruconv: error: {summary.nothing_found}", err=True)
        say(summary_text(summary))
    return summary


