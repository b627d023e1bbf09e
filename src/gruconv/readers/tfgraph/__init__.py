"""TensorFlow graphs that hold cuDNN ops: ``tf-graph``.

What it reads: a SavedModel directory (``saved_model.pb`` or ``saved_model.pbtxt``) whose graph or any
function of its library holds a ``CudnnRNN*`` node, and a frozen ``GraphDef`` file (``*.pb`` binary,
``*.pbtxt`` text) that does.  A Keras 3 ``model.export(dir)`` or ``tf.saved_model.save`` made on a GPU
machine is one (Keras 3's TensorFlow backend traces ``CudnnRNNV3`` whenever a GPU is there at trace time;
``docs/architecture.md``), and so is a TF1 graph frozen with ``convert_variables_to_constants`` around a
``CudnnRNN`` op.  Such a graph cannot run on a CPU (TensorFlow has no CPU kernel for any cuDNN op).  This
reader states what it found, each cuDNN node's settings and sizes read once, in a
:class:`gruconv.model.canonical.TfGraph` (content ``tf-graph``): the ``saved-model`` writer replaces each node by
standard ops, the ``onnx`` writer writes the whole graph, and the writers of stacks take each node's stack
alone, its params as the graph computes them (``Document.as_stacks``, :mod:`gruconv.readers.tfgraph.stacks`:
the graph run once, bounded, by the TensorFlow side).  A node no writer can replace (a
projection, a gradient op, Python ops in the graph) is refused in one line (exit 3; content ``refused``).
``gruconv inspect`` lists every cuDNN node (:mod:`gruconv.readers.tfgraph.cudnn`).

A graph whose every cuDNN node sits in a tf.keras GPU-only variant with a standard twin (tf.keras 2.x's
implementation selector) already serves on a CPU: it is a ``tf-graph`` with no node to replace, written as it is
to a SavedModel directory or an ONNX file (``TfGraph.twinned``: the variants kept), and refused in one line
for an output of stacks alone (it has none).

Left to the other readers: a SavedModel with ``keras_metadata.pb`` beside its variables, or TF 2.0-2.4's
copy of it in the object graph (tf.keras 2.x ``model.save(dir)``: the architecture is in it, and :mod:`gruconv.readers.tf2` converts it from there
whatever its graph holds), a SavedModel of TF1 name-based variables (no object graph: the
``tf1-checkpoint`` reader converts the cuDNN buffers stored in them), and any graph without cuDNN nodes.
A tf.keras SavedModel whose variables are missing is this reader's too, to be refused in one line.

Graph files are read through :mod:`gruconv.files.inputs` (regular files only, ``LIMITS["graph"]``) and
walked by :mod:`gruconv.readers.protos` (no TensorFlow, bounded).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from ...errors import InputError, UnsupportedError
from ...model.canonical import Document, InputFacts
from ...options import Options
from ...model.cudnn_ops import CUDNN_OPS as CUDNN_OPS_WORDS, PACKING_OPS
from ...model.saved_model import ASSETS, GRAPH_FILES, KERAS_METADATA, VARIABLES

FORMAT = "tf-graph"
#: What this reader reads, for messages.
DESCRIPTION = "a TensorFlow graph holding cuDNN ops"
#: The bounds of every run of the graph (``--graph-timeout``, ``--graph-memory``: :class:`gruconv.options.Budget`),
#: whichever output it goes to: the reader puts them in the document's ``TfGraph``.
OPTIONS = frozenset({"graph_timeout", "graph_memory"})
#: What its documents hold (:data:`gruconv.model.canonical.CONTENTS`): a TensorFlow graph, whole (its cuDNN
#: nodes replaced; one that already serves on a CPU: as it is), or a refusal.
CONTENTS = ("tf-graph", "refused")
#: The name endings of a frozen graph, stripped by batch mode.
SUFFIXES = (".pbtxt", ".pb")

#: A SavedModel's graph file, binary first (:mod:`gruconv.model.saved_model`).
SAVED_MODEL_FILES = GRAPH_FILES


# --------------------------------------------------------------------------- where the graph is

@dataclass(frozen=True)
class GraphFile:
    """The file holding the graph: its path, its message type (``SavedModel``/``GraphDef``), text or binary."""

    path: Path
    type: str
    text: bool


def graph_file(path) -> Optional[GraphFile]:
    """The graph file of ``path`` (a SavedModel directory, ``saved_model.pb[txt]`` itself, a ``.pb`` /
    ``.pbtxt`` GraphDef), or None; never raises."""
    from ...files.inputs import is_regular

    p = Path(os.fspath(path))
    try:
        if p.is_dir():
            for name, text in SAVED_MODEL_FILES:
                if is_regular(p / name):
                    return GraphFile(p / name, "SavedModel", text)
            return None
    except (OSError, ValueError):
        return None
    if not is_regular(p):
        return None
    for name, text in SAVED_MODEL_FILES:
        if p.name == name:
            return GraphFile(p, "SavedModel", text)
    if p.name.endswith(".pbtxt"):
        return GraphFile(p, "GraphDef", True)
    if p.name.endswith(".pb"):
        return GraphFile(p, "GraphDef", False)
    return None


# --------------------------------------------------------------------------- scanning

#: Ops no conversion runs: Python code stored in the graph (``tensorflow/python/ops/script_ops.py``
#: ``py_func``/``numpy_function``/``eager_py_func``), refused wherever they are.
PYTHON_OPS = frozenset({"PyFunc", "PyFuncStateless", "EagerPyFunc"})
#: Bytes every one of them contains: the cheap look before a walk for them.
PYTHON_MARKER = b"PyFunc"


@dataclass
class Scan:
    """What a graph file holds: its cuDNN nodes (:class:`~gruconv.readers.tfgraph.cudnn.CudnnNode`) and
    the ops of :data:`PYTHON_OPS` in it (``where: op``)."""

    file: GraphFile
    nodes: list
    graphs: int = 1
    python_ops: list = field(default_factory=list)


def _python_ops(graphs: list) -> list:
    """``name (op)`` of every :data:`PYTHON_OPS` node of the graphs and their function libraries."""
    found = []

    def look(nodes):
        for n in nodes:
            if n.may_hold(PYTHON_MARKER) and (op := n.get("op", "")) in PYTHON_OPS:
                found.append(f"{n.get('name', '')} ({op})")

    for g in graphs:
        look(g.each("node"))
        for lib in g.each("library"):
            for f in lib.each("function"):
                if f.may_hold(PYTHON_MARKER):
                    look(f.each("node_def"))
    return found


def scan(gf: GraphFile) -> Scan:
    """Every cuDNN node of the graph file; a damaged file is an :class:`InputError` (one line)."""
    from ...files.inputs import read_bytes
    from ..tfbundle import Malformed
    from .. import protos
    from . import calls, cudnn

    what = "SavedModel graph" if gf.type == "SavedModel" else "TensorFlow GraphDef"
    data = read_bytes(gf.path, "a " + what, kind="graph-text" if gf.text else "graph")
    try:
        top = protos.parse(data, gf.type, f"{gf.type} {gf.path.name}", text=gf.text, path=gf.path,
                           keep=cudnn.keep_text)
        graphs = ([g for m in top.each("meta_graphs") for g in m.each("graph_def")] if gf.type == "SavedModel"
                  else [top])
        nodes = [dataclasses.replace(n, graph=i) for i, g in enumerate(graphs) for n in cudnn.graph_nodes(g)]
        python = _python_ops(graphs) if bytes(data).find(PYTHON_MARKER) >= 0 else []
        loop = next((c for g in graphs if (c := calls.cycle(calls.call_graph(g)))), None) if nodes else None
    except Malformed as e:
        raise protos.malformed(e, what, gf.path) from None
    except RecursionError:  # the walk does not recurse; kept as a guard
        raise InputError(f"is not a readable {what} (nested too deeply)", path=gf.path) from None
    if loop is not None:
        shown = " -> ".join(loop[:6]) + (" -> ..." if len(loop) > 6 else "")
        raise InputError(f"is a {what} whose function library calls itself ({shown}); TensorFlow has no recursive "
                         "functions (and crashed on one here): refused", path=gf.path)
    return Scan(gf, nodes, len(graphs), python)


def scanned(gf: GraphFile) -> Scan:
    """:func:`scan` of ``gf``, once while the file stays the same (:func:`gruconv.files.inputs.once`): the sniff's
    scan is the reader's, so a conversion walks the graph once."""
    from ...files.inputs import once

    return once(gf.path, "tfgraph.scan", lambda: scan(gf))


