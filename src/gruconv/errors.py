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
====================  =====  =============================================

Messages say what was found, what was expected, and where (file and tensor
path), so the CLI can print them as one line.
"""

from __future__ import annotations

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
