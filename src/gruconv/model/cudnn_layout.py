"""Everything gruconv knows about cuDNN's opaque RNN weight space, and nothing else.

Layout (cuDNN 9.19, measured; evidence: every file in ``shared/cudnn-golden``,
whose ``opaque`` was read back after copying each canonical matrix/bias to the
address ``cudnnGetRNNWeightParams(pseudoLayer, linLayerID)`` returned, and
``tests/model/test_cudnn_layout.py`` which reproduces all of them bit for bit):

1. all matrices first, pseudo-layer by pseudo-layer (layer 0 fw, layer 0 bw,
   layer 1 fw, ...), each pseudo-layer's matrices in ``linLayerID`` order
   0..2G-1 (input side, gates in the cell's order, then recurrent side; for
   GRU r, z, h; r, z, h), each ``[H, in]`` row-major;
2. then all biases in the same order, each ``[H]``;
3. no padding between regions.

``CUDNN_SKIP_INPUT`` (only when input size == units): layer 0 has no input
matrices (cuDNN returns none for linLayerID 0..G-1) but keeps all 2G biases.

The gate count G comes from the cell table (:data:`gruconv.model.canonical.CELLS`);
nothing here is specific to one cell.

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

from .canonical import CELLS, DTYPES, GateParams, StackShape
from ..errors import InputError

#: Default upper bound on the layer count tried by :func:`solve_shapes` when no
#: ``num_layers`` hint is given (every layer count is possible for tiny units).
MAX_LAYERS_SEARCHED = 8


def _regions(shape: StackShape):
    """Yield (pseudo_layer, kind, gate, count, dims) in storage order; kind is 'W', 'R', 'bW', 'bR'."""
    H, G = shape.units, shape.gates
    for layer in range(shape.num_layers):
        for direction in range(shape.num_directions):
            p = shape.pseudo_layer(layer, direction)
            if shape.has_input_weights(layer):
                n_in = shape.layer_input_size(layer)
                for g in range(G):
                    yield p, "W", g, H * n_in, (H, n_in)
            for g in range(G):
                yield p, "R", g, H * H, (H, H)
    for layer in range(shape.num_layers):
        for direction in range(shape.num_directions):
            p = shape.pseudo_layer(layer, direction)
            for kind in ("bW", "bR"):
                for g in range(G):
                    yield p, kind, g, H, (H,)


def params_size(shape: StackShape) -> int:
    """Number of scalars in the opaque buffer (``cudnnGetRNNWeightSpaceSize`` / itemsize): the sum
    of the regions :func:`_regions` lays out, so size and layout cannot disagree."""
    return sum(count for _, _, _, count, _ in _regions(shape))


def unpack(buffer: np.ndarray, shape: StackShape) -> list:
    """Split an opaque buffer into canonical :class:`GateParams`, one per pseudo-layer.

    Each returned array is a fresh stack of the gate blocks (a copy); for
    mapped zero-copy views see ``readers.tf1.reading``.
    """
    flat = np.asarray(buffer)
    if flat.ndim != 1:
        flat = flat.reshape(-1)
    expected = params_size(shape)
    if flat.size != expected:
        raise InputError(
            f"opaque buffer has {flat.size} values, a {shape.describe()} {shape.cell_spec.title} "
            f"needs {expected}"
        )
    parts: dict = {}
    offset = 0
    for p, kind, g, count, dims in _regions(shape):
        parts.setdefault((p, kind), [None] * shape.gates)[g] = flat[offset : offset + count].reshape(dims)
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


def _candidates_for(size: int, G: int, D: int, L: int, mode: str, units_range, input_size: Optional[int]):
    """(input_size, units) pairs whose buffer size is ``size``: each pseudo-layer holds G recurrent
    matrices and 2G biases, layers above 0 G input matrices of width D*H, layer 0 G of width I."""
    for H in units_range:
        per_layer_common = D * (G * H * H + 2 * G * H)
        upper = D * (L - 1) * G * H * D * H
        rest = size - L * per_layer_common - upper
        if mode == "skip":
            if rest == 0 and (input_size is None or input_size == H):
                yield H, H
            continue
        denom = D * G * H
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
    cell: Optional[str] = None,
) -> list:
    """Every :class:`StackShape` whose :func:`params_size` equals ``size`` and fits the hints.

    Without a ``num_layers`` hint, layer counts 1..``max_layers`` are searched.
    Without a ``cell`` hint every cell of the table is tried.  Results are
    sorted by (layers, directions, units) so the first is the simplest
    explanation, but callers must treat more than one as ambiguous.
    """
    if dtype not in DTYPES:
        raise InputError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    if size <= 0:
        return []
    directions = [1, 2] if bidirectional is None else [2 if bidirectional else 1]
    layers = range(1, max_layers + 1) if num_layers is None else [num_layers]
    modes = ["linear", "skip"] if input_mode is None else [input_mode]
    cells = list(CELLS) if cell is None else [cell]
    out = []
    for name in cells:
        G = CELLS[name].num_gates
        for L in layers:
            for D in directions:
                for mode in modes:
                    if units is not None:
                        units_range = [units]
                    else:
                        # G H^2 + 2 G H <= size / (D L)  bounds H.
                        hmax = int(math.isqrt(max(size // (G * D * L), 0))) + 1
                        units_range = range(1, hmax + 1)
                    for I, H in _candidates_for(size, G, D, L, mode, units_range, input_size):
                        s = StackShape(I, H, L, D == 2, mode, dtype, name)
                        if params_size(s) == size:
                            out.append(s)
    order = list(CELLS)
    out.sort(key=lambda s: (order.index(s.cell), s.num_layers, s.num_directions, s.units, s.input_mode))
    return out


def iter_matrix_regions(shape: StackShape) -> Iterator[tuple]:
    """(pseudo_layer, linLayerID, offset, dims) of each matrix and bias, for reports and tests."""
    offset = 0
    for p, kind, g, count, dims in _regions(shape):
        lin = g + (shape.gates if kind in ("R", "bR") else 0)
        yield p, ("bias" if kind.startswith("b") else "matrix"), lin, offset, dims
        offset += count
