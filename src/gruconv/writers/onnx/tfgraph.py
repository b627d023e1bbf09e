"""The whole graph as ONNX: a SavedModel or frozen ``GraphDef`` that holds cuDNN RNN ops, converted by
tf2onnx as a library with gruconv's own handlers for ``CudnnRNN``/``CudnnRNNV2``/``CudnnRNNV3``.

Why tf2onnx and why our handlers (``shared/DESIGN.md`` "Graphs that hold cuDNN ops"): tf2onnx 1.17
converts the rest of a TensorFlow graph well, and takes handlers for ops through ``custom_op_handlers``
(``tf2onnx/tfonnx.py`` ``process_parsed_graph``: they *replace* its own mapping of the op).  Its own
``CudnnRNN`` handler (``tf2onnx/onnx_opset/rnn.py``) is wrong on every real-cuDNN golden file (a 1-layer
GRU 0.68 off; multi-layer and bidirectional ONNX that onnxruntime refuses; no ``CudnnRNNV3``, no LSTM):
it slices the opaque buffer as if it were ONNX's ``W|R|B`` and leaves ``linear_before_reset`` at 0.

Per cuDNN node (:func:`convert_node`), what the op means (``tensorflow/core/ops/cudnn_rnn_ops.cc``, the
op docs in ``tensorflow/python/ops/gen_cudnn_rnn_ops.py``) turned into ONNX:

* the ``params`` input must be a constant once tf2onnx's loader has frozen the graph and Grappler has
  folded it (``tf2onnx/tf_loader.py`` ``tf_optimize_grappler``: ``constfold``).  Keras 3's export computes
  it from variables with split/transpose/concat (``keras/src/backend/tensorflow/rnn.py``
  ``_standardize_cudnn_weights``); that folds to one ``Const`` (seen on ``fixtures/graphs/keras3_export``).
  Anything else (a ``CudnnRNNCanonicalToParams`` has no CPU kernel, so it never folds) is refused;
* the stack's shape comes from the buffer's size (:func:`gruconv.model.cudnn_layout.solve_shapes`) with
  the sizes the graph states as hints (``input``'s last axis, ``input_h``'s ``[layers*dirs, batch,
  units]``); the buffer is split by :func:`gruconv.model.cudnn_layout.unpack`, the one module that knows
  the layout, and emitted by :func:`gruconv.writers.onnx.graph.emit_layers`, the stack writer's own chain
  (one ``GRU`` with ``linear_before_reset=1`` / ``LSTM`` per layer, gates reordered, directions stacked);
* ``time_major=false`` (V3 only): ``input``/``output`` are ``[batch, time, ...]`` (transposed in and out)
  and ``input_h``/``input_c``/``output_h``/``output_c`` have the shape ``[batch, layers*dirs, units]`` (the op
  docs; the kernel refuses any other, ``cudnn_rnn_ops.cc`` ``ExtractForwardInput`` "Invalid input_h shape"),
  but their *memory* goes to cuDNN as it is, described as ``[layers*dirs, batch, units]``
  (``CreateForwardAndBackwardIODescriptors`` swaps the two dims into ``createRnnStateTensorDescriptor``, no
  transpose): so the states are *reshaped*, not transposed, in and out (the same for one layer and
  direction, Keras's case);
* ``sequence_lengths`` (V3) is ONNX's ``sequence_lens``: both zero the outputs past a sequence's length and
  return its last valid state (cuDNN's padded I/O, ``shared/cudnn-golden/README.md``; checked against the
  golden ``varlen`` files in the tests);
* ``input_mode``: ``linear_input``/``skip_input``, ``auto_select`` is skip when the input size equals the
  units (``cudnn_rnn_ops.cc`` ``ToRNNInputMode``; the mapping, the attrs' defaults and the op's inputs and
  outputs are :mod:`gruconv.model.cudnn_ops`, shared with the graph reader and the SavedModel writer);
* refused in one line: ``rnn_tanh``/``rnn_relu`` (no ONNX twin of cuDNN's cell written here),
  ``num_proj`` (an LSTM projection), ``dropout > 0`` with ``is_training`` (a random graph);
* ``reserve_space``/``host_reserved`` (and a GRU's ``output_c``) are empty float tensors, only if a
  node consumes them.

The output is checked: no ``CudnnRNN*`` op and no other op left unconverted (tf2onnx leaves an op it
has no handler for as it is), ``onnx.checker`` (full), and an onnxruntime CPU session opens it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np

from ...errors import InputError, OutputError, UnsupportedError, UsageError, first_line
from ...model.canonical import CELLS, DTYPES, RNNStack, StackShape
from ...model.cudnn_layout import iter_matrix_regions, params_size, solve_shapes, unpack
from ...model.cudnn_ops import (ATTR_DEFAULTS, CELL_OF_MODE, DIRECTIONS, INPUT_MODES, INPUTS, PACKING_OPS, PREFIX,
                                RNN_OPS, WITH_LENGTHS)
from .graph import MAX_MODEL_BYTES, OPSET, emit_layers

#: ONNX's TensorProto.FLOAT: the dtype the chain computes in (:func:`convert_node`).
FLOAT = 1
#: The oldest opset written (:func:`build`).
MIN_OPSET = 14


def _input_mode(where: str, mode: str, input_size: Optional[int], units: Optional[int]) -> list:
    """StackShape input modes a node's ``input_mode`` attr allows (``[None]``: either, sizes unknown)."""
    if mode == "auto_select":
        return [None] if units is None or input_size is None else ["skip" if units == input_size else "linear"]
    if mode in INPUT_MODES:
        return [INPUT_MODES[mode]]
    raise InputError(f"{where}: unknown input_mode '{mode}'")


