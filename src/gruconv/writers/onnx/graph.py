"""The ONNX target: one canonical stack -> one ONNX model, one ``GRU``/``LSTM`` operator per layer.

Interface (the ``.keras`` stack model's, batch-first):

* input ``x`` float32 ``(batch, time, input_size)``; with ``initial_state`` also ``h0`` (and, LSTM,
  ``c0``) ``(layers*dirs, batch, units)`` in cuDNN's pseudo-layer order (l0 fw, l0 bw, l1 fw, ...);
  with ``mask_input`` also ``sequence_lens`` int32 ``(batch,)`` (right-padded sequences);
* outputs ``y`` ``(batch, time, dirs*units)`` (forward then backward halves, as cuDNN concatenates
  them; 0 past each sequence's length) and ``h_n`` (LSTM also ``c_n``) ``(layers*dirs, batch, units)``.

ONNX's recurrent operators are time-major and put the direction axis in ``Y``
(``[seq_length, num_directions, batch_size, hidden_size]``), so the graph is
``Transpose(x) -> [GRU -> Split/Squeeze/Concat(T,B,D*H)] per layer -> Transpose(y)``,
with the per-layer ``Y_h`` (``Y_c``) concatenated along axis 0.  ``GRU`` has
``linear_before_reset=1``: ``ht = g(Xt*(Wh^T) + (rt (.) (Ht-1*(Rh^T) + Rbh)) + Wbh)``, cuDNN's
equation (ONNX operator docs, GRU since opset 14); with 0 it would be Keras 2's
``reset_after=False``, a different function.  The gate reorders (ONNX GRU ``zrh``, LSTM ``iofc``) are
:mod:`gruconv.model.target_gates`'s; skip-input layer 0 gets identity ``W`` (exact).

Weights are float32 (the interface's dtype): a float16 stack converts exactly, a float64 one is
rounded (:func:`build` returns the model; :func:`write` says so in its warnings).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np

from ...model.canonical import CELLS, RNNStack
from ...errors import OutputError, ReferenceUnavailable, UsageError
from ...model.target_gates import stacked_blocks

#: The opset the models declare (GRU/LSTM as of opset 14; 17 is the floor the ONNX output promises).
OPSET = 17
#: IR version 8 is opset 17's (onnx ``VERSION_TABLE``), readable by onnxruntime 1.12 and newer.
IR_VERSION = 8
#: Models over this size cannot be one protobuf message (2 GiB hard limit).
MAX_MODEL_BYTES = 2**31 - 2**20
OP = {"gru": "GRU", "lstm": "LSTM"}
#: The operator attributes that make it compute cuDNN's cell (ONNX GRU: the reset gate after the
#: recurrent product, ``linear_before_reset=1``; module docstring).  A cell missing here is a KeyError,
#: never another cell's settings.
OP_ATTRS = {"gru": {"linear_before_reset": 1}, "lstm": {}}


def _onnx():
    try:
        import onnx
    except ImportError as e:
        raise ReferenceUnavailable(f"onnx is not installed ({e}); pip install 'gruconv[onnx]'") from None
    return onnx


def describe(stack) -> dict:
    """What the ONNX target makes of ``stack`` (an :class:`RNNStack` or its
    :class:`gruconv.model.canonical.StackShape`; for ``inspect``): one operator per layer."""
    s = getattr(stack, "shape", stack)
    direction = "bidirectional" if s.bidirectional else "forward"
    states = CELLS[s.cell].states
    attrs = f"hidden_size={s.units}, direction={direction}" + "".join(
        f", {k}={v}" for k, v in OP_ATTRS[s.cell].items())
    return {"ops": [f"{OP[s.cell]}({attrs})"] * s.num_layers, "opset": OPSET,
            "inputs": ["x"] + [f"{st}0" for st in states] + ["sequence_lens"],
            "outputs": ["y"] + [f"{st}_n" for st in states],
            "note": "identity input matrices (skip input)" if s.input_mode == "skip" else ""}


def emit_layers(stack: RNNStack, emit, const, x_tm: str, dtype, *, initial: Optional[dict] = None,
                sequence_lens: str = "", prefix: str = "") -> tuple:
    """The operator chain of ``stack`` on a time-major input ``x_tm`` ``(T, B, input_size)``: per layer one
    ``GRU``/``LSTM`` (weights from :func:`gruconv.model.target_gates.stacked_blocks`, directions stacked
    along ``W``'s first axis), its ``Y`` ``[T, dirs, B, H]`` made ``[T, B, dirs*H]`` for the next layer.

    Written once for both graphs that hold such a chain: :func:`build`'s stack model and the whole-graph
    writer's cuDNN-node handlers (:mod:`gruconv.writers.onnx.tfgraph`), which emit into a tf2onnx graph.
    ``emit(op_type, inputs, outputs, name, **attrs)`` adds a node; ``const(name, array) -> tensor name``
    an initializer (names are ``prefix`` + this function's own).  ``initial``: state name -> a tensor
    ``(layers*dirs, B, H)`` in cuDNN's pseudo-layer order, sliced per layer; ``sequence_lens``: an int32
    ``(B,)`` tensor name or ``""``.  Returns ``(y [T, B, dirs*H], {state: [each layer's final state
    (dirs, B, H)]})``, the caller concatenating the states along axis 0."""
    s = stack.shape
    states = CELLS[s.cell].states
    D, G, H = s.num_directions, s.gates, s.units
    P = prefix
    axis1 = const(f"{P}axis1", np.array([1], np.int64))
    if initial:
        axes0 = const(f"{P}axes0", np.array([0], np.int64))  # only where used: onnxruntime warns of unused ones
    layer_in, finals = x_tm, {st: [] for st in states}
    for k in range(s.num_layers):
        blocks = [stacked_blocks(stack.params[s.pseudo_layer(k, d)], "onnx", s.cell, s.layer_input_size(k), dtype)
                  for d in range(D)]
        W = const(f"{P}W_l{k}", np.stack([b[0] for b in blocks]))                          # (D, G*H, in)
        R = const(f"{P}R_l{k}", np.stack([b[1] for b in blocks]))                          # (D, G*H, H)
        B = const(f"{P}B_l{k}", np.stack([np.concatenate([b[2], b[3]]) for b in blocks]))  # (D, 2*G*H)
        assert blocks[0][0].shape[0] == G * H
        op_in = [layer_in, W, R, B, sequence_lens]
        if initial:
            start = const(f"{P}h0_start_l{k}", np.array([k * D], np.int64))
            end = const(f"{P}h0_end_l{k}", np.array([(k + 1) * D], np.int64))
            for st in states:
                emit("Slice", [initial[st], start, end, axes0], [f"{P}{st}0_l{k}"], f"{P}{st}0_slice_l{k}")
            op_in += [f"{P}{st}0_l{k}" for st in states]
        else:
            op_in += [""] * len(states)
        while op_in and op_in[-1] == "":
            op_in.pop()
        outs = [f"{P}Y_l{k}"] + [f"{P}Y{st}_l{k}" for st in states]
        attrs = {"hidden_size": H, "direction": "bidirectional" if D == 2 else "forward", **OP_ATTRS[s.cell]}
        emit(OP[s.cell], op_in, outs, f"{P}{OP[s.cell].lower()}_l{k}", **attrs)
        # [T, D, B, H] -> [T, B, D*H], forward half first: each direction squeezed, then concatenated (a
        # Transpose + Reshape([0, 0, -1]) is the same function, but tf2onnx's optimizer folds the transpose
        # into the reshape and its 0s then copy the wrong axes: y came out [T, 1, B*H], measured)
        halves = emit("Split", [f"{P}Y_l{k}"], [f"{P}Y_l{k}_d{d}" for d in range(D)], f"{P}y_dirs_l{k}",
                      axis=1) if D > 1 else [f"{P}Y_l{k}"]
        for d, half in enumerate(halves):
            emit("Squeeze", [half, axis1], [f"{P}y_l{k}_d{d}"], f"{P}y_squeeze_l{k}_d{d}")
        if D > 1:
            emit("Concat", [f"{P}y_l{k}_d{d}" for d in range(D)], [f"{P}y_l{k}"], f"{P}y_concat_dirs_l{k}", axis=2)
        else:
            emit("Identity", [f"{P}y_l{k}_d0"], [f"{P}y_l{k}"], f"{P}y_l{k}")
        layer_in = f"{P}y_l{k}"
        for st in states:
            finals[st].append(f"{P}Y{st}_l{k}")
    return layer_in, finals


def build(stack: RNNStack, *, initial_state: bool = False, mask_input: bool = False):
    """The ``onnx.ModelProto`` computing ``stack`` (checked with ``onnx.checker`` and shape inference)."""
    onnx = _onnx()
    from onnx import TensorProto, helper, numpy_helper

    s = stack.shape
    states = CELLS[s.cell].states  # h (and c): ONNX's initial_h (initial_c) inputs, Y_h (Y_c) outputs
    H, D = s.units, s.num_directions
    f32 = TensorProto.FLOAT
    nodes, inits = [], []

    def const(name: str, arr) -> str:
        inits.append(numpy_helper.from_array(np.asarray(arr), name))
        return name

    inputs = [helper.make_tensor_value_info("x", f32, ["batch", "time", s.input_size])]
    state_shape = [s.num_pseudo_layers, "batch", H]
    if initial_state:
        inputs += [helper.make_tensor_value_info(f"{st}0", f32, state_shape) for st in states]
    if mask_input:
        inputs.append(helper.make_tensor_value_info("sequence_lens", TensorProto.INT32, ["batch"]))
    nodes.append(helper.make_node("Transpose", ["x"], ["x_tm"], perm=[1, 0, 2], name="x_to_time_major"))

    def emit(op_type, ins, outs, name, **attrs):
        nodes.append(helper.make_node(op_type, ins, outs, name=name, **attrs))
        return outs

    layer_in, finals = emit_layers(stack, emit, const, "x_tm", np.float32,
                                   initial={st: f"{st}0" for st in states} if initial_state else None,
                                   sequence_lens="sequence_lens" if mask_input else "")
    nodes.append(helper.make_node("Transpose", [layer_in], ["y"], perm=[1, 0, 2], name="y_to_batch_major"))
    outputs = [helper.make_tensor_value_info("y", f32, ["batch", "time", D * H])]
    for st in states:
        nodes.append(helper.make_node("Concat", finals[st], [f"{st}_n"], axis=0, name=f"{st}_n_concat"))
        outputs.append(helper.make_tensor_value_info(f"{st}_n", f32, state_shape))
    graph = helper.make_graph(nodes, _graph_name(stack.name), inputs, outputs, initializer=inits,
                              doc_string=f"gruconv: {s.describe()}")
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="gruconv",
                              ir_version=IR_VERSION)
    model.doc_string = f"{stack.name}: {s.describe()}"
    onnx.checker.check_model(model, full_check=True)
    return model


def _graph_name(name: str) -> str:
    import re

    return re.sub(r"[^A-Za-z0-9_]", "_", name) or "rnn"


def write(path, stack: RNNStack, *, initial_state: bool = False, mask_input: bool = False,
          force: bool = False) -> dict:
    """Build and write ``stack``'s ONNX model to ``path`` atomically; returns ``{"warnings": [...]}``."""
    from ...files.outputs import atomic_path

    warnings = []
    if stack.shape.dtype == "float64":
        warnings.append(f"{stack.name}: float64 weights rounded to float32 (the ONNX interface is float32)")
    data = build(stack, initial_state=initial_state, mask_input=mask_input).SerializeToString()
    if len(data) > MAX_MODEL_BYTES:
        raise OutputError(f"the ONNX model would be {len(data)} bytes, over protobuf's 2 GiB", path=path)
    with atomic_path(Path(path), force=force, suffix=".onnx") as tmp:
        with open(tmp, "wb") as f:
            f.write(data)
    return {"warnings": warnings}


def run_onnx(path_or_model, x, h0=None, c0=None, seq_lengths=None, *, providers: Optional[list] = None) -> tuple:
    """Run an ONNX model built here with onnxruntime, in :func:`gruconv.verify.reference.oracle.run_stack`'s layout.

    ``x`` time-major ``(T, B, input_size)``; ``h0``/``c0`` ``(layers*dirs, B, units)`` (zeros when
    the model has the inputs and none are given; refused when given to a model without them);
    ``seq_lengths`` ``(B,)`` likewise for ``sequence_lens``.  Returns NumPy ``(y (T, B, dirs*units),
    hy, cy or None)``.  ``providers`` defaults to the CPU provider.
    """
    try:
        import onnxruntime as ort
    except ImportError as e:
        raise ReferenceUnavailable(f"onnxruntime is not installed ({e}); pip install 'gruconv[onnx]'") from None
    src = path_or_model.SerializeToString() if hasattr(path_or_model, "SerializeToString") else str(path_or_model)
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    sess = ort.InferenceSession(src, opts, providers=list(providers or ["CPUExecutionProvider"]))
    names = {i.name: i for i in sess.get_inputs()}
    x = np.asarray(x, dtype=np.float32)
    T, B = x.shape[0], x.shape[1]
    feed = {"x": np.ascontiguousarray(x.transpose(1, 0, 2))}
    for key, val in (("h0", h0), ("c0", c0)):
        if key in names:
            if val is None:
                val = np.zeros((names[key].shape[0], B, names[key].shape[2]), np.float32)
            feed[key] = np.ascontiguousarray(val, dtype=np.float32)
        elif val is not None:
            raise UsageError(f"the model has no {key} input (build it with initial_state=True)")
    if "sequence_lens" in names:
        feed["sequence_lens"] = (np.full(B, T, np.int32) if seq_lengths is None
                                 else np.asarray(seq_lengths).astype(np.int32))
    elif seq_lengths is not None:
        raise UsageError("the model has no sequence_lens input (build it with mask_input=True)")
    out = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feed)))
    return np.ascontiguousarray(out["y"].transpose(1, 0, 2)), out["h_n"], out.get("c_n")


