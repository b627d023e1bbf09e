"""Keras weight orientations of a GRU and an LSTM, and the one gate reorder between Keras and cuDNN.

Every function is parameterised by cell (``"gru"``, ``"lstm"``; gate counts
from :data:`gruconv.model.canonical.CELLS`); the GRU-named ones are thin wrappers.
For GRU, two Keras storage formats meet the canonical model (:mod:`gruconv.model.canonical`,
cuDNN gate order r, z, h; matrices ``(units, in)``):

``CuDNNGRU`` (Keras 2.0.9–2.3.1, tf.keras 1.x/2.x, tf_keras)
    ``kernel (I, 3H)``, ``recurrent_kernel (H, 3H)``, ``bias (6H,)``; column
    blocks in Keras gate order z, r, h; bias = input-side z, r, h then
    recurrent-side z, r, h.  To run, the layer hands each gate's column block
    to cuDNN *flattened as stored, without a transpose* (tf_keras
    ``src/layers/rnn/cudnn_gru.py`` ``_process_batch`` calls
    ``gru_lstm_utils.canonical_to_params`` with ``transpose_weights=False``),
    and cuDNN reads that buffer as a row-major ``[H, in]`` matrix.  So the
    cuDNN matrix of gate g is ``kernel_block.reshape(H, I)`` — a memory
    reinterpretation, not ``kernel_block.T`` (they differ unless I == H and
    the block is symmetric).  Keras 2's own converter agrees
    (``keras/engine/saving.py`` ``_convert_rnn_weights``:
    ``kernel.T.reshape(kernel.shape, order='F')`` for input kernels).

``GRU(reset_after=True)`` (Keras 2.3+, Keras 3)
    ``kernel (I, 3H)`` and ``recurrent_kernel (H, 3H)`` map row vectors
    (``x @ kernel``), so each gate block is the canonical matrix transposed;
    ``bias (2, 3H)`` = [input-side z, r, h; recurrent-side z, r, h].

``CuDNNLSTM`` (same Keras versions) -> ``LSTM`` (Keras 3)
    ``kernel (I, 4H)``, ``recurrent_kernel (H, 4H)``, ``bias (8H,)``, gate
    order i, f, c, o (= cuDNN's), packed for cuDNN exactly as CuDNNGRU packs
    (flattened, not transposed).  Keras ``LSTM``: same kernel shapes mapping
    row vectors, one ``bias (4H,)`` = the sum of cuDNN's two biases
    (:func:`to_keras_lstm`).  Evidence: ``docs/lstm-format-facts.md``.

The gate reorder lives here alone: :data:`KERAS_GATE_ORDER` (per cell), and
the gate count comes from the cell table (:data:`gruconv.model.canonical.CELLS`).
"""

from __future__ import annotations

import numpy as np

from .canonical import CELLS, GateParams
from ..errors import InputError

#: Per cell: Keras gate block k holds cuDNN gate ``KERAS_GATE_ORDER[cell][k]``.
#: GRU: Keras (z, r, h) = cuDNN (1, 0, 2) (tf_keras ``cudnn_gru.py`` packs r, z, h from
#: z, r, h blocks); the permutation is its own inverse.  LSTM: Keras (i, f, c, o) is
#: cuDNN's own order (tf_keras ``cudnn_lstm.py``).
KERAS_GATE_ORDER = {"gru": (1, 0, 2), "lstm": (0, 1, 2, 3)}

#: The weights of one direction of a Keras recurrent layer, in the order Keras stores them (and
#: :func:`to_keras` returns them): the same for CuDNNGRU/CuDNNLSTM and GRU/LSTM.
WEIGHT_ROLES = ("kernel", "recurrent_kernel", "bias")
assert all(len(KERAS_GATE_ORDER[c]) == CELLS[c].num_gates for c in CELLS)
#: Per cell: the Keras 2 / tf.keras / tf_keras cuDNN-only layer class that stores it (tf_keras
#: ``layers/cudnn_recurrent.py``), the class that holds a cell back (readers), and the Keras 3 layer it
#: becomes.  The one copy of these names: readers and ``keras3/legacy.py`` import them.
CUDNN_KERAS_CLASS = {"gru": "CuDNNGRU", "lstm": "CuDNNLSTM"}
CELL_OF_CUDNN_CLASS = {cls: cell for cell, cls in CUDNN_KERAS_CLASS.items()}
KERAS3_CLASS = {"gru": "GRU", "lstm": "LSTM"}
assert set(CUDNN_KERAS_CLASS) == set(KERAS3_CLASS) == set(CELLS)