def _cell(where: str, node) -> str:
    mode = _attr(node, "rnn_mode")
    if mode not in CELL_OF_MODE:
        raise UnsupportedError(f"{where}: rnn_mode '{mode}' is not converted (GRU and LSTM are)")
    return CELL_OF_MODE[mode]


def _attr(node, key: str):
    """An attr of a tf2onnx node as Python (bytes decoded), or the op registry's default."""
    value = node.get_attr_value(key)
    if value is None:
        return ATTR_DEFAULTS[key]
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _dim(shape, axis: int) -> Optional[int]:
    if shape is None or len(shape) <= axis or shape[axis] is None or shape[axis] < 0:
        return None
    return int(shape[axis])


def stack_of(ctx, node) -> tuple:
    """``(RNNStack, time_major)`` of a cuDNN node in tf2onnx's graph ``ctx``, or a one-line refusal."""
    where = f"{node.type} '{node.name}'"
    cell = _cell(where, node)
    if node.type == "CudnnRNNV3" and int(_attr(node, "num_proj")) != 0:
        raise UnsupportedError(f"{where}: num_proj={_attr(node, 'num_proj')} (an LSTM projection) is not converted")
    if float(_attr(node, "dropout")) > 0 and bool(_attr(node, "is_training")):
        raise UnsupportedError(f"{where}: dropout={_attr(node, 'dropout')} with is_training=true is a random "
                               "graph (training mode); export the model for inference")
    direction = _attr(node, "direction")
    if direction not in DIRECTIONS:
        raise InputError(f"{where}: unknown direction '{direction}'")
    D = DIRECTIONS[direction]
    time_major = bool(_attr(node, "time_major")) if node.type == "CudnnRNNV3" else True
    p = ctx.get_node_by_output(node.input[INPUTS.index("params")])
    if p is None or not p.is_const():
        src = "nothing" if p is None else f"{p.type} '{p.name}'"
        raise UnsupportedError(f"{where}: its params come from {src}, not a constant after freezing and folding "
                               "the graph (gruconv converts nodes whose opaque buffer is fixed)")
    buffer = np.asarray(p.get_tensor_value(as_list=False))
    if buffer.dtype.name not in DTYPES:
        raise UnsupportedError(f"{where}: params are {buffer.dtype}, not one of {', '.join(DTYPES)}")
    x_shape = ctx.get_shape(node.input[INPUTS.index("input")])
    h_shape = ctx.get_shape(node.input[INPUTS.index("input_h")])
    units, input_size = _dim(h_shape, 2), _dim(x_shape, 2)
    pseudo = _dim(h_shape, 0 if time_major else 1)
    if pseudo is not None and pseudo % D:
        raise InputError(f"{where}: input_h holds {pseudo} states, not a multiple of {D} directions")
    modes = _input_mode(where, _attr(node, "input_mode"), input_size, units)
    shapes = [s for m in modes for s in solve_shapes(buffer.size, units=units, input_size=input_size,
                                                     num_layers=None if pseudo is None else pseudo // D,
                                                     bidirectional=D == 2, input_mode=m, cell=cell,
                                                     dtype=buffer.dtype.name)]
    if len(shapes) != 1:
        found = "no" if not shapes else f"{len(shapes)} ({'; '.join(s.describe() for s in shapes[:3])})"
        raise UnsupportedError(
            f"{where}: {found} {CELLS[cell].title} stack shapes fit its {buffer.size}-value params with the sizes "
            f"the graph states (input size {input_size}, units {units}, states {pseudo}); give the graph "
            "static shapes")
    shape = shapes[0]
    return RNNStack(node.name, shape, unpack(buffer, shape)), time_major


