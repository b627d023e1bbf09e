"""The sizes of a cuDNN node's stack, read from the graph's static shapes (no TensorFlow), and whether
the node can be converted.

Where each size comes from (``tensorflow/core/ops/cudnn_rnn_ops.cc``, TensorFlow 2.21: ``input`` is
``[T, B, I]`` and the states ``[L*D, B, H]``; ``CudnnRNNV3`` with ``time_major=false`` takes ``[B, T, I]``
and states shaped ``[B, L*D, H]``, whose memory cuDNN reads as ``[L*D, B, H]``:
:mod:`gruconv.tf.equations`):

* the input size ``I``: the input's static shape, dim 2;
* the units ``H`` and ``L*D``: ``input_h``'s static shape, or the node's own ``_output_shapes``
  (``output_h``, same layout), ``D`` from the ``direction`` attr;
* the params size: its producer's static shape (a ``Const``'s tensor shape, a placeholder's ``shape``, an
  op's ``_output_shapes``, a function argument's ``arg_attr``);
* a static shape is its producer's: a ``Placeholder``'s ``shape`` attr, a ``Const``'s tensor shape, any
  node's ``_output_shapes`` (TF 2 writes it into every SavedModel function node), a function argument's
  ``_output_shapes`` arg attr.

When ``I``, ``H`` and ``L`` are all known the params size must agree with
:func:`gruconv.model.cudnn_layout.params_size` (a ``Const`` whose size disagrees is refused); when some are
unknown and the params size is, :func:`gruconv.model.cudnn_layout.solve_shapes` fills them in and must
find exactly one shape.  ``input_mode="auto_select"`` is ``skip_input`` when ``I == H``, else
``linear_input`` (the op's documentation).

Refused (``problem``): ``rnn_tanh``/``rnn_relu`` (no such cell in :data:`gruconv.model.canonical.CELLS`),
``num_proj != 0`` (LSTM projections), ``is_training`` with ``dropout > 0`` (a random op), a dtype other
than half/float/double, and sizes not determined or ambiguous.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable, Optional

from ...model.cudnn_ops import CELL_OF_MODE, DIRECTIONS, DTYPES, INPUT_MODES, INPUTS, PACKING_OPS

#: Producer ops of ``params``, in words.
PARAMS_FROM = {
    "Const": "a Const", "Placeholder": "fed (a placeholder)", "PlaceholderWithDefault": "fed (a placeholder)",
    "VarHandleOp": "a variable", "ReadVariableOp": "a variable", "VariableV2": "a variable", "Variable": "a variable",
    "argument": "a function argument",
}


@dataclass(frozen=True)
class Producer:
    """What a scope knows of a node that feeds a cuDNN node: its op and the static shape of each output."""

    op: str
    shapes: tuple


def reference(ref: str, in_function: bool) -> tuple:
    """``(node, output position)`` of an input reference: ``name`` / ``name:K`` in a graph,
    ``arg`` / ``node:out_arg:K`` in a function body (``K``: the position within that output arg, the
    output position for the single-output-arg ops that feed cuDNN nodes)."""
    parts = ref.split(":")
    if in_function:
        return (parts[0], int(parts[2]) if len(parts) == 3 and parts[2].isdigit() else 0)
    return (parts[0], int(parts[1]) if len(parts) == 2 and parts[1].isdigit() else 0)


def producers(nodes, wanted: set) -> dict:
    """``{name: Producer}`` of the nodes named in ``wanted`` among ``nodes`` (NodeDef messages)."""
    from ..protos import tensor_shape

    out = {}
    for node in nodes:
        name = op = ""
        attrs: dict = {}
        for field, value in node.fields("name", "op", "attr"):
            if field == "name":
                name = value
                if name not in wanted:
                    break
            elif field == "op":
                op = value
            elif (key := value.get("key", "")) in ("_output_shapes", "shape", "value"):
                attrs[key] = value.get("value")
        if name not in wanted:
            continue
        shapes: tuple = ()
        if attrs.get("_output_shapes") is not None and attrs["_output_shapes"].get("list") is not None:
            shapes = tuple(tensor_shape(t) for t in attrs["_output_shapes"].get("list").each("shape"))
        elif op.startswith("Placeholder") and attrs.get("shape") is not None:
            shapes = (tensor_shape(attrs["shape"].get("shape")),)
        elif op == "Const" and attrs.get("value") is not None and attrs["value"].get("tensor") is not None:
            shapes = (tensor_shape(attrs["value"].get("tensor").get("tensor_shape")) or (),)
        out[name] = Producer(op, shapes)
    return out


def function_arguments(fdef) -> dict:
    """``{argument name: Producer("argument", (its shape,))}`` of a FunctionDef (``arg_attr``'s
    ``_output_shapes``, recorded by ``tf.function`` tracing)."""
    from ..protos import tensor_shape

    names = [a.get("name", "") for a in fdef.get("signature").each("input_arg")] if fdef.get("signature") else []
    shapes: dict = {}
    for entry in fdef.each("arg_attr"):
        value = entry.get("value")
        for a in (value.each("attr") if value is not None else ()):
            if a.get("key") == "_output_shapes" and a.get("value") is not None and a.get("value").get("list"):
                got = [tensor_shape(t) for t in a.get("value").get("list").each("shape")]
                shapes[entry.get("key", 0)] = got[0] if got else None
    return {n: Producer("argument", (shapes.get(i),)) for i, n in enumerate(names)}


def _dim(shape: Optional[tuple], i: int, rank: int) -> Optional[int]:
    return shape[i] if shape is not None and len(shape) == rank and shape[i] is not None else None


def determine(node, lookup: Callable):
    """``node`` with ``shape``, ``params_from`` and ``problem`` filled in; ``lookup(reference) ->
    (Producer or None, position)``."""
    from ...errors import InputError
    from ...model.canonical import CELLS, StackShape
    from ...model.cudnn_layout import params_size, solve_shapes

    def done(**kw):
        return dataclasses.replace(node, **kw)

    def shape_of(i: int):
        if i >= len(node.inputs):
            return None, None
        producer, pos = lookup(node.inputs[i])
        if producer is None:
            return None, None
        return (producer.shapes[pos] if pos < len(producer.shapes) else None), producer.op

    _, p_op = shape_of(INPUTS.index("params"))
    params_from = None if p_op is None else PARAMS_FROM.get(p_op, f"computed in the graph ({p_op})")
    if p_op in PACKING_OPS:
        params_from = f"packed in the graph ({p_op})"
    if node.rnn_mode not in CELL_OF_MODE:
        return done(params_from=params_from, problem=f"rnn_mode {node.rnn_mode!r} (only gru and lstm convert)")
    if node.num_proj:
        return done(params_from=params_from, problem=f"num_proj={node.num_proj} (LSTM projections do not convert)")
    if node.is_training and node.dropout > 0:
        return done(params_from=params_from, problem=f"is_training with dropout={node.dropout:g} (a random op)")
    dtype = DTYPES.get(1 if node.dtype is None else node.dtype)
    if dtype is None:
        return done(params_from=params_from, problem=f"dtype {node.dtype} (cuDNN RNNs run in half, float, double)")
    D = DIRECTIONS.get(node.direction, 1)
    tm = True if node.time_major is None else node.time_major
    x, _ = shape_of(INPUTS.index("input"))
    h, _ = shape_of(INPUTS.index("input_h"))
    p, _ = shape_of(INPUTS.index("params"))
    I = _dim(x, 2, 3)
    own_h = node.out_shapes[1] if node.out_shapes and len(node.out_shapes) > 1 else None
    H = _dim(h, 2, 3) or _dim(own_h, 2, 3)
    LD = _dim(h, 0 if tm else 1, 3) or _dim(own_h, 0 if tm else 1, 3)
    N = _dim(p, 0, 1)
    L = LD // D if LD is not None and LD % D == 0 else None
    mode = INPUT_MODES.get(node.input_mode, "linear")
    if node.input_mode == "auto_select" and I is not None and H is not None:
        mode = "skip" if I == H else "linear"
    try:
        if I is not None and H is not None and L is not None and mode is not None:
            shape = StackShape(I, H, L, D == 2, mode, dtype, CELL_OF_MODE[node.rnn_mode])
            if N is not None and params_size(shape) != N:
                return done(params_from=params_from, problem=(
                    f"params holds {N} values, a {shape.describe()} {CELLS[shape.cell].title} needs "
                    f"{params_size(shape)}"))
            return done(shape=shape, params_from=params_from)
        if N is None:
            unknown = [k for k, v in (("input size", I), ("units", H), ("layers", L), ("params size", N)) if v is None]
            return done(params_from=params_from, problem=f"sizes not determined ({', '.join(unknown)} unknown)")
        found = solve_shapes(N, dtype=dtype, units=H, input_size=I, num_layers=L, bidirectional=D == 2,
                             input_mode=mode, cell=CELL_OF_MODE[node.rnn_mode])
    except InputError as e:
        return done(params_from=params_from, problem=e.message)
    if len(found) != 1:
        what = "no" if not found else f"{len(found)} ({'; '.join(s.describe() for s in found[:3])})"
        return done(params_from=params_from, problem=f"sizes not determined: {what} stack shape(s) fit {N} params")
    return done(shape=found[0], params_from=params_from)