def _blocks(a: np.ndarray, axis: int, cell: str = "gru") -> list:
    """Split a Keras ``(..., G*H)`` tensor into its gate blocks, in cuDNN order."""
    order = KERAS_GATE_ORDER[cell]
    parts = np.split(np.asarray(a), len(order), axis=axis)
    return [parts[k] for k in order]


def _check(name: str, arr, expected: tuple, where: str) -> np.ndarray:
    arr = np.asarray(arr)
    if tuple(arr.shape) != tuple(expected):
        raise InputError(f"{where}: {name} has shape {tuple(arr.shape)}, expected {tuple(expected)}")
    return arr


def from_cudnn(kernel, recurrent_kernel, bias, *, cell: str = "gru", where: str | None = None) -> GateParams:
    """Canonical params from a Keras ``CuDNNGRU``/``CuDNNLSTM`` layer's stored (kernel, recurrent_kernel, bias).

    ``kernel (I, G*H)``, ``recurrent_kernel (H, G*H)``, ``bias (2*G*H,)``;
    gate block g's cuDNN input matrix is ``block.reshape(H, I)`` (the layer
    flattens blocks as stored), its recurrent matrix the block as stored,
    and the bias is input side then recurrent side, Keras gate order each.
    """
    G = CELLS[cell].num_gates
    where = where or CUDNN_KERAS_CLASS[cell]
    kernel = np.asarray(kernel)
    if kernel.ndim != 2 or kernel.shape[1] % G:
        raise InputError(f"{where}: kernel has shape {kernel.shape}, expected (input_size, {G}*units)")
    I, H = kernel.shape[0], kernel.shape[1] // G
    recurrent_kernel = _check("recurrent_kernel", recurrent_kernel, (H, G * H), where)
    bias = _check("bias", bias, (2 * G * H,), where)
    b = bias.reshape(2, G * H)
    return GateParams(
        input_weights=np.stack([blk.reshape(H, I) for blk in _blocks(kernel, 1, cell)]),
        recurrent_weights=np.stack([blk.reshape(H, H) for blk in _blocks(recurrent_kernel, 1, cell)]),
        input_bias=np.stack(_blocks(b[0], 0, cell)),
        recurrent_bias=np.stack(_blocks(b[1], 0, cell)),
    )


def to_cudnn(p: GateParams, cell: str = "gru") -> tuple:
    """Inverse of :func:`from_cudnn` (used to build fixtures, planted errors and the verify reference)."""
    order = KERAS_GATE_ORDER[cell]
    H = p.recurrent_weights.shape[1]
    if p.input_weights is None:
        raise InputError(f"{CUDNN_KERAS_CLASS[cell]} has no skip-input mode")
    I = p.input_weights.shape[2]
    kernel = np.concatenate([p.input_weights[g].reshape(I, H) for g in order], axis=1)
    rkernel = np.concatenate([p.recurrent_weights[g].reshape(H, H) for g in order], axis=1)
    bias = np.concatenate([p.input_bias[g] for g in order] + [p.recurrent_bias[g] for g in order])
    return kernel, rkernel, bias


#: The order in which each tf_keras cuDNN layer's ``_process_batch`` hands its Keras gate
#: blocks (``kernel[:, k*H:(k+1)*H]``, the same for the recurrent kernel and each bias half)
#: to ``canonical_to_params``, transcribed from the layers' literal slices:
#: ``cudnn_gru.py`` passes blocks 1, 0, 2 (``kernel[:, H:2H]``, ``kernel[:, :H]``,
#: ``kernel[:, 2H:]``); ``cudnn_lstm.py`` passes 0, 1, 2, 3.  Written out here rather than
#: taken from :data:`KERAS_GATE_ORDER` on purpose: verification feeds this buffer to the
#: reference so the converter's reading of the layout is checked, not assumed.
TF_KERAS_PACK_ORDER = {"gru": (1, 0, 2), "lstm": (0, 1, 2, 3)}


