"""The registry of output formats: the one place that decides an output's format and its name.

Readers (:mod:`gruconv.readers`) produce one document; writers consume it (pandoc's readers →
AST → writers split).  Every writer is one module offering :class:`Writer` (the contract, written
once, checked by ``tests/test_structure.py``): constants, ``options``, one ``write`` verb and ``load``;
the optional verbs a writer may add are declared in the Protocol (:func:`optional`, listed in
:data:`OPTIONAL`) and are found with :func:`hook`, never with ``hasattr``.  What is written where is
decided by :mod:`gruconv.writers.planning`.

Beside any of them, :mod:`gruconv.writers.rest_npz` writes the document's other tensors.

A new writer is one module and one line in :data:`WRITERS`.  This module imports only
:mod:`gruconv.errors` (``results`` takes the format names from here).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Optional, Protocol

from ..errors import UsageError

#: ``--format`` name -> module path.  Order is the order ``--help`` lists them.
WRITERS = {
    "keras": "gruconv.writers.keras_model",
    "h5-weights": "gruconv.writers.legacy_h5",
    "keras-weights": "gruconv.writers.keras_weights",
    "torch": "gruconv.writers.torch",
    "onnx": "gruconv.writers.onnx",
    "saved-model": "gruconv.writers.saved_model",
    "openvino": "gruconv.writers.openvino",
    "tflite": "gruconv.writers.tflite",
}



def optional(verb):
    """Marks a :class:`Writer` verb optional: a writer may lack it, and the rest of gruconv asks for it
    with :func:`hook` (never ``hasattr``)."""
    verb.optional = True
    return verb


#: The kinds of :class:`gruconv.writers.planning.Target` a writer's ``write`` takes (its ``KINDS``):
KINDS = {
    "stack": "one bare stack (``document.stacks[target.stack]``) as a file of its own",
    "graph": "a Keras graph (``document.graph``) as one file",
    "graph-rnn": "one RNN of a Keras graph (``document.stacks[target.stack]``) as a file of its own "
                 "(a directory output: one file per RNN, named by ``graph_targets``)",
    "document": "every stack and the document's other tensors in one file (no rest.npz beside it)",
    "tf-graph": "a TensorFlow graph (``document.tf_graph``) as a SavedModel directory",
    "tf-graph-file": "a TensorFlow graph (``document.tf_graph``) as one file (the whole graph as ONNX)",
}

#: Target kinds whose output is a directory written as one piece (:meth:`gruconv.files.outputs.Outputs.tree`).
DIRECTORY_KINDS = frozenset({"tf-graph"})

#: What a writer's file is (its ``WRITES``): a whole Keras model (a graph's layers are rebuilt: a
#: ``Lambda`` is refused), Keras weights, stacks in a non-Keras framework's own format, or a whole
#: TensorFlow graph.
WRITES = {"model": "Keras models", "weights": "Keras weights", "stacks": "RNN stacks in other frameworks' formats",
          "graph": "TensorFlow graphs holding cuDNN ops, as SavedModels"}


class Writer(Protocol):
    """What every writer module offers (modules satisfy it structurally: their module-level names).
    ``tests/test_structure.py`` checks every registered writer against it, signatures included; the
    verbs marked :func:`optional` may be missing."""

    #: its ``--format`` name (the key in :data:`WRITERS`)
    FORMAT: str
    #: the name ending it gives an output (batch naming, ``--out-dir``)
    SUFFIX: str
    #: the name endings that select it without ``--format`` (longest wins: ``x.weights.h5`` is Keras 3
    #: weights, ``x.h5`` legacy weights)
    CLAIMS: tuple
    #: the target kinds its ``write`` takes (keys of :data:`gruconv.writers.registry.KINDS`)
    KINDS: tuple
    #: what its file is (one of :data:`gruconv.writers.registry.WRITES`)
    WRITES: str
    #: True if a checkpoint's several stacks go into a directory of its files by default
    MANY: bool
    #: whether it needs the architecture at all (a weights-only Keras file then needs ``--config``)
    NEEDS_ARCHITECTURE: bool
    #: whether a model with no cuDNN layer is converted too (no ``--force``): its file is the user's goal, not a
    #: rescue from cuDNN (the edge files); what such a writer cannot write from a model that holds nothing to
    #: convert is refused in one line (exit 3), never "nothing to convert" with exit 0 and no file
    EVERY_MODEL: bool

    def options(self, kind: str) -> frozenset:
        """The :class:`gruconv.options.Options` fields its ``write`` reads for targets of ``kind`` (a key of
        :data:`KINDS`; a kind it does not take: the empty set).  A run accepts exactly the options the
        writer of the target kind it will write reads (:func:`gruconv.writers.planning.written_as`), plus the
        reader's ``OPTIONS`` and :data:`COMMON_OPTIONS`; :func:`gruconv.run_options.refuse_unread` refuses
        every other one given, naming the target.  A new writer declares one set per kind it takes, e.g.
        ``{"tflite-graph": frozenset({...})}.get(kind, frozenset())``; ``tests/test_structure.py`` proves
        each declared option is read (an ``Options`` that records its reads) and each other one refused."""

    def write(self, document, target, options) -> dict:
        """Write ``target`` (a :class:`gruconv.writers.planning.Target` of one of its ``KINDS``) of
        ``document`` (:class:`gruconv.model.canonical.Document`) to ``target.tmp``, the temporary path
        the output transaction renames to ``target.path``; one layer at a time (``document.drop()``
        between them); warnings go to ``target.warnings``.  Returns NaN/Inf counts per layer (``{}``
        where it counts none)."""

    def load(self, path, rebuild):
        """What it wrote, as a Keras 3 model for ``verify`` (``rebuild()`` gives the converted
        architecture, for weights-only formats)."""

    @optional
    def runners(self, path) -> dict:
        """``{rnn name: StackRunner}``: it writes no Keras model; verify runs each RNN through the
        target's own engine (:class:`gruconv.writers.runner.StackRunner`)."""

    @optional
    def node_runner(self, rnn, converted, params):
        """A :class:`gruconv.writers.runner.StackRunner` of one cuDNN node of a TensorFlow graph
        (:class:`gruconv.model.canonical.GraphRNN`) as it replaces the node: what ``converted`` (a directory it
        wrote; None: made as it writes it) calls for the node, run on the opaque buffer ``params``."""

    @optional
    def built(self, graph):
        """``(model, {layer: NaN/Inf count})``: the Keras 3 model it writes for a Keras graph, built in memory
        (``verify`` without a converted file checks the same model)."""

    @optional
    def model_runner(self, path):
        """The whole model of a file it wrote from a Keras graph, run by the target's own runtime(s): an object
        with ``runtimes()`` -> ``[(name, rt)]``, ``run(rt, feed, calls)`` -> ``[outputs per call]``,
        ``feed_size(batch, steps)`` -> the sizes the file takes, and ``int8``/``stateful`` (one protocol for
        every such writer: :class:`gruconv.writers.tflite.run.FileRunner`, the OpenVINO writer's
        :class:`gruconv.writers.openvino.IRRunner`); None for a file of bare stacks (``runners``)."""

    @optional
    def profiles(self, document) -> dict:
        """``{profile: "yes: ..." | "no: why"}``: which of its profiles this document can take (inspect)."""

    @optional
    def describe(self, shape) -> dict:
        """``{'target', 'note'}``: what a stack of that shape becomes (inspect, convert's report)."""

    @optional
    def gpu_status(self) -> tuple:
        """``(usable, reason, {'strict': .., 'default': ..})``: the GPU its runners use."""

    @optional
    def graph_targets(self, graph, directory) -> list:
        """The file each RNN of a graph gets in a directory (kind ``graph-rnn``)."""

    @optional
    def refuse(self, graph) -> None:
        """The one-line refusal of a graph it cannot express at all."""

    @optional
    def refuse_one_file(self, graph) -> None:
        """The refusal of a graph of several RNNs into one file."""

    @optional
    def companions(self, path) -> list:
        """The files it writes beside an output ``path`` (OpenVINO's ``.bin`` beside its ``.xml``): placed
        with it, all or nothing, by the output transaction; ``write`` gets their temporary paths in
        ``target.beside`` (final path -> temporary path)."""

    @optional
    def write_with_keras(self, document, target, options) -> dict:
        """``write`` through Keras (the Keras-built route, compared with the streamed one in tests)."""


