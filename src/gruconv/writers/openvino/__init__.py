"""The ``openvino`` writer: an OpenVINO IR (``out.xml`` and its weights ``out.bin`` beside it) per RNN stack,
one ``GRUSequence(linear_before_reset=True)`` / ``LSTMSequence`` per layer, float32 weights.

What it takes is what the ONNX writer takes (the same targets, the same interface: input ``x`` ``(batch, time,
input_size)``, with ``--initial-state`` ``h0`` (``c0``), with ``--mask-input`` ``sequence_lens``; outputs ``y``,
``h_n`` (``c_n``)), because the IR is read by OpenVINO's ONNX frontend from the stack's ONNX model
(:mod:`gruconv.writers.openvino.ir`, where every OpenVINO call is): a TF1/TF2 checkpoint's stacks (several:
one ``.xml`` + ``.bin`` per stack in a directory), the cuDNN RNN of a weights-only Keras file, a TensorFlow graph's
cuDNN nodes.

A full Keras model (legacy HDF5, weights-only with ``--config``, a tf_keras zip, a tf.keras SavedModel) becomes one
IR of the whole model: the converted Keras 3 model (:func:`gruconv.writers.keras_route.built`, the one
translation) traced as a TensorFlow graph with its recurrent layers as cuDNN ops
(:mod:`gruconv.writers.openvino.keras_graph`), that graph as ONNX by gruconv's whole-graph writer
(:mod:`gruconv.writers.onnx.tfgraph`, one ``GRU``/``LSTM`` operator per layer), read by OpenVINO.  Exporting the
Keras model as Keras traces it on a CPU gives ``Loop`` ops instead, never the native op (measured: :mod:`.ir`).
Its interface is the Keras model's (inputs and outputs in the model's order); ``verify`` runs it end to end
(:func:`model_runner`).

Before anything is placed (the output contract): the IR holds exactly one native sequence op per layer with
cuDNN's attributes and nothing else recurrent, only float32 weights, and it compiles on the CPU plugin with
``{"INFERENCE_PRECISION_HINT": "f32"}`` and runs once on a probe input; else exit 3 and neither file.  ``.xml`` and
``.bin`` are placed together by the output transaction (:func:`companions`), all or nothing.

``verify`` runs each IR on the CPU plugin at f32 (:func:`runners`), through the same stack checks and verdicts
as the torch and ONNX outputs.
"""

from __future__ import annotations

from pathlib import Path

FORMAT = "openvino"
SUFFIX = ".xml"
CLAIMS = (".xml",)
#: The same targets as the ONNX writer (a bare stack; a weights-only Keras file's one RNN, or each RNN of one
#: as a file of its own).
KINDS = ("stack", "graph", "graph-rnn")
#: (a full Keras model, kind ``graph`` with a model config: the whole model as one IR)
WRITES = "stacks"
NEEDS_ARCHITECTURE = False
#: An edge file is the user's goal whatever the model holds: one with no cuDNN layer is converted too.
EVERY_MODEL = True
MANY = True

#: The model-interface options a bare stack's IR reads (its ONNX model's: :mod:`gruconv.writers.onnx`).
INTERFACE_OPTIONS = frozenset({"initial_state", "mask_input"})


#: The one line for ``--mask-input``: measured, OpenVINO 2026.4.1's CPU plugin computes every step of a
#: ``GRUSequence``/``LSTMSequence`` whatever its ``sequence_lens`` (the valid steps match onnxruntime within
#: 1.2e-7; the padded steps of ``y`` are not zeros and ``h_n`` is the state after the padding, 0.2-0.8 off).
MASK_REFUSED = ("--mask-input: OpenVINO's CPU plugin ignores a GRUSequence/LSTMSequence's sequence_lens (OpenVINO "
                "2026.4.1, measured: padded steps are computed and the final state runs past each sequence's "
                "end), so a masked IR would be silently wrong; convert without --mask-input and feed each "
                "sequence unpadded (or as a batch of equal lengths), or convert to .onnx")

#: The weights file OpenVINO writes beside an ``.xml`` (same stem).
WEIGHTS_SUFFIX = ".bin"


