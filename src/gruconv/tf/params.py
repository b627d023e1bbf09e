"""Each cuDNN node's ``params`` as the graph computes them: one run of the graph with recording nodes.

Why a run: a node's ``params`` is a tensor of the graph (a ``Const``, a variable read, a buffer Keras 3's
TensorFlow backend or ``CudnnRNNCanonicalToParams`` computes from the variables), so its values are what
TensorFlow computes when the graph runs; the reader reads the graph without TensorFlow.

How: the graph rewritten (:func:`gruconv.tf.rewrite.rewritten`) with each cuDNN node a call of a *recording*
function -- the node's ``params`` input handed to a Python callback (``tf.py_function``) that keeps a copy and
passes it on unchanged, then the standard-op equations the ``saved-model`` writer writes
(:mod:`gruconv.tf.equations`), so the graph runs on past the node; a packing node is its equations alone (the
node it feeds records the buffer) -- then every signature run once on the CPU on the probe inputs
(:func:`gruconv.tf.runtime.first_run`).  The buffer recorded is the node's input, computed upstream of the
node: what replaces the node does not change it.  (Before this module, the recording nodes were verify's oracle
nodes: the same buffers, and convert no longer depends on the verifier that checks it.)

Every run is the user's graph: :func:`evaluated` is the work of a child process of :func:`gruconv.tf.bounded.run`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np


def _recording(record):
    """A :class:`gruconv.tf.rewrite.Replacements` ``trace``: the node's equations, its ``params`` recorded by
    ``record(rnn, array)`` on the way in."""
    from ..model.cudnn_ops import INPUTS
    from .equations import forward, input_specs, op_outputs
    from .rewrite import equations

    def trace(tf, rnn, node):
        if rnn.shape is None:  # a packing node: the node it feeds records the buffer
            return equations(tf, rnn, node)
        dtype = tf.as_dtype(rnn.shape.dtype)
        at = INPUTS.index("params")

        def keep(params):
            record(rnn, np.array(params.numpy()))
            return params

        def run(*args):
            args = list(args)
            params = tf.py_function(keep, [args[at]], Tout=dtype)
            params.set_shape(args[at].shape)
            args[at] = params
            y, h, c = forward(tf, rnn.shape, rnn.time_major, *args[:4], args[4] if len(args) > 4 else None)
            return op_outputs(tf, rnn.op, dtype, y, h, c)

        return tf.function(run, input_signature=input_specs(tf, rnn.op, dtype),
                           autograph=False).get_concrete_function()

    return trace


def _per_node(rnn, node=None) -> tuple:
    """Every node its own function: its callback records for it alone."""
    from .rewrite import signature

    return (rnn.graph, rnn.function, rnn.name) + signature(rnn, node)


def node_params(graph) -> dict:
    """``{(graph index, function, node name): params}``: the opaque buffer each cuDNN RNN node of ``graph``
    (:class:`gruconv.model.canonical.TfGraph`) computes with, as the graph computes it (module docstring).
    Nodes no signature reaches are missing from the answer.  Runs the graph in this process: call it through
    :func:`evaluated` in a bounded child."""
    from ..errors import InputError
    from ..files.outputs import scratch_dir
    from .rewrite import rewritten
    from .runtime import first_run, probe_feed, tensorflow, why

    tf = tensorflow("evaluating a graph's cuDNN params")
    found: dict = {}

    def record(rnn, params):
        found.setdefault((rnn.graph, rnn.function, rnn.name), params)

    with scratch_dir(prefix="gruconv-graph-params-") as tmp:
        out = Path(tmp) / "original"
        out.mkdir()
        rewritten(graph, out, (_recording(record), _per_node))
        try:
            with tf.device("/CPU:0"):
                loaded = tf.saved_model.load(str(out))
        except Exception as e:  # noqa: BLE001 - TensorFlow's loader on the user's functions: make fuzz found
            # KeyError and TypeError from its function-def import of a damaged graph, not only OpError/ValueError
            if isinstance(e, MemoryError):
                raise
            raise InputError(f"is a {graph.kind} TensorFlow cannot load ({type(e).__name__}: {why(e)})",
                             path=graph.path) from None
        for name in sorted(loaded.signatures.keys()):
            try:  # shapes that do not fit, or a graph that fails here: the next size; out of memory goes up
                first_run(tf, loaded.signatures[name], probe_feed(tf), retry=tf.errors.OpError,
                          never=tf.errors.ResourceExhaustedError)
            except tf.errors.OpError:
                continue  # no size runs this signature: its nodes are not reached through it
        del loaded
    return found


def evaluated(graph, source: Path) -> dict:
    """The child process's work (:func:`gruconv.tf.bounded.run`): :func:`node_params`, and a one-line refusal
    when no node is reached (said here, in the child: a run that failed for memory is said so by the parent)."""
    from ..errors import UnsupportedError

    params = node_params(graph)
    reached = {r.name for r in graph.rnns if r.shape is not None and (r.graph, r.function, r.name) in params}
    if not reached:
        unreached = list(dict.fromkeys(r.name for r in graph.rnns if r.shape is not None))
        raise UnsupportedError(f"no cuDNN node of the graph is reached when its signatures run on probe inputs "
                               f"({', '.join(repr(n) for n in unreached[:3])}), so no params can be evaluated; convert "
                               "the whole graph instead (a SavedModel directory, or OUTPUT.onnx)",
                               path=source)
    return params
