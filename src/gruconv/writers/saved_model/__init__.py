"""The ``saved-model`` writer: a TensorFlow graph holding cuDNN ops as a SavedModel that serves on a CPU
(and still on a GPU), same signatures, names, dtypes and shapes.

Input: a document of content ``tf-graph`` (:class:`gruconv.model.canonical.TfGraph`: a SavedModel or a
frozen ``GraphDef`` and its cuDNN nodes, each with its :class:`~gruconv.model.canonical.StackShape`).

* A SavedModel: its MetaGraphDefs are rewritten (:mod:`gruconv.writers.saved_model.rewrite`: each cuDNN
  node calls a generated function of standard ops, :mod:`gruconv.writers.saved_model.equations`), written
  as ``saved_model.pb``; its ``variables/`` and ``assets/`` are copied byte for byte and its fingerprint is
  made again for the new graph (``tensorflow/python/saved_model/fingerprinting_utils.py``).
* A frozen GraphDef has no signatures: the output has one, ``serving_default`` (tag ``serve``), whose
  inputs are its ``Placeholder``s and whose outputs are the nodes nothing consumes, each keyed by its
  node name (``name``, or ``name_K`` for its output K > 0 of several), written by TensorFlow's own
  ``tf.compat.v1.saved_model.Builder``.

Checked before it is placed (the output contract: exit 0 only for an output proven loadable): no
``CudnnRNN*`` op anywhere in it (graph, every library function, ``stripped_op_list``), and
``tf.saved_model.load`` opens it and every signature runs on the CPU (on zeros of its input specs, an
unknown dimension taken as 1, else each of PROBE_SIZES in turn).  The output is a directory written as one piece
(:meth:`gruconv.files.outputs.Outputs.tree`).  TensorFlow is needed (the ``tensorflow`` extra).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

FORMAT = "saved-model"
#: A directory, named as given.
SUFFIX = ""
#: No name ending selects it: it is the natural output of a ``tf-graph`` input (an output path without
#: a model suffix), or ``--format saved-model``.
CLAIMS = ()
KINDS = ("tf-graph",)
WRITES = "graph"
MANY = False
NEEDS_ARCHITECTURE = False

#: A SavedModel's graph file (``tensorflow/python/saved_model/constants.py``).
SAVED_MODEL_PB = "saved_model.pb"


def options(graph: bool) -> frozenset:
    """No option changes what it writes."""
    return frozenset()


def _tf():
    from ...errors import UnsupportedError
    from ...keras3.runtime import import_quietly

    try:
        return import_quietly("tensorflow")
    except ImportError:
        raise UnsupportedError("writing a SavedModel needs TensorFlow (pip install 'gruconv[tensorflow]')") from None


def _parse(tf, graph, data: bytes):
    """The input's proto (TensorFlow's classes); a file TensorFlow cannot parse is one line."""
    from google.protobuf import message, text_format
    from tensorflow.core.framework import graph_pb2
    from tensorflow.core.protobuf import saved_model_pb2

    from ...errors import InputError

    proto = saved_model_pb2.SavedModel() if graph.kind == "SavedModel" else graph_pb2.GraphDef()
    try:
        if graph.text:
            text_format.Parse(data.decode("utf-8"), proto)
        else:
            proto.ParseFromString(data)
    except (message.DecodeError, text_format.ParseError, UnicodeDecodeError, RecursionError) as e:
        raise InputError(f"is not a readable {graph.kind} ({str(e).splitlines()[0][:160] if str(e) else type(e).__name__})",
                         path=graph.path) from None
    return proto


def _check_clean(graph_defs, op_lists, path) -> None:
    from ...errors import OutputError
    from .rewrite import cudnn_ops_left

    left = cudnn_ops_left(graph_defs, op_lists)
    if left:
        raise OutputError(f"the rewritten graph still names cuDNN ops ({'; '.join(left[:3])}); nothing written",
                          path=path)


def _saved_model(tf, graph, proto, out: Path) -> None:
    from tensorflow.python.framework import meta_graph

    from .rewrite import rewrite_graph_def

    for i, mg in enumerate(proto.meta_graphs):
        rewrite_graph_def(tf, mg.graph_def, [r for r in graph.rnns if r.graph == i])
        if mg.HasField("meta_info_def"):
            mg.meta_info_def.stripped_op_list.CopyFrom(meta_graph.stripped_op_list_for_graph(mg.graph_def))
    _check_clean([m.graph_def for m in proto.meta_graphs],
                 [m.meta_info_def.stripped_op_list for m in proto.meta_graphs], graph.path)
    (out / SAVED_MODEL_PB).write_bytes(proto.SerializeToString())
    for rel, src in graph.files:  # variables/, assets/: byte for byte
        dst = out / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dst)
    from tensorflow.python.saved_model import fingerprinting_utils

    fingerprinting_utils.write_fingerprint(str(out))


def _sinks_and_placeholders(graph_def) -> tuple:
    """``(placeholders, sinks)``: node names of the ``Placeholder``s and of the nodes no node consumes."""
    consumed = set()
    for n in graph_def.node:
        for i in n.input:
            consumed.add(i.lstrip("^").split(":")[0])
    placeholders = [n.name for n in graph_def.node if n.op == "Placeholder"]
    sinks = [n.name for n in graph_def.node if n.name not in consumed and n.op not in ("Placeholder", "NoOp")]
    return placeholders, sinks


def _signature_key(name: str) -> str:
    """A node name as a signature key: characters outside ``[A-Za-z0-9_]`` become ``_`` (a signature's
    input keys become argument names of the loaded function)."""
    import re

    return re.sub(r"[^A-Za-z0-9_]", "_", name) or "_"


def _frozen(tf, graph, graph_def, out: Path) -> None:
    from .rewrite import rewrite_graph_def

    rewrite_graph_def(tf, graph_def, graph.rnns)
    _check_clean([graph_def], (), graph.path)
    placeholders, sinks = _sinks_and_placeholders(graph_def)
    g = tf.Graph()
    with g.as_default():
        tf.graph_util.import_graph_def(graph_def, name="")
        inputs = {_signature_key(p): g.get_operation_by_name(p).outputs[0] for p in placeholders}
        outputs = {}
        for s in sinks:
            op = g.get_operation_by_name(s)
            for k, t in enumerate(op.outputs):
                outputs[s if k == 0 else f"{s}_{k}"] = t
        sig = tf.compat.v1.saved_model.signature_def_utils.predict_signature_def(inputs=inputs, outputs=outputs)
        target = out / "saved_model"
        builder = tf.compat.v1.saved_model.Builder(str(target))
        with tf.compat.v1.Session(graph=g) as sess:
            builder.add_meta_graph_and_variables(sess, [tf.saved_model.SERVING],
                                                 signature_def_map={"serving_default": sig},
                                                 strip_default_attrs=True)
        builder.save()
    for p in target.iterdir():  # the builder wants a directory that does not exist: move its files up
        os.replace(p, out / p.name)
    target.rmdir()
    from google.protobuf import message  # noqa: F401 (parsed below with TensorFlow's classes)
    from tensorflow.core.protobuf import saved_model_pb2

    written = saved_model_pb2.SavedModel()
    written.ParseFromString((out / SAVED_MODEL_PB).read_bytes())
    _check_clean([m.graph_def for m in written.meta_graphs],
                 [m.meta_info_def.stripped_op_list for m in written.meta_graphs], graph.path)


#: The sizes tried for every unknown dimension at once when a signature is run on zeros: a graph whose
#: fixed dimensions tie its batch to another size (a state of fixed ``L*D`` rows read as the batch)
#: runs only at that size.
PROBE_SIZES = (1, 2, 3, 4, 6, 8)


def _zeros(tf, spec, k: int = 1):
    shape = [k if d is None else d for d in (spec.shape.as_list() if spec.shape.rank is not None else [])]
    if spec.dtype == tf.string:
        return tf.fill(shape, "")
    return tf.zeros(shape, spec.dtype)


def _why(e: Exception) -> str:
    """The informative line of a TensorFlow error (its text opens with "Graph execution error:" and the node)."""
    skip = ("Graph execution error", "Detected at node", "<stack traces", "[[")
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip() and not ln.strip().startswith(skip)]
    return (lines[0] if lines else type(e).__name__)[:200]


def _serves_on_cpu(tf, path: Path, shown=None) -> list:
    """Load ``path`` with ``tf.saved_model.load`` and run every signature on the CPU; returns the keys
    run.  A failure is an :class:`~gruconv.errors.UnsupportedError` said of ``shown`` (the output's final path)."""
    from ...errors import UnsupportedError

    try:
        with tf.device("/CPU:0"):
            loaded = tf.saved_model.load(str(path))
            keys = sorted(loaded.signatures.keys())
            for key in keys:
                fn = loaded.signatures[key]
                _, kwargs = fn.structured_input_signature
                first = None
                for k in PROBE_SIZES:
                    try:
                        fn(**{name: _zeros(tf, spec, k) for name, spec in kwargs.items()})
                        break
                    except tf.errors.InvalidArgumentError as e:  # shapes that do not fit: the next size
                        first = first or e
                else:
                    raise first
    except Exception as e:  # noqa: BLE001 - TensorFlow's errors, at its call: the output is not proven
        raise UnsupportedError(f"the converted SavedModel does not serve on a CPU ({type(e).__name__}: {_why(e)}; "
                               "run on zeros of each signature's inputs, every unknown dimension taken as 1, 2, 3, 4, 6 or 8); nothing "
                               "written", path=shown or path) from None
    return keys


def write(document, target, options) -> dict:
    """Write ``document.tf_graph`` as a SavedModel into the empty directory ``target.tmp``."""
    import logging

    tf = _tf()
    logging.getLogger("tensorflow").setLevel(logging.ERROR)  # the TF1 builder's deprecation notices
    graph = document.tf_graph
    data = graph.data()  # the reader's bytes, read through its guards
    proto = _parse(tf, graph, data)
    out = Path(target.tmp)
    if graph.kind == "SavedModel":
        _saved_model(tf, graph, proto, out)
    else:
        _frozen(tf, graph, proto, out)
    _serves_on_cpu(tf, out, shown=target.path)
    return {}


def load(path, rebuild):
    """Not a Keras model: ``verify`` of a converted SavedModel is not implemented (one line)."""
    from ...errors import UnsupportedError

    raise UnsupportedError("verify of a converted SavedModel is not implemented yet; it was checked to load and "
                           "serve on a CPU when written (gruconv convert)", path=path)
