"""Every OpenVINO call of the ``openvino`` writer (one module, so it can move under a framework boundary whole).

The IR of one stack (and of a whole model, through the whole-graph ONNX writer) is read by OpenVINO's own ONNX frontend from the stack's ONNX model
(:func:`gruconv.writers.onnx.graph.build`: the one stack description of the non-Keras targets, one
``GRU(linear_before_reset=1)`` / ``LSTM`` operator per layer), which makes them ``GRUSequence
(linear_before_reset=True)`` / ``LSTMSequence`` (OpenVINO 2026.4.1, measured).

Measured here (OpenVINO 2026.4.1, TensorFlow 2.21, Keras 3.15.1, this CPU), the facts this module rests on:

* A bidirectional layer's ``Split -> Squeeze -> Concat`` (the ONNX stack model's ``[T, D, B, H] -> [T, B, D*H]``)
  makes ``ov.convert_model`` and the CPU plugin's compile throw in ``SplitSqueezeConcatFusion`` ("to_shape was
  called on a dynamic shape") when batch and time are dynamic: :func:`_unsplit` replaces the pattern by the same
  function as ``Transpose(0, 2, 1, 3) + Reshape(0, 0, -1)`` (the ONNX writer's docstring: the two are equal) in
  the OpenVINO model, before anything is saved.  ``Core.read_model`` of the ONNX (no MOC passes yet) is used
  for that reason, not ``ov.convert_model``.
* The Keras 3 route (``model.export`` to a CPU SavedModel, then ``ov.convert_model``) gives a ``Loop`` per
  recurrent layer, not ``GRUSequence``, for every Keras 3 GRU/LSTM tried (plain, Bidirectional, masked,
  ``return_state``, fixed batch and time); the CPU plugin runs it as a ``TensorIterator``; ``ov.convert_model``
  of the Keras model object fails on ``TensorList``.  So a full Keras model goes through its graph traced with
  cuDNN ops and gruconv's whole-graph ONNX writer instead (:mod:`.keras_graph`), which gives the native ops.
* OpenVINO's CPU plugin ignores ``sequence_lens`` (padded steps computed, final state past each sequence's end):
  the writer refuses ``--mask-input``.
* Precision: the CPU plugin's default inference precision may be bf16 (CPUs with bf16 support), 1-2e-3 off;
  ``ov.save_model``'s default fp16 weights, ~2e-4.  Hence :data:`CONFIG` and ``compress_to_fp16=False``,
  and the checks of :func:`check` before the IR is placed.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from ...errors import OutputError, UnsupportedError

#: The compile configuration of every run: float32 inference (the CPU plugin's default may be bf16).
CONFIG = {"INFERENCE_PRECISION_HINT": "f32"}
#: The OpenVINO op each cell must become, and the attributes it must have (cuDNN's GRU is ONNX's
#: ``linear_before_reset=1``, OpenVINO's ``linear_before_reset=True``).  A cell missing here is a KeyError.
SEQUENCE_OPS = {"gru": ("GRUSequence", {"linear_before_reset": True}), "lstm": ("LSTMSequence", {})}
#: Where gruconv's facts about the IR live in its ``rt_info`` (saved in the ``.xml``).
RT_KEY = ["gruconv", "stack"]
#: The one line without the extra.
MISSING = "the OpenVINO output needs OpenVINO (pip install 'gruconv[openvino]')"


def openvino():
    """The ``openvino`` module, or the one line naming the extra (exit 3)."""
    try:
        import openvino as ov
    except ImportError:
        raise UnsupportedError(MISSING) from None
    return ov


def _unsplit(ov, model) -> int:
    """Replace every ``Split(axis=1) -> Squeeze(axis=1) x D -> Concat(axis=2)`` of a GRU/LSTM sequence's output
    by ``Transpose(0, 2, 1, 3) -> Reshape(0, 0, -1)`` (the same function: ``[T, D, B, H] -> [T, B, D*H]``, forward
    half first).  Returns how many were replaced."""
    from openvino import opset13 as ops

    done = 0
    for node in list(model.get_ordered_ops()):
        if node.get_type_name() != "Concat":
            continue
        sources = [node.input_value(i).get_node() for i in range(node.get_input_size())]
        if len(sources) < 2 or any(s.get_type_name() != "Squeeze" for s in sources):
            continue
        splits = {id(s.input_value(0).get_node()): s.input_value(0).get_node() for s in sources}
        if len(splits) != 1:
            continue
        split = next(iter(splits.values()))
        if split.get_type_name() not in ("Split", "VariadicSplit"):
            continue
        y = split.input_value(0)  # [T, D, B, H]
        moved = ops.transpose(y, ops.constant(np.array([0, 2, 1, 3], np.int64)))
        merged = ops.reshape(moved, ops.constant(np.array([0, 0, -1], np.int64)), special_zero=True)
        merged.set_friendly_name(node.get_friendly_name())
        for target in node.output(0).get_target_inputs():
            target.replace_source_output(merged.output(0))
        merged.output(0).add_names(node.output(0).get_names())
        done += 1
    if done:
        model.validate_nodes_and_infer_types()
    return done


def stack_model(onnx_path: Path, facts: dict):
    """The OpenVINO model of one stack's ONNX model (written at ``onnx_path``), ``facts`` (the stack's name and
    :class:`~gruconv.model.canonical.StackShape` fields) in its ``rt_info``."""
    ov = openvino()
    model = ov.Core().read_model(str(onnx_path))
    _unsplit(ov, model)
    model.set_rt_info(json.dumps(facts, sort_keys=True), RT_KEY)
    return model


def graph_model(onnx_path: Path, facts: dict):
    """The OpenVINO model of a whole graph's ONNX model (written at ``onnx_path``), ``facts`` in its
    ``rt_info``."""
    ov = openvino()
    try:
        model = ov.Core().read_model(str(onnx_path))
    except RuntimeError as e:
        raise OutputError(f"OpenVINO's ONNX frontend cannot read the model's ONNX ({_first(e)}); nothing written",
                          path=facts.get("where")) from None
    _unsplit(ov, model)
    model.set_rt_info(json.dumps(facts, sort_keys=True), RT_KEY)
    return model


def check_graph_ops(model, layers: dict, where) -> None:
    """A whole model's IR holds, per cell, exactly ``layers[cell]`` native sequence ops with the attributes
    :data:`SEQUENCE_OPS` names, and nothing else recurrent; else one line, nothing placed."""
    found = sequence_ops(model)
    good = {}
    for cell, (want, attrs) in SEQUENCE_OPS.items():
        good[cell] = sum(1 for t, a in found if t == want and all(a.get(k) == v for k, v in attrs.items()))
    expected = {c: n for c, n in layers.items() if n}
    if not expected or {c: n for c, n in good.items() if n} != expected or sum(good.values()) != len(found):
        seen = ", ".join(t for t, _ in found) or "none"
        want = ", ".join(f"{n} x {SEQUENCE_OPS[c][0]}" for c, n in expected.items()) or "a GRU/LSTM"
        raise OutputError(f"the OpenVINO IR would not hold {want} with cuDNN's equations but {seen}; nothing written",
                          path=where)


def input_order(model, names: list) -> list:
    """For each IR input, the index of the Keras model input it is (by name, ``:0`` dropped; by position
    where the names do not say)."""
    ir_names = [p.get_any_name().split(":")[0] for p in model.inputs]
    if sorted(ir_names) == sorted(names):
        return [names.index(n) for n in ir_names]
    return list(range(len(ir_names)))


def run_model(compiled_model, feed: list) -> list:
    """One inference of a whole model's IR: ``feed`` in the IR's input order; its outputs in order."""
    out = compiled_model([np.ascontiguousarray(a) for a in feed])
    return [np.asarray(out[p]) for p in compiled_model.outputs]


def probe_model(compiled_model, where) -> None:
    """The output contract's one run of a whole model's IR: zeros (integers: ones), every unknown dimension 1
    (the batch) or 2 (time and others); else one line, nothing placed."""
    feed = []
    for p in compiled_model.inputs:
        shape = [(1 if i == 0 else 2) if d.is_dynamic else d.get_length() for i, d in enumerate(p.get_partial_shape())]
        dtype = p.get_element_type().to_dtype()
        feed.append(np.ones(shape, dtype) if np.issubdtype(dtype, np.integer) else np.zeros(shape, dtype))
    try:
        outs = run_model(compiled_model, feed)
    except RuntimeError as e:
        raise OutputError(f"the OpenVINO IR does not run on the CPU plugin ({_first(e)}); nothing written",
                          path=where) from None
    if len(outs) != len(compiled_model.outputs):
        raise OutputError(f"the OpenVINO IR gave {len(outs)} outputs for {len(compiled_model.outputs)}; nothing written",
                          path=where)


def sequence_ops(model) -> list:
    """``[(type name, attributes)]`` of the model's recurrent operators (sequences, loops, iterators)."""
    kinds = {"GRUSequence", "LSTMSequence", "RNNSequence", "Loop", "TensorIterator", "GRUCell", "LSTMCell"}
    return [(n.get_type_name(), n.get_attributes()) for n in model.get_ordered_ops() if n.get_type_name() in kinds]


