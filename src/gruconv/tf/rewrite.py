"""A graph's ``CudnnRNN*`` nodes replaced by calls of generated library functions (TensorFlow's protos), and the
rewritten SavedModel directory written (:func:`rewritten`), before it is run.

Why a proto rewrite and not a re-trace: the graph is the user's (its signatures, names, dtypes, shapes,
variables, every other op), and re-tracing it would need the Python code that made it.  So each cuDNN
node keeps its name and its inputs and only changes its ``op`` to the name of a function added to the
graph's library (a node whose op names a library function calls it: ``tensorflow/core/framework/
function.h``, ``FunctionLibraryDefinition::Find``), so ``params`` stays whatever it was (a ``Const``, a
variable read, a buffer computed in the graph) and ``variables/`` is copied byte for byte.  The
function is :func:`gruconv.tf.equations.function` traced for that node; its output
args are renamed to the op's output arg names (``output``, ``output_h``, ...) so that ``node:output_h:0``
inside a function body and ``node:1`` in a graph still name the same tensors; the ``While`` bodies it
calls are added with it, every generated name prefixed ``gruconv_`` and made unique in the library.

The node's attrs that configured the op (``rnn_mode``, ``T``, ...) are dropped (a function call takes
only the function's own attrs; ``_``-prefixed internal ones such as ``_output_shapes`` stay), and a
device pinning it to a GPU is cleared: the replacement runs anywhere.  The MetaGraphDef's
``stripped_op_list`` is recomputed (``tensorflow/python/framework/meta_graph.py``), so no ``CudnnRNN*``
op is named anywhere in the output (:func:`cudnn_ops_left`).

The directory (:func:`rewritten`): the input's proto parsed by TensorFlow, each cuDNN node replaced, the
MetaGraphs or the frozen graph's one ``serving_default`` written, the input's ``variables/`` and ``assets/``
copied byte for byte (the writer's docstring, :mod:`gruconv.writers.saved_model`).  What it shares: the
``saved-model`` writer writes it with the standard-op equations (:mod:`gruconv.tf.equations`); ``verify``
builds its reference graph with its own replacement functions (:func:`rewritten`'s ``maker``,
:mod:`gruconv.verify.reference.tf_graph`); the stacks route records each node's params through it
(:mod:`gruconv.tf.params`).
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

from ..errors import InputError
from ..model.cudnn_ops import OUTPUTS, PREFIX as CUDNN_PREFIX
from ..model.saved_model import SAVED_MODEL_PB, SIGNATURE
from .equations import function, packing_function

#: Every generated function's name starts with this.
PREFIX = "gruconv_"


def _func_attrs(fdef):
    """Every ``NameAttrList`` of a function's nodes that names a function (``While`` bodies, calls)."""
    for n in fdef.node_def:
        for value in n.attr.values():
            if value.HasField("func"):
                yield value.func
            for f in value.list.func:
                yield f


def _library_of(tf, cf) -> list:
    """The FunctionDefs a concrete function needs: itself first, then what it calls."""
    main = cf.function_def
    rest = [f for f in cf.graph.as_graph_def().library.function if f.signature.name != main.signature.name]
    return [main] + rest


def equations(tf, rnn, node=None):
    """The concrete function that computes node ``rnn`` in standard ops: what ``convert`` writes."""
    if rnn.packs is not None:
        return packing_function(tf, rnn.packs, rnn.dtype)
    return function(tf, rnn.op, rnn.shape, rnn.time_major)


def signature(rnn, node=None) -> tuple:
    """What makes two nodes' replacements the same function under :func:`equations`."""
    return (rnn.op, rnn.shape, rnn.time_major, rnn.packs, rnn.dtype)


class Replacements:
    """The functions made for one graph's cuDNN nodes, one per node signature.

    ``trace(tf, rnn, node)`` makes the concrete function standing for a node (``rnn``: the reader's
    :class:`~gruconv.model.canonical.GraphRNN`; ``node``: its ``NodeDef`` as TensorFlow parsed it), with the
    op's inputs and outputs, and ``key(rnn, node)`` says which nodes share one: :func:`equations` and
    :func:`signature` for what ``convert`` writes; ``verify`` passes its own (the original graph with each
    node computed by the reference, :mod:`gruconv.verify.reference.tf_graph`), the params evaluation its
    recording nodes (:mod:`gruconv.tf.params`)."""

    def __init__(self, tf, taken: set, trace=equations, key=signature):
        self.tf, self.taken, self.trace, self.key = tf, set(taken), trace, key
        self.made: dict = {}
        self.functions: list = []

    def _unique(self, base: str) -> str:
        name, n = base, 1
        while name in self.taken:
            n += 1
            name = f"{base}_{n}"
        self.taken.add(name)
        return name

    def name_for(self, rnn, node=None) -> str:
        key = self.key(rnn, node)
        if key in self.made:
            return self.made[key]
        digest = hashlib.sha1(repr(key).encode()).hexdigest()[:10]
        fdefs = []
        traced = self.trace(self.tf, rnn, node)
        for f in _library_of(self.tf, traced):
            fdefs.append(type(f)())
            fdefs[-1].CopyFrom(f)
        main = fdefs[0]
        what = "pack" if rnn.shape is None else rnn.shape.cell
        renamed = {main.signature.name: self._unique(f"{PREFIX}{rnn.op}_{what}_{digest}")}
        for f in fdefs[1:]:
            renamed[f.signature.name] = self._unique(f"{PREFIX}{digest}_{f.signature.name.strip('_')}")
        for f in fdefs:
            f.signature.name = renamed[f.signature.name]
            f.attr.pop("_construction_context", None)
            for ref in _func_attrs(f):
                ref.name = renamed.get(ref.name, ref.name)
        # the op's output names, so node:output_h:0 (in functions) and node:1 (in graphs) keep their meaning
        names = OUTPUTS[rnn.op]
        if len(main.signature.output_arg) != len(names):
            raise AssertionError(f"{main.signature.name}: {len(main.signature.output_arg)} outputs, {rnn.op} has "
                                 f"{len(names)}")
        old = [a.name for a in main.signature.output_arg]
        rets = {k: main.ret[k] for k in old}
        for arg, new in zip(main.signature.output_arg, names):
            arg.name = new
        main.ClearField("ret")
        for o, new in zip(old, names):
            main.ret[new] = rets[o]
        self.functions.extend(fdefs)
        self.made[key] = main.signature.name
        return main.signature.name


