"""Keras weight orientations of a GRU, and the one gate reorder between Keras and cuDNN.

Two Keras storage formats meet the canonical model (:mod:`gruconv.canonical`,
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

The gate reorder lives here alone: :data:`KERAS_GATE_ORDER` (per cell), and
the gate count comes from the cell table (:data:`gruconv.canonical.CELLS`).
"""

from __future__ import annotations

import numpy as np

from .canonical import CELLS, GateParams
from .errors import InputError

#: Per cell: Keras gate block k holds cuDNN gate ``KERAS_GATE_ORDER[cell][k]``.
#: GRU: Keras (z, r, h) = cuDNN (1, 0, 2) (tf_keras ``cudnn_gru.py`` packs r, z, h from
#: z, r, h blocks); the permutation is its own inverse.  LSTM: Keras (i, f, c, o) is
#: cuDNN's own order (tf_keras ``cudnn_lstm.py``).
KERAS_GATE_ORDER = {"gru": (1, 0, 2), "lstm": (0, 1, 2, 3)}
assert all(len(KERAS_GATE_ORDER[c]) == CELLS[c].num_gates for c in CELLS)
CUDNN_TO_KERAS = KERAS_GATE_ORDER["gru"]
_G = CELLS["gru"].num_gates


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


def from_cudnngru(kernel, recurrent_kernel, bias, *, where: str = "CuDNNGRU") -> GateParams:
    """Canonical params from a ``CuDNNGRU`` layer's stored (kernel, recurrent_kernel, bias)."""
    kernel = np.asarray(kernel)
    if kernel.ndim != 2 or kernel.shape[1] % _G:
        raise InputError(f"{where}: kernel has shape {kernel.shape}, expected (input_size, {_G}*units)")
    I, H = kernel.shape[0], kernel.shape[1] // _G
    recurrent_kernel = _check("recurrent_kernel", recurrent_kernel, (H, _G * H), where)
    bias = _check("bias", bias, (2 * _G * H,), where)
    b = bias.reshape(2, _G * H)
    return GateParams(
        input_weights=np.stack([blk.reshape(H, I) for blk in _blocks(kernel, 1)]),
        recurrent_weights=np.stack([blk.reshape(H, H) for blk in _blocks(recurrent_kernel, 1)]),
        input_bias=np.stack(_blocks(b[0], 0)),
        recurrent_bias=np.stack(_blocks(b[1], 0)),
    )


def to_cudnngru(p: GateParams) -> tuple:
    """Inverse of :func:`from_cudnngru` (used to build CuDNNGRU fixtures and planted errors)."""
    H = p.recurrent_weights.shape[1]
    if p.input_weights is None:
        raise InputError("CuDNNGRU has no skip-input mode")
    I = p.input_weights.shape[2]
    kernel = np.concatenate([p.input_weights[g].reshape(I, H) for g in CUDNN_TO_KERAS], axis=1)
    rkernel = np.concatenate([p.recurrent_weights[g].reshape(H, H) for g in CUDNN_TO_KERAS], axis=1)
    bias = np.concatenate([p.input_bias[g] for g in CUDNN_TO_KERAS] +
                          [p.recurrent_bias[g] for g in CUDNN_TO_KERAS])
    return kernel, rkernel, bias


def cudnngru_opaque(kernel, recurrent_kernel, bias) -> np.ndarray:
    """The parameter buffer a ``CuDNNGRU`` layer hands to cuDNN, built the way the layer builds it.

    tf_keras ``src/layers/rnn/cudnn_gru.py`` ``_process_batch``: six weight
    slices in cuDNN order (kernel[:, H:2H] (r), kernel[:, :H] (z),
    kernel[:, 2H:] (h), then the same of recurrent_kernel), each flattened
    as stored, then six bias slices (bias[H:2H], bias[:H], bias[2H:3H],
    bias[4H:5H], bias[3H:4H], bias[5H:]), concatenated
    (``gru_lstm_utils.canonical_to_params``).  This deliberately does not use
    :func:`from_cudnngru`: verification feeds this buffer to the reference so
    the converter's own reading of the layout is checked, not assumed.  The
    slice positions below are the layer's own literal ones, kept as written
    there for that reason.
    """
    k, rk, b = (np.asarray(a) for a in (kernel, recurrent_kernel, bias))
    H = rk.shape[0]
    weights = [k[:, H:2 * H], k[:, :H], k[:, 2 * H:], rk[:, H:2 * H], rk[:, :H], rk[:, 2 * H:]]
    biases = [b[H:2 * H], b[:H], b[2 * H:3 * H], b[4 * H:5 * H], b[3 * H:4 * H], b[5 * H:]]
    return np.concatenate([w.reshape(-1) for w in weights] + [v.reshape(-1) for v in biases])


def to_keras_gru(p: GateParams, input_size: int | None = None) -> list:
    """``[kernel (I, 3H), recurrent_kernel (H, 3H), bias (2, 3H)]`` for ``GRU(reset_after=True)``.

    A skip-input pseudo-layer (no input matrices) gets identity input blocks:
    cuDNN adds the input as is (``CUDNN_SKIP_INPUT``), which an identity
    kernel reproduces exactly.
    """
    H = p.recurrent_weights.shape[1]
    dtype = p.recurrent_weights.dtype
    if p.input_weights is None:
        eye = np.eye(input_size or H, H, dtype=dtype)
        kernel = np.concatenate([eye] * _G, axis=1)
    else:
        kernel = np.concatenate([p.input_weights[g].T for g in CUDNN_TO_KERAS], axis=1)
    rkernel = np.concatenate([p.recurrent_weights[g].T for g in CUDNN_TO_KERAS], axis=1)
    bias = np.stack([
        np.concatenate([p.input_bias[g] for g in CUDNN_TO_KERAS]),
        np.concatenate([p.recurrent_bias[g] for g in CUDNN_TO_KERAS]),
    ])
    return [np.ascontiguousarray(kernel), np.ascontiguousarray(rkernel), bias]


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


def describe_keras_layer(shape, options: dict, wrapper=None, merge_mode=None) -> str:
    """The Keras 3 layer one converted Keras cuDNN layer becomes, as text for reports."""
    title = shape.cell_spec.title
    opts = "".join(f", {k}=True" for k, v in options.items() if v)
    layer = (f"{title}(units={shape.units}, activation='tanh', recurrent_activation='sigmoid', "
             f"reset_after=True{opts})" if shape.cell == "gru" else
             f"{title}(units={shape.units}, activation='tanh', recurrent_activation='sigmoid'{opts})")
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
