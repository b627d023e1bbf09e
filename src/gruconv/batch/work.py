"""The work: converting one input (:func:`gruconv.api.convert`) in-process or in spawned workers, the options each input gets, and settling each job (placing or undoing its outputs)."""

from __future__ import annotations

import concurrent.futures as cf
import json
import os
import time
import traceback
from typing import Optional

from ..errors import GruconvError, InternalError, OutputError, ParityError
from .records import FAILED, Console, Record
from .state import State, input_mtime, output_files
from .plan import Job, fail_record, options_record, snapshot, undo


# --------------------------------------------------------------------------- workers

def _worker_init(threads: int, warm_keras: bool = False) -> None:
    """Pool initializer: end with the main process (:func:`gruconv.signals.die_with_parent`: a
    killed main process once left its workers running for over an hour); SIGTERM while a
    job runs unwinds it (its temporary files removed) before the worker exits 143; cap the
    framework's thread pools at this worker's share of the CPUs (N workers each spinning up one
    thread per core only fight each other), then, when the run needs Keras (``--verify``,
    ``--check-load``), pay the framework start-up once per worker, before its first job.  A plain
    conversion streams without Keras: nothing is imported then."""
    import multiprocessing
    import signal

    from ..signals import die_with_parent

    from ..files import outputs

    parent = multiprocessing.parent_process()
    die_with_parent(parent.pid if parent is not None else None)
    outputs.defer_sync(True)  # the main process syncs the outputs at the end of the run
    signal.signal(signal.SIGTERM, _worker_sigterm)
    for var in ("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS", "OMP_NUM_THREADS"):
        os.environ.setdefault(var, str(threads))
    if not warm_keras:
        return
    try:
        from ..keras3.runtime import keras

        keras()
    except Exception:  # noqa: BLE001 - the first conversion reports it properly
        pass


#: True while this worker runs a job (:func:`_worker_sigterm` then unwinds it instead of exiting).
_in_job = False


#: The signal this worker received (its job may have turned the Interrupted into an error record).
_stop_signo = None


def _worker_sigterm(signo, _frame):
    global _stop_signo
    from ..signals import Interrupted, deferred

    _stop_signo = signo
    if _in_job:
        if deferred(signo):
            return  # raised as the held block ends (a temporary file being made: signals.held)
        raise Interrupted(signo)  # finally blocks remove the job's temporary files; _convert_one exits
    os._exit(128 + signo)


def _jsonable(obj):
    return json.loads(json.dumps(obj, default=str))


def _convert_one(input: str, output: str, options: dict) -> dict:
    """Convert one input; never raises for a per-input problem (returns the record's fields)."""
    global _in_job
    from .. import api
    from ..signals import Interrupted

    t0 = time.perf_counter()
    out: dict = {"status": "failed", "exit_code": GruconvError.exit_code}
    try:
        try:
            _in_job = True
            result = api.convert(input, output, **options)
        finally:
            _in_job = False
        res = _jsonable(result.to_json())
        out.update(format=res.get("format"), outputs=res.get("outputs") or [],
                   stacks=res.get("rnns") or res.get("stacks") or [],
                   warnings=res.get("warnings") or [], verification=res.get("verification"))
        ver = res.get("verification")
        if result.nothing_to_convert and not res.get("outputs"):
            out.update(status="nothing-to-convert", exit_code=0)
        elif ver is not None and not ver.get("passed", True):
            out.update(status="parity-failed", exit_code=ParityError.exit_code, error_type="ParityError",
                       error=_parity_message(ver))
        else:
            out.update(status="ok", exit_code=0)
    except Interrupted as e:
        if _is_worker():
            os._exit(e.exit_code)  # unwound: the job's temporary files are gone; the main process decides
        raise
    except GruconvError as e:
        out.update(status="parity-failed" if isinstance(e, ParityError) else "failed", exit_code=e.exit_code,
                   error=str(e), error_type=type(e).__name__)
    except Exception as e:  # noqa: BLE001 - a bug: record it, keep the batch alive
        out.update(status="internal-error", exit_code=InternalError.exit_code,
                   error=f"internal error: {InternalError.describe(e)}", error_type="InternalError",
                   traceback=traceback.format_exc())
    if _stop_signo is not None and _is_worker():
        os._exit(128 + _stop_signo)  # the job ended in an error record because it was interrupted
    out["seconds"] = time.perf_counter() - t0
    return out


