"""Planning a conversion: every decision about what gets written, made once, before any work.

``plan(document, output, options) -> Plan`` decides from the :class:`gruconv.model.canonical.Document`
alone (its stacks, its Keras graph, and the plan facts its reader put in it: ``inputs``, ``nothing``,
``refusal``, ``refused``, ``needs_config``, ``names``) and the output the user named:

* the writer (``--format``, else the writer the output's name claims; a checkpoint's directory of
  models, else ``keras``),
* file or directory (several stacks, or a graph's RNNs one file each),
* the targets (one per file written, with the stack each holds) and ``rest.npz`` beside them,
* the refusals: nothing writable, a format this input cannot go to, ``Lambda`` layers for a writer
  that builds the model, a weights-only graph for a writer that needs the architecture, several
  stacks to one file, a directory that is not empty, an output that is an input.

:mod:`gruconv.api` then opens one output transaction (:class:`gruconv.files.outputs.Outputs`) and hands
each target to its writer.  Batch mode names its outputs with :func:`batch_output_name` (through
:func:`gruconv.writers.output_name`, the same rule) and learns what is written beside an output from
:func:`extra_outputs`: decided here from the facts a reader states about its input
(:class:`gruconv.model.canonical.InputFacts`, :data:`NATURAL_FORMAT`), never by the reader.  Nothing
here writes or reads a file (``exists``/``is_dir`` checks on the output aside).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from ..errors import OutputError, UnsupportedError, UsageError
from . import registry as writers, rest_npz

#: Output name endings that cannot name a directory of per-stack models (a checkpoint's several
#: stacks with no writer given one file): the user meant a file.  Beside gruconv's own, the endings of
#: other frameworks' model files: a name no writer claims that ends so is a usage error (exit 2), never a
#: directory made under a file's name (``convert ckpt out.tflite`` once made a directory
#: ``out.tflite`` before ``.tflite`` was claimed).  Not ``.ckpt``: batch mode names a checkpoint's directory
#: output after its prefix (``model.ckpt``).
_NOT_A_DIRECTORY = (".h5", ".hdf5", ".npz", ".json", ".tflite", ".lite", ".xml", ".bin", ".pb", ".pbtxt", ".pt",
                    ".pth", ".onnx", ".safetensors", ".keras", ".mlmodel", ".mlpackage", ".engine", ".plan",
                    ".trt", ".pkl", ".npy", ".msgpack", ".gguf", ".ptl", ".torchscript", ".mnn", ".ncnn", ".param")


@dataclass
class Target:
    """One file a conversion writes: its ``kind`` (:data:`gruconv.writers.registry.KINDS`), its final
    ``path``; ``stack``: the index in ``document.stacks`` it holds (None: the whole graph or
    document); ``name``: the model/layer name that stack gets; ``force``: whether an existing file
    is replaced (files inside a directory output always are).  While it is written, ``tmp`` is the
    temporary path the output transaction handed out and ``warnings`` the conversion's list."""

    kind: str
    path: Path
    stack: Optional[int] = None
    name: Optional[str] = None
    force: bool = False
    tmp: Optional[Path] = None
    warnings: list = field(default_factory=list)
    #: while it is written: final path -> temporary path of each file its writer writes beside it
    #: (:func:`gruconv.writers.registry.beside`)
    beside: dict = field(default_factory=dict)


@dataclass
class Plan:
    """What a conversion writes, decided once (:func:`plan`).

    ``route``: ``"nothing"`` (nothing to convert), ``"graph"`` (a Keras graph into one file),
    ``"graph-many"`` (a graph's RNNs one file each into :attr:`directory`), ``"stacks"`` (one file per
    bare stack), ``"document"`` (every stack and the other tensors into one file), ``"tf-graph-stacks"``
    (a TensorFlow graph's cuDNN nodes as bare stacks: planned again once their params are evaluated)."""

    output: Path
    route: str
    format: Optional[str] = None
    directory: Optional[Path] = None
    targets: list = field(default_factory=list)
    rest: Optional[Path] = None
    reason: Optional[str] = None

    @property
    def writer(self):
        return writers.module(self.format)

    def files(self) -> list:
        """Every file the conversion will place (targets and the files beside them, then ``rest.npz``)."""
        return ([p for t in self.targets for p in [t.path] + writers.beside(self.format, t.path)]
                + ([self.rest] if self.rest is not None else []))


