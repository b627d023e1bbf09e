"""The ``gruconv`` console command: signals are handled from its first line, before Click is imported.

Importing :mod:`gruconv.cli` (Click, the regex compiles in ``click._compat``) takes a measurable time
on a loaded machine; a SIGINT in that window used to end in Python's ``KeyboardInterrupt`` traceback
(seen in ``tests/test_signals.py`` at 0.3 s under a load average of 10).  Here the handlers of
:mod:`gruconv.signals` are installed first, and an interruption before the command starts is the same
one line and ``128 + signal`` exit code as one during it.  Nothing is written before the command runs.
"""

from __future__ import annotations

import sys


def main() -> None:
    from .signals import Interrupted, install

    install()
    try:
        from .cli import main as command
    except Interrupted as e:
        sys.stderr.write(f"gruconv: error: {e} while starting; nothing was written\n")
        sys.exit(e.exit_code)
    command(prog_name="gruconv")
