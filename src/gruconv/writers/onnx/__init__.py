"""The ``onnx`` writer: one ONNX model per RNN stack, one ``GRU`` (``linear_before_reset=1``) /
``LSTM`` operator per layer (graph and interface: :mod:`gruconv.writers.onnx.graph`).

Stacks only: a TF1 checkpoint's stacks (several: one ``.onnx`` per stack in a directory, named as
the ``.keras`` models are, plus ``rest.npz``), and the cuDNN RNN of a weights-only Keras file.  A
full Keras model is refused with one usage line: its other layers are Keras's to export
(``.keras`` first, then Keras's own ONNX export), not a stack's.

``--initial-state`` adds the ``h0`` (``c0``) inputs, ``--mask-input`` ``sequence_lens``, as the
``.keras`` stack model has them; the outputs are always ``y`` and ``h_n`` (``c_n``).  ``verify``
runs the model with onnxruntime on the CPU (:func:`runners`).
"""

from __future__ import annotations

from pathlib import Path

FORMAT = "onnx"
SUFFIX = ".onnx"
CLAIMS = (".onnx",)
#: Writes no Keras model.
#: A bare stack, a weights-only Keras graph's one RNN, or each RNN of one as a file of its own; a TensorFlow
#: graph holding cuDNN ops, whole (:mod:`gruconv.writers.onnx.tfgraph`).
KINDS = ("stack", "graph", "graph-rnn", "tf-graph-file")
WRITES = "stacks"
#: Needs no architecture (a weights-only Keras file converts as it is).
NEEDS_ARCHITECTURE = False
EVERY_MODEL = False
#: A checkpoint with several stacks: one ``.onnx`` per stack in a directory.
MANY = True

#: The model-interface options a bare stack's model reads (``--return-state`` is not one: the final
#: states are always outputs).
INTERFACE_OPTIONS = frozenset({"initial_state", "mask_input"})

#: The one line for a full Keras model.
FULL_MODEL = ("a full Keras model is not an ONNX target here (its other layers are Keras's to export): "
              "convert it to .keras and export that with Keras, or convert its weights-only file "
              "(model.save_weights) for the cuDNN RNN alone")


def options(kind: str) -> frozenset:
    """By target kind: the interface options for a bare stack; none for a Keras graph's RNNs nor for a whole
    TensorFlow graph (its interface is the graph's own signature)."""
    return INTERFACE_OPTIONS if kind == "stack" else frozenset()


def _write_stack(document, entry, target, options, name: str) -> None:
    """One stack's ONNX model (float32 interface; a float64 stack is rounded, see
    :func:`gruconv.writers.onnx.graph.write`)."""
    from .graph import write

    write(Path(target), entry.stack, initial_state=options.initial_state, mask_input=options.mask_input,
          force=True)
    document.drop()


def refuse(graph) -> None:
    """The one usage line for what a Keras file cannot give: a full model, or several RNNs in one file."""
    from ...errors import UsageError

    if graph.model_config is not None:
        raise UsageError(FULL_MODEL, path=graph.path)


def refuse_one_file(graph) -> None:
    """Several RNNs cannot go to one ``.onnx`` file: one usage line naming the two ways that work."""
    from ...errors import UsageError

    refuse(graph)
    if len(graph.rnns) > 1:
        raise UsageError(f"the file holds {len(graph.rnns)} cuDNN RNNs ({', '.join(r.path for r in graph.rnns)}); "
                         "an .onnx file holds one stack: name a directory as OUTPUT with --format onnx (one "
                         ".onnx per RNN), or convert to .safetensors for all of them", path=graph.path)


def graph_targets(graph, directory) -> list:
    """The file each cuDNN RNN of a weights-only Keras file gets in a directory output: its layer
    path made a file name (``/`` -> ``__``, anything outside ``[A-Za-z0-9_.-]`` -> ``_``, unique up
    to case) plus ``.onnx``."""
    import re

    taken, out = set(), []
    for rnn in graph.rnns:
        base = re.sub(r"[^A-Za-z0-9_.\-]", "_", rnn.path.replace("/", "__")).lstrip(".") or f"{rnn.shape.cell}_stack"
        stem, n = base, 1
        while stem.lower() in taken:
            n += 1
            stem = f"{base}_{n}"
        taken.add(stem.lower())
        out.append(Path(directory) / (stem + SUFFIX))
    return out


def _write_graph_rnn(document, index: int, target, warnings: list) -> None:
    """RNN ``index`` of a weights-only Keras file as its own ``.onnx`` (one of :func:`graph_targets`)."""
    from .graph import write

    graph = document.graph
    refuse(graph)
    rnn = graph.rnns[index]
    if rnn.shape.dtype == "float64":
        warnings.append(f"{rnn.path}: float64 weights rounded to float32 (the ONNX interface is float32)")
    try:
        write(Path(target), rnn.stack, force=True)
    finally:
        rnn.release()