def read_model(path) -> tuple:
    """``(ModelProto, StackShape, stack name)`` of an ONNX model :func:`write` wrote, checked.

    Untrusted input: the size is bounded before protobuf parses it, ``onnx.checker`` runs, and the
    graph must be this module's interface (input ``x`` ``(batch, time, input_size)``, one
    ``GRU``/``LSTM`` per layer, all of one kind, one ``hidden_size`` and direction); anything else is
    one-line :class:`InputError`.  The name is the one :func:`build` put in the model's doc string."""
    import os

    from ...model.canonical import StackShape
    from ...errors import InputError
    from ...files.inputs import open_regular

    onnx = _onnx()
    with open_regular(path, "an .onnx model") as f:
        size = os.fstat(f.fileno()).st_size
        if size > MAX_MODEL_BYTES:
            raise InputError(f"is {size} bytes, over protobuf's 2 GiB: not an ONNX model gruconv wrote", path=path)
        data = f.read()
    try:
        model = onnx.load_from_string(data)
        onnx.checker.check_model(model)
    except Exception as e:  # noqa: BLE001 - protobuf's DecodeError and onnx's ValidationError share no base
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        raise InputError(f"not a valid ONNX model ({first})", path=path) from None
    ops = [n for n in model.graph.node if n.op_type in OP.values()]
    x = next((i for i in model.graph.input if i.name == "x"), None)
    if not ops or x is None or len({n.op_type for n in ops}) != 1:
        raise InputError("not a gruconv stack model (needs input 'x' and GRU or LSTM operators of one kind)",
                         path=path)
    attrs = [{a.name: onnx.helper.get_attribute_value(a) for a in n.attribute} for n in ops]
    hidden = {a.get("hidden_size") for a in attrs}
    dirs = {a.get("direction", b"forward") for a in attrs}
    dims = x.type.tensor_type.shape.dim
    if len(hidden) != 1 or len(dirs) != 1 or len(dims) != 3 or not dims[2].dim_value:
        raise InputError("not a gruconv stack model (its layers differ, or 'x' is not (batch, time, input_size))",
                         path=path)
    direction = dirs.pop()
    direction = direction.decode() if isinstance(direction, bytes) else direction
    cell = {op: c for c, op in OP.items()}[ops[0].op_type]  # read() took only OP's operators
    shape = StackShape(int(dims[2].dim_value), int(hidden.pop()), len(ops), direction == "bidirectional",
                       cell=cell)
    name = model.doc_string.rsplit(": ", 1)[0] if ": " in model.doc_string else model.graph.name
    return model, shape, name
