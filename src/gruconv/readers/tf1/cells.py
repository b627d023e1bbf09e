"""The canonical cell tensors TF 1.x saved for each cuDNN cell: ONE table per cell.

Each table row is a tensor under ``.../cudnn_compatible_<cell>_cell/``: its
name, its shape as a function of ``(in, H)`` (``in`` = the layer's input
width) and the blocks it is made of, each block saying which canonical
array (:class:`gruconv.model.canonical.GateParams`, cuDNN orientation and gate
order) it holds.  Shape detection, reading, the opaque-vs-canonical
cross-check and writing (tests, planted errors) all walk these tables;
nothing else in gruconv spells out a TF cell tensor.

A block is ``(rows, col, field, gate)``: ``rows`` ``"x"`` (the kernel's
first ``in`` rows: the layer input), ``"h"`` (the last ``H`` rows: the
state) or None (all); ``col`` the ``H``-wide column block (None: all);
``field`` ``W``/``R`` (input/recurrent matrix of cuDNN gate ``gate``; TF
stores it transposed, ``[in, H]`` mapping a row vector), ``bW``/``bR``
(input/recurrent bias) or ``bsum`` (``bW + bR`` summed, as TF 1.4+ saved gate
biases: exact for inference with the sum on the input side and zeros on the
recurrent side).

GRU (``CudnnCompatibleGRUCell``; ``shared/DESIGN.md``): ``gates/kernel``
columns reset, update; the candidate's input/hidden projections separately.

LSTM (``CudnnCompatibleLSTMCell`` = ``LSTMBlockCell(forget_bias=0)``;
``docs/lstm-format-facts.md`` section 3, checked against real cuDNN):
``kernel [in+H, 4H]`` and ``bias [4H]`` with column blocks in TF's gate order
i, c, f, o — cuDNN's i, f, c, o with the middle two swapped
(:data:`TF_LSTM_GATE_ORDER`, its own inverse) — and the bias summed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np

from ...model.canonical import CELLS, GateParams

#: TF 1.x LSTM column block j holds cuDNN gate TF_LSTM_GATE_ORDER[j] (i, c, f, o from i, f, c, o).
TF_LSTM_GATE_ORDER = (0, 2, 1, 3)
_FIELDS = {"W": "input_weights", "R": "recurrent_weights", "bW": "input_bias", "bR": "recurrent_bias"}


class ShapeMismatch(ValueError):
    """A tensor whose shape cannot be this cell's: ``name``, its ``shape``, what was ``expected``."""

    def __init__(self, name: str, shape: tuple, expected: str):
        super().__init__(f"{name} has shape {list(shape)}, expected {expected}")
        self.name, self.shape, self.expected = name, list(shape), expected


@dataclass(frozen=True)
class Block:
    rows: Optional[str]
    col: Optional[int]
    field: str
    gate: int

    def index(self, ndim: int, n_in: int, H: int) -> tuple:
        cols = slice(None) if self.col is None else slice(self.col * H, (self.col + 1) * H)
        if ndim == 1:
            return (cols,)
        rows = {"x": slice(0, n_in), "h": slice(n_in, None), None: slice(None)}[self.rows]
        return rows, cols

    @property
    def is_matrix(self) -> bool:
        return self.field in ("W", "R")


@dataclass(frozen=True)
class Tensor:
    name: str
    shape: Callable          # (in, H) -> shape tuple
    blocks: tuple