def convert_node(ctx, node, name, args) -> list:
    """tf2onnx handler (the ``custom_op_handlers`` form ``(ctx, node, name, args)``): replace one cuDNN
    node of ``ctx`` by the ONNX chain computing it, its outputs keeping their names; returns warnings.

    The chain computes in float32 (the ONNX stack writer's dtype; onnxruntime's CPU ``GRU`` is float32): a
    float16 node's inputs are cast up and its outputs back down (cuDNN too accumulates a half RNN in float32),
    a float64 one is rounded (a warning says so)."""
    stack, time_major = stack_of(ctx, node)
    s = stack.shape
    states = CELLS[s.cell].states
    P = f"{node.name}/gruconv/"
    outputs = list(node.output)
    consumed = {i: bool(ctx.find_output_consumers(o)) or o in ctx.outputs for i, o in enumerate(outputs)}
    out_dtype = ctx.get_dtype(outputs[0])
    f32 = out_dtype == FLOAT
    warnings = [] if s.dtype != "float64" else [f"{node.type} '{node.name}': float64, computed in float32"]

    def emit(op_type, ins, outs, nm, **attrs):
        return ctx.make_node(op_type, ins, attr=attrs, outputs=outs, name=nm).output

    def const(nm, arr):
        return ctx.make_const(nm, np.asarray(arr)).output[0]

    def swap(tensor, what):  # [B, T, ...] <-> [T, B, ...]: the same transpose both ways
        return emit("Transpose", [tensor], [f"{P}{what}"], f"{P}{what}_swap", perm=[1, 0, 2])[0]

    def as_states(tensor, what, shape):  # a batch-major state's memory, read as cuDNN's (module docstring)
        return emit("Reshape", [tensor, const(f"{P}{what}_shape", np.array(shape, np.int64))], [f"{P}{what}"],
                    f"{P}{what}_reshape")[0]

    def up(tensor, what):
        return tensor if f32 else emit("Cast", [tensor], [f"{P}{what}_f32"], f"{P}{what}_to_f32", to=FLOAT)[0]

    L_D, H = s.num_pseudo_layers, s.units
    x = up(node.input[0], "x") if time_major else swap(up(node.input[0], "x"), "x_tm")
    initial = {st: up(node.input[1 + i], f"{st}0") if time_major else
               as_states(up(node.input[1 + i], f"{st}0"), f"{st}0_cudnn", [L_D, -1, H])
               for i, st in enumerate(states)}
    # int32 by the op's definition, as ONNX's
    seq = node.input[INPUTS.index("sequence_lengths")] if node.type in WITH_LENGTHS else ""
    y, finals = emit_layers(stack, emit, const, x, np.float32, initial=initial, sequence_lens=seq, prefix=P)
    shapes = {o: ctx.get_shape(o) for o in outputs}
    finished = {0: y if time_major else swap(y, "y_bt")}
    for i, st in enumerate(states):
        if consumed[1 + i]:
            cat = emit("Concat", finals[st], [f"{P}{st}_n"], f"{P}{st}_n_concat", axis=0)[0]
            finished[1 + i] = cat if time_major else as_states(cat, f"{st}_n_bt", [-1, L_D, H])
    ctx.remove_node(node.name)
    for i, tensor in finished.items():  # the node's own output names, so its consumers need no rewiring
        op, attrs = ("Identity", {}) if f32 else ("Cast", {"to": out_dtype})
        ctx.make_node(op, [tensor], attr=attrs, outputs=[outputs[i]], name=f"{P}output_{i}",
                      shapes=[shapes[outputs[i]]], dtypes=[out_dtype])
    for i in range(1 + len(states), len(outputs)):  # a GRU's output_c, reserve_space, host_reserved
        if consumed[i]:
            from onnx.helper import tensor_dtype_to_np_dtype

            kind = ctx.get_dtype(outputs[i])  # T, and host_reserved's int8
            ctx.make_const(outputs[i], np.zeros((0,), tensor_dtype_to_np_dtype(kind) if kind else np.float32))
    return warnings