def options(kind: str) -> frozenset:
    """By target kind: the interface options for a bare stack (``--mask-input`` is read to be refused at write,
    with the reason: the CPU plugin ignores ``sequence_lens``); none for a Keras graph or its RNNs."""
    return INTERFACE_OPTIONS if kind == "stack" else frozenset()


def companions(path) -> list:
    """The files written beside ``path``: its weights, ``STEM.bin``."""
    return [Path(path).with_suffix(WEIGHTS_SUFFIX)]


def _write_one(stack, target_tmp: Path, bin_tmp: Path, shown: Path, *, initial_state: bool, mask_input: bool,
               warnings: list) -> None:
    """One stack's IR: its ONNX model (:func:`gruconv.writers.onnx.graph.build`) read by OpenVINO, checked
    (:func:`.ir.check_ops`, :func:`.ir.check_float32`), saved into a scratch directory beside the output,
    read back, compiled at f32 and run once (:func:`.ir.probe`), then moved to the transaction's temporary
    paths ``target_tmp`` (``.xml``) and ``bin_tmp`` (``.bin``)."""
    from dataclasses import asdict

    from ...files.outputs import scratch_dir
    from ..onnx.graph import build
    from . import ir

    ir.openvino()  # the one line naming the extra, before any work
    if stack.shape.dtype == "float64":
        warnings.append(f"{stack.name}: float64 weights rounded to float32 (the OpenVINO IR is float32)")
    s = stack.shape
    facts = {"name": stack.name, "shape": asdict(s)}
    with scratch_dir(Path(target_tmp).parent, prefix=".gruconv-openvino-") as work:
        onnx_path = work / "stack.onnx"
        onnx_path.write_bytes(build(stack, initial_state=initial_state, mask_input=mask_input).SerializeToString())
        model = ir.stack_model(onnx_path, facts)
        ir.check_ops(model, s.cell, s.num_layers, shown)
        ir.check_float32(model, shown)
        xml = work / "model.xml"
        ir.save(model, xml)
        del model
        written = ir.read(xml, shown)
        ir.check_ops(written, s.cell, s.num_layers, shown)
        ir.check_float32(written, shown)
        ir.probe(ir.compiled(written, shown), shown)
        ir.move(xml, Path(target_tmp))
        ir.move(xml.with_suffix(WEIGHTS_SUFFIX), Path(bin_tmp))


def _write_model(document, target) -> dict:
    """A full Keras model as one IR (module docstring): built by Keras from the one translation, traced with
    cuDNN ops into a scratch SavedModel, made ONNX by the whole-graph writer, read by OpenVINO; checked as a
    stack's IR is (:func:`_place_checked`: as many native sequence ops as the ONNX model has GRU/LSTM operators,
    nothing else recurrent, float32, compiles at f32, runs once) before it is placed."""
    from ...files.outputs import scratch_dir
    from ..keras_route import built
    from ..onnx.tfgraph import serialized
    from . import ir
    from .keras_graph import export_with_cudnn_ops

    ir.openvino()
    graph, shown = document.graph, target.path
    if graph.lambdas:  # building the Keras model would run their code (planning refuses them for model writers)
        from ...errors import UnsupportedError

        raise UnsupportedError(f"model has Lambda layer(s) {', '.join(graph.lambdas)} holding Python code; gruconv "
                               "never runs it, and the IR of the whole model cannot be made without running it",
                               path=graph.path)
    model, nonfinite = built(graph, notes=target.warnings)
    with scratch_dir(Path(target.tmp).parent, prefix=".gruconv-openvino-") as work:
        names = export_with_cudnn_ops(model, work / "saved_model")
        del model
        data, facts = serialized(work / "saved_model", shown)
        target.warnings.extend(facts.get("warnings") or [])
        onnx_path = work / "model.onnx"
        onnx_path.write_bytes(data)
        layers = _onnx_rnn_ops(data)
        del data
        model = ir.graph_model(onnx_path, {"kind": "model", "inputs": names})
        _place_checked(model, layers, work, target.tmp, _bin_tmp(target), shown)
    return nonfinite