@dataclass(frozen=True)
class TfCell:
    """What TF 1.x saved for one cuDNN cell type (see the module docstring)."""

    cell: str                # key of gruconv.model.canonical.CELLS
    scope: str               # the directory the tensors sit in
    tensors: tuple           # Tensor rows: always saved
    tf13_biases: tuple = ()  # Tensor rows: TF 1.3's unsummed bias halves
    units_from: tuple = ()   # (tensor name, divisor): H = shape[0] // divisor of that 1-D tensor
    input_from: tuple = ()   # (tensor name, f(shape, H) -> in)
    refused: dict = field(default_factory=dict)   # tensor name -> why such a stack cannot convert
    input_want: str = ""     # the input tensor's expected shape, for messages ({H}, {G}: units, G*units)
    not_fitting: str = ""    # what a buffer of this cell that fits no shape may be instead (a hint)
    #: a buffer under a layer scope named for this cell that fits none of its shapes is another layer's,
    #: left with the other tensors (a warning), rather than a cuDNN buffer refused for its size
    leaves_unfitting: bool = False

    @property
    def title(self) -> str:
        return CELLS[self.cell].title

    @property
    def names(self) -> tuple:
        return tuple(t.name for t in self.tensors)

    @property
    def tf13_names(self) -> tuple:
        return tuple(t.name for t in self.tf13_biases)

    def all_names(self) -> tuple:
        return self.names + self.tf13_names + tuple(self.refused)

    def row(self, name: str) -> Tensor:
        return next(t for t in self.tensors + self.tf13_biases if t.name == name)

    def expected_shapes(self, n_in: int, H: int) -> dict:
        return {t.name: tuple(t.shape(n_in, H)) for t in self.tensors + self.tf13_biases}

    def detect(self, shape_of: Callable) -> tuple:
        """(H, in) from the tensors' shapes (``shape_of(name)``), or raise :class:`ShapeMismatch`."""
        uname, div = self.units_from
        ushape = tuple(shape_of(uname))
        if len(ushape) != 1 or ushape[0] == 0 or ushape[0] % div:
            raise ShapeMismatch(uname, ushape, f"[{div} * units]")
        H = ushape[0] // div
        iname, fn = self.input_from
        ishape = tuple(shape_of(iname))
        n_in = fn(ishape, H) if len(ishape) == 2 and ishape[1] == self.row(iname).shape(1, H)[1] else 0
        if n_in < 1:
            want = self.input_want.format(H=H, G=CELLS[self.cell].num_gates * H)
            raise ShapeMismatch(iname, ishape, want)
        return H, n_in


GRU = TfCell(
    cell="gru",
    scope="cudnn_compatible_gru_cell",
    tensors=(
        Tensor("gates/kernel", lambda i, h: (i + h, 2 * h),
               (Block("x", 0, "W", 0), Block("x", 1, "W", 1), Block("h", 0, "R", 0), Block("h", 1, "R", 1))),
        Tensor("gates/bias", lambda i, h: (2 * h,), (Block(None, 0, "bsum", 0), Block(None, 1, "bsum", 1))),
        Tensor("candidate/input_projection/kernel", lambda i, h: (i, h), (Block(None, None, "W", 2),)),
        Tensor("candidate/hidden_projection/kernel", lambda i, h: (h, h), (Block(None, None, "R", 2),)),
        Tensor("candidate/input_projection/bias", lambda i, h: (h,), (Block(None, None, "bW", 2),)),
        Tensor("candidate/hidden_projection/bias", lambda i, h: (h,), (Block(None, None, "bR", 2),)),
    ),
    tf13_biases=(
        Tensor("bias_cudnn 0", lambda i, h: (2 * h,), (Block(None, 0, "bW", 0), Block(None, 1, "bW", 1))),
        Tensor("bias_cudnn 1", lambda i, h: (2 * h,), (Block(None, 0, "bR", 0), Block(None, 1, "bR", 1))),
    ),
    units_from=("gates/bias", 2),
    input_from=("candidate/input_projection/kernel", lambda shape, H: shape[0]),
    input_want="[input_size, {H}]",
    not_fitting="an LSTM or plain RNN buffer? pass --cell lstm for an LSTM",
)

_J = tuple(enumerate(TF_LSTM_GATE_ORDER))
LSTM = TfCell(
    cell="lstm",
    scope="cudnn_compatible_lstm_cell",
    tensors=(
        Tensor("kernel", lambda i, h: (i + h, 4 * h),
               tuple(Block("x", j, "W", g) for j, g in _J) + tuple(Block("h", j, "R", g) for j, g in _J)),
        Tensor("bias", lambda i, h: (4 * h,), tuple(Block(None, j, "bsum", g) for j, g in _J)),
    ),
    tf13_biases=(
        Tensor("bias_cudnn_0", lambda i, h: (4 * h,), tuple(Block(None, j, "bW", g) for j, g in _J)),
        Tensor("bias_cudnn_1", lambda i, h: (4 * h,), tuple(Block(None, j, "bR", g) for j, g in _J)),
    ),
    units_from=("bias", 4),
    input_from=("kernel", lambda shape, H: shape[0] - H),
    refused={"projection/kernel": "an LSTM with a projection (num_proj): Keras 3 LSTM has no projection, "
                                  "so it cannot be converted"},
    input_want="[input_size + {H}, {G}]",
    not_fitting="a GRU, a plain RNN or a projection LSTM buffer?",
    leaves_unfitting=True,
)