def _const(ctx, where: str, tensor: str, what: str) -> np.ndarray:
    p = ctx.get_node_by_output(tensor)
    if p is None or not p.is_const():
        src = "nothing" if p is None else f"{p.type} '{p.name}'"
        raise UnsupportedError(f"{where}: its {what} comes from {src}, not a constant after freezing and folding")
    return np.asarray(p.get_tensor_value(as_list=False))


def convert_canonical(ctx, node, name, args) -> None:
    """tf2onnx handler for ``CudnnRNNCanonicalToParams[V2]``: the opaque buffer it would build, as a constant.

    Inputs ``num_layers, num_units, input_size, weights..., biases...`` (``cudnn_rnn_ops.cc``; V1 has
    ``num_params`` weights and as many biases, V2 ``num_params_weights``/``num_params_biases``); the kernel
    copies the i-th weight (bias) tensor, by its flat size, into the i-th matrix (bias) region cuDNN lays out,
    so each one lands at the offset :func:`gruconv.model.cudnn_layout.iter_matrix_regions` gives for it (the
    layout stays in that module)."""
    where = f"{node.type} '{node.name}'"
    cell = _cell(where, node)
    if node.type.endswith("V2") and int(_attr(node, "num_proj")) != 0:
        raise UnsupportedError(f"{where}: num_proj={_attr(node, 'num_proj')} (an LSTM projection) is not converted")
    L, H, I = (int(_const(ctx, where, node.input[i], what)) for i, what in
               enumerate(("num_layers", "num_units", "input_size")))
    tensors = [_const(ctx, where, t, f"weight {i - 3}") for i, t in enumerate(node.input) if i >= 3]
    D = 2 if _attr(node, "direction") == "bidirectional" else 1
    mode = _input_mode(where, _attr(node, "input_mode"), I, H)[0]
    try:
        shape = StackShape(I, H, L, D == 2, mode or "linear", "float32", cell)
    except InputError as e:
        raise InputError(f"{where}: {e.message}") from None
    regions = list(iter_matrix_regions(shape))
    if len(tensors) != len(regions):
        raise InputError(f"{where}: {len(tensors)} weight and bias tensors, a {shape.describe()} "
                         f"{CELLS[cell].title} has {len(regions)} regions")
    buffer = np.empty(params_size(shape), np.float32)
    for (p, kind, lin, offset, dims), t in zip(regions, tensors):
        if t.dtype != np.float32 or t.size != int(np.prod(dims)):
            raise InputError(f"{where}: pseudo-layer {p} {kind} {lin} is {t.dtype} of {t.size} values, expected "
                             f"float32 of {int(np.prod(dims))}")
        buffer[offset:offset + t.size] = t.reshape(-1)
    out = node.output[0]
    ctx.remove_node(node.name)
    ctx.make_const(out, buffer)


def handlers() -> dict:
    """``custom_op_handlers`` for tf2onnx: each op this module converts -> (handler, args)."""
    # the ops that run the RNN (tf2onnx's own handler for ``CudnnRNN`` is replaced, the other two it has none for),
    # and the ones that pack canonical weights (TF1's ``tf.contrib.cudnn_rnn`` saveable), folded here into the
    # buffer they make so the RNN node after them sees a constant
    return {**{op: (convert_node, []) for op in RNN_OPS}, **{op: (convert_canonical, []) for op in sorted(PACKING_OPS)}}


def build(path, *, signature: Optional[str] = None, opset: Optional[int] = None, graph=None) -> tuple:
    """``(onnx.ModelProto, facts)``: the whole graph at ``path`` as ONNX (module docstring), checked.
    ``opset``: default :data:`gruconv.writers.onnx.graph.OPSET` (17); 14 at least (``GRU``/``LSTM`` with
    ``layout``, ``Squeeze`` with its axes as an input).  TensorFlow and tf2onnx are run by the TensorFlow side
    (:func:`gruconv.tf.to_onnx.convert`), with this module's handlers.  ``graph``: the document's
    :class:`~gruconv.model.canonical.TfGraph` (the writer's case: what the reader found, loaded from there;
    ``path``, the input, names it); without it, the graph at ``path`` (tests, scripts)."""
    from ...tf.to_onnx import convert

    opset = opset or OPSET
    if opset < MIN_OPSET:
        raise UsageError(f"opset {opset}: the whole-graph ONNX writer needs {MIN_OPSET} or newer")
    converted, warnings = [], []

    def handler(ctx, node, name, args):
        warnings.extend(convert_node(ctx, node, name, args))
        converted.append(node.name)

    model, sig = convert(path, signature=signature, opset=opset,
                         handlers={**handlers(), **{op: (handler, []) for op in RNN_OPS}}, graph=graph)
    _fill_output_shapes(model)
    check(model, path=path)
    facts = {"signature": sig, "opset": opset,
             "inputs": [i.name for i in model.graph.input], "outputs": [o.name for o in model.graph.output],
             "cudnn_nodes": converted, "warnings": warnings}
    return model, facts


