"""The rewritten SavedModel directory, before it is run: the input's proto parsed by TensorFlow, each cuDNN
node replaced (:mod:`.rewrite`), the MetaGraphs or the frozen graph's one ``serving_default`` written, the
input's ``variables/`` and ``assets/`` copied byte for byte (the writer's docstring,
:mod:`gruconv.writers.saved_model`).  Also how ``verify`` builds its reference graph, with its own
replacement functions (:func:`rewritten`'s ``maker``)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from ...model.saved_model import SAVED_MODEL_PB, SIGNATURE

def tensorflow():
    from ...tf.runtime import tensorflow

    return tensorflow("writing a SavedModel")


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


def _check_clean(graph_defs, op_lists, graph) -> None:
    from ...errors import OutputError
    from .rewrite import cudnn_ops_left

    path = graph.path
    left = cudnn_ops_left(graph_defs, op_lists, keep=graph.twinned)
    if left:
        raise OutputError(f"the rewritten graph still names cuDNN ops ({'; '.join(left[:3])}); nothing written",
                          path=path)


def _saved_model(tf, graph, proto, out: Path, maker) -> None:
    from tensorflow.python.framework import meta_graph

    from .rewrite import rewrite_graph_def

    for i, mg in enumerate(proto.meta_graphs):
        rewrite_graph_def(tf, mg.graph_def, [r for r in graph.rnns if r.graph == i], *maker)
        if mg.HasField("meta_info_def"):
            mg.meta_info_def.stripped_op_list.CopyFrom(meta_graph.stripped_op_list_for_graph(mg.graph_def))
    _check_clean([m.graph_def for m in proto.meta_graphs],
                 [m.meta_info_def.stripped_op_list for m in proto.meta_graphs], graph)
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


def _frozen(tf, graph, graph_def, out: Path, maker) -> None:
    from .rewrite import rewrite_graph_def

    rewrite_graph_def(tf, graph_def, graph.rnns, *maker)
    _check_clean([graph_def], (), graph)
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
                                                 signature_def_map={SIGNATURE: sig},
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
                 [m.meta_info_def.stripped_op_list for m in written.meta_graphs], graph)


def rewritten(graph, out: Path, maker=None) -> None:
    """``graph`` (:class:`gruconv.model.canonical.TfGraph`) as a SavedModel in the empty directory ``out``,
    each cuDNN node a call of the function ``maker = (trace, key)`` makes for it
    (:class:`.rewrite.Replacements`; None: the standard-op equations ``convert`` writes), checked to name no
    ``CudnnRNN*`` op; not yet run."""
    import logging

    from .rewrite import equations, signature

    from ...errors import InputError
    from ...tf.runtime import why

    tf = tensorflow()
    logging.getLogger("tensorflow").setLevel(logging.ERROR)  # the TF1 builder's deprecation notices
    data = graph.data()  # the reader's bytes, read through its guards
    proto = _parse(tf, graph, data)
    write = _saved_model if graph.kind == "SavedModel" else _frozen
    try:
        write(tf, graph, proto, Path(out), maker or (equations, signature))
    except (tf.errors.OpError, ValueError) as e:  # TensorFlow refusing the graph it imports (an op it does not
        # know, an input naming no node, an attr of the wrong type): the input's fault, said in one line
        raise InputError(f"is a {graph.kind} TensorFlow cannot import ({type(e).__name__}: {why(e)})",
                         path=graph.path) from None
