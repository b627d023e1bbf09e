"""Everything gruconv knows about cuDNN's opaque GRU weight space, and nothing else.

Layout (cuDNN 9.19, measured; evidence: every file in ``shared/cudnn-golden``,
whose ``opaque`` was read back after copying each canonical matrix/bias to the
address ``cudnnGetRNNWeightParams(pseudoLayer, linLayerID)`` returned, and
``tests/test_cudnn_layout.py`` which reproduces all of them bit for bit):

1. all matrices first, pseudo-layer by pseudo-layer (layer 0 fw, layer 0 bw,
   layer 1 fw, ...), each pseudo-layer's matrices in ``linLayerID`` order
   0..5 (input-side r, z, h; recurrent-side r, z, h), each ``[H, in]``
   row-major;
2. then all biases in the same order, each ``[H]``;
3. no padding between regions.

``CUDNN_SKIP_INPUT`` (only when input size == units): layer 0 has no input
matrices (cuDNN returns none for linLayerID 0..2) but keeps all six biases.

TensorFlow never hard-coded this layout — ``CudnnRNNCanonicalToParams`` asks
cuDNN for each region's address — so a TF 1.x checkpoint's buffer has the
layout of the cuDNN it ran with.  That is why readers prefer canonical
tensors when a checkpoint has them, and cross-check this module's
``unpack`` against them.
"""

from __future__ import annotations

import math
from typing import Iterator, Optional

import numpy as np

from .canonical import DTYPES, GateParams, StackShape
from .errors import InputError

#: Default upper bound on the layer count tried by :func:`solve_shapes` when no
#: ``num_layers`` hint is given (every layer count is possible for tiny units).
MAX_LAYERS_SEARCHED = 8


def _regions(shape: StackShape):
    """Yield (pseudo_layer, kind, gate, count, dims) in storage order; kind is 'W', 'R', 'bW', 'bR'."""
    H = shape.units
    for layer in range(shape.num_layers):
        for direction in range(shape.num_directions):
            p = shape.pseudo_layer(layer, direction)
            if shape.has_input_weights(layer):
                n_in = shape.layer_input_size(layer)
                for g in range(3):
                    yield p, "W", g, H * n_in, (H, n_in)
            for g in range(3):
                yield p, "R", g, H * H, (H, H)
    for layer in range(shape.num_layers):
        for direction in range(shape.num_directions):
            p = shape.pseudo_layer(layer, direction)
            for kind in ("bW", "bR"):
                for g in range(3):
                    yield p, kind, g, H, (H,)


def params_size(shape: StackShape) -> int:
    """Number of scalars in the opaque buffer (``cudnnGetRNNWeightSpaceSize`` / itemsize)."""
    H, D = shape.units, shape.num_directions
    total = 0
    for layer in range(shape.num_layers):
        per_dir = 3 * H * H + 6 * H
        if shape.has_input_weights(layer):
            per_dir += 3 * H * shape.layer_input_size(layer)
        total += D * per_dir
    return total


def unpack(buffer: np.ndarray, shape: StackShape) -> list:
    """Split an opaque buffer into canonical :class:`GateParams`, one per pseudo-layer.

    The returned arrays are views of ``buffer`` where it is contiguous (no copy).
    """
    flat = np.asarray(buffer)
    if flat.ndim != 1:
        flat = flat.reshape(-1)
    expected = params_size(shape)
    if flat.size != expected:
        raise InputError(
            f"opaque buffer has {flat.size} values, a {shape.describe()} GRU needs {expected}"
        )
    parts: dict = {}
    offset = 0
    for p, kind, g, count, dims in _regions(shape):
        parts.setdefault((p, kind), [None, None, None])[g] = flat[offset : offset + count].reshape(dims)
        offset += count
    out = []
    for p in range(shape.num_pseudo_layers):
        w = parts.get((p, "W"))
        out.append(
            GateParams(
                input_weights=None if w is None else np.stack(w),
                recurrent_weights=np.stack(parts[(p, "R")]),
                input_bias=np.stack(parts[(p, "bW")]),
                recurrent_bias=np.stack(parts[(p, "bR")]),
            )
        )
    return out


def pack(params: list, shape: StackShape, dtype=None) -> np.ndarray:
    """Lay canonical :class:`GateParams` out as cuDNN's opaque buffer (1-D)."""
    dtype = np.dtype(dtype or shape.dtype)
    out = np.empty(params_size(shape), dtype=dtype)
    attr = {"W": "input_weights", "R": "recurrent_weights", "bW": "input_bias", "bR": "recurrent_bias"}
    offset = 0
    for p, kind, g, count, dims in _regions(shape):
        src = getattr(params[p], attr[kind])
        if src is None:
            raise InputError(f"pseudo-layer {p} has no {attr[kind]} to pack")
        block = np.asarray(src[g])
        if block.shape != dims:
            raise InputError(f"pseudo-layer {p} {attr[kind]}[{g}] has shape {block.shape}, expected {dims}")
        out[offset : offset + count] = block.reshape(-1)
        offset += count
    return out


def _candidates_for(size: int, D: int, L: int, mode: str, units_range, input_size: Optional[int]):
    for H in units_range:
        per_layer_common = D * (3 * H * H + 6 * H)
        upper = D * (L - 1) * 3 * H * D * H
        rest = size - L * per_layer_common - upper
        if mode == "skip":
            if rest == 0 and (input_size is None or input_size == H):
                yield H, H
            continue
        denom = D * 3 * H
        if rest > 0 and rest % denom == 0:
            I = rest // denom
            if input_size is None or input_size == I:
                yield I, H


def solve_shapes(
    size: int,
    *,
    dtype: str = "float32",
    units: Optional[int] = None,
    input_size: Optional[int] = None,
    num_layers: Optional[int] = None,
    bidirectional: Optional[bool] = None,
    input_mode: Optional[str] = None,
    max_layers: int = MAX_LAYERS_SEARCHED,
) -> list:
    """Every :class:`StackShape` whose :func:`params_size` equals ``size`` and fits the hints.

    Without a ``num_layers`` hint, layer counts 1..``max_layers`` are searched.
    Results are sorted by (layers, directions, units) so the first is the
    simplest explanation, but callers must treat more than one as ambiguous.
    """
    if dtype not in DTYPES:
        raise InputError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    if size <= 0:
        return []
    directions = [1, 2] if bidirectional is None else [2 if bidirectional else 1]
    layers = range(1, max_layers + 1) if num_layers is None else [num_layers]
    modes = ["linear", "skip"] if input_mode is None else [input_mode]
    out = []
    for L in layers:
        for D in directions:
            for mode in modes:
                if units is not None:
                    units_range = [units]
                else:
                    # 3H^2 + 6H <= size / (D L)  bounds H.
                    hmax = int(math.isqrt(max(size // (3 * D * L), 0))) + 1
                    units_range = range(1, hmax + 1)
                for I, H in _candidates_for(size, D, L, mode, units_range, input_size):
                    s = StackShape(I, H, L, D == 2, mode, dtype)
                    if params_size(s) == size:
                        out.append(s)
    out.sort(key=lambda s: (s.num_layers, s.num_directions, s.units, s.input_mode))
    return out


def iter_matrix_regions(shape: StackShape) -> Iterator[tuple]:
    """(pseudo_layer, linLayerID, offset, dims) of each matrix and bias, for reports and tests."""
    offset = 0
    for p, kind, g, count, dims in _regions(shape):
        lin = g + (3 if kind in ("R", "bR") else 0)
        yield p, ("bias" if kind.startswith("b") else "matrix"), lin, offset, dims
        offset += count