def _fill_output_shapes(model) -> None:
    """Give each graph output whose shape TensorFlow left unknown the one ONNX's shape inference finds (an
    empty ``reserve_space`` that a node consumed: tf2onnx writes such an output with no shape, which
    ``onnx.checker`` refuses)."""
    import onnx

    missing = [o for o in model.graph.output if not o.type.tensor_type.HasField("shape")]
    if not missing:
        return
    known = {i.name: list(i.dims) for i in model.graph.initializer}
    inferred = onnx.shape_inference.infer_shapes(model)
    for v in list(inferred.graph.value_info) + list(inferred.graph.output):
        if v.type.tensor_type.HasField("shape"):
            known.setdefault(v.name, [d.dim_value if d.HasField("dim_value") else -1
                                      for d in v.type.tensor_type.shape.dim])
    for o in missing:
        if o.name in known:
            shape = o.type.tensor_type.shape
            for d in known[o.name]:
                dim = shape.dim.add()
                if d >= 0:
                    dim.dim_value = d


def leftover_ops(model) -> list:
    """Op types in ``model`` that are cuDNN ops or that no ONNX schema defines (tf2onnx left them)."""
    import onnx

    bad = set()
    for n in model.graph.node:
        if n.op_type.startswith(PREFIX):
            bad.add(n.op_type)
            continue
        try:
            onnx.defs.get_schema(n.op_type, domain=n.domain or "")
        except onnx.defs.SchemaError:
            bad.add(n.op_type if not n.domain else f"{n.domain}.{n.op_type}")
    return sorted(bad)


def check(model, *, path=None) -> None:
    """Refuse a converted model that still holds a cuDNN or unconverted op, fails ``onnx.checker`` or
    that onnxruntime's CPU provider will not open."""
    import onnx
    import onnxruntime as ort

    bad = leftover_ops(model)
    if bad:
        raise UnsupportedError(f"the ONNX model would hold ops no ONNX runtime has: {', '.join(bad)} "
                               "(tf2onnx has no handler for them)", path=path)
    try:
        onnx.checker.check_model(model, full_check=True)
        opts = ort.SessionOptions()
        opts.log_severity_level = 3
        ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001 - onnx's ValidationError, onnxruntime's Fail/InvalidGraph
        raise UnsupportedError(f"the converted ONNX model is not valid ({first_line(e, 200)})", path=path) from None


def serialized(path, out, *, signature: Optional[str] = None, opset: Optional[int] = None, graph=None) -> tuple:
    """``(bytes, facts)``: :func:`build`'s model serialized, refused over protobuf's 2 GiB (said of ``out``)."""
    model, facts = build(path, signature=signature, opset=opset, graph=graph)
    data = model.SerializeToString()
    if len(data) > MAX_MODEL_BYTES:
        raise OutputError(f"the ONNX model would be {len(data)} bytes, over protobuf's 2 GiB", path=out)
    return data, facts


def write_graph_onnx(path, out, *, signature: Optional[str] = None, opset: Optional[int] = None,
                     force: bool = False) -> dict:
    """Convert the graph at ``path`` (SavedModel directory or frozen ``.pb``/``.pbtxt``) to one ONNX
    model at ``out``, written atomically (:func:`gruconv.files.outputs.atomic_path`); returns the facts
    (signature, opset, input and output names, the cuDNN nodes converted, warnings)."""
    from ...files.outputs import atomic_path, check_target

    check_target(Path(out), force=force)
    data, facts = serialized(path, out, signature=signature, opset=opset)
    with atomic_path(Path(out), force=force, suffix=".onnx") as tmp:
        with open(tmp, "wb") as f:
            f.write(data)
    return facts
