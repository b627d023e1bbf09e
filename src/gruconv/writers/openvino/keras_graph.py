"""The TensorFlow graph of a Keras 3 model with its GRU/LSTM layers as cuDNN ops (``CudnnRNNV3``): the one
Keras/TensorFlow call of the ``openvino`` writer, kept apart so it can move under the framework boundary whole.

Why cuDNN ops: gruconv's whole-graph ONNX writer (:mod:`gruconv.writers.onnx.tfgraph`: tf2onnx with gruconv's
own ``CudnnRNN*`` handlers) turns each such node into one ONNX ``GRU(linear_before_reset=1)`` / ``LSTM`` per
layer, which OpenVINO's ONNX frontend reads as ``GRUSequence(linear_before_reset=True)`` / ``LSTMSequence``;
the same model exported as Keras traces it on a CPU (a ``while`` loop) becomes ``Loop`` in OpenVINO, never the
native op (measured, :mod:`.ir`).

How: Keras 3's TensorFlow backend traces ``CudnnRNNV3`` whenever ``_is_gpu_available()`` is true at trace time
(``keras/src/backend/tensorflow/rnn.py``, ``gru``/``lstm`` -> ``_cudnn_gru``/``_cudnn_lstm``; ``params`` is
computed in the graph from the layer's variables, ``_standardize_cudnn_weights``, and folds to one constant in
tf2onnx's loader).  Tracing builds the graph only: no cuDNN kernel runs, so it works on a CPU machine
(``shared/DESIGN.md``, "Graphs that hold cuDNN ops").  The module is looked up in ``sys.modules`` (the package
attribute ``rnn`` is a function, not the module).  Where Keras would not take its cuDNN path anyway (an
activation other than tanh/sigmoid, ``reset_after=False``, unroll...), the layer is traced as a loop and the
writer's op check refuses the IR.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

#: The Keras 3 module whose ``_is_gpu_available`` decides the traced path.
RNN_MODULE = "keras.src.backend.tensorflow.rnn"


@contextlib.contextmanager
def _cudnn_path():
    from ...errors import UnsupportedError

    module = sys.modules.get(RNN_MODULE)
    if module is None or not hasattr(module, "_is_gpu_available"):
        raise UnsupportedError("the OpenVINO IR of a full Keras model needs Keras 3 on the TensorFlow backend "
                               f"(its {RNN_MODULE}._is_gpu_available was not found)")
    real = module._is_gpu_available
    module._is_gpu_available = lambda: True
    try:
        yield
    finally:
        module._is_gpu_available = real


def export_with_cudnn_ops(model, directory: Path) -> list:
    """``model`` (Keras 3, TensorFlow backend) as a SavedModel in the new directory ``directory``, its recurrent
    layers traced as ``CudnnRNNV3``; returns the model's input names (the signature's, in order)."""
    from ...errors import UnsupportedError

    with _cudnn_path():
        try:
            model.export(str(directory), format="tf_saved_model", verbose=False)
        except Exception as e:  # noqa: BLE001 - Keras/TensorFlow's export, at its call: one line
            raise UnsupportedError(f"Keras could not export the converted model as a TensorFlow graph "
                                   f"({type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''})") from None
    return [t.name for t in model.inputs]