def _claims(p: Path, gf: GraphFile) -> bool:
    """The sniff's decision (see the module docstring for what is left to the other readers)."""
    from ...errors import GruconvError
    from ...files.inputs import contains
    from ..saved_models import keras_claims
    from . import cudnn

    # a SavedModel's graph file named by itself is judged as its directory
    directory = p if p.is_dir() else p.parent if gf.type == "SavedModel" else None
    if directory is not None:
        claim = keras_claims(directory)  # a tf.keras SavedModel: with its variables it is the tf2 reader's
        if claim is not None:
            return claim == FORMAT
    try:
        if not contains(gf.path, cudnn.MARKER, "a TensorFlow graph"):
            return False
    except GruconvError:
        return True  # a graph file too large (or unreadable) to look into: read() says why, in one line
    try:
        return bool(scanned(gf).nodes)
    except GruconvError:
        return True  # a damaged graph that names cuDNN ops: read() says what is wrong with it


def sniff(path) -> bool:
    """True for a SavedModel or frozen graph holding cuDNN nodes (or naming them and damaged), and for
    a tf.keras SavedModel missing its variables; no exceptions."""
    try:
        p = Path(os.fspath(path))
        gf = graph_file(p)
        return gf is not None and _claims(p, gf)
    except Exception:  # noqa: BLE001 - a sniff never raises: the next reader describes what it cannot read
        return False


