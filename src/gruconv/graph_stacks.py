"""A TensorFlow graph's cuDNN nodes as bare stacks, for the writers of stacks (``.keras``, ``.safetensors``,
``.h5`` weights, a directory of them, ONNX stacks in a directory): what a TF1 checkpoint's stacks become.

Why a driver module and not the reader: a node's ``params`` is a tensor of the graph (a ``Const``, a
variable read, a buffer Keras 3's TensorFlow backend or ``CudnnRNNCanonicalToParams`` computes from the
variables), so its values are what TensorFlow computes when the graph runs; the reader reads the graph
without TensorFlow.  They are taken from one run of the original graph on the CPU with each cuDNN node
computed by the oracle (:func:`gruconv.verify.reference.tf_graph.node_params`: the params the node is given,
recorded), and each stack is that buffer unpacked in cuDNN's layout for the node's shape (the reader's).

Only the stacks are written: the graph's other ops (embeddings, dense layers, the signatures) are not, and
a note says so; the whole graph converts to a SavedModel or to one ONNX file instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .errors import UnsupportedError
from .model.canonical import Document, RNNStack


@dataclass
class NodeStack:
    """One cuDNN node's stack: ``scope`` the node's name, ``stack`` its weights, ``buffer`` its params."""

    scope: str
    stack: RNNStack
    buffer: np.ndarray = field(repr=False)

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

    #: what the document holds (:data:`gruconv.model.canonical.CONTENTS`)
    content = "stacks"

    @property
    def path(self) -> str:
        return self.base.source

    def opaque_buffer(self, entry: NodeStack) -> np.ndarray:
        """The buffer the node computes with (verify runs it through the reference as the original)."""
        return entry.buffer

    def document(self) -> Document:
        from .model.keras_layout import describe_keras_stack

        b = self.base
        d = Document(source=b.source, reader=b.reader, stacks=list(self.stacks), inputs=list(b.inputs),
                     warnings=list(b.warnings))
        d.names = [e.scope for e in self.stacks]
        d.stack_word, d.holder, d.choose_one = b.stack_word, b.holder, b.choose_one
        d.row = lambda i, nonfinite=None: {**b.row(i), "converts_to": describe_keras_stack(self.stacks[i].shape)}
        d.notes = [f"{len(self.stacks)} cuDNN node stack(s) written alone: the graph's other ops are not in the output "
                   "(convert to a SavedModel directory or to OUTPUT.onnx for the whole graph)"]
        return d


def stacks_of(document: Document) -> GraphStacksDoc:
    """The stacks of ``document``'s cuDNN nodes (a ``tf-graph`` document), their params as the graph
    computes them; a node no signature reaches is a one-line refusal.  Needs TensorFlow."""
    from .keras3.runtime import import_quietly
    from .model.cudnn_layout import unpack
    from .verify.reference.tf_graph import node_params

    graph = document.tf_graph
    try:
        import_quietly("tensorflow")
    except ImportError:
        raise UnsupportedError("evaluating a graph's cuDNN params needs TensorFlow (pip install 'gruconv[tensorflow]')",
                               path=Path(document.source)) from None
    params = node_params(graph)
    stacks = []
    for r in graph.rnns:
        if r.shape is None:  # a packing node: its output is a node's params, recorded there
            continue
        buf = params.get((r.graph, r.function, r.name))
        if buf is None:
            raise UnsupportedError(f"cuDNN node {r.name!r} is not reached when the graph's signatures run on probe "
                                   "inputs, so its params cannot be evaluated; convert the whole graph instead "
                                   "(a SavedModel directory, or OUTPUT.onnx)", path=Path(document.source))
        buf = buf.astype(r.shape.dtype, copy=False)
        stacks.append(NodeStack(r.name, RNNStack(r.name, r.shape, unpack(buf, r.shape)), buf))
    return GraphStacksDoc(document, stacks)
