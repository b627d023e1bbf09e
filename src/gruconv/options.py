"""What the library hands back and takes in: the options record, the verdict's bounds and the conversion result.

A bottom module (it imports nothing of gruconv but errors and the writers registry's names): format modules,
the API, batch mode, verify and the CLI all speak these types, so none of them
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
    ``options(kind)``, by the target kind it writes); :func:`gruconv.run_options.refuse_unread` refuses any
    other one given, naming the target, in
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
    graph_timeout: Optional[float] = None   # TF graph: seconds a run of the user's graph may take (Budget)
    graph_memory: Optional[float] = None    # TF graph: GiB a run of the user's graph may use (Budget)
    batch_size: Optional[int] = None        # .tflite: the fixed batch (None: the model's own, else 1)
    micro: bool = False                     # .tflite: the TFLM profile (unrolled, every size fixed)
    timesteps: Optional[int] = None         # .tflite: fixed time steps (--micro, --int8)
    int8: Optional[str] = None              # .tflite: CALIB.npz of representative inputs, full-integer

    def __post_init__(self) -> None:
        if self.format is not None and self.format not in OUTPUT_FORMATS:
            raise UsageError(f"--format must be one of {', '.join(OUTPUT_FORMATS)}, got {self.format!r}")
        if self.prefer is not None and self.prefer not in ("canonical", "opaque"):
            raise UsageError(f"--prefer must be canonical or opaque, got {self.prefer!r}")
        object.__setattr__(self, "hints", {k: v for k, v in dict(self.hints or {}).items() if v is not None})
        Budget.of(self.graph_timeout, self.graph_memory)  # a bound that is no number > 0: the usage line now

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
        for key in ("custom_objects", "int8"):
            if out[key] is not None:
                out[key] = str(out[key])
        return out


@dataclass(frozen=True)
class Bounds:
    """The verdict's three bounds, one record (``docs/verdicts.md``): a check passes when its max |diff| is
    within ``tolerance`` (absolute), or ``rtol`` x max|reference| of that output, or ``k`` x its measured
    float32 sensitivity floor (:func:`gruconv.verify.floor.decide`).  Made once where the options are parsed
    (the CLI's ``--tolerance``/``--rtol``/``--floor-k``, :meth:`of`), carried by the verify report, read by
    the verdict; the defaults are written here only."""

    #: Absolute bound.
    tolerance: float = 1e-5
    #: Relative bound ``rtol * max|ref|`` (about 16 float32 epsilons).  docs/verdicts.md: correct conversions
    #: reached 1.9e-6 of max|ref| (they pass by the floor bound anyway); the weakest planted error (one bias
    #: off by 1e-4 relative) was 1.34e-5 of it, 6.7x over this bound.  It admits outputs of large magnitude
    #: (an LSTM's c ~ 60 at 400 steps: 1.2e-4) whose rounding an absolute tolerance cannot know.
    rtol: float = 2e-6
    #: Floor multiple.  docs/verdicts.md: correct conversions on the CPU were <= 1.5x their floor (5.3x
    #: under this bound); the weakest planted error was 32x its floor (4x over).  The strict-fp32 GPU path
    #: must be measured against the same floor before this is trusted there (the GPU was 10-20x
    #: further from cuDNN than the CPU on a trained LSTM).
    k: float = 8.0

    def __post_init__(self) -> None:
        if not (self.rtol >= 0 and self.k >= 0):
            raise UsageError(f"--rtol and --floor-k must be >= 0, got {self.rtol:g} and {self.k:g}")

    @classmethod
    def of(cls, tolerance=None, rtol=None, k=None) -> "Bounds":
        """The bounds given, each None one at its default."""
        d = cls()
        return cls(d.tolerance if tolerance is None else tolerance, d.rtol if rtol is None else float(rtol),
                   d.k if k is None else float(k))


@dataclass(frozen=True)
class Budget:
    """What one run of a user's TensorFlow graph may take (:func:`gruconv.tf.bounded.run`): ``seconds`` of wall
    time once TensorFlow has started, ``memory`` GiB of resident memory.  Made from ``--graph-timeout`` and
    ``--graph-memory`` (:meth:`of`); the defaults are written here only.  Why these: the largest real graph
    measured (``docs/graph-bounds.md``) needed a small fraction of either, and a user with a larger one raises
    them."""

    #: Wall-time budget in seconds.
    seconds: float = 300.0
    #: Memory bound in GiB (the child's resident set; its address space gets a headroom beyond it).
    memory: float = 8.0

    def __post_init__(self) -> None:
        import math

        for flag, v in (("--graph-timeout", self.seconds), ("--graph-memory", self.memory)):
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise UsageError(f"{flag} must be a number > 0, got {v!r}")

    @classmethod
    def of(cls, seconds=None, memory=None) -> "Budget":
        """The bounds given, each None one at its default."""
        d = cls()
        return cls(d.seconds if seconds is None else float(seconds), d.memory if memory is None else float(memory))


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
