"""Reference runs of the ORIGINAL parameters: :mod:`.oracle` (float64 NumPy, any machine) and the real
cuDNN library through its C API (:mod:`.cudnn_lib`, :mod:`.cudnn_rnn`)."""
