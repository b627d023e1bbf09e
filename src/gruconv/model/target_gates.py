"""Gate order and packing for the PyTorch and ONNX targets: every reorder for them happens here.

(How ``verify`` drives such a target: :class:`gruconv.writers.runner.StackRunner`, with the targets.)

Both targets store, per pseudo-layer (layer x direction), the gate blocks of one side stacked
along the first axis, each block in cuDNN orientation (``(units, in)``, a matrix maps a column
vector): PyTorch's ``weight_ih_l{k}`` is ``(G*H, in)``, ONNX's ``W`` is
``(directions, G*H, in)``.  They differ only in the order of the blocks, written below as gate
NAMES of :data:`gruconv.model.canonical.CELLS`, so the permutation is derived, never typed as numbers:

* PyTorch ``nn.GRU``: ``weight_ih_l[k]`` = ``(W_ir|W_iz|W_in)``, reset, update, new (candidate),
  with ``n = tanh(W_in x + b_in + r * (W_hn h + b_hn))`` — the reset gate after the recurrent
  product, as cuDNN computes it.  ``nn.LSTM``: ``(W_ii|W_if|W_ig|W_io)``, input, forget, cell,
  output.  (PyTorch docs, ``torch.nn.GRU`` / ``torch.nn.LSTM`` "Variables"; the cuDNN LSTM golden
  README records PyTorch float64 ``nn.LSTM`` with blocks stacked i, f, c~, o matching cuDNN's
  float64 outputs to 3e-16.)  So PyTorch's order is cuDNN's own: the permutation is the identity.
* ONNX ``GRU``: ``W[zrh]`` — update, reset, hidden (candidate); with ``linear_before_reset=1``
  ``ht = g(Xt*(Wh^T) + (rt (.) (Ht-1*(Rh^T) + Rbh)) + Wbh)``, cuDNN's equation.  ONNX ``LSTM``:
  ``W[iofc]`` — input, output, forget, cell.  Bias ``B`` = ``[Wb[...], Rb[...]]``.  (ONNX operator
  docs, ``GRU``/``LSTM`` since opset 14, read from ``onnx.defs.get_schema`` of onnx 1.23.)

Skip input (``CUDNN_SKIP_INPUT``, layer 0 without input matrices): neither target has that mode,
so each gate gets an identity input matrix (input size equals units), which is exact: ``1*x + 0``
sums in any order to ``x``.
"""

from __future__ import annotations

import numpy as np

from .canonical import CELLS, GateParams

#: Gate names per target and cell, in the order the target stacks the gate blocks.
TARGET_GATE_NAMES = {
    "torch": {"gru": ("reset", "update", "candidate"), "lstm": ("input", "forget", "cell", "output")},
    "onnx": {"gru": ("update", "reset", "candidate"), "lstm": ("input", "output", "forget", "cell")},
}


def gate_order(target: str, cell: str) -> tuple:
    """Canonical (cuDNN) gate index of each of ``target``'s gate blocks, in the target's order."""
    names = CELLS[cell].gates
    order = tuple(names.index(n) for n in TARGET_GATE_NAMES[target][cell])
    assert sorted(order) == list(range(len(names))), (target, cell)
    return order


def stacked_blocks(p: GateParams, target: str, cell: str, input_size: int, dtype) -> tuple:
    """One pseudo-layer as ``(W (G*H, in), R (G*H, H), bW (G*H,), bR (G*H,))`` in ``target``'s
    gate order, cast to ``dtype``; a skip-input layer (``input_weights is None``) gets identity
    input matrices of width ``input_size`` (== units)."""
    order = list(gate_order(target, cell))
    dtype = np.dtype(dtype)
    G, H = p.recurrent_weights.shape[0], p.recurrent_weights.shape[1]
    if p.input_weights is None:
        if input_size != H:
            raise ValueError(f"skip input needs input_size == units, got {input_size} and {H}")
        W = np.tile(np.eye(H, dtype=dtype), (G, 1))
    else:
        W = np.asarray(p.input_weights, dtype=dtype)[order].reshape(G * H, -1)
    R = np.asarray(p.recurrent_weights, dtype=dtype)[order].reshape(G * H, H)
    bW = np.asarray(p.input_bias, dtype=dtype)[order].reshape(G * H)
    bR = np.asarray(p.recurrent_bias, dtype=dtype)[order].reshape(G * H)
    return W, R, bW, bR
