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


class GruconvError(Exception):
    """Base class: a problem with the user's input, options or environment."""

    exit_code = 3

    def __init__(self, message: str, *, path: object = None):
        self.path = None if path is None else str(path)
        self.message = " ".join(str(message).split())
        super().__init__(self.message)

    def __str__(self) -> str:
        """One line, whatever the file or tensor names hold: control characters are escaped."""
        from .inputs import display

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