def check_ops(model, cell: str, layers: int, where) -> None:
    """The IR holds exactly ``layers`` native sequence ops of ``cell`` with the attributes
    :data:`SEQUENCE_OPS` names, and nothing else recurrent; else one line, nothing placed."""
    want, attrs = SEQUENCE_OPS[cell]
    found = sequence_ops(model)
    good = [t for t, a in found if t == want and all(a.get(k) == v for k, v in attrs.items())]
    if len(good) != layers or len(found) != layers:
        seen = ", ".join(f"{t}({', '.join(f'{k}={a.get(k)}' for k in attrs)})" for t, a in found) or "none"
        raise OutputError(f"the OpenVINO IR would not hold {layers} x {want}"
                          f"({', '.join(f'{k}={v}' for k, v in attrs.items())}) but {seen}; nothing written", path=where)


def check_float32(model, where) -> None:
    """Every floating constant of the IR is float32 (``ov.save_model``'s default would store float16)."""
    low = sorted({str(n.get_output_element_type(0)) for n in model.get_ordered_ops()
                  if n.get_type_name() == "Constant" and str(n.get_output_element_type(0)) in ("<Type: 'float16'>",
                                                                                                 "<Type: 'bfloat16'>")})
    if low:
        raise OutputError(f"the OpenVINO IR would hold {', '.join(low)} weights, not float32; nothing written",
                          path=where)


