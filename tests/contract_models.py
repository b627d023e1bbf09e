"""Child process of ``tests/keras3/test_contract_generative.py`` (tf_keras, ``TF_USE_LEGACY_KERAS=1``): for
each spec in ``OUT/specs.json`` write a model with CuDNNGRU/CuDNNLSTM layers by tf_keras's legacy
HDF5 writer, and its reference: the same architecture with tf_keras's non-cuDNN GRU/LSTM (the
settings cuDNN computes: ``reset_after=True``, sigmoid / tanh) loading that file (tf_keras converts
the CuDNN weights itself, ``hdf5_format.preprocess_weights_for_loading``), run on a seeded input.
(A mask straight into a CuDNN RNN cannot be built by tf_keras, ``fixtures/make_user_fixtures.py``:
``Embedding(mask_zero=True)`` is followed by a ``Conv1D`` that drops it, as users' saved models do.)
Writes ``OUT/built.json``: per spec the ``.h5`` and the ``.npz`` (``x``, ``y``) names.
Usage: ``TF_USE_LEGACY_KERAS=1 python contract_models.py OUT``.
"""
import json
import os
import sys
import warnings
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
warnings.filterwarnings("ignore")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf_keras as K  # noqa: E402

L = K.layers
CUDNN = {"gru": tf.compat.v1.keras.layers.CuDNNGRU, "lstm": tf.compat.v1.keras.layers.CuDNNLSTM}
PLAIN = {"gru": lambda u, **kw: L.GRU(u, reset_after=True, recurrent_activation="sigmoid", **kw),
         "lstm": lambda u, **kw: L.LSTM(u, recurrent_activation="sigmoid", **kw)}
STEPS, BATCH, VOCAB = 5, 3, 9


def build(spec, cudnn: bool):
    make = CUDNN[spec["cell"]] if cudnn else PLAIN[spec["cell"]]
    if spec["embedding"]:
        x = L.Input((STEPS,), dtype="int32", name="tokens")
        h = L.Embedding(VOCAB, spec["features"], mask_zero=spec["embedding"] == "mask_zero", name="emb")(x)
        if spec["embedding"] == "mask_zero":  # a mask reaching a CuDNN RNN cannot be built: Conv1D drops it
            h = L.Conv1D(spec["features"], 3, padding="same", name="conv")(h)
    else:
        x = L.Input((STEPS, spec["features"]), name="x")
        h = x
    for i in range(spec["layers"]):
        last = i == spec["layers"] - 1
        rnn = make(spec["units"], return_sequences=spec["return_sequences"] or not last, name=f"rnn{i}")
        if spec["merge_mode"] is not None:
            rnn = L.Bidirectional(rnn, merge_mode=spec["merge_mode"], name=f"bi{i}")
        h = rnn(h)
    if spec["dense"]:
        h = L.Dense(3, activation="tanh", name="head")(h)
    return K.Model(x, h, name="m")


def main(out: Path):
    specs = json.loads((out / "specs.json").read_text())
    built = []
    for n, spec in enumerate(specs):
        rng = np.random.default_rng(spec["seed"])
        model = build(spec, True)
        for var in model.weights:
            var.assign(rng.uniform(-0.5, 0.5, size=var.shape).astype(var.dtype.as_numpy_dtype))
        h5 = out / f"model{n}.h5"
        model.save(h5)
        plain = build(spec, False)
        plain.load_weights(h5)
        if spec["embedding"]:
            x = rng.integers(1, VOCAB, size=(BATCH, STEPS)).astype("int32")
            x[0, -2:] = 0  # padded tail: masked when mask_zero
        else:
            x = rng.normal(size=(BATCH, STEPS, spec["features"])).astype("float32")
        y = plain.predict(x, verbose=0)
        np.savez(out / f"model{n}.npz", x=x, y=np.asarray(y, np.float64))
        built.append({"h5": h5.name, "ref": f"model{n}.npz"})
    (out / "built.json").write_text(json.dumps(built))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