def cudnn_opaque(kernel, recurrent_kernel, bias, cell: str = "gru") -> np.ndarray:
    """The parameter buffer a Keras ``CuDNNGRU``/``CuDNNLSTM`` layer hands to cuDNN, built as the layer builds it.

    tf_keras ``src/layers/rnn/cudnn_{gru,lstm}.py`` ``_process_batch``: the G
    kernel blocks in :data:`TF_KERAS_PACK_ORDER`, then the G recurrent-kernel
    blocks, each flattened as stored (``gru_lstm_utils.canonical_to_params``,
    ``transpose_weights=False``), then the G input-side bias blocks and the G
    recurrent-side ones in the same order, concatenated.  This deliberately
    does not use :func:`from_cudnn` (see :data:`TF_KERAS_PACK_ORDER`).
    """
    k, rk, b = (np.asarray(a) for a in (kernel, recurrent_kernel, bias))
    H = rk.shape[0]
    order = TF_KERAS_PACK_ORDER[cell]
    G = len(order)
    blk = lambda a, j: a[..., j * H:(j + 1) * H]  # noqa: E731
    weights = [blk(k, j) for j in order] + [blk(rk, j) for j in order]
    biases = [blk(b[:G * H], j) for j in order] + [blk(b[G * H:], j) for j in order]
    return np.concatenate([w.reshape(-1) for w in weights] + [v.reshape(-1) for v in biases])


def _keras_kernels(p: GateParams, cell: str, input_size: int | None) -> tuple:
    """Keras ``kernel (I, G*H)`` and ``recurrent_kernel (H, G*H)``: per gate the canonical matrix
    transposed (Keras maps row vectors), blocks in Keras gate order.  A skip-input pseudo-layer
    (no input matrices) gets identity input blocks: cuDNN adds the input as is
    (``CUDNN_SKIP_INPUT``), which an identity kernel reproduces exactly."""
    order = KERAS_GATE_ORDER[cell]
    H = p.recurrent_weights.shape[1]
    dtype = p.recurrent_weights.dtype
    if p.input_weights is None:
        eye = np.eye(input_size or H, H, dtype=dtype)
        kernel = np.concatenate([eye] * len(order), axis=1)
    else:
        kernel = np.concatenate([p.input_weights[g].T for g in order], axis=1)
    rkernel = np.concatenate([p.recurrent_weights[g].T for g in order], axis=1)
    return np.ascontiguousarray(kernel), np.ascontiguousarray(rkernel)


def to_keras_gru(p: GateParams, input_size: int | None = None) -> list:
    """``[kernel (I, 3H), recurrent_kernel (H, 3H), bias (2, 3H)]`` for ``GRU(reset_after=True)``.

    A skip-input pseudo-layer (no input matrices) gets identity input blocks.
    """
    order = KERAS_GATE_ORDER["gru"]
    kernel, rkernel = _keras_kernels(p, "gru", input_size)
    bias = np.stack([
        np.concatenate([p.input_bias[g] for g in order]),
        np.concatenate([p.recurrent_bias[g] for g in order]),
    ])
    return [kernel, rkernel, bias]


def to_keras_lstm(p: GateParams, input_size: int | None = None) -> list:
    """``[kernel (I, 4H), recurrent_kernel (H, 4H), bias (4H,)]`` for Keras ``LSTM``.

    Keras's LSTM has one bias; cuDNN adds both of its biases to every gate's
    pre-activation, so the bias is ``bW + bR``, summed in float64 and rounded
    once to the weights' dtype.  In float32 that sum can differ in the last
    bit from a float32 sum (what Keras's own converter does, ``np.sum`` in the
    file's dtype): at most half a unit in the last place of the bias, ~6e-8
    relative; ``docs/lstm-format-facts.md`` measured 1.4e-8 output error from
    float32 summing vs 1.7e-16 from float64 summing, against cuDNN in float64.
    The float32 cuDNN run of the original adds the two biases in float32 in
    its own order, so a bit-exact match is not possible either way; the
    rounded sum is the nearest float to the exact one.
    """
    order = KERAS_GATE_ORDER["lstm"]
    kernel, rkernel = _keras_kernels(p, "lstm", input_size)
    dtype = p.recurrent_weights.dtype
    bias = np.concatenate([p.input_bias[g].astype(np.float64) + p.recurrent_bias[g].astype(np.float64)
                           for g in order]).astype(dtype)
    return [kernel, rkernel, bias]


