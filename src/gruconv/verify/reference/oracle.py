"""A float64 NumPy implementation of cuDNN's RNN equations: the reference on any machine.

For GRU it reproduces cuDNN's own float64 outputs (``y_f64``/``hy_f64`` in
``shared/cudnn-golden``) to ~1e-15 on every golden file, variable lengths
included (``tests/verify/test_oracle.py``).  Semantics follow cuDNN's
``CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED`` with padded I/O: outputs past a
sequence's length are 0, its final states are the states at its last valid
step, and the backward direction starts at each sequence's own last valid step.

One step function per cell of :data:`gruconv.model.canonical.CELLS` (:data:`STEPS`);
the time loop, directions and layers are shared.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from ...model.canonical import RNNStack


def _sigmoid(v: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * v))  # overflow-free, exact to float64 rounding


def _gru_step(xw: list, hr: list, h: np.ndarray, c) -> tuple:
    """cuDNN GRU (``shared/DESIGN.md``): the reset gate multiplies ``R_h h + b_Rh``.
    ``hr[g]`` = ``h @ R_g.T + bR_g`` per gate (:func:`_direction` computes them in one product)."""
    r = _sigmoid(xw[0] + hr[0])
    z = _sigmoid(xw[1] + hr[1])
    n = np.tanh(xw[2] + r * hr[2])
    return (1.0 - z) * n + z * h, None


def _lstm_step(xw: list, hr: list, h: np.ndarray, c: np.ndarray) -> tuple:
    """cuDNN LSTM (cuDNN API reference, ``cudnnRNNMode_t``): gates i, f, c', o."""
    i = _sigmoid(xw[0] + hr[0])
    f = _sigmoid(xw[1] + hr[1])
    g = np.tanh(xw[2] + hr[2])
    o = _sigmoid(xw[3] + hr[3])
    c_new = f * c + i * g
    return o * np.tanh(c_new), c_new


#: cell name -> step(xw per gate, h @ R.T + bR per gate, h, c) -> (h', c' or None)
STEPS = {"gru": _gru_step, "lstm": _lstm_step}


def _direction(step_fn, p, x: np.ndarray, h: np.ndarray, c, lengths: np.ndarray, reverse: bool,
               dt=np.float64) -> tuple:
    """Run one pseudo-layer over time-major ``x`` (T, B, in) in ``dt``; return (y (T, B, H), h_final, c_final).

    The recurrent product of every gate is one matmul ``(R2 @ h.T).T`` with the gates' matrices as
    stored, ``R2 = R.reshape(G*H, H)`` (contiguous, no copy): NumPy's float32 ``h @ R.T`` on a
    transposed view ran 6.7x slower (66.8 ms vs 10.0 ms a step for 3 x 1024 units, batch 4, this
    2-core machine), and transposing into a contiguous ``(H, G*H)`` copy first cost 0.18 s per
    3 x 1024 x 1024 matrix and run, most of a large model's ``verify`` (a reference run
    and three floor runs per direction).  The input product likewise (``W.reshape(G*H, in) @ x.T``).
    The weights are converted to ``dt`` only where they are not already in it (a float32 floor run
    of float32 weights copies nothing).  Against the transposed-copy products the results differ
    only by BLAS's summation order: bit-identical in float32 on the 1024-unit case measured, 1e-13
    in float64 there (``tests/verify/test_verify_speed.py``)."""
    T, B, _ = x.shape
    R = np.asarray(p.recurrent_weights, dtype=dt)
    bW = np.asarray(p.input_bias, dtype=dt)
    bR = np.asarray(p.recurrent_bias, dtype=dt)
    G, H = R.shape[0], R.shape[1]
    R2 = np.ascontiguousarray(R).reshape(G * H, R.shape[2])  # [g*H + i, j] = R[g, i, j]
    bRc = bR.reshape(G * H)
    if p.input_weights is None:  # CUDNN_SKIP_INPUT: the input is added as is
        xw = np.stack([x] * G) + bW[:, None, None, :]
    else:
        W = np.ascontiguousarray(np.asarray(p.input_weights, dtype=dt))  # (G, H, in): one BLAS product
        W2 = W.reshape(G * H, W.shape[2])
        xw = (W2 @ x.reshape(T * B, -1).T).T.reshape(T, B, G, H).transpose(2, 0, 1, 3) + bW[:, None, None, :]
    y = np.zeros((T, B, H), dtype=dt)
    bi = np.arange(B)
    for step in range(T):
        # Backward direction: position t of sequence b is lengths[b] - 1 - step.
        t = (lengths - 1 - step) if reverse else np.full(B, step)
        valid = step < lengths
        tt = np.clip(t, 0, T - 1)
        hr = (R2 @ h.T).T + bRc
        h_new, c_new = step_fn([xw[g, tt, bi] for g in range(G)], [hr[:, g * H:(g + 1) * H] for g in range(G)], h, c)
        h = np.where(valid[:, None], h_new, h)
        if c is not None:
            c = np.where(valid[:, None], c_new, c)
        y[tt[valid], bi[valid]] = h[valid]
    return y, h, c


def run_stack(stack: RNNStack, x: np.ndarray, h0: Optional[np.ndarray] = None,
              seq_lengths: Optional[np.ndarray] = None, c0: Optional[np.ndarray] = None,
              dtype=np.float64) -> tuple:
    """Forward pass in float64 (``dtype``: another precision, the same equations; the step functions
    keep their inputs' dtype, Python scalars being weak under NumPy's promotion rules).  ``x``
    time-major ``(T, B, input_size)``.

    Returns ``(y, hy, cy)``: ``y (T, B, units * dirs)``, ``hy`` and (LSTM
    only, else None) ``cy`` ``(layers * dirs, B, units)`` in pseudo-layer
    order, all in ``dtype``.
    """
    s = stack.shape
    step_fn = STEPS[s.cell]
    has_c = "c" in s.cell_spec.states
    dt = np.dtype(dtype)
    x = np.asarray(x, dtype=dt)
    T, B, _ = x.shape
    lengths = np.full(B, T) if seq_lengths is None else np.asarray(seq_lengths).astype(np.int64)
    zeros = np.zeros((s.num_pseudo_layers, B, s.units), dtype=dt)
    h0 = zeros if h0 is None else np.asarray(h0, dtype=dt)
    c0 = (zeros if c0 is None else np.asarray(c0, dtype=dt)) if has_c else None
    hy = np.zeros_like(zeros)
    cy = np.zeros_like(zeros) if has_c else None
    layer_in = x
    for layer in range(s.num_layers):
        outs = []
        for d in range(s.num_directions):
            p = s.pseudo_layer(layer, d)
            y_d, hy[p], c_fin = _direction(step_fn, stack.params[p], layer_in, h0[p],
                                           None if c0 is None else c0[p], lengths, reverse=d == 1, dt=dt)
            if has_c:
                cy[p] = c_fin
            outs.append(y_d)
        layer_in = np.concatenate(outs, axis=-1)
    return layer_in, hy, cy