#: The optional verbs, by name (read off :class:`Writer`).
OPTIONAL = {n: f.__doc__ for n, f in vars(Writer).items() if getattr(f, "optional", False)}


def hook(writer, verb: str):
    """``writer``'s optional ``verb`` (one declared :func:`optional` in :class:`Writer`), or None when
    it has none."""
    if verb not in OPTIONAL:
        raise KeyError(f"{verb!r} is not an optional writer verb (gruconv.writers.Writer)")
    return getattr(writer, verb, None)


def by_kind(kind: str) -> list:
    """The names of the writers whose ``write`` takes targets of ``kind`` (:data:`KINDS`), in
    registry order."""
    if kind not in KINDS:
        raise KeyError(f"{kind!r} is not a target kind (gruconv.writers.registry.KINDS)")
    return [name for name in WRITERS if kind in module(name).KINDS]


def offering(kind: str, verb: Optional[str] = None):
    """The first writer (registry order) whose ``write`` takes targets of ``kind`` and, given ``verb``, that
    offers that optional verb: how ``verify`` asks for what ``convert`` writes without naming a format."""
    for name in by_kind(kind):
        if verb is None or hook(module(name), verb) is not None:
            return module(name)
    raise KeyError(f"no writer of kind {kind!r} offers {verb!r}")