#: The target kinds (:data:`gruconv.writers.registry.KINDS`) a document of each content
#: (:data:`gruconv.model.canonical.CONTENTS`) may be written as, whatever the output: the options a run may
#: accept before its output is known (batch mode, ``verify``).  :func:`written_as` decides the one kind.
TARGET_KINDS = {
    "graph": ("graph", "graph-rnn"),
    "weights": ("graph", "graph-rnn"),
    "final": ("graph", "graph-rnn"),
    "stacks": ("stack", "document"),
    # the whole graph, or its cuDNN nodes' stacks alone (route tf-graph-stacks: planned as stacks)
    "tf-graph": ("tf-graph", "tf-graph-file", "stack", "document"),
    "refused": (),
}


def written_as(content: str, output, options) -> tuple:
    """``(writer, target kind)`` a document of ``content`` converted to ``output`` is written with, decided
    before the input is read and by the rules :func:`plan` follows (the same helpers), or ``(None, None)``
    when the output names no writer (the conversion reports that) or nothing is written (``refused``).
    For refusing, before reading, the options the writer of that kind does not read
    (:func:`gruconv.api.refuse_unread`)."""
    output = Path(output)
    if content in ("graph", "weights", "final"):
        fmt = writers.output_format(output, options)
        return (fmt, _graph_kind(writers.module(fmt), output)) if fmt is not None else (None, None)
    if content == "stacks":
        fmt = _stack_format(output, options)
        if fmt is None:
            return _directory_format(options), "stack"
        return fmt, "document" if "document" in writers.module(fmt).KINDS else "stack"
    if content == "tf-graph":
        fmt = writers.output_format(output, options) or "saved-model"
        kind = _tf_graph_kind(writers.module(fmt), fmt, output)
        return (fmt, kind) if kind != "stacks" else written_as("stacks", output, options)
    return None, None


def _graph_kind(writer, output: Path) -> str:
    """A Keras graph's target kind for ``writer``: its RNNs one file each (``graph-rnn``) into a directory or a
    name the writer does not claim, else the whole graph in one file."""
    if "graph-rnn" in writer.KINDS and (output.is_dir() or writers.claimed_by(output) is None):
        return "graph-rnn"
    return "graph"


def _tf_graph_kind(writer, fmt: str, output: Path) -> Optional[str]:
    """A TensorFlow graph's target kind for ``writer``: ``tf-graph`` (a SavedModel directory), ``tf-graph-file``
    (the whole graph in one file whose name the writer claims), ``"stacks"`` (the cuDNN nodes' stacks alone,
    planned as bare stacks) or None (the writer takes none of them)."""
    if "tf-graph" in writer.KINDS:
        return "tf-graph"
    if "tf-graph-file" in writer.KINDS and writers.claimed_by(output) == fmt:
        return "tf-graph-file"
    return "stacks" if "stack" in writer.KINDS else None


#: The writer an input goes to when the user names none (batch mode), by what its document holds
#: (:data:`gruconv.model.canonical.CONTENTS`): a model to a ``.keras`` model, weights without an
#: architecture to legacy ``.h5`` weights, bare stacks to ``.keras`` models (one per stack), a Keras 3
#: file to the name a conversion would have (none is written).
NATURAL_FORMAT = {
    "graph": "keras",
    "weights": "h5-weights",
    "stacks": "keras",
    "final": "keras",
    "tf-graph": "saved-model",
    "refused": "keras",  # never written: plan raises the document's refusal first
}

#: Files a conversion may write beside a one-file output, by content: bare stacks leave the input's
#: other tensors in ``OUT.rest.npz`` (:func:`gruconv.writers.rest_npz.beside`); a Keras graph keeps
#: its other weights inside the output.  Batch checks them against every input and output.
BESIDE = {"stacks": (rest_npz.beside,)}


def natural_format(facts) -> str:
    """The writer of an input with these :class:`~gruconv.model.canonical.InputFacts` when no
    ``--format`` is given."""
    return NATURAL_FORMAT[facts.content]


def batch_output_name(reader, path, options, stem: str) -> str:
    """Batch mode: the output name of input ``path`` (read by reader module ``reader``) whose mirrored
    name without suffix is ``stem``: ``--format``'s, else the natural writer's suffix
    (:data:`NATURAL_FORMAT`), or ``stem`` itself as a directory when several bare stacks go to a writer
    writing one file per stack (a graph's cuDNN nodes too, unless the writer writes the whole graph).  The reader is asked its facts only when they can change the name."""
    fmt = options.format
    if fmt is not None and not writers.module(fmt).MANY:
        return writers.output_name(stem, fmt, many=False)
    facts = reader.input_facts(path, options)
    fmt = fmt or natural_format(facts)
    whole = facts.content == "tf-graph" and {"tf-graph", "tf-graph-file"} & set(writers.module(fmt).KINDS)
    return writers.output_name(stem, fmt, many=facts.stacks > 1 and not whole)


