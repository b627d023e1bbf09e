"""The ``saved-model`` writer: a TensorFlow graph holding cuDNN ops as a SavedModel that serves on a CPU
(and still on a GPU), same signatures, names, dtypes and shapes.

Input: a document of content ``tf-graph`` (:class:`gruconv.model.canonical.TfGraph`: a SavedModel or a
frozen ``GraphDef`` and its cuDNN nodes, each with its :class:`~gruconv.model.canonical.StackShape`).

How it is built (:mod:`gruconv.tf.rewrite`, the TensorFlow side's; this module runs no TensorFlow itself):

* A SavedModel: its MetaGraphDefs are rewritten (:mod:`gruconv.tf.rewrite`: each cuDNN
  node calls a generated function of standard ops, :mod:`gruconv.tf.equations`), written
  as ``saved_model.pb``; its ``variables/`` and ``assets/`` are copied byte for byte and its fingerprint is
  made again for the new graph (``tensorflow/python/saved_model/fingerprinting_utils.py``).
* A frozen GraphDef has no signatures: the output has one, ``serving_default`` (tag ``serve``), whose
  inputs are its ``Placeholder``s and whose outputs are the nodes nothing consumes, each keyed by its
  node name (``name``, or ``name_K`` for its output K > 0 of several), written by TensorFlow's own
  ``tf.compat.v1.saved_model.Builder``.

Checked before it is placed (the output contract: exit 0 only for an output proven loadable): no
``CudnnRNN*`` op anywhere in it (graph, every library function, ``stripped_op_list``), and
``tf.saved_model.load`` opens it and every signature runs on the CPU (:func:`gruconv.tf.served.serves_on_cpu`:
:func:`gruconv.tf.runtime.probe_input` of its input specs, every unknown dimension at each of ``PROBE_SIZES`` in turn).  The rewrite and the serve check
run in a child process within the graph's budget (:mod:`gruconv.tf.bounded`).  The output is a directory written
as one piece (:meth:`gruconv.files.outputs.Outputs.tree`).  TensorFlow is needed (the ``tensorflow`` extra).
"""

from __future__ import annotations

from pathlib import Path

FORMAT = "saved-model"
#: A directory, named as given.
SUFFIX = ""
#: No name ending selects it: it is the natural output of a ``tf-graph`` input (an output path without
#: a model suffix), or ``--format saved-model``.
CLAIMS = ()
KINDS = ("tf-graph",)
WRITES = "graph"
MANY = False
NEEDS_ARCHITECTURE = False
EVERY_MODEL = False


def options(kind: str) -> frozenset:
    """No option changes what it writes (the graph's signatures are its interface)."""
    return frozenset()


def write(document, target, options) -> dict:
    """Write ``document.tf_graph`` as a SavedModel into the empty directory ``target.tmp``: rewritten and
    served in a child process within the graph's budget (a graph that loops or allocates without end is one
    line, exit 3; :mod:`gruconv.tf.bounded`)."""
    from ...tf.bounded import run
    from ...tf.rewrite import written

    graph = document.tf_graph
    run(written, graph, Path(target.tmp), Path(target.path), budget=graph.budget,
        path=Path(document.source))
    return {}


def node_runner(rnn, converted, params):
    """One cuDNN node's replacement run alone (:func:`gruconv.tf.node_runner.runner`: the function ``converted``
    calls for it, or traced as :func:`write` traces it), on ``params``: verify's per-node subject.  Runs gruconv's
    generated function, not the user's graph."""
    from ...model.cudnn_ops import WITH_LENGTHS
    from ...tf.node_runner import runner
    from ..runner import StackRunner

    run = runner(rnn, converted)
    run.params = params
    return StackRunner(rnn.name, rnn.shape, run, mask_input=rnn.op in WITH_LENGTHS,
                       engine=lambda math: "TensorFlow on the CPU (the node's replacement function)")


def load(path, rebuild):
    """Not a Keras model: ``verify`` of a converted SavedModel is not implemented (one line)."""
    from ...errors import UnsupportedError

    raise UnsupportedError("verify of a converted SavedModel is not implemented yet; it was checked to load and "
                           "serve on a CPU when written (gruconv convert)", path=path)
