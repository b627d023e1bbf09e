"""The canonical model of a cuDNN RNN stack: the one vocabulary every format shares.

Readers produce :class:`RNNStack`; writers and the verifier consume it.  It
knows nothing of any file format or framework.

The cell table (:data:`CELLS`) is the only place that says how many gates a
cell has, what they are called and which states it carries; every other
module asks ``shape.cell_spec`` instead of writing ``3`` or ``4``.

Orientation and gate order (chosen to be cuDNN's own, so that the golden
files in ``shared/cudnn-golden`` compare without any transform):

* gate index ``g`` is cuDNN's (``linLayerID`` g for the input side,
  g + G for the recurrent side, G the cell's gate count): GRU 0 = reset
  ``r``, 1 = update ``z``, 2 = candidate ``h``; LSTM 0 = input ``i``,
  1 = forget ``f``, 2 = new memory ``c'``, 3 = output ``o``;
* a matrix maps a column vector: ``W[g]`` has shape ``(units, in)`` and the
  gate pre-activation is ``W[g] @ x`` (cuDNN's ``[H, in]`` row-major matrix);
* two bias vectors per gate, input-side ``bW[g]`` and recurrent-side ``bR[g]``.

The GRU equations (``shared/DESIGN.md``, reproduced to 1e-15 by
:mod:`gruconv.verify.reference.oracle` on every golden file)::

    r  = σ(W[0] x + bW[0] + R[0] h + bR[0])
    z  = σ(W[1] x + bW[1] + R[1] h + bR[1])
    h~ = tanh(W[2] x + bW[2] + r ⊙ (R[2] h + bR[2]))
    h' = (1 − z) ⊙ h~ + z ⊙ h

Pseudo-layers are ordered as cuDNN orders them: layer 0 forward, layer 0
backward (bidirectional only), layer 1 forward, ...  In skip-input mode
layer 0 has no input matrices (``input_weights is None``): its input is
added as is, which equals an identity input matrix.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Optional, Protocol

import numpy as np

from ..errors import InputError



@dataclass(frozen=True)
class Cell:
    """One row of the cell table: what a cuDNN cell type is made of.

    ``gates``: gate names in cuDNN's ``linLayerID`` order (input side
    0..G-1, recurrent side G..2G-1, one bias vector per linear layer);
    ``states``: the recurrent states it carries, in cuDNN's argument order
    (``hx``/``hy``, then ``cx``/``cy``).  Evidence: cuDNN's
    ``cudnnGetRNNWeightParams`` documentation for ``CUDNN_GRU`` /
    ``CUDNN_LSTM``; the GRU row is proven by ``shared/cudnn-golden``.
    ``shape_prefix``: what :meth:`StackShape.describe` says before the sizes (the GRU, gruconv's
    first cell, says nothing: its messages predate the others).
    """

    name: str
    title: str
    gates: tuple
    states: tuple
    shape_prefix: str = ""

    @property
    def num_gates(self) -> int:
        return len(self.gates)

    @property
    def num_linear_layers(self) -> int:
        return 2 * len(self.gates)


#: The cell table.  A new cell is a row here plus its equations in the oracle.
CELLS = {
    "gru": Cell("gru", "GRU", ("reset", "update", "candidate"), ("h",)),
    "lstm": Cell("lstm", "LSTM", ("input", "forget", "cell", "output"), ("h", "c"), shape_prefix="LSTM, "),
}
INPUT_MODES = ("linear", "skip")
DTYPES = ("float16", "float32", "float64")


@dataclass(frozen=True)
class StackShape:
    """Shape facts of a cuDNN RNN stack (what ``cudnnSetRNNDescriptor_v8`` takes)."""

    input_size: int
    units: int
    num_layers: int = 1
    bidirectional: bool = False
    input_mode: str = "linear"
    dtype: str = "float32"
    cell: str = "gru"

    def __post_init__(self) -> None:
        for name in ("input_size", "units", "num_layers"):
            value = getattr(self, name)
            if not isinstance(value, (int, np.integer)) or value < 1:
                raise InputError(f"{name} must be a positive integer, got {value!r}")
        if self.input_mode not in INPUT_MODES:
            raise InputError(f"input_mode must be one of {INPUT_MODES}, got {self.input_mode!r}")
        if self.dtype not in DTYPES:
            raise InputError(f"dtype must be one of {DTYPES}, got {self.dtype!r}")
        if self.cell not in CELLS:
            raise InputError(f"cell must be one of {tuple(CELLS)}, got {self.cell!r}")
        if self.input_mode == "skip" and self.input_size != self.units:
            raise InputError(
                f"skip input mode needs input_size == units, got input_size={self.input_size}, "
                f"units={self.units}"
            )

    @property
    def cell_spec(self) -> Cell:
        return CELLS[self.cell]

    @property
    def gates(self) -> int:
        return CELLS[self.cell].num_gates

    @property
    def num_directions(self) -> int:
        return 2 if self.bidirectional else 1

    @property
    def num_pseudo_layers(self) -> int:
        return self.num_layers * self.num_directions

    def layer_input_size(self, layer: int) -> int:
        """Width of the input that ``layer`` sees: the stack input, or the layer below's output."""
        return self.input_size if layer == 0 else self.units * self.num_directions

    def has_input_weights(self, layer: int) -> bool:
        return not (layer == 0 and self.input_mode == "skip")

    def pseudo_layer(self, layer: int, direction: int) -> int:
        return layer * self.num_directions + direction

    def describe(self) -> str:
        d = "bidirectional" if self.bidirectional else "unidirectional"
        return (f"{CELLS[self.cell].shape_prefix}{self.num_layers} layer(s) x {self.units} units, {d}, "
                f"input size {self.input_size}, {self.input_mode} input, {self.dtype}")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclass
