"""A float64 NumPy implementation of cuDNN's RNN equations: the reference on any machine.

For GRU it reproduces cuDNN's own float64 outputs (``y_f64``/``hy_f64`` in
``shared/cudnn-golden``) to ~1e-15 on every golden file, variable lengths
included (``tests/test_oracle.py``).  Semantics follow cuDNN's
``CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED`` with padded I/O: outputs past a
sequence's length are 0, its final states are the states at its last valid
step, and the backward direction starts at each sequence's own last valid step.

One step function per cell of :data:`gruconv.canonical.CELLS` (:data:`STEPS`);
the time loop, directions and layers are shared.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from .canonical import RNNStack


def _sigmoid(v: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * v))  # overflow-free, exact to float64 rounding


def _gru_step(xw: list, h: np.ndarray, c, R: np.ndarray, bR: np.ndarray) -> tuple:
    """cuDNN GRU (``shared/DESIGN.md``): the reset gate multiplies ``R_h h + b_Rh``."""
    r = _sigmoid(xw[0] + h @ R[0].T + bR[0])
    z = _sigmoid(xw[1] + h @ R[1].T + bR[1])
    n = np.tanh(xw[2] + r * (h @ R[2].T + bR[2]))
    return (1.0 - z) * n + z * h, None


def _lstm_step(xw: list, h: np.ndarray, c: np.ndarray, R: np.ndarray, bR: np.ndarray) -> tuple:
    """cuDNN LSTM (cuDNN API reference, ``cudnnRNNMode_t``): gates i, f, c', o."""
    i = _sigmoid(xw[0] + h @ R[0].T + bR[0])
    f = _sigmoid(xw[1] + h @ R[1].T + bR[1])
    g = np.tanh(xw[2] + h @ R[2].T + bR[2])
    o = _sigmoid(xw[3] + h @ R[3].T + bR[3])
    c_new = f * c + i * g
    return o * np.tanh(c_new), c_new


#: cell name -> step(xw per gate, h, c, R, bR) -> (h', c' or None)
STEPS = {"gru": _gru_step, "lstm": _lstm_step}


def _direction(step_fn, p, x: np.ndarray, h: np.ndarray, c, lengths: np.ndarray, reverse: bool) -> tuple:
    """Run one pseudo-layer over time-major ``x`` (T, B, in); return (y (T, B, H), h_final, c_final)."""
    T, B, _ = x.shape
    f = np.float64
    R = p.recurrent_weights.astype(f)
    bW = p.input_bias.astype(f)
    bR = p.recurrent_bias.astype(f)
    G = R.shape[0]
    if p.input_weights is None:  # CUDNN_SKIP_INPUT: the input is added as is
        xw = np.stack([x] * G) + bW[:, None, None, :]
    else:
        xw = np.einsum("ghi,tbi->gtbh", p.input_weights.astype(f), x) + bW[:, None, None, :]
    y = np.zeros((T, B, R.shape[1]), dtype=f)
    bi = np.arange(B)
    for step in range(T):
        # Backward direction: position t of sequence b is lengths[b] - 1 - step.
        t = (lengths - 1 - step) if reverse else np.full(B, step)
        valid = step < lengths
        tt = np.clip(t, 0, T - 1)
        h_new, c_new = step_fn([xw[g, tt, bi] for g in range(G)], h, c, R, bR)
        h = np.where(valid[:, None], h_new, h)
        if c is not None:
            c = np.where(valid[:, None], c_new, c)
        y[tt[valid], bi[valid]] = h[valid]
    return y, h, c


def run_stack(stack: RNNStack, x: np.ndarray, h0: Optional[np.ndarray] = None,
              seq_lengths: Optional[np.ndarray] = None, c0: Optional[np.ndarray] = None) -> tuple:
    """Forward pass in float64.  ``x`` time-major ``(T, B, input_size)``.

    Returns ``(y, hy, cy)``: ``y (T, B, units * dirs)``, ``hy`` and (LSTM
    only, else None) ``cy`` ``(layers * dirs, B, units)`` in pseudo-layer
    order, all float64.
    """
    s = stack.shape
    step_fn = STEPS[s.cell]
    has_c = "c" in s.cell_spec.states
    x = np.asarray(x, dtype=np.float64)
    T, B, _ = x.shape
    lengths = np.full(B, T) if seq_lengths is None else np.asarray(seq_lengths).astype(np.int64)
    zeros = np.zeros((s.num_pseudo_layers, B, s.units))
    h0 = zeros if h0 is None else np.asarray(h0, dtype=np.float64)
    c0 = (zeros if c0 is None else np.asarray(c0, dtype=np.float64)) if has_c else None
    hy = np.zeros_like(zeros)
    cy = np.zeros_like(zeros) if has_c else None
    layer_in = x
    for layer in range(s.num_layers):
        outs = []
        for d in range(s.num_directions):
            p = s.pseudo_layer(layer, d)
            y_d, hy[p], c_fin = _direction(step_fn, stack.params[p], layer_in, h0[p],
                                           None if c0 is None else c0[p], lengths, reverse=d == 1)
            if has_c:
                cy[p] = c_fin
            outs.append(y_d)
        layer_in = np.concatenate(outs, axis=-1)
    return layer_in, hy, cy