def _is_worker() -> bool:
    import multiprocessing

    return multiprocessing.parent_process() is not None


def _parity_message(ver: dict) -> str:
    bad = [c for c in ver.get("checks") or [] if not c.get("passed", True)]
    if not bad:
        return "verification failed"
    parts = [f"{c.get('name')}: max abs {c.get('max_abs'):.3g} > {c.get('tolerance'):.3g}" for c in bad[:3]]
    more = f" (+{len(bad) - 3} more)" if len(bad) > 3 else ""
    return "converted model outside tolerance: " + "; ".join(parts) + more


def _apply(rec: Record, res: dict) -> None:
    rec.status = res["status"]
    rec.exit_code = res.get("exit_code", 0)
    rec.format = res.get("format") or rec.format
    for k in ("outputs", "stacks", "warnings"):
        setattr(rec, k, res.get(k) or [])
    rec.verification = res.get("verification")
    rec.error, rec.error_type = res.get("error"), res.get("error_type")
    rec.traceback = res.get("traceback")
    rec.seconds = res.get("seconds", 0.0)


def cpu_count() -> int:
    """CPUs this process may use (its affinity mask where the OS has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _prepare(job: Job) -> None:
    """Create the output's parent directories (remembered, so a failure can remove them again),
    and note what the output files are before the job (:func:`snapshot`)."""
    job.snap = snapshot(job.outs)
    job.prepared = True  # from here on, an interrupted run undoes what this job wrote
    try:
        job.input_mtime = input_mtime(job.item)
    except (OSError, ValueError):
        job.input_mtime = None
    if job.output is not None and str(job.output.parent):
        missing = []
        d = job.output.parent
        while str(d) not in ("", ".") and not os.path.lexists(d):
            missing.append(d)
            d = d.parent
        job.output.parent.mkdir(parents=True, exist_ok=True)
        job.made_dirs = missing


def _settle(job: Job, state: Optional[State]) -> None:
    """After a job: a failure leaves no output (files it created or replaced are removed, and the
    directories made for it); the record of successful conversions is updated either way."""
    rec = job.record
    if rec.status in FAILED:
        removed = undo(job.outs, job.snap)
        if removed and rec.status == "parity-failed":
            rec.warnings.append(f"output removed because verification failed: {', '.join(removed)}")
        if removed:
            rec.outputs = [o for o in rec.outputs if o not in removed]
        for d in getattr(job, "made_dirs", []):
            try:
                d.rmdir()
            except OSError:
                break
        if state is not None and job.output is not None:
            state.failed(job.output)
    elif state is not None and job.output is not None:
        if rec.status == "ok" and output_files(job.outs):
            state.succeeded(job.item, job.outs, job.input_mtime)
        else:
            state.failed(job.output)


def _run_formats(options: dict) -> list:
    """The writers a run may use: ``--format``'s, else any (each input's own default)."""
    from .. import writers

    return [options["format"]] if options.get("format") else list(writers.WRITERS)


def refuse_unread_options(items: list, options: dict) -> None:
    """Refuse (exit 2) before any work an option that no reader or writer of the run reads (a
    ``--config`` in a run of checkpoints only, ``--rnn`` with Keras files only, ...)."""
    from .. import run_options

    names = sorted({item.format for item in items if item.format})
    if not names:
        return  # nothing is read: nothing to refuse
    accepted = set()
    for name in names:
        accepted |= run_options.accepted_options(name, _run_formats(options))
    run_options.refuse_unread(options_record(options), accepted, "any input of this run")


def _job_options(job: Job, options: dict) -> dict:
    """``options`` for one input: those its reader and writers do not read are left out (they are
    for the run's other inputs; the run refused any that no input reads)."""
    if job.item.format:
        from .. import run_options
        from ..options import Options

        accepted = run_options.accepted_options(job.item.format, _run_formats(options))
        options = {k: v for k, v in options.items() if k not in Options.__dataclass_fields__ or k in accepted}
    return dict(options, force=True) if job.force else options


def run_plan(plan: list[Job], jobs: int, keep_going: bool, options: dict, console: Console, done: list,
         state: Optional[State] = None) -> None:
    """Execute the plan; append each finished job to ``done`` (in completion order)."""
    # Without keep_going, nothing after a failure decided while planning is started.
    runnable = []
    for job in plan:
        runnable.append(job)
        if job.record.status == "failed" and not job.todo and not keep_going:
            break

    def finish(job: Job) -> bool:
        from ..signals import check

        check()  # a signal a job's error handling swallowed still stops the run (unfinished: undone)
        if job.todo:
            _settle(job, state)
        done.append(job)
        console.record(job.record)
        return job.record.status in FAILED

    todo = [j for j in runnable if j.todo]
    workers = min(jobs, len(todo))
    from ..signals import Interrupted

    try:
        _run(runnable, todo, workers, keep_going, options, done, finish)
    except Interrupted:
        # SIGTERM/SIGINT: the workers are stopped (_run); what the unfinished jobs left is removed,
        # so only complete outputs of finished jobs stay (docs/safety.md, "Signals and full disks").
        from ..files.outputs import remove_stale_staging, remove_stale_temps

        finished = {id(j) for j in done}
        for job in todo:
            if id(job) not in finished and getattr(job, "prepared", False):
                undo(job.outs, job.snap)
                # A worker SIGKILLed after the grace period, or stopped inside a library's own
                # file handling, could not remove its temporaries; the workers are gone now, so
                # what a dead process left beside this job's outputs goes at once, not 60 s later.
                for out in job.outs:
                    remove_stale_temps(out, older_than=0.0)
                if job.output is not None:
                    remove_stale_staging(job.output.parent, older_than=0.0)
                for d in getattr(job, "made_dirs", []):
                    try:
                        d.rmdir()
                    except OSError:
                        break
        raise


def start_method(options: dict) -> str:
    """How batch workers start: ``fork`` when that is safe, else ``spawn``.

    Why: a spawned worker starts a fresh interpreter and imports NumPy, h5py and gruconv
    (~0.3-0.6 s each, two at once on a 2-core machine) before its first job, which was a third of a
    ``--jobs 2`` batch of 100 small models; a forked worker has them already.  Fork is used only where
    it is safe: Linux; a run that imports no ML framework (no ``--verify`` / ``--check-load``) in a
    process that holds none (:data:`gruconv.keras3.runtime.FRAMEWORK_MODULES` absent from
    ``sys.modules``); and a calling process with no other thread (forking copies locks another thread may hold; ProcessPoolExecutor forks its
    workers before starting its own manager thread).  Anything else spawns, as before.  Workers run
    :func:`_worker_init` either way (die with the parent, SIGTERM unwinds the job)."""
    import multiprocessing
    import sys
    import threading

    from ..keras3.runtime import FRAMEWORK_MODULES

    if (not sys.platform.startswith("linux") or options.get("verify") or options.get("check_load")
            or "fork" not in multiprocessing.get_all_start_methods()
            or any(m in sys.modules for m in FRAMEWORK_MODULES) or threading.active_count() != 1):
        return "spawn"
    return "fork"


def _preload(runnable: list, options: dict) -> None:
    """Before forking workers: import what a conversion imports (so each worker has it from its
    parent, once), and flush stdout/stderr (a forked child flushes the buffers it inherited when it
    ends: anything still buffered here would be printed twice)."""
    import sys

    from .. import api
    from ..keras3 import archive as keras_archive, config as keras3_config  # noqa: F401 - imported for the workers
    from .. import readers, writers

    for name in sorted({j.item.format for j in runnable if j.todo and j.item.format}):
        try:
            readers.module(name)
        except Exception:  # noqa: BLE001 - the job reports it
            pass
    for name in ([options["format"]] if options.get("format") else list(writers.WRITERS)):
        try:
            writers.module(name)
        except Exception:  # noqa: BLE001
            pass
    import importlib

    importlib.import_module(writers.REST)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):
            pass