def _onnx_rnn_ops(data: bytes) -> dict:
    """``{cell: count}`` of the ONNX model's GRU/LSTM operators (the graph's cuDNN nodes as the writer emitted
    them, one per layer)."""
    import onnx

    from ..onnx.graph import OP

    cell_of = {op: cell for cell, op in OP.items()}
    found: dict = {}
    for node in onnx.load_from_string(data).graph.node:
        if node.op_type in cell_of:
            found[cell_of[node.op_type]] = found.get(cell_of[node.op_type], 0) + 1
    return found


def _place_checked(model, layers: dict, work: Path, xml_tmp, bin_tmp, shown) -> None:
    """Check (``layers``: {cell: native ops expected}), save into ``work``, read back, check again, compile at
    f32, run once on a probe input, then move ``.xml``/``.bin`` to the transaction's temporary paths."""
    from . import ir

    ir.check_graph_ops(model, layers, shown)
    ir.check_float32(model, shown)
    xml = work / "model.xml"
    ir.save(model, xml)
    del model
    written = ir.read(xml, shown)
    ir.check_graph_ops(written, layers, shown)
    ir.check_float32(written, shown)
    ir.probe_model(ir.compiled(written, shown), shown)
    ir.move(xml, Path(xml_tmp))
    ir.move(xml.with_suffix(WEIGHTS_SUFFIX), Path(bin_tmp))


def _bin_tmp(target) -> Path:
    return target.beside[companions(target.path)[0]]


def refuse(graph) -> None:
    """A directory of one IR per RNN is for a weights-only file; a full Keras model is one IR of the model."""
    from ...errors import UsageError

    if graph.model_config is not None:
        raise UsageError("a full Keras model converts to one OpenVINO IR of the whole model: name OUTPUT *.xml",
                         path=graph.path)


def refuse_one_file(graph) -> None:
    """Several RNNs of a weights-only file cannot go to one ``.xml``: one usage line naming the way that works."""
    from ...errors import UsageError

    if graph.model_config is None and len(graph.rnns) > 1:
        raise UsageError(f"the file holds {len(graph.rnns)} cuDNN RNNs ({', '.join(r.path for r in graph.rnns)}); "
                         "an .xml IR holds one stack: name a directory as OUTPUT with --format openvino (one "
                         ".xml + .bin per RNN)", path=graph.path)


def graph_targets(graph, directory) -> list:
    """The file each cuDNN RNN of a weights-only Keras file gets in a directory output: the ONNX writer's
    names (:func:`gruconv.writers.onnx.graph_targets`, one rule) with ``.xml``."""
    from ..onnx import graph_targets as onnx_targets

    return [p.with_suffix(SUFFIX) for p in onnx_targets(graph, directory)]


def write(document, target, options) -> dict:
    """A bare stack (kind ``stack``), a weights-only Keras file's one RNN (``graph``) or one of its RNNs in a
    directory output (``graph-rnn``) as an OpenVINO IR."""
    if target.kind == "stack":
        if options.mask_input:
            from ...errors import UnsupportedError

            raise UnsupportedError(MASK_REFUSED, path=target.path)
        entry = document.stacks[target.stack]
        _write_one(entry.stack, target.tmp, _bin_tmp(target), target.path, initial_state=options.initial_state,
                   mask_input=options.mask_input, warnings=target.warnings)
        document.drop()
        return {}
    graph = document.graph
    if target.kind == "graph" and graph.model_config is not None:
        return _write_model(document, target)
    if target.kind == "graph":
        refuse_one_file(graph)
        rnns = graph.rnns
    else:
        refuse(graph)
        rnns = [graph.rnns[target.stack]]
    nonfinite = {}
    for rnn in rnns:
        nonfinite[rnn.path] = rnn.stack.nonfinite_count()
        try:
            _write_one(rnn.stack, target.tmp, _bin_tmp(target), target.path, initial_state=False, mask_input=False,
                       warnings=target.warnings)
        finally:
            rnn.release()
    return nonfinite if target.kind == "graph" else {}


