"""The cuDNN RNN forward pass in standard TensorFlow ops: what replaces a ``CudnnRNN*`` node.

One :func:`function` per node signature (op, :class:`~gruconv.model.canonical.StackShape`, ``time_major``):
a ``tf.function`` taking the op's own inputs (``input, input_h, input_c, params[, sequence_lengths]``)
and returning its outputs (``output, output_h, output_c, reserve_space[, host_reserved]``), traced once
so its ``FunctionDef`` (and the ``While`` bodies it calls) can go into a graph's function library.

The facts it computes by, each from its source:

* the opaque buffer's layout: :func:`gruconv.model.cudnn_layout.iter_matrix_regions` (the one module
  that knows it; the slices here are taken at its offsets, in the graph, so ``params`` stays whatever
  it was: a ``Const``, a variable read or a buffer computed from Keras 3's variables);
* the cell equations: cuDNN's (``shared/DESIGN.md``; the same as the float64 oracle,
  :mod:`gruconv.verify.reference.oracle`): GRU ``h~ = tanh(W_h x + b_Wh + r * (R_h h + b_Rh))``, LSTM
  ``i, f, c~, o`` with ``c' = f c + i c~``, ``h' = o tanh(c')``;
* shapes (``tensorflow/core/ops/cudnn_rnn_ops.cc``, TensorFlow 2.21): ``input`` is ``[T, B, I]``, states
  ``[L*D, B, H]``; a ``CudnnRNNV3`` with ``time_major=false`` takes and returns ``[B, T, I]`` and states of
  shape ``[B, L*D, H]`` -- but the kernel hands the states' memory to cuDNN unchanged, under a state
  descriptor that is always ``(L*D, B, H)`` (``tensorflow/core/kernels/cudnn_rnn_ops.cc``
  ``ExtractForwardInput`` checks the shape; stream executor's ``CreateRnnStateTensorDescriptor(num_layer,
  batch_size, data_size)`` has no layout): so they are *reshaped* to ``[L*D, B, H]``, not transposed, and
  ``output_h``/``output_c`` reshaped back (``fixtures/graphs_golden/*_bt``, layout ``mem``; the same for
  ``L*D == 1``, Keras 3's case); a GRU's ``output_c`` is a scalar (the op's shape function says ``[]``);
  ``output`` holds the forward then the backward half of the last layer;
* ``sequence_lengths`` (``CudnnRNNV3``; ``shared/cudnn-golden/README.md``, measured with
  ``CUDNN_RNN_PADDED_IO_ENABLED``): outputs past a sequence's length are 0, the final state is the one at
  its last valid step, and the backward direction starts at each sequence's own last valid step;
* float16: computed in float32 and rounded once at the end (cuDNN accumulates half in float32).

``reserve_space`` and ``host_reserved`` are training buffers nothing uses at inference: empty tensors
of the op's dtypes.
"""

from __future__ import annotations

from typing import Optional

from ..model.cudnn_ops import DTYPES, INPUTS, OUTPUTS, WITH_LENGTHS


def _gru_step(tf, xw, hr, h, c):
    """cuDNN's GRU: gates r, z, h~ (``linLayerID`` 0/3, 1/4, 2/5)."""
    r = tf.sigmoid(xw[0] + hr[0])
    z = tf.sigmoid(xw[1] + hr[1])
    n = tf.tanh(xw[2] + r * hr[2])
    return (1.0 - z) * n + z * h, c


def _lstm_step(tf, xw, hr, h, c):
    """cuDNN's LSTM: gates i, f, c~, o (``linLayerID`` 0..3 / 4..7)."""
    i = tf.sigmoid(xw[0] + hr[0])
    f = tf.sigmoid(xw[1] + hr[1])
    g = tf.tanh(xw[2] + hr[2])
    o = tf.sigmoid(xw[3] + hr[3])
    c_new = f * c + i * g
    return o * tf.tanh(c_new), c_new


#: cell -> one time step ``(tf, [input-side gate pre-activations], [recurrent-side], h, c) -> (h', c')``;
#: a cell missing here is a KeyError (``tests/test_structure.py`` checks the keys against ``CELLS``).
STEPS = {"gru": _gru_step, "lstm": _lstm_step}