def save(model, xml: Path, *, compress_to_fp16: bool = False) -> None:
    """``model`` as ``xml`` and its ``.bin`` beside it (same stem), float32 weights."""
    openvino().save_model(model, str(xml), compress_to_fp16=compress_to_fp16)


def read(xml: Path, where=None):
    """The OpenVINO model of an IR, or one line."""
    from ...errors import InputError

    ov = openvino()
    try:
        return ov.Core().read_model(str(xml))
    except RuntimeError as e:  # noqa: PERF203 - OpenVINO's one exception type, at its call
        raise InputError(f"OpenVINO cannot read this IR ({_first(e)})", path=where or xml) from None


def compiled(model, where, precision: str = "f32"):
    """``model`` compiled on the CPU plugin at ``precision`` (:data:`CONFIG`); a failure is one line."""
    ov = openvino()
    try:
        return ov.Core().compile_model(model, "CPU", dict(CONFIG, INFERENCE_PRECISION_HINT=precision))
    except RuntimeError as e:
        raise OutputError(f"OpenVINO's CPU plugin cannot compile the IR ({_first(e)}); nothing written",
                          path=where) from None


def facts_of(model, where) -> dict:
    """gruconv's facts about the stack an IR holds (:func:`stack_model`), or one line."""
    from ...errors import InputError

    try:
        return json.loads(model.get_rt_info(RT_KEY).astype(str))
    except (RuntimeError, ValueError, TypeError, AttributeError):
        raise InputError("not an OpenVINO IR gruconv wrote (no gruconv stack facts in its rt_info)",
                         path=where) from None


def run(compiled_model, x_tm, h0=None, c0=None, lengths=None) -> tuple:
    """One inference of a stack IR in :func:`gruconv.verify.reference.oracle.run_stack`'s layout: ``x_tm``
    time-major ``(T, B, I)``; ``h0``/``c0`` ``(layers*dirs, B, H)`` (zeros when the IR has the inputs and
    none are given); ``lengths`` ``(B,)``.  Returns ``(y (T, B, dirs*H), h_n, c_n or None)``."""
    names = {p.get_any_name(): p for p in compiled_model.inputs}
    x = np.asarray(x_tm, np.float32)
    T, B = x.shape[0], x.shape[1]
    feed = {"x": np.ascontiguousarray(x.transpose(1, 0, 2))}
    for key, val in (("h0", h0), ("c0", c0)):
        if key in names:
            if val is None:
                val = np.zeros((names[key].get_partial_shape()[0].get_length(), B,
                                names[key].get_partial_shape()[2].get_length()), np.float32)
            feed[key] = np.ascontiguousarray(val, np.float32)
    if "sequence_lens" in names:
        feed["sequence_lens"] = np.full(B, T, np.int32) if lengths is None else np.asarray(lengths).astype(np.int32)
    out = compiled_model(feed)
    got = {}
    for port, value in out.items():  # an output may carry several tensor names (a 1-layer stack's h_n is Y_h_l0)
        for name in ("y", "h_n", "c_n"):
            if name in port.get_names():
                got[name] = np.asarray(value)
    return np.ascontiguousarray(got["y"].transpose(1, 0, 2)), got["h_n"], got.get("c_n")


def probe(compiled_model, where) -> None:
    """The output contract's one run: the IR runs once on a probe input (zeros, batch 1, 2 steps) and gives
    finite numbers of the expected shapes; else one line, nothing placed."""
    input_size = compiled_model.input("x").get_partial_shape()[2].get_length()
    try:
        y, h, c = run(compiled_model, np.zeros((2, 1, input_size), np.float32))
    except RuntimeError as e:
        raise OutputError(f"the OpenVINO IR does not run on the CPU plugin ({_first(e)}); nothing written",
                          path=where) from None
    if y.shape[:2] != (2, 1) or not np.isfinite(y).all():
        raise OutputError(f"the OpenVINO IR ran on a probe input and gave y of shape {y.shape}; nothing written",
                          path=where)


def version() -> str:
    return openvino().__version__.split("-")[0]


def _first(e: BaseException) -> str:
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip() and not ln.strip().startswith("Exception from")]
    return (lines[0] if lines else type(e).__name__)[:200]


def move(src: Path, dst: Path) -> None:
    """``src`` to ``dst`` (both beside the output: one filesystem)."""
    os.replace(src, dst)