class GateParams:
    """Weights of one pseudo-layer (one layer, one direction), canonical orientation.

    ``input_weights``: ``(G, units, in)`` or ``None`` (skip-input layer 0);
    ``recurrent_weights``: ``(G, units, units)``; ``input_bias`` and
    ``recurrent_bias``: ``(G, units)``; G and the gate order from the
    stack's :class:`Cell`.
    """

    input_weights: Optional[np.ndarray]
    recurrent_weights: np.ndarray
    input_bias: np.ndarray
    recurrent_bias: np.ndarray

    def arrays(self) -> dict:
        out = {
            "recurrent_weights": self.recurrent_weights,
            "input_bias": self.input_bias,
            "recurrent_bias": self.recurrent_bias,
        }
        if self.input_weights is not None:
            out["input_weights"] = self.input_weights
        return out

    def astype(self, dtype) -> "GateParams":
        cast = lambda a: None if a is None else np.asarray(a, dtype=dtype)  # noqa: E731
        return GateParams(*(cast(a) for a in dataclasses.astuple(self)))


@dataclass
class RNNStack:
    """A named cuDNN RNN stack: shape facts plus one :class:`GateParams` per pseudo-layer.

    ``name`` is where the stack came from (a Keras layer path, a checkpoint
    scope); ``provenance`` says which stored tensors defined it, for reports.
    """

    name: str
    shape: StackShape
    params: list
    provenance: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Check every array's shape against the shape facts; raise :class:`InputError`."""
        s = self.shape
        if len(self.params) != s.num_pseudo_layers:
            raise InputError(
                f"stack {self.name!r} needs {s.num_pseudo_layers} pseudo-layers, got {len(self.params)}"
            )
        H, G = s.units, s.gates
        for layer in range(s.num_layers):
            for direction in range(s.num_directions):
                p = self.params[s.pseudo_layer(layer, direction)]
                where = f"stack {self.name!r} layer {layer} direction {direction}"
                expected = {
                    "recurrent_weights": (G, H, H),
                    "input_bias": (G, H),
                    "recurrent_bias": (G, H),
                }
                if s.has_input_weights(layer):
                    expected["input_weights"] = (G, H, s.layer_input_size(layer))
                    if p.input_weights is None:
                        raise InputError(f"{where}: input weights missing")
                elif p.input_weights is not None:
                    raise InputError(f"{where}: skip-input layer must have no input weights")
                for key, shp in expected.items():
                    arr = getattr(p, key)
                    if tuple(arr.shape) != shp:
                        raise InputError(
                            f"{where}: {key} has shape {tuple(arr.shape)}, expected {shp}"
                        )

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(self.shape.dtype)

    def param_count(self) -> int:
        """Scalars held (equal to the opaque buffer's size: ``cudnn_layout.params_size``)."""
        return int(sum(a.size for p in self.params for a in p.arrays().values()))

    def nonfinite_count(self) -> int:
        """Number of NaN/Inf values among the weights (reported, never silently fixed)."""
        return int(
            sum(np.count_nonzero(~np.isfinite(a)) for p in self.params for a in p.arrays().values())
        )