def _slices(tf, params, shape, compute):
    """Per pseudo-layer ``{"W": [G] [H, in] | None, "R": [G] [H, H], "bW": [G] [H], "bR": [G] [H]}``,
    sliced out of ``params`` at :func:`gruconv.model.cudnn_layout.iter_matrix_regions`'s offsets."""
    from ..model.cudnn_layout import iter_matrix_regions

    G = shape.gates
    out = [{"W": None, "R": [None] * G, "bW": [None] * G, "bR": [None] * G}
           for _ in range(shape.num_pseudo_layers)]
    for p, kind, lin, offset, dims in iter_matrix_regions(shape):
        n = 1
        for d in dims:
            n *= d
        block = tf.reshape(tf.cast(params[offset:offset + n], compute), dims)
        side, g = ("W", lin) if lin < G else ("R", lin - G)
        if kind == "bias":
            out[p]["b" + side][g] = block
        else:
            if out[p][side] is None:
                out[p][side] = [None] * G
            out[p][side][g] = block
    return out


def _direction(tf, step, w, shape, x, h, c, mask):
    """One pseudo-layer over time-major ``x`` ``[T, B, in]`` from states ``h``, ``c`` ``[B, H]``;
    ``mask`` ``[T, B, 1]`` (1 inside a sequence): past its end the state holds and the output is 0."""
    G = shape.gates
    if w["W"] is None:  # skip input: the input is added as is (an identity input matrix)
        xw_all = tf.concat([x + w["bW"][g] for g in range(G)], axis=-1)
    else:
        W = tf.concat(w["W"], axis=0)  # [G*H, in]
        xw_all = tf.tensordot(x, tf.transpose(W), axes=1) + tf.concat(w["bW"], axis=0)
    R = tf.transpose(tf.concat(w["R"], axis=0))  # [H, G*H]
    bR = tf.concat(w["bR"], axis=0)

    def body(carry, inputs):
        h, c, _ = carry
        xw, m = inputs
        hr = tf.matmul(h, R) + bR
        h_new, c_new = step(tf, tf.split(xw, G, axis=-1), tf.split(hr, G, axis=-1), h, c)
        h_new = m * h_new + (1.0 - m) * h
        c_new = m * c_new + (1.0 - m) * c
        return h_new, c_new, m * h_new

    hs, cs, ys = tf.scan(body, (xw_all, mask), initializer=(h, c, tf.zeros_like(h)))
    return ys, hs[-1], cs[-1]


def forward(tf, shape, time_major, x, h0, c0, params, lengths):
    """The stack's outputs ``(output, output_h, output_c)`` in the op's layouts (see the module
    docstring); ``lengths`` may be None (every sequence is full)."""
    step = STEPS[shape.cell]
    compute = tf.float32 if shape.dtype == "float16" else {"float32": tf.float32, "float64": tf.float64}[shape.dtype]
    dtype = x.dtype
    x = tf.cast(x, compute)
    h0 = tf.cast(h0, compute)
    lstm = "c" in shape.cell_spec.states
    LD = shape.num_pseudo_layers
    if not time_major:  # states: [B, L*D, H] memory read as [L*D, B, H] (module docstring)
        x = tf.transpose(x, [1, 0, 2])
        h0 = tf.reshape(h0, [LD, -1, shape.units])
    if lstm:
        c0 = tf.cast(c0, compute)
        if not time_major:
            c0 = tf.reshape(c0, [LD, -1, shape.units])
    T, B = tf.shape(x)[0], tf.shape(x)[1]
    if lengths is None:
        lengths = tf.fill([B], T)
    lengths = tf.cast(lengths, tf.int32)
    mask = tf.cast(tf.sequence_mask(lengths, T), compute)  # [B, T]
    mask = tf.transpose(mask)[:, :, None]  # [T, B, 1]
    weights = _slices(tf, params, shape, compute)
    hy, cy = [], []
    layer_in = x
    for layer in range(shape.num_layers):
        outs = []
        for d in range(shape.num_directions):
            p = shape.pseudo_layer(layer, d)
            h = h0[p]
            c = tf.reshape(c0[p], tf.shape(h)) if lstm else tf.zeros_like(h)
            xin = layer_in if d == 0 else tf.reverse_sequence(layer_in, lengths, seq_axis=0, batch_axis=1)
            ys, h_last, c_last = _direction(tf, step, weights[p], shape, xin, h, c, mask)
            if d == 1:
                ys = tf.reverse_sequence(ys, lengths, seq_axis=0, batch_axis=1)
            outs.append(ys)
            hy.append(h_last)
            cy.append(c_last)
        layer_in = outs[0] if len(outs) == 1 else tf.concat(outs, axis=-1)
    output, output_h = layer_in, tf.stack(hy)
    output_c = tf.stack(cy) if lstm else tf.zeros([], compute)
    if not time_major:
        output = tf.transpose(output, [1, 0, 2])
        output_h = tf.reshape(output_h, [B, LD, shape.units])
        if lstm:
            output_c = tf.reshape(output_c, [B, LD, shape.units])
    return tf.cast(output, dtype), tf.cast(output_h, dtype), tf.cast(output_c, dtype)