#: per cell: the Keras 3 layer's stored weights from one canonical pseudo-layer
TO_KERAS = {"gru": to_keras_gru, "lstm": to_keras_lstm}

#: Rows of the Keras 3 layer's bias: a ``reset_after=True`` GRU keeps cuDNN's input and recurrent biases
#: apart, ``(2, 3*units)``; an LSTM has one bias, ``(4*units,)``, their sum (:func:`to_keras_gru`,
#: :func:`to_keras_lstm`).  Readers and reports ask this table, never the cell's name.
KERAS3_BIAS_ROWS = {"gru": 2, "lstm": 1}


def keras3_bias_shape(cell: str, units) -> tuple:
    """The Keras 3 bias shape of ``cell`` (``units`` may be a string such as ``"units"`` for messages)."""
    G = len(KERAS_GATE_ORDER[cell])
    width = G * units if isinstance(units, int) else f"{G}*{units}"
    return (2, width) if KERAS3_BIAS_ROWS[cell] == 2 else (width,)


def to_keras(p: GateParams, cell: str = "gru", input_size: int | None = None) -> list:
    """The Keras 3 ``GRU``/``LSTM`` weights of one pseudo-layer (:data:`TO_KERAS`)."""
    return TO_KERAS[cell](p, input_size)


#: GRU settings that make a Keras GRU compute cuDNN's function (and keep its
#: cuDNN fast path on a GPU).  Always written explicitly: GRU defaults changed
#: across versions (``hard_sigmoid`` in Keras 2.0–2.2, ``reset_after=False``
#: until 2.3), and Keras 2's converter never checked ``recurrent_activation``.
CUDNN_COMPATIBLE_GRU = {
    "activation": "tanh",
    "recurrent_activation": "sigmoid",
    "use_bias": True,
    "reset_after": True,
    "dropout": 0.0,
    "recurrent_dropout": 0.0,
    "unroll": False,
}


#: LSTM settings that make a Keras LSTM compute cuDNN's function (and keep its cuDNN fast
#: path: Keras 3 ``_do_lstm_arguments_support_cudnn`` wants tanh, sigmoid, use_bias, no unroll).
#: Keras 2's LSTM defaulted to ``hard_sigmoid`` through 2.2.4; always written explicitly.
#: ``unit_forget_bias`` is not here: it only initializes, and is kept from the original config.
CUDNN_COMPATIBLE_LSTM = {
    "activation": "tanh",
    "recurrent_activation": "sigmoid",
    "use_bias": True,
    "dropout": 0.0,
    "recurrent_dropout": 0.0,
    "unroll": False,
}

#: per cell: the settings above, and the Keras (2 / tf_keras) cuDNN layer class it comes from
CUDNN_COMPATIBLE = {"gru": CUDNN_COMPATIBLE_GRU, "lstm": CUDNN_COMPATIBLE_LSTM}


def describe_keras_layer(shape, options: dict, wrapper=None, merge_mode=None) -> str:
    """The Keras 3 layer one converted Keras cuDNN layer becomes, as text for reports."""
    title = shape.cell_spec.title
    opts = "".join(f", {k}=True" for k, v in options.items() if v)
    fixed = CUDNN_COMPATIBLE[shape.cell]  # the settings that make the layer cuDNN's function (above)
    shown = "".join(f", {k}={fixed[k]!r}" for k in ("activation", "recurrent_activation", "reset_after") if k in fixed)
    layer = f"{title}(units={shape.units}{shown}{opts})"
    if wrapper is None:
        return layer
    if wrapper == "Bidirectional":
        return f"Bidirectional({layer}, merge_mode={merge_mode!r})"
    return f"{wrapper}({layer})"


def describe_keras_stack(shape) -> str:
    """The Keras 3 layers a converted cuDNN stack (TF1) becomes, as text for reports."""
    layer = f"{shape.cell_spec.title}({shape.units})"
    if shape.bidirectional:
        layer = f"Bidirectional({layer}, merge_mode='concat')"
    text = f"{shape.num_layers} x {layer}"
    if shape.input_mode == "skip":
        text += " (skip input: layer 0 input kernel = identity)"
    return text
