"""The cuDNN RNN ops of a TensorFlow graph: which nodes, with which settings, and whether the graph runs
without them.

Facts, each from its source:

* The ops, their attrs and the op registry's defaults for the attrs a NodeDef leaves out:
  :mod:`gruconv.model.cudnn_ops` (``tensorflow/core/ops/cudnn_rnn_ops.cc``), shared with the writers.
* tf.keras 2.x's GRU/LSTM (TF 2.0-2.15; tf_keras ``layers/rnn/gru_lstm_utils.py``,
  ``_FUNCTION_API_NAME_ATTRIBUTE = "api_implements"``, ``_FUNCTION_DEVICE_ATTRIBUTE = "api_preferred_device"``)
  trace two functions per call, ``gpu_gru_with_fallback`` (``CudnnRNNV3``, preferred device ``GPU``) and
  ``standard_gru`` (a ``while`` loop, ``CPU``), with the same ``api_implements`` value; Grappler's
  implementation selector (``tensorflow/core/grappler/optimizers/implementation_selector.cc``) swaps in the
  function that matches the device the graph is placed on.  A cuDNN node in a GPU variant whose
  ``api_implements`` has a twin without cuDNN ops therefore never runs on a CPU: such a graph already
  serves there (:attr:`CudnnNode.cpu_twin`).  A ``CuDNNGRU``/``CuDNNLSTM`` layer, or Keras 3's TensorFlow
  backend tracing on a GPU (``keras/src/backend/tensorflow/rnn.py`` ``_cudnn_gru``), calls the op directly,
  with no twin.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Iterator, Optional

from ...model.cudnn_ops import ATTR_DEFAULTS, CUDNN_OPS, PACKING_OPS, PREFIX, RNN_OPS, SETTINGS, TIME_MAJOR_OPS
from ..protos import Message, tensor_shape

#: Bytes every cuDNN op name starts with: the sniff's cheap look for them in a file.
MARKER = PREFIX.encode()

#: tf.keras's function attrs (tf_keras ``layers/rnn/gru_lstm_utils.py``).
API_IMPLEMENTS, API_DEVICE = "api_implements", "api_preferred_device"


@dataclass(frozen=True)
class CudnnNode:
    """One cuDNN node: its op and name, ``where`` it is (``graph`` or ``function NAME``), the settings
    (``time_major`` None for an op without it) and, for a node in a tf.keras GPU-only variant function,
    the CPU twin that replaces it there (None: the node runs wherever the graph runs)."""

    op: str
    name: str
    where: str
    rnn_mode: str
    direction: str
    input_mode: str
    time_major: Optional[bool]
    cpu_twin: Optional[str] = None
    #: the data inputs, as the NodeDef names them (control inputs left out)
    inputs: tuple = ()
    #: the ``T`` attr (a ``DataType`` number; None: not given) and the other attrs refusals are decided by
    dtype: Optional[int] = None
    num_proj: int = 0
    dropout: float = 0.0
    is_training: bool = False
    #: a ``CudnnRNNCanonicalToParams*`` node's weight and bias counts (``num_params`` /
    #: ``num_params_weights``, ``num_params_biases``), else None
    packs: Optional[tuple] = None
    #: the node's own ``_output_shapes`` (each a tuple of dims, None unknown; None for an unknown rank)
    out_shapes: Optional[tuple] = None
    #: index of the SavedModel's MetaGraphDef holding it (0 for a GraphDef)
    graph: int = 0
    #: the stack's :class:`~gruconv.model.canonical.StackShape`, where :mod:`.sizes` determined it
    shape: object = None
    #: where ``params`` comes from, in words (``Const``, ``a variable``, ``computed in the graph (ConcatV2)``)
    params_from: Optional[str] = None
    #: why this node cannot be converted (one clause), or None
    problem: Optional[str] = None

    @property
    def function(self) -> Optional[str]:
        """The library function holding it, None for a node of the graph itself."""
        return self.where.removeprefix("function ") if self.where.startswith("function ") else None

    @property
    def runs_the_rnn(self) -> bool:
        return self.op in RNN_OPS

    def describe(self) -> str:
        """One line: ``CudnnRNNV3 'fw/CudnnRNNV3' (gru, unidirectional, linear_input, time_major=false) in ...``."""
        settings = [self.rnn_mode, self.direction, self.input_mode]
        if self.time_major is not None:
            settings.append(f"time_major={str(self.time_major).lower()}")
        twin = (f"; a GPU-only variant: on a CPU its twin {self.cpu_twin} runs instead"
                if self.cpu_twin else "")
        facts = ""
        if self.runs_the_rnn and not self.cpu_twin:
            facts = f": {self.shape.describe()}" if self.shape is not None else ""
            facts += f"; params {self.params_from}" if self.params_from else ""
            facts += f"; not convertible: {self.problem}" if self.problem else ""
        return f"{self.op} '{self.name}' ({', '.join(settings)}) in {self.where}{twin}{facts}"

    def to_dict(self) -> dict:
        return {"op": self.op, "name": self.name, "where": self.where, "rnn_mode": self.rnn_mode,
                "direction": self.direction, "input_mode": self.input_mode, "time_major": self.time_major,
                "cpu_twin": self.cpu_twin, "shape": None if self.shape is None else self.shape.to_dict(),
                "params_from": self.params_from, "problem": self.problem}


def _text(attr: Optional[Message]) -> Optional[str]:
    if attr is None:
        return None
    s = attr.get("s")
    return None if s is None else bytes(s).decode("utf-8", "replace")


_NODE_ATTRS = frozenset(SETTINGS) | {"time_major", "T", "num_proj", "dropout", "is_training", "_output_shapes",
                                          "num_params", "num_params_weights", "num_params_biases"}
_FUNCTION_ATTRS = frozenset({API_IMPLEMENTS, API_DEVICE})


def _node(node: Message, where: str) -> Optional[CudnnNode]:
    """The node as a :class:`CudnnNode`, or None for any other op (one pass; only its wanted attrs kept)."""
    if not node.may_hold(MARKER):
        return None
    op = name = ""
    attrs: dict = {}
    inputs: list = []
    for field, value in node.fields("name", "op", "input", "attr"):
        if field == "op":
            op = value
        elif field == "name":
            name = value
        elif field == "input":
            if not value.startswith("^"):
                inputs.append(value)
        elif (key := value.get("key", "")) in _NODE_ATTRS:
            attrs[key] = value.get("value")
    if op not in CUDNN_OPS:
        return None
    settings = {k: _text(attrs.get(k)) or ATTR_DEFAULTS[k] for k in SETTINGS}
    time_major = None
    if op in TIME_MAJOR_OPS:
        tm = attrs.get("time_major")
        time_major = ATTR_DEFAULTS["time_major"] if tm is None else bool(tm.get("b", False))
    scalar = lambda k, f, default: default if attrs.get(k) is None else attrs[k].get(f, default)  # noqa: E731
    shapes = attrs.get("_output_shapes")
    out_shapes = None if shapes is None or shapes.get("list") is None else \
        tuple(tensor_shape(t) for t in shapes.get("list").each("shape"))
    packs = None
    if op in PACKING_OPS:
        n = scalar("num_params", "i", None)
        w, b = scalar("num_params_weights", "i", n), scalar("num_params_biases", "i", n)
        packs = None if w is None or b is None else (w, b)
    return CudnnNode(op=op, name=name, where=where, time_major=time_major, inputs=tuple(inputs), packs=packs,
                     dtype=scalar("T", "type", None), num_proj=scalar("num_proj", "i", ATTR_DEFAULTS["num_proj"]),
                     dropout=scalar("dropout", "f", ATTR_DEFAULTS["dropout"]),
                     is_training=scalar("is_training", "b", ATTR_DEFAULTS["is_training"]), out_shapes=out_shapes,
                     **settings)


def _function(f: Message) -> tuple:
    """``(name, api_implements, api_preferred_device, [its cuDNN nodes, no twin yet], f)`` in one pass; the
    nodes of a function whose bytes never name a cuDNN op are not looked into."""
    walk = f.may_hold(MARKER)
    name, attrs, pending = "", {}, []
    for field, value in f.fields("signature", "attr", "node_def"):
        if field == "signature":
            name = value.get("name", "")
        elif field == "attr":
            key = value.get("key", "")
            if key in _FUNCTION_ATTRS:
                attrs[key] = value.get("value")
        elif walk and (n := _node(value, "")) is not None:
            pending.append(n)
    found = [dataclasses.replace(n, where=f"function {name}") for n in pending]
    return name, _text(attrs.get(API_IMPLEMENTS)), _text(attrs.get(API_DEVICE)), found, f


def _twins(functions: list) -> dict:
    """function name -> the name of its CPU twin, for every tf.keras GPU-only variant that has one: another
    function with the same ``api_implements``, another preferred device and no cuDNN op."""
    by_api: dict = {}
    for name, api, device, nodes, _ in functions:
        if api and not nodes and (device or "").upper() != "GPU":
            by_api.setdefault(api, name)
    return {name: by_api[api] for name, api, device, _, _ in functions
            if api and (device or "").upper() == "GPU" and api in by_api}


def keep_text(message: Message) -> bool:
    """For :func:`gruconv.readers.protos.parse_text`: every message is kept (a node's producers
    are looked up by name; only the :data:`~gruconv.readers.protos.SCHEMA` fields are)."""
    return True


def _sized(nodes: list, scope_nodes, arguments: dict, in_function: bool) -> list:
    """``nodes`` (one scope's) with their sizes determined from the scope's producers
    (:func:`gruconv.readers.tfgraph.sizes.determine`)."""
    from . import sizes

    refs = {sizes.reference(r, in_function)[0] for n in nodes if n.runs_the_rnn for r in n.inputs}
    known = dict(arguments)
    if refs - set(arguments):
        known.update(sizes.producers(scope_nodes(), refs - set(arguments)))

    def lookup(ref: str):
        name, pos = sizes.reference(ref, in_function)
        return known.get(name), pos

    return [sizes.determine(n, lookup) if n.runs_the_rnn else n for n in nodes]


def graph_nodes(graph: Message) -> Iterator[CudnnNode]:
    """Every cuDNN node of a GraphDef: its own nodes, then each library function's (a repeated
    ``library`` field merges, as protobuf merges a message field given twice), each RNN node with its
    sizes (:mod:`gruconv.readers.tfgraph.sizes`; a node with a CPU twin needs none)."""
    from .sizes import function_arguments

    functions = []  # only those that matter to the twin rule: with an api_implements attr or cuDNN nodes
    top = []
    for field, value in graph.fields("node", "library"):
        if field == "node":
            found = _node(value, "graph")
            if found is not None:
                top.append(found)
            continue
        for f in value.each("function"):
            fn = _function(f)
            if fn[1] or fn[3]:
                functions.append(fn)
    yield from _sized(top, lambda: graph.each("node"), {}, False)
    twins = _twins(functions)
    for name, _, _, nodes, f in functions:
        twin = twins.get(name)
        nodes = [dataclasses.replace(n, cpu_twin=twin) for n in nodes]
        yield from nodes if twin or not nodes else _sized(nodes, lambda f=f: f.each("node_def"),
                                                          function_arguments(f), True)


def serves_on_cpu(nodes: list) -> bool:
    """Whether a graph holding ``nodes`` runs on a CPU: every cuDNN node has a CPU twin."""
    return bool(nodes) and all(n.cpu_twin for n in nodes)
