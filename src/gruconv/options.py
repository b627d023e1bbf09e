"""What the library hands back and takes in: the options record and the conversion result.

A bottom module (it imports nothing of gruconv but errors and the writers registry's names): format modules,
the API, batch mode and the CLI all speak these two types, so none of them
imports another for a data class.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Optional

from .errors import UsageError
from .writers import WRITERS

#: Output formats ``convert`` can write: the writers registry's names (:mod:`gruconv.writers`).
OUTPUT_FORMATS = tuple(WRITERS)


@dataclass(frozen=True)
class Options:
    """Every conversion option, in one record that every format module takes whole.

    Each reader and writer declares the fields it reads (a reader's ``OPTIONS``, a writer's
    ``options(graph)``); :func:`gruconv.run_options.refuse_unread` refuses any other one given, in
    one line (exit 2), instead of dropping it silently.
    """

    force: bool = False
    format: Optional[str] = None            # output format: keras | h5-weights | keras-weights | None (name)
    config: object = None                   # architecture JSON path or dict (Keras weights-only input)
    hints: dict = field(default_factory=dict)   # TF1 opaque-buffer shape hints
    rnn: Optional[str] = None               # TF1: the one stack to convert
    prefer: Optional[str] = None            # TF1: canonical | opaque
    initial_state: bool = False             # TF1: initial-state inputs
    return_state: bool = False              # TF1: final-state outputs
    mask_input: bool = False                # TF1: a (batch, time) mask input
    check_load: bool = False                # .keras / .weights.h5: load the output with Keras, digests compared
    custom_objects: Optional[str] = None    # a user's .py file of Keras 3 classes for custom layers

    def __post_init__(self) -> None:
        if self.format is not None and self.format not in OUTPUT_FORMATS:
            raise UsageError(f"--format must be one of {', '.join(OUTPUT_FORMATS)}, got {self.format!r}")
        if self.prefer is not None and self.prefer not in ("canonical", "opaque"):
            raise UsageError(f"--prefer must be canonical or opaque, got {self.prefer!r}")
        object.__setattr__(self, "hints", {k: v for k, v in dict(self.hints or {}).items() if v is not None})

    @classmethod
    def of(cls, options=None, **kw) -> "Options":
        """``options`` itself, or one built from keyword arguments (the Python API's style)."""
        if isinstance(options, cls):
            return options
        if isinstance(options, dict):
            kw = {**options, **kw}
        unknown = sorted(set(kw) - set(cls.__dataclass_fields__))
        if unknown:
            raise UsageError(f"unknown option(s): {', '.join(unknown)}")
        return cls(**kw)

    def to_json(self) -> dict:
        out = asdict(self)
        if out["config"] is not None and not isinstance(out["config"], dict):
            out["config"] = str(out["config"])
        if out["custom_objects"] is not None:
            out["custom_objects"] = str(out["custom_objects"])
        return out


@dataclass
class ConvertResult:
    """What a conversion did: for reports, batch summaries and the CLI.

    ``rnns`` holds one entry per converted recurrent stack in the schema
    ``inspect`` uses (``name``, ``cell``, ``kind``, ``shape``, ``params``,
    ``converts_to``, ...).
    """

    input: str
    format: str
    outputs: list = field(default_factory=list)
    rnns: list = field(default_factory=list)
    warnings: list = field(default_factory=list)
    nothing_to_convert: bool = False
    verification: Optional[dict] = None
    reason: Optional[str] = None    # why there is nothing to convert, when the reader says more than "no cuDNN RNN"

    def to_json(self) -> dict:
        out = {
            "input": self.input, "format": self.format, "outputs": self.outputs,
            "rnns": self.rnns, "warnings": self.warnings,
            "nothing_to_convert": self.nothing_to_convert, "verification": self.verification,
        }
        if self.reason is not None:
            out["reason"] = self.reason
        return out