def extra_outputs(reader, output) -> list:
    """Files a conversion of an input read by ``reader`` may write beside the one-file ``output``
    (:data:`BESIDE`, for every content the reader's documents may hold: its ``CONTENTS``; asked before the
    input is read)."""
    return list(dict.fromkeys(where(Path(output)) for content in reader.CONTENTS for where in BESIDE.get(content, ())))


def plan(document, output, options) -> Plan:
    """Decide what converting ``document`` to ``output`` writes, or raise the one-line refusal."""
    output = Path(output)
    if document.refusal is not None:
        raise document.refusal
    if document.nothing:
        fmt = writers.output_format(output, options)
        every = fmt is not None and writers.module(fmt).EVERY_MODEL
        if not (document.nothing_forced and (options.force or every)):
            if every:  # the file was asked for: never exit 0 without it
                raise UnsupportedError(f"{document.reason or 'nothing to convert'}; gruconv writes {output.name} "
                                       "only from a model it reads as a Keras 2 / tf.keras model or a cuDNN stack",
                                       path=document.source)
            return Plan(output=output, route="nothing", reason=document.reason)
    if document.tf_graph is not None:
        return _plan_tf_graph(document, output, options)
    if document.graph is not None or document.nothing_forced:
        planned = _plan_graph(document, output, options)
    else:
        planned = _plan_stacks(document, output, options)
    _check_kinds(planned, document)
    _check_beside(planned, document)
    return planned


def _check_beside(planned: Plan, document) -> None:
    """The files a writer writes beside its outputs (OpenVINO's ``.bin``) are outputs too: never an input, and
    an existing one is replaced only as ``--force`` replaces the output itself."""
    from ..files.outputs import check_outputs as never_an_input, check_target

    for t in planned.targets:
        extra = writers.beside(planned.format, t.path)
        never_an_input(extra, document.inputs)
        for p in extra if planned.directory is None else ():  # (a directory output's files are replaced)
            check_target(p, force=t.force)


def _check_kinds(planned: Plan, document) -> None:
    """Every target is of a kind its writer writes (``--format saved-model`` takes only a TensorFlow graph)."""
    writer = planned.writer
    if any(t.kind not in writer.KINDS for t in planned.targets):
        raise UsageError(f"--format {planned.format} writes only {writers.WRITES[writer.WRITES]}, and this input "
                         f"({document.reader}) is not one: name another output format",
                         path=Path(document.source))


# --------------------------------------------------------------------------- a Keras graph

def _plan_graph(document, output: Path, options) -> Plan:
    from ..files.outputs import check_outputs as never_an_input, check_target

    graph = document.graph
    never_an_input([output], document.inputs)  # first: whatever else is wrong, say this
    fmt = writers.output_format(output, options)
    if fmt is None:
        raise UsageError(f"cannot tell the output format from {output.name!r}: use a .keras or .h5 name, or --format",
                         path=output)
    if fmt in document.refused:
        raise document.refused[fmt]
    writer = writers.module(fmt)
    if writer.NEEDS_ARCHITECTURE and graph.model_config is None and document.stacks and document.needs_config:
        raise UsageError(document.needs_config.format(suffix=writer.SUFFIX), path=Path(document.source))
    if _graph_kind(writer, output) == "graph-rnn":
        writer.refuse(graph)
        _check_directory(output, options)
        targets = [Target("graph-rnn", path=p, stack=i, force=True)
                   for i, p in enumerate(writer.graph_targets(graph, output))]
        never_an_input([t.path for t in targets], document.inputs)
        return Plan(output=output, route="graph-many", format=fmt, directory=output, targets=targets)
    if graph.lambdas and (writer.WRITES == "model" or writer.NEEDS_ARCHITECTURE):
        # Building a Keras model calls every layer on symbolic inputs: a Lambda's code would run, a
        # TFSMLayer would load its SavedModel.  Unlike a custom layer class (carried over: the user supplies
        # the class), the code is named by the file itself (marshalled bytecode, a path), and nothing the
        # user could pass would stand for it; nested in a carried-over config it is refused the same way
        # (graph.lambdas: model/keras_config.code_in searches the whole config).
        from ..model.keras_config import code_phrase

        raise UnsupportedError(
            f"model has {code_phrase(graph.lambdas)}; gruconv never runs it, and a .keras model cannot be built "
            "without running it (the code, or where it is, is stored in the model file, unlike a custom layer's "
            "class, so --custom-objects cannot stand in for it); write the converted weights alone, no code: "
            "gruconv convert IN.h5 OUT.h5 (--format h5-weights)", path=graph.path)
    if writer.NEEDS_ARCHITECTURE and graph.model_config is None and document.stacks:
        what = "a .keras model" if writer.FORMAT in ("keras", "keras-weights") else f"a {writer.SUFFIX} file"
        raise UsageError(f"a weights-only file needs --config ARCH.json (the model's to_json()) to become "
                         f"{what}; or write a .h5 weights file", path=graph.path)
    one_file = writers.hook(writer, "refuse_one_file")
    if one_file is not None:
        one_file(graph)
    check_target(output, force=options.force)
    never_an_input([output], document.inputs)
    return Plan(output=output, route="graph", format=fmt, targets=[Target("graph", path=output, force=options.force)])