def _replace(node, name: str) -> None:
    node.op = name
    for key in [k for k in node.attr if not k.startswith("_")]:
        del node.attr[key]
    if "GPU" in node.device.upper():
        node.device = ""


def rewrite_graph_def(tf, graph_def, rnns, trace=equations, key=signature) -> int:
    """Replace, in ``graph_def`` (changed in place), every node of ``rnns``
    (:class:`gruconv.model.canonical.GraphRNN`, by function and name) by a call of ``trace``'s function
    (:class:`Replacements`, shared by the nodes of one ``key``); returns how many.  A node the reader listed that is not there is an
    :class:`InputError` (the file changed under us)."""
    wanted = {(r.function, r.name): r for r in rnns}
    seen = set()
    reps = Replacements(tf, {f.signature.name for f in graph_def.library.function}, trace, key)
    for n in graph_def.node:
        r = wanted.get((None, n.name))
        if r is not None and n.op == r.op:
            _replace(n, reps.name_for(r, n))
            seen.add((None, n.name))
    for f in graph_def.library.function:
        for n in f.node_def:
            r = wanted.get((f.signature.name, n.name))
            if r is not None and n.op == r.op:
                _replace(n, reps.name_for(r, n))
                seen.add((f.signature.name, n.name))
    missing = [f"{name!r}" for key, name in ((k, k[1]) for k in wanted) if key not in seen]
    if missing:
        raise InputError(f"cuDNN node(s) {', '.join(missing)} not found where the graph was read; the file changed "
                         "while converting")
    for f in reps.functions:
        graph_def.library.function.add().CopyFrom(f)
    return len(seen)


def cudnn_ops_left(graph_defs, op_lists=(), keep=()) -> list:
    """``where: op`` for every ``CudnnRNN*`` op still named in the graphs (nodes, function bodies) or in
    the op lists (a MetaGraphDef's ``stripped_op_list``): the check every output passes.  ``keep``: the library
    functions left as they are (tf.keras GPU-only variants with a CPU twin, :attr:`gruconv.model.canonical.TfGraph.twinned`:
    TensorFlow runs the twin on a CPU), whose ops the op lists may name."""
    left, kept = [], set()
    for g in graph_defs:
        left += [f"graph: {n.name} ({n.op})" for n in g.node if n.op.startswith(CUDNN_PREFIX)]
        for f in g.library.function:
            ops = [n for n in f.node_def if n.op.startswith(CUDNN_PREFIX)]
            if f.signature.name in keep:
                kept |= {n.op for n in ops}
                continue
            left += [f"function {f.signature.name}: {n.name} ({n.op})" for n in ops]
    for ops in op_lists:
        left += [f"stripped_op_list: {o.name}" for o in ops.op if o.name.startswith(CUDNN_PREFIX) and o.name not in kept]
    return left


def tensorflow():
    from .runtime import tensorflow

    return tensorflow("writing a SavedModel")


def _parse(tf, graph, data: bytes):
    """The input's proto (TensorFlow's classes); a file TensorFlow cannot parse is one line."""
    from google.protobuf import message, text_format
    from tensorflow.core.framework import graph_pb2
    from tensorflow.core.protobuf import saved_model_pb2

    from ..errors import InputError

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
    from ..errors import OutputError

    path = graph.path
    left = cudnn_ops_left(graph_defs, op_lists, keep=graph.twinned)
    if left:
        raise OutputError(f"the rewritten graph still names cuDNN ops ({'; '.join(left[:3])}); nothing written",
                          path=path)


def _saved_model(tf, graph, proto, out: Path, maker) -> None:
    from tensorflow.python.framework import meta_graph

    for i, mg in enumerate(proto.meta_graphs):
        rewrite_graph_def(tf, mg.graph_def, [r for r in graph.rnns if r.graph == i], *maker)
        if mg.HasField("meta_info_def"):
            mg.meta_info_def.stripped_op_list.CopyFrom(meta_graph.stripped_op_list_for_graph(mg.graph_def))
    _check_clean([m.graph_def for m in proto.meta_graphs],
                 [m.meta_info_def.stripped_op_list for m in proto.meta_graphs], graph)
    # deterministic: protobuf writes map fields (attrs, signatures, function return maps) in hash order otherwise,
    # and two runs of one conversion wrote different bytes (measured on keras3_export; tf.saved_model.save
    # serializes deterministically too, tensorflow/python/saved_model/save.py)
    (out / SAVED_MODEL_PB).write_bytes(proto.SerializeToString(deterministic=True))
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

    from .runtime import why

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


def written(graph, out: Path, shown: Path) -> None:
    """The ``saved-model`` writer's work in its child process (:func:`gruconv.tf.bounded.run`): ``graph``
    rewritten into ``out`` with the standard-op equations, then served on the CPU
    (:func:`gruconv.tf.served.serves_on_cpu`; a failure is said of ``shown``, the output's final path)."""
    from .served import serves_on_cpu

    rewritten(graph, out)
    serves_on_cpu(out, shown=shown)