def load(path, rebuild):
    """An IR is not a Keras model: ``verify`` uses :func:`runners`."""
    from ...errors import UsageError

    raise UsageError("an OpenVINO .xml is run by OpenVINO, not loaded as a Keras model", path=path)


#: The inference precision verify compiles with (tests plant bf16 here to show it fails).
PRECISION = "f32"


def runners(path) -> dict:
    """``{stack name: StackRunner}`` (one entry): the IR compiled on OpenVINO's CPU plugin at
    :data:`PRECISION` (f32), shaped for ``verify``'s stack checks."""
    from ...model.canonical import StackShape
    from ..runner import StackRunner
    from . import ir

    path = Path(path)
    model = ir.read(path)
    facts = ir.facts_of(model, path)
    if facts.get("kind") == "model":  # a whole Keras model's IR: model_runner
        return None
    shape = StackShape(**facts["shape"])
    inputs = {p.get_any_name() for p in model.inputs}
    precision = PRECISION
    compiled = ir.compiled(model, path, precision)
    del model

    def run(x, h0, c0, lengths, math):
        return ir.run(compiled, x, h0 if "h0" in inputs else None, c0 if "c0" in inputs else None,
                      lengths if "sequence_lens" in inputs else None)

    def engine(math) -> str:
        return f"OpenVINO {ir.version()} (CPU plugin, INFERENCE_PRECISION_HINT={precision})"

    return {facts["name"]: StackRunner(facts["name"], shape, run, state_inputs="h0" in inputs,
                                       mask_input="sequence_lens" in inputs, engine=engine)}


class IRRunner:
    """A whole Keras model's IR as ``verify`` drives a file run whole by its runtime (the protocol of
    :func:`gruconv.writers.model_runner`, shared with the ``.tflite`` writer's ``FileRunner``): one runtime,
    OpenVINO's CPU plugin at :data:`PRECISION`, inputs in the Keras model's order; any batch and length."""

    int8 = False
    stateful = False

    def __init__(self, compiled, order: list, engine: str):
        self.compiled, self.order, self.engine = compiled, order, engine

    def feed_size(self, batch: int, steps: int) -> tuple:
        return batch, steps

    def runtimes(self) -> list:
        return [("OpenVINO", self.compiled)]

    def run(self, rt, feed: list, calls: int = 1) -> list:
        from . import ir

        return [ir.run_model(rt, [feed[i] for i in self.order]) for _ in range(calls)]


def model_runner(path):
    """A whole Keras model's IR, compiled on the CPU plugin at :data:`PRECISION` (:class:`IRRunner`); None for
    a stack's IR (:func:`runners`)."""
    from . import ir

    path = Path(path)
    model = ir.read(path)
    facts = ir.facts_of(model, path)
    if facts.get("kind") != "model":
        return None
    compiled = ir.compiled(model, path, PRECISION)
    order = ir.input_order(model, facts.get("inputs") or [])
    del model
    return IRRunner(compiled, order, f"OpenVINO {ir.version()} (CPU plugin, INFERENCE_PRECISION_HINT={PRECISION})")


def gpu_status() -> tuple:
    """``verify --device``: the IR is run on OpenVINO's CPU plugin only."""
    return False, "OpenVINO runs the IR on its CPU plugin here (no GPU plugin is used)", {}


def describe(shape) -> dict:
    """``inspect``: the OpenVINO operators a stack of ``shape`` becomes."""
    from .ir import SEQUENCE_OPS

    op, attrs = SEQUENCE_OPS[shape.cell]
    direction = "bidirectional" if shape.bidirectional else "forward"
    text = f"{op}(hidden_size={shape.units}, direction={direction}" + "".join(
        f", {k}={v}" for k, v in attrs.items()) + ")"
    return {"target": f"OpenVINO IR: {shape.num_layers} x {text}" if shape.num_layers > 1 else f"OpenVINO IR: {text}",
            "note": "identity input matrices (skip input); float32 weights" if shape.input_mode == "skip"
            else "float32 weights"}

