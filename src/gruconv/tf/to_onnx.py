"""tf2onnx run on a user's graph: the TensorFlow side of the whole-graph ONNX writer.

Why here: tf2onnx imports TensorFlow, loads the graph with it (a SavedModel's signature frozen, a frozen
``GraphDef`` parsed) and folds constant subgraphs by running them (Grappler's ``constfold``), so this is the
TensorFlow boundary (:mod:`gruconv.tf`), and it runs in the child process of :func:`gruconv.tf.bounded.run` the
writer starts.  What each cuDNN node becomes in ONNX is the writer's (:mod:`gruconv.writers.onnx.tfgraph`: its
handlers, handed to :func:`convert`, and the checks of the model made).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Optional

from ..errors import GruconvError, InputError, ReferenceUnavailable, UnsupportedError, first_line
from ..model.saved_model import SIGNATURE as DEFAULT_SIGNATURE

#: A protobuf message's hard limit (2 GiB), less a margin: a frozen graph over it cannot be parsed.
MAX_MODEL_BYTES = 2**31 - 2**20


def _quiet_tensorflow():
    """TensorFlow, with tf2onnx imported quietly (:func:`gruconv.tf.runtime.import_quietly`) and its
    loggers held to CRITICAL: a handler's refusal is raised as one line, not logged with a traceback too."""
    from .runtime import import_quietly

    try:
        import_quietly("tf2onnx")
    except ImportError as e:
        raise ReferenceUnavailable(f"a graph input needs TensorFlow and tf2onnx ({e}); "
                                   "pip install 'gruconv[graphs]'") from None
    import tensorflow as tf

    tf.get_logger().setLevel("ERROR")
    for name in ("tf2onnx", "tensorflow"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    return tf


def _graph_def_file(path: Path, graph=None):
    """A frozen ``GraphDef`` (``.pbtxt`` text, else binary) parsed by TensorFlow's protobuf classes: the bytes the
    reader read (``graph``, a :class:`gruconv.model.canonical.TfGraph`: ``data()``, ``text``), else the file."""
    from google.protobuf import message, text_format
    from tensorflow.core.framework import graph_pb2

    from ..files.inputs import open_regular

    if graph is not None:
        data, text = graph.data(), graph.text
    else:
        with open_regular(path, "a frozen GraphDef (.pb, .pbtxt)") as f:
            size = os.fstat(f.fileno()).st_size
            if size > MAX_MODEL_BYTES:
                raise InputError(f"is {size} bytes, over protobuf's 2 GiB", path=path)
            data = f.read()
        text = path.suffix == ".pbtxt"
    gd = graph_pb2.GraphDef()
    try:
        if text:
            text_format.Parse(data.decode("utf-8"), gd)
        else:
            gd.ParseFromString(data)
    except (message.DecodeError, text_format.ParseError, UnicodeDecodeError) as e:
        raise InputError(f"not a GraphDef ({first_line(e, 200)})", path=path) from None
    return gd


def frozen_interface(tf, gd) -> tuple:
    """``(inputs, outputs)`` tensor names of a frozen graph, which has no signature: its placeholders,
    and every output of each node that nothing consumes (the rule the CPU SavedModel writer's
    ``serving_default`` keeps; ops with no outputs, and unconsumed constants, are not outputs)."""
    with tf.Graph().as_default() as g:
        tf.import_graph_def(gd, name="")
    ops = g.get_operations()
    consumed = {t.op.name for op in ops for t in op.inputs} | {c.name for op in ops for c in op.control_inputs}
    inputs = [op.outputs[0].name for op in ops if op.type == "Placeholder"]
    outputs = [t.name for op in ops if op.type not in ("Placeholder", "Const", "NoOp") and op.name not in consumed
               for t in op.outputs]
    return inputs, outputs


def load(path, *, signature: Optional[str] = None, graph=None) -> tuple:
    """``(frozen GraphDef, inputs, outputs, tensors_to_rename, signature or None)`` of a SavedModel
    directory (``signature``, default ``serving_default``) or a frozen ``.pb``/``.pbtxt``, through
    tf2onnx's loader (it freezes the variables and runs Grappler's constant folding).  ``graph``: the
    reader's :class:`~gruconv.model.canonical.TfGraph` of the input at ``path`` (the writer's case: a SavedModel
    loaded from its graph file's directory, a frozen graph from the bytes the reader read); ``path`` names it
    in messages."""
    tf = _quiet_tensorflow()
    from tf2onnx import tf_loader

    path = Path(path)
    saved_model = graph.kind == "SavedModel" if graph is not None else path.is_dir()
    if saved_model:
        sig = signature or DEFAULT_SIGNATURE
        directory = Path(graph.path).parent if graph is not None else path
        try:
            gd, inputs, outputs, rename = tf_loader.from_saved_model(str(directory), None, None, tag=["serve"],
                                                                     signatures=[sig],
                                                                     return_tensors_to_rename=True)
        except Exception as e:  # noqa: BLE001 - TensorFlow's loader raises many unrelated types
            raise InputError(f"cannot load the SavedModel's {sig!r} signature ({first_line(e, 200)})",
                             path=path) from None
        return gd, inputs, outputs, rename, sig
    if signature:
        raise UnsupportedError("a frozen GraphDef has no signatures (its placeholders are the inputs)", path=path)
    gd = _graph_def_file(path, graph)
    try:
        inputs, outputs = frozen_interface(tf, gd)
        with tf.Graph().as_default():  # Grappler's meta-graph export needs a graph, not eager mode
            gd = tf_loader.tf_optimize(inputs, outputs, gd)
    except Exception as e:  # noqa: BLE001 - TensorFlow's import/Grappler
        raise InputError(f"TensorFlow cannot import the graph ({first_line(e, 200)})", path=path) from None
    rename = {t: t[:-2] if t.endswith(":0") else t.replace(":", "_") for t in inputs + outputs}
    return gd, inputs, outputs, rename, None


def convert(path, *, signature: Optional[str], opset: int, handlers: dict, graph=None) -> tuple:
    """``(onnx.ModelProto, signature or None)``: the graph at ``path`` (a SavedModel directory: its ``signature``,
    default ``serving_default``; or a frozen ``.pb``/``.pbtxt``) loaded by :func:`load` and converted by tf2onnx
    at ``opset`` with ``handlers`` (``custom_op_handlers``) and its optimizer; a handler's
    :class:`~gruconv.errors.GruconvError` is said of ``path``, any other failure is one line."""
    tf = _quiet_tensorflow()  # first: TensorFlow's C++ start-up lines are silenced only before it loads
    from tf2onnx import optimizer
    from tf2onnx.tfonnx import process_tf_graph

    gd, inputs, outputs, rename, sig = load(path, signature=signature, graph=graph)
    try:
        with tf.Graph().as_default() as tf_graph:
            tf.import_graph_def(gd, name="")
            g = process_tf_graph(tf_graph, continue_on_error=False, opset=opset, custom_op_handlers=handlers,
                                 input_names=inputs, output_names=outputs, tensors_to_rename=rename)
        g = optimizer.optimize_graph(g, catch_errors=False)
        model = g.make_model(f"gruconv: {Path(path).name} through tf2onnx")
    except GruconvError as e:
        raise type(e)(e.message, path=path) from None
    except Exception as e:  # noqa: BLE001 - tf2onnx's conversion, any of its errors
        raise UnsupportedError(f"tf2onnx cannot convert the graph ({first_line(e, 200)})", path=path) from None
    return model, sig