def packing_function(tf, packs: tuple, dtype: Optional[int]):
    """The concrete ``tf.function`` standing for ``CudnnRNNCanonicalToParams[V2]``: ``(num_layers, num_units,
    input_size, weights..., biases...) -> params``, the weights then the biases flattened and concatenated.
    Why that is the buffer: the op copies each weight tensor by its flat size into the region cuDNN names
    for it, pseudo-layer by pseudo-layer in ``linLayerID`` order, then the biases the same way
    (``tensorflow/core/kernels/cudnn_rnn_ops.cc``), and cuDNN lays those regions out back to back, matrices
    first (:mod:`gruconv.model.cudnn_layout`; ``fixtures/graphs_golden/gru_2l_bidir_canonical_savedmodel``
    checks it against real cuDNN)."""
    t = tf.as_dtype(DTYPES.get(1 if dtype is None else dtype, "float32"))
    n_w, n_b = packs
    specs = packing_specs(tf, t, n_w, n_b)

    def run(num_layers, num_units, input_size, *tensors):
        return tf.concat([tf.reshape(a, [-1]) for a in tensors], axis=0)

    return tf.function(run, input_signature=specs, autograph=False).get_concrete_function()


def function(tf, op: str, shape, time_major: bool):
    """The concrete ``tf.function`` standing for a node of ``op`` with ``shape``: same inputs, same
    outputs (:data:`gruconv.model.cudnn_ops.OUTPUTS`), any batch and time size."""
    dtype = tf.as_dtype(shape.dtype)

    def run(input, input_h, input_c, params, sequence_lengths=None):
        y, h, c = forward(tf, shape, time_major, input, input_h, input_c, params, sequence_lengths)
        return op_outputs(tf, op, dtype, y, h, c)

    return tf.function(run, input_signature=input_specs(tf, op, dtype), autograph=False).get_concrete_function()


def input_specs(tf, op: str, dtype) -> list:
    """The ``TensorSpec`` of each input of ``op`` (:data:`gruconv.model.cudnn_ops.INPUTS`), any batch and time
    size: what a function standing for a node of ``op`` takes."""
    x_name, h_name, c_name, params_name, lengths_name = INPUTS
    specs = [tf.TensorSpec([None, None, None], dtype, x_name), tf.TensorSpec([None, None, None], dtype, h_name),
             tf.TensorSpec(None, dtype, c_name), tf.TensorSpec([None], dtype, params_name)]
    if op in WITH_LENGTHS:
        specs.append(tf.TensorSpec([None], tf.int32, lengths_name))
    return specs


def op_outputs(tf, op: str, dtype, y, h, c) -> tuple:
    """``op``'s outputs (:data:`gruconv.model.cudnn_ops.OUTPUTS`) from ``output``, ``output_h``, ``output_c``: the
    training buffers (``reserve_space``, ``host_reserved``) empty, nothing uses them at inference."""
    out = [y, h, c, tf.zeros([0], dtype)]
    if "host_reserved" in OUTPUTS[op]:
        out.append(tf.zeros([0], tf.int8))
    return tuple(out)


def packing_specs(tf, dtype, n_weights: int, n_biases: int) -> list:
    """The ``TensorSpec`` of each input of ``CudnnRNNCanonicalToParams*``: three sizes, then the weights and
    the biases."""
    specs = [tf.TensorSpec([], tf.int32, n) for n in ("num_layers", "num_units", "input_size")]
    specs += [tf.TensorSpec(None, dtype, f"weights_{i}") for i in range(n_weights)]
    return specs + [tf.TensorSpec(None, dtype, f"biases_{i}") for i in range(n_biases)]