class KerasGraph(Protocol):
    """The Keras-graph passthrough of a :class:`Document` (``document.graph``): the rest of a Keras
    model, as the writers that can express it read it: plain data and a weight store.  Writers and
    :mod:`gruconv.keras3` read the input only through these, never by opening the file or importing a
    reader (no attribute returns an h5py, zipfile or bundle object); the reader
    that made the graph implements them (``readers/keras_h5`` ``KerasH5Model``, ``readers/tf_keras_zip``
    ``TfKerasZipModel``, ``readers/tf2`` ``TF2CheckpointDoc``: its store reads the TensorBundle).  ``tests/test_structure.py`` checks every implementation is complete."""

    #: the file the graph was read from (for messages)
    path: object
    #: ``"model"`` (a full model file) or ``"weights"`` (weights only)
    kind: str
    keras_version: Optional[str]
    backend: Optional[str]
    #: the Keras 2 model config (``to_json()``), or None for weights only
    model_config: Optional[dict]
    #: the training config JSON text, or None
    training_config: Optional[str]
    #: the top-level layers with a weight group, in file order
    layer_names: list
    #: the cuDNN layers (each with ``path``, ``shape``, ``stack``, ``datasets``, ``release()``)
    rnns: list
    #: paths of ``Lambda`` layers (code a conversion never runs)
    lambdas: list
    #: how the store names its weights: ``"legacy"`` (per top-level layer) or ``"v3"`` (object paths); plain
    #: data (the Keras-built route pairs a legacy file's weights with the built model's own layers)
    layout: str
    #: the stored weights (:class:`gruconv.model.weights.WeightStore`): the only way to them
    store: object

    def legacy_config(self) -> dict:
        """The model config with every cuDNN layer replaced by its GRU / LSTM config (Keras 2 form)."""

    def other_weights(self):
        """A context manager yielding ``[("<layer>/<weight name>", WeightRef)]``: every stored weight of no cuDNN
        layer, in file order, each read on demand (whole or in blocks) inside the block."""


@dataclass
class Document:
    """What a reader produces and writers consume (pandoc's AST, for cuDNN RNNs).

    ``stacks``: the RNN stacks, each an object with ``name`` and ``stack`` (an :class:`RNNStack`
    read lazily, one at a time); ``graph``: an optional Keras-graph passthrough (the rest of a Keras
    model: its config and the other layers' weights), consumed only by writers that can express
    it; ``other_tensors``: the names of the input's other tensors (a checkpoint's), each read with
    ``view(name)``; ``release()`` drops whatever the reader holds mapped between layers;
    ``warnings``: the reader's notes for the user.
    """

    source: str
    reader: str
    stacks: list = field(default_factory=list)
    graph: Optional[KerasGraph] = None
    #: a TensorFlow graph whose cuDNN nodes a writer replaces (:class:`TfGraph`; content ``tf-graph``)
    tf_graph: object = None
    other_tensors: list = field(default_factory=list)
    view: object = None
    release: object = None
    warnings: list = field(default_factory=list)

    # Plan facts: what :func:`gruconv.writers.planning.plan` and ``api.convert`` decide and report
    # from, set by the reader (so no writer asks a reader anything).
    #: every file a conversion reads (the input's files, ``--config``): no output may be one of them
    inputs: list = field(default_factory=list)
    #: per stack, its name (a checkpoint scope, a Keras layer path; ``""`` for none)
    names: list = field(default_factory=list)
    #: what the stacks are called in messages ("GRU", "LSTM", "RNN")
    stack_word: str = "RNN"
    #: what holds several stacks, and how one is chosen for a one-file output, in messages
    holder: str = "checkpoint"
    choose_one: str = "pass --rnn SCOPE to convert one into {output}, or a directory as OUTPUT for all"
    #: notes for the user once something is converted (after :attr:`warnings`)
    notes: list = field(default_factory=list)
    #: notes added once a file was written
    closing: list = field(default_factory=list)
    #: nothing to convert; ``reason`` says why when the reader says more than "no cuDNN RNN"
    nothing: bool = False
    reason: Optional[str] = None
    #: with ``--force``, a document with nothing to convert is written anyway (a Keras graph)
    nothing_forced: bool = False
    #: the one-line refusal of any conversion (raised by ``plan``)
    refusal: Optional[Exception] = None
    #: ``{writer format: its refusal}``: writers this input cannot go to
    refused: dict = field(default_factory=dict)
    #: the refusal (``{suffix}`` filled in) of a writer that needs an architecture this input lacks
    needs_config: Optional[str] = None
    #: ``row(index, nonfinite) -> dict``: stack ``index`` in the convert report's schema
    row: object = None
    #: ``as_stacks()``: a graph's cuDNN nodes as a reader document of bare stacks (content ``stacks``), their
    #: params evaluated by running the graph: the graph reader's, for the ``tf-graph-stacks`` route
    as_stacks: object = None

    @property
    def cells(self) -> list:
        """Per stack, its cell (``gru``, ``lstm``)."""
        return [s.shape.cell for s in self.stacks]

    def drop(self) -> None:
        """``release()`` when the reader holds anything (writers call it between layers)."""
        if self.release is not None:
            self.release()


