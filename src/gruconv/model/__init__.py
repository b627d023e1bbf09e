"""The shared vocabulary: the canonical model of a cuDNN GRU/LSTM stack and the gate layouts of each
framework (cuDNN's opaque buffer, Keras's kernels, the torch/ONNX targets' blocks).  NumPy only: no I/O,
no framework, imported by every other package and importing none of them."""
