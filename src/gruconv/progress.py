"""Progress of one long run (``convert`` / ``verify`` of a large model) on a terminal.

Library code calls :func:`step` at the top of its per-layer loops (verify's graph, weights-only and
stack checks; the ``.keras`` writer's layers); that is a no-op unless the CLI has installed a
reporter with :func:`on_terminal`, which draws one ``\\r``-updated line on stderr (``verify: layer
3/6 encoder/gru``) when stderr is a terminal, and nothing at all otherwise: piped output, CI logs
and ``CliRunner`` stay exactly as before.  The line is erased when the run ends, so the report
that follows starts on a clean line.  Batch mode keeps its own progress line
(:class:`gruconv.batch.records.Console`) and installs none.

One reporter per process (a run is single-threaded; batch workers never install one)."""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Callable, Optional

_reporter: Optional[Callable] = None


def step(stage: str, done: int, total: Optional[int] = None, what: str = "") -> None:
    """Say that ``stage`` (``verify``, ``convert``) is at item ``done`` of ``total`` (None: unknown)
    -- ``what``: the item's name (a layer path).  Cheap and silent without a reporter."""
    if _reporter is not None:
        _reporter(stage, done, total, what)


def _line(stage: str, done: int, total: Optional[int], what: str) -> str:
    from .errors import display   # control characters in a layer name never reach the terminal

    count = f"{done}/{total}" if total else f"{done}"
    return f"{stage}: layer {count}" + (f" {display(what)}" if what else "")


@contextlib.contextmanager
def on_terminal(stream=None):
    """Install the terminal reporter for the ``with`` block when ``stream`` (default: stderr) is a
    terminal; otherwise install nothing.  The line is cut to the terminal's width and erased at the
    end, whatever the block raised."""
    global _reporter
    stream = sys.stderr if stream is None else stream
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):
        tty = False
    if not tty or _reporter is not None:
        yield
        return
    width = [0]

    def draw(stage, done, total, what):
        try:
            cols = os.get_terminal_size(stream.fileno()).columns or 80   # 0: a pty with no size set
        except (OSError, ValueError, AttributeError):
            cols = 80
        text = _line(stage, done, total, what)[: max(10, cols - 1)]
        stream.write("\r" + text + " " * max(0, width[0] - len(text)))
        stream.flush()
        width[0] = len(text)

    _reporter = draw
    try:
        yield
    finally:
        _reporter = None
        if width[0]:
            stream.write("\r" + " " * width[0] + "\r")
            stream.flush()
