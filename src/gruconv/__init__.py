"""gruconv: cuDNN-only GRU/LSTM models (TF1 cudnn_rnn and TF2 checkpoints, Keras CuDNNGRU/CuDNNLSTM HDF5, tf_keras .keras and SavedModels, graphs holding CudnnRNN ops) to Keras 3, safetensors and ONNX, and graphs holding cuDNN ops to SavedModels that serve on a CPU.

The Python API mirrors the CLI: :func:`gruconv.api.inspect`,
:func:`gruconv.api.convert`, :func:`gruconv.verify.verify`.
Importing this package imports neither TensorFlow nor Keras.
"""

from ._version import __version__

__all__ = ["__version__"]