def input_files(path) -> list:
    """Every file a conversion of ``path`` reads: the graph file (and ``keras_metadata.pb``, and a
    SavedModel's variables and assets, which its conversion carries)."""
    p = Path(path)
    gf = graph_file(p)
    files = [] if gf is None else [gf.path]
    if gf is not None and gf.type == "SavedModel":
        files += [src for _, src in _carried_files(gf.path.parent)]
    if p.is_dir() and (p / KERAS_METADATA).is_file():
        files.append(p / KERAS_METADATA)
    return files


def input_prefix(path):
    """Batch mode's "what is one input here": the SavedModel directory (or the frozen graph file)."""
    p = Path(path)
    if p.is_file() and p.name in dict(SAVED_MODEL_FILES):
        return p.parent
    return p


# --------------------------------------------------------------------------- the document

def _carried_files(directory: Path) -> list:
    """``(relative path, path)`` of every regular file under a SavedModel's ``variables/`` and ``assets/``
    (and ``assets.extra/``): what a converted SavedModel carries byte for byte."""
    from ...files.inputs import is_regular

    out = []
    for sub in (VARIABLES,) + ASSETS:
        root = directory / sub
        if not root.is_dir() or root.is_symlink():
            continue
        for dirpath, dirnames, files in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if not (Path(dirpath) / d).is_symlink())
            for f in sorted(files):
                p = Path(dirpath) / f
                if is_regular(p):
                    out.append((str(p.relative_to(directory)), p))
    return out


