"""The replacement of one cuDNN node run on its own, for ``verify`` (:class:`gruconv.verify.runners.StackRunner`).

What runs is what was written: the node's op in the converted SavedModel names the generated library
function (:mod:`gruconv.tf.rewrite`); that function and the ones it calls are copied out of
the converted graph into a small GraphDef of placeholders and one call node, imported and run by
TensorFlow on the CPU.  Without a converted SavedModel the function is traced here the way the writer
traces it (:func:`gruconv.tf.equations.function`).  Inputs arrive time-major (the
runner's contract) and are laid out as the op takes them (``time_major=false``: batch-major, states
``[B, L*D, H]``); a ``CudnnRNNV3`` gets the lengths (all full when verify passes none).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..model.cudnn_ops import INPUTS, WITH_LENGTHS
from ..model.saved_model import SAVED_MODEL_PB


def _library(path: Path, rnn) -> tuple:
    """``(function name, [FunctionDef])``: the op the converted graph gives node ``rnn`` and the generated
    functions of its MetaGraphDef."""
    from tensorflow.core.protobuf import saved_model_pb2

    from ..errors import InputError
    from .rewrite import PREFIX

    sm = saved_model_pb2.SavedModel()
    sm.ParseFromString((Path(path) / SAVED_MODEL_PB).read_bytes())
    gd = sm.meta_graphs[rnn.graph].graph_def
    nodes = gd.node if rnn.function is None else next(
        (f.node_def for f in gd.library.function if f.signature.name == rnn.function), [])
    op = next((n.op for n in nodes if n.name == rnn.name), None)
    if op is None or not op.startswith(PREFIX):
        raise InputError(f"the converted SavedModel has no replacement of cuDNN node {rnn.name!r} (found op "
                         f"{op!r}); is it this input's conversion?", path=path)
    return op, [f for f in gd.library.function if f.signature.name.startswith(PREFIX)]


def _call_graph(tf, fname: str, library: list, dtype, with_lengths: bool):
    from tensorflow.core.framework import graph_pb2

    gd = graph_pb2.GraphDef()
    gd.library.function.extend(library)
    names = list(INPUTS if with_lengths else INPUTS[:-1])
    for n in names:
        node = gd.node.add(name=n, op="Placeholder")
        node.attr["dtype"].type = (tf.int32 if n == INPUTS[-1] else dtype).as_datatype_enum
    gd.node.add(name="call", op=fname, input=names)
    g = tf.Graph()
    with g.as_default():
        tf.graph_util.import_graph_def(gd, name="")
    return g, names


def runner(rnn, converted=None):
    """``run(x_tm, h0, c0, lengths, math) -> (y_tm, hy, cy or None)`` of node ``rnn``'s replacement (what
    ``converted``, a converted SavedModel directory, calls for it; None: traced as ``convert`` traces it).
    What runs is gruconv's generated function, not the user's graph: in this process."""
    from .rewrite import Replacements
    from .runtime import tensorflow

    tf = tensorflow("running a cuDNN node's replacement")
    shape = rnn.shape
    dtype = tf.as_dtype(shape.dtype)
    if converted is not None:
        fname, library = _library(converted, rnn)
    else:
        reps = Replacements(tf, set())
        fname = reps.name_for(rnn)
        library = reps.functions
    with_lengths = rnn.op in WITH_LENGTHS
    g, names = _call_graph(tf, fname, library, dtype, with_lengths)
    lstm = "c" in shape.cell_spec.states

    def run(x, h0, c0, lengths, math):
        T, B = x.shape[0], x.shape[1]
        np_t = np.dtype(shape.dtype)
        h0 = np.zeros((shape.num_pseudo_layers, B, shape.units), np_t) if h0 is None else h0
        c0 = (np.zeros_like(h0) if c0 is None else c0) if lstm else np.zeros((), np_t)
        LD = shape.num_pseudo_layers
        if not rnn.time_major:  # the op's states: [B, L*D, H], the same memory (equations' docstring)
            x, h0 = x.transpose(1, 0, 2), h0.reshape(B, LD, shape.units)
            c0 = c0.reshape(B, LD, shape.units) if lstm else c0
        feeds = {"input:0": x.astype(np_t), "input_h:0": h0.astype(np_t), "input_c:0": np.asarray(c0, np_t),
                 "params:0": run.params}
        if with_lengths:
            feeds["sequence_lengths:0"] = np.full(B, T, np.int32) if lengths is None else lengths.astype(np.int32)
        elif lengths is not None and np.any(lengths != T):
            raise AssertionError(f"{rnn.op} takes no sequence lengths")
        with tf.compat.v1.Session(graph=g) as sess, tf.device("/CPU:0"):
            y, hy, cy = sess.run(["call:0", "call:1", "call:2"], feeds)
        if not rnn.time_major:
            y, hy = y.transpose(1, 0, 2), hy.reshape(LD, B, shape.units)
            cy = cy.reshape(LD, B, shape.units) if lstm else cy
        return y, hy, cy if lstm else None

    run.params = None  # the opaque buffer to run with: set by the caller (verify's subject)
    return run