#: The writer of a document's other tensors, beside whichever writer wrote its stacks.
REST = "gruconv.writers.rest_npz"


def module(name: str):
    """The writer registered as ``name`` (a ``--format`` value)."""
    if name not in WRITERS:
        raise UsageError(f"--format must be one of {', '.join(WRITERS)}, got {name!r}")
    return importlib.import_module(WRITERS[name])


def claimed_by(output) -> Optional[str]:
    """The writer whose ``CLAIMS`` the name of ``output`` ends with (the longest one), or None."""
    lower = Path(output).name.lower()
    best, length = None, 0
    for name in WRITERS:
        for claim in module(name).CLAIMS:
            if lower.endswith(claim) and len(claim) > length:
                best, length = name, len(claim)
    return best


def output_format(output, options) -> Optional[str]:
    """``--format`` if given, else the writer claiming ``output``'s name, else None (the caller
    decides: a Keras HDF5 input refuses, a checkpoint writes a directory)."""
    if options.format is not None:
        module(options.format)  # a valid name, or the one usage line
        return options.format
    return claimed_by(output)


def output_name(stem: str, fmt: str, *, many: bool = False) -> str:
    """The name of the output for an input whose name without suffix is ``stem``: ``stem`` plus the
    writer's ``SUFFIX``, or ``stem`` itself (a directory) when ``many`` stacks go to a writer that
    writes one file per stack."""
    writer = module(fmt)
    return stem if many and writer.MANY else stem + writer.SUFFIX


def load(path, rebuild):
    """The converted model at ``path`` (for ``verify``), loaded by the writer its name claims; a name
    no writer claims is read as weights into ``rebuild()`` (legacy ``.h5`` layout)."""
    return module(claimed_by(path) or "h5-weights").load(Path(path), rebuild)


def stack_runners(path) -> Optional[dict]:
    """``{rnn name: runner}`` when the writer claiming ``path``'s name runs stacks itself
    (``runners``: torch, onnx), else None (a Keras model: :func:`load`)."""
    if Path(path).is_dir():  # a directory of one file per stack: every file a runner-writer claims
        found: dict = {}
        for p in sorted(Path(path).iterdir()):
            if p.is_file() and claimed_by(p) is not None and hook(module(claimed_by(p)), "runners"):
                found.update(module(claimed_by(p)).runners(p))
        return found or None
    name = claimed_by(path)
    writer = module(name) if name is not None else None
    if writer is None or hook(writer, "runners") is None:
        return None
    return writer.runners(Path(path))


def model_runner(path):
    """The whole-model runner of the file at ``path`` when the writer claiming its name runs whole models
    itself (``model_runner``: tflite, openvino), else None (a Keras model, or stacks: :func:`stack_runners`)."""
    path = Path(path)
    name = None if path.is_dir() else claimed_by(path)
    writer = module(name) if name is not None else None
    if writer is None or hook(writer, "model_runner") is None:
        return None
    return writer.model_runner(path)


def gpu_probe(path):
    """The GPU probe of the writer that wrote ``path`` (a file, or a directory of its files), when it
    runs its stacks itself: ``gpu_status() -> (usable, reason, {"strict": .., "default": ..})``;
    else None (``verify`` asks the Keras backend)."""
    path = Path(path)
    files = sorted(p for p in path.iterdir() if p.is_file()) if path.is_dir() else [path]
    for p in files:
        name = claimed_by(p)
        if name is not None and hook(module(name), "gpu_status"):
            return module(name).gpu_status
    return None


def beside(fmt: str, path) -> list:
    """The files writer ``fmt`` writes beside its output ``path`` (its optional ``companions``), else []."""
    companions = hook(module(fmt), "companions")
    return [Path(p) for p in companions(path)] if companions else []


def targets(shape) -> dict:
    """``{format: {"target", "note"}}``: what each writer with ``describe`` makes of a stack of
    ``shape`` (a :class:`gruconv.model.canonical.StackShape`), for ``inspect``."""
    return {name: module(name).describe(shape) for name in WRITERS if hook(module(name), "describe")}


def profiles(document) -> dict:
    """``{format: {profile: text}}`` from every writer with ``profiles`` (inspect: the edge profiles)."""
    out = {}
    for name in WRITERS:
        verb = hook(module(name), "profiles")
        found = verb(document) if verb is not None else None
        if found:
            out[name] = found
    return out


def suffixes() -> tuple:
    """Every name ending a writer claims (batch strips them from input names only if also inputs)."""
    return tuple(c for name in WRITERS for c in module(name).CLAIMS)


#: Options every run reads whatever its reader and writer: where and whether to write.
COMMON_OPTIONS = frozenset({"force", "format"})
