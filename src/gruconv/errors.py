"""The one exception hierarchy for problems a user can act on.

Anything raised from gruconv that is *not* a :class:`GruconvError` is a bug.
The CLI (``gruconv.cli``) maps these classes to exit codes in one place:

====================  =====  =============================================
class                 exit   meaning
====================  =====  =============================================
ParityError           1      verification ran and found outputs outside
                             the tolerance
UsageError            2      options that contradict each other or the input
InputError            3      input that cannot be read (missing, malformed,
                             truncated, hostile)
UnsupportedError      3      readable input gruconv deliberately refuses
OutputError           3      the output cannot be written (exists, no
                             directory, read-only)
ReferenceUnavailable  3      the requested reference (cuDNN) cannot run here
InternalError         4      any other exception: a bug in gruconv (one line;
                             ``--debug`` or ``GRUCONV_DEBUG=1`` adds the
                             traceback).  Batch mode records it per input as
                             ``internal-error``.
====================  =====  =============================================

Signals are not errors: SIGTERM/SIGINT exit ``128 + signal`` (:mod:`gruconv.signals`), and Click's
own exits (``--help``, ``--version``) keep their codes.  Why 4 for a bug: Python's own exit for an
uncaught exception is 1, the parity-failure code, so a CI job read a gruconv bug as "numbers differ"
(STRUCTURE-REVIEW section 6, measured with a planted ``RuntimeError``).

Messages say what was found, what was expected, and where (file and tensor
path), so the CLI can print them as one line.
"""

from __future__ import annotations

import contextlib
import os
import re
import unicodedata


class GruconvError(Exception):
    """Base class: a problem with the user's input, options or environment."""

    exit_code = 3

    def __init__(self, message: str, *, path: object = None):
        self.path = None if path is None else str(path)
        self.message = " ".join(str(message).split())
        super().__init__(self.message)

    def __str__(self) -> str:
        """One line, whatever the file or tensor names hold: control characters are escaped."""
        msg = display(self.message)
        return f"{display(self.path)}: {msg}" if self.path else msg


class InputError(GruconvError):
    """The input cannot be read: missing, malformed, truncated or inconsistent."""


class UnsupportedError(GruconvError):
    """The input is readable but holds something gruconv will not convert."""


class OutputError(GruconvError):
    """The output cannot be written where asked."""


class UsageError(GruconvError):
    """Options that contradict each other or the input."""

    exit_code = 2


class ParityError(GruconvError):
    """Verification ran and the converted model disagrees with the reference."""

    exit_code = 1


class ReferenceUnavailable(GruconvError):
    """The requested numerical reference (e.g. real cuDNN) cannot run on this machine."""


class InternalError(Exception):
    """Not a :class:`GruconvError` on purpose: what every *other* exception is reported as.

    Never raised for a user's problem; the CLI (:class:`gruconv.cli._Group`, :func:`gruconv.entry.main`)
    and batch mode (:mod:`gruconv.batch.work`) turn any exception that is not a :class:`GruconvError`
    into :meth:`line` and this exit code."""

    exit_code = 4
    #: The environment variable that asks for the traceback, like the ``--debug`` option.
    DEBUG_ENV = "GRUCONV_DEBUG"

    @staticmethod
    def describe(e: BaseException) -> str:
        """``<Type>: <first line of its message>`` (the type alone when it has no message), one line."""
        text = str(e).strip()
        name = type(e).__name__
        return f"{name}: {display(first_line(e, 300))}" if text else name

    @classmethod
    def line(cls, e: BaseException, *, debug: bool = False) -> str:
        """The one stderr line for a bug (without ``gruconv: ``'s trailing newline)."""
        how = "see the traceback above" if debug else "rerun with --debug for the traceback"
        return f"gruconv: internal error: {cls.describe(e)}; {how}, and please report it"

    @classmethod
    def debug_from_env(cls) -> bool:
        """``GRUCONV_DEBUG`` set to anything but empty, ``0``, ``false`` or ``no``."""
        return os.environ.get(cls.DEBUG_ENV, "").strip().lower() not in ("", "0", "false", "no")


# --------------------------------------------------------------------------- one-line text
# Every message is one line (the CLI prints ``str(error)``): these two helpers are the only place
# that makes it so; :mod:`gruconv.files.inputs` re-exports :func:`display`.

_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\x1b": "\\x1b"}


def _escape_char(ch: str) -> str:
    if ch in _ESCAPES:
        return _ESCAPES[ch]
    o = ord(ch)
    if 0xDC80 <= o <= 0xDCFF:          # a byte that was not UTF-8 (surrogateescape)
        return f"\\x{o - 0xDC00:02x}"
    if o <= 0xFF:
        return f"\\x{o:02x}"
    return f"\\u{o:04x}" if o <= 0xFFFF else f"\\U{o:08x}"


def _needs_escape(ch: str) -> bool:
    o = ord(ch)
    if o < 0x20 or 0x7F <= o < 0xA0:
        return True
    if o < 0x80:
        return False
    # line/paragraph separators, bidi overrides and other format characters, lone surrogates
    return unicodedata.category(ch) in ("Zl", "Zp", "Cf", "Cs", "Cc")


_PLAIN = re.compile(r"[\x20-\x7e]*\Z")


def display(value) -> str:
    """``value`` (a path, bytes or text) as one printable line: control characters escaped.

    Newline becomes ``\\n``, ESC ``\\x1b``, a non-UTF-8 byte of a file name ``\\xNN``, a Unicode
    line separator or bidi override ``\\uNNNN``; everything else is kept as is.
    """
    if isinstance(value, (bytes, bytearray)):
        value = bytes(value).decode("utf-8", "surrogateescape")
    else:
        value = os.fspath(value) if isinstance(value, os.PathLike) else str(value)
        if isinstance(value, bytes):
            value = value.decode("utf-8", "surrogateescape")
    if _PLAIN.match(value):
        return value
    return "".join(_escape_char(c) if _needs_escape(c) else c for c in value)


def first_line(e: BaseException, limit: int = 0) -> str:
    """The first line of an exception's text (its class name when it has none); with ``limit``,
    cut at a word before that many characters, ``...`` marking the cut."""
    text = str(e).strip()
    msg = text.splitlines()[0] if text else type(e).__name__
    if limit and len(msg) > limit:
        msg = msg[:limit].rsplit(" ", 1)[0] + " ..."
    return msg


@contextlib.contextmanager
def about(path, kinds: tuple = ()):
    """An error of ``kinds`` (default: every :class:`GruconvError`) raised inside the block that names no
    file is raised again said of ``path``: the one place of that rule (a reader's ``read``, a writer's pass
    over a graph's weights: the message is about the input, which the code deep inside never knew)."""
    try:
        yield
    except (kinds or GruconvError) as e:
        if e.path is None:
            raise type(e)(e.message, path=path) from None
        raise
