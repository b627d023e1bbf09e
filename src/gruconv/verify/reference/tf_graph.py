"""The original graph holding cuDNN ops, run by TensorFlow on the CPU with each cuDNN node's outputs computed
by the float64 oracle: verify's end-to-end reference for a ``tf-graph`` input.

Why: no CPU kernel exists for a ``CudnnRNN*`` op, so the original graph cannot run here as it is, and
comparing the two conversions with each other would leave an error they share unseen (the reading of a
node's attributes, its sizes).  So the original graph runs with only its cuDNN nodes swapped out, each for a
Python callback (``EagerPyFunc``, TensorFlow's ``tf.py_function``) that takes the node's own inputs as the
graph computes them -- ``input``, ``input_h``, ``input_c``, ``params`` (a ``Const``, a variable read, a buffer
packed by the graph from Keras 3's or TF1's variables: whatever the graph does) and ``sequence_lengths`` --
and returns what cuDNN computes:

* ``params`` unpacked by :func:`gruconv.model.cudnn_layout.unpack` (cuDNN 9.19's layout, checked against the
  real library: ``shared/cudnn-golden``) and run by :func:`.oracle.run_stack` in float64, rounded once to the
  node's dtype;
* the op's tensor layouts (``tensorflow/core/ops/cudnn_rnn_ops.cc``, ``tensorflow/core/kernels/
  cudnn_rnn_ops.cc`` ``ExtractForwardInput``): ``[T, B, I]`` and states ``[L*D, B, H]``; a ``CudnnRNNV3``
  with ``time_major=false`` takes ``[B, T, I]`` and states whose *memory* is handed to cuDNN unchanged as
  ``(L*D, B, H)`` (a reshape, not a transpose; ``fixtures/graphs_golden/*_bt`` against real cuDNN); a GRU's
  ``output_c`` is a scalar; ``reserve_space``/``host_reserved`` are empty (unused at inference);
* a ``CudnnRNNCanonicalToParams*`` node (TF1's packing of per-gate variables, no CPU kernel either) by the
  op's definition: its weights then its biases, each flattened, back to back
  (``tensorflow/core/kernels/cudnn_rnn_ops.cc``; ``gru_2l_bidir_canonical_savedmodel`` checks it).

Each callback is configured by the node as TensorFlow parsed it (its attrs, or the op registry's defaults)
and by the sizes of the tensors it is given, not by gruconv's reading of the graph: an attr or size the
reader got wrong is not shared with the reference.

Nothing else of the graph is touched: its signatures, every other op, its variables (read from the input's
own ``variables/``), run by TensorFlow.  The callbacks are gruconv's code, not the graph's; the rewritten
graph exists only in a scratch directory for the run, and only in this process (a callback is found by a
token of this process's registry), so it is never written as an output.

What it does not give: cuDNN's own rounding (the oracle is float64; on a GPU the node would run cuDNN's
float32 kernels) -- the verdict's floor and tolerance cover that difference, as for every layer check
against the oracle.  A GPU machine here has no TensorFlow, so real cuDNN is not run inside the graph.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

#: The signature run (the one the whole-graph ONNX converts).
from ...model.saved_model import SIGNATURE  # noqa: E402


#: A node's settings as its attrs name them (``tensorflow/core/ops/cudnn_rnn_ops.cc``), read from the NodeDef
#: TensorFlow parsed, each attr it leaves out at TensorFlow's own op-registry default.
SETTINGS = ("rnn_mode", "direction", "input_mode", "time_major")  # cudnn_ops.SETTINGS and time_major


def settings(tf, node) -> dict:
    """``{attr: value}`` of :data:`SETTINGS` for ``node`` (a ``NodeDef``), by TensorFlow's op registry
    (:func:`gruconv.tf.runtime.op_attrs`): the value the node holds, else the op's default; an attr the op
    lacks (``time_major`` before V3) is left out.  Not the reader's reading: the reference must not share it
    with the conversions."""
    from ...tf.runtime import op_attrs

    return op_attrs(tf, node, SETTINGS)


def _shape(s: dict, x, h, params):
    """The stack's :class:`~gruconv.model.canonical.StackShape` from the node's settings and the sizes of its
    inputs at run time; a ``params`` of another size is an error (TensorFlow's op would refuse it too)."""
    from ...model.canonical import StackShape
    from ...model.cudnn_layout import params_size

    D = 2 if s["direction"] == "bidirectional" else 1
    time_major = s.get("time_major", True)
    LD, H = (h.shape[0], h.shape[2]) if time_major else (h.shape[1], h.shape[2])
    shape = StackShape(int(x.shape[2]), int(H), int(LD // D), D == 2,
                       "skip" if s["input_mode"] == "skip_input" else "linear", s["T"], s["rnn_mode"])
    if LD % D or params.size != params_size(shape):
        raise ValueError(f"params of {params.size} values do not fit {shape} ({LD} state rows)")
    return shape


def _node(s: dict):
    """``compute(input, input_h, input_c, params[, sequence_lengths]) -> (output, output_h, output_c)`` of a
    cuDNN node of settings ``s``, in NumPy (the op's layouts; module docstring)."""
    from ...model.canonical import RNNStack
    from ...model.cudnn_layout import unpack
    from .oracle import run_stack

    time_major = s.get("time_major", True)
    np_t = np.dtype(s["T"])

    def compute(x, h, c, params, lengths=None):
        x, h, c, params = (np.asarray(t.numpy()) for t in (x, h, c, params))
        lengths = None if lengths is None else np.asarray(lengths.numpy())
        shape = _shape(s, x, h, params)
        LD, H = shape.num_pseudo_layers, shape.units
        lstm = "c" in shape.cell_spec.states
        if not time_major:
            B = x.shape[0]
            x, h = x.transpose(1, 0, 2), h.reshape(LD, B, H)
            c = c.reshape(LD, B, H) if lstm else c
        B = x.shape[1]
        y, hy, cy = run_stack(RNNStack("node", shape, unpack(params, shape)), x, h, seq_lengths=lengths,
                              c0=c if lstm else None)
        if not time_major:
            y, hy = y.transpose(1, 0, 2), hy.reshape(B, LD, H)
            cy = cy.reshape(B, LD, H) if lstm else cy
        cy = cy if lstm else np.zeros((), np.float64)
        return y.astype(np_t), hy.astype(np_t), cy.astype(np_t)

    return compute


def _pack(num_layers, num_units, input_size, *tensors):
    """``CudnnRNNCanonicalToParams*``: ``(num_layers, num_units, input_size, weights..., biases...) -> params``."""
    return np.concatenate([np.asarray(t.numpy()).reshape(-1) for t in tensors])


def key(rnn, node) -> tuple:
    """The nodes that share one reference function: same op, same attrs and inputs count."""
    attrs = tuple(sorted((k, v.SerializeToString(deterministic=True)) for k, v in node.attr.items()
                         if not k.startswith("_")))
    return node.op, attrs, len([i for i in node.input if not i.startswith("^")])


def trace(tf, rnn, node):
    """The concrete function standing for ``node`` in the reference graph: the op's inputs and outputs
    (:data:`gruconv.model.cudnn_ops.OUTPUTS`), its values from a ``tf.py_function`` callback
    configured by the NodeDef alone (:func:`settings`; sizes from the tensors at run time).  The callback
    stays registered while this process runs (TensorFlow's ``script_ops`` keeps a reference to it on the
    outermost graph)."""
    from ...model.cudnn_ops import PACKING_OPS
    from ...tf.equations import input_specs, op_outputs, packing_specs

    s = settings(tf, node)
    dtype = tf.as_dtype(s["T"])
    n_in = len([i for i in node.input if not i.startswith("^")])
    if node.op in PACKING_OPS:
        def packed(*args):
            return tf.py_function(_pack, list(args), Tout=dtype)

        specs = packing_specs(tf, dtype, n_in - 3, 0)  # weights then biases: one run of tensors
        return tf.function(packed, input_signature=specs, autograph=False).get_concrete_function()
    compute = _node(s)

    def run(*args):
        y, h, c = tf.py_function(compute, list(args), Tout=[dtype, dtype, dtype])
        return op_outputs(tf, node.op, dtype, y, h, c)

    specs = input_specs(tf, node.op, dtype)
    return tf.function(run, input_signature=specs, autograph=False).get_concrete_function()


def original(graph, out: Path) -> Path:
    """The original graph ``graph`` (:class:`gruconv.model.canonical.TfGraph`) with each cuDNN node computed by
    the oracle, as a SavedModel in the empty directory ``out`` (for :func:`tf.saved_model.load` in this
    process only): :func:`gruconv.tf.rewrite.rewritten` with this module's nodes, the rewrite the SavedModel
    output shares."""
    from ...tf.rewrite import rewritten

    Path(out).mkdir(exist_ok=True)
    rewritten(graph, out, (trace, key))
    return out