# --------------------------------------------------------------------------- a TensorFlow graph

def _plan_tf_graph(document, output: Path, options) -> Plan:
    """A graph holding cuDNN ops: to a writer of ``tf-graph`` targets (``--format``, else ``saved-model``
    for an output whose name no writer claims), a directory written as one piece, or of ``tf-graph-file``
    targets (``model.onnx``, a name the writer claims: the whole graph in one file); to any other writer of bare
    stacks (``.keras``, ``.safetensors``, ``--format keras|onnx DIR``: a directory of them): the cuDNN nodes'
    stacks alone, route
    ``tf-graph-stacks`` (the driver evaluates their params and plans the stacks: ``api.convert``)."""
    from ..files.outputs import check_outputs as never_an_input, check_target, check_tree_target

    never_an_input([output], document.inputs)
    fmt = writers.output_format(output, options) or "saved-model"
    writer = writers.module(fmt)
    kind = _tf_graph_kind(writer, fmt, output)
    if kind == "tf-graph":
        check_tree_target(output, force=options.force)
    elif kind == "tf-graph-file":
        check_target(output, force=options.force)
    elif kind == "stacks" and not document.names:  # a graph that already serves on a CPU: no stack to write
        raise UnsupportedError(f"{document.reason}: it has no cuDNN node stack to write as {writer.SUFFIX or fmt}; "
                               "convert it to a SavedModel directory or to OUTPUT.onnx (the graph as it is)",
                               path=Path(document.source))
    elif kind == "stacks":
        # before any params are evaluated; one stack per node name (functions may hold copies of one node)
        _one_file_of_many(document, output, _stack_format(output, options), list(dict.fromkeys(document.names)))
        return Plan(output=output, route="tf-graph-stacks", format=fmt)
    else:
        dirs, files = ", ".join(writers.by_kind("tf-graph")), ", ".join(writers.by_kind("tf-graph-file"))
        raise UsageError(f"a TensorFlow graph holding cuDNN ops converts to a SavedModel directory (--format {dirs}: "
                         f"name OUTPUT without a model suffix), to one file of the whole graph (--format {files}: "
                         f"OUTPUT.onnx) or to its cuDNN nodes' stacks alone (OUTPUT.keras, OUTPUT.safetensors, a "
                         f"directory), not to {fmt}", path=output)
    return Plan(output=output, route="graph", format=fmt, targets=[Target(kind, path=output, force=options.force)])


# --------------------------------------------------------------------------- bare stacks

def _stack_format(output: Path, options) -> Optional[str]:
    """The writer's name, or None: a directory of per-stack files.  ``--format`` decides, else the
    output's name (:func:`gruconv.writers.claimed_by`; a directory is never claimed); a writer that
    writes one model per stack (``keras``) gets a file only when the name is claimed by it."""
    claimed = None if output.is_dir() else writers.claimed_by(output)
    fmt = options.format if options.format is not None or output.is_dir() else claimed
    if fmt is not None and not writers.module(fmt).MANY:
        return fmt
    return fmt if fmt is not None and claimed == fmt else None


def _directory_format(options) -> str:
    """The writer of a directory output: ``--format`` when it writes one file per stack (``keras``,
    ``onnx``), else ``keras``."""
    return options.format if options.format is not None and writers.module(options.format).MANY else "keras"