def _write_graph(document, target, options, warnings: list) -> dict:
    """A weights-only Keras file's one cuDNN RNN as a stack model (see :func:`refuse`)."""
    from .graph import write

    graph = document.graph
    refuse_one_file(graph)
    nonfinite = {}
    for rnn in graph.rnns:
        if rnn.shape.dtype == "float64":
            warnings.append(f"{rnn.path}: float64 weights rounded to float32 (the ONNX interface is float32)")
        nonfinite[rnn.path] = rnn.stack.nonfinite_count()
        write(Path(target), rnn.stack, force=True)
        rnn.release()
    return nonfinite


def _tf_graph_onnx(graph, source: Path, shown: Path, tmp: Path) -> list:
    """The child process's work (:func:`gruconv.tf.bounded.run`): the whole graph's ONNX model written to
    ``tmp``; its warnings."""
    from .tfgraph import serialized

    data, facts = serialized(source, shown, graph=graph)
    with open(tmp, "wb") as f:
        f.write(data)
    return list(facts.get("warnings") or [])


def _write_tf_graph(document, target) -> None:
    """A TensorFlow graph holding cuDNN ops, whole, through tf2onnx with gruconv's handlers: the document's
    ``TfGraph`` (a SavedModel loaded by TensorFlow from its graph file's directory, with its variables; a frozen
    graph from the bytes the reader read, ``TfGraph.data()``), after the reader's bounded checks passed; the
    ``serving_default`` signature; ``document.source`` only names the input in messages.  In a
    child process within the graph's budget (:mod:`gruconv.tf.bounded`): tf2onnx folds constant subgraphs by
    running them with TensorFlow, so a hostile graph runs here too."""
    from ...tf.bounded import run

    graph = document.tf_graph
    target.warnings.extend(run(_tf_graph_onnx, graph, Path(document.source), Path(target.path), Path(target.tmp),
                               budget=graph.budget, path=Path(document.source)))


def write(document, target, options) -> dict:
    """A bare stack (kind ``stack``), a weights-only Keras file's one RNN (``graph``), one of its RNNs in a
    directory output (``graph-rnn``), or a whole TensorFlow graph (``tf-graph-file``) as an ONNX model."""
    if target.kind == "tf-graph-file":
        _write_tf_graph(document, target)
        return {}
    if target.kind == "graph":
        return _write_graph(document, target.tmp, options, target.warnings)
    if target.kind == "graph-rnn":
        _write_graph_rnn(document, target.stack, target.tmp, target.warnings)
        return {}
    _write_stack(document, document.stacks[target.stack], target.tmp, options, target.name)
    return {}


def load(path, rebuild):
    """An ONNX model is not a Keras model: ``verify`` uses :func:`runners`."""
    from ...errors import UsageError

    raise UsageError("an .onnx file is run by onnxruntime, not loaded as a Keras model", path=path)


def runners(path) -> dict:
    """``{graph name: StackRunner}`` (one entry): the model run by onnxruntime on the CPU
    (:func:`gruconv.writers.onnx.graph.run_onnx`), shaped for ``verify``'s stack checks."""
    from .graph import read_model, run_onnx
    from ..runner import StackRunner

    model, shape, name = read_model(path)
    inputs = {i.name for i in model.graph.input}
    del model

    def run(x, h0, c0, lengths, math):
        return run_onnx(str(path), x, h0 if "h0" in inputs else None, c0 if "c0" in inputs else None,
                        lengths if "sequence_lens" in inputs else None, providers=_providers(math))

    return {name: StackRunner(name, shape, run, state_inputs="h0" in inputs,
                              mask_input="sequence_lens" in inputs, engine=_engine)}


def _providers(math) -> list:
    """CPU, or onnxruntime's CUDA provider (its ``use_tf32`` option off for strict fp32)."""
    if math is None:
        return ["CPUExecutionProvider"]
    return [("CUDAExecutionProvider", {"use_tf32": "0" if math == "strict" else "1"})]


def _engine(math) -> str:
    if math is None:
        return "onnxruntime (CPU)"
    return f"onnxruntime (CUDA provider, {'use_tf32=0' if math == 'strict' else 'use_tf32=1'})"


def gpu_status() -> tuple:
    """``(usable, reason, math settings)`` for ``verify --device``: onnxruntime's CUDA provider."""
    try:
        import onnxruntime as ort
    except ImportError as e:
        return False, f"onnxruntime is not installed ({e})", {}
    ok = "CUDAExecutionProvider" in ort.get_available_providers()
    why = (f"onnxruntime {ort.__version__}, CUDAExecutionProvider" if ok
           else f"onnxruntime {ort.__version__} has no CUDA provider ({', '.join(ort.get_available_providers())})")
    return ok, why, {"strict": "CUDAExecutionProvider use_tf32=0", "default": "CUDAExecutionProvider use_tf32=1"}


def describe(shape) -> dict:
    """``inspect``: the operators this target gives a stack of ``shape``."""
    from .graph import describe as _describe

    d = _describe(shape)
    ops = d["ops"]
    text = f"{len(ops)} x {ops[0]}" if len(set(ops)) == 1 and len(ops) > 1 else ", ".join(ops)
    return {"target": f"ONNX opset {d['opset']}: {text}", "note": d["note"]}