@dataclass
class GraphDoc:
    """A graph and its cuDNN nodes; ``missing``: a tf.keras SavedModel's absent variables, in words;
    ``python_ops``: the Python-code ops it holds (refused)."""

    path: Path
    file: Optional[GraphFile]
    nodes: list = field(default_factory=list)
    missing: Optional[str] = None
    python_ops: list = field(default_factory=list)
    budget: object = None

    @property
    def rnns(self) -> list:
        return []  # no stack is read out of a graph: its cuDNN nodes are replaced where they are

    @property
    def serves_on_cpu(self) -> bool:
        from .cudnn import serves_on_cpu

        return self.missing is None and serves_on_cpu(self.nodes)

    def _gpu_only(self) -> list:
        """The nodes that run on a GPU only (no CPU twin)."""
        return [n for n in self.nodes if not n.cpu_twin]

    def _rnn_nodes(self) -> list:
        return [n for n in self._gpu_only() if n.runs_the_rnn]

    def problems(self) -> list:
        """Why the graph cannot be converted, one clause each (empty: it can)."""
        out = []
        if self.python_ops:
            out.append(f"it holds Python code ops ({', '.join(self.python_ops[:3])}), which gruconv never runs")
        for n in self._gpu_only():
            if n.op in PACKING_OPS:
                if n.packs is None or len(n.inputs) != 3 + sum(n.packs):
                    out.append(f"{n.op} '{n.name}': its weight and bias counts do not match its inputs")
            elif not n.runs_the_rnn:
                out.append(f"{n.op} '{n.name}' ({CUDNN_OPS_WORDS.get(n.op, n.op)}) has no CPU replacement here")
            elif n.problem:
                out.append(f"{n.op} '{n.name}': {n.problem}")
        return out

    @property
    def content(self) -> str:
        """What the document holds (:data:`gruconv.model.canonical.CONTENTS`): a graph that already serves on a CPU
        is a ``tf-graph`` too: written as it is to a SavedModel or ONNX output, as asked (said "nothing to convert" with
        nothing written, a conversion would exit 0 without the file the user named)."""
        if self.missing is not None or self.problems():
            return "refused"
        return "tf-graph"

    def found(self) -> str:
        """The nodes in a few words: ``4 cuDNN op(s) (CudnnRNNV3 x4) in function __inference___call___1534``."""
        ops: dict = {}
        places: list = []
        for n in self.nodes:
            ops[n.op] = ops.get(n.op, 0) + 1
            if n.where not in places:
                places.append(n.where)
        where = ", ".join(places[:2]) + (f" and {len(places) - 2} more" if len(places) > 2 else "")
        kinds = ", ".join(f"{op} x{k}" if k > 1 else op for op, k in ops.items())
        return f"{len(self.nodes)} cuDNN op(s) ({kinds}) in {where}"

    def what(self) -> str:
        return "SavedModel" if self.file is not None and self.file.type == "SavedModel" else "frozen graph"

    def _row(self, i: int, nonfinite: int = 0) -> dict:
        n = self._rnn_nodes()[i]
        from ...model.cudnn_layout import params_size

        return {"name": n.name, "cell": n.shape.cell, "kind": n.op, "shape": n.shape.to_dict(),
                "params": params_size(n.shape), "nonfinite_weights": None, "details": [],
                "where": n.where, "params_from": n.params_from,
                "converts_to": f"standard TensorFlow ops ({n.shape.describe()})"}

    def document(self) -> Document:
        from ...model.canonical import GraphRNN, TfGraph

        d = Document(source=str(self.path), reader=FORMAT, inputs=input_files(self.path))
        problems = self.problems()
        if self.missing is not None:
            d.refusal = InputError(self.missing, path=self.path)
        elif problems:
            d.refusal = UnsupportedError(
                f"{self.what()} holds {self.found()} and cannot be converted: {'; '.join(problems[:3])}"
                + (f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""), path=self.path)
        else:
            gf = self.file
            rnns = [GraphRNN(n.op, n.name, n.function, n.shape, True if n.time_major is None else n.time_major,
                             n.graph) for n in self._rnn_nodes()]
            rnns += [GraphRNN(n.op, n.name, n.function, None, True, n.graph, packs=n.packs, dtype=n.dtype)
                     for n in self._gpu_only() if n.op in PACKING_OPS]
            import functools

            from ...files.inputs import read_bytes
            from . import stacks

            what = "SavedModel graph" if gf.type == "SavedModel" else "TensorFlow GraphDef"
            d.tf_graph = TfGraph(gf.type, gf.path, gf.text, rnns,
                                 data=functools.partial(read_bytes, gf.path, "a " + what,
                                                        kind="graph-text" if gf.text else "graph"),
                                 files=_carried_files(gf.path.parent) if gf.type == "SavedModel" else [],
                                 budget=self.budget,
                                 twinned=tuple(dict.fromkeys(n.function for n in self.nodes if n.cpu_twin)),
                                 evaluate=functools.partial(stacks.evaluate, source=self.path))
            d.as_stacks = functools.partial(stacks.stacks_of, d)
            d.names = [n.name for n in self._rnn_nodes()]
            if self.serves_on_cpu:  # written as it is to a graph output; no stack to write alone
                d.reason = (f"the {self.what()} already serves on a CPU: its {self.found()} sit in tf.keras GPU-only "
                            "variants, each with a standard twin TensorFlow runs instead on a CPU")
                d.notes.append(d.reason + "; written as it is (each signature checked to serve on a CPU)")
            d.row = self._row
            d.stack_word = "cuDNN node"
            d.holder, d.choose_one = "graph", "name a directory as OUTPUT (one file per node)"
        return d