@dataclass
class Subject:
    """One thing ``verify`` checks, as the document says: a bare stack (its params, the opaque
    buffer the original ran, if stored, and the converted model), or a Keras graph (the whole
    converted model; ``graph`` says where its recurrent layers are)."""

    name: str
    model: object
    stack: Optional[RNNStack] = None
    opaque: Optional[np.ndarray] = None
    graph: object = None
    #: a Keras graph without a converted file: ``verify`` builds the model ``convert`` would write
    #: (:func:`gruconv.writers.keras_route.built`), so the reader builds nothing
    in_memory: bool = False
    #: the user's Keras 3 classes of the model's custom layers (``--custom-objects``), for that build
    custom_objects: Optional[dict] = None
    #: a converted file that is run whole by its own runtime(s) (a ``.tflite``, an OpenVINO IR: the writer's
    #: ``model_runner``), checked end to end beside the in-memory model it was made from
    whole: object = None


#: What a reader's document holds, in the words planning and verify decide by: a reader states which
#: (:class:`InputFacts`, ``doc.content``) and never decides from it.  Each kind is a key of
#: :data:`gruconv.writers.planning.NATURAL_FORMAT` (the output it goes to when none is named) and of
#: :data:`gruconv.verify.subjects.CHECKS` (what ``verify`` checks of it).
CONTENTS = {
    "graph": "a Keras model: its architecture (in the file, or --config) and its weights",
    "weights": "a Keras weights-only file and no --config: the layers' weights, no architecture",
    "stacks": "bare cuDNN stacks (a TF1 checkpoint) and the input's other tensors",
    "final": "already a Keras 3 file, or a graph that already serves on a CPU: nothing to convert",
    "tf-graph": "a TensorFlow graph (SavedModel or frozen GraphDef) whose cuDNN nodes become standard ops",
    "refused": "an input gruconv recognises and cannot convert (a graph node it cannot replace): one-line refusal",
}


@dataclass(frozen=True)
class InputFacts:
    """What a reader states about an input before converting it (``input_facts(path, options)``, cheap:
    batch mode asks it of every input to name its output); :mod:`gruconv.writers.planning` decides from it.

    ``content``: a :data:`CONTENTS` kind; ``stacks``: how many bare stacks a conversion writes (more
    than one: one file each, in a directory); a Keras graph is one model whatever its RNNs."""

    content: str
    stacks: int = 1

    def __post_init__(self) -> None:
        if self.content not in CONTENTS:
            raise ValueError(f"content must be one of {tuple(CONTENTS)}, got {self.content!r}")


@dataclass(frozen=True)
class GraphRNN:
    """One cuDNN node of a TensorFlow graph, as the ``saved-model`` writer replaces it: its ``op``
    (``CudnnRNN``/``V2``/``V3``) and node ``name``, where it is (``graph``: the index of the SavedModel's
    MetaGraphDef, 0 for a GraphDef; ``function``: the library function holding it, None for the graph's
    own nodes), its stack's shape and whether its tensors are time-major.  A ``CudnnRNNCanonicalToParams*``
    node (which packs canonical weights into the buffer) has no shape: ``packs`` is its (weights, biases)
    count and ``dtype`` its ``T`` (a ``DataType`` number)."""

    op: str
    name: str
    function: Optional[str]
    shape: Optional[StackShape]
    time_major: bool
    graph: int = 0
    packs: Optional[tuple] = None
    dtype: Optional[int] = None


@dataclass
class TfGraph:
    """A TensorFlow graph whose cuDNN nodes are to be replaced (``document.tf_graph``, content ``tf-graph``).

    ``kind``: ``SavedModel`` or ``GraphDef``; ``path`` its graph file; ``text``: text format;
    ``rnns``: the :class:`GraphRNN` nodes; ``data()``: the graph file's bytes (read by the reader, through
    its guards); ``files``: ``(relative path, source)`` of the SavedModel's other files the output
    carries byte for byte (``variables/``, ``assets/``); ``budget``: what one run of the graph may take
    (:class:`gruconv.options.Budget`, from ``--graph-timeout``/``--graph-memory``; None: the defaults), for
    every consumer that runs it (:func:`gruconv.tf.bounded.run`); ``evaluate(graph)``: the reader's evaluation
    of :meth:`params`.  Picklable (``data`` and ``evaluate`` module-level functions' partials): a run of the graph
    happens in a child process."""

    kind: str
    path: object
    text: bool
    rnns: list
    data: object
    files: list = field(default_factory=list)
    budget: object = None
    #: library functions whose cuDNN nodes are tf.keras GPU-only variants with a CPU twin: left as they are (on a
    #: CPU TensorFlow runs the twin), so a graph of only those is written as it is
    twinned: tuple = ()
    evaluate: object = None

    def params(self) -> dict:
        """``{(graph index, function, node name): params}``: the opaque buffer each cuDNN node computes with, as
        the graph computes it (lazy: each call runs the graph once, bounded, with TensorFlow:
        :mod:`gruconv.tf.params`); nodes no signature reaches are missing."""
        return self.evaluate(self)
