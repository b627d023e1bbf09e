"""Telling a cuDNN layer's weights from a plain recurrent layer's by their shapes alone.

Weights-only files rarely carry class names: libraries gave their cuDNN layers generic names
(textgenrnn's ``CuDNNLSTM(128, name="rnn_1")``) and TF2 object-based checkpoints name layers
``layer_with_weights-N``.  Keras 2 itself loaded such files into CPU models by shape (Keras 2.2
``keras/engine/saving.py`` ``_convert_rnn_weights``; tf_keras ``saving/legacy/hdf5_format.py``
``_convert_rnn_weights``): the bias decides.

===============  ====================  ========================  ==================
layer            kernel                recurrent_kernel          bias
===============  ====================  ========================  ==================
CuDNNGRU         (I, 3H)               (H, 3H)                   (6H,)
GRU reset_after  (I, 3H)               (H, 3H)                   (2, 3H)
GRU              (I, 3H)               (H, 3H)                   (3H,)
CuDNNLSTM        (I, 4H)               (H, 4H)                   (8H,)
LSTM             (I, 4H)               (H, 4H)                   (4H,)
===============  ====================  ========================  ==================

``H`` is the recurrent kernel's first dimension, so the gate count ``G = recurrent_kernel[1] / H``
and a one-dimensional bias of ``2 * G * H`` can only be a cuDNN layer's.  Everything that does not
fit one row exactly is said, never guessed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ...model.canonical import CELLS
from ...model.keras_layout import CUDNN_KERAS_CLASS, WEIGHT_ROLES, keras3_bias_shape


@dataclass(frozen=True)
class Verdict:
    """What a (kernel, recurrent_kernel, bias) triple is.

    ``cls`` is ``CuDNNGRU``/``CuDNNLSTM`` for a cuDNN layer, the plain class (``GRU``, ``LSTM``) for a
    layer that needs no conversion, or None when the shapes fit no row of the table; ``reason``
    says how it was decided (for ``inspect``) or why nothing fits.
    """

    cls: Optional[str]
    cell: Optional[str]
    input_size: int = 0
    units: int = 0
    reason: str = ""

    @property
    def is_cudnn(self) -> bool:
        return self.cls in CUDNN_KERAS_CLASS.values()


def classify(shapes: dict) -> Verdict:
    """Classify ``{"kernel": shape, "recurrent_kernel": shape, "bias": shape}`` (tuples of ints)."""
    try:
        k, r, b = (tuple(int(d) for d in shapes[role]) for role in WEIGHT_ROLES)
    except (KeyError, TypeError, ValueError):
        return Verdict(None, None, reason="not a recurrent layer's kernel, recurrent_kernel and bias")
    if len(r) != 2 or r[0] <= 0 or r[1] % r[0]:
        return Verdict(None, None, reason=f"recurrent_kernel has shape {r}, expected (units, gates*units)")
    H = r[0]
    G = r[1] // H
    cells = [c for c, spec in CELLS.items() if spec.num_gates == G]
    if not cells:
        return Verdict(None, None, reason=f"recurrent_kernel {r} has {G} gate blocks; GRU has 3, LSTM 4")
    cell = cells[0]
    if len(k) != 2 or k[1] != G * H or k[0] <= 0:
        return Verdict(None, cell, reason=f"kernel has shape {k}, expected (input_size, {G * H}) "
                                          f"to match recurrent_kernel {r}")
    I = k[0]
    plain = CELLS[cell].title
    keras3 = keras3_bias_shape(cell, H)  # (2, 3H) for a reset_after GRU; an LSTM's is its plain bias
    if b == (2 * G * H,):
        cls = CUDNN_KERAS_CLASS[cell]
        return Verdict(cls, cell, I, H, f"{cls}, inferred from bias shape {b} = {2 * G} x {H}")
    if b == (G * H,):
        return Verdict(plain, cell, I, H, f"{plain}, bias shape {b} = {G} x {H}")
    if len(keras3) == 2 and b == keras3:
        return Verdict(plain, cell, I, H, f"{plain}(reset_after=True), bias shape {b}")
    return Verdict(None, cell, I, H, f"bias has shape {b}; a {CUDNN_KERAS_CLASS[cell]} of {H} units has "
                                     f"({2 * G * H},), a {plain} ({G * H},)"
                                     + (f" or {keras3}" if len(keras3) == 2 else ""))
