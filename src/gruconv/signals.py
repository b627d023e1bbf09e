"""SIGTERM and SIGINT as exceptions, so every ``finally`` and context manager cleans up.

Without a handler, SIGTERM kills the process where it stands: staging files (``.NAME.PID.tmp.keras``,
``$TMPDIR/gruconv-*``) stay behind, and SIGINT surfaces as Click's ``Aborted!`` with exit 1, the
parity-failure code.  :func:`install` turns both into :class:`Interrupted`, a
``BaseException`` (like ``KeyboardInterrupt``) so no ``except Exception`` swallows it; the CLI maps it
to the shell's convention, ``128 + signal number`` (130 for SIGINT, 143 for SIGTERM).

Batch workers are separate processes: :func:`die_with_parent` ends a worker when the process that
started it is gone (``PR_SET_PDEATHSIG`` on Linux, and a watcher thread everywhere), so a killed main
process never leaves workers computing for nobody.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading

HANDLED = (signal.SIGTERM, signal.SIGINT)


class Interrupted(BaseException):
    """The process was asked to stop (SIGTERM/SIGINT); raised in the main thread by the handler."""

    def __init__(self, signo: int):
        self.signo = signo
        self.exit_code = 128 + signo
        super().__init__(f"interrupted by {signal.Signals(signo).name}")


#: The signal :func:`_raise` received since :func:`install` (None: none).
_received = None


def received():
    """The signal number received since :func:`install`, or None.  Raised inside a C extension's
    callback, :class:`Interrupted` can surface as another exception (h5py: ``SystemError ...
    returned a result with an exception set``) or be caught by an ``except`` that turns it into a
    per-input error; the CLI and the batch loop ask this to still stop as interrupted."""
    return _received


def check() -> None:
    """Raise :class:`Interrupted` if a signal was received (for loops that catch per-item errors)."""
    if _received is not None:
        raise Interrupted(_received)


#: How many :func:`held` blocks the main thread is in, and the signal that arrived meanwhile.
_holding = 0
_pending = None


@contextlib.contextmanager
def held():
    """Hold SIGTERM/SIGINT back for a few statements: the ones that create a temporary file and
    record its name for the ``finally`` that removes it.

    Why: a Python signal handler runs between any two bytecodes, so an :class:`Interrupted` raised
    just after ``mkstemp`` made its file, before the ``try`` that removes it began, left the file
    behind (CI: a ``--jobs 2`` batch stopped by SIGINT left a hidden temporary in
    ``--out-dir``).  Inside the block the handlers (:func:`_raise`, the batch worker's) only note
    the signal (:func:`deferred`); it is raised as the block ends, where the caller's ``try``
    already covers the file.  Held in Python, not with ``pthread_sigmask``: that masks one thread,
    and the kernel hands a process-directed signal to any thread that does not mask it (a batch
    worker's parent watcher, a framework's pool), whose arrival still runs the handler in the main
    thread at once.  Outside the main thread (where no handler runs) a no-op."""
    global _holding, _pending
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _holding += 1
    try:
        yield
    finally:
        _holding -= 1
        if not _holding and _pending is not None:
            signo, _pending = _pending, None
            raise Interrupted(signo)


def deferred(signo: int) -> bool:
    """For a signal handler: inside a :func:`held` block, note ``signo`` for the block's end and
    return True (the handler then returns without raising)."""
    global _pending
    if _holding:
        _pending = signo
        return True
    return False


def _raise(signo, _frame):
    global _received
    _received = signo
    # A second signal while cleaning up must not interrupt the cleanup itself.
    for s in HANDLED:
        signal.signal(s, signal.SIG_IGN)
    if not deferred(signo):
        raise Interrupted(signo)


def install() -> dict:
    """Turn SIGTERM/SIGINT into :class:`Interrupted` (main thread only; elsewhere a no-op).

    Returns the handlers it replaced, for :func:`restore` (an in-process caller, e.g. Click's test
    runner, gets its own handlers back)."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    global _received, _pending
    _received = _pending = None
    # A signal the process inherited as ignored (``nohup``, a shell's background job for SIGINT) stays
    # ignored, as Python itself leaves an inherited SIG_IGN for SIGINT in place.
    previous = {s: signal.getsignal(s) for s in HANDLED if signal.getsignal(s) is not signal.SIG_IGN}
    for s in previous:
        signal.signal(s, _raise)
    xfsz = getattr(signal, "SIGXFSZ", None)
    if xfsz is not None:
        # Past a file-size limit (``ulimit -f``) the kernel sends SIGXFSZ, whose default action kills
        # the process where it stands (temporary files left, a core dump); ignored, the write fails
        # with EFBIG instead and the error path cleans up: one line, exit 3.
        previous[xfsz] = signal.getsignal(xfsz)
        signal.signal(xfsz, signal.SIG_IGN)
    return previous


def restore(previous: dict) -> None:
    for s, h in previous.items():
        if h is not None:
            signal.signal(s, h)


def die_with_parent(parent: "int | None" = None, watch: bool = True) -> None:
    """In a worker process: exit as soon as the parent process is gone.

    ``parent``: the pid of the process that started this one, as that process knew it
    (``multiprocessing.parent_process().pid``); not ``getppid()`` now, which is already 1 (or a
    subreaper) when the parent died while this worker was still starting -- the race a SIGKILL
    right after ``--jobs 2`` started its workers hit.  ``PR_SET_PDEATHSIG`` (Linux,
    ``prctl(2)``) delivers SIGTERM to this process when the parent thread exits, and a daemon thread
    polls ``getppid()`` once a second for the platforms and races that prctl does not cover."""
    if parent is None:
        parent = os.getppid()
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        PR_SET_PDEATHSIG = 1
        libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    except (OSError, AttributeError):
        pass
    signal.signal(signal.SIGTERM, lambda *_: os._exit(128 + signal.SIGTERM))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C goes to the whole group: the parent decides
    if os.getppid() != parent:
        os._exit(128 + signal.SIGTERM)

    if not watch:
        return  # the caller polls getppid() itself (a process that forks must have no second thread)

    def watcher():
        import time

        while True:
            time.sleep(1.0)
            if os.getppid() != parent:
                os._exit(128 + signal.SIGTERM)

    threading.Thread(target=watcher, name="gruconv-parent-watch", daemon=True).start()

