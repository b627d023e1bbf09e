"""TensorFlow's cuDNN RNN ops (``CudnnRNN*``): their names, inputs, outputs and attrs with defaults.

One table for the graph reader (``readers/tfgraph``) and both graph writers (``writers/onnx/tfgraph.py``,
``writers/saved_model``), which may not import each other.  Every fact is TensorFlow's op registry,
``tensorflow/core/ops/cudnn_rnn_ops.cc`` (TensorFlow 2.21; read back with
``tensorflow.python.framework.op_def_registry.get``, as ``tests/model/test_cudnn_ops.py`` does):

* the ops (:data:`CUDNN_OPS`): ``CudnnRNN``/``V2``/``V3`` run the RNN, ``CudnnRNNBackprop*`` its gradient,
  ``CudnnRNNCanonicalToParams*`` / ``CudnnRNNParamsToCanonical*`` / ``CudnnRNNParamsSize`` convert or size
  the opaque buffer.  TensorFlow registers kernels for all of them on the GPU only
  (``tensorflow/core/kernels/cudnn_rnn_ops.cc``), so a graph that runs one cannot run on a CPU: "No
  OpKernel was registered to support Op 'CudnnRNNV3'";
* inputs (:data:`INPUTS`, in the op's order; ``sequence_lengths`` only for :data:`WITH_LENGTHS`) and
  outputs (:data:`OUTPUTS`; a GRU's ``output_c`` is a scalar, ``host_reserved`` is ``int8``);
* an attr left at its default is not written into the NodeDef (seen: Keras 3's export writes only
  ``rnn_mode: "gru"`` and ``time_major``; an LSTM's node has no ``rnn_mode`` at all), so whoever reads a
  node's attrs reads :data:`ATTR_DEFAULTS` for the missing ones; ``time_major`` exists on
  :data:`TIME_MAJOR_OPS` only, ``num_proj`` on V3 and ``CanonicalToParamsV2``;
* ``T``, the dtype: ``{bfloat16, float16, float32, float64}`` in TensorFlow 2.21; :data:`DTYPES` are the
  three gruconv converts, as ``DataType`` numbers (``tensorflow/core/framework/types.proto``);
* ``input_mode`` (:data:`INPUT_MODES`): ``auto_select`` is ``skip_input`` when the input size equals the
  units, else ``linear_input`` (the op's documentation; ``ToRNNInputMode``).
"""

from __future__ import annotations

#: op -> what it does; every op TensorFlow 2.21 registers under the ``CudnnRNN`` prefix (GPU kernels only).
CUDNN_OPS = {
    "CudnnRNN": "runs the RNN",
    "CudnnRNNV2": "runs the RNN",
    "CudnnRNNV3": "runs the RNN",
    "CudnnRNNBackprop": "the RNN's gradient",
    "CudnnRNNBackpropV2": "the RNN's gradient",
    "CudnnRNNBackpropV3": "the RNN's gradient",
    "CudnnRNNCanonicalToParams": "packs weights into the opaque buffer",
    "CudnnRNNCanonicalToParamsV2": "packs weights into the opaque buffer",
    "CudnnRNNParamsToCanonical": "unpacks the opaque buffer",
    "CudnnRNNParamsToCanonicalV2": "unpacks the opaque buffer",
    "CudnnRNNParamsSize": "sizes the opaque buffer",
}
#: What every cuDNN op's name starts with.
PREFIX = "CudnnRNN"
#: The ops that run the RNN, in version order.
RNN_OPS = tuple(op for op, does in CUDNN_OPS.items() if does == "runs the RNN")
#: The ops that pack canonical weights and biases into the opaque buffer.
PACKING_OPS = frozenset(op for op, does in CUDNN_OPS.items() if does == "packs weights into the opaque buffer")

#: The RNN ops' inputs, in order; the last only for :data:`WITH_LENGTHS`.
INPUTS = ("input", "input_h", "input_c", "params", "sequence_lengths")
#: Ops that take ``sequence_lengths`` (their 5th input).
WITH_LENGTHS = frozenset({"CudnnRNNV3"})
#: The op's output names, in the op's order (``output_c`` for a GRU is a scalar; ``host_reserved`` is ``int8``).
OUTPUTS = {
    "CudnnRNN": ("output", "output_h", "output_c", "reserve_space"),
    "CudnnRNNV2": ("output", "output_h", "output_c", "reserve_space", "host_reserved"),
    "CudnnRNNV3": ("output", "output_h", "output_c", "reserve_space", "host_reserved"),
    "CudnnRNNCanonicalToParams": ("params",),
    "CudnnRNNCanonicalToParamsV2": ("params",),
}

#: The op registry's default of each attr read here (a NodeDef leaves out an attr at its default).
ATTR_DEFAULTS = {"rnn_mode": "lstm", "input_mode": "linear_input", "direction": "unidirectional",
                 "time_major": True, "num_proj": 0, "dropout": 0.0, "is_training": True}
#: The string attrs that configure the RNN (every cuDNN op has them).
SETTINGS = ("rnn_mode", "direction", "input_mode")
#: Ops with a ``time_major`` attr.
TIME_MAJOR_OPS = frozenset({"CudnnRNNV3", "CudnnRNNBackpropV3"})
#: ``direction`` attr -> number of directions.
DIRECTIONS = {"unidirectional": 1, "bidirectional": 2}
#: ``rnn_mode`` attr -> gruconv's cell (:data:`gruconv.model.canonical.CELLS`); ``rnn_tanh``/``rnn_relu``
#: are missing: no cell of gruconv's.
CELL_OF_MODE = {"gru": "gru", "lstm": "lstm"}
#: ``input_mode`` attr -> :data:`gruconv.model.canonical.INPUT_MODES` (``auto_select``: decided by sizes).
INPUT_MODES = {"linear_input": "linear", "skip_input": "skip", "auto_select": None}
#: ``DataType`` numbers of the ``T`` dtypes gruconv converts (not ``bfloat16``, 14).
DTYPES = {1: "float32", 2: "float64", 19: "float16"}