def _stop_workers(pool) -> None:
    """SIGTERM every worker of ``pool`` (each unwinds its job, removing its temporary files, and
    exits 143: :func:`_worker_sigterm`) and wait for them; SIGKILL those still running after 30 s."""
    procs = list((getattr(pool, "_processes", None) or {}).values())  # CPython's ProcessPoolExecutor
    for p in procs:
        try:
            p.terminate()
        except (OSError, ValueError, AttributeError):
            pass
    deadline = time.monotonic() + 30.0
    for p in procs:
        try:
            p.join(max(0.0, deadline - time.monotonic()))
            if p.is_alive():
                p.kill()
                p.join(5.0)
        except (OSError, ValueError, AttributeError, AssertionError):
            pass


def _run(runnable: list, todo: list, workers: int, keep_going: bool, options: dict, done: list, finish) -> None:
    if workers <= 1:
        for job in runnable:
            if job.todo:
                try:
                    _prepare(job)
                except OSError as e:
                    fail_record(job.record, OutputError(f"cannot create the output directory ({e.strerror or e})",
                                                  path=job.output))
                else:
                    _apply(job.record, _convert_one(str(job.item.path), str(job.output),
                                                    _job_options(job, options)))
            if finish(job) and not keep_going:
                return
        return

    import multiprocessing

    method = start_method(options)
    if method == "fork":
        _preload(runnable, options)
    ctx = multiprocessing.get_context(method)
    threads = max(1, cpu_count() // workers)
    pool = cf.ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_worker_init,
                                  initargs=(threads, bool(options.get("verify") or options.get("check_load"))))
    futures: dict = {}
    try:
        for job in runnable:
            if not job.todo:
                finish(job)  # skipped, or failed while planning (then last in `runnable`: earlier jobs run)
                continue
            try:
                _prepare(job)
            except OSError as e:
                fail_record(job.record, OutputError(f"cannot create the output directory ({e.strerror or e})",
                                              path=job.output))
                if finish(job) and not keep_going:
                    break
                continue
            futures[pool.submit(_convert_one, str(job.item.path), str(job.output),
                                _job_options(job, options))] = job
        for fut in cf.as_completed(futures):
            job = futures[fut]
            if fut.cancelled():
                continue
            try:
                _apply(job.record, fut.result())
            except cf.CancelledError:
                continue
            except Exception as e:  # noqa: BLE001 - a worker died (BrokenProcessPool) or the result broke
                job.record.status, job.record.exit_code = "internal-error", InternalError.exit_code
                job.record.error = (f"internal error: worker process failed: {type(e).__name__}: {e}"
                                    + (" (a worker died: out of memory, killed, or a spawned worker could not "
                                       "import the calling script's __main__)"
                                       if isinstance(e, cf.process.BrokenProcessPool) else ""))
                job.record.error_type = "InternalError"
                job.record.traceback = "".join(traceback.format_exception(e))
            if finish(job) and not keep_going:
                for f in futures:
                    f.cancel()
    except BaseException:  # Interrupted (or a bug): no worker outlives the run
        _stop_workers(pool)
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