def stack_targets(names: list, cells: list, directory: Path, fmt: str) -> list:
    """The file each stack gets in a directory output: its name made a file name
    (:func:`file_stem`, unique up to case) plus the writer's suffix; the one rule, for ``convert``
    and for ``verify`` finding what ``convert`` wrote.  ``names``: each stack's scope (or None),
    ``cells``: each stack's cell."""
    seen, targets = set(), []
    for name, cell in zip(names, cells):
        default = f"{cell}_stack"
        stem, n = file_stem(name, default), 1
        while stem.lower() in seen:
            n += 1
            stem = f"{file_stem(name, default)}_{n}"
        seen.add(stem.lower())
        targets.append(Path(directory) / writers.output_name(stem, fmt))
    return targets


def file_stem(scope: str, default: str = "gru_stack") -> str:
    """A scope as a file name (:func:`gruconv.model.names.file_chars`), never a hidden one."""
    from ..model.names import file_chars

    stem = file_chars(scope).lstrip(".")
    return stem or default


def _one_file_of_many(document, output: Path, fmt: Optional[str], names: Optional[list] = None) -> None:
    """Several stacks (``names``, default ``document.names``) into one file of a writer that holds one: the
    usage line."""
    names = document.names if names is None else names
    n = len(names)
    if fmt is not None and n > 1 and "document" not in writers.module(fmt).KINDS:
        scopes = ", ".join(repr(s) for s in names)
        raise UsageError(f"the {document.holder} holds {n} {document.stack_word} stacks ({scopes}): "
                         + document.choose_one.format(output=output.name), path=Path(document.source))


def _plan_stacks(document, output: Path, options) -> Plan:
    from ..files.outputs import check_outputs as never_an_input, check_target

    force = options.force
    never_an_input([output], document.inputs)  # first: whatever else is wrong, say this
    fmt = _stack_format(output, options)
    as_dir = fmt is None
    if fmt is not None and output.is_dir():
        raise OutputError(f"--format {fmt} writes one file: OUTPUT is a directory", path=output)
    whole = not as_dir and "document" in writers.module(fmt).KINDS
    _one_file_of_many(document, output, fmt)
    if as_dir and not output.is_dir() and output.suffix.lower() in _NOT_A_DIRECTORY:  # (.h5 here: --format keras)
        raise UsageError(f"a TF1 checkpoint converts to Keras 3 .keras models (or weights: *.h5 legacy layout, "
                         f"*.weights.h5 Keras 3): name OUTPUT *.keras, *.h5, or a directory (or a name another "
                         f"writer claims: {', '.join(writers.suffixes())}; got {output.name!r}, a name gruconv "
                         f"writes no file under)",
                         path=Path(document.source))
    names = [s or f"{c}_stack" for s, c in zip(document.names, document.cells)]
    if as_dir:
        _check_directory(output, options)
        fmt = _directory_format(options)
        paths = stack_targets(document.names, document.cells, output, fmt)
        targets = [Target("stack", path=p, stack=i, name=names[i], force=True) for i, p in enumerate(paths)]
        rest = output / rest_npz.NAME if document.other_tensors else None
        result = Plan(output=output, route="stacks", format=fmt, directory=output, targets=targets, rest=rest)
    elif whole:  # every stack and the other tensors in one file
        check_target(output, force=force)
        result = Plan(output=output, route="document", format=fmt, targets=[Target("document", path=output, force=force)])
    else:
        check_target(output, force=force)
        rest = rest_npz.beside(output) if document.other_tensors else None
        if rest is not None:
            check_target(rest, force=force)
        result = Plan(output=output, route="stacks", format=fmt, rest=rest,
                      targets=[Target("stack", path=output, stack=0, name=names[0], force=force)])
    never_an_input(result.files(), document.inputs)
    return result


def _check_directory(output: Path, options) -> None:
    """A directory output: it is one (or can be made), and empty unless ``--force``."""
    if output.exists() and not output.is_dir():
        raise OutputError("output exists and is not a directory", path=output)
    parent = output.parent if str(output.parent) else Path(".")
    if not output.exists() and not parent.is_dir():
        raise OutputError(f"output directory {str(parent)!r} does not exist", path=output)
    if output.is_dir() and any(output.iterdir()) and not options.force:
        raise OutputError("output directory is not empty; pass --force to write into it", path=output)
