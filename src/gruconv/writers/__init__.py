"""The registry of output formats: the one place that decides an output's format and its name.

Readers (:mod:`gruconv.readers`) produce one document; writers consume it (pandoc's readers →
AST → writers split).  Every writer is one module offering :class:`Writer` (the contract, written
once, checked by ``tests/test_structure.py``); the optional verbs a writer may add are
:data:`OPTIONAL` and are found with :func:`hook`, never with ``hasattr``.

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
}



class Writer(Protocol):
    """What every writer module offers (modules satisfy it structurally: their module-level names)."""

    #: its ``--format`` name (the key in :data:`WRITERS`)
    FORMAT: str
    #: the name ending it gives an output (batch naming, ``--out-dir``)
    SUFFIX: str
    #: the name endings that select it without ``--format`` (longest wins: ``x.weights.h5`` is Keras 3
    #: weights, ``x.h5`` legacy weights)
    CLAIMS: tuple
    #: True if it can write one file per stack into a directory (a checkpoint with several stacks)
    MANY: bool
    #: whether it writes a whole model (a Keras graph's layers are rebuilt: a ``Lambda`` is refused)
    SAVES_MODEL: bool
    #: whether it needs the architecture at all (a weights-only Keras file then needs ``--config``)
    NEEDS_ARCHITECTURE: bool

    def options(self, graph: bool) -> frozenset:
        """The :class:`gruconv.options.Options` fields it reads for a document with (or without) a
        Keras graph; :func:`gruconv.readers.refuse_unread` refuses every other one given."""

    def write_stack(self, document, entry, target, options, name: str) -> None:
        """One bare RNN stack (a TF1 checkpoint's) written to ``target`` (a temporary path), one layer
        at a time, ``document.drop()`` between them (:class:`gruconv.model.canonical.Document`)."""

    def write_graph(self, document, target, options, warnings: list, *, final) -> dict:
        """A document with a Keras graph written to ``target``."""

    def load(self, path, rebuild):
        """What it wrote, as a Keras 3 model for ``verify`` (``rebuild()`` gives the converted
        architecture, for weights-only formats)."""


#: The optional verbs, by name, with what having one means.  A writer module defines any of them;
#: :func:`hook` is the only way the rest of gruconv asks for one.
OPTIONAL = {
    "runners": "runners(path) -> {rnn name: StackRunner}: it writes no Keras model; verify runs each "
               "RNN through the target's own engine (gruconv.verify.runners.StackRunner)",
    "describe": "describe(shape) -> {'target', 'note'}: what a stack of that shape becomes (inspect)",
    "gpu_status": "gpu_status() -> (usable, reason, {'strict': .., 'default': ..}): the GPU its runners use",
    "write_document": "write_document(document, [(entry, name)], target, options, warnings): it writes the "
                      "whole document (every stack and the other tensors) into one file (no rest.npz)",
    "write_graph_many": "write_graph_many(document, directory, options, warnings) -> [paths]: a Keras "
                        "graph's RNNs one file each into a directory",
    "graph_targets": "graph_targets(graph, directory) -> [paths]: the files write_graph_many writes",
    "refuse": "refuse(graph): the one-line refusal of a graph it cannot express",
    "refuse_one_file": "refuse_one_file(graph): the refusal of a graph of several RNNs into one file",
    "write_graph_with_keras": "write_graph_with_keras(...): write_graph built through Keras (fallback route)",
    "write_stack_with_keras": "write_stack_with_keras(...): write_stack built through Keras (fallback route)",
}


def hook(writer, verb: str):
    """``writer``'s optional ``verb`` (one of :data:`OPTIONAL`), or None when it has none."""
    if verb not in OPTIONAL:
        raise KeyError(f"{verb!r} is not an optional writer verb (gruconv.writers.OPTIONAL)")
    return getattr(writer, verb, None)


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


def targets(shape) -> dict:
    """``{format: {"target", "note"}}``: what each writer with ``describe`` makes of a stack of
    ``shape`` (a :class:`gruconv.model.canonical.StackShape`), for ``inspect``."""
    return {name: module(name).describe(shape) for name in WRITERS if hook(module(name), "describe")}


def suffixes() -> tuple:
    """Every name ending a writer claims (batch strips them from input names only if also inputs)."""
    return tuple(c for name in WRITERS for c in module(name).CLAIMS)


#: Options every run reads whatever its reader and writer: where and whether to write.
COMMON_OPTIONS = frozenset({"force", "format"})
