"""The ``gruconv`` console command: signals are handled from its first line, before Click is imported.

Importing :mod:`gruconv.cli` (Click, the regex compiles in ``click._compat``) takes a measurable time
on a loaded machine; a SIGINT in that window used to end in Python's ``KeyboardInterrupt`` traceback
(seen in ``tests/cli/test_signals.py`` at 0.3 s under a load average of 10).  Here the handlers of
:mod:`gruconv.signals` are installed first, and an interruption before the command starts is the same
one line and ``128 + signal`` exit code as one during it.  Nothing is written before the command runs.
"""

from __future__ import annotations

import sys


def main() -> None:
    from .signals import Interrupted, install

    try:
        # inside the try: a signal that lands while install() is still setting the later handlers
        # raises Interrupted from inside it (seen once in tests/cli/test_signals.py at delay 0.0)
        install()
        from .cli import main as command
    except Interrupted as e:
        sys.stderr.write(f"gruconv: error: {e} while starting; nothing was written\n")
        sys.exit(e.exit_code)
    except Exception as e:  # a broken install or a bug at import: the internal-error line, exit 4
        _internal_error(e)
    try:
        try:
            command(prog_name="gruconv")
        finally:
            _hold_signals()
    except Interrupted as e:  # arrived after the command ended, before the signals were held
        sys.stderr.write(f"gruconv: error: {e}\n")
        sys.exit(e.exit_code)
    except Exception as e:  # the command maps its own errors (gruconv.cli._Group); this is the last net
        _internal_error(e)


def _internal_error(e: BaseException) -> None:
    """What :class:`gruconv.cli._Group` does for a bug, for one that escaped it (or Click was never
    reached): one line, the traceback too with ``--debug`` anywhere in the arguments or
    ``GRUCONV_DEBUG=1``, exit 4 (:class:`gruconv.errors.InternalError`)."""
    from .errors import InternalError

    debug = "--debug" in sys.argv[1:] or InternalError.debug_from_env()
    if debug:
        import traceback

        sys.stderr.write("".join(traceback.format_exception(e)))
    sys.stderr.write(InternalError.line(e, debug=debug) + "\n")
    sys.exit(InternalError.exit_code)


def _hold_signals() -> None:
    """Ignore SIGTERM/SIGINT for the rest of the process: the command has ended (its output is complete
    and in place, or nothing was written) and its exit status is decided.  Why: interpreter finalization
    puts the default action back for signals that have a Python handler (CPython's ``_PySignal_Fini``;
    ``SIG_IGN`` it leaves alone), so a signal in the last ~0.1-0.4 s of the process (module teardown,
    libhdf5's exit handlers) killed it (exit -2 / -15, no message) after a successful conversion;
    ``tests/cli/test_signals.py`` hit that window once conversions got faster.  Ignored, not
    blocked: a mask is per thread, and NumPy's BLAS threads would take the signal instead."""
    import signal

    from .signals import HANDLED

    for s in HANDLED:
        try:
            signal.signal(s, signal.SIG_IGN)
        except (OSError, ValueError):
            pass
