"""The TensorFlow side, as :mod:`gruconv.keras3` is the Keras side: the package that imports TensorFlow (and
tf2onnx) for the graph family (``docs/architecture.md``).

* :mod:`gruconv.tf.runtime` -- TensorFlow imported quietly (its own helper, not Keras's), :func:`~.runtime.why`
  (the informative line of a TensorFlow error), and the one probe-input rule (``PROBE_SIZES``, ``probe_input``).
* :mod:`gruconv.tf.bounded` -- every run of a user's graph (a writer's serve check, the evaluation of a
  graph's params, verify's reference, tf2onnx's constant folding) in a child process with a wall-time budget
  and a memory bound (``--graph-timeout``, ``--graph-memory``): a graph that loops forever, allocates without
  end or crashes TensorFlow is one line, exit 3, and SIGTERM/SIGINT stop gruconv within a second, the child
  included.  A new graph writer (TFLite, OpenVINO) runs its converter through :func:`~.bounded.run` too.

This ``__init__`` defines nothing: importing a submodule runs it, and nothing imports it for a name.
"""
