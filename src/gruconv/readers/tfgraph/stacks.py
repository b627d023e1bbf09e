"""A TensorFlow graph's cuDNN nodes as bare stacks, for the writers of stacks (``.keras``, ``.safetensors``,
``.h5`` weights, a directory of them, ONNX stacks in a directory): what a TF1 checkpoint's stacks become.

The reader's document, read once: each node's settings and sizes are the graph reader's
(:class:`gruconv.model.canonical.GraphRNN`), and its ``params`` -- a tensor of the graph (a ``Const``, a
variable read, a buffer Keras 3's TensorFlow backend or ``CudnnRNNCanonicalToParams`` computes from the
variables), so what TensorFlow computes when the graph runs -- come from the ``TfGraph``'s lazy
:meth:`~gruconv.model.canonical.TfGraph.params`: one bounded run of the original graph on the CPU with each cuDNN
node recording the params it is given (:func:`gruconv.tf.params.node_params`, in a child process of
:func:`gruconv.tf.bounded.run`).  The reader itself runs no TensorFlow; this document is asked for only when
the target is stacks (``Document.as_stacks``, the ``tf-graph-stacks`` route), and each stack is that buffer unpacked in cuDNN's layout for the node's shape (the reader's).

Only the stacks are written: the graph's other ops (embeddings, dense layers, the signatures) are not, and
a note says so; the whole graph converts to a SavedModel or to one ONNX file instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ...errors import UnsupportedError
from ...model.canonical import Document, RNNStack


@dataclass
class NodeStack:
    """One cuDNN node's stack: ``scope`` the node's name, ``stack`` its weights, ``buffer`` its params."""

    scope: str
    stack: RNNStack
    buffer: np.ndarray = field(repr=False)
    #: the node's row in the graph document's report (:attr:`gruconv.model.canonical.Document.row`)
    row: int = 0

    @property
    def shape(self):
        return self.stack.shape

    @property
    def cell(self) -> str:
        return self.stack.shape.cell


@dataclass
class GraphStacksDoc:
    """The stacks of a graph's cuDNN nodes (content ``stacks``, as a TF1 checkpoint's); ``base``: the graph's
    own :class:`~gruconv.model.canonical.Document` (its inputs, rows, warnings)."""

    base: Document
    stacks: list
    #: nodes in functions no signature calls (a SavedModel's other traced functions): not written
    unreached: list = field(default_factory=list)

    #: what the document holds (:data:`gruconv.model.canonical.CONTENTS`)
    content = "stacks"

    @property
    def path(self) -> str:
        return self.base.source

    def opaque_buffer(self, entry: NodeStack) -> np.ndarray:
        """The buffer the node computes with (verify runs it through the reference as the original)."""
        return entry.buffer

    def document(self) -> Document:
        from ...model.keras_layout import describe_keras_stack

        b = self.base
        d = Document(source=b.source, reader=b.reader, stacks=list(self.stacks), inputs=list(b.inputs),
                     warnings=list(b.warnings))
        d.names = [e.scope for e in self.stacks]
        d.stack_word, d.holder, d.choose_one = b.stack_word, b.holder, b.choose_one
        d.row = lambda i, nonfinite=None: {**b.row(self.stacks[i].row),
                                           "converts_to": describe_keras_stack(self.stacks[i].shape)}
        d.notes = [f"{len(self.stacks)} cuDNN node stack(s) written alone: the graph's other ops are not in the output "
                   "(convert to a SavedModel directory or to OUTPUT.onnx for the whole graph)"]
        if self.unreached:
            d.notes.append(f"{len(self.unreached)} cuDNN node(s) in functions no signature calls are not written (their "
                           f"params are not evaluated): {', '.join(self.unreached[:4])}"
                           + (f" and {len(self.unreached) - 4} more" if len(self.unreached) > 4 else ""))
        return d


def stacks_of(document: Document) -> GraphStacksDoc:
    """The stacks of ``document``'s cuDNN nodes (a ``tf-graph`` document), their params as the graph
    computes them (``document.tf_graph.params()``), one per node name (a SavedModel's functions may hold
    copies of one layer's node); a node no signature reaches is left out with a note (no node reached: a
    one-line refusal).  Needs TensorFlow."""
    from ...model.cudnn_layout import unpack

    graph = document.tf_graph
    params = graph.params()
    by_name: dict = {}  # one stack per node name: a SavedModel's functions hold copies of one layer's node
    for i, r in enumerate(x for x in graph.rnns if x.shape is not None):  # packing nodes: recorded at their node
        by_name.setdefault(r.name, []).append((i, r))
    stacks, unreached = [], []
    for name, copies in by_name.items():
        found = [(i, r, params[(r.graph, r.function, r.name)]) for i, r in copies
                 if (r.graph, r.function, r.name) in params]
        if not found:
            unreached.append(name)
            continue
        i, r, buf = found[0]
        if any(o.shape != r.shape or not np.array_equal(b, buf) for _, o, b in found[1:]):
            raise UnsupportedError(f"cuDNN node {name!r} appears in several functions with different params; convert "
                                   "the whole graph instead (a SavedModel directory, or OUTPUT.onnx)",
                                   path=Path(document.source))
        buf = buf.astype(r.shape.dtype, copy=False)
        stacks.append(NodeStack(name, RNNStack(name, r.shape, unpack(buf, r.shape)), buf, row=i))
    return GraphStacksDoc(document, stacks, unreached)


def evaluate(graph, source: Path) -> dict:
    """``TfGraph.params`` of a graph this reader read (``source``: the input, what a refusal names): one bounded
    run (:func:`gruconv.tf.bounded.run` of :func:`gruconv.tf.params.evaluated`, within the graph's budget)."""
    from ...tf.bounded import run
    from ...tf.params import evaluated

    return run(evaluated, graph, Path(source), budget=graph.budget, path=Path(source), reuse=True)