#: cell name -> its TF table.
TF_CELLS = {"gru": GRU, "lstm": LSTM}
assert set(TF_CELLS) <= set(CELLS)


def _stacked(blocks: list) -> np.ndarray:
    """``np.ascontiguousarray(np.stack(blocks))`` in one copy."""
    out = np.empty((len(blocks),) + blocks[0].shape, blocks[0].dtype)
    for g, b in enumerate(blocks):
        out[g] = b
    return out


def to_params(spec: TfCell, t: dict, n_in: int, H: int, matrices: Optional[GateParams] = None) -> tuple:
    """(GateParams of one canonical cell from its tensors ``t`` (name -> array), by how much the TF 1.3
    bias halves' sum differs from the summed bias (None when they agree or are absent)).

    A summed bias goes on the input side, zeros on the recurrent side; TF 1.3's separate halves, when
    present, are used instead.  ``matrices``: the buffer's pseudo-layer when its matrices were found
    bit for bit equal to the canonical ones: its ``(G, H, in)`` views are used as they are instead of
    stacking copies of the transposed canonical blocks (same values, no copy)."""
    G = CELLS[spec.cell].num_gates
    parts = {f: [None] * G for f in ("W", "R", "bW", "bR")}
    sums = []
    for row in spec.tensors:
        a = t[row.name]
        for b in row.blocks:
            v = a[b.index(a.ndim, n_in, H)]
            if b.field == "bsum":
                parts["bW"][b.gate], parts["bR"][b.gate] = v, np.zeros(H, a.dtype)
                sums.append((b, v))
            elif b.is_matrix:
                parts[b.field][b.gate] = v.T
            else:
                parts[b.field][b.gate] = v
    diff = None
    if all(r.name in t for r in spec.tf13_biases) and spec.tf13_biases:
        for row in spec.tf13_biases:
            a = t[row.name]
            for b in row.blocks:
                parts[b.field][b.gate] = a[b.index(1, n_in, H)]
        for b, summed_tf in sums:
            with np.errstate(all="ignore"):
                summed = (parts["bW"][b.gate] + parts["bR"][b.gate]).astype(summed_tf.dtype)
            if not np.array_equal(summed, summed_tf, equal_nan=True):
                d = float(np.nanmax(np.abs(summed.astype(np.float64) - summed_tf.astype(np.float64))))
                diff = d if diff is None else max(diff, d)
    if matrices is not None:
        iw, rw = matrices.input_weights, matrices.recurrent_weights
    else:
        iw, rw = _stacked(parts["W"]), _stacked(parts["R"])
    return GateParams(input_weights=iw, recurrent_weights=rw,
                      input_bias=np.stack(parts["bW"]), recurrent_bias=np.stack(parts["bR"])), diff


def expected_blocks(spec: TfCell, p: GateParams, n_in: int, H: int, dtype) -> dict:
    """For each tensor of the table: [(Block, index, the value ``p`` gives that block)].

    Values are views of ``p`` (no copies) except summed biases, which are computed in the tensor
    dtype as TF computed them."""
    out = {}
    for row in spec.tensors + spec.tf13_biases:
        ndim = len(row.shape(1, 1))
        items = []
        for b in row.blocks:
            if b.field == "bsum":
                with np.errstate(all="ignore"):
                    v = (p.input_bias[b.gate] + p.recurrent_bias[b.gate]).astype(dtype)
            else:
                v = getattr(p, _FIELDS[b.field])[b.gate]
                if b.is_matrix:
                    v = v.T
            items.append((b, b.index(ndim, n_in, H), v))
        out[row.name] = items
    return out


def from_params(spec: TfCell, p: GateParams, n_in: int, H: int, dtype=None, tf13: bool = False) -> dict:
    """The canonical tensors TF 1.x saved for ``p`` (name -> array): the inverse of :func:`to_params`
    (tests, planted errors).  ``tf13`` adds the unsummed bias halves."""
    dtype = np.dtype(dtype or p.recurrent_weights.dtype)
    out = {}
    for name, items in expected_blocks(spec, p, n_in, H, dtype).items():
        if name in spec.tf13_names and not tf13:
            continue
        a = np.zeros(spec.row(name).shape(n_in, H), dtype)
        for _, idx, v in items:
            a[idx] = v
        out[name] = a
    return out
