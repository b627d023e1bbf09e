"""Driver knowledge about a run's options and names, over both registries: which options a run of a reader
into a writer reads (:func:`accepted_options`), the refusal of every other given one (:func:`refuse_unread`),
and the name endings batch mode strips from an input's name (:func:`input_suffixes`).

Here, not in ``readers/__init__.py``: these rules read the writers' registry too, and a reader imports no
writer; the drivers (:mod:`gruconv.api`, :mod:`gruconv.verify`, :mod:`gruconv.batch`) call them.
"""

from __future__ import annotations

from . import readers, writers
from .errors import UsageError


def input_suffixes() -> tuple:
    """Name endings batch mode strips from an input's name to name its output: every reader's
    ``SUFFIXES`` and every ending a writer claims (an input named like an output)."""
    return tuple(dict.fromkeys(sum((tuple(readers.module(n).SUFFIXES) for n in readers.READERS), ())
                               + writers.suffixes()))


# --------------------------------------------------------------------------- options

#: The command-line spelling of the :class:`gruconv.options.Options` fields whose flag is not
#: simply ``--field-name`` (the TF1 shape hints travel in one dict).
_HINT_FLAGS = {"variable": "--variable", "forget_bias": "--forget-bias"}


def given_options(options) -> list:
    """``(field, flag)`` for every option set to something other than its default, in field order
    (``force`` and ``format`` included: :data:`gruconv.writers.COMMON_OPTIONS` reads them)."""
    import dataclasses

    out = []
    for f in dataclasses.fields(options):
        value = getattr(options, f.name)
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        if value == default:
            continue
        if f.name == "hints":
            out += [("hints", _HINT_FLAGS.get(k, "--" + k.replace("_", "-"))) for k in value]
        else:
            out.append((f.name, "--" + f.name.replace("_", "-")))
    return out


def accepted_options(name: str, fmt=(), *, written=None) -> frozenset:
    """The options a run of reader ``name`` reads: the reader's ``OPTIONS``,
    :data:`gruconv.writers.COMMON_OPTIONS` and what the writer reads for the target kind it writes
    (``writer.options(kind)``).  ``written``: the ``(writer, kind)`` pairs the run writes
    (:func:`gruconv.writers.planning.written_as`); else every kind a document of the reader's ``CONTENTS``
    may be written as by ``fmt``, a writer name or a collection of them (batch mode, ``verify``: every writer
    the run may use; ``()``: none, inspect)."""
    from .writers.planning import TARGET_KINDS

    reader = readers.module(name)
    if written is None:
        fmts = [fmt] if isinstance(fmt, str) else list(fmt)
        written = {(f, k) for f in fmts for c in reader.CONTENTS for k in TARGET_KINDS[c]
                   if k in writers.module(f).KINDS}
    out = set(writers.COMMON_OPTIONS) | set(reader.OPTIONS)
    for f, kind in written:
        out |= writers.module(f).options(kind)
    return frozenset(out)


def target_words(fmt: str, kind: str, output) -> str:
    """The target of a run in a refusal's words: the writer's name ending (``.keras``), or for a directory
    output (a SavedModel, one file per RNN or stack) what it is and its ``--format``."""
    from pathlib import Path

    writer = writers.module(fmt)
    if kind in writers.DIRECTORY_KINDS or not writer.SUFFIX:  # the one writer of directories: SavedModels
        return f"a SavedModel directory (--format {fmt}: {Path(output).name})"
    if kind == "graph-rnn" or (kind == "stack" and (Path(output).is_dir() or writers.claimed_by(output) != fmt)):
        return f"a directory of {writer.SUFFIX} files ({Path(output).name})"
    return writer.SUFFIX


def refuse_unread(options, accepted, what: str) -> None:
    """One :class:`UsageError` (exit 2) naming every given option outside ``accepted``: an option
    nothing reads is refused, never dropped silently."""
    unread = [flag for field, flag in given_options(options) if field not in accepted]
    if unread:
        it = "it" if len(unread) == 1 else "them"
        raise UsageError(f"{', '.join(unread)} {'does' if len(unread) == 1 else 'do'} not apply to {what}: "
                         f"refusing to ignore {it}")


# --------------------------------------------------------------------------- which reader

#: The reader of graphs holding cuDNN ops (:mod:`gruconv.readers.tfgraph`).
GRAPH_READER = "tf-graph"


def _graph_target(target, options) -> bool:
    """Whether ``target`` is written (or was written) by a writer of a TensorFlow graph in place: a
    SavedModel directory (``--format saved-model``; an existing one, for verify) or the whole graph as one
    file (a name such a writer claims: ``model.onnx``)."""
    from pathlib import Path

    from .model.saved_model import SAVED_MODEL_FILES

    if target is None:
        return False
    p = Path(target)
    fmt = writers.output_format(p, options) if options is not None else writers.claimed_by(p)
    if fmt is not None:
        kinds = writers.module(fmt).KINDS
        return "tf-graph" in kinds or ("tf-graph-file" in kinds and writers.claimed_by(p) == fmt)
    return p.is_dir() and any((p / n).is_file() for n in SAVED_MODEL_FILES)


def reader_for(input, target=None, options=None) -> str:
    """The reader of ``input`` for converting it to ``target`` (or verifying ``target`` against it): the one
    that claims it (:func:`gruconv.readers.detect`), except for a SavedModel another reader claims (a tf.keras
    one, for its Keras config) whose graph holds cuDNN ops and whose ``target`` is the graph rewritten in
    place (:func:`_graph_target`): that one the graph reader reads, so ``convert tf_keras_dir/ cpu_model/
    --format saved-model`` and ``convert tf_keras_dir/ model.onnx`` do what they do for any graph (a graph whose cuDNN nodes all have a CPU twin is
    written as it is)."""
    name = readers.detect(input)
    if name == GRAPH_READER or not _graph_target(target, options):
        return name
    graph = readers.module(GRAPH_READER)
    try:
        return GRAPH_READER if graph.read(input).content == "tf-graph" else name
    except Exception:  # noqa: BLE001 - not a graph this reader reads: the claiming reader says what it is
        return name
