#!/usr/bin/env python3
"""Check the LSTM format facts of docs/lstm-format-facts.md against the real-cuDNN golden files (CPU only).

Needs the dev virtual environment (TensorFlow 2.x, tf_keras, Keras 3); runs in ~10 s:

    .venv/bin/python scripts/check_lstm_format_facts.py [fixtures/cudnn-golden-lstm]

1. Keras 2 / tf_keras ``CuDNNLSTM``: a layer whose gate slices are cuDNN's row-major ``[H, in]`` matrices
   reinterpreted as ``(in, H)`` (input side) and cuDNN's ``[H, H]`` matrices as they are (recurrent side)
   packs - through tf_keras's own ``gru_lstm_utils.canonical_to_params``, the call its ``_process_batch``
   makes - to exactly the opaque buffer real cuDNN holds.
2. tf_keras's own ``_convert_rnn_weights`` (CuDNNLSTM -> LSTM) + a Keras 3 ``LSTM`` reproduce cuDNN's float64
   output; the bias sum is the only rounding step.
3. TF 1.x ``CudnnLSTMSaveable`` canonical tensors (kernel ``[in + H, 4H]`` in gate order i, c, f, o; bias
   ``[4H]`` = b_W + b_R), run through TensorFlow's ``LSTMBlockCell`` op with ``forget_bias=0`` (what
   ``CudnnCompatibleLSTMCell`` does), reproduce cuDNN's output; with the op's default ``forget_bias=1`` they
   do not.
Exit status 0 when every check holds.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")


def load(golden, name):
    with np.load(os.path.join(golden, name + ".npz")) as d:
        g = {k: d[k] for k in d.files}
    return g, json.loads(str(g["config"]))


def cudnn_lstm_keras2_weights(g, p, I, H):
    """Keras 2 CuDNNLSTM (kernel, recurrent_kernel, bias) whose packing yields cuDNN's canonical arrays."""
    kernel = np.concatenate([g[f"W{p}_{k}"].reshape(I, H) for k in range(4)], axis=1)  # reinterpret, no .T
    recurrent = np.concatenate([g[f"W{p}_{k}"] for k in range(4, 8)], axis=1)           # as is, no .T
    bias = np.concatenate([g[f"b{p}_{k}"] for k in range(8)])                           # b_W i,f,c,o; b_R i,f,c,o
    return kernel, recurrent, bias


def check_keras(golden):
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    import tensorflow as tf
    import tf_keras
    from tf_keras.src.layers.rnn import gru_lstm_utils
    from tf_keras.src.saving.legacy import hdf5_format

    ok = True
    g, c = load(golden, "lstm_1l_uni")
    I, H = c["I"], c["H"]
    kernel, recurrent, bias = cudnn_lstm_keras2_weights(g, 0, I, H)
    layer = tf.compat.v1.keras.layers.CuDNNLSTM(H, return_sequences=True)
    layer.build((None, None, I))
    layer.set_weights([kernel, recurrent, bias])
    k, r, b = layer.kernel, layer.recurrent_kernel, layer.bias
    params = gru_lstm_utils.canonical_to_params(
        weights=[k[:, j * H:(j + 1) * H] for j in range(4)] + [r[:, j * H:(j + 1) * H] for j in range(4)],
        biases=[b[j * H:(j + 1) * H] for j in range(8)], shape=layer._vector_shape)
    same = np.array_equal(params.numpy(), g["opaque"])
    ok &= same
    print(f"1. tf_keras CuDNNLSTM packing == real cuDNN opaque ({g['opaque'].size} values): {same}")

    conv = hdf5_format._convert_rnn_weights(tf_keras.layers.LSTM(H), [kernel, recurrent, bias])
    import keras
    keras.config.set_floatx("float64")
    m = keras.layers.LSTM(H, return_sequences=True, activation="tanh", recurrent_activation="sigmoid",
                          dtype="float64")
    m.build((None, None, I))
    x = g["x"].transpose(1, 0, 2).astype(np.float64)
    init = [g["h0"][0].astype(np.float64), g["c0"][0].astype(np.float64)]
    for label, b_sum in (("bias summed by tf_keras (float32)", conv[2]),
                         ("bias summed in float64", bias[:4 * H].astype(np.float64) + bias[4 * H:])):
        m.set_weights([conv[0], conv[1], b_sum])
        err = float(np.abs(np.asarray(m(x, initial_state=init)).transpose(1, 0, 2) - g["y_f64"]).max())
        ok &= err < 1e-6
        print(f"2. tf_keras _convert_rnn_weights -> Keras 3 LSTM (float64), {label}: max |y - cuDNN y_f64| = "
              f"{err:.1e}")
    return ok


def tf1_canonical(g, p):
    """CudnnParamsFormatConverterLSTM's cuDNN -> TF canonical mapping, in NumPy."""
    per_gate = [np.concatenate([g[f"W{p}_{k}"], g[f"W{p}_{k + 4}"]], axis=1) for k in range(4)]  # [H, in+H]
    icfo = (0, 2, 1, 3)
    kernel = np.concatenate([per_gate[k] for k in icfo], axis=0).T                               # [in+H, 4H]
    sums = [g[f"b{p}_{k}"].astype(np.float64) + g[f"b{p}_{k + 4}"] for k in range(4)]
    return kernel, np.concatenate([sums[k] for k in icfo])


def check_tf1(golden):
    import tensorflow as tf

    ok = True
    for name in ("lstm_1l_uni", "lstm_2l_uni", "lstm_3l_bidir_12x24"):
        g, c = load(golden, name)
        D, H, T = (2 if c["bidir"] else 1), c["H"], c["T"]
        zeros = np.zeros(H, np.float32)
        errs = {}
        for forget_bias in (0.0, 1.0):
            inp = g["x"]
            for layer in range(c["L"]):
                outs = []
                for d in range(D):
                    p = layer * D + d
                    kernel, b = tf1_canonical(g, p)
                    h, cs = g["h0"][p], g["c0"][p]
                    ys = [None] * T
                    for t in (range(T) if d == 0 else range(T - 1, -1, -1)):
                        _, cs, _, _, _, _, h = tf.raw_ops.LSTMBlockCell(
                            x=inp[t], cs_prev=cs, h_prev=h, w=kernel.astype(np.float32), wci=zeros, wcf=zeros,
                            wco=zeros, b=b.astype(np.float32), forget_bias=forget_bias, cell_clip=-1.0,
                            use_peephole=False)
                        ys[t] = np.asarray(h)
                    outs.append(np.stack(ys))
                inp = np.concatenate(outs, axis=-1)
            errs[forget_bias] = float(np.abs(inp - g["y_f64"]).max())
        ok &= errs[0.0] < 1e-6 and errs[1.0] > 1e-3
        print(f"3. {name}: TF1 canonical kernel/bias + LSTMBlockCell (float32) vs cuDNN y_f64: forget_bias=0 "
              f"{errs[0.0]:.1e}, forget_bias=1 {errs[1.0]:.1e} (cuDNN strict fp32 itself: "
              f"{np.abs(g['y'] - g['y_f64']).max():.1e})")
    return ok


def main(argv):
    golden = argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "fixtures",
                                                         "cudnn-golden-lstm")
    ok = check_keras(golden)
    ok &= check_tf1(golden)
    print("all checks hold" if ok else "SOME CHECK FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