def read(path, options: Optional[Options] = None, **kw) -> GraphDoc:
    """The graph's cuDNN nodes (a tf.keras SavedModel missing its variables: that refusal)."""
    from ...options import Budget
    from ..saved_models import keras_claims

    opts = Options.of(options, **kw)
    budget = Budget.of(opts.graph_timeout, opts.graph_memory)
    path = Path(path)
    gf = graph_file(path)
    if gf is not None and gf.type == "SavedModel" and keras_claims(gf.path.parent) == FORMAT:
        return GraphDoc(path, gf, missing=("is a tf.keras SavedModel without its variables (variables/variables.index "
                                           "is missing): its weights are not in it"), budget=budget)
    if gf is None:
        raise InputError("is not a SavedModel directory nor a .pb/.pbtxt graph", path=path)
    s = scanned(gf)
    return GraphDoc(path, gf, list(s.nodes), python_ops=list(s.python_ops), budget=budget)


# --------------------------------------------------------------------------- registry verbs

def inspect(doc: GraphDoc) -> dict:
    """The one inspect schema; ``details`` has one line per cuDNN node, ``cudnn_nodes`` the same as data."""
    d = doc.document()
    if doc.missing is not None:
        summary = doc.missing
    elif doc.serves_on_cpu:
        summary = f"{doc.what()}; {doc.found()}, all in GPU-only variants with a CPU twin: already serves on a CPU"
    elif d.refusal is not None:
        summary = f"{doc.what()}; {doc.found()}: runs only on a GPU, and gruconv cannot convert it"
    else:
        summary = (f"{doc.what()}; {doc.found()}: runs only on a GPU; gruconv convert makes a SavedModel that serves "
                   "on a CPU (each cuDNN node replaced by standard ops)")
    details = [n.describe() for n in doc.nodes]
    if d.refusal is not None and doc.missing is None:
        details.append(f"gruconv convert refuses it (exit 3): {d.refusal.message}")
    rnns = [doc._row(i) for i in range(len(doc._rnn_nodes()))] if d.tf_graph is not None else []
    return {"file": str(doc.path), "format": FORMAT, "kind": "graph", "summary": summary, "rnns": rnns,
            "details": details, "cudnn_nodes": [n.to_dict() for n in doc.nodes],
            "refused": None if d.refusal is None else d.refusal.message,
            "nothing_to_convert": doc.serves_on_cpu}


def input_facts(path, opts: Options) -> InputFacts:
    """``tf-graph`` (cuDNN nodes to replace, or none: it already serves on a CPU) or ``refused`` (a node it
    cannot replace, Python ops, no variables); ``stacks``: its cuDNN RNN nodes (each a stack of its own when the
    stacks are written alone)."""
    doc = read(path, opts)
    names = {n.name for n in doc._rnn_nodes()}  # a SavedModel's functions may hold copies of one node
    return InputFacts(doc.content, stacks=max(1, len(names)) if doc.content == "tf-graph" else 1)
