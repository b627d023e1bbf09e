"""A float64 NumPy implementation of cuDNN's GRU equations: the reference on any machine.

It reproduces cuDNN's own float64 outputs (``y_f64``/``hy_f64`` in
``shared/cudnn-golden``) to ~1e-15 on every golden file, variable lengths
included (``tests/test_oracle.py``).  Semantics follow cuDNN's
``CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED`` with padded I/O: outputs past a
sequence's length are 0, its final state is the state at its last valid step,
and the backward direction starts at each sequence's own last valid step.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from .canonical import GateParams, GRUStack


def _sigmoid(v: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * v))  # overflow-free, exact to float64 rounding


def _direction(p: GateParams, x: np.ndarray, h: np.ndarray, lengths: np.ndarray,
               reverse: bool) -> tuple:
    """Run one pseudo-layer over time-major ``x`` (T, B, in); return (y (T, B, H), h_final)."""
    T, B, _ = x.shape
    f = np.float64
    R = p.recurrent_weights.astype(f)
    bW = p.input_bias.astype(f)
    bR = p.recurrent_bias.astype(f)
    if p.input_weights is None:  # CUDNN_SKIP_INPUT: the input is added as is
        xw = np.stack([x, x, x]) + bW[:, None, None, :]
    else:
        xw = np.einsum("ghi,tbi->gtbh", p.input_weights.astype(f), x) + bW[:, None, None, :]
    y = np.zeros((T, B, R.shape[1]), dtype=f)
    for step in range(T):
        # Backward direction: position t of sequence b is lengths[b] - 1 - step.
        t = (lengths - 1 - step) if reverse else np.full(B, step)
        valid = step < lengths
        tt = np.clip(t, 0, T - 1)
        bi = np.arange(B)
        xr, xz, xh = xw[0, tt, bi], xw[1, tt, bi], xw[2, tt, bi]
        r = _sigmoid(xr + h @ R[0].T + bR[0])
        z = _sigmoid(xz + h @ R[1].T + bR[1])
        n = np.tanh(xh + r * (h @ R[2].T + bR[2]))
        h_new = (1.0 - z) * n + z * h
        h = np.where(valid[:, None], h_new, h)
        y[tt[valid], bi[valid]] = h[valid]
    return y, h


def run_stack(stack: GRUStack, x: np.ndarray, h0: Optional[np.ndarray] = None,
              seq_lengths: Optional[np.ndarray] = None) -> tuple:
    """Forward pass in float64.  ``x`` time-major ``(T, B, input_size)``.

    Returns ``y (T, B, units * dirs)`` and ``hy (layers * dirs, B, units)``,
    pseudo-layer order, both float64.
    """
    s = stack.shape
    x = np.asarray(x, dtype=np.float64)
    T, B, _ = x.shape
    lengths = np.full(B, T) if seq_lengths is None else np.asarray(seq_lengths).astype(np.int64)
    if h0 is None:
        h0 = np.zeros((s.num_pseudo_layers, B, s.units))
    h0 = np.asarray(h0, dtype=np.float64)
    hy = np.zeros((s.num_pseudo_layers, B, s.units))
    layer_in = x
    for layer in range(s.num_layers):
        outs = []
        for d in range(s.num_directions):
            p = s.pseudo_layer(layer, d)
            y_d, hy[p] = _direction(stack.params[p], layer_in, h0[p], lengths, reverse=d == 1)
            outs.append(y_d)
        layer_in = np.concatenate(outs, axis=-1)
    return layer_in, hy
